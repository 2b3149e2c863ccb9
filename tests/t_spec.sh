#!/usr/bin/env bash
# Speculative decoding never changes the output: on every oracle fixture, f32 and quantized (8/8,
# 4/4), with each integer kernel this CPU runs, greedy REF decoding with SPEC=mtp DRAFT=1..4,
# SPEC=ngram and SPEC=auto generates exactly SPEC=off's tokens (80 of them: past the reference, so
# the random models' loops give the n-gram drafter accepted drafts); sampled runs (TEMPERATURE 0.6)
# too, seed for seed; PROMPT mode on the tiny-tokenizer model prints the same text; the stats line
# and chat's :stats report speculation; bad settings are refused by name.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
unset_settings
export THREADS=2
F=tests/fixtures
T=$(mktemp -d /tmp/t_spec.XXXXXX); trap 'rm -rf "$T"' EXIT
kernels_here=$("$GLM" --version | sed -n 's/^kernels this CPU runs: \(.*\) (KERNEL=.*/\1/p')
for k in vnni avx2 scalar; do grep -qw $k <<<"$kernels_here" || echo "SKIP KERNEL=$k: this CPU cannot run it (greedy identity checked with the others)"; done
SPECS=("SPEC=mtp DRAFT=1" "SPEC=mtp DRAFT=2" "SPEC=mtp DRAFT=3" "SPEC=mtp DRAFT=4" "SPEC=ngram DRAFT=1" "SPEC=ngram DRAFT=4" "SPEC=auto")
gen() {   # fixture bits... -- settings: the Generated line
  local fx=$1 bits=$2; shift 2
  env SNAP=$F/$fx REF=$F/$fx/reference.json NGEN=80 "$@" "$GLM" 64 $bits $bits 2>"$T/err" | grep '^Generated'
}
for fx in oracle_dense oracle_sparse oracle_fused_bf16; do
  for bits in 16 8 4; do
    if [ $bits = 16 ]; then kernels=auto; else kernels=$kernels_here; fi
    for k in $kernels; do
      want=$(gen $fx $bits SPEC=off KERNEL=$k)
      bad=""; drafted=0; accepted=0
      for s in "${SPECS[@]}"; do
        got=$(gen $fx $bits $s KERNEL=$k)
        [ -n "$want" ] && [ "$got" = "$want" ] || bad="$bad [$s]"
        read -r d a < <(sed -nE 's/^glm: speculation: ([0-9]+) drafted, ([0-9]+) accepted.*/\1 \2/p' "$T/err")
        drafted=$((drafted + ${d:-0})); accepted=$((accepted + ${a:-0}))
      done
      if [ -z "$bad" ] && [ $drafted -gt 0 ]; then
        echo "PASS $fx ${bits}-bit KERNEL=$k: greedy tokens of ${#SPECS[@]} SPEC/DRAFT settings == SPEC=off ($drafted drafted, $accepted accepted)"
      else echo "FAIL $fx ${bits}-bit KERNEL=$k: differs from SPEC=off for$bad (drafted $drafted)"; fi
    done
  done
done

# Sampled decoding: the same seed gives the same tokens whatever is drafted.
for seed in 1 2 3; do
  want=$(gen oracle_sparse 4 SPEC=off TEMPERATURE=0.6 SEED=$seed)
  bad=""
  for s in "${SPECS[@]}"; do [ "$(gen oracle_sparse 4 $s TEMPERATURE=0.6 SEED=$seed)" = "$want" ] || bad="$bad [$s]"; done
  if [ -n "$want" ] && [ -z "$bad" ]; then echo "PASS TEMPERATURE=0.6 SEED=$seed (4-bit): sampled tokens of every SPEC/DRAFT setting == SPEC=off"
  else echo "FAIL TEMPERATURE=0.6 SEED=$seed: differs for$bad"; fi
done
greedy=$(gen oracle_sparse 16 SPEC=off)
a=$(gen oracle_sparse 16 TEMPERATURE=0.6 SEED=9); b=$(gen oracle_sparse 16 TEMPERATURE=0.6 SEED=9)
if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" != "$greedy" ]; then echo "PASS REF honours TEMPERATURE and SEED (same seed, same tokens; not the greedy ones)"
else echo "FAIL REF sampling: '$a' / '$b' vs greedy '$greedy'"; fi
out=$(env TEMP=/tmp SNAP=$F/oracle_sparse REF=$F/oracle_sparse/reference.json "$GLM" 64 16 16 2>/dev/null | grep '^Matching')
if [ "$out" = "Matching tokens: 24/24" ]; then echo "PASS REF is greedy by default (a TEMP that is a directory is not a temperature)"; else echo "FAIL REF default: $out"; fi
out=$(env SNAP=$F/oracle_sparse REF=$F/oracle_sparse/reference.json TEMPERATURE=0.6 SEED=9 NUCLEUS=0.5 "$GLM" 64 16 16 2>&1); rc=$?
if [ $rc = 0 ] && grep -q 'sampled: not expected to match' <<<"$out" && grep -q 'NUCLEUS 0.5, SEED 9' <<<"$out"; then
  echo "PASS REF with TEMPERATURE: exit 0, the comparison marked informative, NUCLEUS and SEED reported"
else echo "FAIL REF with TEMPERATURE: rc $rc"; echo "$out" | tail -3; fi

# PROMPT mode on the oracle model with the tiny tokenizer: the same text, and the stats line.
M=$T/model; tiny_model "$M" oracle_dense
for temp in 0 0.6; do
  want=$(SNAP=$M PROMPT="Hello there" NGEN=48 TEMPERATURE=$temp SEED=4 SPEC=off "$GLM" 2>/dev/null </dev/null)
  bad=""
  for s in "${SPECS[@]}"; do
    got=$(env SNAP=$M PROMPT="Hello there" NGEN=48 TEMPERATURE=$temp SEED=4 $s "$GLM" 2>"$T/err" </dev/null)
    [ "$got" = "$want" ] || bad="$bad [$s]"
    grep -qE '^glm: speculation: [0-9]+ drafted, [0-9]+ accepted \(' "$T/err" || bad="$bad [$s: no stats line]"
  done
  if [ -n "$want" ] && [ -z "$bad" ]; then echo "PASS PROMPT TEMPERATURE=$temp: text of every SPEC/DRAFT setting == SPEC=off, with a speculation stats line"
  else echo "FAIL PROMPT TEMPERATURE=$temp: differs for$bad"; fi
done
out=$(printf 'Hello\n:stats\n' | SNAP=$M CHAT=1 NGEN=20 TEMPERATURE=0 SPEC=ngram "$GLM" 2>&1 >/dev/null)
n=$(grep -cE '^glm: speculation: [0-9]+ drafted, [0-9]+ accepted' <<<"$out")
if [ "$n" = 2 ]; then echo "PASS chat: a speculation line after the turn and in :stats"; else echo "FAIL chat speculation lines: $n"; echo "$out" | tail -4; fi

# A model without its MTP tensors: auto and ngram work, mtp is refused.
N=$T/nomtp; mkdir -p $N
for f in config.json generation_config.json model-00001-of-00001.safetensors; do ln -s "$ROOT/$F/oracle_sparse/$f" "$N/$f"; done
want=$(SNAP=$N REF=$F/oracle_sparse/reference.json NGEN=40 SPEC=off "$GLM" 64 16 16 2>/dev/null | grep '^Generated')
got=$(SNAP=$N REF=$F/oracle_sparse/reference.json NGEN=40 SPEC=auto "$GLM" 64 16 16 2>/dev/null | grep '^Generated')
if [ -n "$want" ] && [ "$got" = "$want" ]; then echo "PASS a model without MTP tensors: SPEC=auto (n-gram only) == SPEC=off"; else echo "FAIL no-MTP model with SPEC=auto"; fi
expect_fail "SPEC=mtp on a model without an MTP layer is refused" 'SPEC=mtp: this model has no MTP layer' \
  env SNAP=$N REF=$F/oracle_sparse/reference.json SPEC=mtp "$GLM" 64 16 16
expect_fail "SPEC=fast is refused by name" 'SPEC=fast: expected auto, mtp, ngram or off' env SNAP=$M PROMPT=hi SPEC=fast "$GLM"
expect_fail "DRAFT=0 is refused by name" 'DRAFT=0 is out of range' env SNAP=$M PROMPT=hi DRAFT=0 "$GLM"
expect_fail "DRAFT=17 is refused by name" 'DRAFT=17 is out of range' env SNAP=$M PROMPT=hi DRAFT=17 "$GLM"

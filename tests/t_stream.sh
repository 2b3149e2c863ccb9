#!/usr/bin/env bash
# Routed experts streamed from disk: the oracle must still match exactly with 1 slot, 2 slots and
# every expert cached; a container written by tools/convert_fp8_to_int4.py must predict exactly
# what load-time quantization of the same floats predicts, in every I/O mode and cache size; the
# process stays under RAM_GB; a budget that cannot hold the model is refused with the numbers.
source "$(dirname "$0")/lib.sh"
F="$ROOT/tests/fixtures"
T=$(mktemp -d /tmp/t_stream.XXXXXX); trap 'rm -rf "$T"' EXIT
same() { if [ -n "$2" ] && [ "$2" = "$3" ]; then echo "PASS $1"; else echo "FAIL $1"; echo "  want: $2"; echo "  got:  $3"; fi; }
for fx in oracle_dense oracle_sparse oracle_fused_bf16; do
  R="$F/$fx/reference.json"
  for slots in 1 2 64; do
    out=$(SNAP="$F/$fx" REF="$R" TF=1 MTP=1 "$GLM" $slots 16 16 2>/dev/null)
    n=$(grep -cE '^(PREFILL|MTP C).* ([0-9]+)/\1( positions)?$' <<<"$(sed -E 's/: ([0-9]+)\/([0-9]+)/ \1\/\2/' <<<"$out")")
    tf=$(grep -E '^PREFILL' <<<"$out"); mtp=$(grep -E '^MTP C' <<<"$out")
    if [[ "$tf" =~ ([0-9]+)/([0-9]+) ]] && [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] && [[ "$mtp" =~ ([0-9]+)/([0-9]+) ]] && [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ]; then
      echo "PASS $fx streamed, $slots slot(s)/layer: $tf; $mtp"; else echo "FAIL $fx streamed, $slots slot(s): $tf | $mtp"; fi
    g=$(SNAP="$F/$fx" REF="$R" "$GLM" $slots 16 16 2>/dev/null | grep '^Matching')
    if [[ "$g" =~ ([0-9]+)/([0-9]+) ]] && [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ]; then echo "PASS $fx greedy streamed, $slots slot(s): $g"
    else echo "FAIL $fx greedy streamed, $slots slot(s): $g"; fi
  done
done

# Batches of 5 rows (windows of several experts at once) with 1-3 slots per layer, the cache seeded
# by a routing history from the run before: an expert that is not in a slot is acquired alone, so
# its load never takes a slot from another member of its window (with 1 slot that stopped the
# engine with "internal: no free expert slot"); the oracle still matches.
for slots in 1 2 3; do
  for run in 1 2; do
    out=$(USAGE="$T/usage$slots.bin" BATCH=5 SNAP="$F/oracle_sparse" REF="$F/oracle_sparse/reference.json" TF=1 MTP=1 "$GLM" $slots 16 16 2>&1)
    tf=$(grep -E '^PREFILL' <<<"$out"); mtp=$(grep -E '^MTP C' <<<"$out")
    if [[ "$tf" =~ ([0-9]+)/([0-9]+) ]] && [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] && [[ "$mtp" =~ ([0-9]+)/([0-9]+) ]] && [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ]; then
      echo "PASS BATCH=5, $slots slot(s), usage history run $run: $tf; $mtp"
    else echo "FAIL BATCH=5, $slots slot(s), usage history run $run: $(grep -E 'error|PREFILL|MTP C' <<<"$out" | head -2)"; fi
  done
done

# A pre-quantized container (one read per expert) vs load-time quantization of the same floats.
PY=/usr/bin/python3
if ! $PY -c 'import numpy' 2>/dev/null; then echo "FAIL container tests need /usr/bin/python3 with numpy (apt-get install python3-numpy)"; exit 1; fi
R="$F/oracle_sparse/reference.json"
$PY "$ROOT/tools/convert_fp8_to_int4.py" "$F/oracle_sparse" "$T/c8" --expert-bits 8 --dense-bits 8 --io-bits 8 --mtp-bits 8 --indexer-bits 8 >/dev/null 2>&1 \
  && echo "PASS convert oracle_sparse to an int8 container" || echo "FAIL convert oracle_sparse to an int8 container"
want=$(SNAP="$F/oracle_sparse" REF="$R" TF=1 MTP=1 "$GLM" 64 8 8 2>/dev/null | grep pred)
want_gen=$(SNAP="$F/oracle_sparse" REF="$R" "$GLM" 64 8 8 2>/dev/null | grep '^Generated')
# (the container was just written, so the page cache holds it: with INPLACE=1, the default, the
# pread and O_DIRECT modes use every expert in place; INPLACE=0 reads each one into its slot)
for mode in DIRECT=0 DIRECT=0,INPLACE=0 DIRECT=1 DIRECT=1,INPLACE=0 DROP=1 MMAP=1 DIRECT=-1; do
  for slots in 1 2 64; do
    got=$(env ${mode//,/ } SNAP="$T/c8" REF="$R" TF=1 MTP=1 "$GLM" $slots 8 8 2>/dev/null | grep pred)
    same "container int8, $mode I/O, $slots slot(s): TF and MTP predictions equal load-time quantization" "$want" "$got"
  done
  got=$(env ${mode//,/ } SNAP="$T/c8" REF="$R" "$GLM" 2 8 8 2>/dev/null | grep '^Generated')
  same "container int8, $mode I/O: greedy tokens equal load-time quantization" "$want_gen" "$got"
done
# INPLACE: the statistics say which loads were reads and which used the page cache's copy (a run
# that mixes both kinds: t_negative.sh).
stats_of() { sed -nE 's/^glm: experts: .* read ([0-9.]+) MB .*/read=\1/p; s/^glm: page cache: ([0-9]+) expert loads.*/in_place=\1/p' | tr '\n' ' '; }
s=$(DIRECT=0 SNAP="$T/c8" REF="$R" TF=1 MTP=1 "$GLM" 64 8 8 2>&1 | stats_of)
if [[ "$s" =~ ^read=0\.0\ in_place=[1-9] ]]; then echo "PASS INPLACE: a container in the page cache is used in place, not read ($s)"; else echo "FAIL INPLACE: expected in-place loads and 0 MB read: '$s'"; fi
s=$(DIRECT=0 INPLACE=0 SNAP="$T/c8" REF="$R" TF=1 MTP=1 "$GLM" 64 8 8 2>&1 | stats_of)
if [[ "$s" =~ ^read=[0-9.]*[1-9][0-9.]*\ $ ]]; then echo "PASS INPLACE=0 reads every expert ($s)"; else echo "FAIL INPLACE=0: expected reads only: '$s'"; fi
$PY "$ROOT/tools/convert_fp8_to_int4.py" "$F/oracle_fused_bf16" "$T/c4" --expert-bits 4 --dense-bits 4 --io-bits 4 --mtp-bits 4 --indexer-bits 4 --group 32 >/dev/null 2>&1 \
  && echo "PASS convert oracle_fused_bf16 (fused, BF16) to an int4 group-32 container" || echo "FAIL convert oracle_fused_bf16 to int4 group-32"
R="$F/oracle_fused_bf16/reference.json"
want=$(SNAP="$F/oracle_fused_bf16" REF="$R" TF=1 MTP=1 GROUP=32 "$GLM" 64 4 4 2>/dev/null | grep pred)
for mode in DIRECT=0 DIRECT=1; do
  got=$(env $mode SNAP="$T/c4" REF="$R" TF=1 MTP=1 "$GLM" 2 4 4 2>/dev/null | grep pred)
  same "container int4 group 32 from fused BF16, $mode I/O: predictions equal load-time quantization" "$want" "$got"
done

# The eviction policy changes what is read, never what is computed.
a=$(CACHE_POLICY=lru SNAP="$T/c8" REF="$F/oracle_sparse/reference.json" "$GLM" 2 8 8 2>/dev/null | grep '^Generated')
b=$(CACHE_POLICY=lfu SNAP="$T/c8" REF="$F/oracle_sparse/reference.json" "$GLM" 2 8 8 2>/dev/null | grep '^Generated')
same "CACHE_POLICY=lru and lfu generate identical tokens" "$a" "$b"
expect_fail "an unknown CACHE_POLICY is refused by name" 'CACHE_POLICY=fifo' env CACHE_POLICY=fifo SNAP="$T/c8" REF="$F/oracle_sparse/reference.json" "$GLM" 2 8 8

# Memory honesty: a budget is a ceiling for the whole process, and one too small is refused.
out=$(RAM_GB=0.2 SNAP="$F/oracle_sparse" REF="$F/oracle_sparse/reference.json" "$GLM" 2>&1)
rss=$(sed -nE 's/^glm: peak RSS ([0-9.]+) GB/\1/p' <<<"$out")
if [ -n "$rss" ] && awk -v r="$rss" 'BEGIN { exit !(r < 0.2) }'; then echo "PASS peak RSS $rss GB stays under RAM_GB=0.2"; else echo "FAIL peak RSS '$rss' vs RAM_GB=0.2"; fi
expect_fail "a budget below the model's needs is refused with the numbers" 'RAM budget 0\.05 GB is too small: dense weights' \
  env RAM_GB=0.05 SNAP="$F/oracle_sparse" REF="$F/oracle_sparse/reference.json" "$GLM" 64 16 16
# REPLAY is the decode benchmark on any model; STATS writes routing counts atomically.
out=$(REPLAY=1 STATS="$T/routes.txt" SNAP="$T/c8" REF="$F/oracle_sparse/reference.json" "$GLM" 4 8 8 2>&1)
if grep -qE '^REPLAY decode: 36 tokens in [0-9.]+s \| [0-9.]+ tok/s \| expert hit [0-9.]+%' <<<"$out"; then echo "PASS REPLAY line"; else echo "FAIL REPLAY line"; echo "$out" | tail -3; fi
# its timer starts once the slot helper has faulted the expert cache in
if grep -qE '^glm: expert slots faulted in before the REPLAY timer started: [0-9.]+ s$' <<<"$out" &&
   [ "$(grep -n 'faulted in before the REPLAY timer' <<<"$out" | cut -d: -f1)" -lt "$(grep -n '^REPLAY decode' <<<"$out" | cut -d: -f1)" ]; then
  echo "PASS REPLAY waits for the slot helper before its timer"; else echo "FAIL REPLAY does not say it waited for the slot helper"; echo "$out" | tail -3; fi
# 36 tokens x 4 MoE layers (3 + MTP? no: replay runs the main model only: 3 MoE layers) x top-4 routes
total=$(awk '!/^#/ { s += $3 } END { print s }' "$T/routes.txt" 2>/dev/null)
if [ "$total" = "$((36 * 3 * 4))" ] && ! ls "$T"/routes.txt.tmp.* >/dev/null 2>&1; then echo "PASS STATS counts every routing decision ($total)"; else echo "FAIL STATS total '$total', expected $((36*3*4))"; fi

# Corrupt containers: refused by name at load, or at the expert's first use, never read as garbage.
C8="$T/c8"; R="$F/oracle_sparse/reference.json"
edit_header() {   # edit_header SRC_DIR DST_DIR PYTHON-EXPR-ON-h (h = header dict of the main shard)
  rm -rf "$2"; cp -r "$1" "$2"
  $PY - "$2/model-00001-of-00001.safetensors" "$3" <<'PYEOF'
import json, struct, sys
path, expr = sys.argv[1], sys.argv[2]
raw = open(path, 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
h = json.loads(raw[8:8 + n]); data = raw[8 + n:]
exec(expr)
hb = json.dumps(h).encode(); hb += b' ' * (-len(hb) % 8)
open(path, 'wb').write(struct.pack('<Q', len(hb)) + hb + data)
PYEOF
}
E=model.layers.2.mlp.experts.3.up_proj.weight
cp -r "$C8" "$T/trunc"; truncate -s -1000 "$T/trunc/model-00001-of-00001.safetensors"
expect_fail "truncated container: refused at load, naming the file" 'trunc/model-00001-of-00001\.safetensors' \
  env SNAP="$T/trunc" REF="$R" TF=1 "$GLM" 64 8 8
edit_header "$C8" "$T/short_qs" "h['$E.qs']['shape'] = [h['$E.qs']['shape'][0] - 1]; h['$E.qs']['data_offsets'][1] -= 4"
expect_fail "expert .qs of the wrong length: refused by name" "$E.*fit no quantized format" env SNAP="$T/short_qs" REF="$R" TF=1 "$GLM" 64 8 8
edit_header "$C8" "$T/bad_stamp" "m = json.loads(h['__metadata__']['colibri.fmt']); m['$E'] = 'int2-row'; h['__metadata__']['colibri.fmt'] = json.dumps(m)"
expect_fail "expert stamp that contradicts the bytes: refused by name" "$E: colibri.fmt says int2-row but its byte counts mean int8-row" \
  env SNAP="$T/bad_stamp" REF="$R" TF=1 "$GLM" 64 8 8

#!/usr/bin/env bash
# The engine against the independent numpy oracle (tools/make_glm_oracle.py) on every committed
# fixture: teacher forcing, greedy decoding and the MTP head must match exactly on the f32 path,
# in both MLA forms, and forcing the indexer to score on the dense fixture must change nothing.
source "$(dirname "$0")/lib.sh"
F="$ROOT/tests/fixtures"
run() { local dir=$1; shift; env SNAP="$F/$dir" REF="$F/$dir/reference.json" "$@" 2>/dev/null; }
all_match() {   # all_match NAME PATTERN OUTPUT: every "X/N" on lines matching PATTERN has X == N
  local name=$1 pat=$2 out=$3 lines
  lines=$(grep -E "$pat" <<<"$out")
  if [ -z "$lines" ]; then echo "FAIL $name: no line matching /$pat/"; echo "$out" | tail -5; return; fi
  if awk '{ split($NF, a, "/"); if (a[1] != a[2] || a[2] == 0) bad = 1 } END { exit bad }' <<<"$(sed 's/ positions$//' <<<"$lines")"; then
    echo "PASS $name"; else echo "FAIL $name: $lines"; fi
}
for fx in oracle_dense oracle_sparse oracle_fused_bf16; do
  for ab in 0 1; do
    out=$(run $fx TF=1 MTP=1 ABSORB=$ab "$GLM" 64 16 16)
    all_match "$fx f32 ABSORB=$ab teacher forcing" '^PREFILL \(teacher-forcing\) C vs oracle' "$out"
    all_match "$fx f32 ABSORB=$ab MTP" '^MTP C vs oracle' "$out"
    gen=$(run $fx ABSORB=$ab "$GLM" 64 16 16)
    all_match "$fx f32 ABSORB=$ab greedy" '^Matching tokens' "$gen"
    eval "gen_$ab=\$(grep '^Generated' <<<\"\$gen\")"
  done
  if [ -n "$gen_0" ] && [ "$gen_0" = "$gen_1" ]; then echo "PASS $fx ABSORB=0 and ABSORB=1 generate identical tokens"
  else echo "FAIL $fx ABSORB=0 and ABSORB=1 differ: '$gen_0' vs '$gen_1'"; fi
  # one position at a time (BATCH=1) must give the same predictions as one batched prefill
  a=$(run $fx TF=1 ABSORB=1 "$GLM" 64 16 16 | grep '^TF pred'); b=$(run $fx TF=1 BATCH=1 "$GLM" 64 16 16 | grep '^TF pred')
  if [ -n "$a" ] && [ "$a" = "$b" ]; then echo "PASS $fx batched prefill == one position at a time"; else echo "FAIL $fx batch vs single: $a | $b"; fi
done
# With index_topk >= the sequence length the indexer keeps every key: scoring anyway is a no-op.
out=$(run oracle_dense TF=1 MTP=1 INDEXER=always "$GLM" 64 16 16)
all_match "oracle_dense INDEXER=always teacher forcing" '^PREFILL' "$out"
all_match "oracle_dense INDEXER=always MTP" '^MTP C vs oracle' "$out"
# The sparse fixture's selection must matter: a dense-attention run would not match (guards
# against an indexer that silently keeps every key).
out=$(run oracle_sparse TF=1 CTX=64 "$GLM" 64 16 16)
all_match "oracle_sparse with a larger KV cache" '^PREFILL' "$out"
out=$(run oracle_sparse TF=1 INDEXER=off "$GLM" 64 16 16 | grep '^PREFILL')
if [ -n "$out" ] && ! grep -qE ' ([0-9]+)/\1 positions' <<<"$out"; then echo "PASS oracle_sparse: dense attention (INDEXER=off) does not match, the selection matters ($out)"
else echo "FAIL oracle_sparse: INDEXER=off still matches or did not run: $out"; fi
# Thread count must not change a single prediction (or logit order).
a=$(run oracle_sparse TF=1 MTP=1 THREADS=1 "$GLM" 64 8 8 | grep pred); b=$(run oracle_sparse TF=1 MTP=1 THREADS=2 "$GLM" 64 8 8 | grep pred)
if [ -n "$a" ] && [ "$a" = "$b" ]; then echo "PASS int8 predictions identical with 1 and 2 threads"; else echo "FAIL threads change predictions"; fi
# Determinism of the integer path (IDOT=1), default settings: the whole tensor of logits must be
# bit-identical for one position at a time (decode), any batch, either thread count and every kernel
# this CPU has (the others are skipped, and say so).
kernels=$(test_kernels)
if [ -z "$kernels" ]; then echo "FAIL tests/bin/cpu_kernels lists no kernel (run make)"; fi
skip_missing_kernels
for bits in "8 8" "4 4"; do
  ref_hash=""; ok=1; runs=0
  for batch in 1 5 256; do for threads in 1 2; do for kernel in $kernels; do
    h=$(run oracle_sparse TF=1 IDOT=1 GROUP=32 BATCH=$batch THREADS=$threads KERNEL=$kernel "$GLM" 64 $bits | grep '^TF logits hash')
    runs=$((runs + 1))
    [ -z "$ref_hash" ] && ref_hash=$h
    if [ -z "$h" ] || [ "$h" != "$ref_hash" ]; then ok=0; echo "  bits $bits BATCH=$batch THREADS=$threads KERNEL=$kernel: '$h' vs '$ref_hash'"; fi
  done; done; done
  if [ $ok = 1 ] && [ $runs -gt 0 ]; then echo "PASS IDOT=1 ${bits% *}-bit experts: logits bit-identical over $runs runs (batch 1/5/256, 1/2 threads, kernels: ${kernels% })"
  else echo "FAIL IDOT=1 ${bits% *}-bit experts: logits differ between batch sizes, thread counts or kernels"; fi
done
# 1 when teacher forcing REF on oracle_sparse gives one logits hash for every BATCH listed after it
same_hash_over_batches() {
  local ref_file=$1 batch h first="" same=1; shift
  for batch in "$@"; do
    h=$(env SNAP="$F/oracle_sparse" REF="$ref_file" TF=1 IDOT=1 THREADS=2 BATCH=$batch "$GLM" 64 4 4 2>/dev/null | grep '^TF logits hash')
    [ -z "$first" ] && first=$h
    if [ -z "$h" ] || [ "$h" != "$first" ]; then same=0; echo "  BATCH=$batch: '$h' vs '$first'" >&2; fi
  done
  echo $same
}
# A long forward works in pieces (attention: ATT_PIECE = 256 rows, SwiGLU: FFN_ROWS = 256 rows;
# the DSA selection of a piece's rows, reused by the shared-indexer layers), and teacher forcing
# keeps the logits of at most SINK_ROWS = 1024 rows at a time: 1,100 positions with BATCH=1100 must
# give the logits of 100-position chunks and of one position at a time.
long_ref=$(mktemp /tmp/glm-long-ref.XXXXXX.json)
/usr/bin/python3 - "$long_ref" <<'PY'
import json, random, sys
random.seed(7)
ids = [random.randrange(0, 512) for _ in range(1100)]
json.dump({"prompt_ids": ids[:8], "full_ids": ids}, open(sys.argv[1], "w"))
PY
if [ "$(same_hash_over_batches "$long_ref" 1100 100 1)" = 1 ]; then echo "PASS 1,100 positions: logits bit-identical with BATCH=1100 (pieces of 256 rows, sink chunks of 1,024), in chunks of 100 and one at a time"
else echo "FAIL 1,100 positions: the pieces of a long forward change the logits"; fi
# One token 1,100 times: most rows route to the same experts, so one expert gets more rows than
# the SwiGLU scratch holds (its tasks once wrote past it: make asan reports that); chunks of 1,100
# and of 100 must still agree.
/usr/bin/python3 - "$long_ref" <<'PY'
import json, sys
ids = [77] * 1100
json.dump({"prompt_ids": ids[:8], "full_ids": ids}, open(sys.argv[1], "w"))
PY
ok=$(same_hash_over_batches "$long_ref" 1100 100)
rm -f "$long_ref"
if [ "$ok" = 1 ]; then echo "PASS 1,100 copies of one token: one expert with most of the rows gives the logits of 100-position chunks"
else echo "FAIL 1,100 copies of one token: an expert with most of a forward's rows changes the logits"; fi
# Batched MoE runs several experts at once in windows bounded by the expert cache: any slot count
# (down to one) must give the same logits and read each expert once per layer.
ref=""; ok=1
for slots in 64 1 2 3; do
  out=$(run oracle_sparse TF=1 IDOT=1 THREADS=2 "$GLM" $slots 4 4)
  h=$(grep '^TF logits hash' <<<"$out"); [ -z "$ref" ] && ref=$h
  if [ -z "$h" ] || [ "$h" != "$ref" ]; then ok=0; echo "  slots $slots: '$h' vs '$ref'"; fi
done
if [ $ok = 1 ]; then echo "PASS batched MoE: logits identical with 64, 1, 2 and 3 expert slots"; else echo "FAIL batched MoE: expert slot count changes the logits"; fi

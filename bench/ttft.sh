#!/usr/bin/env bash
# Time to first token with the prefix cache (KV_CACHE) for a PREFIX-token system prompt (default
# 4000 random ids, then SUFFIX=16 ids of a user message; greedy, 8 tokens), on the GLM-5.2-shaped
# bench model (no tokenizer: bench/ttft_bench drives the Generator with token ids):
#   uncached   the first request, with an empty prefix cache
#   RAM        another request with the same prefix in the same process (the KV cache holds it)
#   disk       the same request after a restart, its entries in the page cache (just written)
#   cold disk  the same after a restart with the entries evicted from the page cache first
#   off        the same request with KV_CACHE=off: the reference its answer must equal
# The model's files stay in the page cache (they are read once before the runs, buffered reads:
# DIRECT=0), so the uncached figure is compute, not disk. Prints each run's line, then a table.
#   bench/ttft.sh [MODEL_DIR]     default $BENCH_MODEL or /work/glm_bench_small
#   env: PREFIX (4000), SUFFIX (16), RAM_GB (8), THREADS (0: all cores), KV (the cache directory,
#        default a temporary one, removed at the end)
set -u
cd "$(dirname "$0")/.."
SNAP=${1:-${BENCH_MODEL:-/work/glm_bench_small}}
[ -f "$SNAP/config.json" ] || { echo "bench/ttft.sh: no model at $SNAP (tools/make_glm_bench_model.py DIR --layers-moe 1)"; exit 1; }
make -s bench/ttft_bench tools/iobench || exit 1
KV=${KV:-$(mktemp -d /tmp/glm_ttft.XXXXXX)}
trap 'rm -rf "$KV"' EXIT
rm -rf "${KV:?}"/*
export SNAP PREFIX=${PREFIX:-4000} SUFFIX=${SUFFIX:-16} RAM_GB=${RAM_GB:-8} THREADS=${THREADS:-0} DIRECT=0 USAGE=off
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
echo "# $cpu, $(nproc) cores, $(date -u +%F), commit $(git rev-parse --short HEAD), $SNAP, PREFIX=$PREFIX SUFFIX=$SUFFIX"
cat "$SNAP"/*.safetensors > /dev/null   # the model in the page cache: the runs time compute
out=$( { KV_CACHE=$KV ./bench/ttft_bench first
         KV_CACHE=$KV ./bench/ttft_bench again
         ./tools/iobench --modes evict "$KV"/*.kv > /dev/null
         KV_CACHE=$KV ./bench/ttft_bench again | sed 's/^ttft disk /ttft cold_disk /'
         KV_CACHE=off ./bench/ttft_bench again; } 2>/dev/null)
echo "$out"
field() { awk -v n="$1" -v f="$2" '$1 == "ttft" && $2 == n { print $f }' <<<"$out"; }
ids() { sed -nE "s/^ttft $1 .* ids (.*)/\1/p" <<<"$out"; }
base=$(field uncached 3)
echo
echo "| request | time to first token (s) | share of uncached | tokens reused | answer == KV_CACHE=off |"
echo "|---|---|---|---|---|"
for r in uncached ram disk cold_disk; do
  t=$(field $r 3)
  if [ "$r" = uncached ]; then same=-; elif [ "$(ids $r)" = "$(ids off)" ]; then same=yes; else same=NO; fi
  printf '| %s | %s | %s | %s | %s |\n' "$r" "$t" "$(awk -v t="$t" -v b="$base" 'BEGIN { printf "%.1f %%", 100 * t / b }')" \
    "$(field $r 5)" "$same"
done
echo "| off (the reference, a restart) | $(field off 3) | | $(field off 5) | |"
echo "# entries: $(ls "$KV" | wc -l) files, $(du -sh "$KV" | cut -f1)"

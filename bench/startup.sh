#!/usr/bin/env bash
# Time to a first token against the RAM budget: a one-token run (REF greedy, NGEN=1: a 16-token
# prefill and one decoded token) on a cold page cache, at each RAM_GB given. Before issue 13 the
# expert slots were faulted in before the first token, so the wall time grew with the budget.
#   bench/startup.sh MODEL_DIR [GLM_BINARY] [RAM_GB ...]     (default RAM_GB: 4 20)
# Needs tools/iobench (built here on the fly) to evict the model's files from the page cache.
set -u
cd "$(dirname "$0")/.."
SNAP=${1:?usage: bench/startup.sh MODEL_DIR [GLM_BINARY] [RAM_GB ...]}; shift
GLM=${1:-./glm}; shift || true
budgets=${*:-4 20}
IOB=${IOBENCH:-/tmp/glm_iobench}
[ -x "$IOB" ] || gcc -O2 -o "$IOB" tools/iobench.c -lpthread || exit 1
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(date -u +%F), $GLM"
for gb in $budgets; do
  "$IOB" --modes evict "$SNAP"/*.safetensors | grep -o 'resident_after=[0-9.]*' | head -1 | sed "s/^/# RAM_GB=$gb evicted: /"
  t0=$(date +%s.%N)
  out=$(USAGE=off RAM_GB=$gb NGEN=1 SNAP="$SNAP" REF="$SNAP/reference.json" "$GLM" 2>&1)
  t1=$(date +%s.%N)
  slots=$(grep -oE '\([0-9]+ slots x [0-9]+ MoE layers' <<<"$out" | head -1)
  faulted=$(grep -oE 'expert slots: [0-9.]+ GB faulted in in [0-9.]+ s' <<<"$out")
  rss=$(grep -oE 'peak RSS [0-9.]+ GB' <<<"$out" | tail -1)
  printf 'RAM_GB=%-3s wall %6.2f s  %s  %s  %s\n' "$gb" "$(echo "$t1 - $t0" | bc)" "$slots" "$rss" "${faulted:-(no up-front fault)}"
done

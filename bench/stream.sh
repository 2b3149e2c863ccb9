#!/usr/bin/env bash
# Expert-streaming benchmark on the GLM-5.2-shaped bench fixture (tools/make_glm_bench_model.py):
# cold decode (files evicted from the page cache first, verified with mincore) and, for buffered
# reads, warm decode,
# each next to the raw rate of random expert-sized reads on the same files in the same I/O mode,
# measured in the same run (tools/iobench). Prints tok/s, hit rate, expert GB/s and the ratio,
# and an extrapolation to the full 78-layer model (clearly an extrapolation: 3 MoE layers here).
#
#   bench/stream.sh [MODEL_DIR]        default $BENCH_MODEL or /work/glm_bench
#   env: RAM_GB (default 8), MODE (direct | pread, default direct), IOSECS (default 6)
set -u
cd "$(dirname "$0")/.." || exit 1
MODEL=${1:-${BENCH_MODEL:-/work/glm_bench}}
RAM=${RAM_GB:-8}; MODE=${MODE:-direct}; IOSECS=${IOSECS:-6}
[ -f "$MODEL/config.json" ] || { echo "no bench model at $MODEL: python3 tools/make_glm_bench_model.py $MODEL"; exit 1; }
make -s glm tools/iobench >/dev/null || exit 1
FILES=("$MODEL"/*.safetensors)
case $MODE in
  direct) IOMODE=directhuge; ENVMODE="DIRECT=1" ;;
  pread)  IOMODE=buffered-cold; ENVMODE="DIRECT=0" ;;
  *) echo "MODE must be direct or pread"; exit 1 ;;
esac
field() { sed -nE "s|.*$1.*|\\1|p" <<<"$2" | head -1; }
echo "bench: model $MODEL, RAM_GB=$RAM, mode $MODE, $(nproc) cores, $(date -u +%FT%TZ)"

run_decode() {   # $1 = cold|warm
  [ "$1" = cold ] && tools/iobench --modes evict --threads 1 "${FILES[@]}" | grep mode=evict
  env $ENVMODE RAM_GB=$RAM REPLAY=1 SNAP="$MODEL" REF="$MODEL/reference.json" ./glm 2>&1
}
# every read mode of iobench for context; the one matching MODE is the reference of the ratio
io_all=$(tools/iobench --modes direct4k,directhuge,buffered-cold --threads 1 --seconds "$IOSECS" "${FILES[@]}" | grep "mode=")
echo "$io_all"
io_line=$(grep "mode=$IOMODE " <<<"$io_all")
io_rate=$(field 'GB/s=([0-9.]+).*' "$io_line")
# O_DIRECT bypasses the page cache, so a second "warm" run would measure the same thing
phases="cold warm"; [ "$MODE" = direct ] && phases="cold"
for phase in $phases; do
  out=$(run_decode $phase)
  replay=$(grep '^REPLAY' <<<"$out"); stats=$(grep 'glm: experts:' <<<"$out"); rss=$(grep 'peak RSS' <<<"$out" | tail -1)
  echo "$phase: $replay"
  echo "$phase: ${stats#glm: }"
  echo "$phase: ${rss#glm: }"
  n=$(field 'REPLAY decode: ([0-9]+) tokens.*' "$replay"); secs=$(field 'tokens in ([0-9.]+)s.*' "$replay")
  mb=$(field 'read ([0-9.]+) MB.*' "$stats"); rsecs=$(field 'MB in ([0-9.]+) s.*' "$stats")
  wait=$(field 'waited on disk ([0-9.]+) s.*' "$stats"); comp=$(field 'expert compute ([0-9.]+) s.*' "$stats")
  awk -v n="$n" -v t="$secs" -v mb="$mb" -v rs="$rsecs" -v io="$io_rate" -v w="$wait" -v c="$comp" -v ph="$phase" 'BEGIN {
    reading = rs > 0 ? mb / 1000 / rs : 0; overall = t > 0 ? mb / 1000 / t : 0;
    printf "%s: expert reads %.2f GB/s while reading = %.2f of iobench %s GB/s; %.2f GB/s over the whole decode = %.2f of iobench\n", ph, reading, (io > 0 ? reading / io : 0), io, overall, (io > 0 ? overall / io : 0);
    per_tok = t / n; moe_layer = (w + c) / n / 3; rest = per_tok - 3 * moe_layer;
    printf "%s: EXTRAPOLATION to GLM-5.2 (75 MoE + 3 dense layers, same hit rate and disk): %.2f s/token (%.3f tok/s) = 75 x %.3f s per MoE layer + 78/4 x %.3f s of the rest\n", ph, 75 * moe_layer + 78 / 4 * rest, 1 / (75 * moe_layer + 78 / 4 * rest), moe_layer, rest;
  }'
done

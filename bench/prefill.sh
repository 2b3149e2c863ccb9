#!/usr/bin/env bash
# Prefill benchmark on the GLM-5.2-shaped bench fixture (tools/make_glm_bench_model.py: true
# per-layer shapes, 1 dense + 3 MoE layers + the MTP layer): this engine against the round-1
# engine (commit 22b670a), in the same run, cold and warm, for prompts of several lengths; then
# decode (REPLAY) of both, and one long prompt for the attention time per token and layer at a long
# context. Prints every run's stats lines, then a summary table, a per-layer profile and a
# PROJECTION to the full 78-layer model (3 dense + 75 MoE layers; a projection, not a measurement).
#
#   bench/prefill.sh [MODEL_DIR]          default $BENCH_MODEL or /work/glm_bench
#                                         (/work/glm_bench_small, 1 dense + 1 MoE layer, fits the page
#                                         cache of a 24 GB machine: the one to use for warm figures)
#   env: LENGTHS   prompt lengths (default "255 1024 2048")
#        REPS      repetitions of each (new, old) pair, alternating, and alternating which engine of
#                  a pair runs first (default 1); the summary takes
#                  the median of each engine and the median of the per-pair ratios
#        LONG      long-context prompt for the attention figure, this engine only (default 4000; 0: skip)
#        LONG_OLD  1: also run the long prompt on the round-1 engine (slow: minutes)
#        RAM_GB    RAM budget of each run (default 8)      THREADS (default 0: all cores)
#        OLD       a round-1 glm binary (default: commit 22b670a built into a temporary directory)
#        PHASES    "warm mmap cold" (default), or any of them
# cold: the default I/O mode (O_DIRECT: every expert comes from the disk; the files are evicted
# from the page cache first); warm: buffered reads (DIRECT=0) with the files in the page cache:
# the model is evicted once, then its files are read (cat) before every run, the first of them a
# warming run whose figures are not kept (these VMs run DAMON proactive reclaim,
# /sys/kernel/mm/damon: page-cache pages nobody touched for ~6 s are paged out at up to 128 MB/s,
# so while one engine loads, the model leaks out of the cache the next run finds; the bench printed
# "page cache holds 5.4 of 7.7 GB" after its warming run when it did not read the files); mmap: the files in the page cache as for warm, both engines with MMAP=1
# (experts used in place: no copy into the slots). Prompts are random token ids (fixed seed); NGEN=1. The new engine runs with
# USAGE=off: with a routing history from earlier runs it would read the historically hottest experts
# into every slot at start, faulting the whole slot arena in during the prefill being timed (fresh
# pages cost ~1 GB/s on these VMs; measured: 255 warm tokens 10.1 s with history, 1.9 s without);
# the round-1 engine has no history and faults its arena before the prefill.
# Each prefill line ends with the whole process's wall time (load, slot faulting, prefill, exit):
# round 1 faults its slot arena in before its prefill timer starts, this engine while it works
# (fast start), so where fresh memory is slow the prefill figures alone favour round 1. REPLAY
# waits for the slot arena in both engines; their "faulted in" lines are printed.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
MODEL=${1:-${BENCH_MODEL:-/work/glm_bench}}
LENGTHS=${LENGTHS:-255 1024 2048}; LONG=${LONG:-4000}; LONG_OLD=${LONG_OLD:-0}; REPS=${REPS:-1}
RAM=${RAM_GB:-8}; THR=${THREADS:-0}; PHASES=${PHASES:-warm mmap cold}
[ -f "$MODEL/config.json" ] || { echo "no bench model at $MODEL: python3 tools/make_glm_bench_model.py $MODEL"; exit 1; }
make -s glm >/dev/null || exit 1
cc -O2 -o tools/iobench tools/iobench.c || exit 1
TMP=$(mktemp -d /tmp/prefill-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
NEW=$ROOT/glm
OLD=${OLD:-}
OLD_NAME=${OLD:+$OLD (given as OLD)}; OLD_NAME=${OLD_NAME:-22b670a}
if [ -z "$OLD" ]; then
  mkdir -p "$TMP/r1" && git archive 22b670a | tar -x -C "$TMP/r1" && make -s -C "$TMP/r1" glm >/dev/null || { echo "cannot build commit 22b670a"; exit 1; }
  OLD=$TMP/r1/glm
fi
FILES=("$MODEL"/*.safetensors)
echo "bench: prefill, model $MODEL, RAM_GB=$RAM, THREADS=$THR, REPS=$REPS, $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
echo "bench: new $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- *.c *.h || echo '+changes'), old $OLD_NAME"

# prompt of n random ids (and one more in full_ids), NGEN=1: the run is one prefill of n tokens
make_ref() {
  /usr/bin/python3 - "$1" "$TMP/ref$1.json" <<'EOF'
import json, random, sys
n = int(sys.argv[1]); random.seed(n)
ids = [random.randrange(1000, 150000) for _ in range(n + 1)]
json.dump({"prompt_ids": ids[:n], "full_ids": ids}, open(sys.argv[2], "w"))
EOF
}
# the engines of pair `rep`, alternating which runs first: with the new engine always first, its
# first cold run was its slowest in both runs of session 6 (5.2 and 4.6 s against 2.6-3.7 s)
order() { if [ $(($1 % 2)) = 1 ]; then echo new old; else echo old new; fi; }
field() { sed -nE "s|.*$1.*|\\1|p" <<<"$2" | head -1; }
evict() { tools/iobench --modes evict --threads 1 "${FILES[@]}" >/dev/null; }
cached() {   # page-cache residency of the model files (fincore, util-linux), if available
  command -v fincore >/dev/null || return 0
  fincore -b -n -o RES,SIZE "${FILES[@]}" | awk '{ r += $1; s += $2 } END { printf "  page cache holds %.1f of %.1f GB of the model\n", r / 1e9, s / 1e9 }'
}

# run ENGINE PHASE N -> sets T (prefill s), PROF, STATS; prints the lines
run() {
  local bin=$1 phase=$2 n=$3 mode=
  [ "$phase" = warm ] && mode="DIRECT=0"
  [ "$phase" = mmap ] && mode="MMAP=1"
  [ "$phase" = cold ] && evict
  [ "$phase" = warm ] || [ "$phase" = mmap ] && cat "${FILES[@]}" >/dev/null   # top the page cache up (see warm above)
  local out t0 line
  t0=$(date +%s.%N)
  out=$(env $mode USAGE=off RAM_GB=$RAM THREADS=$THR PROFILE=1 NGEN=1 SNAP="$MODEL" REF="$TMP/ref$n.json" "$bin" 2>&1)
  WALL=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  line=$(grep 'glm: prefill [0-9]' <<<"$out" | sed 's/ | decode.*//')
  T=$(field 'prefill [0-9]+ tokens ([0-9.]+) s' "$line")
  PROF=$(grep '^PROFILE' <<<"$out"); STATS=$(grep 'glm: experts:' <<<"$out")
  if [ -z "$T" ]; then echo "  FAILED: $(tail -3 <<<"$out")"; T=nan; return; fi
  echo "  $line   (the whole process: $WALL s)"
  echo "  $PROF"
  echo "  ${STATS#glm: }"
}

declare -A RES
for n in $LENGTHS; do make_ref "$n"; done
[ "$LONG" != 0 ] && make_ref "$LONG"

for phase in $PHASES; do
  if [ "$phase" = warm ] || [ "$phase" = mmap ]; then
    # evicted first, so every bench fills the page cache the same way (run reads the files): the
    # state earlier work left the page cache in changes how fast experts map in place (the 252
    # experts of a 255-token prompt: 0.54-0.65 s in one state, 0.16-0.29 s after evicting and
    # reading the files again)
    echo "warming the page cache ($phase, $(awk '{print $NF}' <<<"$LENGTHS") tokens, new engine, after evicting the model)"
    evict
    run "$NEW" "$phase" "$(awk '{print $NF}' <<<"$LENGTHS")" >/dev/null
    cached  # how warm "warm" is: what the page cache holds of the model
  fi
  for n in $LENGTHS; do
    for rep in $(seq "$REPS"); do
      for eng in $(order "$rep"); do
        bin=$NEW; [ $eng = old ] && bin=$OLD
        echo "$phase $n tokens, $eng engine$([ "$REPS" -gt 1 ] && echo ", repetition $rep") ($(cut -d' ' -f1-3 /proc/loadavg)):"
        run "$bin" "$phase" "$n"
        RES[$phase.$n.$eng]="${RES[$phase.$n.$eng]:-} $T"
        [ $eng = new ] && RES[$phase.$n.prof]=$PROF
      done
      RES[$phase.$n.ratios]="${RES[$phase.$n.ratios]:-} $(awk -v o="${RES[$phase.$n.old]##* }" -v w="${RES[$phase.$n.new]##* }" 'BEGIN { print (w > 0 && o > 0 ? o / w : "nan") }')"
    done
  done
done

echo "decode (REPLAY of $MODEL/reference.json, O_DIRECT, page cache evicted before each run):"
for rep in $(seq "$REPS"); do
  for eng in $(order "$rep"); do
    bin=$NEW; [ $eng = old ] && bin=$OLD
    evict   # both engines decode from the disk (INPLACE would use a warm page cache, round 1 cannot)
    out=$(env USAGE=off RAM_GB=$RAM THREADS=$THR REPLAY=1 SNAP="$MODEL" REF="$MODEL/reference.json" "$bin" 2>&1)
    line=$(grep '^REPLAY' <<<"$out"); echo "  $eng: $line"
    grep -E 'faulted in' <<<"$out" | sed 's/^glm: /       /'   # both fault the slot arena in before the timer
    RES[decode.$eng]="${RES[decode.$eng]:-} $(field ' ([0-9.]+) tok/s' "$line")"
  done
  RES[decode.ratios]="${RES[decode.ratios]:-} $(awk -v o="${RES[decode.old]##* }" -v w="${RES[decode.new]##* }" 'BEGIN { print (w > 0 && o > 0 ? w / o : "nan") }')"
done

if [ "$LONG" != 0 ]; then
  for eng in new old; do
    [ $eng = old ] && [ "$LONG_OLD" != 1 ] && continue
    bin=$NEW; [ $eng = old ] && bin=$OLD
    echo "long prompt: $LONG tokens, $eng engine, cold:"
    run "$bin" cold "$LONG"
    RES[long.$eng]=$T; RES[long.$eng.prof]=$PROF
  done
fi

# ---- summary ------------------------------------------------------------------------------------
median() { tr ' ' '\n' <<<"$*" | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
L=$(/usr/bin/python3 -c "import json; c=json.load(open('$MODEL/config.json')); print(c['num_hidden_layers'], sum(1 for t in c['mlp_layer_types'] if t == 'dense'))")
NL=${L% *}; ND=${L#* }; NM=$((NL - ND))
echo
echo "summary (seconds of prefill, same run, medians of $REPS; speedup = median of old / new over the alternating pairs):"
printf "| %-5s | %7s | %9s | %9s | %7s | %-23s | %9s |\n" phase tokens "old s" "new s" speedup "each pair" "new pos/s"
printf "|-------|---------|-----------|-----------|---------|-------------------------|-----------|\n"
for phase in $PHASES; do for n in $LENGTHS; do
  o=$(median ${RES[$phase.$n.old]:-}); w=$(median ${RES[$phase.$n.new]:-}); r=$(median ${RES[$phase.$n.ratios]:-})
  pairs=$(for x in ${RES[$phase.$n.ratios]:-}; do printf "%.2f " "$x"; done)
  awk -v p="$phase" -v n="$n" -v o="$o" -v w="$w" -v r="$r" -v pairs="$pairs" 'BEGIN { printf "| %-5s | %7d | %9.2f | %9.2f | %6.2fx | %-23s | %9.1f |\n", p, n, o, w, r, pairs, (w > 0 ? n / w : 0) }'
done; done
awk -v o="$(median ${RES[decode.old]:-})" -v w="$(median ${RES[decode.new]:-})" -v r="$(median ${RES[decode.ratios]:-})" \
    -v pairs="$(for x in ${RES[decode.ratios]:-}; do printf "%.2f " "$x"; done)" \
    'BEGIN { printf "decode (REPLAY, medians): old %.2f tok/s, new %.2f tok/s (%.2fx); new / old of each pair: %s(median %.2fx)\n", o, w, (o > 0 ? w / o : 0), pairs, r }'

# per-layer profile of the new engine and the projection to GLM-5.2 (78 layers: 3 dense + 75 MoE)
echo
echo "per-layer profile, new engine ($NL layers here: $ND dense + $NM MoE; ms per token and layer):"
printf "| %-11s | %6s | %9s | %9s | %9s | %9s | %12s |\n" run tokens attention "dense MLP" "MoE all" "MoE comp" "PROJECTION s"
printf "|-------------|--------|-----------|-----------|-----------|-----------|--------------|\n"
prof_row() {   # label n profile-line
  local a d m c lm
  a=$(field 'attention ([0-9.]+) s' "$3"); d=$(field 'dense MLP ([0-9.]+) s' "$3"); m=$(field 'MoE ([0-9.]+) s' "$3")
  c=$(field 'routed experts ([0-9.]+) s' "$3"); lm=$(field 'lm_head ([0-9.]+) s' "$3")
  [ -z "$a" ] && return
  awk -v lab="$1" -v n="$2" -v a="$a" -v d="$d" -v m="$m" -v c="$c" -v lm="$lm" -v nl="$NL" -v nd="$ND" -v nm="$NM" 'BEGIN {
    at = a / n / nl * 1e3; dt = (nd ? d / n / nd * 1e3 : 0); mt = (nm ? m / n / nm * 1e3 : 0); ct = (nm ? c / n / nm * 1e3 : 0);
    proj = (78 * at + 3 * dt + 75 * mt) * n / 1e3 + lm;
    printf "| %-11s | %6d | %9.3f | %9.3f | %9.3f | %9.3f | %12.1f |\n", lab, n, at, dt, mt, ct, proj }'
}
for phase in $PHASES; do for n in $LENGTHS; do prof_row "$phase" "$n" "${RES[$phase.$n.prof]:-}"; done; done
[ "$LONG" != 0 ] && prof_row "cold long" "$LONG" "${RES[long.new.prof]:-}"
[ "$LONG" != 0 ] && [ "$LONG_OLD" = 1 ] && prof_row "cold long r1" "$LONG" "${RES[long.old.prof]:-}"
echo "PROJECTION = 78 x attention + 3 x dense MLP + 75 x MoE per token and layer, times the tokens, + lm_head:"
echo "the full GLM-5.2 on this machine if every layer behaved like these (same expert hit rate and disk),"
echo "an extrapolation from $NL layers, not a measurement. MoE all = routed compute + disk wait + router/shared."

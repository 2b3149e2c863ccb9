#!/usr/bin/env bash
# Does a usage history help the next cold run? One run (256 random tokens, REPLAY) writes a
# history; then, on OTHER random token sequences, each case runs without (USAGE=off) and with
# that history, on a cold page cache, and prints the expert hit rate and tok/s.
#   bench/usage.sh MODEL_DIR [RAM_GB]     (default RAM_GB 8)
set -u
cd "$(dirname "$0")/.."
SNAP=${1:?usage: bench/usage.sh MODEL_DIR [RAM_GB]}; GB=${2:-8}
IOB=${IOBENCH:-/tmp/glm_iobench}
[ -x "$IOB" ] || gcc -O2 -o "$IOB" tools/iobench.c -lpthread || exit 1
T=$(mktemp -d /tmp/bench_usage.XXXXXX); trap 'rm -rf "$T"' EXIT
/usr/bin/python3 - "$T" <<'PYEOF'
import json, random, sys
t = sys.argv[1]
w = random.Random(11); ids = [w.randrange(1000, 150000) for _ in range(256)]
json.dump({'prompt_ids': ids[:16], 'full_ids': ids}, open(t + '/writer.json', 'w'))
r = random.Random(7); ids = [r.randrange(1000, 150000) for _ in range(64)]
for n in (8, 16, 64): json.dump({'prompt_ids': ids[:8], 'full_ids': ids[:n]}, open(t + '/replay%d.json' % n, 'w'))
json.dump({'prompt_ids': ids[:32], 'full_ids': ids[:48]}, open(t + '/prompt32.json', 'w'))
PYEOF
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(date -u +%F), RAM_GB=$GB"
USAGE="$T/hist.bin" RAM_GB=$GB REPLAY=1 SNAP="$SNAP" REF="$T/writer.json" ./glm 2>&1 | grep '^REPLAY' | sed 's/^/# history writer: /'
cp "$T/hist.bin" "$T/saved.bin"
for case in "REPLAY=1 REF=$T/replay8.json" "REPLAY=1 REF=$T/replay16.json" "REPLAY=1 REF=$T/replay64.json" "NGEN=16 REF=$T/prompt32.json"; do
  for u in off "$T/hist.bin"; do
    cp "$T/saved.bin" "$T/hist.bin"
    "$IOB" --modes evict "$SNAP"/*.safetensors >/dev/null
    out=$(env $case USAGE=$u RAM_GB=$GB SNAP="$SNAP" ./glm 2>&1)
    hit=$(grep -oE 'hit [0-9.]+%' <<<"$out" | head -1)
    speed=$(grep -oE '(\| [0-9.]+ tok/s|prefill [0-9]+ tokens [0-9.]+ s \| decode [0-9]+ tokens [0-9.]+ s \([0-9.]+ tok/s\))' <<<"$out" | head -1)
    run=$(grep -oE 'run [0-9.]+ s' <<<"$out")
    pre=$(grep -oE '[0-9]+ hot experts read ahead while the disk was idle, [0-9]+ of them hit' <<<"$out")
    printf '%-28s USAGE=%-4s %s  %s  %s  %s\n' "$(sed "s|$T/||" <<<"$case")" "$([ "$u" = off ] && echo off || echo file)" "$hit" "$speed" "$run" "$pre"
  done
done

#!/usr/bin/env bash
# Files glm writes survive kill -9 at any moment: a STATS file is either the old complete file or
# the new complete file, never torn, and no temporary file outlives the next write. 100 REPLAY runs on the
# sparse oracle fixture (each writes STATS at exit) are killed with SIGKILL at random moments
# spread over a run's whole duration, the write included.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
unset_settings
F=tests/fixtures
T=$(mktemp -d /tmp/t_stats_kill.XXXXXX); trap 'rm -rf "$T"' EXIT
run() { env SNAP=$F/oracle_sparse REF=$F/oracle_sparse/reference.json REPLAY=1 STATS="$T/routes.txt" THREADS=1 "$GLM" 4 16 16 >/dev/null 2>&1; }
complete() {   # the whole file: the header, then lines "layer expert count" summing to 36 tokens x 3 MoE layers x top-4
  [ "$(head -1 "$T/routes.txt")" = "# layer expert count" ] &&
    awk 'NR > 1 { if (NF != 3) bad = 1; s += $3 } END { exit bad || s != 432 }' "$T/routes.txt"
}
start=$(date +%s%N); run; took=$(( ($(date +%s%N) - start) / 1000 ))   # microseconds
if complete; then echo "PASS a STATS run writes a complete file"; else echo "FAIL a STATS run's file is not complete"; exit 1; fi
torn=0; litter=0; finished=0
for i in $(seq 100); do
  run & pid=$!
  delay=$(( RANDOM * RANDOM % (took * 13 / 10 + 1) ))
  sleep "$(printf '0.%06d' "$delay")"
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null && finished=$((finished + 1))
  complete || torn=$((torn + 1))
  ls "$T" | grep -q 'tmp' && litter=$((litter + 1))
done
if [ $torn = 0 ]; then echo "PASS 100 kill -9 at random moments ($finished runs finished first): never a torn STATS file"
else echo "FAIL $torn of 100 kills left a torn or missing STATS file"; fi
# A kill in the microseconds between naming the data (linkat) and the rename can leave one
# PATH.tmp.PID; the next write sweeps it (below). So: no temporary file survives the next write.
run
if ! ls "$T" | grep -q 'tmp'; then echo "PASS ...and no temporary file survives the next write ($litter of 100 kills left one until then)"
else echo "FAIL temporary files left after the next write: $(ls "$T")"; fi
# the leftover of a kill between the two system calls that name and rename the data is swept by
# the next write: a PATH.tmp.PID of a process that is gone disappears, one of a live process stays
sh -c 'exit 0' & dead=$!; wait $dead
touch "$T/routes.txt.tmp.$dead" "$T/routes.txt.tmp.$$"
run
if [ ! -e "$T/routes.txt.tmp.$dead" ] && [ -e "$T/routes.txt.tmp.$$" ] && complete; then
  echo "PASS the next STATS write removes a dead process's temporary file and keeps a live one's"
else echo "FAIL stale temporary files: $(ls "$T")"; fi

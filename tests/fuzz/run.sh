#!/usr/bin/env bash
# Runs libFuzzer targets one after the other, each for FUZZ_SECONDS (default 60) on one core:
#   FUZZ_SECONDS=300 bash tests/fuzz/run.sh [NAME ...]      (default: every tests/fuzz/fuzz_*.c)
# `make fuzz` builds tests/bin/fuzz_NAME (clang -fsanitize=fuzzer,address,undefined) and calls this;
# tests/t_fuzz.sh calls it with FUZZ_SECONDS=15. Each target starts from its seeds
# (tests/fuzz/corpus/NAME) plus what earlier runs found (tests/bin/fuzz_corpus/NAME). A crash, leak,
# sanitizer report or timeout is kept as tests/fuzz/regressions/NAME/crash-... (commit it with the
# fix: `make test` replays it from then on). Prints per target one line of figures from
# -print_final_stats (executions, coverage: cov = code edges, ft = features) and PASS or FAIL.
cd "$(dirname "$0")/../.." || exit 2
SECONDS_EACH=${FUZZ_SECONDS:-60}
names=("$@")
[ ${#names[@]} -eq 0 ] && for f in tests/fuzz/fuzz_*.c; do n=${f#tests/fuzz/fuzz_}; names+=("${n%.c}"); done
failed=0
for name in "${names[@]}"; do
  bin=tests/bin/fuzz_$name
  if [ ! -x "$bin" ]; then echo "FAIL fuzz_$name: $bin is not built (make fuzz-bins)"; failed=1; continue; fi
  work=tests/bin/fuzz_corpus/$name keep=tests/fuzz/regressions/$name
  mkdir -p "$work" "$keep"
  log=$(mktemp /tmp/fuzz_$name.XXXXXX)
  # -rss_limit_mb: the inputs are small; a target that needs more is a finding. -timeout: seconds
  # for one input. Leaks are reported (ASan's leak check runs after each input that grew memory).
  "$bin" -max_total_time="$SECONDS_EACH" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$keep/" "$work" "tests/fuzz/corpus/$name" >"$log" 2>&1
  rc=$?
  execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$log" | tail -1)
  rate=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+)/\1/p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1)
  cov=$(sed -nE 's/.*cov: ([0-9]+).*/\1/p' <<<"$last"); ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
  corp=$(sed -nE 's/.* corp: ([0-9]+\/[0-9]+[a-zA-Z]*).*/\1/p' <<<"$last")
  echo "fuzz_$name: ${execs:-?} executions in ${SECONDS_EACH} s (${rate:-?}/s), cov ${cov:-?} ft ${ft:-?}, corpus ${corp:-?}"
  if [ $rc -eq 0 ] && ! grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$log"; then
    echo "PASS fuzz_$name: ${execs:-?} inputs in ${SECONDS_EACH} s, no crash, leak or sanitizer report"
  else
    echo "FAIL fuzz_$name: exit $rc, kept in $keep/: $(grep -oE 'Test unit written to [^ ]+' "$log" | tail -1)"
    grep -E 'ERROR|runtime error|SUMMARY' "$log" | head -5
    failed=1
  fi
  rm -f "$log"
done
exit $failed

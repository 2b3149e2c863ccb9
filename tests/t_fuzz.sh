#!/usr/bin/env bash
# Every parser fuzz target (tests/fuzz/fuzz_NAME.c) in the suite:
#   1. each seed (tests/fuzz/corpus/NAME) and each crash ever kept (tests/fuzz/regressions/NAME)
#      replays cleanly through tests/bin/fuzz_replay_NAME (gcc, no libFuzzer; under `make asan`
#      with ASan + UBSan), so a fixed crash stays fixed;
#   2. with clang installed, each target fuzzes for FUZZ_SECONDS (default 15 here; 0 skips) from
#      its seeds: no crash, leak or sanitizer report. Without clang: a SKIP line says so.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
names=()
for f in tests/fuzz/fuzz_*.c; do n=${f#tests/fuzz/fuzz_}; names+=("${n%.c}"); done
[ ${#names[@]} -gt 0 ] || { echo "FAIL no fuzz target in tests/fuzz"; exit 1; }
for name in "${names[@]}"; do
  replay=tests/bin/fuzz_replay_$name
  if [ ! -x "$replay" ]; then echo "FAIL fuzz_$name: $replay is not built (make test builds it)"; continue; fi
  seeds=(tests/fuzz/corpus/$name/*)
  if [ ! -e "${seeds[0]}" ]; then echo "FAIL fuzz_$name: no seed in tests/fuzz/corpus/$name"
  elif out=$(timeout -k 5 300 "$replay" "${seeds[@]}" 2>&1); then echo "PASS fuzz_$name: ${#seeds[@]} seeds replay cleanly"
  else echo "FAIL fuzz_$name: a seed fails the replay"; tail -5 <<<"$out"; fi
  for r in tests/fuzz/regressions/$name/*; do
    [ -f "$r" ] || continue
    if out=$(timeout -k 5 60 "$replay" "$r" 2>&1); then echo "PASS fuzz_$name regression $(basename "$r") replays cleanly"
    else echo "FAIL fuzz_$name regression $r: crashes again"; tail -5 <<<"$out"; fi
  done
done
secs=${FUZZ_SECONDS:-15}
if [ "$secs" = 0 ]; then
  echo "SKIP fuzzing: FUZZ_SECONDS=0"
elif ! command -v "${CLANG:-clang}" >/dev/null; then
  echo "SKIP fuzzing: clang is not installed (apt-get install clang); seeds and regressions were replayed"
elif ! make -s fuzz-bins >/dev/null 2>&1; then
  echo "FAIL fuzzing: make fuzz-bins failed (clang without libFuzzer? apt-get install libclang-rt-dev)"
  make fuzz-bins 2>&1 | tail -5
else
  # two at a time (each fuzzer is one process on one core): half the wall time on CI's 2 cores
  out=$(mktemp -d /tmp/t_fuzz.XXXXXX)
  half=$(( (${#names[@]} + 1) / 2 ))
  FUZZ_SECONDS=$secs bash tests/fuzz/run.sh "${names[@]:0:half}" >"$out/a" 2>&1 &
  FUZZ_SECONDS=$secs bash tests/fuzz/run.sh "${names[@]:half}" >"$out/b" 2>&1
  wait
  cat "$out/a" "$out/b" | grep -E '^(PASS|FAIL|fuzz_|==|SUMMARY)'
  rm -rf "$out"
fi

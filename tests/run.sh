#!/usr/bin/env bash
# Test runner: runs every unit-test binary in tests/bin and every tests/t_*.sh script.
# Each test prints lines "PASS name" or "FAIL name: why" (and "SKIP name: why" for what this machine
# cannot run, e.g. a kernel its CPU lacks: shown, counted apart, never as a pass); a program that
# exits non-zero without printing a FAIL counts as one failure. Ends with "N passed, N failed".
cd "$(dirname "$0")/.." || exit 2
pass=0; fail=0; skip=0
run_one() {
  local label=$1; shift
  local out rc t0=$SECONDS
  out=$("$@" 2>&1); rc=$?
  local p f
  p=$(grep -c '^PASS ' <<<"$out"); f=$(grep -c '^FAIL ' <<<"$out")
  grep -E '^(FAIL|PASS|SKIP) ' <<<"$out" | sed "s|^|[$label] |" | grep -v '\] PASS '
  skip=$((skip + $(grep -c '^SKIP ' <<<"$out")))
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "[$label] FAIL: exited $rc without reporting a failure"; echo "$out" | tail -20; f=1
  fi
  [ "$f" -gt 0 ] && echo "$out" | grep -v -E '^PASS ' | tail -30 | sed "s|^|[$label]   |"
  echo "$label: $p passed, $f failed ($((SECONDS - t0)) s)"
  pass=$((pass+p)); fail=$((fail+f))
}
for b in tests/bin/test_*; do [ -x "$b" ] && run_one "$(basename "$b")" "$b"; done
for s in tests/t_*.sh; do [ -f "$s" ] && run_one "$(basename "$s")" bash "$s"; done
[ "$skip" -gt 0 ] && echo "$skip skipped (this machine cannot run them)"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]

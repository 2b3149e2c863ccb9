#!/usr/bin/env bash
# Test runner: runs every unit-test binary in tests/bin and every tests/t_*.sh script.
# Each test prints lines "PASS name" or "FAIL name: why"; a program that exits non-zero
# without printing a FAIL counts as one failure. Ends with "N passed, N failed".
cd "$(dirname "$0")/.." || exit 2
pass=0; fail=0
run_one() {
  local label=$1; shift
  local out rc
  out=$("$@" 2>&1); rc=$?
  local p f
  p=$(grep -c '^PASS ' <<<"$out"); f=$(grep -c '^FAIL ' <<<"$out")
  grep -E '^(FAIL|PASS) ' <<<"$out" | sed "s|^|[$label] |" | grep -v '\] PASS ' 
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "[$label] FAIL: exited $rc without reporting a failure"; echo "$out" | tail -20; f=1
  fi
  [ "$f" -gt 0 ] && echo "$out" | grep -v -E '^PASS ' | tail -30 | sed "s|^|[$label]   |"
  echo "$label: $p passed, $f failed"
  pass=$((pass+p)); fail=$((fail+f))
}
for b in tests/bin/test_*; do [ -x "$b" ] && run_one "$(basename "$b")" "$b"; done
for s in tests/t_*.sh; do [ -f "$s" ] && run_one "$(basename "$s")" bash "$s"; done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]

#!/usr/bin/env bash
# The suite passes on any x86-64: a test of a kernel this CPU lacks is skipped and says so, every
# kernel it has is cross-checked. Proved here on whatever machine runs it:
#   - tests/bin/cpu_kernels (what the scripts run) agrees with glm itself: glm runs every kernel
#     listed "yes" and refuses every one listed "no";
#   - with TEST_CPU_FLAGS standing for smaller CPUs (an AVX2-only EPYC; no SIMD at all), the kernel
#     tests (tests/bin/test_quant, tests/t_oracle.sh) print "SKIP NAME: this CPU has no ...", never
#     run the masked kernel, and still pass.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
[ -x "$CPU_KERNELS" ] || { echo "FAIL $CPU_KERNELS is not built (make test builds it)"; exit 1; }
unset TEST_CPU_FLAGS
F=tests/fixtures/oracle_dense
real=$("$CPU_KERNELS")
grep -qx 'scalar yes' <<<"$real" && echo "PASS cpu_kernels: scalar is always available" || echo "FAIL cpu_kernels: no 'scalar yes' in: $real"

# glm's own decision is the one the tests follow
while read -r k avail _; do
  out=$(env -u TEST_CPU_FLAGS SNAP=$F REF=$F/reference.json TF=1 KERNEL=$k "$GLM" 64 16 16 2>&1); rc=$?
  if [ "$avail" = yes ]; then
    [ $rc -eq 0 ] && echo "PASS glm runs KERNEL=$k, which cpu_kernels lists as available" || { echo "FAIL glm KERNEL=$k exit $rc"; tail -3 <<<"$out"; }
  else
    [ $rc -eq 1 ] && grep -q "KERNEL=$k: this CPU cannot run it" <<<"$out" && echo "PASS glm refuses KERNEL=$k, which cpu_kernels lists as missing" \
      || { echo "FAIL glm KERNEL=$k: expected a refusal, exit $rc"; tail -3 <<<"$out"; }
  fi
done <<<"$real"

# masked_run NAME FLAGS: the kernel tests as on a CPU with only FLAGS
masked_run() {
  local name=$1 flags=$2 listed missing out
  listed=$(TEST_CPU_FLAGS=$flags "$CPU_KERNELS")
  missing=$(awk '$2 == "no" { print $1 }' <<<"$listed")
  for prog in tests/bin/test_quant tests/t_oracle.sh; do
    if [[ $prog == *.sh ]]; then out=$(TEST_CPU_FLAGS=$flags bash "$prog" 2>&1); else out=$(TEST_CPU_FLAGS=$flags "$prog" 2>&1); fi
    local rc=$? ok=1 why=""
    [ $rc -eq 0 ] && ! grep -q '^FAIL' <<<"$out" || { ok=0; why="failed (exit $rc): $(grep -m3 '^FAIL' <<<"$out")"; }
    grep -q '^PASS' <<<"$out" || { ok=0; why="no PASS line"; }
    for k in $missing; do
      grep -q "^SKIP $k: this CPU has no " <<<"$out" || { ok=0; why="$why no 'SKIP $k' line"; }
      # the lines that list the kernels each program compared
      grep -E '^kernels compared with scalar:|^PASS .*kernels: ' <<<"$out" | grep -qE "\b$k\b" && { ok=0; why="$why the masked kernel $k ran"; }
    done
    [ $ok = 1 ] && echo "PASS $name: $(basename "$prog") skips $(echo $missing | sed 's/ /, /g') and passes" || echo "FAIL $name: $(basename "$prog") $why"
  done
}
# Only meaningful where the masked kernel exists; on a smaller CPU the real run above is the proof.
if grep -qx 'vnni yes' <<<"$real"; then masked_run "as an AVX2-only CPU" "avx2 fma bmi2"
else echo "SKIP mask AVX-512 VNNI: this CPU has no AVX-512 VNNI (the real run is the AVX2-only case)"; fi
if grep -qx 'avx2 yes' <<<"$real"; then masked_run "as a CPU without SIMD kernels" "sse2"
else echo "SKIP mask AVX2: this CPU has no AVX2 (the real run is the scalar-only case)"; fi

# OpenMP may grant a region fewer threads than quant.h asks for (OMP_THREAD_LIMIT, a busy or nested
# runtime): every chunk of a matmul must still be computed, the ranges of threads that never
# started being taken by the others (a version that stole only from the granted threads' ranges
# failed 35 checks here).
out=$(OMP_THREAD_LIMIT=1 tests/bin/test_quant 2>&1); rc=$?
if [ $rc -eq 0 ] && ! grep -q '^FAIL' <<<"$out" && grep -q '^PASS' <<<"$out"; then
  echo "PASS test_quant with OMP_THREAD_LIMIT=1 (regions granted fewer threads than asked for)"
else echo "FAIL test_quant with OMP_THREAD_LIMIT=1: exit $rc, $(grep -m2 '^FAIL' <<<"$out")"; fi

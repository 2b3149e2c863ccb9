#!/usr/bin/env bash
# An AVX2-only x86 CPU, emulated: the portable build (ARCH=x86-64-v3: glm, test_quant, cpu_kernels,
# test_generator) under qemu-x86_64, whose CPU offers AVX2 and no AVX-512 or AVX-VNNI, whatever the
# host has. Proves on any host what an AMD EPYC with AVX2 only would run: the run-time choice
# (KERNEL=auto picks avx2; vnni and avxvnni refused; qemu traps an instruction the emulated CPU
# lacks), the kernels bit-exact to the scalar reference, the Generator's tests, the oracle
# fixtures matched exactly, and the integer path's logits bit-identical to the native build's
# ($GLM, whatever kernel this host picks) in decode (BATCH=1) and batched (BATCH=5). Says nothing
# about speed. OMP_WAIT_POLICY is set so that glm does not re-execute itself: a re-executed glm
# would run natively, outside the emulator. Needs qemu-user (.ci/run installs it); without it SKIP.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
command -v qemu-x86_64 >/dev/null || { echo "SKIP avx2: no qemu-x86_64 (apt-get install qemu-user)"; exit 0; }
[ "$(uname -m)" = x86_64 ] || { echo "SKIP avx2: not an x86-64 host"; exit 0; }
[ -x "$GLM" ] || { echo "FAIL avx2: $GLM (the native build to compare with) is not built"; exit 1; }
V3=tests/bin/x86-64-v3
out=$(make -s glm-x86-64-v3 $V3/test_quant $V3/cpu_kernels $V3/test_generator 2>&1) \
  || { echo "FAIL avx2: x86-64-v3 build failed"; tail -20 <<<"$out"; exit 1; }
export OMP_WAIT_POLICY=passive
unset TEST_CPU_FLAGS
emu() { qemu-x86_64 -cpu max "$@" 2> >(grep -v 'TCG doesn.t support requested feature' >&2); }
F=tests/fixtures

yes=$(emu $V3/cpu_kernels | awk '$2 == "yes" { printf "%s ", $1 }')
[ "$yes" = "scalar avx2 " ] && echo "PASS avx2: the emulated CPU offers the kernels of an AVX2-only one: $yes" \
  || echo "FAIL avx2: kernels detected '$yes' under emulation, want 'scalar avx2'"

out=$(emu ./glm-x86-64-v3 --version 2>&1)
grep -q "kernels this CPU runs: avx2 scalar (KERNEL=auto picks avx2)" <<<"$out" \
  && echo "PASS avx2: glm --version: KERNEL=auto picks avx2" || echo "FAIL avx2: --version says: $out"
for k in vnni avxvnni; do
  out=$(SNAP=$F/oracle_dense REF=$F/oracle_dense/reference.json KERNEL=$k emu ./glm-x86-64-v3 64 16 16 2>&1); rc=$?
  [ $rc -eq 1 ] && grep -q "KERNEL=$k: this CPU cannot run it" <<<"$out" && echo "PASS avx2: glm refuses KERNEL=$k" \
    || echo "FAIL avx2: KERNEL=$k exit $rc: $(tail -1 <<<"$out")"
done

out=$(emu $V3/test_quant 2>&1); rc=$?
if [ $rc -eq 0 ] && ! grep -q '^FAIL' <<<"$out" && grep -qx "kernels compared with scalar: avx2" <<<"$out"; then
  echo "PASS avx2: test_quant ($(grep -c '^PASS' <<<"$out") checks, avx2 against scalar)"
else echo "FAIL avx2: test_quant exit $rc: $(grep -m3 -E '^FAIL|^kernels' <<<"$out")"; fi
out=$(emu $V3/test_generator 2>&1); rc=$?
[ $rc -eq 0 ] && ! grep -q '^FAIL' <<<"$out" && echo "PASS avx2: test_generator ($(grep -c '^PASS' <<<"$out") checks)" \
  || echo "FAIL avx2: test_generator exit $rc: $(grep -m3 '^FAIL' <<<"$out")"

# The oracle fixtures (f32 path) with KERNEL=auto: teacher forcing, MTP and greedy match exactly
oracle_exact avx2 qemu-x86_64 -cpu max ./glm-x86-64-v3

# Integer path (IDOT=1): the same logits as the native build, bit for bit, decode and batched
logits_as_native avx2 "auto" qemu-x86_64 -cpu max ./glm-x86-64-v3

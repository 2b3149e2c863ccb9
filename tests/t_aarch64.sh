#!/usr/bin/env bash
# aarch64 under emulation: the cross-built kernel tests and engine under qemu-aarch64, on emulated
# CPUs with and without the NEON extensions. Proves the run-time choice (cortex-a72: base NEON
# only; neoverse-n1: + dotprod; max: + i8mm; qemu traps an instruction the emulated CPU lacks),
# every NEON kernel bit-exact to the scalar reference (tests/bin/aarch64/test_quant), the oracle
# fixtures matched exactly, and the integer path's logits bit-identical to the x86 build's ($GLM)
# with every kernel, in decode (BATCH=1, row kernels) and batched (BATCH=5, GEMM). Says nothing
# about speed. Needs Debian's gcc-aarch64-linux-gnu and qemu-user (.ci/run installs them);
# without them it prints SKIP.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
CC_A64=${AARCH64_CC:-aarch64-linux-gnu-gcc}
SYSROOT=${AARCH64_SYSROOT:-/usr/aarch64-linux-gnu}
command -v "$CC_A64" >/dev/null || { echo "SKIP aarch64: no cross compiler $CC_A64 (apt-get install gcc-aarch64-linux-gnu)"; exit 0; }
command -v qemu-aarch64 >/dev/null || { echo "SKIP aarch64: no qemu-aarch64 (apt-get install qemu-user)"; exit 0; }
[ -e "$SYSROOT/lib/ld-linux-aarch64.so.1" ] || { echo "SKIP aarch64: no arm64 C library in $SYSROOT (apt-get install libc6-dev-arm64-cross)"; exit 0; }
[ -x "$GLM" ] || { echo "FAIL aarch64: $GLM (the x86 build to compare with) is not built"; exit 1; }
out=$(make -s glm-aarch64 tests/bin/aarch64/test_quant tests/bin/aarch64/cpu_kernels 2>&1) \
  || { echo "FAIL aarch64: cross build failed"; tail -20 <<<"$out"; exit 1; }
export QEMU_LD_PREFIX=$SYSROOT
a64() { local cpu=$1; shift; qemu-aarch64 -cpu "$cpu" "$@"; }
F=tests/fixtures

# The kernels each emulated CPU offers, as quant.h detects them (getauxval)
for want in "cortex-a72 neon" "neoverse-n1 neon dotprod" "max neon dotprod i8mm"; do
  cpu=${want%% *}; yes=$(a64 "$cpu" tests/bin/aarch64/cpu_kernels | awk '$2 == "yes" { printf "%s ", $1 }')
  [ "$yes" = "scalar ${want#* } " ] && echo "PASS aarch64 $cpu: kernels detected: $yes" \
    || echo "FAIL aarch64 $cpu: kernels detected '$yes', want 'scalar ${want#* }'"
done

# Every kernel the CPU has against the scalar reference; on cortex-a72 the extensions are skipped
# and the base kernel runs without them
for want in "max neon dotprod i8mm" "cortex-a72 neon"; do
  cpu=${want%% *}; out=$(a64 "$cpu" tests/bin/aarch64/test_quant 2>&1); rc=$?
  if [ $rc -eq 0 ] && ! grep -q '^FAIL' <<<"$out" && grep -qx "kernels compared with scalar: ${want#* }" <<<"$out"; then
    echo "PASS aarch64 $cpu: test_quant ($(grep -c '^PASS' <<<"$out") checks, kernels: ${want#* })"
  else echo "FAIL aarch64 $cpu: test_quant exit $rc: $(grep -m3 -E '^FAIL|^kernels' <<<"$out")"; fi
done

# glm refuses a kernel the CPU lacks, as on x86
for k in dotprod vnni; do
  out=$(SNAP=$F/oracle_dense REF=$F/oracle_dense/reference.json KERNEL=$k a64 cortex-a72 ./glm-aarch64 64 16 16 2>&1); rc=$?
  [ $rc -eq 1 ] && grep -q "KERNEL=$k: this CPU cannot run it" <<<"$out" && echo "PASS aarch64 cortex-a72: glm refuses KERNEL=$k" \
    || echo "FAIL aarch64 cortex-a72: KERNEL=$k exit $rc: $(tail -1 <<<"$out")"
done

# The oracle fixtures (f32 path): teacher forcing, MTP and greedy decoding match exactly
oracle_exact aarch64 qemu-aarch64 -cpu max ./glm-aarch64

# Integer path (IDOT=1): the same logits as the x86 build, bit for bit, for every kernel
logits_as_native aarch64 "scalar neon dotprod i8mm" qemu-aarch64 -cpu max ./glm-aarch64

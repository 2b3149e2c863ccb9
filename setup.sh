#!/usr/bin/env bash
# One command from a fresh checkout to a working, self-tested ./glm:
#   1. checks the toolchain (a C11 compiler with OpenMP, make),
#   2. builds ./glm for this CPU,
#   3. runs the self-test: teacher forcing and greedy decoding against the committed oracle
#      fixtures (tests/fixtures/oracle_*), which must match token for token.
# It prints each step. Pass ARCH=x86-64-v3 for a portable binary.
set -u
cd "$(dirname "$0")" || exit 1
step() { printf '\n== %s\n' "$*"; }
fail() { printf 'setup: FAILED: %s\n' "$*" >&2; exit 1; }

step "toolchain"
CC=${CC:-cc}
command -v "$CC" >/dev/null || fail "no C compiler ($CC); on Debian: apt-get install gcc make"
command -v make >/dev/null || fail "make is missing; on Debian: apt-get install make"
"$CC" --version | head -1
printf '#include <omp.h>\nint main(void){return omp_get_max_threads() < 1;}\n' > /tmp/glm_setup_omp.c
"$CC" -fopenmp -o /tmp/glm_setup_omp /tmp/glm_setup_omp.c 2>/dev/null && /tmp/glm_setup_omp \
  || fail "$CC cannot build OpenMP programs (gcc: apt-get install gcc; clang: apt-get install libomp-dev)"
rm -f /tmp/glm_setup_omp /tmp/glm_setup_omp.c
echo "OpenMP: ok; cores: $(nproc)"

step "build"
make CC="$CC" ${ARCH:+ARCH=$ARCH} glm || fail "build failed"
./glm --help | head -3

step "self-test: the engine against the independent oracle (f32 weights)"
ok=1
for fx in oracle_dense oracle_sparse oracle_fused_bf16; do
  dir=tests/fixtures/$fx
  tf=$(SNAP=$dir REF=$dir/reference.json TF=1 MTP=1 ./glm 64 16 16 2>/dev/null | grep -E 'C vs oracle' | tr '\n' ' ')
  gen=$(SNAP=$dir REF=$dir/reference.json ./glm 64 16 16 2>/dev/null | grep '^Matching')
  printf '%-18s %s %s\n' "$fx" "$tf" "$gen"
  for f in $tf $gen; do
    if [[ $f =~ ^([0-9]+)/([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" != "${BASH_REMATCH[2]}" ]; then ok=0; fi
  done
  [ -n "$tf" ] && [ -n "$gen" ] || ok=0
done
[ $ok = 1 ] || fail "the engine does not match the oracle"
printf '\nsetup: done. ./glm is built and matches the oracle. Run the full suite with: make test\n'
printf 'No model yet? "make demo" builds a small random-weight one to try glm with in seconds.\n'

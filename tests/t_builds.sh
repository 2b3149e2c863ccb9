#!/usr/bin/env bash
# A build never changes a result: glm built for this CPU (-march=native: AVX-512 float code where
# the CPU has it), for any AVX2 machine (-march=x86-64-v3) and for a plain x86-64 (the attention's
# and SwiGLU's vector code then falls back to its scalar form, the same IEEE operations) prints the
# same hash of every logit, on the float path and on the integer path. The integer kernels are
# picked at run time and checked against each other in t_oracle.sh; this covers the code whose
# vector width is chosen at compile time. A build this CPU cannot run is skipped, and says so.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
unset_settings
TMP=$(mktemp -d /tmp/glm-builds.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
F=tests/fixtures/oracle_sparse
hashes() {   # hashes BINARY: the logits hashes of three teacher-forced runs, one line
  local bin=$1 out=""
  out+=$(env SNAP=$F REF=$F/reference.json TF=1 IDOT=0 BATCH=256 "$bin" 2>/dev/null | grep '^TF logits hash')" | "
  out+=$(env SNAP=$F REF=$F/reference.json TF=1 IDOT=1 GROUP=32 BATCH=5 "$bin" 64 4 4 2>/dev/null | grep '^TF logits hash')" | "
  out+=$(env SNAP=$F REF=$F/reference.json TF=1 IDOT=1 MTP=1 BATCH=1 "$bin" 64 8 8 2>/dev/null | grep '^TF logits hash')
  echo "$out"
}
ref=$(hashes "$GLM")
if [ "$(grep -o 'TF logits hash' <<<"$ref" | wc -l)" -ne 3 ]; then echo "FAIL ./glm printed no logits hash: $ref"; exit 1; fi
for arch in x86-64-v3 x86-64; do
  if [ "$arch" = x86-64-v3 ] && ! grep -qw avx2 /proc/cpuinfo; then echo "SKIP build $arch: this CPU has no AVX2"; continue; fi
  if ! ${CC:-gcc} -O3 -march=$arch -fopenmp -std=gnu11 -ffp-contract=off -o "$TMP/glm-$arch" main.c -lm 2>"$TMP/cc.log"; then
    echo "FAIL build -march=$arch does not compile"; tail -5 "$TMP/cc.log"; continue
  fi
  got=$(hashes "$TMP/glm-$arch")
  if [ "$got" = "$ref" ]; then echo "PASS -march=$arch build: logits bit-identical to -march=native (float, int4 batch 5, int8 + MTP)"
  else echo "FAIL -march=$arch build changes logits: '$got' vs native '$ref'"; fi
done

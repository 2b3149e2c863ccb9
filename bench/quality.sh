#!/usr/bin/env bash
# What load-time quantization costs in quality: one reference run saves its distributions
# (PPL + LOGITS_SAVE, full rows), then each setting runs PPL with KLD against it. Prints one
# markdown table: PPL, PPL ratio, mean / p99 KL divergence and top-1 agreement per setting.
#   bench/quality.sh MODEL_DIR TEXT_FILE
# MODEL_DIR needs tokenizer.json and float (f32/bf16) weights: pre-quantized tensors (NAME +
# NAME.qs, as tools/make_glm_bench_model.py and convert_fp8_to_int4.py write) are used as they are,
# so the positional bits and GROUP would not change them. Environment: CTX (default 512), REF_BITS
# (the reference's "expert_bits dense_bits", default "16 16": f32; "8 8" for int8), THREADS, RAM_GB.
set -u
cd "$(dirname "$0")/.." || exit 1
MODEL=${1:?usage: bench/quality.sh MODEL_DIR TEXT_FILE}; TEXT=${2:?usage: bench/quality.sh MODEL_DIR TEXT_FILE}
CTX=${CTX:-512}; REF_BITS=${REF_BITS:-16 16}
[ -f "$MODEL/tokenizer.json" ] || { echo "$MODEL has no tokenizer.json (PPL tokenizes the text)"; exit 1; }
if grep -q '\.qs"' "$MODEL"/*.safetensors 2>/dev/null; then
  echo "warning: $MODEL holds pre-quantized tensors: they are used as they are, whatever the settings" >&2
fi
make -s glm >/dev/null || exit 1
T=$(mktemp -d /tmp/bench_quality.XXXXXX); trap 'rm -rf "$T"' EXIT
export USAGE=off SNAP="$MODEL" PPL="$TEXT" CTX
echo "bench: quality, model $MODEL, text $TEXT, CTX=$CTX, reference bits $REF_BITS, $(nproc) cores," \
     "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), glm $(git rev-parse --short HEAD)"
env LOGITS_SAVE="$T/ref.lf" LOGITS_TOP=0 ./glm 64 $REF_BITS >"$T/out" 2>"$T/err" || { tail -3 "$T/err"; exit 1; }
echo
echo "| setting (expert_bits dense_bits GROUP) | PPL | PPL ratio | mean KLD | p99 KLD | top-1 agreement |"
echo "|---|---|---|---|---|---|"
printf '| reference: %s | %s | 1 | 0 | 0 | 100 %% |\n' "$REF_BITS" "$(sed -nE 's/^PPL: ([0-9.e+-]+) .*/\1/p' "$T/out")"
for case in "int8: 8 8 0" "int4-row: 4 4 0" "int4-group 64: 4 4 64" "int4-group 32: 4 4 32" \
            "mixed (int4 experts, int8 dense): 4 8 0" "mixed, grouped: 4 8 64" "int2-group 32 experts: 2 8 32"; do
  name=${case%%:*}; read -r eb db group <<<"${case#*: }"
  env KLD="$T/ref.lf" GROUP=$group ./glm 64 $eb $db >"$T/out" 2>"$T/err" || { echo "| $name | failed: $(tail -1 "$T/err") |"; continue; }
  ppl=$(sed -nE 's/^PPL: ([0-9.e+-]+) .*/\1/p' "$T/out")
  ratio=$(sed -nE 's/^PPL ratio: ([0-9.e+-]+) .*/\1/p' "$T/out")
  read -r mean p99 < <(sed -nE 's/^KLD: mean ([0-9.e+-]+) .* p99 ([0-9.e+-]+) .*/\1 \2/p' "$T/out")
  top=$(sed -nE 's/^top-1 agreement: ([0-9.]+%).*/\1/p' "$T/out")
  printf '| %s: %s %s %s | %s | %.4f | %.4g | %.4g | %s |\n' "$name" "$eb" "$db" "$group" "$ppl" "$ratio" "$mean" "$p99" "$top"
done

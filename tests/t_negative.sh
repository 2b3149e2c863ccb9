#!/usr/bin/env bash
# Negative tests: every kind of bad input must stop ./glm with ONE clear error line that names the
# culprit (file, tensor, config field, setting or REF list) and a non-zero exit, never a crash.
#   safetensors   truncation, header length, offsets, overlap, byte counts, dtype, JSON, duplicates,
#                 missing / mis-shaped tensors, NaN/Inf weights, no shard at all
#   pre-quantized a valid int8-row NAME + NAME.qs pair is accepted (and used); byte counts that fit
#                 no format, a .qs of the wrong length, a contradicting colibri.fmt stamp, bad scales;
#                 the same for pre-quantized routed experts (streamed; pread and MMAP=1)
#   config.json   unsupported or inconsistent values, malformed JSON (line/col), missing file
#   settings      CLI arguments, environment variables, SNAP / REF problems, near-miss names
# The corrupt models come from tools/make_bad_models.py (python3 standard library only).
# GLM=/path/to/binary runs the suite against another build (e.g. an ASan one).
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
PY=${PYTHON:-python3}
F=tests/fixtures
DREF=$F/oracle_dense/reference.json
if [ ! -x "$GLM" ]; then echo "FAIL t_negative: $GLM is not built (run make)"; exit 1; fi
# Settings from the caller's environment must not change what these runs do.
unset_settings
export THREADS=2
# A sanitizer report must count as a crash (exit >= 128), not as the expected exit 1.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}exitcode=199"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}exitcode=199:print_stacktrace=1"

T=$(mktemp -d /tmp/t_negative.XXXXXX)
trap 'rm -rf "$T"' EXIT
if ! "$PY" tools/make_bad_models.py "$F" "$T" >"$T/make.log" 2>&1; then
  echo "FAIL make_bad_models.py could not build the corrupt models"; cat "$T/make.log"; exit 1
fi

# Count failures so the script's exit status reports them too (lib.sh's helpers only print).
FAILS=0
eval "lib_$(declare -f check)"
eval "lib_$(declare -f expect_fail)"
check() { local o; o=$(lib_check "$@"); echo "$o"; [[ $o == PASS* ]] || FAILS=$((FAILS + 1)); }
expect_fail() { local o; o=$(lib_expect_fail "$@"); echo "$o"; [[ $o == PASS* ]] || FAILS=$((FAILS + 1)); }
# expect_error NAME PATTERN CMD...: glm must fail with a "glm: error:" line that matches PATTERN.
expect_error() { local name=$1 pat=$2; shift 2; expect_fail "$name" "^glm: error: .*($pat)" "$@"; }
# on CASE [VAR=value...] [-- args]: glm in teacher forcing on the corrupted model OUT/CASE.
on() {
  local case=$1; shift
  local ref=$DREF
  case $case in st_duplicate|mtp_absent_shard) ref=$F/oracle_sparse/reference.json ;; st_*fused*) ref=$F/oracle_fused_bf16/reference.json ;; esac
  env SNAP="$T/$case" REF="$ref" TF=1 "$@" timeout -k 5 60 "$GLM" 64 16 16   # a hang is a failure too
}
# good [VAR=value...] [args]: the intact dense fixture.
good() { local args=(); while [ $# -gt 0 ] && [[ $1 == *=* ]]; do args+=("$1"); shift; done
         env SNAP=$F/oracle_dense REF="$DREF" TF=1 "${args[@]}" "$GLM" "$@"; }

# ---- safetensors container (docs/format.md §1) --------------------------------------------
expect_error "st: truncated shard names file and the cut tensor" 'st_truncated/model\.safetensors.*lm_head\.weight.*(outside|past|end)' on st_truncated
expect_error "st: 3-byte file is named" 'st_tiny_file/model\.safetensors.*too short' on st_tiny_file
expect_error "st: header length past EOF names the file" 'st_header_past_eof/model\.safetensors: header length' on st_header_past_eof
expect_error "st: offsets past the data region name the tensor" 'st_offsets_past_end/model\.safetensors.*model\.norm\.weight.*outside' on st_offsets_past_end
expect_error "st: reversed offsets name the tensor" 'model\.layers\.2\.post_attention_layernorm\.weight.*begin' on st_offsets_reversed
expect_error "st: overlapping tensors name both" 'st_overlap/model\.safetensors.*layers\.0\.post_attention_layernorm\.weight.*overlaps.*layers\.0\.input_layernorm\.weight' on st_overlap
expect_error "st: dtype x shape != byte span names the tensor" 'st_bytecount/model\.safetensors.*q_a_layernorm\.weight.*(bytes|span)' on st_bytecount
expect_error "st: negative shape names the tensor" 'kv_a_layernorm\.weight.*shape' on st_negative_shape
expect_error "st: unknown dtype named with its tensor" "layers\.1\.mlp\.gate\.weight.*unknown dtype.*Q4_K" on st_unknown_dtype
expect_error "st: malformed header JSON names file and position" 'st_bad_json/model\.safetensors.*(JSON|json).*line 1 col [0-9]+' on st_bad_json
expect_error "st: non-UTF-8 header names the file" 'st_non_utf8/model\.safetensors.*UTF-8' on st_non_utf8
expect_error "st: header that is not an object" 'st_header_not_object/model\.safetensors.*not a JSON object' on st_header_not_object
expect_error "st: name repeated within one header" 'st_dup_in_file/model\.safetensors.*model\.norm\.weight.*duplicate' on st_dup_in_file
expect_error "st: name repeated across two shards names both files" \
  "model\.layers\.4\.enorm\.weight.*(model-00001-of-00001\.safetensors.*out-mtp-00000\.safetensors|out-mtp-00000\.safetensors.*model-00001-of-00001\.safetensors)" on st_duplicate
expect_error "st: missing tensor is named" 'tensor model\.layers\.1\.self_attn\.o_proj\.weight is missing' on st_missing_tensor
expect_error "st: matrix with the wrong shape is named" 'layers\.2\.self_attn\.o_proj\.weight.*shape.*\[96, 64\].*\[64, 96\]' on st_wrong_shape
expect_error "st: norm vector stored 2-D is named" 'layers\.1\.post_attention_layernorm\.weight.*vector' on st_wrong_vector
# Regression guard (a glm.c bug this test found, fixed since):
# since experts are streamed (ExpertStore), a non-finite value in a float routed expert is
# reported as "loading layer 2 expert 5: layer 2 expert 5: a weight is not finite": neither the
# file nor the tensor (nor the row) is named. Same for the fused BF16 case below.
expect_error "st: NaN inside a weight names tensor and row" 'layers\.2\.mlp\.experts\.5\.up_proj\.weight.*row 7.*finite' on st_nan_matrix
expect_error "st: NaN inside a norm vector names the tensor" 'layers\.1\.self_attn\.kv_a_layernorm\.weight.*finite' on st_nan_vector
expect_error "st: +Inf in the (f32-kept) router names the tensor" 'layers\.1\.mlp\.gate\.weight.*finite' on st_inf_router
expect_error "st: BF16 NaN in a fused expert tensor is named" 'layers\.1\.mlp\.experts\.gate_up_proj.*finite' on st_nan_fused_bf16
expect_error "st: fused expert tensor with the wrong shape" 'layers\.2\.mlp\.experts\.down_proj.*shape' on st_fused_wrong_shape
expect_error "st: F8_E4M3 weight without its block scale names both" 'q_b_proj\.weight.*q_b_proj\.weight_scale_inv' on st_f8_without_scale
expect_error "st: directory without any *.safetensors is named" 'st_none.*no \*\.safetensors' on st_none
# A shard missing from a folder whose model.safetensors.index.json maps every tensor to its file:
# the error names the file the tensor should have come from (and the tensor, and the index).
index_case() {   # index_case NAME SHARD...: oracle_sparse with its index.json, without SHARD...
  cp -r $F/oracle_sparse "$T/$1" && "$PY" -c '
import json, os, struct, sys
d = sys.argv[1]; wm = {}
for f in sorted(os.listdir(d)):
    if f.endswith(".safetensors"):
        with open(os.path.join(d, f), "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            wm.update({k: f for k in json.loads(fh.read(n)) if k != "__metadata__"})
json.dump({"metadata": {}, "weight_map": wm}, open(os.path.join(d, "model.safetensors.index.json"), "w"))' "$T/$1"
  local name=$1; shift; for s in "$@"; do rm "$T/$name/$s"; done
}
index_case idx_missing_shard model-00001-of-00001.safetensors
expect_error "st: a shard the index names is missing: the file, the tensor and the index are named" \
  'idx_missing_shard: tensor model\.[a-z_.0-9]+ is missing: model\.safetensors\.index\.json puts it in model-00001-of-00001\.safetensors, which is not in the folder' \
  env SNAP="$T/idx_missing_shard" REF=$F/oracle_sparse/reference.json TF=1 "$GLM" 64 16 16
index_case idx_no_shard model-00001-of-00001.safetensors out-mtp-00000.safetensors
expect_error "st: every shard the index names is missing: the index and a shard are named" \
  'idx_no_shard: no \*\.safetensors file in the directory: model\.safetensors\.index\.json names the shards \(model-00001-of-00001\.safetensors' \
  env SNAP="$T/idx_no_shard" REF=$F/oracle_sparse/reference.json TF=1 "$GLM" 64 16 16

# Hostile folders: whatever sits in a model folder, glm ends with one named error, never a signal
# or a hang. Regression guards (glm.c / st.h / json.h bugs these tests found, fixed since): a
# *.safetensors that is a directory, FIFO, dangling or looping link was skipped silently (the
# error then named a "missing tensor"); config.json linked to /dev/zero grew past 4 GB before
# failing; rope_parameters.rope_theta 1e39 was accepted (infinite as a float).
expect_error "st: a directory named *.safetensors is named" 'st_dir_entry/model-extra\.safetensors: is a directory' on st_dir_entry
expect_error "st: a FIFO named *.safetensors is named, no hang" 'st_fifo_entry/model-extra\.safetensors: is a FIFO' on st_fifo_entry
expect_error "st: a dangling link is named" 'st_dangling_link/model-extra\.safetensors: .*No such file' on st_dangling_link
expect_error "st: a symlink loop is named" 'st_link_loop/model-extra\.safetensors: .*symbolic links' on st_link_loop
expect_error "st: a link to /dev/zero is named" 'st_dev_zero_entry/model-extra\.safetensors: is a character device' on st_dev_zero_entry
expect_error "st: a zero-byte shard is named" 'st_zero_size/model-extra\.safetensors: .*0 bytes' on st_zero_size
expect_error "st: shape whose byte count wraps to 0 in 64 bits" 'model\.norm\.weight.*overflow' on st_shape_overflow
expect_error "st: three dimensions of 2^63-1" 'o_proj\.weight.*overflow' on st_shape_huge_dims
expect_error "st: header length 2^64-1" 'st_header_len_max/model\.safetensors: header length' on st_header_len_max
expect_error "st: the same shard twice names both files" 'appears in both .*model(-copy)?\.safetensors and .*model(-copy)?\.safetensors' on st_duplicate_copy
expect_error "st: index.json pointing outside the folder is not followed" 'st_index_outside: tensor lm_head\.weight is missing' on st_index_outside
expect_error "st: +inf in the final norm" 'model\.norm\.weight: element 5 is not finite' on st_inf_final_norm
expect_error "st: NaN in an input norm" 'layers\.0\.input_layernorm\.weight: element 0 is not finite' on st_nan_input_norm
expect_error "st: -inf in the MTP layer's enorm" 'layers\.3\.enorm\.weight: element 63 is not finite' on st_ninf_mtp_norm
# A model without its MTP tensors loads and runs (regression guard: the layer count was taken
# before MTP was switched off, so the load then failed on "model.layers.4.input_layernorm.weight").
all_match_of() { local out; out=$("$@" 2>&1) || { echo "exit $?: $(tail -2 <<<"$out")"; return 1; }
  awk '/C vs oracle|^Matching tokens/ { n++; split($NF == "positions" ? $(NF-1) : $NF, a, "/"); if (a[1] != a[2] || a[2] == 0) bad = 1 }
       END { exit bad || !n }' <<<"$out" || { echo "$out" | grep -E 'oracle|Matching|error'; return 1; }; }
check "mtp: without its MTP layer tensors the dense model loads, teacher forcing N/N" all_match_of on mtp_absent
check "mtp: ... and greedy decoding N/N" all_match_of on mtp_absent TF=0
check "mtp: without its MTP shard the sparse model loads, teacher forcing N/N" all_match_of on mtp_absent_shard
expect_error "mtp: MTP=1 on a model without MTP tensors says so" 'MTP=1 but the model has no MTP layer' on mtp_absent MTP=1

# ---- pre-quantized tensors (docs/format.md §3) --------------------------------------------
# A valid pre-quantized pair must be accepted and used: with dense_bits 8 the engine quantizes the
# float tensor to the same int8-row bytes itself, so the predictions must be identical.
tf_pred() { env SNAP="$1" REF="$DREF" TF=1 "$GLM" 64 8 8 2>&1 | grep '^TF pred'; }
same_as_float() {
  local a b; a=$(tf_pred "$T/$1"); b=$(tf_pred $F/oracle_dense)
  [ -n "$a" ] && [ "$a" = "$b" ] || { echo "pre-quantized: $a"; echo "load-time:     $b"; return 1; }
}
check "q: valid int8-row I8 + .qs with a colibri.fmt stamp is accepted, same predictions as load-time int8" same_as_float q_valid
check "q: valid int8-row U8 + .qs without a stamp is accepted, same predictions as load-time int8" same_as_float q_valid_u8
# ...and really used: zero scales silence o_proj of layer 0, which must change the predictions.
differs() { local a b; a=$(tf_pred "$T/$1"); b=$(tf_pred $F/oracle_dense); [ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ]; }
check "q: the pre-quantized pair is what the engine uses (all-zero scales change predictions)" differs q_zero_scales
# Pre-quantized routed experts go through the streaming expert store, in each I/O mode.
tf_pred_experts() { env SNAP="$1" REF="$DREF" TF=1 "${@:2}" "$GLM" 64 8 16 2>&1 | grep '^TF pred'; }
experts_same_as_float() {
  local a b; a=$(tf_pred_experts "$T/qe_valid" "$@"); b=$(tf_pred_experts $F/oracle_dense)
  [ -n "$a" ] && [ "$a" = "$b" ] || { echo "pre-quantized: $a"; echo "load-time:     $b"; return 1; }
}
check "qe: every routed expert pre-quantized int8-row is accepted (pread), same predictions as load-time int8" experts_same_as_float
check "qe: ... and with MMAP=1" experts_same_as_float MMAP=1
E='model\.layers\.2\.mlp\.experts\.5\.up_proj\.weight'
expect_error "qe: some experts pre-quantized, one float" 'qe_mixed.*pre-quantized.*float' on qe_mixed
expect_error "qe: expert byte count that fits no format names the tensor" "qe_bytes_fit_no_format/model\.safetensors.*$E.*fit no" on qe_bytes_fit_no_format
expect_error "qe: NaN expert scale names .qs and row (pread)" "qe_nan_scale/model\.safetensors.*$E\.qs.*scale 3" on qe_nan_scale
expect_error "qe: negative expert scale names .qs and row (pread)" "qe_negative_scale/model\.safetensors.*$E\.qs.*scale 4" on qe_negative_scale
# Regression guard (a glm.c bug this test found, fixed since):
# with MMAP=1 expert_load uses the mapped .qs in place and never checks the scales: a NaN
# scale is accepted (exit 0, the NaN vanishes in activation quantization) and a negative one
# silently changes a prediction (exit 3).
expect_error "qe: NaN expert scale is refused with MMAP=1" "$E\.qs.*scale 3" on qe_nan_scale MMAP=1
expect_error "qe: negative expert scale is refused with MMAP=1" "$E\.qs.*scale 4" on qe_negative_scale MMAP=1
# Regression guard (a glm.c bug this test found, fixed since): with MMAP=1 the .qs scales were
# read in place at misaligned addresses when the data region starts at an odd offset (UBSan:
# "load of misaligned address" in the scale scan and the kernels).
experts_odd_same() {
  local a b; a=$(tf_pred_experts "$T/qe_valid_odd_offsets" "$@"); b=$(tf_pred_experts $F/oracle_dense)
  [ -n "$a" ] && [ "$a" = "$b" ] || { echo "odd offsets: $a"; echo "load-time:   $b"; return 1; }
}
check "qe: data region at an odd offset (misaligned .qs), MMAP=1: same predictions" experts_odd_same MMAP=1
check "qe: ... and with pread" experts_odd_same DIRECT=0
expect_error "set: MMAP=1 on float experts" 'MMAP=1.*pre-quantized' good MMAP=1 64 16 16
expect_error "set: DIRECT=1 on float experts" 'DIRECT=1.*pre-quantized' good DIRECT=1 64 16 16
Q='model\.layers\.0\.self_attn\.o_proj\.weight'
expect_error "q: byte count that fits no format names the tensor" "q_bytes_fit_no_format/model\.safetensors.*$Q.*5000 bytes.*fit no" on q_bytes_fit_no_format
expect_error "q: .qs of the wrong length names the tensor" "$Q.*63 scales.*fit no" on q_qs_wrong_length
expect_error "q: colibri.fmt contradicting the byte counts" "$Q.*colibri\.fmt.*int4-row.*int8-row" on q_stamp_contradicts
expect_error "q: colibri.fmt that is not a JSON object names the file" 'q_stamp_not_object/model\.safetensors.*colibri\.fmt' on q_stamp_not_object
expect_error "q: negative scale names .qs and row" "$Q\.qs.*scale 5" on q_negative_scale
expect_error "q: NaN scale names .qs and row" "$Q\.qs.*scale 7.*nan" on q_nan_scale
expect_error "q: .qs stored as F16 is refused by name" "$Q\.qs.*F32.*F16" on q_qs_f16
# Regression guard (a glm.c bug this test found, fixed since):
# an I8 tensor without its .qs is reported as "has shape [61440], expected [64, 96]" —
# load_matrix prints a second dimension (0) for a 1-D tensor, and the real cause (no .qs
# companion) is never reached because the shape check runs first.
expect_error "q: I8 codes without a .qs companion" "$Q.*(\.qs|\[6144\])" on q_no_qs

# A shard cut short while glm runs with MMAP=1: a named error, not SIGBUS (exit 135). Chat mode
# reads its lines from a FIFO, so the cut lands exactly between two steps: before any expert was
# used (caught by the size check before an expert is used), or after every expert of the first
# answer is cached (the second answer reads pages that are gone: the SIGBUS handler names the file).
truncated_while_running() {   # truncated_while_running WHEN(before|after) PATTERN
  local when=$1 pat=$2 M="$T/mmap_cut_$1" out rc
  rm -rf "$M"; cp -r "$T/qe_valid" "$M"; ln -s "$ROOT/$F/tiny_tokenizer/tokenizer.json" "$M/tokenizer.json"
  mkfifo "$M/in"
  MMAP=1 SNAP="$M" CHAT=1 TEMP=0 NGEN=4 timeout -k 5 60 "$GLM" 64 8 16 <"$M/in" >"$M/out" 2>"$M/err" &
  local pid=$!
  exec 3>"$M/in"
  waitfor() { for _ in $(seq 300); do grep -q "$1" "$M/err" && return 0; sleep 0.1; done; return 1; }
  if [ "$when" = after ]; then
    # a long first message: every expert of every MoE layer is chosen at least once and stays cached
    echo "The quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs, 0123456789!" >&3
    waitfor 'glm: \[' || { echo "the first answer never ended"; exec 3>&-; wait $pid; return 1; }
  else
    waitfor 'glm: chat:' || { echo "chat never started"; exec 3>&-; wait $pid; return 1; }
  fi
  truncate -s 4096 "$M/model.safetensors"
  echo "again" >&3
  exec 3>&-
  wait $pid; rc=$?
  out=$(cat "$M/err")
  [ $rc -eq 1 ] && grep -qE "^glm: error: .*$pat" <<<"$out" || { echo "exit $rc: $(grep -E 'error|ERROR|runtime' <<<"$out" | head -3)"; return 1; }
}
check "mmap: shard truncated before its experts are used: named error, exit 1" \
  truncated_while_running before 'mmap_cut_before/model\.safetensors was truncated while running: tensor model\.layers\.[0-9]+\.mlp\.experts'
check "mmap: shard truncated under cached experts: named error (not SIGBUS), exit 1" \
  truncated_while_running after 'mmap_cut_after/model\.safetensors was truncated while running \(an expert used in place'

# INPLACE (the default): an expert the page cache holds is used where it lies, others are read. A
# chat session whose model pages are dropped from the page cache between the load and its first
# message (the load's reads bring the tiny model in whole) mixes both kinds: one slot per layer, so
# an expert's first load reads it back into the page cache and its reloads use it in place. The
# answer must be the one INPLACE=0 gives.
chat_after_dropping_cache() {   # chat_after_dropping_cache ENV... : prints the answer, then the stats lines
  local M="$T/inplace_mixed" pid
  rm -rf "$M"; mkdir -p "$M"; cp "$T/qe_valid"/* "$M/"; ln -sf "$ROOT/$F/tiny_tokenizer/tokenizer.json" "$M/tokenizer.json"
  mkfifo "$M/in"
  env "$@" DIRECT=0 SNAP="$M" CHAT=1 TEMP=0 NGEN=6 timeout -k 5 60 "$GLM" 1 8 16 <"$M/in" >"$M/out" 2>"$M/err" &
  pid=$!
  exec 3>"$M/in"
  for _ in $(seq 300); do grep -q 'glm: chat:' "$M/err" && break; sleep 0.1; done
  /usr/bin/python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)' "$M/model.safetensors"
  echo "The quick brown fox jumps over the lazy dog" >&3
  exec 3>&-
  wait $pid
  cat "$M/out"; grep -E '^glm: \[' "$M/err"
}
inplace_mixed() {
  local a b
  a=$(chat_after_dropping_cache INPLACE=1); b=$(chat_after_dropping_cache INPLACE=0)
  # the turn's stats: a read rate above 0 means reads (the tiny model's MB round to 0), then the in-place count
  grep -qE 'read [0-9]+ MB \([0-9.]*[1-9][0-9.]* GB/s\), [1-9][0-9]* experts in place' <<<"$a" \
    || { echo "expected reads and in-place loads: $(grep '^glm:' <<<"$a")"; return 1; }
  ! grep -q 'in place' <<<"$b" || { echo "INPLACE=0 used experts in place: $(grep '^glm:' <<<"$b")"; return 1; }
  [ "$(grep -v '^glm:' <<<"$a")" = "$(grep -v '^glm:' <<<"$b")" ] && [ -n "$(grep -v '^glm:' <<<"$a")" ] \
    || { echo "answers differ: INPLACE=1 '$(grep -v '^glm:' <<<"$a")' vs INPLACE=0 '$(grep -v '^glm:' <<<"$b")'"; return 1; }
}
check "INPLACE: reads and in-place loads mixed in one chat give the answer INPLACE=0 gives" inplace_mixed

# ---- config.json ------------------------------------------------------------------------------
C='config\.json'
expect_error "cfg: wrong model_type" "cfg_model_type/$C.*model_type.*llama" on cfg_model_type
expect_error "cfg: missing hidden_size" "$C.*hidden_size.*missing" on cfg_no_hidden
expect_error "cfg: negative num_attention_heads" "$C.*num_attention_heads.*-4" on cfg_negative_heads
expect_error "cfg: zero intermediate_size" "$C.*intermediate_size.*0" on cfg_zero_inter
expect_error "cfg: zero vocab_size" "$C.*vocab_size" on cfg_zero_vocab
expect_error "cfg: hidden_size given as a string" "$C.*hidden_size.*integer" on cfg_string_size
expect_error "cfg: odd qk_rope_head_dim" "$C.*qk_rope_head_dim.*7" on cfg_rope_odd
expect_error "cfg: rope_type yarn" "$C.*rope_type.*yarn" on cfg_yarn
expect_error "cfg: hidden_act gelu" "$C.*hidden_act.*gelu" on cfg_gelu
expect_error "cfg: scoring_func softmax" "$C.*scoring_func.*softmax" on cfg_softmax
expect_error "cfg: n_routed_experts not divisible by n_group" "$C.*n_routed_experts.*n_group" on cfg_group_indivisible
expect_error "cfg: indexer_types of the wrong length" "$C.*indexer_types" on cfg_indexer_types_len
expect_error "cfg: indexer_types with a bad entry" "$C.*indexer_types\[1\]" on cfg_indexer_types_entry
expect_error "cfg: num_experts_per_tok > n_routed_experts" "$C.*num_experts_per_tok.*9" on cfg_topk_over_experts
expect_error "cfg: malformed JSON reports line and column" "cfg_malformed/$C.*line 8 col [0-9]+" on cfg_malformed
expect_error "cfg: config.json missing" "cfg_missing/$C" on cfg_missing
expect_error "cfg: malformed generation_config.json is named" "generation_config\.json.*line 1 col [0-9]+" on cfg_gencfg_malformed
expect_error "cfg: rope_theta 1e39 (inf as a float)" "$C.*rope_theta.*1e\+39" on cfg_rope_theta_1e39
expect_error "cfg: rope_parameters.rope_theta 1e39 (inf as a float)" "$C: rope_parameters: .*rope_theta.*1e\+39" on cfg_rope_params_theta_1e39
expect_error "cfg: routed_scaling_factor 1e39" "$C.*routed_scaling_factor" on cfg_routed_scale_1e39
expect_error "cfg: negative rms_norm_eps" "$C.*rms_norm_eps" on cfg_negative_eps
expect_error "cfg: num_hidden_layers 3.5" "$C.*num_hidden_layers.*integer" on cfg_fractional_layers
expect_error "cfg: hidden_size 1e300" "$C.*hidden_size" on cfg_huge_int
expect_error "cfg: vocab 2^24 x hidden 2^16 against small tensors: a tensor is named" 'model\.safetensors: tensor .*shape' on cfg_huge_dims
expect_error "cfg: num_hidden_layers 4096: the first missing layer is named" 'tensor model\.layers\.[0-9]+\..* is missing' on cfg_many_layers
expect_error "cfg: config.json linked to /dev/zero is refused at once" "cfg_dev_zero/$C: is a character device" on cfg_dev_zero
expect_error "cfg: generation_config.json linked to /dev/zero" "cfg_gencfg_dev_zero/generation_config\.json: is a character device" on cfg_gencfg_dev_zero
expect_error "cfg: config.json a FIFO nobody writes: no hang" "cfg_fifo/$C" on cfg_fifo
expect_error "cfg: config.json a directory" "cfg_directory/$C: is a directory" on cfg_directory
expect_error "cfg: config.json empty" "cfg_empty/$C: line 1 col 1" on cfg_empty
expect_error "cfg: config.json of 9 MiB is refused by size" "cfg_huge/$C: [0-9]+ bytes, more than" on cfg_huge
expect_error "cfg: config.json nested 100000 deep" "cfg_deep/$C.*nesting" on cfg_deep
# Cases built here: small edits of the dense fixture's config.json.
cfg_edit() {   # cfg_edit NAME PYTHON-STATEMENT-ON-c
  cp -r $F/oracle_dense "$T/$1" && "$PY" -c "
import json, sys
p = sys.argv[1] + '/config.json'; c = json.load(open(p)); exec(sys.argv[2]); json.dump(c, open(p, 'w'), indent=1)" "$T/$1" "$2"
}
cfg_edit cfg_eos_wrap 'c["eos_token_id"] = 2**32 + 5'
rm -f "$T/cfg_eos_wrap/generation_config.json"
# Regression guard (a glm.c bug this test found, fixed since):
# config_eos casts the int64 id to int without a range check; 2^32+5 becomes 5 and is
# accepted as a stop token.
expect_error "cfg: eos_token_id 2^32+5 is refused, not wrapped to 5" "eos_token_id" on cfg_eos_wrap
cfg_edit cfg_model_type_newline 'c["model_type"] = "llama\nglm: error: forged second line"'
# Regression guard (fuzz_tokjson found it in tok.h; glm.c and st.h had the same gap): an error quoting
# text from a file printed its newlines, so one error could look like two (or forge one).
one_error_line() { local out; out=$(on cfg_model_type_newline 2>&1); [ "$(grep -c '^glm: error: ' <<<"$out")" = 1 ] && ! grep -q '^glm: error: forged' <<<"$out" || { echo "$out"; return 1; }; }
check "cfg: a newline inside a config string stays inside the one error line" one_error_line
cfg_edit cfg_rope_not_object 'c["rope_parameters"] = "default"'
# Regression guard (a glm.c bug this test found, fixed since):
# a rope_parameters that is not an object is silently ignored (theta falls back to
# 10000, wrong for GLM-5); the run then only reports prediction mismatches (exit 3).
expect_error "cfg: rope_parameters that is not an object" "$C.*rope_parameters" on cfg_rope_not_object

# ---- settings ---------------------------------------------------------------------------------
expect_error "set: unknown CLI option" 'unknown option --bogus' good --bogus
expect_error "set: bad expert_bits" "expert_bits '3'" good 64 3 16
expect_error "set: bad dense_bits" "dense_bits '5'" good 64 16 5
expect_error "set: cache_slots 0" "cache_slots '0'" good 0 16 16
expect_error "set: too many arguments" 'too many arguments' good 64 16 16 16
expect_error "set: TF=maybe is no boolean: the error says what is" 'TF=maybe: expected 1 or 0 \(yes/no' good TF=maybe 64 16 16
expect_error "set: empty TF=" 'TF=' good TF= 64 16 16
expect_error "set: out of range ABSORB=5" 'ABSORB=5.*range' good ABSORB=5 64 16 16
expect_error "set: fractional ABSORB=0.5" 'ABSORB=0\.5' good ABSORB=0.5 64 16 16
expect_error "set: INDEXER=bogus" 'INDEXER=bogus' good INDEXER=bogus 64 16 16
expect_error "set: THREADS=-1" 'THREADS=-1' good THREADS=-1 64 16 16
expect_error "set: GROUP=1" 'GROUP=1' good GROUP=1 64 16 16
expect_error "set: BATCH=0" 'BATCH=0' good BATCH=0 64 16 16
expect_error "set: CTX too small for the run" 'CTX=5' good CTX=5 64 16 16
expect_error "set: MTP=1 without TF=1" 'MTP=1.*TF' good TF=0 MTP=1 64 16 16
# Regression guard (a glm.c bug this test found, fixed since):
# the setting range test (d < min || d > max) is false for NaN, so LATENT_EPS=nan
# is accepted and every prediction becomes token 0 (exit 3, no error naming LATENT_EPS).
expect_error "set: LATENT_EPS=nan is refused" 'LATENT_EPS' good LATENT_EPS=nan 64 16 16
expect_error "set: SNAP not set" 'SNAP' env REF="$DREF" TF=1 "$GLM" 64 16 16
expect_error "set: SNAP is not a model directory" 'SNAP=/nonexistent/model: no such folder' env SNAP=/nonexistent/model REF="$DREF" TF=1 "$GLM" 64 16 16
expect_error "set: REF not set" 'REF' env SNAP=$F/oracle_dense TF=1 "$GLM" 64 16 16
expect_error "set: REF file missing" 'REF.*/nonexistent/ref\.json' good REF=/nonexistent/ref.json 64 16 16
expect_error "set: REF=/dev/zero is refused at once" 'REF: /dev/zero: is a character device' good REF=/dev/zero 64 16 16
R="$T/refs"
expect_error "ref: malformed JSON names file and position" 'refs/malformed\.json.*line [0-9]+ col [0-9]+' good REF="$R/malformed.json" 64 16 16
expect_error "ref: full_ids not starting with prompt_ids" 'not_prefix\.json.*full_ids.*prompt_ids' good REF="$R/not_prefix.json" 64 16 16
expect_error "ref: prompt_ids missing" 'no_prompt\.json.*prompt_ids' good REF="$R/no_prompt.json" 64 16 16
expect_error "ref: negative token id" 'negative_id\.json.*full_ids\[10\]' good REF="$R/negative_id.json" 64 16 16
expect_error "ref: tf_pred of the wrong length" 'tf_pred' good REF="$R/tf_pred_short.json" 64 16 16
# Regression guard (a glm.c bug this test found, fixed since):
# a REF token id >= vocab is only caught when it is embedded ("token id 9999 is outside
# the vocabulary (512)": neither the REF file nor the list is named), and in greedy mode an
# out-of-vocabulary id in the continuation is never checked at all (exit 3, "Greedy mismatch").
expect_error "ref: full_ids id >= vocab (TF) names the list" 'full_ids' good REF="$R/full_id_over_vocab.json" 64 16 16
expect_error "ref: prompt_ids id >= vocab names the list" 'prompt_ids' good REF="$R/prompt_id_over_vocab.json" TF=0 64 16 16
expect_error "ref: full_ids id >= vocab (greedy) is refused" 'full_ids' good REF="$R/full_id_over_vocab.json" TF=0 64 16 16

# A near-miss variable name must warn with the intended name; the run itself still succeeds.
near_miss() {
  local out; out=$(good ABSORBB=1 64 16 16 2>&1) || { echo "$out" | tail -3; return 1; }
  grep -qE 'warning: .*ABSORBB.*ABSORB\b' <<<"$out" || { echo "no warning naming ABSORB"; return 1; }
}
check "set: near-miss ABSORBB=1 warns 'did you mean ABSORB' and still runs" near_miss
[ "$FAILS" -eq 0 ]

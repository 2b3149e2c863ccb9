#!/usr/bin/env bash
# Offline converter tests (tools/convert_fp8_to_int4.py, tools/make_fp8_fixture.py).
# Needs /usr/bin/python3 with numpy (CI installs python3-numpy); skips without failing if absent.
#   fp8 codec        every e4m3fn code round-trips; midpoints round to even; saturation at 448
#   fp8==dequant     converting the FP8 fixture and its exact float32 dequantization: identical files
#   requant          the converter's bytes for several tensors equal an independent scalar requantization
#   layout           each expert's three payloads are adjacent, its three .qs arrays right after
#   fused/f16/odd    fused BF16 experts split per expert; F16 input; odd widths padded with q = 0
#   extras           config, tokenizer.json, tokenizer_config.json, chat_template.jinja copied as they are
#   engine (a)       ./glm predictions on the converted dir equal those with load-time quantization
#   resume (b)       a run killed mid-shard (several kill points, also with --delete-source) and
#                    rerun gives byte-identical output
#   refusals (c)     corrupt inputs, option mismatch and low free space are refused with a named cause
#   leftovers (d)    an error removes the folders the run created, unless they hold finished shards
#   index (e)        model.safetensors.index.json: a missing shard is named by file, strays refused
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
PY=/usr/bin/python3
FIX=tests/fixtures/oracle_dense
if ! $PY -c 'import numpy' 2>/dev/null; then
  echo "t_converter: /usr/bin/python3 with numpy is not installed; converter tests skipped"; exit 0
fi
if [ ! -f $FIX/config.json ]; then
  echo "t_converter: $FIX does not exist yet; converter tests skipped"; exit 0
fi
T=$(mktemp -d /tmp/t_converter.XXXXXX)
trap 'rm -rf "$T"' EXIT
CONV="$PY tools/convert_fp8_to_int4.py"
export PYTHONPATH=$ROOT/tools PYTHONDONTWRITEBYTECODE=1

# sha256 of every file of a converted dir (names + contents), the state file excluded
digest() { (cd "$1" && find . -type f ! -name .convert-state.json | sort | xargs sha256sum) }
digest_st() { (cd "$1" && sha256sum *.safetensors) }

check "fp8 codec" $PY - <<'EOF'
import numpy as np
from make_fp8_fixture import e4m3_encode, e4m3_decode
from safetensors_io import E4M3_TO_F32
codes = np.arange(256, dtype=np.uint8)
finite = (codes & 0x7f) != 0x7f
d = e4m3_decode(codes)
assert np.array_equal(np.isnan(d), ~finite)
assert np.array_equal(d[finite].view(np.uint32), E4M3_TO_F32[finite].view(np.uint32)), "two decoders disagree"
assert np.array_equal(e4m3_encode(d[finite]), codes[finite]), "code does not round-trip"
for c in range(0x7e):       # consecutive positive codes: the midpoint goes to the even code
    lo, hi = float(d[c]), float(d[c + 1])
    mid = np.float32((lo + hi) / 2)
    even = c if c % 2 == 0 else c + 1
    got = e4m3_encode(np.array([mid, -mid, np.nextafter(mid, np.float32(0)), np.nextafter(mid, np.float32(1e4))], np.float32))
    assert list(got) == [even, even | 0x80, c, c + 1], (c, got)
assert list(e4m3_encode(np.array([448.01, 1e30, -1e30, 1e-30], np.float32))) == [0x7e, 0x7e, 0xfe, 0]
EOF

# The FP8 fixture (BF16 for the unquantized tensors, several shards so companions may be split) and
# its exact dequantization.
check "make fp8 fixture" $PY tools/make_fp8_fixture.py $FIX $T/fp8 --dequant-out $T/deq --shard-mb 0.1 --bf16-rest
check "convert fp8" $CONV $T/fp8 $T/out_fp8
check "convert dequantized f32" $CONV $T/deq $T/out_deq
check "fp8 and dequantized conversions identical" diff <(digest_st $T/out_fp8) <(digest_st $T/out_deq)
check "fp8 fixture has F8_E4M3 with scales" $PY - $T/fp8 <<'EOF'
import sys, glob
from safetensors_io import SafeFile
n8 = nsc = 0
for p in glob.glob(sys.argv[1] + "/*.safetensors"):
    f = SafeFile(p)
    for n in f.names():
        dt = f.info(n)["dtype"]
        n8 += dt == "F8_E4M3"; nsc += n.endswith("_scale_inv")
        if "embed_tokens" in n or "lm_head" in n or "norm" in n or n.endswith("mlp.gate.weight") or "weights_proj" in n:
            assert dt == "BF16", (n, dt)
assert n8 > 50 and n8 == nsc, (n8, nsc)
EOF

# Independent scalar requantization (Python round() is half to even; float32 via numpy scalars).
cat > $T/requant.py <<'EOF'
import sys, glob, json, math
import numpy as np
from safetensors_io import SafeFile, to_f32
def load_dir(d):
    t = {}
    for p in sorted(glob.glob(d + "/*.safetensors")):
        f = SafeFile(p)
        fm = json.loads(f.metadata.get("colibri.fmt", "{}"))
        for n in f.names():
            t[n] = (f, fm.get(n))
    return t
def requant(w, bits, group):
    qmax = {8: 127, 4: 7, 2: 1}[bits]
    rows, cols = w.shape
    g = group or cols
    out, scales = [], []
    for r in range(rows):
        codes = []
        for g0 in range(0, cols, g):
            seg = [np.float32(x) for x in w[r, g0:g0 + g]]
            amax = np.float32(0)
            for x in seg:
                amax = max(amax, np.float32(abs(x)))
            s = max(np.float32(amax / np.float32(qmax)), np.float32(1e-8))
            scales.append(s)
            for x in seg:
                q = round(float(np.float32(x / s)))
                codes.append(min(max(q, -qmax - 1), qmax))
        if bits == 8:
            out += [c & 0xff for c in codes]
        else:
            per = 8 // bits
            codes += [0] * (-len(codes) % per)
            for j in range(0, len(codes), per):
                b = 0
                for k in range(per):
                    b |= (codes[j + k] + (qmax + 1)) << (bits * k)
                out.append(b)
    return bytes(out), np.array(scales, np.float32).tobytes()
def check_tensor(dst, name, w, bits, group, fmt):
    data, sc = requant(w.reshape(w.shape[0], -1), bits, group)
    g, declared = dst[name]
    assert declared == fmt, f"{name}: colibri.fmt {declared}, expected {fmt}"
    assert g.raw(name).tobytes() == data, f"{name}: payload bytes differ"
    q, _ = dst[name + ".qs"]
    assert q.raw(name + ".qs").tobytes() == sc, f"{name}: scales differ"
    print("ok", name, fmt)
if __name__ == "__main__":
  src, dst = load_dir(sys.argv[1]), load_dir(sys.argv[2])
  for spec in sys.argv[3:]:
    name, bits, group, fmt = spec.split(":")
    f, _ = src[name]
    check_tensor(dst, name, to_f32(f.raw(name), f.info(name)["dtype"]), int(bits), int(group), fmt)
EOF
L=model.layers
check "requant default policy" $PY $T/requant.py $T/deq $T/out_fp8 \
  model.embed_tokens.weight:8:0:int8-row lm_head.weight:8:0:int8-row \
  $L.0.self_attn.o_proj.weight:4:64:int4-grouped $L.0.mlp.down_proj.weight:4:64:int4-grouped \
  $L.1.mlp.experts.3.gate_proj.weight:4:0:int4-row $L.0.self_attn.q_b_proj.weight:4:0:int4-row \
  $L.2.self_attn.indexer.wq_b.weight:8:0:int8-row $L.3.mlp.experts.0.down_proj.weight:8:0:int8-row
# the MTP layer's eh_proj stays f32 (glm.c quantizes its two column halves separately at load), and
# --mtp-bits below 8 is raised to 8
check "eh_proj kept f32, equal to the source" $PY - $T/deq $T/out_fp8 <<EOF
import sys
sys.path.insert(0, "$T")
import numpy as np
from requant import load_dir, to_f32
src, dst = load_dir(sys.argv[1]), load_dir(sys.argv[2])
n = "model.layers.3.eh_proj.weight"
f, fmt = dst[n]
assert fmt is None and f.info(n)["dtype"] == "F32" and n + ".qs" not in dst, (fmt, f.info(n)["dtype"])
assert np.array_equal(to_f32(f.raw(n), "F32"), to_f32(src[n][0].raw(n), src[n][0].info(n)["dtype"]))
EOF
mtp_raised() {
  local out; out=$($CONV $T/deq $T/out_m4 --mtp-bits 4 2>&1) || { echo "$out"; return 1; }
  grep -q "mtp-bits 4 raised to 8" <<<"$out" || { echo "no note: $out"; return 1; }
  $PY $T/requant.py $T/deq $T/out_m4 $L.3.mlp.experts.0.down_proj.weight:8:0:int8-row $L.3.self_attn.q_b_proj.weight:8:0:int8-row
}
check "--mtp-bits 4 is raised to 8, with a note" mtp_raised
check "convert int2 / per-row / group 32" $CONV $T/deq $T/out_mix --dense-bits 2 --expert-bits 8 --io-bits 4 --group 32
check "requant int2 / int4 group 32" $PY $T/requant.py $T/deq $T/out_mix \
  $L.0.self_attn.o_proj.weight:2:0:int2-row $L.1.mlp.experts.5.up_proj.weight:8:0:int8-row \
  model.embed_tokens.weight:4:32:int4-grouped

check "expert layout adjacent" $PY - $T/out_fp8 <<'EOF'
import sys, glob, re
from safetensors_io import SafeFile
n = 0
for p in glob.glob(sys.argv[1] + "/*.safetensors"):
    f = SafeFile(p)
    for name in f.names():
        m = re.match(r"(.*\.experts\.\d+)\.gate_proj\.weight$", name)
        if not m:
            continue
        parts = [m.group(1) + f".{p}_proj.weight" for p in ("gate", "up", "down")]
        seq = parts + [x + ".qs" for x in parts]
        for a, b in zip(seq, seq[1:]):
            assert b in f, f"{b} is not in the same file as {a}"
            ia, ib = f.info(a), f.info(b)
            assert ia["offset"] + ia["nbytes"] == ib["offset"], f"{b} does not follow {a}"
        n += 1
assert n == 24, n     # 8 experts in each of layers 1, 2 and 3 (the MTP layer, int8)
EOF

# Fused BF16 experts, F16 input and odd widths.
check "convert fused bf16 fixture" $CONV tests/fixtures/oracle_fused_bf16 $T/out_fused
check "fused experts split and requantized" $PY - tests/fixtures/oracle_fused_bf16 $T/out_fused <<EOF
import sys
sys.path.insert(0, "$T")
from requant import load_dir, check_tensor, to_f32
src, dst = load_dir(sys.argv[1]), load_dir(sys.argv[2])
assert not any("gate_up_proj" in n for n in dst), "fused name in output"
fused = [n for n in src if n.endswith("experts.gate_up_proj")]
assert fused
for fn in fused:
    f, _ = src[fn]
    gu = to_f32(f.raw(fn), f.info(fn)["dtype"])
    dn_name = fn.replace("gate_up_proj", "down_proj")
    dn = to_f32(src[dn_name][0].raw(dn_name), src[dn_name][0].info(dn_name)["dtype"])
    E, I2, D = gu.shape
    mtp = fn.startswith("model.layers.3.")          # layer 3 is this fixture's MTP layer: int8-row
    def chk(name, w):
        if mtp:
            check_tensor(dst, name, w, 8, 0, "int8-row")
        elif w.shape[1] > 64:
            check_tensor(dst, name, w, 4, 64, "int4-grouped")
        else:
            check_tensor(dst, name, w, 4, 0, "int4-row")
    for e in (0, E - 1):
        chk(fn.replace("gate_up_proj", f"{e}.gate_proj.weight"), gu[e, :I2 // 2])
        chk(fn.replace("gate_up_proj", f"{e}.up_proj.weight"), gu[e, I2 // 2:])
        chk(fn.replace("gate_up_proj", f"{e}.down_proj.weight"), dn[e])
EOF
check "make odd-width F16 model" $PY - $T/odd <<'EOF'
import sys, os, json
import numpy as np
from safetensors_io import write_file
d = sys.argv[1]; os.makedirs(d)
rng = np.random.default_rng(7)
json.dump({"num_hidden_layers": 1}, open(d + "/config.json", "w"))
w = (rng.standard_normal((5, 7)) * 3).astype(np.float16)
w[0, :] = 0          # an all-zero row: scale 1e-8, all codes 0
w[1, 3] = np.float16(2.5); w[1, 4] = np.float16(-2.5)
write_file(d + "/a.safetensors", [("model.layers.0.mlp.gate_proj.weight", "F16", w),
                                  ("model.layers.0.mlp.up_proj.weight", "F16", w[:, :6]),
                                  ("model.layers.0.input_layernorm.weight", "F16", w[0])])
EOF
check "convert odd-width int4" $CONV $T/odd $T/odd4 --group 4
check "convert odd-width int2" $CONV $T/odd $T/odd2 --dense-bits 2
check "requant odd widths" $PY $T/requant.py $T/odd $T/odd4 \
  model.layers.0.mlp.gate_proj.weight:4:4:int4-grouped model.layers.0.mlp.up_proj.weight:4:4:int4-grouped
check "requant odd widths int2" $PY $T/requant.py $T/odd $T/odd2 model.layers.0.mlp.gate_proj.weight:2:0:int2-row
# The small files: config, tokenizer files and GLM-5.2's chat_template.jinja are copied byte for
# byte; the absent ones are named.
extras_copied() {
  rm -rf $T/ex $T/ex_out; cp -r $T/odd $T/ex
  printf '[gMASK]<sop>{%% for m in messages %%}<|{{ m.role }}|>{{ m.content }}{%% endfor %%}\n' > $T/ex/chat_template.jinja
  echo '{"eos_token": "<|endoftext|>", "model_max_length": 202752}' > $T/ex/tokenizer_config.json
  echo '{"version": "1.0", "model": {"type": "BPE"}}' > $T/ex/tokenizer.json
  local out; out=$($CONV $T/ex $T/ex_out 2>&1) || { echo "$out"; return 1; }
  for f in config.json tokenizer.json tokenizer_config.json chat_template.jinja; do
    cmp $T/ex/$f $T/ex_out/$f || { echo "$f not copied"; return 1; }
  done
  grep -q "absent: generation_config.json$" <<<"$out" || { echo "absent file not named:"; echo "$out"; return 1; }
}
check "copies config, tokenizer files and chat_template.jinja" extras_copied

# (a) the engine: pre-quantized container vs load-time quantization of the same floats.
UNIFORM="--expert-bits 4 --dense-bits 4 --io-bits 4 --mtp-bits 4 --indexer-bits 4 --group 64"
tf_pred() {   # dir, bits, group -> the engine's "TF pred:" line
  local out; out=$(SNAP=$1 REF=$FIX/reference.json TF=1 GROUP=$3 "$GLM" 64 $2 $2 2>&1)
  grep '^TF pred:' <<<"$out" || { echo "no 'TF pred:' line from $GLM on $1:"; tail -5 <<<"$out"; return 1; }
}
engine_same() {  # bits group dir_a dir_b
  local a b; a=$(tf_pred $3 $1 $2) || { echo "$a"; return 1; }
  b=$(tf_pred $4 $1 $2) || { echo "$b"; return 1; }
  [ "$a" = "$b" ] || { echo "$3: $a"; echo "$4: $b"; return 1; }
}
if [ -x "$GLM" ]; then
  check "convert uniform int4 g64" $CONV $T/fp8 $T/out_u4 $UNIFORM
  check "engine: converted int4 g64 == load-time int4 of dequantized" engine_same 4 64 $T/out_u4 $T/deq
  check "engine: converted int4 g64 == load-time int4 of fp8" engine_same 4 64 $T/out_u4 $T/fp8
  check "convert uniform int8" $CONV $T/fp8 $T/out_u8 --expert-bits 8 --dense-bits 8 --io-bits 8 --mtp-bits 8 --indexer-bits 8
  check "engine: converted int8 == load-time int8 of dequantized" engine_same 8 0 $T/out_u8 $T/deq
  check "convert uniform int4 per-row" $CONV $T/fp8 $T/out_r4 $UNIFORM --per-row
  check "engine: converted int4-row == load-time int4-row of dequantized" engine_same 4 0 $T/out_r4 $T/deq
else
  echo "FAIL engine comparison: $GLM is not built (run make)"
fi

# (b) kill mid-shard, rerun: byte-identical output; the killed run leaves no valid-looking shard.
ref=$(digest $T/out_fp8)
resume_same() {   # kill_after extra-args...
  local k=$1; shift
  rm -rf $T/src_k $T/out_k; cp -r $T/fp8 $T/src_k
  CONVERT_KILL_AFTER_TENSORS=$k $CONV $T/src_k $T/out_k "$@" >/dev/null 2>&1
  local rc=$?
  [ $rc -eq 137 ] || { echo "first run exited $rc, expected to be killed (137)"; return 1; }
  [ ! -f $T/out_k/config.json ] || { echo "config.json copied before the run finished"; return 1; }
  $CONV $T/src_k $T/out_k "$@" >/dev/null 2>&1 || { echo "rerun failed"; return 1; }
  ls $T/out_k/*.tmp >/dev/null 2>&1 && { echo "temp files left"; return 1; }
  [ "$(digest $T/out_k)" = "$ref" ] || { echo "output differs from an uninterrupted run"; return 1; }
}
nshards=$(ls $T/fp8/*.safetensors | wc -l)
check "fp8 fixture has several shards ($nshards)" test "$nshards" -ge 3
for k in 1 40 150 260; do check "resume after kill at tensor $k" resume_same $k; done
partial_is_tmp() {
  rm -rf $T/out_p; CONVERT_KILL_AFTER_TENSORS=150 $CONV $T/fp8 $T/out_p >/dev/null 2>&1
  ls $T/out_p/*.safetensors.tmp >/dev/null 2>&1 || { echo "no partial .tmp shard"; return 1; }
  local done; done=$($PY -c "import json,sys; print(len(json.load(open(sys.argv[1]))['finished']))" $T/out_p/.convert-state.json)
  [ "$done" -ge 1 ] && [ "$done" -lt "$nshards" ] || { echo "finished shards $done of $nshards"; return 1; }
  [ "$(ls $T/out_p/*.safetensors | wc -l)" -eq "$done" ] || { echo "a .safetensors file for an unfinished shard"; return 1; }
}
check "killed run: finished shards published, partial one only as .tmp" partial_is_tmp
delete_source_resume() {
  resume_same 150 --delete-source || return 1
  ls $T/src_k/*.safetensors >/dev/null 2>&1 && { echo "source shards not deleted"; return 1; }
  [ -f $T/src_k/config.json ] || { echo "config.json deleted"; return 1; }
}
check "resume with --delete-source" delete_source_resume

# (c) refusals, each naming its cause.
expect_fail "rerun with other options refused" "earlier run used options" $CONV $T/fp8 $T/out_fp8 --group 32
expect_fail "low free space refused" "refusing to start: .* MB free .* need" $CONV $T/fp8 $T/out_space --margin-mb 1e12
expect_fail "missing source dir" "odd/nonexistent: not a directory" $CONV $T/odd/nonexistent $T/out_x
mkdir -p $T/noconf && cp $T/odd/a.safetensors $T/noconf/
expect_fail "no config.json in source" "noconf/config.json" $CONV $T/noconf $T/out_x
$PY - $T <<'EOF'
# Corrupt source directories, one defect each: bad/<case>/
import sys, os, json, shutil
import numpy as np
from safetensors_io import write_file
T = sys.argv[1]
rng = np.random.default_rng(1)
W = "model.layers.0.mlp.up_proj.weight"
def mk(case, tensors, files=None):
    d = f"{T}/bad/{case}"; os.makedirs(d)
    json.dump({"num_hidden_layers": 1}, open(d + "/config.json", "w"))
    for i, ts in enumerate(files or [tensors]):
        write_file(f"{d}/s{i}.safetensors", ts)
    return d
w = rng.standard_normal((8, 16)).astype(np.float32)
nan = w.copy(); nan[3, 5] = np.nan
mk("nan", [(W, "F32", nan)])
codes = rng.integers(0, 0x70, (8, 16)).astype(np.uint8)
mk("noscale", [(W, "F8_E4M3", codes)])
mk("badscale", [(W, "F8_E4M3", codes), (W + "_scale_inv", "F32", np.ones((2, 1), np.float32))])
mk("orphan", [(W, "F32", w), ("model.layers.0.mlp.down_proj.weight_scale_inv", "F32", np.ones((1, 1), np.float32))])
mk("dup", None, [[(W, "F32", w)], [(W, "F32", w)]])
mk("dtype", [(W, "I32", w.astype(np.int32))])
mk("quantized", [(W, "U8", codes.reshape(-1)), (W + ".qs", "F32", np.ones(8, np.float32))])
mk("expert", [("model.layers.0.mlp.experts.3.gate_proj.weight", "F32", w),
              ("model.layers.0.mlp.experts.3.down_proj.weight", "F32", w.T.copy())])
d = mk("truncated", [(W, "F32", w)])
with open(d + "/s0.safetensors", "r+b") as fh: fh.truncate(100)
d = mk("json", [(W, "F32", w)])
with open(d + "/s0.safetensors", "r+b") as fh: fh.seek(9); fh.write(b"\x01garbage")
d = mk("length", [(W, "F32", w)])
h = {W: {"dtype": "F32", "shape": [8, 15], "data_offsets": [0, 512]}}   # shape says 480 bytes
t = json.dumps(h).encode(); t += b" " * (-len(t) % 8)
with open(d + "/s0.safetensors", "wb") as fh: fh.write(len(t).to_bytes(8, "little") + t + w.tobytes())
d = mk("overlap", [(W, "F32", w)])
h = {"a.weight": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
     "b.weight": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}
t = json.dumps(h).encode(); t += b" " * (-len(t) % 8)
with open(d + "/s0.safetensors", "wb") as fh: fh.write(len(t).to_bytes(8, "little") + t + bytes(24))
EOF
B=$T/bad
W=model.layers.0.mlp.up_proj.weight
expect_fail "refuse NaN weight" "s0.safetensors: tensor $W: non-finite" $CONV $B/nan $T/o1
expect_fail "refuse F8 without scale" "tensor $W: F8_E4M3 without its ${W}_scale_inv" $CONV $B/noscale $T/o2
expect_fail "refuse wrong scale shape" "tensor ${W}_scale_inv: expected F32 \[1, 1\]" $CONV $B/badscale $T/o3
expect_fail "refuse orphan scale" "down_proj.weight_scale_inv has no base tensor" $CONV $B/orphan $T/o4
expect_fail "refuse duplicate tensor" "$W appears in both s0.safetensors and s1.safetensors" $CONV $B/dup $T/o5
expect_fail "refuse integer dtype" "tensor $W: unsupported dtype I32" $CONV $B/dtype $T/o6
expect_fail "refuse quantized source" "already a quantized container" $CONV $B/quantized $T/o7
expect_fail "refuse incomplete expert" "experts.3: missing up_proj.weight" $CONV $B/expert $T/o8
expect_fail "refuse truncated shard" "truncated/s0.safetensors: header length .* larger than the file" $CONV $B/truncated $T/o9
expect_fail "refuse malformed header" "json/s0.safetensors: header is not valid" $CONV $B/json $T/o10
expect_fail "refuse byte length mismatch" "tensor $W: 512 bytes but F32 \[8, 15\] needs 480" $CONV $B/length $T/o11
expect_fail "refuse overlapping tensors" "overlap/s0.safetensors: tensors a.weight and b.weight overlap" $CONV $B/overlap $T/o12
check "no output published for refused inputs" test -z "$(ls $T/o[0-9]*/*.safetensors 2>/dev/null)"

# (d) what an error leaves behind: nothing this run created unless a rerun continues from it; a
# folder that existed before is never removed.
check "refused inputs leave no output folder behind" test -z "$(ls -d $T/o[0-9]* $T/out_x $T/out_space 2>/dev/null)"
nested_removed() {
  $CONV $B/nan $T/nest/a/b >/dev/null 2>&1 && { echo "NaN input accepted"; return 1; }
  [ ! -e $T/nest ] || { echo "left $(find $T/nest) behind"; return 1; }
}
check "error: every folder the run created is removed (DST and its new parents)" nested_removed
existing_kept() {
  mkdir -p $T/mine/out && echo keep > $T/mine/note
  $CONV $B/nan $T/mine/out >/dev/null 2>&1 && { echo "NaN input accepted"; return 1; }
  [ -d $T/mine/out ] && [ -f $T/mine/note ] || { echo "a folder that existed before was removed"; return 1; }
  $CONV $B/nan $T/mine/out/new >/dev/null 2>&1
  [ -d $T/mine/out ] && [ ! -e $T/mine/out/new ] || { echo "removed the wrong folder"; return 1; }
}
check "error: a folder that existed before is kept" existing_kept
$PY - $T <<'PYEOF'
# a good first shard and a NaN in the second: the first is finished before the error
import sys, os, json
import numpy as np
from safetensors_io import write_file
d = sys.argv[1] + "/bad/nan2"; os.makedirs(d)
json.dump({"num_hidden_layers": 1}, open(d + "/config.json", "w"))
w = np.ones((8, 16), np.float32)
write_file(d + "/s0.safetensors", [("model.layers.0.mlp.up_proj.weight", "F32", w)])
w[2, 3] = np.inf
write_file(d + "/s1.safetensors", [("model.layers.0.mlp.down_proj.weight", "F32", w)])
PYEOF
finished_kept() {
  local out; out=$($CONV $B/nan2 $T/o_nan2 2>&1) && { echo "Inf input accepted"; return 1; }
  grep -q "s1.safetensors: tensor .*non-finite" <<<"$out" || { echo "$out"; return 1; }
  grep -q "o_nan2 kept: it holds finished output shards; rerun" <<<"$out" || { echo "$out"; return 1; }
  [ -f $T/o_nan2/s0.safetensors ] && [ ! -e $T/o_nan2/s1.safetensors.tmp ] || { ls -a $T/o_nan2; return 1; }
}
check "error after a finished shard: the output folder is kept for the rerun, the partial shard removed" finished_kept

# (e) model.safetensors.index.json: the shards it names are the source; a missing one is named
check "make fp8 fixture with an index" $PY tools/make_fp8_fixture.py $FIX $T/fp8i --shard-mb 0.1 --bf16-rest --index
check "with an index: same output as without" bash -c "$CONV $T/fp8i $T/out_i >/dev/null 2>&1 &&
  diff <(cd $T/out_fp8 && sha256sum *.safetensors) <(cd $T/out_i && sha256sum *.safetensors)"
S2=model-00002-of-$(printf %05d "$nshards").safetensors
rm -rf $T/miss && cp -r $T/fp8i $T/miss && rm $T/miss/$S2
expect_fail "missing shard: named by its file and the index" \
  "miss/$S2: missing: model.safetensors.index.json names this file for [0-9]+ tensor" $CONV $T/miss $T/out_miss
check "missing shard: no output folder left behind" test ! -e $T/out_miss
rm -rf $T/extra && cp -r $T/fp8i $T/extra && cp $T/fp8i/$S2 $T/extra/model-extra.safetensors
expect_fail "a shard the index does not name: refused by name" \
  "extra/model-extra.safetensors: not named in model.safetensors.index.json" $CONV $T/extra $T/out_extra
rm -rf $T/moved && cp -r $T/fp8i $T/moved && $PY - $T/moved <<'PYEOF'
import json, sys
p = sys.argv[1] + "/model.safetensors.index.json"
idx = json.load(open(p))
wm = idx["weight_map"]
name = next(n for n in sorted(wm) if list(wm.values()).count(wm[n]) > 1)    # its shard keeps others
other = sorted(set(wm.values()) - {wm[name]})[0]
wm[name] = other
json.dump(idx, open(p, "w"))
PYEOF
expect_fail "index and header disagree: named" "its header and model.safetensors.index.json disagree: tensor" \
  $CONV $T/moved $T/out_moved
index_delete_source() {
  rm -rf $T/src_i $T/out_di; cp -r $T/fp8i $T/src_i
  CONVERT_KILL_AFTER_TENSORS=150 $CONV $T/src_i $T/out_di --delete-source >/dev/null 2>&1
  [ $? -eq 137 ] || { echo "first run was not killed"; return 1; }
  [ "$(ls $T/src_i/*.safetensors | wc -l)" -lt "$nshards" ] || { echo "no source shard deleted"; return 1; }
  $CONV $T/src_i $T/out_di --delete-source >/dev/null 2>&1 || { echo "rerun failed"; return 1; }
  diff <(cd $T/out_fp8 && sha256sum *.safetensors) <(cd $T/out_di && sha256sum *.safetensors)
}
check "with an index and --delete-source: the deleted (finished) shards are not missing on a rerun" index_delete_source

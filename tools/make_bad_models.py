#!/usr/bin/env python3
"""make_bad_models.py - corrupted copies of the test fixtures, for tests/t_negative.sh.

    python3 tools/make_bad_models.py FIXTURES_DIR OUT_DIR [CASE ...]

FIXTURES_DIR holds the good models oracle_dense, oracle_sparse (two shard files) and
oracle_fused_bf16 (tests/fixtures). For every case this writes OUT_DIR/CASE/, a complete model
directory that differs from its good source in exactly one way, plus bad reference files in
OUT_DIR/refs/. With CASE arguments only those cases are written. `--list` prints every case
with what it breaks.

Python standard library only (no numpy), so the negative tests run wherever python3 does. The
safetensors reader/writer here is deliberately separate from tools/safetensors_io.py: a bug in
the shared helper must not hide the same bug in what the engine is tested against.

The one valid non-fixture model, `q_valid`, holds a pre-quantized int8-row tensor
(docs/format.md §3) computed exactly as the engine's load-time quantizer does, in float32:
s = max(absmax / 127, 1e-8); q = clamp(round_half_even(w / s), -128, 127). Each step is done
in double and rounded once to float32, which gives the correctly rounded float32 result for a
single division (a double carries more than 2*24+2 bits). So glm on q_valid with dense_bits 8
must predict exactly what it predicts on the float fixture with dense_bits 8.
"""
import argparse
import json
import os
import shutil
import struct
import sys

from tool_help import HelpFormatter

DENSE, SPARSE, FUSED = "oracle_dense", "oracle_sparse", "oracle_fused_bf16"
# The tensor that the pre-quantized cases replace: [64, 96] F32 in oracle_dense.
QNAME = "model.layers.0.self_attn.o_proj.weight"


# ---- safetensors, read and written by hand --------------------------------------------------

class StFile:
    """One safetensors file: header entries (ordered) and the raw data region."""

    def __init__(self, path):
        with open(path, "rb") as f:
            blob = f.read()
        (hlen,) = struct.unpack("<Q", blob[:8])
        self.header = json.loads(blob[8:8 + hlen].decode("utf-8"))
        self.data = blob[8 + hlen:]

    def tensor_names(self):
        return [k for k in self.header if k != "__metadata__"]

    def tensor_bytes(self, name):
        b, e = self.header[name]["data_offsets"]
        return self.data[b:e]

    def tensors(self):
        """[(name, dtype, shape, bytes)] in header order."""
        return [(n, self.header[n]["dtype"], list(self.header[n]["shape"]), self.tensor_bytes(n))
                for n in self.tensor_names()]


def header_bytes(header, extra_pad=0):
    """Serialized header padded with spaces to a multiple of 8, as the reference writer does;
    extra_pad more spaces move the data region off that alignment (legal: the format needs none)."""
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    return text + b" " * (-len(text) % 8 + extra_pad)


def write_raw(path, header_blob, data):
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_blob)))
        f.write(header_blob)
        f.write(data)


def write_tensors(path, tensors, metadata=None, extra_pad=0):
    """Writes [(name, dtype, shape, bytes)] with fresh, consecutive data offsets."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    chunks, pos = [], 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + len(raw)]}
        chunks.append(raw)
        pos += len(raw)
    write_raw(path, header_bytes(header, extra_pad), b"".join(chunks))


def copy_model(src, dst, skip_safetensors=False):
    """Copies every file of the model directory src into a new directory dst."""
    os.makedirs(dst)
    for fname in sorted(os.listdir(src)):
        if skip_safetensors and fname.endswith(".safetensors"):
            continue
        shutil.copyfile(os.path.join(src, fname), os.path.join(dst, fname))


def only_shard(d):
    shards = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    assert len(shards) == 1, d
    return os.path.join(d, shards[0])


# ---- float32 helpers (stdlib only) ----------------------------------------------------------

def f32(x):
    """Rounds a Python float to the nearest float32."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f32_values(raw):
    return list(struct.unpack("<%df" % (len(raw) // 4), raw))


def f32_bytes(values):
    return struct.pack("<%df" % len(values), *values)


def quantize_int8_rows(values, rows, cols):
    """int8-row quantization, bit-identical to quant.h's qt_quantize_row."""
    codes, scales = bytearray(rows * cols), []
    for r in range(rows):
        row = values[r * cols:(r + 1) * cols]
        absmax = max(abs(v) for v in row)
        s = f32(absmax / 127.0)
        if not s >= f32(1e-8):
            s = f32(1e-8)
        scales.append(s)
        for i, w in enumerate(row):
            q = round(f32(w / s))          # round() on a float is round-half-to-even
            q = max(-128, min(127, q))
            codes[r * cols + i] = q & 0xFF
    return bytes(codes), scales


# ---- the cases ------------------------------------------------------------------------------
# Each case is (name, description, function(fixtures_dir, case_dir)). The function builds the
# whole directory.

def rewrite_dense(fix, out, edit):
    """Copies oracle_dense and rewrites its shard through edit(StFile) -> None (in place)."""
    copy_model(os.path.join(fix, DENSE), out)
    path = only_shard(out)
    st = StFile(path)
    edit(st)
    write_raw(path, header_bytes(st.header), st.data)


def case_truncated(fix, out):
    copy_model(os.path.join(fix, DENSE), out)
    path = only_shard(out)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 1000)            # the last tensor (lm_head.weight) loses its tail


def case_tiny_file(fix, out):
    copy_model(os.path.join(fix, DENSE), out)
    with open(only_shard(out), "wb") as f:
        f.write(b"\x10\x00\x00")


def case_header_past_eof(fix, out):
    copy_model(os.path.join(fix, DENSE), out)
    path = only_shard(out)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.write(struct.pack("<Q", size + 4096))


def case_offsets_past_end(fix, out):
    def edit(st):
        n = len(st.data)
        st.header["model.norm.weight"]["data_offsets"] = [n + 64, n + 64 + 256]   # still 64 floats
    rewrite_dense(fix, out, edit)


def case_overlap(fix, out):
    def edit(st):
        a = st.header["model.layers.0.input_layernorm.weight"]
        st.header["model.layers.0.post_attention_layernorm.weight"]["data_offsets"] = [
            a["data_offsets"][0] + 128, a["data_offsets"][1] + 128]               # half inside
    rewrite_dense(fix, out, edit)


def case_bytecount(fix, out):
    def edit(st):
        st.header["model.layers.0.self_attn.q_a_layernorm.weight"]["shape"] = [49]   # 48 floats stored
    rewrite_dense(fix, out, edit)


def case_unknown_dtype(fix, out):
    def edit(st):
        st.header["model.layers.1.mlp.gate.weight"]["dtype"] = "Q4_K"
    rewrite_dense(fix, out, edit)


def case_bad_json(fix, out):
    copy_model(os.path.join(fix, DENSE), out)
    path = only_shard(out)
    st = StFile(path)
    blob = bytearray(header_bytes(st.header))
    i = blob.index(b'"dtype":')
    blob[i + 7:i + 8] = b";"               # "dtype";"F32"
    write_raw(path, bytes(blob), st.data)


def case_non_utf8(fix, out):
    copy_model(os.path.join(fix, DENSE), out)
    path = only_shard(out)
    st = StFile(path)
    blob = bytearray(header_bytes(st.header))
    i = blob.index(b"model.norm.weight")
    blob[i + 6] = 0xFF                     # "model.\xfform.weight": not UTF-8
    write_raw(path, bytes(blob), st.data)


def case_header_not_object(fix, out):
    copy_model(os.path.join(fix, DENSE), out)
    path = only_shard(out)
    st = StFile(path)
    write_raw(path, header_bytes([1, 2, 3]), st.data)


def case_dup_in_file(fix, out):
    # JSON allows a repeated key; a safetensors header must not (which of the two would win?).
    # The second entry points at 256 fresh bytes, so only the name clashes, not the bytes.
    copy_model(os.path.join(fix, DENSE), out)
    path = only_shard(out)
    st = StFile(path)
    blob = header_bytes(st.header).rstrip(b" ")
    n = len(st.data)
    entry = {"model.norm.weight": {"dtype": "F32", "shape": [64], "data_offsets": [n, n + 256]}}
    entry = json.dumps(entry, separators=(",", ":")).encode()
    blob = blob[:-1] + b"," + entry[1:-1] + b"}"
    write_raw(path, blob + b" " * (-len(blob) % 8), st.data + st.tensor_bytes("model.norm.weight"))


def case_offsets_reversed(fix, out):
    def edit(st):
        b, e = st.header["model.layers.2.post_attention_layernorm.weight"]["data_offsets"]
        st.header["model.layers.2.post_attention_layernorm.weight"]["data_offsets"] = [e, b]
    rewrite_dense(fix, out, edit)


def case_negative_shape(fix, out):
    def edit(st):
        st.header["model.layers.0.self_attn.kv_a_layernorm.weight"]["shape"] = [-32]
    rewrite_dense(fix, out, edit)


def case_duplicate(fix, out):
    # oracle_sparse keeps the MTP layer in a second shard; copy one of its tensors into the first.
    copy_model(os.path.join(fix, SPARSE), out)
    mtp = StFile(os.path.join(out, "out-mtp-00000.safetensors"))
    main_path = os.path.join(out, "model-00001-of-00001.safetensors")
    main = StFile(main_path)
    name = "model.layers.4.enorm.weight"
    tensors = main.tensors() + [(name, mtp.header[name]["dtype"], mtp.header[name]["shape"], mtp.tensor_bytes(name))]
    write_tensors(main_path, tensors, main.header.get("__metadata__"))


def case_missing_tensor(fix, out):
    def edit(st):
        del st.header["model.layers.1.self_attn.o_proj.weight"]    # its bytes stay as a gap
    rewrite_dense(fix, out, edit)


def case_wrong_shape(fix, out):
    def edit(st):
        st.header["model.layers.2.self_attn.o_proj.weight"]["shape"] = [96, 64]   # same bytes, transposed
    rewrite_dense(fix, out, edit)


def case_wrong_vector(fix, out):
    def edit(st):
        st.header["model.layers.1.post_attention_layernorm.weight"]["shape"] = [8, 8]
    rewrite_dense(fix, out, edit)


def put_nan(fix, out, name, index):
    copy_model(os.path.join(fix, DENSE), out)
    path = only_shard(out)
    st = StFile(path)
    b, _ = st.header[name]["data_offsets"]
    data = bytearray(st.data)
    data[b + 4 * index:b + 4 * index + 4] = struct.pack("<f", float("nan"))
    write_raw(path, header_bytes(st.header), bytes(data))


def case_nan_matrix(fix, out):
    put_nan(fix, out, "model.layers.2.mlp.experts.5.up_proj.weight", 7 * 64 + 3)   # row 7


def case_nan_vector(fix, out):
    put_nan(fix, out, "model.layers.1.self_attn.kv_a_layernorm.weight", 9)


def case_inf_router(fix, out):
    copy_model(os.path.join(fix, DENSE), out)
    path = only_shard(out)
    st = StFile(path)
    b, _ = st.header["model.layers.1.mlp.gate.weight"]["data_offsets"]
    data = bytearray(st.data)
    data[b + 4 * 100:b + 4 * 101] = struct.pack("<f", float("inf"))                # row 1
    write_raw(path, header_bytes(st.header), bytes(data))


def case_nan_fused_bf16(fix, out):
    copy_model(os.path.join(fix, FUSED), out)
    path = only_shard(out)
    st = StFile(path)
    name = "model.layers.1.mlp.experts.gate_up_proj"           # BF16 [8, 80, 80]
    b, _ = st.header[name]["data_offsets"]
    data = bytearray(st.data)
    i = (3 * 80 + 50) * 80 + 11                                 # expert 3, an up row
    data[b + 2 * i:b + 2 * i + 2] = b"\xc0\x7f"                 # BF16 quiet NaN
    write_raw(path, header_bytes(st.header), bytes(data))


def case_fused_wrong_shape(fix, out):
    copy_model(os.path.join(fix, FUSED), out)
    path = only_shard(out)
    st = StFile(path)
    st.header["model.layers.2.mlp.experts.down_proj"]["shape"] = [8, 40, 80]   # transposed [E, I, D]
    write_raw(path, header_bytes(st.header), st.data)


def case_f8_without_scale(fix, out):
    def edit(st):
        e = st.header["model.layers.0.self_attn.q_b_proj.weight"]                # [96, 48]
        b = e["data_offsets"][0]
        e["dtype"] = "F8_E4M3"
        e["data_offsets"] = [b, b + 96 * 48]                                      # rest becomes a gap
    rewrite_dense(fix, out, edit)


def case_no_safetensors(fix, out):
    copy_model(os.path.join(fix, DENSE), out, skip_safetensors=True)


# -- pre-quantized containers (NAME U8/I8 + NAME.qs F32) --

def write_prequant(fix, out, codes_dtype="I8", codes=None, scales=None, metadata_extra=None, qs_dtype="F32",
                   with_qs=True):
    """oracle_dense with QNAME replaced by a pre-quantized pair; the arguments override its parts."""
    copy_model(os.path.join(fix, DENSE), out)
    path = only_shard(out)
    st = StFile(path)
    shape = st.header[QNAME]["shape"]
    good_codes, good_scales = quantize_int8_rows(f32_values(st.tensor_bytes(QNAME)), shape[0], shape[1])
    codes = good_codes if codes is None else codes
    scales = good_scales if scales is None else scales
    qs_raw = f32_bytes(scales) if qs_dtype == "F32" else struct.pack("<%de" % len(scales), *scales)
    tensors = []
    for name, dtype, shp, raw in st.tensors():
        if name != QNAME:
            tensors.append((name, dtype, shp, raw))
            continue
        tensors.append((QNAME, codes_dtype, [len(codes)], codes))
        if with_qs:
            tensors.append((QNAME + ".qs", qs_dtype, [len(scales)], qs_raw))
    metadata = dict(st.header.get("__metadata__", {}))
    if metadata_extra:
        metadata.update(metadata_extra)
    write_tensors(path, tensors, metadata)
    return good_codes, good_scales


def case_q_valid(fix, out):
    write_prequant(fix, out, metadata_extra={"colibri.fmt": json.dumps({QNAME: "int8-row"})})


def case_q_valid_u8(fix, out):
    write_prequant(fix, out, codes_dtype="U8")


def case_q_zero_scales(fix, out):
    # Valid but useless: every scale 0, so o_proj of layer 0 outputs zeros. Predictions must change,
    # which shows the engine really uses the pre-quantized pair it was given.
    _, scales = quantize_from_fixture(fix)
    write_prequant(fix, out, scales=[0.0] * len(scales))


def case_q_bytes_fit_no_format(fix, out):
    codes, _ = quantize_from_fixture(fix)
    write_prequant(fix, out, codes=codes[:5000])


def case_q_qs_wrong_length(fix, out):
    _, scales = quantize_from_fixture(fix)
    write_prequant(fix, out, scales=scales[:63])


def case_q_stamp_contradicts(fix, out):
    write_prequant(fix, out, metadata_extra={"colibri.fmt": json.dumps({QNAME: "int4-row"})})


def case_q_stamp_not_object(fix, out):
    write_prequant(fix, out, metadata_extra={"colibri.fmt": "int8-row"})


def case_q_negative_scale(fix, out):
    _, scales = quantize_from_fixture(fix)
    scales[5] = -abs(scales[5])
    write_prequant(fix, out, scales=scales)


def case_q_nan_scale(fix, out):
    _, scales = quantize_from_fixture(fix)
    scales[7] = float("nan")
    write_prequant(fix, out, scales=scales)


def case_q_qs_f16(fix, out):
    write_prequant(fix, out, qs_dtype="F16")


def case_q_no_qs(fix, out):
    write_prequant(fix, out, with_qs=False)


# -- pre-quantized routed experts (the streaming expert store reads these lazily) --

def is_routed_expert(name):
    parts = name.split(".")
    return len(parts) == 8 and parts[3:5] == ["mlp", "experts"] and parts[5].isdigit()


def write_prequant_experts(fix, out, corrupt=None, extra_pad=0):
    """oracle_dense with EVERY routed expert tensor as int8-row + .qs, each expert's three payloads
    adjacent and its three scale arrays right after (docs/format.md §4). corrupt(name, codes,
    scales) may return replacements for one tensor; extra_pad shifts the data region off 4-byte
    alignment."""
    copy_model(os.path.join(fix, DENSE), out)
    path = only_shard(out)
    st = StFile(path)
    tensors, pending_scales = [], []
    for name, dtype, shape, raw in st.tensors():
        if not is_routed_expert(name):
            tensors.append((name, dtype, shape, raw))
            continue
        codes, scales = quantize_int8_rows(f32_values(raw), shape[0], shape[1])
        if corrupt:
            codes, scales = corrupt(name, codes, scales)
        if codes is None:                                        # keep this one float
            tensors.append((name, dtype, shape, raw))
        else:
            tensors.append((name, "I8", [len(codes)], codes))
            pending_scales.append((name + ".qs", "F32", [len(scales)], f32_bytes(scales)))
        if name.endswith("down_proj.weight"):                    # gate, up, down done: the scales follow
            tensors.extend(pending_scales)
            pending_scales = []
    write_tensors(path, tensors, st.header.get("__metadata__"), extra_pad)


EXPERT = "model.layers.2.mlp.experts.5.up_proj.weight"


def case_qe_valid(fix, out):
    write_prequant_experts(fix, out)


def case_qe_mixed(fix, out):
    write_prequant_experts(fix, out, lambda n, c, s: (None, None) if n == EXPERT else (c, s))


def case_qe_nan_scale(fix, out):
    def corrupt(name, codes, scales):
        if name == EXPERT:
            scales[3] = float("nan")
        return codes, scales
    write_prequant_experts(fix, out, corrupt)


def case_qe_negative_scale(fix, out):
    def corrupt(name, codes, scales):
        if name == EXPERT:
            scales[4] = -scales[4]
        return codes, scales
    write_prequant_experts(fix, out, corrupt)


def case_qe_bytes_fit_no_format(fix, out):
    write_prequant_experts(fix, out, lambda n, c, s: (c[:-7], s) if n == EXPERT else (c, s))


def quantize_from_fixture(fix):
    st = StFile(only_shard(os.path.join(fix, DENSE)))
    shape = st.header[QNAME]["shape"]
    codes, scales = quantize_int8_rows(f32_values(st.tensor_bytes(QNAME)), shape[0], shape[1])
    return codes, scales


# -- config.json --

def config_case(edit, base=DENSE):
    def build(fix, out):
        copy_model(os.path.join(fix, base), out)
        path = os.path.join(out, "config.json")
        with open(path) as f:
            cfg = json.load(f)
        edit(cfg)
        with open(path, "w") as f:
            json.dump(cfg, f, indent=2)
    return build


def set_fields(**fields):
    def edit(cfg):
        cfg.update(fields)
    return edit


def delete_field(key):
    def edit(cfg):
        del cfg[key]
    return edit


def set_rope_type(cfg):
    cfg["rope_parameters"]["rope_type"] = "yarn"
    cfg["rope_parameters"]["factor"] = 4.0


def case_cfg_malformed(fix, out):
    copy_model(os.path.join(fix, DENSE), out)
    path = os.path.join(out, "config.json")
    with open(path) as f:
        lines = f.read().split("\n")
    i = next(k for k, line in enumerate(lines) if '"hidden_size"' in line)
    lines[i] = lines[i].replace(",", "")   # no comma after "hidden_size": 64 (line i+1)
    with open(path, "w") as f:
        f.write("\n".join(lines))


def case_cfg_missing(fix, out):
    copy_model(os.path.join(fix, DENSE), out)
    os.remove(os.path.join(out, "config.json"))


def case_gencfg_malformed(fix, out):
    copy_model(os.path.join(fix, DENSE), out)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        f.write('{"eos_token_id": [476, 483,, 485]}\n')


# -- hostile folders: what a broken download, a careless copy or a malicious upload leaves behind --

def with_extra_entry(make):
    """oracle_dense plus one more *.safetensors entry, made by make(path)."""
    def build(fix, out):
        copy_model(os.path.join(fix, DENSE), out)
        make(os.path.join(out, "model-extra.safetensors"))
    return build


def make_empty_file(path):
    open(path, "wb").close()


def case_shape_overflow(fix, out):
    def edit(st):   # 2^62 x 4 F32 elements: 2^66 bytes, 0 after a 64-bit wrap; the span is 0 bytes too
        b = st.header["model.norm.weight"]["data_offsets"][0]
        st.header["model.norm.weight"].update(shape=[2 ** 62, 4], data_offsets=[b, b])
    rewrite_dense(fix, out, edit)


def case_shape_huge_dims(fix, out):
    def edit(st):   # every dimension near 2^63: the element count overflows at the second factor
        st.header["model.layers.0.self_attn.o_proj.weight"]["shape"] = [2 ** 63 - 1, 2 ** 63 - 1, 2 ** 63 - 1]
    rewrite_dense(fix, out, edit)


def case_header_len_max(fix, out):
    copy_model(os.path.join(fix, DENSE), out)
    path = only_shard(out)
    with open(path, "r+b") as f:
        f.write(struct.pack("<Q", 2 ** 64 - 1))   # 8 + length wraps around in 64 bits


def case_duplicate_copy(fix, out):
    copy_model(os.path.join(fix, DENSE), out)
    shutil.copyfile(only_shard(out), os.path.join(out, "model-copy.safetensors"))


def case_index_outside(fix, out):
    """lm_head.weight moved to a file outside the folder, which model.safetensors.index.json points
    at with ../: glm reads only the folder's own *.safetensors, so the tensor is missing."""
    copy_model(os.path.join(fix, DENSE), out)
    path = only_shard(out)
    st = StFile(path)
    keep = [t for t in st.tensors() if t[0] != "lm_head.weight"]
    moved = [t for t in st.tensors() if t[0] == "lm_head.weight"]
    write_tensors(path, keep, st.header.get("__metadata__"))
    outside = os.path.join(os.path.dirname(out), os.path.basename(out) + "-outside.safetensors")
    write_tensors(outside, moved)
    weight_map = {t[0]: os.path.basename(path) for t in keep}
    weight_map["lm_head.weight"] = "../" + os.path.basename(outside)
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


def put_value(name, index, value, fixture=DENSE):
    def build(fix, out):
        copy_model(os.path.join(fix, fixture), out)
        path = only_shard(out)
        st = StFile(path)
        b, _ = st.header[name]["data_offsets"]
        data = bytearray(st.data)
        data[b + 4 * index:b + 4 * index + 4] = struct.pack("<f", value)
        write_raw(path, header_bytes(st.header), bytes(data))
    return build


def case_mtp_absent(fix, out):
    """VALID: the dense fixture without its MTP layer (layer 3): an MTP head is optional on disk."""
    def edit(st):
        for name in [n for n in st.header if n.startswith("model.layers.3.")]:
            del st.header[name]
    rewrite_dense(fix, out, edit)


def case_mtp_absent_shard(fix, out):
    """VALID: oracle_sparse without out-mtp-00000.safetensors, the shard that holds its MTP layer."""
    copy_model(os.path.join(fix, SPARSE), out)
    os.remove(os.path.join(out, "out-mtp-00000.safetensors"))


def case_qe_valid_odd_offsets(fix, out):
    """VALID: qe_valid with its data region starting at an odd offset: every .qs is misaligned."""
    write_prequant_experts(fix, out, extra_pad=1)


def replace_file(fname, make):
    """oracle_dense with fname replaced by make(path) (a link, a FIFO, a directory...)."""
    def build(fix, out):
        copy_model(os.path.join(fix, DENSE), out)
        os.remove(os.path.join(out, fname))
        make(os.path.join(out, fname))
    return build


def case_cfg_huge(fix, out):
    copy_model(os.path.join(fix, DENSE), out)
    path = os.path.join(out, "config.json")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:       # valid JSON, 9 MiB of it: far beyond any real config.json
        f.write(text.rstrip() + " " * (9 << 20) + "\n")


def case_cfg_deep(fix, out):
    copy_model(os.path.join(fix, DENSE), out)
    with open(os.path.join(out, "config.json"), "w") as f:
        f.write("[" * 100000 + "]" * 100000)


def set_rope_parameters_theta(cfg):
    cfg["rope_parameters"]["rope_theta"] = 1e39


# -- reference files (written to OUT/refs, no model dir) --

def write_refs(fix, out_dir):
    refs = os.path.join(out_dir, "refs")
    os.makedirs(refs, exist_ok=True)
    with open(os.path.join(fix, DENSE, "reference.json")) as f:
        text = f.read()
    ref = json.loads(text)

    def dump(name, obj):
        with open(os.path.join(refs, name), "w") as f:
            json.dump(obj, f)

    with open(os.path.join(refs, "malformed.json"), "w") as f:
        f.write(text.replace('"full_ids":', '"full_ids"', 1))
    bad = dict(ref, full_ids=list(ref["full_ids"]))
    bad["full_ids"][3] = (bad["full_ids"][3] + 1) % 512
    dump("not_prefix.json", bad)
    big = dict(ref, full_ids=list(ref["full_ids"]))
    big["full_ids"][12] = 9999                                   # vocab is 512
    dump("full_id_over_vocab.json", big)
    big = dict(ref, prompt_ids=list(ref["prompt_ids"]), full_ids=list(ref["full_ids"]))
    big["prompt_ids"][2] = big["full_ids"][2] = 70000
    dump("prompt_id_over_vocab.json", big)
    dump("no_prompt.json", {k: v for k, v in ref.items() if k != "prompt_ids"})
    neg = dict(ref, full_ids=list(ref["full_ids"]))
    neg["full_ids"][10] = -1
    dump("negative_id.json", neg)
    short = dict(ref, tf_pred=ref["tf_pred"][:-2])
    dump("tf_pred_short.json", short)


CASES = [
    # safetensors container
    ("st_truncated", "shard cut 1000 bytes short: the last tensor's data is gone", case_truncated),
    ("st_tiny_file", "a 3-byte .safetensors file", case_tiny_file),
    ("st_header_past_eof", "u64 header length larger than the file", case_header_past_eof),
    ("st_offsets_past_end", "model.norm.weight data_offsets beyond the data region", case_offsets_past_end),
    ("st_overlap", "post_attention_layernorm bytes overlap input_layernorm of layer 0", case_overlap),
    ("st_bytecount", "q_a_layernorm shape [49] but 48 floats of data", case_bytecount),
    ("st_unknown_dtype", "layer 1 router dtype Q4_K", case_unknown_dtype),
    ("st_bad_json", "header JSON with ';' for ':'", case_bad_json),
    ("st_non_utf8", "header with a 0xFF byte inside a tensor name", case_non_utf8),
    ("st_header_not_object", "header is a JSON array", case_header_not_object),
    ("st_dup_in_file", "model.norm.weight twice in one header", case_dup_in_file),
    ("st_offsets_reversed", "data_offsets [end, begin] for layer 2 post_attention_layernorm", case_offsets_reversed),
    ("st_negative_shape", "shape [-32] for layer 0 kv_a_layernorm", case_negative_shape),
    ("st_duplicate", "model.layers.4.enorm.weight in both shards of oracle_sparse", case_duplicate),
    ("st_missing_tensor", "model.layers.1.self_attn.o_proj.weight deleted", case_missing_tensor),
    ("st_wrong_shape", "model.layers.2.self_attn.o_proj.weight stored as [96, 64]", case_wrong_shape),
    ("st_wrong_vector", "model.layers.1.post_attention_layernorm.weight stored as [8, 8]", case_wrong_vector),
    ("st_nan_matrix", "NaN in model.layers.2.mlp.experts.5.up_proj.weight row 7", case_nan_matrix),
    ("st_nan_vector", "NaN in model.layers.1.self_attn.kv_a_layernorm.weight", case_nan_vector),
    ("st_inf_router", "+inf in the layer 1 router model.layers.1.mlp.gate.weight", case_inf_router),
    ("st_nan_fused_bf16", "BF16 NaN in oracle_fused_bf16's fused gate_up_proj of layer 1", case_nan_fused_bf16),
    ("st_fused_wrong_shape", "fused down_proj of layer 2 stored as [8, 40, 80]", case_fused_wrong_shape),
    ("st_f8_without_scale", "q_b_proj of layer 0 as F8_E4M3 without a weight_scale_inv", case_f8_without_scale),
    ("st_none", "config.json but no *.safetensors file", case_no_safetensors),
    # pre-quantized tensors
    ("q_valid", "VALID: %s as int8-row I8 + .qs, stamped int8-row" % QNAME, case_q_valid),
    ("q_valid_u8", "VALID: %s as int8-row U8 + .qs, no stamp" % QNAME, case_q_valid_u8),
    ("q_zero_scales", "VALID but zeroed: every scale of %s is 0" % QNAME, case_q_zero_scales),
    ("q_bytes_fit_no_format", "5000 code bytes for [64, 96]: no format", case_q_bytes_fit_no_format),
    ("q_qs_wrong_length", "int8 codes but 63 scales for 64 rows", case_q_qs_wrong_length),
    ("q_stamp_contradicts", "colibri.fmt says int4-row, bytes say int8-row", case_q_stamp_contradicts),
    ("q_stamp_not_object", "colibri.fmt is the string 'int8-row', not a JSON object", case_q_stamp_not_object),
    ("q_negative_scale", "scale of row 5 negative", case_q_negative_scale),
    ("q_nan_scale", "scale of row 7 NaN", case_q_nan_scale),
    ("q_qs_f16", ".qs stored as F16", case_q_qs_f16),
    ("q_no_qs", "I8 codes without a .qs companion", case_q_no_qs),
    # pre-quantized routed experts
    ("qe_valid", "VALID: every routed expert int8-row + .qs, payloads and scales adjacent", case_qe_valid),
    ("qe_mixed", "every routed expert pre-quantized except %s (float)" % EXPERT, case_qe_mixed),
    ("qe_nan_scale", "pre-quantized experts, NaN scale in row 3 of %s" % EXPERT, case_qe_nan_scale),
    ("qe_negative_scale", "pre-quantized experts, negative scale in row 4 of %s" % EXPERT, case_qe_negative_scale),
    ("qe_bytes_fit_no_format", "pre-quantized experts, %s 7 bytes short" % EXPERT, case_qe_bytes_fit_no_format),
    # config.json
    ("cfg_model_type", "model_type llama", config_case(set_fields(model_type="llama"))),
    ("cfg_no_hidden", "hidden_size removed", config_case(delete_field("hidden_size"))),
    ("cfg_negative_heads", "num_attention_heads -4", config_case(set_fields(num_attention_heads=-4))),
    ("cfg_zero_inter", "intermediate_size 0", config_case(set_fields(intermediate_size=0))),
    ("cfg_zero_vocab", "vocab_size 0", config_case(set_fields(vocab_size=0))),
    ("cfg_string_size", "hidden_size \"64\" (a string)", config_case(set_fields(hidden_size="64"))),
    ("cfg_rope_odd", "qk_rope_head_dim 7", config_case(set_fields(qk_rope_head_dim=7, qk_head_dim=23))),
    ("cfg_yarn", "rope_parameters.rope_type yarn", config_case(set_rope_type)),
    ("cfg_gelu", "hidden_act gelu", config_case(set_fields(hidden_act="gelu"))),
    ("cfg_softmax", "scoring_func softmax", config_case(set_fields(scoring_func="softmax"))),
    ("cfg_group_indivisible", "8 experts, n_group 3", config_case(set_fields(n_group=3))),
    ("cfg_indexer_types_len", "indexer_types with 2 entries for 3 layers",
     config_case(set_fields(indexer_types=["full", "shared"]))),
    ("cfg_indexer_types_entry", "indexer_types[1] = sparse",
     config_case(set_fields(indexer_types=["full", "sparse", "full"]))),
    ("cfg_topk_over_experts", "num_experts_per_tok 9 of 8", config_case(set_fields(num_experts_per_tok=9))),
    ("cfg_malformed", "config.json missing a comma (line 7)", case_cfg_malformed),
    ("cfg_missing", "no config.json", case_cfg_missing),
    ("cfg_gencfg_malformed", "generation_config.json with ',,'", case_gencfg_malformed),
    ("cfg_rope_theta_1e39", "rope_theta 1e39 (infinite as a float)", config_case(set_fields(rope_theta=1e39))),
    ("cfg_rope_params_theta_1e39", "rope_parameters.rope_theta 1e39 (infinite as a float)",
     config_case(set_rope_parameters_theta)),
    ("cfg_routed_scale_1e39", "routed_scaling_factor 1e39", config_case(set_fields(routed_scaling_factor=1e39))),
    ("cfg_negative_eps", "rms_norm_eps -1e-5", config_case(set_fields(rms_norm_eps=-1e-5))),
    ("cfg_fractional_layers", "num_hidden_layers 3.5", config_case(set_fields(num_hidden_layers=3.5))),
    ("cfg_huge_int", "hidden_size 1e300", config_case(set_fields(hidden_size=1e300))),
    ("cfg_huge_dims", "vocab_size 2^24, hidden_size 2^16 (tensors unchanged)",
     config_case(set_fields(vocab_size=2 ** 24, hidden_size=2 ** 16))),
    ("cfg_many_layers", "num_hidden_layers 4096", config_case(set_fields(num_hidden_layers=4096))),
    ("cfg_dev_zero", "config.json is a link to /dev/zero (endless)", replace_file("config.json", lambda p: os.symlink("/dev/zero", p))),
    ("cfg_gencfg_dev_zero", "generation_config.json is a link to /dev/zero",
     replace_file("generation_config.json", lambda p: os.symlink("/dev/zero", p))),
    ("cfg_fifo", "config.json is a FIFO nobody writes", replace_file("config.json", os.mkfifo)),
    ("cfg_directory", "config.json is a directory", replace_file("config.json", os.mkdir)),
    ("cfg_empty", "config.json is 0 bytes", replace_file("config.json", make_empty_file)),
    ("cfg_huge", "config.json of 9 MiB (valid JSON)", case_cfg_huge),
    ("cfg_deep", "config.json nested 100000 arrays deep", case_cfg_deep),
    # hostile folders
    ("st_dir_entry", "a directory named model-extra.safetensors", with_extra_entry(os.mkdir)),
    ("st_fifo_entry", "a FIFO named model-extra.safetensors", with_extra_entry(os.mkfifo)),
    ("st_dangling_link", "model-extra.safetensors links to nothing",
     with_extra_entry(lambda p: os.symlink("no-such-blob", p))),
    ("st_link_loop", "model-extra.safetensors links to itself",
     with_extra_entry(lambda p: os.symlink(os.path.basename(p), p))),
    ("st_dev_zero_entry", "model-extra.safetensors links to /dev/zero", with_extra_entry(lambda p: os.symlink("/dev/zero", p))),
    ("st_zero_size", "an empty model-extra.safetensors", with_extra_entry(make_empty_file)),
    ("st_shape_overflow", "model.norm.weight shape [2^62, 4] F32 with a 0-byte span (wraps to 0)", case_shape_overflow),
    ("st_shape_huge_dims", "o_proj of layer 0 with three dimensions of 2^63-1", case_shape_huge_dims),
    ("st_header_len_max", "u64 header length 2^64-1", case_header_len_max),
    ("st_duplicate_copy", "the whole shard twice (model-copy.safetensors)", case_duplicate_copy),
    ("st_index_outside", "lm_head.weight outside the folder, index.json points at ../", case_index_outside),
    ("st_inf_final_norm", "+inf in model.norm.weight", put_value("model.norm.weight", 5, float("inf"))),
    ("st_nan_input_norm", "NaN in model.layers.0.input_layernorm.weight", put_value("model.layers.0.input_layernorm.weight", 0, float("nan"))),
    ("st_ninf_mtp_norm", "-inf in the MTP layer's model.layers.3.enorm.weight", put_value("model.layers.3.enorm.weight", 63, float("-inf"))),
    # valid variants the loader must accept
    ("mtp_absent", "VALID: oracle_dense without any model.layers.3.* (MTP) tensor", case_mtp_absent),
    ("mtp_absent_shard", "VALID: oracle_sparse without its MTP shard", case_mtp_absent_shard),
    ("qe_valid_odd_offsets", "VALID: qe_valid with the data region at an odd offset (misaligned .qs)", case_qe_valid_odd_offsets),
]


class ListCases(argparse.Action):
    """--list: print every case and exit, whatever else the command line holds."""

    def __call__(self, parser, namespace, values, option_string=None):
        for name, desc, _ in CASES:
            print("%-26s %s" % (name, desc))
        parser.exit()


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    ap.add_argument("fixtures", metavar="FIXTURES_DIR", help="holds oracle_dense, oracle_sparse and "
                    "oracle_fused_bf16 (tests/fixtures)")
    ap.add_argument("out", metavar="OUT_DIR", help="receives one folder per case, and refs/")
    ap.add_argument("cases", nargs="*", default=[], metavar="CASE", help="only these cases, 'refs' for the reference files "
                    "(default: all)")
    ap.add_argument("--list", action=ListCases, nargs=0, default=False,
                    help="print every case with what it breaks, and exit")
    a = ap.parse_args(argv[1:])
    fix, out = a.fixtures, a.out
    wanted = set(a.cases)
    unknown = wanted - {c[0] for c in CASES} - {"refs"}
    if unknown:
        sys.stderr.write("make_bad_models.py: unknown case(s): %s (see --list)\n" % ", ".join(sorted(unknown)))
        return 2
    for d in (DENSE, SPARSE, FUSED):
        if not os.path.isfile(os.path.join(fix, d, "config.json")):
            sys.stderr.write("make_bad_models.py: %s is not a fixture directory\n" % os.path.join(fix, d))
            return 2
    os.makedirs(out, exist_ok=True)
    for name, _, build in CASES:
        if wanted and name not in wanted:
            continue
        case_dir = os.path.join(out, name)
        if os.path.exists(case_dir):
            shutil.rmtree(case_dir)
        build(fix, case_dir)
    if not wanted or "refs" in wanted:
        write_refs(fix, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

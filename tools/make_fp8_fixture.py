#!/usr/bin/python3
"""make_fp8_fixture.py: turn a float GLM model directory (HF layout, e.g. tests/fixtures/oracle_dense)
into the layout of the vendor's FP8 release, for testing the converter and the engine's FP8 reader.

    /usr/bin/python3 tools/make_fp8_fixture.py SRC DST [--dequant-out DIR] [--shard-mb MB]
                                               [--bf16-rest] [--fuse-experts] [--index]

Every Linear weight that the FP8 release quantizes (docs/model.md section 2.4) becomes F8_E4M3
(e4m3fn) with a NAME_scale_inv F32 companion [ceil(O/128), ceil(I/128)]: per 128x128 block,
scale = blockabsmax / 448 (1 for an all-zero block), code = round-to-nearest-even e4m3fn of w/scale,
saturating at +-448. Not quantized: embed_tokens, lm_head, norms, the router mlp.gate.weight,
e_score_correction_bias, indexer.weights_proj, the MTP eh_proj/enorm/hnorm/shared_head.norm.
Fused experts (mlp.experts.gate_up_proj / down_proj, 3-D) get a 3-D companion [E, ...].

--dequant-out DIR   also write the exact dequantized model (code value * scale in float32, F32
                    tensors, same names and layout): what the engine must see after reading DST.
--shard-mb MB       split DST (and DIR) into shards of about MB megabytes (companions may land in
                    the next shard, as in the real release); default: mirror the source shards.
--bf16-rest         store the tensors that stay unquantized as BF16 (round to nearest even), like
                    the real release; DIR then holds their BF16 values as F32.
--fuse-experts      rewrite per-expert tensors of each layer as the fused 3-D form before encoding.
--index             also write model.safetensors.index.json (metadata.total_size, weight_map: tensor
                    name -> shard file), as a Hugging Face release has.
config.json gets a quantization_config (fp8, e4m3, dynamic, [128,128]); other files
(generation_config.json, tokenizer*.json, chat_template.jinja, reference.json) are copied to DST and DIR.
"""
import argparse
import glob
import json
import os
import re
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import SafeFile, StError, to_f32, write_file  # noqa: E402
from tool_help import HelpFormatter  # noqa: E402

E4M3_MAX = np.float32(448.0)
NOT_FP8 = re.compile(r"(^model\.embed_tokens\.weight$|^lm_head\.weight$|norm\.|\.mlp\.gate\.weight$|"
                     r"e_score_correction_bias$|\.indexer\.weights_proj\.weight$|\.eh_proj\.weight$|"
                     r"\.shared_head\.)")
FUSED = re.compile(r"\.mlp\.experts\.(gate_up_proj|down_proj)$")
EXPERT = re.compile(r"^(model\.layers\.\d+\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


def e4m3_encode(x):
    """float32 array -> uint8 e4m3fn codes, round to nearest, ties to even, saturating at +-448."""
    x = np.asarray(x, dtype=np.float32)
    if not np.isfinite(x).all():
        raise ValueError("non-finite value")
    neg = np.signbit(x)
    a = np.minimum(np.abs(x), E4M3_MAX)
    # Spacing of e4m3 values around a: 2^(floor(log2 a) - 3) for normals (a >= 2^-6), 2^-9 below.
    _, e = np.frexp(a)
    expo = np.maximum(e.astype(np.int32) - 1, -6)
    quantum = np.ldexp(np.ones_like(a), expo - 3).astype(np.float32)
    q = (np.rint(a / quantum) * quantum).astype(np.float32)      # exact: quantum is a power of two
    _, e2 = np.frexp(q)
    e2 = e2.astype(np.int32) - 1                                   # floor(log2 q) where q > 0
    sub = q < np.float32(2.0 ** -6)
    code_sub = np.rint(q / np.float32(2.0 ** -9)).astype(np.int32)
    mant = np.rint((np.ldexp(q.astype(np.float64), -e2) - 1.0) * 8.0).astype(np.int32)
    code_norm = ((e2 + 7) << 3) | mant
    code = np.where(sub, code_sub, code_norm)
    code = code | np.where(neg, 0x80, 0)
    return code.astype(np.uint8)


def e4m3_decode(codes):
    """uint8 e4m3fn codes -> float32 (arithmetic decode, independent of safetensors_io's table)."""
    c = np.asarray(codes).astype(np.int32)
    sign = np.where(c & 0x80, -1.0, 1.0)
    e = (c >> 3) & 15
    m = (c & 7).astype(np.float64)
    v = np.where(e == 0, m * 2.0 ** -9, (1.0 + m / 8.0) * np.exp2(e.astype(np.float64) - 7.0))
    v = np.where((e == 15) & ((c & 7) == 7), np.nan, v)
    return (sign * v).astype(np.float32)


def fp8_quantize_2d(w):
    """w float32 [O, I] -> (codes uint8 [O, I], scale_inv float32 [ceil(O/128), ceil(I/128)],
    dequantized float32 [O, I])."""
    o, i = w.shape
    bo, bi = -(-o // 128), -(-i // 128)
    pad = np.zeros((bo * 128, bi * 128), dtype=np.float32)
    pad[:o, :i] = w
    blocks = pad.reshape(bo, 128, bi, 128)
    amax = np.abs(blocks).max(axis=(1, 3))
    scale = np.where(amax > 0, amax / E4M3_MAX, np.float32(1)).astype(np.float32)
    codes = e4m3_encode(blocks / scale[:, None, :, None]).reshape(bo * 128, bi * 128)[:o, :i]
    deq = (e4m3_decode(codes).reshape(o, i) *
           np.repeat(np.repeat(scale, 128, axis=0), 128, axis=1)[:o, :i]).astype(np.float32)
    return np.ascontiguousarray(codes), scale, deq


def bf16_round(w):
    """float32 -> BF16 bit patterns (uint16), round to nearest even."""
    u = np.asarray(w, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return r.astype(np.uint16)


def is_fp8_target(name, ndim):
    if FUSED.search(name):
        return ndim == 3
    return ndim == 2 and name.endswith(".weight") and not NOT_FP8.search(name)


def load_source(src):
    shards = sorted(glob.glob(os.path.join(src, "*.safetensors")))
    if not shards:
        raise StError(f"{src}: no *.safetensors files")
    out = []   # (shard basename, name, dtype, float32 array)
    seen = {}
    for p in shards:
        f = SafeFile(p)
        for n in f.names():
            if n in seen:
                raise StError(f"tensor {n} appears in both {seen[n]} and {p}")
            seen[n] = p
            dt = f.info(n)["dtype"]
            if dt not in ("F32", "BF16", "F16"):
                raise StError(f"{p}: tensor {n}: expected a float model, found {dt}")
            out.append((os.path.basename(p), n, to_f32(f.raw(n), dt).copy()))
    return out


def fuse_experts(tensors):
    """Replace per-expert tensors by mlp.experts.gate_up_proj [E,2I,D] and down_proj [E,D,I]."""
    groups, rest, first = {}, [], {}
    for sh, n, a in tensors:
        m = EXPERT.match(n)
        if m:
            groups.setdefault(m.group(1), {})[(int(m.group(2)), m.group(3))] = a
            first.setdefault(m.group(1), (sh, len(rest)))
        else:
            rest.append((sh, n, a))
    inserts = []
    for prefix, d in groups.items():
        ne = 1 + max(e for e, _ in d)
        try:
            gu = np.stack([np.concatenate([d[(e, "gate_proj")], d[(e, "up_proj")]], axis=0) for e in range(ne)])
            dn = np.stack([d[(e, "down_proj")] for e in range(ne)])
        except KeyError as k:
            raise StError(f"{prefix}: missing expert tensor {k}")
        sh, pos = first[prefix]
        inserts.append((pos, [(sh, prefix + ".gate_up_proj", gu), (sh, prefix + ".down_proj", dn)]))
    for pos, items in sorted(inserts, key=lambda t: -t[0]):
        rest[pos:pos] = items
    return rest


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    ap.add_argument("src", metavar="SRC", help="a float model folder in Hugging Face layout")
    ap.add_argument("dst", metavar="DST", help="the FP8 copy to write")
    ap.add_argument("--dequant-out", metavar="DIR", help="also write the exact F32 dequantization of DST there "
                    "(default: not written)")
    ap.add_argument("--shard-mb", type=float, metavar="MB", help="shards of about MB megabytes (default: the "
                    "source's shards)")
    ap.add_argument("--bf16-rest", action="store_true", help="store the unquantized tensors as BF16, as the "
                    "release does")
    ap.add_argument("--fuse-experts", action="store_true", help="write the experts in the fused 3-D form")
    ap.add_argument("--index", action="store_true", help="also write model.safetensors.index.json")
    a = ap.parse_args()

    tensors = load_source(a.src)
    if a.fuse_experts:
        tensors = fuse_experts(tensors)
    fp8_items, deq_items = [], []     # (shard, name, dtype, array)
    n_fp8 = 0
    for sh, n, w in tensors:
        if is_fp8_target(n, w.ndim):
            if w.ndim == 3:
                parts = [fp8_quantize_2d(w[e]) for e in range(w.shape[0])]
                codes = np.stack([p[0] for p in parts])
                scale = np.stack([p[1] for p in parts])
                deq = np.stack([p[2] for p in parts])
            else:
                codes, scale, deq = fp8_quantize_2d(w)
            fp8_items += [(sh, n, "F8_E4M3", codes), (sh, n + "_scale_inv", "F32", scale)]
            deq_items.append((sh, n, "F32", deq))
            n_fp8 += 1
        elif a.bf16_rest:
            b = bf16_round(w)
            fp8_items.append((sh, n, "BF16", b))
            deq_items.append((sh, n, "F32", to_f32(b, "BF16")))
        else:
            fp8_items.append((sh, n, "F32", w))
            deq_items.append((sh, n, "F32", w))

    # Shard assignment is decided on the FP8 items; the dequantized model uses the same file for
    # each tensor, so converting either directory must give byte-identical output files.
    if a.shard_mb is None:
        file_of = {n: sh for sh, n, _, _ in fp8_items}
    else:
        limit = a.shard_mb * 1e6
        groups, size = [[]], 0
        for _, n, _, x in fp8_items:
            if groups[-1] and size + x.nbytes > limit:
                groups.append([])
                size = 0
            groups[-1].append(n)
            size += x.nbytes
        file_of = {n: f"model-{j + 1:05d}-of-{len(groups):05d}.safetensors"
                   for j, g in enumerate(groups) for n in g}

    def shard_up(items):
        names = sorted(set(file_of[n] for _, n, _, _ in items))
        return [(f, [(n, dt, x) for _, n, dt, x in items if file_of[n] == f]) for f in names]

    with open(os.path.join(a.src, "config.json")) as fh:
        cfg = json.load(fh)
    outs = [(a.dst, fp8_items, True)]
    if a.dequant_out:
        outs.append((a.dequant_out, deq_items, False))
    for d, items, is_fp8 in outs:
        os.makedirs(d, exist_ok=True)
        for old in glob.glob(os.path.join(d, "*.safetensors")):
            os.remove(old)
        for fname, group in shard_up(items):
            write_file(os.path.join(d, fname), group)
        if a.index:
            index = {"metadata": {"total_size": sum(int(x.nbytes) for _, _, _, x in items)},
                     "weight_map": {n: file_of[n] for _, n, _, _ in sorted(items, key=lambda t: t[1])}}
            with open(os.path.join(d, "model.safetensors.index.json"), "w") as fh:
                json.dump(index, fh, indent=2)
                fh.write("\n")
        c = dict(cfg)
        if is_fp8:
            c["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                        "weight_block_size": [128, 128]}
        with open(os.path.join(d, "config.json"), "w") as fh:
            json.dump(c, fh, indent=2)
            fh.write("\n")
        for pat in ("generation_config.json", "tokenizer*.json", "chat_template.jinja", "reference.json"):
            for p in glob.glob(os.path.join(a.src, pat)):
                shutil.copyfile(p, os.path.join(d, os.path.basename(p)))
    print(f"make_fp8_fixture: {n_fp8} FP8 tensors, {len(tensors) - n_fp8} kept "
          f"{'BF16' if a.bf16_rest else 'F32'} -> {a.dst}" + (f" (+ dequantized {a.dequant_out})" if a.dequant_out else ""))


if __name__ == "__main__":
    try:
        main()
    except (StError, ValueError, OSError) as e:
        print(f"make_fp8_fixture: error: {e}", file=sys.stderr)
        sys.exit(1)

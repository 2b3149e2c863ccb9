#!/usr/bin/python3
"""make_glm_bench_model.py: write a random model with GLM-5.2's true per-layer dimensions directly in
the glm.c container format (docs/format.md), for disk/expert-streaming benchmarks.

    /usr/bin/python3 tools/make_glm_bench_model.py DST [--layers-dense 1] [--layers-moe 3] [--seed S]
                                                    [--shard-gb 3] [--experts 256] [--vocab 154880] [--mtp 1]

Dimensions (docs/model.md section 1): hidden 6144, 64 heads, q_lora 2048, kv_lora 512, qk_nope 192,
qk_rope 64, v 256, dense intermediate 12288, 256 experts x moe_intermediate 2048, top-8, 1 shared
expert, n_group 1, indexer 32 heads x 128, index_topk 2048, vocab 154880, rope theta 8e6.
num_hidden_layers = dense + moe; --mtp 1 (default) appends the MTP layer (a MoE layer with a full
indexer, enorm/hnorm/shared_head.norm and an int8 eh_proj), num_nextn_predict_layers 1; indexer_types follows
GLM-5.2's rule (freq 4, offset 3: layers 0-2 full, then one full layer in four), and only full layers
carry indexer weights. --experts / --vocab shrink the model for quick tries (then it is no longer
GLM-5.2-shaped in those two numbers).

Precision: routed experts and every other matrix int4 group 64; embed_tokens / lm_head int8-row;
indexer matrices int8-row; norms, router and correction bias f32. Payload bytes are uniform random
codes; scales are chosen so a unit-RMS input gives unit-RMS outputs (int4 codes have RMS 4.18,
int8 73.6; the one unpaired code, -8 or -128, is remapped to 0 so codes have mean 0), with
+-25% jitter. The router is skewed: e_score_correction_bias follows a Zipf-like
profile 0.5*(rank+1)^-0.7 over a random permutation of experts, so a few experts win most tokens.
Each expert's three payloads are adjacent, its three .qs arrays right after (docs/format.md §4);
shards of about --shard-gb GB never split an expert. reference.json holds random prompt_ids (16) and
full_ids (64) for replay. Prints the write rate.
"""
import argparse
import json
import math
import os
import queue
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import ShardWriter, atomic_write_bytes, header_bytes  # noqa: E402
from tool_help import HelpFormatter  # noqa: E402

H, NH, RQ, RKV, DN, DR, DV = 6144, 64, 2048, 512, 192, 64, 256
INTER, MOE_INTER, TOPK = 12288, 2048, 8
IDX_HEADS, IDX_DIM, IDX_TOPK = 32, 128, 2048
GROUP = 64
CHUNK = 8 << 20
# Raw random bytes give codes with mean -0.5 (q in -8..7 or -128..127), and that common offset adds
# the same value to every output row: the residual stream then drifts along one direction and every
# position predicts the same token. Remapping the one unpaired code to q = 0 makes codes symmetric.
NIB = np.arange(16, dtype=np.uint8)
NIB[0] = 8                                              # q = -8 -> 0: q uniform-ish in -7..7
INT4_SYM = (NIB[np.arange(256) & 15] | (NIB[np.arange(256) >> 4] << 4)).astype(np.uint8)
INT8_SYM = np.arange(256, dtype=np.uint8)
INT8_SYM[0x80] = 0                                      # q = -128 -> 0
RMS_INT4 = math.sqrt(280 / 16)    # RMS of the symmetric int4 codes
RMS_INT8 = math.sqrt(2 * sum(k * k for k in range(128)) / 256)


class Gen:
    """Fast random payloads (PCG64 raw output) and jittered scales from a reusable pool."""

    def __init__(self, seed):
        self.bits = np.random.PCG64(seed)
        self.rng = np.random.Generator(np.random.PCG64(seed + 1))
        self.jitter = (0.75 + 0.5 * self.rng.random(1 << 22, dtype=np.float32)).astype(np.float32)

    def payload(self, n, lut):
        words = self.bits.random_raw(-(-n // 8)).view(np.uint8)[:n]
        return np.take(lut, words)

    def scales(self, n, base):
        off = int(self.rng.integers(0, len(self.jitter)))
        idx = (np.arange(n, dtype=np.int64) + off) % len(self.jitter) if n > len(self.jitter) - off else None
        j = self.jitter[idx] if idx is not None else self.jitter[off:off + n]
        return (j * np.float32(base)).astype(np.float32)


def qtensor(name, rows, cols, fmt):
    """(payload entry, qs entry, generator) for a quantized [rows, cols] matrix."""
    if fmt == "int8-row":
        pay = (name, "I8", [rows * cols])
        qs = (name + ".qs", "F32", [rows])
        base = 1.0 / (RMS_INT8 * math.sqrt(cols))
    else:
        ng = -(-cols // GROUP)
        pay = (name, "U8", [rows * -(-cols // 2)])
        qs = (name + ".qs", "F32", [rows * ng])
        base = 1.0 / (RMS_INT4 * math.sqrt(cols))
        if ng == 1:
            fmt = "int4-row"
    return pay, qs, base, fmt


class Unit:
    def __init__(self):
        self.payloads, self.qss, self.floats, self.fmts = [], [], [], {}

    def matrix(self, name, rows, cols, fmt="int4-grouped", base=None):
        pay, qs, b, fmt = qtensor(name, rows, cols, fmt)
        self.payloads.append((pay, qs, b if base is None else base))
        self.fmts[name] = fmt

    def vector(self, name, values):
        self.floats.append((name, np.ascontiguousarray(values, dtype=np.float32)))

    def entries(self):
        return ([(n, "F32", list(v.shape)) for n, v in self.floats] + [p[0] for p in self.payloads]
                + [p[1] for p in self.payloads])

    def nbytes(self):
        return sum(n for _, n in header_bytes(self.entries())[1])


def indexer_types(n_layers, freq=4, offset=3):
    return ["full" if max(L - offset + 1, 0) % freq == 0 else "shared" for L in range(n_layers)]


def build_units(a, rng):
    n_layers = a.layers_dense + a.layers_moe
    itypes = indexer_types(n_layers)
    units = []
    u = Unit()
    u.matrix("model.embed_tokens.weight", a.vocab, H, "int8-row", base=1.0 / RMS_INT8)
    units.append(u)
    # the MTP layer (index n_layers, docs/model.md section 2.3) is a MoE layer with its own full indexer
    for L in range(n_layers + a.mtp):
        mtp = L == n_layers
        p = f"model.layers.{L}."
        u = Unit()
        u.vector(p + "input_layernorm.weight", np.ones(H))
        u.vector(p + "post_attention_layernorm.weight", np.ones(H))
        u.vector(p + "self_attn.q_a_layernorm.weight", np.ones(RQ))
        u.vector(p + "self_attn.kv_a_layernorm.weight", np.ones(RKV))
        u.matrix(p + "self_attn.q_a_proj.weight", RQ, H)
        u.matrix(p + "self_attn.q_b_proj.weight", NH * (DN + DR), RQ)
        u.matrix(p + "self_attn.kv_a_proj_with_mqa.weight", RKV + DR, H)
        u.matrix(p + "self_attn.kv_b_proj.weight", NH * (DN + DV), RKV)
        u.matrix(p + "self_attn.o_proj.weight", H, NH * DV)
        if mtp or itypes[L] == "full":
            u.vector(p + "self_attn.indexer.k_norm.weight", np.ones(IDX_DIM))
            u.vector(p + "self_attn.indexer.k_norm.bias", np.zeros(IDX_DIM))
            u.matrix(p + "self_attn.indexer.wq_b.weight", IDX_HEADS * IDX_DIM, RQ, "int8-row")
            u.matrix(p + "self_attn.indexer.wk.weight", IDX_DIM, H, "int8-row")
            u.matrix(p + "self_attn.indexer.weights_proj.weight", IDX_HEADS, H, "int8-row")
        if mtp:   # MTP weights stay at 8 bits (eh_proj's two column halves differ in scale)
            u.vector(p + "enorm.weight", np.ones(H))
            u.vector(p + "hnorm.weight", np.ones(H))
            u.vector(p + "shared_head.norm.weight", np.ones(H))
            u.matrix(p + "eh_proj.weight", H, 2 * H, "int8-row")
        if L < a.layers_dense:
            u.matrix(p + "mlp.gate_proj.weight", INTER, H)
            u.matrix(p + "mlp.up_proj.weight", INTER, H)
            u.matrix(p + "mlp.down_proj.weight", H, INTER)
            units.append(u)
            continue
        router = rng.standard_normal((a.experts, H), dtype=np.float32) * np.float32(1 / math.sqrt(H))
        hot = rng.permutation(a.experts)
        bias = np.zeros(a.experts, np.float32)
        bias[hot] = 0.5 * (np.arange(a.experts) + 1.0) ** -0.7
        u.vector(p + "mlp.gate.weight", router)
        u.vector(p + "mlp.gate.e_score_correction_bias", bias)
        for proj, r, c in (("gate_proj", MOE_INTER, H), ("up_proj", MOE_INTER, H), ("down_proj", H, MOE_INTER)):
            u.matrix(p + f"mlp.shared_experts.{proj}.weight", r, c)
        units.append(u)
        for e in range(a.experts):
            u = Unit()
            for proj, r, c in (("gate_proj", MOE_INTER, H), ("up_proj", MOE_INTER, H), ("down_proj", H, MOE_INTER)):
                u.matrix(p + f"mlp.experts.{e}.{proj}.weight", r, c)
            units.append(u)
    u = Unit()
    u.vector("model.norm.weight", np.ones(H))
    u.matrix("lm_head.weight", a.vocab, H, "int8-row", base=1.0 / (RMS_INT8 * math.sqrt(H)))
    units.append(u)
    return units, itypes


def eos_ids(vocab):
    """GLM-5.2's stop ids, or the last three ids of a shrunken vocabulary."""
    return [154820, 154827, 154829] if vocab > 154829 else [vocab - 3, vocab - 2, vocab - 1]


def config(a, itypes):
    n = len(itypes)
    return {
        "architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa",
        "vocab_size": a.vocab, "hidden_size": H, "num_hidden_layers": n,
        "num_attention_heads": NH, "num_key_value_heads": NH, "q_lora_rank": RQ, "kv_lora_rank": RKV,
        "qk_nope_head_dim": DN, "qk_rope_head_dim": DR, "qk_head_dim": DN + DR, "v_head_dim": DV,
        "head_dim": DN, "rope_parameters": {"rope_theta": 8000000.0, "rope_type": "default"},
        "rope_interleave": True, "indexer_rope_interleave": True, "max_position_embeddings": 1048576,
        "attention_bias": False, "attention_dropout": 0.0, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        "intermediate_size": INTER, "moe_intermediate_size": MOE_INTER,
        "first_k_dense_replace": a.layers_dense,
        "mlp_layer_types": ["dense"] * a.layers_dense + ["sparse"] * a.layers_moe, "moe_layer_freq": 1,
        "n_routed_experts": a.experts, "num_experts_per_tok": TOPK, "n_shared_experts": 1,
        "scoring_func": "sigmoid", "topk_method": "noaux_tc", "n_group": 1, "topk_group": 1,
        "norm_topk_prob": True, "routed_scaling_factor": 2.5, "moe_router_dtype": "float32",
        "index_n_heads": IDX_HEADS, "index_head_dim": IDX_DIM, "index_topk": IDX_TOPK,
        "index_topk_freq": 4, "index_skip_topk_offset": 3, "indexer_types": itypes,
        "num_nextn_predict_layers": a.mtp, "tie_word_embeddings": False,
        "eos_token_id": eos_ids(a.vocab), "pad_token_id": eos_ids(a.vocab)[0], "dtype": "bfloat16",
    }


class BackgroundWriter:
    """Writes chunks on a thread so random generation overlaps with the disk."""

    def __init__(self):
        self.q = queue.Queue(maxsize=8)
        self.err = None
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while True:
            item = self.q.get()
            if item is None:
                return
            w, name, data = item
            try:
                if self.err is None:
                    w.write(name, data)
            except BaseException as e:   # reported by put()/finish() on the main thread
                self.err = e

    def put(self, w, name, data):
        if self.err:
            raise self.err
        self.q.put((w, name, data))

    def finish(self):
        self.q.put(None)
        self.t.join()
        if self.err:
            raise self.err


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    ap.add_argument("dst", metavar="DST", help="the model folder to write (tens of GB at the defaults)")
    ap.add_argument("--layers-dense", type=int, default=1, metavar="N", help="dense layers first")
    ap.add_argument("--layers-moe", type=int, default=3, metavar="N", help="MoE layers after them")
    ap.add_argument("--seed", type=int, default=1, help="random seed of the weights and the prompt")
    ap.add_argument("--shard-gb", type=float, default=3.0, metavar="GB", help="about this many GB per shard")
    ap.add_argument("--experts", type=int, default=256, metavar="N", help="routed experts per MoE layer")
    ap.add_argument("--vocab", type=int, default=154880, metavar="N", help="vocabulary size")
    ap.add_argument("--mtp", type=int, default=1, choices=(0, 1), help="1: append GLM-5.2's MTP layer")
    a = ap.parse_args()
    if a.layers_dense < 0 or a.layers_moe < 0 or a.layers_dense + a.layers_moe < 1:
        ap.error("need at least one layer")
    if a.vocab < 64:
        ap.error("--vocab must be >= 64")
    if a.experts < TOPK:
        ap.error(f"--experts must be >= {TOPK}")
    rng = np.random.default_rng(a.seed)
    units, itypes = build_units(a, rng)

    shards, cur, size = [], [], 0
    for u in units:
        n = u.nbytes()
        if cur and size + n > a.shard_gb * 1e9:
            shards.append(cur)
            cur, size = [], 0
        cur.append(u)
        size += n
    shards.append(cur)
    total = sum(u.nbytes() for u in units)
    os.makedirs(a.dst, exist_ok=True)
    st = os.statvfs(a.dst)
    if st.f_bavail * st.f_frsize < total + 1e9:
        sys.exit(f"make_glm_bench_model: error: {a.dst}: {st.f_bavail * st.f_frsize / 1e9:.1f} GB free, "
                 f"need {total / 1e9:.1f} GB + 1 GB")
    print(f"make_glm_bench_model: {len(itypes)} layers ({a.layers_dense} dense, {a.layers_moe} MoE x "
          f"{a.experts} experts{' + MTP' if a.mtp else ''}), {total / 1e9:.2f} GB in {len(shards)} shard(s) -> {a.dst}", file=sys.stderr)

    gen = Gen(a.seed)
    bg = BackgroundWriter()
    t0 = time.time()
    written = 0
    last = t0
    for k, group in enumerate(shards):
        path = os.path.join(a.dst, f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors")
        fmts = {}
        entries = []
        for u in group:
            entries += u.entries()
            fmts.update(u.fmts)
        w = ShardWriter(path, entries, {"format": "pt", "colibri.fmt": json.dumps(fmts, sort_keys=True),
                                        "colibri.group": str(GROUP)})
        try:
            for u in group:
                for name, v in u.floats:
                    bg.put(w, name, v)
                for (name, dt, shape), _, _ in u.payloads:
                    n = shape[0]
                    lut = INT8_SYM if dt == "I8" else INT4_SYM
                    # 8 MB pieces: below glibc's mmap threshold, so freed buffers are reused instead of
                    # faulting in fresh pages (expensive on these VMs) for every piece.
                    for off in range(0, n, CHUNK):
                        bg.put(w, name, gen.payload(min(CHUNK, n - off), lut))
                for _, (qname, _, shape), base in u.payloads:
                    bg.put(w, qname, gen.scales(shape[0], base))
                written += u.nbytes()
                now = time.time()
                if now - last > 5:
                    last = now
                    print(f"  {written / 1e9:.1f}/{total / 1e9:.1f} GB, {written / 1e6 / (now - t0):.0f} MB/s",
                          file=sys.stderr)
            bg.finish()
            w.close()
            bg = BackgroundWriter()
        except BaseException:
            w.abort()
            raise
    bg.finish()
    dt = time.time() - t0
    atomic_write_bytes(os.path.join(a.dst, "config.json"), (json.dumps(config(a, itypes), indent=2) + "\n").encode())
    atomic_write_bytes(os.path.join(a.dst, "generation_config.json"),
                       json.dumps({"eos_token_id": eos_ids(a.vocab), "pad_token_id": eos_ids(a.vocab)[0]}).encode())
    full = [int(x) for x in rng.integers(0, a.vocab, 64)]
    atomic_write_bytes(os.path.join(a.dst, "reference.json"),
                       json.dumps({"prompt_ids": full[:16], "full_ids": full,
                                   "config_summary": "random GLM-5.2-shaped bench model (no oracle predictions)"}).encode())
    print(f"make_glm_bench_model: wrote {total / 1e9:.2f} GB in {dt:.1f} s = {total / 1e6 / dt:.0f} MB/s", file=sys.stderr)


if __name__ == "__main__":
    main()

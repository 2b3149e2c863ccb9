#!/usr/bin/python3
"""Independent float32 reference ("oracle") for GLM-5.x (`glm_moe_dsa`) and the tiny test fixtures.

Written only from docs/model.md (the architecture spec), with numpy and nothing else, so that the C
engine can be checked against a second implementation that shares no code with it.

What it makes
-------------
A tiny random model directory in exact Hugging Face layout:

  config.json               model_type glm_moe_dsa, every §1.1 field the forward pass reads
  generation_config.json    the same eos_token_id list
  *.safetensors             exact HF tensor names (§2); F32 or BF16 (the router correction bias stays F32);
                            routed experts per expert (`mlp.experts.E.gate_proj.weight` ...) or fused
                            (`mlp.experts.gate_up_proj` [E,2I,D] gate rows first, `mlp.experts.down_proj`
                            [E,D,I]); the MTP layer is layer index num_hidden_layers
  reference.json            what the engine must reproduce:
      prompt_ids        the prompt
      full_ids          prompt + greedy continuation (n_generate tokens, none of them an EOS id)
      tf_pred[p]        argmax of the logits after position p of ONE causal forward over full_ids
      mtp_pred[i]       argmax of the MTP head at slot i (i = 0 .. N-2): token full_ids[i+1], the main
                        model's final-normed hidden state at i, RoPE position i, causal over MTP slots 0..i,
                        embedding zeroed at position 0 (vLLM rule, §6.1)
      tf_logits_last    the full logits vector at the last position of the TF pass (debugging)
      mtp_logits_last   the full MTP logits vector at slot N-2 (debugging)
      config_summary    a few words
      margins           the smallest decision margins found (see below)
      sparse_changes    how many tf/mtp predictions change if every indexer is forced dense

All arithmetic is float32 numpy (bf16 weights are rounded to nearest even on disk and upcast exactly),
so another float32 implementation with a different summation order must land on the same argmaxes.
To make that robust, a fixture is only accepted when every discrete decision has a safe margin:
  * every argmax (TF pass, every greedy step, every MTP slot): top1 - top2 >= ARGMAX_REL * std(logits)
  * every router choice: k-th vs (k+1)-th biased score >= ROUTER_MARGIN, and the same for the
    topk_group-th vs (topk_group+1)-th group score
  * every active indexer top-k: K-th vs (K+1)-th index score >= INDEX_MARGIN (so also no exact ties)
  * the continuation is diverse (not one token repeated) and contains no EOS id
Prompts are redrawn (and after many failures the weights too) until all of that holds.

Decisions taken where the spec leaves a choice (all follow its stated rules): ties go to the smaller
index everywhere; q_a/kv_a RMSNorm eps 1e-6 (HF); MTP embedding zeroed at position 0; indexer schedule
precedence indexer_types > index_topk_pattern > formula; the MTP layer always runs its own indexer.

Usage
-----
  /usr/bin/python3 tools/make_glm_oracle.py [--out DIR] [NAME ...]
      Build fixtures (default: all of dense sparse fused_bf16) into DIR/oracle_NAME (DIR defaults to
      tests/fixtures next to this script's repository). Prints the minimum margins and, for sparse
      fixtures, how many predictions the DSA selection changes.
  /usr/bin/python3 tools/make_glm_oracle.py --check DIR [DIR ...]
      Recompute the reference from an existing fixture directory (its config.json and safetensors
      files, nothing else) and compare with its reference.json. Exit status 0 when everything matches.
  /usr/bin/python3 tools/make_glm_oracle.py --list
      Show the fixture recipes.
  /usr/bin/python3 tools/make_glm_oracle.py --selftest
      Internal consistency checks: bf16 rounding, RoPE relative-position property, safetensors round
      trip, and a second token-by-token decoder (KV caches + absorbed MLA, §3.5) that must match the
      batched forward for every recipe, plus prefix causality.
"""

import argparse
import json
import os
import struct
import sys

# One BLAS thread: deterministic results and no fight over the two shared cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402
from tool_help import HelpFormatter  # noqa: E402  (next to this file)

F32 = np.float32

ARGMAX_REL = 1e-2      # top1 - top2 logit margin, relative to the std of that logits row
ROUTER_MARGIN = 1e-4   # router k-th vs (k+1)-th biased score, and group boundary
INDEX_MARGIN = 1e-4    # indexer K-th vs (K+1)-th score


class FixtureError(Exception):
    pass


# ----------------------------------------------------------------------------------------------
# safetensors I/O (written by hand: u64 LE header length, JSON header, raw little-endian data)

def f32_to_bf16_bits(a):
    """Round float32 to bfloat16, nearest-even; returns uint16 bit patterns."""
    u = np.ascontiguousarray(a, dtype=F32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_bits_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(F32)


def bf16_round(a):
    return bf16_bits_to_f32(f32_to_bf16_bits(a)).reshape(np.shape(a))


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype_str, float32 array). BF16 arrays are rounded here."""
    header = {}
    blobs = []
    offset = 0
    for name, dtype, arr in tensors:
        arr = np.ascontiguousarray(arr, dtype=F32)
        if dtype == "F32":
            raw = arr.astype("<f4").tobytes()
        elif dtype == "BF16":
            raw = f32_to_bf16_bits(arr).astype("<u2").tobytes()
        else:
            raise FixtureError("unsupported dtype %s for %s" % (dtype, name))
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((-len(hj)) % 8)          # 8-byte align the data region
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def read_safetensors(path):
    """Returns {name: float32 array} (BF16/F16 upcast exactly)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise FixtureError("%s: too short for a safetensors header" % path)
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise FixtureError("%s: header length %d exceeds file size" % (path, n))
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = data[base + b: base + e]
        shape = tuple(info["shape"])
        dt = info["dtype"]
        if dt == "F32":
            arr = np.frombuffer(raw, dtype="<f4").astype(F32)
        elif dt == "BF16":
            arr = bf16_bits_to_f32(np.frombuffer(raw, dtype="<u2"))
        elif dt == "F16":
            arr = np.frombuffer(raw, dtype="<f2").astype(F32)
        else:
            raise FixtureError("%s: tensor %s has unsupported dtype %s" % (path, name, dt))
        if arr.size != int(np.prod(shape)):
            raise FixtureError("%s: tensor %s byte length does not match shape" % (path, name))
        out[name] = arr.reshape(shape)
    return out


def load_model_dir(d):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    tensors = {}
    for fn in sorted(os.listdir(d)):
        if fn.endswith(".safetensors"):
            for k, v in read_safetensors(os.path.join(d, fn)).items():
                if k in tensors:
                    raise FixtureError("tensor %s appears twice (%s)" % (k, fn))
                tensors[k] = v
    return cfg, tensors


# ----------------------------------------------------------------------------------------------
# Config interpretation (§1)

class Dims:
    def __init__(self, cfg):
        g = cfg.get
        self.cfg = cfg
        self.vocab = cfg["vocab_size"]
        self.H = cfg["hidden_size"]
        self.n_layers = cfg["num_hidden_layers"]
        self.nh = cfg["num_attention_heads"]
        self.rq = cfg["q_lora_rank"]
        self.rkv = cfg["kv_lora_rank"]
        self.dn = cfg["qk_nope_head_dim"]
        self.dr = cfg["qk_rope_head_dim"]
        self.dqk = self.dn + self.dr          # recomputed, never read from config (HF does the same)
        self.dv = cfg["v_head_dim"]
        rp = g("rope_parameters") or {}
        self.theta = float(rp.get("rope_theta", g("rope_theta", 10000.0)))
        rtype = rp.get("rope_type", "default")
        if rtype != "default":
            raise FixtureError("config.json: rope_type %r not supported by the oracle" % rtype)
        self.eps = float(g("rms_norm_eps", 1e-5))
        self.inter = cfg["intermediate_size"]
        self.moe_inter = cfg["moe_intermediate_size"]
        self.first_dense = int(g("first_k_dense_replace", 3))
        mlt = g("mlp_layer_types")
        if mlt is not None:
            if len(mlt) != self.n_layers:
                raise FixtureError("config.json: mlp_layer_types has %d entries, need %d" % (len(mlt), self.n_layers))
            self.layer_is_moe = [t == "sparse" for t in mlt]
        else:
            self.layer_is_moe = [L >= self.first_dense for L in range(self.n_layers)]
        self.n_exp = int(g("n_routed_experts", g("num_local_experts", 0)))
        self.topk = int(g("num_experts_per_tok"))
        self.n_shared = int(g("n_shared_experts", 1))
        self.n_group = int(g("n_group", 1))
        self.topk_group = int(g("topk_group", 1))
        self.norm_topk = bool(g("norm_topk_prob", True))
        self.rsf = float(g("routed_scaling_factor", 2.5))
        self.nhI = int(g("index_n_heads", 32))
        self.dI = int(g("index_head_dim", 128))
        self.index_topk = int(g("index_topk", 2048))
        self.n_mtp = int(g("num_nextn_predict_layers", 0))
        self.indexer_full = self._schedule()
        if not self.indexer_full[0]:
            raise FixtureError("config.json: layer 0 must have a full indexer (nothing to share from)")

    def _schedule(self):
        """Which layers run their own indexer (§4.6): explicit list > F/S pattern > HF formula."""
        cfg, n = self.cfg, self.n_layers
        types = cfg.get("indexer_types")
        if types is not None:
            if len(types) != n:
                raise FixtureError("config.json: indexer_types has %d entries, need %d" % (len(types), n))
            return [t == "full" for t in types]
        pat = cfg.get("index_topk_pattern")
        if pat:
            if len(pat) != n:
                raise FixtureError("config.json: index_topk_pattern has %d letters, need %d" % (len(pat), n))
            return [c == "F" for c in pat]
        freq = int(cfg.get("index_topk_freq", 1) or 1)
        off = int(cfg.get("index_skip_topk_offset", 2))
        return [max(L - off + 1, 0) % freq == 0 for L in range(n)]


# ----------------------------------------------------------------------------------------------
# Numerical building blocks (all float32)

def rmsnorm(v, w, eps):
    n = v.shape[-1]
    ms = np.sum(v * v, axis=-1, keepdims=True, dtype=F32) / F32(n)
    r = F32(1.0) / np.sqrt(ms + F32(eps))
    return w * (v * r)                                   # normalize first, then weight (§3.2)


def layernorm(v, w, b, eps):
    n = v.shape[-1]
    mu = np.sum(v, axis=-1, keepdims=True, dtype=F32) / F32(n)
    d = v - mu
    var = np.sum(d * d, axis=-1, keepdims=True, dtype=F32) / F32(n)   # biased variance
    return d * (F32(1.0) / np.sqrt(var + F32(eps))) * w + b


def rope_tables(theta, d, positions):
    j = np.arange(d // 2)
    expo = (2 * j).astype(F32) / F32(d)
    inv_freq = F32(1.0) / np.power(F32(theta), expo).astype(F32)      # fp32 powf, fp32 reciprocal
    ang = positions.astype(F32)[:, None] * inv_freq[None, :]           # one fp32 multiply
    # cos/sin of the fp32 angle, computed in double and rounded once (allowed by §3.3)
    return np.cos(ang.astype(np.float64)).astype(F32), np.sin(ang.astype(np.float64)).astype(F32)


def rope_interleaved(v, cos, sin):
    """v [..., T, (heads,) d] with pairs (2j, 2j+1); cos/sin [T, d/2] broadcast over heads."""
    a = v[..., 0::2]
    b = v[..., 1::2]
    out = np.empty_like(v)
    out[..., 0::2] = a * cos - b * sin
    out[..., 1::2] = b * cos + a * sin
    return out


def linear(x, w):
    return np.matmul(x, w.T).astype(F32)


def silu(g):
    with np.errstate(over="ignore"):
        return g / (F32(1.0) + np.exp(-g))


def swiglu(m, gate, up, down):
    return linear(silu(linear(m, gate)) * linear(m, up), down)


def argmax_and_margin(row):
    """argmax (smallest id on ties) and (top1 - top2) / std(row)."""
    best = int(np.argmax(row))                 # numpy returns the first maximum: smallest id
    s = np.sort(row)
    std = float(np.std(row.astype(np.float64)))
    return best, float(s[-1] - s[-2]) / std if std > 0 else 0.0


class Margins:
    """Smallest decision margins seen (lower = closer to a flip)."""

    def __init__(self):
        self.argmax = np.inf
        self.router = np.inf
        self.group = np.inf
        self.index = np.inf
        self.n_index_active = 0

    def merge(self, other):
        self.argmax = min(self.argmax, other.argmax)
        self.router = min(self.router, other.router)
        self.group = min(self.group, other.group)
        self.index = min(self.index, other.index)
        self.n_index_active += other.n_index_active

    def ok(self):
        return (self.argmax >= ARGMAX_REL and self.router >= ROUTER_MARGIN
                and self.group >= ROUTER_MARGIN and self.index >= INDEX_MARGIN)

    def as_dict(self):
        f = lambda v: None if v == np.inf else float("%.6g" % v)   # noqa: E731
        return {"argmax_top1_minus_top2_over_std": f(self.argmax), "router_kth_gap": f(self.router),
                "router_group_gap": f(self.group), "indexer_kth_gap": f(self.index),
                "indexer_active_rows": self.n_index_active}


# ----------------------------------------------------------------------------------------------
# The model

class Model:
    def __init__(self, cfg, tensors):
        self.d = Dims(cfg)
        self.t = tensors
        d = self.d
        self.has_mtp = d.n_mtp >= 1
        # the MTP layer lives at index num_hidden_layers and is always MoE with a full indexer
        self.layers = list(range(d.n_layers + (1 if self.has_mtp else 0)))
        self.experts = {}
        for L in self.layers:
            if self.is_moe(L):
                self.experts[L] = self._load_experts(L)
        self._check_shapes()

    def w(self, name):
        if name not in self.t:
            raise FixtureError("missing tensor %s" % name)
        return self.t[name]

    def is_moe(self, L):
        return L >= self.d.n_layers or self.d.layer_is_moe[L]

    def indexer_full(self, L):
        return L >= self.d.n_layers or self.d.indexer_full[L]

    def _load_experts(self, L):
        d = self.d
        p = "model.layers.%d.mlp.experts." % L
        if p + "gate_up_proj" in self.t:
            gu = self.w(p + "gate_up_proj")                         # [E, 2I, D], gate rows first
            dn = self.w(p + "down_proj")                            # [E, D, I]
            I = d.moe_inter
            return [(gu[e, :I], gu[e, I:], dn[e]) for e in range(d.n_exp)]
        return [(self.w(p + "%d.gate_proj.weight" % e), self.w(p + "%d.up_proj.weight" % e),
                 self.w(p + "%d.down_proj.weight" % e)) for e in range(d.n_exp)]

    def _check_shapes(self):
        d = self.d
        exp = {"model.embed_tokens.weight": (d.vocab, d.H), "lm_head.weight": (d.vocab, d.H),
               "model.norm.weight": (d.H,)}
        for L in self.layers:
            p = "model.layers.%d." % L
            exp[p + "self_attn.q_a_proj.weight"] = (d.rq, d.H)
            exp[p + "self_attn.q_b_proj.weight"] = (d.nh * d.dqk, d.rq)
            exp[p + "self_attn.kv_a_proj_with_mqa.weight"] = (d.rkv + d.dr, d.H)
            exp[p + "self_attn.kv_b_proj.weight"] = (d.nh * (d.dn + d.dv), d.rkv)
            exp[p + "self_attn.o_proj.weight"] = (d.H, d.nh * d.dv)
            if self.indexer_full(L):
                exp[p + "self_attn.indexer.wq_b.weight"] = (d.nhI * d.dI, d.rq)
                exp[p + "self_attn.indexer.wk.weight"] = (d.dI, d.H)
                exp[p + "self_attn.indexer.weights_proj.weight"] = (d.nhI, d.H)
            if self.is_moe(L):
                exp[p + "mlp.gate.weight"] = (d.n_exp, d.H)
                exp[p + "mlp.shared_experts.gate_proj.weight"] = (d.moe_inter * d.n_shared, d.H)
                for e, (g, u, dn) in enumerate(self.experts[L]):
                    if g.shape != (d.moe_inter, d.H) or u.shape != g.shape or dn.shape != (d.H, d.moe_inter):
                        raise FixtureError("layer %d expert %d has wrong shapes" % (L, e))
            else:
                exp[p + "mlp.gate_proj.weight"] = (d.inter, d.H)
        for k, s in exp.items():
            if tuple(self.w(k).shape) != s:
                raise FixtureError("tensor %s has shape %s, expected %s" % (k, self.w(k).shape, s))

    # ---- attention (§3.4) with the DSA indexer (§4) -----------------------------------------

    def indexer_select(self, L, a, qr, cos, sin, margins, force_dense):
        """Returns sel [T, T] bool: key j selected for query i (subset of causal)."""
        d = self.d
        T = a.shape[0]
        p = "model.layers.%d.self_attn.indexer." % L
        qi = linear(qr, self.w(p + "wq_b.weight")).reshape(T, d.nhI, d.dI)
        qI = qi.copy()
        qI[:, :, :d.dr] = rope_interleaved(qi[:, :, :d.dr], cos[:, None, :], sin[:, None, :])
        kraw = linear(a, self.w(p + "wk.weight"))
        kn = layernorm(kraw, self.w(p + "k_norm.weight"), self.w(p + "k_norm.bias"), 1e-6)
        kI = kn.copy()
        kI[:, :d.dr] = rope_interleaved(kn[:, :d.dr], cos, sin)
        wI = linear(a, self.w(p + "weights_proj.weight")) * F32(d.nhI ** -0.5)
        dots = np.einsum("ihd,jd->ihj", qI, kI).astype(F32) * F32(d.dI ** -0.5)
        t = np.maximum(dots, F32(0.0))                          # ReLU per head, before weighting
        score = np.einsum("ih,ihj->ij", wI, t).astype(F32)      # I(i, j)
        causal = np.tril(np.ones((T, T), dtype=bool))
        sel = causal.copy()
        K = d.index_topk
        if force_dense:
            return sel
        for i in range(T):
            ncand = i + 1
            if ncand <= K:
                continue                                        # every causal key is kept
            cand = score[i, :ncand]
            order = np.lexsort((np.arange(ncand), -cand))       # value desc, then smaller j first
            keep = order[:K]
            sel[i, :] = False
            sel[i, keep] = True
            gap = float(cand[order[K - 1]] - cand[order[K]])
            margins.index = min(margins.index, gap)
            margins.n_index_active += 1
        return sel

    def attention(self, L, a, pos, sel_prev, margins, force_dense):
        d = self.d
        T = a.shape[0]
        p = "model.layers.%d.self_attn." % L
        cos, sin = rope_tables(d.theta, d.dr, pos)
        cq = linear(a, self.w(p + "q_a_proj.weight"))
        qr = rmsnorm(cq, self.w(p + "q_a_layernorm.weight"), 1e-6)
        Q = linear(qr, self.w(p + "q_b_proj.weight")).reshape(T, d.nh, d.dqk)
        q = Q.copy()
        q[:, :, d.dn:] = rope_interleaved(Q[:, :, d.dn:], cos[:, None, :], sin[:, None, :])
        kv = linear(a, self.w(p + "kv_a_proj_with_mqa.weight"))
        c = rmsnorm(kv[:, :d.rkv], self.w(p + "kv_a_layernorm.weight"), 1e-6)
        kr = rope_interleaved(kv[:, d.rkv:], cos, sin)
        KV = linear(c, self.w(p + "kv_b_proj.weight")).reshape(T, d.nh, d.dn + d.dv)
        k = np.empty((T, d.nh, d.dqk), dtype=F32)
        k[:, :, :d.dn] = KV[:, :, :d.dn]
        k[:, :, d.dn:] = kr[:, None, :]
        v = KV[:, :, d.dn:]
        if self.indexer_full(L):
            sel = self.indexer_select(L, a, qr, cos, sin, margins, force_dense)
        else:
            if sel_prev is None:
                raise FixtureError("layer %d shares an indexer but no full layer precedes it" % L)
            sel = sel_prev
        scale = F32(d.dqk ** -0.5)
        s = np.einsum("ihd,jhd->hij", q, k).astype(F32) * scale        # [nh, T, T]
        allowed = np.broadcast_to(sel[None, :, :], s.shape)
        smax = np.max(np.where(allowed, s, F32(-np.inf)), axis=-1, keepdims=True)
        e = np.where(allowed, np.exp(np.where(allowed, s - smax, F32(0.0))), F32(0.0))
        pr = e / np.sum(e, axis=-1, keepdims=True, dtype=F32)
        o = np.einsum("hij,jhd->ihd", pr, v).astype(F32).reshape(T, d.nh * d.dv)
        return linear(o, self.w(p + "o_proj.weight")), sel

    # ---- MoE (§5) -----------------------------------------------------------------------------

    def route(self, L, m_row, margins):
        d = self.d
        p = "model.layers.%d.mlp.gate." % L
        logit = linear(m_row[None, :], self.w(p + "weight"))[0]
        sc = F32(1.0) / (F32(1.0) + np.exp(-logit))
        ch = sc + self.w(p + "e_score_correction_bias")
        if d.n_group > 1:
            G = d.n_exp // d.n_group
            gs = np.array([np.sum(np.sort(ch[g * G:(g + 1) * G])[-2:], dtype=F32)
                           for g in range(d.n_group)], dtype=F32)
            gorder = np.lexsort((np.arange(d.n_group), -gs))
            if d.topk_group < d.n_group:
                margins.group = min(margins.group, float(gs[gorder[d.topk_group - 1]] - gs[gorder[d.topk_group]]))
            keep_g = set(int(g) for g in gorder[:d.topk_group])
            mask = np.array([(e // G) in keep_g for e in range(d.n_exp)])
            ch = np.where(mask, ch, F32(-np.inf))
        order = np.lexsort((np.arange(d.n_exp), -ch))
        chosen = order[:d.topk]
        if d.topk < d.n_exp and np.isfinite(ch[order[d.topk]]):
            margins.router = min(margins.router, float(ch[order[d.topk - 1]] - ch[order[d.topk]]))
        chosen = np.sort(chosen)
        wts = sc[chosen]
        if d.norm_topk:
            wts = wts / (np.sum(wts, dtype=F32) + F32(1e-20))
        wts = wts * F32(d.rsf)
        return chosen, wts.astype(F32)

    def moe(self, L, m, margins):
        p = "model.layers.%d.mlp." % L
        shared = swiglu(m, self.w(p + "shared_experts.gate_proj.weight"), self.w(p + "shared_experts.up_proj.weight"),
                        self.w(p + "shared_experts.down_proj.weight"))
        out = np.zeros_like(m)
        for i in range(m.shape[0]):
            chosen, wts = self.route(L, m[i], margins)
            acc = np.zeros(m.shape[1], dtype=F32)
            for e, w in zip(chosen, wts):                     # ascending expert id, weight after down_proj
                g, u, dn = self.experts[L][e]
                acc = acc + w * swiglu(m[i:i + 1], g, u, dn)[0]
            out[i] = acc + shared[i]
        return out

    def mlp(self, L, m, margins):
        if self.is_moe(L):
            return self.moe(L, m, margins)
        p = "model.layers.%d.mlp." % L
        return swiglu(m, self.w(p + "gate_proj.weight"), self.w(p + "up_proj.weight"), self.w(p + "down_proj.weight"))

    def decoder_layer(self, L, x, pos, sel_prev, margins, force_dense):
        d = self.d
        p = "model.layers.%d." % L
        a = rmsnorm(x, self.w(p + "input_layernorm.weight"), d.eps)
        attn, sel = self.attention(L, a, pos, sel_prev, margins, force_dense)
        x = x + attn
        m = rmsnorm(x, self.w(p + "post_attention_layernorm.weight"), d.eps)
        x = x + self.mlp(L, m, margins)
        return x, sel

    # ---- top level (§3.1) and MTP (§6.1) ---------------------------------------------------------

    def forward(self, ids, margins, force_dense=False):
        """One causal forward over ids at positions 0..T-1. Returns (logits [T,V], h_final [T,H])."""
        d = self.d
        ids = np.asarray(ids)
        pos = np.arange(len(ids))
        x = self.w("model.embed_tokens.weight")[ids].astype(F32)
        sel = None
        for L in range(d.n_layers):
            x, sel = self.decoder_layer(L, x, pos, sel, margins, force_dense)
        h = rmsnorm(x, self.w("model.norm.weight"), d.eps)
        return linear(h, self.w("lm_head.weight")), h

    def mtp(self, next_ids, h_main, margins, force_dense=False):
        """MTP slots q = 0..S-1: token next_ids[q] (= the token at q+1), main hidden h_main[q], position q."""
        d = self.d
        L = d.n_layers
        p = "model.layers.%d." % L
        S = len(next_ids)
        pos = np.arange(S)
        e = self.w("model.embed_tokens.weight")[np.asarray(next_ids)].astype(F32)
        e[pos == 0] = F32(0.0)                                  # vLLM: embedding zeroed at position 0
        en = rmsnorm(e, self.w(p + "enorm.weight"), d.eps)
        hn = rmsnorm(h_main, self.w(p + "hnorm.weight"), d.eps)
        x0 = linear(np.concatenate([en, hn], axis=1), self.w(p + "eh_proj.weight"))   # order [e ; h]
        u, _ = self.decoder_layer(L, x0, pos, None, margins, force_dense)
        g = rmsnorm(u, self.w(p + "shared_head.norm.weight"), d.eps)
        return linear(g, self.w("lm_head.weight"))


# ----------------------------------------------------------------------------------------------
# A second, token-by-token path (used only by --selftest): KV caches of (c, kr, kI) per layer and the
# absorbed MLA form of §3.5. It shares the small building blocks but none of the sequence-level
# attention/indexer code, so slicing, caching and causality mistakes show up as a mismatch.

def forward_incremental(model, ids):
    d = model.d
    caches = {L: {"c": [], "kr": [], "kI": []} for L in range(d.n_layers)}
    all_logits = []
    junk = Margins()
    for i, tok in enumerate(ids):
        pos = np.array([i])
        cos, sin = rope_tables(d.theta, d.dr, pos)
        x = model.w("model.embed_tokens.weight")[tok][None, :].astype(F32)
        sel = None
        for L in range(d.n_layers):
            p = "model.layers.%d." % L
            a = rmsnorm(x, model.w(p + "input_layernorm.weight"), d.eps)
            ap = p + "self_attn."
            qr = rmsnorm(linear(a, model.w(ap + "q_a_proj.weight")), model.w(ap + "q_a_layernorm.weight"), 1e-6)
            Q = linear(qr, model.w(ap + "q_b_proj.weight"))[0].reshape(d.nh, d.dqk)
            kv = linear(a, model.w(ap + "kv_a_proj_with_mqa.weight"))[0]
            cache = caches[L]
            cache["c"].append(rmsnorm(kv[:d.rkv], model.w(ap + "kv_a_layernorm.weight"), 1e-6))
            cache["kr"].append(rope_interleaved(kv[None, d.rkv:], cos, sin)[0])
            C = np.array(cache["c"])
            KR = np.array(cache["kr"])
            if model.indexer_full(L):
                ip = ap + "indexer."
                kraw = linear(a, model.w(ip + "wk.weight"))[0]
                kn = layernorm(kraw, model.w(ip + "k_norm.weight"), model.w(ip + "k_norm.bias"), 1e-6)
                cache["kI"].append(np.concatenate([rope_interleaved(kn[None, :d.dr], cos, sin)[0], kn[d.dr:]]))
                qi = linear(qr, model.w(ip + "wq_b.weight"))[0].reshape(d.nhI, d.dI)
                score = np.zeros(i + 1, dtype=F32)
                wI = linear(a, model.w(ip + "weights_proj.weight"))[0] * F32(d.nhI ** -0.5)
                for h in range(d.nhI):
                    qh = np.concatenate([rope_interleaved(qi[None, h, :d.dr], cos, sin)[0], qi[h, d.dr:]])
                    t = np.maximum(np.array(cache["kI"]) @ qh * F32(d.dI ** -0.5), F32(0.0))
                    score = score + wI[h] * t
                if i + 1 <= d.index_topk:
                    sel = list(range(i + 1))
                else:
                    sel = sorted(sorted(range(i + 1), key=lambda j: (-score[j], j))[:d.index_topk])
            kvb = model.w(ap + "kv_b_proj.weight").reshape(d.nh, d.dn + d.dv, d.rkv)
            o = np.zeros((d.nh, d.dv), dtype=F32)
            for h in range(d.nh):
                W_UK, W_UV = kvb[h, :d.dn], kvb[h, d.dn:]
                qc = W_UK.T @ Q[h, :d.dn]                                    # absorbed query
                qrope = rope_interleaved(Q[None, h, d.dn:], cos, sin)[0]
                s = (C[sel] @ qc + KR[sel] @ qrope) * F32(d.dqk ** -0.5)
                e = np.exp(s - np.max(s))
                z = (e / np.sum(e)) @ C[sel]                                  # pooled in latent space
                o[h] = W_UV @ z
            x = x + linear(o.reshape(1, -1), model.w(ap + "o_proj.weight"))
            m = rmsnorm(x, model.w(p + "post_attention_layernorm.weight"), d.eps)
            x = x + model.mlp(L, m, junk)
        h = rmsnorm(x, model.w("model.norm.weight"), d.eps)
        all_logits.append(linear(h, model.w("lm_head.weight"))[0])
    return np.array(all_logits)


def selftest():
    ok = True

    def check(name, cond, why=""):
        nonlocal ok
        print(("PASS %s" % name) if cond else ("FAIL %s: %s" % (name, why)))
        ok = ok and bool(cond)

    x = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -1 - 2 ** -8, 3.0e38, 1e-40], dtype=F32)
    got = list(f32_to_bf16_bits(x))
    check("bf16_round_nearest_even", got == [0x3F80, 0x3F80, 0x3F82, 0xBF80, 0x7F62, 0x0001],
          " ".join("%04x" % v for v in got))
    cos, sin = rope_tables(10000.0, 8, np.arange(40))
    rng = np.random.default_rng(5)
    q, k = rng.standard_normal(8).astype(F32), rng.standard_normal(8).astype(F32)
    rot = lambda v, p: rope_interleaved(v[None, :], cos[p:p + 1], sin[p:p + 1])[0]   # noqa: E731
    d1 = float(rot(q, 7) @ rot(k, 3))
    d2 = float(rot(q, 30) @ rot(k, 26))
    check("rope_depends_on_relative_position", abs(d1 - d2) < 1e-4, "%g vs %g" % (d1, d2))
    check("rope_pairs_adjacent", abs(float(rot(np.array([1, 0, 0, 0, 0, 0, 0, 0], F32), 1)[1]) - np.sin(1.0)) < 1e-6)
    path = "/tmp/oracle_selftest_%d.safetensors" % os.getpid()
    a = rng.standard_normal((3, 5)).astype(F32)
    write_safetensors(path, [("a", "F32", a), ("b", "BF16", a)])
    back = read_safetensors(path)
    os.remove(path)
    check("safetensors_roundtrip", np.array_equal(back["a"], a) and np.array_equal(back["b"], bf16_round(a)))
    for name in RECIPES:
        r = RECIPES[name]
        cfg = make_config(r)
        weights = make_weights(r, cfg, np.random.default_rng(r["seed"]))
        model = Model(cfg, {n: (bf16_round(w) if dt == "BF16" else w) for n, dt, w, _ in weights})
        ids = [int(t) for t in np.random.default_rng(9).integers(0, 470, size=20)]
        full, _ = model.forward(ids, Margins())
        inc = forward_incremental(model, ids)
        diff = float(np.max(np.abs(full - inc)))
        check("incremental_absorbed_matches_batch_%s" % name, diff < 1e-3, "max abs diff %g" % diff)
        part, _ = model.forward(ids[:13], Margins())
        diff = float(np.max(np.abs(part - full[:13])))
        check("causal_prefix_%s" % name, diff < 1e-4, "max abs diff %g" % diff)
    return 0 if ok else 1


# ----------------------------------------------------------------------------------------------
# Reference computation

def compute_reference(model, prompt, n_generate, eos):
    """Greedy continuation by full recompute, then the TF pass, the MTP pass and the dense-forced
    comparison. Returns (reference dict, Margins, problems list)."""
    mg = Margins()
    problems = []
    ids = list(prompt)
    for _ in range(n_generate):
        step = Margins()
        logits, _ = model.forward(ids, step)
        tok, marg = argmax_and_margin(logits[-1])
        step.argmax = min(step.argmax, marg)
        mg.merge(step)
        if not step.ok():
            problems.append("margin during generation at length %d: %s" % (len(ids), step.as_dict()))
            return None, mg, problems
        ids.append(tok)
    gen = ids[len(prompt):]
    if any(t in eos for t in gen):
        problems.append("continuation contains an EOS id")
    if len(set(gen)) < max(3, (len(gen) + 1) // 2):
        problems.append("continuation not diverse (%d distinct of %d)" % (len(set(gen)), len(gen)))

    tf = Margins()
    logits, h = model.forward(ids, tf)
    tf_pred = []
    for p in range(len(ids)):
        t, marg = argmax_and_margin(logits[p])
        tf.argmax = min(tf.argmax, marg)
        tf_pred.append(t)
    mg.merge(tf)
    for p in range(len(prompt) - 1, len(ids) - 1):
        if tf_pred[p] != ids[p + 1]:
            problems.append("TF pass disagrees with greedy generation at position %d" % p)

    mtp_pred, mtp_logits = [], None
    if model.has_mtp:
        mm = Margins()
        mtp_logits = model.mtp(ids[1:], h[:-1], mm)
        for q in range(len(ids) - 1):
            t, marg = argmax_and_margin(mtp_logits[q])
            mm.argmax = min(mm.argmax, marg)
            mtp_pred.append(t)
        mg.merge(mm)

    # How much does the sparse selection matter? Force every indexer dense and compare.
    dense_m = Margins()
    dlogits, dh = model.forward(ids, dense_m, force_dense=True)
    tf_changes = sum(int(np.argmax(dlogits[p])) != tf_pred[p] for p in range(len(ids)))
    mtp_changes = 0
    if model.has_mtp:
        dmtp = model.mtp(ids[1:], dh[:-1], dense_m, force_dense=True)
        mtp_changes = sum(int(np.argmax(dmtp[q])) != mtp_pred[q] for q in range(len(ids) - 1))

    if not mg.ok():
        problems.append("margins too small: %s" % mg.as_dict())
    ref = {
        "prompt_ids": [int(t) for t in prompt],
        "n_generate": n_generate,
        "full_ids": [int(t) for t in ids],
        "tf_pred": [int(t) for t in tf_pred],
        "mtp_pred": [int(t) for t in mtp_pred],
        "tf_logits_last": [float(repr_f32(v)) for v in logits[-1]],
        "mtp_logits_last": [float(repr_f32(v)) for v in mtp_logits[-1]] if mtp_logits is not None else [],
        "logits_std_last": float("%.6g" % np.std(logits[-1].astype(np.float64))),
        "margins": mg.as_dict(),
        "sparse_changes": {"tf_pred": tf_changes, "mtp_pred": mtp_changes},
    }
    return ref, mg, problems


def repr_f32(v):
    return "%.9g" % float(v)


# ----------------------------------------------------------------------------------------------
# Fixture recipes

RECIPES = {
    # GLM-5/5.1 style: every layer has its own indexer (no schedule keys), index_topk >= sequence,
    # so DSA is exactly dense causal attention; no group-limited routing.
    "dense": dict(
        seed=1001, vocab=512, hidden=64, layers=3, heads=4, q_lora=48, kv_lora=32, nope=16, rope=8, v=24,
        idx_heads=4, idx_dim=16, index_topk=64, inter=96, moe_inter=32, experts=8, topk=2, shared=1,
        n_group=1, topk_group=1, first_dense=1, theta=8000000.0, prompt_len=8, n_generate=16,
        dtype="F32", fused=False, schedule=None, split=False,
        summary="dense DSA (index_topk 64 >= 24 tokens), all layers full indexer, F32, per-expert, "
                "n_group 1, theta 8e6, MTP"),
    # GLM-5.2 style: IndexShare via an explicit indexer_types list, tiny index_topk over a 36-token
    # sequence, group-limited routing, split over two safetensors files. The freq/offset keys are
    # present but describe a DIFFERENT schedule, so an engine that ignores the explicit list fails.
    "sparse": dict(
        seed=2002, vocab=512, hidden=64, layers=4, heads=4, q_lora=48, kv_lora=32, nope=16, rope=8, v=24,
        idx_heads=4, idx_dim=16, index_topk=4, inter=96, moe_inter=32, experts=16, topk=4, shared=1,
        n_group=4, topk_group=2, first_dense=1, theta=10000.0, prompt_len=12, n_generate=24,
        dtype="F32", fused=False, split=True, mlp_layer_types=True,
        schedule={"indexer_types": ["full", "shared", "full", "shared"],
                  "index_topk_freq": 4, "index_skip_topk_offset": 3},
        summary="sparse DSA (index_topk 4, 36 tokens), indexer_types F S F S (freq/offset keys disagree), "
                "n_group 4 / topk_group 2, F32, per-expert, theta 1e4, 2 files, MTP"),
    # BF16 weights (correction bias F32) and the fused 3-D expert layout; odd widths (hidden 80,
    # q_lora 40, v 20, inter 72, moe_inter 40) exercise kernel tails; schedule from index_topk_pattern.
    "fused_bf16": dict(
        seed=3003, vocab=512, hidden=80, layers=3, heads=4, q_lora=40, kv_lora=48, nope=16, rope=8, v=20,
        idx_heads=4, idx_dim=24, index_topk=8, inter=72, moe_inter=40, experts=8, topk=3, shared=1,
        n_group=2, topk_group=1, first_dense=1, theta=1000000.0, prompt_len=10, n_generate=14,
        dtype="BF16", fused=True, split=False,
        schedule={"index_topk_pattern": "FSF"},
        summary="BF16 weights (bias F32), fused gate_up_proj/down_proj experts, index_topk 8 over 24 "
                "tokens, index_topk_pattern FSF, n_group 2 / topk_group 1, hidden 80, theta 1e6, MTP"),
}

EOS = [476, 483, 485]


def make_config(r):
    c = {
        "architectures": ["GlmMoeDsaForCausalLM"],
        "model_type": "glm_moe_dsa",
        "vocab_size": r["vocab"],
        "hidden_size": r["hidden"],
        "num_hidden_layers": r["layers"],
        "num_attention_heads": r["heads"],
        "num_key_value_heads": r["heads"],
        "q_lora_rank": r["q_lora"],
        "kv_lora_rank": r["kv_lora"],
        "qk_nope_head_dim": r["nope"],
        "qk_rope_head_dim": r["rope"],
        "qk_head_dim": r["nope"] + r["rope"],
        "v_head_dim": r["v"],
        "head_dim": r["nope"],            # like the real config (192 = qk_nope): must be ignored
        "rope_parameters": {"rope_theta": r["theta"], "rope_type": "default"},
        "rope_interleave": True,
        "indexer_rope_interleave": True,
        "max_position_embeddings": 4096,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "rms_norm_eps": 1e-5,
        "hidden_act": "silu",
        "intermediate_size": r["inter"],
        "moe_intermediate_size": r["moe_inter"],
        "first_k_dense_replace": r["first_dense"],
        "moe_layer_freq": 1,
        "n_routed_experts": r["experts"],
        "num_experts_per_tok": r["topk"],
        "n_shared_experts": r["shared"],
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",
        "n_group": r["n_group"],
        "topk_group": r["topk_group"],
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "index_n_heads": r["idx_heads"],
        "index_head_dim": r["idx_dim"],
        "index_topk": r["index_topk"],
        "num_nextn_predict_layers": 1,
        "tie_word_embeddings": False,
        "eos_token_id": list(EOS),
        "pad_token_id": EOS[0],
        "bos_token_id": None,
        "dtype": "bfloat16" if r["dtype"] == "BF16" else "float32",
        "initializer_range": 0.02,
        "use_cache": True,
    }
    if r.get("schedule"):
        c.update(r["schedule"])
    if r.get("mlp_layer_types"):
        # explicit MLP schedule, consistent with first_k_dense_replace
        c["mlp_layer_types"] = ["dense" if L < r["first_dense"] else "sparse" for L in range(r["layers"])]
    return c


def make_weights(r, cfg, rng):
    """Random weights with scales chosen so activations and logits stay O(1).
    Returns list of (name, dtype, array, is_mtp)."""
    d = Dims(cfg)
    out = []
    dt = r["dtype"]

    def mat(name, rows, cols, gain=1.0, mtp=False):
        out.append((name, dt, (rng.standard_normal((rows, cols)) * (gain / np.sqrt(cols))).astype(F32), mtp))

    def norm(name, n, mtp=False, spread=0.15):
        out.append((name, dt, (1.0 + spread * rng.standard_normal(n)).astype(F32), mtp))

    out.append(("model.embed_tokens.weight", dt, rng.standard_normal((d.vocab, d.H)).astype(F32), False))
    for L in range(d.n_layers + 1):
        mtp = L == d.n_layers
        p = "model.layers.%d." % L
        if mtp:
            norm(p + "enorm.weight", d.H, True)
            norm(p + "hnorm.weight", d.H, True)
            mat(p + "eh_proj.weight", d.H, 2 * d.H, 1.0, True)
        norm(p + "input_layernorm.weight", d.H, mtp)
        norm(p + "post_attention_layernorm.weight", d.H, mtp)
        a = p + "self_attn."
        mat(a + "q_a_proj.weight", d.rq, d.H, 1.0, mtp)
        norm(a + "q_a_layernorm.weight", d.rq, mtp)
        mat(a + "q_b_proj.weight", d.nh * d.dqk, d.rq, 1.0, mtp)
        mat(a + "kv_a_proj_with_mqa.weight", d.rkv + d.dr, d.H, 1.0, mtp)
        norm(a + "kv_a_layernorm.weight", d.rkv, mtp)
        mat(a + "kv_b_proj.weight", d.nh * (d.dn + d.dv), d.rkv, 1.0, mtp)
        mat(a + "o_proj.weight", d.H, d.nh * d.dv, 0.6, mtp)
        if mtp or d.indexer_full[L]:
            mat(a + "indexer.wq_b.weight", d.nhI * d.dI, d.rq, 1.0, mtp)
            mat(a + "indexer.wk.weight", d.dI, d.H, 1.0, mtp)
            norm(a + "indexer.k_norm.weight", d.dI, mtp, spread=0.3)
            out.append((a + "indexer.k_norm.bias", dt, (0.2 * rng.standard_normal(d.dI)).astype(F32), mtp))
            mat(a + "indexer.weights_proj.weight", d.nhI, d.H, 1.0, mtp)
        m = p + "mlp."
        if mtp or d.layer_is_moe[L]:
            mat(m + "gate.weight", d.n_exp, d.H, 1.5, mtp)
            # F32 in every release (§2.2); small so it shifts but does not dictate the choice
            out.append((m + "gate.e_score_correction_bias", "F32",
                        (0.05 * rng.standard_normal(d.n_exp)).astype(F32), mtp))
            S = d.moe_inter * d.n_shared
            mat(m + "shared_experts.gate_proj.weight", S, d.H, 1.0, mtp)
            mat(m + "shared_experts.up_proj.weight", S, d.H, 1.0, mtp)
            mat(m + "shared_experts.down_proj.weight", d.H, S, 0.5, mtp)
            I = d.moe_inter
            gates = [(rng.standard_normal((I, d.H)) / np.sqrt(d.H)).astype(F32) for _ in range(d.n_exp)]
            ups = [(rng.standard_normal((I, d.H)) / np.sqrt(d.H)).astype(F32) for _ in range(d.n_exp)]
            downs = [(rng.standard_normal((d.H, I)) * (0.5 / np.sqrt(I))).astype(F32) for _ in range(d.n_exp)]
            if r["fused"]:
                gu = np.stack([np.concatenate([gates[e], ups[e]], axis=0) for e in range(d.n_exp)])
                out.append((m + "experts.gate_up_proj", dt, gu, mtp))
                out.append((m + "experts.down_proj", dt, np.stack(downs), mtp))
            else:
                for e in range(d.n_exp):
                    out.append((m + "experts.%d.gate_proj.weight" % e, dt, gates[e], mtp))
                    out.append((m + "experts.%d.up_proj.weight" % e, dt, ups[e], mtp))
                    out.append((m + "experts.%d.down_proj.weight" % e, dt, downs[e], mtp))
        else:
            mat(m + "gate_proj.weight", d.inter, d.H, 1.0, mtp)
            mat(m + "up_proj.weight", d.inter, d.H, 1.0, mtp)
            mat(m + "down_proj.weight", d.H, d.inter, 0.5, mtp)
    norm("model.layers.%d.shared_head.norm.weight" % d.n_layers, d.H, True)
    out.append(("model.norm.weight", dt, (1.0 + 0.15 * rng.standard_normal(d.H)).astype(F32), False))
    out.append(("lm_head.weight", dt, (rng.standard_normal((d.vocab, d.H)) * (0.3 / np.sqrt(d.H) * 8)).astype(F32), False))
    return out


def build_fixture(name, out_root, max_prompts=60, max_weight_seeds=20):
    r = RECIPES[name]
    cfg = make_config(r)
    d = Dims(cfg)
    outdir = os.path.join(out_root, "oracle_" + name)
    os.makedirs(outdir, exist_ok=True)
    for fn in os.listdir(outdir):
        if fn.endswith(".safetensors"):
            os.remove(os.path.join(outdir, fn))
    eos = set(EOS)
    prompt_pool = [t for t in range(d.vocab) if t not in eos]
    for wseed in range(max_weight_seeds):
        seed = r["seed"] + 7919 * wseed
        rng = np.random.default_rng(seed)
        weights = make_weights(r, cfg, rng)
        # Compute from exactly what goes on disk: BF16 tensors rounded to nearest even.
        tensors = {n: (bf16_round(a) if dt == "BF16" else a) for n, dt, a, _ in weights}
        model = Model(cfg, tensors)
        prng = np.random.default_rng(seed + 1)
        best = None
        for attempt in range(max_prompts):
            prompt = [int(t) for t in prng.choice(prompt_pool, size=r["prompt_len"], replace=True)]
            ref, mg, problems = compute_reference(model, prompt, r["n_generate"], eos)
            tag = "weights seed %d prompt %d" % (seed, attempt)
            if problems:
                print("  %s: rejected (%s)" % (tag, problems[0]), flush=True)
                continue
            if r["index_topk"] < len(ref["full_ids"]) and ref["sparse_changes"]["tf_pred"] + \
                    ref["sparse_changes"]["mtp_pred"] == 0:
                print("  %s: rejected (sparse selection changes no prediction)" % tag, flush=True)
                continue
            best = ref
            print("  %s: accepted" % tag, flush=True)
            break
        if best is not None:
            break
    else:
        raise FixtureError("%s: no seed/prompt met the margin requirements" % name)

    best["config_summary"] = r["summary"]
    best["weights_seed"] = seed
    best["thresholds"] = {"argmax_rel": ARGMAX_REL, "router": ROUTER_MARGIN, "indexer": INDEX_MARGIN}
    # write files
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    with open(os.path.join(outdir, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": list(EOS), "pad_token_id": EOS[0], "do_sample": False}, f, indent=2)
        f.write("\n")
    if r["split"]:
        write_safetensors(os.path.join(outdir, "model-00001-of-00001.safetensors"),
                          [(n, dt, a) for n, dt, a, m in weights if not m])
        write_safetensors(os.path.join(outdir, "out-mtp-00000.safetensors"),
                          [(n, dt, a) for n, dt, a, m in weights if m])
    else:
        write_safetensors(os.path.join(outdir, "model.safetensors"), [(n, dt, a) for n, dt, a, _ in weights])
    write_reference(os.path.join(outdir, "reference.json"), best)
    report(name, best)
    return best


def write_reference(path, ref):
    order = ["config_summary", "prompt_ids", "n_generate", "full_ids", "tf_pred", "mtp_pred", "margins",
             "sparse_changes", "thresholds", "weights_seed", "logits_std_last", "tf_logits_last",
             "mtp_logits_last"]
    lines = []
    for k in order + [k for k in ref if k not in order]:
        lines.append("  %s: %s" % (json.dumps(k), json.dumps(ref[k], separators=(", ", ": "))))
    with open(path + ".tmp", "w") as f:
        f.write("{\n" + ",\n".join(lines) + "\n}\n")
    os.replace(path + ".tmp", path)


def report(name, ref):
    print("%s: %d prompt + %d generated tokens; continuation %s" % (
        name, len(ref["prompt_ids"]), ref["n_generate"], ref["full_ids"][len(ref["prompt_ids"]):]))
    print("  margins: %s" % ref["margins"])
    print("  predictions changed if the indexer is forced dense: tf %d / %d, mtp %d / %d" % (
        ref["sparse_changes"]["tf_pred"], len(ref["tf_pred"]),
        ref["sparse_changes"]["mtp_pred"], len(ref["mtp_pred"])))
    print("  logits std at last position: %s" % ref["logits_std_last"])


def check_fixture(d):
    cfg, tensors = load_model_dir(d)
    with open(os.path.join(d, "reference.json")) as f:
        want = json.load(f)
    with open(os.path.join(d, "generation_config.json")) as f:
        gen_eos = json.load(f).get("eos_token_id")
    model = Model(cfg, tensors)
    eos = set(cfg.get("eos_token_id") or [])
    got, mg, problems = compute_reference(model, want["prompt_ids"], want["n_generate"], eos)
    bad = []
    if got is None:
        bad.append("recompute failed: %s" % problems)
    else:
        for k in ("full_ids", "tf_pred", "mtp_pred", "sparse_changes"):
            if got[k] != want[k]:
                bad.append("%s differs" % k)
        for k in ("tf_logits_last", "mtp_logits_last"):
            a, b = np.array(got[k]), np.array(want[k])
            if a.shape != b.shape or (a.size and np.max(np.abs(a - b)) > 1e-4 * max(1.0, np.max(np.abs(b)))):
                bad.append("%s differs (max abs diff %s)" % (k, np.max(np.abs(a - b)) if a.shape == b.shape else "shape"))
        if problems:
            bad.append("; ".join(problems))
    if gen_eos is not None and sorted(gen_eos) != sorted(eos):
        bad.append("generation_config.json eos_token_id differs from config.json")
    if bad:
        print("FAIL %s: %s" % (d, "; ".join(bad)))
        return False
    print("PASS %s (margins %s)" % (d, mg.as_dict()))
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=HelpFormatter)
    ap.add_argument("names", nargs="*", help="fixtures to build (default: all): " + " ".join(RECIPES))
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures"),
                    help="directory that receives oracle_NAME/ (default: tests/fixtures)")
    ap.add_argument("--check", nargs="+", metavar="DIR", help="recompute and compare existing fixture dirs "
                    "instead of building (default: build)")
    ap.add_argument("--list", action="store_true", help="print the fixture recipes")
    ap.add_argument("--selftest", action="store_true", help="internal consistency checks of the oracle")
    args = ap.parse_args()
    try:
        if args.list:
            for n, r in RECIPES.items():
                print("%s: %s" % (n, r["summary"]))
            return 0
        if args.selftest:
            return selftest()
        if args.check:
            ok = all([check_fixture(d) for d in args.check])
            return 0 if ok else 1
        names = args.names or list(RECIPES)
        for n in names:
            if n not in RECIPES:
                print("error: unknown fixture %r (known: %s)" % (n, " ".join(RECIPES)), file=sys.stderr)
                return 2
        for n in names:
            print("building oracle_%s" % n, flush=True)
            build_fixture(n, os.path.normpath(args.out))
        return 0
    except FixtureError as e:
        print("error: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

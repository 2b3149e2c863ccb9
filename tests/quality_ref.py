#!/usr/bin/python3
"""A second implementation of quality.c's arithmetic (PPL windows, KL divergence, SCORE), in numpy
with float64, for tests/t_quality.sh. It shares no code with glm: it parses the logits file from
its documented layout (docs/quality.md), plans the windows from their documented rule, and gets
logits either from that file (the same floats glm used: results must agree to ~1e-9) or from the
independent float32 oracle of tools/make_glm_oracle.py (a different summation order: agree to
~1e-4). Each check prints PASS name / FAIL name: why.

  quality_ref.py ppl MODEL_DIR LOGITS_FILE PPL_JSON      full-row logits file of a PPL run
  quality_ref.py kld REF_FILE RUN_FILE PPL_JSON          KLD of RUN (full rows) against REF
  quality_ref.py score MODEL_DIR SCORE_JSONL SCORE_JSON  each choice's log-likelihood by the oracle
"""

import json
import os
import struct
import sys

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FAILED = []


def check(name, ok, why=""):
    print(("PASS %s" % name) if ok else ("FAIL %s: %s" % (name, why)))
    if not ok:
        FAILED.append(name)


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-300)


# ---- the logits file ------------------------------------------------------------------------

def read_logits_file(path):
    b = open(path, "rb").read()
    assert b[:8] == b"GLMLOGIT", "magic"
    version, hbytes, vocab, top_k, n_tokens, n_pos = struct.unpack_from("<IIIIQQ", b, 8)
    assert version == 1 and hbytes == 608
    ctx, stride, bos = struct.unpack_from("<IIi", b, 64)
    off = hbytes
    tokens = np.frombuffer(b, dtype="<i4", count=n_tokens, offset=off).astype(np.int64)
    off += 4 * n_tokens
    recs = []
    for _ in range(n_pos):
        target, tlogit, logz, rest = struct.unpack_from("<Ifdd", b, off)
        off += 24
        if top_k:
            pairs = np.frombuffer(b, dtype=np.dtype([("id", "<u4"), ("l", "<f4")]), count=top_k, offset=off)
            off += 8 * top_k
            recs.append((target, tlogit, logz, rest, pairs["id"].astype(np.int64), pairs["l"].astype(np.float32)))
        else:
            row = np.frombuffer(b, dtype="<f4", count=vocab, offset=off)
            off += 4 * vocab
            recs.append((target, tlogit, logz, rest, None, row))
    assert off + 8 == len(b), "size"
    return dict(vocab=vocab, top_k=top_k, tokens=tokens, ctx=ctx, stride=stride, bos=bos, recs=recs)


def plan(n, ctx, stride, bos):
    """The windows rule of docs/quality.md: (start, length, first scored text index)."""
    W = ctx - (1 if bos >= 0 else 0)
    half_up = W - W // 2
    stride = stride or half_up
    if n <= W:
        return [(0, n, 0 if bos >= 0 else 1)]
    keep = min(stride, half_up)
    wins = []
    start = 0
    while start + W <= n:
        wins.append((start, W, start + W - keep))
        start += stride
    end = wins[-1][0] + W
    if end < n:
        wins.append((n - W, W, max(end, n - keep)))
    return wins


def logsoftmax64(row):
    r = np.asarray(row, dtype=np.float64)
    m = r.max()
    return r - (m + np.log(np.sum(np.exp(r - m))))


def oracle(model_dir):
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import make_glm_oracle as O
    cfg, tensors = O.load_model_dir(model_dir)
    m = O.Model(cfg, tensors)
    return lambda ids: m.forward(list(ids), O.Margins())[0]


# ---- ppl --------------------------------------------------------------------------------------

def cmd_ppl(model_dir, lf_path, json_path):
    f = read_logits_file(lf_path)
    got = json.load(open(json_path))
    toks, bos = f["tokens"], f["bos"]
    wins = plan(len(toks), f["ctx"], f["stride"], bos)
    check("PPL windows: the file's window plan equals the reference rule (%d windows)" % len(wins),
          [(w["start"], w["tokens"], w["score_from"]) for w in got["windows"]] == wins,
          "glm %s, reference %s" % ([(w["start"], w["tokens"], w["score_from"]) for w in got["windows"]][:4], wins[:4]))
    forward = oracle(model_dir)
    nll, k, targets_ok, max_dlogit, oracle_nll = 0.0, 0, True, 0.0, 0.0
    win_nll = []
    for start, length, first in wins:
        seq = ([bos] if bos >= 0 else []) + list(toks[start:start + length])
        lead = 1 if bos >= 0 else 0
        ologits = forward(seq)
        s = 0.0
        for t in range(first, start + length):
            row = t - start + lead - 1          # the row whose logits predict text index t
            target, _, _, _, _, logits = f["recs"][k]
            targets_ok &= target == toks[t]
            s += -logsoftmax64(logits)[toks[t]]
            oracle_nll += -logsoftmax64(ologits[row])[toks[t]]
            max_dlogit = max(max_dlogit, float(np.max(np.abs(ologits[row].astype(np.float64) - logits))))
            k += 1
        win_nll.append(s)
        nll += s
    check("PPL: every scored position's target is the text's token there", targets_ok and k == len(f["recs"]))
    ppl = float(np.exp(nll / k))
    check("PPL equals the float64 reference from the same logits (rel 1e-9): %.12g vs %.12g" % (got["ppl"], ppl),
          rel(got["ppl"], ppl) < 1e-9, "relative difference %.3g" % rel(got["ppl"], ppl))
    worst = max(rel(w["nll_sum"], r) for w, r in zip(got["windows"], win_nll))
    check("PPL: every window's summed NLL equals the reference's (rel 1e-9)", worst < 1e-9, "worst %.3g" % worst)
    check("PPL: the logits are the oracle's for each window's sequence (max |diff| %.2g)" % max_dlogit,
          max_dlogit < 1e-3, "max |logit diff| %.3g" % max_dlogit)
    oppl = float(np.exp(oracle_nll / k))
    check("PPL from the independent oracle's logits agrees (rel 1e-4): %.8g vs %.8g" % (got["ppl"], oppl),
          rel(got["ppl"], oppl) < 1e-4, "relative difference %.3g" % rel(got["ppl"], oppl))


# ---- kld --------------------------------------------------------------------------------------

def cmd_kld(ref_path, run_path, json_path):
    p, q = read_logits_file(ref_path), read_logits_file(run_path)
    got = json.load(open(json_path))["kld"]
    kls, same, dn, rn = [], 0, 0.0, 0.0
    for pr, qr in zip(p["recs"], q["recs"]):
        lq = logsoftmax64(qr[5])
        if p["top_k"]:
            ids = pr[4]
            lp = pr[5].astype(np.float64) - pr[2]
            kl = float(np.sum(np.exp(lp) * (lp - lq[ids])))
            mask = np.ones(len(lq), bool)
            mask[ids] = False
            q_rest = float(np.sum(np.exp(lq[mask])))
            if pr[3] > 0:
                kl += pr[3] * (np.log(pr[3]) - np.log(q_rest))
            top = int(ids[0])
        else:
            lp = logsoftmax64(pr[5])
            kl = float(np.sum(np.exp(lp) * (lp - lq)))
            top = int(np.argmax(pr[5]))
        kls.append(kl)
        same += int(np.argmax(qr[5])) == top
        ref_nll = pr[2] - float(pr[1])
        rn += ref_nll
        dn += -lq[qr[0]] - ref_nll
    n = len(kls)
    kls = np.array(kls)
    mean = float(np.mean(kls))
    check("KLD mean equals the float64 reference (%s, abs 1e-9 + rel 1e-6): %.10g vs %.10g"
          % ("top-%d + rest" % p["top_k"] if p["top_k"] else "full rows", got["mean"], mean),
          abs(got["mean"] - mean) <= 1e-9 + 1e-6 * abs(mean), "diff %.3g" % abs(got["mean"] - mean))
    s = np.sort(kls)
    med = s[int(np.ceil(0.5 * n)) - 1]
    check("KLD median and max equal the reference's", abs(got["median"] - med) <= 1e-9 + 1e-6 * abs(med)
          and abs(got["max"] - s[-1]) <= 1e-9 + 1e-6 * abs(s[-1]), "%s vs %s" % ((got["median"], got["max"]), (med, s[-1])))
    check("top-1 agreement equals the reference's (%d/%d)" % (same, n), abs(got["top1_agreement"] - same / n) < 1e-12,
          "%s vs %s" % (got["top1_agreement"], same / n))
    ratio = float(np.exp(dn / n))
    check("PPL ratio equals the reference's: %.10g vs %.10g" % (got["ppl_ratio"], ratio), rel(got["ppl_ratio"], ratio) < 1e-9,
          "rel %.3g" % rel(got["ppl_ratio"], ratio))


# ---- score ------------------------------------------------------------------------------------

def answer_index(ans, labels, n):
    if isinstance(ans, int) and not isinstance(ans, bool):
        return ans
    if labels and ans in labels:
        return labels.index(ans)
    if len(ans) == 1 and "A" <= ans <= "Z":
        return ord(ans) - ord("A")
    return int(ans)


def cmd_score(model_dir, jsonl, json_path):
    got = json.load(open(json_path))
    items = [json.loads(l) for l in open(jsonl, encoding="utf-8") if l.strip()]
    check("SCORE: one result per question (%d)" % len(items), len(got["items"]) == len(items))
    forward = oracle(model_dir)
    worst, labels_ok, preds_ok, bytes_ok, right = 0.0, True, True, True, 0
    for item, res in zip(items, got["items"]):
        if "ctx" in item:
            choices, ans, labels = item["endings"], item["label"], None
        else:
            choices = item["choices"]
            ans = item.get("answerKey", item.get("answer"))
            labels = None
            if isinstance(choices, dict):
                choices, labels = choices["text"], choices.get("label")
        labels_ok &= res["label"] == answer_index(ans, labels, len(choices))
        ctx = res["context_ids"]
        lls = []
        for c, text in zip(res["choices"], choices):
            bytes_ok &= c["bytes"] == len((" " + text).encode("utf-8"))
            ids = c["ids"]
            logits = forward(ctx + ids)
            ll = sum(logsoftmax64(logits[len(ctx) - 1 + j])[ids[j]] for j in range(len(ids)))
            lls.append(ll)
            worst = max(worst, abs(ll - c["loglik"]))
            worst = max(worst, abs(ll / c["bytes"] - c["loglik_per_byte"]))
        pred = int(np.argmax(lls))
        preds_ok &= pred == res["pred"]
        right += pred == res["label"]
    check("SCORE: every answer field resolves to the reference's choice index", labels_ok)
    check("SCORE: choice texts are ' ' + choice, counted in UTF-8 bytes", bytes_ok)
    check("SCORE: every choice's log-likelihood (sum and per byte) equals the oracle's (max diff %.2g)" % worst, worst < 1e-4,
          "max |diff| %.3g" % worst)
    check("SCORE: the chosen answers equal the oracle's", preds_ok)
    check("SCORE: accuracy equals the reference's (%d/%d)" % (right, len(items)), got["by_sum"]["right"] == right,
          "%s vs %d" % (got["by_sum"]["right"], right))


if __name__ == "__main__":
    cmds = {"ppl": cmd_ppl, "kld": cmd_kld, "score": cmd_score}
    if len(sys.argv) != 5 or sys.argv[1] not in cmds:
        sys.exit(__doc__)
    cmds[sys.argv[1]](*sys.argv[2:])
    sys.exit(1 if FAILED else 0)

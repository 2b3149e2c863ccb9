#!/usr/bin/python3
"""convert_fp8_to_int4.py: convert a GLM-5.x checkpoint (FP8, BF16, F16 or F32 safetensors) into the
quantized container that glm.c reads (docs/format.md).

    /usr/bin/python3 tools/convert_fp8_to_int4.py SRC_DIR DST_DIR [options]

Precision per tensor class (docs/format.md section 5; every option takes 8, 4, 2 or 16 = keep f32):
    --expert-bits B   routed experts of layers < num_hidden_layers          (default 4)
    --dense-bits B    attention, shared expert, dense MLP of those layers   (default 4)
    --io-bits B       model.embed_tokens.weight, lm_head.weight             (default 8)
    --mtp-bits B      every 2-D weight of the MTP layer (index num_hidden_layers) (default 8; never below
                      8: a lower value is raised to 8 with a note, since an int4 MTP head loses nearly all
                      draft acceptance), except eh_proj, which stays f32: glm.c quantizes its two column
                      halves separately at load (they differ 20-30x in scale on GLM-5.2)
    --indexer-bits B  self_attn.indexer.* 2-D weights                       (default 8)
    --group N         int4 group size (default 64); --per-row: int4-row instead of groups
Always f32: 1-D tensors (norms, k_norm weight/bias, e_score_correction_bias) and the router
mlp.gate.weight. 8 bits is always int8-row and 2 bits int2-row. An int4 tensor whose rows fit in one
group is written as int4-row (identical numbers, and the byte arithmetic cannot tell them apart).

Other options:
    --delete-source   delete a source shard once no unfinished output shard needs it
    --margin-mb M     free space to keep on DST beyond the estimated output (default 1024)
    --restart         ignore DST/.convert-state.json from an earlier run (it must otherwise match)

Source shards: the files model.safetensors.index.json names when SRC_DIR has it (a missing one is an
error naming it; a *.safetensors file it does not name is refused; each shard's header must hold the
tensors the index lists for it), else every *.safetensors file in SRC_DIR.

On an error, the folders this run created are removed again where they hold nothing (the partial
shard is always removed); a folder that holds finished output shards is kept for the rerun that
resumes it, and a folder that existed before is never removed.

Quantization (bit-exact with the engine's load-time quantizer, all float32): per row or per group
absmax; s = max(absmax/qmax, 1e-8); q = clamp(rint(w/s), -2^(b-1), qmax), rint = half to even.
int4: stored q+8, element 2j in the low nibble; int2: stored q+2, element 4j+k in bits 2k..2k+1; an
odd tail is padded with q = 0 (nibble 8, crumb 2). Output: NAME as U8 (int4/int2) or I8 (int8) 1-D
byte array plus NAME.qs F32 1-D; __metadata__ colibri.fmt maps names to formats, colibri.group gives g.
FP8 weights are dequantized exactly: W = e4m3(code) * NAME_scale_inv[o//128][i//128] in float32.
Fused experts (mlp.experts.gate_up_proj [E,2I,D] gate rows first, mlp.experts.down_proj [E,D,I])
are split into per-expert tensors. An expert's three payloads are written adjacent, followed by its
three .qs arrays.

Output shards carry the input shard names. Each is written to NAME.tmp, fsynced and renamed;
DST/.convert-state.json (atomic) lists finished shards, so a rerun skips them and redoes a partial
one. config.json, generation_config.json, tokenizer*.json (tokenizer.json, tokenizer_config.json) and
chat_template.jinja (GLM-5.2 ships its template there) are copied when all shards are done.

Library use (tools/fetch_convert.py): Conversion(src_dir, dst_dir, args, shard_names, header_for) plans
the job from the shards' headers (a shard may be a header-only file until its data is needed),
convert_shard(i) writes one output shard, done_with(i) names the sources nothing unfinished needs,
copy_extras() copies the small files.
Testing hook: CONVERT_KILL_AFTER_TENSORS=N makes the process SIGKILL itself after writing N tensors.
"""
import argparse
import glob
import json
import os
import re
import signal
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import SafeFile, ShardWriter, StError, atomic_write_bytes, header_bytes, to_f32  # noqa: E402
from tool_help import HelpFormatter  # noqa: E402

STATE_NAME = ".convert-state.json"
INDEX_NAME = "model.safetensors.index.json"
SHARD_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\.safetensors$")     # a plain file name, no path
COPY_PATTERNS = ("config.json", "generation_config.json", "tokenizer*.json", "chat_template.jinja")
CHUNK_ELEMS = 8 * 1024 * 1024      # rows per read/quantize step: about 32 MB of float32
QMAX = {8: 127, 4: 7, 2: 1}
LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.")
EXPERT_RE = re.compile(r"^(model\.layers\.\d+\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")
FUSED_RE = re.compile(r"^(model\.layers\.\d+\.mlp\.experts)\.(gate_up_proj|down_proj)$")
PROJS = ("gate_proj", "up_proj", "down_proj")


class ConvertError(Exception):
    pass


def die(msg):
    print(f"convert: error: {msg}", file=sys.stderr)
    sys.exit(1)


# ----------------------------------------------------------------------------------------------
# Quantization: the one place where output bytes are decided.

def quantize_rows(w, bits, group, what):
    """w: float32 [R, I]. group None = one scale per row. Returns (packed uint8 [R, stride], scales
    float32 [R, ngroups])."""
    qmax = QMAX[bits]
    rows, cols = w.shape
    g = cols if group is None else group
    ng = max(1, -(-cols // g)) if cols else 1
    if cols % g or cols == 0:
        padded = np.zeros((rows, ng * g), dtype=np.float32)
        padded[:, :cols] = w
        wg = padded.reshape(rows, ng, g)
    else:
        wg = w.reshape(rows, ng, g)
    absmax = np.abs(wg).max(axis=2)
    if not np.isfinite(absmax).all():
        r = int(np.nonzero(~np.isfinite(absmax))[0][0])
        raise ConvertError(f"{what}: non-finite value (NaN or Inf) in row {r}")
    s = np.maximum(absmax / np.float32(qmax), np.float32(1e-8))
    q = wg / s[:, :, None]
    np.rint(q, out=q)
    np.clip(q, -qmax - 1, qmax, out=q)
    q = q.astype(np.int8).reshape(rows, ng * g)[:, :cols]
    if bits == 8:
        packed = q.view(np.uint8)
    elif bits == 4:
        u = (q + 8).astype(np.uint8)
        if cols % 2:
            u = np.concatenate([u, np.full((rows, 1), 8, np.uint8)], axis=1)
        packed = u[:, 0::2] | (u[:, 1::2] << 4)
    else:
        u = (q + 2).astype(np.uint8)
        if cols % 4:
            u = np.concatenate([u, np.full((rows, (-cols) % 4), 2, np.uint8)], axis=1)
        packed = u[:, 0::4] | (u[:, 1::4] << 2) | (u[:, 2::4] << 4) | (u[:, 3::4] << 6)
    return np.ascontiguousarray(packed), np.ascontiguousarray(s, dtype=np.float32)


def fmt_of(bits, group, cols):
    """(format name, group or None) for a tensor with `cols` inputs."""
    if bits == 16:
        return "f32", None
    if bits == 8:
        return "int8-row", None
    if bits == 2:
        return "int2-row", None
    if group is None or cols <= group:
        return "int4-row", None
    return "int4-grouped", group


def out_entries(name, fmt, group, rows, cols, shape):
    """Header entries of one output tensor: [(name, dtype, shape)] payload (and .qs)."""
    if fmt == "f32":
        return [(name, "F32", shape)], []
    if fmt == "int8-row":
        return [(name, "I8", [rows * cols])], [(name + ".qs", "F32", [rows])]
    if fmt == "int2-row":
        return [(name, "U8", [rows * -(-cols // 4)])], [(name + ".qs", "F32", [rows])]
    ng = 1 if fmt == "int4-row" else -(-cols // group)
    return [(name, "U8", [rows * -(-cols // 2)])], [(name + ".qs", "F32", [rows * ng])]


# ----------------------------------------------------------------------------------------------
# Source access

class Source:
    """All source shards: headers indexed by tensor name (duplicates refused). `headers` maps a shard
    name to a header-only SafeFile, used for a shard whose file is not in src_dir yet (the plan needs
    only headers; attach() switches to the file once its data has arrived)."""

    def __init__(self, src_dir, shard_names, headers=None):
        self.dir = src_dir
        self.shards = shard_names
        self.files = {}
        self.where = {}     # tensor name -> shard index
        for i, sn in enumerate(shard_names):
            p = os.path.join(src_dir, sn)
            if os.path.exists(p):
                f = SafeFile(p)
            elif headers and sn in headers:
                f = headers[sn]
            else:
                continue     # deleted by an earlier --delete-source run
            self.files[i] = f
            for n in f.names():
                if n in self.where:
                    raise ConvertError(f"tensor {n} appears in both {shard_names[self.where[n]]} and {sn}")
                self.where[n] = i

    def attach(self, i):
        """Shard i's file is now complete in src_dir: read its data from there. Its header must be the
        one the plan was made from."""
        path = os.path.join(self.dir, self.shards[i])
        f = SafeFile(path)
        old = self.files.get(i)
        if old is not None and (old.names() != f.names() or any(old.info(n) != f.info(n) for n in f.names())):
            raise ConvertError(f"{path}: header differs from the one the conversion was planned with")
        self.files[i] = f

    def has_data(self, i):
        return i in self.files and not self.files[i].header_only

    def info(self, name):
        return self.files[self.where[name]].info(name)

    def raw(self, name):
        return self.files[self.where[name]].raw(name)

    def file_of(self, name):
        return self.shards[self.where[name]]


class Matrix:
    """A 2-D float view of a source tensor (or of expert e of a 3-D fused one), rows [r0, r0+rows)."""

    def __init__(self, src, name, expert=None, r0=0, rows=None):
        self.src, self.name, self.expert, self.r0 = src, name, expert, r0
        inf = src.info(name)
        self.dtype = inf["dtype"]
        shape = inf["shape"][1:] if expert is not None else inf["shape"]
        self.full_rows, self.cols = shape
        self.rows = self.full_rows if rows is None else rows
        self.scaled = self.dtype == "F8_E4M3"     # scales read with the data (planning reads headers only)
        esize = {"F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1}[self.dtype]
        self.row_bytes = self.cols * esize

    def read(self, a, b):
        """float32 rows [a, b) of this matrix (relative to r0), exactly dequantized."""
        raw = self.src.raw(self.name)
        if self.expert is not None:
            raw = raw[self.expert]
        block = raw[self.r0 + a:self.r0 + b]
        w = to_f32(block, self.dtype)
        w = np.ascontiguousarray(w, dtype=np.float32)
        if self.scaled:
            sc = self.src.raw(self.name + "_scale_inv")
            if self.expert is not None:
                sc = sc[self.expert]
            rb = np.arange(self.r0 + a, self.r0 + b) // 128
            s = np.asarray(sc, dtype=np.float32)[rb]            # [rows, ceil(cols/128)]
            if self.cols % 128 == 0:      # same float32 products, without a full-size multiplier
                w.reshape(b - a, self.cols // 128, 128)[...] *= s[:, :, None]
            else:
                w *= np.repeat(s, 128, axis=1)[:, :self.cols]
        return w


# ----------------------------------------------------------------------------------------------
# Plan: which output tensors go to which output shard, in which order

class Policy:
    def __init__(self, args, num_hidden_layers):
        self.bits = {"expert": args.expert_bits, "dense": args.dense_bits, "io": args.io_bits,
                     "mtp": args.mtp_bits, "indexer": args.indexer_bits}
        self.group = None if args.per_row else args.group
        self.nhl = num_hidden_layers

    def as_dict(self):
        return {"bits": self.bits, "group": self.group, "num_hidden_layers": self.nhl}

    def bits_for(self, name, ndim):
        """bits for a source tensor, 16 = keep f32."""
        if ndim != 2 or name.endswith(".mlp.gate.weight") or name.endswith("e_score_correction_bias"):
            return 16
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            return self.bits["io"]
        m = LAYER_RE.match(name)
        if m and int(m.group(1)) >= self.nhl:
            return 16 if name.endswith(".eh_proj.weight") else max(8, self.bits["mtp"])
        if ".self_attn.indexer." in name:
            return self.bits["indexer"]
        if ".mlp.experts." in name:
            return self.bits["expert"]
        return self.bits["dense"]


class Unit:
    """A group of output tensors written contiguously: one tensor, one expert, or a fused layer."""

    def __init__(self, kind, key, sources):
        self.kind, self.key, self.sources = kind, key, sources   # sources: names of base tensors
        self.parts = []        # [(out_name, Matrix factory args)] in payload order
        self.entries = []      # header entries in data order
        self.fmts = {}
        self.in_bytes = 0


def build_units(src, policy, done_outputs):
    """Group source tensors into units, validate them, and drop units already written."""
    units = []
    experts = {}
    fused = {}
    for name in src.where:
        if name.endswith(".qs"):
            raise ConvertError(f"{src.file_of(name)}: tensor {name}: source is already a quantized container")
    for name in sorted(src.where, key=lambda n: (src.where[n], src.info(n)["offset"])):
        inf = src.info(name)
        if name.endswith("_scale_inv"):
            base = name[:-len("_scale_inv")]
            if base not in src.where:
                raise ConvertError(f"{src.file_of(name)}: tensor {name} has no base tensor {base}")
            continue
        if inf["dtype"] not in ("F32", "BF16", "F16", "F8_E4M3"):
            raise ConvertError(f"{src.file_of(name)}: tensor {name}: unsupported dtype {inf['dtype']}")
        m = EXPERT_RE.match(name)
        if m:
            experts.setdefault((m.group(1), int(m.group(2))), {})[m.group(3)] = name
            continue
        m = FUSED_RE.match(name)
        if m:
            fused.setdefault(m.group(1), {})[m.group(2)] = name
            continue
        units.append(Unit("single", name, [name]))
    for (prefix, e), d in experts.items():
        units.append(Unit("expert", f"{prefix}.{e}", [d.get(p) for p in PROJS]))
    for prefix, d in fused.items():
        units.append(Unit("fused", prefix, [d.get("gate_up_proj"), d.get("down_proj")]))
    kept = []
    for u in units:
        outs = unit_output_names(u, src)
        if outs and all(o in done_outputs for o in outs):
            continue
        finish_unit(u, src, policy)
        kept.append(u)
    for u in kept:
        u.shard = min(src.where[s] for s in u.sources)
        u.order = min(src.info(s)["offset"] for s in u.sources if src.where[s] == u.shard)
        u.needs = set(src.where[s] for s in u.sources)
        u.needs |= set(src.where[s + "_scale_inv"] for s in u.sources if s + "_scale_inv" in src.where)
    kept.sort(key=lambda u: (u.shard, u.order))
    return kept


def unit_output_names(u, src):
    """Output payload names a unit would produce (without formats), for the already-done check."""
    if u.kind == "single":
        return [u.key]
    if u.kind == "expert":
        return [f"{u.key}.{p}.weight" for p, s in zip(PROJS, u.sources) if s is not None]
    names = []
    for s in u.sources:
        if s is None:
            continue
        n_exp = src.info(s)["shape"][0]
        projs = ("gate_proj", "up_proj") if s.endswith("gate_up_proj") else ("down_proj",)
        names += [f"{u.key}.{e}.{p}.weight" for e in range(n_exp) for p in projs]
    return names


def check_float_source(src, name, want_ndim):
    inf = src.info(name)
    where = f"{src.file_of(name)}: tensor {name}"
    if len(inf["shape"]) != want_ndim:
        raise ConvertError(f"{where}: expected {want_ndim}-D, shape is {list(inf['shape'])}")
    comp = name + "_scale_inv"
    if inf["dtype"] == "F8_E4M3":
        if comp not in src.where:
            raise ConvertError(f"{where}: F8_E4M3 without its {comp} companion")
        ci = src.info(comp)
        sh = inf["shape"]
        want = list(sh[:-2]) + [-(-sh[-2] // 128), -(-sh[-1] // 128)]
        if ci["dtype"] != "F32" or list(ci["shape"]) != want:
            raise ConvertError(f"{src.file_of(comp)}: tensor {comp}: expected F32 {want}, "
                               f"found {ci['dtype']} {list(ci['shape'])}")
    elif comp in src.where:
        raise ConvertError(f"{where}: {inf['dtype']} tensor has a {comp} companion (only F8_E4M3 may)")


def finish_unit(u, src, policy):
    """Validate a unit and compute its output parts and header entries."""
    def add(out_name, mat, bits):
        fmt, group = fmt_of(bits, policy.group, mat.cols)
        payload, qs = out_entries(out_name, fmt, group, mat.rows, mat.cols, [mat.rows, mat.cols])
        u.parts.append((out_name, mat, bits, fmt, group))
        u.payload_entries.extend(payload)
        u.qs_entries.extend(qs)
        if fmt != "f32":
            u.fmts[out_name] = fmt
        u.in_bytes += mat.rows * mat.row_bytes

    u.payload_entries, u.qs_entries = [], []
    if u.kind == "single":
        name = u.key
        inf = src.info(name)
        nd = len(inf["shape"])
        if nd > 2:
            raise ConvertError(f"{src.file_of(name)}: tensor {name}: unexpected {nd}-D tensor {list(inf['shape'])}")
        check_float_source(src, name, nd)
        bits = policy.bits_for(name, nd)
        if nd == 2:
            add(name, Matrix(src, name), bits)
        else:
            u.parts.append((name, None, 16, "f32", None))
            u.payload_entries.append((name, "F32", list(inf["shape"])))
            u.in_bytes += inf["nbytes"]
    elif u.kind == "expert":
        missing = [p for p, s in zip(PROJS, u.sources) if s is None]
        if missing:
            raise ConvertError(f"expert {u.key}: missing {', '.join(p + '.weight' for p in missing)}")
        for p, s in zip(PROJS, u.sources):
            check_float_source(src, s, 2)
            add(s, Matrix(src, s), policy.bits_for(s, 2))
        gi, ui, di = (src.info(s)["shape"] for s in u.sources)
        if gi != ui or di[0] != gi[1] or di[1] != gi[0]:
            raise ConvertError(f"expert {u.key}: inconsistent shapes gate {list(gi)} up {list(ui)} down {list(di)}")
    else:
        gu, dn = u.sources
        if gu is None or dn is None:
            raise ConvertError(f"fused experts {u.key}: need both gate_up_proj and down_proj")
        check_float_source(src, gu, 3)
        check_float_source(src, dn, 3)
        e1, two_i, d1 = src.info(gu)["shape"]
        e2, d2, i2 = src.info(dn)["shape"]
        if e1 != e2 or d1 != d2 or two_i != 2 * i2:
            raise ConvertError(f"fused experts {u.key}: inconsistent shapes gate_up_proj {[e1, two_i, d1]} "
                               f"down_proj {[e2, d2, i2]}")
        u.parts_by_expert = []
        for e in range(e1):
            before = len(u.parts), len(u.payload_entries), len(u.qs_entries)
            for p in PROJS:
                out = f"{u.key}.{e}.{p}.weight"
                if p == "down_proj":
                    mat = Matrix(src, dn, expert=e)
                else:
                    mat = Matrix(src, gu, expert=e, r0=0 if p == "gate_proj" else i2, rows=i2)
                add(out, mat, policy.bits_for(out, 2))
            u.parts_by_expert.append(before)
    # data order: per expert payloads then .qs; a fused unit is a sequence of experts
    if u.kind == "fused":
        u.entries = []
        bounds = u.parts_by_expert + [(len(u.parts), len(u.payload_entries), len(u.qs_entries))]
        for (p0, a0, q0), (p1, a1, q1) in zip(bounds, bounds[1:]):
            u.entries += u.payload_entries[a0:a1] + u.qs_entries[q0:q1]
        u.groups = [(p0, p1) for (p0, _, _), (p1, _, _) in zip(bounds, bounds[1:])]
    else:
        u.entries = u.payload_entries + u.qs_entries
        u.groups = [(0, len(u.parts))]


# ----------------------------------------------------------------------------------------------
# Writing

class Progress:
    """A progress line on stderr: redrawn in place on a terminal, else one line every 10 s
    (none with tty_only: a caller printing its own line per shard)."""

    def __init__(self, total_bytes, tty_only=False):
        self.total = max(1, total_bytes)
        self.done = 0
        self.t0 = time.time()
        self.last = 0.0
        self.tty = sys.stderr.isatty()
        self.silent = tty_only and not self.tty

    def add(self, n, label, force=False):
        self.done += n
        now = time.time()
        if self.silent:
            return
        if not force and now - self.last < (0.5 if self.tty else 10.0):
            return
        self.last = now
        dt = max(now - self.t0, 1e-6)
        rate = self.done / dt
        eta = (self.total - self.done) / rate if rate > 0 else 0
        frac = min(1.0, self.done / self.total)
        bar = "#" * int(frac * 30) + "." * (30 - int(frac * 30))
        line = (f"[{bar}] {100 * frac:5.1f}% {label} {self.done / 1e6:.0f}/{self.total / 1e6:.0f} MB "
                f"{rate / 1e6:.0f} MB/s ETA {int(eta) // 60}m{int(eta) % 60:02d}s")
        print(("\r" + line + "   ") if self.tty else line, end="" if self.tty else "\n", file=sys.stderr, flush=True)

    def end(self):
        if self.tty:
            print(file=sys.stderr)


class Killer:
    """CONVERT_KILL_AFTER_TENSORS=N: simulate a crash after N written tensors (tests)."""

    def __init__(self):
        v = os.environ.get("CONVERT_KILL_AFTER_TENSORS")
        self.left = int(v) if v else None

    def tick(self):
        if self.left is not None:
            self.left -= 1
            if self.left <= 0:
                sys.stderr.flush()
                os.kill(os.getpid(), signal.SIGKILL)


def write_part(writer, name, mat, bits, fmt, group, src, progress, label, killer):
    """Write one part's payload (row chunks); returns its scales (or None)."""
    if mat is None:       # 1-D / 0-D float tensor kept as f32
        inf = src.info(name)
        data = to_f32(src.raw(name), inf["dtype"])
        if not np.isfinite(data).all():
            raise ConvertError(f"{src.file_of(name)}: tensor {name}: non-finite value")
        writer.write(name, np.ascontiguousarray(data, dtype=np.float32))
        killer.tick()
        progress.add(inf["nbytes"], label)
        return None
    step = max(1, CHUNK_ELEMS // max(1, mat.cols))
    scales = []
    for a in range(0, mat.rows, step):
        b = min(mat.rows, a + step)
        w = mat.read(a, b)
        if fmt == "f32":
            if not np.isfinite(w).all():
                raise ConvertError(f"{src.file_of(mat.name)}: tensor {mat.name}: non-finite value")
            writer.write(name, w)
        else:
            packed, s = quantize_rows(w, bits, group, f"{src.file_of(mat.name)}: tensor {mat.name}")
            writer.write(name, packed)
            scales.append(s.reshape(-1))
        progress.add((b - a) * mat.row_bytes, label)
    killer.tick()
    return np.concatenate(scales) if scales else None


def shard_layout(units):
    """Header entries (data order) and __metadata__ of one output shard."""
    entries, fmts = [], {}
    for u in units:
        entries += u.entries
        fmts.update(u.fmts)
    meta = {"format": "pt", "colibri.fmt": json.dumps(fmts, sort_keys=True)}
    groups = sorted(set(p[4] for u in units for p in u.parts if p[4]))
    if groups:
        meta["colibri.group"] = ",".join(str(g) for g in groups)
    return entries, meta


def shard_bytes(units):
    entries, meta = shard_layout(units)
    head, sizes = header_bytes(entries, meta)
    return len(head) + sum(n for _, n in sizes)


def write_shard(path, units, src, progress, label, killer):
    entries, meta = shard_layout(units)
    writer = ShardWriter(path, entries, meta)
    try:
        for u in units:
            for p0, p1 in u.groups:
                pending = []
                for name, mat, bits, fmt, group in u.parts[p0:p1]:
                    s = write_part(writer, name, mat, bits, fmt, group, src, progress, label, killer)
                    if s is not None:
                        pending.append((name + ".qs", s))
                for qname, s in pending:
                    writer.write(qname, s)
                    killer.tick()
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return len(entries)


# ----------------------------------------------------------------------------------------------

def parse_index(data, what):
    """The bytes of model.safetensors.index.json -> {tensor name: shard file name}."""
    try:
        idx = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConvertError(f"{what}: not valid JSON ({e})")
    wm = idx.get("weight_map") if isinstance(idx, dict) else None
    if not isinstance(wm, dict) or not wm:
        raise ConvertError(f"{what}: no weight_map")
    for name, fn in wm.items():
        if not isinstance(fn, str) or not SHARD_RE.match(fn):
            raise ConvertError(f"{what}: tensor {name}: shard name {fn!r} is not a plain *.safetensors file name")
    return wm


def read_index(src_dir):
    """SRC_DIR's index as parse_index returns it, or None when SRC_DIR has none."""
    path = os.path.join(src_dir, INDEX_NAME)
    try:
        with open(path, "rb") as fh:
            return parse_index(fh.read(), path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ConvertError(f"{path}: cannot read: {e.strerror}")


def check_shard_against_index(weight_map, shard, names):
    """A shard's header (tensor names) must hold exactly the tensors the index lists for it."""
    listed = {n for n, f in weight_map.items() if f == shard}
    extra, missing = sorted(set(names) - listed), sorted(listed - set(names))
    if extra or missing:
        raise ConvertError(f"{shard}: its header and {INDEX_NAME} disagree: " +
                           (f"tensor {extra[0]} is not listed for it" if extra else
                            f"tensor {missing[0]} is listed for it but not in it"))


def make_dirs(path):
    """os.makedirs(path, exist_ok=True); returns the folders it created, outermost first, for
    remove_made_dirs."""
    made = []
    p = os.path.abspath(path)
    while not os.path.lexists(p):
        made.append(p)
        p = os.path.dirname(p)
    os.makedirs(path, exist_ok=True)
    return made[::-1]


def remove_made_dirs(made):
    """Remove the folders make_dirs created, innermost first, each only if it is empty (rmdir never
    deletes content). Returns the ones left in place."""
    kept = []
    for d in reversed(made):
        try:
            os.rmdir(d)
        except FileNotFoundError:
            pass
        except OSError:
            kept.append(d)
    return kept


def load_state(path):
    try:
        with open(path) as fh:
            st = json.load(fh)
        if not isinstance(st, dict) or not isinstance(st.get("finished"), dict):
            raise ValueError("no 'finished' map")
        return st
    except (OSError, ValueError) as e:
        raise ConvertError(f"{path}: unreadable state file ({e}); use --restart")


def save_state(path, state):
    atomic_write_bytes(path, (json.dumps(state, indent=1, sort_keys=True) + "\n").encode())


def free_bytes(d):
    s = os.statvfs(d)
    return s.f_bavail * s.f_frsize


def add_conversion_args(ap):
    """Options that decide the output, plus --margin-mb and --restart (shared with fetch_convert.py)."""
    bits = lambda s: int(s) if s in ("2", "4", "8", "16") else ap.error(f"bits must be 2, 4, 8 or 16, not {s}")
    g = ap.add_argument_group("conversion (bits: 8 = int8-row, 4 = int4, 2 = int2-row, 16 = keep f32)")
    g.add_argument("--expert-bits", type=bits, default=4, metavar="B",
                   help="routed experts of the layers below num_hidden_layers")
    g.add_argument("--dense-bits", type=bits, default=4, metavar="B",
                   help="attention, shared expert and dense MLP weights of those layers")
    g.add_argument("--io-bits", type=bits, default=8, metavar="B", help="model.embed_tokens and lm_head")
    g.add_argument("--mtp-bits", type=bits, default=8, metavar="B",
                   help="the MTP layer's 2-D weights (a value below 8 is raised to 8; eh_proj stays f32)")
    g.add_argument("--indexer-bits", type=bits, default=8, metavar="B", help="self_attn.indexer.* 2-D weights")
    g.add_argument("--group", type=int, default=64, metavar="N", help="int4 group size (columns per scale)")
    g.add_argument("--per-row", action="store_true", help="int4 with one scale per row instead of per group")
    g.add_argument("--margin-mb", type=float, default=1024, metavar="M",
                   help="free space (MB) to keep on DST_DIR beyond the estimated output")
    g.add_argument("--restart", action="store_true",
                   help="ignore the state an earlier run left (DST_DIR/.convert-state.json) and redo every shard")


def check_conversion_args(ap, a):
    if a.group < 1:
        ap.error("--group must be >= 1")
    if a.mtp_bits < 8:
        print(f"note: --mtp-bits {a.mtp_bits} raised to 8: the MTP layer drafts well only at 8 bits or more", file=sys.stderr)
        a.mtp_bits = 8


def parse_args(argv):
    ap = argparse.ArgumentParser(description="Convert FP8/BF16/F32 GLM safetensors into the glm.c container.",
                                 formatter_class=HelpFormatter)
    ap.add_argument("src", metavar="SRC_DIR", help="the model folder: config.json and *.safetensors")
    ap.add_argument("dst", metavar="DST_DIR", help="the output folder (created if needed)")
    add_conversion_args(ap)
    ap.add_argument("--delete-source", action="store_true",
                    help="DELETES each source shard in SRC_DIR as soon as no unfinished output shard needs it, "
                         "so the disk holds about one copy of the model instead of two")
    a = ap.parse_args(argv)
    check_conversion_args(ap, a)
    return a


EXTRA_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "chat_template.jinja")      # the small files COPY_PATTERNS should find in a release


class Conversion:
    """One conversion job: options, state file and plan (from the source shards' headers). main()
    runs it over a folder of shards; tools/fetch_convert.py runs it while it downloads them."""

    def __init__(self, src_dir, dst_dir, args, shard_names=None, header_for=None):
        """shard_names: the source shards (default: SRC_DIR's *.safetensors and those the state file
        lists). header_for(name): a header-only SafeFile for an unfinished shard not in SRC_DIR yet."""
        if not os.path.isdir(src_dir):
            raise ConvertError(f"{src_dir}: not a directory")
        if os.path.exists(dst_dir) and os.path.samefile(src_dir, dst_dir):
            raise ConvertError("SRC_DIR and DST_DIR must differ")
        cfg_path = os.path.join(src_dir, "config.json")
        try:
            with open(cfg_path) as fh:
                cfg = json.load(fh)
            nhl = cfg["num_hidden_layers"]
            if not isinstance(nhl, int) or nhl < 0:
                raise ValueError("num_hidden_layers is not a non-negative integer")
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConvertError(f"{cfg_path}: {e}")
        os.makedirs(dst_dir, exist_ok=True)
        self.src_dir, self.dst_dir = src_dir, dst_dir
        self.policy = Policy(args, nhl)
        self.margin = int(args.margin_mb * 1e6)
        self.state_path = os.path.join(dst_dir, STATE_NAME)

        state = None
        if os.path.exists(self.state_path) and not args.restart:
            state = load_state(self.state_path)
            if state.get("options") != self.policy.as_dict():
                raise ConvertError(f"{self.state_path}: an earlier run used options {json.dumps(state.get('options'))}, "
                                   f"this run {json.dumps(self.policy.as_dict())}; use the same options, a fresh "
                                   f"DST_DIR or --restart")
        if state is None:
            state = {"options": self.policy.as_dict(), "finished": {}}
        self.state = state

        self.weight_map = read_index(src_dir)
        explicit = shard_names is not None
        if not explicit:
            present = sorted(os.path.basename(p) for p in glob.glob(os.path.join(src_dir, "*.safetensors")))
            if self.weight_map is None:
                shard_names = sorted(set(present) | set(state["finished"]))
            else:
                shard_names = sorted(set(self.weight_map.values()))
                self._check_listed(present, shard_names, state)
        if explicit or self.weight_map is not None:
            stray = sorted(set(state["finished"]) - set(shard_names))
            if stray:
                raise ConvertError(f"{self.state_path}: lists finished shard {stray[0]}, which this source does not "
                                   f"have; use a fresh DST_DIR or --restart")
        if not shard_names:
            raise ConvertError(f"{src_dir}: no *.safetensors files")
        self.shard_names = shard_names

        # A finished shard counts only if its output is still there with the recorded size.
        done_outputs = set()
        for sn, rec in list(state["finished"].items()):
            out = os.path.join(dst_dir, sn)
            if rec.get("bytes", 0) == 0:
                continue
            if not os.path.exists(out) or os.path.getsize(out) != rec["bytes"]:
                print(f"convert: {sn}: output missing or wrong size, redoing it", file=sys.stderr)
                del state["finished"][sn]
                continue
            done_outputs.update(SafeFile(out).names())
        headers = {}
        for sn in shard_names:
            if sn in state["finished"] or os.path.exists(os.path.join(src_dir, sn)):
                continue
            if header_for is None:
                raise ConvertError(f"{os.path.join(src_dir, sn)}: source shard is gone but its output is not finished")
            headers[sn] = header_for(sn)
        for stale in glob.glob(os.path.join(dst_dir, "*.tmp")):
            os.remove(stale)     # a partial shard from a killed run: redone below

        self.src = Source(src_dir, shard_names, headers)
        if self.weight_map is not None:
            for i, f in self.src.files.items():
                check_shard_against_index(self.weight_map, shard_names[i], f.names())
        units = build_units(self.src, self.policy, done_outputs)
        self.todo = [i for i, sn in enumerate(shard_names) if sn not in state["finished"]]
        self.by_shard = {i: [u for u in units if u.shard == i] for i in self.todo}
        for u in units:
            if u.shard not in self.by_shard:
                raise ConvertError(f"{shard_names[u.shard]}: marked finished but tensor group {u.key} "
                                   f"was not written; use --restart")
        self.est = {i: shard_bytes(self.by_shard[i]) if self.by_shard[i] else 0 for i in self.todo}
        self.in_bytes = {i: sum(u.in_bytes for u in self.by_shard[i]) for i in self.todo}
        self.in_total = sum(self.in_bytes.values())
        self.out_total = sum(self.est.values())
        self.needed_by = {}     # source shard -> output shards (unfinished) that read it
        for u in units:
            for f in u.needs:
                self.needed_by.setdefault(f, set()).add(u.shard)
        self.killer = Killer()

    def _check_listed(self, present, listed, state):
        """SRC_DIR's *.safetensors files against the index: each listed shard is there (or finished
        by an earlier run, which may have deleted it), and no other one is."""
        unlisted = sorted(set(present) - set(listed))
        if unlisted:
            raise ConvertError(f"{os.path.join(self.src_dir, unlisted[0])}: not named in {INDEX_NAME}; move "
                               f"it out of SRC_DIR or fix the index")
        for sn in listed:
            if sn in present or sn in state["finished"]:
                continue
            tensors = sorted(n for n, f in self.weight_map.items() if f == sn)
            raise ConvertError(f"{os.path.join(self.src_dir, sn)}: missing: {INDEX_NAME} names this file for "
                               f"{len(tensors)} tensor(s) ({tensors[0]}{', ...' if len(tensors) > 1 else ''}); "
                               f"download it into SRC_DIR")

    def needs(self, i):
        """Source shards whose data output shard i reads (usually i; also a neighbour holding a
        scale companion or half of a fused pair)."""
        return sorted(set().union(*(u.needs for u in self.by_shard[i])))

    def convert_shard(self, i, progress, label):
        """Write output shard i (all its sources must have data) and record it as finished."""
        sn = self.shard_names[i]
        free = free_bytes(self.dst_dir)
        if free < self.est[i] + self.margin / 4:
            raise ConvertError(f"{sn}: only {free / 1e6:.1f} MB free on {self.dst_dir}, shard needs "
                               f"~{self.est[i] / 1e6:.1f} MB; free some space and rerun (finished shards are kept)")
        if self.by_shard[i]:
            out = os.path.join(self.dst_dir, sn)
            n = write_shard(out, self.by_shard[i], self.src, progress, label, self.killer)
            rec = {"bytes": os.path.getsize(out), "tensors": n}
        else:
            rec = {"bytes": 0, "tensors": 0}
        self.state["finished"][sn] = rec
        save_state(self.state_path, self.state)
        progress.add(0, label, force=True)
        return rec

    def done_with(self, i=None):
        """After output shard i (or before the first): the source shards nothing unfinished reads."""
        for users in self.needed_by.values():
            users.discard(i)
        return [f for f in sorted(self.src.files)
                if self.shard_names[f] in self.state["finished"] and not self.needed_by.get(f)]

    def drop_source(self, f):
        """Forget source shard f (done_with named it); returns its file's path if its data was read
        from one (the caller may delete it), None for a header-only entry."""
        sf = self.src.files.pop(f)
        sf.close()
        return None if sf.header_only else sf.path

    def copy_extras(self):
        """Copy config, generation config, tokenizer files and chat template into DST_DIR.
        Returns (copied names, absent names of EXTRA_FILES)."""
        copied = []
        for pat in COPY_PATTERNS:
            for p in sorted(glob.glob(os.path.join(self.src_dir, pat))):
                with open(p, "rb") as fh:
                    atomic_write_bytes(os.path.join(self.dst_dir, os.path.basename(p)), fh.read())
                copied.append(os.path.basename(p))
        return copied, [n for n in EXTRA_FILES if n not in copied]


def convert(args):
    conv = Conversion(args.src, args.dst, args)
    src_dir, dst_dir = args.src, args.dst
    same_fs = os.stat(src_dir).st_dev == os.stat(dst_dir).st_dev
    need_out = max(conv.est.values(), default=0) if (args.delete_source and same_fs) else conv.out_total
    free = free_bytes(dst_dir)
    print(f"convert: {len(conv.todo)} of {len(conv.shard_names)} shards to do, {conv.in_total / 1e6:.1f} MB input, "
          f"estimated output {conv.out_total / 1e6:.1f} MB; need {(need_out + conv.margin) / 1e6:.1f} MB "
          f"(output {need_out / 1e6:.1f} + margin {conv.margin / 1e6:.1f}), free {free / 1e6:.1f} MB on {dst_dir}",
          file=sys.stderr)
    if free < need_out + conv.margin:
        raise ConvertError(f"refusing to start: {free / 1e6:.1f} MB free on {dst_dir}, "
                           f"need {(need_out + conv.margin) / 1e6:.1f} MB")

    progress = Progress(conv.in_total)
    t0 = time.time()
    for k, i in enumerate(conv.todo):
        conv.convert_shard(i, progress, f"shard {k + 1}/{len(conv.todo)} {conv.shard_names[i]}")
        if args.delete_source:
            for f in conv.done_with(i):
                path = conv.drop_source(f)
                if path:
                    os.remove(path)
                    print(f"convert: deleted source {conv.shard_names[f]}", file=sys.stderr)
    progress.end()

    copied, absent = conv.copy_extras()
    dt = max(time.time() - t0, 1e-9)
    print(f"convert: copied {', '.join(copied) or 'nothing'}" + (f"; absent: {', '.join(absent)}" if absent else ""),
          file=sys.stderr)
    print(f"convert: done: {conv.in_total / 1e6:.1f} MB of input in {dt:.1f} s = {conv.in_total / 1e6 / dt:.1f} MB/s; "
          f"{len(conv.todo)} shard(s) written to {dst_dir}", file=sys.stderr)


def main(argv):
    args = parse_args(argv)
    made = []
    try:
        made = make_dirs(args.dst)
        convert(args)
    except BaseException as e:
        kept = remove_made_dirs(made)     # an error before any finished shard leaves no folder behind
        if kept:
            print(f"convert: {kept[0]} kept: it holds finished output shards; rerun the same command to "
                  f"continue", file=sys.stderr)
        if isinstance(e, (ConvertError, StError)):
            die(str(e))
        if isinstance(e, OSError):
            die(f"{e.filename + ': ' if e.filename else ''}{e.strerror or e}")
        if isinstance(e, KeyboardInterrupt):
            die("interrupted (finished shards are kept; rerun to continue)")
        raise


if __name__ == "__main__":
    main(sys.argv[1:])

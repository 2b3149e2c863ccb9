"""safetensors_io: the small safetensors reader/writer shared by the offline tools.

Only /usr/bin/python3 and Debian's numpy; no torch, no safetensors package.

Reading (docs/format.md section 1):
    f = SafeFile(path)              # validates the header; raises StError naming file and tensor
    SafeFile(path, size=N)          # a header-only copy: path holds the first bytes (at least the
                                    #   header) of a file of N bytes; names/info work, raw() raises
    f.names()                       # tensor names in data order
    f.info(name)                    # {"dtype", "shape", "offset" (absolute), "nbytes"}
    f.raw(name)                     # numpy view (memmap) with the storage dtype and the logical shape:
                                    #   BF16 -> uint16, F8_E4M3 -> uint8, F32/F16/U8/I8 as is
    f.metadata                      # __metadata__ dict (str -> str) or {}
    to_f32(array, dtype)            # exact float32 conversion of a raw view (BF16, F16, F8_E4M3, F32)

Writing (atomic: PATH.tmp, fsync, rename, fsync of the directory):
    w = ShardWriter(path, entries, metadata)   # entries: [(name, dtype, shape), ...] in DATA ORDER
    w.write(name, array_or_bytes)               # bytes for `name`, in order; one tensor may come in
                                                # several consecutive pieces (row chunks)
    w.close()                                   # checks every byte arrived, then publishes PATH
    w.abort()                                   # removes the temp file
The header is padded with spaces to a multiple of 8 bytes; tensors are contiguous with no holes
(the official loader rejects holes), so a byte tensor of odd length may leave later tensors unaligned.

Errors are StError (a ValueError) with one line that names the file and, where it applies, the tensor.
"""
import json
import os

import numpy as np


class StError(ValueError):
    pass


# dtype name -> (bytes per element, numpy storage dtype)
DTYPES = {
    "F64": (8, np.dtype("<f8")),
    "F32": (4, np.dtype("<f4")),
    "F16": (2, np.dtype("<f2")),
    "BF16": (2, np.dtype("<u2")),
    "F8_E4M3": (1, np.dtype("u1")),
    "I64": (8, np.dtype("<i8")),
    "I32": (4, np.dtype("<i4")),
    "I16": (2, np.dtype("<i2")),
    "I8": (1, np.dtype("i1")),
    "U8": (1, np.dtype("u1")),
    "BOOL": (1, np.dtype("u1")),
}

FLOAT_DTYPES = ("F32", "F16", "BF16", "F8_E4M3")

MAX_HEADER = 512 * 1024 * 1024  # a GLM-5.2 shard header is a few hundred KB


def _e4m3fn_table():
    """float32 value of every e4m3fn code: sign, 4 exponent bits (bias 7), 3 mantissa bits;
    exponent 0 is subnormal (m * 2^-9); S.1111.111 is NaN; there is no infinity."""
    t = np.zeros(256, dtype=np.float32)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        e = (code >> 3) & 15
        m = code & 7
        if e == 15 and m == 7:
            v = float("nan")
        elif e == 0:
            v = sign * m * 2.0 ** -9
        else:
            v = sign * (1.0 + m / 8.0) * 2.0 ** (e - 7)
        t[code] = v  # every finite e4m3 value is exact in float32
    return t


E4M3_TO_F32 = _e4m3fn_table()


def to_f32(a, dtype):
    """Exact float32 values of a raw array of the given safetensors dtype."""
    if dtype == "F32":
        return np.ascontiguousarray(a, dtype=np.float32)
    if dtype == "BF16":
        return (np.asarray(a, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
    if dtype == "F16":
        return np.asarray(a).astype(np.float32)
    if dtype == "F8_E4M3":
        return E4M3_TO_F32[np.asarray(a)]
    raise StError(f"dtype {dtype} is not a float type")


class SafeFile:
    def __init__(self, path, size=None):
        self.path = path
        self.header_only = size is not None
        try:
            self.size = os.path.getsize(path) if size is None else size
            with open(path, "rb") as fh:
                head = fh.read(8)
                if len(head) < 8:
                    raise StError(f"{path}: file is {self.size} bytes, too short for a safetensors header")
                n = int.from_bytes(head, "little")
                if n > self.size - 8 or n > MAX_HEADER:
                    raise StError(f"{path}: header length {n} is larger than the file ({self.size} bytes)")
                text = fh.read(n)
                if len(text) != n:
                    raise StError(f"{path}: header-only copy is cut inside the header ({8 + len(text)} of "
                                  f"{8 + n} bytes)")
        except OSError as e:
            raise StError(f"{path}: cannot read: {e.strerror}")
        try:
            hdr = json.loads(text.decode("utf-8"))
        except UnicodeDecodeError:
            raise StError(f"{path}: header is not valid UTF-8")
        except json.JSONDecodeError as e:
            raise StError(f"{path}: header is not valid JSON: {e.msg} at byte {e.pos}")
        if not isinstance(hdr, dict):
            raise StError(f"{path}: header is not a JSON object")
        self.data_start = 8 + n
        data_len = self.size - self.data_start
        meta = hdr.pop("__metadata__", None)
        if meta is None:
            meta = {}
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise StError(f"{path}: __metadata__ is not a map of strings")
        self.metadata = meta
        self._info = {}
        spans = []
        for name, d in hdr.items():
            where = f"{path}: tensor {name}"
            if not isinstance(d, dict):
                raise StError(f"{where}: entry is not an object")
            dt, shape, offs = d.get("dtype"), d.get("shape"), d.get("data_offsets")
            if dt not in DTYPES:
                raise StError(f"{where}: unknown dtype {dt!r}")
            if (not isinstance(shape, list) or len(shape) > 8 or
                    not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in shape)):
                raise StError(f"{where}: bad shape {shape!r}")
            if (not isinstance(offs, list) or len(offs) != 2 or
                    not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in offs)):
                raise StError(f"{where}: bad data_offsets {offs!r}")
            b, e = offs
            if b > e:
                raise StError(f"{where}: data_offsets begin {b} > end {e}")
            if e > data_len:
                raise StError(f"{where}: data_offsets [{b}, {e}] outside the data region ({data_len} bytes)")
            count = 1
            for x in shape:
                count *= x
            if count * DTYPES[dt][0] != e - b:
                raise StError(f"{where}: {e - b} bytes but {dt} {shape} needs {count * DTYPES[dt][0]}")
            self._info[name] = {"dtype": dt, "shape": tuple(shape), "offset": self.data_start + b, "nbytes": e - b}
            spans.append((b, e, name))
        spans.sort()
        for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
            if b1 < e0:
                raise StError(f"{path}: tensors {n0} and {n1} overlap")
        self._order = [s[2] for s in spans]
        self._mm = None

    def names(self):
        return list(self._order)

    def __contains__(self, name):
        return name in self._info

    def info(self, name):
        return self._info[name]

    def _map(self):
        if self._mm is None:
            if self.size > self.data_start:
                self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")
            else:
                self._mm = np.zeros(0, dtype=np.uint8)
        return self._mm

    def raw(self, name):
        if self.header_only:
            raise StError(f"{self.path}: tensor {name}: header-only copy, the data is not here")
        inf = self._info[name]
        st = DTYPES[inf["dtype"]][1]
        buf = self._map()[inf["offset"]:inf["offset"] + inf["nbytes"]]
        return buf.view(st).reshape(inf["shape"])

    def close(self):
        self._mm = None


def _fsync_dir(d):
    fd = os.open(d or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path, data):
    """Write a small file atomically: temp file, fsync, rename, fsync of the directory."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path))


def header_bytes(entries, metadata=None):
    """Header for tensors laid out contiguously in the given order. Returns (bytes, [(name, nbytes)])."""
    hdr = {}
    if metadata:
        hdr["__metadata__"] = metadata
    off = 0
    sizes = []
    for name, dt, shape in entries:
        if name in hdr or name == "__metadata__":
            raise StError(f"tensor {name} listed twice")
        n = DTYPES[dt][0]
        for x in shape:
            n *= int(x)
        hdr[name] = {"dtype": dt, "shape": [int(x) for x in shape], "data_offsets": [off, off + n]}
        off += n
        sizes.append((name, n))
    text = json.dumps(hdr, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-len(text)) % 8)
    return len(text).to_bytes(8, "little") + text, sizes


class ShardWriter:
    def __init__(self, path, entries, metadata=None):
        self.path = path
        self.tmp = path + ".tmp"
        head, self.sizes = header_bytes(entries, metadata)
        self.total = len(head) + sum(n for _, n in self.sizes)
        self.fh = open(self.tmp, "wb")
        self.fh.write(head)
        self.index = 0      # tensor being written
        self.done = 0       # bytes of it written so far
        self.written_tensors = 0
        self._skip_empty()

    def _skip_empty(self):
        while self.index < len(self.sizes) and self.sizes[self.index][1] == 0:
            self.index += 1

    def write(self, name, data):
        if isinstance(data, np.ndarray):
            data = np.ascontiguousarray(data)
            nbytes = data.nbytes
        else:
            nbytes = len(data)
        if self.index >= len(self.sizes):
            raise StError(f"{self.path}: tensor {name}: written after the last tensor")
        want, size = self.sizes[self.index]
        if name != want:
            raise StError(f"{self.path}: tensor {name} written where {want} was due")
        if self.done + nbytes > size:
            raise StError(f"{self.path}: tensor {name}: {self.done + nbytes} bytes written, {size} declared")
        self.fh.write(memoryview(data).cast("B") if isinstance(data, np.ndarray) else data)
        self.done += nbytes
        if self.done == size:
            self.index += 1
            self.done = 0
            self.written_tensors += 1
            self._skip_empty()
            return True     # this tensor is complete
        return False

    def close(self):
        if self.index != len(self.sizes):
            raise StError(f"{self.path}: tensor {self.sizes[self.index][0]} was never written")
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()
        os.replace(self.tmp, self.path)
        _fsync_dir(os.path.dirname(self.path))

    def abort(self):
        try:
            self.fh.close()
        finally:
            if os.path.exists(self.tmp):
                os.remove(self.tmp)


def write_file(path, tensors, metadata=None):
    """Convenience for small files: tensors = [(name, dtype, array)] written in that order."""
    w = ShardWriter(path, [(n, dt, a.shape) for n, dt, a in tensors], metadata)
    try:
        for n, dt, a in tensors:
            a = np.ascontiguousarray(a, dtype=DTYPES[dt][1])
            if a.nbytes:
                w.write(n, a)
        w.close()
    except BaseException:
        w.abort()
        raise

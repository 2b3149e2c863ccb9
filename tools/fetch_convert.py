#!/usr/bin/python3
"""fetch_convert.py: download a Hugging Face model repository shard by shard and convert it into the
container glm.c reads, so the disk holds one shard (two when a tensor's scale or fused half sits in
the next one) plus the growing output, instead of the whole FP8 release and then the output.

    /usr/bin/python3 tools/fetch_convert.py ORG/NAME DST_DIR [--revision REV] [--base-url URL]
        [--download-dir DIR] [--retries N] [--retry-wait S] [--offline-after S] [--timeout S]
        [converter options]
    /usr/bin/python3 tools/fetch_convert.py ORG/NAME PLAN_DIR --plan [--glm PATH]

Converter options (tools/convert_fp8_to_int4.py, the same code does the work): --expert-bits,
--dense-bits, --io-bits, --mtp-bits, --indexer-bits, --group, --per-row, --margin-mb, --restart.

What it does:
 1. Pins the revision (default main) to the commit the hub names (X-Repo-Commit), so a branch that
    moves during a days-long download cannot mix two versions; lists the files with their sizes and
    hashes (GET BASE/api/models/REPO/tree/COMMIT?recursive=true: size; lfs.oid = SHA-256 for LFS
    files, oid = git blob id for the others).
 2. Downloads model.safetensors.index.json, config.json and, where the repository has them,
    generation_config.json, tokenizer.json, tokenizer_config.json, chat_template.jinja; then the
    first bytes of every shard up to the end of its header (two HTTP Range reads: the 8-byte header
    length, then the JSON header), which is all the converter needs to plan the job and to size its
    output exactly.
 3. Refuses to start unless DST has room for the remaining output plus the largest set of shards on
    disk at once, plus --margin-mb (the numbers are printed).
 4. Per output shard: downloads the shards it reads (BASE/REPO/resolve/COMMIT/FILE; redirects are
    followed, the token is sent only to BASE's host), checks size and hash, converts, deletes the
    shards nothing left needs, prints one line (rates, ETA).
 5. Copies the small files; removes its download folder.

Resume: rerun the same command. Finished output shards are skipped (the converter's state file
DST/.convert-state.json); a download continues from its partial file NAME.part with
"Range: bytes=N-" (a server that answers 200 instead of 206 sends the whole file: it starts over).
Network errors and HTTP 5xx/429 are retried with exponential backoff (--retries in a row without
progress; --retry-wait doubles up to 60 s). Until the hub has answered once, a host that cannot be
reached (DNS failure, connection refused, no route, no answer) is given --offline-after seconds in
all (a few quick tries) and then reported as the machine looking offline. A hash mismatch deletes
the partial data and downloads the file once more; a second mismatch is an error naming the file.
On an error, the folders this run created are removed again unless they hold something a rerun
continues from (downloaded shard data, finished output shards); folders that existed are kept.

Plan before the download (--plan): fetches config.json, the index, the tokenizer files and each
shard's header (a few MB for GLM-5.2) into PLAN_DIR, a header-only copy of the release (each
NAME.safetensors cut right after its header), then runs PLAN=1 SNAP=PLAN_DIR on glm (--glm, default
the repository's ./glm; glm's RAM_GB, CTX and BATCH come from the environment) and exits with its
status: the RAM plan, the disk the release takes and the projected speed. Without a built glm it
prints the command. PLAN_DIR must be new, empty or an earlier --plan's folder.

Token for gated repositories: HF_TOKEN, else the file $HF_TOKEN_PATH, else $HF_HOME/token (HF_HOME
defaults to $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface), as huggingface_hub does.
Base URL: --base-url, else HF_ENDPOINT, else https://huggingface.co.
"""
import argparse
import errno
import hashlib
import http.client
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convert_fp8_to_int4 import (INDEX_NAME, SHARD_RE, Conversion, ConvertError, Progress,  # noqa: E402
                                 add_conversion_args, check_conversion_args, check_shard_against_index,
                                 free_bytes, make_dirs, remove_made_dirs)
import convert_fp8_to_int4  # noqa: E402
from safetensors_io import MAX_HEADER, SafeFile, StError, atomic_write_bytes  # noqa: E402
from tool_help import HelpFormatter  # noqa: E402

INDEX = INDEX_NAME
SMALL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "chat_template.jinja")
REQUIRED = ("config.json",)
STATE = "fetch-state.json"
MAX_JSON = 64 * 1024 * 1024        # a tree page or index larger than this is refused
MAX_PAGES = 10000
CHUNK = 1 << 20
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9._-]+$")
GLM = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "glm")


class FetchError(Exception):
    pass


class Retryable(Exception):
    """A network error or a server error worth another try."""


class Unreachable(Retryable):
    """No connection to a host at all (DNS failure, refused, no route, no answer in time)."""

    def __init__(self, host, why):
        super().__init__(f"cannot reach {host}: {why}")
        self.host, self.why = host, why


UNREACHABLE_ERRNOS = (errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN,
                      errno.EHOSTDOWN, errno.EADDRNOTAVAIL)


def connect_failure(reason):
    """Whether a URLError's reason says no connection was made (versus one that broke)."""
    return (isinstance(reason, (socket.gaierror, socket.timeout, ConnectionRefusedError)) or
            (isinstance(reason, OSError) and reason.errno in UNREACHABLE_ERRNOS))


def human(n):
    for unit, f in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= f:
            return f"{n / f:.2f} {unit}"
    return f"{n} B"


def hms(s):
    s = int(max(0, s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def say(msg):
    clear = "\r\033[K" if sys.stderr.isatty() else ""      # over an in-place progress line
    print(f"{clear}fetch: {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------
# Small parsers (every value from the network is checked before use)

def parse_content_range(value, what):
    """'bytes A-B/T' -> (A, B, T); anything else is an error naming `what`."""
    m = re.fullmatch(r"bytes (\d{1,19})-(\d{1,19})/(\d{1,19})", (value or "").strip())
    if not m:
        raise FetchError(f"{what}: malformed Content-Range {value!r}")
    a, b, t = (int(x) for x in m.groups())
    if a > b or b >= t:
        raise FetchError(f"{what}: inconsistent Content-Range {value!r}")
    return a, b, t


def parse_link_next(value):
    """The rel="next" URL of a Link header (GitHub style, as the hub paginates), or None."""
    for part in (value or "").split(","):
        m = re.fullmatch(r'\s*<([^<>]*)>\s*;(.*)', part)
        if m and re.search(r'(^|;)\s*rel\s*=\s*"?next"?\s*(;|$)', m.group(2)):
            return m.group(1)
    return None


def parse_tree(data, what):
    """A tree page: a JSON list of entries. Returns {path: (size, kind, digest)} for files, kind
    'sha256' (LFS: lfs.oid) or 'git' (git blob id)."""
    try:
        entries = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FetchError(f"{what}: not a JSON file list ({e})")
    if not isinstance(entries, list):
        raise FetchError(f"{what}: not a JSON file list")
    files = {}
    for e in entries:
        if not isinstance(e, dict) or e.get("type") != "file":
            continue
        path, size = e.get("path"), e.get("size")
        lfs = e.get("lfs")
        if not isinstance(path, str) or not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise FetchError(f"{what}: bad entry {json.dumps(e)[:200]}")
        if isinstance(lfs, dict):
            digest, kind = lfs.get("oid"), "sha256"
            if lfs.get("size") != size:
                raise FetchError(f"{what}: {path}: size {size} but lfs.size {lfs.get('size')}")
        else:
            digest, kind = e.get("oid"), "git"
        want = 64 if kind == "sha256" else 40
        if not isinstance(digest, str) or not re.fullmatch(f"[0-9a-f]{{{want}}}", digest):
            raise FetchError(f"{what}: {path}: missing or malformed {kind} hash {digest!r}")
        files[path] = (size, kind, digest)
    return files


def parse_index(data, what):
    """model.safetensors.index.json -> {tensor name: shard file name} (the converter's parser)."""
    try:
        return convert_fp8_to_int4.parse_index(data, what)
    except ConvertError as e:
        raise FetchError(str(e))


def header_length(first8, size, what):
    """Length of a shard's safetensors header from its first 8 bytes, bounded by the file size."""
    n = int.from_bytes(first8, "little")
    if n > MAX_HEADER or 8 + n > size:
        raise FetchError(f"{what}: header length {n} does not fit the file ({size} bytes)")
    return n


# ----------------------------------------------------------------------------------------------
# HTTP

class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **kw):
        return None          # 3xx comes back as an HTTPError; Hub.open follows it itself


class Hub:
    """Requests to one hub (or mirror): the token goes to BASE's scheme://host:port only."""

    def __init__(self, base, repo, token, token_from, args):
        self.base = base.rstrip("/")
        self.origin = self._origin(self.base)
        self.repo = repo
        self.token, self.token_from = token, token_from
        self.timeout = args.timeout
        self.retries = args.retries
        self.retry_wait = args.retry_wait
        self.offline_after = args.offline_after
        self.online = False        # a server has answered in this run: connection failures are transient
        self.opener = urllib.request.build_opener(_NoRedirect)

    @staticmethod
    def _origin(url):
        u = urllib.parse.urlsplit(url)
        return (u.scheme, u.hostname, u.port or (443 if u.scheme == "https" else 80))

    def resolve_url(self, rev, fn):
        return f"{self.base}/{self.repo}/resolve/{urllib.parse.quote(rev, safe='')}/{urllib.parse.quote(fn)}"

    def open(self, url, what, headers=None):
        """GET url (following up to 10 redirects). Returns (response, headers of the first reply)."""
        first = None
        for _ in range(10):
            if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
                raise FetchError(f"{what}: refusing to follow a redirect to {url[:200]!r} (not http or https)")
            h = {"User-Agent": "glm.c-fetch/1", "Accept-Encoding": "identity"}
            h.update(headers or {})
            if self.token and self._origin(url) == self.origin:
                h["Authorization"] = f"Bearer {self.token}"
            # Until a server has answered, no answer within --offline-after is "unreachable" too.
            timeout = self.timeout if self.online else min(self.timeout, self.offline_after)
            try:
                resp = self.opener.open(urllib.request.Request(url, headers=h), timeout=timeout)
                self.online = True
                return resp, first if first is not None else resp.headers
            except urllib.error.HTTPError as e:
                self.online = True
                if e.code in (301, 302, 303, 307, 308) and e.headers.get("Location"):
                    if first is None:
                        first = e.headers
                    url = urllib.parse.urljoin(url, e.headers["Location"])
                    e.close()
                    continue
                raise self._http_error(e, what)
            except urllib.error.URLError as e:
                if connect_failure(e.reason):
                    u = urllib.parse.urlsplit(url)
                    why = getattr(e.reason, "strerror", None) or str(e.reason) or "no answer"
                    raise Unreachable(u.netloc, f"DNS lookup failed ({why})" if isinstance(e.reason, socket.gaierror)
                                      else why)
                raise Retryable(f"{e.reason}")
            except (socket.timeout, ConnectionError, http.client.HTTPException) as e:
                raise Retryable(f"{e or type(e).__name__}")
        raise FetchError(f"{what}: more than 10 redirects")

    def _http_error(self, e, what):
        code = e.code
        ecode = e.headers.get("X-Error-Code", "")
        try:
            detail = e.read(2000).decode("utf-8", "replace").strip()
        except OSError:
            detail = ""
        e.close()
        if code in (408, 429) or code >= 500:
            return Retryable(f"HTTP {code} {e.reason}")
        if code in (401, 403):
            if self.token:
                how = (f"the token from {self.token_from} has no access to {self.repo}: accept the model's terms "
                       f"on its page with that account, or set HF_TOKEN to a token that has access")
            else:
                how = (f"{self.repo} is gated or private (or does not exist): set HF_TOKEN to an access token "
                       f"(https://huggingface.co/settings/tokens) or log in so that {token_file()} holds one")
            return FetchError(f"{what}: HTTP {code} {e.reason}: {how}")
        if code == 404:
            why = {"RepoNotFound": f"repository {self.repo} not found at {self.base}",
                   "RevisionNotFound": "revision not found (check --revision)",
                   "EntryNotFound": "the repository has no such file at this revision"}.get(
                ecode, f"not found (check the repository name, --revision and --base-url {self.base})")
            return FetchError(f"{what}: HTTP 404: {why}")
        return FetchError(f"{what}: HTTP {code} {e.reason}" + (f": {detail[:300]}" if detail else ""))

    def retrying(self, what, fn):
        """Run fn() until it returns, retrying Retryable errors with exponential backoff; a try that
        moved data (fn sets self.progressed) resets the count and the wait. Before any server has
        answered, an unreachable host gets quick tries for --offline-after seconds in all."""
        fails = 0
        wait = self.retry_wait
        t0, quick, quick_wait = time.monotonic(), 0, 0.5
        while True:
            self.progressed = False
            try:
                return fn()
            except Retryable as e:
                if isinstance(e, Unreachable) and not self.online:
                    quick += 1
                    spent = time.monotonic() - t0
                    if spent + quick_wait > self.offline_after:
                        raise FetchError(f"{what}: {e}; gave up after {quick} tries in {spent:.1f} s "
                                         f"(--offline-after {self.offline_after:g}): this machine looks offline, "
                                         f"or {e.host} is down or blocked (check --base-url, HF_ENDPOINT and any "
                                         f"proxy setting); rerun when it can be reached")
                    say(f"{what}: {e}; try {quick + 1} in {quick_wait:.1f} s")
                    time.sleep(quick_wait)
                    quick_wait *= 2
                    continue
                fails = 1 if self.progressed else fails + 1
                if self.progressed:
                    wait = self.retry_wait
                if fails > self.retries:
                    raise FetchError(f"{what}: {e}; gave up after {fails} tries in a row "
                                     f"(rerun to continue where it stopped)")
                say(f"{what}: {e}; retry {fails}/{self.retries} in {wait:.1f} s")
                time.sleep(wait)
                wait = min(wait * 2, 60.0)

    def get_small(self, url, what, limit):
        """A whole small response body (a tree page, an index); returns (bytes, headers)."""
        def once():
            resp, first = self.open(url, what)
            with resp:
                try:
                    data = resp.read(limit + 1)
                except (socket.timeout, ConnectionError, http.client.HTTPException) as e:
                    raise Retryable(f"{e}")
            if len(data) > limit:
                raise FetchError(f"{what}: response larger than {limit} bytes")
            n = resp.headers.get("Content-Length")
            if n is not None and n.isdigit() and int(n) != len(data):
                raise Retryable(f"connection closed after {len(data)} of {n} bytes")
            return data, resp.headers, first
        return self.retrying(what, once)

    def get_range(self, url, what, a, b, size):
        """Bytes [a, b] of a file of `size` bytes (a 200 reply is cut to the range)."""
        def once():
            resp, _ = self.open(url, what, {"Range": f"bytes={a}-{b}"})
            with resp:
                skip = 0
                if resp.status == 206:
                    ra, rb, rt = parse_content_range(resp.headers.get("Content-Range"), what)
                    if ra != a or rt != size:
                        raise FetchError(f"{what}: asked for bytes {a}-{b} of {size}, got "
                                         f"{resp.headers.get('Content-Range')}")
                else:
                    skip = a
                try:
                    if skip:
                        resp.read(skip)
                    data = resp.read(b - a + 1)
                except (socket.timeout, ConnectionError, http.client.HTTPException) as e:
                    raise Retryable(f"{e}")
            if len(data) != b - a + 1:
                raise Retryable(f"short read: {len(data)} of {b - a + 1} bytes")
            return data
        return self.retrying(what, once)


def token_file():
    if os.environ.get("HF_TOKEN_PATH"):
        return os.environ["HF_TOKEN_PATH"]
    home = os.environ.get("HF_HOME")
    if not home:
        xdg = os.environ.get("XDG_CACHE_HOME")
        home = os.path.join(xdg, "huggingface") if xdg else os.path.expanduser("~/.cache/huggingface")
    return os.path.join(home, "token")


def find_token():
    """(token, where it came from) or (None, None)."""
    tok, where = os.environ.get("HF_TOKEN", "").strip(), "HF_TOKEN"
    if not tok:
        path = token_file()
        try:
            with open(path) as fh:
                tok, where = fh.read(4096).strip(), path
        except OSError:
            return None, None
    if not tok:
        return None, None
    if not re.fullmatch(r"[\x21-\x7e]{1,1000}", tok):
        raise FetchError(f"the token from {where} has characters a token cannot have")
    return tok, where


# ----------------------------------------------------------------------------------------------
# Downloading one file

class Digest:
    """SHA-256 of an LFS file, or the git blob id (sha1 of 'blob SIZE\\0' + data) of a small file."""

    def __init__(self, kind, size):
        self.kind = kind
        self.h = hashlib.sha256() if kind == "sha256" else hashlib.sha1(b"blob %d\0" % size)

    def update(self, b):
        self.h.update(b)

    def hexdigest(self):
        return self.h.hexdigest()


def hash_file(path, kind, size):
    d = Digest(kind, size)
    with open(path, "rb") as fh:
        while True:
            b = fh.read(8 * CHUNK)
            if not b:
                return d
            d.update(b)


class Fetcher:
    def __init__(self, hub, commit, files, ddir):
        self.hub, self.commit, self.files, self.dir = hub, commit, files, ddir

    def have(self, fn):
        """A complete, verified copy is in the download folder (renamed from .part after its check)."""
        p = os.path.join(self.dir, fn)
        return os.path.exists(p) and os.path.getsize(p) == self.files[fn][0]

    def download(self, fn, line=None):
        """Download fn into the download folder (resuming NAME.part), check size and hash, publish it.
        Returns (bytes transferred, bytes resumed from)."""
        size, kind, want = self.files[fn]
        dest = os.path.join(self.dir, fn)
        part = dest + ".part"
        url = self.hub.resolve_url(self.commit, fn)
        label = "SHA-256" if kind == "sha256" else "git blob id"
        moved = 0
        resumed_at = os.path.getsize(part) if os.path.exists(part) else 0
        for attempt in (1, 2):
            got, n = self._transfer(fn, url, part, size, kind, line)
            moved += n
            if got == want:
                with open(part, "rb") as fh:
                    os.fsync(fh.fileno())
                os.replace(part, dest)
                return moved, resumed_at
            os.remove(part)
            if attempt == 1:
                say(f"{fn}: {label} mismatch (expected {want}, got {got}); partial data deleted, "
                    f"downloading it once more")
        raise FetchError(f"{fn}: {label} mismatch again (expected {want}, got {got}); the data was deleted. "
                         f"The hub, a mirror or a proxy serves corrupt bytes for this file")

    def _transfer(self, fn, url, part, size, kind, line):
        """Bring `part` to `size` bytes; returns (hex digest, bytes transferred)."""
        if os.path.exists(part) and os.path.getsize(part) > size:
            say(f"{fn}: partial file is larger than the file ({os.path.getsize(part)} > {size}); starting over")
            os.remove(part)
        have = os.path.getsize(part) if os.path.exists(part) else 0
        digest = hash_file(part, kind, size) if have else Digest(kind, size)
        st = {"have": have, "digest": digest, "moved": 0}

        def once():
            have = st["have"]
            if have == size:
                return
            hdr = {"Range": f"bytes={have}-"} if have else {}
            resp, first = self.hub.open(url, fn, hdr)
            with resp:
                linked = first.get("X-Linked-Size")
                if linked is not None and linked.strip() != str(size):
                    raise FetchError(f"{fn}: the hub says X-Linked-Size {linked}, its file list {size}")
                if resp.status == 206:
                    a, _, t = parse_content_range(resp.headers.get("Content-Range"), fn)
                    if a != have or t != size:
                        raise FetchError(f"{fn}: asked for bytes {have}- of {size}, got "
                                         f"{resp.headers.get('Content-Range')}")
                elif resp.status == 200:
                    if have:
                        say(f"{fn}: the server ignored the range request (200, not 206): starting over")
                        have = st["have"] = 0
                        st["digest"] = Digest(kind, size)
                else:
                    raise FetchError(f"{fn}: unexpected HTTP {resp.status}")
                n = resp.headers.get("Content-Length")
                if n is not None and (not n.isdigit() or int(n) != size - have):
                    raise FetchError(f"{fn}: Content-Length {n}, expected {size - have}")
                with open(part, "r+b" if have else "wb") as out:
                    out.seek(have)
                    out.truncate()
                    while have < size:
                        try:
                            b = resp.read1(min(CHUNK, size - have))    # what has arrived, up to CHUNK
                        except (socket.timeout, ConnectionError, http.client.HTTPException) as e:
                            raise Retryable(f"{e or type(e).__name__} after {have} of {size} bytes")
                        if not b:
                            raise Retryable(f"connection closed after {have} of {size} bytes")
                        out.write(b)
                        st["digest"].update(b)
                        have += len(b)
                        st["have"] = have
                        st["moved"] += len(b)
                        self.hub.progressed = True
                        if line:
                            line(len(b), have, size)
        self.hub.retrying(fn, once)
        return st["digest"].hexdigest(), st["moved"]

    def header_bytes(self, fn):
        """Shard fn's first 8 + N bytes and nothing more: two Range reads, the header length N and
        then the JSON header."""
        size = self.files[fn][0]
        if size < 8:
            raise FetchError(f"{fn}: {size} bytes, too short for a safetensors file")
        url = self.hub.resolve_url(self.commit, fn)
        head = self.hub.get_range(url, fn, 0, 7, size)
        n = header_length(head, size, fn)
        return head + self.hub.get_range(url, fn, 8, 8 + n - 1, size) if n else head

    def header(self, fn, path=None, refetch=False):
        """A header-only copy of shard fn at path (default NAME.header in the download folder),
        fetched unless it is there already; returns it as a SafeFile."""
        path = path or os.path.join(self.dir, fn + ".header")
        if refetch or not os.path.exists(path):
            atomic_write_bytes(path, self.header_bytes(fn))
        try:
            return SafeFile(path, size=self.files[fn][0])
        except StError:
            os.remove(path)         # refetched by the next run; the error names the shard
            raise


# ----------------------------------------------------------------------------------------------

def parse_args(argv):
    ap = argparse.ArgumentParser(description="Download a Hugging Face GLM release shard by shard and convert it;\n"
                                 "with --plan, fetch only its headers and run glm's PLAN on them.",
                                 formatter_class=HelpFormatter)
    ap.add_argument("repo", metavar="ORG/NAME", help="the model repository on the hub, e.g. zai-org/GLM-5.2-FP8")
    ap.add_argument("dst", metavar="DST_DIR", help="the output folder (created if needed); with --plan, the "
                    "folder that receives the header-only copy")
    ap.add_argument("--revision", default="main", help="branch, tag or commit to fetch (pinned to one commit by "
                    "the first run)")
    ap.add_argument("--base-url", default=os.environ.get("HF_ENDPOINT") or "https://huggingface.co",
                    help="the hub or a mirror (default: %(default)s, which is $HF_ENDPOINT when set, else "
                    "https://huggingface.co)")
    ap.add_argument("--download-dir", metavar="DIR", help="where shards are downloaded, one or two at a time "
                    "(default: DST_DIR/.download)")
    ap.add_argument("--plan", action="store_true", help="fetch only config.json, the index, the tokenizer files and "
                    "each shard's header into DST_DIR, then run PLAN=1 SNAP=DST_DIR glm (RAM plan, disk, projected "
                    "speed) and exit with its status; nothing is converted")
    ap.add_argument("--glm", default=GLM, metavar="PATH", help="the glm binary --plan runs; when it is not built, "
                    "--plan prints the command instead")
    g = ap.add_argument_group("network")
    g.add_argument("--retries", type=int, default=8, metavar="N", help="tries in a row without progress after a "
                   "network error, HTTP 5xx or 429, before giving up (the wait doubles each time)")
    g.add_argument("--retry-wait", type=float, default=2.0, metavar="S", help="seconds before the first retry; "
                   "doubles up to 60")
    g.add_argument("--offline-after", type=float, default=10.0, metavar="S", help="until the hub has answered once, "
                   "seconds of failed connection attempts (DNS failure, refused, no route, no answer) after which "
                   "the machine is reported offline")
    g.add_argument("--timeout", type=float, default=60.0, metavar="S", help="seconds without data before a request "
                   "is abandoned (and retried)")
    add_conversion_args(ap)
    a = ap.parse_args(argv)
    check_conversion_args(ap, a)
    if not REPO_RE.match(a.repo) or ".." in a.repo:
        ap.error(f"repository {a.repo!r} is not ORG/NAME")
    if not re.match(r"^https?://[^/]+", a.base_url):
        ap.error(f"--base-url {a.base_url!r} is not an http(s) URL")
    if a.retries < 0 or a.retry_wait < 0 or a.timeout <= 0 or a.offline_after <= 0:
        ap.error("--retries and --retry-wait must be >= 0, --timeout and --offline-after > 0")
    return a


def pin_commit(hub, args, ddir):
    """The commit to fetch: the one an earlier run pinned, else the one the hub names for --revision
    (X-Repo-Commit of the resolve reply for config.json; a mirror without it: --revision as is)."""
    sp = os.path.join(ddir, STATE)
    if os.path.exists(sp) and not args.restart:
        try:
            with open(sp) as fh:
                st = json.load(fh)
            repo, rev, commit = st["repo"], st["revision"], st["commit"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise FetchError(f"{sp}: unreadable ({e}); use --restart")
        if repo != args.repo or rev != args.revision:
            raise FetchError(f"{sp}: an earlier run fetched {repo} at {rev}; use the same repository and "
                             f"--revision, another DST_DIR, or --restart")
        return commit, True

    pinned = hub_commit(hub, args.revision)
    atomic_write_bytes(sp, (json.dumps({"repo": args.repo, "revision": args.revision, "commit": pinned}) + "\n").encode())
    return pinned, False


def hub_commit(hub, revision):
    """The commit the hub names for a revision (X-Repo-Commit of the resolve reply for config.json;
    a mirror without it: the revision as is)."""
    def once():
        resp, first = hub.open(hub.resolve_url(revision, "config.json"), "config.json")
        resp.close()
        return first.get("X-Repo-Commit") or resp.headers.get("X-Repo-Commit")
    commit = hub.retrying("config.json", once)
    if commit is not None and not re.fullmatch(r"[0-9a-f]{40}", commit.strip()):
        raise FetchError(f"config.json: malformed X-Repo-Commit {commit!r}")
    return commit.strip() if commit else revision


def list_files(hub, commit):
    url = f"{hub.base}/api/models/{hub.repo}/tree/{urllib.parse.quote(commit, safe='')}?recursive=true"
    files = {}
    for _ in range(MAX_PAGES):
        data, headers, _ = hub.get_small(url, "file list", MAX_JSON)
        files.update(parse_tree(data, f"file list of {hub.repo} at {commit}"))
        nxt = parse_link_next(headers.get("Link"))
        if not nxt:
            return files
        url = urllib.parse.urljoin(url, nxt)
    raise FetchError(f"file list of {hub.repo}: more than {MAX_PAGES} pages")


def peak_source_bytes(conv, sizes):
    """Largest total of source shards on disk at once, running conv.todo in order: a shard is
    downloaded when an output shard reads it and deleted after the last one that does."""
    last = {}
    for i in conv.todo:
        for f in conv.needs(i):
            last[f] = i
    present = {f for f in conv.src.files if conv.src.has_data(f)}
    peak = 0
    for i in conv.todo:
        present |= set(conv.needs(i))
        peak = max(peak, sum(sizes[f] for f in present))
        present = {f for f in present if last.get(f, -1) > i}
    return peak


def clear_download_dir(ddir):
    """Remove what this tool writes into its download folder, then the folder if that empties it."""
    ours = set(SMALL_FILES) | {INDEX, STATE}
    for n in os.listdir(ddir):
        base = n[:-4] if n.endswith(".tmp") else n
        if base in ours or re.search(r"\.safetensors(\.part|\.header)?$", base):
            os.remove(os.path.join(ddir, n))
    try:
        os.rmdir(ddir)
    except OSError:
        say(f"{ddir}: left in place (it holds other files)")


def fetch_metadata(fetcher, args):
    """The small files (checked again each run: a few MB at most) and the shard list: the index's
    shards, or without an index every *.safetensors the repository lists. Returns (shards, weight_map)."""
    files, ddir = fetcher.files, fetcher.dir

    def small(fn):
        size, kind, want = files[fn]
        if not (fetcher.have(fn) and hash_file(os.path.join(ddir, fn), kind, size).hexdigest() == want):
            fetcher.download(fn)

    for f in REQUIRED:
        if f not in files:
            raise FetchError(f"{args.repo} at {fetcher.commit}: no {f}")
    for f in SMALL_FILES:
        if f in files:
            small(f)
    if INDEX not in files:
        shards = sorted(f for f in files if SHARD_RE.match(f))
        if not shards:
            raise FetchError(f"{args.repo} at {fetcher.commit}: no {INDEX} and no *.safetensors files")
        say(f"no {INDEX}: using the {len(shards)} *.safetensors file(s) the repository lists")
        return shards, None
    small(INDEX)
    with open(os.path.join(ddir, INDEX), "rb") as fh:
        weight_map = parse_index(fh.read(MAX_JSON + 1), INDEX)
    shards = sorted(set(weight_map.values()))
    for sn in shards:
        if sn not in files:
            raise FetchError(f"{INDEX}: names {sn}, which the repository does not list")
    return shards, weight_map


def check_room(conv, sizes, ddir, dst):
    """Refuse to start unless the remaining output, the most shards on disk at once and the margin
    fit (less the shard bytes already downloaded); print the numbers either way."""
    here = sum(os.path.getsize(os.path.join(ddir, n)) for n in os.listdir(ddir)
               if n.endswith(".safetensors") or n.endswith(".safetensors.part"))
    peak = peak_source_bytes(conv, sizes)
    shards_more = max(0, peak - here)
    same_fs = os.stat(ddir).st_dev == os.stat(dst).st_dev
    need = conv.out_total + (shards_more if same_fs else 0) + conv.margin
    free = free_bytes(dst)
    to_get = sum(sizes[f] for f in set().union(*(conv.needs(i) for i in conv.todo)) if not conv.src.has_data(f))
    parts = (f"output {human(conv.out_total)} + shards {human(shards_more if same_fs else 0)} + margin "
             f"{human(conv.margin)}")
    say(f"{len(sizes)} shards, {human(sum(sizes.values()))}; to do: {len(conv.todo)} shards, {human(to_get)} to "
        f"download; most shards on disk at once {human(peak)}")
    say(f"need {human(need)} on {dst} ({parts}), free {human(free)}")
    if free < need:
        raise FetchError(f"refusing to start: {human(free)} free on {dst}, need {human(need)} ({parts})")
    if not same_fs and free_bytes(ddir) < shards_more:
        raise FetchError(f"refusing to start: {human(free_bytes(ddir))} free on {ddir}, need "
                         f"{human(shards_more)} for the shards on disk at once")


def download_for(conv, fetcher, shards, sizes, i, tag):
    """Download every shard output shard i reads that is not here yet; returns the log words."""
    ddir, tty = fetcher.dir, sys.stderr.isatty()
    moved, secs, notes = 0, 0.0, []
    for f in conv.needs(i):
        if conv.src.has_data(f):
            continue
        fn = shards[f]
        part = os.path.join(ddir, fn + ".part")
        need = sizes[f] - (os.path.getsize(part) if os.path.exists(part) else 0) + conv.est[i] + conv.margin / 4
        if free_bytes(ddir) < need:
            raise FetchError(f"{fn}: only {human(free_bytes(ddir))} free on {ddir}, need {human(need)} to "
                             f"download it and write {shards[i]}; free some space and rerun")
        t1 = time.time()
        seen = {"bytes": 0, "shown": 0.0}

        def line(n, have, size):           # the in-place line on a terminal
            seen["bytes"] += n
            now = time.time()
            if tty and now - seen["shown"] >= 0.5:
                seen["shown"] = now
                rate = seen["bytes"] / max(now - t1, 1e-6)
                print(f"\r{tag} download{' ' + fn if f != i else ''} {human(have)}/{human(size)} "
                      f"{rate / 1e6:.1f} MB/s ETA {hms((size - have) / max(rate, 1))}   ",
                      end="", file=sys.stderr, flush=True)
        n, resumed_at = fetcher.download(fn, line)
        if tty:
            print("\r\033[K", end="", file=sys.stderr)
        conv.src.attach(f)
        moved += n
        secs += time.time() - t1
        notes.append((f"{fn} " if f != i else "") + human(sizes[f]) +
                     (f" (resumed at {human(resumed_at)})" if resumed_at else ""))
    if not notes:
        return "nothing to download"
    return f"downloaded {' + '.join(notes)} in {secs:.1f} s ({moved / max(secs, 1e-6) / 1e6:.1f} MB/s)"


def download_dir(args):
    return args.download_dir or os.path.join(args.dst, ".download")


def has_shard_data(d):
    """d holds downloaded shard bytes (whole or partial) that a rerun continues from."""
    return any((n.endswith(".safetensors") or n.endswith(".safetensors.part")) and
               os.path.getsize(os.path.join(d, n)) > 0 for n in os.listdir(d))


def cleanup(args, made):
    """After an error: remove what this run created, except what a rerun continues from (shard data
    in the download folder, finished output shards in DST_DIR); folders that existed stay."""
    folder = args.dst if args.plan else download_dir(args)
    if os.path.abspath(folder) in made and os.path.isdir(folder) and (args.plan or not has_shard_data(folder)):
        clear_download_dir(folder)
    remove_made_dirs(made)


def run(args, made):
    t_start = time.time()
    dst = args.dst
    ddir = download_dir(args)
    if args.restart and os.path.isdir(ddir):
        clear_download_dir(ddir)         # files of another commit may be there
    made += make_dirs(dst)
    made += make_dirs(ddir)
    token, token_from = find_token()
    hub = Hub(args.base_url, args.repo, token, token_from, args)
    say(f"{args.repo} from {hub.base}" + (f", token from {token_from}" if token else ", no token"))
    commit, resumed = pin_commit(hub, args, ddir)
    say(f"{'resuming' if resumed else 'revision ' + args.revision + ':'} commit {commit}")
    fetcher = Fetcher(hub, commit, list_files(hub, commit), ddir)
    shards, _ = fetch_metadata(fetcher, args)

    # the converter asks for the headers of the shards it still has to convert, and checks them
    # against the index (downloaded into ddir)
    conv = Conversion(ddir, dst, args, shards, fetcher.header)
    sizes = {i: fetcher.files[sn][0] for i, sn in enumerate(shards)}

    def release(f):      # nothing unfinished reads shard f: delete its data and header copy
        p = conv.drop_source(f)
        for q in (p, os.path.join(ddir, shards[f] + ".header")):
            if q and os.path.exists(q):
                os.remove(q)
    for f in conv.done_with():           # shards an earlier run downloaded and finished with
        release(f)
    check_room(conv, sizes, ddir, dst)

    total = sum(sizes[i] for i in conv.todo)
    done = 0
    t0 = time.time()
    for k, i in enumerate(conv.todo):
        tag = f"[{k + 1}/{len(conv.todo)}] {shards[i]}"
        dl = download_for(conv, fetcher, shards, sizes, i, tag)
        t1 = time.time()
        conv.convert_shard(i, Progress(conv.in_bytes[i], tty_only=True), f"{tag} convert")
        t_cv = time.time() - t1
        for f in conv.done_with(i):
            release(f)
        done += sizes[i]
        eta = (total - done) * (time.time() - t0) / max(done, 1)
        say(f"{tag}: {dl}, converted in {t_cv:.1f} s; {100 * done / max(total, 1):.1f}% done, ETA {hms(eta)}")

    copied, absent = conv.copy_extras()
    say(f"copied {', '.join(copied)}" + (f"; absent from the repository: {', '.join(absent)}" if absent else ""))
    clear_download_dir(ddir)
    say(f"done: {args.repo} at {commit} -> {dst} in {hms(time.time() - t_start)}")


def is_header_only(path):
    """path is a file that ends right after its safetensors header."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
        return len(head) == 8 and os.path.getsize(path) == 8 + int.from_bytes(head, "little")
    except OSError:
        return False


def check_plan_dir(pdir):
    """--plan writes into a new or empty folder, or one an earlier --plan wrote (its files only)."""
    if not os.path.lexists(pdir):
        return
    if not os.path.isdir(pdir):
        raise FetchError(f"{pdir}: not a folder")
    for n in sorted(os.listdir(pdir)):
        p = os.path.join(pdir, n)
        base = n[:-4] if n.endswith(".tmp") else n
        if os.path.isfile(p) and (base in SMALL_FILES or base == INDEX or
                                  (SHARD_RE.match(base) and (base != n or is_header_only(p)))):
            continue
        what = "a shard with its data" if SHARD_RE.match(n) and os.path.isfile(p) else "a file --plan does not write"
        raise FetchError(f"{p}: {what}; --plan writes its header-only copy into a new or empty folder, or one an "
                         f"earlier --plan wrote")


def plan(args, made):
    """--plan: a header-only copy of the release in DST_DIR, then glm's PLAN on it."""
    pdir = args.dst
    check_plan_dir(pdir)
    made += make_dirs(pdir)
    token, token_from = find_token()
    hub = Hub(args.base_url, args.repo, token, token_from, args)
    say(f"{args.repo} from {hub.base}" + (f", token from {token_from}" if token else ", no token"))
    commit = hub_commit(hub, args.revision)
    say(f"revision {args.revision}: commit {commit}")
    fetcher = Fetcher(hub, commit, list_files(hub, commit), pdir)
    shards, weight_map = fetch_metadata(fetcher, args)
    for n in os.listdir(pdir):           # header copies of another release or revision
        if SHARD_RE.match(n) and n not in shards:
            os.remove(os.path.join(pdir, n))
    head_bytes = 0
    for sn in shards:
        hf = fetcher.header(sn, os.path.join(pdir, sn), refetch=True)
        if weight_map is not None:
            check_shard_against_index(weight_map, sn, hf.names())
        head_bytes += hf.data_start
    say(f"{len(shards)} shard headers ({human(head_bytes)} of a {human(sum(fetcher.files[f][0] for f in shards))} "
        f"release) in {pdir}")
    cmd = f"PLAN=1 SNAP={shlex.quote(pdir)} {shlex.quote(args.glm)}"
    if not (os.path.isfile(args.glm) and os.access(args.glm, os.X_OK)):
        say(f"{args.glm} is not built (make glm); the plan is then: {cmd}")
        return 0
    say(f"running {cmd}")
    sys.stderr.flush()
    return subprocess.run([args.glm], env=dict(os.environ, PLAN="1", SNAP=pdir)).returncode


def main(argv):
    args = parse_args(argv)
    made = []
    try:
        rc = plan(args, made) if args.plan else run(args, made)
    except BaseException as e:
        cleanup(args, made)
        if isinstance(e, (FetchError, ConvertError, StError, OSError)):
            print(f"fetch: error: {e}", file=sys.stderr)
            sys.exit(1)
        if isinstance(e, KeyboardInterrupt):
            print("fetch: interrupted; rerun the same command to continue (finished shards are kept, a partial "
                  "download continues)", file=sys.stderr)
            sys.exit(130)
        raise
    sys.exit(rc or 0)


if __name__ == "__main__":
    main(sys.argv[1:])

#!/usr/bin/python3
"""hub_server.py: a small stand-in for the Hugging Face hub on loopback, for tests/t_fetch.sh.

    /usr/bin/python3 tests/hub_server.py DIR --repo ORG/NAME --port-file F --log F [options]

Serves the top-level files of DIR as repository ORG/NAME at revision "main" (or its commit id):
    GET /api/models/ORG/NAME/tree/REV?recursive=true   JSON list: {type, path, size, oid} per file,
        plus lfs {oid: sha256, size, pointerSize} for *.safetensors; --page-size N paginates with a
        Link: <...&cursor=K>; rel="next" header
    GET|HEAD /ORG/NAME/resolve/REV/PATH   the file; Range: bytes=A- or A-B gives 206 + Content-Range
        (416 past the end); headers X-Repo-Commit, ETag; for LFS files X-Linked-Etag, X-Linked-Size
Errors as the hub words them: 404 with X-Error-Code RepoNotFound / RevisionNotFound / EntryNotFound;
401 (no token) or 403 (another token) with X-Error-Code GatedRepo when --token is set.

Options (faults apply to data downloads only: GETs without a Range or with an open one, bytes=N-):
    --token T          require "Authorization: Bearer T" on this server
    --redirect         LFS files: 302 to a second "CDN" server on another port, which serves the bytes
                       and refuses (400) any request carrying an Authorization header
    --cut NAME:B       the first download of NAME sends B bytes of its body, then drops the connection
    --stall NAME:B     the first download of NAME sends B bytes, then holds the connection silent
    --corrupt NAME[:K] flip one byte (offset size/2) in the first K downloads of NAME (default: all)
    --no-range         ignore Range headers (always 200 with the whole file)
    --busy NAME[:K]    answer 503 to the first K requests for NAME (default: all of them)
    --page-size N      tree entries per page
The port file gets "BASE_URL" once listening. The log gets one JSON line per request: server
(main/cdn), method, path, file, range, status, sent (body bytes), auth (header present).
"""
import argparse
import hashlib
import json
import os
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from tool_help import HelpFormatter  # noqa: E402


class Repo:
    def __init__(self, args):
        self.name = args.repo
        self.dir = args.dir
        self.files = {}
        for fn in sorted(os.listdir(args.dir)):
            p = os.path.join(args.dir, fn)
            if not os.path.isfile(p):
                continue
            data = open(p, "rb").read()
            entry = {"type": "file", "path": fn, "size": len(data),
                     "oid": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()}
            if fn.endswith(".safetensors"):
                entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            self.files[fn] = (entry, data)
        h = hashlib.sha1()
        for fn, (e, _) in self.files.items():
            h.update(f"{fn} {e['oid']}\n".encode())
        self.commit = h.hexdigest()


class State:
    """Fault counters and the request log, shared by both servers."""

    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.log = open(args.log, "a")
        self.cut = dict(self._pairs(args.cut, int))
        self.stall = dict(self._pairs(args.stall, int))
        self.corrupt = self._counts(args.corrupt)
        self.busy = self._counts(args.busy)

    @staticmethod
    def _counts(specs):
        """NAME[:K] -> {NAME: K}, -1 for every time."""
        table = {}
        for spec in specs:
            name, _, k = spec.partition(":")
            table[name] = int(k) if k else -1
        return table

    @staticmethod
    def _pairs(specs, conv):
        for spec in specs:
            name, _, v = spec.rpartition(":")
            yield name, conv(v)

    def take(self, table, name):
        """Consume one use of a one-shot fault; returns its value or None."""
        with self.lock:
            return table.pop(name, None)

    def take_count(self, table, name):
        """Consume one use of a counted fault; whether it applies to this request."""
        with self.lock:
            k = table.get(name, 0)
            if k == 0:
                return False
            if k > 0:
                table[name] = k - 1
            return True

    def record(self, **kw):
        with self.lock:
            self.log.write(json.dumps(kw) + "\n")
            self.log.flush()


def make_handler(repo, state, role, cdn_base):
    args = state.args

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def reply(self, status, body=b"", headers=(), file=None, rng=None):
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            self.note(status, len(body) if self.command != "HEAD" else 0, file, rng)

        def note(self, status, sent, file=None, rng=None):
            state.record(server=role, method=self.command, path=self.path, file=file, range=rng,
                         status=status, sent=sent, auth="Authorization" in self.headers)

        def error(self, status, code, msg, file=None):
            self.reply(status, json.dumps({"error": msg}).encode(),
                       [("Content-Type", "application/json"), ("X-Error-Code", code)], file)

        def authorized(self):
            if not args.token:
                return True
            got = self.headers.get("Authorization")
            if got is None:
                self.error(401, "GatedRepo", f"Access to model {repo.name} is restricted. You must be authenticated.")
                return False
            if got != f"Bearer {args.token}":
                self.error(403, "GatedRepo", f"Access to model {repo.name} is restricted and you are not in "
                                             f"the authorized list.")
                return False
            return True

        def do_HEAD(self):
            self.do_GET()

        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            path = urllib.parse.unquote(url.path)
            query = urllib.parse.parse_qs(url.query)
            if role == "cdn":
                return self.cdn(path)
            if not self.authorized():
                return
            api = f"/api/models/{repo.name}/tree/"
            res = f"/{repo.name}/resolve/"
            if path.startswith(api):
                return self.tree(path[len(api):], query)
            if path.startswith(res):
                rev, _, fn = path[len(res):].partition("/")
                if rev not in ("main", repo.commit):
                    return self.error(404, "RevisionNotFound", f"Invalid rev id: {rev}", fn)
                return self.resolve(fn)
            if path.startswith("/api/models/") or path.count("/") >= 3:
                return self.error(404, "RepoNotFound", "Repository not found")
            self.error(404, "EntryNotFound", "not found")

        def tree(self, rest, query):
            rev = rest.split("/")[0]
            if rev not in ("main", repo.commit):
                return self.error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            entries = [e for e, _ in repo.files.values()]
            start = int(query.get("cursor", ["0"])[0])
            n = args.page_size or len(entries)
            page = entries[start:start + n]
            headers = [("Content-Type", "application/json")]
            if start + n < len(entries):
                nxt = f"{self.base()}/api/models/{repo.name}/tree/{rev}?recursive=true&cursor={start + n}"
                headers.append(("Link", f'<{nxt}>; rel="next"'))
            self.reply(200, json.dumps(page).encode(), headers)

        def base(self):
            return f"http://{self.server.server_address[0]}:{self.server.server_address[1]}"

        def resolve(self, fn):
            if fn not in repo.files:
                return self.error(404, "EntryNotFound", f"{fn} does not exist on main", fn)
            if state.take_count(state.busy, fn):
                return self.error(503, "ServiceUnavailable", "try again later", fn)
            entry, data = repo.files[fn]
            headers = [("X-Repo-Commit", repo.commit)]
            if "lfs" in entry:
                headers += [("X-Linked-Etag", f'"{entry["lfs"]["oid"]}"'), ("X-Linked-Size", str(entry["size"]))]
                if args.redirect:
                    loc = f"{cdn_base}/cdn/{entry['lfs']['oid']}?name={urllib.parse.quote(fn)}"
                    return self.reply(302, b"", headers + [("Location", loc), ("ETag", f'"{entry["lfs"]["oid"]}"')], fn)
                headers.append(("ETag", f'"{entry["lfs"]["oid"]}"'))
            else:
                headers.append(("ETag", f'"{entry["oid"]}"'))
            self.send_file(fn, data, headers)

        def cdn(self, path):
            if "Authorization" in self.headers:
                return self.error(400, "TokenLeak", "the hub's token was sent to the CDN")
            sha = path.rpartition("/")[2]
            for fn, (e, data) in repo.files.items():
                if e.get("lfs", {}).get("oid") == sha:
                    return self.send_file(fn, data, [])
            self.error(404, "EntryNotFound", "no such object")

        def send_file(self, fn, data, headers):
            size = len(data)
            rng = self.headers.get("Range")
            a, b, status = 0, size - 1, 200
            if rng and not args.no_range:
                spec = rng.strip()
                if not spec.startswith("bytes=") or "," in spec:
                    return self.error(400, "BadRange", f"unsupported range {rng}", fn)
                lo, _, hi = spec[6:].partition("-")
                a = int(lo)
                b = min(int(hi), size - 1) if hi else size - 1
                if a >= size or a > b:
                    return self.reply(416, b"", headers + [("Content-Range", f"bytes */{size}")], fn, rng)
                status = 206
                headers = headers + [("Content-Range", f"bytes {a}-{b}/{size}")]
            body = bytearray(data[a:b + 1])
            # a data download: no Range, or one open to the end (header reads ask for a bounded range)
            download = self.command == "GET" and (not rng or rng.strip().endswith("-"))
            if download and self.server_faults_corrupt(fn) and a <= size // 2 <= b:
                body[size // 2 - a] ^= 0x5A
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            if self.command == "HEAD":
                return self.note(status, 0, fn, rng)
            cut = state.take(state.cut, fn) if download else None
            stall = state.take(state.stall, fn) if download else None
            limit = cut if cut is not None else stall
            sent = len(body) if limit is None else min(limit, len(body))
            try:
                self.wfile.write(body[:sent])
                self.wfile.flush()
            except OSError:
                pass
            self.note(status, sent, fn, rng)
            if stall is not None:
                time.sleep(120)          # silent until the client gives up or is killed
            if limit is not None:
                self.close_connection = True

        def server_faults_corrupt(self, fn):
            return state.take_count(state.corrupt, fn)

    return Handler


def main():
    ap = argparse.ArgumentParser(description="Hugging Face hub stand-in for tests (see the top of this file)",
                                 formatter_class=HelpFormatter)
    ap.add_argument("dir", help="its top-level files are the repository's files")
    ap.add_argument("--repo", required=True, help="ORG/NAME the files are served as")
    ap.add_argument("--port-file", required=True, help="receives BASE_URL once listening")
    ap.add_argument("--log", required=True, help="one JSON line per request is appended here")
    ap.add_argument("--token", help="require this bearer token: 401 without one, 403 for another (default: none needed)")
    ap.add_argument("--redirect", action="store_true", help="LFS files: 302 to a second 'CDN' server")
    ap.add_argument("--cut", action="append", default=[], metavar="NAME:B",
                    help="the first download of NAME drops the connection after B bytes (repeatable; default: none)")
    ap.add_argument("--stall", action="append", default=[], metavar="NAME:B",
                    help="the first download of NAME goes silent after B bytes (repeatable; default: none)")
    ap.add_argument("--corrupt", action="append", default=[], metavar="NAME[:K]",
                    help="flip a byte in the first K downloads of NAME, every one without K (repeatable; default: none)")
    ap.add_argument("--no-range", action="store_true", help="ignore Range headers (always 200, whole file)")
    ap.add_argument("--busy", action="append", default=[], metavar="NAME[:K]",
                    help="answer 503 to the first K requests for NAME, every one without K (repeatable; default: none)")
    ap.add_argument("--page-size", type=int, default=0, metavar="N", help="tree entries per page, 0: one page")
    args = ap.parse_args()
    repo = Repo(args)
    state = State(args)
    cdn_base = None
    servers = []
    if args.redirect:
        cdn = ThreadingHTTPServer(("127.0.0.1", 0), None)
        cdn_base = f"http://127.0.0.1:{cdn.server_address[1]}"
        cdn.RequestHandlerClass = make_handler(repo, state, "cdn", None)
        servers.append(cdn)
    main_srv = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(repo, state, "main", cdn_base))
    servers.append(main_srv)
    for s in servers:
        s.daemon_threads = True
        threading.Thread(target=s.serve_forever, daemon=True).start()
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(f"http://127.0.0.1:{main_srv.server_address[1]}\n")
    os.replace(tmp, args.port_file)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())

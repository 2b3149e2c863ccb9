#!/usr/bin/env python3
"""Raw-socket and load checks of an OpenAI-shaped server (tests/t_http.sh runs them against
tests/bin/http_echo). Python standard library only. Each check prints PASS/FAIL lines.

usage: http_hostile.py PORT CHECK [ARGS...]
  basic            HTTP/1.0, HEAD, bare LF, bad Content-Length forms, huge/too many headers, 413
  pipeline         four requests in one write (worker and I/O-thread answers mixed) come back in order
  expect           Expect: 100-continue gets "100 Continue", then the answer
  slow TIMEOUT_MS  a partial request gets 408 after about TIMEOUT_MS; an idle connection is closed
  disconnect LOG   a streaming client that leaves stops the generation (the server LOG says so)
  queue_leave LOG  (QUEUE=1) a waiting client that leaves frees its queue slot
  load N           N concurrent chats, JSON and SSE mixed: every answer 200 and its own
  queue1 N         (QUEUE=1) N concurrent slow chats: only 200 or 429, at least one of each
  auth KEY         401 without / with a wrong key; 200 with Bearer or x-api-key; /health open
  early401 KEY     (API_KEY=KEY) a keyless head announcing a big body gets 401 before the body
  maxconns N       (MAX_CONNS=N) N connections busy with a request: one more gets 503; idle ones
                   give way to a new connection, keep-alive idle ones first
  peraddr N        (MAX_CONNS_PER_ADDR=N, MAX_CONNS > N) the cap counts one address only
  flood N          N idle and N slow-head connections (evicted ones reopened): /health and a
                   chat still answer within 1 s
  budget LOG       (MAX_BODY=400000 MAX_BUFFERED=600000) a body the buffer budget cannot hold gets
                   503 from its head; it fits again once the other request is done
  stall            streams a long answer without reading it; prints "stalled" and waits
  headtime H T     (HEAD_TIMEOUT_MS=H, TIMEOUT_MS=T, H < T) a head gets H ms, the whole request T
"""
import json
import socket
import sys
import threading
import time

PORT = int(sys.argv[1])
failures = 0


def check(name, ok, why=""):
    global failures
    if ok:
        print(f"PASS {name}")
    else:
        failures += 1
        print(f"FAIL {name}: {why}")
    sys.stdout.flush()


def connect(timeout=10, source="127.0.0.1"):
    s = socket.create_connection(("127.0.0.1", PORT), timeout=timeout, source_address=(source, 0))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


class Reader:
    """Reads HTTP/1.1 responses (Content-Length, chunked, or to EOF) from a socket."""

    def __init__(self, sock):
        self.s, self.buf = sock, b""

    def _fill(self):
        d = self.s.recv(65536)
        if not d:
            raise EOFError
        self.buf += d

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        ln, self.buf = self.buf.split(b"\r\n", 1)
        return ln

    def exact(self, n):
        while len(self.buf) < n:
            self._fill()
        d, self.buf = self.buf[:n], self.buf[n:]
        return d

    def response(self, head_only=False):
        status_line = self.line().decode()
        status = int(status_line.split()[1])
        headers = {}
        while True:
            ln = self.line()
            if not ln:
                break
            k, v = ln.decode().split(":", 1)
            headers[k.strip().lower()] = v.strip()
        if status == 100 or head_only:
            return status, headers, b""
        if "content-length" in headers:
            return status, headers, self.exact(int(headers["content-length"]))
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size = int(self.line().split(b";")[0], 16)
                if size == 0:
                    while self.line():
                        pass
                    return status, headers, body
                body += self.exact(size)
                assert self.exact(2) == b"\r\n"
        body = self.buf
        try:
            while True:
                self._fill()
        except EOFError:
            pass
        body, self.buf = self.buf, b""
        return status, headers, body

    def closed(self, wait=3.0):
        """True if the server closes the connection (EOF) within wait seconds, sending nothing more."""
        self.s.settimeout(wait)
        try:
            return not self.buf and self.s.recv(1) == b""
        except (socket.timeout, ConnectionResetError):
            return False


def request(method, path, body=None, headers=None, version="1.1"):
    h = {"Host": "127.0.0.1"}
    if body is not None:
        h["Content-Length"] = str(len(body))
        h["Content-Type"] = "application/json"
    h.update(headers or {})
    head = f"{method} {path} HTTP/{version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    return head.encode() + (body or b"")


def chat_body(content, stream=False, **extra):
    d = {"model": "echo-model", "messages": [{"role": "user", "content": content}], "stream": stream}
    d.update(extra)
    return json.dumps(d).encode()


def sse_content(body):
    """Concatenated delta contents of an SSE body, and whether it ended with [DONE]."""
    out, done = "", False
    for event in body.decode().split("\n\n"):
        if not event.startswith("data: "):
            continue
        data = event[6:]
        if data == "[DONE]":
            done = True
            continue
        for c in json.loads(data)["choices"]:
            out += c.get("delta", {}).get("content") or ""
    return out, done


def one(raw, head_only=False, timeout=10):
    s = connect(timeout)
    s.sendall(raw)
    r = Reader(s)
    try:
        resp = r.response(head_only)
    except (EOFError, ConnectionResetError, socket.timeout):
        resp = (0, {}, b"")
    return s, r, resp


def is_error_object(body):
    try:
        e = json.loads(body)["error"]
        return isinstance(e["message"], str) and isinstance(e["type"], str)
    except Exception:
        return False


def check_basic():
    s, r, (st, h, b) = one(request("GET", "/health", version="1.0"))
    check("http10_answered_and_closed", st == 200 and h.get("connection") == "close" and r.closed(), f"{st} {h}")
    s.close()
    s, r, (st, h, b) = one(request("HEAD", "/health"), head_only=True)
    check("head_headers_only", st == 200 and h.get("content-length") == "15" and not r.buf, f"{st} {h} {r.buf!r}")
    s.close()
    s, r, (st, h, b) = one(b"GET /health HTTP/1.1\nHost: x\n\n")
    check("bare_lf_400_closed", st == 400 and is_error_object(b) and r.closed(), f"{st} {b!r}")
    s.close()
    for cl in ["+5", "-1", "5, 6", "0x10", "99999999999999999999999", "1e3", ""]:
        raw = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {cl}\r\n\r\n12345".encode()
        s, r, (st, h, b) = one(raw)
        want = 413 if cl.startswith("999") else 400
        check(f"bad_content_length_[{cl}]_{want}", st == want and is_error_object(b) and h.get("connection") == "close"
              and r.closed(), f"{st} {h} {b!r}")
        s.close()
    raw = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n123456"
    s, r, (st, h, b) = one(raw)
    check("content_length_conflict_400", st == 400, f"{st}")
    s.close()
    raw = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    s, r, (st, h, b) = one(raw)
    check("cl_and_te_400", st == 400, f"{st}")
    s.close()
    s, r, (st, h, b) = one(request("GET", "/health", headers={"X-Big": "a" * 20000}))
    check("huge_header_431", st == 431 and is_error_object(b), f"{st} {b!r}")
    s.close()
    s, r, (st, h, b) = one(request("GET", "/health", headers={f"X-{i}": "v" for i in range(80)}))
    check("too_many_headers_431", st == 431, f"{st}")
    s.close()
    # Too large a body is refused from its Content-Length, before the body is sent.
    s, r, (st, h, b) = one(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n")
    check("body_too_large_413_early", st == 413 and is_error_object(b), f"{st} {b!r}")
    s.close()
    body = chat_body("x" * 5000)
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 700]), body[i:i + 700]) for i in range(0, len(body), 700))
    raw = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"
    s, r, (st, h, b) = one(raw)
    check("chunked_request_body", st == 200 and json.loads(b)["choices"][0]["message"]["content"] == "echo: " + "x" * 5000, f"{st}")
    s.close()
    s, r, (st, h, b) = one(request("POST", "/v1/chat/completions", b'{"messages": [}'))
    check("malformed_json_400", st == 400 and is_error_object(b) and "line 1" in json.loads(b)["error"]["message"], f"{st} {b!r}")
    # The connection survives a 400 from the handler (the request itself was well framed).
    s.sendall(request("GET", "/health"))
    st2, _, _ = r.response()
    check("keep_alive_after_handler_400", st2 == 200, f"{st2}")
    s.close()
    # SSE to an HTTP/1.0 client: no chunking; the close ends the stream.
    s, r, (st, h, b) = one(request("POST", "/v1/chat/completions", chat_body("ten", True), version="1.0"))
    content, done = sse_content(b)
    check("sse_http10_close_delimited", st == 200 and "transfer-encoding" not in h and content == "echo: ten" and done,
          f"{st} {h} {b[:200]!r}")
    s.close()


def check_pipeline():
    raw = (request("POST", "/v1/chat/completions", chat_body("first")) + request("GET", "/health") +
           request("POST", "/v1/chat/completions", chat_body("third", True)) + request("GET", "/v1/models"))
    s = connect()
    s.sendall(raw)
    r = Reader(s)
    got = [r.response() for _ in range(4)]
    ok = (got[0][0] == 200 and json.loads(got[0][2])["choices"][0]["message"]["content"] == "echo: first" and
          got[1][0] == 200 and json.loads(got[1][2]) == {"status": "ok"} and
          got[2][0] == 200 and sse_content(got[2][2]) == ("echo: third", True) and
          got[3][0] == 200 and json.loads(got[3][2])["data"][0]["id"] == "echo-model")
    check("pipelined_four_in_order", ok, repr([(g[0], g[2][:80]) for g in got]))
    # Byte at a time, two requests.
    s2 = connect()
    for byte in request("GET", "/health") + request("POST", "/v1/completions", b'{"prompt":"p"}'):
        s2.send(bytes([byte]))
    r2 = Reader(s2)
    a, b = r2.response(), r2.response()
    check("byte_at_a_time_two_requests", a[0] == 200 and b[0] == 200 and json.loads(b[2])["choices"][0]["text"] == "echo: p",
          f"{a[0]} {b[0]}")
    s.close()
    s2.close()


def check_expect():
    body = chat_body("expect")
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
            "Expect: 100-continue\r\n\r\n").encode()
    s = connect()
    s.sendall(head)
    r = Reader(s)
    st, _, _ = r.response()
    s.sendall(body)
    st2, _, b = r.response()
    check("expect_100_continue", st == 100 and st2 == 200 and b"echo: expect" in b, f"{st} {st2}")
    s.close()


def check_slow(timeout_ms):
    t0 = time.time()
    s = connect(timeout=timeout_ms / 1000 + 5)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
    r = Reader(s)
    try:
        st, _, b = r.response()
    except (EOFError, ConnectionResetError, socket.timeout):
        st, b = 0, b""
    dt = time.time() - t0
    check("slow_head_408", st == 408 and is_error_object(b) and r.closed(), f"{st} after {dt:.2f}s")
    check("slow_head_408_timing", timeout_ms / 1000 * 0.8 <= dt <= timeout_ms / 1000 + 2.5, f"{dt:.2f}s")
    s.close()
    # A body that stops halfway.
    s = connect(timeout=timeout_ms / 1000 + 5)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"messa")
    r = Reader(s)
    try:
        st, _, _ = r.response()
    except (EOFError, ConnectionResetError, socket.timeout):
        st = 0
    check("slow_body_408", st == 408, f"{st}")
    s.close()
    # An idle keep-alive connection is closed without a response.
    t0 = time.time()
    s, r, (st, _, _) = one(request("GET", "/health"), timeout=timeout_ms / 1000 + 5)
    closed = r.closed(wait=timeout_ms / 1000 + 3)
    dt = time.time() - t0
    check("idle_keepalive_closed", st == 200 and closed and dt <= timeout_ms / 1000 + 2.5, f"{st} closed={closed} {dt:.2f}s")
    s.close()
    # Meanwhile the server answers others at once.
    s, r, (st, _, _) = one(request("GET", "/health"))
    check("server_answers_after_slow_clients", st == 200, f"{st}")
    s.close()


def log_text(path):
    with open(path, errors="replace") as f:
        return f.read()


def check_disconnect(log):
    marker = "disconnect-" + "z" * 120          # 126 chars -> 42 deltas of 3 bytes
    s = connect()
    s.sendall(request("POST", "/v1/chat/completions", chat_body(marker, True, x_delay_ms=50)))
    data = b""
    while data.count(b"data: ") < 4:
        data += s.recv(4096)
    s.close()
    t0 = time.time()
    gone = None
    while time.time() - t0 < 5 and gone is None:
        for line in log_text(log).splitlines():
            if line.startswith("gone after "):
                gone = int(line.split()[2])
        time.sleep(0.05)
    check("client_disconnect_stops_stream", gone is not None and gone < 20, f"log says {gone}")
    check("disconnected_stream_not_finished", f"[{marker[:40]}" not in log_text(log), "the stream ran to its end")
    # Nothing is written while the worker "thinks": the hangup itself must be noticed (poll), well
    # before the 5 s of work end.
    s = connect()
    s.sendall(request("POST", "/v1/chat/completions", chat_body("thinking", x_work_ms=5000)))
    time.sleep(0.3)
    s.close()
    t0 = time.time()
    while time.time() - t0 < 6 and "gone before answering" not in log_text(log):
        time.sleep(0.02)
    dt = time.time() - t0
    check("client_disconnect_seen_without_writing", dt < 1.0, f"noticed after {dt:.2f} s")
    s, r, (st, _, b) = one(request("POST", "/v1/chat/completions", chat_body("after")))
    check("server_answers_after_disconnect", st == 200 and b"echo: after" in b, f"{st}")
    s.close()


def log_lines(log, status, why):
    """The server's log lines (http_echo's format) with this status and reason."""
    return [ln for ln in log_text(log).splitlines() if f" {status} | {why} | " in ln]


def wait_log(log, status, why, count, wait=3.0):
    t0 = time.time()
    while time.time() - t0 < wait and len(log_lines(log, status, why)) < count:
        time.sleep(0.02)
    return log_lines(log, status, why)


def check_queue_leave(log):
    # A holds the worker; B waits in the only queue slot, then leaves; C must get B's slot.
    a = connect()
    a.sendall(request("POST", "/v1/chat/completions", chat_body("leave-A", x_work_ms=1500)))
    time.sleep(0.3)
    b = connect()
    b.sendall(request("POST", "/v1/chat/completions", chat_body("leave-B")))
    time.sleep(0.3)
    b.close()
    time.sleep(0.3)
    c, rc, (stc, _, bc) = one(request("POST", "/v1/chat/completions", chat_body("leave-C")))
    sta, _, ba = Reader(a).response()
    check("queue_leaver_frees_slot", stc == 200 and b"echo: leave-C" in bc and sta == 200, f"A {sta} C {stc}")
    check("queue_leaver_not_handled", "[leave-B]" not in log_text(log), "B was handled after leaving")
    a.close()
    c.close()
    # Every request leaves a log line: B's says 499 with the time it waited.
    queued = "client closed the connection while queued"
    got = wait_log(log, 499, queued, 1)
    check("queue_leaver_logged_499", len(got) == 1 and got[0].endswith(" s")
          and got[0].startswith("http_echo: POST /v1/chat/completions 499 | "), repr(got))
    # A client that shuts only its sending side while queued is gone too, and logged the same way.
    a = connect()
    a.sendall(request("POST", "/v1/chat/completions", chat_body("leave-A2", x_work_ms=1000)))
    time.sleep(0.3)
    b = connect()
    b.sendall(request("POST", "/v1/chat/completions", chat_body("leave-B2")))
    time.sleep(0.3)
    b.shutdown(socket.SHUT_WR)
    got = wait_log(log, 499, queued, 2)
    check("queue_half_close_logged_499", len(got) == 2, repr(got))
    Reader(a).response()
    a.close()
    b.close()
    # A request cut off halfway is logged as well.
    s = connect()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{\"mess")
    time.sleep(0.2)
    s.close()
    got = wait_log(log, 499, "client closed the connection before the request was complete", 1)
    check("partial_request_logged_499", len(got) == 1 and " POST /v1/chat/completions " in got[0],
          repr(got))


def run_concurrently(n, worker):
    """worker(0) .. worker(n - 1), each on its own thread, all started before any is waited for."""
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def check_load(n):
    results = [None] * n

    def worker(i):
        try:
            stream = i % 3 == 0
            content = f"load-{i}-" + "é" * (i % 7)
            s, r, (st, h, b) = one(request("POST", "/v1/chat/completions", chat_body(content, stream)), timeout=60)
            got = sse_content(b) if stream else (json.loads(b)["choices"][0]["message"]["content"], True)
            results[i] = st == 200 and got == ("echo: " + content, True)
            s.close()
        except Exception as e:
            results[i] = repr(e)

    run_concurrently(n, worker)
    bad = [(i, r) for i, r in enumerate(results) if r is not True]
    check(f"load_{n}_concurrent_all_answered_intact", not bad, repr(bad[:5]))


def check_queue1(n):
    results = [None] * n

    def worker(i):
        try:
            s, r, (st, h, b) = one(request("POST", "/v1/chat/completions", chat_body(f"q-{i}", x_work_ms=600)), timeout=60)
            ok_body = (st == 200 and json.loads(b)["choices"][0]["message"]["content"] == f"echo: q-{i}") or \
                      (st == 429 and is_error_object(b) and h.get("retry-after", "").isdigit())
            results[i] = st if ok_body else f"{st} {h} {b[:100]!r}"
            s.close()
        except Exception as e:
            results[i] = repr(e)

    run_concurrently(n, worker)
    check(f"queue1_{n}_concurrent_200_or_429", all(r in (200, 429) for r in results), repr(results))
    check("queue1_some_429", results.count(429) >= 1, repr(results))
    check("queue1_some_200", results.count(200) >= 1, repr(results))
    s, r, (st, _, _) = one(request("GET", "/health"))
    s2, r2, (st2, _, b2) = one(request("POST", "/v1/chat/completions", chat_body("after-queue")))
    check("queue1_server_answers_afterwards", st == 200 and st2 == 200 and b"echo: after-queue" in b2, f"{st} {st2}")
    s.close()
    s2.close()


def check_auth(key):
    models = lambda h: one(request("GET", "/v1/models", headers=h))[2]
    st, _, b = models({})
    check("auth_no_key_401", st == 401 and is_error_object(b), f"{st}")
    check("auth_wrong_key_401", models({"Authorization": "Bearer " + key + "x"})[0] == 401, "")
    check("auth_bearer_200", models({"Authorization": "Bearer " + key})[0] == 200, "")
    check("auth_x_api_key_200", models({"x-api-key": key})[0] == 200, "")
    s, r, (st, _, _) = one(request("POST", "/v1/chat/completions", chat_body("k")))
    check("auth_chat_without_key_401", st == 401, f"{st}")
    s.close()
    check("auth_health_open", one(request("GET", "/health"))[2][0] == 200, "")


def head_pending_body(source="127.0.0.1"):
    """A connection busy with a request: its head is in, its body still to come."""
    s = connect(source=source)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    return s


def health_status(source="127.0.0.1", timeout=10):
    s, r, (st, _, _) = one_from(request("GET", "/health"), source, timeout)
    s.close()
    return st


def one_from(raw, source, timeout=10):
    s = connect(timeout, source)
    s.sendall(raw)
    r = Reader(s)
    try:
        resp = r.response()
    except (EOFError, ConnectionResetError, socket.timeout):
        resp = (0, {}, b"")
    return s, r, resp


def is_open(sock):
    """True while the server keeps the connection open (no EOF, no reset)."""
    sock.settimeout(0.3)
    try:
        return sock.recv(1) != b""
    except socket.timeout:
        return True
    except OSError:
        return False


def check_maxconns(n):
    held = [head_pending_body() for _ in range(n)]
    time.sleep(0.3)
    s, r, (st, h, b) = one(request("GET", "/health"))
    check("max_conns_busy_503", st == 503 and is_error_object(b), f"{st}")
    s.close()
    for c in held:
        c.close()
    time.sleep(0.3)
    check("max_conns_freed", health_status() == 200, "")
    # Idle connections give way: the oldest fresh one, but a keep-alive idle one before it.
    oldest = connect()
    time.sleep(0.05)
    served, r, (st, _, _) = one(request("GET", "/health"))
    held = [connect() for _ in range(n - 2)]
    time.sleep(0.3)
    st2 = health_status()
    check("max_conns_idle_give_way", st == 200 and st2 == 200, f"{st} {st2}")
    check("max_conns_keepalive_idle_closed_first", not is_open(served) and is_open(oldest),
          f"served open={is_open(served)} oldest open={is_open(oldest)}")
    for c in held + [oldest, served]:
        c.close()


def check_peraddr(n):
    held = [head_pending_body() for _ in range(n)]
    time.sleep(0.3)
    st1 = health_status("127.0.0.1")
    st2 = health_status("127.0.0.2")
    check("per_addr_cap_503", st1 == 503, f"{st1}")
    check("per_addr_cap_other_address_200", st2 == 200, f"{st2}")
    for c in held:
        c.close()
    time.sleep(0.3)
    check("per_addr_cap_freed", health_status("127.0.0.1") == 200, "")


def check_flood(n):
    """n idle and n slow-head connections, reopened when the server closes them."""
    stop = threading.Event()
    idle, slow = [], []
    opened = [0]

    def open_conn():
        try:
            c = connect(timeout=5)
            c.setblocking(False)
            opened[0] += 1
            return c
        except OSError:
            return None

    def attacker():
        head = request("POST", "/v1/chat/completions", b"{}")
        pos = {}
        while not stop.is_set():
            for group, slow_group in ((idle, False), (slow, True)):
                for i, c in enumerate(group):
                    if stop.is_set():
                        return
                    try:
                        if c is None:
                            raise OSError
                        if slow_group:
                            k = pos.get(id(c), 0) % (len(head) - 4)   # never completes the head
                            c.send(head[k:k + 1])
                            pos[id(c)] = k + 1
                        elif c.recv(1) == b"":
                            raise OSError
                    except BlockingIOError:
                        pass
                    except OSError:
                        if c is not None:
                            c.close()
                        group[i] = open_conn()
            stop.wait(0.2)

    for _ in range(n):
        idle.append(open_conn())
    for _ in range(n):
        slow.append(open_conn())
    t = threading.Thread(target=attacker)
    t.start()
    try:
        time.sleep(1.0)
        for round_ in (1, 2):
            t0 = time.time()
            st = health_status(timeout=5)
            dt = time.time() - t0
            check(f"flood_{n}_health_answers_{round_}", st == 200 and dt < 1.0,
                  f"{st} after {dt:.2f} s")
            t0 = time.time()
            chat = request("POST", "/v1/chat/completions", chat_body(f"flood-{round_}"))
            s, r, (st, _, b) = one(chat, timeout=5)
            dt = time.time() - t0
            s.close()
            check(f"flood_{n}_chat_answers_{round_}",
                  st == 200 and f"echo: flood-{round_}".encode() in b and dt < 1.0,
                  f"{st} after {dt:.2f} s")
            time.sleep(1.5)
        check(f"flood_{n}_attackers_connected", opened[0] >= 2 * n,
              f"{opened[0]} connections opened")
    finally:
        stop.set()
        t.join()
        for c in idle + slow:
            if c is not None:
                c.close()


def check_early401(key):
    # The key is checked when the head is in: no 8 MB body is read (or even sent) first.
    big = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 8000000\r\n\r\n"
    s, r, (st, h, b) = one(big, timeout=3)
    check("early_401_before_body",
          st == 401 and is_error_object(b) and h.get("connection") == "close", f"{st} {h}")
    check("early_401_closes", r.closed(), "the connection stayed open")
    s.close()
    # With "Expect: 100-continue" the answer is 401, never "100 Continue".
    s, r, (st, h, b) = one(big[:-2] + b"Expect: 100-continue\r\n\r\n", timeout=3)
    check("early_401_instead_of_continue", st == 401, f"{st}")
    s.close()
    # With the key, the server waits for the body and answers it.
    body = chat_body("keyed")
    s = connect()
    keyed = request("POST", "/v1/chat/completions", body, {"Authorization": "Bearer " + key})
    s.sendall(keyed[:-len(body)])
    r = Reader(s)
    s.settimeout(0.5)
    try:
        early = r.response()[0]
    except socket.timeout:
        early = None
    s.settimeout(10)
    s.sendall(body)
    st, _, b = r.response()
    check("keyed_head_waits_for_body", early is None and st == 200 and b"echo: keyed" in b,
          f"{early} {st}")
    s.close()


def check_budget(log):
    def head(n):
        return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                f"Content-Length: {n}\r\n\r\n").encode()
    body = chat_body("b" * 349000)              # one such request fits the budget, two do not
    n = len(body)
    a = connect()
    a.sendall(head(n) + body[:100000])
    time.sleep(0.3)
    b, rb, (st, h, eb) = one(head(n), timeout=3)
    check("budget_503_from_head",
          st == 503 and h.get("retry-after", "").isdigit() and is_error_object(eb), f"{st} {h}")
    b.close()
    a.sendall(body[100000:])
    sta, _, ba = Reader(a).response()
    a.close()
    check("budget_first_request_answered", sta == 200, f"{sta} {ba[:100]!r}")
    # A's buffer returns to the budget once the worker hands A's connection back, which may be
    # a moment after A has its answer: retry on 503, as Retry-After says.
    codes = []
    for _ in range(5):
        c, rc, (stc, _, _) = one(head(n) + body)
        c.close()
        codes.append(stc)
        if stc != 503:
            break
        time.sleep(0.3)
    check("budget_room_again", codes[-1] == 200, f"{codes}")
    busy = "the server is busy: too much request data in flight; retry later"
    check("budget_503_logged", len(wait_log(log, 503, busy, 1)) >= 1, "no log line")


def check_headtime(head_ms, total_ms):
    def wait_answer(sock):
        t0 = time.time()
        try:
            st, _, b = Reader(sock).response()
        except (EOFError, ConnectionResetError, socket.timeout):
            st, b = 0, b""
        return st, b, time.time() - t0
    slow_head = connect(timeout=total_ms / 1000 + 5)
    slow_head.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
    st, b, dt = wait_answer(slow_head)
    check("head_deadline_408", st == 408 and b"request head not received" in b and
          head_ms / 1000 * 0.8 <= dt <= head_ms / 1000 + 1.5, f"{st} after {dt:.2f} s {b[:80]!r}")
    slow_head.close()
    slow_body = connect(timeout=total_ms / 1000 + 5)
    slow_body.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{")
    st, b, dt = wait_answer(slow_body)
    check("body_gets_the_whole_request_deadline", st == 408 and
          total_ms / 1000 * 0.8 <= dt <= total_ms / 1000 + 1.5, f"{st} after {dt:.2f} s")
    slow_body.close()


def check_stall():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", PORT))
    s.sendall(request("POST", "/v1/chat/completions", chat_body("s" * 600000, True)))
    time.sleep(1.5)                                  # the server's buffers fill; nothing is read
    print("stalled", flush=True)
    time.sleep(30)
    s.close()


if __name__ == "__main__":
    what, args = sys.argv[2], sys.argv[3:]
    try:
        {"basic": check_basic, "pipeline": check_pipeline, "expect": check_expect,
         "slow": lambda: check_slow(int(args[0])), "disconnect": lambda: check_disconnect(args[0]),
         "queue_leave": lambda: check_queue_leave(args[0]), "load": lambda: check_load(int(args[0])),
         "queue1": lambda: check_queue1(int(args[0])), "auth": lambda: check_auth(args[0]),
         "early401": lambda: check_early401(args[0]),
         "maxconns": lambda: check_maxconns(int(args[0])),
         "peraddr": lambda: check_peraddr(int(args[0])), "flood": lambda: check_flood(int(args[0])),
         "budget": lambda: check_budget(args[0]), "stall": check_stall,
         "headtime": lambda: check_headtime(int(args[0]), int(args[1]))}[what]()
    except Exception as e:
        import traceback
        traceback.print_exc()
        check(f"{what}_ran", False, repr(e))
    sys.exit(1 if failures else 0)

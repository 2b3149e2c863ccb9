#!/usr/bin/env python3
"""Checks of glm's OpenAI-compatible server (SERVE) over raw sockets; tests/t_server.sh runs them.
Python standard library only; the HTTP reading comes from tests/http_hostile.py. Each check prints
PASS/FAIL lines; answers are compared byte for byte with files of expected text (PROMPT mode's).

usage: server_check.py PORT CHECK [ARGS...]
  answer BODY OUT            POST BODY (a JSON file) to its endpoint, JSON or SSE as BODY says; the
                             content (chat) or text (completions) goes to OUT; prints the finish
                             reason, usage and reasoning as one JSON line. SSE is checked for shape:
                             role first, one id, chunk objects, finish once, usage when asked, [DONE].
  stop EXPECTED MAX          stop strings cut the answer before their first match, JSON and SSE
  load N EXPECTED...         N concurrent chats (JSON and SSE) cycling over the messages whose
                             answers are in EXPECTED files (named m<i>.txt, message "m<i>"): all 200,
                             each its own answer
  queue1 N                   (QUEUE=1, slow answers) N concurrent chats: only 200 or 429, one of each
                             at least, Retry-After on 429; the server answers afterwards
  disconnect LOG             a streaming client that leaves stops the generation (LOG says so); the
                             next request is answered promptly
  prefill_disconnect LOG PROMPT   the same during a long prefill (a raw prompt from the file PROMPT,
                             run with BATCH=1 so it takes seconds): stopped within about a second
  hostile EXPECTED MAX       bad Content-Length, huge header, pipelined requests (answers in order,
                             each intact)
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import http_hostile as hh  # noqa: E402  (reads PORT from sys.argv[1], as this script does)

failures = 0


def check(name, ok, why=""):
    global failures
    if not ok:
        failures += 1
    print(f"{'PASS' if ok else 'FAIL'} {name}{'' if ok else ': ' + str(why)[:600]}")
    sys.stdout.flush()


def chat_body(content, max_tokens, stream=False, **extra):
    d = {"model": "any", "messages": [{"role": "user", "content": content}], "temperature": 0, "max_tokens": max_tokens,
         "chat_template_kwargs": {"enable_thinking": False}, "stream": stream}
    d.update(extra)
    return d


def post(path, body, timeout=60):
    """One request on a fresh connection: (status, headers, body bytes)."""
    raw = json.dumps(body).encode() if not isinstance(body, bytes) else body
    s, r, resp = hh.one(hh.request("POST", path, raw), timeout=timeout)
    s.close()
    return resp


def parse_sse(data, chat):
    """The text of an SSE answer, checked for shape: (text, reasoning, finish, usage, problems)."""
    problems, text, reasoning, finish, usage, ids = [], "", "", None, None, set()
    events = [e for e in data.decode("utf-8", "strict").split("\n\n") if e]
    if not events or events[-1] != "data: [DONE]":
        problems.append("does not end with data: [DONE]")
    chunks = []
    for e in events[:-1]:
        if not e.startswith("data: "):
            problems.append(f"event without data: {e[:60]!r}")
            continue
        chunks.append(json.loads(e[6:]))
    for i, c in enumerate(chunks):
        if "error" in c:
            problems.append(f"error event {c}")
            continue
        ids.add(c["id"])
        if c["object"] != ("chat.completion.chunk" if chat else "text_completion"):
            problems.append(f"object {c['object']}")
        if c.get("usage"):
            if c["choices"] or i != len(chunks) - 1:
                problems.append("usage chunk with choices, or not last")
            usage = c["usage"]
            continue
        ch = c["choices"][0]
        if chat:
            d = ch["delta"]
            if (i == 0) != (d.get("role") == "assistant"):
                problems.append(f"role in chunk {i}")
            text += d.get("content") or ""
            reasoning += d.get("reasoning_content") or ""
        else:
            text += ch["text"]
        if ch.get("finish_reason"):
            if finish:
                problems.append("two finish reasons")
            finish = ch["finish_reason"]
    if len(ids) != 1:
        problems.append(f"{len(ids)} ids")
    return text, reasoning, finish, usage, problems


def answer(body_file, out):
    body = json.load(open(body_file))
    chat = "messages" in body
    st, h, b = post("/v1/chat/completions" if chat else "/v1/completions", body)
    if st != 200:
        print(json.dumps({"status": st, "body": b.decode("utf-8", "replace")}))
        return 1
    if body.get("stream"):
        text, reasoning, finish, usage, problems = parse_sse(b, chat)
        if problems:
            print(json.dumps({"status": st, "problems": problems}))
            return 1
        if h.get("content-type") != "text/event-stream":
            print(json.dumps({"status": st, "problems": ["content-type " + str(h.get("content-type"))]}))
            return 1
    else:
        j = json.loads(b)
        ch = j["choices"][0]
        text = ch["message"]["content"] if chat else ch["text"]
        reasoning = ch["message"].get("reasoning_content") if chat else None
        finish, usage = ch["finish_reason"], j["usage"]
    with open(out, "wb") as f:
        f.write((text or "").encode())
    print(json.dumps({"status": st, "finish": finish, "usage": usage, "reasoning": reasoning}, ensure_ascii=False))
    return 0


def pick_stop(expected):
    """A 3-character stop string from inside the expected answer, whose first occurrence is at i >= 4."""
    for i in range(4, len(expected) - 3):
        s = expected[i:i + 3]
        if expected.find(s) == i and s.strip() and "\ufffd" not in s:
            return s, i
    return None, None


def check_stop(expected_file, max_tokens):
    expected = open(expected_file, "rb").read().decode()
    stop, at = pick_stop(expected)
    if stop is None:
        check("stop_string_found", False, f"no usable stop string in {expected!r}")
        return
    want = expected[:at]
    for stream in (False, True):
        st, h, b = post("/v1/chat/completions", chat_body("Hello", max_tokens, stream, stop=["never-there", stop]))
        if stream:
            text, _, finish, _, problems = parse_sse(b, True)
        else:
            j = json.loads(b)
            text, finish, problems = j["choices"][0]["message"]["content"], j["choices"][0]["finish_reason"], []
        check(f"stop_string_{'sse' if stream else 'json'}: the answer ends before {stop!r} (finish stop)",
              st == 200 and not problems and text == want and finish == "stop", f"{st} {problems} {text!r} vs {want!r} {finish}")
    # a stop string that never comes changes nothing
    st, h, b = post("/v1/chat/completions", chat_body("Hello", max_tokens, stop="\u2603never"))
    j = json.loads(b)
    check("stop_string_absent_changes_nothing", st == 200 and j["choices"][0]["message"]["content"] == expected and
          j["choices"][0]["finish_reason"] == "length", b[:300])


def check_load(n, files):
    expected = {os.path.basename(f)[:-4]: open(f, "rb").read().decode() for f in files}
    names = sorted(expected)
    results = [None] * n

    def worker(i):
        try:
            msg = names[i % len(names)]
            stream = i % 3 == 0
            st, h, b = post("/v1/chat/completions", chat_body(msg, 8, stream), timeout=120)
            if stream:
                text, _, finish, _, problems = parse_sse(b, True)
                ok = st == 200 and not problems and text == expected[msg]
            else:
                ok = st == 200 and json.loads(b)["choices"][0]["message"]["content"] == expected[msg]
            results[i] = True if ok else f"{msg} {st} {b[:200]!r}"
        except Exception as e:  # noqa: BLE001
            results[i] = repr(e)

    t0 = time.time()
    hh.run_concurrently(n, worker)
    bad = [(i, r) for i, r in enumerate(results) if r is not True]
    check(f"load_{n}_concurrent_requests_none_lost_or_garbled ({time.time() - t0:.1f} s)", not bad, bad[:4])


def check_queue1(n):
    results = [None] * n

    def worker(i):
        try:
            st, h, b = post("/v1/chat/completions", chat_body(f"q{i}", 1500), timeout=120)
            ok = (st == 200 and json.loads(b)["choices"][0]["finish_reason"] == "length") or \
                 (st == 429 and hh.is_error_object(b) and h.get("retry-after", "").isdigit())
            results[i] = st if ok else f"{st} {h} {b[:120]!r}"
        except Exception as e:  # noqa: BLE001
            results[i] = repr(e)

    hh.run_concurrently(n, worker)
    check(f"queue1_{n}_concurrent_only_200_or_429", all(r in (200, 429) for r in results), results)
    check("queue1_at_least_one_429_with_retry_after", results.count(429) >= 1, results)
    check("queue1_at_least_one_200", results.count(200) >= 1, results)
    st, h, b = post("/v1/chat/completions", chat_body("after", 3))
    check("queue1_server_answers_afterwards", st == 200, f"{st} {b[:200]!r}")


def check_disconnect(log):
    s = hh.connect()
    s.sendall(hh.request("POST", "/v1/chat/completions", json.dumps(chat_body("Hello", 3000, True)).encode()))
    data = b""
    while data.count(b"data: ") < 4:
        d = s.recv(4096)
        if not d:
            break
        data += d
    s.close()
    gone, t0 = None, time.time()
    while time.time() - t0 < 10 and gone is None:
        for line in open(log, errors="replace").read().splitlines():
            if "client gone or server stopping: stopped generating after" in line:
                gone = int(line.split("after ")[1].split()[0])
        time.sleep(0.05)
    check("disconnect_stops_the_generation (log: stopped generating after N tokens, N < 3000)",
          gone is not None and gone < 3000, f"log says {gone}")
    t0 = time.time()
    st, h, b = post("/v1/chat/completions", chat_body("next", 3), timeout=30)
    dt = time.time() - t0
    check(f"disconnect_next_request_served_promptly ({dt:.2f} s)", st == 200 and dt < 5, f"{st} after {dt:.2f} s")


def check_prefill_disconnect(log, prompt_file):
    body = json.dumps({"prompt": open(prompt_file).read(), "max_tokens": 1}).encode()
    s = hh.connect()
    s.sendall(hh.request("POST", "/v1/completions", body))
    time.sleep(0.3)
    s.close()
    t0, seen = time.time(), False
    while time.time() - t0 < 10 and not seen:
        seen = "stopped during the prefill" in open(log, errors="replace").read()
        time.sleep(0.02)
    dt = time.time() - t0
    check(f"disconnect_during_prefill_stops_it ({dt:.2f} s after the client left)", seen and dt < 2, f"seen {seen} after {dt:.2f} s")
    t0 = time.time()
    st, h, b = post("/v1/chat/completions", chat_body("next", 3), timeout=30)
    dt = time.time() - t0
    check(f"after_prefill_disconnect_next_request_served ({dt:.2f} s)", st == 200 and dt < 5, f"{st} after {dt:.2f} s")


def check_hostile(expected_file, max_tokens):
    expected = open(expected_file, "rb").read().decode()
    for cl in ["+5", "-1", "0x10", "1e3", "5, 6"]:
        raw = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {cl}\r\n\r\n12345".encode()
        s, r, (st, h, b) = hh.one(raw)
        check(f"hostile_bad_content_length_[{cl}]_400_closed", st == 400 and hh.is_error_object(b) and r.closed(), f"{st} {b[:100]!r}")
        s.close()
    s, r, (st, h, b) = hh.one(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n")
    check("hostile_body_too_large_413", st == 413 and hh.is_error_object(b), f"{st}")
    s.close()
    s, r, (st, h, b) = hh.one(hh.request("GET", "/v1/models", headers={"X-Big": "a" * 20000}))
    check("hostile_huge_header_431", st == 431 and hh.is_error_object(b), f"{st}")
    s.close()
    s, r, (st, h, b) = hh.one(hh.request("POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"'))
    check("hostile_truncated_json_400_error_object", st == 400 and hh.is_error_object(b) and b"not valid JSON" in b, f"{st} {b!r}")
    s.close()
    # pipelining: a chat, a health check, a streamed chat and the model list in one write
    body = json.dumps(chat_body("Hello", max_tokens)).encode()
    sbody = json.dumps(chat_body("Hello", max_tokens, True)).encode()
    raw = (hh.request("POST", "/v1/chat/completions", body) + hh.request("GET", "/health") +
           hh.request("POST", "/v1/chat/completions", sbody) + hh.request("GET", "/v1/models"))
    s = hh.connect(timeout=60)
    s.sendall(raw)
    r = hh.Reader(s)
    got = [r.response() for _ in range(4)]
    ok = (got[0][0] == 200 and json.loads(got[0][2])["choices"][0]["message"]["content"] == expected and
          got[1][0] == 200 and json.loads(got[1][2]) == {"status": "ok"} and
          got[2][0] == 200 and parse_sse(got[2][2], True)[0] == expected and
          got[3][0] == 200 and json.loads(got[3][2])["object"] == "list")
    check("hostile_pipelined_four_answered_in_order_and_intact", ok, [(g[0], g[2][:80]) for g in got])
    s.close()


if __name__ == "__main__":
    what, args = sys.argv[2], sys.argv[3:]
    try:
        if what == "answer":
            sys.exit(answer(args[0], args[1]))
        {"stop": lambda: check_stop(args[0], int(args[1])), "load": lambda: check_load(int(args[0]), args[1:]),
         "queue1": lambda: check_queue1(int(args[0])), "disconnect": lambda: check_disconnect(args[0]),
         "prefill_disconnect": lambda: check_prefill_disconnect(args[0], args[1]),
         "hostile": lambda: check_hostile(args[0], int(args[1]))}[what]()
    except Exception as e:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        check(f"{what}_ran", False, repr(e))
    sys.exit(1 if failures else 0)

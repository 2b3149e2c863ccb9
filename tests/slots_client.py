"""Clients for tests/t_slots.sh (and bench/slots.sh): several completion requests at once.

answers PORT OUT_PREFIX together(0|1): four requests (greedy and seeded sampling, whole and
    streamed); request K's text goes to OUT_PREFIX.K. together=0 sends them one after another.
disconnect PORT: a stream that is dropped after its third event.
interleave PORT LONG_PROMPT_FILE: a stream decodes while a long prompt is prefilled; prints the
    stream's events that arrived during that prefill.
bench PORT CLIENTS TOKENS: CLIENTS streamed requests of TOKENS tokens at once; prints the tokens
    of all of them over the seconds from the first request to the last answer.
"""
import json, socket, sys, threading, time, urllib.request

REQUESTS = [
    dict(prompt="alpha beta", temperature=0, max_tokens=40, stream=False),
    dict(prompt="river stone cloud", temperature=0, max_tokens=33, stream=True),
    dict(prompt="seven", temperature=0.9, seed=11, max_tokens=40, stream=True),
    dict(prompt="gamma delta gamma delta", temperature=1.0, top_p=0.9, seed=5, max_tokens=27,
         stream=False),
]


def complete(port, body):
    """The answer's text and its completion token count."""
    req = urllib.request.Request("http://127.0.0.1:%s/v1/completions" % port,
                                 json.dumps(body).encode(), {"Content-Type": "application/json"})
    text, tokens = "", 0
    with urllib.request.urlopen(req, timeout=600) as f:
        if body.get("stream"):
            for line in f:
                line = line.decode().strip()
                if line.startswith("data: ") and line != "data: [DONE]":
                    d = json.loads(line[6:])
                    if d.get("choices"):
                        text += d["choices"][0]["text"]
                    if d.get("usage"):
                        tokens = d["usage"]["completion_tokens"]
        else:
            d = json.load(f)
            text, tokens = d["choices"][0]["text"], d["usage"]["completion_tokens"]
    return text, tokens


def answers(port, out, together):
    def run(k):
        open("%s.%d" % (out, k), "w").write(complete(port, REQUESTS[k])[0])
    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(REQUESTS))]
    for t in threads:
        t.start()
        if not together:
            t.join()
    for t in threads:
        t.join()


def disconnect(port):
    body = json.dumps(dict(prompt="alpha", max_tokens=3000, stream=True)).encode()
    s = socket.create_connection(("127.0.0.1", int(port)), timeout=60)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    got = b""
    while got.count(b"data: ") < 3:
        chunk = s.recv(4096)
        if not chunk:
            sys.exit("the stream ended before three events")
        got += chunk
    s.close()


def interleave(port, path):
    body = json.dumps(dict(prompt="alpha", max_tokens=3000, temperature=0, stream=True)).encode()
    s = socket.create_connection(("127.0.0.1", int(port)), timeout=120)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    events, started, done = [0], threading.Event(), threading.Event()
    def read():
        got = b""
        while not done.is_set():
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
            events[0] = got.count(b"data: ")
            if events[0] >= 3:
                started.set()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not started.wait(60):
        sys.exit("the stream did not start")
    before = events[0]
    complete(port, dict(prompt=open(path).read(), max_tokens=1, temperature=0))
    print(events[0] - before)
    done.set()
    s.close()


def bench(port, clients, tokens):
    counts = [0] * clients
    def run(k):
        body = dict(prompt="alpha beta gamma %d" % k, temperature=0, max_tokens=tokens,
                    stream=True, stream_options={"include_usage": True})
        counts[k] = complete(port, body)[1]
    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.time() - t0
    print("%d clients: %d tokens in %.1f s: %.2f tokens/s" % (clients, sum(counts), seconds,
                                                               sum(counts) / seconds))


if __name__ == "__main__":
    what, port = sys.argv[1], sys.argv[2]
    if what == "answers":
        answers(port, sys.argv[3], sys.argv[4] == "1")
    elif what == "disconnect":
        disconnect(port)
    elif what == "interleave":
        interleave(port, sys.argv[3])
    elif what == "bench":
        bench(port, int(sys.argv[3]), int(sys.argv[4]))

#!/usr/bin/env bash
# http.h with real clients, through tests/bin/http_echo (a server with fake OpenAI-shaped endpoints
# built on http.h alone): curl (JSON, SSE, chunked and 100-continue uploads, limits), the official
# `openai` npm client (models, chat JSON + streaming, completions, error classes, keep-alive),
# hostile raw-socket requests (tests/http_hostile.py: bad Content-Length, huge headers,
# pipelining, slow clients, disconnects), a load test of 50 concurrent requests, QUEUE=1 with six
# concurrent requests (200 or 429 only), API_KEY (checked from the head, before a body), MAX_CONNS
# and MAX_CONNS_PER_ADDR, 200 idle plus 200 slow-head connections against /health and a chat, the
# buffer budget, log lines for requests ended without an answer, and SIGTERM during a stream (also
# one nobody reads).
# The openai package is expected in $OPENAI_NPM_DIR (default /tmp/glm_openai_npm); if missing it
# is installed there with `npm install --prefix` (needs the npm registry). Nothing goes into the repo.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
ECHO=${HTTP_ECHO:-tests/bin/http_echo}   # HTTP_ECHO=path runs another build (e.g. a sanitizer one)
NPM_DIR=${OPENAI_NPM_DIR:-/tmp/glm_openai_npm}
OPENAI_VERSION=6.49.0
PY=${PYTHON:-python3}
if [ ! -x "$ECHO" ]; then echo "FAIL http_echo_built: $ECHO missing (make tests/bin/http_echo)"; exit 1; fi
for tool in curl node; do
  command -v $tool >/dev/null || { echo "FAIL http_tools: $tool is not installed"; exit 1; }
done
T=$(mktemp -d /tmp/t_http.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}exitcode=199"

# start NAME [VAR=VALUE...]: runs http_echo with those settings; sets PORT and PID.
start() {
  local name=$1; shift
  # --foreground: a SIGTERM to timeout goes to http_echo once, not again to its process group,
  # where it may land after the server has stopped and put back the default disposition.
  env -u API_KEY -u QUEUE -u LISTEN "$@" timeout --foreground 600 "$ECHO" >"$T/$name.out" 2>"$T/$name.err" &
  PID=$!; PIDS+=("$PID")
  PORT=
  for _ in $(seq 200); do
    PORT=$(awk '/^port/ {print $2}' "$T/$name.out" 2>/dev/null)   # the file may not exist yet
    [ -n "$PORT" ] && return 0
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.05
  done
  echo "FAIL http_start_$name: http_echo did not start"; tail -5 "$T/$name.err"; exit 1
}
# stop NAME: SIGTERM; the server must exit 0 within 5 s and say it stopped cleanly.
stop() {
  local name=$1 rc
  kill -TERM "$PID"
  for _ in $(seq 100); do kill -0 "$PID" 2>/dev/null || break; sleep 0.05; done
  if kill -0 "$PID" 2>/dev/null; then echo "FAIL http_stop_$name: still running 5 s after SIGTERM"; kill -KILL "$PID"; return; fi
  wait "$PID"; rc=$?
  if [ $rc -eq 0 ] && grep -q "stopped cleanly" "$T/$name.err"; then echo "PASS http_stop_$name"
  else echo "FAIL http_stop_$name: exit $rc"; tail -5 "$T/$name.err"; fi
}
hostile() { timeout 120 "$PY" tests/http_hostile.py "$PORT" "$@"; }

# ---- One server with a queue large enough for the load test; short request timeout.
start main QUEUE=64 TIMEOUT_MS=1500
URL=http://127.0.0.1:$PORT
C="curl -sS --max-time 20"

out=$($C -i "$URL/health")
grep -q '^HTTP/1.1 200 OK' <<<"$out" && grep -q '{"status":"ok"}' <<<"$out" && echo "PASS curl_health" || { echo "FAIL curl_health"; echo "$out"; }
out=$($C "$URL/v1/models")
"$PY" -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["object"]=="list" and d["data"][0]["id"]=="echo-model"' "$out" 2>/dev/null \
  && echo "PASS curl_models" || { echo "FAIL curl_models: $out"; }
body='{"model":"echo-model","messages":[{"role":"user","content":"Grüße, 世界 \"q\" \\ \u0001"}]}'
json=$($C "$URL/v1/chat/completions" -H 'Content-Type: application/json' -d "$body")
sse=$($C -N "$URL/v1/chat/completions" -H 'Content-Type: application/json' -d "${body%\}},\"stream\":true}")
# The concatenated SSE deltas equal the JSON answer's content; every event is valid JSON; [DONE] last.
if "$PY" - "$json" "$sse" <<'EOF'
import json, sys
j, s = json.loads(sys.argv[1]), sys.argv[2]
content = j["choices"][0]["message"]["content"]
assert content == 'echo: Grüße, 世界 "q" \\ \x01', content
events = [e for e in s.split("\n\n") if e.strip()]
assert events[-1] == "data: [DONE]", events[-1]
deltas = "".join(c["delta"].get("content") or "" for e in events[:-1] for c in json.loads(e[6:])["choices"])
assert deltas == content, (deltas, content)
EOF
then echo "PASS curl_chat_json_equals_sse"; else echo "FAIL curl_chat_json_equals_sse"; echo "$json"; echo "$sse" | head -5; fi
code=$($C -o "$T/err.json" -w '%{http_code}' "$URL/v1/chat/completions" -d '{"messages": [')
[ "$code" = 400 ] && grep -q '"error":{"message":' "$T/err.json" && echo "PASS curl_malformed_json_400" || echo "FAIL curl_malformed_json_400: $code"
code=$($C -o /dev/null -w '%{http_code}' "$URL/v1/nothing")
[ "$code" = 404 ] && echo "PASS curl_unknown_path_404" || echo "FAIL curl_unknown_path_404: $code"
out=$($C "$URL/v1/chat/completions" -H 'Transfer-Encoding: chunked' -d "$body")
grep -q '"content":"echo: Gr' <<<"$out" && echo "PASS curl_chunked_upload" || echo "FAIL curl_chunked_upload: $out"
# 3 MB: curl sends "Expect: 100-continue" for a body this big.
"$PY" -c 'import json; print(json.dumps({"messages":[{"role":"user","content":"b"*3000000}]}))' >"$T/big.json"
out=$($C -v "$URL/v1/chat/completions" -H 'Content-Type: application/json' --data-binary @"$T/big.json" 2>"$T/big.log")
grep -q '100 Continue' "$T/big.log" && [ "$(grep -o b <<<"$out" | wc -l)" -ge 3000000 ] && echo "PASS curl_3mb_body_100_continue" \
  || echo "FAIL curl_3mb_body_100_continue: $(grep -c . <<<"$out") lines"
head -c 9000000 /dev/zero | tr '\0' a >"$T/huge.txt"
code=$($C -o "$T/err.json" -w '%{http_code}' "$URL/v1/chat/completions" --data-binary @"$T/huge.txt")
[ "$code" = 413 ] && echo "PASS curl_9mb_body_413" || echo "FAIL curl_9mb_body_413: $code"
code=$($C -o /dev/null -w '%{http_code}' "$URL/health" -H "X-Big: $(head -c 20000 /dev/zero | tr '\0' b)")
[ "$code" = 431 ] && echo "PASS curl_huge_header_431" || echo "FAIL curl_huge_header_431: $code"

# ---- The openai npm client.
if [ ! -f "$NPM_DIR/node_modules/openai/package.json" ] || ! grep -q "\"version\": \"$OPENAI_VERSION\"" "$NPM_DIR/node_modules/openai/package.json"; then
  if ! command -v npm >/dev/null; then echo "FAIL http_openai_npm: $NPM_DIR lacks openai@$OPENAI_VERSION and npm is not installed"; exit 1; fi
  mkdir -p "$NPM_DIR"
  if ! out=$(timeout 300 npm install --prefix "$NPM_DIR" --no-audit --no-fund "openai@$OPENAI_VERSION" 2>&1); then
    echo "FAIL http_openai_npm: npm install --prefix $NPM_DIR openai@$OPENAI_VERSION failed"; echo "$out" | tail -5; exit 1
  fi
fi
echo "PASS http_openai_npm"
timeout 120 node tests/http_openai.mjs "$NPM_DIR" "$URL/v1" unused

# ---- Raw sockets and load.
hostile basic
hostile pipeline
hostile expect
hostile slow 1500
hostile disconnect "$T/main.err"
hostile load 50

# ---- SIGTERM while a stream runs: the stream ends properly ([DONE]), the server exits 0.
$C -N "$URL/v1/chat/completions" -d '{"stream":true,"x_delay_ms":100,"messages":[{"role":"user","content":"a long answer that takes a while"}]}' >"$T/term.sse" &
curl_pid=$!
sleep 0.6
stop main
wait $curl_pid; crc=$?
[ $crc -eq 0 ] && tail -c 20 "$T/term.sse" | grep -q 'data: \[DONE\]' && echo "PASS sigterm_ends_stream_cleanly" \
  || { echo "FAIL sigterm_ends_stream_cleanly: curl exit $crc"; tail -c 300 "$T/term.sse"; }

# ---- QUEUE=1: six concurrent slow requests get 200 or 429; a client that leaves the queue frees it.
start queue1 QUEUE=1
hostile queue1 6
hostile queue_leave "$T/queue1.err"
# A queued request when the server stops gets 503; the running one ends.
$C -o "$T/run.json" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/chat/completions" -d '{"x_work_ms":5000,"messages":[{"role":"user","content":"r"}]}' >"$T/run.code" &
p1=$!
sleep 0.3
$C -o "$T/wait.json" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/chat/completions" -d '{"messages":[{"role":"user","content":"w"}]}' >"$T/wait.code" &
p2=$!
sleep 0.3
stop queue1
wait $p1 $p2
[ "$(cat "$T/wait.code")" = 503 ] && grep -q 'shutting down' "$T/wait.json" && [ "$(cat "$T/run.code")" = 503 ] \
  && echo "PASS stop_answers_waiting_and_running" || echo "FAIL stop_answers_waiting_and_running: waiting $(cat "$T/wait.code"), running $(cat "$T/run.code")"

# ---- QUEUE=0: nothing waits, but an idle worker still answers; a request while it works gets 429.
start queue0 QUEUE=0
$C -o "$T/q0a.json" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/chat/completions" -d '{"x_work_ms":1500,"messages":[{"role":"user","content":"a"}]}' >"$T/q0a.code" &
p1=$!
sleep 0.4
q0b=$($C -o "$T/q0b.json" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/chat/completions" -d '{"messages":[{"role":"user","content":"b"}]}')
wait $p1
q0c=$($C -o "$T/q0c.json" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/chat/completions" -d '{"messages":[{"role":"user","content":"c"}]}')
stop queue0
[ "$(cat "$T/q0a.code")" = 200 ] && [ "$q0b" = 429 ] && [ "$q0c" = 200 ] \
  && echo "PASS queue0_serves_when_idle_429_when_busy" \
  || echo "FAIL queue0_serves_when_idle_429_when_busy: first $(cat "$T/q0a.code"), while busy $q0b, after $q0c"

# Requests that http.h ends itself are logged like the others (stderr).
LOGGED='^http_echo: POST /v1/chat/completions'
grep -q "$LOGGED 429 | " "$T/queue1.err" && echo "PASS queue_full_429_logged" \
  || echo "FAIL queue_full_429_logged: no log line"
grep -q "$LOGGED 503 | server is shutting down | " "$T/queue1.err" && echo "PASS stop_503_logged" \
  || echo "FAIL stop_503_logged: no log line"
grep -q "$LOGGED 408 | request not received within 1500 ms | " "$T/main.err" \
  && echo "PASS timeout_408_logged" || echo "FAIL timeout_408_logged: no log line"

# ---- API_KEY.
start auth API_KEY=sk-test-key
hostile auth sk-test-key
hostile early401 sk-test-key
timeout 60 node tests/http_openai.mjs "$NPM_DIR" "http://127.0.0.1:$PORT/v1" wrong-key wrong_key
stop auth

# ---- Admission: MAX_CONNS and MAX_CONNS_PER_ADDR (127.0.0.2 is this machine too).
start conns MAX_CONNS=3
hostile maxconns 3
stop conns
start peraddr MAX_CONNS=8 MAX_CONNS_PER_ADDR=2
hostile peraddr 2
stop peraddr
# A head has less time than the whole request.
start headtime HEAD_TIMEOUT_MS=1000 TIMEOUT_MS=4000
hostile headtime 1000 4000
stop headtime
# Default settings: 200 idle and 200 slow-head connections lock nobody out.
start flood
hostile flood 200
stop flood
# The buffer budget across connections.
start budget MAX_BODY=400000 MAX_BUFFERED=600000
hostile budget "$T/budget.err"
stop budget

# ---- SIGTERM while the worker streams to a client that stopped reading: exit within 2 s.
start stall
timeout 60 "$PY" tests/http_hostile.py "$PORT" stall >"$T/stall.out" 2>&1 &
stall_pid=$!
for _ in $(seq 100); do grep -q stalled "$T/stall.out" && break; sleep 0.05; done
kill -TERM "$PID"
t0=$(date +%s%N)
for _ in $(seq 40); do kill -0 "$PID" 2>/dev/null || break; sleep 0.05; done
if kill -0 "$PID" 2>/dev/null; then
  echo "FAIL sigterm_stalled_reader_exits_in_2s: still running"; kill -KILL "$PID"
else
  wait "$PID"; rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  if grep -q stalled "$T/stall.out" && [ $rc -eq 0 ]; then
    echo "PASS sigterm_stalled_reader_exits_in_2s"
  else echo "FAIL sigterm_stalled_reader_exits_in_2s: exit $rc after $ms ms"; cat "$T/stall.out"; fi
fi
kill "$stall_pid" 2>/dev/null; wait "$stall_pid" 2>/dev/null

# ---- A non-loopback address needs API_KEY (the policy glm applies; http.h reports loopback).
expect_fail http_non_loopback_needs_key "reachable from other machines: set API_KEY" env -u API_KEY LISTEN=0.0.0.0:0 timeout 10 "$ECHO"
expect_fail http_bad_listen "port must be a number" env LISTEN=127.0.0.1:99999 timeout 10 "$ECHO"
exit 0

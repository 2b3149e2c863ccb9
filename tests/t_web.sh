#!/usr/bin/env bash
# The chat page (GET /) and the engine's figures (GET /stats) of SERVE, on the tiny oracle model
# (tests/fixtures/oracle_dense with tests/fixtures/tiny_tokenizer) at random free ports:
#   - the page is web/'s files as they are in the repository (embedded by make), with a CSP that
#     allows only the server itself; it never parses model text as HTML (no innerHTML in app.js)
#     and names no other host; WEB=0 leaves it out and /stats stays; /stats wants API_KEY;
#   - /stats agrees with the stderr stats of the same run: the expert hits, misses and bytes read
#     with the "glm: experts:" line the server prints when it stops, the routing counts with
#     STATS='s file, the RAM plan with VERBOSE's line, the last answer's tokens with its log line,
#     the cached experts with the slots; a long prefill shows progress while it runs;
#   - in a real browser (Debian's chromium driven by puppeteer-core, tests/web_test.mjs): the
#     streamed answer shown equals the API's answer to the same request byte for byte; stop ends
#     the generation on the server; regenerate; edit and resend; reload keeps the conversations;
#     hostile text renders as text; the API key prompt; no request to any other host; screenshots
#     (their folder is printed). Without chromium or puppeteer-core these print SKIP.
# puppeteer-core is expected in $PUPPETEER_NPM_DIR (default /tmp/glm_puppeteer_npm), installed
# there with npm when missing; chromium at $CHROMIUM (default: chromium on the PATH).
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
unset_settings
export THREADS=1
PY=/usr/bin/python3
NPM_DIR=${PUPPETEER_NPM_DIR:-/tmp/glm_puppeteer_npm}
PUPPETEER_VERSION=24.43.1   # the last line that runs on Debian 12's node 18 (25 wants node 22)
T=$(mktemp -d /tmp/t_web.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
for tool in curl node; do command -v $tool >/dev/null || { echo "FAIL web_tools: $tool is not installed"; exit 1; }; done
M=$T/model; tiny_model "$M" oracle_dense
mkdir -p "$T/noeos"
for f in config.json model.safetensors tokenizer.json; do ln -s "$M/$f" "$T/noeos/$f"; done
printf '{"eos_token_id": []}' > "$T/noeos/generation_config.json"   # answers run to max_tokens

# serve NAME [VAR=value ...]: glm SERVE=127.0.0.1:0 on $M with the arguments in ARGS (cache_slots);
# sets PID, URL, LOG (as t_server.sh)
serve() {
  local name=$1 port; shift
  LOG=$T/$name.err
  env SNAP="$M" SERVE=127.0.0.1:0 "$@" timeout 600 "$GLM" $ARGS >"$T/$name.out" 2>"$LOG" </dev/null &
  PID=$!; PIDS+=("$PID")
  port=$(serving_port "$LOG" "$PID") && { URL=http://127.0.0.1:$port; return 0; }
  echo "FAIL web_server_start_$name: no 'glm: serving ... at http://127.0.0.1:PORT/v1' line"; tail -5 "$LOG"; exit 1
}
# stop: SIGTERM and wait (the server prints its stats lines as it stops)
stop() { kill -TERM "$PID"; wait "$PID"; }

# ---- the page's files ----------------------------------------------------------------------------
if grep -nE 'innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|srcdoc' web/app.js; then
  echo "FAIL web_no_html_parsing: app.js parses strings as HTML or code (lines above)"
else echo "PASS web_no_html_parsing: app.js builds model text with text nodes only"; fi
hosts=$(grep -ohE "(https?|wss?|ftp):(//)?[a-zA-Z0-9-]+\.[a-zA-Z]+|(src|href|url)[=(][\"']?//[a-zA-Z0-9]" web/* | sort -u)
if [ -z "$hosts" ]; then echo "PASS web_no_other_hosts: web/ names no other host (it works offline)"
else echo "FAIL web_no_other_hosts: web/ names $hosts"; fi
size=$(cat web/* | wc -c)
if [ "$size" -lt 100000 ]; then echo "PASS web_size: the page is $size bytes"; else echo "FAIL web_size: $size bytes (tens of KB wanted)"; fi

ARGS=4 serve main USAGE=off STATS="$T/routes.txt" VERBOSE=1   # 4 expert slots per layer: evictions
same_file() {   # same_file NAME PATH: GET PATH == web/FILE byte for byte, with its headers
  local name=$1 path=$2 file=$3 type=$4
  curl -sS -D "$T/h" -o "$T/body" --max-time 10 "$URL$path"
  if cmp -s "$T/body" "web/$file" && grep -qi "^content-type: $type" "$T/h" &&
     grep -qi "^content-security-policy: default-src 'none'; script-src 'self'.*connect-src 'self'" "$T/h"
  then echo "PASS $name: GET $path is web/$file as built into glm ($type, CSP: this server only)"
  else echo "FAIL $name: GET $path differs from web/$file (rebuild with make) or lacks its headers"; head -12 "$T/h"; fi
}
same_file web_get_root / index.html text/html
same_file web_get_js /app.js app.js text/javascript
same_file web_get_css /style.css style.css text/css
code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 "$URL/nope.js")
[ "$code" = 404 ] && echo "PASS web_unknown_file: 404" || echo "FAIL web_unknown_file: $code"

# ---- /stats agrees with the stderr stats ---------------------------------------------------------
post() { curl -sS --max-time 120 "$URL/v1/chat/completions" -H 'Content-Type: application/json' -d "$1"; }
post '{"messages": [{"role": "user", "content": "Hello"}], "temperature": 0, "max_tokens": 30}' > "$T/a1.json"
post '{"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"}, {"role": "user", "content": "Tell me about the sea"}], "temperature": 0, "max_tokens": 25, "stream": true}' > "$T/a2.sse"
curl -sS --max-time 10 "$URL/stats" > "$T/stats.json"
stop
$PY - "$T/stats.json" "$LOG" "$T/routes.txt" <<'EOF'
import json, re, sys
s = json.load(open(sys.argv[1])); err = open(sys.argv[2]).read(); x = s["experts"]; r = s["request"]
def check(name, ok, why):
    print(("PASS %s" % name) if ok else ("FAIL %s: %s" % (name, why)))
m = re.search(r"^glm: experts: (\d+) hits, (\d+) misses \(hit [0-9.]+%\), read ([0-9.]+) MB in ([0-9.]+) s", err, re.M)
check("web_stats_experts_match_stderr", m and (int(m[1]), int(m[2]), m[3], m[4]) ==
      (x["hits"], x["misses"], "%.1f" % (x["bytes_read"] / 1e6), "%.3f" % x["read_seconds"]) and x["hits"] + x["misses"] > 0,
      "stderr %s vs /stats %s" % (m and m.groups(), (x["hits"], x["misses"], x["bytes_read"], x["read_seconds"])))
routes = {}
for line in open(sys.argv[3]):
    if not line.startswith("#"):
        l, e, n = map(int, line.split()); routes[(l, e)] = n
mine = {(L["layer"], e): n for L in x["layers"] for e, n in enumerate(L["routed"]) if n}
check("web_stats_routes_match_STATS_file", routes and mine == routes, "%d entries in STATS, %d in /stats" % (len(routes), len(mine)))
m = re.search(r"^glm: RAM budget ([0-9.]+) GB.*: dense weights ([0-9.]+) GB \+ KV cache and scratch ([0-9.]+) GB.*"
              r"expert cache ([0-9.]+) GB \((\d+) slots x (\d+) MoE layers", err, re.M)
ram = s["ram"]
check("web_stats_ram_plan_matches_stderr", m and m.groups() == ("%.2f" % (ram["budget_bytes"] / 1e9), "%.2f" % (ram["dense_bytes"] / 1e9),
      "%.2f" % (ram["kv_cache_and_scratch_bytes"] / 1e9), "%.2f" % (ram["expert_cache_bytes"] / 1e9), str(ram["slots_per_layer"]),
      str(ram["moe_layers"])), "stderr %s vs /stats %s" % (m and m.groups(), ram))
m = re.findall(r"^glm: POST /v1/chat/completions 200 \| (\d+) prompt tokens \((\d+) reused\), (\d+) generated", err, re.M)
check("web_stats_request_matches_log", m and tuple(map(int, m[-1])) == (r["prompt_tokens"], r["reused_tokens"], r["generated_tokens"])
      and r["phase"] == "idle" and s["totals"]["requests"] == 2 and s["totals"]["generated_tokens"] == 30 + 25
      and r["time_to_first_token_seconds"] > 0 and r["decode_tokens_per_second"] > 0,
      "log %s vs /stats %s" % (m, r))
slots = ram["slots_per_layer"]
ok = slots == 4 and all(len(L["cached"]) <= slots and L["slots"] == slots for L in x["layers"])
if x["read_ahead"] == 0 and x["history_prefetched"] == 0:   # only routed experts were loaded: they hold the slots
    ok = ok and all(set(L["cached"]) <= {e for e, n in enumerate(L["routed"]) if n} and
                    len(L["cached"]) == min(slots, sum(1 for n in L["routed"] if n)) for L in x["layers"])
check("web_stats_cached_experts", ok and x["layers"], "4 slots: %s" % [(L["layer"], L["cached"]) for L in x["layers"]])
EOF

# ---- a long prefill shows its progress; WEB=0; the key ---------------------------------------------
serve prefill USAGE=off BATCH=1 CTX=8192 WEB=0 API_KEY=sesame
code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 "$URL/")
[ "$code" = 401 ] && echo "PASS web_off: WEB=0 leaves GET / out (with API_KEY set, an unknown path is 401)" \
  || echo "FAIL web_off: GET / is $code with WEB=0 and API_KEY"
code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 "$URL/stats")
code2=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 -H 'Authorization: Bearer sesame' "$URL/stats")
[ "$code $code2" = "401 200" ] && echo "PASS web_stats_key: /stats is behind API_KEY (401 without, 200 with)" \
  || echo "FAIL web_stats_key: $code without the key, $code2 with it"
$PY - "$URL" <<'EOF'
import json, sys, threading, time, urllib.request
url = sys.argv[1]; H = {"Authorization": "Bearer sesame", "Content-Type": "application/json"}
text = " ".join("word%d" % (i % 97) for i in range(1000))
body = json.dumps({"messages": [{"role": "user", "content": text}], "temperature": 0, "max_tokens": 2}).encode()
done = []
def answer():
    done.append(urllib.request.urlopen(urllib.request.Request(url + "/v1/chat/completions", body, H), timeout=300).read())
t = threading.Thread(target=answer); t.start()
seen = []
while t.is_alive():
    s = json.load(urllib.request.urlopen(urllib.request.Request(url + "/stats", headers=H), timeout=30))
    p = s["request"]["prefill"]
    if s["request"]["phase"] == "prefill" and 0 < p["fraction"] < 1: seen.append((p["done"], p["tokens"], round(p["fraction"], 3)))
    time.sleep(0.02)
t.join()
s = json.load(urllib.request.urlopen(urllib.request.Request(url + "/stats", headers=H), timeout=30))
p = s["request"]["prefill"]
rising = all(a[2] <= b[2] for a, b in zip(seen, seen[1:]))
ok = len(seen) >= 2 and rising and p["done"] == p["tokens"] == s["request"]["prompt_tokens"] > 1000
print(("PASS web_prefill_progress: %d snapshots during a %d-token prefill, rising (%s .. %s)" % (len(seen), p["tokens"], seen[0][2], seen[-1][2]))
      if ok else "FAIL web_prefill_progress: %s, final %s" % (seen[:5], p))
EOF
stop

# ---- in a real browser -----------------------------------------------------------------------------
CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser)}
if [ -z "$CHROMIUM" ]; then
  echo "SKIP web_browser: no chromium here (Debian: apt-get install chromium; .ci/run installs it)"; exit 0
fi
if [ ! -f "$NPM_DIR/node_modules/puppeteer-core/package.json" ] ||
   ! grep -q "\"version\": \"$PUPPETEER_VERSION\"" "$NPM_DIR/node_modules/puppeteer-core/package.json"; then
  mkdir -p "$NPM_DIR"
  if ! out=$(timeout 300 npm install --prefix "$NPM_DIR" --no-audit --no-fund "puppeteer-core@$PUPPETEER_VERSION" 2>&1); then
    echo "SKIP web_browser: npm install --prefix $NPM_DIR puppeteer-core@$PUPPETEER_VERSION failed (offline?)"; echo "$out" | tail -3; exit 0
  fi
fi
serve browser USAGE=off SNAP="$T/noeos" CTX=16384
B_PID=$PID B_LOG=$LOG B_URL=$URL
serve keyed USAGE=off API_KEY=open-sesame
SHOTS=$(mktemp -d /tmp/glm_web_shots.XXXXXX)
timeout 300 node tests/web_test.mjs "$NPM_DIR" "$CHROMIUM" "$B_URL" "$URL" open-sesame "$SHOTS" | tee "$T/browser.out"
echo "web screenshots: $SHOTS"
# the server's side of the stop: the client left, the generation ended early
n=$(sed -n 's/^web_stop_generated //p' "$T/browser.out")
if grep -qE "client gone or server stopping: stopped generating after ${n:-x} generated tokens" "$B_LOG"; then
  echo "PASS web_stop_server: the server stopped generating when the page's fetch was aborted ($n of 16000 tokens)"
else echo "FAIL web_stop_server: no 'client gone' line for the stopped answer"; grep 'chat/completions' "$B_LOG" | tail -3; fi

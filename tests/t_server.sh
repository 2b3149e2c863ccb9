#!/usr/bin/env bash
# The OpenAI-compatible server (SERVE) on the tiny oracle model (tests/fixtures/oracle_dense with
# tests/fixtures/tiny_tokenizer, as t_prompt.sh assembles it), at temperature 0 on random free ports:
#   - the answer of /v1/chat/completions (JSON, the concatenated SSE deltas, and through the
#     official `openai` npm client) equals PROMPT mode's answer to the same message byte for byte
#     (THINK=0 / enable_thinking false, TEMPERATURE=0, NGEN = max_tokens); with thinking on, the
#     whole answer is reasoning_content and equals PROMPT's THINK=1 answer; /v1/completions equals
#     PROMPT with CHAT_TEMPLATE=0; a raw prompt with the template written out equals the chat answer;
#   - a tool round trip from OpenAI messages renders what TEMPLATE_ONLY renders (the same prompt
#     token count, and the same answer as PROMPT mode with MESSAGES);
#   - prefix reuse: the second request of a conversation reuses the cached prefix (logged) and
#     answers what a fresh PROMPT run answers; stop strings; usage;
#   - errors: malformed JSON and wrong types get 400 with an OpenAI error object naming the field,
#     context_length_exceeded, 404/405; API_KEY (401 without, 200 with Bearer or x-api-key);
#     QUEUE=1 with six concurrent requests (200 or 429, at least one 429); 50 concurrent requests
#     none lost or garbled; a client that disconnects mid-stream (or mid-prefill) stops its generation; hostile
#     requests (bad Content-Length, huge headers, pipelining); SIGTERM during a stream ends it with
#     [DONE] and the server exits 0; settings errors (a non-loopback address without API_KEY).
#   - the other APIs (Anthropic Messages, OpenAI Responses, Ollama) through their official npm
#     clients (tests/server_apis.mjs): the same answer byte for byte, whole and streamed, a tool
#     round trip, count_tokens, errors in each API's shape, API_KEY; thinking comes back as each
#     API's reasoning; CORS.
# The openai package is expected in $OPENAI_NPM_DIR (default /tmp/glm_openai_npm), installed there
# with npm like tests/t_http.sh does when missing; the three API clients in $API_NPM_DIR (default
# /tmp/glm_api_npm), installed there when missing (SKIP without npm or the registry).
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
unset_settings
export THREADS=1
PY=/usr/bin/python3
NPM_DIR=${OPENAI_NPM_DIR:-/tmp/glm_openai_npm}
OPENAI_VERSION=6.49.0
API_NPM_DIR=${API_NPM_DIR:-/tmp/glm_api_npm}
API_PACKAGES=("@anthropic-ai/sdk@1.17.0" "ollama@0.6.4" "openai@$OPENAI_VERSION")
T=$(mktemp -d /tmp/t_server.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
for tool in curl node; do command -v $tool >/dev/null || { echo "FAIL server_tools: $tool is not installed"; exit 1; }; done
M=$T/model; tiny_model "$M" oracle_dense   # the oracle model with the tiny tokenizer
mkdir -p "$T/noeos"
for f in config.json model.safetensors tokenizer.json; do ln -s "$M/$f" "$T/noeos/$f"; done
printf '{"eos_token_id": []}' > "$T/noeos/generation_config.json"   # answers run to max_tokens: slow ones
same() { if [ "$2" = "$3" ]; then echo "PASS $1"; else echo "FAIL $1"; echo "  want: $2"; echo "  got:  $3"; fi; }
N=40   # max_tokens of the compared answers

# serve NAME [VAR=value ...]: glm SERVE=127.0.0.1:0 on $M (SNAP=... overrides); sets PID, PORT, URL, LOG
serve() {
  local name=$1; shift
  LOG=$T/$name.err
  env SNAP="$M" SERVE=127.0.0.1:0 "$@" timeout 300 "$GLM" >"$T/$name.out" 2>"$LOG" </dev/null &
  PID=$!; PIDS+=("$PID")
  PORT=$(serving_port "$LOG" "$PID") && { URL=http://127.0.0.1:$PORT; return 0; }
  echo "FAIL server_start_$name: no 'glm: serving ... at http://127.0.0.1:PORT/v1' line"; tail -5 "$LOG"; exit 1
}
# stop NAME: SIGTERM; the server must exit 0 within 10 s and say it stopped cleanly.
stop() {
  local name=$1 rc
  kill -TERM "$PID"
  for _ in $(seq 200); do kill -0 "$PID" 2>/dev/null || break; sleep 0.05; done
  if kill -0 "$PID" 2>/dev/null; then echo "FAIL server_stop_$name: still running 10 s after SIGTERM"; kill -KILL "$PID"; return; fi
  wait "$PID"; rc=$?
  if [ $rc -eq 0 ] && grep -q "^glm: server stopped cleanly" "$LOG"; then echo "PASS server_stop_$name: SIGTERM, exit 0, stopped cleanly"
  else echo "FAIL server_stop_$name: exit $rc"; tail -5 "$LOG"; fi
}
check_py() { timeout 300 $PY tests/server_check.py "$PORT" "$@"; }
# answer NAME BODY_JSON: posts it (JSON or SSE as the body says); the text goes to $T/NAME.txt, the
# finish/usage line to $T/NAME.meta
answer() { printf '%s' "$2" > "$T/$1.json"; check_py answer "$T/$1.json" "$T/$1.txt" > "$T/$1.meta"; }
meta() { $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$T/$1.meta" "$2" 2>/dev/null; }
prompt_mode() { env SNAP="$M" TEMPERATURE=0 "$@" "$GLM" 2>/dev/null </dev/null; }
hello_body() { printf '{"model": "x", "messages": [{"role": "user", "content": "Hello"}], "temperature": 0, "max_tokens": %d%s}' "$N" "$1"; }
NOTHINK=', "chat_template_kwargs": {"enable_thinking": false}'

# ---- PROMPT mode's answers: the references -----------------------------------------------------
prompt_mode PROMPT=Hello THINK=0 NGEN=$N > "$T/want_hello.txt"
prompt_mode PROMPT=Hello THINK=1 NGEN=$N > "$T/want_hello_think.txt"
prompt_mode PROMPT=Hello THINK=1 REASONING_EFFORT=high NGEN=$N > "$T/want_hello_high.txt"
prompt_mode PROMPT=Hello CHAT_TEMPLATE=0 NGEN=$N > "$T/want_raw.txt"
if [ -s "$T/want_hello.txt" ] && ! grep -qE '<think>|</think>|<tool_call>' "$T/want_hello.txt" "$T/want_hello_think.txt"; then
  echo "PASS references: PROMPT mode answers without reasoning or tool-call tags (so content is all of it)"
else echo "FAIL references: the fixture's answers hold tags the output parser splits: the comparison would not be byte for byte"; fi

serve main QUEUE=64
same "GET /health" '{"status":"ok"}' "$(curl -sS --max-time 10 "$URL/health")"
out=$(curl -sS --max-time 10 "$URL/v1/models")
same "GET /v1/models lists the model (SNAP's folder name), max_model_len = the context" "model 4096" \
  "$($PY -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["object"]=="list" and len(d["data"])==1; m=d["data"][0]; print(m["id"], m["max_model_len"])' "$out" 2>&1)"
same "GET /v1/models/model" "model" "$(curl -sS --max-time 10 "$URL/v1/models/model" | $PY -c 'import json,sys; print(json.load(sys.stdin)["id"])')"

# ---- answers equal PROMPT mode's -------------------------------------------------------------------
answer json "$(hello_body "$NOTHINK")"
if cmp -s "$T/want_hello.txt" "$T/json.txt" && [ "$(meta json 'd["finish"], d["usage"]["completion_tokens"]')" = "('length', $N)" ]
then echo "PASS chat JSON content == PROMPT mode's answer byte for byte ($(wc -c <"$T/json.txt") bytes, finish length, $N tokens)"
else echo "FAIL chat JSON content vs PROMPT mode"; cat "$T/json.meta"; od -c "$T/want_hello.txt" | head -3; od -c "$T/json.txt" | head -3; fi
answer sse "$(hello_body "$NOTHINK, \"stream\": true, \"stream_options\": {\"include_usage\": true}")"
if cmp -s "$T/want_hello.txt" "$T/sse.txt" && [ "$(meta sse 'd["finish"], d["usage"]["completion_tokens"]')" = "('length', $N)" ]
then echo "PASS chat SSE: role first, one id, the concatenated deltas == PROMPT mode's answer, finish, usage chunk, [DONE]"
else echo "FAIL chat SSE vs PROMPT mode"; cat "$T/sse.meta"; od -c "$T/sse.txt" | head -3; fi
answer think "$(hello_body '')"
$PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["reasoning"], end="")' "$T/think.meta" > "$T/think_reasoning.txt"
if cmp -s "$T/want_hello_think.txt" "$T/think_reasoning.txt" && [ ! -s "$T/think.txt" ]
then echo "PASS thinking on (the default THINK=1): the answer is reasoning_content, equal to PROMPT THINK=1's, content empty"
else echo "FAIL thinking on: reasoning_content vs PROMPT THINK=1"; cat "$T/think.meta" | head -c 400; fi
answer thinkoff "$(hello_body ', "thinking": {"type": "disabled"}')"
cmp -s "$T/want_hello.txt" "$T/thinkoff.txt" && echo "PASS \"thinking\": {\"type\": \"disabled\"} (Z.ai's form) == enable_thinking false" \
  || echo "FAIL thinking disabled form"
answer raw "{\"prompt\": \"Hello\", \"temperature\": 0, \"max_tokens\": $N}"
cmp -s "$T/want_raw.txt" "$T/raw.txt" && echo "PASS /v1/completions text == PROMPT CHAT_TEMPLATE=0's answer" || { echo "FAIL /v1/completions vs raw PROMPT"; cat "$T/raw.meta"; }
answer rawtmpl "{\"prompt\": \"[gMASK]<sop><|user|>Hello<|assistant|><think></think>\", \"temperature\": 0, \"max_tokens\": $N, \"stream\": true}"
cmp -s "$T/want_hello.txt" "$T/rawtmpl.txt" && echo "PASS /v1/completions (streamed) with the template written out == the chat answer (tags are tokens)" \
  || { echo "FAIL /v1/completions with written tags"; cat "$T/rawtmpl.meta"; }

# ---- OpenAI's predicted outputs: drafts from the prediction, the same answer ---------------------
$PY - "$T/want_hello.txt" "$N" > "$T/predicted.json" <<'EOF'
import json, sys
want = open(sys.argv[1], "rb").read().decode()
print(json.dumps({"messages": [{"role": "user", "content": "Hello"}], "temperature": 0, "max_tokens": int(sys.argv[2]),
                  "chat_template_kwargs": {"enable_thinking": False},
                  "prediction": {"type": "content", "content": [{"type": "text", "text": want[:len(want) // 2]}, {"type": "text", "text": want[len(want) // 2:]}]}}))
EOF
# SPEC=auto (this server) drafts from it only where its timings say it pays: the answer is checked
# here, the accepted drafts under SPEC=mtp below (where a prediction always drafts)
check_py answer "$T/predicted.json" "$T/predicted.txt" > "$T/predicted.meta"
if cmp -s "$T/want_hello.txt" "$T/predicted.txt" && [ -n "$(meta predicted 'd["usage"]["completion_tokens_details"]["accepted_prediction_tokens"]')" ]; then
  echo "PASS prediction (the answer itself as text parts) under SPEC=auto: the same answer, usage.completion_tokens_details reported"
else echo "FAIL prediction under SPEC=auto"; cat "$T/predicted.meta" | head -c 400; fi
$PY - "$N" > "$T/mispredicted.json" <<'EOF'
import json, sys
print(json.dumps({"messages": [{"role": "user", "content": "Hello"}], "temperature": 0, "max_tokens": int(sys.argv[1]),
                  "chat_template_kwargs": {"enable_thinking": False},
                  "prediction": {"type": "content", "content": "something else entirely, nothing like the answer " * 20}}))
EOF
check_py answer "$T/mispredicted.json" "$T/mispredicted.txt" > "$T/mispredicted.meta"
cmp -s "$T/want_hello.txt" "$T/mispredicted.txt" && echo "PASS a wrong prediction does not change the answer" \
  || { echo "FAIL a wrong prediction changed the answer"; cat "$T/mispredicted.meta" | head -c 300; }

# ---- the official openai npm client --------------------------------------------------------------
cat > "$T/tool.json" <<'EOF'
{"messages": [{"role": "user", "content": "Weather in Paris?"},
  {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}}]},
  {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 20}"}],
 "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Current weather",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]}
EOF
prompt_mode MESSAGES="$T/tool.json" THINK=0 NGEN=$N > "$T/want_tool.txt"
if [ ! -f "$NPM_DIR/node_modules/openai/package.json" ] || ! grep -q "\"version\": \"$OPENAI_VERSION\"" "$NPM_DIR/node_modules/openai/package.json"; then
  if ! command -v npm >/dev/null; then echo "FAIL server_openai_npm: $NPM_DIR lacks openai@$OPENAI_VERSION and npm is not installed"; exit 1; fi
  mkdir -p "$NPM_DIR"
  if ! out=$(timeout 300 npm install --prefix "$NPM_DIR" --no-audit --no-fund "openai@$OPENAI_VERSION" 2>&1); then
    echo "FAIL server_openai_npm: npm install --prefix $NPM_DIR openai@$OPENAI_VERSION failed"; echo "$out" | tail -5; exit 1
  fi
fi
timeout 120 node tests/server_openai.mjs "$NPM_DIR" "$URL/v1" model "$T/want_hello.txt" "$N" "$T/tool.json" "$T/want_tool.txt"

# ---- the Anthropic, Responses and Ollama clients ---------------------------------------------------
api_clients=1
have_pkg() { local d=$API_NPM_DIR/node_modules/${1%@*}; [ -f "$d/package.json" ] && grep -q "\"version\": \"${1##*@}\"" "$d/package.json"; }
missing=(); for p in "${API_PACKAGES[@]}"; do have_pkg "$p" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  if ! command -v npm >/dev/null; then echo "SKIP server_api_clients: $API_NPM_DIR lacks ${missing[*]} and npm is not installed"; api_clients=0
  else
    mkdir -p "$API_NPM_DIR"
    if ! out=$(timeout 300 npm install --prefix "$API_NPM_DIR" --no-audit --no-fund "${API_PACKAGES[@]}" 2>&1); then
      echo "SKIP server_api_clients: npm install --prefix $API_NPM_DIR ${API_PACKAGES[*]} failed: $(echo "$out" | tail -1)"; api_clients=0
    fi
  fi
fi
[ $api_clients = 1 ] && timeout 180 node tests/server_apis.mjs "$API_NPM_DIR" "$URL" model "$T/want_hello.txt" "$N" "$T/tool.json" "$T/want_tool.txt"

# thinking on: the whole answer is each API's reasoning (PROMPT THINK=1's answer)
post() { curl -sS --max-time 60 "$URL$1" -d "$2"; }
pyget() { $PY -c "import json,sys; d=json.load(sys.stdin); sys.stdout.write($1)"; }
got=$(post /v1/messages "{\"max_tokens\": $N, \"temperature\": 0, \"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 1024}, \"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}]}" |
      pyget '"|".join(b["type"] for b in d["content"]) + "|" + d["content"][0]["thinking"]')
same "anthropic thinking enabled: one thinking block == PROMPT THINK=1's answer" "thinking|$(cat "$T/want_hello_think.txt")" "$got"
got=$(post /v1/responses "{\"max_output_tokens\": $N, \"temperature\": 0, \"reasoning\": {\"effort\": \"high\"}, \"input\": \"Hello\"}" |
      pyget 'd["output"][0]["type"] + "|" + d["output"][0]["content"][0]["text"]')
same "responses reasoning.effort high: a reasoning item == PROMPT THINK=1 REASONING_EFFORT=high's answer" "reasoning|$(cat "$T/want_hello_high.txt")" "$got"
got=$(post /api/chat "{\"stream\": false, \"think\": true, \"options\": {\"temperature\": 0, \"num_predict\": $N}, \"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}]}" |
      pyget 'd["message"]["thinking"]')
same "ollama think true: message.thinking == PROMPT THINK=1's answer" "$(cat "$T/want_hello_think.txt")" "$got"
ctype=$(curl -sS --max-time 60 -o /dev/null -w '%{content_type}' "$URL/api/chat" -d '{"options": {"num_predict": 2}, "messages": [{"role": "user", "content": "x"}]}')
same "ollama streams by default (NDJSON)" "application/x-ndjson" "$ctype"
# each API's errors in its own shape, naming the field
shape() {   # shape NAME STATUS PYTHON_CHECK PATH BODY
  local code; code=$(curl -sS --max-time 10 -o "$T/shape.json" -w '%{http_code}' "$URL$4" -d "$5")
  if [ "$code" = "$2" ] && $PY -c "import json,sys; d=json.load(open(sys.argv[1])); assert $3" "$T/shape.json" 2>/dev/null
  then echo "PASS $1"; else echo "FAIL $1: $code $(head -c 300 "$T/shape.json")"; fi
}
shape "anthropic: an image block is refused by name (400, Anthropic's shape)" 400 \
  'd["type"] == "error" and d["error"]["type"] == "invalid_request_error" and "image" in d["error"]["message"]' /v1/messages \
  '{"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}'
shape "anthropic: top_k 40 at temperature 1 is refused by name" 400 '"top_k" in d["error"]["message"]' /v1/messages \
  '{"max_tokens": 5, "temperature": 1, "top_k": 40, "messages": [{"role": "user", "content": "x"}]}'
shape "anthropic: an unknown path under /v1/messages is 404 in Anthropic's shape" 404 'd["error"]["type"] == "not_found_error"' \
  /v1/messages/batches '{}'
shape "responses: tool_choice required is refused by name" 400 'd["error"]["param"] == "tool_choice"' /v1/responses \
  '{"input": "x", "tool_choice": "required"}'
shape "responses: a web_search tool is refused by name" 400 'd["error"]["param"] == "tools" and "web_search" in d["error"]["message"]' \
  /v1/responses '{"input": "x", "tools": [{"type": "web_search"}]}'
shape "ollama: options.num_ctx beyond the context is refused (400, {\"error\": ...})" 400 '"num_ctx" in d["error"] and "4096" in d["error"]' \
  /api/chat '{"options": {"num_ctx": 100000}, "messages": [{"role": "user", "content": "x"}]}'
shape "ollama: options.repeat_penalty other than 1 is refused by name" 400 '"repeat_penalty" in d["error"]' \
  /api/generate '{"prompt": "x", "options": {"repeat_penalty": 1.2}}'
shape "ollama: /api/show of another model is 404" 404 '"not found" in d["error"]' /api/show '{"model": "llama3"}'

# ---- logprobs: the model's log-probabilities of the chosen and the top tokens --------------------------
LP_BODY=$(hello_body "$NOTHINK, \"logprobs\": true, \"top_logprobs\": 5")
post /v1/chat/completions "$LP_BODY" > "$T/lp.json"
curl -sS --max-time 60 -N "$URL/v1/chat/completions" -d "${LP_BODY%\}}, \"stream\": true}" > "$T/lp.sse"
$PY - "$T/lp.json" "$T/lp.sse" "$T/want_hello.txt" "$N" <<'EOF'
import json, math, sys
d = json.load(open(sys.argv[1]))
c = d["choices"][0]
lp = c["logprobs"]["content"]
want = open(sys.argv[3], "rb").read()
ok = len(lp) == int(sys.argv[4]) and c["message"]["content"].encode() == want
# the tokens' bytes are the answer (where they do not form UTF-8, the answer has U+FFFD, as Python decodes them)
ok = ok and b"".join(bytes(t["bytes"]) for t in lp).decode("utf-8", "replace").encode() == want
for t in lp:   # temperature 0: the chosen token is the most likely one; top 5 sorted, a distribution's part
    top = t["top_logprobs"]
    ok = ok and len(top) == 5 and top[0]["token"] == t["token"] and top[0]["logprob"] == t["logprob"] and t["logprob"] <= 0
    ok = ok and all(top[i]["logprob"] >= top[i + 1]["logprob"] for i in range(4)) and sum(math.exp(x["logprob"]) for x in top) <= 1 + 1e-6
streamed = []
for line in open(sys.argv[2]):
    if line.startswith("data: {"):
        ch = json.loads(line[6:])["choices"][0]
        streamed += (ch.get("logprobs") or {}).get("content") or []
ok = ok and streamed == lp
print(("PASS" if ok else "FAIL") + " chat logprobs (top_logprobs 5): one per token, the tokens' bytes == the answer, the chosen == the top one at "
      "temperature 0, sorted, the streamed chunks carry the same")
EOF
shape "logprobs: top_logprobs 21 is refused (at most 20)" 400 'd["error"]["param"] == "top_logprobs"' /v1/chat/completions \
  '{"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21}'
shape "logprobs: top_logprobs without logprobs is refused" 400 '"needs" in d["error"]["message"]' /v1/chat/completions \
  '{"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}'
shape "completions logprobs 2: tokens, token_logprobs, top_logprobs (2 each), text_offset" 200 \
  'len(d["choices"][0]["logprobs"]["tokens"]) == 4 and all(len(t) == 2 for t in d["choices"][0]["logprobs"]["top_logprobs"]) and d["choices"][0]["logprobs"]["text_offset"][0] == 0' \
  /v1/completions '{"prompt": "Hello", "max_tokens": 4, "temperature": 0, "logprobs": 2}'

# ---- the tool round trip renders as TEMPLATE_ONLY does -------------------------------------------
tmpl_ids=$(env SNAP="$M" TEMPLATE_ONLY=1 MESSAGES="$T/tool.json" THINK=0 "$GLM" 2>/dev/null | sed -n 2p | wc -w)
answer tool "$($PY -c 'import json,sys; d=json.load(open(sys.argv[1])); d.update(temperature=0, max_tokens=int(sys.argv[2]), chat_template_kwargs={"enable_thinking": False}); print(json.dumps(d))' "$T/tool.json" "$N")"
if [ "$(meta tool 'd["usage"]["prompt_tokens"]')" = "$tmpl_ids" ] && cmp -s "$T/want_tool.txt" "$T/tool.txt"
then echo "PASS tool round trip (assistant tool_calls, tool message, tools): $tmpl_ids prompt tokens as TEMPLATE_ONLY renders, the answer == PROMPT with MESSAGES"
else echo "FAIL tool round trip: prompt tokens $(meta tool 'd["usage"]["prompt_tokens"]') vs TEMPLATE_ONLY $tmpl_ids"; cat "$T/tool.meta" | head -c 300; fi

# ---- prefix reuse: a conversation's second request ------------------------------------------------
answer turn1 "$(printf '{"messages": [{"role": "user", "content": "Hi"}], "temperature": 0, "max_tokens": 12%s}' "$NOTHINK")"
p1=$(meta turn1 'd["usage"]["prompt_tokens"]')
$PY - "$T/turn1.txt" "$T/history.json" "$T/turn2.json" <<'EOF'
import json, sys
a = open(sys.argv[1], "rb").read().decode()
history = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": a}]
json.dump(history, open(sys.argv[2], "w"))
json.dump({"messages": history + [{"role": "user", "content": "Again"}], "temperature": 0, "max_tokens": 12,
           "chat_template_kwargs": {"enable_thinking": False}}, open(sys.argv[3], "w"))
EOF
check_py answer "$T/turn2.json" "$T/turn2.txt" > "$T/turn2.meta"
prompt_mode MESSAGES="$T/history.json" PROMPT=Again THINK=0 NGEN=12 > "$T/want_turn2.txt"
reuse=$(grep '^glm: prefix reuse: ' "$LOG" | tail -1)
cached=$(meta turn2 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')
p2=$(meta turn2 'd["usage"]["prompt_tokens"]')
if [[ $reuse =~ ^glm:\ prefix\ reuse:\ ([0-9]+)\ of\ ([0-9]+)\ prompt\ tokens$ ]] && [ "${BASH_REMATCH[1]}" = "$cached" ] &&
   [ "${BASH_REMATCH[2]}" = "$p2" ] && [ "$cached" -ge "$p1" ] && cmp -s "$T/want_turn2.txt" "$T/turn2.txt"; then
  echo "PASS prefix reuse: the second request reused $cached of $p2 prompt tokens (>= the first prompt's $p1; logged, usage.cached_tokens) and answers what PROMPT with the history answers"
else echo "FAIL prefix reuse: log '$reuse', cached $cached, prompt $p2, first prompt $p1"; od -c "$T/want_turn2.txt" | head -2; od -c "$T/turn2.txt" | head -2; fi

check_py stop "$T/want_hello.txt" "$N"

# ---- errors ---------------------------------------------------------------------------------------
err() {   # err NAME STATUS PATTERN CURL_ARGS...: the status and an OpenAI error object matching PATTERN
  local name=$1 want=$2 pat=$3; shift 3
  local code; code=$(curl -sS --max-time 10 -o "$T/err.json" -w '%{http_code}' "$@")
  if [ "$code" = "$want" ] && $PY -c 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; assert isinstance(e["message"], str) and isinstance(e["type"], str)' "$T/err.json" 2>/dev/null &&
     grep -qE -- "$pat" "$T/err.json"; then echo "PASS $name"; else echo "FAIL $name: $code $(head -c 300 "$T/err.json")"; fi
}
err "malformed JSON: 400 with an error object" 400 'not valid JSON: line 1' "$URL/v1/chat/completions" -d '{"messages": ['
err "a body that is not an object: 400" 400 'must be a JSON object' "$URL/v1/chat/completions" -d '[1]'
err "a wrong type is named: 400, param max_tokens" 400 '"param":"max_tokens"' "$URL/v1/chat/completions" -d '{"messages":[{"role":"user","content":"x"}],"max_tokens":"9"}'
err "an unsupported value is refused by name: n=2" 400 '"param":"n"' "$URL/v1/chat/completions" -d '{"messages":[{"role":"user","content":"x"}],"n":2}'
err "a bad message is named" 400 'message 0 has role \\"robot\\"' "$URL/v1/chat/completions" -d '{"messages":[{"role":"robot","content":"x"}]}'
err "context length exceeded: 400 with the numbers" 400 '"code":"context_length_exceeded".*|context_length_exceeded' "$URL/v1/chat/completions" \
  -d '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":5000}'
grep -q 'holds 4096 tokens (CTX) but the request needs 50' "$T/err.json" && echo "PASS ...naming the context, the need, the prompt and max_tokens" || echo "FAIL context message: $(cat "$T/err.json")"
err "unknown path: 404" 404 'no endpoint /v1/embeddings' "$URL/v1/embeddings" -d '{}'
err "GET on a completion endpoint: 405" 405 'takes POST' "$URL/v1/chat/completions"
code=$(curl -sS --max-time 10 -o /dev/null -w '%{http_code}' "$URL/v1/chat/completions" -d '{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"some_new_field":{"a":1}}')
same "an unknown field is ignored: 200" 200 "$code"
code=$(curl -sS --max-time 10 -o /dev/null -w '%{http_code}' "$URL/chat/completions" -d '{"messages":[{"role":"user","content":"x"}],"max_tokens":2}')
same "the path without /v1 works too" 200 "$code"
grep -qE '^glm: POST /v1/chat/completions 200 \| [0-9]+ prompt tokens \([0-9]+ reused\), [0-9]+ generated(, [0-9]+ of [0-9]+ drafts accepted)?(, [0-9]+ steps shared a forward with other slots)?, finish length \| [0-9.]+ s$' "$LOG" &&
  grep -qE '^glm: POST /v1/chat/completions 400 \| .* \| [0-9.]+ s$' "$LOG" && grep -qE '^glm: GET /v1/models 200 \| [0-9.]+ s$' "$LOG" \
  && echo "PASS one log line per request: method path status tokens seconds" || { echo "FAIL log lines"; tail -5 "$LOG"; }

hdr=$(curl -sS --max-time 10 -D - -o /dev/null "$URL/v1/models" -H 'Origin: http://a.example' | tr -d '\r' | grep -ic '^access-control')
same "CORS off (the default): no CORS headers" 0 "$hdr"

# ---- load, hostile requests ----------------------------------------------------------------------
for i in 0 1 2 3 4; do prompt_mode PROMPT=m$i THINK=0 NGEN=8 > "$T/m$i.txt"; done
check_py load 50 "$T"/m[0-4].txt
check_py hostile "$T/want_hello.txt" "$N"
stop main

# ---- slow answers (no EOS ids: every answer runs to max_tokens) -----------------------------------
serve slow SNAP="$T/noeos" QUEUE=64
check_py disconnect "$LOG"
# SIGTERM during a stream: the stream ends with [DONE], the server exits 0
curl -sS -N --max-time 60 "$URL/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":3000,"stream":true}' >"$T/term.sse" &
cpid=$!
for _ in $(seq 100); do [ "$(grep -c '^data: ' "$T/term.sse" 2>/dev/null)" -ge 3 ] && break; sleep 0.05; done
stop slow
wait $cpid; crc=$?
[ $crc -eq 0 ] && tail -c 20 "$T/term.sse" | grep -q 'data: \[DONE\]' && echo "PASS SIGTERM during a stream: the stream ends with [DONE]" \
  || { echo "FAIL SIGTERM during a stream: curl exit $crc"; tail -c 300 "$T/term.sse"; }

# a long prefill (about 12k tokens one at a time: seconds) is stopped when its client leaves
$PY -c 'import random; random.seed(1); w = "alpha beta gamma delta river stone cloud seven".split(); print(" ".join(random.choice(w) for _ in range(3000)))' > "$T/long.txt"
serve longprefill BATCH=1 CTX=16384
check_py prefill_disconnect "$LOG" "$T/long.txt"
stop longprefill

serve queue1 SNAP="$T/noeos" QUEUE=1
check_py queue1 6
stop queue1

# ---- API_KEY ---------------------------------------------------------------------------------------
serve auth API_KEY=sk-test-key
timeout 60 $PY tests/http_hostile.py "$PORT" auth sk-test-key
timeout 60 node tests/http_openai.mjs "$NPM_DIR" "$URL/v1" wrong-key wrong_key
[ $api_clients = 1 ] && timeout 60 node tests/server_apis.mjs "$API_NPM_DIR" "$URL" model - 2 - - sk-test-key
code=$(curl -sS --max-time 10 -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer sk-test-key' "$URL/v1/chat/completions" -d '{"messages":[{"role":"user","content":"x"}],"max_tokens":2}')
same "API_KEY: a chat with the right key: 200" 200 "$code"
stop auth

# ---- speculation applies as in the CLI: the same answers, greedy and sampled ---------------------
prompt_mode PROMPT=Hello THINK=0 NGEN=$N TEMPERATURE=0.8 SEED=7 SPEC=off > "$T/want_sampled.txt"
serve spec SPEC=mtp DRAFT=3
answer specjson "$(hello_body "$NOTHINK")"
answer specsse "$(hello_body "$NOTHINK, \"stream\": true")"
answer specsampled "$(printf '{"messages": [{"role": "user", "content": "Hello"}], "temperature": 0.8, "seed": 7, "max_tokens": %d%s}' "$N" "$NOTHINK")"
check_py answer "$T/predicted.json" "$T/specpredicted.txt" > "$T/specpredicted.meta"
# logprobs of drafted tokens (the prediction makes drafts that are accepted): their logits come from the verify pass
$PY -c 'import json,sys; d=json.load(open(sys.argv[1])); d.update(logprobs=True, top_logprobs=5); print(json.dumps(d))' "$T/predicted.json" > "$T/predlp.json"
curl -sS --max-time 60 "$URL/v1/chat/completions" -d @"$T/predlp.json" > "$T/speclp.json"
got=$($PY -c 'import json,sys; a, b = (json.load(open(f))["choices"][0]["logprobs"] for f in sys.argv[1:]); print(a == b and len(a["content"]) > 0)' "$T/lp.json" "$T/speclp.json")
same "logprobs under SPEC=mtp with accepted drafts == SPEC=auto's without, bit for bit" True "$got"
acc=$(meta specpredicted 'd["usage"]["completion_tokens_details"]["accepted_prediction_tokens"]')
if cmp -s "$T/want_hello.txt" "$T/specpredicted.txt" && [ "${acc:-0}" -gt 0 ]; then
  echo "PASS prediction under SPEC=mtp (a prediction drafts alone): the same answer, $acc predicted tokens accepted (usage.completion_tokens_details)"
else echo "FAIL prediction under SPEC=mtp: accepted '${acc}'"; head -c 400 "$T/specpredicted.meta"; fi
drafted=$(sed -nE 's/^glm: POST .* 200 \| .*, [0-9]+ of ([0-9]+) drafts accepted, .*/\1/p' "$LOG" | awk '{ n += $1 } END { print n + 0 }')
if cmp -s "$T/want_hello.txt" "$T/specjson.txt" && cmp -s "$T/want_hello.txt" "$T/specsse.txt" && cmp -s "$T/want_sampled.txt" "$T/specsampled.txt" &&
   [ "${drafted:-0}" -gt 0 ]; then
  echo "PASS SPEC=mtp DRAFT=3 server: JSON and SSE answers == PROMPT SPEC=off's, a sampled one (temperature 0.8, seed 7) too; $drafted drafts made"
else echo "FAIL server speculation: drafted '${drafted}'"; cmp "$T/want_hello.txt" "$T/specjson.txt"; cmp "$T/want_sampled.txt" "$T/specsampled.txt"; grep '^glm: POST' "$LOG" | tail -3; fi
stop spec

# ---- SESSION: the server's cache survives a restart -----------------------------------------------
S=$T/server.session
serve sess1 SESSION="$S"
grep -q "^glm: SESSION=$S: a new file" "$LOG" && echo "PASS SESSION with SERVE: a missing file is announced as new" || { echo "FAIL SESSION new file line"; tail -3 "$LOG"; }
answer sturn1 "$(printf '{"messages": [{"role": "user", "content": "Hi"}], "temperature": 0, "max_tokens": 12%s}' "$NOTHINK")"
stop sess1
if cmp -s "$T/turn1.txt" "$T/sturn1.txt" && [ -s "$S" ] && ! ls "$S".tmp* >/dev/null 2>&1; then echo "PASS SESSION: the first answer is the same, and the cache is saved (no temp file left)"
else echo "FAIL SESSION save: $(ls -la "$T" | grep session)"; fi
serve sess2 SESSION="$S"
back=$(sed -nE "s|^glm: SESSION=$S: ([0-9]+) tokens back in the KV cache.*|\1|p" "$LOG")
check_py answer "$T/turn2.json" "$T/sturn2.txt" > "$T/sturn2.meta"
reuse=$(grep '^glm: prefix reuse: ' "$LOG" | tail -1)
if [ -n "$back" ] && [ "$back" -ge "$p1" ] && [[ $reuse =~ ^glm:\ prefix\ reuse:\ ([0-9]+)\ of ]] && [ "${BASH_REMATCH[1]}" -ge "$p1" ] &&
   cmp -s "$T/want_turn2.txt" "$T/sturn2.txt"; then
  echo "PASS SESSION: a restarted server has $back tokens back, the conversation's next request reuses ${BASH_REMATCH[1]} of them and answers what PROMPT with the history answers"
else echo "FAIL SESSION restart: back '$back', reuse '$reuse', first prompt $p1"; od -c "$T/sturn2.txt" | head -2; fi
stop sess2
printf 'not a session' > "$T/junk.session"
expect_fail "SESSION with SERVE: a file that is not a session is refused by name" "SESSION=$T/junk.session .*session" \
  env SNAP="$M" SERVE=127.0.0.1:0 SESSION="$T/junk.session" timeout 60 "$GLM"
tiny_model "$T/sparse" oracle_sparse
expect_fail "SESSION with SERVE: another model's session is refused, not overwritten" "SESSION=$S .*(model|weights|config)" \
  env SNAP="$T/sparse" SERVE=127.0.0.1:0 SESSION="$S" timeout 60 "$GLM"

# ---- settings ----------------------------------------------------------------------------------------
expect_fail "SERVE on a non-loopback address without API_KEY refuses to start" 'SERVE=0\.0\.0\.0:0 can be reached from other machines: set API_KEY' \
  env SNAP="$M" SERVE=0.0.0.0:0 timeout 20 "$GLM"
expect_fail "SERVE with a bad port is named" 'SERVE=127\.0\.0\.1:99999: .*port' env SNAP="$M" SERVE=127.0.0.1:99999 timeout 20 "$GLM"
expect_fail "SERVE and PROMPT together are refused" 'SERVE=8080 is a mode of its own' env SNAP="$M" SERVE=8080 PROMPT=x timeout 20 "$GLM"
expect_fail "QUEUE out of range is refused" 'QUEUE=-1' env SNAP="$M" SERVE=127.0.0.1:0 QUEUE=-1 timeout 20 "$GLM"
serve named MODEL_NAME=glm-5.2-test CTX=256 CORS=http://a.example,http://b.example
same "MODEL_NAME and CTX: /v1/models says glm-5.2-test, max_model_len 256" "glm-5.2-test 256" \
  "$(curl -sS --max-time 10 "$URL/v1/models" | $PY -c 'import json,sys; m=json.load(sys.stdin)["data"][0]; print(m["id"], m["max_model_len"])')"
# ---- CORS ------------------------------------------------------------------------------------------
pre=$(curl -sS --max-time 10 -i -X OPTIONS "$URL/v1/messages" -H 'Origin: http://b.example' -H 'Access-Control-Request-Method: POST' \
      -H 'Access-Control-Request-Headers: x-api-key, content-type' | tr -d '\r')
if grep -q '^HTTP/1.1 204' <<<"$pre" && grep -q '^Access-Control-Allow-Origin: http://b.example$' <<<"$pre" &&
   grep -q '^Access-Control-Allow-Headers: x-api-key, content-type$' <<<"$pre" && grep -q '^Access-Control-Allow-Methods: .*POST' <<<"$pre"
then echo "PASS CORS: a preflight from an allowed origin gets 204 with the origin, methods and the headers it asked for"
else echo "FAIL CORS preflight: $pre"; fi
code=$(curl -sS --max-time 10 -o /dev/null -w '%{http_code}' -X OPTIONS "$URL/v1/chat/completions" -H 'Origin: http://evil.example')
same "CORS: a preflight from another origin gets 403" 403 "$code"
hdr=$(curl -sS --max-time 60 -D - -o /dev/null "$URL/api/chat" -H 'Origin: http://a.example' \
      -d '{"stream": false, "options": {"num_predict": 2}, "messages": [{"role": "user", "content": "x"}]}' | tr -d '\r' | grep -i '^access-control-allow-origin')
same "CORS: an answer from the worker carries Access-Control-Allow-Origin for an allowed origin" "Access-Control-Allow-Origin: http://a.example" "$hdr"
hdr=$(curl -sS --max-time 10 -D - -o /dev/null "$URL/v1/models" -H 'Origin: http://evil.example' | tr -d '\r' | grep -ic '^access-control')
same "CORS: another origin gets no CORS headers" 0 "$hdr"
stop named
exit 0

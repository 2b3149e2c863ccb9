#!/usr/bin/env bash
# Forced tool calls (tool_choice): the answer is GLM tool calls whose arguments follow each tool's
# parameters schema (grammar.h's grammar_tool_calls through the Generator's allowed-token mask). On
# the tiny random-weight model (tests/fixtures/oracle_dense + tiny_tokenizer, which holds the six
# tool-call tags as added tokens): at temperature 1 over 20 seeds, through OpenAI chat ("required",
# a named function, parallel_tool_calls false), Anthropic messages (any, tool, disable_parallel_
# tool_use) and Responses ("required", a named function), every answer is tool calls that the reply
# parser reads back, each naming a tool (the forced one when named) with arguments that validate
# against its schema (objects with nested arrays, enums, integer ranges, anyOf, $ref); finish_reason
# tool_calls / stop_reason tool_use; SPEC=off and SPEC=mtp give the same answers, sampled and greedy;
# a max_tokens cut gives finish_reason length; a keyword the grammar does not enforce and an
# unknown forced name are 400s naming the cause; parallel_tool_calls false under auto is taken.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
unset_settings
export THREADS=1
PY=/usr/bin/python3
T=$(mktemp -d /tmp/t_toolchoice.XXXXXX)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; [ -n "$KEEP" ] || rm -rf "$T"' EXIT
M=$T/model; tiny_model "$M" oracle_dense

cat >"$T/tools.json" <<'EOF'
[{"type": "function", "function": {"name": "get_weather", "description": "Weather",
  "parameters": {"type": "object", "properties": {
     "city": {"type": "string", "minLength": 1, "maxLength": 12},
     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
     "days": {"type": "integer", "minimum": 1, "maximum": 14},
     "note": {"type": "string", "maxLength": 6}},
   "required": ["city", "days"], "additionalProperties": false}}},
 {"type": "function", "function": {"name": "plan", "description": "Plan steps",
  "parameters": {"type": "object",
   "$defs": {"step": {"type": "object", "properties": {
       "id": {"type": "integer", "minimum": 0, "maximum": 99},
       "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 2}},
     "required": ["id", "tags"], "additionalProperties": false}},
   "properties": {
     "steps": {"type": "array", "items": {"$ref": "#/$defs/step"}, "minItems": 1, "maxItems": 3},
     "mode": {"anyOf": [{"type": "integer", "minimum": -5, "maximum": 5}, {"type": "null"},
                        {"$ref": "#/$defs/step"}]},
     "fast": {"type": "boolean"}},
   "required": ["steps", "mode"], "additionalProperties": false}}},
 {"type": "function", "function": {"name": "ping", "description": "No arguments",
  "parameters": {"type": "object", "properties": {}}}}]
EOF
# One script for the three APIs: `body API SEED CHOICE [MAX]` writes a request, `calls API FILE`
# prints the answer's calls as JSON lines {name, arguments, finish} and checks them.
cat >"$T/tc.py" <<'EOF'
import json, sys
sys.path.insert(0, "tests")   # run from the repository root
from schema_subset import valid
tools = json.load(open(sys.argv[2]))
def schema_of(name):
    return next(t["function"]["parameters"] for t in tools if t["function"]["name"] == name)
mode = sys.argv[1]
if mode == "body":
    api, seed, choice = sys.argv[3], int(sys.argv[4]), sys.argv[5]
    mx = int(sys.argv[6]) if len(sys.argv) > 6 else 300
    temp = 0 if seed == 0 else 1
    # Anthropic and Responses have no seed field (the servers run with SEED=7): the prompt varies
    msg = [{"role": "user", "content": f"Call a tool ({seed})."}]
    if api == "chat":
        b = {"model": "m", "messages": msg, "tools": tools, "temperature": temp, "seed": seed,
             "max_tokens": mx, "chat_template_kwargs": {"enable_thinking": False}}
        if choice == "required": b["tool_choice"] = "required"
        elif choice == "one": b["tool_choice"] = "required"; b["parallel_tool_calls"] = False
        else: b["tool_choice"] = {"type": "function", "function": {"name": choice}}
    elif api == "anthropic":
        b = {"model": "m", "messages": msg, "max_tokens": mx, "temperature": temp, "seed": seed,
             "thinking": {"type": "disabled"},
             "tools": [{"name": t["function"]["name"], "description": t["function"]["description"],
                        "input_schema": t["function"]["parameters"]} for t in tools]}
        if choice == "required": b["tool_choice"] = {"type": "any"}
        elif choice == "one": b["tool_choice"] = {"type": "any", "disable_parallel_tool_use": True}
        else: b["tool_choice"] = {"type": "tool", "name": choice}
    else:
        b = {"model": "m", "input": msg[0]["content"], "max_output_tokens": mx, "temperature": temp,
             "seed": seed, "reasoning": {"effort": "none"},
             "tools": [dict(type="function", **t["function"]) for t in tools]}
        if choice == "required": b["tool_choice"] = "required"
        elif choice == "one": b["tool_choice"] = "required"; b["parallel_tool_calls"] = False
        else: b["tool_choice"] = {"type": "function", "name": choice}
    print(json.dumps(b))
    sys.exit(0)
# calls API FILE CHOICE: the calls, one JSON line each, then the finish reason; exit 1 if invalid
api, path, choice = sys.argv[3], sys.argv[4], sys.argv[5]
d = json.load(open(path))
calls, finish = [], None
if api == "chat":
    c = d["choices"][0]
    finish = c["finish_reason"]
    for tc in c["message"].get("tool_calls") or []:
        calls.append((tc["function"]["name"], json.loads(tc["function"]["arguments"])))
    text = c["message"].get("content") or ""
elif api == "anthropic":
    finish = d["stop_reason"]
    calls = [(b["name"], b["input"]) for b in d["content"] if b["type"] == "tool_use"]
    text = "".join(b.get("text", "") for b in d["content"] if b["type"] == "text")
else:
    finish = d["status"]
    calls = [(o["name"], json.loads(o["arguments"])) for o in d["output"] if o["type"] == "function_call"]
    text = "".join(p["text"] for o in d["output"] if o["type"] == "message" for p in o["content"])
for name, args in calls: print(json.dumps([name, args], sort_keys=True))
print(finish)
want_finish = {"chat": "tool_calls", "anthropic": "tool_use", "responses": "completed"}[api]
bad = []
if choice == "length":
    if finish != {"chat": "length", "anthropic": "max_tokens", "responses": "incomplete"}[api]:
        bad.append(f"finish {finish}")
else:
    if finish != want_finish: bad.append(f"finish {finish}")
    if text.strip(): bad.append(f"text {text!r}")
    if not calls: bad.append("no call")
    if choice != "required" and len(calls) != 1: bad.append(f"{len(calls)} calls")
    for name, args in calls:
        if choice not in ("required", "one") and name != choice: bad.append(f"called {name}")
        elif not valid(args, schema_of(name), closed=True): bad.append(f"{name}({args}) invalid")
if bad:
    sys.stderr.write(f"  {path}: {'; '.join(bad)}\n")
    sys.exit(1)
EOF

start() {  # start NAME SETTINGS...: a server, its port in $T/NAME.port
  local name=$1; shift
  env SNAP="$M" SERVE=127.0.0.1:0 "$@" timeout 600 "$GLM" >"$T/$name.out" 2>"$T/$name.log" </dev/null &
  PIDS+=($!)
}
start off SPEC=off SEED=7
start mtp SPEC=mtp SEED=7
P_OFF=$(serving_port "$T/off.log") P_MTP=$(serving_port "$T/mtp.log")
[ -n "$P_OFF" ] && [ -n "$P_MTP" ] || { echo "FAIL SERVE did not start"; tail -3 "$T"/*.log; exit 1; }
path_of() { case $1 in chat) echo /v1/chat/completions ;; anthropic) echo /v1/messages ;; *) echo /v1/responses ;; esac; }
ask() {  # ask PORT API SEED CHOICE OUT [MAX]
  $PY "$T/tc.py" body "$T/tools.json" "$2" "$3" "$4" ${6:+"$6"} >"$5.body"
  curl -sS --max-time 300 "http://127.0.0.1:$1$(path_of "$2")" -H 'Content-Type: application/json' \
    -H 'anthropic-version: 2023-06-01' -d @"$5.body" >"$5"
}

choices=(required get_weather plan one ping)
for api in chat anthropic responses; do
  ok=1 same=1 n_calls=0
  for seed in $(seq 0 20); do   # seed 0: greedy
    choice=${choices[$((seed % 5))]}
    ask "$P_OFF" $api "$seed" "$choice" "$T/$api.$seed.off"
    ask "$P_MTP" $api "$seed" "$choice" "$T/$api.$seed.mtp"
    $PY "$T/tc.py" calls "$T/tools.json" $api "$T/$api.$seed.off" "$choice" >"$T/$api.$seed.off.calls" || ok=0
    $PY "$T/tc.py" calls "$T/tools.json" $api "$T/$api.$seed.mtp" "$choice" >"$T/$api.$seed.mtp.calls" || ok=0
    cmp -s "$T/$api.$seed.off.calls" "$T/$api.$seed.mtp.calls" || { same=0; echo "  $api seed $seed: SPEC=mtp differs"; }
    n_calls=$((n_calls + $(wc -l <"$T/$api.$seed.off.calls") - 1))
  done
  if [ $ok = 1 ]; then echo "PASS $api forced tool calls, greedy and TEMP=1 x 20 seeds: $n_calls calls, each read back, named as forced, arguments valid"
  else echo "FAIL $api forced tool calls: answers above break the tool choice or the schema"; fi
  if [ $same = 1 ]; then echo "PASS $api forced tool calls: SPEC=mtp answers as SPEC=off (greedy and sampled)"
  else echo "FAIL $api forced tool calls: SPEC=mtp differs from SPEC=off"; fi
  n_distinct=$(cat "$T"/$api.*.off.calls | sort -u | wc -l)
  want=10; [ $api = chat ] || want=5   # one server seed: only the prompt's number varies
  if [ "$n_distinct" -ge $want ]; then echo "PASS $api: the seeds give $n_distinct different calls"
  else echo "FAIL $api: only $n_distinct different calls"; fi
  ask "$P_OFF" $api 3 plan "$T/$api.cut" 6
  if $PY "$T/tc.py" calls "$T/tools.json" $api "$T/$api.cut" length >/dev/null
  then echo "PASS $api: a forced call cut by max_tokens ends as length"
  else echo "FAIL $api: max_tokens cut: $(head -c 300 "$T/$api.cut")"; fi
done
# thinking on: the reasoning is free, the calls come after </think>, and the answer cannot end
# before them (eos is masked while the constraint waits for </think>): every answer is reasoning
# then valid forced calls (finish tool_calls), or cut by max_tokens (finish length), never a
# plain stop.
ok=0 bad=0 cut=0
for seed in $(seq 41 80); do
  $PY "$T/tc.py" body "$T/tools.json" chat "$seed" required 600 |
    $PY -c 'import json,sys; b=json.load(sys.stdin); b["chat_template_kwargs"]={"enable_thinking": True}; print(json.dumps(b))' >"$T/think$seed.body"
  curl -sS --max-time 300 "http://127.0.0.1:$P_OFF/v1/chat/completions" -H 'Content-Type: application/json' -d @"$T/think$seed.body" >"$T/think$seed"
  finish=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["finish_reason"])' "$T/think$seed" 2>/dev/null)
  if [ "$finish" = length ]; then cut=$((cut + 1)); continue; fi
  if [ "$finish" = tool_calls ] && $PY "$T/tc.py" calls "$T/tools.json" chat "$T/think$seed" required >/dev/null &&
     $PY -c 'import json,sys; m=json.load(open(sys.argv[1]))["choices"][0]["message"]; sys.exit(not m.get("reasoning_content"))' "$T/think$seed"
  then ok=$((ok + 1)); else bad=$((bad + 1)); echo "  $T/think$seed: finish $finish"; fi
done
if [ $bad = 0 ] && [ $ok -gt 0 ]; then echo "PASS chat with thinking on: reasoning, then valid forced calls ($ok of 40; $cut cut by max_tokens, none ended without a call)"
else echo "FAIL chat with thinking on: $bad bad answers, $ok good, $cut cut"; fi
# without tool_choice the same request's answer is no tool call: the mask is what makes it one
$PY - "$T/tools.json" >"$T/free.body" <<'EOF'
import json, sys
print(json.dumps({"model": "m", "messages": [{"role": "user", "content": "Call a tool (1)."}],
                  "tools": json.load(open(sys.argv[1])), "temperature": 1, "seed": 1,
                  "max_tokens": 300, "chat_template_kwargs": {"enable_thinking": False}}))
EOF
curl -sS --max-time 300 "http://127.0.0.1:$P_OFF/v1/chat/completions" -H 'Content-Type: application/json' -d @"$T/free.body" >"$T/free.json"
if $PY -c 'import json,sys; c=json.load(open(sys.argv[1]))["choices"][0]; sys.exit(bool(c["message"].get("tool_calls")))' "$T/free.json"
then echo "PASS without tool_choice the same request calls no tool"
else echo "FAIL without tool_choice the answer calls a tool already: the test proves nothing"; fi

# ---- refusals ----------------------------------------------------------------------------------
post400() {  # post400 NAME PATH BODY NEEDLE
  local code
  code=$(curl -sS --max-time 30 -o "$T/e.json" -w '%{http_code}' "http://127.0.0.1:$P_OFF$2" \
    -H 'Content-Type: application/json' -H 'anthropic-version: 2023-06-01' -d "$3")
  if [ "$code" = 400 ] && grep -qF -- "$4" "$T/e.json"; then echo "PASS $1: 400 naming it"
  else echo "FAIL $1: $code $(head -c 300 "$T/e.json")"; fi
}
PAT='[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "string", "pattern": "^a"}}}}}]'
post400 "chat: an unenforced keyword" /v1/chat/completions \
  "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": $PAT, \"tool_choice\": \"required\"}" \
  "tools[0].function.parameters/properties/x: keyword 'pattern' is not enforced"
post400 "anthropic: an unenforced keyword" /v1/messages \
  '{"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f", "input_schema": {"type": "object", "properties": {"x": {"type": "integer", "multipleOf": 2}}}}], "tool_choice": {"type": "any"}}' \
  "tools[0].input_schema/properties/x: keyword 'multipleOf' is not enforced"
post400 "responses: an unenforced keyword" /v1/responses \
  '{"input": "x", "tools": [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "string", "format": "date"}}}}], "tool_choice": "required"}' \
  "tools[0].parameters/properties/x: keyword 'format' is not enforced"
post400 "chat: an unknown forced name" /v1/chat/completions \
  "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": $(cat "$T/tools.json"), \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"nope\"}}}" \
  'names the function \"nope\", which is not in \"tools\"'
post400 "anthropic: an unknown forced name" /v1/messages \
  '{"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "tool", "name": "g"}}' \
  'names the function \"g\"'
# parallel_tool_calls false under auto is taken (the answer ends after its first call:
# test_server_apis), as the SDKs that send it by default expect
code=$(curl -sS --max-time 60 -o "$T/e.json" -w '%{http_code}' "http://127.0.0.1:$P_OFF/v1/chat/completions" \
  -H 'Content-Type: application/json' \
  -d "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": 4, \"tools\": $(cat "$T/tools.json"), \"parallel_tool_calls\": false}")
[ "$code" = 200 ] && echo "PASS chat: parallel_tool_calls false under auto is taken" \
  || echo "FAIL chat: parallel_tool_calls false under auto: $code $(head -c 300 "$T/e.json")"
post400 "chat: required without tools" /v1/chat/completions \
  '{"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"}' 'needs \"tools\"'

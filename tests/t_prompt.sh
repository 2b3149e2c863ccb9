#!/usr/bin/env bash
# Text in, text out without a terminal: TOKENIZE mode against the transformers.js ids of the tiny
# tokenizer; the chat templates (chat.h through glm.c: GLM-5.2 by default, GLM-5.0 forced or
# detected from a model folder's template text, MESSAGES with tools) against the literal strings of
# docs/tokenizer.md §3.6 and §3.4, and their ids; CHAT's KV cache against the ids of the rendered
# conversation; PROMPT mode on the tiny oracle model (tests/fixtures/oracle_dense + tiny_tokenizer/tokenizer.json,
# whose ids match: vocab 512, eos 476 483 485): TEMP=0 streams exactly the text of greedy decoding,
# SEED makes sampling repeatable, NGEN and EOS stop it, and the EOS token is not printed.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
unset_settings
export THREADS=2
PY=/usr/bin/python3
F=tests/fixtures
T=$(mktemp -d /tmp/t_prompt.XXXXXX); trap 'rm -rf "$T"' EXIT
M=$T/model; tiny_model "$M" oracle_dense   # the oracle model with the tiny tokenizer
same() { if [ "$2" = "$3" ]; then echo "PASS $1"; else echo "FAIL $1"; echo "  want: $2"; echo "  got:  $3"; fi; }

# ---- TOKENIZE --------------------------------------------------------------------------------
# corpus texts as JSON-string lines; the reference ids: "special" = every added token recognised
# (SPECIAL=1), "plain" = text only (SPECIAL=0)
$PY - "$T" <<'EOF'
import json, sys
out = sys.argv[1]
texts = [json.loads(l)["text"] for l in open("tests/tok/corpus.jsonl")]
refs = [json.loads(l) for l in open("tests/tok/ref_tiny.jsonl")]
with open(out + "/lines.txt", "w") as f:
    for t in texts: f.write(json.dumps(t) + "\n")
for mode in ("special", "plain"):
    with open(out + "/want_" + mode + ".txt", "w") as f:
        for r in refs: f.write(" ".join(map(str, r[mode]["ids"])) + "\n")
EOF
SNAP=$M TOKENIZE=$T/lines.txt SPECIAL=1 "$GLM" >"$T/got_special.txt" 2>"$T/err" </dev/null
if cmp -s "$T/want_special.txt" "$T/got_special.txt"; then echo "PASS TOKENIZE SPECIAL=1: $(wc -l <"$T/got_special.txt") corpus lines equal the reference ids"
else echo "FAIL TOKENIZE SPECIAL=1 differs from tests/tok/ref_tiny.jsonl"; diff "$T/want_special.txt" "$T/got_special.txt" | head -5; cat "$T/err"; fi
SNAP=$M TOKENIZE=$T/lines.txt "$GLM" >"$T/got_plain.txt" 2>"$T/err" </dev/null
if cmp -s "$T/want_plain.txt" "$T/got_plain.txt"; then echo "PASS TOKENIZE SPECIAL=0: corpus lines equal the reference plain-text ids"
else echo "FAIL TOKENIZE SPECIAL=0 differs"; diff "$T/want_plain.txt" "$T/got_plain.txt" | head -5; cat "$T/err"; fi
printf '%s\n' '"<|user|>Hi<think>"' > "$T/tags.txt"
same "TOKENIZE SPECIAL=1 turns written tags into their ids" "483 39 72 497" "$(SNAP=$M SPECIAL=1 TOKENIZE=$T/tags.txt "$GLM" 2>&1)"
got=$(SNAP=$M TOKENIZE=$T/tags.txt "$GLM" 2>&1)
if [ -n "$got" ] && ! grep -qwE '483|497' <<<"$got"; then echo "PASS TOKENIZE SPECIAL=0 keeps written tags as text ($got)"; else echo "FAIL TOKENIZE SPECIAL=0: $got"; fi
# an endless TOKENIZE file is refused at once (regression guard: /dev/zero grew one line until memory ran out)
expect_fail "TOKENIZE=/dev/zero is refused" 'TOKENIZE=/dev/zero: not a file' env SNAP=$M TOKENIZE=/dev/zero timeout -k 5 30 "$GLM"
mkdir -p "$T/zerotok"; ln -s /dev/zero "$T/zerotok/tokenizer.json"
expect_fail "tokenizer.json linked to /dev/zero is refused" 'zerotok/tokenizer\.json: is a character device' env SNAP=$T/zerotok TOKENIZE=$T/tags.txt timeout -k 5 30 "$GLM"
expect_fail "MESSAGES=/dev/zero is refused" '/dev/zero: is a character device' env SNAP=$M MESSAGES=/dev/zero timeout -k 5 30 "$GLM" 64 16 16
# TOKENIZE needs nothing but tokenizer.json
mkdir -p "$T/tokonly"; ln -s "$ROOT/$F/tiny_tokenizer/tokenizer.json" "$T/tokonly/tokenizer.json"
same "TOKENIZE needs only tokenizer.json in SNAP" "406 398 299" "$(echo '"Hello world"' | SNAP=$T/tokonly TOKENIZE=/dev/stdin "$GLM" 2>&1)"
printf '"ok"\nnot json\n' > "$T/bad.txt"
expect_fail "TOKENIZE: a line that is not JSON names the file and line" 'bad\.txt: line 2' env SNAP=$M TOKENIZE=$T/bad.txt "$GLM"
printf '"ok"\n42\n' > "$T/num.txt"
expect_fail "TOKENIZE: a line that is not a string names the line" 'num\.txt: line 2 is not a JSON string' env SNAP=$M TOKENIZE=$T/num.txt "$GLM"
expect_fail "TOKENIZE: a model directory without tokenizer.json is named" 'oracle_dense/tokenizer\.json' env SNAP=$F/oracle_dense TOKENIZE=$T/tags.txt "$GLM"

# ---- the chat template (docs/tokenizer.md §3.6 GLM-5.2 and §3.4 GLM-5.0, literal strings) -----
# The fixture folder has no template text, so auto means GLM-5.2.
tmpl() { env SNAP=$M TEMPLATE_ONLY=1 "$@" "$GLM" 2>/dev/null </dev/null | head -1; }
same "template 5.2: user Hello, thinking on (effort Max)" '"[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hello<|assistant|><think>"' "$(tmpl PROMPT=Hello)"
same "template 5.2: REASONING_EFFORT=high" '"[gMASK]<sop><|system|>Reasoning Effort: High<|user|>Hello<|assistant|><think>"' "$(tmpl PROMPT=Hello REASONING_EFFORT=high)"
same "template 5.2: user Hello, thinking off" '"[gMASK]<sop><|user|>Hello<|assistant|><think></think>"' "$(tmpl PROMPT=Hello THINK=0)"
printf '[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"}]' > "$T/s_hi.json"
same "template 5.2: system S, Hi, answer Hello, Again, thinking off" \
  '"[gMASK]<sop><|system|>S<|user|>Hi<|assistant|><think></think>Hello<|user|>Again<|assistant|><think></think>"' \
  "$(tmpl SYSTEM=S MESSAGES=$T/s_hi.json PROMPT=Again THINK=0)"
got=$(env SNAP=$M TEMPLATE_ONLY=1 PROMPT=Hello "$GLM" 2>&1 >/dev/null </dev/null)
same "template: stderr says which form and why (stdout holds only the prompt)" \
  "glm: chat template glm-5.2 ($M has no chat template text; GLM-5.2 is the target)" "$got"
expect_fail "REASONING_EFFORT=bogus is refused by name" 'REASONING_EFFORT=bogus: expected max or high' env SNAP=$M PROMPT=x TEMPLATE_ONLY=1 REASONING_EFFORT=bogus "$GLM"
expect_fail "CHAT_FORMAT=bogus is refused by name" 'CHAT_FORMAT=bogus is not one of auto, glm-5.2, glm-5.0' env SNAP=$M PROMPT=x TEMPLATE_ONLY=1 CHAT_FORMAT=bogus "$GLM"

# GLM-5.0 (CHAT_FORMAT=glm-5.0): every case of §3.4 (clear_thinking=false, which PROMPT mode does
# not use, is tests/test_chat.c's and the chat cache test's below)
t50() { tmpl CHAT_FORMAT=glm-5.0 "$@"; }
same "template 5.0: user Hello, thinking on" '"[gMASK]<sop><|user|>Hello<|assistant|><think>"' "$(t50 PROMPT=Hello)"
same "template 5.0: user Hello, thinking off" '"[gMASK]<sop><|user|>Hello<|assistant|></think>"' "$(t50 PROMPT=Hello THINK=0)"
same "template 5.0: REASONING_EFFORT does not apply" '"[gMASK]<sop><|user|>Hello<|assistant|><think>"' "$(t50 PROMPT=Hello REASONING_EFFORT=high)"
cat > "$T/two_turns.json" <<'EOF'
[{"role": "system", "content": "You are a helpful assistant."},
 {"role": "user", "content": "Hi"},
 {"role": "assistant", "content": "<think>The user greets me.</think>Hello! How can I help?"}]
EOF
want='"[gMASK]<sop><|system|>You are a helpful assistant.<|user|>Hi<|assistant|></think>Hello! How can I help?<|user|>What is 2+2?<|assistant|><think>"'
same "template 5.0: system + two user turns, the earlier reasoning dropped" "$want" "$(t50 MESSAGES=$T/two_turns.json PROMPT='What is 2+2?')"
printf '[{"role":"user","content":"Hi"},{"role":"assistant","content":"  Hello! How can I help?\\n","reasoning_content":"The user greets me."},{"role":"user","content":"What is 2+2?"}]' > "$T/rc.json"
same "template 5.0: SYSTEM setting + history in reasoning_content" "$want" "$(t50 SYSTEM='You are a helpful assistant.' MESSAGES=$T/rc.json)"
same "template 5.2: the same conversation" \
  '"[gMASK]<sop><|system|>Reasoning Effort: Max<|system|>You are a helpful assistant.<|user|>Hi<|assistant|><think></think>Hello! How can I help?<|user|>What is 2+2?<|assistant|><think>"' \
  "$(tmpl MESSAGES=$T/two_turns.json PROMPT='What is 2+2?')"
# an assistant turn after the last user message keeps its reasoning (stripped)
printf '[{"role":"user","content":"Hi"},{"role":"assistant","content":"\\n<think> Greeting. </think>\\n\\nHello!"}]' > "$T/last.json"
same "template 5.0: reasoning after the last user message is kept" '"[gMASK]<sop><|user|>Hi<|assistant|><think>Greeting.</think>Hello!<|assistant|><think>"' "$(t50 MESSAGES=$T/last.json)"
# the tool round trip of §3.4, from an OpenAI-style MESSAGES (tool_calls with JSON arguments, a tool message)
cat > "$T/tool.json" <<'EOF'
[{"role": "user", "content": "Weather in Paris?"},
 {"role": "assistant", "content": null, "reasoning_content": "Need the tool.",
  "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}}]},
 {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 20}"}]
EOF
round='<|user|>Weather in Paris?<|assistant|><think>Need the tool.</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>2</arg_value></tool_call><|observation|><tool_response>{\"temp\": 20}</tool_response><|assistant|><think>"'
same "template 5.0: tool round trip from MESSAGES" "\"[gMASK]<sop>$round" "$(t50 MESSAGES=$T/tool.json)"
same "template 5.2: tool round trip from MESSAGES" "\"[gMASK]<sop><|system|>Reasoning Effort: Max$round" "$(tmpl MESSAGES=$T/tool.json)"
# the ids equal the tokenization of the rendered string with special tokens recognised
for case in "5.0 two turns|CHAT_FORMAT=glm-5.0 MESSAGES=$T/two_turns.json" "5.2 two turns|MESSAGES=$T/two_turns.json" \
            "5.0 tool round trip|CHAT_FORMAT=glm-5.0 MESSAGES=$T/tool.json" "5.2 tool round trip|MESSAGES=$T/tool.json"; do
  read -r -a args <<<"${case#*|}"
  out=$(env SNAP=$M TEMPLATE_ONLY=1 PROMPT='What is 2+2?' "${args[@]}" "$GLM" 2>/dev/null)
  same "template ids == TOKENIZE SPECIAL=1 of the rendered string (${case%%|*})" \
    "$(head -1 <<<"$out" | SNAP=$M SPECIAL=1 TOKENIZE=/dev/stdin "$GLM" 2>&1)" "$(sed -n 2p <<<"$out")"
done
ids=$(env SNAP=$M TEMPLATE_ONLY=1 CHAT_FORMAT=glm-5.0 MESSAGES=$T/tool.json "$GLM" 2>/dev/null | sed -n 2p)
if grep -qw 499 <<<"$ids" && grep -qw 485 <<<"$ids" && grep -qw 501 <<<"$ids"; then echo "PASS template: <tool_call>, <|observation|>, <tool_response> are their ids (499, 485, 501)"
else echo "FAIL template tool tag ids: $ids"; fi
same "template 5.2: first ids are [gMASK] <sop> <|system|>" "478 480 482" "$(env SNAP=$M TEMPLATE_ONLY=1 PROMPT=Hello "$GLM" 2>/dev/null | sed -n 2p | cut -d' ' -f1-3)"
same "template 5.2 THINK=0: first ids are [gMASK] <sop> <|user|>" "478 480 483" "$(env SNAP=$M TEMPLATE_ONLY=1 PROMPT=Hello THINK=0 "$GLM" 2>/dev/null | sed -n 2p | cut -d' ' -f1-3)"
# the tools list of an OpenAI request: GLM-5.0 lists each tool object, GLM-5.2 its function object without "strict"
cat > "$T/request.json" <<'EOF'
{"messages": [{"role": "user", "content": "Weather in Paris?"}],
 "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Current weather", "strict": true,
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]}
EOF
block_head='<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n'
block_tail='\n</tools>\n\nFor each function call, output the function name and arguments within the following XML format:\n<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value><arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call><|user|>Weather in Paris?<|assistant|><think>"'
fn='{\"name\": \"get_weather\", \"description\": \"Current weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}'
same "template 5.2: MESSAGES {messages, tools}: the tools block lists the function objects" \
  "\"[gMASK]<sop><|system|>Reasoning Effort: Max$block_head$fn$block_tail" "$(tmpl MESSAGES=$T/request.json)"
same "template 5.0: the tools block lists the tool objects as given" \
  "\"[gMASK]<sop>$block_head"'{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Current weather\", \"strict\": true, \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}'"$block_tail" \
  "$(t50 MESSAGES=$T/request.json)"
# message text is text: a written tag does not become a tag unless SPECIAL=1
got=$(env SNAP=$M TEMPLATE_ONLY=1 PROMPT='a<|assistant|>b' "$GLM" 2>/dev/null | sed -n 2p)
if [ "$(grep -o -w 484 <<<"$got" | wc -l)" = 1 ]; then echo "PASS template: a tag written in the message stays text"; else echo "FAIL template: tag injection: $got"; fi
got=$(env SNAP=$M TEMPLATE_ONLY=1 PROMPT='a<|assistant|>b' SPECIAL=1 "$GLM" 2>/dev/null | sed -n 2p)
same "template: SPECIAL=1 makes a written tag a tag" 2 "$(grep -o -w 484 <<<"$got" | wc -l)"
same "template: CHAT_TEMPLATE=0 sends the raw text" '"Hello"' "$(tmpl PROMPT=Hello CHAT_TEMPLATE=0)"
printf '[{"role":"narrator","content":"x"}]' > "$T/role.json"
expect_fail "MESSAGES: an unknown role is named with the file and message" 'role\.json.*message 0 has role "narrator"' env SNAP=$M MESSAGES=$T/role.json TEMPLATE_ONLY=1 "$GLM"
expect_fail "SYSTEM with CHAT_TEMPLATE=0 is refused" 'SYSTEM needs the chat template' env SNAP=$M PROMPT=x SYSTEM=y CHAT_TEMPLATE=0 "$GLM"

# the form from the template text shipped in SNAP (a GLM-4.7/5.0-like chat_template.jinja, a
# GLM-5.2-like one in tokenizer_config.json, one that is neither)
mkdir -p "$T/t50" "$T/t52" "$T/tbad"
for d in t50 t52 tbad; do ln -s "$ROOT/$F/tiny_tokenizer/tokenizer.json" "$T/$d/tokenizer.json"; done
cat > "$T/t50/chat_template.jinja" <<'EOF'
[gMASK]<sop>{%- for m in messages -%}
{%- if m.role == 'user' -%}<|user|>{{ m.content }}
{%- elif m.role == 'assistant' -%}<|assistant|></think>{{ m.content }}{%- endif -%}
{%- endfor -%}{%- if add_generation_prompt -%}<|assistant|>{{ '<think>' if enable_thinking is not defined or enable_thinking else '</think>' }}{%- endif -%}
EOF
$PY -c 'import json,sys; json.dump({"chat_template": "[gMASK]<sop>{% if enable_thinking %}<|system|>Reasoning Effort: {{ (reasoning_effort or \"max\") | capitalize }}{% endif %}<|user|>...<|assistant|><think></think>"}, open(sys.argv[1], "w"))' "$T/t52/tokenizer_config.json"
printf '{%% for m in messages %%}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%% endfor %%}' > "$T/tbad/chat_template.jinja"
same "CHAT_FORMAT=auto: a GLM-4.7/5.0-like chat_template.jinja renders GLM-5.0" '"[gMASK]<sop><|user|>Hello<|assistant|><think>"' "$(tmpl SNAP=$T/t50 PROMPT=Hello)"
same "...and stderr names the file" "glm: chat template glm-5.0 (from $T/t50/chat_template.jinja)" "$(env SNAP=$T/t50 TEMPLATE_ONLY=1 PROMPT=Hello "$GLM" 2>&1 >/dev/null)"
same "CHAT_FORMAT=glm-5.2 overrides the detected form" '"[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hello<|assistant|><think>"' "$(tmpl SNAP=$T/t50 PROMPT=Hello CHAT_FORMAT=glm-5.2)"
same "CHAT_FORMAT=auto: a template with 'Reasoning Effort' in tokenizer_config.json renders GLM-5.2" \
  '"[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hello<|assistant|><think>"' "$(tmpl SNAP=$T/t52 PROMPT=Hello)"
expect_fail "an unrecognised chat template is named, with CHAT_FORMAT" 'tbad/chat_template\.jinja: .*CHAT_FORMAT=glm-5\.2 or glm-5\.0' env SNAP=$T/tbad TEMPLATE_ONLY=1 PROMPT=Hello "$GLM"
same "...CHAT_FORMAT=glm-5.0 renders it anyway" '"[gMASK]<sop><|user|>Hello<|assistant|><think>"' "$(tmpl SNAP=$T/tbad PROMPT=Hello CHAT_FORMAT=glm-5.0)"
same "...and CHAT_TEMPLATE=0 does not look at it" '"Hello"' "$(tmpl SNAP=$T/tbad PROMPT=Hello CHAT_TEMPLATE=0)"
# a tokenizer without a tag the rendering needs: named (here <|observation|>, needed by a tool turn only)
mkdir -p "$T/noobs"
sed 's/<|observation|>/<|observatio_|>/g' "$F/tiny_tokenizer/tokenizer.json" > "$T/noobs/tokenizer.json"
expect_fail "a tokenizer lacking a tag the template needs is named with the tag" 'noobs/tokenizer\.json has no <\|observation\|> token, so the glm-5\.2 chat template cannot be rendered' \
  env SNAP=$T/noobs TEMPLATE_ONLY=1 MESSAGES=$T/tool.json "$GLM"
same "...a conversation without that tag still renders" '"[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hello<|assistant|><think>"' "$(tmpl SNAP=$T/noobs PROMPT=Hello)"

# ---- PROMPT mode on the tiny model ------------------------------------------------------------
# decode ids the way a byte-level BPE decoder does (independent of tok.h): byte runs between added
# tokens are decoded separately, invalid UTF-8 becoming U+FFFD
cat > "$T/decode.py" <<'EOF'
import json, sys
tj = json.load(open(sys.argv[1]))
pieces = {i: t for t, i in tj["model"]["vocab"].items()}
added = {t["id"]: t["content"] for t in tj["added_tokens"]}
printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
symbol_to_byte = {chr(b): b for b in printable}
extra = 0
for b in range(256):
    if b not in printable: symbol_to_byte[chr(0x100 + extra)] = b; extra += 1
out, run = b"", b""
for i in map(int, sys.argv[2:]):
    if i in added: out += run.decode("utf-8", "replace").encode() + added[i].encode(); run = b""
    else: run += bytes(symbol_to_byte[ch] for ch in pieces[i])
sys.stdout.buffer.write(out + run.decode("utf-8", "replace").encode())
EOF
decode() { $PY "$T/decode.py" "$M/tokenizer.json" "$@"; }
prompt_ids=$(env SNAP=$M TEMPLATE_ONLY=1 PROMPT=Hello "$GLM" 2>/dev/null | sed -n 2p)
printf '{"prompt_ids": [%s], "full_ids": [%s]}' "${prompt_ids// /, }" "${prompt_ids// /, }" > "$T/ref.json"
greedy=$(env SNAP=$M REF=$T/ref.json NGEN=40 "$GLM" 64 16 16 2>/dev/null | sed -n 's/^Generated: //p')
# the greedy continuation up to (not including) the first EOS id
upto_eos=$(for i in $greedy; do case $i in 476|483|485) break ;; esac; printf '%s ' "$i"; done)
decode $upto_eos > "$T/want_greedy"
env SNAP=$M PROMPT=Hello TEMP=0 NGEN=40 "$GLM" 64 16 16 >"$T/got_greedy" 2>"$T/err_greedy" </dev/null
if [ -s "$T/want_greedy" ] && cmp -s "$T/want_greedy" "$T/got_greedy"; then echo "PASS PROMPT TEMP=0 streams exactly the text of greedy decoding ($(wc -w <<<"$upto_eos") tokens)"
else echo "FAIL PROMPT TEMP=0 vs greedy decoding of the same ids"; od -c "$T/want_greedy" | head -3; od -c "$T/got_greedy" | head -3; fi
stats=$(grep '^glm: \[' "$T/err_greedy")
if [[ $stats =~ ^glm:\ \[22\ prompt\ tokens,\ prefill\ [0-9.]+\ s\ \|\ 40\ tokens,\ decode\ [0-9.]+\ tok/s\ \|\ expert\ hit\ [0-9.]+%,\ read\ [0-9]+\ MB\ \([0-9.]+\ GB/s\)(,\ [0-9]+\ experts\ in\ place)?,\ waited\ on\ disk\ [0-9.]+\ s\ \|\ peak\ RSS\ [0-9.]+\ GB\ \|\ context\ [0-9]+/[0-9]+\ \|\ stop:\ NGEN\]$ ]]
then echo "PASS PROMPT: one stats line (prompt tokens, prefill, tok/s, expert hit, MB read, disk wait, peak RSS, stop: NGEN)"; else echo "FAIL PROMPT stats line: '$stats'"; fi
same "PROMPT: stdout holds only the answer" "$(cat "$T/want_greedy" | od -c)" "$(od -c <"$T/got_greedy")"
# ABSORB and BATCH do not change the text
got=$(env SNAP=$M PROMPT=Hello TEMP=0 NGEN=40 BATCH=1 "$GLM" 64 16 16 2>/dev/null </dev/null | od -c)
same "PROMPT TEMP=0 with BATCH=1 (token-by-token prefill) gives the same text" "$(od -c <"$T/got_greedy")" "$got"

# EOS: declare the 4th greedy token an EOS id; the answer must stop before it and not print it
eos_id=$(awk '{ print $4 }' <<<"$greedy")
first=0; for i in $greedy; do [ "$i" = "$eos_id" ] && break; first=$((first + 1)); done
mkdir -p "$T/eos"; for f in config.json model.safetensors tokenizer.json; do ln -s "$M/$f" "$T/eos/$f"; done
printf '{"eos_token_id": [%s]}' "$eos_id" > "$T/eos/generation_config.json"
decode $(awk -v n=$first '{ for (i = 1; i <= n; i++) printf "%s ", $i }' <<<"$greedy") > "$T/want_eos"
env SNAP=$T/eos PROMPT=Hello TEMP=0 NGEN=40 "$GLM" 64 16 16 >"$T/got_eos" 2>"$T/err_eos" </dev/null
if cmp -s "$T/want_eos" "$T/got_eos" && grep -q "| $first tokens, .*stop: eos\]" "$T/err_eos"; then
  echo "PASS PROMPT stops at an EOS id of generation_config.json after $first tokens and does not print it"
else echo "FAIL PROMPT EOS stop (eos id $eos_id, expected $first tokens)"; grep '^glm: \[' "$T/err_eos"; od -c "$T/got_eos" | head -3; fi

# sampling: same SEED twice → identical bytes; another SEED → other text; NGEN bounds the count
sample() { env SNAP=$M PROMPT=Hello NGEN=60 "$@" "$GLM" 64 16 16 2>"$T/err_sample" </dev/null | od -c; }
a=$(sample SEED=7 TEMP=1); b=$(sample SEED=7 TEMP=1); c=$(sample SEED=8 TEMP=1)
if [ -n "$a" ] && [ "$a" = "$b" ]; then echo "PASS same SEED, same settings: byte-identical output"; else echo "FAIL same SEED gave different output"; fi
if [ "$a" != "$c" ]; then echo "PASS another SEED gives another answer"; else echo "FAIL SEED=7 and SEED=8 gave the same answer"; fi
if grep -qE '\| (60 tokens, .*stop: NGEN|[0-9]+ tokens, .*stop: eos)\]' "$T/err_sample"; then echo "PASS sampled answer stops at NGEN=60 or EOS"; else echo "FAIL sampled stop: $(grep '^glm: \[' "$T/err_sample")"; fi
a=$(sample SEED=7 TEMP=1 NUCLEUS=0); g=$(sample SEED=9 TEMP=0)
same "NUCLEUS=0 keeps only the most likely token: equals greedy" "$g" "$a"
a=$(sample SEED=3 TEMP=0.8 NUCLEUS=1); b=$(sample SEED=3 TEMP=0.8 NUCLEUS=1)
if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" != "$g" ]; then echo "PASS NUCLEUS=1 (full distribution) is repeatable and not greedy"; else echo "FAIL NUCLEUS=1 sampling"; fi
got=$(env SNAP=$M PROMPT=Hello NGEN=60 "$GLM" 64 16 16 2>&1 >/dev/null </dev/null | sed -nE 's/^glm: sampling: TEMP 0\.7, NUCLEUS 0\.9, SEED ([0-9]+)$/\1/p')
if [ -n "$got" ]; then
  same "without SEED the clock's seed is printed and reproduces the answer" \
    "$(env SNAP=$M PROMPT=Hello NGEN=60 SEED=$got "$GLM" 64 16 16 2>/dev/null </dev/null | od -c)" \
    "$(env SNAP=$M PROMPT=Hello NGEN=60 SEED=$got "$GLM" 64 16 16 2>/dev/null </dev/null | od -c)"
else echo "FAIL no 'glm: sampling: TEMP 0.7, NUCLEUS 0.9, SEED n' line with the defaults"; fi
n=$(env SNAP=$M PROMPT=Hello NGEN=3 TEMP=0 "$GLM" 64 16 16 2>&1 >/dev/null </dev/null | grep -c '| 3 tokens, .*stop: NGEN\]')
same "NGEN=3 stops after 3 tokens" 1 "$n"
# CHAT_TEMPLATE=0: the raw text is the prompt (here: the rendered template written by hand)
a=$(env SNAP=$M PROMPT='[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hello<|assistant|><think>' SPECIAL=1 CHAT_TEMPLATE=0 TEMP=0 NGEN=40 "$GLM" 64 16 16 2>/dev/null </dev/null | od -c)
same "CHAT_TEMPLATE=0 SPECIAL=1 with the template written out == the templated prompt" "$(od -c <"$T/got_greedy")" "$a"

# ---- CHAT: the KV cache holds a rendering of the conversation ---------------------------------
# Piped chat, two turns on a model without EOS ids (every reply is exactly NGEN=8 tokens). Both
# answers must equal greedy decoding (REF mode) of the ids of the conversation rendered with its
# reasoning kept: the first turn's prompt (as TEMPLATE_ONLY renders it), the first reply's ids as
# generated, then <|user|>Hi<|assistant|> and the thinking opener of the form (:think off in
# between switches only that opener; the GLM-5.2 effort line of the first turn stays).
mkdir -p "$T/noeos"; for f in config.json model.safetensors tokenizer.json; do ln -s "$M/$f" "$T/noeos/$f"; done
printf '{"eos_token_id": []}' > "$T/noeos/generation_config.json"
hi=$(echo '"Hi"' | SNAP=$M TOKENIZE=/dev/stdin "$GLM" 2>/dev/null)
greedy8() {
  printf '{"prompt_ids": [%s], "full_ids": [%s]}' "${1// /, }" "${1// /, }" > "$T/cref.json"
  env SNAP=$T/noeos REF=$T/cref.json NGEN=8 "$GLM" 64 16 16 2>/dev/null | sed -n 's/^Generated: //p'
}
for case in "glm-5.2|1|497|" "glm-5.2|0|497 498|" "glm-5.0|1|497|" "glm-5.0|0|498|" "glm-5.2|1|497 498|:think off"; do
  IFS='|' read -r fmt think opener between <<<"$case"
  p1=$(env SNAP=$M TEMPLATE_ONLY=1 PROMPT=Hello CHAT_FORMAT=$fmt THINK=$think "$GLM" 2>/dev/null | sed -n 2p)
  r1=$(greedy8 "$p1")
  r2=$(greedy8 "$p1 $r1 483 $hi 484 $opener")
  { decode $r1; echo; decode $r2; echo; } > "$T/chat_want"
  printf 'Hello\n%s%sHi\n' "$between" "${between:+$'\n'}" |
    env SNAP=$T/noeos CHAT=1 TEMP=0 NGEN=8 CHAT_FORMAT=$fmt THINK=$think "$GLM" 64 16 16 >"$T/chat_got" 2>"$T/chat_err"
  name="CHAT $fmt THINK=$think${between:+ then $between}: the second turn continues exactly <prompt><reply><|user|>Hi<|assistant|>$([ "$opener" = 498 ] && echo '</think>' || { [ "$opener" = 497 ] && echo '<think>' || echo '<think></think>'; })"
  prefills=$(sed -nE 's/^glm: \[([0-9]+) prompt tokens.*/\1/p' "$T/chat_err" | tr '\n' ' ')
  if [ $(wc -w <<<"$r2") = 8 ] && cmp -s "$T/chat_want" "$T/chat_got" && [ "$prefills" = "$(wc -w <<<"$p1") $(wc -w <<<"483 $hi 484 $opener") " ]
  then echo "PASS $name"
  else echo "FAIL $name (prefills: $prefills)"; diff <(od -c "$T/chat_want") <(od -c "$T/chat_got") | head -6; fi
done

# ---- settings and errors ----------------------------------------------------------------------
help=$("$GLM" --help)
missing=""; for v in PROMPT CHAT CHAT_TEMPLATE THINK SYSTEM MESSAGES TEMP NUCLEUS SEED TOKENIZE SPECIAL TEMPLATE_ONLY NGEN; do
  grep -qE "^  $v +default" <<<"$help" || missing="$missing $v"; done
same "--help lists every text setting" "" "$missing"
expect_fail "TEMP=-1 is refused" 'TEMP=-1.*range' env SNAP=$M PROMPT=x TEMP=-1 "$GLM"
expect_fail "NUCLEUS=1.5 is refused" 'NUCLEUS=1\.5.*range' env SNAP=$M PROMPT=x NUCLEUS=1.5 "$GLM"
expect_fail "SEED=abc is refused" 'SEED=abc' env SNAP=$M PROMPT=x SEED=abc "$GLM"
expect_fail "PROMPT without tokenizer.json names the file" 'oracle_dense/tokenizer\.json' env SNAP=$F/oracle_dense PROMPT=x "$GLM" 64 16 16
expect_fail "PROMPT and REF together are refused" 'REF=.*unset PROMPT' env SNAP=$M PROMPT=x REF=$T/ref.json "$GLM"
expect_fail "TF=1 without REF names REF" 'TF=1 needs REF' env SNAP=$M TF=1 "$GLM"
expect_fail "nothing to do (no PROMPT, stdin not a terminal) says what to set" 'nothing to do: set PROMPT' env SNAP=$M "$GLM" </dev/null
expect_fail "a prompt that does not fit CTX is refused" 'prompt has 22 tokens and CTX=22' env SNAP=$M PROMPT=Hello CTX=22 "$GLM" 64 16 16
expect_fail "empty raw PROMPT is refused" 'PROMPT is empty' env SNAP=$M PROMPT= CHAT_TEMPLATE=0 "$GLM" 64 16 16
printf '[{"role":"x"}' > "$T/broken.json"
expect_fail "MESSAGES: malformed JSON names the file" 'broken\.json' env SNAP=$M MESSAGES=$T/broken.json PROMPT=x "$GLM"
# a tokenizer with more ids than the model's vocabulary does not belong to it
mkdir -p "$T/small"; for f in model.safetensors generation_config.json tokenizer.json; do ln -s "$M/$f" "$T/small/$f"; done
sed 's/"vocab_size": 512/"vocab_size": 500/' "$F/oracle_dense/config.json" > "$T/small/config.json"
expect_fail "a tokenizer larger than vocab_size is refused" 'tokenizer\.json has ids up to 511 but the model.s vocab_size is 500' env SNAP=$T/small PROMPT=x "$GLM" 64 16 16
# ...nor does one that covers far less than it (real models pad vocab_size by a few dozen to a few
# hundred rows; more than 1024 rows without a token means another model's tokenizer). Regression
# guard: the 512-id tiny tokenizer was accepted on a 154,880-row model and printed nothing.
mkdir -p "$T/big"; for f in model.safetensors generation_config.json tokenizer.json; do ln -s "$M/$f" "$T/big/$f"; done
sed 's/"vocab_size": 512/"vocab_size": 1537/' "$F/oracle_dense/config.json" > "$T/big/config.json"
expect_fail "a tokenizer covering 512 of 1537 rows is refused" 'tokenizer\.json has ids up to 511 but the model.s vocab_size is 1537 \(at most 1024 rows may be padding\)' env SNAP=$T/big PROMPT=x "$GLM" 64 16 16
# An id without text (a padding row) that is generated anyway is shown, not swallowed: the tiny
# tokenizer without the third token greedy decoding produces after "Hello" (ids 413 275 430 ...).
mkdir -p "$T/hole"; for f in config.json model.safetensors generation_config.json; do ln -s "$M/$f" "$T/hole/$f"; done
$PY - "$F/tiny_tokenizer/tokenizer.json" "$T/hole/tokenizer.json" 430 <<'EOF'
import json, sys
t = json.load(open(sys.argv[1])); gone = int(sys.argv[3]); m = t["model"]
text = next(k for k, v in m["vocab"].items() if v == gone)
del m["vocab"][text]
m["merges"] = [p for p in m["merges"] if text not in (p[0], p[1], p[0] + p[1])]
json.dump(t, open(sys.argv[2], "w"))
EOF
out=$(env SNAP=$T/hole PROMPT=Hello CHAT_TEMPLATE=0 TEMP=0 NGEN=4 "$GLM" 64 16 16 2>&1 </dev/null)
ids=$(echo '"Hello"' | SNAP=$T/hole TOKENIZE=/dev/stdin "$GLM" 2>&1)
if [ "$ids" = 406 ] && grep -q '<|id 430|>' <<<"$out"; then echo "PASS an id without a token is shown as <|id 430|>"
else echo "FAIL id without a token: prompt ids '$ids', output: $(head -c 300 <<<"$out")"; fi
# a full context stops the answer cleanly (22 prompt tokens)
out=$(env SNAP=$M PROMPT=Hello TEMP=0 CTX=28 "$GLM" 64 16 16 2>&1 >/dev/null </dev/null)
if grep -qE '\| 6 tokens, .*context 28/28 \| stop: context full\]' <<<"$out"; then echo "PASS a full context (CTX=28) ends the answer with 'stop: context full'"
else echo "FAIL context full: $(grep '^glm: \[' <<<"$out")"; fi

#!/usr/bin/env bash
# Text in, text out without a terminal: TOKENIZE mode against the transformers.js ids of the tiny
# tokenizer, the GLM-5 chat template against the literal strings of docs/tokenizer.md §3.4, and
# PROMPT mode on the tiny oracle model (tests/fixtures/oracle_dense + tiny_tokenizer/tokenizer.json,
# whose ids match: vocab 512, eos 476 483 485): TEMP=0 streams exactly the text of greedy decoding,
# SEED makes sampling repeatable, NGEN and EOS stop it, and the EOS token is not printed.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
for v in $("$GLM" --help | awk '$2 == "default" { print $1 }'); do unset "$v"; done
export THREADS=2
PY=/usr/bin/python3
F=tests/fixtures
T=$(mktemp -d /tmp/t_prompt.XXXXXX); trap 'rm -rf "$T"' EXIT
M=$T/model                                    # the oracle model with the tiny tokenizer
mkdir -p "$M"
for f in config.json generation_config.json model.safetensors; do ln -s "$ROOT/$F/oracle_dense/$f" "$M/$f"; done
ln -s "$ROOT/$F/tiny_tokenizer/tokenizer.json" "$M/tokenizer.json"
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

# ---- the chat template (tokenizer.md §3.4, literal strings) ------------------------------------
tmpl() { env SNAP=$M TEMPLATE_ONLY=1 "$@" "$GLM" 2>&1 </dev/null | head -1; }
same "template: user Hello, thinking on" '"[gMASK]<sop><|user|>Hello<|assistant|><think>"' "$(tmpl PROMPT=Hello)"
same "template: user Hello, thinking off" '"[gMASK]<sop><|user|>Hello<|assistant|></think>"' "$(tmpl PROMPT=Hello THINK=0)"
cat > "$T/two_turns.json" <<'EOF'
[{"role": "system", "content": "You are a helpful assistant."},
 {"role": "user", "content": "Hi"},
 {"role": "assistant", "content": "<think>The user greets me.</think>Hello! How can I help?"}]
EOF
want='"[gMASK]<sop><|system|>You are a helpful assistant.<|user|>Hi<|assistant|></think>Hello! How can I help?<|user|>What is 2+2?<|assistant|><think>"'
same "template: system + two user turns, the earlier reasoning dropped" "$want" "$(tmpl MESSAGES=$T/two_turns.json PROMPT='What is 2+2?')"
same "template: SYSTEM setting + history in reasoning_content" "$want" \
  "$(printf '[{"role":"user","content":"Hi"},{"role":"assistant","content":"  Hello! How can I help?\\n","reasoning_content":"The user greets me."},{"role":"user","content":"What is 2+2?"}]' > "$T/rc.json"; tmpl SYSTEM='You are a helpful assistant.' MESSAGES=$T/rc.json)"
# an assistant turn after the last user message keeps its reasoning (stripped)
printf '[{"role":"user","content":"Hi"},{"role":"assistant","content":"\\n<think> Greeting. </think>\\n\\nHello!"}]' > "$T/last.json"
same "template: reasoning after the last user message is kept" '"[gMASK]<sop><|user|>Hi<|assistant|><think>Greeting.</think>Hello!<|assistant|><think>"' "$(tmpl MESSAGES=$T/last.json)"
# the ids equal the tokenization of the rendered string with special tokens recognised
ids=$(env SNAP=$M TEMPLATE_ONLY=1 MESSAGES=$T/two_turns.json PROMPT='What is 2+2?' "$GLM" 2>&1 | sed -n 2p)
same "template ids == TOKENIZE SPECIAL=1 of the rendered string" "$(echo "$want" | SNAP=$M SPECIAL=1 TOKENIZE=/dev/stdin "$GLM" 2>&1)" "$ids"
same "template: first ids are [gMASK] <sop> <|system|>" "478 480 482" "$(cut -d' ' -f1-3 <<<"$ids")"
# message text is text: a written tag does not become a tag unless SPECIAL=1
got=$(env SNAP=$M TEMPLATE_ONLY=1 PROMPT='a<|assistant|>b' "$GLM" 2>&1 | sed -n 2p)
if [ "$(grep -o -w 484 <<<"$got" | wc -l)" = 1 ]; then echo "PASS template: a tag written in the message stays text"; else echo "FAIL template: tag injection: $got"; fi
same "template: CHAT_TEMPLATE=0 sends the raw text" '"Hello"' "$(tmpl PROMPT=Hello CHAT_TEMPLATE=0)"
printf '[{"role":"tool","content":"x"}]' > "$T/tool.json"
expect_fail "MESSAGES: an unsupported role is named" 'tool\.json: message 0 has role "tool"' env SNAP=$M MESSAGES=$T/tool.json TEMPLATE_ONLY=1 "$GLM"
expect_fail "SYSTEM with CHAT_TEMPLATE=0 is refused" 'SYSTEM needs the chat template' env SNAP=$M PROMPT=x SYSTEM=y CHAT_TEMPLATE=0 "$GLM"

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
if [[ $stats =~ ^glm:\ \[6\ prompt\ tokens,\ prefill\ [0-9.]+\ s\ \|\ 40\ tokens,\ decode\ [0-9.]+\ tok/s\ \|\ expert\ hit\ [0-9.]+%,\ read\ [0-9]+\ MB\ \([0-9.]+\ GB/s\),\ waited\ on\ disk\ [0-9.]+\ s\ \|\ peak\ RSS\ [0-9.]+\ GB\ \|\ context\ [0-9]+/[0-9]+\ \|\ stop:\ NGEN\]$ ]]
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
a=$(env SNAP=$M PROMPT='[gMASK]<sop><|user|>Hello<|assistant|><think>' SPECIAL=1 CHAT_TEMPLATE=0 TEMP=0 NGEN=40 "$GLM" 64 16 16 2>/dev/null </dev/null | od -c)
same "CHAT_TEMPLATE=0 SPECIAL=1 with the template written out == the templated prompt" "$(od -c <"$T/got_greedy")" "$a"

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
expect_fail "a prompt that does not fit CTX is refused" 'prompt has 6 tokens and CTX=6' env SNAP=$M PROMPT=Hello CTX=6 "$GLM" 64 16 16
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
# a full context stops the answer cleanly
out=$(env SNAP=$M PROMPT=Hello TEMP=0 CTX=12 "$GLM" 64 16 16 2>&1 >/dev/null </dev/null)
if grep -qE '\| 6 tokens, .*context 12/12 \| stop: context full\]' <<<"$out"; then echo "PASS a full context (CTX=12) ends the answer with 'stop: context full'"
else echo "FAIL context full: $(grep '^glm: \[' <<<"$out")"; fi

#!/usr/bin/env bash
# CHAT mode on the tiny oracle model (tests/fixtures/oracle_dense + tiny_tokenizer/tokenizer.json):
# through a pseudo-terminal with tests/chat_driver.py (two turns, :more, Ctrl-C mid-answer then
# another turn, :reset, the line editor, :think off, :stats, :quit, Ctrl-D), and with stdin piped,
# where each answer must be byte-identical to PROMPT mode's answer to the same message.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
unset_settings
export THREADS=2
PY=python3
if ! command -v $PY >/dev/null; then echo "FAIL t_chat needs python3 (stdlib only) for the pty driver"; exit 1; fi
T=$(mktemp -d /tmp/t_chat.XXXXXX); trap 'rm -rf "$T"' EXIT
tiny_model "$T/model" oracle_dense
mkdir -p "$T/no_eos"
for f in config.json model.safetensors tokenizer.json; do ln -s "$T/model/$f" "$T/no_eos/$f"; done
printf '{"eos_token_id": []}\n' > "$T/no_eos/generation_config.json"   # only NGEN, CTX or Ctrl-C end a reply

timeout 120 $PY tests/chat_driver.py "$GLM" "$T/model" "$T/no_eos"
driver=$?
[ $driver -ne 0 ] && [ $driver -ne 1 ] && echo "FAIL chat_driver.py exited $driver (timeout or crash)"

# Piped stdin: plain reads, no prompt, answers separated by a newline, the same text as PROMPT mode.
same() { if [ -n "$2" ] && [ "$2" = "$3" ]; then echo "PASS $1"; else echo "FAIL $1"; echo "  want: $2"; echo "  got:  $3"; fi; }
want1=$(env SNAP=$T/model PROMPT=Hello TEMP=0 NGEN=8 "$GLM" 64 16 16 2>/dev/null </dev/null | od -An -c)
want2=$(env SNAP=$T/model PROMPT=Hello TEMP=0 NGEN=16 "$GLM" 64 16 16 2>/dev/null </dev/null | od -An -c)
printf 'Hello\n:more\n:reset\nHello\n' | env SNAP=$T/model CHAT=1 TEMP=0 NGEN=8 "$GLM" 64 16 16 >"$T/piped" 2>"$T/piped_err"
rc=$?
same "piped chat exits 0 at end of input" 0 "$rc"
# answers end with a newline each: 1st, its :more, and the replay after :reset
$PY - "$T/piped" "$T" <<'EOF'
import sys
data = open(sys.argv[1], "rb").read()
parts = data.split(b"\n")
# each reply is one line unless the model wrote newlines; the tiny model's first 16 tokens hold none
open(sys.argv[2] + "/a1", "wb").write(parts[0]); open(sys.argv[2] + "/a12", "wb").write(parts[0] + parts[1])
open(sys.argv[2] + "/a3", "wb").write(parts[2])
EOF
same "piped chat: the first answer equals PROMPT mode's (same settings)" "$want1" "$(od -An -c <"$T/a1")"
same "piped chat: answer + :more equals PROMPT mode with NGEN=16" "$want2" "$(od -An -c <"$T/a12")"
same "piped chat: after :reset the answer repeats" "$want1" "$(od -An -c <"$T/a3")"
n=$(grep -c '^glm: \[' "$T/piped_err")
same "piped chat: one stats line per reply (3)" 3 "$n"
# sampling in chat: the same SEED gives the same conversation
chat_sampled() { printf 'Hello\nHi\n' | env SNAP=$T/model CHAT=1 NGEN=20 TEMP=1 SEED=$1 "$GLM" 64 16 16 2>/dev/null | od -An -c; }
a=$(chat_sampled 11); b=$(chat_sampled 11); c=$(chat_sampled 12)
same "chat with SEED: byte-identical twice" "$a" "$b"
if [ "$a" != "$c" ]; then echo "PASS chat with another SEED differs"; else echo "FAIL chat: SEED 11 and 12 gave the same conversation"; fi
# :more when nothing was cut, CTX too small for a turn: a message, not a crash (the first turn,
# GLM-5.2 [gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hello<|assistant|><think>, is 22 tokens)
out=$(printf ':more\nHello\n' | env SNAP=$T/model CHAT=1 TEMP=0 CTX=22 "$GLM" 64 16 16 2>&1 >/dev/null)
if grep -q 'nothing to continue: no reply yet' <<<"$out" && grep -q 'context full: 0 tokens used, this turn needs 22' <<<"$out"
then echo "PASS chat: :more with nothing to continue and a turn that does not fit CTX are explained"; else echo "FAIL chat messages: $out"; fi
out=$(printf 'Hello\nHello\n' | env SNAP=$T/no_eos CHAT=1 TEMP=0 CTX=36 "$GLM" 64 16 16 2>&1 >/dev/null)
if grep -q 'stop: context full' <<<"$out" && grep -q 'context full: 36 tokens used, this turn needs 4 more' <<<"$out"
then echo "PASS chat: a full context ends the reply and refuses the next turn with a message"; else echo "FAIL chat full context: $out"; fi
[ $driver -eq 0 ]

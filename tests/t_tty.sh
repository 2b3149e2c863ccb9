#!/usr/bin/env bash
# Nothing from outside drives the terminal: model output, file contents, environment values and
# typed lines reach a terminal with their control bytes shown as ^X (C1 controls as U+FFFD).
# A "control-byte model" (the tiny oracle model whose lm_head only ever picks the byte tokens of
# BEL, backspace and ^C) answers on a pseudo-terminal (tests/pty_run.py); so do error messages
# that quote a file, notes that quote the environment, and chat's echo of an unknown command.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
unset_settings
export THREADS=1
PY=python3
F=tests/fixtures
T=$(mktemp -d /tmp/t_tty.XXXXXX); trap 'rm -rf "$T"' EXIT
C=$T/ctl; tiny_model "$C" oracle_dense config.json generation_config.json
$PY - "$F/oracle_dense/model.safetensors" "$C/model.safetensors" "$F/tiny_tokenizer/tokenizer.json" <<'EOF'
import array, json, struct, sys
src, dst, tok = sys.argv[1:4]
raw = bytearray(open(src, "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
a, b = h["lm_head.weight"]["data_offsets"]
rows, cols = h["lm_head.weight"]["shape"]
vocab = json.load(open(tok))["model"]["vocab"]
byte_token = lambda byte: vocab[chr(0x100 + byte)]       # bytes 0x00-0x20 map to U+0100.. in byte-level BPE
w = array.array("f", [0.0] * rows * cols)
w[byte_token(7) * cols + 0] = 50.0        # BEL when hidden[0] > 0
w[byte_token(8) * cols + 0] = -50.0       # backspace when hidden[0] < 0
w[byte_token(3) * cols + 1] = 60.0        # ^C when hidden[1] is large
raw[8 + n + a:8 + n + b] = w.tobytes()
open(dst, "wb").write(raw)
EOF
raw_controls() { LC_ALL=C grep -c $'[\x01-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]' "$1"; }   # any C0 control but \t \n \r ESC
# the model really does emit them: without a terminal the bytes pass untouched
env SNAP=$C PROMPT=hi TEMPERATURE=0 NGEN=12 "$GLM" 64 16 16 >"$T/plain" 2>/dev/null </dev/null
if [ "$(raw_controls "$T/plain")" -gt 0 ]; then echo "PASS the control-byte model writes raw control bytes to a file or pipe (exact text)"
else echo "FAIL the control-byte model did not produce control bytes: $(od -c "$T/plain" | head -2)"; fi

# PROMPT mode on a terminal
$PY tests/pty_run.py env SNAP=$C PROMPT=hi TEMPERATURE=0 NGEN=12 "$GLM" 64 16 16 >"$T/prompt"
if [ "$(raw_controls "$T/prompt")" = 0 ] && grep -q '\^G' "$T/prompt"; then echo "PASS PROMPT on a terminal: the model's BEL/backspace/^C are shown as ^G/^H/^C"
else echo "FAIL PROMPT on a terminal lets control bytes through:"; od -c "$T/prompt" | grep -E '\\a|\\b|003' | head -3; fi
# CHAT (lines from a pipe, replies on the terminal), plus an unknown command holding a BEL
printf 'hi\n:\abogus\n' > "$T/lines"
$PY tests/pty_run.py --stdin "$T/lines" env SNAP=$C CHAT=1 TEMPERATURE=0 NGEN=12 "$GLM" 64 16 16 >"$T/chat"
if [ "$(raw_controls "$T/chat")" = 0 ] && grep -q '\^G' "$T/chat" && grep -q 'unknown command :^Gbogus' "$T/chat"; then
  echo "PASS CHAT on a terminal: replies and the echo of an unknown command show control bytes as ^X"
else echo "FAIL CHAT on a terminal lets control bytes through:"; od -c "$T/chat" | grep -E '\\a|\\b|003' | head -3; fi
# an error quoting a file's content, a note quoting the environment
printf '[{"role": "\\u0007\\u001b[31mred", "content": "x"}]' > "$T/role.json"
$PY tests/pty_run.py env SNAP=$C MESSAGES=$T/role.json TEMPLATE_ONLY=1 "$GLM" >"$T/err"
if [ "$(raw_controls "$T/err")" = 0 ] && ! grep -q $'\x1b\\[31m' "$T/err" && grep -q 'role "^G^\[\[31mred"' "$T/err"; then
  echo "PASS an error quoting a file is terminal-safe (role \"^G^[[31mred\")"
else echo "FAIL error message on a terminal:"; od -c "$T/err" | head -5; fi
$PY tests/pty_run.py env SNAP=$C TEMP=$'/tmp\a\x1b[2J' PROMPT=hi NGEN=1 "$GLM" 64 16 16 >"$T/note"
if [ "$(raw_controls "$T/note")" = 0 ] && grep -q 'TEMP=/tmp^G^\[\[2J is not a number' "$T/note"; then echo "PASS a note quoting TEMP is terminal-safe"
else echo "FAIL TEMP note on a terminal:"; grep -a 'TEMP' "$T/note" | od -c | head -3; fi
# TEMPLATE_ONLY prints JSON: DEL and C1 controls (here U+009B, CSI) are escaped as well
printf '[{"role": "user", "content": "a\\u009bb\\u007fc"}]' > "$T/c1.json"
got=$(env SNAP=$C MESSAGES=$T/c1.json TEMPLATE_ONLY=1 "$GLM" 2>/dev/null | head -1)
if grep -qF 'a\u009bb\u007fc' <<<"$got"; then echo "PASS TEMPLATE_ONLY escapes DEL and C1 controls in its JSON"; else echo "FAIL TEMPLATE_ONLY JSON: $got"; fi

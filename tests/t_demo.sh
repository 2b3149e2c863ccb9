#!/usr/bin/env bash
# A first run without the big model: `make demo` builds a small model with a tokenizer and prints
# the commands to use it; the commands it prints work; setup.sh points to it.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
unset_settings
T=$(mktemp -d /tmp/t_demo.XXXXXX); trap 'rm -rf "$T"' EXIT
out=$(make -s demo DEMO_DIR="$T/demo" 2>&1); rc=$?
[ $rc -eq 0 ] && [ -f "$T/demo/config.json" ] && [ -f "$T/demo/tokenizer.json" ] \
  && grep -q 'random weights' <<<"$out" && grep -q 'meaningless' <<<"$out" \
  && echo "PASS make demo builds a model folder with a tokenizer and says its weights are random" \
  || { echo "FAIL make demo (exit $rc)"; echo "$out" | tail -5; }
cmd=$(grep -o "SNAP=$T/demo PROMPT='Hello' NGEN=40 ./glm" <<<"$out")
answer=$(cd "$ROOT" && eval "env $cmd" 2>"$T/err"); rc=$?
[ -n "$cmd" ] && [ $rc -eq 0 ] && [ -n "$answer" ] && grep -q 'stop: ' "$T/err" \
  && echo "PASS the prompt command make demo prints answers (exit 0, text on stdout, stats on stderr)" \
  || { echo "FAIL the printed prompt command (exit $rc): '$cmd'"; tail -3 "$T/err"; }
o=$(printf 'Hi\n' | env SNAP="$T/demo" NGEN=8 CHAT=1 "$GLM" 2>&1); rc=$?
[ $rc -eq 0 ] && echo "PASS the demo model chats (CHAT=1, one turn from stdin)" || { echo "FAIL demo chat (exit $rc)"; echo "$o" | tail -3; }
grep -q 'make demo' setup.sh && grep -q '^make demo' README.md && echo "PASS setup.sh and the README point to make demo" \
  || echo "FAIL setup.sh or README does not mention make demo"

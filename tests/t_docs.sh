#!/usr/bin/env bash
# The README keeps telling the truth about the CLI: every setting ./glm --help lists is in it,
# its two commands are the ones CI runs.
source "$(dirname "$0")/lib.sh"
help=$("$GLM" --help) || { echo "FAIL ./glm --help exits non-zero"; exit 1; }
missing=""
for name in $(sed -nE 's/^  ([A-Z][A-Z0-9_]*) +default .*/\1/p' <<<"$help"); do
  grep -q "\b$name\b" "$ROOT/README.md" || missing="$missing $name"
done
n=$(grep -cE '^  [A-Z][A-Z0-9_]* +default ' <<<"$help")
if [ "$n" -gt 20 ] && [ -z "$missing" ]; then echo "PASS README documents all $n settings of ./glm --help"
else echo "FAIL README lacks settings:$missing (help lists $n)"; fi
grep -q '^\./setup\.sh' "$ROOT/README.md" && grep -q '^make test' "$ROOT/README.md" \
  && echo "PASS README gives ./setup.sh and make test" || echo "FAIL README lacks its two commands"
grep -qx 'make test' "$ROOT/.ci/run" && echo "PASS .ci/run runs the README's test command" || echo "FAIL .ci/run does not run make test"
# Environment variables glm reads besides its settings table must be in --help and the README too.
for v in OMP_WAIT_POLICY GOMP_SPINCOUNT; do
  cat "$ROOT"/*.c | grep -q "$v" || continue
  if grep -q "$v" <<<"$help" && grep -q "\b$v\b" "$ROOT/README.md"; then echo "PASS --help and README document $v, which glm reads"
  else echo "FAIL $v is read by glm but missing from --help or README"; fi
done
# The README quotes ./glm --help whole (after "This is `./glm --help`:"): it must be today's.
quoted=$(awk '/This is `\.\/glm --help`:/ { on = 1; next } on && /^```/ { if (inside) exit; inside = 1; next } inside' "$ROOT/README.md")
if [ -n "$quoted" ] && [ "$quoted" = "$help" ]; then echo "PASS README quotes ./glm --help exactly as it prints today"
else echo "FAIL README's copy of ./glm --help differs from what it prints:"; diff <(echo "$quoted") <(echo "$help") | head -10; fi

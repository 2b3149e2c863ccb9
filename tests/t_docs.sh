#!/usr/bin/env bash
# The README keeps telling the truth about the CLI: every setting ./glm --help lists is in it,
# its two commands are the ones CI runs.
source "$(dirname "$0")/lib.sh"
help=$("$GLM" --help) || { echo "FAIL ./glm --help exits non-zero"; exit 1; }
missing=""
for name in $(sed -nE 's/^  ([A-Z_]+) +default .*/\1/p' <<<"$help"); do
  grep -q "\b$name\b" "$ROOT/README.md" || missing="$missing $name"
done
n=$(grep -cE '^  [A-Z_]+ +default ' <<<"$help")
if [ "$n" -gt 20 ] && [ -z "$missing" ]; then echo "PASS README documents all $n settings of ./glm --help"
else echo "FAIL README lacks settings:$missing (help lists $n)"; fi
grep -q '^\./setup\.sh' "$ROOT/README.md" && grep -q '^make test' "$ROOT/README.md" \
  && echo "PASS README gives ./setup.sh and make test" || echo "FAIL README lacks its two commands"
grep -qx 'make test' "$ROOT/.ci/run" && echo "PASS .ci/run runs the README's test command" || echo "FAIL .ci/run does not run make test"

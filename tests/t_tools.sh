#!/usr/bin/env bash
# The command-line face of the offline tools (tools/*.py, tests/hub_server.py):
#   help          `TOOL --help` exits 0, prints a usage and writes nothing; every option and argument
#                 has a description, and every one that may be left out shows its default
#                 (tools/tool_help.py's layout); --delete-source says that it deletes files
#   executable    a tool with a #! line is executable, in the work tree and in git; one without is not
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
PY=/usr/bin/python3
if ! $PY -c 'import numpy' 2>/dev/null; then
  echo "t_tools: /usr/bin/python3 with numpy is not installed; tool tests skipped"; exit 0
fi
T=$(mktemp -d /tmp/t_tools.XXXXXX)
trap 'rm -rf "$T"' EXIT
export PYTHONDONTWRITEBYTECODE=1
TOOLS="$(ls tools/*.py | grep -v -e safetensors_io.py -e tool_help.py) tests/hub_server.py"

for t in $TOOLS; do
  help_clean() {
    mkdir -p $T/cwd && rm -rf $T/cwd/* $T/cwd/.[!.]*
    local out; out=$(cd $T/cwd && $PY "$ROOT/$1" --help 2>&1) || { echo "exit $?: $out"; return 1; }
    grep -q "^usage: " <<<"$out" || { echo "no usage line: $out"; return 1; }
    [ -z "$(ls -A $T/cwd)" ] || { echo "--help wrote $(ls -A $T/cwd)"; return 1; }
  }
  check "$t --help: exit 0, a usage, nothing written" help_clean $t
  check "$t --help: every option described, every default shown" $PY - "$t" <<'PYEOF'
import argparse, os, runpy, sys
tool = sys.argv[1]
class Got(Exception):
    pass
def capture(self, args=None, namespace=None):
    raise Got(self)
argparse.ArgumentParser.parse_args = capture
sys.argv = [tool, "--help"]
sys.path.insert(0, os.path.dirname(os.path.abspath(tool)))
try:
    runpy.run_path(tool, run_name="__main__")
    raise SystemExit(f"{tool}: builds no argparse parser")
except Got as g:
    ap = g.args[0]
fmt = ap._get_formatter()
bad = []
for a in ap._actions:
    if isinstance(a, argparse._HelpAction):
        continue
    name = "/".join(a.option_strings) or a.metavar or a.dest
    if not (a.help or "").strip() or a.help is argparse.SUPPRESS:
        bad.append(f"{name}: no description")
        continue
    may_omit = (a.option_strings and not a.required) or a.nargs in ("?", "*")
    if may_omit and "default" not in fmt._expand_help(a):
        bad.append(f"{name}: default not shown ({fmt._expand_help(a)!r})")
if bad:
    raise SystemExit(f"{tool}: " + "; ".join(bad))
PYEOF
done
check "--delete-source says it deletes the source shards" \
  bash -c "$PY tools/convert_fp8_to_int4.py --help | tr -s ' \n' ' ' | grep -q -- '--delete-source DELETES each source shard'"

exec_bits() {
  local f bad=0 mode
  for f in tools/*.py tests/hub_server.py; do
    mode=$(git ls-files -s "$f" | cut -d' ' -f1)
    if head -c2 "$f" | grep -q '^#!'; then
      [ -x "$f" ] && [ "$mode" = 100755 ] || { echo "$f has a #! line but is not executable ($mode)"; bad=1; }
    else
      [ ! -x "$f" ] && [ "$mode" != 100755 ] || { echo "$f has no #! line but is executable"; bad=1; }
    fi
  done
  return $bad
}
check "a tool with a #! line is executable (work tree and git), one without is not" exec_bits

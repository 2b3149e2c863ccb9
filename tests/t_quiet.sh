#!/usr/bin/env bash
# What a run prints on stderr by default: a one-line prompt answers with one statistics line (and
# any warnings); VERBOSE=1 adds the lines that say how the run was set up.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
unset_settings
unset VERBOSE
T=$(mktemp -d /tmp/t_quiet.XXXXXX); trap 'rm -rf "$T"' EXIT
M=$T/model; tiny_model "$M" oracle_dense
quiet=$(SNAP=$M PROMPT=Hello NGEN=8 SEED=1 "$GLM" 2>&1 >"$T/quiet.out")
if [ "$(wc -l <<<"$quiet")" = 1 ] && grep -qE '^glm: \[[0-9]+ prompt tokens, prefill .* \| stop: [a-zA-Z]+\]$' <<<"$quiet"; then
  echo "PASS a one-line prompt prints one stats line on stderr by default"
else echo "FAIL default stderr is not one stats line:"; echo "$quiet" | head -12; fi
loud=$(VERBOSE=1 SNAP=$M PROMPT=Hello NGEN=8 SEED=1 "$GLM" 2>&1 >"$T/loud.out")
missing=""
for want in '^glm: chat template ' '^glm: RAM budget ' '^glm: model ' '^glm: settings: ' '^glm: sampling: ' \
            '^glm: \[[0-9]+ prompt tokens' '^glm: speculation: '; do
  grep -qE "$want" <<<"$loud" || missing="$missing /$want/"
done
[ -z "$missing" ] && echo "PASS VERBOSE=1 prints the set-up lines (template, RAM plan, model, settings, sampling, speculation)" \
  || { echo "FAIL VERBOSE=1 lacks$missing"; echo "$loud" | head -12; }
cmp -s "$T/quiet.out" "$T/loud.out" && echo "PASS VERBOSE changes stderr only: the answer is the same" \
  || echo "FAIL VERBOSE changed the answer"
# a budget that cannot hold the model still shows its accounting without VERBOSE
o=$(RAM_GB=0.001 SNAP=$M PROMPT=Hello NGEN=8 "$GLM" 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q 'RAM budget .* is too small: dense weights' <<<"$o" && echo "PASS a RAM budget that does not fit prints its accounting without VERBOSE" \
  || { echo "FAIL RAM_GB too small (exit $rc)"; echo "$o" | tail -3; }

#!/usr/bin/env bash
# Quality measurement (quality.c) on the tiny oracle models with the tiny tokenizer:
# PPL's windows and perplexity against tests/quality_ref.py (a numpy float64 reimplementation fed
# the very logits glm saved with LOGITS_SAVE LOGITS_TOP=0, and the independent oracle's logits of
# every window); KLD of a run against its own file (exactly 0, 100 % top-1) and of int4 against the
# float run (positive, equal to the reference's, top-k and full rows); the refusals of a logits
# file (junk, truncated, damaged, another model, another text, other windows); SCORE's choices and
# log-likelihoods against the oracle, and its context prefilled once per question.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
unset_settings
export THREADS=2
PY=/usr/bin/python3
F=tests/fixtures
T=$(mktemp -d /tmp/t_quality.XXXXXX); trap 'rm -rf "$T"' EXIT
M=$T/dense; tiny_model "$M" oracle_dense
S=$T/sparse; tiny_model "$S" oracle_sparse
same() { if [ "$2" = "$3" ]; then echo "PASS $1"; else echo "FAIL $1"; echo "  want: $2"; echo "  got:  $3"; fi; }
ref() { local out; out=$($PY tests/quality_ref.py "$@" 2>&1); echo "$out" | sed "s/^\(PASS\|FAIL\) /\1 [$tag] /"; }
head -c 3000 LICENSE > "$T/text.txt"                  # ~1000 tokens of the tiny tokenizer
printf 'Hello world, how are you?' > "$T/short.txt"   # fits one window

# ---- PPL against the reference ----------------------------------------------------------------
# f32 weights (64 16 16); the run saves its full logits rows; the reference recomputes everything
for case in "dense CTX=32" "dense CTX=32 PPL_STRIDE=32" "dense CTX=32 PPL_STRIDE=5" "dense CTX=33 BATCH=7" "sparse CTX=24" "dense short" "dense short BATCH=1"; do
  read -r which rest <<<"$case"
  dir=$M; [ "$which" = sparse ] && dir=$S
  text=$T/text.txt; [[ $rest == short* ]] && { text=$T/short.txt; rest=${rest#short}; }
  tag="$case"
  env SNAP=$dir PPL=$text PPL_JSON=$T/p.json LOGITS_SAVE=$T/p.lf LOGITS_TOP=0 $rest "$GLM" 64 16 16 >"$T/p.out" 2>"$T/p.err" ||
    { echo "FAIL [$case] PPL run failed"; tail -3 "$T/p.err"; continue; }
  ref ppl "$dir" "$T/p.lf" "$T/p.json"
done
# the one-window text scores every token after the first
n=$(echo '"Hello world, how are you?"' | SNAP=$M TOKENIZE=/dev/stdin "$GLM" 2>/dev/null | wc -w)
got=$(env SNAP=$M PPL=$T/short.txt "$GLM" 64 16 16 2>/dev/null)
if grep -qE "^PPL: [0-9.]+ \+/- [0-9.e+-]+ over $((n - 1)) tokens \(1 window of 512 tokens" <<<"$got"; then echo "PASS a text of $n tokens is one window scoring its last $((n - 1)) tokens"
else echo "FAIL one-window text of $n tokens: $got"; fi
# stdout's figure is the JSON's, to the printed digits
env SNAP=$M PPL=$T/text.txt CTX=32 PPL_JSON=$T/p.json "$GLM" 64 16 16 >"$T/p.out" 2>/dev/null
a=$(sed -nE 's/^PPL: ([0-9.e+-]+) .*/\1/p' "$T/p.out"); b=$($PY -c 'import json,sys; print("%.10g" % json.load(open(sys.argv[1]))["ppl"])' "$T/p.json")
same "PPL on stdout equals PPL_JSON's ppl to 10 digits" "$b" "$a"
# BOS=1: a config with bos_token_id leads every window with it, and then the first token is scored too
B=$T/bos; mkdir -p "$B"; for f in generation_config.json model.safetensors tokenizer.json; do ln -s "$M/$f" "$B/$f"; done
sed 's/"bos_token_id": null/"bos_token_id": 404/' "$F/oracle_dense/config.json" > "$B/config.json"
for rest in "CTX=64" "CTX=32"; do
  tag="BOS=1 $rest"
  env SNAP=$B PPL=$T/text.txt BOS=1 PPL_JSON=$T/p.json LOGITS_SAVE=$T/p.lf LOGITS_TOP=0 $rest "$GLM" 64 16 16 >/dev/null 2>"$T/p.err" || { echo "FAIL [$tag] run"; tail -3 "$T/p.err"; }
  ref ppl "$B" "$T/p.lf" "$T/p.json"
done
got=$(env SNAP=$B PPL=$T/short.txt BOS=1 "$GLM" 64 16 16 2>/dev/null)
if grep -q " over $n tokens (1 window of 512 tokens, stride 256, BOS)" <<<"$got"; then echo "PASS BOS=1: a one-window text scores all $n tokens"; else echo "FAIL BOS=1 one window: $got"; fi
expect_fail "BOS=1 without a bos_token_id names the file" 'BOS=1: .*dense/config\.json .*has no bos_token_id' env SNAP=$M PPL=$T/text.txt BOS=1 "$GLM" 64 16 16

# ---- KLD ----------------------------------------------------------------------------------------
ppl() { env SNAP=${SNAP_DIR:-$M} PPL=$T/text.txt CTX=32 "$@"; }
ppl LOGITS_SAVE=$T/ref_top.lf "$GLM" 64 16 16 >/dev/null 2>&1
ppl LOGITS_SAVE=$T/ref_full.lf LOGITS_TOP=0 "$GLM" 64 16 16 >/dev/null 2>&1
zero='KLD: mean 0 \+/- 0 \| median 0 \| p90 0 \| p99 0 \| max 0 '
for f in top full; do
  out=$(ppl KLD=$T/ref_$f.lf "$GLM" 64 16 16 2>&1)
  if grep -qE "^$zero" <<<"$out" && grep -q '^top-1 agreement: 100.0000%' <<<"$out" && grep -q '^PPL ratio: 1 (ln 0 ' <<<"$out"
  then echo "PASS KLD of a run against its own $f file: exactly 0, top-1 agreement 100 %, PPL ratio 1"
  else echo "FAIL KLD self ($f):"; grep -E '^(KLD|top-1|PPL ratio)|error' <<<"$out"; fi
done
out=$(ppl KLD=$T/ref_top.lf IDOT=0 BATCH=5 THREADS=1 "$GLM" 64 16 16 2>&1)
if grep -qE "^$zero" <<<"$out"; then echo "PASS KLD self is 0 with another BATCH, THREADS and IDOT=0 on f32 weights"; else echo "FAIL KLD self other batch: $(grep '^KLD' <<<"$out")"; fi
for bits in "8 8" "4 4"; do
  for f in top full; do
    tag="KLD int${bits% *} vs f32, $f reference"
    ppl KLD=$T/ref_$f.lf LOGITS_SAVE=$T/q.lf LOGITS_TOP=0 PPL_JSON=$T/q.json "$GLM" 64 $bits >"$T/q.out" 2>&1
    mean=$(sed -nE 's/^KLD: mean ([0-9.e+-]+) .*/\1/p' "$T/q.out")
    if [ -n "$mean" ] && awk -v m="$mean" 'BEGIN { exit !(m > 0) }'; then echo "PASS [$tag] is positive ($mean)"; else echo "FAIL [$tag] not positive: $(head -3 "$T/q.out")"; fi
    ref kld "$T/ref_$f.lf" "$T/q.lf" "$T/q.json"
  done
done
out=$(ppl KLD=$T/ref_top.lf GROUP=32 "$GLM" 64 4 4 2>&1); if grep -q '^KLD: mean' <<<"$out"; then echo "PASS KLD runs on int4-group (GROUP=32)"; else echo "FAIL int4 group KLD: $(tail -2 <<<"$out")"; fi

# ---- the logits file's refusals ------------------------------------------------------------------
size=$(stat -c %s "$T/ref_top.lf")
printf 'not a logits file' > "$T/junk.lf"
expect_fail "KLD: junk is refused by name" "KLD=$T/junk\.lf is not a logits file" ppl KLD=$T/junk.lf "$GLM" 64 16 16
head -c $((size - 100)) "$T/ref_top.lf" > "$T/trunc.lf"
expect_fail "KLD: a truncated file is refused" "KLD=$T/trunc\.lf is truncated: $((size - 100)) bytes where its header promises $size" ppl KLD=$T/trunc.lf "$GLM" 64 16 16
cp "$T/ref_top.lf" "$T/flip.lf"; printf '\x7f' | dd of="$T/flip.lf" bs=1 seek=$((size - 300)) conv=notrunc status=none
expect_fail "KLD: a changed byte is refused (damaged)" "KLD=$T/flip\.lf is damaged" ppl KLD=$T/flip.lf "$GLM" 64 16 16
expect_fail "KLD: a file of another model is refused, naming both" "KLD=$T/ref_top\.lf was made from another model \(SNAP=$M, vocab 512\); this run's model is SNAP=$S" \
  env SNAP_DIR=$S bash -c "$(declare -f ppl); T=$T M=$M ppl KLD=$T/ref_top.lf $GLM 64 16 16"
head -c 2000 LICENSE > "$T/other.txt"
expect_fail "KLD: a file of another text is refused, naming both texts" "was made from another text \(PPL=$T/text\.txt, [0-9]+ tokens\); PPL=$T/other\.txt has [0-9]+ tokens" \
  env SNAP=$M PPL=$T/other.txt CTX=32 KLD=$T/ref_top.lf "$GLM" 64 16 16
expect_fail "KLD: other windows are refused" 'was made with other windows \(CTX=32, PPL_STRIDE=16, BOS id -1\); this run has CTX=32, PPL_STRIDE=8' ppl KLD=$T/ref_top.lf PPL_STRIDE=8 "$GLM" 64 16 16
expect_fail "KLD: a missing file is named" "KLD=$T/none\.lf cannot open it" ppl KLD=$T/none.lf "$GLM" 64 16 16
expect_fail "LOGITS_SAVE and KLD on one file are refused" 'name the same file' ppl KLD=$T/ref_top.lf LOGITS_SAVE=$T/ref_top.lf "$GLM" 64 16 16
expect_fail "LOGITS_TOP must be below the vocabulary" 'LOGITS_TOP=512: the vocabulary has 512 ids' ppl LOGITS_SAVE=$T/x.lf LOGITS_TOP=512 "$GLM" 64 16 16
expect_fail "LOGITS_SAVE without PPL is refused" 'LOGITS_SAVE is set without its mode: set PPL=file' env SNAP=$M LOGITS_SAVE=$T/x.lf "$GLM"
expect_fail "KLD without PPL is refused" 'KLD is set without its mode: set PPL=file' env SNAP=$M KLD=$T/x.lf "$GLM"
expect_fail "PPL and SCORE together are refused" 'PPL and SCORE are different modes' env SNAP=$M PPL=$T/text.txt SCORE=$T/text.txt "$GLM" 64 16 16
expect_fail "PPL with PROMPT is refused" 'PPL=.* is a mode of its own' env SNAP=$M PPL=$T/text.txt PROMPT=hi "$GLM"
expect_fail "PPL=/dev/zero is refused" 'PPL=/dev/zero: is a character device' env SNAP=$M PPL=/dev/zero "$GLM" 64 16 16
expect_fail "a window of one token is refused" 'CTX=1 leaves fewer than 2 text tokens per window' env SNAP=$M PPL=$T/text.txt CTX=1 "$GLM" 64 16 16
expect_fail "PPL_STRIDE longer than a window is refused" 'PPL_STRIDE=40 is longer than a window \(32 text tokens\)' ppl PPL_STRIDE=40 "$GLM" 64 16 16
printf 'A' > "$T/one.txt"
expect_fail "a one-token text has nothing to score" 'the text has 1 token: nothing to score' env SNAP=$M PPL=$T/one.txt "$GLM" 64 16 16
ls "$T"/*.tmp.* >/dev/null 2>&1 && echo "FAIL LOGITS_SAVE left temporary files: $(ls "$T"/*.tmp.*)" || echo "PASS LOGITS_SAVE leaves no temporary file behind"

# ---- SCORE ----------------------------------------------------------------------------------------
cat > "$T/mc.jsonl" <<'JSONL'
{"ctx": "The cat sat on the", "endings": ["mat.", "moon", "a very long table in the kitchen", "dog"], "label": "0"}
{"ctx": "The cat sat on the", "endings": ["sofa", "roof"], "label": 1}
{"question": "What is two plus two?", "choices": {"text": ["four", "five", "six"], "label": ["A", "B", "C"]}, "answerKey": "C"}
{"question": "What is two plus two?", "choices": ["4", "5"], "answer": 1}

{"question": "Pick one", "choices": {"text": ["x", "y y"], "label": ["1", "2"]}, "answerKey": "2"}
{"question": "Which letter?", "choices": ["alpha", "beta", "gamma", "delta"], "answer": "D"}
JSONL
for bits in "16 16" "4 4"; do
  tag="SCORE $bits"
  env SNAP=$M SCORE=$T/mc.jsonl SCORE_JSON=$T/mc.json PROFILE=1 "$GLM" 64 $bits >"$T/mc.out" 2>"$T/mc.err" || { echo "FAIL [$tag] run"; tail -3 "$T/mc.err"; }
  [ "$bits" = "16 16" ] && ref score "$M" "$T/mc.jsonl" "$T/mc.json"
  # each context prefilled once: the forward passes ran exactly the prefilled context tokens and
  # the choices' tokens (but each choice's last), and prefilled + reused = the contexts' tokens
  read -r pre choices reused ran < <(sed -nE 's/^glm: SCORE: prefilled ([0-9]+) context tokens once for ([0-9]+) choices; reused ([0-9]+) .*choices ran ([0-9]+) tokens.*/\1 \2 \3 \4/p' "$T/mc.err")
  positions=$(sed -nE 's/^PROFILE: [0-9]+ forwards, ([0-9]+) positions.*/\1/p' "$T/mc.err")
  want=$($PY -c '
import json, sys
d = json.load(open(sys.argv[1]))
ctx = sum(len(i["context_ids"]) for i in d["items"])
run = sum(len(c["ids"]) - 1 for i in d["items"] for c in i["choices"])
n = sum(len(i["choices"]) for i in d["items"])
print(ctx, run, n)' "$T/mc.json")
  read -r ctx_total run_want n_choices <<<"$want"
  if [ -n "$pre" ] && [ "$choices" = "$n_choices" ] && [ $((pre + reused)) = "$ctx_total" ] && [ "$ran" = "$run_want" ] && [ "$positions" = $((pre + ran)) ] && [ "$reused" -gt 0 ]
  then echo "PASS [$tag] each context prefilled once: $pre context tokens for $choices choices, $reused reused, forwards ran $positions positions"
  else echo "FAIL [$tag] prefill accounting: stats '$pre $choices $reused $ran', PROFILE positions '$positions', want contexts $ctx_total, choices $n_choices, choice tokens $run_want"; fi
done
if grep -qE '^SCORE: accuracy [0-9.]+% \(95% CI [0-9.]+-[0-9.]+%\) by log-likelihood, .* per byte; [0-9]/6 and [0-9]/6 questions$' "$T/mc.out"; then echo "PASS SCORE prints accuracy with a 95 % interval"; else echo "FAIL SCORE summary: $(cat "$T/mc.out")"; fi
out=$(env SNAP=$M SCORE=$T/mc.jsonl SCORE_JSON=- "$GLM" 64 16 16 2>/dev/null)
if $PY -c 'import json,sys; d=json.loads(sys.stdin.read()); assert d["n"] == 6 and len(d["items"]) == 6' <<<"$out"; then echo "PASS SCORE_JSON=- writes the JSON alone to stdout"; else echo "FAIL SCORE_JSON=-: $(head -c 300 <<<"$out")"; fi
printf '{"ctx": "a", "endings": ["b", "c"], "label": 0}\n{"ctx": "a", "endings": ["b"], "label": 0}\n' > "$T/bad1.jsonl"
expect_fail "SCORE: one choice is refused with the line" 'SCORE=.*bad1\.jsonl: line 2 needs 2 to 64 choices' env SNAP=$M SCORE=$T/bad1.jsonl "$GLM" 64 16 16
printf '{"question": "a", "choices": ["b", "c"], "answer": "E"}\n' > "$T/bad2.jsonl"
expect_fail "SCORE: an answer naming no choice is refused" 'line 1 has an answer that names none of its 2 choices' env SNAP=$M SCORE=$T/bad2.jsonl "$GLM" 64 16 16
printf '{"prompt": "a"}\n' > "$T/bad3.jsonl"
expect_fail "SCORE: an unknown format says what it expects" 'line 1 has neither "ctx" \(HellaSwag\) nor "question"' env SNAP=$M SCORE=$T/bad3.jsonl "$GLM" 64 16 16
printf '{"ctx": "a", "endings": ["b", "c"], "label": 0}\nnot json\n' > "$T/bad4.jsonl"
expect_fail "SCORE: a line that is not JSON is named" 'bad4\.jsonl: line 2 line 1 col 1' env SNAP=$M SCORE=$T/bad4.jsonl "$GLM" 64 16 16
expect_fail "SCORE: a question longer than CTX is named" 'line 1 needs [0-9]+ tokens of context .* and CTX=4' env SNAP=$M SCORE=$T/mc.jsonl CTX=4 "$GLM" 64 16 16

help=$("$GLM" --help)
missing=""; for v in PPL PPL_STRIDE PPL_JSON BOS LOGITS_SAVE LOGITS_TOP KLD SCORE SCORE_JSON; do grep -qE "^  $v +default" <<<"$help" || missing="$missing $v"; done
same "--help lists every quality setting" "" "$missing"

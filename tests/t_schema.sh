#!/usr/bin/env bash
# SCHEMA and GRAMMAR (PROMPT mode): the answer follows a JSON schema / GBNF grammar through the
# Generator's allowed-token mask (grammar.h). On the tiny random-weight model (tests/fixtures/
# oracle_dense + tiny_tokenizer, whose byte-level vocabulary holds every single byte): at
# temperature 1 over 20 seeds every answer parses and validates against the schema (object, nested
# array, enum, integer range, anyOf, $ref), the answer ends at EOS once complete, and SPEC=off,
# mtp and ngram give the same answer (verification masks each row by the state of the drafts
# before it), sampled and greedy; with thinking on the constraint starts after </think>; a GBNF
# grammar's answers match it; a keyword the grammar cannot enforce, a bad grammar, a missing file,
# both settings at once and SCHEMA outside PROMPT are errors naming the cause. SERVE: OpenAI chat's
# response_format json_schema answers as PROMPT with SCHEMA (finish_reason stop), json_object gives
# a JSON object, an unenforced keyword is a 400 naming it, and the next request is free again;
# Ollama's format (a schema: the same answer; "json": a JSON object); the Responses API's
# text.format json_schema (greedy: the same answer).
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
unset_settings
export THREADS=2
PY=/usr/bin/python3
T=$(mktemp -d /tmp/t_schema.XXXXXX); trap 'rm -rf "$T"' EXIT
M=$T/model; tiny_model "$M" oracle_dense

cat >"$T/schema.json" <<'EOF'
{"type": "object",
 "properties": {
   "name": {"type": "string", "minLength": 1, "maxLength": 12},
   "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 1,
            "maxItems": 3},
   "n": {"type": "integer", "minimum": -5, "maximum": 300},
   "v": {"anyOf": [{"type": "boolean"}, {"$ref": "#/$defs/point"}]},
   "note": {"type": "string", "maxLength": 4}},
 "required": ["name", "tags", "n", "v"],
 "additionalProperties": false,
 "$defs": {"point": {"type": "object",
                     "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 9},
                                    "y": {"type": "array", "items": {"type": "integer"},
                                          "maxItems": 2}},
                     "required": ["x", "y"], "additionalProperties": false}}}
EOF
# A validator for the keywords above (the same checks as grammar.h's own tests).
cat >"$T/validate.py" <<'EOF'
import json, sys
sys.path.insert(0, "tests")   # run from the repository root
from schema_subset import valid
schema = json.load(open(sys.argv[1]))
bad = 0
for path in sys.argv[2:]:
    text = open(path, encoding="utf-8").read()
    try: v = json.loads(text)
    except Exception as e: print(f"  {path}: does not parse ({e}): {text!r}"); bad += 1; continue
    if not valid(v, schema): print(f"  {path}: does not validate: {text!r}"); bad += 1
sys.exit(1 if bad else 0)
EOF

run() {  # run NAME SETTINGS...: the answer into $T/NAME.out, the exit code into $T/NAME.rc
  local name=$1; shift
  env SNAP="$M" PROMPT="Describe a thing as JSON." THINK=0 NGEN=400 "$@" "$GLM" \
    >"$T/$name.out" 2>"$T/$name.err" </dev/null
  echo $? >"$T/$name.rc"
}

# ---- a schema, sampled: 20 seeds, every answer valid, every SPEC the same ----------------------
fails=0 outs=() eos=0
for seed in $(seq 1 20); do
  for spec in off mtp ngram; do run "s$seed.$spec" SCHEMA="$T/schema.json" TEMP=1 SEED=$seed SPEC=$spec; done
  outs+=("$T/s$seed.off.out")
  for spec in mtp ngram; do
    cmp -s "$T/s$seed.off.out" "$T/s$seed.$spec.out" || { fails=$((fails + 1)); echo "  seed $seed: SPEC=$spec differs"; }
  done
  grep -q "stop: eos" "$T/s$seed.off.err" && eos=$((eos + 1))
done
if $PY "$T/validate.py" "$T/schema.json" "${outs[@]}"; then echo "PASS SCHEMA, TEMP=1, 20 seeds: every answer parses and validates"
else echo "FAIL SCHEMA, TEMP=1: answers above break the schema"; fi
if [ -z "$(grep -Lx 0 "$T"/s*.rc)" ]; then echo "PASS SCHEMA: all 60 runs exit 0"
else echo "FAIL SCHEMA: runs exited non-zero: $(grep -Lx 0 "$T"/s*.rc | head -3)"; fi
if [ "$eos" = 20 ]; then echo "PASS SCHEMA: every answer ends at EOS once complete (stop: eos)"
else echo "FAIL SCHEMA: $eos of 20 answers stopped at EOS"; tail -1 "$T/s1.off.err"; fi
if [ "$fails" = 0 ]; then echo "PASS SCHEMA, TEMP=1, 20 seeds: SPEC=mtp and SPEC=ngram answer as SPEC=off"
else echo "FAIL SCHEMA: $fails answers differ between SPEC modes"; fi
n_distinct=$(md5sum "${outs[@]}" | cut -d' ' -f1 | sort -u | wc -l)
if [ "$n_distinct" -ge 10 ]; then echo "PASS SCHEMA, TEMP=1: the seeds give $n_distinct different answers"
else echo "FAIL SCHEMA, TEMP=1: only $n_distinct different answers in 20 seeds"; fi
acc=$(grep -ho "ngram: [0-9]*/" "$T"/s*.ngram.err | tr -dc '0-9\n' | awk '{ s += $1 } END { print s + 0 }')
if [ "$acc" -gt 0 ]; then echo "PASS SCHEMA: ngram drafts were accepted under the mask ($acc)"
else echo "FAIL SCHEMA: no draft was accepted, the verification under the mask went untested"; fi

# ---- greedy ------------------------------------------------------------------------------------
for spec in off mtp ngram; do run "g.$spec" SCHEMA="$T/schema.json" TEMP=0 SPEC=$spec; done
if $PY "$T/validate.py" "$T/schema.json" "$T/g.off.out" && cmp -s "$T/g.off.out" "$T/g.mtp.out" \
   && cmp -s "$T/g.off.out" "$T/g.ngram.out"
then echo "PASS SCHEMA, greedy: valid, the same with SPEC=off, mtp and ngram"
else echo "FAIL SCHEMA, greedy"; head -c 300 "$T"/g.*.out; fi
# without the schema the model's greedy answer is not JSON: the mask is what makes it so
run free TEMP=0 SPEC=off NGEN=40
if ! $PY -c 'import json,sys; json.load(open(sys.argv[1]))' "$T/free.out" 2>/dev/null
then echo "PASS without SCHEMA the same prompt's answer is not JSON"
else echo "FAIL without SCHEMA the answer is JSON already: the test proves nothing"; fi

# ---- thinking on: free reasoning, then the constrained answer after </think> ------------------
ok=1 closed=0
for seed in 10 12 17 19 26; do   # seeds whose reasoning ends within NGEN
  run "t$seed" SCHEMA="$T/schema.json" THINK=1 TEMP=1 SEED=$seed SPEC=off NGEN=600
  run "t$seed.ng" SCHEMA="$T/schema.json" THINK=1 TEMP=1 SEED=$seed SPEC=ngram NGEN=600
  cmp -s "$T/t$seed.out" "$T/t$seed.ng.out" || { ok=0; echo "  seed $seed: SPEC=ngram differs"; }
  if grep -q '</think>' "$T/t$seed.out"; then
    closed=$((closed + 1))
    grep -q "stop: eos" "$T/t$seed.err" || { ok=0; echo "  seed $seed: $(tail -1 "$T/t$seed.err")"; }
    $PY - "$T/t$seed.out" "$T/t$seed.json" <<'EOF'
import sys
t = open(sys.argv[1], encoding="utf-8").read()
open(sys.argv[2], "w", encoding="utf-8").write(t.split("</think>", 1)[1])
EOF
    $PY "$T/validate.py" "$T/schema.json" "$T/t$seed.json" || ok=0
  fi
done
if [ $ok = 1 ] && [ $closed -gt 0 ]; then echo "PASS SCHEMA with THINK=1: what follows </think> validates ($closed of 5 closed it), SPEC=ngram the same"
else echo "FAIL SCHEMA with THINK=1 ($closed of 5 answers closed the reasoning)"; fi

# ---- GBNF --------------------------------------------------------------------------------------
cat >"$T/g.gbnf" <<'EOF'
root ::= "x=" num ("," num){0,3} ";"   # a short list
num  ::= "-"? [1-9] [0-9]{0,2}
EOF
ok=1
for seed in 1 2 3 4 5 6 7 8; do
  run "b$seed" GRAMMAR="$T/g.gbnf" TEMP=1 SEED=$seed SPEC=off
  run "b$seed.ng" GRAMMAR="$T/g.gbnf" TEMP=1 SEED=$seed SPEC=ngram
  grep -qxE 'x=-?[1-9][0-9]{0,2}(,-?[1-9][0-9]{0,2}){0,3};' "$T/b$seed.out" || { ok=0; echo "  seed $seed: $(cat "$T/b$seed.out")"; }
  cmp -s "$T/b$seed.out" "$T/b$seed.ng.out" || { ok=0; echo "  seed $seed: SPEC=ngram differs"; }
done
if [ $ok = 1 ]; then echo "PASS GRAMMAR, TEMP=1, 8 seeds: every answer matches the grammar, SPEC=ngram the same"
else echo "FAIL GRAMMAR"; fi

# ---- errors ------------------------------------------------------------------------------------
echo '{"type": "object", "properties": {"id": {"type": "string", "pattern": "^[a-z]+$"}}}' >"$T/pattern.json"
expect_fail "SCHEMA with an unenforced keyword names it" "SCHEMA=.*pattern.json: #/properties/id: keyword 'pattern' is not enforced" \
  env SNAP="$M" PROMPT=hi SCHEMA="$T/pattern.json" "$GLM"
echo '{"type": "object",' >"$T/broken.json"
expect_fail "SCHEMA that is not JSON" "SCHEMA=.*broken.json" env SNAP="$M" PROMPT=hi SCHEMA="$T/broken.json" "$GLM"
expect_fail "SCHEMA missing file" "SCHEMA=$T/none.json" env SNAP="$M" PROMPT=hi SCHEMA="$T/none.json" "$GLM"
printf 'root ::= "a" undefined_rule\n' >"$T/bad.gbnf"
expect_fail "GRAMMAR with an undefined rule names it" "GRAMMAR=.*bad.gbnf: rule 'undefined_rule' is used but not defined" \
  env SNAP="$M" PROMPT=hi GRAMMAR="$T/bad.gbnf" "$GLM"
expect_fail "SCHEMA and GRAMMAR together" "set one" \
  env SNAP="$M" PROMPT=hi SCHEMA="$T/schema.json" GRAMMAR="$T/g.gbnf" "$GLM"
expect_fail "SCHEMA outside PROMPT" "SCHEMA constrains PROMPT" \
  env SNAP="$M" SERVE=127.0.0.1:0 SCHEMA="$T/schema.json" "$GLM"

# ---- SERVE: OpenAI chat's response_format ------------------------------------------------------
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$T"' EXIT
LOG=$T/serve.err
env SNAP="$M" SERVE=127.0.0.1:0 timeout 300 "$GLM" >"$T/serve.out" 2>"$LOG" </dev/null &
PIDS+=($!)
PORT=$(serving_port "$LOG" "$!") || { echo "FAIL SERVE did not start"; tail -5 "$LOG"; exit 1; }
URL=http://127.0.0.1:$PORT/v1/chat/completions
# body SEED FORMAT_JSON: a chat request at temperature 1 with thinking off
body() {
  $PY - "$1" "$2" <<'EOF'
import json, sys
print(json.dumps({"model": "m", "messages": [{"role": "user", "content": "Describe a thing as JSON."}],
                  "temperature": 1, "seed": int(sys.argv[1]), "max_tokens": 400,
                  "chat_template_kwargs": {"enable_thinking": False},
                  "response_format": json.loads(sys.argv[2])}))
EOF
}
content() { $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); c=d["choices"][0]; sys.stdout.write(c["message"]["content"]); sys.stderr.write(c["finish_reason"])' "$1" 2>"$1.finish"; }
fmt=$($PY -c 'import json,sys; print(json.dumps({"type": "json_schema", "json_schema": {"name": "thing", "strict": True, "schema": json.load(open(sys.argv[1]))}}))' "$T/schema.json")
ok=1 outs=()
for seed in 1 2 3 4 5 6; do
  curl -sS --max-time 120 "$URL" -H 'Content-Type: application/json' -d "$(body $seed "$fmt")" >"$T/api$seed.json"
  content "$T/api$seed.json" >"$T/api$seed.out"
  outs+=("$T/api$seed.out")
  [ "$(cat "$T/api$seed.json.finish")" = stop ] || { ok=0; echo "  seed $seed: finish $(cat "$T/api$seed.json.finish")"; }
  cmp -s "$T/api$seed.out" "$T/s$seed.off.out" || { ok=0; echo "  seed $seed: differs from PROMPT with SCHEMA"; }
done
if $PY "$T/validate.py" "$T/schema.json" "${outs[@]}" && [ $ok = 1 ]
then echo "PASS response_format json_schema: 6 seeds valid, finish stop, the same as PROMPT with SCHEMA"
else echo "FAIL response_format json_schema"; fi
echo '{"type": "object"}' >"$T/object.json"
ok=1 outs=()
for seed in 1 2 3 4; do
  curl -sS --max-time 120 "$URL" -H 'Content-Type: application/json' -d "$(body $seed '{"type": "json_object"}')" >"$T/obj$seed.json"
  content "$T/obj$seed.json" >"$T/obj$seed.out"
  outs+=("$T/obj$seed.out")
  [ "$(cat "$T/obj$seed.json.finish")" = stop ] || ok=0
done
if $PY "$T/validate.py" "$T/object.json" "${outs[@]}" && [ $ok = 1 ]
then echo "PASS response_format json_object: 4 seeds, each answer a JSON object, finish stop"
else echo "FAIL response_format json_object"; fi
bad=$($PY -c 'import json; print(json.dumps({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"d": {"type": "string", "format": "date"}}}}}))')
code=$(curl -sS --max-time 30 -o "$T/bad.json" -w '%{http_code}' "$URL" -H 'Content-Type: application/json' -d "$(body 1 "$bad")")
if [ "$code" = 400 ] && grep -q "keyword 'format' is not enforced" "$T/bad.json" && grep -q '"param":"response_format"' "$T/bad.json"
then echo "PASS response_format with an unenforced keyword: 400 naming it"
else echo "FAIL response_format with an unenforced keyword: $code $(head -c 300 "$T/bad.json")"; fi
# the next plain request is not constrained: its answer is the model's free text again
curl -sS --max-time 120 "$URL" -H 'Content-Type: application/json' -d "$(body 1 '{"type": "text"}')" >"$T/free.json"
content "$T/free.json" >"$T/free_api.out"
run free1 TEMP=1 SEED=1 SPEC=off NGEN=400
# (the API's content stops where a stray <think> would open reasoning: compare that far)
if $PY -c 'import sys; a, p = (open(f, "rb").read() for f in sys.argv[1:]); sys.exit(not (len(a) > 20 and p.startswith(a)))' "$T/free_api.out" "$T/free1.out"
then echo "PASS after a constrained request the next one is free (the same as PROMPT without SCHEMA)"
else echo "FAIL the constraint outlived its request"; head -c 200 "$T/free_api.out"; fi

# ---- SERVE: Ollama's format (a schema, or "json") ---------------------------------------------
ok=1 outs=()
for seed in 1 2 3; do
  $PY - "$seed" "$T/schema.json" >"$T/ollama$seed.body" <<'EOF'
import json, sys
print(json.dumps({"model": "m", "messages": [{"role": "user", "content": "Describe a thing as JSON."}],
                  "stream": False, "think": False, "format": json.load(open(sys.argv[2])),
                  "options": {"temperature": 1, "seed": int(sys.argv[1]), "num_predict": 400}}))
EOF
  curl -sS --max-time 120 "http://127.0.0.1:$PORT/api/chat" -d @"$T/ollama$seed.body" >"$T/ollama$seed.json"
  $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.stdout.write(d["message"]["content"]); sys.stderr.write(d["done_reason"])' \
    "$T/ollama$seed.json" >"$T/ollama$seed.out" 2>"$T/ollama$seed.reason"
  outs+=("$T/ollama$seed.out")
  [ "$(cat "$T/ollama$seed.reason")" = stop ] || ok=0
  cmp -s "$T/ollama$seed.out" "$T/s$seed.off.out" || { ok=0; echo "  seed $seed: differs from PROMPT with SCHEMA"; }
done
if $PY "$T/validate.py" "$T/schema.json" "${outs[@]}" && [ $ok = 1 ]
then echo "PASS Ollama format (a schema): 3 seeds valid, done_reason stop, the same as PROMPT with SCHEMA"
else echo "FAIL Ollama format (a schema)"; fi
printf '{"model": "m", "prompt": "Hi", "stream": false, "think": false, "format": "json", "options": {"temperature": 1, "seed": 4}}' >"$T/ogen.body"
curl -sS --max-time 120 "http://127.0.0.1:$PORT/api/generate" -d @"$T/ogen.body" >"$T/ogen.json"
$PY -c 'import json,sys; sys.stdout.write(json.load(open(sys.argv[1]))["response"])' "$T/ogen.json" >"$T/ogen.out"
if $PY "$T/validate.py" "$T/object.json" "$T/ogen.out"; then echo "PASS Ollama format json (/api/generate): a JSON object"
else echo "FAIL Ollama format json: $(head -c 200 "$T/ogen.json")"; fi

# ---- SERVE: the Responses API's text.format (greedy: the same as PROMPT's greedy answer) --------
$PY - "$T/schema.json" >"$T/resp.body" <<'EOF'
import json, sys
print(json.dumps({"model": "m", "input": "Describe a thing as JSON.", "temperature": 0,
                  "max_output_tokens": 400, "reasoning": {"effort": "none"},
                  "text": {"format": {"type": "json_schema", "name": "thing", "strict": True,
                                      "schema": json.load(open(sys.argv[1]))}}}))
EOF
curl -sS --max-time 120 "http://127.0.0.1:$PORT/v1/responses" -H 'Content-Type: application/json' -d @"$T/resp.body" >"$T/resp.json"
$PY -c '
import json, sys
d = json.load(open(sys.argv[1]))
sys.stdout.write("".join(p["text"] for o in d["output"] if o["type"] == "message" for p in o["content"]))
sys.stderr.write(d["status"])' "$T/resp.json" >"$T/resp.out" 2>"$T/resp.status"
if [ "$(cat "$T/resp.status")" = completed ] && cmp -s "$T/resp.out" "$T/g.off.out" && $PY "$T/validate.py" "$T/schema.json" "$T/resp.out"
then echo "PASS Responses text.format json_schema: completed, valid, the same as PROMPT with SCHEMA (greedy)"
else echo "FAIL Responses text.format json_schema: $(cat "$T/resp.status") $(head -c 300 "$T/resp.json")"; fi

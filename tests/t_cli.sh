#!/usr/bin/env bash
# The command line as a new user meets it, on the tiny oracle model with the tiny tokenizer:
# TEMPERATURE and a TEMP that is the temp directory, argument counting, --version, near-miss hints.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
unset_settings
export THREADS=2
F=tests/fixtures
T=$(mktemp -d /tmp/t_cli.XXXXXX); trap 'rm -rf "$T"' EXIT
M=$T/model
mkdir -p "$M"
for f in config.json generation_config.json model.safetensors; do ln -s "$ROOT/$F/oracle_dense/$f" "$M/$f"; done
ln -s "$ROOT/$F/tiny_tokenizer/tokenizer.json" "$M/tokenizer.json"
same() { if [ "$2" = "$3" ]; then echo "PASS $1"; else echo "FAIL $1"; echo "  want: $2"; echo "  got:  $3"; fi; }
has() { local name=$1 pat=$2 text=$3; if grep -qE -- "$pat" <<<"$text"; then echo "PASS $name"; else echo "FAIL $name: no /$pat/ in:"; echo "$text" | tail -5; fi; }
answer() { env SNAP=$M PROMPT=Hello NGEN=12 SEED=5 "$@" "$GLM" 64 16 16 2>"$T/err" </dev/null | od -An -c; }

# ---- temperature: TEMPERATURE is the setting; TEMP only when it is a number -------------------
greedy=$(answer TEMPERATURE=0)
hot=$(answer TEMPERATURE=1)
[ -n "$greedy" ] && [ "$greedy" != "$hot" ] && echo "PASS TEMPERATURE=0 and TEMPERATURE=1 answer differently" || echo "FAIL TEMPERATURE has no effect"
same "TEMP=0 (a number) is an alias of TEMPERATURE=0" "$greedy" "$(answer TEMP=0)"
got=$(answer TEMP=/tmp TEMPERATURE=0)
same "TEMP=/tmp with TEMPERATURE=0: runs, TEMPERATURE decides" "$greedy" "$got"
got=$(answer TEMP=/tmp)
same "TEMP=/tmp alone runs with the default temperature (0.7)" "$(answer TEMPERATURE=0.7)" "$got"
has "TEMP=/tmp: one note says it is ignored and names TEMPERATURE" \
  '^glm: note: TEMP=/tmp is not a number, so it is taken as the temp-directory variable and ignored; set TEMPERATURE$' \
  "$(answer TEMP=/tmp >/dev/null; cat "$T/err")"
same "TEMPERATURE wins over a numeric TEMP" "$greedy" "$(answer TEMP=1 TEMPERATURE=0)"
has "...and says so" 'TEMP=1 is ignored: TEMPERATURE=0 is set' "$(cat "$T/err")"
out=$(env TEMP=/tmp SNAP=$F/oracle_dense REF=$F/oracle_dense/reference.json TF=1 "$GLM" 64 16 16 2>&1)
if grep -q 'PREFILL.*24/24' <<<"$out" && ! grep -q TEMP <<<"$out"; then echo "PASS TEMP=/tmp does not disturb validation (no note where nothing is sampled)"
else echo "FAIL TEMP=/tmp with REF: $out"; fi
expect_fail "TEMPERATURE=abc is refused by name" 'TEMPERATURE=abc is not a number' env SNAP=$M PROMPT=x TEMPERATURE=abc "$GLM"
expect_fail "a numeric TEMP out of range is refused by name" 'TEMP=-1 is out of range' env SNAP=$M PROMPT=x TEMP=-1 "$GLM"
help=$("$GLM" --help)
has "--help lists TEMPERATURE" '^  TEMPERATURE +default 0\.7 ' "$help"
has "--help says how TEMP is taken" 'TEMP is accepted too when it is a number' "$help"

# ---- arguments, --version, hints --------------------------------------------------------------
expect_fail "four positional arguments: the count is blamed, not dense_bits" \
  '^glm: error: too many arguments: 4 given, at most 3 \(cache_slots expert_bits dense_bits\)$' "$GLM" 1 2 3 4
v=$("$GLM" --version)
has "--version names the version and the git commit" "^glm\.c [0-9.]+ \(commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$v"
has "--version lists the kernels this CPU runs" '^kernels this CPU runs:( vnni)?( avx2)? scalar \(KERNEL=auto picks (vnni|avx2|scalar)\)$' "$v"
hint() { env SNAP=$F/oracle_dense REF=$F/oracle_dense/reference.json TF=1 "$@" "$GLM" 64 16 16 2>&1 >/dev/null | grep warning; }
has "TOP_P hints NUCLEUS" 'environment variable TOP_P is not a setting; did you mean NUCLEUS\?' "$(hint TOP_P=0.5)"
has "lowercase prompt hints PROMPT" 'environment variable prompt is not a setting; did you mean PROMPT\?' "$(hint prompt=hi)"
has "lowercase snap hints SNAP" 'variable snap is not a setting; did you mean SNAP\?' "$(hint snap=x)"
same "TEMPERATURE is a setting: no warning" "" "$(hint TEMPERATURE=0.5)"
expect_fail "ABSORB=-1 (the old 'auto') is refused by name" 'ABSORB=-1 is out of range \[0, 1\]' \
  env SNAP=$F/oracle_dense REF=$F/oracle_dense/reference.json TF=1 ABSORB=-1 "$GLM" 64 16 16

# ---- Ctrl-C during a long prefill acts between layers, not at the end of the chunk --------------
# ~9,000 tokens in ONE chunk (BATCH 16384) take over a second on the tiny model; SIGINT a moment
# after the prefill started must stop it within the chunk, roll it back and say so.
long=$(printf 'hello world %.0s' $(seq 1500))
env SNAP=$M PROMPT="$long" CHAT_TEMPLATE=0 TEMPERATURE=0 NGEN=4 BATCH=16384 THREADS=1 "$GLM" 64 16 16 >/dev/null 2>"$T/int_err" </dev/null &
pid=$!
for _ in $(seq 200); do grep -q '^glm: sampling:' "$T/int_err" 2>/dev/null && break; sleep 0.05; done
sleep 0.2
kill -INT $pid 2>/dev/null
wait $pid; rc=$?
if grep -qE '^glm: prefill interrupted after 0 of [0-9]+ tokens$' "$T/int_err" && [ $rc = 130 ] && grep -q 'stop: interrupted' "$T/int_err"; then
  echo "PASS Ctrl-C within a long prefill chunk stops it, rolls it back and says 'prefill interrupted after 0 of N tokens' (exit 130)"
else echo "FAIL Ctrl-C during prefill (exit $rc):"; tail -3 "$T/int_err"; fi

# ---- a prompt on stdin -------------------------------------------------------------------------
want=$(env SNAP=$M PROMPT=Hello TEMPERATURE=0 NGEN=12 "$GLM" 64 16 16 2>/dev/null </dev/null | od -An -c)
got=$(echo Hello | env SNAP=$M TEMPERATURE=0 NGEN=12 "$GLM" 64 16 16 2>/dev/null | od -An -c)
if [ -n "$want" ] && [ "$want" = "$got" ]; then echo "PASS echo Hello | ./glm answers as PROMPT=Hello does (no mode, stdin not a terminal)"
else echo "FAIL stdin prompt: '$got' vs '$want'"; fi
same "PROMPT=- reads the prompt from stdin" "$want" "$(printf 'Hello' | env SNAP=$M PROMPT=- TEMPERATURE=0 NGEN=12 "$GLM" 64 16 16 2>/dev/null | od -An -c)"
same "TEMPLATE_ONLY with PROMPT=- renders the stdin text" "$(env SNAP=$M PROMPT=Hello TEMPLATE_ONLY=1 "$GLM" 2>&1 </dev/null)" \
  "$(printf 'Hello\r\n\n' | env SNAP=$M PROMPT=- TEMPLATE_ONLY=1 "$GLM" 2>&1)"
expect_fail "empty stdin and no mode: nothing to do, says stdin was empty" 'nothing to do: set PROMPT=.*stdin is not a terminal and was empty' \
  env SNAP=$M "$GLM" </dev/null
expect_fail "PROMPT=- with an empty stdin is refused by name" 'PROMPT=-: stdin is empty' env SNAP=$M PROMPT=- "$GLM" </dev/null
expect_fail "a prompt over 16 MB on stdin is refused" 'prompt on stdin is longer than 16 MB' \
  bash -c "head -c 17000000 /dev/zero | tr '\\0' a | env SNAP=$M TEMPLATE_ONLY=1 PROMPT=- '$GLM'"
expect_fail "a NUL byte in the stdin prompt is refused with its offset" 'NUL byte at offset 1' \
  bash -c "printf 'a\\0b' | env SNAP=$M '$GLM'"

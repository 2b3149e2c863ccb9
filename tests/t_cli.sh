#!/usr/bin/env bash
# The command line as a new user meets it, on the tiny oracle model with the tiny tokenizer:
# TEMPERATURE and a TEMP that is the temp directory, argument counting, --version, near-miss hints.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
unset_settings
export THREADS=2
F=tests/fixtures
T=$(mktemp -d /tmp/t_cli.XXXXXX); trap 'rm -rf "$T"' EXIT
M=$T/model; tiny_model "$M" oracle_dense
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
has "--version lists the kernels this CPU runs" '^kernels this CPU runs:( vnni)?( avxvnni)?( avx2)?( i8mm)?( dotprod)?( neon)? scalar \(KERNEL=auto picks (vnni|avxvnni|avx2|i8mm|dotprod|neon|scalar)\)$' "$v"
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

# ---- what a new user meets: validation's exit 3 explained, --help's order, silent mistakes ------
DREF=$F/oracle_dense/reference.json
out=$(env SNAP=$F/oracle_dense REF=$DREF TF=1 "$GLM" 2>&1 >/dev/null); rc=$?
has "validation with int4 weights (no 64 16 16): exit 3 says the oracle is f32 and the drift expected" \
  '^glm: exit 3: the predictions differ from the oracle, an f32 reference implementation\. This run quantized .*int4.*mismatches are expected' \
  "$(echo "rc=$rc"; grep 'exit 3' <<<"$out")"
has "...names the f32 path and what 64 16 16 means" \
  'must match every position: \./glm 64 16 16 \(cache_slots 64, expert_bits 16, dense_bits 16\)' "$out"
[ $rc = 3 ] && echo "PASS ...and exits 3" || echo "FAIL validation with int4 weights exited $rc, not 3"
out=$(env SNAP=$F/oracle_dense REF=$DREF TF=1 "$GLM" 64 16 16 2>&1); rc=$?
if [ $rc = 0 ] && grep -q '24/24' <<<"$out" && ! grep -q 'exit 3' <<<"$out"; then echo "PASS the f32 path matches and explains nothing"
else echo "FAIL f32 validation (exit $rc)"; echo "$out" | tail -3; fi

# --help: the settings a user sets come first, validation and debugging last, under headings
order=$(awk '$2 == "default" { print $1 }' <<<"$help" | tr '\n' ' ')
first_of() { local i=0 w; for w in $order; do i=$((i + 1)); [ "$w" = "$1" ] && { echo $i; return; }; done; echo 999; }
late=999; for v in REF TF MTP REPLAY ABSORB INDEXER LATENT_EPS IDOT; do n=$(first_of $v); [ $n -lt $late ] && late=$n; done
early=0; for v in SNAP PROMPT CHAT SERVE NGEN TEMPERATURE NUCLEUS SEED THINK RAM_GB THREADS; do
  n=$(first_of $v); [ $n -gt $early ] && early=$n; done
if [ "$(first_of SNAP)" = 1 ] && [ $early -lt $late ]; then echo "PASS --help lists SNAP first and every user setting before REF, TF, ABSORB..."
else echo "FAIL --help order: $order"; fi
has "--help has group headings" '^model and mode:$' "$help"
has "...validation and debugging last" '^validation and debugging:$' "$(grep -E '^[a-z].*:$' <<<"$help" | tail -1)"

# booleans: 1/0, yes/no, true/false, on/off in any case; anything else says what is accepted
yes_tf=$(env SNAP=$F/oracle_dense REF=$DREF TF=Yes "$GLM" 64 16 16 2>&1 | grep '^PREFILL')
has "TF=Yes is teacher forcing" '24/24' "$yes_tf"
same "CHAT=no with PROMPT answers as without CHAT" "$greedy" "$(answer TEMPERATURE=0 CHAT=no)"
same "CHAT=off, THINK=true: accepted" "$(answer TEMPERATURE=0 THINK=1)" "$(answer TEMPERATURE=0 CHAT=off THINK=true)"
expect_fail "CHAT=maybe: the error lists what a boolean takes" \
  '^glm: error: CHAT=maybe: expected 1 or 0 \(yes/no, true/false and on/off also do\), or -1' env SNAP=$M PROMPT=x CHAT=maybe "$GLM"
expect_fail "an empty PROMPT is refused (it would generate from nothing)" '^glm: error: PROMPT is empty' \
  env SNAP=$M PROMPT= "$GLM" 64 16 16
out=$(env SNAP=$M PROMPT=Hello NGEN=2 THREADS=100 "$GLM" 64 16 16 2>&1 </dev/null)
cpus=$(nproc)
has "THREADS=100 warns and is capped at the CPUs" "^glm: warning: THREADS=100 is more than the $cpus CPUs? this process can run on: using $cpus\$" "$out"
has "...which the run then uses" "threads $cpus " "$(grep '^glm: settings:' <<<"$out")"
has "NUCLUES (two letters swapped) hints NUCLEUS" 'variable NUCLUES is not a setting; did you mean NUCLEUS\?' "$(hint NUCLUES=0.5)"
for pair in THINKING:THINK MAX_TOKENS:NGEN N_CTX:CTX CONTEXT:CTX PORT:SERVE MODEL:SNAP TOP_P:NUCLEUS; do
  has "${pair%:*} hints ${pair#*:}" "variable ${pair%:*} is not a setting; did you mean ${pair#*:}\\?" "$(hint ${pair%:*}=1)"
done
# the variables a shell or desktop exports are not settings and get no hint (TERM and TMP are
# within two edits of TEMP, USER of USAGE...)
quiet=$(env -i PATH="$PATH" HOME=/root TERM=xterm LANG=C.UTF-8 SHELL=/bin/bash USER=me LOGNAME=me PWD=/ OLDPWD=/ \
  TMP=/tmp TMPDIR=/tmp TEMP=/tmp EDITOR=vi PAGER=less MAIL=/var/mail/me HOSTNAME=h DISPLAY=:0 LINES=40 COLUMNS=80 \
  SHLVL=1 TZ=UTC LC_ALL=C LANGUAGE=en XDG_RUNTIME_DIR=/run PS1='$ ' COLORTERM=truecolor LS_COLORS=x HISTSIZE=1 \
  MAKEFLAGS= VIRTUAL_ENV=/v SSH_TTY=/dev/pts/0 SUDO_USER=me USAGE=off THREADS=2 \
  SNAP=$F/oracle_dense REF=$DREF TF=1 "$GLM" 64 16 16 2>&1 >/dev/null | grep -E 'warning|did you mean')
same "common system variables get no near-miss warning" "" "$quiet"

# SNAP that is no folder is said so, by name, in every mode (not as a missing file inside it)
for mode in "PROMPT=hi" "REF=$DREF TF=1" "PLAN=1" "TOKENIZE=$T/x" "SERVE=0" "CHAT=1" "TEMPLATE_ONLY=1 PROMPT=hi"; do
  expect_fail "SNAP=/no/such/dir with ${mode%%=*}: no such folder" '^glm: error: SNAP=/no/such/dir: no such folder' \
    env SNAP=/no/such/dir $mode "$GLM"
done
expect_fail "SNAP naming a file: not a folder" "^glm: error: SNAP=$M/config\\.json is not a folder" env SNAP=$M/config.json PROMPT=hi "$GLM"
out=$(env SNAP=/no/such/dir DOCTOR=1 "$GLM" 2>&1); rc=$?
if [ $rc = 2 ] && grep -q '^DOCTOR FAIL model: SNAP=/no/such/dir: no such folder' <<<"$out" && ! grep -q 'header-only' <<<"$out"; then
  echo "PASS DOCTOR on a missing folder says so (no talk of a header-only copy), exit 2"
else echo "FAIL DOCTOR on a missing folder (exit $rc)"; echo "$out"; fi

# PLAN sizes the context as the run with the same settings does (REF: its lists; PROMPT: its tokens)
plan_vs_run() {   # plan_vs_run NAME ENV...: PLAN=1's context and RAM line are the run's
  local run plan
  run=$(env RAM_GB=4 "${@:2}" "$GLM" 64 16 16 2>&1 </dev/null)
  plan=$(env RAM_GB=4 PLAN=1 "${@:2}" "$GLM" 64 16 16 2>&1 </dev/null)
  local rc_ctx pc_ctx
  rc_ctx=$(grep '^glm: settings:' <<<"$run" | grep -oE 'context [0-9]+'); pc_ctx=$(grep '^glm: plan for' <<<"$plan" | grep -oE 'context [0-9]+')
  if [ -n "$rc_ctx" ] && [ "$rc_ctx" = "$pc_ctx" ] && [ "$(grep '^glm: RAM budget' <<<"$run")" = "$(grep '^glm: RAM budget' <<<"$plan")" ]; then
    echo "PASS PLAN=1 $1: the run's $rc_ctx and RAM plan line"
  else echo "FAIL PLAN=1 $1: run '$rc_ctx', plan '$pc_ctx'"; grep '^glm: RAM budget' <<<"$run"; grep '^glm: RAM budget' <<<"$plan"; fi
}
plan_vs_run "with REF, TF=1" SNAP=$F/oracle_dense REF=$DREF TF=1
plan_vs_run "with REF, greedy NGEN=5" SNAP=$F/oracle_dense REF=$DREF NGEN=5
plan_vs_run "with PROMPT and NGEN=5" SNAP=$M PROMPT="Hello there" NGEN=5
plan_vs_run "with PROMPT, NGEN=-1" SNAP=$M PROMPT="Hello there" NGEN=-1 TEMPERATURE=0 CTX=0

# Helpers for shell tests. Source it; call `check NAME CMD...` (passes when CMD exits 0),
# `expect_fail NAME PATTERN CMD...` (passes when CMD exits non-zero, does not crash, and its
# stderr+stdout match PATTERN). Every check prints one PASS/FAIL line for tests/run.sh.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GLM=${GLM:-$ROOT/glm}
# Every run starts cold and leaves nothing behind: no usage history from the user's cache directory
# (t_startup.sh turns it on where it tests it).
export USAGE=off KV_CACHE=off
# Tests read the set-up lines (RAM plan, model, settings, speculation) that VERBOSE=1 prints;
# t_cli.sh checks the quiet default without it.
export VERBOSE=1
# unset_settings: clears every variable in ./glm --help's settings table from the environment, so a
# value the user has exported cannot change a test, and keeps USAGE=off.
unset_settings() {
  local v
  for v in $("$GLM" --help | awk '$2 == "default" { print $1 }'); do unset "$v"; done
  export USAGE=off KV_CACHE=off VERBOSE=1
}
# tiny_model DIR FIXTURE [FILE...]: DIR becomes a model folder of links to tests/fixtures/FIXTURE's
# FILEs (default: config.json, generation_config.json and its *.safetensors; reference.json is
# for the tests, not the model) and the tiny tokenizer's tokenizer.json.
tiny_model() {
  local dir=$1 src=$ROOT/tests/fixtures/$2 f; shift 2
  [ $# -gt 0 ] || set -- config.json generation_config.json $(cd "$src" && echo *.safetensors)
  mkdir -p "$dir" || return 1
  for f in "$@"; do ln -s "$src/$f" "$dir/$f" || return 1; done
  ln -s "$ROOT/tests/fixtures/tiny_tokenizer/tokenizer.json" "$dir/tokenizer.json"
}
# serving_port LOG [PID]: waits (at most 20 s; less once process PID has exited) for the line
# "glm: serving ... at http://127.0.0.1:PORT/v1 ..." in the server's stderr LOG and prints PORT;
# prints nothing and returns 1 when it does not come.
serving_port() {
  local port
  for _ in $(seq 400); do
    port=$(sed -nE 's|^glm: serving .* at http://127\.0\.0\.1:([0-9]+)/v1 .*|\1|p' "$1" 2>/dev/null)
    [ -n "$port" ] && { echo "$port"; return 0; }
    [ -z "$2" ] || kill -0 "$2" 2>/dev/null || break
    sleep 0.05
  done
  return 1
}
check() {
  local name=$1; shift
  local out; out=$("$@" 2>&1)
  if [ $? -eq 0 ]; then echo "PASS $name"; else echo "FAIL $name: command failed: $*"; echo "$out" | tail -15; fi
}
expect_fail() {
  local name=$1 pat=$2; shift 2
  local out rc; out=$("$@" 2>&1); rc=$?
  if [ $rc -eq 0 ]; then echo "FAIL $name: expected failure, got exit 0"; echo "$out" | tail -5
  elif [ $rc -ge 128 ]; then echo "FAIL $name: crashed (exit $rc)"; echo "$out" | tail -5
  elif ! grep -qE -- "$pat" <<<"$out"; then echo "FAIL $name: error does not match /$pat/"; echo "$out" | tail -5
  else echo "PASS $name"; fi
}
# Integer kernels: `test_kernels` lists the ones to run here (scalar first), `skip_missing_kernels`
# prints "SKIP NAME: this CPU has no WHAT" for each one this CPU lacks. Both ask tests/bin/cpu_kernels
# (quant.h's own check, narrowed by TEST_CPU_FLAGS: see tests/cpu_kernels.h).
CPU_KERNELS=${CPU_KERNELS:-$ROOT/tests/bin/cpu_kernels}
test_kernels() { "$CPU_KERNELS" | awk '$2 == "yes" { printf "%s ", $1 }'; }
skip_missing_kernels() {
  "$CPU_KERNELS" | awk '$2 == "no" { k = $1; $1 = ""; $2 = ""; sub(/^ +/, ""); print "SKIP " k ": this CPU has no " $0 }'
}
# oracle_exact TAG COMMAND...: the three oracle fixtures through COMMAND (how glm runs: an emulator
# and a build), f32 path: teacher forcing, MTP and greedy decoding must match the oracle exactly.
oracle_exact() {
  local tag=$1; shift
  local fx tf gen F=$ROOT/tests/fixtures
  for fx in oracle_dense oracle_sparse oracle_fused_bf16; do
    tf=$(SNAP=$F/$fx REF=$F/$fx/reference.json TF=1 MTP=1 "$@" 64 16 16 2>/dev/null | grep -E 'C vs oracle' | sed 's/ positions$//')
    gen=$(SNAP=$F/$fx REF=$F/$fx/reference.json "$@" 64 16 16 2>/dev/null | grep '^Matching tokens')
    if [ "$(wc -l <<<"$tf")" -ge 2 ] && [ -n "$gen" ] && \
       awk '{ split($NF, a, "/"); if (a[1] != a[2] || a[2] == 0) bad = 1 } END { exit bad }' <<<"$tf
$gen"; then echo "PASS $tag $fx: teacher forcing, MTP and greedy match the oracle"
    else echo "FAIL $tag $fx: $(tr '\n' ' ' <<<"$tf $gen")"; fi
  done
}
# logits_as_native TAG "KERNELS" COMMAND...: the integer path (IDOT=1) through COMMAND (an emulator
# and a build) gives the native build's ($GLM) logits bit for bit, for each of KERNELS (KERNEL=auto
# lets the emulated CPU choose) in decode (BATCH=1) and batched (BATCH=5), over four precisions.
logits_as_native() {
  local tag=$1 kernels=$2; shift 2
  local cfg bits group native h k bt ok runs F=$ROOT/tests/fixtures
  for cfg in "8 8 0" "4 4 32" "4 4 0" "2 4 0"; do
    bits=${cfg% *}; group=${cfg##* }
    local env_=(SNAP=$F/oracle_sparse REF=$F/oracle_sparse/reference.json TF=1 IDOT=1 GROUP=$group)
    native=$(env "${env_[@]}" BATCH=5 "$GLM" 64 $bits 2>/dev/null | grep '^TF logits hash')
    ok=1; runs=0
    for k in $kernels; do
      for bt in "1 1" "5 2"; do
        h=$(env "${env_[@]}" KERNEL=$k BATCH=${bt% *} THREADS=${bt#* } "$@" 64 $bits 2>/dev/null | grep '^TF logits hash')
        runs=$((runs + 1))
        if [ -z "$native" ] || [ "$h" != "$native" ]; then ok=0; echo "  KERNEL=$k BATCH=${bt% *}: '$h' vs native '$native'"; fi
      done
    done
    [ $ok = 1 ] && echo "PASS $tag IDOT=1 bits $bits GROUP=$group: logits bit-identical to the native build over $runs runs ($kernels, BATCH 1 and 5)" \
      || echo "FAIL $tag IDOT=1 bits $bits GROUP=$group: logits differ from the native build's"
  done
}

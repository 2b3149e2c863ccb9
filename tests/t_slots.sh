#!/usr/bin/env bash
# SLOTS: a server that answers several conversations at once, on the tiny sparse oracle model
# (tests/fixtures/oracle_sparse, its MTP head included, with tests/fixtures/tiny_tokenizer; no EOS,
# so every answer runs to max_tokens):
#   - four concurrent requests to SLOTS=4 (greedy and seeded sampling, whole and streamed) each
#     answer byte for byte what the same request alone answers on a SLOTS=1 server; likewise with
#     SPEC=mtp; the log shows steps that shared a forward with other slots;
#   - a client that disconnects mid-stream frees its slot (SLOTS=2: two requests after it run
#     together);
#   - a long prompt's prefill lets another slot's stream go on between its chunks;
#   - PLAN counts a KV cache per slot; SLOTS=0 picks as many as an eighth of the budget holds (at
#     most 4; one with SESSION); SESSION with SLOTS>1 is refused by name.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
unset_settings
export THREADS=1
PY=/usr/bin/python3
T=$(mktemp -d /tmp/t_slots.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
command -v curl >/dev/null || { echo "FAIL slots_tools: curl is not installed"; exit 1; }
M=$T/model
tiny_model "$M" oracle_sparse config.json model-00001-of-00001.safetensors out-mtp-00000.safetensors
printf '{"eos_token_id": []}' > "$M/generation_config.json"
client() { timeout 300 $PY tests/slots_client.py "$@"; }

# serve NAME [VAR=value ...]: sets PID, PORT, LOG
serve() {
  local name=$1; shift
  LOG=$T/$name.err
  env SNAP="$M" SERVE=127.0.0.1:0 "$@" timeout 300 "$GLM" >"$T/$name.out" 2>"$LOG" </dev/null &
  PID=$!; PIDS+=("$PID")
  PORT=$(serving_port "$LOG" "$PID") && return 0
  echo "FAIL server_start_$name: no serving line"; tail -5 "$LOG"; exit 1
}
stop() {
  kill -TERM "$PID"; wait "$PID"; local rc=$?
  if [ $rc -eq 0 ] && grep -q "^glm: server stopped cleanly" "$LOG"; then echo "PASS $1: SIGTERM, exit 0, stopped cleanly"
  else echo "FAIL $1: exit $rc"; tail -5 "$LOG"; fi
}

for spec in off mtp; do
  serve one$spec SPEC=$spec
  client answers "$PORT" "$T/alone$spec" 0 || echo "FAIL slots_$spec: the requests alone failed"
  stop "SLOTS=1 SPEC=$spec server"
  serve four$spec SPEC=$spec SLOTS=4
  grep -q "^glm: serving .*4 answers at a time" "$LOG" && echo "PASS SLOTS=4 SPEC=$spec: the serving line says 4 answers at a time" \
    || echo "FAIL SLOTS=4 serving line"
  client answers "$PORT" "$T/together$spec" 1 || echo "FAIL slots_$spec: the concurrent requests failed"
  same=0
  for k in 0 1 2 3; do
    [ -s "$T/alone$spec.$k" ] && cmp -s "$T/alone$spec.$k" "$T/together$spec.$k" && same=$((same + 1))
  done
  [ $same -eq 4 ] && echo "PASS SLOTS=4 SPEC=$spec: four concurrent answers (greedy, seeded, whole, streamed) equal each alone on SLOTS=1, byte for byte" \
    || echo "FAIL SLOTS=4 SPEC=$spec: $same of 4 answers equal the answers alone"
  shared=$(sed -nE 's/^glm: POST .* ([0-9]+) steps shared a forward with other slots.*/\1/p' "$LOG" | awk '{ s += $1 } END { print s + 0 }')
  [ "$shared" -gt 0 ] && echo "PASS SLOTS=4 SPEC=$spec: the log counts $shared steps that shared a forward with other slots" \
    || { echo "FAIL SLOTS=4 SPEC=$spec: no step shared a forward"; grep POST "$LOG"; }
  stop "SLOTS=4 SPEC=$spec server"
  grep -qE "^glm: slots: [0-9]+ decode forwards, [1-9][0-9]* of them for several answers" "$LOG" \
    && echo "PASS SLOTS=4 SPEC=$spec: the closing line counts forwards for several answers" || echo "FAIL SLOTS=4 closing line"
done

# a client that disconnects mid-stream frees its slot: with two slots, two requests after it run
# at the same time (their steps share forwards); a slot still held would leave them one at a time
serve gone SLOTS=2
client disconnect "$PORT" || echo "FAIL slots_disconnect: the stream did not start"
for _ in $(seq 200); do grep -q "client gone" "$LOG" && break; sleep 0.05; done
cpids=()
for k in 1 2; do
  curl -sS --max-time 60 -o /dev/null -w '%{http_code} ' "http://127.0.0.1:$PORT/v1/completions" \
    -d '{"prompt":"alpha","max_tokens":200,"temperature":0}' > "$T/code$k" & cpids+=($!)
done
wait "${cpids[@]}"
codes=$(cat "$T/code1" "$T/code2")
both=$(grep -cE '^glm: POST .* [1-9][0-9]* steps shared a forward with other slots' "$LOG")
grep -q "client gone" "$LOG" && [ "$codes" = "200 200 " ] && [ "$both" -eq 2 ] \
  && echo "PASS SLOTS=2: a client that left mid-stream freed its slot (the next two requests ran together: $codes)" \
  || { echo "FAIL slots disconnect: codes $codes, $both answers shared forwards"; grep POST "$LOG"; }
stop "SLOTS=2 server after a disconnect"

# a long prompt's prefill runs in chunks between the decode steps of the others: a stream keeps
# going while it runs (about 12k tokens in chunks of BATCH=16)
$PY -c 'import random; random.seed(1); w = "alpha beta gamma delta river stone cloud seven".split(); print(" ".join(random.choice(w) for _ in range(3000)))' > "$T/long.txt"
serve long SLOTS=2 BATCH=16 CTX=16384
during=$(client interleave "$PORT" "$T/long.txt")
[ -n "$during" ] && [ "$during" -ge 500 ] && echo "PASS SLOTS=2: a stream went on during another request's long prefill ($during events meanwhile)" \
  || { echo "FAIL SLOTS=2 interleave: $during events during the prefill"; grep POST "$LOG"; }
stop "SLOTS=2 server after a long prefill"

# PLAN counts a KV cache (and run state) per slot
kv1=$(env SNAP="$M" PLAN=json "$GLM" 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin)["kv_scratch_bytes"])')
kv4=$(env SNAP="$M" PLAN=json SLOTS=4 "$GLM" 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin)["kv_scratch_bytes"])')
$PY -c "import sys; sys.exit(not (int('$kv1') > 0 and int('$kv4') >= 3.9 * int('$kv1')))" 2>/dev/null \
  && echo "PASS PLAN with SLOTS=4 counts four KV caches ($kv4 bytes against $kv1 for one)" || echo "FAIL PLAN SLOTS=4: $kv4 against $kv1"
env SNAP="$M" PLAN=1 SLOTS=4 "$GLM" 2>/dev/null | grep -q "KV cache and scratch [0-9.]* GB (4 KV caches: SLOTS)" \
  && echo "PASS PLAN's RAM line says SLOTS=4 holds 4 KV caches" || echo "FAIL PLAN SLOTS=4 RAM line"
# SLOTS=0 (the default) for a server: as many KV caches as an eighth of the budget holds, at most
# 4; one with SESSION; a plan without SERVE counts one
one=$(env SNAP="$M" PLAN=json SLOTS=1 SERVE=127.0.0.1:0 "$GLM" 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin)["kv_scratch_bytes"])')
auto_for() { env SNAP="$M" PLAN=1 SERVE=127.0.0.1:0 "$@" "$GLM" 2>&1 | grep -o '([0-9]* KV caches: SLOTS=0, from the budget)' | grep -o '^([0-9]*' | tr -d '('; }
big=$(auto_for RAM_GB=20); small=$(auto_for RAM_GB=$($PY -c "print($one * 8 * 1.5 / 1e9 + 0.2)")); sess=$(auto_for RAM_GB=20 SESSION=$T/s.bin)
plain=$(env SNAP="$M" PLAN=1 RAM_GB=20 "$GLM" 2>&1 | grep -c 'KV caches')
[ "$big" = 4 ] && [ -n "$small" ] && [ "$small" -ge 2 ] && [ "$small" -lt 4 ] && [ -z "$sess" ] && [ "$plain" = 0 ] \
  && echo "PASS SLOTS=0: 4 KV caches in a large budget, $small when an eighth holds fewer, 1 with SESSION or without SERVE" \
  || echo "FAIL SLOTS=0 choice: large '$big', small '$small', SESSION '$sess', without SERVE $plain lines"

out=$(env SNAP="$M" SERVE=127.0.0.1:0 SLOTS=2 SESSION="$T/s.session" timeout 60 "$GLM" 2>&1 </dev/null); rc=$?
[ $rc -ne 0 ] && grep -q "SESSION=.*SLOTS=1" <<<"$out" && echo "PASS SESSION with SLOTS=2 is refused by name" \
  || { echo "FAIL SESSION with SLOTS=2: exit $rc"; tail -2 <<<"$out"; }

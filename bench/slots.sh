#!/usr/bin/env bash
# Aggregate decode throughput of a SLOTS=4 server with 1, 2 and 4 concurrent clients, on the
# GLM-5.2-shaped bench model (tools/make_glm_bench_model.py). It has no tokenizer, so the tiny test
# tokenizer, its vocabulary padded with made-up pieces to the model's vocab_size, is put beside its
# weights: the prompts are a few of its ids, and the answers are text nobody reads (the token
# counts come from usage). Each client
# streams one greedy answer of TOKENS tokens; the figure is all clients' tokens over the seconds
# from the first request to the last answer, after a warm-up (warm experts). Prints the CPU, the
# settings and one line per client count.
#   bench/slots.sh [MODEL_DIR]      default $BENCH_MODEL or /work/glm_bench128
#   env: TOKENS (default 32), CLIENTS (default "1 2 4"), SLOTS (default 4), RAM_GB (default 20),
#        THREADS (default 0: all cores), SPEC (default off)
set -u
cd "$(dirname "$0")/.." || exit 1
MODEL=${1:-${BENCH_MODEL:-/work/glm_bench128}}
TOKENS=${TOKENS:-32}; CLIENTS=${CLIENTS:-1 2 4}; SLOTS=${SLOTS:-4}; RAM=${RAM_GB:-20}
[ -f "$MODEL/config.json" ] || { echo "no bench model at $MODEL: python3 tools/make_glm_bench_model.py $MODEL"; exit 1; }
[ -x ./glm ] || { echo "build glm first (make)"; exit 1; }
T=$(mktemp -d /tmp/bench_slots.XXXXXX)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
for f in "$MODEL"/*.safetensors "$MODEL"/config.json "$MODEL"/generation_config.json; do ln -s "$(realpath "$f")" "$T/"; done
python3 - "$MODEL/config.json" tests/fixtures/tiny_tokenizer/tokenizer.json "$T/tokenizer.json" <<'PY'
import json, sys
vocab = json.load(open(sys.argv[1]))["vocab_size"]
t = json.load(open(sys.argv[2]))
used = set(t["model"]["vocab"].values()) | {a["id"] for a in t.get("added_tokens", [])}
for i in range(vocab):
    if i not in used: t["model"]["vocab"]["<pad%d>" % i] = i
json.dump(t, open(sys.argv[3], "w"))
PY
echo "bench: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores;" \
  "model $MODEL, SLOTS=$SLOTS, RAM_GB=$RAM, THREADS=${THREADS:-0}, SPEC=${SPEC:-off}, $TOKENS tokens a client"
env SNAP="$T" SERVE=127.0.0.1:0 SLOTS="$SLOTS" RAM_GB="$RAM" THREADS="${THREADS:-0}" SPEC="${SPEC:-off}" \
  KV_CACHE=off USAGE=off ./glm >/dev/null 2>"$T/log" </dev/null &
PID=$!
PORT=
for _ in $(seq 1200); do
  PORT=$(sed -nE 's|^glm: serving .* at http://127\.0\.0\.1:([0-9]+)/v1 .*|\1|p' "$T/log")
  [ -n "$PORT" ] && break
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.1
done
[ -n "$PORT" ] || { echo "the server did not start:"; tail -5 "$T/log"; exit 1; }
# warm-up: the largest client count's answers, twice, so every expert the measured runs route to is
# in the cache (the answers are greedy: the same prompts route the same way again)
max=$(tr ' ' '\n' <<<"$CLIENTS" | sort -n | tail -1)
for _ in 1 2; do python3 tests/slots_client.py bench "$PORT" "$max" "$TOKENS" >/dev/null; done
for n in $CLIENTS; do python3 tests/slots_client.py bench "$PORT" "$n" "$TOKENS"; done
kill -TERM "$PID"; wait "$PID"; PID=
grep -E '^glm: slots:' "$T/log"

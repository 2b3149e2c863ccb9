#!/usr/bin/env bash
# The prefix cache (KV_CACHE, KV_CACHE_GB) on the tiny oracle model with the tiny tokenizer (as
# t_prompt.sh assembles it), with a system prompt of ~1,400 tokens:
#   - PROMPT twice with the same SYSTEM and another message: the second run restores the shared
#     beginning (its stats line says how many tokens were reused) and answers byte for byte what a
#     KV_CACHE=off run answers, greedy, seeded sampling, and with MTP drafts (SPEC=mtp);
#   - a junk, a truncated and foreign entries (another model, IDOT=0, expert_bits 8) at the names a
#     lookup opens are skipped with a warning naming the file, and rewritten;
#   - kill -9 at random moments of runs that write entries (after each BATCH chunk of the
#     prefill), then a run of the same prompt: no
#     entry is refused, what survived is reused, the answer is the uncached one;
#   - KV_CACHE_GB: the directory stays under the budget, the least recently used entries go first
#     and the beginning of the most recent prompt stays;
#   - KV_CACHE=off writes nothing; the default directory is $XDG_CACHE_HOME/glm/kv-<fingerprint>;
#   - CHAT restores too; the server reports restored tokens as usage.prompt_tokens_details
#     .cached_tokens after a restart and answers as before.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
unset_settings
unset KV_CACHE
export THREADS=2 NGEN=24
PY=/usr/bin/python3
T=$(mktemp -d /tmp/t_kvcache.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
M=$T/model; tiny_model "$M" oracle_dense
M2=$T/sparse; tiny_model "$M2" oracle_sparse
export SNAP=$M XDG_CACHE_HOME=$T/xdg
SYS=$($PY -c "print(' '.join('rule %d: answer briefly and kindly.' % i for i in range(140)))")
export SYSTEM=$SYS
KV=$T/kv
# run NAME [VAR=value ...] [-- ARGS]: PROMPT mode; stdout to $T/NAME.out, stderr to $T/NAME.err
run() {
  local name=$1 vars=(); shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  env TEMPERATURE=0 "${vars[@]}" "$GLM" "$@" >"$T/$name.out" 2>"$T/$name.err" </dev/null
}
reused() { sed -nE 's/^glm: \[[0-9]+ prompt tokens, ([0-9]+) reused,.*/\1/p' "$T/$1.err"; }
prompt_n() { sed -nE 's/^glm: \[([0-9]+) prompt tokens.*/\1/p' "$T/$1.err"; }
entries() { find "$1" -name '*.kv' 2>/dev/null | wc -l; }

# ---- PROMPT twice: the shared beginning comes from disk, the answer is the uncached one ----------
run off1 KV_CACHE=off PROMPT="Hello there"
run off2 KV_CACHE=off PROMPT="What now?"
run first KV_CACHE=$KV PROMPT="Hello there"
n_first=$(prompt_n first); e1=$(entries "$KV")
if cmp -s "$T/off1.out" "$T/first.out" && [ -s "$T/first.out" ] && [ "$e1" = $((n_first / 64)) ] && [ -z "$(reused first)" ]
then echo "PASS first run: answer == KV_CACHE=off's, $e1 entries written for $n_first prompt tokens"
else echo "FAIL first run: $e1 entries for $n_first tokens, reused '$(reused first)'"; tail -3 "$T/first.err"; fi
run second KV_CACHE=$KV PROMPT="What now?"
r=$(reused second)
if cmp -s "$T/off2.out" "$T/second.out" && [ -n "$r" ] && [ "$r" -ge $(((n_first - 64) / 64 * 64)) ] && [ $((r % 64)) = 0 ]
then echo "PASS second run, another message: $r tokens reused (stats line), answer == KV_CACHE=off's byte for byte"
else echo "FAIL second run: reused '$r' of $n_first"; cat "$T/second.err" | tail -3; cmp "$T/off2.out" "$T/second.out"; fi
run samp_off KV_CACHE=off PROMPT="What now?" TEMPERATURE=0.8 SEED=7
run samp KV_CACHE=$KV PROMPT="What now?" TEMPERATURE=0.8 SEED=7
if cmp -s "$T/samp_off.out" "$T/samp.out" && [ -n "$(reused samp)" ]
then echo "PASS seeded sampling: $(reused samp) reused, answer == KV_CACHE=off's"
else echo "FAIL seeded sampling with the prefix cache"; fi
run mtp_off KV_CACHE=off PROMPT="What now?" SPEC=off
run mtp KV_CACHE=$KV PROMPT="What now?" SPEC=mtp DRAFT=3
if cmp -s "$T/mtp_off.out" "$T/mtp.out" && [ -n "$(reused mtp)" ]
then echo "PASS SPEC=mtp after a restore (the head's slots there are stale): answer == SPEC=off, KV_CACHE=off"
else echo "FAIL SPEC=mtp with the prefix cache"; tail -3 "$T/mtp.err"; fi

# ---- damaged and foreign entries: skipped with a warning naming the file, then rewritten --------
nth() { ls "$KV" | sort | sed -n "$1p"; }   # the Nth entry by position
bad_case() {   # bad_case NAME PATTERN: entry 3 was damaged by the caller
  local name=$1 pat=$2 file=$KV/$(nth 3)
  run "bad_$name" KV_CACHE=$KV PROMPT="What now?"
  local r; r=$(reused "bad_$name")
  if grep -qE "warning: prefix cache entry $file $pat" "$T/bad_$name.err" && [ "$r" = 128 ] &&
     cmp -s "$T/off2.out" "$T/bad_$name.out" && [ -s "$file" ]; then
    run "again_$name" KV_CACHE=$KV PROMPT="What now?"
    if [ "$(reused "again_$name")" = "$(reused second)" ] && ! grep -q warning "$T/again_$name.err"
    then echo "PASS $name entry: skipped with a warning naming it, 128 tokens reused before it, answer unchanged, rewritten"
    else echo "FAIL $name entry: not rewritten (reused $(reused "again_$name"))"; fi
  else echo "FAIL $name entry: reused '$r'"; grep -E 'warning|prompt tokens' "$T/bad_$name.err"; fi
}
head -c 5000 /dev/urandom > "$KV/$(nth 3)"; bad_case junk 'is not a glm prefix cache entry'
f=$KV/$(nth 3); truncate -s $(($(stat -c %s "$f") - 100)) "$f"; bad_case truncated 'is truncated'
f=$KV/$(nth 3); $PY - "$f" <<'EOF'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 1; open(p, "wb").write(b)
EOF
bad_case flipped 'is corrupt \(its checksum'
foreign() {   # foreign NAME PATTERN VAR=value...: entry 3 of a run with other settings under entry 3's name
  local name=$1 pat=$2; shift 2
  rm -rf "$T/other"; run "other_$name" KV_CACHE=$T/other PROMPT="What now?" "$@"
  cp "$T/other/$(ls "$T/other" | sort | sed -n 3p)" "$KV/$(nth 3)"
  bad_case "$name" "$pat"
}
foreign "IDOT=0" 'was written with other settings \(IDOT=0 there, 1 here\)' IDOT=0
foreign "another model" 'was written for another model' SNAP=$M2
run bits_first KV_CACHE=$T/bits PROMPT="What now?" -- 64 8 8
cp "$T/bits/$(ls "$T/bits" | sort | sed -n 3p)" "$KV/$(nth 3)"
bad_case "expert_bits 8" 'was written for other weight formats'

# ---- kill -9 while entries are written, then a restart -------------------------------------------
KK=$T/kill
LONG=$($PY -c "print(' '.join('clause %d holds, and nothing else does.' % i for i in range(200)))")
run kill_ref KV_CACHE=off SYSTEM="$LONG" PROMPT="Go"
t0=$(date +%s%N); run kill_time KV_CACHE=$T/kill_time SYSTEM="$LONG" PROMPT="Go" BATCH=256; t1=$(date +%s%N)
span=$(( (t1 - t0) / 1000000 ))   # ms of a whole run that writes every entry
for i in $(seq 12); do
  env TEMPERATURE=0 KV_CACHE=$KK SYSTEM="$LONG" PROMPT="Go" BATCH=256 "$GLM" >/dev/null 2>&1 </dev/null &
  p=$!
  sleep "$($PY -c "import random; print(random.uniform(0, $span / 1000.0))")"
  kill -9 $p 2>/dev/null; wait $p 2>/dev/null
done
survived=$(entries "$KK")
run kill_after KV_CACHE=$KK SYSTEM="$LONG" PROMPT="Go"
r=$(reused kill_after); r=${r:-0}
if ! grep -q 'warning' "$T/kill_after.err" && cmp -s "$T/kill_ref.out" "$T/kill_after.out" && [ "$r" -le $((survived * 64)) ] &&
   { [ "$survived" = 0 ] || [ "$r" -gt 0 ]; } && [ -z "$(find "$KK" -name '*.tmp.*')" ]
then echo "PASS kill -9 at 12 random moments of ${span} ms runs: $survived entries survived, none refused, $r tokens reused, answer unchanged"
else echo "FAIL kill -9: $survived survived, reused $r"; grep -E 'warning|prompt tokens' "$T/kill_after.err"; ls "$KK" | head; fi

# ---- KV_CACHE_GB: least recently used out first ---------------------------------------------------
LRU=$T/lru
size1=$(stat -c %s "$KV/$(nth 1)")
budget=$($PY -c "print(round($size1 * 10.5 / 1e9, 9))")   # room for 10 entries
run lru_a KV_CACHE=$LRU KV_CACHE_GB=$budget SYSTEM="$LONG" PROMPT="Go"
run lru_b KV_CACHE=$LRU KV_CACHE_GB=$budget PROMPT="What now?"
total=$(du -cb "$LRU"/*.kv | tail -1 | cut -f1)
starts=$(ls "$LRU" | sort | cut -c1-7 | sed 's/^0*//; s/^$/0/' | tr '\n' ' ')
run lru_b2 KV_CACHE=$LRU KV_CACHE_GB=$budget PROMPT="What now?"
if [ "$total" -le "$($PY -c "print(int($budget * 1e9))")" ] && [ "$starts" = "0 64 128 192 256 320 384 448 512 576 " ] &&
   [ "$(reused lru_b2)" = 640 ] && cmp -s "$T/off2.out" "$T/lru_b2.out"
then echo "PASS KV_CACHE_GB=$budget: $total bytes kept, the first 10 entries of the latest prompt (640 tokens reused next time)"
else echo "FAIL KV_CACHE_GB: $total bytes, entries at $starts, reused $(reused lru_b2)"; fi

# ---- KV_CACHE=off, the default directory ------------------------------------------------------------
rm -rf "$T/xdg"
run off3 KV_CACHE=off PROMPT="Hello there"
if [ -z "$(find "$T/xdg" -type f 2>/dev/null)" ]; then echo "PASS KV_CACHE=off writes nothing"
else echo "FAIL KV_CACHE=off wrote $(find "$T/xdg" -type f | head -3)"; fi
run default PROMPT="Hello there"
d=$(ls -d "$T"/xdg/glm/kv-* 2>/dev/null)
if [[ $d =~ /xdg/glm/kv-[0-9a-f]{16}$ ]] && [ "$(entries "$d")" = "$e1" ] && grep -q "prefix cache: $d" "$T/default.err"
then echo "PASS default directory: \$XDG_CACHE_HOME/glm/kv-<fingerprint> ($(entries "$d") entries)"
else echo "FAIL default directory: '$d'"; fi

# ---- CHAT --------------------------------------------------------------------------------------------
printf 'What now?\n' | env TEMPERATURE=0 KV_CACHE=$KV CHAT=1 "$GLM" >"$T/chat.out" 2>"$T/chat.err"
if [ "$(reused chat)" = "$(reused second)" ] && grep -qF "$(head -c 40 "$T/off2.out")" "$T/chat.out"
then echo "PASS CHAT: the first turn restores $(reused chat) tokens"
else echo "FAIL CHAT: reused '$(reused chat)'"; tail -3 "$T/chat.err"; fi

# ---- the server: cached_tokens after a restart ---------------------------------------------------------
serve() {
  LOG=$T/serve$1.err
  env -u SYSTEM -u NGEN SERVE=127.0.0.1:0 KV_CACHE=$KV timeout 120 "$GLM" >/dev/null 2>"$LOG" </dev/null &
  PID=$!; PIDS+=("$PID")
  PORT=$(serving_port "$LOG" "$PID") && return 0
  echo "FAIL server start"; tail -3 "$LOG"; exit 1
}
ask() {   # ask MESSAGE: prints "cached_tokens<TAB>content"
  $PY - "$PORT" "$SYS" "$1" <<'EOF'
import json, sys, urllib.request
body = {"messages": [{"role": "system", "content": sys.argv[2]}, {"role": "user", "content": sys.argv[3]}],
        "temperature": 0, "max_tokens": 24}
req = urllib.request.Request("http://127.0.0.1:%s/v1/chat/completions" % sys.argv[1], json.dumps(body).encode(),
                             {"Content-Type": "application/json"})
d = json.load(urllib.request.urlopen(req, timeout=60))
print("%d\t%s" % (d["usage"]["prompt_tokens_details"]["cached_tokens"], json.dumps(d["choices"][0]["message"])))
EOF
}
rm -rf "$KV"
serve 1; a1=$(ask "Hello there"); a2=$(ask "What now?"); a3=$(ask "Hello there"); kill $PID; wait $PID 2>/dev/null
serve 2; b1=$(ask "Hello there"); kill $PID; wait $PID 2>/dev/null
c1=${a1%%$'\t'*}; c2=${a2%%$'\t'*}; c3=${a3%%$'\t'*}; d1=${b1%%$'\t'*}
if [ "$c1" = 0 ] && [ "$c2" -ge 1024 ] && [ "$c3" -ge 1024 ] && [ "$d1" -ge 1024 ] && [ "${a1#*$'\t'}" = "${b1#*$'\t'}" ] &&
   [ "${a1#*$'\t'}" = "${a3#*$'\t'}" ]
then echo "PASS server: cached_tokens 0, $c2, $c3, then $d1 after a restart; the answers after a restore are the first one"
else echo "FAIL server: cached_tokens $c1 $c2 $c3 / $d1"; echo "$a1"; echo "$b1"; tail -3 "$T/serve2.err"; fi

#!/usr/bin/env bash
# SESSION=file on the tiny oracle model (tests/fixtures/oracle_dense + tiny_tokenizer), greedy:
# two chat processes continuing one conversation through SESSION print exactly what one chat
# process prints for the same lines, and the second prefills only the new turn; sampled
# conversations and :more across processes too; PROMPT continues a session; MESSAGES reuses the
# prefix the session shares with it; :save / :load; a file of another model or other settings is
# refused by name and left alone; kill -9 at random moments while a chat saves after every turn
# always leaves a complete earlier state that resumes identically.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
unset_settings
export THREADS=2
T=$(mktemp -d /tmp/t_session.XXXXXX); trap 'rm -rf "$T"' EXIT
M=$T/model; tiny_model "$M" oracle_dense
mkdir -p "$T/other"
# the same shapes and weights, another config (rope theta): another model
for f in generation_config.json model.safetensors tokenizer.json; do ln -s "$M/$f" "$T/other/$f"; done
sed 's/"rope_theta": 8000000.0/"rope_theta": 9000000.0/' "$M/config.json" > "$T/other/config.json"
same() { if [ "$2" = "$3" ]; then echo "PASS $1"; else echo "FAIL $1"; echo "  want: $2"; echo "  got:  $3"; fi; }
chat() { env SNAP=$M CHAT=1 TEMP=0 SEED=1 "$@" "$GLM" 64 16 16; }   # chat VAR=... < lines
stats_field() { sed -nE "s/^glm: \[([0-9]+) prompt tokens.* context ([0-9]+)\/.*/\\$2/p" "$1" | sed -n "$3p"; }

# ---- two processes == one process ------------------------------------------------------------
printf 'Hello\nHi\n' | chat > "$T/one.out" 2> "$T/one.err"
printf 'Hello\n' | chat SESSION=$T/s > "$T/p1.out" 2> "$T/p1.err"
printf 'Hi\n' | chat SESSION=$T/s > "$T/p2.out" 2> "$T/p2.err"
cat "$T/p1.out" "$T/p2.out" > "$T/two.out"
if [ -s "$T/one.out" ] && cmp -s "$T/one.out" "$T/two.out"; then echo "PASS two chat processes through SESSION print exactly what one prints ($(wc -c < "$T/one.out") bytes)"
else echo "FAIL two processes through SESSION differ from one"; od -c "$T/one.out" | head -5; od -c "$T/two.out" | head -5; fi
grep -q "^glm: session $T/s: a new conversation" "$T/p1.err" && echo "PASS the first process starts a new session" || echo "FAIL no 'new conversation' line: $(grep session "$T/p1.err")"
ctx1=$(stats_field "$T/one.err" 2 1); new2=$(stats_field "$T/one.err" 1 2)
same "the second process resumes the first turn's tokens and prefills only the new turn's" \
     "glm: session $T/s: resumed $ctx1 tokens, prefilling $new2 new" "$(grep 'resumed' "$T/p2.err")"
same "... its stats line counts the same prompt tokens as the one-process second turn" "$new2" "$(stats_field "$T/p2.err" 1 1)"
same "... and ends at the same context length" "$(stats_field "$T/one.err" 2 2)" "$(stats_field "$T/p2.err" 2 1)"

# sampled: the session keeps the sampler's stream; a cut reply goes on with :more in a later process
printf 'Hello\nHi\n' | chat TEMP=1 SEED=11 NGEN=20 > "$T/a.out" 2>/dev/null
printf 'Hello\n' | chat TEMP=1 SEED=11 NGEN=20 SESSION=$T/sa > "$T/b1.out" 2>/dev/null
cp "$T/sa" "$T/sa2"
printf 'Hi\n' | env SNAP=$M CHAT=1 TEMP=1 NGEN=20 SESSION=$T/sa "$GLM" 64 16 16 > "$T/b2.out" 2>/dev/null   # SEED unset
printf 'Hi\n' | chat TEMP=1 SEED=11 NGEN=20 SESSION=$T/sa2 > "$T/b3.out" 2>/dev/null                       # the same SEED
cat "$T/b1.out" "$T/b2.out" | cmp -s - "$T/a.out" && cmp -s "$T/b2.out" "$T/b3.out" \
  && echo "PASS sampled (TEMP=1 SEED=11): two processes == one, SEED unset or the same (the sampler's stream is in the session)" \
  || echo "FAIL sampled conversation through SESSION differs"
printf 'Hi\n' | chat TEMP=1 SEED=12 NGEN=20 SESSION=$T/sa2 > "$T/b4.out" 2>"$T/b4.err"
grep -q 'note: SEED=12 replaces the session' "$T/b4.err" && echo "PASS ... another SEED starts its own stream, with a note" || echo "FAIL no SEED note"
printf 'Hello\n:more\n:more\n' | chat NGEN=7 > "$T/c.out" 2>/dev/null
printf 'Hello\n' | chat NGEN=7 SESSION=$T/sc > "$T/d1.out" 2>/dev/null
printf ':more\n' | chat NGEN=7 SESSION=$T/sc > "$T/d2.out" 2>"$T/d2.err"
printf ':more\n' | chat NGEN=7 SESSION=$T/sc > "$T/d3.out" 2>/dev/null
cat "$T/d1.out" "$T/d2.out" "$T/d3.out" | cmp -s - "$T/c.out" && grep -q 'the last reply was cut' "$T/d2.err" && grep -q 'prefilling 0 new' "$T/d2.err" \
  && echo "PASS a reply cut by NGEN goes on with :more in the next process, byte for byte" || echo "FAIL :more across processes: $(cat "$T/d2.err" | grep session)"

# ---- PROMPT with SESSION continues the conversation ---------------------------------------------
env SNAP=$M TEMP=0 SEED=1 PROMPT=Hello SESSION=$T/sp "$GLM" 64 16 16 > "$T/q1.out" 2>/dev/null
env SNAP=$M TEMP=0 SEED=1 PROMPT=Hi SESSION=$T/sp "$GLM" 64 16 16 > "$T/q2.out" 2>"$T/q2.err"
printf '\n' >> "$T/q1.out"; printf '\n' >> "$T/q2.out"   # chat ends each answer with a newline
cat "$T/q1.out" "$T/q2.out" | cmp -s - "$T/one.out" && echo "PASS PROMPT with SESSION: two prompts answer as the two chat turns" \
  || echo "FAIL PROMPT with SESSION differs from chat"
grep -q "resumed $ctx1 tokens, prefilling $new2 new" "$T/q2.err" && echo "PASS ... and the second prefills only its turn" || echo "FAIL PROMPT resume line: $(grep session "$T/q2.err")"
cmp -s "$T/sp" "$T/s" && echo "PASS ... and leaves the same session file as chat" || echo "FAIL PROMPT's session file differs from chat's"

# ---- MESSAGES with SESSION: the rendered conversation reuses the prefix it shares with the file ----
printf '[{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Fine."}]' > "$T/msgs.json"
env SNAP=$M TEMP=0 NGEN=12 MESSAGES=$T/msgs.json PROMPT=Hi "$GLM" 64 16 16 > "$T/m0.out" 2>"$T/m0.err"
cp "$T/s" "$T/sm"
env SNAP=$M TEMP=0 NGEN=12 MESSAGES=$T/msgs.json PROMPT=Hi SESSION=$T/sm "$GLM" 64 16 16 > "$T/m1.out" 2>"$T/m1.err"
all=$(stats_field "$T/m0.err" 1 1); line=$(grep 'resumed' "$T/m1.err")
kept=$(sed -nE 's/.*resumed ([0-9]+) tokens, prefilling ([0-9]+) new.*/\1/p' <<<"$line"); fresh=$(sed -nE 's/.*prefilling ([0-9]+) new.*/\1/p' <<<"$line")
if cmp -s "$T/m0.out" "$T/m1.out" && [ -n "$kept" ] && [ "$kept" -gt 2 ] && [ $((kept + fresh)) = "$all" ] && grep -q 'differ from this conversation and were dropped' <<<"$line"
then echo "PASS MESSAGES with SESSION: the same answer as without, only the $fresh of $all tokens after the shared prefix prefilled"
else echo "FAIL MESSAGES reuse: kept '$kept' fresh '$fresh' of $all: $line"; fi
env SNAP=$M TEMP=0 NGEN=12 MESSAGES=$T/msgs.json PROMPT=Hi SESSION=$T/sm "$GLM" 64 16 16 > "$T/m2.out" 2>"$T/m2.err"
cmp -s "$T/m0.out" "$T/m2.out" && grep -q "resumed $((all - 1)) tokens, prefilling 1 new" "$T/m2.err" \
  && echo "PASS ... asked again, the whole prompt is in the cache: one token re-run, the same answer" || echo "FAIL MESSAGES second time: $(grep session "$T/m2.err")"

# ---- :save and :load -----------------------------------------------------------------------------
printf "Hello\n:save $T/x\nabc\n:load $T/x\nHi\n" | chat > "$T/l.out" 2> "$T/l.err"
n_hello=$(stats_field "$T/one.err" 2 1)
if grep -q "^glm: saved $n_hello tokens to $T/x" "$T/l.err" && grep -q "^glm: loaded $n_hello tokens from $T/x" "$T/l.err"; then
  echo "PASS :save and :load say what they did"; else echo "FAIL :save/:load messages: $(grep -E 'saved|loaded' "$T/l.err")"; fi
# the answer after :load is the one-process second answer: the last line(s) of l.out after the 'abc' answer
tail -c "$(wc -c < "$T/p2.out")" "$T/l.out" | cmp -s - "$T/p2.out" && echo "PASS after :load the conversation goes on as it was when saved" \
  || echo "FAIL the answer after :load differs"
printf ":load $T/nonexistent\n:load $T/other/config.json\n:save $T/nodir/x\nHello\n" | chat > "$T/e.out" 2> "$T/e.err"
if grep -q "error: :load $T/nonexistent cannot open it" "$T/e.err" && grep -q "is not a glm session file; the conversation is as it was" "$T/e.err" \
   && grep -q "error: :save $T/nodir/x" "$T/e.err" && cmp -s "$T/e.out" "$T/p1.out"
then echo "PASS failed :load / :save are errors that change nothing"; else echo "FAIL :load/:save errors: $(grep error "$T/e.err")"; fi

# ---- refused by name: another model, other settings, a corrupt file --------------------------------
cp "$T/s" "$T/s.copy"
expect_fail "a session of another model is refused by name" \
  "SESSION=$T/s was written for another model \(its config differs\)" \
  env SNAP=$T/other CHAT=1 TEMP=0 SESSION=$T/s "$GLM" 64 16 16 < /dev/null
expect_fail "a session written with other settings is refused by name" "SESSION=$T/s was written with other settings \(IDOT=1 there, 0 here\)" \
  env SNAP=$M PROMPT=Hi TEMP=0 IDOT=0 SESSION=$T/s "$GLM" 64 16 16
expect_fail "... other weight formats too" "SESSION=$T/s was written for other weight formats" \
  env SNAP=$M PROMPT=Hi TEMP=0 SESSION=$T/s "$GLM" 64 16 8
cmp -s "$T/s" "$T/s.copy" && echo "PASS a refused session file is left as it was" || echo "FAIL a refused session file was changed"
head -c 1000 "$T/s" > "$T/trunc"
expect_fail "a truncated session file is refused" "SESSION=$T/trunc is truncated" env SNAP=$M PROMPT=Hi TEMP=0 SESSION=$T/trunc "$GLM" 64 16 16
expect_fail "a SESSION in a directory that does not exist is refused at the start" "SESSION=$T/nodir/s cannot be written" \
  env SNAP=$M PROMPT=Hi TEMP=0 SESSION=$T/nodir/s "$GLM" 64 16 16
expect_fail "SESSION with TOKENIZE is refused" "works with PROMPT, CHAT and SERVE, not with TOKENIZE" env SNAP=$M TOKENIZE=/dev/null SESSION=$T/s "$GLM"
expect_fail "a CTX too small for the session is refused naming CTX" "no room to continue \(raise CTX\)" \
  env SNAP=$M PROMPT=Hi TEMP=0 CTX=50 SESSION=$T/s "$GLM" 64 16 16

# ---- piped chat: one answer line per message, an empty one for a refused turn ----------------------
printf 'Hello\nHello\n' | env SNAP=$M CHAT=1 TEMP=0 CTX=20 "$GLM" 64 16 16 > "$T/full.out" 2>/dev/null
same "piped chat: a turn refused for a full context still gets its (empty) answer line" "2" "$(tr -cd '\n' < "$T/full.out" | wc -c)"

# ---- kill -9 at random moments while a chat saves after every turn --------------------------------
LINES=(Hello Hi abc de "foo bar" "Hello there" xyz ok more "last one" why no)
K=${#LINES[@]}
lines_upto() { for ((i = 0; i < $1; i++)); do printf '%s\n' "${LINES[$i]}"; done; }
kchat() { env SNAP=$M CHAT=1 TEMP=0 SEED=1 NGEN=40 "$@" "$GLM" 64 16 16; }
# S_k: the session after the first k turns, each written by one process from scratch; E_k: the
# answer to "final" after those k turns, cut out of a one-process run of the k turns + "final"
for ((k = 1; k <= K; k++)); do
  lines_upto $k | kchat SESSION=$T/S$k > "$T/A$k" 2>/dev/null
  { lines_upto $k; echo final; } | kchat > "$T/B$k" 2>/dev/null
  tail -c +$(( $(wc -c < "$T/A$k") + 1 )) "$T/B$k" > "$T/E$k"
done
lines_upto $K | tail -n +2 > "$T/rest"   # the turns after the first
cp "$T/S1" "$T/kill"
start=$(date +%s%N); kchat SESSION=$T/kill < "$T/rest" >/dev/null 2>&1; took=$(( ($(date +%s%N) - start) / 1000 ))
cmp -s "$T/kill" "$T/S$K" && echo "PASS a resumed chat saving after every turn ends with the file one process writes" \
  || echo "FAIL resumed chat's final session differs from one process's"
torn=0; wrong=0; litter=0; finished=0; seen=""
for i in $(seq 60); do
  cp "$T/S1" "$T/kill"
  env SNAP=$M CHAT=1 TEMP=0 SEED=1 NGEN=40 SESSION=$T/kill "$GLM" 64 16 16 < "$T/rest" >/dev/null 2>&1 & pid=$!   # env execs glm: $! is glm
  sleep "$(awk -v us=$(( RANDOM * RANDOM % (took + 1) )) 'BEGIN { printf "%.6f", us / 1e6 }')"   # saves take most of such a run
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null && finished=$((finished + 1))
  state=0
  for ((k = 1; k <= K; k++)); do cmp -s "$T/kill" "$T/S$k" && state=$k && break; done
  if [ $state = 0 ]; then torn=$((torn + 1)); continue; fi
  seen="$seen $state"
  echo final | kchat SESSION=$T/kill > "$T/resumed" 2>/dev/null
  cmp -s "$T/resumed" "$T/E$state" || wrong=$((wrong + 1))
  ls "$T" | grep -q 'kill.tmp' && litter=$((litter + 1))
done
states=$(tr ' ' '\n' <<<"$seen" | sort -un | grep -c .)
if [ $torn = 0 ]; then echo "PASS 60 kill -9 during a chat that saves every turn: the file is always one complete earlier state ($states distinct states seen, $finished runs finished first)"
else echo "FAIL $torn of 60 kills left a session that is no complete state"; fi
[ $wrong = 0 ] && echo "PASS ... and each resumes identically: the next answer is the one-process answer after that many turns" || echo "FAIL $wrong resumed sessions answered differently"
[ $litter = 0 ] && echo "PASS ... and no temporary file is left after the next save" || echo "FAIL $litter kills left temporary files: $(ls "$T" | grep tmp)"

#!/usr/bin/env bash
# Start-up (issue 13): PLAN on a folder of headers prints the accounting a real run prints; a
# budget too small is refused before any weight is read, with terms that add up; DOCTOR names its
# findings and exits 0/1/2; the usage history (USAGE) is written, read back, refused when it is not
# this model's or is damaged, never changes a computed token, and survives kill -9 untorn.
source "$(dirname "$0")/lib.sh"
F="$ROOT/tests/fixtures"
T=$(mktemp -d /tmp/t_startup.XXXXXX); trap 'rm -rf "$T"' EXIT
PY=/usr/bin/python3
same() { if [ -n "$2" ] && [ "$2" = "$3" ]; then echo "PASS $1"; else echo "FAIL $1"; echo "  want: $2"; echo "  got:  $3"; fi; }
yes_no() { if [ "$2" = 1 ]; then echo "PASS $1"; else echo "FAIL $1"; [ -n "${3:-}" ] && echo "$3" | tail -5; fi; }
if ! $PY -c 'import numpy' 2>/dev/null; then echo "FAIL t_startup needs /usr/bin/python3 with numpy"; exit 1; fi

# A pre-quantized container (experts read by offset) and header-only copies of it and of a float model.
$PY "$ROOT/tools/convert_fp8_to_int4.py" "$F/oracle_sparse" "$T/c8" --expert-bits 8 --dense-bits 8 --io-bits 8 \
  --mtp-bits 8 --indexer-bits 8 >/dev/null 2>&1 && echo "PASS convert oracle_sparse to an int8 container" \
  || echo "FAIL convert oracle_sparse to an int8 container"
headers_only() {   # headers_only SRC DST: every *.safetensors cut right after its header, the rest copied
  mkdir -p "$2"; cp "$1"/*.json "$2"/
  $PY - "$1" "$2" <<'PYEOF'
import glob, os, struct, sys
for p in glob.glob(os.path.join(sys.argv[1], '*.safetensors')):
    raw = open(p, 'rb').read(8); n = struct.unpack('<Q', raw)[0]
    with open(p, 'rb') as f: head = f.read(8 + n)
    open(os.path.join(sys.argv[2], os.path.basename(p)), 'wb').write(head)
PYEOF
}
headers_only "$T/c8" "$T/c8h"
headers_only "$F/oracle_sparse" "$T/sparse_h"
R="$F/oracle_sparse/reference.json"
[ "$(stat -c %s "$T"/c8h/model-00001-of-00001.safetensors)" -lt "$(stat -c %s "$T"/c8/model-00001-of-00001.safetensors)" ] \
  && echo "PASS the header-only copy holds no tensor data" || echo "FAIL header-only copy"

# PLAN on the header-only copy = the accounting of a real run (same RAM_GB, CTX, BATCH, bits, slots).
acct() { grep -E '^glm: (RAM budget|expert cache)' <<<"$1"; }
fixed_plus() {   # fixed_plus JSON SLOTS: a RAM_GB that gives SLOTS.5 slots per layer by the plan's own numbers
  $PY -c 'import json,sys; j=json.loads(sys.argv[1]); s=float(sys.argv[2])
fixed=j["dense_bytes"]+j["kv_scratch_bytes"]+j["overhead_bytes"]; b=fixed+0.02e9+(s+0.5)*j["slot_bytes"]*j["moe_layers"]
print("%.9f" % (b/1e9))' "$1" "$2"
}
for case in "c8 DIRECT=1 8 8" "c8 DIRECT=0 8 8" "c8 MMAP=1 8 8" "sparse DIRECT=0 16 16"; do
  set -- $case; name=$1 io=$2 eb=$3 db=$4
  full=$T/c8; hdr=$T/c8h; [ "$name" = sparse ] && { full=$F/oracle_sparse; hdr=$T/sparse_h; }
  j=$(env $io SNAP="$hdr" CTX=48 BATCH=16 PLAN=json RAM_GB=1 "$GLM" 64 $eb $db 2>/dev/null)
  for slots in 3 all; do
    if [ "$slots" = all ]; then gb=1; args="$eb $db"; else gb=$(fixed_plus "$j" $slots); args="$eb $db"; fi
    plan=$(env $io SNAP="$hdr" CTX=48 BATCH=16 PLAN=1 RAM_GB=$gb "$GLM" 64 $args 2>&1)
    run=$(env $io SNAP="$full" REF="$R" CTX=48 BATCH=16 RAM_GB=$gb "$GLM" 64 $args 2>&1)
    same "PLAN on headers = real run ($name, $io, RAM_GB=$gb): accounting lines" "$(acct "$run")" "$(acct "$plan")"
    if [ "$slots" = 3 ]; then
      grep -q '(3 slots x 4 MoE layers' <<<"$plan" && echo "PASS the plan's own numbers predict 3 slots ($name, $io)" \
        || { echo "FAIL expected 3 slots ($name, $io)"; acct "$plan"; }
    fi
  done
  # the JSON form: every term in bytes, and they add up to the budget
  ok=$($PY -c 'import json,sys; j=json.loads(sys.argv[1])
t=sum(j[k] for k in ("dense_bytes","kv_scratch_bytes","overhead_bytes","reserve_bytes","expert_cache_bytes","unused_bytes"))
print(int(abs(t-j["budget_bytes"]) < 2 and j["fits"] and j["slots_per_layer"] == 16 and j["disk_bytes"] > 0))' "$j" 2>/dev/null)
  yes_no "PLAN=json ($name, $io): the terms add up to the budget" "$ok" "$j"
done
out=$(SNAP="$T/c8h" PLAN=1 RAM_GB=1 "$GLM" 2>&1)
grep -qE '^glm: disk: the model takes [0-9.]+ GB in 2 files' <<<"$out" && echo "PASS PLAN says how much disk the model takes" \
  || { echo "FAIL PLAN disk line"; echo "$out"; }
out=$(XDG_CACHE_HOME="$T/nocache" SNAP="$T/c8h" PLAN=1 RAM_GB=1 "$GLM" 2>&1)
grep -q 'projection: none (no rates measured yet): run DOCTOR=1' <<<"$out" && echo "PASS PLAN without DOCTOR's rates projects nothing and says why" \
  || { echo "FAIL PLAN without rates"; echo "$out"; }
expect_fail "a real run refuses a header-only copy by name" 'c8h/model-00001-of-00001\.safetensors.*outside the data region' \
  env SNAP="$T/c8h" REF="$R" "$GLM" 8 8 8
expect_fail "PLAN=yes is refused by name" 'PLAN=yes' env SNAP="$T/c8h" PLAN=yes "$GLM"

# A budget too small: refused before the dense weights load, and the terms of the error add up.
check_sum() {   # check_sum LINE: "a GB + b GB + ... = t GB" within rounding
  $PY -c 'import re,sys; l=sys.argv[1]; body,tot=l.rsplit("=",1)
terms=[float(x) for x in re.findall(r"([0-9.]+) GB", body.split("too small:",1)[1])]; t=float(re.findall(r"([0-9.]+) GB",tot)[0])
print(int(abs(sum(terms)-t) <= 0.005*len(terms)+1e-9 and len(terms) >= 5))' "$1"
}
out=$(RAM_GB=0.05 SNAP="$F/oracle_sparse" REF="$R" "$GLM" 64 16 16 2>&1); rc=$?
line=$(grep 'too small' <<<"$out")
[ $rc -ne 0 ] && ! grep -q 'resident tensors' <<<"$out" && grep -q 'overhead [0-9.]* GB' <<<"$line" \
  && echo "PASS a budget too small is refused before the dense weights are loaded, naming the overhead" \
  || { echo "FAIL too-small budget"; echo "$out" | tail -3; }
yes_no "the terms of the refusal add up to its total" "$(check_sum "$line")" "$line"
out=$(RAM_GB=0.05 SNAP="$T/sparse_h" PLAN=1 "$GLM" 64 16 16 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "$(sed 's/^glm: error: //' <<<"$line" | cut -c1-60)" <<<"$out" \
  && echo "PASS PLAN prints the same refusal and exits 2" || { echo "FAIL PLAN refusal (exit $rc)"; echo "$out"; }
out=$(RAM_GB=0.2 SNAP="$F/oracle_sparse" REF="$R" "$GLM" 2>&1)
line=$(grep '^glm: RAM budget' <<<"$out")
yes_no "the accounting line adds up to the budget" "$($PY -c 'import re,sys; l=sys.argv[1]
head,body=l.split(": ",2)[1:]; b=float(re.findall(r"([0-9.]+) GB",head)[0]) if False else float(re.findall(r"budget ([0-9.]+) GB", l)[0])
terms=[float(x) for x in re.findall(r"([0-9.]+) GB", l.split("):",1)[1] if "):" in l else l.split(": ",2)[2])]
print(int(abs(sum(terms)-b) <= 0.005*len(terms)+1e-9 and len(terms) == 6))' "$line")" "$line"

# DOCTOR: exit 0 or 1 on a usable model, every finding named; 2 on one glm cannot open; 1 without SNAP.
out=$(XDG_CACHE_HOME="$T/cache" SNAP="$T/c8" DOCTOR=1 "$GLM" 2>&1); rc=$?
if [ $rc -le 1 ] && grep -qE '^DOCTOR (ok  |warn) O_DIRECT:' <<<"$out" && grep -qE '^DOCTOR (ok  |warn) huge pages: transparent huge pages "(always|madvise|never|unknown)"' <<<"$out" \
   && grep -qE '^DOCTOR (ok  |warn) disk:' <<<"$out" && grep -qE '^DOCTOR (ok  |warn) RAM: [0-9.]+ GB total' <<<"$out" \
   && grep -qE '^DOCTOR (ok  |warn) kernels: [0-9.]+ GB/s' <<<"$out" && grep -qE '^DOCTOR: ready' <<<"$out"; then
  echo "PASS DOCTOR on a small model: exit $rc, names O_DIRECT, huge pages, the disk, RAM and kernel rates"
else echo "FAIL DOCTOR (exit $rc)"; echo "$out"; fi
n=$(grep -cvE '^DOCTOR' <<<"$out"); [ "$n" = 0 ] && echo "PASS every DOCTOR line is a finding" || { echo "FAIL DOCTOR printed other lines"; echo "$out"; }
mkdir -p "$T/broken"; echo '{"model_type": "llama"}' > "$T/broken/config.json"; cp "$T/c8h"/*.safetensors "$T/broken/"
out=$(SNAP="$T/broken" DOCTOR=1 "$GLM" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q '^DOCTOR FAIL model:' <<<"$out" && grep -q 'model_type "llama" is not supported' <<<"$out" \
  && echo "PASS DOCTOR on a model glm cannot open: a FAIL line, the reason, exit 2" || { echo "FAIL DOCTOR broken model (exit $rc)"; echo "$out"; }
out=$(env -u SNAP DOCTOR=1 "$GLM" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q '^DOCTOR warn model: SNAP is not set' <<<"$out" && echo "PASS DOCTOR without SNAP warns and exits 1" \
  || { echo "FAIL DOCTOR without SNAP (exit $rc)"; echo "$out"; }

# The usage history: default file per model under XDG_CACHE_HOME, read back, never trusted when
# damaged or foreign, never changing a computed token.
run_hist() { env -u USAGE XDG_CACHE_HOME="$T/xdg" SNAP="$T/c8" REF="$R" "$GLM" 2 8 8 "$@" 2>&1; }
base=$(USAGE=off SNAP="$T/c8" REF="$R" "$GLM" 2 8 8 2>/dev/null | grep '^Generated')
out=$(run_hist)
hist=$(ls "$T"/xdg/glm/usage-*.bin 2>/dev/null)
[ -n "$hist" ] && [ "$(stat -c %s "$hist")" = $((40 + 4 * 5 * 16 + 8)) ] && echo "PASS the default history file is written under XDG_CACHE_HOME/glm" \
  || { echo "FAIL no default history file"; ls -R "$T/xdg"; echo "$out" | tail -3; }
out=$(run_hist); gen=$(grep '^Generated' <<<"$out")
grep -q "usage history $hist: the routing of [0-9]* earlier tokens seeds the expert cache" <<<"$out" && echo "PASS the next run reads the history" \
  || { echo "FAIL history not read"; echo "$out" | grep -i usage; }
same "a history changes what is read, never what is computed" "$base" "$gen"
out=$(USAGE=off XDG_CACHE_HOME="$T/xdg2" SNAP="$T/c8" REF="$R" "$GLM" 2 8 8 2>&1)
[ ! -e "$T/xdg2/glm" ] && ! grep -qi 'usage history' <<<"$out" && echo "PASS USAGE=off reads and writes nothing" || echo "FAIL USAGE=off"
cp "$hist" "$T/good.bin"; cp "$hist" "$T/good.bin.keep"
damage() {   # damage NAME PYTHON-ON-b: expect a one-line note, no use, identical tokens
  cp "$T/good.bin" "$T/bad.bin"
  $PY -c "import sys; b=bytearray(open('$T/bad.bin','rb').read()); $2; open('$T/bad.bin','wb').write(bytes(b))"
  local o; o=$(USAGE="$T/bad.bin" SNAP="$T/c8" REF="$R" "$GLM" 2 8 8 2>&1)
  if [ "$(grep -cE "usage history $T/bad.bin ignored: $3" <<<"$o")" = 1 ] && ! grep -q 'seeds the expert cache' <<<"$o" \
     && [ "$(grep '^Generated' <<<"$o")" = "$base" ] && [ "$(head -c 8 "$T/bad.bin")" = GLMUSAGE ] \
     && [ "$(stat -c %s "$T/bad.bin")" = "$(stat -c %s "$T/good.bin")" ]; then
    echo "PASS history $1: ignored with one line ($3), replaced by this run's"
  else echo "FAIL history $1"; echo "$o" | grep -iE 'usage|error' | head -3; fi
}
# glm's own history, damaged or older: ignored and replaced at the next save
damage "with a flipped bit" "b[100] ^= 4" "checksum mismatch"
damage "truncated" "del b[-3:]" "[0-9]+ bytes, a history of this model has"
damage "of another version" "b[8] = 9" "version 9"
damage "empty" "del b[:]" "0 bytes"
# Anything else at a path USAGE names is refused by name and left as it was: another model's
# history, a file that is no history (a README), a directory, a FIFO (without hanging).
fingerprint() {   # a regular file's checksum; for a FIFO or a directory its type and mtime (never read)
  if [ -f "$1" ]; then md5sum "$1"; else stat -c '%F %Y' "$1"; fi
}
refuse() {   # refuse NAME PATH WHY
  local before o rc; before=$(fingerprint "$2")
  o=$(USAGE="$2" SNAP="$T/c8" REF="$R" timeout 20 "$GLM" 2 8 8 2>&1); rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 124 ] && grep -q "USAGE=$2 is not a usage history of this model ($3)" <<<"$o" \
     && [ "$(fingerprint "$2")" = "$before" ] && ! ls "$(dirname "$2")" | grep -q '\.tmp\.'; then
    echo "PASS history $1: refused by name, left untouched"
  else echo "FAIL history $1 (exit $rc)"; echo "$o" | grep -iE 'usage|error' | head -3; fi
}
USAGE="$T/other.bin" SNAP="$F/oracle_sparse" REF="$R" "$GLM" 2 8 8 >/dev/null 2>&1
refuse "of another model (same shape, other fingerprint)" "$T/other.bin" "a usage history written for another model"
cp "$ROOT/README.md" "$T/readme-copy.md"
refuse "that is a README" "$T/readme-copy.md" "not a glm usage history"
cp "$T/good.bin" "$T/magic.bin"; $PY -c "b=bytearray(open('$T/magic.bin','rb').read()); b[0:8]=b'NOTUSAGE'; open('$T/magic.bin','wb').write(bytes(b))"
refuse "with bad magic" "$T/magic.bin" "not a glm usage history"
mkdir -p "$T/adir"; mkfifo "$T/fifo"
refuse "that is a directory" "$T/adir" "not a regular file"
refuse "that is a FIFO" "$T/fifo" "not a regular file"
# in the cache directory (no USAGE): a foreign file is left alone with a note; the run goes on
cp "$ROOT/README.md" "$hist"
o=$(run_hist)
[ "$(grep '^Generated' <<<"$o")" = "$base" ] && grep -q "usage history $hist ignored and left as it is (not a glm usage history)" <<<"$o" \
  && cmp -s "$hist" "$ROOT/README.md" && echo "PASS a foreign file at the default history path: noted, left as it is, the run goes on" \
  || { echo "FAIL foreign file at the default path"; echo "$o" | grep -i usage; }
rm -f "$hist"

# A history never makes a run slower: with buffered reads (DIRECT=0) and the model in the page
# cache, the history's hottest experts are left to the page cache (a demand maps them in place)
# instead of being read ahead beside the prefill's compute; every token stays the same.
cat "$T"/c8/*.safetensors >/dev/null
o=$(env USAGE="$T/good.bin" DIRECT=0 SNAP="$T/c8" REF="$R" "$GLM" 2 8 8 2>&1); cp "$T/good.bin.keep" "$T/good.bin" 2>/dev/null
if grep -qE 'usage history: 0 hot experts read ahead while the disk was idle, 0 of them hit; [1-9][0-9]* left to the page cache' <<<"$o" \
   && [ "$(grep '^Generated' <<<"$o")" = "$base" ]; then echo "PASS a warm page cache: the history's experts are left to it, not read ahead"
else echo "FAIL history read-ahead on a warm page cache"; echo "$o" | grep -iE 'usage|page cache|error' | head -4; fi

# kill -9 at random moments of runs that save the history every 256 tokens: the file is always
# the old or a new history (never torn) and no temporary file is left behind.
$PY -c "import json,random; r=random.Random(5); ids=[r.randrange(512) for _ in range(1200)]
json.dump({'prompt_ids': ids[:1], 'full_ids': ids}, open('$T/long.json', 'w'))"
KH="$T/kill/hist.bin"; mkdir -p "$T/kill"
USAGE="$KH" TF=1 BATCH=16 SNAP="$T/c8" REF="$T/long.json" "$GLM" 2 8 8 >/dev/null 2>&1
t0=$(date +%s%N); USAGE="$KH" TF=1 BATCH=16 SNAP="$T/c8" REF="$T/long.json" "$GLM" 2 8 8 >/dev/null 2>&1; t1=$(date +%s%N)
ms=$(( (t1 - t0) / 1000000 )); [ $ms -lt 50 ] && ms=50
torn=0; kills=0
for i in $(seq 1 25); do
  USAGE="$KH" TF=1 BATCH=16 SNAP="$T/c8" REF="$T/long.json" "$GLM" 2 8 8 >/dev/null 2>&1 &
  pid=$!
  sleep "$(awk -v r=$RANDOM -v ms=$ms 'BEGIN { printf "%.3f", r / 32768 * ms / 1000 }')"
  kill -9 $pid 2>/dev/null && kills=$((kills + 1)); wait $pid 2>/dev/null
  o=$(USAGE="$KH" SNAP="$T/c8" REF="$R" "$GLM" 2 8 8 2>&1 >/dev/null)
  grep -q 'ignored' <<<"$o" && torn=$((torn + 1))
done
litter=$(ls "$T/kill" | grep -v '^hist\.bin$' | head -3)
[ $torn = 0 ] && [ -z "$litter" ] && [ -f "$KH" ] && echo "PASS history untorn after $kills kill -9s (runs of ~$ms ms, saves every 256 tokens), no temporary files left" \
  || echo "FAIL kill -9: $torn torn histories, litter: $litter"

#!/usr/bin/env bash
# Fetch-and-convert tests (tools/fetch_convert.py) against tests/hub_server.py on loopback, serving a
# 7-shard FP8 fixture (two experts straddle shards, so some output shards read two source shards).
#   same          the fetched result equals converting the same files locally (every file, the
#                 converter's state file included); token file, paginated file list, CDN redirect
#                 (the CDN refuses a request that carries the token)
#   resume        connection dropped mid-shard: continued with Range in the same run; a server that
#                 ignores Range: started over; kill -9 during a download: the rerun continues from
#                 the partial file's size and fetches nothing already finished; kill during a
#                 conversion; rerun of a finished fetch downloads nothing
#   corrupt       a shard corrupted once is downloaded again; corrupted every time: named, exit 1,
#                 its partial data deleted
#   refusals      no room (small tmpfs, else SKIP; and --margin-mb), no token / wrong token (401/403),
#                 unknown repository / revision (404)
#   plan          --plan transfers only each shard's 8 + N header bytes (two Range reads) and the
#                 small files, and glm's PLAN on that copy equals its PLAN on the whole release
#   leftovers     a failed run removes the folders it created unless a rerun continues from them
#   offline       connection refused: a few quick tries (--offline-after, default 10 s), then a
#                 message naming the host; errors that mean "no connection" told from broken ones;
#                 HTTP 503 keeps the --retries backoff
#   parsers       random input to the network-facing parsers raises only their own error
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
PY=/usr/bin/python3
if ! $PY -c 'import numpy' 2>/dev/null; then
  echo "t_fetch: /usr/bin/python3 with numpy is not installed; fetch tests skipped"; exit 0
fi
T=$(mktemp -d /tmp/t_fetch.XXXXXX)
SERVERS=()
MNT=
cleanup() {
  for p in "${SERVERS[@]}"; do kill "$p" 2>/dev/null; done
  [ -n "$MNT" ] && umount "$MNT" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
export PYTHONPATH=$ROOT/tools PYTHONDONTWRITEBYTECODE=1
unset HF_TOKEN HF_TOKEN_PATH HF_ENDPOINT
export HF_HOME=$T/no_hf_home          # no token file unless a test sets one
REPO=zai-org/GLM-Test
FETCH="$PY tools/fetch_convert.py"
QUICK="--margin-mb 0 --retry-wait 0.05 --timeout 10"
S1=model-00001-of-00007.safetensors S2=model-00002-of-00007.safetensors
S4=model-00004-of-00007.safetensors

serve() {   # NAME [server options]: starts a server on $SERVE_DIR (default the fixture), sets BASE and LOG
  local name=$1; shift
  LOG=$T/$name.log
  $PY tests/hub_server.py ${SERVE_DIR:-$T/fp8} --repo $REPO --port-file $T/$name.port --log $LOG "$@" \
    >$T/$name.out 2>&1 &
  SERVERS+=($!)
  for _ in $(seq 100); do [ -f $T/$name.port ] && break; sleep 0.1; done
  BASE=$(cat $T/$name.port 2>/dev/null)
}
same_as_local() {   # every file of the local conversion, byte for byte, and nothing else
  diff -r $T/local "$1" || { echo "$1 differs from the local conversion"; return 1; }
}
# data downloads of FILE in LOG after line N (GETs without a Range or with bytes=A-, that sent
# data), one "range status sent" line each
downloads() {
  tail -n +$(( ${3:-0} + 1 )) "$2" | $PY -c '
import sys, json
for l in sys.stdin:
    r = json.loads(l)
    rng = r["range"] or ""
    if (r["file"] == sys.argv[1] and r["method"] == "GET" and r["status"] in (200, 206) and r["sent"] > 0
            and (not rng or rng.endswith("-"))):
        print(rng or "full", r["status"], r["sent"])' "$1"
}

check "make fp8 fixture with an index" $PY tools/make_fp8_fixture.py tests/fixtures/oracle_dense $T/fp8 \
  --shard-mb 0.07 --bf16-rest --index
printf '[gMASK]<sop>{%% for m in messages %%}<|{{ m.role }}|>{{ m.content }}{%% endfor %%}\n' > $T/fp8/chat_template.jinja
echo '{"eos_token": "<|endoftext|>", "model_max_length": 202752}' > $T/fp8/tokenizer_config.json
check "convert the same files locally" $PY tools/convert_fp8_to_int4.py $T/fp8 $T/local --margin-mb 0

# --- the result equals the local conversion ------------------------------------------------------
serve gated --token hf_secret --page-size 3 --redirect
mkdir -p $T/hf_home && echo hf_secret > $T/hf_home/token
fetch_redirect() {
  local out; out=$(HF_HOME=$T/hf_home $FETCH $REPO $T/out_a --base-url $BASE $QUICK 2>&1) || { echo "$out"; return 1; }
  same_as_local $T/out_a || return 1
  [ ! -e $T/out_a/.download ] || { echo "download folder left behind"; return 1; }
  grep -q "token from $T/hf_home/token" <<<"$out" || { echo "token file not used: $out"; return 1; }
  grep -q "absent from the repository: tokenizer.json$" <<<"$out" || { echo "absent file not named"; return 1; }
  $PY - $LOG <<'EOF'
import sys, json
recs = [json.loads(l) for l in open(sys.argv[1])]
cdn = [r for r in recs if r["server"] == "cdn"]
assert cdn, "no request reached the CDN: the redirect was not followed"
assert not any(r["auth"] for r in cdn), "the token was sent to the CDN"
assert all(r["auth"] for r in recs if r["server"] == "main"), "a request to the hub went without the token"
pages = [r for r in recs if "/tree/" in r["path"]]
assert len(pages) >= 3, f"{len(pages)} tree pages: pagination not followed"
full = {}
for r in cdn:
    if r["status"] in (200, 206) and (r["range"] is None or r["range"].endswith("-")):
        full[r["file"]] = full.get(r["file"], 0) + 1
assert len(full) == 7 and set(full.values()) == {1}, f"each shard should be downloaded once: {full}"
EOF
}
check "fetch = local conversion (token file, paginated list, CDN redirect without the token)" fetch_redirect
rerun_finished() {
  local n; n=$(wc -l < $LOG)
  HF_HOME=$T/hf_home $FETCH $REPO $T/out_a --base-url $BASE $QUICK >/dev/null 2>&1 || return 1
  same_as_local $T/out_a || return 1
  local d; d=$(tail -n +$((n + 1)) $LOG | grep -c '"server": "cdn"')
  [ "$d" -eq 0 ] || { echo "a finished fetch, rerun, read $d shard(s) again"; return 1; }
}
check "rerun of a finished fetch downloads no shard" rerun_finished
expect_fail "gated, no token: 401 names the file and HF_TOKEN" \
  "config.json: HTTP 401 .*$REPO is gated or private .*set HF_TOKEN" $FETCH $REPO $T/out_x --base-url $BASE $QUICK
expect_fail "gated, wrong token: 403 says the token has no access" \
  "config.json: HTTP 403 .*token from HF_TOKEN has no access" env HF_TOKEN=hf_other $FETCH $REPO $T/out_x --base-url $BASE $QUICK
expect_fail "unknown repository: 404 named" "HTTP 404: repository zai-org/nope not found" \
  env HF_TOKEN=hf_secret $FETCH zai-org/nope $T/out_x --base-url $BASE $QUICK
check "failed fetch: the folders it created are removed" test ! -e $T/out_x
mkdir -p $T/mine
expect_fail "unknown repository, into a folder that exists: 404 named" "HTTP 404: repository zai-org/nope" \
  env HF_TOKEN=hf_secret $FETCH zai-org/nope $T/mine --base-url $BASE $QUICK
check "failed fetch: a folder that existed is kept, the download folder it created is removed" \
  bash -c "[ -d $T/mine ] && [ -z \"\$(ls -A $T/mine)\" ]"
expect_fail "unknown revision: 404 named" "config.json: HTTP 404: revision not found" \
  env HF_TOKEN=hf_secret $FETCH $REPO $T/out_y --base-url $BASE --revision v9 $QUICK
expect_fail "no room: refused with the numbers (--margin-mb)" \
  "refusing to start: .* free on .*, need .* \(output .* KB \+ shards .* KB \+ margin .*\)" \
  env HF_TOKEN=hf_secret $FETCH $REPO $T/out_z --base-url $BASE --margin-mb 1e12
MNT=$T/small; mkdir -p $MNT
if mount -t tmpfs -o size=256k tmpfs $MNT 2>/dev/null; then
  expect_fail "no room: refused with the numbers (256 KB tmpfs)" \
    "refusing to start: [0-9.]+ KB free on $MNT/out, need [0-9.]+ KB \(output [0-9.]+ KB \+ shards [0-9.]+ KB" \
    env HF_TOKEN=hf_secret $FETCH $REPO $MNT/out --base-url $BASE $QUICK
else
  MNT=; echo "SKIP no room on a small tmpfs: cannot mount one here (needs root)"
fi

# --- interrupted transfers -------------------------------------------------------------------------
serve cut --cut $S2:30000
cut_resume() {
  $FETCH $REPO $T/out_b --base-url $BASE $QUICK >/dev/null 2>&1 || return 1
  same_as_local $T/out_b || return 1
  local d; d=$(downloads $S2 $LOG)
  [ "$d" = $'full 200 30000\nbytes=30000- 206 '$(( $(stat -c %s $T/fp8/$S2) - 30000 )) ] \
    || { echo "expected a cut at 30000, then Range bytes=30000-; got:"; echo "$d"; return 1; }
}
check "dropped connection: continued with Range in the same run" cut_resume
check "header-only copy: two Range reads, the header length then the header, nothing more" \
  $PY - $BASE $REPO $S1 $T/fp8 $T/hdr $LOG <<'EOF'
import json, os, sys
import fetch_convert as fc
from safetensors_io import SafeFile
base, repo, name, src, tmp, log = sys.argv[1:]
os.makedirs(tmp)
class Opts:
    timeout, retries, retry_wait, offline_after = 10, 1, 0.01, 5
hub = fc.Hub(base, repo, None, None, Opts)
fetcher = fc.Fetcher(hub, "main", fc.list_files(hub, "main"), tmp)
stub = fetcher.header(name)
full = SafeFile(os.path.join(src, name))
n = full.data_start
assert open(os.path.join(tmp, name + ".header"), "rb").read() == open(os.path.join(src, name), "rb").read(n)
assert stub.names() == full.names() and all(stub.info(t) == full.info(t) for t in full.names())
try:
    stub.raw(full.names()[0])
    raise SystemExit("raw() on a header-only copy did not refuse")
except fc.StError as e:
    assert "header-only" in str(e)
reads = [json.loads(l)["range"] for l in open(log) if json.loads(l)["file"] == name]
assert reads[-2:] == ["bytes=0-7", f"bytes=8-{n - 1}"], reads
EOF
serve norange --no-range --cut $S2:30000
norange() {
  local out; out=$($FETCH $REPO $T/out_c --base-url $BASE $QUICK 2>&1) || { echo "$out"; return 1; }
  same_as_local $T/out_c || return 1
  grep -q "$S2: the server ignored the range request (200, not 206): starting over" <<<"$out" \
    || { echo "no 'ignored the range' message"; return 1; }
}
check "server ignores Range (200): the shard starts over, result identical" norange

serve stall --stall $S4:40000
kill_resume() {
  rm -rf $T/out_d
  $FETCH $REPO $T/out_d --base-url $BASE $QUICK >$T/killed.txt 2>&1 &
  local pid=$! part=$T/out_d/.download/$S4.part
  for _ in $(seq 300); do [ "$(stat -c %s $part 2>/dev/null || echo 0)" -ge 40000 ] && break; sleep 0.1; done
  local p; p=$(stat -c %s $part 2>/dev/null || echo 0)
  [ "$p" -ge 40000 ] || { kill -9 $pid; echo "the download never reached the stall point"; cat $T/killed.txt; return 1; }
  # what was finished when it died: converted shards and complete downloads
  local done; done=$($PY -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["finished"]))' \
    $T/out_d/.convert-state.json)
  done="$done $(cd $T/out_d/.download && ls *.safetensors 2>/dev/null | tr '\n' ' ')"
  kill -9 $pid; wait $pid 2>/dev/null
  [ "$(stat -c %s $part)" -eq "$p" ] || { echo "partial file changed after the kill"; return 1; }
  [ -n "$(echo $done)" ] || { echo "nothing was finished before the kill"; return 1; }
  local n; n=$(wc -l < $LOG)
  $FETCH $REPO $T/out_d --base-url $BASE $QUICK >$T/rerun.txt 2>&1 || { cat $T/rerun.txt; return 1; }
  same_as_local $T/out_d || return 1
  local d; d=$(downloads $S4 $LOG $n)
  [ "$d" = "bytes=$p- 206 $(( $(stat -c %s $T/fp8/$S4) - p ))" ] \
    || { echo "expected one Range bytes=$p- download of $S4, got:"; echo "$d"; return 1; }
  for f in $done; do
    [ -z "$(downloads $f $LOG $n)" ] || { echo "$f was finished before the kill but downloaded again"; return 1; }
  done
  grep -q "resumed at" $T/rerun.txt || { echo "the per-shard line does not say it resumed"; return 1; }
}
check "kill -9 mid-download, rerun: continues from the partial file, finished shards not fetched again" kill_resume
kill_convert() {
  rm -rf $T/out_e
  CONVERT_KILL_AFTER_TENSORS=150 $FETCH $REPO $T/out_e --base-url $BASE $QUICK >/dev/null 2>&1
  local rc=$?
  [ $rc -eq 137 ] || { echo "first run exited $rc, expected to be killed (137)"; return 1; }
  local done; done=$($PY -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["finished"]))' \
    $T/out_e/.convert-state.json)
  [ -n "$done" ] || { echo "nothing finished before the kill"; return 1; }
  local n; n=$(wc -l < $LOG)
  $FETCH $REPO $T/out_e --base-url $BASE $QUICK >/dev/null 2>&1 || return 1
  same_as_local $T/out_e || return 1
  for f in $done; do
    [ -z "$(downloads $f $LOG $n)" ] || { echo "$f was converted before the kill but downloaded again"; return 1; }
  done
}
check "killed mid-conversion, rerun: identical, converted shards not fetched again" kill_convert

# --- corrupted data --------------------------------------------------------------------------------
serve corrupt1 --corrupt $S2:1
corrupt_once() {
  local out; out=$($FETCH $REPO $T/out_f --base-url $BASE $QUICK 2>&1) || { echo "$out"; return 1; }
  same_as_local $T/out_f || return 1
  grep -q "$S2: SHA-256 mismatch (expected .*); partial data deleted, downloading it once more" <<<"$out" \
    || { echo "mismatch not reported"; echo "$out"; return 1; }
  [ "$(downloads $S2 $LOG | wc -l)" -eq 2 ] || { echo "expected two downloads of $S2"; return 1; }
}
check "shard corrupted once: named, downloaded again, result identical" corrupt_once
serve corrupt --corrupt $S2
expect_fail "shard corrupted every time: named, exit 1" "$S2: SHA-256 mismatch again .*data was deleted" \
  $FETCH $REPO $T/out_g --base-url $BASE $QUICK
check "corrupted shard: no partial data left" test -z "$(ls $T/out_g/.download/$S2{,.part} 2>/dev/null)"
check "corrupted shard: the shard before it was converted" test -f $T/out_g/$S1

# --- --plan: only the headers cross the network, then glm's PLAN reads them ---------------------------
serve plan
plan_headers() {
  local out; out=$(RAM_GB=8 $FETCH $REPO $T/plan/p --base-url $BASE --plan --glm "$GLM" $QUICK 2>&1) \
    || { echo "$out"; return 1; }
  grep -q "^glm: plan for $T/plan/p: " <<<"$out" || { echo "no plan printed:"; echo "$out"; return 1; }
  # the same plan as on the full release (the free disk space, which moves, left out)
  diff <(RAM_GB=8 PLAN=json SNAP=$T/plan/p "$GLM" | sed 's/"model": "[^"]*", //; s/"disk_free_bytes": [0-9]*, //') \
       <(RAM_GB=8 PLAN=json SNAP=$T/fp8 "$GLM" | sed 's/"model": "[^"]*", //; s/"disk_free_bytes": [0-9]*, //') \
    || { echo "PLAN on the header-only copy differs from PLAN on the release"; return 1; }
  $PY - $T/fp8 $T/plan/p $LOG <<'EOF'
import glob, json, os, sys
src, plan, log = sys.argv[1:]
recs = [json.loads(l) for l in open(log)]
want = {}
for p in sorted(glob.glob(src + "/*.safetensors")):
    name = os.path.basename(p)
    head = open(p, "rb").read(8)
    n = 8 + int.from_bytes(head, "little")
    want[name] = n
    assert open(os.path.join(plan, name), "rb").read() == open(p, "rb").read(n), f"{name}: not its header"
    reads = [(r["range"], r["status"], r["sent"]) for r in recs if r["file"] == name]
    assert reads == [("bytes=0-7", 206, 8), (f"bytes=8-{n - 1}", 206, n - 8)], f"{name}: {reads}"
sent = sum(r["sent"] for r in recs if r["file"] in want)
assert sent == sum(want.values()), (sent, sum(want.values()))
assert sorted(n for n in os.listdir(plan) if n.endswith(".safetensors")) == sorted(want)
for f in ("config.json", "model.safetensors.index.json", "tokenizer_config.json"):
    assert open(os.path.join(plan, f), "rb").read() == open(os.path.join(src, f), "rb").read(), f
EOF
}
if [ -x "$GLM" ]; then
  unset_settings
  check "--plan: only the 8 + N header bytes of each shard are transferred; glm's plan = the release's" plan_headers
  check "--plan again into its own folder: accepted" \
    $FETCH $REPO $T/plan/p --base-url $BASE --plan --glm "$GLM" $QUICK
else
  echo "FAIL --plan: $GLM is not built (run make)"
fi
plan_no_glm() {
  local out; out=$($FETCH $REPO $T/plan/q --base-url $BASE --plan --glm $T/nope $QUICK 2>&1) || { echo "$out"; return 1; }
  grep -q "$T/nope is not built (make glm); the plan is then: PLAN=1 SNAP=$T/plan/q $T/nope" <<<"$out" \
    || { echo "$out"; return 1; }
}
check "--plan without a built glm: prints the command" plan_no_glm
expect_fail "--plan into a folder with real shards: refused, nothing removed" \
  "out_a/[^:]*: (a shard with its data|a file --plan does not write); --plan writes its header-only copy" \
  $FETCH $REPO $T/out_a --base-url $BASE --plan --glm $T/nope $QUICK
check "--plan refused: the converted folder is intact" same_as_local $T/out_a
expect_fail "--plan, unknown repository: 404 named" "HTTP 404: repository zai-org/nope not found" \
  $FETCH zai-org/nope $T/plan/r --base-url $BASE --plan --glm $T/nope $QUICK
check "--plan error: the folder it created is removed" test ! -e $T/plan/r

# --- no index, no server ---------------------------------------------------------------------------
mkdir -p $T/noindex && cp $T/fp8/*.safetensors $T/fp8/config.json $T/noindex/
SERVE_DIR=$T/noindex serve noindex
no_index() {
  local out; out=$($FETCH $REPO $T/out_h --base-url $BASE $QUICK 2>&1) || { echo "$out"; return 1; }
  grep -q "no model.safetensors.index.json: using the 7" <<<"$out" || { echo "$out"; return 1; }
  diff <(cd $T/local && sha256sum *.safetensors) <(cd $T/out_h && sha256sum *.safetensors)
}
check "no index: the listed *.safetensors files, same shards" no_index
port=$($PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# No server: the default --offline-after (10 s) bounds it, whatever --retries and --retry-wait say.
no_server() {
  local t0=$SECONDS out
  out=$(timeout 60 $FETCH $REPO $T/out_i/sub --base-url http://127.0.0.1:$port --retries 8 --retry-wait 30 2>&1) && return 1
  local dt=$((SECONDS - t0)) want="cannot reach 127.0.0.1:$port: .*refused.*gave up after [2-9] tries"
  [ $dt -le 15 ] || { echo "gave up after $dt s"; return 1; }
  grep -qE "config.json: $want in [0-9.]+ s \(--offline-after 10\): this machine looks offline" <<<"$out" \
    || { echo "$out"; return 1; }
  [ ! -e $T/out_i ] || { echo "left $(find $T/out_i) behind"; return 1; }
}
check "no server: a few quick tries within ~10 s, then 'looks offline' naming the host; no folder left" no_server
expect_fail "no server, --offline-after 1: fewer tries" "gave up after [1-2] tries in .*--offline-after 1\)" \
  $FETCH $REPO $T/out_i --base-url http://127.0.0.1:$port --offline-after 1
serve busy --busy config.json:2
busy_retried() {
  local out; out=$($FETCH $REPO $T/out_j --base-url $BASE $QUICK 2>&1) || { echo "$out"; return 1; }
  same_as_local $T/out_j || return 1
  [ "$(grep -c 'config.json: HTTP 503 .*; retry [12]/8 in' <<<"$out")" -eq 2 ] || { echo "$out"; return 1; }
}
check "HTTP 503 twice: retried with backoff (not taken for offline), result identical" busy_retried
serve busy_always --busy config.json
expect_fail "HTTP 503 every time: gives up after --retries, naming the file" \
  "config.json: HTTP 503 .*gave up after 3 tries in a row" $FETCH $REPO $T/out_k --base-url $BASE $QUICK --retries 2
check "network errors: connection failures are told apart from broken transfers" $PY - <<'EOF'
import errno, socket
from fetch_convert import connect_failure
assert connect_failure(socket.gaierror(-2, "Name or service not known"))
assert connect_failure(ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"))
assert connect_failure(OSError(errno.ENETUNREACH, "Network is unreachable"))
assert connect_failure(socket.timeout("timed out"))
assert not connect_failure(ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"))
assert not connect_failure(OSError(errno.EPIPE, "Broken pipe"))
EOF

check "network parsers: random input raises only FetchError" $PY - <<'EOF'
import json, random
from fetch_convert import (FetchError, parse_content_range, parse_link_next, parse_tree, parse_index,
                           header_length)
rng = random.Random(5)
pieces = ["bytes ", "bytes=", "0", "1", "99", "-", "/", "*", " ", ",", "<", ">", ";", "rel=", '"next"',
          "http://h/x?c=1", "[", "]", "{", "}", '"path"', ":", '"size"', '"lfs"', '"oid"', '"type"', '"file"',
          "1e400", "-5", "null", "true", "\u00ff", "\x00", '"weight_map"', '"a.safetensors"', "../x"]
ok = 0
for _ in range(20000):
    s = "".join(rng.choice(pieces) for _ in range(rng.randrange(12)))
    b = s.encode("utf-8", "surrogatepass")
    for f in (lambda: parse_content_range(s, "x"), lambda: parse_link_next(s),
              lambda: parse_tree(b, "x"), lambda: parse_index(b, "x"),
              lambda: header_length(b[:8].ljust(8, b"\0"), rng.randrange(1 << 40), "x")):
        try:
            f()
            ok += 1
        except FetchError:
            pass
assert parse_content_range("bytes 5-9/10", "x") == (5, 9, 10)
assert parse_link_next('<http://a/b?cursor=2>; rel="next"') == "http://a/b?cursor=2"
assert parse_link_next('<http://a/p>; rel="prev"') is None
t = parse_tree(json.dumps([{"type": "file", "path": "a", "size": 3, "oid": "a" * 40},
                           {"type": "directory", "path": "d", "size": 0, "oid": "b" * 40}]).encode(), "x")
assert t == {"a": (3, "git", "a" * 40)}, t
print(ok, "inputs accepted")
EOF

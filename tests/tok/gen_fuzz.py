#!/usr/bin/python3
"""Write tests/tok/fuzz.jsonl: deterministic pseudo-random strings that mix the character classes
the pre-tokenizer regexes care about (letters of several scripts, digits of several kinds,
apostrophes, punctuation, symbols, emoji, combining marks, every kind of whitespace, CR/LF, control
and format characters) plus fragments of added tokens. Reference ids come from make_ref.mjs.
Kept out on purpose (oracle caveats, docs/tokenizer.md section 4): U+0085, U+FEFF, U+017F, and
characters newer than Unicode 15.0.

usage: tests/tok/gen_fuzz.py [N_LINES]   (default 400)
"""
import json
import os
import random
import sys

POOLS = {
    "ascii_lower": "abcdefghijklmnopqrstuvwxyz",
    "ascii_upper": "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "digits": "0123456789",
    "apostrophe": "'",
    "contraction": ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D", "'Re", "'lL"],
    "punct": "!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~",
    "space": [" ", " ", " ", "  ", "   "],
    "ws_other": ["\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\u00a0", "\u1680", "\u2000", "\u2007", "\u200a",
                 "\u2028", "\u2029", "\u202f", "\u205f", "\u3000"],
    "latin": "éèàçñöüßøåæœÉÀÇÑÖÜ",
    "greek_cyrillic": "αβγδΩπλЖЩЯжщя",
    "cjk": "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年",
    "kana": "あいうえおかきくけこアイウエオカキクケコーッ",
    "hangul": "가나다라마바사아자차카타파하한국어",
    "arabic_hebrew": "مرحباسلامשלוםעולם",
    "indic": "नमस्तेदुनियाक्",
    "marks": ["\u0301", "\u0300", "\u0308", "\u0323", "\u0307", "\u094d", "\u05b8"],
    "num_other": "٠١٢٣٤٥६७८①②③ⅠⅡⅫ½¾²³０１２",
    "symbols": "€£¥©®°±×÷→←∞≤≥≠∑√∂♀♂☺★♥",
    "cjk_punct": "，。！？、：；「」『』（）【】",
    "emoji": ["😀", "👍", "👍🏽", "👨‍👩‍👧", "🏳️‍🌈", "🇫🇷", "❤️", "🤖", "🎉", "1️⃣"],
    "format": ["\u200b", "\u200c", "\u200d", "\u2060", "\u00ad", "\u0000", "\u0001", "\u001b", "\u007f"],
    "added": ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>", "<think>",
              "</think>", "<|endoftext|>", "<|user|>", "[gMASK]", "<sop>", "<tool_call>", "<｜User｜>",
              "<｜Assistant｜>", "<|", "|>", "<｜", "▁"],
    "word": ["the", "The", "HELLO", "world", "don", "can", "Paris", "x", "I", "you", "GLM", "token"],
}
WEIGHTS = {"ascii_lower": 8, "ascii_upper": 3, "digits": 4, "apostrophe": 2, "contraction": 2, "punct": 4,
           "space": 6, "ws_other": 3, "latin": 2, "greek_cyrillic": 1, "cjk": 2, "kana": 1, "hangul": 1,
           "arabic_hebrew": 1, "indic": 1, "marks": 1, "num_other": 1, "symbols": 1, "cjk_punct": 1,
           "emoji": 2, "format": 1, "added": 1, "word": 4}


def piece(rng):
    pool = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
    items = POOLS[pool]
    run = rng.choice([1, 1, 1, 2, 3, 5]) if pool not in ("added", "contraction", "emoji") else 1
    return "".join(rng.choice(items) for _ in range(run))


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    rng = random.Random(20240515)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz.jsonl")
    with open(out, "w", encoding="utf-8") as f:
        for i in range(n):
            k = rng.choice([1, 2, 4, 8, 16, 30])
            text = "".join(piece(rng) for _ in range(k))
            f.write(json.dumps({"name": f"fuzz{i}", "text": text}, ensure_ascii=False) + "\n")
    print(f"wrote {out}: {n} lines")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""make_seeds.py - the seed corpus of each fuzz target, from the test fixtures.

    python3 tests/fuzz/make_seeds.py      (writes tests/fuzz/corpus/<target>/, committed)

Small files only: libFuzzer mutates them, so each should be a valid input that reaches deep into
its parser (plus a few near misses). Input layouts are those of tests/fuzz/fuzz_<target>.c.
Python standard library only."""
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus")


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(*parts):
    with open(os.path.join(*parts), "rb") as f:
        return f.read()


# ---- safetensors ----------------------------------------------------------------------------

def shard(tensors, metadata=None, pad=0):
    """[(name, dtype, shape, raw bytes)] -> safetensors bytes."""
    header, blobs, pos = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + len(raw)]}
        blobs.append(raw)
        pos += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8 + pad)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def fixture_tensor(name):
    blob = read(FIX, "oracle_dense", "model.safetensors")
    (n,) = struct.unpack("<Q", blob[:8])
    h = json.loads(blob[8:8 + n])
    b, e = h[name]["data_offsets"]
    return blob[8 + n + b:8 + n + e], h[name]["shape"]


def st_seeds():
    norm, _ = fixture_tensor("model.layers.0.input_layernorm.weight")          # 64 x F32
    floats = struct.unpack("<64f", norm)
    bf16 = b"".join(struct.pack("<f", v)[2:] for v in floats)
    f16 = struct.pack("<64e", *floats)
    f8 = bytes(range(0, 256, 4))                                               # 64 codes, NaN included
    ints = struct.pack("<8i", -3, -2, -1, 0, 1, 2, 2 ** 31 - 1, -2 ** 31)
    i64 = struct.pack("<4q", -1, 2 ** 62, 0, 7)
    f64 = struct.pack("<4d", 1.5, -0.0, 1e300, 5e-324)
    meta = {"format": "pt", "colibri.fmt": json.dumps({"q.weight": "int8-row"})}
    tensors = [
        ("norm.f32", "F32", [64], norm), ("norm.bf16", "BF16", [8, 8], bf16), ("norm.f16", "F16", [2, 32], f16),
        ("w.weight", "F8_E4M3", [4, 16], f8), ("w.weight_scale_inv", "F32", [1, 1], struct.pack("<f", 0.5)),
        ("e.weight", "F8_E4M3", [2, 2, 16], f8), ("e.weight_scale_inv", "F32", [2, 1, 1], struct.pack("<2f", 2, 3)),
        ("q.weight", "I8", [64], bytes(range(64))), ("q.weight.qs", "F32", [4], struct.pack("<4f", 1, 2, 3, 4)),
        ("u8", "U8", [3], b"\x00\x7f\xff"), ("i32", "I32", [2, 4], ints), ("i64", "I64", [4], i64),
        ("f64", "F64", [2, 2], f64), ("empty", "F32", [0, 5], b""), ("scalar", "F32", [], struct.pack("<f", 1)),
    ]
    one = shard(tensors, meta)
    write("st", "one_shard_every_dtype", b"\x00" + one)
    write("st", "one_shard_odd_offset", b"\x00" + shard(tensors[:5], None, pad=3))
    # two shards: the F8 weight in one, its block scale in the other (the vendor release does that)
    a, b = shard(tensors[3:4] + tensors[:1]), shard(tensors[4:5] + tensors[7:9])
    write("st", "two_shards_scale_elsewhere", b"\x01" + struct.pack("<H", len(a)) + a + b)
    dup = shard(tensors[:2])
    write("st", "two_shards_duplicate_name", b"\x01" + struct.pack("<H", len(dup)) + dup + dup)
    write("st", "empty_header", b"\x00" + shard([]))
    # the dense fixture's real header with only a little of its data: near miss (offsets past end)
    blob = read(FIX, "oracle_dense", "model.safetensors")
    (n,) = struct.unpack("<Q", blob[:8])
    write("st", "fixture_header_cut", b"\x00" + blob[:8 + n + 256])


# ---- JSON, REF, tokenizer ------------------------------------------------------------------

def json_seeds():
    for fx in ("oracle_dense", "oracle_sparse", "oracle_fused_bf16"):
        write("json", fx + "_config.json", read(FIX, fx, "config.json"))
    write("json", "generation_config.json", read(FIX, "oracle_dense", "generation_config.json"))
    write("json", "tokenizer_config.json", read(FIX, "tiny_tokenizer", "tokenizer_config.json"))
    write("json", "kinds.json", '{"a": [1, -0, 2.5e-3, 1E+2, true, false, null, "x\\u00e9\\ud83d\\ude00\\n"], "a": {}}')
    write("json", "big_numbers.json", "[9007199254740993, -9223372036854775808, 1e308, 123456789012345678901234567890]")
    write("json", "bom_string.json", b"\xef\xbb\xbf\"caf\xc3\xa9\"")
    write("json", "nested.json", "[" * 40 + "{}" + "]" * 40)


def ref_seeds():
    for fx in ("oracle_dense", "oracle_sparse", "oracle_fused_bf16"):
        write("ref", fx + "_reference.json", read(FIX, fx, "reference.json"))
    write("ref", "minimal.json", '{"prompt_ids": [1], "full_ids": [1, 2]}')
    write("ref", "not_prefix.json", '{"prompt_ids": [1, 2], "full_ids": [1, 3, 4], "tf_pred": [5]}')
    write("ref", "bad_id.json", '{"prompt_ids": [1], "full_ids": [1, -2], "mtp_pred": [2147483648]}')


def tok_seeds():
    texts = [json.loads(line)["text"] for line in open(os.path.join(ROOT, "tests", "tok", "corpus.jsonl"))]
    for i, t in enumerate(texts):
        # byte 0: variant i % 5, special-token mode i % 3
        write("tok", "text_%02d_variant%d_mode%d" % (i, i % 5, i % 3), bytes([i % 5 + 7 * (i % 3)]) + t.encode("utf-8"))
    write("tok", "text_invalid_utf8", b"\x00ab\xff\xc3(\xe2\x82 \xf0\x9f\x98")
    write("tok", "text_added_tokens", "\x00[gMASK]<sop><|user|>Hi<think>x</think><|assistant|>".encode())
    write("tok", "ids_variant0", b"\x05" + struct.pack("<12h", 0, 1, 255, 256, 475, 476, 497, 511, 512, -1, 32767, 195))
    write("tok", "ids_variant3", b"\x1b" + struct.pack("<6h", 228, 184, 128, 497, 228, 184))   # 27 % 7 = 6, 27 / 7 = 3
    write("tokjson", "tokenizer_tiny", read(FIX, "tiny_tokenizer", "tokenizer.json"))
    # a minimal byte-level BPE: the 256 byte symbols (GPT-2's bytes_to_unicode), two merges, one added token
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    symbols, extra = {}, 0
    for b in range(256):
        symbols[b] = chr(b) if b in printable else chr(256 + extra)
        extra += b not in printable
    vocab = {symbols[b]: b for b in range(256)}
    vocab.update({"ab": 256, "\u0120ab": 257})
    small = {"model": {"type": "BPE", "vocab": vocab, "merges": [["a", "b"], ["\u0120", "ab"]]},
             "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
             "decoder": {"type": "ByteLevel"}, "normalizer": None,
             "added_tokens": [{"id": 258, "content": "<x>", "special": True, "lstrip": False, "rstrip": False,
                               "single_word": False, "normalized": False}]}
    write("tokjson", "tokenizer_small", json.dumps(small).encode())


# ---- usage history (tier.h) -----------------------------------------------------------------

def fnv1a64(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def usage(layers, experts, fingerprint, tokens, counts, version=1):
    """tier_usage_encode: magic, version, shape, fingerprint, tokens, u32 counts, FNV-1a 64 of it all."""
    body = b"GLMUSAGE" + struct.pack("<IIIIQQ", version, layers, experts, 0, fingerprint, tokens)
    body += struct.pack("<%dI" % len(counts), *counts)
    return body + struct.pack("<Q", fnv1a64(body))


def usage_seeds():
    write("usage", "valid_8x8", usage(8, 8, 0, 4096, [(7 * i) % 50 for i in range(64)]))
    write("usage", "valid_3x5", usage(3, 5, 0x0123456789ABCDEF, 256, [i * i for i in range(15)]))
    write("usage", "valid_1x1", usage(1, 1, 0xFFFFFFFFFFFFFFFF, 1, [0xFFFFFFFF]))
    good = usage(2, 4, 7, 10, list(range(8)))
    write("usage", "bad_checksum", good[:-1] + bytes([good[-1] ^ 1]))
    write("usage", "truncated", good[:-5])
    write("usage", "bad_version", usage(2, 4, 7, 10, list(range(8)), version=2))
    write("usage", "zero_shape", usage(0, 4, 7, 10, []))


def server_seeds():
    """fuzz_server: a request body, a NUL, model output; the last byte modulo 7 picks the API: OpenAI
    completions (0), chat (1), Anthropic messages (2), count_tokens (3), Responses (4), Ollama chat (5),
    Ollama generate (6)."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]
    seeds = {
        "chat_stop_stream": ({"messages": [{"role": "user", "content": "Hi"}], "stop": ["o w", "xyz"], "max_tokens": 5,
                              "stream": True, "stream_options": {"include_usage": True}}, "Hello world<think>x</think>", 1),
        "chat_tools": ({"messages": [{"role": "user", "content": "Weather?"}], "tools": tools, "tool_choice": "auto",
                        "chat_template_kwargs": {"enable_thinking": False}},
                       "ok<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
                       "<arg_key>days</arg_key><arg_value>2</arg_value></tool_call>", 1),
        "chat_tool_round": ({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "a"}]},
                                          {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                                           "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                                          {"role": "tool", "tool_call_id": "c", "content": "r"}],
                             "tools": tools, "thinking": {"type": "enabled"}, "reasoning_effort": "high", "seed": 3,
                             "temperature": 0.5, "top_p": 0.9},
                            "reason</think>answer<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome", 1),
        "completion": ({"prompt": "<|user|>Hello", "max_tokens": 150, "stop": "aa", "temperature": 0, "logprobs": 0},
                       "baaab", 0),
        "refused": ({"messages": [], "n": 2, "response_format": {"type": "json_object"}}, "x", 1),
        "chat_json_schema": ({"messages": [{"role": "user", "content": "Hi"}], "response_format": {
            "type": "json_schema", "json_schema": {"name": "t", "strict": True, "schema": {
                "type": "object", "properties": {"a": {"enum": ["x", "y"]}, "b": {"$ref": "#/$defs/n"}},
                "required": ["a"], "$defs": {"n": {"type": "integer", "minimum": 0, "maximum": 9}}}}}},
            "{\"a\": \"x\", \"b\": 3}", 1),
        "ollama_format": ({"format": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2},
                           "messages": [{"role": "user", "content": "Hi"}]}, "[true]", 5),
        "too_long": ({"prompt": "word " * 300, "max_tokens": 10}, "", 0),
        "anthropic_tools": ({"max_tokens": 20, "system": [{"type": "text", "text": "s"}], "stop_sequences": ["zz"],
                             "thinking": {"type": "enabled", "budget_tokens": 1024},
                             "tools": [{"name": "get_weather", "input_schema": tools[0]["function"]["parameters"]}],
                             "messages": [{"role": "user", "content": "Weather?"},
                                          {"role": "assistant", "content": [{"type": "thinking", "thinking": "t"},
                                           {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
                                          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "r"}]}]},
                            "reason</think>answer<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value></tool_call>", 2),
        "anthropic_count": ({"messages": [{"role": "user", "content": "word " * 300}]}, "", 3),
        "responses_items": ({"instructions": "s", "max_output_tokens": 20, "reasoning": {"effort": "low"},
                             "tools": [{"type": "function", "name": "get_weather", "parameters": tools[0]["function"]["parameters"]}],
                             "input": [{"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
                                       {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "t"}]},
                                       {"type": "function_call", "call_id": "c", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
                                       {"type": "function_call_output", "call_id": "c", "output": "r"}]},
                            "t</think>a<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value></tool_call>", 4),
        "ollama_chat": ({"think": False, "options": {"temperature": 0, "num_predict": 9, "stop": ["zz"], "num_ctx": 100},
                         "tools": tools, "messages": [{"role": "user", "content": "Weather?"},
                                                      {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather",
                                                       "arguments": {"city": "Paris"}}}]},
                                                      {"role": "tool", "content": "r", "tool_name": "get_weather"}]},
                        "answer zz more", 5),
        "ollama_generate_raw": ({"prompt": "[gMASK]<sop><|user|>Hi", "raw": True, "options": {"num_predict": 5}}, "x", 6),
    }
    for name, (body, text, chat) in seeds.items():
        write("server", name, json.dumps(body).encode() + b"\0" + text.encode() + bytes([chat]))


def grammar_seeds():
    """fuzz_grammar: byte 0 % 3 picks a JSON schema (0; a JSON list: tools), a GBNF grammar (1) or
    bytes fed to a fixed grammar (2, byte 1 picks it: 0-2 schemas, 3 the GBNF one)."""
    schemas = {
        "schema_tool": {"type": "object", "properties": {
            "city": {"type": "string", "minLength": 1, "maxLength": 20},
            "unit": {"enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
            "hours": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 23}, "maxItems": 4},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
            "required": ["city", "days"], "additionalProperties": False},
        "schema_ref": {"$defs": {"node": {"type": "object", "properties": {
            "v": {"type": "integer", "exclusiveMinimum": -3, "exclusiveMaximum": 3},
            "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}, "required": ["v"]}},
            "$ref": "#/$defs/node"},
        "schema_oneof": {"oneOf": [
            {"type": "object", "properties": {"t": {"const": "a"}, "x": {"type": "number"}}, "required": ["t", "x"]},
            {"type": "object", "properties": {"t": {"const": "b"}}, "required": ["t"]}]},
        "schema_types": {"type": ["string", "null", "boolean", "array"], "maxLength": 2, "items": {"const": [1, {"k": "\u00e9"}]}},
        "schema_refused": {"type": "string", "pattern": "^a+$"},
    }
    for name, sch in schemas.items():
        write("grammar", name, b"\x00" + json.dumps(sch).encode())
    write("grammar", "schema_free", b"\x00{}")
    gbnf = {
        "gbnf_json_like": 'root ::= "{" ws pair ("," ws pair)* "}"\npair ::= [a-z]+ ":" num\n'
                          'num ::= [0-9]{1,3} | "-" [1-9]\nws ::= [ \\t\\n]{0,2}\n',
        "gbnf_utf8": 'root ::= [\u03b1-\u03c9]+ [^"a]? ("\\u00e9" | "\\x41") . # comment\n',
        "gbnf_nested": 'root ::= item+\nitem ::= "(" (item | [a-c]{2,})* ")"\n',
        "gbnf_bad": 'root ::= root "x" | y\n',
    }
    for name, text in gbnf.items():
        write("grammar", name, b"\x01" + text.encode())
    write("grammar", "feed_schema", b"\x02\x00" + b'{"a":"\xc3\xa9\\n","b":-5}')
    write("grammar", "feed_array", b"\x05\x01" + b'["xy", null, 1.5]')
    write("grammar", "feed_free", b"\x08\x02" + b'{"k": [true, {"x": "\\ud83d\\ude00"}]}')
    write("grammar", "feed_gbnf", b"\x0b\x03" + "(ab(\u03b1\u03b2)(c".encode())
    tools = [{"function": {"name": "get", "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 5}, "unit": {"type": "string", "enum": ["c", "f"]},
        "n": {"type": "integer", "minimum": 0, "maximum": 9},
        "xs": {"type": "array", "items": {"anyOf": [{"type": "null"}, {"type": "string"}]}}},
        "required": ["city"]}}}, {"function": {"name": "ping"}}]
    # a list of tools (grammar_tool_calls): byte 0 even, one call; odd, one or more
    write("grammar", "tools_one", b"\x00" + json.dumps(tools).encode())
    write("grammar", "tools_many", b"\x03" + json.dumps(tools).encode())



def session_seeds():
    """fuzz_session: the first byte picks repairs (see the target); 0x03 repairs the key part of
    the header and the trailer. Shapes of tests/kv_fixture.h: 4 layers, indexer keys on 0 and 2,
    kv_lora 32, rope 8, index_dim 16, vocab 512, hidden 64."""
    row = 4 * (32 + 8) + 2 * 16

    def session(n, has_logits, chat_flags=0, pending=b"", rows=None, tokens=None):
        head = b"GLMSESS\n" + struct.pack("<II", 1, 144) + bytes(32)
        head += struct.pack("<14I", 1, 1, 0, 1, struct.unpack("<I", struct.pack("<f", 1e-6))[0],
                            16, 16, 0, 4, 32, 8, 16, 512, 64)
        head += struct.pack("<IIQQII", n, has_logits, 7, 3, chat_flags, len(pending))
        head += pending.ljust(4, b"\0") + bytes(4)
        body = struct.pack("<%dI" % n, *(tokens or [(5 + 97 * i) % 512 for i in range(n)]))
        if has_logits:
            body += struct.pack("<576f", *[((i * 37) % 101 - 50) / 8.0 for i in range(576)])
        body += rows if rows is not None else struct.pack(
            "<%df" % (n * row), *[((i * 13) % 29 - 14) / 4.0 for i in range(n * row)])
        return b"\x03" + head + body + bytes(8)

    write("session", "empty", session(0, 0))
    write("session", "three_tokens_logits", session(3, 1, 3, b"\xe2\x82"))
    write("session", "two_tokens_stale", session(2, 0, 4))
    write("session", "nan_row", session(1, 0, rows=struct.pack("<f", float("nan")) + bytes(4 * row - 4)))
    write("session", "bad_pending", session(1, 0, 1, b"A"))
    write("session", "token_outside_vocabulary", session(1, 0, tokens=[512]))


def kvcache_seeds():
    """fuzz_kvcache: the first byte picks repairs (see the target); 0x0f + nothing is a valid
    all-zero entry."""
    write("kvcache", "valid_zero_rows", b"\x0f")
    write("kvcache", "valid_load_from_1", b"\x1f")
    write("kvcache", "valid_load_from_63", b"\x2f" + b"\x00" * 400 + struct.pack("<4f", 1.5, -2.0, 0.25, 3.0))
    write("kvcache", "nan_row", b"\x0f" + b"\x00" * 600 + struct.pack("<f", float("nan")))
    write("kvcache", "bad_checksum", b"\x07")
    write("kvcache", "other_tokens", b"\x0b")
    write("kvcache", "truncated", b"\x0e" + b"\x00" * 300)
    write("kvcache", "junk", b"\x00GLMKVBLK\x01\x00\x00\x00" + bytes(range(256)))


def main():
    st_seeds()
    json_seeds()
    ref_seeds()
    tok_seeds()
    usage_seeds()
    server_seeds()
    grammar_seeds()
    session_seeds()
    kvcache_seeds()
    return 0


if __name__ == "__main__":
    sys.exit(main())

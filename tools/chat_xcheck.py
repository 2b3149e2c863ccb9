#!/usr/bin/env python3
"""Cross-checks chat.h against a model's own chat_template.jinja rendered by Jinja2.

    make tests/bin/test_chat
    python3 tools/chat_xcheck.py MODEL/chat_template.jinja glm-5.2 [N] [SEED]

Generates N random conversations (system/user/assistant/tool turns, reasoning given or written
into the content, tool calls with every kind of JSON argument, tools lists, tricky whitespace and
written tags), renders each with chat.h (tests/bin/test_chat --render) and with the template under
Hugging Face's settings (trim_blocks, lstrip_blocks, tojson = json.dumps(ensure_ascii=False)), and
prints the first differences. Needs Python's jinja2 (Debian: python3-jinja2). Tool-call arguments
reach the template as dicts and a null content as "" (what vLLM and SGLang pass). Exit 0 when every
rendering is identical.

Verified so far: GLM-4.7's template (the GLM-5.0 form) on 15,000 conversations, identical.
"""
import argparse, json, os, random, subprocess, sys, tempfile

from tool_help import HelpFormatter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

POOL = ["Hi", "  spaced  ", "\n\nnl\n", "a<think>b</think>c", "<think>r</think>\n\nans", "x</think>y</think>z",
        "\u3000wide\u3000", "\x1cfs\x1f", "\u200bzw\ufeff", "é日本", "", " ", "<think>\n\n</think>A", "q\"uote\\",
        "\ttab\r\n", "<think> Greeting. </think>\n\nHello!", "</think>", "<think>", "emoji 🙂"]
FLOATS = [0.1, 2.0, 1e16, 1e-5, -0.0, 1.5e300, 123.456, 5e-324, 1 / 3, 1e22, 2.5e-7]


def value(rng, depth=0):
    kinds = 9 if depth < 2 else 6
    k = rng.randrange(kinds)
    if k == 0: return rng.choice(POOL)
    if k == 1: return rng.randint(-10**12, 10**12)
    if k == 2: return rng.choice(FLOATS)
    if k == 3: return True
    if k == 4: return None
    if k == 5: return False
    if k == 6: return [value(rng, depth + 1) for _ in range(rng.randrange(3))]
    if k == 7: return {rng.choice(POOL): value(rng, depth + 1) for _ in range(rng.randrange(3))}
    return {"nested": [value(rng, depth + 1)]}


def case(rng):
    msgs = []
    for _ in range(rng.randrange(1, 7)):
        role = rng.choice(["system", "user", "assistant", "tool", "user"])
        m = {"role": role}
        if role == "assistant":
            m["content"] = rng.choice(POOL + [None])
            if rng.random() < 0.4: m["reasoning_content"] = rng.choice(POOL)
            if rng.random() < 0.4:
                m["tool_calls"] = [{"id": "c%d" % i, "type": "function", "function": {
                    "name": rng.choice(["f", "get_weather", "é"]),
                    "arguments": json.dumps({rng.choice(POOL): value(rng) for _ in range(rng.randrange(4))},
                                            ensure_ascii=rng.random() < 0.5)}} for i in range(rng.randrange(1, 3))]
            if m["content"] is None and "tool_calls" not in m: m["content"] = ""
        elif rng.random() < 0.2 and role != "tool":
            m["content"] = [{"type": "text", "text": rng.choice(POOL)} for _ in range(rng.randrange(3))]
        else:
            m["content"] = rng.choice(POOL)
        msgs.append(m)
    req = {"messages": msgs}
    if rng.random() < 0.3:
        req["tools"] = [{"type": "function", "function": {
            "name": "get_weather", "description": rng.choice(POOL),
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "x": value(rng)}},
            "strict": True}} for _ in range(rng.randrange(1, 3))]
    c = {"req": req, "thinking": rng.random() < 0.6, "keep": rng.random() < 0.3, "gen": rng.random() < 0.8}
    if rng.random() < 0.5: c["effort"] = rng.choice(["high", "max", "low"])
    return c


def reference(template_text, cases):
    import jinja2

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    t = env.from_string(template_text)
    out = []
    for c in cases:
        msgs = []
        for m in c["req"]["messages"]:
            m = dict(m)
            if m.get("content", "") is None: m["content"] = ""
            if "tool_calls" in m:
                m["tool_calls"] = [dict(tc, function=dict(tc["function"], arguments=json.loads(tc["function"]["arguments"])))
                                   for tc in m["tool_calls"]]
            msgs.append(m)
        kw = dict(messages=msgs, tools=c["req"].get("tools"), add_generation_prompt=c["gen"], enable_thinking=c["thinking"])
        if c["keep"]: kw["clear_thinking"] = False
        if "effort" in c: kw["reasoning_effort"] = c["effort"]
        out.append(json.dumps(t.render(**kw), ensure_ascii=False))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    ap.add_argument("template", metavar="TEMPLATE", help="the model's chat_template.jinja")
    ap.add_argument("form", metavar="FORM", help="the chat.h template form to compare with, e.g. glm-5.2")
    ap.add_argument("n", nargs="?", type=int, default=3000, metavar="N", help="random conversations")
    ap.add_argument("seed", nargs="?", type=int, default=1, metavar="SEED", help="random seed")
    a = ap.parse_args()
    template_path, form, n = a.template, a.form, a.n
    rng = random.Random(a.seed)
    cases = [case(rng) for _ in range(n)]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for c in cases: f.write(json.dumps(c, ensure_ascii=False) + "\n")
    try:
        got = subprocess.run([os.path.join(ROOT, "tests/bin/test_chat"), "--render", f.name, form],
                             capture_output=True, text=True, check=True).stdout.splitlines()
    finally:
        os.unlink(f.name)
    want = reference(open(template_path, encoding="utf-8").read(), cases)
    bad = [i for i in range(n) if got[i] != want[i]]
    for i in bad[:3]:
        print("case", i, json.dumps(cases[i], ensure_ascii=False))
        print("  chat.h: ", got[i])
        print("  jinja:  ", want[i])
    print("%d of %d conversations render identically (%s, %s)" % (n - len(bad), n, form, template_path))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

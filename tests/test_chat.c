/* Unit tests for chat.h: every literal prompt of docs/tokenizer.md §3.4 (GLM-5.0 form) and §3.6
 * (GLM-5.2 form) as table tests, the tools block and tool turns, the reasoning rules, MESSAGES JSON
 * with its errors, Python's JSON forms, template version detection from real template texts and
 * model folders, and the output parser (whole text and split at every byte). */
#define JSON_IMPLEMENTATION
#include "json.h"
#define TOK_IMPLEMENTATION
#include "tok.h"
#define CHAT_IMPLEMENTATION
#include "chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int failures;

static void check(const char *name, int ok, const char *why) {
    if (ok) printf("PASS %s\n", name);
    else { printf("FAIL %s: %s\n", name, why); failures++; }
}

/* Prints a string with control characters escaped, for failure messages. */
static void show(const char *label, const char *s, size_t n) {
    printf("  %s: \"", label);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') printf("\\n");
        else if (c < 0x20) printf("\\x%02x", c);
        else putchar(c);
    }
    printf("\"\n");
}

static void same(const char *name, const char *want, const char *got, size_t got_len) {
    int ok = got && strlen(want) == got_len && !memcmp(want, got, got_len);
    check(name, ok, "rendered text differs");
    if (!ok) { show("want", want, strlen(want)); if (got) show("got ", got, got_len); }
}

static JsonDoc *parse(const char *text) {
    char err[256];
    JsonDoc *d = json_parse(text, strlen(text), err, sizeof err);
    if (!d) printf("  (test JSON does not parse: %s)\n", err);
    return d;
}

/* Conversation from a JSON text; NULL (and a FAIL) if it does not load. */
static int conv_from_json(ChatConv *c, const char *name, const char *text) {
    chat_conv_init(c);
    JsonDoc *d = parse(text);
    char err[512] = "test JSON does not parse";
    int rc = d ? chat_conv_parse(c, json_root(d), err, sizeof err) : -1;
    json_free(d);
    if (rc) { check(name, 0, err); chat_conv_free(c); }
    return rc == 0;
}

static void expect_render(const char *name, const ChatConv *c, const ChatOptions *o,
                          const char *want) {
    ChatPieces p = { 0 };
    size_t n = 0;
    char *s = chat_render(c, o, &p) ? NULL : chat_pieces_string(&p, &n);
    same(name, want, s, n);
    free(s);
    chat_pieces_free(&p);
}

static void expect_render_json(const char *name, const char *messages, const ChatOptions *o,
                               const char *want) {
    ChatConv c;
    if (!conv_from_json(&c, name, messages)) return;
    expect_render(name, &c, o, want);
    chat_conv_free(&c);
}

static ChatOptions opts(ChatFormat f, int thinking, int keep) {
    ChatOptions o = chat_options(f);
    o.thinking = thinking;
    o.keep_reasoning = keep;
    return o;
}

/* ---- docs/tokenizer.md §3.4: GLM-5.0/5.1 ----------------------------------------------------- */

static const char *TWO_TURNS =
    "[{\"role\": \"system\", \"content\": \"You are a helpful assistant.\"},"
    " {\"role\": \"user\", \"content\": \"Hi\"},"
    " {\"role\": \"assistant\", \"content\": \"Hello! How can I help?\", \"reasoning_content\": "
    "\"The user greets me.\"},"
    " {\"role\": \"user\", \"content\": \"What is 2+2?\"}]";

static const char *TOOL_ROUND_TRIP =
    "[{\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
    " {\"role\": \"assistant\", \"content\": null, \"reasoning_content\": \"Need the tool.\", "
    "\"tool_calls\": ["
    "   {\"id\": \"call_1\", \"type\": \"function\","
    "    \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\", "
    "\\\"days\\\": 2}\"}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"{\\\"temp\\\": 20}\"}]";

static void test_glm50_literals(void) {
    ChatConv c;
    chat_conv_init(&c);
    chat_conv_add(&c, CHAT_USER, "Hello", 5);
    ChatOptions on = opts(CHAT_GLM50, 1, 0), off = opts(CHAT_GLM50, 0, 0),
                keep = opts(CHAT_GLM50, 1, 1);
    expect_render("5.0 user Hello, thinking on", &c, &on,
                  "[gMASK]<sop><|user|>Hello<|assistant|><think>");
    expect_render("5.0 user Hello, thinking off", &c, &off,
                  "[gMASK]<sop><|user|>Hello<|assistant|></think>");
    chat_conv_free(&c);
    expect_render_json("5.0 system + 2 user turns", TWO_TURNS, &on,
                       "[gMASK]<sop><|system|>You are a helpful assistant.<|user|>Hi<|assistant|></think>Hello! How can I "
                       "help?<|user|>What is 2+2?<|assistant|><think>");
    expect_render_json("5.0 same, clear_thinking=false keeps the reasoning", TWO_TURNS, &keep,
                       "[gMASK]<sop><|system|>You are a helpful assistant.<|user|>Hi<|assistant|><think>The user greets "
                       "me.</think>Hello! How can I help?<|user|>What is 2+2?<|assistant|><think>");
    expect_render_json("5.0 tool round trip", TOOL_ROUND_TRIP, &on,
                       "[gMASK]<sop><|user|>Weather in Paris?<|assistant|><think>Need the "
                       "tool.</think><tool_call>get_weather"
                       "<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</"
                       "arg_key><arg_value>2</arg_value>"
                       "</tool_call><|observation|><tool_response>{\"temp\": "
                       "20}</tool_response><|assistant|><think>");
    /* Built by hand, the same conversation renders the same (SYSTEM + history + PROMPT in glm.c).
       */
    chat_conv_init(&c);
    chat_conv_add(&c, CHAT_SYSTEM, "You are a helpful assistant.", 28);
    chat_conv_add(&c, CHAT_USER, "Hi", 2);
    chat_conv_add_reply(&c, "The user greets me.", 19, "  Hello! How can I help?\n", 25);
    chat_conv_add(&c, CHAT_USER, "What is 2+2?", 12);
    expect_render("5.0 conversation built with chat_conv_add (content stripped)", &c, &on,
                  "[gMASK]<sop><|system|>You are a helpful assistant.<|user|>Hi<|assistant|></think>Hello! How can I "
                  "help?<|user|>What is 2+2?<|assistant|><think>");
    chat_conv_free(&c);
}

/* ---- docs/tokenizer.md §3.6: GLM-5.2 --------------------------------------------------------- */

static void test_glm52_literals(void) {
    ChatConv c;
    chat_conv_init(&c);
    chat_conv_add(&c, CHAT_USER, "Hello", 5);
    ChatOptions on = opts(CHAT_GLM52, 1, 0), off = opts(CHAT_GLM52, 0, 0);
    expect_render("5.2 user Hello, thinking on (default effort)", &c, &on,
                  "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hello<|assistant|><think>");
    ChatOptions high = on;
    high.reasoning_effort = "high";
    expect_render("5.2 same, reasoning_effort high", &c, &high,
                  "[gMASK]<sop><|system|>Reasoning Effort: High<|user|>Hello<|assistant|><think>");
    ChatOptions other = on;
    other.reasoning_effort = "low";   /* the template: anything but "high" is Max */
    expect_render("5.2 reasoning_effort low renders Max, as the template does", &c, &other,
                  "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hello<|assistant|><think>");
    other.reasoning_effort = "max";
    expect_render("5.2 reasoning_effort max", &c, &other,
                  "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hello<|assistant|><think>");
    expect_render("5.2 user Hello, thinking off", &c, &off,
                  "[gMASK]<sop><|user|>Hello<|assistant|><think></think>");
    chat_conv_free(&c);
    expect_render_json(
        "5.2 system S + Hi, Hello, Again, thinking off",
        "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"Hi\"},"
        "{\"role\":\"assistant\",\"content\":\"Hello\"},{\"role\":\"user\",\"content\":\"Again\"}]",
        &off,
        "[gMASK]<sop><|system|>S<|user|>Hi<|assistant|><think></"
        "think>Hello<|user|>Again<|assistant|><think></think>");
    /* earlier reasoning: dropped by default (the template's clear_thinking), kept on request */
    ChatOptions keep = opts(CHAT_GLM52, 1, 1);
    expect_render_json("5.2 earlier reasoning dropped by default", TWO_TURNS, &on,
                       "[gMASK]<sop><|system|>Reasoning Effort: Max<|system|>You are a helpful assistant.<|user|>Hi"
                       "<|assistant|><think></think>Hello! How can I help?<|user|>What is 2+2?<|assistant|><think>");
    expect_render_json("5.2 earlier reasoning kept with keep_reasoning", TWO_TURNS, &keep,
                       "[gMASK]<sop><|system|>Reasoning Effort: Max<|system|>You are a helpful assistant.<|user|>Hi"
                       "<|assistant|><think>The user greets me.</think>Hello! How can I help?<|user|>What is 2+2?"
                       "<|assistant|><think>");
    expect_render_json("5.2 tool round trip", TOOL_ROUND_TRIP, &on,
                       "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Weather in "
                       "Paris?<|assistant|><think>Need the "
                       "tool.</think><tool_call>get_weather<arg_key>city</"
                       "arg_key><arg_value>Paris</arg_value><arg_key>days"
                       "</arg_key><arg_value>2</arg_value></"
                       "tool_call><|observation|><tool_response>{\"temp\": 20}"
                       "</tool_response><|assistant|><think>");
}

/* ---- the reasoning rules and Python's strip -------------------------------------------------- */

static void test_reasoning_rules(void) {
    ChatOptions on50 = opts(CHAT_GLM50, 1, 0), on52 = opts(CHAT_GLM52, 1, 0);
    const char *last =
        "[{\"role\":\"user\",\"content\":\"Hi\"},"
        "{\"role\":\"assistant\",\"content\":\"\\n<think> Greeting. </think>\\n\\nHello!\"}]";
    expect_render_json("5.0 reasoning cut from content after the last user (stripped)", last, &on50,
                       "[gMASK]<sop><|user|>Hi<|assistant|><think>Greeting.</think>Hello!<|assistant|><think>");
    on52.thinking = 0;
    expect_render_json("5.2 reasoning cut from content, kept as written", last, &on52,
                       "[gMASK]<sop><|user|>Hi<|assistant|><think> Greeting. </think>Hello!<|assistant|><think></think>");
    on52.thinking = 1;
    /* split('</think>')[0].split('<think>')[-1]: before the FIRST </think>, after the last <think>
       there; the content is what follows the LAST </think> */
    const char *many =
        "[{\"role\":\"user\",\"content\":\"Q\"},"
        "{\"role\":\"assistant\",\"content\":\"x<think>a<think>b</think>mid</think>end\"}]";
    expect_render_json(
        "5.0 first </think>, last <think> before it, content after the last </think>", many, &on50,
        "[gMASK]<sop><|user|>Q<|assistant|><think>b</think>end<|assistant|><think>");
    /* GLM-5.0 trims newlines around the cut reasoning before testing it: "\n\n" is no reasoning */
    const char *nl = "[{\"role\":\"user\",\"content\":\"Q\"},{\"role\":\"assistant\",\"content\":"
                     "\"<think>\\n\\n</think>A\"}]";
    expect_render_json("5.0 newline-only cut reasoning is none", nl, &on50,
                       "[gMASK]<sop><|user|>Q<|assistant|></think>A<|assistant|><think>");
    expect_render_json("5.2 newline-only cut reasoning is kept", nl, &on52,
                       "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Q<|assistant|><think>\n\n</think>A<|assistant|><think>");
    /* reasoning_content wins over a </think> in the content, which then stays content */
    const char *rc =
        "[{\"role\":\"user\",\"content\":\"Q\"},"
        "{\"role\":\"assistant\",\"content\":\"a</think>b\",\"reasoning_content\":\" R \"}]";
    expect_render_json(
        "5.0 reasoning_content given: content kept whole, reasoning stripped", rc, &on50,
        "[gMASK]<sop><|user|>Q<|assistant|><think>R</think>a</think>b<|assistant|><think>");
    /* empty reasoning_content: 5.0 writes </think>; 5.2 <think></think> */
    const char *empty = "[{\"role\":\"user\",\"content\":\"Q\"},{\"role\":\"assistant\","
                        "\"content\":\"A\",\"reasoning_content\":\"\"}]";
    expect_render_json("5.0 empty reasoning_content", empty, &on50,
                       "[gMASK]<sop><|user|>Q<|assistant|></think>A<|assistant|><think>");
    expect_render_json("5.2 empty reasoning_content", empty, &on52,
                       "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Q<|assistant|><think></think>A<|assistant|><think>");
    /* whitespace-only reasoning: truthy in 5.0, so <think></think> after stripping */
    const char *ws = "[{\"role\":\"user\",\"content\":\"Q\"},{\"role\":\"assistant\",\"content\":"
                     "\"A\",\"reasoning_content\":\" \"}]";
    expect_render_json("5.0 whitespace reasoning_content", ws, &on50,
                       "[gMASK]<sop><|user|>Q<|assistant|><think></think>A<|assistant|><think>");
    /* Python's str.strip: U+001C..U+001F, U+0085, U+3000 are whitespace; U+200B and U+FEFF are not
       */
    ChatConv c;
    chat_conv_init(&c);
    chat_conv_add(&c, CHAT_USER, "Q", 1);
    const char *content = "\x1c\xc2\x85 A\xe3\x80\x80\x1f";
    chat_conv_add_reply(&c, NULL, 0, content, strlen(content));
    expect_render("strip uses str.isspace (U+001C, U+0085, U+3000, U+001F)", &c, &on50,
                  "[gMASK]<sop><|user|>Q<|assistant|></think>A<|assistant|><think>");
    chat_conv_free(&c);
    chat_conv_init(&c);
    chat_conv_add(&c, CHAT_USER, "Q", 1);
    content = "\xe2\x80\x8b" "A\xef\xbb\xbf";
    chat_conv_add_reply(&c, NULL, 0, content, strlen(content));
    expect_render("strip keeps U+200B and U+FEFF", &c, &on50,
                  "[gMASK]<sop><|user|>Q<|assistant|></think>\xe2\x80\x8b" "A\xef\xbb\xbf<|assistant|><think>");
    chat_conv_free(&c);
    /* invalid UTF-8 is not whitespace, and user content is never stripped */
    chat_conv_init(&c);
    chat_conv_add(&c, CHAT_USER, " \xff ", 3);
    chat_conv_add_reply(&c, NULL, 0, " \xff ", 3);
    expect_render("strip stops at invalid UTF-8; user text verbatim", &c, &on50,
                  "[gMASK]<sop><|user|> \xff <|assistant|></think>\xff<|assistant|><think>");
    chat_conv_free(&c);
}

/* chat.h's whitespace is tok.h's White_Space (generated from the UCD) plus U+001C..U+001F. */
static void test_isspace_table(void) {
    int bad = -1;
    for (uint32_t cp = 0; cp <= 0x10FFFF && bad < 0; cp++)
        if (chat__is_space(cp) != (tok_uni_is_space(cp) || (cp >= 0x1C && cp <= 0x1F)))
            bad = (int)cp;
    char why[64];
    snprintf(why, sizeof why, "U+%04X differs", bad);
    check("str.isspace table == White_Space + U+001C..U+001F", bad < 0, why);
}

/* ---- tools, tool calls, tool messages -------------------------------------------------------- */

static const char *TOOLS_REQUEST =
    "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
    "\"description\": \"Météo — \\\"now\\\"\","
    "  \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, "
    "\"days\": {\"type\": \"integer\"}},"
    "  \"required\": [\"city\"]}, \"strict\": true}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"now\", \"parameters\": {}}}],"
    " \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}";

static const char *TOOLS_TEXT_HEAD =
    "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n";
static const char *TOOLS_TEXT_TAIL =
    "</tools>\n\nFor each function call, output the function name and arguments within the "
    "following XML format:\n"
    "<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</"
    "arg_value><arg_key>{arg-key-2}"
    "</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>";

static void test_tools_block(void) {
    char want[4096];
    ChatOptions o50 = opts(CHAT_GLM50, 1, 0), o52 = opts(CHAT_GLM52, 1, 0);
    snprintf(want, sizeof want, "[gMASK]<sop>%s%s\n%s\n%s<|user|>Hi<|assistant|><think>",
             TOOLS_TEXT_HEAD,
             "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
             "\"Météo — \\\"now\\\"\", "
             "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
             "\"string\"}, \"days\": {\"type\": "
             "\"integer\"}}, \"required\": [\"city\"]}, \"strict\": true}}",
             "{\"type\": \"function\", \"function\": {\"name\": \"now\", \"parameters\": {}}}",
             TOOLS_TEXT_TAIL);
    expect_render_json("5.0 tools block: each tool object as given, tojson separators",
                       TOOLS_REQUEST, &o50, want);
    snprintf(want, sizeof want,
             "[gMASK]<sop><|system|>Reasoning Effort: "
             "Max%s%s\n%s\n%s<|user|>Hi<|assistant|><think>",
             TOOLS_TEXT_HEAD,
             "{\"name\": \"get_weather\", \"description\": \"Météo — \\\"now\\\"\", "
             "\"parameters\": {\"type\": \"object\", "
             "\"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": "
             "\"integer\"}}, \"required\": [\"city\"]}}",
             "{\"name\": \"now\", \"parameters\": {}}", TOOLS_TEXT_TAIL);
    expect_render_json("5.2 tools block after the effort line: function objects without strict",
                       TOOLS_REQUEST, &o52, want);

    /* The pieces: tags where the template writes added tokens, text merged between them. */
    ChatConv c;
    if (!conv_from_json(&c, "tools pieces", TOOLS_REQUEST)) return;
    ChatPieces p = { 0 };
    chat_render(&c, &o52, &p);
    int adjacent_text = 0, tool_call_tags = 0, arg_tags = 0;
    for (size_t i = 0; i < p.n; i++) {
        if (i && p.v[i].tag < 0 && p.v[i - 1].tag < 0) adjacent_text = 1;
        if (p.v[i].tag == CHAT_TAG_TOOL_CALL || p.v[i].tag == CHAT_TAG_END_TOOL_CALL)
            tool_call_tags++;
        if (p.v[i].tag >= CHAT_TAG_ARG_KEY && p.v[i].tag <= CHAT_TAG_END_ARG_VALUE) arg_tags++;
    }
    check("pieces: no two text pieces in a row", !adjacent_text,
          "text was split between two pieces");
    check("pieces: the tools block's <tool_call> and <arg_...> are tags",
          tool_call_tags == 2 && arg_tags == 8, "tags in the tools block are not tag pieces");
    check("pieces: [gMASK] <sop> <|system|> first",
          p.n > 3 && p.v[0].tag == CHAT_TAG_GMASK && p.v[1].tag == CHAT_TAG_SOP &&
              p.v[2].tag == CHAT_TAG_SYSTEM && p.v[3].tag < 0,
          "wrong opening pieces");
    chat_pieces_free(&p);
    check("tools: string parameters from the schema",
          c.n_tools == 2 && c.tools[0].n_string_params == 1 &&
              !strcmp(c.tools[0].string_params[0].s, "city") && c.tools[1].n_string_params == 0,
          "string params");
    /* continuation: no [gMASK]<sop>, no effort line, no tools block */
    ChatOptions cont = o52;
    cont.continuation = 1;
    expect_render("continuation renders the turn only", &c, &cont,
                  "<|user|>Hi<|assistant|><think>");
    chat_conv_free(&c);

    /* no tools, or an empty list: no block */
    expect_render_json("empty tools list writes no block",
                       "{\"tools\": [], \"messages\": [{\"role\":\"user\",\"content\":\"Hi\"}]}",
                       &o50, "[gMASK]<sop><|user|>Hi<|assistant|><think>");
}

static void test_tool_turns(void) {
    ChatOptions o = opts(CHAT_GLM50, 1, 0);
    /* argument values: strings raw, everything else as Python's json.dumps */
    expect_render_json("tool call argument values as the template writes them",
                       "[{\"role\":\"user\",\"content\":\"go\"},{\"role\":\"assistant\","
                       "\"content\":\" Calling. \",\"tool_calls\":["
                       "{\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
                       "\"{\\\"s\\\":\\\"a \\\\\\\"q\\\\\\\" "
                       "é\\\",\\\"i\\\":-7,\\\"f\\\":2.0,\\\"e\\\":1e3,\\\"t\\\":true,\\\"n\\\":"
                       "null,"
                       "\\\"o\\\":{\\\"k\\\":[1,2.5,\\\"x\\\\\\\"y\\\",\\\"\\\\u0001\\\\n\\\"]},"
                       "\\\"u\\\":\\\"日本\\\"}\"}}]}]",
                       &o,
                       "[gMASK]<sop><|user|>go<|assistant|></think>Calling.<tool_call>f<arg_key>s</"
                       "arg_key><arg_value>a \"q\" é"
                       "</arg_value><arg_key>i</arg_key><arg_value>-7</arg_value><arg_key>f</"
                       "arg_key><arg_value>2.0</arg_value>"
                       "<arg_key>e</arg_key><arg_value>1000.0</arg_value><arg_key>t</"
                       "arg_key><arg_value>true</arg_value>"
                       "<arg_key>n</arg_key><arg_value>null</arg_value><arg_key>o</"
                       "arg_key><arg_value>{\"k\": [1, 2.5, \"x\\\"y\", "
                       "\"\\u0001\\n\"]}</arg_value><arg_key>u</arg_key><arg_value>日本</"
                       "arg_value></tool_call><|assistant|><think>");
    /* arguments as an object (not a string), a duplicate key (first position, last value), two
       calls, and two tool messages under one <|observation|>, then a user turn, then a third tool
       message */
    expect_render_json("two calls, two results under one observation",
                       "[{\"role\":\"user\",\"content\":\"go\"},{\"role\":\"assistant\","
                       "\"content\":null,\"tool_calls\":["
                       "{\"function\":{\"name\":\"a\",\"arguments\":{\"x\":1,\"y\":2,\"x\":3}}},"
                       "{\"function\":{\"name\":\"b\",\"arguments\":\"{}\"}}]},"
                       "{\"role\":\"tool\",\"content\":\"r1\"},{\"role\":\"tool\",\"content\":[{"
                       "\"type\":\"text\",\"text\":\"r\"},"
                       "{\"type\":\"text\",\"text\":\"2\"}]},{\"role\":\"user\",\"content\":"
                       "\"more\"},{\"role\":\"tool\",\"content\":\"r3\"}]",
                       &o,
                       "[gMASK]<sop><|user|>go<|assistant|></think><tool_call>a<arg_key>x</"
                       "arg_key><arg_value>3</arg_value>"
                       "<arg_key>y</arg_key><arg_value>2</arg_value></tool_call><tool_call>b</"
                       "tool_call><|observation|>"
                       "<tool_response>r1</tool_response><tool_response>r2</"
                       "tool_response><|user|>more<|observation|>"
                       "<tool_response>r3</tool_response><|assistant|><think>");
    /* Python float repr, through argument values */
    expect_render_json("numbers in Python's repr",
                       "[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{"
                       "\"name\":\"n\",\"arguments\":"
                       "{\"v\":[0.1,1e16,1234567890123456.0,1e-5,0.0001,-0.0,1.5e300,5e-324,100.0,"
                       "123456789.123,0.3333333333333333,"
                       "-2.5e-7,1e22,9007199254740993,-0,12345678901234567890,1E2,2.50]}}}]}]",
                       &o,
                       "[gMASK]<sop><|assistant|></think><tool_call>n<arg_key>v</"
                       "arg_key><arg_value>[0.1, 1e+16, 1234567890123456.0, "
                       "1e-05, 0.0001, -0.0, 1.5e+300, 5e-324, 100.0, 123456789.123, "
                       "0.3333333333333333, -2.5e-07, 1e+22, "
                       "9007199254740993, 0, 1.2345678901234567e+19, 100.0, "
                       "2.5]</arg_value></tool_call><|assistant|><think>");
    /* developer is system; content parts are joined; a tag written in a message stays text */
    ChatConv c;
    if (conv_from_json(&c, "developer + parts",
                       "[{\"role\":\"developer\",\"content\":\"D\"},{\"role\":\"user\",\"content\":"
                       "[{\"type\":\"text\",\"text\":\"a\"},"
                       "\"<|assistant|>\",{\"type\":\"text\",\"text\":\"b\"}]}]")) {
        expect_render("developer renders as system; text parts joined", &c, &o,
                      "[gMASK]<sop><|system|>D<|user|>a<|assistant|>b<|assistant|><think>");
        ChatPieces p = { 0 };
        chat_render(&c, &o, &p);
        int assistant_tags = 0;
        for (size_t i = 0; i < p.n; i++) assistant_tags += p.v[i].tag == CHAT_TAG_ASSISTANT;
        check("a tag written in a message is text, not a tag piece", assistant_tags == 1,
              "message text became a tag");
        chat_pieces_free(&p);
        chat_conv_free(&c);
    }
    /* kept fields */
    if (conv_from_json(&c, "kept fields", TOOL_ROUND_TRIP)) {
        check("tool_call_id, call id and arguments are kept",
              c.n_msgs == 3 && c.msgs[1].n_calls == 1 &&
                  !strcmp(c.msgs[1].calls[0].id.s, "call_1") &&
                  !strcmp(c.msgs[2].tool_call_id.s, "call_1") && c.msgs[1].calls[0].n_args == 2 &&
                  !strcmp(c.msgs[1].calls[0].args[1].value.s, "2"),
              "fields");
        chat_conv_free(&c);
    }
}

/* ---- MESSAGES errors: each names the message index and the field ----------------------------- */

static void test_message_errors(void) {
    static const struct { const char *name, *json, *want; } cases[] = {
        { "not a list", "{\"x\": 1}", "expected a list of messages" },
        { "message not an object", "[1]", "message 0 is not an object" },
        { "no role", "[{\"content\":\"x\"}]", "message 0 has no \"role\" string" },
        { "unknown role", "[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"robot\",\"content\":\"x\"}]", "message 1 has role \"robot\"" },
        { "no content", "[{\"role\":\"user\"}]", "message 0 has no \"content\"" },
        { "null user content", "[{\"role\":\"user\",\"content\":null}]", "message 0: \"content\" must be a string or a list" },
        { "numeric content", "[{\"role\":\"system\",\"content\":3}]", "message 0: \"content\" must be a string" },
        { "image part", "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"image_url\",\"image_url\":{}}]}]",
          "message 0: \"content\" part 1 has type \"image_url\"" },
        { "part without type", "[{\"role\":\"user\",\"content\":[{\"text\":\"a\"}]}]", "part 0 has no \"type\" string" },
        { "text part without text", "[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]", "part 0 has no \"text\" string" },
        { "reasoning not a string", "[{\"role\":\"assistant\",\"content\":\"a\",\"reasoning_content\":1}]",
          "message 0: \"reasoning_content\" must be a string" },
        { "tool_calls not a list", "[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":{}}]", "message 0: \"tool_calls\" must be a list" },
        { "call not an object", "[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[3]}]", "message 0: tool_calls[0] is not an object" },
        { "call type", "[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"type\":\"code\",\"function\":{}}]}]",
          "tool_calls[0].type must be \"function\"" },
        { "call without name", "[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"function\":{\"arguments\":\"{}\"}}]}]",
          "message 0: tool_calls[0].function.name must be a string" },
        { "arguments not JSON", "[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{x\"}}]}]",
          "message 0: tool_calls[0].function.arguments is not JSON" },
        { "arguments not an object", "[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]}]",
          "tool_calls[0].function.arguments must be a JSON object" },
        { "arguments missing", "[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"function\":{\"name\":\"f\"}}]}]",
          "must be a JSON object (it is missing)" },
        { "tools not a list", "{\"tools\":{},\"messages\":[]}", "\"tools\" must be a list" },
        { "tool of another type", "{\"tools\":[{\"type\":\"web_search\"}],\"messages\":[]}", "tools[0] has type \"web_search\"" },
        { "tool without name", "{\"tools\":[{\"type\":\"function\",\"function\":{\"description\":\"d\"}}],\"messages\":[]}",
          "tools[0]: the function has no \"name\" string" },
        { "tool function not an object", "{\"tools\":[{\"type\":\"function\",\"function\":\"f\"}],\"messages\":[]}",
          "tools[0].function is not an object" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ChatConv c;
        chat_conv_init(&c);
        JsonDoc *d = parse(cases[i].json);
        char err[512] = "";
        int rc = d ? chat_conv_parse(&c, json_root(d), err, sizeof err) : 0;
        json_free(d);
        chat_conv_free(&c);
        char name[160], why[700];
        snprintf(name, sizeof name, "MESSAGES error: %s", cases[i].name);
        snprintf(why, sizeof why, "got \"%s\", want \"%s\"", rc ? err : "(accepted)",
                 cases[i].want);
        check(name, rc == -1 && strstr(err, cases[i].want) != NULL, why);
    }
    /* accepted oddities: reasoning_content / tool_calls on a user message are ignored (the
       templates ignore them); assistant content absent with tool_calls; a bare function tool */
    ChatConv c;
    ChatOptions o = opts(CHAT_GLM50, 0, 0);
    if (conv_from_json(&c, "ignored fields",
                       "{\"tools\":[{\"name\":\"f\",\"parameters\":{}}],\"messages\":[{\"role\":"
                       "\"user\",\"content\":\"a\","
                       "\"reasoning_content\":1,\"tool_calls\":3},{\"role\":\"assistant\",\"tool_"
                       "calls\":[{\"function\":"
                       "{\"name\":\"f\",\"arguments\":\"{}\"}}]}]}")) {
        char want[1024];
        snprintf(want, sizeof want,
                 "[gMASK]<sop>%s{\"name\": \"f\", \"parameters\": "
                 "{}}\n%s<|user|>a<|assistant|></think>"
                 "<tool_call>f</tool_call><|assistant|></think>",
                 TOOLS_TEXT_HEAD, TOOLS_TEXT_TAIL);
        expect_render("ignored fields, absent assistant content, bare function tool", &c, &o, want);
        chat_conv_free(&c);
    }
    /* a file: errors start with its path */
    char path[] = "/tmp/test_chat_XXXXXX";
    int fd = mkstemp(path);
    const char *bad = "[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\"}]";
    check("write a MESSAGES file", fd >= 0 && write(fd, bad, strlen(bad)) == (ssize_t)strlen(bad),
          "mkstemp/write");
    if (fd >= 0) close(fd);
    char err[600];
    chat_conv_init(&c);
    int rc = chat_conv_load(&c, path, err, sizeof err);
    char want[128];
    snprintf(want, sizeof want, "%s: message 1 has no \"content\"", path);
    check("chat_conv_load names the file and the message", rc == -1 && strstr(err, want) != NULL,
          err);
    chat_conv_free(&c);
    unlink(path);
    chat_conv_init(&c);
    rc = chat_conv_load(&c, "/nonexistent/messages.json", err, sizeof err);
    check("chat_conv_load of a missing file names it",
          rc == -1 && strstr(err, "/nonexistent/messages.json") != NULL, err);
    chat_conv_free(&c);
    chat_conv_init(&c);
    rc = chat_conv_load(&c, "/tmp", err, sizeof err);
    check("chat_conv_load of a directory is refused",
          rc == -1 && strstr(err, "is a directory") != NULL, err);
    chat_conv_free(&c);
}

/* ---- template version detection -------------------------------------------------------------- */

/* Minimal excerpts of the shipped chat_template.jinja files (Hugging Face model repositories
   zai-org/GLM-4.6, GLM-4.7, GLM-5.2, GLM-5.3-Flash; MIT licence): the lines that tell them apart.
   */
static const char *T_GLM46 =
    "[gMASK]<sop>\n{%- if tools -%}\n<|system|>\n# Tools\n"
    "{%- if m.role == 'user' -%}<|user|>\n{{ visible_text(m.content) }}\n"
    "{{- '/nothink' if (enable_thinking is defined and not enable_thinking and not "
    "visible_text(m.content).endswith(\"/nothink\")) else '' -}}\n"
    "{%- elif m.role == 'assistant' -%}\n<|assistant|>\n"
    "{{ '\\n<think></think>' }}\n";
static const char *T_GLM47 = "[gMASK]<sop>\n{%- if tools -%}\n<|system|>\n# Tools\n"
                             "{%- if m.role == 'user' -%}<|user|>{{ visible_text(m.content) }}\n"
                             "{%- elif m.role == 'assistant' -%}\n<|assistant|>\n"
                             "{%- if ((clear_thinking is defined and not clear_thinking) or "
                             "loop.index0 > ns.last_user_index) and reasoning_content -%}\n"
                             "{{ '<think>' + reasoning_content.strip() +  '</think>'}}\n{%- else "
                             "-%}\n{{ '</think>' }}\n{%- endif -%}\n"
                             "    <|assistant|>{{- '</think>' if (enable_thinking is defined and "
                             "not enable_thinking) else '<think>' -}}\n";
static const char *T_GLM52 =
    "[gMASK]<sop>\n"
    "{%- set effective_reasoning_effort = 'high' if reasoning_effort is defined and "
    "reasoning_effort == 'high' else 'max' -%}\n"
    "<|system|>Reasoning Effort: {{ effective_reasoning_effort | capitalize }}\n"
    "{%- if m.role == 'user' -%}<|user|>{{ visible_text(m.content) }}\n"
    "{%- if ((clear_thinking is defined and not clear_thinking) or loop.index0 > "
    "ns.last_user_index) and reasoning_content is defined -%}\n"
    "{{ '<think>' + reasoning_content +  '</think>'}}\n{%- else -%}\n{{ '<think></think>' }}\n";
static const char *T_GLM53 =
    "[gMASK]<sop>\n"
    "{%- set effective_reasoning_effort = reasoning_effort if reasoning_effort is defined and "
    "reasoning_effort in ['low', 'high'] else 'max' -%}\n"
    "{%- if effective_reasoning_effort is not none -%}<|system|>Reasoning Effort: {{ "
    "effective_reasoning_effort | capitalize }}{%- endif -%}\n"
    "{%- set clear_thinking = clear_thinking if clear_thinking is defined else false -%}\n";
static const char *T_CHATML =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}";

static void test_detect(void) {
    ChatFormat f = CHAT_GLM50;
    char why[300] = "";
    check("detect GLM-5.2 (Reasoning Effort)",
          chat_detect_format(T_GLM52, strlen(T_GLM52), &f, why, sizeof why) == 0 && f == CHAT_GLM52,
          why);
    f = CHAT_GLM52;
    check("detect GLM-4.7/5.0 layout as glm-5.0",
          chat_detect_format(T_GLM47, strlen(T_GLM47), &f, why, sizeof why) == 0 && f == CHAT_GLM50,
          why);
    int rc = chat_detect_format(T_GLM53, strlen(T_GLM53), &f, why, sizeof why);
    check("GLM-5.3 (low/high/max) is refused by name", rc == -1 && strstr(why, "GLM-5.3"), why);
    rc = chat_detect_format(T_GLM46, strlen(T_GLM46), &f, why, sizeof why);
    check("GLM-4.5/4.6 layout is refused by name", rc == -1 && strstr(why, "GLM-4.5/4.6"), why);
    rc = chat_detect_format(T_CHATML, strlen(T_CHATML), &f, why, sizeof why);
    check("another model's template is refused", rc == -1 && strstr(why, "[gMASK]<sop>"), why);
    rc = chat_detect_format("", 0, &f, why, sizeof why);
    check("an empty template is refused", rc == -1, why);
    check("chat_effort_valid: max, high only",
          chat_effort_valid("max") && chat_effort_valid("high") && !chat_effort_valid("low") &&
              !chat_effort_valid("Max") && !chat_effort_valid("") && !chat_effort_valid(NULL),
          "effort values");
    check("chat_format_name",
          !strcmp(chat_format_name(CHAT_GLM52), "glm-5.2") &&
              !strcmp(chat_format_name(CHAT_GLM50), "glm-5.0"),
          "names");
}

static int write_file(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

static void remove_file(const char *dir, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (unlink(path)) rmdir(path);
}

static void test_model_format(void) {
    char dir[] = "/tmp/test_chat_model_XXXXXX";
    if (!mkdtemp(dir)) { check("mkdtemp", 0, "cannot make a temporary folder"); return; }
    ChatFormat f = CHAT_GLM50;
    char msg[800];
    int rc = chat_model_format(dir, NULL, &f, msg, sizeof msg);
    check("no template text at all: GLM-5.2",
          rc == 0 && f == CHAT_GLM52 && strstr(msg, "no chat template"), msg);
    write_file(dir, "tokenizer_config.json", "{\"eos_token\": \"<|endoftext|>\"}");
    f = CHAT_GLM50;
    rc = chat_model_format(dir, "auto", &f, msg, sizeof msg);
    check("tokenizer_config.json without chat_template: GLM-5.2", rc == 0 && f == CHAT_GLM52, msg);
    /* chat_template as a string in tokenizer_config.json */
    char json[4096];
    ChatBuf b = { 0 };
    chat__puts(&b, "{\"chat_template\": ");
    chat__py_string(&b, T_GLM47, strlen(T_GLM47));
    chat__puts(&b, "}");
    write_file(dir, "tokenizer_config.json", b.p);
    free(b.p);
    rc = chat_model_format(dir, "", &f, msg, sizeof msg);
    check("tokenizer_config.json chat_template string (GLM-4.7 layout): glm-5.0",
          rc == 0 && f == CHAT_GLM50 && strstr(msg, "tokenizer_config.json"), msg);
    /* a list of {name, template}: the one named "default" */
    b = (ChatBuf){ 0 };
    chat__puts(&b, "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": ");
    chat__py_string(&b, T_GLM47, strlen(T_GLM47));
    chat__puts(&b, "}, {\"name\": \"default\", \"template\": ");
    chat__py_string(&b, T_GLM52, strlen(T_GLM52));
    chat__puts(&b, "}]}");
    write_file(dir, "tokenizer_config.json", b.p);
    free(b.p);
    rc = chat_model_format(dir, NULL, &f, msg, sizeof msg);
    check("tokenizer_config.json chat_template list: the \"default\" entry",
          rc == 0 && f == CHAT_GLM52, msg);
    /* chat_template.jinja wins over tokenizer_config.json (as in transformers) */
    write_file(dir, "chat_template.jinja", T_GLM47);
    rc = chat_model_format(dir, NULL, &f, msg, sizeof msg);
    check("chat_template.jinja takes precedence",
          rc == 0 && f == CHAT_GLM50 && strstr(msg, "chat_template.jinja"), msg);
    write_file(dir, "chat_template.jinja", T_GLM53);
    rc = chat_model_format(dir, NULL, &f, msg, sizeof msg);
    check("an unsupported template: error names the file and CHAT_FORMAT",
          rc == -1 && strstr(msg, "chat_template.jinja") && strstr(msg, "GLM-5.3") &&
              strstr(msg, "CHAT_FORMAT=glm-5.2"),
          msg);
    rc = chat_model_format(dir, "glm-5.2", &f, msg, sizeof msg);
    check("CHAT_FORMAT=glm-5.2 forces the form",
          rc == 0 && f == CHAT_GLM52 && strstr(msg, "CHAT_FORMAT"), msg);
    rc = chat_model_format(dir, "glm-5.0", &f, msg, sizeof msg);
    check("CHAT_FORMAT=glm-5.0 forces the form", rc == 0 && f == CHAT_GLM50, msg);
    rc = chat_model_format(dir, "glm-5.3", &f, msg, sizeof msg);
    check("CHAT_FORMAT with another value is refused by name",
          rc == -1 && strstr(msg, "CHAT_FORMAT=glm-5.3") && strstr(msg, "auto, glm-5.2, glm-5.0"),
          msg);
    remove_file(dir, "chat_template.jinja");
    write_file(dir, "tokenizer_config.json", "{\"chat_template\": ");
    rc = chat_model_format(dir, NULL, &f, msg, sizeof msg);
    check("malformed tokenizer_config.json is named",
          rc == -1 && strstr(msg, "tokenizer_config.json: line 1"), msg);
    snprintf(json, sizeof json, "{\"chat_template\": 42}");
    write_file(dir, "tokenizer_config.json", json);
    rc = chat_model_format(dir, NULL, &f, msg, sizeof msg);
    check("chat_template of the wrong type is named",
          rc == -1 && strstr(msg, "\"chat_template\" must be a string"), msg);
    remove_file(dir, "tokenizer_config.json");
    char sub[600];
    snprintf(sub, sizeof sub, "%s/chat_template.jinja", dir);
    mkdir(sub, 0700);
    rc = chat_model_format(dir, NULL, &f, msg, sizeof msg);
    check("a chat_template.jinja that is a directory is named",
          rc == -1 && strstr(msg, "chat_template.jinja: is a directory"), msg);
    remove_file(dir, "chat_template.jinja");
    rmdir(dir);
}

/* ---- output parsing -------------------------------------------------------------------------- */

/* Feeds text in pieces: cut at `a` and `b` (a <= b), or byte by byte when a < 0. */
static int parse_split(const char *s, size_t n, long a, long b, int in_reasoning,
                       const ChatConv *tools, ChatOutput *o) {
    ChatOutParser *p = chat_out_new(in_reasoning, tools);
    int rc = 0;
    if (a < 0) {
        for (size_t i = 0; i < n && !rc; i++) rc = chat_out_feed(p, s + i, 1, chat_output_add, o);
    } else {
        rc = chat_out_feed(p, s, (size_t)a, chat_output_add, o);
        if (!rc) rc = chat_out_feed(p, s + a, (size_t)(b - a), chat_output_add, o);
        if (!rc) rc = chat_out_feed(p, s + b, n - (size_t)b, chat_output_add, o);
    }
    if (!rc) rc = chat_out_finish(p, chat_output_add, o);
    chat_out_free(p);
    return rc;
}

typedef struct {
    const char *name, *text;
    int in_reasoning;
    const char *reasoning, *content;
    int n_calls;
    const char *call_name[2], *call_args[2];
} OutCase;

static const OutCase OUT_CASES[] = {
    { "reasoning then answer",
      "The user greets me.</think>Hello!",
      1,
      "The user greets me.",
      "Hello!",
      0,
      { 0 },
      { 0 } },
    { "no reasoning opened",
      "Hello <b>there</b> a<b",
      0,
      "",
      "Hello <b>there</b> a<b",
      0,
      { 0 },
      { 0 } },
    { "<think> opens reasoning in content",
      "<think>r</think>\n\nA",
      0,
      "r",
      "\n\nA",
      0,
      { 0 },
      { 0 } },
    { "stray tags dropped", "r<think>s</think>a</think>b", 1, "rs", "ab", 0, { 0 }, { 0 } },
    { "reasoning cut off", "thinking... </thi", 1, "thinking... </thi", "", 0, { 0 }, { 0 } },
    { "tool call with typed values",
      "Need it.</think>Let me check.<tool_call>get_weather\n<arg_key>city</arg_key>\n"
      "<arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value> 2 "
      "</arg_value><arg_key>opts</arg_key>"
      "<arg_value>{\"a\":[1,2.50,true,null]}</arg_value><arg_key>q</arg_key><arg_value>\"quoted\"</"
      "arg_value>"
      "<arg_key>zip</arg_key><arg_value>01234</arg_value></tool_call>",
      1,
      "Need it.",
      "Let me check.",
      1,
      { "get_weather" },
      { "{\"city\": \"Paris\", \"days\": 2, \"opts\": {\"a\": [1, 2.5, true, null]}, \"q\": "
        "\"quoted\", \"zip\": \"01234\"}" } },
    { "string-typed parameter stays a string",
      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>123</arg_value>"
      "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>",
      0,
      "",
      "",
      1,
      { "get_weather" },
      { "{\"city\": \"123\", \"days\": 3}" } },
    { "two calls, no arguments, text between",
      "<tool_call> now </tool_call>\n<tool_call>f<arg_key>k</arg_key><arg_value>"
      "a\nb "
      "\"c\"</arg_value><arg_key>k</arg_key><arg_value>[1</arg_value><arg_key>j</"
      "arg_key><arg_value>-0.0</arg_value>"
      "</tool_call>",
      0,
      "",
      "\n",
      2,
      { "now", "f" },
      { "{}", "{\"k\": \"[1\", \"j\": -0.0}" } },
    { "a tool call inside reasoning is reasoning",
      "<tool_call>f</tool_call></think>ok",
      1,
      "<tool_call>f</tool_call>",
      "ok",
      0,
      { 0 },
      { 0 } },
    { "malformed call comes out as content",
      "a<tool_call><arg_key>k</arg_key><arg_value>v</arg_value></tool_call>b"
      "<tool_call>f junk<arg_key>k</arg_key>x<arg_value>v</arg_value></tool_call>",
      0,
      "",
      "a<tool_call><arg_key>k</arg_key><arg_value>v</arg_value></tool_call>b<tool_call>f "
      "junk<arg_key>k</arg_key>x<arg_value>v"
      "</arg_value></tool_call>",
      0,
      { 0 },
      { 0 } },
    { "unclosed arg_value comes out as content",
      "<tool_call>f<arg_key>k</arg_key><arg_value>v</tool_call>",
      0,
      "",
      "<tool_call>f<arg_key>k</arg_key><arg_value>v</tool_call>",
      0,
      { 0 },
      { 0 } },
    { "call cut off by the end",
      "x<tool_call>f<arg_key>k</arg_key><arg_val",
      0,
      "",
      "x<tool_call>f<arg_key>k</arg_key><arg_val",
      0,
      { 0 },
      { 0 } },
    { "partial tags at the end are text", "a<tool_ca", 0, "", "a<tool_ca", 0, { 0 }, { 0 } },
    { "unicode around tags",
      "é</think>日本<tool_call>f<arg_key>é</arg_key><arg_value>ü\x01</arg_value></tool_call>",
      1,
      "é",
      "日本",
      1,
      { "f" },
      { "{\"é\": \"ü\\u0001\"}" } },
};

static void test_output_parser(void) {
    ChatConv tools;
    if (!conv_from_json(&tools, "parser tools", TOOLS_REQUEST)) return;
    for (size_t i = 0; i < sizeof OUT_CASES / sizeof OUT_CASES[0]; i++) {
        const OutCase *t = &OUT_CASES[i];
        const size_t n = strlen(t->text);
        ChatOutput whole = { 0 };
        int rc = chat_out_parse(t->text, n, t->in_reasoning, &tools, &whole);
        int ok = rc == 0 && whole.reasoning_len == strlen(t->reasoning) &&
                 (!whole.reasoning_len || !strcmp(whole.reasoning, t->reasoning)) &&
                 whole.content_len == strlen(t->content) &&
                 (!whole.content_len || !strcmp(whole.content, t->content)) &&
                 whole.n_calls == t->n_calls;
        for (int k = 0; ok && k < t->n_calls; k++)
            ok = !strcmp(whole.calls[k].name, t->call_name[k]) &&
                 !strcmp(whole.calls[k].arguments, t->call_args[k]);
        char name[160];
        snprintf(name, sizeof name, "output: %s", t->name);
        check(name, ok, "parse differs");
        if (!ok) {
            show("reasoning", whole.reasoning ? whole.reasoning : "", whole.reasoning_len);
            show("content  ", whole.content ? whole.content : "", whole.content_len);
            for (int k = 0; k < whole.n_calls; k++) {
                show("call", whole.calls[k].name, whole.calls[k].name_len);
                show("args", whole.calls[k].arguments, whole.calls[k].arguments_len);
            }
        }
        /* the same result for every split into three chunks, and byte by byte */
        int splits_ok = 1;
        long bad_a = -2, bad_b = -2;
        for (long a = -1; a <= (long)n && splits_ok; a++)
            for (long b = a < 0 ? 0 : a; b <= (long)n && splits_ok; b++) {
                ChatOutput part = { 0 };
                if (parse_split(t->text, n, a, b, t->in_reasoning, &tools, &part) ||
                    !chat_output_equal(&whole, &part)) {
                    splits_ok = 0; bad_a = a; bad_b = b;
                }
                chat_output_free(&part);
                if (a < 0) break;
            }
        char why[96];
        snprintf(why, sizeof why, "split at %ld and %ld differs", bad_a, bad_b);
        snprintf(name, sizeof name, "output split anywhere == whole: %s", t->name);
        check(name, splits_ok, why);
        chat_output_free(&whole);
    }
    /* a call with many arguments, each key twice: first position, last value, in one pass */
    ChatBuf big = { 0 };
    chat__puts(&big, "<tool_call>f");
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 50000; i++) {
            char kv[96];
            snprintf(kv, sizeof kv, "<arg_key>k%d</arg_key><arg_value>%d</arg_value>", i,
                     r ? -i : i);
            chat__puts(&big, kv);
        }
    chat__puts(&big, "</tool_call>");
    ChatOutput bo = { 0 };
    int brc = chat_out_parse(big.p, big.n, 0, NULL, &bo);
    check("output: 100,000 arguments with repeated keys", brc == 0 && bo.n_calls == 1 &&
          !strncmp(bo.calls[0].arguments, "{\"k0\": 0, \"k1\": -1, ", 20) &&
          strstr(bo.calls[0].arguments, "\"k49999\": -49999}") != NULL, "wrong arguments");
    chat_output_free(&bo);
    free(big.p);
    /* without a tool list, "123" is JSON */
    ChatOutput o = { 0 };
    const char *s =
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>123</arg_value></tool_call>";
    chat_out_parse(s, strlen(s), 0, NULL, &o);
    check("output: without tools, a number-looking value is a number",
          o.n_calls == 1 && !strcmp(o.calls[0].arguments, "{\"city\": 123}"),
          o.n_calls ? o.calls[0].arguments : "no call");
    /* chat_output_equal: the same text parses equal; another function name with the same
       arguments, or other content, does not */
    ChatOutput same = { 0 }, renamed = { 0 }, other = { 0 };
    const char *r =
        "<tool_call>get_time<arg_key>city</arg_key><arg_value>123</arg_value></tool_call>";
    chat_out_parse(s, strlen(s), 0, NULL, &same);
    chat_out_parse(r, strlen(r), 0, NULL, &renamed);
    chat_out_parse("hello", 5, 0, NULL, &other);
    check("chat_output_equal: equal for the same output, not for another call name or other "
          "content",
          chat_output_equal(&o, &same) && !chat_output_equal(&o, &renamed) &&
              !chat_output_equal(&o, &other),
          "");
    chat_output_free(&same);
    chat_output_free(&renamed);
    chat_output_free(&other);
    chat_output_free(&o);
    chat_conv_free(&tools);
}

static int stop_at_first(void *ctx, const ChatOutEvent *ev) {
    (void)ev;
    ++*(int *)ctx;
    return 7;
}

static void test_output_stop(void) {
    ChatOutParser *p = chat_out_new(1, NULL);
    int events = 0;
    int rc = chat_out_feed(p, "abc</think>def", 14, stop_at_first, &events);
    check("output: a callback's return value stops the feed", rc == 7 && events == 1,
          "callback return ignored");
    chat_out_free(p);
}

/* test_chat --render CASES.jsonl glm-5.0|glm-5.2: one JSON string per case line, for
   tools/chat_xcheck.py, which compares them with a real chat_template.jinja rendered by Jinja2. A
   case: {"req": messages or request, "thinking": bool, "keep": bool, "gen": bool, "effort":
   string}. */
static int render_cases(const char *path, const char *format) {
    FILE *f = fopen(path, "r");
    if (!f) { perror(path); return 2; }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        char err[512];
        JsonDoc *d = json_parse(line, (size_t)n, err, sizeof err);
        ChatConv c;
        chat_conv_init(&c);
        if (!d || chat_conv_parse(&c, json_get(json_root(d), "req"), err, sizeof err)) {
            printf("ERROR %s\n", err);
        } else {
            const JsonValue *r = json_root(d);
            ChatOptions o = chat_options(strcmp(format, "glm-5.2") ? CHAT_GLM50 : CHAT_GLM52);
            o.thinking = json_bool(json_get(r, "thinking")) != 0;
            o.keep_reasoning = json_bool(json_get(r, "keep")) == 1;
            o.generation_prompt = json_bool(json_get(r, "gen")) != 0;
            o.reasoning_effort = json_str(json_get(r, "effort"), NULL);
            ChatPieces p = { 0 };
            size_t len = 0;
            char *s = chat_render(&c, &o, &p) ? NULL : chat_pieces_string(&p, &len);
            ChatBuf b = { 0 };
            chat__py_string(&b, s ? s : "", len);
            printf("%s\n", b.p);
            free(b.p);
            free(s);
            chat_pieces_free(&p);
        }
        chat_conv_free(&c);
        json_free(d);
    }
    free(line);
    fclose(f);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--render")) return render_cases(argv[2], argv[3]);
    test_glm50_literals();
    test_glm52_literals();
    test_reasoning_rules();
    test_isspace_table();
    test_tools_block();
    test_tool_turns();
    test_message_errors();
    test_detect();
    test_model_format();
    test_output_parser();
    test_output_stop();
    return failures ? 1 : 0;
}

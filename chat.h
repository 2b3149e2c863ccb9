/* chat.h - GLM-5 conversations: the chat template, OpenAI-style messages and tools read from JSON,
 * the template version read from a model folder, and a streaming parser of the model's output.
 *
 * Single-header library in the stb style: every file may include it for the API; exactly ONE
 * translation unit defines CHAT_IMPLEMENTATION before including it. It needs json.h (whose
 * implementation is compiled somewhere in the program). Spec: docs/tokenizer.md §3.4 and §3.6.
 *
 * No tokenizer here: a conversation renders into PIECES, each a template tag named by its text
 * ("[gMASK]", "<|user|>", "<think>", "<tool_call>", ...: every added token the template writes) or
 * a run of plain text. The caller maps tags to ids and encodes text with its tokenizer, so a message
 * cannot smuggle in a tag (a tag written inside a message is text). Consecutive text is always one
 * piece, because a BPE tokenizer splits the text between two added tokens as one unit.
 *
 * Two template forms (ChatFormat), both as their shipped chat_template.jinja renders them under
 * Hugging Face's Jinja settings (trim_blocks, lstrip_blocks, tojson = Python json.dumps with
 * ensure_ascii=False, so ", " and ": " separators):
 *   CHAT_GLM50  GLM-5.0 / 5.1 (= GLM-4.7's layout, §3.4): thinking off ends the prompt with </think>;
 *               an earlier answer is </think> + answer; kept reasoning is stripped; the tools block
 *               lists each tool object as given ({"type": "function", "function": {...}}).
 *   CHAT_GLM52  GLM-5.2 (§3.6): with thinking on, <|system|>Reasoning Effort: Max|High right after
 *               <sop>; thinking off ends with <think></think>; an earlier answer is
 *               <think>reasoning</think>answer, reasoning as given (not stripped), <think></think>
 *               when there is none; the tools block lists each tool's function object (without
 *               "strict" and "defer_loading").
 * Common to both: [gMASK]<sop>, then the tools block (when tools are given), then the messages with
 * nothing between turns: <|system|>text, <|user|>text, <|assistant|> + thinking part +
 * content.strip() + <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call> per
 * call (V raw for a string, else Python-style JSON), and <|observation|> once per run of tool
 * messages, each <tool_response>text</tool_response>. Without reasoning_content the reasoning is
 * cut out of the content (before the first </think>, after the last <think> there; the content is
 * what follows the last </think>). strip() is Python's (str.isspace).
 * Reasoning of an answer BEFORE the last user message is dropped unless keep_reasoning is set: that
 * is both templates' default (clear_thinking undefined). An answer after the last user message
 * (a tool-calling chain) always keeps it.
 *
 * API
 *   Conversations (ChatConv owns copies of every string it holds):
 *     void chat_conv_init(ChatConv *c);   void chat_conv_free(ChatConv *c);
 *     int chat_conv_add(ChatConv *c, ChatRole role, const char *text, size_t len);      -1: no memory
 *     int chat_conv_add_reply(ChatConv *c, const char *reasoning, size_t reasoning_len,
 *                             const char *content, size_t content_len);  an assistant turn;
 *                             reasoning NULL = not given
 *     int chat_conv_parse(ChatConv *c, const JsonValue *v, char *err, size_t err_len);
 *         Appends the messages of a JSON list, or of {"messages": [...], "tools": [...]} (an OpenAI
 *         request body; "tools" optional). Roles system, developer (= system), user, assistant, tool.
 *         content: a string, a list of text parts ({"type": "text", "text": ...}; other part types
 *         are refused by name), or null for an assistant. reasoning_content: string or null.
 *         tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}], arguments a
 *         JSON object or a string holding one. tool_call_id and name are kept. Unknown fields are
 *         ignored. 0 ok; -1 with one line in err naming the message index and field (the messages
 *         already appended stay). The JsonValue may be freed afterwards.
 *     int chat_conv_parse_tools(ChatConv *c, const JsonValue *tools, char *err, size_t err_len);
 *         OpenAI function tools: [{"type": "function", "function": {"name", "description",
 *         "parameters"}}] (a bare function object is taken too); null = none.
 *     int chat_conv_load(ChatConv *c, const char *path, char *err, size_t err_len);
 *         chat_conv_parse of a JSON file (a MESSAGES file); err starts with the path.
 *   Rendering:
 *     ChatOptions chat_options(ChatFormat f);   thinking on, effort default (Max), clear reasoning,
 *                                               generation prompt, at the start of the context
 *     int chat_render(const ChatConv *c, const ChatOptions *o, ChatPieces *out);   appends; -1 no memory
 *     char *chat_pieces_string(const ChatPieces *p, size_t *len);   malloc'ed, tags spelled out
 *     void chat_pieces_free(ChatPieces *p);       (a zeroed ChatPieces is empty and valid)
 *     const char *chat_tag_text(int tag);         "<|user|>" for CHAT_TAG_USER, ...
 *   Template version and settings:
 *     int chat_detect_format(const char *tmpl, size_t len, ChatFormat *out, char *why, size_t why_len);
 *         From a chat_template text: "Reasoning Effort" -> GLM-5.2 (but with a 'low' rung it is
 *         GLM-5.3's: refused, see below); the GLM-4.7/5.0 layout ([gMASK]<sop>, <|assistant|>,
 *         </think>, no /nothink) -> GLM-5.0; anything else -1 with the reason in why.
 *     int chat_model_format(const char *model_dir, const char *setting, ChatFormat *out,
 *                           char *msg, size_t msg_len);
 *         setting (the CHAT_FORMAT value): NULL, "" or "auto" detects from model_dir's
 *         chat_template.jinja, else tokenizer_config.json's "chat_template" (a string, or a list of
 *         {name, template}: the one named "default", else the first); no template text at all
 *         means GLM-5.2, the target. "glm-5.2" / "glm-5.0" force a form. 0 with one line in msg
 *         saying what was chosen and why; -1 with an error in msg naming the file or the setting.
 *     const char *chat_format_name(ChatFormat f);    "glm-5.2" / "glm-5.0"
 *     int chat_effort_valid(const char *s);          1 for "max" or "high" (REASONING_EFFORT values)
 *   Output parsing (reasoning, content and tool calls from the generated text):
 *     ChatOutParser *chat_out_new(int in_reasoning, const ChatConv *tools);   NULL: no memory
 *         in_reasoning: the prompt ended inside <think> (thinking on). tools (may be NULL) gives
 *         each tool's parameter schema; the ChatConv must outlive the parser.
 *     int chat_out_feed(ChatOutParser *p, const char *s, size_t n, ChatOutFn fn, void *ctx);
 *     int chat_out_finish(ChatOutParser *p, ChatOutFn fn, void *ctx);
 *         fn receives events (reasoning text, content text, or a whole tool call) in order; the
 *         event's strings are not NUL-terminated and live only during the call. A non-zero return
 *         from fn stops and is returned (the parser is then spent). -1: no memory. Chunk
 *         boundaries may fall anywhere (inside a tag, inside a UTF-8 character): the concatenated
 *         reasoning, the concatenated content and the tool calls equal those of one whole feed.
 *     void chat_out_free(ChatOutParser *p);
 *     int chat_out_parse(const char *s, size_t n, int in_reasoning, const ChatConv *tools, ChatOutput *o);
 *     int chat_output_add(void *output, const ChatOutEvent *ev);   a ChatOutFn filling a ChatOutput
 *     void chat_output_free(ChatOutput *o);       (a zeroed ChatOutput is empty and valid)
 *     int chat_output_equal(const ChatOutput *a, const ChatOutput *b);   1 when the reasoning, the
 *         content and every tool call's name and arguments are the same bytes
 *     Rules: <think> opens reasoning, </think> closes it; other stray think tags are dropped.
 *     Outside reasoning, <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>
 *     is a tool call (whitespace allowed between the elements; NAME, K and V stripped); its
 *     arguments become a JSON object {"K": V, ...} (", " / ": " separators, as vLLM's GLM parser
 *     writes them): V stays a string when the tool's schema types K as "string", else V is taken as
 *     JSON when it parses as JSON (numbers, objects, arrays, true/false/null, quoted strings), else
 *     as a string (vLLM's glm45 rule, without its Python-literal fallback). A block that does not
 *     read as a call (no name, text outside the pairs) and a call cut off by the end of the text
 *     come out as content, verbatim.
 *
 * Decisions worth knowing
 *   - GLM-5.3's template (effort low/high/max, thinking always on, clear_thinking default false)
 *     is detected and refused: not this project's target; CHAT_FORMAT=glm-5.2 renders it the 5.2
 *     way if wanted. GLM-4.5/4.6 (a newline after each role tag, /nothink) is refused by name.
 *   - "developer" messages are rendered as system messages (the templates would silently drop an
 *     unknown role). Tool message content given as text parts is joined (the GLM-5.0 template would
 *     print the part objects). GLM-5.1's template differs from 5.0's in two details the 5.0 form
 *     does not model (it tests reasoning_content for being defined rather than non-empty, and does
 *     not strip it); both render the same for every conversation whose reasoning is non-empty and
 *     already stripped, which is what the model writes.
 *   - Numbers keep Python's forms: an integer literal stays an integer, anything else is a float
 *     written as Python's repr (2.0, 1e+16, 1e-05). An integer literal beyond int64 becomes a float
 *     (Python would keep every digit). Duplicate keys: first position, last value (a Python dict).
 *   - A null assistant content renders as "" (what vLLM and SGLang pass; the GLM-4.7/5.0 template
 *     itself would print "None").
 *   - Sources. The GLM-5.0 form is GLM-4.7's template, checked with tools/chat_xcheck.py: 15,000
 *     random conversations rendered by Jinja2 are byte-identical. GLM-5.2's template text was not
 *     at hand verbatim: its form follows docs/tokenizer.md §3.6 and lines quoted from the shipped
 *     file (the effort line; the assistant block "... and reasoning_content is defined" -> <think>
 *     + reasoning + </think>, else <think></think>), with the reasoning cut and the tools block as
 *     in GLM-5.3's template and colibri's GLM-5.2 renderer. Run tools/chat_xcheck.py on the real
 *     GLM-5.2 chat_template.jinja once a model folder has it.
 */
#ifndef CHAT_H
#define CHAT_H

#include <stddef.h>
#include "json.h"

typedef enum { CHAT_GLM50, CHAT_GLM52 } ChatFormat;

typedef enum {
    CHAT_TAG_GMASK,
    CHAT_TAG_SOP,
    CHAT_TAG_SYSTEM,
    CHAT_TAG_USER,
    CHAT_TAG_ASSISTANT,
    CHAT_TAG_OBSERVATION,
    CHAT_TAG_THINK,
    CHAT_TAG_END_THINK,
    CHAT_TAG_TOOL_CALL,
    CHAT_TAG_END_TOOL_CALL,
    CHAT_TAG_ARG_KEY,
    CHAT_TAG_END_ARG_KEY,
    CHAT_TAG_ARG_VALUE,
    CHAT_TAG_END_ARG_VALUE,
    CHAT_TAG_TOOL_RESPONSE,
    CHAT_TAG_END_TOOL_RESPONSE,
    CHAT_TAG_COUNT
} ChatTag;

typedef enum { CHAT_SYSTEM, CHAT_USER, CHAT_ASSISTANT, CHAT_TOOL } ChatRole;

/* A string with its length (it may hold NUL bytes); s == NULL: absent. Always NUL-terminated. */
typedef struct { const char *s; size_t n; } ChatText;

/* One argument of a tool call: the value as the template writes it (a string raw, else JSON). */
typedef struct { ChatText key, value; } ChatArg;
typedef struct { ChatText id, name; ChatArg *args; int n_args; } ChatToolCall;

typedef struct {
    ChatRole role;
    ChatText content;               /* never absent ("" for a null content) */
    ChatText reasoning;             /* reasoning_content; absent: cut out of the content */
    ChatToolCall *calls;            /* assistant tool_calls */
    int n_calls;
    ChatText tool_call_id, name;    /* kept for callers; the templates do not print them */
} ChatMessage;

typedef struct {
    ChatText name;
    ChatText json_tool;             /* the tool object as JSON (GLM-5.0's tools block) */
    ChatText json_function;         /* its function object, no "strict"/"defer_loading" (GLM-5.2) */
    ChatText *string_params;        /* parameters typed "string" in the schema (output parsing) */
    int n_string_params;
} ChatTool;

typedef struct ChatArena ChatArena;
typedef struct {
    ChatMessage *msgs;
    int n_msgs, cap_msgs;
    ChatTool *tools;
    int n_tools, cap_tools;
    ChatArena *arena;               /* every string and small array above */
} ChatConv;

typedef struct {
    ChatFormat format;
    /* 1: the generation prompt opens <think>; GLM-5.2 writes the effort line */
    int thinking;
    /* GLM-5.2: "high" -> High; anything else, NULL included -> Max */
    const char *reasoning_effort;
    /* 1: earlier answers keep their reasoning (clear_thinking=false) */
    int keep_reasoning;
    int generation_prompt;          /* 1: end with <|assistant|> and the thinking opener */
    /* 1: no [gMASK]<sop>, effort line or tools block (later turns) */
    int continuation;
} ChatOptions;

typedef struct { int tag; size_t off, len; } ChatPiece;   /* tag < 0: text[off, off+len) */
typedef struct {
    ChatPiece *v;
    size_t n, cap;
    char *text;
    size_t text_len, text_cap;
} ChatPieces;

typedef enum { CHAT_OUT_REASONING, CHAT_OUT_CONTENT, CHAT_OUT_TOOL_CALL } ChatOutKind;
typedef struct {
    ChatOutKind kind;
    const char *text;               /* reasoning or content */
    size_t len;
    const char *name, *arguments;   /* tool call: name, arguments as a JSON object */
    size_t name_len, arguments_len;
} ChatOutEvent;
typedef int (*ChatOutFn)(void *ctx, const ChatOutEvent *ev);
typedef struct ChatOutParser ChatOutParser;

typedef struct { char *name, *arguments; size_t name_len, arguments_len; } ChatOutCall;
typedef struct {
    char *reasoning, *content;      /* NUL-terminated (NULL while empty) */
    size_t reasoning_len, content_len, reasoning_cap, content_cap;
    ChatOutCall *calls;
    int n_calls, cap_calls;
} ChatOutput;

void chat_conv_init(ChatConv *c);
void chat_conv_free(ChatConv *c);
int chat_conv_add(ChatConv *c, ChatRole role, const char *text, size_t len);
int chat_conv_add_reply(ChatConv *c, const char *reasoning, size_t reasoning_len,
                        const char *content, size_t content_len);
int chat_conv_parse(ChatConv *c, const JsonValue *v, char *err, size_t err_len);
int chat_conv_parse_tools(ChatConv *c, const JsonValue *tools, char *err, size_t err_len);
int chat_conv_load(ChatConv *c, const char *path, char *err, size_t err_len);

ChatOptions chat_options(ChatFormat f);
int chat_render(const ChatConv *c, const ChatOptions *o, ChatPieces *out);
char *chat_pieces_string(const ChatPieces *p, size_t *len);
void chat_pieces_free(ChatPieces *p);
const char *chat_tag_text(int tag);

int chat_detect_format(const char *tmpl, size_t len, ChatFormat *out, char *why, size_t why_len);
int chat_model_format(const char *model_dir, const char *setting, ChatFormat *out, char *msg,
                      size_t msg_len);
const char *chat_format_name(ChatFormat f);
int chat_effort_valid(const char *s);

ChatOutParser *chat_out_new(int in_reasoning, const ChatConv *tools);
int chat_out_feed(ChatOutParser *p, const char *s, size_t n, ChatOutFn fn, void *ctx);
int chat_out_finish(ChatOutParser *p, ChatOutFn fn, void *ctx);
void chat_out_free(ChatOutParser *p);
int chat_out_parse(const char *s, size_t n, int in_reasoning, const ChatConv *tools, ChatOutput *o);
int chat_output_add(void *output, const ChatOutEvent *ev);
void chat_output_free(ChatOutput *o);
int chat_output_equal(const ChatOutput *a, const ChatOutput *b);

#endif /* CHAT_H */

#ifdef CHAT_IMPLEMENTATION
#ifndef CHAT_IMPLEMENTATION_DONE
#define CHAT_IMPLEMENTATION_DONE

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------ */
/* Small tools: an arena for the conversation, a growable byte buffer, errors                  */

struct ChatArena { ChatArena *next; size_t used, cap; };

static void *chat__alloc(ChatConv *c, size_t size) {
    size = (size + 15) & ~(size_t)15;
    ChatArena *a = c->arena;
    if (!a || a->cap - a->used < size) {
        size_t cap = size > 60000 ? size : 60000;
        ChatArena *n = malloc(sizeof(ChatArena) + 16 + cap);
        if (!n) return NULL;
        n->next = a; n->used = 0; n->cap = cap;
        c->arena = a = n;
    }
    char *base = (char *)a + ((sizeof(ChatArena) + 15) & ~(size_t)15);
    void *out = base + a->used;
    a->used += size;
    return out;
}

/* A NUL-terminated copy in the arena; a NULL s gives an absent ChatText (and no failure). */
static int chat__copy(ChatConv *c, ChatText *dst, const char *s, size_t n) {
    dst->s = NULL; dst->n = 0;
    if (!s) return 0;
    if (n >= SIZE_MAX - 16) return -1;
    char *p = chat__alloc(c, n + 1);
    if (!p) return -1;
    memcpy(p, s, n);
    p[n] = 0;
    dst->s = p; dst->n = n;
    return 0;
}

typedef struct { char *p; size_t n, cap; int oom; } ChatBuf;

static void chat__put(ChatBuf *b, const void *s, size_t n) {
    if (b->oom || !n) return;
    if (n > SIZE_MAX / 2 - b->n) { b->oom = 1; return; }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *g = realloc(b->p, cap);
        if (!g) { b->oom = 1; return; }
        b->p = g; b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void chat__puts(ChatBuf *b, const char *s) { chat__put(b, s, strlen(s)); }

static int chat__fail(char *err, size_t err_len, const char *fmt, ...) {
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Python's str.strip(): whitespace is str.isspace (bidi WS/B/S or category Zs)               */

static int chat__is_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Decodes one UTF-8 character at s[0..n); returns its length, or 0 if invalid or cut short. */
static size_t chat__utf8(const unsigned char *s, size_t n, uint32_t *cp) {
    if (!n) return 0;
    unsigned c = s[0];
    size_t k;
    uint32_t v, min;
    if (c < 0x80) { *cp = c; return 1; }
    if (c >= 0xC2 && c <= 0xDF) { k = 2; v = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { k = 3; v = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { k = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if (n < k) return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return k;
}

static ChatText chat__lstrip(ChatText t) {
    uint32_t cp;
    size_t k;
    while (t.n && (k = chat__utf8((const unsigned char *)t.s, t.n, &cp)) && chat__is_space(cp)) {
        t.s += k;
        t.n -= k;
    }
    return t;
}

static ChatText chat__rstrip(ChatText t) {
    while (t.n) {
        size_t start = t.n - 1;   /* back to the first byte of the last character */
        while (start > 0 && t.n - start < 4 && ((unsigned char)t.s[start] & 0xC0) == 0x80) start--;
        uint32_t cp;
        size_t k = chat__utf8((const unsigned char *)t.s + start, t.n - start, &cp);
        if (!k || start + k != t.n || !chat__is_space(cp)) break;
        t.n = start;
    }
    return t;
}

static ChatText chat__strip(ChatText t) { return chat__rstrip(chat__lstrip(t)); }

/* Python's rstrip('\n') / lstrip('\n'). */
static ChatText chat__rstrip_nl(ChatText t) { while (t.n && t.s[t.n - 1] == '\n') t.n--; return t; }
static ChatText chat__lstrip_nl(ChatText t) {
    while (t.n && t.s[0] == '\n') {
        t.s++;
        t.n--;
    }
    return t;
}

static const char *chat__find(const char *s, size_t n, const char *needle) {
    const size_t k = strlen(needle);
    if (k > n) return NULL;
    for (const char *p = s; (p = memchr(p, needle[0], n - k + 1 - (size_t)(p - s))); p++)
        if (!memcmp(p, needle, k)) return p;
    return NULL;
}

static const char *chat__find_last(const char *s, size_t n, const char *needle) {
    const char *found = NULL, *p = s;
    const size_t k = strlen(needle);
    while ((p = chat__find(p, n - (size_t)(p - s), needle))) { found = p; p += k; }
    return found;
}

/* ------------------------------------------------------------------------------------------ */
/* JSON as Python's json.dumps(ensure_ascii=False) writes it: ", " and ": ", strings escaped  */
/* only for '"', '\' and control characters, ints as ints, floats as repr()                    */

static void chat__py_string(ChatBuf *b, const char *s, size_t n) {
    chat__put(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        switch (ch) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (ch < 0x20) { snprintf(u, sizeof u, "\\u%04x", ch); esc = u; }
        }
        if (!esc) continue;
        chat__put(b, s + run, i - run);
        chat__puts(b, esc);
        run = i + 1;
    }
    chat__put(b, s + run, n - run);
    chat__put(b, "\"", 1);
}

/* repr(float): the shortest digits that read back to d, in fixed notation when the decimal point
   falls within -4 < decpt <= 16, else as d.ddde+XX (at least two exponent digits). */
static void chat__py_float(ChatBuf *b, double d) {
    if (d == 0.0) { chat__puts(b, signbit(d) ? "-0.0" : "0.0"); return; }
    if (isnan(d)) { chat__puts(b, "NaN"); return; }
    if (isinf(d)) { chat__puts(b, d < 0 ? "-Infinity" : "Infinity"); return; }
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, d);
        if (strtod(tmp, NULL) == d) break;
    }
    const char *p = tmp;
    int neg = 0;
    if (*p == '-') { neg = 1; p++; }
    char digits[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++) if (*p >= '0' && *p <= '9' && nd < 23) digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    const int decpt = (*p == 'e' ? atoi(p + 1) : 0) + 1;
    char out[64];
    int o = 0;
    if (neg) out[o++] = '-';
    if (decpt <= -4 || decpt > 16) {
        out[o++] = digits[0];
        if (nd > 1) { out[o++] = '.'; memcpy(out + o, digits + 1, (size_t)nd - 1); o += nd - 1; }
        o += snprintf(out + o, sizeof out - (size_t)o, "e%c%02d", decpt - 1 < 0 ? '-' : '+',
                      abs(decpt - 1));
    } else if (decpt <= 0) {
        out[o++] = '0'; out[o++] = '.';
        for (int i = 0; i < -decpt; i++) out[o++] = '0';
        memcpy(out + o, digits, (size_t)nd); o += nd;
    } else if (decpt >= nd) {
        memcpy(out + o, digits, (size_t)nd); o += nd;
        for (int i = nd; i < decpt; i++) out[o++] = '0';
        out[o++] = '.'; out[o++] = '0';
    } else {
        memcpy(out + o, digits, (size_t)decpt); o += decpt;
        out[o++] = '.';
        memcpy(out + o, digits + decpt, (size_t)(nd - decpt)); o += nd - decpt;
    }
    chat__put(b, out, (size_t)o);
}

typedef struct { const char *key; size_t len, index; } ChatKeyRef;

static int chat__keyref_cmp(const void *a, const void *b) {
    const ChatKeyRef *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->key, y->key, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->index < y->index ? -1 : (x->index > y->index);
}

/* For keys in order (refs[i].index == i), the index of the entry whose value a Python dict keeps
   at position i (the last one with that key), or SIZE_MAX where a later duplicate is dropped.
   Sorting keeps hostile inputs with many keys O(n log n). Reorders refs; NULL: no memory. */
static size_t *chat__dict_pick(ChatKeyRef *refs, size_t n) {
    size_t *pick = malloc((n ? n : 1) * sizeof *pick);
    if (!pick) return NULL;
    qsort(refs, n, sizeof *refs, chat__keyref_cmp);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && refs[j + 1].len == refs[i].len &&
               !memcmp(refs[j + 1].key, refs[i].key, refs[i].len))
            j++;
        pick[refs[i].index] = refs[j].index;                    /* first position, last value */
        for (size_t k = i + 1; k <= j; k++) pick[refs[k].index] = SIZE_MAX;
        i = j + 1;
    }
    return pick;
}

/* chat__dict_pick for the members of a JSON object. */
static size_t *chat__dict_order(const JsonValue *obj) {
    const size_t n = json_len(obj);
    ChatKeyRef *refs = malloc((n ? n : 1) * sizeof *refs);
    if (!refs) return NULL;
    for (size_t i = 0; i < n; i++) {
        refs[i].key = json_key_at(obj, i, &refs[i].len);
        refs[i].index = i;
    }
    size_t *pick = chat__dict_pick(refs, n);
    free(refs);
    return pick;
}

/* skip: keys left out at this level (NULL-terminated list), for GLM-5.2's function object. */
static void chat__py_json(ChatBuf *b, const JsonValue *v, const char *const *skip) {
    int64_t iv;
    switch (json_type(v)) {
    case JSON_NULL: chat__puts(b, "null"); return;
    case JSON_BOOL: chat__puts(b, json_bool(v) ? "true" : "false"); return;
    case JSON_NUMBER:
        if (json_int_literal(v, &iv)) {
            char t[24];
            snprintf(t, sizeof t, "%lld", (long long)iv);
            chat__puts(b, t);
        } else chat__py_float(b, json_num(v));
        return;
    case JSON_STRING: {
        size_t n;
        const char *s = json_str(v, &n);
        chat__py_string(b, s, n);
        return;
    }
    case JSON_ARRAY:
        chat__put(b, "[", 1);
        for (size_t i = 0; i < json_len(v); i++) {
            if (i) chat__put(b, ", ", 2);
            chat__py_json(b, json_at(v, i), NULL);
        }
        chat__put(b, "]", 1);
        return;
    case JSON_OBJECT: {
        size_t *pick = chat__dict_order(v);
        if (!pick) { b->oom = 1; return; }
        int first = 1;
        chat__put(b, "{", 1);
        for (size_t i = 0; i < json_len(v); i++) {
            if (pick[i] == SIZE_MAX) continue;
            size_t kl;
            const char *k = json_key_at(v, i, &kl);
            int skipped = 0;
            for (const char *const *s = skip; s && *s; s++)
                if (strlen(*s) == kl && !memcmp(*s, k, kl)) skipped = 1;
            if (skipped) continue;
            if (!first) chat__put(b, ", ", 2);
            first = 0;
            chat__py_string(b, k, kl);
            chat__put(b, ": ", 2);
            chat__py_json(b, json_value_at(v, pick[i]), NULL);
        }
        chat__put(b, "}", 1);
        free(pick);
        return;
    }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Conversations                                                                               */

void chat_conv_init(ChatConv *c) { memset(c, 0, sizeof *c); }

void chat_conv_free(ChatConv *c) {
    for (ChatArena *a = c->arena, *next; a; a = next) { next = a->next; free(a); }
    free(c->msgs);
    free(c->tools);
    memset(c, 0, sizeof *c);
}

static ChatMessage *chat__push(ChatConv *c, ChatRole role) {
    if (c->n_msgs == c->cap_msgs) {
        int cap = c->cap_msgs ? 2 * c->cap_msgs : 8;
        if (cap > (1 << 28)) return NULL;
        ChatMessage *g = realloc(c->msgs, (size_t)cap * sizeof *g);
        if (!g) return NULL;
        c->msgs = g; c->cap_msgs = cap;
    }
    ChatMessage *m = &c->msgs[c->n_msgs];
    memset(m, 0, sizeof *m);
    m->role = role;
    m->content.s = "";
    return m;
}

int chat_conv_add(ChatConv *c, ChatRole role, const char *text, size_t len) {
    ChatMessage *m = chat__push(c, role);
    if (!m || chat__copy(c, &m->content, text ? text : "", text ? len : 0)) return -1;
    c->n_msgs++;
    return 0;
}

int chat_conv_add_reply(ChatConv *c, const char *reasoning, size_t reasoning_len,
                        const char *content, size_t content_len) {
    ChatMessage *m = chat__push(c, CHAT_ASSISTANT);
    if (!m || chat__copy(c, &m->content, content ? content : "", content ? content_len : 0) ||
        chat__copy(c, &m->reasoning, reasoning, reasoning_len))
        return -1;
    c->n_msgs++;
    return 0;
}

/* Text of a content value: a string, or a list of text parts joined (the templates' visible_text).
   */
static int chat__content_text(ChatConv *c, const JsonValue *v, ChatText *out, int index,
                              const char *field, char *err, size_t err_len) {
    size_t n;
    const char *s = json_str(v, &n);
    if (s) return chat__copy(c, out, s, n) ? chat__fail(err, err_len, "out of memory") : 0;
    if (json_type(v) != JSON_ARRAY)
        return chat__fail(err, err_len,
                          "message %d: \"%s\" must be a string or a list of text parts", index,
                          field);
    ChatBuf b = { 0 };
    for (size_t i = 0; i < json_len(v); i++) {
        const JsonValue *part = json_at(v, i);
        if ((s = json_str(part, &n))) { chat__put(&b, s, n); continue; }
        const char *type = json_str(json_get(part, "type"), NULL);
        if (json_type(part) != JSON_OBJECT || !type) {
            free(b.p);
            return chat__fail(err, err_len, "message %d: \"%s\" part %zu has no \"type\" string",
                              index, field, i);
        }
        if (strcmp(type, "text")) {
            free(b.p);
            return chat__fail(err, err_len,
                              "message %d: \"%s\" part %zu has type \"%.40s\" (only text parts: "
                              "this model reads text)",
                              index, field, i, type);
        }
        if (!(s = json_str(json_get(part, "text"), &n))) {
            free(b.p);
            return chat__fail(err, err_len, "message %d: \"%s\" part %zu has no \"text\" string",
                              index, field, i);
        }
        chat__put(&b, s, n);
    }
    int rc = b.oom || chat__copy(c, out, b.p ? b.p : "", b.n);
    free(b.p);
    return rc ? chat__fail(err, err_len, "out of memory") : 0;
}

/* A value as the template writes an argument: a string raw, anything else tojson. */
static int chat__arg_value(ChatConv *c, ChatText *dst, const JsonValue *v) {
    size_t n;
    const char *s = json_str(v, &n);
    if (s) return chat__copy(c, dst, s, n);
    ChatBuf b = { 0 };
    chat__py_json(&b, v, NULL);
    int rc = b.oom || chat__copy(c, dst, b.p ? b.p : "", b.n);
    free(b.p);
    return rc ? -1 : 0;
}

static int chat__tool_call(ChatConv *c, ChatToolCall *tc, const JsonValue *v, int index, size_t k,
                           char *err, size_t err_len) {
    if (json_type(v) != JSON_OBJECT)
        return chat__fail(err, err_len, "message %d: tool_calls[%zu] is not an object", index, k);
    const char *type = json_str(json_get(v, "type"), NULL);
    if (json_get(v, "type") && json_type(json_get(v, "type")) != JSON_NULL &&
        (!type || strcmp(type, "function")))
        return chat__fail(err, err_len, "message %d: tool_calls[%zu].type must be \"function\"",
                          index, k);
    size_t n;
    const char *s = json_str(json_get(v, "id"), &n);
    if (s && chat__copy(c, &tc->id, s, n)) return chat__fail(err, err_len, "out of memory");
    /* the template: `if tc.function: tc = tc.function` */
    const JsonValue *fn = json_get(v, "function");
    const char *where = "function.";
    if (!fn || json_type(fn) == JSON_NULL) { fn = v; where = ""; }
    else if (json_type(fn) != JSON_OBJECT)
        return chat__fail(err, err_len, "message %d: tool_calls[%zu].function is not an object",
                          index, k);
    if (!(s = json_str(json_get(fn, "name"), &n)))
        return chat__fail(err, err_len, "message %d: tool_calls[%zu].%sname must be a string",
                          index, k, where);
    if (chat__copy(c, &tc->name, s, n)) return chat__fail(err, err_len, "out of memory");
    const JsonValue *args = json_get(fn, "arguments");
    JsonDoc *doc = NULL;
    if ((s = json_str(args, &n))) {   /* OpenAI sends the arguments as a JSON string */
        char jerr[160];
        doc = json_parse(s, n, jerr, sizeof jerr);
        if (!doc)
            return chat__fail(err, err_len,
                              "message %d: tool_calls[%zu].%sarguments is not JSON: %s", index, k,
                              where, jerr);
        args = json_root(doc);
    }
    if (json_type(args) != JSON_OBJECT) {
        json_free(doc);
        return chat__fail(err, err_len,
                          "message %d: tool_calls[%zu].%sarguments must be a JSON object%s", index,
                          k, where, args ? "" : " (it is missing)");
    }
    size_t *pick = chat__dict_order(args);
    const size_t total = json_len(args);
    tc->args = chat__alloc(c, (total ? total : 1) * sizeof(ChatArg));
    int rc = !pick || !tc->args;
    for (size_t i = 0; !rc && i < total; i++) {
        if (pick[i] == SIZE_MAX) continue;
        size_t kl;
        const char *key = json_key_at(args, i, &kl);
        ChatArg *a = &tc->args[tc->n_args++];
        rc = chat__copy(c, &a->key, key, kl) ||
             chat__arg_value(c, &a->value, json_value_at(args, pick[i]));
    }
    free(pick);
    json_free(doc);
    return rc ? chat__fail(err, err_len, "out of memory") : 0;
}

static int chat__message(ChatConv *c, const JsonValue *m, int index, char *err, size_t err_len) {
    if (json_type(m) != JSON_OBJECT)
        return chat__fail(err, err_len, "message %d is not an object", index);
    const char *role = json_str(json_get(m, "role"), NULL);
    if (!role) return chat__fail(err, err_len, "message %d has no \"role\" string", index);
    ChatRole r;
    if (!strcmp(role, "system") || !strcmp(role, "developer")) r = CHAT_SYSTEM;
    else if (!strcmp(role, "user")) r = CHAT_USER;
    else if (!strcmp(role, "assistant")) r = CHAT_ASSISTANT;
    else if (!strcmp(role, "tool")) r = CHAT_TOOL;
    else
        return chat__fail(err, err_len,
                          "message %d has role \"%.40s\" (supported: system, developer, user, "
                          "assistant, tool)",
                          index, role);
    ChatMessage *msg = chat__push(c, r);
    if (!msg) return chat__fail(err, err_len, "out of memory");
    const JsonValue *content = json_get(m, "content");
    /* null or absent */
    if (r == CHAT_ASSISTANT && json_type(content) == JSON_NULL) msg->content.s = "";
    else if (!content) return chat__fail(err, err_len, "message %d has no \"content\"", index);
    else if (chat__content_text(c, content, &msg->content, index, "content", err, err_len))
        return -1;
    /* reasoning_content and tool_calls belong to assistant messages; the templates ignore them
       elsewhere */
    const JsonValue *reasoning = r == CHAT_ASSISTANT ? json_get(m, "reasoning_content") : NULL;
    if (reasoning && json_type(reasoning) != JSON_NULL) {
        size_t n;
        const char *s = json_str(reasoning, &n);
        if (!s)
            return chat__fail(err, err_len, "message %d: \"reasoning_content\" must be a string",
                              index);
        if (chat__copy(c, &msg->reasoning, s, n)) return chat__fail(err, err_len, "out of memory");
    }
    const JsonValue *calls = r == CHAT_ASSISTANT ? json_get(m, "tool_calls") : NULL;
    if (calls && json_type(calls) != JSON_NULL) {
        if (json_type(calls) != JSON_ARRAY)
            return chat__fail(err, err_len, "message %d: \"tool_calls\" must be a list", index);
        const size_t n = json_len(calls);
        if (n > (1u << 20))
            return chat__fail(err, err_len, "message %d: %zu tool calls is too many", index, n);
        msg->calls = chat__alloc(c, (n ? n : 1) * sizeof(ChatToolCall));
        if (!msg->calls) return chat__fail(err, err_len, "out of memory");
        memset(msg->calls, 0, (n ? n : 1) * sizeof(ChatToolCall));
        for (size_t k = 0; k < n; k++) {
            if (chat__tool_call(c, &msg->calls[k], json_at(calls, k), index, k, err, err_len))
                return -1;
            msg->n_calls++;
        }
    }
    size_t n;
    const char *s;
    if ((s = json_str(json_get(m, "tool_call_id"), &n)) && chat__copy(c, &msg->tool_call_id, s, n))
        return chat__fail(err, err_len, "out of memory");
    if ((s = json_str(json_get(m, "name"), &n)) && chat__copy(c, &msg->name, s, n))
        return chat__fail(err, err_len, "out of memory");
    c->n_msgs++;
    return 0;
}

int chat_conv_parse_tools(ChatConv *c, const JsonValue *tools, char *err, size_t err_len) {
    if (!tools || json_type(tools) == JSON_NULL) return 0;
    if (json_type(tools) != JSON_ARRAY) return chat__fail(err, err_len, "\"tools\" must be a list");
    static const char *const skip52[] = { "strict", "defer_loading", NULL };
    for (size_t i = 0; i < json_len(tools); i++) {
        const JsonValue *t = json_at(tools, i);
        if (json_type(t) != JSON_OBJECT)
            return chat__fail(err, err_len, "tools[%zu] is not an object", i);
        const JsonValue *type = json_get(t, "type");
        const char *ts = json_str(type, NULL);
        if (type && (!ts || strcmp(ts, "function")))
            return chat__fail(err, err_len,
                              "tools[%zu] has type %s%.40s%s (supported: \"function\")", i,
                              ts ? "\"" : "", ts ? ts : "that is not a string", ts ? "\"" : "");
        const JsonValue *fn = json_get(t, "function");   /* the template: `if 'function' in tool` */
        if (!fn) fn = t;
        else if (json_type(fn) != JSON_OBJECT)
            return chat__fail(err, err_len, "tools[%zu].function is not an object", i);
        size_t n;
        const char *name = json_str(json_get(fn, "name"), &n);
        if (!name)
            return chat__fail(err, err_len, "tools[%zu]: the function has no \"name\" string", i);
        if (c->n_tools == c->cap_tools) {
            int cap = c->cap_tools ? 2 * c->cap_tools : 8;
            ChatTool *g = cap <= (1 << 24) ? realloc(c->tools, (size_t)cap * sizeof *g) : NULL;
            if (!g) return chat__fail(err, err_len, "out of memory");
            c->tools = g; c->cap_tools = cap;
        }
        ChatTool *tool = &c->tools[c->n_tools];
        memset(tool, 0, sizeof *tool);
        ChatBuf whole = { 0 }, function = { 0 };
        chat__py_json(&whole, t, NULL);
        chat__py_json(&function, fn, skip52);
        int rc = whole.oom || function.oom || chat__copy(c, &tool->name, name, n) ||
                 chat__copy(c, &tool->json_tool, whole.p, whole.n) ||
                 chat__copy(c, &tool->json_function, function.p, function.n);
        free(whole.p);
        free(function.p);
        /* parameters typed "string" (vLLM's rule: properties.K.type == "string") */
        const JsonValue *props = json_get(json_get(fn, "parameters"), "properties");
        const size_t np = json_type(props) == JSON_OBJECT ? json_len(props) : 0;
        if (!rc && np) {
            tool->string_params = chat__alloc(c, np * sizeof(ChatText));
            rc = !tool->string_params;
            for (size_t k = 0; !rc && k < np; k++) {
                const char *pt = json_str(json_get(json_value_at(props, k), "type"), NULL);
                size_t kl;
                const char *key = json_key_at(props, k, &kl);
                if (pt && !strcmp(pt, "string"))
                    rc = chat__copy(c, &tool->string_params[tool->n_string_params++], key, kl);
            }
        }
        if (rc) return chat__fail(err, err_len, "out of memory");
        c->n_tools++;
    }
    return 0;
}

int chat_conv_parse(ChatConv *c, const JsonValue *v, char *err, size_t err_len) {
    const JsonValue *list = v;
    if (json_type(v) == JSON_OBJECT) {
        list = json_get(v, "messages");
        if (chat_conv_parse_tools(c, json_get(v, "tools"), err, err_len)) return -1;
    }
    if (json_type(list) != JSON_ARRAY)
        return chat__fail(err, err_len, "expected a list of messages (or {\"messages\": [...]})");
    const size_t n = json_len(list);
    if (n > (1u << 24)) return chat__fail(err, err_len, "%zu messages is too many", n);
    for (size_t i = 0; i < n; i++)
        if (chat__message(c, json_at(list, i), (int)i, err, err_len)) return -1;
    return 0;
}

/* A file, whole, at most `cap` bytes (json.h's bounded reader: never blocks on a FIFO, refuses
   devices); NULL with "path: reason" in err. *missing: it does not exist (err set too). */
static char *chat__read_file(const char *path, size_t cap, size_t *len, int *missing, char *err,
                             size_t err_len) {
    if (missing) *missing = access(path, F_OK) != 0 && errno == ENOENT;
    return json_read_file_max(path, cap, len, err, err_len);
}

#define CHAT_MAX_JSON_FILE ((size_t)256 << 20)

int chat_conv_load(ChatConv *c, const char *path, char *err, size_t err_len) {
    size_t len;
    char *text = chat__read_file(path, CHAT_MAX_JSON_FILE, &len, NULL, err, err_len);
    if (!text) return -1;
    char jerr[256];
    JsonDoc *doc = json_parse(text, len, jerr, sizeof jerr);
    free(text);
    if (!doc) return chat__fail(err, err_len, "%s: %s", path, jerr);
    char merr[512];
    int rc = chat_conv_parse(c, json_root(doc), merr, sizeof merr);
    json_free(doc);
    if (rc) chat__fail(err, err_len, "%s: %s", path, merr);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Rendering                                                                                   */

static const char *const chat__tags[CHAT_TAG_COUNT] = {
    "[gMASK]",       "<sop>",           "<|system|>",      "<|user|>",
    "<|assistant|>", "<|observation|>", "<think>",         "</think>",
    "<tool_call>",   "</tool_call>",    "<arg_key>",       "</arg_key>",
    "<arg_value>",   "</arg_value>",    "<tool_response>", "</tool_response>",
};

const char *chat_tag_text(int tag) {
    return tag >= 0 && tag < CHAT_TAG_COUNT ? chat__tags[tag] : NULL;
}
const char *chat_format_name(ChatFormat f) { return f == CHAT_GLM52 ? "glm-5.2" : "glm-5.0"; }
int chat_effort_valid(const char *s) { return s && (!strcmp(s, "max") || !strcmp(s, "high")); }

ChatOptions chat_options(ChatFormat f) {
    ChatOptions o;
    memset(&o, 0, sizeof o);
    o.format = f;
    o.thinking = 1;
    o.generation_prompt = 1;
    return o;
}

void chat_pieces_free(ChatPieces *p) {
    free(p->v);
    free(p->text);
    memset(p, 0, sizeof *p);
}

static int chat__piece(ChatPieces *p, int tag, const char *s, size_t n) {
    if (tag < 0) {
        if (!n) return 0;
        if (n > SIZE_MAX / 2 - p->text_len) return -1;
        if (p->text_len + n > p->text_cap) {
            size_t cap = p->text_cap ? p->text_cap : 256;
            while (cap < p->text_len + n) cap *= 2;
            char *g = realloc(p->text, cap);
            if (!g) return -1;
            p->text = g; p->text_cap = cap;
        }
        memcpy(p->text + p->text_len, s, n);
        if (p->n && p->v[p->n - 1].tag < 0 &&
            p->v[p->n - 1].off + p->v[p->n - 1].len == p->text_len) {
            p->v[p->n - 1].len += n;   /* text next to text is one run */
            p->text_len += n;
            return 0;
        }
    }
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        ChatPiece *g = realloc(p->v, cap * sizeof *g);
        if (!g) return -1;
        p->v = g; p->cap = cap;
    }
    p->v[p->n++] = (ChatPiece){ tag, tag < 0 ? p->text_len : 0, tag < 0 ? n : 0 };
    if (tag < 0) p->text_len += n;
    return 0;
}

char *chat_pieces_string(const ChatPieces *p, size_t *len) {
    ChatBuf b = { 0 };
    for (size_t i = 0; i < p->n; i++) {
        if (p->v[i].tag >= 0) chat__puts(&b, chat__tags[p->v[i].tag]);
        else chat__put(&b, p->text + p->v[i].off, p->v[i].len);
    }
    if (!b.oom && !b.p) { b.p = malloc(1); if (b.p) b.p[0] = 0; else b.oom = 1; }
    if (b.oom) { free(b.p); return NULL; }
    if (len) *len = b.n;
    return b.p;
}

typedef struct { ChatPieces *out; int failed; } ChatEmit;
static void chat__tag(ChatEmit *e, ChatTag t) {
    if (!e->failed && chat__piece(e->out, (int)t, NULL, 0)) e->failed = 1;
}
static void chat__text(ChatEmit *e, const char *s, size_t n) {
    if (!e->failed && chat__piece(e->out, -1, s, n)) e->failed = 1;
}
static void chat__textz(ChatEmit *e, const char *s) { chat__text(e, s, strlen(s)); }
static void chat__textt(ChatEmit *e, ChatText t) { chat__text(e, t.s, t.n); }

/* The tools block, as both templates write it (text verbatim from GLM-4.7/5.x chat_template.jinja;
   <tool_call> and the <arg_...> tags in it are added tokens). */
static void chat__tools_block(ChatEmit *e, const ChatConv *c, int v52) {
    chat__tag(e, CHAT_TAG_SYSTEM);
    chat__textz(
        e, "\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
           "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n");
    for (int i = 0; i < c->n_tools; i++) {
        chat__textt(e, v52 ? c->tools[i].json_function : c->tools[i].json_tool);
        chat__textz(e, "\n");
    }
    chat__textz(e, "</tools>\n\nFor each function call, output the function name and arguments "
                   "within the following XML format:\n");
    chat__tag(e, CHAT_TAG_TOOL_CALL);
    chat__textz(e, "{function-name}");
    for (int k = 1; k <= 2; k++) {
        chat__tag(e, CHAT_TAG_ARG_KEY);
        chat__textz(e, k == 1 ? "{arg-key-1}" : "{arg-key-2}");
        chat__tag(e, CHAT_TAG_END_ARG_KEY);
        chat__tag(e, CHAT_TAG_ARG_VALUE);
        chat__textz(e, k == 1 ? "{arg-value-1}" : "{arg-value-2}");
        chat__tag(e, CHAT_TAG_END_ARG_VALUE);
    }
    chat__textz(e, "...");
    chat__tag(e, CHAT_TAG_END_TOOL_CALL);
}

static void chat__assistant(ChatEmit *e, const ChatMessage *m, int after_last_user,
                            const ChatOptions *o) {
    const int v52 = o->format == CHAT_GLM52;
    ChatText content = m->content, reasoning = m->reasoning;
    int defined = reasoning.s != NULL;
    const char *end = chat__find(content.s, content.n, "</think>");
    if (!defined && end) {
        /* reasoning = content.split('</think>')[0].split('<think>')[-1]; content =
           ...split('</think>')[-1] (GLM-5.0 also trims newlines: .rstrip('\n') before the <think>
           split, .lstrip('\n') after) */
        ChatText before = { content.s, (size_t)(end - content.s) };
        if (!v52) before = chat__rstrip_nl(before);
        const char *open = chat__find_last(before.s, before.n, "<think>");
        if (open) { before.n -= (size_t)(open + 7 - before.s); before.s = open + 7; }
        reasoning = v52 ? before : chat__lstrip_nl(before);
        const char *last = chat__find_last(content.s, content.n, "</think>");
        content.n -= (size_t)(last + 8 - content.s);
        content.s = last + 8;
        defined = 1;
    }
    const int keep = (o->keep_reasoning || after_last_user) && defined;
    chat__tag(e, CHAT_TAG_ASSISTANT);
    if (v52) {
        chat__tag(e, CHAT_TAG_THINK);
        if (keep) chat__textt(e, reasoning);
        chat__tag(e, CHAT_TAG_END_THINK);
    } else if (keep && reasoning.n) {
        chat__tag(e, CHAT_TAG_THINK);
        chat__textt(e, chat__strip(reasoning));
        chat__tag(e, CHAT_TAG_END_THINK);
    } else {
        chat__tag(e, CHAT_TAG_END_THINK);
    }
    chat__textt(e, chat__strip(content));
    for (int k = 0; k < m->n_calls; k++) {
        const ChatToolCall *tc = &m->calls[k];
        chat__tag(e, CHAT_TAG_TOOL_CALL);
        chat__textt(e, tc->name);
        for (int a = 0; a < tc->n_args; a++) {
            chat__tag(e, CHAT_TAG_ARG_KEY);
            chat__textt(e, tc->args[a].key);
            chat__tag(e, CHAT_TAG_END_ARG_KEY);
            chat__tag(e, CHAT_TAG_ARG_VALUE);
            chat__textt(e, tc->args[a].value);
            chat__tag(e, CHAT_TAG_END_ARG_VALUE);
        }
        chat__tag(e, CHAT_TAG_END_TOOL_CALL);
    }
}

int chat_render(const ChatConv *c, const ChatOptions *o, ChatPieces *out) {
    ChatEmit e = { out, 0 };
    const int v52 = o->format == CHAT_GLM52;
    if (!o->continuation) {
        chat__tag(&e, CHAT_TAG_GMASK);
        chat__tag(&e, CHAT_TAG_SOP);
        if (v52 && o->thinking) {
            const int high = o->reasoning_effort && !strcmp(o->reasoning_effort, "high");
            chat__tag(&e, CHAT_TAG_SYSTEM);
            chat__textz(&e, high ? "Reasoning Effort: High" : "Reasoning Effort: Max");
        }
        if (c->n_tools) chat__tools_block(&e, c, v52);
    }
    int last_user = -1;
    for (int i = 0; i < c->n_msgs; i++) if (c->msgs[i].role == CHAT_USER) last_user = i;
    for (int i = 0; i < c->n_msgs; i++) {
        const ChatMessage *m = &c->msgs[i];
        switch (m->role) {
        case CHAT_SYSTEM: chat__tag(&e, CHAT_TAG_SYSTEM); chat__textt(&e, m->content); break;
        case CHAT_USER: chat__tag(&e, CHAT_TAG_USER); chat__textt(&e, m->content); break;
        case CHAT_ASSISTANT: chat__assistant(&e, m, i > last_user, o); break;
        case CHAT_TOOL:
            if (i == 0 || c->msgs[i - 1].role != CHAT_TOOL) chat__tag(&e, CHAT_TAG_OBSERVATION);
            chat__tag(&e, CHAT_TAG_TOOL_RESPONSE);
            chat__textt(&e, m->content);
            chat__tag(&e, CHAT_TAG_END_TOOL_RESPONSE);
            break;
        }
    }
    if (o->generation_prompt) {
        chat__tag(&e, CHAT_TAG_ASSISTANT);
        if (o->thinking) chat__tag(&e, CHAT_TAG_THINK);
        else if (v52) { chat__tag(&e, CHAT_TAG_THINK); chat__tag(&e, CHAT_TAG_END_THINK); }
        else chat__tag(&e, CHAT_TAG_END_THINK);
    }
    return e.failed ? -1 : 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The template version                                                                        */

static int chat__has(const char *s, size_t n, const char *needle) {
    return chat__find(s, n, needle) != NULL;
}

int chat_detect_format(const char *t, size_t n, ChatFormat *out, char *why, size_t why_len) {
    ChatText s = chat__lstrip((ChatText){ t, n });
    if (s.n < 12 || memcmp(s.s, "[gMASK]<sop>", 12))
        return chat__fail(why, why_len,
                          "not a GLM-4.7/5.x chat template (it does not start with [gMASK]<sop>)");
    if (chat__has(t, n, "Reasoning Effort")) {
        if (chat__has(t, n, "'low'") || chat__has(t, n, "\"low\""))
            return chat__fail(why, why_len,
                              "GLM-5.3's chat template (reasoning effort low/high/max, thinking "
                              "always on), "
                              "which this engine does not render");
        *out = CHAT_GLM52;
        return 0;
    }
    if (chat__has(t, n, "/nothink"))
        return chat__fail(why, why_len,
                          "GLM-4.5/4.6's chat template (a newline after each role tag, /nothink), "
                          "which this engine does not render");
    if (chat__has(t, n, "<|assistant|>") && chat__has(t, n, "<|user|>") &&
        chat__has(t, n, "</think>")) {
        *out = CHAT_GLM50;
        return 0;
    }
    return chat__fail(why, why_len,
                      "a chat template this engine does not recognise (no <|user|>, <|assistant|> "
                      "and </think>)");
}

#define CHAT_MAX_TEMPLATE_FILE ((size_t)16 << 20)

int chat_model_format(const char *dir, const char *setting, ChatFormat *out, char *msg,
                      size_t msg_len) {
    if (setting && *setting && strcmp(setting, "auto")) {
        if (!strcmp(setting, "glm-5.2")) *out = CHAT_GLM52;
        else if (!strcmp(setting, "glm-5.0")) *out = CHAT_GLM50;
        else
            return chat__fail(msg, msg_len,
                              "CHAT_FORMAT=%.60s is not one of auto, glm-5.2, glm-5.0", setting);
        chat__fail(msg, msg_len, "chat template %s (CHAT_FORMAT)", chat_format_name(*out));
        return 0;
    }
    char path[4096], err[600], why[300];
    size_t len;
    int missing;
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    char *text = chat__read_file(path, CHAT_MAX_TEMPLATE_FILE, &len, &missing, err, sizeof err);
    if (!text && !missing) return chat__fail(msg, msg_len, "%s", err);
    if (!text) {
        snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
        char *json = chat__read_file(path, CHAT_MAX_JSON_FILE, &len, &missing, err, sizeof err);
        if (!json && !missing) return chat__fail(msg, msg_len, "%s", err);
        if (json) {
            char jerr[256];
            JsonDoc *doc = json_parse(json, len, jerr, sizeof jerr);
            free(json);
            if (!doc) return chat__fail(msg, msg_len, "%s: %s", path, jerr);
            const JsonValue *ct = json_get(json_root(doc), "chat_template");
            /* [{"name": ..., "template": ...}]: "default", else the first */
            if (json_type(ct) == JSON_ARRAY) {
                const JsonValue *pick = json_at(ct, 0);
                for (size_t i = 0; i < json_len(ct); i++) {
                    const char *name = json_str(json_get(json_at(ct, i), "name"), NULL);
                    if (name && !strcmp(name, "default")) pick = json_at(ct, i);
                }
                ct = json_get(pick, "template");
                if (!ct) {
                    json_free(doc);
                    return chat__fail(
                        msg, msg_len,
                        "%s: \"chat_template\" is a list without a \"template\" string", path);
                }
            }
            const char *s = json_str(ct, &len);
            if (ct && json_type(ct) != JSON_NULL && !s) {
                json_free(doc);
                return chat__fail(
                    msg, msg_len,
                    "%s: \"chat_template\" must be a string or a list of {name, template}", path);
            }
            if (s && !(text = malloc(len + 1))) {
                json_free(doc);
                return chat__fail(msg, msg_len, "out of memory");
            }
            if (s) { memcpy(text, s, len); text[len] = 0; }
            json_free(doc);
        }
    }
    if (!text) {
        *out = CHAT_GLM52;
        chat__fail(msg, msg_len,
                   "chat template glm-5.2 (%s has no chat template text; GLM-5.2 is the target)",
                   dir);
        return 0;
    }
    int rc = chat_detect_format(text, len, out, why, sizeof why);
    free(text);
    if (rc)
        return chat__fail(msg, msg_len, "%s: %s; CHAT_FORMAT=glm-5.2 or glm-5.0 forces a form",
                          path, why);
    chat__fail(msg, msg_len, "chat template %s (from %s)", chat_format_name(*out), path);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Output parsing                                                                              */

enum { CHAT__REASONING, CHAT__CONTENT, CHAT__TOOL };

struct ChatOutParser {
    int state;
    const ChatConv *tools;
    ChatBuf pending;        /* undecided bytes: a '<' that may begin a tag, and what follows it */
    ChatBuf call;           /* the text of the tool call being read (after <tool_call>) */
};

ChatOutParser *chat_out_new(int in_reasoning, const ChatConv *tools) {
    ChatOutParser *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->state = in_reasoning ? CHAT__REASONING : CHAT__CONTENT;
    p->tools = tools;
    return p;
}

void chat_out_free(ChatOutParser *p) {
    if (!p) return;
    free(p->pending.p);
    free(p->call.p);
    free(p);
}

static int chat__emit(ChatOutParser *p, ChatOutKind kind, const char *s, size_t n, ChatOutFn fn,
                      void *ctx) {
    if (!n) return 0;
    /* text inside a tool call: keep it */
    if (kind == CHAT_OUT_CONTENT && p->state == CHAT__TOOL) {
        chat__put(&p->call, s, n);
        return p->call.oom ? -1 : 0;
    }
    ChatOutEvent ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = kind; ev.text = s; ev.len = n;
    return fn(ctx, &ev);
}

static int chat__is_string_param(const ChatConv *c, ChatText name, ChatText key) {
    for (int i = 0; c && i < c->n_tools; i++) {
        const ChatTool *t = &c->tools[i];
        if (t->name.n != name.n || memcmp(t->name.s, name.s, name.n)) continue;
        for (int k = 0; k < t->n_string_params; k++)
            if (t->string_params[k].n == key.n && !memcmp(t->string_params[k].s, key.s, key.n))
                return 1;
        return 0;
    }
    return 0;
}

static ChatText chat__skip_ws(ChatText t) { return chat__lstrip(t); }

static int chat__starts(ChatText t, const char *tag) {
    size_t k = strlen(tag);
    return t.n >= k && !memcmp(t.s, tag, k);
}

typedef struct { ChatText key, value; } ChatPair;

/* Reads NAME<arg_key>K</arg_key><arg_value>V</arg_value>... into *name and pairs; 0 if it reads. */
static int chat__read_call(ChatText in, ChatText *name, ChatPair **pairs, size_t *n_pairs) {
    const char *first = chat__find(in.s, in.n, "<arg_key>");
    *name = chat__strip((ChatText){ in.s, first ? (size_t)(first - in.s) : in.n });
    *pairs = NULL;
    *n_pairs = 0;
    if (!name->n) return -1;
    ChatText rest =
        first ? (ChatText){ first, in.n - (size_t)(first - in.s) } : (ChatText){ in.s + in.n, 0 };
    size_t cap = 0;
    for (;;) {
        rest = chat__skip_ws(rest);
        if (!rest.n) return 0;
        if (!chat__starts(rest, "<arg_key>")) return -1;
        rest.s += 9; rest.n -= 9;
        const char *kend = chat__find(rest.s, rest.n, "</arg_key>");
        if (!kend) return -1;
        ChatText key = chat__strip((ChatText){ rest.s, (size_t)(kend - rest.s) });
        rest.n -= (size_t)(kend + 10 - rest.s); rest.s = kend + 10;
        rest = chat__skip_ws(rest);
        if (!chat__starts(rest, "<arg_value>")) return -1;
        rest.s += 11; rest.n -= 11;
        const char *vend = chat__find(rest.s, rest.n, "</arg_value>");
        if (!vend) return -1;
        ChatText value = chat__strip((ChatText){ rest.s, (size_t)(vend - rest.s) });
        rest.n -= (size_t)(vend + 12 - rest.s); rest.s = vend + 12;
        /* every pair, duplicates included: the caller orders them as a dict */
        if (*n_pairs == cap) {
            cap = cap ? 2 * cap : 8;
            ChatPair *g = realloc(*pairs, cap * sizeof *g);
            if (!g) return -2;
            *pairs = g;
        }
        (*pairs)[(*n_pairs)++] = (ChatPair){ key, value };
    }
}

/* A complete <tool_call>...</tool_call>: a tool-call event, or the block verbatim as content. */
static int chat__finish_call(ChatOutParser *p, ChatOutFn fn, void *ctx) {
    p->state = CHAT__CONTENT;
    ChatText in = { p->call.p ? p->call.p : "", p->call.n }, name;
    ChatPair *pairs;
    size_t n_pairs;
    int rc = chat__read_call(in, &name, &pairs, &n_pairs);
    if (rc == -2) return -1;
    if (rc) {
        free(pairs);
        ChatBuf raw = { 0 };
        chat__puts(&raw, "<tool_call>");
        chat__put(&raw, in.s, in.n);
        chat__puts(&raw, "</tool_call>");
        rc = raw.oom ? -1 : chat__emit(p, CHAT_OUT_CONTENT, raw.p, raw.n, fn, ctx);
        free(raw.p);
        p->call.n = 0;
        return rc;
    }
    /* a repeated key keeps its first position and takes the last value (vLLM fills a Python dict)
       */
    ChatKeyRef *refs = malloc((n_pairs ? n_pairs : 1) * sizeof *refs);
    for (size_t i = 0; refs && i < n_pairs; i++)
        refs[i] = (ChatKeyRef){ pairs[i].key.s, pairs[i].key.n, i };
    size_t *pick = refs ? chat__dict_pick(refs, n_pairs) : NULL;
    free(refs);
    if (!pick) { free(pairs); return -1; }
    ChatBuf args = { 0 };
    int first = 1;
    chat__put(&args, "{", 1);
    for (size_t i = 0; i < n_pairs; i++) {
        if (pick[i] == SIZE_MAX) continue;
        if (!first) chat__put(&args, ", ", 2);
        first = 0;
        chat__py_string(&args, pairs[i].key.s, pairs[i].key.n);
        chat__put(&args, ": ", 2);
        ChatText v = pairs[pick[i]].value;
        JsonDoc *doc = NULL;
        /* Python's json.loads refuses a byte order mark, which json.h would skip */
        if (!chat__is_string_param(p->tools, name, pairs[i].key) &&
            !(v.n >= 3 && !memcmp(v.s, "\xEF\xBB\xBF", 3)))
            doc = json_parse(v.s, v.n, NULL, 0);
        if (doc) chat__py_json(&args, json_root(doc), NULL);
        else chat__py_string(&args, v.s, v.n);
        json_free(doc);
    }
    chat__put(&args, "}", 1);
    free(pick);
    free(pairs);
    rc = -1;
    if (!args.oom) {
        ChatOutEvent ev;
        memset(&ev, 0, sizeof ev);
        ev.kind = CHAT_OUT_TOOL_CALL;
        ev.name = name.s; ev.name_len = name.n;
        ev.arguments = args.p; ev.arguments_len = args.n;
        rc = fn(ctx, &ev);
    }
    free(args.p);
    p->call.n = 0;
    return rc;
}

/* The tags that matter in each state. */
static const char *const chat__state_tags[3][4] = {
    { "</think>", "<think>", NULL },
    { "<think>", "</think>", "<tool_call>", NULL },
    { "</tool_call>", NULL },
};

/* At s[0] == '<': 1 + index of the state's tag that starts here, 0 if none can, -1 if the bytes so
   far are a proper prefix of one (more input decides; at the end of the text there is none). */
static int chat__match(int state, const char *s, size_t n, int final, size_t *len) {
    int partial = 0;
    for (int i = 0; chat__state_tags[state][i]; i++) {
        const char *t = chat__state_tags[state][i];
        size_t k = strlen(t);
        if (n >= k) { if (!memcmp(s, t, k)) { *len = k; return i + 1; } }
        else if (!memcmp(s, t, n)) partial = 1;
    }
    return partial && !final ? -1 : 0;
}

static int chat__process(ChatOutParser *p, const char *s, size_t n, int final, size_t *used,
                         ChatOutFn fn, void *ctx) {
    size_t i = 0, run = 0;
    int rc;
    while (i < n) {
        const char *lt = memchr(s + i, '<', n - i);
        if (!lt) { i = n; break; }
        i = (size_t)(lt - s);
        size_t len = 0;
        int m = chat__match(p->state, s + i, n - i, final, &len);
        if (m < 0) break;
        if (m == 0) { i++; continue; }
        ChatOutKind kind = p->state == CHAT__REASONING ? CHAT_OUT_REASONING : CHAT_OUT_CONTENT;
        if ((rc = chat__emit(p, kind, s + run, i - run, fn, ctx))) return rc;
        const char *tag = chat__state_tags[p->state][m - 1];
        if (!strcmp(tag, "</think>")) { if (p->state == CHAT__REASONING) p->state = CHAT__CONTENT; }
        else if (!strcmp(tag, "<think>")) p->state = CHAT__REASONING;
        else if (!strcmp(tag, "<tool_call>")) { p->state = CHAT__TOOL; p->call.n = 0; }
        else if ((rc = chat__finish_call(p, fn, ctx))) return rc;
        i += len;
        run = i;
    }
    ChatOutKind kind = p->state == CHAT__REASONING ? CHAT_OUT_REASONING : CHAT_OUT_CONTENT;
    if ((rc = chat__emit(p, kind, s + run, i - run, fn, ctx))) return rc;
    *used = i;
    return 0;
}

int chat_out_feed(ChatOutParser *p, const char *s, size_t n, ChatOutFn fn, void *ctx) {
    size_t used;
    int rc;
    if (p->pending.n) {   /* an undecided '<...': decide it with the new bytes first */
        chat__put(&p->pending, s, n);
        if (p->pending.oom) return -1;
        ChatBuf b = p->pending;
        p->pending = (ChatBuf){ 0 };
        rc = chat__process(p, b.p, b.n, 0, &used, fn, ctx);
        if (!rc) chat__put(&p->pending, b.p + used, b.n - used);
        free(b.p);
    } else {
        rc = chat__process(p, s, n, 0, &used, fn, ctx);
        if (!rc) chat__put(&p->pending, s + used, n - used);
    }
    if (!rc && p->pending.oom) rc = -1;
    return rc;
}

int chat_out_finish(ChatOutParser *p, ChatOutFn fn, void *ctx) {
    size_t used;
    int rc = 0;
    if (p->pending.n) {
        ChatBuf b = p->pending;
        p->pending = (ChatBuf){ 0 };
        rc = chat__process(p, b.p, b.n, 1, &used, fn, ctx);
        free(b.p);
    }
    /* cut off inside a tool call: show what came, as it came */
    if (!rc && p->state == CHAT__TOOL) {
        ChatBuf raw = { 0 };
        chat__puts(&raw, "<tool_call>");
        chat__put(&raw, p->call.p, p->call.n);
        p->state = CHAT__CONTENT;
        p->call.n = 0;
        rc = raw.oom ? -1 : chat__emit(p, CHAT_OUT_CONTENT, raw.p, raw.n, fn, ctx);
        free(raw.p);
    }
    return rc;
}

static int chat__grow_text(char **p, size_t *len, size_t *cap, const char *s, size_t n) {
    if (n > SIZE_MAX / 2 - *len) return -1;
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 64;
        while (c < *len + n + 1) c *= 2;
        char *g = realloc(*p, c);
        if (!g) return -1;
        *p = g; *cap = c;
    }
    memcpy(*p + *len, s, n);
    *len += n;
    (*p)[*len] = 0;
    return 0;
}

int chat_output_add(void *output, const ChatOutEvent *ev) {
    ChatOutput *o = output;
    if (ev->kind == CHAT_OUT_REASONING)
        return chat__grow_text(&o->reasoning, &o->reasoning_len, &o->reasoning_cap, ev->text,
                               ev->len);
    if (ev->kind == CHAT_OUT_CONTENT)
        return chat__grow_text(&o->content, &o->content_len, &o->content_cap, ev->text, ev->len);
    if (o->n_calls == o->cap_calls) {
        int cap = o->cap_calls ? 2 * o->cap_calls : 4;
        ChatOutCall *g = cap <= (1 << 26) ? realloc(o->calls, (size_t)cap * sizeof *g) : NULL;
        if (!g) return -1;
        o->calls = g; o->cap_calls = cap;
    }
    ChatOutCall *c = &o->calls[o->n_calls];
    memset(c, 0, sizeof *c);
    size_t cap = 0;
    if (chat__grow_text(&c->name, &c->name_len, &cap, ev->name, ev->name_len)) return -1;
    cap = 0;
    if (chat__grow_text(&c->arguments, &c->arguments_len, &cap, ev->arguments, ev->arguments_len)) {
        free(c->name);
        return -1;
    }
    o->n_calls++;
    return 0;
}

int chat_output_equal(const ChatOutput *a, const ChatOutput *b) {
    if (a->reasoning_len != b->reasoning_len || a->content_len != b->content_len ||
        a->n_calls != b->n_calls)
        return 0;
    if (a->reasoning_len && memcmp(a->reasoning, b->reasoning, a->reasoning_len)) return 0;
    if (a->content_len && memcmp(a->content, b->content, a->content_len)) return 0;
    for (int i = 0; i < a->n_calls; i++)
        if (a->calls[i].name_len != b->calls[i].name_len ||
            memcmp(a->calls[i].name, b->calls[i].name, a->calls[i].name_len) ||
            a->calls[i].arguments_len != b->calls[i].arguments_len ||
            memcmp(a->calls[i].arguments, b->calls[i].arguments, a->calls[i].arguments_len))
            return 0;
    return 1;
}

void chat_output_free(ChatOutput *o) {
    free(o->reasoning);
    free(o->content);
    for (int i = 0; i < o->n_calls; i++) { free(o->calls[i].name); free(o->calls[i].arguments); }
    free(o->calls);
    memset(o, 0, sizeof *o);
}

int chat_out_parse(const char *s, size_t n, int in_reasoning, const ChatConv *tools,
                   ChatOutput *o) {
    ChatOutParser *p = chat_out_new(in_reasoning, tools);
    if (!p) return -1;
    int rc = chat_out_feed(p, s, n, chat_output_add, o);
    if (!rc) rc = chat_out_finish(p, chat_output_add, o);
    chat_out_free(p);
    return rc;
}

#endif /* CHAT_IMPLEMENTATION_DONE */
#endif /* CHAT_IMPLEMENTATION */

/* Fuzz target: grammar.h's two compilers and its matcher. Byte 0 picks what the rest is
   (m = byte0 % 3):
     m 0  a JSON schema (grammar_from_schema_text); a JSON list is a list of tools
          ({"function": {"name", "parameters"}}) for grammar_tool_calls, at most one call when
          byte 0 is even;
     m 1  a GBNF grammar (grammar_from_gbnf);
     m 2  bytes fed one chunk at a time (chunk sizes from byte0 / 3) to the matcher of one of a few
          fixed schemas and grammars (byte 1 picks it).
   A refused grammar must say why on one line. A compiled one is then decoded with tokens picked
   by a generator seeded from the input (uniform among the allowed ones, then preferring eos and
   closing brackets), checking at every step what the API promises: the mask count equals its
   bits, some token is allowed (no dead ends) while the stacks stay well below GRAMMAR_MAX_DEPTH,
   eos is allowed exactly when the answer is complete, the mask agrees with grammar_matcher_check
   on sampled tokens, an allowed token is accepted; a finished schema answer parses as JSON. */
#define JSON_IMPLEMENTATION
#include "json.h"
#define GRAMMAR_IMPLEMENTATION
#include "grammar.h"
#include <stdlib.h>
#include <string.h>

#define REQUIRE(cond) do { if (!(cond)) abort(); } while (0)

static const char *const multi[] = {
    "{\"",      "\":",     "\",",          "\"}",      "},",       "}]",       "]}",      "\":\"",
    " \"",      "\n  ",    "\\\"",         "\\\\",     "\\n",      "\\u00",    "\\ud83d", "\\ude00",
    "12",       "345",     "-1",           "0.",       "e+",       "true",     "false",   "null",
    "a\"",      "\"b",     "[\"",          "[[",       "]]",       "[]",       "{}",      ",\"",
    "\xe4\xb8", "\xad",    "\xe4\xb8\xad", "\xc3\xa9", "\xf0\x9f", "\x98\x80", "abc",     " world",
    "x\"}",     "\"},{\"", "\"\"",         "42",       "9]",       "1}",
};
enum {
    N_MULTI = sizeof multi / sizeof *multi,
    TAG0 = 256 + N_MULTI,                     /* the six tool-call tags */
    N_VOCAB = TAG0 + GRAMMAR_N_TAGS + 1,
    EOS = N_VOCAB - 1
};
static const char *pieces[N_VOCAB];
static size_t lens[N_VOCAB];
static GrammarVocab *vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    static char bytes[256];
    for (int i = 0; i < 256; i++) { bytes[i] = (char)i; pieces[i] = &bytes[i]; lens[i] = 1; }
    for (int i = 0; i < N_MULTI; i++) {
        pieces[256 + i] = multi[i];
        lens[256 + i] = strlen(multi[i]);
    }
    int tag[GRAMMAR_N_TAGS];
    for (int k = 0; k < GRAMMAR_N_TAGS; k++) {
        tag[k] = TAG0 + k;
        pieces[TAG0 + k] = grammar_tag_text[k];
        lens[TAG0 + k] = strlen(grammar_tag_text[k]);
    }
    pieces[EOS] = NULL;
    int eos = EOS;
    char err[128];
    vocab = grammar_vocab_new_tags(N_VOCAB, pieces, lens, &eos, 1, tag, err, sizeof err);
    REQUIRE(vocab);
    return 0;
}

static uint64_t rs;
static uint32_t rnd(void) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rs >> 33);
}

static int bit(const uint64_t *m, int t) { return (int)(m[t >> 6] >> (t & 63) & 1); }

static uint32_t max_depth(const GrammarMatcher *m) {
    uint32_t d = 0;
    for (uint32_t i = 0; i < m->nx; i++)
        if (m->ss[i] >= 0 && m->nd[m->ss[i]].depth > d) d = m->nd[m->ss[i]].depth;
    return d;
}

/* Decodes on from m's state; text[0, n) is what m has accepted so far. */
static void decode(GrammarMatcher *m, int is_json, char *text, size_t n, size_t cap) {
    uint64_t mask[(N_VOCAB + 63) / 64];
    int allowed[N_VOCAB];
    for (int step = 0; step < 200; step++) {
        int cnt = grammar_matcher_mask(m, mask), na = 0;
        if (cnt < 0) break;   /* too ambiguous to follow: an error, not a crash */
        for (int t = 0; t < N_VOCAB; t++)
            if (bit(mask, t)) allowed[na++] = t;
        REQUIRE(cnt == na);
        REQUIRE(bit(mask, EOS) == grammar_matcher_complete(m));
        if (!na) { REQUIRE(max_depth(m) > GRAMMAR_MAX_DEPTH / 2); break; }
        for (int k = 0; k < 8; k++) {
            int t = (int)(rnd() % N_VOCAB);
            int c = grammar_matcher_check(m, &t, 1);
            REQUIRE(c < 0 || c == bit(mask, t));
        }
        int pick = allowed[rnd() % (uint32_t)na];
        if (step > 60) {
            static const int pref[] = {EOS, TAG0 + GRAMMAR_TAG_TOOL_CALL_END,
                                       TAG0 + GRAMMAR_TAG_ARG_VALUE_END, '"', ']', '}', ')'};
            for (int i = 0; i < 7; i++)
                if (bit(mask, pref[i])) { pick = pref[i]; break; }
        }
        int r = grammar_matcher_accept(m, pick);
        if (r < 0) break;
        REQUIRE(r == 1);
        if (pick == EOS) {
            REQUIRE(grammar_matcher_finished(m) && !grammar_matcher_can_continue(m));
            if (is_json) {
                char err[256];
                JsonDoc *d = json_parse(text, n, err, sizeof err);
                REQUIRE(d);
                json_free(d);
            }
            break;
        }
        if (n + lens[pick] > cap) break;
        memcpy(text + n, pieces[pick], lens[pick]);
        n += lens[pick];
    }
}

static const char *const fixed[] = {
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":3},\"b\":{"
    "\"type\":\"integer\","
    "\"minimum\":-5,\"maximum\":120}},\"required\":[\"b\"]}",
    "{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"null\"},{\"enum\":[\"x\",\"xy\",1.5]}]},"
    "\"maxItems\":3}",
    "{}",
};
static const char *const fixed_gbnf = "root ::= \"(\" ([a-z\xce\xb1-\xcf\x89]+ | root)* \")\"\n";

/* A JSON list of tools: grammar_tool_calls over the ones with a name. */
static Grammar *tools_grammar(const char *text, size_t len, int one, char *err, size_t el) {
    JsonDoc *d = json_parse(text, len, NULL, 0);
    const JsonValue *list = d ? json_root(d) : NULL;
    if (json_type(list) != JSON_ARRAY) { json_free(d); return NULL; }
    GrammarTool t[16];
    int n = 0;
    for (size_t i = 0; i < json_len(list) && n < 16; i++) {
        const JsonValue *fn = json_get(json_at(list, i), "function");
        size_t nl;
        const char *name = json_str(json_get(fn, "name"), &nl);
        if (name) t[n++] = (GrammarTool){name, nl, json_get(fn, "parameters"), "tool"};
    }
    Grammar *g = grammar_tool_calls(t, n, 1, one ? 1 : -1, NULL, err, el);
    json_free(d);
    return g;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char err[256];
    err[0] = 0;
    int mode = data[0] % 3;
    rs = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++) rs = (rs ^ data[i]) * 1099511628211ull;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    if (mode == 0 || mode == 1) {
        size_t lead = 0;
        while (lead < len && (text[lead] == ' ' || text[lead] == '\n')) lead++;
        int tools = mode == 0 && lead < len && text[lead] == '[';
        Grammar *g = tools       ? tools_grammar(text, len, data[0] % 2 == 0, err, sizeof err)
                     : mode == 0 ? grammar_from_schema_text(text, len, NULL, err, sizeof err)
                                 : grammar_from_gbnf(text, len, err, sizeof err);
        if (tools && !g && !err[0]) return 0;   /* not JSON */
        if (!g) {
            REQUIRE(err[0] && memchr(err, 0, sizeof err) && !strchr(err, '\n'));
            return 0;
        }
        GrammarMatcher *m = grammar_matcher_new(g, vocab);
        char out[4096];
        if (m) decode(m, mode == 0 && !tools, out, 0, sizeof out);
        grammar_matcher_free(m);
        grammar_free(g);
        return 0;
    }
    if (len < 1) return 0;
    int which = (unsigned char)text[0] % 4;
    Grammar *g = which < 3 ? grammar_from_schema_text(fixed[which], strlen(fixed[which]), NULL, err,
                                                      sizeof err)
                           : grammar_from_gbnf(fixed_gbnf, strlen(fixed_gbnf), err, sizeof err);
    REQUIRE(g);
    GrammarMatcher *m = grammar_matcher_new(g, vocab);
    REQUIRE(m);
    size_t chunk = 1 + data[0] / 3 % 7, n = 0;
    char out[8192];
    for (size_t i = 1; i < len && n + chunk <= 4096; i += chunk) {
        size_t k = len - i < chunk ? len - i : chunk;
        int r = grammar_matcher_accept_bytes(m, text + i, k);
        if (r < 0) break;
        if (r == 1) {
            REQUIRE(grammar_matcher_complete(m) || grammar_matcher_can_continue(m));
            memcpy(out + n, text + i, k);
            n += k;
        }
    }
    decode(m, which < 3, out, n, sizeof out);
    grammar_matcher_free(m);
    grammar_free(g);
    return 0;
}

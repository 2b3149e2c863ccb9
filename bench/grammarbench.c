/* grammarbench: what grammar.h's allowed-token mask costs per decode step on a vocabulary of the
   GLM-5.2 size (154,880 tokens).

     bench/grammarbench [REPS]      (default 3 repetitions of every scenario)

   The vocabulary is synthesized with a byte-level BPE's make-up: every single byte, the tiny
   fixture tokenizer's pieces (tests/fixtures/tiny_tokenizer, via tok.h), numbers 0-999, Latin word
   pieces with and without a leading space (most of the vocabulary), CJK characters and pairs,
   Cyrillic / Greek / accented words, emoji, whitespace and indentation runs, punctuation clusters
   (quotes, brackets, "\":", "\"},", ...), partial UTF-8 sequences, and 20 special tokens without
   bytes (the last one stands for eos, the first six for the tool-call tags).

   Each scenario is a grammar and a valid answer. The answer is cut into tokens by longest match
   (as a model's own tokens would be) and decoded step by step: mask, then accept the token. A
   "cold" pass uses a fresh Grammar (empty mask cache: every state is computed); a "warm" pass
   replays the same answer on the same Grammar (states seen before come from the cache). Printed
   per scenario: steps, mean / median / max mask time per step, and the mean as a share of a
   0.5 s decode step (the real model's fastest step on this machine class). Also the one-time costs
   (vocabulary trie and string profiles, grammar compile) and grammar_apply_mask on 154,880 logits.
   Output lines start with SCENARIO or ONCE; the last line "bench: grammar worst-cold-share=..." is
   for scripts. */
#define _GNU_SOURCE
#define JSON_IMPLEMENTATION
#include "json.h"
#define TOK_IMPLEMENTATION
#include "tok.h"
#define GRAMMAR_IMPLEMENTATION
#include "grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_VOCAB 154880
#define N_SPECIAL 20

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* ---- the synthetic vocabulary ---- */

static char **piece;
static size_t *plen;
static int n_tok;
static uint64_t *hset;     /* open addressing over token ids + 1 */
static size_t hcap = 1 << 19;
static uint64_t rs = 88172645463325252ull;

static uint32_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (uint32_t)rs; }

static uint64_t hbytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 1099511628211ull; }
    return h;
}

static int find(const char *s, size_t n) {
    for (size_t i = hbytes(s, n) & (hcap - 1);; i = (i + 1) & (hcap - 1)) {
        if (!hset[i]) return -1;
        int id = (int)hset[i] - 1;
        if (plen[id] == n && !memcmp(piece[id], s, n)) return id;
    }
}

static void add(const char *s, size_t n) {
    if (!n || n_tok >= N_VOCAB - N_SPECIAL || find(s, n) >= 0) return;
    size_t i = hbytes(s, n) & (hcap - 1);
    while (hset[i]) i = (i + 1) & (hcap - 1);
    piece[n_tok] = malloc(n);
    memcpy(piece[n_tok], s, n);
    plen[n_tok] = n;
    hset[i] = (uint64_t)++n_tok;
}

static int utf8(uint32_t cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 63));
        o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 63));
    o[2] = (char)(0x80 | (cp >> 6 & 63));
    o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

static void word(char *buf, size_t *n, int syllables) {
    static const char *cons[] = {"b",  "c",  "d",   "f",  "g",  "h", "j", "k",  "l",  "m",
                                 "n",  "p",  "r",   "s",  "t",  "v", "w", "th", "st", "ch",
                                 "tr", "pr", "str", "sh", "qu", "x", "z", "y",  "gr", "pl"};
    static const char *vow[] = {"a", "e", "i", "o", "u", "ea", "ou", "io", "ai", "ee", "y"};
    static const char *tail[] = {"",   "",   "",    "n",    "r",  "s",  "t",
                                 "ng", "ed", "ing", "tion", "ly", "er", "al"};
    for (int k = 0; k < syllables; k++) {
        const char *c = cons[rnd() % 30], *v = vow[rnd() % 11];
        memcpy(buf + *n, c, strlen(c)); *n += strlen(c);
        memcpy(buf + *n, v, strlen(v)); *n += strlen(v);
    }
    const char *t = tail[rnd() % 14];
    memcpy(buf + *n, t, strlen(t));
    *n += strlen(t);
}

static void build_vocab(void) {
    piece = calloc(N_VOCAB, sizeof *piece);
    plen = calloc(N_VOCAB, sizeof *plen);
    hset = calloc(hcap, sizeof *hset);
    char b[256];
    size_t n;
    for (int i = 0; i < 256; i++) { b[0] = (char)i; add(b, 1); }
    char err[256];
    Tokenizer *t = tok_load("tests/fixtures/tiny_tokenizer/tokenizer.json", err, sizeof err);
    if (t) {
        for (int id = 0; id < tok_vocab_size(t); id++) {
            const char *p = tok_piece(t, id, &n);
            if (p && !tok_is_added(t, id)) add(p, n);
        }
        tok_free(t);
    } else fprintf(stderr, "grammarbench: %s (continuing without the fixture's pieces)\n", err);
    for (int i = 0; i < 1000; i++) { n = (size_t)snprintf(b, sizeof b, "%d", i); add(b, n); }
    for (int i = 0; i < 100; i++) { n = (size_t)snprintf(b, sizeof b, " %d", i); add(b, n); }
    for (int k = 1; k <= 64; k++) {   /* indentation and whitespace runs */
        memset(b + 1, ' ', (size_t)k); b[0] = '\n'; add(b, (size_t)k + 1); add(b + 1, (size_t)k);
        memset(b + 1, '\t', (size_t)k); add(b, (size_t)k + 1);
        if (k <= 8) { memset(b, '\n', (size_t)k); add(b, (size_t)k); }
    }
    static const char punct[] = "{}[]()<>:;,.\"'=+-*/\\|&!?#@$%^~_` ";
    for (int i = 0; i < 9000; i++) {   /* punctuation clusters, many with quotes */
        int len = 2 + (int)(rnd() % 3);
        for (int k = 0; k < len; k++) b[k] = punct[rnd() % (sizeof punct - 1)];
        add(b, (size_t)len);
    }
    for (uint32_t cp = 0x4E00; cp <= 0x9FFF; cp++) {
        n = (size_t)utf8(cp, b);
        add(b, n);
    } /* CJK */
    for (int i = 0; i < 14000; i++) {
        n = (size_t)utf8(0x4E00 + rnd() % 0x5200, b);
        n += (size_t)utf8(0x4E00 + rnd() % 0x5200, b + n);
        add(b, n);
    }
    for (int i = 0; i < 600;
         i++) { /* partial UTF-8: a CJK lead + one continuation, lone continuations */
        n = (size_t)utf8(0x4E00 + rnd() % 0x5200, b);
        add(b, 2);
        add(b + 1, 2);
        add(b + 2, 1);
    }
    for (int i = 0; i < 1500; i++) {
        n = (size_t)utf8(0x1F300 + rnd() % 0x500, b);
        add(b, n);
    } /* emoji */
    for (int i = 0; i < 9000; i++) {   /* Cyrillic, Greek, accented Latin words */
        uint32_t base = (uint32_t[]){0x430, 0x3B1, 0xE0}[rnd() % 3];
        n = 0;
        if (rnd() & 1) b[n++] = ' ';
        int len = 2 + (int)(rnd() % 6);
        for (int k = 0; k < len; k++) n += (size_t)utf8(base + rnd() % 26, b + n);
        add(b, n);
    }
    while (n_tok < N_VOCAB - N_SPECIAL) {   /* Latin word pieces fill the rest */
        n = 0;
        uint32_t r = rnd() % 10;
        if (r < 5) b[n++] = ' ';
        size_t w0 = n;
        word(b, &n, 1 + (int)(rnd() % 3));
        if (r == 5 || r == 6) b[w0] = (char)(b[w0] - 32);
        if (r == 7) b[n++] = (char)".,\":;)("[rnd() % 7];
        add(b, n);
    }
    for (int i = 0; i < N_SPECIAL; i++) { piece[n_tok] = NULL; plen[n_tok++] = 0; }
}

/* ---- scenarios ---- */

static int tokenize(const char *text, int *out) {
    size_t n = strlen(text);
    int k = 0;
    for (size_t i = 0; i < n;) {
        size_t best = 0;
        int id = -1;
        for (size_t l = n - i < 48 ? n - i : 48; l >= 1; l--) {
            int t = find(text + i, l);
            if (t >= 0) { best = l; id = t; break; }
        }
        /* a tool-call tag, written in an answer as its marker byte (0xF8 + k) */
        if ((unsigned char)text[i] >= 0xF8) { id = n_tok - N_SPECIAL + (text[i] & 7); best = 1; }
        out[k++] = id;
        i += best;
    }
    return k;
}

/* kind "tools": a JSON list of OpenAI function tools, any number of calls */
static Grammar *tools_grammar(const char *text, char *err, size_t el) {
    JsonDoc *d = json_parse(text, strlen(text), err, el);
    if (!d) return NULL;
    GrammarTool t[8];
    int n = 0;
    for (size_t i = 0; i < json_len(json_root(d)) && n < 8; i++) {
        const JsonValue *fn = json_get(json_at(json_root(d), i), "function");
        size_t nl;
        const char *name = json_str(json_get(fn, "name"), &nl);
        t[n++] = (GrammarTool){name, nl, json_get(fn, "parameters"), "tools"};
    }
    Grammar *g = grammar_tool_calls(t, n, 1, -1, NULL, err, el);
    json_free(d);
    return g;
}

typedef struct { const char *name, *kind, *grammar, *answer; } Scenario;

static const Scenario scenarios[] = {
    {"tool_call", "schema",
     "{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\",\"maxLength\":64},"
     "\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]},\"days\":{\"type\":\"integer\",\"minimum\":"
     "1,\"maximum\":14},"
     "\"hours\":{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":23},"
     "\"maxItems\":24},"
     "\"notes\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]},"
     "\"filters\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/filter\"}}},"
     "\"required\":[\"location\",\"unit\",\"days\"],\"additionalProperties\":false,"
     "\"$defs\":{\"filter\":{\"type\":\"object\",\"properties\":{\"field\":{\"type\":\"string\"},"
     "\"op\":{\"enum\":[\"eq\",\"lt\",\"gt\"]},\"value\":{\"type\":\"number\"}},\"required\":["
     "\"field\",\"op\",\"value\"]}}}",
     "{\"location\": \"San Francisco, California, United States\", \"unit\": \"celsius\", "
     "\"days\": 7, "
     "\"hours\": [6, 9, 12, 15, 18, 21], \"notes\": \"Prefer the hourly forecast; the user "
     "mentioned a "
     "trip to the coast on the weekend and wants to know whether to bring a jacket.\", "
     "\"filters\": [{\"field\": \"precipitation\", \"op\": \"lt\", \"value\": 0.25}, "
     "{\"field\": \"wind_speed\", \"op\": \"gt\", \"value\": 12}]}"},
    {"json_object", "object", NULL,
     "{\n  \"title\": \"Quarterly report\",\n  \"year\": 2026,\n  \"sections\": [\n    {\"name\": "
     "\"Revenue\", "
     "\"values\": [1.5, 2.25, -3e2], \"ok\": true},\n    {\"name\": "
     "\"\xe4\xb8\xad\xe6\x96\x87\xe6\x91\x98\xe8\xa6\x81\", "
     "\"values\": [], \"ok\": null}\n  ],\n  \"summary\": \"Growth was strong in the second half, "
     "\\\"driven\\\" by "
     "new customers.\\nSee the appendix.\"\n}"},
    {"long_string_maxlen", "schema",
     "{\"type\":\"object\",\"properties\":{\"essay\":{\"type\":\"string\",\"minLength\":100,"
     "\"maxLength\":2000}},"
     "\"required\":[\"essay\"]}",
     "{\"essay\": \"The history of the printing press begins long before Gutenberg: woodblock "
     "printing in "
     "China and Korea, movable type of ceramic and then metal, and the slow spread of paper "
     "westwards along "
     "the trade routes all prepared the ground. What changed in Mainz in the middle of the "
     "fifteenth century "
     "was the combination of an adjustable type mould, an oil-based ink and a screw press adapted "
     "from wine "
     "making, which together made it cheap to print many identical copies. Within fifty years "
     "presses were "
     "running in more than two hundred European towns, and the price of books fell by an order of "
     "magnitude.\"}"},
    {"gbnf_free_text", "gbnf", "root ::= line{1,6}\nline ::= [^\\n]+ \"\\n\"\n",
     "The answer, in plain text: the grammar only limits lines.\nEach line may hold any character "
     "except "
     "a newline.\nA new state per line: one full walk of the trie each, then the cache.\n"},
    /* forced tool calls (grammar_tool_calls): string arguments are raw text, walked; \xF8.. are
       the tags <tool_call>, </tool_call>, <arg_key>, </arg_key>, <arg_value>, </arg_value> */
    {"forced_tool_call", "tools",
     "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{"
     "\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\"},"
     "\"unit\":{\"type\":\"string\",\"enum\":[\"celsius\",\"fahrenheit\"]},"
     "\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":14},"
     "\"hours\":{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":0,"
     "\"maximum\":23},\"maxItems\":24},\"notes\":{\"type\":\"string\"},"
     "\"filters\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/filter\"}}},"
     "\"required\":[\"location\",\"unit\",\"days\"],\"additionalProperties\":false,"
     "\"$defs\":{\"filter\":{\"type\":\"object\",\"properties\":{\"field\":{\"type\":"
     "\"string\"},\"op\":{\"enum\":[\"eq\",\"lt\",\"gt\"]},\"value\":{\"type\":"
     "\"number\"}},\"required\":[\"field\",\"op\",\"value\"]}}}}},"
     "{\"type\":\"function\",\"function\":{\"name\":\"search\",\"parameters\":{"
     "\"type\":\"object\",\"properties\":{\"query\":{\"type\":\"string\"}},"
     "\"required\":[\"query\"]}}}]",
     "\xF8get_weather\xFAlocation\xFB\xFCSan Francisco, California, United States\xFD"
     "\xFAunit\xFB\xFC" "celsius\xFD\xFA" "days\xFB\xFC" "7\xFD\xFAhours\xFB\xFC"
     "[6, 9, 12, 15, 18, 21]"
     "\xFD\xFAnotes\xFB\xFCPrefer the hourly forecast; the user mentioned a trip to the coast on "
     "the weekend and wants to know whether to bring a jacket.\xFD\xFA" "filters\xFB\xFC"
     "[{\"field\": \"precipitation\", \"op\": \"lt\", \"value\": 0.25}]\xFD\xF9"
     "\xF8search\xFAquery\xFB\xFCweather warnings for the Pacific coast this weekend\xFD\xF9"},
    /* the slow path: a counted repetition of a wide class makes every step a new state */
    {"gbnf_counted_text", "gbnf", "root ::= line{1,6}\nline ::= [^\\n]{1,200} \"\\n\"\n",
     "The answer, in plain text: the grammar only limits lines.\nEach line may hold any character "
     "except "
     "a newline, and at most 200 of them.\nThis is the worst case for the generic trie walk.\n"},
};

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 3;
    if (reps < 1) reps = 1;
    double t0 = now();
    build_vocab();
    double t_build = now() - t0;
    char err[256];
    int eos = N_VOCAB - 1;
    t0 = now();
    int tag[GRAMMAR_N_TAGS];
    for (int k = 0; k < GRAMMAR_N_TAGS; k++) tag[k] = n_tok - N_SPECIAL + k;
    GrammarVocab *v = grammar_vocab_new_tags(n_tok, (const char *const *)piece, plen, &eos, 1, tag,
                                             err, sizeof err);
    double t_vocab = now() - t0;
    if (!v) { fprintf(stderr, "grammarbench: %s\n", err); return 1; }
    size_t W = grammar_mask_words(v);
    uint64_t *mask = malloc(W * 8);
    float *logits = malloc(sizeof(float) * N_VOCAB);
    printf("ONCE vocabulary tokens=%d synthesize_s=%.3f grammar_vocab_new_s=%.3f trie_nodes=%u "
           "string_exit_tokens=%u\n",
           n_tok, t_build, t_vocab, v->trie.n_node, v->n_exit);
    for (int i = 0; i < N_VOCAB; i++) logits[i] = (float)(i % 7);
    t0 = now();
    for (int i = 0; i < 100; i++) grammar_apply_mask(logits, mask, N_VOCAB);
    printf("ONCE grammar_apply_mask_ms=%.4f (154,880 logits)\n", (now() - t0) * 1e3 / 100);
    double worst = 0;
    int *toks = malloc(sizeof(int) * 8192);
    double *times = malloc(sizeof(double) * 8192);
    for (size_t s = 0; s < sizeof scenarios / sizeof *scenarios; s++) {
        const Scenario *sc = &scenarios[s];
        int nt = tokenize(sc->answer, toks);
        for (int pass = 0; pass < 2; pass++) {   /* 0 cold, 1 warm */
            double sum_mean = 0, sum_med = 0, max_all = 0, compile = 0;
            int allowed_sum = 0;
            for (int r = 0; r < reps; r++) {
                static Grammar *g;
                if (pass == 0 || !g) {
                    grammar_free(g);
                    t0 = now();
                    if (!strcmp(sc->kind, "schema"))
                        g = grammar_from_schema_text(sc->grammar, strlen(sc->grammar), NULL, err,
                                                     sizeof err);
                    else if (!strcmp(sc->kind, "tools")) g = tools_grammar(sc->grammar, err,
                                                                          sizeof err);
                    else if (!strcmp(sc->kind, "gbnf"))
                        g = grammar_from_gbnf(sc->grammar, strlen(sc->grammar), err, sizeof err);
                    else g = grammar_json_object(NULL);
                    compile += now() - t0;
                    if (!g) { fprintf(stderr, "grammarbench: %s: %s\n", sc->name, err); return 1; }
                    if (pass == 1) {   /* fill the cache once */
                        GrammarMatcher *m = grammar_matcher_new(g, v);
                        for (int i = 0; i < nt; i++) {
                            grammar_matcher_mask(m, mask);
                            grammar_matcher_accept(m, toks[i]);
                        }
                        grammar_matcher_free(m);
                    }
                }
                GrammarMatcher *m = grammar_matcher_new(g, v);
                double sum = 0;
                for (int i = 0; i <= nt; i++) {
                    double a = now();
                    int c = grammar_matcher_mask(m, mask);
                    times[i] = now() - a;
                    sum += times[i];
                    allowed_sum += c;
                    int t = i < nt ? toks[i] : eos;
                    if (!(mask[t >> 6] >> (t & 63) & 1) || grammar_matcher_accept(m, t) != 1) {
                        fprintf(stderr, "grammarbench: %s: token %d of the answer refused\n",
                                sc->name, i);
                        return 1;
                    }
                }
                grammar_matcher_free(m);
                qsort(times, (size_t)nt + 1, sizeof *times, cmp_d);
                sum_mean += sum / (nt + 1);
                sum_med += times[nt / 2];
                if (times[nt] > max_all) max_all = times[nt];
                if (r == reps - 1 && pass == 1) { grammar_free(g); g = NULL; }
            }
            double mean = sum_mean / reps, share = mean / 0.5 * 100;
            if (pass == 0 && share > worst) worst = share;
            printf("SCENARIO %s %s steps=%d mean_ms=%.3f median_ms=%.3f max_ms=%.3f "
                   "share_of_0.5s=%.4f%% "
                   "avg_allowed=%d compile_ms=%.2f\n",
                   sc->name, pass ? "warm" : "cold", nt + 1, mean * 1e3, sum_med / reps * 1e3,
                   max_all * 1e3, share, allowed_sum / reps / (nt + 1),
                   pass == 0 ? compile / reps * 1e3 : 0.0);
        }
    }
    printf("bench: grammar worst-cold-share=%.4f%%\n", worst);
    grammar_vocab_free(v);
    free(mask);
    free(logits);
    free(toks);
    free(times);
    return 0;
}

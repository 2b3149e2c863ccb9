/* Unit tests for grammar.h: random generation under schemas checked by an independent validator
 * (no dead ends, whitespace bounded, masks equal to token-by-token checks), integer ranges
 * exhaustively, string escapes / UTF-8 / lengths, refusals naming the keyword, GBNF grammars,
 * end-of-sequence handling, speculative checks and clones.
 *
 * The synthetic vocabulary has every single byte as a token (as the model's byte-level BPE does),
 * plus multi-byte tokens that span JSON structure characters, escapes and partial UTF-8. */
#define JSON_IMPLEMENTATION
#include "json.h"
/* Few sets per walk: both the walk with transition tables and the one past them run here. */
#define GRAMMAR_WALK_SETS 12
#define GRAMMAR_IMPLEMENTATION
#include "grammar.h"
#define CHAT_IMPLEMENTATION
#include "chat.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static void check(const char *name, int ok, const char *why) {
    if (ok) printf("PASS %s\n", name);
    else { printf("FAIL %s: %s\n", name, why); failures++; }
}

/* ---- the vocabulary ---- */

static const char *const multi[] = {
    "{\"",
    "\":",
    "\",",
    "\"}",
    "},",
    "}]",
    "]}",
    "\":\"",
    "\", \"",
    " \"",
    "\n  ",
    "\n    ",
    "  ",
    "\\\"",
    "\\\\",
    "\\n",
    "\\u00",
    "\\u",
    "e9",
    "\\ud83d",
    "\\ude00",
    "\\udc00",
    "\"\\",
    "\\\"}",
    "12",
    "345",
    "-1",
    "0.",
    "e+",
    "1,",
    "9]",
    "-0",
    "00",
    "007",
    "100",
    "999",
    "-20",
    "35",
    "1e5",
    "name",
    "age",
    "tags",
    "true",
    "fals",
    "false",
    "null",
    "nul",
    " true",
    "kind",
    "circle",
    "color",
    "red",
    "kids",
    "\"v\":",
    "\"kids\":[",
    "\":[",
    "\":{\"",
    "],\"",
    "\"t\":\"a\"",
    "\"x\":",
    "\"y\":\"",
    "a\"",
    "\"b",
    "c d",
    "\"c d\"",
    "\"a\",\"",
    "[\"",
    "[[",
    "]]",
    "[]",
    "{}",
    ",\"",
    ", ",
    ",\n",
    "\xe4\xb8",
    "\xad",
    "\xe4\xb8\xad",
    "\xe6\x96\x87",
    "\xe4\xb8\xad\xe6\x96\x87",
    "\xc3\xa9",
    "\xc3",
    "\xa9\"",
    "\xf0\x9f",
    "\x98\x80",
    "\xf0\x9f\x98\x80",
    "\x9f\x98\x80\"",
    "caf\xc3\xa9",
    "\xed\xa0\x80",
    "\xc0\x80",
    "abc",
    "hello",
    " world",
    "x\"}",
    "\"}]",
    "\"]}",
    "\"},{\"",
    "null,",
    "true]",
    "1}",
    "42",
    "-7",
    "3.14",
    "E-2",
    "\t",
    "\r\n",
    "\": ",
    "\" :",
    "\"r\":",
    "\"r\": 1",
    "hel",
    "lo\"",
    "\"\"",
    "\"a",
    "b\"",
    "é",
    "\"é\"",
    "ab\\",
    "\\t\"",
    "x\\u",
    "0041",
    "d83d",
    "de00",
    "\\/",
};

static const char **pieces;
static size_t *plens;
static int n_vocab, eos_id;

static void make_vocab(void) {
    int nm = (int)(sizeof multi / sizeof *multi);
    n_vocab = 256 + nm + 2;
    pieces = calloc((size_t)n_vocab, sizeof *pieces);
    plens = calloc((size_t)n_vocab, sizeof *plens);
    static char bytes[256];
    for (int i = 0; i < 256; i++) { bytes[i] = (char)i; pieces[i] = &bytes[i]; plens[i] = 1; }
    for (int i = 0; i < nm; i++) { pieces[256 + i] = multi[i]; plens[256 + i] = strlen(multi[i]); }
    pieces[256 + nm] = NULL;                 /* a special token given without bytes */
    plens[256 + nm] = 0;
    eos_id = 256 + nm + 1;
    pieces[eos_id] = "<|endoftext|>";        /* eos has text, but is never matched as bytes */
    plens[eos_id] = strlen(pieces[eos_id]);
}

/* ---- an independent validator ---- */

static int json_equal(const JsonValue *a, const JsonValue *b) {
    if (json_type(a) != json_type(b)) return 0;
    size_t na, nb;
    switch (json_type(a)) {
    case JSON_NULL: return 1;
    case JSON_BOOL: return json_bool(a) == json_bool(b);
    case JSON_NUMBER: return json_num(a) == json_num(b);
    case JSON_STRING: {
        const char *x = json_str(a, &na), *y = json_str(b, &nb);
        return na == nb && !memcmp(x, y, na);
    }
    case JSON_ARRAY:
        if (json_len(a) != json_len(b)) return 0;
        for (size_t i = 0; i < json_len(a); i++)
            if (!json_equal(json_at(a, i), json_at(b, i))) return 0;
        return 1;
    case JSON_OBJECT:
        if (json_len(a) != json_len(b)) return 0;
        for (size_t i = 0; i < json_len(a); i++) {
            const char *k = json_key_at(a, i, &na);
            const JsonValue *o = json_getn(b, k, na);
            if (!o || !json_equal(json_value_at(a, i), o)) return 0;
        }
        return 1;
    }
    return 0;
}

static const JsonValue *resolve(const JsonValue *root, const char *ref) {
    if (ref[0] != '#') return NULL;
    const JsonValue *v = root;
    const char *p = ref + 1;
    while (*p == '/') {
        p++;
        size_t n = strcspn(p, "/");
        v = json_getn(v, p, n);
        p += n;
    }
    return v;
}

static size_t code_points(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

static int type_ok(const JsonValue *v, const char *t) {
    int64_t i;
    switch (json_type(v)) {
    case JSON_NULL: return !strcmp(t, "null");
    case JSON_BOOL: return !strcmp(t, "boolean");
    case JSON_OBJECT: return !strcmp(t, "object");
    case JSON_ARRAY: return !strcmp(t, "array");
    case JSON_STRING: return !strcmp(t, "string");
    case JSON_NUMBER: return !strcmp(t, "number") || (!strcmp(t, "integer") && json_is_int(v, &i));
    }
    return 0;
}

static int validate(const JsonValue *v, const JsonValue *s, const JsonValue *root) {
    if (json_type(s) == JSON_BOOL) return json_bool(s);
    const JsonValue *k;
    if ((k = json_get(s, "$ref"))) return validate(v, resolve(root, json_str(k, NULL)), root);
    if ((k = json_get(s, "enum"))) {
        int any = 0;
        for (size_t i = 0; i < json_len(k); i++) any |= json_equal(v, json_at(k, i));
        if (!any) return 0;
    }
    if ((k = json_get(s, "const")) && !json_equal(v, k)) return 0;
    if ((k = json_get(s, "type"))) {
        int any = 0;
        if (json_type(k) == JSON_STRING) any = type_ok(v, json_str(k, NULL));
        for (size_t i = 0; i < json_len(k); i++) any |= type_ok(v, json_str(json_at(k, i), NULL));
        if (!any) return 0;
    }
    if ((k = json_get(s, "anyOf"))) {
        int any = 0;
        for (size_t i = 0; i < json_len(k); i++) any |= validate(v, json_at(k, i), root);
        if (!any) return 0;
    }
    if ((k = json_get(s, "oneOf"))) {
        int n = 0;
        for (size_t i = 0; i < json_len(k); i++) n += validate(v, json_at(k, i), root);
        if (n != 1) return 0;
    }
    if ((k = json_get(s, "allOf")))
        for (size_t i = 0; i < json_len(k); i++)
            if (!validate(v, json_at(k, i), root)) return 0;
    if (json_type(v) == JSON_STRING) {
        size_t n;
        const char *str = json_str(v, &n);
        size_t cp = code_points(str, n);
        if ((k = json_get(s, "minLength")) && cp < (size_t)json_num(k)) return 0;
        if ((k = json_get(s, "maxLength")) && cp > (size_t)json_num(k)) return 0;
    }
    if (json_type(v) == JSON_NUMBER) {
        double d = json_num(v);
        if ((k = json_get(s, "minimum")) && d < json_num(k)) return 0;
        if ((k = json_get(s, "maximum")) && d > json_num(k)) return 0;
        if ((k = json_get(s, "exclusiveMinimum")) && d <= json_num(k)) return 0;
        if ((k = json_get(s, "exclusiveMaximum")) && d >= json_num(k)) return 0;
    }
    if (json_type(v) == JSON_ARRAY) {
        if ((k = json_get(s, "minItems")) && json_len(v) < (size_t)json_num(k)) return 0;
        if ((k = json_get(s, "maxItems")) && json_len(v) > (size_t)json_num(k)) return 0;
        if ((k = json_get(s, "items")))
            for (size_t i = 0; i < json_len(v); i++)
                if (!validate(json_at(v, i), k, root)) return 0;
    }
    if (json_type(v) == JSON_OBJECT) {
        const JsonValue *props = json_get(s, "properties"),
                        *addl = json_get(s, "additionalProperties");
        k = json_get(s, "required");
        for (size_t i = 0; i < json_len(k); i++)
            if (!json_get(v, json_str(json_at(k, i), NULL))) return 0;
        for (size_t i = 0; i < json_len(v); i++) {
            size_t n;
            const char *key = json_key_at(v, i, &n);
            const JsonValue *ps = json_getn(props, key, n);
            if (ps) { if (!validate(json_value_at(v, i), ps, root)) return 0; }
            else if (addl && !validate(json_value_at(v, i), addl, root)) return 0;
        }
    }
    return 1;
}

/* Longest run of whitespace outside strings. */
static int longest_ws(const char *t, size_t n) {
    int in_str = 0, run = 0, best = 0;
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
            continue;
        }
        if (c == '"') in_str = 1;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') { if (++run > best) best = run; }
        else run = 0;
    }
    return best;
}

/* ---- random generation ---- */

static uint64_t rng_state;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

static int bit(const uint64_t *m, int t) { return (int)(m[t >> 6] >> (t & 63) & 1); }

/* Generates one answer: uniform among the allowed tokens, then (after 120 steps) preferring eos and
   the tokens that close things, until eos. Checks at every step that some token is allowed and
   that the mask equals token-by-token checks (all tokens when full, else 24 random ones).
   Returns the text (malloc'ed) or NULL with why. */
static char *generate(Grammar *g, GrammarVocab *v, uint64_t seed, int full, size_t *len, char *why,
                      size_t wl) {
    GrammarMatcher *m = grammar_matcher_new(g, v);
    size_t W = grammar_mask_words(v);
    uint64_t *mask = malloc(W * 8);
    int *allowed = malloc((size_t)n_vocab * sizeof *allowed);
    char *text = malloc(1 << 16);
    size_t n = 0;
    rng_state = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int step = 0;; step++) {
        if (step > 3000) { snprintf(why, wl, "no eos after 3000 steps: %.80s", text); goto fail; }
        int cnt = grammar_matcher_mask(m, mask), na = 0;
        for (int t = 0; t < n_vocab; t++)
            if (bit(mask, t)) allowed[na++] = t;
        if (cnt != na) { snprintf(why, wl, "mask count %d, bits %d", cnt, na); goto fail; }
        if (!na) { snprintf(why, wl, "dead end after \"%.*s\"", (int)n, text); goto fail; }
        if (grammar_matcher_can_continue(m)) {
            int non_eos = 0;
            for (int i = 0; i < na; i++) non_eos |= allowed[i] != eos_id;
            if (!non_eos) {
                snprintf(why, wl, "can continue but only eos allowed after \"%.*s\"", (int)n, text);
                goto fail;
            }
        }
        if (bit(mask, eos_id) != grammar_matcher_complete(m)) {
            snprintf(why, wl, "eos bit != complete");
            goto fail;
        }
        for (int k = 0; k < (full ? n_vocab : 24); k++) {
            int t = full ? k : (int)(rnd() % (uint32_t)n_vocab);
            int c = grammar_matcher_check(m, &t, 1);
            if (c != bit(mask, t)) {
                snprintf(why, wl, "token %d \"%.*s\": mask %d, check %d after \"%.*s\"", t,
                         (int)plens[t], pieces[t] ? pieces[t] : "", bit(mask, t), c, (int)n, text);
                goto fail;
            }
        }
        int pick = allowed[rnd() % (uint32_t)na];
        if (step > 120) {
            static const int pref[] = {-1, '"', ']', '}'};
            for (int i = 0; i < 4; i++) {
                int t = pref[i] < 0 ? eos_id : pref[i];
                if (bit(mask, t)) { pick = t; break; }
            }
        }
        int r = grammar_matcher_accept(m, pick);
        if (r != 1) { snprintf(why, wl, "allowed token %d refused (%d)", pick, r); goto fail; }
        if (pick == eos_id) break;
        if (n + plens[pick] >= (1 << 16) - 1) { snprintf(why, wl, "answer too long"); goto fail; }
        memcpy(text + n, pieces[pick], plens[pick]);
        n += plens[pick];
        text[n] = 0;
    }
    if (!grammar_matcher_finished(m) || grammar_matcher_can_continue(m)) {
        snprintf(why, wl, "not finished after eos");
        goto fail;
    }
    grammar_matcher_free(m);
    free(mask);
    free(allowed);
    *len = n;
    return text;
fail:
    grammar_matcher_free(m);
    free(mask);
    free(allowed);
    free(text);
    return NULL;
}

static const char *const schemas[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":130},\"tags\":{\"type\":\"array\","
    "\"items\":{\"type\":\"string\",\"enum\":[\"a\",\"b\",\"c "
    "d\"]},\"minItems\":1,\"maxItems\":3}},"
    "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
    "{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":"
    "-20,"
    "\"maximum\":35},\"maxItems\":4},\"minItems\":2,\"maxItems\":3}",
    "{\"anyOf\":[{\"type\":\"string\",\"minLength\":2,\"maxLength\":4},{\"type\":\"integer\","
    "\"minimum\":100,"
    "\"maximum\":999},{\"type\":\"null\"}]}",
    "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\","
    "\"minimum\":-5,"
    "\"maximum\":5},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/"
    "node\"},\"maxItems\":2}},"
    "\"required\":[\"v\"]}},\"$ref\":\"#/$defs/node\"}",
    "{\"type\":[\"string\",\"null\",\"boolean\"],\"maxLength\":3}",
    "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"circle\"},\"r\":{\"type\":"
    "\"number\"},"
    "\"color\":{\"enum\":[\"red\",1,null,{\"x\":[1,2]},\"caf\xc3\xa9\"]}},\"required\":[\"kind\","
    "\"r\"]}",
    "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"t\":{\"const\":\"a\"},\"x\":{\"type\":"
    "\"integer\"}},"
    "\"required\":[\"t\",\"x\"]},{\"type\":\"object\",\"properties\":{\"t\":{\"const\":\"b\"},"
    "\"y\":{\"type\":\"string\",\"minLength\":1}},\"required\":[\"t\",\"y\"]}]}",
    "{}",
    "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":"
    "3}}",
    "{\"type\":\"string\",\"minLength\":3,\"maxLength\":5}",
    "{\"type\":\"integer\",\"minimum\":-9223372036854775808,\"maximum\":9223372036854775807}",
    "{\"type\":\"object\",\"required\":[\"a\",\"b\"]}",
    "{\"type\":\"array\",\"maxItems\":0}",
    "{\"type\":\"integer\",\"exclusiveMinimum\":-3,\"exclusiveMaximum\":3}",
    "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":1},\"minItems\":3}",
    "{\"definitions\":{\"a\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":2}},\"type\":"
    "\"object\","
    "\"properties\":{\"p\":{\"$ref\":\"#/definitions/a\"},\"q\":{\"type\":\"number\"},"
    "\"r\":{\"type\":\"boolean\"}},\"required\":[\"r\"],\"title\":\"t\",\"description\":\"d\"}",
    "{\"type\":\"string\",\"minLength\":6}",
};

static void test_generation(void) {
    char why[512];
    int ns = (int)(sizeof schemas / sizeof *schemas);
    const char *eos_pieces[1];
    (void)eos_pieces;
    int eos[1] = {eos_id};
    GrammarVocab *v = grammar_vocab_new(n_vocab, pieces, plens, eos, 1, why, sizeof why);
    check("vocab_new", v != NULL, why);
    if (!v) return;
    int ws_opts[2] = {-1, 0};
    for (int si = 0; si < ns + 1; si++) {
        for (int wi = 0; wi < 2; wi++) {
            GrammarOptions opt = {ws_opts[wi]};
            JsonDoc *sd = NULL;
            Grammar *g;
            char name[96];
            snprintf(name, sizeof name, "generate_schema_%d_ws%d", si, wi ? 0 : 20);
            if (si < ns) {
                sd = json_parse(schemas[si], strlen(schemas[si]), why, sizeof why);
                if (!sd) { check(name, 0, why); continue; }
                g = grammar_from_schema(json_root(sd), &opt, why, sizeof why);
            } else {
                g = grammar_json_object(&opt);
                snprintf(why, sizeof why, "json_object grammar");
            }
            if (!g) { check(name, 0, why); json_free(sd); continue; }
            int ok = 1;
            for (uint64_t seed = 0; seed < 20 && ok; seed++) {
                size_t n;
                char *t = generate(g, v, seed + 1000 * (uint64_t)si, seed < 3, &n, why, sizeof why);
                if (!t) { ok = 0; break; }
                if (getenv("GRAMMAR_TEST_SHOW"))
                    printf("  %s seed %llu: %.*s\n", name, (unsigned long long)seed, (int)n, t);
                char jerr[256];
                JsonDoc *d = json_parse(t, n, jerr, sizeof jerr);
                if (!d) {
                    snprintf(why, sizeof why, "seed %llu: \"%.200s\" does not parse: %s",
                             (unsigned long long)seed, t, jerr);
                    ok = 0;
                } else if (si < ns && !validate(json_root(d), json_root(sd), json_root(sd))) {
                    snprintf(why, sizeof why, "seed %llu: \"%.300s\" does not validate",
                             (unsigned long long)seed, t);
                    ok = 0;
                } else if (si == ns && json_type(json_root(d)) != JSON_OBJECT) {
                    snprintf(why, sizeof why, "json_object gave \"%.200s\"", t);
                    ok = 0;
                } else if (longest_ws(t, n) > (wi ? 0 : 20)) {
                    snprintf(why, sizeof why, "seed %llu: whitespace run of %d in \"%.200s\"",
                             (unsigned long long)seed, longest_ws(t, n), t);
                    ok = 0;
                } else if (n && (t[0] == ' ' || t[n - 1] == ' ' || t[n - 1] == '\n')) {
                    snprintf(why, sizeof why, "whitespace around the value: \"%.200s\"", t);
                    ok = 0;
                }
                json_free(d);
                free(t);
            }
            check(name, ok, why);
            grammar_free(g);
            json_free(sd);
        }
    }
    grammar_vocab_free(v);
}

/* ---- exact checks on bytes ---- */

static Grammar *schema_grammar(const char *text, int ws_max, char *err, size_t el) {
    GrammarOptions opt = {ws_max};
    return grammar_from_schema_text(text, strlen(text), &opt, err, el);
}

static GrammarVocab *byte_vocab(void) {
    char err[128];
    int eos[1] = {eos_id};
    return grammar_vocab_new(n_vocab, pieces, plens, eos, 1, err, sizeof err);
}

/* 1 iff s is a complete answer of g. */
static int accepts(Grammar *g, GrammarVocab *v, const char *s, size_t n) {
    GrammarMatcher *m = grammar_matcher_new(g, v);
    int ok = (n == 0 || grammar_matcher_accept_bytes(m, s, n) == 1) && grammar_matcher_complete(m);
    grammar_matcher_free(m);
    return ok;
}

static int accepts_str(Grammar *g, GrammarVocab *v, const char *s) {
    return accepts(g, v, s, strlen(s));
}

static void test_integer_ranges(void) {
    GrammarVocab *v = byte_vocab();
    const int64_t ranges[][2] = {{-20, 35},      {5, 12},  {0, 0},   {-1, -1},    {-100, -7},
                                 {7, 1000},      {0, 9},   {10, 99}, {-999, 999}, {123, 4567},
                                 {-5000, -4990}, {19, 21}, {99, 101}};
    char why[256] = "";
    int ok = 1;
    for (size_t r = 0; r < sizeof ranges / sizeof *ranges && ok; r++) {
        char s[160], err[256];
        snprintf(s, sizeof s, "{\"type\":\"integer\",\"minimum\":%lld,\"maximum\":%lld}",
                 (long long)ranges[r][0], (long long)ranges[r][1]);
        Grammar *g = schema_grammar(s, 0, err, sizeof err);
        if (!g) { snprintf(why, sizeof why, "%s", err); ok = 0; break; }
        for (int64_t x = ranges[r][0] - 60; x <= ranges[r][1] + 60 && ok; x++) {
            char t[32];
            snprintf(t, sizeof t, "%lld", (long long)x);
            int in = x >= ranges[r][0] && x <= ranges[r][1];
            if (accepts_str(g, v, t) != in) {
                snprintf(why, sizeof why, "%s: %s %s", s, t, in ? "refused" : "accepted");
                ok = 0;
            }
        }
        const char *never[] = {"-0", "007", "01", "00", "+1", "1.0", "1e1", " 1", "--1", ""};
        for (size_t i = 0; i < sizeof never / sizeof *never && ok; i++)
            if (accepts_str(g, v, never[i])) {
                snprintf(why, sizeof why, "%s: accepted \"%s\"", s, never[i]);
                ok = 0;
            }
        grammar_free(g);
    }
    check("integer_ranges_exact", ok, why);

    /* random wide ranges: the bounds, one past them, and random values inside and outside */
    ok = 1;
    rng_state = 7;
    for (int r = 0; r < 60 && ok; r++) {
        int64_t a = (int64_t)((uint64_t)rnd() << 32 | rnd()) >> (rnd() % 63),
                b2 = (int64_t)((uint64_t)rnd() << 32 | rnd()) >> (rnd() % 63);
        if (r == 0) { a = INT64_MIN; b2 = INT64_MAX; }
        if (r == 1) { a = INT64_MIN; b2 = INT64_MIN + 3; }
        if (r == 2) { a = INT64_MAX - 3; b2 = INT64_MAX; }
        if (a > b2) { int64_t t = a; a = b2; b2 = t; }
        char s[160], err[256];
        snprintf(s, sizeof s, "{\"type\":\"integer\",\"minimum\":%lld,\"maximum\":%lld}",
                 (long long)a, (long long)b2);
        Grammar *g = schema_grammar(s, 0, err, sizeof err);
        if (!g) { snprintf(why, sizeof why, "%s", err); ok = 0; break; }
        int64_t up = (int64_t)(rnd() % 1000), down = (int64_t)(rnd() % 1000), p3, p4;
        if (__builtin_add_overflow(a, up, &p3)) p3 = a;
        if (__builtin_sub_overflow(b2, down, &p4)) p4 = b2;
        int64_t probes[8] = {a, b2, a / 2 + b2 / 2, p3, p4, 0, 1, -1};
        for (int i = 0; i < 8 && ok; i++) {
            char t[32];
            snprintf(t, sizeof t, "%lld", (long long)probes[i]);
            int in = probes[i] >= a && probes[i] <= b2;
            if (accepts_str(g, v, t) != in) {
                snprintf(why, sizeof why, "%s: %s %s", s, t, in ? "refused" : "accepted");
                ok = 0;
            }
        }
        char t[32];
        if (ok && a > INT64_MIN) {
            snprintf(t, sizeof t, "%lld", (long long)(a - 1));
            if (accepts_str(g, v, t)) {
                snprintf(why, sizeof why, "%s: accepted %s", s, t);
                ok = 0;
            }
        }
        if (ok && b2 < INT64_MAX) {
            snprintf(t, sizeof t, "%lld", (long long)(b2 + 1));
            if (accepts_str(g, v, t)) {
                snprintf(why, sizeof why, "%s: accepted %s", s, t);
                ok = 0;
            }
        }
        if (ok && accepts_str(g, v, "99999999999999999999")) {
            snprintf(why, sizeof why, "%s: accepted 20 nines", s);
            ok = 0;
        }
        grammar_free(g);
    }
    check("integer_ranges_wide", ok, why);
    char err[256];
    Grammar *g = schema_grammar("{\"type\":\"integer\"}", 0, err, sizeof err);
    check("integer_default_16_digits",
          g && accepts_str(g, v, "9999999999999999") && accepts_str(g, v, "-9999999999999999") &&
              !accepts_str(g, v, "10000000000000000"),
          err);
    grammar_free(g);
    g = schema_grammar("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", 0, err, sizeof err);
    check("integer_empty_range_refused", !g && strstr(err, "minimum"), err);
    grammar_free(g);
    grammar_vocab_free(v);
}

static void test_strings(void) {
    GrammarVocab *v = byte_vocab();
    char err[256];
    Grammar *g = schema_grammar("{\"type\":\"string\"}", 0, err, sizeof err);
    struct { const char *s; int ok;
    } cases[] = {
        {"\"\"", 1},
        {"\"abc\"", 1},
        {"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", 1},
        {"\"\\u00e9\\u0000\"", 1},
        {"\"\\ud83d\\ude00\"", 1},
        {"\"\\uD83D\\uDE00\"", 1},
        {"\"\\udc00\"", 0},
        {"\"\\ud83d\"", 0},
        {"\"\\ud83dx\"", 0},
        {"\"\\ud83d\\u0041\"", 0},
        {"\"\\x\"", 0},
        {"\"\\u12g4\"", 0},
        {"\"a\nb\"", 0},
        {"\"\t\"", 0},
        {"\"\xc3\xa9\"", 1},
        {"\"\xe4\xb8\xad\"", 1},
        {"\"\xf0\x9f\x98\x80\"", 1},
        {"\"\xc0\x80\"", 0},
        {"\"\xed\xa0\x80\"", 0},
        {"\"\xf5\x80\x80\x80\"", 0},
        {"\"\xe4\xb8\"", 0},
        {"\"\x80\"", 0},
        {"\"\x7f\"", 1},
        {"\"a\"b", 0},
        {"abc", 0},
    };
    char why[256] = "";
    int ok = g != NULL;
    for (size_t i = 0; ok && i < sizeof cases / sizeof *cases; i++)
        if (accepts_str(g, v, cases[i].s) != cases[i].ok) {
            snprintf(why, sizeof why, "%s %s", cases[i].s, cases[i].ok ? "refused" : "accepted");
            ok = 0;
        }
    check("string_escapes_and_utf8", ok, g ? why : err);
    grammar_free(g);

    g = schema_grammar("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", 0, err, sizeof err);
    struct { const char *s; int ok;
    } len_cases[] = {
        {"\"a\"", 0},
        {"\"ab\"", 1},
        {"\"abc\"", 1},
        {"\"abcd\"", 0},
        {"\"\xc3\xa9\xc3\xa9\"", 1},
        {"\"\xe4\xb8\xad\xe6\x96\x87\xe4\xb8\xad\"", 1},
        {"\"\xe4\xb8\xad\xe6\x96\x87\xe4\xb8\xad\xe4\xb8\xad\"", 0},
        {"\"\\ud83d\\ude00\\n\"", 1},
        {"\"\\ud83d\\ude00\"", 0},
        {"\"\\n\\t\\\"\"", 1},
        {"\"\\n\\t\\\"x\"", 0},
    };
    ok = g != NULL;
    for (size_t i = 0; ok && i < sizeof len_cases / sizeof *len_cases; i++)
        if (accepts_str(g, v, len_cases[i].s) != len_cases[i].ok) {
            snprintf(why, sizeof why, "%s %s", len_cases[i].s,
                     len_cases[i].ok ? "refused" : "accepted");
            ok = 0;
        }
    check("string_length_in_code_points", ok, g ? why : err);

    /* at the length limit, a partial UTF-8 lead byte is refused (it could never finish) */
    GrammarMatcher *m = grammar_matcher_new(g, v);
    uint64_t *mask = malloc(grammar_mask_words(v) * 8);
    grammar_matcher_accept_bytes(m, "\"ab", 3);
    grammar_matcher_mask(m, mask);
    int tok_ed = -1, tok_part = -1, tok_close = -1;
    for (int t = 256; t < n_vocab; t++) {
        if (plens[t] == 3 && !memcmp(pieces[t], "\xe4\xb8\xad", 3)) tok_ed = t;
        if (plens[t] == 2 && !memcmp(pieces[t], "\xe4\xb8", 2)) tok_part = t;
        if (plens[t] == 2 && !memcmp(pieces[t], "\"}", 2)) tok_close = t;
    }
    check("string_partial_utf8_token_allowed",
          bit(mask, tok_part) && bit(mask, tok_ed) && bit(mask, '"') && !bit(mask, tok_close),
          "mask at \"ab with maxLength 3");
    grammar_matcher_accept_bytes(m, "c", 1);
    grammar_matcher_mask(m, mask);
    check("string_at_max_only_quote",
          bit(mask, '"') && !bit(mask, 'd') && !bit(mask, 0xe4) && !bit(mask, '\\') &&
              !bit(mask, tok_part),
          "mask at \"abc with maxLength 3");
    grammar_matcher_free(m);
    m = grammar_matcher_new(g, v);
    grammar_matcher_accept(m, '"');
    grammar_matcher_accept(m, tok_part);
    grammar_matcher_mask(m, mask);
    int only_cont = 1;
    for (int t = 0; t < n_vocab; t++)
        if (bit(mask, t) && !(plens[t] >= 1 && (unsigned char)pieces[t][0] >= 0x80 &&
                              (unsigned char)pieces[t][0] <= 0xBF))
            only_cont = 0;
    check("string_after_partial_utf8_only_continuations", only_cont && bit(mask, 0xad),
          "mask after \"\\xe4\\xb8");
    grammar_matcher_free(m);
    free(mask);
    grammar_free(g);
    grammar_vocab_free(v);
}

static void test_objects_and_ws(void) {
    GrammarVocab *v = byte_vocab();
    char err[256];
    Grammar *g = schema_grammar("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                                "\"b\":{\"type\":\"boolean\"},"
                                "\"c\":{\"type\":\"null\"}},\"required\":[\"b\"]}",
                                4, err, sizeof err);
    int ok = g && accepts_str(g, v, "{\"b\":true}") &&
             accepts_str(g, v, "{\"a\":1,\"b\":false,\"c\":null}") &&
             accepts_str(g, v, "{ \"a\" : 1 ,\n\"b\":true }") && !accepts_str(g, v, "{}") &&
             !accepts_str(g, v, "{\"b\":true,\"a\":1}") && !accepts_str(g, v, "{\"a\":1}") &&
             !accepts_str(g, v, "{\"b\":true,}") && !accepts_str(g, v, "{\"b\":true,\"d\":1}") &&
             !accepts_str(g, v, " {\"b\":true}") && !accepts_str(g, v, "{\"b\":true} ");
    check("object_fixed_order_required_optional", ok, g ? "accept/refuse mismatch" : err);
    check("whitespace_bounded",
          g && accepts_str(g, v, "{    \"b\":true}") && !accepts_str(g, v, "{     \"b\":true}"),
          "4 spaces allowed, 5 refused");
    grammar_free(g);
    g = grammar_json_object(NULL);
    check("json_object_mode",
          g && accepts_str(g, v, "{\"x\":[1,{\"y\":null}],\"z\":\"\"}") &&
              accepts_str(g, v, "{}") && !accepts_str(g, v, "[1]") && !accepts_str(g, v, "\"s\"") &&
              !accepts_str(g, v, "{\"x\":01}"),
          "json_object");
    grammar_free(g);
    /* a map, and all-optional properties (the empty object allowed) */
    g = schema_grammar("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\","
                       "\"minimum\":0,\"maximum\":9}}",
                       0, err, sizeof err);
    check("object_map",
          g && accepts_str(g, v, "{\"k\":1,\"\xc3\xa9\":9}") && accepts_str(g, v, "{}") &&
              !accepts_str(g, v, "{\"k\":10}"),
          err);
    grammar_free(g);
    g = schema_grammar("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"}}}", 0, err,
                       sizeof err);
    check("object_all_optional", g && accepts_str(g, v, "{}") && accepts_str(g, v, "{\"a\":null}"),
          err);
    grammar_free(g);
    g = schema_grammar("{\"type\":\"array\",\"items\":{\"enum\":[\"x\",\"xy\",\"xyz\",2]},"
                       "\"minItems\":2,\"maxItems\":3}",
                       0, err, sizeof err);
    check("array_counts_and_enum",
          g && accepts_str(g, v, "[\"x\",2]") && accepts_str(g, v, "[\"xy\",\"xyz\",\"x\"]") &&
              !accepts_str(g, v, "[\"x\"]") && !accepts_str(g, v, "[2,2,2,2]") &&
              !accepts_str(g, v, "[\"xyzz\",2]") && !accepts_str(g, v, "[\"\",2]"),
          err);
    grammar_free(g);
    grammar_vocab_free(v);
}

static void test_refusals(void) {
    struct { const char *schema, *needle;
    } cases[] = {
        {"{\"type\":\"string\",\"pattern\":\"^a\"}", "'pattern'"},
        {"{\"type\":\"string\",\"format\":\"date-time\"}", "'format'"},
        {"{\"type\":\"object\",\"minProperties\":1}", "'minProperties'"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", "uniqueItems"},
        {"{\"not\":{\"type\":\"null\"}}", "'not'"},
        {"{\"if\":{},\"then\":{}}", "'if'"},
        {"{\"type\":\"array\",\"prefixItems\":[{}]}", "'prefixItems'"},
        {"{\"type\":\"number\",\"multipleOf\":2}", "'multipleOf'"},
        {"{\"type\":\"object\",\"patternProperties\":{}}", "'patternProperties'"},
        {"{\"type\":\"array\",\"contains\":{}}", "'contains'"},
        {"{\"type\":\"number\",\"minimum\":0}", "minimum"},
        {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", "oneOf"},
        {"{\"$defs\":{\"a\":{}},\"$ref\":\"#/$defs/a\",\"type\":\"string\"}",
         "'type' next to $ref"},
        {"{\"$ref\":\"#/$defs/missing\"}", "$ref"},
        {"{\"$ref\":\"http://example.com/s.json\"}", "$ref"},
        {"{\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"x\"}}}",
         "#/properties/a: keyword 'pattern'"},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":true}", "exclusiveMinimum"},
        {"{\"allOf\":[{},{}]}", "allOf"},
        {"{\"anyOf\":[{}],\"type\":\"string\"}", "'type' next to anyOf"},
        {"{\"type\":\"array\",\"items\":[{}]}", "'items'"},
        {"{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"k\":{\"$ref\":\"#/$defs/"
         "n\"}},\"required\":[\"k\"]}},"
         "\"$ref\":\"#/$defs/n\"}",
         "never complete"},
        {"{\"type\":\"strin\"}", "strin"},
        {"{\"type\":\"object\",\"required\":[\"x\"],\"additionalProperties\":false}", "required"},
        {"false", "false"},
        {"{\"enum\":[1,2],\"type\":\"string\"}", "enum"},
        {"{\"type\":\"string\",\"maxLength\":-1}", "maxLength"},
        {"{\"pat\\ntern\":1}", "keyword 'pat?tern' is not enforced"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char err[256] = "", name[64];
        Grammar *g = schema_grammar(cases[i].schema, -1, err, sizeof err);
        snprintf(name, sizeof name, "refusal_%zu", i);
        char why[600];
        snprintf(why, sizeof why, "%s -> %s (want \"%s\")", cases[i].schema, g ? "compiled" : err,
                 cases[i].needle);
        check(name, !g && strstr(err, cases[i].needle) != NULL, why);
        grammar_free(g);
    }
    /* accepted: annotations, uniqueItems false, oneOf with disjoint types or literals */
    const char *fine[] = {
        "{\"title\":\"x\",\"description\":\"y\",\"default\":1,\"examples\":[1],\"$schema\":\"s\","
        "\"$comment\":\"c\",\"type\":\"integer\"}",
        "{\"type\":\"array\",\"uniqueItems\":false}",
        "{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}",
        "{\"oneOf\":[{\"enum\":[1,2]},{\"const\":3}]}",
        "{\"type\":\"integer\",\"minimum\":1.5,\"maximum\":3.5}",
    };
    for (size_t i = 0; i < sizeof fine / sizeof *fine; i++) {
        char err[256] = "", name[64];
        Grammar *g = schema_grammar(fine[i], -1, err, sizeof err);
        snprintf(name, sizeof name, "accepted_schema_%zu", i);
        check(name, g != NULL, err);
        grammar_free(g);
    }
}

static void test_eos_check_clone(void) {
    GrammarVocab *v = byte_vocab();
    char err[256];
    Grammar *g = schema_grammar(
        "{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99}}", 0,
        err, sizeof err);
    GrammarMatcher *m = grammar_matcher_new(g, v);
    uint64_t *mask = malloc(grammar_mask_words(v) * 8);
    grammar_matcher_mask(m, mask);
    check("eos_refused_before_complete",
          !bit(mask, eos_id) && grammar_matcher_accept(m, eos_id) == 0 &&
              !grammar_matcher_complete(m),
          "eos at start");
    int special = eos_id - 1;
    check("empty_token_never_allowed",
          !bit(mask, special) && grammar_matcher_accept(m, special) == 0, "special token");
    int t12 = -1, t345 = -1, t9b = -1;
    for (int t = 256; t < n_vocab; t++) {
        if (plens[t] == 2 && !memcmp(pieces[t], "12", 2)) t12 = t;
        if (plens[t] == 3 && !memcmp(pieces[t], "345", 3)) t345 = t;
        if (plens[t] == 2 && !memcmp(pieces[t], "9]", 2)) t9b = t;
    }
    int draft[5] = {'[', t12, ',', t9b, eos_id};
    check("check_draft_all", grammar_matcher_check(m, draft, 5) == 5, "[12,9] eos");
    int draft2[4] = {'[', t12, t345, ']'};
    check("check_draft_prefix", grammar_matcher_check(m, draft2, 4) == 2, "[12345 exceeds 99");
    check("check_leaves_state", !grammar_matcher_complete(m) && grammar_matcher_can_continue(m),
          "state changed by check");
    GrammarMatcher *c = grammar_matcher_clone(m);
    grammar_matcher_accept(c, '[');
    grammar_matcher_accept(c, ']');
    check("clone_independent",
          grammar_matcher_complete(c) && !grammar_matcher_complete(m) &&
              !grammar_matcher_can_continue(c),
          "clone shares state");
    grammar_matcher_mask(c, mask);
    int n_allowed = 0;
    for (int t = 0; t < n_vocab; t++) n_allowed += bit(mask, t);
    check("complete_only_eos", n_allowed == 1 && bit(mask, eos_id), "after [] only eos");
    check("eos_finishes",
          grammar_matcher_accept(c, eos_id) == 1 && grammar_matcher_finished(c) &&
              grammar_matcher_mask(c, mask) == 0,
          "eos");
    grammar_matcher_free(c);
    grammar_matcher_free(m);
    free(mask);
    grammar_free(g);
    grammar_vocab_free(v);
}

static void test_gbnf(void) {
    GrammarVocab *v = byte_vocab();
    char err[256];
    const char *text =
        "# a comment\n"
        "root ::= \"{\" ws pair (\",\" ws pair)* \"}\"\n"
        "pair ::= [a-z]+ \":\" num\n"
        "num  ::= [0-9]{1,3} | \"-\" [1-9]\n"
        "ws   ::= [ \\t\\n]{0,2}\n";
    Grammar *g = grammar_from_gbnf(text, strlen(text), err, sizeof err);
    check("gbnf_compiles", g != NULL, err);
    check("gbnf_accepts",
          g && accepts_str(g, v, "{ab:1,\n c:999}") && accepts_str(g, v, "{x:-5}") &&
              !accepts_str(g, v, "{x:1000}") && !accepts_str(g, v, "{x:-0}") &&
              !accepts_str(g, v, "{   x:1}") && !accepts_str(g, v, "{X:1}"),
          "gbnf accept/refuse");
    grammar_free(g);
    const char *u = "root ::= [\xce\xb1-\xcf\x89]+ [^\"a]? (\"\\u00e9\" | \"\\x41\")\n";
    g = grammar_from_gbnf(u, strlen(u), err, sizeof err);
    check("gbnf_utf8_classes",
          g && accepts_str(g, v, "\xce\xb2\xce\xb3\xc3\xa9") &&
              accepts_str(g, v,
                          "\xce\xb2\xf0\x9f\x98\x80"
                          "A") &&
              !accepts_str(g, v, "b\xc3\xa9") &&
              !accepts_str(g, v,
                           "\xce\xb2"
                           "aA") &&
              !accepts_str(g, v, "\xce\xb2\"A"),
          g ? "class mismatch" : err);
    grammar_free(g);
    g = grammar_from_gbnf("root ::= \"\"\n", 12, err, sizeof err);   /* only the empty answer */
    check("gbnf_empty_answer", g && accepts_str(g, v, "") && !accepts_str(g, v, "a"), err);
    grammar_free(g);
    const char *dot = "root ::= . . \"!\"\n";
    g = grammar_from_gbnf(dot, strlen(dot), err, sizeof err);
    check("gbnf_dot_any_character",
          g &&
              accepts_str(g, v,
                          "\xe4\xb8\xad"
                          "a!") &&
              accepts_str(g, v,
                          "\xf4\x8f\xbf\xbf"
                          "b!") &&
              !accepts_str(g, v,
                           "\xed\xa0\x80"
                           "a!") &&
              !accepts_str(g, v, "a!"),
          err);
    grammar_free(g);
    struct { const char *g, *needle; } bad[] = {
        {"root ::= x\n", "'x' is used but not defined"},
        {"root ::= root \"a\" | \"b\"\n", "left recursion"},
        {"a ::= \"x\"\n", "no rule named root"},
        {"root ::= (\"a\"?)*\n", "can match nothing"},
        {"root ::= \"a\" root\n", "never complete"},
        {"root ::= \"a\nroot2 ::= \"b\"\n", "line 1"},
        {"root ::= [b-a]\n", "out of order"},
        {"root ::= \"a\"\nroot ::= \"b\"\n", "defined twice"},
        {"root ::= (\"a\"\n", "missing )"},
        {"root ::= \"\\q\"\n", "escape"},
        {"root ::= \"\\\n\"\n", "a backslash then \\x0a"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char name[64], why[400];
        err[0] = 0;
        g = grammar_from_gbnf(bad[i].g, strlen(bad[i].g), err, sizeof err);
        snprintf(name, sizeof name, "gbnf_refusal_%zu", i);
        snprintf(why, sizeof why, "got \"%s\", want \"%s\"", g ? "compiled" : err, bad[i].needle);
        check(name, !g && strstr(err, bad[i].needle), why);
        grammar_free(g);
    }
    grammar_vocab_free(v);
}

static void test_limits_and_literals(void) {
    GrammarVocab *v = byte_vocab();
    char err[256], *sch = malloc(1 << 16);
    /* enum values sharing long prefixes (factored into one trie of rules) */
    size_t n = (size_t)snprintf(sch, 1 << 16, "{\"enum\":[");
    for (int i = 0; i < 300; i++)
        n += (size_t)snprintf(sch + n, (1 << 16) - n, "%s\"%s%d\"", i ? "," : "",
                              "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", i * 7);
    snprintf(sch + n, (1 << 16) - n, ",\"b\",\"\"]}");
    Grammar *g = schema_grammar(sch, 0, err, sizeof err);
    int ok = g != NULL;
    for (int i = 0; ok && i < 300; i++) {
        char lit[64];
        snprintf(lit, sizeof lit, "\"%s%d\"", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", i * 7);
        ok = accepts_str(g, v, lit);
        snprintf(lit, sizeof lit, "\"%s%d\"", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                 i * 7 + 1);
        if (ok && (i * 7 + 1) % 7) ok = !accepts_str(g, v, lit);
    }
    check("enum_shared_prefixes",
          ok && accepts_str(g, v, "\"b\"") && accepts_str(g, v, "\"\"") &&
              !accepts_str(g, v, "\"a\""),
          g ? "enum accept/refuse" : err);
    grammar_free(g);
    /* a chain of 400 $refs is refused by depth, not by a crash */
    n = (size_t)snprintf(sch, 1 << 16, "{\"$defs\":{");
    for (int i = 0; i < 400; i++)
        n += (size_t)snprintf(sch + n, (1 << 16) - n, "%s\"d%d\":{\"$ref\":\"#/$defs/d%d\"}",
                              i ? "," : "", i, i + 1);
    snprintf(sch + n, (1 << 16) - n, ",\"d400\":{\"type\":\"null\"}},\"$ref\":\"#/$defs/d0\"}");
    g = schema_grammar(sch, 0, err, sizeof err);
    check("ref_chain_depth_refused", !g && strstr(err, "nest deeper"), g ? "compiled" : err);
    grammar_free(g);
    n = 0;
    n += (size_t)snprintf(sch, 1 << 16, "root ::= ");
    for (int i = 0; i < 100; i++) sch[n++] = '(';
    sch[n++] = '"'; sch[n++] = 'x'; sch[n++] = '"';
    for (int i = 0; i < 100; i++) sch[n++] = ')';
    sch[n++] = '\n';
    g = grammar_from_gbnf(sch, n, err, sizeof err);
    check("gbnf_group_depth_refused", !g && strstr(err, "nest deeper"), g ? "compiled" : err);
    grammar_free(g);
    /* a long chain of rules: no C recursion per rule in the compiler or the matcher */
    free(sch);
    sch = malloc(1 << 20);
    n = 0;
    for (int i = 0; i < 20000; i++) {
        char name[16];
        snprintf(name, sizeof name, i ? "r%d" : "root", i);
        n += (size_t)snprintf(sch + n, (1 << 20) - n, "%s ::= r%d | \"y\"\n", name, i + 1);
    }
    n += (size_t)snprintf(sch + n, (1 << 20) - n, "r20000 ::= \"z\"\n");
    g = grammar_from_gbnf(sch, n, err, sizeof err);
    check("gbnf_long_rule_chain",
          g && accepts_str(g, v, "z") && accepts_str(g, v, "y") && !accepts_str(g, v, "x"),
          g ? "accept" : err);
    grammar_free(g);
    free(sch);
    /* grammar_apply_mask */
    float logits[130];
    uint64_t mask[3] = {1ull << 3, 0, 1ull << (129 - 128)};
    for (int i = 0; i < 130; i++) logits[i] = 1.0f;
    grammar_apply_mask(logits, mask, 130);
    int am = logits[3] == 1.0f && logits[129] == 1.0f && isinf(logits[0]) && logits[0] < 0 &&
             isinf(logits[128]);
    check("apply_mask", am, "logits after grammar_apply_mask");
    grammar_vocab_free(v);
}

/* ---- forced tool calls ---- */

static const char *const tool_json =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{"
    "\"type\":\"object\",\"properties\":{"
    "\"city\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":12},"
    "\"unit\":{\"type\":\"string\",\"enum\":[\"c\",\"f\"]},"
    "\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":14},"
    "\"note\":{\"type\":\"string\"}},"
    "\"required\":[\"city\",\"days\"],\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"plan\",\"parameters\":{\"type\":\"object\","
    "\"$defs\":{\"step\":{\"type\":\"object\",\"properties\":{"
    "\"id\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99},"
    "\"what\":{\"type\":\"string\",\"maxLength\":8}},\"required\":[\"id\"]}},"
    "\"properties\":{\"steps\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/step\"},"
    "\"minItems\":1,\"maxItems\":3},"
    "\"mode\":{\"anyOf\":[{\"type\":\"integer\",\"minimum\":-5,\"maximum\":5},{\"type\":\"null\"},"
    "{\"enum\":[\"x\",\"y\"]}]},"
    "\"flag\":{\"type\":\"boolean\"}},\"required\":[\"steps\",\"mode\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"ping\"}}]";

/* Extra tokens for the tool vocabulary: tag texts spelled in ordinary text, pieces of them,
   Unicode whitespace, names. */
static const char *const tool_multi[] = {
    "</arg_value>", "</tool_call>", "ab</arg_value>", "</arg", "_value>", "</tool", "_call>", "<",
    "</", " ", "\xC2\xA0", "\xE3\x80\x80", "city", "days", "get_weather", "\xF8", "a\xFD",
};

typedef struct {
    GrammarVocab *v;
    const char **piece;
    size_t *len;
    int n, eos, tag0, bad0;   /* tag k is token tag0 + k; bad0, bad0 + 1: tokens with a tag byte */
} ToolVocab;

static void tool_vocab(ToolVocab *tv) {
    int nm = (int)(sizeof multi / sizeof *multi);
    int nt = (int)(sizeof tool_multi / sizeof *tool_multi);
    tv->n = 256 + nm + nt + GRAMMAR_N_TAGS + 1;
    tv->piece = calloc((size_t)tv->n, sizeof *tv->piece);
    tv->len = calloc((size_t)tv->n, sizeof *tv->len);
    static char bytes[256];
    int k = 0;
    for (int i = 0; i < 256; i++, k++) {
        bytes[i] = (char)i;
        tv->piece[k] = &bytes[i];
        tv->len[k] = 1;
    }
    for (int i = 0; i < nm; i++, k++) { tv->piece[k] = multi[i]; tv->len[k] = strlen(multi[i]); }
    for (int i = 0; i < nt; i++, k++) {
        tv->piece[k] = tool_multi[i];
        tv->len[k] = strlen(tool_multi[i]);
        if (i == nt - 2) tv->bad0 = k;
    }
    int tag[GRAMMAR_N_TAGS];
    tv->tag0 = k;
    for (int i = 0; i < GRAMMAR_N_TAGS; i++, k++) {
        tag[i] = k;
        tv->piece[k] = grammar_tag_text[i];   /* as the tokenizer spells it; the vocab overrides */
        tv->len[k] = strlen(grammar_tag_text[i]);
    }
    tv->eos = k;
    tv->piece[k] = "<|observation|>";
    tv->len[k] = strlen(tv->piece[k]);
    char err[200];
    tv->v = grammar_vocab_new_tags(tv->n, tv->piece, tv->len, &tv->eos, 1, tag, err, sizeof err);
    if (!tv->v) { printf("FAIL tool_vocab: %s\n", err); exit(1); }
}

static Grammar *tools_grammar(const JsonValue *tools, const char *only, int min, int max,
                              char *err, size_t el) {
    GrammarTool t[8];
    char where[8][64];
    int n = 0;
    for (size_t i = 0; i < json_len(tools) && n < 8; i++) {
        const JsonValue *fn = json_get(json_at(tools, i), "function");
        const char *name = json_str(json_get(fn, "name"), NULL);
        if (only && strcmp(only, name)) continue;
        snprintf(where[n], sizeof where[n], "tools[%zu].function.parameters", i);
        t[n] = (GrammarTool){name, strlen(name), json_get(fn, "parameters"), where[n]};
        n++;
    }
    return grammar_tool_calls(t, n, min, max, NULL, err, el);
}

/* Random answers under the tool grammar, spelled as the model's text (tags as their text), read
   back by chat.h's parser: each call names a tool (the forced one when given) and its arguments
   validate against the tool's parameters. Masks equal token-by-token checks at every step. */
static void test_tool_calls(void) {
    ToolVocab tv;
    tool_vocab(&tv);
    JsonDoc *d = json_parse(tool_json, strlen(tool_json), NULL, 0);
    const JsonValue *tools = json_root(d);
    ChatConv conv;
    chat_conv_init(&conv);
    char err[512] = "";
    int ok = !chat_conv_parse_tools(&conv, tools, err, sizeof err);
    check("tool_conv", ok, err);
    struct { const char *only; int min, max; } modes[] = {
        {NULL, 1, -1}, {"plan", 1, 1}, {"get_weather", 1, 1}, {NULL, 1, 1}, {"ping", 1, 1}};
    size_t W = grammar_mask_words(tv.v);
    uint64_t *mask = malloc(W * 8);
    int *allowed = malloc((size_t)tv.n * sizeof *allowed);
    char *text = malloc(1 << 16);
    for (size_t mi = 0; mi < sizeof modes / sizeof *modes; mi++) {
        Grammar *g = tools_grammar(tools, modes[mi].only, modes[mi].min, modes[mi].max, err,
                                   sizeof err);
        char name[64], why[1200] = "";
        snprintf(name, sizeof name, "tool_grammar_%zu", mi);
        check(name, g != NULL, err);
        if (!g) continue;
        int bad = 0, calls_seen = 0;
        for (uint64_t seed = 1; seed <= 40 && !bad; seed++) {
            GrammarMatcher *m = grammar_matcher_new(g, tv.v);
            rng_state = seed * 0x9E3779B97F4A7C15ull + 7;
            size_t n = 0;
            for (int step = 0;; step++) {
                if (step > 4000) {
                    snprintf(why, sizeof why, "no eos: %.200s", text);
                    bad = 1;
                    break;
                }
                int cnt = grammar_matcher_mask(m, mask), na = 0;
                for (int t = 0; t < tv.n; t++)
                    if (bit(mask, t)) allowed[na++] = t;
                if (cnt != na || !na) {
                    snprintf(why, sizeof why, "mask count %d, bits %d after %.*s", cnt, na,
                             (int)n, text);
                    bad = 1;
                    break;
                }
                for (int t = 0; t < tv.n; t++)
                    if (grammar_matcher_check(m, &t, 1) != bit(mask, t)) {
                        snprintf(why, sizeof why, "token %d: mask %d, check differs after %.*s",
                                 t, bit(mask, t), (int)n, text);
                        bad = 1;
                    }
                if (bad) break;
                if (bit(mask, tv.bad0) || bit(mask, tv.bad0 + 1) || bit(mask, 0xF8)) {
                    snprintf(why, sizeof why, "a token with a tag byte is allowed");
                    bad = 1;
                    break;
                }
                int pick = allowed[rnd() % (uint32_t)na];
                if (step > 40) {   /* then prefer what ends things */
                    const int pref[] = {tv.eos, tv.tag0 + GRAMMAR_TAG_TOOL_CALL_END,
                                        tv.tag0 + GRAMMAR_TAG_ARG_VALUE_END, '"', ']', '}'};
                    for (int i = 0; i < 6; i++)
                        if (bit(mask, pref[i])) { pick = pref[i]; break; }
                }
                if (grammar_matcher_accept(m, pick) != 1) {
                    snprintf(why, sizeof why, "allowed token %d refused", pick);
                    bad = 1;
                    break;
                }
                if (pick == tv.eos) break;
                const char *p = pick >= tv.tag0 && pick < tv.tag0 + GRAMMAR_N_TAGS
                                    ? grammar_tag_text[pick - tv.tag0] : tv.piece[pick];
                size_t pl = p == tv.piece[pick] ? tv.len[pick] : strlen(p);
                if (n + pl >= (1 << 16) - 1) {
                    snprintf(why, sizeof why, "too long");
                    bad = 1;
                    break;
                }
                memcpy(text + n, p, pl);
                n += pl;
                text[n] = 0;
            }
            grammar_matcher_free(m);
            if (bad) break;
            ChatOutput o;
            memset(&o, 0, sizeof o);
            chat_out_parse(text, n, 0, &conv, &o);
            int want_max = modes[mi].max < 0 ? 1 << 30 : modes[mi].max;
            if (o.content_len || o.n_calls < modes[mi].min || o.n_calls > want_max) {
                snprintf(why, sizeof why, "%d calls, content \"%.100s\" from %.300s", o.n_calls,
                         o.content ? o.content : "", text);
                bad = 1;
            }
            for (int c = 0; c < o.n_calls && !bad; c++) {
                const JsonValue *fn = NULL;
                for (size_t i = 0; i < json_len(tools); i++) {
                    const JsonValue *f = json_get(json_at(tools, i), "function");
                    size_t nl;
                    const char *nm = json_str(json_get(f, "name"), &nl);
                    if (nl == o.calls[c].name_len && !memcmp(nm, o.calls[c].name, nl)) fn = f;
                }
                const JsonValue *params = json_get(fn, "parameters");
                JsonDoc *a = json_parse(o.calls[c].arguments, o.calls[c].arguments_len, NULL, 0);
                int valid = fn && a && (!modes[mi].only ||
                                        !strncmp(modes[mi].only, o.calls[c].name,
                                                 o.calls[c].name_len)) &&
                            json_type(json_root(a)) == JSON_OBJECT &&
                            (!params || validate(json_root(a), params, params));
                /* no other keys than the schema's */
                const JsonValue *props = json_get(params, "properties");
                for (size_t i = 0; valid && a && i < json_len(json_root(a)); i++) {
                    size_t kl;
                    const char *k = json_key_at(json_root(a), i, &kl);
                    valid = json_getn(props, k, kl) != NULL;
                }
                if (!valid)
                    snprintf(why, sizeof why, "call %.*s(%.*s) does not validate; text %.300s",
                             (int)o.calls[c].name_len, o.calls[c].name,
                             (int)o.calls[c].arguments_len, o.calls[c].arguments, text);
                bad |= !valid;
                json_free(a);
            }
            calls_seen += o.n_calls;
            chat_output_free(&o);
        }
        snprintf(name, sizeof name, "tool_calls_parse_and_validate_%zu", mi);
        check(name, !bad && calls_seen > 0, why);
        grammar_free(g);
    }
    /* raw strings: no whitespace at the ends, no tag text, the tags only from their tokens */
    Grammar *g = tools_grammar(tools, "get_weather", 1, 1, err, sizeof err);
    struct { const char *text; int ok; } raw[] = {
        {"\xF8get_weather\xFA" "city\xFB\xFC" "a</arg_valu", 1},
        {"\xF8get_weather\xFA" "city\xFB\xFC" "a</arg_value>", 0},
        {"\xF8get_weather\xFA" "city\xFB\xFC" "a</tool_call>", 0},
        {"\xF8get_weather\xFA" "city\xFB\xFC" " a", 0},
        {"\xF8get_weather\xFA" "city\xFB\xFC" "\xE3\x80\x80", 0},
        {"\xF8get_weather\xFA" "city\xFB\xFC" "a b\xFD\xFA" "days\xFB\xFC" "14\xFD\xF9", 1},
        {"\xF8get_weather\xFA" "city\xFB\xFC" "a \xFD", 0},
        {"\xF8get_weather\xFA" "city\xFB\xFC" "a\xC2\xA0\xFD", 0},
        {"\xF8get_weather\xFA" "city\xFB\xFC" "a\xFD\xFA" "days\xFB\xFC" "15", 0},
        {"\xF8get_weather\xFA" "city\xFB\xFC" "a\xFD\xFA" "note\xFB", 0},   /* days comes first */
        {"\xF8get_weather\xFA" "city\xFB\xFC" "a\xFD\xFA" "days\xFB\xFC" "3\xFD\xFA" "note\xFB\xFC"
         "<b>x</b>\nok\xFD\xF9", 1},
    };
    int rb = g != NULL;
    char rwhy[200] = "";
    for (size_t i = 0; g && i < sizeof raw / sizeof *raw; i++) {
        GrammarMatcher *m = grammar_matcher_new(g, tv.v);
        int r = grammar_matcher_accept_bytes(m, raw[i].text, strlen(raw[i].text));
        if ((r == 1) != raw[i].ok) {
            rb = 0;
            snprintf(rwhy, sizeof rwhy, "case %zu: accept %d", i, r);
        }
        grammar_matcher_free(m);
    }
    check("tool_raw_strings", rb, rwhy);
    grammar_free(g);
    /* refusals name the tool's schema and the keyword */
    struct { const char *tools, *needle; } bad[] = {
        {"[{\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":"
         "{\"type\":\"string\",\"pattern\":\"a\"}}}}}]",
         "tools[0].function.parameters/properties/x: keyword 'pattern' is not enforced"},
        {"[{\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":"
         "{\"type\":\"integer\",\"multipleOf\":2}}}}}]",
         "tools[0].function.parameters/properties/x: keyword 'multipleOf'"},
        {"[{\"function\":{\"name\":\"f\",\"parameters\":{\"anyOf\":[{}]}}}]",
         "tools[0].function.parameters: keyword 'anyOf'"},
        {"[{\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{"
         "\" x\":{}}}}}]", "cannot be written as an argument key"},
        {"[{\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":"
         "{\"type\":\"string\",\"enum\":[\" a\"]}}}}}]", "enum value ' a'"},
        {"[{\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":"
         "{\"enum\":[\"</tool_call>\"]}}}}}]", "tool-call tag"},
        {"[{\"function\":{\"name\":\"f g \",\"parameters\":{}}}]", "name 'f g '"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        JsonDoc *bd = json_parse(bad[i].tools, strlen(bad[i].tools), NULL, 0);
        char e2[512] = "", name[64], why[800];
        Grammar *bg = bd ? tools_grammar(json_root(bd), NULL, 1, -1, e2, sizeof e2) : NULL;
        snprintf(name, sizeof name, "tool_refusal_%zu", i);
        snprintf(why, sizeof why, "got \"%s\", want \"%s\"", bg ? "compiled" : e2, bad[i].needle);
        check(name, !bg && strstr(e2, bad[i].needle) != NULL, why);
        grammar_free(bg);
        json_free(bd);
    }
    /* schema grammars never allow a tag or a token holding a tag byte */
    Grammar *jo = grammar_json_object(NULL);
    GrammarMatcher *m = grammar_matcher_new(jo, tv.v);
    grammar_matcher_accept_bytes(m, "{\"a\":\"", 6);
    grammar_matcher_mask(m, mask);
    int none = 1;
    for (int k = 0; k < GRAMMAR_N_TAGS; k++) none &= !bit(mask, tv.tag0 + k);
    none &= !bit(mask, tv.bad0) && !bit(mask, tv.bad0 + 1) && !bit(mask, 0xF8) && bit(mask, 'a');
    check("schema_never_allows_tags", none, "a tag or a tag byte is allowed inside a string");
    grammar_matcher_free(m);
    grammar_free(jo);
    free(mask);
    free(allowed);
    free(text);
    chat_conv_free(&conv);
    json_free(d);
    grammar_vocab_free(tv.v);
    free(tv.piece);
    free(tv.len);
}

int main(void) {
    make_vocab();
    test_strings();
    test_integer_ranges();
    test_objects_and_ws();
    test_refusals();
    test_eos_check_clone();
    test_gbnf();
    test_limits_and_literals();
    test_generation();
    test_tool_calls();
    printf("%d failures\n", failures);
    return failures != 0;
}

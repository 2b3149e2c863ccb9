/* grammar.h - constrained decoding: which tokens may come next so that the answer stays inside a
 * JSON schema or a GBNF-like grammar, as a bit mask over the vocabulary.
 *
 * Single-header library in the stb style: every file may include it for the API; exactly ONE
 * translation unit defines GRAMMAR_IMPLEMENTATION before including it. It needs json.h (its
 * implementation compiled somewhere in the program) next to this file.
 *
 * API
 *   Grammar *grammar_from_schema(const JsonValue *schema, const GrammarOptions *opt,
 *                                char *err, size_t err_len);
 *   Grammar *grammar_from_schema_text(const char *json, size_t len, const GrammarOptions *opt,
 *                                     char *err, size_t err_len);
 *   Grammar *grammar_json_object(const GrammarOptions *opt);      any JSON object (json_object)
 *   Grammar *grammar_from_gbnf(const char *text, size_t len, char *err, size_t err_len);
 *   Grammar *grammar_tool_calls(const GrammarTool *tools, int n_tools, int min_calls,
 *                               int max_calls, const GrammarOptions *opt, char *err,
 *                               size_t err_len);
 *       GLM tool calls (see "Tool calls"): min_calls..max_calls (-1: no limit) calls, each of one
 *       of the tools (name, parameters schema; where names the schema in errors).
 *       NULL on error with one line in err: for a schema "#/json/pointer: why", naming the keyword
 *       it does not enforce (a tool's: where + pointer, "tools[0].function.parameters/properties/x:
 *       keyword 'pattern' is not enforced"); for a grammar "line L: why". opt may be NULL
 *       (defaults below).
 *   void grammar_free(Grammar *g);              after every matcher made from it is freed
 *
 *   GrammarVocab *grammar_vocab_new(int n, const char *const *piece, const size_t *len,
 *                                   const int *eos, int n_eos, char *err, size_t err_len);
 *       The vocabulary as the raw bytes of each token id 0..n-1. A token with no bytes (len 0 or
 *       piece NULL: give special tokens so) is never allowed. The eos ids are allowed exactly when
 *       the answer is complete. The model's byte-level BPE vocabulary holds a token for every
 *       single byte; with such a vocabulary every step allows a token (see "No dead ends").
 *       A token holding a byte from 0xF8 up (never in valid UTF-8) is never allowed.
 *   GrammarVocab *grammar_vocab_new_tags(..., const int tag[GRAMMAR_N_TAGS], char *err, ...);
 *       The same, with the token ids of the six tool-call tags (GRAMMAR_TAG_*, -1: absent): tag k
 *       stands for the byte 0xF8 + k, whatever its piece says.
 *   extern const char *const grammar_tag_text[GRAMMAR_N_TAGS];     "<tool_call>", ...
 *   void grammar_vocab_free(GrammarVocab *v);   after every matcher using it is freed
 *   size_t grammar_mask_words(const GrammarVocab *v);    uint64_t words of a mask: (n + 63) / 64
 *
 *   GrammarMatcher *grammar_matcher_new(Grammar *g, const GrammarVocab *v);   NULL: out of memory
 *   GrammarMatcher *grammar_matcher_clone(const GrammarMatcher *m);   same state, own copy
 *   void grammar_matcher_free(GrammarMatcher *m);
 *   int grammar_matcher_mask(GrammarMatcher *m, uint64_t *mask);
 *       Bit t of mask (word t / 64, bit t % 64) is set iff token t may come next: its bytes can all
 *       be consumed from the current state (multi-character and partial-UTF-8 tokens included),
 *       or t is an eos id and the answer is complete. Returns the number of allowed tokens; -1 on
 *       out of memory or for a grammar too ambiguous to follow (GM_CLOSE_BUDGET frames in one
 *       step), the matcher then unchanged.
 *   int grammar_matcher_accept(GrammarMatcher *m, int token);
 *       1: accepted, the state advanced (an eos id finishes the matcher); 0: not allowed, the state
 *       is unchanged; -1: out of memory.
 *   int grammar_matcher_accept_bytes(GrammarMatcher *m, const char *s, size_t n);   same, raw bytes
 *   int grammar_matcher_check(GrammarMatcher *m, const int *tokens, int n);
 *       How many leading tokens of the sequence would be accepted one after the other (a
 *       speculative draft's check); the state is unchanged. -1 on out of memory.
 *   int grammar_matcher_complete(const GrammarMatcher *m);     the text so far is a whole answer
 *   int grammar_matcher_can_continue(const GrammarMatcher *m); some byte may still follow
 *   int grammar_matcher_finished(const GrammarMatcher *m);     an eos id was accepted
 *   void grammar_apply_mask(float *logits, const uint64_t *mask, int n);   -INFINITY where not set
 *
 *   Not thread-safe: a Grammar keeps a cache of masks shared by its matchers, so one thread at a
 *   time uses a Grammar and its matchers. A GrammarVocab is read-only after creation.
 *
 * JSON schema (draft 2020-12 / draft-07 keywords)
 *   Enforced: type (object, array, string, number, integer, boolean, null, and lists of them),
 *   properties, required, additionalProperties, enum, const, items, minItems, maxItems, minLength,
 *   maxLength (in code points), anyOf, oneOf, allOf with one member, local $ref ("#", "#/$defs/X",
 *   "#/definitions/X", any local JSON pointer) with $defs / definitions, minimum, maximum,
 *   exclusiveMinimum, exclusiveMaximum (numbers, not the draft-4 booleans) for integers,
 *   uniqueItems: false. Annotations are ignored: title, description, default, examples,
 *   $schema, $id, $comment, $anchor, deprecated, readOnly, writeOnly. Any other keyword is refused
 *   by name ("#/properties/a: keyword 'pattern' is not enforced"), and so is a keyword whose
 *   meaning depends on something not enforced (minimum on a non-integer number, a sibling of $ref,
 *   anyOf or enum that constrains, oneOf whose branches may overlap).
 *   What is generated is a subset of what the schema accepts, chosen so that it always validates:
 *   - Objects write the properties in the schema's order; every required one appears, optional ones
 *     may be skipped; no other member is written (so additionalProperties holds whatever it says).
 *     An object schema without properties: additionalProperties false gives {}, a schema gives a
 *     map (any keys, values of that schema), true or absent gives any JSON object. Names in
 *     required without a property schema take any value.
 *   - Integers: within [minimum, maximum], by default at most 16 digits (|n| < 10^16); no "-0".
 *     Numbers: at most 16 integer and 16 fraction digits and a two-digit exponent.
 *   - Strings: any JSON string (escapes \" \\ \/ \b \f \n \r \t \uXXXX with surrogates paired),
 *     valid UTF-8 only, minLength / maxLength counted in code points (an escape is one).
 *   - No type keyword: the types that the keywords present imply (properties -> object, ...),
 *     else any JSON value. enum / const: those exact values, written compactly.
 *   - oneOf is accepted when its branches cannot both match: disjoint types, disjoint enum / const
 *     sets, or objects told apart by a required property with disjoint const / enum values.
 *   - Whitespace: none before the value or after it; between tokens at most ws_max bytes of
 *     [ \t\n\r] (GrammarOptions.ws_max, default 20; 0 gives compact JSON), so whitespace is
 *     bounded and a model cannot loop on spaces.
 *
 * GBNF-like grammars (llama.cpp's syntax, the subset below)
 *     root ::= "{" ws pair ("," ws pair)* "}"       # comment
 *     pair ::= [a-z]+ ":" [0-9]{1,3}
 *     ws   ::= [ \t\n]{0,4}
 *   Rules "name ::= alternatives"; "|" alternatives; "literal" with \n \r \t \\ \" \xHH \uHHHH
 *   \UHHHHHHHH escapes; [classes] of code points with ranges, ^ negation and the same escapes;
 *   . (any character); ( groups ); postfix * + ? {m} {m,} {m,n}. Text is UTF-8, matched as
 *   UTF-8 bytes. The start rule is "root". Refused: an undefined rule, left recursion, a
 *   repetition of something that can match nothing, a rule that can never complete.
 *
 * Tool calls (grammar_tool_calls): the answer is calls written as GLM's template writes them,
 *     <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>
 *   one after the other with nothing between, then eos. The six tags are added tokens of their own.
 *   Each must come only from its token, never spelled in ordinary text, and no other grammar may
 *   allow one: so in the grammar's alphabet tag k is the byte 0xF8 + k, a byte that no valid UTF-8
 *   holds. grammar_vocab_new_tags gives the tag tokens those bytes and never allows an ordinary
 *   token that holds one (the byte-level BPE's tokens for raw bytes 0xF8-0xFF); schemas and GBNF
 *   grammars match valid UTF-8 only, so they never allow a tag and allow what they did before. The
 *   grammar is built directly, not through GBNF text: the tags are literal bytes, and each
 *   argument's value is compiled by the schema compiler. Masks cost what the schema's do, the tags
 *   being one-byte tokens (bench/grammarbench, forced_tool_call).
 *   What is generated reads back through chat.h's reply parser into arguments that validate:
 *   - NAME is the tool's name; it must be non-empty text without whitespace at its ends (the parser
 *     strips it) and without the text of <arg_key> or </tool_call>, else the tool is refused.
 *   - Arguments follow parameters, an object schema (type, properties, required,
 *     additionalProperties; another keyword at its top is refused): properties in the schema's
 *     order, required ones always, optional ones maybe, no other key; then the names that are only
 *     in required (values of additionalProperties' schema, else any JSON). A key must read back the
 *     same way (no whitespace at its ends, no </arg_key> or </tool_call> text).
 *   - V of a property whose schema says "type": "string" is written raw, as the template writes a
 *     string (and as the parser keeps it): valid UTF-8 text of the schema's length, no whitespace
 *     at either end (str.isspace: the parser strips it), never the text of </arg_value> or
 *     </tool_call> (where the parser would end it); enum / const: those strings, each of which must
 *     read back so. Other keywords next to it are refused.
 *   - Any other V is JSON of its schema (as above); its strings and literals never hold the text
 *     of </arg_value> or </tool_call> either (a literal that does is refused).
 *   Whitespace between the elements, which the parser would skip, is not generated.
 *
 * No dead ends: every rule alternative that can never complete is removed at compile time, so
 * every prefix the matcher accepts can be completed; with a token for every single byte, each
 * step allows some token or the answer is complete. Frames deeper than GRAMMAR_MAX_DEPTH are not
 * pushed (a JSON nesting of about a hundred levels): a grammar that must nest deeper to finish
 * would dead-end there; a JSON value can always finish with a scalar instead.
 *
 * How the mask is computed: the state is a set of stacks of grammar positions (a pushdown
 * automaton run on bytes, all parses at once). Tokens sit in a byte trie; a walk from the state
 * steps one byte per trie edge and drops a subtree as soon as no stack survives, so a structural
 * position costs a few hundred steps. Within one walk each distinct set of stacks is stepped by
 * each byte at most once (a 256-entry transition table per set), so a trie node costs a table
 * look-up. Inside a JSON string almost every token fits, so the vocabulary precomputes each
 * token's effect from the middle of a string (how many characters, whether and where it closes
 * the string); a string state then costs one OR of precomputed bit sets plus a walk over what
 * follows the quote in the tokens that contain one. Masks are cached per state
 * (GRAMMAR_CACHE_BYTES). Cost on a 154,880-token vocabulary: bench/grammarbench. The slow case is
 * a raw grammar whose wide character class repeats a counted number of times (x{1,200}): every
 * step is then a new state and walks most of the trie.
 */
#ifndef GRAMMAR_H
#define GRAMMAR_H

#include <stddef.h>
#include <stdint.h>
#include "json.h"

#ifndef GRAMMAR_MAX_DEPTH
#define GRAMMAR_MAX_DEPTH 512               /* stack frames */
#endif
#ifndef GRAMMAR_CACHE_BYTES
/* cached masks per grammar: about 800 of a 154,880-token vocabulary */
#define GRAMMAR_CACHE_BYTES ((size_t)16 << 20)
#endif

typedef struct Grammar Grammar;
typedef struct GrammarVocab GrammarVocab;
typedef struct GrammarMatcher GrammarMatcher;

typedef struct {
    int ws_max;          /* whitespace bytes allowed between two JSON tokens; -1: the default 20 */
} GrammarOptions;

/* The six tags of a GLM tool call, each an added token of its own (see grammar_tool_calls). */
enum {
    GRAMMAR_TAG_TOOL_CALL,        /* <tool_call> */
    GRAMMAR_TAG_TOOL_CALL_END,    /* </tool_call> */
    GRAMMAR_TAG_ARG_KEY,          /* <arg_key> */
    GRAMMAR_TAG_ARG_KEY_END,      /* </arg_key> */
    GRAMMAR_TAG_ARG_VALUE,        /* <arg_value> */
    GRAMMAR_TAG_ARG_VALUE_END,    /* </arg_value> */
    GRAMMAR_N_TAGS
};
extern const char *const grammar_tag_text[GRAMMAR_N_TAGS];

typedef struct {
    const char *name;              /* the function's name, as the model writes it */
    size_t name_len;
    const JsonValue *parameters;   /* its JSON schema; NULL or null: no arguments */
    const char *where;             /* how errors name the schema ("tools[0].function.parameters") */
} GrammarTool;

Grammar *grammar_tool_calls(const GrammarTool *tools, int n_tools, int min_calls, int max_calls,
                            const GrammarOptions *opt, char *err, size_t err_len);

Grammar *grammar_from_schema(const JsonValue *schema, const GrammarOptions *opt, char *err,
                             size_t err_len);
Grammar *grammar_from_schema_text(const char *json, size_t len, const GrammarOptions *opt,
                                  char *err, size_t err_len);
Grammar *grammar_json_object(const GrammarOptions *opt);
Grammar *grammar_from_gbnf(const char *text, size_t len, char *err, size_t err_len);
void grammar_free(Grammar *g);

GrammarVocab *grammar_vocab_new(int n, const char *const *piece, const size_t *len,
                                const int *eos, int n_eos, char *err, size_t err_len);
GrammarVocab *grammar_vocab_new_tags(int n, const char *const *piece, const size_t *len,
                                     const int *eos, int n_eos, const int tag[GRAMMAR_N_TAGS],
                                     char *err, size_t err_len);
void grammar_vocab_free(GrammarVocab *v);
size_t grammar_mask_words(const GrammarVocab *v);

GrammarMatcher *grammar_matcher_new(Grammar *g, const GrammarVocab *v);
GrammarMatcher *grammar_matcher_clone(const GrammarMatcher *m);
void grammar_matcher_free(GrammarMatcher *m);
int grammar_matcher_mask(GrammarMatcher *m, uint64_t *mask);
int grammar_matcher_accept(GrammarMatcher *m, int token);
int grammar_matcher_accept_bytes(GrammarMatcher *m, const char *s, size_t n);
int grammar_matcher_check(GrammarMatcher *m, const int *tokens, int n);
int grammar_matcher_complete(const GrammarMatcher *m);
int grammar_matcher_can_continue(const GrammarMatcher *m);
int grammar_matcher_finished(const GrammarMatcher *m);
void grammar_apply_mask(float *logits, const uint64_t *mask, int n);

#endif /* GRAMMAR_H */

#ifdef GRAMMAR_IMPLEMENTATION
#ifndef GRAMMAR_IMPLEMENTATION_DONE
#define GRAMMAR_IMPLEMENTATION_DONE

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ==== compiled grammar ===================================================================== */

/* A rule is a list of alternatives; an alternative a sequence of elements ending in GM_END.
   A position is an index into the element array. */
enum { GM_END, GM_BYTES, GM_RULE, GM_STR, GM_REP };
#define GM_INF 0xFFFFFFFFu
/* A string's frame keeps its count and its sub-state in 32 bits: 27 + 5 for a JSON string, 20 + 12
   for the flagged ones (GM_STR_RAW, GM_STR_TAGSAFE), whose sub-state also follows the tags' text
   and whitespace. */
#define GM_STR_MAXCOUNT ((1u << 27) - 1)
#define GM_STR_MAXCOUNT_FLAGGED ((1u << 20) - 1)
#define GM_STR_TAGSAFE 1u   /* never contains the text of </arg_value> or </tool_call> */
#define GM_STR_RAW 2u       /* raw text (no quotes, no escapes), no whitespace at either end */

typedef struct {
    uint8_t kind;
    uint32_t arg;        /* BYTES: class index; RULE, REP: rule; STR: GM_STR_* flags */
    uint32_t min, max;   /* STR: code points; REP: repetitions (max GM_INF: unbounded) */
} GmElem;

static uint32_t gm_str_shift(const GmElem *e) { return e->arg ? 12 : 5; }

typedef struct { uint64_t h; uint32_t *key; uint32_t klen; uint64_t *mask; int count; } GmCacheEnt;

struct Grammar {
    GmElem *el;
    uint32_t n_el;
    uint64_t (*cls)[4];
    uint32_t n_cls;
    uint32_t *alt;            /* first element of each alternative */
    uint32_t *rule_alt, *rule_nalt, n_rules, root;
    /* mask cache, for one vocabulary at a time */
    const GrammarVocab *cache_vocab;
    GmCacheEnt *cache;
    size_t cache_cap, cache_n, cache_bytes;
};

/* ==== builder =============================================================================== */

typedef struct { GmElem *e; uint32_t n, cap; } GmSeq;
typedef struct { GmSeq *alts; uint32_t n, cap; char *name; } GmBRule;
typedef struct {
    GmBRule *r;
    uint32_t n, cap;
    uint64_t (*cls)[4];
    uint32_t ncls, capcls;
    int failed;
    char *err;
    size_t err_len;
} GmB;

/* Messages are one line: a control byte from the input (a key, a name) becomes '?'. */
static void gm_one_line(char *s) {
    for (; s && *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7F) *s = '?';
}

static int gm_fail(GmB *b, const char *fmt, ...) {
    if (!b->failed && b->err && b->err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->err, b->err_len, fmt, ap);
        va_end(ap);
        gm_one_line(b->err);
    }
    b->failed = 1;
    return -1;
}

static int gm_grow(void **p, uint32_t *cap, uint32_t need, size_t elsize) {
    if (need <= *cap) return 0;
    uint32_t nc = *cap ? *cap * 2 : 8;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * elsize);
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}

static void gm_seq_push(GmB *b, GmSeq *s, uint8_t kind, uint32_t arg, uint32_t min, uint32_t max) {
    if (gm_grow((void **)&s->e, &s->cap, s->n + 1, sizeof *s->e)) {
        gm_fail(b, "out of memory");
        return;
    }
    s->e[s->n++] = (GmElem){kind, arg, min, max};
}

static void gm_seq_free(GmSeq *s) { free(s->e); s->e = NULL; s->n = s->cap = 0; }

static void gm_seq_cls(GmB *b, GmSeq *s, const uint64_t c[4]) {
    uint32_t i;
    for (i = 0; i < b->ncls; i++)
        if (!memcmp(b->cls[i], c, 32)) break;
    if (i == b->ncls) {
        if (gm_grow((void **)&b->cls, &b->capcls, b->ncls + 1, sizeof *b->cls)) {
            gm_fail(b, "out of memory");
            return;
        }
        memcpy(b->cls[b->ncls++], c, 32);
    }
    gm_seq_push(b, s, GM_BYTES, i, 0, 0);
}

static void gm_seq_range(GmB *b, GmSeq *s, unsigned lo, unsigned hi) {
    uint64_t c[4] = {0, 0, 0, 0};
    for (unsigned x = lo; x <= hi && x < 256; x++) c[x >> 6] |= 1ull << (x & 63);
    gm_seq_cls(b, s, c);
}

static void gm_seq_lit(GmB *b, GmSeq *s, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) gm_seq_range(b, s, (unsigned char)p[i], (unsigned char)p[i]);
}

static void gm_seq_cat(GmB *b, GmSeq *s, const GmSeq *t) {
    for (uint32_t i = 0; i < t->n; i++)
        gm_seq_push(b, s, t->e[i].kind, t->e[i].arg, t->e[i].min, t->e[i].max);
}

static int gm_rule(GmB *b, const char *name) {
    if (gm_grow((void **)&b->r, &b->cap, b->n + 1, sizeof *b->r))
        return gm_fail(b, "out of memory");
    GmBRule *r = &b->r[b->n];
    memset(r, 0, sizeof *r);
    r->name = strdup(name ? name : "?");
    if (!r->name) return gm_fail(b, "out of memory");
    return (int)b->n++;
}

/* Adds s as an alternative of rule r; takes s's elements (s is left empty). */
static void gm_alt(GmB *b, int r, GmSeq *s) {
    if (r < 0 || b->failed) { gm_seq_free(s); return; }
    GmBRule *R = &b->r[r];
    if (gm_grow((void **)&R->alts, &R->cap, R->n + 1, sizeof *R->alts)) {
        gm_fail(b, "out of memory");
        gm_seq_free(s);
        return;
    }
    R->alts[R->n++] = *s;
    memset(s, 0, sizeof *s);
}

/* A rule of one alternative. */
static int gm_rule_seq(GmB *b, const char *name, GmSeq *s) {
    int r = gm_rule(b, name);
    gm_alt(b, r, s);
    return r;
}

static void gm_build_free(GmB *b) {
    for (uint32_t i = 0; i < b->n; i++) {
        for (uint32_t a = 0; a < b->r[i].n; a++) gm_seq_free(&b->r[i].alts[a]);
        free(b->r[i].alts);
        free(b->r[i].name);
    }
    free(b->r);
    free(b->cls);
    memset(b, 0, sizeof *b);
}

static int gm_elem_nullable(const GmElem *e, const uint8_t *nullable) {
    switch (e->kind) {
    case GM_BYTES: return 0;
    case GM_RULE: return nullable[e->arg];
    case GM_STR: return e->min == 0;
    case GM_REP: return e->min == 0 || nullable[e->arg];
    }
    return 1;
}

/* Left recursion: a rule that reaches itself before consuming a byte. A depth-first search over
   the left corners with an explicit stack (a long chain of rules must not overflow the C stack).
   Returns 0, or 1 and the rule in *bad. */
static int gm_left_recursion(GmB *b, const uint8_t *nullable, uint32_t *bad) {
    uint32_t n = b->n;
    uint8_t *mark = calloc(n + 1, 1);
    uint32_t *st = malloc(((size_t)n + 1) * 3 * sizeof *st);   /* rule, alternative, element */
    if (!mark || !st) { free(mark); free(st); gm_fail(b, "out of memory"); return 0; }
    int found = 0;
    for (uint32_t r0 = 0; r0 < n && !found; r0++) {
        if (mark[r0]) continue;
        size_t sp = 0;
        st[0] = r0; st[1] = 0; st[2] = 0;
        sp = 1;
        mark[r0] = 1;
        while (sp && !found) {
            uint32_t *f = &st[(sp - 1) * 3];
            const GmBRule *R = &b->r[f[0]];
            if (f[1] >= R->n) { mark[f[0]] = 2; sp--; continue; }
            const GmSeq *q = &R->alts[f[1]];
            if (f[2] >= q->n) { f[1]++; f[2] = 0; continue; }
            const GmElem *e = &q->e[f[2]];
            /* the next left corner of this alternative: past e only if e can match nothing */
            if (gm_elem_nullable(e, nullable)) f[2]++;
            else { f[1]++; f[2] = 0; }
            if (e->kind != GM_RULE && e->kind != GM_REP) continue;
            if (mark[e->arg] == 1) { *bad = e->arg; found = 1; break; }
            if (mark[e->arg] == 2) continue;
            mark[e->arg] = 1;
            uint32_t *c = &st[sp * 3];
            c[0] = e->arg; c[1] = 0; c[2] = 0;
            sp++;
        }
    }
    free(mark);
    free(st);
    return found;
}

/* Checks the grammar (left recursion, empty repetitions), drops what can never complete and lays
   the rules out flat. */
static Grammar *gm_finish(GmB *b, int root, const char *what) {
    if (b->failed || root < 0) { gm_build_free(b); return NULL; }
    uint32_t n = b->n;
    uint8_t *nullable = calloc(n + 1, 1), *prod = calloc(n + 1, 1);
    Grammar *g = NULL;
    if (!nullable || !prod) { gm_fail(b, "out of memory"); goto done; }
    /* to a fixed point; rules written top-down settle in one pass */
    for (int changed = 1; changed;) {
        changed = 0;
        for (uint32_t r = n; r-- > 0;) {
            int nu = 0, pr = 0;
            for (uint32_t a = 0; a < b->r[r].n; a++) {
                const GmSeq *s = &b->r[r].alts[a];
                int an = 1, ap = 1;
                for (uint32_t i = 0; i < s->n; i++) {
                    const GmElem *e = &s->e[i];
                    if (!gm_elem_nullable(e, nullable)) an = 0;
                    if ((e->kind == GM_RULE && !prod[e->arg]) ||
                        (e->kind == GM_REP && e->min > 0 && !prod[e->arg]))
                        ap = 0;
                }
                nu |= an;
                pr |= ap;
            }
            if (nu != nullable[r] || pr != prod[r]) {
                nullable[r] = (uint8_t)nu;
                prod[r] = (uint8_t)pr;
                changed = 1;
            }
        }
    }
    for (uint32_t r = 0; r < n; r++) {
        for (uint32_t a = 0; a < b->r[r].n; a++) {
            const GmSeq *s = &b->r[r].alts[a];
            for (uint32_t i = 0; i < s->n; i++)
                if (s->e[i].kind == GM_REP && nullable[s->e[i].arg] && prod[s->e[i].arg]) {
                    gm_fail(b, "%s: %s repeats something that can match nothing", what,
                            b->r[r].name);
                    goto done;
                }
        }
    }
    if (!prod[root]) { gm_fail(b, "%s: %s can never complete", what, b->r[root].name); goto done; }
    uint32_t bad = 0;
    if (gm_left_recursion(b, nullable, &bad)) {
        gm_fail(b, "%s: left recursion through %s", what, b->r[bad].name);
        goto done;
    }
    if (b->failed) goto done;
    g = calloc(1, sizeof *g);
    if (!g) { gm_fail(b, "out of memory"); goto done; }
    uint32_t n_alt = 0, n_el = 0;
    for (uint32_t r = 0; r < n; r++)
        for (uint32_t a = 0; a < b->r[r].n; a++) { n_alt++; n_el += b->r[r].alts[a].n + 1; }
    g->el = malloc((size_t)(n_el + 1) * sizeof *g->el);
    g->alt = malloc((size_t)(n_alt + 1) * sizeof *g->alt);
    g->rule_alt = malloc((size_t)n * sizeof *g->rule_alt);
    g->rule_nalt = malloc((size_t)n * sizeof *g->rule_nalt);
    g->cls = malloc((size_t)(b->ncls + 1) * sizeof *g->cls);
    if (!g->el || !g->alt || !g->rule_alt || !g->rule_nalt || !g->cls) {
        gm_fail(b, "out of memory");
        goto done;
    }
    if (b->ncls) memcpy(g->cls, b->cls, (size_t)b->ncls * sizeof *g->cls);
    g->n_cls = b->ncls;
    g->n_rules = n;
    g->root = (uint32_t)root;
    uint32_t ai = 0, ei = 0;
    for (uint32_t r = 0; r < n; r++) {
        g->rule_alt[r] = ai;
        for (uint32_t a = 0; a < b->r[r].n; a++) {
            const GmSeq *s = &b->r[r].alts[a];
            int keep = 1;   /* an alternative that can never complete is dropped: no dead ends */
            for (uint32_t i = 0; i < s->n; i++)
                if ((s->e[i].kind == GM_RULE && !prod[s->e[i].arg]) ||
                    (s->e[i].kind == GM_REP && s->e[i].min > 0 && !prod[s->e[i].arg])) keep = 0;
            if (!keep) continue;
            g->alt[ai++] = ei;
            for (uint32_t i = 0; i < s->n; i++) {
                GmElem e = s->e[i];
                if (e.kind == GM_REP && !prod[e.arg]) e.max = 0;   /* never enter it */
                if (e.kind == GM_REP && e.max != GM_INF && e.min > e.max) e.min = e.max;
                g->el[ei++] = e;
            }
            g->el[ei++] = (GmElem){GM_END, 0, 0, 0};
        }
        g->rule_nalt[r] = ai - g->rule_alt[r];
    }
    g->n_el = ei;
done:
    free(nullable);
    free(prod);
    int failed = b->failed;
    gm_build_free(b);
    if (failed && g) { grammar_free(g); g = NULL; }
    return g;
}

/* ==== vocabulary ============================================================================= */

/* Tag k is the byte 0xF8 + k in the grammar's alphabet; no valid UTF-8 holds a byte from 0xF8 up,
   and grammars accept only valid UTF-8, so an ordinary token holding one is never allowed. */
#define GM_TAG_BYTE0 0xF8u
const char *const grammar_tag_text[GRAMMAR_N_TAGS] = {
    "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"};

/* Byte trie of token strings: node i's edges are [first, first + n) in eb / en, the tokens that end
   at node i are tok[tfirst, tfirst + ntok). */
typedef struct { uint32_t first, n, tfirst, ntok; } GmTNode;
typedef struct {
    GmTNode *node;
    uint32_t n_node, cap_node;
    uint8_t *eb;
    uint32_t *en, n_edge, cap_edge, cap_eb;
    uint32_t *tok;
    uint32_t n_tok;
} GmTrie;

/* Sub-states of a JSON string's content automaton (GM_STR): the low 5 bits of a frame's aux. */
enum {
    GS_IDLE,
    GS_C1,
    GS_C2,
    GS_C3,
    GS_E0,
    GS_ED,
    GS_F0,
    GS_F4, /* UTF-8: continuation bytes due */
    GS_BS,
    GS_U0,
    GS_U1,
    GS_U1D,
    GS_U2,
    GS_U2H,
    GS_U3,
    GS_U3H, /* after \, \u + digits */
    GS_LBS,
    GS_LU,
    GS_L0,
    GS_L1,
    GS_L2,
    GS_L3, /* the low surrogate's \uDC00-DFFF */
    /* raw text (GM_STR_RAW): UTF-8 lead bytes that may begin a whitespace character */
    GR_C2,
    GR_E1,
    GR_E1_9A,
    GR_E2,
    GR_E2_80,
    GR_E2_81,
    GR_E3,
    GR_E3_80
};

enum { GP_REJECT, GP_WITHIN, GP_EXIT };
#define GM_WLE 64   /* within-string bit sets for 0..GM_WLE-1 characters */

struct GrammarVocab {
    int n;
    size_t words;
    char *bytes;
    uint64_t *off;
    uint32_t *len;
    uint8_t *is_eos;
    GmTrie trie;
    /* From the middle of a JSON string (idle sub-state) a token either fails, stays inside the
       string having started d characters (WITHIN), or closes it with its first bare quote after
       d characters (EXIT), the rest then going to what follows the string. */
    uint64_t *wle;            /* GM_WLE bit sets: WITHIN tokens with d <= k */
    uint64_t *within_all;
    uint32_t dmax;            /* largest d of a WITHIN token */
    uint32_t *long_tok, *long_d, n_long;   /* WITHIN tokens with d >= GM_WLE */
    uint32_t *exit_tok, *exit_d, n_exit;
    GmTrie exit_trie;         /* suffixes after the quote; trie token j is exit entry j */
    uint64_t *tagtext;        /* tokens that spell </arg_value> or </tool_call> in text */
};

/* One byte of string content from sub-state sub: the new sub-state, or -1. *start is set when the
   byte begins a character (that is when a character is counted). A bare '"' is not content. */
static int gm_str_sub(int sub, unsigned c, int *start) {
    *start = 0;
    int hex = (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'f');
    switch (sub) {
    case GS_IDLE:
        *start = 1;
        if (c == '"' || c < 0x20) return -1;
        if (c == '\\') return GS_BS;
        if (c < 0x80) return GS_IDLE;
        if (c >= 0xC2 && c <= 0xDF) return GS_C1;
        if (c == 0xE0) return GS_E0;
        if (c == 0xED) return GS_ED;
        if (c >= 0xE1 && c <= 0xEF) return GS_C2;
        if (c == 0xF0) return GS_F0;
        if (c >= 0xF1 && c <= 0xF3) return GS_C3;
        if (c == 0xF4) return GS_F4;
        return -1;
    case GS_C1: return c >= 0x80 && c <= 0xBF ? GS_IDLE : -1;
    case GS_C2: return c >= 0x80 && c <= 0xBF ? GS_C1 : -1;
    case GS_C3: return c >= 0x80 && c <= 0xBF ? GS_C2 : -1;
    case GS_E0: return c >= 0xA0 && c <= 0xBF ? GS_C1 : -1;
    case GS_ED: return c >= 0x80 && c <= 0x9F ? GS_C1 : -1;
    case GS_F0: return c >= 0x90 && c <= 0xBF ? GS_C2 : -1;
    case GS_F4: return c >= 0x80 && c <= 0x8F ? GS_C2 : -1;
    case GS_BS: return strchr("\"\\/bfnrt", (int)c) && c ? GS_IDLE : c == 'u' ? GS_U0 : -1;
    case GS_U0: return (c | 32) == 'd' ? GS_U1D : hex ? GS_U1 : -1;
    case GS_U1: return hex ? GS_U2 : -1;
    case GS_U1D:
        if (c >= '0' && c <= '7') return GS_U2;
        if (c == '8' || c == '9' || (c | 32) == 'a' || (c | 32) == 'b') return GS_U2H;
        return -1;                                   /* a lone low surrogate */
    case GS_U2: return hex ? GS_U3 : -1;
    case GS_U2H: return hex ? GS_U3H : -1;
    case GS_U3: return hex ? GS_IDLE : -1;
    case GS_U3H: return hex ? GS_LBS : -1;
    case GS_LBS: return c == '\\' ? GS_LU : -1;
    case GS_LU: return c == 'u' ? GS_L0 : -1;
    case GS_L0: return (c | 32) == 'd' ? GS_L1 : -1;
    case GS_L1: return (c | 32) >= 'c' && (c | 32) <= 'f' ? GS_L2 : -1;
    case GS_L2: return hex ? GS_L3 : -1;
    case GS_L3: return hex ? GS_IDLE : -1;
    }
    return -1;
}

/* One byte of raw text from UTF-8 state sub: the new state or -1. *start: the byte begins a
   character; *done: it ends one, *ws then says whether that character is whitespace (Python's
   str.isspace, which the reply parser strips). */
static int gm_raw_sub(int sub, unsigned c, int *start, int *done, int *ws) {
    int cont = c >= 0x80 && c <= 0xBF;
    *start = *done = *ws = 0;
    switch (sub) {
    case GS_IDLE:
        *start = 1;
        if (c < 0x80) {
            *done = 1;
            *ws = (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
            return GS_IDLE;
        }
        if (c == 0xC2) return GR_C2;
        if (c >= 0xC3 && c <= 0xDF) return GS_C1;
        if (c == 0xE0) return GS_E0;
        if (c == 0xE1) return GR_E1;
        if (c == 0xE2) return GR_E2;
        if (c == 0xE3) return GR_E3;
        if (c == 0xED) return GS_ED;
        if (c >= 0xE4 && c <= 0xEF) return GS_C2;
        if (c == 0xF0) return GS_F0;
        if (c >= 0xF1 && c <= 0xF3) return GS_C3;
        if (c == 0xF4) return GS_F4;
        return -1;
    case GR_C2: *done = cont; *ws = c == 0x85 || c == 0xA0; return cont ? GS_IDLE : -1;
    case GS_C1: *done = cont; return cont ? GS_IDLE : -1;
    case GR_E1: return c == 0x9A ? GR_E1_9A : cont ? GS_C1 : -1;
    case GR_E2: return c == 0x80 ? GR_E2_80 : c == 0x81 ? GR_E2_81 : cont ? GS_C1 : -1;
    case GR_E3: return c == 0x80 ? GR_E3_80 : cont ? GS_C1 : -1;
    case GR_E1_9A: *done = cont; *ws = c == 0x80; return cont ? GS_IDLE : -1;
    case GR_E2_80:
        *done = cont;
        *ws = c <= 0x8A || c == 0xA8 || c == 0xA9 || c == 0xAF;
        return cont ? GS_IDLE : -1;
    case GR_E2_81: *done = cont; *ws = c == 0x9F; return cont ? GS_IDLE : -1;
    case GR_E3_80: *done = cont; *ws = c == 0x80; return cont ? GS_IDLE : -1;
    case GS_C2: case GS_C3: case GS_E0: case GS_ED: case GS_F0: case GS_F4: {
        int s2 = gm_str_sub(sub, c, start);
        *start = 0;
        return s2;
    }
    }
    return -1;
}

/* How much of "</arg_value>" or "</tool_call>" the text ends with, after one more byte: 0 none,
   1 "<", 2 "</", 3..11 that many bytes of </arg_value>, 12..20 of </tool_call> (9 + length); -1
   when the byte completes one. Neither text holds '<' past its start, so a miss falls back to 0,
   or to 1 on '<'. */
static int gm_tag_progress(int p, unsigned c) {
    static const char A[] = "</arg_value>", T[] = "</tool_call>";
    if (p == 1 && c == '/') return 2;
    if (p == 2 && c == 'a') return 3;
    if (p == 2 && c == 't') return 12;
    if (p >= 3 && p <= 11 && c == (unsigned char)A[p]) return p + 1 == 12 ? -1 : p + 1;
    if (p >= 12 && c == (unsigned char)T[p - 9]) return p - 9 + 1 == 12 ? -1 : p + 1;
    return c == '<';
}

/* One byte of a flagged string (see GmElem) from sub-state sub: the new sub-state or -1; *start:
   the byte begins a character. Sub-state bits: 0-4 the UTF-8 / escape state, 5-9 the tag progress,
   10 the last character was whitespace, 11 a character was written (raw text). */
static int gm_flagged_sub(uint32_t flags, uint32_t sub, unsigned c, int *start) {
    int u = (int)(sub & 31), p = (int)(sub >> 5 & 31), wsl = (int)(sub >> 10 & 1);
    int st = (int)(sub >> 11 & 1);
    if (flags & GM_STR_RAW) {
        int done, ws;
        u = gm_raw_sub(u, c, start, &done, &ws);
        if (u < 0) return -1;
        if (done) {
            if (!st && ws) return -1;   /* the parser would strip it */
            st = 1;
            wsl = ws;
        }
    } else if ((u = gm_str_sub(u, c, start)) < 0) return -1;
    if ((p = gm_tag_progress(p, c)) < 0) return -1;
    return u | p << 5 | wsl << 10 | st << 11;
}

static int gm_trie_node(GmTrie *t) {
    if (gm_grow((void **)&t->node, &t->cap_node, t->n_node + 1, sizeof *t->node)) return -1;
    memset(&t->node[t->n_node], 0, sizeof *t->node);
    return (int)t->n_node++;
}

typedef struct { const unsigned char *p; uint32_t len, id; } GmItem;

static int gm_item_cmp(const void *a, const void *b) {
    const GmItem *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = n ? memcmp(x->p, y->p, n) : 0;
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Builds the subtree of items[lo, hi) (sorted; sharing their first depth bytes). */
static int gm_trie_build(GmTrie *t, const GmItem *it, uint32_t lo, uint32_t hi, uint32_t depth) {
    int nd = gm_trie_node(t);
    if (nd < 0) return -1;
    t->node[nd].tfirst = lo;
    while (lo < hi && it[lo].len == depth) lo++;
    t->node[nd].ntok = lo - t->node[nd].tfirst;
    uint32_t groups = 0;
    for (uint32_t i = lo; i < hi; i++)
        if (i == lo || it[i].p[depth] != it[i - 1].p[depth]) groups++;
    uint32_t first = t->n_edge;
    if (gm_grow((void **)&t->eb, &t->cap_eb, first + groups, 1) ||
        gm_grow((void **)&t->en, &t->cap_edge, first + groups, sizeof *t->en)) return -1;
    t->n_edge += groups;
    t->node[nd].first = first;
    t->node[nd].n = groups;
    uint32_t e = first;
    for (uint32_t i = lo; i < hi;) {
        uint32_t j = i + 1;
        while (j < hi && it[j].p[depth] == it[i].p[depth]) j++;
        int child = gm_trie_build(t, it, i, j, depth + 1);
        if (child < 0) return -1;
        t->eb[e] = it[i].p[depth];
        t->en[e] = (uint32_t)child;
        e++;
        i = j;
    }
    return nd;
}

static int gm_trie_make(GmTrie *t, GmItem *it, uint32_t n) {
    memset(t, 0, sizeof *t);
    qsort(it, n, sizeof *it, gm_item_cmp);
    t->tok = malloc((size_t)(n + 1) * sizeof *t->tok);
    if (!t->tok) return -1;
    for (uint32_t i = 0; i < n; i++) t->tok[i] = it[i].id;
    t->n_tok = n;
    return gm_trie_build(t, it, 0, n, 0) < 0 ? -1 : 0;
}

static void gm_trie_free(GmTrie *t) {
    free(t->node);
    free(t->eb);
    free(t->en);
    free(t->tok);
    memset(t, 0, sizeof *t);
}

void grammar_vocab_free(GrammarVocab *v) {
    if (!v) return;
    free(v->bytes);
    free(v->off);
    free(v->len);
    free(v->is_eos);
    gm_trie_free(&v->trie);
    free(v->wle);
    free(v->within_all);
    free(v->long_tok);
    free(v->long_d);
    free(v->exit_tok);
    free(v->exit_d);
    gm_trie_free(&v->exit_trie);
    free(v->tagtext);
    free(v);
}

size_t grammar_mask_words(const GrammarVocab *v) { return v ? v->words : 0; }

GrammarVocab *grammar_vocab_new(int n, const char *const *piece, const size_t *len,
                                const int *eos, int n_eos, char *err, size_t err_len) {
    return grammar_vocab_new_tags(n, piece, len, eos, n_eos, NULL, err, err_len);
}

static int gm_find(const char *s, size_t n, const char *t) {
    size_t k = strlen(t);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, t, k)) return 1;
    return 0;
}

static int gm_has_marker(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] >= GM_TAG_BYTE0) return 1;
    return 0;
}

GrammarVocab *grammar_vocab_new_tags(int n, const char *const *piece, const size_t *len,
                                     const int *eos, int n_eos, const int tag[GRAMMAR_N_TAGS],
                                     char *err, size_t err_len) {
    static const unsigned char tag_byte[GRAMMAR_N_TAGS] = {
        GM_TAG_BYTE0, GM_TAG_BYTE0 + 1, GM_TAG_BYTE0 + 2,
        GM_TAG_BYTE0 + 3, GM_TAG_BYTE0 + 4, GM_TAG_BYTE0 + 5};
    if (err && err_len) err[0] = 0;
    if (n <= 0 || !piece || !len) {
        if (err && err_len) snprintf(err, err_len, "vocabulary: no tokens");
        return NULL;
    }
    GrammarVocab *v = calloc(1, sizeof *v);
    GmItem *it = NULL;
    if (!v) goto oom;
    v->n = n;
    v->words = ((size_t)n + 63) / 64;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        size_t l = piece[i] ? len[i] : 0;
        if (l > 4096) {   /* the trie walk recurses once per byte */
            if (err && err_len)
                snprintf(err, err_len, "vocabulary: token %d is %zu bytes long (most 4096)", i, l);
            grammar_vocab_free(v);
            return NULL;
        }
        total += l;
    }
    v->bytes = malloc(total + 1 + GRAMMAR_N_TAGS);   /* tags get one byte each */
    v->off = malloc((size_t)n * sizeof *v->off);
    v->len = malloc((size_t)n * sizeof *v->len);
    v->is_eos = calloc((size_t)n, 1);
    it = malloc((size_t)n * sizeof *it);
    v->wle = calloc((size_t)GM_WLE * v->words, 8);
    v->within_all = calloc(v->words, 8);
    v->tagtext = calloc(v->words, 8);
    if (!v->bytes || !v->off || !v->len || !v->is_eos || !it || !v->wle || !v->within_all ||
        !v->tagtext)
        goto oom;
    for (int i = 0; i < n_eos; i++)
        if (eos && eos[i] >= 0 && eos[i] < n) v->is_eos[eos[i]] = 1;
    size_t pos = 0;
    uint32_t m = 0;
    for (int i = 0; i < n; i++) {
        const char *pc = piece[i];
        size_t l = pc ? len[i] : 0;
        if (gm_has_marker(pc, l)) l = 0;   /* an ordinary token with a tag's byte: never */
        for (int k = 0; tag && k < GRAMMAR_N_TAGS; k++)
            if (tag[k] == i) { pc = (const char *)&tag_byte[k]; l = 1; }
        v->off[i] = pos;
        v->len[i] = (uint32_t)l;
        if (l) memcpy(v->bytes + pos, pc, l);
        pos += l;
        if (l > 1 && (gm_find(pc, l, "</arg_value>") || gm_find(pc, l, "</tool_call>")))
            v->tagtext[i >> 6] |= 1ull << (i & 63);
        if (l && !v->is_eos[i])
            it[m++] =
                (GmItem){(const unsigned char *)v->bytes + v->off[i], (uint32_t)l, (uint32_t)i};
    }
    /* string profiles (m bounds every list) */
    uint32_t *exit_sfx = malloc((size_t)(m + 1) * 4);
    v->long_tok = malloc((size_t)(m + 1) * 4);
    v->long_d = malloc((size_t)(m + 1) * 4);
    v->exit_tok = malloc((size_t)(m + 1) * 4);
    v->exit_d = malloc((size_t)(m + 1) * 4);
    if (!exit_sfx || !v->long_tok || !v->long_d || !v->exit_tok || !v->exit_d) {
        free(exit_sfx);
        goto oom;
    }
    for (uint32_t k = 0; k < m; k++) {
        const unsigned char *p = it[k].p;
        uint32_t l = it[k].len, d = 0, i;
        int sub = GS_IDLE, kind = GP_WITHIN;
        for (i = 0; i < l; i++) {
            int start;
            if (sub == GS_IDLE && p[i] == '"') { kind = GP_EXIT; break; }
            sub = gm_str_sub(sub, p[i], &start);
            if (sub < 0) { kind = GP_REJECT; break; }
            d += (uint32_t)start;
        }
        uint32_t id = it[k].id;
        if (kind == GP_WITHIN) {
            v->within_all[id >> 6] |= 1ull << (id & 63);
            if (d > v->dmax) v->dmax = d;
            for (uint32_t w = d; w < GM_WLE; w++)
                v->wle[(size_t)w * v->words + (id >> 6)] |= 1ull << (id & 63);
            if (d >= GM_WLE) {
                v->long_tok[v->n_long] = id;
                v->long_d[v->n_long++] = d;
            }
        } else if (kind == GP_EXIT) {
            v->exit_tok[v->n_exit] = id;
            v->exit_d[v->n_exit] = d;
            exit_sfx[v->n_exit++] = i + 1;
        }
    }
    GmItem *sit = malloc((size_t)(v->n_exit + 1) * sizeof *sit);
    if (!sit) { free(exit_sfx); goto oom; }
    for (uint32_t j = 0; j < v->n_exit; j++) {
        uint32_t id = v->exit_tok[j];
        sit[j] = (GmItem){(const unsigned char *)v->bytes + v->off[id] + exit_sfx[j],
                          v->len[id] - exit_sfx[j], j};
    }
    free(exit_sfx);
    int bad = gm_trie_make(&v->exit_trie, sit, v->n_exit);
    free(sit);
    if (bad || gm_trie_make(&v->trie, it, m)) goto oom;
    free(it);
    return v;
oom:
    free(it);
    grammar_vocab_free(v);
    if (err && err_len) snprintf(err, err_len, "vocabulary: out of memory");
    return NULL;
}

/* ==== matcher ================================================================================ */

/* Stacks are linked lists of frames in an arena (shared tails); a state is a set of stack tops in
   ss, -1 standing for the empty stack (the answer is complete). [0, live) of the arena and [0, nx)
   of ss hold the current state; everything above is scratch for one operation. */
typedef struct {
    uint32_t pos, aux;
    int32_t parent;
    uint32_t depth, h;
} GmNode; /* h: of the chain */

struct GrammarMatcher {
    Grammar *g;
    const GrammarVocab *v;
    GmNode *nd;
    uint32_t nn, cap_nd, live;
    int32_t *ss;
    uint32_t ns, cap_ss, nx;
    int done, oom;
    uint32_t *key;
    uint32_t cap_key;
    int32_t *work;             /* gm_close's work list */
    uint32_t nwork, cap_work;
    /* one walk's distinct sets (ss[w_off, w_off + w_n)) and their byte transitions (GM_UNSEEN,
       GM_DEAD or a set id), so that the walk steps each set by each byte at most once */
    uint32_t *w_off, *w_n, *w_h, w_count, cap_w, cap_w2, cap_w3, cap_wt;
    uint8_t *w_live;
    uint32_t cap_wl;
    int32_t *w_trans;
    uint32_t *w_ht, w_htcap;
    uint64_t *hit;             /* exit entries whose suffix fits */
};

static int32_t gm_new(GrammarMatcher *m, uint32_t pos, uint32_t aux, int32_t parent) {
    if (m->oom) return -2;
    if (gm_grow((void **)&m->nd, &m->cap_nd, m->nn + 1, sizeof *m->nd)) { m->oom = 1; return -2; }
    uint32_t h =
        (parent < 0 ? 0x9E3779B9u : m->nd[parent].h) ^ (pos * 0x85EBCA6Bu + aux * 0xC2B2AE35u);
    h = (h ^ h >> 15) * 0x2C1B3C6Du;
    m->nd[m->nn] =
        (GmNode){pos, aux, parent, parent < 0 ? 1 : m->nd[parent].depth + 1, h ^ h >> 13};
    return (int32_t)m->nn++;
}

static int gm_same(const GrammarMatcher *m, int32_t a, int32_t b) {
    while (a != b) {
        if (a < 0 || b < 0) return 0;
        if (m->nd[a].pos != m->nd[b].pos || m->nd[a].aux != m->nd[b].aux) return 0;
        a = m->nd[a].parent;
        b = m->nd[b].parent;
    }
    return 1;
}

static void gm_add(GrammarMatcher *m, uint32_t out, int32_t n) {
    for (uint32_t i = out; i < m->ns; i++)
        if (gm_same(m, m->ss[i], n)) return;
    if (gm_grow((void **)&m->ss, &m->cap_ss, m->ns + 1, sizeof *m->ss)) { m->oom = 1; return; }
    m->ss[m->ns++] = n;
}

static void gm_work(GrammarMatcher *m, int32_t n) {
    if (n < -1) return;   /* -2: allocation failed (m->oom is set) */
    if (gm_grow((void **)&m->work, &m->cap_work, m->nwork + 1, sizeof *m->work)) {
        m->oom = 1;
        return;
    }
    m->work[m->nwork++] = n;
}

static void gm_work_rule(GrammarMatcher *m, uint32_t rule, int32_t parent) {
    const Grammar *g = m->g;
    if ((parent < 0 ? 0 : m->nd[parent].depth) + 1 > GRAMMAR_MAX_DEPTH) return;
    for (uint32_t a = 0; a < g->rule_nalt[rule]; a++)
        gm_work(m, gm_new(m, g->alt[g->rule_alt[rule] + a], 0, parent));
}

/* Adds to ss[out..] the stacks reachable from stack n without consuming a byte, each with a
   consuming element (BYTES, STR) on top, or -1 for the empty stack. Iterative (a work list), so
   long chains of rules cost no C stack; a closure that creates more than GM_CLOSE_BUDGET frames
   (a grammar with exponentially many ways to match nothing) fails like running out of memory. */
#define GM_CLOSE_BUDGET (1u << 22)
static void gm_close(GrammarMatcher *m, int32_t n0, uint32_t out) {
    const Grammar *g = m->g;
    uint32_t base = m->nwork, budget = m->nn + GM_CLOSE_BUDGET;
    gm_work(m, n0);
    while (m->nwork > base && !m->oom) {
        int32_t n = m->work[--m->nwork];
        if (m->nn > budget) { m->oom = 1; break; }
        if (n < 0) { gm_add(m, out, -1); continue; }
        GmNode d = m->nd[n];
        const GmElem *e = &g->el[d.pos];
        switch (e->kind) {
        case GM_BYTES: gm_add(m, out, n); break;
        case GM_END:
            if (d.parent < 0) gm_add(m, out, -1);
            else if (g->el[m->nd[d.parent].pos].kind == GM_REP)
                gm_work(m, d.parent); /* repeat again? */
            else gm_work(m, gm_new(m, m->nd[d.parent].pos + 1, 0, m->nd[d.parent].parent));
            break;
        case GM_RULE:   /* a rule that ends its alternative replaces the frame (tail call) */
            gm_work_rule(m, e->arg, g->el[d.pos + 1].kind == GM_END ? d.parent : n);
            break;
        case GM_STR: {
            uint32_t sh = gm_str_shift(e), sub = d.aux & ((1u << sh) - 1), c = d.aux >> sh;
            int idle = (sub & 31) == GS_IDLE;
            /* raw text ends after a character that is not whitespace (or none) */
            if (idle && c >= e->min && !((e->arg & GM_STR_RAW) && (sub >> 10 & 1)))
                gm_work(m, gm_new(m, d.pos + 1, 0, d.parent));
            if (!idle || e->max == GM_INF || c < e->max) gm_add(m, out, n);
            break;
        }
        case GM_REP: {
            uint32_t c = d.aux;
            if (c >= e->min) gm_work(m, gm_new(m, d.pos + 1, 0, d.parent));
            if (e->max == GM_INF || c < e->max) {
                uint32_t c1 = c + 1;
                if (e->max == GM_INF && c1 > e->min) c1 = e->min;   /* only "reached min" matters */
                int32_t rp = gm_new(m, d.pos, c1, d.parent);
                if (rp >= 0) gm_work_rule(m, e->arg, rp);
            }
            break;
        }
        }
    }
    m->nwork = base;
}

/* Steps the set ss[xo, xo + nx) by byte b; the result is appended to ss. Returns its size. */
static uint32_t gm_step(GrammarMatcher *m, uint32_t xo, uint32_t nx, unsigned b) {
    const Grammar *g = m->g;
    uint32_t out = m->ns;
    for (uint32_t i = 0; i < nx; i++) {
        int32_t n = m->ss[xo + i];
        if (n < 0) continue;
        GmNode d = m->nd[n];
        const GmElem *e = &g->el[d.pos];
        if (e->kind == GM_BYTES) {
            if (g->cls[e->arg][b >> 6] >> (b & 63) & 1)
                gm_close(m, gm_new(m, d.pos + 1, 0, d.parent), out);
        } else if (e->kind == GM_STR) {
            uint32_t sh = gm_str_shift(e), c = d.aux >> sh, old = d.aux & ((1u << sh) - 1);
            int start, sub = e->arg ? gm_flagged_sub(e->arg, old, b, &start)
                                    : gm_str_sub((int)old, b, &start);
            if (sub < 0) continue;
            if (start) {
                if (e->max != GM_INF && c >= e->max) continue;
                c++;
                if (e->max == GM_INF && c > e->min) c = e->min;
            }
            gm_close(m, gm_new(m, d.pos, c << sh | (uint32_t)sub, d.parent), out);
        }
    }
    return m->ns - out;
}

static int gm_has_consumer(const GrammarMatcher *m, uint32_t o, uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        if (m->ss[o + i] >= 0) return 1;
    return 0;
}

#define GM_UNSEEN (-1)
#define GM_DEAD (-2)

static uint32_t gm_set_hash(const GrammarMatcher *m, uint32_t o, uint32_t n) {
    uint32_t h = n * 0x9E3779B9u;
    for (uint32_t i = 0; i < n; i++) {   /* order-independent: a set */
        uint32_t x = m->ss[o + i] < 0 ? 0x7F4A7C15u : m->nd[m->ss[o + i]].h;
        x = (x ^ x >> 16) * 0x45D9F3Bu;
        h += x ^ x >> 16;
    }
    return h;
}

static int gm_set_same(const GrammarMatcher *m, uint32_t a, uint32_t na, uint32_t b, uint32_t nb) {
    if (na != nb) return 0;
    for (uint32_t i = 0; i < na; i++) {
        uint32_t j = 0;
        while (j < nb && !gm_same(m, m->ss[a + i], m->ss[b + j])) j++;
        if (j == nb) return 0;
    }
    return 1;
}

/* The id of the set ss[o, o + n) among this walk's sets; a new set is added (it stays in ss and
   the arena), a known one is reported through *known (the caller then drops its copy). -1: out of
   memory. */
static int32_t gm_intern(GrammarMatcher *m, uint32_t o, uint32_t n, int *known) {
    uint32_t h = gm_set_hash(m, o, n);
    *known = 0;
    if ((m->w_count + 1) * 2 > m->w_htcap) {
        uint32_t nc = m->w_htcap ? m->w_htcap * 2 : 1024;
        uint32_t *t = calloc(nc, sizeof *t);
        if (!t) { m->oom = 1; return -1; }
        for (uint32_t id = 0; id < m->w_count; id++) {
            uint32_t i = m->w_h[id] & (nc - 1);
            while (t[i]) i = (i + 1) & (nc - 1);
            t[i] = id + 1;
        }
        free(m->w_ht);
        m->w_ht = t;
        m->w_htcap = nc;
    }
    uint32_t i = h & (m->w_htcap - 1);
    for (; m->w_ht[i]; i = (i + 1) & (m->w_htcap - 1)) {
        uint32_t id = m->w_ht[i] - 1;
        if (m->w_h[id] == h && gm_set_same(m, m->w_off[id], m->w_n[id], o, n)) {
            *known = 1;
            return (int32_t)id;
        }
    }
    uint32_t id = m->w_count;
    if (gm_grow((void **)&m->w_off, &m->cap_w, id + 1, 4) ||
        gm_grow((void **)&m->w_n, &m->cap_w2, id + 1, 4) ||
        gm_grow((void **)&m->w_h, &m->cap_w3, id + 1, 4) ||
        gm_grow((void **)&m->w_live, &m->cap_wl, id + 1, 1) ||
        gm_grow((void **)&m->w_trans, &m->cap_wt, (id + 1) * 256, 4)) {
        m->oom = 1;
        return -1;
    }
    m->w_off[id] = o;
    m->w_n[id] = n;
    m->w_h[id] = h;
    m->w_live[id] = (uint8_t)gm_has_consumer(m, o, n);
    memset(m->w_trans + (size_t)id * 256, 0xFF, 256 * sizeof *m->w_trans);   /* GM_UNSEEN */
    m->w_ht[i] = id + 1;
    m->w_count++;
    return (int32_t)id;
}

/* Walks without the transition tables: every trie edge steps the set. */
static void gm_walk_plain(GrammarMatcher *m, const GmTrie *t, uint32_t node, uint32_t xo,
                          uint32_t nx, uint64_t *hit) {
    const GmTNode *tn = &t->node[node];
    for (uint32_t e = tn->first; e < tn->first + tn->n; e++) {
        uint32_t mk = m->nn, so = m->ns;
        uint32_t ny = gm_step(m, xo, nx, t->eb[e]);
        if (ny) {
            const GmTNode *c = &t->node[t->en[e]];
            for (uint32_t k = c->tfirst; k < c->tfirst + c->ntok; k++)
                hit[t->tok[k] >> 6] |= 1ull << (t->tok[k] & 63);
            if (c->n && gm_has_consumer(m, so, ny)) gm_walk_plain(m, t, t->en[e], so, ny, hit);
        }
        m->nn = mk;
        m->ns = so;
    }
}

/* One walk keeps at most this many sets (256 transitions each: 4 MiB); a grammar whose states
   tell every prefix apart (a large alternation of literals) walks on without tables past it. */
#ifndef GRAMMAR_WALK_SETS
#define GRAMMAR_WALK_SETS 4096
#endif
#define GM_PLAIN (-3)

/* The set that set id becomes on byte b (GM_DEAD: none survives), computed once per walk;
   GM_PLAIN when the tables are full: the new set is then at ss[*so, *so + *ny), above the marks
   *mk / *so. */
static int32_t gm_trans(GrammarMatcher *m, int32_t id, unsigned b, uint32_t *mk, uint32_t *so,
                        uint32_t *ny) {
    int32_t d = m->w_trans[(size_t)id * 256 + b];
    if (d != GM_UNSEEN) return d;
    *mk = m->nn;
    *so = m->ns;
    *ny = gm_step(m, m->w_off[id], m->w_n[id], b);
    int known = 0;
    if (!*ny || m->oom) d = GM_DEAD;
    else if (m->w_count >= GRAMMAR_WALK_SETS) {
        uint32_t h = gm_set_hash(m, *so, *ny), i = h & (m->w_htcap - 1);   /* a known set still */
        for (d = GM_PLAIN; m->w_ht[i]; i = (i + 1) & (m->w_htcap - 1)) {
            uint32_t k = m->w_ht[i] - 1;
            if (m->w_h[k] == h && gm_set_same(m, m->w_off[k], m->w_n[k], *so, *ny)) {
                d = (int32_t)k;
                known = 1;
                break;
            }
        }
        if (d == GM_PLAIN) return d;
    } else d = gm_intern(m, *so, *ny, &known);
    if (d < 0) d = GM_DEAD;
    if (d == GM_DEAD || known) { m->nn = *mk; m->ns = *so; }
    m->w_trans[(size_t)id * 256 + b] = d;
    return d;
}

static void gm_walk_from(GrammarMatcher *m, const GmTrie *t, uint32_t node, int32_t id,
                         uint64_t *hit) {
    const GmTNode *tn = &t->node[node];
    for (uint32_t e = tn->first; e < tn->first + tn->n; e++) {
        uint32_t mk = 0, so = 0, ny = 0;
        int32_t d = gm_trans(m, id, t->eb[e], &mk, &so, &ny);
        if (d == GM_DEAD) continue;
        const GmTNode *c = &t->node[t->en[e]];
        for (uint32_t k = c->tfirst; k < c->tfirst + c->ntok; k++)
            hit[t->tok[k] >> 6] |= 1ull << (t->tok[k] & 63);
        if (d == GM_PLAIN) {
            if (c->n && gm_has_consumer(m, so, ny)) gm_walk_plain(m, t, t->en[e], so, ny, hit);
            m->nn = mk;
            m->ns = so;
        } else if (c->n && m->w_live[d]) gm_walk_from(m, t, t->en[e], d, hit);
    }
}

/* Marks in hit every token of trie t whose bytes can be consumed from the set ss[xo, xo + nx). The
   caller drops the arena and ss above its mark afterwards. */
static void gm_walk(GrammarMatcher *m, const GmTrie *t, uint32_t xo, uint32_t nx, uint64_t *hit) {
    m->w_count = 0;
    if (m->w_htcap) memset(m->w_ht, 0, (size_t)m->w_htcap * sizeof *m->w_ht);
    int known;
    int32_t root = gm_intern(m, xo, nx, &known);
    if (root >= 0) gm_walk_from(m, t, 0, root, hit);
}

/* Tokens allowed from a stack whose top is string content in the idle sub-state (see
   GrammarVocab). */
static void gm_str_mask(GrammarMatcher *m, int32_t n, uint64_t *mask) {
    const GrammarVocab *v = m->v;
    GmNode d = m->nd[n];
    const GmElem *e = &m->g->el[d.pos];
    uint32_t c = d.aux >> gm_str_shift(e);
    uint32_t rem = e->max == GM_INF ? GM_INF : e->max - c;
    size_t W = v->words;
    /* a tag-safe string drops the tokens that spell a tag (from no partial tag: see the caller) */
    const uint64_t keepall = ~0ull, *drop = e->arg & GM_STR_TAGSAFE ? v->tagtext : NULL;
    if (rem >= v->dmax) {
        for (size_t w = 0; w < W; w++) mask[w] |= v->within_all[w] & (drop ? ~drop[w] : keepall);
    } else {
        const uint64_t *s = v->wle + (size_t)(rem < GM_WLE ? rem : GM_WLE - 1) * W;
        for (size_t w = 0; w < W; w++) mask[w] |= s[w] & (drop ? ~drop[w] : keepall);
        for (uint32_t i = 0; i < v->n_long; i++) {
            uint32_t t = v->long_tok[i];
            if (v->long_d[i] <= rem && !(drop && (drop[t >> 6] >> (t & 63) & 1)))
                mask[t >> 6] |= 1ull << (t & 63);
        }
    }
    if (!v->n_exit) return;
    uint32_t dlo = e->min > c ? e->min - c : 0;
    uint32_t mk = m->nn, so = m->ns;
    gm_close(m, gm_new(m, d.pos + 1, 0, d.parent), so);
    uint32_t n0 = m->ns - so, yo = m->ns;
    uint32_t ny = gm_step(m, so, n0, '"');
    if (ny) {
        size_t hw = ((size_t)v->n_exit + 63) / 64;
        memset(m->hit, 0, hw * 8);
        const GmTNode *root = &v->exit_trie.node[0];
        for (uint32_t k = root->tfirst; k < root->tfirst + root->ntok; k++) {
            uint32_t j = v->exit_trie.tok[k];
            m->hit[j >> 6] |= 1ull << (j & 63);
        }
        if (gm_has_consumer(m, yo, ny)) gm_walk(m, &v->exit_trie, yo, ny, m->hit);
        for (uint32_t j = 0; j < v->n_exit; j++) {
            uint32_t t = v->exit_tok[j];
            if ((m->hit[j >> 6] >> (j & 63) & 1) && v->exit_d[j] >= dlo && v->exit_d[j] <= rem &&
                !(drop && (drop[t >> 6] >> (t & 63) & 1)))
                mask[t >> 6] |= 1ull << (t & 63);
        }
    }
    m->nn = mk;
    m->ns = so;
}

/* Copies the set ss[o, o + n) into a fresh arena as the current state. */
static int gm_commit(GrammarMatcher *m, uint32_t o, uint32_t n) {
    GmNode *old = m->nd;
    uint32_t old_n = m->nn;
    int32_t *tops = malloc((size_t)(n + 1) * sizeof *tops);
    GmNode *nd = malloc(((size_t)old_n + 1) * sizeof *nd);
    int32_t *map = malloc(((size_t)old_n + 1) * sizeof *map);
    if (!tops || !nd || !map) { free(tops); free(nd); free(map); m->oom = 1; return -1; }
    for (uint32_t i = 0; i < old_n; i++) map[i] = -1;
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        int32_t t = m->ss[o + i], chain[GRAMMAR_MAX_DEPTH + 2];
        int depth = 0;
        for (int32_t x = t; x >= 0 && map[x] < 0; x = old[x].parent) chain[depth++] = x;
        for (int j = depth - 1; j >= 0; j--) {
            GmNode c = old[chain[j]];
            c.parent = c.parent >= 0 ? map[c.parent] : -1;
            map[chain[j]] = (int32_t)k;
            nd[k++] = c;
        }
        tops[i] = t >= 0 ? map[t] : -1;
    }
    free(map);
    free(old);
    m->nd = nd;
    m->cap_nd = old_n + 1;
    m->nn = m->live = k;
    memcpy(m->ss, tops, (size_t)n * sizeof *tops);
    m->ns = m->nx = n;
    free(tops);
    return 0;
}

GrammarMatcher *grammar_matcher_new(Grammar *g, const GrammarVocab *v) {
    if (!g || !v) return NULL;
    GrammarMatcher *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->g = g;
    m->v = v;
    m->hit = calloc(((size_t)v->n_exit + 63) / 64 + 1, 8);
    if (!m->hit) { free(m); return NULL; }
    gm_work_rule(m, g->root, -1);
    uint32_t k = m->nwork;
    int32_t *roots = malloc(((size_t)k + 1) * sizeof *roots);
    if (!roots) m->oom = 1;
    else memcpy(roots, m->work, (size_t)k * sizeof *roots);
    m->nwork = 0;
    for (uint32_t i = 0; i < k && !m->oom; i++) gm_close(m, roots[i], 0);
    free(roots);
    if (m->oom || gm_commit(m, 0, m->ns)) { grammar_matcher_free(m); return NULL; }
    return m;
}

GrammarMatcher *grammar_matcher_clone(const GrammarMatcher *src) {
    if (!src) return NULL;
    GrammarMatcher *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    *m = *src;
    m->nd = malloc(((size_t)src->live + 1) * sizeof *m->nd);
    m->ss = malloc(((size_t)src->nx + 1) * sizeof *m->ss);
    m->hit = calloc(((size_t)src->v->n_exit + 63) / 64 + 1, 8);
    m->key = NULL;
    m->cap_key = 0;
    m->work = NULL;
    m->nwork = m->cap_work = 0;
    m->w_off = m->w_n = m->w_h = m->w_ht = NULL;
    m->w_live = NULL;
    m->w_trans = NULL;
    m->w_count = m->cap_w = m->cap_w2 = m->cap_w3 = m->cap_wt = m->cap_wl = m->w_htcap = 0;
    if (!m->nd || !m->ss || !m->hit) { grammar_matcher_free(m); return NULL; }
    memcpy(m->nd, src->nd, (size_t)src->live * sizeof *m->nd);
    memcpy(m->ss, src->ss, (size_t)src->nx * sizeof *m->ss);
    m->nn = m->live;
    m->cap_nd = m->live + 1;
    m->ns = m->nx;
    m->cap_ss = m->nx + 1;
    return m;
}

void grammar_matcher_free(GrammarMatcher *m) {
    if (!m) return;
    free(m->nd);
    free(m->ss);
    free(m->key);
    free(m->hit);
    free(m->work);
    free(m->w_off);
    free(m->w_n);
    free(m->w_h);
    free(m->w_live);
    free(m->w_trans);
    free(m->w_ht);
    free(m);
}

int grammar_matcher_complete(const GrammarMatcher *m) {
    if (!m || m->done) return 0;
    for (uint32_t i = 0; i < m->nx; i++)
        if (m->ss[i] < 0) return 1;
    return 0;
}

int grammar_matcher_can_continue(const GrammarMatcher *m) {
    return m && !m->done && gm_has_consumer(m, 0, m->nx);
}

int grammar_matcher_finished(const GrammarMatcher *m) { return m && m->done; }

/* Runs bytes from the set at ss[o, o + n): returns the new set's offset via *ro, its size. */
static uint32_t gm_run(GrammarMatcher *m, uint32_t o, uint32_t n, const unsigned char *s,
                       size_t len, uint32_t *ro) {
    for (size_t i = 0; i < len && n; i++) {
        uint32_t yo = m->ns;
        n = gm_step(m, o, n, s[i]);
        o = yo;
    }
    *ro = o;
    return n;
}

static int gm_accept_run(GrammarMatcher *m, const unsigned char *s, size_t len) {
    if (m->done || !len) return 0;
    uint32_t o;
    uint32_t n = gm_run(m, 0, m->nx, s, len, &o);
    if (m->oom) { m->nn = m->live; m->ns = m->nx; m->oom = 0; return -1; }
    if (!n) { m->nn = m->live; m->ns = m->nx; return 0; }
    return gm_commit(m, o, n) ? -1 : 1;
}

int grammar_matcher_accept_bytes(GrammarMatcher *m, const char *s, size_t n) {
    if (!m) return -1;
    return gm_accept_run(m, (const unsigned char *)s, n);
}

int grammar_matcher_accept(GrammarMatcher *m, int token) {
    if (!m || token < 0 || token >= m->v->n || m->done) return m ? 0 : -1;
    if (m->v->is_eos[token]) {
        if (!grammar_matcher_complete(m)) return 0;
        m->done = 1;
        return 1;
    }
    return gm_accept_run(m, (const unsigned char *)m->v->bytes + m->v->off[token],
                         m->v->len[token]);
}

int grammar_matcher_check(GrammarMatcher *m, const int *tokens, int n) {
    if (!m) return -1;
    uint32_t o = 0, cnt = m->nx;
    int ok = 0, done = m->done;
    for (int i = 0; i < n && !done; i++) {
        int t = tokens[i];
        if (t < 0 || t >= m->v->n) break;
        if (m->v->is_eos[t]) {
            int complete = 0;
            for (uint32_t k = 0; k < cnt; k++) complete |= m->ss[o + k] < 0;
            if (!complete) break;
            done = 1;
            ok++;
            continue;
        }
        if (!m->v->len[t]) break;
        cnt =
            gm_run(m, o, cnt, (const unsigned char *)m->v->bytes + m->v->off[t], m->v->len[t], &o);
        if (!cnt || m->oom) break;
        ok++;
    }
    int oom = m->oom;
    m->nn = m->live;
    m->ns = m->nx;
    m->oom = 0;
    return oom ? -1 : ok;
}

/* ---- the mask cache ---- */

static uint64_t gm_hash(const uint32_t *k, uint32_t n) {
    uint64_t h = 1469598103934665603ull;
    for (uint32_t i = 0; i < n; i++) { h ^= k[i]; h *= 1099511628211ull; h ^= h >> 29; }
    return h | 1;   /* 0 marks an empty slot */
}

static void gm_cache_clear(Grammar *g) {
    for (size_t i = 0; i < g->cache_cap; i++) { free(g->cache[i].key); free(g->cache[i].mask); }
    free(g->cache);
    g->cache = NULL;
    g->cache_cap = g->cache_n = g->cache_bytes = 0;
}

/* The state as a key: each stack's frames from the top, then a separator. */
static uint32_t gm_key(GrammarMatcher *m) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < m->nx; i++) {
        for (int32_t x = m->ss[i]; ; x = m->nd[x].parent) {
            if (gm_grow((void **)&m->key, &m->cap_key, n + 2, 4)) { m->oom = 1; return 0; }
            if (x < 0) { m->key[n++] = GM_INF; break; }
            m->key[n++] = m->nd[x].pos;
            m->key[n++] = m->nd[x].aux;
        }
    }
    return n;
}

static GmCacheEnt *gm_cache_find(Grammar *g, uint64_t h, const uint32_t *k, uint32_t n) {
    if (!g->cache_cap) return NULL;
    for (size_t i = h & (g->cache_cap - 1);; i = (i + 1) & (g->cache_cap - 1)) {
        GmCacheEnt *e = &g->cache[i];
        if (!e->h) return e;
        if (e->h == h && e->klen == n && !memcmp(e->key, k, (size_t)n * 4)) return e;
    }
}

static void gm_cache_put(Grammar *g, const GrammarVocab *v, uint64_t h, const uint32_t *k,
                         uint32_t n, const uint64_t *mask, int count) {
    size_t bytes = v->words * 8 + (size_t)n * 4 + sizeof(GmCacheEnt);
    if (g->cache_bytes + bytes > GRAMMAR_CACHE_BYTES) gm_cache_clear(g);
    if ((g->cache_n + 1) * 2 > g->cache_cap) {
        size_t nc = g->cache_cap ? g->cache_cap * 2 : 64;
        GmCacheEnt *old = g->cache, *nw = calloc(nc, sizeof *nw);
        if (!nw) return;
        size_t oc = g->cache_cap;
        g->cache = nw;
        g->cache_cap = nc;
        for (size_t i = 0; i < oc; i++)
            if (old[i].h) *gm_cache_find(g, old[i].h, old[i].key, old[i].klen) = old[i];
        free(old);
    }
    GmCacheEnt *e = gm_cache_find(g, h, k, n);
    if (e->h) return;
    uint32_t *kc = malloc((size_t)n * 4 + 1);
    uint64_t *mc = malloc(v->words * 8);
    if (!kc || !mc) { free(kc); free(mc); return; }
    memcpy(kc, k, (size_t)n * 4);
    memcpy(mc, mask, v->words * 8);
    *e = (GmCacheEnt){h, kc, n, mc, count};
    g->cache_n++;
    g->cache_bytes += bytes;
}

/* A stack whose mask the string profiles give (gm_str_mask): inside a JSON string, between
   characters, with no partial tag text behind (tag-safe). Raw text is walked. */
static int gm_str_fast(const Grammar *g, const GmNode *d) {
    const GmElem *e = &g->el[d->pos];
    if (e->kind != GM_STR || (e->arg & GM_STR_RAW)) return 0;
    return (d->aux & ((1u << gm_str_shift(e)) - 1)) == GS_IDLE;
}

int grammar_matcher_mask(GrammarMatcher *m, uint64_t *mask) {
    if (!m || !mask) return -1;
    const GrammarVocab *v = m->v;
    Grammar *g = m->g;
    memset(mask, 0, v->words * 8);
    if (m->done) return 0;
    if (g->cache_vocab != v) { gm_cache_clear(g); g->cache_vocab = v; }
    uint32_t kn = gm_key(m);
    if (m->oom) { m->oom = 0; return -1; }
    uint64_t h = gm_hash(m->key, kn);
    GmCacheEnt *ce = gm_cache_find(g, h, m->key, kn);
    if (ce && ce->h) { memcpy(mask, ce->mask, v->words * 8); return ce->count; }
    if (grammar_matcher_complete(m))
        for (int t = 0; t < v->n; t++)
            if (v->is_eos[t]) mask[t >> 6] |= 1ull << (t & 63);
    uint32_t go = m->ns;
    for (uint32_t i = 0; i < m->nx; i++) {
        int32_t n = m->ss[i];
        if (n >= 0 && !gm_str_fast(g, &m->nd[n])) gm_add(m, go, n);
    }
    uint32_t gn = m->ns - go;
    for (uint32_t i = 0; i < m->nx; i++) {
        int32_t n = m->ss[i];
        if (n >= 0 && gm_str_fast(g, &m->nd[n])) gm_str_mask(m, n, mask);
    }
    if (gn) gm_walk(m, &v->trie, go, gn, mask);
    int oom = m->oom;
    m->nn = m->live;
    m->ns = m->nx;
    m->oom = 0;
    if (oom) return -1;
    int count = 0;
    for (size_t w = 0; w < v->words; w++) count += __builtin_popcountll(mask[w]);
    gm_cache_put(g, v, h, m->key, kn, mask, count);
    return count;
}

void grammar_apply_mask(float *logits, const uint64_t *mask, int n) {
    for (int t = 0; t < n; t++)
        if (!(mask[t >> 6] >> (t & 63) & 1)) logits[t] = -INFINITY;
}

void grammar_free(Grammar *g) {
    if (!g) return;
    gm_cache_clear(g);
    free(g->el);
    free(g->cls);
    free(g->alt);
    free(g->rule_alt);
    free(g->rule_nalt);
    free(g);
}

/* ==== JSON schema ============================================================================ */

enum {
    JK_NULL = 1,
    JK_BOOL = 2,
    JK_OBJ = 4,
    JK_ARR = 8,
    JK_STR = 16,
    JK_INT = 32,
    JK_FRAC = 64,
    JK_ALL = 127
};

typedef struct {
    GmB b;
    const JsonValue *root;
    int ws_max;
    char path[1024];
    size_t plen;
    const JsonValue **memo_v;
    int *memo_r;
    uint32_t n_memo, cap_memo, cap_memo_r;
    int r_wsb, r_value, r_object, r_digit;
    int depth;                 /* schema nesting, $ref included */
    int tool;                  /* a tool call's argument: strings and literals are tag-safe */
    const char *where;         /* errors name the schema so instead of "#" (NULL: "#") */
} GmSC;

static const char *const gm_annotations[] = {
    "title",   "description", "default",  "examples",  "$schema", "$id",         "$comment",
    "$anchor", "deprecated",  "readOnly", "writeOnly", "$defs",   "definitions", NULL};
static const char *const gm_supported[] = {"type",
                                           "properties",
                                           "required",
                                           "additionalProperties",
                                           "enum",
                                           "const",
                                           "items",
                                           "minItems",
                                           "maxItems",
                                           "minLength",
                                           "maxLength",
                                           "anyOf",
                                           "oneOf",
                                           "allOf",
                                           "$ref",
                                           "minimum",
                                           "maximum",
                                           "exclusiveMinimum",
                                           "exclusiveMaximum",
                                           "uniqueItems",
                                           NULL};

static int gm_in(const char *k, size_t kl, const char *const *list) {
    for (int i = 0; list[i]; i++)
        if (strlen(list[i]) == kl && !memcmp(list[i], k, kl)) return 1;
    return 0;
}

static int sc_fail(GmSC *c, const char *fmt, ...) {
    if (!c->b.failed && c->b.err && c->b.err_len) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        const char *path = c->plen ? c->path : "#";
        if (c->where && path[0] == '#') snprintf(c->b.err, c->b.err_len, "%s%s: %s", c->where,
                                                 path + 1, msg);
        else snprintf(c->b.err, c->b.err_len, "%s: %s", path, msg);
        gm_one_line(c->b.err);
    }
    c->b.failed = 1;
    return -1;
}

static size_t sc_push(GmSC *c, const char *seg, size_t n) {
    size_t old = c->plen;
    if (!c->plen) { c->path[0] = '#'; c->plen = 1; }
    if (c->plen + n + 2 < sizeof c->path) {
        c->path[c->plen++] = '/';
        memcpy(c->path + c->plen, seg, n);
        c->plen += n;
    }
    c->path[c->plen] = 0;
    return old;
}

static void sc_pop(GmSC *c, size_t old) { c->plen = old; c->path[old] = 0; }

static void sc_ws(GmSC *c, GmSeq *s) {
    if (c->ws_max > 0) gm_seq_push(&c->b, s, GM_REP, (uint32_t)c->r_wsb, 0, (uint32_t)c->ws_max);
}

/* Compact JSON text of a value (an enum / const literal), appended to w's buffer as raw pieces. */
typedef struct { char *p; size_t n, cap; int oom; } GmBuf;

static void gm_buf_put(GmBuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 64;
        while (nc < b->n + n + 1) nc *= 2;
        char *q = realloc(b->p, nc);
        if (!q) { b->oom = 1; return; }
        b->p = q;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

/* One scalar through json.h's writer (its escaping and number formatting). */
static void gm_buf_scalar(GmBuf *b, const JsonValue *v, const char *s, size_t n) {
    JsonWriter w;
    jw_init(&w);
    int64_t i;
    if (s) jw_strn(&w, s, n);
    else if (json_int_literal(v, &i)) jw_int(&w, i);
    else jw_num(&w, json_num(v));
    size_t l;
    const char *t = jw_text(&w, &l);
    if (t) gm_buf_put(b, t, l);
    else b->oom = 1;
    jw_free(&w);
}

static void sc_serialize(GmBuf *b, const JsonValue *v) {
    size_t n;
    const char *s;
    switch (json_type(v)) {
    case JSON_NULL: gm_buf_put(b, "null", 4); break;
    case JSON_BOOL: json_bool(v) ? gm_buf_put(b, "true", 4) : gm_buf_put(b, "false", 5); break;
    case JSON_NUMBER: gm_buf_scalar(b, v, NULL, 0); break;
    case JSON_STRING: s = json_str(v, &n); gm_buf_scalar(b, v, s, n); break;
    case JSON_ARRAY:
        gm_buf_put(b, "[", 1);
        for (size_t k = 0; k < json_len(v); k++) {
            if (k) gm_buf_put(b, ",", 1);
            sc_serialize(b, json_at(v, k));
        }
        gm_buf_put(b, "]", 1);
        break;
    case JSON_OBJECT:
        gm_buf_put(b, "{", 1);
        for (size_t k = 0; k < json_len(v); k++) {
            if (k) gm_buf_put(b, ",", 1);
            s = json_key_at(v, k, &n);
            gm_buf_scalar(b, v, s, n);
            gm_buf_put(b, ":", 1);
            sc_serialize(b, json_value_at(v, k));
        }
        gm_buf_put(b, "}", 1);
        break;
    }
}

static char *sc_literal(const JsonValue *v, size_t *len) {
    GmBuf b = {0};
    sc_serialize(&b, v);
    if (b.oom || !b.p) { free(b.p); *len = 0; return NULL; }
    *len = b.n;
    return b.p;
}

static int gm_lit_cmp(const void *a, const void *b) {
    const GmItem *x = a, *y = b;
    return gm_item_cmp(x, y);
}

/* A rule matching exactly the literals it[lo, hi) (sorted, distinct), factored as a trie so that
   the matcher follows one stack. */
static int sc_lit_rule(GmB *b, const GmItem *it, uint32_t lo, uint32_t hi, uint32_t depth) {
    int r = gm_rule(b, "literal");
    GmSeq s = {0};
    if (lo < hi && it[lo].len == depth) { gm_alt(b, r, &s); lo++; }
    for (uint32_t i = lo; i < hi && !b->failed;) {
        uint32_t j = i + 1;
        while (j < hi && it[j].p[depth] == it[i].p[depth]) j++;
        if (j == i + 1) {
            gm_seq_lit(b, &s, (const char *)it[i].p + depth, it[i].len - depth);
        } else {   /* the group's common prefix, then a rule for where it branches */
            uint32_t cp = depth, lim = it[i].len < it[j - 1].len ? it[i].len : it[j - 1].len;
            while (cp < lim && it[i].p[cp] == it[j - 1].p[cp]) cp++;
            gm_seq_lit(b, &s, (const char *)it[i].p + depth, cp - depth);
            gm_seq_push(b, &s, GM_RULE, (uint32_t)sc_lit_rule(b, it, i, j, cp), 0, 0);
        }
        gm_alt(b, r, &s);
        i = j;
    }
    return r;
}

static int sc_literals(GmB *b, char **lits, size_t *lens, uint32_t n) {
    GmItem *it = malloc((size_t)(n + 1) * sizeof *it);
    if (!it) return gm_fail(b, "out of memory");
    for (uint32_t i = 0; i < n; i++)
        it[i] = (GmItem){(const unsigned char *)lits[i], (uint32_t)lens[i], 0};
    qsort(it, n, sizeof *it, gm_lit_cmp);
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++)
        if (!m || it[i].len != it[m - 1].len || memcmp(it[i].p, it[m - 1].p, it[i].len))
            it[m++] = it[i];
    int r = sc_lit_rule(b, it, 0, m, 0);
    free(it);
    return r;
}

/* ---- free JSON ---- */

static int sc_string_rule(GmSC *c, uint32_t min, uint32_t max) {
    GmSeq s = {0};
    gm_seq_lit(&c->b, &s, "\"", 1);
    gm_seq_push(&c->b, &s, GM_STR, c->tool ? GM_STR_TAGSAFE : 0, min, max);
    gm_seq_lit(&c->b, &s, "\"", 1);
    return gm_rule_seq(&c->b, "string", &s);
}

static int sc_number_rule(GmSC *c) {
    GmB *b = &c->b;
    GmSeq s = {0};
    gm_seq_lit(b, &s, "-", 1);
    int minus = gm_rule_seq(b, "minus", &s);
    int ip = gm_rule(b, "integer part");
    gm_seq_lit(b, &s, "0", 1);
    gm_alt(b, ip, &s);
    gm_seq_range(b, &s, '1', '9');
    gm_seq_push(b, &s, GM_REP, (uint32_t)c->r_digit, 0, 15);
    gm_alt(b, ip, &s);
    gm_seq_lit(b, &s, ".", 1);
    gm_seq_push(b, &s, GM_REP, (uint32_t)c->r_digit, 1, 16);
    int frac = gm_rule_seq(b, "fraction", &s);
    gm_seq_range(b, &s, '+', '+');
    int sign = gm_rule(b, "exponent sign");
    gm_alt(b, sign, &s);
    gm_seq_range(b, &s, '-', '-');
    gm_alt(b, sign, &s);
    uint64_t ee[4] = {0, 0, 0, 0};
    ee[1] |= 1ull << ('e' - 64) | 1ull << ('E' - 64);
    gm_seq_cls(b, &s, ee);
    gm_seq_push(b, &s, GM_REP, (uint32_t)sign, 0, 1);
    gm_seq_push(b, &s, GM_REP, (uint32_t)c->r_digit, 1, 2);
    int ex = gm_rule_seq(b, "exponent", &s);
    gm_seq_push(b, &s, GM_REP, (uint32_t)minus, 0, 1);
    gm_seq_push(b, &s, GM_RULE, (uint32_t)ip, 0, 0);
    gm_seq_push(b, &s, GM_REP, (uint32_t)frac, 0, 1);
    gm_seq_push(b, &s, GM_REP, (uint32_t)ex, 0, 1);
    return gm_rule_seq(b, "number", &s);
}

/* "open" ws "close" | "open" ws item (ws "," ws item){min-1, max-1} ws "close" */
static int sc_list(GmSC *c, const char *name, char open, char close, int item, uint32_t min,
                   uint32_t max) {
    GmB *b = &c->b;
    int r = gm_rule(b, name);
    GmSeq s = {0};
    if (min == 0) {
        gm_seq_lit(b, &s, &open, 1);
        sc_ws(c, &s);
        gm_seq_lit(b, &s, &close, 1);
        gm_alt(b, r, &s);
    }
    if (max >= 1) {
        sc_ws(c, &s);
        gm_seq_lit(b, &s, ",", 1);
        sc_ws(c, &s);
        gm_seq_push(b, &s, GM_RULE, (uint32_t)item, 0, 0);
        int more = gm_rule_seq(b, "more items", &s);
        gm_seq_lit(b, &s, &open, 1);
        sc_ws(c, &s);
        gm_seq_push(b, &s, GM_RULE, (uint32_t)item, 0, 0);
        gm_seq_push(b, &s, GM_REP, (uint32_t)more, min > 1 ? min - 1 : 0,
                    max == GM_INF ? GM_INF : max - 1);
        sc_ws(c, &s);
        gm_seq_lit(b, &s, &close, 1);
        gm_alt(b, r, &s);
    }
    return r;
}

/* key ws ":" ws value, key a rule */
static int sc_member(GmSC *c, int key, int value) {
    GmSeq s = {0};
    gm_seq_push(&c->b, &s, GM_RULE, (uint32_t)key, 0, 0);
    sc_ws(c, &s);
    gm_seq_lit(&c->b, &s, ":", 1);
    sc_ws(c, &s);
    gm_seq_push(&c->b, &s, GM_RULE, (uint32_t)value, 0, 0);
    return gm_rule_seq(&c->b, "member", &s);
}

static int sc_free_value(GmSC *c) {
    if (c->r_value >= 0) return c->r_value;
    GmB *b = &c->b;
    int v = c->r_value = gm_rule(b, "any value");
    int str = sc_string_rule(c, 0, GM_INF);
    c->r_object = sc_list(c, "any object", '{', '}', sc_member(c, str, v), 0, GM_INF);
    int arr = sc_list(c, "any array", '[', ']', v, 0, GM_INF);
    int num = sc_number_rule(c);
    const int rules[4] = {c->r_object, arr, str, num};
    GmSeq s = {0};
    for (int i = 0; i < 4; i++) {
        gm_seq_push(b, &s, GM_RULE, (uint32_t)rules[i], 0, 0);
        gm_alt(b, v, &s);
    }
    const char *words[3] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) { gm_seq_lit(b, &s, words[i], strlen(words[i])); gm_alt(b, v, &s); }
    return v;
}

/* ---- integers in a range: a digit automaton ---- */

/* Decimal strings of n digits from x to y (x <= y, both n digits). */
static int sc_fixed(GmSC *c, const char *x, const char *y, int n) {
    GmB *b = &c->b;
    int r = gm_rule(b, "digits");
    GmSeq s = {0};
    int tail_free = 1;
    for (int i = 1; i < n; i++)
        if (x[i] != '0' || y[i] != '9') tail_free = 0;
    if (tail_free) {
        gm_seq_range(b, &s, (unsigned char)x[0], (unsigned char)y[0]);
        for (int i = 1; i < n; i++) gm_seq_range(b, &s, '0', '9');
        gm_alt(b, r, &s);
        return r;
    }
    char nines[24], zeros[24];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    if (x[0] == y[0]) {
        gm_seq_range(b, &s, (unsigned char)x[0], (unsigned char)x[0]);
        gm_seq_push(b, &s, GM_RULE, (uint32_t)sc_fixed(c, x + 1, y + 1, n - 1), 0, 0);
        gm_alt(b, r, &s);
        return r;
    }
    gm_seq_range(b, &s, (unsigned char)x[0], (unsigned char)x[0]);
    gm_seq_push(b, &s, GM_RULE, (uint32_t)sc_fixed(c, x + 1, nines, n - 1), 0, 0);
    gm_alt(b, r, &s);
    if (x[0] + 1 <= y[0] - 1) {
        gm_seq_range(b, &s, (unsigned char)(x[0] + 1), (unsigned char)(y[0] - 1));
        for (int i = 1; i < n; i++) gm_seq_range(b, &s, '0', '9');
        gm_alt(b, r, &s);
    }
    gm_seq_range(b, &s, (unsigned char)y[0], (unsigned char)y[0]);
    gm_seq_push(b, &s, GM_RULE, (uint32_t)sc_fixed(c, zeros, y + 1, n - 1), 0, 0);
    gm_alt(b, r, &s);
    return r;
}

/* Adds to rule r the alternatives [minus] (decimal of a..z without leading zeros). */
static void sc_uint_range(GmSC *c, int r, uint64_t a, uint64_t z, int minus) {
    uint64_t p10 = 1;
    for (int L = 1; L <= 20; L++) {
        uint64_t lo = L == 1 ? 0 : p10, hi = L == 20 ? UINT64_MAX : p10 * 10 - 1;
        if (lo < a) lo = a;
        if (hi > z) hi = z;
        if (lo <= hi && !(L > 1 && lo < p10)) {
            char x[24], y[24];
            snprintf(x, sizeof x, "%0*llu", L, (unsigned long long)lo);
            snprintf(y, sizeof y, "%0*llu", L, (unsigned long long)hi);
            GmSeq s = {0};
            if (minus) gm_seq_lit(&c->b, &s, "-", 1);
            gm_seq_push(&c->b, &s, GM_RULE, (uint32_t)sc_fixed(c, x, y, L), 0, 0);
            gm_alt(&c->b, r, &s);
        }
        if (L == 20 || p10 > z / 10) break;
        p10 *= 10;
    }
}

static int sc_int_range(GmSC *c, int64_t lo, int64_t hi) {
    int r = gm_rule(&c->b, "integer");
    if (lo < 0) {
        uint64_t mhi = (uint64_t)(-(lo + 1)) + 1, mlo = hi < 0 ? (uint64_t)(-(hi + 1)) + 1 : 1;
        sc_uint_range(c, r, mlo, mhi, 1);
    }
    if (hi >= 0) sc_uint_range(c, r, lo > 0 ? (uint64_t)lo : 0, (uint64_t)hi, 0);
    return r;
}

/* ---- schema nodes ---- */

static int sc_schema(GmSC *c, const JsonValue *s);

static const JsonValue *sc_resolve(GmSC *c, const char *ref, size_t n) {
    if (!n || ref[0] != '#') return NULL;
    const JsonValue *v = c->root;
    size_t i = 1;
    if (i < n && ref[i] != '/') return NULL;
    while (i < n && v) {
        i++;   /* '/' */
        char seg[512];
        size_t k = 0;
        while (i < n && ref[i] != '/') {
            char ch = ref[i++];
            if (ch == '~' && i < n && (ref[i] == '0' || ref[i] == '1'))
                ch = ref[i++] == '0' ? '~' : '/';
            else if (ch == '%' && i + 1 < n) {   /* percent-encoding (URI fragment) */
                unsigned hv;
                char hx[3] = {ref[i], ref[i + 1], 0};
                if (sscanf(hx, "%2x", &hv) == 1) { ch = (char)hv; i += 2; }
            }
            if (k + 1 >= sizeof seg) return NULL;   /* no key that long is resolved */
            seg[k++] = ch;
        }
        seg[k] = 0;
        if (json_type(v) == JSON_OBJECT) v = json_getn(v, seg, k);
        else if (json_type(v) == JSON_ARRAY) {
            char *end;
            unsigned long idx = strtoul(seg, &end, 10);
            v = *seg && !*end ? json_at(v, idx) : NULL;
        } else v = NULL;
    }
    return v;
}

/* JSON kinds a schema accepts (validation, not generation), for oneOf. */
static int sc_kinds(GmSC *c, const JsonValue *s, int depth) {
    if (depth > 64 || json_type(s) != JSON_OBJECT) return json_bool(s) == 0 ? 0 : JK_ALL;
    const JsonValue *ref = json_get(s, "$ref");
    size_t n;
    if (ref) {
        const char *rs = json_str(ref, &n);
        const JsonValue *t = rs ? sc_resolve(c, rs, n) : NULL;
        return t ? sc_kinds(c, t, depth + 1) : JK_ALL;
    }
    const JsonValue *lits[2] = {json_get(s, "enum"), json_get(s, "const")};
    int k = JK_ALL;
    for (int li = 0; li < 2; li++) {
        if (!lits[li]) continue;
        int lk = 0;
        size_t m = li == 0 ? json_len(lits[li]) : 1;
        for (size_t i = 0; i < m; i++) {
            const JsonValue *x = li == 0 ? json_at(lits[li], i) : lits[li];
            int64_t iv;
            switch (json_type(x)) {
            case JSON_NULL: lk |= JK_NULL; break;
            case JSON_BOOL: lk |= JK_BOOL; break;
            case JSON_OBJECT: lk |= JK_OBJ; break;
            case JSON_ARRAY: lk |= JK_ARR; break;
            case JSON_STRING: lk |= JK_STR; break;
            case JSON_NUMBER: lk |= json_is_int(x, &iv) ? JK_INT : JK_FRAC; break;
            }
        }
        k &= lk;
    }
    const JsonValue *t = json_get(s, "type");
    if (t) {
        int tk = 0;
        size_t m = json_type(t) == JSON_ARRAY ? json_len(t) : 1;
        for (size_t i = 0; i < m; i++) {
            const char *ts = json_str(json_type(t) == JSON_ARRAY ? json_at(t, i) : t, &n);
            if (!ts) continue;
            if (!strcmp(ts, "null")) tk |= JK_NULL;
            else if (!strcmp(ts, "boolean")) tk |= JK_BOOL;
            else if (!strcmp(ts, "object")) tk |= JK_OBJ;
            else if (!strcmp(ts, "array")) tk |= JK_ARR;
            else if (!strcmp(ts, "string")) tk |= JK_STR;
            else if (!strcmp(ts, "integer")) tk |= JK_INT;
            else if (!strcmp(ts, "number")) tk |= JK_INT | JK_FRAC;
        }
        k &= tk;
    }
    const char *alts[2] = {"anyOf", "oneOf"};
    for (int ai = 0; ai < 2; ai++) {
        const JsonValue *a = json_get(s, alts[ai]);
        if (json_type(a) != JSON_ARRAY) continue;
        int u = 0;
        for (size_t i = 0; i < json_len(a); i++) u |= sc_kinds(c, json_at(a, i), depth + 1);
        k &= u;
    }
    return k;
}

/* The serialized literals a schema is limited to (enum / const), or 0 if it is not. */
static int sc_lits(GmSC *c, const JsonValue *s, char ***out, size_t **lens, uint32_t *n) {
    const JsonValue *ref = json_get(s, "$ref");
    size_t rl;
    const char *rs = json_str(ref, &rl);
    if (rs) s = sc_resolve(c, rs, rl);
    const JsonValue *e = json_get(s, "enum"), *k = json_get(s, "const");
    if (!e && !k) return 0;
    size_t m = k ? 1 : json_len(e);
    *out = calloc(m + 1, sizeof **out);
    *lens = calloc(m + 1, sizeof **lens);
    *n = 0;
    if (!*out || !*lens) return 0;
    for (size_t i = 0; i < m; i++) {
        (*out)[*n] = sc_literal(k ? k : json_at(e, i), &(*lens)[*n]);
        if ((*out)[*n]) (*n)++;
    }
    return 1;
}

static void sc_lits_free(char **l, size_t *lens, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) free(l[i]);
    free(l);
    free(lens);
}

static int sc_lits_disjoint(GmSC *c, const JsonValue *a, const JsonValue *b) {
    char **la = NULL, **lb = NULL;
    size_t *na = NULL, *nb = NULL;
    uint32_t ca = 0, cb = 0;
    int ok = sc_lits(c, a, &la, &na, &ca) && sc_lits(c, b, &lb, &nb, &cb);
    for (uint32_t i = 0; ok && i < ca; i++)
        for (uint32_t j = 0; j < cb; j++)
            if (na[i] == nb[j] && !memcmp(la[i], lb[j], na[i])) ok = 0;
    sc_lits_free(la, na, ca);
    sc_lits_free(lb, nb, cb);
    return ok;
}

static int sc_required(const JsonValue *s, const char *k, size_t kl) {
    const JsonValue *r = json_get(s, "required");
    for (size_t i = 0; i < json_len(r); i++) {
        size_t n;
        const char *x = json_str(json_at(r, i), &n);
        if (x && n == kl && !memcmp(x, k, n)) return 1;
    }
    return 0;
}

/* Two object schemas that a required property with disjoint enum / const values tells apart. */
static int sc_discriminated(GmSC *c, const JsonValue *a, const JsonValue *b) {
    size_t n;
    const char *rs;
    if ((rs = json_str(json_get(a, "$ref"), &n))) a = sc_resolve(c, rs, n);
    if ((rs = json_str(json_get(b, "$ref"), &n))) b = sc_resolve(c, rs, n);
    const JsonValue *pa = json_get(a, "properties"), *pb = json_get(b, "properties");
    for (size_t i = 0; i < json_len(pa); i++) {
        const char *k = json_key_at(pa, i, &n);
        const JsonValue *x = json_value_at(pa, i), *y = json_getn(pb, k, n);
        if (y && sc_required(a, k, n) && sc_required(b, k, n) && sc_lits_disjoint(c, x, y))
            return 1;
    }
    return 0;
}

static int sc_get_count(GmSC *c, const JsonValue *s, const char *key, uint32_t limit,
                        uint32_t *out) {
    const JsonValue *v = json_get(s, key);
    if (!v) return 0;
    int64_t i;
    if (!json_is_int(v, &i) || i < 0) return sc_fail(c, "%s must be a non-negative integer", key);
    if ((uint64_t)i > limit) return sc_fail(c, "%s above %u is not enforced", key, limit);
    *out = (uint32_t)i;
    return 0;
}

/* Constraining keywords next to one that must stand alone ($ref, anyOf, enum): refused by name. */
static int sc_alone(GmSC *c, const JsonValue *s, const char *what, const char *const *also_ok) {
    for (size_t i = 0; i < json_len(s); i++) {
        size_t kl;
        const char *k = json_key_at(s, i, &kl);
        if (gm_in(k, kl, gm_annotations) || (kl == strlen(what) && !memcmp(k, what, kl))) continue;
        if (also_ok && gm_in(k, kl, also_ok)) continue;
        if (kl == 11 && !memcmp(k, "uniqueItems", 11) && json_bool(json_value_at(s, i)) == 0)
            continue;
        return sc_fail(c, "keyword '%.*s' next to %s is not enforced", (int)kl, k, what);
    }
    return 0;
}

static int sc_memo(GmSC *c, const JsonValue *s) {
    for (uint32_t i = 0; i < c->n_memo; i++)
        if (c->memo_v[i] == s) return c->memo_r[i];
    return -1;
}

/* In a tool call's argument a literal must not spell the tag that would end it early. */
static int sc_tagsafe_lit(GmSC *c, const char *p, size_t n) {
    if (c->tool && (gm_find(p, n, "</arg_value>") || gm_find(p, n, "</tool_call>")))
        return sc_fail(c, "a value or name holds the text of a tool-call tag");
    return 0;
}

static int sc_object(GmSC *c, const JsonValue *s) {
    GmB *b = &c->b;
    const JsonValue *props = json_get(s, "properties"), *req = json_get(s, "required");
    const JsonValue *addl = json_get(s, "additionalProperties");
    if (props && json_type(props) != JSON_OBJECT) return sc_fail(c, "properties must be an object");
    if (req && json_type(req) != JSON_ARRAY) return sc_fail(c, "required must be an array");
    if (addl && json_type(addl) != JSON_OBJECT && json_type(addl) != JSON_BOOL)
        return sc_fail(c, "additionalProperties must be a schema");
    for (size_t i = 0; i < json_len(req); i++)
        if (json_type(json_at(req, i)) != JSON_STRING)
            return sc_fail(c, "required must list strings");
    /* the members, in order: properties, then names that are only in required */
    size_t np = json_len(props), nr = json_len(req), n = 0;
    const char **key = calloc(np + nr + 1, sizeof *key);
    size_t *kl = calloc(np + nr + 1, sizeof *kl);
    int *val = calloc(np + nr + 1, sizeof *val), *isreq = calloc(np + nr + 1, sizeof *isreq);
    int r = -1;
    if (!key || !kl || !val || !isreq) { gm_fail(b, "out of memory"); goto out; }
    for (size_t i = 0; i < np; i++) {
        key[n] = json_key_at(props, i, &kl[n]);
        size_t old = sc_push(c, "properties", 10);
        size_t old2 = sc_push(c, key[n], kl[n]);
        val[n] = sc_schema(c, json_value_at(props, i));
        sc_pop(c, old2);
        sc_pop(c, old);
        if (val[n] < 0) goto out;
        isreq[n] = sc_required(s, key[n], kl[n]);
        n++;
    }
    for (size_t i = 0; i < nr; i++) {
        size_t l;
        const char *k = json_str(json_at(req, i), &l);
        if (props && json_getn(props, k, l)) continue;
        int dup = 0;
        for (size_t j = np; j < n; j++) dup |= kl[j] == l && !memcmp(key[j], k, l);
        if (dup) continue;
        if (json_bool(addl) == 0) {
            sc_fail(c, "required '%.*s' is not in properties and additionalProperties is false",
                    (int)l, k);
            goto out;
        }
        key[n] = k;
        kl[n] = l;
        val[n] = json_type(addl) == JSON_OBJECT ? sc_schema(c, addl) : sc_free_value(c);
        if (val[n] < 0) goto out;
        isreq[n++] = 1;
    }
    if (n == 0) {
        if (json_type(addl) == JSON_OBJECT) {   /* a map: any keys, values of that schema */
            size_t old = sc_push(c, "additionalProperties", 20);
            int vr = sc_schema(c, addl);
            sc_pop(c, old);
            if (vr < 0) goto out;
            r = sc_list(c, "map", '{', '}', sc_member(c, sc_string_rule(c, 0, GM_INF), vr), 0,
                        GM_INF);
        } else if (json_bool(addl) == 0 || props) {
            GmSeq e = {0};
            gm_seq_lit(b, &e, "{", 1);
            sc_ws(c, &e);
            gm_seq_lit(b, &e, "}", 1);
            r = gm_rule_seq(b, "empty object", &e);
        } else {
            sc_free_value(c);
            r = c->r_object;
        }
        goto out;
    }
    /* member i written first (no comma) or after another (comma) */
    int *first = calloc(n, sizeof *first), *later = calloc(n, sizeof *later);
    int *tail = calloc(n + 1, sizeof *tail), *head = calloc(n + 1, sizeof *head);
    if (!first || !later || !tail || !head) {
        free(first);
        free(later);
        free(tail);
        free(head);
        gm_fail(b, "out of memory");
        goto out;
    }
    GmSeq q = {0};
    for (size_t i = 0; i < n; i++) {
        JsonWriter w;
        jw_init(&w);
        jw_strn(&w, key[i], kl[i]);
        size_t ql;
        const char *qt = jw_text(&w, &ql);
        if (qt && sc_tagsafe_lit(c, qt, ql)) { jw_free(&w); break; }
        gm_seq_lit(b, &q, qt ? qt : "\"\"", qt ? ql : 2);
        jw_free(&w);
        int kr = gm_rule_seq(b, "key", &q);
        first[i] = sc_member(c, kr, val[i]);
        sc_ws(c, &q);
        gm_seq_lit(b, &q, ",", 1);
        sc_ws(c, &q);
        gm_seq_push(b, &q, GM_RULE, (uint32_t)first[i], 0, 0);
        later[i] = gm_rule_seq(b, "next member", &q);
    }
    /* tail[i]: members i.. after at least one was written; head[i]: at least one of members i.. */
    tail[n] = gm_rule(b, "end of members");
    gm_alt(b, tail[n], &q);
    head[n] = -1;
    for (size_t i = n; i-- > 0;) {
        tail[i] = gm_rule(b, "members");
        gm_seq_push(b, &q, GM_RULE, (uint32_t)later[i], 0, 0);
        gm_seq_push(b, &q, GM_RULE, (uint32_t)tail[i + 1], 0, 0);
        gm_alt(b, tail[i], &q);
        if (!isreq[i]) {
            gm_seq_push(b, &q, GM_RULE, (uint32_t)tail[i + 1], 0, 0);
            gm_alt(b, tail[i], &q);
        }
        head[i] = gm_rule(b, "members");
        gm_seq_push(b, &q, GM_RULE, (uint32_t)first[i], 0, 0);
        gm_seq_push(b, &q, GM_RULE, (uint32_t)tail[i + 1], 0, 0);
        gm_alt(b, head[i], &q);
        if (!isreq[i] && head[i + 1] >= 0) {
            gm_seq_push(b, &q, GM_RULE, (uint32_t)head[i + 1], 0, 0);
            gm_alt(b, head[i], &q);
        }
    }
    int all_optional = 1;
    for (size_t i = 0; i < n; i++) all_optional &= !isreq[i];
    r = gm_rule(b, "object");
    if (all_optional) {
        gm_seq_lit(b, &q, "{", 1);
        sc_ws(c, &q);
        gm_seq_lit(b, &q, "}", 1);
        gm_alt(b, r, &q);
    }
    gm_seq_lit(b, &q, "{", 1);
    sc_ws(c, &q);
    gm_seq_push(b, &q, GM_RULE, (uint32_t)head[0], 0, 0);
    sc_ws(c, &q);
    gm_seq_lit(b, &q, "}", 1);
    gm_alt(b, r, &q);
    free(first);
    free(later);
    free(tail);
    free(head);
out:
    free(key);
    free(kl);
    free(val);
    free(isreq);
    return r;
}

static int sc_bound(GmSC *c, const JsonValue *s, const char *k, int upper, int64_t *out) {
    const JsonValue *v = json_get(s, k);
    if (!v) return 0;
    if (json_type(v) != JSON_NUMBER)
        return sc_fail(c, "%s must be a number (draft-4 booleans are not enforced)", k);
    int excl = k[0] == 'e';
    int64_t i, lit;
    if (json_int_literal(v, &lit)) {
        if (excl && (upper ? lit == INT64_MIN : lit == INT64_MAX))
            return sc_fail(c, "%s leaves no 64-bit integer", k);
        i = excl ? (upper ? lit - 1 : lit + 1) : lit;
    } else {
        double d = json_num(v);
        double x = upper ? (excl ? ceil(d) - 1 : floor(d)) : (excl ? floor(d) + 1 : ceil(d));
        if (x < -9.2e18 || x > 9.2e18)
            return sc_fail(c, "%s beyond the 64-bit integer range is not enforced", k);
        i = (int64_t)x;
    }
    if (upper ? i < *out : i > *out) *out = i;
    return 1;
}

static int sc_typed(GmSC *c, const JsonValue *s, int kinds) {
    GmB *b = &c->b;
    int r = gm_rule(b, "value");
    GmSeq q = {0};
    int has_num = json_get(s, "minimum") || json_get(s, "maximum") ||
                  json_get(s, "exclusiveMinimum") || json_get(s, "exclusiveMaximum");
    if ((kinds & JK_FRAC) && has_num)
        return sc_fail(c, "minimum / maximum are enforced only for type integer, not number");
    if (kinds & JK_NULL) { gm_seq_lit(b, &q, "null", 4); gm_alt(b, r, &q); }
    if (kinds & JK_BOOL) {
        gm_seq_lit(b, &q, "true", 4);
        gm_alt(b, r, &q);
        gm_seq_lit(b, &q, "false", 5);
        gm_alt(b, r, &q);
    }
    if (kinds & JK_FRAC) {
        gm_seq_push(b, &q, GM_RULE, (uint32_t)sc_number_rule(c), 0, 0);
        gm_alt(b, r, &q);
    } else if (kinds & JK_INT) {
        int64_t lo = INT64_MIN, hi = INT64_MAX;
        int hl = sc_bound(c, s, "minimum", 0, &lo) | sc_bound(c, s, "exclusiveMinimum", 0, &lo);
        int hh = sc_bound(c, s, "maximum", 1, &hi) | sc_bound(c, s, "exclusiveMaximum", 1, &hi);
        if (b->failed) return -1;
        const int64_t lim = 9999999999999999LL;
        if (!hl) lo = hh && hi < -lim ? hi : -lim;
        if (!hh) hi = hl && lo > lim ? lo : lim;
        if (lo > hi)
            return sc_fail(c, "no integer lies between minimum %lld and maximum %lld",
                           (long long)lo, (long long)hi);
        gm_seq_push(b, &q, GM_RULE, (uint32_t)sc_int_range(c, lo, hi), 0, 0);
        gm_alt(b, r, &q);
    }
    if (kinds & JK_STR) {
        uint32_t mn = 0, mx = GM_INF;
        uint32_t lim = c->tool ? GM_STR_MAXCOUNT_FLAGGED : GM_STR_MAXCOUNT;
        if (sc_get_count(c, s, "minLength", lim, &mn) || sc_get_count(c, s, "maxLength", lim, &mx))
            return -1;
        if (mn > mx) return sc_fail(c, "minLength %u > maxLength %u", mn, mx);
        gm_seq_push(b, &q, GM_RULE, (uint32_t)sc_string_rule(c, mn, mx), 0, 0);
        gm_alt(b, r, &q);
    }
    if (kinds & JK_ARR) {
        uint32_t mn = 0, mx = GM_INF;
        if (sc_get_count(c, s, "minItems", 1u << 30, &mn) ||
            sc_get_count(c, s, "maxItems", 1u << 30, &mx))
            return -1;
        if (mn > mx) return sc_fail(c, "minItems %u > maxItems %u", mn, mx);
        const JsonValue *items = json_get(s, "items");
        int ir;
        if (json_type(items) == JSON_ARRAY)
            return sc_fail(c, "keyword 'items' as an array (a tuple) is not enforced");
        if (json_bool(items) == 0) {
            if (mn > 0) return sc_fail(c, "items is false but minItems is %u", mn);
            mx = 0;
            ir = sc_free_value(c);
        } else if (items) {
            size_t old = sc_push(c, "items", 5);
            ir = sc_schema(c, items);
            sc_pop(c, old);
        } else ir = sc_free_value(c);
        if (ir < 0) return -1;
        gm_seq_push(b, &q, GM_RULE, (uint32_t)sc_list(c, "array", '[', ']', ir, mn, mx), 0, 0);
        gm_alt(b, r, &q);
    }
    if (kinds & JK_OBJ) {
        int o = sc_object(c, s);
        if (o < 0) return -1;
        gm_seq_push(b, &q, GM_RULE, (uint32_t)o, 0, 0);
        gm_alt(b, r, &q);
    }
    return r;
}

static int sc_schema_body(GmSC *c, const JsonValue *s) {
    GmB *b = &c->b;
    if (json_type(s) == JSON_BOOL) {
        if (!json_bool(s)) return sc_fail(c, "schema false: nothing can match");
        return sc_free_value(c);
    }
    if (json_type(s) != JSON_OBJECT) return sc_fail(c, "a schema must be an object or a boolean");
    for (size_t i = 0; i < json_len(s); i++) {
        size_t kl;
        const char *k = json_key_at(s, i, &kl);
        if (gm_in(k, kl, gm_annotations)) continue;
        if (!gm_in(k, kl, gm_supported))
            return sc_fail(c, "keyword '%.*s' is not enforced", (int)kl, k);
    }
    const JsonValue *uq = json_get(s, "uniqueItems");
    if (uq && json_bool(uq) != 0) return sc_fail(c, "keyword 'uniqueItems' (true) is not enforced");
    const JsonValue *v;
    if ((v = json_get(s, "$ref"))) {
        if (sc_alone(c, s, "$ref", NULL)) return -1;
        size_t n;
        const char *rs = json_str(v, &n);
        const JsonValue *t = rs ? sc_resolve(c, rs, n) : NULL;
        if (!t)
            return sc_fail(c, "$ref '%.*s' does not resolve to a local schema", rs ? (int)n : 0,
                           rs ? rs : "");
        size_t old = c->plen;
        int r = sc_memo(c, t);
        if (r < 0) {
            char saved[1024];
            memcpy(saved, c->path, sizeof saved);
            snprintf(c->path, sizeof c->path, "%.*s", (int)n, rs);
            c->plen = strlen(c->path);
            r = sc_schema(c, t);
            memcpy(c->path, saved, sizeof saved);
        }
        c->plen = old;
        c->path[old] = 0;
        return r;
    }
    const char *combs[3] = {"anyOf", "oneOf", "allOf"};
    for (int ci = 0; ci < 3; ci++) {
        if (!(v = json_get(s, combs[ci]))) continue;
        if (sc_alone(c, s, combs[ci], NULL)) return -1;
        if (json_type(v) != JSON_ARRAY || !json_len(v))
            return sc_fail(c, "%s must be a non-empty array", combs[ci]);
        if (ci == 2 && json_len(v) != 1)
            return sc_fail(c, "allOf with more than one schema is not enforced");
        if (ci == 1)
            for (size_t i = 0; i < json_len(v); i++)
                for (size_t j = i + 1; j < json_len(v); j++) {
                    const JsonValue *x = json_at(v, i), *y = json_at(v, j);
                    if (!(sc_kinds(c, x, 0) & sc_kinds(c, y, 0))) continue;
                    if (sc_lits_disjoint(c, x, y) || sc_discriminated(c, x, y)) continue;
                    return sc_fail(c, "oneOf: branches %zu and %zu may both match (not enforced)",
                                   i, j);
                }
        int r = gm_rule(b, combs[ci]);
        for (size_t i = 0; i < json_len(v); i++) {
            char seg[48];
            int sl = snprintf(seg, sizeof seg, "%s/%zu", combs[ci], i);
            size_t old = sc_push(c, seg, (size_t)sl);
            int br = sc_schema(c, json_at(v, i));
            sc_pop(c, old);
            if (br < 0) return -1;
            GmSeq q = {0};
            gm_seq_push(b, &q, GM_RULE, (uint32_t)br, 0, 0);
            gm_alt(b, r, &q);
        }
        return r;
    }
    int kinds = 0;
    const JsonValue *t = json_get(s, "type");
    if (t) {
        size_t m = json_type(t) == JSON_ARRAY ? json_len(t) : 1;
        if (json_type(t) != JSON_ARRAY && json_type(t) != JSON_STRING)
            return sc_fail(c, "type must be a string or an array");
        for (size_t i = 0; i < m; i++) {
            size_t n;
            const char *ts = json_str(json_type(t) == JSON_ARRAY ? json_at(t, i) : t, &n);
            if (!ts) return sc_fail(c, "type must list strings");
            if (!strcmp(ts, "null")) kinds |= JK_NULL;
            else if (!strcmp(ts, "boolean")) kinds |= JK_BOOL;
            else if (!strcmp(ts, "object")) kinds |= JK_OBJ;
            else if (!strcmp(ts, "array")) kinds |= JK_ARR;
            else if (!strcmp(ts, "string")) kinds |= JK_STR;
            else if (!strcmp(ts, "integer")) kinds |= JK_INT;
            else if (!strcmp(ts, "number")) kinds |= JK_INT | JK_FRAC;
            else return sc_fail(c, "unknown type '%.*s'", (int)n, ts);
        }
    }
    const JsonValue *en = json_get(s, "enum"), *cn = json_get(s, "const");
    if (en || cn) {
        static const char *const type_ok[] = {"type", "enum", "const", NULL};
        if (sc_alone(c, s, en ? "enum" : "const", type_ok)) return -1;
        if (en && json_type(en) != JSON_ARRAY) return sc_fail(c, "enum must be an array");
        int keep = t ? kinds : JK_ALL;
        size_t m = en ? json_len(en) : 1;
        char **lits = calloc(m + 1, sizeof *lits);
        size_t *lens = calloc(m + 1, sizeof *lens);
        uint32_t nl = 0;
        if (!lits || !lens) { free(lits); free(lens); return gm_fail(b, "out of memory"); }
        for (size_t i = 0; i < m; i++) {
            const JsonValue *x = en ? json_at(en, i) : cn;
            int64_t iv;
            int xk = json_type(x) == JSON_NULL ? JK_NULL : json_type(x) == JSON_BOOL ? JK_BOOL
                   : json_type(x) == JSON_OBJECT ? JK_OBJ : json_type(x) == JSON_ARRAY ? JK_ARR
                   : json_type(x) == JSON_STRING ? JK_STR : json_is_int(x, &iv) ? JK_INT : JK_FRAC;
            if (!(xk & keep)) continue;
            /* a const must also be in the enum when both are given */
            if (en && cn) {
                size_t a, bl;
                char *xa = sc_literal(x, &a), *xb = sc_literal(cn, &bl);
                int same = xa && xb && a == bl && !memcmp(xa, xb, a);
                free(xa);
                free(xb);
                if (!same) continue;
            }
            lits[nl] = sc_literal(x, &lens[nl]);
            if (lits[nl] && sc_tagsafe_lit(c, lits[nl], lens[nl])) free(lits[nl]);
            else if (lits[nl]) nl++;
        }
        int r = nl ? sc_literals(b, lits, lens, nl)
                   : sc_fail(c, "%s: no value matches the schema", en ? "enum" : "const");
        sc_lits_free(lits, lens, nl);
        return r;
    }
    if (!t) {   /* no type: what the keywords imply, else anything */
        if (json_get(s, "properties") || json_get(s, "required") ||
            json_get(s, "additionalProperties"))
            kinds |= JK_OBJ;
        if (json_get(s, "items") || json_get(s, "minItems") || json_get(s, "maxItems"))
            kinds |= JK_ARR;
        if (json_get(s, "minLength") || json_get(s, "maxLength")) kinds |= JK_STR;
        if (json_get(s, "minimum") || json_get(s, "maximum") || json_get(s, "exclusiveMinimum") ||
            json_get(s, "exclusiveMaximum"))
            kinds |= JK_INT;
        if (!kinds) return sc_free_value(c);
    }
    return sc_typed(c, s, kinds);
}

#define GM_SCHEMA_DEPTH 256
static int sc_schema(GmSC *c, const JsonValue *s) {
    if (c->b.failed) return -1;
    int r = sc_memo(c, s);
    if (r >= 0) return r;
    if (c->depth >= GM_SCHEMA_DEPTH)
        return sc_fail(c, "schemas nest deeper than %d (counting $ref)", GM_SCHEMA_DEPTH);
    /* register first: a $ref cycle back to s finds this rule */
    r = gm_rule(&c->b, c->plen ? c->path : "#");
    if (r < 0) return -1;
    if (gm_grow((void **)&c->memo_v, &c->cap_memo, c->n_memo + 1, sizeof *c->memo_v) ||
        gm_grow((void **)&c->memo_r, &c->cap_memo_r, c->n_memo + 1, sizeof *c->memo_r))
        return gm_fail(&c->b, "out of memory");
    c->memo_v[c->n_memo] = s;
    c->memo_r[c->n_memo++] = r;
    c->depth++;
    int body = sc_schema_body(c, s);
    c->depth--;
    if (body < 0) return -1;
    GmSeq q = {0};
    gm_seq_push(&c->b, &q, GM_RULE, (uint32_t)body, 0, 0);
    gm_alt(&c->b, r, &q);
    return r;
}

static void sc_init(GmSC *c, const GrammarOptions *opt, char *err, size_t err_len) {
    memset(c, 0, sizeof *c);
    c->b.err = err;
    c->b.err_len = err_len;
    c->ws_max = opt && opt->ws_max >= 0 ? opt->ws_max : 20;
    c->r_value = c->r_object = -1;
    GmSeq q = {0};
    uint64_t ws[4] = {1ull << ' ' | 1ull << '\t' | 1ull << '\n' | 1ull << '\r', 0, 0, 0};
    gm_seq_cls(&c->b, &q, ws);
    c->r_wsb = gm_rule_seq(&c->b, "whitespace", &q);
    gm_seq_range(&c->b, &q, '0', '9');
    c->r_digit = gm_rule_seq(&c->b, "digit", &q);
}

static Grammar *sc_done(GmSC *c, int root) {
    free(c->memo_v);
    free(c->memo_r);
    return gm_finish(&c->b, root, "schema");
}

Grammar *grammar_from_schema(const JsonValue *schema, const GrammarOptions *opt, char *err,
                             size_t err_len) {
    if (err && err_len) err[0] = 0;
    GmSC c;
    sc_init(&c, opt, err, err_len);
    c.root = schema;
    int r = schema ? sc_schema(&c, schema) : sc_fail(&c, "no schema");
    return sc_done(&c, r);
}

Grammar *grammar_from_schema_text(const char *json, size_t len, const GrammarOptions *opt,
                                  char *err, size_t err_len) {
    char jerr[256];
    JsonDoc *d = json_parse(json, len, jerr, sizeof jerr);
    if (!d) {
        if (err && err_len) snprintf(err, err_len, "schema: %.200s", jerr);
        gm_one_line(err);
        return NULL;
    }
    Grammar *g = grammar_from_schema(json_root(d), opt, err, err_len);
    json_free(d);
    return g;
}

Grammar *grammar_json_object(const GrammarOptions *opt) {
    GmSC c;
    sc_init(&c, opt, NULL, 0);
    sc_free_value(&c);
    return sc_done(&c, c.r_object);
}

/* ==== tool calls ============================================================================= */

static int gm_is_space(uint32_t c) {   /* Python's str.isspace, which the reply parser strips */
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Text the reply parser reads back unchanged between two tags: valid UTF-8, no whitespace at
   either end, not the text of the tags that would end it (stop, or NULL). */
static int tc_reads_back(const char *s, size_t n, const char *const *stop) {
    size_t i = 0;
    uint32_t first = 0, last = 0;
    while (i < n) {
        const unsigned char *p = (const unsigned char *)s + i;
        int k = p[0] < 0x80 ? 1 : p[0] >= 0xC2 && p[0] <= 0xDF ? 2
              : p[0] >= 0xE0 && p[0] <= 0xEF ? 3 : p[0] >= 0xF0 && p[0] <= 0xF4 ? 4 : 0;
        if (!k || i + (size_t)k > n) return 0;
        uint32_t cp = k == 1 ? p[0] : p[0] & (0x7F >> k);
        for (int j = 1; j < k; j++) {
            if ((p[j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (p[j] & 0x3F);
        }
        if ((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        if (!i) first = cp;
        last = cp;
        i += (size_t)k;
    }
    if (n && (gm_is_space(first) || gm_is_space(last))) return 0;
    for (int k = 0; stop && stop[k]; k++)
        if (gm_find(s, n, stop[k])) return 0;
    return 1;
}

static void tc_tag(GmB *b, GmSeq *s, int tag) {
    gm_seq_range(b, s, GM_TAG_BYTE0 + (unsigned)tag, GM_TAG_BYTE0 + (unsigned)tag);
}

/* The value of a string-typed argument: the template writes it raw (chat.h), so raw text that reads
   back (tc_reads_back), of the schema's length, or one of its enum / const strings. */
static int tc_raw_value(GmSC *c, const JsonValue *s) {
    static const char *const ok[] = {"type", "minLength", "maxLength", "enum", "const", NULL};
    static const char *const stop[] = {"</arg_value>", "</tool_call>", NULL};
    for (size_t i = 0; i < json_len(s); i++) {
        size_t kl;
        const char *k = json_key_at(s, i, &kl);
        if (!gm_in(k, kl, gm_annotations) && !gm_in(k, kl, ok))
            return sc_fail(c, "keyword '%.*s' is not enforced", (int)kl, k);
    }
    const JsonValue *en = json_get(s, "enum"), *cn = json_get(s, "const");
    if (en || cn) {
        static const char *const type_ok[] = {"type", "enum", "const", NULL};
        if (sc_alone(c, s, en ? "enum" : "const", type_ok)) return -1;
        if (en && json_type(en) != JSON_ARRAY) return sc_fail(c, "enum must be an array");
        size_t m = en ? json_len(en) : 1;
        char **lits = calloc(m + 1, sizeof *lits);
        size_t *lens = calloc(m + 1, sizeof *lens);
        uint32_t nl = 0;
        if (!lits || !lens) { free(lits); free(lens); return gm_fail(&c->b, "out of memory"); }
        for (size_t i = 0; i < m; i++) {
            const JsonValue *x = en ? json_at(en, i) : cn;
            size_t n, kn;
            const char *xs = json_str(x, &n), *ks = cn ? json_str(cn, &kn) : NULL;
            if (!xs || (en && cn && (!ks || kn != n || memcmp(ks, xs, n)))) continue;
            if (!tc_reads_back(xs, n, stop)) {
                sc_lits_free(lits, lens, nl);
                return sc_fail(c, "enum value '%.*s' cannot be written as a raw argument (the "
                               "reply parser strips whitespace at its ends and stops at tags)",
                               (int)(n < 60 ? n : 60), xs);
            }
            if (!(lits[nl] = malloc(n + 1))) break;
            memcpy(lits[nl], xs, n);
            lens[nl++] = n;
        }
        int r = nl ? sc_literals(&c->b, lits, lens, nl)
                   : sc_fail(c, "%s: no string value matches the schema", en ? "enum" : "const");
        sc_lits_free(lits, lens, nl);
        return r;
    }
    uint32_t mn = 0, mx = GM_INF;
    if (sc_get_count(c, s, "minLength", GM_STR_MAXCOUNT_FLAGGED, &mn) ||
        sc_get_count(c, s, "maxLength", GM_STR_MAXCOUNT_FLAGGED, &mx))
        return -1;
    if (mn > mx) return sc_fail(c, "minLength %u > maxLength %u", mn, mx);
    GmSeq q = {0};
    gm_seq_push(&c->b, &q, GM_STR, GM_STR_RAW | GM_STR_TAGSAFE, mn, mx);
    return gm_rule_seq(&c->b, "raw string", &q);
}

/* <arg_key>key</arg_key><arg_value>value</arg_value>, appended to s: once, or at most once. */
static void tc_arg(GmSC *c, GmSeq *s, const char *key, size_t kl, int value, int required) {
    GmB *b = &c->b;
    GmSeq q = {0};
    tc_tag(b, &q, GRAMMAR_TAG_ARG_KEY);
    gm_seq_lit(b, &q, key, kl);
    tc_tag(b, &q, GRAMMAR_TAG_ARG_KEY_END);
    tc_tag(b, &q, GRAMMAR_TAG_ARG_VALUE);
    gm_seq_push(b, &q, GM_RULE, (uint32_t)value, 0, 0);
    tc_tag(b, &q, GRAMMAR_TAG_ARG_VALUE_END);
    int r = gm_rule_seq(b, "argument", &q);
    gm_seq_push(b, s, required ? GM_RULE : GM_REP, (uint32_t)r, 0, required ? 0 : 1);
}

/* The arguments of one tool, appended to s: its parameters' properties in order (required ones
   always, optional ones maybe), then names that are only in required. */
static int tc_args(GmSC *c, GmSeq *s, const JsonValue *params) {
    static const char *const top_ok[] = {"type", "properties", "required",
                                         "additionalProperties", NULL};
    static const char *const key_stop[] = {"</arg_key>", "</tool_call>", NULL};
    if (!params || json_type(params) == JSON_NULL) return 0;
    if (json_type(params) != JSON_OBJECT) return sc_fail(c, "parameters must be a JSON schema");
    for (size_t i = 0; i < json_len(params); i++) {
        size_t kl;
        const char *k = json_key_at(params, i, &kl);
        if (!gm_in(k, kl, gm_annotations) && !gm_in(k, kl, top_ok))
            return sc_fail(c, "keyword '%.*s' is not enforced for tool parameters (an object "
                           "schema with properties)", (int)kl, k);
    }
    const JsonValue *t = json_get(params, "type"), *props = json_get(params, "properties");
    const JsonValue *req = json_get(params, "required");
    const JsonValue *addl = json_get(params, "additionalProperties");
    const char *ts = json_str(t, NULL);
    if (t && (!ts || strcmp(ts, "object")))
        return sc_fail(c, "tool parameters must have type \"object\"");
    if (props && json_type(props) != JSON_OBJECT) return sc_fail(c, "properties must be an object");
    if (req && json_type(req) != JSON_ARRAY) return sc_fail(c, "required must be an array");
    if (addl && json_type(addl) != JSON_OBJECT && json_type(addl) != JSON_BOOL)
        return sc_fail(c, "additionalProperties must be a schema");
    for (size_t i = 0; i < json_len(props); i++) {
        size_t kl;
        const char *k = json_key_at(props, i, &kl);
        const JsonValue *sub = json_value_at(props, i);
        size_t old = sc_push(c, "properties", 10), old2 = sc_push(c, k, kl);
        if (!tc_reads_back(k, kl, key_stop)) {
            sc_fail(c, "this name cannot be written as an argument key (whitespace at an end, "
                    "invalid UTF-8 or a tag's text)");
            return -1;
        }
        const char *st =
            json_type(sub) == JSON_OBJECT ? json_str(json_get(sub, "type"), NULL) : NULL;
        /* chat.h's reply parser keeps a value raw exactly when properties.K.type is "string" */
        int v = st && !strcmp(st, "string") ? tc_raw_value(c, sub) : sc_schema(c, sub);
        sc_pop(c, old2);
        sc_pop(c, old);
        if (v < 0 || c->b.failed) return -1;
        tc_arg(c, s, k, kl, v, sc_required(params, k, kl));
    }
    for (size_t i = 0; i < json_len(req); i++) {
        size_t l;
        const char *k = json_str(json_at(req, i), &l);
        if (!k) return sc_fail(c, "required must list strings");
        if (props && json_getn(props, k, l)) continue;
        int dup = 0;
        for (size_t j = 0; j < i; j++) {
            size_t jl;
            const char *kj = json_str(json_at(req, j), &jl);
            dup |= kj && jl == l && !memcmp(kj, k, l);
        }
        if (dup) continue;
        if (json_bool(addl) == 0)
            return sc_fail(c, "required '%.*s' is not in properties and additionalProperties is "
                           "false", (int)l, k);
        if (!tc_reads_back(k, l, key_stop))
            return sc_fail(c, "required '%.*s' cannot be written as an argument key", (int)l, k);
        size_t old = sc_push(c, "additionalProperties", 20);
        int v = json_type(addl) == JSON_OBJECT ? sc_schema(c, addl) : sc_free_value(c);
        sc_pop(c, old);
        if (v < 0 || c->b.failed) return -1;
        tc_arg(c, s, k, l, v, 1);
    }
    return 0;
}

Grammar *grammar_tool_calls(const GrammarTool *tools, int n_tools, int min_calls, int max_calls,
                            const GrammarOptions *opt, char *err, size_t err_len) {
    static const char *const name_stop[] = {"<arg_key>", "</tool_call>", NULL};
    if (err && err_len) err[0] = 0;
    GmSC c;
    sc_init(&c, opt, err, err_len);
    c.tool = 1;
    int one = gm_rule(&c.b, "tool call"), root = -1;
    if (n_tools < 1 || !tools) sc_fail(&c, "no tools to call");
    else if (min_calls < 1 || (max_calls >= 0 && max_calls < min_calls))
        sc_fail(&c, "calls: between %d and %d is not a range", min_calls, max_calls);
    for (int i = 0; i < n_tools && !c.b.failed; i++) {
        const GrammarTool *t = &tools[i];
        c.root = t->parameters;
        c.where = t->where ? t->where : "parameters";
        c.plen = 0;
        if (!t->name || !t->name_len || !tc_reads_back(t->name, t->name_len, name_stop)) {
            sc_fail(&c, "the tool's name '%.*s' cannot be written in a tool call (empty, "
                    "whitespace at an end, invalid UTF-8 or a tag's text)",
                    t->name ? (int)(t->name_len < 60 ? t->name_len : 60) : 0,
                    t->name ? t->name : "");
            break;
        }
        GmSeq s = {0};
        tc_tag(&c.b, &s, GRAMMAR_TAG_TOOL_CALL);
        gm_seq_lit(&c.b, &s, t->name, t->name_len);
        if (tc_args(&c, &s, t->parameters)) { gm_seq_free(&s); break; }
        tc_tag(&c.b, &s, GRAMMAR_TAG_TOOL_CALL_END);
        gm_alt(&c.b, one, &s);
    }
    if (!c.b.failed) {
        GmSeq q = {0};
        gm_seq_push(&c.b, &q, GM_RULE, (uint32_t)one, 0, 0);
        if (max_calls != 1)
            gm_seq_push(&c.b, &q, GM_REP, (uint32_t)one, (uint32_t)min_calls - 1,
                        max_calls < 0 ? GM_INF : (uint32_t)max_calls - 1);
        root = gm_rule_seq(&c.b, "tool calls", &q);
    }
    c.where = NULL;
    return sc_done(&c, root);
}

/* ==== GBNF ================================================================================== */

typedef struct {
    GmB b;
    const char *p, *end, *text;
    char **names;
    int *rule_of;
    uint8_t *defined;
    uint32_t n_names, cap_names, cap_rule_of, cap_def;
    int depth;                 /* ( groups ) open */
} GmPG;

static int pg_line(const GmPG *g) {
    int line = 1;
    for (const char *q = g->text; q < g->p; q++) line += *q == '\n';
    return line;
}

static int pg_fail(GmPG *g, const char *fmt, ...) {
    if (!g->b.failed && g->b.err && g->b.err_len) {
        char msg[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        snprintf(g->b.err, g->b.err_len, "line %d: %s", pg_line(g), msg);
        gm_one_line(g->b.err);
    }
    g->b.failed = 1;
    return -1;
}

/* Skips spaces and comments; newlines too when nl is set. */
static void pg_space(GmPG *g, int nl) {
    while (g->p < g->end) {
        if (*g->p == '#') { while (g->p < g->end && *g->p != '\n') g->p++; }
        else if (*g->p == ' ' || *g->p == '\t' || *g->p == '\r' || (nl && *g->p == '\n')) g->p++;
        else if (*g->p == '\n' && g->p + 1 < g->end && (g->p[1] == ' ' || g->p[1] == '\t'))
            g->p++; /* continuation */
        else break;
    }
}

static int pg_is_name(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '-' || ch == '_';
}

static int pg_rule_named(GmPG *g, const char *s, size_t n, int define) {
    for (uint32_t i = 0; i < g->n_names; i++)
        if (strlen(g->names[i]) == n && !memcmp(g->names[i], s, n)) {
            if (define) {
                if (g->defined[i]) return pg_fail(g, "rule '%.*s' is defined twice", (int)n, s);
                g->defined[i] = 1;
            }
            return g->rule_of[i];
        }
    if (gm_grow((void **)&g->names, &g->cap_names, g->n_names + 1, sizeof *g->names) ||
        gm_grow((void **)&g->rule_of, &g->cap_rule_of, g->n_names + 1, sizeof *g->rule_of) ||
        gm_grow((void **)&g->defined, &g->cap_def, g->n_names + 1, 1))
        return gm_fail(&g->b, "out of memory");
    g->names[g->n_names] = strndup(s, n);
    if (!g->names[g->n_names]) return gm_fail(&g->b, "out of memory");
    g->rule_of[g->n_names] = gm_rule(&g->b, g->names[g->n_names]);
    g->defined[g->n_names] = (uint8_t)define;
    return g->rule_of[g->n_names++];
}

/* A byte for a message: itself when printable, else \xHH (messages are one line). */
static const char *pg_show(char ch, char buf[8]) {
    unsigned char u = (unsigned char)ch;
    if (u >= 0x21 && u < 0x7F) snprintf(buf, 8, "'%c'", ch);
    else snprintf(buf, 8, "\\x%02x", u);
    return buf;
}

/* One character of a literal or class: an escape or a UTF-8 sequence. Returns the code point. */
static long pg_char(GmPG *g) {
    const unsigned char *p = (const unsigned char *)g->p;
    if (g->p >= g->end) return pg_fail(g, "unexpected end of the grammar");
    if (*p == '\\') {
        if (g->p + 1 >= g->end) return pg_fail(g, "unfinished escape");
        char e = g->p[1];
        g->p += 2;
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (!digits) {
            switch (e) {
            case 'n': return '\n';
            case 'r': return '\r';
            case 't': return '\t';
            case '\\':
            case '"':
            case '[':
            case ']':
            case '-':
            case '^':
            case '\'': return (unsigned char)e;
            default:
                return pg_fail(g, "unknown escape: a backslash then %s", pg_show(e, (char[8]){0}));
            }
        }
        long v = 0;
        for (int i = 0; i < digits; i++) {
            if (g->p >= g->end) return pg_fail(g, "unfinished \\%c escape", e);
            char h = *g->p++;
            int d = h >= '0' && h <= '9'                 ? h - '0'
                    : (h | 32) >= 'a' && (h | 32) <= 'f' ? (h | 32) - 'a' + 10
                                                         : -1;
            if (d < 0) return pg_fail(g, "bad hex digit in \\%c escape", e);
            v = v * 16 + d;
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
            return pg_fail(g, "escape \\%c names no character", e);
        return v;
    }
    int need = *p < 0x80                  ? 0
               : *p >= 0xC2 && *p <= 0xDF ? 1
               : *p >= 0xE0 && *p <= 0xEF ? 2
               : *p >= 0xF0 && *p <= 0xF4 ? 3
                                          : -1;
    if (need < 0 || g->end - g->p <= need) return pg_fail(g, "invalid UTF-8");
    long v = need == 0 ? *p : *p & (0x3F >> need);
    for (int i = 1; i <= need; i++) {
        if ((p[i] & 0xC0) != 0x80) return pg_fail(g, "invalid UTF-8");
        v = v << 6 | (p[i] & 0x3F);
    }
    if ((need == 2 && v < 0x800) || (need == 3 && (v < 0x10000 || v > 0x10FFFF)) ||
        (v >= 0xD800 && v <= 0xDFFF))
        return pg_fail(g, "invalid UTF-8");
    g->p += need + 1;
    return v;
}

static int pg_utf8(long cp, unsigned char *o) {
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | cp >> 6);
        o[1] = (unsigned char)(0x80 | (cp & 63));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | (cp >> 6 & 63));
        o[2] = (unsigned char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18); o[1] = (unsigned char)(0x80 | (cp >> 12 & 63));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 63)); o[3] = (unsigned char)(0x80 | (cp & 63));
    return 4;
}

/* Adds to rule r alternatives matching the UTF-8 encodings of code points lo..hi (surrogates
   excluded). */
static void pg_utf8_range(GmB *b, int r, long lo, long hi) {
    static const long bounds[] = {0x7F, 0x7FF, 0xFFFF};
    if (lo > hi) return;
    if (lo <= 0xDFFF && hi >= 0xD800) {   /* surrogates are not characters */
        pg_utf8_range(b, r, lo, 0xD7FF);
        pg_utf8_range(b, r, 0xE000, hi);
        return;
    }
    for (int i = 0; i < 3; i++)
        if (lo <= bounds[i] && hi > bounds[i]) {
            pg_utf8_range(b, r, lo, bounds[i]);
            pg_utf8_range(b, r, bounds[i] + 1, hi);
            return;
        }
    unsigned char a[4], z[4];
    int n = pg_utf8(lo, a);
    pg_utf8(hi, z);
    for (int i = 1; i < n; i++) {   /* split until every continuation position spans a full range */
        long m = (1L << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                pg_utf8_range(b, r, lo, lo | m);
                pg_utf8_range(b, r, (lo | m) + 1, hi);
                return;
            }
            if ((hi & m) != m) {
                pg_utf8_range(b, r, lo, (hi & ~m) - 1);
                pg_utf8_range(b, r, hi & ~m, hi);
                return;
            }
        }
    }
    GmSeq s = {0};
    for (int i = 0; i < n; i++) gm_seq_range(b, &s, a[i], z[i]);
    gm_alt(b, r, &s);
}

static int pg_alternatives(GmPG *g, int r, int nested);

/* A repetition count (digits, within the text); ULONG_MAX if there is none. Large values are
   capped above the limit so that the caller refuses them. */
static unsigned long pg_count(GmPG *g) {
    const char *p0 = g->p;
    unsigned long v = 0;
    while (g->p < g->end && *g->p >= '0' && *g->p <= '9') {
        if (v < 100000000ul) v = v * 10 + (unsigned long)(*g->p - '0');
        g->p++;
    }
    return g->p == p0 ? ULONG_MAX : v;
}

/* One item with its postfix operator, appended to s. */
static int pg_item(GmPG *g, GmSeq *s) {
    GmB *b = &g->b;
    int r = -1;   /* the item as a rule (for repetition), or -1 for a literal already in lit */
    GmSeq lit = {0};
    char ch = *g->p;
    if (ch == '"') {
        g->p++;
        while (g->p < g->end && *g->p != '"' && *g->p != '\n') {
            long cp = pg_char(g);
            if (cp < 0) { gm_seq_free(&lit); return -1; }
            unsigned char u[4];
            int n = pg_utf8(cp, u);
            gm_seq_lit(b, &lit, (const char *)u, (size_t)n);
        }
        if (g->p >= g->end || *g->p != '"') {
            gm_seq_free(&lit);
            return pg_fail(g, "unterminated literal");
        }
        g->p++;
    } else if (ch == '[' || ch == '.') {
        long lo[512], hi[512];
        int n = 0, neg = 0;
        if (ch == '.') { lo[0] = 0; hi[0] = 0x10FFFF; n = 1; g->p++; }
        else {
            g->p++;
            if (g->p < g->end && *g->p == '^') { neg = 1; g->p++; }
            while (g->p < g->end && *g->p != ']') {
                long a = pg_char(g), z = a;
                if (a < 0) return -1;
                if (g->p + 1 < g->end && *g->p == '-' && g->p[1] != ']') {
                    g->p++;
                    z = pg_char(g);
                    if (z < 0) return -1;
                }
                if (z < a) return pg_fail(g, "class range out of order");
                if (n == 512) return pg_fail(g, "class with more than 512 ranges");
                lo[n] = a;
                hi[n++] = z;
            }
            if (g->p >= g->end) return pg_fail(g, "unterminated class");
            g->p++;
        }
        /* sort and merge, then complement if negated */
        for (int i = 1; i < n; i++)
            for (int j = i; j > 0 && lo[j] < lo[j - 1]; j--) {
                long t = lo[j]; lo[j] = lo[j - 1]; lo[j - 1] = t;
                t = hi[j]; hi[j] = hi[j - 1]; hi[j - 1] = t;
            }
        int m = 0;
        for (int i = 0; i < n; i++) {
            if (m && lo[i] <= hi[m - 1] + 1) { if (hi[i] > hi[m - 1]) hi[m - 1] = hi[i]; }
            else { lo[m] = lo[i]; hi[m++] = hi[i]; }
        }
        r = gm_rule(b, "class");
        long next = 0;
        for (int i = 0; i < m; i++) {
            if (neg) pg_utf8_range(b, r, next, lo[i] - 1);
            else pg_utf8_range(b, r, lo[i], hi[i]);
            next = hi[i] + 1;
        }
        if (neg) pg_utf8_range(b, r, next, 0x10FFFF);
        if (r >= 0 && b->r[r].n == 0) return pg_fail(g, "class matches no character");
    } else if (ch == '(') {
        g->p++;
        if (++g->depth > 64) return pg_fail(g, "groups nest deeper than 64");
        r = gm_rule(b, "group");
        if (pg_alternatives(g, r, 1) < 0) return -1;
        g->depth--;
        pg_space(g, 1);
        if (g->p >= g->end || *g->p != ')') return pg_fail(g, "missing )");
        g->p++;
    } else if (pg_is_name(ch)) {
        const char *s0 = g->p;
        while (g->p < g->end && pg_is_name(*g->p)) g->p++;
        r = pg_rule_named(g, s0, (size_t)(g->p - s0), 0);
    } else return pg_fail(g, "unexpected %s", pg_show(ch, (char[8]){0}));
    /* postfix */
    uint32_t mn = 1, mx = 1;
    if (g->p < g->end && (*g->p == '*' || *g->p == '+' || *g->p == '?')) {
        mn = *g->p == '+' ? 1 : 0;
        mx = *g->p == '?' ? 1 : GM_INF;
        g->p++;
    } else if (g->p < g->end && *g->p == '{') {
        g->p++;
        unsigned long a = pg_count(g), z = a;
        if (a == ULONG_MAX) { gm_seq_free(&lit); return pg_fail(g, "bad repetition"); }
        if (g->p < g->end && *g->p == ',') {
            g->p++;
            if (g->p < g->end && *g->p == '}') z = GM_INF;
            else if ((z = pg_count(g)) == ULONG_MAX) {
                gm_seq_free(&lit);
                return pg_fail(g, "bad repetition");
            }
        }
        if (g->p >= g->end || *g->p != '}') {
            gm_seq_free(&lit);
            return pg_fail(g, "bad repetition");
        }
        g->p++;
        if (a > 1000000 || (z != GM_INF && (z > 1000000 || z < a))) {
            gm_seq_free(&lit);
            return pg_fail(g, "bad repetition count");
        }
        mn = (uint32_t)a;
        mx = (uint32_t)z;
    }
    if (r < 0 && mn == 1 && mx == 1) { gm_seq_cat(b, s, &lit); gm_seq_free(&lit); return 0; }
    if (r < 0) r = gm_rule_seq(b, "literal", &lit);
    if (mn == 1 && mx == 1) gm_seq_push(b, s, GM_RULE, (uint32_t)r, 0, 0);
    else gm_seq_push(b, s, GM_REP, (uint32_t)r, mn, mx);
    return b->failed ? -1 : 0;
}

/* Alternatives up to the end of the rule (a newline) or, nested in a group, up to ')' (newlines
   inside a group are spaces). */
static int pg_alternatives(GmPG *g, int r, int nested) {
    for (;;) {
        GmSeq s = {0};
        for (;;) {
            pg_space(g, nested);
            if (g->p >= g->end || *g->p == '|' || *g->p == ')' || *g->p == '\n') break;
            if (pg_item(g, &s) < 0) { gm_seq_free(&s); return -1; }
        }
        gm_alt(&g->b, r, &s);
        if (g->p < g->end && *g->p == '|') { g->p++; pg_space(g, 1); continue; }
        if (g->p < g->end && *g->p == '\n') {   /* a '|' on the next line continues the rule */
            const char *save = g->p;
            pg_space(g, 1);
            if (g->p < g->end && *g->p == '|') { g->p++; pg_space(g, 1); continue; }
            g->p = save;
        }
        return 0;
    }
}

Grammar *grammar_from_gbnf(const char *text, size_t len, char *err, size_t err_len) {
    if (err && err_len) err[0] = 0;
    GmPG g;
    memset(&g, 0, sizeof g);
    g.b.err = err;
    g.b.err_len = err_len;
    g.text = g.p = text;
    g.end = text + len;
    while (!g.b.failed) {
        pg_space(&g, 1);
        if (g.p >= g.end) break;
        const char *s0 = g.p;
        while (g.p < g.end && pg_is_name(*g.p)) g.p++;
        if (g.p == s0) { pg_fail(&g, "expected a rule name"); break; }
        int r = pg_rule_named(&g, s0, (size_t)(g.p - s0), 1);
        pg_space(&g, 0);
        if (g.end - g.p < 3 || memcmp(g.p, "::=", 3)) {
            pg_fail(&g, "expected ::= after the rule name");
            break;
        }
        g.p += 3;
        pg_space(&g, 1);
        if (r < 0 || pg_alternatives(&g, r, 0) < 0) break;
        if (g.p < g.end && *g.p == ')') { pg_fail(&g, "unbalanced )"); break; }
    }
    int root = -1;
    for (uint32_t i = 0; i < g.n_names && !g.b.failed; i++) {
        if (!g.defined[i]) {
            g.p = g.text;
            gm_fail(&g.b, "rule '%s' is used but not defined", g.names[i]);
        }
        if (!strcmp(g.names[i], "root")) root = g.rule_of[i];
    }
    if (!g.b.failed && root < 0) gm_fail(&g.b, "no rule named root");
    for (uint32_t i = 0; i < g.n_names; i++) free(g.names[i]);
    free(g.names);
    free(g.rule_of);
    free(g.defined);
    return gm_finish(&g.b, root, "grammar");
}

#endif /* GRAMMAR_IMPLEMENTATION_DONE */
#endif /* GRAMMAR_IMPLEMENTATION */

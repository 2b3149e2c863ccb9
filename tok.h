/* tok.h - byte-level BPE tokenizer (Hugging Face tokenizer.json) for GLM-5 and relatives.
 *
 * Single-header library in the stb style: every file may include it for the API; exactly ONE
 * translation unit defines TOK_IMPLEMENTATION before including it. The implementation needs
 * json.h (its implementation compiled somewhere in the program) and the generated table header
 * tok_unicode.h (tools/gen_unicode_tables.py), both next to this file.
 *
 * What it does (spec: docs/tokenizer.md):
 *   encode: split out added tokens (leftmost-longest) -> normalizer (none or NFC) -> the Split
 *           pre-tokenizer regexes -> bytes -> BPE merges (linked list + heap) -> ids.
 *   decode: ids -> raw bytes; byte runs between added tokens are decoded separately and invalid
 *           UTF-8 becomes U+FFFD (maximal subparts, as HF / WHATWG do).
 * Regexes are not interpreted: the Split patterns of tokenizer.json are recognised by their exact
 * text and run by hand-written matchers. Known: the GLM-4/5 = Llama-3 pattern (\p{N}{1,3}), its
 * Qwen2/3 variant (single \p{N}), the three-stage DeepSeek-V3 sequence, and GPT-2's pattern
 * (ByteLevel use_regex=true). Anything else is refused by name at load time -- never guessed.
 *
 * API
 *   Tokenizer *tok_load(const char *tokenizer_json_path, char *err, size_t err_len);
 *       NULL on error with one line "path: reason" in err (a file above TOK_JSON_MAX, 64 MiB, is one).
 *   Tokenizer *tok_load_json(const char *text, size_t len, const char *name, char *err, size_t err_len);
 *       The same from tokenizer.json's text in memory; name stands for the path in messages.
 *   void tok_free(Tokenizer *t);
 *   int tok_encode(const Tokenizer *t, const char *text, size_t len, TokSpecialMode mode,
 *                  int32_t **ids, size_t *n);
 *       0 on success: *ids is malloc'ed (free() it; non-NULL even when *n == 0). -1 on out of
 *       memory. Invalid UTF-8 in text is replaced by U+FFFD (one per maximal invalid subpart)
 *       before encoding. Not safe to call concurrently on one Tokenizer (it fills a piece cache).
 *       Modes: TOK_SPECIAL_ALL = HF encode(add_special_tokens=False) (every added token is
 *       recognised in the text); TOK_SPECIAL_NONSPECIAL_ONLY = HF split_special_tokens=True (only
 *       added tokens with "special": false, e.g. GLM's <think>); TOK_SPECIAL_NONE = plain text.
 *   int tok_id(const Tokenizer *t, const char *token_text);
 *       id of an added token (by content) or of a vocab entry (by its raw bytes), -1 if absent.
 *   int tok_vocab_size(const Tokenizer *t);           max id + 1
 *   const char *tok_piece(const Tokenizer *t, int id, size_t *len);
 *       raw bytes of a token (added token: its content), NULL for an id with no token.
 *   int tok_is_special(const Tokenizer *t, int id);   1 for an added token with special:true
 *   int tok_is_added(const Tokenizer *t, int id);     1 for any added token
 *   int tok_decode(const Tokenizer *t, const int32_t *ids, size_t n, int skip_special,
 *                  char **out, size_t *out_len);
 *       Whole-sequence decode (NUL-terminated, malloc'ed). skip_special drops special:true added
 *       tokens before decoding (as HF does). 0 ok, -1 out of memory.
 *   Streaming decode, one id at a time; the output is always valid UTF-8:
 *       TokStream s; tok_stream_init(&s);
 *       size_t k = tok_stream_feed(t, &s, id, out, out_cap);   bytes written to out
 *       size_t k = tok_stream_flush(&s, out, out_cap);          at end of generation
 *       out_cap >= tok_stream_out_cap(t) always suffices; with a smaller buffer the output is cut
 *       and the return value is the length that was needed. An incomplete UTF-8 tail is kept
 *       until the next id; an added token (and flush) first turns a kept tail into U+FFFD.
 *       Ids without a token produce nothing.
 *   int tok_pretokenize(const Tokenizer *t, const char *text, size_t len,
 *                       void (*fn)(void *ctx, const char *piece, size_t len), void *ctx);
 *       Normalizer + pre-tokenizer only (no added tokens, no BPE): calls fn for each piece.
 *   const char *tok_pretokenizer_name(const Tokenizer *t);   e.g. "glm/llama3", for messages
 *   Unicode helpers (tables generated from the UCD, version TOK_UNICODE_VERSION):
 *       int tok_uni_category(uint32_t cp);   TOK_CAT_L/N/P/S/M or TOK_CAT_OTHER
 *       int tok_uni_is_space(uint32_t cp);   White_Space
 *       size_t tok_utf8_next(const unsigned char *s, size_t n, uint32_t *cp, int *status);
 *           decodes one character; status 0 valid, 1 invalid (cp = U+FFFD, returns the length of
 *           the maximal invalid subpart), 2 truncated (s ends inside a possible character).
 *       uint32_t tok_byte_symbol(unsigned char b);   GPT-2 byte -> symbol code point
 *
 * Supported tokenizer.json features: model BPE (merges as "a b" or ["a","b"], ignore_merges,
 * byte-level symbols; continuing_subword_prefix / end_of_word_suffix / dropout refused);
 * normalizer null, NFC, or a Sequence of those; pre_tokenizer Split(Isolated) with a known regex
 * and ByteLevel(add_prefix_space=false); decoder ByteLevel; added tokens with lstrip, rstrip and
 * single_word. Added tokens are matched on the raw text whatever their "normalized" flag (exact
 * for GLM, Llama-3, Qwen3, DeepSeek-V3, whose normalizers are empty or leave ASCII alone).
 * Where HF's regex engine and the JS port disagree we follow HF: \s is Unicode White_Space
 * (U+0085 yes, U+FEFF no) and (?i) contractions fold U+017F to s. Texts up to 4 GB.
 */
#ifndef TOK_H
#define TOK_H

#include <stddef.h>
#include <stdint.h>

/* tokenizer.json is refused above this size (GLM-5's is ~20 MB), and token ids at or above
   TOK_MAX_ID (the id tables are sized by the largest id). */
#ifndef TOK_JSON_MAX
#define TOK_JSON_MAX ((size_t)64 << 20)
#endif
#ifndef TOK_MAX_ID
#define TOK_MAX_ID (1 << 24)
#endif

typedef struct Tokenizer Tokenizer;
typedef enum { TOK_SPECIAL_ALL, TOK_SPECIAL_NONSPECIAL_ONLY, TOK_SPECIAL_NONE } TokSpecialMode;
typedef struct { unsigned char pending[4]; int npending; } TokStream;

enum {
    TOK_CAT_OTHER = 0,
    TOK_CAT_L = 1,
    TOK_CAT_N = 2,
    TOK_CAT_P = 3,
    TOK_CAT_S = 4,
    TOK_CAT_M = 5
};

Tokenizer *tok_load(const char *tokenizer_json_path, char *err, size_t err_len);
Tokenizer *tok_load_json(const char *text, size_t len, const char *name, char *err, size_t err_len);
void tok_free(Tokenizer *t);
int tok_encode(const Tokenizer *t, const char *text, size_t len, TokSpecialMode mode,
               int32_t **ids, size_t *n);
int tok_id(const Tokenizer *t, const char *token_text);
int tok_vocab_size(const Tokenizer *t);
const char *tok_piece(const Tokenizer *t, int id, size_t *len);
int tok_is_special(const Tokenizer *t, int id);
int tok_is_added(const Tokenizer *t, int id);
int tok_decode(const Tokenizer *t, const int32_t *ids, size_t n, int skip_special,
               char **out, size_t *out_len);
void tok_stream_init(TokStream *s);
size_t tok_stream_out_cap(const Tokenizer *t);
size_t tok_stream_feed(const Tokenizer *t, TokStream *s, int id, char *out, size_t out_cap);
size_t tok_stream_flush(TokStream *s, char *out, size_t out_cap);
int tok_pretokenize(const Tokenizer *t, const char *text, size_t len,
                    void (*fn)(void *ctx, const char *piece, size_t len), void *ctx);
const char *tok_pretokenizer_name(const Tokenizer *t);
int tok_uni_category(uint32_t cp);
int tok_uni_is_space(uint32_t cp);
size_t tok_utf8_next(const unsigned char *s, size_t n, uint32_t *cp, int *status);
uint32_t tok_byte_symbol(unsigned char b);

#endif /* TOK_H */

#ifdef TOK_IMPLEMENTATION
#ifndef TOK_IMPLEMENTATION_DONE
#define TOK_IMPLEMENTATION_DONE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include "json.h"
#include "tok_unicode.h"

/* ------------------------------------------------------------------------------------------ */
/* Unicode classes                                                                            */

static int tok__range_lookup(const TokUniRange *r, size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid].first) hi = mid;
        else if (cp > r[mid].last) lo = mid + 1;
        else return r[mid].value;
    }
    return 0;
}

int tok_uni_category(uint32_t cp) {
    if (cp < 256) return tok_latin1_class[cp] & 7;
    return tok__range_lookup(tok_cat_ranges, sizeof tok_cat_ranges / sizeof *tok_cat_ranges, cp);
}

int tok_uni_is_space(uint32_t cp) {
    if (cp < 256) return tok_latin1_class[cp] >> 3;
    return tok__range_lookup(tok_space_ranges, sizeof tok_space_ranges / sizeof *tok_space_ranges,
                             cp);
}

static int tok__ccc(uint32_t cp) {
    if (cp < 0x300) return 0;
    return tok__range_lookup(tok_ccc_ranges, sizeof tok_ccc_ranges / sizeof *tok_ccc_ranges, cp);
}

/* ------------------------------------------------------------------------------------------ */
/* UTF-8                                                                                      */

size_t tok_utf8_next(const unsigned char *s, size_t n, uint32_t *cp, int *status) {
    unsigned char b = s[0];
    if (b < 0x80) { *cp = b; *status = 0; return 1; }
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;   /* allowed range of the first continuation byte */
    uint32_t c;
    if (b >= 0xC2 && b <= 0xDF) { need = 1; c = b & 0x1F; }
    else if (b >= 0xE0 && b <= 0xEF) {
        need = 2; c = b & 0x0F;
        if (b == 0xE0) lo = 0xA0;          /* no overlongs */
        if (b == 0xED) hi = 0x9F;          /* no surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3; c = b & 0x07;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;          /* nothing above U+10FFFF */
    } else { *cp = 0xFFFD; *status = 1; return 1; }
    for (size_t i = 1; i <= need; i++) {
        if (i >= n) { *cp = 0xFFFD; *status = 2; return i; }
        unsigned char x = s[i];
        unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (x < l || x > h) { *cp = 0xFFFD; *status = 1; return i; }
        c = (c << 6) | (x & 0x3F);
    }
    *cp = c; *status = 0;
    return need + 1;
}

static size_t tok__utf8_put(uint32_t c, char *out) {
    if (c < 0x80) { out[0] = (char)c; return 1; }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | (c >> 12)); out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F)); return 3;
    }
    out[0] = (char)(0xF0 | (c >> 18)); out[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3F)); out[3] = (char)(0x80 | (c & 0x3F)); return 4;
}

/* GPT-2 byte <-> symbol table: printable bytes map to themselves, the 68 others (controls,
 * space, DEL, C1 controls, NBSP, soft hyphen) in increasing order to U+0100.. U+0143. */
uint32_t tok_byte_symbol(unsigned char b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    uint32_t k = 0;
    for (unsigned x = 0; x < b; x++)
        if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) k++;
    return 0x100 + k;
}

/* ------------------------------------------------------------------------------------------ */
/* NFC (only for tokenizers that declare it, e.g. Qwen3)                                      */

static const TokUniTriple *tok__decomp_of(uint32_t cp) {
    size_t lo = 0, hi = sizeof tok_decomp / sizeof *tok_decomp;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < tok_decomp[mid].a) hi = mid;
        else if (cp > tok_decomp[mid].a) lo = mid + 1;
        else return &tok_decomp[mid];
    }
    return NULL;
}

enum { TOK_SBASE = 0xAC00, TOK_LBASE = 0x1100, TOK_VBASE = 0x1161, TOK_TBASE = 0x11A7,
       TOK_LCOUNT = 19, TOK_VCOUNT = 21, TOK_TCOUNT = 28, TOK_NCOUNT = 588, TOK_SCOUNT = 11172 };

/* Appends the full canonical decomposition of cp to out (at most 4 code points per level; the
 * deepest UCD chain is 4 long, out must have room for 18). Returns the count written. */
static size_t tok__decompose(uint32_t cp, uint32_t *out) {
    if (cp >= TOK_SBASE && cp < TOK_SBASE + TOK_SCOUNT) {
        uint32_t s = cp - TOK_SBASE, n = 0;
        out[n++] = TOK_LBASE + s / TOK_NCOUNT;
        out[n++] = TOK_VBASE + (s % TOK_NCOUNT) / TOK_TCOUNT;
        if (s % TOK_TCOUNT) out[n++] = TOK_TBASE + s % TOK_TCOUNT;
        return n;
    }
    const TokUniTriple *d = cp >= 0xC0 ? tok__decomp_of(cp) : NULL;
    if (!d) { out[0] = cp; return 1; }
    size_t n = tok__decompose(d->b, out);
    if (d->c) n += tok__decompose(d->c, out + n);
    return n;
}

static uint32_t tok__compose(uint32_t a, uint32_t b) {
    if (a >= TOK_LBASE && a < TOK_LBASE + TOK_LCOUNT && b >= TOK_VBASE &&
        b < TOK_VBASE + TOK_VCOUNT)
        return TOK_SBASE + ((a - TOK_LBASE) * TOK_VCOUNT + (b - TOK_VBASE)) * TOK_TCOUNT;
    if (a >= TOK_SBASE && a < TOK_SBASE + TOK_SCOUNT && (a - TOK_SBASE) % TOK_TCOUNT == 0 &&
        b > TOK_TBASE && b < TOK_TBASE + TOK_TCOUNT)
        return a + (b - TOK_TBASE);
    size_t lo = 0, hi = sizeof tok_comp / sizeof *tok_comp;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const TokUniTriple *r = &tok_comp[mid];
        if (a < r->a || (a == r->a && b < r->b)) hi = mid;
        else if (a > r->a || b > r->b) lo = mid + 1;
        else return r->c;
    }
    return 0;
}

/* NFC of cps[0..n) in place-or-copy: returns a malloc'ed array (count in *out_n), or NULL when
 * the text is already NFC (the common case, found by the quick check) or memory ran out
 * (*oom set). */
static uint32_t *tok__nfc(const uint32_t *cps, size_t n, size_t *out_n, int *oom) {
    int last = 0, quick_ok = 1;
    for (size_t i = 0; i < n && quick_ok; i++) {
        uint32_t c = cps[i];
        if (c < 0x300) { last = 0; continue; }
        int cc = tok__ccc(c);
        if ((cc && cc < last) ||
            tok__range_lookup(tok_nfc_qc_ranges,
                              sizeof tok_nfc_qc_ranges / sizeof *tok_nfc_qc_ranges, c))
            quick_ok = 0;
        last = cc;
    }
    *oom = 0;
    if (quick_ok) return NULL;
    uint32_t *d = (uint32_t *)malloc((n * 18 + 1) * sizeof *d);
    if (!d) { *oom = 1; return NULL; }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) m += tok__decompose(cps[i], d + m);
    /* canonical ordering: stable sort of each run of non-starters by combining class */
    for (size_t i = 1; i < m; i++) {
        int cc = tok__ccc(d[i]);
        if (!cc) continue;
        size_t j = i;
        while (j > 0 && tok__ccc(d[j - 1]) > cc) {
            uint32_t x = d[j];
            d[j] = d[j - 1];
            d[j - 1] = x;
            j--;
        }
    }
    /* canonical composition: c joins the last starter unless something in between blocks it
     * (after canonical ordering, the last character appended has the highest class) */
    size_t out = 0, starter = 0;
    int have_starter = 0, last_cc = 0;
    for (size_t i = 0; i < m; i++) {
        uint32_t c = d[i];
        int cc = tok__ccc(c);
        if (have_starter && (out == starter + 1 || (last_cc != 0 && last_cc < cc))) {
            uint32_t comp = tok__compose(d[starter], c);
            if (comp) { d[starter] = comp; continue; }
        }
        if (cc == 0) { starter = out; have_starter = 1; }
        last_cc = cc;
        d[out++] = c;
    }
    *out_n = out;
    return d;
}

/* ------------------------------------------------------------------------------------------ */
/* Pre-tokenizer regexes, hand-written                                                        */

typedef enum {
    /* GLM-4/5, Llama-3: contractions, letters, \p{N}{1,3}, punctuation, spaces */
    TOK_RE_LLAMA3,
    TOK_RE_QWEN2,       /* the same with single \p{N} */
    TOK_RE_GPT2,        /* ByteLevel use_regex=true */
    TOK_RE_DS_DIGITS,   /* DeepSeek-V3 stage 1: \p{N}{1,3} */
    TOK_RE_DS_CJK,      /* DeepSeek-V3 stage 2: runs of CJK ideographs / kana */
    TOK_RE_DS_MAIN      /* DeepSeek-V3 stage 3 */
} TokRegex;

static const struct { const char *pattern; TokRegex kind; const char *name; } tok__known_regex[] = {
    { "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
      TOK_RE_LLAMA3, "glm/llama3" },
    { "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
      TOK_RE_QWEN2, "qwen2" },
    { "\\p{N}{1,3}", TOK_RE_DS_DIGITS, "deepseek-v3 digits" },
    { "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+", TOK_RE_DS_CJK,
      "deepseek-v3 cjk" },
    { "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
      TOK_RE_DS_MAIN, "deepseek-v3 main" },
};

static int tok__is_l(uint32_t c) { return tok_uni_category(c) == TOK_CAT_L; }
static int tok__is_n(uint32_t c) { return tok_uni_category(c) == TOK_CAT_N; }
static int tok__is_nl(uint32_t c) { return c == '\r' || c == '\n'; }
/* [^\s\p{L}\p{N}] */
static int tok__is_other(uint32_t c) {
    int k = tok_uni_category(c);
    return k != TOK_CAT_L && k != TOK_CAT_N && !tok_uni_is_space(c);
}
static int tok__is_ps(uint32_t c) {
    int k = tok_uni_category(c);
    return k == TOK_CAT_P || k == TOK_CAT_S;
}
static int tok__is_lm(uint32_t c) {
    int k = tok_uni_category(c);
    return k == TOK_CAT_L || k == TOK_CAT_M;
}

/* `\s*[\r\n]+|\s+(?!\S)|\s+` at p (shared tail of every pattern here). */
static size_t tok__match_space(const uint32_t *c, size_t p, size_t n, int with_newline_rule) {
    size_t e = p;
    while (e < n && tok_uni_is_space(c[e])) e++;
    if (e == p) return 0;
    if (with_newline_rule) {
        /* greedy \s* backs off to the last CR/LF in the run; [\r\n]+ then takes just it */
        for (size_t i = e; i > p; i--)
            if (tok__is_nl(c[i - 1])) return i - p;
    }
    if (e == n) return e - p;          /* \s+(?!\S) at the end of the text */
    if (e - p >= 2) return e - p - 1;  /* leave the last space for the next word */
    return 1;                          /* \s+ */
}

/* ASCII contraction; HF's (?i) also folds U+017F LONG S to s. */
static size_t tok__match_contraction(const uint32_t *c, size_t p, size_t n, int fold_case) {
    if (c[p] != '\'' || p + 1 >= n) return 0;
    uint32_t a = c[p + 1], b = p + 2 < n ? c[p + 2] : 0;
    if (fold_case) {
        if (a == 0x17F) a = 's';
        if (a < 128) a |= 0x20;
        if (b == 0x17F) b = 's';
        if (b < 128 && ((b | 0x20) >= 'a' && (b | 0x20) <= 'z')) b |= 0x20;
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        /* 's 't come before 're 've in the alternation, 'm 'd after; none share a prefix */
        return 2;
    }
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

static size_t tok__match_llama3(const uint32_t *c, size_t p, size_t n, int max_digits) {
    size_t k;
    if ((k = tok__match_contraction(c, p, n, 1))) return k;
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    size_t q = p;
    if (!tok__is_nl(c[q]) && !tok__is_l(c[q]) && !tok__is_n(c[q]) && q + 1 < n &&
        tok__is_l(c[q + 1]))
        q++;
    if (tok__is_l(c[q])) {
        while (q < n && tok__is_l(c[q])) q++;
        return q - p;
    }
    /* \p{N}{1,max} */
    if (tok__is_n(c[p])) {
        q = p;
        while (q < n && q - p < (size_t)max_digits && tok__is_n(c[q])) q++;
        return q - p;
    }
    /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
    q = p;
    if (c[q] == ' ' && q + 1 < n && tok__is_other(c[q + 1])) q++;
    if (tok__is_other(c[q])) {
        while (q < n && tok__is_other(c[q])) q++;
        while (q < n && tok__is_nl(c[q])) q++;
        return q - p;
    }
    return tok__match_space(c, p, n, 1);
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t tok__match_gpt2(const uint32_t *c, size_t p, size_t n) {
    size_t k;
    if ((k = tok__match_contraction(c, p, n, 0))) return k;
    size_t q = p + (c[p] == ' ' && p + 1 < n);
    int (*runs[3])(uint32_t) = { tok__is_l, tok__is_n, tok__is_other };
    for (int r = 0; r < 3; r++) {
        if (runs[r](c[q])) {
            while (q < n && runs[r](c[q])) q++;
            return q - p;
        }
    }
    return tok__match_space(c, p, n, 0);
}

static int tok__is_ds_cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x3040 && c <= 0x309F) ||
           (c >= 0x30A0 && c <= 0x30FF);
}

static size_t tok__match_ds_main(const uint32_t *c, size_t p, size_t n) {
    /* [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+ : ASCII punctuation glued to ASCII letters */
    #define TOK_ASCII_ALPHA(x) (((x) | 0x20) >= 'a' && ((x) | 0x20) <= 'z')
    if (c[p] < 128 && c[p] > ' ' && c[p] < 127 && !TOK_ASCII_ALPHA(c[p]) &&
        !(c[p] >= '0' && c[p] <= '9') && p + 1 < n && c[p + 1] < 128 && TOK_ASCII_ALPHA(c[p + 1])) {
        size_t q = p + 1;
        while (q < n && c[q] < 128 && TOK_ASCII_ALPHA(c[q])) q++;
        return q - p;
    }
#undef TOK_ASCII_ALPHA
    /* [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ */
    size_t q = p;
    if (!tok__is_nl(c[q]) && !tok__is_l(c[q]) && !tok__is_ps(c[q]) && q + 1 < n &&
        tok__is_lm(c[q + 1]))
        q++;
    if (tok__is_lm(c[q])) {
        while (q < n && tok__is_lm(c[q])) q++;
        return q - p;
    }
    /* ' ?[\p{P}\p{S}]+[\r\n]*' */
    q = p;
    if (c[q] == ' ' && q + 1 < n && tok__is_ps(c[q + 1])) q++;
    if (tok__is_ps(c[q])) {
        while (q < n && tok__is_ps(c[q])) q++;
        while (q < n && tok__is_nl(c[q])) q++;
        return q - p;
    }
    return tok__match_space(c, p, n, 1);
}

/* Length (in code points) of the match of regex `re` starting exactly at p, 0 if none. The
 * text ends at n (a previous stage's piece is a whole text to the next stage). */
static size_t tok__regex_match(TokRegex re, const uint32_t *c, size_t p, size_t n) {
    size_t q;
    switch (re) {
    case TOK_RE_LLAMA3: return tok__match_llama3(c, p, n, 3);
    case TOK_RE_QWEN2: return tok__match_llama3(c, p, n, 1);
    case TOK_RE_GPT2: return tok__match_gpt2(c, p, n);
    case TOK_RE_DS_DIGITS:
        for (q = p; q < n && q - p < 3 && tok__is_n(c[q]); q++) {}
        return q - p;
    case TOK_RE_DS_CJK:
        for (q = p; q < n && tok__is_ds_cjk(c[q]); q++) {}
        return q - p;
    case TOK_RE_DS_MAIN: return tok__match_ds_main(c, p, n);
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Tokenizer                                                                                  */

#define TOK_MAX_STAGES 8
#define TOK_CACHE_SLOTS 8192
#define TOK_CACHE_KEY 24
#define TOK_CACHE_IDS 6

typedef struct { uint32_t off, len; int32_t id; } TokVocabSlot;          /* id -1: empty */
typedef struct { uint64_t key; int32_t rank, merged; } TokMergeSlot;      /* rank -1: empty */
typedef struct {
    int32_t id;
    uint32_t len;
    unsigned char special, lstrip, rstrip, single_word;
    uint32_t off;
} TokAdded;
typedef struct {
    unsigned char key[TOK_CACHE_KEY]; unsigned char key_len, n_ids; int32_t ids[TOK_CACHE_IDS];
} TokCacheSlot;

struct Tokenizer {
    int vocab_size;                 /* max id + 1 */
    size_t ids_cap;                 /* allocated length of the per-id arrays */
    char *arena; size_t arena_len, arena_cap;   /* all token bytes */
    uint32_t *piece_off, *piece_len; /* per id; piece_len UINT32_MAX = no token */
    unsigned char *flags;           /* per id: 1 added, 2 special */
    TokVocabSlot *vocab; size_t vocab_mask;     /* model.vocab bytes -> id */
    TokMergeSlot *merges; size_t merges_mask;   /* (left, right) -> rank, merged */
    int32_t byte_id[256];
    TokAdded *added; size_t n_added;
    uint32_t *added_by_byte[256]; uint32_t added_by_byte_n[256];  /* indices, longest first */
    int ignore_merges, nfc;
    TokRegex stages[TOK_MAX_STAGES]; int n_stages;
    char pretok_name[96];
    size_t max_piece_len;
    TokCacheSlot *cache;            /* piece cache (mutable through const Tokenizer *) */
};

/* One line always: control characters quoted from the file (a \n in a regex) become '?'. */
static void tok__err(char *err, size_t err_len, const char *fmt, ...) {
    if (!err || !err_len) return;
    va_list ap; va_start(ap, fmt); vsnprintf(err, err_len, fmt, ap); va_end(ap);
    for (char *p = err; *p; p++) if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
}

static uint64_t tok__hash_bytes(const void *p, size_t n) {
    const unsigned char *s = (const unsigned char *)p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= s[i]; h *= 1099511628211ull; }
    return h ^ (h >> 29);
}

static uint64_t tok__hash_pair(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return k;
}

static int32_t tok__vocab_find(const Tokenizer *t, const char *s, size_t n) {
    size_t i = tok__hash_bytes(s, n) & t->vocab_mask;
    for (;;) {
        const TokVocabSlot *v = &t->vocab[i];
        if (v->id < 0) return -1;
        if (v->len == n && memcmp(t->arena + v->off, s, n) == 0) return v->id;
        i = (i + 1) & t->vocab_mask;
    }
}

static const TokMergeSlot *tok__merge_find(const Tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t i = tok__hash_pair(key) & t->merges_mask;
    for (;;) {
        const TokMergeSlot *m = &t->merges[i];
        if (m->rank < 0) return NULL;
        if (m->key == key) return m;
        i = (i + 1) & t->merges_mask;
    }
}

static int tok__arena_add(Tokenizer *t, const char *s, size_t n, uint32_t *off) {
    if (t->arena_len + n + 1 > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap * 2 : 1 << 20;
        while (cap < t->arena_len + n + 1) cap *= 2;
        char *a = (char *)realloc(t->arena, cap);
        if (!a) return -1;
        t->arena = a; t->arena_cap = cap;
    }
    if (t->arena_len + n > UINT32_MAX) return -1;
    memcpy(t->arena + t->arena_len, s, n);
    t->arena[t->arena_len + n] = 0;
    *off = (uint32_t)t->arena_len;
    t->arena_len += n + 1;
    return 0;
}

/* Symbol string (vocab key / merge operand) -> raw bytes: each of the 256 byte symbols becomes
 * its byte; any other character is kept as literal UTF-8 (DeepSeek-V3 keeps a few added tokens
 * in model.vocab that way). out needs room for n bytes. */
static size_t tok__symbols_to_bytes(const int16_t *sym_byte, const char *s, size_t n, char *out) {
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t cp; int st;
        size_t k = tok_utf8_next((const unsigned char *)s + i, n - i, &cp, &st);
        if (st == 0 && cp < 0x144 && sym_byte[cp] >= 0) out[o++] = (char)sym_byte[cp];
        else { memcpy(out + o, s + i, k); o += k; }
        i += k;
    }
    return o;
}

static const char *tok__type_of(const JsonValue *v) {
    const char *s = json_str(json_get(v, "type"), NULL);
    return s ? s : "(no type)";
}

/* Reads the pre_tokenizer object into t->stages; returns 0 or -1 with err set. */
static int tok__load_pretok(Tokenizer *t, const JsonValue *pt, int *byte_level, const char *path,
                            char *err, size_t err_len) {
    if (!pt || json_type(pt) == JSON_NULL) return 0;
    const char *type = tok__type_of(pt);
    if (strcmp(type, "Sequence") == 0) {
        const JsonValue *list = json_get(pt, "pretokenizers");
        for (size_t i = 0; i < json_len(list); i++)
            if (tok__load_pretok(t, json_at(list, i), byte_level, path, err, err_len)) return -1;
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        if (json_bool(json_get(pt, "add_prefix_space")) == 1) {
            tok__err(err, err_len,
                     "%s: pre_tokenizer ByteLevel with add_prefix_space=true is not supported",
                     path);
            return -1;
        }
        *byte_level = 1;
        if (json_bool(json_get(pt, "use_regex")) != 0) {   /* true or absent: HF default is true */
            if (t->n_stages >= TOK_MAX_STAGES) goto too_many;
            t->stages[t->n_stages++] = TOK_RE_GPT2;
            strncat(t->pretok_name, t->pretok_name[0] ? "+gpt2" : "gpt2",
                    sizeof t->pretok_name - strlen(t->pretok_name) - 1);
        }
        return 0;
    }
    if (strcmp(type, "Split") == 0) {
        const JsonValue *pat = json_get(pt, "pattern");
        size_t len = 0;
        const char *re = json_str(json_get(pat, "Regex"), &len);
        const char *behavior = json_str(json_get(pt, "behavior"), NULL);
        if (!re) {
            tok__err(err, err_len,
                     "%s: pre_tokenizer Split without a Regex pattern is not supported", path);
            return -1;
        }
        if (!behavior || strcmp(behavior, "Isolated") != 0 ||
            json_bool(json_get(pt, "invert")) == 1) {
            tok__err(err, err_len,
                     "%s: pre_tokenizer Split behavior \"%s\"%s is not supported (only Isolated)",
                     path, behavior ? behavior : "?",
                     json_bool(json_get(pt, "invert")) == 1 ? " with invert" : "");
            return -1;
        }
        for (size_t k = 0; k < sizeof tok__known_regex / sizeof *tok__known_regex; k++) {
            if (strlen(tok__known_regex[k].pattern) == len &&
                memcmp(tok__known_regex[k].pattern, re, len) == 0) {
                if (t->n_stages >= TOK_MAX_STAGES) goto too_many;
                t->stages[t->n_stages++] = tok__known_regex[k].kind;
                if (t->pretok_name[0])
                    strncat(t->pretok_name, "+",
                            sizeof t->pretok_name - strlen(t->pretok_name) - 1);
                strncat(t->pretok_name, tok__known_regex[k].name,
                        sizeof t->pretok_name - strlen(t->pretok_name) - 1);
                return 0;
            }
        }
        tok__err(err, err_len,
                 "%s: unsupported pre_tokenizer Split regex \"%.200s\" (known: GLM/Llama-3, Qwen2, "
                 "DeepSeek-V3, GPT-2 patterns)",
                 path, re);
        return -1;
    }
    tok__err(err, err_len, "%s: unsupported pre_tokenizer type \"%s\"", path, type);
    return -1;
too_many:
    tok__err(err, err_len, "%s: pre_tokenizer has more than %d stages", path, TOK_MAX_STAGES);
    return -1;
}

static int tok__load_normalizer(Tokenizer *t, const JsonValue *nm, const char *path, char *err,
                                size_t err_len) {
    if (!nm || json_type(nm) == JSON_NULL) return 0;
    const char *type = tok__type_of(nm);
    if (strcmp(type, "Sequence") == 0) {
        const JsonValue *list = json_get(nm, "normalizers");
        for (size_t i = 0; i < json_len(list); i++)
            if (tok__load_normalizer(t, json_at(list, i), path, err, err_len)) return -1;
        return 0;
    }
    if (strcmp(type, "NFC") == 0) { t->nfc = 1; return 0; }
    tok__err(err, err_len, "%s: unsupported normalizer type \"%s\"", path, type);
    return -1;
}

static int tok__load_decoder(const JsonValue *dc, const char *path, char *err, size_t err_len) {
    if (!dc || json_type(dc) == JSON_NULL) return 0;
    const char *type = tok__type_of(dc);
    if (strcmp(type, "ByteLevel") == 0) return 0;
    if (strcmp(type, "Sequence") == 0) {
        const JsonValue *list = json_get(dc, "decoders");
        for (size_t i = 0; i < json_len(list); i++)
            if (tok__load_decoder(json_at(list, i), path, err, err_len)) return -1;
        return 0;
    }
    tok__err(err, err_len, "%s: unsupported decoder type \"%s\" (byte-level BPE needs ByteLevel)",
             path, type);
    return -1;
}

static int tok__ensure_ids(Tokenizer *t, int64_t id, const char *path, char *err, size_t err_len) {
    if (id < 0 || id >= TOK_MAX_ID) {
        tok__err(err, err_len, "%s: token id %lld out of range", path, (long long)id);
        return -1;
    }
    if ((size_t)id < t->ids_cap) return 0;
    size_t old = t->ids_cap, cap = old ? old : 1024;
    while (cap <= (size_t)id) cap *= 2;
    uint32_t *po = (uint32_t *)realloc(t->piece_off, cap * sizeof *po);
    if (po) t->piece_off = po;
    uint32_t *pl = (uint32_t *)realloc(t->piece_len, cap * sizeof *pl);
    if (pl) t->piece_len = pl;
    unsigned char *fl = (unsigned char *)realloc(t->flags, cap);
    if (fl) t->flags = fl;
    if (!po || !pl || !fl) { tok__err(err, err_len, "%s: out of memory", path); return -1; }
    for (size_t i = old; i < cap; i++) {
        t->piece_len[i] = UINT32_MAX;
        t->piece_off[i] = 0;
        t->flags[i] = 0;
    }
    t->ids_cap = cap;
    return 0;
}

Tokenizer *tok_load(const char *path, char *err, size_t err_len) {
    size_t text_len = 0;
    char jerr[256];
    char *text = json_read_file_max(path, TOK_JSON_MAX, &text_len, jerr, sizeof jerr);
    if (!text) { tok__err(err, err_len, "%s", jerr); return NULL; }
    Tokenizer *t = tok_load_json(text, text_len, path, err, err_len);
    free(text);
    return t;
}

Tokenizer *tok_load_json(const char *text, size_t text_len, const char *path, char *err,
                         size_t err_len) {
    char jerr[256];
    JsonDoc *doc = json_parse(text, text_len, jerr, sizeof jerr);
    if (!doc) { tok__err(err, err_len, "%s: invalid JSON: %s", path, jerr); return NULL; }
    Tokenizer *t = (Tokenizer *)calloc(1, sizeof *t);
    char *buf = NULL;
    if (!t) goto oom;
    const JsonValue *root = json_root(doc);
    const JsonValue *model = json_get(root, "model");
    if (json_type(model) != JSON_OBJECT) {
        tok__err(err, err_len, "%s: no \"model\" object", path);
        goto fail;
    }
    const char *mtype = json_str(json_get(model, "type"), NULL);
    if (!mtype || strcmp(mtype, "BPE") != 0) {
        tok__err(err, err_len, "%s: model.type \"%s\" is not supported (only BPE)", path,
                 mtype ? mtype : "(none)");
        goto fail;
    }
    {
        const char *s; size_t n;
        s = json_str(json_get(model, "continuing_subword_prefix"), &n);
        if (s && n) {
            tok__err(err, err_len, "%s: model.continuing_subword_prefix is not supported", path);
            goto fail;
        }
        s = json_str(json_get(model, "end_of_word_suffix"), &n);
        if (s && n) {
            tok__err(err, err_len, "%s: model.end_of_word_suffix is not supported", path);
            goto fail;
        }
        double dropout = json_num(json_get(model, "dropout"));
        if (dropout == dropout && dropout > 0) {
            tok__err(err, err_len, "%s: model.dropout is not supported", path);
            goto fail;
        }
    }
    t->ignore_merges = json_bool(json_get(model, "ignore_merges")) == 1;

    /* pre_tokenizer / normalizer / decoder: refuse what we do not implement */
    int byte_level = 0;
    if (tok__load_pretok(t, json_get(root, "pre_tokenizer"), &byte_level, path, err, err_len))
        goto fail;
    if (!byte_level) {
        tok__err(err, err_len,
                 "%s: pre_tokenizer has no ByteLevel step; only byte-level BPE is supported", path);
        goto fail;
    }
    if (tok__load_normalizer(t, json_get(root, "normalizer"), path, err, err_len)) goto fail;
    if (tok__load_decoder(json_get(root, "decoder"), path, err, err_len)) goto fail;
    if (!t->pretok_name[0]) snprintf(t->pretok_name, sizeof t->pretok_name, "bytelevel");

    int16_t sym_byte[0x144];
    for (int i = 0; i < 0x144; i++) sym_byte[i] = -1;
    for (int b = 0; b < 256; b++) sym_byte[tok_byte_symbol((unsigned char)b)] = (int16_t)b;

    /* vocab */
    const JsonValue *vocab = json_get(model, "vocab");
    if (json_type(vocab) != JSON_OBJECT || json_len(vocab) == 0) {
        tok__err(err, err_len, "%s: model.vocab missing or empty", path); goto fail;
    }
    size_t nv = json_len(vocab);
    size_t vcap = 1;
    while (vcap < nv * 2) vcap *= 2;
    t->vocab = (TokVocabSlot *)malloc(vcap * sizeof *t->vocab);
    if (!t->vocab) goto oom;
    for (size_t i = 0; i < vcap; i++) t->vocab[i].id = -1;
    t->vocab_mask = vcap - 1;
    size_t buf_cap = 1024;
    buf = (char *)malloc(buf_cap);
    if (!buf) goto oom;
    for (size_t i = 0; i < nv; i++) {
        size_t klen;
        const char *key = json_key_at(vocab, i, &klen);
        int64_t id;
        if (!json_is_int(json_value_at(vocab, i), &id)) {
            tok__err(err, err_len, "%s: model.vocab[\"%.60s\"] is not an integer id", path, key);
            goto fail;
        }
        if (tok__ensure_ids(t, id, path, err, err_len)) goto fail;
        if (id >= t->vocab_size) t->vocab_size = (int)id + 1;
        if (klen > buf_cap) {
            free(buf);
            buf_cap = klen * 2;
            buf = (char *)malloc(buf_cap);
            if (!buf) goto oom;
        }
        size_t n = tok__symbols_to_bytes(sym_byte, key, klen, buf);
        if (n == 0) {
            tok__err(err, err_len, "%s: model.vocab has an empty token (id %lld)", path,
                     (long long)id);
            goto fail;
        }
        uint32_t off;
        if (tok__arena_add(t, buf, n, &off)) goto oom;
        t->piece_off[id] = off; t->piece_len[id] = (uint32_t)n;
        if (n > t->max_piece_len) t->max_piece_len = n;
        size_t h = tok__hash_bytes(buf, n) & t->vocab_mask;
        while (t->vocab[h].id >= 0 &&
               !(t->vocab[h].len == n && memcmp(t->arena + t->vocab[h].off, buf, n) == 0))
            h = (h + 1) & t->vocab_mask;
        t->vocab[h].off = off; t->vocab[h].len = (uint32_t)n; t->vocab[h].id = (int32_t)id;
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        t->byte_id[b] = tok__vocab_find(t, &c, 1);
        if (t->byte_id[b] < 0) {
            tok__err(err, err_len,
                     "%s: model.vocab lacks the byte symbol for byte 0x%02X; not a byte-level BPE",
                     path, b);
            goto fail;
        }
    }

    /* merges */
    const JsonValue *merges = json_get(model, "merges");
    size_t nm = json_len(merges);
    if (json_type(merges) != JSON_ARRAY) {
        tok__err(err, err_len, "%s: model.merges missing", path);
        goto fail;
    }
    size_t mcap = 1;
    while (mcap < nm * 2 + 2) mcap *= 2;
    t->merges = (TokMergeSlot *)malloc(mcap * sizeof *t->merges);
    if (!t->merges) goto oom;
    for (size_t i = 0; i < mcap; i++) t->merges[i].rank = -1;
    t->merges_mask = mcap - 1;
    for (size_t i = 0; i < nm; i++) {
        const JsonValue *m = json_at(merges, i);
        const char *ls, *rs; size_t ll, rl;
        if (json_type(m) == JSON_STRING) {
            size_t n; const char *s = json_str(m, &n);
            const char *sp = memchr(s, ' ', n);
            if (!sp) {
                tok__err(err, err_len, "%s: model.merges[%zu] \"%.60s\" has no space", path, i, s);
                goto fail;
            }
            ls = s; ll = (size_t)(sp - s); rs = sp + 1; rl = n - ll - 1;
        } else if (json_type(m) == JSON_ARRAY && json_len(m) == 2 &&
                   (ls = json_str(json_at(m, 0), &ll)) && (rs = json_str(json_at(m, 1), &rl))) {
        } else {
            tok__err(err, err_len, "%s: model.merges[%zu] is neither \"a b\" nor [\"a\",\"b\"]",
                     path, i);
            goto fail;
        }
        if (ll + rl > buf_cap) {
            free(buf);
            buf_cap = (ll + rl) * 2;
            buf = (char *)malloc(buf_cap);
            if (!buf) goto oom;
        }
        size_t lb = tok__symbols_to_bytes(sym_byte, ls, ll, buf);
        size_t rb = tok__symbols_to_bytes(sym_byte, rs, rl, buf + lb);
        int32_t a = tok__vocab_find(t, buf, lb), b = tok__vocab_find(t, buf + lb, rb);
        int32_t c = tok__vocab_find(t, buf, lb + rb);
        if (a < 0 || b < 0 || c < 0) {
            tok__err(err, err_len,
                     "%s: model.merges[%zu] \"%.*s\" + \"%.*s\": %s is not in model.vocab", path, i,
                     (int)(ll > 60 ? 60 : ll), ls, (int)(rl > 60 ? 60 : rl), rs,
                     a < 0   ? "left part"
                     : b < 0 ? "right part"
                             : "merged token");
            goto fail;
        }
        uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
        size_t h = tok__hash_pair(key) & t->merges_mask;
        while (t->merges[h].rank >= 0 && t->merges[h].key != key) h = (h + 1) & t->merges_mask;
        /* a repeated pair keeps its last rank, as HF's and transformers.js's maps do */
        t->merges[h].key = key; t->merges[h].rank = (int32_t)i; t->merges[h].merged = c;
    }

    /* added tokens */
    const JsonValue *added = json_get(root, "added_tokens");
    t->n_added = json_len(added);
    t->added = (TokAdded *)calloc(t->n_added + 1, sizeof *t->added);
    if (!t->added) goto oom;
    for (size_t i = 0; i < t->n_added; i++) {
        const JsonValue *a = json_at(added, i);
        int64_t id; size_t n;
        const char *content = json_str(json_get(a, "content"), &n);
        if (!json_is_int(json_get(a, "id"), &id) || !content || n == 0) {
            tok__err(err, err_len,
                     "%s: added_tokens[%zu] needs an integer id and a non-empty content", path, i);
            goto fail;
        }
        if (tok__ensure_ids(t, id, path, err, err_len)) goto fail;
        if (id >= t->vocab_size) t->vocab_size = (int)id + 1;
        TokAdded *ta = &t->added[i];
        ta->id = (int32_t)id; ta->len = (uint32_t)n;
        ta->special = json_bool(json_get(a, "special")) == 1;
        ta->lstrip = json_bool(json_get(a, "lstrip")) == 1;
        ta->rstrip = json_bool(json_get(a, "rstrip")) == 1;
        ta->single_word = json_bool(json_get(a, "single_word")) == 1;
        if (tok__arena_add(t, content, n, &ta->off)) goto oom;
        t->piece_off[id] = ta->off; t->piece_len[id] = (uint32_t)n;
        t->flags[id] = (unsigned char)(1 | (ta->special ? 2 : 0));
        if (n > t->max_piece_len) t->max_piece_len = n;
    }
    /* index added tokens by first byte, longest first, for leftmost-longest matching */
    for (size_t i = 0; i < t->n_added; i++)
        t->added_by_byte_n[(unsigned char)t->arena[t->added[i].off]]++;
    for (int b = 0; b < 256; b++) {
        if (!t->added_by_byte_n[b]) continue;
        t->added_by_byte[b] = (uint32_t *)malloc(t->added_by_byte_n[b] * sizeof(uint32_t));
        if (!t->added_by_byte[b]) goto oom;
        t->added_by_byte_n[b] = 0;
    }
    for (size_t i = 0; i < t->n_added; i++) {
        unsigned char b = (unsigned char)t->arena[t->added[i].off];
        uint32_t *list = t->added_by_byte[b], k = t->added_by_byte_n[b]++;
        while (k > 0 && t->added[list[k - 1]].len < t->added[i].len) { list[k] = list[k - 1]; k--; }
        list[k] = (uint32_t)i;
    }
    t->cache = (TokCacheSlot *)calloc(TOK_CACHE_SLOTS, sizeof *t->cache);
    if (!t->cache) goto oom;
    free(buf);
    json_free(doc);
    return t;
oom:
    tok__err(err, err_len, "%s: out of memory", path);
fail:
    free(buf);
    json_free(doc);
    tok_free(t);
    return NULL;
}

void tok_free(Tokenizer *t) {
    if (!t) return;
    free(t->arena); free(t->piece_off); free(t->piece_len); free(t->flags);
    free(t->vocab); free(t->merges); free(t->added); free(t->cache);
    for (int b = 0; b < 256; b++) free(t->added_by_byte[b]);
    free(t);
}

int tok_vocab_size(const Tokenizer *t) { return t->vocab_size; }
const char *tok_pretokenizer_name(const Tokenizer *t) { return t->pretok_name; }

const char *tok_piece(const Tokenizer *t, int id, size_t *len) {
    if (id < 0 || id >= t->vocab_size || t->piece_len[id] == UINT32_MAX) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->piece_len[id];
    return t->arena + t->piece_off[id];
}

int tok_is_special(const Tokenizer *t, int id) {
    return id >= 0 && id < t->vocab_size && (t->flags[id] & 2) != 0;
}

int tok_is_added(const Tokenizer *t, int id) {
    return id >= 0 && id < t->vocab_size && (t->flags[id] & 1) != 0;
}

int tok_id(const Tokenizer *t, const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && memcmp(t->arena + t->added[i].off, s, n) == 0)
            return t->added[i].id;
    return n ? tok__vocab_find(t, s, n) : -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Encoding                                                                                   */

typedef struct { int32_t *v; size_t n, cap; int oom; } TokIds;

static void tok__push(TokIds *o, int32_t id) {
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 256;
        int32_t *v = (int32_t *)realloc(o->v, cap * sizeof *v);
        if (!v) { o->oom = 1; return; }
        o->v = v; o->cap = cap;
    }
    o->v[o->n++] = id;
}

typedef struct { int32_t rank, left, right, left_id, right_id; } TokHeapItem;

typedef struct {                 /* scratch of one tok_encode call */
    int32_t *sym, *prev, *next; size_t sym_cap;
    TokHeapItem *heap; size_t heap_n, heap_cap;
    int oom;
} TokBpe;

static int tok__heap_less(const TokHeapItem *a, const TokHeapItem *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void tok__heap_push(TokBpe *w, TokHeapItem it) {
    if (w->heap_n == w->heap_cap) {
        size_t cap = w->heap_cap ? w->heap_cap * 2 : 64;
        TokHeapItem *h = (TokHeapItem *)realloc(w->heap, cap * sizeof *h);
        if (!h) { w->oom = 1; return; }
        w->heap = h; w->heap_cap = cap;
    }
    size_t i = w->heap_n++;
    while (i > 0 && tok__heap_less(&it, &w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = it;
}

static TokHeapItem tok__heap_pop(TokBpe *w) {
    TokHeapItem top = w->heap[0], last = w->heap[--w->heap_n];
    size_t i = 0, n = w->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && tok__heap_less(&w->heap[c + 1], &w->heap[c])) c++;
        if (!tok__heap_less(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c]; i = c;
    }
    if (n) w->heap[i] = last;
    return top;
}

static void tok__try_pair(const Tokenizer *t, TokBpe *w, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const TokMergeSlot *m = tok__merge_find(t, w->sym[left], w->sym[right]);
    if (m) tok__heap_push(w, (TokHeapItem){ m->rank, left, right, w->sym[left], w->sym[right] });
}

/* BPE of one pre-tokenized piece (raw bytes) -> ids appended to out. */
static void tok__bpe_piece(const Tokenizer *t, TokBpe *w, const char *s, size_t n, TokIds *out) {
    if (n == 0) return;
    uint64_t h = 0;
    TokCacheSlot *slot = NULL;
    if (n <= TOK_CACHE_KEY) {
        h = tok__hash_bytes(s, n);
        slot = &t->cache[h & (TOK_CACHE_SLOTS - 1)];
        if (slot->key_len == n && memcmp(slot->key, s, n) == 0) {
            for (int i = 0; i < slot->n_ids; i++) tok__push(out, slot->ids[i]);
            return;
        }
    }
    size_t start = out->n;
    int32_t whole = t->ignore_merges || n == 1 ? tok__vocab_find(t, s, n) : -1;
    if (whole >= 0) {
        tok__push(out, whole);
    } else {
        if (n > w->sym_cap) {
            size_t cap = n * 2;
            int32_t *a = (int32_t *)realloc(w->sym, cap * sizeof *a); if (a) w->sym = a;
            int32_t *b = (int32_t *)realloc(w->prev, cap * sizeof *b); if (b) w->prev = b;
            int32_t *c = (int32_t *)realloc(w->next, cap * sizeof *c); if (c) w->next = c;
            if (!a || !b || !c) { out->oom = 1; return; }
            w->sym_cap = cap;
        }
        for (size_t i = 0; i < n; i++) {
            w->sym[i] = t->byte_id[(unsigned char)s[i]];
            w->prev[i] = (int32_t)i - 1;
            w->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        }
        w->heap_n = 0;
        for (size_t i = 0; i + 1 < n; i++) tok__try_pair(t, w, (int32_t)i, (int32_t)i + 1);
        while (w->heap_n) {
            TokHeapItem it = tok__heap_pop(w);
            /* stale entries: a side was merged away or changed since the pair was queued */
            if (w->sym[it.left] != it.left_id || w->next[it.left] != it.right ||
                w->sym[it.right] != it.right_id)
                continue;
            const TokMergeSlot *m = tok__merge_find(t, it.left_id, it.right_id);
            w->sym[it.left] = m->merged;
            w->sym[it.right] = -1;
            int32_t nx = w->next[it.right];
            w->next[it.left] = nx;
            if (nx >= 0) w->prev[nx] = it.left;
            tok__try_pair(t, w, w->prev[it.left], it.left);
            tok__try_pair(t, w, it.left, nx);
        }
        if (w->oom) { out->oom = 1; return; }
        for (int32_t i = 0; i >= 0; i = w->next[i]) tok__push(out, w->sym[i]);
    }
    if (slot && !out->oom && out->n - start <= TOK_CACHE_IDS) {
        memcpy(slot->key, s, n); slot->key_len = (unsigned char)n;
        slot->n_ids = (unsigned char)(out->n - start);
        memcpy(slot->ids, out->v + start, slot->n_ids * sizeof(int32_t));
    }
}

typedef struct {
    const Tokenizer *t;
    const uint32_t *cps; const uint32_t *off; const char *bytes;   /* clean text, offsets per cp */
    TokBpe *bpe; TokIds *out;
    void (*fn)(void *ctx, const char *piece, size_t len); void *ctx;   /* tok_pretokenize */
} TokSplit;

/* Runs pre-tokenizer stage `stage` over cps[lo..hi): every match and every gap between matches
 * is a piece ("Isolated"), handed to the next stage, the last stage's pieces go to BPE. */
static void tok__split(TokSplit *sp, int stage, size_t lo, size_t hi) {
    if (lo >= hi) return;
    if (stage == sp->t->n_stages) {
        const char *s = sp->bytes + sp->off[lo];
        size_t n = sp->off[hi] - sp->off[lo];
        if (sp->fn) sp->fn(sp->ctx, s, n);
        else tok__bpe_piece(sp->t, sp->bpe, s, n, sp->out);
        return;
    }
    TokRegex re = sp->t->stages[stage];
    const uint32_t *c = sp->cps + lo;
    size_t n = hi - lo, gap = 0, p = 0;
    while (p < n) {
        size_t k = tok__regex_match(re, c, p, n);
        if (!k) { p++; continue; }
        if (gap < p) tok__split(sp, stage + 1, lo + gap, lo + p);
        tok__split(sp, stage + 1, lo + p, lo + p + k);
        p += k; gap = p;
    }
    if (gap < n) tok__split(sp, stage + 1, lo + gap, hi);
}

/* One stretch of ordinary text: UTF-8 clean-up, normalizer, pre-tokenizer, BPE. */
static int tok__encode_text(const Tokenizer *t, const char *text, size_t len, TokBpe *bpe,
                            TokIds *out, void (*fn)(void *, const char *, size_t), void *ctx) {
    if (len == 0) return 0;
    uint32_t *cps = (uint32_t *)malloc((len + 1) * sizeof *cps);
    uint32_t *off = (uint32_t *)malloc((len + 1) * sizeof *off);
    char *clean = NULL;
    uint32_t *norm = NULL;
    int rc = -1;
    if (!cps || !off) goto done;
    size_t n = 0, i = 0;
    while (i < len) {
        int st;
        i += tok_utf8_next((const unsigned char *)text + i, len - i, &cps[n], &st);
        n++;
    }
    if (t->nfc) {
        size_t m; int oom;
        norm = tok__nfc(cps, n, &m, &oom);
        if (oom) goto done;
        if (norm) {
            if (m > n) {   /* NFC can lengthen text (a few decompositions); make room */
                uint32_t *o2 = (uint32_t *)realloc(off, (m + 1) * sizeof *o2);
                if (!o2) goto done;
                off = o2;
            }
            free(cps); cps = norm; norm = NULL; n = m;
        }
    }
    clean = (char *)malloc(n * 4 + 4);
    if (!clean) goto done;
    size_t o = 0;
    for (size_t k = 0; k < n; k++) { off[k] = (uint32_t)o; o += tok__utf8_put(cps[k], clean + o); }
    off[n] = (uint32_t)o;
    TokSplit sp = { t, cps, off, clean, bpe, out, fn, ctx };
    tok__split(&sp, 0, 0, n);
    rc = out->oom || bpe->oom ? -1 : 0;
done:
    free(cps); free(off); free(clean); free(norm);
    return rc;
}

static int tok__is_word_char(uint32_t c) {
    int k = tok_uni_category(c);
    return k == TOK_CAT_L || k == TOK_CAT_N || c == '_';
}

/* single_word added tokens only match between non-word characters */
static int tok__word_char_at(const char *s, size_t n) {
    uint32_t cp; int st;
    if (n == 0) return 0;
    tok_utf8_next((const unsigned char *)s, n, &cp, &st);
    return tok__is_word_char(cp);
}

static int tok__word_char_before(const char *text, size_t i) {
    if (i == 0) return 0;
    size_t back = i - 1;
    while (back > 0 && ((unsigned char)text[back] & 0xC0) == 0x80) back--;
    return tok__word_char_at(text + back, i - back);
}

int tok_encode(const Tokenizer *t, const char *text, size_t len, TokSpecialMode mode, int32_t **ids,
               size_t *n) {
    TokIds out = { 0 };
    TokBpe bpe = { 0 };
    int rc = 0;
    tok__push(&out, 0); out.n = 0;   /* so that *ids is never NULL */
    size_t span = 0, i = 0;
    while (i < len && mode != TOK_SPECIAL_NONE && !out.oom) {
        unsigned char b = (unsigned char)text[i];
        const TokAdded *hit = NULL;
        for (uint32_t k = 0; k < t->added_by_byte_n[b]; k++) {
            const TokAdded *a = &t->added[t->added_by_byte[b][k]];
            if (mode == TOK_SPECIAL_NONSPECIAL_ONLY && a->special) continue;
            if (a->len > len - i || memcmp(text + i, t->arena + a->off, a->len) != 0) continue;
            if (a->single_word && (tok__word_char_before(text, i) ||
                                   tok__word_char_at(text + i + a->len, len - i - a->len)))
                continue;
            hit = a;
            break;
        }
        if (!hit) { i++; continue; }
        size_t end = i;
        if (hit->lstrip)   /* the token swallows the whitespace on its left */
            while (end > span) {
                size_t back = end - 1;
                while (back > span && ((unsigned char)text[back] & 0xC0) == 0x80) back--;
                uint32_t cp; int st;
                tok_utf8_next((const unsigned char *)text + back, end - back, &cp, &st);
                if (st || !tok_uni_is_space(cp)) break;
                end = back;
            }
        if (tok__encode_text(t, text + span, end - span, &bpe, &out, NULL, NULL)) {
            rc = -1;
            break;
        }
        tok__push(&out, hit->id);
        i += hit->len;
        if (hit->rstrip)
            while (i < len) {
                uint32_t cp; int st;
                size_t k = tok_utf8_next((const unsigned char *)text + i, len - i, &cp, &st);
                if (st || !tok_uni_is_space(cp)) break;
                i += k;
            }
        span = i;
    }
    if (rc == 0 && !out.oom && tok__encode_text(t, text + span, len - span, &bpe, &out, NULL, NULL))
        rc = -1;
    free(bpe.sym); free(bpe.prev); free(bpe.next); free(bpe.heap);
    if (rc || out.oom) { free(out.v); *ids = NULL; *n = 0; return -1; }
    *ids = out.v; *n = out.n;
    return 0;
}

int tok_pretokenize(const Tokenizer *t, const char *text, size_t len,
                    void (*fn)(void *ctx, const char *piece, size_t len), void *ctx) {
    TokIds out = { 0 };
    TokBpe bpe = { 0 };
    int rc = tok__encode_text(t, text, len, &bpe, &out, fn, ctx);
    free(out.v);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Decoding                                                                                   */

void tok_stream_init(TokStream *s) { memset(s, 0, sizeof *s); }

size_t tok_stream_out_cap(const Tokenizer *t) { return 3 * (t->max_piece_len + 4) + 16; }

/* Appends n bytes to out if they fit; always advances *pos (so callers learn the needed size). */
static void tok__emit(char *out, size_t cap, size_t *pos, const char *s, size_t n) {
    if (*pos + n <= cap) memcpy(out + *pos, s, n);
    *pos += n;
}

static const char tok__fffd[3] = { (char)0xEF, (char)0xBF, (char)0xBD };

/* Feeds bytes through the pending buffer, emitting every complete character, U+FFFD for
 * invalid subparts, and keeping an incomplete tail (at most 3 bytes) in s->pending. */
static void tok__stream_bytes(TokStream *s, const unsigned char *b, size_t n, char *out, size_t cap,
                              size_t *pos) {
    size_t i = 0;
    while (i < n) {
        if (s->npending == 0) {
            /* fast path: take a run of complete characters straight from b */
            size_t j = i;
            for (;;) {
                if (j >= n) break;
                if (b[j] < 0x80) { j++; continue; }
                uint32_t cp; int st;
                size_t k = tok_utf8_next(b + j, n - j, &cp, &st);
                if (st) break;
                j += k;
            }
            tok__emit(out, cap, pos, (const char *)b + i, j - i);
            i = j;
            if (i >= n) break;
        }
        s->pending[s->npending++] = b[i++];
        for (;;) {
            uint32_t cp; int st;
            size_t k = tok_utf8_next(s->pending, (size_t)s->npending, &cp, &st);
            if (st == 2) break;                       /* wait for more bytes */
            if (st == 0) tok__emit(out, cap, pos, (const char *)s->pending, k);
            else tok__emit(out, cap, pos, tok__fffd, 3);
            /* the bytes after the consumed part start a new character */
            memmove(s->pending, s->pending + k, (size_t)s->npending - k);
            s->npending -= (int)k;
            if (s->npending == 0) break;
        }
    }
}

size_t tok_stream_flush(TokStream *s, char *out, size_t out_cap) {
    size_t pos = 0;
    if (s->npending) { tok__emit(out, out_cap, &pos, tok__fffd, 3); s->npending = 0; }
    return pos;
}

size_t tok_stream_feed(const Tokenizer *t, TokStream *s, int id, char *out, size_t out_cap) {
    size_t len, pos = 0;
    const char *p = tok_piece(t, id, &len);
    if (!p) return 0;
    if (tok_is_added(t, id)) {
        /* added tokens are not byte-level: end the byte run, then copy the text */
        pos = tok_stream_flush(s, out, out_cap);
        tok__emit(out, out_cap, &pos, p, len);
        return pos;
    }
    tok__stream_bytes(s, (const unsigned char *)p, len, out, out_cap, &pos);
    return pos;
}

int tok_decode(const Tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **out,
               size_t *out_len) {
    size_t cap = 64, len = 0;
    for (size_t i = 0; i < n; i++) { size_t l; if (tok_piece(t, ids[i], &l)) cap += 3 * l; }
    cap += 8;
    char *buf = (char *)malloc(cap);
    if (!buf) { *out = NULL; *out_len = 0; return -1; }
    TokStream s; tok_stream_init(&s);
    for (size_t i = 0; i < n; i++) {
        if (skip_special && tok_is_special(t, ids[i])) continue;
        len += tok_stream_feed(t, &s, ids[i], buf + len, cap - len);
    }
    len += tok_stream_flush(&s, buf + len, cap - len);
    buf[len] = 0;
    *out = buf; *out_len = len;
    return 0;
}

#endif /* TOK_IMPLEMENTATION_DONE */
#endif /* TOK_IMPLEMENTATION */

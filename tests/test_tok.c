/* Unit tests of tok.h that need no network: Unicode classes, the byte<->symbol table, UTF-8
 * decoding, the GLM pre-tokenizer on the examples of docs/tokenizer.md section 1.3 (through the
 * tiny fixture, which carries the GLM regex), BPE rules on small tokenizer.json files written here,
 * added-token modes and flags, NFC, the streaming decoder, and load errors. */
#define JSON_IMPLEMENTATION
#include "json.h"
#define TOK_IMPLEMENTATION
#include "tok.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;
#define CHECK(name, cond, ...) do { \
    if (cond) printf("PASS %s\n", name); \
    else { failures++; printf("FAIL %s: ", name); printf(__VA_ARGS__); printf("\n"); } } while (0)

#define TINY "tests/fixtures/tiny_tokenizer/tokenizer.json"

/* ---- helpers ---- */

static char tmpdir[256];

static const char *write_tmp(const char *name, const char *text) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    if (!f) { printf("FAIL tmpfile: cannot write %s\n", path); exit(1); }
    fputs(text, f);
    fclose(f);
    return path;
}

/* JSON text of a byte-level BPE: all 256 byte symbols (ids 0..255 in byte order) followed by
 * `extra` tokens (symbol strings) with ids 256.., the given merges and added tokens. */
static char *make_json(const char *extra[], int n_extra, const char *merges, const char *added,
                       int ignore_merges, const char *normalizer, const char *pretok) {
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    n += (size_t)snprintf(s + n, cap - n,
                          "{\"model\":{\"type\":\"BPE\",\"ignore_merges\":%s,\"vocab\":{",
                          ignore_merges ? "true" : "false");
    for (int b = 0; b < 256; b++) {
        char sym[8]; size_t k = tok__utf8_put(tok_byte_symbol((unsigned char)b), sym);
        sym[k] = 0;
        if (b == '"' || b == '\\') n += (size_t)snprintf(s + n, cap - n, "\"\\%s\":%d,", sym, b);
        else n += (size_t)snprintf(s + n, cap - n, "\"%s\":%d,", sym, b);
    }
    for (int i = 0; i < n_extra; i++)
        n += (size_t)snprintf(s + n, cap - n, "\"%s\":%d,", extra[i], 256 + i);
    s[n - 1] = '}';
    n += (size_t)snprintf(s + n, cap - n,
                          ",\"merges\":[%s]},\"added_tokens\":[%s],\"normalizer\":%s,"
                          "\"pre_tokenizer\":%s,\"decoder\":{\"type\":\"ByteLevel\"}}",
                          merges, added, normalizer ? normalizer : "null",
                          pretok ? pretok
                                 : "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_"
                                   "regex\":false}");
    return s;
}

static Tokenizer *load_json(const char *name, const char *json, char *err, size_t errlen) {
    return tok_load(write_tmp(name, json), err, errlen);
}

/* encodes and renders the ids as "1 2 3" */
static const char *enc(const Tokenizer *t, const char *text, TokSpecialMode mode) {
    static char out[4096];
    int32_t *ids; size_t n;
    if (tok_encode(t, text, strlen(text), mode, &ids, &n)) return "(oom)";
    size_t k = 0; out[0] = 0;
    for (size_t i = 0; i < n && k < sizeof out - 16; i++)
        k += (size_t)snprintf(out + k, sizeof out - k, i ? " %d" : "%d", ids[i]);
    free(ids);
    return out;
}

typedef struct { char buf[4096]; size_t len; } Pieces;
static void add_piece(void *ctx, const char *p, size_t n) {
    Pieces *ps = ctx;
    if (ps->len) ps->buf[ps->len++] = '|';
    memcpy(ps->buf + ps->len, p, n); ps->len += n; ps->buf[ps->len] = 0;
}

/* ---- tests ---- */

static void test_unicode(void) {
    struct { uint32_t cp; int cat; int space;
    } cases[] = {
        { 'A', TOK_CAT_L, 0 },          { 0xE9, TOK_CAT_L, 0 },       { 0x4E16, TOK_CAT_L, 0 },
        { 0x20000, TOK_CAT_L, 0 },      { 0xAC00, TOK_CAT_L, 0 },     { 0x05D0, TOK_CAT_L, 0 },
        { '7', TOK_CAT_N, 0 },          { 0x0663, TOK_CAT_N, 0 },     { 0x216B, TOK_CAT_N, 0 },
        { 0xBD, TOK_CAT_N, 0 },         { 0x2460, TOK_CAT_N, 0 },     { '!', TOK_CAT_P, 0 },
        { 0x3001, TOK_CAT_P, 0 },       { '+', TOK_CAT_S, 0 },        { 0x20AC, TOK_CAT_S, 0 },
        { 0x1F600, TOK_CAT_S, 0 },      { 0x0301, TOK_CAT_M, 0 },     { 0x094D, TOK_CAT_M, 0 },
        { ' ', TOK_CAT_OTHER, 1 },      { '\t', TOK_CAT_OTHER, 1 },   { '\r', TOK_CAT_OTHER, 1 },
        { 0x0B, TOK_CAT_OTHER, 1 },     { 0x85, TOK_CAT_OTHER, 1 },   { 0xA0, TOK_CAT_OTHER, 1 },
        { 0x1680, TOK_CAT_OTHER, 1 },   { 0x200A, TOK_CAT_OTHER, 1 }, { 0x2028, TOK_CAT_OTHER, 1 },
        { 0x202F, TOK_CAT_OTHER, 1 },   { 0x3000, TOK_CAT_OTHER, 1 }, { 0x200B, TOK_CAT_OTHER, 0 },
        { 0xFEFF, TOK_CAT_OTHER, 0 },   { 0x0000, TOK_CAT_OTHER, 0 }, { 0xE000, TOK_CAT_OTHER, 0 },
        { 0x10FFFF, TOK_CAT_OTHER, 0 }, { 0x0378, TOK_CAT_OTHER, 0 },
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (tok_uni_category(cases[i].cp) != cases[i].cat ||
            tok_uni_is_space(cases[i].cp) != cases[i].space) {
            if (!bad)
                printf("  U+%04X: category %d space %d, want %d %d\n", cases[i].cp,
                       tok_uni_category(cases[i].cp), tok_uni_is_space(cases[i].cp), cases[i].cat,
                       cases[i].space);
            bad++;
        }
    }
    CHECK("unicode_classes", bad == 0, "%d of %zu code points misclassified", bad,
          sizeof cases / sizeof *cases);
    int spaces = 0;
    for (uint32_t c = 0; c <= 0x10FFFF; c++) spaces += tok_uni_is_space(c);
    CHECK("unicode_white_space_count", spaces == 25, "%d White_Space code points, want 25", spaces);
    CHECK("unicode_version",
          strcmp(TOK_UNICODE_VERSION, "15.0.0") == 0 || TOK_UNICODE_VERSION[0] >= '1', "version %s",
          TOK_UNICODE_VERSION);
}

static void test_byte_symbols(void) {
    int seen[0x144] = { 0 }, ok = 1;
    for (int b = 0; b < 256; b++) {
        uint32_t s = tok_byte_symbol((unsigned char)b);
        if (s >= 0x144 || seen[s]++) ok = 0;
    }
    CHECK("byte_symbols_bijective", ok, "two bytes share a symbol or a symbol is out of range");
    CHECK("byte_symbols_values",
          tok_byte_symbol(' ') == 0x120 && tok_byte_symbol('\n') == 0x10A &&
              tok_byte_symbol('\t') == 0x109 && tok_byte_symbol(0) == 0x100 &&
              tok_byte_symbol('!') == '!' && tok_byte_symbol(0x7F) == 0x121 &&
              tok_byte_symbol(0xA0) == 0x142 && tok_byte_symbol(0xAD) == 0x143 &&
              tok_byte_symbol(0xFF) == 0xFF && tok_byte_symbol(0xAE) == 0xAE,
          "space %X LF %X TAB %X DEL %X NBSP %X SHY %X", tok_byte_symbol(' '),
          tok_byte_symbol('\n'), tok_byte_symbol('\t'), tok_byte_symbol(0x7F),
          tok_byte_symbol(0xA0), tok_byte_symbol(0xAD));
}

static void test_utf8(void) {
    struct { const char *s; size_t n; size_t len; int st; uint32_t cp; } cases[] = {
        { "A", 1, 1, 0, 'A' }, { "\xC3\xA9", 2, 2, 0, 0xE9 }, { "\xE4\xB8\x96", 3, 3, 0, 0x4E16 },
        { "\xF0\x9F\x98\x80", 4, 4, 0, 0x1F600 }, { "\xC0\x80", 2, 1, 1, 0xFFFD }, { "\xE0\x80\x80", 3, 1, 1, 0xFFFD },
        { "\xED\xA0\x80", 3, 1, 1, 0xFFFD }, { "\xF4\x90\x80\x80", 4, 1, 1, 0xFFFD }, { "\xF5", 1, 1, 1, 0xFFFD },
        { "\x80", 1, 1, 1, 0xFFFD }, { "\xF0\x9F\x98" "A", 4, 3, 1, 0xFFFD }, { "\xF0\x9F", 2, 2, 2, 0xFFFD },
        { "\xE2\x82", 2, 2, 2, 0xFFFD }, { "\xF4\x8F\xBF\xBF", 4, 4, 0, 0x10FFFF },
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint32_t cp; int st;
        size_t k = tok_utf8_next((const unsigned char *)cases[i].s, cases[i].n, &cp, &st);
        if (k != cases[i].len || st != cases[i].st || cp != cases[i].cp) {
            if (!bad) printf("  case %zu: len %zu status %d cp %X\n", i, k, st, cp);
            bad++;
        }
    }
    CHECK("utf8_decode", bad == 0, "%d cases wrong", bad);
}

static void test_pretokenizer(const Tokenizer *t) {
    /* docs/tokenizer.md section 1.3, pieces joined with | */
    struct { const char *in, *want; } cases[] = {
        { "Hello world", "Hello| world" },
        { "I'M YOU'RE", "I|'M| YOU|'RE" },
        { "1234567", "123|456|7" },
        { "a  b   c", "a| | b|  | c" },
        { "line1\r\nline2\r\n", "line|1|\r\n|line|2|\r\n" },
        { "mixed \t \n \r\n  \t\n end", "mixed| \t \n \r\n  \t\n| end" },
        { "   !!! x", "  | !!!| x" },
        { "Hello\xe4\xb8\x96\xe7\x95\x8c" "123abc!!!", "Hello\xe4\xb8\x96\xe7\x95\x8c|123|abc|!!!" },
        { "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c\xef\xbc\x81",
          "\xe4\xbd\xa0\xe5\xa5\xbd|\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c|\xef\xbc\x81" },
        /* more rules: ' + letter glues only for the listed contractions; trailing spaces; newline
           runs */
        { "it's 'x", "it|'s| '|x" },
        { "ab  ", "ab|  " },
        { "x\n\n  y", "x|\n\n| |" " y" },
        { "x\n\n  ", "x|\n\n|  " },
        { "a,b", "a|,b" },
        { "\xc5\xbf", "\xc5\xbf" },
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        Pieces ps = { .len = 0 };
        ps.buf[0] = 0;
        tok_pretokenize(t, cases[i].in, strlen(cases[i].in), add_piece, &ps);
        if (strcmp(ps.buf, cases[i].want) != 0) {
            printf("  \"%s\": got [%s] want [%s]\n", cases[i].in, ps.buf, cases[i].want);
            bad++;
        }
    }
    CHECK("pretokenizer_glm_examples", bad == 0, "%d of %zu inputs split wrongly", bad,
          sizeof cases / sizeof *cases);
    /* "x\n\n y": \s*[\r\n]+ takes "\n\n", then " y" -> " " + " y" (the space glues to the word) */
}

static void test_tiny_fixture(const Tokenizer *t) {
    CHECK("tiny_vocab_size", tok_vocab_size(t) == 512, "vocab size %d", tok_vocab_size(t));
    struct { const char *s; int id, special; } want[] = {
        { "<|endoftext|>", 476, 1 }, { "[gMASK]", 478, 1 }, { "<sop>", 480, 1 }, { "<|system|>", 482, 1 },
        { "<|user|>", 483, 1 }, { "<|assistant|>", 484, 1 }, { "<|observation|>", 485, 1 }, { "<think>", 497, 0 },
        { "</think>", 498, 0 }, { "<tool_call>", 499, 0 }, { "/nothink", 507, 0 }, { "<|video|>", 511, 1 },
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (tok_id(t, want[i].s) != want[i].id ||
            tok_is_special(t, want[i].id) != want[i].special || !tok_is_added(t, want[i].id)) {
            printf("  %s: id %d special %d\n", want[i].s, tok_id(t, want[i].s),
                   tok_is_special(t, tok_id(t, want[i].s)));
            bad++;
        }
    CHECK("tiny_added_token_ids", bad == 0, "%d added tokens have the wrong id or flag", bad);
    int byte_order_ok = 1;
    for (int id = 0; id < 256; id++) {
        size_t n; const char *p = tok_piece(t, id, &n);
        /* GPT-2 order: the id-th symbol of (printable bytes, then the rest) */
        if (!p || n != 1 || tok_is_added(t, id)) { byte_order_ok = 0; break; }
    }
    size_t n0; const char *p0 = tok_piece(t, 0, &n0);
    size_t n188; const char *p188 = tok_piece(t, 188, &n188);
    CHECK("tiny_byte_tokens_gpt2_order",
          byte_order_ok && p0[0] == '!' && (unsigned char)p188[0] == 0 &&
              tok_id(t, " ") == 188 + ' ',
          "id 0 = %02X, id 188 = %02X", (unsigned char)p0[0], (unsigned char)p188[0]);
    /* the GLM-5 prompt of docs/tokenizer.md section 3.4: ids 478 480 483 BPE(Hello) 484 497 */
    char want_ids[256];
    snprintf(want_ids, sizeof want_ids, "478 480 483 %s 484 497",
             enc(t, "Hello", TOK_SPECIAL_NONE));
    const char *got = enc(t, "[gMASK]<sop><|user|>Hello<|assistant|><think>", TOK_SPECIAL_ALL);
    CHECK("tiny_chat_prompt_special", strcmp(got, want_ids) == 0, "got %s want %s", got, want_ids);
    /* split_special keeps <think> (special:false) but not the role tokens */
    got = enc(t, "<|user|><think>", TOK_SPECIAL_NONSPECIAL_ONLY);
    const char *last = strrchr(got, ' ');
    CHECK("tiny_split_special_mode",
          last && strcmp(last, " 497") == 0 && strstr(got, "483") == NULL, "got %s", got);
    got = enc(t, "<think>", TOK_SPECIAL_NONE);
    CHECK("tiny_plain_mode", strstr(got, "497") == NULL && strchr(got, ' ') != NULL, "got %s", got);
    CHECK("tiny_empty_input", strcmp(enc(t, "", TOK_SPECIAL_ALL), "") == 0, "got %s",
          enc(t, "", TOK_SPECIAL_ALL));
    /* invalid UTF-8 input is replaced by U+FFFD (policy documented in tok.h) */
    char a[64], b[64];
    snprintf(a, sizeof a, "%s", enc(t, "x\xff" "y", TOK_SPECIAL_NONE));
    snprintf(b, sizeof b, "%s", enc(t, "x\xef\xbf\xbd" "y", TOK_SPECIAL_NONE));
    CHECK("invalid_utf8_input_becomes_fffd", strcmp(a, b) == 0, "got %s want %s", a, b);
}

static void test_bpe_rules(void) {
    char err[512];
    /* ids: 256 "bc", 257 "abc", 258 "ab", 259 "aa", 260 "xyz" */
    const char *extra[] = { "bc", "abc", "ab", "aa", "xyz" };
    char *js = make_json(extra, 5, "[\"b\",\"c\"],\"a bc\",[\"a\",\"b\"],[\"a\",\"a\"]", "", 0,
                         NULL, NULL);
    Tokenizer *t = load_json("bpe.json", js, err, sizeof err);
    CHECK("bpe_load_small", t != NULL, "%s", err);
    if (t) {
        /* lowest rank first: b+c (rank 0) before a+b (rank 2), then a+bc (rank 1) */
        CHECK("bpe_rank_order", strcmp(enc(t, "abc", TOK_SPECIAL_NONE), "257") == 0, "abc -> %s",
              enc(t, "abc", TOK_SPECIAL_NONE));
        CHECK("bpe_repeated_pair", strcmp(enc(t, "abab", TOK_SPECIAL_NONE), "258 258") == 0,
              "abab -> %s", enc(t, "abab", TOK_SPECIAL_NONE));
        /* equal rank: leftmost pair wins */
        CHECK("bpe_tie_leftmost", strcmp(enc(t, "aaa", TOK_SPECIAL_NONE), "259 97") == 0,
              "aaa -> %s", enc(t, "aaa", TOK_SPECIAL_NONE));
        CHECK("bpe_no_ignore_merges", strcmp(enc(t, "xyz", TOK_SPECIAL_NONE), "120 121 122") == 0,
              "xyz -> %s", enc(t, "xyz", TOK_SPECIAL_NONE));
        /* a long run goes through the heap path: 1001 a's = 500 "aa" + "a" */
        char run[1002]; memset(run, 'a', 1001); run[1001] = 0;
        int32_t *ids; size_t n;
        tok_encode(t, run, 1001, TOK_SPECIAL_NONE, &ids, &n);
        int ok = n == 501;
        for (size_t i = 0; ok && i < 500; i++) ok = ids[i] == 259;
        CHECK("bpe_long_piece", ok && ids[500] == 'a', "%zu ids", n);
        free(ids);
        tok_free(t);
    }
    free(js);
    js = make_json(extra, 5, "[\"b\",\"c\"],\"a bc\",[\"a\",\"b\"],[\"a\",\"a\"]", "", 1, NULL,
                   NULL);
    t = load_json("bpe_ignore.json", js, err, sizeof err);
    CHECK("bpe_ignore_merges", t && strcmp(enc(t, "xyz", TOK_SPECIAL_NONE), "260") == 0,
          "xyz -> %s", t ? enc(t, "xyz", TOK_SPECIAL_NONE) : err);
    tok_free(t); free(js);

    /* added-token flags: rstrip eats the whitespace after, lstrip the whitespace before */
    const char *added = "{\"id\":300,\"content\":\"<R>\",\"special\":true,\"rstrip\":true},"
                        "{\"id\":301,\"content\":\"<L>\",\"special\":true,\"lstrip\":true},"
                        "{\"id\":302,\"content\":\"<LONG>\",\"special\":false},{\"id\":303,"
                        "\"content\":\"<LO\",\"special\":true}";
    js = make_json(extra, 5, "", added, 0, NULL, NULL);
    t = load_json("added.json", js, err, sizeof err);
    CHECK("added_load", t != NULL, "%s", err);
    if (t) {
        CHECK("added_rstrip", strcmp(enc(t, "<R>  x", TOK_SPECIAL_ALL), "300 120") == 0, "got %s",
              enc(t, "<R>  x", TOK_SPECIAL_ALL));
        CHECK("added_lstrip", strcmp(enc(t, "x \t<L>", TOK_SPECIAL_ALL), "120 301") == 0, "got %s",
              enc(t, "x \t<L>", TOK_SPECIAL_ALL));
        CHECK("added_longest_match", strcmp(enc(t, "<LONG><LO", TOK_SPECIAL_ALL), "302 303") == 0,
              "got %s", enc(t, "<LONG><LO", TOK_SPECIAL_ALL));
        CHECK("vocab_size_max_id_plus_1", tok_vocab_size(t) == 304, "%d", tok_vocab_size(t));
        size_t n;
        CHECK("piece_of_gap_id", tok_piece(t, 280, &n) == NULL && n == 0, "id 280 has a piece");
        tok_free(t);
    }
    free(js);

    /* NFC normalizer: e + combining acute encodes like the precomposed letter */
    js = make_json(extra, 5, "", "", 0, "{\"type\":\"NFC\"}", NULL);
    t = load_json("nfc.json", js, err, sizeof err);
    if (t) {
        char a[64];
        snprintf(a, sizeof a, "%s", enc(t, "e\xcc\x81", TOK_SPECIAL_NONE));
        CHECK("nfc_normalizer", strcmp(a, enc(t, "\xc3\xa9", TOK_SPECIAL_NONE)) == 0, "got %s", a);
        tok_free(t);
    } else CHECK("nfc_normalizer", 0, "%s", err);
    free(js);
}

static void test_nfc(void) {
    struct { uint32_t in[6]; size_t n; uint32_t out[6]; size_t m; } cases[] = {
        { { 'e', 0x301 }, 2, { 0xE9 }, 1 },
        { { 'a', 0x302, 0x323 }, 3, { 0x1EAD }, 1 },          /* reordered, then composed twice */
        { { 'q', 0x307, 0x323 }, 3, { 'q', 0x323, 0x307 }, 3 }, /* reordered only */
        /* singleton: ANGSTROM SIGN -> A ring */
        { { 0x212B }, 1, { 0xC5 }, 1 },
        { { 0x1100, 0x1161, 0x11A8 }, 3, { 0xAC01 }, 1 },      /* Hangul L V T */
        { { 0x0344 }, 1, { 0x308, 0x301 }, 2 },               /* excluded from composition */
        { { 'a', 0x301, 0x301 }, 3, { 0xE1, 0x301 }, 2 },     /* second acute is blocked */
        { { 0x0B47, 0x0B3E }, 2, { 0x0B4B }, 1 },             /* two starters compose */
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t m = 0; int oom;
        uint32_t *r = tok__nfc(cases[i].in, cases[i].n, &m, &oom);
        const uint32_t *got = r ? r : cases[i].in;
        if (!r) m = cases[i].n;
        if (m != cases[i].m || memcmp(got, cases[i].out, m * sizeof *got) != 0) {
            printf("  NFC case %zu: %zu code points, first U+%04X\n", i, m, got[0]);
            bad++;
        }
        free(r);
    }
    size_t m; int oom;
    uint32_t ascii[3] = { 'a', 'b', 0xE9 };
    CHECK("nfc_quick_check_passes_nfc_text", tok__nfc(ascii, 3, &m, &oom) == NULL && !oom,
          "copied NFC text");
    CHECK("nfc_cases", bad == 0, "%d cases wrong", bad);
}

/* Every NormalizationTest.txt line (Debian unicode-data, same UCD as the tables): NFC(c1) == c2. */
static void test_nfc_conformance(void) {
    const char *path = "/usr/share/unicode/NormalizationTest.txt.bz2";
    FILE *probe = fopen(path, "rb");
    if (!probe) { printf("SKIP nfc_conformance: %s not installed\n", path); return; }
    fclose(probe);
    FILE *f = popen("bzcat /usr/share/unicode/NormalizationTest.txt.bz2 2>/dev/null", "r");
    if (!f) { printf("SKIP nfc_conformance: cannot run bzcat\n"); return; }
    char line[2048];
    int n = 0, bad = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '@' || line[0] == '\n') continue;
        uint32_t in[64], want[64];
        size_t ni = 0, nw = 0;
        char *p = line;
        while (*p && *p != ';' && ni < 64) {
            while (*p == ' ') p++;
            if (*p == ';') break;
            in[ni++] = (uint32_t)strtoul(p, &p, 16);
        }
        if (*p == ';') p++;
        while (*p && *p != ';' && nw < 64) {
            while (*p == ' ') p++;
            if (*p == ';') break;
            want[nw++] = (uint32_t)strtoul(p, &p, 16);
        }
        size_t m; int oom;
        uint32_t *r = tok__nfc(in, ni, &m, &oom);
        const uint32_t *got = r ? r : in;
        if (!r) m = ni;
        n++;
        if (m != nw || memcmp(got, want, m * sizeof *got) != 0) {
            if (bad++ < 3) printf("  NFC differs: %s", line);
        }
        free(r);
    }
    pclose(f);
    if (n == 0) { printf("SKIP nfc_conformance: bzcat produced nothing\n"); return; }
    CHECK("nfc_conformance", bad == 0, "%d of %d NormalizationTest lines differ", bad, n);
}

static void test_stream(const Tokenizer *t) {
    char out[256];
    TokStream s;
    /* U+1F468 = F0 9F 91 A8: the tiny vocab has no merges for it, so it is 4 byte tokens */
    int32_t *ids; size_t n;
    tok_encode(t, "\xf0\x9f\x91\xa8", 4, TOK_SPECIAL_NONE, &ids, &n);
    tok_stream_init(&s);
    size_t lens[4] = { 0 };
    for (size_t i = 0; i < n && i < 4; i++)
        lens[i] = tok_stream_feed(t, &s, ids[i], out, sizeof out);
    CHECK("stream_split_4byte_char",
          n == 4 && lens[0] == 0 && lens[1] == 0 && lens[2] == 0 && lens[3] == 4 &&
              memcmp(out, "\xf0\x9f\x91\xa8", 4) == 0,
          "%zu ids, chunk lengths %zu %zu %zu %zu", n, lens[0], lens[1], lens[2], lens[3]);
    /* incomplete tail flushed as U+FFFD at the end */
    tok_stream_init(&s);
    size_t k = tok_stream_feed(t, &s, ids[0], out, sizeof out);
    k += tok_stream_feed(t, &s, ids[1], out + k, sizeof out - k);
    k += tok_stream_flush(&s, out + k, sizeof out - k);
    CHECK("stream_flush_tail_fffd", k == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0, "%zu bytes", k);
    /* an added token ends the byte run: the kept tail becomes U+FFFD before its text */
    tok_stream_init(&s);
    k = tok_stream_feed(t, &s, ids[0], out, sizeof out);
    k += tok_stream_feed(t, &s, tok_id(t, "<think>"), out + k, sizeof out - k);
    CHECK("stream_tail_before_added_token", k == 10 && memcmp(out, "\xef\xbf\xbd<think>", 10) == 0,
          "%zu bytes", k);
    free(ids);
    /* invalid bytes: 0xFF then 'a'; E0 80 is two maximal subparts -> two U+FFFD */
    int ff = tok_id(t, "\xff"), e0 = tok_id(t, "\xe0"), x80 = tok_id(t, "\x80");
    tok_stream_init(&s);
    k = tok_stream_feed(t, &s, ff, out, sizeof out);
    /* 'a' has id 'a'-0x21 in GPT-2 order */
    k += tok_stream_feed(t, &s, 'a' - 0x21, out + k, sizeof out - k);
    CHECK("stream_invalid_byte_fffd",
          k == 4 && memcmp(out,
                           "\xef\xbf\xbd"
                           "a",
                           4) == 0,
          "%zu bytes", k);
    tok_stream_init(&s);
    k = tok_stream_feed(t, &s, e0, out, sizeof out);
    k += tok_stream_feed(t, &s, x80, out + k, sizeof out - k);
    k += tok_stream_flush(&s, out + k, sizeof out - k);
    CHECK("stream_bad_continuation", k == 6 && memcmp(out, "\xef\xbf\xbd\xef\xbf\xbd", 6) == 0,
          "%zu bytes", k);
    /* too small a buffer: nothing overflows, the needed length comes back */
    tok_stream_init(&s);
    char small[2] = { 'Z', 'Z' };
    k = tok_stream_feed(t, &s, tok_id(t, "<think>"), small, 1);
    CHECK("stream_small_buffer", k == 7 && small[0] == 'Z' && small[1] == 'Z', "k=%zu", k);
    /* whole decode skips only special:true tokens when asked */
    int32_t seq[3] = { 483, 497, 'a' - 0x21 };
    char *d; size_t dl;
    tok_decode(t, seq, 3, 1, &d, &dl);
    CHECK("decode_skip_special", strcmp(d, "<think>a") == 0, "got %s", d);
    free(d);
    tok_decode(t, seq, 3, 0, &d, &dl);
    CHECK("decode_keep_special", strcmp(d, "<|user|><think>a") == 0, "got %s", d);
    free(d);
    CHECK("stream_unknown_id",
          tok_stream_feed(t, &s, 100000, out, sizeof out) == 0 &&
              tok_stream_feed(t, &s, -1, out, sizeof out) == 0,
          "an id without a token produced output");
}

static void test_load_errors(void) {
    char err[512];
    const char *extra[] = { "ab" };
    struct { const char *name, *json, *want; } cases[] = {
        { "unknown_regex", NULL, "unsupported pre_tokenizer Split regex \"\\d+\"" },
        { "unknown_normalizer", NULL, "unsupported normalizer type \"Lowercase\"" },
        { "bad_merge", NULL, "merges[0]" },
        { "wordpiece", "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", "model.type \"WordPiece\" is not supported" },
        { "no_bytelevel", NULL, "no ByteLevel" },
        { "not_json", "{\"model\": [1,2,}", "invalid JSON" },
    };
    char *owned[6] = { 0 };
    owned[0] = make_json(extra, 1, "", "", 0, NULL,
                         "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
                         "\"pattern\":{\"Regex\":\"\\\\d+\"},\"behavior\":\"Isolated\","
                         "\"invert\":false},{\"type\":\"ByteLevel\",\"use_regex\":false}]}");
    owned[1] = make_json(extra, 1, "", "", 0, "{\"type\":\"Lowercase\"}", NULL);
    owned[2] = make_json(extra, 1, "[\"a\",\"q\"]", "", 0, NULL, NULL);
    owned[4] = make_json(extra, 1, "", "", 0, NULL, "null");
    cases[0].json = owned[0];
    cases[1].json = owned[1];
    cases[2].json = owned[2];
    cases[4].json = owned[4];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char name[64];
        snprintf(name, sizeof name, "load_error_%s", cases[i].name);
        err[0] = 0;
        Tokenizer *t = load_json("err.json", cases[i].json, err, sizeof err);
        CHECK(name, !t && strstr(err, cases[i].want) && strstr(err, "err.json"), "got \"%s\"",
              t ? "(loaded)" : err);
        tok_free(t);
    }
    for (int i = 0; i < 6; i++) free(owned[i]);
    Tokenizer *t = tok_load("/nonexistent/tokenizer.json", err, sizeof err);
    CHECK("load_error_missing_file", !t && strstr(err, "/nonexistent/tokenizer.json"), "got \"%s\"",
          err);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_tok_XXXXXX");
    if (!mkdtemp(tmpdir)) { printf("FAIL mkdtemp\n"); return 1; }
    test_unicode();
    test_byte_symbols();
    test_utf8();
    test_nfc();
    test_nfc_conformance();
    char err[512];
    Tokenizer *tiny = tok_load(TINY, err, sizeof err);
    CHECK("tiny_fixture_loads", tiny != NULL, "%s", err);
    if (tiny) {
        test_pretokenizer(tiny);
        test_tiny_fixture(tiny);
        test_stream(tiny);
        tok_free(tiny);
    }
    test_bpe_rules();
    test_load_errors();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) {}
    return failures ? 1 : 0;
}

/* Fuzz target: tok.h encoding and decoding arbitrary bytes. Byte 0 picks what the rest of the
   input is (m = byte0 % 7):
     m 0-4  text, encoded with tokenizer variant m in special-token mode (byte0 / 7) % 3 (every
            added token / non-special ones only / none); the ids are decoded whole and streamed one
            at a time (the stream must equal the whole decode, both valid UTF-8), and valid UTF-8
            text without a normalizer, encoded as plain text, must decode back to itself;
     m 5-6  token ids (int16 little endian: negative and out-of-vocabulary ones included) decoded
            whole and streamed, with variant (byte0 / 7) % 5.
   Variants: the tiny fixture tokenizer (GLM-5 layout; tests/fixtures/tiny_tokenizer) with each
   pre-tokenizer tok.h knows (GLM/Llama-3, Qwen2, DeepSeek-V3, GPT-2) and with an NFC normalizer.
   fuzz_tokjson.c compiles this file with FUZZ_TOK_JSON: the whole input is then a tokenizer.json,
   loaded from memory (ids bounded by TOK_MAX_ID below) and used the same way. */
#define _GNU_SOURCE
#define TOK_MAX_ID (1 << 16)   /* a fuzzed tokenizer.json: id tables of at most 64 Ki entries */
#define JSON_IMPLEMENTATION
#include "json.h"
#define TOK_IMPLEMENTATION
#include "tok.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REQUIRE(cond) do { if (!(cond)) abort(); } while (0)
enum { N_VARIANTS = 5 };
static Tokenizer *variants[N_VARIANTS];
static int variant_has_normalizer[N_VARIANTS];

/* ---- building the variants from the fixture's text ------------------------------------------ */

static void append(char **buf, size_t *len, const char *s, size_t n) {
    *buf = realloc(*buf, *len + n + 1);
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
}

static void append_json_string(char **buf, size_t *len, const char *s) {
    append(buf, len, "\"", 1);
    for (; *s; s++) {
        char esc[8];
        if (*s == '"' || *s == '\\') { esc[0] = '\\'; esc[1] = *s; append(buf, len, esc, 2);
        } else if ((unsigned char)*s < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", (unsigned char)*s);
            append(buf, len, esc, 6);
        } else append(buf, len, s, 1);
    }
    append(buf, len, "\"", 1);
}

static const char *known_regex(TokRegex kind) {
    for (size_t k = 0; k < sizeof tok__known_regex / sizeof *tok__known_regex; k++)
        if (tok__known_regex[k].kind == kind) return tok__known_regex[k].pattern;
    abort();
}

/* End of the JSON value starting at p (an object, array, string or scalar). */
static const char *value_end(const char *p) {
    int depth = 0;
    do {
        if (*p == '"') { for (p++; *p != '"'; p++) if (*p == '\\') p++; }
        else if (*p == '{' || *p == '[') depth++;
        else if (*p == '}' || *p == ']') depth--;
        else if (!depth && (*p == ',' || *p == '}')) return p;
        p++;
    } while (depth > 0 || (*p != ',' && *p != '}' && *p != ']'));
    return p;
}

/* text with the value of top-level member "key" replaced by `value` (JSON text). */
static char *replace_member(const char *text, const char *key, const char *value) {
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\":", key);
    const char *at = strstr(text, quoted);
    REQUIRE(at);
    const char *v = at + strlen(quoted);
    while (*v == ' ' || *v == '\n') v++;
    const char *end = value_end(v);
    char *out = NULL;
    size_t len = 0;
    append(&out, &len, text, (size_t)(v - text));
    append(&out, &len, value, strlen(value));
    append(&out, &len, end, strlen(end));
    return out;
}

static char *split_stage(TokRegex kind) {
    char *s = NULL;
    size_t n = 0;
    const char *head = "{\"type\": \"Split\", \"pattern\": {\"Regex\": ";
    append(&s, &n, head, strlen(head));
    append_json_string(&s, &n, known_regex(kind));
    const char *tail = "}, \"behavior\": \"Isolated\", \"invert\": false}";
    append(&s, &n, tail, strlen(tail));
    return s;
}

static char *sequence(TokRegex a, TokRegex b, TokRegex c, int stages) {
    TokRegex kinds[3] = { a, b, c };
    char *s = NULL;
    size_t n = 0;
    const char *head = "{\"type\": \"Sequence\", \"pretokenizers\": [";
    append(&s, &n, head, strlen(head));
    for (int i = 0; i < stages; i++) {
        char *st = split_stage(kinds[i]);
        append(&s, &n, st, strlen(st));
        append(&s, &n, ", ", 2);
        free(st);
    }
    const char *tail = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": "
                       "true, \"use_regex\": false}]}";
    append(&s, &n, tail, strlen(tail));
    return s;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
#ifdef FUZZ_TOK_JSON
    return 0;   /* the tokenizer comes from the input */
#endif
    /* the fixture, from the repository root (where make runs) or next to tests/bin/fuzz_tok */
    char exe[4096], path[4200] = "tests/fixtures/tiny_tokenizer/tokenizer.json";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (access(path, R_OK) != 0 && n > 0) {
        exe[n] = 0;
        /* .../tests/bin/x -> .../tests */
        for (int up = 0; up < 2 && strrchr(exe, '/'); up++) *strrchr(exe, '/') = 0;
        snprintf(path, sizeof path, "%s/fixtures/tiny_tokenizer/tokenizer.json", exe);
    }
    size_t len;
    char err[512];
    char *text = json_read_file(path, &len, err, sizeof err);
    if (!text) { fprintf(stderr, "fuzz_tok: %s\n", err); abort(); }
    char *qwen = sequence(TOK_RE_QWEN2, 0, 0, 1),
         *ds = sequence(TOK_RE_DS_DIGITS, TOK_RE_DS_CJK, TOK_RE_DS_MAIN, 3);
    char *texts[N_VARIANTS] = {
        strdup(text),
        replace_member(text, "pre_tokenizer", qwen),
        replace_member(text, "pre_tokenizer", ds),
        replace_member(text, "pre_tokenizer",
                       "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": "
                       "true, \"use_regex\": true}"),
        replace_member(text, "normalizer", "{\"type\": \"NFC\"}"),
    };
    const char *want[N_VARIANTS] = { "glm/llama3", "qwen2",
                                     "deepseek-v3 digits+deepseek-v3 cjk+deepseek-v3 main", "gpt2",
                                     "glm/llama3" };
    for (int v = 0; v < N_VARIANTS; v++) {
        variants[v] = tok_load_json(texts[v], strlen(texts[v]), "variant", err, sizeof err);
        if (!variants[v] || strcmp(tok_pretokenizer_name(variants[v]), want[v])) {
            fprintf(stderr, "fuzz_tok: variant %d: %s\n", v,
                    variants[v] ? tok_pretokenizer_name(variants[v]) : err);
            abort();
        }
        free(texts[v]);
    }
    variant_has_normalizer[4] = 1;
    free(qwen); free(ds); free(text);
    return 0;
}

/* ---- the checks --------------------------------------------------------------------------- */

static int valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int status;
        size_t k = tok_utf8_next((const unsigned char *)s + i, n - i, &cp, &status);
        if (status || !k) return 0;
        i += k;
    }
    return 1;
}

/* Whole decode == streamed decode (one id at a time, then flush); both valid UTF-8. */
static void check_decode(const Tokenizer *t, const int32_t *ids, size_t n, const char *want,
                         size_t want_len) {
    char *whole;
    size_t whole_len;
    REQUIRE(tok_decode(t, ids, n, 0, &whole, &whole_len) == 0);
    REQUIRE(valid_utf8(whole, whole_len) && whole[whole_len] == 0);
    if (want) REQUIRE(whole_len == want_len && !memcmp(whole, want, want_len));
    size_t cap = tok_stream_out_cap(t), got = 0;
    char *chunk = malloc(cap), *streamed = malloc(whole_len + cap + 1);
    TokStream s;
    tok_stream_init(&s);
    for (size_t i = 0; i <= n; i++) {
        size_t k =
            i < n ? tok_stream_feed(t, &s, ids[i], chunk, cap) : tok_stream_flush(&s, chunk, cap);
        REQUIRE(k <= cap && valid_utf8(chunk, k) && got + k <= whole_len);
        memcpy(streamed + got, chunk, k);
        got += k;
    }
    REQUIRE(got == whole_len && !memcmp(streamed, whole, got));
    free(chunk); free(streamed);
    char *skipped;
    size_t skipped_len;
    REQUIRE(tok_decode(t, ids, n, 1, &skipped, &skipped_len) == 0 && skipped_len <= whole_len);
    free(skipped);
    free(whole);
}

/* Encodes text in special-token mode `only` (0-2), or in all three (-1), and checks the ids. */
static void check_text(const Tokenizer *t, const char *text, size_t len, int normalizer, int only) {
    const TokSpecialMode modes[3] = { TOK_SPECIAL_ALL, TOK_SPECIAL_NONSPECIAL_ONLY,
                                      TOK_SPECIAL_NONE };
    int utf8 = valid_utf8(text, len);
    for (int m = 0; m < 3; m++) {
        if (only >= 0 && m != only) continue;
        int32_t *ids;
        size_t n;
        REQUIRE(tok_encode(t, text, len, modes[m], &ids, &n) == 0 && ids);
        for (size_t i = 0; i < n; i++)
            REQUIRE(ids[i] >= 0 && ids[i] < tok_vocab_size(t) && tok_piece(t, ids[i], NULL));
        /* plain text round-trips exactly (no normalizer, valid UTF-8) */
        int exact = modes[m] == TOK_SPECIAL_NONE && utf8 && !normalizer;
        check_decode(t, ids, n, exact ? text : NULL, len);
        free(ids);
    }
}

#ifdef FUZZ_TOK_JSON
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512] = "";
    Tokenizer *t = tok_load_json((const char *)data, size, "input", err, sizeof err);
    if (!t) { REQUIRE(err[0] && !strchr(err, '\n')); return 0; }
    static const char *const probes[] = { "Hello world", "<|user|>hi<think>x</think>",
                                          "  12345 \r\n\t",
                                          "caf\xc3\xa9 \xe4\xb8\x80\xf0\x9f\x98\x80", "\xff\xfe" };
    for (size_t p = 0; p < sizeof probes / sizeof *probes; p++)
        check_text(t, probes[p], strlen(probes[p]), 1, -1);
    int vocab = tok_vocab_size(t);
    REQUIRE(vocab >= 0 && vocab <= TOK_MAX_ID);
    int32_t *ids = malloc(((size_t)vocab + 2) * sizeof *ids);
    for (int i = 0; i < vocab + 2; i++) ids[i] = i - 1;   /* -1 .. vocab: every id and both edges */
    check_decode(t, ids, (size_t)vocab + 2, NULL, 0);
    free(ids);
    tok_free(t);
    return 0;
}
#else
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int m = data[0] % 7;
    const char *rest = (const char *)data + 1;
    const size_t n = size - 1;
    if (m < N_VARIANTS) {
        check_text(variants[m], rest, n, variant_has_normalizer[m], (data[0] / 7) % 3);
    } else {
        const Tokenizer *t = variants[(data[0] / 7) % N_VARIANTS];
        size_t count = n / 2;
        int32_t *ids = malloc((count ? count : 1) * sizeof *ids);
        for (size_t i = 0; i < count; i++)
            ids[i] = (int16_t)(data[1 + 2 * i] | data[2 + 2 * i] << 8);
        check_decode(t, ids, count, NULL, 0);
        free(ids);
    }
    return 0;
}
#endif

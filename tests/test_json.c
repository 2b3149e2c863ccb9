/* Unit tests for json.h: every value kind, escapes, numbers, each malformed case with its error
 * position, the nesting limit, and a generated ~12 MB document. */
#define JSON_IMPLEMENTATION
#include "json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

static int failures;

static void check(const char *name, int ok, const char *why) {
    if (ok) printf("PASS %s\n", name);
    else { printf("FAIL %s: %s\n", name, why); failures++; }
}

static JsonDoc *parse_str(const char *s, char *err, size_t err_len) {
    return json_parse(s, strlen(s), err, err_len);
}

static int str_eq(const JsonValue *v, const char *want, size_t want_len) {
    size_t n;
    const char *s = json_str(v, &n);
    return s && n == want_len && memcmp(s, want, n) == 0 && s[n] == 0;
}

static void test_kinds(void) {
    char err[256];
    const char *text = " {\"n\": null, \"t\": true, \"f\": false, \"i\": -42, \"d\": 2.5e-3,\n"
                       "  \"s\": \"hi\", \"a\": [1, [2, []], {}], \"o\": {\"x\": {\"y\": \"z\"}}} ";
    JsonDoc *doc = parse_str(text, err, sizeof err);
    check("kinds_parse", doc != NULL, err);
    if (!doc) return;
    const JsonValue *r = json_root(doc);
    check("kinds_root_object", json_type(r) == JSON_OBJECT && json_len(r) == 8,
          "root not an 8-member object");
    check("kinds_null", json_type(json_get(r, "n")) == JSON_NULL && json_get(r, "n") != NULL, "n");
    check("kinds_bool", json_bool(json_get(r, "t")) == 1 && json_bool(json_get(r, "f")) == 0 &&
          json_bool(json_get(r, "n")) == -1, "bools");
    int64_t iv = 0;
    check("kinds_int",
          json_is_int(json_get(r, "i"), &iv) && iv == -42 && json_num(json_get(r, "i")) == -42.0,
          "i");
    check("kinds_double",
          json_num(json_get(r, "d")) == 2.5e-3 && !json_is_int(json_get(r, "d"), NULL), "d");
    check("kinds_string", str_eq(json_get(r, "s"), "hi", 2), "s");
    check("kinds_num_of_string_is_nan", isnan(json_num(json_get(r, "s"))),
          "json_num(string) not NaN");
    check("kinds_str_of_number_is_null", json_str(json_get(r, "i"), NULL) == NULL,
          "json_str(number) not NULL");
    const JsonValue *a = json_get(r, "a");
    check("kinds_array", json_type(a) == JSON_ARRAY && json_len(a) == 3, "a");
    check("kinds_nested_array",
          json_len(json_at(a, 1)) == 2 && json_type(json_at(json_at(a, 1), 1)) == JSON_ARRAY &&
              json_len(json_at(json_at(a, 1), 1)) == 0,
          "a[1]");
    check("kinds_empty_object",
          json_type(json_at(a, 2)) == JSON_OBJECT && json_len(json_at(a, 2)) == 0, "a[2]");
    check("kinds_at_out_of_range", json_at(a, 3) == NULL && json_at(r, 0) == NULL,
          "json_at bounds/type");
    check("kinds_nested_get", str_eq(json_get(json_get(json_get(r, "o"), "x"), "y"), "z", 1),
          "o.x.y");
    check("kinds_get_absent", json_get(r, "zz") == NULL && json_get(a, "n") == NULL, "absent key");
    /* Members come back in document order. */
    const char *order[] = {"n", "t", "f", "i", "d", "s", "a", "o"};
    int ok = 1;
    for (size_t i = 0; i < 8; i++) {
        size_t kl;
        const char *k = json_key_at(r, i, &kl);
        if (!k || kl != strlen(order[i]) || memcmp(k, order[i], kl) ||
            json_value_at(r, i) != json_get(r, order[i]))
            ok = 0;
    }
    check("kinds_member_order",
          ok && json_key_at(r, 8, NULL) == NULL && json_value_at(r, 8) == NULL, "iteration");
    json_free(doc);

    /* Scalars at the top level. */
    doc = parse_str("  \"top\"  ", err, sizeof err);
    check("top_level_string", doc && str_eq(json_root(doc), "top", 3), err);
    json_free(doc);
    doc = parse_str("0", err, sizeof err);
    check("top_level_zero", doc && json_is_int(json_root(doc), &iv) && iv == 0, err);
    json_free(doc);
    doc = parse_str("\xEF\xBB\xBF[true]", err, sizeof err);
    check("bom_skipped", doc && json_bool(json_at(json_root(doc), 0)) == 1, err);
    json_free(doc);
    /* Duplicate keys: the last wins. */
    doc = parse_str("{\"k\":1,\"k\":2}", err, sizeof err);
    check("duplicate_key_last_wins", doc && json_num(json_get(json_root(doc), "k")) == 2.0 &&
          json_len(json_root(doc)) == 2, err);
    json_free(doc);
    /* Input need not be NUL-terminated: the parser must stop at len. */
    char buf[8] = {'[', '1', '2', ']', '9', '9', '9', '9'};
    doc = json_parse(buf, 4, err, sizeof err);
    check("not_nul_terminated", doc && json_num(json_at(json_root(doc), 0)) == 12.0, err);
    json_free(doc);
    doc = json_parse(buf, 3, err, sizeof err);
    check("number_stops_at_len", doc == NULL && strstr(err, "unterminated array"), err);
    json_free(doc);
}

static void test_escapes(void) {
    char err[256];
    JsonDoc *doc =
        parse_str("[\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\", \"\\u0041\\u00e9\\u20AC\\ud83d\\ude00\", "
                  "\"x\\u0000y\", \"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\", \"\"]",
                  err, sizeof err);
    check("escapes_parse", doc != NULL, err);
    if (!doc) return;
    const JsonValue *r = json_root(doc);
    check("escapes_simple", str_eq(json_at(r, 0), "a\"b\\c/d\b\f\n\r\t", 12), "simple escapes");
    check("escapes_unicode_and_surrogate_pair",
          str_eq(json_at(r, 1), "A\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 10),
          "\\u escapes -> UTF-8");
    check("escapes_embedded_nul", str_eq(json_at(r, 2), "x\0y", 3),
          "\\u0000 kept with explicit length");
    check("raw_utf8_passthrough", str_eq(json_at(r, 3), "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9),
          "raw UTF-8");
    check("empty_string", str_eq(json_at(r, 4), "", 0), "empty");
    json_free(doc);
    /* Keys are decoded too, and lookup by a key with an embedded NUL works with json_getn. */
    doc = parse_str("{\"\\u00e9t\\u00e9\":1, \"a\\u0000b\":2}", err, sizeof err);
    check("escaped_key_lookup",
          doc && json_num(json_get(json_root(doc), "\xc3\xa9t\xc3\xa9")) == 1.0 &&
              json_num(json_getn(json_root(doc), "a\0b", 3)) == 2.0 &&
              json_get(json_root(doc), "a") == NULL,
          err);
    json_free(doc);
}

static void test_numbers(void) {
    char err[256];
    JsonDoc *doc = parse_str("[9223372036854775807, -9223372036854775808, 9223372036854775808, "
                             "9007199254740993, 1e3, 2.0, 1.5, -0, 1E+2, 1e-400, "
                             "123456789012345678901234567890, 0.1]",
                             err, sizeof err);
    check("numbers_parse", doc != NULL, err);
    if (!doc) return;
    const JsonValue *r = json_root(doc);
    int64_t v = 0;
    check("int64_max_exact", json_is_int(json_at(r, 0), &v) && v == INT64_MAX, "INT64_MAX");
    check("int64_min_exact", json_is_int(json_at(r, 1), &v) && v == INT64_MIN, "INT64_MIN");
    check("past_int64_not_int",
          !json_is_int(json_at(r, 2), &v) && json_num(json_at(r, 2)) == 9223372036854775808.0,
          "2^63 is a double, not an exact int");
    check("above_2p53_kept_exact", json_is_int(json_at(r, 3), &v) && v == 9007199254740993LL,
          "2^53+1 exact");
    check("exponent_integral", json_is_int(json_at(r, 4), &v) && v == 1000, "1e3");
    check("fraction_integral", json_is_int(json_at(r, 5), &v) && v == 2, "2.0");
    check("fraction_not_int", !json_is_int(json_at(r, 6), &v) && json_num(json_at(r, 6)) == 1.5,
          "1.5");
    check("negative_zero",
          json_is_int(json_at(r, 7), &v) && v == 0 && json_num(json_at(r, 7)) == 0.0, "-0");
    check("upper_e_plus", json_num(json_at(r, 8)) == 100.0, "1E+2");
    check("underflow_to_zero", json_num(json_at(r, 9)) == 0.0, "1e-400");
    check("huge_integer_literal",
          !json_is_int(json_at(r, 10), &v) && json_num(json_at(r, 10)) > 1.2e29 &&
              json_num(json_at(r, 10)) < 1.3e29,
          "30-digit literal");
    check("decimal_rounding", json_num(json_at(r, 11)) == 0.1, "0.1");
    /* json_int_literal: only what was written as an integer that fits int64 */
    check("int_literal_written_integer",
          json_int_literal(json_at(r, 3), &v) && v == 9007199254740993LL &&
              json_int_literal(json_at(r, 7), &v) && v == 0,
          "2^53+1 and -0 are integer literals");
    check("int_literal_not_fraction_or_exponent",
          !json_int_literal(json_at(r, 4), NULL) && !json_int_literal(json_at(r, 5), NULL) &&
              !json_int_literal(json_at(r, 8), NULL),
          "1e3, 2.0, 1E+2 are not");
    check("int_literal_not_past_int64",
          !json_int_literal(json_at(r, 2), NULL) && !json_int_literal(json_at(r, 10), NULL) &&
              !json_int_literal(r, NULL),
          "2^63, a 30-digit literal and an array are not");
    json_free(doc);
}

/* Each malformed input must fail with the given message fragment at the given position. */
static void test_malformed(void) {
    static const struct { const char *name, *text, *pos, *msg;
    } cases[] = {
        { "bad_empty", "", "line 1 col 1 (byte 0)", "unexpected end of input" },
        { "bad_ws_only", "  \n ", "line 2 col 2 (byte 4)", "unexpected end of input" },
        { "bad_trailing_comma_array", "[1,2,]", "line 1 col 6 (byte 5)", "trailing comma" },
        { "bad_trailing_comma_object", "{\"a\":1,\n }", "line 2 col 2 (byte 9)", "trailing comma" },
        { "bad_line_comment", "[1, // x\n2]", "line 1 col 5 (byte 4)", "unexpected '/'" },
        { "bad_block_comment", "/* c */ 1", "line 1 col 1 (byte 0)", "unexpected '/'" },
        { "bad_escape", "[\"a\\x\"]", "line 1 col 4 (byte 3)", "invalid escape" },
        { "bad_u_escape_short", "\"\\u12\"", "line 1 col 2 (byte 1)", "bad \\u escape" },
        { "bad_u_escape_hex", "\"\\u12G4\"", "line 1 col 2 (byte 1)", "bad \\u escape" },
        { "bad_lone_high_surrogate", "\"ab\\ud83dx\"", "line 1 col 4 (byte 3)",
          "lone high surrogate" },
        { "bad_high_then_high", "\"\\ud83d\\ud83d\"", "line 1 col 2 (byte 1)",
          "lone high surrogate" },
        { "bad_lone_low_surrogate", "\"\\ude00\"", "line 1 col 2 (byte 1)", "lone low surrogate" },
        { "bad_utf8_continuation", "\"a\x80\"", "line 1 col 3 (byte 2)", "invalid UTF-8" },
        { "bad_utf8_overlong", "\"\xc0\xaf\"", "line 1 col 2 (byte 1)", "invalid UTF-8" },
        { "bad_utf8_overlong3", "\"\xe0\x80\xaf\"", "line 1 col 2 (byte 1)", "invalid UTF-8" },
        { "bad_utf8_surrogate", "\"\xed\xa0\x80\"", "line 1 col 2 (byte 1)", "invalid UTF-8" },
        { "bad_utf8_above_max", "\"\xf4\x90\x80\x80\"", "line 1 col 2 (byte 1)", "invalid UTF-8" },
        { "bad_utf8_truncated", "\"\xe2\x82\"", "line 1 col 2 (byte 1)", "invalid UTF-8" },
        { "bad_utf8_outside_string", "[\xc3\xa9]", "line 1 col 2 (byte 1)", "byte 0xc3" },
        { "bad_control_char", "\"a\tb\"", "line 1 col 3 (byte 2)", "control character" },
        { "bad_unterminated_string", "[\"abc", "line 1 col 2 (byte 1)", "unterminated string" },
        { "bad_unterminated_array", "[1,\n[2]", "line 1 col 1 (byte 0)", "unterminated array" },
        { "bad_unterminated_object", "{\"a\":1", "line 1 col 1 (byte 0)", "unterminated object" },
        { "bad_missing_colon", "{\"a\" 1}", "line 1 col 6 (byte 5)", "expected ':'" },
        { "bad_nonstring_key", "{a:1}", "line 1 col 2 (byte 1)", "expected string key" },
        { "bad_missing_comma", "[1 2]", "line 1 col 4 (byte 3)", "expected ',' or ']'" },
        { "bad_leading_zero", "[01]", "line 1 col 2 (byte 1)", "leading zero" },
        { "bad_leading_plus", "[+1]", "line 1 col 2 (byte 1)", "unexpected '+'" },
        { "bad_bare_dot", "[1.]", "line 1 col 4 (byte 3)", "expected digit after decimal point" },
        { "bad_dot_first", "[.5]", "line 1 col 2 (byte 1)", "unexpected '.'" },
        { "bad_exponent", "[1e]", "line 1 col 4 (byte 3)", "expected digit in exponent" },
        { "bad_minus_alone", "[-]", "line 1 col 2 (byte 1)", "invalid number" },
        { "bad_number_overflow", "[1e400]", "line 1 col 2 (byte 1)", "number out of range" },
        { "bad_nan", "[NaN]", "line 1 col 2 (byte 1)", "unexpected 'N'" },
        { "bad_infinity", "[-Infinity]", "line 1 col 2 (byte 1)", "invalid number" },
        { "bad_literal", "[tru]", "line 1 col 2 (byte 1)", "unexpected 't'" },
        { "bad_literal_case", "[True]", "line 1 col 2 (byte 1)", "unexpected 'T'" },
        { "bad_two_values", "{} {}", "line 1 col 4 (byte 3)", "after the JSON value" },
        { "bad_single_quotes", "['a']", "line 1 col 2 (byte 1)", "unexpected '''" },
        { "bad_vertical_tab_ws", "[1,\v2]", "line 1 col 4 (byte 3)", "byte 0x0b" },
        { "bad_position_after_newlines", "{\n  \"a\": [1,\n        2,,]\n}",
          "line 3 col 11 (byte 23)", "unexpected ','" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256] = "";
        JsonDoc *doc = parse_str(cases[i].text, err, sizeof err);
        char why[400];
        snprintf(why, sizeof why, "got %s \"%s\", want \"%s: ...%s...\"", doc ? "success" : "error",
                 err, cases[i].pos, cases[i].msg);
        check(cases[i].name, !doc && strncmp(err, cases[i].pos, strlen(cases[i].pos)) == 0 &&
              strstr(err, cases[i].msg) != NULL && !strchr(err, '\n'), why);
        json_free(doc);
    }
    /* A NUL byte inside the text is just a bad byte, not an end of input. */
    char err[256];
    JsonDoc *doc = json_parse("[1,\0 2]", 7, err, sizeof err);
    check("bad_nul_byte", !doc && strstr(err, "byte 0x00") && strstr(err, "(byte 3)"), err);
    json_free(doc);
    /* A tiny error buffer is truncated, never overrun; NULL err is allowed. */
    char tiny[8];
    memset(tiny, 'X', sizeof tiny);
    doc = parse_str("[,]", tiny, 5);
    check("err_buffer_truncated", !doc && tiny[4] == 0 && tiny[5] == 'X', "err_len not respected");
    doc = parse_str("[,]", NULL, 0);
    check("err_buffer_null", !doc, "NULL err buffer");
}

static char *nested(int depth, int objects) {
    size_t cap = (size_t)depth * 8 + 16, n = 0;
    char *s = malloc(cap);
    for (int i = 0; i < depth; i++) {
        if (objects) { memcpy(s + n, "{\"k\":", 5); n += 5; } else s[n++] = '[';
    }
    s[n++] = '1';
    for (int i = 0; i < depth; i++) s[n++] = objects ? '}' : ']';
    s[n] = 0;
    return s;
}

static void test_depth(void) {
    char err[256];
    char *s = nested(JSON_MAX_DEPTH, 0);
    JsonDoc *doc = parse_str(s, err, sizeof err);
    const JsonValue *v = json_root(doc);
    for (int i = 0; i < JSON_MAX_DEPTH && v; i++) v = json_at(v, 0);
    check("depth_at_limit_ok", doc && json_num(v) == 1.0, err);
    json_free(doc);
    free(s);
    s = nested(JSON_MAX_DEPTH + 1, 0);
    doc = parse_str(s, err, sizeof err);
    char want[64];
    snprintf(want, sizeof want, "(byte %d): nesting deeper than", JSON_MAX_DEPTH);
    check("depth_over_limit_refused", !doc && strstr(err, want), err);
    json_free(doc);
    free(s);
    s = nested(100000, 1);   /* would blow the C stack without the limit */
    doc = parse_str(s, err, sizeof err);
    check("depth_huge_objects_refused", !doc && strstr(err, "nesting deeper than"), err);
    json_free(doc);
    free(s);
}

/* A tokenizer.json-like document: a big vocab object, a merges array, escapes and non-ASCII. */
static void test_big(void) {
    const int nvocab = 200000, nmerges = 150000;
    size_t cap = 16u << 20, n = 0;
    char *s = malloc(cap);
    n += (size_t)sprintf(s + n, "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
    for (int i = 0; i < nvocab; i++)
        n += (size_t)sprintf(s + n, "%s\"tok\\u0120%d\\u00e9\xe4\xb8\xad_padding_padding\": %d",
                             i ? ", " : "", i, i);
    n += (size_t)sprintf(s + n, "}, \"merges\": [");
    for (int i = 0; i < nmerges; i++)
        n += (size_t)sprintf(s + n, "%s[\"a%d\", \"b\\n%d\"]", i ? ",\n" : "", i, i);
    n += (size_t)sprintf(s + n, "], \"scores\": [");
    for (int i = 0; i < 50000; i++)
        n += (size_t)sprintf(s + n, "%s%.17g", i ? "," : "", -i * 0.001);
    n += (size_t)sprintf(s + n, "]}}");
    char err[256];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    JsonDoc *doc = json_parse(s, n, err, sizeof err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    printf("info: parsed %.1f MB in %.1f ms\n", (double)n / 1e6, ms);
    check("big_parse", doc != NULL, err);
    check("big_size_over_10mb", n > 10u << 20, "generated document too small");
    if (doc) {
        const JsonValue *vocab = json_get(json_get(json_root(doc), "model"), "vocab");
        const JsonValue *merges = json_get(json_get(json_root(doc), "model"), "merges");
        const JsonValue *scores = json_get(json_get(json_root(doc), "model"), "scores");
        int ok = json_len(vocab) == (size_t)nvocab;
        for (int i = 0; ok && i < nvocab; i += 997) {
            char want[64];
            int wl = sprintf(want, "tok\xc4\xa0%d\xc3\xa9\xe4\xb8\xad_padding_padding", i);
            size_t kl;
            const char *k = json_key_at(vocab, (size_t)i, &kl);
            int64_t id = -1;
            if (!k || kl != (size_t)wl || memcmp(k, want, kl) ||
                !json_is_int(json_value_at(vocab, (size_t)i), &id) || id != i)
                ok = 0;
        }
        check("big_vocab_content", ok, "vocab entries differ");
        ok = json_len(merges) == (size_t)nmerges;
        for (int i = 0; ok && i < nmerges; i += 1009) {
            char a[32], b[32];
            int al = sprintf(a, "a%d", i), bl = sprintf(b, "b\n%d", i);
            const JsonValue *m = json_at(merges, (size_t)i);
            if (json_len(m) != 2 || !str_eq(json_at(m, 0), a, (size_t)al) ||
                !str_eq(json_at(m, 1), b, (size_t)bl))
                ok = 0;
        }
        check("big_merges_content", ok, "merges entries differ");
        check("big_scores_content",
              json_len(scores) == 50000 && json_num(json_at(scores, 12345)) == -12345 * 0.001,
              "scores differ");
    }
    json_free(doc);
    free(s);
}

static void test_read_file(void) {
    char dir[] = "/tmp/test_json_XXXXXX", path[256], err[512];
    if (!mkdtemp(dir)) { check("read_file_tmpdir", 0, "mkdtemp failed"); return; }
    snprintf(path, sizeof path, "%s/a.json", dir);
    FILE *f = fopen(path, "wb");
    const char body[] = "{\"a\": \"x\\u0000\"}";
    fwrite(body, 1, sizeof body - 1, f);
    fclose(f);
    size_t len = 0;
    char *text = json_read_file(path, &len, err, sizeof err);
    check("read_file_ok",
          text && len == sizeof body - 1 && memcmp(text, body, len) == 0 && text[len] == 0, err);
    JsonDoc *doc = text ? json_parse(text, len, err, sizeof err) : NULL;
    check("read_file_parse", doc && str_eq(json_get(json_root(doc), "a"), "x\0", 2), err);
    json_free(doc);
    free(text);
    snprintf(path, sizeof path, "%s/empty.json", dir);
    fclose(fopen(path, "wb"));
    text = json_read_file(path, &len, err, sizeof err);
    check("read_file_empty", text && len == 0 && text[0] == 0, err);
    free(text);
    remove(path);
    snprintf(path, sizeof path, "%s/a.json", dir);
    remove(path);
    snprintf(path, sizeof path, "%s/missing.json", dir);
    text = json_read_file(path, &len, err, sizeof err);
    check("read_file_missing", !text && strstr(err, path) && strstr(err, "No such file"), err);
    text = json_read_file(dir, &len, err, sizeof err);
    check("read_file_directory", !text && strstr(err, dir), err);
    free(text);

    /* Size caps: a file of exactly max bytes is read, one byte more is refused by its size. */
    snprintf(path, sizeof path, "%s/hundred.json", dir);
    f = fopen(path, "wb");
    for (int i = 0; i < 98; i++) fputc(' ', f);
    fputs("{}", f);
    fclose(f);
    text = json_read_file_max(path, 100, &len, err, sizeof err);
    check("read_file_max_exact_size_accepted", text && len == 100 && text[100] == 0, err);
    free(text);
    text = json_read_file_max(path, 99, &len, err, sizeof err);
    check("read_file_max_one_byte_over_refused",
          !text && strstr(err, path) && strstr(err, "100 bytes") && strstr(err, "99"), err);
    remove(path);
    /* Endless or special files: refused by kind at once, never read until memory runs out. */
    text = json_read_file("/dev/zero", &len, err, sizeof err);
    check("read_file_dev_zero_refused",
          !text && strstr(err, "/dev/zero") && strstr(err, "character device"), err);
    /* A FIFO without a writer must not block the open: it reads as empty. */
    snprintf(path, sizeof path, "%s/fifo.json", dir);
    if (mkfifo(path, 0600) == 0) {
        alarm(20);   /* a hang here would be the bug: end the test instead of the suite */
        text = json_read_file(path, &len, err, sizeof err);
        alarm(0);
        check("read_file_fifo_without_writer_is_empty", text && len == 0, err);
        free(text);
        remove(path);
    } else check("read_file_fifo_made", 0, strerror(errno));
    /* A pipe longer than the cap is cut off after max + 1 bytes and refused; within it, read whole.
       */
    int p[2];
    if (pipe(p) == 0) {
        char fdpath[64], block[300];
        memset(block, ' ', sizeof block);
        if (write(p[1], block, sizeof block) != (ssize_t)sizeof block)
            check("read_file_pipe_write", 0, "short write");
        close(p[1]);
        snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", p[0]);
        text = json_read_file_max(fdpath, 299, &len, err, sizeof err);
        check("read_file_max_pipe_over_cap_refused", !text && strstr(err, "longer than 299 bytes"),
              err);
        close(p[0]);
        if (pipe(p) == 0) {
            if (write(p[1], block, sizeof block) != (ssize_t)sizeof block)
                check("read_file_pipe_write", 0, "short write");
            close(p[1]);
            snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", p[0]);
            text = json_read_file_max(fdpath, 300, &len, err, sizeof err);
            check("read_file_max_pipe_at_cap_read_whole", text && len == 300, err);
            free(text);
            close(p[0]);
        }
    }
    rmdir(dir);
}

/* ---- Writer ---- */

static int text_is(const JsonWriter *w, const char *want) {
    size_t n;
    const char *t = jw_text(w, &n);
    return t && n == strlen(want) && strcmp(t, want) == 0;
}

static void test_writer_shapes(void) {
    JsonWriter w;
    jw_init(&w);
    jw_obj(&w);
    jw_kstr(&w, "id", "chatcmpl-1");
    jw_kint(&w, "created", 1700000000);
    jw_key(&w, "choices");
    jw_arr(&w);
    jw_obj(&w);
    jw_kint(&w, "index", 0);
    jw_key(&w, "delta"); jw_obj(&w); jw_obj_end(&w);
    jw_key(&w, "finish_reason"); jw_null(&w);
    jw_kbool(&w, "ok", 1);
    jw_kbool(&w, "no", 0);
    jw_knum(&w, "t", 0.7);
    jw_obj_end(&w);
    jw_int(&w, -5);
    jw_arr(&w); jw_arr_end(&w);
    jw_arr_end(&w);
    jw_key(&w, "args"); jw_raw(&w, "{\"a\":[1,2]}", 11);
    jw_kstr(&w, "nothing", NULL);
    jw_obj_end(&w);
    check("writer_nested",
          text_is(&w, "{\"id\":\"chatcmpl-1\",\"created\":1700000000,\"choices\":[{\"index\":0,"
                      "\"delta\":{},\"finish_reason\":null,\"ok\":true,\"no\":false,\"t\":0.7},-5,["
                      "]],"
                      "\"args\":{\"a\":[1,2]},\"nothing\":null}"),
          w.buf ? w.buf : "(null)");
    char err[256];
    size_t n;
    const char *t = jw_text(&w, &n);
    JsonDoc *doc = t ? json_parse(t, n, err, sizeof err) : NULL;
    check("writer_nested_parses", doc && json_len(json_root(doc)) == 5, err);
    json_free(doc);
    jw_reset(&w);
    jw_str(&w, "top");
    check("writer_reset_top_level_string", text_is(&w, "\"top\""), "after reset");
    jw_reset(&w);
    jw_null(&w);
    check("writer_top_level_null", text_is(&w, "null"), "null");
    jw_free(&w);
    check("writer_free_empty", w.buf == NULL && jw_text(&w, NULL) == NULL, "free");
}

static void test_writer_misuse(void) {
    JsonWriter w;
    jw_init(&w);
    check("writer_empty_is_error", jw_text(&w, NULL) == NULL, "empty writer has text");
    jw_obj(&w); jw_int(&w, 1); jw_obj_end(&w);
    check("writer_value_without_key", jw_text(&w, NULL) == NULL, "accepted");
    jw_reset(&w);
    jw_arr(&w); jw_key(&w, "k"); jw_arr_end(&w);
    check("writer_key_in_array", jw_text(&w, NULL) == NULL, "accepted");
    jw_reset(&w);
    jw_obj(&w); jw_arr_end(&w);
    check("writer_mismatched_end", jw_text(&w, NULL) == NULL, "accepted");
    jw_reset(&w);
    jw_obj(&w); jw_key(&w, "k"); jw_obj_end(&w);
    check("writer_key_without_value", jw_text(&w, NULL) == NULL, "accepted");
    jw_reset(&w);
    jw_arr(&w);
    check("writer_unclosed", jw_text(&w, NULL) == NULL, "accepted");
    jw_reset(&w);
    jw_int(&w, 1); jw_int(&w, 2);
    check("writer_two_top_level_values", jw_text(&w, NULL) == NULL, "accepted");
    jw_reset(&w);
    jw_arr_end(&w);
    check("writer_end_at_top", jw_text(&w, NULL) == NULL, "accepted");
    jw_reset(&w);
    for (int i = 0; i < JSON_MAX_DEPTH; i++) jw_arr(&w);
    for (int i = 0; i < JSON_MAX_DEPTH; i++) jw_arr_end(&w);
    check("writer_max_depth_ok", jw_text(&w, NULL) != NULL, "max depth refused");
    jw_reset(&w);
    for (int i = 0; i <= JSON_MAX_DEPTH; i++) jw_arr(&w);
    for (int i = 0; i <= JSON_MAX_DEPTH; i++) jw_arr_end(&w);
    check("writer_too_deep", jw_text(&w, NULL) == NULL, "accepted nesting over the limit");
    jw_free(&w);
}

/* Writes s as a JSON string and compares the text between the quotes. */
static int writes_as(const char *s, size_t len, const char *want) {
    JsonWriter w;
    jw_init(&w);
    jw_strn(&w, s, len);
    size_t n;
    const char *t = jw_text(&w, &n);
    int ok = t && n == strlen(want) + 2 && t[0] == '"' && t[n - 1] == '"' &&
             memcmp(t + 1, want, n - 2) == 0;
    if (!ok) printf("info: wrote [%s], want [\"%s\"]\n", t ? t : "(null)", want);
    jw_free(&w);
    return ok;
}

static void test_writer_strings(void) {
    check("writer_escapes", writes_as("a\"b\\c/\n\r\t\b\f", 11, "a\\\"b\\\\c/\\n\\r\\t\\b\\f"),
          "short escapes");
    check("writer_control_u00xx", writes_as("\x01\x1f\x00x\x7f", 5, "\\u0001\\u001f\\u0000x\x7f"),
          "controls");
    check("writer_utf8_passthrough", writes_as("h\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80", 12,
          "h\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80"), "valid UTF-8 changed");
    /* Invalid UTF-8: one U+FFFD per maximal subpart, as Python's bytes.decode(errors="replace"). */
#define FFFD "\xef\xbf\xbd"
    struct { const char *in; size_t len; const char *want; const char *name; } bad[] = {
        {"a\xc3", 2, "a" FFFD, "writer_bad_truncated_2"},
        {"\xe4\xb8z", 3, FFFD "z", "writer_bad_truncated_3"},
        {"\xf0\x9f\x98", 3, FFFD, "writer_bad_truncated_4"},
        {"\xc0\xaf", 2, FFFD FFFD, "writer_bad_overlong"},
        {"\xed\xa0\x80", 3, FFFD FFFD FFFD, "writer_bad_surrogate"},
        {"\xf4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD, "writer_bad_above_10ffff"},
        {"\xf5\xff\x80", 3, FFFD FFFD FFFD, "writer_bad_bytes"},
        {"\xe1\x80\xe2\x82\xac", 5, FFFD "\xe2\x82\xac", "writer_bad_then_valid"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        check(bad[i].name, writes_as(bad[i].in, bad[i].len, bad[i].want), "replacement differs");
#undef FFFD
    JsonWriter kw;
    jw_init(&kw);
    jw_obj(&kw); jw_kint(&kw, "k\"\n", 1); jw_obj_end(&kw);
    check("writer_key_escaped", text_is(&kw, "{\"k\\\"\\n\":1}"), "key escaping");
    jw_free(&kw);

    /* Random bytes: the output always parses, and valid UTF-8 comes back unchanged. */
    unsigned seed = 12345;
    int parsed = 1, same = 1, valid_seen = 0;
    char err[256], in[64];
    for (int iter = 0; iter < 20000; iter++) {
        size_t len = (size_t)(iter % 40);
        for (size_t k = 0; k < len; k++) {
            seed = seed * 1103515245u + 12345u;
            unsigned r = seed >> 16;
            /* Mostly ASCII and controls, some UTF-8 lead/continuation bytes. */
            in[k] = iter % 3 == 0   ? (char)(r & 0xff)
                    : iter % 3 == 1 ? (char)(r & 0x7f)
                                    : "a\xc3\xa9\xe4\xb8\xad\"\\\n\x01"[r % 11];
        }
        JsonWriter w;
        jw_init(&w);
        jw_arr(&w); jw_strn(&w, in, len); jw_arr_end(&w);
        size_t n;
        const char *t = jw_text(&w, &n);
        JsonDoc *doc = t ? json_parse(t, n, err, sizeof err) : NULL;
        if (!doc) {
            parsed = 0;
            printf("info: unparsable output for iteration %d: %s\n", iter, err);
        }
        int valid = 1;
        for (size_t k = 0; k < len;) {
            int ul = json__utf8_len((const unsigned char *)in + k, (const unsigned char *)in + len);
            if (!ul) { valid = 0; break; }
            k += (size_t)ul;
        }
        if (doc && valid) {
            valid_seen++;
            if (!str_eq(json_at(json_root(doc), 0), in, len)) same = 0;
        }
        json_free(doc);
        jw_free(&w);
    }
    check("writer_random_bytes_always_parse", parsed, "writer produced invalid JSON");
    check("writer_random_valid_utf8_roundtrip", same && valid_seen > 1000,
          "valid UTF-8 did not round-trip");
}

static void test_writer_numbers(void) {
    struct { double v; const char *want;
    } cases[] = {
        { 0.1, "0.1" },
        { 0.7, "0.7" },
        { 1.0, "1" },
        { -0.0, "-0" },
        { 1e300, "1e+300" },
        { 5e-324, "4.94065645841247e-324" },
        { 1.0 / 3.0, "0.3333333333333333" },
        { 123456.789, "123456.789" },
        { NAN, "null" },
        { INFINITY, "null" },
        { -INFINITY, "null" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        JsonWriter w;
        jw_init(&w);
        jw_num(&w, cases[i].v);
        char name[64];
        snprintf(name, sizeof name, "writer_num_%zu_%s", i, cases[i].want);
        check(name, text_is(&w, cases[i].want), w.buf ? w.buf : "(null)");
        jw_free(&w);
    }
    /* Doubles round-trip exactly through the writer and the parser. */
    unsigned long long bits = 0x3ff0000000000001ull;
    int ok = 1;
    char err[256];
    for (int i = 0; i < 5000; i++) {
        bits = bits * 6364136223846793005ull + 1442695040888963407ull;
        double d;
        memcpy(&d, &bits, sizeof d);
        if (!isfinite(d)) continue;
        JsonWriter w;
        jw_init(&w);
        jw_num(&w, d);
        size_t n;
        const char *t = jw_text(&w, &n);
        JsonDoc *doc = t ? json_parse(t, n, err, sizeof err) : NULL;
        if (!doc || json_num(json_root(doc)) != d) {
            ok = 0;
            printf("info: %s did not round-trip\n", t ? t : "(null)");
        }
        json_free(doc);
        jw_free(&w);
    }
    check("writer_double_roundtrip", ok, "a double changed");
    JsonWriter w;
    jw_init(&w);
    jw_arr(&w); jw_int(&w, INT64_MIN); jw_int(&w, INT64_MAX); jw_int(&w, 0); jw_arr_end(&w);
    check("writer_int64_extremes", text_is(&w, "[-9223372036854775808,9223372036854775807,0]"),
          w.buf ? w.buf : "(null)");
    jw_free(&w);
}

int main(void) {
    test_kinds();
    test_escapes();
    test_numbers();
    test_malformed();
    test_depth();
    test_big();
    test_read_file();
    test_writer_shapes();
    test_writer_misuse();
    test_writer_strings();
    test_writer_numbers();
    return failures ? 1 : 0;
}

/* json.h - a strict RFC 8259 JSON parser that builds a read-only DOM in an arena, and a small
 * writer that builds JSON text (HTTP responses).
 *
 * Single-header library in the stb style: every file may include it for the API; exactly ONE
 * translation unit of a program defines JSON_IMPLEMENTATION before including it:
 *
 *     #define JSON_IMPLEMENTATION
 *     #include "json.h"
 *
 * API
 *     JsonDoc *json_parse(const char *text, size_t len, char *err, size_t err_len);
 *         Parses len bytes (need not be NUL-terminated). Returns NULL on error and writes one line
 *         "line L col C (byte B): message" into err (L, C 1-based, C counted in bytes; B 0-based).
 *     void json_free(JsonDoc *doc);                      frees the document and every node in it
 *     const JsonValue *json_root(const JsonDoc *doc);
 *     JsonType json_type(const JsonValue *v);            JSON_NULL for a NULL pointer
 *     size_t json_len(const JsonValue *v);               array items / object members, else 0
 *     const JsonValue *json_at(const JsonValue *arr, size_t i);        NULL if not array / out of range
 *     const JsonValue *json_get(const JsonValue *obj, const char *key);  NULL if absent / not object
 *     const JsonValue *json_getn(const JsonValue *obj, const char *key, size_t key_len);
 *     const char *json_key_at(const JsonValue *obj, size_t i, size_t *key_len);   i-th member key
 *     const JsonValue *json_value_at(const JsonValue *obj, size_t i);            i-th member value
 *     const char *json_str(const JsonValue *v, size_t *len);   NULL unless a string
 *     double json_num(const JsonValue *v);                       NaN unless a number
 *     int json_is_int(const JsonValue *v, int64_t *out);         1 if a number that is an exact integer
 *     int json_int_literal(const JsonValue *v, int64_t *out);    1 if written as an integer (no fraction,
 *                                                                no exponent) that fits int64
 *     int json_bool(const JsonValue *v);                         0/1, or -1 unless a bool
 *     char *json_read_file(const char *path, size_t *len, char *err, size_t err_len);
 *     char *json_read_file_max(const char *path, size_t max_bytes, size_t *len, char *err, size_t err_len);
 *         Whole file, malloc'ed and NUL-terminated (free() it); NULL + "path: reason" on error.
 *         A file longer than max_bytes (JSON_READ_MAX = 256 MiB for json_read_file) is refused, by
 *         its size for a regular file, else after reading max_bytes + 1 bytes. Regular files and
 *         pipes only: a directory, device (such as /dev/zero) or socket is refused by kind; a FIFO
 *         with no writer reads as empty instead of blocking the open.
 *
 * Writer (builds JSON text into a growable buffer; the output is always valid JSON)
 *     void jw_init(JsonWriter *w);   void jw_free(JsonWriter *w);   void jw_reset(JsonWriter *w);
 *     void jw_obj(JsonWriter *w);    jw_obj_end(w);    jw_arr(w);    jw_arr_end(w);
 *     void jw_key(JsonWriter *w, const char *key);            the next value is this member's
 *     void jw_str(JsonWriter *w, const char *s);   jw_strn(w, s, len)
 *     void jw_int(JsonWriter *w, int64_t v);  jw_num(w, double);  jw_bool(w, int);  jw_null(w);
 *     void jw_raw(JsonWriter *w, const char *json, size_t len);   a value that is already JSON
 *     jw_kstr / jw_kint / jw_knum / jw_kbool(w, key, value)       jw_key, then the value
 *     const char *jw_text(const JsonWriter *w, size_t *len);      NUL-terminated; NULL on error
 *   Commas are placed automatically. Strings: UTF-8 passes through; '"', '\\' and control
 *   characters are escaped (\n \t \r \b \f, others \u00XX); each maximal invalid UTF-8 subpart
 *   becomes U+FFFD (as Python's errors="replace" does). Numbers: integers exactly; doubles in the
 *   shortest form that reads back as the same double; NaN and infinities become null. Misuse (a
 *   value without a key inside an object, a key outside one, unbalanced ends, nesting deeper than
 *   JSON_MAX_DEPTH) or running out of memory puts the writer in an error state: jw_text then
 *   returns NULL, so a caller checks once at the end. jw_raw is trusted, not validated.
 *
 * Semantics of the parser
 *   - Strict RFC 8259: no comments, no trailing commas, no leading zeros, no NaN/Infinity, no
 *     unescaped control characters in strings, only the standard escapes, strings must be valid
 *     UTF-8 (RFC 3629: no overlongs, no encoded surrogates, nothing above U+10FFFF), \u escapes must
 *     pair surrogates correctly (a pair becomes one 4-byte UTF-8 sequence), only the four JSON
 *     whitespace characters, exactly one value per document. A leading UTF-8 byte order mark is
 *     skipped (RFC 8259 §8.1 allows this).
 *   - Nesting deeper than JSON_MAX_DEPTH arrays/objects is refused with an error, so hostile input
 *     cannot overflow the C stack.
 *   - Strings are UTF-8 with an explicit length; they are also NUL-terminated for convenience but
 *     may contain NUL (from \u0000), so use the length when that matters.
 *   - Numbers are kept as double. An integer literal (no fraction, no exponent) that fits int64 is
 *     also kept exactly, so 9007199254740993 survives; json_is_int also accepts a literal such as
 *     1e3 or 2.0 whose double value is integral and within ±2^53 (exactly representable). A literal
 *     whose magnitude overflows double is an error.
 *   - Objects keep their members in document order. Duplicate keys are accepted; json_get returns
 *     the LAST one (as Python's json does). Lookup is a linear scan: iterate with json_key_at /
 *     json_value_at for big objects such as a tokenizer vocabulary.
 *   - All pointers returned stay valid until json_free. Nodes come from an arena (a few large
 *     allocations), so parsing a 10+ MB file takes a few tens of milliseconds.
 */
#ifndef JSON_H
#define JSON_H

#include <stddef.h>
#include <stdint.h>

#define JSON_MAX_DEPTH 512
#define JSON_READ_MAX ((size_t)256 << 20)   /* json_read_file's cap: 256 MiB */

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;
typedef struct JsonValue JsonValue;
typedef struct JsonDoc JsonDoc;

JsonDoc *json_parse(const char *text, size_t len, char *err, size_t err_len);
void json_free(JsonDoc *doc);
const JsonValue *json_root(const JsonDoc *doc);
JsonType json_type(const JsonValue *v);
size_t json_len(const JsonValue *v);
const JsonValue *json_at(const JsonValue *arr, size_t i);
const JsonValue *json_get(const JsonValue *obj, const char *key);
const JsonValue *json_getn(const JsonValue *obj, const char *key, size_t key_len);
const char *json_key_at(const JsonValue *obj, size_t i, size_t *key_len);
const JsonValue *json_value_at(const JsonValue *obj, size_t i);
const char *json_str(const JsonValue *v, size_t *len);
double json_num(const JsonValue *v);
int json_is_int(const JsonValue *v, int64_t *out);
int json_int_literal(const JsonValue *v, int64_t *out);
int json_bool(const JsonValue *v);
char *json_read_file(const char *path, size_t *len, char *err, size_t err_len);
char *json_read_file_max(const char *path, size_t max_bytes, size_t *len, char *err,
                         size_t err_len);

typedef struct {
    char *buf;                  /* NUL-terminated text so far (NULL until the first write) */
    size_t len, cap;
    int depth;                  /* open containers */
    int failed;                 /* misuse or out of memory: jw_text returns NULL */
    int key_pending;            /* a key was written; its value comes next */
    unsigned char is_object[JSON_MAX_DEPTH + 1];   /* per open container */
    unsigned char has_items[JSON_MAX_DEPTH + 1];   /* per open container: a comma is due */
} JsonWriter;

void jw_init(JsonWriter *w);
void jw_free(JsonWriter *w);
void jw_reset(JsonWriter *w);
void jw_obj(JsonWriter *w);
void jw_obj_end(JsonWriter *w);
void jw_arr(JsonWriter *w);
void jw_arr_end(JsonWriter *w);
void jw_key(JsonWriter *w, const char *key);
void jw_str(JsonWriter *w, const char *s);
void jw_strn(JsonWriter *w, const char *s, size_t len);
void jw_int(JsonWriter *w, int64_t v);
void jw_num(JsonWriter *w, double v);
void jw_bool(JsonWriter *w, int v);
void jw_null(JsonWriter *w);
void jw_raw(JsonWriter *w, const char *json, size_t len);
void jw_kstr(JsonWriter *w, const char *key, const char *s);
void jw_kint(JsonWriter *w, const char *key, int64_t v);
void jw_knum(JsonWriter *w, const char *key, double v);
void jw_kbool(JsonWriter *w, const char *key, int v);
const char *jw_text(const JsonWriter *w, size_t *len);

#endif /* JSON_H */

#ifdef JSON_IMPLEMENTATION
#ifndef JSON_IMPLEMENTATION_DONE
#define JSON_IMPLEMENTATION_DONE

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef O_CLOEXEC   /* hidden by a strict _POSIX_C_SOURCE in the including file */
#define O_CLOEXEC 0
#endif

typedef struct { const char *s; size_t len; } JsonKey;

struct JsonValue {
    JsonType type;
    int exact_int;          /* number literal was an integer that fits int64 */
    size_t len;             /* string bytes, array items or object members */
    union {
        struct { double d; int64_t i; } num;
        int boolean;
        const char *str;
        struct { JsonValue *values; JsonKey *keys; } kids;  /* keys only for objects */
    } u;
};

/* Node memory: a list of big chunks, bump-allocated, freed all at once. */
typedef struct JsonChunk { struct JsonChunk *next; size_t used, cap; } JsonChunk;

struct JsonDoc {
    JsonChunk *chunks;
    char *strings;          /* all decoded strings; never longer than the input text */
    JsonValue *root;
};

typedef struct {
    const char *text, *p, *end;
    JsonDoc *doc;
    char *str_next;         /* bump pointer into doc->strings */
    int depth;
    /* Children of the containers being parsed, copied into the arena when a container closes. */
    JsonValue *vstack; size_t vn, vcap;
    JsonKey *kstack; size_t kn, kcap;
    char *err; size_t err_len;
    int failed;
} JsonParser;

static void *json__alloc(JsonDoc *doc, size_t size) {
    size = (size + 15) & ~(size_t)15;
    JsonChunk *c = doc->chunks;
    if (!c || c->cap - c->used < size) {
        size_t cap = c ? c->cap * 2 : (size_t)1 << 16;
        if (cap > ((size_t)1 << 26)) cap = (size_t)1 << 26;
        if (cap < size) cap = size;
        JsonChunk *n = malloc(sizeof(JsonChunk) + 16 + cap);
        if (!n) return NULL;
        n->next = c; n->used = 0; n->cap = cap;
        doc->chunks = c = n;
    }
    /* Chunk payload starts 16 bytes past the header's aligned end, keeping 16-byte alignment. */
    char *base = (char *)c + ((sizeof(JsonChunk) + 15) & ~(size_t)15);
    void *out = base + c->used;
    c->used += size;
    return out;
}

/* Records the first error at position `at`; line and column are computed only now, so the
 * successful path pays nothing for position tracking. */
static int json__fail(JsonParser *P, const char *at, const char *fmt, ...) {
    if (P->failed) return -1;
    P->failed = 1;
    if (!P->err || !P->err_len) return -1;
    size_t line = 1, col = 1;
    for (const char *q = P->text; q < at; q++) {
        if (*q == '\n') { line++; col = 1; } else col++;
    }
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(P->err, P->err_len, "line %zu col %zu (byte %zu): %s", line, col,
             (size_t)(at - P->text), msg);
    return -1;
}

static void json__skip_ws(JsonParser *P) {
    const char *p = P->p, *end = P->end;
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    P->p = p;
}

/* Describes the byte at p for error messages: printable ASCII as 'c', everything else in hex. */
static const char *json__describe(const JsonParser *P, const char *p, char buf[16]) {
    if (p >= P->end) return "end of input";
    unsigned char c = (unsigned char)*p;
    if (c >= 0x20 && c < 0x7f) snprintf(buf, 16, "'%c'", c);
    else snprintf(buf, 16, "byte 0x%02x", c);
    return buf;
}

/* Length of the valid UTF-8 sequence starting at p (RFC 3629), or 0 if invalid/truncated. */
static int json__utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0];
    int n; unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    else if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c == 0xE0) { n = 3; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) n = 3;
    else if (c == 0xED) { n = 3; hi = 0x9F; }           /* excludes encoded surrogates */
    else if (c >= 0xEE && c <= 0xEF) n = 3;
    else if (c == 0xF0) { n = 4; lo = 0x90; }           /* excludes overlong 4-byte forms */
    else if (c >= 0xF1 && c <= 0xF3) n = 4;
    else if (c == 0xF4) { n = 4; hi = 0x8F; }           /* nothing above U+10FFFF */
    else return 0;
    if (end - p < n) return 0;
    if (p[1] < lo || p[1] > hi) return 0;
    for (int k = 2; k < n; k++) if (p[k] < 0x80 || p[k] > 0xBF) return 0;
    return n;
}

static int json__hex4(const char *p, const char *end, unsigned *out) {
    if (end - p < 4) return -1;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

/* Parses the string at P->p (on the opening quote); decoded bytes go to the string buffer. */
static int json__string(JsonParser *P, const char **out, size_t *out_len) {
    const char *p = P->p + 1, *end = P->end;
    char *dst = P->str_next, *start = dst;
    for (;;) {
        if (p >= end) return json__fail(P, P->p, "unterminated string");
        unsigned char c = (unsigned char)*p;
        if (c == '"') { p++; break; }
        if (c < 0x20) return json__fail(P, p, "unescaped control character 0x%02x in string", c);
        if (c == '\\') {
            if (p + 1 >= end) return json__fail(P, P->p, "unterminated string");
            char e = p[1];
            switch (e) {
            case '"': *dst++ = '"'; p += 2; break;
            case '\\': *dst++ = '\\'; p += 2; break;
            case '/': *dst++ = '/'; p += 2; break;
            case 'b': *dst++ = '\b'; p += 2; break;
            case 'f': *dst++ = '\f'; p += 2; break;
            case 'n': *dst++ = '\n'; p += 2; break;
            case 'r': *dst++ = '\r'; p += 2; break;
            case 't': *dst++ = '\t'; p += 2; break;
            case 'u': {
                unsigned cp;
                if (json__hex4(p + 2, end, &cp))
                    return json__fail(P, p, "bad \\u escape (need 4 hex digits)");
                const char *esc = p;
                p += 6;
                if (cp >= 0xDC00 && cp <= 0xDFFF)
                    return json__fail(P, esc, "lone low surrogate \\u%04X", cp);
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    unsigned lo;
                    if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || json__hex4(p + 2, end, &lo) ||
                        lo < 0xDC00 || lo > 0xDFFF)
                        return json__fail(P, esc, "lone high surrogate \\u%04X", cp);
                    p += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                if (cp < 0x80) *dst++ = (char)cp;
                else if (cp < 0x800) {
                    *dst++ = (char)(0xC0 | (cp >> 6));
                    *dst++ = (char)(0x80 | (cp & 0x3F));
                } else if (cp < 0x10000) {
                    *dst++ = (char)(0xE0 | (cp >> 12));
                    *dst++ = (char)(0x80 | ((cp >> 6) & 0x3F));
                    *dst++ = (char)(0x80 | (cp & 0x3F));
                } else {
                    *dst++ = (char)(0xF0 | (cp >> 18));
                    *dst++ = (char)(0x80 | ((cp >> 12) & 0x3F));
                    *dst++ = (char)(0x80 | ((cp >> 6) & 0x3F));
                    *dst++ = (char)(0x80 | (cp & 0x3F));
                }
                break;
            }
            default: {
                char d[16];
                return json__fail(P, p, "invalid escape \\%s", json__describe(P, p + 1, d));
            }
            }
            continue;
        }
        if (c < 0x80) { *dst++ = (char)c; p++; continue; }
        int n = json__utf8_len((const unsigned char *)p, (const unsigned char *)end);
        if (!n) return json__fail(P, p, "invalid UTF-8 in string (byte 0x%02x)", c);
        memcpy(dst, p, (size_t)n);
        dst += n; p += n;
    }
    /* Decoded length + NUL never exceeds the raw length including both quotes, so the buffer
     * sized to the whole input cannot overflow. */
    *dst++ = 0;
    *out = start;
    *out_len = (size_t)(dst - 1 - start);
    P->str_next = dst;
    P->p = p;
    return 0;
}

static int json__number(JsonParser *P, JsonValue *v) {
    const char *p = P->p, *end = P->end, *start = p;
    int integral = 1;
    if (p < end && *p == '-') p++;
    if (p >= end || *p < '0' || *p > '9') return json__fail(P, start, "invalid number");
    if (*p == '0') {
        p++;
        if (p < end && *p >= '0' && *p <= '9')
            return json__fail(P, start, "leading zero in number");
    } else {
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && *p == '.') {
        integral = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9')
            return json__fail(P, p, "expected digit after decimal point");
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        integral = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return json__fail(P, p, "expected digit in exponent");
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    size_t n = (size_t)(p - start);
    /* strtod needs a NUL-terminated copy: the input need not be terminated after the number. */
    char small[64], *buf = n < sizeof small ? small : malloc(n + 1);
    if (!buf) return json__fail(P, start, "out of memory");
    memcpy(buf, start, n);
    buf[n] = 0;
    errno = 0;
    double d = strtod(buf, NULL);
    int range_err = errno == ERANGE && isinf(d);
    v->type = JSON_NUMBER;
    v->u.num.d = d;
    v->u.num.i = 0;
    v->exact_int = 0;
    if (integral) {
        /* Accumulate as a negative value so INT64_MIN fits; stop on overflow. */
        const char *q = buf;
        int neg = *q == '-';
        if (neg) q++;
        int64_t acc = 0, ok = 1;
        for (; *q; q++) {
            int digit = *q - '0';
            if (acc < (INT64_MIN + digit) / 10) { ok = 0; break; }
            acc = acc * 10 - digit;
        }
        if (ok && !neg && acc == INT64_MIN) ok = 0;
        if (ok) { v->exact_int = 1; v->u.num.i = neg ? acc : -acc; }
    }
    if (buf != small) free(buf);
    if (range_err) return json__fail(P, start, "number out of range");
    P->p = p;
    return 0;
}

static int json__push_value(JsonParser *P, const JsonValue *v) {
    if (P->vn == P->vcap) {
        size_t cap = P->vcap ? P->vcap * 2 : 256;
        JsonValue *n = realloc(P->vstack, cap * sizeof *n);
        if (!n) return json__fail(P, P->p, "out of memory");
        P->vstack = n; P->vcap = cap;
    }
    P->vstack[P->vn++] = *v;
    return 0;
}

static int json__push_key(JsonParser *P, const char *s, size_t len) {
    if (P->kn == P->kcap) {
        size_t cap = P->kcap ? P->kcap * 2 : 256;
        JsonKey *n = realloc(P->kstack, cap * sizeof *n);
        if (!n) return json__fail(P, P->p, "out of memory");
        P->kstack = n; P->kcap = cap;
    }
    P->kstack[P->kn].s = s;
    P->kstack[P->kn].len = len;
    P->kn++;
    return 0;
}

static int json__literal(JsonParser *P, const char *word, size_t n) {
    if ((size_t)(P->end - P->p) < n || memcmp(P->p, word, n) != 0) {
        char d[16];
        return json__fail(P, P->p, "unexpected %s", json__describe(P, P->p, d));
    }
    P->p += n;
    return 0;
}

static int json__value(JsonParser *P, JsonValue *v);

/* Moves the children pushed since mark into one arena array owned by the container v. */
static int json__close_container(JsonParser *P, JsonValue *v, size_t vmark, size_t kmark) {
    size_t n = P->vn - vmark;
    v->len = n;
    v->u.kids.values = NULL;
    v->u.kids.keys = NULL;
    if (n) {
        v->u.kids.values = json__alloc(P->doc, n * sizeof(JsonValue));
        if (!v->u.kids.values) return json__fail(P, P->p, "out of memory");
        memcpy(v->u.kids.values, P->vstack + vmark, n * sizeof(JsonValue));
        if (v->type == JSON_OBJECT) {
            v->u.kids.keys = json__alloc(P->doc, n * sizeof(JsonKey));
            if (!v->u.kids.keys) return json__fail(P, P->p, "out of memory");
            memcpy(v->u.kids.keys, P->kstack + kmark, n * sizeof(JsonKey));
        }
    }
    P->vn = vmark;
    P->kn = kmark;
    return 0;
}

static int json__container(JsonParser *P, JsonValue *v, int is_object) {
    const char *open = P->p;
    char close = is_object ? '}' : ']';
    if (++P->depth > JSON_MAX_DEPTH)
        return json__fail(P, open, "nesting deeper than %d levels", JSON_MAX_DEPTH);
    v->type = is_object ? JSON_OBJECT : JSON_ARRAY;
    v->exact_int = 0;
    size_t vmark = P->vn, kmark = P->kn;
    char d[16];
    P->p++;
    json__skip_ws(P);
    if (P->p < P->end && *P->p == close) {
        P->p++;
    } else {
        for (;;) {
            if (is_object) {
                if (P->p >= P->end || *P->p != '"')
                    return json__fail(P, P->p, "expected string key, got %s",
                                      json__describe(P, P->p, d));
                const char *key; size_t key_len;
                if (json__string(P, &key, &key_len) || json__push_key(P, key, key_len)) return -1;
                json__skip_ws(P);
                if (P->p >= P->end || *P->p != ':')
                    return json__fail(P, P->p, "expected ':' after key, got %s",
                                      json__describe(P, P->p, d));
                P->p++;
                json__skip_ws(P);
            }
            JsonValue child;
            if (json__value(P, &child) || json__push_value(P, &child)) return -1;
            json__skip_ws(P);
            if (P->p < P->end && *P->p == ',') {
                P->p++;
                json__skip_ws(P);
                if (P->p < P->end && *P->p == close)
                    return json__fail(P, P->p, "trailing comma");
                continue;
            }
            if (P->p < P->end && *P->p == close) { P->p++; break; }
            if (P->p >= P->end)
                return json__fail(P, open, "unterminated %s", is_object ? "object" : "array");
            return json__fail(P, P->p, "expected ',' or '%c', got %s", close,
                              json__describe(P, P->p, d));
        }
    }
    P->depth--;
    return json__close_container(P, v, vmark, kmark);
}

static int json__value(JsonParser *P, JsonValue *v) {
    char d[16];
    if (P->p >= P->end) return json__fail(P, P->p, "unexpected end of input, expected a value");
    v->exact_int = 0;
    v->len = 0;
    switch (*P->p) {
    case '{': return json__container(P, v, 1);
    case '[': return json__container(P, v, 0);
    case '"':
        v->type = JSON_STRING;
        return json__string(P, &v->u.str, &v->len);
    case 't': v->type = JSON_BOOL; v->u.boolean = 1; return json__literal(P, "true", 4);
    case 'f': v->type = JSON_BOOL; v->u.boolean = 0; return json__literal(P, "false", 5);
    case 'n': v->type = JSON_NULL; return json__literal(P, "null", 4);
    default:
        if (*P->p == '-' || (*P->p >= '0' && *P->p <= '9')) return json__number(P, v);
        return json__fail(P, P->p, "unexpected %s, expected a value", json__describe(P, P->p, d));
    }
}

JsonDoc *json_parse(const char *text, size_t len, char *err, size_t err_len) {
    if (err && err_len) err[0] = 0;
    JsonParser P;
    memset(&P, 0, sizeof P);
    P.text = text; P.p = text; P.end = text + len;
    P.err = err; P.err_len = err_len;
    if (!text && len) { json__fail(&P, P.p, "no input"); return NULL; }
    JsonDoc *doc = calloc(1, sizeof *doc);
    if (doc) doc->strings = malloc(len + 1);
    if (!doc || !doc->strings) {
        json_free(doc);
        json__fail(&P, P.p, "out of memory");
        return NULL;
    }
    P.doc = doc;
    P.str_next = doc->strings;
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) P.p += 3;
    JsonValue root;
    json__skip_ws(&P);
    int rc = json__value(&P, &root);
    if (!rc) {
        json__skip_ws(&P);
        if (P.p < P.end) {
            char d[16];
            rc = json__fail(&P, P.p, "unexpected %s after the JSON value",
                            json__describe(&P, P.p, d));
        }
    }
    if (!rc) {
        doc->root = json__alloc(doc, sizeof(JsonValue));
        if (!doc->root) rc = json__fail(&P, P.p, "out of memory");
        else *doc->root = root;
    }
    free(P.vstack);
    free(P.kstack);
    if (rc) { json_free(doc); return NULL; }
    return doc;
}

void json_free(JsonDoc *doc) {
    if (!doc) return;
    JsonChunk *c = doc->chunks;
    while (c) { JsonChunk *next = c->next; free(c); c = next; }
    free(doc->strings);
    free(doc);
}

const JsonValue *json_root(const JsonDoc *doc) { return doc ? doc->root : NULL; }
JsonType json_type(const JsonValue *v) { return v ? v->type : JSON_NULL; }

size_t json_len(const JsonValue *v) {
    return v && (v->type == JSON_ARRAY || v->type == JSON_OBJECT) ? v->len : 0;
}

const JsonValue *json_at(const JsonValue *arr, size_t i) {
    if (!arr || arr->type != JSON_ARRAY || i >= arr->len) return NULL;
    return &arr->u.kids.values[i];
}

const JsonValue *json_getn(const JsonValue *obj, const char *key, size_t key_len) {
    if (!obj || obj->type != JSON_OBJECT || !key) return NULL;
    for (size_t i = obj->len; i-- > 0;) {
        const JsonKey *k = &obj->u.kids.keys[i];
        if (k->len == key_len && memcmp(k->s, key, key_len) == 0) return &obj->u.kids.values[i];
    }
    return NULL;
}

const JsonValue *json_get(const JsonValue *obj, const char *key) {
    return key ? json_getn(obj, key, strlen(key)) : NULL;
}

const char *json_key_at(const JsonValue *obj, size_t i, size_t *key_len) {
    if (!obj || obj->type != JSON_OBJECT || i >= obj->len) {
        if (key_len) *key_len = 0;
        return NULL;
    }
    if (key_len) *key_len = obj->u.kids.keys[i].len;
    return obj->u.kids.keys[i].s;
}

const JsonValue *json_value_at(const JsonValue *obj, size_t i) {
    if (!obj || obj->type != JSON_OBJECT || i >= obj->len) return NULL;
    return &obj->u.kids.values[i];
}

const char *json_str(const JsonValue *v, size_t *len) {
    if (!v || v->type != JSON_STRING) { if (len) *len = 0; return NULL; }
    if (len) *len = v->len;
    return v->u.str;
}

double json_num(const JsonValue *v) { return v && v->type == JSON_NUMBER ? v->u.num.d : NAN; }

int json_is_int(const JsonValue *v, int64_t *out) {
    if (!v || v->type != JSON_NUMBER) return 0;
    if (v->exact_int) { if (out) *out = v->u.num.i; return 1; }
    double d = v->u.num.d;
    /* Beyond 2^53 a double no longer pins down one integer, so such a value is not "exact". */
    if (d == floor(d) && fabs(d) <= 9007199254740992.0) { if (out) *out = (int64_t)d; return 1; }
    return 0;
}

/* Python's json.loads makes 2 an int and 2.0 or 2e0 a float; re-serializing as Python does needs to
 * know which was written. */
int json_int_literal(const JsonValue *v, int64_t *out) {
    if (!v || v->type != JSON_NUMBER || !v->exact_int) return 0;
    if (out) *out = v->u.num.i;
    return 1;
}

int json_bool(const JsonValue *v) { return v && v->type == JSON_BOOL ? v->u.boolean : -1; }

/* Reads at most max_bytes from fd (a regular file or a pipe) into a NUL-terminated buffer. */
static char *json__read_fd(int fd, const char *path, uint64_t hint, size_t max_bytes, size_t *len,
                           char *err, size_t err_len) {
    /* a regular file's size as a hint, plus one spare byte so that its end is seen without growing
       */
    size_t cap = hint && hint <= max_bytes ? (size_t)hint + 2
                                           : (max_bytes < (1 << 16) ? max_bytes + 1 : 1 << 16),
           n = 0;
    char *buf = malloc(cap);
    if (!buf) { if (err) snprintf(err, err_len, "%s: out of memory", path); return NULL; }
    for (;;) {
        /* full: grow, but never past max_bytes + 1 (one byte to see the overrun) */
        if (n + 1 == cap) {
            if (n > max_bytes) break;
            size_t ncap = cap > (max_bytes + 2) / 2 ? max_bytes + 2 : cap * 2;
            char *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                if (err) snprintf(err, err_len, "%s: out of memory", path);
                return NULL;
            }
            buf = nb; cap = ncap;
        }
        ssize_t got = read(fd, buf + n, cap - 1 - n);
        if (got < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            free(buf);
            if (err) snprintf(err, err_len, "%s: read error: %s", path, strerror(e));
            return NULL;
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    if (n > max_bytes) {
        free(buf);
        if (err)
            snprintf(err, err_len, "%s: longer than %zu bytes, the most this file may have", path,
                     max_bytes);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

char *json_read_file_max(const char *path, size_t max_bytes, size_t *len, char *err,
                         size_t err_len) {
    if (len) *len = 0;
    /* O_NONBLOCK: opening a FIFO without a writer must not hang (it then reads as empty) */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) { if (err) snprintf(err, err_len, "%s: %s", path, strerror(errno)); return NULL; }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        if (err) snprintf(err, err_len, "%s: cannot stat: %s", path, strerror(e));
        return NULL;
    }
    if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
        const char *kind = S_ISDIR(st.st_mode)   ? "a directory"
                           : S_ISCHR(st.st_mode) ? "a character device"
                           : S_ISBLK(st.st_mode) ? "a block device"
                                                 : "neither a regular file nor a pipe";
        close(fd);
        if (err) snprintf(err, err_len, "%s: is %s, not a file", path, kind);
        return NULL;
    }
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > (uint64_t)max_bytes) {
        close(fd);
        if (err)
            snprintf(err, err_len, "%s: %llu bytes, more than the %zu this file may have", path,
                     (unsigned long long)st.st_size, max_bytes);
        return NULL;
    }
    /* a pipe with a writer: wait for its data */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    char *buf = json__read_fd(fd, path, S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0, max_bytes,
                              len, err, err_len);
    close(fd);
    return buf;
}

char *json_read_file(const char *path, size_t *len, char *err, size_t err_len) {
    return json_read_file_max(path, JSON_READ_MAX, len, err, err_len);
}

/* ---- Writer ---- */

void jw_init(JsonWriter *w) { memset(w, 0, sizeof *w); }
void jw_free(JsonWriter *w) { free(w->buf); jw_init(w); }

void jw_reset(JsonWriter *w) {
    char *buf = w->buf;
    size_t cap = w->cap;
    jw_init(w);
    w->buf = buf; w->cap = cap;
    if (buf) buf[0] = 0;
}

/* Room for n more bytes plus the NUL; sets the error state instead of failing later. */
static int jw__reserve(JsonWriter *w, size_t n) {
    if (w->failed) return -1;
    if (n > SIZE_MAX / 2 - w->len) { w->failed = 1; return -1; }
    if (w->len + n + 1 <= w->cap) return 0;
    size_t cap = w->cap ? w->cap : 256;
    while (cap < w->len + n + 1) cap *= 2;
    char *b = realloc(w->buf, cap);
    if (!b) { w->failed = 1; return -1; }
    w->buf = b; w->cap = cap;
    return 0;
}

static void jw__put(JsonWriter *w, const char *s, size_t n) {
    if (jw__reserve(w, n)) return;
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = 0;
}

/* Before every value: inside an object a key must have been written; inside an array a comma
 * separates items. */
static int jw__value(JsonWriter *w) {
    if (w->failed) return -1;
    if (w->depth > 0 && w->is_object[w->depth]) {
        if (!w->key_pending) { w->failed = 1; return -1; }
        w->key_pending = 0;
        return 0;
    }
    if (w->depth == 0 && w->len > 0) { w->failed = 1; return -1; }   /* one value per document */
    if (w->depth > 0 && w->has_items[w->depth]) jw__put(w, ",", 1);
    if (w->depth > 0) w->has_items[w->depth] = 1;
    return w->failed ? -1 : 0;
}

static void jw__open(JsonWriter *w, int is_object) {
    if (jw__value(w)) return;
    if (w->depth >= JSON_MAX_DEPTH) { w->failed = 1; return; }
    jw__put(w, is_object ? "{" : "[", 1);
    w->depth++;
    w->is_object[w->depth] = (unsigned char)is_object;
    w->has_items[w->depth] = 0;
}

static void jw__close(JsonWriter *w, int is_object) {
    if (w->failed) return;
    if (w->depth == 0 || w->is_object[w->depth] != is_object || w->key_pending) {
        w->failed = 1;
        return;
    }
    jw__put(w, is_object ? "}" : "]", 1);
    w->depth--;
}

void jw_obj(JsonWriter *w) { jw__open(w, 1); }
void jw_obj_end(JsonWriter *w) { jw__close(w, 1); }
void jw_arr(JsonWriter *w) { jw__open(w, 0); }
void jw_arr_end(JsonWriter *w) { jw__close(w, 0); }

/* Length of the longest prefix at p that could still begin a valid UTF-8 sequence (at least 1):
 * an invalid sequence is replaced by one U+FFFD per such "maximal subpart" (Unicode §3.9). */
static size_t json__utf8_bad_len(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0], lo = 0x80, hi = 0xBF;
    int n;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c == 0xE0) { n = 3; lo = 0xA0; }
    else if (c == 0xED) { n = 3; hi = 0x9F; }
    else if (c >= 0xE1 && c <= 0xEF) n = 3;
    else if (c == 0xF0) { n = 4; lo = 0x90; }
    else if (c == 0xF4) { n = 4; hi = 0x8F; }
    else if (c >= 0xF1 && c <= 0xF3) n = 4;
    else return 1;
    size_t k = 1;
    if (p + 1 < end && p[1] >= lo && p[1] <= hi) {
        k = 2;
        while ((int)k < n && p + k < end && p[k] >= 0x80 && p[k] <= 0xBF) k++;
    }
    return k;
}

static void jw__string(JsonWriter *w, const char *s, size_t len) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    jw__put(w, "\"", 1);
    while (p < end && !w->failed) {
        /* Copy the longest run that needs no escaping in one go. */
        const unsigned char *run = p;
        while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\') p++;
        if (p > run) { jw__put(w, (const char *)run, (size_t)(p - run)); continue; }
        unsigned c = *p;
        if (c >= 0x80) {
            int n = json__utf8_len(p, end);
            if (n) { jw__put(w, (const char *)p, (size_t)n); p += n; }
            else { jw__put(w, "\xEF\xBF\xBD", 3); p += json__utf8_bad_len(p, end); }
            continue;
        }
        char esc[6] = {'\\', 0, 0, 0, 0, 0};
        size_t en = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        default:
            esc[1] = 'u'; esc[2] = '0'; esc[3] = '0'; esc[4] = hex[c >> 4]; esc[5] = hex[c & 15];
            en = 6;
        }
        jw__put(w, esc, en);
        p++;
    }
    jw__put(w, "\"", 1);
}

void jw_key(JsonWriter *w, const char *key) {
    if (w->failed) return;
    if (w->depth == 0 || !w->is_object[w->depth] || w->key_pending || !key) {
        w->failed = 1;
        return;
    }
    if (w->has_items[w->depth]) jw__put(w, ",", 1);
    w->has_items[w->depth] = 1;
    jw__string(w, key, strlen(key));
    jw__put(w, ":", 1);
    w->key_pending = 1;
}

void jw_strn(JsonWriter *w, const char *s, size_t len) {
    if (!s && len) { w->failed = 1; return; }
    if (!jw__value(w)) jw__string(w, s ? s : "", len);
}

void jw_str(JsonWriter *w, const char *s) {
    if (!s) { jw_null(w); return; }
    jw_strn(w, s, strlen(s));
}

void jw_int(JsonWriter *w, int64_t v) {
    char b[32];
    if (!jw__value(w)) jw__put(w, b, (size_t)snprintf(b, sizeof b, "%lld", (long long)v));
}

void jw_num(JsonWriter *w, double v) {
    if (!isfinite(v)) { jw_null(w); return; }
    char b[40];
    int n = 0;
    /* The shortest of %.15g..%.17g that reads back exactly (17 digits always do). */
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(b, sizeof b, "%.*g", prec, v);
        if (strtod(b, NULL) == v) break;
    }
    if (!jw__value(w)) jw__put(w, b, (size_t)n);
}

void jw_bool(JsonWriter *w, int v) {
    if (!jw__value(w)) jw__put(w, v ? "true" : "false", v ? 4 : 5);
}
void jw_null(JsonWriter *w) { if (!jw__value(w)) jw__put(w, "null", 4); }

void jw_raw(JsonWriter *w, const char *json, size_t len) {
    if (!json || !len) { w->failed = 1; return; }
    if (!jw__value(w)) jw__put(w, json, len);
}

void jw_kstr(JsonWriter *w, const char *key, const char *s) { jw_key(w, key); jw_str(w, s); }
void jw_kint(JsonWriter *w, const char *key, int64_t v) { jw_key(w, key); jw_int(w, v); }
void jw_knum(JsonWriter *w, const char *key, double v) { jw_key(w, key); jw_num(w, v); }
void jw_kbool(JsonWriter *w, const char *key, int v) { jw_key(w, key); jw_bool(w, v); }

const char *jw_text(const JsonWriter *w, size_t *len) {
    int complete = !w->failed && w->depth == 0 && !w->key_pending && w->len > 0;
    if (len) *len = complete ? w->len : 0;
    return complete ? w->buf : NULL;
}

#endif /* JSON_IMPLEMENTATION_DONE */
#endif /* JSON_IMPLEMENTATION */

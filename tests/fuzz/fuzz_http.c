/* libFuzzer target for http.h's request parser: arbitrary bytes, delivered in arbitrary pieces,
 * parsed as a stream of pipelined requests. Beyond "no crash, no sanitizer report" it checks:
 *   - the result never depends on how the bytes were split: every request parsed piece by piece
 *     equals the one parsed from the whole buffer at once (status, length, method, path, body);
 *   - a complete request lies inside the bytes given, its body within the limit, its strings
 *     NUL-terminated inside the buffer; an error is one of the statuses the parser documents;
 *   - once http_parser_head reports a head (also before the body is in), its strings lie inside
 *     the bytes given, and on a complete request they are the request's own;
 *   - http_auth_ok, http_addr_parse and the SSE line writer accept whatever they are given.
 * Build: clang -g -O1 -fsanitize=fuzzer,address,undefined -I. tests/fuzz/fuzz_http.c */
#define JSON_IMPLEMENTATION
#include "json.h"
#define HTTP_IMPLEMENTATION
#include "http.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REQUESTS 64

typedef struct {
    int rc;
    size_t consumed, body_len;
    char method[32], path[64];
    uint64_t body_hash;
} Outcome;

static uint64_t hash(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

static int inside(const char *s, const char *buf, size_t len) {
    if (s < buf || s >= buf + len) return 0;
    return memchr(s, 0, (size_t)(buf + len - s)) != NULL;   /* terminated within the buffer */
}

static void record(Outcome *o, int rc, size_t consumed, const HttpRequest *req, const char *buf,
                   size_t len, const HttpLimits *lim) {
    memset(o, 0, sizeof *o);
    o->rc = rc;
    if (rc != 1) {
        if (rc != 0 && rc != 400 && rc != 413 && rc != 417 && rc != 431 && rc != 501 && rc != 505)
            abort();
        return;
    }
    if (consumed == 0 || consumed > len) abort();
    if (req->body_len > lim->max_body_bytes) abort();
    if (req->body < buf || req->body + req->body_len > buf + consumed) abort();
    if (!inside(req->method, buf, consumed) || !inside(req->query, buf, consumed)) abort();
    if (strcmp(req->path, "/") != 0 && !inside(req->path, buf, consumed)) abort();
    if (req->nheaders < 0 || req->nheaders > HTTP_MAX_HEADERS) abort();
    for (int i = 0; i < req->nheaders; i++)
        if (!inside(req->headers[i].name, buf, consumed) ||
            !inside(req->headers[i].value, buf, consumed))
            abort();
    o->consumed = consumed;
    o->body_len = req->body_len;
    o->body_hash = hash(req->body, req->body_len);
    strncpy(o->method, req->method, sizeof o->method - 1);
    strncpy(o->path, req->path, sizeof o->path - 1);
    (void)http_auth_ok(req, "key");
    (void)http_header(req, "content-type");
}

/* The head as the server's head callback and log lines see it, after a call that returned rc. */
static void check_head(const HttpParser *p, char *buf, size_t len, int rc, const HttpRequest *req) {
    HttpRequest h;
    if (!http_parser_head(p, buf, &h)) {
        if (rc == 1) abort();                            /* a complete request has a head */
        return;
    }
    if (h.body_len || h.nheaders < 0 || h.nheaders > HTTP_MAX_HEADERS) abort();
    if (!inside(h.method, buf, len) || !inside(h.query, buf, len)) abort();
    if (strcmp(h.path, "/") != 0 && !inside(h.path, buf, len)) abort();
    for (int i = 0; i < h.nheaders; i++)
        if (!inside(h.headers[i].name, buf, len) || !inside(h.headers[i].value, buf, len)) abort();
    (void)http_auth_ok(&h, "key");
    if (rc == 1 && (h.method != req->method || h.path != req->path || h.nheaders != req->nheaders))
        abort();
}

/* Parses data as pipelined requests; step() gives the size of the next piece that "arrives".
 * Returns the number of outcomes written. */
static int run(const uint8_t *data, size_t size, const HttpLimits *lim, uint32_t seed, int whole,
               Outcome *out) {
    char *buf = malloc(size ? size : 1);
    size_t have = 0, off = 0;
    int n = 0;
    HttpParser p;
    http_parser_init(&p, lim);
    while (n < MAX_REQUESTS) {
        size_t piece;
        if (whole) piece = size - have;
        else {
            seed = seed * 1664525u + 1013904223u;
            piece = 1 + (seed >> 16) % ((seed >> 8 & 1) ? 7 : 300);
        }
        if (piece > size - have) piece = size - have;
        memcpy(buf + have, data + have, piece);
        have += piece;
        for (;;) {
            HttpRequest req;
            size_t consumed = 0;
            int rc = http_parse(&p, buf + off, have - off, &req, &consumed);
            check_head(&p, buf + off, have - off, rc, &req);
            if (rc == 0) {
                if (have == size) { record(&out[n++], 0, 0, NULL, NULL, 0, lim); goto done; }
                break;                                   /* wait for the next piece */
            }
            record(&out[n++], rc, consumed, &req, buf + off, have - off, lim);
            if (rc != 1 || n == MAX_REQUESTS) goto done;
            off += consumed;
            http_parser_init(&p, lim);
        }
    }
done:
    free(buf);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    /* Byte 0: limits (small ones reach the 413/431 paths); bytes 1-2: how the input is split. */
    HttpLimits lim = {0, 0};
    if (data[0] & 1) {
        lim.max_header_bytes = 32 + (size_t)(data[0] >> 1) * 8;
        lim.max_body_bytes = (size_t)(data[0] >> 3) * 5;
    }
    HttpParser defaults;
    http_parser_init(&defaults, &lim);                   /* zero fields become the defaults */
    lim = defaults.lim;
    uint32_t seed = (uint32_t)data[1] << 8 | data[2];
    data += 3;
    size -= 3;

    static Outcome a[MAX_REQUESTS], b[MAX_REQUESTS];
    int na = run(data, size, &lim, seed, 1, a);
    int nb = run(data, size, &lim, seed, 0, b);
    if (na != nb) abort();
    for (int i = 0; i < na; i++)
        if (memcmp(&a[i], &b[i], sizeof a[i]) != 0) abort();

    /* The other small parsers of untrusted text. */
    char spec[72];
    size_t sl = size < sizeof spec - 1 ? size : sizeof spec - 1;
    memcpy(spec, data, sl);
    spec[sl] = 0;
    HttpAddr addr;
    char err[160];
    if (http_addr_parse(spec, &addr, err, sizeof err) == 0 && (addr.port < 0 || addr.port > 65535))
        abort();
    size_t lines = http__sse_lines(NULL, (const char *)data, size);
    char *sse = malloc(lines + 1);
    if (http__sse_lines(sse, (const char *)data, size) != lines) abort();
    for (size_t i = 0; i + 1 < lines; i++)
        if (sse[i] == '\r' || (sse[i] == '\n' && i + 7 < lines &&
                               memcmp(sse + i + 1, "data: ", 6) && sse[i + 1] != '\n'))
            abort();
    free(sse);
    return 0;
}

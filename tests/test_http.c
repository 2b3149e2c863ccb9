/* Unit tests for http.h: the request parser (every request split at every byte, each malformed
 * form and limit with its status, chunked bodies, pipelining, Expect, HTTP/1.0, keep-alive), the
 * listening address, the auth helper, and the exact bytes of responses and SSE streams written to
 * a socket pair (plus client-gone detection). The server loop is tested with real clients by
 * tests/t_http.sh. */
#define JSON_IMPLEMENTATION
#include "json.h"
#define HTTP_IMPLEMENTATION
#include "http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int failures;

static void check(const char *name, int ok, const char *why) {
    if (ok) printf("PASS %s\n", name);
    else { printf("FAIL %s: %s\n", name, why); failures++; }
}

/* Parses text (copied, since the parser writes into its buffer) in one call. */
typedef struct { char *buf; int rc; size_t consumed; HttpRequest req; HttpParser p; } Parsed;

static Parsed parse_limits(const char *text, size_t len, const HttpLimits *lim) {
    Parsed r;
    memset(&r, 0, sizeof r);
    r.buf = malloc(len + 1);
    memcpy(r.buf, text, len);
    http_parser_init(&r.p, lim);
    r.rc = http_parse(&r.p, r.buf, len, &r.req, &r.consumed);
    return r;
}

static Parsed parse(const char *text) { return parse_limits(text, strlen(text), NULL); }

static int body_is(const HttpRequest *req, const char *want) {
    return req->body_len == strlen(want) && memcmp(req->body, want, req->body_len) == 0;
}

/* Expect status rc for text; names the test after what it shows. */
static void expect_status(const char *name, const char *text, int want) {
    Parsed r = parse(text);
    char why[160];
    snprintf(why, sizeof why, "got %d (%s), want %d", r.rc, r.p.error ? r.p.error : "-", want);
    check(name, r.rc == want, why);
    free(r.buf);
}

static void test_basic(void) {
    Parsed r = parse("GET /v1/models?x=1&y HTTP/1.1\r\nHost: localhost:8080\r\nUser-Agent: "
                     "t\r\nX-Empty:\r\n"
                     "Accept:   */*  \r\n\r\n");
    check("basic_complete",
          r.rc == 1 && r.consumed == strlen("GET /v1/models?x=1&y HTTP/1.1\r\nHost: "
                                            "localhost:8080\r\n"
                                            "User-Agent: t\r\nX-Empty:\r\nAccept:   */*  \r\n\r\n"),
          r.p.error ? r.p.error : "rc");
    check("basic_method_path_query",
          r.rc == 1 && !strcmp(r.req.method, "GET") && !strcmp(r.req.path, "/v1/models") &&
              !strcmp(r.req.query, "x=1&y"),
          "request line");
    check("basic_headers",
          r.rc == 1 && r.req.nheaders == 4 &&
              !strcmp(http_header(&r.req, "host"), "localhost:8080") &&
              !strcmp(http_header(&r.req, "USER-AGENT"), "t") &&
              !strcmp(http_header(&r.req, "x-empty"), "") &&
              !strcmp(http_header(&r.req, "accept"), "*/*") &&
              http_header(&r.req, "cookie") == NULL,
          "headers");
    check("basic_keep_alive_http11",
          r.rc == 1 && r.req.keep_alive && r.req.minor == 1 && r.req.body_len == 0, "keep-alive");
    free(r.buf);

    r = parse("POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nContent-Length: "
              "11\r\nContent-Type: application/json\r\n\r\n{\"a\": true}");
    check("post_body", r.rc == 1 && body_is(&r.req, "{\"a\": true}") && !strcmp(r.req.query, ""),
          r.p.error ? r.p.error : "body");
    free(r.buf);

    r = parse("GET / HTTP/1.0\r\n\r\n");
    check("http10_no_host_closes", r.rc == 1 && r.req.minor == 0 && !r.req.keep_alive, "HTTP/1.0");
    free(r.buf);
    r = parse("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    check("http10_always_closes", r.rc == 1 && !r.req.keep_alive,
          "HTTP/1.0 keep-alive is not offered");
    free(r.buf);
    r = parse("GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, Close\r\n\r\n");
    check("connection_close_token", r.rc == 1 && !r.req.keep_alive, "Connection: close not seen");
    free(r.buf);
    r = parse("GET / HTTP/1.1\r\nHost: h\r\nConnection: closed\r\n\r\n");
    check("connection_not_close", r.rc == 1 && r.req.keep_alive, "'closed' taken for 'close'");
    free(r.buf);
    r = parse("\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n");
    check("leading_blank_lines_skipped",
          r.rc == 1 && !strcmp(r.req.path, "/") && r.consumed == 4 + 27,
          r.p.error ? r.p.error : "rc");
    free(r.buf);
    r = parse("GET http://example.com:80/v1/models?q HTTP/1.1\r\nHost: example.com\r\n\r\n");
    check("absolute_form_target",
          r.rc == 1 && !strcmp(r.req.path, "/v1/models") && !strcmp(r.req.query, "q"),
          "absolute-form");
    free(r.buf);
    r = parse("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n");
    check("asterisk_target", r.rc == 1 && !strcmp(r.req.path, "*"), "asterisk-form");
    free(r.buf);
    r = parse("GET / HTTP/1.2\r\nHost: h\r\n\r\n");
    check("http12_as_11", r.rc == 1 && r.req.minor == 1, "HTTP/1.2");
    free(r.buf);
    r = parse("GET / HTTP/1.1\r\nHost: h\r\nX-Bin: caf\xc3\xa9\t!\r\n\r\n");
    check("obs_text_and_tab_in_value",
          r.rc == 1 && !strcmp(http_header(&r.req, "x-bin"), "caf\xc3\xa9\t!"), "value");
    free(r.buf);
    r = parse("GET / HTTP/1.1\r\nHost: h\r\n");
    check("incomplete_head_waits", r.rc == 0, "incomplete head not 0");
    free(r.buf);
    r = parse("GET / HTTP/1.1\r\nHost: h\r\n\r");
    check("cr_at_end_waits", r.rc == 0, "CR at the end not 0");
    free(r.buf);
    r = parse("POST / HTTP/1.1\r\nHost: h\r\n\r\n");
    check("post_without_length_empty_body", r.rc == 1 && r.req.body_len == 0,
          "no framing = empty body");
    free(r.buf);
}

static void test_malformed(void) {
    expect_status("bare_lf_line_ends", "GET / HTTP/1.1\nHost: h\n\n", 400);
    expect_status("bare_lf_in_header", "GET / HTTP/1.1\r\nHost: h\nX: y\r\n\r\n", 400);
    expect_status("bare_cr", "GET / HTTP/1.1\r\nHost: h\rX: y\r\n\r\n", 400);
    {
        static const char t[] = "GET / HTTP/1.1\r\nHost: h\r\nX: a\0b\r\n\r\n";
        Parsed r = parse_limits(t, sizeof t - 1, NULL);
        check("nul_in_head_refused", r.rc == 400, "NUL accepted");
        free(r.buf);
    }
    expect_status("obs_fold", "GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n  b\r\n\r\n", 400);
    expect_status("space_before_colon", "GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400);
    expect_status("no_colon", "GET / HTTP/1.1\r\nHost h\r\n\r\n", 400);
    expect_status("empty_header_name", "GET / HTTP/1.1\r\n: h\r\nHost: h\r\n\r\n", 400);
    expect_status("control_in_value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\x01 b\r\n\r\n", 400);
    expect_status("del_in_value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\x7f\r\n\r\n", 400);
    expect_status("missing_version", "GET /\r\nHost: h\r\n\r\n", 400);
    expect_status("lowercase_version", "GET / http/1.1\r\nHost: h\r\n\r\n", 400);
    expect_status("version_trailing_space", "GET / HTTP/1.1 \r\nHost: h\r\n\r\n", 400);
    expect_status("double_space", "GET  / HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    expect_status("http2_version", "GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505);
    expect_status("bad_method_char", "G(T / HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    expect_status("relative_target", "GET v1 HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    expect_status("control_in_target", "GET /a\x01 HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    expect_status("missing_host", "GET / HTTP/1.1\r\n\r\n", 400);
    expect_status("two_hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400);
    expect_status("expect_unknown",
                  "POST / HTTP/1.1\r\nHost: h\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\nx",
                  417);
    /* Content-Length forms. */
    const char *bad_cl[] = {"+5", "-1", "5, 6", "5, 5", "0x10", "5a", "", "1 2", "1.0"};
    for (size_t i = 0; i < sizeof bad_cl / sizeof bad_cl[0]; i++) {
        char req[160], name[64];
        snprintf(req, sizeof req, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: %s\r\n\r\n12345",
                 bad_cl[i]);
        snprintf(name, sizeof name, "content_length_refused_[%s]", bad_cl[i]);
        expect_status(name, req, 400);
    }
    expect_status(
        "content_length_huge",
        "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999999999999\r\n\r\n", 413);
    expect_status("content_length_2_64",
                  "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 18446744073709551616\r\n\r\n",
                  413);
    expect_status("content_length_over_limit",
                  "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 8388609\r\n\r\n", 413);
    expect_status("content_length_at_limit_waits",
                  "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 8388608\r\n\r\n", 0);
    expect_status(
        "content_length_duplicates_disagree",
        "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n12345", 400);
    Parsed r = parse("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\ncontent-length: "
                     "005\r\n\r\n12345");
    check("content_length_duplicates_agree", r.rc == 1 && body_is(&r.req, "12345"),
          r.p.error ? r.p.error : "rc");
    free(r.buf);
    r = parse("POST / HTTP/1.1\r\nHost: h\r\nContent-Length:  3 \r\n\r\nabc");
    check("content_length_ows_trimmed", r.rc == 1 && body_is(&r.req, "abc"),
          r.p.error ? r.p.error : "rc");
    free(r.buf);
    /* Transfer-Encoding. */
    expect_status("te_gzip_501", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n",
                  501);
    expect_status("te_list_501",
                  "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501);
    expect_status("te_and_cl",
                  "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: "
                  "chunked\r\n\r\n",
                  400);
    expect_status("te_twice",
                  "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: "
                  "chunked\r\n\r\n",
                  400);
    expect_status("te_http10", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                  400);
    /* An error sticks: a later call with more bytes gives the same status. */
    r = parse("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999\r\n\r\n");
    size_t consumed;
    check("error_sticks",
          r.rc == 413 && http_parse(&r.p, r.buf, 10, &r.req, &consumed) == 413 && r.p.error,
          "status changed");
    free(r.buf);
}

static void test_limits(void) {
    HttpLimits lim = {1024, 100};
    /* A head of exactly the limit passes; one byte more is 431, detected before the head ends. */
    char req[2048];
    int base = snprintf(req, sizeof req, "GET / HTTP/1.1\r\nHost: h\r\nX: ");
    int fill = 1024 - base - 4;
    memset(req + base, 'a', (size_t)fill);
    memcpy(req + base + fill, "\r\n\r\n", 5);
    Parsed r = parse_limits(req, strlen(req), &lim);
    check("head_at_limit_ok", strlen(req) == 1024 && r.rc == 1, r.p.error ? r.p.error : "rc");
    free(r.buf);
    memset(req + base, 'a', (size_t)fill + 1);
    memcpy(req + base + fill + 1, "\r\n\r\n", 5);
    r = parse_limits(req, strlen(req), &lim);
    check("head_over_limit_431", r.rc == 431, "not 431");
    free(r.buf);
    memset(req + base, 'a', 1500);              /* no end of the head in sight yet */
    req[base + 1500] = 0;
    r = parse_limits(req, strlen(req), &lim);
    check("head_over_limit_431_early", r.rc == 431, "not 431 before the head ended");
    free(r.buf);
    /* Default 16 KiB. */
    char *big = malloc(20000);
    int n = snprintf(big, 20000, "GET / HTTP/1.1\r\nHost: h\r\nCookie: ");
    memset(big + n, 'c', 17000);
    memcpy(big + n + 17000, "\r\n\r\n", 5);
    r = parse(big);
    check("head_default_16k_431", r.rc == 431, "not 431");
    free(r.buf);
    free(big);
    /* Header count: HTTP_MAX_HEADERS lines pass (Host included), one more is 431. */
    char many[8192];
    n = snprintf(many, sizeof many, "GET / HTTP/1.1\r\nHost: h\r\n");
    for (int i = 1; i < HTTP_MAX_HEADERS; i++)
        n += snprintf(many + n, sizeof many - (size_t)n, "X-%d: v\r\n", i);
    snprintf(many + n, sizeof many - (size_t)n, "\r\n");
    r = parse(many);
    check("header_count_at_limit", r.rc == 1 && r.req.nheaders == HTTP_MAX_HEADERS,
          r.p.error ? r.p.error : "rc");
    free(r.buf);
    snprintf(many + n, sizeof many - (size_t)n, "X-last: v\r\n\r\n");
    r = parse(many);
    check("header_count_over_limit_431", r.rc == 431, "not 431");
    free(r.buf);
    /* Body limit through Content-Length and through chunks. */
    const char *cl101 = "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 101\r\n\r\n";
    r = parse_limits(cl101, strlen(cl101), &lim);
    check("body_limit_cl_413", r.rc == 413, "not 413");
    free(r.buf);
    const char *ch = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n32\r\n";
    char chunked[512];
    n = snprintf(chunked, sizeof chunked, "%s", ch);
    memset(chunked + n, 'z', 50);
    n += 50;
    n += snprintf(chunked + n, sizeof chunked - (size_t)n, "\r\n32\r\n");
    memset(chunked + n, 'z', 50);
    n += 50;
    n += snprintf(chunked + n, sizeof chunked - (size_t)n, "\r\n0\r\n\r\n");
    r = parse_limits(chunked, (size_t)n, &lim);
    check("body_limit_chunked_exact_ok", r.rc == 1 && r.req.body_len == 100,
          r.p.error ? r.p.error : "rc");
    free(r.buf);
    n = snprintf(chunked, sizeof chunked,
                 "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n");
    memset(chunked + n, 'z', 100);
    n += 100;
    n += snprintf(chunked + n, sizeof chunked - (size_t)n, "\r\n1\r\nz\r\n0\r\n\r\n");
    r = parse_limits(chunked, (size_t)n, &lim);
    check("body_limit_chunked_413", r.rc == 413, "not 413");
    free(r.buf);
    expect_status("chunk_size_overflow_413",
                  "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: "
                  "chunked\r\n\r\nffffffffffffffffffff\r\n",
                  413);
}

static void test_chunked(void) {
    Parsed r = parse("POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\n\r\n"
                     "5\r\nhello\r\nA;name=val;q=\"x\"\r\n, world!!!\r\n0\r\nTrailer-A: "
                     "1\r\nTrailer-B: 2\r\n\r\n");
    check("chunked_with_ext_and_trailers", r.rc == 1 && body_is(&r.req, "hello, world!!!"),
          r.p.error ? r.p.error : "body");
    free(r.buf);
    r = parse("POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3 "
              ";e\r\nabc\r\n0\r\n\r\n");
    check("chunked_bws_before_ext", r.rc == 1 && body_is(&r.req, "abc"),
          r.p.error ? r.p.error : "body");
    free(r.buf);
    r = parse("POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    check("chunked_empty", r.rc == 1 && r.req.body_len == 0, r.p.error ? r.p.error : "body");
    free(r.buf);
    const char *head = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
    struct { const char *body; int want; const char *name; } bad[] = {
        {"x\r\n", 400, "chunk_size_not_hex"},
        {"\r\n", 400, "chunk_size_empty"},
        {"3 4\r\nabc\r\n", 400, "chunk_size_space_digit"},
        {"3\nabc\r\n0\r\n\r\n", 400, "chunk_size_bare_lf"},
        {"3\r\nabcd\r\n", 400, "chunk_data_too_long"},
        {"3\r\nabc\n", 400, "chunk_data_bare_lf"},
        {"0\r\n\n", 400, "chunk_end_bare_lf"},
        {"0\r\nX: 1\n\r\n", 400, "trailer_bare_lf"},
        {"3;a\x01\r\nabc\r\n0\r\n\r\n", 400, "chunk_ext_control"},
        {"-3\r\n", 400, "chunk_size_negative"},
        {"3\r\nab", 0, "chunk_partial_waits"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char req[256];
        snprintf(req, sizeof req, "%s%s", head, bad[i].body);
        expect_status(bad[i].name, req, bad[i].want);
    }
    char longext[6000];
    int n = snprintf(longext, sizeof longext, "%s1;", head);
    memset(longext + n, 'e', 5000);
    longext[n + 5000] = 0;
    expect_status("chunk_line_too_long", longext, 400);
    /* Trailers count against the head limit. */
    char *tr = malloc(40000);
    n = snprintf(tr, 40000, "%s0\r\nX: ", head);
    memset(tr + n, 't', 20000);
    tr[n + 20000] = 0;
    expect_status("trailers_too_large_431", tr, 431);
    free(tr);
}

/* Feeds text to one parser the way a socket delivers it: the buffer grows by `step` bytes at a
 * time (bytes past what was fed are not visible). Every prefix must be "more", the whole must
 * complete with the same request as a one-shot parse. */
static int split_same(const char *text, size_t len, size_t step, const char *want_body,
                      const char *want_path) {
    char *buf = malloc(len + 1);
    HttpParser p;
    http_parser_init(&p, NULL);
    HttpRequest req;
    memset(&req, 0, sizeof req);
    size_t consumed = 0;
    int rc = 0;
    size_t have = 0;
    while (have < len) {
        size_t k = have + step <= len ? step : len - have;
        memcpy(buf + have, text + have, k);
        have += k;
        rc = http_parse(&p, buf, have, &req, &consumed);
        if (rc != 0 && have < len) { free(buf); return 0; }   /* completed (or failed) too early */
    }
    int ok = rc == 1 && consumed == len && body_is(&req, want_body) && !strcmp(req.path, want_path);
    free(buf);
    return ok;
}

static void test_splits(void) {
    const char *reqs[][3] = {
        { "GET /health HTTP/1.1\r\nHost: h\r\n\r\n", "", "/health" },
        { "\r\nPOST /v1/completions HTTP/1.1\r\nHost: h\r\nContent-Length: "
          "13\r\n\r\n{\"prompt\":1}\n",
          "{\"prompt\":1}\n", "/v1/completions" },
        { "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: "
          "chunked\r\n\r\n4;x=y\r\nabcd\r\n10\r\n0123456789abcdef\r\n0\r\nT: v\r\n\r\n",
          "abcd0123456789abcdef", "/c" },
        { "POST /e HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok",
          "ok", "/e" },
    };
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
        size_t len = strlen(reqs[i][0]);
        int ok = 1;
        for (size_t step = 1; step <= len && ok; step++)
            ok = split_same(reqs[i][0], len, step, reqs[i][1], reqs[i][2]);
        char name[64];
        snprintf(name, sizeof name, "split_every_step_%zu", i);
        check(name, ok, "a split changed the result");
    }
    /* 100-continue: wanted once the head is in and the body is not. */
    const char *e =
        "POST /e HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n\r\nok";
    size_t head_len = strlen(e) - 2;
    char buf[128];
    memcpy(buf, e, strlen(e));
    HttpParser p;
    http_parser_init(&p, NULL);
    HttpRequest req;
    size_t consumed;
    int before =
        http_parse(&p, buf, head_len - 1, &req, &consumed) == 0 && !http_parser_wants_continue(&p);
    int during =
        http_parse(&p, buf, head_len, &req, &consumed) == 0 && http_parser_wants_continue(&p);
    int after =
        http_parse(&p, buf, strlen(e), &req, &consumed) == 1 && !http_parser_wants_continue(&p);
    check("expect_100_continue", before && during && after, "wants_continue at the wrong time");
    Parsed r = parse("POST /e HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n");
    check("expect_ignored_http10", r.rc == 0 && !http_parser_wants_continue(&r.p),
          "HTTP/1.0 expectation honoured");
    free(r.buf);
}

static void test_pipelining(void) {
    const char *two =
        "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"
        "POST /b HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nxy\r\n0\r\n\r\n"
        "GET /c HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
        "GET /d HT";
    size_t len = strlen(two);
    char *buf = malloc(len);
    memcpy(buf, two, len);
    const char *paths[] = {"/a", "/b", "/c"}, *bodies[] = {"abc", "xy", ""};
    size_t off = 0;
    int ok = 1;
    for (int i = 0; i < 3 && ok; i++) {
        HttpParser p;
        http_parser_init(&p, NULL);
        HttpRequest req;
        memset(&req, 0, sizeof req);
        size_t consumed = 0;
        int rc = http_parse(&p, buf + off, len - off, &req, &consumed);
        ok = rc == 1 && !strcmp(req.path, paths[i]) && body_is(&req, bodies[i]) &&
             req.keep_alive == (i < 2);
        off += consumed;
    }
    HttpParser p;
    http_parser_init(&p, NULL);
    HttpRequest req;
    size_t consumed;
    check("pipelined_three_in_order", ok, "pipelined requests misparsed");
    check("pipelined_partial_fourth_waits",
          ok && http_parse(&p, buf + off, len - off, &req, &consumed) == 0 &&
              !memcmp(buf + off, "GET /d HT", 9),
          "the partial fourth request was touched");
    free(buf);
}

static void test_addr(void) {
    struct { const char *spec; int ok, port, loopback; const char *host; } cases[] = {
        {"8080", 1, 8080, 1, "127.0.0.1"},
        {"0", 1, 0, 1, "127.0.0.1"},
        {"127.1.2.3:5", 1, 5, 1, "127.1.2.3"},
        {"localhost:9", 1, 9, 1, "localhost"},
        {"0.0.0.0:80", 1, 80, 0, "0.0.0.0"},
        {"192.168.1.5:65535", 1, 65535, 0, "192.168.1.5"},
        {"[::1]:80", 1, 80, 1, "::1"},
        {"[::]:80", 1, 80, 0, "::"},
        {"[::ffff:127.0.0.1]:80", 1, 80, 1, "::ffff:127.0.0.1"},
        {"::1:80", 0, 0, 0, NULL},
        {"1.2.3.4:65536", 0, 0, 0, NULL},
        {"1.2.3.4:", 0, 0, 0, NULL},
        {":80", 0, 0, 0, NULL},
        {"abc", 0, 0, 0, NULL},
        {"[::1]", 0, 0, 0, NULL},
        {"[::1]80", 0, 0, 0, NULL},
        {"example.com:80", 0, 0, 0, NULL},
        {"[127.0.0.1]:80", 0, 0, 0, NULL},
        {"80a", 0, 0, 0, NULL},
        {"-1", 0, 0, 0, NULL},
        {"", 0, 0, 0, NULL},
        {"0000080", 0, 0, 0, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        HttpAddr a;
        char err[160] = "", name[80];
        int rc = http_addr_parse(cases[i].spec, &a, err, sizeof err);
        snprintf(name, sizeof name, "addr_[%s]", cases[i].spec);
        if (cases[i].ok)
            check(name,
                  rc == 0 && a.port == cases[i].port && a.loopback == cases[i].loopback &&
                      !strcmp(a.host, cases[i].host),
                  err[0] ? err : "wrong port/host/loopback");
        else check(name, rc == -1 && err[0], "accepted");
    }
}

static void test_auth(void) {
    Parsed r = parse("GET / HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer  sk-secret\r\n\r\n");
    check("auth_bearer", r.rc == 1 && http_auth_ok(&r.req, "sk-secret"), "bearer refused");
    check("auth_bearer_wrong",
          !http_auth_ok(&r.req, "sk-secreT") && !http_auth_ok(&r.req, "sk-secret2") &&
              !http_auth_ok(&r.req, "sk-secre"),
          "a wrong key passed");
    check("auth_no_key_configured", http_auth_ok(&r.req, NULL) && http_auth_ok(&r.req, ""),
          "open server refused");
    free(r.buf);
    r = parse("GET / HTTP/1.1\r\nHost: h\r\nauthorization: bearer k1\r\n\r\n");
    check("auth_bearer_case_insensitive", r.rc == 1 && http_auth_ok(&r.req, "k1"),
          "lowercase bearer refused");
    free(r.buf);
    r = parse("GET / HTTP/1.1\r\nHost: h\r\nX-Api-Key: k2\r\n\r\n");
    check("auth_x_api_key", r.rc == 1 && http_auth_ok(&r.req, "k2") && !http_auth_ok(&r.req, "k3"),
          "x-api-key");
    free(r.buf);
    r = parse("GET / HTTP/1.1\r\nHost: h\r\nAuthorization: Basic k4\r\nAuthorization2: Bearer "
              "k4\r\n\r\n");
    check("auth_basic_refused", r.rc == 1 && !http_auth_ok(&r.req, "k4"), "Basic accepted");
    free(r.buf);
    r = parse("GET / HTTP/1.1\r\nHost: h\r\nAuthorization: Bearerk5\r\n\r\n");
    check("auth_bearer_needs_space", r.rc == 1 && !http_auth_ok(&r.req, "k5"), "Bearerk5 accepted");
    free(r.buf);
    r = parse("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    check("auth_missing", r.rc == 1 && !http_auth_ok(&r.req, "k"), "no header accepted");
    free(r.buf);
    check("const_eq",
          http_const_eq("abc", 3, "abc", 3) && !http_const_eq("abd", 3, "abc", 3) &&
              !http_const_eq("ab", 2, "abc", 3) && !http_const_eq("abcd", 4, "abc", 3) &&
              http_const_eq("", 0, "", 0) && !http_const_eq("abc\0", 4, "abc", 3),
          "const_eq");
}

/* The head of a request is readable once it is in, before the body (the server's head callback). */
static void test_head(void) {
    const char *text =
        "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 8000000\r\n"
        "Authorization: Bearer k\r\n\r\n{\"a\"";
    size_t len = strlen(text), head_len = strstr(text, "\r\n\r\n") + 4 - text;
    char *buf = malloc(len);
    memcpy(buf, text, len);
    HttpParser p;
    HttpRequest req;
    size_t consumed = 0;
    http_parser_init(&p, NULL);
    int rc = http_parse(&p, buf, head_len - 1, &req, &consumed);
    check("head_not_before_blank_line", rc == 0 && http_parser_head(&p, buf, &req) == 0,
          "head reported early");
    rc = http_parse(&p, buf, len, &req, &consumed);
    memset(&req, 0x55, sizeof req);
    int got = http_parser_head(&p, buf, &req);
    check("head_while_body_arrives",
          rc == 0 && got == 1 && !strcmp(req.method, "POST") &&
              !strcmp(req.path, "/v1/chat/completions") && !strcmp(req.query, "x=1") &&
              req.keep_alive && req.nheaders == 3 &&
              !strcmp(http_header(&req, "content-length"), "8000000") && req.body_len == 0 &&
              http_auth_ok(&req, "k") && !http_auth_ok(&req, "other"),
          "head fields");
    free(buf);

    /* A body error leaves the head readable (for the log line); a head error does not. */
    Parsed r = parse("POST /up HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
    check("head_after_body_error",
          r.rc == 400 && http_parser_head(&r.p, r.buf, &req) == 1 && !strcmp(req.path, "/up"),
          "head lost after a chunk error");
    free(r.buf);
    r = parse("POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: x\r\n\r\n");
    check("no_head_after_head_error", r.rc == 400 && http_parser_head(&r.p, r.buf, &req) == 0,
          "a bad head reported");
    free(r.buf);
}

/* ---- Responses on a socket pair ---- */

static void res_init(HttpResponse *res, int fd, int minor, int keep_alive) {
    memset(res, 0, sizeof *res);
    res->fd = fd;
    res->minor = minor;
    res->keep_alive = keep_alive;
    res->timeout_ms = 1000;
}

static size_t read_all(int fd, char *buf, size_t cap) {
    size_t n = 0;
    for (;;) {
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, 100) <= 0) break;
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r <= 0) break;
        n += (size_t)r;
    }
    buf[n] = 0;
    return n;
}

static void no_handler(const HttpRequest *req, HttpResponse *res, void *user) {
    (void)req; (void)res; (void)user;
}

static void test_responses(void) {
    int sv[2];
    char got[4096];
    HttpResponse res;
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
        check("socketpair", 0, "socketpair failed");
        return;
    }
    res_init(&res, sv[0], 1, 1);
    int rc = http_add_header(&res, "X-Request-Id", "7");
    rc |= http_respond_json(&res, 200, "{\"ok\":true}", 11);
    read_all(sv[1], got, sizeof got);
    check("respond_json_bytes",
          rc == 0 && !strcmp(got, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                  "Content-Length: 11\r\nConnection: keep-alive\r\nX-Request-Id: "
                                  "7\r\n\r\n{\"ok\":true}"),
          got);
    check("respond_twice_refused",
          http_respond_json(&res, 200, "{}", 2) == -1 && http_add_header(&res, "A", "b") == -1,
          "a second response was accepted");

    res_init(&res, sv[0], 1, 0);
    check("header_injection_refused",
          http_add_header(&res, "X", "a\r\nEvil: 1") == -1 &&
              http_add_header(&res, "Bad Name", "v") == -1 && http_add_header(&res, "", "v") == -1,
          "injected");
    rc = http_respond_error(&res, 400, "bad \"json\"\n");
    read_all(sv[1], got, sizeof got);
    const char *body = strstr(got, "\r\n\r\n");
    check("respond_error_shape",
          rc == 0 && !strncmp(got, "HTTP/1.1 400 Bad Request\r\n", 26) &&
              strstr(got, "Connection: close\r\n") && body &&
              !strcmp(body + 4, "{\"error\":{\"message\":\"bad "
                                "\\\"json\\\"\\n\",\"type\":\"invalid_request_error\",\"param\":"
                                "null,\"code\":null}}"),
          got);

    res_init(&res, sv[0], 1, 1);
    rc = http_respond_error_ex(&res, 400, "too long", "messages", "context_length_exceeded");
    read_all(sv[1], got, sizeof got);
    body = strstr(got, "\r\n\r\n");
    check("respond_error_ex_param_code",
          rc == 0 && body &&
              !strcmp(body + 4, "{\"error\":{\"message\":\"too long\","
                                "\"type\":\"invalid_request_error\",\"param\":\"messages\","
                                "\"code\":\"context_length_exceeded\"}}"),
          got);

    res_init(&res, sv[0], 1, 1);
    res.head_only = 1;
    rc = http_respond(&res, 200, "text/plain", "hello", 5);
    read_all(sv[1], got, sizeof got);
    check("head_request_no_body",
          rc == 0 && strstr(got, "Content-Length: 5\r\n") && !strstr(got, "hello"), got);

    /* SSE over HTTP/1.1: chunked, one chunk per event; multi-line data becomes several data: lines.
       */
    res_init(&res, sv[0], 1, 1);
    rc = http_sse_begin(&res);
    rc |= http_sse_event(&res, "{\"a\":1}", 7);
    rc |= http_sse_event(&res, "x\ny\r\nz\r", 7);
    rc |= http_sse_end(&res);
    read_all(sv[1], got, sizeof got);
    const char *want =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
        "Connection: keep-alive\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\n\r\n"
        "f\r\ndata: {\"a\":1}\n\n\r\n"
        "20\r\ndata: x\ndata: y\ndata: z\ndata: \n\n\r\n"
        "e\r\ndata: [DONE]\n\n\r\n"
        "0\r\n\r\n";
    check("sse_chunked_bytes", rc == 0 && !strcmp(got, want) && res.state == 1 && res.keep_alive,
          got);
    check("sse_after_end_refused", http_sse_event(&res, "x", 1) == -1, "event after end accepted");

    /* SSE over HTTP/1.0: no chunking, the connection closes. */
    res_init(&res, sv[0], 0, 0);
    rc = http_sse_begin(&res) | http_sse_event(&res, "1", 1) | http_sse_end(&res);
    read_all(sv[1], got, sizeof got);
    check("sse_http10_close_delimited",
          rc == 0 && strstr(got, "Connection: close\r\n") && !strstr(got, "chunked") &&
              strstr(got, "\r\n\r\ndata: 1\n\ndata: [DONE]\n\n") && !res.keep_alive,
          got);

    /* Client-gone detection: alive, pipelined bytes waiting (still alive), half-closed, closed. */
    res_init(&res, sv[0], 1, 1);
    check("client_alive", !http_client_gone(&res), "reported gone");
    if (write(sv[1], "GET", 3) != 3) {}
    check("client_alive_with_pipelined_bytes", !http_client_gone(&res),
          "pipelined bytes taken for a hangup");
    shutdown(sv[1], SHUT_WR);
    check("client_half_closed_is_gone", http_client_gone(&res), "shutdown not seen");
    close(sv[0]);
    close(sv[1]);

    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return;
    res_init(&res, sv[0], 1, 1);
    close(sv[1]);
    check("client_closed_is_gone", http_client_gone(&res), "close not seen");
    /* Writing to a closed peer fails without SIGPIPE killing the process. */
    res_init(&res, sv[0], 1, 1);
    check("write_to_closed_peer_fails", http_sse_begin(&res) == -1 && http_client_gone(&res),
          "write succeeded?");
    close(sv[0]);

    /* A client that stops reading: the write fails after timeout_ms instead of blocking forever. */
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return;
    res_init(&res, sv[0], 1, 1);
    res.timeout_ms = 200;
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    size_t big_len = 8u << 20;
    char *big = malloc(big_len);
    memset(big, 'x', big_len);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = http_respond(&res, 200, "text/plain", big, big_len);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    check("stalled_reader_times_out", rc == -1 && res.failed && s < 5.0, "write did not time out");
    close(sv[0]);
    close(sv[1]);

    /* Once the server is stopping, a stalled write gives up long before timeout_ms (10 s here):
     * a client that stopped reading must not hold up the shutdown. */
    HttpServerConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.listen = "127.0.0.1:0";
    cfg.handle = no_handler;
    char err[200];
    HttpServer *srv = http_server_create(&cfg, err, sizeof err);
    if (!srv || socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
        check("stop_server", 0, err);
        free(big);
        return;
    }
    res_init(&res, sv[0], 1, 1);
    res.timeout_ms = 10000;
    res.srv = srv;
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    http_server_stop(srv);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = http_respond(&res, 200, "text/plain", big, big_len);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    char why[64];
    snprintf(why, sizeof why, "rc %d after %.2f s", rc, s);
    check("stalled_write_gives_up_after_stop", rc == -1 && res.failed && s < 2.0, why);
    http_server_free(srv);
    free(big);
    close(sv[0]);
    close(sv[1]);
}

int main(void) {
    test_basic();
    test_malformed();
    test_limits();
    test_chunked();
    test_splits();
    test_pipelining();
    test_addr();
    test_auth();
    test_head();
    test_responses();
    return failures ? 1 : 0;
}

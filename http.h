/* http.h - HTTP/1.1 for a local API server: request parsing with hard limits, responses, server-sent
 * events, and a small server loop (one worker, a bounded queue). No model knowledge.
 *
 * Single-header library in the stb style: exactly ONE translation unit defines HTTP_IMPLEMENTATION
 * before including it. Error bodies are written with json.h's writer, so that translation unit
 * also needs json.h's implementation (JSON_IMPLEMENTATION). POSIX sockets and pthreads; on Linux
 * poll's POLLRDHUP tells early that a client went away.
 *
 * Request parsing (usable on its own: tests, fuzzing)
 *     void http_parser_init(HttpParser *p, const HttpLimits *lim);    lim NULL or zero fields: defaults
 *     int http_parse(HttpParser *p, char *buf, size_t len, HttpRequest *req, size_t *consumed);
 *         buf holds the bytes received so far for one request (possibly followed by the next,
 *         pipelined one); call again with the same bytes plus more whenever more arrive (the
 *         buffer may move). Returns 0: need more bytes; 1: complete, *req filled and *consumed =
 *         bytes of buf that belong to this request; or an HTTP error status (400, 413, 417, 431,
 *         501, 505) with p->error saying why. http_parse rewrites buf in place (it NUL-terminates
 *         the strings of the head and removes chunked framing), and the pointers in *req point
 *         into buf. For the next request, parse buf + *consumed with a fresh parser.
 *     int http_parser_wants_continue(const HttpParser *p);
 *         The head is complete, asked "Expect: 100-continue", and the body has not fully arrived.
 *     int http_parser_head(const HttpParser *p, char *buf, HttpRequest *req);
 *         1 once the head has been parsed without error (also while the body is still arriving,
 *         and after a body error): *req gets the head of the request in buf (the same bytes
 *         http_parse saw) with an empty body. 0 before that.
 *     const char *http_header(const HttpRequest *req, const char *name);  case-insensitive; first
 *
 * Listening address
 *     int http_addr_parse(const char *spec, HttpAddr *a, char *err, size_t err_len);
 *         "[host:]port": port alone binds 127.0.0.1; host is a numeric IPv4 address, "localhost",
 *         or an IPv6 literal in brackets ("[::1]:8080"). Port 0 picks a free port. a->loopback
 *         says whether only this machine can connect. Returns 0, or -1 with a message.
 *
 * Server
 *     HttpServer *http_server_create(const HttpServerConfig *cfg, char *err, size_t err_len);
 *         Parses cfg->listen, binds and listens (so the caller can report the port, or fail,
 *         before anything runs). NULL + message on error.
 *     int http_server_port(const HttpServer *s);            the bound port (useful with port 0)
 *     const HttpAddr *http_server_addr(const HttpServer *s);
 *     int http_server_run(HttpServer *s);
 *         Serves until SIGINT/SIGTERM (handlers installed for the duration; a second SIGINT kills
 *         as usual) or http_server_stop. The handle callback runs on the caller's thread. Returns
 *         0 after a clean stop, -1 if the I/O thread could not start.
 *     void http_server_stop(HttpServer *s);                 any thread; async-signal-safe
 *     void http_server_free(HttpServer *s);
 *
 * Responding (inside the callbacks). Each returns 0, or -1 when the response could not be sent
 * (client gone, write stalled past timeout_ms, or a misuse such as a second response).
 *     int http_add_header(HttpResponse *res, const char *name, const char *value);  before responding
 *     int http_respond(HttpResponse *res, int status, const char *content_type, const char *body, size_t len);
 *     int http_respond_json(HttpResponse *res, int status, const char *json, size_t len);
 *     int http_respond_error(HttpResponse *res, int status, const char *message);
 *         {"error":{"message":...,"type":...,"param":null,"code":null}} (the OpenAI error shape)
 *     int http_respond_error_ex(HttpResponse *res, int status, const char *message, const char *param,
 *                               const char *code);    the same with "param" and "code" (NULL: null)
 *     int http_sse_begin(HttpResponse *res);                200 text/event-stream (worker only)
 *     int http_sse_event(HttpResponse *res, const char *data, size_t len);   "data: ...\n\n", sent now
 *     int http_sse_end(HttpResponse *res);                  "data: [DONE]\n\n", then the stream ends
 *     int http_stream_begin(HttpResponse *res, const char *content_type);   200, a body of unknown
 *         length (chunked for HTTP/1.1, close-delimited for 1.0) that the worker writes piece by piece
 *     int http_stream_write(HttpResponse *res, const char *data, size_t len);  bytes as they are, now
 *     int http_stream_end(HttpResponse *res);               the stream ends (nothing added)
 *     int http_client_gone(HttpResponse *res);
 *         1 when the client disconnected or a write failed, or the server is stopping: the caller
 *         should stop generating (one poll() call; cheap enough to ask between tokens). Ending
 *         the response afterwards (http_sse_end, an error) is still right: on a stop the client
 *         gets a proper end, and when the client is gone the write just fails.
 *
 * Helpers
 *     int http_auth_ok(const HttpRequest *req, const char *key);
 *         1 if key is NULL/empty, or "Authorization: Bearer KEY" or "x-api-key: KEY" carries it.
 *     int http_const_eq(const char *a, size_t a_len, const char *b, size_t b_len);
 *         Equality whose time does not depend on where the bytes differ (b: the secret).
 *     const char *http_status_text(int status);
 *
 * Threads and scheduling. http_server_run starts one I/O thread that accepts connections, reads
 * and parses requests, and writes small responses; the caller's thread is the worker (with
 * cfg->workers > 1, it and workers - 1 more threads: each takes the next queued request).
 *   - When the head of a request with a body is in and the body is not, the I/O thread calls
 *     cfg->head (if set) with that head (empty body). It must not block; it returns 1 after
 *     answering (the body is then never read and the connection closes), or 0 to read the body.
 *     This is where a wrong API key is refused, before megabytes arrive; a quick callback that
 *     does not look at the body can serve as the head callback too.
 *   - For each complete request the I/O thread calls cfg->quick (if set). It must not block; it
 *     answers cheap things itself (health, model list, auth failures, 404) and returns 1, or
 *     returns 0 to hand the request to the worker.
 *   - Handed-over requests wait in a FIFO of at most cfg->queue entries (not counting the one
 *     being handled); beyond that the I/O thread answers 429 with Retry-After. A waiting client
 *     that disconnects leaves the queue. A worker calls cfg->handle for one request at a time;
 *     it may take minutes and stream (SSE), checking http_client_gone between steps.
 *   - Requests on one connection are answered in order (pipelining): the next request on a
 *     connection is parsed only after the previous response is out.
 *   - A request head must arrive within head_timeout_ms, and the whole request within
 *     timeout_ms, of the connection becoming ready for it (408 and close otherwise; a connection
 *     idle that long is closed silently); a write that makes no progress for timeout_ms fails
 *     (the client counts as gone).
 *   - Admission. At max_conns open connections, or max_conns_per_addr from the new one's
 *     address, a new connection takes the place of one that is closing, else of the oldest idle
 *     keep-alive one, else of the oldest still sending its head (an unfinished head gets a
 *     best-effort 503); only when all of them are busy with a request (body arriving, queued,
 *     being answered) is the new one refused with 503. So no number of idle or slow
 *     connections keeps /health or a new request out.
 *   - Input buffers: a connection holds at most one request (head, body); all of them together
 *     at most max_buffered_bytes. A Content-Length body is given its room when its head is
 *     accepted, or 503 if the budget cannot hold it; a chunked body grows into it, or 503.
 *   - Logging. The callbacks log the answers they give; http.h calls cfg->log (if set) for every
 *     request it ends itself: its own errors (400, 408, 413, 429, 503...), 499 for a client that
 *     closes (or shuts its sending side) while its request arrives or waits in the queue, 500 for
 *     a callback that sent nothing. Before the head is parsed, method and path are "-"; seconds
 *     count from the request's first byte. Called on the I/O thread or the worker, maybe at the
 *     same time; it must not call into the server.
 *   - Stop: listening ends, waiting requests get 503, the running handler sees
 *     http_client_gone() = 1 and its writes give up after 0.5 s without progress, pending
 *     output is flushed (up to 1 s), then run returns 0.
 * Responses: Content-Length always; SSE streams use chunked encoding for HTTP/1.1 clients (the
 * connection stays usable) and close-delimited bodies for HTTP/1.0. HEAD gets headers only.
 * Parsing is strict: CRLF line ends only, no obsolete line folding, one Host for HTTP/1.1,
 * Content-Length digits only (duplicates must agree), Transfer-Encoding exactly "chunked" (other
 * codings 501) and never together with Content-Length, HTTP/1.0 without Transfer-Encoding.
 */
#ifndef HTTP_H
#define HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>

#ifndef HTTP_MAX_HEADERS
#define HTTP_MAX_HEADERS 64                  /* more header lines get 431 */
#endif
#define HTTP_DEFAULT_MAX_HEADER_BYTES (16u << 10)
#define HTTP_DEFAULT_MAX_BODY_BYTES (8u << 20)

typedef struct { const char *name, *value; } HttpHeader;

typedef struct {
    const char *method;          /* as sent, e.g. "POST" */
    const char *path;            /* "/v1/models" (an absolute-form target is reduced to its path) */
    const char *query;           /* after '?', "" if none; not decoded */
    int minor;                   /* HTTP/1.minor: 0 or 1 */
    int keep_alive;              /* the client allows another request on this connection */
    int nheaders;
    HttpHeader headers[HTTP_MAX_HEADERS];
    const char *body;            /* chunked framing removed; NOT NUL-terminated */
    size_t body_len;
} HttpRequest;

typedef struct {
    size_t max_header_bytes;     /* request line + headers (+ chunked trailers); 431 beyond */
    size_t max_body_bytes;       /* decoded body; 413 beyond */
} HttpLimits;

/* Parser state: fields are private (offsets into the caller's buffer). */
typedef struct {
    HttpLimits lim;
    const char *error;
    int status;                  /* the error status, once failed */
    int phase, cstate, minor, keep_alive, chunked, expect_continue, nheaders, abs_root;
    size_t start, scan, line_start, head_end;
    size_t content_length, raw, dst, chunk_left, chunk_digits, line_len, trailer_bytes;
    size_t method, path, query;
    size_t hname[HTTP_MAX_HEADERS], hvalue[HTTP_MAX_HEADERS];
} HttpParser;

typedef struct {
    char host[64];               /* as given ("localhost" stays "localhost") */
    int port;
    int loopback;
    struct sockaddr_storage ss;
    unsigned sslen;
} HttpAddr;

typedef struct HttpServer HttpServer;
typedef struct HttpResponse HttpResponse;

typedef struct {
    const char *listen;          /* "[host:]port" */
    int queue;                   /* requests that may wait for a worker (0: none); more get 429 */
    int workers;                 /* threads that call handle, each one request at a time. 0: 1 */
    int max_conns;               /* open connections. 0: max(64, queue + 16) */
    int max_conns_per_addr;      /* open connections from one client address. 0: max_conns on a
                                    loopback listener (all clients are 127.0.0.1), else half */
    int timeout_ms;              /* request arrival / write stall limit. 0: 30000 */
    int head_timeout_ms;         /* request head arrival, keep-alive idle limit. 0: 10000
                                    (never above timeout_ms) */
    size_t max_buffered_bytes;   /* request bytes held across all connections; 503 beyond.
                                    0: room for four requests at the limits (about 64 MiB) */
    int retry_after_s;           /* Retry-After on 429 and 503. 0: 1 */
    HttpLimits limits;           /* zero fields: defaults (16 KiB head, 8 MiB body) */
    int (*head)(const HttpRequest *req, HttpResponse *res, void *user);    /* I/O thread */
    int (*quick)(const HttpRequest *req, HttpResponse *res, void *user);   /* I/O thread */
    void (*handle)(const HttpRequest *req, HttpResponse *res, void *user); /* worker */
    void (*log)(const HttpRequest *req, int status, double seconds, const char *what, void *user);
    void *user;
} HttpServerConfig;

/* One response in progress; the fields are private. */
struct HttpResponse {
    HttpServer *srv;
    struct HttpConn *conn;       /* set on the I/O thread: output goes to its buffer */
    int fd;
    int minor, keep_alive, head_only, timeout_ms;
    int state;                   /* 0 nothing sent, 1 complete, 2 streaming */
    int failed, chunked;
    char extra[1024];            /* headers added with http_add_header */
    size_t extra_len;
};

void http_parser_init(HttpParser *p, const HttpLimits *lim);
int http_parse(HttpParser *p, char *buf, size_t len, HttpRequest *req, size_t *consumed);
int http_parser_wants_continue(const HttpParser *p);
int http_parser_head(const HttpParser *p, char *buf, HttpRequest *req);
const char *http_header(const HttpRequest *req, const char *name);
int http_addr_parse(const char *spec, HttpAddr *a, char *err, size_t err_len);
HttpServer *http_server_create(const HttpServerConfig *cfg, char *err, size_t err_len);
int http_server_port(const HttpServer *s);
const HttpAddr *http_server_addr(const HttpServer *s);
int http_server_run(HttpServer *s);
void http_server_stop(HttpServer *s);
void http_server_free(HttpServer *s);
int http_add_header(HttpResponse *res, const char *name, const char *value);
int http_respond(HttpResponse *res, int status, const char *content_type, const char *body,
                 size_t len);
int http_respond_json(HttpResponse *res, int status, const char *json, size_t len);
int http_respond_error(HttpResponse *res, int status, const char *message);
int http_respond_error_ex(HttpResponse *res, int status, const char *message, const char *param,
                          const char *code);
int http_sse_begin(HttpResponse *res);
int http_sse_event(HttpResponse *res, const char *data, size_t len);
int http_sse_end(HttpResponse *res);
int http_stream_begin(HttpResponse *res, const char *content_type);
int http_stream_write(HttpResponse *res, const char *data, size_t len);
int http_stream_end(HttpResponse *res);
int http_client_gone(HttpResponse *res);
int http_auth_ok(const HttpRequest *req, const char *key);
int http_const_eq(const char *a, size_t a_len, const char *b, size_t b_len);
const char *http_status_text(int status);

#endif /* HTTP_H */

#ifdef HTTP_IMPLEMENTATION
#ifndef HTTP_IMPLEMENTATION_DONE
#define HTTP_IMPLEMENTATION_DONE

#include "json.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* The peer shut down its sending side; Linux's poll reports it with this flag, which the headers
 * only define under _GNU_SOURCE. */
#ifndef POLLRDHUP
#ifdef __linux__
#define POLLRDHUP 0x2000
#else
#define POLLRDHUP 0
#endif
#endif

static int http__nonblock_cloexec(int fd) {
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) || fcntl(fd, F_SETFD, FD_CLOEXEC) ? -1 : 0;
}

/* ---- Request parser ---- */

enum { HTTP__HEAD, HTTP__LENGTH, HTTP__CHUNKED, HTTP__DONE };
/* Chunked body states: size line, extension, LF after a size line, data, CRLF after data,
 * trailer line start / inside / LF, final LF. */
enum {
    HC_SIZE,
    HC_BWS,
    HC_EXT,
    HC_SIZE_LF,
    HC_DATA,
    HC_DATA_CR,
    HC_DATA_LF,
    HC_TR_START,
    HC_TR_LINE,
    HC_TR_LF,
    HC_END_LF
};
#define HTTP__CHUNK_LINE_MAX 4096            /* a chunk-size line with its extensions */

void http_parser_init(HttpParser *p, const HttpLimits *lim) {
    memset(p, 0, sizeof *p);
    if (lim) p->lim = *lim;
    if (!p->lim.max_header_bytes) p->lim.max_header_bytes = HTTP_DEFAULT_MAX_HEADER_BYTES;
    if (!p->lim.max_body_bytes) p->lim.max_body_bytes = HTTP_DEFAULT_MAX_BODY_BYTES;
}

static int http__fail(HttpParser *p, int status, const char *why) {
    if (!p->status) { p->error = why; p->status = status; }
    return p->status;
}

/* RFC 9110 token characters (method, header names). */
static int http__tchar(unsigned char c) {
    if (c >= '0' && c <= '9') return 1;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return 1;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int http__hex(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') return (c | 0x20) - 'a' + 10;
    return -1;
}

/* Does the comma-separated header value contain token (case-insensitive)? */
static int http__has_token(const char *v, const char *token) {
    size_t tl = strlen(token);
    while (*v) {
        while (*v == ' ' || *v == '\t' || *v == ',') v++;
        const char *s = v;
        while (*v && *v != ',') v++;
        const char *e = v;
        while (e > s && (e[-1] == ' ' || e[-1] == '\t')) e--;
        if ((size_t)(e - s) == tl && strncasecmp(s, token, tl) == 0) return 1;
    }
    return 0;
}

/* The head [start, head_end) is complete: split it into NUL-terminated pieces and check it. */
static int http__parse_head(HttpParser *p, char *buf) {
    char *s = buf + p->start, *end = buf + p->head_end - 2;   /* end: the blank line's CR */
    char *eol = memchr(s, '\r', (size_t)(end - s) + 1);
    /* Request line: method SP target SP HTTP/1.x */
    char *q = s;
    while (q < eol && http__tchar((unsigned char)*q)) q++;
    if (q == s || q >= eol || *q != ' ')
        return http__fail(p, 400, "malformed request line (method)");
    *q++ = 0;
    char *target = q;
    while (q < eol && (unsigned char)*q > 0x20 && (unsigned char)*q < 0x7f) q++;
    if (q == target || q >= eol || *q != ' ')
        return http__fail(p, 400, "malformed request line (target)");
    *q++ = 0;
    if (eol - q != 8 || memcmp(q, "HTTP/", 5) || q[5] < '0' || q[5] > '9' || q[6] != '.' ||
        q[7] < '0' || q[7] > '9')
        return http__fail(p, 400, "malformed request line (version)");
    if (q[5] != '1') return http__fail(p, 505, "only HTTP/1.0 and HTTP/1.1 are supported");
    p->minor = q[7] == '0' ? 0 : 1;
    p->method = (size_t)(s - buf);
    /* Targets: origin-form "/path?query", "*" (OPTIONS), or absolute-form "http://host/path". */
    if (strncasecmp(target, "http://", 7) == 0 || strncasecmp(target, "https://", 8) == 0) {
        char *slash = strchr(target + (target[4] == ':' ? 7 : 8), '/');
        if (slash) target = slash;
        else p->abs_root = 1;
    } else if (target[0] != '/' && strcmp(target, "*") != 0) {
        return http__fail(p, 400, "malformed request target");
    }
    p->path = (size_t)(target - buf);
    char *qm = strchr(target, '?');
    if (qm) { *qm = 0; p->query = (size_t)(qm + 1 - buf); }
    else p->query = (size_t)(q - 1 - buf);      /* the NUL after the target: "" */
    if (p->abs_root) p->path = p->query;         /* patched to "/" when *req is filled */

    /* Header lines. */
    int hosts = 0, te = 0, close = 0, has_cl = 0;
    uint64_t cl = 0;
    for (char *line = eol + 2; line < end;) {
        char *le = memchr(line, '\r', (size_t)(end - line) + 1);
        if (*line == ' ' || *line == '\t')
            return http__fail(p, 400, "obsolete header line folding");
        char *c = line;
        while (c < le && http__tchar((unsigned char)*c)) c++;
        if (c == line || c >= le || *c != ':') return http__fail(p, 400, "malformed header line");
        *c++ = 0;
        while (c < le && (*c == ' ' || *c == '\t')) c++;
        char *v = c;
        for (; c < le; c++) {
            unsigned char ch = (unsigned char)*c;
            if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
                return http__fail(p, 400, "control character in a header value");
        }
        while (c > v && (c[-1] == ' ' || c[-1] == '\t')) c--;
        *c = 0;
        if (p->nheaders >= HTTP_MAX_HEADERS) return http__fail(p, 431, "too many header lines");
        p->hname[p->nheaders] = (size_t)(line - buf);
        p->hvalue[p->nheaders] = (size_t)(v - buf);
        p->nheaders++;
        if (strcasecmp(line, "content-length") == 0) {
            if (!*v) return http__fail(p, 400, "empty Content-Length");
            uint64_t n = 0;
            for (const char *d = v; *d; d++) {
                if (*d < '0' || *d > '9')
                    return http__fail(p, 400, "Content-Length is not a plain decimal number");
                if (n > p->lim.max_body_bytes) continue;    /* already too big: no overflow */
                n = n * 10 + (uint64_t)(*d - '0');
            }
            if (n > p->lim.max_body_bytes) return http__fail(p, 413, "request body too large");
            if (has_cl && n != cl) return http__fail(p, 400, "conflicting Content-Length headers");
            has_cl = 1;
            cl = n;
        } else if (strcasecmp(line, "transfer-encoding") == 0) {
            if (te++) return http__fail(p, 400, "more than one Transfer-Encoding header");
            if (strcasecmp(v, "chunked") != 0)
                return http__fail(p, 501, "only Transfer-Encoding: chunked is supported");
        } else if (strcasecmp(line, "host") == 0) {
            hosts++;
        } else if (strcasecmp(line, "connection") == 0) {
            if (http__has_token(v, "close")) close = 1;
        } else if (strcasecmp(line, "expect") == 0) {
            if (strcasecmp(v, "100-continue") != 0) return http__fail(p, 417, "unsupported Expect");
            p->expect_continue = p->minor == 1;   /* HTTP/1.0 expectations are ignored (RFC 9110) */
        }
        line = le + 2;
    }
    if (p->minor == 1 && hosts != 1)
        return http__fail(p, 400, hosts ? "more than one Host header" : "missing Host header");
    if (te && has_cl) return http__fail(p, 400, "both Content-Length and Transfer-Encoding");
    if (te && p->minor == 0) return http__fail(p, 400, "Transfer-Encoding in an HTTP/1.0 request");
    p->keep_alive = p->minor == 1 && !close;
    p->chunked = te;
    p->content_length = (size_t)cl;
    p->raw = p->dst = p->head_end;
    p->phase = te ? HTTP__CHUNKED : cl ? HTTP__LENGTH : HTTP__DONE;
    return 0;
}

/* Decodes chunked framing in place: data bytes move down to p->dst. Returns 0 to wait for more,
 * 1 when the last chunk and the trailers are in, or an error status. */
static int http__chunked(HttpParser *p, char *buf, size_t len) {
    /* Raw framing may cost at most as much again as the body, plus slack, so tiny chunks cannot
     * make a connection buffer grow without bound. */
    size_t raw_max = 2 * p->lim.max_body_bytes + 65536;
    while (p->raw < len) {
        if (p->raw - p->head_end > raw_max)
            return http__fail(p, 413, "chunked request body too large");
        unsigned char c = (unsigned char)buf[p->raw];
        switch (p->cstate) {
        case HC_DATA: {
            size_t n = len - p->raw < p->chunk_left ? len - p->raw : p->chunk_left;
            memmove(buf + p->dst, buf + p->raw, n);
            p->dst += n; p->raw += n; p->chunk_left -= n;
            if (!p->chunk_left) p->cstate = HC_DATA_CR;
            continue;
        }
        case HC_SIZE: {
            if (++p->line_len > HTTP__CHUNK_LINE_MAX)
                return http__fail(p, 400, "chunk size line too long");
            int h = http__hex(c);
            if (h >= 0) {
                /* The running size stays within the body limit, so it cannot overflow. */
                p->chunk_left = p->chunk_left * 16 + (size_t)h;
                p->chunk_digits++;
                if (p->chunk_left > p->lim.max_body_bytes - (p->dst - p->head_end))
                    return http__fail(p, 413, "request body too large");
                break;
            }
            if (!p->chunk_digits) return http__fail(p, 400, "malformed chunk size");
            if (c == ' ' || c == '\t') { p->cstate = HC_BWS; break; }
            if (c == ';') { p->cstate = HC_EXT; break; }
            if (c == '\r') { p->cstate = HC_SIZE_LF; break; }
            return http__fail(p, 400, "malformed chunk size");
        }
        case HC_BWS:                    /* whitespace after the size: only before ';' or CRLF */
            if (++p->line_len > HTTP__CHUNK_LINE_MAX)
                return http__fail(p, 400, "chunk size line too long");
            if (c == ' ' || c == '\t') break;
            if (c == ';') { p->cstate = HC_EXT; break; }
            if (c == '\r') { p->cstate = HC_SIZE_LF; break; }
            return http__fail(p, 400, "malformed chunk size");
        case HC_EXT:
            /* Extensions are skipped: nothing here uses them. */
            if (++p->line_len > HTTP__CHUNK_LINE_MAX)
                return http__fail(p, 400, "chunk size line too long");
            if (c == '\r') { p->cstate = HC_SIZE_LF; break; }
            if ((c < 0x20 && c != '\t') || c == 0x7f)
                return http__fail(p, 400, "control character in a chunk extension");
            break;
        case HC_SIZE_LF:
            if (c != '\n') return http__fail(p, 400, "chunk size line without CRLF");
            p->line_len = 0;
            p->cstate = p->chunk_left ? HC_DATA : HC_TR_START;
            p->chunk_digits = 0;
            break;
        case HC_DATA_CR:
            if (c != '\r') return http__fail(p, 400, "chunk data longer than its size");
            p->cstate = HC_DATA_LF;
            break;
        case HC_DATA_LF:
            if (c != '\n') return http__fail(p, 400, "chunk data without CRLF");
            p->cstate = HC_SIZE;
            break;
        case HC_TR_START:
        case HC_TR_LINE:
            if (++p->trailer_bytes > p->lim.max_header_bytes)
                return http__fail(p, 431, "trailer section too large");
            if (c == '\r') { p->cstate = p->cstate == HC_TR_START ? HC_END_LF : HC_TR_LF; break; }
            if (c == '\n' || c == 0) return http__fail(p, 400, "malformed trailer line");
            p->cstate = HC_TR_LINE;
            break;
        case HC_TR_LF:
            if (c != '\n') return http__fail(p, 400, "trailer line without CRLF");
            p->cstate = HC_TR_START;
            break;
        case HC_END_LF:
            if (c != '\n') return http__fail(p, 400, "chunked body without final CRLF");
            p->raw++;
            return 1;
        }
        p->raw++;
    }
    return 0;
}

/* *req from a parsed head; the body is empty. */
static void http__fill_head(const HttpParser *p, char *buf, HttpRequest *req) {
    memset(req, 0, sizeof *req);
    req->method = buf + p->method;
    req->path = p->abs_root ? "/" : buf + p->path;
    req->query = buf + p->query;
    req->minor = p->minor;
    req->keep_alive = p->keep_alive;
    req->nheaders = p->nheaders;
    for (int i = 0; i < p->nheaders; i++) {
        req->headers[i].name = buf + p->hname[i];
        req->headers[i].value = buf + p->hvalue[i];
    }
    req->body = buf + p->head_end;
}

int http_parse(HttpParser *p, char *buf, size_t len, HttpRequest *req, size_t *consumed) {
    if (p->status) return p->status;                     /* an earlier call already failed */
    if (p->phase == HTTP__HEAD) {
        /* Find the blank line that ends the head, byte by byte from where the last call stopped:
         * CRLF only (a bare CR or LF is an error, never a line end). Blank lines before the
         * request line are skipped (RFC 9112 §2.2). */
        for (; p->scan < len; p->scan++) {
            if (p->scan >= p->lim.max_header_bytes)
                return http__fail(p, 431, "request header section too large");
            unsigned char c = (unsigned char)buf[p->scan];
            if (c == '\n')
                return http__fail(p, 400, "bare LF in the request head (lines must end in CRLF)");
            if (c == 0) return http__fail(p, 400, "NUL byte in the request head");
            if (c != '\r') continue;
            if (p->scan + 1 >= len) return 0;                 /* wait for the byte after CR */
            if (buf[p->scan + 1] != '\n') return http__fail(p, 400, "bare CR in the request head");
            if (p->scan == p->line_start) {
                if (p->line_start == p->start) {              /* blank line before the request */
                    p->start = p->line_start = p->scan + 2;
                    p->scan++;
                    continue;
                }
                p->head_end = p->scan + 2;
                break;
            }
            p->line_start = p->scan + 2;
            p->scan++;
        }
        if (!p->head_end) return 0;
        if (p->head_end > p->lim.max_header_bytes)
            return http__fail(p, 431, "request header section too large");
        int rc = http__parse_head(p, buf);
        if (rc) return rc;
    }
    if (p->phase == HTTP__LENGTH) {
        if (len - p->head_end < p->content_length) return 0;
        p->dst = p->raw = p->head_end + p->content_length;
        p->phase = HTTP__DONE;
    }
    if (p->phase == HTTP__CHUNKED) {
        int rc = http__chunked(p, buf, len);
        if (rc != 1) return rc;
        p->phase = HTTP__DONE;
    }
    http__fill_head(p, buf, req);
    req->body = buf + p->head_end;
    req->body_len = p->dst - p->head_end;
    *consumed = p->raw;
    return 1;
}

int http_parser_head(const HttpParser *p, char *buf, HttpRequest *req) {
    if (p->phase == HTTP__HEAD) return 0;
    http__fill_head(p, buf, req);
    return 1;
}

int http_parser_wants_continue(const HttpParser *p) {
    return p->expect_continue && !p->status &&
           (p->phase == HTTP__LENGTH || p->phase == HTTP__CHUNKED);
}

const char *http_header(const HttpRequest *req, const char *name) {
    for (int i = 0; i < req->nheaders; i++)
        if (strcasecmp(req->headers[i].name, name) == 0) return req->headers[i].value;
    return NULL;
}

/* ---- Helpers ---- */

int http_const_eq(const char *a, size_t a_len, const char *b, size_t b_len) {
    volatile unsigned char diff = (unsigned char)(a_len != b_len);
    for (size_t i = 0; i < b_len; i++)
        diff |= (unsigned char)((i < a_len ? (unsigned char)a[i] : 0) ^ (unsigned char)b[i]);
    return diff == 0;
}

int http_auth_ok(const HttpRequest *req, const char *key) {
    if (!key || !*key) return 1;
    size_t kl = strlen(key);
    int ok = 0;
    const char *a = http_header(req, "authorization");
    if (a && strncasecmp(a, "bearer", 6) == 0 && (a[6] == ' ' || a[6] == '\t')) {
        a += 6;
        while (*a == ' ' || *a == '\t') a++;
        ok |= http_const_eq(a, strlen(a), key, kl);
    }
    const char *x = http_header(req, "x-api-key");
    if (x) ok |= http_const_eq(x, strlen(x), key, kl);
    return ok;
}

const char *http_status_text(int status) {
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return status < 300 ? "OK" : status < 500 ? "Bad Request" : "Internal Server Error";
    }
}

int http_addr_parse(const char *spec, HttpAddr *a, char *err, size_t err_len) {
    memset(a, 0, sizeof *a);
    if (!spec || !*spec) { snprintf(err, err_len, "empty address (want [host:]port)"); return -1; }
    const char *host = "127.0.0.1", *port;
    size_t host_len = strlen(host);
    int bracket = 0;
    if (spec[0] == '[') {
        const char *rb = strchr(spec, ']');
        if (!rb || rb[1] != ':') {
            snprintf(err, err_len, "'%s': want [IPv6]:port", spec);
            return -1;
        }
        host = spec + 1; host_len = (size_t)(rb - host); port = rb + 2; bracket = 1;
    } else {
        const char *colon = strrchr(spec, ':');
        if (colon) {
            host = spec; host_len = (size_t)(colon - spec); port = colon + 1;
            if (memchr(host, ':', host_len)) {
                snprintf(err, err_len, "'%s': an IPv6 address goes in brackets, e.g. [::1]:8080",
                         spec);
                return -1;
            }
        } else port = spec;
    }
    if (!host_len || host_len >= sizeof a->host) {
        snprintf(err, err_len, "'%s': bad host", spec);
        return -1;
    }
    long pn = 0;
    size_t nd = 0;
    for (const char *d = port; *d; d++, nd++) {
        if (*d < '0' || *d > '9' || nd >= 5) { pn = -1; break; }
        pn = pn * 10 + (*d - '0');
    }
    if (!nd || pn < 0 || pn > 65535) {
        snprintf(err, err_len, "'%s': port must be a number 0-65535", spec);
        return -1;
    }
    memcpy(a->host, host, host_len);
    a->host[host_len] = 0;
    a->port = (int)pn;
    const char *numeric = strcmp(a->host, "localhost") == 0 ? "127.0.0.1" : a->host;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&a->ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&a->ss;
    if (!bracket && inet_pton(AF_INET, numeric, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)pn);
        a->sslen = sizeof *v4;
        a->loopback = (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
    } else if (bracket && inet_pton(AF_INET6, numeric, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)pn);
        a->sslen = sizeof *v6;
        const unsigned char *b = v6->sin6_addr.s6_addr;
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        a->loopback =
            IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr) || (memcmp(b, mapped, 12) == 0 && b[12] == 127);
    } else {
        snprintf(err, err_len, "'%s': host must be a numeric IPv4 address, localhost, or [IPv6]",
                 spec);
        return -1;
    }
    return 0;
}

/* ---- Connections and the server ---- */

enum { HC_READ, HC_WRITE, HC_QUEUED, HC_WORKING, HC_RETURNED, HC_LINGER, HC_CLOSED };

typedef struct HttpConn {
    int fd, state;
    char *in; size_t in_len, in_cap;       /* bytes received, starting at the current request */
    HttpParser parser;
    HttpRequest req;
    size_t consumed;                       /* bytes of in[] taken by the current request */
    char *out; size_t out_len, out_off, out_cap;   /* output written by the I/O thread */
    int close_after;                       /* close once out[] is flushed */
    int continue_sent;
    int head_seen;                         /* the head callback and the budget saw this head */
    int served;                            /* requests answered on this connection */
    int eof;                               /* the client shut its sending side */
    int64_t since;                         /* ms, monotonic: ready for the current request */
    int64_t t0;                            /* ms: the current request's first byte (or since) */
    int64_t deadline;                      /* ms, monotonic */
    unsigned char peer[16];                /* the client's address (IPv4 in its first 4 bytes) */
    int peer_len;
    struct HttpConn *next;                 /* queue / returned list */
} HttpConn;

struct HttpServer {
    HttpServerConfig cfg;
    HttpAddr addr;
    int listen_fd, wake_rd, wake_wr;
    int stop_requested;                    /* atomic: set by http_server_stop */
    size_t conn_max_bytes;                 /* input buffer bound per connection */
    pthread_mutex_t mu;                    /* guards everything below */
    pthread_cond_t cv;
    HttpConn *queue_head, *queue_tail;
    int nqueued;
    HttpConn *returned;                    /* handled by the worker, back to the I/O thread */
    int stopping;
    int workers_running;                   /* workers not yet exited (0: all have) */
    int workers_idle;                      /* workers waiting for a request */
    /* I/O thread only */
    HttpConn **conns;
    int nconns;
    size_t buffered;                       /* sum of the connections' in_cap */
};

static int64_t http__now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void http__wake(HttpServer *s) {
    int e = errno;
    ssize_t r = write(s->wake_wr, "x", 1);   /* a full pipe already means "wake up" */
    (void)r;
    errno = e;
}

static int http__stop_requested(HttpServer *s) {
    return __atomic_load_n(&s->stop_requested, __ATOMIC_ACQUIRE);
}

void http_server_stop(HttpServer *s) {
    __atomic_store_n(&s->stop_requested, 1, __ATOMIC_RELEASE);
    http__wake(s);
}

int http_server_port(const HttpServer *s) { return s->addr.port; }
const HttpAddr *http_server_addr(const HttpServer *s) { return &s->addr; }

HttpServer *http_server_create(const HttpServerConfig *cfg, char *err, size_t err_len) {
    HttpServer *s = calloc(1, sizeof *s);
    if (!s) { snprintf(err, err_len, "out of memory"); return NULL; }
    s->listen_fd = s->wake_rd = s->wake_wr = -1;
    s->cfg = *cfg;
    HttpServerConfig *c = &s->cfg;
    if (c->queue < 0) c->queue = 0;
    if (c->workers < 1) c->workers = 1;
    if (c->max_conns <= 0) c->max_conns = c->queue + 16 > 64 ? c->queue + 16 : 64;
    if (c->timeout_ms <= 0) c->timeout_ms = 30000;
    if (c->head_timeout_ms <= 0) c->head_timeout_ms = 10000;
    if (c->head_timeout_ms > c->timeout_ms) c->head_timeout_ms = c->timeout_ms;
    if (c->retry_after_s <= 0) c->retry_after_s = 1;
    HttpParser tmp;
    http_parser_init(&tmp, &c->limits);
    c->limits = tmp.lim;
    /* A chunked body's framing may cost as much again as the body (see http__chunked). */
    s->conn_max_bytes = c->limits.max_header_bytes + 2 * c->limits.max_body_bytes + 65536 + 4096;
    size_t one_request = c->limits.max_header_bytes + c->limits.max_body_bytes + 4096;
    if (!c->max_buffered_bytes) c->max_buffered_bytes = 4 * s->conn_max_bytes;
    if (c->max_buffered_bytes < one_request) c->max_buffered_bytes = one_request;
    if (!c->handle) { snprintf(err, err_len, "no request handler"); free(s); return NULL; }
    if (http_addr_parse(c->listen, &s->addr, err, err_len)) { free(s); return NULL; }
    if (c->max_conns_per_addr <= 0)
        c->max_conns_per_addr = s->addr.loopback ? c->max_conns : (c->max_conns + 1) / 2;
    if (c->max_conns_per_addr > c->max_conns) c->max_conns_per_addr = c->max_conns;
    int fds[2];
    int fd = socket(s->addr.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(fd, (struct sockaddr *)&s->addr.ss, s->addr.sslen) || listen(fd, 128)) {
        snprintf(err, err_len, "%s:%d: %s", s->addr.host, s->addr.port, strerror(errno));
        if (fd >= 0) close(fd);
        free(s);
        return NULL;
    }
    struct sockaddr_storage bound;
    socklen_t bl = sizeof bound;
    if (getsockname(fd, (struct sockaddr *)&bound, &bl) == 0)
        s->addr.port =
            ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                              : ((struct sockaddr_in *)&bound)->sin_port);
    if (pipe(fds)) {
        snprintf(err, err_len, "pipe: %s", strerror(errno));
        close(fd);
        free(s);
        return NULL;
    }
    http__nonblock_cloexec(fds[0]);
    http__nonblock_cloexec(fds[1]);
    s->listen_fd = fd;
    s->wake_rd = fds[0];
    s->wake_wr = fds[1];
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->conns = calloc((size_t)c->max_conns, sizeof *s->conns);
    if (!s->conns) { snprintf(err, err_len, "out of memory"); http_server_free(s); return NULL; }
    return s;
}

static void http__conn_free(HttpServer *s, HttpConn *c) {
    if (!c) return;
    s->buffered -= c->in_cap;
    if (c->fd >= 0) close(c->fd);
    free(c->in);
    free(c->out);
    free(c);
}

void http_server_free(HttpServer *s) {
    if (!s) return;
    for (int i = 0; i < s->nconns; i++) http__conn_free(s, s->conns[i]);
    free(s->conns);
    if (s->listen_fd >= 0) close(s->listen_fd);
    if (s->wake_rd >= 0) {
        close(s->wake_rd);
        close(s->wake_wr);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
    }
    free(s);
}

/* ---- Writing ---- */

static int http__out_append(HttpConn *c, const char *data, size_t n) {
    if (c->out_cap - c->out_len < n) {
        size_t cap = c->out_cap ? c->out_cap : 4096;
        while (cap - c->out_len < n) cap *= 2;
        char *o = realloc(c->out, cap);
        if (!o) return -1;
        c->out = o; c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, data, n);
    c->out_len += n;
    return 0;
}

/* Once a stop is requested, a write on the worker may stall this long: a client that stopped
 * reading must not hold up the shutdown. */
#define HTTP__STOP_WRITE_MS 500

/* Writes every byte of iov on the worker's side; a write that makes no progress for timeout_ms
 * fails, so a client that stops reading cannot hold the worker. The wait is polled in short
 * slices because a stop (a flag, maybe set by a signal on another thread) shortens it.
 * MSG_NOSIGNAL: no SIGPIPE. */
static int http__sendv(HttpResponse *res, struct iovec *iov, int n) {
    while (n > 0 && !iov->iov_len) { iov++; n--; }
    int64_t deadline = http__now_ms() + res->timeout_ms;
    while (n > 0) {
        struct msghdr m;
        memset(&m, 0, sizeof m);
        m.msg_iov = iov;
        m.msg_iovlen = (size_t)n;
        ssize_t w = sendmsg(res->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) return res->failed = 1, -1;
            int64_t now = http__now_ms();
            if (res->srv && http__stop_requested(res->srv) && deadline > now + HTTP__STOP_WRITE_MS)
                deadline = now + HTTP__STOP_WRITE_MS;
            if (now >= deadline) return res->failed = 1, -1;
            struct pollfd pf = {res->fd, POLLOUT, 0};
            int pr = poll(&pf, 1, deadline - now < 50 ? (int)(deadline - now) : 50);
            if (pr < 0 && errno != EINTR) return res->failed = 1, -1;
            if (pr > 0 && (pf.revents & (POLLERR | POLLHUP | POLLNVAL))) return res->failed = 1, -1;
            continue;
        }
        deadline = http__now_ms() + res->timeout_ms;      /* progress: the stall clock restarts */
        size_t left = (size_t)w;
        while (n > 0 && left >= iov->iov_len) { left -= iov->iov_len; iov++; n--; }
        if (n > 0) { iov->iov_base = (char *)iov->iov_base + left; iov->iov_len -= left; }
        while (n > 0 && !iov->iov_len) { iov++; n--; }
    }
    return 0;
}

/* Output of a response: on the I/O thread into the connection's buffer, on the worker to the
   socket. */
static int http__emit(HttpResponse *res, struct iovec *iov, int n) {
    if (res->failed) return -1;
    if (!res->conn) return http__sendv(res, iov, n);
    for (int i = 0; i < n; i++)
        if (http__out_append(res->conn, iov[i].iov_base, iov[i].iov_len))
            return res->failed = 1, -1;
    return 0;
}

int http_add_header(HttpResponse *res, const char *name, const char *value) {
    if (res->state) return -1;
    size_t nl = strlen(name), vl = strlen(value);
    for (size_t i = 0; i < nl; i++) if (!http__tchar((unsigned char)name[i])) return -1;
    for (size_t i = 0; i < vl; i++)
        if ((unsigned char)value[i] < 0x20 && value[i] != '\t') return -1;
    if (!nl || nl + vl + 4 >= sizeof res->extra - res->extra_len) return -1;
    res->extra_len += (size_t)snprintf(
        res->extra + res->extra_len, sizeof res->extra - res->extra_len, "%s: %s\r\n", name, value);
    return 0;
}

/* Status line and headers; body_len < 0: no Content-Length (a stream). */
static size_t http__head(HttpResponse *res, char *dst, size_t cap, int status, const char *ctype,
                         long long body_len) {
    int n = snprintf(dst, cap, "HTTP/1.1 %d %s\r\n", status, http_status_text(status));
    if (ctype) n += snprintf(dst + n, cap - (size_t)n, "Content-Type: %s\r\n", ctype);
    if (body_len >= 0)
        n += snprintf(dst + n, cap - (size_t)n, "Content-Length: %lld\r\n", body_len);
    else if (res->chunked)
        n += snprintf(dst + n, cap - (size_t)n, "Transfer-Encoding: chunked\r\n");
    n += snprintf(dst + n, cap - (size_t)n, "Connection: %s\r\n%.*s\r\n",
                  res->keep_alive ? "keep-alive" : "close", (int)res->extra_len, res->extra);
    return (size_t)n < cap ? (size_t)n : cap - 1;
}

int http_respond(HttpResponse *res, int status, const char *content_type, const char *body,
                 size_t len) {
    if (res->state || res->failed || (!body && len)) return -1;
    char head[1536];
    struct iovec iov[2] = { { head, http__head(res, head, sizeof head, status, content_type,
                                               (long long)len) },
                            { (void *)body, res->head_only ? 0 : len } };
    res->state = 1;
    return http__emit(res, iov, 2);
}

int http_respond_json(HttpResponse *res, int status, const char *json, size_t len) {
    return http_respond(res, status, "application/json", json, len);
}

int http_respond_error(HttpResponse *res, int status, const char *message) {
    return http_respond_error_ex(res, status, message, NULL, NULL);
}

int http_respond_error_ex(HttpResponse *res, int status, const char *message, const char *param,
                          const char *code) {
    const char *type = status == 401 ? "authentication_error" : status == 403 ? "permission_error"
                     : status == 404 ? "not_found_error" : status == 429 ? "rate_limit_error"
                     : status >= 500 ? "server_error" : "invalid_request_error";
    JsonWriter w;
    jw_init(&w);
    jw_obj(&w);
    jw_key(&w, "error");
    jw_obj(&w);
    jw_kstr(&w, "message", message ? message : http_status_text(status));
    jw_kstr(&w, "type", type);
    jw_key(&w, "param");
    if (param) jw_str(&w, param); else jw_null(&w);
    jw_key(&w, "code");
    if (code) jw_str(&w, code); else jw_null(&w);
    jw_obj_end(&w);
    jw_obj_end(&w);
    size_t n;
    const char *t = jw_text(&w, &n);
    int rc = t ? http_respond_json(res, status, t, n) : -1;
    jw_free(&w);
    return rc;
}

int http_stream_begin(HttpResponse *res, const char *content_type) {
    if (res->state || res->failed || res->conn) return -1;    /* streams belong to the worker */
    res->chunked = res->minor >= 1;
    /* HTTP/1.0: the close ends the body */
    if (!res->chunked) res->keep_alive = 0;
    if (http_add_header(res, "Cache-Control", "no-cache") ||
        http_add_header(res, "X-Accel-Buffering", "no"))
        return -1;
    char head[1536];
    struct iovec iov = {head, http__head(res, head, sizeof head, 200, content_type, -1)};
    res->state = 2;
    return http__emit(res, &iov, 1);
}

int http_sse_begin(HttpResponse *res) { return http_stream_begin(res, "text/event-stream"); }

/* One piece in one write (one chunk), so it leaves as soon as it is made. */
int http_stream_write(HttpResponse *res, const char *data, size_t len) {
    if (res->state != 2 || res->failed || (!data && len)) return -1;
    if (!len) return 0;                                       /* a zero chunk would end the body */
    char frame[24];
    size_t f = res->chunked ? (size_t)snprintf(frame, sizeof frame, "%zx\r\n", len) : 0;
    struct iovec iov[3] = {{frame, f}, {(void *)data, len}, {"\r\n", res->chunked ? 2 : 0}};
    return http__emit(res, iov, 3);
}

int http_stream_end(HttpResponse *res) {
    if (res->state != 2 || res->failed) return -1;
    res->state = 1;
    if (!res->chunked) return 0;
    struct iovec iov = {"0\r\n\r\n", 5};
    return http__emit(res, &iov, 1);
}

/* Writes data as SSE "data:" lines (CR, LF and CRLF all break lines, as SSE readers see them) and
 * the blank line that ends the event; returns the bytes written, or only counts them if dst is NULL. */
static size_t http__sse_lines(char *dst, const char *data, size_t len) {
    size_t n = 0;
    for (size_t i = 0;;) {
        size_t j = i;
        while (j < len && data[j] != '\n' && data[j] != '\r') j++;
        if (dst) {
            memcpy(dst + n, "data: ", 6);
            memcpy(dst + n + 6, data + i, j - i);
            dst[n + 6 + j - i] = '\n';
        }
        n += 7 + (j - i);
        if (j == len) break;
        i = j + 1 + (data[j] == '\r' && j + 1 < len && data[j + 1] == '\n');
    }
    if (dst) dst[n] = '\n';
    return n + 1;
}

/* One event in one write, so each event leaves as soon as it is made. */
int http_sse_event(HttpResponse *res, const char *data, size_t len) {
    if (res->state != 2 || res->failed || (!data && len)) return -1;
    size_t payload = http__sse_lines(NULL, data ? data : "", len);
    char *buf = malloc(payload + 32);
    if (!buf) return res->failed = 1, -1;
    size_t n = res->chunked ? (size_t)snprintf(buf, 32, "%zx\r\n", payload) : 0;
    n += http__sse_lines(buf + n, data ? data : "", len);
    if (res->chunked) { buf[n++] = '\r'; buf[n++] = '\n'; }
    struct iovec iov = {buf, n};
    int rc = http__emit(res, &iov, 1);
    free(buf);
    return rc;
}

int http_sse_end(HttpResponse *res) {
    if (http_sse_event(res, "[DONE]", 6)) return -1;
    res->state = 1;
    if (!res->chunked) return 0;
    struct iovec iov = {"0\r\n\r\n", 5};
    return http__emit(res, &iov, 1);
}

int http_client_gone(HttpResponse *res) {
    if (res->failed) return 1;
    if (res->srv && http__stop_requested(res->srv)) return 1;
    if (res->conn || res->fd < 0) return 0;
    struct pollfd pf = {res->fd, POLLIN | POLLRDHUP, 0};
    if (poll(&pf, 1, 0) > 0) {
        if (pf.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return res->failed = 1;
        char b;
        /* Readable without RDHUP: either pipelined bytes (still here) or EOF (gone). */
        if (recv(res->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0) return res->failed = 1;
    }
    return 0;
}

/* ---- The I/O thread ---- */

static void http__response_init(HttpResponse *res, HttpServer *s, HttpConn *c, int on_io_thread) {
    memset(res, 0, sizeof *res);
    res->srv = s;
    res->conn = on_io_thread ? c : NULL;
    res->fd = c->fd;
    res->minor = c->req.minor;
    res->keep_alive = c->req.keep_alive && !c->eof && !http__stop_requested(s);
    res->head_only = c->req.method && strcmp(c->req.method, "HEAD") == 0;
    res->timeout_ms = s->cfg.timeout_ms;
}

/* The log line of a request that http.h ends itself (the callbacks log the answers they give):
 * method and path once the head is known ("-" before), status, why, seconds from the first byte. */
static void http__log(HttpServer *s, HttpConn *c, int status, const char *why) {
    if (!s->cfg.log) return;
    HttpRequest head;
    const HttpRequest *req = &c->req;
    if (!c->req.method) {
        req = &head;
        if (!http_parser_head(&c->parser, c->in, &head)) {
            memset(&head, 0, sizeof head);
            head.method = head.path = "-";
            head.query = "";
        }
    }
    s->cfg.log(req, status, (double)(http__now_ms() - c->t0) / 1000.0, why, s->cfg.user);
}

static const char http__lost[] = "connection lost before the request was complete";
static const char http__cut_off[] = "client closed the connection before the request was complete";

/* Closes a connection without an answer; a request that had begun to arrive is logged. */
static void http__drop(HttpServer *s, HttpConn *c, int status, const char *why) {
    if (c->state == HC_READ && c->in_len) http__log(s, c, status, why);
    c->state = HC_CLOSED;
}

/* Sends what is buffered without blocking; -1 on a dead connection. */
static int http__flush(HttpServer *s, HttpConn *c) {
    while (c->out_off < c->out_len) {
        ssize_t w =
            send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
            return -1;
        }
        c->out_off += (size_t)w;
        /* progress: the stall clock restarts */
        c->deadline = http__now_ms() + s->cfg.timeout_ms;
    }
    c->out_off = c->out_len = 0;
    return 0;
}

/* After an error or a "Connection: close" response: stop sending, then read and discard what the
 * client still sends for a moment before closing, so the kernel does not answer unread bytes with
 * a reset that could destroy the response before the client reads it. */
static void http__linger(HttpConn *c) {
    shutdown(c->fd, SHUT_WR);
    c->state = HC_LINGER;
    c->deadline = http__now_ms() + 2000;
}

static void http__begin_request(HttpServer *s, HttpConn *c) {
    if (c->consumed) {
        memmove(c->in, c->in + c->consumed, c->in_len - c->consumed);
        c->in_len -= c->consumed;
        c->consumed = 0;
    }
    /* One big request must not pin megabytes to a connection for its whole keep-alive life. */
    if (c->in_cap > (64u << 10) && c->in_len <= (16u << 10)) {
        char *n = realloc(c->in, 16u << 10);
        if (n) { s->buffered -= c->in_cap - (16u << 10); c->in = n; c->in_cap = 16u << 10; }
    }
    http_parser_init(&c->parser, &s->cfg.limits);
    memset(&c->req, 0, sizeof c->req);
    c->continue_sent = c->head_seen = 0;
    c->state = HC_READ;
    c->since = c->t0 = http__now_ms();
    c->deadline = c->since + s->cfg.head_timeout_ms;
}

/* A response was written into out[]: send it; the connection then reads the next request, or
 * closes. */
static void http__output_done(HttpServer *s, HttpConn *c) {
    c->served = 1;
    if (c->close_after) http__linger(c);
    else http__begin_request(s, c);
}

static void http__after_response(HttpServer *s, HttpConn *c, int keep_alive) {
    c->close_after = !keep_alive;
    c->state = HC_WRITE;
    c->deadline = http__now_ms() + s->cfg.timeout_ms;
    if (http__flush(s, c)) c->state = HC_CLOSED;
    else if (c->out_len == 0) http__output_done(s, c);
}

/* An error answer from http.h itself (logged); the connection closes after it. */
static void http__error(HttpServer *s, HttpConn *c, int status, const char *why) {
    HttpResponse res;
    http__response_init(&res, s, c, 1);
    res.keep_alive = 0;
    res.head_only = 0;
    if (status == 429 || status == 503) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", s->cfg.retry_after_s);
        http_add_header(&res, "Retry-After", ra);
    }
    http__log(s, c, status, why);
    http_respond_error(&res, status, why);
    http__after_response(s, c, 0);
}

static const char http__busy_buffers[] =
    "the server is busy: too much request data in flight; retry later";

/* The head is in and the body is still to come. cfg->head may answer now (a wrong API key), and
 * a body the buffer budget cannot hold is refused, both before the client sends it. Returns 1 when
 * the request was answered: the connection then closes without reading the body. */
static int http__check_head(HttpServer *s, HttpConn *c) {
    if (s->cfg.head) {
        HttpRequest req;
        http_parser_head(&c->parser, c->in, &req);
        HttpResponse res;
        http__response_init(&res, s, c, 1);
        res.minor = req.minor;
        res.keep_alive = 0;
        res.head_only = strcmp(req.method, "HEAD") == 0;
        if (s->cfg.head(&req, &res, s->cfg.user)) {
            if (!res.state) {
                http__log(s, c, 500, "the server sent no response");
                http_respond_error(&res, 500, "the server sent no response");
            }
            if (res.failed) c->state = HC_CLOSED;
            else http__after_response(s, c, 0);
            return 1;
        }
    }
    /* A body of known length takes its share of the budget now, whole: what is promised to
     * requests already accepted never exceeds the budget. head_end + content_length is within the
     * head and body limits: no overflow. */
    size_t need = c->parser.head_end + c->parser.content_length;
    if (c->parser.chunked || need <= c->in_cap) return 0;
    if (s->buffered - c->in_cap + need > s->cfg.max_buffered_bytes) {
        http__error(s, c, 503, http__busy_buffers);
        return 1;
    }
    char *n = realloc(c->in, need);
    if (!n) { http__error(s, c, 503, "out of memory"); return 1; }
    s->buffered += need - c->in_cap;
    c->in = n;
    c->in_cap = need;
    return 0;
}

/* Parses what has arrived and acts on complete requests, until more input is needed, output is
 * pending, or the connection left the I/O thread. Returns 1 when it waits for input here (state
 * HC_READ); 0 otherwise, and then a queued connection's state belongs to the worker: not read. */
static int http__advance(HttpServer *s, HttpConn *c) {
    while (c->state == HC_READ) {
        int rc = http_parse(&c->parser, c->in, c->in_len, &c->req, &c->consumed);
        if (c->parser.phase != HTTP__HEAD && !c->head_seen) {
            c->head_seen = 1;
            c->deadline = c->since + s->cfg.timeout_ms;   /* the head was in time; now the body */
            if (rc == 0 && http__check_head(s, c)) return 0;
        }
        if (rc == 0) {
            if (http_parser_wants_continue(&c->parser) && !c->continue_sent) {
                c->continue_sent = 1;
                static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
                if (http__out_append(c, cont, sizeof cont - 1) || http__flush(s, c))
                    http__drop(s, c, 499, http__lost);
            }
            return c->state == HC_READ;
        }
        if (rc != 1) { http__error(s, c, rc, c->parser.error); return 0; }
        HttpResponse res;
        http__response_init(&res, s, c, 1);
        if (http__stop_requested(s)) {
            http__error(s, c, 503, "server is shutting down");
            return 0;
        }
        if (s->cfg.quick && s->cfg.quick(&c->req, &res, s->cfg.user)) {
            if (!res.state) {
                http__log(s, c, 500, "the server sent no response");
                http_respond_error(&res, 500, "the server sent no response");
            }
            if (res.failed) { c->state = HC_CLOSED; return 0; }
            http__after_response(s, c, res.keep_alive);
            continue;
        }
        if (c->eof) {
            /* Whoever shut their sending side counts as gone (as in the queue, on the worker). */
            http__log(s, c, 499, "client closed the connection before the answer");
            c->state = HC_CLOSED;
            return 0;
        }
        if (c->out_off < c->out_len) {
            /* A "100 Continue" not yet sent although the body came: the worker must not write
             * while the I/O thread still does. Unstarted, it is moot now; half sent, the
             * connection cannot go on. */
            if (c->out_off) { http__drop(s, c, 499, http__lost); return 0; }
            c->out_len = 0;
        }
        pthread_mutex_lock(&s->mu);
        /* an idle worker takes a request at once: it does not wait (QUEUE=0 still serves) */
        int full = s->nqueued >= s->cfg.queue + s->workers_idle;
        if (!full) {
            c->state = HC_QUEUED;
            c->next = NULL;
            if (s->queue_tail) s->queue_tail->next = c; else s->queue_head = c;
            s->queue_tail = c;
            s->nqueued++;
            pthread_cond_signal(&s->cv);
        }
        pthread_mutex_unlock(&s->mu);
        if (!full) return 0;
        /* The request was read completely, so the connection can stay open after a 429. */
        http__response_init(&res, s, c, 1);
        char ra[16];
        snprintf(ra, sizeof ra, "%d", s->cfg.retry_after_s);
        http_add_header(&res, "Retry-After", ra);
        static const char busy[] = "the server is busy: too many requests waiting; retry later";
        http__log(s, c, 429, busy);
        http_respond_error(&res, 429, busy);
        if (res.failed) { c->state = HC_CLOSED; return 0; }
        http__after_response(s, c, res.keep_alive);
    }
    return 0;
}

/* Reads and parses; what is read is parsed before more is read, so that a head is checked before
 * its body is taken in. */
static void http__on_readable(HttpServer *s, HttpConn *c) {
    for (;;) {
        /* A body of known length has its room already (http__check_head): the next request waits
         * in the socket. */
        int sized = c->head_seen && !c->parser.chunked;
        if (c->in_cap - c->in_len < 4096 && c->in_cap < s->conn_max_bytes && !sized) {
            size_t cap = c->in_cap ? c->in_cap * 2 : 8192;
            if (cap > s->conn_max_bytes) cap = s->conn_max_bytes;
            if (cap > c->in_cap) {
                if (s->buffered - c->in_cap + cap > s->cfg.max_buffered_bytes) {
                    http__error(s, c, 503, http__busy_buffers);
                    return;
                }
                char *n = realloc(c->in, cap);
                if (!n) { http__error(s, c, 503, "out of memory"); return; }
                s->buffered += cap - c->in_cap;
                c->in = n; c->in_cap = cap;
            }
        }
        if (c->in_len == c->in_cap) { http__error(s, c, 413, "request too large"); return; }
        ssize_t r = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, MSG_DONTWAIT);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (r == 0) {
            /* A complete request already here is still answered if the I/O thread can. */
            c->eof = 1;
            if (http__advance(s, c)) http__drop(s, c, 499, http__cut_off);
            return;
        }
        if (r < 0) { http__drop(s, c, 499, http__lost); return; }
        if (!c->in_len) c->t0 = http__now_ms();
        c->in_len += (size_t)r;
        int filled = c->in_len == c->in_cap;
        if (!http__advance(s, c) || !filled) return;   /* gone from HC_READ, or drained for now */
    }
}

/* ---- Admission ---- */

/* The client's address as a key: IPv4 (also IPv4-mapped IPv6) in 4 bytes, IPv6 in 16. */
static void http__set_peer(HttpConn *c, const struct sockaddr_storage *ss) {
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    const unsigned char *b = ((const struct sockaddr_in6 *)ss)->sin6_addr.s6_addr;
    if (ss->ss_family == AF_INET) {
        memcpy(c->peer, &((const struct sockaddr_in *)ss)->sin_addr, 4);
        c->peer_len = 4;
    } else if (ss->ss_family == AF_INET6 && memcmp(b, mapped, 12) == 0) {
        memcpy(c->peer, b + 12, 4);
        c->peer_len = 4;
    } else if (ss->ss_family == AF_INET6) {
        memcpy(c->peer, b, 16);
        c->peer_len = 16;
    }
}

static int http__same_peer(const HttpConn *a, const HttpConn *b) {
    return a->peer_len == b->peer_len && memcmp(a->peer, b->peer, (size_t)a->peer_len) == 0;
}

/* How readily a connection gives way to a new one: 0 closing already, 1 idle between keep-alive
 * requests, 2 waiting for (the rest of) a request head; -1 busy with a request. */
static int http__rank(const HttpConn *c) {
    if (c->state == HC_LINGER) return 0;
    if (c->state != HC_READ || c->out_len || c->parser.phase != HTTP__HEAD) return -1;
    return c->served && !c->in_len ? 1 : 2;
}

/* The connection to close so that a new one can be admitted (from the same address as like, if
 * given): lowest rank first, then the oldest. NULL when every candidate is busy with a request. */
static int http__victim(HttpServer *s, const HttpConn *like) {
    int best = -1, best_rank = 3;
    pthread_mutex_lock(&s->mu);                 /* the worker writes the state of those it holds */
    for (int i = 0; i < s->nconns; i++) {
        HttpConn *c = s->conns[i];
        if (like && !http__same_peer(c, like)) continue;
        int r = http__rank(c);
        if (r >= 0 && (r < best_rank || (r == best_rank && c->since < s->conns[best]->since))) {
            best = i;
            best_rank = r;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return best;
}

/* A best-effort 503 to a connection about to be closed (nothing waits for the write). message:
 * plain text without quotes or backslashes. */
static void http__send_503(int fd, const char *message) {
    char body[256], busy[512];
    int bn = snprintf(body, sizeof body, "{\"error\":{\"message\":\"%s\",\"type\":\"server_error\","
                      "\"param\":null,\"code\":null}}", message);
    if (bn < 0 || (size_t)bn >= sizeof body) return;
    int n = snprintf(busy, sizeof busy, "HTTP/1.1 503 Service Unavailable\r\n"
                     "Content-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\n"
                     "Content-Length: %d\r\n\r\n%s", bn, body);
    if (n > 0 && (size_t)n < sizeof busy) {
        ssize_t w = send(fd, busy, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
    }
}

/* Closes conns[i] to make room; only between polls (no pollfd refers to it then). */
static void http__evict(HttpServer *s, int i) {
    HttpConn *c = s->conns[i];
    if (c->state == HC_READ && c->in_len) {
        static const char why[] = "unfinished request closed to admit another connection";
        http__log(s, c, 503, why);
        http__send_503(c->fd, why);
    }
    s->conns[i] = s->conns[--s->nconns];
    http__conn_free(s, c);
}

/* Accepts waiting connections. At a limit (all connections, or those of one address) the new one
 * takes the place of a connection that is closing, idle, or still sending a head; only when
 * every one is busy with a request is the new one refused (503). So idle or slow clients, however
 * many, cannot lock others out. Runs between polls: evicted connections are freed at once. */
static void http__accept(HttpServer *s, int64_t *accept_paused_until) {
    for (int k = 0; k < 64; k++) {             /* then poll again: others' turn */
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        memset(&ss, 0, sizeof ss);
        int fd = accept(s->listen_fd, (struct sockaddr *)&ss, &sl);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            /* Out of descriptors: pause accepting instead of spinning on a readable listener. */
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                *accept_paused_until = http__now_ms() + 100;
            return;
        }
        if (http__nonblock_cloexec(fd)) { close(fd); continue; }
        int one = 1;
        /* each SSE event goes out now */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        HttpConn *c = calloc(1, sizeof *c);
        if (!c) { http__send_503(fd, "out of memory"); close(fd); continue; }
        c->fd = fd;
        http__set_peer(c, &ss);
        int same = 0;
        for (int i = 0; i < s->nconns; i++) same += http__same_peer(s->conns[i], c);
        int victim = -2;
        if (same >= s->cfg.max_conns_per_addr) victim = http__victim(s, c);
        else if (s->nconns >= s->cfg.max_conns) victim = http__victim(s, NULL);
        if (victim == -1) {
            http__send_503(fd, same >= s->cfg.max_conns_per_addr
                                   ? "too many open connections from this address"
                                   : "too many open connections");
            http__conn_free(s, c);
            continue;
        }
        if (victim >= 0) http__evict(s, victim);
        s->conns[s->nconns++] = c;
        http__begin_request(s, c);
    }
}

/* The worker handed a connection back: next request, or close. */
static void http__on_returned(HttpServer *s, HttpConn *c) {
    c->served = 1;
    if (c->close_after || http__stop_requested(s)) { http__linger(c); return; }
    http__begin_request(s, c);
    http__advance(s, c);
}

static void http__begin_stop(HttpServer *s) {
    close(s->listen_fd);
    s->listen_fd = -1;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    HttpConn *waiting = s->queue_head;
    s->queue_head = s->queue_tail = NULL;
    s->nqueued = 0;
    pthread_cond_broadcast(&s->cv);
    for (int i = 0; i < s->nconns; i++)
        if (s->conns[i]->state == HC_READ)
            http__drop(s, s->conns[i], 503, "server stopped before the request was complete");
    pthread_mutex_unlock(&s->mu);
    for (HttpConn *c = waiting, *next; c; c = next) {
        next = c->next;
        http__error(s, c, 503, "server is shutting down");
    }
}

/* Once a stop is requested, output still pending is flushed for this long. */
#define HTTP__STOP_FLUSH_MS 1000

static void *http__io_main(void *arg) {
    HttpServer *s = arg;
    struct pollfd *pfd = malloc(((size_t)s->cfg.max_conns + 2) * sizeof *pfd);
    HttpConn **polled = malloc(((size_t)s->cfg.max_conns + 2) * sizeof *polled);
    int stop_seen = 0;
    int64_t stop_deadline = 0, accept_paused_until = 0;
    if (!pfd || !polled) http_server_stop(s);
    while (pfd && polled) {
        int64_t now = http__now_ms();
        if (http__stop_requested(s) && !stop_seen) {
            stop_seen = 1;
            stop_deadline = now + HTTP__STOP_FLUSH_MS;
            http__begin_stop(s);
        }
        int n = 0;
        pfd[n++] = (struct pollfd){s->wake_rd, POLLIN, 0};
        int listen_slot = -1;
        if (!stop_seen && now >= accept_paused_until) {
            listen_slot = n;
            pfd[n++] = (struct pollfd){ s->listen_fd, POLLIN, 0 };
        }
        int64_t next_deadline = now + 1000;
        int pending = 0;                               /* output not yet sent */
        pthread_mutex_lock(&s->mu);
        int worker_exited = s->workers_running == 0;
        for (int i = 0; i < s->nconns; i++) {
            HttpConn *c = s->conns[i];
            short ev = 0;
            if (c->state == HC_READ) ev = POLLIN;
            else if (c->state == HC_LINGER) ev = POLLIN;
            else if (c->state == HC_QUEUED) ev = POLLRDHUP;
            if (c->out_off < c->out_len) { ev |= POLLOUT; pending = 1; }
            if (c->state == HC_READ || c->state == HC_WRITE || c->state == HC_LINGER)
                if (c->deadline < next_deadline) next_deadline = c->deadline;
            if (!ev) continue;
            pfd[n] = (struct pollfd){c->fd, ev, 0};
            polled[n] = c;
            n++;
        }
        pthread_mutex_unlock(&s->mu);
        /* Stopping: wait for the worker (its handler sees http_client_gone, and its writes give
         * up soon), then flush what is pending for a moment. */
        if (stop_seen && worker_exited && (!pending || now >= stop_deadline)) break;
        int timeout = next_deadline > now ? (int)(next_deadline - now) : 0;
        if (stop_seen && timeout > 50) timeout = 50;
        if (poll(pfd, (nfds_t)n, timeout) < 0 && errno != EINTR) { http_server_stop(s); continue; }
        now = http__now_ms();
        if (pfd[0].revents & POLLIN) {
            char drain[64];
            while (read(s->wake_rd, drain, sizeof drain) > 0) {}
        }
        pthread_mutex_lock(&s->mu);
        HttpConn *back = s->returned;
        s->returned = NULL;
        pthread_mutex_unlock(&s->mu);
        for (HttpConn *c = back, *next; c; c = next) { next = c->next; http__on_returned(s, c); }
        for (int i = listen_slot >= 0 ? 2 : 1; i < n; i++) {
            HttpConn *c = polled[i];
            short re = pfd[i].revents;
            if (!re) continue;
            if (pfd[i].events == POLLRDHUP) {
                /* Polled while waiting in the queue and the client hung up: take it out (unless the
                 * worker took it meanwhile; the state is only trusted under the lock). */
                pthread_mutex_lock(&s->mu);
                int left = c->state == HC_QUEUED;
                if (left) {
                    HttpConn **pp = &s->queue_head, *prev = NULL;
                    while (*pp && *pp != c) { prev = *pp; pp = &(*pp)->next; }
                    if (*pp) {
                        *pp = c->next;
                        if (s->queue_tail == c) s->queue_tail = prev;
                        s->nqueued--;
                    }
                    c->state = HC_CLOSED;
                }
                pthread_mutex_unlock(&s->mu);
                if (left) http__log(s, c, 499, "client closed the connection while queued");
                continue;
            }
            if (re & (POLLERR | POLLNVAL)) { http__drop(s, c, 499, http__lost); continue; }
            if ((re & POLLOUT) && http__flush(s, c)) {
                http__drop(s, c, 499, http__lost);
                continue;
            }
            if (c->state == HC_WRITE && c->out_len == 0) {
                http__output_done(s, c);
                /* A pipelined request may be waiting; if it was queued, c is the worker's now. */
                if (c->state == HC_READ && !http__advance(s, c)) continue;
            }
            if (c->state == HC_READ && (re & (POLLIN | POLLHUP))) http__on_readable(s, c);
            else if (c->state == HC_LINGER && (re & (POLLIN | POLLHUP))) {
                char sink[4096];
                ssize_t r;
                while ((r = recv(c->fd, sink, sizeof sink, MSG_DONTWAIT)) > 0) {}
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                    c->state = HC_CLOSED;
            }
        }
        /* Deadlines; then drop closed connections. Under the lock: the worker writes the state of
         * the connections it holds. */
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < s->nconns; i++) {
            HttpConn *c = s->conns[i];
            if (c->deadline > now) continue;
            if (c->state == HC_READ && c->out_len == 0) {
                if (c->in_len == 0) c->state = HC_CLOSED;    /* idle keep-alive connection */
                else {
                    char why[96];
                    if (c->head_seen)
                        snprintf(why, sizeof why, "request not received within %d ms",
                                 s->cfg.timeout_ms);
                    else
                        snprintf(why, sizeof why, "request head not received within %d ms",
                                 s->cfg.head_timeout_ms);
                    http__error(s, c, 408, why);
                }
            } else if (c->state == HC_READ) {
                http__drop(s, c, 408, "request not received in time");
            } else if (c->state == HC_WRITE || c->state == HC_LINGER) {
                c->state = HC_CLOSED;
            }
        }
        int kept = 0;
        for (int i = 0; i < s->nconns; i++) {
            if (s->conns[i]->state == HC_CLOSED) http__conn_free(s, s->conns[i]);
            else s->conns[kept++] = s->conns[i];
        }
        s->nconns = kept;
        pthread_mutex_unlock(&s->mu);
        /* New connections last: admitting one may close another, which no pollfd names now. */
        if (listen_slot >= 0 && (pfd[listen_slot].revents & POLLIN))
            http__accept(s, &accept_paused_until);
    }
    free(pfd);
    free(polled);
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- The worker (the caller's thread) ---- */

static HttpServer *volatile http__signal_server;
static void http__on_signal(int sig) {
    (void)sig;
    HttpServer *s = http__signal_server;
    if (s) http_server_stop(s);
}

static void *http__worker_main(void *arg);

int http_server_run(HttpServer *s) {
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = http__on_signal;
    sigemptyset(&sa.sa_mask);
    http__signal_server = s;
    /* SIGTERM always stops cleanly: service managers and timeout(1) may send it twice (to the
     * process and to its group). A second Ctrl-C (SIGINT) kills at once, as a person expects. */
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, &old_term);
    sa.sa_flags = SA_RESTART | SA_RESETHAND;
    sigaction(SIGINT, &sa, &old_int);
    pthread_t io;
    s->workers_running = 1;                     /* the caller's thread */
    if (pthread_create(&io, NULL, http__io_main, s)) {
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
        http__signal_server = NULL;
        return -1;
    }
    int extra = 0;
    pthread_t *more = s->cfg.workers > 1 ? calloc((size_t)s->cfg.workers - 1, sizeof *more) : NULL;
    for (int i = 0; more && i < s->cfg.workers - 1; i++) {
        pthread_mutex_lock(&s->mu);
        s->workers_running++;
        pthread_mutex_unlock(&s->mu);
        if (pthread_create(&more[extra], NULL, http__worker_main, s)) {
            pthread_mutex_lock(&s->mu);
            s->workers_running--;
            pthread_mutex_unlock(&s->mu);
            break;
        }
        extra++;
    }
    http__worker_main(s);
    for (int i = 0; i < extra; i++) pthread_join(more[i], NULL);
    free(more);
    pthread_join(io, NULL);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    http__signal_server = NULL;
    return 0;
}

/* One worker: queued requests, one at a time, until the server stops. */
static void *http__worker_main(void *arg) {
    HttpServer *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        s->workers_idle++;
        while (!s->queue_head && !s->stopping) pthread_cond_wait(&s->cv, &s->mu);
        s->workers_idle--;
        HttpConn *c = s->queue_head;
        if (!c) {
            s->workers_running--;
            pthread_mutex_unlock(&s->mu);
            http__wake(s);
            break;
        }
        s->queue_head = c->next;
        if (!s->queue_head) s->queue_tail = NULL;
        s->nqueued--;
        c->state = HC_WORKING;
        pthread_mutex_unlock(&s->mu);

        HttpResponse res;
        http__response_init(&res, s, c, 0);
        if (!http_client_gone(&res)) s->cfg.handle(&c->req, &res, s->cfg.user);
        else if (http__stop_requested(s)) {
            /* still queued when a stop began: the answer the I/O thread gives the others waiting */
            http__log(s, c, 503, "server is shutting down");
            http_respond_error(&res, 503, "server is shutting down");
        } else http__log(s, c, 499, "client closed the connection while queued");
        if (!res.state && !res.failed) {
            http__log(s, c, 500, "the server sent no response");
            http_respond_error(&res, 500, "the server sent no response");
        }
        /* an unfinished stream: close */
        int keep = res.state == 1 && !res.failed && res.keep_alive;

        pthread_mutex_lock(&s->mu);
        c->close_after = !keep;
        c->state = HC_RETURNED;
        c->next = s->returned;
        s->returned = c;
        pthread_mutex_unlock(&s->mu);
        http__wake(s);
    }
    return NULL;
}

#endif /* HTTP_IMPLEMENTATION_DONE */
#endif /* HTTP_IMPLEMENTATION */

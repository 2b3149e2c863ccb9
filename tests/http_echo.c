/* http_echo: a test server built on http.h alone, with fake endpoints shaped like OpenAI's, so that
 * tests/t_http.sh can drive the HTTP layer with curl, the official openai npm client and raw
 * sockets. The "model" echoes: the reply to a chat is "echo: " + the last message's content.
 *
 *   GET  /health                 {"status":"ok"}, never needs a key (answered on the I/O thread)
 *   GET  /v1/models              one model, "echo-model" (I/O thread)
 *   POST /v1/chat/completions    JSON or SSE ("stream": true), on the worker
 *   POST /v1/completions         "prompt" echoed back, on the worker
 * Settings (environment): LISTEN ([host:]port, default 127.0.0.1:0), QUEUE (default 4), API_KEY,
 * TIMEOUT_MS, HEAD_TIMEOUT_MS, MAX_CONNS, MAX_CONNS_PER_ADDR, MAX_BUFFERED (bytes), WORK_MS (worker
 * time per request), DELAY_MS (pause between SSE events), MAX_BODY (bytes). The request fields
 * "x_work_ms" and "x_delay_ms" override WORK_MS and DELAY_MS. The quick callback also serves as
 * the head callback, so a wrong key is answered before a body is read.
 * Prints "port N" on stdout once listening; logs "gone after K events" / "handled ..." to stderr,
 * and the requests http.h ends itself as glm does ("http_echo: POST /path 499 | why | 0.012 s");
 * exits 0 after SIGINT/SIGTERM. A non-loopback LISTEN without API_KEY is refused, as glm will. */
#define JSON_IMPLEMENTATION
#include "json.h"
#define HTTP_IMPLEMENTATION
#include "http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct { const char *api_key; int work_ms, delay_ms; long handled; } Echo;

static int env_int(const char *name, int def) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : def;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int respond_writer(HttpResponse *res, JsonWriter *w) {
    size_t n;
    const char *t = jw_text(w, &n);
    int rc = t ? http_respond_json(res, 200, t, n)
               : http_respond_error(res, 500, "could not write JSON");
    jw_free(w);
    return rc;
}

static int quick(const HttpRequest *req, HttpResponse *res, void *user) {
    Echo *e = user;
    if (!strcmp(req->path, "/health")) {
        if (strcmp(req->method, "GET") && strcmp(req->method, "HEAD"))
            return http_respond_error(res, 405, "use GET"), 1;
        static const char ok[] = "{\"status\":\"ok\"}";
        http_respond_json(res, 200, ok, sizeof ok - 1);
        return 1;
    }
    if (!http_auth_ok(req, e->api_key)) {
        http_respond_error(
            res, 401, "missing or wrong API key (Authorization: Bearer KEY or x-api-key: KEY)");
        return 1;
    }
    if (!strcmp(req->path, "/v1/models")) {
        JsonWriter w;
        jw_init(&w);
        jw_obj(&w);
        jw_kstr(&w, "object", "list");
        jw_key(&w, "data");
        jw_arr(&w);
        jw_obj(&w);
        jw_kstr(&w, "id", "echo-model");
        jw_kstr(&w, "object", "model");
        jw_kint(&w, "created", 0);
        jw_kstr(&w, "owned_by", "http_echo");
        jw_obj_end(&w);
        jw_arr_end(&w);
        jw_obj_end(&w);
        respond_writer(res, &w);
        return 1;
    }
    if (!strcmp(req->path, "/v1/chat/completions") || !strcmp(req->path, "/v1/completions")) {
        if (strcmp(req->method, "POST")) return http_respond_error(res, 405, "use POST"), 1;
        return 0;                                            /* to the worker */
    }
    http_respond_error(res, 404, "no such endpoint");
    return 1;
}

static void echo_log(const HttpRequest *req, int status, double seconds, const char *what,
                     void *user) {
    (void)user;
    fprintf(stderr, "http_echo: %s %s %d%s%s | %.3f s\n", req->method, req->path, status,
            what[0] ? " | " : "", what, seconds);
}

/* Waits ms on the worker, giving up early when the client leaves. */
static int work(HttpResponse *res, int ms) {
    for (int t = 0; t < ms; t += 10) {
        if (http_client_gone(res)) return -1;
        sleep_ms(10);
    }
    return 0;
}

static void chunk_event(HttpResponse *res, const char *id, const char *content, size_t len,
                        int role, const char *finish, int usage_tokens) {
    JsonWriter w;
    jw_init(&w);
    jw_obj(&w);
    jw_kstr(&w, "id", id);
    jw_kstr(&w, "object", "chat.completion.chunk");
    jw_kint(&w, "created", 1700000000);
    jw_kstr(&w, "model", "echo-model");
    jw_key(&w, "choices");
    jw_arr(&w);
    if (usage_tokens < 0) {
        jw_obj(&w);
        jw_kint(&w, "index", 0);
        jw_key(&w, "delta");
        jw_obj(&w);
        if (role) jw_kstr(&w, "role", "assistant");
        if (content) { jw_key(&w, "content"); jw_strn(&w, content, len); }
        jw_obj_end(&w);
        jw_key(&w, "finish_reason");
        if (finish) jw_str(&w, finish); else jw_null(&w);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    if (usage_tokens >= 0) {
        jw_key(&w, "usage");
        jw_obj(&w);
        jw_kint(&w, "prompt_tokens", 1);
        jw_kint(&w, "completion_tokens", usage_tokens);
        jw_kint(&w, "total_tokens", usage_tokens + 1);
        jw_obj_end(&w);
    }
    jw_obj_end(&w);
    size_t n;
    const char *t = jw_text(&w, &n);
    if (t) http_sse_event(res, t, n);
    jw_free(&w);
}

static void handle(const HttpRequest *req, HttpResponse *res, void *user) {
    Echo *e = user;
    char err[256];
    JsonDoc *doc = json_parse(req->body, req->body_len, err, sizeof err);
    if (!doc || json_type(json_root(doc)) != JSON_OBJECT) {
        char msg[320];
        snprintf(msg, sizeof msg, "request body is not a JSON object: %s",
                 doc ? "other JSON value" : err);
        http_respond_error(res, 400, msg);
        json_free(doc);
        return;
    }
    const JsonValue *root = json_root(doc);
    int64_t work_ms = e->work_ms, delay_ms = e->delay_ms;
    json_is_int(json_get(root, "x_work_ms"), &work_ms);
    json_is_int(json_get(root, "x_delay_ms"), &delay_ms);
    int chat = !strcmp(req->path, "/v1/chat/completions");
    const char *text = NULL;
    size_t text_len = 0;
    if (chat) {
        const JsonValue *msgs = json_get(root, "messages");
        if (json_type(msgs) != JSON_ARRAY || json_len(msgs) == 0) {
            http_respond_error(res, 400, "'messages' must be a non-empty array");
            json_free(doc);
            return;
        }
        text = json_str(json_get(json_at(msgs, json_len(msgs) - 1), "content"), &text_len);
    } else {
        text = json_str(json_get(root, "prompt"), &text_len);
    }
    if (!text) {
        http_respond_error(res, 400,
                           chat ? "the last message needs string 'content'"
                                : "'prompt' must be a string");
        json_free(doc);
        return;
    }
    char *reply = malloc(text_len + 7);
    memcpy(reply, "echo: ", 6);
    memcpy(reply + 6, text, text_len);
    size_t reply_len = text_len + 6;
    if (work(res, (int)work_ms)) {
        /* Stopping, or the client left: say so; the write fails harmlessly if nobody listens. */
        http_respond_error(res, 503, "stopped before answering");
        fprintf(stderr, "gone before answering\n");
        free(reply);
        json_free(doc);
        return;
    }
    char id[64];
    snprintf(id, sizeof id, "chatcmpl-echo-%ld", ++e->handled);
    int stream = json_bool(json_get(root, "stream")) == 1;
    if (stream && chat) {
        int usage = json_bool(json_get(json_get(root, "stream_options"), "include_usage")) == 1;
        http_sse_begin(res);
        chunk_event(res, id, "", 0, 1, NULL, -1);
        int events = 0;
        for (size_t off = 0; off < reply_len;) {
            /* 3-byte deltas: splits UTF-8 too */
            size_t k = reply_len - off < 3 ? reply_len - off : 3;
            /* Never split a UTF-8 sequence between deltas: a delta must be valid text. */
            while (off + k < reply_len && ((unsigned char)reply[off + k] & 0xC0) == 0x80) k++;
            if (delay_ms && work(res, (int)delay_ms)) break;
            chunk_event(res, id, reply + off, k, 0, NULL, -1);
            events++;
            off += k;
            if (http_client_gone(res)) break;
        }
        if (http_client_gone(res)) {
            /* The server may be stopping with the client still there: end the stream properly. */
            chunk_event(res, id, NULL, 0, 0, "stop", -1);
            http_sse_end(res);
            fprintf(stderr, "gone after %d events\n", events);
            free(reply);
            json_free(doc);
            return;
        } else {
            chunk_event(res, id, NULL, 0, 0, "stop", -1);
            if (usage) chunk_event(res, id, NULL, 0, 0, NULL, events);
            http_sse_end(res);
        }
    } else {
        JsonWriter w;
        jw_init(&w);
        jw_obj(&w);
        jw_kstr(&w, "id", id);
        jw_kstr(&w, "object", chat ? "chat.completion" : "text_completion");
        jw_kint(&w, "created", 1700000000);
        jw_kstr(&w, "model", "echo-model");
        jw_key(&w, "choices");
        jw_arr(&w);
        jw_obj(&w);
        jw_kint(&w, "index", 0);
        if (chat) {
            jw_key(&w, "message");
            jw_obj(&w);
            jw_kstr(&w, "role", "assistant");
            jw_key(&w, "content");
            jw_strn(&w, reply, reply_len);
            jw_obj_end(&w);
        } else {
            jw_key(&w, "text");
            jw_strn(&w, reply, reply_len);
        }
        jw_kstr(&w, "finish_reason", "stop");
        jw_obj_end(&w);
        jw_arr_end(&w);
        jw_key(&w, "usage");
        jw_obj(&w);
        jw_kint(&w, "prompt_tokens", 1);
        jw_kint(&w, "completion_tokens", 1);
        jw_kint(&w, "total_tokens", 2);
        jw_obj_end(&w);
        jw_obj_end(&w);
        respond_writer(res, &w);
    }
    fprintf(stderr, "handled %s %s [%.*s]\n", id, stream ? "stream" : "json",
            (int)(text_len < 40 ? text_len : 40), text);
    free(reply);
    json_free(doc);
}

int main(void) {
    setvbuf(stderr, NULL, _IOLBF, 0);
    Echo e = {getenv("API_KEY"), env_int("WORK_MS", 0), env_int("DELAY_MS", 0), 0};
    HttpServerConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.listen = getenv("LISTEN") ? getenv("LISTEN") : "127.0.0.1:0";
    cfg.queue = env_int("QUEUE", 4);
    cfg.timeout_ms = env_int("TIMEOUT_MS", 0);
    cfg.head_timeout_ms = env_int("HEAD_TIMEOUT_MS", 0);
    cfg.max_conns = env_int("MAX_CONNS", 0);
    cfg.max_conns_per_addr = env_int("MAX_CONNS_PER_ADDR", 0);
    cfg.max_buffered_bytes = (size_t)env_int("MAX_BUFFERED", 0);
    cfg.limits.max_body_bytes = (size_t)env_int("MAX_BODY", 0);
    cfg.head = quick;
    cfg.log = echo_log;
    cfg.quick = quick;
    cfg.handle = handle;
    cfg.user = &e;
    HttpAddr a;
    char err[256];
    if (http_addr_parse(cfg.listen, &a, err, sizeof err)) {
        fprintf(stderr, "http_echo: LISTEN %s\n", err);
        return 1;
    }
    if (!a.loopback && !(e.api_key && *e.api_key)) {
        fprintf(stderr, "http_echo: LISTEN=%s is reachable from other machines: set API_KEY\n",
                cfg.listen);
        return 1;
    }
    HttpServer *s = http_server_create(&cfg, err, sizeof err);
    if (!s) { fprintf(stderr, "http_echo: %s\n", err); return 1; }
    printf("port %d\n", http_server_port(s));
    fflush(stdout);
    int rc = http_server_run(s);
    http_server_free(s);
    fprintf(stderr, "stopped cleanly\n");
    return rc ? 1 : 0;
}

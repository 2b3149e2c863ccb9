/* The server under test, without a model: main.c (the engine and its front ends, GLM_NO_MAIN)
   with a Server set up as run_serve sets it, the tiny tokenizer as its codec, and the check that
   prints PASS/FAIL lines. Shared by the server's unit tests. */
#ifndef SERVER_FIXTURE_H
#define SERVER_FIXTURE_H
#define GLM_NO_MAIN
#pragma GCC diagnostic ignored "-Wunused-function"   /* the modes main() would call */
#include "../main.c"   /* the engine and its front ends, without main() */

#include <sys/socket.h>
#include <poll.h>

static int failures;
static void check(const char *name, int ok, const char *detail) {
    if (ok) printf("PASS %s\n", name);
    else { printf("FAIL %s: %s\n", name, detail ? detail : ""); failures++; }
}

static Settings settings;
static TextCodec codec;
static Server srv;

/* What a reply wrote to its end of a socket pair (fd: the other end), until 200 ms pass without
   more; NUL-terminated in buf. */
static size_t read_all(int fd, char *buf, size_t cap) {
    size_t n = 0;
    for (;;) {
        struct pollfd pf = { fd, POLLIN, 0 };
        if (poll(&pf, 1, 200) <= 0) break;
        ssize_t k = read(fd, buf + n, cap - 1 - n);
        if (k <= 0) break;
        n += (size_t)k;
    }
    buf[n] = 0;
    return n;
}

static void server_setup(void) {
    memset(&settings, 0, sizeof settings);
    settings.temperature = 0.7f;
    settings.top_p = 0.9f;
    settings.ngen = -1;
    settings.api_key = "";
    codec = codec_load("tests/fixtures/tiny_tokenizer", 0);
    memset(&srv, 0, sizeof srv);
    srv.set = &settings;
    srv.codec = &codec;
    srv.chat = chat_options(CHAT_GLM52);
    srv.chat.thinking = 1;
    srv.chat.reasoning_effort = "max";
    srv.model_name = "test-model";
    srv.capacity = 64;
    srv.rng = 12345;
}

#endif

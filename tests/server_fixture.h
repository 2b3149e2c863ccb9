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

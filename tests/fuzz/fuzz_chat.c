/* libFuzzer target for chat.h: the input is read three ways.
 *   1. As a MESSAGES / request JSON: parsed into a conversation and rendered in both template forms
 *      under options taken from the input's last byte; the pieces must never hold two text runs in a
 *      row and the rendering must start with [gMASK]<sop>.
 *   2. As model output: parsed whole, then fed in chunks whose sizes come from the input itself; the
 *      reasoning, content and tool calls must be identical (abort otherwise).
 *   3. As a chat template text for version detection.
 * Build: clang -g -O1 -fsanitize=fuzzer,address,undefined -I. tests/fuzz/fuzz_chat.c -o fuzz_chat -lm */
#define JSON_IMPLEMENTATION
#include "json.h"
#define CHAT_IMPLEMENTATION
#include "chat.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void render_checked(const ChatConv *c, const ChatOptions *o) {
    ChatPieces p = { 0 };
    if (chat_render(c, o, &p) == 0) {
        for (size_t i = 1; i < p.n; i++)
            if (p.v[i].tag < 0 && p.v[i - 1].tag < 0) abort();   /* text runs must be merged */
        size_t n = 0;
        char *s = chat_pieces_string(&p, &n);
        if (s && !o->continuation && (n < 12 || memcmp(s, "[gMASK]<sop>", 12))) abort();
        free(s);
    }
    chat_pieces_free(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    const uint8_t knobs = size ? data[size - 1] : 0;

    /* 1. messages */
    ChatConv conv;
    chat_conv_init(&conv);
    JsonDoc *doc = json_parse(text, size, NULL, 0);
    if (doc) {
        char err[256];
        /* a partial conversation renders too */
        chat_conv_parse(&conv, json_root(doc), err, sizeof err);
        json_free(doc);
        for (int f = 0; f < 2; f++) {
            ChatOptions o = chat_options(f ? CHAT_GLM52 : CHAT_GLM50);
            o.thinking = knobs & 1;
            o.keep_reasoning = (knobs >> 1) & 1;
            o.generation_prompt = (knobs >> 2) & 1;
            o.continuation = (knobs >> 3) & 1;
            o.reasoning_effort = (knobs >> 4) & 1 ? "high" : NULL;
            render_checked(&conv, &o);
        }
    }

    /* 2. model output: whole vs chunked (chunk sizes from the bytes themselves) */
    const int in_reasoning = (knobs >> 5) & 1;
    ChatOutput whole = { 0 }, parts = { 0 };
    int rc_whole = chat_out_parse(text, size, in_reasoning, &conv, &whole);
    ChatOutParser *p = chat_out_new(in_reasoning, &conv);
    int rc_parts = p ? 0 : -1;
    for (size_t at = 0, k = 0; p && !rc_parts && at < size; k++) {
        size_t step = 1 + (data[(k * 7) % size] % 13);
        if (step > size - at) step = size - at;
        rc_parts = chat_out_feed(p, text + at, step, chat_output_add, &parts);
        at += step;
    }
    if (p && !rc_parts) rc_parts = chat_out_finish(p, chat_output_add, &parts);
    chat_out_free(p);
    if (rc_whole == 0 && rc_parts == 0 && !chat_output_equal(&whole, &parts)) abort();
    chat_output_free(&whole);
    chat_output_free(&parts);
    chat_conv_free(&conv);

    /* 3. template version detection */
    ChatFormat fmt;
    char why[200];
    chat_detect_format(text, size, &fmt, why, sizeof why);
    return 0;
}

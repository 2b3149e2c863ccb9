/* libFuzzer target for glm.c's server requests and answers (section 11). The input is split at its
 * first NUL byte:
 *   1. the part before is a request body: JSON → the parser of the API the last byte picks (modulo
 *      7: OpenAI completions, chat, Anthropic messages, count_tokens, Responses, Ollama chat,
 *      generate) → api_prompt_ids (a small context, so the bound is reached); a refusal must carry
 *      a 4xx status and a message, an acceptance a prompt that fits (a count: any prompt);
 *   2. the part after is model output, fed through the answer pipeline (stop strings from the
 *      request when it was accepted, else two fixed ones; output parsing for chat) whole and in
 *      pieces whose sizes come from the input: the content, reasoning, tool calls and stop must
 *      not depend on the split, and the answer must be valid JSON in OpenAI's, Anthropic's, the
 *      Responses API's and Ollama's shapes.
 * main.c (the engine and its front ends) is included with GLM_NO_MAIN; run from the repository root (it loads
 * tests/fixtures/tiny_tokenizer/tokenizer.json).
 * Seeds: tests/fuzz/corpus/server (tests/fuzz/make_seeds.py). Built and run by make fuzz / tests/t_fuzz.sh. */
#define GLM_NO_MAIN
#pragma GCC diagnostic ignored "-Wunused-function"   /* most of glm.c is not called from here */
#include "main.c"   /* the engine and its front ends, without main() */

static Settings fz_settings;
static TextCodec fz_codec;
static Server fz_srv;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    fz_settings.temperature = 0.7f;
    fz_settings.top_p = 0.9f;
    fz_settings.ngen = -1;
    fz_settings.api_key = "";
    fz_codec = codec_load("tests/fixtures/tiny_tokenizer", 0);
    fz_srv.set = &fz_settings;
    fz_srv.codec = &fz_codec;
    fz_srv.chat = chat_options(CHAT_GLM52);
    fz_srv.model_name = "fuzz";
    fz_srv.capacity = 200;
    fz_srv.rng = 1;
    return 0;
}

/* Feeds text in pieces (sizes from `sizes`, cycled; none: whole) and ends the answer. */
static void fz_feed(Reply *r, const char *text, size_t n, const uint8_t *sizes, size_t n_sizes) {
    for (size_t i = 0, k = 0; i < n;) {
        size_t step = n_sizes ? 1 + (size_t)(sizes[k++ % n_sizes] % 16) : n - i;
        if (step > n - i) step = n - i;
        reply_text(r, text + i, step);
        i += step;
    }
    reply_text_end(r);
}

static const ApiSkin *const fz_skins[] = { &OPENAI_COMPLETIONS, &OPENAI_CHAT,
                                           &ANTHROPIC_MESSAGES, &ANTHROPIC_COUNT,
                                           &OPENAI_RESPONSES,   &OLLAMA_CHAT,
                                           &OLLAMA_GENERATE };

/* The answer in each API's shape (the whole-answer writers), which must be valid JSON. */
static void fz_shapes(const Reply *r, ApiFinish finish) {
    const ApiUsage u = { 5, 1, 2, 0, 0, 0, 0, 0, 0 };
    const ChatOutput *o = &r->out;
    for (int shape = 0; shape < 3; shape++) {
        JsonWriter w;
        jw_init(&w);
        if (shape == 0) {
            jw_arr(&w);
            anthropic_write_block(&w, r, CHAT_OUT_REASONING, o->reasoning ? o->reasoning : "",
                                  o->reasoning_len, 0, 1);
            anthropic_write_block(&w, r, CHAT_OUT_CONTENT, o->content ? o->content : "",
                                  o->content_len, 0, 1);
            for (int i = 0; i < o->n_calls; i++)
                anthropic_write_block(&w, r, CHAT_OUT_TOOL_CALL, NULL, 0, i, 1);
            jw_obj(&w);
            anthropic_write_stop(&w, r, finish);
            jw_obj_end(&w);
            jw_arr_end(&w);
        } else if (shape == 1) {
            responses_write_response(&w, r, finish, &u, 1);
        } else {
            jw_obj(&w);
            ollama_write_body(&w, r, o->content, o->content_len, o->reasoning, o->reasoning_len, 0,
                              o->n_calls);
            jw_obj_end(&w);
        }
        size_t n;
        const char *t = jw_text(&w, &n);
        JsonDoc *d = t ? json_parse(t, n, NULL, 0) : NULL;
        if (!d) abort();
        json_free(d);
        jw_free(&w);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    const ApiSkin *skin = fz_skins[data[size - 1] % (sizeof fz_skins / sizeof fz_skins[0])];
    const int chat = skin != &OPENAI_COMPLETIONS;
    const uint8_t *nul = memchr(data, 0, size);
    const size_t body_len = nul ? (size_t)(nul - data) : size;
    const char *text = nul ? (const char *)nul + 1 : "";
    const size_t text_len = nul ? size - body_len - 1 : 0;

    ApiRequest q;
    memset(&q, 0, sizeof q);
    chat_conv_init(&q.conv);
    ApiError e;
    memset(&e, 0, sizeof e);
    TokenList ids = { 0 };
    int limit = 0, accepted = 0;
    JsonDoc *doc = json_parse((const char *)data, body_len, NULL, 0);
    if (doc && json_type(json_root(doc)) == JSON_OBJECT) {
        q.skin = skin;
        if (!skin->parse(&fz_srv, json_root(doc), &q, &e) &&
            !api_prompt_ids(&fz_srv, &q, &ids, &limit, &e)) {
            accepted = 1;
            if (ids.n < 1 ||
                (!q.count_only && (ids.n >= fz_srv.capacity ||
                                   (q.max_tokens >= 0 && ids.n + q.max_tokens > fz_srv.capacity))))
                abort();
        } else if (e.status < 400 || e.status > 499 || !e.message[0]) {
            abort();
        }
    }
    if (!accepted) {   /* an answer's pipeline anyway, with stop strings of its own */
        api_request_free(&q);
        memset(&q, 0, sizeof q);
        chat_conv_init(&q.conv);
        q.skin = skin;
        q.chat = chat;
        q.render = fz_srv.chat;
        q.stop[0] = "</think>x"; q.stop_len[0] = 9;
        q.stop[1] = "aa"; q.stop_len[1] = 2;
        q.n_stop = 2;
    }
    q.stream = 0;
    Reply whole, split;
    reply_init(&whole, &fz_srv, NULL, &q);
    reply_init(&split, &fz_srv, NULL, &q);
    fz_feed(&whole, text, text_len, NULL, 0);
    fz_feed(&split, text, text_len, data, body_len < 64 ? body_len : 64);
    /* The answer ends at the first stop string to complete, so the split matters only when one stop
       string holds another (then a longer one starting earlier may complete later). */
    int nested = 0;
    for (int a = 0; a < q.n_stop; a++)
        for (int b = 0; b < q.n_stop; b++)
            if (a != b && memmem(q.stop[a], q.stop_len[a], q.stop[b], q.stop_len[b])) nested = 1;
    if (!nested && (whole.stop_hit != split.stop_hit || !chat_output_equal(&whole.out, &split.out)))
        abort();
    JsonWriter w;
    jw_init(&w);
    api_write_answer(&w, &whole, reply_finish_reason(&whole, STOP_EOS),
                     &(ApiUsage){ ids.n, 1, 0, 0, 0, 0, 0, 0, 0 });
    fz_shapes(&whole, reply_finish(&whole, STOP_EOS));
    size_t n;
    const char *t = jw_text(&w, &n);
    JsonDoc *answer = t ? json_parse(t, n, NULL, 0) : NULL;
    if (!answer) abort();
    json_free(answer);
    jw_free(&w);
    reply_free(&whole);
    reply_free(&split);
    free(ids.ids);
    api_request_free(&q);
    json_free(doc);
    return 0;
}

/* Unit tests of server.c that need no model: request fields (types,
   ranges, unsupported values refused by name, thinking and effort forms), the context bound, stop
   strings matched across text pieces, and the answer built from the model's text: reasoning,
   content and tool calls (chat.h's parser) mapped to OpenAI's JSON and to SSE chunks, with unique
   call ids. A random-weight model almost never writes a well-formed tool call, so this is where the
   tool_calls mapping is checked; tests/t_server.sh drives the whole server with real clients.
   main.c (the engine and its front ends) is included with GLM_NO_MAIN; the tokenizer is
   tests/fixtures/tiny_tokenizer. */
#include "server_fixture.h"
/* Parses body as a request to the chat (chat=1) or completions endpoint; *e gets the error. */
static int parse(const char *body, int chat, ApiRequest *q, ApiError *e, JsonDoc **doc) {
    memset(q, 0, sizeof *q);
    memset(e, 0, sizeof *e);
    chat_conv_init(&q->conv);
    char err[256];
    *doc = json_parse(body, strlen(body), err, sizeof err);
    if (!*doc) { printf("FAIL test body is not JSON: %s: %s\n", err, body); failures++; return -1; }
    return api_request_parse(&srv, json_root(*doc), chat, q, e);
}

/* The request must be refused with 400 and param `param`, and the message must contain `words`. */
static void refused(const char *name, const char *body, int chat, const char *param,
                    const char *words) {
    ApiRequest q;
    ApiError e;
    JsonDoc *doc;
    int rc = parse(body, chat, &q, &e, &doc);
    char detail[1200];
    snprintf(detail, sizeof detail, "rc %d status %d param %s message '%s'", rc, e.status,
             e.param ? e.param : "null", e.message);
    check(name,
          rc == -1 && e.status == 400 &&
              ((!param && !e.param) || (param && e.param && !strcmp(param, e.param))) &&
              strstr(e.message, words),
          detail);
    api_request_free(&q);
    json_free(doc);
}

static void test_fields(void) {
    ApiRequest q;
    ApiError e;
    JsonDoc *doc;
    const char *msg = "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]";
    char body[2048];

    snprintf(body, sizeof body, "{%s}", msg);
    int rc = parse(body, 1, &q, &e, &doc);
    check("defaults: settings' sampling, thinking, no limit, not streamed",
          rc == 0 && q.sampling.temperature == 0.7f && q.sampling.top_p == 0.9f && !q.seed_given &&
              q.max_tokens == -1 && q.render.thinking == 1 && !q.stream && !q.n_stop &&
              q.conv.n_msgs == 1,
          e.message);
    api_request_free(&q);
    json_free(doc);

    snprintf(body, sizeof body,
             "{%s, \"model\": \"x\", \"max_tokens\": 5, \"max_completion_tokens\": 7, "
             "\"temperature\": 0, "
             "\"top_p\": 1, \"seed\": -3, \"stop\": [\"a\", \"bc\"], \"stream\": true, "
             "\"stream_options\": {\"include_usage\": true}, "
             "\"n\": 1, \"logprobs\": false, \"frequency_penalty\": 0, \"presence_penalty\": 0, "
             "\"logit_bias\": {}, "
             "\"response_format\": {\"type\": \"text\"}, \"tool_choice\": \"auto\", \"user\": "
             "\"u\", \"unknown_field\": [1, {}], "
             "\"chat_template_kwargs\": {\"enable_thinking\": false, \"other\": 1}, "
             "\"reasoning_effort\": \"high\"}",
             msg);
    rc = parse(body, 1, &q, &e, &doc);
    check("every supported field is read; unknown fields are ignored",
          rc == 0 && q.max_tokens == 7 && q.sampling.temperature == 0 && q.sampling.top_p == 1 &&
              q.seed_given && q.sampling.seed == (uint64_t)-3 && q.n_stop == 2 &&
              q.stop_len[1] == 2 && !memcmp(q.stop[1], "bc", 2) && q.stream && q.include_usage &&
              q.render.thinking == 0 && !strcmp(q.render.reasoning_effort, "high"),
          e.message);
    api_request_free(&q);
    json_free(doc);

    snprintf(body, sizeof body, "{%s, \"thinking\": {\"type\": \"disabled\"}}", msg);
    rc = parse(body, 1, &q, &e, &doc);
    check("thinking {type: disabled} (Z.ai's form) turns thinking off",
          rc == 0 && q.render.thinking == 0, e.message);
    api_request_free(&q);
    json_free(doc);
    snprintf(body, sizeof body,
             "{%s, \"thinking\": {\"type\": \"disabled\"}, \"chat_template_kwargs\": "
             "{\"thinking\": true, "
             "\"clear_thinking\": false, \"reasoning_effort\": \"max\"}}",
             msg);
    rc = parse(body, 1, &q, &e, &doc);
    check("chat_template_kwargs.thinking (vLLM's GLM form) wins over top-level thinking; "
          "clear_thinking=false keeps reasoning",
          rc == 0 && q.render.thinking == 1 && q.render.keep_reasoning == 1 &&
              !strcmp(q.render.reasoning_effort, "max"),
          e.message);
    api_request_free(&q);
    json_free(doc);

    snprintf(body, sizeof body, "{%s, \"stop\": \"END\"}", msg);
    rc = parse(body, 1, &q, &e, &doc);
    check("stop as one string", rc == 0 && q.n_stop == 1 && q.stop_len[0] == 3, e.message);
    api_request_free(&q);
    json_free(doc);

    rc = parse("{\"prompt\": [\"abc\"], \"max_tokens\": 3}", 0, &q, &e, &doc);
    check("completions: prompt as a string or a list of one",
          rc == 0 && q.prompt_len == 3 && !q.chat && q.max_tokens == 3, e.message);
    api_request_free(&q);
    json_free(doc);

    struct { const char *name, *body; int chat; const char *param, *words; } bad[] = {
        { "messages missing", "{}", 1, "messages", "non-empty list" },
        { "messages empty", "{\"messages\": []}", 1, "messages", "non-empty list" },
        { "message without content", "{\"messages\": [{\"role\": \"user\"}]}", 1, "messages", "message 0 has no \"content\"" },
        { "unknown role", "{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}", 1, "messages", "role \"robot\"" },
        { "image part", "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", 1, "messages", "only text parts" },
        { "temperature string", "{\"temperature\": \"hot\"}", 1, "temperature", "must be a number" },
        { "temperature negative", "{\"temperature\": -1}", 1, "temperature", "[0, 100]" },
        { "top_p above 1", "{\"top_p\": 1.5}", 1, "top_p", "[0, 1]" },
        { "max_tokens 0", "{\"max_tokens\": 0}", 1, "max_tokens", "[1," },
        { "max_tokens fraction", "{\"max_tokens\": 2.5}", 1, "max_tokens", "integer" },
        { "max_completion_tokens string", "{\"max_completion_tokens\": \"9\"}", 1, "max_completion_tokens", "integer" },
        { "seed fraction", "{\"seed\": 1.5}", 1, "seed", "integer" },
        { "stream not bool", "{\"stream\": 1}", 1, "stream", "true or false" },
        { "include_usage not bool", "{\"stream_options\": {\"include_usage\": \"yes\"}}", 1, "stream_options.include_usage", "true or false" },
        { "stream_options not object", "{\"stream_options\": true}", 1, "stream_options", "object" },
        { "five stop strings", "{\"stop\": [\"a\",\"b\",\"c\",\"d\",\"e\"]}", 1, "stop", "at most 4" },
        { "empty stop string", "{\"stop\": [\"\"]}", 1, "stop", "1 to 1024" },
        { "stop number", "{\"stop\": 7}", 1, "stop", "string or a list" },
        { "n = 2", "{\"n\": 2}", 1, "n", "[1, 1]" },
        { "logprobs 1 (chat: a boolean)", "{\"logprobs\": 1}", 1, "logprobs", "true or false" },
        { "top_logprobs 21", "{\"logprobs\": true, \"top_logprobs\": 21}", 1, "top_logprobs", "[0, 20]" },
        { "top_logprobs without logprobs", "{\"top_logprobs\": 3}", 1, "top_logprobs", "needs \"logprobs\": true" },
        { "presence_penalty", "{\"presence_penalty\": 0.5}", 1, "presence_penalty", "not supported" },
        { "logit_bias", "{\"logit_bias\": {\"5\": 10}}", 1, "logit_bias", "not supported" },
        { "json_schema without its object", "{\"response_format\": {\"type\": \"json_schema\"}}", 1, "response_format", "needs \"json_schema\"" },
        { "json_schema without a schema", "{\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\"}}}", 1, "response_format", "needs a \"schema\"" },
        { "json_schema pattern", "{\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\", \"schema\": {\"type\": \"string\", \"pattern\": \"a+\"}}}}", 1, "response_format", "keyword 'pattern' is not enforced" },
        { "json_schema strict string", "{\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": {}, \"strict\": \"yes\"}}}", 1, "response_format.json_schema.strict", "true or false" },
        { "response_format grammar", "{\"response_format\": {\"type\": \"grammar\"}}", 1, "response_format", "\"grammar\" is not supported" },
        { "tool_choice required without tools", "{\"tool_choice\": \"required\"}", 1, "tool_choice", "needs \"tools\"" },
        { "tool_choice a function without tools", "{\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"f\"}}}", 1, "tool_choice", "needs \"tools\"" },
        { "reasoning_effort low", "{\"reasoning_effort\": \"low\"}", 1, "reasoning_effort", "\"max\" and \"high\"" },
        { "kwargs effort", "{\"chat_template_kwargs\": {\"reasoning_effort\": 3}}", 1, "chat_template_kwargs.reasoning_effort", "string" },
        { "enable_thinking string", "{\"chat_template_kwargs\": {\"enable_thinking\": \"no\"}}", 1, "chat_template_kwargs.enable_thinking", "true or false" },
        { "kwargs not object", "{\"chat_template_kwargs\": []}", 1, "chat_template_kwargs", "object" },
        { "thinking bogus", "{\"thinking\": {\"type\": \"maybe\"}}", 1, "thinking", "enabled" },
        { "tools not a list", "{\"tools\": {}, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", 1, "tools", "\"tools\" must be a list" },
        { "model number", "{\"model\": 5}", 1, "model", "string" },
        { "completions: prompt missing", "{}", 0, "prompt", "must be a string" },
        { "completions: prompt empty", "{\"prompt\": \"\"}", 0, "prompt", "no token to continue from" },
        { "completions: two prompts", "{\"prompt\": [\"a\", \"b\"]}", 0, "prompt", "one prompt per request" },
        { "completions: echo", "{\"prompt\": \"a\", \"echo\": true}", 0, "echo", "not supported" },
        { "completions: suffix", "{\"prompt\": \"a\", \"suffix\": \"z\"}", 0, "suffix", "not supported" },
        { "completions: logprobs 6", "{\"prompt\": \"a\", \"logprobs\": 6}", 0, "logprobs", "[0, 5]" },
        { "completions: best_of 2", "{\"prompt\": \"a\", \"best_of\": 2}", 0, "best_of", "[1, 1]" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[200];
        snprintf(name, sizeof name, "refused by name: %s", bad[i].name);
        /* a valid conversation around it */
        if (bad[i].chat && !strstr(bad[i].body, "messages") && strcmp(bad[i].param, "messages")) {
            snprintf(body, sizeof body, "{%s, %s", msg, bad[i].body + 1);
            refused(name, body, 1, bad[i].param, bad[i].words);
        } else {
            refused(name, bad[i].body, bad[i].chat, bad[i].param, bad[i].words);
        }
    }

    /* response_format: a schema or any JSON object becomes the request's grammar */
    snprintf(body, sizeof body,
             "{%s, \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": "
             "\"n\", \"strict\": true, \"schema\": {\"type\": \"object\", \"properties\": "
             "{\"a\": {\"type\": \"integer\"}}, \"required\": [\"a\"]}}}}",
             msg);
    rc = parse(body, 1, &q, &e, &doc);
    check("response_format json_schema: the schema is compiled", rc == 0 && q.grammar, e.message);
    api_request_free(&q);
    json_free(doc);
    snprintf(body, sizeof body, "{%s, \"response_format\": {\"type\": \"json_object\"}}", msg);
    rc = parse(body, 1, &q, &e, &doc);
    check("response_format json_object: any JSON object", rc == 0 && q.grammar, e.message);
    api_request_free(&q);
    json_free(doc);
    snprintf(body, sizeof body, "{%s, \"response_format\": {\"type\": \"text\"}}", msg);
    rc = parse(body, 1, &q, &e, &doc);
    check("response_format text: no grammar", rc == 0 && !q.grammar, e.message);
    api_request_free(&q);
    json_free(doc);

    /* tool_choice none: the tools are left out of the prompt */
    const char *tools =
        "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
        "\"parameters\": "
        "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}]";
    snprintf(body, sizeof body, "{%s, %s}", msg, tools);
    rc = parse(body, 1, &q, &e, &doc);
    check("tools are read", rc == 0 && q.conv.n_tools == 1, e.message);
    api_request_free(&q);
    json_free(doc);
    snprintf(body, sizeof body, "{%s, %s, \"tool_choice\": \"none\"}", msg, tools);
    rc = parse(body, 1, &q, &e, &doc);
    check("tool_choice none leaves the tools out", rc == 0 && q.conv.n_tools == 0, e.message);
    api_request_free(&q);
    json_free(doc);
}

static void test_context(void) {
    ApiRequest q;
    ApiError e;
    JsonDoc *doc;
    TokenList ids = { 0 };
    int limit = 0;
    /* the prompt: [gMASK]<sop><|user|>Hi<|assistant|><think></think> with thinking off */
    parse("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"chat_template_kwargs\": "
          "{\"enable_thinking\": false}}",
          1, &q, &e, &doc);
    int rc = api_prompt_ids(&srv, &q, &ids, &limit, &e);
    char *text = NULL;
    size_t len = 0;
    tok_decode(codec.tok, ids.ids, (size_t)ids.n, 0, &text, &len);
    check("chat prompt ids are the GLM-5.2 rendering",
          rc == 0 && text && !strcmp(text, "[gMASK]<sop><|user|>Hi<|assistant|><think></think>") &&
              limit == -1,
          text);
    free(text);
    const int n = ids.n;
    free(ids.ids);
    ids = (TokenList){ 0 };
    api_request_free(&q);
    json_free(doc);

    char body[256], want[300];
    snprintf(body, sizeof body,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], "
             "\"chat_template_kwargs\": {\"enable_thinking\": false}, "
             "\"max_tokens\": %d}",
             srv.capacity - n);
    parse(body, 1, &q, &e, &doc);
    rc = api_prompt_ids(&srv, &q, &ids, &limit, &e);
    check("max_tokens that exactly fills the context is accepted",
          rc == 0 && limit == srv.capacity - n, e.message);
    free(ids.ids);
    ids = (TokenList){ 0 };
    api_request_free(&q);
    json_free(doc);
    snprintf(body, sizeof body,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], "
             "\"chat_template_kwargs\": {\"enable_thinking\": false}, "
             "\"max_tokens\": %d}",
             srv.capacity - n + 1);
    parse(body, 1, &q, &e, &doc);
    rc = api_prompt_ids(&srv, &q, &ids, &limit, &e);
    snprintf(want, sizeof want,
             "holds %d tokens (CTX) but the request needs %d (%d in the prompt, max_tokens %d)",
             srv.capacity, srv.capacity + 1, n, srv.capacity - n + 1);
    check("one token more: 400 context_length_exceeded with the numbers",
          rc == -1 && e.status == 400 && e.code && !strcmp(e.code, "context_length_exceeded") &&
              !strcmp(e.param, "max_tokens") && strstr(e.message, want),
          e.message);
    free(ids.ids);
    ids = (TokenList){ 0 };
    api_request_free(&q);
    json_free(doc);

    char big[400];
    memset(big, 'x', sizeof big);
    big[sizeof big - 1] = 0;
    char body2[600];
    snprintf(body2, sizeof body2, "{\"prompt\": \"%s\"}", big);
    parse(body2, 0, &q, &e, &doc);
    rc = api_prompt_ids(&srv, &q, &ids, &limit, &e);
    check("a prompt that fills the context: 400 naming prompt",
          rc == -1 && e.code && !strcmp(e.param, "prompt") &&
              strstr(e.message, "leaving no room for an answer"),
          e.message);
    free(ids.ids);
    ids = (TokenList){ 0 };
    api_request_free(&q);
    json_free(doc);

    settings.ngen = 5;
    parse("{\"prompt\": \"<|user|>Hi\"}", 0, &q, &e, &doc);
    rc = api_prompt_ids(&srv, &q, &ids, &limit, &e);
    check("completions: a written tag is its token; NGEN is the default max_tokens",
          rc == 0 && ids.n >= 2 && ids.ids[0] == tok_id(codec.tok, "<|user|>") && limit == 5,
          e.message);
    settings.ngen = -1;
    free(ids.ids);
    api_request_free(&q);
    json_free(doc);
}

/* Feeds text to a reply in pieces of `step` bytes (0: random 1..5), then ends it. */
static void feed(Reply *r, const char *text, size_t step, uint64_t *rng) {
    size_t n = strlen(text);
    for (size_t i = 0; i < n;) {
        size_t k = step ? step : 1 + splitmix64_next(rng) % 5;
        if (k > n - i) k = n - i;
        reply_text(r, text + i, k);
        i += k;
    }
    reply_text_end(r);
}

static void test_stop_strings(void) {
    struct { const char *text; const char *stops[4]; int n; const char *want; int hit; } cases[] = {
        { "Hello world, hello moon", { "o w" }, 1, "Hell", 1 },
        { "Hello world, hello moon", { "moon", "llo" }, 2, "He", 1 },            /* the earliest match wins */
        { "abab abc", { "abc" }, 1, "abab ", 1 },                                 /* a false start, then the match */
        { "ab", { "abc" }, 1, "ab", 0 },                                          /* held back, then released at the end */
        { "xxabxab", { "abc", "bx" }, 2, "xxa", 1 },
        { "no stop here", { "zzz" }, 1, "no stop here", 0 },
        { "Grüße 世界!", { "界" }, 1, "Grüße 世", 1 },
        { "aaaaab", { "aab" }, 1, "aaa", 1 },
    };
    uint64_t rng = 7;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (size_t step = 0; step <= 3; step++) {
            for (int trial = 0; trial < (step ? 1 : 20); trial++) {
                ApiRequest q;
                memset(&q, 0, sizeof q);
                for (int k = 0; k < cases[c].n; k++) {
                    q.stop[k] = cases[c].stops[k];
                    q.stop_len[k] = strlen(cases[c].stops[k]);
                }
                q.n_stop = cases[c].n;
                Reply r;
                reply_init(&r, &srv, NULL, &q);
                feed(&r, cases[c].text, step, &rng);
                const char *got = r.out.content ? r.out.content : "";
                if (strcmp(got, cases[c].want) || r.stop_hit != cases[c].hit) {
                    char name[200], detail[300];
                    snprintf(name, sizeof name, "stop strings: '%s' stop '%s'", cases[c].text,
                             cases[c].stops[0]);
                    snprintf(detail, sizeof detail,
                             "pieces of %zu: got '%s' (hit %d), want '%s' (hit %d)", step, got,
                             r.stop_hit, cases[c].want, cases[c].hit);
                    check(name, 0, detail);
                    reply_free(&r);
                    return;
                }
                reply_free(&r);
            }
        }
    check("stop strings: matched across piece boundaries (pieces of 1, 2, 3 and random), the "
          "earliest wins, "
          "the stop text and what follows are dropped, a partial match is released at the end",
          1, NULL);
}

/* The model's text for a tool round: reasoning, content, two calls (one string-typed argument,
   one number, one object), fed in random pieces. */
static const char *TOOL_TEXT =
    "I should look it up.</think>Let me check.<tool_call>get_weather<arg_key>city</arg_key>"
    "<arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>2</arg_value></tool_call>"
    "<tool_call>get_time\n<arg_key>where</arg_key><arg_value>{\"tz\": "
    "\"UTC\"}</arg_value></tool_call>";
static const char *TOOL_REQUEST =
    "{\"messages\": [{\"role\": \"user\", \"content\": \"Weather in Paris?\"}], \"tools\": ["
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": "
    "\"object\", \"properties\": "
    "{\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}}}}},"
    "{\"type\": \"function\", \"function\": {\"name\": \"get_time\", \"parameters\": {\"type\": "
    "\"object\", \"properties\": "
    "{\"where\": {\"type\": \"object\"}}}}}]%s}";

static int json_eq_str(const JsonValue *v, const char *want) {
    size_t n;
    const char *s = json_str(v, &n);
    return s && n == strlen(want) && !memcmp(s, want, n);
}

/* calls: the tool_calls array of a message; checks names, arguments and ids. */
static int tool_calls_ok(const JsonValue *calls, char *why, size_t why_len) {
    if (json_len(calls) != 2) { snprintf(why, why_len, "%zu calls", json_len(calls)); return 0; }
    const char *names[2] = { "get_weather", "get_time" };
    const char *args[2] = { "{\"city\": \"Paris\", \"days\": 2}", "{\"where\": {\"tz\": "
                                                                  "\"UTC\"}}" };
    const char *ids[2];
    for (int i = 0; i < 2; i++) {
        const JsonValue *c = json_at(calls, (size_t)i), *fn = json_get(c, "function");
        ids[i] = json_str(json_get(c, "id"), NULL);
        if (!ids[i] || strncmp(ids[i], "call_", 5) || strlen(ids[i]) != 29 ||
            !json_eq_str(json_get(c, "type"), "function") ||
            !json_eq_str(json_get(fn, "name"), names[i]) ||
            !json_eq_str(json_get(fn, "arguments"), args[i])) {
            snprintf(why, why_len, "call %d: id %s name %s arguments %s", i, ids[i] ? ids[i] : "-",
                     json_str(json_get(fn, "name"), NULL) ? json_str(json_get(fn, "name"), NULL)
                                                          : "-",
                     json_str(json_get(fn, "arguments"), NULL)
                         ? json_str(json_get(fn, "arguments"), NULL)
                         : "-");
            return 0;
        }
    }
    if (!strcmp(ids[0], ids[1])) {
        snprintf(why, why_len, "the two calls share the id %s", ids[0]);
        return 0;
    }
    return 1;
}

static void test_tool_answer(void) {
    char body[2000], why[400] = "";
    snprintf(body, sizeof body, TOOL_REQUEST, "");
    ApiRequest q;
    ApiError e;
    JsonDoc *doc;
    parse(body, 1, &q, &e, &doc);
    uint64_t rng = 99;
    Reply r;
    reply_init(&r, &srv, NULL, &q);
    feed(&r, TOOL_TEXT, 0, &rng);
    JsonWriter w;
    jw_init(&w);
    api_write_answer(&w, &r, reply_finish_reason(&r, STOP_EOS),
                     &(ApiUsage){ 30, 40, 12, 0, 0, 0, 0, 0, 0 });
    size_t n;
    const char *t = jw_text(&w, &n);
    char err[200];
    JsonDoc *answer = t ? json_parse(t, n, err, sizeof err) : NULL;
    const JsonValue *a = json_root(answer), *choice = json_at(json_get(a, "choices"), 0),
                    *m = json_get(choice, "message");
    int64_t pt = 0, ct = 0, tt = 0, cached = 0;
    check(
        "tool answer: OpenAI's chat.completion shape (id, object, model, usage with cached_tokens)",
        answer && !strncmp(json_str(json_get(a, "id"), NULL), "chatcmpl-", 9) &&
            json_eq_str(json_get(a, "object"), "chat.completion") &&
            json_eq_str(json_get(a, "model"), "test-model") &&
            json_is_int(json_get(json_get(a, "usage"), "prompt_tokens"), &pt) && pt == 30 &&
            json_is_int(json_get(json_get(a, "usage"), "completion_tokens"), &ct) && ct == 40 &&
            json_is_int(json_get(json_get(a, "usage"), "total_tokens"), &tt) && tt == 70 &&
            json_is_int(json_get(json_get(json_get(a, "usage"), "prompt_tokens_details"), "cached_"
                                                                                          "tokens"),
                        &cached) &&
            cached == 12,
        t);
    check("tool answer: reasoning_content, content and finish_reason tool_calls",
          json_eq_str(json_get(m, "role"), "assistant") &&
              json_eq_str(json_get(m, "reasoning_content"), "I should look it up.") &&
              json_eq_str(json_get(m, "content"), "Let me check.") &&
              json_eq_str(json_get(choice, "finish_reason"), "tool_calls"),
          t);
    check("tool answer: both calls parsed: names, arguments as JSON strings (a string-typed "
          "parameter stays a string), unique call_ ids",
          tool_calls_ok(json_get(m, "tool_calls"), why, sizeof why), why);
    json_free(answer);
    jw_free(&w);
    reply_free(&r);

    /* only tool calls: content is null; with a length stop the reason is length */
    reply_init(&r, &srv, NULL, &q);
    feed(&r,
         "x</think><tool_call>get_time<arg_key>where</arg_key><arg_value>{}</arg_value></"
         "tool_call>",
         0, &rng);
    jw_init(&w);
    api_write_message(&w, &r.out, r.call_ids);
    t = jw_text(&w, &n);
    answer = t ? json_parse(t, n, err, sizeof err) : NULL;
    check("a message of only tool calls has content null",
          answer && json_type(json_get(json_root(answer), "content")) == JSON_NULL &&
              json_len(json_get(json_root(answer), "tool_calls")) == 1,
          t);
    check("finish_reason: length beats tool_calls; EOS or a stop string give stop without calls",
          !strcmp(reply_finish_reason(&r, STOP_LIMIT), "length") &&
              !strcmp(reply_finish_reason(&r, STOP_CONTEXT), "length"),
          NULL);
    json_free(answer);
    jw_free(&w);
    reply_free(&r);
    reply_init(&r, &srv, NULL, &q);
    feed(&r, "thinking</think>plain answer", 0, &rng);
    check("...and plain text gives stop, content without tool_calls",
          !strcmp(reply_finish_reason(&r, STOP_EOS), "stop") && !r.out.n_calls &&
              !strcmp(r.out.content, "plain answer"),
          NULL);
    reply_free(&r);

    /* a call cut off by the end of the text is content, verbatim */
    reply_init(&r, &srv, NULL, &q);
    feed(&r, "a</think>b<tool_call>get_time<arg_key>wh", 0, &rng);
    check("a tool call cut off by max_tokens comes out as content",
          !r.out.n_calls && r.out.content &&
              !strcmp(r.out.content, "b<tool_call>get_time<arg_key>wh"),
          r.out.content);
    reply_free(&r);
    api_request_free(&q);
    json_free(doc);
}

/* The same answer streamed: SSE chunks over a socket pair (HTTP/1.0, so no chunked framing). */
static void test_tool_stream(void) {
    char body[2000], why[400] = "";
    snprintf(body, sizeof body, TOOL_REQUEST, ", \"stream\": true, \"stop\": [\"never\"]");
    ApiRequest q;
    ApiError e;
    JsonDoc *doc;
    parse(body, 1, &q, &e, &doc);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
        check("socketpair", 0, strerror(errno));
        return;
    }
    HttpResponse res;
    memset(&res, 0, sizeof res);
    res.fd = sv[0];
    res.timeout_ms = 1000;
    uint64_t rng = 5;
    Reply r;
    reply_init(&r, &srv, &res, &q);
    http_sse_begin(&res);
    reply_send_chunk(&r, NULL, 0, 1, NULL);
    feed(&r, TOOL_TEXT, 0, &rng);
    reply_send_chunk(&r, NULL, 0, 0, reply_finish_reason(&r, STOP_EOS));
    http_sse_end(&res);
    static char got[1 << 16];
    read_all(sv[1], got, sizeof got);
    /* collect the deltas */
    char reasoning[200] = "", content[200] = "", finish[40] = "", ids[2][64] = { "", "" };
    int events = 0, bad = 0, first_role = 0, done = 0, same_id = 1;
    JsonWriter calls;
    jw_init(&calls);
    jw_arr(&calls);
    const char *id0 = NULL;
    char id0buf[64] = "";
    for (char *p = strstr(got, "\r\n\r\n"); p && (p = strstr(p, "data: ")); ) {
        p += 6;
        char *end = strstr(p, "\n\n");
        if (!end) { bad++; break; }
        *end = 0;
        if (!strcmp(p, "[DONE]")) { done = 1; p = end + 2; continue; }
        char err[200];
        JsonDoc *d = json_parse(p, strlen(p), err, sizeof err);
        if (!d) { bad++; p = end + 2; continue; }
        const JsonValue *c = json_root(d), *ch = json_at(json_get(c, "choices"), 0),
                        *delta = json_get(ch, "delta");
        const char *cid = json_str(json_get(c, "id"), NULL);
        if (!id0) { snprintf(id0buf, sizeof id0buf, "%s", cid ? cid : ""); id0 = id0buf; }
        else if (!cid || strcmp(cid, id0)) same_id = 0;
        if (!json_eq_str(json_get(c, "object"), "chat.completion.chunk")) bad++;
        if (!events && json_eq_str(json_get(delta, "role"), "assistant")) first_role = 1;
        const char *s;
        if ((s = json_str(json_get(delta, "reasoning_content"), NULL)))
            strncat(reasoning, s, sizeof reasoning - strlen(reasoning) - 1);
        if ((s = json_str(json_get(delta, "content"), NULL)))
            strncat(content, s, sizeof content - strlen(content) - 1);
        if ((s = json_str(json_get(ch, "finish_reason"), NULL)))
            snprintf(finish, sizeof finish, "%s", s);
        const JsonValue *tc = json_get(delta, "tool_calls");
        for (size_t i = 0; i < json_len(tc); i++) {
            const JsonValue *call = json_at(tc, i), *fn = json_get(call, "function");
            int64_t index = -1;
            json_is_int(json_get(call, "index"), &index);
            if (index < 0 || index > 1) { bad++; continue; }
            snprintf(ids[index], sizeof ids[index], "%s",
                     json_str(json_get(call, "id"), NULL) ? json_str(json_get(call, "id"), NULL)
                                                          : "");
            /* rebuilt as a message's tool_calls, checked like the JSON answer's */
            jw_obj(&calls);
            jw_kstr(&calls, "id", ids[index]);
            jw_kstr(&calls, "type",
                    json_str(json_get(call, "type"), NULL) ? json_str(json_get(call, "type"), NULL)
                                                           : "");
            jw_key(&calls, "function");
            jw_obj(&calls);
            jw_kstr(&calls, "name",
                    json_str(json_get(fn, "name"), NULL) ? json_str(json_get(fn, "name"), NULL)
                                                         : "");
            jw_kstr(&calls, "arguments",
                    json_str(json_get(fn, "arguments"), NULL)
                        ? json_str(json_get(fn, "arguments"), NULL)
                        : "");
            jw_obj_end(&calls);
            jw_obj_end(&calls);
        }
        events++;
        json_free(d);
        p = end + 2;
    }
    jw_arr_end(&calls);
    size_t n;
    const char *ct = jw_text(&calls, &n);
    char err[200];
    JsonDoc *cd = ct ? json_parse(ct, n, err, sizeof err) : NULL;
    check("streamed tool answer: every event is a chunk of one id, role first, [DONE] last",
          !bad && events >= 5 && first_role && done && same_id, got);
    check("streamed tool answer: the deltas add up to the reasoning and the content",
          !strcmp(reasoning, "I should look it up.") && !strcmp(content, "Let me check.") &&
              !strcmp(finish, "tool_calls"),
          got);
    check("streamed tool answer: delta.tool_calls with index 0 and 1, names, arguments and unique "
          "ids",
          cd && tool_calls_ok(json_root(cd), why, sizeof why), why);
    json_free(cd);
    jw_free(&calls);
    reply_free(&r);
    close(sv[0]);
    close(sv[1]);
    api_request_free(&q);
    json_free(doc);
}

/* OpenAI's "prediction": parsed (a string or text parts, joined), refused by name when malformed,
   and its drafter follows the answer through the prediction, edits included. */
static void test_prediction(void) {
    ApiRequest q;
    ApiError e;
    JsonDoc *doc;
    int rc = parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"prediction\":{\"type\":"
                   "\"content\",\"content\":\"a\\u0000b\"}}",
                   1, &q, &e, &doc);
    check("prediction: a string content is kept whole (an escaped NUL included)",
          rc == 0 && q.prediction && q.prediction_len == 3 && !memcmp(q.prediction, "a\0b", 3),
          e.message);
    api_request_free(&q);
    json_free(doc);
    rc = parse("{\"prompt\":\"x\",\"prediction\":{\"type\":\"content\",\"content\":[{\"type\":"
               "\"text\",\"text\":\"ab\"},{\"type\":\"text\",\"text\":\"cd\"}]}}",
               0, &q, &e, &doc);
    check("prediction: text parts are joined",
          rc == 0 && q.prediction && q.prediction_len == 4 && !strcmp(q.prediction, "abcd"),
          e.message);
    api_request_free(&q);
    json_free(doc);
    rc = parse("{\"prompt\":\"x\",\"prediction\":null}", 0, &q, &e, &doc);
    check("prediction: null means none", rc == 0 && !q.prediction, e.message);
    api_request_free(&q);
    json_free(doc);
    refused("prediction: not an object", "{\"prompt\":\"x\",\"prediction\":\"text\"}", 0,
            "prediction", "must be an object");
    refused("prediction: another type",
            "{\"prompt\":\"x\",\"prediction\":{\"type\":\"text\",\"content\":\"a\"}}", 0,
            "prediction", "\"type\": \"content\"");
    refused("prediction: content of another kind",
            "{\"prompt\":\"x\",\"prediction\":{\"type\":\"content\",\"content\":5}}", 0,
            "prediction", "string or a list of text parts");
    refused("prediction: a part that is not text",
            "{\"prompt\":\"x\",\"prediction\":{\"type\":\"content\",\"content\":[{\"type\":\"image_"
            "url\"}]}}",
            0, "prediction", "part 0");

    /* the drafter: prompt 1 2 3, prediction 10 11 12 13 14 10 11 15 */
    const int predicted[] = { 10, 11, 12, 13, 14, 10, 11, 15 };
    PredictedOutput p = { predicted, 8, 3, 0 };
    int history[32] = { 1, 2, 3 }, out[8], n;
    history[3] = 10;
    n = predicted_output_draft(&p, history, 4, 3, out);
    check("prediction drafter: the answer's first token found, the next three drafted",
          n == 3 && out[0] == 11 && out[1] == 12 && out[2] == 13, "");
    const int edited[] = { 11, 12, 99 };
    memcpy(history + 4, edited, sizeof edited);
    n = predicted_output_draft(&p, history, 7, 3, out);
    check("prediction drafter: after a token the prediction lacks, no draft", n == 0, "");
    history[7] = 14;
    n = predicted_output_draft(&p, history, 8, 3, out);
    check("prediction drafter: back on the prediction after an edit (14 → 10 11 15)",
          n == 3 && out[0] == 10 && out[1] == 11 && out[2] == 15, "");
    history[8] = 10;
    n = predicted_output_draft(&p, history, 9, 4, out);
    check("prediction drafter: a repeated token is looked up from where the last match ended, "
          "drafts stop at the end",
          n == 2 && out[0] == 11 && out[1] == 15, "");
    history[9] = 77;
    n = predicted_output_draft(&p, history, 10, 2, out);
    check("prediction drafter: nothing to draft past an unknown token", n == 0, "");

    /* usage: the prediction's drafts kept and not kept, under OpenAI's names */
    JsonWriter w;
    jw_init(&w);
    jw_obj(&w);
    api_write_usage(&w, &(ApiUsage){ 5, 9, 0, 1, 6, 2, 0, 0, 0 });
    jw_obj_end(&w);
    size_t len;
    const char *t = jw_text(&w, &len);
    JsonDoc *u = t ? json_parse(t, len, NULL, 0) : NULL;
    const JsonValue *details =
        json_get(json_get(json_root(u), "usage"), "completion_tokens_details");
    int64_t acc = -1, rej = -1;
    check("prediction: usage.completion_tokens_details has accepted_prediction_tokens and "
          "rejected_prediction_tokens",
          json_is_int(json_get(details, "accepted_prediction_tokens"), &acc) && acc == 6 &&
              json_is_int(json_get(details, "rejected_prediction_tokens"), &rej) && rej == 2,
          t);
    json_free(u);
    jw_free(&w);
}

int main(void) {
    server_setup();
    test_prediction();
    test_fields();
    test_context();
    test_stop_strings();
    test_tool_answer();
    test_tool_stream();
    codec_free(&codec);
    printf("%s\n", failures ? "some server tests failed" : "all server tests passed");
    return failures != 0;
}

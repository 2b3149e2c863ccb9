/* Unit tests of the server's other APIs (api_anthropic.c, api_responses.c, api_ollama.c) and the
   core they share (server.c), no model needed: each request form translated into the same
   conversation (roles, reasoning sent back, tool calls and results, tools), sampling and limits;
   each API's unsupported fields refused by name; the answer events of one model text (reasoning,
   content, two tool calls) written in each API's shape, whole and streamed (Anthropic's and the
   Responses API's named SSE events, Ollama's NDJSON); logprobs against a direct computation.
   tests/t_server.sh drives the whole server with the official clients. main.c is included with
   GLM_NO_MAIN; the tokenizer is tests/fixtures/tiny_tokenizer. */
#include "server_fixture.h"
static int text_is(ChatText t, const char *want) {
    return t.n == strlen(want) && !memcmp(t.s, want, t.n);
}

static int json_eq_str(const JsonValue *v, const char *want) {
    size_t n;
    const char *s = json_str(v, &n);
    return s && n == strlen(want) && !memcmp(s, want, n);
}

/* Parses body with a skin; *e gets the error. */
static int parse(const ApiSkin *skin, const char *body, ApiRequest *q, ApiError *e, JsonDoc **doc) {
    memset(q, 0, sizeof *q);
    memset(e, 0, sizeof *e);
    chat_conv_init(&q->conv);
    q->skin = skin;
    char err[256];
    *doc = json_parse(body, strlen(body), err, sizeof err);
    if (!*doc) { printf("FAIL test body is not JSON: %s: %s\n", err, body); failures++; return -1; }
    return skin->parse(&srv, json_root(*doc), q, e);
}

/* The request must be refused with 400 and param `param`, and the message must contain `words`. */
static void refused(const ApiSkin *skin, const char *name, const char *body, const char *param,
                    const char *words) {
    ApiRequest q;
    ApiError e;
    JsonDoc *doc;
    int rc = parse(skin, body, &q, &e, &doc);
    char detail[1200], full[300];
    snprintf(detail, sizeof detail, "rc %d status %d param %s message '%s'", rc, e.status,
             e.param ? e.param : "null", e.message);
    snprintf(full, sizeof full, "%s refuses by name: %s", skin->name, name);
    check(full,
          rc == -1 && e.status == 400 &&
              ((!param && !e.param) || (param && e.param && !strcmp(param, e.param))) &&
              strstr(e.message, words),
          detail);
    api_request_free(&q);
    json_free(doc);
}

/* ---- requests -------------------------------------------------------------------------------- */

static void test_anthropic_request(void) {
    const char *body =
        "{\"model\": \"m\", \"max_tokens\": 9, \"temperature\": 0.5, \"top_k\": 1, "
        "\"stop_sequences\": [\"END\"],"
        " \"metadata\": {\"user_id\": \"u\"}, \"thinking\": {\"type\": \"enabled\", "
        "\"budget_tokens\": 2048},"
        " \"system\": [{\"type\": \"text\", \"text\": \"Be brief.\", \"cache_control\": {\"type\": "
        "\"ephemeral\"}}],"
        " \"tools\": [{\"name\": \"get_weather\", \"description\": \"Weather\", \"input_schema\": "
        "{\"type\": \"object\","
        "   \"properties\": {\"city\": {\"type\": \"string\"}}}}], \"tool_choice\": {\"type\": "
        "\"auto\"},"
        " \"messages\": [{\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
        "  {\"role\": \"assistant\", \"content\": [{\"type\": \"thinking\", \"thinking\": \"Look "
        "it up.\", \"signature\": \"s\"},"
        "   {\"type\": \"redacted_thinking\", \"data\": \"x\"}, {\"type\": \"thinking\", "
        "\"thinking\": \"Then answer.\"},"
        "   {\"type\": \"text\", \"text\": \"Checking.\"}, {\"type\": \"tool_use\", \"id\": "
        "\"toolu_1\", \"name\": \"get_weather\","
        "   \"input\": {\"city\": \"Paris\"}}]},"
        "  {\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": "
        "\"toolu_1\", \"content\": [{\"type\": \"text\","
        "   \"text\": \"20 C\"}]}, {\"type\": \"text\", \"text\": \"And tomorrow?\"}]}]}";
    ApiRequest q;
    ApiError e;
    JsonDoc *doc;
    int rc = parse(&ANTHROPIC_MESSAGES, body, &q, &e, &doc);
    const ChatConv *c = &q.conv;
    const ChatMessage *m = c->msgs;
    check("anthropic request: system blocks, a tool_use turn with thinking sent back (two blocks "
          "joined), a tool_result and text after it",
          rc == 0 && c->n_msgs == 5 && m[0].role == CHAT_SYSTEM &&
              text_is(m[0].content, "Be brief.") && m[1].role == CHAT_USER &&
              m[2].role == CHAT_ASSISTANT &&
              text_is(m[2].reasoning, "Look it up.\n\nThen answer.") &&
              text_is(m[2].content, "Checking.") && m[2].n_calls == 1 &&
              text_is(m[2].calls[0].name, "get_weather") && text_is(m[2].calls[0].id, "toolu_1") &&
              m[2].calls[0].n_args == 1 && text_is(m[2].calls[0].args[0].value, "Paris") &&
              m[3].role == CHAT_TOOL && text_is(m[3].content, "20 C") &&
              text_is(m[3].tool_call_id, "toolu_1") && m[4].role == CHAT_USER &&
              text_is(m[4].content, "And tomorrow?"),
          e.message);
    check("anthropic request: input_schema tools, max_tokens, stop_sequences, thinking enabled, "
          "top_k 1 is greedy",
          rc == 0 && c->n_tools == 1 && text_is(c->tools[0].name, "get_weather") &&
              q.max_tokens == 9 && q.n_stop == 1 && q.render.thinking == 1 &&
              q.sampling.temperature == 0 && !q.stream,
          e.message);
    api_request_free(&q);
    json_free(doc);
    rc = parse(&ANTHROPIC_COUNT,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"thinking\": "
               "{\"type\": \"disabled\"}}",
               &q, &e, &doc);
    check("anthropic count_tokens: no max_tokens needed, thinking disabled",
          rc == 0 && q.count_only && q.render.thinking == 0, e.message);
    api_request_free(&q);
    json_free(doc);

    const ApiSkin *a = &ANTHROPIC_MESSAGES;
    refused(a, "max_tokens missing", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}",
            "max_tokens", "required");
    refused(a, "an image block",
            "{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": "
            "\"image\"}]}]}",
            "messages", "\"image\"");
    refused(a, "tool_choice any without tools",
            "{\"max_tokens\": 5, \"tool_choice\": {\"type\": \"any\"}, \"messages\": [{\"role\": "
            "\"user\", \"content\": \"x\"}]}",
            "tool_choice", "needs \"tools\"");
    refused(a, "tool_choice tool naming no tool",
            "{\"max_tokens\": 5, \"tool_choice\": {\"type\": \"tool\", \"name\": \"f\"}, "
            "\"tools\": [{\"name\": \"g\", \"input_schema\": {\"type\": \"object\"}}], "
            "\"messages\": []}",
            "tool_choice", "\"f\"");
    refused(a, "a server tool",
            "{\"max_tokens\": 5, \"tools\": [{\"type\": \"web_search_20250305\", \"name\": "
            "\"w\"}], \"messages\": []}",
            "tools", "web_search_20250305");
    refused(a, "budget_tokens 100",
            "{\"max_tokens\": 5000, \"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 100}, "
            "\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}",
            "thinking.budget_tokens", ">= 1024");
    refused(a, "top_k 40 when sampling",
            "{\"max_tokens\": 5, \"temperature\": 1, \"top_k\": 40, \"messages\": [{\"role\": "
            "\"user\", \"content\": \"x\"}]}",
            "top_k", "top_k 1 is greedy");
    refused(a, "stop_sequences as a string",
            "{\"max_tokens\": 5, \"stop_sequences\": \"x\", \"messages\": [{\"role\": \"user\", "
            "\"content\": \"x\"}]}",
            "stop_sequences", "list");
    refused(a, "temperature 1.5 (Anthropic's range is [0, 1])",
            "{\"max_tokens\": 5, \"temperature\": 1.5, \"messages\": [{\"role\": \"user\", "
            "\"content\": \"x\"}]}",
            "temperature", "[0, 1]");
    refused(a, "mcp_servers",
            "{\"max_tokens\": 5, \"mcp_servers\": [{\"url\": \"x\"}], \"messages\": []}",
            "mcp_servers", "not supported");
    refused(a, "a role other than user or assistant",
            "{\"max_tokens\": 5, \"messages\": [{\"role\": \"system\", \"content\": \"x\"}]}",
            "messages", "messages[0].role");
}

static void test_responses_request(void) {
    const char *body =
        "{\"model\": \"m\", \"instructions\": \"Be brief.\", \"max_output_tokens\": 11, "
        "\"temperature\": 0.3, \"top_p\": 0.5,"
        " \"store\": false, \"reasoning\": {\"effort\": \"low\", \"summary\": \"auto\"}, \"text\": "
        "{\"format\": {\"type\": \"text\"}},"
        " \"tools\": [{\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": "
        "{\"type\": \"object\"}, \"strict\": true}],"
        " \"input\": [{\"role\": \"developer\", \"content\": \"Use tools.\"},"
        "  {\"type\": \"message\", \"role\": \"user\", \"content\": [{\"type\": \"input_text\", "
        "\"text\": \"Weather?\"}]},"
        "  {\"type\": \"reasoning\", \"id\": \"rs_1\", \"summary\": [], \"content\": [{\"type\": "
        "\"reasoning_text\", \"text\": \"Look.\"}]},"
        "  {\"type\": \"message\", \"role\": \"assistant\", \"content\": [{\"type\": "
        "\"output_text\", \"text\": \"Checking.\"}]},"
        "  {\"type\": \"function_call\", \"call_id\": \"call_1\", \"name\": \"get_weather\", "
        "\"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"},"
        "  {\"type\": \"function_call_output\", \"call_id\": \"call_1\", \"output\": \"20 C\"},"
        "  {\"role\": \"user\", \"content\": \"Thanks\"}]}";
    ApiRequest q;
    ApiError e;
    JsonDoc *doc;
    int rc = parse(&OPENAI_RESPONSES, body, &q, &e, &doc);
    const ChatConv *c = &q.conv;
    const ChatMessage *m = c->msgs;
    check("responses request: instructions, a developer message, reasoning + message + "
          "function_call as one assistant turn, its output",
          rc == 0 && c->n_msgs == 6 && m[0].role == CHAT_SYSTEM &&
              text_is(m[0].content, "Be brief.") && m[1].role == CHAT_SYSTEM &&
              m[2].role == CHAT_USER && text_is(m[2].content, "Weather?") &&
              m[3].role == CHAT_ASSISTANT && text_is(m[3].reasoning, "Look.") &&
              text_is(m[3].content, "Checking.") && m[3].n_calls == 1 &&
              text_is(m[3].calls[0].id, "call_1") && m[4].role == CHAT_TOOL &&
              text_is(m[4].content, "20 C") && m[5].role == CHAT_USER,
          e.message);
    check("responses request: flat function tools, max_output_tokens, sampling, effort low → "
          "thinking with High",
          rc == 0 && c->n_tools == 1 && text_is(c->tools[0].name, "get_weather") &&
              !strstr(c->tools[0].json_function.s, "strict") && q.max_tokens == 11 &&
              q.sampling.top_p == 0.5f && q.render.thinking == 1 &&
              !strcmp(q.render.reasoning_effort, "high"),
          e.message);
    api_request_free(&q);
    json_free(doc);
    rc = parse(&OPENAI_RESPONSES, "{\"input\": \"Hi\", \"reasoning\": {\"effort\": \"none\"}}", &q,
               &e, &doc);
    check("responses request: a string input is one user message; effort none turns thinking off",
          rc == 0 && q.conv.n_msgs == 1 && q.conv.msgs[0].role == CHAT_USER &&
              q.render.thinking == 0,
          e.message);
    api_request_free(&q);
    json_free(doc);

    const ApiSkin *s = &OPENAI_RESPONSES;
    refused(s, "previous_response_id", "{\"input\": \"x\", \"previous_response_id\": \"resp_1\"}",
            "previous_response_id", "stores no");
    refused(s, "text.format json_schema without a schema",
            "{\"input\": \"x\", \"text\": {\"format\": {\"type\": \"json_schema\"}}}",
            "text.format", "needs a \"schema\"");
    refused(s, "text.format json_schema with an unenforced keyword",
            "{\"input\": \"x\", \"text\": {\"format\": {\"type\": \"json_schema\", \"name\": "
            "\"n\", \"schema\": {\"type\": \"string\", \"format\": \"email\"}}}}",
            "text.format", "keyword 'format' is not enforced");
    refused(s, "text.format grammar",
            "{\"input\": \"x\", \"text\": {\"format\": {\"type\": \"grammar\"}}}",
            "text.format", "\"text.format\" grammar is not supported");
    {
        ApiRequest q;
        ApiError e;
        JsonDoc *doc;
        int rc = parse(s, "{\"input\": \"x\", \"text\": {\"format\": {\"type\": \"json_schema\", "
                          "\"name\": \"n\", \"schema\": {\"type\": \"array\"}}}}",
                       &q, &e, &doc);
        check("responses text.format json_schema: compiled", rc == 0 && q.grammar, e.message);
        api_request_free(&q);
        json_free(doc);
    }
    refused(s, "a web_search tool", "{\"input\": \"x\", \"tools\": [{\"type\": \"web_search\"}]}",
            "tools", "web_search");
    refused(s, "tool_choice required without tools",
            "{\"input\": \"x\", \"tool_choice\": \"required\"}", "tool_choice",
            "needs \"tools\"");
    refused(s, "an input_image part",
            "{\"input\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_image\"}]}]}",
            "input", "input_image");
    refused(s, "an item_reference", "{\"input\": [{\"type\": \"item_reference\", \"id\": \"x\"}]}",
            "input", "item_reference");
    refused(s, "reasoning.effort bogus",
            "{\"input\": \"x\", \"reasoning\": {\"effort\": \"extreme\"}}", "reasoning.effort",
            "none, minimal");
    refused(s, "background", "{\"input\": \"x\", \"background\": true}", "background",
            "not supported");
    refused(s, "an empty input", "{\"input\": []}", "input", "non-empty");
}

static void test_ollama_request(void) {
    const char *body =
        "{\"model\": \"m\", \"think\": false, \"keep_alive\": \"5m\", \"format\": \"\","
        " \"options\": {\"temperature\": 0.2, \"top_p\": 0.5, \"seed\": 3, \"num_predict\": 7, "
        "\"stop\": [\"x\"], \"num_ctx\": 64,"
        "  \"num_thread\": 4, \"repeat_penalty\": 1},"
        " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
        "\"parameters\": {\"type\": \"object\"}}}],"
        " \"messages\": [{\"role\": \"user\", \"content\": \"Weather?\", \"images\": []},"
        "  {\"role\": \"assistant\", \"content\": \"\", \"thinking\": \"Look.\", \"tool_calls\": "
        "[{\"function\": {\"name\": \"get_weather\","
        "   \"arguments\": {\"city\": \"Paris\"}}}]},"
        "  {\"role\": \"tool\", \"content\": \"20 C\", \"tool_name\": \"get_weather\"}]}";
    ApiRequest q;
    ApiError e;
    JsonDoc *doc;
    int rc = parse(&OLLAMA_CHAT, body, &q, &e, &doc);
    const ChatMessage *m = q.conv.msgs;
    check("ollama chat request: messages with thinking and tool_calls (arguments an object), a "
          "tool message with tool_name",
          rc == 0 && q.conv.n_msgs == 3 && m[1].role == CHAT_ASSISTANT &&
              text_is(m[1].reasoning, "Look.") && m[1].n_calls == 1 &&
              text_is(m[1].calls[0].args[0].value, "Paris") && m[2].role == CHAT_TOOL &&
              text_is(m[2].name, "get_weather") && q.conv.n_tools == 1,
          e.message);
    check("ollama chat request: streamed by default, think false, options read (num_thread "
          "ignored, repeat_penalty 1 is off)",
          rc == 0 && q.stream && q.render.thinking == 0 && q.sampling.temperature == 0.2f &&
              q.sampling.top_p == 0.5f && q.seed_given && q.sampling.seed == 3 &&
              q.max_tokens == 7 && q.n_stop == 1,
          e.message);
    api_request_free(&q);
    json_free(doc);
    rc = parse(&OLLAMA_GENERATE,
               "{\"prompt\": \"[gMASK]<sop>Hi\", \"raw\": true, \"stream\": false, \"options\": "
               "{\"num_predict\": -1}}",
               &q, &e, &doc);
    check("ollama generate raw: the prompt as written (no template), no limit",
          rc == 0 && !q.chat && q.prompt_len == 14 && q.max_tokens == -1 && !q.stream, e.message);
    api_request_free(&q);
    json_free(doc);
    rc =
        parse(&OLLAMA_GENERATE,
              "{\"prompt\": \"Hi\", \"system\": \"Be brief.\", \"think\": \"high\"}", &q, &e, &doc);
    check("ollama generate: system and prompt through the template; think \"high\"",
          rc == 0 && q.chat && q.conv.n_msgs == 2 && q.conv.msgs[0].role == CHAT_SYSTEM &&
              q.render.thinking == 1 && !strcmp(q.render.reasoning_effort, "high"),
          e.message);
    api_request_free(&q);
    json_free(doc);

    const ApiSkin *o = &OLLAMA_CHAT;
    const char *msg = "\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]";
    char b[400];
    snprintf(b, sizeof b, "{%s, \"options\": {\"num_ctx\": 65}}", msg);
    refused(o, "options.num_ctx beyond the context", b, "options.num_ctx", "holds 64");
    snprintf(b, sizeof b, "{%s, \"options\": {\"repeat_penalty\": 1.1}}", msg);
    refused(o, "options.repeat_penalty 1.1", b, "options", "repeat_penalty");
    snprintf(b, sizeof b, "{%s, \"options\": {\"num_predict\": 0}}", msg);
    refused(o, "options.num_predict 0", b, "options.num_predict", "num_predict");
    snprintf(b, sizeof b, "{%s, \"options\": {\"temperature\": \"hot\"}}", msg);
    refused(o, "options.temperature of the wrong type", b, "options", "options: \"temperature\"");
    snprintf(b, sizeof b, "{%s, \"format\": \"yaml\"}", msg);
    refused(o, "format yaml", b, "format", "\"json\" or a JSON schema");
    snprintf(b, sizeof b, "{%s, \"format\": {\"type\": \"string\", \"pattern\": \"a\"}}", msg);
    refused(o, "format with an unenforced keyword", b, "format",
            "keyword 'pattern' is not enforced");
    {
        ApiRequest q;
        ApiError e;
        JsonDoc *doc;
        snprintf(b, sizeof b, "{%s, \"format\": \"json\"}", msg);
        int rc = parse(o, b, &q, &e, &doc);
        check("ollama format json: any JSON object", rc == 0 && q.grammar, e.message);
        api_request_free(&q);
        json_free(doc);
        snprintf(b, sizeof b, "{%s, \"format\": {\"type\": \"array\", \"maxItems\": 2}}", msg);
        rc = parse(o, b, &q, &e, &doc);
        check("ollama format with a schema: compiled", rc == 0 && q.grammar, e.message);
        api_request_free(&q);
        json_free(doc);
    }
    refused(o, "images",
            "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"images\": [\"aGk=\"]}]}",
            "messages", "images");
    refused(&OLLAMA_GENERATE, "system with raw",
            "{\"prompt\": \"x\", \"raw\": true, \"system\": \"s\"}", "system", "raw");
    refused(&OLLAMA_GENERATE, "an empty prompt", "{\"prompt\": \"\"}", "prompt", "empty");
}

/* ---- answers --------------------------------------------------------------------------------- */

/* The model's text for a tool round: reasoning, content, two calls. */
static const char *TOOL_TEXT =
    "I should look it up.</think>Let me check.<tool_call>get_weather<arg_key>city</arg_key>"
    "<arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>2</arg_value></tool_call>"
    "<tool_call>get_time\n<arg_key>where</arg_key><arg_value>{\"tz\": "
    "\"UTC\"}</arg_value></tool_call>";
static const char *TOOLS_JSON =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
    "{\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}}}}}, "
    "{\"type\": \"function\", \"function\": "
    "{\"name\": \"get_time\", \"parameters\": {\"type\": \"object\", \"properties\": {\"where\": "
    "{\"type\": \"object\"}}}}}]";

/* Runs TOOL_TEXT through a skin's answer (fed in random pieces) and returns what went out, from the
   body on (an HTTP/1.0 response: no chunked framing). */
static char *run_answer(const ApiSkin *skin, const char *body) {
    static char got[1 << 17];
    ApiRequest q;
    ApiError e;
    JsonDoc *doc;
    if (parse(skin, body, &q, &e, &doc)) {
        printf("FAIL %s: the test request is refused: %s\n", skin->name, e.message);
        failures++;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
        check("socketpair", 0, strerror(errno));
        exit(1);
    }
    HttpResponse res;
    memset(&res, 0, sizeof res);
    res.fd = sv[0];
    res.timeout_ms = 1000;
    Reply r;
    reply_init(&r, &srv, &res, &q);
    r.prompt_tokens = 30;
    r.cached_tokens = 12;
    if (q.stream) skin->begin(&r);
    uint64_t rng = 3;
    const size_t n = strlen(TOOL_TEXT);
    for (size_t i = 0; i < n;) {
        size_t k = 1 + splitmix64_next(&rng) % 5;
        if (k > n - i) k = n - i;
        reply_text(&r, TOOL_TEXT + i, k);
        i += k;
    }
    reply_text_end(&r);
    const ApiUsage usage = { 30, 40, 12, 0, 0, 0, 1.0, 1.5, 3.0 };
    skin->finish(&r, reply_finish(&r, STOP_EOS), &usage);
    read_all(sv[1], got, sizeof got);
    reply_free(&r);
    close(sv[0]);
    close(sv[1]);
    api_request_free(&q);
    json_free(doc);
    char *body_start = strstr(got, "\r\n\r\n");
    return body_start ? body_start + 4 : got;
}

/* Named SSE events: calls fn on each (name, data); returns the count, -1 when one is malformed. */
static int each_event(char *text, int (*fn)(void *ctx, const char *name, const JsonValue *data),
                      void *ctx) {
    int count = 0;
    for (char *p = text; *p;) {
        char *end = strstr(p, "\n\n");
        if (!end || strncmp(p, "event: ", 7)) return -1;
        *end = 0;
        char *nl = strchr(p, '\n');
        if (!nl || strncmp(nl + 1, "data: ", 6)) return -1;
        *nl = 0;
        JsonDoc *d = json_parse(nl + 7, strlen(nl + 7), NULL, 0);
        int ok = d && fn(ctx, p + 7, json_root(d));
        json_free(d);
        if (!ok) return -1;
        count++;
        p = end + 2;
    }
    return count;
}

typedef struct {
    char names[2000], thinking[200], text[200], inputs[2][200], stop[40];
    int last_index, bad;
} AnthropicSeen;

static int anthropic_seen(void *ctx, const char *name, const JsonValue *d) {
    AnthropicSeen *s = ctx;
    /* the event's name is its data's type */
    if (!json_eq_str(json_get(d, "type"), name)) return 0;
    if (strcmp(name, "content_block_delta") && strcmp(name, "ping")) {
        strncat(s->names, name, sizeof s->names - strlen(s->names) - 2);
        strcat(s->names, " ");
    }
    int64_t index = -1;
    json_is_int(json_get(d, "index"), &index);
    if (!strcmp(name, "content_block_start")) {
        if (index != s->last_index + 1) s->bad++;
        s->last_index = (int)index;
        strncat(s->names, json_str(json_get(json_get(d, "content_block"), "type"), NULL), 20);
        strcat(s->names, " ");
    }
    const JsonValue *delta = json_get(d, "delta");
    const char *t;
    if ((t = json_str(json_get(delta, "thinking"), NULL)))
        strncat(s->thinking, t, sizeof s->thinking - strlen(s->thinking) - 1);
    if ((t = json_str(json_get(delta, "text"), NULL)))
        strncat(s->text, t, sizeof s->text - strlen(s->text) - 1);
    if ((t = json_str(json_get(delta, "partial_json"), NULL)) && index >= 2 && index <= 3)
        strncat(s->inputs[index - 2], t, sizeof s->inputs[0] - strlen(s->inputs[index - 2]) - 1);
    if ((t = json_str(json_get(delta, "stop_reason"), NULL)))
        snprintf(s->stop, sizeof s->stop, "%s", t);
    return 1;
}

static void test_anthropic_answer(void) {
    char body[2000];
    snprintf(body, sizeof body,
             "{\"max_tokens\": 100, \"stream\": true, \"tools\": [{\"name\": \"get_weather\", "
             "\"input_schema\": "
             "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": "
             "{\"type\": \"integer\"}}}}, "
             "{\"name\": \"get_time\", \"input_schema\": {\"type\": \"object\", \"properties\": "
             "{\"where\": {\"type\": \"object\"}}}}], "
             "\"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"}]}");
    char *got = run_answer(&ANTHROPIC_MESSAGES, body);
    AnthropicSeen s;
    memset(&s, 0, sizeof s);
    s.last_index = -1;
    const int n = each_event(got, anthropic_seen, &s);
    check("anthropic stream: named events (each name its data's type), blocks thinking, text, "
          "tool_use, tool_use in order",
          n > 0 && !s.bad &&
              !strcmp(s.names, "message_start content_block_start thinking content_block_stop "
                               "content_block_start text "
                               "content_block_stop content_block_start tool_use content_block_stop "
                               "content_block_start tool_use content_block_stop "
                               "message_delta message_stop "),
          s.names);
    check("anthropic stream: thinking_delta, text_delta and input_json_delta add up; stop_reason "
          "tool_use",
          !strcmp(s.thinking, "I should look it up.") && !strcmp(s.text, "Let me check.") &&
              !strcmp(s.inputs[0], "{\"city\": \"Paris\", \"days\": 2}") &&
              !strcmp(s.inputs[1], "{\"where\": {\"tz\": \"UTC\"}}") && !strcmp(s.stop, "tool_use"),
          got);

    body[strlen(body) - 1] = 0;   /* the same, not streamed */
    char *p = strstr(body, "\"stream\": true");
    memcpy(p, "\"stream\":false", 14);
    strcat(body, "}");
    got = run_answer(&ANTHROPIC_MESSAGES, body);
    JsonDoc *d = json_parse(got, strlen(got), NULL, 0);
    const JsonValue *a = json_root(d), *content = json_get(a, "content"),
                    *usage = json_get(a, "usage");
    const JsonValue *use = json_at(content, 2);
    int64_t in = -1, cached = -1, out = -1;
    check("anthropic answer: a message with thinking, text and two tool_use blocks (input an "
          "object, toolu_ ids), stop_reason tool_use, "
          "usage input_tokens + cache_read_input_tokens = the prompt",
          d && json_eq_str(json_get(a, "type"), "message") &&
              !strncmp(json_str(json_get(a, "id"), NULL), "msg_", 4) && json_len(content) == 4 &&
              json_eq_str(json_get(json_at(content, 0), "thinking"), "I should look it up.") &&
              json_eq_str(json_get(json_at(content, 1), "text"), "Let me check.") &&
              json_eq_str(json_get(use, "type"), "tool_use") &&
              !strncmp(json_str(json_get(use, "id"), NULL), "toolu_", 6) &&
              json_eq_str(json_get(json_get(use, "input"), "city"), "Paris") &&
              json_eq_str(json_get(a, "stop_reason"), "tool_use") &&
              json_type(json_get(a, "stop_sequence")) == JSON_NULL &&
              json_is_int(json_get(usage, "input_tokens"), &in) && in == 18 &&
              json_is_int(json_get(usage, "cache_read_input_tokens"), &cached) && cached == 12 &&
              json_is_int(json_get(usage, "output_tokens"), &out) && out == 40,
          got);
    json_free(d);
}

typedef struct {
    int64_t next_seq;
    int bad, items;
    char types[2000], reasoning[200], text[200], args[2][200], final_status[40];
    int final_items;
} ResponsesSeen;

static int responses_seen(void *ctx, const char *name, const JsonValue *d) {
    ResponsesSeen *s = ctx;
    int64_t seq = -1, index = -1;
    if (!json_eq_str(json_get(d, "type"), name) ||
        !json_is_int(json_get(d, "sequence_number"), &seq) || seq != s->next_seq++)
        s->bad++;
    json_is_int(json_get(d, "output_index"), &index);
    const char *t;
    if (!strcmp(name, "response.output_item.added")) {
        if (index != s->items++) s->bad++;
        strncat(s->types, json_str(json_get(json_get(d, "item"), "type"), NULL), 30);
        strcat(s->types, " ");
    }
    if (!strcmp(name, "response.reasoning_text.delta"))
        strncat(s->reasoning, json_str(json_get(d, "delta"), NULL), 100);
    if (!strcmp(name, "response.output_text.delta"))
        strncat(s->text, json_str(json_get(d, "delta"), NULL), 100);
    if (!strcmp(name, "response.function_call_arguments.done") && index >= 2 && index <= 3 &&
        (t = json_str(json_get(d, "arguments"), NULL)))
        snprintf(s->args[index - 2], sizeof s->args[0], "%s", t);
    if (!strcmp(name, "response.completed")) {
        const JsonValue *r = json_get(d, "response");
        t = json_str(json_get(r, "status"), NULL);
        snprintf(s->final_status, sizeof s->final_status, "%s", t ? t : "");
        s->final_items = (int)json_len(json_get(r, "output"));
    }
    return 1;
}

static void test_responses_answer(void) {
    char body[2000];
    snprintf(body, sizeof body,
             "{\"stream\": true, \"input\": \"Weather?\", \"tools\": [{\"type\": \"function\", "
             "\"name\": \"get_weather\", "
             "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
             "\"string\"}, \"days\": {\"type\": \"integer\"}}}}, "
             "{\"type\": \"function\", \"name\": \"get_time\", \"parameters\": {\"type\": "
             "\"object\", \"properties\": {\"where\": "
             "{\"type\": \"object\"}}}}]}");
    char *got = run_answer(&OPENAI_RESPONSES, body);
    ResponsesSeen s;
    memset(&s, 0, sizeof s);
    const int n = each_event(got, responses_seen, &s);
    check("responses stream: events named by type with sequence_number 0, 1, 2, ...; items "
          "reasoning, message, function_call x2",
          n > 10 && !s.bad && !strcmp(s.types, "reasoning message function_call function_call "),
          s.types);
    check("responses stream: reasoning_text and output_text deltas add up, arguments done, "
          "response.completed with the four items",
          !strcmp(s.reasoning, "I should look it up.") && !strcmp(s.text, "Let me check.") &&
              !strcmp(s.args[0], "{\"city\": \"Paris\", \"days\": 2}") &&
              !strcmp(s.args[1], "{\"where\": {\"tz\": \"UTC\"}}") &&
              !strcmp(s.final_status, "completed") && s.final_items == 4,
          got);
}

static void test_ollama_answer(void) {
    char body[2000];
    snprintf(body, sizeof body,
             "{\"stream\": false, \"tools\": %s, \"messages\": [{\"role\": \"user\", \"content\": "
             "\"Weather?\"}]}",
             TOOLS_JSON);
    char *got = run_answer(&OLLAMA_CHAT, body);
    JsonDoc *d = json_parse(got, strlen(got), NULL, 0);
    const JsonValue *a = json_root(d), *m = json_get(a, "message"),
                    *calls = json_get(m, "tool_calls");
    int64_t ns = -1, count = -1;
    check("ollama answer: message with thinking, content and tool_calls (arguments objects); done, "
          "counts, durations in ns",
          d && json_eq_str(json_get(m, "thinking"), "I should look it up.") &&
              json_eq_str(json_get(m, "content"), "Let me check.") && json_len(calls) == 2 &&
              json_eq_str(
                  json_get(json_get(json_get(json_at(calls, 0), "function"), "arguments"), "city"),
                  "Paris") &&
              json_get(a, "done") && json_bool(json_get(a, "done")) == 1 &&
              json_eq_str(json_get(a, "done_reason"), "stop") &&
              json_is_int(json_get(a, "total_duration"), &ns) && ns == 2000000000 &&
              json_is_int(json_get(a, "eval_count"), &count) && count == 40,
          got);
    json_free(d);
    snprintf(body, sizeof body,
             "{\"tools\": %s, \"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"}]}",
             TOOLS_JSON);
    got = run_answer(&OLLAMA_CHAT, body);
    int lines = 0, bad = 0, done = 0, calls_seen = 0;
    char content[200] = "", thinking[200] = "";
    for (char *p = got; *p;) {
        char *nl = strchr(p, '\n');
        if (!nl) { bad++; break; }
        *nl = 0;
        JsonDoc *ld = json_parse(p, strlen(p), NULL, 0);
        const JsonValue *l = json_root(ld), *lm = json_get(l, "message");
        if (!ld || done) bad++;
        done = json_bool(json_get(l, "done")) == 1;
        const char *t;
        if ((t = json_str(json_get(lm, "content"), NULL)))
            strncat(content, t, sizeof content - strlen(content) - 1);
        if ((t = json_str(json_get(lm, "thinking"), NULL)))
            strncat(thinking, t, sizeof thinking - strlen(thinking) - 1);
        calls_seen += (int)json_len(json_get(lm, "tool_calls"));
        json_free(ld);
        lines++;
        p = nl + 1;
    }
    check("ollama stream: one JSON object per line, the pieces add up, two tool calls, the last "
          "line done",
          lines > 4 && !bad && done && calls_seen == 2 && !strcmp(content, "Let me check.") &&
              !strcmp(thinking, "I should look it up."),
          got);
}

/* ---- logprobs -------------------------------------------------------------------------------- */

static void test_logprob(void) {
    const float logits[8] = { 1.0f, 3.0f, -2.0f, 3.0f, 0.5f, 2.0f, -1.0f, 0.0f };
    double sum = 0;
    for (int i = 0; i < 8; i++) sum += exp((double)logits[i]);
    ApiLogprob p;
    api_logprob(logits, 8, 5, 4, &p);
    int ok = p.id == 5 && fabs(p.logprob - (2.0 - log(sum))) < 1e-6 && p.n_top == 4 &&
             p.top_id[0] == 1 && p.top_id[1] == 3 && p.top_id[2] == 5 && p.top_id[3] == 0;
    for (int j = 0; j < p.n_top; j++)
        ok = ok && fabs(p.top_logprob[j] - ((double)logits[p.top_id[j]] - log(sum))) < 1e-6;
    check("logprobs: log-softmax of the logits for the token and the top 4 (a tie: lower id first)",
          ok, NULL);
    api_logprob(logits, 8, 2, 0, &p);
    check("logprobs: top 0 lists none", p.n_top == 0 && fabs(p.logprob - (-2.0 - log(sum))) < 1e-6,
          NULL);
    api_logprob(logits, 8, 0, 20, &p);
    check("logprobs: top k beyond the vocabulary lists it all, sorted",
          p.n_top == 8 && p.top_id[7] == 2 && p.top_id[6] == 6, NULL);
}

/* Tool call arguments in the model's bytes (not always UTF-8) written as a JSON object. */
static void test_arguments(void) {
    JsonWriter w;
    jw_init(&w);
    const char *args = "{\"city\": \"Par\xff" "is\", \"n\": [1, 2.5]}";
    api_write_arguments(&w, args, strlen(args));
    size_t n;
    const char *t = jw_text(&w, &n);
    JsonDoc *d = t ? json_parse(t, n, NULL, 0) : NULL;
    check("tool arguments with a byte that is not UTF-8: a valid JSON object, the byte as U+FFFD, "
          "numbers kept",
          d && json_eq_str(json_get(json_root(d), "city"), "Par\xef\xbf\xbdis") &&
              json_num(json_at(json_get(json_root(d), "n"), 1)) == 2.5,
          t);
    json_free(d);
    jw_free(&w);
}

/* ---- routes and error shapes ----------------------------------------------------------------- */

static void test_routes(void) {
    int gen;
    check("routes: each generation endpoint's skin, with and without /v1",
          api_skin_for_path("/v1/messages", &gen) == &ANTHROPIC_MESSAGES && gen &&
              api_skin_for_path("/v1/messages/count_tokens", &gen) == &ANTHROPIC_COUNT && gen &&
              api_skin_for_path("/responses", &gen) == &OPENAI_RESPONSES && gen &&
              api_skin_for_path("/api/chat", &gen) == &OLLAMA_CHAT && gen &&
              api_skin_for_path("/api/generate", &gen) == &OLLAMA_GENERATE && gen &&
              api_skin_for_path("/v1/chat/completions", &gen) == &OPENAI_CHAT && gen,
          NULL);
    check("routes: other paths answer errors in their API family's shape",
          api_skin_for_path("/v1/messages/batches", &gen) == &ANTHROPIC_MESSAGES && !gen &&
              api_skin_for_path("/api/pull", &gen) == &OLLAMA_CHAT && !gen &&
              api_skin_for_path("/v1/embeddings", &gen) == &OPENAI_CHAT && !gen,
          NULL);
    ChatOptions o = srv.chat;
    check("effort levels: none off; minimal, low, medium, high → High; xhigh, max → Max; others "
          "refused",
          !api_effort_level("none", &o) && !o.thinking && !api_effort_level("medium", &o) &&
              o.thinking && !strcmp(o.reasoning_effort, "high") && !api_effort_level("xhigh", &o) &&
              !strcmp(o.reasoning_effort, "max") && api_effort_level("extreme", &o) == -1,
          NULL);
}

/* CORS: which Origin a setting allows. */
static void test_cors(void) {
    HttpRequest req;
    memset(&req, 0, sizeof req);
    req.nheaders = 1;
    req.headers[0] = (HttpHeader){ "Origin", "http://b.example" };
    settings.cors = "http://a.example, http://b.example";
    const char *got = server_cors_origin(&srv, &req);
    int ok = got && !strcmp(got, "http://b.example");
    req.headers[0].value = "http://b.example.evil";
    ok = ok && !server_cors_origin(&srv, &req);
    settings.cors = "*";
    ok = ok && (got = server_cors_origin(&srv, &req)) && !strcmp(got, "*");
    settings.cors = "";
    ok = ok && !server_cors_origin(&srv, &req);
    req.nheaders = 0;
    settings.cors = "*";
    ok = ok && !server_cors_origin(&srv, &req);
    settings.cors = NULL;
    check("CORS: a listed origin is allowed (spaces around commas), a longer one is not, * allows "
          "any, off or no Origin: none",
          ok, NULL);
}

/* parallel_tool_calls false (Anthropic: disable_parallel_tool_use) with tool_choice auto: nothing
   forces a call, so the answer is not shaped by a grammar, but it ends after its first call. */
static void test_one_call(void) {
    char body[2000];
    snprintf(body, sizeof body,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"}], "
             "\"parallel_tool_calls\": false, \"tools\": %s}", TOOLS_JSON);
    char *got = run_answer(&OPENAI_CHAT, body);
    JsonDoc *d = json_parse(got, strlen(got), NULL, 0);
    const JsonValue *choice = json_at(json_get(json_root(d), "choices"), 0),
                    *calls = json_get(json_get(choice, "message"), "tool_calls");
    check("chat, parallel_tool_calls false under auto: the first call only, finish tool_calls",
          d && json_len(calls) == 1 &&
              json_eq_str(json_get(json_get(json_at(calls, 0), "function"), "name"),
                          "get_weather") &&
              json_eq_str(json_get(choice, "finish_reason"), "tool_calls"),
          got);
    json_free(d);
    snprintf(body, sizeof body,
             "{\"max_tokens\": 100, \"tool_choice\": {\"type\": \"auto\", "
             "\"disable_parallel_tool_use\": true}, \"tools\": [{\"name\": \"get_weather\", "
             "\"input_schema\": {\"type\": \"object\"}}, {\"name\": \"get_time\", "
             "\"input_schema\": {\"type\": \"object\"}}], "
             "\"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"}]}");
    got = run_answer(&ANTHROPIC_MESSAGES, body);
    d = json_parse(got, strlen(got), NULL, 0);
    const JsonValue *content = json_get(json_root(d), "content");
    check("anthropic, disable_parallel_tool_use under auto: thinking, text and one tool_use",
          d && json_len(content) == 3 &&
              json_eq_str(json_get(json_at(content, 2), "name"), "get_weather") &&
              json_eq_str(json_get(json_root(d), "stop_reason"), "tool_use"),
          got);
    json_free(d);
}

/* A tokenizer without the tool-call tags cannot write a forced call: a 400 naming the tag. */
static void test_forced_without_tags(void) {
    char body[2000];
    snprintf(body, sizeof body,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
             "\"tool_choice\": \"required\", \"tools\": %s}", TOOLS_JSON);
    const int kept = codec.tag[CHAT_TAG_ARG_KEY];
    codec.tag[CHAT_TAG_ARG_KEY] = -1;
    refused(&OPENAI_CHAT, "a forced call with a tokenizer lacking <arg_key>", body, "tool_choice",
            "no <arg_key> token");
    codec.tag[CHAT_TAG_ARG_KEY] = kept;
}

int main(void) {
    server_setup();
    test_anthropic_request();
    test_responses_request();
    test_ollama_request();
    test_anthropic_answer();
    test_responses_answer();
    test_one_call();
    test_forced_without_tags();
    test_ollama_answer();
    test_logprob();
    test_arguments();
    test_routes();
    test_cors();
    codec_free(&codec);
    printf("%s\n", failures ? "some server API tests failed" : "all server API tests passed");
    return failures != 0;
}

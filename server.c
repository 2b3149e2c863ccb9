/* =============================================================================================
   server.c — the server front end: the OpenAI API over HTTP (SERVE=[host:]port)
   http.h does the HTTP: parsing with limits, an I/O thread, the bounded queue (429 + Retry-After
   beyond QUEUE), SSE, the constant-time key compare, SIGINT/SIGTERM. This section maps endpoints
   to the Generator. The I/O thread answers what is cheap (GET /health, GET /v1/models, a missing
   key with 401, unknown paths with 404); completions go to the worker, this thread, one at a time:
   cores and disk are one resource, and a second generation would only slow the first down.

   One completion: the JSON body → ApiRequest (each known field checked for type and range and
   refused by name; unknown fields ignored) → prompt ids (chat: chat.h renders messages and tools
   in the model's form exactly as PROMPT mode does; completions: the raw prompt, where a written
   template tag is its token, as in vLLM) → the Generator. generator_reuse_prefix keeps the
   longest common prefix of the KV cache and prefills the rest, so a client that sends its
   conversation again with one more message prefills only what is new ("prefix reuse" on stderr).
   There is one cache: two clients taking turns evict each other's conversation. Tokens → text
   (tok.h's stream decoder, never half a character) → stop strings (text is held back while it
   could still begin one; the stop text is not returned) → chat.h's output parser
   (reasoning_content, content, tool_calls) → one JSON answer or SSE chunks. A client that disconnects stops its
   generation: between tokens (http_client_gone), and during a prefill, which writes nothing,
   through a watcher thread that raises the Generator's interrupt. Between requests, as between
   chat turns, the I/O thread reads the usage history's hot experts (expert_store_idle). The
   prompt plus max_tokens must fit the cache (CTX, default 4096): otherwise 400
   context_length_exceeded with the numbers.
   Per request: temperature, top_p, seed (defaults TEMPERATURE, NUCLEUS, SEED; with SEED=0 and no
   seed, a new one each time); thinking from chat_template_kwargs.enable_thinking or .thinking
   (vLLM, SGLang) or "thinking": {"type": "enabled"|"disabled"} (Z.ai's API), default THINK;
   reasoning_effort max|high, default REASONING_EFFORT; chat_template_kwargs.clear_thinking=false
   keeps earlier reasoning in the prompt (GLM's preserved thinking).
   ============================================================================================= */

#define API_MAX_STOP 4                  /* stop strings per request (OpenAI's limit) */
#define API_STOP_MAX_BYTES 1024         /* bytes per stop string */

typedef struct {
    const Settings *set;
    const TextCodec *codec;
    ChatOptions chat;                   /* the form (CHAT_FORMAT), thinking and effort defaults */
    Generator *gen;
    const char *model_name;
    int capacity;                       /* KV cache tokens: prompt + max_tokens must fit */
    uint64_t rng;                       /* answer ids, tool call ids, per-request seeds (worker only) */
    volatile sig_atomic_t interrupt;    /* the Generator's interrupt: the client left during a prefill */
    long long created;                  /* start time: the model's "created" */
    const char *session_path;           /* SESSION: the cache is saved there after every answer; NULL: none */
    SessionKey session_key;             /* what a session file must match to be this server's */
} Server;

typedef struct {
    int chat;                           /* /v1/chat/completions; else /v1/completions */
    ChatConv conv;                      /* chat: messages and tools */
    ChatOptions render;                 /* chat: the form with this request's thinking and effort */
    const char *prompt;                 /* completions: the raw prompt (in the request's JSON) */
    size_t prompt_len;
    int max_tokens;                     /* -1: not given */
    SamplerSettings sampling;
    int seed_given;
    const char *stop[API_MAX_STOP];     /* in the request's JSON */
    size_t stop_len[API_MAX_STOP];
    int n_stop;
    int stream, include_usage;
    char *prediction;                   /* "prediction" content joined (xmalloc'd; NULL: none) */
    size_t prediction_len;
} ApiRequest;

typedef struct {
    int status;                         /* 0: none */
    const char *param, *code;           /* the OpenAI error's "param" and "code" (NULL: null) */
    char message[800];
} ApiError;

static int api_fail(ApiError *e, int status, const char *param, const char *code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    e->status = status;
    e->param = param;
    e->code = code;
    return -1;
}

/* ---- request fields: absent or null keeps the default; a wrong type or range is refused by name ---- */

static int api_given(const JsonValue *v) { return v && json_type(v) != JSON_NULL; }

static int api_number(const JsonValue *obj, const char *key, double lo, double hi, double *out, ApiError *e) {
    const JsonValue *v = json_get(obj, key);
    if (!api_given(v)) return 0;
    if (json_type(v) != JSON_NUMBER) return api_fail(e, 400, key, NULL, "\"%s\" must be a number", key);
    double d = json_num(v);
    if (!(d >= lo && d <= hi)) return api_fail(e, 400, key, NULL, "\"%s\" is %g: it must be in [%g, %g]", key, d, lo, hi);
    *out = d;
    return 0;
}

static int api_int(const JsonValue *obj, const char *key, int64_t lo, int64_t hi, int64_t *out, ApiError *e) {
    const JsonValue *v = json_get(obj, key);
    if (!api_given(v)) return 0;
    int64_t i;
    if (!json_is_int(v, &i)) return api_fail(e, 400, key, NULL, "\"%s\" must be an integer", key);
    if (i < lo || i > hi)
        return api_fail(e, 400, key, NULL, "\"%s\" is %lld: it must be in [%lld, %lld]", key, (long long)i, (long long)lo, (long long)hi);
    *out = i;
    return 0;
}

/* A boolean field; param names it in errors (nested fields: "stream_options.include_usage"). */
static int api_bool(const JsonValue *obj, const char *key, const char *param, int *out, ApiError *e) {
    const JsonValue *v = json_get(obj, key);
    if (!api_given(v)) return 0;
    if (json_type(v) != JSON_BOOL) return api_fail(e, 400, param, NULL, "\"%s\" must be true or false", param);
    *out = json_bool(v);
    return 0;
}

static int api_object(const JsonValue *obj, const char *key, const JsonValue **out, ApiError *e) {
    const JsonValue *v = json_get(obj, key);
    *out = NULL;
    if (!api_given(v)) return 0;
    if (json_type(v) != JSON_OBJECT) return api_fail(e, 400, key, NULL, "\"%s\" must be an object", key);
    *out = v;
    return 0;
}

/* reasoning_effort (top level or in chat_template_kwargs): what the GLM-5.2 template knows. */
static int api_effort(const JsonValue *obj, const char *param, const char **effort, ApiError *e) {
    const JsonValue *v = json_get(obj, "reasoning_effort");
    if (!api_given(v)) return 0;
    const char *s = json_str(v, NULL);
    if (!s) return api_fail(e, 400, param, NULL, "\"%s\" must be a string", param);
    if (!chat_effort_valid(s))
        return api_fail(e, 400, param, NULL, "\"%s\" is \"%.40s\": this model knows \"max\" and \"high\"", param, s);
    *effort = s;
    return 0;
}

/* stop: a string or a list of up to 4, none empty. */
static int api_stop(const JsonValue *root, ApiRequest *r, ApiError *e) {
    const JsonValue *v = json_get(root, "stop");
    if (!api_given(v)) return 0;
    const int list = json_type(v) == JSON_ARRAY;
    const size_t n = list ? json_len(v) : 1;
    if (!list && json_type(v) != JSON_STRING) return api_fail(e, 400, "stop", NULL, "\"stop\" must be a string or a list of strings");
    if (n > API_MAX_STOP) return api_fail(e, 400, "stop", NULL, "\"stop\" has %zu strings: at most %d", n, API_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *s = json_str(list ? json_at(v, i) : v, &len);
        if (!s) return api_fail(e, 400, "stop", NULL, "\"stop\"[%zu] must be a string", i);
        if (!len || len > API_STOP_MAX_BYTES)
            return api_fail(e, 400, "stop", NULL, "\"stop\"[%zu] has %zu bytes: it must have 1 to %d", i, len, API_STOP_MAX_BYTES);
        r->stop[r->n_stop] = s;
        r->stop_len[r->n_stop++] = len;
    }
    return 0;
}

/* Fields that change what a completion is, which this server does not do: refused rather than ignored. */
static int api_unsupported(const JsonValue *root, int chat, ApiError *e) {
    int64_t one = 1, zero = 0;
    int flag = 0;
    double penalty = 0;
    const JsonValue *v;
    if (api_int(root, "n", 1, 1, &one, e)) return -1;
    /* logprobs false (chat) or 0 (completions) ask for none, as leaving them out does */
    const char *const logprobs[] = { "logprobs", "top_logprobs" };
    for (int i = 0; i < 2; i++)
        if (api_given(v = json_get(root, logprobs[i])) && !(json_type(v) == JSON_BOOL && !json_bool(v)) &&
            !(json_is_int(v, &zero) && zero == 0))
            return api_fail(e, 400, logprobs[i], NULL, "\"%s\" is not supported", logprobs[i]);
    const char *const penalties[] = { "frequency_penalty", "presence_penalty" };
    for (int i = 0; i < 2; i++) {
        if (api_number(root, penalties[i], -2, 2, &penalty, e)) return -1;
        if (penalty != 0) return api_fail(e, 400, penalties[i], NULL, "\"%s\" is not supported (only 0)", penalties[i]);
    }
    if (api_given(v = json_get(root, "logit_bias")) && (json_type(v) != JSON_OBJECT || json_len(v)))
        return api_fail(e, 400, "logit_bias", NULL, "\"logit_bias\" is not supported");
    const JsonValue *format;
    if (api_object(root, "response_format", &format, e)) return -1;
    const char *type = format ? json_str(json_get(format, "type"), NULL) : NULL;
    if (format && (!type || strcmp(type, "text")))
        return api_fail(e, 400, "response_format", NULL, "\"response_format\" %s%.40s%s is not supported (no constrained decoding; only \"text\")",
                        type ? "\"" : "", type ? type : "without a type", type ? "\"" : "");
    if (chat) return 0;
    if (api_bool(root, "echo", "echo", &flag, e)) return -1;
    if (flag) return api_fail(e, 400, "echo", NULL, "\"echo\" is not supported");
    size_t len = 0;
    if (api_given(v = json_get(root, "suffix")) && (!json_str(v, &len) || len))
        return api_fail(e, 400, "suffix", NULL, "\"suffix\" is not supported");
    return api_int(root, "best_of", 1, 1, &one, e);
}

/* The chat-only fields: messages, tools, tool_choice, thinking, reasoning effort. */
static int api_chat_fields(const Server *srv, const JsonValue *root, ApiRequest *r, ApiError *e) {
    char err[600];
    ChatOptions *o = &r->render;
    *o = srv->chat;
    int use_tools = 1;
    const JsonValue *v = json_get(root, "tool_choice");
    if (api_given(v)) {
        const char *choice = json_str(v, NULL);
        if (!choice) return api_fail(e, 400, "tool_choice", NULL, "\"tool_choice\" naming a function is not supported (\"auto\" or \"none\")");
        if (!strcmp(choice, "none")) use_tools = 0;
        else if (strcmp(choice, "auto"))
            return api_fail(e, 400, "tool_choice", NULL, "\"tool_choice\" \"%.40s\" is not supported (\"auto\" or \"none\")", choice);
    }
    /* thinking: {"type": "enabled" | "disabled"} (Z.ai's API) or a boolean */
    if (api_given(v = json_get(root, "thinking"))) {
        const char *type = json_str(json_get(v, "type"), NULL);
        if (json_type(v) == JSON_BOOL) o->thinking = json_bool(v);
        else if (type && (!strcmp(type, "enabled") || !strcmp(type, "disabled"))) o->thinking = !strcmp(type, "enabled");
        else return api_fail(e, 400, "thinking", NULL, "\"thinking\" must be {\"type\": \"enabled\"} or {\"type\": \"disabled\"}");
    }
    if (api_effort(root, "reasoning_effort", &o->reasoning_effort, e)) return -1;
    const JsonValue *kwargs;
    if (api_object(root, "chat_template_kwargs", &kwargs, e)) return -1;
    int clear = !o->keep_reasoning;
    if (kwargs && (api_bool(kwargs, "enable_thinking", "chat_template_kwargs.enable_thinking", &o->thinking, e) ||
                   api_bool(kwargs, "thinking", "chat_template_kwargs.thinking", &o->thinking, e) ||
                   api_bool(kwargs, "clear_thinking", "chat_template_kwargs.clear_thinking", &clear, e) ||
                   api_effort(kwargs, "chat_template_kwargs.reasoning_effort", &o->reasoning_effort, e)))
        return -1;
    o->keep_reasoning = !clear;
    const JsonValue *messages = json_get(root, "messages");
    if (json_type(messages) != JSON_ARRAY || !json_len(messages))
        return api_fail(e, 400, "messages", NULL, "\"messages\" must be a non-empty list");
    if (use_tools && chat_conv_parse_tools(&r->conv, json_get(root, "tools"), err, sizeof err))
        return api_fail(e, 400, "tools", NULL, "%s", err);
    if (chat_conv_parse(&r->conv, messages, err, sizeof err)) return api_fail(e, 400, "messages", NULL, "messages: %s", err);
    return 0;
}

/* OpenAI's predicted output: {"type": "content", "content": a string or a list of text parts}, the
   text the answer is expected to mostly repeat (an edited file, say). Its tokens become a drafter
   for speculative decoding (predicted_output_draft), so a prediction can make an answer faster,
   never different. */
static int api_prediction(const JsonValue *root, ApiRequest *r, ApiError *e) {
    const JsonValue *p;
    if (api_object(root, "prediction", &p, e) || !p) return e->status ? -1 : 0;
    const char *type = json_str(json_get(p, "type"), NULL);
    if (!type || strcmp(type, "content"))
        return api_fail(e, 400, "prediction", NULL, "\"prediction\" must be {\"type\": \"content\", \"content\": ...}");
    const JsonValue *content = json_get(p, "content");
    const int parts = json_type(content) == JSON_ARRAY ? (int)json_len(content) : -1;
    size_t total = 0, n;
    if (parts < 0 && !json_str(content, &total))
        return api_fail(e, 400, "prediction", NULL, "\"prediction\".content must be a string or a list of text parts");
    for (int i = 0; i < parts; i++) {
        const JsonValue *part = json_at(content, (size_t)i);
        const char *part_type = json_str(json_get(part, "type"), NULL);
        if (!part_type || strcmp(part_type, "text") || !json_str(json_get(part, "text"), &n))
            return api_fail(e, 400, "prediction", NULL, "\"prediction\".content part %d must be {\"type\": \"text\", \"text\": ...}", i);
        total += n;
    }
    r->prediction = xmalloc(total + 1);
    if (parts < 0) memcpy(r->prediction, json_str(content, NULL), total);
    size_t at = 0;
    for (int i = 0; i < parts; i++) {
        const char *text = json_str(json_get(json_at(content, (size_t)i), "text"), &n);
        memcpy(r->prediction + at, text, n);
        at += n;
    }
    r->prediction[total] = 0;
    r->prediction_len = total;
    return 0;
}

static void api_request_free(ApiRequest *r) {
    chat_conv_free(&r->conv);
    free(r->prediction);
    r->prediction = NULL;
}

/* The request body → ApiRequest (api_request_free frees it, whatever the outcome). */
static int api_request_parse(const Server *srv, const JsonValue *root, int chat, ApiRequest *r, ApiError *e) {
    const Settings *set = srv->set;
    r->chat = chat;
    r->max_tokens = -1;
    r->sampling = (SamplerSettings){ set->temperature, set->top_p, set->seed };
    const JsonValue *v = json_get(root, "model");
    if (api_given(v) && json_type(v) != JSON_STRING) return api_fail(e, 400, "model", NULL, "\"model\" must be a string");
    int64_t max_tokens = -1, max_completion_tokens = -1, seed = 0;
    double temperature = r->sampling.temperature, top_p = r->sampling.top_p;
    if (api_int(root, "max_tokens", 1, INT32_MAX, &max_tokens, e) ||
        api_int(root, "max_completion_tokens", 1, INT32_MAX, &max_completion_tokens, e) ||
        api_number(root, "temperature", 0, 100, &temperature, e) || api_number(root, "top_p", 0, 1, &top_p, e) ||
        api_int(root, "seed", INT64_MIN, INT64_MAX, &seed, e) || api_stop(root, r, e) ||
        api_bool(root, "stream", "stream", &r->stream, e) || api_unsupported(root, chat, e) || api_prediction(root, r, e))
        return -1;
    r->max_tokens = (int)(max_completion_tokens >= 0 ? max_completion_tokens : max_tokens);
    r->sampling.temperature = (float)temperature;
    r->sampling.top_p = (float)top_p;
    r->seed_given = api_given(json_get(root, "seed"));
    if (r->seed_given) r->sampling.seed = (uint64_t)seed;
    const JsonValue *options;
    if (api_object(root, "stream_options", &options, e) ||
        (options && api_bool(options, "include_usage", "stream_options.include_usage", &r->include_usage, e)))
        return -1;
    if (chat) return api_chat_fields(srv, root, r, e);
    v = json_get(root, "prompt");
    if (json_type(v) == JSON_ARRAY && json_len(v) == 1) v = json_at(v, 0);   /* ["text"]: one prompt */
    if (!(r->prompt = json_str(v, &r->prompt_len)))
        return api_fail(e, 400, "prompt", NULL, "\"prompt\" must be a string (one prompt per request)");
    if (!r->prompt_len) return api_fail(e, 400, "prompt", NULL, "\"prompt\" is empty: there is no token to continue from");
    return 0;
}

/* The prompt's ids, then the room it leaves: 0 and *limit (max_tokens for the Generator, -1: until
   EOS or a full cache), or -1 with a 400. */
static int api_prompt_ids(const Server *srv, ApiRequest *r, TokenList *ids, int *limit, ApiError *e) {
    if (r->chat) {
        char err[5000];
        if (chat_to_ids(srv->codec, &r->conv, &r->render, ids, err, sizeof err)) return api_fail(e, 400, "messages", NULL, "%s", err);
    } else {
        TextCodec raw = *srv->codec;     /* a raw prompt is written in the model's own terms: tags are tags */
        raw.text_mode = TOK_SPECIAL_ALL;
        tokens_push_text(ids, &raw, r->prompt, r->prompt_len);
    }
    const int room = srv->capacity - ids->n;
    if (room < 1)
        return api_fail(e, 400, r->chat ? "messages" : "prompt", "context_length_exceeded",
                        "context length exceeded: the prompt has %d tokens and this server's context holds %d (CTX), "
                        "leaving no room for an answer", ids->n, srv->capacity);
    if (r->max_tokens > room)
        return api_fail(e, 400, "max_tokens", "context_length_exceeded",
                        "context length exceeded: this server's context holds %d tokens (CTX) but the request needs %lld "
                        "(%d in the prompt, max_tokens %d); shorten the messages or lower max_tokens",
                        srv->capacity, (long long)ids->n + r->max_tokens, ids->n, r->max_tokens);
    *limit = r->max_tokens >= 0 ? r->max_tokens : srv->set->ngen;
    return 0;
}

/* ---- the answer: tokens → text → stop strings → reasoning / content / tool calls → JSON -------- */

typedef struct {
    Server *srv;
    HttpResponse *res;
    const ApiRequest *req;
    char id[48];
    long long created;
    TokStream tokens;                   /* token → text */
    char *text;
    size_t text_cap;
    char *held;                         /* text that may still begin a stop string */
    size_t held_len, held_cap;
    int stop_hit;                       /* a stop string ended the answer */
    ChatOutParser *parser;              /* chat: reasoning, content, tool calls */
    ChatOutput out;                     /* everything released so far, parsed (completions: content) */
    char (*call_ids)[32];               /* the id of each tool call in out.calls */
} Reply;

static void server_new_id(Server *srv, const char *prefix, char *dst, size_t n) {
    const uint64_t a = splitmix64_next(&srv->rng), b = splitmix64_next(&srv->rng);
    snprintf(dst, n, "%s%016llx%08llx", prefix, (unsigned long long)a, (unsigned long long)(b >> 32));
}

/* The fields every answer and chunk starts with. */
static void api_write_head(JsonWriter *w, const Reply *r, const char *object) {
    jw_kstr(w, "id", r->id);
    jw_kstr(w, "object", object);
    jw_kint(w, "created", r->created);
    jw_kstr(w, "model", r->srv->model_name);
}

typedef struct {
    int prompt, completion, cached;     /* cached: the prefix kept in the KV cache */
    int predicted;                      /* a prediction was given: then its drafts' fate below */
    long long accepted_prediction, rejected_prediction;
} ApiUsage;

static void api_write_usage(JsonWriter *w, const ApiUsage *u) {
    jw_key(w, "usage");
    jw_obj(w);
    jw_kint(w, "prompt_tokens", u->prompt);
    jw_kint(w, "completion_tokens", u->completion);
    jw_kint(w, "total_tokens", u->prompt + u->completion);
    jw_key(w, "prompt_tokens_details");
    jw_obj(w);
    jw_kint(w, "cached_tokens", u->cached);
    jw_obj_end(w);
    if (u->predicted) {   /* OpenAI's names: drafted tokens of the prediction kept, and not kept */
        jw_key(w, "completion_tokens_details");
        jw_obj(w);
        jw_kint(w, "accepted_prediction_tokens", u->accepted_prediction);
        jw_kint(w, "rejected_prediction_tokens", u->rejected_prediction);
        jw_obj_end(w);
    }
    jw_obj_end(w);
}

/* One tool call as OpenAI writes it; index >= 0 for a streamed delta. */
static void api_write_tool_call(JsonWriter *w, int index, const char *id, const char *name, size_t name_len,
                                const char *arguments, size_t arguments_len) {
    jw_obj(w);
    if (index >= 0) jw_kint(w, "index", index);
    jw_kstr(w, "id", id);
    jw_kstr(w, "type", "function");
    jw_key(w, "function");
    jw_obj(w);
    jw_key(w, "name");
    jw_strn(w, name, name_len);
    jw_key(w, "arguments");                       /* a JSON object, sent as a string (OpenAI's form) */
    jw_strn(w, arguments, arguments_len);
    jw_obj_end(w);
    jw_obj_end(w);
}

/* The message of a whole chat answer: content (null when there is only tool calls), reasoning_content
   (null when there is none), tool_calls (when there are some). */
static void api_write_message(JsonWriter *w, const ChatOutput *o, char (*call_ids)[32]) {
    jw_obj(w);
    jw_kstr(w, "role", "assistant");
    jw_key(w, "content");
    if (o->content_len || !o->n_calls) jw_strn(w, o->content ? o->content : "", o->content_len);
    else jw_null(w);
    jw_key(w, "reasoning_content");
    if (o->reasoning_len) jw_strn(w, o->reasoning, o->reasoning_len);
    else jw_null(w);
    if (o->n_calls) {
        jw_key(w, "tool_calls");
        jw_arr(w);
        for (int i = 0; i < o->n_calls; i++)
            api_write_tool_call(w, -1, call_ids[i], o->calls[i].name, o->calls[i].name_len, o->calls[i].arguments,
                                o->calls[i].arguments_len);
        jw_arr_end(w);
    }
    jw_obj_end(w);
}

static int reply_send(Reply *r, JsonWriter *w) {
    size_t n;
    const char *t = jw_text(w, &n);
    if (!t) die("internal: a streamed chunk is not valid JSON");
    int rc = http_sse_event(r->res, t, n);
    jw_free(w);
    return rc;
}

/* A streamed chunk: a chat delta (role first; then reasoning_content, content or one tool call;
   ev NULL and finish set: the last one) or a completion's text. */
static void reply_send_chunk(Reply *r, const ChatOutEvent *ev, int call_index, int role, const char *finish) {
    JsonWriter w;
    jw_init(&w);
    jw_obj(&w);
    api_write_head(&w, r, r->req->chat ? "chat.completion.chunk" : "text_completion");
    jw_key(&w, "choices");
    jw_arr(&w);
    jw_obj(&w);
    jw_kint(&w, "index", 0);
    if (r->req->chat) {
        jw_key(&w, "delta");
        jw_obj(&w);
        if (role) { jw_kstr(&w, "role", "assistant"); jw_kstr(&w, "content", ""); }
        if (ev && ev->kind == CHAT_OUT_TOOL_CALL) {
            jw_key(&w, "tool_calls");
            jw_arr(&w);
            api_write_tool_call(&w, call_index, r->call_ids[call_index], ev->name, ev->name_len, ev->arguments, ev->arguments_len);
            jw_arr_end(&w);
        } else if (ev) {
            jw_key(&w, ev->kind == CHAT_OUT_REASONING ? "reasoning_content" : "content");
            jw_strn(&w, ev->text, ev->len);
        }
        jw_obj_end(&w);
    } else {
        jw_key(&w, "text");
        jw_strn(&w, ev ? ev->text : "", ev ? ev->len : 0);
    }
    jw_key(&w, "logprobs");
    jw_null(&w);
    jw_key(&w, "finish_reason");
    if (finish) jw_str(&w, finish);
    else jw_null(&w);
    jw_obj_end(&w);
    jw_arr_end(&w);
    jw_obj_end(&w);
    reply_send(r, &w);
}

/* Each piece of the answer, in order: kept for the whole answer (and the log), streamed at once. */
static int reply_event(void *user, const ChatOutEvent *ev) {
    Reply *r = user;
    if (chat_output_add(&r->out, ev)) die("out of memory for the answer");
    const int call = r->out.n_calls - 1;
    if (ev->kind == CHAT_OUT_TOOL_CALL) {
        char (*grown)[32] = realloc(r->call_ids, (size_t)r->out.n_calls * sizeof *grown);
        if (!grown) die("out of memory for the answer");
        r->call_ids = grown;
        server_new_id(r->srv, "call_", r->call_ids[call], sizeof r->call_ids[call]);
    }
    if (r->req->stream) reply_send_chunk(r, ev, call, 0, NULL);
    return 0;
}

/* Text past the stop strings: to the output parser (chat) or as it is (completions). */
static void reply_release(Reply *r, const char *s, size_t n) {
    if (!n) return;
    if (!r->parser) {
        ChatOutEvent ev = { CHAT_OUT_CONTENT, s, n, NULL, NULL, 0, 0 };
        reply_event(r, &ev);
    } else if (chat_out_feed(r->parser, s, n, reply_event, r)) {
        die("out of memory parsing the answer");
    }
}

/* Decoded text of the answer, matched against the stop strings across token boundaries: the answer
   ends at the first stop string to complete (when several complete with the same token, the one
   that starts first), and only the text before it is released; text that may still begin a stop
   string (the longest suffix that is a proper prefix of one) is held back until it cannot. */
static void reply_text(Reply *r, const char *s, size_t n) {
    const ApiRequest *q = r->req;
    if (r->stop_hit || !n) return;
    if (!q->n_stop) { reply_release(r, s, n); return; }
    if (r->held_len + n + 1 > r->held_cap) {
        r->held_cap = 2 * (r->held_len + n + 1);
        char *grown = realloc(r->held, r->held_cap);
        if (!grown) die("out of memory for the answer");
        r->held = grown;
    }
    memcpy(r->held + r->held_len, s, n);
    r->held_len += n;
    size_t cut = SIZE_MAX;
    for (int k = 0; k < q->n_stop; k++) {
        const char *at = memmem(r->held, r->held_len, q->stop[k], q->stop_len[k]);
        if (at && (size_t)(at - r->held) < cut) cut = (size_t)(at - r->held);
    }
    if (cut != SIZE_MAX) {
        r->stop_hit = 1;
        reply_release(r, r->held, cut);
        r->held_len = 0;
        return;
    }
    size_t keep = 0;
    for (int k = 0; k < q->n_stop; k++)
        for (size_t len = q->stop_len[k] - 1 < r->held_len ? q->stop_len[k] - 1 : r->held_len; len > keep; len--)
            if (!memcmp(r->held + r->held_len - len, q->stop[k], len)) { keep = len; break; }
    reply_release(r, r->held, r->held_len - keep);
    memmove(r->held, r->held + r->held_len - keep, keep);
    r->held_len = keep;
}

/* The Generator's on_token. */
static void reply_token(void *user, int id) {
    Reply *r = user;
    size_t n = tok_stream_feed(r->srv->codec->tok, &r->tokens, id, r->text, r->text_cap);
    reply_text(r, r->text, n < r->text_cap ? n : r->text_cap);
}

/* The end of the text: an unfinished UTF-8 character becomes U+FFFD (as PROMPT mode prints it),
   held-back text that never became a stop string is released, the parser says what it kept. */
static void reply_text_end(Reply *r) {
    size_t n = tok_stream_flush(&r->tokens, r->text, r->text_cap);
    reply_text(r, r->text, n < r->text_cap ? n : r->text_cap);
    if (!r->stop_hit) reply_release(r, r->held, r->held_len);
    r->held_len = 0;
    if (r->parser && chat_out_finish(r->parser, reply_event, r)) die("out of memory parsing the answer");
}

static void reply_init(Reply *r, Server *srv, HttpResponse *res, const ApiRequest *q) {
    memset(r, 0, sizeof *r);
    r->srv = srv;
    r->res = res;
    r->req = q;
    server_new_id(srv, q->chat ? "chatcmpl-" : "cmpl-", r->id, sizeof r->id);
    r->created = (long long)time(NULL);
    tok_stream_init(&r->tokens);
    r->text_cap = tok_stream_out_cap(srv->codec->tok);
    r->text = xmalloc(r->text_cap);
    if (q->chat && !(r->parser = chat_out_new(q->render.thinking, &q->conv))) die("out of memory");
}

static void reply_free(Reply *r) {
    free(r->text);
    free(r->held);
    chat_out_free(r->parser);
    chat_output_free(&r->out);
    free(r->call_ids);
    memset(r, 0, sizeof *r);
}

/* finish_reason: "length" when max_tokens or the cache ended the answer, else "tool_calls" when it
   called tools, else "stop" (an EOS token or a stop string). */
static const char *reply_finish_reason(const Reply *r, StopReason stop) {
    if (!r->stop_hit && (stop == STOP_LIMIT || stop == STOP_CONTEXT)) return "length";
    return r->out.n_calls ? "tool_calls" : "stop";
}

/* The whole answer as one JSON object (stream: false). */
static void api_write_answer(JsonWriter *w, const Reply *r, const char *finish, const ApiUsage *usage) {
    jw_obj(w);
    api_write_head(w, r, r->req->chat ? "chat.completion" : "text_completion");
    jw_key(w, "choices");
    jw_arr(w);
    jw_obj(w);
    jw_kint(w, "index", 0);
    if (r->req->chat) {
        jw_key(w, "message");
        api_write_message(w, &r->out, r->call_ids);
    } else {
        jw_key(w, "text");
        jw_strn(w, r->out.content ? r->out.content : "", r->out.content_len);
    }
    jw_key(w, "logprobs");
    jw_null(w);
    jw_kstr(w, "finish_reason", finish);
    jw_obj_end(w);
    jw_arr_end(w);
    api_write_usage(w, usage);
    jw_obj_end(w);
}

/* ---- watching the client while a prefill writes nothing ---------------------------------------- */

typedef struct {
    HttpResponse *res;
    volatile sig_atomic_t *interrupt;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, running;
    pthread_t thread;
} ClientWatch;

static void *client_watch_main(void *arg) {
    ClientWatch *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->done) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        /* the worker does not touch the response until it has joined this thread */
        if (!w->done && http_client_gone(w->res)) { *w->interrupt = 1; break; }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void client_watch_start(ClientWatch *w, HttpResponse *res, volatile sig_atomic_t *interrupt) {
    memset(w, 0, sizeof *w);
    w->res = res;
    w->interrupt = interrupt;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->running = pthread_create(&w->thread, NULL, client_watch_main, w) == 0;   /* without it: noticed after the prefill */
}

static void client_watch_stop(ClientWatch *w) {
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (w->running) pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

/* ---- the endpoints ----------------------------------------------------------------------------- */

/* One line per request on stderr: method, path, status, what happened, seconds. */
static void server_log(const HttpRequest *req, int status, double t0, const char *fmt, ...) {
    char what[1000] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
    }
    fprintf(stderr, "glm: %s %s %d%s%s | %.3f s\n", req->method, req->path, status, what[0] ? " | " : "", what, now_seconds() - t0);
}

static void server_respond_error(const HttpRequest *req, HttpResponse *res, const ApiError *e, double t0) {
    http_respond_error_ex(res, e->status, e->message, e->param, e->code);
    server_log(req, e->status, t0, "%s", e->message);
}

/* "/v1/models" and "/models" are the same endpoint (clients differ in whether the base URL ends in /v1). */
static const char *api_route(const char *path) { return !strncmp(path, "/v1/", 4) ? path + 3 : path; }

static void api_write_model(JsonWriter *w, const Server *srv) {
    jw_obj(w);
    jw_kstr(w, "id", srv->model_name);
    jw_kstr(w, "object", "model");
    jw_kint(w, "created", srv->created);
    jw_kstr(w, "owned_by", "glm.c");
    jw_kint(w, "max_model_len", srv->capacity);   /* vLLM's field: the context (CTX) */
    jw_obj_end(w);
}

static void server_respond_writer(HttpResponse *res, JsonWriter *w) {
    size_t n;
    const char *t = jw_text(w, &n);
    if (!t) die("internal: an answer is not valid JSON");
    http_respond_json(res, 200, t, n);
    jw_free(w);
}

/* web.c (included after this file): the page at GET /, the figures at GET /stats, and the
   observers that feed them (called around each answer). */
static int web_quick(const Server *srv, const HttpRequest *req, HttpResponse *res);
static void web_request_begin(Server *srv, int prompt_tokens);
static void web_request_end(Server *srv);

/* The I/O thread's part: everything that needs no model. Returns 0 to hand a completion to the worker. */
static int server_quick(const HttpRequest *req, HttpResponse *res, void *user) {
    const Server *srv = user;
    if (web_quick(srv, req, res)) return 1;   /* web.c: GET / (the page) and GET /stats */
    const double t0 = now_seconds();
    const char *route = api_route(req->path);
    const int get = !strcmp(req->method, "GET") || !strcmp(req->method, "HEAD");
    const int completion = !strcmp(route, "/chat/completions") || !strcmp(route, "/completions");
    ApiError e = { 0 };
    if (!strcmp(req->path, "/health")) {   /* open without a key: for load balancers and scripts */
        if (!get) api_fail(&e, 405, NULL, NULL, "/health takes GET");
        else {
            static const char ok[] = "{\"status\":\"ok\"}";
            http_respond_json(res, 200, ok, sizeof ok - 1);
            server_log(req, 200, t0, NULL);
            return 1;
        }
    } else if (!http_auth_ok(req, srv->set->api_key)) {
        api_fail(&e, 401, NULL, "invalid_api_key", "missing or wrong API key (send Authorization: Bearer KEY or x-api-key: KEY)");
    } else if (completion) {
        if (!strcmp(req->method, "POST")) return 0;
        api_fail(&e, 405, NULL, NULL, "%s takes POST", req->path);
    } else if (!strcmp(route, "/models") || !strncmp(route, "/models/", 8)) {
        if (!get) api_fail(&e, 405, NULL, NULL, "%s takes GET", req->path);
        else if (route[7] == '/' && strcmp(route + 8, srv->model_name))
            api_fail(&e, 404, "model", "model_not_found", "no model \"%.200s\" here: this server has \"%s\"", route + 8, srv->model_name);
        else {
            JsonWriter w;
            jw_init(&w);
            if (route[7] == '/') api_write_model(&w, srv);
            else {
                jw_obj(&w);
                jw_kstr(&w, "object", "list");
                jw_key(&w, "data");
                jw_arr(&w);
                api_write_model(&w, srv);
                jw_arr_end(&w);
                jw_obj_end(&w);
            }
            server_respond_writer(res, &w);
            server_log(req, 200, t0, NULL);
            return 1;
        }
    } else {
        api_fail(&e, 404, NULL, NULL, "no endpoint %.200s (this server has /v1/chat/completions, /v1/completions, /v1/models and /health)",
                 req->path);
    }
    if (e.status == 405) http_add_header(res, "Allow", completion ? "POST" : "GET, HEAD");
    server_respond_error(req, res, &e, t0);
    return 1;
}

/* One completion after its request was read: prefill (reusing the cached prefix), generate, answer. */
/* A request's predicted output as a drafter (Speculation's caller). The answer usually follows the
   prediction with edits: the answer's last tokens (up to NGRAM_LONGEST of them, then fewer) are
   looked up in the prediction from where the last match ended (else from its start), and what
   follows there is drafted. Verification keeps what the model would have said anyway. */
typedef struct {
    const int *ids;
    int n;
    int answer_start;                   /* the history position of the answer's first token */
    int cursor;                         /* where in ids the last match ended */
} PredictedOutput;

static int predicted_output_draft(void *user, const int *history, int n, int k, int *out) {
    PredictedOutput *p = user;
    const int *answer = history + p->answer_start;
    const int len = n - p->answer_start;   /* answer tokens so far, the one just sampled included */
    for (int m = len < NGRAM_LONGEST ? len : NGRAM_LONGEST; m >= 1; m--) {
        const int tail = len - m;
        for (int pass = 0; pass < 2; pass++) {
            const int from = pass == 0 ? (p->cursor > m ? p->cursor - m : 0) : 0;
            const int to = pass == 0 ? p->n - m : (p->cursor - m < p->n - m ? p->cursor - m : p->n - m);
            for (int start = from; start <= to; start++) {
                if (memcmp(p->ids + start, answer + tail, (size_t)m * sizeof(int))) continue;
                p->cursor = start + m;
                int count = 0;
                while (count < k && p->cursor + count < p->n) { out[count] = p->ids[p->cursor + count]; count++; }
                return count;
            }
        }
    }
    return 0;
}

static void server_answer(Server *srv, const HttpRequest *req, HttpResponse *res, const ApiRequest *q, const TokenList *ids,
                          int limit, double t0) {
    Generator *g = srv->gen;
    generator_set_sampling(g, q->sampling);
    g->stop_rules.max_tokens = limit;
    g->stop_rules.resumable = 0;   /* the last token's forward is skipped; the next request re-runs at most that one */
    Reply r;
    reply_init(&r, srv, res, q);
    g->on_token = reply_token;
    g->on_token_user = &r;
    web_request_begin(srv, ids->n);   /* web.c: /stats follows this answer (wraps on_token) */
    srv->interrupt = 0;
    g->interrupt = &srv->interrupt;

    ClientWatch watch;
    client_watch_start(&watch, res, &srv->interrupt);
    int reused = 0;
    const int prefilled = generator_reuse_prefix(g, ids->ids, ids->n, &reused) == ids->n;
    client_watch_stop(&watch);
    fprintf(stderr, "glm: prefix reuse: %d of %d prompt tokens\n", reused, ids->n);
    int gone = !prefilled;
    if (!gone && q->stream) {
        http_sse_begin(res);
        if (q->chat) reply_send_chunk(&r, NULL, 0, 1, NULL);
    }
    generator_begin(g);
    TokenList predicted = { 0 };
    PredictedOutput prediction = { 0 };
    if (q->prediction && g->spec.mode != SPEC_OFF) {   /* text as in a message: a written tag is text */
        tokens_push_text(&predicted, srv->codec, q->prediction, q->prediction_len);
        prediction = (PredictedOutput){ predicted.ids, predicted.n, ids->n, 0 };
        g->spec.caller = predicted_output_draft;
        g->spec.caller_user = &prediction;
        drafter_restart(&g->spec, DRAFTER_CALLER);   /* another prediction: its acceptance is unknown again */
    }
    const SpecCounts spec_before = spec_counts(g);
    int run[64];   /* a step may return a run of ids (speculation); on_token has seen each of them */
    while (!gone && !r.stop_hit && generator_step(g, run, (int)(sizeof run / sizeof run[0])) > 0)
        gone = http_client_gone(res);
    g->on_token = NULL;
    g->interrupt = NULL;
    g->spec.caller = NULL;
    g->spec.caller_user = NULL;
    free(predicted.ids);
    const SpecCounts spec_after = spec_counts(g);
    const ApiUsage usage = { ids->n, g->generated, reused, q->prediction != NULL,
                             spec_after.accepted[DRAFTER_CALLER] - spec_before.accepted[DRAFTER_CALLER],
                             (spec_after.drafted[DRAFTER_CALLER] - spec_before.drafted[DRAFTER_CALLER]) -
                                 (spec_after.accepted[DRAFTER_CALLER] - spec_before.accepted[DRAFTER_CALLER]) };
    if (gone) {
        /* The client left, or the server is stopping: end properly in case someone still listens. */
        static const char why[] = "the generation was stopped (the client left or the server is stopping)";
        int status = 200;
        if (q->stream && prefilled) {
            JsonWriter w;
            jw_init(&w);
            jw_obj(&w);
            jw_key(&w, "error");
            jw_obj(&w);
            jw_kstr(&w, "message", why);
            jw_kstr(&w, "type", "server_error");
            jw_obj_end(&w);
            jw_obj_end(&w);
            reply_send(&r, &w);
            http_sse_end(res);
        } else {
            http_respond_error(res, status = 503, why);
        }
        server_log(req, status, t0, "client gone or server stopping: stopped %s after %d generated tokens",
                   prefilled ? "generating" : "during the prefill", g->generated);
    } else {
        reply_text_end(&r);
        const char *finish = reply_finish_reason(&r, g->stop);
        if (q->stream) {
            reply_send_chunk(&r, NULL, 0, 0, finish);
            if (q->include_usage) {   /* OpenAI's usage chunk: no choices */
                JsonWriter w;
                jw_init(&w);
                jw_obj(&w);
                api_write_head(&w, &r, q->chat ? "chat.completion.chunk" : "text_completion");
                jw_key(&w, "choices");
                jw_arr(&w);
                jw_arr_end(&w);
                api_write_usage(&w, &usage);
                jw_obj_end(&w);
                reply_send(&r, &w);
            }
            http_sse_end(res);
        } else {
            JsonWriter w;
            jw_init(&w);
            api_write_answer(&w, &r, finish, &usage);
            server_respond_writer(res, &w);
        }
        long long drafted, accepted;
        spec_totals(&spec_after, &spec_before, &drafted, &accepted);
        char spec_note[96] = "";
        if (g->spec.mode != SPEC_OFF) snprintf(spec_note, sizeof spec_note, ", %lld of %lld drafts accepted", accepted, drafted);
        server_log(req, 200, t0, "%d prompt tokens (%d reused), %d generated%s, finish %s%s", ids->n, reused, g->generated,
                   spec_note, finish, q->stream ? ", streamed" : "");
    }
    web_request_end(srv);   /* web.c */
    reply_free(&r);
}

/* SESSION: the cache as the last answer left it, saved once the answer has gone out (the I/O
   thread sends it while the worker writes), so a restarted server prefills only what a client's
   next request adds. A failed save is logged; the server goes on. */
static void server_save_session(Server *srv) {
    if (!srv->session_path) return;
    char err[8500];
    const double t0 = now_seconds();
    if (generator_save(srv->gen, &srv->session_key, NULL, srv->session_path, err, sizeof err))
        fprintf(stderr, "glm: error: SESSION=%s was not saved: %s\n", srv->session_path, err);
    else if (now_seconds() - t0 > 1.0)
        fprintf(stderr, "glm: SESSION=%s: %d tokens saved in %.1f s\n", srv->session_path, srv->gen->pos, now_seconds() - t0);
}

/* SESSION at the start: the cache a previous server saved comes back (its conversation is then
   the prefix a request can reuse); a missing file is created by the first answer. A file that
   cannot be used is an error, as in the CLI: it is never overwritten by another model's cache. */
static void server_resume_session(Server *srv) {
    const char *path = srv->session_path;
    if (!session_file_present(path)) {
        fprintf(stderr, "glm: SESSION=%s: a new file, written after every answer\n", path);
        return;
    }
    char err[8500];
    const double t0 = now_seconds();
    if (generator_load(srv->gen, &srv->session_key, path, NULL, err, sizeof err)) die("SESSION=%s %s", path, err);
    fprintf(stderr, "glm: SESSION=%s: %d tokens back in the KV cache (read in %.2f s); a request that starts with them reuses them\n",
            path, srv->gen->pos, now_seconds() - t0);
}

/* The worker's part: a completion request, from its body to the last byte of the answer. */
static void server_handle(const HttpRequest *req, HttpResponse *res, void *user) {
    Server *srv = user;
    const double t0 = now_seconds();
    ApiRequest q;
    memset(&q, 0, sizeof q);
    chat_conv_init(&q.conv);
    ApiError e = { 0 };
    TokenList ids = { 0 };
    int limit = -1;
    char jerr[256];
    JsonDoc *doc = json_parse(req->body, req->body_len, jerr, sizeof jerr);
    if (!doc) api_fail(&e, 400, NULL, NULL, "the request body is not valid JSON: %s", jerr);
    else if (json_type(json_root(doc)) != JSON_OBJECT) api_fail(&e, 400, NULL, NULL, "the request body must be a JSON object");
    else if (!api_request_parse(srv, json_root(doc), !strcmp(api_route(req->path), "/chat/completions"), &q, &e))
        api_prompt_ids(srv, &q, &ids, &limit, &e);
    if (e.status) {
        server_respond_error(req, res, &e, t0);
    } else {
        if (!q.seed_given && !srv->set->seed) q.sampling.seed = splitmix64_next(&srv->rng);
        server_answer(srv, req, res, &q, &ids, limit, t0);
        server_save_session(srv);
        expert_store_idle(&srv->gen->model->experts);   /* the disk is free until the next request: bring in the hot experts */
    }
    free(ids.ids);
    api_request_free(&q);
    json_free(doc);
}

/* SIGTERM outside http_server_run (which handles it while serving): during the load it ends glm
   as it always does; once serving has begun it is ignored, so the second SIGTERM that timeout(1)
   sends (to the process and to its group) cannot kill the cleanup after a clean stop. */
static volatile sig_atomic_t g_serving;

static void on_sigterm_outside_serving(int sig) {
    if (g_serving) return;
    signal(sig, SIG_DFL);
    raise(sig);
}

/* SERVE=[host:]port: load the model once, then answer until SIGINT/SIGTERM. */
static int run_serve(const Settings *set) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigterm_outside_serving;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    TextCodec tc = codec_load(set->model_dir, set->special);
    Server srv;
    memset(&srv, 0, sizeof srv);
    srv.set = set;
    srv.codec = &tc;
    srv.chat = chat_options_from_settings(set);
    char folder[8192];   /* MODEL_NAME, else SNAP's folder name */
    srv.model_name = set->model_name;
    if (!srv.model_name[0]) {
        char *real = realpath(set->model_dir, NULL);
        snprintf(folder, sizeof folder, "%s", real ? real : set->model_dir);
        free(real);
        size_t n = strlen(folder);
        while (n > 1 && folder[n - 1] == '/') folder[--n] = 0;
        srv.model_name = strrchr(folder, '/') && folder[1] ? strrchr(folder, '/') + 1 : folder;
    }
    Model model;
    srv.capacity = text_model_load(set, &tc, &model, 0, 1);
    RunState state;
    ForwardOptions opt = engine_start(set, &model, &state, srv.capacity);
    srv.gen = generator_create(&model, &state, &opt, (SamplerSettings){ set->temperature, set->top_p, set->seed });
    generator_set_speculation(srv.gen, set->spec_mode, set->draft);
    if (set->session_path[0]) {
        srv.session_path = set->session_path;
        srv.session_key = session_key(&model, set, &opt);
        server_resume_session(&srv);
    }
    srv.rng = clock_seed();
    srv.created = (long long)time(NULL);
    HttpServerConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.listen = set->serve;
    cfg.queue = set->queue;
    cfg.quick = server_quick;
    cfg.handle = server_handle;
    cfg.user = &srv;
    char err[512];
    HttpServer *http = http_server_create(&cfg, err, sizeof err);
    if (!http) die("SERVE=%s: %s", set->serve, err);
    const HttpAddr *a = http_server_addr(http);
    const int v6 = strchr(a->host, ':') != NULL;
    fprintf(stderr, "glm: serving %s at http://%s%s%s:%d/v1 (context %d tokens, one answer at a time, %d may wait; "
                    "sampling defaults TEMPERATURE %g, NUCLEUS %g; thinking %s; %s). Ctrl-C stops.\n",
            srv.model_name, v6 ? "[" : "", a->host, v6 ? "]" : "", http_server_port(http), srv.capacity, set->queue,
            set->temperature, set->top_p, set->think ? "on" : "off", set->api_key[0] ? "API_KEY required" : "no API key");
    g_serving = 1;
    const double serving_since = now_seconds();
    const int rc = http_server_run(http);
    http_server_free(http);
    print_expert_stats(&model.experts, now_seconds() - serving_since);   /* what GET /stats said last */
    generator_free(srv.gen);
    engine_stop(set, &model, &state);
    codec_free(&tc);
    if (rc) fprintf(stderr, "glm: the server's I/O thread could not start\n");
    else fprintf(stderr, "glm: server stopped cleanly\n");
    return rc ? 1 : 0;
}

/* =============================================================================================
   server.c — the server front end: HTTP APIs over http.h (SERVE=[host:]port): the core every API
   shares and OpenAI's chat completions and completions; Anthropic's Messages, OpenAI's Responses
   and Ollama's API are in api_anthropic.c, api_responses.c and api_ollama.c (see "One core,
   several skins" below).
   http.h does the HTTP: parsing with limits, an I/O thread, the bounded queue (429 + Retry-After
   beyond QUEUE), SSE and streams, the constant-time key compare, SIGINT/SIGTERM. This file maps
   endpoints to the Generator. The I/O thread answers what is cheap (GET /health, GET /v1/models,
   Ollama's model list, a missing key with 401, unknown paths with 404, CORS preflights);
   generations go to the worker, this thread, one at a time:
   cores and disk are one resource, and a second generation would only slow the first down. With
   SLOTS=n there are n workers, each answering with a slot of its own (a Generator and its KV
   cache); their decode steps run together in one forward, which costs little more than one
   alone (see Scheduler).

   One completion: the JSON body → ApiRequest (each known field checked for type and range and
   refused by name; unknown fields ignored) → prompt ids (chat: chat.h renders messages and tools in
   the model's form exactly as PROMPT mode does; completions: the raw prompt, where a written
   template tag is its token, as in vLLM) → the Generator. generator_reuse_prefix keeps the longest
   common prefix of the KV cache and prefills the rest, so a client that sends its conversation
   again with one more message prefills only what is new ("prefix reuse" on stderr). There is one
   cache per slot: a request takes the free slot whose conversation shares the longest beginning
   with it, and two clients taking turns on one slot evict each other's conversation. Tokens →
   text (tok.h's stream decoder, never half a character) → stop strings (text is held back while it could still begin
   one; the stop text is not returned) → chat.h's output parser (reasoning_content, content,
   tool_calls) → one JSON answer or SSE chunks. A client that disconnects stops its generation:
   between tokens (http_client_gone), and during a prefill, which writes nothing, through a watcher
   thread that raises the Generator's interrupt. Between requests, as between chat turns, the I/O
   thread reads the usage history's hot experts (expert_store_idle). The prompt plus max_tokens must
   fit the cache (CTX, default 4096): otherwise 400 context_length_exceeded with the numbers. Per
   request: temperature, top_p, seed (defaults TEMPERATURE, NUCLEUS, SEED; with SEED=0 and no seed,
   a new one each time); thinking from chat_template_kwargs.enable_thinking or .thinking (vLLM,
   SGLang) or "thinking": {"type": "enabled"|"disabled"} (Z.ai's API), default THINK;
   reasoning_effort max|high, default REASONING_EFFORT; chat_template_kwargs.clear_thinking=false
   keeps earlier reasoning in the prompt (GLM's preserved thinking).
   ============================================================================================= */

#define API_MAX_STOP 4                  /* stop strings per request (OpenAI's limit) */
#define API_STOP_MAX_BYTES 1024         /* bytes per stop string */
#define API_MAX_TOP_LOGPROBS 20         /* top_logprobs (OpenAI's limit) */

/* One generated token's log-probability and the top ones at its position. */
typedef struct {
    int id, n_top;
    float logprob;
    int top_id[API_MAX_TOP_LOGPROBS];
    float top_logprob[API_MAX_TOP_LOGPROBS];
} ApiLogprob;

/* SLOTS: a conversation the server can answer at the same time as the others, with its own KV
   cache. Its fields below `busy` belong to the scheduler (under Scheduler.mu). */
typedef struct {
    Generator *gen;
    RunState state;
    /* the Generator's interrupt: the client left during a prefill */
    volatile sig_atomic_t interrupt;
    int busy;                           /* a request holds it */
    int *ids, max, count, stepped;      /* the decode step it waits for, and its result */
    long long shared_steps;             /* steps of its answer that ran beside another slot's */
} Slot;

/* SLOTS > 1: the engine runs one thing at a time (one OpenMP team; the expert store and the
   scratch are not reentrant). A prefill chunk, or anything else one slot computes alone, holds
   `engine_busy`; a decode step waits until every decoding slot has asked for one (slots that
   prefill or are idle do not hold it up), and the last to ask runs them all in one forward
   (generator_step_batch, which emits exactly what each would alone). Between two chunks a prefill
   lets a complete batch of decode steps go first, so a long prompt does not stop the others. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int engine_busy;
    int decoding;                       /* slots between their prefill and their last step */
    Slot **ready;                       /* [slots]: decoding slots waiting for their step */
    int n_ready;
    StepBatch batch;
    long long forwards, shared_forwards;  /* decode forwards; those for several slots */
} Scheduler;

struct Server {
    const Settings *set;
    const TextCodec *codec;
    ChatOptions chat;                   /* the form (CHAT_FORMAT), thinking and effort defaults */
    Generator *gen;                     /* slot 0's (SESSION, GET /stats) */
    Slot *slots;
    int n_slots;
    Scheduler sched;
    pthread_mutex_t rng_mu;             /* rng, with several workers */
    int omp_threads;                    /* THREADS as the main thread has it */
    const char *model_name;
    int capacity;                       /* KV cache tokens: prompt + max_tokens must fit */
    /* answer ids, tool call ids, per-request seeds (under rng_mu) */
    uint64_t rng;
    long long created;                  /* start time: the model's "created" */
    /* SESSION: the cache is saved there after every answer; NULL: none */
    const char *session_path;
    SessionKey session_key;             /* what a session file must match to be this server's */
    /* the tokenizer's vocabulary for constrained answers, built at the first (NULL: not yet) */
    GrammarVocab *grammar_vocab;
    pthread_mutex_t grammar_mu;         /* grammar_vocab's first build, with several workers */
};

/* One core, several skins. Every API (a "skin": OpenAI chat and completions here, Anthropic
   Messages in api_anthropic.c, OpenAI Responses in api_responses.c, Ollama in api_ollama.c) reads
   its wire format into the same ApiRequest (messages and tools as a ChatConv, the thinking switch
   and effort as ChatOptions, sampling, max_tokens, stop strings, streaming), and the same
   generation loop (server_answer) turns the Generator's tokens into the same events (reasoning,
   content, tool calls: chat.h's output parser) and one ApiFinish. A skin only says how these are
   written: its stream's first events, one event per piece, its last events or its whole answer,
   and its error shape. Requests in other shapes are translated into OpenAI's messages and tools
   JSON and read by chat.h, the one parser of conversations. */
typedef enum { FINISH_EOS, FINISH_STOP_STRING, FINISH_LENGTH, FINISH_TOOL_CALLS } ApiFinish;

typedef struct ApiRequest ApiRequest;
typedef struct Reply Reply;
typedef struct ApiError ApiError;
typedef struct ApiUsage ApiUsage;
typedef struct Server Server;
typedef struct {
    const char *name;                   /* for the log */
    const char *id_prefix, *call_prefix; /* answer ids, tool call ids */
    /* the request body → the ApiRequest (0, or -1 with e filled) */
    int (*parse)(const Server *srv, const JsonValue *root, ApiRequest *r, ApiError *e);
    void (*error)(HttpResponse *res, const ApiError *e);                   /* the error shape */
    void (*begin)(Reply *r);                                               /* a stream's start */
    void (*event)(Reply *r, const ChatOutEvent *ev, int call_index);       /* a stream's piece */
    /* its end, or the answer */
    void (*finish)(Reply *r, ApiFinish finish, const ApiUsage *usage);
    /* a stream stopped early */
    void (*abort)(Reply *r, const char *why);
    void (*count)(HttpResponse *res, int tokens);  /* set: the answer is the prompt's size alone */
} ApiSkin;

/* The skins, defined with their wire formats (OpenAI's below, the others in api_*.c). */
static const ApiSkin OPENAI_CHAT, OPENAI_COMPLETIONS, ANTHROPIC_MESSAGES, ANTHROPIC_COUNT,
    OPENAI_RESPONSES, OLLAMA_CHAT, OLLAMA_GENERATE;

struct ApiRequest {
    const ApiSkin *skin;
    int chat;                           /* messages through the template; else a raw prompt */
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
    int count_only;                     /* Anthropic's count_tokens: the prompt's size, no answer */
    /* OpenAI logprobs: the chosen token's, and this many top ones */
    int logprobs, top_logprobs;
    char *translated;                   /* the request in OpenAI's terms (xmalloc'd; NULL: none) */
    Grammar *grammar;                   /* response_format json_object / json_schema (NULL: none) */
    /* parallel_tool_calls false (Anthropic: disable_parallel_tool_use) with tools the model may
       call: the answer ends after its first tool call (a forced call's grammar allows one) */
    int one_call;
};

static const ApiSkin *api_skin_of(const ApiRequest *q) {
    return q->skin ? q->skin : q->chat ? &OPENAI_CHAT : &OPENAI_COMPLETIONS;
}

struct ApiError {
    int status;                         /* 0: none */
    const char *param, *code;           /* the OpenAI error's "param" and "code" (NULL: null) */
    char message[800];
};

static int api_fail(ApiError *e, int status, const char *param, const char *code, const char *fmt,
                    ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    e->status = status;
    e->param = param;
    e->code = code;
    return -1;
}

/* ---- request fields: absent or null keeps the default; a wrong type or range is refused by name
   ---- */

static int api_given(const JsonValue *v) { return v && json_type(v) != JSON_NULL; }

static int api_number(const JsonValue *obj, const char *key, double lo, double hi, double *out,
                      ApiError *e) {
    const JsonValue *v = json_get(obj, key);
    if (!api_given(v)) return 0;
    if (json_type(v) != JSON_NUMBER)
        return api_fail(e, 400, key, NULL, "\"%s\" must be a number", key);
    double d = json_num(v);
    if (!(d >= lo && d <= hi))
        return api_fail(e, 400, key, NULL, "\"%s\" is %g: it must be in [%g, %g]", key, d, lo, hi);
    *out = d;
    return 0;
}

static int api_int(const JsonValue *obj, const char *key, int64_t lo, int64_t hi, int64_t *out,
                   ApiError *e) {
    const JsonValue *v = json_get(obj, key);
    if (!api_given(v)) return 0;
    int64_t i;
    if (!json_is_int(v, &i)) return api_fail(e, 400, key, NULL, "\"%s\" must be an integer", key);
    if (i < lo || i > hi)
        return api_fail(e, 400, key, NULL, "\"%s\" is %lld: it must be in [%lld, %lld]", key,
                        (long long)i, (long long)lo, (long long)hi);
    *out = i;
    return 0;
}

/* A boolean field; param names it in errors (nested fields: "stream_options.include_usage"). */
static int api_bool(const JsonValue *obj, const char *key, const char *param, int *out,
                    ApiError *e) {
    const JsonValue *v = json_get(obj, key);
    if (!api_given(v)) return 0;
    if (json_type(v) != JSON_BOOL)
        return api_fail(e, 400, param, NULL, "\"%s\" must be true or false", param);
    *out = json_bool(v);
    return 0;
}

static int api_object(const JsonValue *obj, const char *key, const JsonValue **out, ApiError *e) {
    const JsonValue *v = json_get(obj, key);
    *out = NULL;
    if (!api_given(v)) return 0;
    if (json_type(v) != JSON_OBJECT)
        return api_fail(e, 400, key, NULL, "\"%s\" must be an object", key);
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
        return api_fail(e, 400, param, NULL,
                        "\"%s\" is \"%.40s\": this model knows \"max\" and \"high\"", param, s);
    *effort = s;
    return 0;
}

/* Stop strings (param: the field's name in errors): a string or a list of up to 4, none empty. */
static int api_stop_strings(const JsonValue *v, const char *param, ApiRequest *r, ApiError *e) {
    if (!api_given(v)) return 0;
    const int list = json_type(v) == JSON_ARRAY;
    const size_t n = list ? json_len(v) : 1;
    if (!list && json_type(v) != JSON_STRING)
        return api_fail(e, 400, param, NULL, "\"%s\" must be a string or a list of strings", param);
    if (n > API_MAX_STOP)
        return api_fail(e, 400, param, NULL, "\"%s\" has %zu strings: at most %d", param, n,
                        API_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *s = json_str(list ? json_at(v, i) : v, &len);
        if (!s) return api_fail(e, 400, param, NULL, "\"%s\"[%zu] must be a string", param, i);
        if (!len || len > API_STOP_MAX_BYTES)
            return api_fail(e, 400, param, NULL, "\"%s\"[%zu] has %zu bytes: it must have 1 to %d",
                            param, i, len, API_STOP_MAX_BYTES);
        r->stop[r->n_stop] = s;
        r->stop_len[r->n_stop++] = len;
    }
    return 0;
}

static int api_stop(const JsonValue *root, ApiRequest *r, ApiError *e) {
    return api_stop_strings(json_get(root, "stop"), "stop", r, e);
}

/* top_k, which the sampler does not have (temperature and top_p): 1 is greedy decoding, which
   temperature 0 is; at temperature 0 any top_k changes nothing (0: off, as Ollama writes it).
   Other values are refused. Read after the temperature. */
static int api_top_k(const JsonValue *obj, const char *key, const char *param, ApiRequest *r,
                     ApiError *e) {
    const JsonValue *v = json_get(obj, key);
    int64_t k;
    if (!api_given(v)) return 0;
    if (!json_is_int(v, &k) || k < 0)
        return api_fail(e, 400, param, NULL, "\"%s\" must be an integer >= 0", param);
    if (k == 1) r->sampling.temperature = 0;
    else if (k != 0 && r->sampling.temperature != 0)
        return api_fail(e, 400, param, NULL,
                        "\"%s\" %lld is not supported (the sampler has temperature and top_p; "
                        "top_k 1 is greedy, "
                        "as temperature 0 is)",
                        param, (long long)k);
    return 0;
}

/* Other APIs' reasoning levels on GLM-5.2's two (Max, the default, and High): "none" turns thinking
   off; "minimal", "low", "medium" and "high" think with High, the lighter one; "xhigh" and "max"
   with Max. Returns -1 for another word. */
static int api_effort_level(const char *level, ChatOptions *o) {
    static const char *const high[] = { "minimal", "low", "medium", "high" };
    if (!strcmp(level, "none")) { o->thinking = 0; return 0; }
    o->thinking = 1;
    for (size_t i = 0; i < sizeof high / sizeof high[0]; i++)
        if (!strcmp(level, high[i])) { o->reasoning_effort = "high"; return 0; }
    if (!strcmp(level, "xhigh") || !strcmp(level, "max")) { o->reasoning_effort = "max"; return 0; }
    return -1;
}

/* The defaults of every request: the server's sampling settings and chat form, no limit. */
static void api_request_defaults(const Server *srv, ApiRequest *r) {
    r->chat = 1;
    r->max_tokens = -1;
    r->sampling = (SamplerSettings){ srv->set->temperature, srv->set->top_p, srv->set->seed };
    r->render = srv->chat;
}

/* A value copied as JSON. */
static void api_copy_json(JsonWriter *w, const JsonValue *v) {
    int64_t i;
    size_t n;
    switch (json_type(v)) {
    case JSON_OBJECT:
        jw_obj(w);
        for (size_t k = 0; k < json_len(v); k++) {
            const char *key = json_key_at(v, k, &n);
            jw_key(w, key);   /* keys are NUL-terminated; one holding \u0000 is cut there */
            api_copy_json(w, json_value_at(v, k));
        }
        jw_obj_end(w);
        break;
    case JSON_ARRAY:
        jw_arr(w);
        for (size_t k = 0; k < json_len(v); k++) api_copy_json(w, json_at(v, k));
        jw_arr_end(w);
        break;
    case JSON_STRING: { const char *s = json_str(v, &n); jw_strn(w, s, n); break; }
    case JSON_NUMBER: if (json_int_literal(v, &i)) jw_int(w, i); else jw_num(w, json_num(v)); break;
    case JSON_BOOL: jw_bool(w, json_bool(v)); break;
    default: jw_null(w); break;
    }
}

/* A tool call's arguments as a JSON value (Anthropic's input, Ollama's arguments). chat.h's output
   parser writes them as a JSON object in the model's own bytes, which need not be UTF-8: they are
   read back through a JSON string (invalid bytes become U+FFFD, as in every string glm writes)
   and written again. An object that still cannot be read (none has been seen) is written as {}. */
static void api_write_arguments(JsonWriter *w, const char *args, size_t len) {
    JsonDoc *d = json_parse(args, len, NULL, 0);
    if (!d) {
        JsonWriter s;
        jw_init(&s);
        jw_strn(&s, args, len);
        size_t n;
        const char *t = jw_text(&s, &n);
        JsonDoc *str = t ? json_parse(t, n, NULL, 0) : NULL;
        const char *clean = json_str(json_root(str), &n);
        if (clean) d = json_parse(clean, n, NULL, 0);
        json_free(str);
        jw_free(&s);
    }
    if (json_type(json_root(d)) == JSON_OBJECT) api_copy_json(w, json_root(d));
    else { jw_obj(w); jw_obj_end(w); }
    json_free(d);
}

/* A request translated into OpenAI's {"messages": [...], "tools": [...]} (w, which is freed) → the
   conversation, read by chat.h as an OpenAI request is. param names the field in errors. */
static int api_read_translated(ApiRequest *r, JsonWriter *w, const char *param, ApiError *e) {
    size_t n;
    const char *t = jw_text(w, &n);
    if (!t) {
        jw_free(w);
        return api_fail(e, 400, param, NULL, "\"%s\" could not be read (nested too deeply)", param);
    }
    r->translated = xmalloc(n + 1);
    memcpy(r->translated, t, n + 1);
    jw_free(w);
    char jerr[256], err[600];
    JsonDoc *doc = json_parse(r->translated, n, jerr, sizeof jerr);
    if (!doc) return api_fail(e, 400, param, NULL, "\"%s\" could not be read: %s", param, jerr);
    const int rc = chat_conv_parse(&r->conv, json_root(doc), err, sizeof err);
    json_free(doc);
    return rc ? api_fail(e, 400, param, NULL, "%s: %s", param, err) : 0;
}

/* Fields that change what a completion is, which this server does not do: refused rather than
   ignored. */
static int api_unsupported(const JsonValue *root, int chat, ApiError *e) {
    int64_t one = 1, zero = 0;
    int flag = 0;
    double penalty = 0;
    const JsonValue *v;
    if (api_int(root, "n", 1, 1, &one, e)) return -1;
    (void)zero;
    const char *const penalties[] = { "frequency_penalty", "presence_penalty" };
    for (int i = 0; i < 2; i++) {
        if (api_number(root, penalties[i], -2, 2, &penalty, e)) return -1;
        if (penalty != 0)
            return api_fail(e, 400, penalties[i], NULL, "\"%s\" is not supported (only 0)",
                            penalties[i]);
    }
    if (api_given(v = json_get(root, "logit_bias")) && (json_type(v) != JSON_OBJECT || json_len(v)))
        return api_fail(e, 400, "logit_bias", NULL, "\"logit_bias\" is not supported");
    if (chat) return 0;
    if (api_bool(root, "echo", "echo", &flag, e)) return -1;
    if (flag) return api_fail(e, 400, "echo", NULL, "\"echo\" is not supported");
    size_t len = 0;
    if (api_given(v = json_get(root, "suffix")) && (!json_str(v, &len) || len))
        return api_fail(e, 400, "suffix", NULL, "\"suffix\" is not supported");
    return api_int(root, "best_of", 1, 1, &one, e);
}

/* The chat-only fields: messages, tools, tool_choice, thinking, reasoning effort. */
/* logprobs: chat's logprobs (true/false) and top_logprobs (0 to 20, with logprobs), completions'
   logprobs (0 to 5: the chosen token's and that many top ones). */
static int api_logprobs(const JsonValue *root, ApiRequest *r, ApiError *e) {
    int64_t top = 0;
    if (r->chat) {
        if (api_bool(root, "logprobs", "logprobs", &r->logprobs, e) ||
            api_int(root, "top_logprobs", 0, API_MAX_TOP_LOGPROBS, &top, e))
            return -1;
        if (api_given(json_get(root, "top_logprobs")) && !r->logprobs)
            return api_fail(e, 400, "top_logprobs", NULL,
                            "\"top_logprobs\" needs \"logprobs\": true");
    } else {
        if (api_int(root, "logprobs", 0, 5, &top, e)) return -1;
        r->logprobs = api_given(json_get(root, "logprobs"));
    }
    r->top_logprobs = (int)top;
    return 0;
}

static int api_forced_tools(ApiRequest *r, const JsonValue *tools, const char *forced,
                            int one_call, const char *schema_key, ApiError *e);

/* tool_choice and the switch for one tool call at most, as an API spells them:
     OpenAI chat  "auto" | "none" | "required" | {"type": "function", "function": {"name": N}},
                  with "parallel_tool_calls": false at the top for one call;
     Responses    the same, but {"type": "function", "name": N};
     Anthropic    {"type": "auto" | "none" | "any" | "tool", "name": N,
                   "disable_parallel_tool_use": true}.
   The meanings are the same everywhere, so one reader (api_tool_choice) serves them all. */
typedef struct {
    int typed;              /* 1: every choice is {"type": WORD}; 0: WORD is a string, and only
                               the form naming a tool is an object */
    const char *any;        /* the word that forces a call to any tool */
    const char *named;      /* the type of the object that names the one tool to call */
    const char *name_in;    /* that object's member holding "name" (NULL: the object itself) */
    const char *needs_name; /* the 400 for that type without a name (NULL: usage) */
    const char *usage;      /* the 400 for any other tool_choice */
    int one_in_choice;      /* 1: one_key is in tool_choice, true for one call; 0: at the top,
                               false for one call */
    const char *one_key, *one_param; /* the boolean, and its name in errors */
    const char *schema_key; /* a tool's schema ("parameters", Anthropic's "input_schema") */
} ApiToolChoice;

/* The request's tool_choice in spelling tc: a forced call (any tool, or the named one) sets
   r->grammar (api_forced_tools), one call at most sets r->one_call, and *use_tools is 0 where the
   choice is none (the tools are not shown to the model). 0, or -1 with a 400 in e. */
static int api_tool_choice(const Server *srv, const JsonValue *root, const ApiToolChoice *tc,
                           ApiRequest *r, int *use_tools, ApiError *e) {
    const JsonValue *v = json_get(root, "tool_choice");
    const char *forced = NULL;
    int forcing = 0;
    *use_tools = 1;
    if (api_given(v)) {
        const char *type = json_str(json_get(v, "type"), NULL);
        const char *word = tc->typed ? type : json_str(v, NULL);
        const int named = (tc->typed || !word) && type && !strcmp(type, tc->named);
        if (named) forced = json_str(json_get(tc->name_in ? json_get(v, tc->name_in) : v, "name"),
                                     NULL);
        if (named && !forced && tc->needs_name)
            return api_fail(e, 400, "tool_choice", NULL, "%s", tc->needs_name);
        if (word && !strcmp(word, "none")) *use_tools = 0;
        else if ((word && !strcmp(word, tc->any)) || forced) forcing = 1;
        else if (!word || strcmp(word, "auto"))
            return api_fail(e, 400, "tool_choice", NULL, "%s", tc->usage);
    }
    int flag = !tc->one_in_choice;
    if (api_bool(tc->one_in_choice ? v : root, tc->one_key, tc->one_param, &flag, e)) return -1;
    r->one_call = tc->one_in_choice ? flag : !flag;
    if (!forcing) return 0;
    /* a forced call is written in the tool-call tags: a tokenizer without them cannot */
    for (int t = CHAT_TAG_TOOL_CALL; t <= CHAT_TAG_END_ARG_VALUE; t++)
        if (srv->codec->tag[t] < 0)
            return api_fail(e, 400, "tool_choice", NULL,
                            "this model's tokenizer has no %s token, so a tool call cannot be "
                            "forced (tool_choice auto or none work)",
                            chat_tag_text(t));
    return api_forced_tools(r, json_get(root, "tools"), forced, forced || r->one_call,
                            tc->schema_key, e);
}

static int api_chat_fields(const Server *srv, const JsonValue *root, ApiRequest *r, ApiError *e) {
    char err[600];
    ChatOptions *o = &r->render;
    *o = srv->chat;
    static const ApiToolChoice tool_choice = {
        0, "required", "function", "function", NULL,
        "\"tool_choice\" must be \"auto\", \"none\", \"required\" or "
        "{\"type\": \"function\", \"function\": {\"name\": ...}}",
        0, "parallel_tool_calls", "parallel_tool_calls", "parameters"
    };
    int use_tools;
    if (api_tool_choice(srv, root, &tool_choice, r, &use_tools, e)) return -1;
    const JsonValue *v;
    /* thinking: {"type": "enabled" | "disabled"} (Z.ai's API) or a boolean */
    if (api_given(v = json_get(root, "thinking"))) {
        const char *type = json_str(json_get(v, "type"), NULL);
        if (json_type(v) == JSON_BOOL) o->thinking = json_bool(v);
        else if (type && (!strcmp(type, "enabled") || !strcmp(type, "disabled")))
            o->thinking = !strcmp(type, "enabled");
        else
            return api_fail(e, 400, "thinking", NULL,
                            "\"thinking\" must be {\"type\": \"enabled\"} or {\"type\": "
                            "\"disabled\"}");
    }
    if (api_effort(root, "reasoning_effort", &o->reasoning_effort, e)) return -1;
    const JsonValue *kwargs;
    if (api_object(root, "chat_template_kwargs", &kwargs, e)) return -1;
    int clear = !o->keep_reasoning;
    if (kwargs &&
        (api_bool(kwargs, "enable_thinking", "chat_template_kwargs.enable_thinking", &o->thinking,
                  e) ||
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
    if (chat_conv_parse(&r->conv, messages, err, sizeof err))
        return api_fail(e, 400, "messages", NULL, "messages: %s", err);
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
        return api_fail(e, 400, "prediction", NULL,
                        "\"prediction\" must be {\"type\": \"content\", \"content\": ...}");
    const JsonValue *content = json_get(p, "content");
    const int parts = json_type(content) == JSON_ARRAY ? (int)json_len(content) : -1;
    size_t total = 0, n;
    if (parts < 0 && !json_str(content, &total))
        return api_fail(e, 400, "prediction", NULL,
                        "\"prediction\".content must be a string or a list of text parts");
    for (int i = 0; i < parts; i++) {
        const JsonValue *part = json_at(content, (size_t)i);
        const char *part_type = json_str(json_get(part, "type"), NULL);
        if (!part_type || strcmp(part_type, "text") || !json_str(json_get(part, "text"), &n))
            return api_fail(
                e, 400, "prediction", NULL,
                "\"prediction\".content part %d must be {\"type\": \"text\", \"text\": ...}", i);
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

/* The grammar of a request's JSON schema (response_format, text.format, Ollama's format) into
   r->grammar: 0, or a 400 on `param` naming the keyword that is not enforced. */
static int api_schema_grammar(const JsonValue *schema, const char *param, const char *where,
                              ApiRequest *r, ApiError *e) {
    char err[512];
    if (!(r->grammar = grammar_from_schema(schema, NULL, err, sizeof err)))
        return api_fail(e, 400, param, NULL, "\"%s\": %s", where, err);
    return 0;
}

/* response_format: text (free), json_object (any JSON object) or json_schema ({name, schema,
   strict}: the answer follows the schema, whatever strict says). A schema keyword that the grammar
   cannot enforce is a 400 naming it. With thinking on the reasoning stays free (server_answer). */
static int api_response_format(const JsonValue *root, ApiRequest *r, ApiError *e) {
    const JsonValue *format, *spec, *schema;
    if (api_object(root, "response_format", &format, e)) return -1;
    if (!format) return 0;
    const char *type = json_str(json_get(format, "type"), NULL);
    if (!type)
        return api_fail(e, 400, "response_format", NULL,
                        "\"response_format\" needs a \"type\": text, json_object or json_schema");
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) {
        if (!(r->grammar = grammar_json_object(NULL))) die("out of memory");
        return 0;
    }
    if (strcmp(type, "json_schema"))
        return api_fail(e, 400, "response_format", NULL,
                        "\"response_format\" type \"%.40s\" is not supported (text, json_object "
                        "or json_schema)",
                        type);
    int strict = 0;
    if (api_object(format, "json_schema", &spec, e)) return -1;
    if (!spec)
        return api_fail(e, 400, "response_format", NULL,
                        "\"response_format\" of type json_schema needs \"json_schema\": {\"name\", "
                        "\"schema\"}");
    if (api_bool(spec, "strict", "response_format.json_schema.strict", &strict, e) ||
        api_object(spec, "schema", &schema, e))
        return -1;
    if (!schema)
        return api_fail(e, 400, "response_format", NULL,
                        "\"response_format.json_schema\" needs a \"schema\" object");
    return api_schema_grammar(schema, "response_format", "response_format.json_schema.schema", r,
                              e);
}

/* A forced tool call (tool_choice "required" / a named function, Anthropic's any / tool, with
   parallel_tool_calls false: exactly one): the answer becomes GLM tool calls of the given tools,
   their arguments following each tool's schema (grammar_tool_calls), into r->grammar. tools is
   the request's list as the client sent it: each tool's name and schema are read from the tool,
   or from its "function" object when it has one; schema_key names the schema ("parameters",
   Anthropic's "input_schema"). forced: the one tool allowed (NULL: any of them). 0, or a 400 on
   tool_choice naming an unknown tool, on tools for a schema keyword that is not enforced. */
static int api_forced_tools(ApiRequest *r, const JsonValue *tools, const char *forced,
                            int one_call, const char *schema_key, ApiError *e) {
    if (r->grammar)
        return api_fail(e, 400, "tool_choice", NULL,
                        "a forced tool call and a structured output format cannot both shape the "
                        "answer");
    const size_t n = json_type(tools) == JSON_ARRAY ? json_len(tools) : 0;
    if (!n)
        return api_fail(e, 400, "tool_choice", NULL, "forcing a tool call needs \"tools\"");
    GrammarTool *t = xcalloc(n, sizeof *t);
    char(*where)[64] = xcalloc(n, sizeof *where);
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        const JsonValue *tool = json_at(tools, i), *fn = json_get(tool, "function");
        const JsonValue *holder = json_type(fn) == JSON_OBJECT ? fn : tool;
        size_t nl;
        const char *name = json_str(json_get(holder, "name"), &nl);
        if (!name || (forced && strcmp(forced, name))) continue;
        snprintf(where[k], sizeof where[k], "tools[%zu].%s%s", i, holder == fn ? "function." : "",
                 schema_key);
        t[k] = (GrammarTool){ name, nl, json_get(holder, schema_key), where[k] };
        k++;
    }
    char err[600];
    int rc = 0;
    if (!k)
        rc = api_fail(e, 400, "tool_choice", NULL,
                      "\"tool_choice\" names the function \"%.80s\", which is not in \"tools\"",
                      forced ? forced : "");
    else if (!(r->grammar = grammar_tool_calls(t, k, 1, one_call ? 1 : -1, NULL, err, sizeof err)))
        rc = api_fail(e, 400, "tools", NULL, "%s", err);
    free(t);
    free(where);
    return rc;
}

static void api_request_free(ApiRequest *r) {
    grammar_free(r->grammar);
    r->grammar = NULL;
    chat_conv_free(&r->conv);
    free(r->prediction);
    r->prediction = NULL;
    free(r->translated);
    r->translated = NULL;
}

/* The request body → ApiRequest (api_request_free frees it, whatever the outcome). */
static int api_request_parse(const Server *srv, const JsonValue *root, int chat, ApiRequest *r,
                             ApiError *e) {
    const Settings *set = srv->set;
    r->skin = chat ? &OPENAI_CHAT : &OPENAI_COMPLETIONS;
    r->chat = chat;
    r->max_tokens = -1;
    r->sampling = (SamplerSettings){ set->temperature, set->top_p, set->seed };
    const JsonValue *v = json_get(root, "model");
    if (api_given(v) && json_type(v) != JSON_STRING)
        return api_fail(e, 400, "model", NULL, "\"model\" must be a string");
    int64_t max_tokens = -1, max_completion_tokens = -1, seed = 0;
    double temperature = r->sampling.temperature, top_p = r->sampling.top_p;
    if (api_int(root, "max_tokens", 1, INT32_MAX, &max_tokens, e) ||
        api_int(root, "max_completion_tokens", 1, INT32_MAX, &max_completion_tokens, e) ||
        api_number(root, "temperature", 0, 100, &temperature, e) ||
        api_number(root, "top_p", 0, 1, &top_p, e) ||
        api_int(root, "seed", INT64_MIN, INT64_MAX, &seed, e) || api_stop(root, r, e) ||
        api_bool(root, "stream", "stream", &r->stream, e) || api_unsupported(root, chat, e) ||
        api_prediction(root, r, e) || api_logprobs(root, r, e) || api_response_format(root, r, e))
        return -1;
    r->max_tokens = (int)(max_completion_tokens >= 0 ? max_completion_tokens : max_tokens);
    r->sampling.temperature = (float)temperature;
    r->sampling.top_p = (float)top_p;
    r->seed_given = api_given(json_get(root, "seed"));
    if (r->seed_given) r->sampling.seed = (uint64_t)seed;
    const JsonValue *options;
    if (api_object(root, "stream_options", &options, e) ||
        (options &&
         api_bool(options, "include_usage", "stream_options.include_usage", &r->include_usage, e)))
        return -1;
    if (chat) return api_chat_fields(srv, root, r, e);
    v = json_get(root, "prompt");
    /* ["text"]: one prompt */
    if (json_type(v) == JSON_ARRAY && json_len(v) == 1) v = json_at(v, 0);
    if (!(r->prompt = json_str(v, &r->prompt_len)))
        return api_fail(e, 400, "prompt", NULL,
                        "\"prompt\" must be a string (one prompt per request)");
    if (!r->prompt_len)
        return api_fail(e, 400, "prompt", NULL,
                        "\"prompt\" is empty: there is no token to continue from");
    return 0;
}

/* The prompt's ids, then the room it leaves: 0 and *limit (max_tokens for the Generator, -1: until
   EOS or a full cache), or -1 with a 400. */
static int api_prompt_ids(const Server *srv, ApiRequest *r, TokenList *ids, int *limit,
                          ApiError *e) {
    if (r->chat) {
        char err[5000];
        if (chat_to_ids(srv->codec, &r->conv, &r->render, ids, err, sizeof err))
            return api_fail(e, 400, "messages", NULL, "%s", err);
        if (r->count_only) return 0;   /* a count needs no room for an answer */
    } else {
        /* a raw prompt is written in the model's own terms: tags are tags */
        TextCodec raw = *srv->codec;
        raw.text_mode = TOK_SPECIAL_ALL;
        tokens_push_text(ids, &raw, r->prompt, r->prompt_len);
    }
    const int room = srv->capacity - ids->n;
    if (room < 1)
        return api_fail(e, 400, r->chat ? "messages" : "prompt", "context_length_exceeded",
                        "context length exceeded: the prompt has %d tokens and this server's "
                        "context holds %d (CTX), "
                        "leaving no room for an answer",
                        ids->n, srv->capacity);
    if (r->max_tokens > room)
        return api_fail(e, 400, "max_tokens", "context_length_exceeded",
                        "context length exceeded: this server's context holds %d tokens (CTX) but "
                        "the request needs %lld "
                        "(%d in the prompt, max_tokens %d); shorten the messages or lower "
                        "max_tokens",
                        srv->capacity, (long long)ids->n + r->max_tokens, ids->n, r->max_tokens);
    *limit = r->max_tokens >= 0 ? r->max_tokens : srv->set->ngen;
    return 0;
}

/* ---- the answer: tokens → text → stop strings → reasoning / content / tool calls → JSON ------ */

struct Reply {
    Server *srv;
    const Generator *gen;               /* its slot's */
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
    /* everything released so far, parsed (completions: content) */
    ChatOutput out;
    char (*call_ids)[32];               /* the id of each tool call in out.calls */
    int stop_which;                     /* the stop string that ended it (stop_hit) */
    int one_call_done;                  /* req->one_call and the first tool call is complete */
    /* a skin's stream state */
    int seq;                            /* events sent (Responses' sequence_number) */
    /* the content block (item) open: its index, its ChatOutKind; -1: none */
    int block, block_kind;
    int items;                          /* blocks (items) opened so far */
    char item_id[48];                   /* the open item's id (Responses) */
    /* where the open item's text starts in out.reasoning / out.content */
    size_t item_from;
    double start;                       /* now_seconds() when the request was read */
    /* known once the prefill is done (a stream's first event) */
    int prompt_tokens, cached_tokens;
    ApiLogprob *logprobs;               /* logprobs: one per generated token */
    int n_logprobs, cap_logprobs, logprobs_sent;
};

static uint64_t server_random(Server *srv) {
    pthread_mutex_lock(&srv->rng_mu);
    const uint64_t x = splitmix64_next(&srv->rng);
    pthread_mutex_unlock(&srv->rng_mu);
    return x;
}

static void server_new_id(Server *srv, const char *prefix, char *dst, size_t n) {
    const uint64_t a = server_random(srv), b = server_random(srv);
    snprintf(dst, n, "%s%016llx%08llx", prefix, (unsigned long long)a,
             (unsigned long long)(b >> 32));
}

/* The fields every answer and chunk starts with. */
static void api_write_head(JsonWriter *w, const Reply *r, const char *object) {
    jw_kstr(w, "id", r->id);
    jw_kstr(w, "object", object);
    jw_kint(w, "created", r->created);
    jw_kstr(w, "model", r->srv->model_name);
}

struct ApiUsage {
    int prompt, completion, cached;     /* cached: the prefix kept in the KV cache */
    int predicted;                      /* a prediction was given: then its drafts' fate below */
    long long accepted_prediction, rejected_prediction;
    double start, prefilled, end;       /* now_seconds(): request read, prefill done, answer done */
};

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
static void api_write_tool_call(JsonWriter *w, int index, const char *id, const char *name,
                                size_t name_len, const char *arguments, size_t arguments_len) {
    jw_obj(w);
    if (index >= 0) jw_kint(w, "index", index);
    jw_kstr(w, "id", id);
    jw_kstr(w, "type", "function");
    jw_key(w, "function");
    jw_obj(w);
    jw_key(w, "name");
    jw_strn(w, name, name_len);
    /* a JSON object, sent as a string (OpenAI's form) */
    jw_key(w, "arguments");
    jw_strn(w, arguments, arguments_len);
    jw_obj_end(w);
    jw_obj_end(w);
}

/* The message of a whole chat answer: content (null when there is only tool calls),
   reasoning_content (null when there is none), tool_calls (when there are some). */
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
            api_write_tool_call(w, -1, call_ids[i], o->calls[i].name, o->calls[i].name_len,
                                o->calls[i].arguments, o->calls[i].arguments_len);
        jw_arr_end(w);
    }
    jw_obj_end(w);
}

static void server_respond_writer(HttpResponse *res, JsonWriter *w) {
    size_t n;
    const char *t = jw_text(w, &n);
    if (!t) die("internal: an answer is not valid JSON");
    http_respond_json(res, 200, t, n);
    jw_free(w);
}

static int reply_send(Reply *r, JsonWriter *w) {
    size_t n;
    const char *t = jw_text(w, &n);
    if (!t) die("internal: a streamed chunk is not valid JSON");
    int rc = http_sse_event(r->res, t, n);
    jw_free(w);
    return rc;
}

/* logprobs: the log-softmax of the logits the sampler drew the token from (the model's own
   distribution: before temperature and top_p), for the token and the top k (ties: lower id first).
   */
static void api_logprob(const float *logits, int vocab, int id, int k, ApiLogprob *out) {
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    for (int i = 0; i < vocab; i++) sum += exp((double)logits[i] - mx);
    const double lse = mx + log(sum);
    out->id = id;
    out->logprob = (float)((double)logits[id] - lse);
    out->n_top = 0;
    for (int i = 0; i < vocab && k > 0; i++) {
        if (out->n_top == k && logits[i] <= logits[out->top_id[k - 1]]) continue;
        int at = out->n_top < k ? out->n_top++ : k - 1;
        while (at > 0 && logits[out->top_id[at - 1]] < logits[i]) {
            out->top_id[at] = out->top_id[at - 1];
            at--;
        }
        out->top_id[at] = i;
    }
    for (int j = 0; j < out->n_top; j++)
        out->top_logprob[j] = (float)((double)logits[out->top_id[j]] - lse);
}

static void reply_logprob(Reply *r, int id) {
    const Generator *g = r->gen;
    if (!r->req->logprobs || !g || !g->token_logits) return;
    if (r->n_logprobs == r->cap_logprobs) {
        r->cap_logprobs = r->cap_logprobs ? 2 * r->cap_logprobs : 64;
        ApiLogprob *grown = realloc(r->logprobs, (size_t)r->cap_logprobs * sizeof *grown);
        if (!grown) die("out of memory for the logprobs");
        r->logprobs = grown;
    }
    api_logprob(g->token_logits, g->model->c.vocab, id, r->req->top_logprobs,
                &r->logprobs[r->n_logprobs++]);
}

/* A token's text (its raw bytes; jw_strn makes a broken UTF-8 piece U+FFFD, bytes keeps them). */
static void api_write_token(JsonWriter *w, const TextCodec *codec, int id, float logprob,
                            int with_bytes) {
    size_t n = 0;
    const char *piece = tok_piece(codec->tok, id, &n);
    jw_key(w, "token");
    jw_strn(w, piece ? piece : "", piece ? n : 0);
    jw_knum(w, "logprob", logprob);
    if (!with_bytes) return;
    jw_key(w, "bytes");
    jw_arr(w);
    for (size_t i = 0; i < n; i++) jw_int(w, (unsigned char)piece[i]);
    jw_arr_end(w);
}

/* "logprobs" of the tokens [from, to): chat's {"content": [...]} or completions' lists; null
   when the request asked for none. */
static void api_write_logprobs(JsonWriter *w, const Reply *r, int from, int to) {
    const TextCodec *codec = r->srv->codec;
    jw_key(w, "logprobs");
    if (!r->req->logprobs) { jw_null(w); return; }
    jw_obj(w);
    if (r->req->chat) {
        jw_key(w, "content");
        jw_arr(w);
        for (int i = from; i < to; i++) {
            const ApiLogprob *p = &r->logprobs[i];
            jw_obj(w);
            api_write_token(w, codec, p->id, p->logprob, 1);
            jw_key(w, "top_logprobs");
            jw_arr(w);
            for (int j = 0; j < p->n_top; j++) {
                jw_obj(w);
                api_write_token(w, codec, p->top_id[j], p->top_logprob[j], 1);
                jw_obj_end(w);
            }
            jw_arr_end(w);
            jw_obj_end(w);
        }
        jw_arr_end(w);
        jw_key(w, "refusal");
        jw_null(w);
    } else {
        size_t n, offset = 0;
        jw_key(w, "tokens");
        jw_arr(w);
        for (int i = from; i < to; i++) {
            const char *piece = tok_piece(codec->tok, r->logprobs[i].id, &n);
            jw_strn(w, piece ? piece : "", piece ? n : 0);
        }
        jw_arr_end(w);
        jw_key(w, "token_logprobs");
        jw_arr(w);
        for (int i = from; i < to; i++) jw_num(w, r->logprobs[i].logprob);
        jw_arr_end(w);
        jw_key(w, "top_logprobs");
        jw_arr(w);
        for (int i = from; i < to; i++) {
            const ApiLogprob *p = &r->logprobs[i];
            jw_obj(w);
            for (int j = 0; j < p->n_top; j++) {
                const char *piece = tok_piece(codec->tok, p->top_id[j], &n);
                char key[256];
                /* a NUL or a long piece is cut */
                snprintf(key, sizeof key, "%.*s", (int)(piece ? n : 0), piece ? piece : "");
                jw_knum(w, key, p->top_logprob[j]);
            }
            jw_obj_end(w);
        }
        jw_arr_end(w);
        jw_key(w, "text_offset");   /* bytes of the pieces before each token */
        jw_arr(w);
        for (int i = from; i < to; i++) {
            jw_int(w, (int64_t)offset);
            if (tok_piece(codec->tok, r->logprobs[i].id, &n)) offset += n;
        }
        jw_arr_end(w);
    }
    jw_obj_end(w);
}

/* An SSE event with a name ("event: NAME", then the JSON as "data:" lines): Anthropic's and the
   Responses API's streams, whose clients dispatch on the name. w is freed. */
static int reply_send_event(Reply *r, const char *event, JsonWriter *w) {
    size_t n;
    const char *t = jw_text(w, &n);
    if (!t) die("internal: a streamed event is not valid JSON");
    char *buf = xmalloc(strlen(event) + 8 * n + 32);
    size_t k = (size_t)sprintf(buf, "event: %s\n", event);
    for (size_t i = 0;;) {   /* a line break in the JSON (jw_raw text) starts another data line */
        size_t j = i;
        while (j < n && t[j] != '\n' && t[j] != '\r') j++;
        memcpy(buf + k, "data: ", 6);
        memcpy(buf + k + 6, t + i, j - i);
        k += 6 + (j - i);
        buf[k++] = '\n';
        if (j == n) break;
        i = j + 1;
    }
    buf[k++] = '\n';
    const int rc = http_stream_write(r->res, buf, k);
    free(buf);
    jw_free(w);
    r->seq++;
    return rc;
}

/* One line of an NDJSON stream (Ollama's). w is freed. */
static int reply_send_line(Reply *r, JsonWriter *w) {
    size_t n;
    const char *t = jw_text(w, &n);
    if (!t) die("internal: a streamed object is not valid JSON");
    char *buf = xmalloc(n + 1);
    memcpy(buf, t, n);
    buf[n] = '\n';
    const int rc = http_stream_write(r->res, buf, n + 1);
    free(buf);
    jw_free(w);
    return rc;
}

/* A streamed chunk: a chat delta (role first; then reasoning_content, content or one tool call;
   ev NULL and finish set: the last one) or a completion's text. */
static void reply_send_chunk(Reply *r, const ChatOutEvent *ev, int call_index, int role,
                             const char *finish) {
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
            api_write_tool_call(&w, call_index, r->call_ids[call_index], ev->name, ev->name_len,
                                ev->arguments, ev->arguments_len);
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
    /* the tokens generated since the last chunk (text and tokens do not align: a chunk's text may
       have been held back by a stop string or the output parser) */
    api_write_logprobs(&w, r, r->logprobs_sent, r->n_logprobs);
    r->logprobs_sent = r->n_logprobs;
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
    if (r->one_call_done) return 0;   /* one_call: nothing after the first tool call */
    if (chat_output_add(&r->out, ev)) die("out of memory for the answer");
    const int call = r->out.n_calls - 1;
    if (ev->kind == CHAT_OUT_TOOL_CALL && r->req->one_call) r->one_call_done = 1;
    if (ev->kind == CHAT_OUT_TOOL_CALL) {
        char (*grown)[32] = realloc(r->call_ids, (size_t)r->out.n_calls * sizeof *grown);
        if (!grown) die("out of memory for the answer");
        r->call_ids = grown;
        server_new_id(r->srv, api_skin_of(r->req)->call_prefix, r->call_ids[call],
                      sizeof r->call_ids[call]);
    }
    if (r->req->stream) api_skin_of(r->req)->event(r, ev, call);
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
        if (at && (size_t)(at - r->held) < cut) { cut = (size_t)(at - r->held); r->stop_which = k; }
    }
    if (cut != SIZE_MAX) {
        r->stop_hit = 1;
        reply_release(r, r->held, cut);
        r->held_len = 0;
        return;
    }
    size_t keep = 0;
    for (int k = 0; k < q->n_stop; k++)
        for (size_t len = q->stop_len[k] - 1 < r->held_len ? q->stop_len[k] - 1 : r->held_len;
             len > keep; len--)
            if (!memcmp(r->held + r->held_len - len, q->stop[k], len)) { keep = len; break; }
    reply_release(r, r->held, r->held_len - keep);
    memmove(r->held, r->held + r->held_len - keep, keep);
    r->held_len = keep;
}

/* The Generator's on_token. */
static void reply_token(void *user, int id) {
    Reply *r = user;
    reply_logprob(r, id);
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
    if (r->parser && chat_out_finish(r->parser, reply_event, r))
        die("out of memory parsing the answer");
}

static void reply_init(Reply *r, Server *srv, HttpResponse *res, const ApiRequest *q) {
    memset(r, 0, sizeof *r);
    r->srv = srv;
    r->res = res;
    r->req = q;
    server_new_id(srv, api_skin_of(q)->id_prefix, r->id, sizeof r->id);
    r->created = (long long)time(NULL);
    r->block = -1;
    r->start = now_seconds();
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
    free(r->logprobs);
    memset(r, 0, sizeof *r);
}

/* Why the answer ended: max_tokens or the cache (length), else tool calls when it called tools,
   else a stop string or an EOS token. */
static ApiFinish reply_finish(const Reply *r, StopReason stop) {
    if (!r->stop_hit && (stop == STOP_LIMIT || stop == STOP_CONTEXT)) return FINISH_LENGTH;
    if (r->out.n_calls) return FINISH_TOOL_CALLS;
    return r->stop_hit ? FINISH_STOP_STRING : FINISH_EOS;
}

/* OpenAI's finish_reason: "length", "tool_calls", else "stop" (an EOS token or a stop string). */
static const char *api_openai_finish(ApiFinish f) {
    return f == FINISH_LENGTH ? "length" : f == FINISH_TOOL_CALLS ? "tool_calls" : "stop";
}

__attribute__((unused)) static const char *reply_finish_reason(const Reply *r, StopReason stop) {
    return api_openai_finish(reply_finish(r, stop));
}

/* The whole answer as one JSON object (stream: false). */
static void api_write_answer(JsonWriter *w, const Reply *r, const char *finish,
                             const ApiUsage *usage) {
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
    api_write_logprobs(w, r, 0, r->n_logprobs);
    jw_kstr(w, "finish_reason", finish);
    jw_obj_end(w);
    jw_arr_end(w);
    api_write_usage(w, usage);
    jw_obj_end(w);
}

/* ---- the OpenAI skin: chat.completion(.chunk) and text_completion ---------------------------- */

static void openai_error(HttpResponse *res, const ApiError *e) {
    http_respond_error_ex(res, e->status, e->message, e->param, e->code);
}

static void openai_begin(Reply *r) {
    http_sse_begin(r->res);
    if (r->req->chat) reply_send_chunk(r, NULL, 0, 1, NULL);
}

static void openai_event(Reply *r, const ChatOutEvent *ev, int call_index) {
    reply_send_chunk(r, ev, call_index, 0, NULL);
}

static void openai_finish(Reply *r, ApiFinish finish, const ApiUsage *usage) {
    JsonWriter w;
    if (!r->req->stream) {
        jw_init(&w);
        api_write_answer(&w, r, api_openai_finish(finish), usage);
        server_respond_writer(r->res, &w);
        return;
    }
    reply_send_chunk(r, NULL, 0, 0, api_openai_finish(finish));
    if (r->req->include_usage) {   /* OpenAI's usage chunk: no choices */
        jw_init(&w);
        jw_obj(&w);
        api_write_head(&w, r, r->req->chat ? "chat.completion.chunk" : "text_completion");
        jw_key(&w, "choices");
        jw_arr(&w);
        jw_arr_end(&w);
        api_write_usage(&w, usage);
        jw_obj_end(&w);
        reply_send(r, &w);
    }
    http_sse_end(r->res);
}

static void openai_abort(Reply *r, const char *why) {
    JsonWriter w;
    jw_init(&w);
    jw_obj(&w);
    jw_key(&w, "error");
    jw_obj(&w);
    jw_kstr(&w, "message", why);
    jw_kstr(&w, "type", "server_error");
    jw_obj_end(&w);
    jw_obj_end(&w);
    reply_send(r, &w);
    http_sse_end(r->res);
}

static int openai_chat_parse(const Server *srv, const JsonValue *root, ApiRequest *r, ApiError *e) {
    return api_request_parse(srv, root, 1, r, e);
}

static int openai_completions_parse(const Server *srv, const JsonValue *root, ApiRequest *r,
                                    ApiError *e) {
    return api_request_parse(srv, root, 0, r, e);
}

static const ApiSkin OPENAI_CHAT = { "openai chat", "chatcmpl-",  "call_",      openai_chat_parse,
                                     openai_error,  openai_begin, openai_event, openai_finish,
                                     openai_abort,  NULL };
static const ApiSkin OPENAI_COMPLETIONS = {
    "openai completions", "cmpl-",      "call_",      openai_completions_parse,
    openai_error,         openai_begin, openai_event, openai_finish,
    openai_abort,         NULL
};

/* ---- watching the client while a prefill writes nothing -------------------------------------- */

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

static void client_watch_start(ClientWatch *w, HttpResponse *res,
                               volatile sig_atomic_t *interrupt) {
    memset(w, 0, sizeof *w);
    w->res = res;
    w->interrupt = interrupt;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    /* without it: noticed after the prefill */
    w->running = pthread_create(&w->thread, NULL, client_watch_main, w) == 0;
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

/* ---- the endpoints --------------------------------------------------------------------------- */

/* One line per request on stderr: method, path, status, what happened, seconds. */
/* One line on stderr for every request: method, path, status, what happened, seconds. */
static void server_log_line(const HttpRequest *req, int status, double seconds, const char *what) {
    fprintf(stderr, "glm: %s %s %d%s%s | %.3f s\n", req->method, req->path, status,
            what[0] ? " | " : "", what, seconds);
}

static void server_log(const HttpRequest *req, int status, double t0, const char *fmt, ...) {
    char what[1000] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
    }
    server_log_line(req, status, now_seconds() - t0, what);
}

/* The requests http.h ends itself (its own errors, 499 for a client that left while its request
   arrived or waited) get the same line: every request leaves one. */
static void server_http_log(const HttpRequest *req, int status, double seconds, const char *what,
                            void *user) {
    (void)user;
    server_log_line(req, status, seconds, what);
}

/* "/v1/models" and "/models" are the same endpoint (clients differ in whether the base URL ends in
   /v1). */
static const char *api_route(const char *path) {
    return !strncmp(path, "/v1/", 4) ? path + 3 : path;
}

/* The generation endpoints (POST, answered by the worker), by route. */
typedef struct { const char *route; const ApiSkin *skin; } ApiRoute;
static const ApiRoute API_ROUTES[] = {
    { "/chat/completions", &OPENAI_CHAT }, { "/completions", &OPENAI_COMPLETIONS },
    { "/messages", &ANTHROPIC_MESSAGES }, { "/messages/count_tokens", &ANTHROPIC_COUNT },
    { "/responses", &OPENAI_RESPONSES }, { "/api/chat", &OLLAMA_CHAT }, { "/api/generate", &OLLAMA_GENERATE },
};

/* The skin of a path: a generation endpoint's (*generation = 1), else its API family's, whose error
   shape answers 401, 404 and 405 there. */
static const ApiSkin *api_skin_for_path(const char *path, int *generation) {
    const char *route = api_route(path);
    *generation = 0;
    for (size_t i = 0; i < sizeof API_ROUTES / sizeof API_ROUTES[0]; i++)
        if (!strcmp(route, API_ROUTES[i].route)) { *generation = 1; return API_ROUTES[i].skin; }
    if (!strncmp(route, "/messages", 9)) return &ANTHROPIC_MESSAGES;
    if (!strncmp(route, "/responses", 10)) return &OPENAI_RESPONSES;
    if (!strncmp(path, "/api/", 5)) return &OLLAMA_CHAT;
    return &OPENAI_CHAT;
}

static void server_respond_error(const HttpRequest *req, HttpResponse *res, const ApiError *e,
                                 double t0) {
    int generation;
    api_skin_for_path(req->path, &generation)->error(res, e);
    server_log(req, e->status, t0, "%s", e->message);
}

/* CORS (a setting, off by default): CORS=origin,origin,... or * names the web pages that may call
   the server from a browser. A request whose Origin is allowed gets Access-Control-Allow-Origin
   (that origin, or * when CORS has *) and Vary: Origin; a preflight (OPTIONS) from an allowed
   origin is answered 204 before the key check (browsers send no credentials there) with the
   methods, the headers it asked for and a max age; from another origin 403. Responses http.h
   writes itself (429 when the queue is full, 408, 413, ...) carry no CORS headers. */
static const char *server_cors_origin(const Server *srv, const HttpRequest *req) {
    const char *cors = srv->set->cors ? srv->set->cors : "", *origin = http_header(req, "Origin");
    if (!cors[0] || !origin) return NULL;
    const size_t n = strlen(origin);
    for (const char *p = cors; *p;) {
        while (*p == ' ' || *p == ',') p++;
        size_t len = strcspn(p, ", ");
        if (len == 1 && *p == '*') return "*";
        if (len && len == n && !memcmp(p, origin, n)) return origin;
        p += len;
    }
    return NULL;
}

static void server_cors(const Server *srv, const HttpRequest *req, HttpResponse *res) {
    const char *allow = server_cors_origin(srv, req);
    if (!allow) return;
    http_add_header(res, "Access-Control-Allow-Origin", allow);
    http_add_header(res, "Vary", "Origin");
}

/* A preflight: 1 when it was one (answered). */
static int server_preflight(const Server *srv, const HttpRequest *req, HttpResponse *res,
                            double t0) {
    if (strcmp(req->method, "OPTIONS") || !srv->set->cors || !srv->set->cors[0]) return 0;
    if (!server_cors_origin(srv, req)) {
        ApiError e = { 0 };
        api_fail(&e, 403, NULL, NULL, "origin %.200s is not allowed (CORS=%.200s)",
                 http_header(req, "Origin") ? http_header(req, "Origin") : "(none)",
                 srv->set->cors);
        server_respond_error(req, res, &e, t0);
        return 1;
    }
    const char *asked = http_header(req, "Access-Control-Request-Headers");
    http_add_header(res, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
    if (!asked || http_add_header(res, "Access-Control-Allow-Headers", asked))
        http_add_header(res, "Access-Control-Allow-Headers",
                        "authorization, content-type, x-api-key, anthropic-version");
    http_add_header(res, "Access-Control-Max-Age", "600");
    http_respond(res, 204, NULL, NULL, 0);
    server_log(req, 204, t0, "CORS preflight");
    return 1;
}

/* Ollama's model endpoints (api_ollama.c): 1 when it answered the request. */
static int ollama_quick(const Server *srv, const HttpRequest *req, HttpResponse *res, double t0);

/* The model as OpenAI lists it, with Anthropic's fields too (type, display_name, created_at), so
   both APIs' clients read the one list. */
static void api_write_model(JsonWriter *w, const Server *srv) {
    char when[32];
    const time_t t = (time_t)srv->created;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    jw_obj(w);
    jw_kstr(w, "id", srv->model_name);
    jw_kstr(w, "object", "model");
    jw_kint(w, "created", srv->created);
    jw_kstr(w, "owned_by", "glm.c");
    jw_kint(w, "max_model_len", srv->capacity);   /* vLLM's field: the context (CTX) */
    jw_kstr(w, "type", "model");
    jw_kstr(w, "display_name", srv->model_name);
    jw_kstr(w, "created_at", when);
    jw_obj_end(w);
}

/* web.c (included after this file): the page at GET /, the figures at GET /stats, and the
   observers that feed them (called around each answer). */
static int web_quick(const Server *srv, const HttpRequest *req, HttpResponse *res);
static void web_request_begin(Server *srv, int prompt_tokens);
static void web_request_end(Server *srv);

/* The I/O thread's part: everything that needs no model. Returns 0 to hand a completion to the
   worker. */
static int server_quick(const HttpRequest *req, HttpResponse *res, void *user) {
    const Server *srv = user;
    if (web_quick(srv, req, res)) return 1;   /* web.c: GET / (the page) and GET /stats */
    const double t0 = now_seconds();
    const char *route = api_route(req->path);
    const int get = !strcmp(req->method, "GET") || !strcmp(req->method, "HEAD");
    int completion;
    api_skin_for_path(req->path, &completion);
    ApiError e = { 0 };
    server_cors(srv, req, res);
    if (server_preflight(srv, req, res, t0)) return 1;
    if (!strcmp(req->path, "/health")) {   /* open without a key: for load balancers and scripts */
        if (!get) api_fail(&e, 405, NULL, NULL, "/health takes GET");
        else {
            static const char ok[] = "{\"status\":\"ok\"}";
            http_respond_json(res, 200, ok, sizeof ok - 1);
            server_log(req, 200, t0, NULL);
            return 1;
        }
    } else if (!http_auth_ok(req, srv->set->api_key)) {
        api_fail(&e, 401, NULL, "invalid_api_key",
                 "missing or wrong API key (send Authorization: Bearer KEY or x-api-key: KEY)");
    } else if (completion) {
        if (!strcmp(req->method, "POST")) return 0;
        api_fail(&e, 405, NULL, NULL, "%s takes POST", req->path);
    } else if (!strcmp(route, "/models") || !strncmp(route, "/models/", 8)) {
        if (!get) api_fail(&e, 405, NULL, NULL, "%s takes GET", req->path);
        else if (route[7] == '/' && strcmp(route + 8, srv->model_name))
            api_fail(&e, 404, "model", "model_not_found",
                     "no model \"%.200s\" here: this server has \"%s\"", route + 8,
                     srv->model_name);
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
                jw_kbool(&w, "has_more", 0);   /* Anthropic's page fields */
                jw_kstr(&w, "first_id", srv->model_name);
                jw_kstr(&w, "last_id", srv->model_name);
                jw_obj_end(&w);
            }
            server_respond_writer(res, &w);
            server_log(req, 200, t0, NULL);
            return 1;
        }
    } else if (!strncmp(req->path, "/api/", 5) && ollama_quick(srv, req, res, t0)) {
        return 1;
    } else {
        api_fail(&e, 404, NULL, NULL,
                 "no endpoint %.200s (this server has /v1/chat/completions, /v1/completions, "
                 "/v1/responses, "
                 "/v1/messages, /v1/messages/count_tokens, /v1/models, /api/chat, /api/generate, "
                 "/api/tags, /api/show, /api/ps, "
                 "/api/version and /health)",
                 req->path);
    }
    if (e.status == 405) http_add_header(res, "Allow", completion ? "POST" : "GET, HEAD");
    server_respond_error(req, res, &e, t0);
    return 1;
}

/* One completion after its request was read: prefill (reusing the cached prefix), generate, answer.
   */
/* A request's predicted output as a drafter (Speculation's caller). The answer usually follows the
   prediction with edits: the answer's last tokens (up to NGRAM_LONGEST of them, then fewer) are
   looked up in the prediction from where the last match ended, then behind it, within
   PREDICTION_WINDOW tokens each way (so a step costs the same for a prediction of any size: a
   multi-MB one that never matches cost 0.17 s a token when it was scanned whole), and what
   follows there is drafted. Verification keeps what the model would have said anyway. */
enum { PREDICTION_WINDOW = 4096 };
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
        const int ahead =
            p->cursor + PREDICTION_WINDOW < p->n - m ? p->cursor + PREDICTION_WINDOW : p->n - m;
        const int behind =
            p->cursor - m - PREDICTION_WINDOW > 0 ? p->cursor - m - PREDICTION_WINDOW : 0;
        for (int pass = 0; pass < 2; pass++) {
            const int from = pass == 0 ? (p->cursor > m ? p->cursor - m : 0) : behind;
            const int to = pass == 0 ? ahead : (p->cursor - m < ahead ? p->cursor - m : ahead);
            for (int start = from; start <= to; start++) {
                if (memcmp(p->ids + start, answer + tail, (size_t)m * sizeof(int))) continue;
                p->cursor = start + m;
                int count = 0;
                while (count < k && p->cursor + count < p->n) {
                    out[count] = p->ids[p->cursor + count];
                    count++;
                }
                return count;
            }
        }
    }
    return 0;
}

/* ---- slots: several answers at once (SLOTS > 1; see Scheduler) ------------------------------- */

static void engine_acquire(Scheduler *s) {
    pthread_mutex_lock(&s->mu);
    while (s->engine_busy || (s->n_ready && s->n_ready == s->decoding))
        pthread_cond_wait(&s->cv, &s->mu);
    s->engine_busy = 1;
    pthread_mutex_unlock(&s->mu);
}

static void engine_release(Scheduler *s) {
    pthread_mutex_lock(&s->mu);
    s->engine_busy = 0;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* The Generator's on_chunk during a prefill: the decode steps waiting go first. */
static void engine_yield(void *user) {
    engine_release(user);
    engine_acquire(user);
}

/* A slot starts (+1) or ends (-1) its decode steps. */
static void slot_decoding(Server *srv, int delta) {
    if (srv->n_slots == 1) return;
    Scheduler *s = &srv->sched;
    pthread_mutex_lock(&s->mu);
    s->decoding += delta;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* As generator_step(slot->gen, ids, max); with several slots, in one forward with the steps of
   the others that decode. The on_token callbacks of all of them run on the thread that runs the
   forward, while their own threads wait here. */
static int slot_step(Server *srv, Slot *slot, int *ids, int max) {
    if (srv->n_slots == 1) return generator_step(slot->gen, ids, max);
    Scheduler *s = &srv->sched;
    pthread_mutex_lock(&s->mu);
    slot->ids = ids;
    slot->max = max;
    slot->stepped = 0;
    s->ready[s->n_ready++] = slot;
    pthread_cond_broadcast(&s->cv);
    while (!slot->stepped) {
        if (s->engine_busy || s->n_ready < s->decoding) {
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        const int n = s->n_ready;
        Slot *batch[n];
        Generator *gens[n];
        int *step_ids[n], step_max[n], counts[n];
        for (int k = 0; k < n; k++) {
            batch[k] = s->ready[k];
            gens[k] = batch[k]->gen;
            step_ids[k] = batch[k]->ids;
            step_max[k] = batch[k]->max;
        }
        s->n_ready = 0;
        s->engine_busy = 1;
        pthread_mutex_unlock(&s->mu);
        generator_step_batch(gens, n, &s->batch, step_ids, step_max, counts);
        pthread_mutex_lock(&s->mu);
        for (int k = 0; k < n; k++) {
            batch[k]->count = counts[k];
            batch[k]->stepped = 1;
            batch[k]->shared_steps += n > 1;
        }
        s->forwards++;
        s->shared_forwards += n > 1;
        s->engine_busy = 0;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return slot->count;
}

/* A free slot for a request (there is one: a worker per slot), the one whose conversation shares
   the longest beginning with ids, so its prefix reuse works. */
static Slot *slot_take(Server *srv, const TokenList *ids) {
    if (srv->n_slots == 1) return srv->slots;
    Scheduler *s = &srv->sched;
    pthread_mutex_lock(&s->mu);
    Slot *best = NULL;
    int best_len = -1;
    for (int i = 0; i < srv->n_slots; i++) {
        Slot *slot = &srv->slots[i];
        if (slot->busy) continue;
        const Generator *g = slot->gen;
        int len = 0;
        while (len < g->pos && len < ids->n && g->history[len] == ids->ids[len]) len++;
        if (len > best_len) { best = slot; best_len = len; }
    }
    if (!best) die("internal: no free slot for a request");
    best->busy = 1;
    best->shared_steps = 0;
    pthread_mutex_unlock(&s->mu);
    return best;
}

static void slot_give_back(Server *srv, Slot *slot) {
    if (srv->n_slots == 1) return;
    pthread_mutex_lock(&srv->sched.mu);
    slot->busy = 0;
    pthread_mutex_unlock(&srv->sched.mu);
}

/* The disk is free until the next request (no slot answering): bring in the hot experts. */
static void server_idle(Server *srv, Slot *slot) {
    if (srv->n_slots == 1) { expert_store_idle(&slot->gen->model->experts); return; }
    Scheduler *s = &srv->sched;
    engine_acquire(s);
    pthread_mutex_lock(&s->mu);
    int busy = 0;
    for (int i = 0; i < srv->n_slots; i++) busy += srv->slots[i].busy;
    pthread_mutex_unlock(&s->mu);
    if (!busy) expert_store_idle(&slot->gen->model->experts);
    engine_release(s);
}

static void server_answer(Server *srv, Slot *slot, const HttpRequest *req, HttpResponse *res,
                          const ApiRequest *q, const TokenList *ids, int limit, double t0) {
    Generator *g = slot->gen;
    generator_set_sampling(g, q->sampling);
    /* response_format: after </think> when the prompt opens the reasoning */
    GrammarMatcher *constraint = NULL;
    if (q->grammar) {
        char err[512];
        pthread_mutex_lock(&srv->grammar_mu);
        if (!srv->grammar_vocab &&
            !(srv->grammar_vocab = grammar_vocab_of(srv->codec->tok, g->model->c.vocab,
                                                    g->model->c.eos, g->model->c.n_eos, err,
                                                    sizeof err)))
            die("%s: %s", srv->codec->path, err);
        pthread_mutex_unlock(&srv->grammar_mu);
        if (!(constraint = grammar_matcher_new(q->grammar, srv->grammar_vocab)))
            die("out of memory");
        generator_set_constraint(g, constraint, srv->grammar_vocab,
                                 q->chat && q->render.thinking
                                     ? srv->codec->tag[CHAT_TAG_END_THINK]
                                     : -1);
    }
    g->stop_rules.max_tokens = limit;
    /* the last token's forward is skipped; the next request re-runs at most that one */
    g->stop_rules.resumable = 0;
    Reply r;
    reply_init(&r, srv, res, q);
    r.gen = g;
    g->on_token = reply_token;
    g->on_token_user = &r;
    /* web.c: /stats follows this answer (wraps on_token); with several slots, slot 0's */
    const int watched = slot == srv->slots;
    if (watched) web_request_begin(srv, ids->n);
    slot->interrupt = 0;
    g->interrupt = &slot->interrupt;

    ClientWatch watch;
    client_watch_start(&watch, res, &slot->interrupt);
    int reused = 0;
    if (srv->n_slots > 1) {
        g->on_chunk = engine_yield;
        g->on_chunk_user = &srv->sched;
        engine_acquire(&srv->sched);
    }
    const int prefilled = generator_reuse_prefix(g, ids->ids, ids->n, &reused) == ids->n;
    if (srv->n_slots > 1) {
        engine_release(&srv->sched);
        g->on_chunk = NULL;
    }
    client_watch_stop(&watch);
    fprintf(stderr, "glm: prefix reuse: %d of %d prompt tokens\n", reused, ids->n);
    const double prefilled_at = now_seconds();
    r.prompt_tokens = ids->n;
    r.cached_tokens = reused;
    r.start = t0;
    int gone = !prefilled;
    const ApiSkin *skin = api_skin_of(q);
    if (!gone && q->stream) skin->begin(&r);
    generator_begin(g);
    TokenList predicted = { 0 };
    PredictedOutput prediction = { 0 };
    /* text as in a message: a written tag is text */
    if (q->prediction && g->spec.mode != SPEC_OFF) {
        tokens_push_text(&predicted, srv->codec, q->prediction, q->prediction_len);
        prediction = (PredictedOutput){ predicted.ids, predicted.n, ids->n, 0 };
        g->spec.caller = predicted_output_draft;
        g->spec.caller_user = &prediction;
        /* another prediction: its acceptance is unknown again */
        drafter_restart(&g->spec, DRAFTER_CALLER);
    }
    const SpecCounts spec_before = spec_counts(g);
    /* a step may return a run of ids (speculation); on_token has seen each of them */
    int run[64];
    slot_decoding(srv, 1);
    while (!gone && !r.stop_hit && !r.one_call_done &&
           slot_step(srv, slot, run, (int)(sizeof run / sizeof run[0])) > 0)
        gone = http_client_gone(res);
    slot_decoding(srv, -1);
    g->on_token = NULL;
    g->interrupt = NULL;
    g->spec.caller = NULL;
    g->spec.caller_user = NULL;
    generator_set_constraint(g, NULL, NULL, -1);
    grammar_matcher_free(constraint);
    free(predicted.ids);
    const SpecCounts spec_after = spec_counts(g);
    const ApiUsage usage = {
        ids->n,
        g->generated,
        reused,
        q->prediction != NULL,
        spec_after.accepted[DRAFTER_CALLER] - spec_before.accepted[DRAFTER_CALLER],
        (spec_after.drafted[DRAFTER_CALLER] - spec_before.drafted[DRAFTER_CALLER]) -
            (spec_after.accepted[DRAFTER_CALLER] - spec_before.accepted[DRAFTER_CALLER]),
        t0,
        prefilled_at,
        now_seconds()
    };
    if (gone) {
        /* The client left, or the server is stopping: end properly in case someone still listens.
           */
        static const char why[] =
            "the generation was stopped (the client left or the server is stopping)";
        int status = 200;
        if (q->stream && prefilled) {
            skin->abort(&r, why);
        } else {
            ApiError e = { 503, NULL, NULL, "" };
            snprintf(e.message, sizeof e.message, "%s", why);
            skin->error(res, &e);
            status = 503;
        }
        server_log(req, status, t0,
                   "client gone or server stopping: stopped %s after %d generated tokens",
                   prefilled ? "generating" : "during the prefill", g->generated);
    } else {
        reply_text_end(&r);
        const ApiFinish finish = reply_finish(&r, g->stop);
        skin->finish(&r, finish, &usage);
        long long drafted, accepted;
        spec_totals(&spec_after, &spec_before, &drafted, &accepted);
        char spec_note[160] = "";
        if (g->spec.mode != SPEC_OFF)
            snprintf(spec_note, sizeof spec_note, ", %lld of %lld drafts accepted", accepted,
                     drafted);
        if (srv->n_slots > 1)
            snprintf(spec_note + strlen(spec_note), sizeof spec_note - strlen(spec_note),
                     ", %lld steps shared a forward with other slots", slot->shared_steps);
        server_log(req, 200, t0, "%d prompt tokens (%d reused), %d generated%s, finish %s%s",
                   ids->n, reused, g->generated, spec_note, api_openai_finish(finish),
                   q->stream ? ", streamed" : "");
    }
    if (watched) web_request_end(srv);   /* web.c */
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
        fprintf(stderr, "glm: SESSION=%s: %d tokens saved in %.1f s\n", srv->session_path,
                srv->gen->pos, now_seconds() - t0);
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
    if (generator_load(srv->gen, &srv->session_key, path, NULL, err, sizeof err))
        die("SESSION=%s %s", path, err);
    fprintf(stderr,
            "glm: SESSION=%s: %d tokens back in the KV cache (read in %.2f s); a request that "
            "starts with them reuses them\n",
            path, srv->gen->pos, now_seconds() - t0);
}

/* The worker's part: a completion request, from its body to the last byte of the answer. */
static void server_handle(const HttpRequest *req, HttpResponse *res, void *user) {
    Server *srv = user;
#ifdef _OPENMP
    /* with several workers, each thread's forwards get the team THREADS asked for (the scratch is
       sized for it), not OpenMP's default */
    if (srv->n_slots > 1) omp_set_num_threads(srv->omp_threads);
#endif
    const double t0 = now_seconds();
    ApiRequest q;
    memset(&q, 0, sizeof q);
    chat_conv_init(&q.conv);
    ApiError e = { 0 };
    TokenList ids = { 0 };
    int limit = -1;
    char jerr[256];
    server_cors(srv, req, res);
    JsonDoc *doc = json_parse(req->body, req->body_len, jerr, sizeof jerr);
    if (!doc) api_fail(&e, 400, NULL, NULL, "the request body is not valid JSON: %s", jerr);
    else if (json_type(json_root(doc)) != JSON_OBJECT)
        api_fail(&e, 400, NULL, NULL, "the request body must be a JSON object");
    else {
        int generation;
        const ApiSkin *skin = api_skin_for_path(req->path, &generation);
        q.skin = skin;
        if (!skin->parse(srv, json_root(doc), &q, &e)) api_prompt_ids(srv, &q, &ids, &limit, &e);
    }
    if (e.status) {
        server_respond_error(req, res, &e, t0);
    } else if (q.count_only) {
        api_skin_of(&q)->count(res, ids.n);
        server_log(req, 200, t0, "%d prompt tokens counted", ids.n);
    } else {
        if (!q.seed_given && !srv->set->seed) q.sampling.seed = server_random(srv);
        Slot *slot = slot_take(srv, &ids);
        server_answer(srv, slot, req, res, &q, &ids, limit, t0);
        server_save_session(srv);
        slot_give_back(srv, slot);
        server_idle(srv, slot);
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
    if (set->slots > 1 && set->session_path[0])
        die("SESSION=%s keeps one conversation: it works with SLOTS=1, not SLOTS=%d",
            set->session_path, set->slots);
    Model model;
    srv.capacity = text_model_load(set, &tc, &model, 0, 1);
    srv.n_slots = model.ram.kv_slots;   /* SLOTS, or what the RAM plan chose for SLOTS=0 */
    srv.slots = xcalloc((size_t)srv.n_slots, sizeof *srv.slots);
    ForwardOptions opt = engine_start(set, &model, &srv.slots[0].state, srv.capacity);
    for (int i = 0; i < srv.n_slots; i++) {
        Slot *slot = &srv.slots[i];
        if (i > 0) {
            run_state_init(&slot->state, &model, srv.capacity, set->batch, 0);
            slot->state.prefix_cache = srv.slots[0].state.prefix_cache;
        }
        slot->gen = generator_create(&model, &slot->state, &opt,
                                     (SamplerSettings){ set->temperature, set->top_p, set->seed });
        generator_set_speculation(slot->gen, set->spec_mode, set->draft);
    }
    srv.gen = srv.slots[0].gen;
    srv.omp_threads = max_threads();
    pthread_mutex_init(&srv.rng_mu, NULL);
    pthread_mutex_init(&srv.grammar_mu, NULL);
    pthread_mutex_init(&srv.sched.mu, NULL);
    pthread_cond_init(&srv.sched.cv, NULL);
    if (srv.n_slots > 1) {
        srv.sched.ready = xcalloc((size_t)srv.n_slots, sizeof *srv.sched.ready);
        step_batch_init(&srv.sched.batch, &model, srv.n_slots);
    }
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
    cfg.workers = srv.n_slots;
    cfg.quick = server_quick;
    /* it never reads a body: a wrong key is answered before one is taken in */
    cfg.head = server_quick;
    cfg.log = server_http_log;
    cfg.handle = server_handle;
    cfg.user = &srv;
    char err[512];
    HttpServer *http = http_server_create(&cfg, err, sizeof err);
    if (!http) die("SERVE=%s: %s", set->serve, err);
    const HttpAddr *a = http_server_addr(http);
    const int v6 = strchr(a->host, ':') != NULL;
    char at_once[48] = "one answer at a time";
    if (srv.n_slots > 1) snprintf(at_once, sizeof at_once, "%d answers at a time", srv.n_slots);
    fprintf(stderr,
            "glm: serving %s at http://%s%s%s:%d/v1 (context %d tokens, %s, %d "
            "may wait; "
            "sampling defaults TEMPERATURE %g, NUCLEUS %g; thinking %s; %s). Ctrl-C stops.\n",
            srv.model_name, v6 ? "[" : "", a->host, v6 ? "]" : "", http_server_port(http),
            srv.capacity, at_once, set->queue, set->temperature, set->top_p,
            set->think ? "on" : "off",
            set->api_key[0] ? "API_KEY required" : "no API key");
    if (set->web)
        fprintf(stderr, "glm: chat page at http://%s%s%s:%d/\n", v6 ? "[" : "", a->host,
                v6 ? "]" : "", http_server_port(http));
    g_serving = 1;
    const double serving_since = now_seconds();
    const int rc = http_server_run(http);
    http_server_free(http);
    /* what GET /stats said last */
    print_expert_stats(&model.experts, now_seconds() - serving_since);
    if (srv.n_slots > 1) {
        fprintf(stderr, "glm: slots: %lld decode forwards, %lld of them for several answers\n",
                srv.sched.forwards, srv.sched.shared_forwards);
        step_batch_free(&srv.sched.batch);
        free(srv.sched.ready);
    }
    for (int i = 0; i < srv.n_slots; i++) {
        generator_free(srv.slots[i].gen);
        if (i > 0) {
            srv.slots[i].state.prefix_cache = NULL;
            run_state_free(&srv.slots[i].state);
        }
    }
    pthread_cond_destroy(&srv.sched.cv);
    pthread_mutex_destroy(&srv.sched.mu);
    pthread_mutex_destroy(&srv.rng_mu);
    pthread_mutex_destroy(&srv.grammar_mu);
    grammar_vocab_free(srv.grammar_vocab);
    engine_stop(set, &model, &srv.slots[0].state);
    free(srv.slots);
    codec_free(&tc);
    if (rc) fprintf(stderr, "glm: the server's I/O thread could not start\n");
    else fprintf(stderr, "glm: server stopped cleanly\n");
    return rc ? 1 : 0;
}

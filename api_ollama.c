/* =============================================================================================
   api_ollama.c — the Ollama skin: POST /api/chat and /api/generate (the worker), GET /api/tags,
   /api/ps, /api/version and POST /api/show (the I/O thread). server.c's core does the rest.

   Streaming is on by default, as in Ollama: one JSON object per line (application/x-ndjson), the
   last with "done": true, done_reason ("stop" or "length"), the token counts and the durations in
   nanoseconds (load_duration 0: the model is loaded once at start-up; prompt_eval_count counts
   every prompt token, reused ones included). think: false turns thinking off, true on, a level
   word maps as api_effort_level says (absent: the server's THINK); the reasoning comes back as
   "thinking". Tools are OpenAI's function tools; tool calls come back with their arguments as
   an object. options: temperature, top_p, seed, num_predict (-1 and -2: until EOS or a full
   cache), stop, num_ctx (refused when larger than the server's context), top_k (api_top_k); the
   runtime options (num_thread, num_gpu, num_batch, use_mmap, ...) are accepted and ignored; the
   sampling options glm does not have (repeat_penalty, min_p, mirostat, ...) are refused by name
   unless they hold the value that turns them off. keep_alive is accepted (the model stays
   loaded). format "json" makes the answer a JSON object, a format that is a JSON schema makes it
   follow the schema (as OpenAI's response_format; an unenforced keyword is refused by name).
   images, template, context, suffix are refused by name. /api/generate with
   raw: true continues the prompt as written (as /v1/completions); otherwise system and prompt
   go through the template. Errors: {"error": "..."}.
   ============================================================================================= */

#define OLLAMA_API_VERSION "0.12.0"     /* the Ollama release whose API these endpoints follow */

static void ollama_error(HttpResponse *res, const ApiError *e) {
    JsonWriter w;
    jw_init(&w);
    jw_obj(&w);
    jw_kstr(&w, "error", e->message);
    jw_obj_end(&w);
    size_t n;
    const char *t = jw_text(&w, &n);
    if (t) http_respond_json(res, e->status, t, n);
    jw_free(&w);
}

/* Ollama's time stamps: RFC 3339 in UTC with microseconds. */
static void ollama_time(char *dst, size_t n, double t) {
    const time_t sec = (time_t)t;
    struct tm tm;
    gmtime_r(&sec, &tm);
    char day[32];
    strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(dst, n, "%s.%06dZ", day, (int)((t - (double)sec) * 1e6));
}

static double ollama_wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* options: what glm does, and what it refuses unless turned off; the rest (the runtime options
   num_thread, num_gpu, num_batch, use_mmap, ... and unknown ones) is ignored. */
static int ollama_options(const Server *srv, const JsonValue *o, ApiRequest *r, ApiError *e) {
    static const struct { const char *name; double off; } sampling[] = {
        { "repeat_penalty", 1 }, { "presence_penalty", 0 }, { "frequency_penalty", 0 }, { "min_p", 0 }, { "typical_p", 1 },
        { "tfs_z", 1 }, { "mirostat", 0 }, { "repeat_last_n", 0 }, { "penalize_newline", 0 },
    };
    double temperature = r->sampling.temperature, top_p = r->sampling.top_p;
    int64_t seed = 0, predict = -1, ctx = 0;
    if (api_number(o, "temperature", 0, 100, &temperature, e) ||
        api_number(o, "top_p", 0, 1, &top_p, e) ||
        api_int(o, "seed", INT64_MIN, INT64_MAX, &seed, e) ||
        api_int(o, "num_predict", -2, INT32_MAX, &predict, e) ||
        api_int(o, "num_ctx", 1, INT32_MAX, &ctx, e) ||
        api_stop_strings(json_get(o, "stop"), "stop", r, e)) {
        char why[sizeof e->message];   /* the field is named in the message; it is in options */
        snprintf(why, sizeof why, "options: %.780s", e->message);
        snprintf(e->message, sizeof e->message, "%s", why);
        e->param = "options";
        return -1;
    }
    r->sampling.temperature = (float)temperature;
    r->sampling.top_p = (float)top_p;
    if ((r->seed_given = api_given(json_get(o, "seed")))) r->sampling.seed = (uint64_t)seed;
    if (predict == 0)
        return api_fail(e, 400, "options.num_predict", NULL,
                        "options: \"num_predict\" 0 asks for no answer (-1: no limit)");
    r->max_tokens = predict > 0 ? (int)predict : -1;
    if (ctx > srv->capacity)
        return api_fail(e, 400, "options.num_ctx", NULL,
                        "options: \"num_ctx\" is %lld but this server's context holds %d tokens "
                        "(CTX)",
                        (long long)ctx, srv->capacity);
    if (api_top_k(o, "top_k", "options.top_k", r, e)) return -1;
    for (size_t i = 0; i < json_len(o); i++) {
        const char *key = json_key_at(o, i, NULL);
        const JsonValue *v = json_value_at(o, i);
        for (size_t k = 0; k < sizeof sampling / sizeof sampling[0]; k++) {
            if (strcmp(key, sampling[k].name) || !api_given(v)) continue;
            const double d = json_type(v) == JSON_BOOL ? json_bool(v) : json_num(v);
            if (d != sampling[k].off)
                return api_fail(e, 400, "options", NULL,
                                "options: \"%s\" is not supported (only %g, which turns it off)",
                                key, sampling[k].off);
        }
    }
    return 0;
}

/* format: "" (none), "json" (any JSON object) or a JSON schema. */
static int ollama_format(const JsonValue *v, ApiRequest *r, ApiError *e) {
    size_t n = 0;
    const char *s = json_str(v, &n);
    if (!api_given(v) || (s && !n)) return 0;
    if (s && !strcmp(s, "json")) {
        if (!(r->grammar = grammar_json_object(NULL))) die("out of memory");
        return 0;
    }
    if (json_type(v) != JSON_OBJECT)
        return api_fail(e, 400, "format", NULL, "\"format\" must be \"json\" or a JSON schema");
    return api_schema_grammar(v, "format", "format", r, e);
}

/* The fields /api/chat and /api/generate share. */
static int ollama_common(const Server *srv, const JsonValue *root, ApiRequest *r, ApiError *e) {
    api_request_defaults(srv, r);
    r->stream = 1;
    const JsonValue *v = json_get(root, "model"), *options;
    if (api_given(v) && json_type(v) != JSON_STRING)
        return api_fail(e, 400, "model", NULL, "\"model\" must be a string");
    static const char *const refused[] = { "template", "context", "suffix", "images" };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        size_t n = 1;
        if (api_given(v = json_get(root, refused[i])) && !(json_str(v, &n) && !n) &&
            !(json_type(v) == JSON_ARRAY && !json_len(v)))
            return api_fail(e, 400, refused[i], NULL, "\"%s\" is not supported", refused[i]);
    }
    if (api_bool(root, "stream", "stream", &r->stream, e) ||
        api_object(root, "options", &options, e) ||
        (options && ollama_options(srv, options, r, e)) ||
        ollama_format(json_get(root, "format"), r, e))
        return -1;
    if (api_given(v = json_get(root, "think"))) {
        const char *level = json_str(v, NULL);
        if (json_type(v) == JSON_BOOL) r->render.thinking = json_bool(v);
        else if (!level || api_effort_level(level, &r->render))
            return api_fail(e, 400, "think", NULL,
                            "\"think\" must be true, false or a level (low, medium, high, max)");
    }
    return 0;
}

/* Ollama's messages → OpenAI's: tool_calls get "type": "function", thinking is reasoning_content,
   tool_name is the tool message's name. */
static int ollama_message(const JsonValue *m, size_t i, JsonWriter *w, ApiError *e) {
    if (json_type(m) != JSON_OBJECT)
        return api_fail(e, 400, "messages", NULL, "messages[%zu] is not an object", i);
    const JsonValue *v = json_get(m, "images");
    if (api_given(v) && !(json_type(v) == JSON_ARRAY && !json_len(v)))
        return api_fail(e, 400, "messages", NULL,
                        "messages[%zu].images is not supported (this model reads text)", i);
    jw_obj(w);
    for (size_t k = 0; k < json_len(m); k++) {
        const char *key = json_key_at(m, k, NULL);
        v = json_value_at(m, k);
        if (!strcmp(key, "thinking")) { jw_key(w, "reasoning_content"); api_copy_json(w, v); }
        else if (!strcmp(key, "tool_name")) { jw_key(w, "name"); api_copy_json(w, v);
        } else if (!strcmp(key, "role") || !strcmp(key, "content")) {
            jw_key(w, key);
            api_copy_json(w, v);
        } else if (!strcmp(key, "tool_calls") && json_type(v) == JSON_ARRAY) {
            jw_key(w, "tool_calls");
            jw_arr(w);
            for (size_t c = 0; c < json_len(v); c++) {
                const JsonValue *call = json_at(v, c);
                jw_obj(w);
                jw_kstr(w, "type", "function");
                jw_key(w, "function");
                api_copy_json(w, json_get(call, "function"));
                jw_obj_end(w);
            }
            jw_arr_end(w);
        }
    }
    jw_obj_end(w);
    return 0;
}

static int ollama_chat_parse(const Server *srv, const JsonValue *root, ApiRequest *r, ApiError *e) {
    if (ollama_common(srv, root, r, e)) return -1;
    const JsonValue *messages = json_get(root, "messages"), *tools = json_get(root, "tools");
    if (json_type(messages) != JSON_ARRAY || !json_len(messages))
        return api_fail(e, 400, "messages", NULL, "\"messages\" must be a non-empty list");
    JsonWriter w;
    jw_init(&w);
    jw_obj(&w);
    if (api_given(tools)) { jw_key(&w, "tools"); api_copy_json(&w, tools); }
    jw_key(&w, "messages");
    jw_arr(&w);
    for (size_t i = 0; i < json_len(messages); i++)
        if (ollama_message(json_at(messages, i), i, &w, e)) { jw_free(&w); return -1; }
    jw_arr_end(&w);
    jw_obj_end(&w);
    return api_read_translated(r, &w, "messages", e);
}

static int ollama_generate_parse(const Server *srv, const JsonValue *root, ApiRequest *r,
                                 ApiError *e) {
    if (ollama_common(srv, root, r, e)) return -1;
    int raw = 0;
    if (api_bool(root, "raw", "raw", &raw, e)) return -1;
    const JsonValue *system = json_get(root, "system");
    if (!(r->prompt = json_str(json_get(root, "prompt"), &r->prompt_len)))
        return api_fail(e, 400, "prompt", NULL, "\"prompt\" must be a string");
    if (!r->prompt_len)
        return api_fail(e, 400, "prompt", NULL, "\"prompt\" is empty: there is nothing to answer");
    if (api_given(system) && !json_str(system, NULL))
        return api_fail(e, 400, "system", NULL, "\"system\" must be a string");
    if (raw) {
        if (api_given(system))
            return api_fail(e, 400, "system", NULL,
                            "\"system\" goes through the template, which raw: true leaves out");
        r->chat = 0;
        return 0;
    }
    JsonWriter w;
    jw_init(&w);
    jw_obj(&w);
    jw_key(&w, "messages");
    jw_arr(&w);
    if (api_given(system)) {
        jw_obj(&w);
        jw_kstr(&w, "role", "system");
        jw_key(&w, "content");
        api_copy_json(&w, system);
        jw_obj_end(&w);
    }
    jw_obj(&w);
    jw_kstr(&w, "role", "user");
    jw_key(&w, "content");
    jw_strn(&w, r->prompt, r->prompt_len);
    jw_obj_end(&w);
    jw_arr_end(&w);
    jw_obj_end(&w);
    return api_read_translated(r, &w, "prompt", e);
}

static int ollama_is_chat(const Reply *r) { return api_skin_of(r->req) == &OLLAMA_CHAT; }

static void ollama_head(JsonWriter *w, const Reply *r) {
    char when[48];
    ollama_time(when, sizeof when, ollama_wall());
    jw_obj(w);
    jw_kstr(w, "model", r->srv->model_name);
    jw_kstr(w, "created_at", when);
}

/* A piece of the answer, or the whole of it: chat's message, or generate's response and thinking.
   */
static void ollama_write_body(JsonWriter *w, const Reply *r, const char *content,
                              size_t content_len, const char *thinking, size_t thinking_len,
                              int call_from, int call_to) {
    if (ollama_is_chat(r)) {
        jw_key(w, "message");
        jw_obj(w);
        jw_kstr(w, "role", "assistant");
        jw_key(w, "content");
        jw_strn(w, content ? content : "", content_len);
        if (thinking_len) { jw_key(w, "thinking"); jw_strn(w, thinking, thinking_len); }
        if (call_to > call_from) {
            jw_key(w, "tool_calls");
            jw_arr(w);
            for (int i = call_from; i < call_to; i++) {
                const ChatOutCall *c = &r->out.calls[i];
                jw_obj(w);
                jw_key(w, "function");
                jw_obj(w);
                jw_key(w, "name");
                jw_strn(w, c->name, c->name_len);
                jw_key(w, "arguments");
                api_write_arguments(w, c->arguments, c->arguments_len);
                jw_obj_end(w);
                jw_obj_end(w);
            }
            jw_arr_end(w);
        }
        jw_obj_end(w);
    } else {
        jw_key(w, "response");
        jw_strn(w, content ? content : "", content_len);
        if (thinking_len) { jw_key(w, "thinking"); jw_strn(w, thinking, thinking_len); }
    }
}

static void ollama_begin(Reply *r) { http_stream_begin(r->res, "application/x-ndjson"); }

static void ollama_event(Reply *r, const ChatOutEvent *ev, int call_index) {
    JsonWriter w;
    jw_init(&w);
    ollama_head(&w, r);
    if (ev->kind == CHAT_OUT_TOOL_CALL)
        ollama_write_body(&w, r, "", 0, NULL, 0, call_index, call_index + 1);
    else if (ev->kind == CHAT_OUT_REASONING)
        ollama_write_body(&w, r, "", 0, ev->text, ev->len, 0, 0);
    else ollama_write_body(&w, r, ev->text, ev->len, NULL, 0, 0, 0);
    jw_kbool(&w, "done", 0);
    jw_obj_end(&w);
    reply_send_line(r, &w);
}

static void ollama_finish(Reply *r, ApiFinish finish, const ApiUsage *u) {
    JsonWriter w;
    jw_init(&w);
    ollama_head(&w, r);
    const ChatOutput *o = &r->out;
    if (r->req->stream) ollama_write_body(&w, r, "", 0, NULL, 0, 0, 0);
    else
        ollama_write_body(&w, r, o->content, o->content_len, o->reasoning, o->reasoning_len, 0,
                          o->n_calls);
    jw_kbool(&w, "done", 1);
    jw_kstr(&w, "done_reason", finish == FINISH_LENGTH ? "length" : "stop");
    jw_kint(&w, "total_duration", (int64_t)((u->end - u->start) * 1e9));
    jw_kint(&w, "load_duration", 0);
    jw_kint(&w, "prompt_eval_count", u->prompt);
    jw_kint(&w, "prompt_eval_duration", (int64_t)((u->prefilled - u->start) * 1e9));
    jw_kint(&w, "eval_count", u->completion);
    jw_kint(&w, "eval_duration", (int64_t)((u->end - u->prefilled) * 1e9));
    jw_obj_end(&w);
    if (!r->req->stream) { server_respond_writer(r->res, &w); return; }
    reply_send_line(r, &w);
    http_stream_end(r->res);
}

static void ollama_abort(Reply *r, const char *why) {
    JsonWriter w;
    jw_init(&w);
    jw_obj(&w);
    jw_kstr(&w, "error", why);
    jw_obj_end(&w);
    reply_send_line(r, &w);
    http_stream_end(r->res);
}

static const ApiSkin OLLAMA_CHAT = { "ollama chat", "",           "call_",      ollama_chat_parse,
                                     ollama_error,  ollama_begin, ollama_event, ollama_finish,
                                     ollama_abort,  NULL };
static const ApiSkin OLLAMA_GENERATE = {
    "ollama generate", "",           "call_",       ollama_generate_parse, ollama_error,
    ollama_begin,      ollama_event, ollama_finish, ollama_abort,          NULL
};

/* ---- the model endpoints (the I/O thread) ---------------------------------------------------- */

static void ollama_write_details(JsonWriter *w) {
    jw_key(w, "details");
    jw_obj(w);
    jw_kstr(w, "parent_model", "");
    jw_kstr(w, "format", "safetensors");
    jw_kstr(w, "family", "glm");
    jw_key(w, "families");
    jw_arr(w);
    jw_str(w, "glm");
    jw_arr_end(w);
    jw_kstr(w, "parameter_size", "");
    jw_kstr(w, "quantization_level", "");
    jw_obj_end(w);
}

/* The model as /api/tags and /api/ps list it. */
static void ollama_write_model(JsonWriter *w, const Server *srv, int running) {
    char when[48];
    ollama_time(when, sizeof when, (double)srv->created);
    jw_obj(w);
    jw_kstr(w, "name", srv->model_name);
    jw_kstr(w, "model", srv->model_name);
    if (!running) jw_kstr(w, "modified_at", when);
    jw_kint(w, "size", 0);
    jw_kstr(w, "digest", "");
    ollama_write_details(w);
    if (running) {
        /* loaded until the server stops */
        ollama_time(when, sizeof when, ollama_wall() + 365.0 * 86400);
        jw_kstr(w, "expires_at", when);
        jw_kint(w, "size_vram", 0);
        jw_kint(w, "context_length", srv->capacity);
    }
    jw_obj_end(w);
}

/* A requested model name is this server's: the name, or the name with Ollama's ":latest" tag. */
static int ollama_model_is(const Server *srv, const char *name) {
    const size_t n = strlen(srv->model_name);
    return !strcmp(name, srv->model_name) ||
           (!strncmp(name, srv->model_name, n) && !strcmp(name + n, ":latest"));
}

static int ollama_quick(const Server *srv, const HttpRequest *req, HttpResponse *res, double t0) {
    const char *p = req->path;
    const int get = !strcmp(req->method, "GET") || !strcmp(req->method, "HEAD"),
              post = !strcmp(req->method, "POST");
    const int list = !strcmp(p, "/api/tags") || !strcmp(p, "/api/ps");
    ApiError e = { 0 };
    JsonWriter w;
    jw_init(&w);
    if (list || !strcmp(p, "/api/version")) {
        if (!get) api_fail(&e, 405, NULL, NULL, "%s takes GET", p);
        else if (list) {
            jw_obj(&w);
            jw_key(&w, "models");
            jw_arr(&w);
            ollama_write_model(&w, srv, !strcmp(p, "/api/ps"));
            jw_arr_end(&w);
            jw_obj_end(&w);
        } else {
            jw_obj(&w);
            jw_kstr(&w, "version", OLLAMA_API_VERSION);
            jw_obj_end(&w);
        }
    } else if (!strcmp(p, "/api/show")) {
        char jerr[256];
        JsonDoc *doc = post ? json_parse(req->body, req->body_len, jerr, sizeof jerr) : NULL;
        const JsonValue *root = json_root(doc);
        const char *name = json_str(json_get(root, "model"), NULL);
        if (!name) name = json_str(json_get(root, "name"), NULL);
        if (!post) api_fail(&e, 405, NULL, NULL, "/api/show takes POST");
        else if (!doc)
            api_fail(&e, 400, NULL, NULL, "the request body is not valid JSON: %s", jerr);
        else if (!name) api_fail(&e, 400, "model", NULL, "\"model\" must be a string");
        else if (!ollama_model_is(srv, name))
            api_fail(&e, 404, "model", NULL, "model '%.200s' not found (this server has '%s')",
                     name, srv->model_name);
        else {
            jw_obj(&w);
            jw_kstr(&w, "modelfile", "");
            jw_kstr(&w, "parameters", "");
            jw_kstr(&w, "template", "");
            ollama_write_details(&w);
            jw_key(&w, "model_info");
            jw_obj(&w);
            jw_kstr(&w, "general.architecture", "glm_moe_dsa");
            jw_kint(&w, "glm_moe_dsa.context_length", srv->capacity);
            jw_obj_end(&w);
            jw_key(&w, "capabilities");
            jw_arr(&w);
            jw_str(&w, "completion");
            jw_str(&w, "tools");
            jw_str(&w, "thinking");
            jw_arr_end(&w);
            jw_obj_end(&w);
        }
        json_free(doc);
    } else {
        jw_free(&w);
        return 0;
    }
    if (e.status) {
        jw_free(&w);
        if (e.status == 405)
            http_add_header(res, "Allow", !strcmp(p, "/api/show") ? "POST" : "GET, HEAD");
        server_respond_error(req, res, &e, t0);
        return 1;
    }
    server_respond_writer(res, &w);
    server_log(req, 200, t0, NULL);
    return 1;
}

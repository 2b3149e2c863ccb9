/* =============================================================================================
   api_anthropic.c — the Anthropic Messages skin: POST /v1/messages and /v1/messages/count_tokens
   (server.c's core does the rest: see "One core, several skins" there).

   The request is translated into OpenAI's messages and tools (chat.h reads those): system (a
   string or text blocks) becomes a system message; a user turn's tool_result blocks become tool
   messages (in order, the text around them user messages); an assistant turn's text, thinking
   (sent back: reasoning) and tool_use blocks become one assistant message with reasoning_content
   and tool_calls. max_tokens is required, as in Anthropic's API. thinking {"type": "enabled",
   "budget_tokens": N} or {"type": "disabled"} switches thinking (absent: the server's THINK);
   GLM-5.2 has no thinking budget, so budget_tokens is checked (an integer >= 1024, as Anthropic
   checks it) and does not bound the thinking: max_tokens bounds the whole answer. top_k
   is taken where it is greedy decoding or changes nothing (api_top_k). tool_choice auto and none;
   any and tool (forcing a call) are refused by name. Images, documents, server tools and MCP
   servers are refused by name. cache_control is accepted and ignored: the KV cache's prefix reuse
   is automatic, and usage reports it as cache_read_input_tokens (input_tokens counts the rest, so
   the two add up to the prompt, which count_tokens returns).
   Answers: content blocks thinking (signature ""), text and tool_use; stop_reason end_turn,
   max_tokens, stop_sequence (with stop_sequence) or tool_use. Streams: message_start, ping, per
   block content_block_start / content_block_delta (text_delta, thinking_delta, input_json_delta) /
   content_block_stop, message_delta (stop_reason, usage), message_stop. Errors:
   {"type": "error", "error": {"type": ..., "message": ...}}.
   ============================================================================================= */

static const char *anthropic_error_type(int status) {
    return status == 401   ? "authentication_error"
           : status == 403 ? "permission_error"
           : status == 404 ? "not_found_error"
           : status == 413 ? "request_too_large"
           : status == 429 ? "rate_limit_error"
           : status == 503 ? "overloaded_error"
           : status >= 500 ? "api_error"
                           : "invalid_request_error";
}

static void anthropic_write_error(JsonWriter *w, int status, const char *message) {
    jw_obj(w);
    jw_kstr(w, "type", "error");
    jw_key(w, "error");
    jw_obj(w);
    jw_kstr(w, "type", anthropic_error_type(status));
    jw_kstr(w, "message", message);
    jw_obj_end(w);
    jw_obj_end(w);
}

static void anthropic_error(HttpResponse *res, const ApiError *e) {
    JsonWriter w;
    jw_init(&w);
    anthropic_write_error(&w, e->status, e->message);
    size_t n;
    const char *t = jw_text(&w, &n);
    if (t) http_respond_json(res, e->status, t, n);
    jw_free(&w);
}

/* The text of a tool_result's content: a string or text blocks. */
static int anthropic_result_text(const JsonValue *c, JsonWriter *w, const char *where,
                                 ApiError *e) {
    size_t n;
    const char *s = json_str(c, &n);
    if (s || !api_given(c)) { jw_strn(w, s ? s : "", s ? n : 0); return 0; }
    if (json_type(c) != JSON_ARRAY)
        return api_fail(e, 400, "messages", NULL, "%s.content must be a string or a list of blocks",
                        where);
    jw_arr(w);
    for (size_t i = 0; i < json_len(c); i++) {
        const JsonValue *b = json_at(c, i);
        const char *type = json_str(json_get(b, "type"), NULL);
        if (!type || strcmp(type, "text") || !(s = json_str(json_get(b, "text"), &n)))
            return api_fail(e, 400, "messages", NULL,
                            "%s.content[%zu] has type \"%.40s\": only text blocks (this model "
                            "reads text)",
                            where, i, type ? type : "(none)");
        jw_obj(w);
        jw_kstr(w, "type", "text");
        jw_key(w, "text");
        jw_strn(w, s, n);
        jw_obj_end(w);
    }
    jw_arr_end(w);
    return 0;
}

/* One Anthropic message → OpenAI messages in w (a list being written). */
static int anthropic_message(const JsonValue *m, size_t index, JsonWriter *w, ApiError *e) {
    char where[64];
    snprintf(where, sizeof where, "messages[%zu]", index);
    const char *role = json_str(json_get(m, "role"), NULL);
    if (json_type(m) != JSON_OBJECT || !role || (strcmp(role, "user") && strcmp(role, "assistant")))
        return api_fail(e, 400, "messages", NULL, "%s.role must be \"user\" or \"assistant\"",
                        where);
    const int user = !strcmp(role, "user");
    const JsonValue *content = json_get(m, "content");
    size_t n;
    const char *s = json_str(content, &n);
    if (s) {
        jw_obj(w);
        jw_kstr(w, "role", role);
        jw_key(w, "content");
        jw_strn(w, s, n);
        jw_obj_end(w);
        return 0;
    }
    if (json_type(content) != JSON_ARRAY)
        return api_fail(e, 400, "messages", NULL, "%s.content must be a string or a list of blocks",
                        where);
    /* user: text runs become user messages, tool_result blocks tool messages, in order; assistant:
       one message (text → content, thinking → reasoning_content, tool_use → tool_calls) */
    int open_user = 0, calls = 0;
    if (!user) {
        jw_obj(w);
        jw_kstr(w, "role", "assistant");
        jw_key(w, "content");
        jw_arr(w);
    }
    for (size_t i = 0; i < json_len(content); i++) {
        const JsonValue *b = json_at(content, i);
        const char *type = json_str(json_get(b, "type"), NULL);
        if (json_type(b) != JSON_OBJECT || !type)
            return api_fail(e, 400, "messages", NULL, "%s.content[%zu] has no \"type\"", where, i);
        const int text = !strcmp(type, "text");
        if (text && !(s = json_str(json_get(b, "text"), &n)))
            return api_fail(e, 400, "messages", NULL, "%s.content[%zu].text must be a string",
                            where, i);
        if (user && text) {
            if (!open_user) {
                jw_obj(w);
                jw_kstr(w, "role", "user");
                jw_key(w, "content");
                jw_arr(w);
                open_user = 1;
            }
            jw_obj(w);
            jw_kstr(w, "type", "text");
            jw_key(w, "text");
            jw_strn(w, s, n);
            jw_obj_end(w);
        } else if (user && !strcmp(type, "tool_result")) {
            if (open_user) { jw_arr_end(w); jw_obj_end(w); open_user = 0; }
            const char *id = json_str(json_get(b, "tool_use_id"), &n);
            if (!id)
                return api_fail(e, 400, "messages", NULL,
                                "%s.content[%zu].tool_use_id must be a string", where, i);
            jw_obj(w);
            jw_kstr(w, "role", "tool");
            jw_key(w, "tool_call_id");
            jw_strn(w, id, n);
            jw_key(w, "content");
            char sub[96];
            snprintf(sub, sizeof sub, "%s.content[%zu]", where, i);
            if (anthropic_result_text(json_get(b, "content"), w, sub, e)) return -1;
            jw_obj_end(w);
        } else if (!user && text) {
            jw_obj(w);
            jw_kstr(w, "type", "text");
            jw_key(w, "text");
            jw_strn(w, s, n);
            jw_obj_end(w);
        } else if (!user && (!strcmp(type, "thinking") || !strcmp(type, "redacted_thinking") ||
                             !strcmp(type, "tool_use"))) {
            /* read below, after the content list */
        } else {
            return api_fail(e, 400, "messages", NULL,
                            "%s.content[%zu] has type \"%.40s\", which is not supported in a%s %s "
                            "message "
                            "(this model reads text: text%s)",
                            where, i, type, user ? "" : "n", role,
                            user ? ", tool_result" : ", thinking, tool_use");
        }
    }
    if (user) {
        if (open_user) { jw_arr_end(w); jw_obj_end(w); }
        return 0;
    }
    jw_arr_end(w);
    /* thinking blocks: the reasoning sent back, joined by blank lines when there are several
       (interleaved thinking); a redacted one has nothing to read */
    size_t total = 0;
    int thinking = 0;
    for (int pass = 0; pass < 2; pass++) {
        char *joined = pass ? xmalloc(total + 1) : NULL;
        size_t at = 0;
        thinking = 0;
        for (size_t i = 0; i < json_len(content); i++) {
            const JsonValue *b = json_at(content, i);
            if (strcmp(json_str(json_get(b, "type"), NULL), "thinking")) continue;
            if (!(s = json_str(json_get(b, "thinking"), &n)))
                return api_fail(e, 400, "messages", NULL,
                                "%s.content[%zu].thinking must be a string", where, i);
            if (thinking++) { if (pass) memcpy(joined + at, "\n\n", 2); at += 2; }
            if (pass) memcpy(joined + at, s, n);
            at += n;
        }
        total = at;
        if (pass && thinking) { jw_key(w, "reasoning_content"); jw_strn(w, joined, total); }
        free(joined);
    }
    for (size_t i = 0; i < json_len(content); i++) {
        const JsonValue *b = json_at(content, i);
        if (strcmp(json_str(json_get(b, "type"), NULL), "tool_use")) continue;
        const char *id = json_str(json_get(b, "id"), NULL),
                   *name = json_str(json_get(b, "name"), NULL);
        const JsonValue *input = json_get(b, "input");
        if (!id || !name || json_type(input) != JSON_OBJECT)
            return api_fail(e, 400, "messages", NULL,
                            "%s.content[%zu]: a tool_use block needs \"id\", \"name\" and an "
                            "\"input\" object",
                            where, i);
        if (!calls++) { jw_key(w, "tool_calls"); jw_arr(w); }
        jw_obj(w);
        jw_kstr(w, "id", id);
        jw_kstr(w, "type", "function");
        jw_key(w, "function");
        jw_obj(w);
        jw_kstr(w, "name", name);
        jw_key(w, "arguments");
        api_copy_json(w, input);
        jw_obj_end(w);
        jw_obj_end(w);
    }
    if (calls) jw_arr_end(w);
    jw_obj_end(w);
    return 0;
}

/* tools: custom tools {name, description, input_schema} → OpenAI function tools. */
static int anthropic_tools(const JsonValue *tools, JsonWriter *w, ApiError *e) {
    if (json_type(tools) != JSON_ARRAY)
        return api_fail(e, 400, "tools", NULL, "\"tools\" must be a list");
    jw_key(w, "tools");
    jw_arr(w);
    for (size_t i = 0; i < json_len(tools); i++) {
        const JsonValue *t = json_at(tools, i);
        const char *type = json_str(json_get(t, "type"), NULL),
                   *name = json_str(json_get(t, "name"), NULL);
        if (type && strcmp(type, "custom"))
            return api_fail(e, 400, "tools", NULL,
                            "tools[%zu] has type \"%.60s\": server tools are not supported (only "
                            "custom tools "
                            "with an input_schema)",
                            i, type);
        const JsonValue *schema = json_get(t, "input_schema");
        if (json_type(t) != JSON_OBJECT || !name || json_type(schema) != JSON_OBJECT)
            return api_fail(e, 400, "tools", NULL,
                            "tools[%zu] needs a \"name\" string and an \"input_schema\" object", i);
        jw_obj(w);
        jw_kstr(w, "type", "function");
        jw_key(w, "function");
        jw_obj(w);
        jw_kstr(w, "name", name);
        const JsonValue *description = json_get(t, "description");
        if (json_str(description, NULL)) {
            jw_key(w, "description");
            api_copy_json(w, description);
        }
        jw_key(w, "parameters");
        api_copy_json(w, schema);
        jw_obj_end(w);
        jw_obj_end(w);
    }
    jw_arr_end(w);
    return 0;
}

static int anthropic_parse_common(const Server *srv, const JsonValue *root, ApiRequest *r,
                                  ApiError *e) {
    api_request_defaults(srv, r);
    const JsonValue *v = json_get(root, "model");
    if (api_given(v) && json_type(v) != JSON_STRING)
        return api_fail(e, 400, "model", NULL, "\"model\" must be a string");
    static const char *const refused[] = { "mcp_servers", "container" };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (api_given(v = json_get(root, refused[i])) &&
            !(json_type(v) == JSON_ARRAY && !json_len(v)))
            return api_fail(e, 400, refused[i], NULL, "\"%s\" is not supported", refused[i]);
    /* thinking */
    if (api_given(v = json_get(root, "thinking"))) {
        const char *type = json_str(json_get(v, "type"), NULL);
        if (!type || (strcmp(type, "enabled") && strcmp(type, "disabled")))
            return api_fail(e, 400, "thinking", NULL,
                            "\"thinking\" must be {\"type\": \"enabled\", \"budget_tokens\": N} or "
                            "{\"type\": \"disabled\"}");
        r->render.thinking = !strcmp(type, "enabled");
        int64_t budget = 1024;
        if (r->render.thinking && (api_int(v, "budget_tokens", 1024, INT32_MAX, &budget, e) ||
                                   !api_given(json_get(v, "budget_tokens"))))
            return api_fail(e, 400, "thinking.budget_tokens", NULL,
                            "\"thinking.budget_tokens\" must be an integer >= 1024");
    }
    /* tools and tool_choice: any / tool force a call; disable_parallel_tool_use: at most one */
    static const ApiToolChoice tool_choice = {
        1, "any", "tool", NULL, "\"tool_choice\" {\"type\": \"tool\"} needs a \"name\" string",
        "\"tool_choice\" must be {\"type\": \"auto\"}, {\"type\": \"any\"}, "
        "{\"type\": \"tool\", \"name\": ...} or {\"type\": \"none\"}",
        1, "disable_parallel_tool_use", "tool_choice.disable_parallel_tool_use", "input_schema"
    };
    int use_tools;
    if (api_tool_choice(srv, root, &tool_choice, r, &use_tools, e)) return -1;
    JsonWriter w;
    jw_init(&w);
    jw_obj(&w);
    if (use_tools && api_given(v = json_get(root, "tools")) && anthropic_tools(v, &w, e)) {
        jw_free(&w);
        return -1;
    }
    jw_key(&w, "messages");
    jw_arr(&w);
    size_t n;
    const char *s;
    if (api_given(v = json_get(root, "system"))) {
        jw_obj(&w);
        jw_kstr(&w, "role", "system");
        jw_key(&w, "content");
        if ((s = json_str(v, &n))) jw_strn(&w, s, n);
        else if (anthropic_result_text(v, &w, "system", e)) {
            jw_free(&w);
            e->param = "system";
            return -1;
        }
        jw_obj_end(&w);
    }
    const JsonValue *messages = json_get(root, "messages");
    if (json_type(messages) != JSON_ARRAY || !json_len(messages)) {
        jw_free(&w);
        return api_fail(e, 400, "messages", NULL, "\"messages\" must be a non-empty list");
    }
    for (size_t i = 0; i < json_len(messages); i++)
        if (anthropic_message(json_at(messages, i), i, &w, e)) { jw_free(&w); return -1; }
    jw_arr_end(&w);
    jw_obj_end(&w);
    return api_read_translated(r, &w, "messages", e);
}

static int anthropic_parse(const Server *srv, const JsonValue *root, ApiRequest *r, ApiError *e) {
    int64_t max_tokens = -1;
    double temperature, top_p;
    if (anthropic_parse_common(srv, root, r, e)) return -1;
    temperature = r->sampling.temperature;
    top_p = r->sampling.top_p;
    if (!api_given(json_get(root, "max_tokens")))
        return api_fail(e, 400, "max_tokens", NULL, "\"max_tokens\" is required");
    const JsonValue *metadata;
    if (api_int(root, "max_tokens", 1, INT32_MAX, &max_tokens, e) ||
        api_number(root, "temperature", 0, 1, &temperature, e) ||
        api_number(root, "top_p", 0, 1, &top_p, e) ||
        api_bool(root, "stream", "stream", &r->stream, e) ||
        api_object(root, "metadata", &metadata, e))
        return -1;
    r->max_tokens = (int)max_tokens;
    r->sampling.temperature = (float)temperature;
    r->sampling.top_p = (float)top_p;
    const JsonValue *stop = json_get(root, "stop_sequences");
    if (api_given(stop) && json_type(stop) != JSON_ARRAY)
        return api_fail(e, 400, "stop_sequences", NULL,
                        "\"stop_sequences\" must be a list of strings");
    return api_stop_strings(stop, "stop_sequences", r, e) || api_top_k(root, "top_k", "top_k", r, e)
               ? -1
               : 0;
}

static int anthropic_count_parse(const Server *srv, const JsonValue *root, ApiRequest *r,
                                 ApiError *e) {
    r->count_only = 1;
    return anthropic_parse_common(srv, root, r, e);
}

static void anthropic_count(HttpResponse *res, int tokens) {
    char body[64];
    const int n = snprintf(body, sizeof body, "{\"input_tokens\":%d}", tokens);
    http_respond_json(res, 200, body, (size_t)n);
}

static const char *anthropic_stop_reason(ApiFinish f) {
    return f == FINISH_LENGTH        ? "max_tokens"
           : f == FINISH_TOOL_CALLS  ? "tool_use"
           : f == FINISH_STOP_STRING ? "stop_sequence"
                                     : "end_turn";
}

static void anthropic_write_usage(JsonWriter *w, const Reply *r, int output) {
    jw_key(w, "usage");
    jw_obj(w);
    jw_kint(w, "input_tokens", r->prompt_tokens - r->cached_tokens);
    jw_kint(w, "cache_creation_input_tokens", 0);
    jw_kint(w, "cache_read_input_tokens", r->cached_tokens);
    jw_kint(w, "output_tokens", output);
    jw_obj_end(w);
}

static void anthropic_write_stop(JsonWriter *w, const Reply *r, ApiFinish f) {
    jw_kstr(w, "stop_reason", anthropic_stop_reason(f));
    jw_key(w, "stop_sequence");
    if (f == FINISH_STOP_STRING)
        jw_strn(w, r->req->stop[r->stop_which], r->req->stop_len[r->stop_which]);
    else jw_null(w);
}

/* A content block: its start form (empty) when streaming, else whole. */
static void anthropic_write_block(JsonWriter *w, const Reply *r, ChatOutKind kind, const char *text,
                                  size_t len, int call, int whole) {
    jw_obj(w);
    if (kind == CHAT_OUT_TOOL_CALL) {
        const ChatOutCall *c = &r->out.calls[call];
        jw_kstr(w, "type", "tool_use");
        jw_kstr(w, "id", r->call_ids[call]);
        jw_key(w, "name");
        jw_strn(w, c->name, c->name_len);
        jw_key(w, "input");
        if (whole) api_write_arguments(w, c->arguments, c->arguments_len);
        else { jw_obj(w); jw_obj_end(w); }
    } else if (kind == CHAT_OUT_REASONING) {
        jw_kstr(w, "type", "thinking");
        jw_key(w, "thinking");
        jw_strn(w, whole ? text : "", whole ? len : 0);
        jw_kstr(w, "signature", "");
    } else {
        jw_kstr(w, "type", "text");
        jw_key(w, "text");
        jw_strn(w, whole ? text : "", whole ? len : 0);
    }
    jw_obj_end(w);
}

/* The message object: whole, or a stream's start (usage NULL: no content, stop or output yet). */
static void anthropic_write_message(JsonWriter *w, const Reply *r, ApiFinish finish,
                                    const ApiUsage *usage) {
    const ChatOutput *o = &r->out;
    jw_obj(w);
    jw_kstr(w, "id", r->id);
    jw_kstr(w, "type", "message");
    jw_kstr(w, "role", "assistant");
    jw_kstr(w, "model", r->srv->model_name);
    jw_key(w, "content");
    jw_arr(w);
    if (usage) {
        if (o->reasoning_len)
            anthropic_write_block(w, r, CHAT_OUT_REASONING, o->reasoning, o->reasoning_len, 0, 1);
        if (o->content_len || (!o->reasoning_len && !o->n_calls))
            anthropic_write_block(w, r, CHAT_OUT_CONTENT, o->content ? o->content : "",
                                  o->content_len, 0, 1);
        for (int i = 0; i < o->n_calls; i++)
            anthropic_write_block(w, r, CHAT_OUT_TOOL_CALL, NULL, 0, i, 1);
    }
    jw_arr_end(w);
    if (usage) anthropic_write_stop(w, r, finish);
    else {
        jw_key(w, "stop_reason");
        jw_null(w);
        jw_key(w, "stop_sequence");
        jw_null(w);
    }
    anthropic_write_usage(w, r, usage ? usage->completion : 0);
    jw_obj_end(w);
}

static void anthropic_begin(Reply *r) {
    http_stream_begin(r->res, "text/event-stream");
    JsonWriter w;
    jw_init(&w);
    jw_obj(&w);
    jw_kstr(&w, "type", "message_start");
    jw_key(&w, "message");
    anthropic_write_message(&w, r, FINISH_EOS, NULL);
    jw_obj_end(&w);
    reply_send_event(r, "message_start", &w);
    jw_init(&w);
    jw_obj(&w);
    jw_kstr(&w, "type", "ping");
    jw_obj_end(&w);
    reply_send_event(r, "ping", &w);
}

static void anthropic_block_stop(Reply *r) {
    if (r->block < 0) return;
    JsonWriter w;
    jw_init(&w);
    jw_obj(&w);
    jw_kstr(&w, "type", "content_block_stop");
    jw_kint(&w, "index", r->block);
    jw_obj_end(&w);
    reply_send_event(r, "content_block_stop", &w);
    r->block = -1;
}

static void anthropic_block_start(Reply *r, ChatOutKind kind, int call) {
    anthropic_block_stop(r);
    r->block = r->items++;
    r->block_kind = (int)kind;
    JsonWriter w;
    jw_init(&w);
    jw_obj(&w);
    jw_kstr(&w, "type", "content_block_start");
    jw_kint(&w, "index", r->block);
    jw_key(&w, "content_block");
    anthropic_write_block(&w, r, kind, NULL, 0, call, 0);
    jw_obj_end(&w);
    reply_send_event(r, "content_block_start", &w);
}

static void anthropic_event(Reply *r, const ChatOutEvent *ev, int call_index) {
    if (ev->kind == CHAT_OUT_TOOL_CALL || r->block < 0 || r->block_kind != (int)ev->kind)
        anthropic_block_start(r, ev->kind, call_index);
    JsonWriter w;
    jw_init(&w);
    jw_obj(&w);
    jw_kstr(&w, "type", "content_block_delta");
    jw_kint(&w, "index", r->block);
    jw_key(&w, "delta");
    jw_obj(&w);
    if (ev->kind == CHAT_OUT_TOOL_CALL) {
        jw_kstr(&w, "type", "input_json_delta");
        jw_key(&w, "partial_json");
        jw_strn(&w, ev->arguments, ev->arguments_len);
    } else {
        const int thinking = ev->kind == CHAT_OUT_REASONING;
        jw_kstr(&w, "type", thinking ? "thinking_delta" : "text_delta");
        jw_key(&w, thinking ? "thinking" : "text");
        jw_strn(&w, ev->text, ev->len);
    }
    jw_obj_end(&w);
    jw_obj_end(&w);
    reply_send_event(r, "content_block_delta", &w);
    if (ev->kind == CHAT_OUT_TOOL_CALL) anthropic_block_stop(r);
}

static void anthropic_finish(Reply *r, ApiFinish finish, const ApiUsage *usage) {
    JsonWriter w;
    jw_init(&w);
    if (!r->req->stream) {
        anthropic_write_message(&w, r, finish, usage);
        server_respond_writer(r->res, &w);
        return;
    }
    /* an empty answer is one empty text block */
    if (!r->items) anthropic_block_start(r, CHAT_OUT_CONTENT, 0);
    anthropic_block_stop(r);
    jw_obj(&w);
    jw_kstr(&w, "type", "message_delta");
    jw_key(&w, "delta");
    jw_obj(&w);
    anthropic_write_stop(&w, r, finish);
    jw_obj_end(&w);
    anthropic_write_usage(&w, r, usage->completion);
    jw_obj_end(&w);
    reply_send_event(r, "message_delta", &w);
    jw_init(&w);
    jw_obj(&w);
    jw_kstr(&w, "type", "message_stop");
    jw_obj_end(&w);
    reply_send_event(r, "message_stop", &w);
    http_stream_end(r->res);
}

static void anthropic_abort(Reply *r, const char *why) {
    JsonWriter w;
    jw_init(&w);
    anthropic_write_error(&w, 503, why);
    reply_send_event(r, "error", &w);
    http_stream_end(r->res);
}

static const ApiSkin ANTHROPIC_MESSAGES = {
    "anthropic",     "msg_",          "toolu_",         anthropic_parse, anthropic_error,
    anthropic_begin, anthropic_event, anthropic_finish, anthropic_abort, NULL
};
static const ApiSkin ANTHROPIC_COUNT = {
    "anthropic count_tokens", "msg_",          "toolu_",        anthropic_count_parse,
    anthropic_error,          anthropic_begin, anthropic_event, anthropic_finish,
    anthropic_abort,          anthropic_count
};

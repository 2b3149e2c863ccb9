/* =============================================================================================
   api_responses.c — the OpenAI Responses skin: POST /v1/responses (server.c's core does the rest).

   Stateless: nothing is stored whatever "store" says, so previous_response_id (and conversation,
   background) are refused by name; a client sends the whole conversation as input items, as with
   store: false. input: a string (one user message) or items: messages (role system, developer,
   user, assistant; content a string or input_text / output_text parts), function_call,
   function_call_output and reasoning items (their reasoning_text content, else their summary
   text, is the reasoning of the assistant turn they belong to). Consecutive reasoning, assistant
   message and function_call items form one assistant turn. instructions is the system message.
   tools: function tools (other tool types refused by name); tool_choice auto or none.
   max_output_tokens, temperature, top_p; reasoning.effort as api_effort_level maps it (none:
   thinking off; absent: the server's THINK and REASONING_EFFORT). text.format json_object or
   json_schema ({name, schema, strict}) constrains the answer as chat's response_format does.
   Output items: reasoning (content [reasoning_text], summary []), message (one output_text part),
   function_call (call_id, name, arguments as a JSON string). status "completed", or "incomplete"
   with incomplete_details.reason "max_output_tokens". Streams: response.created,
   response.in_progress, per item response.output_item.added, response.content_part.added,
   response.output_text.delta / response.reasoning_text.delta, response.output_text.done /
   response.reasoning_text.done, response.content_part.done, or for a function call
   response.function_call_arguments.delta and .done, then response.output_item.done; last
   response.completed (or response.incomplete). Every event carries sequence_number. Errors are
   OpenAI's.
   ============================================================================================= */

/* One assistant turn made of items [from, to): reasoning, message and function_call items. */
static int responses_turn(const JsonValue *items, size_t from, size_t to, JsonWriter *w,
                          ApiError *e) {
    size_t n;
    const char *s;
    jw_obj(w);
    jw_kstr(w, "role", "assistant");
    jw_key(w, "content");
    jw_arr(w);
    for (size_t i = from; i < to; i++) {
        const JsonValue *it = json_at(items, i), *content = json_get(it, "content");
        const char *type = json_str(json_get(it, "type"), NULL);
        if (type && strcmp(type, "message")) continue;
        if ((s = json_str(content, &n))) {
            jw_obj(w);
            jw_kstr(w, "type", "text");
            jw_key(w, "text");
            jw_strn(w, s, n);
            jw_obj_end(w);
            continue;
        }
        for (size_t k = 0; k < json_len(content); k++) {
            const JsonValue *part = json_at(content, k);
            const char *pt = json_str(json_get(part, "type"), NULL);
            if (!pt ||
                (strcmp(pt, "output_text") && strcmp(pt, "input_text") && strcmp(pt, "refusal")))
                return api_fail(e, 400, "input", NULL,
                                "input[%zu].content[%zu] has type \"%.40s\" (an assistant message "
                                "holds output_text)",
                                i, k, pt ? pt : "(none)");
            if (!(s = json_str(json_get(part, strcmp(pt, "refusal") ? "text" : "refusal"), &n)))
                return api_fail(e, 400, "input", NULL, "input[%zu].content[%zu] has no text string",
                                i, k);
            jw_obj(w);
            jw_kstr(w, "type", "text");
            jw_key(w, "text");
            jw_strn(w, s, n);
            jw_obj_end(w);
        }
    }
    jw_arr_end(w);
    int reasoning = 0, calls = 0;
    for (size_t i = from; i < to; i++) {
        const JsonValue *it = json_at(items, i);
        const char *type = json_str(json_get(it, "type"), NULL);
        if (!type || strcmp(type, "reasoning")) continue;
        /* its reasoning_text parts, else its summary: the text the model's turn began with */
        const JsonValue *parts = json_get(it, "content");
        if (!json_len(parts)) parts = json_get(it, "summary");
        for (size_t k = 0; k < json_len(parts); k++) {
            if (!(s = json_str(json_get(json_at(parts, k), "text"), &n)))
                return api_fail(e, 400, "input", NULL,
                                "input[%zu]: a reasoning item's parts need a \"text\" string", i);
            if (reasoning++)
                return api_fail(e, 400, "input", NULL,
                                "input[%zu]: an assistant turn has one reasoning text here", i);
            jw_key(w, "reasoning_content");
            jw_strn(w, s, n);
        }
    }
    for (size_t i = from; i < to; i++) {
        const JsonValue *it = json_at(items, i);
        const char *type = json_str(json_get(it, "type"), NULL);
        if (!type || strcmp(type, "function_call")) continue;
        const char *name = json_str(json_get(it, "name"), NULL),
                   *args = json_str(json_get(it, "arguments"), NULL);
        const char *id = json_str(json_get(it, "call_id"), NULL);
        if (!name || !args || !id)
            return api_fail(e, 400, "input", NULL,
                            "input[%zu]: a function_call item needs \"call_id\", \"name\" and "
                            "\"arguments\" strings",
                            i);
        if (!calls++) { jw_key(w, "tool_calls"); jw_arr(w); }
        jw_obj(w);
        jw_kstr(w, "id", id);
        jw_kstr(w, "type", "function");
        jw_key(w, "function");
        jw_obj(w);
        jw_kstr(w, "name", name);
        jw_kstr(w, "arguments", args);
        jw_obj_end(w);
        jw_obj_end(w);
    }
    if (calls) jw_arr_end(w);
    jw_obj_end(w);
    return 0;
}

static int responses_is_turn_item(const JsonValue *it) {
    const char *type = json_str(json_get(it, "type"), NULL),
               *role = json_str(json_get(it, "role"), NULL);
    if (type && (!strcmp(type, "reasoning") || !strcmp(type, "function_call"))) return 1;
    return (!type || !strcmp(type, "message")) && role && !strcmp(role, "assistant");
}

/* input items → OpenAI messages in w (a list being written) */
static int responses_input(const JsonValue *items, JsonWriter *w, ApiError *e) {
    size_t n;
    const char *s;
    for (size_t i = 0; i < json_len(items);) {
        const JsonValue *it = json_at(items, i);
        if (json_type(it) != JSON_OBJECT)
            return api_fail(e, 400, "input", NULL, "input[%zu] is not an object", i);
        const char *type = json_str(json_get(it, "type"), NULL),
                   *role = json_str(json_get(it, "role"), NULL);
        if (responses_is_turn_item(it)) {
            size_t to = i + 1;
            while (to < json_len(items) && responses_is_turn_item(json_at(items, to))) to++;
            if (responses_turn(items, i, to, w, e)) return -1;
            i = to;
            continue;
        }
        if (type && !strcmp(type, "function_call_output")) {
            const char *id = json_str(json_get(it, "call_id"), NULL);
            const JsonValue *out = json_get(it, "output");
            if (!id)
                return api_fail(
                    e, 400, "input", NULL,
                    "input[%zu]: a function_call_output item needs a \"call_id\" string", i);
            jw_obj(w);
            jw_kstr(w, "role", "tool");
            jw_kstr(w, "tool_call_id", id);
            jw_key(w, "content");
            if ((s = json_str(out, &n))) jw_strn(w, s, n);
            else {
                jw_arr(w);
                for (size_t k = 0; k < json_len(out); k++) {
                    const char *pt = json_str(json_get(json_at(out, k), "type"), NULL);
                    if (!pt || strcmp(pt, "input_text") ||
                        !(s = json_str(json_get(json_at(out, k), "text"), &n)))
                        return api_fail(e, 400, "input", NULL,
                                        "input[%zu].output must be a string or input_text parts",
                                        i);
                    jw_obj(w);
                    jw_kstr(w, "type", "text");
                    jw_key(w, "text");
                    jw_strn(w, s, n);
                    jw_obj_end(w);
                }
                jw_arr_end(w);
            }
            jw_obj_end(w);
            i++;
            continue;
        }
        if ((type && strcmp(type, "message")) || !role)
            return api_fail(e, 400, "input", NULL,
                            "input[%zu] has type \"%.40s\" (supported: message, function_call, "
                            "function_call_output, reasoning)",
                            i, type ? type : "(none)");
        const JsonValue *content = json_get(it, "content");
        jw_obj(w);
        jw_kstr(w, "role", role);   /* chat.h checks it */
        jw_key(w, "content");
        if ((s = json_str(content, &n))) jw_strn(w, s, n);
        else if (json_type(content) == JSON_ARRAY) {
            jw_arr(w);
            for (size_t k = 0; k < json_len(content); k++) {
                const char *pt = json_str(json_get(json_at(content, k), "type"), NULL);
                if (!pt || strcmp(pt, "input_text") ||
                    !(s = json_str(json_get(json_at(content, k), "text"), &n)))
                    return api_fail(e, 400, "input", NULL,
                                    "input[%zu].content[%zu] has type \"%.40s\" (supported: "
                                    "input_text; this model "
                                    "reads text)",
                                    i, k, pt ? pt : "(none)");
                jw_obj(w);
                jw_kstr(w, "type", "text");
                jw_key(w, "text");
                jw_strn(w, s, n);
                jw_obj_end(w);
            }
            jw_arr_end(w);
        } else {
            return api_fail(e, 400, "input", NULL,
                            "input[%zu].content must be a string or a list of parts", i);
        }
        jw_obj_end(w);
        i++;
    }
    return 0;
}

/* function tools {type, name, description, parameters, strict} → OpenAI chat's nested form */
static int responses_tools(const JsonValue *tools, JsonWriter *w, ApiError *e) {
    if (json_type(tools) != JSON_ARRAY)
        return api_fail(e, 400, "tools", NULL, "\"tools\" must be a list");
    jw_key(w, "tools");
    jw_arr(w);
    for (size_t i = 0; i < json_len(tools); i++) {
        const JsonValue *t = json_at(tools, i);
        const char *type = json_str(json_get(t, "type"), NULL);
        if (!type || strcmp(type, "function"))
            return api_fail(e, 400, "tools", NULL,
                            "tools[%zu] has type \"%.60s\": only function tools are supported", i,
                            type ? type : "(none)");
        if (!json_str(json_get(t, "name"), NULL))
            return api_fail(e, 400, "tools", NULL, "tools[%zu] has no \"name\" string", i);
        jw_obj(w);
        jw_kstr(w, "type", "function");
        jw_key(w, "function");
        jw_obj(w);
        for (size_t k = 0; k < json_len(t); k++) {
            const char *key = json_key_at(t, k, NULL);
            if (!strcmp(key, "type")) continue;
            jw_key(w, key);
            api_copy_json(w, json_value_at(t, k));
        }
        jw_obj_end(w);
        jw_obj_end(w);
    }
    jw_arr_end(w);
    return 0;
}

static int responses_parse(const Server *srv, const JsonValue *root, ApiRequest *r, ApiError *e) {
    api_request_defaults(srv, r);
    const JsonValue *v = json_get(root, "model");
    if (api_given(v) && json_type(v) != JSON_STRING)
        return api_fail(e, 400, "model", NULL, "\"model\" must be a string");
    if (api_given(json_get(root, "previous_response_id")))
        return api_fail(e, 400, "previous_response_id", NULL,
                        "\"previous_response_id\" is not supported: this server stores no "
                        "responses "
                        "(send the conversation as input items, as with store: false)");
    int background = 0;
    if (api_given(json_get(root, "conversation")))
        return api_fail(e, 400, "conversation", NULL,
                        "\"conversation\" is not supported: this server stores no conversations");
    if (api_bool(root, "background", "background", &background, e)) return -1;
    if (background) return api_fail(e, 400, "background", NULL, "\"background\" is not supported");
    if (api_given(json_get(root, "prompt")))
        return api_fail(e, 400, "prompt", NULL, "\"prompt\" (stored prompts) is not supported");
    int64_t max_tokens = -1, top_logprobs = 0;
    double temperature = r->sampling.temperature, top_p = r->sampling.top_p;
    if (api_int(root, "max_output_tokens", 1, INT32_MAX, &max_tokens, e) ||
        api_number(root, "temperature", 0, 2, &temperature, e) ||
        api_number(root, "top_p", 0, 1, &top_p, e) ||
        api_bool(root, "stream", "stream", &r->stream, e) ||
        api_int(root, "top_logprobs", 0, 0, &top_logprobs, e))
        return -1;
    r->max_tokens = (int)max_tokens;
    r->sampling.temperature = (float)temperature;
    r->sampling.top_p = (float)top_p;
    const JsonValue *text, *reasoning;
    if (api_object(root, "text", &text, e) || api_object(root, "reasoning", &reasoning, e))
        return -1;
    const JsonValue *format = json_get(text, "format"), *schema;
    const char *ft = json_str(json_get(format, "type"), NULL);
    if (api_given(format) && ft && !strcmp(ft, "json_object")) {
        if (!(r->grammar = grammar_json_object(NULL))) die("out of memory");
    } else if (api_given(format) && ft && !strcmp(ft, "json_schema")) {
        if (api_object(format, "schema", &schema, e)) return -1;
        if (!schema)
            return api_fail(e, 400, "text.format", NULL,
                            "\"text.format\" of type json_schema needs a \"schema\" object");
        if (api_schema_grammar(schema, "text.format", "text.format.schema", r, e)) return -1;
    } else if (api_given(format) && (!ft || strcmp(ft, "text"))) {
        return api_fail(e, 400, "text.format", NULL,
                        "\"text.format\" %.40s is not supported (text, json_object or "
                        "json_schema)",
                        ft ? ft : "without a type");
    }
    const char *effort = json_str(json_get(reasoning, "effort"), NULL);
    if (api_given(json_get(reasoning, "effort")) &&
        (!effort || api_effort_level(effort, &r->render)))
        return api_fail(e, 400, "reasoning.effort", NULL,
                        "\"reasoning.effort\" must be none, minimal, low, medium, high or xhigh");
    /* "required" / a named function force a call */
    static const ApiToolChoice tool_choice = {
        0, "required", "function", NULL, NULL,
        "\"tool_choice\" must be \"auto\", \"none\", \"required\" or "
        "{\"type\": \"function\", \"name\": ...}",
        0, "parallel_tool_calls", "parallel_tool_calls", "parameters"
    };
    int use_tools;
    if (api_tool_choice(srv, root, &tool_choice, r, &use_tools, e)) return -1;
    JsonWriter w;
    jw_init(&w);
    jw_obj(&w);
    if (use_tools && api_given(v = json_get(root, "tools")) && responses_tools(v, &w, e)) {
        jw_free(&w);
        return -1;
    }
    jw_key(&w, "messages");
    jw_arr(&w);
    size_t n;
    const char *s;
    if (api_given(v = json_get(root, "instructions"))) {
        if (!(s = json_str(v, &n))) {
            jw_free(&w);
            return api_fail(e, 400, "instructions", NULL, "\"instructions\" must be a string");
        }
        jw_obj(&w);
        jw_kstr(&w, "role", "system");
        jw_key(&w, "content");
        jw_strn(&w, s, n);
        jw_obj_end(&w);
    }
    const JsonValue *input = json_get(root, "input");
    if ((s = json_str(input, &n))) {
        jw_obj(&w);
        jw_kstr(&w, "role", "user");
        jw_key(&w, "content");
        jw_strn(&w, s, n);
        jw_obj_end(&w);
    } else if (json_type(input) != JSON_ARRAY || !json_len(input)) {
        jw_free(&w);
        return api_fail(e, 400, "input", NULL,
                        "\"input\" must be a string or a non-empty list of items");
    } else if (responses_input(input, &w, e)) {
        jw_free(&w);
        return -1;
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    return api_read_translated(r, &w, "input", e);
}

/* ---- the answer ------------------------------------------------------------------------------ */

/* An item's id: the answer's id with the item's kind and index ("rs_", "msg_", "fc_"). */
static void responses_item_id(const Reply *r, ChatOutKind kind, int index, char *dst, size_t n) {
    const char *prefix = kind == CHAT_OUT_REASONING ? "rs_"
                         : kind == CHAT_OUT_CONTENT ? "msg_"
                                                    : "fc_";
    snprintf(dst, n, "%s%s_%d", prefix, r->id + 5, index);   /* after "resp_" */
}

/* A content part: reasoning_text, or output_text with its (empty) annotations and logprobs. */
static void responses_write_part(JsonWriter *w, int reasoning, const char *text, size_t len) {
    jw_obj(w);
    jw_kstr(w, "type", reasoning ? "reasoning_text" : "output_text");
    jw_key(w, "text");
    jw_strn(w, text, len);
    if (!reasoning) {
        jw_key(w, "annotations");
        jw_arr(w);
        jw_arr_end(w);
        jw_key(w, "logprobs");
        jw_arr(w);
        jw_arr_end(w);
    }
    jw_obj_end(w);
}

/* An output item: in_progress with no text (a stream's added event) or whole. */
static void responses_write_item(JsonWriter *w, const Reply *r, ChatOutKind kind, int index,
                                 int call, const char *text, size_t len, int whole) {
    char id[64];
    responses_item_id(r, kind, index, id, sizeof id);
    jw_obj(w);
    jw_kstr(w, "id", id);
    if (kind == CHAT_OUT_TOOL_CALL) {
        const ChatOutCall *c = &r->out.calls[call];
        jw_kstr(w, "type", "function_call");
        jw_kstr(w, "status", whole ? "completed" : "in_progress");
        jw_kstr(w, "call_id", r->call_ids[call]);
        jw_key(w, "name");
        jw_strn(w, c->name, c->name_len);
        jw_key(w, "arguments");
        jw_strn(w, whole ? c->arguments : "", whole ? c->arguments_len : 0);
    } else if (kind == CHAT_OUT_REASONING) {
        jw_kstr(w, "type", "reasoning");
        jw_key(w, "summary");
        jw_arr(w);
        jw_arr_end(w);
        jw_key(w, "content");
        jw_arr(w);
        if (whole) responses_write_part(w, 1, text, len);
        jw_arr_end(w);
    } else {
        jw_kstr(w, "type", "message");
        jw_kstr(w, "status", whole ? "completed" : "in_progress");
        jw_kstr(w, "role", "assistant");
        jw_key(w, "content");
        jw_arr(w);
        if (whole) responses_write_part(w, 0, text, len);
        jw_arr_end(w);
    }
    jw_obj_end(w);
}

/* A float setting as the request wrote it (0.9, not the float's 0.8999999761581421). */
static double responses_decimal(float f) {
    char s[32];
    snprintf(s, sizeof s, "%.7g", (double)f);
    return strtod(s, NULL);
}

/* The response object: in_progress (no output yet) or whole. */
static void responses_write_response(JsonWriter *w, const Reply *r, ApiFinish finish,
                                     const ApiUsage *u, int whole) {
    const ApiRequest *q = r->req;
    const ChatOutput *o = &r->out;
    jw_obj(w);
    jw_kstr(w, "id", r->id);
    jw_kstr(w, "object", "response");
    jw_kint(w, "created_at", r->created);
    jw_kstr(w, "status",
            !whole                    ? "in_progress"
            : finish == FINISH_LENGTH ? "incomplete"
                                      : "completed");
    jw_key(w, "error");
    jw_null(w);
    jw_key(w, "incomplete_details");
    if (whole && finish == FINISH_LENGTH) {
        jw_obj(w);
        jw_kstr(w, "reason", "max_output_tokens");
        jw_obj_end(w);
    } else jw_null(w);
    jw_kstr(w, "model", r->srv->model_name);
    jw_key(w, "output");
    jw_arr(w);
    int index = 0;
    if (whole && o->reasoning_len)
        responses_write_item(w, r, CHAT_OUT_REASONING, index++, 0, o->reasoning, o->reasoning_len,
                             1);
    if (whole && (o->content_len || (!o->reasoning_len && !o->n_calls)))
        responses_write_item(w, r, CHAT_OUT_CONTENT, index++, 0, o->content ? o->content : "",
                             o->content_len, 1);
    for (int i = 0; whole && i < o->n_calls; i++)
        responses_write_item(w, r, CHAT_OUT_TOOL_CALL, index++, i, NULL, 0, 1);
    jw_arr_end(w);
    jw_kbool(w, "parallel_tool_calls", 1);
    jw_key(w, "previous_response_id");
    jw_null(w);
    jw_kbool(w, "store", 0);
    jw_knum(w, "temperature", responses_decimal(q->sampling.temperature));
    jw_knum(w, "top_p", responses_decimal(q->sampling.top_p));
    jw_key(w, "max_output_tokens");
    if (q->max_tokens >= 0) jw_int(w, q->max_tokens);
    else jw_null(w);
    jw_key(w, "reasoning");
    jw_obj(w);
    jw_key(w, "effort");
    if (q->render.thinking)
        jw_str(w, q->render.reasoning_effort && !strcmp(q->render.reasoning_effort, "high")
                      ? "high"
                      : "xhigh");
    else jw_str(w, "none");
    jw_obj_end(w);
    jw_kstr(w, "tool_choice", "auto");
    jw_key(w, "tools");
    jw_arr(w);
    jw_arr_end(w);
    jw_kstr(w, "truncation", "disabled");
    jw_key(w, "usage");
    if (!whole) jw_null(w);
    else {
        jw_obj(w);
        jw_kint(w, "input_tokens", u->prompt);
        jw_key(w, "input_tokens_details");
        jw_obj(w);
        jw_kint(w, "cached_tokens", u->cached);
        jw_obj_end(w);
        jw_kint(w, "output_tokens", u->completion);
        jw_key(w, "output_tokens_details");
        jw_obj(w);
        /* not counted apart: the reasoning's tokens are in output_tokens */
        jw_kint(w, "reasoning_tokens", 0);
        jw_obj_end(w);
        jw_kint(w, "total_tokens", u->prompt + u->completion);
        jw_obj_end(w);
    }
    jw_obj_end(w);
}

/* A stream event: its type, sequence_number, then what fill adds. */
static void responses_send(Reply *r, const char *type, JsonWriter *w) {
    jw_obj_end(w);
    reply_send_event(r, type, w);
}

static void responses_open(Reply *r, JsonWriter *w, const char *type) {
    jw_init(w);
    jw_obj(w);
    jw_kstr(w, "type", type);
    jw_kint(w, "sequence_number", r->seq);
}

/* The item/part fields of an item's events. */
static void responses_where(JsonWriter *w, const Reply *r, int part) {
    jw_kstr(w, "item_id", r->item_id);
    jw_kint(w, "output_index", r->block);
    if (part) jw_kint(w, "content_index", 0);
}

static void responses_begin(Reply *r) {
    http_stream_begin(r->res, "text/event-stream");
    static const char *const first[] = { "response.created", "response.in_progress" };
    for (int i = 0; i < 2; i++) {
        JsonWriter w;
        responses_open(r, &w, first[i]);
        jw_key(&w, "response");
        responses_write_response(&w, r, FINISH_EOS, NULL, 0);
        responses_send(r, first[i], &w);
    }
}

/* The open item's text so far. */
static void responses_item_text(const Reply *r, const char **text, size_t *len) {
    const int reasoning = r->block_kind == CHAT_OUT_REASONING;
    const char *all = reasoning ? r->out.reasoning : r->out.content;
    const size_t n = reasoning ? r->out.reasoning_len : r->out.content_len;
    *text = all ? all + r->item_from : "";
    *len = n - r->item_from;
}

static void responses_item_done(Reply *r) {
    if (r->block < 0) return;
    JsonWriter w;
    const ChatOutKind kind = (ChatOutKind)r->block_kind;
    const char *text = NULL;
    size_t len = 0;
    const int call = r->out.n_calls - 1;
    if (kind == CHAT_OUT_TOOL_CALL) {
        responses_open(r, &w, "response.function_call_arguments.done");
        responses_where(&w, r, 0);
        jw_key(&w, "name");
        jw_strn(&w, r->out.calls[call].name, r->out.calls[call].name_len);
        jw_key(&w, "arguments");
        jw_strn(&w, r->out.calls[call].arguments, r->out.calls[call].arguments_len);
        responses_send(r, "response.function_call_arguments.done", &w);
    } else {
        responses_item_text(r, &text, &len);
        const int reasoning = kind == CHAT_OUT_REASONING;
        const char *done = reasoning ? "response.reasoning_text.done" : "response.output_text.done";
        responses_open(r, &w, done);
        responses_where(&w, r, 1);
        jw_key(&w, "text");
        jw_strn(&w, text, len);
        if (!reasoning) { jw_key(&w, "logprobs"); jw_arr(&w); jw_arr_end(&w); }
        responses_send(r, done, &w);
        responses_open(r, &w, "response.content_part.done");
        responses_where(&w, r, 1);
        jw_key(&w, "part");
        responses_write_part(&w, reasoning, text, len);
        responses_send(r, "response.content_part.done", &w);
    }
    responses_open(r, &w, "response.output_item.done");
    jw_kint(&w, "output_index", r->block);
    jw_key(&w, "item");
    responses_write_item(&w, r, kind, r->block, call, text, len, 1);
    responses_send(r, "response.output_item.done", &w);
    r->block = -1;
}

static void responses_item_add(Reply *r, ChatOutKind kind, int call) {
    responses_item_done(r);
    r->block = r->items++;
    r->block_kind = (int)kind;
    r->item_from = kind == CHAT_OUT_REASONING ? r->out.reasoning_len
                   : kind == CHAT_OUT_CONTENT ? r->out.content_len
                                              : 0;
    responses_item_id(r, kind, r->block, r->item_id, sizeof r->item_id);
    JsonWriter w;
    responses_open(r, &w, "response.output_item.added");
    jw_kint(&w, "output_index", r->block);
    jw_key(&w, "item");
    responses_write_item(&w, r, kind, r->block, call, NULL, 0, 0);
    responses_send(r, "response.output_item.added", &w);
    if (kind == CHAT_OUT_TOOL_CALL) return;
    responses_open(r, &w, "response.content_part.added");
    responses_where(&w, r, 1);
    jw_key(&w, "part");
    responses_write_part(&w, kind == CHAT_OUT_REASONING, "", 0);
    responses_send(r, "response.content_part.added", &w);
}

/* reply_event has added ev to r->out already: the item's start offset is taken before it. */
static void responses_event(Reply *r, const ChatOutEvent *ev, int call_index) {
    if (ev->kind == CHAT_OUT_TOOL_CALL || r->block < 0 || r->block_kind != (int)ev->kind) {
        responses_item_add(r, ev->kind, call_index);
        if (ev->kind != CHAT_OUT_TOOL_CALL) r->item_from -= ev->len;
    }
    JsonWriter w;
    const char *type = ev->kind == CHAT_OUT_TOOL_CALL   ? "response.function_call_arguments.delta"
                       : ev->kind == CHAT_OUT_REASONING ? "response.reasoning_text.delta"
                                                        : "response.output_text.delta";
    responses_open(r, &w, type);
    responses_where(&w, r, ev->kind != CHAT_OUT_TOOL_CALL);
    jw_key(&w, "delta");
    if (ev->kind == CHAT_OUT_TOOL_CALL) jw_strn(&w, ev->arguments, ev->arguments_len);
    else jw_strn(&w, ev->text, ev->len);
    if (ev->kind == CHAT_OUT_CONTENT) { jw_key(&w, "logprobs"); jw_arr(&w); jw_arr_end(&w); }
    responses_send(r, type, &w);
    if (ev->kind == CHAT_OUT_TOOL_CALL) responses_item_done(r);
}

static void responses_finish(Reply *r, ApiFinish finish, const ApiUsage *usage) {
    JsonWriter w;
    if (!r->req->stream) {
        jw_init(&w);
        responses_write_response(&w, r, finish, usage, 1);
        server_respond_writer(r->res, &w);
        return;
    }
    /* an empty answer is one empty message */
    if (!r->items) responses_item_add(r, CHAT_OUT_CONTENT, 0);
    responses_item_done(r);
    const char *type = finish == FINISH_LENGTH ? "response.incomplete" : "response.completed";
    responses_open(r, &w, type);
    jw_key(&w, "response");
    responses_write_response(&w, r, finish, usage, 1);
    responses_send(r, type, &w);
    http_stream_end(r->res);
}

static void responses_abort(Reply *r, const char *why) {
    JsonWriter w;
    responses_open(r, &w, "error");
    jw_kstr(&w, "code", "server_error");
    jw_kstr(&w, "message", why);
    jw_key(&w, "param");
    jw_null(&w);
    responses_send(r, "error", &w);
    http_stream_end(r->res);
}

static const ApiSkin OPENAI_RESPONSES = {
    "openai responses", "resp_",         "call_",          responses_parse, openai_error,
    responses_begin,    responses_event, responses_finish, responses_abort, NULL
};

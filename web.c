/* =============================================================================================
   web.c — the browser front end of the server: GET / (the chat page) and GET /stats
   The page (web/index.html, style.css, app.js) is built into glm: make turns web/ into
   web_assets.h (tools/embed_web.sh), so SERVE=8080 ./glm and a browser at http://127.0.0.1:8080/
   is all it takes, offline. The page talks only to this server: /v1/chat/completions (streamed)
   and /stats; its Content-Security-Policy forbids every other origin, inline script included.
   WEB=0 leaves the page out (404); /stats stays.

   GET /stats (behind API_KEY like the API): the engine's figures as JSON, for the page and for
   scripts. They come from the counters the stderr lines print (ExpertStore's hits, misses,
   bytes_read, read_seconds, route_counts; the RAM plan in Model.ram; each layer's TierCache slots)
   and, for the answer in progress or the last one, from two observers the worker calls: the
   Generator's on_token (time to first token, tokens per second) and the RunState's on_layer
   (prefill progress). The I/O thread reads all of it while the worker generates, without locks
   (relaxed atomic loads of counters the worker keeps writing): a snapshot, whose figures may be
   a token apart from each other, never torn numbers. Once the server is idle they are exact, and
   equal to the stats the server prints on stderr when it stops.

   Hooks (the only coupling to server.c): server_quick calls web_quick first; server_answer calls
   web_request_begin once its prompt ids are known and the Reply's on_token is set, and
   web_request_end after the answer went out.
   ============================================================================================= */

typedef struct { const char *path, *type; const unsigned char *data; size_t len; } WebAsset;
#include "web_assets.h"

enum { WEB_IDLE, WEB_PREFILL, WEB_DECODE };
static const char *const WEB_PHASE_NAMES[] = { "idle", "prefill", "decode" };

/* What the worker tells about the answer in progress (or the last one). Written by the worker
   only, read by the I/O thread with relaxed atomic loads (WEB_GET). */
typedef struct {
    int phase;
    long long requests;                 /* answers begun since the start */
    /* reused: the cached prefix (-1 until the prefill starts) */
    int prompt_tokens, reused;
    int prefilled;                      /* prompt tokens whose forward has finished */
    int chunk_pos0, chunk_tokens;       /* the forward in progress */
    int layer, n_layers;                /* its layer */
    int generated;
    double t_start, t_first, t_last, t_end;   /* now_seconds(); 0: not yet */
    long long hits0, misses0;           /* the expert counters when the answer began */
    double bytes0;
    long long total_prompt, total_generated;
    /* the observers' chain: what server.c and engine_start installed */
    TokenCallback inner_token;
    void *inner_token_user;
    void (*inner_layer)(void *user, int layer, int n_layers, int S, int pos0);
    void *inner_layer_user;
    int layer_hooked;
    Generator *gen;
} WebMonitor;

static WebMonitor g_web;

#define WEB_SET(field, v) do { __typeof__(field) v_ = (v); __atomic_store(&(field), &v_, __ATOMIC_RELAXED); } while (0)
#define WEB_GET(field) __extension__({ __typeof__(+(field)) v_; __atomic_load(&(field), &v_, __ATOMIC_RELAXED); v_; })

static void web_on_token(void *user, int id) {
    WebMonitor *w = user;
    const double t = now_seconds();
    if (!w->t_first) {
        WEB_SET(w->prefilled, w->prompt_tokens - (w->reused > 0 ? w->reused : 0));
        WEB_SET(w->t_first, t);
        WEB_SET(w->phase, WEB_DECODE);
    }
    WEB_SET(w->t_last, t);
    WEB_SET(w->generated, w->generated + 1);
    if (w->inner_token) w->inner_token(w->inner_token_user, id);
}

/* RunState.on_layer: layer l of a forward of S rows at pos0 starts (l == n_layers: it ended). */
static void web_on_layer(void *user, int layer, int n_layers, int S, int pos0) {
    WebMonitor *w = user;
    if (w->inner_layer) w->inner_layer(w->inner_layer_user, layer, n_layers, S, pos0);
    if (w->phase != WEB_PREFILL) return;
    if (w->reused < 0) WEB_SET(w->reused, pos0);
    WEB_SET(w->chunk_pos0, pos0);
    WEB_SET(w->chunk_tokens, S);
    WEB_SET(w->n_layers, n_layers);
    WEB_SET(w->layer, layer);
    if (layer == n_layers) WEB_SET(w->prefilled, pos0 + S - w->reused);
}

/* Worker: an answer of `prompt_tokens` begins (the Generator's on_token is the Reply's). */
static void web_request_begin(Server *srv, int prompt_tokens) {
    WebMonitor *w = &g_web;
    Generator *g = srv->gen;
    const ExpertStore *store = &g->model->experts;
    w->gen = g;
    if (!w->layer_hooked) {   /* once: the worker is the only caller of forwards */
        w->inner_layer = g->state->on_layer;
        w->inner_layer_user = g->state->on_layer_user;
        g->state->on_layer = web_on_layer;
        g->state->on_layer_user = w;
        w->layer_hooked = 1;
    }
    w->inner_token = g->on_token;
    w->inner_token_user = g->on_token_user;
    g->on_token = web_on_token;
    g->on_token_user = w;
    WEB_SET(w->prompt_tokens, prompt_tokens);
    WEB_SET(w->reused, -1);
    WEB_SET(w->prefilled, 0);
    WEB_SET(w->chunk_pos0, 0);
    WEB_SET(w->chunk_tokens, 0);
    WEB_SET(w->layer, 0);
    WEB_SET(w->generated, 0);
    WEB_SET(w->t_first, 0.0);
    WEB_SET(w->t_last, 0.0);
    WEB_SET(w->t_end, 0.0);
    WEB_SET(w->hits0, store->hits);
    WEB_SET(w->misses0, store->misses);
    WEB_SET(w->bytes0, store->bytes_read);
    WEB_SET(w->t_start, now_seconds());
    WEB_SET(w->requests, w->requests + 1);
    WEB_SET(w->phase, WEB_PREFILL);
}

/* Worker: the answer is over (finished, stopped, or the client left). */
static void web_request_end(Server *srv) {
    WebMonitor *w = &g_web;
    if (srv->gen->on_token == web_on_token) srv->gen->on_token = w->inner_token;
    w->inner_token = NULL;
    WEB_SET(w->total_prompt, w->total_prompt + w->prompt_tokens);
    WEB_SET(w->total_generated, w->total_generated + w->generated);
    WEB_SET(w->t_end, now_seconds());
    WEB_SET(w->phase, WEB_IDLE);
}

static double web_rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long long size = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%lld %lld", &size, &resident) != 2) resident = 0;
        fclose(f);
    }
    return (double)resident * (double)sysconf(_SC_PAGESIZE);
}

/* The answer in progress, or the last one ("phase": "idle" then). */
static void web_write_request(JsonWriter *jw, const WebMonitor *w) {
    const int phase = WEB_GET(w->phase);
    const double t_start = WEB_GET(w->t_start), t_first = WEB_GET(w->t_first);
    const double t_last = WEB_GET(w->t_last), t_end = WEB_GET(w->t_end), now = now_seconds();
    const int generated = WEB_GET(w->generated), prompt = WEB_GET(w->prompt_tokens),
              reused = WEB_GET(w->reused);
    jw_key(jw, "request");
    jw_obj(jw);
    jw_kstr(jw, "phase", WEB_PHASE_NAMES[phase]);
    jw_kint(jw, "number", WEB_GET(w->requests));
    jw_kint(jw, "prompt_tokens", prompt);
    jw_kint(jw, "reused_tokens", reused < 0 ? 0 : reused);
    /* prefill: prompt tokens done, and the layer of the forward in progress */
    int done = WEB_GET(w->prefilled);
    const int to_do = prompt - (reused < 0 ? 0 : reused);
    jw_key(jw, "prefill");
    jw_obj(jw);
    jw_kint(jw, "tokens", to_do);
    jw_kint(jw, "done", done);
    jw_kint(jw, "chunk_tokens", WEB_GET(w->chunk_tokens));
    jw_kint(jw, "layer", WEB_GET(w->layer));
    jw_kint(jw, "layers", WEB_GET(w->n_layers));
    double fraction = 1;
    if (phase == WEB_PREFILL) {
        const int n_layers = WEB_GET(w->n_layers), layer = WEB_GET(w->layer);
        const double in_chunk = n_layers ? (double)WEB_GET(w->chunk_tokens) *
                                               (layer < n_layers ? layer : n_layers) / n_layers
                                         : 0;
        fraction =
            to_do > 0
                ? fmin(1.0,
                       ((WEB_GET(w->chunk_pos0) - (reused < 0 ? 0 : reused)) + in_chunk) / to_do)
                : 0;
        if (reused < 0) fraction = 0;
    }
    jw_knum(jw, "fraction", fraction);
    jw_obj_end(jw);
    jw_kint(jw, "generated_tokens", generated);
    jw_key(jw, "time_to_first_token_seconds");
    if (t_first > 0) jw_num(jw, t_first - t_start);
    else jw_null(jw);
    /* prompt tokens run over the time to the first token */
    jw_key(jw, "prefill_tokens_per_second");
    if (t_first > t_start && to_do > 0) jw_num(jw, to_do / (t_first - t_start));
    else jw_null(jw);
    jw_key(jw, "decode_tokens_per_second");    /* tokens after the first over the time since it */
    if (generated > 1 && t_last > t_first) jw_num(jw, (generated - 1) / (t_last - t_first));
    else jw_null(jw);
    jw_knum(jw, "elapsed_seconds", t_start > 0 ? (t_end > 0 ? t_end : now) - t_start : 0);
    jw_obj_end(jw);
    jw_key(jw, "totals");
    jw_obj(jw);
    jw_kint(jw, "requests", WEB_GET(w->requests));
    jw_kint(jw, "prompt_tokens", WEB_GET(w->total_prompt));
    jw_kint(jw, "generated_tokens", WEB_GET(w->total_generated));
    jw_obj_end(jw);
}

static void web_write_ram(JsonWriter *jw, const RamPlan *p) {
    jw_key(jw, "ram");
    jw_obj(jw);
    jw_knum(jw, "budget_bytes", p->budget);
    jw_kstr(jw, "budget_from", p->from_ram_gb ? "RAM_GB" : "MemAvailable");
    jw_knum(jw, "available_bytes", p->avail);
    jw_knum(jw, "dense_bytes", p->dense);
    jw_knum(jw, "kv_cache_and_scratch_bytes", p->run_state);
    jw_knum(jw, "overhead_bytes", p->overhead);
    jw_knum(jw, "page_cache_reserve_bytes", p->reserve);
    jw_knum(jw, "expert_cache_bytes", p->cache);
    jw_knum(jw, "unused_bytes", p->unused);
    jw_knum(jw, "slot_bytes", p->slot_bytes);
    jw_kint(jw, "slots_per_layer", p->slots);
    jw_kint(jw, "moe_layers", p->moe_layers);
    jw_kint(jw, "experts_per_layer", p->n_experts);
    jw_kint(jw, "context", p->capacity);
    jw_knum(jw, "rss_bytes", web_rss_bytes());
    jw_obj_end(jw);
}

/* Per layer with routed experts: the experts its cache slots hold, and how often the router chose
   each expert since the start (STATS= writes the same counts at exit). */
static void web_write_experts(JsonWriter *jw, const ExpertStore *st) {
    const long long hits = WEB_GET(st->hits), misses = WEB_GET(st->misses);
    jw_key(jw, "experts");
    jw_obj(jw);
    jw_kint(jw, "hits", hits);
    jw_kint(jw, "misses", misses);
    jw_key(jw, "hit_rate");
    if (hits + misses) jw_num(jw, (double)hits / (double)(hits + misses));
    else jw_null(jw);
    jw_knum(jw, "bytes_read", WEB_GET(st->bytes_read));
    jw_knum(jw, "read_seconds", WEB_GET(st->read_seconds));
    jw_knum(jw, "wait_seconds", WEB_GET(st->wait_seconds));
    jw_knum(jw, "compute_seconds", WEB_GET(st->compute_seconds));
    jw_kint(jw, "in_place_loads", WEB_GET(st->in_place_loads));
    jw_knum(jw, "in_place_bytes", WEB_GET(st->in_place_bytes));
    jw_kint(jw, "history_prefetched", WEB_GET(st->prefetched));
    jw_kint(jw, "read_ahead", WEB_GET(st->read_ahead));
    jw_kstr(jw, "io_mode", IO_MODE_NAMES[st->io_mode]);
    jw_kint(jw, "experts_per_layer", st->n_experts);
    jw_key(jw, "layers");
    jw_arr(jw);
    for (int l = 0; st->caches && st->route_counts && l < st->n_layers; l++) {
        const TierCache *tc = &st->caches[l].cache;
        if (!tc->n_slots) continue;   /* a dense layer */
        jw_obj(jw);
        jw_kint(jw, "layer", l);
        jw_kint(jw, "slots", tc->n_slots);
        jw_key(jw, "cached");   /* expert ids in the slots, ascending */
        jw_arr(jw);
        for (int e = 0; e < st->n_experts; e++)
            if (WEB_GET(tc->expert_slot[e]) >= 0) jw_int(jw, e);
        jw_arr_end(jw);
        jw_key(jw, "routed");   /* times chosen, per expert id */
        jw_arr(jw);
        for (int e = 0; e < st->n_experts; e++)
            jw_int(jw, WEB_GET(st->route_counts[(size_t)l * st->n_experts + e]));
        jw_arr_end(jw);
        jw_obj_end(jw);
    }
    jw_arr_end(jw);
    jw_obj_end(jw);
}

static void web_respond_stats(const Server *srv, HttpResponse *res) {
    const WebMonitor *w = &g_web;
    const Generator *g = srv->gen;
    const Model *m = g->model;
    const ExpertStore *st = &m->experts;
    JsonWriter jw;
    jw_init(&jw);
    jw_obj(&jw);
    jw_kstr(&jw, "object", "glm.stats");
    jw_kstr(&jw, "model", srv->model_name);
    jw_knum(&jw, "time", (double)time(NULL));
    jw_knum(&jw, "uptime_seconds", (double)time(NULL) - (double)srv->created);
    jw_kint(&jw, "context", srv->capacity);
    jw_kint(&jw, "context_used", WEB_GET(g->pos));
    web_write_request(&jw, w);
    jw_key(&jw, "request_experts");   /* this answer's share of the counters below */
    jw_obj(&jw);
    const long long dh = WEB_GET(st->hits) - WEB_GET(w->hits0),
                    dm = WEB_GET(st->misses) - WEB_GET(w->misses0);
    jw_kint(&jw, "hits", dh);
    jw_kint(&jw, "misses", dm);
    jw_key(&jw, "hit_rate");
    if (dh + dm) jw_num(&jw, (double)dh / (double)(dh + dm));
    else jw_null(&jw);
    jw_knum(&jw, "bytes_read", WEB_GET(st->bytes_read) - WEB_GET(w->bytes0));
    jw_obj_end(&jw);
    web_write_experts(&jw, st);
    web_write_ram(&jw, &m->ram);
    jw_obj_end(&jw);
    size_t n;
    const char *t = jw_text(&jw, &n);
    if (!t) die("internal: /stats is not valid JSON");
    http_add_header(res, "Cache-Control", "no-store");
    http_respond_json(res, 200, t, n);
    jw_free(&jw);
}

/* The page's files: the only origin is this server (connect-src 'self'), no inline script, no
   frames; model text never becomes markup (app.js builds text nodes), this is the second wall. */
static const char WEB_CSP[] =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

static const WebAsset *web_asset(const char *path) {
    if (!strcmp(path, "/")) path = "/index.html";
    for (size_t i = 0; i < sizeof WEB_ASSETS / sizeof WEB_ASSETS[0]; i++)
        if (!strcmp(WEB_ASSETS[i].path, path)) return &WEB_ASSETS[i];
    return NULL;
}

/* The I/O thread, before server_quick's routing: answers GET / (and the page's files) and GET
   /stats. 1: answered; 0: not ours. */
static int web_quick(const Server *srv, const HttpRequest *req, HttpResponse *res) {
    const int get = !strcmp(req->method, "GET") || !strcmp(req->method, "HEAD");
    const double t0 = now_seconds();
    if (!strcmp(req->path, "/stats")) {
        ApiError e = { 0 };
        if (!get) api_fail(&e, 405, NULL, NULL, "/stats takes GET");
        else if (!http_auth_ok(req, srv->set->api_key))
            api_fail(&e, 401, NULL, "invalid_api_key",
                     "missing or wrong API key (send Authorization: Bearer KEY or x-api-key: KEY)");
        if (e.status == 405) http_add_header(res, "Allow", "GET, HEAD");
        if (e.status) server_respond_error(req, res, &e, t0);
        else web_respond_stats(srv, res);   /* polled every second: not logged */
        return 1;
    }
    const WebAsset *a = srv->set->web && get ? web_asset(req->path) : NULL;
    if (!a) return 0;
    http_add_header(res, "Content-Security-Policy", WEB_CSP);
    http_add_header(res, "X-Content-Type-Options", "nosniff");
    http_add_header(res, "Referrer-Policy", "no-referrer");
    http_add_header(res, "Cache-Control", "no-cache");
    http_respond(res, 200, a->type, (const char *)a->data, a->len);
    server_log(req, 200, t0, NULL);
    return 1;
}

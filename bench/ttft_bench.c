/* Time to first token with the prefix cache (KV_CACHE), through the engine's own Generator: a
   prompt of PREFIX random token ids (a long system prompt; default 4000) followed by SUFFIX other
   ids (the user's message; default 16), greedy, NGEN tokens (default 8). glm.c is included whole
   and its settings come from the environment as for ./glm (SNAP, RAM_GB, KV_CACHE, ...).
     ./bench/ttft_bench first   request A then request B (same prefix, another suffix) in one
                                process: A is uncached (KV_CACHE should start empty), B reuses the
                                prefix from RAM (the KV cache still holds it)
     ./bench/ttft_bench again   request B alone in a new process: the prefix from disk
   Each request prints one line: "ttft NAME SECONDS reused N ids ID ID ...", its time to first
   token (from handing the prompt to the Generator to the first token's callback), the tokens that
   were not prefilled, and the generated ids, so a script can check that every way of getting the
   prefix gives the same answer. bench/ttft.sh runs it. */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "../glm.c"
#include "../cli.c"   /* the settings as ./glm reads them */

typedef struct { double t0, first; TokenList ids; } Timing;

static void on_token(void *user, int id) {
    Timing *t = user;
    if (!t->ids.n) t->first = now_seconds() - t->t0;
    tokens_push(&t->ids, id);
}

static void request(Generator *g, const char *name, const int *prompt, int n, int ngen) {
    Timing t = { 0 };
    g->on_token = on_token;
    g->on_token_user = &t;
    g->stop_rules = (StopRules){ NULL, 0, ngen, 0 };
    t.t0 = now_seconds();
    int reused = 0;
    if (generator_reuse_prefix(g, prompt, n, &reused) != n) die("the prompt was not prefilled");
    generator_begin(g);
    int run[SPEC_MAX_DRAFT + 1];
    while (generator_step(g, run, SPEC_MAX_DRAFT + 1) > 0) {}
    printf("ttft %s %.3f reused %d ids", name, t.first, reused);
    for (int i = 0; i < t.ids.n; i++) printf(" %d", t.ids.ids[i]);
    printf("\n");
    fflush(stdout);
    free(t.ids.ids);
}

static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "first") && strcmp(argv[1], "again")))
        die("usage: ttft_bench first|again");
    const int prefix = env_int("PREFIX", 4000), suffix = env_int("SUFFIX", 16),
              ngen = env_int("NGEN_BENCH", 8);
    /* the prompt modes' settings (the prefix cache is theirs); the ids come from here */
    setenv("PROMPT", "-", 1);
    char *args[] = { argv[0], NULL };
    Settings set = cli_settings(1, args);
    g_verbose = set.verbose;
    const int capacity = prefix + suffix + ngen + 1;
    Model model;
    model_load(&model, &set, capacity);
    RunState state;
    ForwardOptions opt = engine_start(&set, &model, &state, capacity);
    Generator *g = generator_create(&model, &state, &opt, (SamplerSettings){ 0.0f, 1.0f, 1 });
    const int n = prefix + suffix;
    int *a = xmalloc((size_t)n * sizeof(int)), *b = xmalloc((size_t)n * sizeof(int));
    uint64_t rng = 12345;
    for (int i = 0; i < prefix; i++)
        a[i] = b[i] = (int)(splitmix64_next(&rng) % (uint64_t)model.c.vocab);
    for (int i = prefix; i < n; i++) {
        a[i] = (int)(splitmix64_next(&rng) % (uint64_t)model.c.vocab);
        b[i] = (int)(splitmix64_next(&rng) % (uint64_t)model.c.vocab);
    }
    if (!strcmp(argv[1], "first")) {
        request(g, "uncached", a, n, ngen);
        request(g, "ram", b, n, ngen);
    } else {
        request(g, state.prefix_cache ? "disk" : "off", b, n, ngen);
    }
    generator_free(g);
    engine_stop(&set, &model, &state);
    free(a);
    free(b);
    return 0;
}

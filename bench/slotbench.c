/* slotbench: aggregate decode throughput of 1, 2 and 4 conversations decoding together
   (generator_step_batch: one forward for the next row of each) on a model, the GLM-5.2-shaped bench
   fixture (tools/make_glm_bench_model.py) by default. Each conversation gets its own KV cache and
   a prompt of the reference's ids rotated by its index; a warm-up pass first brings every expert
   the run touches into the cache, so the figures are decode with warm experts. Prints tok/s per
   configuration and the ratio against one conversation, measured in the same run.
     SNAP=/work/glm_bench REF=/work/glm_bench/reference.json RAM_GB=20 bench/slotbench [TOKENS] */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "../glm.c"
#include "../cli.c"   /* the settings as ./glm reads them */
#include "../validate.c"

enum { MAX_GENS = 4 };

static double decode(Model *m, RunState *states, const ForwardOptions *opt, const Reference *ref,
                     int n_gens, int tokens, StepBatch *batch) {
    Generator *gens[MAX_GENS];
    int buf[MAX_GENS][SPEC_MAX_DRAFT + 1], *ids[MAX_GENS], max[MAX_GENS], counts[MAX_GENS];
    const int P = ref->prompt.n;
    for (int k = 0; k < n_gens; k++) {
        gens[k] = generator_create(m, &states[k], opt, (SamplerSettings){ 0.0f, 1.0f, 1 });
        /* no EOS: every run makes `tokens` */
        gens[k]->stop_rules = (StopRules){ NULL, 0, tokens, 0 };
        int prompt[4096];
        for (int i = 0; i < P; i++) prompt[i] = ref->prompt.ids[(i + k) % P];
        generator_prefill(gens[k], prompt, P);
        generator_begin(gens[k]);
        ids[k] = buf[k];
        max[k] = 1;
    }
    long long made = 0;
    const double t0 = now_seconds();
    for (;;) {
        generator_step_batch(gens, n_gens, batch, ids, max, counts);
        int live = 0;
        for (int k = 0; k < n_gens; k++) { made += counts[k]; live += counts[k] > 0; }
        if (!live) break;
    }
    const double seconds = now_seconds() - t0;
    for (int k = 0; k < n_gens; k++) generator_free(gens[k]);
    return made / seconds;
}

/* Where a decode step's time goes, summed over every state that ran forwards (the batch's scratch
   for several conversations, a conversation's own state when it runs alone). */
enum { T_ATTENTION, T_DENSE, T_MOE_SHARED, T_ROUTED, T_WAIT, T_LM_HEAD, N_SPLIT };
static void time_split(const RunState *states, int n, const StepBatch *batch,
                       const ExpertStore *store, double out[N_SPLIT]) {
    double moe = batch->work.profile.moe;
    out[T_ATTENTION] = batch->work.profile.attention;
    out[T_DENSE] = batch->work.profile.dense_mlp;
    out[T_LM_HEAD] = batch->work.profile.lm_head;
    for (int k = 0; k < n; k++) {
        moe += states[k].profile.moe;
        out[T_ATTENTION] += states[k].profile.attention;
        out[T_DENSE] += states[k].profile.dense_mlp;
        out[T_LM_HEAD] += states[k].profile.lm_head;
    }
    out[T_ROUTED] = store->compute_seconds;
    out[T_WAIT] = store->wait_seconds;
    /* the router, the shared expert, the batch union */
    out[T_MOE_SHARED] = moe - store->compute_seconds - store->wait_seconds;
}

int main(int argc, char **argv) {
    openmp_passive_wait(argv);
    const int tokens = argc > 1 ? atoi(argv[1]) : 24;
    char *args[] = { "slotbench", NULL };
    Settings set = cli_settings(1, args);
    g_integer_dot = set.idot;
    g_verbose = set.verbose;
    if (set.kernel != QT_KERNEL_AUTO) qt_set_kernel(set.kernel);
#ifdef _OPENMP
    if (set.threads) omp_set_num_threads(set.threads);
#endif
    set.spec_mode = SPEC_OFF;
    Reference ref = reference_load(set.ref_path);
    const int capacity = ref.prompt.n + tokens + 8;
    Model model;
    model_load(&model, &set, capacity);
    RunState states[MAX_GENS];
    ForwardOptions opt = engine_start(&set, &model, &states[0], capacity);
    for (int k = 1; k < MAX_GENS; k++) run_state_init(&states[k], &model, capacity, set.batch, 0);
    StepBatch batch;
    step_batch_init(&batch, &model, MAX_GENS);
    char cpu[256] = "unknown CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    for (char line[512]; f && fgets(line, sizeof line, f);)
        if (!strncmp(line, "model name", 10)) {
            snprintf(cpu, sizeof cpu, "%s", strchr(line, ':') + 2);
            cpu[strcspn(cpu, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
    printf("slotbench: %s, %d tokens per conversation, %d threads, %s kernels\n", set.model_dir,
           tokens, max_threads(), qt_kernel_name(qt_get_kernel()));
    printf("cpu: %s\n", cpu);
    /* warm-up: every expert these runs touch, again while a pass still misses (the cache's
       memory is faulted in by an idle-priority helper: on a busy machine the first pass evicts) */
    const ExpertStore *store = &model.experts;
    for (int pass = 0; pass < 4; pass++) {
        const long long before = store->misses;
        decode(&model, states, &opt, &ref, MAX_GENS, tokens, &batch);
        printf("warm-up pass %d: %lld expert misses\n", pass + 1, store->misses - before);
        if (pass > 0 && store->misses - before <= 8) break;
    }
    const long long misses0 = store->misses;
    double one = 0;
    for (int n = 1; n <= MAX_GENS; n *= 2) {
        double before[N_SPLIT], after[N_SPLIT], ms[N_SPLIT];
        time_split(states, MAX_GENS, &batch, store, before);
        const double rate = decode(&model, states, &opt, &ref, n, tokens, &batch);
        time_split(states, MAX_GENS, &batch, store, after);
        for (int i = 0; i < N_SPLIT; i++) ms[i] = 1e3 * (after[i] - before[i]) / tokens;
        if (n == 1) one = rate;
        printf("conversations %d: %.2f tok/s aggregate, %.2fx one conversation\n", n, rate,
               rate / one);
        /* the rows share the weights of all but the routed experts, each row brings its own */
        printf("  per step, ms: attention %.1f, dense layers %.1f, router + shared expert %.1f, "
               "lm_head %.1f | routed experts %.1f | expert reads waited for %.1f\n",
               ms[T_ATTENTION], ms[T_DENSE], ms[T_MOE_SHARED], ms[T_LM_HEAD], ms[T_ROUTED],
               ms[T_WAIT]);
    }
    printf("expert misses after the warm-up: %lld\n", store->misses - misses0);
    step_batch_free(&batch);
    for (int k = 1; k < MAX_GENS; k++) run_state_free(&states[k]);
    engine_stop(&set, &model, &states[0]);
    reference_free(&ref);
    return 0;
}

/* specbench: what speculative decoding costs and yields on a model (the GLM-5.2-shaped bench
   fixture: tools/make_glm_bench_model.py). glm.c and validate.c are included; the model and its
   settings come from the environment exactly as ./glm reads them (SNAP, REF, RAM_GB, THREADS, ...).

     bench/specbench verify TRIALS
       The verify pass of S = 1..5 rows (the sampled token + k = 0..4 drafts, logits of every row)
       after REF's prompt, each at fresh random tokens: cold (the expert cache emptied first: every
       expert of the batch union is read from disk; O_DIRECT, so no page cache either) and warm (the
       same pass again right after: every expert cached). Also one MTP draft step (the MTP layer on
       one row + lm_head), cold and warm. One line per measurement, with the time split by the
       session profile (attention, dense MLP, MoE incl. disk wait, lm_head) for the projection.
     bench/specbench decode NGEN CONFIG...
       Greedy decoding of NGEN tokens after REF's prompt, per CONFIG: cold (cache emptied after the
       prefill) then warm (the same decode again: the cache holds what the cold run left). CONFIG is
       off | auto | mtpK | ngramK | predA (auto with a "predicted output" drafter: the SPEC=off
       continuation, each position corrupted with probability 1-A, so that A is the per-draft
       acceptance; random weights give the real drafters ~0) | predA@K (that drafter forced at K).
       Every config starts with a fresh speculation state (auto learns from scratch, as a new
       process would) and must reproduce the SPEC=off tokens (checked: a mismatch aborts).

   Output lines start with VERIFY, MTPSTEP or DECODE, KEY=VALUE pairs; bench/spec.sh summarizes. */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "../glm.c"
#include "../cli.c"   /* the settings as ./glm reads them */
#include "../validate.c"   /* the oracle reference files */

/* Empties every layer's expert cache (between passes: no demanded load is in flight; a
   usage-history prefetch may be: it is waited for, and the waiting ones are cancelled). */
static void evict_all_experts(ExpertStore *store) {
    if (!store->caches) return;
    pthread_mutex_lock(&store->lock);
    for (int l = 0; l < store->n_layers; l++) {
        LayerCache *lc = &store->caches[l];
        if (!lc->slots) continue;
        for (int s = 0; s < store->slots_per_layer; s++)
            while (lc->slots[s].loading) pthread_cond_wait(&store->done, &store->lock);
        const TierPolicy policy = lc->cache.policy;
        tier_cache_free(&lc->cache);
        if (tier_cache_init(&lc->cache, store->slots_per_layer, store->n_experts))
            die("out of memory");
        lc->cache.policy = policy;
        for (int s = 0; s < store->slots_per_layer; s++) {
            ExpertSlot *sl = &lc->slots[s];
            if (sl->prefetch_rank >= 0) { sl->prefetch_rank = -1; store->prefetch_pending--; }
            sl->expert = -1;
            sl->ready = sl->prefetched = 0;
            lc->busy[s] = 0;
        }
    }
    pthread_mutex_unlock(&store->lock);
}

typedef struct { double seconds, attention, dense, moe, lm_head, mb_read; } PassTime;

static PassTime pass_begin(const RunState *s, const ExpertStore *store) {
    return (PassTime){ now_seconds(),  s->profile.attention, s->profile.dense_mlp,
                       s->profile.moe, s->profile.lm_head,   store->bytes_read / 1e6 };
}

static PassTime pass_end(PassTime t0, const RunState *s, const ExpertStore *store) {
    return (PassTime){ now_seconds() - t0.seconds,      s->profile.attention - t0.attention,
                       s->profile.dense_mlp - t0.dense, s->profile.moe - t0.moe,
                       s->profile.lm_head - t0.lm_head, store->bytes_read / 1e6 - t0.mb_read };
}

static void print_pass(const char *what, int S, const char *phase, int trial, PassTime t) {
    printf("%s S=%d phase=%s trial=%d seconds=%.4f attention=%.4f dense=%.4f moe=%.4f lm_head=%.4f "
           "mb_read=%.1f\n",
           what, S, phase, trial, t.seconds, t.attention, t.dense, t.moe, t.lm_head, t.mb_read);
    fflush(stdout);
}

typedef struct {
    Model model;
    RunState state;
    ForwardOptions opt;
    Reference ref;
    Settings set;
} Bench;

static void bench_open(Bench *b, int extra) {
    char *argv[] = { "specbench", NULL };
    b->set = cli_settings(1, argv);
    g_integer_dot = b->set.idot;
    if (b->set.kernel != QT_KERNEL_AUTO) qt_set_kernel(b->set.kernel);
#ifdef _OPENMP
    if (b->set.threads) omp_set_num_threads(b->set.threads);
#endif
    b->ref = reference_load(b->set.ref_path);
    const int capacity = b->ref.prompt.n + extra + 8;
    model_load(&b->model, &b->set, capacity);
    b->opt = engine_start(&b->set, &b->model, &b->state, capacity);
}

static void bench_close(Bench *b) {
    engine_stop(&b->set, &b->model, &b->state);
    reference_free(&b->ref);
}

static int verify(int trials) {
    Bench b;
    bench_open(&b, SPEC_MAX_DRAFT + 2);
    Model *m = &b.model;
    RunState *s = &b.state;
    ExpertStore *store = &m->experts;
    const int P = b.ref.prompt.n, V = m->c.vocab, H = m->c.hidden;
    Generator *g = generator_create(m, s, &b.opt, (SamplerSettings){ 0.0f, 1.0f, 1 });
    generator_prefill(g, b.ref.prompt.ids, P);
    float *logits = xmalloc((size_t)5 * V * sizeof(float)),
          *hidden = xmalloc((size_t)5 * H * sizeof(float));
    float *mtp_h = xmalloc((size_t)H * sizeof(float)),
          *context_h = xmalloc((size_t)H * sizeof(float));
    memcpy(context_h, g->last_hidden, (size_t)H * sizeof(float));
    uint64_t rng = 12345;
    for (int trial = 0; trial < trials; trial++) {
        for (int S = 1; S <= 5; S++) {
            int tokens[5];
            for (int i = 0; i < S; i++) tokens[i] = (int)(splitmix64_next(&rng) % (uint64_t)V);
            /* cold, then warm twice (the second is reported) */
            for (int phase = 0; phase < 3; phase++) {
                if (phase == 0) evict_all_experts(store);
                PassTime t0 = pass_begin(s, store);
                model_forward(m, s, &b.opt, tokens, S, P, hidden, logits, 0, NULL);
                PassTime t = pass_end(t0, s, store);
                if (phase != 1) print_pass("VERIFY", S, phase == 0 ? "cold" : "warm", trial, t);
            }
        }
        if (m->c.n_mtp) {
            const int token = (int)(splitmix64_next(&rng) % (uint64_t)V);
            for (int phase = 0; phase < 3; phase++) {
                if (phase == 0) evict_all_experts(store);
                PassTime t0 = pass_begin(s, store);
                mtp_forward(m, s, &b.opt, &token, context_h, 1, P - 1, mtp_h, logits, 1);
                PassTime t = pass_end(t0, s, store);
                if (phase != 1) print_pass("MTPSTEP", 1, phase == 0 ? "cold" : "warm", trial, t);
            }
        }
    }
    printf("SHAPE layers=%d mtp=%d dense_layers=", m->c.n_layers, m->c.n_mtp);
    int dense = 0;
    for (int l = 0; l < m->c.n_layers; l++) dense += m->c.layer_dense[l];
    printf("%d moe_layers=%d slots_per_layer=%d\n", dense, m->c.n_layers - dense,
           store->slots_per_layer);
    free(logits); free(hidden); free(mtp_h); free(context_h);
    generator_free(g);
    bench_close(&b);
    return 0;
}

/* The "predicted output" drafter: the SPEC=off continuation, position p corrupted when a hash of
   p falls below 1 - alpha. */
typedef struct { const int *ids; int pos0, n, vocab; double alpha; } Predicted;

static int predicted_draft(void *user, const int *history, int n, int k, int *out) {
    const Predicted *pr = user;
    (void)history;
    int count = 0;
    for (int i = 0; i < k && n + i - pr->pos0 < pr->n; i++) {
        const int p = n + i;
        uint64_t h = (uint64_t)p * 0x9E3779B97F4A7C15ull;
        const double u = (double)(splitmix64_next(&h) >> 11) * 0x1.0p-53;
        out[count++] =
            u < 1.0 - pr->alpha ? (pr->ids[p - pr->pos0] + 1) % pr->vocab : pr->ids[p - pr->pos0];
    }
    return count;
}

/* CPU seconds of the whole process (all threads): on a shared machine this moves less than the
   wall clock with other processes' load, so configs doing the same work show the same CPU. */
static double process_cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int decode(int ngen, int nconf, char **confs) {
    Bench b;
    bench_open(&b, ngen + SPEC_MAX_DRAFT + 2);
    Model *m = &b.model;
    RunState *s = &b.state;
    ExpertStore *store = &m->experts;
    const int P = b.ref.prompt.n;
    int *plain = NULL;
    for (int c = 0; c < nconf; c++) {
        const char *conf = confs[c];
        SpecMode mode = SPEC_OFF;
        int draft = b.set.draft;
        double alpha = -1;
        if (!strcmp(conf, "off")) mode = SPEC_OFF;
        else if (!strcmp(conf, "auto")) mode = SPEC_AUTO;
        else if (!strncmp(conf, "mtp", 3)) { mode = SPEC_MTP; draft = atoi(conf + 3); }
        else if (!strncmp(conf, "ngram", 5)) { mode = SPEC_NGRAM; draft = atoi(conf + 5); }
        else if (!strncmp(conf, "pred", 4)) {
            alpha = atof(conf + 4);
            const char *at = strchr(conf, '@');
            /* forced: the caller's drafter alone */
            if (at) { mode = SPEC_NGRAM; draft = atoi(at + 1); }
            else mode = SPEC_AUTO;
        } else die("unknown config %s", conf);
        if (draft < 1 || draft > SPEC_MAX_DRAFT)
            die("config %s: draft length outside [1, %d]", conf, SPEC_MAX_DRAFT);
        if (alpha >= 0 && !plain)
            die("config %s needs an 'off' config before it (its continuation is the prediction)",
                conf);
        for (int phase = 0; phase < 2; phase++) {
            Generator *g = generator_create(m, s, &b.opt, (SamplerSettings){ 0.0f, 1.0f, 1 });
            generator_set_speculation(g, mode, draft);
            Predicted pr = { plain, P, ngen, m->c.vocab, alpha };
            if (alpha >= 0) { g->spec.caller = predicted_draft; g->spec.caller_user = &pr; }
            g->stop_rules = (StopRules){ NULL, 0, ngen, 0 };
            TokenList out = { 0 };
            g->on_token = collect_token;
            g->on_token_user = &out;
            const double p0 = now_seconds();
            generator_prefill(g, b.ref.prompt.ids, P);
            const double prefill_seconds = now_seconds() - p0;
            if (phase == 0) evict_all_experts(store);
            const long long h0 = store->hits, m0 = store->misses;
            const SpecCounts c0 = spec_counts(g);
            const long long forwards0 = g->forwards;
            PassTime t0 = pass_begin(s, store);
            const double cpu0 = process_cpu_seconds();
            int run[SPEC_MAX_DRAFT + 1];
            generator_begin(g);
            while (generator_step(g, run, SPEC_MAX_DRAFT + 1) > 0) {}
            PassTime t = pass_end(t0, s, store);
            const double cpu = process_cpu_seconds() - cpu0;
            long long drafted, accepted, passes = 0;
            SpecCounts c1 = spec_counts(g);
            spec_totals(&c1, &c0, &drafted, &accepted);
            for (int d = 0; d < N_DRAFTERS; d++) passes += c1.passes[d] - c0.passes[d];
            const long long hits = store->hits - h0, total = hits + store->misses - m0;
            if (!plain && mode == SPEC_OFF) {
                plain = xmalloc((size_t)out.n * sizeof(int));
                memcpy(plain, out.ids, (size_t)out.n * sizeof(int));
            }
            if (plain && memcmp(plain, out.ids, (size_t)out.n * sizeof(int)))
                die("config %s: the tokens differ from SPEC=off's", conf);
            printf("DECODE config=%s phase=%s tokens=%d seconds=%.3f tok_s=%.3f drafted=%lld "
                   "accepted=%lld passes=%lld forwards=%lld "
                   "hit=%.1f mb_read=%.0f prefill=%.3f cpu=%.3f\n",
                   conf, phase ? "warm" : "cold", out.n, t.seconds, out.n / t.seconds, drafted,
                   accepted, passes, g->forwards - forwards0, total ? 100.0 * hits / total : 0.0,
                   t.mb_read, prefill_seconds, cpu);
            fprintf(stderr, "specbench: %s %s: ", conf, phase ? "warm" : "cold");
            print_spec_stats(g, &c0);
            fflush(stdout);
            free(out.ids);
            generator_free(g);
        }
    }
    free(plain);
    bench_close(&b);
    return 0;
}

int main(int argc, char **argv) {
    openmp_passive_wait(argv);
    if (argc >= 3 && !strcmp(argv[1], "verify")) return verify(atoi(argv[2]));
    if (argc >= 4 && !strcmp(argv[1], "decode")) return decode(atoi(argv[2]), argc - 3, argv + 3);
    fprintf(stderr, "usage: bench/specbench verify TRIALS | decode NGEN CONFIG... (see the comment "
                    "at the top)\n");
    return 2;
}

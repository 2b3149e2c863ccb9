/* Several conversations in one forward (generator_step_batch): each generator, with its own KV
   cache, emits exactly the ids and ends with exactly the logits it has when it decodes alone,
   whatever the others do beside it: greedy and sampled, with and without speculation (MTP,
   n-gram, auto), f32 and integer kernels, generators that stop early, and a batch whose members
   are at different positions. On the oracle fixtures; the engine (glm.c) is included whole. */
/* the engine's functions this test does not call */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "../glm.c"
#include "../validate.c"   /* the oracle reference files */
#include "glm_fixture.h"

#include "check.h"

enum { GENS = 3, STEPS_MAX = 64 };

typedef struct {
    int ids[STEPS_MAX + SPEC_MAX_DRAFT + 1];
    int n;
    float *logits;
    StopReason stop;
} Run;

/* Conversation k's prompt: the reference prompt, shortened by k tokens and with its first token
   changed for k > 0, so the members of a batch differ in length and content. */
static int prompt_of(const Reference *ref, int k, int *out) {
    const int n = ref->prompt.n - k;
    memcpy(out, ref->prompt.ids, (size_t)n * sizeof(int));
    if (k) out[0] = (out[0] + 7 * k) % 500;
    return n;
}

static Generator *start(Model *m, RunState *s, const ForwardOptions *opt, const Reference *ref,
                        int k, SpecMode spec, SamplerSettings sampling, int limit) {
    Generator *g = generator_create(m, s, opt, sampling);
    generator_set_speculation(g, spec, 4);
    g->stop_rules.max_tokens = limit;
    int prompt[4096];
    const int n = prompt_of(ref, k, prompt);
    generator_prefill(g, prompt, n);
    generator_begin(g);
    return g;
}

static void record(Run *r, const Generator *g, const int *ids, int n) {
    for (int i = 0; i < n && r->n < (int)(sizeof r->ids / sizeof r->ids[0]); i++)
        r->ids[r->n++] = ids[i];
    (void)g;
}

static void finish(Run *r, const Generator *g) {
    const int V = g->model->c.vocab;
    r->logits = xmalloc((size_t)V * sizeof(float));
    memcpy(r->logits, g->logits, (size_t)V * sizeof(float));
    r->stop = g->stop;
}

static void run_case(const char *dir, int bits, SpecMode spec, SamplerSettings sampling,
                     const char *label) {
    char ref_path[512], name[256];
    snprintf(ref_path, sizeof ref_path, "%s/reference.json", dir);
    Reference ref = reference_load(ref_path);
    Settings set = fixture_settings(dir, 64);
    set.expert_bits = set.dense_bits = bits;
    const int cap = ref.prompt.n + STEPS_MAX + 32;
    Model model;
    model_load(&model, &set, cap);
    RunState states[GENS];
    ForwardOptions opt = engine_start(&set, &model, &states[0], cap);
    for (int k = 1; k < GENS; k++) run_state_init(&states[k], &model, cap, set.batch, 0);
    const int limits[GENS] = { 40, 9, 25 };   /* one stops early, the others go on without it */
    const int V = model.c.vocab;

    Run alone[GENS], together[GENS];
    memset(alone, 0, sizeof alone);
    memset(together, 0, sizeof together);
    for (int k = 0; k < GENS; k++) {
        SamplerSettings sk = sampling;
        sk.seed += (uint64_t)k;
        Generator *g = start(&model, &states[k], &opt, &ref, k, spec, sk, limits[k]);
        int ids[SPEC_MAX_DRAFT + 1], n;
        while ((n = generator_step(g, ids, SPEC_MAX_DRAFT + 1)) > 0) record(&alone[k], g, ids, n);
        finish(&alone[k], g);
        generator_free(g);
    }
    Generator *gens[GENS];
    for (int k = 0; k < GENS; k++) {
        SamplerSettings sk = sampling;
        sk.seed += (uint64_t)k;
        gens[k] = start(&model, &states[k], &opt, &ref, k, spec, sk, limits[k]);
    }
    StepBatch batch;
    step_batch_init(&batch, &model, GENS);
    int buf[GENS][SPEC_MAX_DRAFT + 1], *ids[GENS], max[GENS], counts[GENS], steps = 0,
                                                                            batched_rows = 0;
    for (int k = 0; k < GENS; k++) { ids[k] = buf[k]; max[k] = SPEC_MAX_DRAFT + 1; }
    for (;;) {
        generator_step_batch(gens, GENS, &batch, ids, max, counts);
        int live = 0;
        for (int k = 0; k < GENS; k++)
            if (counts[k] > 0) {
                record(&together[k], gens[k], ids[k], counts[k]);
                live++;
            }
        if (!live) break;
        if (live > 1) batched_rows++;
        if (++steps > 4 * STEPS_MAX) break;
    }
    for (int k = 0; k < GENS; k++) { finish(&together[k], gens[k]); generator_free(gens[k]); }
    step_batch_free(&batch);

    for (int k = 0; k < GENS; k++) {
        snprintf(name, sizeof name, "%s: conversation %d in a batch emits its %d ids alone", label,
                 k, alone[k].n);
        CHECK(name, alone[k].n == together[k].n && alone[k].n > 0 &&
                        !memcmp(alone[k].ids, together[k].ids, (size_t)alone[k].n * sizeof(int)));
        snprintf(name, sizeof name,
                 "%s: conversation %d ends with the same logits, bit for bit, and the same stop",
                 label, k);
        CHECK(name, !memcmp(alone[k].logits, together[k].logits, (size_t)V * sizeof(float)) &&
                        alone[k].stop == together[k].stop);
        free(alone[k].logits); free(together[k].logits);
    }
    snprintf(name, sizeof name, "%s: the batch ran several conversations in one forward (%d steps)",
             label, batched_rows);
    CHECK(name, batched_rows >= 8);
    for (int k = 1; k < GENS; k++) run_state_free(&states[k]);
    engine_stop(&set, &model, &states[0]);
    reference_free(&ref);
}

int main(void) {
#ifdef _OPENMP
    omp_set_num_threads(2);
#endif
    const SamplerSettings greedy = { 0.0f, 1.0f, 1 }, sampled = { 0.8f, 0.9f, 11 };
    run_case("tests/fixtures/oracle_sparse", 16, SPEC_OFF, greedy, "sparse f32, greedy, SPEC off");
    run_case("tests/fixtures/oracle_sparse", 16, SPEC_OFF, sampled,
             "sparse f32, sampled, SPEC off");
    run_case("tests/fixtures/oracle_sparse", 4, SPEC_MTP, sampled,
             "sparse int4, sampled, SPEC mtp");
    run_case("tests/fixtures/oracle_sparse", 8, SPEC_AUTO, greedy,
             "sparse int8, greedy, SPEC auto");
    run_case("tests/fixtures/oracle_dense", 4, SPEC_NGRAM, greedy,
             "dense int4, greedy, SPEC ngram");
    run_case("tests/fixtures/oracle_fused_bf16", 4, SPEC_MTP, greedy,
             "fused bf16 int4, greedy, SPEC mtp");
    return failures ? 1 : 0;
}

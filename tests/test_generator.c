/* Unit tests of glm.c's Generator on the sparse oracle fixture (f32 weights, so greedy decoding
   must reproduce the oracle): its invariants (history = the cache's tokens; the logits predict
   position pos, restored after a rollback), chunked prefill, the stop rules, the logits sink,
   reuse_prefix and the interrupt flag. The engine (glm.c) is included whole. */
#pragma GCC diagnostic ignored "-Wunused-function"   /* the modes main() would call */
#include "../glm.c"
#include "../validate.c"   /* the oracle reference files */
#include "glm_fixture.h"

#include "check.h"

static const char *FIXTURE = "tests/fixtures/oracle_sparse";

static int same_floats(const float *a, const float *b, size_t n) {
    return !memcmp(a, b, n * sizeof(float));
}

typedef struct {
    int calls, rows, first_pos;
    float *logits;
    int vocab;
    volatile sig_atomic_t *stop_after_first;
} Sink;

static void sink_chunk(void *user, int pos0, int S, const float *logits, const float *hidden) {
    (void)hidden;
    Sink *k = user;
    if (!k->calls) k->first_pos = pos0;
    memcpy(k->logits + (size_t)pos0 * k->vocab, logits, (size_t)S * k->vocab * sizeof(float));
    k->calls++;
    k->rows += S;
    if (k->stop_after_first) *k->stop_after_first = 1;
}

typedef struct { int n, ids[256]; } Seen;
static void seen_token(void *user, int id) { Seen *s = user; if (s->n < 256) s->ids[s->n++] = id; }

int main(void) {
    char ref_path[512];
    snprintf(ref_path, sizeof ref_path, "%s/reference.json", FIXTURE);
    Reference ref = reference_load(ref_path);
    Settings set = fixture_settings(FIXTURE, 64);
    const int P = ref.prompt.n, N = ref.full.n, cap = N + 8;
    Model model;
    model_load(&model, &set, cap);
    const int V = model.c.vocab, H = model.c.hidden;
    RunState big, small;
    ForwardOptions opt = engine_start(&set, &model, &big, cap);
    run_state_init(&small, &model, cap, 5, 0);
    const SamplerSettings greedy = { 0.0f, 1.0f, 1 };

    /* prefill in chunks of 5 == one chunk: logits and hidden state of the last position */
    Generator *a = generator_create(&model, &big, &opt, greedy),
              *b = generator_create(&model, &small, &opt, greedy);
    CHECK("prefill returns every token", generator_prefill(a, ref.prompt.ids, P) == P &&
                                             generator_prefill(b, ref.prompt.ids, P) == P);
    CHECK("pos and history after prefill",
          a->pos == P && !memcmp(a->history, ref.prompt.ids, (size_t)P * sizeof(int)));
    CHECK("chunked prefill (BATCH 5) == one chunk: logits bit-identical",
          same_floats(a->logits, b->logits, (size_t)V));
    CHECK("... and the last position's hidden state",
          same_floats(a->last_hidden, b->last_hidden, (size_t)H));
    CHECK("the logits predict position pos", a->logits_pos == a->pos && b->logits_pos == b->pos);

    /* greedy steps reproduce the oracle's continuation; each step's logits are kept per position */
    float *step_logits = xmalloc((size_t)cap * V * sizeof(float));
    Seen seen = { 0 };
    a->on_token = seen_token;
    a->on_token_user = &seen;
    a->stop_rules = (StopRules){ NULL, 0, N - P, 1 };
    generator_begin(a);
    int ok = 1, steps = 0, id;
    memcpy(step_logits + (size_t)P * V, a->logits, (size_t)V * sizeof(float));
    while (generator_step(a, &id, 1) == 1) {
        ok &= id == ref.full.ids[P + steps] && seen.ids[steps] == id;
        steps++;
        memcpy(step_logits + (size_t)a->pos * V, a->logits, (size_t)V * sizeof(float));
    }
    CHECK("greedy steps == the oracle's continuation, each id reported once",
          ok && steps == N - P && seen.n == N - P);
    CHECK("max_tokens stops the run (resumable: the last token is cached)",
          a->stop == STOP_LIMIT && a->pos == N && a->generated == N - P);
    CHECK("a stopped run steps no more", generator_step(a, &id, 1) == 0 && a->pos == N);

    /* 2 expert slots per layer: most experts miss; the ones in RAM and the shared expert run
       first, the misses as their loads end. Each row still adds its experts in ascending id, so
       the order they ran in changes nothing, bit for bit. */
    {
        Settings few_set = set;
        few_set.cache_slots = 2;
        few_set.cache_slots_given = 1;
        Model few;
        model_load(&few, &few_set, cap);
        RunState fs;
        ForwardOptions fo = engine_start(&few_set, &few, &fs, cap);
        /* one MoE step twice on one input: the first ends with its last two experts in the two
           slots, so the second runs those two first and loads the others after */
        const int layer = 1, k = few.c.experts_per_tok;
        float *m = xmalloc((size_t)H * sizeof(float)), *out1 = xmalloc((size_t)H * sizeof(float)),
              *out2 = xmalloc((size_t)H * sizeof(float));
        for (int d = 0; d < H; d++) m[d] = sinf(0.7f * (float)d + 0.3f);
        moe_forward(&few.c, &few.layers[layer], layer, &few.experts, &fs, m, 1, out1);
        const int *slot_of = few.experts.caches[layer].cache.expert_slot;
        const int reordered = few.experts.caches[layer].cache.n_slots == 2 && k > 2 &&
                              slot_of[fs.union_experts[k - 1]] >= 0 &&
                              slot_of[fs.union_experts[0]] < 0;
        moe_forward(&few.c, &few.layers[layer], layer, &few.experts, &fs, m, 1, out2);
        CHECK("2 slots: a MoE step run last experts first == the same step run in ascending order, "
              "bit for bit",
              reordered && same_floats(out1, out2, (size_t)H));
        free(m); free(out1); free(out2);
        Generator *f = generator_create(&few, &fs, &fo, greedy);
        generator_prefill(f, ref.prompt.ids, P);
        f->stop_rules = (StopRules){ NULL, 0, N - P, 1 };
        generator_begin(f);
        int same = same_floats(f->logits, step_logits + (size_t)P * V, (size_t)V), fsteps = 0;
        while (generator_step(f, &id, 1) == 1) {
            same &= same_floats(f->logits, step_logits + (size_t)f->pos * V, (size_t)V);
            fsteps++;
        }
        CHECK("2 slots: every decode step's logits == with every expert cached",
              same && fsteps == N - P);
        /* chunks of 5 rows (as verification of 4 drafts runs them): windows of experts on the
           threads */
        RunState f5;
        run_state_init(&f5, &few, cap, 5, 0);
        Generator *g5 = generator_create(&few, &f5, &fo, greedy);
        generator_prefill(g5, ref.full.ids, N);
        CHECK("2 slots, chunks of 5 rows: the last logits == with every expert cached",
              same_floats(g5->logits, step_logits + (size_t)N * V, (size_t)V));
        generator_free(g5);
        run_state_free(&f5);
        generator_free(f);
        run_state_free(&fs);
        model_free(&few);
    }

    /* rollback: the logits are recomputed by re-running the token at pos-1, bit for bit */
    generator_rollback(a, P + 3);
    CHECK("rollback moves pos, leaves the logits stale",
          a->pos == P + 3 && a->logits_pos != a->pos);
    generator_begin(a);
    a->stop_rules.max_tokens = 1;
    CHECK("after a rollback the next step predicts position pos",
          generator_step(a, &id, 1) == 1 && id == ref.full.ids[P + 3]);
    generator_rollback(a, P + 3);
    generator_refresh_logits(a);
    CHECK("recomputed logits == the logits first seen at that position",
          same_floats(a->logits, step_logits + (size_t)(P + 3) * V, (size_t)V));

    /* not resumable: the last token is reported but not cached (one forward saved) */
    generator_rollback(a, P);
    a->stop_rules = (StopRules){ NULL, 0, 4, 0 };
    generator_begin(a);
    long long f0 = a->forwards;
    while (generator_step(a, &id, 1) == 1) {}
    CHECK("non-resumable limit: 4 reported, 3 cached, 3 forwards + 1 recompute",
          a->generated == 4 && a->pos == P + 3 && a->forwards - f0 == 4 && a->stop == STOP_LIMIT);

    /* EOS: the id is neither reported nor cached */
    const int eos[1] = { ref.full.ids[P + 3] };
    a->stop_rules = (StopRules){ eos, 1, -1, 1 };
    int before = seen.n;
    generator_begin(a);
    CHECK("an EOS id stops the run, nothing reported or cached",
          generator_step(a, &id, 1) == 0 && a->stop == STOP_EOS && a->pos == P + 3 &&
              seen.n == before);

    /* a full cache */
    int *filler = xmalloc((size_t)cap * sizeof(int));
    for (int i = 0; i < cap; i++) filler[i] = ref.full.ids[i % N];
    generator_rollback(a, 0);
    generator_prefill(a, filler, cap - 1);
    a->stop_rules = (StopRules){ NULL, 0, -1, 1 };
    generator_begin(a);
    int n = 0;
    while (generator_step(a, &id, 1) == 1) n++;
    CHECK("a full cache stops the run with STOP_CONTEXT",
          a->stop == STOP_CONTEXT && a->pos == cap && n == 1);

    /* reuse_prefix keeps the common prefix and re-runs at least one token */
    generator_rollback(a, 0);
    generator_prefill(a, ref.full.ids, N);
    int reused = -1;
    CHECK("reuse_prefix of the whole history re-runs the last token",
          generator_reuse_prefix(a, ref.full.ids, N, &reused) == N && reused == N - 1 &&
              a->pos == N);
    CHECK("... and its logits equal the first run's",
          same_floats(a->logits, step_logits + (size_t)N * V, (size_t)V));
    int *other = xmalloc((size_t)N * sizeof(int));
    memcpy(other, ref.full.ids, (size_t)N * sizeof(int));
    other[P + 2] = (other[P + 2] + 1) % V;
    CHECK("reuse_prefix of a changed tail keeps the prefix before the change",
          generator_reuse_prefix(a, other, P + 5, &reused) == P + 5 && reused == P + 2 &&
              a->pos == P + 5 && !memcmp(a->history, other, (size_t)(P + 5) * sizeof(int)));
    generator_rollback(b, 0);
    generator_prefill(b, other, P + 5);
    CHECK("... and its logits equal a fresh prefill's",
          same_floats(a->logits, b->logits, (size_t)V));

    /* the logits sink sees every position of every chunk (teacher forcing) */
    float *sunk = xcalloc((size_t)cap * V, sizeof(float));
    Sink sink = { 0, 0, -1, sunk, V, NULL };
    generator_rollback(b, 0);
    b->on_logits = sink_chunk;
    b->on_logits_user = &sink;
    generator_prefill(b, ref.full.ids, N);
    ok = sink.calls == (N + 4) / 5 && sink.rows == N && sink.first_pos == 0;
    for (int p = P; p < N; p++)
        ok &= same_floats(sunk + (size_t)(p - 1) * V, step_logits + (size_t)p * V, (size_t)V);
    CHECK("logits sink: all rows of every chunk, equal to the decode steps' logits", ok);
    CHECK("logits sink: the last row is also the generator's logits",
          same_floats(b->logits, sunk + (size_t)(N - 1) * V, (size_t)V));

    /* per-request sampling: the same seed draws the same tokens; temperature 0 is greedy */
    b->on_logits = NULL;
    Seen draws[2] = { { 0 }, { 0 } };
    for (int k = 0; k < 2; k++) {
        generator_rollback(b, P);
        generator_set_sampling(b, (SamplerSettings){ 1.5f, 0.95f, 42 });
        b->on_token = seen_token;
        b->on_token_user = &draws[k];
        b->stop_rules = (StopRules){ NULL, 0, 8, 0 };
        generator_begin(b);
        while (generator_step(b, &id, 1) == 1) {}
    }
    CHECK("generator_set_sampling: the same seed twice draws the same 8 tokens",
          draws[0].n == 8 && draws[1].n == 8 &&
              !memcmp(draws[0].ids, draws[1].ids, sizeof draws[0].ids));
    int differs = 0;
    for (int i = 0; i < 8; i++) differs |= draws[0].ids[i] != ref.full.ids[P + i];
    CHECK("... and at temperature 1.5 they are not all the greedy ones", differs);
    generator_rollback(b, P);
    generator_set_sampling(b, (SamplerSettings){ 0.0f, 1.0f, 7 });
    b->on_token = NULL;
    generator_begin(b);
    CHECK("... and temperature 0 is greedy again",
          generator_step(b, &id, 1) == 1 && id == ref.full.ids[P]);

    /* interrupt: before a prefill nothing runs; after the first chunk the prefill is rolled back */
    volatile sig_atomic_t stop = 1;
    b->on_logits = NULL;
    generator_rollback(b, P);
    generator_refresh_logits(b);
    b->interrupt = &stop;
    CHECK("interrupted before it starts: 0 done, nothing moves, logits still valid",
          generator_prefill(b, ref.full.ids + P, N - P) == 0 && b->pos == P && b->logits_pos == P);
    stop = 0;
    sink = (Sink){ 0, 0, -1, sunk, V, &stop };
    b->on_logits = sink_chunk;
    b->on_logits_user = &sink;
    CHECK("interrupted after one chunk: returns 5, pos rolled back",
          generator_prefill(b, ref.full.ids + P, N - P) == 5 && b->pos == P);
    b->on_logits = NULL;
    b->interrupt = NULL;
    b->stop_rules = (StopRules){ NULL, 0, 1, 1 };
    generator_begin(b);
    CHECK("... and the next step recomputes the logits of position pos",
          generator_step(b, &id, 1) == 1 && id == ref.full.ids[P]);
    stop = 1;
    CHECK("model_forward checks the interrupt between layers: returns -1 at once",
          model_forward(&model, &small, &opt, ref.full.ids, 5, 0, b->hidden, b->logits, 1, &stop) ==
              -1);
    b->interrupt = &stop;
    generator_begin(b);
    CHECK("an interrupt stops a run of steps",
          generator_step(b, &id, 1) == 0 && b->stop == STOP_INTERRUPT);

    free(filler); free(other); free(sunk); free(step_logits);
    generator_free(a);
    generator_free(b);
    run_state_free(&small);
    run_state_free(&big);
    model_free(&model);
    reference_free(&ref);
    printf("%s\n", failures ? "some generator tests failed" : "all generator tests passed");
    return failures != 0;
}

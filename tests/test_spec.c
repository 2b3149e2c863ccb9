/* Unit tests of speculative decoding (glm.c section 9) on the oracle fixtures, f32 weights:
   - the MTP drafter against the oracle (its first draft at every step is the oracle's mtp_pred,
     through the lazily kept MTP cache) and against an independent batched computation of the
     recursive drafts (§6.3);
   - the MTP head's K/V rows after drafting, rejections and rollbacks equal a fresh prefill's, bit
     for bit;
   - verification: a caller's drafter proposing the oracle continuation (all accepted), a corrupted
     one (accepted up to the corruption), EOS and max_tokens inside an accepted run: tokens,
     position, logits and sampler state equal plain decoding's;
   - sampling: with drafts the tokens of every seed equal plain sampling's (temperature 0.6,
     top-p 0.9 and 1), so the distributions are equal; a chi-square test over 400 seeds says so,
     and the same statistic rejects what "accept every draft" would emit; the sampler itself
     matches its exact distribution (chi-square goodness of fit over 6000 draws) and a wrong
     temperature fails it;
   - SPEC=auto's policy on set costs: probes checked against the next token, no drafting when a
     verify pass costs as much as its rows, sit-out, doubling backoff, a plain step every 16
     passes, drafting at DRAFT when verification is cheap; a caller's drafter as a candidate;
   - a grammar constraint: plain, drafted (every draft right, or refused by the grammar) and MTP
     decoding emit the same constrained answer, greedy and sampled.
   The engine (glm.c) is included whole. Deterministic: fixed seeds, fixed thresholds. */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "../glm.c"
#include "../validate.c"   /* the oracle reference files */
#include "glm_fixture.h"

#include "check.h"

typedef struct {
    Reference ref;
    Model model;
    RunState state;
    ForwardOptions opt;
    int cap;
} Fixture;

static void fixture_open(Fixture *f, const char *dir, int batch) {
    char ref_path[512];
    snprintf(ref_path, sizeof ref_path, "%s/reference.json", dir);
    f->ref = reference_load(ref_path);
    Settings set = fixture_settings(dir, batch);
    f->cap = f->ref.full.n + 32;
    model_load(&f->model, &set, f->cap);
    f->opt = engine_start(&set, &f->model, &f->state, f->cap);
}

static void fixture_close(Fixture *f) {
    engine_stop(&(Settings){ .stats_path = "" }, &f->model, &f->state);
    reference_free(&f->ref);
}

static Generator *new_generator(Fixture *f, RunState *s, SpecMode mode, int draft,
                                SamplerSettings sampling) {
    Generator *g = generator_create(&f->model, s, &f->opt, sampling);
    generator_set_speculation(g, mode, draft);
    g->stop_rules = (StopRules){ NULL, 0, -1, 1 };
    return g;
}

static const SamplerSettings GREEDY = { 0.0f, 1.0f, 1 };

/* ---- the MTP drafter against the oracle and against a batched recomputation ------------------ */

static void test_mtp_drafter(const char *dir) {
    Fixture f;
    fixture_open(&f, dir, 64);
    const Reference *ref = &f.ref;
    const int P = ref->prompt.n, N = ref->full.n, H = f.model.c.hidden, V = f.model.c.vocab;
    char name[256];

    /* first drafts along the oracle's greedy continuation: slot pos-1 takes full[pos] */
    Generator *g = new_generator(&f, &f.state, SPEC_MTP, 1, GREEDY);
    generator_prefill(g, ref->prompt.ids, P);
    int ok = 1, checked = 0;
    for (int pos = P; pos < N - 1; pos++) {
        generator_refresh_logits(g);
        int d;
        spec_draft_mtp(g, ref->full.ids[pos], 1, &d);
        ok &= d == ref->mtp_pred.ids[pos - 1];
        checked++;
        generator_prefill(g, &ref->full.ids[pos], 1);   /* commit the token (keeps the MTP cache) */
    }
    snprintf(name, sizeof name,
             "%s: the MTP drafter's first draft == the oracle's mtp_pred at %d steps", dir,
             checked);
    CHECK(name, ok && checked == N - 1 - P);

    /* recursive drafts == one batched MTP pass over the whole history, then the recursion by hand
       */
    const int pos = P + 3, t = ref->full.ids[pos];
    generator_rollback(g, pos);
    generator_refresh_logits(g);
    int drafts[3];
    const int n = spec_draft_mtp(g, t, 3, drafts);
    RunState fresh;
    run_state_init(&fresh, &f.model, f.cap, 64, 0);
    float *hs = xmalloc((size_t)pos * H * sizeof(float)),
          *out = xmalloc((size_t)pos * H * sizeof(float));
    float *logits = xmalloc((size_t)pos * V * sizeof(float));
    model_forward(&f.model, &fresh, &f.opt, ref->full.ids, pos, 0, hs, NULL, 0, NULL);
    int next[64];
    for (int q = 0; q < pos; q++) next[q] = q + 1 < pos ? ref->full.ids[q + 1] : t;
    mtp_forward(&f.model, &fresh, &f.opt, next, hs, pos, 0, out, logits, 0);
    int want[3];
    want[0] = argmax(logits + (size_t)(pos - 1) * V, V);
    float h[1024];
    if (H > 1024) die("test: hidden %d too large", H);
    memcpy(h, out + (size_t)(pos - 1) * H, (size_t)H * sizeof(float));
    for (int i = 1; i < 3; i++) {
        mtp_forward(&f.model, &fresh, &f.opt, &want[i - 1], h, 1, pos + i - 1, h, logits, 1);
        want[i] = argmax(logits, V);
    }
    snprintf(name, sizeof name,
             "%s: 3 recursive MTP drafts == a batched MTP pass + the recursion by hand (%d %d %d)",
             dir, want[0], want[1], want[2]);
    CHECK(name, n == 3 && !memcmp(drafts, want, sizeof want));
    free(hs); free(out); free(logits);
    run_state_free(&fresh);
    generator_free(g);
    fixture_close(&f);
}

/* ---- the MTP head's cache after speculation and rollbacks ------------------------------------ */

static int same_rows(const RunState *a, const RunState *b, int layer, const Config *c, int rows) {
    if (memcmp(a->latent[layer], b->latent[layer], (size_t)rows * c->kv_lora * sizeof(float)))
        return 0;
    if (memcmp(a->rope_key[layer], b->rope_key[layer], (size_t)rows * c->qk_rope * sizeof(float)))
        return 0;
    if (a->index_key[layer] && memcmp(a->index_key[layer], b->index_key[layer],
                                      (size_t)rows * c->index_dim * sizeof(float)))
        return 0;
    return 1;
}

/* The history of `g` prefilled into a fresh session with SPEC=mtp: its MTP rows [0, pos-1) must
   equal g's (after g brings its own up to date). */
static int mtp_rows_match_fresh(Fixture *f, Generator *g) {
    spec_mtp_fill(g, g->pos - 1, -1, 0, INT32_MAX);
    RunState fresh;
    run_state_init(&fresh, &f->model, f->cap, 64, 0);
    Generator *h = new_generator(f, &fresh, SPEC_MTP, 1, GREEDY);
    generator_prefill(h, g->history, g->pos);
    const int l = f->model.c.n_layers;
    const int ok = g->spec.mtp_pos == g->pos - 1 && h->spec.mtp_pos == g->pos - 1 &&
                   same_rows(g->state, &fresh, l, &f->model.c, g->pos - 1) &&
                   same_rows(g->state, &fresh, 0, &f->model.c, g->pos);   /* and a main layer */
    generator_free(h);
    run_state_free(&fresh);
    return ok;
}

/* A caller's drafter: the reference continuation, with position `corrupt` (absolute) changed. */
typedef struct { const Reference *ref; int corrupt, vocab, calls; } OracleDrafter;

static int oracle_draft(void *user, const int *history, int n, int k, int *out) {
    OracleDrafter *od = user;
    od->calls++;
    int count = 0;
    for (int i = 0; i < k && n + i < od->ref->full.n; i++) {
        out[i] = od->ref->full.ids[n + i];
        if (n + i == od->corrupt) out[i] = (out[i] + 1) % od->vocab;
        count++;
    }
    (void)history;
    return count;
}

static void test_mtp_cache_and_verify(void) {
    Fixture f;
    fixture_open(&f, "tests/fixtures/oracle_sparse", 64);
    const Reference *ref = &f.ref;
    const int P = ref->prompt.n, N = ref->full.n, V = f.model.c.vocab;
    int run[SPEC_MAX_DRAFT + 1];

    /* MTP drafts (random head: nearly all rejected) through the whole continuation */
    Generator *g = new_generator(&f, &f.state, SPEC_MTP, 4, GREEDY);
    generator_prefill(g, ref->prompt.ids, P);
    g->stop_rules.max_tokens = N - P;
    generator_begin(g);
    while (generator_step(g, run, SPEC_MAX_DRAFT + 1) > 0) {}
    CHECK("SPEC=mtp DRAFT=4 greedy == the oracle's continuation",
          g->pos == N && !memcmp(g->history, ref->full.ids, (size_t)N * sizeof(int)));
    CHECK("... with drafts verified and rejected", g->spec.drafter[DRAFTER_MTP].drafted > 50);
    CHECK("MTP rows after speculation == a fresh prefill's, bit for bit",
          mtp_rows_match_fresh(&f, g));
    generator_rollback(g, P + 5);
    CHECK("a rollback lowers the MTP cache with pos", g->spec.mtp_pos <= P + 4);
    g->stop_rules.max_tokens = 9;
    generator_begin(g);
    while (generator_step(g, run, SPEC_MAX_DRAFT + 1) > 0) {}
    CHECK("after rollback + 9 more speculative tokens: history == the oracle's",
          g->pos == P + 14 && !memcmp(g->history, ref->full.ids, (size_t)g->pos * sizeof(int)));
    CHECK("... and the MTP rows == a fresh prefill's", mtp_rows_match_fresh(&f, g));
    generator_free(g);

    /* a caller's drafter proposing the oracle continuation: every draft accepted */
    OracleDrafter od = { ref, -1, V, 0 };
    RunState s2;
    run_state_init(&s2, &f.model, f.cap, 64, 0);
    g = new_generator(&f, &s2, SPEC_NGRAM, 4, GREEDY);
    g->spec.caller = oracle_draft;
    g->spec.caller_user = &od;
    generator_prefill(g, ref->prompt.ids, P);
    g->stop_rules.max_tokens = N - P;
    generator_begin(g);
    int steps = 0, lengths_ok = 1;
    long long f0 = g->forwards;
    for (int n; (n = generator_step(g, run, SPEC_MAX_DRAFT + 1)) > 0; steps++)
        lengths_ok &= n == 5 || g->generated == N - P;
    CHECK("oracle drafts: all accepted, 5 tokens per verify pass",
          g->spec.drafter[DRAFTER_CALLER].accepted == g->spec.drafter[DRAFTER_CALLER].drafted &&
              lengths_ok);
    CHECK("... the continuation in ceil(24/5) forwards",
          g->pos == N && steps == (N - P + 4) / 5 && g->forwards - f0 == steps &&
              !memcmp(g->history, ref->full.ids, (size_t)g->pos * sizeof(int)));

    /* a corrupted draft: the pass keeps the drafts before it; the next step emits the right token
       */
    generator_rollback(g, P);
    od.corrupt = P + 3;   /* the third draft of the first pass (t = full[P], drafts full[P+1..]) */
    g->spec.drafter[DRAFTER_CALLER] = (Drafter){ 0 };
    g->stop_rules.max_tokens = 12;
    generator_begin(g);
    int first = generator_step(g, run, SPEC_MAX_DRAFT + 1);
    CHECK("corrupted 3rd draft: the pass returns t + 2 drafts",
          first == 3 && g->spec.drafter[DRAFTER_CALLER].accepted == 2 && g->pos == P + 3);
    while (generator_step(g, run, SPEC_MAX_DRAFT + 1) > 0) {}
    CHECK("... and decoding goes on with the oracle's tokens",
          g->pos == P + 12 && !memcmp(g->history, ref->full.ids, (size_t)g->pos * sizeof(int)));

    /* EOS and max_tokens inside an accepted run: the state equals plain decoding's */
    RunState s3;
    run_state_init(&s3, &f.model, f.cap, 64, 0);
    Generator *plain = new_generator(&f, &s3, SPEC_OFF, 1, GREEDY);
    generator_prefill(plain, ref->prompt.ids, P);
    const int eos[1] = { ref->full.ids[P + 6] };
    struct { StopRules rules; const char *what; } cases[] = {
        { { eos, 1, -1, 1 }, "EOS inside an accepted run" },
        { { NULL, 0, 7, 0 }, "max_tokens (not resumable) inside an accepted run" },
        { { NULL, 0, 7, 1 }, "max_tokens (resumable) inside an accepted run" },
    };
    od.corrupt = -1;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        Generator *both[2] = { plain, g };
        int ids[2][64], count[2] = { 0, 0 };
        for (int k = 0; k < 2; k++) {
            generator_rollback(both[k], P);
            both[k]->stop_rules = cases[c].rules;
            both[k]->sampler.draws = 0;
            generator_begin(both[k]);
            for (int n; (n = generator_step(both[k], run, SPEC_MAX_DRAFT + 1)) > 0; count[k] += n)
                memcpy(ids[k] + count[k], run, (size_t)n * sizeof(int));
        }
        char name[256];
        snprintf(name, sizeof name,
                 "%s: same tokens, stop, pos, logits and draws as plain decoding", cases[c].what);
        CHECK(name, count[0] == count[1] && count[0] > 0 &&
                        !memcmp(ids[0], ids[1], (size_t)count[0] * sizeof(int)) &&
                        plain->stop == g->stop && plain->pos == g->pos &&
                        plain->logits_pos == g->logits_pos &&
                        (plain->logits_pos != plain->pos ||
                         !memcmp(plain->logits, g->logits, (size_t)V * sizeof(float))) &&
                        plain->sampler.draws == g->sampler.draws);
    }
    generator_free(plain);
    generator_free(g);
    run_state_free(&s3);
    run_state_free(&s2);
    fixture_close(&f);
}

/* ---- sampling -------------------------------------------------------------------------------- */

/* Chi-square critical value at p = 0.001 for df degrees of freedom (Wilson-Hilferty). */
static double chi2_critical(int df) {
    const double z = 3.0902, a = 2.0 / (9.0 * df);
    return df * pow(1.0 - a + z * sqrt(a), 3.0);
}

/* Two-sample chi-square over token histograms a, b (same totals): bins with fewer than 10
   expected per sample are pooled into one. Returns the statistic, *df its degrees of freedom. */
static double chi2_two_sample(const int *a, const int *b, int bins, int *df) {
    double stat = 0.0;
    int used = 0, pooled_a = 0, pooled_b = 0;
    for (int i = 0; i < bins; i++) {
        if (a[i] + b[i] < 20) { pooled_a += a[i]; pooled_b += b[i]; continue; }
        const double e = (a[i] + b[i]) / 2.0;
        stat += (a[i] - e) * (a[i] - e) / e + (b[i] - e) * (b[i] - e) / e;
        used++;
    }
    if (pooled_a + pooled_b > 0) {
        const double e = (pooled_a + pooled_b) / 2.0;
        stat += (pooled_a - e) * (pooled_a - e) / e + (pooled_b - e) * (pooled_b - e) / e;
        used++;
    }
    *df = used > 1 ? used - 1 : 1;
    return stat;
}

typedef struct { int n, ids[16]; } Drawn;
static void drawn_token(void *user, int id) { Drawn *d = user; if (d->n < 16) d->ids[d->n++] = id; }

static void test_sampling(void) {
    Fixture f;
    fixture_open(&f, "tests/fixtures/oracle_dense", 64);
    const Reference *ref = &f.ref;
    const int P = ref->prompt.n, V = f.model.c.vocab;
    enum { SEEDS = 400, TOKENS = 4 };
    const float top_ps[2] = { 0.9f, 1.0f };
    int run[SPEC_MAX_DRAFT + 1];
    RunState s2;
    run_state_init(&s2, &f.model, f.cap, 64, 0);
    for (int tp = 0; tp < 2; tp++) {
        const SamplerSettings sampling = { 0.6f, top_ps[tp], 1 };
        Generator *plain = new_generator(&f, &f.state, SPEC_OFF, 1, sampling);
        Generator *spec[3] = { new_generator(&f, &s2, SPEC_MTP, 3, sampling), NULL, NULL };
        generator_prefill(plain, ref->prompt.ids, P);
        generator_prefill(spec[0], ref->prompt.ids, P);
        int *hist_plain = xcalloc((size_t)TOKENS * V, sizeof(int)),
            *hist_spec = xcalloc((size_t)TOKENS * V, sizeof(int));
        int *hist_draft = xcalloc((size_t)V, sizeof(int));
        int identical = 1;
        long long drafted0 = spec[0]->spec.drafter[DRAFTER_MTP].drafted,
                  accepted0 = spec[0]->spec.drafter[DRAFTER_MTP].accepted;
        for (int seed = 1; seed <= SEEDS; seed++) {
            Drawn got[2] = { { 0 }, { 0 } };
            Generator *both[2] = { plain, spec[0] };
            for (int k = 0; k < 2; k++) {
                Generator *g = both[k];
                generator_rollback(g, P);
                generator_set_sampling(g, (SamplerSettings){ 0.6f, top_ps[tp], (uint64_t)seed });
                g->on_token = drawn_token;
                g->on_token_user = &got[k];
                g->stop_rules = (StopRules){ NULL, 0, TOKENS, 0 };
                generator_begin(g);
                while (generator_step(g, run, SPEC_MAX_DRAFT + 1) > 0) {}
            }
            identical &= got[0].n == TOKENS && got[1].n == TOKENS &&
                         !memcmp(got[0].ids, got[1].ids, sizeof got[0].ids);
            for (int i = 0; i < TOKENS; i++) {
                hist_plain[i * V + got[0].ids[i]]++;
                hist_spec[i * V + got[1].ids[i]]++;
            }
            /* what "accept every draft" would emit as the second token: the MTP head's first draft
               */
            Generator *g = spec[0];
            generator_rollback(g, P);
            generator_set_sampling(g, (SamplerSettings){ 0.6f, top_ps[tp], (uint64_t)seed });
            generator_refresh_logits(g);
            const int t = sampler_sample(&g->sampler, g->logits);
            int d;
            spec_draft_mtp(g, t, 1, &d);
            hist_draft[d]++;
        }
        char name[256];
        const long long drafted = spec[0]->spec.drafter[DRAFTER_MTP].drafted - drafted0,
                        accepted = spec[0]->spec.drafter[DRAFTER_MTP].accepted - accepted0;
        snprintf(name, sizeof name,
                 "T 0.6 top-p %.1f: SPEC=mtp DRAFT=3 draws the same %d tokens as SPEC=off for each "
                 "of %d seeds (%lld drafted, %lld accepted)",
                 top_ps[tp], TOKENS, SEEDS, drafted, accepted);
        CHECK(name, identical && drafted > 0);
        int worst_df = 0;
        double worst = 0.0;
        for (int i = 0; i < TOKENS; i++) {
            int df;
            const double stat = chi2_two_sample(hist_plain + i * V, hist_spec + i * V, V, &df);
            if (stat / chi2_critical(df) >= worst / (worst_df ? chi2_critical(worst_df) : 1)) {
                worst = stat;
                worst_df = df;
            }
        }
        snprintf(name, sizeof name,
                 "T 0.6 top-p %.1f: chi-square of each token's histogram, drafts vs none, below "
                 "the p=0.001 bound (worst %.2f, df %d, bound %.1f)",
                 top_ps[tp], worst, worst_df, chi2_critical(worst_df));
        CHECK(name, worst < chi2_critical(worst_df));
        int df;
        const double broken = chi2_two_sample(hist_plain + 1 * V, hist_draft, V, &df);
        snprintf(name, sizeof name,
                 "T 0.6 top-p %.1f: ... and the statistic rejects an accept-every-draft rule "
                 "(%.1f, df %d, bound %.1f)",
                 top_ps[tp], broken, df, chi2_critical(df));
        CHECK(name, broken > chi2_critical(df));
        free(hist_plain); free(hist_spec); free(hist_draft);
        generator_free(plain);
        generator_free(spec[0]);
    }

    /* the sampler draws from its exact distribution: goodness of fit over 6000 draws */
    Generator *g = new_generator(&f, &f.state, SPEC_OFF, 1, (SamplerSettings){ 0.6f, 0.9f, 77 });
    generator_rollback(g, 0);
    generator_prefill(g, ref->prompt.ids, P);
    for (int wrong = 0; wrong < 2; wrong++) {
        Sampler *sp = &g->sampler;
        sp->temperature = 0.6f;
        const int k = sampler_distribution(sp, g->logits);
        double mass = 0.0;
        for (int i = 0; i < k; i++) mass += sp->candidates[i].p;
        double *expect = xcalloc((size_t)V, sizeof(double));
        for (int i = 0; i < k; i++) expect[sp->candidates[i].id] = sp->candidates[i].p / mass;
        enum { DRAWS = 6000 };
        int *count = xcalloc((size_t)V, sizeof(int));
        sp->temperature = wrong ? 0.75f : 0.6f;
        for (int i = 0; i < DRAWS; i++) count[sampler_pick(sp, g->logits, (uint64_t)i)]++;
        double stat = 0.0, pooled_e = 0.0;
        int pooled_n = 0, bins = 0, outside = 0;
        for (int i = 0; i < V; i++) {
            const double e = expect[i] * DRAWS;
            if (e == 0.0) { outside += count[i]; continue; }
            if (e < 10.0) { pooled_e += e; pooled_n += count[i]; continue; }
            stat += (count[i] - e) * (count[i] - e) / e;
            bins++;
        }
        if (pooled_e > 0) {
            stat += (pooled_n - pooled_e) * (pooled_n - pooled_e) / pooled_e;
            bins++;
        }
        char name[256];
        if (!wrong) {
            snprintf(name, sizeof name,
                     "sampler: %d draws fit the exact nucleus distribution (chi-square %.1f, df "
                     "%d, bound %.1f; %d outside the nucleus)",
                     DRAWS, stat, bins - 1, chi2_critical(bins - 1), outside);
            CHECK(name, stat < chi2_critical(bins - 1) && outside == 0);
        } else {
            snprintf(name, sizeof name,
                     "sampler: draws at temperature 0.75 fail the T=0.6 fit (chi-square %.1f, "
                     "bound %.1f)",
                     stat, chi2_critical(bins - 1));
            CHECK(name, stat > chi2_critical(bins - 1));
        }
        free(expect);
        free(count);
    }
    generator_free(g);
    run_state_free(&s2);
    fixture_close(&f);
}

/* ---- SPEC=auto's policy on set costs --------------------------------------------------------- */

static void test_auto_policy(void) {
    Fixture f;
    fixture_open(&f, "tests/fixtures/oracle_dense", 64);
    const Reference *ref = &f.ref;
    Generator *g = new_generator(&f, &f.state, SPEC_AUTO, 4, GREEDY);
    /* a history whose end repeats an earlier 4-gram, so the n-gram drafter always has drafts */
    int hist[32];
    for (int i = 0; i < 16; i++) hist[i] = ref->full.ids[i % 8];
    generator_prefill(g, hist, 15);   /* ... then t = hist[15] = full[7] */
    Speculation *sp = &g->spec;
    const int t = hist[15], wrong = (hist[8] + 1) % f.model.c.vocab;
    int out[SPEC_MAX_DRAFT], which = -1;
    sp->drafter[DRAFTER_MTP].resume_at = 1 << 30;      /* the MTP drafter sits this test out */
    CHECK("auto: no draft before a plain step was measured",
          spec_auto_draft(g, t, 4, out, &which) == 0 && sp->shadow_pos < 0);
    sp->cost[1] = 1.0;
    int n = spec_auto_draft(g, t, 4, out, &which);
    CHECK("auto: a drafter's first draft is a probe: a plain step, its draft kept for the next "
          "position",
          n == 0 && sp->shadow_pos == g->pos + 1 && sp->shadow_drafter == DRAFTER_NGRAM &&
              sp->shadow_token == hist[8]);
    spec_shadow_check(sp, wrong);
    CHECK("auto: ... checked against the token sampled there (disagreed)",
          sp->drafter[DRAFTER_NGRAM].probes == 1 && sp->drafter[DRAFTER_NGRAM].probe_hits == 0 &&
              sp->shadow_pos < 0 && !sp->drafter[DRAFTER_NGRAM].probe);
    n = spec_auto_draft(g, t, 4, out, &which);
    CHECK("auto: a 2-row verify not measured yet is priced as a plain step: one real pass of 1 "
          "draft",
          n == 1 && which == DRAFTER_NGRAM);
    spec_account(sp, DRAFTER_NGRAM, 1, 0, 2.0, 0.0);   /* rejected, and 2 rows cost 2 plain steps */
    n = spec_auto_draft(g, t, 4, out, &which);
    CHECK("auto: verify costing as much as its rows: no draft, the drafter sits out 64 tokens",
          n == 0 && drafter_paused(sp, DRAFTER_NGRAM) &&
              sp->drafter[DRAFTER_NGRAM].resume_at == sp->tokens + 64 &&
              sp->drafter[DRAFTER_NGRAM].pauses == 1);
    sp->tokens += 64;
    n = spec_auto_draft(g, t, 4, out, &which);
    CHECK("auto: after the sit-out, a probe again", n == 0 && sp->shadow_pos == g->pos + 1);
    spec_shadow_check(sp, wrong);
    spec_auto_draft(g, t, 4, out, &which);
    CHECK("auto: losing again doubles the sit-out (128)",
          sp->drafter[DRAFTER_NGRAM].resume_at == sp->tokens + 128);
    sp->tokens += 128;
    spec_auto_draft(g, t, 4, out, &which);
    spec_shadow_check(sp, hist[8]);
    /* the drafts agree and verification turns out nearly free: auto drafts DRAFT tokens */
    for (int i = 0; i < 7; i++) spec_account(sp, DRAFTER_NGRAM, 1, 1, 1.05, 0.0);
    sp->cost[5] = 1.2;
    n = spec_auto_draft(g, t, 4, out, &which);
    CHECK("auto: cheap verification and accepted drafts: drafts DRAFT=4 tokens, backoff reset",
          n == 4 && which == DRAFTER_NGRAM &&
              sp->drafter[DRAFTER_NGRAM].backoff == SPEC_BACKOFF_MIN &&
              !memcmp(out, hist + 8, 4 * sizeof(int)));
    /* the same acceptance with verification at 3 plain steps for 5 rows: fewer drafts, or none */
    sp->cost[2] = 1.9; sp->cost[3] = 2.4; sp->cost[4] = 2.8; sp->cost[5] = 3.0;
    /* acceptance ~ 1/2 */
    for (int i = 0; i < 40; i++) spec_account(sp, DRAFTER_NGRAM, 2, 1, 2.4, 0.0);
    sp->cost[2] = 1.05;   /* (cheap again: only the plain step below can stop it) */
    n = spec_auto_draft(g, t, 4, out, &which);
    CHECK("auto: after 16 verify passes, a plain step re-measures cost[1]",
          n == 0 && !drafter_paused(sp, DRAFTER_NGRAM));
    sp->passes_since_plain = 0;   /* as the plain step does */
    sp->cost[2] = 1.9;
    n = spec_auto_draft(g, t, 4, out, &which);
    CHECK("auto: acceptance 1/2, a verify of 2..5 rows at 1.9..3.0 plain steps: no draft", n == 0);
    /* a caller's drafter is one more candidate under auto: probed, then chosen when it pays */
    OracleDrafter od = { ref, -1, f.model.c.vocab, 0 };
    g->spec.caller = oracle_draft;
    g->spec.caller_user = &od;
    sp->drafter[DRAFTER_NGRAM].resume_at = 1 << 30;
    sp->passes_since_plain = 0;
    n = spec_auto_draft(g, t, 4, out, &which);
    CHECK("auto: a caller's drafter is probed",
          n == 0 && sp->shadow_drafter == DRAFTER_CALLER && od.calls == 1);
    spec_shadow_check(sp, ref->full.ids[g->pos + 1]);
    sp->cost[2] = 1.05; sp->cost[5] = 1.2;
    for (int i = 0; i < 7; i++) spec_account(sp, DRAFTER_CALLER, 1, 1, 1.05, 0.0);
    sp->passes_since_plain = 0;
    n = spec_auto_draft(g, t, 4, out, &which);
    CHECK("auto: ... and drafts 4 with it when verification is cheap and its drafts are accepted",
          n == 4 && which == DRAFTER_CALLER &&
              !memcmp(out, ref->full.ids + g->pos + 1, 4 * sizeof(int)));
    /* the MTP drafter's probe: one MTP step, its draft checked by the next plain step */
    sp->drafter[DRAFTER_MTP].resume_at = 0;
    sp->drafter[DRAFTER_CALLER].resume_at = 1 << 30;
    sp->drafter[DRAFTER_MTP].probe = 1;
    n = spec_auto_draft(g, t, 4, out, &which);
    CHECK("auto: the MTP drafter's probe drafts one token with the head, unverified",
          n == 0 && sp->shadow_drafter == DRAFTER_MTP && sp->shadow_pos == g->pos + 1 &&
              sp->mtp_step_cost > 0);
    generator_free(g);
    fixture_close(&f);
}

/* Auto end to end: a caller's drafter that proposes the oracle continuation gets probed, then
   used; the tokens are the oracle's. */
static void test_auto_end_to_end(void) {
    Fixture f;
    fixture_open(&f, "tests/fixtures/oracle_sparse", 64);
    const Reference *ref = &f.ref;
    const int P = ref->prompt.n, N = ref->full.n;
    Generator *g = new_generator(&f, &f.state, SPEC_AUTO, 4, GREEDY);
    OracleDrafter od = { ref, -1, f.model.c.vocab, 0 };
    g->spec.caller = oracle_draft;
    g->spec.caller_user = &od;
    generator_prefill(g, ref->prompt.ids, P);
    g->stop_rules.max_tokens = N - P;
    generator_begin(g);
    int run[SPEC_MAX_DRAFT + 1];
    while (generator_step(g, run, SPEC_MAX_DRAFT + 1) > 0) {}
    const Drafter *c = &g->spec.drafter[DRAFTER_CALLER];
    CHECK("auto with an always-right caller's drafter: the oracle's tokens, its probe agreed",
          g->pos == N && !memcmp(g->history, ref->full.ids, (size_t)N * sizeof(int)) &&
              c->probes >= 1 && c->probe_hits == c->probes && c->accepted == c->drafted);
    generator_free(g);
    fixture_close(&f);
}

/* ---- a constraint (grammar.h) under speculation ------------------------------------------------

   A vocabulary where token t is the one byte "abcdefghij0123456789"[t % 20] (bytes only, so no
   dead end) and the grammar ([a-j] [0-9])+: letters and digits alternate. Plain constrained
   decoding follows it; a caller's drafter that proposes exactly that answer has every draft
   accepted (each verified row masked by the state its drafts lead to) and emits it again; one
   that proposes a token the grammar refuses gets its drafts cut before verification; SPEC=mtp
   emits the same. Sampled over seeds (top-p 0.9 and 1), and greedy. */
static const char CONSTRAINT_BYTES[] = "abcdefghij0123456789";

typedef struct { const int *ids; int n0, n, bad; } AnswerDrafter;

static int answer_draft(void *user, const int *history, int n, int k, int *out) {
    AnswerDrafter *a = user;
    int count = 0;
    /* bad: a token of the same class as the one just sampled ("a" after a letter, "0" after a
       digit), which the grammar refuses */
    const int same_class = CONSTRAINT_BYTES[history[n - 1] % 20] >= 'a' ? 0 : 10;
    for (int i = 0; i < k && n - a->n0 + i < a->n; i++, count++)
        out[i] = a->bad ? same_class : a->ids[n - a->n0 + i];
    return count;
}

static void test_constraint(void) {
    Fixture f;
    fixture_open(&f, "tests/fixtures/oracle_dense", 64);
    const Reference *ref = &f.ref;
    const int P = ref->prompt.n, V = f.model.c.vocab, N = 24;
    char err[256];
    const char **piece = calloc((size_t)V, sizeof *piece);
    size_t *len = calloc((size_t)V, sizeof *len);
    for (int t = 0; t < V; t++) { piece[t] = &CONSTRAINT_BYTES[t % 20]; len[t] = 1; }
    GrammarVocab *vocab = grammar_vocab_new(V, piece, len, NULL, 0, err, sizeof err);
    const char gbnf[] = "root ::= ([a-j] [0-9])+\n";
    Grammar *gram = grammar_from_gbnf(gbnf, strlen(gbnf), err, sizeof err);
    CHECK("the test's vocabulary and grammar compile", vocab && gram);
    if (!vocab || !gram) return;
    int run[SPEC_MAX_DRAFT + 1], follows = 1, same = 1, accepted_all = 1, cut = 1,
        mtp_masked = 1;
    for (int seed = 0; seed <= 6; seed++) {
        SamplerSettings sampling = { seed ? 1.0f : 0.0f, seed % 2 ? 0.9f : 1.0f, (uint64_t)seed };
        int answer[N];
        for (int variant = 0; variant < 4; variant++) {
            RunState s;
            run_state_init(&s, &f.model, f.cap, 64, 0);
            const SpecMode mode = variant == 0 ? SPEC_OFF : variant == 3 ? SPEC_MTP : SPEC_NGRAM;
            Generator *g = new_generator(&f, &s, mode, 4, sampling);
            AnswerDrafter ad = { answer, P, N, variant == 2 };
            if (variant == 1 || variant == 2) {
                g->spec.caller = answer_draft;
                g->spec.caller_user = &ad;
            }
            GrammarMatcher *m = grammar_matcher_new(gram, vocab);
            generator_set_constraint(g, m, vocab, -1);
            generator_prefill(g, ref->prompt.ids, P);
            g->stop_rules.max_tokens = N;
            generator_begin(g);
            while (generator_step(g, run, SPEC_MAX_DRAFT + 1) > 0) {}
            if (variant == 0) {
                memcpy(answer, g->history + P, sizeof answer);
                for (int i = 0; i < N; i++)
                    follows &= (CONSTRAINT_BYTES[answer[i] % 20] >= 'a') == (i % 2 == 0);
            } else {
                same &= g->pos == P + N && !memcmp(g->history + P, answer, sizeof answer);
            }
            const Drafter *d = &g->spec.drafter[DRAFTER_CALLER];
            if (variant == 1) accepted_all &= d->drafted > 0 && d->accepted == d->drafted;
            if (variant == 2) cut &= d->drafted == 0;
            /* MTP drafts come from the masked head: the grammar never cuts them, so a pass drafts
               DRAFT=4 but for the last ones, whose room the limit bounds (3 + 2 + 1) */
            const Drafter *mtp = &g->spec.drafter[DRAFTER_MTP];
            if (variant == 3) mtp_masked &= mtp->passes > 3 && mtp->drafted >= 4 * mtp->passes - 6;
            grammar_matcher_free(m);
            generator_free(g);
            run_state_free(&s);
        }
    }
    CHECK("constraint: letters and digits alternate, greedy and 6 sampled seeds", follows);
    CHECK("constraint: SPEC=mtp and a caller's drafter (right or refused drafts) == SPEC=off",
          same);
    CHECK("constraint: the drafts of the constrained answer are all accepted", accepted_all);
    CHECK("constraint: drafts the grammar refuses are cut before verification", cut);
    CHECK("constraint: MTP drafts follow the grammar (DRAFT a pass, none cut)", mtp_masked);
    grammar_free(gram);
    grammar_vocab_free(vocab);
    free(piece);
    free(len);
    fixture_close(&f);
}

int main(void) {
    test_mtp_drafter("tests/fixtures/oracle_sparse");
    test_mtp_drafter("tests/fixtures/oracle_dense");
    test_mtp_drafter("tests/fixtures/oracle_fused_bf16");
    test_mtp_cache_and_verify();
    test_sampling();
    test_auto_policy();
    test_auto_end_to_end();
    test_constraint();
    printf("%s\n", failures ? "some speculation tests failed" : "all speculation tests passed");
    return failures != 0;
}

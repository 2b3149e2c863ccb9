/* validate.c — the oracle validation modes (REF=file), a front end of the engine in glm.c.

   TF=1 teacher-forces REF's full_ids (argmax per position against tf_pred; MTP=1 adds the MTP head
   against mtp_pred); without TF, greedy decoding continues prompt_ids and is compared with
   full_ids; REPLAY=1 decodes full_ids one token at a time as fixed input (the decode benchmark).
   The oracle is an independent f32 implementation (tools/make_glm_oracle.py): the engine's f32
   path must match it token for token, while quantized runs are expected to drift from it.
   main.c includes this file after glm.c; tests that read reference files include it too. */

typedef struct { TokenList prompt, full, tf_pred, mtp_pred; } Reference;

/* One list of token ids from REF: 0, or -1 with err naming the file and the list. */
static int json_id_list(const JsonValue *root, const char *key, const char *path, int required,
                        TokenList *l, char *err, size_t err_len) {
    l->ids = NULL;
    l->n = l->cap = 0;
    const JsonValue *v = json_get(root, key);
    if (!v) {
        if (required) {
            snprintf(err, err_len, "%s: field \"%s\" is missing", path, key);
            return -1;
        }
        return 0;
    }
    if (json_type(v) != JSON_ARRAY || json_len(v) > INT32_MAX) {
        snprintf(err, err_len, "%s: field \"%s\" must be a list of token ids", path, key);
        return -1;
    }
    l->n = l->cap = (int)json_len(v);
    l->ids = xmalloc((size_t)(l->n ? l->n : 1) * sizeof(int));
    for (int i = 0; i < l->n; i++) {
        int64_t id;
        if (!json_is_int(json_at(v, (size_t)i), &id) || id < 0 || id > INT32_MAX) {
            snprintf(err, err_len, "%s: %s[%d] is not a token id", path, key, i);
            return -1;
        }
        l->ids[i] = (int)id;
    }
    return 0;
}

static void reference_free(Reference *r) {
    free(r->prompt.ids); free(r->full.ids); free(r->tf_pred.ids); free(r->mtp_pred.ids);
    memset(r, 0, sizeof *r);
}

/* REF's text → Reference: 0, or -1 with one line in err naming `path` (its first 200 bytes, so the
   reason always fits) (fuzzed: tests/fuzz/fuzz_ref.c). */
static int reference_parse(const char *text, size_t len, const char *path, Reference *r, char *err,
                           size_t err_len) {
    memset(r, 0, sizeof *r);
    char jerr[256];
    JsonDoc *doc = json_parse(text, len, jerr, sizeof jerr);
    if (!doc) { snprintf(err, err_len, "%.200s: %s", path, jerr); return -1; }
    const JsonValue *root = json_root(doc);
    int rc = -1;
    if (json_id_list(root, "prompt_ids", path, 1, &r->prompt, err, err_len) ||
        json_id_list(root, "full_ids", path, 1, &r->full, err, err_len) ||
        json_id_list(root, "tf_pred", path, 0, &r->tf_pred, err, err_len) ||
        json_id_list(root, "mtp_pred", path, 0, &r->mtp_pred, err, err_len)) goto done;
    if (r->prompt.n < 1) { snprintf(err, err_len, "%.200s: prompt_ids is empty", path); goto done; }
    if (r->full.n < r->prompt.n) {
        snprintf(err, err_len, "%.200s: full_ids is shorter than prompt_ids", path);
        goto done;
    }
    for (int i = 0; i < r->prompt.n; i++)
        if (r->full.ids[i] != r->prompt.ids[i]) {
            snprintf(err, err_len, "%.200s: full_ids does not start with prompt_ids (position %d)",
                     path, i);
            goto done;
        }
    rc = 0;
done:
    json_free(doc);
    if (rc) reference_free(r);
    return rc;
}

static Reference reference_load(const char *path) {
    char err[512];
    size_t len;
    char *text = json_read_file(path, &len, err, sizeof err);
    if (!text) die("cannot read REF: %s", err);
    Reference r;
    if (reference_parse(text, len, path, &r, err, sizeof err)) die("%s", err);
    free(text);
    return r;
}

static void print_ids(FILE *f, const char *label, const int *ids, int n) {
    fprintf(f, "%s:", label);
    for (int i = 0; i < n; i++) fprintf(f, " %d", ids[i]);
    fputc('\n', f);
}

/* Counts matches and lists every mismatch on stderr. */
static int compare_predictions(const char *what, const int *got, const int *expected, int n) {
    int ok = 0;
    for (int i = 0; i < n; i++) {
        if (got[i] == expected[i]) ok++;
        else
            fprintf(stderr, "%s mismatch at position %d: expected %d, got %d\n", what, i,
                    expected[i], got[i]);
    }
    return ok;
}

/* 64-bit FNV-1a over raw bytes: tests compare whole logit tensors bit for bit through it. */
static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ull; }
    return h;
}

/* Teacher forcing goes through the generator's logits sink: per chunk, the argmax of every
   position, a hash of the whole logits tensor, and (MTP=1) the MTP head over the same chunk:
   slot q takes the token at q+1 and the main model's hidden state at q, and predicts q+2. */
typedef struct {
    Model *model;
    RunState *state;
    const ForwardOptions *opt;
    const Reference *ref;
    int *pred, *mtp_pred;           /* [full.n], [full.n - 1] */
    uint64_t logits_hash;
    int with_mtp;
    float *mtp_hidden, *mtp_logits; /* [sink rows][hidden], [sink rows][vocab] */
    double mtp_seconds;
} TeacherForcing;

static void teacher_forcing_chunk(void *user, int pos0, int S, const float *logits,
                                  const float *hidden) {
    TeacherForcing *tf = user;
    const int V = tf->model->c.vocab, slots = tf->ref->full.n - 1;
    for (int r = 0; r < S; r++) tf->pred[pos0 + r] = argmax(logits + (size_t)r * V, V);
    tf->logits_hash = fnv1a(tf->logits_hash, logits, (size_t)S * V * sizeof(float));
    const int n = slots - pos0 < S ? slots - pos0 : S;
    if (!tf->with_mtp || n <= 0) return;
    double t0 = now_seconds();
    mtp_forward(tf->model, tf->state, tf->opt, tf->ref->full.ids + pos0 + 1, hidden, n, pos0,
                tf->mtp_hidden, tf->mtp_logits, 0);
    for (int r = 0; r < n; r++) tf->mtp_pred[pos0 + r] = argmax(tf->mtp_logits + (size_t)r * V, V);
    tf->mtp_seconds += now_seconds() - t0;
}

static int run_teacher_forcing(Model *m, RunState *s, const ForwardOptions *opt,
                               const Reference *ref, int with_mtp) {
    const Config *c = &m->c;
    /* the sink's chunks */
    const int N = ref->full.n, M = N - 1, H = c->hidden, V = c->vocab, B = sink_rows(s);
    if (with_mtp && !c->n_mtp) die("MTP=1 but the model has no MTP layer");
    TeacherForcing tf = { m,
                          s,
                          opt,
                          ref,
                          xmalloc((size_t)N * sizeof(int)),
                          xmalloc((size_t)(M > 0 ? M : 1) * sizeof(int)),
                          0xcbf29ce484222325ull,
                          with_mtp,
                          NULL,
                          NULL,
                          0.0 };
    if (with_mtp) {
        tf.mtp_hidden = xmalloc((size_t)B * H * sizeof(float));
        tf.mtp_logits = xmalloc((size_t)B * V * sizeof(float));
    }
    Generator *g = generator_create(m, s, opt, (SamplerSettings){ 0.0f, 1.0f, 1 });
    g->on_logits = teacher_forcing_chunk;
    g->on_logits_user = &tf;
    double t0 = now_seconds();
    generator_prefill(g, ref->full.ids, N);
    double dt = now_seconds() - t0 - tf.mtp_seconds;
    generator_free(g);
    print_ids(stdout, "TF pred", tf.pred, N);
    /* bitwise identity checks */
    printf("TF logits hash: %016llx\n", (unsigned long long)tf.logits_hash);
    int failed = 0;
    if (ref->tf_pred.n) {
        if (ref->tf_pred.n != N) die("REF: tf_pred has %d entries, full_ids %d", ref->tf_pred.n, N);
        int ok = compare_predictions("TF", tf.pred, ref->tf_pred.ids, N);
        printf("PREFILL (teacher-forcing) C vs oracle: %d/%d positions\n", ok, N);
        failed |= ok != N;
    }
    fprintf(stderr, "glm: teacher-forced prefill of %d tokens in %.3f s (%.1f tok/s)\n", N, dt,
            N / dt);
    if (with_mtp) {
        print_ids(stdout, "MTP pred", tf.mtp_pred, M);
        if (ref->mtp_pred.n) {
            if (ref->mtp_pred.n != M)
                die("REF: mtp_pred has %d entries, expected %d", ref->mtp_pred.n, M);
            int ok = compare_predictions("MTP", tf.mtp_pred, ref->mtp_pred.ids, M);
            printf("MTP C vs oracle: %d/%d\n", ok, M);
            failed |= ok != M;
        }
    }
    free(tf.pred); free(tf.mtp_pred); free(tf.mtp_hidden); free(tf.mtp_logits);
    return failed;
}

static void collect_token(void *user, int id) { tokens_push(user, id); }

/* Decoding from prompt_ids, NGEN tokens (EOS does not stop it: the oracle's continuation does not
   stop either), compared with the reference continuation: greedy by default; TEMPERATURE > 0
   samples (the comparison is then only informative), so sampled runs can be checked against
   each other, e.g. across SPEC modes. */
static int run_greedy(Model *m, RunState *s, const ForwardOptions *opt, const Reference *ref,
                      int ngen, SamplerSettings sampling, SpecMode spec, int draft) {
    const int P = ref->prompt.n;
    Generator *g = generator_create(m, s, opt, sampling);
    generator_set_speculation(g, spec, draft);
    g->stop_rules = (StopRules){ NULL, 0, ngen, 0 };
    TokenList out = { 0 };
    g->on_token = collect_token;
    g->on_token_user = &out;
    double t0 = now_seconds();
    generator_prefill(g, ref->prompt.ids, P);
    double t1 = now_seconds();
    int run[SPEC_MAX_DRAFT + 1];
    while (generator_step(g, run, SPEC_MAX_DRAFT + 1) > 0) {}
    double t2 = now_seconds();
    print_ids(stdout, "Generated", out.ids, out.n);
    int expected = ref->full.n - P < out.n ? ref->full.n - P : out.n;
    int ok = compare_predictions(sampling.temperature > 0 ? "Sampled" : "Greedy", out.ids,
                                 ref->full.ids + P, expected);
    printf("Matching tokens: %d/%d%s\n", ok, expected,
           sampling.temperature > 0 ? " (sampled: not expected to match)" : "");
    fprintf(stderr,
            "glm: prefill %d tokens %.3f s | decode %d tokens %.3f s (%.2f tok/s) | peak RSS %.2f "
            "GB\n",
            P, t1 - t0, out.n, t2 - t1, out.n > 1 ? (out.n - 1) / (t2 - t1) : 0.0, peak_rss_gb());
    if (g_verbose) print_spec_stats(g, NULL);
    generator_free(g);
    free(out.ids);
    return sampling.temperature > 0 ? 0 : ok != expected;
}

/* REPLAY: full_ids fed one token at a time as fixed input — the decode benchmark. It measures
   decode with the expert cache's memory in place: the slot helper finishes first. Otherwise the
   helper's page faults land inside the timer: where fresh memory comes at 0.35 GB/s, 64 tokens on
   the small bench model ran at 7.5 tok/s with the cache growing only as fast as the helper
   (hit 38 %), 13-14 tok/s after it. */
static void run_replay(Model *m, RunState *s, const ForwardOptions *opt, const Reference *ref) {
    const int N = ref->full.n;
    Generator *g = generator_create(m, s, opt, (SamplerSettings){ 0.0f, 1.0f, 1 });
    ExpertStore *store = &m->experts;
    const double faulting = expert_store_end_populate(store, 0);
    if (faulting > 0)
        fprintf(stderr, "glm: expert slots faulted in before the REPLAY timer started: %.2f s\n",
                faulting);
    long long h0 = store->hits, m0 = store->misses;
    double t0 = now_seconds();
    for (int i = 0; i < N; i++) generator_prefill(g, &ref->full.ids[i], 1);
    double dt = now_seconds() - t0;
    generator_free(g);
    long long hits = store->hits - h0, total = hits + store->misses - m0;
    printf("REPLAY decode: %d tokens in %.3fs | %.3f tok/s | expert hit %.1f%%\n", N, dt, N / dt,
           total ? 100.0 * hits / total : 0.0);
}

/* Greedy decoding's length: NGEN, or as many tokens as full_ids continues the prompt. */
static int validation_ngen(const Settings *set, const Reference *ref) {
    return set->ngen >= 0 ? set->ngen : ref->full.n - ref->prompt.n;
}

/* The KV cache a REF run sizes (run_context): TF and REPLAY hold full_ids, greedy decoding
   prompt_ids and its NGEN tokens, plus one. PLAN=1 with REF sizes its plan with it too. */
static int validation_context(const Settings *set, const Reference *ref) {
    const int decoded = ref->prompt.n + validation_ngen(set, ref);
    const int held = set->teacher_forcing || set->replay ? ref->full.n : decoded;
    const int need = held + 1, capacity = run_context(set, NULL, need, 0);
    if (capacity < need) die("CTX=%d is smaller than the %d tokens this run needs", set->ctx, need);
    return capacity;
}

/* A run whose predictions differ from the oracle ends with exit 3; this says what that means.
   The oracle is an independent f32 implementation: the f32 path (expert_bits and dense_bits 16)
   must match it at every position, while quantized weights (the default: int4) drift from it. */
static void explain_mismatch(const Settings *set, int prequantized) {
    static const char *const BITS[] = { [2] = "int2", [4] = "int4", [8] = "int8", [16] = "f32" };
    static const char oracle[] = "exit 3: the predictions differ from the oracle, an f32 reference "
                                 "implementation";
    if (set->expert_bits == 16 && set->dense_bits == 16 && !prequantized) {
        say("%s; this run used the f32 path (expert_bits and dense_bits 16), which must match it "
            "exactly, so this is a real mismatch", oracle);
        return;
    }
    say("%s. This run quantized the weights (routed experts %s, other matrices %s: the positional "
        "arguments expert_bits and dense_bits, 4 and 4 by default), which drifts from it, so "
        "mismatches are expected. The f32 path must match every position: ./glm 64 16 16 "
        "(cache_slots 64, expert_bits 16, dense_bits 16)%s", oracle, BITS[set->expert_bits],
        BITS[set->dense_bits], prequantized ? "; the model's pre-quantized experts stay quantized, "
        "so check a float copy of the model" : "");
}

/* REF=file: teacher forcing, greedy decoding or REPLAY against the oracle's ids. */
static int run_validation(const Settings *set) {
    Reference ref = reference_load(set->ref_path);
    const int ngen = validation_ngen(set, &ref), capacity = validation_context(set, &ref);
    Model model;
    model_load(&model, set, capacity);
    const TokenList *lists[] = { &ref.prompt, &ref.full, &ref.tf_pred, &ref.mtp_pred };
    const char *list_names[] = { "prompt_ids", "full_ids", "tf_pred", "mtp_pred" };
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < lists[k]->n; i++)
            if (lists[k]->ids[i] >= model.c.vocab)
                die("%s: %s[%d] = %d is outside the model's vocabulary (%d)", set->ref_path,
                    list_names[k], i, lists[k]->ids[i], model.c.vocab);
    RunState state;
    ForwardOptions opt = engine_start(set, &model, &state, capacity);
    double t0 = now_seconds();
    int failed = 0;
    if (set->replay) run_replay(&model, &state, &opt, &ref);
    else if (set->teacher_forcing)
        failed = run_teacher_forcing(&model, &state, &opt, &ref, set->mtp);
    else {
        const uint64_t seed = set->seed ? set->seed : clock_seed();
        if (set->temperature > 0)
            say_detail("sampling: TEMPERATURE %g, NUCLEUS %g, SEED %llu", set->temperature,
                       set->top_p, (unsigned long long)seed);
        failed = run_greedy(&model, &state, &opt, &ref, ngen,
                            (SamplerSettings){ set->temperature, set->top_p, seed }, set->spec_mode,
                            set->draft);
    }
    print_expert_stats(&model.experts, now_seconds() - t0);
    fprintf(stderr, "glm: peak RSS %.2f GB\n", peak_rss_gb());
    if (failed) explain_mismatch(set, model.experts.prequantized);
    engine_stop(set, &model, &state);
    reference_free(&ref);
    return failed ? 3 : 0;
}

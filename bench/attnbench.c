/* attnbench: the absorbed MLA attention core (scores, softmax, pooled latents, W_UK / W_UV) on
   GLM-5.2's attention shapes (64 heads, kv_lora 512, qk_nope 192, qk_rope 64, v_head 256; kv_b
   int4 group 64 with random codes), on a synthetic latent cache. glm.c is included whole
   and its attention_core() is timed as the forward pass calls it: the projections
   (q_a, q_b, kv_a, o_proj) and the indexer are not part of it.

     bench/attnbench [CASE...]       CASE = S@POS[/K]: S query rows at positions POS..POS+S-1,
                                     each seeing every earlier key, or K keys chosen at random
                                     (the DSA selection at long context; GLM-5.2: K = 2048)
     default cases: 255@0 (a short prompt), 64@3936/2048 (rows at 4,000 tokens of context),
                    1@4000/2048 (decode at 4,000)
     env: THREADS (default: all cores), REPS (default 5), KERNEL, IDOT (as ./glm)

   Prints per case: wall ms per row (= per token and layer), CPU ms per row (all threads; other
   processes do not count), GFLOP/s (2 per multiply-add of the absorbed form's four products), and
   an FNV-1a hash of the output's bytes: two builds that print the same hash computed the same bits
   (a change to the kernels' order of work must not change it). */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "../glm.c"

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static uint64_t rng_next(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return rng_state;
}
static float rng_normalish(void) {   /* sum of 4 uniforms, centred: mean 0, variance 1/3 */
    float a = 0.0f;
    for (int k = 0; k < 4; k++) a += (float)(rng_next() >> 40) / (float)(1 << 24);
    return (a - 2.0f) * 1.732f;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* attention_core over S rows as the forward calls it: pieces of `piece` rows (rows row0.. of the
   call). */
static void attention_in_pieces(AttentionCall *ac, int S, int piece, int pos0, float scale) {
    for (int p = 0; p < S; p += piece) {
        ac->row0 = p;
        attention_core(ac, S - p < piece ? S - p : piece, pos0 + p, scale);
    }
}

int main(int argc, char **argv) {
    const char *env_threads = getenv("THREADS"), *env_reps = getenv("REPS"),
               *env_kernel = getenv("KERNEL"), *env_idot = getenv("IDOT");
#ifdef _OPENMP
    if (env_threads && atoi(env_threads) > 0) omp_set_num_threads(atoi(env_threads));
#endif
    if (env_kernel) {
        QtKernel k;
        if (qt_kernel_parse(env_kernel, &k) || qt_set_kernel(k)) {
            fprintf(stderr, "attnbench: KERNEL=%s unknown or not on this CPU\n", env_kernel);
            return 1;
        }
    }
    if (env_idot) g_integer_dot = atoi(env_idot);
    const int reps = env_reps && atoi(env_reps) > 0 ? atoi(env_reps) : 5;
    const char *defaults[] = { "255@0", "64@3936/2048", "1@4000/2048" };
    const int ncases = argc > 1 ? argc - 1 : 3;
    const char *const *cases = argc > 1 ? (const char *const *)argv + 1 : defaults;

    Model m;
    memset(&m, 0, sizeof m);
    Config *c = &m.c;
    unsigned char dense = 1, indexer = 0;
    c->n_layers = 1; c->n_mtp = 0; c->layer_dense = &dense; c->layer_indexer = &indexer;
    c->hidden = 6144;
    c->n_heads = 64;
    c->q_lora = 2048;
    c->kv_lora = 512;
    c->qk_nope = 192;
    c->qk_rope = 64;
    c->qk_head = 256; c->v_head = 256; c->inter = 12288; c->moe_inter = 2048; c->n_experts = 256;
    c->experts_per_tok = 8;
    c->n_shared = 1;
    c->index_heads = 32;
    c->index_dim = 128;
    c->index_topk = 2048;
    Layer L;
    memset(&L, 0, sizeof L);
    const int64_t kvb_rows = (int64_t)c->n_heads * (c->qk_nope + c->v_head);
    if (qt_alloc(&L.kv_b, QT_INT4_GROUP, 64, kvb_rows, c->kv_lora)) die("out of memory");
    for (int64_t i = 0; i < kvb_rows * L.kv_b.row_bytes; i++) L.kv_b.data[i] = (uint8_t)rng_next();
    for (int64_t i = 0; i < kvb_rows * qt_groups_per_row(&L.kv_b); i++)
        L.kv_b.scales[i] = 0.01f * (1.0f + 0.25f * rng_normalish());
    ForwardOptions opt = { .absorb = 1, .indexer_mode = INDEXER_AUTO, .latent_eps = 1e-6f };

    printf("attnbench: %s kernel, IDOT=%d, %d threads, %d reps (median); GLM-5.2 attention shapes, "
           "kv_b int4 group 64\n",
           qt_kernel_name(qt_get_kernel()), g_integer_dot, max_threads(), reps);
    printf("  %-14s %6s %10s %10s %9s  %-16s\n", "case", "keys", "wall ms/row", "cpu ms/row",
           "GFLOP/s", "output hash");
    for (int ci = 0; ci < ncases; ci++) {
        int S = 0, pos0 = 0, K = 0;
        if (sscanf(cases[ci], "%d@%d/%d", &S, &pos0, &K) < 2 || S < 1 || pos0 < 0 || K < 0)
            die("attnbench: bad case '%s' (S@POS[/K])", cases[ci]);
        const int T = pos0 + S;
        RunState s;
        c->index_topk = K > 0 ? K : 2048;
        run_state_init(&s, &m, T, S, 0);
        for (int64_t i = 0; i < (int64_t)T * c->kv_lora; i++) s.latent[0][i] = rng_normalish();
        for (int64_t i = 0; i < (int64_t)T * c->qk_rope; i++) s.rope_key[0][i] = rng_normalish();
        /* the forward's pieces: s.q holds ATT_PIECE rows; every piece gets the same queries */
        const int piece = S < ATT_PIECE ? S : ATT_PIECE;
        for (int64_t i = 0; i < (int64_t)piece * c->n_heads * c->qk_head; i++)
            s.q[i] = rng_normalish();
        double keys = 0;
        for (int r = 0; r < S; r++) {
            const int visible = pos0 + r + 1;
            if (K == 0 || visible <= K) { s.selection_count[r] = -1; keys += visible; continue; }
            /* K distinct keys of 0..visible-1, ascending */
            int *sel = s.selection + (size_t)r * K;
            int n = 0;
            for (int j = 0; j < visible && n < K; j++)
                if (rng_next() % (uint64_t)(visible - j) < (uint64_t)(K - n)) sel[n++] = j;
            s.selection_count[r] = n;
            keys += n;
        }
        AttentionCall ac = { c, &L, &s, 0, NULL, &opt, 0 };
        const float scale = 1.0f / sqrtf((float)c->qk_head);
        /* multiply-adds: qc (dn·kvl per head), scores (kvl + dr per key), pooling (kvl per key),
           W_UV (dv·kvl) */
        const double macs = (double)S * c->n_heads *
                                ((double)c->qk_nope * c->kv_lora + (double)c->v_head * c->kv_lora) +
                            keys * c->n_heads * (2.0 * c->kv_lora + c->qk_rope);
        double wall[64], cpu[64];
        attention_in_pieces(&ac, S, piece, pos0, scale);   /* warm-up: scratch, page faults */
        for (int rep = 0; rep < reps && rep < 64; rep++) {
            double w0 = now_seconds(), c0 = cpu_seconds();
            attention_in_pieces(&ac, S, piece, pos0, scale);
            wall[rep] = now_seconds() - w0;
            cpu[rep] = cpu_seconds() - c0;
        }
        qsort(wall, (size_t)reps, sizeof(double), cmp_double);
        qsort(cpu, (size_t)reps, sizeof(double), cmp_double);
        const double wm = wall[reps / 2], cm = cpu[reps / 2];
        uint64_t hash = 0xcbf29ce484222325ull;   /* the last piece's output rows */
        const unsigned char *out = (const unsigned char *)s.attn;
        for (size_t i = 0;
             i < (size_t)(S - (S - 1) / piece * piece) * c->n_heads * c->v_head * sizeof(float);
             i++)
            hash = (hash ^ out[i]) * 0x100000001b3ull;
        printf("  %-14s %6.0f %10.3f %10.3f %9.1f  %016llx\n", cases[ci], keys / S, wm / S * 1e3,
               cm / S * 1e3, 2 * macs / wm * 1e-9, (unsigned long long)hash);
        fflush(stdout);
        run_state_free(&s);
    }
    qt_free(&L.kv_b);
    return 0;
}

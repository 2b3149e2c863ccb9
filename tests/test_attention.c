/* Unit tests of the absorbed attention core (glm.c, attention_core): on GLM-5.2's attention shapes
   (64 heads, kv_lora 512, qk_nope 192, qk_rope 64, v_head 256) and on odd small ones (5 heads,
   kv_lora 37: every tile's remainder path; 20 heads, kv_lora 45: whole and partial blocks of the
   head transposes), with random latents, rope keys, queries and an int4
   group-64 kv_b:
   - against a double-precision reference of §3.5 written out per head (qc = W_UKᵀ q_nope, scores,
     softmax, z, W_UV·z on the dequantized weights; IDOT=0 so W_UV is the float path);
   - a row's output is bit-identical whatever shares its call: all rows in one call, one row per
     call (decode), chunks of 7 rows, on 1 and on 2 threads; with every key visible and with a DSA
     selection (per-row key lists). Also the DSA indexer's scores of 8 keys at a time against the
     scalar formula, and silu_mul (SwiGLU's gate, on the same vector exp): within a few ulp of
     double precision from -120 to 120, and a value's result does not depend on the call's length or
     its position; and ffn_swiglu, which works in pieces of FFN_ROWS rows: a row's output does not
     depend on them. The engine (glm.c) is included whole. Deterministic: fixed seeds. */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "../glm.c"

static int failures;
#define CHECK(name, cond, ...) do { if (cond) printf("PASS %s\n", name); else { printf("FAIL %s: ", name); printf(__VA_ARGS__); printf("\n"); failures++; } } while (0)

static uint64_t rng_state;
static uint64_t rng_next(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return rng_state;
}
/* [-1, 1) */
static float rng_float(void) { return (float)(rng_next() >> 40) / (float)(1 << 24) * 2.0f - 1.0f; }

typedef struct {
    int nh, kvl, dn, dr, dv, T, K;   /* K > 0: rows past K keys see a random selection of K keys */
} Shape;

static void set_threads(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

/* Rows [r0, r0+S) of the T rows through attention_core in one call (queries and selections copied
   to the call's rows 0..S-1); outputs into out[r][nh·dv]. */
static void run_rows(AttentionCall *ac, const float *q_all, const int *sel_all,
                     const int *count_all, int r0, int S, float *out) {
    RunState *s = ac->s;
    const Config *c = ac->c;
    const size_t qw = (size_t)c->n_heads * c->qk_head, ow = (size_t)c->n_heads * c->v_head;
    memcpy(s->q, q_all + (size_t)r0 * qw, (size_t)S * qw * sizeof(float));
    for (int r = 0; r < S; r++) {
        s->selection_count[r] = count_all[r0 + r];
        if (count_all[r0 + r] > 0)
            memcpy(s->selection + (size_t)r * c->index_topk,
                   sel_all + (size_t)(r0 + r) * c->index_topk,
                   (size_t)count_all[r0 + r] * sizeof(int));
    }
    attention_core(ac, S, r0, 1.0f / sqrtf((float)c->qk_head));
    memcpy(out + (size_t)r0 * ow, s->attn, (size_t)S * ow * sizeof(float));
}

static void test_shape(const char *label, Shape sh) {
    Model m;
    memset(&m, 0, sizeof m);
    Config *c = &m.c;
    unsigned char dense = 1, indexer = 0;
    c->n_layers = 1; c->layer_dense = &dense; c->layer_indexer = &indexer;
    c->hidden = 64;
    c->n_heads = sh.nh;
    c->q_lora = 16;
    c->kv_lora = sh.kvl;
    c->qk_nope = sh.dn;
    c->qk_rope = sh.dr;
    c->qk_head = sh.dn + sh.dr;
    c->v_head = sh.dv;
    c->inter = 64;
    c->moe_inter = 16;
    c->n_experts = 4;
    c->experts_per_tok = 2;
    c->n_shared = 1;
    c->index_heads = 2;
    c->index_dim = 8;
    c->index_topk = sh.K > 0 ? sh.K : sh.T;
    Layer L;
    memset(&L, 0, sizeof L);
    const int64_t kvb_rows = (int64_t)sh.nh * (sh.dn + sh.dv);
    if (qt_alloc(&L.kv_b, QT_INT4_GROUP, 64, kvb_rows, sh.kvl)) die("out of memory");
    rng_state = 0x9E3779B97F4A7C15ull ^ (uint64_t)sh.kvl;
    for (int64_t i = 0; i < kvb_rows * L.kv_b.row_bytes; i++) L.kv_b.data[i] = (uint8_t)rng_next();
    for (int64_t i = 0; i < kvb_rows * qt_groups_per_row(&L.kv_b); i++)
        L.kv_b.scales[i] = 0.02f * (1.0f + 0.5f * rng_float());
    ForwardOptions opt = { .absorb = 1, .indexer_mode = INDEXER_AUTO, .latent_eps = 1e-6f };

    set_threads(2);   /* the session's per-thread scratch is sized for 2 */
    RunState s;
    run_state_init(&s, &m, sh.T, sh.T, 0);
    for (int64_t i = 0; i < (int64_t)sh.T * sh.kvl; i++) s.latent[0][i] = rng_float();
    for (int64_t i = 0; i < (int64_t)sh.T * sh.dr; i++) s.rope_key[0][i] = rng_float();
    const size_t qw = (size_t)sh.nh * c->qk_head, ow = (size_t)sh.nh * sh.dv;
    float *q_all = xmalloc((size_t)sh.T * qw * sizeof(float));
    for (size_t i = 0; i < (size_t)sh.T * qw; i++) q_all[i] = 2.0f * rng_float();
    int *sel_all = xcalloc((size_t)sh.T * c->index_topk, sizeof(int)),
        *count_all = xcalloc((size_t)sh.T, sizeof(int));
    for (int r = 0; r < sh.T; r++) {   /* K distinct keys of 0..r, ascending; -1: all */
        if (sh.K == 0 || r + 1 <= sh.K) { count_all[r] = -1; continue; }
        int n = 0;
        for (int j = 0; j <= r && n < sh.K; j++)
            if (rng_next() % (uint64_t)(r + 1 - j) < (uint64_t)(sh.K - n))
                sel_all[(size_t)r * sh.K + n++] = j;
        count_all[r] = n;
    }
    AttentionCall ac = { c, &L, &s, 0, NULL, &opt, 0 };
    float *whole = xmalloc((size_t)sh.T * ow * sizeof(float)),
          *other = xmalloc((size_t)sh.T * ow * sizeof(float));
    char name[256];

    /* the reference: per head, in double, on the dequantized kv_b, with every call's exact inputs
       */
    g_integer_dot = 0;
    set_threads(2);
    run_rows(&ac, q_all, sel_all, count_all, 0, sh.T, whole);
    float *wkv = xmalloc((size_t)kvb_rows * sh.kvl * sizeof(float));
    qt_dequant_rows(&L.kv_b, 0, kvb_rows, wkv);
    double *qc = xmalloc((size_t)sh.kvl * sizeof(double)),
           *p = xmalloc((size_t)sh.T * sizeof(double)),
           *z = xmalloc((size_t)sh.kvl * sizeof(double));
    double worst = 0.0, largest = 0.0;
    const double scale = 1.0 / sqrt((double)c->qk_head);
    for (int r = 0; r < sh.T; r++)
        for (int h = 0; h < sh.nh; h++) {
            const float *q = q_all + (size_t)r * qw + (size_t)h * c->qk_head;
            const float *wuk = wkv + (size_t)h * (sh.dn + sh.dv) * sh.kvl,
                        *wuv = wuk + (size_t)sh.dn * sh.kvl;
            for (int t = 0; t < sh.kvl; t++) {
                double a = 0.0;
                for (int d = 0; d < sh.dn; d++) a += (double)q[d] * wuk[(size_t)d * sh.kvl + t];
                qc[t] = a;
            }
            const int n = count_all[r] < 0 ? r + 1 : count_all[r];
            double mx = -INFINITY, sum = 0.0;
            for (int t = 0; t < n; t++) {
                const int j = count_all[r] < 0 ? t : sel_all[(size_t)r * sh.K + t];
                double a = 0.0;
                for (int u = 0; u < sh.kvl; u++) a += qc[u] * s.latent[0][(size_t)j * sh.kvl + u];
                for (int d = 0; d < sh.dr; d++)
                    a += (double)q[sh.dn + d] * s.rope_key[0][(size_t)j * sh.dr + d];
                p[t] = a * scale;
                if (p[t] > mx) mx = p[t];
            }
            for (int t = 0; t < n; t++) { p[t] = exp(p[t] - mx); sum += p[t]; }
            for (int u = 0; u < sh.kvl; u++) {
                double a = 0.0;
                for (int t = 0; t < n; t++)
                    a +=
                        p[t] *
                        s.latent[0][(size_t)(count_all[r] < 0 ? t : sel_all[(size_t)r * sh.K + t]) *
                                        sh.kvl +
                                    u];
                z[u] = a / sum;
            }
            for (int v = 0; v < sh.dv; v++) {
                double a = 0.0;
                for (int u = 0; u < sh.kvl; u++) a += (double)wuv[(size_t)v * sh.kvl + u] * z[u];
                const double got = whole[(size_t)r * ow + (size_t)h * sh.dv + v];
                if (fabs(got - a) > worst) worst = fabs(got - a);
                if (fabs(a) > largest) largest = fabs(a);
            }
        }
    snprintf(name, sizeof name, "%s: matches the double-precision reference (IDOT=0)", label);
    CHECK(name, worst <= 2e-5 * largest + 1e-6, "largest error %.3g against outputs up to %.3g",
          worst, largest);

    /* the same rows in other calls and thread counts, integer W_UV too: bit for bit */
    for (int idot = 0; idot <= 1; idot++) {
        g_integer_dot = idot;
        set_threads(2);
        run_rows(&ac, q_all, sel_all, count_all, 0, sh.T, whole);
        /* 0: all rows at once */
        struct { int chunk, threads; } ways[] = { { 1, 2 }, { 7, 1 }, { 7, 2 }, { 0, 1 } };
        for (size_t w = 0; w < sizeof ways / sizeof ways[0]; w++) {
            set_threads(ways[w].threads);
            const int chunk = ways[w].chunk ? ways[w].chunk : sh.T;
            for (int r0 = 0; r0 < sh.T; r0 += chunk)
                run_rows(&ac, q_all, sel_all, count_all, r0, sh.T - r0 < chunk ? sh.T - r0 : chunk,
                         other);
            const int same = !memcmp(whole, other, (size_t)sh.T * ow * sizeof(float));
            snprintf(name, sizeof name,
                     "%s, IDOT=%d: rows %s on %d thread%s equal all rows at once on 2 threads, bit "
                     "for bit",
                     label, idot,
                     ways[w].chunk == 1 ? "one per call"
                     : ways[w].chunk    ? "in calls of 7"
                                        : "in one call",
                     ways[w].threads, ways[w].threads > 1 ? "s" : "");
            CHECK(name, same, "outputs differ");
        }
    }
    set_threads(2);
    g_integer_dot = 1;
    free(q_all);
    free(sel_all);
    free(count_all);
    free(whole);
    free(other);
    free(wkv);
    free(qc);
    free(p);
    free(z);
    run_state_free(&s);
    qt_free(&L.kv_b);
}

/* silu_mul against double precision, with random multipliers u (a power-of-two u would make the
   last multiply exact and hide its rounding). Below g = -87, where e^g is under the smallest normal
   float, att_exp gives 0 and so does the gate: the true value is then under 1e-35 in magnitude, and
   the check is that it is flushed to zero, not a relative error against a made-up floor. */
static void test_silu(void) {
    enum { N = 4001 };
    float *g = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N),
          *all = malloc(sizeof(float) * N);
    const uint64_t saved_rng = rng_state;   /* the other tests keep the inputs they always had */
    rng_state = 0x2545F4914F6CDD1Dull;
    for (int i = 0; i < N; i++) {
        g[i] = -120.0f + 240.0f * (float)i / (N - 1);
        u[i] = 0.5f + rng_float() * 0.25f;
    }
    rng_state = saved_rng;
    g[N / 2] = 0.0f; g[7] = -0.0f; g[9] = 1e-30f; g[11] = -1e-30f;
    memcpy(all, g, sizeof(float) * N);
    silu_mul(all, u, N);
    double worst = 0;
    int at = -1, moved = -1, unflushed = -1;
    for (int i = 0; i < N; i++) {
        const double x = g[i], want = x / (1.0 + exp(-x)) * u[i];
        if (x < -87.0) {
            if (all[i] != 0.0f || fabs(want) >= 1e-35) unflushed = i;
        } else {
            const double err = want == 0.0 ? fabs(all[i]) : fabs(all[i] - want) / fabs(want);
            if (err > worst) { worst = err; at = i; }
        }
        /* alone, and at each position of short calls */
        for (int len = 1; len <= 3 && moved < 0; len++) {
            float one[3], uu[3];
            for (int k = 0; k < len; k++) { one[k] = g[i]; uu[k] = u[i]; }
            silu_mul(one, uu, (size_t)len);
            for (int k = 0; k < len; k++) if (memcmp(&one[k], &all[i], sizeof(float))) moved = i;
        }
    }
    CHECK("silu_mul within 4 ulp of double precision over [-87, 120]", worst < 5e-7,
          "relative error %.3g at g = %.9g", worst, at >= 0 ? g[at] : 0.0f);
    CHECK("silu_mul: 0 below g = -87 (a true value under 1e-35)", unflushed < 0,
          "g = %.9g gave %.9g", unflushed >= 0 ? g[unflushed] : 0.0f,
          unflushed >= 0 ? all[unflushed] : 0.0f);
    CHECK("silu_mul: a value's result does not depend on the call's length or position", moved < 0,
          "g = %.9g", moved >= 0 ? g[moved] : 0.0f);
    free(g); free(u); free(all);
}

/* ffn_swiglu works in pieces of the rows its scratch holds (FFN_ROWS, or a MoE thread's share):
   a row's output must be the same bytes whether it comes in a call of 2·FFN_ROWS + 3 rows, alone,
   in calls of 7 rows, or through pieces of 5 rows. */
static void test_swiglu_pieces(void) {
    enum { IN = 64, WIDTH = 96, S = 2 * FFN_ROWS + 3 };
    FfnWeights w;
    if (qt_alloc(&w.gate, QT_INT4_GROUP, 64, WIDTH, IN) ||
        qt_alloc(&w.up, QT_INT4_GROUP, 64, WIDTH, IN) ||
        qt_alloc(&w.down, QT_INT4_GROUP, 32, IN, WIDTH))
        die("out of memory");
    float *row = malloc(sizeof(float) * WIDTH);
    QTensor *t[3] = { &w.gate, &w.up, &w.down };
    for (int k = 0; k < 3; k++)
        for (int64_t r = 0; r < t[k]->rows; r++) {
            for (int64_t c = 0; c < t[k]->cols; c++) row[c] = rng_float();
            qt_quantize_rows(t[k], r, 1, row);
        }
    float *x = malloc(sizeof(float) * S * IN), *all = malloc(sizeof(float) * S * IN),
          *part = malloc(sizeof(float) * S * IN);
    float *h1 = malloc(sizeof(float) * FFN_ROWS * WIDTH),
          *h2 = malloc(sizeof(float) * FFN_ROWS * WIDTH);
    for (int i = 0; i < S * IN; i++) x[i] = rng_float();
    ffn_swiglu(&w, x, S, all, h1, h2, FFN_ROWS);
    int same_alone = 1, same_sevens = 1, same_fives = 1;
    for (int r = 0; r < S; r++) ffn_swiglu(&w, x + r * IN, 1, part + r * IN, h1, h2, FFN_ROWS);
    same_alone = !memcmp(all, part, sizeof(float) * S * IN);
    for (int r = 0; r < S; r += 7)
        ffn_swiglu(&w, x + r * IN, S - r < 7 ? S - r : 7, part + r * IN, h1, h2, FFN_ROWS);
    same_sevens = !memcmp(all, part, sizeof(float) * S * IN);
    memset(part, 0, sizeof(float) * S * IN);
    ffn_swiglu(&w, x, S, part, h1, h2, 5);
    same_fives = !memcmp(all, part, sizeof(float) * S * IN);
    CHECK("ffn_swiglu: 2·FFN_ROWS + 3 rows in one call give the bytes of one row per call",
          same_alone, "outputs differ");
    CHECK("ffn_swiglu: ... and of calls of 7 rows", same_sevens, "outputs differ");
    CHECK("ffn_swiglu: ... and of pieces of 5 rows", same_fives, "outputs differ");
    for (int k = 0; k < 3; k++) qt_free(t[k]);
    free(row); free(x); free(all); free(part); free(h1); free(h2);
}

/* The DSA indexer's scores (index_scores8: 8 keys in vector lanes) equal the scalar formula
   Σ_h w[h]·relu(scale·qt_dot_f32(q_h, k_y)) bit for bit: GLM-5.2's 32 heads × 128 dims and odd
   dims (a remainder shorter than 16 lanes), 1..8 keys, dots of both signs, zero and NaN. */
static void test_index_scores(void) {
    const int dims[] = { 128, 37, 16, 5 }, heads[] = { 32, 3 };
    int ok = 1;
    char why[200] = "";
    const uint64_t saved_rng = rng_state;   /* the other tests keep the inputs they always had */
    rng_state = 0x5DEECE66Dull;
    for (size_t di = 0; di < sizeof dims / sizeof dims[0] && ok; di++)
        for (size_t hi = 0; hi < sizeof heads / sizeof heads[0] && ok; hi++) {
            const int id = dims[di], ih = heads[hi];
            float *q = malloc(sizeof(float) * ih * id), *k = malloc(sizeof(float) * 8 * id), w[32];
            for (int i = 0; i < ih * id; i++) q[i] = rng_float();
            for (int i = 0; i < 8 * id; i++) k[i] = rng_float();
            for (int h = 0; h < ih; h++) w[h] = rng_float();
            /* a zero key: every dot +0 */
            for (int i = 0; i < id; i++) k[2 * id + i] = 0.0f;
            /* a NaN key: relu gives 0 */
            if (id > 3) k[5 * id + 3] = NAN;
            const float scale = 1.0f / sqrtf((float)id);
            for (int nk = 1; nk <= 8 && ok; nk++) {
                float got[8];
                index_scores8(q, w, k, nk, ih, id, scale, got);
                for (int y = 0; y < nk && ok; y++) {
                    float ref = 0.0f;
                    for (int h = 0; h < ih; h++) {
                        const float t =
                            qt_dot_f32(q + (size_t)h * id, k + (size_t)y * id, id) * scale;
                        ref += w[h] * (t > 0.0f ? t : 0.0f);
                    }
                    if (memcmp(&ref, &got[y], sizeof ref)) {
                        ok = 0;
                        snprintf(why, sizeof why, "dim %d, %d heads, %d keys: key %d %.9g vs %.9g",
                                 id, ih, nk, y, got[y], ref);
                    }
                }
            }
            free(q); free(k);
        }
    rng_state = saved_rng;
    CHECK("indexer scores of 8 keys in vector lanes equal the scalar formula (qt_dot_f32), bit for "
          "bit",
          ok, "%s", why);
}

int main(void) {
    test_index_scores();
    test_silu();
    test_swiglu_pieces();
    test_shape("GLM-5.2 shapes, 40 keys",
               (Shape){ .nh = 64, .kvl = 512, .dn = 192, .dr = 64, .dv = 256, .T = 40, .K = 0 });
    test_shape("GLM-5.2 shapes, 70 keys (two row chunks)",
               (Shape){ .nh = 64, .kvl = 512, .dn = 192, .dr = 64, .dv = 256, .T = 70, .K = 0 });
    test_shape("GLM-5.2 shapes, DSA 24 of 40 keys",
               (Shape){ .nh = 64, .kvl = 512, .dn = 192, .dr = 64, .dv = 256, .T = 40, .K = 24 });
    test_shape("odd shapes (5 heads, kv_lora 37), 30 keys",
               (Shape){ .nh = 5, .kvl = 37, .dn = 11, .dr = 6, .dv = 9, .T = 30, .K = 0 });
    /* 20 heads, kv_lora 45: the 16x16 transposes of the heads and the scalar moves of what is left
       */
    test_shape("odd shapes (20 heads, kv_lora 45), 30 keys",
               (Shape){ .nh = 20, .kvl = 45, .dn = 11, .dr = 6, .dv = 9, .T = 30, .K = 0 });
    test_shape("odd shapes, DSA 13 of 30 keys",
               (Shape){ .nh = 5, .kvl = 37, .dn = 11, .dr = 6, .dv = 9, .T = 30, .K = 13 });
    if (failures) { printf("%d attention test(s) failed\n", failures); return 1; }
    printf("all attention tests passed\n");
    return 0;
}

/* Unit tests for quant.h: the quantizer (hand-computed codes, ties, padding, round-trip error),
   format inference, and the matmul kernels (every SIMD kernel this CPU has, row and GEMM,
   bit-identical to the scalar reference for every batch size 1..67; batched == single row;
   1 thread == 2 threads; integer path close to the float path). Kernels the CPU lacks are
   skipped with a SKIP line. */
#define QUANT_IMPLEMENTATION
#include "quant.h"
#include "cpu_kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static int failures;

static void report(int ok, const char *name, const char *why) {
    if (ok) printf("PASS %s\n", name);
    else { printf("FAIL %s: %s\n", name, why); failures++; }
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_next(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return rng_state;
}
static float rng_float(void) {
    return (float)((rng_next() >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

/* First index where two float arrays differ bitwise, or -1. */
static long first_diff(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) if (memcmp(&a[i], &b[i], sizeof(float))) return (long)i;
    return -1;
}

/* ---- Quantizer ----------------------------------------------------------------------------- */

static void expect_codes(const char *name, QtFormat f, int64_t group, const float *w, int64_t cols,
                         const uint8_t *want, int nbytes, const float *want_scales, int nscales) {
    uint8_t codes[64];
    float scales[16];
    memset(codes, 0x55, sizeof codes);
    qt_quantize_row(f, group, w, cols, codes, scales);
    char why[200] = "";
    int ok = 1;
    if (qt_row_bytes(f, cols) != nbytes) {
        ok = 0;
        snprintf(why, sizeof why, "row bytes %lld, want %d", (long long)qt_row_bytes(f, cols),
                 nbytes);
    }
    for (int i = 0; ok && i < nbytes; i++)
        if (codes[i] != want[i]) {
            ok = 0;
            snprintf(why, sizeof why, "byte %d is 0x%02X, want 0x%02X", i, codes[i], want[i]);
        }
    for (int i = 0; ok && i < nscales; i++)
        if (scales[i] != want_scales[i]) {
            ok = 0;
            snprintf(why, sizeof why, "scale %d is %.9g, want %.9g", i, scales[i], want_scales[i]);
        }
    report(ok, name, why);
}

static void test_quantizer_examples(void) {
    /* Scales are powers of two so that w/s is exact and the ties really are ties. */
    {   /* int8: 127 → 127, -63.5 → -64 (tie to even), 0.5 → 0, 1.5 → 2, -127 → -127 */
        const float w[] = { 127, -63.5f, 0.5f, 1.5f, -127 };
        const uint8_t want[] = { 0x7F, 0xC0, 0x00, 0x02, 0x81 };
        const float ws[] = { 1.0f };
        expect_codes("quantize int8-row codes and ties", QT_INT8_ROW, 0, w, 5, want, 5, ws, 1);
    }
    {   /* int4: 7, -3.5→-4, 0.5→0, 1.5→2, 2.5→2, -7; stored q+8, element 2j low nibble */
        const float w[] = { 7, -3.5f, 0.5f, 1.5f, 2.5f, -7 };
        const uint8_t want[] = { 0x4F, 0xA8, 0x1A };
        const float ws[] = { 1.0f };
        expect_codes("quantize int4-row codes and ties", QT_INT4_ROW, 0, w, 6, want, 3, ws, 1);
    }
    {   /* odd cols: the last high nibble is padding, q = 0 (stored 8) */
        const float w[] = { 14, -14, 6 };
        const uint8_t want[] = { 0x1F, 0x8B };
        const float ws[] = { 2.0f };
        expect_codes("quantize int4-row odd cols padding", QT_INT4_ROW, 0, w, 3, want, 2, ws, 1);
    }
    {   /* group 2: each pair gets its own scale */
        const float w[] = { 7, -3.5f, 14, -7, 0.25f };
        const uint8_t want[] = { 0x4F, 0x4F, 0x8F };
        const float ws[] = { 1.0f, 2.0f, 0.25f / 7.0f };
        expect_codes("quantize int4-group codes, scales, partial group", QT_INT4_GROUP, 2, w, 5,
                     want, 3, ws, 3);
    }
    {   /* int2: 1, -1, 0.5→0, -0.5→0, 1 | pad 0,0,0 (stored q+2, element 4j+k at bits 2k) */
        const float w[] = { 1, -1, 0.5f, -0.5f, 1 };
        const uint8_t want[] = { 0xA7, 0xAB };
        const float ws[] = { 1.0f };
        expect_codes("quantize int2-row codes, ties and padding", QT_INT2_ROW, 0, w, 5, want, 2, ws,
                     1);
    }
    {   /* all-zero row: scale floor 1e-8, every code q = 0 */
        const float w[] = { 0, 0, 0 };
        const uint8_t want[] = { 0x88, 0x88 };
        const float ws[] = { 1e-8f };
        expect_codes("quantize zero row", QT_INT4_ROW, 0, w, 3, want, 2, ws, 1);
    }
}

static void test_round_trip(void) {
    const QtFormat fmts[] = { QT_INT8_ROW,   QT_INT4_ROW,   QT_INT4_GROUP,
                              QT_INT4_GROUP, QT_INT4_GROUP, QT_INT2_ROW };
    const int64_t groups[] = { 0, 0, 32, 64, 128, 0 };
    const int64_t R = 7, C = 301;
    float *w = malloc(sizeof(float) * R * C), *row = malloc(sizeof(float) * C);
    for (int64_t i = 0; i < R * C; i++) w[i] = rng_float() * (1 + (i % 5));
    for (size_t k = 0; k < sizeof fmts / sizeof fmts[0]; k++) {
        QTensor t;
        qt_alloc(&t, fmts[k], groups[k], R, C);
        qt_quantize_rows(&t, 0, R, w);
        char name[96], why[200] = "";
        int ok = 1;
        for (int64_t r = 0; r < R && ok; r++) {
            qt_dequant_row(&t, r, row);
            for (int64_t i = 0; i < C && ok; i++) {
                float s = t.scales[r * qt_groups_per_row(&t) + i / t.group];
                double err = fabs((double)w[r * C + i] - (double)row[i]);
                /* ≤ s/2, plus the float rounding of w/s and of q·s. */
                if (err > 0.5 * s * (1 + 1e-5) + 1e-7 * fabs(w[r * C + i])) {
                    ok = 0;
                    snprintf(why, sizeof why, "row %lld col %lld: |w - deq| = %g > s/2 = %g",
                             (long long)r, (long long)i, err, s / 2);
                }
            }
        }
        snprintf(name, sizeof name, "round trip %s group %lld error <= s/2",
                 qt_format_name(fmts[k]), (long long)t.group);
        report(ok, name, why);
        /* several rows at once equal the rows one by one, bit for bit */
        float *rows = malloc(sizeof(float) * (R - 2) * C);
        qt_dequant_rows(&t, 2, R - 2, rows);
        long diff = -1;
        for (int64_t r = 2; r < R && diff < 0; r++) {
            qt_dequant_row(&t, r, row);
            diff = first_diff(row, rows + (r - 2) * C, (size_t)C);
        }
        snprintf(name, sizeof name, "qt_dequant_rows %s group %lld equals qt_dequant_row",
                 qt_format_name(fmts[k]), (long long)t.group);
        report(diff < 0, name, "a value differs");
        free(rows);
        qt_free(&t);
    }
    free(w); free(row);
}

/* ---- Format inference ---------------------------------------------------------------------- */

static void expect_infer(const char *name, int64_t rows, int64_t cols, int64_t bytes,
                         int64_t nscales, int want_ok, QtFormat want_f, int64_t want_g) {
    QtFormat f = QT_F32; int64_t g = -1;
    int rc = qt_infer_format(rows, cols, bytes, nscales, &f, &g);
    char why[160] = "";
    int ok = want_ok ? rc == 0 && f == want_f && g == want_g : rc != 0;
    if (!ok)
        snprintf(why, sizeof why, "rc %d format %s group %lld", rc, rc ? "-" : qt_format_name(f),
                 (long long)g);
    report(ok, name, why);
}

static void test_infer(void) {
    const int64_t R = 6, C = 512;
    expect_infer("infer int8-row", R, C, R * C, R, 1, QT_INT8_ROW, C);
    expect_infer("infer int4-row", R, C, R * C / 2, R, 1, QT_INT4_ROW, C);
    expect_infer("infer int2-row", R, C, R * C / 4, R, 1, QT_INT2_ROW, C);
    expect_infer("infer int4-group 32", R, C, R * C / 2, R * (C / 32), 1, QT_INT4_GROUP, 32);
    expect_infer("infer int4-group 64", R, C, R * C / 2, R * (C / 64), 1, QT_INT4_GROUP, 64);
    expect_infer("infer int4-group 128", R, C, R * C / 2, R * (C / 128), 1, QT_INT4_GROUP, 128);
    expect_infer("infer int4-row odd cols", R, 301, R * 151, R, 1, QT_INT4_ROW, 301);
    expect_infer("infer int2-row odd cols", R, 301, R * 76, R, 1, QT_INT2_ROW, 301);
    expect_infer("infer int4-group 64 partial last group", R, 200, R * 100, R * 4, 1, QT_INT4_GROUP,
                 64);
    expect_infer("refuse bytes fitting no format", R, C, R * C / 2 + 1, R, 0, QT_F32, 0);
    expect_infer("refuse bytes of 3 bits per value", R, C, R * C * 3 / 8, R, 0, QT_F32, 0);
    expect_infer("refuse scale count not a multiple of rows", R, C, R * C / 2, R * 8 + 1, 0, QT_F32,
                 0);
    expect_infer("refuse group count matching no group size", R, C, R * C / 2, R * 3, 0, QT_F32, 0);
    expect_infer("refuse int8 bytes with grouped scales", R, C, R * C, R * 8, 0, QT_F32, 0);
    expect_infer("refuse zero rows", 0, C, 0, 0, 0, QT_F32, 0);
    expect_infer("refuse negative cols", R, -4, R * 2, R, 0, QT_F32, 0);
}

/* ---- Kernels ------------------------------------------------------------------------------- */

static QtKernel simd_kernels[8];
static int n_simd;

static void fill_weights(QTensor *t, int mode) {
    /* mode 0: quantized random floats; 1: raw random bytes (every code, incl. int8 -128, int4 -8,
       int2 -2); 2: every code the most negative one; 3: every code the most positive one; 4: zero
       rows mixed in. */
    const int64_t R = t->rows, C = t->cols, G = qt_groups_per_row(t);
    if (mode == 0 || mode == 4) {
        float *w = malloc(sizeof(float) * C);
        for (int64_t r = 0; r < R; r++) {
            for (int64_t i = 0; i < C; i++)
                w[i] = (mode == 4 && r % 3 == 1) ? 0.0f : rng_float() * (1 + (i % 7));
            qt_quantize_row(t->format, t->group, w, C, t->data + r * t->row_bytes,
                            t->scales + r * G);
        }
        free(w);
        return;
    }
    const int i8 = t->format == QT_INT8_ROW;
    /* int8 -128 / 127; int4 -8 / 7; int2 -2 / 1 */
    const uint8_t lowest = i8 ? 0x80 : 0x00, highest = i8 ? 0x7F : 0xFF;
    for (int64_t i = 0; i < R * t->row_bytes; i++)
        t->data[i] = mode == 1 ? (uint8_t)rng_next() : mode == 2 ? lowest : highest;
    for (int64_t i = 0; i < R * G; i++)
        t->scales[i] = 0.001f + 0.01f * (float)(rng_next() % 1000) / 1000.0f;
}

static void fill_acts(float *x, int S, int64_t C, int mode) {
    /* mode 0: random; 1: all equal positive (codes all 127); 2: all equal negative (-127);
       3: zero rows mixed in; 4: alternating ±big (codes ±127). */
    for (int s = 0; s < S; s++)
        for (int64_t i = 0; i < C; i++) {
            float v;
            switch (mode) {
            case 1: v = 3.0f; break;
            case 2: v = -2.5f; break;
            case 3: v = s % 2 ? 0.0f : rng_float(); break;
            case 4: v = (i & 1) ? 5.0f : -5.0f; break;
            default: v = rng_float() * 4.0f;
            }
            x[(int64_t)s * C + i] = v;
        }
}

static void set_threads(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

/* One shape: all kernels against the scalar reference, and the invariances. Returns 0 on failure.
   */
static int check_shape(QtFormat f, int64_t group, int64_t R, int64_t C, int wmode, int xmode,
                       const char *label) {
    /* 3..6: every mix of the kernels' 4-row and 2-row batches and a remainder */
    const int S = 3 + (int)(C % 4);
    QTensor t;
    if (qt_alloc(&t, f, group, R, C)) { report(0, label, "qt_alloc failed"); return 0; }
    fill_weights(&t, wmode);
    float *x = malloc(sizeof(float) * S * C);
    fill_acts(x, S, C, xmode);
    float *ref = malloc(sizeof(float) * S * R), *got = malloc(sizeof(float) * S * R),
          *one = malloc(sizeof(float) * R);
    int ok = 1;
    char why[240] = "";
    set_threads(2);
    qt_matmul_with(&t, x, ref, S, 1, QT_KERNEL_SCALAR);
    for (int k = 0; k < n_simd && ok; k++) {
        memset(got, 0xFF, sizeof(float) * S * R);
        qt_matmul_with(&t, x, got, S, 1, simd_kernels[k]);
        long d = first_diff(ref, got, (size_t)(S * R));
        if (d >= 0) {
            ok = 0;
            snprintf(why, sizeof why, "%s differs from scalar at s=%ld r=%ld: %.9g vs %.9g",
                     qt_kernel_name(simd_kernels[k]), d / R, d % R, ref[d], got[d]);
        }
        /* each activation row alone, on one thread, must give the batched result */
        set_threads(1);
        for (int s = 0; s < S && ok; s++) {
            qt_matmul_with(&t, x + (int64_t)s * C, one, 1, 1, simd_kernels[k]);
            d = first_diff(ref + (int64_t)s * R, one, (size_t)R);
            if (d >= 0) {
                ok = 0;
                snprintf(why, sizeof why, "%s S=1 on 1 thread differs from batch at s=%d r=%ld",
                         qt_kernel_name(simd_kernels[k]), s, d);
            }
        }
        set_threads(2);
    }
    /* the scalar reference alone, 1 thread */
    set_threads(1);
    for (int s = 0; s < S && ok; s++) {
        qt_matmul_with(&t, x + (int64_t)s * C, one, 1, 1, QT_KERNEL_SCALAR);
        long d = first_diff(ref + (int64_t)s * R, one, (size_t)R);
        if (d >= 0) {
            ok = 0;
            snprintf(why, sizeof why, "scalar S=1 on 1 thread differs from batch at s=%d r=%ld", s,
                     d);
        }
    }
    set_threads(2);
    char name[200];
    snprintf(name, sizeof name,
             "int kernels == scalar, batch == single, 1t == 2t: %s %s group %lld, %lldx%lld, S=%d",
             label, qt_format_name(f), (long long)t.group, (long long)R, (long long)C, S);
    report(ok, name, why);
    free(x); free(ref); free(got); free(one);
    qt_free(&t);
    return ok;
}

static void test_kernels_exact(void) {
    const QtFormat row_fmts[] = { QT_INT8_ROW, QT_INT4_ROW, QT_INT2_ROW };
    const int64_t cols[] = { 1,   2,   3,   5,   7,   31,  63,  64,   65,   100, 127,
                             128, 129, 255, 256, 257, 300, 511, 1000, 2053, 6144 };
    const int64_t groups[] = { 8, 16, 24, 32, 64, 128, 256, 384 };
    int all = 1;
    for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++) {
        for (size_t k = 0; k < 3; k++)
            all &= check_shape(row_fmts[k], 0, 9, cols[c], 0, 0, "random");
        for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++)
            all &= check_shape(QT_INT4_GROUP, groups[g], 9, cols[c], 0, 0, "random");
    }
    (void)all;
    /* Extremes: raw bytes with every code, the most negative and most positive codes against
       activation codes of all +127, all -127 and alternating; zero weight and activation rows. */
    const QtFormat fmts[] = { QT_INT8_ROW,   QT_INT4_ROW,   QT_INT4_GROUP,
                              QT_INT4_GROUP, QT_INT4_GROUP, QT_INT2_ROW };
    const int64_t fg[] = { 0, 0, 32, 64, 128, 0 };
    const char *wname[] = { "quantized", "raw bytes", "min codes", "max codes", "zero rows" };
    const char *xname[] = { "random x", "x codes +127", "x codes -127", "zero x rows",
                            "x codes +-127" };
    for (size_t k = 0; k < sizeof fmts / sizeof fmts[0]; k++)
        for (int wm = 1; wm <= 4; wm++)
            for (int xm = 0; xm <= 4; xm++) {
                char label[80];
                snprintf(label, sizeof label, "%s / %s", wname[wm], xname[xm]);
                check_shape(fmts[k], fg[k], 5, xm % 2 ? 6144 : 1029, wm, xm, label);
            }
}

/* The GEMM kernels (and the row kernels below qt_gemm_min_rows): every batch size S = 1..67 on
   every kernel this CPU has equals the scalar reference bit for bit, for shapes with odd sizes,
   partial last groups and last row blocks, few rows (the activation rows then split into panels),
   extreme codes, on 1 and 2 threads. int2 takes the GEMM on the NEON kernels, the row kernels on
   x86. With the default threshold only S below it (at most 5) take another path than with
   threshold 1, so that pass stops at S = 15. */
static void test_gemm_exact(void) {
    const struct { QtFormat f; int64_t g;
    } fm[] = { { QT_INT8_ROW, 0 },    { QT_INT4_ROW, 0 },     { QT_INT4_GROUP, 32 },
               { QT_INT4_GROUP, 64 }, { QT_INT4_GROUP, 128 }, { QT_INT2_ROW, 0 } };
    const struct { int64_t R, C; int wmode, xmode; } sh[] = {
        { 37, 1029, 0, 0 },   /* 2 full row blocks + 5 rows; partial last group and last byte */
        { 16, 264, 1, 4 },    /* one block, every code, activation codes +-127 */
        { 5, 8, 2, 1 },       /* one column of steps, most negative codes, x codes +127 */
        { 33, 200, 3, 2 },    /* most positive codes, x codes -127 */
        { 70, 2053, 4, 3 },   /* zero weight rows and zero activation rows */
        { 9, 6144, 0, 0 },    /* the expert width */
    };
    enum { SMAX = 67 };
    for (size_t fi = 0; fi < sizeof fm / sizeof fm[0]; fi++)
        for (int k = 0; k < n_simd; k++) {
            int ok = 1;
            char why[300] = "";
            for (size_t si = 0; si < sizeof sh / sizeof sh[0] && ok; si++) {
                const int64_t R = sh[si].R, C = sh[si].C;
                QTensor t;
                if (qt_alloc(&t, fm[fi].f, fm[fi].g, R, C)) {
                    report(0, "gemm alloc", "qt_alloc failed");
                    return;
                }
                fill_weights(&t, sh[si].wmode);
                float *x = malloc(sizeof(float) * SMAX * C),
                      *ref = malloc(sizeof(float) * SMAX * R),
                      *got = malloc(sizeof(float) * SMAX * R);
                fill_acts(x, SMAX, C, sh[si].xmode);
                set_threads(2);
                qt_matmul_with(&t, x, ref, SMAX, 1, QT_KERNEL_SCALAR);
                /* GEMM for every S, then the default */
                for (int gemm_from = 1; gemm_from >= 0 && ok; gemm_from--) {
                    qt_set_gemm_min_rows(gemm_from);
                    for (int S = 1; S <= (gemm_from ? SMAX : 15) && ok; S++) {
                        set_threads(S % 2 ? 1 : 2);
                        memset(got, 0xFF, sizeof(float) * SMAX * R);
                        qt_matmul_with(&t, x, got, S, 1, simd_kernels[k]);
                        long d = first_diff(ref, got, (size_t)(S * R));
                        if (d >= 0) {
                            ok = 0;
                            snprintf(why, sizeof why,
                                     "%lldx%lld (weights %d, x %d), S=%d%s: s=%ld r=%ld: %.9g vs "
                                     "scalar %.9g",
                                     (long long)R, (long long)C, sh[si].wmode, sh[si].xmode, S,
                                     gemm_from == 1 ? " all GEMM" : "", d / R, d % R, got[d],
                                     ref[d]);
                        }
                        for (int64_t i = (int64_t)S * R; i < (int64_t)SMAX * R && ok; i++)
                            if (((uint32_t *)got)[i] != 0xFFFFFFFFu) {
                                ok = 0;
                                snprintf(why, sizeof why, "S=%d wrote past its rows", S);
                            }
                    }
                }
                qt_set_gemm_min_rows(0);
                set_threads(2);
                free(x); free(ref); free(got);
                qt_free(&t);
            }
            char name[160];
            snprintf(name, sizeof name,
                     "%s kernel == scalar for S = 1..%d, row and GEMM paths: %s group %lld",
                     qt_kernel_name(simd_kernels[k]), SMAX, qt_format_name(fm[fi].f),
                     (long long)(fm[fi].g ? fm[fi].g : 0));
            report(ok, name, why);
        }
}

/* The activation quantizer (vectorized) equals the plain scalar formulas of its spec, codes and
   scales, bit for bit: random rows, exact ties (x = k + 1/2 with s = 1), ±0, NaN, ±inf, values
   so small that s = 1e-8, huge values, for groups that are and are not multiples of 16. */
static void ref_quantize_activation(const float *x, int64_t n, int64_t group, int8_t *q,
                                    float *scales) {
    for (int64_t g0 = 0, gi = 0; g0 < n; g0 += group, gi++) {
        const int64_t g1 = g0 + group < n ? g0 + group : n;
        float absmax = 0.0f;
        for (int64_t i = g0; i < g1; i++) {
            const float a = fabsf(x[i]);
            if (a > absmax) absmax = a;
        }
        float s = absmax / 127.0f;
        if (!(s >= 1e-8f)) s = 1e-8f;
        scales[gi] = s;
        for (int64_t i = g0; i < g1; i++) {
            const float r = rintf(x[i] / s);
            q[i] = r != r ? 0 : (int8_t)(r > 127.f ? 127 : r < -127.f ? -127 : (int)r);
        }
    }
}

static void test_quantize_activation(void) {
    enum { N = 6144 };
    float *x = malloc(sizeof(float) * N);
    int8_t *q = malloc(N), *qr = malloc(N);
    float *sc = malloc(sizeof(float) * N), *scr = malloc(sizeof(float) * N);
    const int64_t groups[] = { 8, 16, 40, 64, 128, 6144 };
    const int64_t lens[] = { 1, 15, 16, 17, 63, 64, 65, 200, 1029, 6144 };
    int ok = 1;
    char why[200] = "";
    for (int mode = 0; mode < 7 && ok; mode++)
        for (size_t gi = 0; gi < sizeof groups / sizeof groups[0] && ok; gi++)
            for (size_t li = 0; li < sizeof lens / sizeof lens[0] && ok; li++) {
                const int64_t n = lens[li], g = groups[gi] < n ? groups[gi] : n;
                for (int64_t i = 0; i < n; i++) {
                    float v = rng_float() * 8.0f;
                    switch (mode) {
                    case 1:
                        v = (float)((int)(rng_next() % 254) - 127) + 0.5f;
                        if (i % 16 == 3) v = 127.0f;
                        break; /* ties, s = 1 */
                    case 2:
                        v = (i % 5 == 0)    ? NAN
                            : (i % 7 == 0)  ? INFINITY
                            : (i % 11 == 0) ? -INFINITY
                                            : v;
                        break;
                    case 3: v *= 1e-8f; if (i % 9 == 0) v = -0.0f; break;   /* s = 1e-8 */
                    case 4: v *= 1e37f; break;
                    case 5: v = (i % 3 == 0) ? 0.0f : (float)(i % 255) * 0.5f - 63.5f; break;
                    /* NaN in any lane of a piece, last ones included */
                    case 6: if (rng_next() % 4 == 0) v = NAN; break;
                    }
                    x[i] = v;
                }
                memset(q, 0x55, N); memset(qr, 0x55, N);
                qt_quantize_activation(x, n, g, q, sc);
                ref_quantize_activation(x, n, g, qr, scr);
                for (int64_t i = 0; i < n && ok; i++)
                    if (q[i] != qr[i]) {
                        ok = 0;
                        snprintf(why, sizeof why,
                                 "mode %d group %lld n %lld: code %lld is %d, spec %d (x = %.9g)",
                                 mode, (long long)g, (long long)n, (long long)i, q[i], qr[i], x[i]);
                    }
                for (int64_t k = 0; k < (n + g - 1) / g && ok; k++)
                    if (memcmp(&sc[k], &scr[k], sizeof(float))) {
                        ok = 0;
                        snprintf(why, sizeof why, "mode %d group %lld: scale %lld %.9g vs %.9g",
                                 mode, (long long)g, (long long)k, sc[k], scr[k]);
                    }
            }
    report(ok, "activation quantizer == its scalar formulas (random, ties, NaN, inf, tiny, huge)",
           why);
    free(x); free(q); free(qr); free(sc); free(scr);
}

/* qt_matmul_multi (gate and up against one x): every output equals qt_matmul's on each weight
   alone, bit for bit, for every kernel this CPU has, row and GEMM batch sizes, more than one
   panel (S > 128), 1 and 2 threads; and where the weights cannot share the quantized activations
   (different formats, groups, widths; the float path) it falls back to one call each. */
static void test_matmul_multi(void) {
    const struct { QtFormat f[3]; int64_t g[3], R[3], C[3]; int n; const char *what;
    } cs[] = {
        { { QT_INT4_GROUP, QT_INT4_GROUP },
          { 64, 64 },
          { 70, 37 },
          { 1029, 1029 },
          2,
          "int4 group 64 pair" },
        { { QT_INT4_ROW, QT_INT4_ROW, QT_INT4_ROW },
          { 0, 0, 0 },
          { 33, 16, 5 },
          { 264, 264, 264 },
          3,
          "int4-row triple" },
        { { QT_INT8_ROW, QT_INT8_ROW }, { 0, 0 }, { 48, 48 }, { 200, 200 }, 2, "int8-row pair" },
        { { QT_INT4_GROUP, QT_INT4_GROUP },
          { 32, 128 },
          { 40, 40 },
          { 512, 512 },
          2,
          "different groups (fallback)" },
        { { QT_INT4_GROUP, QT_INT8_ROW },
          { 64, 0 },
          { 40, 24 },
          { 256, 256 },
          2,
          "different formats (fallback)" },
        { { QT_INT4_ROW, QT_F32 }, { 0, 0 }, { 9, 12 }, { 128, 128 }, 2, "with f32 (fallback)" },
    };
    const int Ss[] = { 1, 3, 4, 5, 8, 13, 32, 67, 130 };
    enum { SMAX = 130 };
    QtKernel ks[9] = { QT_KERNEL_SCALAR };
    int nk = 1;
    for (int k = 0; k < n_simd; k++) ks[nk++] = simd_kernels[k];
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++)
        for (int idot = 1; idot >= 0; idot--) {
            const int n = cs[ci].n;
            QTensor t[3];
            float *y[3], *ref[3];
            for (int k = 0; k < n; k++) {
                if (qt_alloc(&t[k], cs[ci].f[k], cs[ci].g[k], cs[ci].R[k], cs[ci].C[k])) {
                    report(0, "multi alloc", "qt_alloc failed");
                    return;
                }
                if (cs[ci].f[k] == QT_F32)
                    for (int64_t i = 0; i < t[k].rows * t[k].cols; i++)
                        ((float *)t[k].data)[i] = rng_float();
                else fill_weights(&t[k], 0);
                y[k] = malloc(sizeof(float) * SMAX * t[k].rows);
                ref[k] = malloc(sizeof(float) * SMAX * t[k].rows);
            }
            const int64_t C = cs[ci].C[0];
            float *x = malloc(sizeof(float) * SMAX * C);
            fill_acts(x, SMAX, C, 0);
            const QTensor *w[3] = { &t[0], &t[1], &t[2] };
            int ok = 1;
            char why[240] = "";
            for (int ki = 0; ki < nk && ok; ki++) {
                qt_set_kernel(ks[ki]);
                for (size_t si = 0; si < sizeof Ss / sizeof Ss[0] && ok; si++) {
                    const int S = Ss[si];
                    set_threads(si % 2 ? 1 : 2);
                    for (int k = 0; k < n; k++) {
                        qt_matmul(&t[k], x, ref[k], S, idot);
                        memset(y[k], 0xFF, sizeof(float) * SMAX * t[k].rows);
                    }
                    qt_matmul_multi(w, n, x, y, S, idot);
                    for (int k = 0; k < n && ok; k++) {
                        long d = first_diff(ref[k], y[k], (size_t)(S * t[k].rows));
                        if (d >= 0)
                            snprintf(why, sizeof why,
                                     "%s S=%d weight %d: s=%ld r=%ld: %.9g vs %.9g",
                                     qt_kernel_name(ks[ki]), S, k, d / t[k].rows, d % t[k].rows,
                                     y[k][d], ref[k][d]);
                        for (int64_t i = (int64_t)S * t[k].rows;
                             i < (int64_t)SMAX * t[k].rows && d < 0; i++)
                            if (((uint32_t *)y[k])[i] != 0xFFFFFFFFu) {
                                d = 0;
                                snprintf(why, sizeof why, "%s S=%d weight %d wrote past its rows",
                                         qt_kernel_name(ks[ki]), S, k);
                            }
                        ok = d < 0;
                    }
                }
            }
            qt_set_kernel(QT_KERNEL_AUTO);
            set_threads(2);
            char name[200];
            snprintf(name, sizeof name,
                     "qt_matmul_multi == qt_matmul on each, every kernel, S = 1..130, idot %d: %s",
                     idot, cs[ci].what);
            report(ok, name, why);
            for (int k = 0; k < n; k++) { free(y[k]); free(ref[k]); qt_free(&t[k]); }
            free(x);
        }
}

/* The exact integer value of one hand-made case, so the scalar spec itself is pinned down. */
static void test_int_known_value(void) {
    QTensor t;
    qt_alloc(&t, QT_INT8_ROW, 0, 1, 4);
    const int8_t codes[4] = { -128, 127, 1, -1 };
    memcpy(t.data, codes, 4);
    t.scales[0] = 0.5f;
    /* x = {127, 127, -127, 127}·s with s = 1 → codes {127, 127, -127, 127}, xs = 1 */
    float x[4] = { 127, 127, -127, 127 }, y = 0, ys[3] = { 0 };
    /* isum = -128·127 + 127·127 - 127 - 127 = -381; y = 0.5·(1·-381) */
    qt_matmul_with(&t, x, &y, 1, 1, QT_KERNEL_SCALAR);
    report(y == -190.5f, "int8 kernel known value (scalar, with code -128)", "wrong value");
    for (int k = 0; k < n_simd; k++) ys[k] = -1;
    for (int k = 0; k < n_simd; k++) qt_matmul_with(&t, x, &ys[k], 1, 1, simd_kernels[k]);
    int ok = 1;
    for (int k = 0; k < n_simd; k++) ok &= ys[k] == -190.5f;
    report(ok, "int8 kernel known value (SIMD kernels, with code -128)", "wrong value");
    qt_free(&t);
}

/* The integer path must approximate the float product (catches a wrong bias correction or a
   misplaced group in the spec itself, which bit-exactness against it cannot). */
static void test_int_close_to_float(void) {
    const QtFormat fmts[] = { QT_INT8_ROW, QT_INT4_ROW, QT_INT4_GROUP, QT_INT2_ROW };
    const int64_t R = 16, C = 1000;
    for (size_t k = 0; k < sizeof fmts / sizeof fmts[0]; k++) {
        QTensor t;
        qt_alloc(&t, fmts[k], 64, R, C);
        fill_weights(&t, 1);
        float *x = malloc(sizeof(float) * C), *yi = malloc(sizeof(float) * R),
              *yf = malloc(sizeof(float) * R);
        float *row = malloc(sizeof(float) * C);
        fill_acts(x, 1, C, 0);
        qt_matmul(&t, x, yi, 1, 1);
        int ok = 1;
        char why[200] = "";
        for (int64_t r = 0; r < R && ok; r++) {
            qt_dequant_row(&t, r, row);
            double exact = 0, mag = 0;
            for (int64_t i = 0; i < C; i++) {
                exact += (double)row[i] * x[i];
                mag += fabs((double)row[i] * x[i]);
            }
            /* activation rounding: at most half a step (absmax/254) per element */
            if (fabs(yi[r] - exact) > 0.01 * mag + 1e-6) {
                ok = 0;
                snprintf(why, sizeof why, "row %lld: int %g vs exact %g (magnitude %g)",
                         (long long)r, yi[r], exact, mag);
            }
        }
        char name[96];
        snprintf(name, sizeof name, "int path close to exact product: %s", qt_format_name(fmts[k]));
        report(ok, name, why);
        (void)yf;
        free(x); free(yi); free(yf); free(row);
        qt_free(&t);
    }
}

/* The float path: equals dequant + qt_dot_f32 exactly, independent of S and thread count. The
   shapes reach every part of qt_float_chunk: 4-row tiles and the rows left over, a short weight
   block, several activation panels (f32, C = 2053: 28 rows a panel with AVX-512) and several row
   chunks. */
static void test_float_path(void) {
    const QtFormat fmts[] = { QT_F32,        QT_INT8_ROW,   QT_INT4_ROW,
                              QT_INT4_GROUP, QT_INT4_GROUP, QT_INT2_ROW };
    const int64_t fgroups[] = { 0, 0, 0, 32, 7, 0 };   /* group 7: groups starting on odd inputs */
    const struct {
        int64_t R, C;
        int S;
    } shapes[] = { { 11, 301, 4 }, { 11, 301, 7 }, { 70, 2053, 37 } };
    for (size_t k = 0; k < sizeof fmts / sizeof fmts[0]; k++)
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
        const int64_t R = shapes[sh].R, C = shapes[sh].C;
        const int S = shapes[sh].S;
        QTensor t;
        qt_alloc(&t, fmts[k], fgroups[k], R, C);
        float *w = malloc(sizeof(float) * R * C);
        for (int64_t i = 0; i < R * C; i++) w[i] = rng_float();
        qt_quantize_rows(&t, 0, R, w);
        float *x = malloc(sizeof(float) * S * C), *y = malloc(sizeof(float) * S * R),
              *y1 = malloc(sizeof(float) * R);
        float *want = malloc(sizeof(float) * S * R), *row = malloc(sizeof(float) * C);
        fill_acts(x, S, C, 0);
        for (int64_t r = 0; r < R; r++) {
            qt_dequant_row(&t, r, row);
            for (int s = 0; s < S; s++) want[s * R + r] = qt_dot_f32(row, x + s * C, C);
        }
        set_threads(2);
        qt_matmul(&t, x, y, S, 0);
        int ok = first_diff(want, y, (size_t)(S * R)) < 0;
        set_threads(1);
        for (int s = 0; s < S; s++) {
            qt_matmul(&t, x + s * C, y1, 1, 0);
            ok &= first_diff(want + s * R, y1, (size_t)R) < 0;
        }
        set_threads(2);
        if (fmts[k] == QT_F32) {
            qt_matmul(&t, x, y, S, 1);
            ok &= first_diff(want, y, (size_t)(S * R)) < 0;
        }
        char name[96];
        snprintf(name, sizeof name,
                 "float path == dequant + qt_dot_f32, batch and threads: %s group %lld, %lldx%lld "
                 "S=%d",
                 qt_format_name(fmts[k]), (long long)t.group, (long long)R, (long long)C, S);
        report(ok, name, "differs");
        free(w); free(x); free(y); free(y1); free(want); free(row);
        qt_free(&t);
    }
}

/* qt_dot_f32_block equals qt_dot_f32 bit for bit, for every tile shape and length. */
static void test_dot_block(void) {
    enum { N = 600 };
    float *rows = malloc(sizeof(float) * 8 * N);
    for (int i = 0; i < 8 * N; i++) rows[i] = rng_float() * (1 + i % 3);
    int ok = 1;
    char why[160] = "";
    const int64_t lens[] = { 1, 15, 16, 17, 64, 511, 512, 576, N };
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (int na = 1; na <= 4; na++)
            for (int nb = 1; nb <= 4; nb++) {
                const float *a[4], *b[4];
                for (int k = 0; k < 4; k++) {
                    a[k] = rows + k * N;
                    b[k] = rows + (4 + k) * N + (k & 1);
                }
                float out[16];
                qt_dot_f32_block(a, na, b, nb, lens[li] - (nb > 1), out);
                for (int x = 0; x < na; x++)
                    for (int y = 0; y < nb; y++) {
                        float want = qt_dot_f32(a[x], b[y], lens[li] - (nb > 1));
                        if (memcmp(&want, &out[x * nb + y], 4) && ok) {
                            ok = 0;
                            snprintf(why, sizeof why, "n=%lld tile %dx%d at (%d,%d): %.9g vs %.9g",
                                     (long long)lens[li], na, nb, x, y, out[x * nb + y], want);
                        }
                    }
            }
    report(ok, "qt_dot_f32_block == qt_dot_f32 for tiles 1..4 x 1..4 and odd lengths", why);
    free(rows);
}

static void test_kernel_api(void) {
    QtKernel k = QT_KERNEL_AUTO;
    int ok = qt_kernel_parse("scalar", &k) == 0 && k == QT_KERNEL_SCALAR &&
             qt_kernel_parse("avx2", &k) == 0 && k == QT_KERNEL_AVX2 &&
             qt_kernel_parse("vnni", &k) == 0 && k == QT_KERNEL_VNNI &&
             qt_kernel_parse("avxvnni", &k) == 0 && k == QT_KERNEL_AVXVNNI &&
             qt_kernel_parse("neon", &k) == 0 && k == QT_KERNEL_NEON &&
             qt_kernel_parse("dotprod", &k) == 0 && k == QT_KERNEL_DOTPROD &&
             qt_kernel_parse("i8mm", &k) == 0 && k == QT_KERNEL_I8MM &&
             qt_kernel_parse("auto", &k) == 0 && k == QT_KERNEL_AUTO;
    report(ok, "kernel names parse", "a known name was refused");
    k = QT_KERNEL_SCALAR;
    report(qt_kernel_parse("avx512", &k) == -1 && qt_kernel_parse("", &k) == -1 &&
               qt_kernel_parse(NULL, &k) == -1 && k == QT_KERNEL_SCALAR,
           "unknown kernel names refused", "accepted");
    QtKernel best = qt_get_kernel();
    report(best != QT_KERNEL_AUTO && qt_kernel_supported(best), "default kernel is a supported one",
           qt_kernel_name(best));
    /* qt_set_kernel changes what qt_matmul uses: the scalar choice must reproduce the scalar result
       */
    ok = qt_set_kernel(QT_KERNEL_SCALAR) == 0 && qt_get_kernel() == QT_KERNEL_SCALAR;
    QTensor t;
    qt_alloc(&t, QT_INT4_GROUP, 64, 8, 200);
    fill_weights(&t, 1);
    float x[200], a[8], b[8];
    fill_acts(x, 1, 200, 0);
    qt_matmul(&t, x, a, 1, 1);
    qt_matmul_with(&t, x, b, 1, 1, QT_KERNEL_SCALAR);
    ok &= first_diff(a, b, 8) < 0;
    ok &= qt_set_kernel(QT_KERNEL_AUTO) == 0 && qt_get_kernel() == best;
    report(ok, "qt_set_kernel selects the kernel qt_matmul uses", "mismatch");
    for (int kk = QT_KERNEL_SCALAR + 1; strcmp(qt_kernel_name((QtKernel)kk), "?"); kk++)
        if (!qt_kernel_supported((QtKernel)kk)) {
            char name[80];
            snprintf(name, sizeof name, "qt_set_kernel refuses unsupported %s",
                     qt_kernel_name((QtKernel)kk));
            report(qt_set_kernel((QtKernel)kk) == -1 && qt_get_kernel() == best, name, "accepted");
        }
    /* S = 0 writes nothing */
    float y[8];
    for (int i = 0; i < 8; i++) y[i] = 42.0f;
    qt_matmul(&t, x, y, 0, 1);
    ok = 1;
    for (int i = 0; i < 8; i++) ok &= y[i] == 42.0f;
    report(ok, "S = 0 leaves the output untouched", "output written");
    qt_free(&t);
}

/* The pool: concurrent callers and callers inside an OpenMP region get the same results. */
typedef struct { const QTensor *t; const float *x; const float *want; int S, ok; } CallerArgs;

static int caller_thread(void *p) {
    CallerArgs *c = p;
    float *y = malloc(sizeof(float) * c->S * c->t->rows);
    for (int it = 0; it < 40; it++) {
        qt_matmul(c->t, c->x, y, c->S, 1);
        if (first_diff(c->want, y, (size_t)(c->S * c->t->rows)) >= 0) c->ok = 0;
    }
    free(y);
    return 0;
}

static void test_pool_concurrency(void) {
    QTensor t[2];
    float *x[2], *want[2];
    const int S = 2;
    for (int i = 0; i < 2; i++) {
        qt_alloc(&t[i], i ? QT_INT4_GROUP : QT_INT8_ROW, 32, 700 + 300 * i, 513);
        fill_weights(&t[i], 1);
        x[i] = malloc(sizeof(float) * S * 513);
        want[i] = malloc(sizeof(float) * S * t[i].rows);
        fill_acts(x[i], S, 513, 0);
        set_threads(1);
        qt_matmul(&t[i], x[i], want[i], S, 1);
    }
    set_threads(2);
    CallerArgs args[2];
    thrd_t th[2];
    for (int i = 0; i < 2; i++) {
        args[i] = (CallerArgs){ &t[i], x[i], want[i], S, 1 };
        thrd_create(&th[i], caller_thread, &args[i]);
    }
    for (int i = 0; i < 2; i++) thrd_join(th[i], NULL);
    report(args[0].ok && args[1].ok,
           "two threads calling qt_matmul at once get the single-thread results", "differs");
    int ok = 1;
    #pragma omp parallel num_threads(2) reduction(&& : ok)
    {
        float *y = malloc(sizeof(float) * S * t[1].rows);
        for (int it = 0; it < 10; it++) {
            qt_matmul(&t[1], x[1], y, S, 1);
            ok = ok && first_diff(want[1], y, (size_t)(S * t[1].rows)) < 0;
        }
        free(y);
    }
    report(ok, "qt_matmul inside an OpenMP parallel region gets the single-thread results",
           "differs");
    /* many back-to-back small calls through the pool (job hand-over races) */
    ok = 1;
    float y[2 * 1000];
    for (int it = 0; it < 2000 && ok; it++) {
        qt_matmul(&t[it & 1], x[it & 1], y, S, 1);
        ok = first_diff(want[it & 1], y, (size_t)(S * t[it & 1].rows)) < 0;
    }
    report(ok, "2000 back-to-back pooled calls all exact", "differs");
    for (int i = 0; i < 2; i++) { free(x[i]); free(want[i]); qt_free(&t[i]); }
}

int main(void) {
    /* every SIMD kernel this CPU has is cross-checked against the scalar reference */
    for (int k = QT_KERNEL_SCALAR + 1; strcmp(qt_kernel_name((QtKernel)k), "?") && n_simd < 8;
         k++) {
        const char *needs;
        if (test_kernel_available((QtKernel)k, &needs)) simd_kernels[n_simd++] = (QtKernel)k;
        else printf("SKIP %s: this CPU has no %s\n", qt_kernel_name((QtKernel)k), needs);
    }
    printf("kernels compared with scalar:");
    for (int k = 0; k < n_simd; k++) printf(" %s", qt_kernel_name(simd_kernels[k]));
    printf("\n");
    test_quantizer_examples();
    test_round_trip();
    test_infer();
    test_kernel_api();
    test_int_known_value();
    test_int_close_to_float();
    test_float_path();
    test_dot_block();
    test_kernels_exact();
    test_gemm_exact();
    test_quantize_activation();
    test_matmul_multi();
    test_pool_concurrency();
    return failures ? 1 : 0;
}

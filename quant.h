/* quant.h — quantized weight tensors: formats, the quantizer and the matmul kernels.

   One job: hold a 2-D weight [rows, cols] in one of the container formats (container.md §3)
   and multiply it by S activation rows. No model knowledge lives here.

     QT_F32         plain float32 rows
     QT_INT8_ROW    one signed byte per value, one f32 scale per row
     QT_INT4_ROW    two values per byte (stored q+8, element 2j in the LOW nibble), scale per row
     QT_INT4_GROUP  same packing, one scale per `group` consecutive inputs of a row
     QT_INT2_ROW    four values per byte (stored q+2, element 4j+k in bits 2k..2k+1), scale per row

   Quantization (computed in float32, identical to tools/convert_fp8_to_int4.py byte for byte):
     s = max(absmax / qmax, 1e-8)        qmax = 127 / 7 / 1 for 8 / 4 / 2 bits
     q = clamp(rint(w / s), -2^(b-1), qmax)        rint = round half to even
   A row whose length does not fill its last byte pads the unused code with q = 0.

   API
     int64_t qt_row_bytes(QtFormat f, int64_t cols);
     int     qt_alloc(QTensor *t, QtFormat f, int64_t group, int64_t rows, int64_t cols);
     void    qt_quantize_rows(QTensor *t, int64_t row0, int64_t nrows, const float *w);
     void    qt_quantize_row(QtFormat f, int64_t group, const float *w, int64_t cols,
                             uint8_t *codes, float *scales);
     void    qt_dequant_row(const QTensor *t, int64_t row, float *out);
     int     qt_infer_format(int64_t rows, int64_t cols, int64_t data_bytes, int64_t n_scales,
                             QtFormat *f, int64_t *group);
     void    qt_matmul(const QTensor *w, const float *x, float *y, int S, int idot);
     void    qt_free(QTensor *t);

   qt_matmul computes y[s][r] = Σ_i W[r][i]·x[s][i] for s < S. Every output element is computed by
   one thread with one fixed reduction order, so a row's result never depends on S or on the
   thread count. idot = 0: exact float path (dequantized weight × f32 activation). idot = 1:
   activations quantized to int8 (absmax/127 per row, per group for grouped weights) and integer
   dot products; f32 tensors always take the float path.

   Define QUANT_IMPLEMENTATION in exactly one translation unit before including. */
#ifndef QUANT_H
#define QUANT_H

#include <stddef.h>
#include <stdint.h>

typedef enum { QT_F32 = 0, QT_INT8_ROW, QT_INT4_ROW, QT_INT4_GROUP, QT_INT2_ROW } QtFormat;

typedef struct {
    QtFormat format;
    int64_t rows, cols;
    int64_t group;       /* inputs per scale: cols for the per-row formats */
    int64_t row_bytes;   /* bytes of one packed row (cols*4 for f32) */
    uint8_t *data;       /* rows * row_bytes */
    float *scales;       /* rows * ceil(cols/group); NULL for f32 */
    int owns_memory;     /* qt_free releases data and scales */
} QTensor;

const char *qt_format_name(QtFormat f);
int qt_format_bits(QtFormat f);
int64_t qt_row_bytes(QtFormat f, int64_t cols);
static inline int64_t qt_groups_per_row(const QTensor *t) { return (t->cols + t->group - 1) / t->group; }
int qt_alloc(QTensor *t, QtFormat f, int64_t group, int64_t rows, int64_t cols);
void qt_free(QTensor *t);
void qt_quantize_row(QtFormat f, int64_t group, const float *w, int64_t cols, uint8_t *codes, float *scales);
void qt_quantize_rows(QTensor *t, int64_t row0, int64_t nrows, const float *w);
void qt_dequant_row(const QTensor *t, int64_t row, float *out);
int qt_infer_format(int64_t rows, int64_t cols, int64_t data_bytes, int64_t n_scales, QtFormat *f, int64_t *group);
void qt_matmul(const QTensor *w, const float *x, float *y, int S, int idot);
float qt_dot_f32(const float *a, const float *b, int64_t n);

#endif /* QUANT_H */

#ifdef QUANT_IMPLEMENTATION
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *qt_format_name(QtFormat f) {
    switch (f) {
    case QT_F32: return "f32";
    case QT_INT8_ROW: return "int8-row";
    case QT_INT4_ROW: return "int4-row";
    case QT_INT4_GROUP: return "int4-grouped";
    case QT_INT2_ROW: return "int2-row";
    }
    return "?";
}

int qt_format_bits(QtFormat f) {
    switch (f) {
    case QT_F32: return 32;
    case QT_INT8_ROW: return 8;
    case QT_INT4_ROW: case QT_INT4_GROUP: return 4;
    case QT_INT2_ROW: return 2;
    }
    return 0;
}

int64_t qt_row_bytes(QtFormat f, int64_t cols) {
    switch (f) {
    case QT_F32: return cols * 4;
    case QT_INT8_ROW: return cols;
    case QT_INT4_ROW: case QT_INT4_GROUP: return (cols + 1) / 2;
    case QT_INT2_ROW: return (cols + 3) / 4;
    }
    return 0;
}

int qt_alloc(QTensor *t, QtFormat f, int64_t group, int64_t rows, int64_t cols) {
    memset(t, 0, sizeof *t);
    t->format = f; t->rows = rows; t->cols = cols;
    t->group = (f == QT_INT4_GROUP) ? group : cols;
    if (t->group <= 0) t->group = 1;
    t->row_bytes = qt_row_bytes(f, cols);
    /* 64-byte alignment keeps SIMD loads aligned and rows cache-line friendly. */
    size_t data_bytes = (size_t)(rows * t->row_bytes);
    t->data = aligned_alloc(64, (data_bytes + 63) / 64 * 64 + 64);
    if (!t->data) return -1;
    if (f != QT_F32) {
        size_t ns = (size_t)(rows * qt_groups_per_row(t));
        t->scales = malloc((ns ? ns : 1) * sizeof(float));
        if (!t->scales) { free(t->data); t->data = NULL; return -1; }
    }
    t->owns_memory = 1;
    return 0;
}

void qt_free(QTensor *t) {
    if (t->owns_memory) { free(t->data); free(t->scales); }
    memset(t, 0, sizeof *t);
}

static int qt_qmax(QtFormat f) { return f == QT_INT8_ROW ? 127 : f == QT_INT2_ROW ? 1 : 7; }

void qt_quantize_row(QtFormat f, int64_t group, const float *w, int64_t cols, uint8_t *codes, float *scales) {
    if (f == QT_F32) { memcpy(codes, w, (size_t)cols * 4); return; }
    if (f != QT_INT4_GROUP) group = cols;
    const int qmax = qt_qmax(f), qmin = -qmax - 1;
    const int bits = qt_format_bits(f);
    memset(codes, 0, (size_t)qt_row_bytes(f, cols));
    if (bits < 8) {   /* padding codes hold q = 0 */
        uint8_t pad = bits == 4 ? 0x88 : 0xAA;
        memset(codes, pad, (size_t)qt_row_bytes(f, cols));
    }
    for (int64_t g0 = 0, gi = 0; g0 < cols; g0 += group, gi++) {
        int64_t g1 = g0 + group < cols ? g0 + group : cols;
        float absmax = 0.0f;
        for (int64_t i = g0; i < g1; i++) { float a = fabsf(w[i]); if (a > absmax) absmax = a; }
        float s = absmax / (float)qmax;
        if (!(s >= 1e-8f)) s = 1e-8f;
        scales[gi] = s;
        for (int64_t i = g0; i < g1; i++) {
            float r = rintf(w[i] / s);
            int q = r > (float)qmax ? qmax : r < (float)qmin ? qmin : (int)r;
            if (bits == 8) codes[i] = (uint8_t)(int8_t)q;
            else if (bits == 4) {
                uint8_t *b = &codes[i >> 1];
                int sh = (i & 1) * 4;
                *b = (uint8_t)((*b & ~(0xF << sh)) | ((q + 8) << sh));
            } else {
                uint8_t *b = &codes[i >> 2];
                int sh = (i & 3) * 2;
                *b = (uint8_t)((*b & ~(0x3 << sh)) | ((q + 2) << sh));
            }
        }
    }
}

void qt_quantize_rows(QTensor *t, int64_t row0, int64_t nrows, const float *w) {
    int64_t gpr = t->format == QT_F32 ? 0 : qt_groups_per_row(t);
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < nrows; r++)
        qt_quantize_row(t->format, t->group, w + r * t->cols, t->cols,
                        t->data + (row0 + r) * t->row_bytes,
                        t->scales ? t->scales + (row0 + r) * gpr : NULL);
}

/* Integer codes of one row, unpacked to int8. */
static void qt_unpack_codes(const QTensor *t, int64_t row, int8_t *q) {
    const uint8_t *p = t->data + row * t->row_bytes;
    switch (t->format) {
    case QT_INT8_ROW: memcpy(q, p, (size_t)t->cols); break;
    case QT_INT4_ROW: case QT_INT4_GROUP:
        for (int64_t i = 0; i < t->cols; i++) q[i] = (int8_t)(((p[i >> 1] >> ((i & 1) * 4)) & 0xF) - 8);
        break;
    case QT_INT2_ROW:
        for (int64_t i = 0; i < t->cols; i++) q[i] = (int8_t)(((p[i >> 2] >> ((i & 3) * 2)) & 0x3) - 2);
        break;
    case QT_F32: break;
    }
}

void qt_dequant_row(const QTensor *t, int64_t row, float *out) {
    if (t->format == QT_F32) { memcpy(out, t->data + row * t->row_bytes, (size_t)t->cols * 4); return; }
    int8_t q[t->cols];
    qt_unpack_codes(t, row, q);
    const float *s = t->scales + row * qt_groups_per_row(t);
    for (int64_t i = 0; i < t->cols; i++) out[i] = (float)q[i] * s[i / t->group];
}

int qt_infer_format(int64_t rows, int64_t cols, int64_t data_bytes, int64_t n_scales, QtFormat *f, int64_t *group) {
    if (rows <= 0 || cols <= 0) return -1;
    if (data_bytes == rows * cols && n_scales == rows && cols > 1) { *f = QT_INT8_ROW; *group = cols; return 0; }
    if (data_bytes == rows * ((cols + 3) / 4) && n_scales == rows && cols > 2) { *f = QT_INT2_ROW; *group = cols; return 0; }
    if (data_bytes != rows * ((cols + 1) / 2)) return -1;
    if (n_scales == rows) { *f = QT_INT4_ROW; *group = cols; return 0; }
    if (n_scales % rows) return -1;
    int64_t per_row = n_scales / rows;
    /* The count fixes only ceil(cols/g); try the group sizes conversions actually use, 64 first. */
    static const int64_t candidates[] = { 64, 32, 128, 16, 256, 512, 1024 };
    for (size_t k = 0; k < sizeof candidates / sizeof candidates[0]; k++)
        if ((cols + candidates[k] - 1) / candidates[k] == per_row) { *f = QT_INT4_GROUP; *group = candidates[k]; return 0; }
    return -1;
}

/* Float dot with 16 independent lanes combined in a fixed order: vectorizable without
   -ffast-math, and the same result for the same inputs everywhere. */
float qt_dot_f32(const float *a, const float *b, int64_t n) {
    float acc[16] = { 0 };
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++) acc[k] += a[i + k] * b[i + k];
    for (int k = 0; i < n; i++, k++) acc[k] += a[i] * b[i];
    for (int k = 0; k < 8; k++) acc[k] += acc[k + 8];
    for (int k = 0; k < 4; k++) acc[k] += acc[k + 4];
    return (acc[0] + acc[2]) + (acc[1] + acc[3]);
}

/* Symmetric int8 quantization of activations, one scale per `group` inputs. */
static void qt_quantize_activation(const float *x, int64_t n, int64_t group, int8_t *q, float *scales) {
    for (int64_t g0 = 0, gi = 0; g0 < n; g0 += group, gi++) {
        int64_t g1 = g0 + group < n ? g0 + group : n;
        float absmax = 0.0f;
        for (int64_t i = g0; i < g1; i++) { float a = fabsf(x[i]); if (a > absmax) absmax = a; }
        float s = absmax / 127.0f;
        if (!(s >= 1e-8f)) s = 1e-8f;
        scales[gi] = s;
        for (int64_t i = g0; i < g1; i++) {
            float r = rintf(x[i] / s);
            q[i] = (int8_t)(r > 127.f ? 127 : r < -127.f ? -127 : (int)r);
        }
    }
}

/* Scalar reference of the integer path: exact int32 sums per group, combined in group order. */
static float qt_dot_int_row(const QTensor *w, int64_t row, const int8_t *xq, const float *xs, int8_t *wq) {
    qt_unpack_codes(w, row, wq);
    const float *ws = w->scales + row * qt_groups_per_row(w);
    float acc = 0.0f;
    for (int64_t g0 = 0, gi = 0; g0 < w->cols; g0 += w->group, gi++) {
        int64_t g1 = g0 + w->group < w->cols ? g0 + w->group : w->cols;
        int32_t isum = 0;
        for (int64_t i = g0; i < g1; i++) isum += (int32_t)wq[i] * (int32_t)xq[i];
        acc += ws[gi] * (xs[gi] * (float)isum);
    }
    return acc;
}

void qt_matmul(const QTensor *w, const float *x, float *y, int S, int idot) {
    const int64_t R = w->rows, C = w->cols;
    if (w->format == QT_F32 || !idot) {
        #pragma omp parallel
        {
            float *rowbuf = w->format == QT_F32 ? NULL : malloc((size_t)C * sizeof(float));
            #pragma omp for schedule(static)
            for (int64_t r = 0; r < R; r++) {
                const float *wr;
                if (w->format == QT_F32) wr = (const float *)(w->data + r * w->row_bytes);
                else { qt_dequant_row(w, r, rowbuf); wr = rowbuf; }
                for (int s = 0; s < S; s++) y[(int64_t)s * R + r] = qt_dot_f32(wr, x + (int64_t)s * C, C);
            }
            free(rowbuf);
        }
        return;
    }
    const int64_t G = qt_groups_per_row(w);
    int8_t *xq = malloc((size_t)(S * C));
    float *xs = malloc((size_t)(S * G) * sizeof(float));
    for (int s = 0; s < S; s++) qt_quantize_activation(x + (int64_t)s * C, C, w->group, xq + (int64_t)s * C, xs + (int64_t)s * G);
    #pragma omp parallel
    {
        int8_t *wq = malloc((size_t)C);
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < R; r++)
            for (int s = 0; s < S; s++)
                y[(int64_t)s * R + r] = qt_dot_int_row(w, r, xq + (int64_t)s * C, xs + (int64_t)s * G, wq);
        free(wq);
    }
    free(xq); free(xs);
}

#endif /* QUANT_IMPLEMENTATION */

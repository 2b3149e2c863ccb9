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
     QTensor qt_view(QtFormat f, int64_t group, int64_t rows, int64_t cols, uint8_t *data, float *scales);
                                   a tensor over memory someone else owns (qt_free releases nothing)
     int     qt_alloc(QTensor *t, QtFormat f, int64_t group, int64_t rows, int64_t cols);
     void    qt_quantize_rows(QTensor *t, int64_t row0, int64_t nrows, const float *w);
     void    qt_quantize_row(QtFormat f, int64_t group, const float *w, int64_t cols,
                             uint8_t *codes, float *scales);
     void    qt_dequant_row(const QTensor *t, int64_t row, float *out);
     void    qt_dequant_rows(const QTensor *t, int64_t row0, int64_t n, float *out);   out[n][cols]
     int     qt_infer_format(int64_t rows, int64_t cols, int64_t data_bytes, int64_t n_scales,
                             QtFormat *f, int64_t *group);
     void    qt_matmul(const QTensor *w, const float *x, float *y, int S, int idot);
     void    qt_matmul_with(const QTensor *w, const float *x, float *y, int S, int idot, QtKernel k);
     void    qt_matmul_multi(const QTensor *const *w, int n, const float *x, float *const *y, int S, int idot);
                                   several weights against the same x (gate and up): one quantization
     float   qt_dot_f32(const float *a, const float *b, int64_t n);      16 lanes, fixed tree
     void    qt_dot_f32_block(const float *const *a, int na, const float *const *b, int nb,
                              int64_t n, float *out);                  up to 4 x 4 of them at once
     void    qt_free(QTensor *t);

     Kernel choice (integer path only; the float path is the same code everywhere):
     int      qt_kernel_parse(const char *name, QtKernel *k);
                  "auto|scalar|avx2|avxvnni|vnni|neon|dotprod|i8mm"; -1 if unknown
     int      qt_kernel_supported(QtKernel k);                  1 if this CPU can run it
     int      qt_set_kernel(QtKernel k);     process-wide choice; -1 (and no change) if unsupported
     QtKernel qt_get_kernel(void);           the kernel qt_matmul uses (never QT_KERNEL_AUTO)
     const char *qt_kernel_name(QtKernel k);
     void     qt_set_threads(int n);         0 = omp_get_max_threads()
     void     qt_set_gemm_min_rows(int s);   smallest S for the GEMM kernels (0 = measured default)

     Kernels: scalar (the reference); x86: avx2 (vpmaddubsw), avxvnni (VEX vpdpbusd on 256 bits:
     Alder Lake and later, Zen 5) and vnni (AVX-512 VNNI vpdpbusd on 512 bits); aarch64: neon
     (base ARMv8-A SIMD), dotprod (sdot) and i8mm (smmla). auto picks the last one this CPU has
     in its architecture's order (x86: cpuid; aarch64 Linux: getauxval(AT_HWCAP, AT_HWCAP2)).

   qt_matmul computes y[s*rows + r] = Σ_i W[r][i]·x[s*cols + i] for s < S, with the kernel from
   qt_set_kernel (default: the best this CPU supports). qt_matmul_with takes the kernel per call
   (QT_KERNEL_AUTO = the process-wide one); an unsupported request falls back to the best supported
   kernel below it. Weights stay in the canonical row-major packing of the container (measured: one
   sequential stream per thread plus prefetch: the int4 expert FFN at 0.93-0.97 of a plain read
   with 2 threads on a quiet machine, so no load-time relayout; see bench/README.md).

   Determinism: every output element is computed by one thread with one fixed reduction order, so a
   row's result never depends on S, on the thread count, or on the kernel. idot = 0: exact float
   path (dequantized weight × f32 activation, qt_dot_f32's 16-lane order). idot = 1: activations
   quantized to int8 (absmax/127 per row, per group for grouped weights; codes in [-127, 127]),
   exact int32 dot products per group, combined in a fixed order (qt_dot_int_row, the scalar
   reference, is the spec; every SIMD kernel, row or GEMM, equals it bit for bit):
       p[g] = ws[g] * (xs[g] * (float)isum[g])
       lane[k] = Σ p[g] over g ≡ k (mod 16), in increasing g          (16 lanes, start at +0)
       y = qt_lanes_sum(lane): the same 16→1 tree as qt_dot_f32
   For the per-row formats (one group) this is y = 0.0f + p[0]. Sixteen lanes instead of one
   running sum let the SIMD kernels add 16 groups with one vector add (a single chain of ~100
   dependent float adds per row was the bottleneck of the grouped kernel). f32 tensors always take
   the float path. An int32 group sum must not overflow: cols ≤ 130000 for int8 weights (all
   GLM-5.2 shapes are far below).

   Batches (S >= 4; on AVX-512 S >= 5 for the per-row formats; int8-row, int4-row and int4-group
   with groups of a multiple of 8 inputs): the GEMM kernels. A row kernel reads a weight row once
   per call but decodes it again for every activation row and ends each dot product with a
   horizontal sum; the GEMM path repacks a block of weight rows once into per-thread scratch (one
   vector then holds the same few inputs of 8 or 16 rows, so each int32 lane is one output's exact
   group sum; the 256-bit kernels store int4 as nibble planes, the 512-bit one as it is and splits
   the nibbles per tile, which costs less than the repack's extra stores) and applies it to a tile
   of activation rows held in registers. The group epilogue and the 16 float lanes of the spec then
   run vectorized over rows, in the same order: same result bit for bit.

   Threads: one OpenMP parallel region per call (the engine's team). Each thread streams its own
   contiguous range of rows and steals chunks (~64 KB of weights) from the others' ranges when it
   runs out, so a thread descheduled by another process does not hold up the rest of the work;
   after a call that still waited > 2 ms for such a thread, calls run single-threaded for a while.
   Thread count: qt_set_threads(n), default omp_get_max_threads() (OMP_NUM_THREADS). Calls from
   several threads at once are safe (per-thread scratch); a call from inside a parallel region
   runs on its caller's thread alone.

   Define QUANT_IMPLEMENTATION in exactly one translation unit before including. */
#if !defined(QT_YMM_PASS) && !defined(QT_NEON_PASS)   /* the file's own later inclusions: see
                                                         "256-bit kernels" and "NEON kernels" */
#ifndef QUANT_H
#define QUANT_H

#include <stddef.h>
#include <stdint.h>

typedef enum { QT_F32 = 0, QT_INT8_ROW, QT_INT4_ROW, QT_INT4_GROUP, QT_INT2_ROW } QtFormat;
/* in order of preference: qt_kernel_resolve falls back to the next one below */
/* within each architecture's run (x86: AVX2 .. VNNI; aarch64: NEON .. I8MM); the first of a run
   falls back to SCALAR */
typedef enum { QT_KERNEL_AUTO = 0, QT_KERNEL_SCALAR,
               QT_KERNEL_AVX2, QT_KERNEL_AVXVNNI, QT_KERNEL_VNNI,
               QT_KERNEL_NEON, QT_KERNEL_DOTPROD, QT_KERNEL_I8MM } QtKernel;

typedef struct {
    QtFormat format;
    int64_t rows, cols;
    int64_t group;       /* inputs per scale: cols for the per-row formats */
    int64_t row_bytes;   /* bytes of one packed row (cols*4 for f32) */
    uint8_t *data;       /* rows * row_bytes */
    float *scales;       /* rows * ceil(cols/group); NULL for f32 */
    int owns_memory;     /* qt_free releases data (qt_alloc puts the scales in the same block) */
} QTensor;

const char *qt_format_name(QtFormat f);
int qt_format_bits(QtFormat f);
int64_t qt_row_bytes(QtFormat f, int64_t cols);
static inline int64_t qt_groups_per_row(const QTensor *t) {
    return (t->cols + t->group - 1) / t->group;
}
QTensor qt_view(QtFormat f, int64_t group, int64_t rows, int64_t cols, uint8_t *data,
                float *scales);
int qt_alloc(QTensor *t, QtFormat f, int64_t group, int64_t rows, int64_t cols);
size_t qt_alloc_bytes(const QTensor *t);   /* one block: codes, then scales */
void qt_free(QTensor *t);
void qt_quantize_row(QtFormat f, int64_t group, const float *w, int64_t cols, uint8_t *codes,
                     float *scales);
void qt_quantize_rows(QTensor *t, int64_t row0, int64_t nrows, const float *w);
void qt_dequant_row(const QTensor *t, int64_t row, float *out);
void qt_dequant_rows(const QTensor *t, int64_t row0, int64_t n, float *out);
int qt_infer_format(int64_t rows, int64_t cols, int64_t data_bytes, int64_t n_scales, QtFormat *f,
                    int64_t *group);
void qt_matmul(const QTensor *w, const float *x, float *y, int S, int idot);
void qt_matmul_with(const QTensor *w, const float *x, float *y, int S, int idot, QtKernel k);
/* y[k] = w[k]·x for k < n: weights that read the same activations (gate and up). Where all n
   share format, group and inputs (and n ≤ QT_MULTI_MAX, idot = 1) the activations are quantized
   once and every weight's rows are one parallel region; otherwise one qt_matmul each. Results
   equal qt_matmul's bit for bit. */
#define QT_MULTI_MAX 4
void qt_matmul_multi(const QTensor *const *w, int n, const float *x, float *const *y, int S,
                     int idot);
float qt_dot_f32(const float *a, const float *b, int64_t n);
/* out[x·nb + y] = qt_dot_f32(a[x], b[y], n) bit for bit, for x < na ≤ 4 and y < nb ≤ 4: the 16
   lanes of all these dot products stay in registers, so each row of a and b is read once for all
   of them (attention: 4 heads × 4 keys). */
void qt_dot_f32_block(const float *const *a, int na, const float *const *b, int nb, int64_t n,
                      float *out);

const char *qt_kernel_name(QtKernel k);
int qt_kernel_parse(const char *name, QtKernel *k);
int qt_kernel_supported(QtKernel k);
int qt_set_kernel(QtKernel k);
QtKernel qt_get_kernel(void);
/* Bytes the integer kernels prefetch (into L2) ahead of what they read (default
   QT_PREFETCH_DEFAULT; glm.c shortens it for decode steps on AVX2, benchmarks scan it). Process-
   wide, set between matmuls; results never depend on it. */
#define QT_PREFETCH_DEFAULT 4096
void qt_set_prefetch(int bytes);
/* Threads for qt_matmul (0 = omp_get_max_threads(), i.e. OMP_NUM_THREADS). */
void qt_set_threads(int n);
/* Benchmark switches: 0 = plain static split of the rows, without work stealing; 0 = no stall
   guard (by default a matmul whose threads waited > 2 ms for a descheduled thread makes the
   next ones run on the calling thread alone for 10 .. 100 ms; bench/README.md). */
void qt_set_stealing(int on);
void qt_set_stall_guard(int on);
/* Smallest batch S that takes the GEMM kernels (0 = the default per kernel and format, 3 to 5:
   qt_gemm_min_rows; 1 = always). Results never depend on it. */
void qt_set_gemm_min_rows(int s);

#endif /* QUANT_H */

#ifdef QUANT_IMPLEMENTATION
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define QT_X86 1
#include <immintrin.h>
/* SIMD kernels carry their own target so that a portable build (-march=x86-64-v3 or lower) still
   contains them; the run-time check picks one the CPU has. */
#define QT_AVX2 __attribute__((target("avx2")))
#define QT_AVXVNNI __attribute__((target("avx2,avxvnni")))
#define QT_VNNI __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512vnni")))
#include <cpuid.h>
/* Prefetch into L2, not L1: on 2-vCPU Zen VMs prefetcht0 at any distance cut the int4 row kernel
   to ~0.55 of a plain read, prefetcht1 to ~0.95. How far ahead: QT_PREFETCH_DEFAULT
   (bench/README.md). */
#ifndef QT_PREFETCH_HINT
#define QT_PREFETCH_HINT _MM_HINT_T1
#endif
#endif
#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define QT_ARM 1
#include <arm_neon.h>
#ifdef __linux__
#include <sys/auxv.h>
#endif
/* The dotprod and i8mm kernels carry their own target, so that a build for plain ARMv8-A still
   contains them (the run-time check picks one the CPU has). gcc's arm_neon.h declares vdotq_s32
   for armv8.2-a+dotprod: a "+dotprod" added to armv8-a is not enough to inline it. A build whose
   -march already has the extension needs no attribute (and must not lower its arch). */
#ifdef __clang__
#define QT_DOTPROD_TARGET __attribute__((target("dotprod")))
#define QT_I8MM_TARGET __attribute__((target("dotprod,i8mm")))
#else
#if defined(__ARM_FEATURE_DOTPROD)
#define QT_DOTPROD_TARGET
#else
#define QT_DOTPROD_TARGET __attribute__((target("arch=armv8.2-a+dotprod")))
#endif
#if defined(__ARM_FEATURE_MATMUL_INT8)
#define QT_I8MM_TARGET
#elif defined(__ARM_FEATURE_DOTPROD)
#define QT_I8MM_TARGET __attribute__((target("+i8mm")))
#else
#define QT_I8MM_TARGET __attribute__((target("arch=armv8.2-a+dotprod+i8mm")))
#endif
#endif
#endif
#define QT_INLINE static inline __attribute__((always_inline))
/* Full unrolling of the tile loops over registers: without it gcc 12 kept the tile's accumulators
   in a stack array at each group end (16 spills and reloads per group; 780 → 865 GOP/s). */
#define QT_UNROLL _Pragma("GCC unroll 16")

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

QTensor qt_view(QtFormat f, int64_t group, int64_t rows, int64_t cols, uint8_t *data,
                float *scales) {
    QTensor t;
    memset(&t, 0, sizeof t);
    t.format = f; t.rows = rows; t.cols = cols;
    t.group = f == QT_INT4_GROUP ? group : cols;
    if (t.group <= 0) t.group = 1;
    t.row_bytes = qt_row_bytes(f, cols);
    t.data = data;
    t.scales = f == QT_F32 ? NULL : scales;
    return t;
}

static size_t qt_alloc_codes_bytes(const QTensor *t) {
    return (size_t)(t->rows * t->row_bytes + 63) / 64 * 64 + 64;
}

int qt_alloc(QTensor *t, QtFormat f, int64_t group, int64_t rows, int64_t cols) {
    *t = qt_view(f, group, rows, cols, NULL, NULL);
    /* 64-byte alignment keeps SIMD loads aligned and rows cache-line friendly. The scales follow
       the codes in the same block (qt_alloc_bytes), so memory advised for huge pages covers both:
       the GEMM reads a block's scales with its codes, and in 4 KiB pages their TLB misses cost the
       group-64 expert FFN ~20 % on 1 thread (kbench). */
    t->data = aligned_alloc(64, qt_alloc_bytes(t));
    if (!t->data) return -1;
    if (f != QT_F32) t->scales = (float *)(t->data + qt_alloc_codes_bytes(t));
    t->owns_memory = 1;
    return 0;
}

/* The bytes qt_alloc takes for t's shape: the codes (64-byte rounded, plus 64 bytes of slack),
   then the scales, rounded up to 64 bytes (aligned_alloc wants a multiple of the alignment). */
size_t qt_alloc_bytes(const QTensor *t) {
    const size_t ns = (size_t)(t->rows * qt_groups_per_row(t));
    return qt_alloc_codes_bytes(t) +
           (t->format == QT_F32 ? 0 : (ns * sizeof(float) + 63) / 64 * 64 + 64);
}

void qt_free(QTensor *t) {
    if (t->owns_memory) free(t->data);   /* the scales live in the same block */
    memset(t, 0, sizeof *t);
}

static int qt_qmax(QtFormat f) { return f == QT_INT8_ROW ? 127 : f == QT_INT2_ROW ? 1 : 7; }

void qt_quantize_row(QtFormat f, int64_t group, const float *w, int64_t cols, uint8_t *codes,
                     float *scales) {
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

/* Integer codes of one row, unpacked to int8 (byte-wise loops: the compiler vectorizes them). */
static void qt_unpack_codes(const QTensor *t, int64_t row, int8_t *q) {
    const uint8_t *p = t->data + row * t->row_bytes;
    const int64_t n = t->cols;
    switch (t->format) {
    case QT_INT8_ROW: memcpy(q, p, (size_t)n); break;
    case QT_INT4_ROW: case QT_INT4_GROUP: {
        int64_t j = 0;
        for (; 2 * j + 1 < n; j++) {
            q[2 * j] = (int8_t)((p[j] & 0xF) - 8);
            q[2 * j + 1] = (int8_t)((p[j] >> 4) - 8);
        }
        if (2 * j < n) q[2 * j] = (int8_t)((p[j] & 0xF) - 8);
        break;
    }
    case QT_INT2_ROW: {
        int64_t j = 0;
        for (; 4 * j + 3 < n; j++)
            for (int k = 0; k < 4; k++) q[4 * j + k] = (int8_t)(((p[j] >> (2 * k)) & 3) - 2);
        for (int k = 0; 4 * j + k < n; k++) q[4 * j + k] = (int8_t)(((p[j] >> (2 * k)) & 3) - 2);
        break;
    }
    case QT_F32: break;
    }
}

/* Dequantize into out[cols] from unpacked codes q; out[i] = (float)q[i] * s[group of i]. */
static void qt_dequant_codes(const QTensor *t, int64_t row, const int8_t *q, float *out) {
    const float *s = t->scales + row * qt_groups_per_row(t);
    for (int64_t g0 = 0, gi = 0; g0 < t->cols; g0 += t->group, gi++) {
        int64_t g1 = g0 + t->group < t->cols ? g0 + t->group : t->cols;
        const float sg = s[gi];
        for (int64_t i = g0; i < g1; i++) out[i] = (float)q[i] * sg;
    }
}

void qt_dequant_rows(const QTensor *t, int64_t row0, int64_t n, float *out) {
    if (t->format == QT_F32) {
        memcpy(out, t->data + row0 * t->row_bytes, (size_t)(n * t->cols) * 4);
        return;
    }
    int8_t *q = malloc((size_t)t->cols);
    if (!q) {
        fprintf(stderr, "quant: out of memory dequantizing a row of %lld values\n",
                (long long)t->cols);
        exit(1);
    }
    for (int64_t r = 0; r < n; r++) {
        qt_unpack_codes(t, row0 + r, q);
        qt_dequant_codes(t, row0 + r, q, out + r * t->cols);
    }
    free(q);
}

void qt_dequant_row(const QTensor *t, int64_t row, float *out) { qt_dequant_rows(t, row, 1, out); }

int qt_infer_format(int64_t rows, int64_t cols, int64_t data_bytes, int64_t n_scales, QtFormat *f,
                    int64_t *group) {
    if (rows <= 0 || cols <= 0) return -1;
    if (data_bytes == rows * cols && n_scales == rows && cols > 1) {
        *f = QT_INT8_ROW;
        *group = cols;
        return 0;
    }
    if (data_bytes == rows * ((cols + 3) / 4) && n_scales == rows && cols > 2) {
        *f = QT_INT2_ROW;
        *group = cols;
        return 0;
    }
    if (data_bytes != rows * ((cols + 1) / 2)) return -1;
    if (n_scales == rows) { *f = QT_INT4_ROW; *group = cols; return 0; }
    if (n_scales % rows) return -1;
    int64_t per_row = n_scales / rows;
    /* The count fixes only ceil(cols/g); try the group sizes conversions actually use, 64 first. */
    static const int64_t candidates[] = { 64, 32, 128, 16, 256, 512, 1024 };
    for (size_t k = 0; k < sizeof candidates / sizeof candidates[0]; k++)
        if ((cols + candidates[k] - 1) / candidates[k] == per_row) {
            *f = QT_INT4_GROUP;
            *group = candidates[k];
            return 0;
        }
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

/* 16 float lanes as one value (GCC/clang vector extension: one zmm with AVX-512, two ymm with AVX2;
   the operations are lane-wise IEEE float, so every build computes the same lanes). */
typedef float qt_v16 __attribute__((vector_size(64)));
typedef float qt_v16u __attribute__((vector_size(64), aligned(4)));   /* unaligned loads */
/* float bits, compare masks */
typedef int32_t qt_v16i __attribute__((vector_size(64)));
typedef int32_t qt_v16iu __attribute__((vector_size(64), aligned(4)));
typedef float qt_v8 __attribute__((vector_size(32)));
typedef float qt_v4 __attribute__((vector_size(16)));

/* Keeps a loaded vector in a register: without it gcc 12 reloaded every operand of the 4 x 4 tile
   from memory for each product (32 loads per 32 float operations; dot tile 80 -> 125 GFLOP/s). */
#if defined(__AVX512F__) && (defined(__GNUC__) || defined(__clang__))
#define QT_IN_REGISTER(v) __asm__("" : "+v"(v))
#else
#define QT_IN_REGISTER(v) (void)0
#endif

/* qt_dot_f32's final tree of 16 lanes: (k, k+8), then (k, k+4), then (0+2) + (1+3). */
static inline __attribute__((always_inline)) float qt_v16_tree(const qt_v16 *p) {
    const qt_v16 v = *p;
    qt_v8 h = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
              __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    qt_v4 q = __builtin_shufflevector(h, h, 0, 1, 2, 3) + __builtin_shufflevector(h, h, 4, 5, 6, 7);
    return (q[0] + q[2]) + (q[1] + q[3]);
}

/* NA × NB dot products (constants after inlining), each in qt_dot_f32's order. */
static inline __attribute__((always_inline)) void qt_dot_tile(const float *const *a,
                                                              const float *const *b, int64_t n,
                                                              float *out, int ostride, const int NA,
                                                              const int NB) {
    qt_v16 c[4][4];
    for (int x = 0; x < NA; x++) for (int y = 0; y < NB; y++) c[x][y] = (qt_v16){ 0 };
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        qt_v16 av[4], bv[4];
        for (int x = 0; x < NA; x++) {
            av[x] = *(const qt_v16u *)(a[x] + i);
            QT_IN_REGISTER(av[x]);
        }
        for (int y = 0; y < NB; y++) {
            bv[y] = *(const qt_v16u *)(b[y] + i);
            QT_IN_REGISTER(bv[y]);
        }
        for (int x = 0; x < NA; x++) for (int y = 0; y < NB; y++) c[x][y] += av[x] * bv[y];
    }
    for (int x = 0; x < NA; x++)
        for (int y = 0; y < NB; y++) {
            qt_v16 t = c[x][y];
            for (int64_t k = i; k < n; k++) t[k - i] += a[x][k] * b[y][k];
            out[x * ostride + y] = qt_v16_tree(&t);
        }
}

/* Tiles of 4 × 4 with AVX-512 (16 zmm accumulators), 2 × 2 otherwise (8 ymm pairs): the same
   results, only the register use differs. */
#ifdef __AVX512F__
#define QT_DOT_TILE 4
#else
#define QT_DOT_TILE 2
#endif

void qt_dot_f32_block(const float *const *a, int na, const float *const *b, int nb, int64_t n,
                      float *out) {
    const float *ap[4], *bp[4];
    float tile[4 * 4];
    for (int x0 = 0; x0 < na; x0 += QT_DOT_TILE)
        for (int y0 = 0; y0 < nb; y0 += QT_DOT_TILE) {
            /* a short tile repeats its first row; the extra results are dropped */
            for (int k = 0; k < QT_DOT_TILE; k++) {
                ap[k] = a[x0 + k < na ? x0 + k : x0];
                bp[k] = b[y0 + k < nb ? y0 + k : y0];
            }
            qt_dot_tile(ap, bp, n, tile, QT_DOT_TILE, QT_DOT_TILE, QT_DOT_TILE);
            for (int x = 0; x < QT_DOT_TILE && x0 + x < na; x++)
                for (int y = 0; y < QT_DOT_TILE && y0 + y < nb; y++)
                    out[(x0 + x) * nb + y0 + y] = tile[x * QT_DOT_TILE + y];
        }
}

/* Symmetric int8 quantization of activations, one scale per `group` inputs. Codes stay in
   [-127, 127]: the SIMD kernels rely on it (the int8 sign trick negates them).
     s = max(absmax / 127, 1e-8)        q = clamp(rint(x / s), -127, 127)        (NaN: q = 0)
   Whole 16-input pieces run as vectors, equal to those scalar formulas bit for bit (gcc had
   vectorized the plain loops only in part: 32 rows of 6,144 inputs, group 64, took 75 us against
   47 now):
   - |a| clears the sign bit, as fabsf; m takes a where a > m, as `a > m ? a : m` (a NaN never
     replaces m); max is exact and the lanes are never NaN, so any order of the lanes gives the
     plain loop's maximum;
   - rint (round half to even) is (v + 1.5·2^23) − 1.5·2^23, exact for |v| < 2^22; here
     |x / s| ≤ 127·(1 + 2^-23) (s ≥ absmax / 127 rounded; s = 1e-8 only when every |x| < 1.27e-6),
     so the clamp never acts on a whole piece; a NaN quotient (a NaN input, or ±inf / inf) gives 0,
     as the scalar conversion does on x86. */
#if defined(__AVX2__) && !defined(__AVX512F__)
/* The AVX2 build's pieces are 8 floats in ymm registers. gcc split the generic 16-float vectors
   into halves that went through the stack (a 32-byte load of two 16-byte stores, which the CPU
   cannot forward) and masked the NaN lanes one at a time with cmovp: the quantizer was ~5 % of a
   warm 255-token prefill on the Zen 3. vmaxps(a, m) is `a > m ? a : m` (a NaN a keeps m), and
   cvtps2dq rounds an integral float exactly; packs saturate, which never acts on [-127, 127]. */
static inline float qt_group_absmax(const float *x, int64_t g0, int64_t g1) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 m0 = _mm256_setzero_ps(), m1 = m0;
    int64_t i = g0;
    for (; i + 16 <= g1; i += 16) {
        m0 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), m0);
        m1 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i + 8), abs_mask), m1);
    }
    m0 = _mm256_max_ps(m0, m1);
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(m0), _mm256_extractf128_ps(m0, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    float absmax = _mm_cvtss_f32(m);
    for (; i < g1; i++) { float a = fabsf(x[i]); absmax = a > absmax ? a : absmax; }
    return absmax;
}

/* whole 16-input pieces of [g0, g1) as codes; returns where the scalar tail starts */
static inline int64_t qt_group_codes(const float *x, int64_t g0, int64_t g1, float s, int8_t *q) {
    const __m256 sv = _mm256_set1_ps(s), magic = _mm256_set1_ps(12582912.0f);
    const __m128i order = _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15);
    int64_t i = g0;
    for (; i + 16 <= g1; i += 16) {
        __m256 lo =
            _mm256_sub_ps(_mm256_add_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), sv), magic), magic);
        __m256 hi = _mm256_sub_ps(
            _mm256_add_ps(_mm256_div_ps(_mm256_loadu_ps(x + i + 8), sv), magic), magic);
        lo = _mm256_and_ps(lo, _mm256_cmp_ps(lo, lo, _CMP_ORD_Q));   /* NaN → 0 */
        hi = _mm256_and_ps(hi, _mm256_cmp_ps(hi, hi, _CMP_ORD_Q));
        /* lo0-3 hi0-3 | lo4-7 hi4-7 */
        const __m256i w = _mm256_packs_epi32(_mm256_cvtps_epi32(lo), _mm256_cvtps_epi32(hi));
        const __m128i b =
            _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
        _mm_storeu_si128((__m128i *)(q + i), _mm_shuffle_epi8(b, order));
    }
    return i;
}
#else
static inline float qt_group_absmax(const float *x, int64_t g0, int64_t g1) {
    typedef int32_t qt_v8i __attribute__((vector_size(32)));
    typedef int32_t qt_v4i __attribute__((vector_size(16)));
    qt_v16 mv = { 0 };
    int64_t i = g0;
    for (; i + 16 <= g1; i += 16) {
        const qt_v16i a = *(const qt_v16iu *)(x + i) & 0x7FFFFFFF;
        const qt_v16i gt = (qt_v16)a > mv;
        mv = (qt_v16)((a & gt) | ((qt_v16i)mv & ~gt));
    }
    float absmax = 0.0f;
    if (i < g1) {   /* a partial piece: its lanes one at a time */
        float m[16];
        memcpy(m, &mv, sizeof m);
        for (int k = 0; i < g1; i++, k++) { float a = fabsf(x[i]); m[k] = a > m[k] ? a : m[k]; }
        for (int k = 0; k < 16; k++) if (m[k] > absmax) absmax = m[k];
    /* halving the lanes: max is exact and the lanes are never NaN, so the order does not matter */
    } else {
        typedef float qt_v8 __attribute__((vector_size(32)));
        typedef float qt_v4 __attribute__((vector_size(16)));
        qt_v8 a8 = __builtin_shufflevector(mv, mv, 0, 1, 2, 3, 4, 5, 6, 7),
              b8 = __builtin_shufflevector(mv, mv, 8, 9, 10, 11, 12, 13, 14, 15);
        const qt_v8i ge8 = a8 >= b8;
        a8 = (qt_v8)(((qt_v8i)a8 & ge8) | ((qt_v8i)b8 & ~ge8));
        qt_v4 a4 = __builtin_shufflevector(a8, a8, 0, 1, 2, 3),
              b4 = __builtin_shufflevector(a8, a8, 4, 5, 6, 7);
        const qt_v4i ge4 = a4 >= b4;
        a4 = (qt_v4)(((qt_v4i)a4 & ge4) | ((qt_v4i)b4 & ~ge4));
        const float m0 = a4[0] > a4[1] ? a4[0] : a4[1], m1 = a4[2] > a4[3] ? a4[2] : a4[3];
        absmax = m0 > m1 ? m0 : m1;
    }
    return absmax;
}

static inline int64_t qt_group_codes(const float *x, int64_t g0, int64_t g1, float s, int8_t *q) {
    typedef int8_t qt_v16b __attribute__((vector_size(16)));
    const qt_v16 round_magic = (qt_v16){ 0 } + 12582912.0f, sv = (qt_v16){ 0 } + s;
    int64_t i = g0;
    for (; i + 16 <= g1; i += 16) {
        qt_v16 r = (*(const qt_v16u *)(x + i) / sv + round_magic) - round_magic;
        r = (qt_v16)((qt_v16i)r & (r == r));
        const qt_v16b b = __builtin_convertvector(__builtin_convertvector(r, qt_v16i), qt_v16b);
        memcpy(q + i, &b, sizeof b);
    }
    return i;
}
#endif

static void qt_quantize_activation(const float *x, int64_t n, int64_t group, int8_t *q,
                                   float *scales) {
    for (int64_t g0 = 0, gi = 0; g0 < n; g0 += group, gi++) {
        const int64_t g1 = g0 + group < n ? g0 + group : n;
        float s = qt_group_absmax(x, g0, g1) / 127.0f;
        if (!(s >= 1e-8f)) s = 1e-8f;
        scales[gi] = s;
        for (int64_t i = qt_group_codes(x, g0, g1, s, q); i < g1; i++) {
            float r = rintf(x[i] / s);
            q[i] = r != r ? 0 : (int8_t)(r > 127.f ? 127 : r < -127.f ? -127 : (int)r);
        }
    }
}

/* The fixed 16 → 1 combination of lane sums (the same tree as qt_dot_f32's). */
static inline float qt_lanes_sum(float *a) {
    for (int k = 0; k < 8; k++) a[k] += a[k + 8];
    for (int k = 0; k < 4; k++) a[k] += a[k + 4];
    return (a[0] + a[2]) + (a[1] + a[3]);
}

/* Scalar reference of the integer path (the spec): exact int32 sums per group, scaled, added
   into lane g mod 16 in group order, lanes combined by qt_lanes_sum. The SIMD kernels below must
   equal it bit for bit. */
static float qt_dot_int_row(const QTensor *w, int64_t row, const int8_t *xq, const float *xs,
                            int8_t *wq) {
    qt_unpack_codes(w, row, wq);
    const float *ws = w->scales + row * qt_groups_per_row(w);
    float lane[16] = { 0 };
    for (int64_t g0 = 0, gi = 0; g0 < w->cols; g0 += w->group, gi++) {
        int64_t g1 = g0 + w->group < w->cols ? g0 + w->group : w->cols;
        int32_t isum = 0;
        for (int64_t i = g0; i < g1; i++) isum += (int32_t)wq[i] * (int32_t)xq[i];
        lane[gi & 15] += ws[gi] * (xs[gi] * (float)isum);
    }
    return qt_lanes_sum(lane);
}

/* ---- Kernel selection ---------------------------------------------------------------------- */

const char *qt_kernel_name(QtKernel k) {
    switch (k) {
    case QT_KERNEL_AUTO: return "auto";
    case QT_KERNEL_SCALAR: return "scalar";
    case QT_KERNEL_AVX2: return "avx2";
    case QT_KERNEL_AVXVNNI: return "avxvnni";
    case QT_KERNEL_VNNI: return "vnni";
    case QT_KERNEL_NEON: return "neon";
    case QT_KERNEL_DOTPROD: return "dotprod";
    case QT_KERNEL_I8MM: return "i8mm";
    }
    return "?";
}

int qt_kernel_parse(const char *name, QtKernel *k) {
    static const QtKernel all[] = { QT_KERNEL_AUTO, QT_KERNEL_SCALAR, QT_KERNEL_AVX2,
                                    QT_KERNEL_AVXVNNI, QT_KERNEL_VNNI, QT_KERNEL_NEON,
                                    QT_KERNEL_DOTPROD, QT_KERNEL_I8MM };
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(name, qt_kernel_name(all[i]))) { *k = all[i]; return 0; }
    return -1;
}

int qt_kernel_supported(QtKernel k) {
    switch (k) {
    case QT_KERNEL_AUTO: case QT_KERNEL_SCALAR: return 1;
#ifdef QT_X86
    case QT_KERNEL_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") ? 1 : 0;
    /* CPUID leaf 7 subleaf 1, EAX bit 4 (AVX2 implies the OS saves ymm) */
    case QT_KERNEL_AVXVNNI: {
        unsigned a = 0, b = 0, c = 0, d = 0;
        __builtin_cpu_init();
        if (!__builtin_cpu_supports("avx2") || !__get_cpuid_count(7, 1, &a, &b, &c, &d)) return 0;
        return (a >> 4) & 1;
    }
    case QT_KERNEL_VNNI:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512vnni") ? 1 : 0;
#else
    case QT_KERNEL_AVX2: case QT_KERNEL_AVXVNNI: case QT_KERNEL_VNNI: return 0;
#endif
#ifdef QT_ARM
    /* Linux reports the extensions in the auxiliary vector; elsewhere only what the build's
       -march promises is used. */
#ifdef __linux__
    /* HWCAP_ASIMD, HWCAP_ASIMDDP, HWCAP2_I8MM */
    case QT_KERNEL_NEON: return (getauxval(AT_HWCAP) >> 1) & 1;
    case QT_KERNEL_DOTPROD:
        return qt_kernel_supported(QT_KERNEL_NEON) && ((getauxval(AT_HWCAP) >> 20) & 1);
    case QT_KERNEL_I8MM:
        return qt_kernel_supported(QT_KERNEL_DOTPROD) && ((getauxval(AT_HWCAP2) >> 13) & 1);
#else
    case QT_KERNEL_NEON: return 1;
#if defined(__ARM_FEATURE_DOTPROD)
    case QT_KERNEL_DOTPROD: return 1;
#else
    case QT_KERNEL_DOTPROD: return 0;
#endif
#if defined(__ARM_FEATURE_DOTPROD) && defined(__ARM_FEATURE_MATMUL_INT8)
    case QT_KERNEL_I8MM: return 1;
#else
    case QT_KERNEL_I8MM: return 0;
#endif
#endif
#else
    case QT_KERNEL_NEON: case QT_KERNEL_DOTPROD: case QT_KERNEL_I8MM: return 0;
#endif
    }
    return 0;
}

/* The best supported kernel not above k in its architecture's run (AUTO = the best of all). */
static QtKernel qt_kernel_resolve(QtKernel k) {
#ifdef QT_ARM
    if (k == QT_KERNEL_AUTO) k = QT_KERNEL_I8MM;
#else
    if (k == QT_KERNEL_AUTO) k = QT_KERNEL_VNNI;
#endif
    while (k > QT_KERNEL_SCALAR && !qt_kernel_supported(k))
        k = k == QT_KERNEL_AVX2 || k == QT_KERNEL_NEON ? QT_KERNEL_SCALAR : (QtKernel)(k - 1);
    return k;
}

/* The aarch64 kernels (QT_KERNEL_NEON and above) */
static int qt_kernel_is_arm(QtKernel k) { return k >= QT_KERNEL_NEON; }

static QtKernel qt_active_kernel = QT_KERNEL_AUTO;   /* resolved on first use */
static int qt_prefetch_bytes = QT_PREFETCH_DEFAULT;

int qt_set_kernel(QtKernel k) {
    if (!qt_kernel_supported(k)) return -1;
    qt_active_kernel = qt_kernel_resolve(k);
    return 0;
}

QtKernel qt_get_kernel(void) {
    if (qt_active_kernel == QT_KERNEL_AUTO) qt_active_kernel = qt_kernel_resolve(QT_KERNEL_AUTO);
    return qt_active_kernel;
}

void qt_set_prefetch(int bytes) { qt_prefetch_bytes = bytes < 0 ? 0 : bytes; }

/* ---- Quantized activations as the kernels read them ----------------------------------------

   The scalar reference reads the codes in natural order (QT_ACTS_NATURAL). The SIMD row kernels
   read the weights 64 bytes (one "chunk") at a time and split each byte into its 2 or 4 codes with
   shifts and masks, so the activation codes are reordered once per call to match (QT_ACTS_CHUNKS):
   for int4, chunk c covers inputs 128c..128c+127 and stores the even ones then the odd ones; for
   int2, chunk c covers 256 inputs and stores the four planes (input 4j+k in plane k) one after the
   other. Every int32 lane of a chunk's dot product then covers 4 (int8), 8 (int4) or 16 (int2)
   consecutive inputs, so a lane never straddles a group boundary when the group is a multiple of 8.
   The GEMM kernels take the activations as "steps" of 4 codes (QT_ACTS_STEPS), one int32 each,
   broadcast against a repacked weight vector: int8 in natural order (step m = inputs 4m..4m+3);
   int4 per 8 inputs the even then the odd ones (the low and high nibbles of 4 weight bytes).
   Stored step-major, [step][spad] int32 (and the scales and offsets [group][spad]), so that a tile
   of activation rows reads one contiguous run per step through a single pointer.
   The weights are unsigned in the SIMD code (int4 q+8, int2 q+2, int8 in the VNNI GEMM kernels
   q+128); off[g] = bias·Σx over group g removes the bias exactly.
   The NEON GEMM kernels take "K-blocks" of 8 codes in natural order (QT_ACTS_K8: block k = inputs
   8k..8k+7), stored [block][spad][8 codes], so that two activation rows' blocks are one 16-byte
   vector (smmla's operand); their weights are repacked as signed codes, so no offset. */
typedef enum { QT_ACTS_NATURAL, QT_ACTS_CHUNKS, QT_ACTS_STEPS, QT_ACTS_K8 } QtActsLayout;

typedef struct {
    int8_t *raw;        /* S rows of cols codes, natural order (the scalar kernel reads these) */
    int8_t *q;          /* S rows of qstride codes, reordered and zero-padded (SIMD kernels) */
    int64_t qstride;
    float *scale;       /* S rows of gstride activation scales, zero-padded */
    int32_t *off;       /* S rows of gstride bias corrections */
    int64_t gstride;
    QtActsLayout layout;
    int int8_bias;      /* bias of int8 weight codes in the kernel: 0 or 128 */
    int64_t spad;       /* QT_ACTS_STEPS, _K8: q, scale and off are [step, block or group][spad] */
} QtActs;

/* Activation rows s and s+1 (only s when s+1 = s1) as the two-row grouped kernels take them:
   codes, scales and offsets per row. Returns how many rows (1 or 2). */
typedef struct { const int8_t *q[2]; const float *scale[2]; const int32_t *off[2]; } QtRowPair;
static inline int qt_row_pair(const QtActs *a, int s, int s1, QtRowPair *p) {
    const int n = s1 - s >= 2 ? 2 : 1;
    for (int j = 0; j < n; j++) {
        p->q[j] = a->q + (int64_t)(s + j) * a->qstride;
        p->scale[j] = a->scale + (int64_t)(s + j) * a->gstride;
        p->off[j] = a->off + (int64_t)(s + j) * a->gstride;
    }
    return n;
}

static int64_t qt_chunk_inputs(QtFormat f) {
    return f == QT_INT8_ROW ? 64 : f == QT_INT2_ROW ? 256 : 128;
}
static int64_t qt_round_up(int64_t a, int64_t m) { return (a + m - 1) / m * m; }

/* GEMM steps: 4 codes of each of 8 or 16 rows, one int32 lane per row. A step covers 4 inputs
   (int8) or one nibble plane of 4 weight bytes (int4: 2 steps per 8 inputs); a weight "column" is
   4 bytes of every row. Counts are padded to whole 16-column blocks (the repack's unit). */
static int64_t qt_gemm_steps_per_col(QtFormat f) { return f == QT_INT8_ROW ? 1 : 2; }
static int64_t qt_gemm_cols(const QTensor *w) { return (w->row_bytes + 3) / 4; }
static int64_t qt_gemm_cols_padded(const QTensor *w) { return qt_round_up(qt_gemm_cols(w), 16); }

/* Bytes of one prepared activation row in layout l. */
static int64_t qt_acts_stride(const QTensor *w, QtActsLayout l) {
    if (l == QT_ACTS_STEPS) return qt_gemm_cols_padded(w) * qt_gemm_steps_per_col(w->format) * 4;
    if (l == QT_ACTS_K8) return qt_round_up(w->cols, 8);
    if (l == QT_ACTS_CHUNKS)
        return qt_round_up((w->row_bytes + 63) / 64, 16) * qt_chunk_inputs(w->format);
    return 0;
}

/* Per-thread buffers, grown on demand and kept (no malloc per call once the largest shape has
   been seen): one activation row's scales, the prepared activations, the GEMM kernels' scratch
   (repacked weights, transposed scales, float lanes), the float path's dequantized rows. A thread
   that ends (a caller's own thread, or the OpenMP team that belonged to it) frees its buffers
   through a C11 thread-specific storage destructor, which the first allocation of each thread
   arms. */
enum { QT_BUF_SCALES, QT_BUF_ACTS, QT_BUF_GEMM, QT_BUF_ROWS, QT_NBUFS };
static _Thread_local struct { void *p; size_t size; } qt_bufs[QT_NBUFS];
static tss_t qt_bufs_key;
static once_flag qt_bufs_once = ONCE_FLAG_INIT;

static void qt_bufs_free(void *unused) {
    (void)unused;
    for (int i = 0; i < QT_NBUFS; i++) {
        free(qt_bufs[i].p);
        qt_bufs[i].p = NULL;
        qt_bufs[i].size = 0;
    }
}

static void qt_bufs_key_create(void) {
    if (tss_create(&qt_bufs_key, qt_bufs_free) != thrd_success) {
        fprintf(stderr, "quant: cannot create thread-specific storage\n");
        exit(1);
    }
}

/* This thread's buffer `which`, at least n bytes, 64-byte aligned (contents not kept on growth). */
static void *qt_buf(int which, size_t n, const char *what) {
    if (n > qt_bufs[which].size) {
        call_once(&qt_bufs_once, qt_bufs_key_create);
        if (!tss_get(qt_bufs_key)) tss_set(qt_bufs_key, (void *)1);   /* arms the destructor */
        free(qt_bufs[which].p);
        qt_bufs[which].size = (n + 4095) / 4096 * 4096;
        qt_bufs[which].p = aligned_alloc(64, qt_bufs[which].size);
        if (!qt_bufs[which].p) {
            fprintf(stderr, "quant: out of memory allocating %zu bytes of %s\n", n, what);
            exit(1);
        }
    }
    return qt_bufs[which].p;
}

/* QT_ACTS_STEPS, QT_ACTS_K8: row s's scales and offsets into the group-major arrays (the codes
   follow: per 8 rows in qt_avx2_steps; qt_k8_row). */
static void qt_prepare_steps_row(const QTensor *w, const QtActs *a, int s, const int8_t *raw,
                                 const float *xs) {
    const int64_t C = w->cols, G = qt_groups_per_row(w), sp = a->spad;
    const int bias = w->format == QT_INT8_ROW ? a->int8_bias : 8;
    if (a->layout == QT_ACTS_K8) {   /* signed weight codes: no offset */
        for (int64_t gi = 0; gi < G; gi++) {
            a->off[gi * sp + s] = 0;
            a->scale[gi * sp + s] = xs[gi];
        }
        return;
    }
    for (int64_t g0 = 0, gi = 0; gi < G; g0 += w->group, gi++) {
        int64_t g1 = g0 + w->group < C ? g0 + w->group : C;
        int32_t sum = 0;
        for (int64_t i = g0; i < g1; i++) sum += raw[i];
        a->off[gi * sp + s] = bias * sum;
        a->scale[gi * sp + s] = xs[gi];
    }
}

/* QT_ACTS_K8 codes of row s (raw: its natural-order codes, NULL for a padding row of zeros). */
static void qt_k8_row(const QTensor *w, const QtActs *a, int s, const int8_t *raw) {
    const int64_t C = w->cols, nkb = a->qstride / 8, sp = a->spad;
    for (int64_t kb = 0; kb < nkb; kb++) {
        int8_t *d = a->q + (kb * sp + s) * 8;
        if (raw && 8 * kb + 8 <= C) memcpy(d, raw + 8 * kb, 8);
        else {
            memset(d, 0, 8);
            if (raw) memcpy(d, raw + 8 * kb, (size_t)(C - 8 * kb));
        }
    }
}

static void qt_prepare_acts_row(const QTensor *w, const float *x, const QtActs *a, int s) {
    const int64_t C = w->cols, G = qt_groups_per_row(w);
    int8_t *raw = a->raw + (int64_t)s * C;
    if (a->layout == QT_ACTS_STEPS || a->layout == QT_ACTS_K8) {
        float *xs = qt_buf(QT_BUF_SCALES, (size_t)G * sizeof(float), "activation scales");
        qt_quantize_activation(x + (int64_t)s * C, C, w->group, raw, xs);
        qt_prepare_steps_row(w, a, s, raw, xs);
        if (a->layout == QT_ACTS_K8) qt_k8_row(w, a, s, raw);
        return;
    }
    float *xs = a->scale + (int64_t)s * a->gstride;
    memset(xs, 0, (size_t)a->gstride * sizeof(float));
    qt_quantize_activation(x + (int64_t)s * C, C, w->group, raw, xs);
    if (a->layout == QT_ACTS_NATURAL) return;
    int8_t *q = a->q + (int64_t)s * a->qstride;
    int32_t *off = a->off + (int64_t)s * a->gstride;
    const int64_t Q = a->qstride;
    const int i4 = w->format == QT_INT4_ROW || w->format == QT_INT4_GROUP;
    if (w->format == QT_INT8_ROW) {
        memcpy(q, raw, (size_t)C);
        memset(q + C, 0, (size_t)(Q - C));
    } else if (i4) {
        int64_t c = 0;
        for (; c + 128 <= C; c += 128)
            for (int64_t j = 0; j < 64; j++) {
                q[c + j] = raw[c + 2 * j];
                q[c + 64 + j] = raw[c + 2 * j + 1];
            }
        for (; c < Q; c += 128)
            for (int64_t j = 0; j < 64; j++) {
                int64_t i = c + 2 * j;
                q[c + j] = i < C ? raw[i] : 0;
                q[c + 64 + j] = i + 1 < C ? raw[i + 1] : 0;
            }
    } else if (w->format == QT_INT2_ROW) {
        int64_t c = 0;
        for (; c + 256 <= C; c += 256)
            for (int64_t j = 0; j < 64; j++)
                for (int k = 0; k < 4; k++) q[c + 64 * k + j] = raw[c + 4 * j + k];
        for (; c < Q; c += 256)
            for (int k = 0; k < 4; k++)
                for (int64_t j = 0; j < 64; j++) {
                    int64_t i = c + 4 * j + k;
                    q[c + 64 * k + j] = i < C ? raw[i] : 0;
                }
    }
    const int bias = i4 ? 8 : w->format == QT_INT2_ROW ? 2 : a->int8_bias;
    memset(off, 0, (size_t)a->gstride * sizeof(int32_t));
    for (int64_t g0 = 0, gi = 0; gi < G; g0 += w->group, gi++) {
        int64_t g1 = g0 + w->group < C ? g0 + w->group : C;
        int32_t sum = 0;
        for (int64_t i = g0; i < g1; i++) sum += raw[i];
        off[gi] = bias * sum;
    }
}

/* Whether the SIMD row kernels of k handle this tensor's grouping: groups a multiple of 8 inputs,
   and for x86 either a power of two up to 128 inputs (several groups per 64-byte chunk) or a
   multiple of 128. */
static int qt_simd_shape_ok(const QTensor *w, QtKernel k) {
    if (w->format != QT_INT4_GROUP || qt_groups_per_row(w) == 1) return 1;
    int64_t g = w->group;
    if (g % 8) return 0;
    if (qt_kernel_is_arm(k)) return 1;
    int64_t lanes = g / 8;
    return lanes == 1 || lanes == 2 || lanes == 4 || lanes == 8 || lanes % 16 == 0;
}

/* ---- Row kernels: rows [r0, r1) of w against all S activation rows ------------------------ */

/* y[s][r] for activation rows [s0, s1) and weight rows [r0, r1) */
typedef void (*QtRowsFn)(const QTensor *w, const QtActs *a, int s0, int s1, int64_t r0, int64_t r1,
                         float *y);

static void qt_rows_scalar(const QTensor *w, const QtActs *a, int s0, int s1, int64_t r0,
                           int64_t r1, float *y) {
    int8_t *wq = malloc((size_t)w->cols);
    if (!wq) {
        fprintf(stderr, "quant: out of memory unpacking a row of %lld values\n",
                (long long)w->cols);
        exit(1);
    }
    for (int64_t r = r0; r < r1; r++)
        for (int s = s0; s < s1; s++)
            y[(int64_t)s * w->rows + r] = qt_dot_int_row(w, r, a->raw + (int64_t)s * w->cols,
                                                         a->scale + (int64_t)s * a->gstride, wq);
    free(wq);
}

#ifdef QT_X86

/* ---------------- AVX-512 VNNI: vpdpbusd (u8 × s8, 4 products summed into each int32 lane) --- */

QT_VNNI QT_INLINE __m512i qt_vnni_i8(__m512i acc, __m512i wb, const int8_t *xp) {
    /* vpdpbusd wants one unsigned operand: |w| is 0..128 as u8, and x takes w's sign. x is never
       -128 (the activation quantizer clamps to ±127), so negating it cannot overflow. */
    __m512i x = _mm512_load_si512((const void *)xp);
    __mmask64 neg = _mm512_movepi8_mask(wb);
    x = _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x);
    return _mm512_dpbusd_epi32(acc, _mm512_abs_epi8(wb), x);
}

QT_VNNI QT_INLINE __m512i qt_vnni_i4(__m512i acc, __m512i wb, const int8_t *xp) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    acc = _mm512_dpbusd_epi32(acc, _mm512_and_si512(wb, m4), _mm512_load_si512((const void *)xp));
    return _mm512_dpbusd_epi32(acc, _mm512_and_si512(_mm512_srli_epi16(wb, 4), m4),
                               _mm512_load_si512((const void *)(xp + 64)));
}

QT_VNNI QT_INLINE __m512i qt_vnni_i2(__m512i acc, __m512i wb, const int8_t *xp) {
    const __m512i m2 = _mm512_set1_epi8(0x03);
    acc = _mm512_dpbusd_epi32(acc, _mm512_and_si512(wb, m2), _mm512_load_si512((const void *)xp));
    acc = _mm512_dpbusd_epi32(acc, _mm512_and_si512(_mm512_srli_epi16(wb, 2), m2),
                              _mm512_load_si512((const void *)(xp + 64)));
    acc = _mm512_dpbusd_epi32(acc, _mm512_and_si512(_mm512_srli_epi16(wb, 4), m2),
                              _mm512_load_si512((const void *)(xp + 128)));
    return _mm512_dpbusd_epi32(acc, _mm512_and_si512(_mm512_srli_epi16(wb, 6), m2),
                               _mm512_load_si512((const void *)(xp + 192)));
}

QT_VNNI QT_INLINE __m512i qt_vnni_chunk(QtFormat f, __m512i acc, __m512i wb, const int8_t *xp) {
    return f == QT_INT8_ROW   ? qt_vnni_i8(acc, wb, xp)
           : f == QT_INT2_ROW ? qt_vnni_i2(acc, wb, xp)
                              : qt_vnni_i4(acc, wb, xp);
}

/* Exact int32 dot of a whole row (one group). Four accumulators hide vpdpbusd's latency; integer
   sums do not care about the order. */
QT_VNNI QT_INLINE int32_t qt_vnni_row_isum(QtFormat f, const uint8_t *wr, int64_t nch,
                                           __mmask64 tail, const int8_t *xq, int pf) {
    const int64_t xc = qt_chunk_inputs(f);
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    int64_t c = 0;
    for (; c + 4 < nch; c += 4) {
        _mm_prefetch((const char *)(wr + 64 * c + pf), QT_PREFETCH_HINT);
        _mm_prefetch((const char *)(wr + 64 * c + pf + 64), QT_PREFETCH_HINT);
        _mm_prefetch((const char *)(wr + 64 * c + pf + 128), QT_PREFETCH_HINT);
        _mm_prefetch((const char *)(wr + 64 * c + pf + 192), QT_PREFETCH_HINT);
        a0 = qt_vnni_chunk(f, a0, _mm512_loadu_si512((const void *)(wr + 64 * c)), xq + xc * c);
        a1 = qt_vnni_chunk(f, a1, _mm512_loadu_si512((const void *)(wr + 64 * c + 64)),
                           xq + xc * (c + 1));
        a2 = qt_vnni_chunk(f, a2, _mm512_loadu_si512((const void *)(wr + 64 * c + 128)),
                           xq + xc * (c + 2));
        a3 = qt_vnni_chunk(f, a3, _mm512_loadu_si512((const void *)(wr + 64 * c + 192)),
                           xq + xc * (c + 3));
    }
    for (; c + 1 < nch; c++)
        a0 = qt_vnni_chunk(f, a0, _mm512_loadu_si512((const void *)(wr + 64 * c)), xq + xc * c);
    a1 = qt_vnni_chunk(f, a1, _mm512_maskz_loadu_epi8(tail, wr + 64 * c), xq + xc * c);
    return _mm512_reduce_add_epi32(
        _mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)));
}

/* Integer sums of one row against ns (2..4) activation rows: each weight chunk is loaded and
   unpacked once and serves every activation row (two accumulators per row hide the latency). */
QT_VNNI QT_INLINE void qt_vnni_row_isums(QtFormat f, const uint8_t *wr, int64_t nch, __mmask64 tail,
                                         const QtActs *a, int s0, const int ns, int pf,
                                         int32_t *out) {
    const int64_t xc = qt_chunk_inputs(f), qs = a->qstride;
    const int8_t *xq = a->q + (int64_t)s0 * qs;
    __m512i acc[4][2];
    for (int j = 0; j < ns; j++) acc[j][0] = acc[j][1] = _mm512_setzero_si512();
    int64_t c = 0;
    for (; c + 2 < nch; c += 2) {
        _mm_prefetch((const char *)(wr + 64 * c + pf), QT_PREFETCH_HINT);
        _mm_prefetch((const char *)(wr + 64 * c + pf + 64), QT_PREFETCH_HINT);
        __m512i w0 = _mm512_loadu_si512((const void *)(wr + 64 * c)),
                w1 = _mm512_loadu_si512((const void *)(wr + 64 * c + 64));
        for (int j = 0; j < ns; j++) {
            acc[j][0] = qt_vnni_chunk(f, acc[j][0], w0, xq + j * qs + xc * c);
            acc[j][1] = qt_vnni_chunk(f, acc[j][1], w1, xq + j * qs + xc * (c + 1));
        }
    }
    for (; c < nch; c++) {
        __m512i w0 = c + 1 < nch ? _mm512_loadu_si512((const void *)(wr + 64 * c))
                                 : _mm512_maskz_loadu_epi8(tail, wr + 64 * c);
        for (int j = 0; j < ns; j++)
            acc[j][0] = qt_vnni_chunk(f, acc[j][0], w0, xq + j * qs + xc * c);
    }
    for (int j = 0; j < ns; j++)
        out[j] = _mm512_reduce_add_epi32(_mm512_add_epi32(acc[j][0], acc[j][1]));
}

/* Pair sums through int16: packs puts a's and b's lanes 4j..4j+3 side by side in 128-bit lane j,
   madd adds neighbours. 2 instructions instead of 3, and the lane order gets shuffled (undone by
   one permute at the end). Exact while every input lane fits in int16: a chunk lane holds 8
   products u·x with u ≤ 15, |x| ≤ 127, so |lane| ≤ 15240, and one packsum level ≤ 30480. */
QT_VNNI QT_INLINE __m512i qt_vnni_packsum(__m512i a, __m512i b) {
    return _mm512_madd_epi16(_mm512_packs_epi32(a, b), _mm512_set1_epi16(1));
}

/* The 16 group sums, in group order, of `lanes` chunk vectors whose groups span `lanes`
   consecutive int32 lanes (chunk c holds groups 16/lanes·c ...). */
QT_VNNI QT_INLINE __m512i qt_vnni_group_sums(__m512i *v, const int lanes) {
    if (lanes == 1) return v[0];
    if (lanes == 2) {   /* → [g0 g1 g8 g9 | g2 g3 g10 g11 | g4 g5 g12 g13 | g6 g7 g14 g15] */
        __m512i r = qt_vnni_packsum(v[0], v[1]);
        return _mm512_permutexvar_epi32(
            _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15), r);
    }
    if (lanes == 4) {   /* two levels → [g0 g4 g8 g12 | g1 g5 g9 g13 | ...], a 4x4 transpose */
        __m512i r = qt_vnni_packsum(qt_vnni_packsum(v[0], v[1]), qt_vnni_packsum(v[2], v[3]));
        return _mm512_permutexvar_epi32(
            _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
    }
    /* lanes == 8: two levels leave group g of each half at lanes t and t+4 (even g = 2t) or 8+t and
       12+t (odd g = 2t+1); the third level (values up to 60960, past int16) adds them as int32. */
    __m512i a = qt_vnni_packsum(qt_vnni_packsum(v[0], v[1]), qt_vnni_packsum(v[2], v[3]));
    __m512i b = qt_vnni_packsum(qt_vnni_packsum(v[4], v[5]), qt_vnni_packsum(v[6], v[7]));
    const __m512i first =
        _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 16, 24, 17, 25, 18, 26, 19, 27);
    const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(4));
    return _mm512_add_epi32(_mm512_permutex2var_epi32(a, first, b),
                            _mm512_permutex2var_epi32(a, second, b));
}

/* Grouped int4 row with `lanes` (1, 2, 4 or 8) int32 lanes per group against na (1 or 2) activation
   rows: 16 groups come from `lanes` chunks, reduced by a pairsum tree into one vector of 16 group
   sums per activation row, then scaled and added to its 16 lanes in group order, exactly as the
   scalar reference does; out[j] = the result of activation row j. Two rows share the chunk loads,
   the nibble split and the weight scales (a speculative verify pass is 2-5 rows). */
QT_VNNI QT_INLINE void qt_vnni_i4_grouped(const uint8_t *wr, int64_t nch, __mmask64 tail,
                                          const int8_t *const *xq, const float *const *xs,
                                          const int32_t *const *off, const float *ws, int64_t G,
                                          const int lanes, const int na, int pf, float *out) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 lanes_acc[2] = { _mm512_setzero_ps(), _mm512_setzero_ps() };
    for (int64_t g0 = 0; g0 < G; g0 += 16) {
        __m512i v[2][8];
        const int64_t c0 = g0 / 16 * lanes;
        _mm_prefetch((const char *)(wr + 64 * c0 + pf), QT_PREFETCH_HINT);
        if (lanes >= 2) _mm_prefetch((const char *)(wr + 64 * c0 + pf + 64), QT_PREFETCH_HINT);
        if (lanes >= 4) { _mm_prefetch((const char *)(wr + 64 * c0 + pf + 128), QT_PREFETCH_HINT);
                          _mm_prefetch((const char *)(wr + 64 * c0 + pf + 192), QT_PREFETCH_HINT); }
        if (lanes >= 8)
            for (int k = 4; k < 8; k++)
                _mm_prefetch((const char *)(wr + 64 * (c0 + k) + pf), QT_PREFETCH_HINT);
        for (int k = 0; k < lanes; k++) {
            const int64_t c = c0 + k;
            const __m512i wb = c + 1 < nch    ? _mm512_loadu_si512((const void *)(wr + 64 * c))
                               : c + 1 == nch ? _mm512_maskz_loadu_epi8(tail, wr + 64 * c)
                                              : _mm512_setzero_si512();
            const __m512i lo = _mm512_and_si512(wb, m4),
                          hi = _mm512_and_si512(_mm512_srli_epi16(wb, 4), m4);
            for (int j = 0; j < na; j++)
                v[j][k] = _mm512_dpbusd_epi32(
                    _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo,
                                        _mm512_load_si512((const void *)(xq[j] + 128 * c))),
                    hi, _mm512_load_si512((const void *)(xq[j] + 128 * c + 64)));
        }
        const int ng = G - g0 < 16 ? (int)(G - g0) : 16;
        const __mmask16 valid = (__mmask16)((1u << ng) - 1);
        const __m512 wsv = _mm512_maskz_loadu_ps(valid, ws + g0);
        for (int j = 0; j < na; j++) {
            __m512i isum = _mm512_sub_epi32(qt_vnni_group_sums(v[j], lanes),
                                            _mm512_loadu_si512((const void *)(off[j] + g0)));
            __m512 t = _mm512_mul_ps(_mm512_loadu_ps(xs[j] + g0), _mm512_cvtepi32_ps(isum));
            __m512 p = _mm512_mul_ps(wsv, t);
            /* group g0+i → lane i */
            lanes_acc[j] = _mm512_mask_add_ps(lanes_acc[j], valid, lanes_acc[j], p);
        }
    }
    for (int j = 0; j < na; j++) {
        float lane[16];
        _mm512_storeu_ps(lane, lanes_acc[j]);
        out[j] = qt_lanes_sum(lane);
    }
}

/* Grouped int4 row whose groups span whole chunks (group a multiple of 128 inputs). */
QT_VNNI QT_INLINE float qt_vnni_i4_wide_groups(const uint8_t *wr, int64_t nch, __mmask64 tail,
                                               const int8_t *xq, const float *xs,
                                               const int32_t *off, const float *ws, int64_t G,
                                               int64_t chunks_per_group, int pf) {
    float lane[16] = { 0 };
    for (int64_t g = 0; g < G; g++) {
        __m512i v = _mm512_setzero_si512();
        for (int64_t c = g * chunks_per_group; c < (g + 1) * chunks_per_group && c < nch; c++) {
            _mm_prefetch((const char *)(wr + 64 * c + pf), QT_PREFETCH_HINT);
            __m512i wb = c + 1 < nch ? _mm512_loadu_si512((const void *)(wr + 64 * c))
                                     : _mm512_maskz_loadu_epi8(tail, wr + 64 * c);
            v = qt_vnni_i4(v, wb, xq + 128 * c);
        }
        int32_t isum = _mm512_reduce_add_epi32(v) - off[g];
        lane[g & 15] += ws[g] * (xs[g] * (float)isum);
    }
    return qt_lanes_sum(lane);
}

QT_VNNI static void qt_rows_vnni(const QTensor *w, const QtActs *a, int s0, int s1, int64_t r0,
                                 int64_t r1, float *y) {
    const QtFormat f = w->format;
    const int64_t rb = w->row_bytes, nch = (rb + 63) / 64, G = qt_groups_per_row(w);
    const int64_t last = rb - (nch - 1) * 64;
    const __mmask64 tail = last == 64 ? ~(__mmask64)0 : (((__mmask64)1 << last) - 1);
    const int lanes = (int)(w->group / 8);
    const int pf = qt_prefetch_bytes;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *wr = w->data + r * rb;
        const float *ws = w->scales + r * G;
        if (G == 1) {
            /* one group: S = 1 has its own 4-accumulator loop; batches go up to 4 rows at a time */
            for (int s = s0; s < s1;) {
                int32_t isum[4];
                int ns = s1 - s < 4 ? s1 - s : 4;
                switch (ns) {
                case 1:
                    isum[0] =
                        qt_vnni_row_isum(f, wr, nch, tail, a->q + (int64_t)s * a->qstride, pf);
                    break;
                case 2: qt_vnni_row_isums(f, wr, nch, tail, a, s, 2, pf, isum); break;
                case 3: qt_vnni_row_isums(f, wr, nch, tail, a, s, 3, pf, isum); break;
                default: qt_vnni_row_isums(f, wr, nch, tail, a, s, 4, pf, isum); break;
                }
                for (int j = 0; j < ns; j++, s++) {
                    float acc = 0.0f;
                    acc += ws[0] * (a->scale[(int64_t)s * a->gstride] *
                                    (float)(isum[j] - a->off[(int64_t)s * a->gstride]));
                    y[(int64_t)s * w->rows + r] = acc;
                }
            }
            continue;
        }
        /* grouped: two activation rows at a time */
        for (int s = s0; s < s1; s += 2) {
            QtRowPair x;
            const int na = qt_row_pair(a, s, s1, &x);
            float acc[2];
#define QT_GROUPED(L) \
    (na == 2 ? qt_vnni_i4_grouped(wr, nch, tail, x.q, x.scale, x.off, ws, G, L, 2, pf, acc) \
             : qt_vnni_i4_grouped(wr, nch, tail, x.q, x.scale, x.off, ws, G, L, 1, pf, acc))
            switch (lanes) {
            case 1: QT_GROUPED(1); break;
            case 2: QT_GROUPED(2); break;
            case 4: QT_GROUPED(4); break;
            case 8: QT_GROUPED(8); break;
            default:
                for (int j = 0; j < na; j++)
                    acc[j] = qt_vnni_i4_wide_groups(wr, nch, tail, x.q[j], x.scale[j], x.off[j], ws,
                                                    G, lanes / 16, pf);
                break;
            }
#undef QT_GROUPED
            for (int j = 0; j < na; j++) y[(int64_t)(s + j) * w->rows + r] = acc[j];
        }
    }
}

/* ---------------- AVX-512 VNNI GEMM: 16 weight rows per vector ----------------------------------
   Steps, repacking and the order of operations: see "Batches" at the top and qt_prepare_acts_row.
   */

/* vpdpbusd through asm: with the intrinsic, gcc 12 copied every accumulator of the tile loop to a
   new register on each step (16 extra moves per 16 vpdpbusd; measured: 413 → 532 GOP/s). */
QT_VNNI QT_INLINE __m512i qt_dpbusd(__m512i acc, __m512i w, __m512i x) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(x));
    return acc;
}

/* While the tiles of a row block run, the next block's rows stream toward L2, one or two lines
   every `every` steps, so its repack does not wait on DRAM (gate 2048x6144, S = 32, without it:
   445 GOP/s from DRAM, 662 from L3). Two lines per step where a block has more lines
   than its tiles have steps: one AVX-512 tile (S <= 12) over 32 rows has twice as many; with one
   line per step it fetched half the next block, and the expert FFN at S = 8 from the page cache
   ran at 405-453 GOP/s on 2 threads against 496-577 with all of it (two runs of 3 pairs).
   The AVX-512 kernel takes the lines in the order its repack reads them (64-byte column c of each
   row of a repack block, then column c + 1; block by block), not in address order: the repack's
   first columns need every row of the block, and in address order the last rows' lines were the
   last fetched. Zen 5, gate shape 2048 × 6144 at S = 32, 2 threads, weights in DRAM, 30
   interleaved runs: median 1.050 ms in address order, 1.030 in repack order, 1.009 with the
   scales fetched as the repack starts (qt_vnni_gemm_pack); a timing-only build whose repack
   re-reads rows already in L2 ran 8 % faster than the address order, so the repack still waits a
   little. */
typedef struct {
    const char *next, *p;             /* the next block's first row; the next line */
    int64_t row_bytes, cols64, rows;  /* the next block's rows: bytes, 64-byte columns; how many */
    int64_t brows;                    /* rows per repack block */
    int64_t row, col, blk0, blk1;     /* p's row and column, in repack block [blk0, blk1) */
    /* from the block's last row to the next column of its first */
    int64_t back;
    int64_t left, every, wait, lines;
} QtPrefetch;

static inline void qt_prefetch_block(QtPrefetch *pf, int64_t blk0) {
    pf->blk0 = blk0;
    pf->blk1 = blk0 + pf->brows < pf->rows ? blk0 + pf->brows : pf->rows;
    pf->back = 64 - (pf->blk1 - blk0 - 1) * pf->row_bytes;
}

static inline __attribute__((always_inline)) void qt_prefetch_line(QtPrefetch *pf) {
    _mm_prefetch(pf->p, QT_PREFETCH_HINT);
    if (++pf->row < pf->blk1) { pf->p += pf->row_bytes; return; }
    pf->row = pf->blk0;
    if (++pf->col < pf->cols64) { pf->p += pf->back; return; }
    pf->col = 0;
    pf->row = pf->blk1;
    qt_prefetch_block(pf, pf->blk1);
    pf->p = pf->next + pf->row * pf->row_bytes;
}

static inline __attribute__((always_inline)) void qt_prefetch_step(QtPrefetch *pf) {
    if (pf->left > 0 && --pf->wait <= 0) {
        qt_prefetch_line(pf);
        if (pf->lines > 1) qt_prefetch_line(pf);
        pf->left -= pf->lines;
        pf->wait = pf->every;
    }
}

/* The prefetch share of one of `tiles` tiles over the next `rows` rows of w from row `next_row`,
   repacked `brows` rows at a time, spread over the tile's nsteps steps (at most 2 lines per
   step: see above). */
static QtPrefetch qt_prefetch_share(const QTensor *w, int64_t next_row, int64_t rows, int64_t brows,
                                    int tiles, int tile, int64_t nsteps) {
    QtPrefetch pf = { (const char *)w->data + next_row * w->row_bytes,
                      NULL,
                      w->row_bytes,
                      (w->row_bytes + 63) / 64,
                      rows > 0 ? rows : 0,
                      brows,
                      0,
                      0,
                      0,
                      0,
                      0,
                      0,
                      1,
                      0,
                      1 };
    const int64_t lines = pf.rows * pf.cols64, per = (lines + tiles - 1) / tiles,
                  first = tile * per;
    pf.left = lines - first < per ? lines - first : per;
    if (pf.left <= 0) { pf.left = 0; return pf; }
    /* line `first` in repack order: every block before the last has brows rows */
    qt_prefetch_block(&pf, first / (brows * pf.cols64) * brows);
    const int64_t rem = first % (brows * pf.cols64);
    pf.col = rem / (pf.blk1 - pf.blk0);
    pf.row = pf.blk0 + rem % (pf.blk1 - pf.blk0);
    pf.p = pf.next + pf.row * pf.row_bytes + pf.col * 64;
    if (nsteps < 1) nsteps = 1;
    if (pf.left > nsteps) pf.lines = 2;
    pf.every = nsteps * pf.lines / pf.left > 1 ? nsteps * pf.lines / pf.left : 1;
    return pf;
}

/* v[m] = dword m of the 16 rows v[0..15] (row i in lane i): unpacks within 128-bit lanes give
   4x4 blocks, then a 4x4 transpose of the 128-bit lanes. */
QT_VNNI QT_INLINE void qt_vnni_transpose16(__m512i *v) {
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {   /* u[4q + j], lane L: rows 4q..4q+3 of dword 4L + j */
        u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int j = 0; j < 4; j++) {
        __m512i a = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44),
                b = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);
        __m512i c = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44),
                d = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
        v[j] = _mm512_shuffle_i32x4(a, c, 0x88);
        v[4 + j] = _mm512_shuffle_i32x4(a, c, 0xDD);
        v[8 + j] = _mm512_shuffle_i32x4(b, d, 0x88);
        v[12 + j] = _mm512_shuffle_i32x4(b, d, 0xDD);
    }
}

/* Repack weight rows [r0, r0+n) into nb blocks of 16 rows: column c (4 bytes of each row) of block
   b at pk + b·bstride + 64c (unsigned codes: int8 xor 0x80; int4 as stored, both nibbles: the tile
   splits them), the scales at wsT[(b·G + g)·16 + i]. Rows past n are zero. The repack is bound by
   its stores: writing the two nibble planes here took 1.4x as long as this (an L2-resident 32×6144
   block, 3.5 against 2.5 us) and twice the scratch. */
QT_VNNI static void qt_vnni_gemm_pack(const QTensor *w, int64_t r0, int64_t n, int nb,
                                      int64_t bstride, uint8_t *pk, float *wsT) {
    const int64_t rb = w->row_bytes, nch = (rb + 63) / 64, G = qt_groups_per_row(w),
                  last = rb - (nch - 1) * 64;
    const __mmask64 tail = last == 64 ? ~(__mmask64)0 : (((__mmask64)1 << last) - 1);
    const int i8 = w->format == QT_INT8_ROW, pf = qt_prefetch_bytes;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    if (G > 1)   /* the scales are read after the codes: fetch them meanwhile (see QtPrefetch) */
        for (int64_t q = 0; q < n * G * 4; q += 64)
            _mm_prefetch((const char *)(w->scales + r0 * G) + q, _MM_HINT_T0);
    for (int b = 0; b < nb; b++) {
        const int64_t rows = n - 16 * b < 16 ? n - 16 * b : 16;
        const uint8_t *src = w->data + (r0 + 16 * b) * rb;
        uint8_t *dst = pk + b * bstride;
        for (int64_t c = 0; c < nch; c++) {
            __m512i v[16];
            if (rows == 16 && c + 1 < nch)
                for (int i = 0; i < 16; i++) {
                    _mm_prefetch((const char *)(src + i * rb + 64 * c + pf), QT_PREFETCH_HINT);
                    v[i] = _mm512_loadu_si512((const void *)(src + i * rb + 64 * c));
                }
            else
                for (int i = 0; i < 16; i++)
                    v[i] = i >= rows ? _mm512_setzero_si512()
                                     : _mm512_maskz_loadu_epi8(c + 1 < nch ? ~(__mmask64)0 : tail,
                                                               src + i * rb + 64 * c);
            qt_vnni_transpose16(v);
            for (int m = 0; m < 16; m++)
                _mm512_store_si512((void *)(dst + 64 * (16 * c + m)),
                                   i8 ? _mm512_xor_si512(v[m], flip) : v[m]);
        }
        int64_t g = 0;
        if (rows == 16)   /* 16 groups of the 16 rows at a time, by the same transpose */
            for (; g + 16 <= G; g += 16) {
                __m512i v[16];
                for (int i = 0; i < 16; i++)
                    v[i] =
                        _mm512_loadu_si512((const void *)(w->scales + (r0 + 16 * b + i) * G + g));
                qt_vnni_transpose16(v);
                for (int m = 0; m < 16; m++)
                    _mm512_store_si512((void *)(wsT + (b * G + g + m) * 16), v[m]);
            }
        for (; g < G; g++)
            for (int i = 0; i < 16; i++)
                wsT[(b * G + g) * 16 + i] = i < rows ? w->scales[(r0 + 16 * b + i) * G + g] : 0.0f;
    }
}

#define QT_VNNI_RB 2   /* row blocks per tile: 32 weight rows */
#define QT_VNNI_SB 12   /* activation rows per tile */

/* One step of the tile: acc[rb][j] += the step vectors wv[rb] times row j's activation step xt[j].
   */
#define QT_VNNI_STEP(wv, xt) \
    QT_UNROLL for (int j = 0; j < SB; j++) { \
        const __m512i xb = _mm512_set1_epi32((xt)[j]); \
        QT_UNROLL for (int rb = 0; rb < RB; rb++) acc[rb][j] = \
            qt_dpbusd(acc[rb][j], (wv)[rb], xb); \
    }

/* The integer sums of one group (weight columns [c0, c1)) for the tile, accumulated onto acc:
   int4 columns split into their two nibble planes here (steps 2c and 2c+1), int8 columns are one
   step each. */
#define QT_VNNI_GROUP_SUMS(c0, c1) \
    for (int64_t c = (c0); c < (c1); c++) { \
        qt_prefetch_step(pf); \
        if (i8) { \
            __m512i wv[2]; \
            QT_UNROLL for (int rb = 0; rb < RB; rb++) wv[rb] = \
                _mm512_load_si512((const void *)(pk + rb * bstride + 64 * c)); \
            QT_VNNI_STEP(wv, xq + c * sp) \
        } else \
            QT_UNROLL for (int half = 0; half < 2; \
                           half++) { /* one plane at a time: 2 registers */ \
                __m512i wv[2]; \
                QT_UNROLL for (int rb = 0; rb < RB; rb++) { \
                    const __m512i v = \
                        _mm512_load_si512((const void *)(pk + rb * bstride + 64 * c)); \
                    wv[rb] = _mm512_and_si512(half ? _mm512_srli_epi16(v, 4) : v, m4); \
                } \
                QT_VNNI_STEP(wv, xq + (2 * c + half) * sp) \
            } \
    }

/* The spec's p = ws·(xs·(isum - off)) of one group, for 16 weight rows: sums = isum of each. */
QT_VNNI QT_INLINE __m512 qt_vnni_group_p(__m512i sums, const int32_t *off, const float *xs,
                                         __m512 ws) {
    return _mm512_mul_ps(
        ws, _mm512_mul_ps(_mm512_set1_ps(*xs),
                          _mm512_cvtepi32_ps(_mm512_sub_epi32(sums, _mm512_set1_epi32(*off)))));
}

/* One tile: RB blocks of 16 repacked weight rows × SB activation rows from s0, the whole row.
   Per group: exact int32 sums (vpdpbusd of each step vector with the broadcast activation step),
   then p = ws·(xs·(isum - off)) into lane g mod 16, all vectorized over the 16 rows; at the end
   the lanes' fixed tree (qt_lanes_sum). lanes: scratch for RB·SB·16 vectors. The per-row formats
   (one group) keep p in registers. */
QT_VNNI QT_INLINE void qt_vnni_gemm_tile(const QTensor *w, const QtActs *a, const uint8_t *pk,
                                         int64_t bstride, const float *wsT, __m512 *lanes, int s0,
                                         const int RB, const int SB, int64_t r0, int64_t n,
                                         float *y, QtPrefetch *pf) {
    const int64_t G = qt_groups_per_row(w), ncols = qt_gemm_cols(w);
    const int i8 = w->format == QT_INT8_ROW;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const int64_t sp = a->spad;
    const int32_t *xq = (const int32_t *)a->q + s0;   /* step t of row s0+j: xq[t·sp + j] */
    const float *xs = a->scale + s0;                   /* group g: xs[g·sp + j], off[g·sp + j] */
    const int32_t *off = a->off + s0;
    __m512 out[2][QT_VNNI_SB];
    __m512i acc[2][QT_VNNI_SB];
    QT_UNROLL for (int rb = 0; rb < RB; rb++) QT_UNROLL for (int j = 0; j < SB; j++) acc[rb][j] =
        _mm512_setzero_si512();
    if (G == 1) {
        QT_VNNI_GROUP_SUMS(0, ncols)
        QT_UNROLL for (int rb = 0; rb < RB; rb++) {
            const __m512 wsv = _mm512_load_ps(wsT + rb * 16);
            QT_UNROLL for (int j = 0; j < SB; j++) out[rb][j] = _mm512_add_ps(
                _mm512_setzero_ps(), qt_vnni_group_p(acc[rb][j], &off[j], &xs[j], wsv));
        }
    } else {
        /* lanes 0..15 start as 0 + p of groups 0..15; only lanes no group reaches are zeroed here
           (zeroing all 16·RB·SB vectors per tile was 2 % of a 2,048-token prefill) */
        if (G < 16)
            for (int e = 0; e < RB * SB; e++)
                for (int k = (int)G; k < 16; k++) lanes[e * 16 + k] = _mm512_setzero_ps();
        const int64_t gcols = w->group / 8;   /* int4 only: a GEMM group covers whole columns */
        for (int64_t g = 0; g < G; g++) {
            const int64_t c1 = (g + 1) * gcols < ncols ? (g + 1) * gcols : ncols;
            QT_VNNI_GROUP_SUMS(g * gcols, c1)
            /* lane g mod 16 of tile element (rb, j): lg[(rb·SB + j)·16] */
            __m512 *lg = lanes + (g & 15);
            QT_UNROLL for (int rb = 0; rb < RB; rb++) {
                const __m512 wsv = _mm512_load_ps(wsT + (rb * G + g) * 16);
                QT_UNROLL for (int j = 0; j < SB; j++) {
                    const __m512 p =
                        qt_vnni_group_p(acc[rb][j], &off[g * sp + j], &xs[g * sp + j], wsv);
                    acc[rb][j] = _mm512_setzero_si512();
                    if (g < 16) lg[(rb * SB + j) * 16] = _mm512_add_ps(_mm512_setzero_ps(), p);
                    else lg[(rb * SB + j) * 16] = _mm512_add_ps(lg[(rb * SB + j) * 16], p);
                }
            }
        }
        QT_UNROLL for (int rb = 0; rb < RB; rb++) QT_UNROLL for (int j = 0; j < SB; j++) {
            const __m512 *l = lanes + (rb * SB + j) * 16;
            __m512 b[8];
            QT_UNROLL for (int k = 0; k < 8; k++) b[k] = _mm512_add_ps(l[k], l[k + 8]);
            QT_UNROLL for (int k = 0; k < 4; k++) b[k] = _mm512_add_ps(b[k], b[k + 4]);
            out[rb][j] = _mm512_add_ps(_mm512_add_ps(b[0], b[2]), _mm512_add_ps(b[1], b[3]));
        }
    }
    QT_UNROLL for (int rb = 0; rb < RB; rb++) {
        const int64_t rows = n - 16 * rb;
        if (rows <= 0) continue;
        const __mmask16 mask = rows >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << rows) - 1);
        QT_UNROLL for (int j = 0; j < SB; j++)
            _mm512_mask_storeu_ps(y + (int64_t)(s0 + j) * w->rows + r0 + 16 * rb, mask, out[rb][j]);
    }
}
#undef QT_VNNI_GROUP_SUMS
#undef QT_VNNI_STEP

QT_VNNI static void qt_gemm_vnni(const QTensor *w, const QtActs *a, int s0, int s1, int64_t r0,
                                 int64_t r1, float *y) {
    const int64_t G = qt_groups_per_row(w);
    /* one vector per column, int4 and int8 */
    const int64_t bstride = qt_gemm_cols_padded(w) * 64;
    const size_t pk_bytes = (size_t)(QT_VNNI_RB * bstride),
                 ws_bytes = (size_t)qt_round_up(QT_VNNI_RB * G * 16 * 4, 64);
    uint8_t *buf = qt_buf(QT_BUF_GEMM, pk_bytes + ws_bytes + QT_VNNI_RB * QT_VNNI_SB * 16 * 64,
                          "GEMM scratch");
    uint8_t *pk = buf;
    float *wsT = (float *)(buf + pk_bytes);
    __m512 *lanes = (__m512 *)(buf + pk_bytes + ws_bytes);
    for (int64_t r = r0; r < r1; r += 16 * QT_VNNI_RB) {
        const int64_t n = r1 - r < 16 * QT_VNNI_RB ? r1 - r : 16 * QT_VNNI_RB;
        const int nb = (int)((n + 15) / 16);
        qt_vnni_gemm_pack(w, r, n, nb, bstride, pk, wsT);
        /* past r1 too: a chunk is often one block, and this thread usually takes the next one */
        const int64_t next_rows =
            w->rows - r - n < 16 * QT_VNNI_RB ? w->rows - r - n : 16 * QT_VNNI_RB;
        /* the activation rows evenly over the fewest tiles (32 rows: 11 + 11 + 10, not 12 + 12 + 8)
           */
        const int tiles = (s1 - s0 + QT_VNNI_SB - 1) / QT_VNNI_SB;
        for (int s = s0, tile = 0, sb; s < s1; s += sb, tile++) {
            sb = (s1 - s + (tiles - tile) - 1) / (tiles - tile);
            QtPrefetch pf =
                qt_prefetch_share(w, r + n, next_rows, 16, tiles, tile, qt_gemm_cols(w));
#define QT_TILE(RB, SB) qt_vnni_gemm_tile(w, a, pk, bstride, wsT, lanes, s, RB, SB, r, n, y, &pf)
            if (nb == 2) switch (sb) {
                case 1: QT_TILE(2, 1); break;
                case 2: QT_TILE(2, 2); break;
                case 3: QT_TILE(2, 3); break;
                case 4: QT_TILE(2, 4); break;
                case 5: QT_TILE(2, 5); break;
                case 6: QT_TILE(2, 6); break;
                case 7: QT_TILE(2, 7); break;
                case 8: QT_TILE(2, 8); break;
                case 9: QT_TILE(2, 9); break;
                case 10: QT_TILE(2, 10); break;
                case 11: QT_TILE(2, 11); break;
                default: QT_TILE(2, 12); break;
            } else switch (sb) {
                case 1: QT_TILE(1, 1); break;
                case 2: QT_TILE(1, 2); break;
                case 3: QT_TILE(1, 3); break;
                case 4: QT_TILE(1, 4); break;
                case 5: QT_TILE(1, 5); break;
                case 6: QT_TILE(1, 6); break;
                case 7: QT_TILE(1, 7); break;
                case 8: QT_TILE(1, 8); break;
                case 9: QT_TILE(1, 9); break;
                case 10: QT_TILE(1, 10); break;
                case 11: QT_TILE(1, 11); break;
                default: QT_TILE(1, 12); break;
            }
#undef QT_TILE
        }
    }
}

/* ---------------- 256-bit kernels: AVX2 and AVX-VNNI ---------------------------------------------
   Both work on 32-byte halves of the 64-byte chunks (row kernels; the activation order is the
   same) and on 8-row step vectors (GEMM). They differ only in the integer dot product: AVX2 has
   vpmaddubsw (u8 × s8 pairs → s16) + vpmaddwd (→ s32), AVX-VNNI the VEX-encoded vpdpbusd (u8 × s8,
   4 products into each s32 lane). So the code is written once, at the end of this file, and
   compiled twice by including this file again with QT_YMM_PASS defined: qt_avx2_* with
   target("avx2"), qt_avxvnni_* with target("avx2,avxvnni") (an AVX2 kernel never contains a VNNI
   instruction, so it runs on CPUs without one). No vpmaddubsw pair sum can saturate: |w| ≤ 128
   and |x| ≤ 127 give at most 2·128·127 = 32512 for int8 (sign moved to the activation); the int4
   and int2 paths add two or four planes of at most 2·15·127 and 2·3·127 in int16, and the AVX2
   int4 GEMM up to eight (QT_YMM(gemm_i16) below). */

#define QT_AVX2_ONES _mm256_set1_epi16(1)
#define QT_AVX2_DOT1(acc, u, s) \
    _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), QT_AVX2_ONES))
#define QT_AVX2_DOT2(acc, u0, s0, u1, s1) \
    _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(u0, s0), \
                                                             _mm256_maddubs_epi16(u1, s1)), \
                                            QT_AVX2_ONES))
#define QT_AVX2_DOT4(acc, u0, s0, u1, s1, u2, s2, u3, s3) \
    _mm256_add_epi32( \
        acc, _mm256_madd_epi16(_mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(u0, s0), \
                                                                 _mm256_maddubs_epi16(u1, s1)), \
                                                _mm256_add_epi16(_mm256_maddubs_epi16(u2, s2), \
                                                                 _mm256_maddubs_epi16(u3, s3))), \
                               QT_AVX2_ONES))
#define QT_AVXVNNI_DOT1(acc, u, s) _mm256_dpbusd_avx_epi32(acc, u, s)
#define QT_AVXVNNI_DOT2(acc, u0, s0, u1, s1) QT_AVXVNNI_DOT1(QT_AVXVNNI_DOT1(acc, u0, s0), u1, s1)
#define QT_AVXVNNI_DOT4(acc, u0, s0, u1, s1, u2, s2, u3, s3) \
    QT_AVXVNNI_DOT2(QT_AVXVNNI_DOT2(acc, u0, s0, u1, s1), u2, s2, u3, s3)

QT_AVX2 QT_INLINE int32_t qt_avx2_hsum(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* The 32-byte half hc (0 .. 2·nch-1) of a row: the last chunk comes from a zero-padded copy. */
QT_AVX2 QT_INLINE __m256i qt_avx2_load_half(const uint8_t *wr, const uint8_t *tailbuf, int64_t nch,
                                            int64_t hc) {
    if (hc >= 2 * nch) return _mm256_setzero_si256();
    const uint8_t *p = hc / 2 + 1 < nch ? wr + 32 * hc : tailbuf + 32 * (hc & 1);
    return _mm256_loadu_si256((const __m256i *)p);
}

/* AVX2 version of qt_vnni_packsum: 8 lanes, the same int16 range argument. */
QT_AVX2 QT_INLINE __m256i qt_avx2_packsum(__m256i a, __m256i b) {
    return _mm256_madd_epi16(_mm256_packs_epi32(a, b), _mm256_set1_epi16(1));
}

/* The 8 group sums, in group order, of `lanes` half-chunk vectors (groups span `lanes` lanes). */
QT_AVX2 QT_INLINE __m256i qt_avx2_group_sums(__m256i *v, const int lanes) {
    if (lanes == 1) return v[0];
    if (lanes == 2)   /* → [g0 g1 g4 g5 | g2 g3 g6 g7] */
        return _mm256_permutevar8x32_epi32(qt_avx2_packsum(v[0], v[1]),
                                           _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7));
    if (lanes == 4)   /* → [g0 g2 g4 g6 | g1 g3 g5 g7] */
        return _mm256_permutevar8x32_epi32(
            qt_avx2_packsum(qt_avx2_packsum(v[0], v[1]), qt_avx2_packsum(v[2], v[3])),
            _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    /* lanes == 8: two levels leave [g0 g1 g2 g3 | g0 g1 g2 g3] (and g4..g7 in b): add the halves */
    __m256i a = qt_avx2_packsum(qt_avx2_packsum(v[0], v[1]), qt_avx2_packsum(v[2], v[3]));
    __m256i b = qt_avx2_packsum(qt_avx2_packsum(v[4], v[5]), qt_avx2_packsum(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                            _mm256_permute2x128_si256(a, b, 0x31));
}

/* v[m] = dword m of the 8 rows v[0..7] (row i in lane i), as qt_vnni_transpose16. */
QT_AVX2 QT_INLINE void qt_avx2_transpose8(__m256i *v) {
    __m256i t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {   /* u[4q + j], lane L: rows 4q..4q+3 of dword 4L + j */
        u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int j = 0; j < 4; j++) {
        v[j] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x20);
        v[4 + j] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x31);
    }
}

/* QT_ACTS_STEPS codes of activation rows [s0, s0+n), n ≤ 8, from their natural-order codes: a
   32-byte block of a row (32 codes) holds 8 steps (for int4 after a byte shuffle that puts each 8
   inputs' even codes before the odd ones), and an 8x8 dword transpose makes them 8 step runs of 8
   rows. Used by every GEMM kernel (all have AVX2). */
QT_AVX2 static void qt_avx2_steps(const QTensor *w, const QtActs *a, int s0, int n) {
    const int64_t C = w->cols, nsteps = a->qstride / 4, sp = a->spad;
    const int i4 = w->format != QT_INT8_ROW;
    const __m256i even_odd = _mm256_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15,
                                              0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
    _Alignas(32) int8_t tail[32];
    for (int64_t b = 0; b < nsteps / 8; b++) {
        __m256i v[8];
        for (int i = 0; i < 8; i++) {
            const int8_t *raw = a->raw + (int64_t)(s0 + i) * C + 32 * b;
            if (i >= n) v[i] = _mm256_setzero_si256();
            else if (32 * b + 32 <= C) v[i] = _mm256_loadu_si256((const __m256i *)raw);
            else {
                memset(tail, 0, 32);
                if (32 * b < C) memcpy(tail, raw, (size_t)(C - 32 * b));
                v[i] = _mm256_load_si256((const __m256i *)tail);
            }
            if (i4) v[i] = _mm256_shuffle_epi8(v[i], even_odd);
        }
        qt_avx2_transpose8(v);
        for (int k = 0; k < 8; k++)
            _mm256_storeu_si256((__m256i *)((int32_t *)a->q + (8 * b + k) * sp + s0), v[k]);
    }
}

#define QT_YMM_PASS 1
#define QT_YMM_RB 2   /* GEMM tile: 2 blocks of 8 weight rows ... */
#define QT_YMM_SB 4   /* ... × 4 activation rows (16 ymm registers) */
#define QT_YMM(name) qt_avx2_##name
#define QT_YMM_TARGET QT_AVX2
#define QT_YMM_DOT1 QT_AVX2_DOT1
#define QT_YMM_DOT2 QT_AVX2_DOT2
#define QT_YMM_DOT4 QT_AVX2_DOT4
#define QT_YMM_SIGNED_I8 1   /* int8 GEMM: |w| × sign-moved x (a pair of 255·127 would saturate) */
#define QT_YMM_I16 1         /* int4 GEMM: up to 8 steps summed in int16 (gemm_i16) ... */
/* ... in tiles of 2 blocks of 8 weight rows × this many activation rows */
#define QT_YMM_SB16 4
#include "quant.h"
#undef QT_YMM_I16
#undef QT_YMM_SB16
#undef QT_YMM
#undef QT_YMM_TARGET
#undef QT_YMM_DOT1
#undef QT_YMM_DOT2
#undef QT_YMM_DOT4
#undef QT_YMM_SIGNED_I8
#define QT_YMM(name) qt_avxvnni_##name
#define QT_YMM_TARGET QT_AVXVNNI
#define QT_YMM_DOT1 QT_AVXVNNI_DOT1
#define QT_YMM_DOT2 QT_AVXVNNI_DOT2
#define QT_YMM_DOT4 QT_AVXVNNI_DOT4
#define QT_YMM_SIGNED_I8 0   /* int8 GEMM: w xor 0x80 = q + 128, unsigned */
#define QT_YMM_I16 0         /* vpdpbusd sums into int32 itself */
#define QT_YMM_SB16 QT_YMM_SB
#include "quant.h"
#undef QT_YMM_I16
#undef QT_YMM_SB16
#undef QT_YMM_PASS
#endif /* QT_X86 */

#ifdef QT_ARM
/* ---------------- NEON kernels (aarch64) ---------------------------------------------------------
   Three kernels: neon (base ARMv8-A SIMD), dotprod (sdot: 4 s8 × s8 products into each int32
   lane) and i8mm (smmla: a 2×8 by 8×2 s8 matrix product into a 2×2 int32 block). Their code is
   written once, at the end of this file, and compiled once per instruction set by including this
   file again with QT_NEON_PASS defined, as the 256-bit x86 kernels are. Every integer sum is
   exact; the float combine is the spec's, in its order, so every kernel equals qt_dot_int_row bit
   for bit.
   Row kernels (neon, dotprod; i8mm uses dotprod's): the QT_ACTS_CHUNKS activations, the weights
   read in 16-byte pieces (a quarter of a chunk) and split into nibbles or 2-bit planes as the x86
   kernels do; the int32 lane i of a piece covers its bytes 4i..4i+3, so for int4 the 8 inputs
   32b + 8i .. +7 of piece b: a group of a multiple of 8 inputs never splits a lane. The base
   kernel emulates sdot's lanes with widening multiplies and pairwise adds.
   GEMM kernels (all three): blocks of QT_NEON_ROWS_PER_BLOCK = 8 weight rows repacked as signed
   codes in K-blocks of 8 inputs, [K-block][row][8 codes] (qt_neon_gemm_pack), against the
   QT_ACTS_K8 activations. A 16-byte load of a K-block is two rows' 8 codes: smmla multiplies it by
   two activation rows' 8 codes into a 2×2 block; sdot by one activation row's 8 codes, twice
   over, into [row r: inputs 0-3, 4-7; row r+1: 0-3, 4-7]. Per group, 4 weight rows' int32 sums
   then form one vector and the epilogue runs over them as the x86 GEMM's does over 8 or 16.
   No explicit prefetch in the GEMM: the pack reads 8 sequential streams, which the cores'
   hardware prefetchers follow. */
#define QT_NEON_ROWS_PER_BLOCK 8

/* Repack weight rows [r0, r0+n), n ≤ 8, into pk: K-block kb at pk + 64kb, row i's signed codes of
   inputs 8kb..8kb+7 at +8i; rows past n are zero. Codes past the row's inputs are whatever the
   padding bytes hold: the activations there are zero. wsT[g·8 + i] = row i's scale of group g. */
static void qt_neon_gemm_pack(const QTensor *w, int64_t r0, int64_t n, int64_t nkb, int8_t *pk,
                              float *wsT) {
    const int64_t rb = w->row_bytes, G = qt_groups_per_row(w);
    for (int i = 0; i < QT_NEON_ROWS_PER_BLOCK; i++) {
        int8_t *dst = pk + 8 * i;
        if (i >= n) {
            for (int64_t kb = 0; kb < nkb; kb++) memset(dst + 64 * kb, 0, 8);
            continue;
        }
        const uint8_t *src = w->data + (r0 + i) * rb;
        /* bytes per 16-byte piece: 16 (int8: 2 K-blocks), 16 (int4: 4), 16 (int2: 8) */
        const int kpp = w->format == QT_INT8_ROW ? 2 : w->format == QT_INT2_ROW ? 8 : 4;
        for (int64_t j = 0; j * kpp < nkb; j++) {
            uint8x16_t v;
            if (16 * j + 16 <= rb) v = vld1q_u8(src + 16 * j);
            else {
                uint8_t tail[16] = { 0 };
                memcpy(tail, src + 16 * j, (size_t)(rb - 16 * j));
                v = vld1q_u8(tail);
            }
            int8x16_t c[4];   /* 16 codes each, natural order */
            int nc;
            if (w->format == QT_INT8_ROW) { c[0] = vreinterpretq_s8_u8(v); nc = 1; }
            else if (w->format == QT_INT2_ROW) {
                const uint8x16_t m2 = vdupq_n_u8(3);
                const uint8x16_t p0 = vandq_u8(v, m2), p1 = vandq_u8(vshrq_n_u8(v, 2), m2);
                const uint8x16_t p2 = vandq_u8(vshrq_n_u8(v, 4), m2), p3 = vshrq_n_u8(v, 6);
                /* byte t's planes k = 0..3 are inputs 4t+k: interleave bytes, then byte pairs */
                const uint16x8_t a0 = vreinterpretq_u16_u8(vzip1q_u8(p0, p1));
                const uint16x8_t a1 = vreinterpretq_u16_u8(vzip2q_u8(p0, p1));
                const uint16x8_t b0 = vreinterpretq_u16_u8(vzip1q_u8(p2, p3));
                const uint16x8_t b1 = vreinterpretq_u16_u8(vzip2q_u8(p2, p3));
                const int8x16_t two = vdupq_n_s8(2);
                c[0] = vsubq_s8(vreinterpretq_s8_u16(vzip1q_u16(a0, b0)), two);
                c[1] = vsubq_s8(vreinterpretq_s8_u16(vzip2q_u16(a0, b0)), two);
                c[2] = vsubq_s8(vreinterpretq_s8_u16(vzip1q_u16(a1, b1)), two);
                c[3] = vsubq_s8(vreinterpretq_s8_u16(vzip2q_u16(a1, b1)), two);
                nc = 4;
            } else {   /* element 2t in the low nibble of byte t */
                const uint8x16_t lo = vandq_u8(v, vdupq_n_u8(0x0F)), hi = vshrq_n_u8(v, 4);
                const int8x16_t eight = vdupq_n_s8(8);
                c[0] = vsubq_s8(vreinterpretq_s8_u8(vzip1q_u8(lo, hi)), eight);
                c[1] = vsubq_s8(vreinterpretq_s8_u8(vzip2q_u8(lo, hi)), eight);
                nc = 2;
            }
            for (int k = 0; k < nc; k++) {
                const int64_t kb = j * kpp + 2 * k;
                if (kb < nkb) vst1_s8(dst + 64 * kb, vget_low_s8(c[k]));
                if (kb + 1 < nkb) vst1_s8(dst + 64 * (kb + 1), vget_high_s8(c[k]));
            }
        }
    }
    for (int64_t g = 0; g < G; g++)
        for (int i = 0; i < QT_NEON_ROWS_PER_BLOCK; i++)
            wsT[g * 8 + i] = i < n ? w->scales[(r0 + i) * G + g] : 0.0f;
}

/* The spec's float combine of one row's G group sums isum[] (zero-padded to a multiple of 4)
   against one activation row (off, xs: padded to 16 with zeros): p = ws·(xs·(isum - off)) into
   lane g mod 16, 4 groups per vector, then qt_lanes_sum. Groups past G add 0·(0·0) = +0, which
   leaves a lane unchanged (a lane is never -0: it starts at +0, and x + y is -0 only for
   -0 + -0). */
static float qt_neon_combine(const int32_t *isum, const int32_t *off, const float *xs,
                             const float *ws, int64_t G) {
    float32x4_t l0 = vdupq_n_f32(0.0f), l1 = l0, l2 = l0, l3 = l0;
#define QT_NEON_P(g, wsp)                                                                          \
    vmulq_f32(vld1q_f32(wsp),                                                                      \
              vmulq_f32(vld1q_f32(xs + (g)),                                                       \
                        vcvtq_f32_s32(vsubq_s32(vld1q_s32(isum + (g)), vld1q_s32(off + (g))))))
    int64_t g = 0;
    for (; g + 16 <= G; g += 16) {
        l0 = vaddq_f32(l0, QT_NEON_P(g, ws + g));
        l1 = vaddq_f32(l1, QT_NEON_P(g + 4, ws + g + 4));
        l2 = vaddq_f32(l2, QT_NEON_P(g + 8, ws + g + 8));
        l3 = vaddq_f32(l3, QT_NEON_P(g + 12, ws + g + 12));
    }
    float32x4_t *l[4] = { &l0, &l1, &l2, &l3 };
    for (int k = 0; g < G; g += 4, k++) {
        float wt[4] = { 0 };
        memcpy(wt, ws + g, (size_t)(G - g < 4 ? G - g : 4) * sizeof(float));
        *l[k] = vaddq_f32(*l[k], QT_NEON_P(g, wt));
    }
#undef QT_NEON_P
    float lane[16];
    vst1q_f32(lane, l0); vst1q_f32(lane + 4, l1); vst1q_f32(lane + 8, l2); vst1q_f32(lane + 12, l3);
    return qt_lanes_sum(lane);
}

/* sdot's lanes with base NEON: lane i += Σ_k<4 a[4i+k]·b[4i+k] (each product fits int16). */
QT_INLINE int32x4_t qt_neon_dot_base(int32x4_t acc, int8x16_t a, int8x16_t b) {
    const int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b)), hi = vmull_high_s8(a, b);
    return vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi)));
}

#define QT_NEON_PASS 1
#define QT_NEON(name) qt_neon_##name
#define QT_NEON_TARGET
#define QT_NEON_DOT qt_neon_dot_base
#define QT_NEON_HAS_ROWS 1
#define QT_NEON_MMLA 0
#include "quant.h"
#undef QT_NEON
#undef QT_NEON_TARGET
#undef QT_NEON_DOT
#define QT_NEON(name) qt_dotprod_##name
#define QT_NEON_TARGET QT_DOTPROD_TARGET
#define QT_NEON_DOT vdotq_s32
#include "quant.h"
#undef QT_NEON
#undef QT_NEON_TARGET
#undef QT_NEON_HAS_ROWS
#undef QT_NEON_MMLA
#define QT_NEON(name) qt_i8mm_##name
#define QT_NEON_TARGET QT_I8MM_TARGET
#define QT_NEON_HAS_ROWS 0
#define QT_NEON_MMLA 1
#include "quant.h"
#undef QT_NEON
#undef QT_NEON_TARGET
#undef QT_NEON_DOT
#undef QT_NEON_HAS_ROWS
#undef QT_NEON_MMLA
#undef QT_NEON_PASS
#endif /* QT_ARM */

/* ---- Threads -------------------------------------------------------------------------------

   One OpenMP parallel region per matmul, on the same team as the engine's own OpenMP code (a
   second, private pool of spinning threads would fight that team for the 2 cores; measured in
   bench/README.md). Inside the region each thread starts on its own contiguous range of row
   chunks (one sequential stream per thread, as a static schedule), claiming chunks from the front
   of its range; a thread that runs out takes chunks from the back of the others' ranges. So when
   another process takes a core for a while, the thread still running finishes the work instead
   of leaving half of it to the descheduled one. Claims on a thread's own range touch only its own
   cache line. Which thread computes a row never changes its value. */
#include <stdatomic.h>

#define QT_MAX_THREADS 256
#define QT_MAX_CHUNKS 0x7FFFFFFF

typedef void (*QtChunkFn)(void *arg, int64_t chunk);

/* front (high 32 bits) and back (low 32 bits) of the chunks [front, back) still unclaimed */
typedef struct { _Alignas(64) _Atomic uint64_t word; } QtRange;

static int qt_threads_wanted;    /* 0: omp_get_max_threads() */
static int qt_no_steal;          /* benchmark switch: plain static schedule */

void qt_set_threads(int n) { qt_threads_wanted = n < 0 ? 0 : n; }
void qt_set_stealing(int on) { qt_no_steal = !on; }

static int qt_thread_count(void) {
    int n = qt_threads_wanted;
#ifdef _OPENMP
    if (n <= 0) n = omp_get_max_threads();
#endif
    if (n <= 0) n = 1;
    return n > QT_MAX_THREADS ? QT_MAX_THREADS : n;
}

/* Claim one chunk of range r: from the front (owner) or the back (anyone else); -1 if empty. */
static int64_t qt_claim(QtRange *r, int from_front) {
    uint64_t w = atomic_load_explicit(&r->word, memory_order_relaxed);
    for (;;) {
        uint32_t front = (uint32_t)(w >> 32), back = (uint32_t)w;
        if (front >= back) return -1;
        uint64_t nw = from_front ? w + ((uint64_t)1 << 32) : w - 1;
        if (atomic_compare_exchange_weak_explicit(&r->word, &w, nw, memory_order_relaxed,
                                                  memory_order_relaxed))
            return from_front ? (int64_t)front : (int64_t)back - 1;
    }
}

/* Stall guard. A parallel region ends when its last thread arrives; when another process holds a
   core, that thread may be descheduled and each matmul then waits a scheduler slice (~4-10 ms,
   measured: 0.1 GOP/s instead of 150 for a small matmul, and an expert FFN at 0.06 of the plain
   read). The caller measures how long it waited for the others (before its share: libgomp's fork
   waits for the threads to be back from the previous region; after it: the join); a
   wait over 2 ms means a descheduled thread (a late wake-up costs tens of µs), and the next
   matmuls run on the caller alone for a while: 10 ms, doubling on each stall in a row up to
   100 ms, back to 10 ms after a parallel call without a stall. Results never depend on it. */
static _Atomic int64_t qt_solo_until_ns, qt_solo_backoff_ns;
static int qt_stall_guard = 1;
void qt_set_stall_guard(int on) { qt_stall_guard = on; }

static int64_t qt_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void qt_note_wait(int64_t waited_ns, int64_t now) {
    const int64_t lo = 10000000, hi = 100000000;
    int64_t b = atomic_load_explicit(&qt_solo_backoff_ns, memory_order_relaxed);
    if (waited_ns > 2000000) {
        b = b < lo ? lo : b * 2 > hi ? hi : b * 2;
        atomic_store_explicit(&qt_solo_backoff_ns, b, memory_order_relaxed);
        atomic_store_explicit(&qt_solo_until_ns, now + b, memory_order_relaxed);
    } else if (b > lo) {
        atomic_store_explicit(&qt_solo_backoff_ns, lo, memory_order_relaxed);
    }
}

/* Run first(first_arg, c) for every c < nfirst, then fn(arg, c) for every c < nchunks, on up to
   qt_thread_count() threads, in one parallel region: the first phase (a matmul's activations)
   split statically, a barrier, then the chunks with stealing. One region instead of two saves a
   wake-up and a join of the threads per matmul (~10-20 us each on 2-vCPU VMs: kbench's thread
   wake-up table). first may be NULL. */
static void qt_parallel_phases(QtChunkFn first, void *first_arg, int64_t nfirst, QtChunkFn fn,
                               void *arg, int64_t nchunks) {
    if (nchunks <= 0) return;
    int threads = qt_thread_count();
    if (nchunks < threads) threads = (int)nchunks;
    int nested = 0;
#ifdef _OPENMP
    nested = omp_in_parallel();
#endif
    int solo = 0;
    if (threads > 1 && qt_stall_guard)
        solo = qt_now_ns() < atomic_load_explicit(&qt_solo_until_ns, memory_order_relaxed);
    if (threads <= 1 || nested || solo || nchunks > QT_MAX_CHUNKS) {
        for (int64_t c = 0; first && c < nfirst; c++) first(first_arg, c);
        for (int64_t c = 0; c < nchunks; c++) fn(arg, c);
        return;
    }
    /* libgomp's caller can wait at both ends: at the start until the other threads are back in
       the pool from the previous region, at the end until they finish */
    int64_t caller_start = 0, caller_done = 0, caller_barrier = 0,
            before = qt_stall_guard ? qt_now_ns() : 0;
    QtRange ranges[QT_MAX_THREADS];
    for (int t = 0; t < threads; t++)
        atomic_init(&ranges[t].word, (uint64_t)(nchunks * t / threads) << 32 |
                                         (uint64_t)(nchunks * (t + 1) / threads));
#pragma omp parallel num_threads(threads)
    {
        int t = 0, nt = 1;
#ifdef _OPENMP
        t = omp_get_thread_num(); nt = omp_get_num_threads();
#endif
        if (t == 0 && qt_stall_guard) caller_start = qt_now_ns();
        if (first) {
            for (int64_t c = t; c < nfirst; c += nt) first(first_arg, c);
            const int64_t arrived = t == 0 && qt_stall_guard ? qt_now_ns() : 0;
            #pragma omp barrier
            /* a wait like the join's */
            if (t == 0 && qt_stall_guard) caller_barrier = qt_now_ns() - arrived;
        }
        if (qt_no_steal)
            for (int64_t c = nchunks * t / nt; c < nchunks * (t + 1) / nt; c++) fn(arg, c);
        else {
            int64_t c;
            while ((c = qt_claim(&ranges[t], 1)) >= 0) fn(arg, c);
            /* every range, in case the region got fewer threads than asked for */
            for (int k = 1; k < threads; k++)
                while ((c = qt_claim(&ranges[(t + k) % threads], 0)) >= 0) fn(arg, c);
        }
        if (t == 0 && qt_stall_guard) caller_done = qt_now_ns();
    }
    if (qt_stall_guard) {
        int64_t now = qt_now_ns();
        qt_note_wait((caller_start - before) + caller_barrier + (now - caller_done), now);
    }
}

/* Run fn(arg, c) for every c < nchunks, on up to qt_thread_count() threads. */
static void qt_parallel_chunks(QtChunkFn fn, void *arg, int64_t nchunks) {
    qt_parallel_phases(NULL, NULL, 0, fn, arg, nchunks);
}

/* ---- Dispatch ------------------------------------------------------------------------------ */

/* Weight bytes per chunk of work: small enough that a thread descheduled mid-chunk holds up
   little, large enough that each thread still reads long sequential runs. */
static int64_t qt_chunk_bytes = 65536;
void qt_set_chunk_bytes(int64_t n) { qt_chunk_bytes = n > 0 ? n : 65536; }

typedef struct {
    const QTensor *w;
    const float *x;
    float *y;
    int S;
    int64_t rows_per_chunk;
    /* GEMM on few weight rows: chunks also split the activation rows */
    int s_panels, s_per_panel;
    QtActs acts;
    QtRowsFn rows;
    int64_t nchunks;   /* integer path: chunks of rows (× activation panels) */
} QtMatmulJob;

/* 0: the default per kernel and format, where the GEMM overtakes the row kernels
   (bench/README.md; GOP/s row kernel / GEMM). The AVX-512 GEMM wins from S = 3 on grouped weights
   and from S = 5 on int4-row ones (one thread, 16 matrices beyond the caches: group 64 S = 3:
   151 / 157 and 159 / 157, S = 4: 131 / 212 and 175 / 203 on 2048x6144 and 6144x2048; int4-row
   S = 4: 171 / 225 and 278 / 216, S = 5: 179 / 325 and 279 / 343). Grouped S = 3 against the
   two-row row kernel (expert FFN, 64 experts beyond the caches, three alternating runs): 2
   threads 274 260 264 / 301 292 305, 1 thread 116 123 130 / 153 139 174; from the caches the row
   kernel wins (one gate matrix, 1 thread, 252-258 / 198-199), but a verify pass reads its weights
   from memory. The 256-bit GEMM kernels win from S = 4 (S = 3 from DRAM against their two-row
   row kernels, 2 threads: AVX2 190 181 189 / 182 184 192, AVX-VNNI 209 198 211 / 182 166 168).
   The NEON kernels take 4 as the 256-bit ones do: not measured on ARM hardware. */
static int qt_gemm_min_rows_set;
void qt_set_gemm_min_rows(int s) { qt_gemm_min_rows_set = s < 0 ? 0 : s; }

static int qt_gemm_min_rows(QtKernel k, const QTensor *w) {
    if (qt_gemm_min_rows_set) return qt_gemm_min_rows_set;
    if (k == QT_KERNEL_VNNI) return qt_groups_per_row(w) > 1 ? 3 : 5;
    return 4;
}

/* Formats the GEMM kernels of k take: a group must cover whole steps (8 int4 inputs); int2 only
   on ARM (its repack unpacks every format to signed codes). */
static int qt_gemm_shape_ok(const QTensor *w, QtKernel k) {
    if (w->format == QT_INT8_ROW || w->format == QT_INT4_ROW) return 1;
    if (w->format == QT_INT2_ROW) return qt_kernel_is_arm(k);
    return w->format == QT_INT4_GROUP && (qt_groups_per_row(w) == 1 || w->group % 8 == 0);
}

static int64_t qt_rows_per_chunk(const QTensor *w, int S) {
    /* with many activation rows, less weight per chunk */
    int64_t bytes = w->row_bytes * (S < 8 ? 1 : S / 8);
    int64_t r = qt_chunk_bytes / (bytes > 0 ? bytes : 1);
    if (r < 1) r = 1;
    while ((w->rows + r - 1) / r > QT_MAX_CHUNKS) r *= 2;
    return r;
}

/* Four dot products at once, each with exactly qt_dot_f32's operations and order (the same 16
   lanes, the same tail and the same final tree), so each result equals qt_dot_f32(a[j], b, n) bit
   for bit; four independent chains instead of one hide the float add latency. */
static void qt_dot_f32_4(const float *const *a, const float *b, int64_t n, float *out) {
    const float *restrict a0 = a[0], *restrict a1 = a[1], *restrict a2 = a[2], *restrict a3 = a[3];
    float c0[16] = { 0 }, c1[16] = { 0 }, c2[16] = { 0 }, c3[16] = { 0 };
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++) {
            const float bk = b[i + k];
            c0[k] += a0[i + k] * bk; c1[k] += a1[i + k] * bk;
            c2[k] += a2[i + k] * bk; c3[k] += a3[i + k] * bk;
        }
    float *c[4] = { c0, c1, c2, c3 };
    for (int j = 0; j < 4; j++) {
        float *cj = c[j];
        for (int64_t ii = i, k = 0; ii < n; ii++, k++) cj[k] += a[j][ii] * b[ii];
        for (int k = 0; k < 8; k++) cj[k] += cj[k + 8];
        for (int k = 0; k < 4; k++) cj[k] += cj[k + 4];
        out[j] = (cj[0] + cj[2]) + (cj[1] + cj[3]);
    }
}

/* out[i] = (float)q[i] · s[group of i], straight from the packed codes (the same values as
   qt_unpack_codes + qt_dequant_codes, without the int8 detour). */
static void qt_dequant_fast(const QTensor *t, int64_t row, float *out) {
    const uint8_t *p = t->data + row * t->row_bytes;
    const float *sc = t->scales + row * qt_groups_per_row(t);
    const int64_t n = t->cols, g = t->group;
    for (int64_t g0 = 0, gi = 0; g0 < n; g0 += g, gi++) {
        const int64_t g1 = g0 + g < n ? g0 + g : n;
        const float s = sc[gi];
        int64_t i = g0;
        switch (t->format) {
        case QT_INT8_ROW:
            for (; i < g1; i++) out[i] = (float)(int8_t)p[i] * s;
            break;
        case QT_INT4_ROW: case QT_INT4_GROUP: {
            if (i & 1) { out[i] = (float)((p[i >> 1] >> 4) - 8) * s; i++; }
            const uint8_t *pb = p + (i >> 1);
            float *o = out + i;
            const int64_t nb = (g1 - i) / 2;
            for (int64_t b = 0; b < nb; b++) {
                o[2 * b] = (float)((pb[b] & 0xF) - 8) * s;
                o[2 * b + 1] = (float)((pb[b] >> 4) - 8) * s;
            }
            i += 2 * nb;
            if (i < g1) out[i] = (float)((p[i >> 1] & 0xF) - 8) * s;
            break;
        }
        case QT_INT2_ROW: {   /* per-row format: one group, i = 0 */
            const int64_t nb = g1 / 4;
            for (int64_t b = 0; b < nb; b++)
                for (int k = 0; k < 4; k++)
                    out[4 * b + k] = (float)(((p[b] >> (2 * k)) & 3) - 2) * s;
            for (i = 4 * nb; i < g1; i++)
                out[i] = (float)(((p[i >> 2] >> (2 * (i & 3))) & 3) - 2) * s;
            break;
        }
        case QT_F32: break;
        }
    }
}

/* Float weight rows per chunk: at least a 4-row block (a shorter chunk would repeat its first row
   in qt_dot_f32_4's four chains: 1024 rows against the f32 router, 256 x 6144, ran at 22 GFLOP/s
   with one-row chunks), and for f32 weights ~512 KB of them, so that each chunk streams the
   activations once while its rows stay in L2. */
static int64_t qt_float_rows_per_chunk(const QTensor *w, int S) {
    int64_t r = qt_rows_per_chunk(w, S);
    if (w->format == QT_F32 && S >= QT_DOT_TILE) {
        const int64_t l2 = (524288 / (w->cols * 4)) / 4 * 4;
        if (r < l2) r = l2;
    }
    return qt_round_up(r, 4);
}

/* Rows [r0, r1) of the exact float path. Weights 4 rows at a time (f32 rows used in place, others
   dequantized once into per-thread scratch); activations in tiles of QT_DOT_TILE (qt_dot_tile: each
   weight vector load serves several rows), the last few one at a time (qt_dot_f32_4). For f32
   weights the activations go in panels of ~64 KB that stay in L1/L2 while the chunk's rows pass.
   Every result is qt_dot_f32's, whichever function computed it. */
static void qt_float_chunk(void *p, int64_t c) {
    const QtMatmulJob *j = p;
    const QTensor *w = j->w;
    const int64_t R = w->rows, C = w->cols;
    enum { T = QT_DOT_TILE };
    const int64_t stride = qt_round_up(C, 16);
    float *rowbuf = w->format == QT_F32 ? NULL
                                        : qt_buf(QT_BUF_ROWS, (size_t)(4 * stride) * sizeof(float),
                                                 "dequantized rows"); /* 4 rows */
    const int64_t r0 = c * j->rows_per_chunk,
                  r1 = r0 + j->rows_per_chunk < R ? r0 + j->rows_per_chunk : R;
    int panel = j->S;   /* dequantized rows: one panel, so each row is dequantized once */
    if (w->format == QT_F32) {
        panel = (int)(65536 / C) / T * T;
        if (panel < T) panel = T;
    }
    for (int p0 = 0; p0 < j->S; p0 += panel) {
        const int p1 = j->S - p0 < panel ? j->S : p0 + panel;
        for (int64_t r = r0; r < r1; r += 4) {
            const int nr = r1 - r < 4 ? (int)(r1 - r) : 4;
            const float *rows[4];
            for (int k = 0; k < 4; k++) {
                int64_t rr = r + (k < nr ? k : 0);   /* a short block repeats its first row */
                if (w->format == QT_F32) rows[k] = (const float *)(w->data + rr * w->row_bytes);
                else {
                    if (k < nr) qt_dequant_fast(w, rr, rowbuf + k * stride);
                    rows[k] = rowbuf + (k < nr ? k : 0) * stride;
                }
            }
            int s = p0;
            for (; s + T <= p1; s += T) {
                const float *xs[T];
                for (int k = 0; k < T; k++) xs[k] = j->x + (int64_t)(s + k) * C;
                for (int a = 0; a < nr; a += T) {
                    float tile[T * T];
                    qt_dot_tile(rows + a, xs, C, tile, T, T, T);
                    for (int i = 0; i < T && a + i < nr; i++)
                        for (int k = 0; k < T; k++)
                            j->y[(int64_t)(s + k) * R + r + a + i] = tile[i * T + k];
                }
            }
            for (; s < p1; s++) {
                float out[4];
                qt_dot_f32_4(rows, j->x + (int64_t)s * C, C, out);
                for (int k = 0; k < nr; k++) j->y[(int64_t)s * R + r + k] = out[k];
            }
        }
    }
}

/* Activation rows [16c, 16c+16) for the step-major layout (one writer per cache line), row c
   otherwise. */
static void qt_acts_chunk(void *p, int64_t c) {
    const QtMatmulJob *j = p;
    const int per = j->acts.layout == QT_ACTS_STEPS || j->acts.layout == QT_ACTS_K8 ? 16 : 1;
    for (int s = (int)c * per; s < (int)(c + 1) * per && s < j->S; s++)
        qt_prepare_acts_row(j->w, j->x, &j->acts, s);
    if (j->acts.layout == QT_ACTS_K8) {   /* the padding rows a tile reads: zero codes and scales */
        const int pad1 = (int)(c + 1) * per < j->acts.spad ? (int)(c + 1) * per : (int)j->acts.spad;
        for (int s = j->S > (int)c * per ? j->S : (int)c * per; s < pad1; s++) {
            qt_k8_row(j->w, &j->acts, s, NULL);
            for (int64_t g = 0; g < qt_groups_per_row(j->w); g++)
                j->acts.scale[g * j->acts.spad + s] = 0;
        }
    }
#ifdef QT_X86
    if (j->acts.layout == QT_ACTS_STEPS)
        for (int s0 = (int)c * 16; s0 < (int)c * 16 + 16 && s0 < j->S; s0 += 8)
            qt_avx2_steps(j->w, &j->acts, s0, j->S - s0 < 8 ? j->S - s0 : 8);
#endif
}

static void qt_int_chunk(void *p, int64_t c) {
    const QtMatmulJob *j = p;
    const int64_t rc = c / j->s_panels, sp = c % j->s_panels;
    const int64_t r0 = rc * j->rows_per_chunk,
                  r1 = r0 + j->rows_per_chunk < j->w->rows ? r0 + j->rows_per_chunk : j->w->rows;
    const int s0 = (int)sp * j->s_per_panel,
              s1 = s0 + j->s_per_panel < j->S ? s0 + j->s_per_panel : j->S;
    j->rows(j->w, &j->acts, s0, s1, r0, r1, j->y);
}

/* Long batches (a prefill chunk) go in panels of QT_GEMM_PANEL rows, each a whole matmul: every
   weight block's repack is then applied to activations that stay in the caches, where with 1024
   rows (16 MB of codes for o_proj) they streamed from DRAM for each block. Measured, one thread,
   CPU time, int4 group 64, S = 1024: o_proj 6144×16384 340 → 580 GOP/s, q_b 16384×2048 430 → 566,
   dense gate 12288×6144 456 → 619 (the weights are read once per panel instead: 8 times, a few ms
   against ~100 ms of arithmetic). A row's result does not depend on the rows beside it, so the
   split changes nothing. */
enum { QT_GEMM_PANEL = 128 };

/* The integer path's plan for w against S (≤ QT_GEMM_PANEL) activation rows: kernel, activation
   layout, chunks. The activation buffers are set by qt_acts_buffers. */
static void qt_plan_int(QtMatmulJob *j, const QTensor *w, const float *x, float *y, int S,
                        QtKernel kernel) {
    const int64_t R = w->rows;
    memset(j, 0, sizeof *j);
    j->w = w; j->x = x; j->y = y; j->S = S;
    j->rows_per_chunk = qt_rows_per_chunk(w, S);
    j->s_panels = 1; j->s_per_panel = S;
    QtKernel k = kernel == QT_KERNEL_AUTO ? qt_get_kernel() : qt_kernel_resolve(kernel);
    const int gemm = k != QT_KERNEL_SCALAR && S >= qt_gemm_min_rows(k, w) && qt_gemm_shape_ok(w, k);
    if (!gemm && !qt_simd_shape_ok(w, k)) k = QT_KERNEL_SCALAR;
    QtActs *a = &j->acts;
    const int arm = qt_kernel_is_arm(k);
    a->layout = k == QT_KERNEL_SCALAR ? QT_ACTS_NATURAL
              : gemm ? (arm ? QT_ACTS_K8 : QT_ACTS_STEPS) : QT_ACTS_CHUNKS;
    a->int8_bias = gemm && k != QT_KERNEL_AVX2 && !arm ? 128 : 0;
    j->rows = qt_rows_scalar;
    int block = 1;   /* weight rows the kernel repacks at a time */
#ifdef QT_ARM
    if (gemm) {
        j->rows = k == QT_KERNEL_I8MM ? qt_i8mm_gemm
                : k == QT_KERNEL_DOTPROD ? qt_dotprod_gemm : qt_neon_gemm;
        block = QT_NEON_ROWS_PER_BLOCK;
    } else if (k == QT_KERNEL_NEON) j->rows = qt_neon_rows;
    else if (k != QT_KERNEL_SCALAR) j->rows = qt_dotprod_rows;   /* i8mm: the dotprod row kernels */
#endif
#ifdef QT_X86
    if (gemm) {
        j->rows = k == QT_KERNEL_VNNI      ? qt_gemm_vnni
                  : k == QT_KERNEL_AVXVNNI ? qt_avxvnni_gemm
                                           : qt_avx2_gemm;
        block = k == QT_KERNEL_VNNI ? 16 * QT_VNNI_RB : 8 * QT_YMM_RB;
    } else if (k == QT_KERNEL_VNNI) j->rows = qt_rows_vnni;
    else if (k == QT_KERNEL_AVXVNNI) j->rows = qt_avxvnni_rows;
    else if (k == QT_KERNEL_AVX2) j->rows = qt_avx2_rows;
#endif
    if (gemm) {
        /* whole repack blocks per chunk; with few of them, split the activation rows too (each
           panel repacks its rows again), so that both threads have work */
        int64_t rpc = qt_chunk_bytes / (w->row_bytes > 0 ? w->row_bytes : 1);
        j->rows_per_chunk = qt_round_up(rpc > block ? rpc : block, block);
        const int64_t row_chunks = (R + j->rows_per_chunk - 1) / j->rows_per_chunk;
        if (row_chunks < 8 && S >= 32) {
            int64_t want = (8 + row_chunks - 1) / row_chunks, most = S / 16;
            int64_t panels = want < most ? want : most;
            j->s_per_panel = (int)qt_round_up((S + panels - 1) / panels, 8);
            j->s_panels = (S + j->s_per_panel - 1) / j->s_per_panel;
        }
    }
    j->nchunks = (R + j->rows_per_chunk - 1) / j->rows_per_chunk * j->s_panels;
    a->qstride = qt_acts_stride(w, a->layout);
    a->gstride = qt_round_up(qt_groups_per_row(w), 16);
    /* 16: each thread writes whole cache lines */
    a->spad = a->layout == QT_ACTS_STEPS || a->layout == QT_ACTS_K8 ? qt_round_up(S, 16) : 0;
}

/* The activation buffers of j in the calling thread's scratch; returns how many chunks of
   qt_acts_chunk fill them. */
static int64_t qt_acts_buffers(QtMatmulJob *j) {
    QtActs *a = &j->acts;
    const int S = j->S;
    const int64_t rows_alloc = a->spad ? a->spad : S;
    size_t raw_bytes = (size_t)qt_round_up((int64_t)S * j->w->cols, 64);
    size_t q_bytes = (size_t)qt_round_up(rows_alloc * a->qstride, 64);
    size_t g_bytes = (size_t)qt_round_up(rows_alloc * a->gstride * 4, 64);
    uint8_t *buf = qt_buf(QT_BUF_ACTS, raw_bytes + q_bytes + 2 * g_bytes, "activation scratch");
    a->raw = (int8_t *)buf;
    a->q = (int8_t *)(buf + raw_bytes);
    a->scale = (float *)(buf + raw_bytes + q_bytes);
    a->off = (int32_t *)(buf + raw_bytes + q_bytes + g_bytes);
    return a->layout == QT_ACTS_STEPS ? (S + 15) / 16 : S;
}

void qt_matmul_with(const QTensor *w, const float *x, float *y, int S, int idot, QtKernel kernel) {
    const int64_t R = w->rows, C = w->cols;
    if (S <= 0 || R <= 0 || C <= 0) return;
    if (w->format == QT_F32 || !idot) {
        QtMatmulJob j;
        memset(&j, 0, sizeof j);
        j.w = w; j.x = x; j.y = y; j.S = S;
        j.rows_per_chunk = qt_float_rows_per_chunk(w, S);
        qt_parallel_chunks(qt_float_chunk, &j, (R + j.rows_per_chunk - 1) / j.rows_per_chunk);
        return;
    }
    if (S > QT_GEMM_PANEL) {
        for (int s = 0; s < S; s += QT_GEMM_PANEL)
            qt_matmul_with(w, x + (size_t)s * C, y + (size_t)s * R,
                           S - s < QT_GEMM_PANEL ? S - s : QT_GEMM_PANEL, idot, kernel);
        return;
    }
    QtMatmulJob j;
    qt_plan_int(&j, w, x, y, S, kernel);
    const int64_t act_chunks = qt_acts_buffers(&j);
    qt_parallel_phases(qt_acts_chunk, &j, act_chunks, qt_int_chunk, &j, j.nchunks);
}

/* Chunks of several jobs in one parallel region: job k's chunks follow job k-1's. */
typedef struct { QtMatmulJob *jobs; int n; } QtMultiJob;

static void qt_multi_chunk(void *p, int64_t c) {
    const QtMultiJob *m = p;
    int k = 0;
    while (k + 1 < m->n && c >= m->jobs[k].nchunks) c -= m->jobs[k++].nchunks;
    qt_int_chunk(&m->jobs[k], c);
}

void qt_matmul_multi(const QTensor *const *w, int n, const float *x, float *const *y, int S,
                     int idot) {
    if (n <= 0 || S <= 0) return;
    int same = n <= QT_MULTI_MAX && idot;
    for (int k = 0; k < n && same; k++)
        same = w[k]->format != QT_F32 && w[k]->rows > 0 && w[k]->cols > 0 &&
               w[k]->format == w[0]->format && w[k]->cols == w[0]->cols &&
               w[k]->group == w[0]->group;
    if (!same) {
        for (int k = 0; k < n; k++) qt_matmul_with(w[k], x, y[k], S, idot, QT_KERNEL_AUTO);
        return;
    }
    const int64_t C = w[0]->cols;
    if (S > QT_GEMM_PANEL) {
        for (int s = 0; s < S; s += QT_GEMM_PANEL) {
            float *ys[QT_MULTI_MAX];
            for (int k = 0; k < n; k++) ys[k] = y[k] + (size_t)s * w[k]->rows;
            qt_matmul_multi(w, n, x + (size_t)s * C, ys,
                            S - s < QT_GEMM_PANEL ? S - s : QT_GEMM_PANEL, idot);
        }
        return;
    }
    /* same format, group and inputs, so qt_plan_int gives every job the same kernel path and
       activation layout (it reads nothing else of w but its rows): one set of buffers serves all */
    QtMatmulJob jobs[QT_MULTI_MAX];
    int64_t total = 0;
    for (int k = 0; k < n; k++) {
        qt_plan_int(&jobs[k], w[k], x, y[k], S, QT_KERNEL_AUTO);
        total += jobs[k].nchunks;
    }
    const int64_t act_chunks = qt_acts_buffers(&jobs[0]);
    for (int k = 1; k < n; k++) jobs[k].acts = jobs[0].acts;   /* the same buffers, filled once */
    QtMultiJob m = { jobs, n };
    qt_parallel_phases(qt_acts_chunk, &jobs[0], act_chunks, qt_multi_chunk, &m, total);
}

void qt_matmul(const QTensor *w, const float *x, float *y, int S, int idot) {
    qt_matmul_with(w, x, y, S, idot, QT_KERNEL_AUTO);
}

#endif /* QUANT_IMPLEMENTATION */

#elif defined(QT_YMM_PASS) /* -----------------------------------------------------------------
   The 256-bit kernels, compiled once per instruction set from the include in the "256-bit
   kernels" section above: QT_YMM(name) is qt_avx2_name or qt_avxvnni_name, QT_YMM_DOTn(acc, u8,
   s8, ...) adds n planes of u8 × s8 products into the int32 lanes of acc. */

/* Dot of half h (0 or 1) of a chunk, added to acc; xp points at the chunk's activation codes. */
QT_YMM_TARGET QT_INLINE __m256i QT_YMM(half)(QtFormat f, __m256i acc, __m256i wb, const int8_t *xp,
                                             int h) {
    if (f == QT_INT8_ROW) {
        __m256i x = _mm256_load_si256((const __m256i *)(xp + 32 * h));
        return QT_YMM_DOT1(acc, _mm256_abs_epi8(wb), _mm256_sign_epi8(x, wb));
    }
    if (f == QT_INT2_ROW) {
        const __m256i m2 = _mm256_set1_epi8(0x03);
        return QT_YMM_DOT4(acc, _mm256_and_si256(wb, m2),
                           _mm256_load_si256((const __m256i *)(xp + 32 * h)),
                           _mm256_and_si256(_mm256_srli_epi16(wb, 2), m2),
                           _mm256_load_si256((const __m256i *)(xp + 64 + 32 * h)),
                           _mm256_and_si256(_mm256_srli_epi16(wb, 4), m2),
                           _mm256_load_si256((const __m256i *)(xp + 128 + 32 * h)),
                           _mm256_and_si256(_mm256_srli_epi16(wb, 6), m2),
                           _mm256_load_si256((const __m256i *)(xp + 192 + 32 * h)));
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    return QT_YMM_DOT2(acc, _mm256_and_si256(wb, m4),
                       _mm256_load_si256((const __m256i *)(xp + 32 * h)),
                       _mm256_and_si256(_mm256_srli_epi16(wb, 4), m4),
                       _mm256_load_si256((const __m256i *)(xp + 64 + 32 * h)));
}

/* Grouped int4 row, `lanes` (1, 2, 4 or 8) int32 lanes per group: 8 groups per step from `lanes`
   32-byte halves; group g goes to lane g mod 16 (the low or the high 8 of the 16 lanes). Serves na
   (1 or 2) activation rows per pass over the weight row (xq[j], xs[j], off[j] → out[j]): the loads
   and the nibble split are shared, each row's operations are the one-row pass's. */
QT_YMM_TARGET QT_INLINE void QT_YMM(i4_grouped)(const uint8_t *wr, const uint8_t *tailbuf,
                                                int64_t nch, const int8_t *const *xq,
                                                const float *const *xs, const int32_t *const *off,
                                                const float *ws, int64_t G, const int lanes,
                                                const int na, int pf, float *out) {
    __m256 lanes_lo[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() },
           lanes_hi[2] = { lanes_lo[0], lanes_lo[0] };
    for (int64_t g0 = 0; g0 < G; g0 += 8) {
        __m256i v[2][8];
        const int64_t h0 = g0 / 8 * lanes;
        for (int k = 0; k < lanes; k += 2)
            _mm_prefetch((const char *)(wr + 32 * (h0 + k) + pf), QT_PREFETCH_HINT);
        for (int k = 0; k < lanes; k++) {
            const int64_t hc = h0 + k;
            const __m256i wb = qt_avx2_load_half(wr, tailbuf, nch, hc);
            for (int j = 0; j < na; j++)
                v[j][k] = QT_YMM(half)(QT_INT4_GROUP, _mm256_setzero_si256(), wb,
                                       xq[j] + 128 * (hc / 2), (int)(hc & 1));
        }
        __m256 wsv;
        if (G - g0 >= 8) wsv = _mm256_loadu_ps(ws + g0);
        /* lanes past the last group add 0·(0·0) = +0, which leaves a lane (never -0) unchanged */
        else {
            float wsg[8] = { 0 };
            for (int i = 0; i < G - g0; i++) wsg[i] = ws[g0 + i];
            wsv = _mm256_loadu_ps(wsg);
        }
        for (int j = 0; j < na; j++) {
            __m256i isum = _mm256_sub_epi32(qt_avx2_group_sums(v[j], lanes),
                                            _mm256_loadu_si256((const __m256i *)(off[j] + g0)));
            __m256 t = _mm256_mul_ps(_mm256_loadu_ps(xs[j] + g0), _mm256_cvtepi32_ps(isum));
            __m256 p = _mm256_mul_ps(wsv, t);
            if (g0 & 8) lanes_hi[j] = _mm256_add_ps(lanes_hi[j], p);
            else lanes_lo[j] = _mm256_add_ps(lanes_lo[j], p);
        }
    }
    for (int j = 0; j < na; j++) {
        float lane[16];
        _mm256_storeu_ps(lane, lanes_lo[j]);
        _mm256_storeu_ps(lane + 8, lanes_hi[j]);
        out[j] = qt_lanes_sum(lane);
    }
}

QT_YMM_TARGET static void QT_YMM(rows)(const QTensor *w, const QtActs *a, int s0, int s1,
                                       int64_t r0, int64_t r1, float *y) {
    const QtFormat f = w->format;
    const int64_t rb = w->row_bytes, nch = (rb + 63) / 64, G = qt_groups_per_row(w);
    const int64_t xc = qt_chunk_inputs(f);
    const int lanes = (int)(w->group / 8);
    const int pf = qt_prefetch_bytes;
    _Alignas(64) uint8_t tailbuf[64];
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *wr = w->data + r * rb;
        const float *ws = w->scales + r * G;
        memset(tailbuf, 0, 64);
        memcpy(tailbuf, wr + 64 * (nch - 1), (size_t)(rb - 64 * (nch - 1)));
        /* grouped batches: two activation rows at a time (one activation row goes through the loop
           below: through this block it ran 7-9 % slower from the caches, 94-98 against 101-108
           GOP/s) */
        if (G > 1 && lanes <= 8 && s1 - s0 > 1) {
            for (int s = s0; s < s1; s += 2) {
                QtRowPair x;
                const int na = qt_row_pair(a, s, s1, &x);
                float acc[2];
#define QT_GROUPED(L) \
    (na == 2 ? QT_YMM(i4_grouped)(wr, tailbuf, nch, x.q, x.scale, x.off, ws, G, L, 2, pf, acc) \
             : QT_YMM(i4_grouped)(wr, tailbuf, nch, x.q, x.scale, x.off, ws, G, L, 1, pf, acc))
                switch (lanes) {
                case 1: QT_GROUPED(1); break;
                case 2: QT_GROUPED(2); break;
                case 4: QT_GROUPED(4); break;
                default: QT_GROUPED(8); break;
                }
#undef QT_GROUPED
                for (int j = 0; j < na; j++) y[(int64_t)(s + j) * w->rows + r] = acc[j];
            }
            continue;
        }
        for (int s = s0; s < s1; s++) {
            const int8_t *xq = a->q + (int64_t)s * a->qstride;
            const float *xs = a->scale + (int64_t)s * a->gstride;
            const int32_t *off = a->off + (int64_t)s * a->gstride;
            float acc = 0.0f;
            if (G == 1) {
                /* four accumulators: vpdpbusd chains two dependent products per half */
                __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
                int64_t c = 0;
                for (; c + 1 < nch; c += 2) {
                    _mm_prefetch((const char *)(wr + 64 * c + pf), QT_PREFETCH_HINT);
                    _mm_prefetch((const char *)(wr + 64 * c + 64 + pf), QT_PREFETCH_HINT);
                    a0 = QT_YMM(half)(f, a0, qt_avx2_load_half(wr, tailbuf, nch, 2 * c),
                                      xq + xc * c, 0);
                    a1 = QT_YMM(half)(f, a1, qt_avx2_load_half(wr, tailbuf, nch, 2 * c + 1),
                                      xq + xc * c, 1);
                    a2 = QT_YMM(half)(f, a2, qt_avx2_load_half(wr, tailbuf, nch, 2 * c + 2),
                                      xq + xc * (c + 1), 0);
                    a3 = QT_YMM(half)(f, a3, qt_avx2_load_half(wr, tailbuf, nch, 2 * c + 3),
                                      xq + xc * (c + 1), 1);
                }
                for (; c < nch; c++) {
                    a0 = QT_YMM(half)(f, a0, qt_avx2_load_half(wr, tailbuf, nch, 2 * c),
                                      xq + xc * c, 0);
                    a1 = QT_YMM(half)(f, a1, qt_avx2_load_half(wr, tailbuf, nch, 2 * c + 1),
                                      xq + xc * c, 1);
                }
                int32_t isum = qt_avx2_hsum(_mm256_add_epi32(_mm256_add_epi32(a0, a1),
                                                             _mm256_add_epi32(a2, a3))) -
                               off[0];
                acc += ws[0] * (xs[0] * (float)isum);
            } else if (lanes <= 8) {   /* one grouped activation row (decode) */
                switch (lanes) {
                case 1:
                    QT_YMM(i4_grouped)(wr, tailbuf, nch, &xq, &xs, &off, ws, G, 1, 1, pf, &acc);
                    break;
                case 2:
                    QT_YMM(i4_grouped)(wr, tailbuf, nch, &xq, &xs, &off, ws, G, 2, 1, pf, &acc);
                    break;
                case 4:
                    QT_YMM(i4_grouped)(wr, tailbuf, nch, &xq, &xs, &off, ws, G, 4, 1, pf, &acc);
                    break;
                default:
                    QT_YMM(i4_grouped)(wr, tailbuf, nch, &xq, &xs, &off, ws, G, 8, 1, pf, &acc);
                    break;
                }
            } else {
                const int64_t hpg = lanes / 8;   /* halves per group */
                float lane[16] = { 0 };
                for (int64_t g = 0; g < G; g++) {
                    __m256i v = _mm256_setzero_si256();
                    for (int64_t hc = g * hpg; hc < (g + 1) * hpg && hc < 2 * nch; hc++) {
                        if ((hc & 1) == 0)
                            _mm_prefetch((const char *)(wr + 32 * hc + pf), QT_PREFETCH_HINT);
                        v = QT_YMM(half)(f, v, qt_avx2_load_half(wr, tailbuf, nch, hc),
                                         xq + 128 * (hc / 2), (int)(hc & 1));
                    }
                    int32_t isum = qt_avx2_hsum(v) - off[g];
                    lane[g & 15] += ws[g] * (xs[g] * (float)isum);
                }
                acc = qt_lanes_sum(lane);
            }
            y[(int64_t)s * w->rows + r] = acc;
        }
    }
}

/* GEMM, 8 weight rows per vector: as qt_vnni_gemm_pack / _tile, with 32-byte steps. The int8
   codes are stored signed where QT_YMM_SIGNED_I8 (the product then takes |w| and x with w's sign),
   else xor 0x80. */
QT_YMM_TARGET static void QT_YMM(gemm_pack)(const QTensor *w, int64_t r0, int64_t n, int nb,
                                            int64_t bstride, uint8_t *pk, float *wsT) {
    const int64_t rb = w->row_bytes, nbk = (rb + 31) / 32, G = qt_groups_per_row(w),
                  last = rb - (nbk - 1) * 32;
    const int i8 = w->format == QT_INT8_ROW, pf = qt_prefetch_bytes;
    const __m256i m4 = _mm256_set1_epi8(0x0F),
                  flip = _mm256_set1_epi8(QT_YMM_SIGNED_I8 ? 0 : (char)0x80);
    _Alignas(32) uint8_t tailbuf[32];
    for (int b = 0; b < nb; b++) {
        const int64_t rows = n - 8 * b < 8 ? n - 8 * b : 8;
        const uint8_t *src = w->data + (r0 + 8 * b) * rb;
        uint8_t *dst = pk + b * bstride;
        for (int64_t c = 0; c < nbk; c++) {
            __m256i v[8];
            for (int i = 0; i < 8; i++) {
                const uint8_t *p = src + i * rb + 32 * c;
                if (i >= rows) v[i] = _mm256_setzero_si256();
                else if (c + 1 < nbk) {
                    if ((c & 1) == 0) _mm_prefetch((const char *)(p + pf), QT_PREFETCH_HINT);
                    v[i] = _mm256_loadu_si256((const __m256i *)p);
                } else {
                    memset(tailbuf, 0, 32);
                    memcpy(tailbuf, p, (size_t)last);
                    v[i] = _mm256_load_si256((const __m256i *)tailbuf);
                }
            }
            qt_avx2_transpose8(v);
            for (int m = 0; m < 8; m++) {
                if (i8)
                    _mm256_store_si256((__m256i *)(dst + 32 * (8 * c + m)),
                                       _mm256_xor_si256(v[m], flip));
                else {
                    _mm256_store_si256((__m256i *)(dst + 64 * (8 * c + m)),
                                       _mm256_and_si256(v[m], m4));
                    _mm256_store_si256((__m256i *)(dst + 64 * (8 * c + m) + 32),
                                       _mm256_and_si256(_mm256_srli_epi16(v[m], 4), m4));
                }
            }
        }
        /* the repack's unit is 16 columns: zero the odd 8-column block at the end */
        const int64_t written = nbk * 8 * qt_gemm_steps_per_col(w->format) * 32;
        memset(dst + written, 0, (size_t)(bstride - written));
        int64_t g = 0;
        if (rows == 8)   /* 8 groups of the 8 rows at a time, by the same transpose */
            for (; g + 8 <= G; g += 8) {
                __m256i v[8];
                for (int i = 0; i < 8; i++)
                    v[i] =
                        _mm256_loadu_si256((const __m256i *)(w->scales + (r0 + 8 * b + i) * G + g));
                qt_avx2_transpose8(v);
                for (int m = 0; m < 8; m++)
                    _mm256_store_si256((__m256i *)(wsT + (b * G + g + m) * 8), v[m]);
            }
        for (; g < G; g++)
            for (int i = 0; i < 8; i++)
                wsT[(b * G + g) * 8 + i] = i < rows ? w->scales[(r0 + 8 * b + i) * G + g] : 0.0f;
    }
}

/* The spec's p = ws·(xs·(isum - off)) of one group for 8 weight rows (qt_vnni_group_p's 256-bit
   twin): sums are the int32 group sums, off and xs the activation row's offset and scale. */
QT_YMM_TARGET QT_INLINE __m256 QT_YMM(group_p)(__m256i sums, const int32_t *off, const float *xs,
                                               __m256 ws) {
    return _mm256_mul_ps(
        ws, _mm256_mul_ps(_mm256_set1_ps(*xs),
                          _mm256_cvtepi32_ps(_mm256_sub_epi32(sums, _mm256_set1_epi32(*off)))));
}

/* A tile's outputs into y: row-format sums as they are (out[rb·SB + j]), group sums through the
   16 lanes' fixed tree (qt_lanes_sum's order). */
QT_YMM_TARGET QT_INLINE void QT_YMM(tile_store)(const QTensor *w, const __m256 *lanes, __m256 *out,
                                                int64_t G, const int RB, const int SB, int s0,
                                                int64_t r0, int64_t n, float *y) {
    QT_UNROLL for (int rb = 0; rb < RB; rb++) {
        const int64_t rows = n - 8 * rb;
        if (rows <= 0) continue;
        QT_UNROLL for (int j = 0; j < SB; j++) {
            __m256 o;
            if (G == 1) o = out[rb * SB + j];
            else {
                const __m256 *l = lanes + (rb * SB + j) * 16;
                __m256 b[8];
                QT_UNROLL for (int k = 0; k < 8; k++) b[k] = _mm256_add_ps(l[k], l[k + 8]);
                QT_UNROLL for (int k = 0; k < 4; k++) b[k] = _mm256_add_ps(b[k], b[k + 4]);
                o = _mm256_add_ps(_mm256_add_ps(b[0], b[2]), _mm256_add_ps(b[1], b[3]));
            }
            float *dst = y + (int64_t)(s0 + j) * w->rows + r0 + 8 * rb;
            if (rows >= 8) _mm256_storeu_ps(dst, o);
            else {
                float tmp[8];
                _mm256_storeu_ps(tmp, o);
                memcpy(dst, tmp, (size_t)rows * sizeof(float));
            }
        }
    }
}

QT_YMM_TARGET QT_INLINE void QT_YMM(gemm_tile)(const QTensor *w, const QtActs *a, const uint8_t *pk,
                                               int64_t bstride, const float *wsT, __m256 *lanes,
                                               int s0, const int RB, const int SB, int64_t r0,
                                               int64_t n, float *y, QtPrefetch *pf) {
    const int64_t G = qt_groups_per_row(w),
                  nsteps = qt_gemm_cols(w) * qt_gemm_steps_per_col(w->format);
    const int64_t gsteps = G == 1 ? nsteps : w->group / 4;
    const int i8 = w->format == QT_INT8_ROW;
    const int64_t sp = a->spad;
    const int32_t *xq = (const int32_t *)a->q + s0;   /* as in qt_vnni_gemm_tile */
    const float *xs = a->scale + s0;
    const int32_t *off = a->off + s0;
    /* lanes 0..15 start as 0 + p of groups 0..15 (below); only lanes no group reaches are zeroed
       here (zeroing all 16·RB·SB vectors per tile was 2 % of a 2,048-token prefill) */
    if (G > 1 && G < 16)
        for (int e = 0; e < RB * SB; e++)
            for (int k = (int)G; k < 16; k++) lanes[e * 16 + k] = _mm256_setzero_ps();
    __m256 out[QT_YMM_RB * QT_YMM_SB];
    QT_UNROLL for (int e = 0; e < RB * SB; e++) out[e] = _mm256_setzero_ps();
    for (int64_t g = 0; g < G; g++) {
        __m256i acc[QT_YMM_RB][QT_YMM_SB];
        QT_UNROLL for (int rb = 0; rb < RB; rb++) QT_UNROLL for (int j = 0; j < SB; j++)
            acc[rb][j] = _mm256_setzero_si256();
        const int64_t t1 = (g + 1) * gsteps < nsteps ? (g + 1) * gsteps : nsteps;
        /* two steps at a time (int4: both nibble planes of a column); a lone last int8 step pairs
           with the zero padding */
        for (int64_t t = g * gsteps; t < t1; t += 2) {
            qt_prefetch_step(pf);
            __m256i w0[QT_YMM_RB], w1[QT_YMM_RB];
            QT_UNROLL for (int rb = 0; rb < RB; rb++) {
                w0[rb] = _mm256_load_si256((const __m256i *)(pk + rb * bstride + 32 * t));
                w1[rb] = _mm256_load_si256((const __m256i *)(pk + rb * bstride + 32 * t + 32));
            }
            const int32_t *xt = xq + t * sp;
            QT_UNROLL for (int j = 0; j < SB; j++) {
                __m256i x0 = _mm256_set1_epi32(xt[j]), x1 = _mm256_set1_epi32(xt[sp + j]);
                QT_UNROLL for (int rb = 0; rb < RB; rb++) {
                    if (QT_YMM_SIGNED_I8 && i8)
                        acc[rb][j] =
                            QT_YMM_DOT1(QT_YMM_DOT1(acc[rb][j], _mm256_abs_epi8(w0[rb]),
                                                    _mm256_sign_epi8(x0, w0[rb])),
                                        _mm256_abs_epi8(w1[rb]), _mm256_sign_epi8(x1, w1[rb]));
                    else acc[rb][j] = QT_YMM_DOT2(acc[rb][j], w0[rb], x0, w1[rb], x1);
                }
            }
        }
        __m256 *lg = lanes + (g & 15);
        QT_UNROLL for (int rb = 0; rb < RB; rb++) {
            const __m256 wsv = _mm256_load_ps(wsT + (rb * G + g) * 8);
            QT_UNROLL for (int j = 0; j < SB; j++) {
                const __m256 p =
                    QT_YMM(group_p)(acc[rb][j], &off[g * sp + j], &xs[g * sp + j], wsv);
                if (G == 1) out[rb * SB + j] = _mm256_add_ps(_mm256_setzero_ps(), p);
                else
                    lg[(rb * SB + j) * 16] =
                        _mm256_add_ps(g < 16 ? _mm256_setzero_ps() : lg[(rb * SB + j) * 16], p);
            }
        }
    }
    QT_YMM(tile_store)(w, lanes, out, G, RB, SB, s0, r0, n, y);
}

#if QT_YMM_I16
/* The int4 tile for AVX2: the products of up to 8 steps are summed in int16, and one vpmaddwd
   widens them. Each step adds at most 2·15·127 = 3810 to an int16 lane, so 8 add at most 30480 <
   32767. The pairwise sum of QT_AVX2_DOT2 put one vpmaddwd on the two multiply pipes for every two
   vpmaddubsw; here it is one for every eight. Integer sums are exact in any order, so every
   group's int32 sum, and all that follows it, is what the pairwise tile computes. The int32 sums
   of a group's earlier blocks wait in memory (sum32): a second set of RB × SB registers would not
   fit beside the int16 ones in 16 ymm registers. */
/* The full tile's 8-step block as written out by hand. Given the C loop below, gcc either unrolled
   it and turned each accumulator's chain of adds into trees that spilled (16 ymm registers), or
   reloaded weights inside the loop; in a microbenchmark of the block alone (register- and
   L1-resident, Zen 3, 12 interleaved runs) the C version ran at 0.36-0.39 of the vpmaddubsw peak
   and this one at 0.51-0.55.
   Per step pair: the two steps' weight vectors of both row blocks (ymm8-11), then per activation
   row j its two broadcast steps (ymm12, 13), the two products of each row block summed (ymm14,
   15, or the x registers once free) and added to the accumulators acc[rb][j] = a{4rb + j}; in a
   block's first pair, the sum is the accumulator's start (no zeroing, one vpaddw fewer in 16: the
   vector pipes' issue slots are what bound this block). */
#define QT_AVX2_I16_ADD_TO(X, Y, A) "vpaddw %%ymm" #X ", %%ymm" #Y ", %%ymm" #Y "\n\t vpaddw %%ymm" #Y ", " A ", " A "\n\t"
#define QT_AVX2_I16_START(X, Y, A) "vpaddw %%ymm" #X ", %%ymm" #Y ", " A "\n\t"
#define QT_AVX2_I16_ROW(J, A0, A1, SUM) \
    "vpbroadcastd " #J "*4(%[px]), %%ymm12\n\t vpbroadcastd " #J "*4(%[px],%[spb]), %%ymm13\n\t" \
    "vpmaddubsw %%ymm12, %%ymm8, %%ymm14\n\t vpmaddubsw %%ymm13, %%ymm10, %%ymm15\n\t" SUM( \
        15, 14, A0) "vpmaddubsw %%ymm12, %%ymm9, %%ymm12\n\t vpmaddubsw %%ymm13, %%ymm11, " \
                    "%%ymm13\n\t" SUM(13, 12, A1)
/* ACC(i) names accumulator i: an operand of the asm statement or a fixed register; SUM is
   QT_AVX2_I16_START for a block's first pair, else QT_AVX2_I16_ADD_TO */
#define QT_AVX2_I16_PAIR_SUM(P, ACC, SUM) \
    "vmovdqa " #P "*64(%[pw]), %%ymm8\n\t vmovdqa " #P "*64(%[pw],%[bs]), %%ymm9\n\t" \
    "vmovdqa " #P "*64+32(%[pw]), %%ymm10\n\t vmovdqa " #P \
    "*64+32(%[pw],%[bs]), %%ymm11\n\t" QT_AVX2_I16_ROW(0, ACC(0), ACC(4), SUM) \
        QT_AVX2_I16_ROW(1, ACC(1), ACC(5), SUM) QT_AVX2_I16_ROW(2, ACC(2), ACC(6), SUM) \
            QT_AVX2_I16_ROW(3, ACC(3), ACC(7), SUM) "lea (%[px],%[spb],2), %[px]\n\t"
#define QT_AVX2_I16_PAIR(P, ACC) QT_AVX2_I16_PAIR_SUM(P, ACC, QT_AVX2_I16_ADD_TO)
#define QT_AVX2_I16_FIRST_PAIR(P, ACC) QT_AVX2_I16_PAIR_SUM(P, ACC, QT_AVX2_I16_START)
/* the 4 pairs of an 8-step block starting at pair P0 */
#define QT_AVX2_I16_BLOCK(P0, P1, P2, P3, ACC) \
    QT_AVX2_I16_FIRST_PAIR(P0, ACC) \
    QT_AVX2_I16_PAIR(P1, ACC) QT_AVX2_I16_PAIR(P2, ACC) QT_AVX2_I16_PAIR(P3, ACC)
#define QT_AVX2_ACC_OPERAND(i) "%[a" #i "]"
#define QT_AVX2_ACC_YMM(i) "%%ymm" #i

/* A whole group of 16 steps of the full tile, epilogue included, for group formats whose group is
   16 steps (64 columns): the two 8-step blocks, each widened to int32 by one vpmaddwd (the first
   block's sums wait in tmp), then per accumulator the group's p = ws·(xs·(isum - off)) added to
   its lane (LANE: the lane's old value, or a zero register for the first 16 groups: 0 + p) and
   stored. Accumulator 4·rb + j (ymm0-7) is weight block rb, activation row j; its lane is
   (4·rb + j)·512 bytes past lane. In C, gcc kept the int32 sums and the epilogue's pointers on
   the stack between the blocks. */
#define QT_AVX2_I16_WIDEN(I) "vpmaddwd %[ones], %%ymm" #I ", %%ymm" #I "\n\t"
#define QT_AVX2_I16_SAVE(I) QT_AVX2_I16_WIDEN(I) "vmovdqa %%ymm" #I ", " #I "*32(%[tmp])\n\t"
#define QT_AVX2_I16_ADD(I) QT_AVX2_I16_WIDEN(I) "vpaddd " #I "*32(%[tmp]), %%ymm" #I ", %%ymm" #I "\n\t"
#define QT_AVX2_I16_P(R, WS, LANE) \
    "vpsubd %%ymm12, %%ymm" #R ", %%ymm" #R "\n\t vcvtdq2ps %%ymm" #R ", %%ymm" #R "\n\t" \
    "vmulps %%ymm13, %%ymm" #R ", %%ymm" #R "\n\t vmulps " WS ", %%ymm" #R ", %%ymm" #R "\n\t" \
    "vaddps " LANE(R) ", %%ymm" #R ", %%ymm" #R "\n\t vmovaps %%ymm" #R ", " #R \
                      "*512(%[lane])\n\t"
#define QT_AVX2_I16_ROWP(J, J4, LANE) \
    "vpbroadcastd " #J "*4(%[off]), %%ymm12\n\t vbroadcastss " #J \
    "*4(%[xs]), %%ymm13\n\t" QT_AVX2_I16_P(J, "%[ws0]", LANE) QT_AVX2_I16_P(J4, "%[ws1]", LANE)
#define QT_AVX2_LANE_OLD(R) #R "*512(%[lane])"
#define QT_AVX2_LANE_ZERO(R) "%%ymm15"
#define QT_AVX2_I16_EIGHT(OP) OP(0) OP(1) OP(2) OP(3) OP(4) OP(5) OP(6) OP(7)
#define QT_AVX2_I16_GROUP(LANE) \
    QT_AVX2_I16_BLOCK(0, 1, 2, 3, QT_AVX2_ACC_YMM) \
    QT_AVX2_I16_EIGHT(QT_AVX2_I16_SAVE) QT_AVX2_I16_BLOCK(4, 5, 6, 7, QT_AVX2_ACC_YMM) \
        QT_AVX2_I16_EIGHT( \
            QT_AVX2_I16_ADD) "vxorps %%xmm15, %%xmm15, %%xmm15\n\t" QT_AVX2_I16_ROWP(0, 4, LANE) \
            QT_AVX2_I16_ROWP(1, 5, LANE) QT_AVX2_I16_ROWP(2, 6, LANE) QT_AVX2_I16_ROWP(3, 7, LANE)

QT_YMM_TARGET QT_INLINE void QT_YMM(i16_group)(const uint8_t *pw, int64_t bstride,
                                               const int32_t *px, int64_t sp, const int32_t *off,
                                               const float *xs, const float *ws0, const float *ws1,
                                               __m256 *lane, int first16) {
    static const int16_t ones[16]
        __attribute__((aligned(32))) = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
    __m256i tmp[8];
#define QT_AVX2_I16_GROUP_OPERANDS \
    : [px] "+r"(px), "=m"(tmp)                                                                                          \
    : [pw] "r"(pw), [bs] "r"(bstride), [spb] "r"(sp * 4), [off] "r"(off), [xs] "r"(xs), [lane] "r"(lane), [tmp] "r"(tmp), \
      [ws0] "m"(*(const __m256 *)ws0), [ws1] "m"(*(const __m256 *)ws1), [ones] "m"(*(const __m256i *)ones)               \
    : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", \
      "xmm14", "xmm15", "memory"
    if (first16) __asm__ volatile(QT_AVX2_I16_GROUP(QT_AVX2_LANE_ZERO) QT_AVX2_I16_GROUP_OPERANDS);
    else __asm__ volatile(QT_AVX2_I16_GROUP(QT_AVX2_LANE_OLD) QT_AVX2_I16_GROUP_OPERANDS);
#undef QT_AVX2_I16_GROUP_OPERANDS
}

QT_YMM_TARGET QT_INLINE void QT_YMM(i16_block)(const uint8_t *pk, int64_t bstride,
                                               const int32_t *xt, int64_t sp, int64_t t0,
                                               int64_t t1, const int RB, const int SB,
                                               __m256i *sum32, int first, QtPrefetch *pf) {
    __m256i acc[QT_YMM_RB][QT_YMM_SB16];
    if (RB == 2 && SB == 4 && t1 - t0 == 8) {
        QT_UNROLL for (int k = 0; k < 4; k++) qt_prefetch_step(pf);
        __m256i a0, a1, a2, a3, a4, a5, a6, a7;   /* set by the block's first pair */
        const uint8_t *pw = pk + 32 * t0;
        const int32_t *px = xt + t0 * sp;
        __asm__(QT_AVX2_I16_BLOCK(0, 1, 2, 3, QT_AVX2_ACC_OPERAND)
                : [a0] "=&x"(a0), [a1] "=&x"(a1), [a2] "=&x"(a2), [a3] "=&x"(a3), [a4] "=&x"(a4),
                  [a5] "=&x"(a5), [a6] "=&x"(a6), [a7] "=&x"(a7), [px] "+r"(px)
                : [pw] "r"(pw), [bs] "r"(bstride), [spb] "r"(sp * 4)
                : "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "memory");
        acc[0][0] = a0; acc[0][1] = a1; acc[0][2] = a2; acc[0][3] = a3;
        acc[1][0] = a4; acc[1][1] = a5; acc[1][2] = a6; acc[1][3] = a7;
    } else {
        QT_UNROLL for (int rb = 0; rb < RB; rb++) QT_UNROLL for (int j = 0; j < SB; j++)
            acc[rb][j] = _mm256_setzero_si256();
        for (int64_t t = t0; t < t1; t += 2) {
            qt_prefetch_step(pf);
            __m256i w0[QT_YMM_RB], w1[QT_YMM_RB];
            QT_UNROLL for (int rb = 0; rb < RB; rb++) {
                w0[rb] = _mm256_load_si256((const __m256i *)(pk + rb * bstride + 32 * t));
                w1[rb] = _mm256_load_si256((const __m256i *)(pk + rb * bstride + 32 * t + 32));
            }
            QT_UNROLL for (int j = 0; j < SB; j++) {
                const __m256i x0 = _mm256_set1_epi32(xt[t * sp + j]),
                              x1 = _mm256_set1_epi32(xt[(t + 1) * sp + j]);
                QT_UNROLL for (int rb = 0; rb < RB; rb++) acc[rb][j] =
                    _mm256_add_epi16(_mm256_add_epi16(acc[rb][j], _mm256_maddubs_epi16(w0[rb], x0)),
                                     _mm256_maddubs_epi16(w1[rb], x1));
            }
    }
    }
    QT_UNROLL for (int rb = 0; rb < RB; rb++) QT_UNROLL for (int j = 0; j < SB; j++) {
        const __m256i s = _mm256_madd_epi16(acc[rb][j], QT_AVX2_ONES);
        sum32[rb * SB + j] = first ? s : _mm256_add_epi32(sum32[rb * SB + j], s);
    }
}

/* Steps [t0, t1) of one tile (activation rows s.., weight blocks pk) into its int32 sums; when
   they end group g (g ≥ 0), the group's epilogue: p = ws·(xs·(isum - off)) into lane g mod 16
   (for row formats, whose one group is the whole row, into lanes[rb·SB + j]: tile_store reads
   those as the outputs). */
QT_YMM_TARGET QT_INLINE void QT_YMM(tile_i16)(const QtActs *a, const uint8_t *pk, int64_t bstride,
                                              const float *wsT, int64_t G, __m256 *lanes,
                                              __m256i *sum32, int s, const int RB, const int SB,
                                              int64_t t0, int64_t t1, int first, int64_t g,
                                              QtPrefetch *pf) {
    const int64_t sp = a->spad;
    const int32_t *xq = (const int32_t *)a->q + s;
    /* a whole 64-column group */
    if (RB == 2 && SB == 4 && G > 1 && g >= 0 && first && t1 - t0 == 16) {
        QT_UNROLL for (int k = 0; k < 8; k++) qt_prefetch_step(pf);
        QT_YMM(i16_group)
        (pk + 32 * t0, bstride, xq + t0 * sp, sp, a->off + s + g * sp, a->scale + s + g * sp,
         wsT + g * 8, wsT + (G + g) * 8, lanes + (g & 15), g < 16);
        return;
    }
    for (int64_t t = t0; t < t1; t += 8) {
        if (t + 8 <= t1)
            QT_YMM(i16_block)(pk, bstride, xq, sp, t, t + 8, RB, SB, sum32, first && t == t0, pf);
        else QT_YMM(i16_block)(pk, bstride, xq, sp, t, t1, RB, SB, sum32, first && t == t0, pf);
    }
    if (g < 0) return;
    /* the group's activation scales and offsets, its weight scales, its lane: pointers set once,
       and the first 16 groups (whose lanes start at 0 + p) as a loop of their own, so that the
       epilogue is straight-line code */
    const float *xs = a->scale + s + g * sp;
    const int32_t *off = a->off + s + g * sp;
    const float *ws = wsT + g * 8;
    __m256 *lg = G == 1 ? lanes : lanes + (g & 15);
    const int stride = G == 1 ? 1 : 16;
#define QT_I16_EPILOGUE(ADD) \
    QT_UNROLL for (int rb = 0; rb < RB; rb++) { \
        const __m256 wsv = _mm256_load_ps(ws + rb * G * 8); \
        QT_UNROLL for (int j = 0; j < SB; j++) { \
            const __m256 p = QT_YMM(group_p)(sum32[rb * SB + j], &off[j], &xs[j], wsv); \
            __m256 *l = lg + (rb * SB + j) * stride; \
            *l = _mm256_add_ps(ADD, p); \
        } \
    }
    if (g < 16) { QT_I16_EPILOGUE(_mm256_setzero_ps()) }
    else { QT_I16_EPILOGUE(*l) }
#undef QT_I16_EPILOGUE
}

/* A k-block of one tile, through tile_i16: groups [g0, g1), each clipped to steps [t0, t1) (a
   long group spans several k-blocks). One function per tile shape: inlined into one, the twelve
   shapes' loops shared one register allocation and spilled their accumulators. */
QT_YMM_TARGET QT_INLINE void QT_YMM(kblock_i16)(const QtActs *a, const uint8_t *pk, int64_t bstride,
                                                const float *wsT, int64_t G, int64_t gsteps,
                                                int64_t nsteps, __m256 *lanes, __m256i *sum32,
                                                int s, const int RB, const int SB, int64_t g0,
                                                int64_t g1, int64_t t0, int64_t t1,
                                                QtPrefetch *pf) {
    for (int64_t g = g0; g < g1; g++) {
        const int64_t gs = g * gsteps, ge = gs + gsteps < nsteps ? gs + gsteps : nsteps;
        const int64_t t = gs > t0 ? gs : t0, te = ge < t1 ? ge : t1;
        QT_YMM(tile_i16)
        (a, pk, bstride, wsT, G, lanes, sum32, s, RB, SB, t, te, t == gs, te == ge ? g : -1, pf);
    }
}
typedef void (*QT_YMM(kblock_i16_fn))(const QtActs *, const uint8_t *, int64_t, const float *,
                                      int64_t, int64_t, int64_t, __m256 *, __m256i *, int, int64_t,
                                      int64_t, int64_t, int64_t, QtPrefetch *);
#define QT_I16_SHAPE(RB, SB) \
    QT_YMM_TARGET __attribute__((noinline)) static void QT_YMM(kblock_i16_##RB##x##SB)( \
        const QtActs *a, const uint8_t *pk, int64_t bstride, const float *wsT, int64_t G, \
        int64_t gsteps, int64_t nsteps, __m256 *lanes, __m256i *sum32, int s, int64_t g0, \
        int64_t g1, int64_t t0, int64_t t1, QtPrefetch *pf) { \
        QT_YMM(kblock_i16) \
        (a, pk, bstride, wsT, G, gsteps, nsteps, lanes, sum32, s, RB, SB, g0, g1, t0, t1, pf); \
    }
QT_I16_SHAPE(1, 1)
QT_I16_SHAPE(1, 2) QT_I16_SHAPE(1, 3) QT_I16_SHAPE(1, 4) QT_I16_SHAPE(2, 1) QT_I16_SHAPE(2, 2)
    QT_I16_SHAPE(2, 3) QT_I16_SHAPE(2, 4)
#undef QT_I16_SHAPE
        _Static_assert(QT_YMM_RB == 2 && QT_YMM_SB16 == 4, "the int4 AVX2 GEMM's shape table (and "
                                                           "its asm block) is for 2 x 4 tiles");
static const QT_YMM(kblock_i16_fn)
    QT_YMM(kblocks_i16)[2][4] = { { QT_YMM(kblock_i16_1x1), QT_YMM(kblock_i16_1x2),
                                    QT_YMM(kblock_i16_1x3), QT_YMM(kblock_i16_1x4) },
                                  { QT_YMM(kblock_i16_2x1), QT_YMM(kblock_i16_2x2),
                                    QT_YMM(kblock_i16_2x3), QT_YMM(kblock_i16_2x4) } };

/* The int4 GEMM of one repack block (nb blocks of 8 weight rows) against activation rows [s0, s1),
   in k-blocks of about 64 steps (whole groups, or 64 steps of a longer group or of a row format's
   one group): each k-block goes through every tile of activation rows before the next, so that
   its weights and activations (4 + 8 KB at S = 32) are read from L1 by all the tiles. Tile after
   tile over all the steps instead streamed the repacked block (98 KB for a 6144-wide row pair)
   from L2 for every tile. A k-block of whole groups also spreads a call's cost over several
   groups' epilogues. The tiles' int32 sums and float lanes wait in memory between k-blocks. */
QT_YMM_TARGET static void QT_YMM(gemm_i16)(const QTensor *w, const QtActs *a, const uint8_t *pk,
                                           int64_t bstride, const float *wsT, __m256 *lanes,
                                           __m256i *sum32, int s0, int s1, int nb, int64_t r0,
                                           int64_t n, float *y, QtPrefetch *pf) {
    enum { KSTEPS = 64 };
    const int64_t G = qt_groups_per_row(w), nsteps = qt_gemm_cols(w) * 2;
    const int64_t gsteps = G == 1 ? nsteps : w->group / 4;
    const int SB = QT_YMM_SB16, per_tile = QT_YMM_RB * QT_YMM_SB16;
    const int ntiles = (s1 - s0 + SB - 1) / SB;
    if (G > 1 && G < 16)
        for (int e = 0; e < ntiles * per_tile; e++)
            for (int k = (int)G; k < 16; k++) lanes[e * 16 + k] = _mm256_setzero_ps();
    const int64_t tile_lanes = (int64_t)per_tile * (G == 1 ? 1 : 16);
    const int64_t kg = gsteps < KSTEPS ? KSTEPS / gsteps : 1;   /* whole groups per k-block */
    for (int64_t g0 = 0; g0 < G; g0 += kg) {
        const int64_t g1 = g0 + kg < G ? g0 + kg : G;
        const int64_t end = g1 * gsteps < nsteps ? g1 * gsteps : nsteps;
        /* one pass when the k-block is whole groups */
        for (int64_t t = g0 * gsteps; t < end; t += KSTEPS) {
            const int64_t te = kg > 1 || t + KSTEPS > end ? end : t + KSTEPS;
            for (int tile = 0; tile < ntiles; tile++) {
                const int s = s0 + tile * SB, sb = s1 - s < SB ? s1 - s : SB;
                QT_YMM(kblocks_i16)
                [nb - 1][sb - 1](a, pk, bstride, wsT, G, gsteps, nsteps, lanes + tile * tile_lanes,
                                 sum32 + tile * per_tile, s, g0, g1, t, te, pf);
            }
            if (te == end) break;
        }
    }
    for (int tile = 0; tile < ntiles; tile++) {
        const int s = s0 + tile * SB, sb = s1 - s < SB ? s1 - s : SB;
        __m256 *lt = lanes + tile * tile_lanes;
        QT_YMM(tile_store)(w, lt, lt, G, nb, sb, s, r0, n, y);
    }
}
#endif

QT_YMM_TARGET static void QT_YMM(gemm)(const QTensor *w, const QtActs *a, int s0, int s1,
                                       int64_t r0, int64_t r1, float *y) {
    const int64_t G = qt_groups_per_row(w);
    const int i16 = QT_YMM_I16 && w->format != QT_INT8_ROW;
    const int SBMAX = i16 ? QT_YMM_SB16 : QT_YMM_SB;   /* activation rows per tile */
    const int64_t bstride = qt_gemm_cols_padded(w) * qt_gemm_steps_per_col(w->format) * 32;
    const size_t pk_bytes = (size_t)(QT_YMM_RB * bstride),
                 ws_bytes = (size_t)qt_round_up(QT_YMM_RB * G * 8 * 4, 64);
    const int tiles = (s1 - s0 + SBMAX - 1) / SBMAX;
    const int lane_tiles = i16 ? tiles : 1;   /* the int4 path keeps every tile's lanes and sums */
    const size_t lanes_bytes = (size_t)lane_tiles * QT_YMM_RB * SBMAX * 16 * 32;
    uint8_t *buf =
        qt_buf(QT_BUF_GEMM,
               pk_bytes + ws_bytes + lanes_bytes + (size_t)lane_tiles * QT_YMM_RB * SBMAX * 32,
               "GEMM scratch");
    uint8_t *pk = buf;
    float *wsT = (float *)(buf + pk_bytes);
    __m256 *lanes = (__m256 *)(buf + pk_bytes + ws_bytes);
    __m256i *sum32 = (__m256i *)(buf + pk_bytes + ws_bytes + lanes_bytes);
    (void)sum32;
    for (int64_t r = r0; r < r1; r += 8 * QT_YMM_RB) {
        const int64_t n = r1 - r < 8 * QT_YMM_RB ? r1 - r : 8 * QT_YMM_RB;
        const int nb = (int)((n + 7) / 8);
        QT_YMM(gemm_pack)(w, r, n, nb, bstride, pk, wsT);
        /* as above */
        const int64_t next_rows = w->rows - r - n < 8 * QT_YMM_RB ? w->rows - r - n : 8 * QT_YMM_RB;
#if QT_YMM_I16
        /* one pass over the steps for all the tiles: the prefetch spread over all of it */
        if (i16) {
            QtPrefetch pf =
                qt_prefetch_share(w, r + n, next_rows, 1, 1, 0, qt_gemm_cols(w) * tiles);
            QT_YMM(gemm_i16)(w, a, pk, bstride, wsT, lanes, sum32, s0, s1, nb, r, n, y, &pf);
            continue;
        }
#endif
        for (int s = s0; s < s1; s += SBMAX) {
            const int sb = s1 - s < SBMAX ? s1 - s : SBMAX;
            /* in address order (repack blocks of one row): the repack's order cost the AVX2 kernel
               5 % on the Zen 5 (gate shape, 2 threads, DRAM, medians of 20 runs: 2.305 → 2.415 ms;
               address order 2.323) */
            QtPrefetch pf =
                qt_prefetch_share(w, r + n, next_rows, 1, tiles, (s - s0) / SBMAX,
                                  qt_gemm_cols(w) * qt_gemm_steps_per_col(w->format) / 2);
#define QT_TILE(RB, SB) QT_YMM(gemm_tile)(w, a, pk, bstride, wsT, lanes, s, RB, SB, r, n, y, &pf)
            if (nb == 2) switch (sb) {
                case 1: QT_TILE(2, 1); break; case 2: QT_TILE(2, 2); break;
                case 3: QT_TILE(2, 3); break; default: QT_TILE(2, 4); break;
            } else switch (sb) {
                case 1: QT_TILE(1, 1); break; case 2: QT_TILE(1, 2); break;
                case 3: QT_TILE(1, 3); break; default: QT_TILE(1, 4); break;
            }
#undef QT_TILE
        }
    }
}


#else /* QT_NEON_PASS ------------------------------------------------------------------------------
   The NEON kernels, compiled once per instruction set from the include in the "NEON kernels"
   section above: QT_NEON(name) is qt_neon_name, qt_dotprod_name or qt_i8mm_name; QT_NEON_DOT(acc,
   a, b) adds sdot's lanes of a × b to acc; QT_NEON_HAS_ROWS: the pass has row kernels;
   QT_NEON_MMLA: its GEMM uses smmla. */

#if QT_NEON_HAS_ROWS
/* Piece b of a row (16 weight bytes wb; xp: the activation codes of its chunk + 16·(b mod 4))
   added to acc: int8 as it is, int4 as two nibble planes, int2 as four 2-bit planes (unsigned
   codes: the caller removes the bias with off). */
QT_NEON_TARGET QT_INLINE int32x4_t QT_NEON(piece)(QtFormat f, int32x4_t acc, uint8x16_t wb,
                                                  const int8_t *xp) {
#define QT_NEON_PLANE(u, x) acc = QT_NEON_DOT(acc, vreinterpretq_s8_u8(u), vld1q_s8(x))
    if (f == QT_INT8_ROW) QT_NEON_PLANE(wb, xp);
    else if (f == QT_INT2_ROW) {
        const uint8x16_t m2 = vdupq_n_u8(3);
        QT_NEON_PLANE(vandq_u8(wb, m2), xp);
        QT_NEON_PLANE(vandq_u8(vshrq_n_u8(wb, 2), m2), xp + 64);
        QT_NEON_PLANE(vandq_u8(vshrq_n_u8(wb, 4), m2), xp + 128);
        QT_NEON_PLANE(vshrq_n_u8(wb, 6), xp + 192);
    } else {
        QT_NEON_PLANE(vandq_u8(wb, vdupq_n_u8(0x0F)), xp);
        QT_NEON_PLANE(vshrq_n_u8(wb, 4), xp + 64);
    }
#undef QT_NEON_PLANE
    return acc;
}

QT_NEON_TARGET static void QT_NEON(rows)(const QTensor *w, const QtActs *a, int s0, int s1,
                                         int64_t r0, int64_t r1, float *y) {
    const QtFormat f = w->format;
    const int64_t rb = w->row_bytes, np = (rb + 15) / 16, G = qt_groups_per_row(w);
    const int64_t xc = qt_chunk_inputs(f);
    const int64_t m = w->group / 8;   /* grouped: 8-input lanes per group */
    const int pf = qt_prefetch_bytes;
    const int64_t gpad = qt_round_up(G, 4);
    const size_t isum_bytes = (size_t)(gpad + 4 * np) * sizeof(int32_t);
    int32_t *isum = G > 1 ? qt_buf(QT_BUF_ROWS, isum_bytes, "NEON group sums") : NULL;
    int32_t *lanes = isum ? isum + gpad : NULL;   /* every piece's lane sums (groups < 32 inputs) */
#define QT_NEON_X(b) (xq + xc * ((b) >> 2) + 16 * ((b) & 3))
    _Alignas(16) uint8_t tail[16];
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *wr = w->data + r * rb;
        const float *ws = w->scales + r * G;
        memset(tail, 0, 16);
        memcpy(tail, wr + 16 * (np - 1), (size_t)(rb - 16 * (np - 1)));
#define QT_NEON_W(b) ((b) + 1 < np ? vld1q_u8(wr + 16 * (b)) : vld1q_u8(tail))
        for (int s = s0; s < s1; s++) {
            const int8_t *xq = a->q + (int64_t)s * a->qstride;
            const float *xs = a->scale + (int64_t)s * a->gstride;
            const int32_t *off = a->off + (int64_t)s * a->gstride;
            if (G == 1) {   /* four accumulators: one chunk per step */
                int32x4_t a0 = vdupq_n_s32(0), a1 = a0, a2 = a0, a3 = a0;
                int64_t b = 0;
                for (; b + 4 < np; b += 4) {
                    __builtin_prefetch(wr + 16 * b + pf, 0, 2);
                    a0 = QT_NEON(piece)(f, a0, vld1q_u8(wr + 16 * b), QT_NEON_X(b));
                    a1 = QT_NEON(piece)(f, a1, vld1q_u8(wr + 16 * b + 16), QT_NEON_X(b + 1));
                    a2 = QT_NEON(piece)(f, a2, vld1q_u8(wr + 16 * b + 32), QT_NEON_X(b + 2));
                    a3 = QT_NEON(piece)(f, a3, vld1q_u8(wr + 16 * b + 48), QT_NEON_X(b + 3));
                }
                for (; b < np; b++) a0 = QT_NEON(piece)(f, a0, QT_NEON_W(b), QT_NEON_X(b));
                const int32_t is = vaddvq_s32(vaddq_s32(vaddq_s32(a0, a1), vaddq_s32(a2, a3)));
                const int32_t isum0 = is - off[0];
                float acc = 0.0f;
                acc += ws[0] * (xs[0] * (float)isum0);
                y[(int64_t)s * w->rows + r] = acc;
                continue;
            }
            if (m % 4 == 0) {   /* a group is m/4 whole pieces */
                const int64_t ppg = m / 4;
                for (int64_t g = 0; g < G; g++) {
                    int32x4_t v = vdupq_n_s32(0);
                    const int64_t b1 = (g + 1) * ppg < np ? (g + 1) * ppg : np;
                    for (int64_t b = g * ppg; b < b1; b++) {
                        if ((b & 3) == 0) __builtin_prefetch(wr + 16 * b + pf, 0, 2);
                        v = QT_NEON(piece)(f, v, QT_NEON_W(b), QT_NEON_X(b));
                    }
                    isum[g] = vaddvq_s32(v);
                }
            } else {   /* groups of 8, 16 or 24 inputs: each lane's sum, then m lanes per group */
                for (int64_t b = 0; b < np; b++) {
                    if ((b & 3) == 0) __builtin_prefetch(wr + 16 * b + pf, 0, 2);
                    vst1q_s32(lanes + 4 * b, QT_NEON(piece)(f, vdupq_n_s32(0), QT_NEON_W(b),
                                                            QT_NEON_X(b)));
                }
                for (int64_t g = 0; g < G; g++) {
                    const int64_t u1 = (g + 1) * m < 4 * np ? (g + 1) * m : 4 * np;
                    int32_t t = 0;
                    for (int64_t u = g * m; u < u1; u++) t += lanes[u];
                    isum[g] = t;
                }
            }
            for (int64_t g = G; g < gpad; g++) isum[g] = 0;
            y[(int64_t)s * w->rows + r] = qt_neon_combine(isum, off, xs, ws, G);
        }
#undef QT_NEON_W
    }
#undef QT_NEON_X
}
#endif /* QT_NEON_HAS_ROWS */

/* Activation rows per GEMM tile: 4 pairs for smmla (16 accumulators of 2×2), 4 rows for sdot
   (16 accumulators: 4 row pairs × 4). */
#define QT_NEON_SB (QT_NEON_MMLA ? 8 : 4)

/* One tile: the 8 repacked weight rows (pk, scales wsT) × SB activation rows from s (those from
   s1 on are computed on padding and dropped), the whole row. Per group: the exact int32 sums of
   every (weight row, activation row), as vectors of 4 weight rows; then the spec's
   p = ws·(xs·isum) into lane g mod 16 (lanes: 2·SB·16 vectors of scratch), vectorized over the 4
   rows; at the end the lanes' fixed tree. The per-row formats (one group) keep p in registers. */
QT_NEON_TARGET QT_INLINE void QT_NEON(gemm_tile)(const QTensor *w, const QtActs *a,
                                                 const int8_t *pk, const float *wsT,
                                                 float32x4_t *lanes, int s, int s1, const int SB,
                                                 int64_t r0, int64_t n, float *y) {
    const int64_t G = qt_groups_per_row(w), nkb = a->qstride / 8, sp = a->spad;
    const int64_t gkb = G == 1 ? nkb : w->group / 8;
    const int8_t *X = a->q + (int64_t)s * 8;   /* K-block kb of row s+j: X + 8·(kb·sp + j) */
    const float *xs = a->scale + s;            /* group g: xs[g·sp + j] */
    float32x4_t out[2][QT_NEON_SB];
    QT_UNROLL for (int q = 0; q < 2; q++)
        QT_UNROLL for (int j = 0; j < SB; j++) out[q][j] = vdupq_n_f32(0.0f);
    if (G > 1 && G < 16)
        for (int e = 0; e < 2 * SB; e++)
            for (int k = (int)G; k < 16; k++) lanes[e * 16 + k] = vdupq_n_f32(0.0f);
    for (int64_t g = 0; g < G; g++) {
        const int64_t k1 = (g + 1) * gkb < nkb ? (g + 1) * gkb : nkb;
        int32x4_t isum[2][QT_NEON_SB];   /* [quad of weight rows][activation row] */
#if QT_NEON_MMLA
        int32x4_t acc[4][QT_NEON_SB / 2];   /* [weight row pair][activation row pair]: 2×2 blocks */
        QT_UNROLL for (int rp = 0; rp < 4; rp++)
            QT_UNROLL for (int p = 0; p < SB / 2; p++) acc[rp][p] = vdupq_n_s32(0);
        for (int64_t kb = g * gkb; kb < k1; kb++) {
            const int8_t *pw = pk + 64 * kb, *px = X + 8 * kb * sp;
            int8x16_t wv[4];
            QT_UNROLL for (int rp = 0; rp < 4; rp++) wv[rp] = vld1q_s8(pw + 16 * rp);
            QT_UNROLL for (int p = 0; p < SB / 2; p++) {
                const int8x16_t xv = vld1q_s8(px + 16 * p);
                QT_UNROLL for (int rp = 0; rp < 4; rp++)
                    acc[rp][p] = vmmlaq_s32(acc[rp][p], wv[rp], xv);
            }
        }
        /* block [w0·x0, w0·x1, w1·x0, w1·x1]: the even lanes of two row pairs are activation row
           2p against 4 weight rows, the odd ones row 2p + 1 */
        QT_UNROLL for (int q = 0; q < 2; q++) QT_UNROLL for (int p = 0; p < SB / 2; p++) {
            isum[q][2 * p] = vuzp1q_s32(acc[2 * q][p], acc[2 * q + 1][p]);
            isum[q][2 * p + 1] = vuzp2q_s32(acc[2 * q][p], acc[2 * q + 1][p]);
        }
#else
        /* [weight row pair][activation row]: [r 0-3, r 4-7, r+1 0-3, r+1 4-7] (block inputs) */
        int32x4_t acc[4][QT_NEON_SB];
        QT_UNROLL for (int rp = 0; rp < 4; rp++)
            QT_UNROLL for (int j = 0; j < SB; j++) acc[rp][j] = vdupq_n_s32(0);
        for (int64_t kb = g * gkb; kb < k1; kb++) {
            const int8_t *pw = pk + 64 * kb, *px = X + 8 * kb * sp;
            int8x16_t wv[4];
            QT_UNROLL for (int rp = 0; rp < 4; rp++) wv[rp] = vld1q_s8(pw + 16 * rp);
            QT_UNROLL for (int j = 0; j < SB; j++) {
                const int8x8_t x8 = vld1_s8(px + 8 * j);
                const int8x16_t xv = vcombine_s8(x8, x8);
                QT_UNROLL for (int rp = 0; rp < 4; rp++)
                    acc[rp][j] = QT_NEON_DOT(acc[rp][j], wv[rp], xv);
            }
        }
        QT_UNROLL for (int q = 0; q < 2; q++) QT_UNROLL for (int j = 0; j < SB; j++)
            isum[q][j] = vpaddq_s32(acc[2 * q][j], acc[2 * q + 1][j]);
#endif
        QT_UNROLL for (int q = 0; q < 2; q++) {
            const float32x4_t wsv = vld1q_f32(wsT + g * 8 + 4 * q);
            QT_UNROLL for (int j = 0; j < SB; j++) {
                const float32x4_t xv = vdupq_n_f32(xs[g * sp + j]);
                const float32x4_t p = vmulq_f32(wsv, vmulq_f32(xv, vcvtq_f32_s32(isum[q][j])));
                if (G == 1) out[q][j] = vaddq_f32(vdupq_n_f32(0.0f), p);
                else {
                    float32x4_t *l = lanes + (q * SB + j) * 16 + (g & 15);
                    *l = vaddq_f32(g < 16 ? vdupq_n_f32(0.0f) : *l, p);
                }
            }
        }
    }
    if (G > 1)
        QT_UNROLL for (int q = 0; q < 2; q++) QT_UNROLL for (int j = 0; j < SB; j++) {
            const float32x4_t *l = lanes + (q * SB + j) * 16;
            float32x4_t b[8];
            QT_UNROLL for (int k = 0; k < 8; k++) b[k] = vaddq_f32(l[k], l[k + 8]);
            QT_UNROLL for (int k = 0; k < 4; k++) b[k] = vaddq_f32(b[k], b[k + 4]);
            out[q][j] = vaddq_f32(vaddq_f32(b[0], b[2]), vaddq_f32(b[1], b[3]));
        }
    QT_UNROLL for (int q = 0; q < 2; q++) {
        const int64_t rows = n - 4 * q;
        if (rows <= 0) continue;
        QT_UNROLL for (int j = 0; j < SB; j++) {
            if (s + j >= s1) break;
            float *dst = y + (int64_t)(s + j) * w->rows + r0 + 4 * q;
            if (rows >= 4) vst1q_f32(dst, out[q][j]);
            else {
                float tmp[4];
                vst1q_f32(tmp, out[q][j]);
                memcpy(dst, tmp, (size_t)rows * sizeof(float));
            }
        }
    }
}

QT_NEON_TARGET static void QT_NEON(gemm)(const QTensor *w, const QtActs *a, int s0, int s1,
                                         int64_t r0, int64_t r1, float *y) {
    const int64_t G = qt_groups_per_row(w), nkb = a->qstride / 8;
    const size_t pk_bytes = (size_t)qt_round_up(64 * nkb, 64);
    const size_t ws_bytes = (size_t)qt_round_up(G * 8 * 4, 64);
    const size_t lanes_bytes = 2 * QT_NEON_SB * 16 * sizeof(float32x4_t);
    uint8_t *buf = qt_buf(QT_BUF_GEMM, pk_bytes + ws_bytes + lanes_bytes, "GEMM scratch");
    int8_t *pk = (int8_t *)buf;
    float *wsT = (float *)(buf + pk_bytes);
    float32x4_t *lanes = (float32x4_t *)(buf + pk_bytes + ws_bytes);
    for (int64_t r = r0; r < r1; r += QT_NEON_ROWS_PER_BLOCK) {
        const int64_t n = r1 - r < QT_NEON_ROWS_PER_BLOCK ? r1 - r : QT_NEON_ROWS_PER_BLOCK;
        qt_neon_gemm_pack(w, r, n, nkb, pk, wsT);
        for (int s = s0; s < s1; s += QT_NEON_SB) {   /* s - s0 stays even: smmla's row pairs */
            const int half = s1 - s <= QT_NEON_SB / 2;
            if (half) QT_NEON(gemm_tile)(w, a, pk, wsT, lanes, s, s1, QT_NEON_SB / 2, r, n, y);
            else QT_NEON(gemm_tile)(w, a, pk, wsT, lanes, s, s1, QT_NEON_SB, r, n, y);
        }
    }
}

#endif /* QT_NEON_PASS */

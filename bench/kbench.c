/* kbench — matmul kernel throughput against the machine's plain read bandwidth.

   Weights live in one large arena (> 1 GB, far beyond the caches) that the measured kernels cycle
   through, so every byte comes from DRAM. Each kernel figure is paired, in the same run and
   interleaved with it, with a plain read (a vectorized sum) of exactly the same bytes split across
   the threads the same way; the ratio kernel/read is the figure to quote (absolute GB/s move a lot
   on shared machines). Medians over REPS interleaved repetitions.

   Usage: ./bench/kbench [--quick] [--ffn | --l2 | --pfscan | --threading | --gemm | --mix] [--prefetch BYTES] [--kernel NAME]
     --quick      fewer repetitions and shapes (smoke test)
     --ffn        only the expert FFN table      --l2   only the cache-resident GOP/s table
     --kernel     the integer kernel (auto, vnni, avxvnni, avx2, scalar) instead of the best one
     --pfscan     only the prefetch distance scan
     --threading  only the thread wake-up comparison
     --mix        what other instructions cost next to vpdpbusd zmm (AVX-512 VNNI): a register-resident
                  loop of 24 of them, alone and with each addition, 1 thread, TSC cycles per iteration;
                  then one group of the group-64 GEMM tile, with and without its epilogue. Without
                  AVX-512 VNNI, the same next to vpmaddubsw ymm for the AVX2 int4 GEMM: its vpaddw,
                  broadcasts and loads, then the tile's 8-step block and a whole group-64 group
                  with its epilogue
     --gemm       batches: the peak of the int8 multiply-add instruction the kernel is built on
                  (the best one, or --kernel's; register-resident), then GOP/s of the engine's
                  expert FFN (ffn_swiglu) and
                  of the dense shapes at S = 1..64; last line "bench: int4-gemm-2t ratio=R" (expert FFN at S = 32,
                  2 threads, the lower of int4-row and int4-g64, over the 2-thread peak measured
                  just before each repetition: the median of the per-repetition ratios)
   Last line otherwise: "bench: int4-ffn-2t ratio=R" (the int4 expert FFN, S=1, 2 threads, vs the
   plain read; the lower of the per-row and group-64 variants). */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "glm.c"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <x86intrin.h>

static int REPS = 7;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- The arena ----------------------------------------------------------------------------- */

static uint8_t *arena;
static size_t arena_size;

/* At least `bytes` of memory in 2 MiB pages, as the engine keeps weights (its slots, its resident
   tensors): fewer first-touch faults and TLB misses. Exits when there is none. */
static void *alloc_huge(size_t bytes) {
    const size_t huge = (size_t)2 << 20, n = (bytes + huge - 1) / huge * huge;
    void *p = aligned_alloc(huge, n);
    if (!p) { fprintf(stderr, "kbench: cannot allocate %zu MB\n", n >> 20); exit(1); }
    madvise(p, n, MADV_HUGEPAGE);
    return p;
}

static void arena_init(size_t bytes) {
    arena_size = bytes;
    arena = alloc_huge(bytes);
    #pragma omp parallel
    {
        uint64_t st =
            0x9E3779B97F4A7C15ull ^ (uint64_t)(omp_get_thread_num() + 1) * 0x100000001B3ull;
#pragma omp for schedule(static)
        for (size_t i = 0; i < bytes / 8; i++) {
            st ^= st << 13; st ^= st >> 7; st ^= st << 17;
            ((uint64_t *)arena)[i] = st;
        }
    }
}

/* A byte range read by the plain-read baseline. */
typedef struct { const uint8_t *p; size_t n; } Range;

/* Sum of 64-bit words over this thread's share of each range (the same contiguous split the
   kernels use for rows): one sequential stream per thread, the ideal the kernels aim at. */
static uint64_t plain_read(const Range *r, int nr) {
    uint64_t total = 0;
    #pragma omp parallel reduction(+ : total)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        uint64_t acc[8] = { 0 };
        for (int k = 0; k < nr; k++) {
            size_t words = r[k].n / 64;
            size_t w0 = words * t / nt, w1 = words * (t + 1) / nt;
            const uint64_t *p = (const uint64_t *)r[k].p;
            for (size_t i = w0; i < w1; i++)
                for (int j = 0; j < 8; j++) acc[j] += p[8 * i + j];
        }
        for (int j = 0; j < 8; j++) total += acc[j];
    }
    return total;
}

static volatile uint64_t sink;

/* ---- Tensors carved from the arena --------------------------------------------------------- */

static float *scale_pool;
static size_t scale_pool_n, scale_pool_used;

static QTensor carve(QtFormat f, int64_t group, int64_t rows, int64_t cols, size_t *offset) {
    QTensor t = qt_view(f, group, rows, cols, arena + *offset, NULL);
    size_t bytes = (size_t)(rows * t.row_bytes);
    if (*offset + bytes > arena_size) { fprintf(stderr, "kbench: arena too small\n"); exit(1); }
    *offset += (bytes + 63) / 64 * 64;
    size_t ns = (size_t)(rows * qt_groups_per_row(&t));
    if (scale_pool_used + ns > scale_pool_n) {
        fprintf(stderr, "kbench: scale pool too small\n");
        exit(1);
    }
    t.scales = scale_pool + scale_pool_used;
    scale_pool_used += (ns + 15) / 16 * 16;
    return t;
}

static size_t tensor_bytes(const QTensor *t) {
    return (size_t)(t->rows * t->row_bytes) + (size_t)(t->rows * qt_groups_per_row(t)) * 4;
}

/* ---- Expert FFN (S = 1 decode) -------------------------------------------------------------- */

#define HID 6144
#define FFN 2048
#define MAXE 64

typedef FfnWeights Expert;   /* gate, up, down, as the engine holds an expert */

static void expert_ffn(const Expert *e, const float *x, float *g, float *u, float *y, QtKernel k) {
    qt_matmul_with(&e->gate, x, g, 1, 1, k);
    qt_matmul_with(&e->up, x, u, 1, 1, k);
    silu_mul(g, u, FFN);   /* the engine's SwiGLU gate */
    qt_matmul_with(&e->down, g, y, 1, 1, k);
}

/* Experts in consecutive arena slabs (gate, up, down data adjacent, as on disk); the scales of
   all experts in one pool. */
static int make_experts(Expert *ex, QtFormat f, int64_t group) {
    size_t off = 0;
    scale_pool_used = 0;
    int n = 0;
    for (; n < MAXE; n++) {
        size_t need = 3 * (size_t)FFN * qt_row_bytes(f, HID) + 192;
        if (off + need > arena_size) break;
        ex[n].gate = carve(f, group, FFN, HID, &off);
        ex[n].up = carve(f, group, FFN, HID, &off);
        ex[n].down = carve(f, group, HID, FFN, &off);
    }
    return n;
}

static void add_ranges(Range *r, int *nr, const QTensor *t) {
    r[(*nr)++] = (Range){ t->data, (size_t)(t->rows * t->row_bytes) };
    r[(*nr)++] =
        (Range){ (const uint8_t *)t->scales, (size_t)(t->rows * qt_groups_per_row(t)) * 4 };
}

typedef struct { double kernel_gbs, read_gbs, ratio; } Pair;

static Expert ffn_ex[MAXE];
static Range ffn_ranges[MAXE * 6];
static int ffn_ne, ffn_nr;
static size_t ffn_bytes;

static void ffn_setup(QtFormat f, int64_t group) {
    ffn_ne = make_experts(ffn_ex, f, group);
    ffn_nr = 0; ffn_bytes = 0;
    for (int e = 0; e < ffn_ne; e++) {
        add_ranges(ffn_ranges, &ffn_nr, &ffn_ex[e].gate);
        add_ranges(ffn_ranges, &ffn_nr, &ffn_ex[e].up);
        add_ranges(ffn_ranges, &ffn_nr, &ffn_ex[e].down);
        ffn_bytes += tensor_bytes(&ffn_ex[e].gate) + tensor_bytes(&ffn_ex[e].up) +
                     tensor_bytes(&ffn_ex[e].down);
    }
}

/* One pass of the FFN over every expert, then one plain read of the same bytes. */
static Pair ffn_rep(int threads, QtKernel k) {
    static float x[HID], g[FFN], u[FFN], y[HID];
    for (int i = 0; i < HID; i++) x[i] = sinf((float)i * 0.37f);
    omp_set_num_threads(threads);
    expert_ffn(&ffn_ex[0], x, g, u, y, k);   /* warm-up: scratch allocation, thread start */
    double t0 = now();
    for (int e = 0; e < ffn_ne; e++) expert_ffn(&ffn_ex[e], x, g, u, y, k);
    double t1 = now();
    sink += plain_read(ffn_ranges, ffn_nr);
    double t2 = now();
    Pair p = { ffn_bytes / (t1 - t0) * 1e-9, ffn_bytes / (t2 - t1) * 1e-9, 0 };
    p.ratio = p.kernel_gbs / p.read_gbs;
    return p;
}

static Pair bench_ffn(QtFormat f, int64_t group, int threads, QtKernel k) {
    ffn_setup(f, group);
    double kt[32], rt[32], ratio[32];
    for (int rep = 0; rep < REPS; rep++) {
        Pair p = ffn_rep(threads, k);
        kt[rep] = p.kernel_gbs; rt[rep] = p.read_gbs; ratio[rep] = p.ratio;
    }
    return (Pair){ median(kt, REPS), median(rt, REPS), median(ratio, REPS) };
}

/* Prefetch distance scan: the distances interleaved within each repetition. */
static void bench_prefetch_scan(void) {
    const int dist[] = { 0, 512, 1024, 2048, 4096, 8192 };
    const int nd = 6;
    printf("\nprefetch distance scan, int4 expert FFN (vnni/best kernel), ratio to the plain read, "
           "median of %d:\n",
           REPS);
    const struct {
        QtFormat f;
        int64_t g;
        const char *name;
    } fm[] = { { QT_INT4_ROW, 0, "int4-row" }, { QT_INT4_GROUP, 64, "int4-g64" } };
    for (int fi = 0; fi < 2; fi++) {
        ffn_setup(fm[fi].f, fm[fi].g);
        for (int th = 1; th <= 2; th++) {
            double r[8][32];
            for (int rep = 0; rep < REPS; rep++)
                for (int d = 0; d < nd; d++) {
                    qt_set_prefetch(dist[d]);
                    r[d][rep] = ffn_rep(th, QT_KERNEL_AUTO).ratio;
                }
            printf("  %-9s %dt", fm[fi].name, th);
            for (int d = 0; d < nd; d++) printf("  pf %4d: %.3f", dist[d], median(r[d], REPS));
            printf("\n");
            fflush(stdout);
        }
    }
    qt_set_prefetch(QT_PREFETCH_DEFAULT);
}

/* ---- Dense shapes: copies of one tensor cycling through the arena --------------------------- */

static Pair bench_dense(QtFormat f, int64_t group, int64_t rows, int64_t cols, int threads,
                        QtKernel k, int *copies_out) {
    static QTensor copies[256];
    static Range ranges[512];
    size_t off = 0;
    scale_pool_used = 0;
    int n = 0, nr = 0;
    size_t bytes = 0;
    while (n < 256 && off + (size_t)(rows * qt_row_bytes(f, cols)) + 64 <= arena_size &&
           (n < 2 || bytes < (768u << 20))) {
        copies[n] = carve(f, group, rows, cols, &off);
        add_ranges(ranges, &nr, &copies[n]);
        bytes += tensor_bytes(&copies[n]);
        n++;
    }
    *copies_out = n;
    omp_set_num_threads(threads);
    float *x = malloc(sizeof(float) * cols), *y = malloc(sizeof(float) * rows);
    for (int64_t i = 0; i < cols; i++) x[i] = cosf((float)i * 0.11f);
    double kt[32], rt[32], ratio[32];
    qt_matmul_with(&copies[0], x, y, 1, 1, k);
    for (int rep = 0; rep < REPS; rep++) {
        double t0 = now();
        for (int c = 0; c < n; c++) qt_matmul_with(&copies[c], x, y, 1, 1, k);
        double t1 = now();
        sink += plain_read(ranges, nr);
        double t2 = now();
        kt[rep] = bytes / (t1 - t0) * 1e-9;
        rt[rep] = bytes / (t2 - t1) * 1e-9;
        ratio[rep] = kt[rep] / rt[rep];
    }
    free(x); free(y);
    return (Pair){ median(kt, REPS), median(rt, REPS), median(ratio, REPS) };
}

/* ---- Cache-resident compute rate ------------------------------------------------------------ */

static double bench_l2(QtFormat f, int64_t group, int64_t rows, int64_t cols, int S, int threads,
                       QtKernel k) {
    QTensor t;
    if (qt_alloc(&t, f, group, rows, cols)) { fprintf(stderr, "kbench: out of memory\n"); exit(1); }
    for (int64_t i = 0; i < rows * t.row_bytes; i++) t.data[i] = (uint8_t)(i * 2654435761u >> 13);
    for (int64_t i = 0; i < rows * qt_groups_per_row(&t); i++) t.scales[i] = 0.01f;
    float *x = malloc(sizeof(float) * cols * S), *y = malloc(sizeof(float) * rows * S);
    for (int64_t i = 0; i < cols * S; i++) x[i] = sinf((float)i);
    omp_set_num_threads(threads);
    double v[32];
    for (int rep = 0; rep < REPS; rep++) {
        int calls = 0;
        double t0 = now(), t1;
        do { qt_matmul_with(&t, x, y, S, 1, k); calls++; t1 = now(); } while (t1 - t0 < 0.03);
        v[rep] = 2.0 * rows * cols * S * calls / (t1 - t0) * 1e-9;
    }
    free(x); free(y);
    qt_free(&t);
    return median(v, REPS);
}

/* ---- Thread wake-up: fork/join per matmul (stealing / static) vs a persistent OpenMP team ---- */

static void bench_threading(void) {
    const int64_t rows = 512, cols = 2048;   /* 0.5 MB int4: a small matmul, cache-resident */
    QTensor t;
    qt_alloc(&t, QT_INT4_GROUP, 64, rows, cols);
    for (int64_t i = 0; i < rows * t.row_bytes; i++) t.data[i] = (uint8_t)(i * 2654435761u >> 11);
    for (int64_t i = 0; i < rows * qt_groups_per_row(&t); i++) t.scales[i] = 0.01f;
    float x[2048], y[512];
    for (int i = 0; i < 2048; i++) x[i] = sinf((float)i);
    const QtKernel k = qt_get_kernel();
    const int calls = 2000;
    printf("\nthread wake-up, %lldx%lld int4-g64 matmul (0.5 MB, cache-resident), %s kernel, us "
           "per call (median of %d):\n",
           (long long)rows, (long long)cols, qt_kernel_name(k), REPS);
    printf("  OMP_WAIT_POLICY=%s GOMP_SPINCOUNT=%s\n",
           getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "(default)",
           getenv("GOMP_SPINCOUNT") ? getenv("GOMP_SPINCOUNT") : "(default)");
    printf("  thr  %-28s %-28s %s\n", "back to back: steal / static",
           "after 2 ms serial: steal / static", "omp persistent team + barrier");
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        double v[2][32], z[2][32], w[32];
        for (int rep = 0; rep < REPS; rep++) {
            for (int mode = 0; mode < 2; mode++) {
                qt_set_stealing(!mode);
                double t0 = now();
                for (int c = 0; c < calls; c++) qt_matmul_with(&t, x, y, 1, 1, k);
                v[mode][rep] = (now() - t0) / calls * 1e6;
                double acc = 0, t2 = 0;
                for (int c = 0; c < 30; c++) {
                    double s0 = now();
                    while (now() - s0 < 0.002) acc += 1;
                    double t1 = now();
                    qt_matmul_with(&t, x, y, 1, 1, k);
                    t2 += now() - t1;
                }
                sink += (uint64_t)acc;
                z[mode][rep] = t2 / 30 * 1e6;
            }
            qt_set_stealing(1);
            /* A persistent OpenMP team: activations prepared once, the threads stay in one region
               and meet at a barrier after each matmul (the floor for any fork/join scheme). */
            QtActs a;
            memset(&a, 0, sizeof a);
            const int64_t G = qt_groups_per_row(&t);
            a.layout = k == QT_KERNEL_SCALAR ? QT_ACTS_NATURAL : QT_ACTS_CHUNKS;
            a.qstride = qt_acts_stride(&t, a.layout); a.gstride = qt_round_up(G, 16);
            uint8_t *buf =
                aligned_alloc(64, (size_t)(cols + a.qstride + 8 * a.gstride + 64) / 64 * 64 + 64);
            a.raw = (int8_t *)buf;
            a.q = (int8_t *)buf + cols;
            a.scale = (float *)(buf + cols + a.qstride);
            a.off = (int32_t *)(a.scale + a.gstride);
            qt_prepare_acts_row(&t, x, &a, 0);
            QtRowsFn fn = k == QT_KERNEL_VNNI      ? qt_rows_vnni
                          : k == QT_KERNEL_AVXVNNI ? qt_avxvnni_rows
                          : k == QT_KERNEL_AVX2    ? qt_avx2_rows
                                                   : qt_rows_scalar;
            double t0 = now();
            #pragma omp parallel
            {
                int th = omp_get_thread_num(), nt = omp_get_num_threads();
                for (int c = 0; c < calls; c++) {
                    fn(&t, &a, 0, 1, rows * th / nt, rows * (th + 1) / nt, y);
                    #pragma omp barrier
                }
            }
            w[rep] = (now() - t0) / calls * 1e6;
            free(buf);
        }
        printf("  %dt   %8.2f / %-17.2f %8.2f / %-17.2f %8.2f\n", threads, median(v[0], REPS),
               median(v[1], REPS), median(z[0], REPS), median(z[1], REPS), median(w, REPS));
    }
    qt_free(&t);
}

static void bench_l2_table(int quick, QtKernel best) {
    /* Cache-resident compute rate: 256 x 2048 (int8 512 KB, int4 256 KB), S = 1 and S = 8. */
    printf("\ncache-resident (256x2048 weights, L2), GOP/s (2 ops per multiply-add):\n");
    printf("  %-10s %-7s %3s  %8s  %8s\n", "format", "kernel", "thr", "S=1", "S=8");
    const struct { QtFormat f; int64_t g; const char *name;
    } l2_fmts[] = { { QT_INT8_ROW, 0, "int8-row" },
                    { QT_INT4_ROW, 0, "int4-row" },
                    { QT_INT4_GROUP, 64, "int4-g64" },
                    { QT_INT2_ROW, 0, "int2-row" } };
    const QtKernel all[] = { QT_KERNEL_SCALAR, QT_KERNEL_AVX2, QT_KERNEL_AVXVNNI, QT_KERNEL_VNNI };
    for (size_t fi = 0; fi < 4; fi++)
        for (size_t ki = 0; ki < 4; ki++) {
            if (!qt_kernel_supported(all[ki]) || (quick && all[ki] != best)) continue;
            for (int th = 1; th <= 2; th++) {
                double a = bench_l2(l2_fmts[fi].f, l2_fmts[fi].g, 256, 2048, 1, th, all[ki]);
                double b = bench_l2(l2_fmts[fi].f, l2_fmts[fi].g, 256, 2048, 8, th, all[ki]);
                printf("  %-10s %-7s %3d  %8.1f  %8.1f\n", l2_fmts[fi].name,
                       qt_kernel_name(all[ki]), th, a, b);
                fflush(stdout);
            }
        }

}

/* ---- Batches (--gemm): GOP/s against the peak of the multiply-add instruction --------------- */

/* Register-resident loop of the instruction each kernel is built on: 12 independent accumulators
   (more than latency × throughput on the machines we have), it iterations. */
#define KB_TWELVE(op) op(0) op(1) op(2) op(3) op(4) op(5) op(6) op(7) op(8) op(9) op(10) op(11)
#define KB_CLOBBER "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13"
#define KB_CLOBBER_ALL KB_CLOBBER, "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", \
    "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31"
__attribute__((target("avx512f,avx512vnni"))) static void peak_loop_vnni(long it) {
#define KB_ZMM(i) "vpdpbusd %%zmm12, %%zmm13, %%zmm" #i "\n"
    __asm__ volatile("vpternlogd $0xff, %%zmm12, %%zmm12, %%zmm12\n vpternlogd $0xff, %%zmm13, "
                     "%%zmm13, %%zmm13\n"
                     "1:\n" KB_TWELVE(KB_ZMM) "dec %0\n jnz 1b\n"
                     : "+r"(it)
                     :
                     : KB_CLOBBER, "cc");
}
__attribute__((target("avx2,avxvnni"))) static void peak_loop_avxvnni(long it) {
#define KB_VEX(i) "%{vex%} vpdpbusd %%ymm12, %%ymm13, %%ymm" #i "\n"
    __asm__ volatile("vpcmpeqd %%ymm12, %%ymm12, %%ymm12\n vpcmpeqd %%ymm13, %%ymm13, %%ymm13\n"
                     "1:\n" KB_TWELVE(KB_VEX) "dec %0\n jnz 1b\n" : "+r"(it) : : KB_CLOBBER, "cc");
}
__attribute__((target("avx2"))) static void peak_loop_avx2(long it) {
#define KB_MADD(i) "vpmaddubsw %%ymm12, %%ymm13, %%ymm" #i "\n"
    __asm__ volatile("vpcmpeqd %%ymm12, %%ymm12, %%ymm12\n vpcmpeqd %%ymm13, %%ymm13, %%ymm13\n"
                     "1:\n" KB_TWELVE(KB_MADD) "dec %0\n jnz 1b\n" : "+r"(it) : : KB_CLOBBER, "cc");
}

/* GOP/s (2 ops per u8 x s8 product) of the instruction of kernel k on `threads` threads: one
   timing of `it` iterations, and the median of REPS of 20 million. */
static double bench_peak_once(QtKernel k, int threads, long it) {
    void (*loop)(long) = k == QT_KERNEL_VNNI      ? peak_loop_vnni
                         : k == QT_KERNEL_AVXVNNI ? peak_loop_avxvnni
                                                  : peak_loop_avx2;
    const double products = k == QT_KERNEL_VNNI ? 64 : 32;   /* per instruction */
    double t0 = now();
    #pragma omp parallel num_threads(threads)
    loop(it);
    return threads * (double)it * 12 * products * 2 / (now() - t0) * 1e-9;
}

static double bench_peak(QtKernel k, int threads, const char **name) {
    *name = k == QT_KERNEL_VNNI      ? "vpdpbusd zmm"
            : k == QT_KERNEL_AVXVNNI ? "vpdpbusd ymm (VEX)"
                                     : "vpmaddubsw ymm";
    double v[32];
    for (int rep = 0; rep < REPS; rep++) v[rep] = bench_peak_once(k, threads, 20000000);
    return median(v, REPS);
}

/* The cost of the group-64 GEMM tile's other instructions next to vpdpbusd zmm: 24 independent
   vpdpbusd per iteration (register-resident), alone and with one kind of instruction added; a
   figure near 1.00 means the addition issues alongside the multiply-adds for free (the stores go
   to a small static buffer; everything else stays in registers). */
#define KB_TWENTY_FOUR(op) KB_TWELVE(op) op(12) op(13) op(14) op(15) op(16) op(17) op(18) op(19) op(20) op(21) op(22) op(23)
#define KB_D(i) "vpdpbusd %%zmm28, %%zmm29, %%zmm" #i "\n"
#define KB_MIX(name, extra) \
    __attribute__((target("avx512f,avx512vnni"))) static void name(long it, const int *mem) { \
        __asm__ volatile("vpternlogd $0xff, %%zmm28, %%zmm28, %%zmm28\n vpternlogd $0xff, " \
                         "%%zmm29, %%zmm29, %%zmm29\n" \
                         "vmovdqa64 %%zmm28, %%zmm24\n vmovdqa64 %%zmm28, %%zmm31\n" \
                         "1:\n" KB_TWENTY_FOUR(KB_D) extra "dec %0\n jnz 1b\n" \
                         : "+r"(it) \
                         : "r"(mem) \
                         : KB_CLOBBER_ALL, "memory", "cc"); \
    }
KB_MIX(mix_none, "")
KB_MIX(mix_bcast, "vpbroadcastd (%1), %%zmm25\n vpbroadcastd 4(%1), %%zmm26\n vpbroadcastd 8(%1), "
                  "%%zmm27\n vpbroadcastd 12(%1), %%zmm25\n"
                  "vpbroadcastd 16(%1), %%zmm26\n vpbroadcastd 20(%1), %%zmm27\n vpbroadcastd "
                  "24(%1), %%zmm25\n vpbroadcastd 28(%1), %%zmm26\n"
                  "vpbroadcastd 32(%1), %%zmm27\n vpbroadcastd 36(%1), %%zmm25\n vpbroadcastd "
                  "40(%1), %%zmm26\n vpbroadcastd 44(%1), %%zmm27\n")
KB_MIX(mix_mask, "vpandd %%zmm31, %%zmm24, %%zmm25\n vpsrlw $4, %%zmm24, %%zmm26\n vpandd %%zmm31, "
                 "%%zmm26, %%zmm27\n"
                 "vpandd %%zmm31, %%zmm24, %%zmm25\n vpsrlw $4, %%zmm24, %%zmm26\n vpandd %%zmm31, "
                 "%%zmm26, %%zmm27\n")
KB_MIX(mix_cvt, "vcvtdq2ps %%zmm24, %%zmm25\n vcvtdq2ps %%zmm24, %%zmm26\n vcvtdq2ps %%zmm24, "
                "%%zmm27\n vcvtdq2ps %%zmm24, %%zmm25\n")
KB_MIX(mix_add, "vaddps %%zmm31, %%zmm24, %%zmm25\n vaddps %%zmm31, %%zmm24, %%zmm26\n vaddps "
                "%%zmm31, %%zmm24, %%zmm27\n vaddps %%zmm31, %%zmm24, %%zmm25\n")
KB_MIX(mix_mul, "vmulps %%zmm31, %%zmm24, %%zmm25\n vmulps %%zmm31, %%zmm24, %%zmm26\n vmulps "
                "%%zmm31, %%zmm24, %%zmm27\n vmulps %%zmm31, %%zmm24, %%zmm25\n")
KB_MIX(mix_load, "vmovdqa64 (%1), %%zmm25\n vmovdqa64 64(%1), %%zmm26\n")
KB_MIX(mix_shuffle,
       "vpunpckldq %%zmm31, %%zmm24, %%zmm25\n vpunpckhdq %%zmm31, %%zmm24, %%zmm26\n"
       "vpunpcklqdq %%zmm31, %%zmm24, %%zmm27\n vpunpckhqdq %%zmm31, %%zmm24, %%zmm25\n"
       "vshufi32x4 $0x44, %%zmm31, %%zmm24, %%zmm25\n vshufi32x4 $0xee, %%zmm31, %%zmm24, %%zmm26\n"
       "vshufi32x4 $0x88, %%zmm31, %%zmm24, %%zmm27\n vshufi32x4 $0xdd, %%zmm31, %%zmm24, "
       "%%zmm25\n")
KB_MIX(mix_store, "vmovdqa64 %%zmm24, 64(%1)\n vmovdqa64 %%zmm24, 128(%1)\n")
KB_MIX(mix_store_halves, "vmovdqa64 %%ymm24, 64(%1)\n vextracti64x4 $1, %%zmm24, 96(%1)\n"
                         "vmovdqa64 %%ymm24, 128(%1)\n vextracti64x4 $1, %%zmm24, 160(%1)\n")
KB_MIX(mix_fma, "vfmadd231ps %%zmm31, %%zmm24, %%zmm25\n vfmadd231ps %%zmm31, %%zmm24, %%zmm26\n")
/* the 24 multiply-adds reading their activation step by an embedded broadcast instead */
#define KB_E(i) "vpdpbusd " #i "*4(%1)%{1to16%}, %%zmm29, %%zmm" #i "\n"
__attribute__((target("avx512f,avx512vnni"))) static void mix_embedded(long it, const int *mem) {
    __asm__ volatile("vpternlogd $0xff, %%zmm29, %%zmm29, %%zmm29\n"
                     "1:\n" KB_TWENTY_FOUR(KB_E)
                     "dec %0\n jnz 1b\n" : "+r"(it) : "r"(mem) : KB_CLOBBER_ALL, "memory", "cc");
}

/* One group of the group-64 GEMM tile as straight-line code, register-resident: 8 weight columns
   (two nibble planes each) of 2 row blocks × 11 activation rows, i.e. 16 steps of 22 vpdpbusd
   (accumulators zmm0-21, activation steps broadcast from a small buffer), then the group's
   epilogue for the 22 tile elements, variant by variant: none (the accumulators only restart),
   the spec's p = ws·(xs·(isum - off)) added into a lane in memory, the same without the two
   multiplies, and with an fma spec (lane = fma(ws·xs, isum - off, lane)). */
#define KB_GSTEP(X) \
    "vpbroadcastd " X \
    "0(%1), %%zmm24\n vpdpbusd %%zmm24, %%zmm22, %%zmm0\n vpdpbusd %%zmm24, %%zmm23, %%zmm1\n" \
    "vpbroadcastd " X \
    "4(%1), %%zmm25\n vpdpbusd %%zmm25, %%zmm22, %%zmm2\n vpdpbusd %%zmm25, %%zmm23, %%zmm3\n" \
    "vpbroadcastd " X \
    "8(%1), %%zmm24\n vpdpbusd %%zmm24, %%zmm22, %%zmm4\n vpdpbusd %%zmm24, %%zmm23, %%zmm5\n" \
    "vpbroadcastd " X \
    "12(%1), %%zmm25\n vpdpbusd %%zmm25, %%zmm22, %%zmm6\n vpdpbusd %%zmm25, %%zmm23, %%zmm7\n" \
    "vpbroadcastd " X \
    "16(%1), %%zmm24\n vpdpbusd %%zmm24, %%zmm22, %%zmm8\n vpdpbusd %%zmm24, %%zmm23, %%zmm9\n" \
    "vpbroadcastd " X \
    "20(%1), %%zmm25\n vpdpbusd %%zmm25, %%zmm22, %%zmm10\n vpdpbusd %%zmm25, %%zmm23, %%zmm11\n" \
    "vpbroadcastd " X \
    "24(%1), %%zmm24\n vpdpbusd %%zmm24, %%zmm22, %%zmm12\n vpdpbusd %%zmm24, %%zmm23, %%zmm13\n" \
    "vpbroadcastd " X \
    "28(%1), %%zmm25\n vpdpbusd %%zmm25, %%zmm22, %%zmm14\n vpdpbusd %%zmm25, %%zmm23, %%zmm15\n" \
    "vpbroadcastd " X \
    "32(%1), %%zmm24\n vpdpbusd %%zmm24, %%zmm22, %%zmm16\n vpdpbusd %%zmm24, %%zmm23, %%zmm17\n" \
    "vpbroadcastd " X \
    "36(%1), %%zmm25\n vpdpbusd %%zmm25, %%zmm22, %%zmm18\n vpdpbusd %%zmm25, %%zmm23, %%zmm19\n" \
    "vpbroadcastd " X \
    "40(%1), %%zmm24\n vpdpbusd %%zmm24, %%zmm22, %%zmm20\n vpdpbusd %%zmm24, %%zmm23, %%zmm21\n"
#define KB_GCOL(X) \
    "vmovdqa64 " X "(%2), %%zmm26\n vmovdqa64 " X "+64(%2), %%zmm27\n" \
    "vpandd %%zmm31, %%zmm26, %%zmm22\n vpandd %%zmm31, %%zmm27, %%zmm23\n" KB_GSTEP( \
        "") "vpsrlw $4, %%zmm26, %%zmm26\n vpsrlw $4, %%zmm27, %%zmm27\n" \
            "vpandd %%zmm31, %%zmm26, %%zmm22\n vpandd %%zmm31, %%zmm27, %%zmm23\n" KB_GSTEP("64" \
                                                                                             "+")
#define KB_GROUP KB_GCOL("0") KB_GCOL("128") KB_GCOL("256") KB_GCOL("384") KB_GCOL("512") KB_GCOL("640") KB_GCOL("768") KB_GCOL("896")
#define KB_E_NONE(i) "vpxord %%zmm" #i ", %%zmm" #i ", %%zmm" #i "\n"
#define KB_E_SPEC(i) \
    "vpsubd " #i "*4(%1)%{1to16%}, %%zmm" #i ", %%zmm30\n vcvtdq2ps %%zmm30, %%zmm30\n" \
    "vmulps 128+" #i "*4(%1)%{1to16%}, %%zmm30, %%zmm30\n vmulps %%zmm29, %%zmm30, %%zmm30\n" \
    "vaddps " #i "*1024(%3), %%zmm30, %%zmm30\n vmovaps %%zmm30, " #i "*1024(%3)\n" KB_E_NONE(i)
#define KB_E_NOMUL(i) "vpsubd " #i "*4(%1)%{1to16%}, %%zmm" #i ", %%zmm30\n vcvtdq2ps %%zmm30, %%zmm30\n"           \
    "vaddps " #i "*1024(%3), %%zmm30, %%zmm30\n vmovaps %%zmm30, " #i "*1024(%3)\n" KB_E_NONE(i)
#define KB_E_FMA(i) \
    "vpsubd " #i "*4(%1)%{1to16%}, %%zmm" #i ", %%zmm30\n vcvtdq2ps %%zmm30, %%zmm30\n" \
    "vmulps 128+" #i "*4(%1)%{1to16%}, %%zmm29, %%zmm26\n vfmadd213ps " #i \
    "*1024(%3), %%zmm26, %%zmm30\n" \
    "vmovaps %%zmm30, " #i "*1024(%3)\n" KB_E_NONE(i)
#define KB_TWENTY_TWO(op) KB_TWELVE(op) op(12) op(13) op(14) op(15) op(16) op(17) op(18) op(19) op(20) op(21)
#define KB_GMIX(name, E) \
    __attribute__((target("avx512f,avx512bw,avx512vnni"))) static void name( \
        long it, const int *mem, const char *w, float *lanes) { \
        __asm__ volatile("vpternlogd $0xff, %%zmm31, %%zmm31, %%zmm31\n vpabsb %%zmm31, " \
                         "%%zmm31\n vxorps %%zmm29, %%zmm29, %%zmm29\n" \
                         "1:\n" KB_GROUP KB_TWENTY_TWO(E) "dec %0\n jnz 1b\n" \
                         : "+r"(it) \
                         : "r"(mem), "r"(w), "r"(lanes) \
                         : KB_CLOBBER_ALL, "memory", "cc"); \
    }
KB_GMIX(gmix_none, KB_E_NONE)
KB_GMIX(gmix_spec, KB_E_SPEC)
KB_GMIX(gmix_nomul, KB_E_NOMUL)
KB_GMIX(gmix_fma, KB_E_FMA)

/* The AVX2 int4 GEMM's instruction mix: vpmaddubsw cannot accumulate, so each of its int16 results
   costs a vpaddw on the vector pipes as well (the tile sums up to 8 steps in int16:
   QT_YMM(i16_block) in quant.h), and each step broadcasts its activations and loads its weights. 12
   independent vpmaddubsw ymm per iteration, register-resident, alone and with the kernel's
   additions in its proportions (per 16 vpmaddubsw: 16 vpaddw, 8 vpbroadcastd, 4 loads); then the
   tile's own 8-step block (quant.h's QT_AVX2_I16_BLOCK, 64 vpmaddubsw) and a whole group-64 group
   with its epilogue, on L1-resident data. */
#define KB_M(i) "vpmaddubsw %%ymm12, %%ymm13, %%ymm" #i "\n"
#define KB_MIX2(name, extra) \
    __attribute__((target("avx2"))) static void name(long it, const int *mem, const uint8_t *w) { \
        (void)w; \
        __asm__ volatile("vpcmpeqd %%ymm12, %%ymm12, %%ymm12\n vpabsb %%ymm12, %%ymm13\n" \
                         "1:\n" KB_TWELVE(KB_M) extra "dec %0\n jnz 1b\n" \
                         : "+r"(it) \
                         : "r"(mem) \
                         : KB_CLOBBER, "xmm14", "xmm15", "memory", "cc"); \
    }
#define KB_ADDS2 "vpaddw %%ymm12, %%ymm13, %%ymm14\n vpaddw %%ymm13, %%ymm12, %%ymm15\n"
#define KB_ADDS12 KB_ADDS2 KB_ADDS2 KB_ADDS2 KB_ADDS2 KB_ADDS2 KB_ADDS2
#define KB_BCASTS6 \
    "vpbroadcastd (%1), %%ymm14\n vpbroadcastd 4(%1), %%ymm15\n vpbroadcastd 8(%1), %%ymm14\n" \
    "vpbroadcastd 12(%1), %%ymm15\n vpbroadcastd 16(%1), %%ymm14\n vpbroadcastd 20(%1), %%ymm15\n"
#define KB_LOADS3 "vmovdqa (%1), %%ymm14\n vmovdqa 32(%1), %%ymm15\n vmovdqa 64(%1), %%ymm14\n"
KB_MIX2(mix2_none, "")
KB_MIX2(mix2_add, KB_ADDS12)
KB_MIX2(mix2_bcast, KB_BCASTS6)
KB_MIX2(mix2_load, KB_LOADS3)
KB_MIX2(mix2_all, KB_ADDS12 KB_BCASTS6 KB_LOADS3)
/* the int4 tile's 8-step block: weights w (2 row blocks x 8 steps x 32 bytes, bs apart), 4
   activation rows of 8 steps (sp = 4 rows apart) */
__attribute__((target("avx2"))) static void mix2_block(long it, const int *mem, const uint8_t *w) {
    const int64_t bs = 512, spb = 16;
    for (long i = 0; i < it; i++) {
        const int32_t *px = mem;
        __asm__ volatile(QT_AVX2_I16_BLOCK(0, 1, 2, 3, QT_AVX2_ACC_YMM)
                         : [px] "+r"(px) : [pw] "r"(w), [bs] "r"(bs), [spb] "r"(spb)
                         : KB_CLOBBER, "xmm14", "xmm15", "memory");
    }
}

/* a whole group of the group-64 tile: the two 8-step blocks, their widening and the spec's epilogue
   into 8 lanes (quant.h's QT_AVX2_I16_GROUP) */
__attribute__((target("avx2"))) static void mix2_group(long it, const int *mem, const uint8_t *w) {
    static _Alignas(32) float lane[8 * 128], ws[16];
    static _Alignas(32) const int16_t ones[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
    __m256i tmp[8];
    const int64_t bs = 1024, spb = 16;
    for (long i = 0; i < it; i++) {
        const int32_t *px = mem;
        __asm__ volatile(QT_AVX2_I16_GROUP(QT_AVX2_LANE_OLD)
                         : [px] "+r"(px), "=m"(tmp)
                         : [pw] "r"(w), [bs] "r"(bs), [spb] "r"(spb), [off] "r"(mem),
                           [xs] "r"((const float *)mem + 8), [lane] "r"(lane), [tmp] "r"(tmp),
                           [ws0] "m"(*(const __m256 *)ws), [ws1] "m"(*(const __m256 *)(ws + 8)),
                           [ones] "m"(*(const __m256i *)ones)
                         : KB_CLOBBER, "xmm14", "xmm15", "memory");
    }
}

/* TSC cycles per call of fn(it, mem, w), the best of REPS */
static double kb_best_cycles(void (*fn)(long, const int *, const uint8_t *), long it,
                             const int *mem, const uint8_t *w) {
    double best = 1e30;
    for (int rep = 0; rep < REPS; rep++) {
        const uint64_t t0 = __rdtsc();
        fn(it, mem, w);
        const double t = (double)(__rdtsc() - t0) / it;
        if (t < best) best = t;
    }
    return best;
}

/* The AVX2 table: cycles per iteration, and each line's vpmaddubsw rate as a share of the rate
   alone (the --gemm peak): the ceiling of a kernel built from that mix. */
static void bench_mix_avx2(void) {
    static _Alignas(64) int mem[64];
    static _Alignas(64) uint8_t w[2048];
    for (int i = 0; i < 2048; i++) w[i] = (uint8_t)(i * 7 & 15);
    for (int i = 0; i < 64; i++) mem[i] = i * 0x01020304;
    const struct {
        void (*fn)(long, const int *, const uint8_t *);
        const char *name;
        int mb;
        long it;
    } mixes[] = { { mix2_none, "12 vpmaddubsw ymm", 12, 2000000 },
                  { mix2_add, "+ 12 vpaddw", 12, 2000000 },
                  { mix2_bcast, "+ 6 vpbroadcastd (memory)", 12, 2000000 },
                  { mix2_load, "+ 3 ymm loads", 12, 2000000 },
                  { mix2_all, "+ all three (the int4 tile's mix)", 12, 2000000 },
                  { mix2_block, "the int4 tile's 8-step block", 64, 400000 },
                  { mix2_group, "a group-64 group with its epilogue", 128, 200000 } };
    double base = 0;
    printf("instruction mix next to vpmaddubsw ymm, 1 thread, TSC cycles per iteration (best of "
           "%d);\n"
           "last column: vpmaddubsw per cycle as a share of the rate alone\n",
           REPS);
    for (size_t m = 0; m < sizeof mixes / sizeof mixes[0]; m++) {
        /* per vpmaddubsw */
        const double c = kb_best_cycles(mixes[m].fn, mixes[m].it, mem, w) / mixes[m].mb;
        if (m == 0) base = c;
        printf("  %-36s %6.2f  (%.2f)\n", mixes[m].name, c * mixes[m].mb, base / c);
    }
}

static void bench_mix(void) {
    if (!qt_kernel_supported(QT_KERNEL_VNNI)) {
        if (!qt_kernel_supported(QT_KERNEL_AVX2)) { printf("kbench: --mix needs AVX2\n"); return; }
        bench_mix_avx2();
        return;
    }
    static _Alignas(64) int mem[64];   /* the stores write mem[16..47] */
    const struct { void (*fn)(long, const int *); const char *name;
    } mixes[] = { { mix_none, "24 vpdpbusd zmm" },
                  { mix_bcast, "+ 12 vpbroadcastd (memory)" },
                  { mix_mask, "+ 6 vpandd/vpsrlw" },
                  { mix_cvt, "+ 4 vcvtdq2ps" },
                  { mix_add, "+ 4 vaddps" },
                  { mix_mul, "+ 4 vmulps" },
                  { mix_fma, "+ 2 vfmadd231ps" },
                  { mix_load, "+ 2 zmm loads" },
                  { mix_shuffle, "+ 8 shuffles (the repack's)" },
                  { mix_store, "+ 2 zmm stores" },
                  { mix_store_halves, "+ the same as 4 ymm stores" },
                  { mix_embedded, "24 with embedded broadcast" } };
    const long it = 2000000;
    double base = 0;
    printf("instruction mix next to vpdpbusd zmm, 1 thread, TSC cycles per iteration (best of "
           "%d):\n",
           REPS);
    for (size_t m = 0; m < sizeof mixes / sizeof mixes[0]; m++) {
        double best = 1e30;
        for (int rep = 0; rep < REPS; rep++) {
            const uint64_t t0 = __rdtsc();
            mixes[m].fn(it, mem);
            const double t = (double)(__rdtsc() - t0) / it;
            if (t < best) best = t;
        }
        if (m == 0) base = best;
        printf("  %-28s %6.2f  (%.2f x alone)\n", mixes[m].name, best, best / base);
    }
    static _Alignas(64) char wbuf[1024];
    static _Alignas(64) float lanes[22 * 256];
    static _Alignas(64) int steps[64];
    const struct {
        void (*fn)(long, const int *, const char *, float *);
        const char *name;
    } groups[] = { { gmix_none, "16 steps of 22 vpdpbusd" },
                   { gmix_spec, "+ the spec's epilogue" },
                   { gmix_nomul, "+ it without the 2 vmulps" },
                   { gmix_fma, "+ an fma spec's epilogue" } };
    printf("one group of the group-64 GEMM tile (2 x 16 weight rows, 11 activation rows), "
           "register-resident,\n"
           "TSC cycles per group (best of %d):\n",
           REPS);
    for (size_t m = 0; m < sizeof groups / sizeof groups[0]; m++) {
        double best = 1e30;
        for (int rep = 0; rep < REPS; rep++) {
            const uint64_t t0 = __rdtsc();
            groups[m].fn(it / 20, steps, wbuf, lanes);
            const double t = (double)(__rdtsc() - t0) / (it / 20);
            if (t < best) best = t;
        }
        if (m == 0) base = best;
        printf("  %-28s %6.1f  (%.2f x the steps alone)\n", groups[m].name, best, best / base);
    }
}

/* Expert FFN over S activation rows as the engine runs it (ffn_swiglu: gate, up, SwiGLU, down,
   with the process-wide kernel), experts cycling through the arena: the median GOP/s of REPS
   repetitions. With `paired`, each repetition follows a short peak measurement on the same
   threads, and *paired is the median of the per-repetition ratios FFN / peak: the host's speed
   drifts by 20-30 % over seconds (the same build's expert FFN moved 120-190 GOP/s within a
   session), so a peak taken once at the start compares the FFN with another phase of the host. */
static double bench_ffn_gemm(QtFormat f, int64_t group, int S, int threads, double *paired) {
    ffn_setup(f, group);
    float *x = malloc(sizeof(float) * HID * S), *g = malloc(sizeof(float) * FFN * S),
          *u = malloc(sizeof(float) * FFN * S);
    float *y = malloc(sizeof(float) * HID * S);
    for (int64_t i = 0; i < (int64_t)HID * S; i++) x[i] = sinf((float)i * 0.37f);
    omp_set_num_threads(threads);
    /* enough work per repetition, still beyond the caches */
    const int ne = S >= 16 ? 16 : ffn_ne;
    double v[32], r[32];
    for (int rep = 0; rep < REPS; rep++) {
        const double peak = paired ? bench_peak_once(qt_get_kernel(), threads, 5000000) : 0;
        double t0 = now();
        for (int e = 0; e < ne; e++) {
            const Expert *ex = &ffn_ex[(rep * ne + e) % ffn_ne];
            ffn_swiglu(ex, x, S, y, g, u, S);   /* g, u hold all S rows */
        }
        v[rep] = 2.0 * 3 * FFN * HID * S * ne / (now() - t0) * 1e-9;
        r[rep] = paired ? v[rep] / peak : 0;
    }
    free(x); free(g); free(u); free(y);
    if (paired) *paired = median(r, REPS);
    return median(v, REPS);
}

/* One dense shape over S rows, copies cycling through the arena. */
static double bench_dense_gemm(QtFormat f, int64_t group, int64_t rows, int64_t cols, int S,
                               int threads, QtKernel k) {
    static QTensor copies[64];
    size_t off = 0;
    scale_pool_used = 0;
    int n = 0;
    while (n < 64 && off + (size_t)(rows * qt_row_bytes(f, cols)) + 64 <= arena_size &&
           (size_t)n * rows * qt_row_bytes(f, cols) < (256u << 20))
        copies[n++] = carve(f, group, rows, cols, &off);
    float *x = malloc(sizeof(float) * cols * S), *y = malloc(sizeof(float) * rows * S);
    for (int64_t i = 0; i < cols * S; i++) x[i] = cosf((float)i * 0.11f);
    omp_set_num_threads(threads);
    qt_matmul_with(&copies[0], x, y, S, 1, k);
    double v[32];
    for (int rep = 0; rep < REPS; rep++) {
        int calls = 0;
        double t0 = now(), t1;
        do {
            qt_matmul_with(&copies[calls % n], x, y, S, 1, k);
            calls++;
            t1 = now();
        } while (t1 - t0 < 0.05 || calls < 2);
        v[rep] = 2.0 * rows * cols * S * calls / (t1 - t0) * 1e-9;
    }
    free(x); free(y);
    return median(v, REPS);
}

static void bench_gemm(int quick) {
    const QtKernel k = qt_get_kernel();
    if (k == QT_KERNEL_SCALAR) { printf("kbench: --gemm needs AVX2\n"); return; }
    const char *instr = "";
    const double peak1 = bench_peak(k, 1, &instr), peak2 = bench_peak(k, 2, &instr);
    printf("peak of %s (the %s kernels' multiply-add), register-resident, 12 chains: %.0f GOP/s on "
           "1 thread, %.0f on 2\n\n",
           instr, qt_kernel_name(k), peak1, peak2);
    const int all_S[] = { 1, 2, 4, 8, 16, 32, 64 }, quick_S[] = { 1, 8, 32 };
    const int *Ss = quick ? quick_S : all_S, nS = quick ? 3 : 7;
    printf("GOP/s (2 ops per multiply-add), %s kernel, weights beyond the caches; in brackets: "
           "share of the peak\n",
           qt_kernel_name(k));
    printf("  %-28s %3s", "shape", "thr");
    for (int i = 0; i < nS; i++) printf("  %10s%-3d", "S=", Ss[i]);
    printf("\n");
    double ratio = 1e9, paired[2] = { 0, 0 };
    const struct {
        QtFormat f;
        int64_t g;
        const char *name;
    } ffn_fmts[] = { { QT_INT4_ROW, 0, "int4-row" }, { QT_INT4_GROUP, 64, "int4-g64" } };
    for (int fi = 0; fi < 2; fi++)
        for (int th = 1; th <= 2; th++) {
            char label[64];
            snprintf(label, sizeof label, "expert FFN %s", ffn_fmts[fi].name);
            printf("  %-28s %3d", label, th);
            for (int i = 0; i < nS; i++) {
                const int S = Ss[i];
                const int at_r = S == 32 && th == 2;
                double v = bench_ffn_gemm(ffn_fmts[fi].f, ffn_fmts[fi].g, S, th,
                                          at_r ? &paired[fi] : NULL);
                printf("  %6.0f (%.2f)", v, v / (th == 1 ? peak1 : peak2));
                fflush(stdout);
                if (at_r && v / peak2 < ratio) ratio = v / peak2;
            }
            printf("\n");
        }
    const struct { const char *name; int64_t rows, cols; } shapes[] = {
        { "q_a 2048x6144", 2048, 6144 }, { "q_b 16384x2048", 16384, 2048 }, { "kv_a 576x6144", 576, 6144 },
        { "o_proj 6144x16384", 6144, 16384 }, { "dense gate 12288x6144", 12288, 6144 }, { "dense down 6144x12288", 6144, 12288 } };
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        if (quick && si > 1) break;
        printf("  %-28s %3d", shapes[si].name, 2);
        for (int i = 0; i < nS; i++) {
            const int S = Ss[i];
            double v =
                bench_dense_gemm(QT_INT4_GROUP, 64, shapes[si].rows, shapes[si].cols, S, 2, k);
            printf("  %6.0f (%.2f)", v, v / peak2);
            fflush(stdout);
        }
        printf("\n");
    }
    printf("  (dense shapes in int4-g64, as the GLM-5.2 bench fixture stores them)\n");
    const double r = paired[0] < paired[1] ? paired[0] : paired[1];
    printf("\nR: expert FFN at S = 32 on 2 threads over the 2-thread peak measured just before "
           "each repetition\n"
           "(median of %d such ratios): int4-row %.3f, int4-g64 %.3f; over the peak at the start "
           "of the run: %.3f\n",
           REPS, paired[0], paired[1], ratio);
    printf("\nbench: int4-gemm-2t ratio=%.3f\n", r);
}

int main(int argc, char **argv) {
    int quick = 0, threading_only = 0, ffn_only = 0, pfscan = 0, l2_only = 0, gemm = 0,
        prefetch = QT_PREFETCH_DEFAULT;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--threading")) threading_only = 1;
        else if (!strcmp(argv[i], "--ffn")) ffn_only = 1;
        else if (!strcmp(argv[i], "--pfscan")) pfscan = 1;
        else if (!strcmp(argv[i], "--l2")) l2_only = 1;
        else if (!strcmp(argv[i], "--gemm")) gemm = 1;
        else if (!strcmp(argv[i], "--mix")) { bench_mix(); return 0; }
        else if (!strcmp(argv[i], "--prefetch") && i + 1 < argc) prefetch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kernel") && i + 1 < argc) {
            QtKernel k;
            if (qt_kernel_parse(argv[++i], &k) || qt_set_kernel(k)) {
                fprintf(stderr, "kbench: --kernel %s: unknown, or this CPU lacks it\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr,
                    "kbench: unknown argument %s (use --quick, --ffn, --l2, --pfscan, --threading, "
                    "--gemm, --mix, --prefetch BYTES, --kernel NAME)\n",
                    argv[i]);
            return 2;
        }
    }
    qt_set_prefetch(prefetch);
    if (quick) REPS = 3;
    const QtKernel kernel = qt_get_kernel();   /* the best, or --kernel's */
    printf("kbench: kernel %s (avx2 %s, avxvnni %s, vnni %s), prefetch %d bytes, up to %d "
           "threads\n",
           qt_kernel_name(kernel), qt_kernel_supported(QT_KERNEL_AVX2) ? "yes" : "no",
           qt_kernel_supported(QT_KERNEL_AVXVNNI) ? "yes" : "no",
           qt_kernel_supported(QT_KERNEL_VNNI) ? "yes" : "no", prefetch, omp_get_max_threads());
    if (threading_only) { REPS = 5; bench_threading(); return 0; }
    if (l2_only) { bench_l2_table(quick, kernel); return 0; }

    scale_pool_n = (size_t)MAXE * (2 * FFN * (HID / 32) + HID * (FFN / 32)) + 4096;
    /* 256 MB of scales covers every dense case */
    if (scale_pool_n < (1u << 26)) scale_pool_n = 1u << 26;
    /* in 2 MiB pages, as the engine keeps them: an expert's scales follow its codes in its slot
       (the converter's layout), dense scales share their codes' allocation. With the scales in
       4 KiB pages the g64 FFN at S = 32 measured 0.46-0.49 of the peak on 1 thread against
       0.56-0.58 (TLB misses; 4 alternating pairs, 2026-12-03) */
    scale_pool = alloc_huge(scale_pool_n * sizeof(float));
    for (size_t i = 0; i < scale_pool_n; i++) scale_pool[i] = 0.001f + (float)(i % 97) * 1e-4f;
    const size_t ebytes = 3 * (size_t)FFN * HID / 2;   /* one int4 expert's codes */
    double t0 = now();
    arena_init((size_t)MAXE * (ebytes + 256));
    printf("arena: %.2f GB of weight codes, filled in %.1f s; medians of %d interleaved "
           "repetitions\n\n",
           arena_size / 1e9, now() - t0, REPS);

    if (pfscan) { bench_prefetch_scan(); return 0; }
    if (gemm) { bench_gemm(quick); return 0; }
    /* Expert FFN: gate/up [2048 x 6144], SwiGLU, down [6144 x 2048], S = 1, 64 experts cycling. */
    printf("expert FFN (gate+up+down, S=1, %d experts cycling, codes+scales counted):\n", MAXE);
    printf("  %-14s %-7s %3s  %8s  %8s  %6s\n", "format", "kernel", "thr", "kern GB/s", "read GB/s",
           "ratio");
    double ffn_ratio_2t = 1e9;
    const struct { QtFormat f; int64_t g; const char *name; } ffn_fmts[] = {
        { QT_INT4_ROW, 0, "int4-row" }, { QT_INT4_GROUP, 64, "int4-g64" } };
    QtKernel kernels[4]; int nk = 0;
    if (qt_kernel_supported(QT_KERNEL_VNNI)) kernels[nk++] = QT_KERNEL_VNNI;
    if (qt_kernel_supported(QT_KERNEL_AVXVNNI)) kernels[nk++] = QT_KERNEL_AVXVNNI;
    if (qt_kernel_supported(QT_KERNEL_AVX2)) kernels[nk++] = QT_KERNEL_AVX2;
    if (!nk) kernels[nk++] = QT_KERNEL_SCALAR;
    for (size_t fi = 0; fi < 2; fi++)
        for (int ki = 0; ki < (quick ? 1 : nk); ki++)
            for (int th = 1; th <= 2; th++) {
                Pair p = bench_ffn(ffn_fmts[fi].f, ffn_fmts[fi].g, th, kernels[ki]);
                printf("  %-14s %-7s %3d  %8.1f  %8.1f  %6.3f\n", ffn_fmts[fi].name,
                       qt_kernel_name(kernels[ki]), th, p.kernel_gbs, p.read_gbs, p.ratio);
                fflush(stdout);
                if (th == 2 && ki == 0 && p.ratio < ffn_ratio_2t) ffn_ratio_2t = p.ratio;
                if (ki == 0) {   /* the same with a plain static split (no work stealing) */
                    qt_set_stealing(0);
                    p = bench_ffn(ffn_fmts[fi].f, ffn_fmts[fi].g, th, kernels[ki]);
                    qt_set_stealing(1);
                    printf("  %-14s %-7s %3d  %8.1f  %8.1f  %6.3f   (static split, no stealing)\n",
                           ffn_fmts[fi].name, qt_kernel_name(kernels[ki]), th, p.kernel_gbs,
                           p.read_gbs, p.ratio);
                    fflush(stdout);
                }
            }

    if (ffn_only) { printf("\nbench: int4-ffn-2t ratio=%.3f\n", ffn_ratio_2t); return 0; }
    /* Dense shapes, the kernel, per format and thread count. */
    printf("\ndense shapes, %s kernel, S=1, copies cycling through >= 768 MB:\n",
           qt_kernel_name(kernel));
    printf("  %-22s %-10s %3s %6s  %8s  %8s  %6s\n", "shape", "format", "thr", "copies",
           "kern GB/s", "read GB/s", "ratio");
    const struct { const char *name; int64_t rows, cols; } shapes[] = {
        { "q_b 16384x2048", 16384, 2048 }, { "o_proj 6144x16384", 6144, 16384 }, { "kv_b 28672x512", 28672, 512 } };
    const struct { QtFormat f; int64_t g; const char *name;
    } dense_fmts[] = { { QT_INT8_ROW, 0, "int8-row" },
                       { QT_INT4_ROW, 0, "int4-row" },
                       { QT_INT4_GROUP, 64, "int4-g64" },
                       { QT_INT2_ROW, 0, "int2-row" } };
    for (size_t si = 0; si < 3; si++)
        for (size_t fi = 0; fi < 4; fi++) {
            if (quick && fi != 2) continue;
            for (int th = 1; th <= 2; th++) {
                int copies = 0;
                Pair p = bench_dense(dense_fmts[fi].f, dense_fmts[fi].g, shapes[si].rows,
                                     shapes[si].cols, th, kernel, &copies);
                printf("  %-22s %-10s %3d %6d  %8.1f  %8.1f  %6.3f\n", shapes[si].name,
                       dense_fmts[fi].name, th, copies, p.kernel_gbs, p.read_gbs, p.ratio);
                fflush(stdout);
            }
        }

    bench_l2_table(quick, kernel);

    if (!quick) bench_threading();
    printf("\nbench: int4-ffn-2t ratio=%.3f\n", ffn_ratio_2t);
    return 0;
}

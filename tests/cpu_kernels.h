/* cpu_kernels.h — which integer kernels the tests may run on this machine (tests only).

   The answer is quant.h's own (qt_kernel_supported: the check glm makes before it accepts KERNEL),
   narrowed by the environment variable TEST_CPU_FLAGS when it is set. TEST_CPU_FLAGS is a list of
   /proc/cpuinfo flag names standing for a smaller CPU, e.g. TEST_CPU_FLAGS="avx2 fma" for an AMD
   EPYC with AVX2 only: the suite then skips what such a machine lacks, so its skip paths can be
   proved on a bigger one. A fake list can only take kernels away, never add one the CPU lacks.
   glm itself never reads TEST_CPU_FLAGS.

     int test_kernel_available(QtKernel k, const char **needs);   1 if the tests should run k;
         *needs (may be NULL) names what k needs, for "SKIP vnni: this CPU has no AVX-512 VNNI".
     Kernels are enumerated as QT_KERNEL_SCALAR, ... while qt_kernel_name(k) is not "?". */
#ifndef CPU_KERNELS_H
#define CPU_KERNELS_H
#include <stdlib.h>
#include <string.h>
/* needs quant.h, included (with its implementation) before this file */

/* The CPU features each SIMD kernel needs, as /proc/cpuinfo spells them (quant.h checks the same
   ones with __builtin_cpu_supports). A kernel not listed needs a flag of its own name. */
static const struct { const char *kernel, *needs, *flags; } TEST_KERNEL_NEEDS[] = {
    { "avx2", "AVX2", "avx2" },
    { "vnni", "AVX-512 VNNI", "avx2 avx512f avx512bw avx512vl avx512_vnni" },
    { "avxvnni", "AVX-VNNI", "avx2 avx_vnni" },
    { "neon", "NEON (aarch64 asimd)", "asimd" },
    { "dotprod", "NEON dot product (asimddp)", "asimd asimddp" },
    { "i8mm", "NEON int8 matrix multiply (i8mm)", "asimd asimddp i8mm" },
};

/* 1 if the word `w` (length n) is in the space-separated list. */
static int test_flag_listed(const char *list, const char *w, size_t n) {
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        size_t len = strcspn(p, " \t,");
        if (len == n && !memcmp(p, w, n)) return 1;
        p += len;
    }
    return 0;
}

static int test_kernel_available(QtKernel k, const char **needs) {
    const char *name = qt_kernel_name(k), *flags = name;
    if (needs) *needs = name;
    for (size_t i = 0; i < sizeof TEST_KERNEL_NEEDS / sizeof TEST_KERNEL_NEEDS[0]; i++)
        if (test_flag_listed(TEST_KERNEL_NEEDS[i].kernel, name, strlen(name))) {
            flags = TEST_KERNEL_NEEDS[i].flags;
            if (needs) *needs = TEST_KERNEL_NEEDS[i].needs;
        }
    if (k == QT_KERNEL_AUTO || k == QT_KERNEL_SCALAR) return 1;
    if (!qt_kernel_supported(k)) return 0;
    const char *fake = getenv("TEST_CPU_FLAGS");
    if (!fake) return 1;
    for (const char *p = flags; *p;) {   /* every flag the kernel needs must be in the fake list */
        while (*p == ' ') p++;
        size_t len = strcspn(p, " ");
        if (len && !test_flag_listed(fake, p, len)) return 0;
        p += len;
    }
    return 1;
}

#endif

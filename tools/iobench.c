/* iobench: random expert-sized reads from model files, the access pattern of expert streaming.
   Not part of glm; build with  make tools/iobench

   usage: tools/iobench [--size BYTES] [--seconds S | --count N] [--threads 1,2] [--modes
                        direct4k,directhuge,buffered,buffered-cold,evict] [--seed N] FILE...

   Each read fetches --size bytes (default 18874368: the three int4 payloads of one GLM-5.2 expert,
   gate + up + down = 3 x 2048 x 6144 / 2) starting at a random expert: where a FILE is a safetensors
   file, the start of a random `mlp.experts.E.gate_proj.weight` (rounded down to 4 KiB for O_DIRECT);
   otherwise a random multiple of the size. Modes:
     direct4k       O_DIRECT into an ordinary 4 KiB-page buffer (MADV_NOHUGEPAGE), faulted in first
     directhuge     O_DIRECT into a 2 MiB-aligned buffer with MADV_HUGEPAGE, faulted in first
     buffered       pread through the page cache, whatever it holds now
     evict          only evict the files (verified with mincore) and report what stays cached
     buffered-cold  (each expert offset read at most once, so the page cache never serves a read)
                    the files are first evicted (fdatasync + POSIX_FADV_DONTNEED; eviction checked with
                    mincore on an mmap and reported), then pread
   One line per mode and thread count:
     iobench: mode=M threads=T size=B GB/s=X reads=N seconds=S [thp=...] [resident_before=...]
   Figures on shared virtual machines move a lot: compare modes within one run. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096ULL
#define HUGE_PAGE (2ULL << 20)

typedef struct {
    const char *path;
    uint64_t size;
    uint64_t *starts;     /* candidate read offsets */
    size_t nstarts;
} File;

typedef struct {
    File *files;
    int nfiles;
    uint64_t read_size;   /* bytes asked for */
    int direct, huge;
    double seconds;
    long count;
    uint64_t seed;
    /* buffered-cold: every expert offset at most once, in a shuffled order, so that no read is
       served by the page cache from an earlier read of the same run */
    int unique;
    int *order_file; uint64_t *order_off; long norder;
    _Atomic long next;
} Job;

typedef struct {
    Job *job;
    int id;
    _Atomic long *issued;
    long reads;
    uint64_t bytes;
    const char *error;
    int thp_ok;
} Worker;

static void die(const char *fmt, const char *arg) {
    fprintf(stderr, "iobench: error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    exit(1);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t xorshift(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    return *s = x;
}

/* Offsets of expert gate payloads in a safetensors file: scan the JSON header for
   `.mlp.experts.<E>.gate_proj.weight":{..."data_offsets":[B,E]`. A plain scan is enough here:
   this only chooses where to read, and a file without such names falls back to fixed slots. */
static void find_experts(File *f, int fd) {
    uint64_t n = 0;
    if (f->size < 8 || pread(fd, &n, 8, 0) != 8 || n == 0 || n > f->size - 8 || n > (256u << 20))
        return;
    char *hdr = malloc(n + 1);
    if (!hdr) return;
    if (pread(fd, hdr, n, 8) != (ssize_t)n) { free(hdr); return; }
    hdr[n] = 0;
    size_t cap = 0;
    for (const char *p = hdr; (p = strstr(p, ".gate_proj.weight\"")); p++) {
        const char *back = p;
        while (back > hdr && back[-1] != '"') back--;
        if (!strstr(back, ".mlp.experts.") || strstr(back, ".mlp.experts.") > p) continue;
        const char *d = strstr(p, "\"data_offsets\"");
        const char *close = strchr(p, '}');
        if (!d || !close || d > close) continue;
        d = strchr(d, '[');
        if (!d) continue;
        unsigned long long b = strtoull(d + 1, NULL, 10);
        uint64_t off = 8 + n + b;
        if (f->nstarts == cap) {
            cap = cap ? 2 * cap : 256;
            uint64_t *s = realloc(f->starts, cap * sizeof *s);
            if (!s) break;
            f->starts = s;
        }
        f->starts[f->nstarts++] = off;
    }
    free(hdr);
}

static void pick(Job *job, uint64_t *rng, int *file, uint64_t *offset) {
    File *f = &job->files[xorshift(rng) % (uint64_t)job->nfiles];
    *file = (int)(f - job->files);
    uint64_t off;
    if (f->nstarts) off = f->starts[xorshift(rng) % f->nstarts];
    else {
        uint64_t slots = f->size / job->read_size;
        off = slots ? (xorshift(rng) % slots) * job->read_size : 0;
    }
    off &= ~(PAGE - 1);
    if (off + job->read_size > f->size)
        off = f->size > job->read_size ? (f->size - job->read_size) & ~(PAGE - 1) : 0;
    *offset = off;
}

static int buffer_is_huge(void *buf, size_t len) {
    /* AnonHugePages of the mapping that holds buf, from /proc/self/smaps */
    FILE *fp = fopen("/proc/self/smaps", "r");
    if (!fp) return -1;
    char line[256];
    int inside = 0, result = 0;
    uintptr_t a = (uintptr_t)buf;
    while (fgets(line, sizeof line, fp)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = a >= lo && a < hi;
        } else if (inside && !strncmp(line, "AnonHugePages:", 14)) {
            unsigned long kb = strtoul(line + 14, NULL, 10);
            result = kb * 1024 >= len / 2;
            break;
        }
    }
    fclose(fp);
    return result;
}

static void *worker_main(void *arg) {
    Worker *w = arg;
    Job *job = w->job;
    uint64_t len = (job->read_size + PAGE - 1) & ~(PAGE - 1);
    size_t alloc = job->huge ? (size_t)((len + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1)) : (size_t)len;
    void *buf = NULL;
    if (posix_memalign(&buf, job->huge ? HUGE_PAGE : PAGE, alloc)) {
        w->error = "out of memory";
        return NULL;
    }
    madvise(buf, alloc, job->huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    memset(buf, 1, alloc);               /* fault the pages in before timing */
    if (job->huge) w->thp_ok = buffer_is_huge(buf, alloc);
    int *fds = calloc((size_t)job->nfiles, sizeof *fds);
    for (int i = 0; i < job->nfiles; i++) {
        fds[i] = open(job->files[i].path, O_RDONLY | (job->direct ? O_DIRECT : 0));
        if (fds[i] < 0) {
            w->error = job->direct ? "open with O_DIRECT failed" : "open failed";
            goto out;
        }
    }
    uint64_t rng = job->seed * 0x9E3779B97F4A7C15ULL + (uint64_t)w->id * 7919 + 1;
    double end = now_s() + job->seconds;
    for (;;) {
        if (job->count > 0) { if (atomic_fetch_add(w->issued, 1) >= job->count) break; }
        else if (now_s() >= end) break;
        int f;
        uint64_t off;
        if (job->unique) {
            long k = atomic_fetch_add(&job->next, 1);
            if (k >= job->norder) break;
            f = job->order_file[k];
            off = job->order_off[k];
        } else pick(job, &rng, &f, &off);
        uint64_t want = job->direct ? len : job->read_size;
        if (off + want > job->files[f].size)
            want =
                job->direct ? ((job->files[f].size - off) & ~(PAGE - 1)) : job->files[f].size - off;
        uint64_t got = 0;
        while (got < want) {
            ssize_t r = pread(fds[f], (char *)buf + got, want - got, (off_t)(off + got));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) { w->error = r < 0 ? strerror(errno) : "unexpected end of file"; goto out; }
            got += (uint64_t)r;
        }
        w->reads++;
        w->bytes += got;
    }
out:
    for (int i = 0; i < job->nfiles; i++) if (fds[i] > 0) close(fds[i]);
    free(fds);
    free(buf);
    return NULL;
}

/* Evicts every file from the page cache; returns the resident fraction afterwards (mincore). */
static double evict(Job *job) {
    uint64_t resident = 0, total = 0;
    for (int i = 0; i < job->nfiles; i++) {
        File *f = &job->files[i];
        int fd = open(f->path, O_RDONLY);
        if (fd < 0) die("cannot open %s", f->path);
        fdatasync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        if (f->size) {
            void *m = mmap(NULL, f->size, PROT_READ, MAP_SHARED, fd, 0);
            if (m != MAP_FAILED) {
                size_t pages = (size_t)((f->size + PAGE - 1) / PAGE);
                unsigned char *vec = malloc(pages);
                if (vec && !mincore(m, f->size, vec))
                    for (size_t p = 0; p < pages; p++) resident += vec[p] & 1;
                free(vec);
                munmap(m, f->size);
            }
            total += (f->size + PAGE - 1) / PAGE;
        }
        close(fd);
    }
    return total ? (double)resident / (double)total : 0.0;
}

static void run_mode(Job *job, const char *mode, int threads) {
    if (!strcmp(mode, "evict")) {   /* only evict (for benchmarks of other programs) and report */
        double left = evict(job);
        printf("iobench: mode=evict resident_after=%.4f%s\n", left,
               left > 0.01 ? " (eviction incomplete)" : "");
        fflush(stdout);
        return;
    }
    job->direct = !strncmp(mode, "direct", 6);
    job->huge = !strcmp(mode, "directhuge");
    char extra[96] = "";
    job->unique = !strcmp(mode, "buffered-cold");
    /* a shuffled list of distinct offsets (expert starts, or read-size slots) */
    if (job->unique) {
        long n = 0;
        for (int i = 0; i < job->nfiles; i++)
            n += job->files[i].nstarts ? (long)job->files[i].nstarts
                                       : (long)(job->files[i].size / job->read_size);
        free(job->order_file); free(job->order_off);
        job->order_file = calloc((size_t)n + 1, sizeof(int));
        job->order_off = calloc((size_t)n + 1, sizeof(uint64_t));
        if (!job->order_file || !job->order_off) die("out of memory%s", "");
        long k = 0;
        for (int i = 0; i < job->nfiles; i++) {
            File *f = &job->files[i];
            long m = f->nstarts ? (long)f->nstarts : (long)(f->size / job->read_size);
            for (long j = 0; j < m; j++, k++) {
                job->order_file[k] = i;
                job->order_off[k] =
                    f->nstarts ? f->starts[j] & ~(PAGE - 1) : (uint64_t)j * job->read_size;
                if (job->order_off[k] + job->read_size > f->size) { k--; continue; }
            }
        }
        uint64_t rng = job->seed * 0x9E3779B97F4A7C15ULL + 12345;
        for (long i = k - 1; i > 0; i--) {
            long j = (long)(xorshift(&rng) % (uint64_t)(i + 1));
            int tf = job->order_file[i];
            job->order_file[i] = job->order_file[j];
            job->order_file[j] = tf;
            uint64_t to = job->order_off[i];
            job->order_off[i] = job->order_off[j];
            job->order_off[j] = to;
        }
        job->norder = k;
        atomic_store(&job->next, 0);
    }
    if (!strcmp(mode, "buffered-cold")) {
        double left = evict(job);
        snprintf(extra, sizeof extra, " resident_before=%.4f%s", left,
                 left > 0.01 ? " (eviction incomplete)" : "");
    }
    _Atomic long issued = 0;
    Worker w[64];
    pthread_t th[64];
    double t0 = now_s();
    for (int i = 0; i < threads; i++) {
        w[i] = (Worker){ .job = job, .id = i, .issued = &issued };
        if (pthread_create(&th[i], NULL, worker_main, &w[i])) die("cannot start a thread%s", "");
    }
    long reads = 0;
    uint64_t bytes = 0;
    int thp = 1;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        if (w[i].error) {
            fprintf(stderr, "iobench: error: mode %s: %s\n", mode, w[i].error);
            exit(1);
        }
        reads += w[i].reads;
        bytes += w[i].bytes;
        if (job->huge && w[i].thp_ok != 1) thp = 0;
    }
    double dt = now_s() - t0;
    if (job->huge)
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " thp=%s",
                 thp ? "yes" : "NO");
    printf("iobench: mode=%s threads=%d size=%llu GB/s=%.2f reads=%ld seconds=%.1f%s\n", mode,
           threads, (unsigned long long)job->read_size, dt > 0 ? (double)bytes / dt / 1e9 : 0.0,
           reads, dt, extra);
    fflush(stdout);
}

int main(int argc, char **argv) {
    Job job = { .read_size = 3ULL * 2048 * 6144 / 2, .seconds = 5, .count = 0, .seed = 1 };
    const char *modes = "direct4k,directhuge,buffered,buffered-cold", *threads = "1,2";
    static File files[256];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--size") && v) { job.read_size = strtoull(v, NULL, 10); i++; }
        else if (!strcmp(a, "--seconds") && v) { job.seconds = atof(v); i++; }
        else if (!strcmp(a, "--count") && v) { job.count = atol(v); i++; }
        else if (!strcmp(a, "--threads") && v) { threads = v; i++; }
        else if (!strcmp(a, "--modes") && v) { modes = v; i++; }
        else if (!strcmp(a, "--seed") && v) { job.seed = strtoull(v, NULL, 10); i++;
        } else if (a[0] == '-')
            die("unknown option %s (see the comment at the top of tools/iobench.c)", a);
        else {
            if (job.nfiles == 256) die("more than 256 files%s", "");
            File *f = &files[job.nfiles];
            struct stat st;
            int fd = open(a, O_RDONLY);
            if (fd < 0 || fstat(fd, &st)) die("cannot open %s", a);
            f->path = a;
            f->size = (uint64_t)st.st_size;
            find_experts(f, fd);
            close(fd);
            job.nfiles++;
        }
    }
    if (!job.nfiles) die("no files given%s", "");
    if (job.read_size < PAGE) die("--size must be at least 4096%s", "");
    if (job.seconds <= 0 && job.count <= 0) die("--seconds or --count must be positive%s", "");
    size_t experts = 0;
    uint64_t total = 0;
    for (int i = 0; i < job.nfiles; i++) { experts += files[i].nstarts; total += files[i].size; }
    job.files = files;
    printf("iobench: %d file(s), %.2f GB, %zu expert offsets%s, read size %llu\n", job.nfiles,
           (double)total / 1e9, experts, experts ? "" : " (none found: fixed slots)",
           (unsigned long long)job.read_size);
    char mbuf[256];
    snprintf(mbuf, sizeof mbuf, "%s", modes);
    for (char *save = NULL, *m = strtok_r(mbuf, ",", &save); m; m = strtok_r(NULL, ",", &save)) {
        if (strcmp(m, "direct4k") && strcmp(m, "directhuge") && strcmp(m, "buffered") &&
            strcmp(m, "buffered-cold") && strcmp(m, "evict"))
            die("unknown mode %s", m);
        char tbuf[64];
        snprintf(tbuf, sizeof tbuf, "%s", threads);
        for (char *s2 = NULL, *t = strtok_r(tbuf, ",", &s2); t; t = strtok_r(NULL, ",", &s2)) {
            int n = atoi(t);
            if (n < 1 || n > 64) die("thread count %s must be in 1..64", t);
            run_mode(&job, m, n);
        }
    }
    return 0;
}

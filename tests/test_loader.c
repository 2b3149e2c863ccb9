/* Unit tests of glm.c's resident load and the page cache (loader_note, loader_snapshot,
   loader_drop_new, loader_release_snapshot): pages the load brings into the page cache are dropped
   once read, pages that were cached before stay. On a file of its own with two 6 MiB tensors;
   residency is counted with mincore over each tensor's pages but its first and last 2 MiB (a large
   folio that also holds the header or the other tensor may outlive a drop of one range). Then
   INPLACE's choice of experts to use where the page cache holds them (expert_use_in_place), and
   the memory a resident tensor is read into (advise_huge_pages). glm.c is included
   whole. */
#pragma GCC diagnostic ignored "-Wunused-function"   /* the modes main() would call */
#include "../glm.c"

#include "check.h"

enum { TENSOR = 6 << 20, MARGIN = 2 << 20 };

/* Pages of tensor t (but its margins) the page cache holds, and how many there are. */
static long cached_pages(const StIndex *ix, const StTensor *t, long *total) {
    const int fd = st_file_fd(ix, t->file);
    struct stat sb;
    fstat(fd, &sb);
    uint8_t *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) { *total = 0; return -1; }
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE),
                   pages = ((uint64_t)sb.st_size + page - 1) / page;
    unsigned char *vec = xmalloc((size_t)pages);
    const int ok = !mincore(map, (size_t)sb.st_size, vec);
    munmap(map, (size_t)sb.st_size);
    long n = 0;
    *total = 0;
    for (uint64_t p = (t->offset + MARGIN) / page;
         ok && p < (t->offset + t->nbytes - MARGIN) / page; p++, ++*total)
        n += vec[p] & 1;
    free(vec);
    return ok ? n : -1;
}

/* Pages of t the page cache lacks, by mincore through map (the whole file mapped). */
static long missing_in(const uint8_t *map, const StTensor *t) {
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    long n = 0;
    for (uint64_t a = t->offset / page * page; a < t->offset + t->nbytes; a += page) {
        unsigned char in = 0;
        if (mincore((void *)(map + a), page, &in)) return -1;
        n += !(in & 1);
    }
    return n;
}

static void evict(const StIndex *ix) {
    const int fd = st_file_fd(ix, 0);
    fsync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
}

/* A load of the tensors in `which` (bit 0: a, bit 1: b) as glm's loader does it: note the ranges
   (the dry walk), snapshot, read each and drop behind it, release. */
static void load(const StIndex *ix, const StTensor *t[2], int which) {
    Loader ld = { .index = (StIndex *)ix, .noting = 1 };
    for (int k = 0; k < 2; k++)
        if (which >> k & 1) loader_note(&ld, t[k]->file, t[k]->offset, t[k]->nbytes);
    loader_snapshot(&ld);
    uint8_t *buf = xmalloc(TENSOR);
    char err[256];
    for (int k = 0; k < 2; k++) {
        if (!(which >> k & 1)) continue;
        if (st_read_raw(ix, t[k], buf, err, sizeof err)) {
            printf("FAIL reading %s: %s\n", t[k]->name, err);
            failures++;
        }
        loader_drop_new(&ld, t[k]->file, t[k]->offset, t[k]->nbytes);
    }
    loader_release_snapshot(&ld);
    CHECK("the snapshot is released", !ld.ranges && !ld.n_ranges);
    free(buf);
}

/* 1 if the mapping holding address p was advised for huge pages (VmFlags "hg" in smaps), 0 if
   not, -1 if it cannot tell. */
static int advised_huge(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    int inside = 0, found = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (inside && !strncmp(line, "VmFlags:", 8)) {
            found = strstr(line, " hg") != NULL;
            break;
        }
    }
    fclose(f);
    return found;
}

/* A pre-quantized resident tensor is read into memory advised for huge pages (advise_huge_pages:
   pread() into plain 4 KiB pages made its first matmul ~30x slower), and read right. */
static void test_resident_huge_pages(void) {
    if (access("/sys/kernel/mm/transparent_hugepage/enabled", R_OK)) {
        printf("SKIP resident tensors in huge pages: this kernel has no transparent huge pages\n");
        return;
    }
    enum { ROWS = 1024, COLS = 6144 };
    char dir[] = "/tmp/test_loader_huge.XXXXXX", path[80], header[256];
    if (!mkdtemp(dir)) { printf("FAIL mkdtemp: %s\n", strerror(errno)); failures++; return; }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int n = snprintf(header, sizeof header,
                     "{\"w\":{\"dtype\":\"I8\",\"shape\":[%d,%d],\"data_offsets\":[0,%d]},"
                     "\"w.qs\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%d,%d]}}",
                     ROWS, COLS, ROWS * COLS, ROWS, ROWS * COLS, ROWS * COLS + 4 * ROWS);
    while (n % 8) header[n++] = ' ';
    const uint64_t hlen = (uint64_t)n;
    int8_t *codes = xmalloc((size_t)ROWS * COLS);
    float scales[ROWS];
    for (size_t i = 0; i < (size_t)ROWS * COLS; i++)
        codes[i] = (int8_t)((i * 2654435761u >> 24) % 255 - 127);
    for (int r = 0; r < ROWS; r++) scales[r] = 0.01f * (float)(r % 7 + 1);
    FILE *f = fopen(path, "wb");
    const int wrote = f && fwrite(&hlen, 8, 1, f) == 1 &&
                      fwrite(header, 1, (size_t)n, f) == (size_t)n &&
                      fwrite(codes, 1, (size_t)ROWS * COLS, f) == (size_t)ROWS * COLS &&
                      fwrite(scales, 4, ROWS, f) == ROWS;
    if (f) fclose(f);
    char err[512];
    StIndex *ix = wrote ? st_open_dir(dir, err, sizeof err) : NULL;
    if (!ix) { printf("FAIL writing and opening %s\n", path); failures++; free(codes); return; }
    Loader ld = { .index = ix };
    QTensor w;
    load_matrix(&ld, "w", ROWS, COLS, 4, &w);
    const uintptr_t huge = 2 << 20, inside = ((uintptr_t)w.data + huge - 1) & ~(huge - 1);
    CHECK("a pre-quantized resident tensor loads as int8-row with its codes and scales",
          w.format == QT_INT8_ROW && !memcmp(w.data, codes, (size_t)ROWS * COLS) &&
              !memcmp(w.scales, scales, sizeof scales));
    CHECK("its scales follow its codes in the same block (the huge-page advice covers both)",
          (const uint8_t *)w.scales >= w.data + (size_t)ROWS * COLS &&
              (const uint8_t *)(w.scales + ROWS) <= w.data + qt_alloc_bytes(&w));
    const int advised = advised_huge((const void *)inside);
    if (advised < 0)
        printf("SKIP resident tensors in huge pages: /proc/self/smaps has no VmFlags\n");
    else CHECK("its memory is advised for huge pages (smaps VmFlags hg)", advised == 1);
    qt_free(&w);
    loader_free(&ld);
    free(codes);
    st_close(ix);
    unlink(path);
    rmdir(dir);
}

/* The loaders' value checks (blocks tested without an early exit, then searched) find exactly the
   first value the plain definitions refuse: bad values in the first, a middle and the last block,
   at block edges, in a short tail; -0 and FLT_MAX pass, the smallest denormal too. */
static int64_t plain_first_nonfinite(const float *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) if (!isfinite(v[i])) return i;
    return -1;
}
static int64_t plain_first_bad_scale(const float *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) if (!isfinite(v[i]) || v[i] < 0) return i;
    return -1;
}

static void test_value_checks(void) {
    enum { N = 5 * VALUE_CHECK_BLOCK + 37 };
    float *v = malloc(sizeof(float) * N);
    const float bad[] = { NAN, -NAN, INFINITY, -INFINITY, -1.0f, -FLT_MIN, -1e-45f };
    const int64_t where[] = {
        0, 1, VALUE_CHECK_BLOCK - 1, VALUE_CHECK_BLOCK, 3 * VALUE_CHECK_BLOCK + 500, N - 37, N - 1
    };
    const int64_t lens[] = { 1, 7, VALUE_CHECK_BLOCK, VALUE_CHECK_BLOCK + 1, N };
    int ok = 1;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (size_t bi = 0; bi < sizeof bad / sizeof bad[0]; bi++)
            for (size_t wi = 0; wi <= sizeof where / sizeof where[0]; wi++) {
                const int64_t n = lens[li];
                for (int64_t i = 0; i < n; i++)
                    v[i] = (i % 5 == 0)    ? -0.0f
                           : (i % 7 == 0)  ? FLT_MAX
                           : (i % 11 == 0) ? 1e-45f
                                           : (float)(i % 97) * 0.25f;
                if (wi < sizeof where / sizeof where[0] && where[wi] < n) {
                    v[where[wi]] = bad[bi];
                    if (where[wi] + 2 < n)
                        v[where[wi] + 2] =
                            bad[(bi + 1) %
                                (sizeof bad / sizeof bad[0])]; /* a second one after it */
                }
                if (first_nonfinite(v, n) != plain_first_nonfinite(v, n) ||
                    first_bad_scale(v, n) != plain_first_bad_scale(v, n)) {
                    ok = 0;
                    printf("  n %lld, bad value %g at %lld: %lld / %lld, plain %lld / %lld\n",
                           (long long)n, bad[bi],
                           (long long)(wi < sizeof where / sizeof where[0] ? where[wi] : -1),
                           (long long)first_nonfinite(v, n), (long long)first_bad_scale(v, n),
                           (long long)plain_first_nonfinite(v, n),
                           (long long)plain_first_bad_scale(v, n));
                }
            }
    CHECK("the value checks find the first non-finite value and the first bad scale, as the plain "
          "loops do",
          ok);
    free(v);
}

int main(void) {
    char dir[] = "/tmp/test_loader.XXXXXX", path[64];
    test_value_checks();
    if (!mkdtemp(dir)) { printf("FAIL mkdtemp: %s\n", strerror(errno)); return 1; }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    char header[256];
    int n = snprintf(header, sizeof header,
                     "{\"a\":{\"dtype\":\"U8\",\"shape\":[%d],\"data_offsets\":[0,%d]},"
                     "\"b\":{\"dtype\":\"U8\",\"shape\":[%d],\"data_offsets\":[%d,%d]}}",
                     TENSOR, TENSOR, TENSOR, TENSOR, 2 * TENSOR);
    while (n % 8) header[n++] = ' ';
    FILE *f = fopen(path, "wb");
    uint64_t hlen = (uint64_t)n;
    uint8_t *data = xmalloc(2 * (size_t)TENSOR);
    for (size_t i = 0; i < 2 * (size_t)TENSOR; i++) data[i] = (uint8_t)(i * 2654435761u >> 24);
    int wrote = f && fwrite(&hlen, 8, 1, f) == 1 && fwrite(header, 1, (size_t)n, f) == (size_t)n &&
                fwrite(data, 1, 2 * (size_t)TENSOR, f) == 2 * (size_t)TENSOR;
    if (f) fclose(f);
    free(data);
    char err[512];
    StIndex *ix = wrote ? st_open_dir(dir, err, sizeof err) : NULL;
    if (!ix) { printf("FAIL writing and opening %s\n", path); return 1; }
    const StTensor *t[2] = { st_find(ix, "a"), st_find(ix, "b") };
    long total, c;

    evict(ix);
    if ((c = cached_pages(ix, t[0], &total)) != 0 || cached_pages(ix, t[1], &total) != 0) {
        printf("SKIP the load and the page cache: this file system keeps pages it was asked to "
               "drop (%ld of %ld)\n",
               c, total);
        unlink(path);
        rmdir(dir);
        st_close(ix);
        return 0;
    }
    load(ix, t, 3);
    CHECK("a cold load leaves none of the pages it read in the page cache",
          cached_pages(ix, t[0], &total) == 0 && cached_pages(ix, t[1], &total) == 0 && total > 0);

    evict(ix);
    char buf[1 << 16];
    for (uint64_t off = 0; off < t[1]->offset + t[1]->nbytes; off += sizeof buf)
        pread(st_file_fd(ix, 0), buf, sizeof buf, (off_t)off);
    CHECK("(the whole file read: both tensors cached)",
          cached_pages(ix, t[0], &total) == total && cached_pages(ix, t[1], &total) == total);
    load(ix, t, 3);
    CHECK("a warm load keeps every page that was cached",
          cached_pages(ix, t[0], &total) == total && cached_pages(ix, t[1], &total) == total);

    evict(ix);
    for (uint64_t off = t[1]->offset; off < t[1]->offset + t[1]->nbytes; off += sizeof buf)
        pread(st_file_fd(ix, 0), buf, sizeof buf, (off_t)off);
    load(ix, t, 3);
    CHECK("half warm: the tensor that was cached stays, the other one goes",
          cached_pages(ix, t[0], &total) == 0 && cached_pages(ix, t[1], &total) == total);

    evict(ix);
    for (uint64_t off = t[1]->offset; off < t[1]->offset + t[1]->nbytes; off += sizeof buf)
        pread(st_file_fd(ix, 0), buf, sizeof buf, (off_t)off);
    load(ix, t, 1);
    CHECK("a range the load did not note is left as it was",
          cached_pages(ix, t[0], &total) == 0 && cached_pages(ix, t[1], &total) == total);

    /* INPLACE's choice (expert_use_in_place): an expert whose pages the page cache holds all but at
       most an eighth of is used where it lies, the missing pages counted. The expert's six tensors
       are a twice and b four times (36 MiB); the drops are whole 2 MiB-aligned blocks of a (each
       counts twice), so no large folio outlives them. */
    {
        ExpertStore store;
        memset(&store, 0, sizeof store);
        const int fd = st_file_fd(ix, 0);
        struct stat sb;
        fstat(fd, &sb);
        uint8_t *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
        uint64_t map_len = (uint64_t)sb.st_size;
        store.in_place = 1;
        store.maps = &map;
        store.map_len = &map_len;
        ExpertSource src;
        memset(&src, 0, sizeof src);
        src.data[0] = src.data[1] = t[0];
        src.data[2] = src.scales[0] = src.scales[1] = src.scales[2] = t[1];
        const uint64_t block = 2 << 20, a0 = (t[0]->offset + block - 1) / block * block;
        double missing = -1;
        for (uint64_t off = 0; off < t[1]->offset + t[1]->nbytes; off += sizeof buf)
            pread(fd, buf, sizeof buf, (off_t)off);
        CHECK("INPLACE: an expert the page cache holds whole is used in place, nothing missing",
              map != MAP_FAILED && expert_use_in_place(&store, &src, &missing) == 1 &&
                  missing == 0);
        /* pages of the expert's tensors the page cache lacks, counted here as the check's reference
           */
        #define EXPERT_MISSING() (2 * missing_in(map, t[0]) + 4 * missing_in(map, t[1]))
        posix_fadvise(fd, (off_t)a0, (off_t)block, POSIX_FADV_DONTNEED);
        const long one = EXPERT_MISSING();
        const int one_block = expert_use_in_place(&store, &src, &missing);
        if (one != 2 * (long)(block / page_bytes()) || EXPERT_MISSING() != one)
            printf("SKIP INPLACE with missing pages: the page cache kept or lost other pages (%ld "
                   "pages missing)\n",
                   one);
        else
            CHECK("INPLACE: an expert missing 4 MiB of its 36 MiB (a ninth) is used in place; the "
                  "missing bytes are counted",
                  one_block == 1 && missing == 2.0 * (double)block);
        posix_fadvise(fd, (off_t)(a0 + block), (off_t)block, POSIX_FADV_DONTNEED);
        const int two_blocks = expert_use_in_place(&store, &src, &missing);
        if (EXPERT_MISSING() == 4 * (long)(block / page_bytes()))
            CHECK("INPLACE: an expert missing 8 MiB of its 36 MiB (more than an eighth) is read, "
                  "not used in place",
                  two_blocks == 0 && missing == 0);
        else
            printf("SKIP INPLACE with many missing pages: the page cache kept or lost other "
                   "pages\n");
#undef EXPERT_MISSING
        store.in_place = 0;
        pread(fd, buf, sizeof buf, (off_t)t[1]->offset);
        CHECK("INPLACE=0: never in place", expert_use_in_place(&store, &src, &missing) == 0);
        if (map != MAP_FAILED) munmap(map, (size_t)sb.st_size);
    }

    st_close(ix);
    unlink(path);
    rmdir(dir);
    test_resident_huge_pages();
    return failures ? 1 : 0;
}

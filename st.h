/* st.h - index and read the *.safetensors files of a model directory.
 *
 * Single-header library in the stb style. Exactly ONE translation unit defines ST_IMPLEMENTATION
 * before including it. st.h includes json.h and calls it, so the same program must also compile
 * json.h's implementation once (JSON_IMPLEMENTATION), e.g. in that same file:
 *
 *     #define JSON_IMPLEMENTATION
 *     #define ST_IMPLEMENTATION
 *     #include "st.h"
 *
 * Format (docs/format.md §1): u64 little-endian header length N, N bytes of JSON mapping each
 * tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the end of
 * the header) plus an optional "__metadata__" map of strings, then the data.
 *
 * API
 *     StIndex *st_open_dir(const char *dir, char *err, size_t err_len);
 *         Indexes every file named *.safetensors in dir, in strcmp order of file name (file numbers
 *         follow that order). NULL + a one-line message on any error; a *.safetensors that is not a
 *         regular file (directory, FIFO, device, dangling or looping symbolic link) is one, by name.
 *         Symbolic links to regular files are followed (a Hugging Face cache snapshot is made of them).
 *     StIndex *st_open_files(const char *const *paths, int npaths, char *err, size_t err_len);
 *         Same for an explicit list of files, numbered in the given order (e.g. a single shard).
 *     StIndex *st_open_dir_headers(const char *dir, char *err, size_t err_len);
 *         Same as st_open_dir for files that may end right after their headers (a model's headers
 *         fetched to plan before downloading it): every check except "offsets past the data
 *         region" is made. Reads from such an index fail at the end of the file, by name.
 *     void st_close(StIndex *ix);                      closes every fd, frees everything
 *     const StTensor *st_find(const StIndex *ix, const char *name);    NULL if absent (hash lookup)
 *     size_t st_count(const StIndex *ix);
 *     const StTensor *st_tensor_at(const StIndex *ix, size_t i);   by file, then by data offset
 *     int st_file_count(const StIndex *ix);
 *     const char *st_file_path(const StIndex *ix, int file);       NULL if out of range
 *     int st_file_fd(const StIndex *ix, int file);                 -1 if out of range
 *     uint64_t st_file_size(const StIndex *ix, int file);          bytes when the header was read
 *     const char *st_file_metadata(const StIndex *ix, int file, const char *key);  NULL if absent
 *     int64_t st_numel(const StTensor *t);             product of the shape (1 for a scalar)
 *     size_t st_dtype_size(StDtype d);                 bytes per element
 *     const char *st_dtype_name(StDtype d);            "F32", "BF16", ... as in the header
 *     int st_read_raw(ix, t, dst, err, err_len);       exactly t->nbytes bytes as stored
 *     int st_read_f32(ix, t, dst, err, err_len);       st_numel(t) floats
 *     int st_read_f32_rows(ix, t, row0, nrows, dst, err, err_len);
 *         Rows [row0, row0+nrows) of the 2-D view [rows, cols]: cols is the last dimension and rows
 *         the product of the others (a 3-D [E, O, I] tensor is read as [E*O, I]; a 1-D tensor is one
 *         row). dst receives nrows*cols floats.
 *   The read functions return 0 on success and -1 with a message naming the file and tensor. They
 *   use pread only, so several threads may read through one index at the same time.
 *
 * Conversions to f32 (exact): F32; BF16; F16 including subnormals, infinities and NaN; U8, I8, I32
 * as integers; I64 and F64 rounded to nearest float. F8_E4M3 is decoded as e4m3fn (bias 7, no
 * infinities, S.1111.111 is NaN, largest finite 448, subnormals m*2^-9) and multiplied, in fp32, by
 * its block scale: the tensor named NAME "_scale_inv" (x.weight -> x.weight_scale_inv), F32/BF16/F16,
 * shape [ceil(O/128), ceil(I/128)] for a 2-D weight [O, I], [E, ceil(O/128), ceil(I/128)] for a 3-D
 * [E, O, I]:  W[o][i] = fp8(Wq[o][i]) * S[o/128][i/128]. The scale is looked up in the whole index,
 * so it may sit in another shard (the vendor release does that); open both shards together when
 * working shard by shard. A missing or mis-shaped scale fails the read (not the open), naming both.
 *
 * Validation at open: each of these refuses the whole index with one line naming the file and, when
 * there is one, the tensor: a file shorter than 8 bytes; a header length past the end of the file or
 * above ST_MAX_HEADER; malformed / non-UTF-8 header JSON or a header that is not an object; a missing
 * or ill-typed dtype, shape or data_offsets; an unknown dtype; more than ST_MAX_DIMS dimensions;
 * negative sizes; begin > end; offsets past the data region; a byte length other than dtype size x
 * product(shape) (computed with overflow checks); two tensors whose bytes overlap; an empty name or
 * one containing a control character (NUL, newline, ...); a name repeated within a file or across files (both files named); a
 * __metadata__ that is not a map of strings. A directory without any *.safetensors file is an error.
 * Gaps between tensors and trailing bytes after the last one are allowed.
 */
#ifndef ST_H
#define ST_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER ((uint64_t)100 << 20)   /* same limit as the reference safetensors reader */

typedef enum {
    ST_F32,
    ST_BF16,
    ST_F16,
    ST_F8_E4M3,
    ST_U8,
    ST_I8,
    ST_I32,
    ST_I64,
    ST_F64,
    ST_DTYPE_COUNT
} StDtype;

typedef struct {
    const char *name;
    StDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int file;           /* index for st_file_path / st_file_fd */
    uint64_t offset;    /* absolute offset of the first byte in the file */
    uint64_t nbytes;
} StTensor;

typedef struct StIndex StIndex;

StIndex *st_open_dir(const char *dir, char *err, size_t err_len);
StIndex *st_open_files(const char *const *paths, int npaths, char *err, size_t err_len);
StIndex *st_open_dir_headers(const char *dir, char *err, size_t err_len);
void st_close(StIndex *ix);
const StTensor *st_find(const StIndex *ix, const char *name);
size_t st_count(const StIndex *ix);
const StTensor *st_tensor_at(const StIndex *ix, size_t i);
int st_file_count(const StIndex *ix);
const char *st_file_path(const StIndex *ix, int file);
int st_file_fd(const StIndex *ix, int file);
uint64_t st_file_size(const StIndex *ix, int file);
const char *st_file_metadata(const StIndex *ix, int file, const char *key);
int64_t st_numel(const StTensor *t);
size_t st_dtype_size(StDtype d);
const char *st_dtype_name(StDtype d);
int st_read_raw(const StIndex *ix, const StTensor *t, void *dst, char *err, size_t err_len);
int st_read_f32(const StIndex *ix, const StTensor *t, float *dst, char *err, size_t err_len);
int st_read_f32_rows(const StIndex *ix, const StTensor *t, int64_t row0, int64_t nrows, float *dst,
                     char *err, size_t err_len);

#endif /* ST_H */

#ifdef ST_IMPLEMENTATION
#ifndef ST_IMPLEMENTATION_DONE
#define ST_IMPLEMENTATION_DONE

#include "json.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    char *path;
    int fd;
    uint64_t size, data_start;
    char *pool;                 /* tensor names and metadata strings of this file */
    const char **meta;          /* key0, value0, key1, value1, ... */
    size_t nmeta;
} StFile;

struct StIndex {
    StFile *files;
    int nfiles;
    int headers_only;           /* st_open_dir_headers: the data region may be missing */
    StTensor *tensors;
    size_t ntensors, tcap;
    size_t *slots;              /* open addressing: tensor index + 1, 0 = empty */
    size_t nslots;              /* power of two */
};

static const char *const st__dtype_names[ST_DTYPE_COUNT] = { "F32", "BF16", "F16", "F8_E4M3", "U8",
                                                             "I8",  "I32",  "I64", "F64" };
static const size_t st__dtype_sizes[ST_DTYPE_COUNT] = {4, 2, 2, 1, 1, 1, 4, 8, 8};

size_t st_dtype_size(StDtype d) { return (unsigned)d < ST_DTYPE_COUNT ? st__dtype_sizes[d] : 0; }
const char *st_dtype_name(StDtype d) {
    return (unsigned)d < ST_DTYPE_COUNT ? st__dtype_names[d] : "?";
}

/* One line always: control characters quoted from a header (a \n in a metadata key) become '?'. */
static void st__err(char *err, size_t err_len, const char *fmt, ...) {
    if (!err || !err_len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
    for (char *p = err; *p; p++) if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
}

int64_t st_numel(const StTensor *t) {
    int64_t n = 1;
    for (int d = 0; t && d < t->ndim; d++) n *= t->shape[d];   /* validated at open: no overflow */
    return n;
}

static uint64_t st__hash(const char *s) {
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Header bookkeeping while one file is validated. */
typedef struct {
    const char *name;
    size_t name_len;
    StTensor t;
    uint64_t begin, end;
    size_t order;
} StEntry;

static int st__cmp_entry(const void *a, const void *b) {
    const StEntry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static int st__get_u64(const JsonValue *v, uint64_t *out) {
    int64_t i;
    if (json_type(v) != JSON_NUMBER || !json_is_int(v, &i) || i < 0) return -1;
    *out = (uint64_t)i;
    return 0;
}

/* Reads exactly n bytes at off, retrying short reads and EINTR. Returns 0, or -1 with errno set
 * (errno 0 for an unexpected end of file). */
static int st__pread_full(int fd, void *dst, uint64_t n, uint64_t off) {
    char *p = dst;
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : (size_t)n;
        ssize_t got = pread(fd, p, chunk, (off_t)off);
        if (got < 0) { if (errno == EINTR) continue; return -1; }
        if (got == 0) { errno = 0; return -1; }
        p += got; off += (uint64_t)got; n -= (uint64_t)got;
    }
    return 0;
}

static const char *st__file_kind(mode_t m) {
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISREG(m) ? "a regular file" : "not a regular file";
}

/* Parses and validates one file's header; appends its tensors to ix (sorted by offset). */
static int st__load_file(StIndex *ix, int file, char *err, size_t err_len) {
    StFile *f = &ix->files[file];
    const char *path = f->path;
    /* O_NONBLOCK: a FIFO must not hang the open */
    f->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (f->fd < 0) {
        st__err(err, err_len, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(f->fd, &sb) != 0) {
        st__err(err, err_len, "%s: cannot stat: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        st__err(err, err_len, "%s: is %s, not a safetensors file", path, st__file_kind(sb.st_mode));
        return -1;
    }
    fcntl(f->fd, F_SETFL, fcntl(f->fd, F_GETFL) & ~O_NONBLOCK);
    /* the header is read without read-ahead, which would also bring the first megabytes of tensor
       data into the page cache (up to read_ahead_kb, often 8 MB, and GLM-5.2 has ~80 files)
       before anyone asked for them; whole-file reads go on with the kernel's default (below) */
    posix_fadvise(f->fd, 0, 0, POSIX_FADV_RANDOM);
    f->size = (uint64_t)sb.st_size;
    unsigned char lenbuf[8];
    if (f->size < 8) {
        st__err(err, err_len, "%s: file is %llu bytes, too short for a safetensors header", path,
                (unsigned long long)f->size);
        return -1;
    }
    if (st__pread_full(f->fd, lenbuf, 8, 0)) {
        st__err(err, err_len, "%s: cannot read header length: %s", path,
                errno ? strerror(errno) : "end of file");
        return -1;
    }
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--) hlen = (hlen << 8) | lenbuf[k];
    if (hlen > f->size - 8) {
        st__err(err, err_len, "%s: header length %llu runs past the end of the file (%llu bytes)",
                path, (unsigned long long)hlen, (unsigned long long)f->size);
        return -1;
    }
    if (hlen > ST_MAX_HEADER) {
        st__err(err, err_len, "%s: header length %llu is absurd (limit %llu bytes)", path,
                (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
        return -1;
    }
    f->data_start = 8 + hlen;
    uint64_t data_len = f->size - f->data_start;
    char *text = malloc(hlen ? hlen : 1);
    if (!text) {
        st__err(err, err_len, "%s: out of memory for a %llu-byte header", path,
                (unsigned long long)hlen);
        return -1;
    }
    if (st__pread_full(f->fd, text, hlen, 8)) {
        st__err(err, err_len, "%s: cannot read header: %s", path,
                errno ? strerror(errno) : "end of file");
        free(text);
        return -1;
    }
    posix_fadvise(f->fd, 0, 0, POSIX_FADV_NORMAL);
    char jerr[200];
    JsonDoc *doc = json_parse(text, hlen, jerr, sizeof jerr);
    free(text);
    if (!doc) { st__err(err, err_len, "%s: malformed header JSON: %s", path, jerr); return -1; }

    int rc = -1;
    StEntry *ents = NULL;
    const JsonValue *root = json_root(doc);
    if (json_type(root) != JSON_OBJECT) {
        st__err(err, err_len, "%s: header is not a JSON object", path);
        goto done;
    }
    size_t nmembers = json_len(root), nent = 0, pool_bytes = 0, nmeta = 0;
    ents = calloc(nmembers ? nmembers : 1, sizeof *ents);
    if (!ents) { st__err(err, err_len, "%s: out of memory", path); goto done; }
    const JsonValue *meta = NULL;
    for (size_t m = 0; m < nmembers; m++) {
        size_t klen;
        const char *key = json_key_at(root, m, &klen);
        const JsonValue *v = json_value_at(root, m);
        if (klen == 12 && memcmp(key, "__metadata__", 12) == 0) {
            if (meta) { st__err(err, err_len, "%s: __metadata__ appears twice", path); goto done; }
            if (json_type(v) != JSON_OBJECT) {
                st__err(err, err_len, "%s: __metadata__ is not a map of strings", path);
                goto done;
            }
            for (size_t j = 0; j < json_len(v); j++) {
                size_t mk_len, mv_len;
                const char *mk = json_key_at(v, j, &mk_len);
                const char *mv = json_str(json_value_at(v, j), &mv_len);
                if (!mv) {
                    st__err(err, err_len,
                            "%s: __metadata__ is not a map of strings (value of '%s')", path, mk);
                    goto done;
                }
                if (memchr(mk, 0, mk_len) || memchr(mv, 0, mv_len)) {
                    st__err(err, err_len, "%s: __metadata__ entry '%s' contains a NUL character",
                            path, mk);
                    goto done;
                }
                pool_bytes += mk_len + mv_len + 2;
            }
            meta = v;
            nmeta = json_len(v);
            continue;
        }
        if (klen == 0) { st__err(err, err_len, "%s: tensor with an empty name", path); goto done; }
        for (size_t c = 0; c < klen; c++) {
            /* NUL or a newline would break names and one-line errors */
            if ((unsigned char)key[c] < 0x20) {
                st__err(err, err_len,
                        "%s: tensor name with a control character (byte %zu of a %zu-byte name)",
                        path, c, klen);
                goto done;
            }
        }
        StEntry *e = &ents[nent];
        e->name = key; e->name_len = klen; e->order = nent;
        e->t.file = file;
        if (json_type(v) != JSON_OBJECT) {
            st__err(err, err_len, "%s: tensor '%s': entry is not an object", path, key);
            goto done;
        }
        const char *dt = json_str(json_get(v, "dtype"), NULL);
        if (!dt) {
            st__err(err, err_len, "%s: tensor '%s': missing or non-string dtype", path, key);
            goto done;
        }
        int d;
        for (d = 0; d < ST_DTYPE_COUNT && strcmp(dt, st__dtype_names[d]) != 0; d++) {}
        if (d == ST_DTYPE_COUNT) {
            st__err(err, err_len, "%s: tensor '%s': unknown dtype '%s'", path, key, dt);
            goto done;
        }
        e->t.dtype = (StDtype)d;
        const JsonValue *shape = json_get(v, "shape");
        if (json_type(shape) != JSON_ARRAY) {
            st__err(err, err_len, "%s: tensor '%s': missing or non-array shape", path, key);
            goto done;
        }
        if (json_len(shape) > ST_MAX_DIMS) {
            st__err(err, err_len, "%s: tensor '%s': %zu dimensions (at most %d supported)", path,
                    key, json_len(shape), ST_MAX_DIMS);
            goto done;
        }
        e->t.ndim = (int)json_len(shape);
        uint64_t numel = 1, nbytes;
        int overflow = 0;
        for (int k = 0; k < e->t.ndim; k++) {
            uint64_t dim;
            if (st__get_u64(json_at(shape, (size_t)k), &dim)) {
                st__err(err, err_len, "%s: tensor '%s': shape[%d] is not a non-negative integer",
                        path, key, k);
                goto done;
            }
            e->t.shape[k] = (int64_t)dim;
            if (dim && numel > UINT64_MAX / dim) overflow = 1;
            else numel *= dim;
        }
        if (overflow || numel > (uint64_t)INT64_MAX || numel > UINT64_MAX / st__dtype_sizes[d]) {
            st__err(err, err_len, "%s: tensor '%s': shape is too large (element count overflows)",
                    path, key);
            goto done;
        }
        nbytes = numel * st__dtype_sizes[d];
        const JsonValue *offs = json_get(v, "data_offsets");
        if (json_type(offs) != JSON_ARRAY || json_len(offs) != 2 ||
            st__get_u64(json_at(offs, 0), &e->begin) || st__get_u64(json_at(offs, 1), &e->end)) {
            st__err(err, err_len,
                    "%s: tensor '%s': data_offsets missing or not two non-negative integers", path,
                    key);
            goto done;
        }
        if (e->begin > e->end) {
            st__err(err, err_len, "%s: tensor '%s': data_offsets begin %llu > end %llu", path, key,
                    (unsigned long long)e->begin, (unsigned long long)e->end);
            goto done;
        }
        if (e->end > data_len && !ix->headers_only) {
            st__err(err, err_len,
                    "%s: tensor '%s': data_offsets [%llu, %llu] outside the data region (%llu "
                    "bytes)",
                    path, key, (unsigned long long)e->begin, (unsigned long long)e->end,
                    (unsigned long long)data_len);
            goto done;
        }
        if (e->end - e->begin != nbytes) {
            st__err(err, err_len,
                    "%s: tensor '%s': data_offsets span %llu bytes but %s x %llu elements is %llu "
                    "bytes",
                    path, key, (unsigned long long)(e->end - e->begin), dt,
                    (unsigned long long)numel, (unsigned long long)nbytes);
            goto done;
        }
        e->t.nbytes = nbytes;
        e->t.offset = f->data_start + e->begin;
        pool_bytes += klen + 1;
        nent++;
    }
    qsort(ents, nent, sizeof *ents, st__cmp_entry);
    /* Sorted by begin: a tensor overlaps some earlier one iff it starts before the furthest end so
     * far. Empty tensors occupy no bytes and cannot overlap anything. */
    size_t furthest = (size_t)-1;
    for (size_t i = 0; i < nent; i++) {
        if (ents[i].begin == ents[i].end) continue;
        if (furthest != (size_t)-1 && ents[i].begin < ents[furthest].end) {
            st__err(err, err_len, "%s: tensor '%s' [%llu, %llu) overlaps tensor '%s' [%llu, %llu)",
                    path, ents[i].name, (unsigned long long)ents[i].begin,
                    (unsigned long long)ents[i].end, ents[furthest].name,
                    (unsigned long long)ents[furthest].begin,
                    (unsigned long long)ents[furthest].end);
            goto done;
        }
        if (furthest == (size_t)-1 || ents[i].end > ents[furthest].end) furthest = i;
    }
    /* Copy names and metadata out of the JSON document, which is freed below. */
    f->pool = malloc(pool_bytes ? pool_bytes : 1);
    f->meta = calloc(nmeta ? 2 * nmeta : 1, sizeof *f->meta);
    if (ix->ntensors + nent > ix->tcap) {
        size_t cap = ix->tcap ? ix->tcap : 1024;
        while (cap < ix->ntensors + nent) cap *= 2;
        StTensor *nt = realloc(ix->tensors, cap * sizeof *nt);
        if (nt) { ix->tensors = nt; ix->tcap = cap; }
    }
    if (!f->pool || !f->meta || ix->ntensors + nent > ix->tcap) {
        st__err(err, err_len, "%s: out of memory", path);
        goto done;
    }
    char *p = f->pool;
    for (size_t j = 0; j < nmeta; j++) {
        size_t kl, vl;
        const char *k = json_key_at(meta, j, &kl), *val = json_str(json_value_at(meta, j), &vl);
        memcpy(p, k, kl + 1); f->meta[2 * j] = p; p += kl + 1;
        memcpy(p, val, vl + 1); f->meta[2 * j + 1] = p; p += vl + 1;
    }
    f->nmeta = nmeta;
    for (size_t i = 0; i < nent; i++) {
        memcpy(p, ents[i].name, ents[i].name_len + 1);
        ents[i].t.name = p;
        p += ents[i].name_len + 1;
        ix->tensors[ix->ntensors++] = ents[i].t;
    }
    rc = 0;
done:
    free(ents);
    json_free(doc);
    return rc;
}

/* Builds the name hash; the first repeated name is an error naming its file(s). */
static int st__build_hash(StIndex *ix, char *err, size_t err_len) {
    size_t n = 16;
    while (n < 2 * ix->ntensors) n *= 2;
    ix->slots = calloc(n, sizeof *ix->slots);
    if (!ix->slots) { st__err(err, err_len, "out of memory for the tensor index"); return -1; }
    ix->nslots = n;
    for (size_t i = 0; i < ix->ntensors; i++) {
        const StTensor *t = &ix->tensors[i];
        size_t s = (size_t)st__hash(t->name) & (n - 1);
        while (ix->slots[s]) {
            const StTensor *o = &ix->tensors[ix->slots[s] - 1];
            if (strcmp(o->name, t->name) == 0) {
                if (o->file == t->file)
                    st__err(err, err_len, "%s: tensor '%s': duplicate tensor name in the header",
                            ix->files[t->file].path, t->name);
                else
                    st__err(err, err_len, "tensor '%s' appears in both %s and %s", t->name,
                            ix->files[o->file].path, ix->files[t->file].path);
                return -1;
            }
            s = (s + 1) & (n - 1);
        }
        ix->slots[s] = i + 1;
    }
    return 0;
}

static StIndex *st__open_files(const char *const *paths, int npaths, int headers_only, char *err,
                               size_t err_len) {
    if (err && err_len) err[0] = 0;
    if (npaths <= 0 || !paths) { st__err(err, err_len, "no safetensors files given"); return NULL; }
    StIndex *ix = calloc(1, sizeof *ix);
    if (!ix || !(ix->files = calloc((size_t)npaths, sizeof *ix->files))) {
        free(ix);
        st__err(err, err_len, "out of memory");
        return NULL;
    }
    for (int i = 0; i < npaths; i++) ix->files[i].fd = -1;
    ix->nfiles = npaths;
    ix->headers_only = headers_only;
    for (int i = 0; i < npaths; i++) {
        if (!(ix->files[i].path = strdup(paths[i]))) {
            st__err(err, err_len, "out of memory");
            st_close(ix);
            return NULL;
        }
    }
    for (int i = 0; i < npaths; i++) {
        if (st__load_file(ix, i, err, err_len)) { st_close(ix); return NULL; }
    }
    if (st__build_hash(ix, err, err_len)) { st_close(ix); return NULL; }
    return ix;
}

StIndex *st_open_files(const char *const *paths, int npaths, char *err, size_t err_len) {
    return st__open_files(paths, npaths, 0, err, err_len);
}

static int st__cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static StIndex *st__open_dir(const char *dir, int headers_only, char *err, size_t err_len) {
    if (err && err_len) err[0] = 0;
    DIR *d = opendir(dir);
    if (!d) {
        st__err(err, err_len, "%s: cannot open directory: %s", dir, strerror(errno));
        return NULL;
    }
    char **paths = NULL;
    size_t n = 0, cap = 0;
    int oom = 0, bad = 0;
    struct dirent *de;
    const char *ext = ".safetensors";
    size_t ext_len = strlen(ext), dir_len = strlen(dir);
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len < ext_len || strcmp(de->d_name + len - ext_len, ext) != 0) continue;
        char *path = malloc(dir_len + len + 2);
        if (!path) { oom = 1; break; }
        snprintf(path, dir_len + len + 2, "%s/%s", dir, de->d_name);
        /* A *.safetensors that is not a readable regular file (a directory, FIFO, dangling or
         * looping link) is an error naming it: skipping it would only surface later as a
         * "missing tensor". stat, not open: it never blocks on a FIFO. */
        struct stat sb;
        int stat_errno = stat(path, &sb) != 0 ? errno : 0;
        if (stat_errno || !S_ISREG(sb.st_mode)) {
            if (stat_errno)
                st__err(err, err_len, "%s: cannot use it: %s%s", path, strerror(stat_errno),
                        stat_errno == ENOENT || stat_errno == ELOOP
                            ? " (a dangling or looping symbolic link?)"
                            : "");
            else
                st__err(err, err_len, "%s: is %s, not a safetensors file", path,
                        st__file_kind(sb.st_mode));
            free(path);
            bad = 1;
            break;
        }
        if (n == cap) {
            char **np = realloc(paths, (cap = cap ? cap * 2 : 64) * sizeof *np);
            if (!np) { free(path); oom = 1; break; }
            paths = np;
        }
        paths[n++] = path;
    }
    closedir(d);
    StIndex *ix = NULL;
    if (bad) {}   /* err says which file */
    else if (oom) st__err(err, err_len, "%s: out of memory listing the directory", dir);
    else if (n == 0) st__err(err, err_len, "%s: no *.safetensors file in the directory", dir);
    else if (n > 1000000) st__err(err, err_len, "%s: too many *.safetensors files (%zu)", dir, n);
    else {
        /* "dir/" prefix is common: orders by file name */
        qsort(paths, n, sizeof *paths, st__cmp_str);
        ix = st__open_files((const char *const *)paths, (int)n, headers_only, err, err_len);
    }
    for (size_t i = 0; i < n; i++) free(paths[i]);
    free(paths);
    return ix;
}

StIndex *st_open_dir(const char *dir, char *err, size_t err_len) {
    return st__open_dir(dir, 0, err, err_len);
}
StIndex *st_open_dir_headers(const char *dir, char *err, size_t err_len) {
    return st__open_dir(dir, 1, err, err_len);
}

void st_close(StIndex *ix) {
    if (!ix) return;
    for (int i = 0; ix->files && i < ix->nfiles; i++) {
        StFile *f = &ix->files[i];
        if (f->fd >= 0) close(f->fd);
        free(f->path);
        free(f->pool);
        free(f->meta);
    }
    free(ix->files);
    free(ix->tensors);
    free(ix->slots);
    free(ix);
}

const StTensor *st_find(const StIndex *ix, const char *name) {
    if (!ix || !name || !ix->nslots) return NULL;
    size_t s = (size_t)st__hash(name) & (ix->nslots - 1);
    while (ix->slots[s]) {
        const StTensor *t = &ix->tensors[ix->slots[s] - 1];
        if (strcmp(t->name, name) == 0) return t;
        s = (s + 1) & (ix->nslots - 1);
    }
    return NULL;
}

size_t st_count(const StIndex *ix) { return ix ? ix->ntensors : 0; }
const StTensor *st_tensor_at(const StIndex *ix, size_t i) {
    return ix && i < ix->ntensors ? &ix->tensors[i] : NULL;
}
int st_file_count(const StIndex *ix) { return ix ? ix->nfiles : 0; }
const char *st_file_path(const StIndex *ix, int file) {
    return ix && file >= 0 && file < ix->nfiles ? ix->files[file].path : NULL;
}
int st_file_fd(const StIndex *ix, int file) {
    return ix && file >= 0 && file < ix->nfiles ? ix->files[file].fd : -1;
}
uint64_t st_file_size(const StIndex *ix, int file) {
    return ix && file >= 0 && file < ix->nfiles ? ix->files[file].size : 0;
}

const char *st_file_metadata(const StIndex *ix, int file, const char *key) {
    if (!ix || file < 0 || file >= ix->nfiles || !key) return NULL;
    const StFile *f = &ix->files[file];
    for (size_t i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta[2 * i], key) == 0) return f->meta[2 * i + 1];
    return NULL;
}

/* Reads n bytes of tensor t starting at byte `skip` of its data. */
static int st__read_bytes(const StIndex *ix, const StTensor *t, uint64_t skip, uint64_t n,
                          void *dst, char *err, size_t err_len) {
    if (!ix || !t || t->file < 0 || t->file >= ix->nfiles) {
        st__err(err, err_len, "st: tensor '%s' does not belong to this index",
                t && t->name ? t->name : "(null)");
        return -1;
    }
    const StFile *f = &ix->files[t->file];
    if (st__pread_full(f->fd, dst, n, t->offset + skip)) {
        if (errno)
            st__err(err, err_len, "%s: tensor '%s': read failed: %s", f->path, t->name,
                    strerror(errno));
        else
            st__err(err, err_len,
                    "%s: tensor '%s': unexpected end of file (was the file truncated after "
                    "opening?)",
                    f->path, t->name);
        return -1;
    }
    return 0;
}

int st_read_raw(const StIndex *ix, const StTensor *t, void *dst, char *err, size_t err_len) {
    return st__read_bytes(ix, t, 0, t ? t->nbytes : 0, dst, err, err_len);
}

static float st__bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static float st__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 31, mant = h & 0x3ff;
    if (exp == 0) {   /* zero or subnormal: mant * 2^-24, exact in f32 */
        float f = (float)mant * 0x1p-24f;
        uint32_t u; memcpy(&u, &f, 4);
        return st__bits_f32(u | sign);
    }
    /* inf / NaN (payload kept) */
    if (exp == 31) return st__bits_f32(sign | 0x7f800000u | (mant << 13));
    return st__bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

/* e4m3fn: no infinities; exponent 15 with mantissa 7 is the only NaN, so 448 is the largest value.
   */
static float st__e4m3_to_f32(uint8_t b) {
    uint32_t sign = (uint32_t)(b & 0x80) << 24, exp = (b >> 3) & 15, mant = b & 7;
    if (exp == 15 && mant == 7) return st__bits_f32(sign | 0x7fc00000u);
    if (exp == 0) {
        float f = (float)mant * 0x1p-9f;
        uint32_t u; memcpy(&u, &f, 4);
        return st__bits_f32(u | sign);
    }
    return st__bits_f32(sign | ((exp + 120) << 23) | (mant << 20));
}

/* Converts n elements in place: the raw bytes sit at the END of dst's n*4 bytes. Element k is read
 * from byte (n-k)*(4-es) + ... past where float k is written, so walking forward never overwrites
 * raw bytes not yet converted. */
static void st__convert_tail(StDtype dt, float *dst, size_t n) {
    size_t es = st__dtype_sizes[dt];
    const unsigned char *raw = (const unsigned char *)dst + n * 4 - n * es;
    for (size_t k = 0; k < n; k++) {
        const unsigned char *r = raw + k * es;
        float v;
        switch (dt) {
        case ST_F32: memcpy(&v, r, 4); break;
        case ST_BF16: v = st__bits_f32((uint32_t)(r[0] | (r[1] << 8)) << 16); break;
        case ST_F16: v = st__f16_to_f32((uint16_t)(r[0] | (r[1] << 8))); break;
        case ST_F8_E4M3: v = st__e4m3_to_f32(r[0]); break;
        case ST_U8: v = (float)r[0]; break;
        case ST_I8: v = (float)(int8_t)r[0]; break;
        case ST_I32: { int32_t x; memcpy(&x, r, 4); v = (float)x; break; }
        default: v = 0; break;
        }
        dst[k] = v;
    }
}

int st_read_f32_rows(const StIndex *ix, const StTensor *t, int64_t row0, int64_t nrows, float *dst,
                     char *err, size_t err_len) {
    if (!ix || !t || t->file < 0 || t->file >= ix->nfiles)
        return st__read_bytes(ix, t, 0, 0, NULL, err, err_len);
    const char *path = ix->files[t->file].path;
    int64_t cols = t->ndim ? t->shape[t->ndim - 1] : 1, rows = 1;
    for (int d = 0; d + 1 < t->ndim; d++) rows *= t->shape[d];
    if (row0 < 0 || nrows < 0 || row0 > rows || nrows > rows - row0) {
        st__err(err, err_len, "%s: tensor '%s': rows [%lld, %lld+%lld) outside its %lld rows", path,
                t->name, (long long)row0, (long long)row0, (long long)nrows, (long long)rows);
        return -1;
    }
    /* F8: locate and check the block scale before touching the data. */
    const StTensor *scale = NULL;
    int64_t O = 0, sO = 0, sI = 0;
    if (t->dtype == ST_F8_E4M3) {
        if (t->ndim != 2 && t->ndim != 3) {
            st__err(err, err_len,
                    "%s: tensor '%s': F8_E4M3 weight must be 2-D or 3-D, has %d dimensions", path,
                    t->name, t->ndim);
            return -1;
        }
        size_t nl = strlen(t->name);
        char *sname = malloc(nl + sizeof "_scale_inv");
        if (!sname) {
            st__err(err, err_len, "%s: tensor '%s': out of memory", path, t->name);
            return -1;
        }
        memcpy(sname, t->name, nl);
        memcpy(sname + nl, "_scale_inv", sizeof "_scale_inv");
        scale = st_find(ix, sname);
        O = t->shape[t->ndim - 2];
        sO = (O + 127) / 128;
        sI = (cols + 127) / 128;
        int64_t E = t->ndim == 3 ? t->shape[0] : 1;
        if (!scale) {
            st__err(err, err_len, "%s: tensor '%s': F8_E4M3 weight without its block scale '%s'",
                    path, t->name, sname);
            free(sname);
            return -1;
        }
        free(sname);
        int shape_ok = scale->ndim == t->ndim && scale->shape[scale->ndim - 2] == sO &&
                       scale->shape[scale->ndim - 1] == sI &&
                       (t->ndim == 2 || scale->shape[0] == E);
        if (scale->dtype != ST_F32 && scale->dtype != ST_BF16 && scale->dtype != ST_F16) {
            st__err(err, err_len, "%s: tensor '%s': block scale '%s' has dtype %s (want F32)", path,
                    t->name, scale->name, st__dtype_names[scale->dtype]);
            return -1;
        }
        if (!shape_ok) {
            char want[64], got[160];
            if (t->ndim == 3)
                snprintf(want, sizeof want, "[%lld, %lld, %lld]", (long long)E, (long long)sO,
                         (long long)sI);
            else snprintf(want, sizeof want, "[%lld, %lld]", (long long)sO, (long long)sI);
            size_t gn = 0;
            got[gn++] = '[';
            for (int d = 0; d < scale->ndim && gn < sizeof got - 24; d++)
                gn += (size_t)snprintf(got + gn, sizeof got - gn, "%s%lld", d ? ", " : "",
                                       (long long)scale->shape[d]);
            snprintf(got + gn, sizeof got - gn, "]");
            st__err(err, err_len, "%s: tensor '%s': block scale '%s' has shape %s, want %s", path,
                    t->name, scale->name, got, want);
            return -1;
        }
    }
    size_t n = (size_t)(nrows * cols), es = st__dtype_sizes[t->dtype];
    if (n == 0) return 0;
    uint64_t skip = (uint64_t)row0 * (uint64_t)cols * es;
    if (es <= 4) {
        if (st__read_bytes(ix, t, skip, (uint64_t)n * es, (unsigned char *)dst + n * 4 - n * es,
                           err, err_len))
            return -1;
        st__convert_tail(t->dtype, dst, n);
    } else {
        /* 8-byte types do not fit in place: convert through a bounded bounce buffer. */
        size_t chunk = 1 << 16;
        unsigned char *tmp = malloc(chunk * es);
        if (!tmp) {
            st__err(err, err_len, "%s: tensor '%s': out of memory", path, t->name);
            return -1;
        }
        for (size_t k = 0; k < n; k += chunk) {
            size_t m = n - k < chunk ? n - k : chunk;
            if (st__read_bytes(ix, t, skip + k * es, m * es, tmp, err, err_len)) {
                free(tmp);
                return -1;
            }
            for (size_t j = 0; j < m; j++) {
                if (t->dtype == ST_I64) {
                    int64_t x;
                    memcpy(&x, tmp + j * 8, 8);
                    dst[k + j] = (float)x;
                } else {
                    double x;
                    memcpy(&x, tmp + j * 8, 8);
                    dst[k + j] = (float)x;
                }
            }
        }
        free(tmp);
    }
    if (scale) {
        /* Flattened row r = e*O + o uses scale row e*sO + o/128; that is monotonic in r, so the rows
         * needed form one contiguous range of the flattened [E*sO, sI] scale. */
        int64_t last = row0 + nrows - 1;
        int64_t s0 = (row0 / O) * sO + (row0 % O) / 128, s1 = (last / O) * sO + (last % O) / 128;
        float *s = malloc((size_t)((s1 - s0 + 1) * sI) * sizeof *s);
        if (!s) {
            st__err(err, err_len, "%s: tensor '%s': out of memory for its block scale", path,
                    t->name);
            return -1;
        }
        if (st_read_f32_rows(ix, scale, s0, s1 - s0 + 1, s, err, err_len)) { free(s); return -1; }
        for (int64_t r = 0; r < nrows; r++) {
            int64_t g = row0 + r;
            const float *srow = s + ((g / O) * sO + (g % O) / 128 - s0) * sI;
            float *drow = dst + r * cols;
            for (int64_t i = 0; i < cols; i++) drow[i] = drow[i] * srow[i / 128];
        }
        free(s);
    }
    return 0;
}

int st_read_f32(const StIndex *ix, const StTensor *t, float *dst, char *err, size_t err_len) {
    int64_t rows = 1;
    for (int d = 0; t && d + 1 < t->ndim; d++) rows *= t->shape[d];
    return st_read_f32_rows(ix, t, 0, rows, dst, err, err_len);
}

#endif /* ST_IMPLEMENTATION_DONE */
#endif /* ST_IMPLEMENTATION */

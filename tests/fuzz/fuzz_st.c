/* Fuzz target: st.h on arbitrary safetensors files: the header parser, the cross-file index (name
   hash, duplicates across shards) and every read path (raw bytes, each dtype's conversion to f32,
   row ranges, F8 block scales looked up across files).
   Input: byte 0 bit 0 clear: the rest is one file. Set: bytes 1-2 (little endian) split the rest
   into two files, as two shards of one model. Files live in memfds, opened by their /proc path. */
#define _GNU_SOURCE
#define JSON_IMPLEMENTATION
#define ST_IMPLEMENTATION
#include "st.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define REQUIRE(cond) do { if (!(cond)) abort(); } while (0)

static int memfile(const uint8_t *data, size_t n, char *path, size_t path_len) {
    int fd = memfd_create("fuzz_st", MFD_CLOEXEC);
    if (fd < 0) abort();
    if (n && write(fd, data, n) != (ssize_t)n) abort();
    snprintf(path, path_len, "/proc/self/fd/%d", fd);
    return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t *body = data + 1;
    size_t n = size - 1, split = n;
    int two = data[0] & 1;
    if (two) {
        if (size < 3) return 0;
        body = data + 3; n = size - 3;
        split = (size_t)(data[1] | data[2] << 8) % (n + 1);
    }
    char paths[2][64];
    const char *list[2] = { paths[0], paths[1] };
    int fds[2] = { -1, -1 };
    fds[0] = memfile(body, split, paths[0], sizeof paths[0]);
    if (two) fds[1] = memfile(body + split, n - split, paths[1], sizeof paths[1]);
    char err[512] = "";
    StIndex *ix = st_open_files(list, two ? 2 : 1, err, sizeof err);
    if (!ix) {
        REQUIRE(err[0] && !strchr(err, '\n'));
    } else {
        for (int f = 0; f < st_file_count(ix); f++) {
            REQUIRE(st_file_path(ix, f) && st_file_fd(ix, f) >= 0);
            st_file_metadata(ix, f, "format");
            st_file_metadata(ix, f, "colibri.fmt");
        }
        for (size_t i = 0; i < st_count(ix); i++) {
            const StTensor *t = st_tensor_at(ix, i);
            REQUIRE(st_find(ix, t->name) == t);                      /* names are unique */
            REQUIRE(t->offset + t->nbytes <= st_file_size(ix, t->file));
            REQUIRE((uint64_t)st_numel(t) * st_dtype_size(t->dtype) == t->nbytes);
            void *raw = malloc(t->nbytes ? t->nbytes : 1);
            REQUIRE(st_read_raw(ix, t, raw, err, sizeof err) == 0);
            free(raw);
            /* every element as f32: bounded, since numel <= nbytes <= the input's size */
            float *v = malloc((size_t)st_numel(t) * sizeof(float) + 1);
            if (st_read_f32(ix, t, v, err, sizeof err)) REQUIRE(err[0] && !strchr(err, '\n'));
            int64_t rows = 1;
            for (int d = 0; d + 1 < t->ndim; d++) rows *= t->shape[d];
            if (rows > 1 && st_read_f32_rows(ix, t, rows / 2, rows - rows / 2, v, err, sizeof err))
                REQUIRE(err[0] && !strchr(err, '\n'));
            /* past the end: refused */
            REQUIRE(st_read_f32_rows(ix, t, rows, 1, v, err, sizeof err) != 0);
            free(v);
        }
        st_close(ix);
    }
    close(fds[0]);
    if (two) close(fds[1]);
    return 0;
}

/* durable.h — files that survive a kill -9, and the checksum and byte order they are written in.

   One job: the pieces every file glm writes shares (STATS, the usage history, session files, the
   prefix cache's entries, DOCTOR's rates, quality runs' outputs). Errors are returned into
   (err, err_len), never fatal, so callers choose what a failure means.

   Atomic replacement: a kill -9 at any moment leaves either the old file or the new one, never a
   torn one, and no litter. The data is written to an unnamed file (O_TMPFILE) in the target's
   directory, fsync'd, given a temporary name "PATH.tmp.PID" and renamed over the target in one
   step; the directory is fsync'd too, so the rename survives a power cut. Where O_TMPFILE is
   unsupported the data is written under the temporary name from the start. A kill between naming
   and renaming (two system calls) leaves PATH.tmp.PID behind: the next write of PATH removes
   those of processes that no longer exist.
     FILE *atomic_begin(AtomicFile *af, const char *path, char *err, size_t err_len);
                 a stream to write the new contents to, or NULL with err filled
     int   atomic_commit(AtomicFile *af, char *err, size_t err_len);
                 0: path now holds what was written; -1 with err filled: path is untouched
     void  atomic_abort(AtomicFile *af);        drops what was written; path is untouched
     void  atomic_sweep(const char *path);      removes PATH.tmp.PID of dead processes
     void  atomic_dir_of(const char *path, char *dir, size_t n);   "." / "/" / the folder part

   Hash64: a streaming 64-bit hash (xxHash64's round function over four lanes of 8-byte words),
   fast enough to check hundreds of MB; not a cryptographic hash. Its values are part of files on
   users' disks (session files, prefix cache entries and their names, logits files): any change
   to it is a format change. Feeding the bytes in any pieces gives the one-shot value.
     void     hash64_init(Hash64 *h);
     void     hash64_update(Hash64 *h, const void *data, size_t n);
     uint64_t hash64_final(const Hash64 *h);     (h may be fed further afterwards)
     uint64_t hash64(const void *data, size_t n);   one shot

   Little-endian fields:
     void put_u32(unsigned char *p, uint32_t v);   uint32_t get_u32(const unsigned char *p);
     void put_u64(unsigned char *p, uint64_t v);   uint64_t get_u64(const unsigned char *p);

   #define DURABLE_IMPLEMENTATION in exactly one file before including this (O_TMPFILE needs
   _GNU_SOURCE defined before the first system header; without it the named fallback is used). */
#ifndef DURABLE_H
#define DURABLE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    FILE *f;
    char path[4096], tmp[4200];
    int anonymous;              /* O_TMPFILE: the data has no name until commit */
} AtomicFile;

FILE *atomic_begin(AtomicFile *af, const char *path, char *err, size_t err_len);
int atomic_commit(AtomicFile *af, char *err, size_t err_len);
void atomic_abort(AtomicFile *af);
void atomic_sweep(const char *path);
void atomic_dir_of(const char *path, char *dir, size_t n);

typedef struct { uint64_t lane[4], total; unsigned char tail[32]; size_t tail_len; } Hash64;

void hash64_init(Hash64 *h);
void hash64_update(Hash64 *h, const void *data, size_t n);
uint64_t hash64_final(const Hash64 *h);
uint64_t hash64(const void *data, size_t n);

void put_u32(unsigned char *p, uint32_t v);
void put_u64(unsigned char *p, uint64_t v);
uint32_t get_u32(const unsigned char *p);
uint64_t get_u64(const unsigned char *p);

#endif /* DURABLE_H */

#ifdef DURABLE_IMPLEMENTATION
#ifndef DURABLE_IMPLEMENTATION_DONE
#define DURABLE_IMPLEMENTATION_DONE

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> 8 * i);
}
void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> 8 * i);
}
uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

void atomic_dir_of(const char *path, char *dir, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, n, ".");
    else if (slash == path) snprintf(dir, n, "/");
    else snprintf(dir, n, "%.*s", (int)(slash - path), path);
}

void atomic_sweep(const char *path) {
    char dir[4096];
    atomic_dir_of(path, dir, sizeof dir);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const size_t base_len = strlen(base);
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, base, base_len) || strncmp(e->d_name + base_len, ".tmp.", 5))
            continue;
        char *end;
        long pid = strtol(e->d_name + base_len + 5, &end, 10);
        if (*end || pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char stale[8300];
        snprintf(stale, sizeof stale, "%s/%s", dir, e->d_name);
        unlink(stale);
    }
    closedir(d);
}

FILE *atomic_begin(AtomicFile *af, const char *path, char *err, size_t err_len) {
    memset(af, 0, sizeof *af);
    atomic_sweep(path);
    if (strlen(path) >= sizeof af->path) {
        snprintf(err, err_len, "%s: path too long", path);
        return NULL;
    }
    snprintf(af->path, sizeof af->path, "%s", path);
    int fd = -1;
#ifdef O_TMPFILE
    char dir[4096];
    atomic_dir_of(path, dir, sizeof dir);
    fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
    if (fd >= 0) af->anonymous = 1;
#endif
    if (fd < 0) {
        snprintf(af->tmp, sizeof af->tmp, "%s.tmp.%d", path, (int)getpid());
        fd = open(af->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
            snprintf(err, err_len, "cannot write %s: %s", af->tmp, strerror(errno));
            return NULL;
        }
    }
    af->f = fdopen(fd, "w");
    if (!af->f) {
        close(fd);
        snprintf(err, err_len, "cannot write %s: %s", path, strerror(errno));
        return NULL;
    }
    return af->f;
}

void atomic_abort(AtomicFile *af) {
    if (af->f) fclose(af->f);
    af->f = NULL;
    if (!af->anonymous && af->tmp[0]) unlink(af->tmp);
}

int atomic_commit(AtomicFile *af, char *err, size_t err_len) {
    int fd = fileno(af->f);
    if (fflush(af->f) || fsync(fd)) {
        snprintf(err, err_len, "writing %s failed: %s", af->path, strerror(errno));
        atomic_abort(af);
        return -1;
    }
    if (af->anonymous) {   /* give the data a name next to the target, then rename it over */
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        snprintf(af->tmp, sizeof af->tmp, "%s.tmp.%d", af->path, (int)getpid());
        unlink(af->tmp);
        if (linkat(AT_FDCWD, proc, AT_FDCWD, af->tmp, AT_SYMLINK_FOLLOW)) {
            snprintf(err, err_len, "writing %s failed: cannot link its data: %s", af->path,
                     strerror(errno));
            af->tmp[0] = 0;
            atomic_abort(af);
            return -1;
        }
        af->anonymous = 0;
    }
    if (fclose(af->f)) {
        af->f = NULL;
        snprintf(err, err_len, "writing %s failed: %s", af->path, strerror(errno));
        atomic_abort(af);
        return -1;
    }
    af->f = NULL;
    if (rename(af->tmp, af->path)) {
        snprintf(err, err_len, "cannot rename %s to %s: %s", af->tmp, af->path, strerror(errno));
        atomic_abort(af);
        return -1;
    }
    char dir[4096];
    atomic_dir_of(af->path, dir, sizeof dir);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) { fsync(dfd); close(dfd); }   /* the rename itself survives a power cut */
    return 0;
}

#define HASH64_P1 0x9E3779B185EBCA87ull
#define HASH64_P2 0xC2B2AE3D27D4EB4Full
#define HASH64_P3 0x165667B19E3779F9ull
#define HASH64_P4 0x85EBCA77C2B2AE63ull
#define HASH64_P5 0x27D4EB2F165667C5ull

static uint64_t hash64__rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t hash64__round(uint64_t acc, uint64_t word) {
    return hash64__rotl(acc + word * HASH64_P2, 31) * HASH64_P1;
}

void hash64_init(Hash64 *h) {
    memset(h, 0, sizeof *h);
    h->lane[0] = HASH64_P1 + HASH64_P2;
    h->lane[1] = HASH64_P2;
    h->lane[3] = 0 - HASH64_P1;
}

/* Words are read in the machine's byte order (memcpy), as the files on disk were hashed. */
static void hash64__blocks(Hash64 *h, const unsigned char *p, size_t blocks) {
    for (size_t b = 0; b < blocks; b++, p += 32)
        for (int k = 0; k < 4; k++) {
            uint64_t w;
            memcpy(&w, p + 8 * k, 8);
            h->lane[k] = hash64__round(h->lane[k], w);
        }
}

void hash64_update(Hash64 *h, const void *data, size_t n) {
    const unsigned char *p = data;
    h->total += n;
    if (h->tail_len) {
        size_t take = 32 - h->tail_len < n ? 32 - h->tail_len : n;
        memcpy(h->tail + h->tail_len, p, take);
        h->tail_len += take;
        p += take;
        n -= take;
        if (h->tail_len < 32) return;
        hash64__blocks(h, h->tail, 1);
        h->tail_len = 0;
    }
    hash64__blocks(h, p, n / 32);
    if (n % 32) memcpy(h->tail, p + n / 32 * 32, n % 32);
    h->tail_len = n % 32;
}

uint64_t hash64_final(const Hash64 *h) {
    uint64_t acc = hash64__rotl(h->lane[0], 1) + hash64__rotl(h->lane[1], 7) +
                   hash64__rotl(h->lane[2], 12) + hash64__rotl(h->lane[3], 18);
    for (int k = 0; k < 4; k++)
        acc = (acc ^ hash64__round(0, h->lane[k])) * HASH64_P1 + HASH64_P4;
    acc += h->total;
    size_t i = 0;
    for (; i + 8 <= h->tail_len; i += 8) {
        uint64_t w;
        memcpy(&w, h->tail + i, 8);
        acc = hash64__rotl(acc ^ hash64__round(0, w), 27) * HASH64_P1 + HASH64_P4;
    }
    for (; i < h->tail_len; i++) acc = hash64__rotl(acc ^ h->tail[i] * HASH64_P5, 11) * HASH64_P1;
    acc ^= acc >> 33; acc *= HASH64_P2;
    acc ^= acc >> 29; acc *= HASH64_P3;
    return acc ^ (acc >> 32);
}

uint64_t hash64(const void *data, size_t n) {
    Hash64 h;
    hash64_init(&h);
    hash64_update(&h, data, n);
    return hash64_final(&h);
}

#endif /* DURABLE_IMPLEMENTATION_DONE */
#endif /* DURABLE_IMPLEMENTATION */

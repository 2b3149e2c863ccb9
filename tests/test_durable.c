/* Unit tests of durable.h: atomic replacement (commit replaces the whole file, abort and a failed
   commit leave the old one, nothing is visible before the commit, stale temporary files of dead
   writers are swept, no litter), Hash64 (fed in any pieces == one shot, pinned values: the hash
   is part of files on users' disks) and the little-endian fields. */
#define _GNU_SOURCE
#define DURABLE_IMPLEMENTATION
#include "durable.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "scratch.h"

static char dir[256];

/* The file's contents as a string ("" when missing). */
static const char *contents(const char *path) {
    static char buf[4096];
    buf[0] = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return buf;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* Names in the test folder, other than . and .. */
static int entries(void) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
}

static int write_atomic(const char *path, const char *text, int commit, char *err, size_t n) {
    AtomicFile af;
    FILE *f = atomic_begin(&af, path, err, n);
    if (!f) return -1;
    fputs(text, f);
    if (!commit) {
        atomic_abort(&af);
        return 0;
    }
    return atomic_commit(&af, err, n);
}

static void test_atomic(void) {
    char path[512], err[8500];
    snprintf(path, sizeof path, "%s/file", dir);
    CHECK("commit creates the file", write_atomic(path, "old contents", 1, err, sizeof err) == 0 &&
                                          !strcmp(contents(path), "old contents"));
    CHECK("commit replaces the whole file (a shorter one leaves nothing of the old)",
          write_atomic(path, "new", 1, err, sizeof err) == 0 && !strcmp(contents(path), "new"));
    CHECK("abort leaves the old file", write_atomic(path, "aborted", 0, err, sizeof err) == 0 &&
                                           !strcmp(contents(path), "new"));
    CHECK("... and no litter", entries() == 1);
    {
        AtomicFile af;
        FILE *f = atomic_begin(&af, path, err, sizeof err);
        fputs("in flight", f);
        fflush(f);
        CHECK("before the commit, the target holds the old file",
              !strcmp(contents(path), "new"));
        CHECK("before the commit, the data has no name but a temporary one",
              entries() == 1 || (entries() == 2 && af.tmp[0] && !access(af.tmp, F_OK)));
        CHECK("commit", atomic_commit(&af, err, sizeof err) == 0 &&
                            !strcmp(contents(path), "in flight"));
        CHECK("... no temporary name is left", entries() == 1);
    }
    /* a writer killed between naming its data and the rename */
    char stale[600], live[600];
    snprintf(stale, sizeof stale, "%s.tmp.%d", path, (int)dead_pid());
    snprintf(live, sizeof live, "%s.tmp.%d", path, (int)getppid());
    FILE *f = fopen(stale, "w");
    fputs("torn", f);
    fclose(f);
    f = fopen(live, "w");
    fputs("a live writer's", f);
    fclose(f);
    CHECK("the next write of the path succeeds",
          write_atomic(path, "after a kill", 1, err, sizeof err) == 0 &&
              !strcmp(contents(path), "after a kill"));
    CHECK("... and removes the temporary file of the dead writer", access(stale, F_OK) == -1);
    CHECK("... but not one of a live process", access(live, F_OK) == 0);
    unlink(live);
    atomic_sweep(path);
    CHECK("atomic_sweep leaves the target alone", !strcmp(contents(path), "after a kill"));

    /* failures: the old file stays, err says why */
    char sub[512], missing[512];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    mkdir(sub, 0700);
    snprintf(missing, sizeof missing, "%s/no/such/dir/file", dir);
    err[0] = 0;
    CHECK("begin in a missing folder fails, naming the path",
          write_atomic(missing, "x", 1, err, sizeof err) == -1 && strstr(err, "no/such/dir"));
    err[0] = 0;
    CHECK("a commit over a directory fails (rename) and says so",
          write_atomic(sub, "x", 1, err, sizeof err) == -1 && strstr(err, "cannot rename"));
    struct stat st;
    CHECK("... the directory is still one, and no temporary file is left",
          !stat(sub, &st) && S_ISDIR(st.st_mode) && entries() == 2);
    rmdir(sub);
    char longpath[5000];
    memset(longpath, 'a', sizeof longpath - 1);
    longpath[sizeof longpath - 1] = 0;
    CHECK("a path too long is refused with a message",
          write_atomic(longpath, "x", 1, err, sizeof err) == -1 && strstr(err, "path too long"));

    char d[64];
    atomic_dir_of("name", d, sizeof d);
    int ok = !strcmp(d, ".");
    atomic_dir_of("/name", d, sizeof d);
    ok &= !strcmp(d, "/");
    atomic_dir_of("a/b/name", d, sizeof d);
    ok &= !strcmp(d, "a/b");
    CHECK("atomic_dir_of: '.', '/', the folder part", ok);
    unlink(path);
}

static void test_hash(void) {
    static unsigned char buf[1000];
    for (int i = 0; i < 1000; i++) buf[i] = (unsigned char)(i * 37 + 11);
    /* pinned: a change here is a change of every session file, prefix cache entry (and its name)
       and logits file */
    static const struct { size_t n; uint64_t h; } pinned[] = {
        { 0, 0x3fdf455f9dcf1e62ull },   { 1, 0x6dce7c4a3409f7cdull },
        { 7, 0xb44e2f5615629d2aull },   { 8, 0xf2b85511b2f6e830ull },
        { 31, 0x51dc44bb485bd09full },  { 32, 0xcc6b8aaada790b2dull },
        { 33, 0x35ec49850475a832ull },  { 64, 0x155ccce4bf32befcull },
        { 100, 0x007708086b2f6fc1ull }, { 1000, 0x128da10cfbdc59d9ull },
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++) {
        if (hash64(buf, pinned[i].n) != pinned[i].h) {
            printf("  hash64 of %zu bytes: %016llx\n", pinned[i].n,
                   (unsigned long long)hash64(buf, pinned[i].n));
            ok = 0;
        }
    }
    CHECK("hash64: the pinned values", ok);
    /* every split point into two pieces, and three pieces around the 32-byte blocks */
    ok = 1;
    const size_t lens[] = { 0, 1, 31, 32, 33, 63, 64, 65, 100, 257 };
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const size_t n = lens[li];
        const uint64_t whole = hash64(buf, n);
        for (size_t a = 0; a <= n; a++) {
            Hash64 h;
            hash64_init(&h);
            hash64_update(&h, buf, a);
            hash64_update(&h, buf + a, n - a);
            ok &= hash64_final(&h) == whole;
            for (size_t b = a; b <= n && b < a + 40; b++) {
                hash64_init(&h);
                hash64_update(&h, buf, a);
                hash64_update(&h, buf + a, b - a);
                hash64_update(&h, buf + b, n - b);
                ok &= hash64_final(&h) == whole;
            }
        }
    }
    CHECK("hash64: fed in two or three pieces at every split point == one shot", ok);
    Hash64 h;
    hash64_init(&h);
    hash64_update(&h, buf, 40);
    const uint64_t first = hash64_final(&h);
    hash64_update(&h, buf + 40, 60);
    CHECK("hash64_final leaves the state to be fed further",
          first == hash64(buf, 40) && hash64_final(&h) == hash64(buf, 100));
    ok = 1;
    for (int i = 0; i < 1000 * 8; i += 7) {
        buf[i / 8] ^= (unsigned char)(1u << (i % 8));
        ok &= hash64(buf, 1000) != pinned[9].h;
        buf[i / 8] ^= (unsigned char)(1u << (i % 8));
    }
    CHECK("hash64: a flipped bit changes it (every 7th bit of 1000 bytes)", ok);
}

static void test_fields(void) {
    unsigned char b[12];
    put_u32(b, 0x01020304u);
    put_u64(b + 4, 0x0102030405060708ull);
    static const unsigned char want[12] = { 4, 3, 2, 1, 8, 7, 6, 5, 4, 3, 2, 1 };
    CHECK("put_u32 / put_u64 write little-endian", !memcmp(b, want, 12));
    CHECK("get_u32 / get_u64 read them back",
          get_u32(b) == 0x01020304u && get_u64(b + 4) == 0x0102030405060708ull);
    put_u32(b, 0xFFFFFFFFu);
    put_u64(b + 4, 0xFFFFFFFFFFFFFFFFull);
    CHECK("all bits set come back", get_u32(b) == 0xFFFFFFFFu && get_u64(b + 4) == ~0ull);
}

int main(void) {
    if (scratch_dir(dir, sizeof dir, "test_durable")) return 1;
    test_atomic();
    test_hash();
    test_fields();
    rmdir(dir);
    return failures ? 1 : 0;
}

/* Replay main for the fuzz targets: runs LLVMFuzzerTestOneInput once on each file named (a
   directory stands for every file in it), without libFuzzer. Built with gcc as
   tests/bin/fuzz_replay_NAME, so `make test` (and `make asan`) replays every seed and every kept
   crash of tests/fuzz/. A crash or a sanitizer report ends the process; otherwise it prints
   "replayed N inputs" and exits 0. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "replay: cannot open %s\n", path); return -1; }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            } else buf = nb;
        }
    }
    fclose(f);
    if (!buf) { fprintf(stderr, "replay: out of memory reading %s\n", path); return -1; }
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
    /* exactly n bytes: a read past the input is caught by ASan */
    uint8_t *exact = malloc(n ? n : 1);
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    int count = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "replay: %s does not exist\n", argv[i]);
            bad = 1;
            continue;
        }
        if (!S_ISDIR(sb.st_mode)) { bad |= replay_file(argv[i]) != 0; count++; continue; }
        DIR *d = opendir(argv[i]);
        if (!d) { bad = 1; continue; }
        char **names = NULL;
        size_t n = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
            if (de->d_name[0] == '.') continue;
            names = realloc(names, (n + 1) * sizeof *names);
            names[n] = malloc(strlen(argv[i]) + strlen(de->d_name) + 2);
            sprintf(names[n++], "%s/%s", argv[i], de->d_name);
        }
        closedir(d);
        if (n) qsort(names, n, sizeof *names, cmp_names);
        for (size_t k = 0; k < n; k++) {
            bad |= replay_file(names[k]) != 0;
            count++;
            free(names[k]);
        }
        free(names);
    }
    printf("replayed %d inputs\n", count);
    return bad;
}

/* Session files at GLM-5.2 shapes: what SESSION writes and reads for a conversation of N tokens
   (default 2000), through kvfile.h's session_save / session_load (the engine, glm.c,
   included whole). The cache is GLM-5.2's (78 layers + the MTP layer, kv_lora 512, rope 64, indexer
   keys of 128 on the 21 full-indexer layers + MTP, vocab 154880, hidden 6144), filled with
   pseudo-random finite floats: no model is needed, the bytes are the same. Prints the file size,
   the bytes per 1,000 tokens, and the save (write + fsync + rename) and load (check pass + load
   pass) times, median of 3, and checks the loaded rows are bit-identical.
     make bench/session_bench && ./bench/session_bench [tokens] [dir]    (dir: where the file goes, default /tmp) */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "../glm.c"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const int n = argc > 1 ? atoi(argv[1]) : 2000;
    const char *dir = argc > 2 ? argv[2] : "/tmp";
    if (n < 1 || n > 100000) die("tokens: 1..100000");
    /* a session holds the decoder layers, not the MTP head */
    enum { LAYERS = 78, CACHED = LAYERS };
    unsigned char indexer[CACHED];
    int full = 0;
    /* docs/model.md §4.6: index_topk_freq 4, index_skip_topk_offset 3 */
    for (int l = 0; l < LAYERS; l++) {
        int k = l - 3 + 1;
        indexer[l] = (k > 0 ? k : 0) % 4 == 0;
        full += indexer[l];
    }
    SessionKey key = { .config = 1,
                       .tensors = 2,
                       .weights = 3,
                       .formats = 4,
                       .idot = 1,
                       .absorb = 1,
                       .latent_eps = 1e-6f,
                       .mtp_zero_pos0 = 1,
                       .expert_bits = 4,
                       .dense_bits = 4,
                       .layers = CACHED,
                       .kv_lora = 512,
                       .qk_rope = 64,
                       .index_dim = 128,
                       .vocab = 154880,
                       .hidden = 6144,
                       .layer_indexer = indexer };
    RunState s[2];
    memset(s, 0, sizeof s);
    uint64_t rng = 42;
    for (int k = 0; k < 2; k++) {
        s[k].capacity = n + 1;
        s[k].latent = xcalloc(CACHED, sizeof(float *));
        s[k].rope_key = xcalloc(CACHED, sizeof(float *));
        s[k].index_key = xcalloc(CACHED, sizeof(float *));
        for (int l = 0; l < CACHED; l++) {
            s[k].latent[l] = xcalloc((size_t)(n + 1) * 512, sizeof(float));
            s[k].rope_key[l] = xcalloc((size_t)(n + 1) * 64, sizeof(float));
            if (indexer[l]) s[k].index_key[l] = xcalloc((size_t)(n + 1) * 128, sizeof(float));
            if (k) continue;
            for (size_t i = 0; i < (size_t)n * 512; i++)
                s[k].latent[l][i] =
                    (float)((int64_t)(splitmix64_next(&rng) >> 40) - (1 << 23)) / (1 << 20);
            for (size_t i = 0; i < (size_t)n * 64; i++)
                s[k].rope_key[l][i] =
                    (float)((int64_t)(splitmix64_next(&rng) >> 40) - (1 << 23)) / (1 << 20);
            if (indexer[l])
                for (size_t i = 0; i < (size_t)n * 128; i++)
                    s[k].index_key[l][i] =
                        (float)((int64_t)(splitmix64_next(&rng) >> 40) - (1 << 23)) / (1 << 20);
        }
    }
    int *tokens = xmalloc((size_t)(n + 1) * sizeof(int)),
        *tokens_in = xmalloc((size_t)(n + 1) * sizeof(int));
    for (int i = 0; i < n; i++) tokens[i] = (int)(splitmix64_next(&rng) % 154880);
    float *logits = xcalloc(154880, sizeof(float)), *hidden = xcalloc(6144, sizeof(float));
    float *logits_in = xcalloc(154880, sizeof(float)), *hidden_in = xcalloc(6144, sizeof(float));
    SessionSnapshot snap = { .n_tokens = n,
                             .tokens = tokens,
                             .has_logits = 1,
                             .logits = logits,
                             .hidden = hidden,
                             .seed = 7,
                             .rng_state = 7 };
    const KvRows rows[2] = { run_state_rows(&s[0]), run_state_rows(&s[1]) };
    char path[4096], err[8500];
    snprintf(path, sizeof path, "%s/session_bench.%d", dir, (int)getpid());
    double save[3], load[3], cold[3];
    for (int r = 0; r < 3; r++) {
        double t0 = now_seconds();
        if (session_save(&rows[0], &key, &snap, path, err, sizeof err)) die("%s", err);
        save[r] = now_seconds() - t0;
        /* pass 0: the file in the page cache (just written); 1: evicted first */
        for (int pass = 0; pass < 2; pass++) {
            SessionSource src;
            SessionSnapshot in = { .tokens = tokens_in, .logits = logits_in, .hidden = hidden_in };
            if (session_source_open(&src, path, err, sizeof err)) die("%s: %s", path, err);
            /* clean pages (fsync'd): dropped */
            if (pass) posix_fadvise(src.fd, 0, 0, POSIX_FADV_DONTNEED);
            t0 = now_seconds();
            if (session_load(&rows[1], &key, &src, &in, err, sizeof err)) die("%s: %s", path, err);
            session_source_close(&src);
            *(pass ? &cold[r] : &load[r]) = now_seconds() - t0;
            if (in.n_tokens != n || memcmp(tokens, tokens_in, (size_t)n * sizeof(int)))
                die("tokens differ after the load");
        }
    }
    for (int l = 0; l < CACHED; l++)
        if (memcmp(s[0].latent[l], s[1].latent[l], (size_t)n * 512 * 4) ||
            memcmp(s[0].rope_key[l], s[1].rope_key[l], (size_t)n * 64 * 4) ||
            (indexer[l] && memcmp(s[0].index_key[l], s[1].index_key[l], (size_t)n * 128 * 4)))
            die("layer %d differs after the load", l);
    struct stat st;
    stat(path, &st);
    unlink(path);
    qsort(save, 3, sizeof(double), cmp_double);
    qsort(load, 3, sizeof(double), cmp_double);
    qsort(cold, 3, sizeof(double), cmp_double);
    const double per_token = (double)session_payload_bytes(&key, 1000, 0) / 1000.0;
    printf("GLM-5.2 shapes: %d cached layers (%d with indexer keys), %d tokens\n", CACHED, full + 1,
           n);
    printf("file %.1f MB = %.1f KB per token (%.1f MB per 1,000 tokens) + %.2f MB of logits and "
           "hidden state\n",
           st.st_size / 1e6, per_token / 1e3, per_token * 1000 / 1e6,
           (154880.0 + 6144.0) * 4 / 1e6);
    printf("save %.2f s (%.0f MB/s: write + fsync + rename); load %.2f s from the page cache, %.2f "
           "s from disk "
           "(%.0f / %.0f MB/s: check pass + load pass); medians of 3; rows bit-identical\n",
           save[1], st.st_size / 1e6 / save[1], load[1], cold[1], st.st_size / 1e6 / load[1],
           st.st_size / 1e6 / cold[1]);
    return 0;
}

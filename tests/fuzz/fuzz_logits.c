/* Fuzz target: the logits-file reader of quality.c (KLD=file): lf_check reads a LOGITS_SAVE file
   from memory through the code KLD uses (header, token ids, every record against the windows the
   header describes, the checksum), then lf_match compares it with a run's header. The first input
   byte picks a repair so the fuzzer gets past the checksum random bytes never match:
     bit 0  the trailer is set to the right checksum of the rest
   Every input must end in 0 (a file whose promises hold) or -1 with one line saying why. */
/* most of the program is not called from here */
#pragma GCC diagnostic ignored "-Wunused-function"
#define GLM_NO_MAIN
#include "main.c"

#define REQUIRE(cond) do { if (!(cond)) abort(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const size_t n = size - 1;
    unsigned char *buf = xmalloc(n ? n : 1);
    memcpy(buf, data + 1, n);
    if ((data[0] & 1) && n >= 8) {
        Hash64 h;
        hash64_init(&h);
        hash64_update(&h, buf, n - 8);
        put_u64(buf + n - 8, hash64_final(&h));
    }
    SessionSource src = { .fd = -1, .mem = buf, .size = n };
    LogitsHeader h;
    int *tokens = NULL;
    char err[2048] = "";
    if (lf_check(&src, &h, &tokens, err, sizeof err)) {
        REQUIRE(err[0] && !strchr(err, '\n') && !tokens);
    } else {
        REQUIRE(tokens && h.n_tokens >= 1 && h.n_positions >= 1 && h.n_positions <= h.n_tokens &&
                h.top_k < h.vocab);
        for (uint64_t i = 0; i < h.n_tokens; i++)
            REQUIRE(tokens[i] >= 0 && (uint32_t)tokens[i] < h.vocab);
        REQUIRE(src.off == LF_HEADER_BYTES + 4 * h.n_tokens);   /* left at the first record */
        LogitsHeader run = h;
        run.model_weights ^= 1;
        REQUIRE(lf_match(&h, tokens, &h, tokens, err, sizeof err) == 0);
        REQUIRE(lf_match(&h, tokens, &run, tokens, err, sizeof err) == -1 && strstr(err, "another "
                                                                                         "model"));
        free(tokens);
    }
    free(buf);
    return 0;
}

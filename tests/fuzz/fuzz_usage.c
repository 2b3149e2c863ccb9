/* libFuzzer target: the usage-history reader (tier_usage_decode) on arbitrary bytes. The expected
   fingerprint and shape are taken from the input itself (when it is long enough), so the fuzzer
   reaches the size, checksum and copy paths, not only the magic check; a second decode with fixed
   expectations covers the refusal paths. Any accepted history must fit the buffer it was decoded
   into. Build: clang -g -O1 -fsanitize=fuzzer,address,undefined -I. tests/fuzz/fuzz_usage.c */
#define TIER_IMPLEMENTATION
#include "tier.h"
#include <stdlib.h>
#include <string.h>

static uint64_t le(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char why[256];
    uint32_t small[64];
    tier_usage_decode(data, size, 0, 8, 8, small, NULL, why, sizeof why);
    if (size >= 40) {
        uint64_t layers = le(data + 12, 4), experts = le(data + 16, 4),
                 fingerprint = le(data + 24, 8);
        if (layers && experts && layers <= 4096 && experts <= 4096 &&
            layers * experts <= (1u << 20)) {
            uint32_t *counts = malloc(layers * experts * sizeof *counts);
            uint64_t tokens;
            if (tier_usage_decode(data, size, fingerprint, (int)layers, (int)experts, counts,
                                  &tokens, why, sizeof why) == 0) {
                /* accepted: re-encoding must give back exactly the input */
                uint8_t *again = malloc(size);
                tier_usage_encode(again, fingerprint, (int)layers, (int)experts, tokens, counts);
                if (memcmp(again, data, size)) abort();
                free(again);
            }
            free(counts);
        }
    }
    return 0;
}

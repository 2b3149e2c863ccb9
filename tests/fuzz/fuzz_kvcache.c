/* libFuzzer target for glm.c's prefix cache entry reader (section 8, kvcache_read): the input is
 * an entry file, read from memory through the same code a prefill's lookup uses, against the
 * sparse oracle fixture (loaded once; run from the repository root), as the entry of positions
 * [64, 128) after a fixed chain hash, for fixed token ids. The first input byte picks repairs so
 * the fuzzer gets past the parts random bytes never match:
 *   bit 0  the file is cut or zero-padded to the exact size an entry has
 *   bit 1  the header (all 144 bytes) is set to the expected one
 *   bit 2  the token ids are set to the expected ones
 *   bit 3  the trailer is set to the right checksum of the rest
 *   bits 4-5  the first row that goes into the cache: 0, 1, 63 or 64 (the others are only checked)
 * The reader must return -1 (refused, saying why) or 0 (accepted); either way the cache rows before
 * the first loaded row and the history must be exactly as before (checked against a copy), since
 * they are the conversation's; rows from it on lie past the conversation's end. Anything else
 * aborts.
 * Build: clang -g -O1 -fopenmp -fsanitize=fuzzer,address,undefined -I. tests/fuzz/fuzz_kvcache.c -o fuzz_kvcache -lm
 * Run:   ./fuzz_kvcache -max_total_time=300 tests/fuzz/corpus/kvcache   (from the repository root) */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "../../glm.c"
#include "../glm_fixture.h"   /* the oracle fixture's settings */

enum { START = 64, CAPACITY = 192 };
static Model model;
static RunState state;
static SessionKey key;
static int tokens[KVCACHE_BLOCK];
static uint64_t parent = 0x0123456789abcdefull, chain;
static size_t entry_bytes;
static unsigned char header[SESSION_HEADER_BYTES];
static float *rows_copy;

static void setup(void) {
    Settings set = fixture_settings("tests/fixtures/oracle_sparse", 8);
    model_load(&model, &set, CAPACITY);
    run_state_init(&state, &model, CAPACITY, 8, 0);
    const ForwardOptions opt = { 1, INDEXER_AUTO, 1e-6f, 1 };
    key = session_key(&model, &set, &opt);
    for (int i = 0; i < KVCACHE_BLOCK; i++) tokens[i] = (7 * i + 3) % model.c.vocab;
    chain = kvcache_chain(parent, tokens, KVCACHE_BLOCK);
    kvcache_header(&key, START, parent, chain, header);
    entry_bytes = SESSION_HEADER_BYTES + session_payload_bytes(&key, KVCACHE_BLOCK, 0) + 8;
    rows_copy = xmalloc((size_t)CAPACITY * model.c.kv_lora * sizeof(float));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!rows_copy) setup();
    if (size < 1) return 0;
    const unsigned mode = data[0];
    size_t n = mode & 1 ? entry_bytes : size - 1;
    unsigned char *buf = xcalloc(n ? n : 1, 1);
    memcpy(buf, data + 1, size - 1 < n ? size - 1 : n);
    if ((mode & 2) && n >= sizeof header) memcpy(buf, header, sizeof header);
    if ((mode & 4) && n >= sizeof header + 4 * KVCACHE_BLOCK)
        for (int i = 0; i < KVCACHE_BLOCK; i++)
            put_u32(buf + sizeof header + 4 * i, (uint32_t)tokens[i]);
    if ((mode & 8) && n >= 8) {
        Hash64 h;
        hash64_init(&h);
        hash64_update(&h, buf, n - 8);
        put_u64(buf + n - 8, hash64_final(&h));
    }
    static const int load_froms[4] = { 0, 1, 63, 64 };
    const int load_from = load_froms[(mode >> 4) & 3];
    /* something to lose: layer 0's latent rows hold a known pattern before each read */
    const size_t kept = (size_t)(START + load_from) * model.c.kv_lora;
    for (size_t i = 0; i < (size_t)CAPACITY * model.c.kv_lora; i++) state.latent[0][i] = (float)i;
    memcpy(rows_copy, state.latent[0], kept * sizeof(float));
    SessionSource src = { .fd = -1, .mem = buf, .size = n };
    char err[8500] = "";
    const int rc =
        kvcache_read(&src, &state, &key, tokens, START, parent, chain, load_from, err, sizeof err);
    if (rc != 0 && rc != -1) abort();
    if (rc == -1 && !err[0]) abort();   /* a refusal always says why */
    /* the conversation's rows changed */
    if (memcmp(rows_copy, state.latent[0], kept * sizeof(float))) abort();
    if (rc == 0 && n != entry_bytes) abort();
    free(buf);
    return 0;
}

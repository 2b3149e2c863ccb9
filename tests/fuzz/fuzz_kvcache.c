/* libFuzzer target for kvfile.h's prefix cache entry reader (kvcache_read): the input is an entry
 * file, read from memory through the same code a prefill's lookup uses, against the synthetic key
 * and rows of tests/kv_fixture.h (the sparse oracle fixture's shapes; no model), as the entry of
 * positions [64, 128) after a fixed chain hash, for fixed token ids. The first input byte picks
 * repairs so the fuzzer gets past the parts random bytes never match:
 *   bit 0  the file is cut or zero-padded to the exact size an entry has
 *   bit 1  the header (all 144 bytes) is set to the expected one
 *   bit 2  the token ids are set to the expected ones
 *   bit 3  the trailer is set to the right checksum of the rest
 *   bits 4-5  the first row that goes into the rows: 0, 1, 63 or 64 (the others are only checked)
 * The reader must return -1 (refused, saying why) or 0 (accepted); either way the rows before the
 * first loaded row must be exactly as before (checked against a copy), since they are the
 * conversation's; rows from it on lie past the conversation's end. Anything else aborts.
 * Build: clang -g -O1 -fsanitize=fuzzer,address,undefined -I. tests/fuzz/fuzz_kvcache.c -o fuzz_kvcache -lm
 * Run:   ./fuzz_kvcache -max_total_time=300 tests/fuzz/corpus/kvcache */
#include "../kv_fixture.h"

enum { START = 64, CAPACITY = 192 };
static SessionKey key;
static KvFixtureRows rows, rows_copy;
static int tokens[KVCACHE_BLOCK];
static uint64_t parent = 0x0123456789abcdefull, chain;
static size_t entry_bytes;
static unsigned char header[SESSION_HEADER_BYTES];
static int ready;

static void setup(void) {
    key = kv_fixture_key();
    kv_fixture_rows(&rows, CAPACITY);
    kv_fixture_rows(&rows_copy, CAPACITY);
    kv_fixture_fill(&rows_copy, 4);
    for (int i = 0; i < KVCACHE_BLOCK; i++) tokens[i] = (7 * i + 3) % key.vocab;
    chain = kvcache_chain(parent, tokens, KVCACHE_BLOCK);
    kvcache_header(&key, START, parent, chain, header);
    entry_bytes = SESSION_HEADER_BYTES + session_payload_bytes(&key, KVCACHE_BLOCK, 0) + 8;
    ready = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!ready) setup();
    if (size < 1) return 0;
    const unsigned mode = data[0];
    size_t n = mode & 1 ? entry_bytes : size - 1;
    unsigned char *buf = kv_fixture_alloc(n);
    memcpy(buf, data + 1, size - 1 < n ? size - 1 : n);
    if ((mode & 2) && n >= sizeof header) memcpy(buf, header, sizeof header);
    if ((mode & 4) && n >= sizeof header + 4 * KVCACHE_BLOCK)
        for (int i = 0; i < KVCACHE_BLOCK; i++)
            put_u32(buf + sizeof header + 4 * i, (uint32_t)tokens[i]);
    if ((mode & 8) && n >= 8) put_u64(buf + n - 8, hash64(buf, n - 8));
    static const int load_froms[4] = { 0, 1, 63, 64 };
    const int load_from = load_froms[(mode >> 4) & 3];
    /* something to lose: the rows hold known values before each read */
    kv_fixture_fill(&rows, 4);
    SessionSource src = { .fd = -1, .mem = buf, .size = n };
    char err[8500] = "";
    const int rc = kvcache_read(&src, &rows.rows, &key, tokens, START, parent, chain, load_from,
                                err, sizeof err);
    if (rc != 0 && rc != -1) abort();
    if (rc == -1 && !err[0]) abort();   /* a refusal always says why */
    /* the conversation's rows changed */
    if (!kv_fixture_same(&rows_copy, &rows, 0, START + load_from)) abort();
    if (rc == 0 && n != entry_bytes) abort();
    free(buf);
    return 0;
}

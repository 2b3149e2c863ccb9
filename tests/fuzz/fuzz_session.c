/* libFuzzer target for kvfile.h's session-file reader: the input is a session file, read from
 * memory through session_load (what SESSION and :load use) against the synthetic key and rows of
 * tests/kv_fixture.h (the sparse oracle fixture's shapes; no model). The first input byte picks
 * repairs so the fuzzer gets past the parts random bytes never match:
 *   bit 0  the header's fingerprint, settings and shapes (bytes 0..103) are set to the key's
 *   bit 1  the trailer is set to the right checksum of the rest
 * The reader must return -1 (refused) or 0 (loaded); on 0 the conversation must be sane (its
 * length inside the rows, every id in the vocabulary, pending text shorter than a character);
 * on -1 the rows, history, logits and hidden state must be exactly as before (checked against a
 * copy). Anything else aborts.
 * Build: clang -g -O1 -fsanitize=fuzzer,address,undefined -I. tests/fuzz/fuzz_session.c -o fuzz_session -lm
 * Run:   ./fuzz_session -max_total_time=300 tests/fuzz/corpus/session */
#include "../kv_fixture.h"

enum { CAPACITY = 64 };
static SessionKey key;
static KvFixtureRows rows, rows_copy;
static int history[CAPACITY], history_copy[CAPACITY];
static float logits[512], hidden[64], logits_copy[512], hidden_copy[64];
static unsigned char header_prefix[104];
static int ready;

static void setup(void) {
    key = kv_fixture_key();
    kv_fixture_rows(&rows, CAPACITY);
    kv_fixture_rows(&rows_copy, CAPACITY);
    kv_fixture_fill(&rows_copy, 3);
    for (int i = 0; i < CAPACITY; i++) history_copy[i] = i % key.vocab;
    for (int i = 0; i < 512; i++) logits_copy[i] = (float)i;
    for (int i = 0; i < 64; i++) hidden_copy[i] = -(float)i;
    SessionSnapshot empty = { 0 };
    unsigned char h[SESSION_HEADER_BYTES];
    session_header(&key, &empty, h);
    memcpy(header_prefix, h, sizeof header_prefix);
    ready = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!ready) setup();
    if (size < 1) return 0;
    const unsigned mode = data[0];
    size_t n = size - 1;
    unsigned char *buf = kv_fixture_alloc(n);
    memcpy(buf, data + 1, n);
    if ((mode & 1) && n >= sizeof header_prefix) memcpy(buf, header_prefix, sizeof header_prefix);
    if ((mode & 2) && n >= 8) put_u64(buf + n - 8, hash64(buf, n - 8));
    /* something to lose: the rows, history, logits and hidden state hold known values */
    kv_fixture_fill(&rows, 3);
    memcpy(history, history_copy, sizeof history);
    memcpy(logits, logits_copy, sizeof logits);
    memcpy(hidden, hidden_copy, sizeof hidden);
    SessionSource src = { .fd = -1, .mem = buf, .size = n };
    SessionSnapshot snap = { .tokens = history, .logits = logits, .hidden = hidden };
    char err[8500] = "";
    const int rc = session_load(&rows.rows, &key, &src, &snap, err, sizeof err);
    if (rc == 0) {
        if (snap.n_tokens < 0 || snap.n_tokens >= CAPACITY || snap.text_npending < 0 ||
            snap.text_npending > 3)
            abort();
        for (int i = 0; i < snap.n_tokens; i++)
            if (history[i] < 0 || history[i] >= key.vocab) abort();
    } else if (rc == -1) {
        if (!err[0]) abort();   /* a refusal always says why */
        if (!kv_fixture_same(&rows_copy, &rows, 0, CAPACITY) ||
            memcmp(history_copy, history, sizeof history) ||
            memcmp(logits_copy, logits, sizeof logits) ||
            memcmp(hidden_copy, hidden, sizeof hidden))
            abort();            /* a refused file changed the conversation */
    } else {
        /* -2 needs the bytes to change between the passes: memory does not */
        abort();
    }
    free(buf);
    return 0;
}

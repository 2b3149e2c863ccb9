/* libFuzzer target for glm.c's session-file reader (section 8): the input is a session file, read
 * from memory through the same code SESSION and :load use, against the sparse oracle fixture
 * (loaded once; run from the repository root). The first input byte picks repairs so the fuzzer
 * gets past the parts random bytes never match:
 *   bit 0  the header's fingerprint, settings and shapes (bytes 0..103) are set to this model's
 *   bit 1  the trailer is set to the right checksum of the rest
 * The reader must return -1 (refused) or 0 (loaded); on 0 the conversation must be sane (its
 * length inside the cache, every id in the vocabulary, pending text shorter than a character);
 * on -1 the cache and history must be exactly as before (checked against a copy). Anything else
 * aborts.
 * Build: clang -g -O1 -fopenmp -fsanitize=fuzzer,address,undefined -I. tests/fuzz/fuzz_session.c -o fuzz_session -lm
 * Run:   ./fuzz_session -max_total_time=300 tests/fuzz/corpus/session   (from the repository root) */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "../../glm.c"
#include "../glm_fixture.h"   /* the oracle fixture's settings */

static Model model;
static RunState session;
static Generator *gen;
static SessionKey key;
static ForwardOptions opt;
static unsigned char header_prefix[104];
static float *latent0_copy;
static int *history_copy;

static void setup(void) {
    Settings set = fixture_settings("tests/fixtures/oracle_sparse", 8);
    model_load(&model, &set, 64);
    run_state_init(&session, &model, 64, 8, 0);
    opt = (ForwardOptions){ 1, INDEXER_AUTO, 1e-6f, 1 };
    key = session_key(&model, &set, &opt);
    gen = generator_create(&model, &session, &opt, (SamplerSettings){ 0.0f, 1.0f, 1 });
    SessionSnapshot empty = { 0 };
    unsigned char h[SESSION_HEADER_BYTES];
    session_header(&key, &empty, h);
    memcpy(header_prefix, h, sizeof header_prefix);
    latent0_copy = xmalloc((size_t)session.capacity * model.c.kv_lora * sizeof(float));
    history_copy = xmalloc((size_t)session.capacity * sizeof(int));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!gen) setup();
    if (size < 1) return 0;
    const unsigned mode = data[0];
    size_t n = size - 1;
    unsigned char *buf = xmalloc(n ? n : 1);
    memcpy(buf, data + 1, n);
    if ((mode & 1) && n >= sizeof header_prefix) memcpy(buf, header_prefix, sizeof header_prefix);
    if ((mode & 2) && n >= 8) {
        Hash64 h;
        hash64_init(&h);
        hash64_update(&h, buf, n - 8);
        put_u64(buf + n - 8, hash64_final(&h));
    }
    /* something to lose: the cache and history hold a known pattern before each load */
    for (int i = 0; i < session.capacity; i++) gen->history[i] = i % model.c.vocab;
    for (size_t i = 0; i < (size_t)session.capacity * model.c.kv_lora; i++)
        session.latent[0][i] = (float)i;
    memcpy(latent0_copy, session.latent[0],
           (size_t)session.capacity * model.c.kv_lora * sizeof(float));
    memcpy(history_copy, gen->history, (size_t)session.capacity * sizeof(int));
    SessionSource src = { .fd = -1, .mem = buf, .size = n };
    SessionSnapshot snap = { .tokens = gen->history, .logits = gen->logits, .hidden = gen->hidden };
    char err[8500] = "";
    const int rc = session_load(&session, &key, &src, &snap, err, sizeof err);
    if (rc == 0) {
        if (snap.n_tokens < 0 || snap.n_tokens >= session.capacity || snap.text_npending < 0 ||
            snap.text_npending > 3)
            abort();
        for (int i = 0; i < snap.n_tokens; i++)
            if (gen->history[i] < 0 || gen->history[i] >= model.c.vocab) abort();
    } else if (rc == -1) {
        if (!err[0]) abort();   /* a refusal always says why */
        if (memcmp(latent0_copy, session.latent[0],
                   (size_t)session.capacity * model.c.kv_lora * sizeof(float)) ||
            memcmp(history_copy, gen->history, (size_t)session.capacity * sizeof(int)))
            abort();            /* a refused file changed the conversation */
    } else {
        /* -2 needs the bytes to change between the passes: memory does not */
        abort();
    }
    free(buf);
    return 0;
}

/* Session files through the engine: glm.c's session_key and generator_save / generator_load over
   kvfile.h, on the sparse oracle fixture (shared-indexer layers, an MTP layer): a saved
   conversation loads into a fresh session bit for bit (history, every decoder layer's rows,
   logits, hidden state, sampler stream) and continues exactly as the original does; a file of
   another model or other settings is refused by name; a truncated or corrupted file is refused and
   leaves the conversation it was loaded over untouched. The engine (glm.c) is included whole;
   tests/test_kvfile.c tests the format itself on synthetic rows. */
#pragma GCC diagnostic ignored "-Wunused-function"   /* the modes main() would call */
#include "../glm.c"
#include "../validate.c"   /* the oracle reference files */
#include "glm_fixture.h"

#include "check.h"

static const char *FIXTURE = "tests/fixtures/oracle_sparse";

/* Rows [0, n) of every layer of two sessions are bit-identical. */
static int same_rows(const RunState *a, const RunState *b, const Config *c, int n) {
    /* the decoder layers: the MTP head's rows are not kept */
    for (int l = 0; l < c->n_layers; l++) {
        if (memcmp(a->latent[l], b->latent[l], (size_t)n * c->kv_lora * sizeof(float))) return 0;
        if (memcmp(a->rope_key[l], b->rope_key[l], (size_t)n * c->qk_rope * sizeof(float)))
            return 0;
        if (c->layer_indexer[l] &&
            memcmp(a->index_key[l], b->index_key[l], (size_t)n * c->index_dim * sizeof(float)))
            return 0;
    }
    return 1;
}

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = xmalloc(*n);
    if (fread(buf, 1, *n, f) != *n) { fclose(f); free(buf); return NULL; }
    fclose(f);
    return buf;
}

/* Loads `bytes` from memory into g's session and history, as the fuzz target does. */
static int load_bytes(Generator *g, const SessionKey *k, const unsigned char *bytes, size_t n,
                      char *err, size_t err_len) {
    SessionSource src = { .fd = -1, .mem = bytes, .size = n };
    SessionSnapshot snap = { .tokens = g->history, .logits = g->logits, .hidden = g->hidden };
    const KvRows rows = run_state_rows(g->state);
    return session_load(&rows, k, &src, &snap, err, err_len);
}

static int refused_with(Generator *g, const SessionKey *k, const char *path, const char *words) {
    char err[8500];
    SessionSnapshot chat;
    const int rc = generator_load(g, k, path, &chat, err, sizeof err);
    if (rc != -1 || !strstr(err, words)) {
        printf("  got rc %d, '%s' (want '%s')\n", rc, rc ? err : "", words);
        return 0;
    }
    return 1;
}

int main(void) {
    char ref_path[512];
    snprintf(ref_path, sizeof ref_path, "%s/reference.json", FIXTURE);
    Reference ref = reference_load(ref_path);
    Settings set = fixture_settings(FIXTURE, 64);
    const int P = ref.prompt.n, N = ref.full.n, cap = N + 8;
    Model model;
    model_load(&model, &set, cap);
    const Config *c = &model.c;
    const int V = c->vocab, H = c->hidden;
    RunState a_s, b_s;
    ForwardOptions opt = engine_start(&set, &model, &a_s, cap);
    /* another capacity and batch: neither is in the file */
    run_state_init(&b_s, &model, cap + 16, 5, 0);
    const SessionKey key = session_key(&model, &set, &opt);
    char path[256], other[256], err[8500];
    snprintf(path, sizeof path, "/tmp/test_session.%d", (int)getpid());
    snprintf(other, sizeof other, "/tmp/test_session.%d.bad", (int)getpid());

    /* a conversation: the prompt, some sampled steps: the MTP layer's rows are written too, but are
       not the file's to keep */
    Generator *a = generator_create(&model, &a_s, &opt, (SamplerSettings){ 0.8f, 0.9f, 1234 });
    Generator *b = generator_create(&model, &b_s, &opt, (SamplerSettings){ 0.0f, 1.0f, 99 });
    generator_prefill(a, ref.prompt.ids, P);
    float *mtp_hidden = xmalloc((size_t)a_s.max_batch * H * sizeof(float)),
          *mtp_logits = xmalloc((size_t)a_s.max_batch * V * sizeof(float));
    mtp_forward(&model, &a_s, &opt, ref.prompt.ids + 1, a->hidden,
                P - 1 < a_s.max_batch ? P - 1 : a_s.max_batch, 0, mtp_hidden, mtp_logits, 0);
    a->stop_rules = (StopRules){ NULL, 0, 6, 1 };
    generator_begin(a);
    int id;
    while (generator_step(a, &id, 1) == 1) {}
    const int pos = a->pos;
    SessionSnapshot chat = { .chat_flags = SESSION_THINK | SESSION_REPLY_CUT,
                             .text_pending = { 0xE2, 0x82 },
                             .text_npending = 2 };
    CHECK("save a conversation", generator_save(a, &key, &chat, path, err, sizeof err) == 0);
    size_t file_n = 0;
    unsigned char *file = read_all(path, &file_n);
    CHECK("the file is header + ids + logits + hidden + rows + trailer, exactly",
          file &&
              file_n == SESSION_HEADER_BYTES + session_payload_bytes(&key, (uint64_t)pos, 1) + 8);
    CHECK("session_file_tokens reads the token count",
          session_file_tokens(path, err, sizeof err) == pos);

    /* load into a fresh generator: everything bit for bit */
    SessionSnapshot got;
    CHECK("load it into another session (other capacity and BATCH)",
          generator_load(b, &key, path, &got, err, sizeof err) == 0);
    CHECK("history and pos",
          b->pos == pos && !memcmp(b->history, a->history, (size_t)pos * sizeof(int)));
    CHECK("every decoder layer's rows, the indexer keys included, bit-identical",
          same_rows(&a_s, &b_s, c, pos));
    CHECK("logits and the last hidden state bit-identical, fresh",
          b->logits_pos == b->pos && !memcmp(b->logits, a->logits, (size_t)V * sizeof(float)) &&
          b->last_hidden && !memcmp(b->last_hidden, a->last_hidden, (size_t)H * sizeof(float)));
    CHECK("the sampler's seed and stream position",
          b->sampler.seed == 1234 && b->sampler.draws == a->sampler.draws);
    CHECK("the chat state comes back", got.chat_flags == (SESSION_THINK | SESSION_REPLY_CUT) &&
                                           got.text_npending == 2 && got.text_pending[0] == 0xE2 &&
                                           got.text_pending[1] == 0x82);

    /* both go on identically: sampled steps, then a greedy prefill + steps */
    b->sampler.temperature = a->sampler.temperature;
    b->sampler.top_p = a->sampler.top_p;
    int ok = 1;
    a->stop_rules = b->stop_rules = (StopRules){ NULL, 0, 8, 1 };
    generator_begin(a);
    generator_begin(b);
    for (int i = 0; i < 8; i++) {
        int ia = -1, ib = -2;
        generator_step(a, &ia, 1);
        generator_step(b, &ib, 1);
        ok &= ia == ib && !memcmp(a->logits, b->logits, (size_t)V * sizeof(float));
    }
    CHECK("the loaded conversation continues exactly as the original (8 sampled steps, logits "
          "bit-identical)",
          ok && a->pos == b->pos);
    CHECK("... and its rows stay identical", same_rows(&a_s, &b_s, c, a->pos));

    /* stale logits (after a rollback) are saved as stale; the next step recomputes them */
    generator_rollback(a, pos - 2);
    CHECK("save with stale logits", generator_save(a, &key, NULL, path, err, sizeof err) == 0);
    size_t stale_n = 0;
    unsigned char *stale = read_all(path, &stale_n);
    CHECK("... the file has no logits",
          stale && stale_n == SESSION_HEADER_BYTES +
                                  session_payload_bytes(&key, (uint64_t)(pos - 2), 0) + 8);
    free(stale);
    CHECK("load it", generator_load(b, &key, path, &got, err, sizeof err) == 0 &&
                         b->pos == pos - 2 && b->logits_pos != b->pos);
    generator_refresh_logits(a);
    generator_refresh_logits(b);
    CHECK("... the recomputed logits are the original's",
          !memcmp(a->logits, b->logits, (size_t)V * sizeof(float)));

    /* refusals by name: settings, formats, weights, another model */
    generator_save(a, &key, NULL, path, err, sizeof err);
    SessionKey k2 = key;
    k2.idot = 0;
    CHECK("IDOT differs: refused by name",
          refused_with(b, &k2, path, "other settings (IDOT=1 there, 0 here)"));
    k2 = key; k2.absorb = 0;
    CHECK("ABSORB differs: refused by name", refused_with(b, &k2, path, "ABSORB=1 there, 0 here"));
    k2 = key; k2.indexer_mode = INDEXER_ALWAYS;
    CHECK("INDEXER differs: refused by name",
          refused_with(b, &k2, path, "INDEXER=auto there, always here"));
    k2 = key; k2.latent_eps = 1e-5f;
    CHECK("LATENT_EPS differs: refused by name", refused_with(b, &k2, path, "LATENT_EPS="));
    k2 = key; k2.mtp_zero_pos0 = 0;
    CHECK("MTP_ZERO_POS0 differs: refused by name",
          refused_with(b, &k2, path, "MTP_ZERO_POS0=1 there, 0 here"));
    {
        Settings set8 = fixture_settings(FIXTURE, 64);
        set8.dense_bits = 8;
        Model m8;
        model_load(&m8, &set8, cap);
        SessionKey k8 = session_key(&m8, &set8, &opt);
        CHECK("dense_bits 8 instead of 16: other weight formats, named",
              refused_with(b, &k8, path, "other weight formats") &&
                  refused_with(b, &k8, path, "dense_bits 16, GROUP 0; this run has 16, 8, 0"));
        CHECK("... the same model otherwise: config, tensors and weights agree",
              k8.config == key.config && k8.tensors == key.tensors && k8.weights == key.weights &&
                  k8.formats != key.formats);
        model_free(&m8);
    }
    {
        const float saved = model.layers[1].post_attn_norm[3];
        model.layers[1].post_attn_norm[3] += 1.0f;   /* another checkpoint of the same shapes */
        SessionKey kw = session_key(&model, &set, &opt);
        model.layers[1].post_attn_norm[3] = saved;
        CHECK("another checkpoint (one norm weight differs): refused as another model",
              refused_with(b, &kw, path, "another model (its weights differ"));
        Settings setd = fixture_settings(FIXTURE, 64);
        setd.model_dir = "tests/fixtures/oracle_dense";
        Model md;
        model_load(&md, &setd, cap);
        SessionKey kd = session_key(&md, &setd, &opt);
        CHECK("the dense oracle model: refused as another model",
              refused_with(b, &kd, path,
                           "was written for another model (cached layers 4 there, 3 here)"));
        kd.layers = key.layers;
        kd.layer_indexer = key.layer_indexer;
        CHECK("... and with equal cache shapes, by its config",
              refused_with(b, &kd, path, "another model (its config differs)"));
        kd.config = key.config;
        CHECK("... and by its tensor table", refused_with(b, &kd, path,
                                                          "another model (its tensor names, shapes "
                                                          "or dtypes differ)"));
        model_free(&md);
    }
    CHECK("the conversation survived every refusal",
          b->pos == pos - 2 && same_rows(&a_s, &b_s, c, pos - 2));
    {
        RunState tiny;
        run_state_init(&tiny, &model, pos - 2, 4, 0);
        Generator *t = generator_create(&model, &tiny, &opt, (SamplerSettings){ 0.0f, 1.0f, 1 });
        CHECK("a cache too small for the file: refused, naming CTX",
              refused_with(t, &key, path, "no room to continue (raise CTX)"));
        generator_free(t);
        run_state_free(&tiny);
    }

    /* hostile bytes: every truncation, every single-byte change, a header of lies. Each is refused
       (never a crash) and leaves the conversation in b as it was. */
    free(file);
    file = read_all(path, &file_n);
    RunState keep;
    run_state_init(&keep, &model, cap + 16, 5, 0);
    /* the decoder layers: the MTP head's rows are not kept */
    for (int l = 0; l < c->n_layers; l++) {
        memcpy(keep.latent[l], b_s.latent[l], (size_t)cap * c->kv_lora * sizeof(float));
        memcpy(keep.rope_key[l], b_s.rope_key[l], (size_t)cap * c->qk_rope * sizeof(float));
        if (c->layer_indexer[l])
            memcpy(keep.index_key[l], b_s.index_key[l], (size_t)cap * c->index_dim * sizeof(float));
    }
    int *keep_history = xmalloc((size_t)b_s.capacity * sizeof(int));
    memcpy(keep_history, b->history, (size_t)b_s.capacity * sizeof(int));
    int truncated_ok = 1;
    for (size_t n = 0; n < file_n; n += n < 200 ? 1 : 97)
        truncated_ok &= load_bytes(b, &key, file, n, err, sizeof err) == -1 &&
                        (strstr(err, "truncated") || strstr(err, "not a glm session"));
    CHECK("every truncation is refused as truncated (or not a session file)", truncated_ok);
    unsigned char *bad = xmalloc(file_n + 16);
    int flipped_ok = 1;
    for (size_t i = 0; i < file_n; i += i < 200 ? 1 : 13) {
        memcpy(bad, file, file_n);
        bad[i] ^= (unsigned char)(1u << (i % 8));
        flipped_ok &= load_bytes(b, &key, bad, file_n, err, sizeof err) == -1;
    }
    CHECK("every flipped bit (header: each byte; payload: every 13th) is refused", flipped_ok);
    memcpy(bad, file, file_n);
    memset(bad + file_n, 0, 16);
    CHECK("trailing bytes are refused",
          load_bytes(b, &key, bad, file_n + 3, err, sizeof err) == -1 && strstr(err, "trailing "
                                                                                     "bytes"));
    memcpy(bad, file, file_n);
    bad[8] = 2;
    CHECK("another format version is refused by version",
          load_bytes(b, &key, bad, file_n, err, sizeof err) == -1 && strstr(err, "version 2"));
    /* lies the checksum does not catch (the trailer recomputed): a token outside the vocabulary, a
       NaN in the cache rows, a pending 'character' that is not the start of one */
    memcpy(bad, file, file_n);
    put_u32(bad + SESSION_HEADER_BYTES + 4, (uint32_t)V);
    {
        Hash64 h;
        hash64_init(&h);
        hash64_update(&h, bad, file_n - 8);
        put_u64(bad + file_n - 8, hash64_final(&h));
    }
    CHECK("a token id outside the vocabulary is refused (checksum made right)",
          load_bytes(b, &key, bad, file_n, err, sizeof err) == -1 && strstr(err, "outside the "
                                                                                 "vocabulary"));
    memcpy(bad, file, file_n);
    const float not_a_number = NAN;
    memcpy(bad + file_n - 8 - 4 * 3, &not_a_number, 4);
    {
        Hash64 h;
        hash64_init(&h);
        hash64_update(&h, bad, file_n - 8);
        put_u64(bad + file_n - 8, hash64_final(&h));
    }
    CHECK("a NaN in the cache rows is refused, naming the layer",
          load_bytes(b, &key, bad, file_n, err, sizeof err) == -1 && strstr(err, "not finite") &&
              strstr(err, "layer 3"));
    memcpy(bad, file, file_n);
    put_u32(bad + 132, 1);
    bad[136] = 'A';
    CHECK("pending text that is not an unfinished character is refused",
          load_bytes(b, &key, bad, file_n, err, sizeof err) == -1 && strstr(err, "pending text"));
    put_u32(bad + 132, 4);
    CHECK("pending text longer than 3 bytes is refused",
          load_bytes(b, &key, bad, file_n, err, sizeof err) == -1);
    memcpy(bad, file, file_n);
    put_u32(bad + 104, 0xFFFFFFFFu);
    CHECK("a huge token count is refused before any size is computed from it",
          load_bytes(b, &key, bad, file_n, err, sizeof err) == -1 && strstr(err, "no room"));
    CHECK("after all of it the conversation in the cache is untouched",
          same_rows(&keep, &b_s, c, cap) &&
              !memcmp(keep_history, b->history, (size_t)b_s.capacity * sizeof(int)) &&
              b->pos == pos - 2);
    CHECK("the original file still loads", load_bytes(b, &key, file, file_n, err, sizeof err) == 0);

    /* a path that is not a session file */
    FILE *f = fopen(other, "w");
    fputs("hello", f);
    fclose(f);
    CHECK("a text file: 'is not a glm session file'",
          refused_with(b, &key, other, "is not a glm session file"));
    CHECK("a directory: refused", refused_with(b, &key, "/tmp", "not a regular file"));
    CHECK("a missing file: refused, naming the reason",
          refused_with(b, &key, "/nonexistent/x", "No such file"));
    CHECK("saving into a missing directory fails with a message",
          generator_save(a, &key, NULL, "/nonexistent/dir/s", err, sizeof err) == -1 && err[0]);

    unlink(path);
    unlink(other);
    free(bad); free(file); free(keep_history); free(mtp_hidden); free(mtp_logits);
    generator_free(a);
    generator_free(b);
    run_state_free(&keep);
    run_state_free(&b_s);
    engine_stop(&set, &model, &a_s);
    reference_free(&ref);
    return failures ? 1 : 0;
}

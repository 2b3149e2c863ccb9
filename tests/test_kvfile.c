/* Unit tests of kvfile.h on synthetic rows (tests/kv_fixture.h, no model): a session file saved
   and loaded bit for bit; every refusal (truncation, a flipped byte, magic, version, each field of
   a foreign key, lies the checksum does not catch) named, with the destination untouched; the
   prefix cache's chain hashes, the lookup of the longest cached prefix, a refused entry removed,
   LRU eviction under a byte budget, and the temporary file of a killed writer ignored and swept. */
#include "kv_fixture.h"

#include <dirent.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "scratch.h"

enum { CAP = 256 };
static char dir[256];

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = kv_fixture_alloc(*n + 64);
    if (fread(buf, 1, *n, f) != *n) { fclose(f); free(buf); return NULL; }
    fclose(f);
    return buf;
}

static void write_all(const char *path, const unsigned char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(b, 1, n, f);
        fclose(f);
    }
}

/* The trailer made right again after a deliberate change. */
static void reseal(unsigned char *b, size_t n) { put_u64(b + n - 8, hash64(b, n - 8)); }

/* ---- session files ------------------------------------------------------------------------- */

/* A load target whose every byte is known, to tell whether a refused load touched it. */
typedef struct {
    KvFixtureRows r;
    int tokens[CAP];
    float logits[512], hidden[64];
} Dest;

/* Every byte back to the known values. */
static void dest_reset(Dest *d) {
    kv_fixture_fill(&d->r, 99);
    for (int i = 0; i < CAP; i++) d->tokens[i] = 1000 + i;
    for (int i = 0; i < 512; i++) d->logits[i] = -1.0f * (float)i;
    for (int i = 0; i < 64; i++) d->hidden[i] = 0.5f * (float)i;
}

static int dest_same(const Dest *a, const Dest *b) {
    return kv_fixture_same(&a->r, &b->r, 0, CAP) &&
           !memcmp(a->tokens, b->tokens, sizeof a->tokens) &&
           !memcmp(a->logits, b->logits, sizeof a->logits) &&
           !memcmp(a->hidden, b->hidden, sizeof a->hidden);
}

static int load_mem(Dest *d, const SessionKey *k, const unsigned char *b, size_t n,
                    SessionSnapshot *got, char *err, size_t err_len) {
    SessionSource src = { .fd = -1, .mem = b, .size = n };
    SessionSnapshot snap = { .tokens = d->tokens, .logits = d->logits, .hidden = d->hidden };
    const int rc = session_load(&d->r.rows, k, &src, &snap, err, err_len);
    if (got) *got = snap;
    return rc;
}

/* Refused (-1), err holding `words`, and the destination as it was. */
static int refused(Dest *d, const Dest *before, const SessionKey *k, const unsigned char *b,
                   size_t n, const char *words) {
    char err[8500] = "";
    const int rc = load_mem(d, k, b, n, NULL, err, sizeof err);
    if (rc != -1 || !strstr(err, words) || !dest_same(d, before)) {
        printf("  got rc %d, '%s' (want '%s')%s\n", rc, err, words,
               dest_same(d, before) ? "" : "; the destination changed");
        return 0;
    }
    return 1;
}

static void test_session(void) {
    const SessionKey key = kv_fixture_key();
    KvFixtureRows src;
    kv_fixture_rows(&src, CAP);
    kv_fixture_fill(&src, 1);
    enum { N = 37 };
    int tokens[N];
    float logits[512], hidden[64];
    for (int i = 0; i < N; i++) tokens[i] = (i * 131 + 7) % 512;
    for (int i = 0; i < 512; i++) logits[i] = sinf((float)i);
    for (int i = 0; i < 64; i++) hidden[i] = cosf((float)i);
    const SessionSnapshot snap = { .n_tokens = N,
                                   .tokens = tokens,
                                   .has_logits = 1,
                                   .logits = logits,
                                   .hidden = hidden,
                                   .seed = 0x123456789ull,
                                   .rng_state = 42,
                                   .chat_flags = SESSION_THINK | SESSION_IN_REASONING,
                                   .text_pending = { 0xF0, 0x9F, 0x98 },
                                   .text_npending = 3 };
    char path[512], err[8500];
    snprintf(path, sizeof path, "%s/conversation", dir);
    CHECK("session_save", session_save(&src.rows, &key, &snap, path, err, sizeof err) == 0);
    size_t n = 0;
    unsigned char *file = read_all(path, &n);
    CHECK("the file is header + ids + logits + hidden + rows + trailer, exactly",
          file && n == SESSION_HEADER_BYTES + session_payload_bytes(&key, N, 1) + 8 &&
              !memcmp(file, SESSION_MAGIC, 8) && get_u32(file + 8) == SESSION_VERSION);
    CHECK("session_file_tokens reads the token count",
          session_file_tokens(path, err, sizeof err) == N);

    Dest d, before;
    kv_fixture_rows(&d.r, CAP);
    kv_fixture_rows(&before.r, CAP);
    dest_reset(&d);
    dest_reset(&before);
    SessionSource in;
    SessionSnapshot got = { .tokens = d.tokens, .logits = d.logits, .hidden = d.hidden };
    int rc = session_source_open(&in, path, err, sizeof err);
    if (!rc) rc = session_load(&d.r.rows, &key, &in, &got, err, sizeof err);
    session_source_close(&in);
    CHECK("load it from the file (another buffer of the same capacity)", rc == 0);
    CHECK("tokens, logits and hidden state bit-identical",
          got.n_tokens == N && got.has_logits && !memcmp(d.tokens, tokens, sizeof tokens) &&
              !memcmp(d.logits, logits, sizeof logits) && !memcmp(d.hidden, hidden, sizeof hidden));
    CHECK("every layer's rows bit-identical", kv_fixture_same(&src, &d.r, 0, N));
    CHECK("rows past the conversation untouched", kv_fixture_same(&before.r, &d.r, N, CAP - N));
    CHECK("the sampler's stream and the chat state come back",
          got.seed == snap.seed && got.rng_state == 42 && got.chat_flags == snap.chat_flags &&
              got.text_npending == 3 && !memcmp(got.text_pending, snap.text_pending, 4));
    CHECK("a save reproduces the file byte for byte", ({
              char again[600];
              snprintf(again, sizeof again, "%s.again", path);
              size_t m = 0;
              unsigned char *b = NULL;
              int same = session_save(&d.r.rows, &key, &got, again, err, sizeof err) == 0 &&
                         (b = read_all(again, &m)) && m == n && !memcmp(b, file, n);
              free(b);
              unlink(again);
              same;
          }));

    /* hostile bytes: refused, naming why, with the destination untouched */
    dest_reset(&d);
    int ok = 1;
    for (size_t m = 0; m < n; m += m < 300 ? 1 : 151) {
        char e[8500] = "";
        ok &= load_mem(&d, &key, file, m, NULL, e, sizeof e) == -1 &&
              (strstr(e, "truncated") || strstr(e, "not a glm session")) && dest_same(&d, &before);
    }
    CHECK("every truncation: refused as truncated, the destination untouched", ok);
    unsigned char *bad = kv_fixture_alloc(n + 64);
    ok = 1;
    for (size_t i = 0; i < n; i += i < SESSION_HEADER_BYTES + 4 * N ? 1 : 29) {
        memcpy(bad, file, n);
        bad[i] ^= (unsigned char)(1u << (i % 8));
        char e[8500] = "";
        ok &= load_mem(&d, &key, bad, n, NULL, e, sizeof e) == -1 && e[0] && dest_same(&d, &before);
    }
    CHECK("every flipped byte (header and ids: each; the rest: every 29th): refused, untouched",
          ok);
    memcpy(bad, file, n);
    bad[0] = 'X';
    CHECK("wrong magic: 'is not a glm session file'",
          refused(&d, &before, &key, bad, n, "is not a glm session file"));
    memcpy(bad, file, n);
    put_u32(bad + 8, 2);
    CHECK("another version: named",
          refused(&d, &before, &key, bad, n, "has session format version 2"));
    memcpy(bad, file, n + 0);
    memset(bad + n, 0, 8);
    CHECK("trailing bytes: refused", refused(&d, &before, &key, bad, n + 5, "has trailing bytes"));

    /* a foreign key, field by field: each is named */
    static const struct { const char *words; } foreign[] = {
        { "another model (its config differs)" },
        { "another model (its tensor names, shapes or dtypes differ)" },
        { "another model (its weights differ" },
        { "other weight formats (quantization differs: it was written with expert_bits 16, "
          "dense_bits 16, GROUP 0; this run has 4, 8, 32)" },
        { "other settings (IDOT=1 there, 0 here)" },
        { "other settings (ABSORB=1 there, 0 here)" },
        { "other settings (INDEXER=auto there, off here)" },
        { "other settings (MTP_ZERO_POS0=1 there, 0 here)" },
        { "other settings (LATENT_EPS=1e-06 there, 1e-05 here)" },
        { "another model (cached layers 4 there, 3 here)" },
        { "another model (kv_lora_rank 32 there, 16 here)" },
        { "another model (qk_rope_head_dim 8 there, 4 here)" },
        { "another model (index_head_dim 16 there, 8 here)" },
        { "another model (vocab_size 512 there, 600 here)" },
        { "another model (hidden_size 64 there, 32 here)" },
    };
    ok = 1;
    for (int f = 0; f < (int)(sizeof foreign / sizeof foreign[0]); f++) {
        SessionKey k = key;
        switch (f) {
        case 0: k.config ^= 1; break;
        case 1: k.tensors ^= 1; break;
        case 2: k.weights ^= 1; break;
        case 3: k.formats ^= 1; k.expert_bits = 4; k.dense_bits = 8; k.group = 32; break;
        case 4: k.idot = 0; break;
        case 5: k.absorb = 0; break;
        case 6: k.indexer_mode = 2; break;
        case 7: k.mtp_zero_pos0 = 0; break;
        case 8: k.latent_eps = 1e-5f; break;
        case 9: k.layers = 3; break;
        case 10: k.kv_lora = 16; break;
        case 11: k.qk_rope = 4; break;
        case 12: k.index_dim = 8; break;
        case 13: k.vocab = 600; break;
        case 14: k.hidden = 32; break;
        }
        if (!refused(&d, &before, &k, file, n, foreign[f].words)) ok = 0;
    }
    CHECK("a foreign key: each field (fingerprint, settings, shapes) refused by name, untouched",
          ok);
    {
        SessionKey k = key;
        k.expert_bits = 4;   /* acts through the formats hash only */
        char e[8500];
        CHECK("expert_bits alone is not checked (the formats hash is)",
              load_mem(&d, &k, file, n, NULL, e, sizeof e) == 0);
        dest_reset(&d);
        static const unsigned char other_indexer[4] = { 1, 1, 1, 0 };
        k = key;
        k.layer_indexer = other_indexer;
        CHECK("another indexer pattern: refused by the size",
              refused(&d, &before, &k, file, n, "is truncated"));
    }

    /* lies the checksum does not catch */
    memcpy(bad, file, n);
    put_u32(bad + SESSION_HEADER_BYTES + 4 * 5, 512);
    reseal(bad, n);
    CHECK("a token id outside the vocabulary (checksum made right): refused",
          refused(&d, &before, &key, bad, n, "token 5 is id 512, outside the vocabulary of 512"));
    memcpy(bad, file, n);
    const float inf = INFINITY;
    memcpy(bad + n - 8 - 4, &inf, 4);
    reseal(bad, n);
    CHECK("an infinity in the last layer's rows: refused, naming the layer",
          refused(&d, &before, &key, bad, n, "is corrupt (layer 3 rope key: value "));
    memcpy(bad, file, n);
    memcpy(bad + SESSION_HEADER_BYTES + 4 * N + 4 * 7, &inf, 4);
    reseal(bad, n);
    CHECK("an infinity in the logits: refused, naming them",
          refused(&d, &before, &key, bad, n, "is corrupt (logits: value 7 is not finite)"));
    memcpy(bad, file, n);
    bad[136] = 'A';
    CHECK("pending text that is not the start of a character: refused",
          refused(&d, &before, &key, bad, n, "has a corrupt header (pending text)"));
    memcpy(bad, file, n);
    put_u32(bad + 104, 0xFFFFFFFFu);
    CHECK("a huge token count: refused before any size is computed from it",
          refused(&d, &before, &key, bad, n, "no room to continue (raise CTX)"));
    {
        KvFixtureRows small;
        kv_fixture_rows(&small, N);
        SessionSource s = { .fd = -1, .mem = file, .size = n };
        SessionSnapshot sn = { .tokens = d.tokens, .logits = d.logits, .hidden = d.hidden };
        CHECK("rows with no room past the conversation: refused, naming CTX",
              session_load(&small.rows, &key, &s, &sn, err, sizeof err) == -1 &&
                  strstr(err, "holds 37 tokens and the KV cache 37"));
        kv_fixture_free(&small);
    }
    CHECK("the original still loads", load_mem(&d, &key, file, n, NULL, err, sizeof err) == 0);
    CHECK("a missing file: refused, naming the reason",
          session_file_tokens("/nonexistent/x", err, sizeof err) == -1 &&
              strstr(err, "No such file"));
    CHECK("saving into a missing folder fails with a message",
          session_save(&src.rows, &key, &snap, "/nonexistent/dir/s", err, sizeof err) == -1 &&
              err[0]);
    free(bad);
    free(file);
    unlink(path);
    kv_fixture_free(&d.r);
    kv_fixture_free(&before.r);
    kv_fixture_free(&src);
}

/* ---- the prefix cache ---------------------------------------------------------------------- */

static int count_entries(const char *d, const char *suffix) {
    DIR *dd = opendir(d);
    int n = 0;
    for (struct dirent *e; dd && (e = readdir(dd));) {
        const size_t l = strlen(e->d_name), s = strlen(suffix);
        n += l > s && !strcmp(e->d_name + l - s, suffix);
    }
    if (dd) closedir(dd);
    return n;
}

/* Stores history[0, pos) with every entry marked used at second `t`. */
static int store_at(KvCache *kv, const KvRows *rows, const int *history, int pos, time_t t,
                    int *wrote) {
    KvStoreCursor c;
    kvcache_cursor(kv, &c);
    c.now[0] = c.now[1] = (struct timespec){ .tv_sec = t };
    char err[8500];
    const int rc = kvcache_store(kv, &c, rows, history, pos, err, sizeof err);
    if (rc) printf("  kvcache_store: %s\n", err);
    if (wrote) *wrote = c.wrote;
    return rc;
}

static void test_prefix_cache(void) {
    const SessionKey key = kv_fixture_key();
    const int G = KVCACHE_BLOCK;
    char cdir[512], err[8500], warn[12800];
    snprintf(cdir, sizeof cdir, "%s/kv", dir);
    KvCache kv;
    CHECK("kvcache_open creates its folder",
          kvcache_open(&kv, cdir, 1e9, &key, err, sizeof err) == 0 && !access(cdir, W_OK));
    {
        char file[600];
        snprintf(file, sizeof file, "%s/plain", dir);
        write_all(file, (const unsigned char *)"x", 1);
        KvCache bad;
        char sub[700];
        snprintf(sub, sizeof sub, "%s/sub", file);
        CHECK("kvcache_open under a plain file: refused with the reason",
              kvcache_open(&bad, sub, 1e9, &key, err, sizeof err) == -1 &&
                  strstr(err, "Not a directory"));
        unlink(file);
    }

    /* chain hashes: a function of the whole history, seeded with the key */
    int h1[CAP], h2[CAP];
    for (int i = 0; i < CAP; i++) h1[i] = h2[i] = (i * 7 + 3) % 512;
    for (int i = 150; i < CAP; i++) h2[i] = (h2[i] + 1) % 512;   /* shares 150 tokens with h1 */
    const uint64_t c1 = kvcache_chain(kv.seed, h1, G);
    CHECK("chain: equal histories, equal hashes; one token differs, another hash",
          c1 == kvcache_chain(kv.seed, h2, G) && kvcache_chain(c1, h1 + G, G) ==
                                                     kvcache_chain(c1, h2 + G, G) &&
              kvcache_chain(kvcache_chain(c1, h1 + G, G), h1 + 2 * G, G) !=
                  kvcache_chain(kvcache_chain(c1, h2 + G, G), h2 + 2 * G, G) &&
              kvcache_chain(c1, h1, G) != c1);
    {
        KvCache other;
        SessionKey k2 = key;
        k2.absorb = 0;
        kvcache_open(&other, cdir, 1e9, &k2, err, sizeof err);
        CHECK("another key: another seed, so other entry names", other.seed != kv.seed);
    }

    KvFixtureRows a;
    kv_fixture_rows(&a, CAP);
    kv_fixture_fill(&a, 5);
    int wrote = 0;
    CHECK("store a history of 200 positions: 3 whole entries",
          store_at(&kv, &a.rows, h1, 200, 1000, &wrote) == 0 && wrote == 3 && kv.stored == 3 &&
              count_entries(cdir, ".kv") == 3);
    CHECK("store it again: nothing new is written",
          store_at(&kv, &a.rows, h1, 200, 1001, &wrote) == 0 && wrote == 0);
    char p0[4200];
    kvcache_path(&kv, 0, c1, p0, sizeof p0);
    struct stat st;
    CHECK("entries are named by position and chain hash, and marked used at the store's instant",
          !stat(p0, &st) && st.st_mtim.tv_sec == 1001 && st.st_mtim.tv_nsec == 0);

    /* lookups: the longest cached prefix that reaches past pos */
    KvFixtureRows b, keep;
    kv_fixture_rows(&b, CAP);
    kv_fixture_rows(&keep, CAP);
    kv_fixture_fill(&b, 77);
    kv_fixture_fill(&keep, 77);
    int hist[CAP];
    int got = kvcache_restore(&kv, &b.rows, hist, 0, h2, 180, warn, sizeof warn);
    CHECK("a prompt sharing 150 tokens restores the 2 whole entries inside them (128 positions)",
          got == 128 && !warn[0] && !memcmp(hist, h2, 180 * sizeof(int)));
    CHECK("... their rows bit-identical to the stored ones",
          kv_fixture_same(&a, &b, 0, 128));
    CHECK("... and the rows past them untouched", kv_fixture_same(&keep, &b, 128, CAP - 128));
    kv_fixture_fill(&b, 77);
    for (int i = 0; i < 70; i++) hist[i] = h1[i];
    got = kvcache_restore(&kv, &b.rows, hist, 70, h1 + 70, 130, warn, sizeof warn);
    CHECK("a conversation at 70 continued by the stored history: positions 70..191 restored",
          got == 192 - 70 && kv.restored == 128 + 122);
    CHECK("... the conversation's rows before 70 untouched, the rest bit-identical",
          kv_fixture_same(&keep, &b, 0, 70) && kv_fixture_same(&a, &b, 70, 122));
    CHECK("nothing to restore when no entry ends past pos",
          kvcache_restore(&kv, &b.rows, hist, 130, h1 + 130, 50, warn, sizeof warn) == 0);
    CHECK("nothing to restore past the rows' capacity",
          kvcache_restore(&kv, &b.rows, hist, 0, h1, CAP, warn, sizeof warn) == 192 &&
              kvcache_restore(&kv, &b.rows, hist, 0, h1, 63, warn, sizeof warn) == 0);

    /* a refused entry: skipped, said, counted, removed; the lookup stops before it */
    const uint64_t c2 = kvcache_chain(c1, h1 + G, G);
    char p1[4200];
    kvcache_path(&kv, G, c2, p1, sizeof p1);
    size_t n = 0;
    unsigned char *entry = read_all(p1, &n);
    CHECK("an entry is a session header under GLMKVBLK, ids, rows, trailer",
          entry && n == SESSION_HEADER_BYTES + session_payload_bytes(&key, G, 0) + 8 &&
              !memcmp(entry, KVCACHE_MAGIC, 8) && get_u32(entry + 112) == (uint32_t)G);
    entry[SESSION_HEADER_BYTES + 4 * G + 100] ^= 4;
    write_all(p1, entry, n);
    kv_fixture_fill(&b, 77);
    got = kvcache_restore(&kv, &b.rows, hist, 0, h1, 200, warn, sizeof warn);
    /* (a refused entry's rows may be partly written: they lie past the conversation's end) */
    CHECK("a corrupt entry: the lookup stops before it",
          got == G && kv_fixture_same(&a, &b, 0, G) &&
              kv_fixture_same(&keep, &b, 2 * G, CAP - 2 * G));
    CHECK("... says which and why",
          strstr(warn, p1) && strstr(warn, "is corrupt (its checksum does not match its contents); "
                                           "skipped and removed"));
    CHECK("... counts and removes it", kv.rejected == 1 && access(p1, F_OK) == -1);
    CHECK("the next store writes it anew", store_at(&kv, &a.rows, h1, 200, 1002, &wrote) == 0 &&
                                               wrote == 1 && !access(p1, F_OK));
    /* an entry under another entry's name */
    char p2[4200];
    kvcache_path(&kv, 2 * G, kvcache_chain(c2, h1 + 2 * G, G), p2, sizeof p2);
    write_all(p2, entry, n);   /* entry 1's bytes (one flipped) as entry 2 */
    got = kvcache_restore(&kv, &b.rows, hist, 0, h1, 200, warn, sizeof warn);
    CHECK("an entry whose header is another's: refused as not the promised entry",
          got == 2 * G && strstr(warn, "is not the entry its name promises") &&
              access(p2, F_OK) == -1 && kv.rejected == 2);
    free(entry);
    store_at(&kv, &a.rows, h1, 200, 1003, NULL);

    /* a writer killed mid-entry leaves a temporary file: never read, swept by eviction */
    char tmp[4300], live[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", p0, (int)dead_pid());
    snprintf(live, sizeof live, "%s.tmp.%d", p0, (int)getppid());
    write_all(tmp, (const unsigned char *)"torn", 4);
    write_all(live, (const unsigned char *)"being written", 13);
    unlink(p0);
    kv_fixture_fill(&b, 77);
    got = kvcache_restore(&kv, &b.rows, hist, 0, h1, 200, warn, sizeof warn);
    CHECK("a killed writer's partial entry is not an entry: nothing restored, nothing said",
          got == 0 && !warn[0] && kv_fixture_same(&keep, &b, 0, CAP));
    kvcache_evict(&kv);
    CHECK("eviction sweeps the dead writer's temporary file, not a live one's",
          access(tmp, F_OK) == -1 && !access(live, F_OK));
    unlink(live);

    /* least recently used out first, under a byte budget */
    store_at(&kv, &a.rows, h1, 200, 2000, NULL);   /* entries 0..2 of h1 at t=2000 */
    int h3[CAP];
    for (int i = 0; i < CAP; i++) h3[i] = (i * 11 + 5) % 512;
    store_at(&kv, &a.rows, h3, 128, 3000, NULL);   /* entries 0..1 of h3 at t=3000 */
    CHECK("five entries", count_entries(cdir, ".kv") == 5);
    kv.budget = 5.0 * (double)n;
    kvcache_evict(&kv);
    CHECK("under the budget: nothing evicted", count_entries(cdir, ".kv") == 5);
    kv.budget = 4.5 * (double)n;
    kvcache_evict(&kv);
    char e0[4200], e1[4200], e2[4200];
    kvcache_path(&kv, 0, c1, e0, sizeof e0);
    kvcache_path(&kv, G, c2, e1, sizeof e1);
    kvcache_path(&kv, 2 * G, kvcache_chain(c2, h1 + 2 * G, G), e2, sizeof e2);
    CHECK("one over: the oldest instant's last position goes first (a chain shortens from its end)",
          count_entries(cdir, ".kv") == 4 && access(e2, F_OK) == -1 && !access(e1, F_OK) &&
              !access(e0, F_OK));
    kv.budget = 2.0 * (double)n;
    kvcache_evict(&kv);
    CHECK("two left: the older history is gone, the recently used one stays",
          count_entries(cdir, ".kv") == 2 && access(e0, F_OK) == -1 && access(e1, F_OK) == -1 &&
              kvcache_restore(&kv, &b.rows, hist, 0, h3, 129, warn, sizeof warn) == 128);
    kv.budget = 0;
    kvcache_evict(&kv);
    CHECK("a budget of 0 empties the folder", count_entries(cdir, ".kv") == 0);
    rmdir(cdir);
    kv_fixture_free(&a);
    kv_fixture_free(&b);
    kv_fixture_free(&keep);
}

int main(void) {
    if (scratch_dir(dir, sizeof dir, "test_kvfile")) return 1;
    test_session();
    test_prefix_cache();
    rmdir(dir);
    return failures ? 1 : 0;
}

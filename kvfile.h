/* kvfile.h — KV cache rows on disk: session files and the prefix cache.

   One job: the two file formats that hold a model's KV cache rows, as functions over a small view
   (SessionKey: what the rows depend on; KvRows: where they live), so they can be unit-tested and
   fuzzed on synthetic rows without a model. The engine (glm.c) computes the key from its model
   and settings, points a KvRows at its RunState and moves its Generator; this header writes,
   checks and reads the files. Errors are returned into (err, err_len), never fatal. Needs
   durable.h (atomic writes, Hash64, byte order) and tok.h (tok_utf8_next) declared before it.

   Session files (SESSION=file, chat's :save / :load, a server's conversation) keep a
   conversation across processes: the token history, the rows of every decoder layer for those
   tokens (latent, rope key, the indexer key on full-indexer layers; not the MTP head's, which only
   ever shape drafts and are recomputed as drafting needs them), and the small state the
   continuation depends on (the last logits, the sampler's stream, the chat's flags). A resumed
   conversation goes on bit for bit as if the process had never stopped, and nothing the file holds
   is prefilled again. Rows are stored as the f32 the cache holds, so a resume is exact.
     uint64_t session_payload_bytes(const SessionKey *k, uint64_t n, int has_logits);
     void session_header(const SessionKey *k, const SessionSnapshot *snap, unsigned char *h);
     int  session_save(const KvRows *rows, const SessionKey *k, const SessionSnapshot *snap,
                       const char *path, char *err, size_t err_len);
                 0, or -1 with err filled (the file at path is then untouched)
     int  session_source_open(SessionSource *src, const char *path, char *err, size_t err_len);
     void session_source_close(SessionSource *src);
                 a SessionSource may also be memory: { .fd = -1, .mem = bytes, .size = n }
     int  session_source_read(SessionSource *src, void *dst, uint64_t n, char *err, size_t err_len);
                 the next n bytes, bounded by the size and fed to src->hash (any checked file)
     int  session_load(const KvRows *rows, const SessionKey *k, SessionSource *src,
                       SessionSnapshot *snap, char *err, size_t err_len);
                 0 loaded; -1 refused (err says why; rows and snap's buffers untouched); -2 the
                 file changed between the check and the load (rows and buffers hold garbage)
     int  session_file_tokens(const char *path, char *err, size_t err_len);
                 the token count (to size a cache before the model loads), or -1
     int  session_check_key(const unsigned char *h, const SessionKey *k, char *err, size_t err_len);
                 a header's bytes 16..103 against k: 0, or -1 naming what differs

   The session file (integers little-endian, floats as this machine holds them; version 1):
     header  144 bytes: magic "GLMSESS\n" (0), u32 version (8), u32 header size 144 (12); the
             model's fingerprint (16..47): u64 hashes of the parsed config, of the tensor table, of
             a weight sample (every norm vector and router bias) and of every matrix's quantized
             format; u32 settings that change the arithmetic (48..67: IDOT, ABSORB, INDEXER,
             MTP_ZERO_POS0, LATENT_EPS's bits) and the ones that act through the formats, kept for
             messages (68..79: expert_bits, dense_bits, GROUP); u32 cache shapes (80..103: cached
             layers, kv_lora_rank, qk_rope_head_dim, index_head_dim, vocab_size, hidden_size); the
             conversation: u32 token count (104), u32 1 when logits follow (108), u64 the sampler's
             seed (112) and stream state (120), u32 the chat's flags (128), u32 pending bytes
             (132) and the start of a UTF-8 character a cut reply left unfinished (136..139),
             u32 0 (140)
     payload u32 token ids; the logits predicting the next position [vocab] and the last position's
             final hidden state [hidden] (when they are fresh); then per layer the latent rows, the
             rope-key rows and (full-indexer layers) the indexer-key rows of tokens 0..n-1
     trailer u64 Hash64 of every byte before it
   Not in the fingerprint, by design: KERNEL, THREADS, BATCH and CTX, which never change a result.
   A file is written whole through atomic_begin/atomic_commit: a kill -9 leaves the old file or
   the new one. The reader trusts nothing: the header is checked field by field against the key (a
   mismatch is refused by name), the file size must be exactly what the header implies, then the
   whole payload is read into scratch and checked (hash, ids inside the vocabulary, every float
   finite) before a second pass reads it into the rows, so a refused file leaves the caller's
   conversation as it was.

   The prefix cache (KV_CACHE): the rows of every prefill are kept in entries of KVCACHE_BLOCK
   positions: entry b holds the rows of positions [bG, (b+1)G) of a history, named by a chain hash
   of the history's tokens [0, (b+1)G) seeded with everything the rows depend on (the key's
   fingerprint and arithmetic settings). A lookup hashes the prompt's block-aligned prefixes and
   opens entries in order until one is missing, so no index is kept anywhere and processes share a
   directory without talking to each other; two histories that share a beginning share its
   entries. The rows of a position depend only on the tokens up to it, so restored rows are
   exactly the ones a prefill writes.
     int  kvcache_open(KvCache *kv, const char *dir, double budget_bytes, const SessionKey *key,
                       char *err, size_t err_len);
                 creates dir when missing; 0, or -1 with err (why dir cannot be used)
     void kvcache_default_dir(const SessionKey *key, const char *cache_dir, char *dir, size_t n);
                 CACHE_DIR/glm/kv-<model fingerprint>, its parents created
     int  kvcache_restore(KvCache *kv, const KvRows *rows, int *history, int pos,
                          const int *tokens, int n, char *warn, size_t warn_len);
                 copies tokens[0, n) to history[pos, ...) and restores the rows of the longest
                 cached block-aligned prefix of the result that reaches past pos: returns how many
                 positions past pos it holds (0: none); warn says why an entry was refused
     void kvcache_cursor(const KvCache *kv, KvStoreCursor *c);
     int  kvcache_store(KvCache *kv, KvStoreCursor *c, const KvRows *rows, const int *history,
                        int pos, char *err, size_t err_len);
                 writes the entries of history[0, pos) past the cursor that the cache lacks and
                 marks every one used at the cursor's instant; 0, or -1 with err (no more writes)
     void kvcache_evict(const KvCache *kv);
                 least recently used entries out until the folder is under the budget
   The lower level (the fuzz target and the tests drive it): kvcache_chain, kvcache_path,
   kvcache_header, kvcache_save, kvcache_read, kvcache_load.

   An entry file (version 1): a session header's bytes 0..103 under the magic "GLMKVBLK" and the
   version KVCACHE_VERSION, then u32 KVCACHE_BLOCK (104), u32 0, u32 the entry's first position
   (112), u32 0, u64 the chain hashes before (120) and after it (128), u64 0; its token ids; the
   rows of its positions laid out as in a session file; the trailer. Its name is
   "%07d-%016llx.kv" of its first position and chain hash. It is written through
   atomic_begin/atomic_commit (a kill -9 loses at most the entry being written) and checked like a
   session file before any row is used (header against the key, exact size, ids equal to the
   history's, finite floats, checksum). An entry that fails is refused by name and removed: the
   prefill that follows writes it anew. Rows land past the conversation's end, which the caller
   advances only once an entry is whole, so a bad entry never changes what the cache holds.
   Least recently used out first: a store sets the modification time of every entry of its
   history to one instant, and eviction removes the oldest entries until the folder is under the
   budget (at one instant, the later positions first, so a chain is shortened from its end).

   #define KVFILE_IMPLEMENTATION in exactly one file before including this. */
#ifndef KVFILE_H
#define KVFILE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* What a file's rows must match: the model (as the loader saw it), the settings that change the
   arithmetic, and the cache's shapes. */
typedef struct {
    uint64_t config, tensors, weights, formats;   /* the model's fingerprint */
    int idot, absorb, indexer_mode, mtp_zero_pos0;   /* indexer_mode 0 auto, 1 always, 2 off */
    float latent_eps;
    int expert_bits, dense_bits, group;           /* act through `formats`; named in messages */
    int layers, kv_lora, qk_rope, index_dim, vocab, hidden;
    const unsigned char *layer_indexer;           /* [layers]: which layers cache indexer keys */
} SessionKey;

/* Where the rows live: per layer, position-major arrays of the key's widths (kv_lora, qk_rope,
   index_dim), each with room for `capacity` positions. index_key[l] is only used on layers whose
   layer_indexer is set. */
typedef struct {
    int capacity;
    float *const *latent;       /* [layers] -> [capacity][kv_lora] */
    float *const *rope_key;     /* [layers] -> [capacity][qk_rope] */
    float *const *index_key;    /* [layers] -> [capacity][index_dim] */
} KvRows;

/* The conversation a session file holds besides the rows. */
enum { SESSION_THINK = 1, SESSION_REPLY_CUT = 2, SESSION_IN_REASONING = 4 };   /* chat flags */

typedef struct {
    int n_tokens;
    int *tokens;                    /* [n_tokens]; load: a buffer of the rows' capacity */
    /* the next two are fresh (else the next step recomputes them) */
    int has_logits;
    float *logits;                  /* [vocab] predicting position n_tokens */
    float *hidden;                  /* [hidden] final-normed state of position n_tokens - 1 */
    uint64_t seed, rng_state;       /* the sampler's stream */
    uint32_t chat_flags;            /* SESSION_THINK | SESSION_REPLY_CUT | SESSION_IN_REASONING */
    unsigned char text_pending[4];  /* the start of a UTF-8 character a cut reply left unfinished */
    int text_npending;
} SessionSnapshot;

#define SESSION_MAGIC "GLMSESS\n"
#define SESSION_VERSION 1
#define SESSION_HEADER_BYTES 144

/* Where a checked file's bytes come from: a file (pread) or memory (the fuzz targets). Reads are
   bounded by `size` and hashed as they go. */
typedef struct {
    int fd;                    /* -1: mem */
    const unsigned char *mem;
    uint64_t size, off;
    Hash64 hash;
} SessionSource;

uint64_t session_payload_bytes(const SessionKey *k, uint64_t n, int has_logits);
void session_header(const SessionKey *k, const SessionSnapshot *snap, unsigned char *h);
int session_save(const KvRows *rows, const SessionKey *k, const SessionSnapshot *snap,
                 const char *path, char *err, size_t err_len);
int session_source_open(SessionSource *src, const char *path, char *err, size_t err_len);
void session_source_close(SessionSource *src);
int session_source_read(SessionSource *src, void *dst, uint64_t n, char *err, size_t err_len);
int session_check_key(const unsigned char *h, const SessionKey *k, char *err, size_t err_len);
int session_load(const KvRows *rows, const SessionKey *k, SessionSource *src,
                 SessionSnapshot *snap, char *err, size_t err_len);
int session_file_tokens(const char *path, char *err, size_t err_len);

#define KVCACHE_MAGIC "GLMKVBLK"
#define KVCACHE_VERSION 1
/* positions per entry: a prompt reuses all but at most 63 of its cached tokens */
#define KVCACHE_BLOCK 64

typedef struct KvCache {
    char dir[4096];
    double budget;          /* bytes on disk */
    SessionKey key;         /* its layer_indexer must outlive the cache */
    uint64_t seed;          /* the chain hash of the empty history: everything the rows depend on */
    long long restored, stored, rejected;   /* tokens restored, entries written, entries refused */
} KvCache;

/* Where a prefill's writing of entries stands: entries before `block` are done and `chain` is the
   chain hash of history[0, block * KVCACHE_BLOCK); `wrote` counts the entries it wrote. */
typedef struct { int block, wrote; uint64_t chain; struct timespec now[2]; } KvStoreCursor;

int kvcache_open(KvCache *kv, const char *dir, double budget_bytes, const SessionKey *key,
                 char *err, size_t err_len);
void kvcache_default_dir(const SessionKey *key, const char *cache_dir, char *dir, size_t n);
int kvcache_restore(KvCache *kv, const KvRows *rows, int *history, int pos, const int *tokens,
                    int n, char *warn, size_t warn_len);
void kvcache_cursor(const KvCache *kv, KvStoreCursor *c);
int kvcache_store(KvCache *kv, KvStoreCursor *c, const KvRows *rows, const int *history, int pos,
                  char *err, size_t err_len);
void kvcache_evict(const KvCache *kv);

uint64_t kvcache_chain(uint64_t parent, const int *tokens, int n);
void kvcache_path(const KvCache *kv, int start, uint64_t chain, char *path, size_t n);
void kvcache_header(const SessionKey *k, int start, uint64_t parent, uint64_t chain,
                    unsigned char *h);
int kvcache_save(const KvCache *kv, const KvRows *rows, const int *history, int start,
                 uint64_t parent, uint64_t chain, const char *path, char *err, size_t err_len);
int kvcache_read(SessionSource *src, const KvRows *rows, const SessionKey *k, const int *tokens,
                 int start, uint64_t parent, uint64_t chain, int load_from, char *err,
                 size_t err_len);
int kvcache_load(KvCache *kv, const KvRows *rows, const int *history, int start, uint64_t parent,
                 uint64_t chain, int load_from, char *warn, size_t warn_len);

#endif /* KVFILE_H */

#ifdef KVFILE_IMPLEMENTATION
#ifndef KVFILE_IMPLEMENTATION_DONE
#define KVFILE_IMPLEMENTATION_DONE

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- session files --------------------------------------------------------------------------- */

uint64_t session_payload_bytes(const SessionKey *k, uint64_t n, int has_logits) {
    uint64_t row = 0;
    for (int l = 0; l < k->layers; l++)
        row += (uint64_t)k->kv_lora + k->qk_rope + (k->layer_indexer[l] ? k->index_dim : 0);
    return n * sizeof(int32_t) +
           (has_logits ? ((uint64_t)k->vocab + k->hidden) * sizeof(float) : 0) +
           n * row * sizeof(float);
}

void session_header(const SessionKey *k, const SessionSnapshot *snap, unsigned char *h) {
    memset(h, 0, SESSION_HEADER_BYTES);
    memcpy(h, SESSION_MAGIC, 8);
    put_u32(h + 8, SESSION_VERSION);
    put_u32(h + 12, SESSION_HEADER_BYTES);
    put_u64(h + 16, k->config);
    put_u64(h + 24, k->tensors);
    put_u64(h + 32, k->weights);
    put_u64(h + 40, k->formats);
    uint32_t eps;
    memcpy(&eps, &k->latent_eps, 4);
    const uint32_t fields[] = { (uint32_t)k->idot,
                                (uint32_t)k->absorb,
                                (uint32_t)k->indexer_mode,
                                (uint32_t)k->mtp_zero_pos0,
                                eps,
                                (uint32_t)k->expert_bits,
                                (uint32_t)k->dense_bits,
                                (uint32_t)k->group,
                                (uint32_t)k->layers,
                                (uint32_t)k->kv_lora,
                                (uint32_t)k->qk_rope,
                                (uint32_t)k->index_dim,
                                (uint32_t)k->vocab,
                                (uint32_t)k->hidden,
                                (uint32_t)snap->n_tokens,
                                (uint32_t)(snap->has_logits ? 1 : 0) };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        put_u32(h + 48 + 4 * i, fields[i]);
    put_u64(h + 112, snap->seed);
    put_u64(h + 120, snap->rng_state);
    put_u32(h + 128, snap->chat_flags);
    put_u32(h + 132, (uint32_t)snap->text_npending);
    memcpy(h + 136, snap->text_pending, 4);
}

/* Writes buf and feeds it to the hash; 0, or -1 once a write failed. */
static int kvfile__put(FILE *f, Hash64 *h, const void *buf, size_t n) {
    hash64_update(h, buf, n);
    return fwrite(buf, 1, n, f) == n ? 0 : -1;
}

/* Writes the rows of positions [first, first + n): per layer the latent rows, the rope-key rows
   and (full-indexer layers) the indexer-key rows. 0, or -1 once a write failed. */
static int kvfile__put_rows(FILE *f, Hash64 *h, const KvRows *rows, const SessionKey *k,
                            size_t first, size_t n) {
    int bad = 0;
    for (int l = 0; l < k->layers && !bad; l++) {
        bad |= kvfile__put(f, h, rows->latent[l] + first * k->kv_lora,
                           n * k->kv_lora * sizeof(float));
        bad |= kvfile__put(f, h, rows->rope_key[l] + first * k->qk_rope,
                           n * k->qk_rope * sizeof(float));
        if (k->layer_indexer[l])
            bad |= kvfile__put(f, h, rows->index_key[l] + first * k->index_dim,
                               n * k->index_dim * sizeof(float));
    }
    return bad;
}

/* Ends a file whose bytes so far went through kvfile__put: the trailer, then the commit. */
static int kvfile__finish(AtomicFile *af, Hash64 *h, int bad, const char *path, char *err,
                          size_t err_len) {
    unsigned char trailer[8];
    put_u64(trailer, hash64_final(h));
    if (bad || fwrite(trailer, 1, 8, af->f) != 8) {
        snprintf(err, err_len, "writing %s failed: %s", path, strerror(errno));
        atomic_abort(af);
        return -1;
    }
    return atomic_commit(af, err, err_len);
}

int session_save(const KvRows *rows, const SessionKey *k, const SessionSnapshot *snap,
                 const char *path, char *err, size_t err_len) {
    if (snap->n_tokens < 0 || snap->n_tokens > rows->capacity) {
        snprintf(err, err_len, "internal: %d tokens to save", snap->n_tokens);
        return -1;
    }
    AtomicFile af;
    FILE *f = atomic_begin(&af, path, err, err_len);
    if (!f) return -1;
    const size_t n = (size_t)snap->n_tokens;
    unsigned char header[SESSION_HEADER_BYTES];
    session_header(k, snap, header);
    Hash64 h;
    hash64_init(&h);
    int bad = kvfile__put(f, &h, header, sizeof header);
    for (size_t i = 0; i < n && !bad; i++) {
        unsigned char id[4];
        put_u32(id, (uint32_t)snap->tokens[i]);
        bad |= kvfile__put(f, &h, id, 4);
    }
    if (snap->has_logits && !bad) {
        bad |= kvfile__put(f, &h, snap->logits, (size_t)k->vocab * sizeof(float));
        bad |= kvfile__put(f, &h, snap->hidden, (size_t)k->hidden * sizeof(float));
    }
    if (!bad) bad = kvfile__put_rows(f, &h, rows, k, 0, n);
    return kvfile__finish(&af, &h, bad, path, err, err_len);
}

int session_source_open(SessionSource *src, const char *path, char *err, size_t err_len) {
    memset(src, 0, sizeof *src);
    src->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (src->fd < 0) { snprintf(err, err_len, "cannot open it: %s", strerror(errno)); return -1; }
    struct stat st;
    if (fstat(src->fd, &st) || !S_ISREG(st.st_mode)) {
        snprintf(err, err_len, "is not a regular file");
        close(src->fd);
        src->fd = -1;
        return -1;
    }
    src->size = (uint64_t)st.st_size;
    return 0;
}

void session_source_close(SessionSource *src) {
    if (src->fd >= 0) close(src->fd);
    src->fd = -1;
}

int session_source_read(SessionSource *src, void *dst, uint64_t n, char *err, size_t err_len) {
    if (n > src->size - src->off) {
        snprintf(err, err_len, "is truncated (%llu bytes)", (unsigned long long)src->size);
        return -1;
    }
    if (src->fd < 0) memcpy(dst, src->mem + src->off, n);
    else {
        for (uint64_t done = 0; done < n;) {
            ssize_t got = pread(src->fd, (char *)dst + done, n - done, (off_t)(src->off + done));
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) {
                snprintf(err, err_len,
                         got < 0 ? "cannot be read: %s" : "shrank while it was read%s",
                         got < 0 ? strerror(errno) : "");
                return -1;
            }
            done += (uint64_t)got;
        }
    }
    hash64_update(&src->hash, dst, n);
    src->off += n;
    return 0;
}

int session_check_key(const unsigned char *h, const SessionKey *k, char *err, size_t err_len) {
    uint32_t f[14];
    for (int i = 0; i < 14; i++) f[i] = get_u32(h + 48 + 4 * i);
    /* the model first: a file of another model is refused as such, whatever else differs */
    const uint32_t shapes_here[] = { (uint32_t)k->layers,  (uint32_t)k->kv_lora,
                                     (uint32_t)k->qk_rope, (uint32_t)k->index_dim,
                                     (uint32_t)k->vocab,   (uint32_t)k->hidden };
    static const char *const shape_names[] = { "cached layers",  "kv_lora_rank", "qk_rope_head_dim",
                                               "index_head_dim", "vocab_size",   "hidden_size" };
    for (int i = 0; i < 6; i++)
        if (f[8 + i] != shapes_here[i]) {
            snprintf(err, err_len, "was written for another model (%s %u there, %u here)",
                     shape_names[i], f[8 + i], shapes_here[i]);
            return -1;
        }
    if (get_u64(h + 16) != k->config) {
        snprintf(err, err_len, "was written for another model (its config differs)");
        return -1;
    }
    if (get_u64(h + 24) != k->tensors) {
        snprintf(err, err_len,
                 "was written for another model (its tensor names, shapes or dtypes differ)");
        return -1;
    }
    if (get_u64(h + 32) != k->weights) {
        snprintf(err, err_len,
                 "was written for another model (its weights differ: norm vectors and router "
                 "biases)");
        return -1;
    }
    if (get_u64(h + 40) != k->formats) {
        snprintf(err, err_len,
                 "was written for other weight formats (quantization differs: it was written with "
                 "expert_bits %u, "
                 "dense_bits %u, GROUP %u; this run has %d, %d, %d)",
                 f[5], f[6], f[7], k->expert_bits, k->dense_bits, k->group);
        return -1;
    }
    static const char *const indexer_names[] = { "auto", "always", "off" };
    float eps;
    memcpy(&eps, &f[4], 4);
    if (f[0] != (uint32_t)k->idot) {
        snprintf(err, err_len, "was written with other settings (IDOT=%u there, %d here)", f[0],
                 k->idot);
        return -1;
    }
    if (f[1] != (uint32_t)k->absorb) {
        snprintf(err, err_len, "was written with other settings (ABSORB=%u there, %d here)", f[1],
                 k->absorb);
        return -1;
    }
    if (f[2] != (uint32_t)k->indexer_mode) {
        snprintf(err, err_len, "was written with other settings (INDEXER=%s there, %s here)",
                 f[2] < 3 ? indexer_names[f[2]] : "?",
                 (unsigned)k->indexer_mode < 3 ? indexer_names[k->indexer_mode] : "?");
        return -1;
    }
    if (f[3] != (uint32_t)k->mtp_zero_pos0) {
        snprintf(err, err_len, "was written with other settings (MTP_ZERO_POS0=%u there, %d here)",
                 f[3], k->mtp_zero_pos0);
        return -1;
    }
    if (memcmp(&eps, &k->latent_eps, 4)) {
        snprintf(err, err_len, "was written with other settings (LATENT_EPS=%g there, %g here)",
                 eps, k->latent_eps);
        return -1;
    }
    return 0;
}

/* Reads the header and checks it against k: 0 with the conversation's scalars in *snap, or -1
   with err saying why the file cannot be used here. */
static int kvfile__read_header(SessionSource *src, const SessionKey *k, int capacity,
                               SessionSnapshot *snap, char *err, size_t err_len) {
    unsigned char h[SESSION_HEADER_BYTES];
    src->off = 0;
    hash64_init(&src->hash);
    if (src->size < 16 || session_source_read(src, h, 16, err, err_len) ||
        memcmp(h, SESSION_MAGIC, 8)) {
        snprintf(err, err_len, "is not a glm session file");
        return -1;
    }
    if (get_u32(h + 8) != SESSION_VERSION || get_u32(h + 12) != SESSION_HEADER_BYTES) {
        snprintf(err, err_len, "has session format version %u (this glm reads version %d)",
                 get_u32(h + 8), SESSION_VERSION);
        return -1;
    }
    if (session_source_read(src, h + 16, SESSION_HEADER_BYTES - 16, err, err_len) ||
        session_check_key(h, k, err, err_len))
        return -1;
    uint32_t f[16];
    for (int i = 0; i < 16; i++) f[i] = get_u32(h + 48 + 4 * i);
    /* the conversation */
    const uint32_t n = f[14], flags = f[15], npending = get_u32(h + 132);
    if (flags > 1 || get_u32(h + 128) > 7 || npending > 3 || get_u32(h + 140) != 0) {
        snprintf(err, err_len, "has a corrupt header");
        return -1;
    }
    /* must be what a text stream keeps: the start of one UTF-8 character, zero-padded */
    if (npending) {
        uint32_t cp;
        int status;
        if (tok_utf8_next(h + 136, npending, &cp, &status) != npending || status != 2) {
            snprintf(err, err_len, "has a corrupt header (pending text)");
            return -1;
        }
    }
    for (uint32_t i = npending; i < 4; i++)
        if (h[136 + i]) {
            snprintf(err, err_len, "has a corrupt header (pending text)");
            return -1;
        }
    if (n >= (uint32_t)capacity) {
        snprintf(err, err_len,
                 "holds %u tokens and the KV cache %d: no room to continue (raise CTX)", n,
                 capacity);
        return -1;
    }
    if (flags && n == 0) {
        snprintf(err, err_len, "has a corrupt header (logits of an empty conversation)");
        return -1;
    }
    const uint64_t want = SESSION_HEADER_BYTES + session_payload_bytes(k, n, (int)flags) + 8;
    if (src->size != want) {
        snprintf(err, err_len, "%s (%llu bytes; its header says %llu)",
                 src->size < want ? "is truncated" : "has trailing bytes",
                 (unsigned long long)src->size, (unsigned long long)want);
        return -1;
    }
    snap->n_tokens = (int)n;
    snap->has_logits = (int)flags;
    snap->seed = get_u64(h + 112);
    snap->rng_state = get_u64(h + 120);
    snap->chat_flags = get_u32(h + 128);
    snap->text_npending = (int)npending;
    memcpy(snap->text_pending, h + 136, 4);
    return 0;
}

/* Index of the first value of v[0, n) that is not finite, or -1. The test runs over every value
   without an early exit, so that it vectorizes; only a bad buffer is searched. */
static int64_t kvfile__first_nonfinite(const float *v, uint64_t n) {
    int ok = 1;
    for (uint64_t i = 0; i < n; i++) ok &= fabsf(v[i]) <= FLT_MAX;
    if (ok) return -1;
    uint64_t i = 0;
    while (fabsf(v[i]) <= FLT_MAX) i++;
    return (int64_t)i;
}

/* Reads n floats into dst (or, when dst is NULL, through scratch) and checks they are finite. */
static int kvfile__read_floats(SessionSource *src, float *dst, uint64_t n, float *scratch,
                               size_t scratch_n, const char *what, char *err, size_t err_len) {
    for (uint64_t done = 0; done < n;) {
        const uint64_t k = dst ? n - done : (n - done < scratch_n ? n - done : scratch_n);
        float *p = dst ? dst + done : scratch;
        if (session_source_read(src, p, k * sizeof(float), err, err_len)) return -1;
        int64_t bad = kvfile__first_nonfinite(p, k);
        if (bad >= 0) {
            snprintf(err, err_len, "is corrupt (%s: value %llu is not finite)", what,
                     (unsigned long long)(done + (uint64_t)bad));
            return -1;
        }
        done += k;
    }
    return 0;
}

/* Reads the rows kvfile__put_rows wrote for positions [first, first + n): those from position
   first + load_from on into the rows, the earlier ones (all of them when load_from == n) only
   through scratch, to be checked. */
static int kvfile__read_rows(SessionSource *src, const KvRows *rows, const SessionKey *k,
                             uint64_t first, uint64_t n, uint64_t load_from, float *scratch,
                             size_t scratch_n, char *err, size_t err_len) {
    char what[96];
    for (int l = 0; l < k->layers; l++) {
        float *const dst[3] = { rows->latent[l], rows->rope_key[l],
                                k->layer_indexer[l] ? rows->index_key[l] : NULL };
        const uint64_t dim[3] = { (uint64_t)k->kv_lora, (uint64_t)k->qk_rope,
                                  (uint64_t)k->index_dim };
        static const char *const names[3] = { "latent", "rope key", "indexer key" };
        for (int j = 0; j < 3; j++) {
            if (j == 2 && !k->layer_indexer[l]) continue;
            snprintf(what, sizeof what, "layer %d %s", l, names[j]);
            if (kvfile__read_floats(src, NULL, load_from * dim[j], scratch, scratch_n, what, err,
                                    err_len) ||
                kvfile__read_floats(src, dst[j] + (first + load_from) * dim[j],
                                    (n - load_from) * dim[j], scratch, scratch_n, what, err,
                                    err_len))
                return -1;
        }
    }
    return 0;
}

/* Reads the trailer and compares it with the hash of everything read before it. */
static int kvfile__check_trailer(SessionSource *src, char *err, size_t err_len) {
    const uint64_t computed = hash64_final(&src->hash);
    unsigned char trailer[8];
    if (session_source_read(src, trailer, 8, err, err_len)) return -1;
    if (get_u64(trailer) != computed) {
        snprintf(err, err_len, "is corrupt (its checksum does not match its contents)");
        return -1;
    }
    return 0;
}

/* One pass over the payload after the header. into 0: through scratch (checks only); 1: into the
   rows and snap's buffers. Ends with the hash check. */
static int kvfile__read_payload(SessionSource *src, const KvRows *rows, const SessionKey *k,
                                SessionSnapshot *snap, int into, float *scratch, size_t scratch_n,
                                char *err, size_t err_len) {
    const uint64_t n = (uint64_t)snap->n_tokens;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char id[4];
        if (session_source_read(src, id, 4, err, err_len)) return -1;
        const uint32_t v = get_u32(id);
        if (v >= (uint32_t)k->vocab) {
            snprintf(err, err_len, "is corrupt (token %llu is id %u, outside the vocabulary of %d)",
                     (unsigned long long)i, v, k->vocab);
            return -1;
        }
        if (into) snap->tokens[i] = (int)v;
    }
    if (snap->has_logits &&
        (kvfile__read_floats(src, into ? snap->logits : NULL, (uint64_t)k->vocab, scratch,
                             scratch_n, "logits", err, err_len) ||
         kvfile__read_floats(src, into ? snap->hidden : NULL, (uint64_t)k->hidden, scratch,
                             scratch_n, "hidden state", err, err_len)))
        return -1;
    if (kvfile__read_rows(src, rows, k, 0, n, into ? 0 : n, scratch, scratch_n, err, err_len))
        return -1;
    return kvfile__check_trailer(src, err, err_len);
}

int session_load(const KvRows *rows, const SessionKey *k, SessionSource *src,
                 SessionSnapshot *snap, char *err, size_t err_len) {
    enum { SCRATCH = 1 << 16 };
    float *scratch = malloc(SCRATCH * sizeof(float));
    if (!scratch) {
        snprintf(err, err_len, "cannot be read: out of memory");
        return -1;
    }
    SessionSnapshot head = *snap;
    int rc = 0;
    if (kvfile__read_header(src, k, rows->capacity, &head, err, err_len) ||
        kvfile__read_payload(src, rows, k, &head, 0, scratch, SCRATCH, err, err_len))
        rc = -1;
    else if (kvfile__read_header(src, k, rows->capacity, &head, err, err_len) ||
             kvfile__read_payload(src, rows, k, &head, 1, scratch, SCRATCH, err, err_len))
        rc = -2;
    else *snap = head;
    free(scratch);
    return rc;
}

int session_file_tokens(const char *path, char *err, size_t err_len) {
    SessionSource src;
    if (session_source_open(&src, path, err, err_len)) return -1;
    unsigned char h[SESSION_HEADER_BYTES];
    int n = -1;
    if (src.size < SESSION_HEADER_BYTES ||
        session_source_read(&src, h, SESSION_HEADER_BYTES, err, err_len) ||
        memcmp(h, SESSION_MAGIC, 8))
        snprintf(err, err_len, "is not a glm session file");
    else if (get_u32(h + 8) != SESSION_VERSION)
        snprintf(err, err_len, "has session format version %u (this glm reads version %d)",
                 get_u32(h + 8), SESSION_VERSION);
    else if (get_u32(h + 104) > (1u << 30))
        snprintf(err, err_len, "has a corrupt header (%u tokens)", get_u32(h + 104));
    else
        n = (int)get_u32(h + 104);
    session_source_close(&src);
    return n;
}

/* ---- the prefix cache ------------------------------------------------------------------------ */

uint64_t kvcache_chain(uint64_t parent, const int *tokens, int n) {
    Hash64 h;
    hash64_init(&h);
    hash64_update(&h, &parent, sizeof parent);
    for (int i = 0; i < n; i++) {
        unsigned char id[4];
        put_u32(id, (uint32_t)tokens[i]);
        hash64_update(&h, id, 4);
    }
    return hash64_final(&h);
}

int kvcache_open(KvCache *kv, const char *dir, double budget_bytes, const SessionKey *key,
                 char *err, size_t err_len) {
    memset(kv, 0, sizeof *kv);
    kv->key = *key;
    kv->budget = budget_bytes;
    /* the seed: the magic, the model's fingerprint and the settings that change the rows */
    Hash64 h;
    hash64_init(&h);
    hash64_update(&h, KVCACHE_MAGIC, 8);
    const uint64_t words[] = { key->config,
                               key->tensors,
                               key->weights,
                               key->formats,
                               (uint64_t)key->idot,
                               (uint64_t)key->absorb,
                               (uint64_t)key->indexer_mode,
                               (uint64_t)key->mtp_zero_pos0,
                               KVCACHE_BLOCK,
                               KVCACHE_VERSION };
    hash64_update(&h, words, sizeof words);
    hash64_update(&h, &key->latent_eps, sizeof key->latent_eps);
    kv->seed = hash64_final(&h);
    snprintf(kv->dir, sizeof kv->dir, "%s", dir);
    if ((mkdir(kv->dir, 0700) && errno != EEXIST) || access(kv->dir, R_OK | W_OK | X_OK)) {
        snprintf(err, err_len, "%s", strerror(errno));
        return -1;
    }
    return 0;
}

void kvcache_default_dir(const SessionKey *key, const char *cache_dir, char *dir, size_t n) {
    const uint64_t model[] = { key->config, key->tensors, key->weights };
    snprintf(dir, n, "%s/glm", cache_dir);
    mkdir(cache_dir, 0700);
    mkdir(dir, 0700);
    snprintf(dir, n, "%s/glm/kv-%016llx", cache_dir,
             (unsigned long long)hash64(model, sizeof model));
}

void kvcache_path(const KvCache *kv, int start, uint64_t chain, char *path, size_t n) {
    snprintf(path, n, "%s/%07d-%016llx.kv", kv->dir, start, (unsigned long long)chain);
}

void kvcache_header(const SessionKey *k, int start, uint64_t parent, uint64_t chain,
                    unsigned char *h) {
    SessionSnapshot snap = { .n_tokens = KVCACHE_BLOCK };
    session_header(k, &snap, h);
    memset(h + 104, 0, SESSION_HEADER_BYTES - 104);
    memcpy(h, KVCACHE_MAGIC, 8);
    put_u32(h + 8, KVCACHE_VERSION);
    put_u32(h + 104, KVCACHE_BLOCK);
    put_u32(h + 112, (uint32_t)start);
    put_u64(h + 120, parent);
    put_u64(h + 128, chain);
}

/* Writes the entry of positions [start, start + KVCACHE_BLOCK) of `history`, whose chain hashes
   before and after it are parent and chain. 0, or -1 with err filled. */
int kvcache_save(const KvCache *kv, const KvRows *rows, const int *history, int start,
                 uint64_t parent, uint64_t chain, const char *path, char *err, size_t err_len) {
    const int G = KVCACHE_BLOCK;
    if (start < 0 || start + G > rows->capacity) {
        snprintf(err, err_len, "internal: entry at %d", start);
        return -1;
    }
    AtomicFile af;
    FILE *f = atomic_begin(&af, path, err, err_len);
    if (!f) return -1;
    unsigned char header[SESSION_HEADER_BYTES];
    kvcache_header(&kv->key, start, parent, chain, header);
    Hash64 h;
    hash64_init(&h);
    int bad = kvfile__put(f, &h, header, sizeof header);
    for (int i = 0; i < G && !bad; i++) {
        unsigned char id[4];
        put_u32(id, (uint32_t)history[start + i]);
        bad |= kvfile__put(f, &h, id, 4);
    }
    if (!bad) bad = kvfile__put_rows(f, &h, rows, &kv->key, (size_t)start, (size_t)G);
    return kvfile__finish(&af, &h, bad, path, err, err_len);
}

/* Reads the entry of positions [start, start + KVCACHE_BLOCK) from src, which must be the one of
   `tokens` (the history's ids at those positions) after chain hash `parent`: rows of positions
   from `load_from` on go into the rows (past the conversation's end: the caller advances it only
   on success), earlier ones are only checked. 0, or -1 with err saying why it was refused. */
int kvcache_read(SessionSource *src, const KvRows *rows, const SessionKey *k, const int *tokens,
                 int start, uint64_t parent, uint64_t chain, int load_from, char *err,
                 size_t err_len) {
    const int G = KVCACHE_BLOCK;
    unsigned char h[SESSION_HEADER_BYTES];
    src->off = 0;
    hash64_init(&src->hash);
    if (src->size < SESSION_HEADER_BYTES ||
        session_source_read(src, h, SESSION_HEADER_BYTES, err, err_len) ||
        memcmp(h, KVCACHE_MAGIC, 8)) {
        snprintf(err, err_len, "is not a glm prefix cache entry");
        return -1;
    }
    if (get_u32(h + 8) != KVCACHE_VERSION) {
        snprintf(err, err_len, "has prefix cache format version %u (this glm reads version %d)",
                 get_u32(h + 8), KVCACHE_VERSION);
        return -1;
    }
    if (get_u32(h + 12) != SESSION_HEADER_BYTES) {
        snprintf(err, err_len, "has a corrupt header (its size)");
        return -1;
    }
    if (session_check_key(h, k, err, err_len)) return -1;
    if (get_u32(h + 104) != (uint32_t)G || get_u32(h + 108) != 0 ||
        get_u32(h + 112) != (uint32_t)start || get_u32(h + 116) != 0 ||
        get_u64(h + 120) != parent || get_u64(h + 128) != chain || get_u64(h + 136) != 0) {
        snprintf(err, err_len,
                 "is not the entry its name promises (its header holds another position or "
                 "prefix)");
        return -1;
    }
    if (start < 0 || load_from < 0 || load_from > G || start + G > rows->capacity) {
        snprintf(err, err_len, "internal: entry at %d", start);
        return -1;
    }
    const uint64_t want = SESSION_HEADER_BYTES + session_payload_bytes(k, (uint64_t)G, 0) + 8;
    if (src->size != want) {
        snprintf(err, err_len, "%s (%llu bytes; its header says %llu)",
                 src->size < want ? "is truncated" : "has trailing bytes",
                 (unsigned long long)src->size, (unsigned long long)want);
        return -1;
    }
    for (int i = 0; i < G; i++) {
        unsigned char id[4];
        if (session_source_read(src, id, 4, err, err_len)) return -1;
        if (get_u32(id) != (uint32_t)tokens[i]) {
            snprintf(err, err_len, "holds other tokens than its name promises (position %d)",
                     start + i);
            return -1;
        }
    }
    enum { SCRATCH = 1 << 14 };
    float *scratch = malloc(SCRATCH * sizeof(float));
    if (!scratch) {
        snprintf(err, err_len, "cannot be read: out of memory");
        return -1;
    }
    int rc = kvfile__read_rows(src, rows, k, (uint64_t)start, (uint64_t)G, (uint64_t)load_from,
                               scratch, SCRATCH, err, err_len);
    free(scratch);
    return rc ? -1 : kvfile__check_trailer(src, err, err_len);
}

/* Opens and reads one entry (see kvcache_read). 1 when its rows are in place; 0 when there is
   none, or it was refused: then warn says so, and a refused entry is counted and removed. */
int kvcache_load(KvCache *kv, const KvRows *rows, const int *history, int start, uint64_t parent,
                 uint64_t chain, int load_from, char *warn, size_t warn_len) {
    char path[4200], err[8500];
    kvcache_path(kv, start, chain, path, sizeof path);
    SessionSource src;
    if (session_source_open(&src, path, err, sizeof err)) {
        if (errno != ENOENT)
            snprintf(warn, warn_len, "prefix cache entry %s %s; skipped", path, err);
        return 0;
    }
    const int rc = kvcache_read(&src, rows, &kv->key, history + start, start, parent, chain,
                                load_from, err, sizeof err);
    session_source_close(&src);
    if (rc) {
        snprintf(warn, warn_len, "prefix cache entry %s %s; skipped and removed", path, err);
        kv->rejected++;
        unlink(path);
        return 0;
    }
    return 1;
}

int kvcache_restore(KvCache *kv, const KvRows *rows, int *history, int pos, const int *tokens,
                    int n, char *warn, size_t warn_len) {
    const int G = KVCACHE_BLOCK;
    if (warn_len) warn[0] = 0;
    if (n > rows->capacity - pos) n = rows->capacity - pos;
    /* no entry ends in (pos, pos + n] */
    if (n < 1 || (pos + n) / G <= pos / G) return 0;
    /* past pos: scratch until the caller takes it */
    memmove(history + pos, tokens, (size_t)n * sizeof(int));
    uint64_t chain = kv->seed;
    int b = 0;
    for (; (b + 1) * G <= pos; b++) chain = kvcache_chain(chain, history + b * G, G);
    int end = pos;
    for (; (b + 1) * G <= pos + n; b++) {
        const uint64_t next = kvcache_chain(chain, history + b * G, G);
        if (!kvcache_load(kv, rows, history, b * G, chain, next, end - b * G, warn, warn_len))
            break;
        chain = next;
        end = (b + 1) * G;
    }
    kv->restored += end - pos;
    return end - pos;
}

void kvcache_cursor(const KvCache *kv, KvStoreCursor *c) {
    memset(c, 0, sizeof *c);
    if (!kv) return;
    c->chain = kv->seed;
    clock_gettime(CLOCK_REALTIME, &c->now[0]);
    c->now[1] = c->now[0];
}

int kvcache_store(KvCache *kv, KvStoreCursor *c, const KvRows *rows, const int *history, int pos,
                  char *err, size_t err_len) {
    const int G = KVCACHE_BLOCK, blocks = pos / G;
    for (; c->block < blocks; c->block++) {
        const int start = c->block * G;
        const uint64_t next = kvcache_chain(c->chain, history + start, G);
        char path[4200];
        kvcache_path(kv, start, next, path, sizeof path);
        if (utimensat(AT_FDCWD, path, c->now, 0)) {   /* not there: write it */
            if (kvcache_save(kv, rows, history, start, c->chain, next, path, err, err_len)) {
                c->block = INT32_MAX;
                return -1;
            }
            utimensat(AT_FDCWD, path, c->now, 0);
            c->wrote++;
            kv->stored++;
        }
        c->chain = next;
    }
    return 0;
}

typedef struct { char name[28]; long long size; struct timespec mtime; int start; } KvEntryFile;

static int kvfile__entry_older(const void *a, const void *b) {
    const KvEntryFile *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    /* at one instant, later positions first */
    return (x->start < y->start) - (x->start > y->start);
}

/* Also removes the temporary files of writers that were killed (atomic_sweep's rule). */
void kvcache_evict(const KvCache *kv) {
    DIR *d = opendir(kv->dir);
    if (!d) return;
    KvEntryFile *files = NULL;
    size_t n = 0, cap = 0;
    double total = 0;
    char path[8400];
    for (struct dirent *e; (e = readdir(d));) {
        int start, len = 0;
        unsigned long long chain;
        const char *tmp = strstr(e->d_name, ".kv.tmp.");
        if (tmp) {
            char *end;
            const long pid = strtol(tmp + 8, &end, 10);
            if (!*end && pid > 0 && kill((pid_t)pid, 0) && errno == ESRCH) {
                snprintf(path, sizeof path, "%s/%s", kv->dir, e->d_name);
                unlink(path);
            }
            continue;
        }
        if (sscanf(e->d_name, "%7d-%16llx.kv%n", &start, &chain, &len) != 2 || len != 27 ||
            e->d_name[27])
            continue;
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", kv->dir, e->d_name);
        if (stat(path, &st) || !S_ISREG(st.st_mode)) continue;
        if (n == cap) {
            KvEntryFile *grown = realloc(files, (cap = cap ? 2 * cap : 256) * sizeof *files);
            if (!grown) break;   /* the entries counted so far are evicted from */
            files = grown;
        }
        memcpy(files[n].name, e->d_name, 28);   /* 27 characters, checked above */
        files[n].size = (long long)st.st_size;
        files[n].mtime = st.st_mtim;
        files[n].start = start;
        total += (double)st.st_size;
        n++;
    }
    closedir(d);
    if (total > kv->budget) {
        qsort(files, n, sizeof *files, kvfile__entry_older);
        for (size_t i = 0; i < n && total > kv->budget; i++) {
            snprintf(path, sizeof path, "%s/%s", kv->dir, files[i].name);
            if (!unlink(path) || errno == ENOENT) total -= (double)files[i].size;
        }
    }
    free(files);
}

#endif /* KVFILE_IMPLEMENTATION_DONE */
#endif /* KVFILE_IMPLEMENTATION */

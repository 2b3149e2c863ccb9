/* =============================================================================================
   quality.c — measuring the model: perplexity (PPL), KL divergence against a saved run (KLD),
   and multiple-choice scoring (SCORE). A front end of the engine in glm.c; main.c includes it
   after text.c, whose tokenizer glue (codec_load, tokens_push_text) it uses. docs/quality.md
   says what each mode computes, for the person who runs it.

   Every log-probability is a double-precision log-softmax of the float logits the forward pass
   writes: log p(t) = logit[t] - logZ, logZ = max + log sum exp(logit - max), summed in id order.

   PPL=file. The text is tokenized whole and cut into windows of W = CTX - BOS text tokens; each
   window is its own sequence from position 0 (BOS=1 puts the model's bos_token_id first). A text
   of at most W tokens is one window that scores every token after its first (every token, with
   BOS). A longer one: windows start every PPL_STRIDE tokens (default: half a window, rounded up)
   while they fit, and each scores its last k = min(stride, W - W/2) tokens, so every scored token
   sees at least half a window before it (the first window's first half is context only, as in
   llama.cpp); when the last full window ends before the text, one more window ends at the text's
   end and scores the tokens no window scored, at most k. ppl_plan is that rule;
   tests/quality_ref.py is a second implementation of it.

   LOGITS_SAVE=file / KLD=file. The distribution of every scored position, saved by one run and
   compared by another (other weights' precision, other settings). The file (little-endian):
     header  608 bytes: magic "GLMLOGIT", version 1, header size, vocab, top-k (0: full rows), the
             text's token count and the scored positions' count; the model's fingerprint (the
             config and weight-sample hashes of glm.c's session_key, which do not depend on how the
             weights are quantized), a hash of the token ids; CTX, PPL_STRIDE and the BOS id (-1:
             none), which fix the windows; expert_bits, dense_bits, GROUP and IDOT of the run that
             wrote it (for the report); SNAP and PPL as NUL-padded 256-byte strings
     tokens  the text's ids, int32 each
     records one per scored position in window order: target id (u32), its logit (f32), logZ
             (f64), the mass of the tokens not stored (f64; 0 for full rows), then top-k pairs
             (id u32, logit f32) in descending logit order (ties: smaller id first), or the full
             row of vocab f32 logits: 24 + 8k bytes, or 24 + 4 * vocab bytes, per position
     trailer a 64-bit hash (durable.h's Hash64) of every byte before it
   With top-k the divergence is that of the two distributions coarsened to the k reference tokens
   plus one "rest" bucket: a lower bound of the full KL divergence, exact with full rows. A run
   against its own file gives exactly 0: both sides compute every term from the same floats in
   the same order. The reader checks everything before the run (header against the model, the
   text and the windows, each mismatch refused by name; size; hash; every record: ids in the
   vocabulary and distinct, logits finite and in order, targets equal to the windows' tokens,
   probabilities summing to 1), so a refused file costs no forward pass (fuzzed:
   tests/fuzz/fuzz_logits.c).

   SCORE=file.jsonl. One question per line: HellaSwag ({ctx, endings, label}), ARC ({question,
   choices: {text: [...], label: [...]}, answerKey}) or MMLU ({question, choices: [...],
   answer}). The context is ctx, or "Question: <question>\nAnswer:"; each choice is the text
   " <choice>". Context and choice are tokenized separately; a choice's log-likelihood is the sum
   of log p of its tokens after the context (and its earlier tokens), also divided by its bytes.
   The Generator keeps the context in the KV cache: generator_reuse_prefix prefills it once (only
   the part a previous context does not share), and each choice rolls back to its end and
   prefills the choice's tokens but the last (whose logits nobody reads).
   ============================================================================================= */

/* ---- log-softmax ---------------------------------------------------------------------------- */

/* log sum exp of a logits row, in double, in id order. */
static double row_logz(const float *l, int V) {
    float mx = l[0];
    for (int i = 1; i < V; i++) if (l[i] > mx) mx = l[i];
    double s = 0.0;
    for (int i = 0; i < V; i++) s += exp((double)l[i] - (double)mx);
    return (double)mx + log(s);
}

/* ---- the windows ----------------------------------------------------------------------------- */

/* Text tokens [start, start + len) run as one sequence; text indices [score_from, start + len) are
   scored. */
typedef struct { int start, len, score_from; } PplWindow;

typedef struct {
    PplWindow *w;
    int n, window, stride, bos;   /* bos: 1 when a BOS id leads every window */
    long long scored;
} PplPlan;

/* The windows over n text tokens for CTX `ctx`, stride (0: default) and bos (0 or 1). 0, or -1
   with err saying which setting does not work. */
static int ppl_plan(PplPlan *p, int n, int ctx, int stride, int bos, char *err, size_t err_len) {
    memset(p, 0, sizeof *p);
    const int W = ctx - bos;
    if (W < 2) {
        snprintf(err, err_len, "CTX=%d leaves fewer than 2 text tokens per window", ctx);
        return -1;
    }
    const int half_up = W - W / 2;
    if (stride <= 0) stride = half_up;
    if (stride > W) {
        snprintf(err, err_len, "PPL_STRIDE=%d is longer than a window (%d text tokens)", stride, W);
        return -1;
    }
    p->window = W;
    p->stride = stride;
    p->bos = bos;
    if (n - (bos ? 0 : 1) < 1) {
        snprintf(err, err_len, "the text has %d token%s: nothing to score", n, n == 1 ? "" : "s");
        return -1;
    }
    if (n <= W) {
        p->w = xmalloc(sizeof *p->w);
        p->w[0] = (PplWindow){ 0, n, bos ? 0 : 1 };
        p->n = 1;
    } else {
        const int keep = stride < half_up ? stride : half_up;
        const int full = (n - W) / stride + 1;
        p->w = xmalloc((size_t)(full + 1) * sizeof *p->w);
        for (int k = 0; k < full; k++)
            p->w[k] = (PplWindow){ k * stride, W, k * stride + W - keep };
        p->n = full;
        const int end = (full - 1) * stride + W;
        if (end < n) p->w[p->n++] = (PplWindow){ n - W, W, end > n - keep ? end : n - keep };
    }
    for (int k = 0; k < p->n; k++) p->scored += p->w[k].start + p->w[k].len - p->w[k].score_from;
    return 0;
}

/* ---- the logits file ------------------------------------------------------------------------- */

#define LF_MAGIC "GLMLOGIT"
#define LF_VERSION 1
#define LF_HEADER_BYTES 608
#define LF_NAME_BYTES 256
#define LF_RECORD_FIXED 24

typedef struct {
    uint32_t vocab, top_k;
    uint64_t n_tokens, n_positions;
    uint64_t model_config, model_weights, tokens_hash;
    uint32_t ctx, stride;
    int32_t bos_id;                        /* -1: none */
    uint32_t expert_bits, dense_bits, group, idot;
    char model[LF_NAME_BYTES], text[LF_NAME_BYTES];
} LogitsHeader;

/* One scored position as stored. */
typedef struct {
    uint32_t target;
    float target_logit;
    double logz, rest;                     /* rest: probability of the tokens not stored */
    uint32_t *ids;                         /* [top_k] (top-k files) */
    float *logits;                         /* [top_k], or [vocab] for full rows */
} LogitsRecord;

static uint64_t lf_record_bytes(const LogitsHeader *h) {
    return LF_RECORD_FIXED + (h->top_k ? 8ull * h->top_k : 4ull * h->vocab);
}

static uint64_t tokens_hash(const int *ids, int n) {
    Hash64 h;
    hash64_init(&h);
    for (int i = 0; i < n; i++) {
        unsigned char b[4];
        put_u32(b, (uint32_t)ids[i]);
        hash64_update(&h, b, 4);
    }
    return hash64_final(&h);
}

static void lf_header_bytes(const LogitsHeader *h, unsigned char *b) {
    memset(b, 0, LF_HEADER_BYTES);
    memcpy(b, LF_MAGIC, 8);
    put_u32(b + 8, LF_VERSION);
    put_u32(b + 12, LF_HEADER_BYTES);
    put_u32(b + 16, h->vocab);
    put_u32(b + 20, h->top_k);
    put_u64(b + 24, h->n_tokens);
    put_u64(b + 32, h->n_positions);
    put_u64(b + 40, h->model_config);
    put_u64(b + 48, h->model_weights);
    put_u64(b + 56, h->tokens_hash);
    put_u32(b + 64, h->ctx);
    put_u32(b + 68, h->stride);
    put_u32(b + 72, (uint32_t)h->bos_id);
    put_u32(b + 76, h->expert_bits);
    put_u32(b + 80, h->dense_bits);
    put_u32(b + 84, h->group);
    put_u32(b + 88, h->idot);
    memcpy(b + 96, h->model, LF_NAME_BYTES - 1);
    memcpy(b + 96 + LF_NAME_BYTES, h->text, LF_NAME_BYTES - 1);
}

/* The header: its own consistency and the file's size (the model, text and windows are
   lf_match's). 0, or -1 with err. */
static int lf_read_header(SessionSource *src, LogitsHeader *h, char *err, size_t err_len) {
    unsigned char b[LF_HEADER_BYTES];
    memset(h, 0, sizeof *h);
    src->off = 0;
    hash64_init(&src->hash);
    if (src->size < 8 || session_source_read(src, b, 8, err, err_len) || memcmp(b, LF_MAGIC, 8)) {
        snprintf(err, err_len, "is not a logits file (LOGITS_SAVE writes them)");
        return -1;
    }
    if (session_source_read(src, b + 8, LF_HEADER_BYTES - 8, err, err_len)) return -1;
    if (get_u32(b + 8) != LF_VERSION || get_u32(b + 12) != LF_HEADER_BYTES) {
        snprintf(err, err_len, "has version %u (header %u bytes); this glm reads version %d",
                 get_u32(b + 8), get_u32(b + 12), LF_VERSION);
        return -1;
    }
    h->vocab = get_u32(b + 16);
    h->top_k = get_u32(b + 20);
    h->n_tokens = get_u64(b + 24);
    h->n_positions = get_u64(b + 32);
    h->model_config = get_u64(b + 40);
    h->model_weights = get_u64(b + 48);
    h->tokens_hash = get_u64(b + 56);
    h->ctx = get_u32(b + 64);
    h->stride = get_u32(b + 68);
    h->bos_id = (int32_t)get_u32(b + 72);
    h->expert_bits = get_u32(b + 76);
    h->dense_bits = get_u32(b + 80);
    h->group = get_u32(b + 84);
    h->idot = get_u32(b + 88);
    memcpy(h->model, b + 96, LF_NAME_BYTES);
    memcpy(h->text, b + 96 + LF_NAME_BYTES, LF_NAME_BYTES);
    if (h->model[LF_NAME_BYTES - 1] || h->text[LF_NAME_BYTES - 1]) {
        snprintf(err, err_len, "has a model or text name without its end");
        return -1;
    }
    if (h->vocab < 2 || h->vocab > (1u << 24) || h->top_k >= h->vocab || h->n_tokens < 1 ||
        h->n_tokens > INT32_MAX || h->n_positions < 1 || h->n_positions > h->n_tokens ||
        h->ctx < 2 || h->ctx > (1u << 24) || h->stride < 1 || h->stride > h->ctx ||
        h->bos_id < -1 || h->bos_id >= (int32_t)h->vocab) {
        snprintf(err, err_len,
                 "has a header with impossible values (vocab %u, top-k %u, %llu tokens, %llu "
                 "positions, CTX %u, "
                 "stride %u, BOS %d)",
                 h->vocab, h->top_k, (unsigned long long)h->n_tokens,
                 (unsigned long long)h->n_positions, h->ctx, h->stride, h->bos_id);
        return -1;
    }
    /* at most 2^31 positions of at most 24 + 2^26 bytes: no overflow in 64 bits */
    const uint64_t want =
        LF_HEADER_BYTES + 4 * h->n_tokens + h->n_positions * lf_record_bytes(h) + 8;
    if (src->size != want) {
        snprintf(err, err_len, "is %s: %llu bytes where its header promises %llu",
                 src->size < want ? "truncated" : "too long", (unsigned long long)src->size,
                 (unsigned long long)want);
        return -1;
    }
    return 0;
}

static void lf_record_alloc(const LogitsHeader *h, LogitsRecord *r) {
    memset(r, 0, sizeof *r);
    if (h->top_k) r->ids = xmalloc((size_t)h->top_k * sizeof(uint32_t));
    r->logits = xmalloc((size_t)(h->top_k ? h->top_k : h->vocab) * sizeof(float));
}

static void lf_record_free(LogitsRecord *r) {
    free(r->ids);
    free(r->logits);
    memset(r, 0, sizeof *r);
}

/* The next record into r (allocated by lf_record_alloc), its values checked: 0, or -1 with err.
   `mark` is [vocab] zero bytes of scratch (left zero). */
static int lf_read_record(SessionSource *src, const LogitsHeader *h, LogitsRecord *r,
                          unsigned char *mark, uint64_t index, char *err, size_t err_len) {
    unsigned char b[LF_RECORD_FIXED];
    if (session_source_read(src, b, sizeof b, err, err_len)) return -1;
    r->target = get_u32(b);
    uint32_t bits = get_u32(b + 4);
    memcpy(&r->target_logit, &bits, 4);
    uint64_t w = get_u64(b + 8);
    memcpy(&r->logz, &w, 8);
    w = get_u64(b + 16);
    memcpy(&r->rest, &w, 8);
    const uint32_t k = h->top_k, n = k ? k : h->vocab;
    unsigned char *row = xmalloc((size_t)n * (k ? 8 : 4));
    int rc = session_source_read(src, row, (uint64_t)n * (k ? 8 : 4), err, err_len);
    for (uint32_t i = 0; i < n && !rc; i++) {
        if (k) r->ids[i] = get_u32(row + 8 * i);
        bits = get_u32(row + (k ? 8 * i + 4 : 4 * i));
        memcpy(&r->logits[i], &bits, 4);
    }
    free(row);
    if (rc) return -1;
    const char *bad = NULL;
    if (r->target >= h->vocab) bad = "a target outside the vocabulary";
    else if (!isfinite(r->target_logit) || !isfinite(r->logz) ||
             !(r->rest >= 0.0 && r->rest <= 1.0))
        bad = "a value out of range";
    for (uint32_t i = 0; i < n && !bad; i++) {
        if (!isfinite(r->logits[i]) || (double)r->logits[i] > r->logz + 1e-6)
            bad = "a logit that is not finite or above logZ";
        else if (k && (r->ids[i] >= h->vocab || mark[r->ids[i]]))
            bad = "an id outside the vocabulary or twice";
        else if (k && i &&
                 (r->logits[i] > r->logits[i - 1] ||
                  (r->logits[i] == r->logits[i - 1] && r->ids[i] < r->ids[i - 1])))
            bad = "top logits out of order";
        else if (k) mark[r->ids[i]] = 1;
    }
    if (!bad && !k && r->logits[r->target] != r->target_logit)
        bad = "a target logit that is not its row's";
    if (!bad && k && mark[r->target]) {
        for (uint32_t i = 0; i < k; i++)
            if (r->ids[i] == r->target && r->logits[i] != r->target_logit)
                bad = "a target logit that is not its row's";
    }
    if (!bad) {   /* the stored probabilities sum to one */
        double sum = r->rest;
        for (uint32_t i = 0; i < n; i++) sum += exp((double)r->logits[i] - r->logz);
        if (!(fabs(sum - 1.0) < 1e-6)) bad = "probabilities that do not sum to 1";
    }
    if (k) for (uint32_t i = 0; i < k; i++) if (r->ids[i] < h->vocab) mark[r->ids[i]] = 0;
    if (bad) {
        snprintf(err, err_len, "is damaged: position %llu has %s", (unsigned long long)index, bad);
        return -1;
    }
    return 0;
}

/* The whole file checked: header, tokens (into *tokens, malloc'ed), every record against the
   windows the header describes, the trailer. Leaves src at the first record. 0, or -1 with err. */
static int lf_check(SessionSource *src, LogitsHeader *h, int **tokens, char *err, size_t err_len) {
    *tokens = NULL;
    if (lf_read_header(src, h, err, err_len)) return -1;
    const int n = (int)h->n_tokens;
    unsigned char *raw = xmalloc((size_t)n * 4);
    int *ids = xmalloc((size_t)n * sizeof(int));
    int rc = session_source_read(src, raw, (uint64_t)n * 4, err, err_len);
    for (int i = 0; i < n && !rc; i++) {
        const uint32_t id = get_u32(raw + 4 * i);
        if (id >= h->vocab) {
            snprintf(err, err_len, "is damaged: token %d (%u) is outside the vocabulary", i, id);
            rc = -1;
        }
        ids[i] = (int)id;
    }
    free(raw);
    if (!rc && tokens_hash(ids, n) != h->tokens_hash) {
        snprintf(err, err_len, "is damaged: its token ids do not match their hash");
        rc = -1;
    }
    PplPlan plan = { 0 };
    char perr[256];
    if (!rc && ppl_plan(&plan, n, (int)h->ctx, (int)h->stride, h->bos_id >= 0, perr, sizeof perr)) {
        snprintf(err, err_len, "describes windows that cannot be: %s", perr);
        rc = -1;
    }
    if (!rc && (uint64_t)plan.scored != h->n_positions) {
        snprintf(err, err_len, "is damaged: its windows score %lld positions, it holds %llu",
                 plan.scored, (unsigned long long)h->n_positions);
        rc = -1;
    }
    const uint64_t first_record = src->off;
    if (!rc) {
        LogitsRecord r;
        lf_record_alloc(h, &r);
        unsigned char *mark = xcalloc(h->vocab, 1);
        uint64_t index = 0;
        for (int k = 0; k < plan.n && !rc; k++)
            for (int t = plan.w[k].score_from; t < plan.w[k].start + plan.w[k].len && !rc;
                 t++, index++) {
                rc = lf_read_record(src, h, &r, mark, index, err, err_len);
                if (!rc && r.target != (uint32_t)ids[t]) {
                    snprintf(err, err_len,
                             "is damaged: position %llu predicts %u, the text has %d there",
                             (unsigned long long)index, r.target, ids[t]);
                    rc = -1;
                }
            }
        free(mark);
        lf_record_free(&r);
    }
    if (!rc) {
        const uint64_t want = hash64_final(&src->hash);
        unsigned char t[8];
        if (session_source_read(src, t, 8, err, err_len)) rc = -1;
        else if (get_u64(t) != want) {
            snprintf(err, err_len, "is damaged: its checksum does not match");
            rc = -1;
        }
    }
    free(plan.w);
    if (rc) { free(ids); return -1; }
    *tokens = ids;
    src->off = first_record;
    return 0;
}

/* A checked file against this run: the same model, text and windows. 0, or -1 with err naming
   what differs. */
static int lf_match(const LogitsHeader *file, const int *file_tokens, const LogitsHeader *run,
                    const int *tokens, char *err, size_t err_len) {
    if (file->vocab != run->vocab || file->model_config != run->model_config ||
        file->model_weights != run->model_weights) {
        snprintf(err, err_len,
                 "was made from another model (SNAP=%s, vocab %u); this run's model is SNAP=%s",
                 file->model, file->vocab, run->model);
        return -1;
    }
    if (file->n_tokens != run->n_tokens || file->tokens_hash != run->tokens_hash) {
        uint64_t i = 0;
        while (i < file->n_tokens && i < run->n_tokens && file_tokens[i] == tokens[i]) i++;
        snprintf(err, err_len,
                 "was made from another text (PPL=%s, %llu tokens); PPL=%s has %llu tokens, the "
                 "first difference at token %llu",
                 file->text, (unsigned long long)file->n_tokens, run->text,
                 (unsigned long long)run->n_tokens, (unsigned long long)i);
        return -1;
    }
    if (file->ctx != run->ctx || file->stride != run->stride || file->bos_id != run->bos_id) {
        snprintf(err, err_len,
                 "was made with other windows (CTX=%u, PPL_STRIDE=%u, BOS id %d); this run has "
                 "CTX=%u, PPL_STRIDE=%u, BOS id %d",
                 file->ctx, file->stride, file->bos_id, run->ctx, run->stride, run->bos_id);
        return -1;
    }
    return 0;
}

/* ---- the distributions of one position ------------------------------------------------------- */

/* The top k of a logits row into ids/vals: descending logit, smaller id first on ties. */
static void top_k_logits(const float *l, int V, int k, uint32_t *ids, float *vals) {
    int n = 0;
    for (int i = 0; i < V; i++) {
        if (n == k && !(l[i] > vals[k - 1])) continue;   /* ties keep the earlier (smaller) id */
        int j = n < k ? n++ : k - 1;
        while (j > 0 && l[i] > vals[j - 1]) { vals[j] = vals[j - 1]; ids[j] = ids[j - 1]; j--; }
        vals[j] = l[i];
        ids[j] = (uint32_t)i;
    }
}

/* Probability of the ids not marked, in id order (marked ids: mark[id] = 1). */
static double rest_mass(const float *l, int V, double logz, const unsigned char *mark) {
    double s = 0.0;
    for (int i = 0; i < V; i++) if (!mark[i]) s += exp((double)l[i] - logz);
    return s;
}

/* KL(P || Q) of the reference record P against the logits row q (its logZ qz): over the stored
   ids plus the rest bucket for top-k records, over the whole row for full ones. */
static double kl_divergence(const LogitsHeader *h, const LogitsRecord *p, const float *q, double qz,
                            unsigned char *mark) {
    const int V = (int)h->vocab;
    double kl = 0.0;
    if (!h->top_k) {
        for (int i = 0; i < V; i++) {
            const double lp = (double)p->logits[i] - p->logz, lq = (double)q[i] - qz;
            kl += exp(lp) * (lp - lq);
        }
        return kl;
    }
    for (uint32_t i = 0; i < h->top_k; i++) {
        const double lp = (double)p->logits[i] - p->logz, lq = (double)q[p->ids[i]] - qz;
        kl += exp(lp) * (lp - lq);
        mark[p->ids[i]] = 1;
    }
    const double q_rest = rest_mass(q, V, qz, mark);
    for (uint32_t i = 0; i < h->top_k; i++) mark[p->ids[i]] = 0;
    if (p->rest > 0) kl += p->rest * (log(p->rest) - log(q_rest > DBL_MIN ? q_rest : DBL_MIN));
    return kl;
}

/* ---- PPL mode -------------------------------------------------------------------------------- */

typedef struct {
    const Settings *set;
    const PplPlan *plan;
    const int *seq;                 /* the window's sequence: [BOS] + text tokens */
    int seq_len, first_scored;      /* sequence offsets [first_scored, seq_len) are scored */
    int V;
    /* totals */
    long long count;
    double nll, nll2;               /* sums of -log p and its square */
    double window_nll;
    /* LOGITS_SAVE */
    FILE *save;
    Hash64 save_hash;
    int save_top, save_failed;
    uint32_t *top_ids;
    float *top_vals;
    unsigned char *save_buf;
    /* KLD */
    SessionSource *ref;
    const LogitsHeader *ref_header;
    LogitsRecord ref_record;
    double *kl;                     /* [positions] */
    double ref_nll, ref_nll2, dnll, dnll2;   /* the reference's -log p, and (this - reference) */
    long long same_top;
    unsigned char *mark;            /* [V] zero scratch */
    char err[512];
} PplRun;

static void ppl_save_bytes(PplRun *r, const void *p, size_t n) {
    if (r->save_failed) return;
    hash64_update(&r->save_hash, p, n);
    if (fwrite(p, 1, n, r->save) != n) r->save_failed = 1;
}

static void ppl_save_record(PplRun *r, const float *l, int target, double logz) {
    const int V = r->V, k = r->save_top;
    unsigned char b[LF_RECORD_FIXED];
    double rest = 0.0;
    if (k) {
        top_k_logits(l, V, k, r->top_ids, r->top_vals);
        for (int i = 0; i < k; i++) r->mark[r->top_ids[i]] = 1;
        rest = rest_mass(l, V, logz, r->mark);
        for (int i = 0; i < k; i++) r->mark[r->top_ids[i]] = 0;
    }
    uint32_t bits;
    uint64_t w;
    put_u32(b, (uint32_t)target);
    memcpy(&bits, &l[target], 4);
    put_u32(b + 4, bits);
    memcpy(&w, &logz, 8);
    put_u64(b + 8, w);
    memcpy(&w, &rest, 8);
    put_u64(b + 16, w);
    ppl_save_bytes(r, b, sizeof b);
    const int n = k ? k : V;
    for (int i = 0; i < n; i++) {
        unsigned char *e = r->save_buf + (size_t)i * (k ? 8 : 4);
        if (k) put_u32(e, r->top_ids[i]);
        memcpy(&bits, k ? &r->top_vals[i] : &l[i], 4);
        put_u32(e + (k ? 4 : 0), bits);
    }
    ppl_save_bytes(r, r->save_buf, (size_t)n * (k ? 8 : 4));
}

/* One scored row: logits l predict `target`. */
static void ppl_score_row(PplRun *r, const float *l, int target) {
    const double logz = row_logz(l, r->V), nll = logz - (double)l[target];
    if (r->save) ppl_save_record(r, l, target, logz);
    if (r->ref) {
        char err[400];
        if (lf_read_record(r->ref, r->ref_header, &r->ref_record, r->mark, (uint64_t)r->count, err,
                           sizeof err))
            die("KLD=%s %s (it changed after it was checked)", r->set->kld_path, err);
        const LogitsRecord *p = &r->ref_record;
        if (p->target != (uint32_t)target)
            die("KLD=%s: position %lld predicts %u, this run %d (it changed after it was checked)",
                r->set->kld_path, r->count, p->target, target);
        r->kl[r->count] = kl_divergence(r->ref_header, p, l, logz, r->mark);
        const int ref_top = r->ref_header->top_k ? (int)p->ids[0] : argmax(p->logits, r->V);
        r->same_top += argmax(l, r->V) == ref_top;
        const double ref_nll = p->logz - (double)p->target_logit;
        r->ref_nll += ref_nll;
        r->ref_nll2 += ref_nll * ref_nll;
        r->dnll += nll - ref_nll;
        r->dnll2 += (nll - ref_nll) * (nll - ref_nll);
    }
    r->count++;
    r->nll += nll;
    r->nll2 += nll * nll;
    r->window_nll += nll;
}

/* The logits sink of a window's prefill: row j (position pos0 + j) predicts sequence offset
   pos0 + j + 1. */
static void ppl_chunk(void *user, int pos0, int S, const float *logits, const float *hidden) {
    (void)hidden;
    PplRun *r = user;
    for (int j = 0; j < S; j++) {
        const int next = pos0 + j + 1;
        if (next >= r->first_scored && next < r->seq_len)
            ppl_score_row(r, logits + (size_t)j * r->V, r->seq[next]);
    }
}

/* mean ± standard error of n values from their sum and sum of squares */
static double std_error(double sum, double sum2, long long n) {
    if (n < 2) return 0.0;
    const double mean = sum / n, var = (sum2 - n * mean * mean) / (n - 1);
    return var > 0 ? sqrt(var / n) : 0.0;
}

static int double_cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double percentile(const double *sorted, long long n, double q) {   /* nearest rank */
    long long i = (long long)ceil(q * n) - 1;
    return sorted[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* bos_token_id of config.json (or generation_config.json): the id, or -1 when neither has one. */
static int config_bos_id(const char *dir) {
    const char *files[] = { "config.json", "generation_config.json" };
    for (int f = 0; f < 2; f++) {
        char path[4200], err[512];
        snprintf(path, sizeof path, "%s/%s", dir, files[f]);
        size_t len;
        char *text = json_read_file(path, &len, err, sizeof err);
        if (!text) continue;
        JsonDoc *doc = json_parse(text, len, err, sizeof err);
        free(text);
        int64_t id = -1;
        const int found = doc && json_is_int(json_get(json_root(doc), "bos_token_id"), &id) &&
                          id >= 0 && id <= INT32_MAX;
        json_free(doc);
        if (found) return (int)id;
    }
    return -1;
}

/* The file's text: a regular file or a pipe, at most 256 MB. */
static char *quality_read_text(const char *setting, const char *path, size_t *len) {
    char err[4400];
    char *text = json_read_file(path, len, err, sizeof err);
    if (!text) die("%s=%s", setting, err);
    return text;
}

static void ppl_write_json(const Settings *set, const PplPlan *plan, const int *window_count,
                           const double *window_nll, int n_tokens, const PplRun *r, double ppl,
                           double ppl_err, const double *kl_sorted, const LogitsHeader *refh) {
    JsonWriter w;
    jw_init(&w);
    jw_obj(&w);
    jw_kstr(&w, "model", set->model_dir);
    jw_kstr(&w, "text", set->ppl_path);
    jw_kint(&w, "tokens", n_tokens);
    jw_kint(&w, "ctx", plan->window + plan->bos);
    jw_kint(&w, "stride", plan->stride);
    jw_kbool(&w, "bos", plan->bos);
    jw_kint(&w, "expert_bits", set->expert_bits);
    jw_kint(&w, "dense_bits", set->dense_bits);
    jw_kint(&w, "group", set->group);
    jw_kint(&w, "scored", r->count);
    jw_knum(&w, "nll_sum", r->nll);
    jw_knum(&w, "ppl", ppl);
    jw_knum(&w, "ppl_stderr", ppl_err);
    jw_key(&w, "windows");
    jw_arr(&w);
    for (int k = 0; k < plan->n; k++) {
        jw_obj(&w);
        jw_kint(&w, "start", plan->w[k].start);
        jw_kint(&w, "tokens", plan->w[k].len);
        jw_kint(&w, "score_from", plan->w[k].score_from);
        jw_kint(&w, "scored", window_count[k]);
        jw_knum(&w, "nll_sum", window_nll[k]);
        jw_knum(&w, "ppl", exp(window_nll[k] / window_count[k]));
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    if (r->ref) {
        const long long n = r->count;
        double mean = 0;
        for (long long i = 0; i < n; i++) mean += kl_sorted[i];
        jw_key(&w, "kld");
        jw_obj(&w);
        jw_kstr(&w, "reference", set->kld_path);
        jw_kint(&w, "reference_top_k", refh->top_k);
        jw_knum(&w, "mean", mean / n);
        jw_knum(&w, "median", percentile(kl_sorted, n, 0.5));
        jw_knum(&w, "p90", percentile(kl_sorted, n, 0.9));
        jw_knum(&w, "p99", percentile(kl_sorted, n, 0.99));
        jw_knum(&w, "max", kl_sorted[n - 1]);
        jw_knum(&w, "top1_agreement", (double)r->same_top / n);
        jw_knum(&w, "reference_ppl", exp(r->ref_nll / n));
        jw_knum(&w, "ppl_ratio", exp(r->dnll / n));
        jw_obj_end(&w);
    }
    jw_obj_end(&w);
    size_t len;
    const char *text = jw_text(&w, &len);
    if (!text) die("PPL_JSON: out of memory");
    AtomicFile af;
    char err[4400];
    FILE *f = atomic_begin(&af, set->ppl_json, err, sizeof err);
    if (!f) die("PPL_JSON=%s: %s", set->ppl_json, err);
    if (fwrite(text, 1, len, f) != len || fputc('\n', f) == EOF) {
        atomic_abort(&af);
        die("PPL_JSON=%s: writing failed", set->ppl_json);
    }
    if (atomic_commit(&af, err, sizeof err)) die("PPL_JSON=%s: %s", set->ppl_json, err);
    jw_free(&w);
}

static int run_ppl(const Settings *set) {
    if (set->score_json[0]) die("SCORE_JSON is SCORE's: PPL writes PPL_JSON");
    if (set->logits_save[0] && set->kld_path[0] && !strcmp(set->logits_save, set->kld_path))
        die("LOGITS_SAVE and KLD name the same file %s: the reference would be overwritten",
            set->kld_path);
    TextCodec tc = codec_load(set->model_dir, set->special);
    size_t len;
    char *text = quality_read_text("PPL", set->ppl_path, &len);
    TokenList toks = { 0 };
    tokens_push_text(&toks, &tc, text, len);
    free(text);
    int bos_id = -1;
    if (set->bos) {
        bos_id = config_bos_id(set->model_dir);
        if (bos_id < 0)
            die("BOS=1: %s/config.json (and generation_config.json) has no bos_token_id",
                set->model_dir);
    }
    const int ctx = set->ctx ? set->ctx : 512;
    PplPlan plan;
    char err[4400];
    if (ppl_plan(&plan, toks.n, ctx, set->ppl_stride, set->bos, err, sizeof err))
        die("PPL=%s: %s", set->ppl_path, err);
    /* KLD: the reference is checked whole before the model loads */
    SessionSource ref = { .fd = -1 };
    LogitsHeader refh = { 0 };
    int *ref_tokens = NULL;
    if (set->kld_path[0]) {
        if (session_source_open(&ref, set->kld_path, err, sizeof err) ||
            lf_check(&ref, &refh, &ref_tokens, err, sizeof err))
            die("KLD=%s %s", set->kld_path, err);
    }
    Config config = config_load(set->model_dir);
    codec_check_vocab(&tc, config.vocab);
    if (bos_id >= config.vocab)
        die("BOS=1: bos_token_id %d is outside the vocabulary (%d)", bos_id, config.vocab);
    config_free(&config);
    Model model;
    model_load(&model, set, ctx);
    RunState state;
    ForwardOptions opt = engine_start(set, &model, &state, ctx);
    const int V = model.c.vocab;
    const SessionKey key = session_key(&model, set, &opt);
    LogitsHeader runh = { .vocab = (uint32_t)V,
                          .top_k = (uint32_t)set->logits_top,
                          .n_tokens = (uint64_t)toks.n,
                          .n_positions = (uint64_t)plan.scored,
                          .model_config = key.config,
                          .model_weights = key.weights,
                          .tokens_hash = tokens_hash(toks.ids, toks.n),
                          .ctx = (uint32_t)ctx,
                          .stride = (uint32_t)plan.stride,
                          .bos_id = bos_id,
                          .expert_bits = (uint32_t)set->expert_bits,
                          .dense_bits = (uint32_t)set->dense_bits,
                          .group = (uint32_t)set->group,
                          .idot = (uint32_t)set->idot };
    snprintf(runh.model, sizeof runh.model, "%s", set->model_dir);
    snprintf(runh.text, sizeof runh.text, "%s", set->ppl_path);
    if (set->kld_path[0] && lf_match(&refh, ref_tokens, &runh, toks.ids, err, sizeof err))
        die("KLD=%s %s", set->kld_path, err);
    if (set->logits_top >= V)
        die("LOGITS_TOP=%d: the vocabulary has %d ids; LOGITS_TOP=0 saves full rows",
            set->logits_top, V);

    PplRun r = { .set = set, .plan = &plan, .V = V };
    r.mark = xcalloc((size_t)V, 1);
    AtomicFile af;
    if (set->logits_save[0]) {
        r.save = atomic_begin(&af, set->logits_save, err, sizeof err);
        if (!r.save) die("LOGITS_SAVE=%s: %s", set->logits_save, err);
        r.save_top = set->logits_top;
        r.top_ids = xmalloc((size_t)(r.save_top ? r.save_top : 1) * sizeof(uint32_t));
        r.top_vals = xmalloc((size_t)(r.save_top ? r.save_top : 1) * sizeof(float));
        r.save_buf = xmalloc((size_t)(r.save_top ? 8 * r.save_top : 4 * V));
        hash64_init(&r.save_hash);
        unsigned char hb[LF_HEADER_BYTES];
        lf_header_bytes(&runh, hb);
        ppl_save_bytes(&r, hb, sizeof hb);
        for (int i = 0; i < toks.n; i++) {
            unsigned char b[4];
            put_u32(b, (uint32_t)toks.ids[i]);
            ppl_save_bytes(&r, b, 4);
        }
    }
    if (set->kld_path[0]) {
        r.ref = &ref;
        r.ref_header = &refh;
        lf_record_alloc(&refh, &r.ref_record);
        r.kl = xmalloc((size_t)plan.scored * sizeof(double));
    }
    fprintf(stderr,
            "glm: PPL: %s: %d tokens, %d window%s of %d (stride %d%s), %lld tokens scored\n",
            set->ppl_path, toks.n, plan.n, plan.n == 1 ? "" : "s", ctx, plan.stride,
            bos_id >= 0 ? ", BOS first" : "", plan.scored);
    Generator *g = generator_create(&model, &state, &opt, (SamplerSettings){ 0.0f, 1.0f, 1 });
    g->on_logits = ppl_chunk;
    g->on_logits_user = &r;
    int *seq = xmalloc((size_t)ctx * sizeof(int));
    int *window_count = xmalloc((size_t)plan.n * sizeof(int));
    double *window_nll = xmalloc((size_t)plan.n * sizeof(double));
    const int progress_tty = isatty(STDERR_FILENO);
    const double t0 = now_seconds();
    double last_note = t0;
    for (int k = 0; k < plan.n; k++) {
        const PplWindow *w = &plan.w[k];
        int n = 0;
        if (bos_id >= 0) seq[n++] = bos_id;
        memcpy(seq + n, toks.ids + w->start, (size_t)w->len * sizeof(int));
        n += w->len;
        r.seq = seq;
        r.seq_len = n;
        r.first_scored = w->score_from - w->start + (bos_id >= 0);
        r.window_nll = 0;
        const long long before = r.count;
        generator_rollback(g, 0);
        if (generator_prefill(g, seq, n) != n) die("internal: PPL window %d was not prefilled", k);
        window_count[k] = (int)(r.count - before);
        window_nll[k] = r.window_nll;
        const double now = now_seconds();
        if (progress_tty || now - last_note >= 2.0 || k + 1 == plan.n) {
            fprintf(stderr,
                    "%sglm: PPL window %d/%d: %lld tokens scored, PPL so far %.4f (%.1f tok/s)%s",
                    progress_tty ? "\r" : "", k + 1, plan.n, r.count, exp(r.nll / r.count),
                    r.count / (now - t0 > 0 ? now - t0 : 1e-9),
                    progress_tty && k + 1 < plan.n ? "" : "\n");
            last_note = now;
        }
    }
    const double seconds = now_seconds() - t0;
    if (r.count != plan.scored)
        die("internal: %lld positions scored, the plan has %lld", r.count, plan.scored);
    if (r.save) {
        unsigned char t[8];
        put_u64(t, hash64_final(&r.save_hash));
        if (!r.save_failed && fwrite(t, 1, 8, r.save) != 8) r.save_failed = 1;
        if (r.save_failed) {
            atomic_abort(&af);
            die("LOGITS_SAVE=%s: writing failed: %s", set->logits_save, strerror(errno));
        }
        if (atomic_commit(&af, err, sizeof err)) die("LOGITS_SAVE=%s: %s", set->logits_save, err);
        fprintf(stderr, "glm: LOGITS_SAVE: %s: %lld positions, %s, %llu bytes each\n",
                set->logits_save, r.count,
                r.save_top ? "top logits and the rest's mass" : "full rows",
                (unsigned long long)lf_record_bytes(&runh));
    }
    const double mean = r.nll / r.count, ppl = exp(mean),
                 ppl_err = ppl * std_error(r.nll, r.nll2, r.count);
    printf("PPL: %.10g +/- %.6g over %lld tokens (%d window%s of %d tokens, stride %d%s)\n", ppl,
           ppl_err, r.count, plan.n, plan.n == 1 ? "" : "s", ctx, plan.stride,
           bos_id >= 0 ? ", BOS" : "");
    if (r.ref) {
        const long long n = r.count;
        double kl_sum = 0, kl_sum2 = 0;
        for (long long i = 0; i < n; i++) { kl_sum += r.kl[i]; kl_sum2 += r.kl[i] * r.kl[i]; }
        qsort(r.kl, (size_t)n, sizeof(double), double_cmp);
        const double agree = (double)r.same_top / n;
        printf("KLD: mean %.6g +/- %.3g | median %.6g | p90 %.6g | p99 %.6g | max %.6g (%lld "
               "positions, reference %s)\n",
               kl_sum / n, std_error(kl_sum, kl_sum2, n), percentile(r.kl, n, 0.5),
               percentile(r.kl, n, 0.9), percentile(r.kl, n, 0.99), r.kl[n - 1], n,
               refh.top_k ? "top-k + rest" : "full rows");
        printf("top-1 agreement: %.4f%% +/- %.3g%%\n", 100.0 * agree,
               100.0 * sqrt(agree * (1 - agree) / (n > 1 ? n - 1 : 1)));
        printf("PPL ratio: %.8g (ln %.6g +/- %.3g) against the reference's PPL %.10g (%s, bits "
               "%u/%u, GROUP %u)\n",
               exp(r.dnll / n), r.dnll / n, std_error(r.dnll, r.dnll2, n), exp(r.ref_nll / n),
               refh.model, refh.expert_bits, refh.dense_bits, refh.group);
    }
    if (set->ppl_json[0])
        ppl_write_json(set, &plan, window_count, window_nll, toks.n, &r, ppl, ppl_err, r.kl, &refh);
    fprintf(stderr, "glm: PPL: %lld tokens scored in %.2f s (%.1f tok/s) | peak RSS %.2f GB\n",
            r.count, seconds, r.count / (seconds > 0 ? seconds : 1e-9), peak_rss_gb());
    print_expert_stats(&model.experts, seconds);
    generator_free(g);
    engine_stop(set, &model, &state);
    session_source_close(&ref);
    lf_record_free(&r.ref_record);
    free(r.kl); free(r.mark); free(r.top_ids); free(r.top_vals); free(r.save_buf);
    free(seq); free(window_count); free(window_nll); free(ref_tokens); free(plan.w); free(toks.ids);
    codec_free(&tc);
    return 0;
}

/* ---- SCORE mode ------------------------------------------------------------------------------ */

typedef struct {
    int line;                       /* 1-based line of the file */
    int label;                      /* the right choice's index */
    TokenList ctx;
    int n_choices;
    TokenList *choice;              /* [n_choices] */
    size_t *choice_bytes;           /* [n_choices] bytes of each choice's text */
} ScoreItem;

/* The answer field as a choice index: an integer, a label of ARC's choices.label, a letter A-Z or
   a digit string. -1 when it names no choice. */
static int score_answer(const JsonValue *ans, const JsonValue *labels, int n) {
    int64_t i;
    if (json_is_int(ans, &i)) return i >= 0 && i < n ? (int)i : -1;
    size_t len;
    const char *s = json_str(ans, &len);
    if (!s || !len) return -1;
    for (int k = 0; k < n && labels; k++) {
        size_t ll;
        const char *l = json_str(json_at(labels, (size_t)k), &ll);
        if (l && ll == len && !memcmp(l, s, len)) return k;
    }
    if (len == 1 && s[0] >= 'A' && s[0] <= 'Z') return s[0] - 'A' < n ? s[0] - 'A' : -1;
    char *end;
    long v = strtol(s, &end, 10);
    return end != s && !*end && v >= 0 && v < n ? (int)v : -1;
}

/* One JSONL line → item: 0, or -1 with err (the caller names file and line). */
static int score_parse_item(const TextCodec *tc, const char *text, size_t len, ScoreItem *it,
                            char *err, size_t err_len) {
    char jerr[256];
    JsonDoc *doc = json_parse(text, len, jerr, sizeof jerr);
    if (!doc) { snprintf(err, err_len, "%s", jerr); return -1; }
    const JsonValue *root = json_root(doc), *choices = NULL, *labels = NULL, *ans = NULL;
    int rc = -1;
    size_t n_ctx = 0;
    const char *ctx = NULL;
    int cloze = 0;   /* ctx of HellaSwag as it is; a question becomes "Question: ...\nAnswer:" */
    if (json_type(root) != JSON_OBJECT) {
        snprintf(err, err_len, "is not a JSON object");
        goto done;
    }
    if ((ctx = json_str(json_get(root, "ctx"), &n_ctx))) {
        choices = json_get(root, "endings");
        ans = json_get(root, "label");
        if (!choices) { snprintf(err, err_len, "has \"ctx\" but no \"endings\""); goto done; }
        cloze = 1;
    } else if ((ctx = json_str(json_get(root, "question"), &n_ctx))) {
        choices = json_get(root, "choices");
        ans = json_get(root, "answerKey") ? json_get(root, "answerKey") : json_get(root, "answer");
        if (!choices) { snprintf(err, err_len, "has \"question\" but no \"choices\""); goto done; }
    } else {
        snprintf(err, err_len,
                 "has neither \"ctx\" (HellaSwag) nor \"question\" (ARC, MMLU) as a string");
        goto done;
    }
    if (json_type(choices) == JSON_OBJECT) {   /* ARC: {"text": [...], "label": [...]} */
        labels = json_get(choices, "label");
        choices = json_get(choices, "text");
        if (labels && (json_type(labels) != JSON_ARRAY || json_len(labels) != json_len(choices))) {
            snprintf(err, err_len, "has choices.label that is not a list as long as choices.text");
            goto done;
        }
    }
    if (json_type(choices) != JSON_ARRAY || json_len(choices) < 2 || json_len(choices) > 64) {
        snprintf(err, err_len,
                 "needs 2 to 64 choices as a list of strings (or ARC's {\"text\": [...], "
                 "\"label\": [...]})");
        goto done;
    }
    const int n = (int)json_len(choices);
    if (!ans) {
        snprintf(err, err_len, "has no answer (\"label\", \"answerKey\" or \"answer\")");
        goto done;
    }
    it->label = score_answer(ans, labels, n);
    if (it->label < 0) {
        snprintf(err, err_len, "has an answer that names none of its %d choices", n);
        goto done;
    }
    if (!n_ctx) { snprintf(err, err_len, "has an empty context"); goto done; }
    if (cloze) tokens_push_text(&it->ctx, tc, ctx, n_ctx);
    else {
        char *q = xmalloc(n_ctx + 32);
        int qn = snprintf(q, n_ctx + 32, "Question: ");
        memcpy(q + qn, ctx, n_ctx);
        qn += (int)n_ctx;
        qn += snprintf(q + qn, 32, "\nAnswer:");
        tokens_push_text(&it->ctx, tc, q, (size_t)qn);
        free(q);
    }
    it->choice = xcalloc((size_t)n, sizeof *it->choice);
    it->choice_bytes = xcalloc((size_t)n, sizeof *it->choice_bytes);
    it->n_choices = n;
    for (int k = 0; k < n; k++) {
        size_t cl;
        const char *c = json_str(json_at(choices, (size_t)k), &cl);
        if (!c || !cl) {
            snprintf(err, err_len, "has choice %d that is not a non-empty string", k);
            goto done;
        }
        char *s = xmalloc(cl + 2);
        s[0] = ' ';
        memcpy(s + 1, c, cl);
        tokens_push_text(&it->choice[k], tc, s, cl + 1);
        it->choice_bytes[k] = cl + 1;
        free(s);
        if (!it->choice[k].n) {
            snprintf(err, err_len, "has choice %d without tokens", k);
            goto done;
        }
    }
    if (!it->ctx.n) { snprintf(err, err_len, "has a context without tokens"); goto done; }
    rc = 0;
done:
    json_free(doc);
    return rc;
}

static void score_item_free(ScoreItem *it) {
    free(it->ctx.ids);
    for (int k = 0; k < it->n_choices; k++) free(it->choice[k].ids);
    free(it->choice);
    free(it->choice_bytes);
    memset(it, 0, sizeof *it);
}

/* The logits sink of a choice's prefill: row j (position pos0 + j) predicts choice token
   pos0 + j + 1 - ctx_len. */
typedef struct {
    const int *choice;
    int n, ctx_len, V;
    double loglik;
    int greedy;                     /* every token was its row's argmax */
} ChoiceRun;

static void score_row(ChoiceRun *c, const float *l, int target) {
    c->loglik += (double)l[target] - row_logz(l, c->V);
    c->greedy &= argmax(l, c->V) == target;
}

static void score_chunk(void *user, int pos0, int S, const float *logits, const float *hidden) {
    (void)hidden;
    ChoiceRun *c = user;
    for (int j = 0; j < S; j++) {
        const int t = pos0 + j + 1 - c->ctx_len;
        if (t >= 1 && t < c->n) score_row(c, logits + (size_t)j * c->V, c->choice[t]);
    }
}

static void jw_ids(JsonWriter *w, const char *key, const TokenList *l) {
    jw_key(w, key);
    jw_arr(w);
    for (int i = 0; i < l->n; i++) jw_int(w, l->ids[i]);
    jw_arr_end(w);
}

/* The 95 % Wilson score interval of an accuracy of `right` out of n: sound at 0 % and 100 % and
   for few questions, where the normal approximation's ± collapses to nothing. */
static void accuracy_ci(int right, int n, double *lo, double *hi) {
    const double z = 1.959963984540054, p = (double)right / n, z2n = z * z / n;
    const double mid = (p + z2n / 2) / (1 + z2n),
                 half = z * sqrt(p * (1 - p) / n + z2n / (4.0 * n)) / (1 + z2n);
    *lo = mid - half > 0 ? mid - half : 0;
    *hi = mid + half < 1 ? mid + half : 1;
}

static void jw_accuracy(JsonWriter *w, const char *key, int right, int n) {
    double lo, hi;
    accuracy_ci(right, n, &lo, &hi);
    jw_key(w, key);
    jw_obj(w);
    jw_kint(w, "right", right);
    jw_knum(w, "accuracy", (double)right / n);
    jw_knum(w, "ci95_low", lo);
    jw_knum(w, "ci95_high", hi);
    jw_obj_end(w);
}

static int run_score(const Settings *set) {
    if (set->ppl_json[0] || set->logits_save[0] || set->kld_path[0])
        die("%s is PPL's: SCORE writes SCORE_JSON", set->ppl_json[0]      ? "PPL_JSON"
                                                    : set->logits_save[0] ? "LOGITS_SAVE"
                                                                          : "KLD");
    TextCodec tc = codec_load(set->model_dir, set->special);
    size_t len;
    char *text = quality_read_text("SCORE", set->score_path, &len);
    ScoreItem *items = NULL;
    int n_items = 0, cap = 0, need = 0;
    long long all_choices = 0;
    char err[4400];
    int line = 0;
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        const size_t end = nl ? (size_t)(nl - text) : len;
        line++;
        size_t a = at, b = end;
        while (a < b && strchr(" \t\r", text[a])) a++;
        while (b > a && strchr(" \t\r", text[b - 1])) b--;
        if (b > a) {
            if (n_items == cap) {
                cap = cap ? 2 * cap : 64;
                ScoreItem *grown = realloc(items, (size_t)cap * sizeof *items);
                if (!grown) die("out of memory for %d SCORE items", cap);
                items = grown;
            }
            ScoreItem *it = &items[n_items];
            memset(it, 0, sizeof *it);
            it->line = line;
            if (score_parse_item(&tc, text + a, b - a, it, err, sizeof err))
                die("SCORE=%s: line %d %s", set->score_path, line, err);
            for (int k = 0; k < it->n_choices; k++)
                if (it->ctx.n + it->choice[k].n - 1 > need) need = it->ctx.n + it->choice[k].n - 1;
            all_choices += it->n_choices;
            n_items++;
        }
        at = end + 1;
    }
    free(text);
    if (!n_items) die("SCORE=%s has no question (one JSON object per line)", set->score_path);
    if (set->ctx && need > set->ctx) {
        for (int i = 0; i < n_items; i++)
            for (int k = 0; k < items[i].n_choices; k++)
                if (items[i].ctx.n + items[i].choice[k].n - 1 > set->ctx)
                    die("SCORE=%s: line %d needs %d tokens of context (%d + choice %d's %d - 1) "
                        "and CTX=%d",
                        set->score_path, items[i].line, items[i].ctx.n + items[i].choice[k].n - 1,
                        items[i].ctx.n, k, items[i].choice[k].n, set->ctx);
    }
    Config config = config_load(set->model_dir);
    codec_check_vocab(&tc, config.vocab);
    config_free(&config);
    const int capacity = set->ctx ? set->ctx : need;
    Model model;
    model_load(&model, set, capacity);
    RunState state;
    ForwardOptions opt = engine_start(set, &model, &state, capacity);
    const int V = model.c.vocab;
    Generator *g = generator_create(&model, &state, &opt, (SamplerSettings){ 0.0f, 1.0f, 1 });
    float *ctx_logits = xmalloc((size_t)V * sizeof(float));
    const int to_stdout = !strcmp(set->score_json, "-");
    JsonWriter w;
    jw_init(&w);
    jw_obj(&w);
    jw_kstr(&w, "model", set->model_dir);
    jw_kstr(&w, "file", set->score_path);
    jw_kint(&w, "expert_bits", set->expert_bits);
    jw_kint(&w, "dense_bits", set->dense_bits);
    jw_kint(&w, "group", set->group);
    jw_key(&w, "items");
    jw_arr(&w);
    long long ctx_total = 0, ctx_prefilled = 0, ctx_reused = 0, choice_tokens = 0;
    int right = 0, right_norm = 0;
    const int progress_tty = isatty(STDERR_FILENO);
    const double t0 = now_seconds();
    double last_note = t0;
    for (int i = 0; i < n_items; i++) {
        const ScoreItem *it = &items[i];
        const int n = it->ctx.n;
        g->on_logits = NULL;   /* the context's last row is all it needs */
        int reused = 0;
        if (generator_reuse_prefix(g, it->ctx.ids, n, &reused) != n)
            die("internal: SCORE line %d: the context was not prefilled", it->line);
        ctx_total += n;
        ctx_reused += reused;
        ctx_prefilled += n - reused;
        memcpy(ctx_logits, g->logits, (size_t)V * sizeof(float));
        const double ctx_logz = row_logz(ctx_logits, V);
        int best = 0, best_norm = 0;
        double best_ll = -INFINITY, best_pb = -INFINITY;
        jw_obj(&w);
        jw_kint(&w, "line", it->line);
        jw_kint(&w, "label", it->label);
        jw_ids(&w, "context_ids", &it->ctx);
        jw_key(&w, "choices");
        jw_arr(&w);
        for (int k = 0; k < it->n_choices; k++) {
            const TokenList *c = &it->choice[k];
            ChoiceRun cr = { c->ids,
                             c->n,
                             n,
                             V,
                             (double)ctx_logits[c->ids[0]] - ctx_logz,
                             argmax(ctx_logits, V) == c->ids[0] };
            if (c->n > 1) {   /* the last token's logits would predict nothing: it does not run */
                generator_rollback(g, n);
                g->on_logits = score_chunk;
                g->on_logits_user = &cr;
                if (generator_prefill(g, c->ids, c->n - 1) != c->n - 1)
                    die("internal: SCORE line %d: choice %d was not prefilled", it->line, k);
                g->on_logits = NULL;
                choice_tokens += c->n - 1;
            }
            const double per_byte = cr.loglik / (double)it->choice_bytes[k];
            if (cr.loglik > best_ll) { best_ll = cr.loglik; best = k; }
            if (per_byte > best_pb) { best_pb = per_byte; best_norm = k; }
            jw_obj(&w);
            jw_ids(&w, "ids", c);
            jw_knum(&w, "loglik", cr.loglik);
            jw_kint(&w, "bytes", (int64_t)it->choice_bytes[k]);
            jw_knum(&w, "loglik_per_byte", per_byte);
            jw_kbool(&w, "greedy", cr.greedy);
            jw_obj_end(&w);
        }
        jw_arr_end(&w);
        jw_kint(&w, "pred", best);
        jw_kint(&w, "pred_norm", best_norm);
        jw_obj_end(&w);
        right += best == it->label;
        right_norm += best_norm == it->label;
        const double now = now_seconds();
        if (progress_tty || now - last_note >= 2.0 || i + 1 == n_items) {
            fprintf(stderr, "%sglm: SCORE %d/%d: accuracy %.1f%% (per byte %.1f%%)%s",
                    progress_tty ? "\r" : "", i + 1, n_items, 100.0 * right / (i + 1),
                    100.0 * right_norm / (i + 1), progress_tty && i + 1 < n_items ? "" : "\n");
            last_note = now;
        }
    }
    jw_arr_end(&w);
    const double seconds = now_seconds() - t0;
    jw_kint(&w, "n", n_items);
    jw_accuracy(&w, "by_sum", right, n_items);
    jw_accuracy(&w, "by_byte", right_norm, n_items);
    jw_kint(&w, "context_tokens", ctx_total);
    jw_kint(&w, "context_tokens_prefilled", ctx_prefilled);
    jw_kint(&w, "context_tokens_reused", ctx_reused);
    jw_kint(&w, "choices", all_choices);
    jw_kint(&w, "choice_tokens_run", choice_tokens);
    jw_obj_end(&w);
    size_t jlen;
    const char *json = jw_text(&w, &jlen);
    if (!json) die("SCORE_JSON: out of memory");
    FILE *summary = to_stdout ? stderr : stdout;
    double lo, hi, lo_n, hi_n;
    accuracy_ci(right, n_items, &lo, &hi);
    accuracy_ci(right_norm, n_items, &lo_n, &hi_n);
    fprintf(summary,
            "SCORE: accuracy %.2f%% (95%% CI %.1f-%.1f%%) by log-likelihood, %.2f%% (95%% CI "
            "%.1f-%.1f%%) by "
            "log-likelihood per byte; %d/%d and %d/%d questions\n",
            100.0 * right / n_items, 100 * lo, 100 * hi, 100.0 * right_norm / n_items, 100 * lo_n,
            100 * hi_n, right, n_items, right_norm, n_items);
    if (to_stdout) { fwrite(json, 1, jlen, stdout); fputc('\n', stdout); }
    else if (set->score_json[0]) {
        AtomicFile af;
        FILE *f = atomic_begin(&af, set->score_json, err, sizeof err);
        if (!f) die("SCORE_JSON=%s: %s", set->score_json, err);
        if (fwrite(json, 1, jlen, f) != jlen || fputc('\n', f) == EOF) {
            atomic_abort(&af);
            die("SCORE_JSON=%s: writing failed", set->score_json);
        }
        if (atomic_commit(&af, err, sizeof err)) die("SCORE_JSON=%s: %s", set->score_json, err);
    }
    fprintf(stderr,
            "glm: SCORE: prefilled %lld context tokens once for %lld choices; reused %lld "
            "(prefixes shared with the previous "
            "context) | choices ran %lld tokens | %.2f s | peak RSS %.2f GB\n",
            ctx_prefilled, all_choices, ctx_reused, choice_tokens, seconds, peak_rss_gb());
    print_expert_stats(&model.experts, seconds);
    jw_free(&w);
    free(ctx_logits);
    generator_free(g);
    engine_stop(set, &model, &state);
    for (int i = 0; i < n_items; i++) score_item_free(&items[i]);
    free(items);
    codec_free(&tc);
    return 0;
}

/* PPL=file or SCORE=file (cli_settings chose MODE_QUALITY). */
static int run_quality(const Settings *set) {
    if (set->ppl_path[0] && set->score_path[0]) die("PPL and SCORE are different modes: set one");
    return set->ppl_path[0] ? run_ppl(set) : run_score(set);
}

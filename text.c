/* =============================================================================================
   text.c — the text front end: tokenizer glue, chat template, prompt mode, terminal chat Everything
   a person reads or types. Text becomes ids through tok.h (SNAP/tokenizer.json). Conversations are
   chat.h's: it reads MESSAGES (messages, tool calls, tool results, the tools list) and renders the
   chat template of the model's version into pieces, template tags and text. chat_to_ids turns the
   pieces into ids: a tag by its id, text encoded as text, so a message cannot smuggle in a tag
   unless SPECIAL=1 (the ids equal HF's tokenization of the rendered string whenever the contents
   hold no tag). The form is GLM-5.2's (docs/tokenizer.md §3.6) unless CHAT_FORMAT or the template
   text shipped in SNAP says GLM-5.0/5.1 (§3.4); glm says which on stderr. Replies come from the
   Generator (glm.c), which samples exactly over the whole vocabulary and stops at an EOS id of
   generation_config.json / config.json (not printed), at NGEN, when the KV cache is full, or at
   Ctrl-C; here they are streamed as text that never splits a UTF-8 character.

   Chat history lives in the KV cache: the first turn prefills the rendered opening (SYSTEM,
   MESSAGES, the user line, the generation prompt); a later turn renders only its user message
   and generation prompt as a continuation (<|user|>text<|assistant|><think>) after what is
   already there, and a reply stays in the cache exactly as it was generated, reasoning included.
   So the cache holds the conversation rendered with reasoning kept (chat.h's keep_reasoning=1,
   the template's clear_thinking=false: GLM-5.1's "preserved thinking"), the opening included;
   the templates' default would drop earlier reasoning, which means rewriting the cache and
   prefilling the last answer again on every turn. With GLM-5.2 and thinking on, the cache starts
   [gMASK]<sop><|system|>Reasoning Effort: Max. The stop token that ended a reply (usually
   <|user|>) is not in the cache; the next turn writes <|user|> itself, so the cache holds a valid
   rendering (the template would also strip() whitespace around an answer; the cache keeps the
   model's). Limits: :think switches only the generation prompt of later turns (the GLM-5.2 effort
   line is written, or not, by the first turn; :reset renders a new opening); a reply cut by NGEN or
   Ctrl-C is in the cache up to its last printed token (:more goes on from there); a tool call the
   model ends with <|observation|> is followed by the next user turn, as there is no tool to run.
   :reset empties the cache (and reseeds the sampler, so a conversation can be replayed).
   ============================================================================================= */

/* ---- tokenizer glue -------------------------------------------------------------------------- */

typedef struct {
    Tokenizer *tok;
    char path[4096];                /* SNAP/tokenizer.json, for messages */
    /* how message text is encoded: SPECIAL=1 recognises every added token */
    TokSpecialMode text_mode;
    /* the id of each chat template tag (chat.h's ChatTag); -1 when missing */
    int tag[CHAT_TAG_COUNT];
} TextCodec;

static TextCodec codec_load(const char *model_dir, int special) {
    TextCodec tc;
    memset(&tc, 0, sizeof tc);
    snprintf(tc.path, sizeof tc.path, "%s/tokenizer.json", model_dir);
    char err[1024];
    tc.tok = tok_load(tc.path, err, sizeof err);
    if (!tc.tok) die("cannot load the tokenizer (text modes need tokenizer.json in SNAP): %s", err);
    tc.text_mode = special ? TOK_SPECIAL_ALL : TOK_SPECIAL_NONE;
    for (int t = 0; t < CHAT_TAG_COUNT; t++) tc.tag[t] = tok_id(tc.tok, chat_tag_text(t));
    return tc;
}

/* The tokenizer must belong to the model: every id it produces needs a row of the embedding, and
   it must cover nearly every row. Checkpoints pad vocab_size above the tokenizer's ids (GLM-5:
   154,880 rows for ~154,856 ids; DeepSeek-V3 ~465 spare rows), so up to VOCAB_PADDING_MAX rows
   without a token are accepted; a tokenizer covering less is another model's (the 512-id test
   tokenizer on a 154,880-row model printed nothing for 8 tokens). Ids without text that are
   generated anyway are shown as <|id N|> (dialog_show_token). */
#define VOCAB_PADDING_MAX 1024

static void codec_check_vocab(const TextCodec *tc, int vocab) {
    const int n = tok_vocab_size(tc->tok);
    if (n > vocab)
        die("%s has ids up to %d but the model's vocab_size is %d: tokenizer and model do not "
            "match",
            tc->path, n - 1, vocab);
    if (n < vocab - VOCAB_PADDING_MAX)
        die("%s has ids up to %d but the model's vocab_size is %d (at most %d rows may be "
            "padding): tokenizer and model do not match",
            tc->path, n - 1, vocab, VOCAB_PADDING_MAX);
}

static void codec_free(TextCodec *tc) {
    tok_free(tc->tok);
    tc->tok = NULL;
}

static void tokens_push_text(TokenList *l, const TextCodec *tc, const char *text, size_t len) {
    int32_t *ids;
    size_t n;
    if (tok_encode(tc->tok, text, len, tc->text_mode, &ids, &n))
        die("out of memory while tokenizing %zu bytes", len);
    for (size_t i = 0; i < n; i++) tokens_push(l, ids[i]);
    free(ids);
}

/* ---- conversations as ids (chat.h) ----------------------------------------------------------- */

/* Appends the ids of `conv` rendered with `o`: each tag by its id, each run of text encoded in the
   codec's text mode. 0, or -1 with err naming the tokenizer and the tag it lacks (then nothing is
   appended). Dies only when out of memory. */
static int chat_to_ids(const TextCodec *tc, const ChatConv *conv, const ChatOptions *o,
                       TokenList *out, char *err, size_t err_len) {
    ChatPieces p = { 0 };
    if (chat_render(conv, o, &p)) die("out of memory rendering the chat template");
    for (size_t i = 0; i < p.n; i++)
        if (p.v[i].tag >= 0 && tc->tag[p.v[i].tag] < 0) {
            snprintf(err, err_len, "%s has no %s token, so the %s chat template cannot be rendered",
                     tc->path, chat_tag_text(p.v[i].tag), chat_format_name(o->format));
            chat_pieces_free(&p);
            return -1;
        }
    for (size_t i = 0; i < p.n; i++) {
        if (p.v[i].tag >= 0) tokens_push(out, tc->tag[p.v[i].tag]);
        else tokens_push_text(out, tc, p.text + p.v[i].off, p.v[i].len);
    }
    chat_pieces_free(&p);
    return 0;
}

/* The rendering every conversation of this run shares: the form (CHAT_FORMAT; auto reads SNAP's
   template text), THINK and REASONING_EFFORT. Says on stderr which form and why. */
static ChatOptions chat_options_from_settings(const Settings *set) {
    ChatFormat format;
    char msg[5000];
    if (chat_model_format(set->model_dir, set->chat_format, &format, msg, sizeof msg))
        die("%s", msg);
    say_detail("%s", msg);
    ChatOptions o = chat_options(format);
    o.thinking = set->think;
    o.reasoning_effort = set->reasoning_effort;
    return o;
}

/* The opening of a conversation, appended to c: SYSTEM, then MESSAGES (messages and tools), then
   user_text if not NULL. */
static void conversation_opening(const Settings *set, ChatConv *c, const char *user_text,
                                 size_t user_len) {
    char err[5000];
    if (set->system_prompt[0] &&
        chat_conv_add(c, CHAT_SYSTEM, set->system_prompt, strlen(set->system_prompt)))
        die("out of memory");
    if (set->messages_path[0] && chat_conv_load(c, set->messages_path, err, sizeof err))
        die("MESSAGES: %s", err);
    if (user_text && chat_conv_add(c, CHAT_USER, user_text, user_len)) die("out of memory");
}

/* The ids of PROMPT mode (and of TEMPLATE_ONLY): the conversation's opening rendered with `o`
   and a generation prompt, or the raw text with CHAT_TEMPLATE=0 (o unused). */
static void build_prompt(const Settings *set, const TextCodec *tc, const ChatOptions *o,
                         TokenList *out) {
    if (!set->chat_template) {
        tokens_push_text(out, tc, set->prompt, strlen(set->prompt));
        return;
    }
    ChatConv conv;
    chat_conv_init(&conv);
    conversation_opening(set, &conv, set->prompt_given ? set->prompt : NULL, strlen(set->prompt));
    char err[5000];
    if (chat_to_ids(tc, &conv, o, out, err, sizeof err))
        die("%s (CHAT_TEMPLATE=0 sends raw text)", err);
    chat_conv_free(&conv);
}

/* ---- a conversation as text: the Generator's tokens on the terminal -------------------------- */

/* Ctrl-C: the handler only counts; the generator reads the count (handed to it as its interrupt
   flag) between tokens, prefill chunks and layers. A second Ctrl-C before it noticed the first
   leaves at once. */
static volatile sig_atomic_t g_interrupts;

static void on_sigint(int sig) {
    (void)sig;
    if (++g_interrupts >= 2) {
        lined_terminal_restore();   /* tcsetattr and write are async-signal-safe */
        if (write(STDERR_FILENO, "\nglm: interrupted\n", 18) < 0) { /* nothing more to do */ }
        _exit(130);
    }
}

static void install_sigint_handler(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;   /* no SA_RESTART: a Ctrl-C at a plain (non-terminal) read ends the read */
    sigaction(SIGINT, &sa, NULL);
}

#define ANSI_DIM "\033[2m"
#define ANSI_RESET "\033[0m"

typedef struct {
    int prompt_tokens, generated, forwards;
    int reused;                    /* prompt tokens restored from the prefix cache (KV_CACHE) */
    double prefill_seconds, decode_seconds;
    long long hits0, misses0;      /* expert counters at the start of the turn */
    double bytes0, read_seconds0, wait_seconds0;
    long long in_place0;
    SpecCounts spec0;              /* speculation counters at the start of the turn */
    StopReason stop;
} TurnStats;

typedef struct {
    Generator *gen;
    const TextCodec *codec;
    ChatOptions chat;              /* the template form and settings (CHAT_TEMPLATE=1) */
    int can_continue;              /* the last reply was cut (NGEN, Ctrl-C): :more may go on */
    int in_thinking;               /* the reply is between <think> and </think> */
    GrammarMatcher *constraint;    /* SCHEMA / GRAMMAR for PROMPT's answer (NULL: none) */
    const GrammarVocab *constraint_vocab;
    /* stdout is a terminal: dim the reasoning, show control bytes as ^X */
    int out_tty;
    TokStream stream;
    char *text;                    /* [text_cap] one token's text */
    size_t text_cap;
    /* totals for :stats */
    int replies;
    long long total_generated, total_forwards;
    double total_decode_seconds;
    /* the conversation on disk (SESSION, :save, :load) */
    /* thinking mode of the next turns (THINK, :think, a resumed session) */
    int think;
    const SessionKey *session_key; /* what a session file must match */
    const char *session_path;      /* SESSION, saved after every answer; NULL: none */
    /* tokens SESSION brought back, until the first turn says so; -1 */
    int resumed;
} Dialog;

static void dialog_show_token(void *user, int id);
static void dialog_note_resume(Dialog *d, int reused, int prefill);

/* The dialog prints what `gen` generates and hands it the Ctrl-C counter as its interrupt. */
static void dialog_init(Dialog *d, Generator *gen, const TextCodec *tc) {
    memset(d, 0, sizeof *d);
    d->resumed = -1;
    d->gen = gen;
    d->codec = tc;
    d->out_tty = isatty(STDOUT_FILENO);
    d->text_cap = tok_stream_out_cap(tc->tok);
    d->text = xmalloc(d->text_cap);
    tok_stream_init(&d->stream);
    gen->on_token = dialog_show_token;
    gen->on_token_user = d;
    gen->interrupt = &g_interrupts;
}

static void dialog_free(Dialog *d) {
    free(d->text);
    d->text = NULL;
}

/* Model text to stdout. On a terminal, control bytes (ESC, CR, BEL, C1 controls) are shown as
   ^X / U+FFFD instead of being obeyed: a model must not be able to drive the terminal. */
static void emit_text(const Dialog *d, const char *s, size_t n) {
    if (d->out_tty) put_terminal_safe(stdout, s, n, 0);
    else fwrite(s, 1, n, stdout);
}

static void dialog_show_token(void *user, int id) {
    Dialog *d = user;
    const TextCodec *tc = d->codec;
    /* a row without a token (vocab padding): shown, never dropped */
    if (!tok_piece(tc->tok, id, NULL)) {
        size_t n = tok_stream_flush(&d->stream, d->text, d->text_cap);
        emit_text(d, d->text, n < d->text_cap ? n : d->text_cap);
        char mark[32];
        emit_text(d, mark, (size_t)snprintf(mark, sizeof mark, "<|id %d|>", id));
        fflush(stdout);
        return;
    }
    const int think = tc->tag[CHAT_TAG_THINK], end_think = tc->tag[CHAT_TAG_END_THINK];
    if (id == think && d->out_tty && !d->in_thinking) fputs(ANSI_DIM, stdout);
    size_t n = tok_stream_feed(tc->tok, &d->stream, id, d->text, d->text_cap);
    emit_text(d, d->text, n < d->text_cap ? n : d->text_cap);
    if (id == think) d->in_thinking = 1;
    if (id == end_think) {
        if (d->out_tty && d->in_thinking) fputs(ANSI_RESET, stdout);
        d->in_thinking = 0;
    }
    fflush(stdout);
}

/* End of the reply as text: an incomplete UTF-8 tail becomes U+FFFD, as a whole decode would. */
static void dialog_flush_text(Dialog *d) {
    size_t n = tok_stream_flush(&d->stream, d->text, d->text_cap);
    emit_text(d, d->text, n < d->text_cap ? n : d->text_cap);
    fflush(stdout);
}

static void turn_begin(const Dialog *d, TurnStats *ts) {
    const ExpertStore *store = &d->gen->model->experts;
    memset(ts, 0, sizeof *ts);
    ts->hits0 = store->hits;
    ts->misses0 = store->misses;
    ts->bytes0 = store->bytes_read;
    ts->in_place0 = store->in_place_loads;
    ts->read_seconds0 = store->read_seconds;
    ts->wait_seconds0 = store->wait_seconds;
    ts->spec0 = spec_counts(d->gen);
}

/* Prefills `ids` at the end of the cache. Returns 0, or -1 when Ctrl-C stopped it (said on
   stderr): then the cache is as it was before. */
static int dialog_prefill(Dialog *d, const TokenList *ids, TurnStats *ts) {
    dialog_note_resume(d, d->gen->pos, ids->n);
    double t0 = now_seconds();
    int done = generator_prefill(d->gen, ids->ids, ids->n);
    ts->prefill_seconds = now_seconds() - t0;
    ts->reused = d->gen->restored;
    ts->prompt_tokens = ids->n - ts->reused;
    d->can_continue = 0;   /* the logits now belong to this turn */
    if (done == ids->n) return 0;
    fprintf(stderr, "glm: prefill interrupted after %d of %d tokens\n", done, ids->n);
    return -1;
}

/* Generates, prints and caches up to `limit` tokens (-1: no limit). resumable: also run the last
   token's forward when the limit is reached, so that :more can go on (prompt mode skips that). */
static void dialog_generate(Dialog *d, int limit, int resumable, TurnStats *ts) {
    Generator *g = d->gen;
    g->stop_rules.max_tokens = limit;
    g->stop_rules.resumable = resumable;
    generator_begin(g);
    const double t0 = now_seconds();
    const long long forwards0 = g->forwards;
    if (d->out_tty && d->in_thinking) fputs(ANSI_DIM, stdout);
    int run[SPEC_MAX_DRAFT + 1];   /* on_token prints each token; a step may return a run of them */
    while (generator_step(g, run, SPEC_MAX_DRAFT + 1) > 0) {}
    if (d->out_tty && d->in_thinking) fputs(ANSI_RESET, stdout);
    fflush(stdout);
    ts->generated += g->generated;
    ts->forwards += (int)(g->forwards - forwards0);
    ts->decode_seconds += now_seconds() - t0;
    ts->stop = g->stop;
    d->can_continue = resumable && (g->stop == STOP_LIMIT || g->stop == STOP_INTERRUPT);
    d->replies++;
    d->total_generated += g->generated;
    d->total_forwards += ts->forwards;
    d->total_decode_seconds += ts->decode_seconds;
}

static void print_hit_rate(char *buf, size_t n, long long hits, long long misses) {
    if (hits + misses) snprintf(buf, n, "%.1f%%", 100.0 * hits / (hits + misses));
    else snprintf(buf, n, "-");
}

/* The stats line after a prompt-mode answer and after each chat turn. */
static void print_turn_stats(const Dialog *d, const TurnStats *ts) {
    const ExpertStore *store = &d->gen->model->experts;
    char hit[32];
    print_hit_rate(hit, sizeof hit, store->hits - ts->hits0, store->misses - ts->misses0);
    char speed[32] = "-";
    if (ts->generated && ts->decode_seconds > 0)
        snprintf(speed, sizeof speed, "%.2f", ts->generated / ts->decode_seconds);
    const double mb = (store->bytes_read - ts->bytes0) / 1e6,
                 rs = store->read_seconds - ts->read_seconds0;
    char in_place[48] = "";   /* INPLACE loads: not reads, so not in the MB and the rate */
    if (store->in_place_loads > ts->in_place0)
        snprintf(in_place, sizeof in_place, ", %lld experts in place",
                 store->in_place_loads - ts->in_place0);
    char reused[48] = "";
    if (ts->reused) snprintf(reused, sizeof reused, ", %d reused", ts->reused);
    fprintf(stderr,
            "glm: [%d prompt tokens%s, prefill %.3f s | %d tokens, decode %s tok/s | expert hit "
            "%s, read %.0f MB "
            "(%.2f GB/s)%s, waited on disk %.2f s | peak RSS %.2f GB | context %d/%d | stop: %s]\n",
            ts->prompt_tokens, reused, ts->prefill_seconds, ts->generated, speed, hit, mb,
            rs > 0 ? mb / 1e3 / rs : 0.0, in_place, store->wait_seconds - ts->wait_seconds0,
            peak_rss_gb(), d->gen->pos, d->gen->state->capacity, STOP_NAMES[ts->stop]);
    if (g_verbose) print_spec_stats(d->gen, &ts->spec0);
}

/* ---- the conversation on disk: SESSION, :save, :load -------------------------------------------
   A session file (kvfile.h) holds the conversation's tokens and cache rows, the sampler's
   stream and the chat's state: the thinking mode, whether the last reply was cut (so :more goes on
   in a later process) and the unfinished UTF-8 character such a reply may end in. With SESSION,
   chat resumes the file at start and saves after every answer and every command that changes the
   conversation; PROMPT continues it with one user message. */

/* Says once, at the first turn after SESSION brought a conversation back, what was reused. */
static void dialog_note_resume(Dialog *d, int reused, int prefill) {
    if (d->resumed < 0) return;
    if (reused < d->resumed)
        say("session %s: resumed %d tokens, prefilling %d new (its last %d tokens differ from this "
            "conversation and were dropped)",
            d->session_path, reused, prefill, d->resumed - reused);
    else
        say("session %s: resumed %d tokens, prefilling %d new", d->session_path, reused, prefill);
    d->resumed = -1;
}

/* Makes the cache hold `conversation` (every token of it): the prefix it shares with what the
   cache holds is kept and only the rest is prefilled (generator_reuse_prefix). 0, or -1 when
   Ctrl-C stopped it (said on stderr; the cache then holds the kept prefix). */
static int dialog_prefill_conversation(Dialog *d, const TokenList *conversation, TurnStats *ts) {
    double t0 = now_seconds();
    int reused = 0;
    const int got = generator_reuse_prefix(d->gen, conversation->ids, conversation->n, &reused);
    ts->prefill_seconds = now_seconds() - t0;
    ts->reused = d->gen->restored;
    ts->prompt_tokens = conversation->n - reused;
    dialog_note_resume(d, reused - ts->reused, conversation->n - reused + ts->reused);
    d->can_continue = 0;
    if (got == conversation->n) return 0;
    fprintf(stderr, "glm: prefill interrupted (%d new tokens); the cache keeps the first %d\n",
            conversation->n - reused, reused);
    return -1;
}

/* Saves the conversation with the chat's state: thinking mode, a cut reply, its unfinished
   UTF-8 character. */
static int dialog_save(const Dialog *d, const char *path, int think, char *err, size_t err_len) {
    SessionSnapshot chat = { 0 };
    chat.chat_flags = (think ? SESSION_THINK : 0) | (d->can_continue ? SESSION_REPLY_CUT : 0) |
                      (d->in_thinking ? SESSION_IN_REASONING : 0);
    chat.text_npending = d->stream.npending;
    memcpy(chat.text_pending, d->stream.pending, (size_t)d->stream.npending);
    return generator_save(d->gen, d->session_key, &chat, path, err, err_len);
}

/* Replaces the conversation with a saved one; *think gets its thinking mode. generator_load's
   return codes (-2: the conversation is now empty). */
static int dialog_load(Dialog *d, const char *path, int *think, char *err, size_t err_len) {
    SessionSnapshot chat;
    const int rc = generator_load(d->gen, d->session_key, path, &chat, err, err_len);
    tok_stream_init(&d->stream);
    if (rc == -1) return rc;
    d->can_continue = d->in_thinking = 0;
    if (rc) return rc;
    *think = (chat.chat_flags & SESSION_THINK) != 0;
    d->can_continue = (chat.chat_flags & SESSION_REPLY_CUT) && d->gen->pos > 0;
    d->in_thinking = (chat.chat_flags & SESSION_IN_REASONING) != 0;
    memcpy(d->stream.pending, chat.text_pending, sizeof d->stream.pending);
    d->stream.npending = chat.text_npending;
    return 0;
}

/* After every answer (and every command that changes the conversation) with SESSION set. A save
   that fails is said; the conversation goes on. -1 when it failed. */
static int dialog_autosave(const Dialog *d, int think) {
    if (!d->session_path) return 0;
    char err[8500];
    if (!dialog_save(d, d->session_path, think, err, sizeof err)) return 0;
    say("error: SESSION=%s was not saved: %s", d->session_path, err);
    return -1;
}

/* SESSION at the start: the file's conversation comes back when the file exists, with its
   thinking mode (unless THINK is set) and its sampler stream (unless SEED names another seed).
   A file that cannot be used is an error: it is never overwritten by another conversation. */
static void dialog_resume(Dialog *d, const Settings *set, int seed_from_clock) {
    const char *path = d->session_path;
    if (!session_file_present(path)) {
        say("session %s: a new conversation (saved after every answer)", path);
        return;
    }
    char err[8500];
    const uint64_t seed = d->gen->sampler.seed;
    int think = d->think;
    const double t0 = now_seconds();
    if (dialog_load(d, path, &think, err, sizeof err)) die("SESSION=%s %s", path, err);
    if (!set->think_given) d->think = think;
    /* SEED names another stream: it starts over */
    if (!seed_from_clock && seed != d->gen->sampler.seed) {
        say("note: SEED=%llu replaces the session's sampler stream (seed %llu)",
            (unsigned long long)seed, (unsigned long long)d->gen->sampler.seed);
        d->gen->sampler.seed = seed;
        d->gen->sampler.draws = 0;
    }
    d->resumed = d->gen->pos;
    struct stat st;
    const double mb = stat(path, &st) ? 0.0 : (double)st.st_size / 1e6;
    say("session %s: %d tokens on disk (%.1f MB, read in %.2f s), thinking %s%s", path, d->gen->pos,
        mb, now_seconds() - t0, d->think ? "on" : "off",
        d->can_continue ? ", the last reply was cut (:more goes on)" : "");
    /* then compared with the file's */
    const int renders_opening = set->mode == MODE_PROMPT && set->messages_path[0];
    if (d->gen->pos && !renders_opening && (set->system_prompt[0] || set->messages_path[0]))
        say("note: SYSTEM and MESSAGES are not used: the session already holds the conversation's "
            "opening");
}

/* ---- terminal input: lined.h ----------------------------------------------------------------- */

/* Chat input: the line editor when stdin is a terminal, else one plain line per message. While a
   line is edited the terminal is raw (Ctrl-C arrives as a key); while a reply is generated it
   only stops echoing, and Ctrl-C raises SIGINT. Keys typed during a reply stay queued for the
   next prompt. The original mode comes back at exit (and in the SIGINT handler). */
typedef struct {
    int tty;                  /* stdin is a terminal */
    LineEditor editor;
    char *line;               /* a plain line (not a terminal) */
    size_t cap;
} ChatInput;

static void chat_input_open(ChatInput *in) {
    memset(in, 0, sizeof *in);
    in->tty = isatty(STDIN_FILENO);
    /* the line is drawn where the replies go, or on stderr when stdout is a file */
    lined_init(&in->editor, STDIN_FILENO,
               isatty(STDOUT_FILENO) || !isatty(STDERR_FILENO) ? STDOUT_FILENO : STDERR_FILENO);
    if (in->tty && lined_terminal_save(STDIN_FILENO) == 0) atexit(lined_terminal_restore);
}

static void chat_input_close(ChatInput *in) {
    lined_free(&in->editor);
    free(in->line);
}

/* One line of input (without the newline) into *line. */
static LinedStatus chat_input_read(ChatInput *in, const char *prompt, const char **line) {
    if (in->tty) {
        LinedStatus status = lined_read(&in->editor, prompt);
        *line = in->editor.buf;
        return status;
    }
    ssize_t n = getline(&in->line, &in->cap, stdin);
    if (n < 0) return errno == EINTR ? LINED_QUIT : LINED_EOF;
    while (n > 0 && (in->line[n - 1] == '\n' || in->line[n - 1] == '\r')) in->line[--n] = 0;
    *line = in->line;
    return LINED_OK;
}

/* ---- the modes ------------------------------------------------------------------------------- */

/* TOKENIZE=file: each line is one JSON string; prints its ids on one line. Blank lines stay blank.
   */
static int run_tokenize(const Settings *set) {
    TextCodec tc = codec_load(set->model_dir, set->special);
    FILE *f = fopen(set->tokenize_path, "r");
    if (!f) die("TOKENIZE=%s: cannot open: %s", set->tokenize_path, strerror(errno));
    struct stat sb;   /* a device such as /dev/zero is one endless line */
    if (fstat(fileno(f), &sb) == 0 && !S_ISREG(sb.st_mode) && !S_ISFIFO(sb.st_mode))
        die("TOKENIZE=%s: not a file or a pipe", set->tokenize_path);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    for (int lineno = 1; (n = getline(&line, &cap, f)) >= 0; lineno++) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (n == 0) { putchar('\n'); continue; }
        char err[256];
        JsonDoc *doc = json_parse(line, (size_t)n, err, sizeof err);
        if (!doc) die("TOKENIZE=%s: line %d: %s", set->tokenize_path, lineno, err);
        size_t len;
        const char *text = json_str(json_root(doc), &len);
        if (!text)
            die("TOKENIZE=%s: line %d is not a JSON string (write each text as \"...\")",
                set->tokenize_path, lineno);
        TokenList ids = { 0 };
        tokens_push_text(&ids, &tc, text, len);
        for (int i = 0; i < ids.n; i++) printf(i ? " %d" : "%d", ids.ids[i]);
        putchar('\n');
        free(ids.ids);
        json_free(doc);
    }
    free(line);
    fclose(f);
    codec_free(&tc);
    return 0;
}

/* Prints s as a JSON string to f (UTF-8 kept; escaped: what JSON requires, and DEL and C1
   controls). */
static void print_json_string(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        if (b == '"' || b == '\\') { fputc('\\', f); fputc(b, f); }
        else if (b == '\n') fputs("\\n", f);
        else if (b == '\t') fputs("\\t", f);
        else if (b == '\r') fputs("\\r", f);
        else if (b < 0x20 || b == 0x7F) fprintf(f, "\\u%04x", b);
        else if (b == 0xC2 && i + 1 < n && (unsigned char)s[i + 1] <= 0x9F &&
                 (unsigned char)s[i + 1] >= 0x80)
            /* C1 controls: escaped, as a terminal might obey them */
            fprintf(f, "\\u%04x", (unsigned char)s[++i]);
        else fputc(b, f);
    }
    fputc('"', f);
}

/* TEMPLATE_ONLY=1: the prompt PROMPT mode would send, as text (a JSON string) and as ids. */
static int run_template_only(const Settings *set) {
    TextCodec tc = codec_load(set->model_dir, set->special);
    TokenList ids = { 0 };
    ChatOptions chat = { 0 };
    if (set->chat_template) chat = chat_options_from_settings(set);
    build_prompt(set, &tc, &chat, &ids);
    char *text;
    size_t len;
    if (tok_decode(tc.tok, ids.ids, (size_t)ids.n, 0, &text, &len))
        die("out of memory decoding the prompt");
    print_json_string(stdout, text, len);
    putchar('\n');
    for (int i = 0; i < ids.n; i++) printf(i ? " %d" : "%d", ids.ids[i]);
    putchar('\n');
    free(text);
    free(ids.ids);
    codec_free(&tc);
    return 0;
}

/* The ids of one turn after what the cache holds: the conversation's opening with the user message
   when the cache is empty, else the user message as a continuation; then the generation prompt
   (thinking per `think`). CHAT_TEMPLATE=0: the raw text. Chat's turns, and PROMPT continuing a
   SESSION, render through here. */
static void build_turn(const Settings *set, const Dialog *d, const char *text, int think,
                       TokenList *out) {
    if (!set->chat_template) { tokens_push_text(out, d->codec, text, strlen(text)); return; }
    ChatConv turn;
    chat_conv_init(&turn);
    ChatOptions o = d->chat;
    o.thinking = think;
    o.keep_reasoning = 1;   /* what the cache holds: see the section comment */
    o.continuation = d->gen->pos > 0;
    if (o.continuation) {
        if (chat_conv_add(&turn, CHAT_USER, text, strlen(text))) die("out of memory");
    } else conversation_opening(set, &turn, text, strlen(text));
    char err[5000];
    if (chat_to_ids(d->codec, &turn, &o, out, err, sizeof err))
        die("%s (CHAT_TEMPLATE=0 sends raw text)", err);
    chat_conv_free(&turn);
}

/* PROMPT mode: one answer to stdout, the stats line to stderr. Exit 130 after a Ctrl-C.
   With SESSION the answer continues the saved conversation: PROMPT is its next user message
   (with MESSAGES, the whole rendered conversation is compared with the file's and only what
   differs is prefilled); the reply is cached whole, as chat caches it, and saved. */
static int run_prompt(const Settings *set, Dialog *d, const TokenList *prompt) {
    TurnStats ts;
    turn_begin(d, &ts);
    const int think = d->session_path && !set->messages_path[0] ? d->think : set->think;
    d->in_thinking = set->chat_template && think;
    /* with thinking on the schema binds the answer, after </think> */
    if (d->constraint)
        generator_set_constraint(d->gen, d->constraint, d->constraint_vocab,
                                 d->in_thinking ? d->codec->tag[CHAT_TAG_END_THINK] : -1);
    install_sigint_handler();
    int prefilled;
    if (!d->session_path) {
        prefilled = dialog_prefill(d, prompt, &ts);
    } else {
        TokenList conversation = { 0 };
        if (d->gen->pos && !set->messages_path[0]) {   /* the saved conversation, then PROMPT */
            for (int i = 0; i < d->gen->pos; i++) tokens_push(&conversation, d->gen->history[i]);
            build_turn(set, d, set->prompt, think, &conversation);
        } else {
            for (int i = 0; i < prompt->n; i++) tokens_push(&conversation, prompt->ids[i]);
        }
        if (conversation.n >= d->gen->state->capacity)
            die("SESSION=%s: the conversation and this prompt need %d tokens, CTX=%d leaves no "
                "room for an answer (raise CTX)",
                d->session_path, conversation.n, d->gen->state->capacity);
        tok_stream_init(&d->stream);   /* an unfinished character of a cut reply is dropped */
        prefilled = dialog_prefill_conversation(d, &conversation, &ts);
        free(conversation.ids);
    }
    if (prefilled == 0) dialog_generate(d, set->ngen, d->session_path != NULL, &ts);
    else ts.stop = STOP_INTERRUPT;
    /* a reply cut by NGEN keeps an unfinished character for whoever continues it */
    if (!d->session_path || ts.stop == STOP_EOS) dialog_flush_text(d);
    if (d->out_tty) putchar('\n');
    fflush(stdout);
    print_turn_stats(d, &ts);
    const int saved = prefilled == 0 ? dialog_autosave(d, think) : 0;
    return ts.stop == STOP_INTERRUPT ? 130 : saved ? 1 : 0;
}

static void chat_print_help(void) {
    fprintf(stderr, "glm: commands: :more (continue a reply cut by NGEN or Ctrl-C), :reset (new "
                    "conversation), "
                    ":think on|off, :save [FILE] (the conversation to FILE, or to SESSION), :load "
                    "FILE (continue the "
                    "conversation FILE holds), :stats, :quit (or Ctrl-D). A line starting with "
                    "\"::\" is sent with one ':' removed.\n");
}

static void chat_print_totals(const Dialog *d, const Settings *set, int think) {
    const Generator *g = d->gen;
    const ExpertStore *store = &g->model->experts;
    char hit[32];
    print_hit_rate(hit, sizeof hit, store->hits, store->misses);
    fprintf(stderr,
            "glm: context %d/%d tokens | %d replies, %lld tokens, decode %.2f tok/s | expert hit "
            "%s since start | "
            "peak RSS %.2f GB | TEMP %g, NUCLEUS %g, SEED %llu | thinking %s\n",
            g->pos, g->state->capacity, d->replies, d->total_generated,
            d->total_decode_seconds > 0 ? d->total_generated / d->total_decode_seconds : 0.0, hit,
            peak_rss_gb(), set->temperature, set->top_p, (unsigned long long)g->sampler.seed,
            think ? "on" : "off");
    if (g_verbose) print_spec_stats(g, NULL);
}

/* CHAT mode. Each turn prefills only its own tokens; see the section comment for how the cache
   and the template stay consistent. */
static int run_chat(const Settings *set, Dialog *d) {
    Generator *g = d->gen;
    ChatInput input;
    chat_input_open(&input);
    install_sigint_handler();
    const char *prompt = input.tty ? "> " : "";
    int think = d->think;
    fprintf(stderr, "glm: chat: type a message and press Enter; :help lists the commands. Ctrl-C "
                    "stops a reply; "
                    "Ctrl-D (or Ctrl-C on an empty line) quits.\n");
    for (;;) {
        fflush(stdout);
        /* the disk is free while the user types: bring in the hot experts */
        expert_store_idle(&d->gen->model->experts);
        const char *line;
        if (chat_input_read(&input, prompt, &line) != LINED_OK) break;
        TurnStats ts;
        turn_begin(d, &ts);
        g_interrupts = 0;
        if (line[0] == ':' && line[1] != ':') {
            if (!strcmp(line, ":quit") || !strcmp(line, ":q") || !strcmp(line, ":exit")) break;
            if (!strcmp(line, ":help")) chat_print_help();
            else if (!strcmp(line, ":stats")) chat_print_totals(d, set, think);
            else if (!strcmp(line, ":think on") || !strcmp(line, ":think off")) {
                think = !strcmp(line, ":think on");
                fprintf(stderr, "glm: thinking %s for the next turns\n", think ? "on" : "off");
                dialog_autosave(d, think);
            } else if (!strcmp(line, ":think"))
                fprintf(stderr, "glm: thinking is %s (:think on|off)\n", think ? "on" : "off");
            else if (!strcmp(line, ":reset")) {
                generator_rollback(g, 0);
                sampler_restart(&g->sampler);
                d->can_continue = 0;
                d->in_thinking = 0;
                tok_stream_init(&d->stream);
                fprintf(stderr, "glm: conversation cleared\n");
                dialog_autosave(d, think);
            } else if (!strncmp(line, ":save", 5) && (line[5] == ' ' || !line[5])) {
                const char *path = line + 5 + strspn(line + 5, " ");
                if (!path[0] && !d->session_path) {
                    say(":save needs a file name (or SESSION set)");
                    continue;
                }
                if (!path[0]) path = d->session_path;
                char err[8500];
                const double t0 = now_seconds();
                if (dialog_save(d, path, think, err, sizeof err))
                    say("error: :save %s: %s", path, err);
                else say("saved %d tokens to %s in %.2f s", g->pos, path, now_seconds() - t0);
            } else if (!strncmp(line, ":load ", 6) && line[6 + strspn(line + 6, " ")]) {
                const char *path = line + 6 + strspn(line + 6, " ");
                char err[8500];
                const double t0 = now_seconds();
                const int rc = dialog_load(d, path, &think, err, sizeof err);
                if (rc == -1) {
                    say("error: :load %s %s; the conversation is as it was", path, err);
                    continue;
                }
                if (rc) say("error: :load %s %s; the conversation is now empty", path, err);
                else
                    say("loaded %d tokens from %s in %.2f s, thinking %s%s", g->pos, path,
                        now_seconds() - t0, think ? "on" : "off",
                        d->can_continue ? ", the last reply was cut (:more goes on)" : "");
                d->resumed = -1;
                dialog_autosave(d, think);
            } else if (!strcmp(line, ":more")) {
                if (!d->can_continue) {
                    fprintf(stderr, "glm: nothing to continue: %s\n",
                            g->pos
                                ? "the last reply ended (EOS, a full context, or a cancelled turn)"
                                : "no reply yet");
                    continue;
                }
                dialog_note_resume(d, g->pos, 0);
                dialog_generate(d, set->ngen, 1, &ts);
                putchar('\n');
                fflush(stdout);
                print_turn_stats(d, &ts);
                dialog_autosave(d, think);
            } else {
                say("unknown command %s (:help lists them)", line);
            }
            continue;
        }
        if (line[0] == ':') line++;   /* "::text" sends ":text" */
        if (!line[0]) continue;
        TokenList ids = { 0 };
        build_turn(set, d, line, think, &ids);
        if (g->pos + ids.n >= g->state->capacity) {
            fprintf(stderr,
                    "glm: context full: %d tokens used, this turn needs %d more and room to "
                    "answer, CTX=%d "
                    "(:reset starts over; a larger CTX keeps more)\n",
                    g->pos, ids.n, g->state->capacity);
            putchar('\n');   /* every message gets an answer line, an empty one here */
            free(ids.ids);
            continue;
        }
        tok_stream_init(&d->stream);   /* an unfinished character of a cut reply is dropped */
        d->in_thinking = set->chat_template && think;
        if (dialog_prefill(d, &ids, &ts) == 0) {
            dialog_generate(d, set->ngen, 1, &ts);
            if (ts.stop == STOP_EOS) dialog_flush_text(d);
            putchar('\n');
            fflush(stdout);
            print_turn_stats(d, &ts);
            if (ts.stop == STOP_CONTEXT)
                fprintf(stderr, "glm: the context is full (CTX=%d): :reset to start over\n",
                        g->state->capacity);
            dialog_autosave(d, think);
        } else {
            putchar('\n');
            fprintf(stderr, "glm: turn cancelled during prefill; the conversation is as it was "
                            "before it\n");
        }
        free(ids.ids);
    }
    fflush(stdout);
    chat_input_close(&input);
    return 0;
}

/* The model a text mode talks to, loaded after checking that the tokenizer belongs to it (a
   tokenizer with ids the model has no rows for is another model's: said before the long load).
   The RAM plan needs the KV cache's size before the load: CTX, else `needed` tokens plus, for
   open-ended answers, chat and the server, default_context. Returns that size. */
static int text_model_load(const Settings *set, const TextCodec *tc, Model *model, int needed,
                           int open_ended) {
    Config config = config_load(set->model_dir);
    codec_check_vocab(tc, config.vocab);
    const int capacity = run_context(set, &config, needed, open_ended);
    config_free(&config);
    model_load(model, set, capacity);
    if (!model->c.n_eos)
        fprintf(stderr, "glm: warning: no eos_token_id in config.json or generation_config.json: "
                        "answers stop only at NGEN or a full context\n");
    return capacity;
}

/* PROMPT and CHAT: the tokenizer first (a missing tokenizer.json fails before a long load). */
/* SCHEMA or GRAMMAR compiled (NULL when neither is set); dies naming the file and the problem. */
static Grammar *answer_grammar(const Settings *set) {
    const char *path = set->schema_path[0] ? set->schema_path : set->grammar_path;
    const char *name = set->schema_path[0] ? "SCHEMA" : "GRAMMAR";
    if (!path[0]) return NULL;
    char err[512];
    size_t len;
    char *text = json_read_file(path, &len, err, sizeof err);
    if (!text) die("%s=%s: %s", name, path, err);
    Grammar *g = set->schema_path[0] ? grammar_from_schema_text(text, len, NULL, err, sizeof err)
                                     : grammar_from_gbnf(text, len, err, sizeof err);
    free(text);
    if (!g) die("%s=%s: %s", name, path, err);
    return g;
}

static int run_text(Settings set) {
    Grammar *grammar = set.mode == MODE_PROMPT ? answer_grammar(&set) : NULL;
    TextCodec tc = codec_load(set.model_dir, set.special);
    ChatOptions chat = { 0 };
    if (set.chat_template) chat = chat_options_from_settings(&set);
    TokenList prompt = { 0 };
    if (set.mode == MODE_PROMPT) {
        build_prompt(&set, &tc, &chat, &prompt);
        if (!prompt.n)
            die("PROMPT is empty and CHAT_TEMPLATE=0: there is no token to continue from");
    }
    const int seed_from_clock = !set.seed;
    /* printed below, so the run can be repeated with SEED */
    if (!set.seed) set.seed = clock_seed();
    /* SESSION: the cache needs room for the tokens the file holds too (checked fully after the
       load) */
    int session_tokens = 0;
    if (set.session_path[0] && access(set.session_path, F_OK) == 0) {
        char err[512];
        session_tokens = session_file_tokens(set.session_path, err, sizeof err);
        if (session_tokens < 0) die("SESSION=%s %s", set.session_path, err);
    }
    if (set.mode == MODE_PROMPT && set.ctx && prompt.n >= set.ctx)
        die("the prompt has %d tokens and CTX=%d leaves no room for an answer", prompt.n, set.ctx);
    /* KV cache: a saved conversation, the prompt, then NGEN or a default window for open-ended
       answers and chat */
    const int bounded = set.mode == MODE_PROMPT && set.ngen >= 0;
    Model model;
    const int capacity = text_model_load(
        &set, &tc, &model, session_tokens + prompt.n + (bounded ? set.ngen + 1 : 0), !bounded);
    RunState state;
    ForwardOptions opt = engine_start(&set, &model, &state, capacity);
    Generator *gen = generator_create(&model, &state, &opt,
                                      (SamplerSettings){ set.temperature, set.top_p, set.seed });
    generator_set_speculation(gen, set.spec_mode, set.draft);
    Dialog dialog;
    dialog_init(&dialog, gen, &tc);
    dialog.chat = chat;
    dialog.think = set.think;
    const SessionKey key = session_key(&model, &set, &opt);
    dialog.session_key = &key;
    if (set.session_path[0]) {
        dialog.session_path = set.session_path;
        dialog_resume(&dialog, &set, seed_from_clock);
    }
    GrammarVocab *gvocab = NULL;
    if (grammar) {
        char err[512];
        gvocab = grammar_vocab_of(tc.tok, model.c.vocab, model.c.eos, model.c.n_eos, err,
                                  sizeof err);
        if (!gvocab) die("%s: %s", tc.path, err);
        dialog.constraint = grammar_matcher_new(grammar, gvocab);
        if (!dialog.constraint) die("out of memory");
        dialog.constraint_vocab = gvocab;
    }
    if (set.temperature > 0)
        say_detail("sampling: TEMP %g, NUCLEUS %g, SEED %llu%s", set.temperature, set.top_p,
                   (unsigned long long)gen->sampler.seed,
                   gen->sampler.draws ? " (the session's stream goes on)" : "");
    else
        say_detail("sampling: greedy (TEMP=0)");
    int rc = set.mode == MODE_PROMPT ? run_prompt(&set, &dialog, &prompt) : run_chat(&set, &dialog);
    dialog_free(&dialog);
    generator_free(gen);
    grammar_matcher_free(dialog.constraint);
    grammar_vocab_free(gvocab);
    grammar_free(grammar);
    engine_stop(&set, &model, &state);
    free(prompt.ids);
    codec_free(&tc);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
   PLAN and DOCTOR: before a 370 GB download, will this machine run the model, with what cache,
   at what speed? DOCTOR measures the machine (and saves its disk and kernel rates in the cache
   directory); PLAN reads only config.json and the headers, prints the RAM plan a run would make,
   the disk the model takes, and a projection of decode and prefill speed from DOCTOR's rates.
   --------------------------------------------------------------------------------------------- */

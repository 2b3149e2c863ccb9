/* glm.c — GLM-5.x (HF model_type "glm_moe_dsa") inference in one C file.

   The model: a 78-layer Mixture-of-Experts transformer with Multi-head Latent Attention (MLA),
   a DeepSeek-sparse-attention "lightning indexer" that picks which past tokens each query may
   see, a sigmoid router over 256 routed experts (8 per token) plus one shared expert, and a
   multi-token-prediction (MTP) layer. The math follows docs/model.md; section
   numbers (§) below refer to it.

   This file is the engine; it reads top to bottom in data-flow order:
     1. Settings     every environment variable, its default and meaning (`./glm --help`)
     2. Config       config.json → validated model shape
     3. Weights      tensors from safetensors (st.h), quantized at load or pre-quantized (quant.h)
     4. Kernels      the one matmul dispatch and the small vector helpers
     5. Attention    RMSNorm, RoPE, MLA (weight-absorbed; explicit K/V as a check), the DSA indexer
     6. Experts      where a routed expert's weights come from (ExpertStore): slots, I/O, history
     7. MoE          router, batch union of chosen experts, SwiGLU, shared expert
     8. Model        the RAM plan, loading and the forward pass over S positions, the MTP head
     9. Generation   sampling, the Generator (the one decode loop every front end drives;
                    speculative decoding: MTP and n-gram drafts, batched verification), sessions
    10. Runs         starting and ending a run: the configuration line, statistics, profile
   The front ends (cli.c, validate.c, text.c, server.c, plan.c) sit beside it and main.c joins
   them into one program; nothing here names a front-end symbol.

   Build: `make` (see Makefile). Run: `./glm --help`. */

#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* OpenMP's thread numbers, and what they are in a build without it (one thread). */
static inline int thread_index(void) {   /* the calling thread's number in its team */
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}
static inline int team_threads(void) {   /* threads in the calling thread's team */
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}
static inline int max_threads(void) {    /* threads the next parallel region gets */
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* OpenMP workers that spin at barriers take the CPU that the expert I/O thread and the main
   thread need on a 2-core machine: measured on the bench model, REPLAY decode ran at 0.98 tok/s
   with libgomp's default spinning and 5.8 tok/s with OMP_WAIT_POLICY=passive. libgomp reads the
   policy before main() runs, so when the user has not chosen one, set it and re-execute once. */
static void openmp_passive_wait(char **argv) {
#ifdef _OPENMP
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv);
    /* exec failed (no /proc): carry on with the default policy */
#else
    (void)argv;
#endif
}

#define JSON_IMPLEMENTATION
#include "json.h"
#define ST_IMPLEMENTATION
#include "st.h"
#define QUANT_IMPLEMENTATION
#include "quant.h"
#define TIER_IMPLEMENTATION
#include "tier.h"
#define TOK_IMPLEMENTATION
#include "tok.h"
#define DURABLE_IMPLEMENTATION
#include "durable.h"
#define KVFILE_IMPLEMENTATION
#include "kvfile.h"
#define GRAMMAR_IMPLEMENTATION
#include "grammar.h"
#define LINED_IMPLEMENTATION
#include "lined.h"
#define CHAT_IMPLEMENTATION
#include "chat.h"
#define HTTP_IMPLEMENTATION
#include "http.h"
#define SETTINGS_IMPLEMENTATION
#include "settings.h"

/* ---------------------------------------------------------------------------------------------
   Small utilities: fatal errors, timing, allocation that cannot silently fail.
   --------------------------------------------------------------------------------------------- */

/* Text from outside (model output, file contents, the environment) on its way to a terminal:
   control bytes (ESC, CR, BEL, backspace, ...) are shown as ^X and C1 controls (U+0080..U+009F,
   which some terminals obey as ESC sequences) as U+FFFD, so only glm itself drives the terminal.
   Newlines and tabs pass, unless one_line (messages: one line each, a quoted newline shows as ^J).
   */
static void put_terminal_safe(FILE *f, const char *s, size_t n, int one_line) {
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        if ((b < 0x20 && (one_line || (b != '\n' && b != '\t'))) || b == 0x7F) {
            fputc('^', f);
            fputc(b == 0x7F ? '?' : b + 0x40, f);
        } else if (b == 0xC2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 &&
                   (unsigned char)s[i + 1] <= 0x9F) {
            fputs("\xEF\xBF\xBD", f);
            i++;
        } else {
            fputc(b, f);
        }
    }
}

/* "glm: <message>" on stderr, made terminal-safe when stderr is a terminal (messages quote file
   contents, environment values and user input). */
static void vsay(const char *prefix, const char *fmt, va_list ap) {
    char msg[8192];
    vsnprintf(msg, sizeof msg, fmt, ap);
    /* one line always, so a message quoting a file (a model_type with a newline) can neither fake
       nor hide lines: control characters show as ^X on a terminal and become '?' in a log */
    fputs(prefix, stderr);
    if (isatty(STDERR_FILENO)) put_terminal_safe(stderr, msg, strlen(msg), 1);
    else {
        for (char *p = msg; *p; p++) if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
        fputs(msg, stderr);
    }
    fputc('\n', stderr);
}

static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsay("glm: ", fmt, ap);
    va_end(ap);
}

/* VERBOSE=1: the lines that say how a run was set up (template, RAM plan, expert I/O, history,
   load, model, settings, sampling, speculation). Without it a run prints its warnings and one
   statistics line, so a one-line prompt answers with one line on stderr. */
static int g_verbose;

static void say_detail(const char *fmt, ...) {
    if (!g_verbose) return;
    va_list ap;
    va_start(ap, fmt);
    vsay("glm: ", fmt, ap);
    va_end(ap);
}

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsay("glm: error: ", fmt, ap);
    va_end(ap);
    exit(1);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The size of the pages mmap, madvise and mincore work in: 4 KiB on x86-64, 16 or 64 KiB on some
   ARM64 kernels (an address or length that is not a multiple of it makes those calls fail). */
static uint64_t page_bytes(void) { return (uint64_t)sysconf(_SC_PAGESIZE); }

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) die("out of memory allocating %zu bytes", n);
    return p;
}

static void *xcalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) die("out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

/* The size of a transparent huge page: 2 MiB on x86-64 and on arm64 with 4 KiB pages, 32 MiB or
   512 MiB on arm64 kernels with 16 or 64 KiB pages. Read once from the kernel; 2 MiB where it does
   not say (huge pages are advice: a wrong size costs speed, never correctness). */
static size_t huge_page_bytes(void) {
    static size_t bytes;
    if (bytes) return bytes;
    size_t v = 0;
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", "r");
    if (f) {
        unsigned long long x = 0;
        if (fscanf(f, "%llu", &x) == 1 && x >= 4096 && x <= (1ull << 30) && !(x & (x - 1)))
            v = (size_t)x;
        fclose(f);
    }
    bytes = v ? v : (size_t)2 << 20;
    return bytes;
}

/* Asks for transparent huge pages over the huge-page-aligned part of [p, p + n), before anything
   touches it (with THP in "madvise" mode, the default of most distributions, only advised memory
   gets them). Why: a first touch costs ~12 us per 4 KiB page; 2 MiB pages freed a moment ago
   fault in at 14-20 GB/s, against 2.4-2.8 GB/s for 4 KiB pages (and 0.33-0.41 GB/s for memory a
   virtual machine's guest has already handed back to its host). Memory that pread() filled in
   4 KiB pages is also slow to read once afterwards: lm_head (951 MB of int8) read into plain pages
   took 0.69-0.88 s in its first matmul and 0.019-0.030 s after; read into advised memory, 0.022 s
   the first time, and the pread itself took 1.7 s instead of 2.8. The advice changes nothing
   else: free() releases the block. */
static void advise_huge_pages(void *p, size_t n) {
    const size_t huge = huge_page_bytes();
    if (n < 2 * huge) return;
    const uintptr_t a = ((uintptr_t)p + huge - 1) & ~(uintptr_t)(huge - 1),
                    end = ((uintptr_t)p + n) & ~(uintptr_t)(huge - 1);
    if (end > a) madvise((void *)a, end - a, MADV_HUGEPAGE);
}

/* A big scratch buffer that is zero until first touched, in huge pages where it can be (fewer
   TLB misses in attention's passes over the KV cache; alternating cold 255-token prefills with
   and without the advice did not tell them apart). */
static void *xcalloc_huge(size_t count, size_t size) {
    void *p = xcalloc(count, size);
    advise_huge_pages(p, count * size);
    return p;
}

static double peak_rss_gb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1048576.0; /* ru_maxrss is in KiB on Linux */
}

/* A "Key:  N kB" line of a /proc file, in bytes (0 if unknown). */
static double proc_kb_field(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    size_t klen = strlen(key);
    double kb = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, klen) && line[klen] == ':' &&
            sscanf(line + klen + 1, "%lf", &kb) == 1)
            break;
    fclose(f);
    return kb * 1024.0;
}

static double mem_available_bytes(void) { return proc_kb_field("/proc/meminfo", "MemAvailable"); }
static double current_rss_bytes(void) { return proc_kb_field("/proc/self/status", "VmRSS"); }

/* =============================================================================================
   1. Settings
   Every knob is an environment variable (plus three optional positional arguments). One table
   holds name, default and meaning, in the order --help lists them (what a user sets first, the
   validation and debugging knobs last); through settings.h it drives --help, parsing and
   validation, and a variable a typo or two away from a known name, or another program's name for
   one, gets a warning, so a mistake never silently does nothing. Here each value is read into
   Settings; the front end (cli.c) reads the command line and chooses the mode.
   ============================================================================================= */

static const SettingSpec SETTINGS[] = {
    { "SNAP",     SET_STR,   "",     0, 0, "model directory (config.json + *.safetensors); required" },
    { "PROMPT",   SET_STR,   "",     0, 0, "answer this user message: the reply streams to stdout, one stats line to stderr (PROMPT=-: read it from stdin, at most 16 MB)" },
    { "CHAT",     SET_BOOL,  "-1",  -1, 1, "terminal chat: 1 on, 0 off, -1 on when stdin is a terminal and no PROMPT, REF or TOKENIZE is set" },
    { "SERVE",    SET_STR,   "",     0, 0, "HTTP server on [host:]port (host default 127.0.0.1; port 0 picks a free one): the OpenAI (/v1/chat/completions, /v1/completions, /v1/responses), Anthropic (/v1/messages) and Ollama (/api/*) APIs, /v1/models, /health" },
    { "SYSTEM",   SET_STR,   "",     0, 0, "system prompt placed before the first user message" },
    { "MESSAGES", SET_STR,   "",     0, 0, "JSON file: earlier conversation, OpenAI-style: a list of {role: system|user|assistant|tool, content[, reasoning_content, tool_calls]}, or {\"messages\": [...], \"tools\": [...]}" },
    { "SESSION",  SET_STR,   "",     0, 0, "file holding the conversation (token ids + KV cache): continued when it exists, saved after every answer (PROMPT, CHAT; SERVE: the server's cache)" },
    { "PLAN",     SET_STR,   "0",    0, 0, "1: print the RAM plan (same accounting as a run), disk needed and projected speeds from config.json and the safetensors headers alone (a folder of files cut after their headers will do), then exit; json: the same as JSON" },
    { "DOCTOR",   SET_BOOL,  "0",    0, 1, "check this machine for SNAP (kernels, cores, RAM, huge pages, O_DIRECT, a short disk read probe, free disk), one line per finding; exit 0 ready, 1 warnings, 2 cannot run" },
    { "NGEN",     SET_INT,   "-1",  -1, 1e9, "tokens to generate per answer (-1: until EOS or a full context; with REF: as many as full_ids continues the prompt)" },
    { "TEMPERATURE", SET_FLOAT, "0.7", 0, 100, "sampling temperature (0: greedy, always the most likely token)" },
    { "TEMP",     SET_FLOAT, "",     0, 100, "alias of TEMPERATURE, honoured only when it is a number (TEMP is often the temp directory: then it is ignored with a note)" },
    { "NUCLEUS",  SET_FLOAT, "0.9",  0, 1, "top-p: sample among the most likely tokens whose probabilities sum to at least this" },
    { "SEED",     SET_INT,   "0",    0, 9007199254740991.0, "random seed for sampling (0: from the clock; the seed used is printed)" },
    { "THINK",    SET_BOOL,  "1",    0, 1, "thinking on: the answer starts with reasoning (<think>); 0 skips it (GLM-5.2: <think></think>, GLM-5.0: </think>)" },
    { "REASONING_EFFORT", SET_STR, "max", 0, 0, "GLM-5.2 with thinking on: max or high (the prompt's <|system|>Reasoning Effort line)" },
    { "SPEC",     SET_STR,   "auto", 0, 0, "speculative decoding, never changes the output: auto (MTP head and n-gram drafts where they pay, measured as it runs), mtp, ngram (prompt lookup) or off" },
    { "DRAFT",    SET_INT,   "4",    1, 16, "most tokens drafted per verify pass (SPEC=auto may draft fewer)" },
    { "SCHEMA",   SET_STR,   "",     0, 0, "PROMPT: JSON schema file the answer must follow (after the reasoning with thinking on); a keyword it cannot enforce is an error naming it" },
    { "GRAMMAR",  SET_STR,   "",     0, 0, "PROMPT: GBNF grammar file (llama.cpp's syntax, start rule root) the answer must follow, as SCHEMA" },
    { "CHAT_TEMPLATE", SET_BOOL, "1", 0, 1, "apply the GLM-5 chat template (0: send PROMPT / each chat line as raw text)" },
    { "CHAT_FORMAT", SET_STR, "auto", 0, 0, "chat template form: auto (from SNAP's chat_template.jinja or tokenizer_config.json; none there: glm-5.2), glm-5.2, or glm-5.0 (also GLM-5.1)" },
    { "SPECIAL",  SET_BOOL,  "0",    0, 1, "recognise special tokens such as <|user|> written in the text (0: text is only text)" },
    { "RAM_GB",   SET_FLOAT, "0",    0, 1e6, "RAM budget for the whole process in GB (0: MemAvailable minus a reserve); sizes the expert cache" },
    { "CTX",      SET_INT,   "0",    0, 1048576, "KV cache capacity in tokens (0: what the run needs; 4096 for chat and for PROMPT with NGEN=-1)" },
    { "BATCH",    SET_INT,   "2048", 1, 65536, "largest number of positions one forward processes (longer prompts go in chunks; each chunk reads the experts it needs once, so bigger chunks prefill faster but take ~0.2 MB per position on GLM-5.2)" },
    { "THREADS",  SET_INT,   "0",    0, 1024, "worker threads (0: all cores)" },
    { "GROUP",    SET_INT,   "0",    0, 4096, "group size for load-time int4 quantization (0: one scale per row)" },
    { "DIRECT",   SET_BOOL,  "-1",  -1, 1, "O_DIRECT expert reads into huge-page slabs, bypassing the page cache: 1 on, 0 off (buffered pread), -1 on for pre-quantized experts where the filesystem allows it" },
    { "DROP",     SET_BOOL,  "0",    0, 1, "buffered reads, then evict the pages read from the page cache" },
    { "MMAP",     SET_BOOL,  "0",    0, 1, "map the model files and use experts in place" },
    { "INPLACE",  SET_BOOL,  "1",    0, 1, "pread and O_DIRECT modes: an expert the OS page cache holds (all but at most an eighth of it) is used where it lies (mapped, not copied into its slot); 0: always read" },
    { "CACHE_POLICY", SET_STR, "lfu", 0, 0, "which cached expert a miss evicts: lfu (the one the router chose least often, recent use breaks ties) or lru" },
    { "USAGE",    SET_STR,   "",     0, 0, "routing history that seeds the expert cache and is updated every 256 tokens and at exit: a file, off, or empty for $XDG_CACHE_HOME/glm (else ~/.cache/glm)/usage-<model fingerprint>.bin" },
    { "KV_CACHE", SET_STR,   "",     0, 0, "prefix cache of prompts' KV rows on disk (PROMPT, CHAT, SERVE): a prompt that starts like an earlier one, in any process, prefills only the rest; a directory, off, or empty for $XDG_CACHE_HOME/glm (else ~/.cache/glm)/kv-<model fingerprint>" },
    { "KV_CACHE_GB", SET_FLOAT, "8", 0, 1e6, "disk budget of the prefix cache in GB; the least recently used entries go first" },
    { "KERNEL",   SET_STR,   "auto", 0, 0, "integer kernels: auto (best this CPU has), vnni (AVX-512 VNNI), avxvnni (AVX-VNNI), avx2 or scalar (all give identical results)" },
    { "PROFILE",  SET_BOOL,  "0",    0, 1, "print where the time went (attention, experts, disk wait, lm_head)" },
    { "VERBOSE",  SET_BOOL,  "0",    0, 1, "1: also print how the run was set up (template, RAM plan, expert I/O, model, settings, sampling, speculation); 0: warnings and one stats line" },
    { "API_KEY",  SET_STR,   "",     0, 0, "with SERVE: the key every request must carry (Authorization: Bearer KEY or x-api-key: KEY); required to listen on an address other machines can reach" },
    { "QUEUE",    SET_INT,   "8",    0, 4096, "with SERVE: requests that may wait while every slot is answering one (0: none wait); more get 429 with Retry-After" },
    { "SLOTS",    SET_INT,   "0",    0, 64, "with SERVE: conversations answered at once, each with its own KV cache of CTX tokens (the RAM plan counts them all); their decode steps share one forward. 0: as many as fit in an eighth of the RAM budget, at most 4 (1 with SESSION)" },
    { "MODEL_NAME", SET_STR, "",     0, 0, "with SERVE: the model id /v1/models lists and answers carry (default: SNAP's folder name)" },
    { "CORS",     SET_STR,   "",     0, 0, "with SERVE: origins a browser page may call the server from (origin,origin,... or *); empty: none (no CORS headers)" },
    { "WEB",      SET_BOOL,  "1",    0, 1, "with SERVE: GET / serves the chat page (built into glm; it works offline); 0: no page (GET /stats, the engine's figures as JSON, stays)" },
    { "PPL",      SET_STR,   "",     0, 0, "perplexity of this text file: windows of CTX tokens (0: 512), each scoring its last PPL_STRIDE tokens (at most half a window); the result to stdout" },
    { "PPL_STRIDE", SET_INT, "0",    0, 1048576, "with PPL: tokens between window starts (0: half of CTX)" },
    { "PPL_JSON", SET_STR,   "",     0, 0, "with PPL: write the result and the per-window figures to this JSON file" },
    { "BOS",      SET_BOOL,  "0",    0, 1, "with PPL: begin every window with config.json's bos_token_id" },
    { "LOGITS_SAVE", SET_STR, "",    0, 0, "with PPL: save each scored position's distribution to this file (the reference for KLD)" },
    { "LOGITS_TOP", SET_INT, "64",   0, 65536, "with LOGITS_SAVE: keep the top this-many logits and the rest's mass per position, 24+8k bytes (0: full rows, 24+4*vocab bytes)" },
    { "KLD",      SET_STR,   "",     0, 0, "with PPL: KL divergence, top-1 agreement and perplexity ratio of this run against a LOGITS_SAVE file of the same text and model" },
    { "SCORE",    SET_STR,   "",     0, 0, "multiple choice from this JSONL file (HellaSwag ctx/endings/label, ARC/MMLU question/choices/answer): log-likelihood of each choice, accuracy" },
    { "SCORE_JSON", SET_STR, "",     0, 0, "with SCORE: write the per-item results as JSON to this file (-: stdout)" },
    { "REF",      SET_STR,   "",     0, 0, "oracle reference JSON (prompt_ids, full_ids, tf_pred, mtp_pred) for validation" },
    { "TF",       SET_BOOL,  "0",    0, 1, "teacher forcing: a batched prefill of REF's full_ids (chunks of at most BATCH and 1,024 positions), compare argmax with tf_pred" },
    { "MTP",      SET_BOOL,  "0",    0, 1, "with TF=1: also run the MTP head and compare with mtp_pred" },
    { "REPLAY",   SET_BOOL,  "0",    0, 1, "decode REF's full_ids one token at a time as fixed input (decode benchmark)" },
    { "TOKENIZE", SET_STR,   "",     0, 0, "file of JSON strings, one per line: print each one's token ids on a line, then exit (no weights needed)" },
    { "TEMPLATE_ONLY", SET_BOOL, "0", 0, 1, "print the rendered prompt (as a JSON string, then its ids) and exit (no weights needed)" },
    { "STATS",    SET_STR,   "",     0, 0, "write per-(layer, expert) routing counts to this file at exit" },
    { "IDOT",     SET_BOOL,  "1",    0, 1, "integer dot products with int8 activations for quantized weights (0: exact float path)" },
    { "ABSORB",   SET_INT,   "1",    0, 1, "MLA form: 1 weight-absorbed (for every batch size), 0 explicit K/V of every key (a cross-check; memory grows with the context)" },
    { "INDEXER",  SET_STR,   "auto", 0, 0, "DSA indexer: auto (skip scoring while every key fits top-k), always (score and select anyway), off (diagnostic: every causal key visible, not the model's math)" },
    { "LATENT_EPS", SET_FLOAT, "1e-6", 0, 1, "eps of q_a_layernorm / kv_a_layernorm (HF: 1e-6; vLLM uses rms_norm_eps)" },
    { "MTP_ZERO_POS0", SET_BOOL, "1", 0, 1, "MTP: zero the token embedding at position 0 (vLLM rule)" },
};

/* --help's groups: the heading printed before each group's first setting. */
static const SettingGroup SETTING_GROUPS[] = {
    { "SNAP", "model and mode" }, { "NGEN", "generation" }, { "RAM_GB", "memory and performance" },
    { "API_KEY", "the server (with SERVE)" }, { "PPL", "quality measurement (PPL, SCORE)" },
    { "REF", "validation and debugging" },
};

/* Names other programs use for one of our settings. */
static const char *const SETTING_SYNONYMS[][2] = {
    { "TOP_P", "NUCLEUS" }, { "TOPP", "NUCLEUS" }, { "MAX_TOKENS", "NGEN" },
    { "MAX_NEW_TOKENS", "NGEN" }, { "N_PREDICT", "NGEN" }, { "SYSTEM_PROMPT", "SYSTEM" },
    { "MODEL", "SNAP" }, { "MODEL_DIR", "SNAP" }, { "MODEL_PATH", "SNAP" }, { "CONTEXT", "CTX" },
    { "N_CTX", "CTX" }, { "CTX_SIZE", "CTX" }, { "CONTEXT_SIZE", "CTX" },
    { "CONTEXT_LENGTH", "CTX" },
    { "THREAD", "THREADS" }, { "N_THREADS", "THREADS" }, { "THINKING", "THINK" },
    { "ENABLE_THINKING", "THINK" }, { "PORT", "SERVE" }, { "OPENAI_API_KEY", "API_KEY" },
};

static const SettingTable GLM_SETTINGS = {
    "glm", SETTINGS, sizeof SETTINGS / sizeof SETTINGS[0],
    SETTING_GROUPS, sizeof SETTING_GROUPS / sizeof SETTING_GROUPS[0],
    SETTING_SYNONYMS, sizeof SETTING_SYNONYMS / sizeof SETTING_SYNONYMS[0],
};

/* SPEC: which drafters speculative decoding uses (section 9). */
#define SPEC_MAX_DRAFT 16       /* DRAFT's upper bound */
typedef enum { SPEC_OFF, SPEC_MTP, SPEC_NGRAM, SPEC_AUTO } SpecMode;
static const char *const SPEC_MODE_NAMES[] = { "off", "mtp", "ngram", "auto" };

/* What one run does. VALIDATE compares with an oracle reference (REF): TF=1, greedy, REPLAY=1. */
typedef enum {
    MODE_VALIDATE,
    MODE_TOKENIZE,
    MODE_TEMPLATE,
    MODE_PROMPT,
    MODE_CHAT,
    MODE_SERVE,
    MODE_PLAN,
    MODE_DOCTOR,
    MODE_QUALITY
} RunMode;

typedef struct {
    const char *model_dir, *ref_path, *indexer_mode;
    int teacher_forcing, mtp, ngen, absorb, idot, group, threads, batch, ctx, mtp_zero_pos0;
    float latent_eps;
    int cache_slots, expert_bits, dense_bits;   /* positional arguments */
    int cache_slots_given;
    double ram_gb;
    int direct, drop, mmap_mode, in_place, replay, profile, verbose;
    QtKernel kernel;
    int cache_policy;
    SpecMode spec_mode;      /* SPEC */
    int draft;               /* DRAFT */
    const char *stats_path;
    const char *usage;       /* USAGE: a file, "off", or "" for the default file under cache_dir */
    const char *cache_dir;   /* $XDG_CACHE_HOME, else $HOME/.cache; "" when neither is set */
    /* KV_CACHE: a directory, "off", or "" for the default under cache_dir */
    const char *kv_cache;
    double kv_cache_gb;      /* KV_CACHE_GB */
    int plan, plan_json;     /* PLAN=1 or json; PLAN=json */
    int doctor;              /* DOCTOR */
    /* text modes */
    RunMode mode;
    const char *prompt, *system_prompt, *messages_path, *tokenize_path;
    /* CHAT_FORMAT (checked by chat.h when used), REASONING_EFFORT */
    const char *chat_format, *reasoning_effort;
    int prompt_given, chat_template, think, special;
    int chat, template_only; /* CHAT (1, 0 or -1), TEMPLATE_ONLY */
    int think_given;         /* THINK is set: it overrides a resumed session's thinking mode */
    const char *session_path;   /* SESSION, "" when unset */
    const char *schema_path, *grammar_path;   /* SCHEMA, GRAMMAR: "" when unset */
    int prompt_from_stdin;   /* PROMPT=-, or no mode with stdin not a terminal: read_stdin_prompt */
    char *stdin_prompt;      /* what it read (owned) */
    float temperature, top_p;
    uint64_t seed;           /* 0: from the clock */
    /* the server: SERVE (its address, checked), API_KEY, QUEUE, MODEL_NAME, CORS, WEB */
    const char *serve, *api_key, *model_name, *cors;
    int queue, web;
    int slots;                  /* SLOTS: a server's conversations at once */
    /* quality measurement (quality.c): PPL, PPL_JSON, LOGITS_SAVE, KLD, SCORE, SCORE_JSON */
    const char *ppl_path, *ppl_json, *logits_save, *kld_path, *score_path, *score_json;
    int ppl_stride, bos, logits_top;
} Settings;

/* A setting of the table: a name that is not one is a bug here, not the user's. */
static const SettingSpec *setting_spec(const char *name) {
    const SettingSpec *spec = settings_find(&GLM_SETTINGS, name);
    if (!spec) die("internal: unknown setting %s", name);
    return spec;
}

static const char *setting_value(const char *name) { return settings_value(setting_spec(name)); }

/* Variable `name`'s value v read as setting spec; a bad one ends the run with settings.h's
   message naming name=v. */
static double setting_number_of(const SettingSpec *spec, const char *name, const char *v) {
    char err[8192];
    double d = 0;
    if (settings_number(&GLM_SETTINGS, spec, name, v, &d, err, sizeof err)) die("%s", err);
    return d;
}

static double setting_number(const char *name) {
    return setting_number_of(setting_spec(name), name, setting_value(name));
}

/* The CPUs this process may run on (its affinity mask; the online count where that is unknown). */
static int usable_cpus(void) {
    cpu_set_t set;
    if (!sched_getaffinity(0, sizeof set, &set) && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Every setting from the environment into Settings, each value checked (its kind and range, the
   words a string setting takes) in one fixed order, so a run with two bad values always names
   the same one. The positional arguments keep their defaults; the mode and the temperature
   (which only the sampling modes read) are the front end's, which calls this between reading
   argv and choosing the mode (cli.c). */
static Settings settings_from_env(void) {
    Settings s;
    memset(&s, 0, sizeof s);
    s.cache_slots = 64; s.expert_bits = 4; s.dense_bits = 4;
    s.model_dir = setting_value("SNAP");
    s.ref_path = setting_value("REF");
    s.indexer_mode = setting_value("INDEXER");
    if (strcmp(s.indexer_mode, "auto") && strcmp(s.indexer_mode, "always") &&
        strcmp(s.indexer_mode, "off"))
        die("INDEXER=%s: expected auto, always or off", s.indexer_mode);
    s.teacher_forcing = (int)setting_number("TF");
    s.mtp = (int)setting_number("MTP");
    s.ngen = (int)setting_number("NGEN");
    s.absorb = (int)setting_number("ABSORB");
    s.idot = (int)setting_number("IDOT");
    s.group = (int)setting_number("GROUP");
    s.threads = (int)setting_number("THREADS");
    const int cpus = usable_cpus();
    if (s.threads > cpus) {   /* extra threads only take turns on the CPUs and wait on each other */
        say("warning: THREADS=%d is more than the %d CPU%s this process can run on: using %d",
            s.threads, cpus, cpus == 1 ? "" : "s", cpus);
        s.threads = cpus;
    }
    s.batch = (int)setting_number("BATCH");
    s.ctx = (int)setting_number("CTX");
    s.latent_eps = (float)setting_number("LATENT_EPS");
    s.mtp_zero_pos0 = (int)setting_number("MTP_ZERO_POS0");
    s.ram_gb = setting_number("RAM_GB");
    s.direct = (int)setting_number("DIRECT");
    s.drop = (int)setting_number("DROP");
    s.mmap_mode = (int)setting_number("MMAP");
    s.in_place = (int)setting_number("INPLACE");
    s.replay = (int)setting_number("REPLAY");
    s.profile = (int)setting_number("PROFILE");
    s.verbose = (int)setting_number("VERBOSE");
    const char *policy = setting_value("CACHE_POLICY");
    if (!strcmp(policy, "lfu")) s.cache_policy = TIER_LFU;
    else if (!strcmp(policy, "lru")) s.cache_policy = TIER_LRU;
    else die("CACHE_POLICY=%s: expected lfu or lru", policy);
    if (qt_kernel_parse(setting_value("KERNEL"), &s.kernel))
        die("KERNEL=%s: expected auto, vnni, avxvnni, avx2, i8mm, dotprod, neon or scalar",
            setting_value("KERNEL"));
    if (s.kernel != QT_KERNEL_AUTO && !qt_kernel_supported(s.kernel))
        die("KERNEL=%s: this CPU cannot run it", setting_value("KERNEL"));
    const char *spec = setting_value("SPEC");
    int spec_mode = -1;
    for (int m = SPEC_OFF; m <= SPEC_AUTO; m++)
        if (!strcmp(spec, SPEC_MODE_NAMES[m])) spec_mode = m;
    if (spec_mode < 0) die("SPEC=%s: expected auto, mtp, ngram or off", spec);
    s.spec_mode = (SpecMode)spec_mode;
    s.draft = (int)setting_number("DRAFT");
    s.stats_path = setting_value("STATS");
    s.usage = setting_value("USAGE");
    static char cache_dir[4096];
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    /* the spec: relative paths are ignored */
    if (xdg && xdg[0] == '/') snprintf(cache_dir, sizeof cache_dir, "%s", xdg);
    else if (home && home[0]) snprintf(cache_dir, sizeof cache_dir, "%s/.cache", home);
    s.cache_dir = cache_dir;
    s.kv_cache = setting_value("KV_CACHE");
    s.kv_cache_gb = setting_number("KV_CACHE_GB");
    const char *plan = setting_value("PLAN");
    if (strcmp(plan, "0") && strcmp(plan, "1") && strcmp(plan, "json"))
        die("PLAN=%s: expected 1, json or 0", plan);
    s.plan = strcmp(plan, "0") != 0;
    s.plan_json = !strcmp(plan, "json");
    s.doctor = (int)setting_number("DOCTOR");
    s.prompt_given = getenv("PROMPT") != NULL;
    s.prompt = setting_value("PROMPT");
    if (s.prompt_given && !s.prompt[0])
        die("PROMPT is empty: set it to the message to answer (PROMPT=- reads it from stdin), "
            "or unset it");
    s.system_prompt = setting_value("SYSTEM");
    s.messages_path = setting_value("MESSAGES");
    s.tokenize_path = setting_value("TOKENIZE");
    s.chat_template = (int)setting_number("CHAT_TEMPLATE");
    s.think = (int)setting_number("THINK");
    s.think_given = getenv("THINK") != NULL;
    s.session_path = setting_value("SESSION");
    s.schema_path = setting_value("SCHEMA");
    s.grammar_path = setting_value("GRAMMAR");
    s.chat_format = setting_value("CHAT_FORMAT");
    s.reasoning_effort = setting_value("REASONING_EFFORT");
    if (!chat_effort_valid(s.reasoning_effort))
        die("REASONING_EFFORT=%s: expected max or high", s.reasoning_effort);
    s.top_p = (float)setting_number("NUCLEUS");
    s.seed = (uint64_t)setting_number("SEED");
    s.special = (int)setting_number("SPECIAL");
    s.chat = (int)setting_number("CHAT");
    s.template_only = (int)setting_number("TEMPLATE_ONLY");
    s.serve = setting_value("SERVE");
    s.api_key = setting_value("API_KEY");
    s.queue = (int)setting_number("QUEUE");
    s.slots = (int)setting_number("SLOTS");
    s.model_name = setting_value("MODEL_NAME");
    s.cors = setting_value("CORS");
    s.web = (int)setting_number("WEB");
    s.ppl_path = setting_value("PPL");
    s.ppl_stride = (int)setting_number("PPL_STRIDE");
    s.ppl_json = setting_value("PPL_JSON");
    s.bos = (int)setting_number("BOS");
    s.logits_save = setting_value("LOGITS_SAVE");
    s.logits_top = (int)setting_number("LOGITS_TOP");
    s.kld_path = setting_value("KLD");
    s.score_path = setting_value("SCORE");
    s.score_json = setting_value("SCORE_JSON");
    if (s.replay && s.teacher_forcing) die("REPLAY=1 and TF=1 are different modes: set one");
    if (s.group && s.group < 2) die("GROUP=%d: a group needs at least 2 inputs", s.group);
    return s;
}

/* =============================================================================================
   2. Config
   config.json → Config. Every field the forward pass reads (§1.1), validated; anything we do
   not implement is refused by name instead of being computed wrongly.
   ============================================================================================= */

#define MAX_EOS 8

typedef struct {
    int vocab, hidden, n_layers, n_heads;
    int q_lora, kv_lora, qk_nope, qk_rope, qk_head, v_head;
    int inter, moe_inter;
    int n_experts, experts_per_tok, n_shared, n_group, topk_group, norm_topk_prob;
    float routed_scale, rms_eps, rope_theta;
    int index_heads, index_dim, index_topk;
    int n_mtp;                      /* MTP layers stored after the decoder layers (0 or 1) */
    unsigned char *layer_dense;     /* [n_layers + n_mtp]: dense MLP instead of MoE */
    unsigned char *layer_indexer;   /* [n_layers + n_mtp]: full indexer (own weights, own top-k) */
    int eos[MAX_EOS], n_eos;
    int max_positions;              /* max_position_embeddings (0: not given) */
} Config;

typedef struct { const JsonValue *root; const char *path; } ConfigReader;

static const JsonValue *config_field(ConfigReader *r, const char *key) {
    return json_get(r->root, key);
}

static int config_int(ConfigReader *r, const char *key, int fallback, int required, int lo,
                      int hi) {
    const JsonValue *v = config_field(r, key);
    if (!v || json_type(v) == JSON_NULL) {
        if (required) die("%s: field \"%s\" is missing", r->path, key);
        return fallback;
    }
    int64_t i;
    if (!json_is_int(v, &i)) die("%s: field \"%s\" must be an integer", r->path, key);
    if (i < lo || i > hi)
        die("%s: field \"%s\" = %lld is out of range [%d, %d]", r->path, key, (long long)i, lo, hi);
    return (int)i;
}

/* A float field: in [lo, hi] as written, and finite once converted to float (a bound above
   FLT_MAX would otherwise let 1e39 through as infinity). */
static float config_float(ConfigReader *r, const char *key, float fallback, double lo, double hi) {
    const JsonValue *v = config_field(r, key);
    if (!v || json_type(v) == JSON_NULL) return fallback;
    if (json_type(v) != JSON_NUMBER) die("%s: field \"%s\" must be a number", r->path, key);
    double d = json_num(v);
    float f = (float)d;
    if (!(d >= lo && d <= hi) || !isfinite(f))
        die("%s: field \"%s\" = %g is out of range [%g, %g]", r->path, key, d, lo,
            fmin(hi, FLT_MAX));
    return f;
}

static const char *config_string(ConfigReader *r, const char *key) {
    const JsonValue *v = config_field(r, key);
    if (!v || json_type(v) == JSON_NULL) return NULL;
    const char *s = json_str(v, NULL);
    if (!s) die("%s: field \"%s\" must be a string", r->path, key);
    return s;
}

static int config_bool(ConfigReader *r, const char *key, int fallback) {
    const JsonValue *v = config_field(r, key);
    if (!v || json_type(v) == JSON_NULL) return fallback;
    int b = json_bool(v);
    if (b < 0) die("%s: field \"%s\" must be true or false", r->path, key);
    return b;
}

/* A per-layer list of two words (mlp_layer_types, indexer_types) → flags[l] = (word == yes).
   Returns 0 when the key is absent. */
static int config_layer_flags(ConfigReader *r, const char *key, const char *yes, const char *no,
                              unsigned char *flags, int n) {
    const JsonValue *v = config_field(r, key);
    if (!v || json_type(v) == JSON_NULL) return 0;
    if (json_type(v) != JSON_ARRAY || (int)json_len(v) != n)
        die("%s: %s must be a list of %d strings", r->path, key, n);
    for (int l = 0; l < n; l++) {
        const char *t = json_str(json_at(v, (size_t)l), NULL);
        if (t && !strcmp(t, yes)) flags[l] = 1;
        else if (t && !strcmp(t, no)) flags[l] = 0;
        else die("%s: %s[%d] must be \"%s\" or \"%s\"", r->path, key, l, yes, no);
    }
    return 1;
}

static void config_eos(Config *c, const JsonValue *v, const char *path) {
    if (!v) return;
    int64_t id;
    c->n_eos = 0;
    if (json_is_int(v, &id)) {
        if (id < 0 || id >= c->vocab)
            die("%s: eos_token_id %lld is outside the vocabulary (%d)", path, (long long)id,
                c->vocab);
        c->eos[c->n_eos++] = (int)id;
        return;
    }
    if (json_type(v) != JSON_ARRAY) die("%s: eos_token_id must be an integer or a list", path);
    if (json_len(v) > MAX_EOS)
        die("%s: eos_token_id lists %zu ids; at most %d are supported", path, json_len(v), MAX_EOS);
    for (size_t i = 0; i < json_len(v); i++) {
        if (!json_is_int(json_at(v, i), &id))
            die("%s: eos_token_id[%zu] must be an integer", path, i);
        if (id < 0 || id >= c->vocab)
            die("%s: eos_token_id[%zu] = %lld is outside the vocabulary (%d)", path, i,
                (long long)id, c->vocab);
        c->eos[c->n_eos++] = (int)id;
    }
}

/* config.json and generation_config.json are a few KB; anything past this is not one. */
#define CONFIG_JSON_MAX ((size_t)8 << 20)

static Config config_load(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char err[512];
    size_t len;
    char *text = json_read_file_max(path, CONFIG_JSON_MAX, &len, err, sizeof err);
    if (!text) die("cannot read model config: %s", err);
    JsonDoc *doc = json_parse(text, len, err, sizeof err);
    if (!doc) die("%s: %s", path, err);
    ConfigReader r = { json_root(doc), path };
    if (json_type(r.root) != JSON_OBJECT) die("%s: not a JSON object", path);

    const char *model_type = config_string(&r, "model_type");
    if (!model_type) die("%s: field \"model_type\" is missing", path);
    if (strcmp(model_type, "glm_moe_dsa"))
        die("%s: model_type \"%s\" is not supported (glm.c runs glm_moe_dsa, i.e. GLM-5.x)", path,
            model_type);

    Config c;
    memset(&c, 0, sizeof c);
    c.vocab = config_int(&r, "vocab_size", 0, 1, 1, 1 << 24);
    c.hidden = config_int(&r, "hidden_size", 0, 1, 1, 1 << 16);
    c.n_layers = config_int(&r, "num_hidden_layers", 0, 1, 1, 4096);
    c.n_heads = config_int(&r, "num_attention_heads", 0, 1, 1, 4096);
    if (!config_field(&r, "q_lora_rank") || json_type(config_field(&r, "q_lora_rank")) == JSON_NULL)
        die("%s: q_lora_rank is null or missing: attention without a query latent is not supported",
            path);
    c.q_lora = config_int(&r, "q_lora_rank", 0, 1, 1, 1 << 16);
    c.kv_lora = config_int(&r, "kv_lora_rank", 0, 1, 1, 1 << 16);
    c.qk_nope = config_int(&r, "qk_nope_head_dim", 0, 1, 0, 4096);
    c.qk_rope = config_int(&r, "qk_rope_head_dim", 0, 1, 2, 4096);
    /* HF recomputes it; config's qk_head_dim/head_dim are not trusted */
    c.qk_head = c.qk_nope + c.qk_rope;
    c.v_head = config_int(&r, "v_head_dim", 0, 1, 1, 4096);
    if (c.qk_rope % 2)
        die("%s: qk_rope_head_dim = %d must be even (RoPE rotates pairs)", path, c.qk_rope);
    int64_t qkh;
    if (config_field(&r, "qk_head_dim") && json_is_int(config_field(&r, "qk_head_dim"), &qkh) &&
        qkh != c.qk_head)
        die("%s: qk_head_dim = %lld contradicts qk_nope_head_dim + qk_rope_head_dim = %d", path,
            (long long)qkh, c.qk_head);
    c.inter = config_int(&r, "intermediate_size", 0, 1, 1, 1 << 20);
    c.moe_inter = config_int(&r, "moe_intermediate_size", 0, 1, 1, 1 << 20);
    c.n_experts = config_int(&r, "n_routed_experts", 0, 0, 0, 1 << 16);
    if (!c.n_experts) c.n_experts = config_int(&r, "num_local_experts", 0, 1, 1, 1 << 16);
    c.experts_per_tok = config_int(&r, "num_experts_per_tok", 0, 1, 1, c.n_experts);
    c.n_shared = config_int(&r, "n_shared_experts", 1, 0, 0, 64);
    c.n_group = config_int(&r, "n_group", 1, 0, 1, c.n_experts);
    c.topk_group = config_int(&r, "topk_group", 1, 0, 1, c.n_group);
    if (c.n_experts % c.n_group)
        die("%s: n_routed_experts %d is not divisible by n_group %d", path, c.n_experts, c.n_group);
    if (c.experts_per_tok > c.topk_group * (c.n_experts / c.n_group))
        die("%s: num_experts_per_tok %d exceeds the experts left by topk_group %d", path,
            c.experts_per_tok, c.topk_group);
    c.norm_topk_prob = config_bool(&r, "norm_topk_prob", 1);
    c.routed_scale = config_float(&r, "routed_scaling_factor", 2.5f, 0, 1e6);
    c.rms_eps = config_float(&r, "rms_norm_eps", 1e-5f, 0, 1);
    c.index_heads = config_int(&r, "index_n_heads", 32, 0, 1, 4096);
    c.index_dim = config_int(&r, "index_head_dim", 128, 0, 1, 4096);
    c.index_topk = config_int(&r, "index_topk", 2048, 0, 1, 1 << 30);
    if (c.index_dim < c.qk_rope)
        die("%s: index_head_dim %d is smaller than qk_rope_head_dim %d", path, c.index_dim,
            c.qk_rope);
    c.max_positions = config_int(&r, "max_position_embeddings", 0, 0, 0, INT32_MAX);
    c.n_mtp = config_int(&r, "num_nextn_predict_layers", 0, 0, 0, 16);
    if (c.n_mtp > 1)
        die("%s: num_nextn_predict_layers = %d: only one MTP layer is supported", path, c.n_mtp);

    const char *act = config_string(&r, "hidden_act");
    if (act && strcmp(act, "silu"))
        die("%s: hidden_act \"%s\" is not supported (only silu)", path, act);
    const char *scoring = config_string(&r, "scoring_func");
    if (scoring && strcmp(scoring, "sigmoid"))
        die("%s: scoring_func \"%s\" is not supported (only sigmoid)", path, scoring);
    const char *topk_method = config_string(&r, "topk_method");
    if (topk_method && strcmp(topk_method, "noaux_tc"))
        die("%s: topk_method \"%s\" is not supported (only noaux_tc)", path, topk_method);
    if (config_bool(&r, "attention_bias", 0))
        die("%s: attention_bias = true is not supported", path);
    if (config_bool(&r, "tie_word_embeddings", 0))
        die("%s: tie_word_embeddings = true is not supported", path);
    if (!config_bool(&r, "rope_interleave", 1))
        die("%s: rope_interleave = false (NeoX RoPE) is not GLM-5's convention", path);
    if (!config_bool(&r, "indexer_rope_interleave", 1))
        die("%s: indexer_rope_interleave = false is not GLM-5's convention", path);

    /* RoPE: rope_parameters (new) or rope_theta + rope_scaling (legacy). Only plain RoPE exists
       in GLM-5.x; YaRN and friends would need mscale terms we do not implement. */
    c.rope_theta = 10000.0f;
    const JsonValue *rp = config_field(&r, "rope_parameters");
    const JsonValue *rs = config_field(&r, "rope_scaling");
    if (rp && json_type(rp) != JSON_OBJECT && json_type(rp) != JSON_NULL)
        die("%s: rope_parameters must be an object", path);
    if (rs && json_type(rs) != JSON_OBJECT && json_type(rs) != JSON_NULL)
        die("%s: rope_scaling must be an object or null", path);
    const JsonValue *rope_obj = rp && json_type(rp) == JSON_OBJECT   ? rp
                                : rs && json_type(rs) == JSON_OBJECT ? rs
                                                                     : NULL;
    c.rope_theta = config_float(&r, "rope_theta", c.rope_theta, 1e-3, 1e30);
    if (rope_obj) {
        /* the same checks as the top-level field, with the object's name in the message */
        char rope_path[4200];
        snprintf(rope_path, sizeof rope_path, "%s: %s", path,
                 rope_obj == rp ? "rope_parameters" : "rope_scaling");
        ConfigReader rope = { rope_obj, rope_path };
        c.rope_theta = config_float(&rope, "rope_theta", c.rope_theta, 1e-3, 1e30);
        const JsonValue *type = json_get(rope_obj, "rope_type");
        if (!type) type = json_get(rope_obj, "type");
        const char *ts = type ? json_str(type, NULL) : "default";
        if (!ts) die("%s: rope_type must be a string", path);
        if (strcmp(ts, "default"))
            die("%s: rope_type \"%s\" is not implemented (GLM-5.x uses plain \"default\" RoPE)",
                path, ts);
    }

    /* Which layers are dense: mlp_layer_types if given, else first_k_dense_replace. MTP layers
       are MoE layers with their own indexer. */
    int nl = c.n_layers + c.n_mtp;
    c.layer_dense = xcalloc((size_t)nl, 1);
    c.layer_indexer = xcalloc((size_t)nl, 1);
    int first_dense = config_int(&r, "first_k_dense_replace", 3, 0, 0, c.n_layers);
    if (!config_layer_flags(&r, "mlp_layer_types", "dense", "sparse", c.layer_dense, c.n_layers))
        for (int l = 0; l < c.n_layers; l++) c.layer_dense[l] = l < first_dense;

    /* IndexShare schedule (§4.6): indexer_types > index_topk_pattern > the HF formula. */
    const char *pattern = config_string(&r, "index_topk_pattern");
    if (config_layer_flags(&r, "indexer_types", "full", "shared", c.layer_indexer, c.n_layers)) {
        /* the explicit list wins */
    } else if (pattern) {
        if ((int)strlen(pattern) != c.n_layers)
            die("%s: index_topk_pattern must have %d characters", path, c.n_layers);
        for (int l = 0; l < c.n_layers; l++) {
            if (pattern[l] != 'F' && pattern[l] != 'S')
                die("%s: index_topk_pattern[%d] must be F or S", path, l);
            c.layer_indexer[l] = pattern[l] == 'F';
        }
    } else {
        int freq = config_int(&r, "index_topk_freq", 1, 0, 1, 1 << 20);
        int offset = config_int(&r, "index_skip_topk_offset", 2, 0, 0, 1 << 20);
        for (int l = 0; l < c.n_layers; l++) {
            int k = l - offset + 1;
            c.layer_indexer[l] = (k > 0 ? k : 0) % freq == 0;
        }
    }
    if (!c.layer_indexer[0])
        die("%s: layer 0 must have a full indexer (a shared layer needs one below it)", path);
    for (int l = c.n_layers; l < nl; l++) { c.layer_indexer[l] = 1; c.layer_dense[l] = 0; }

    c.eos[0] = -1;
    config_eos(&c, config_field(&r, "eos_token_id"), path);
    /* generation_config.json, when present, has the authoritative stop list. */
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (access(path, R_OK) == 0) {
        char *gtext = json_read_file_max(path, CONFIG_JSON_MAX, &len, err, sizeof err);
        if (!gtext) die("%s", err);
        JsonDoc *gdoc = json_parse(gtext, len, err, sizeof err);
        if (!gdoc) die("%s: %s", path, err);
        config_eos(&c, json_get(json_root(gdoc), "eos_token_id"), path);
        json_free(gdoc);
        free(gtext);
    }
    for (int i = 0; i < c.n_eos; i++)
        if (c.eos[i] < 0 || c.eos[i] >= c.vocab)
            die("eos_token_id %d is outside the vocabulary (%d)", c.eos[i], c.vocab);
    json_free(doc);
    free(text);
    return c;
}

/* =============================================================================================
   3. Weights
   Every matrix is a QTensor (quant.h). A tensor NAME with a companion NAME.qs is pre-quantized
   (docs/format.md §3): its format is inferred from byte counts and checked against the file's
   optional colibri.fmt stamp. Any other tensor is float on disk (F32/BF16/F16/F8_E4M3) and is
   quantized here, at load, to the bits the user asked for — in row chunks, so a huge tensor
   never needs a full f32 copy.
   ============================================================================================= */

typedef struct {
    StIndex *index;
    const char *dir;
    int group;                 /* GROUP for load-time int4 */
    JsonDoc **format_stamps;   /* per file: parsed colibri.fmt, or NULL */
    int nfiles;
    size_t bytes_loaded;       /* read from disk */
    double resident_bytes;     /* kept in RAM */
    /* check headers and count resident_bytes only: no allocation, no read (RAM plan) */
    int dry;
    int noting;                /* with dry: note the byte ranges a load reads (loader_snapshot) */
    /* those ranges, sorted and merged, with what the page cache held of them */
    struct CachedRange *ranges;
    int n_ranges, cap_ranges;
} Loader;

static QtFormat format_for_bits(int bits, int group) {
    switch (bits) {
    case 16: return QT_F32;
    case 8: return QT_INT8_ROW;
    case 4: return group ? QT_INT4_GROUP : QT_INT4_ROW;
    default: return QT_INT2_ROW;
    }
}

/* The shard file model.safetensors.index.json (Hugging Face's map from tensor to file) in `dir`
   names for tensor `name` (NULL: for its first tensor), in `file`: 1, or 0 when there is no such
   index or it does not name it. glm does not need the index (it reads every *.safetensors in the
   folder); it only says which file a missing tensor should have come from. */
static int index_json_file_of(const char *dir, const char *name, char *file, size_t n) {
    char path[4200], err[512];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    size_t len;
    char *text = access(path, F_OK) ? NULL : json_read_file(path, &len, err, sizeof err);
    JsonDoc *doc = text ? json_parse(text, len, err, sizeof err) : NULL;
    const JsonValue *map = doc ? json_get(json_root(doc), "weight_map") : NULL;
    size_t klen = 0;
    const char *first = name || !map ? NULL : json_key_at(map, 0, &klen);
    const JsonValue *v = !map ? NULL : name ? json_get(map, name)
                                     : first ? json_getn(map, first, klen) : NULL;
    const char *s = json_str(v, NULL);
    if (s) snprintf(file, n, "%s", s);
    json_free(doc);
    free(text);
    return s != NULL;
}

/* A tensor the model needs and no shard holds: named with the file the index puts it in. */
static void die_missing_tensor(const char *dir, const char *name) {
    char file[1024], path[5300];
    if (!index_json_file_of(dir, name, file, sizeof file))
        die("%s: tensor %s is missing", dir, name);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    struct stat sb;
    die("%s: tensor %s is missing: model.safetensors.index.json puts it in %s, which %s", dir, name,
        file,
        strchr(file, '/') ? "is outside the folder (glm reads only the folder's own *.safetensors)"
        : stat(path, &sb) ? "is not in the folder (an incomplete download or conversion?)"
                          : "does not hold it (the index and the shards disagree)");
}

static const StTensor *loader_require(Loader *ld, const char *name) {
    const StTensor *t = st_find(ld->index, name);
    if (!t) die_missing_tensor(ld->dir, name);
    return t;
}

/* The colibri.fmt stamp of a file: a JSON object (stored as a string) from tensor name to format.
   */
static const JsonValue *loader_format_stamp(Loader *ld, int file) {
    if (!ld->format_stamps) {
        int n = 0;
        for (size_t i = 0; i < st_count(ld->index); i++)
            if (st_tensor_at(ld->index, i)->file + 1 > n) n = st_tensor_at(ld->index, i)->file + 1;
        ld->nfiles = n;
        ld->format_stamps = xcalloc((size_t)n + 1, sizeof(JsonDoc *));
        for (int f = 0; f < n; f++) {
            const char *s = st_file_metadata(ld->index, f, "colibri.fmt");
            if (!s) continue;
            char err[256];
            ld->format_stamps[f] = json_parse(s, strlen(s), err, sizeof err);
            if (!ld->format_stamps[f] || json_type(json_root(ld->format_stamps[f])) != JSON_OBJECT)
                die("%s: __metadata__ colibri.fmt is not a JSON object: %s",
                    st_file_path(ld->index, f), err);
        }
    }
    return ld->format_stamps[file] ? json_root(ld->format_stamps[file]) : NULL;
}

static void loader_free(Loader *ld) {
    for (int f = 0; ld->format_stamps && f < ld->nfiles; f++) json_free(ld->format_stamps[f]);
    free(ld->format_stamps);
    ld->format_stamps = NULL;
}

/* The load leaves the page cache as it found it. glm keeps its own copy of every resident tensor,
   so file pages that the load itself brought into the page cache would hold those weights twice
   (~10 GB for GLM-5.2) until the kernel reclaims them, which it does only when the expert slots
   or the KV cache fault in and have to wait for it. Pages that were cached before the load stay,
   so a warm machine still loads from RAM next time. On the bench fixture, 7 alternating pairs of
   cold 255-token runs (medians): load 1.45 s against 2.22, prefill 2.69 s against 3.08, start to
   exit 4.6 s against 5.8 (memory the process has just given back faults in far faster than memory
   that has been free for a few seconds). What was cached is noted for every range
   before the first read (the RAM plan's dry walk, loader_snapshot): reading one tensor caches the
   start of the next one too (read-ahead, large folios), so a note taken tensor by tensor would keep
   those pages. What stays: the headers (read before the snapshot, ~1.3 MB per file here) and a
   large folio that straddles the end of a range (the kernel drops only whole ones). */
typedef struct CachedRange {
    int file;
    uint64_t first, end;      /* page-aligned byte range */
    /* per page, bit 0: in the page cache before the load; NULL: unknown (nothing is dropped) */
    unsigned char *cached;
} CachedRange;

static void loader_note(Loader *ld, int file, uint64_t off, uint64_t len) {
    if (!ld->noting || !len) return;
    if (ld->n_ranges == ld->cap_ranges) {
        ld->cap_ranges = ld->cap_ranges ? 2 * ld->cap_ranges : 64;
        ld->ranges = realloc(ld->ranges, (size_t)ld->cap_ranges * sizeof *ld->ranges);
        if (!ld->ranges) die("out of memory noting the tensors to load");
    }
    const uint64_t page = page_bytes();
    ld->ranges[ld->n_ranges++] =
        (CachedRange){ file, off / page * page, (off + len + page - 1) / page * page, NULL };
}

static int cached_range_order(const void *pa, const void *pb) {
    const CachedRange *a = pa, *b = pb;
    if (a->file != b->file) return a->file < b->file ? -1 : 1;
    return a->first < b->first ? -1 : a->first > b->first;
}

/* Once a dry walk has noted the ranges (ld->noting): merges them and notes which of their pages
   the page cache holds now. */
static void loader_snapshot(Loader *ld) {
    ld->noting = 0;
    if (!ld->n_ranges) return;
    qsort(ld->ranges, (size_t)ld->n_ranges, sizeof *ld->ranges, cached_range_order);
    int n = 0;
    for (int i = 0; i < ld->n_ranges; i++) {   /* merge ranges that overlap or touch */
        CachedRange *last = n ? &ld->ranges[n - 1] : NULL;
        if (last && last->file == ld->ranges[i].file && ld->ranges[i].first <= last->end) {
            if (ld->ranges[i].end > last->end) last->end = ld->ranges[i].end;
        } else ld->ranges[n++] = ld->ranges[i];
    }
    ld->n_ranges = n;
    const uint64_t page = page_bytes();
    for (int i = 0; i < n; i++) {
        CachedRange *r = &ld->ranges[i];
        void *map = mmap(NULL, (size_t)(r->end - r->first), PROT_READ, MAP_SHARED,
                         st_file_fd(ld->index, r->file), (off_t)r->first);
        if (map == MAP_FAILED) continue;
        r->cached = xmalloc((size_t)((r->end - r->first) / page));
        if (mincore(map, (size_t)(r->end - r->first), r->cached)) {
            free(r->cached);
            r->cached = NULL;
        }
        munmap(map, (size_t)(r->end - r->first));
    }
}

/* Drops the pages of r in [a, b) (page-aligned) that were not cached before the load. */
static void cached_range_drop(const Loader *ld, const CachedRange *r, uint64_t a, uint64_t b) {
    if (!r->cached) return;
    const uint64_t page = page_bytes();
    const uint64_t p1 = ((b < r->end ? b : r->end) - r->first) / page;
    for (uint64_t p = ((a > r->first ? a : r->first) - r->first) / page; p < p1;) {
        if (r->cached[p] & 1) { p++; continue; }
        uint64_t q = p;
        while (q < p1 && !(r->cached[q] & 1)) q++;
        posix_fadvise(st_file_fd(ld->index, r->file), (off_t)(r->first + p * page),
                      (off_t)((q - p) * page), POSIX_FADV_DONTNEED);
        p = q;
    }
}

/* Drops the pages of [off, off + len) of `file` (whole pages around it) that were not cached
   before the load. */
static void loader_drop_new(const Loader *ld, int file, uint64_t off, uint64_t len) {
    const uint64_t page = page_bytes(), a = off / page * page,
                   b = (off + len + page - 1) / page * page;
    for (int i = 0; i < ld->n_ranges; i++) {
        const CachedRange *r = &ld->ranges[i];
        if (r->file == file && r->end > a && r->first < b) cached_range_drop(ld, r, a, b);
    }
}

/* After the load: the last drop over every range (the pages a later read cached again), then the
   notes go. */
static void loader_release_snapshot(Loader *ld) {
    for (int i = 0; i < ld->n_ranges; i++) {
        cached_range_drop(ld, &ld->ranges[i], ld->ranges[i].first, ld->ranges[i].end);
        free(ld->ranges[i].cached);
    }
    free(ld->ranges);
    ld->ranges = NULL;
    ld->n_ranges = ld->cap_ranges = 0;
}

/* Index of the first value that is not finite (or negative, for scales), or -1. A corrupt weight
   or scale would silently poison every output, so the loaders refuse it by name. Each load of a
   routed expert checks its ~590,000 scales: a block of values is tested without an early exit
   (gcc vectorizes that; the plain loop with its `return` ran one float per cycle, ~0.1 s of the
   I/O thread's time in a warm 255-token prefill on 2 cores), and only a bad block is searched. */
enum { VALUE_CHECK_BLOCK = 1024 };

/* finite, and for scales also >= 0 (-0 passes); written with & so that a block's test vectorizes */
static inline int value_ok(float x, int scale) {
    return scale ? (x >= 0.0f) & (x <= FLT_MAX) : fabsf(x) <= FLT_MAX;
}

static int64_t first_failing_value(const float *v, int64_t n, int scale) {
    for (int64_t i0 = 0; i0 < n; i0 += VALUE_CHECK_BLOCK) {
        const int64_t i1 = n - i0 < VALUE_CHECK_BLOCK ? n : i0 + VALUE_CHECK_BLOCK;
        int ok = 1;
        for (int64_t i = i0; i < i1; i++) ok &= value_ok(v[i], scale);
        if (!ok)
            for (int64_t i = i0; i < i1; i++) if (!value_ok(v[i], scale)) return i;
    }
    return -1;
}

static int64_t first_nonfinite(const float *v, int64_t n) { return first_failing_value(v, n, 0); }
static int64_t first_bad_scale(const float *v, int64_t n) { return first_failing_value(v, n, 1); }

/* The format of a pre-quantized tensor (NAME + NAME.qs) of logical shape [rows, cols], from its
   byte counts, checked against dtypes and the file's colibri.fmt stamp. Used for resident tensors
   and routed experts alike. */
static void prequantized_format(Loader *ld, const char *name, const StTensor *data,
                                const StTensor *qs, int64_t rows, int64_t cols, QtFormat *f,
                                int64_t *group) {
    const char *file = st_file_path(ld->index, data->file);
    if (data->dtype != ST_U8 && data->dtype != ST_I8)
        die("%s: tensor %s: pre-quantized data must be U8 or I8, not %s", file, name,
            st_dtype_name(data->dtype));
    if (qs->dtype != ST_F32)
        die("%s: tensor %s.qs: scales must be F32, not %s", file, name, st_dtype_name(qs->dtype));
    if (qt_infer_format(rows, cols, (int64_t)data->nbytes, st_numel(qs), f, group))
        die("%s: tensor %s: %llu bytes and %lld scales fit no quantized format for shape [%lld, "
            "%lld]",
            file, name, (unsigned long long)data->nbytes, (long long)st_numel(qs), (long long)rows,
            (long long)cols);
    const JsonValue *stamp = loader_format_stamp(ld, data->file);
    const char *declared = stamp ? json_str(json_get(stamp, name), NULL) : NULL;
    if (declared && strcmp(declared, qt_format_name(*f)))
        die("%s: tensor %s: colibri.fmt says %s but its byte counts mean %s", file, name, declared,
            qt_format_name(*f));
}

/* The memory of a resident tensor (every loader allocates it here): its codes and scales (one
   block) advised for huge pages before anything fills them (advise_huge_pages: pread() into plain
   4 KiB pages made the first matmul over them ~30x slower; and the GEMM's TLB misses
   on scales in 4 KiB pages, qt_alloc). */
static void alloc_resident(QTensor *t, QtFormat f, int64_t group, int64_t rows, int64_t cols,
                           const char *name) {
    if (qt_alloc(t, f, group, rows, cols)) die("out of memory for tensor %s", name);
    advise_huge_pages(t->data, qt_alloc_bytes(t));
}

/* Reads a pre-quantized tensor (NAME + NAME.qs) as a [rows, cols] QTensor. */
static void load_prequantized(Loader *ld, const char *name, const StTensor *data,
                              const StTensor *qs, int64_t rows, int64_t cols, QTensor *out) {
    QtFormat f;
    int64_t group;
    prequantized_format(ld, name, data, qs, rows, cols, &f, &group);
    ld->resident_bytes += (double)data->nbytes + (double)qs->nbytes;
    if (ld->dry) {
        loader_note(ld, data->file, data->offset, data->nbytes);
        loader_note(ld, qs->file, qs->offset, qs->nbytes);
        return;
    }
    alloc_resident(out, f, group, rows, cols, name);
    char err[512];
    if (st_read_raw(ld->index, data, out->data, err, sizeof err)) die("%s", err);
    if (st_read_raw(ld->index, qs, out->scales, err, sizeof err)) die("%s", err);
    loader_drop_new(ld, data->file, data->offset, data->nbytes);
    loader_drop_new(ld, qs->file, qs->offset, qs->nbytes);
    int64_t bad = first_bad_scale(out->scales, st_numel(qs));
    if (bad >= 0)
        die("%s: tensor %s.qs: scale %lld is %g (must be finite and >= 0)",
            st_file_path(ld->index, qs->file), name, (long long)bad, out->scales[bad]);
    ld->bytes_loaded += data->nbytes + qs->nbytes;
}

/* Loads rows [row0, row0+rows) of float tensor `t` (viewed as [*, cols]) and quantizes them. */
static void load_float_rows(Loader *ld, const char *name, const StTensor *t, int64_t row0,
                            int64_t rows, int64_t cols, int bits, QTensor *out) {
    const QtFormat f = format_for_bits(bits, ld->group);
    const int64_t groups = f == QT_F32          ? 0
                           : f == QT_INT4_GROUP ? (cols + ld->group - 1) / ld->group
                                                : 1; /* scales per row */
    ld->resident_bytes +=
        (double)(rows * qt_row_bytes(f, cols)) + (double)(rows * groups) * sizeof(float);
    const uint64_t row_bytes = (uint64_t)cols * st_dtype_size(t->dtype);
    if (ld->dry) {
        loader_note(ld, t->file, t->offset + (uint64_t)row0 * row_bytes,
                    (uint64_t)rows * row_bytes);
        return;
    }
    alloc_resident(out, f, ld->group, rows, cols, name);
    const int64_t chunk_rows = (int64_t)(1 << 24) / cols + 1;   /* ~64 MB of f32 at a time */
    float *buf = xmalloc((size_t)((chunk_rows < rows ? chunk_rows : rows) * cols) * sizeof(float));
    char err[512];
    for (int64_t r = 0; r < rows; r += chunk_rows) {
        int64_t n = rows - r < chunk_rows ? rows - r : chunk_rows;
        if (st_read_f32_rows(ld->index, t, row0 + r, n, buf, err, sizeof err)) die("%s", err);
        int64_t bad = first_nonfinite(buf, n * cols);
        if (bad >= 0)
            die("%s: tensor %s: value at row %lld is not finite", st_file_path(ld->index, t->file),
                name, (long long)(row0 + r + bad / cols));
        qt_quantize_rows(out, r, n, buf);
    }
    loader_drop_new(ld, t->file, t->offset + (uint64_t)row0 * row_bytes,
                    (uint64_t)rows * row_bytes);
    free(buf);
    ld->bytes_loaded += (size_t)(rows * cols) * st_dtype_size(t->dtype);
}

/* A 2-D weight [rows, cols] by name: pre-quantized if NAME.qs exists, else float → `bits`. */
static void load_matrix(Loader *ld, const char *name, int64_t rows, int64_t cols, int bits,
                        QTensor *out) {
    const StTensor *t = loader_require(ld, name);
    char qs_name[512];
    snprintf(qs_name, sizeof qs_name, "%s.qs", name);
    const StTensor *qs = st_find(ld->index, qs_name);
    if (qs) { load_prequantized(ld, name, t, qs, rows, cols, out); return; }
    if (t->dtype == ST_U8 || t->dtype == ST_I8)
        die("%s: tensor %s is %s but has no %s companion", st_file_path(ld->index, t->file), name,
            st_dtype_name(t->dtype), qs_name);
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols) {
        char shape[128] = "[";
        for (int d = 0; d < t->ndim; d++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", d ? ", " : "",
                     (long long)t->shape[d]);
        die("%s: tensor %s has shape %s], expected [%lld, %lld]", st_file_path(ld->index, t->file),
            name, shape, (long long)rows, (long long)cols);
    }
    load_float_rows(ld, name, t, 0, rows, cols, bits, out);
}

/* The MTP layer drafts well only at >= 8 bits (an int4 head loses nearly all draft acceptance,
   docs/format.md §5), so whatever dense_bits / expert_bits say, its matrices are quantized at load
   to at least int8 (16 = f32 stays f32). Pre-quantized tensors are used as they are (model_load
   notes an MTP layer stored below 8 bits). */
static int mtp_bits(int bits) { return bits >= 8 ? bits : 8; }

/* eh_proj [H, 2H] as its two column halves, each quantized on its own (one scale per row of each
   half): columns 0..H-1 take enorm(embedding), H..2H-1 take hnorm(hidden), and on GLM-5.2 the two
   halves differ 20-30x in scale. One int8 scale per full row would leave the small half ~5 of the
   127 levels (int4 per row: ~0, hence the published 0 % acceptance); per half, each half keeps all
   127, and the activations (quantized per row of each product with IDOT=1) get a scale per half
   too. The product becomes two matmuls and one add (mtp_forward). A float tensor is quantized per
   half at `bits`; a pre-quantized one is split exactly (its codes and scales copied, so nothing is
   requantized). */
static void load_eh_proj(Loader *ld, const char *name, int64_t H, int bits, QTensor half[2]) {
    const StTensor *t = loader_require(ld, name);
    char qs_name[512];
    snprintf(qs_name, sizeof qs_name, "%s.qs", name);
    if (st_find(ld->index, qs_name)) {
        QTensor whole;
        load_matrix(ld, name, H, 2 * H, bits, &whole);
        if (ld->dry) return;   /* the RAM plan: the halves take what the whole takes */
        const int64_t half_bytes = qt_row_bytes(whole.format, H), gpr = qt_groups_per_row(&whole);
        const int per_row = whole.format != QT_INT4_GROUP;
        if (half_bytes * 2 != whole.row_bytes || (!per_row && H % whole.group))
            die("%s: tensor %s (%s) cannot be split into its two column halves of %lld; convert it "
                "again",
                st_file_path(ld->index, t->file), name, qt_format_name(whole.format), (long long)H);
        for (int k = 0; k < 2; k++) {
            alloc_resident(&half[k], whole.format, whole.group, H, H, name);
            const int64_t half_groups = qt_groups_per_row(&half[k]);
            for (int64_t r = 0; r < H; r++) {
                memcpy(half[k].data + r * half_bytes,
                       whole.data + r * whole.row_bytes + k * half_bytes, (size_t)half_bytes);
                if (per_row) half[k].scales[r] = whole.scales[r];
                else
                    memcpy(half[k].scales + r * half_groups,
                           whole.scales + r * gpr + k * half_groups,
                           (size_t)half_groups * sizeof(float));
            }
        }
        qt_free(&whole);
        return;
    }
    if (t->ndim != 2 || t->shape[0] != H || t->shape[1] != 2 * H)
        die("%s: tensor %s must have shape [%lld, %lld]", st_file_path(ld->index, t->file), name,
            (long long)H, (long long)(2 * H));
    /* the RAM plan: two [H, H] matrices at `bits`, counted as load_float_rows counts them */
    if (ld->dry) {
        for (int k = 0; k < 2; k++) load_float_rows(ld, name, t, 0, H, H, bits, &half[k]);
        loader_note(ld, t->file, t->offset, t->nbytes);
        return;
    }
    for (int k = 0; k < 2; k++)
        alloc_resident(&half[k], format_for_bits(bits, ld->group), ld->group, H, H, name);
    const int64_t chunk_rows = (int64_t)(1 << 23) / H + 1;   /* ~64 MB of f32 at a time */
    float *buf = xmalloc((size_t)((chunk_rows < H ? chunk_rows : H) * 2 * H) * sizeof(float));
    char err[512];
    for (int64_t r0 = 0; r0 < H; r0 += chunk_rows) {
        const int64_t n = H - r0 < chunk_rows ? H - r0 : chunk_rows;
        if (st_read_f32_rows(ld->index, t, r0, n, buf, err, sizeof err)) die("%s", err);
        int64_t bad = first_nonfinite(buf, n * 2 * H);
        if (bad >= 0)
            die("%s: tensor %s: value at row %lld is not finite", st_file_path(ld->index, t->file),
                name, (long long)(r0 + bad / (2 * H)));
        for (int k = 0; k < 2; k++) {
            QTensor *q = &half[k];
            const int64_t gpr = q->format == QT_F32 ? 0 : qt_groups_per_row(q);
            for (int64_t r = 0; r < n; r++)
                qt_quantize_row(q->format, q->group, buf + (size_t)r * 2 * H + k * H, H,
                                q->data + (r0 + r) * q->row_bytes,
                                q->scales ? q->scales + (r0 + r) * gpr : NULL);
        }
    }
    loader_drop_new(ld, t->file, t->offset, t->nbytes);
    free(buf);
    ld->bytes_loaded += (size_t)(2 * H * H) * st_dtype_size(t->dtype);
    for (int k = 0; k < 2; k++)
        ld->resident_bytes += (double)(H * half[k].row_bytes) +
                              (half[k].scales ? (double)(H * qt_groups_per_row(&half[k])) * 4 : 0);
}

/* A 1-D float vector (norm weights, biases), kept in f32. */
static float *load_vector(Loader *ld, const char *name, int64_t n) {
    const StTensor *t = loader_require(ld, name);
    if (st_numel(t) != n || t->ndim != 1)
        die("%s: tensor %s has %lld elements in %d dims, expected a vector of %lld",
            st_file_path(ld->index, t->file), name, (long long)st_numel(t), t->ndim, (long long)n);
    if (t->dtype == ST_U8 || t->dtype == ST_I8)
        die("%s: tensor %s must be float", st_file_path(ld->index, t->file), name);
    ld->resident_bytes += (double)n * sizeof(float);
    if (ld->dry) { loader_note(ld, t->file, t->offset, t->nbytes); return NULL; }
    float *v = xmalloc((size_t)n * sizeof(float));
    char err[512];
    if (st_read_f32(ld->index, t, v, err, sizeof err)) die("%s", err);
    loader_drop_new(ld, t->file, t->offset, t->nbytes);
    int64_t bad = first_nonfinite(v, n);
    if (bad >= 0)
        die("%s: tensor %s: element %lld is not finite", st_file_path(ld->index, t->file), name,
            (long long)bad);
    ld->bytes_loaded += t->nbytes;
    return v;
}

/* =============================================================================================
   4. Kernels
   All matrix products go through matmul(): y[S][rows] = x[S][cols] · Wᵀ. quant.h holds the
   kernels (scalar reference, AVX2, AVX-VNNI, AVX-512 VNNI; row kernels for decode, GEMM kernels
   for batches); each output element has one fixed reduction order, so a row's result never
   depends on the batch size, the thread count or the kernel.
   ============================================================================================= */

static int g_integer_dot = 1;   /* IDOT, set once from Settings before any forward */

static void matmul(float *y, const QTensor *w, const float *x, int S) {
    qt_matmul(w, x, y, S, g_integer_dot);
}

/* A view of rows [row0, row0+n) of a row-major QTensor (no copy): per-head slices of kv_b. */
static QTensor qt_row_view(const QTensor *t, int64_t row0, int64_t n) {
    return qt_view(t->format, t->group, n, t->cols, t->data + row0 * t->row_bytes,
                   t->scales ? t->scales + row0 * qt_groups_per_row(t) : NULL);
}

static float dot(const float *a, const float *b, int n) { return qt_dot_f32(a, b, n); }

/* Per-row work of a batch (norms, RoPE, routing) goes to the threads from this many rows on
   (below, waking them costs more than the work). */
enum { ROWS_PARALLEL = 16 };

static void vec_add(float *y, const float *x, int n) {
    #pragma omp parallel for schedule(static) if (n >= ROWS_PARALLEL * 4096)
    for (int i = 0; i < n; i++) y[i] += x[i];
}

/* RMSNorm exactly as §3.2: normalize first, then multiply by the weight; eps inside the sqrt. */
static void rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) out[i] = w[i] * (x[i] * r);
}

/* LayerNorm with bias (the indexer's k_norm, §4.1): biased variance. */
static void layernorm(float *out, const float *x, const float *w, const float *b, int n,
                      float eps) {
    float mean = 0.0f, var = 0.0f;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= (float)n;
    for (int i = 0; i < n; i++) { float d = x[i] - mean; var += d * d; }
    var /= (float)n;
    float r = 1.0f / sqrtf(var + eps);
    for (int i = 0; i < n; i++) out[i] = (x[i] - mean) * r * w[i] + b[i];
}

static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

static int argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (v[i] > v[best]) best = i;
    return best;
}

/* =============================================================================================
   5. Attention: MLA with a compressed KV cache, RoPE, and the DSA lightning indexer
   Per token and layer the cache keeps only the normalized KV latent c (kv_lora floats) and the
   rotated shared key kr (qk_rope floats), plus the indexer key kI on full-indexer layers (§4.6).
   Every batch uses the weight-absorbed form (§3.5), which never expands per-head keys: all 64
   heads of a row score and pool the same cached latents, as matrix products with the heads in
   vector lanes. ABSORB=0 expands K/V explicitly instead (a cross-check; memory grows with the
   context).
   ============================================================================================= */

typedef struct { QTensor gate, up, down; } FfnWeights;   /* SwiGLU: down(silu(gate·m) ⊙ up·m) */

typedef struct {
    float *input_norm, *post_attn_norm, *q_a_norm, *kv_a_norm;
    QTensor q_a, q_b, kv_a, kv_b, o;
    /* DSA indexer (full layers only) */
    int has_indexer;
    QTensor index_wq_b, index_wk, index_weights;   /* index_weights = weights_proj */
    float *index_k_norm_w, *index_k_norm_b;
    /* feed-forward */
    int dense;
    FfnWeights mlp;          /* dense MLP, or the shared expert of a MoE layer */
    int has_shared;
    QTensor router;          /* f32 [n_experts, hidden] */
    float *router_bias;      /* e_score_correction_bias */
    /* MTP layer only */
    float *enorm, *hnorm, *shared_head_norm;
    /* eh_proj's column halves: [0] takes enorm(e), [1] hnorm(h) (load_eh_proj) */
    QTensor eh_proj[2];
} Layer;

enum { INDEXER_AUTO, INDEXER_ALWAYS, INDEXER_OFF };

/* How the forward pass computes (from Settings, once; every layer reads it from here). */
typedef struct {
    int absorb;              /* 1: weight-absorbed MLA (ABSORB=1), 0: explicit K/V */
    int indexer_mode;        /* INDEXER_AUTO / _ALWAYS / _OFF */
    float latent_eps;        /* eps of q_a_layernorm / kv_a_layernorm (LATENT_EPS) */
    int mtp_zero_pos0;       /* MTP: zero the token embedding at position 0 */
} ForwardOptions;

/* Per-conversation state: the KV cache and scratch sized for BATCH positions. */
typedef struct {
    int capacity;            /* tokens the cache holds */
    int max_batch;
    int n_layers;            /* layers with a cache (the MTP layer included) */
    float **latent;          /* [layers][capacity][kv_lora] */
    float **rope_key;        /* [layers][capacity][qk_rope] */
    float **index_key;       /* [layers][capacity][index_dim], full-indexer layers only */
    /* scratch, [max_batch][...] */
    float *x, *xn, *kv, *attn_out, *ffn_out, *tmp;
    float *router_logits;
    /* an attention piece's scratch, [min(max_batch, ATT_PIECE)][...] */
    float *cq, *qr, *q, *attn;
    /* [..][index_heads*index_dim], [..][heads], [..][2·capacity] */
    float *index_q, *index_w, *index_scores;
    /* [max_batch][index_topk] key positions chosen by the last full layer */
    int *selection;
    int *selection_count;    /* [max_batch]; -1 = every causal key */
    float *att_qc;           /* absorbed queries of a row chunk: [ATT_ROWS][n_heads][kv_lora] */
    float *att_z;            /* pooled latents of a row chunk: [n_heads][ATT_ROWS][kv_lora] */
    float *att_thread;       /* per thread: attention scratch (attention_thread_floats) */
    size_t att_thread_floats;
    /* explicit prefill: [capacity][n_heads*(qk_nope+v_head)], grown on demand */
    float *expanded_kv;
    size_t expanded_kv_cap;
    /* [ffn_rows][ffn_width]: ffn_swiglu's pieces, or each thread's share in a MoE window */
    float *ffn_h1, *ffn_h2;
    /* max(min(max_batch, FFN_ROWS), nthreads), max(inter, moe_inter · max(n_shared, 1)) */
    int ffn_rows, ffn_width;
    /* [2][max_batch][hidden]: the MTP head's normed embeddings, then hidden states */
    float *mtp_in;
    /* [max_batch·experts_per_tok] rows of each union expert, grouped by expert */
    int *moe_rows;
    float *moe_weights;      /* [max_batch·experts_per_tok] their routing weights */
    int *moe_first;          /* [n_experts + 1] where each union expert's rows start */
    float *expert_x, *expert_y;
    int *chosen;             /* [max_batch][experts_per_tok] */
    int *union_experts;      /* [n_experts] distinct experts of one MoE step, ascending */
    float *chosen_w;
    int nthreads;
    double bytes;            /* what run_state_init allocated */
    int size_only;           /* run_state_init counts bytes and allocates nothing (the RAM plan) */
    /* called before each layer of model_forward (layer < n_layers) and once when it ends or is
       interrupted (layer == n_layers): a front end shows a long prefill's progress with it */
    void (*on_layer)(void *user, int layer, int n_layers, int S, int pos0);
    void *on_layer_user;
    /* engine_start's prefix cache on disk (KV_CACHE) for PROMPT, CHAT and SERVE; NULL: none */
    struct KvCache *prefix_cache;
    struct {
        double attention, indexer, attention_core, dense_mlp, moe, lm_head;
        long long forwards, positions;
    } profile; /* seconds */
} RunState;

/* The absorbed attention works on chunks of ATT_ROWS query rows, and per row on groups of ATT_HG
   heads (one work item: the row's visible keys are read once per group, not once per head). */
/* 16 -> 64: W_UK dequantized and W_UV repacked 4x less often (attnbench 1024@0 -3..7 %) */
enum { ATT_ROWS = 64 };
enum { ATT_UK_BLOCK = 16 };   /* W_UK rows per block when a call has fewer than ATT_TILE rows */
/* keys per block of the pooling (attention_row_heads): 32 KB of latents */
enum { ATT_POOL_KEYS = 16 };
/* dimensions per block of the scores: 8 KB of Q with 16 heads, 16 KB with 32 */
enum { ATT_SCORE_DIMS = 128 };
/* Rows of one piece of a forward's attention (attention_piece): what the query and output scratch
   holds. A multiple of ATT_ROWS, so the row chunks of a long prefill stay where they were. */
enum { ATT_PIECE = 256 };
/* Rows of one piece of a SwiGLU (ffn_swiglu): what its scratch (RunState.ffn_h1, ffn_h2) holds. */
enum { FFN_ROWS = 256 };

/* Float lanes for the attention kernels: the native vector of the build (16 lanes with AVX-512,
   8 with AVX2 + FMA, else 4 in plain C). Every lane does exactly what the scalar loop would: fused
   multiply-adds (one rounding, like fmaf), IEEE add, mul, div and max; so the build's vector width
   never changes a result. A head group is ATT_NV vectors (ATT_HG heads); a register tile is ATT_MK
   keys (or latent dimensions) × the group (24 of the 32 zmm as accumulators; 12 of the 16 ymm).
   Measured, AVX-512, one thread: 4 vectors × 6 keys ran the same as 2 × 12 (the fma ports are the
   limit, ~75 % of their peak), and 2 vectors give decode two work items per row. */
#if defined(__AVX512F__)
#include <immintrin.h>
enum { ATT_VW = 16, ATT_NV = 2, ATT_MK = 12 };
typedef __m512 AttV;
static inline AttV attv_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void attv_store(float *p, AttV v) { _mm512_storeu_ps(p, v); }
static inline AttV attv_set1(float x) { return _mm512_set1_ps(x); }
static inline AttV attv_fma(AttV a, AttV b, AttV c) { return _mm512_fmadd_ps(a, b, c); }
static inline AttV attv_add(AttV a, AttV b) { return _mm512_add_ps(a, b); }
static inline AttV attv_sub(AttV a, AttV b) { return _mm512_sub_ps(a, b); }
static inline AttV attv_mul(AttV a, AttV b) { return _mm512_mul_ps(a, b); }
static inline AttV attv_div(AttV a, AttV b) { return _mm512_div_ps(a, b); }
static inline AttV attv_max(AttV a, AttV b) { return _mm512_max_ps(a, b); }   /* a > b ? a : b */
/* 2^n for integral n in [-126, 127] */
static inline AttV attv_pow2i(AttV n) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
static inline AttV attv_zero_below(AttV x, float lim, AttV y) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(lim), _CMP_GE_OQ), y);
}
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
enum { ATT_VW = 8, ATT_NV = 2, ATT_MK = 6 };
typedef __m256 AttV;
static inline AttV attv_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void attv_store(float *p, AttV v) { _mm256_storeu_ps(p, v); }
static inline AttV attv_set1(float x) { return _mm256_set1_ps(x); }
static inline AttV attv_fma(AttV a, AttV b, AttV c) { return _mm256_fmadd_ps(a, b, c); }
static inline AttV attv_add(AttV a, AttV b) { return _mm256_add_ps(a, b); }
static inline AttV attv_sub(AttV a, AttV b) { return _mm256_sub_ps(a, b); }
static inline AttV attv_mul(AttV a, AttV b) { return _mm256_mul_ps(a, b); }
static inline AttV attv_div(AttV a, AttV b) { return _mm256_div_ps(a, b); }
static inline AttV attv_max(AttV a, AttV b) { return _mm256_max_ps(a, b); }
static inline AttV attv_pow2i(AttV n) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
static inline AttV attv_zero_below(AttV x, float lim, AttV y) {
    return _mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(lim), _CMP_GE_OQ), y);
}
#else
enum { ATT_VW = 4, ATT_NV = 2, ATT_MK = 4 };
typedef struct { float f[4]; } AttV;
#define ATTV_MAP(expr) AttV r; for (int i = 0; i < 4; i++) r.f[i] = (expr); return r
static inline AttV attv_load(const float *p) { ATTV_MAP(p[i]); }
static inline void attv_store(float *p, AttV v) { for (int i = 0; i < 4; i++) p[i] = v.f[i]; }
static inline AttV attv_set1(float x) { ATTV_MAP(x); }
static inline AttV attv_fma(AttV a, AttV b, AttV c) { ATTV_MAP(fmaf(a.f[i], b.f[i], c.f[i])); }
static inline AttV attv_add(AttV a, AttV b) { ATTV_MAP(a.f[i] + b.f[i]); }
static inline AttV attv_sub(AttV a, AttV b) { ATTV_MAP(a.f[i] - b.f[i]); }
static inline AttV attv_mul(AttV a, AttV b) { ATTV_MAP(a.f[i] * b.f[i]); }
static inline AttV attv_div(AttV a, AttV b) { ATTV_MAP(a.f[i] / b.f[i]); }
static inline AttV attv_max(AttV a, AttV b) { ATTV_MAP(a.f[i] > b.f[i] ? a.f[i] : b.f[i]); }
static inline AttV attv_pow2i(AttV n) {
    AttV r;
    for (int i = 0; i < 4; i++) {
        uint32_t b = (uint32_t)((int32_t)n.f[i] + 127) << 23;
        memcpy(&r.f[i], &b, 4);
    }
    return r;
}
static inline AttV attv_zero_below(AttV x, float lim, AttV y) {
    ATTV_MAP(x.f[i] >= lim ? y.f[i] : 0.0f);
}
#undef ATTV_MAP
#endif
enum { ATT_HG = ATT_NV * ATT_VW };

/* dst[c·ds + r] = src[r·ss + c] for r < rows, c < cols: the attention's head-major ↔ head-in-lanes
   copies (measured ~10 % of a 1024-row prefill's attention core as scalar moves). Only moves data,
   so the block path and the scalar one give the same bytes. */
#if defined(__AVX512F__)
static inline void att_transpose16(const float *src, size_t ss, float *dst, size_t ds) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * ss);
    for (int i = 0; i < 16; i += 2) {   /* pairs of rows interleaved within 128-bit lanes */
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {   /* 4x4 blocks within 128-bit lanes */
        r[i] = _mm512_castpd_ps(
            _mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 1] = _mm512_castpd_ps(
            _mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 2] = _mm512_castpd_ps(
            _mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
        r[i + 3] = _mm512_castpd_ps(
            _mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    }
    for (int j = 0; j < 4; j++) {   /* then the 4x4 transpose of the 128-bit lanes */
        const __m512 a = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x44),
                     b = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xEE);
        const __m512 c = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x44),
                     d = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xEE);
        _mm512_storeu_ps(dst + j * ds, _mm512_shuffle_f32x4(a, c, 0x88));
        _mm512_storeu_ps(dst + (4 + j) * ds, _mm512_shuffle_f32x4(a, c, 0xDD));
        _mm512_storeu_ps(dst + (8 + j) * ds, _mm512_shuffle_f32x4(b, d, 0x88));
        _mm512_storeu_ps(dst + (12 + j) * ds, _mm512_shuffle_f32x4(b, d, 0xDD));
    }
}
#endif
static void att_transpose(const float *src, size_t ss, int rows, int cols, float *dst, size_t ds) {
    int r0 = 0;
#if defined(__AVX512F__)
    for (; r0 + 16 <= rows; r0 += 16) {
        int c0 = 0;
        for (; c0 + 16 <= cols; c0 += 16)
            att_transpose16(src + r0 * ss + c0, ss, dst + c0 * ds + r0, ds);
        for (int c = c0; c < cols; c++)
            for (int r = r0; r < r0 + 16; r++) dst[c * ds + r] = src[r * ss + c];
    }
#endif
    for (int c = 0; c < cols; c++)
        for (int r = r0; r < rows; r++) dst[c * ds + r] = src[r * ss + c];
}

/* e^x for x ≤ 0 in every lane (the softmax's exponent), one fixed sequence of IEEE operations:
   n = round(x·log2 e), r = x − n·ln 2 in two fma steps, a degree-6 polynomial (Cephes expf's
   coefficients, ~1 ulp), times 2^n; below −87 (where e^x is under the smallest normal float) 0. */
static inline AttV att_exp(AttV x) {
    const AttV xc = attv_max(x, attv_set1(-87.0f));
    const AttV magic = attv_set1(12582912.0f);   /* 1.5·2^23: adding it rounds to an integer */
    const AttV n = attv_sub(attv_fma(xc, attv_set1(1.44269504088896341f), magic), magic);
    AttV r = attv_fma(n, attv_set1(-0.693359375f), xc);
    r = attv_fma(n, attv_set1(2.12194440e-4f), r);
    AttV p = attv_set1(1.9875691500e-4f);
    p = attv_fma(p, r, attv_set1(1.3981999507e-3f));
    p = attv_fma(p, r, attv_set1(8.3334519073e-3f));
    p = attv_fma(p, r, attv_set1(4.1665795894e-2f));
    p = attv_fma(p, r, attv_set1(1.6666665459e-1f));
    p = attv_fma(p, r, attv_set1(5.0000001201e-1f));
    const AttV y = attv_add(attv_fma(p, attv_mul(r, r), r), attv_set1(1.0f));
    return attv_zero_below(x, -87.0f, attv_mul(y, attv_pow2i(n)));
}

/* SwiGLU's gate in place: g[i] = silu(g[i])·u[i] = g·sigmoid(g)·u, n values, vectorized. The
   sigmoid is 1/(1+e) for g ≥ 0 and e/(1+e) below, with e = e^-|g| from att_exp (so no lane ever
   overflows); every value takes the same operations (the tail goes through a padded vector), so
   it never depends on where it sits in a batch. Large calls use the threads. */
static inline AttV silu_mul_vec(AttV g, AttV u) {
    const AttV zero = attv_set1(0.0f), one = attv_set1(1.0f);
    const AttV e = att_exp(attv_sub(zero, attv_max(g, attv_sub(zero, g))));
    const AttV num = attv_max(e, attv_zero_below(g, 0.0f, one));   /* 1 where g ≥ 0, else e */
    return attv_mul(attv_mul(g, attv_div(num, attv_add(one, e))), u);
}

static void silu_mul(float *g, const float *u, size_t n) {
    const size_t whole = n / ATT_VW * ATT_VW;
    #pragma omp parallel for schedule(static) if (whole >= (size_t)ROWS_PARALLEL * 4096)
    for (size_t i = 0; i < whole; i += ATT_VW)
        attv_store(g + i, silu_mul_vec(attv_load(g + i), attv_load(u + i)));
    if (whole < n) {
        float gt[ATT_VW] = { 0 }, ut[ATT_VW] = { 0 };
        memcpy(gt, g + whole, (n - whole) * sizeof(float));
        memcpy(ut, u + whole, (n - whole) * sizeof(float));
        attv_store(gt, silu_mul_vec(attv_load(gt), attv_load(ut)));
        memcpy(g + whole, gt, (n - whole) * sizeof(float));
    }
}

/* Interleaved RoPE (§3.3): pairs (2j, 2j+1); angle is one fp32 product, rounded, then cos/sin. */
typedef struct { float cos[512], sin[512]; } RopeRow;

static void rope_angles(RopeRow *r, const float *inv_freq, int half, int pos) {
    for (int j = 0; j < half; j++) {
        float ang = (float)pos * inv_freq[j];
        r->cos[j] = cosf(ang);
        r->sin[j] = sinf(ang);
    }
}

static void rope_apply(float *v, const RopeRow *r, int half) {
    for (int j = 0; j < half; j++) {
        float a = v[2 * j], b = v[2 * j + 1];
        v[2 * j] = a * r->cos[j] - b * r->sin[j];
        v[2 * j + 1] = b * r->cos[j] + a * r->sin[j];
    }
}

/* Softmax over n scores in place, max-shifted, fp32. */
static void softmax(float *s, int n) {
    float mx = s[0];
    for (int i = 1; i < n; i++) if (s[i] > mx) mx = s[i];
    float sum = 0.0f;
    for (int i = 0; i < n; i++) { s[i] = expf(s[i] - mx); sum += s[i]; }
    float inv = 1.0f / sum;
    for (int i = 0; i < n; i++) s[i] *= inv;
}

typedef struct {
    const Config *c;
    const Layer *L;
    RunState *s;
    int layer_index;
    const float *inv_freq;
    const ForwardOptions *opt;
    /* the piece's first row in the forward: its rows of s->selection (attention) */
    int row0;
} AttentionCall;

/* DSA top-k for one query (§4.4): value descending, smaller position first on ties. */
typedef struct { float v; int j; } ScoredKey;

/* Strict total order of the selection: higher score first, then the smaller position. */
static int scored_key_before(ScoredKey a, ScoredKey b) {
    return a.v > b.v || (a.v == b.v && a.j < b.j);
}

/* Moves the `keep` best keys (in that order) to the front of sk[0..n), in expected O(n): a
   quickselect. The order is total, so the chosen set is unique whatever the pivots. */
static void select_top_keys(ScoredKey *sk, int n, int keep) {
    int lo = 0, hi = n - 1;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    while (lo < hi) {
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        ScoredKey pivot = sk[lo + (int)(rng % (uint64_t)(hi - lo + 1))];
        int i = lo, j = hi;
        while (i <= j) {
            while (scored_key_before(sk[i], pivot)) i++;
            while (scored_key_before(pivot, sk[j])) j--;
            if (i <= j) { ScoredKey t = sk[i]; sk[i] = sk[j]; sk[j] = t; i++; j--; }
        }
        if (keep - 1 <= j) hi = j;
        else if (keep - 1 >= i) lo = i;
        else break;
    }
}

static int int_cmp(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* The indexer's scores of nk ≤ 8 consecutive cached keys k (rows of id floats) for one query row
   (q: [ih][id], w: [ih] head weights): out[y] = Σ_h w[h]·relu(scale·dot(q_h, k_y)) over the heads
   in order, each dot in qt_dot_f32's order (16 lanes of multiply-then-add, then its fixed tree),
   the keys in the 8 lanes of a vector: the block is transposed once ([id][8], missing keys 0) and
   serves all the heads. The same operations lane by lane in every build (vector extensions, no
   fma), so the scores, and the selection, do not depend on the build. It replaced 4 × 4 dots at
   a time through qt_dot_f32_block (a 16-lane tree per dot): the indexer's time in a 1,024-token
   prefill with INDEXER=always on an AVX2 CPU, 1.58 s -> 0.64-0.70 s. */
typedef float IdxV __attribute__((vector_size(32)));
typedef int32_t IdxVi __attribute__((vector_size(32)));
static void index_scores8(const float *q, const float *w, const float *k, int nk, int ih, int id,
                          float scale, float *out) {
    float kt_buf[8 * 256] __attribute__((aligned(32)));
    float *kt = id <= 256 ? kt_buf : xmalloc((size_t)id * 8 * sizeof(float));
    for (int i = 0; i < id; i++)
        for (int y = 0; y < 8; y++) kt[i * 8 + y] = y < nk ? k[(size_t)y * id + i] : 0.0f;
    const IdxV *KT = (const IdxV *)kt;
    const IdxV zero = { 0 };
    IdxV total = zero;
    for (int h = 0; h < ih; h++) {
        const float *qh = q + (size_t)h * id;
        IdxV A[16];
        for (int l = 0; l < 16; l++) A[l] = zero;
        int i = 0;
        for (; i + 16 <= id; i += 16)
            for (int l = 0; l < 16; l++) A[l] += qh[i + l] * KT[i + l];
        for (int l = 0; i < id; i++, l++) A[l] += qh[i] * KT[i];
        for (int l = 0; l < 8; l++) A[l] += A[l + 8];
        for (int l = 0; l < 4; l++) A[l] += A[l + 4];
        const IdxV t = ((A[0] + A[2]) + (A[1] + A[3])) * scale;
        /* t > 0 ? t : +0, as the scalar form (NaN: 0) */
        const IdxV relu = (IdxV)((IdxVi)t & (t > zero));
        total += w[h] * relu;
    }
    memcpy(out, &total, sizeof total);
    if (kt != kt_buf) free(kt);
}

/* Indexer keys: kI of the S new positions into the cache (all rows of a forward, before any
   piece picks keys). */
static void indexer_keys(AttentionCall *ac, const float *xn, int S, int pos0) {
    const Config *c = ac->c;
    const Layer *L = ac->L;
    RunState *s = ac->s;
    const int id = c->index_dim, half = c->qk_rope / 2;
    float *kcache = s->index_key[ac->layer_index];
    matmul(s->tmp, &L->index_wk, xn, S);
    #pragma omp parallel for schedule(static) if (S >= ROWS_PARALLEL)
    for (int r = 0; r < S; r++) {
        float *k = kcache + (size_t)(pos0 + r) * id;
        layernorm(k, s->tmp + (size_t)r * id, L->index_k_norm_w, L->index_k_norm_b, id, 1e-6f);
        RopeRow rr;
        rope_angles(&rr, ac->inv_freq, half, pos0 + r);
        rope_apply(k, &rr, half);
    }
}

/* Indexer selection: picks the keys of the piece's S query rows at positions pos0.. (queries from
   qr, head weights from xn), into rows ac->row0.. of s->selection. */
static void indexer_select(AttentionCall *ac, const float *xn, const float *qr, int S, int pos0) {
    const Config *c = ac->c;
    const Layer *L = ac->L;
    RunState *s = ac->s;
    const int ih = c->index_heads, id = c->index_dim, half = c->qk_rope / 2, K = c->index_topk;
    const float *kcache = s->index_key[ac->layer_index];
    int *selection_count = s->selection_count + ac->row0,
        *selection = s->selection + (size_t)ac->row0 * K;
    int any_selective = 0;
    for (int r = 0; r < S; r++) if (pos0 + r + 1 > K) any_selective = 1;
    if ((!any_selective && ac->opt->indexer_mode != INDEXER_ALWAYS) ||
        ac->opt->indexer_mode == INDEXER_OFF) {
        for (int r = 0; r < S; r++) selection_count[r] = -1;
        return;
    }
    /* queries and head weights */
    matmul(s->index_q, &L->index_wq_b, qr, S);
    matmul(s->index_w, &L->index_weights, xn, S);
    const float score_scale = 1.0f / sqrtf((float)id);       /* index_head_dim^-0.5 */
    const float head_scale = 1.0f / sqrtf((float)ih);        /* index_n_heads^-0.5 */
    #pragma omp parallel for schedule(static) if (S >= ROWS_PARALLEL)
    for (int r = 0; r < S; r++) {
        float *q = s->index_q + (size_t)r * ih * id;
        RopeRow rr;
        rope_angles(&rr, ac->inv_freq, half, pos0 + r);
        for (int h = 0; h < ih; h++) rope_apply(q + (size_t)h * id, &rr, half);
        float *w = s->index_w + (size_t)r * ih;
        for (int h = 0; h < ih; h++) w[h] *= head_scale;
    }
    /* score of key j for row r: Σ_h w[h]·relu(q_h·k_j·scale), heads in order, each dot in
       qt_dot_f32's order. Work items of INDEX_KEYS keys of one row, so decode uses every thread
       too; within an item, 8 keys at a time in vector lanes (index_scores8) */
    enum { INDEX_KEYS = 256 };
    const int row_items = (pos0 + S + INDEX_KEYS - 1) / INDEX_KEYS;
    #pragma omp parallel for schedule(dynamic, 1)
    for (int item = 0; item < S * row_items; item++) {
        const int r = item / row_items, j0 = item % row_items * INDEX_KEYS, ncand = pos0 + r + 1;
        if (j0 >= ncand || (ncand <= K && ac->opt->indexer_mode != INDEXER_ALWAYS)) continue;
        const float *q = s->index_q + (size_t)r * ih * id, *w = s->index_w + (size_t)r * ih;
        ScoredKey *sk = (ScoredKey *)(s->index_scores + (size_t)r * s->capacity * 2);
        const int j1 = ncand - j0 < INDEX_KEYS ? ncand : j0 + INDEX_KEYS;
        for (int j = j0; j < j1; j += 8) {
            float total[8];
            index_scores8(q, w, kcache + (size_t)j * id, j1 - j < 8 ? j1 - j : 8, ih, id,
                          score_scale, total);
            for (int y = 0; y < 8 && j + y < j1; y++) {
                sk[j + y].v = total[y];
                sk[j + y].j = j + y;
            }
        }
    }
    #pragma omp parallel for schedule(dynamic, 1) if (S > 1)
    for (int r = 0; r < S; r++) {
        const int ncand = pos0 + r + 1;
        if (ncand <= K && ac->opt->indexer_mode != INDEXER_ALWAYS) {
            selection_count[r] = -1;
            continue;
        }
        ScoredKey *sk = (ScoredKey *)(s->index_scores + (size_t)r * s->capacity * 2);
        int keep = ncand < K ? ncand : K;
        select_top_keys(sk, ncand, keep);
        int *sel = selection + (size_t)r * K;
        for (int t = 0; t < keep; t++) sel[t] = sk[t].j;
        qsort(sel, (size_t)keep, sizeof(int), int_cmp);   /* ascending: sequential cache reads */
        selection_count[r] = keep;
    }
}

/* Keys visible to query row r at absolute position i: the selection, or all of 0..i. */
static int visible_keys(const RunState *s, const Config *c, int r, int i, const int **list) {
    if (s->selection_count[r] < 0) { *list = NULL; return i + 1; }
    *list = s->selection + (size_t)r * c->index_topk;
    return s->selection_count[r];
}

/* ---- absorbed attention: all heads of a row against each key at once -------------------------

   In the absorbed form (§3.5) head h's query becomes a latent-space query qc_h = W_UK[h]ᵀ q_nope,h
   (kv_lora wide), and every head scores and pools the same cached latents c_j. So one query row's
   attention is two matrix products over its visible keys j, with the heads as columns:
       s[j][h] = scale · Σ_d k_j[d]·Q[d][h]        k_j = (c_j, k_rope,j), Q[·][h] = (qc_h, q_rope,h)
       z[u][h] = Σ_j c_j[u]·e[j][h] / Σ_j e[j][h]  e[j][h] = exp(s[j][h] − max_j s[j][h])
   A call's rows go in chunks of ATT_ROWS, in three parallel steps:
     1. qc for the chunk, per head: W_UK[h] dequantized once per chunk (for fewer rows than a tile,
        as decode, in ATT_UK_BLOCK-row pieces that stay in L1), 4 rows × 64 dims at a time;
     2. per (row, group of ATT_HG heads): Q transposed to [d][head], the heads in vector lanes; the
        scores in tiles of ATT_MK keys × ATT_HG heads over all d (each key element is loaded once
        and broadcast to the group's heads); the softmax along the keys, heads in lanes; z in tiles
        of ATT_MK latent dimensions × ATT_HG heads, over blocks of ATT_POOL_KEYS keys (every tile
        of a block before the next block);
     3. per head, W_UV[h]·z of the chunk's rows in one matmul (the batched kernels).
   Fixed arithmetic per output element: a score is one fused multiply-add chain over d = 0 ..
   kvl+dr−1 from +0, times scale; max and Σe run over the keys in visible order; z[u][h] is one fma
   chain over the keys in visible order from +0, times 1/Σe; exp is att_exp. So a row's result
   depends neither on the chunk, the other rows, the thread, nor the build's vector width. Decode
   (S = 1) runs the head groups on different threads. One row's keys of one layer (≤ 2048 with DSA:
   4.7 MB) stay in L3, and reading them once per row and head group needs a few GB/s against the
   arithmetic, so rows do not share key reads (with DSA they see different keys anyway). */

/* Tiles of QT_DOT_TILE rows (4 with AVX-512, else 2): accumulators that fit the registers. */
#define ATT_TILE QT_DOT_TILE

/* qc[k][t] = Σ_d q[k][d]·W[d][t]: one fma chain in increasing d from +0, for NQ query rows; W holds
   the rows d0 .. d1-1 ([d1-d0][kvl]). With d0 > 0 the chain goes on from the sums qc holds (rows
   before d0), so splitting d into blocks gives the same bits. Four vectors of t per tile. */
static inline __attribute__((always_inline)) void
absorb_queries_tile(const float *W, int d0, int d1, int kvl, const float *const *q,
                    float *const *qc, const int NQ) {
    int t0 = 0;
    for (; t0 + 4 * ATT_VW <= kvl; t0 += 4 * ATT_VW) {
        AttV acc[ATT_TILE][4];
        for (int k = 0; k < NQ; k++)
            for (int v = 0; v < 4; v++)
                acc[k][v] = d0 ? attv_load(qc[k] + t0 + ATT_VW * v) : attv_set1(0.0f);
        for (int d = d0; d < d1; d++) {
            AttV w[4];
            for (int v = 0; v < 4; v++)
                w[v] = attv_load(W + (size_t)(d - d0) * kvl + t0 + ATT_VW * v);
            for (int k = 0; k < NQ; k++) {
                const AttV qd = attv_set1(q[k][d]);
                for (int v = 0; v < 4; v++) acc[k][v] = attv_fma(qd, w[v], acc[k][v]);
            }
        }
        for (int k = 0; k < NQ; k++)
            for (int v = 0; v < 4; v++) attv_store(qc[k] + t0 + ATT_VW * v, acc[k][v]);
    }
    for (; t0 < kvl; t0++)
        for (int k = 0; k < NQ; k++) {
            float a = d0 ? qc[k][t0] : 0.0f;
            for (int d = d0; d < d1; d++) a = fmaf(q[k][d], W[(size_t)(d - d0) * kvl + t0], a);
            qc[k][t0] = a;
        }
}

/* Step 1 for nq ≤ ATT_TILE rows (constant tile sizes) against W's rows d0 .. d1-1. */
static void absorb_queries(const float *W, int d0, int d1, int kvl, const float *const *q, int nq,
                           float *const *qc) {
    if (nq == ATT_TILE) absorb_queries_tile(W, d0, d1, kvl, q, qc, ATT_TILE);
    else for (int k = 0; k < nq; k++) absorb_queries_tile(W, d0, d1, kvl, q + k, qc + k, 1);
}

/* s[t+m][·] = scale · Σ_d k[d]·Q[d][·] for the M keys t..t+M-1 of the list (the group's ATT_HG
   heads), over the dimensions d0 .. d1-1 of k = (latent, rope key), all of one part; Q is
   [kvl+dr][ATT_HG], s [n][ATT_HG]. The fma chains go on from the sums s holds when d0 > 0, and
   the product with scale comes after the last dimension, so splitting d into blocks gives the
   same bits. */
static inline __attribute__((always_inline)) void
att_scores_tile(const float *Q, const float *latent, const float *rope_key, const int *keys, int t,
                int kvl, int dr, int d0, int d1, float scale, float *s, const int M) {
    const int rope = d0 >= kvl, width = rope ? dr : kvl, off = rope ? kvl : 0;
    const float *k[ATT_MK];
    for (int m = 0; m < M; m++) {
        const int j = keys ? keys[t + m] : t + m;
        k[m] = (rope ? rope_key : latent) + (size_t)j * width - off;
    }
    AttV acc[ATT_MK][ATT_NV];
    for (int m = 0; m < M; m++)
        for (int v = 0; v < ATT_NV; v++)
            acc[m][v] = d0 ? attv_load(s + (size_t)(t + m) * ATT_HG + v * ATT_VW) : attv_set1(0.0f);
    for (int d = d0; d < d1; d++) {
        AttV q[ATT_NV];
        for (int v = 0; v < ATT_NV; v++) q[v] = attv_load(Q + (size_t)d * ATT_HG + v * ATT_VW);
        for (int m = 0; m < M; m++) {
            const AttV kv = attv_set1(k[m][d]);
            for (int v = 0; v < ATT_NV; v++) acc[m][v] = attv_fma(kv, q[v], acc[m][v]);
        }
    }
    const int last = d1 == kvl + dr;
    const AttV sc = attv_set1(scale);
    for (int m = 0; m < M; m++)
        for (int v = 0; v < ATT_NV; v++)
            attv_store(s + (size_t)(t + m) * ATT_HG + v * ATT_VW,
                       last ? attv_mul(acc[m][v], sc) : acc[m][v]);
}

/* zt[u0+m][·] += Σ_t c_{key t}[u0+m]·e[t][·] over the keys t0 .. t1-1 of the list, in list order,
   for M latent dimensions: the fma chains go on from the sums zt holds (from +0 when t0 = 0), so
   splitting the keys into blocks gives the same bits. */
static inline __attribute__((always_inline)) void att_pool_tile(const float *e, const float *latent,
                                                                const int *keys, int t0, int t1,
                                                                int kvl, int u0, float *zt,
                                                                const int M) {
    AttV acc[ATT_MK][ATT_NV];
    for (int m = 0; m < M; m++)
        for (int v = 0; v < ATT_NV; v++)
            acc[m][v] =
                t0 ? attv_load(zt + (size_t)(u0 + m) * ATT_HG + v * ATT_VW) : attv_set1(0.0f);
    for (int t = t0; t < t1; t++) {
        const float *c = latent + (size_t)(keys ? keys[t] : t) * kvl + u0;
        AttV p[ATT_NV];
        for (int v = 0; v < ATT_NV; v++) p[v] = attv_load(e + (size_t)t * ATT_HG + v * ATT_VW);
        for (int m = 0; m < M; m++) {
            const AttV cv = attv_set1(c[m]);
            for (int v = 0; v < ATT_NV; v++) acc[m][v] = attv_fma(cv, p[v], acc[m][v]);
        }
    }
    for (int m = 0; m < M; m++)
        for (int v = 0; v < ATT_NV; v++)
            attv_store(zt + (size_t)(u0 + m) * ATT_HG + v * ATT_VW, acc[m][v]);
}

/* Step 2 for one row and the heads h0 .. h0+nhg-1 (nhg ≤ ATT_HG): Q from qc (the chunk row's
   [head][kvl]) and q (the row's [head][dqk], rope part at dn), keys of the row's visible list;
   writes z[h][u] (= z + h·zstride + u, h relative to h0). Scratch: Q [kvl+dr][ATT_HG], e
   [n][ATT_HG]. */
static void attention_row_heads(const float *qc, const float *q, int dqk, int dn, int nhg,
                                const float *latent, const float *rope_key, const int *keys, int n,
                                int kvl, int dr, float scale, float *Q, float *e, float *z,
                                size_t zstride) {
    /* the unused heads are 0 */
    if (nhg < ATT_HG) memset(Q, 0, (size_t)(kvl + dr) * ATT_HG * sizeof(float));
    /* heads as columns */
    att_transpose(qc, (size_t)kvl, nhg, kvl, Q, ATT_HG);
    att_transpose(q + dn, (size_t)dqk, nhg, dr, Q + (size_t)kvl * ATT_HG, ATT_HG);
    /* the scores in blocks of ATT_SCORE_DIMS dimensions, every key through a block before the
       next: the block of Q stays in L1 while the keys stream past it (all of Q, 36 KB with 16
       heads, did not fit beside them) */
    for (int d0 = 0; d0 < kvl + dr;) {
        const int end = d0 < kvl ? kvl : kvl + dr,
                  d1 = end - d0 < ATT_SCORE_DIMS ? end : d0 + ATT_SCORE_DIMS;
        int t = 0;
        for (; t + ATT_MK <= n; t += ATT_MK)
            att_scores_tile(Q, latent, rope_key, keys, t, kvl, dr, d0, d1, scale, e, ATT_MK);
        for (; t < n; t++)
            att_scores_tile(Q, latent, rope_key, keys, t, kvl, dr, d0, d1, scale, e, 1);
        d0 = d1;
    }
    /* softmax along the keys; the lanes are the heads */
    AttV inv[ATT_NV];
    for (int v = 0; v < ATT_NV; v++) {
        float *ev = e + (size_t)v * ATT_VW;
        AttV mx = attv_load(ev);
        for (int i = 1; i < n; i++) mx = attv_max(attv_load(ev + (size_t)i * ATT_HG), mx);
        AttV sum = attv_set1(0.0f);
        for (int i = 0; i < n; i++) {
            const AttV x = att_exp(attv_sub(attv_load(ev + (size_t)i * ATT_HG), mx));
            attv_store(ev + (size_t)i * ATT_HG, x);
            sum = attv_add(sum, x);
        }
        inv[v] = attv_div(attv_set1(1.0f), sum);
    }
    /* z = Σ e·c / Σ e into zt [kvl][ATT_HG] (Q's space, no longer needed), then per head. In blocks
       of ATT_POOL_KEYS keys, each through every tile of latent dimensions before the next: tile
       after tile over all the keys read each key's cache line once per tile, from L2 or L3 in
       the DSA's scattered order (the pooling was 2/3 of the attention at 4,000 tokens of context);
       a block's key rows stay in L1 across its tiles. */
    float *zt = Q;
    int t0 = 0;
    do {
        const int t1 = n - t0 < ATT_POOL_KEYS ? n : t0 + ATT_POOL_KEYS;
        int u0 = 0;
        for (; u0 + ATT_MK <= kvl; u0 += ATT_MK)
            att_pool_tile(e, latent, keys, t0, t1, kvl, u0, zt, ATT_MK);
        for (; u0 < kvl; u0++) att_pool_tile(e, latent, keys, t0, t1, kvl, u0, zt, 1);
        t0 = t1;
    } while (t0 < n);
    for (int u = 0; u < kvl; u++)
        for (int v = 0; v < ATT_NV; v++)
            attv_store(zt + (size_t)u * ATT_HG + v * ATT_VW,
                       attv_mul(attv_load(zt + (size_t)u * ATT_HG + v * ATT_VW), inv[v]));
    att_transpose(zt, ATT_HG, kvl, nhg, z, zstride);
}

/* Per-thread scratch of the absorbed attention, in floats: W_UK of a head, Q, e, W_UV outputs;
   each part starts on a 64-byte boundary (the thread's block does too). */
static size_t attention_thread_floats(const Config *c, int capacity) {
    const size_t wuk = (size_t)c->qk_nope * c->kv_lora,
                 Q = (size_t)(c->kv_lora + c->qk_rope) * ATT_HG;
    const size_t e = (size_t)capacity * ATT_HG, out = (size_t)ATT_ROWS * c->v_head;
    /* the explicit form (ABSORB=0): one head's scores */
    size_t explicit_scores = (size_t)capacity;
    size_t total = 0;
    const size_t parts[] = { wuk, Q, e, out };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) total += (parts[i] + 15) / 16 * 16;
    return total > explicit_scores ? total + 16 : explicit_scores + 16;
}

static float *attention_thread_scratch(RunState *s, int tid) {
    float *p = s->att_thread + (size_t)tid * s->att_thread_floats;
    return p + ((16 - ((uintptr_t)p / sizeof(float)) % 16) % 16);
}

/* Rows [r0, r0+nr) of the call (nr ≤ ATT_ROWS) in the absorbed form: writes their s->attn rows. */
static void attention_absorbed_rows(AttentionCall *ac, int r0, int nr, int pos0, float scale) {
    const Config *c = ac->c;
    const Layer *L = ac->L;
    RunState *s = ac->s;
    const int nh = c->n_heads, dn = c->qk_nope, dr = c->qk_rope, dqk = c->qk_head, dv = c->v_head,
              kvl = c->kv_lora;
    const float *latent = s->latent[ac->layer_index], *rope_key = s->rope_key[ac->layer_index];
    const int groups = (nh + ATT_HG - 1) / ATT_HG;
    #pragma omp parallel
    {
        const int tid = thread_index();
        float *wuk = attention_thread_scratch(s, tid);                        /* [dn][kvl] */
        /* [kvl+dr][ATT_HG] */
        float *Q = wuk + ((size_t)dn * kvl + 15) / 16 * 16;
        /* [capacity][ATT_HG] */
        float *e = Q + ((size_t)(kvl + dr) * ATT_HG + 15) / 16 * 16;
        float *wuv_out = e + ((size_t)s->capacity * ATT_HG + 15) / 16 * 16;     /* [ATT_ROWS][dv] */
        /* 1. qc = W_UK[h]ᵀ q_nope for the chunk's rows */
        #pragma omp for schedule(dynamic, 1)
        for (int h = 0; h < nh; h++) {
            const float *q[ATT_ROWS];
            float *qc[ATT_ROWS];
            for (int r = 0; r < nr; r++) {
                q[r] = s->q + ((size_t)(r0 + r) * nh + h) * dqk;
                qc[r] = s->att_qc + ((size_t)r * nh + h) * kvl;
            }
            /* a few rows (decode, a short verification): W_UK[h] in blocks of ATT_UK_BLOCK rows
               that stay in L1 instead of one 393 KB dequantized copy per head and token */
            const int block = nr < ATT_TILE ? ATT_UK_BLOCK : dn;
            for (int d0 = 0; d0 < dn; d0 += block) {
                const int d1 = dn - d0 < block ? dn : d0 + block;
                qt_dequant_rows(&L->kv_b, (int64_t)h * (dn + dv) + d0, d1 - d0, wuk);
                for (int r = 0; r < nr; r += ATT_TILE)
                    absorb_queries(wuk, d0, d1, kvl, q + r, nr - r < ATT_TILE ? nr - r : ATT_TILE,
                                   qc + r);
            }
        }
        /* 2. scores, softmax and pooled latents per (row, group of heads) */
        #pragma omp for schedule(dynamic, 1)
        for (int item = 0; item < nr * groups; item++) {
            const int r = item / groups, h0 = item % groups * ATT_HG,
                      nhg = nh - h0 < ATT_HG ? nh - h0 : ATT_HG;
            const int *keys;
            const int n = visible_keys(s, c, ac->row0 + r0 + r, pos0 + r0 + r, &keys);
            attention_row_heads(
                s->att_qc + ((size_t)r * nh + h0) * kvl, s->q + ((size_t)(r0 + r) * nh + h0) * dqk,
                dqk, dn, nhg, latent, rope_key, keys, n, kvl, dr, scale, Q, e,
                s->att_z + ((size_t)h0 * ATT_ROWS + r) * kvl, (size_t)ATT_ROWS * kvl);
        }
        /* 3. o = W_UV[h] z for the chunk's rows (a nested matmul runs on this thread) */
        #pragma omp for schedule(dynamic, 1)
        for (int h = 0; h < nh; h++) {
            QTensor wuv = qt_row_view(&L->kv_b, (int64_t)h * (dn + dv) + dn, dv);
            qt_matmul(&wuv, s->att_z + (size_t)h * ATT_ROWS * kvl, wuv_out, nr, g_integer_dot);
            for (int r = 0; r < nr; r++)
                memcpy(s->attn + ((size_t)(r0 + r) * nh + h) * dv, wuv_out + (size_t)r * dv,
                       (size_t)dv * sizeof(float));
        }
    }
}

/* The absorbed attention of the call's S rows (queries in s->q, keys in the cache): s->attn. */
static void attention_core(AttentionCall *ac, int S, int pos0, float scale) {
    for (int r0 = 0; r0 < S; r0 += ATT_ROWS)
        attention_absorbed_rows(ac, r0, S - r0 < ATT_ROWS ? S - r0 : ATT_ROWS, pos0, scale);
}

/* The queries of S rows before RoPE: q_a → q_a_layernorm (s->qr) → q_b (s->q). */
static void attention_queries(AttentionCall *ac, const float *xn, int S) {
    const Config *c = ac->c;
    const Layer *L = ac->L;
    RunState *s = ac->s;
    matmul(s->cq, &L->q_a, xn, S);
    #pragma omp parallel for schedule(static) if (S >= ROWS_PARALLEL)
    for (int r = 0; r < S; r++)
        rmsnorm(s->qr + (size_t)r * c->q_lora, s->cq + (size_t)r * c->q_lora, L->q_a_norm,
                c->q_lora, ac->opt->latent_eps);
    matmul(s->q, &L->q_b, s->qr, S);
}

/* The rest of a piece once its queries are in s->qr and s->q: each head's last dr dims rotated,
   the indexer's selection, the attention (s->attn). Without o_proj. */
static void attention_piece_core(AttentionCall *ac, const float *xn, int S, int pos0) {
    const Config *c = ac->c;
    const Layer *L = ac->L;
    RunState *s = ac->s;
    const int nh = c->n_heads, dn = c->qk_nope, dr = c->qk_rope, dqk = c->qk_head, dv = c->v_head;
    const int half = dr / 2;
    const float *latent = s->latent[ac->layer_index], *rope_key = s->rope_key[ac->layer_index];
    #pragma omp parallel for schedule(static) if (S >= ROWS_PARALLEL)
    for (int r = 0; r < S; r++) {
        RopeRow rr;
        rope_angles(&rr, ac->inv_freq, half, pos0 + r);
        float *qrow = s->q + (size_t)r * nh * dqk;
        for (int h = 0; h < nh; h++) rope_apply(qrow + (size_t)h * dqk + dn, &rr, half);
    }
    /* DSA: full layers compute a fresh selection; shared layers keep the last one (§4.6) */
    if (L->has_indexer) {
        double t0 = now_seconds();
        indexer_select(ac, xn, s->qr, S, pos0);
        s->profile.indexer += now_seconds() - t0;
    }

    const float scale = 1.0f / sqrtf((float)dqk);
    if (ac->opt->absorb) {
        double t0 = now_seconds();
        attention_core(ac, S, pos0, scale);
        s->profile.attention_core += now_seconds() - t0;
        return;
    }
    /* explicit form: expand K_nope and V for every key once, shared by all S queries */
    const int T = pos0 + S;   /* keys that exist after this call */
    size_t need = (size_t)T * nh * (dn + dv);
    if (need > s->expanded_kv_cap) {   /* ABSORB=0 only: grows with the context */
        free(s->expanded_kv);
        s->expanded_kv = xmalloc(need * sizeof(float));
        s->expanded_kv_cap = need;
    }
    matmul(s->expanded_kv, &L->kv_b, latent, T);
    #pragma omp parallel
    {
        const int tid = thread_index();
        float *scores = s->att_thread + (size_t)tid * s->att_thread_floats;   /* capacity floats */
        #pragma omp for collapse(2) schedule(dynamic, 1)
        for (int r = 0; r < S; r++) {
            for (int h = 0; h < nh; h++) {
                const int i = pos0 + r;
                const int *keys;
                const int n = visible_keys(s, c, ac->row0 + r, i, &keys);
                const float *qh = s->q + ((size_t)r * nh + h) * dqk;
                float *o = s->attn + ((size_t)r * nh + h) * dv;
                const size_t stride = (size_t)nh * (dn + dv);
                for (int t = 0; t < n; t++) {
                    const int j = keys ? keys[t] : t;
                    const float *kj = s->expanded_kv + (size_t)j * stride + (size_t)h * (dn + dv);
                    scores[t] =
                        (dot(qh, kj, dn) + dot(qh + dn, rope_key + (size_t)j * dr, dr)) * scale;
                }
                softmax(scores, n);
                memset(o, 0, (size_t)dv * sizeof(float));
                for (int t = 0; t < n; t++) {
                    const int j = keys ? keys[t] : t;
                    const float *vj =
                        s->expanded_kv + (size_t)j * stride + (size_t)h * (dn + dv) + dn;
                    const float p = scores[t];
                    for (int u = 0; u < dv; u++) o[u] += p * vj[u];
                }
            }
        }
    }
}

/* The queries, the indexer's selection, the attention and o_proj of one piece of S ≤ ATT_PIECE
   rows at positions pos0.. (rows ac->row0.. of the forward), whose keys are in the caches
   already; writes [S][hidden]. */
static void attention_piece(AttentionCall *ac, const float *xn, int S, int pos0, float *out) {
    attention_queries(ac, xn, S);
    attention_piece_core(ac, xn, S, pos0);
    matmul(out, &ac->L->o, ac->s->attn, S);
}

/* The compressed KV rows of S new positions (s->kv, from kv_a) into the cache: the latent normed,
   the rope key rotated; and the indexer's keys of those positions. */
static void attention_store_kv(AttentionCall *ac, const float *xn, int S, int pos0) {
    const Config *c = ac->c;
    const Layer *L = ac->L;
    RunState *s = ac->s;
    const int dr = c->qk_rope, kvl = c->kv_lora, half = dr / 2;
    float *latent = s->latent[ac->layer_index], *rope_key = s->rope_key[ac->layer_index];
    #pragma omp parallel for schedule(static) if (S >= ROWS_PARALLEL)
    for (int r = 0; r < S; r++) {
        const int pos = pos0 + r;
        RopeRow rr;
        rope_angles(&rr, ac->inv_freq, half, pos);
        float *kvr = s->kv + (size_t)r * (kvl + dr);
        rmsnorm(latent + (size_t)pos * kvl, kvr, L->kv_a_norm, kvl, ac->opt->latent_eps);
        memcpy(rope_key + (size_t)pos * dr, kvr + kvl, (size_t)dr * sizeof(float));
        rope_apply(rope_key + (size_t)pos * dr, &rr, half);
    }
    if (L->has_indexer) {
        double t0 = now_seconds();
        indexer_keys(ac, xn, S, pos0);
        s->profile.indexer += now_seconds() - t0;
    }
}

/* MLA over S new positions (rows of xn) starting at pos0; writes [S][hidden] into out. The keys
   of all S positions go into the caches first (the KV latent and rope key, the indexer's key);
   then queries, attention and o_proj run in pieces of ATT_PIECE rows, so their scratch does not
   grow with BATCH. A row sees the keys up to its own position whichever piece it is in, and every
   kernel computes a row alone, so the pieces change no result. */
static void attention(AttentionCall *ac, const float *xn, int S, int pos0, float *out) {
    const int H = ac->c->hidden;
    /* compressed KV of the new positions → cache */
    matmul(ac->s->kv, &ac->L->kv_a, xn, S);
    attention_store_kv(ac, xn, S, pos0);
    for (int p = 0; p < S; p += ATT_PIECE) {
        ac->row0 = p;
        attention_piece(ac, xn + (size_t)p * H, S - p < ATT_PIECE ? S - p : ATT_PIECE, pos0 + p,
                        out + (size_t)p * H);
    }
    ac->row0 = 0;
}

/* Rows of one forward that belong to one conversation: rows [row0, row0 + S) of the forward are
   its positions pos0.. in its KV cache (state). A forward over several groups (the decode steps of
   several conversations at once) runs each group's attention over its own cache and everything
   else over all rows: the weights are read once for all of them, and a row's result never
   depends on its batch. */
typedef struct { RunState *state; int row0, S, pos0; } RowGroup;

/* Attention over the rows of several conversations at once (one decode step of each): the
   projections (kv_a, q_a, q_b, o_proj) run over all rows in work's scratch, so their weights are
   read once for every conversation, and each conversation's part in between (its cache rows, its
   indexer selection, the attention over its own keys) runs on its own RunState. Every row gets
   what attention() gives it alone: a matmul's row does not depend on the rows beside it. */
static void attention_groups(AttentionCall *ac, const RowGroup *groups, int n_groups,
                             const float *xn, int S, float *out) {
    const Config *c = ac->c;
    RunState *w = ac->s;
    const int H = c->hidden, kv_width = c->kv_lora + c->qk_rope, q_width = c->n_heads * c->qk_head;
    const int attn_width = c->n_heads * c->v_head;
    matmul(w->kv, &ac->L->kv_a, xn, S);
    attention_queries(ac, xn, S);
    for (int k = 0; k < n_groups; k++) {
        const RowGroup *gr = &groups[k];
        RunState *g = gr->state;
        AttentionCall one = *ac;
        one.s = g;
        one.row0 = 0;
        const float *gx = xn + (size_t)gr->row0 * H;
        memcpy(g->kv, w->kv + (size_t)gr->row0 * kv_width,
               (size_t)gr->S * kv_width * sizeof(float));
        memcpy(g->qr, w->qr + (size_t)gr->row0 * c->q_lora,
               (size_t)gr->S * c->q_lora * sizeof(float));
        memcpy(g->q, w->q + (size_t)gr->row0 * q_width, (size_t)gr->S * q_width * sizeof(float));
        attention_store_kv(&one, gx, gr->S, gr->pos0);
        attention_piece_core(&one, gx, gr->S, gr->pos0);
        memcpy(w->attn + (size_t)gr->row0 * attn_width, g->attn,
               (size_t)gr->S * attn_width * sizeof(float));
    }
    matmul(out, &ac->L->o, w->attn, S);
}

/* =============================================================================================
   6. Experts: streamed from disk through a per-layer cache (docs/design.md, "Experts")
   Routed experts are never loaded at start. Each MoE layer owns `slots` expert slots in one
   huge-page-backed arena, faulted in by an idle-priority helper while the cache grows into what
   is ready. A miss reads the expert with ONE read into its slot (docs/format.md §4 keeps its
   payloads adjacent) and its QTensors are views into the slot; tier.h decides which expert a miss
   evicts. An I/O thread reads a layer's misses while the compute threads work through its hits,
   so disk and CPU overlap; a big prefill also reads the next MoE layer's experts before its router
   runs (read-ahead), and while the engine is idle the usage history's hottest experts are read
   in, never ahead of a demanded read. Float experts are quantized into the slot on each miss.
   ============================================================================================= */

/* ---- 6.1 The store: sources on disk, slots in RAM, one cache per layer ----------------------- */

#ifndef MADV_POPULATE_READ   /* Linux 5.14; older kernels answer EINVAL and glm falls back */
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif

enum { IO_PREAD, IO_DIRECT, IO_DROP, IO_MMAP };
static const char *const IO_MODE_NAMES[] = { "pread", "direct", "pread+drop", "mmap" };
#define DIRECT_ALIGN 4096

/* Where one expert's bytes are on disk. */
typedef struct {
    const StTensor *data[3];      /* gate, up, down weights (for fused floats: the 3-D tensor) */
    const StTensor *scales[3];    /* NAME.qs of pre-quantized experts; NULL for float */
    int64_t fused_row0[3];        /* first row inside a fused 3-D tensor */
    int64_t rows[3], cols[3];
    QtFormat format[3];
    int64_t group[3];
    int data_adjacent, scales_adjacent;   /* one read for all three payloads / scales */
    int whole_adjacent;                   /* payloads then scales back to back: one read for all */
} ExpertSource;

typedef struct {
    uint8_t *slab;                /* weight bytes (raw span, or quantized float source) */
    float *scale_buf;
    /* the span mapped for this expert (MMAP, or in place); 0: none */
    uint64_t mapped_off, mapped_len;
    int mapped_file;
    FfnWeights w;                 /* views into slab / scale_buf / the mapping */
    int expert;                   /* expert held (-1 none) */
    int ready;                    /* its bytes are in RAM (set by the I/O thread, under lock) */
    int loading;                  /* the I/O thread is reading into it now (under lock) */
    /* >= 0: a history prefetch of `expert` waits (lower rank first); -1 none (under lock) */
    int prefetch_rank;
    /* loaded by a history prefetch or a read-ahead, not used yet (statistics) */
    int prefetched;
    /* that prefetch is a prefill read-ahead (expert_read_ahead), not history */
    int ahead;
    /* its memory has been written by a load (under lock): not fresh */
    int faulted;
    int failed;                   /* a load error is pending report */
    long long loaded_in_step;     /* the MoE step that queued its load (a miss, not a hit) */
    char error[512];
} ExpertSlot;

typedef struct {
    TierCache cache;
    ExpertSlot *slots;
    unsigned char *busy;          /* slot in use by the current MoE step or queued for loading */
    unsigned char *avoid;         /* scratch of expert_prefetch */
    unsigned char *scratch;       /* scratch of expert_pick_slot */
    /* slots a read has written into (under lock): how far the helper faults ahead */
    int read_slots;
} LayerCache;

typedef struct { int layer, slot; } LoadJob;

typedef struct {
    const Config *c;
    StIndex *index;
    int n_layers, n_experts;      /* n_layers includes the MTP layer */
    int io_mode, expert_bits, group;
    int direct_forced;            /* DIRECT=1: no quiet fallback to pread */
    /* INPLACE (pread, O_DIRECT): experts the page cache holds are used where they lie */
    int in_place;
    TierPolicy policy;            /* CACHE_POLICY */
    int prequantized;             /* experts come with .qs scales */
    int fused_layers;             /* layers whose experts are fused 3-D tensors on disk */
    ExpertSource *sources;        /* [n_layers][n_experts]; unused for dense layers */
    LayerCache *caches;           /* [n_layers] */
    int slots_per_layer;
    size_t slab_bytes, scale_bytes;
    size_t mapped_expert_bytes;   /* MMAP: what one cached expert holds in RSS */
    int n_files;                  /* of the index: the length of direct_fds, maps, map_len */
    int *direct_fds;              /* per file, O_DIRECT (NULL unless DIRECT) */
    uint8_t **maps; uint64_t *map_len;   /* per file (NULL unless MMAP or in_place) */
    uint8_t *arena_map;           /* the mapping the arena lies in (for munmap) */
    size_t arena_map_bytes;
    float *staging;               /* float sources: one tensor in f32 */
    /* the I/O thread: demanded loads (queue) first, history prefetches (slots with a prefetch_rank)
       when idle */
    pthread_t io_thread;
    int io_started, io_stop;
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    LoadJob *queue; int queue_head, queue_tail, queue_cap;
    int prefetch_pending;         /* slots with a prefetch_rank >= 0 (under lock) */
    int prefetch_open;            /* history prefetches may run: the engine is idle (under lock) */
    /* I/O thread only: the read in progress is a prefetch; serve demands between chunks */
    int io_yield;
    /* I/O thread only: time spent on demands served inside a prefetch */
    double io_nested_seconds;
    /* the slot arena (2 MiB-aligned inside arena_map), faulted in by an idle-priority helper */
    uint8_t *arena; size_t arena_bytes, slab_stride;
    pthread_t populate_thread;
    int populate_started, populate_stop;   /* populate_stop: atomic */
    int populated_slots;          /* atomic: slots [0, n) of every layer are faulted in */
    int populate_running;         /* atomic: the helper is still at work (fresh slots are dear) */
    /* while in-place loads outnumber reads, the helper faults only slots [0, this) (under lock):
       what reads used, and experts_per_tok more */
    int populate_wanted;
    pthread_cond_t populate_more; /* populate_wanted grew, or populate_stop was set */
    /* usage history (USAGE) */
    char usage_path[4096];        /* "" when off */
    int usage_named;              /* USAGE named the file (else it is the cache directory's) */
    uint64_t fingerprint;         /* of config + expert tensor layout */
    uint32_t *usage_history;      /* [n_layers][n_experts] the counts read at start (NULL: none) */
    uint64_t usage_tokens;        /* positions counted by this history, this run included */
    int usage_since_save;         /* positions since the last save */
    /* statistics */
    long long hits, misses, step, prefetched, prefetch_used, prefetch_skipped, read_ahead,
        read_ahead_used;
    double bytes_read, read_seconds, wait_seconds, compute_seconds;
    long long in_place_loads;     /* loads served where the page cache held the expert (in_place) */
    long long read_loads;         /* loads that read into their slot (under lock) */
    /* at the helper's start the page cache held the experts probed: count as one in-place load */
    int in_place_likely;
    double in_place_bytes, in_place_seconds;
    /* of in_place_bytes, pages the page cache lacked: mapping read them */
    double in_place_missing_bytes;
    long long *route_counts;      /* [n_layers][n_experts] times chosen */
} ExpertStore;

/* DIRECT=-1 (auto) starts as IO_DIRECT and is settled later: expert_sources_init falls back to
   pread for float experts, model_load where a file cannot be opened with O_DIRECT. O_DIRECT is the
   default because cold decode is disk-bound and it reads ~2.7x faster here than buffered pread
   (docs/design.md, "Experts: streaming and the cache"); the page cache can hold only a sliver of a
   370 GB model anyway. */
static int io_mode_from_settings(int direct, int drop, int mmap_mode) {
    if ((direct == 1) + drop + mmap_mode > 1)
        die("DIRECT=1, DROP=1 and MMAP=1 are exclusive: set at most one");
    return drop ? IO_DROP : mmap_mode ? IO_MMAP : direct != 0 ? IO_DIRECT : IO_PREAD;
}

static void expert_tensor_name(char *buf, size_t n, int layer, int expert, int which) {
    static const char *const proj[3] = { "gate_proj", "up_proj", "down_proj" };
    snprintf(buf, n, "model.layers.%d.mlp.experts.%d.%s.weight", layer, expert, proj[which]);
}

/* Finds and checks every expert's tensors (names, shapes, formats, stamps); reads no payload. */
static void expert_sources_init(ExpertStore *store, Loader *ld) {
    const Config *c = store->c;
    const int E = c->n_experts, I = c->moe_inter, H = c->hidden;
    store->sources = xcalloc((size_t)store->n_layers * E, sizeof(ExpertSource));
    int seen_quantized = 0, seen_float = 0;
    for (int l = 0; l < store->n_layers; l++) {
        if (c->layer_dense[l]) continue;
        const int expert_bits = l >= c->n_layers ? mtp_bits(store->expert_bits)
                                                 : store->expert_bits; /* the MTP layer: >= 8 */
        char fused_name[256], down_name[256];
        snprintf(fused_name, sizeof fused_name, "model.layers.%d.mlp.experts.gate_up_proj", l);
        snprintf(down_name, sizeof down_name, "model.layers.%d.mlp.experts.down_proj", l);
        const StTensor *fused = st_find(ld->index, fused_name);
        const StTensor *fused_down = fused ? loader_require(ld, down_name) : NULL;
        if (fused) {
            if (fused->ndim != 3 || fused->shape[0] != E || fused->shape[1] != 2 * I ||
                fused->shape[2] != H)
                die("%s: tensor %s must have shape [%d, %d, %d]",
                    st_file_path(ld->index, fused->file), fused_name, E, 2 * I, H);
            if (fused_down->ndim != 3 || fused_down->shape[0] != E || fused_down->shape[1] != H ||
                fused_down->shape[2] != I)
                die("%s: tensor %s must have shape [%d, %d, %d]",
                    st_file_path(ld->index, fused_down->file), down_name, E, H, I);
            if (fused->dtype == ST_U8 || fused->dtype == ST_I8)
                die("%s: fused expert tensors must be float", fused_name);
            store->fused_layers++;
        }
        for (int e = 0; e < E; e++) {
            ExpertSource *src = &store->sources[(size_t)l * E + e];
            const int64_t rows[3] = { I, I, H }, cols[3] = { H, H, I };
            for (int k = 0; k < 3; k++) {
                src->rows[k] = rows[k];
                src->cols[k] = cols[k];
                if (fused) {
                    src->data[k] = k < 2 ? fused : fused_down;
                    src->fused_row0[k] = k == 0   ? (int64_t)e * 2 * I
                                         : k == 1 ? (int64_t)e * 2 * I + I
                                                  : (int64_t)e * H;
                    src->format[k] = format_for_bits(expert_bits, store->group);
                    src->group[k] = store->group;
                    seen_float = 1;
                    continue;
                }
                char name[256], qs_name[300];
                expert_tensor_name(name, sizeof name, l, e, k);
                src->data[k] = loader_require(ld, name);
                snprintf(qs_name, sizeof qs_name, "%s.qs", name);
                src->scales[k] = st_find(ld->index, qs_name);
                const StTensor *t = src->data[k];
                const char *file = st_file_path(ld->index, t->file);
                if (src->scales[k]) {
                    prequantized_format(ld, name, t, src->scales[k], rows[k], cols[k],
                                        &src->format[k], &src->group[k]);
                    seen_quantized = 1;
                } else {
                    if (t->ndim != 2 || t->shape[0] != rows[k] || t->shape[1] != cols[k])
                        die("%s: tensor %s must have shape [%lld, %lld]", file, name,
                            (long long)rows[k], (long long)cols[k]);
                    if (t->dtype == ST_U8 || t->dtype == ST_I8)
                        die("%s: tensor %s is %s but has no %s", file, name,
                            st_dtype_name(t->dtype), qs_name);
                    src->format[k] = format_for_bits(expert_bits, store->group);
                    src->group[k] = store->group;
                    seen_float = 1;
                }
            }
            if (!fused) {
                const StTensor **d = src->data, **q = src->scales;
                src->data_adjacent = d[0]->file == d[1]->file && d[1]->file == d[2]->file &&
                                     d[0]->offset + d[0]->nbytes == d[1]->offset &&
                                     d[1]->offset + d[1]->nbytes == d[2]->offset;
                src->scales_adjacent = q[0] && q[1] && q[2] && q[0]->file == q[1]->file &&
                                       q[1]->file == q[2]->file &&
                                       q[0]->offset + q[0]->nbytes == q[1]->offset &&
                                       q[1]->offset + q[1]->nbytes == q[2]->offset;
                src->whole_adjacent = src->data_adjacent && src->scales_adjacent &&
                                      q[0]->file == d[0]->file &&
                                      q[0]->offset == d[2]->offset + d[2]->nbytes;
            }
        }
    }
    if (seen_quantized && seen_float)
        die("%s: some routed experts are pre-quantized and some are float; convert the whole model",
            ld->dir);
    store->prequantized = seen_quantized;
    if (!store->prequantized && store->io_mode == IO_DIRECT && !store->direct_forced)
        store->io_mode = IO_PREAD;
    if (!store->prequantized && (store->io_mode == IO_DIRECT || store->io_mode == IO_MMAP))
        die("%s=1 needs pre-quantized experts (NAME + NAME.qs); this model's experts are float: "
            "convert it with tools/convert_fp8_to_int4.py",
            store->io_mode == IO_DIRECT ? "DIRECT" : "MMAP");
}

/* Bytes of one expert slot: the largest expert's payload span (+ O_DIRECT alignment slack), or
   its three quantized tensors when the source is float. */
static void expert_slot_sizes(ExpertStore *store, size_t *slab, size_t *scales) {
    const int E = store->c->n_experts;
    size_t max_slab = 0, max_scales = 0;
    for (int l = 0; l < store->n_layers; l++) {
        if (store->c->layer_dense[l]) continue;
        for (int e = 0; e < E; e++) {
            const ExpertSource *src = &store->sources[(size_t)l * E + e];
            size_t data = 0, sc = 0;
            for (int k = 0; k < 3; k++) {
                if (src->scales[k]) {
                    data += src->data[k]->nbytes + src->scales[k]->nbytes;
                    /* scales used where the one read put them need no buffer of their own (see
                       expert_load) */
                    int scales_in_slab = src->whole_adjacent &&
                                         src->scales[0]->offset % sizeof(float) == 0 &&
                                         src->data[0]->offset % sizeof(float) == 0;
                    if (!scales_in_slab) sc += src->scales[k]->nbytes;
                }
                else {
                    QtFormat f = src->format[k];
                    int64_t g = f == QT_INT4_GROUP ? src->group[k] : src->cols[k];
                    data += (size_t)(src->rows[k] * qt_row_bytes(f, src->cols[k])) + 64;
                    if (f != QT_F32)
                        sc += (size_t)(src->rows[k] * ((src->cols[k] + g - 1) / g)) * sizeof(float);
                }
            }
            if (data > max_slab) max_slab = data;
            if (sc > max_scales) max_scales = sc;
        }
    }
    /* room for O_DIRECT alignment slack around each of up to four reads */
    /* MMAP needs no slab, but an expert's mapped pages count in RSS until it is evicted */
    store->mapped_expert_bytes = max_slab;
    *slab = store->io_mode == IO_MMAP ? 0 : max_slab + 8 * DIRECT_ALIGN;
    *scales = max_scales;
}

/* ---- 6.2 Reading an expert: the I/O modes and the page cache ---------------------------------

   O_DIRECT into the huge-page slots, bypassing the page cache (the default for pre-quantized
   experts where the filesystem allows it; DIRECT=1 insists); buffered pread (DIRECT=0; the default
   for float experts: the page cache is a second level); DROP=1 (pread, then evict the pages read);
   MMAP=1 (the views point into a read-only mapping; a file cut short while mapped is reported by
   name, not by SIGBUS). INPLACE: a load first asks mincore whether the page cache holds the expert
   (all but at most an eighth of its pages); if so it is used where it lies instead of copied (a
   warm 255-token prefill copied 5.4 GB on the cores its matmuls needed), and the slot's own
   memory is released meanwhile. */

static int pread_all(int fd, void *dst, size_t n, uint64_t off, size_t *got) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)dst + done, n - done, (off_t)(off + done));
        if (r < 0) { if (errno == EINTR) continue; return -1; }
        if (r == 0) break;
        done += (size_t)r;
    }
    *got = done;
    return 0;
}

static int io_serve_demands(ExpertStore *store);

/* pread_all for the I/O thread: a history prefetch reads in 4 MiB pieces and serves the demanded
   loads queued meanwhile between pieces, so a demand waits for at most one piece, never for a
   whole prefetched expert. */
static int expert_pread(ExpertStore *store, int fd, uint8_t *dst, size_t n, uint64_t off,
                        size_t *got) {
    if (!store->io_yield) return pread_all(fd, dst, n, off, got);
    /* a multiple of DIRECT_ALIGN: every piece stays aligned */
    const size_t piece = (size_t)4 << 20;
    size_t done = 0;
    while (done < n) {
        size_t want = n - done < piece ? n - done : piece, g;
        if (pread_all(fd, dst + done, want, off + done, &g)) { *got = done; return -1; }
        done += g;
        if (g < want) break;
        double t0 = now_seconds();
        store->io_yield = 0;   /* the demands themselves read straight through */
        pthread_mutex_lock(&store->lock);
        int served = 0;
        while (!store->io_stop && io_serve_demands(store)) served = 1;
        int stop = store->io_stop;
        pthread_mutex_unlock(&store->lock);
        store->io_yield = 1;
        if (served) store->io_nested_seconds += now_seconds() - t0;
        if (stop) { errno = ECANCELED; *got = done; return -1; }
    }
    *got = done;
    return 0;
}

/* Reads file bytes [off, off+n) into buf in the store's I/O mode; returns where they start. */
static uint8_t *expert_read_span(ExpertStore *store, int file, uint64_t off, uint64_t n,
                                 uint8_t *buf, size_t cap, char *err, size_t err_len) {
    const char *path = st_file_path(store->index, file);
    size_t got = 0;
    if (store->io_mode == IO_DIRECT) {
        uint64_t start = off / DIRECT_ALIGN * DIRECT_ALIGN;
        uint64_t end = (off + n + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
        if (end - start > cap) {
            snprintf(err, err_len, "%s: expert span of %llu bytes exceeds its slot", path,
                     (unsigned long long)n);
            return NULL;
        }
        if (expert_pread(store, store->direct_fds[file], buf, (size_t)(end - start), start, &got) ||
            got < off + n - start) {
            snprintf(err, err_len, "%s: O_DIRECT read of %llu bytes at %llu failed: %s", path,
                     (unsigned long long)(end - start), (unsigned long long)start,
                     got < off + n - start ? "file is shorter than its header says"
                                           : strerror(errno));
            return NULL;
        }
        return buf + (off - start);
    }
    if (n > cap) {
        snprintf(err, err_len, "%s: expert span of %llu bytes exceeds its slot", path,
                 (unsigned long long)n);
        return NULL;
    }
    int fd = st_file_fd(store->index, file);
    if (expert_pread(store, fd, buf, (size_t)n, off, &got) || got != n) {
        snprintf(err, err_len, "%s: read of %llu bytes at %llu failed: %s", path,
                 (unsigned long long)n, (unsigned long long)off,
                 got != n ? "file is shorter than its header says" : strerror(errno));
        return NULL;
    }
    if (store->io_mode == IO_DROP) posix_fadvise(fd, (off_t)off, (off_t)n, POSIX_FADV_DONTNEED);
    return buf;
}

/* MMAP=1 and INPLACE: a mapped file that shrank since it was opened would turn the next read of the
   lost pages into SIGBUS. Checked before an expert is used; the SIGBUS handler below covers the
   rest (a file cut after this check, or under an expert already cached). */
static int mapped_span_ok(ExpertStore *store, const StTensor *t, char *err, size_t err_len) {
    struct stat sb = { 0 };
    uint64_t end = t->offset + t->nbytes;
    if (fstat(st_file_fd(store->index, t->file), &sb) == 0 && (uint64_t)sb.st_size >= end) return 1;
    snprintf(err, err_len,
             "%s was truncated while running: tensor %s ends at byte %llu, the file now has %llu",
             st_file_path(store->index, t->file), t->name, (unsigned long long)end,
             (unsigned long long)sb.st_size);
    return 0;
}

static const ExpertStore *g_mapped_store;   /* MMAP=1 or INPLACE: the mappings on_sigbus looks up */

static void on_sigbus(int sig, siginfo_t *info, void *context) {
    (void)context;
    const ExpertStore *store = g_mapped_store;
    const uint8_t *addr = info->si_addr;
    for (int f = 0; store && f < st_file_count(store->index); f++) {
        if (!store->maps[f] || addr < store->maps[f] || addr >= store->maps[f] + store->map_len[f])
            continue;
        /* only async-signal-safe calls here: write and _exit */
        const char *path = st_file_path(store->index, f), *head = "glm: error: ",
                   *tail = " was truncated while running (an expert used in place read a page past "
                           "its end)\n";
        if (write(2, head, strlen(head)) < 0 || write(2, path, strlen(path)) < 0 ||
            write(2, tail, strlen(tail)) < 0) {}
        _exit(1);
    }
    signal(sig, SIG_DFL);   /* not a mapped model file: a real fault, report it as one */
    raise(sig);
}

/* Points the views of `slot` at expert `src` where the file mapping holds it (MMAP, or INPLACE for
   an expert the page cache holds) and maps its pages now. Adds the bytes it covers to *bytes.
   read_ahead: some pages are missing; ask for all of them at once first. */
static int expert_view_mapped(ExpertStore *store, const ExpertSource *src, ExpertSlot *slot,
                              int read_ahead, double *bytes, char *err, size_t err_len) {
    QTensor *w[3] = { &slot->w.gate, &slot->w.up, &slot->w.down };
    for (int k = 0; k < 3; k++)
        if (!mapped_span_ok(store, src->data[k], err, err_len) ||
            !mapped_span_ok(store, src->scales[k], err, err_len))
            return -1;
    size_t scales_used = 0;
    for (int k = 0; k < 3; k++) {
        const StTensor *d = src->data[k], *q = src->scales[k];
        const uint8_t *mapped_scales = store->maps[q->file] + q->offset;
        float *scales = (float *)mapped_scales;
        /* data starting at an odd offset: an aligned copy */
        if ((uintptr_t)mapped_scales % sizeof(float)) {
            scales = (float *)((uint8_t *)slot->scale_buf + scales_used);
            memcpy(scales, mapped_scales, (size_t)q->nbytes);
            scales_used += (size_t)q->nbytes;
        }
        *w[k] = qt_view(src->format[k], src->group[k], src->rows[k], src->cols[k],
                        store->maps[d->file] + d->offset, scales);
        *bytes += d->nbytes + q->nbytes;
    }
    const StTensor *first = src->data[0];
    slot->mapped_file = first->file;
    slot->mapped_off = first->offset;
    slot->mapped_len = src->data_adjacent
                           ? src->data[2]->offset + src->data[2]->nbytes - first->offset
                           : first->nbytes;
    /* fault the span in now, on the I/O thread, rather than during the matmul: one
       MADV_POPULATE_READ maps the whole span (reading what the page cache lacks) where a
       touch per page took a fault per 4 KiB; before Linux 5.14, the touches */
    const uint64_t page = page_bytes(), a = slot->mapped_off / page * page;
    uint8_t *span = store->maps[first->file] + a;
    const size_t span_len = slot->mapped_off + slot->mapped_len - a;
    /* the populate's faults read a missing run at a time (64 KiB holes: ~1.5 ms each here); one
       WILLNEED queues them all (in 4 MiB pieces: the kernel caps one hint at ~8 MiB) */
    for (size_t off = 0; read_ahead && off < span_len; off += (size_t)4 << 20)
        posix_fadvise(
            st_file_fd(store->index, first->file), (off_t)(a + off),
            (off_t)(span_len - off < ((size_t)4 << 20) ? span_len - off : (size_t)4 << 20),
            POSIX_FADV_WILLNEED);
    if (madvise(span, span_len, MADV_POPULATE_READ)) {
        madvise(span, span_len, MADV_WILLNEED);
        volatile uint8_t sink = 0;
        for (int k = 0; k < 3; k++)
            for (uint64_t i = 0; i < src->data[k]->nbytes; i += page)
                sink ^= store->maps[src->data[k]->file][src->data[k]->offset + i];
        (void)sink;
    }
    return 0;
}

/* INPLACE: mincore on one page in every `stride` of `t` and on its last page (mincore of every
   page cost ~0.4 ms per 21 MB expert here, about a third of mapping it). Returns how many of them
   the page cache lacks, stopping once that passes max_missing; -1: t is not mapped. */
static int64_t tensor_probe_page_cache(const ExpertStore *store, const StTensor *t, uint64_t stride,
                                       int64_t max_missing) {
    const uint8_t *map = store->maps[t->file];
    if (!map || t->offset + t->nbytes > store->map_len[t->file]) return -1;
    const uint64_t page = page_bytes(), first = t->offset / page * page,
                   last = (t->offset + t->nbytes - 1) / page * page;
    /* (stride may be PAGE_CACHE_GUESS: stride × page would overflow where pages are 64 KiB) */
    const uint64_t step = stride >= (last - first) / page ? last - first : stride * page;
    int64_t missing = 0;
    for (uint64_t a = first;; a = a + step < last ? a + step : last) {
        unsigned char in;
        if (mincore((void *)(map + a), page, &in)) return -1;
        if (!(in & 1) && ++missing > max_missing) return missing;
        if (a == last) return missing;
    }
}

/* The pages tensor_probe_page_cache probes in `t` at `stride`. */
static int64_t tensor_probe_count(const StTensor *t, uint64_t stride) {
    const uint64_t page = page_bytes(),
                   span = (t->offset + t->nbytes - 1) / page - t->offset / page;
    return (int64_t)(span / stride + 1 + (span % stride != 0));
}

/* Pages the page cache lacks among those probed in the expert's six tensors at `stride`, stopping
   once they pass max_missing; -1: a tensor is not mapped (or INPLACE is off). */
static int64_t expert_probe_page_cache(const ExpertStore *store, const ExpertSource *src,
                                       uint64_t stride, int64_t max_missing) {
    if (!store->in_place) return -1;
    int64_t missing = 0;
    for (int k = 0; k < 6 && missing <= max_missing; k++) {
        const int64_t m = tensor_probe_page_cache(store, k < 3 ? src->data[k] : src->scales[k - 3],
                                                  stride, max_missing - missing);
        if (m < 0) return -1;
        missing += m;
    }
    return missing;
}

/* expert_in_page_cache's stride for a guess from each tensor's first and last pages only */
#define PAGE_CACHE_GUESS (UINT64_MAX / 8192)

/* INPLACE: whether the page cache holds the expert now, judged by the pages probed at `stride`.
   The page cache evicts whole folios, seldom a few pages out of a tensor it holds; a page that is
   missing after all is read by the fault that touches it: slower, still correct. */
static int expert_in_page_cache(const ExpertStore *store, const ExpertSource *src,
                                uint64_t stride) {
    return expert_probe_page_cache(store, src, stride, 0) == 0;
}

/* INPLACE: the pages of `t` the page cache lacks, by mincore of every page (-1: t is not mapped).
   */
static int64_t tensor_pages_missing(const ExpertStore *store, const StTensor *t, int64_t *pages) {
    const uint8_t *map = store->maps[t->file];
    if (!map || t->offset + t->nbytes > store->map_len[t->file]) return -1;
    const uint64_t page = page_bytes(), first = t->offset / page * page,
                   end = t->offset + t->nbytes;
    unsigned char in[1024];
    int64_t missing = 0;
    for (uint64_t a = first; a < end; a += sizeof in * page) {
        const uint64_t n =
            (end - a + page - 1) / page < sizeof in ? (end - a + page - 1) / page : sizeof in;
        if (mincore((void *)(map + a), n * page, in)) return -1;
        for (uint64_t i = 0; i < n; i++) missing += !(in[i] & 1);
        *pages += (int64_t)n;
    }
    return missing;
}

/* An expert the page cache holds all but at most 1/IN_PLACE_MISSING_SHARE of is used in place too:
   mapping it reads the missing pages, far less than reading all of it into a slot, which also
   faults fresh slot memory in. The page cache loses folios here and there (memory pressure, or a
   host that pages out what nobody touched for a few seconds), seldom whole experts. With
   64 KiB of every 2 MiB of the bench model dropped, a warm 255-token prefill read 5.1 GB into
   fresh slots in 7.3 s; used in place, 1.9 s. */
enum { IN_PLACE_MISSING_SHARE = 8 };

/* Whether `src` is to be used in place (INPLACE), with the bytes of its pages the page cache lacks
   (that mapping it reads) in *missing_bytes. One page in 16 is probed first, and only an expert
   whose probes miss at most that share is counted page by page: the full count of a cold expert
   (every load of a cold decode) kept the I/O thread from its next read long enough to cost decode
   ~5 % (a cold decode's reads of 64 tokens, medians of 6 alternating runs: 1.67 s with the full
   count, 1.30 s with the probe first). */
static int expert_use_in_place(const ExpertStore *store, const ExpertSource *src,
                               double *missing_bytes) {
    *missing_bytes = 0;
    const uint64_t stride = 16;
    int64_t probes = 0;
    for (int k = 0; k < 3; k++)
        probes +=
            tensor_probe_count(src->data[k], stride) + tensor_probe_count(src->scales[k], stride);
    const int64_t sampled_missing =
        expert_probe_page_cache(store, src, stride, probes / IN_PLACE_MISSING_SHARE);
    if (sampled_missing < 0 || sampled_missing > probes / IN_PLACE_MISSING_SHARE) return 0;
    if (sampled_missing == 0) return 1;
    int64_t pages = 0, missing = 0;
    for (int k = 0; k < 3; k++) {
        const int64_t md = tensor_pages_missing(store, src->data[k], &pages),
                      ms = tensor_pages_missing(store, src->scales[k], &pages);
        if (md < 0 || ms < 0) return 0;
        missing += md + ms;
    }
    if (missing * IN_PLACE_MISSING_SHARE > pages) return 0;
    *missing_bytes = (double)missing * (double)page_bytes();
    return 1;
}

/* Brings expert `e` of `layer` into `slot`. Runs on the I/O thread (or inline). */
static int expert_load(ExpertStore *store, int layer, int e, ExpertSlot *slot) {
    const ExpertSource *src = &store->sources[(size_t)layer * store->c->n_experts + e];
    QTensor *w[3] = { &slot->w.gate, &slot->w.up, &slot->w.down };
    char *err = slot->error;
    const size_t err_len = sizeof slot->error;
    /* demands served inside a prefetch count on their own */
    double t0 = now_seconds(), nested0 = store->io_nested_seconds;
    double bytes = 0, missing_bytes = 0;
    int in_place = 0;
    /* the evicted expert was mapped: drop its pages from our RSS (here, off the compute threads) */
    if (slot->mapped_len) {
        const uint64_t page = page_bytes(), a = slot->mapped_off / page * page;
        madvise(store->maps[slot->mapped_file] + a, slot->mapped_off + slot->mapped_len - a,
                MADV_DONTNEED);
        slot->mapped_len = 0;
    }
    if (!store->prequantized) {
        /* float source: read f32 rows, quantize into the slot's own memory */
        uint8_t *p = slot->slab;
        float *sp = slot->scale_buf;
        for (int k = 0; k < 3; k++) {
            QtFormat f = src->format[k];
            *w[k] =
                qt_view(f, src->group[k], src->rows[k], src->cols[k], p, f == QT_F32 ? NULL : sp);
            if (st_read_f32_rows(store->index, src->data[k], src->fused_row0[k], src->rows[k],
                                 store->staging, err, err_len))
                return -1;
            int64_t bad = first_nonfinite(store->staging, src->rows[k] * src->cols[k]);
            if (bad >= 0) {
                snprintf(err, err_len, "%s: tensor %s: value at row %lld is not finite",
                         st_file_path(store->index, src->data[k]->file), src->data[k]->name,
                         (long long)(src->fused_row0[k] + bad / src->cols[k]));
                return -1;
            }
            qt_quantize_rows(w[k], 0, src->rows[k], store->staging);
            p += (size_t)(src->rows[k] * w[k]->row_bytes + 63) / 64 * 64;
            if (f != QT_F32) sp += src->rows[k] * qt_groups_per_row(w[k]);
            bytes += (double)src->rows[k] * src->cols[k] * st_dtype_size(src->data[k]->dtype);
        }
    } else if (store->io_mode == IO_MMAP) {
        if (expert_view_mapped(store, src, slot, 0, &bytes, err, err_len)) return -1;
    } else if (expert_use_in_place(store, src, &missing_bytes)) {
        if (expert_view_mapped(store, src, slot, missing_bytes > 0, &bytes, err, err_len))
            return -1;
        in_place = 1;
        /* a slot holds its own memory or the page cache's, never both, so RSS stays in the budget
           (io_load_slot marks it fresh again) */
        const int helper_faulted = slot - store->caches[layer].slots <
                                   __atomic_load_n(&store->populated_slots, __ATOMIC_ACQUIRE);
        if ((slot->faulted || helper_faulted) && slot->slab)
            madvise(slot->slab, store->slab_stride, MADV_DONTNEED);
    } else {
        uint8_t *base[3];
        float *sbase[3];
        if (src->whole_adjacent) {
            /* the converter's layout: gate, up, down payloads, then their scales: ONE read */
            const StTensor *d0 = src->data[0], *q2 = src->scales[2];
            uint64_t span = q2->offset + q2->nbytes - d0->offset;
            uint8_t *p = expert_read_span(store, d0->file, d0->offset, span, slot->slab,
                                          store->slab_bytes, err, err_len);
            if (!p) return -1;
            for (int k = 0; k < 3; k++) {
                base[k] = p + (src->data[k]->offset - d0->offset);
                sbase[k] = (float *)(p + (src->scales[k]->offset - d0->offset));
            }
            /* odd offsets: give the scales an aligned home */
            if ((uintptr_t)sbase[0] % sizeof(float)) {
                memcpy(slot->scale_buf, sbase[0],
                       (size_t)(q2->offset + q2->nbytes - src->scales[0]->offset));
                for (int k = 2; k >= 0; k--)
                    sbase[k] = slot->scale_buf +
                               (src->scales[k]->offset - src->scales[0]->offset) / sizeof(float);
            }
            bytes += span;
        } else if (src->data_adjacent) {
            const StTensor *d0 = src->data[0];
            uint64_t span = src->data[2]->offset + src->data[2]->nbytes - d0->offset;
            uint8_t *p = expert_read_span(store, d0->file, d0->offset, span, slot->slab,
                                          store->slab_bytes, err, err_len);
            if (!p) return -1;
            for (int k = 0; k < 3; k++) base[k] = p + (src->data[k]->offset - d0->offset);
            bytes += span;
        } else {
            /* a conversion that did not keep them adjacent: three reads */
            size_t used = 0;
            for (int k = 0; k < 3; k++) {
                const StTensor *d = src->data[k];
                base[k] = expert_read_span(store, d->file, d->offset, d->nbytes, slot->slab + used,
                                           store->slab_bytes - used, err, err_len);
                if (!base[k]) return -1;
                used += (size_t)((d->nbytes + 2 * DIRECT_ALIGN) / DIRECT_ALIGN * DIRECT_ALIGN);
                bytes += d->nbytes;
            }
        }
        /* scales of a conversion that did not put them right after the payloads: buffered */
        size_t used = 0;
        for (int k = 0; k < 3 && !src->whole_adjacent; k++) {
            const StTensor *q = src->scales[k];
            if (k > 0 && src->scales_adjacent) {
                sbase[k] = sbase[0] + (q->offset - src->scales[0]->offset) / sizeof(float);
                continue;
            }
            uint64_t n = src->scales_adjacent
                             ? src->scales[2]->offset + src->scales[2]->nbytes - q->offset
                             : q->nbytes;
            size_t got;
            if (pread_all(st_file_fd(store->index, q->file), (uint8_t *)slot->scale_buf + used,
                          (size_t)n, q->offset, &got) ||
                got != n) {
                snprintf(err, err_len, "%s: reading scales of layer %d expert %d failed",
                         st_file_path(store->index, q->file), layer, e);
                return -1;
            }
            sbase[k] = (float *)((uint8_t *)slot->scale_buf + used);
            used += (size_t)n;
            bytes += n;
        }
        for (int k = 0; k < 3; k++)
            *w[k] = qt_view(src->format[k], src->group[k], src->rows[k], src->cols[k], base[k],
                            sbase[k]);
    }
    for (int k = 0; k < 3 && store->prequantized; k++) {
        int64_t bad = first_bad_scale(w[k]->scales, st_numel(src->scales[k]));
        if (bad >= 0) {
            snprintf(err, err_len, "%s: tensor %s.qs: scale %lld is %g (must be finite and >= 0)",
                     st_file_path(store->index, src->scales[k]->file), src->data[k]->name,
                     (long long)bad, w[k]->scales[bad]);
            return -1;
        }
    }
    pthread_mutex_lock(&store->lock);
    const double seconds = now_seconds() - t0 - (store->io_nested_seconds - nested0);
    if (in_place) {   /* not a read: kept out of the read rate */
        store->in_place_loads++;
        store->in_place_bytes += bytes;
        store->in_place_missing_bytes += missing_bytes;
        store->in_place_seconds += seconds;
    } else {
        store->bytes_read += bytes;
        store->read_seconds += seconds;
    }
    pthread_mutex_unlock(&store->lock);
    return 0;
}

/* ---- 6.3 The I/O thread: demanded reads first, prefetches between them ----------------------- */

/* Loads `slot` of `layer` on the I/O thread; called and returns with the lock held. */
static void io_load_slot(ExpertStore *store, int layer, ExpertSlot *slot, int prefetch) {
    slot->loading = 1;
    const int expert = slot->expert;   /* fixed while loading: a loading slot is never a victim */
    pthread_mutex_unlock(&store->lock);
    store->io_yield = prefetch;
    int failed = expert_load(store, layer, expert, slot) != 0;
    store->io_yield = 0;
    pthread_mutex_lock(&store->lock);
    slot->loading = 0;
    slot->failed = failed;
    /* expert_in_ram reads it without the lock */
    __atomic_store_n(&slot->ready, 1, __ATOMIC_RELEASE);
    /* used in place: its slot's memory was released or never touched */
    if (slot->mapped_len) slot->faulted = 0;
    else {
        store->read_loads++;
        if (!slot->faulted) {
            slot->faulted = 1;
            LayerCache *lc = &store->caches[layer];
            if (++lc->read_slots + store->c->experts_per_tok > store->populate_wanted)
                store->populate_wanted = lc->read_slots + store->c->experts_per_tok;
        }
        pthread_cond_signal(&store->populate_more);   /* the helper may go on: reads want slots */
    }
    if (prefetch && !failed) {
        slot->prefetched = 1;
        ++*(slot->ahead ? &store->read_ahead : &store->prefetched);
    }
    pthread_cond_broadcast(&store->done);
}

/* A prefetch of an expert the page cache holds is dropped (INPLACE): a demand will use it where
   it lies at the cost of a mapping, so reading or mapping it ahead gains nothing, and the work and
   page faults it takes would land beside the compute of the prefill that follows (with a usage
   history on a warm page cache, prefills ran up to twice as long). Only a history prefetch, whose
   slot held nothing the cache counts on; lock held. Returns 1 when dropped. */
static int io_prefetch_needless(ExpertStore *store, int layer, ExpertSlot *slot) {
    if (!store->in_place || store->io_mode == IO_MMAP || slot->ahead) return 0;
    const ExpertSource *src = &store->sources[(size_t)layer * store->n_experts + slot->expert];
    if (!expert_in_page_cache(store, src, PAGE_CACHE_GUESS)) return 0;
    LayerCache *lc = &store->caches[layer];
    tier_cache_assign(&lc->cache, (int)(slot - lc->slots), -1);
    slot->expert = -1;
    store->prefetch_skipped++;
    return 1;
}

/* Runs the oldest demanded load, if any; lock held. Returns 1 if it ran one. */
static int io_serve_demands(ExpertStore *store) {
    if (store->queue_head == store->queue_tail) return 0;
    LoadJob job = store->queue[store->queue_head % store->queue_cap];
    store->queue_head++;
    io_load_slot(store, job.layer, &store->caches[job.layer].slots[job.slot], 0);
    return 1;
}

/* The waiting history prefetch with the lowest rank (then layer), or NULL; lock held. */
static ExpertSlot *io_next_prefetch(ExpertStore *store, int *layer) {
    ExpertSlot *best = NULL;
    for (int l = 0; l < store->n_layers && store->prefetch_pending; l++) {
        if (store->c->layer_dense[l]) continue;
        for (int s = 0; s < store->slots_per_layer; s++) {
            ExpertSlot *sl = &store->caches[l].slots[s];
            if (sl->prefetch_rank >= 0 && (!best || sl->prefetch_rank < best->prefetch_rank)) {
                best = sl;
                *layer = l;
            }
        }
    }
    return best;
}

static void *expert_io_thread(void *arg) {
    ExpertStore *store = arg;
    pthread_mutex_lock(&store->lock);
    for (;;) {
        if (io_serve_demands(store)) continue;   /* demands always first */
        if (store->io_stop) break;
        int layer = -1;
        ExpertSlot *slot = store->prefetch_pending && store->prefetch_open
                               ? io_next_prefetch(store, &layer)
                               : NULL;
        if (slot) {
            slot->prefetch_rank = -1;
            store->prefetch_pending--;
            if (io_prefetch_needless(store, layer, slot)) continue;
            io_load_slot(store, layer, slot, 1);
            continue;
        }
        pthread_cond_wait(&store->work, &store->lock);
    }
    pthread_mutex_unlock(&store->lock);
    return NULL;
}

/* ---- 6.4 Opening the files and faulting the slot arena in ------------------------------------ */

/* Maps model file f read-only (MMAP, INPLACE): 0, or -1 with the reason in err (the file is shorter
   than its header says, or mmap refused). Pages come in by reads, not by faults: MADV_RANDOM. */
static int expert_map_file(ExpertStore *store, int f, char *err, size_t err_len) {
    const char *path = st_file_path(store->index, f);
    const off_t size = lseek(st_file_fd(store->index, f), 0, SEEK_END);
    if (size < 0 || (uint64_t)size < st_file_size(store->index, f)) {
        snprintf(err, err_len,
                 "%s was truncated while running: %lld bytes now, %llu when its header was read",
                 path, (long long)size, (unsigned long long)st_file_size(store->index, f));
        return -1;
    }
    void *map =
        size ? mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, st_file_fd(store->index, f), 0)
             : MAP_FAILED;
    if (map == MAP_FAILED) {
        snprintf(err, err_len, "%s: mmap failed: %s", path, size ? strerror(errno) : "empty file");
        return -1;
    }
    madvise(map, (size_t)size, MADV_RANDOM);
    store->maps[f] = map;
    store->map_len[f] = (uint64_t)size;
    return 0;
}

/* Opens what the I/O mode reads through: an O_DIRECT descriptor per file (DIRECT=-1 falls back to
   buffered pread where the filesystem refuses O_DIRECT), and a read-only mapping per file for MMAP
   and for INPLACE (pre-quantized experts only), with a SIGBUS handler that names a file cut short
   while mapped. An INPLACE mapping that fails only turns in-place use off for that file. */
static void expert_store_open_files(ExpertStore *store) {
    store->n_files = st_file_count(store->index);
    store->in_place = store->in_place && store->prequantized;
    if (store->io_mode == IO_DIRECT) {
        store->direct_fds = xmalloc((size_t)store->n_files * sizeof(int));
        for (int f = 0; f < store->n_files; f++) store->direct_fds[f] = -1;
    }
    const int map_files = store->io_mode == IO_MMAP || store->in_place;
    if (map_files) {
        store->maps = xcalloc((size_t)store->n_files, sizeof(uint8_t *));
        store->map_len = xcalloc((size_t)store->n_files, sizeof(uint64_t));
    }
    if (store->io_mode != IO_DIRECT && !map_files) return;
    for (int f = 0; f < store->n_files; f++) {
        const char *path = st_file_path(store->index, f);
        char err[4400];
        if (map_files && expert_map_file(store, f, err, sizeof err) && store->io_mode == IO_MMAP)
            die("%s", err);
        if (store->io_mode == IO_DIRECT) {
            store->direct_fds[f] = open(path, O_RDONLY | O_DIRECT);
            /* e.g. tmpfs: auto mode falls back */
            if (store->direct_fds[f] < 0 && !store->direct_forced) {
                fprintf(stderr,
                        "glm: note: %s cannot be opened with O_DIRECT (%s); experts are read with "
                        "buffered pread\n",
                        path, strerror(errno));
                for (int g = 0; g < f; g++) close(store->direct_fds[g]);
                free(store->direct_fds);
                store->direct_fds = NULL;
                store->io_mode = IO_PREAD;
                continue;
            }
            if (store->direct_fds[f] < 0)
                die("%s: cannot open with O_DIRECT: %s (DIRECT=0 reads with buffered pread)", path,
                    strerror(errno));
        }
    }
    if (map_files) {
        g_mapped_store = store;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGBUS, &sa, NULL);
    }
}

/* Faults the slot arena in, 2 MiB at a time, in the order the cache fills it (slot 0 of every
   layer first), at SCHED_IDLE priority: it runs only on a CPU nothing else wants, so the first
   token never waits for it. While experts used in place from the page cache (which need no slot
   memory) outnumber reads, it stays experts_per_tok slots ahead of the slots reads have used
   (populate_wanted), no further: faulting fresh memory cost a warm 255-token prefill
   ~20 % even at idle priority (the faults stall the other CPU's work too). Otherwise it goes on:
   kept at that distance while reads came from the disk, the cache grew too slowly (cold decode hit
   56 % instead of 64 %). MADV_POPULATE_WRITE maps the pages without writing to them, so it is
   harmless next to a read into the same slot (so is mlock, the fallback on older kernels). Where
   neither works, a slot is faulted by its first read instead, ~5x slower than a read here. */
static void *slot_populate_thread(void *arg) {
    ExpertStore *store = arg;
    struct sched_param idle = { 0 };
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);
    const size_t piece = (size_t)2 << 20;
    const size_t per_layer = store->slab_stride * (size_t)store->slots_per_layer;
    const size_t moe_layers = per_layer ? store->arena_bytes / per_layer : 0;
    for (int s = 0; s < store->slots_per_layer; s++) {
        pthread_mutex_lock(&store->lock);
        while (s >= store->populate_wanted &&
               store->in_place_loads + store->in_place_likely > store->read_loads &&
               !__atomic_load_n(&store->populate_stop, __ATOMIC_RELAXED))
            pthread_cond_wait(&store->populate_more, &store->lock);
        pthread_mutex_unlock(&store->lock);
        for (size_t k = 0; k < moe_layers; k++) {
            uint8_t *slab = store->arena + k * per_layer + (size_t)s * store->slab_stride;
            for (size_t off = 0; off < store->slab_stride; off += piece) {
                size_t n = store->slab_stride - off < piece ? store->slab_stride - off : piece;
                if (__atomic_load_n(&store->populate_stop, __ATOMIC_RELAXED)) goto done;
                /* before Linux 5.14: mlock faults the pages in just as well, and munlock lets them
                   be */
                if (madvise(slab + off, n, MADV_POPULATE_WRITE) &&
                    (mlock(slab + off, n) || munlock(slab + off, n)))
                    goto done;
            }
        }
        __atomic_store_n(&store->populated_slots, s + 1, __ATOMIC_RELEASE);
    }
done:
    __atomic_store_n(&store->populate_running, 0, __ATOMIC_RELEASE);
    return NULL;
}

/* ---- 6.5 The usage history: what earlier runs routed ----------------------------------------- */

/* The model's identity for what glm remembers about it: the config's shape and the layout of
   every routed expert's tensors (name, file name, offset, size, dtype). Moving the model folder
   keeps it; converting the model again with other bits or another layout changes it. */
static uint64_t expert_layout_fingerprint(const ExpertStore *store) {
    const Config *c = store->c;
    const int E = c->n_experts;
    const int32_t shape[] = { store->n_layers,    E,
                              c->hidden,          c->moe_inter,
                              c->experts_per_tok, store->expert_bits,
                              store->group };
    uint64_t h = tier_hash(TIER_HASH_SEED, shape, sizeof shape);
    h = tier_hash(h, c->layer_dense, (size_t)store->n_layers);
    for (int l = 0; l < store->n_layers; l++) {
        if (c->layer_dense[l]) continue;
        for (int e = 0; e < E; e++) {
            const ExpertSource *src = &store->sources[(size_t)l * E + e];
            for (int k = 0; k < 6; k++) {
                const StTensor *t = k < 3 ? src->data[k] : src->scales[k - 3];
                if (!t) continue;
                const char *path = st_file_path(store->index, t->file), *base = strrchr(path, '/');
                base = base ? base + 1 : path;
                const uint64_t where[4] = { t->offset, t->nbytes, (uint64_t)t->dtype,
                                            (uint64_t)(k < 3 ? src->fused_row0[k] : 0) };
                h = tier_hash(h, t->name, strlen(t->name) + 1);
                h = tier_hash(h, base, strlen(base) + 1);
                h = tier_hash(h, where, sizeof where);
            }
        }
    }
    return h;
}

/* USAGE: "off", a file, or "" for the default file of this model in the user's cache directory. */
static void expert_usage_path(ExpertStore *store, const char *setting, const char *cache_dir) {
    store->usage_path[0] = 0;
    if (!strcmp(setting, "off")) return;
    if (setting[0]) {
        snprintf(store->usage_path, sizeof store->usage_path, "%s", setting);
        store->usage_named = 1;
        return;
    }
    if (!cache_dir[0]) return;   /* no HOME and no XDG_CACHE_HOME: nowhere to keep it */
    char dir[4000];
    snprintf(dir, sizeof dir, "%s/glm", cache_dir);
    mkdir(cache_dir, 0700);
    if (mkdir(dir, 0700) && errno != EEXIST) {
        say("note: cannot create %s (%s); no usage history this run (USAGE=off hides this)", dir,
            strerror(errno));
        return;
    }
    snprintf(store->usage_path, sizeof store->usage_path, "%s/usage-%016llx.bin", dir,
             (unsigned long long)store->fingerprint);
}

/* A file at the usage history's path that is not a glm usage history, or is another model's, is
   never trusted and never overwritten: a file USAGE names stops the run with its name and why (as
   SESSION does); one in the cache directory is left alone with one line, and this run keeps no
   history. (A damaged or older history of glm's own is ignored and replaced at the next save.) */
static void expert_usage_refuse(ExpertStore *store, const char *why) {
    if (store->usage_named)
        die("USAGE=%s is not a usage history of this model (%s): glm does not overwrite it; "
            "name another file, or USAGE=off", store->usage_path, why);
    say("note: usage history %s ignored and left as it is (%s); no history this run (delete the "
        "file to start a new one)", store->usage_path, why);
    store->usage_path[0] = 0;
}

/* Reads the usage history into the LFU counts: the file is read with a size bound, its magic,
   version, shape, fingerprint and checksum are checked (tier.h). Returns 1 when it was used. */
static int expert_usage_load(ExpertStore *store) {
    const int E = store->n_experts;
    const size_t want = tier_usage_size(store->n_layers, E);
    /* O_NONBLOCK: a FIFO cannot hang us */
    int fd = open(store->usage_path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT) expert_usage_refuse(store, strerror(errno));
        return 0;
    }
    struct stat sb;
    uint8_t *buf = NULL, magic[8];
    size_t got = 0;
    char why[256] = "";
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        expert_usage_refuse(store, "not a regular file");
        return 0;
    }
    if (sb.st_size > 0 && (pread_all(fd, magic, sizeof magic, 0, &got) || got != sizeof magic
                           || memcmp(magic, "GLMUSAGE", sizeof magic))) {
        close(fd);
        expert_usage_refuse(store, "not a glm usage history");
        return 0;
    }
    /* the header says whose history it is: another model's shape or fingerprint is refused */
    uint8_t head[TIER_USAGE_HEADER];
    if (sb.st_size >= (off_t)sizeof head && !pread_all(fd, head, sizeof head, 0, &got) &&
        got == sizeof head &&
        (get_u32(head + 12) != (uint32_t)store->n_layers || get_u32(head + 16) != (uint32_t)E ||
         get_u64(head + 24) != store->fingerprint)) {
        close(fd);
        expert_usage_refuse(store, "a usage history written for another model");
        return 0;
    }
    if ((uint64_t)sb.st_size != want)
        snprintf(why, sizeof why, "%lld bytes, a history of this model has %zu",
                 (long long)sb.st_size, want);
    else {
        buf = xmalloc(want);
        if (pread_all(fd, buf, want, 0, &got) || got != want)
            snprintf(why, sizeof why, "cannot read it: %s",
                     got != want ? "short read" : strerror(errno));
    }
    close(fd);
    uint32_t *counts = NULL;
    uint64_t tokens = 0;
    if (!why[0]) {
        counts = xmalloc((size_t)store->n_layers * E * sizeof(uint32_t));
        tier_usage_decode(buf, want, store->fingerprint, store->n_layers, E, counts, &tokens, why,
                          sizeof why);
    }
    free(buf);
    if (why[0]) {
        free(counts);
        say("note: usage history %s ignored: %s; it is replaced at the next save",
            store->usage_path, why);
        return 0;
    }
    for (int l = 0; l < store->n_layers; l++)
        if (!store->c->layer_dense[l])
            tier_seed_requests(&store->caches[l].cache, counts + (size_t)l * E);
    store->usage_history = counts;
    store->usage_tokens = tokens;
    say_detail("usage history %s: the routing of %llu earlier tokens seeds the expert cache",
               store->usage_path, (unsigned long long)tokens);
    return 1;
}

/* Writes the usage history (atomically: a kill leaves the old file or the new one): per layer,
   the counts read at start, halved once for every 16 requests per expert this run made (the LFU's
   decay), plus this run's router choices. */
static void expert_usage_save(ExpertStore *store) {
    if (!store->usage_path[0] || !store->io_started) return;
    const int E = store->n_experts;
    uint32_t *counts = xcalloc((size_t)store->n_layers * E, sizeof(uint32_t));
    for (int l = 0; l < store->n_layers; l++) {
        if (store->c->layer_dense[l]) continue;
        const long long *run = store->route_counts + (size_t)l * E;
        const uint32_t *old = store->usage_history ? store->usage_history + (size_t)l * E : NULL;
        uint64_t requests = 0, sum = 0;
        for (int e = 0; e < E; e++) requests += (uint64_t)run[e];
        const uint64_t halvings = requests / (16 * (uint64_t)E);
        uint64_t *merged = xmalloc((size_t)E * sizeof(uint64_t));
        for (int e = 0; e < E; e++) {
            merged[e] = (old && halvings < 32 ? old[e] >> halvings : 0) + (uint64_t)run[e];
            sum += merged[e];
        }
        int shift = 0;
        /* keep the counts far from overflow */
        while ((sum >> shift) > ((uint64_t)1 << 30)) shift++;
        for (int e = 0; e < E; e++) counts[(size_t)l * E + e] = (uint32_t)(merged[e] >> shift);
        free(merged);
    }
    const size_t n = tier_usage_size(store->n_layers, E);
    uint8_t *buf = xmalloc(n);
    tier_usage_encode(buf, store->fingerprint, store->n_layers, E, store->usage_tokens, counts);
    AtomicFile af;
    char err[8800];
    FILE *f = atomic_begin(&af, store->usage_path, err, sizeof err);
    if (f && fwrite(buf, 1, n, f) != n) {
        snprintf(err, sizeof err, "writing %s failed", store->usage_path);
        atomic_abort(&af);
        f = NULL;
    }
    if (!f || atomic_commit(&af, err, sizeof err)) {
        say("warning: usage history not saved: %s (USAGE=off turns it off)", err);
        store->usage_path[0] = 0;   /* say it once */
    }
    free(buf);
    free(counts);
    store->usage_since_save = 0;
}

/* After a forward over `positions` tokens: the history is saved every USAGE_SAVE_EVERY tokens,
   so a crash or a kill loses at most that much of what this run learned. */
#define USAGE_SAVE_EVERY 256
static void expert_usage_tick(ExpertStore *store, int positions) {
    if (!store->usage_path[0]) return;
    store->usage_tokens += (uint64_t)positions;
    store->usage_since_save += positions;
    if (store->usage_since_save >= USAGE_SAVE_EVERY) expert_usage_save(store);
}

/* ---- 6.6 Prefetch while idle; starting and stopping the store -------------------------------- */

/* The engine has nothing to compute (before the first token; between chat turns): queue history
   prefetches of each layer's most requested experts that are not in RAM, into the slots of
   experts requested less. The I/O thread runs them until the next router call, and only while no
   demanded read waits (between 4 MiB pieces it serves any that came). Those left wait for the
   next idle time: while the engine computes, a prefetch would share the disk and the page
   faults with the reads it waits for (on the bench fixture, 16-token runs with history ran at half
   the tok/s when prefetches went on during decode). */
/* Slot `s` of `lc` now holds `expert` as a waiting prefetch of rank `rank` (lower first; `ahead`: a
   prefill read-ahead, else the usage history's), and `avoid` marks it; lock held. */
static void expert_queue_prefetch(ExpertStore *store, LayerCache *lc, int s, int expert, int rank,
                                  int ahead) {
    tier_cache_assign(&lc->cache, s, expert);
    ExpertSlot *sl = &lc->slots[s];
    sl->expert = expert;
    sl->ready = 0;
    sl->failed = 0;
    sl->prefetched = 0;
    sl->ahead = ahead;
    sl->loaded_in_step = -1;
    if (sl->prefetch_rank < 0) store->prefetch_pending++;
    sl->prefetch_rank = rank;
    lc->avoid[s] = 1;
}

/* Lets the I/O thread run waiting prefetches when no demand waits; lock held. */
static void expert_open_prefetches(ExpertStore *store) {
    store->prefetch_open = 1;
    if (store->prefetch_pending) pthread_cond_signal(&store->work);
}

static void expert_store_idle(ExpertStore *store) {
    /* MMAP: the page cache is the cache */
    if (!store->io_started || store->io_mode == IO_MMAP) return;
    const int spl = store->slots_per_layer;
    int *hot = xmalloc((size_t)spl * sizeof(int));
    pthread_mutex_lock(&store->lock);
    for (int l = 0; l < store->n_layers; l++) {
        if (store->c->layer_dense[l]) continue;
        LayerCache *lc = &store->caches[l];
        TierCache *tc = &lc->cache;
        const int n = tier_hottest(tc->requests, store->n_experts, hot, spl);
        for (int s = 0; s < spl; s++) lc->avoid[s] = lc->busy[s] || lc->slots[s].loading;
        for (int i = 0; i < n; i++)
            if (tc->expert_slot[hot[i]] >= 0) lc->avoid[tc->expert_slot[hot[i]]] = 1;
        for (int i = 0; i < n; i++) {
            if (tc->expert_slot[hot[i]] >= 0) continue;   /* in RAM or on its way */
            int s = tier_cache_victim(tc, lc->avoid);
            if (s < 0) break;
            const int old = tc->slot_expert[s];
            /* the rest are cached or hotter */
            if (old >= 0 && tc->requests[old] >= tc->requests[hot[i]]) break;
            expert_queue_prefetch(store, lc, s, hot[i], i, 0);
        }
    }
    expert_open_prefetches(store);
    pthread_mutex_unlock(&store->lock);
    free(hot);
}

/* Reserves the slots (faulted in later: expert_store_populate), starts the I/O thread, and seeds
   the cache from the usage history (USAGE: "off", a file, or "" for the default file in
   cache_dir): its hottest experts are read while the resident weights load. */
static void expert_store_start(ExpertStore *store, int slots_per_layer, const char *usage,
                               const char *cache_dir) {
    const int E = store->c->n_experts;
    store->slots_per_layer = slots_per_layer;
    store->caches = xcalloc((size_t)store->n_layers, sizeof(LayerCache));
    int moe_layers = 0;
    for (int l = 0; l < store->n_layers; l++) moe_layers += !store->c->layer_dense[l];
    /* one arena for every slab, 2 MiB-aligned and huge-page-backed: 2 MiB pages make O_DIRECT
       requests 4x larger (~3x the read rate) and fault 512x fewer times */
    const size_t page = page_bytes();
    /* whole pages: madvise per slot */
    store->slab_stride = (store->slab_bytes + page - 1) / page * page;
    store->arena_bytes = store->slab_stride * (size_t)slots_per_layer * (size_t)moe_layers;
    if (store->arena_bytes) {
        const size_t huge = huge_page_bytes();
        uint8_t *map = mmap(NULL, store->arena_bytes + huge, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (map == MAP_FAILED)
            die("cannot allocate %.2f GB of expert slots", store->arena_bytes / 1e9);
        store->arena_map = map;
        store->arena_map_bytes = store->arena_bytes + huge;
        store->arena = (uint8_t *)(((uintptr_t)map + huge - 1) & ~(uintptr_t)(huge - 1));
        madvise(store->arena, store->arena_bytes, MADV_HUGEPAGE);
    }
    size_t used = 0;
    for (int l = 0; l < store->n_layers; l++) {
        if (store->c->layer_dense[l]) continue;
        LayerCache *lc = &store->caches[l];
        if (tier_cache_init(&lc->cache, slots_per_layer, E))
            die("out of memory for the expert cache");
        lc->cache.policy = store->policy;
        lc->slots = xcalloc((size_t)slots_per_layer, sizeof(ExpertSlot));
        lc->busy = xcalloc((size_t)slots_per_layer, 1);
        lc->avoid = xcalloc((size_t)slots_per_layer, 1);
        lc->scratch = xcalloc((size_t)slots_per_layer, 1);
        for (int s = 0; s < slots_per_layer; s++) {
            lc->slots[s].slab = store->arena ? store->arena + used : NULL;
            used += store->slab_stride;
            lc->slots[s].scale_buf =
                store->scale_bytes ? xcalloc(store->scale_bytes / sizeof(float) + 16, sizeof(float))
                                   : NULL;
            lc->slots[s].expert = -1;
            lc->slots[s].prefetch_rank = -1;
        }
    }
    if (!store->prequantized) {
        size_t most = (size_t)store->c->moe_inter * store->c->hidden;
        store->staging = xmalloc(most * sizeof(float));
    }
    store->queue_cap = E + 1;
    store->queue = xcalloc((size_t)store->queue_cap, sizeof(LoadJob));
    pthread_mutex_init(&store->lock, NULL);
    pthread_cond_init(&store->work, NULL);
    pthread_cond_init(&store->done, NULL);
    pthread_cond_init(&store->populate_more, NULL);
    store->populate_wanted = store->c->experts_per_tok;
    if (pthread_create(&store->io_thread, NULL, expert_io_thread, store))
        die("cannot start the expert I/O thread");
    store->io_started = 1;
    store->fingerprint = expert_layout_fingerprint(store);
    expert_usage_path(store, usage, cache_dir);
    if (store->usage_path[0] && expert_usage_load(store)) expert_store_idle(store);
}

/* Starts faulting the slot arena in (slot_populate_thread). Called once the resident weights are
   loaded: both fault fresh memory, and the load comes first. */
static void expert_store_populate(ExpertStore *store) {
    if (!store->arena_bytes || store->populate_started) return;
    /* the first and the middle expert of each MoE layer in the page cache: the first loads will
       likely be in place, so the helper starts at the pace of in-place loads (the first prompt
       comes right after this, and faulting ahead cost a warm 255-token prefill ~10 %) */
    int probed = 0, resident = 0;
    for (int l = 0; store->in_place && l < store->n_layers; l++) {
        if (store->c->layer_dense[l]) continue;
        for (int e = 0;
             e<store->n_experts; e += store->n_experts / 2> 0 ? store->n_experts / 2 : 1, probed++)
            resident += expert_in_page_cache(
                store, &store->sources[(size_t)l * store->n_experts + e], PAGE_CACHE_GUESS);
    }
    store->in_place_likely = probed > 0 && resident * 2 > probed;
    __atomic_store_n(&store->populate_running, 1, __ATOMIC_RELEASE);
    if (!pthread_create(&store->populate_thread, NULL, slot_populate_thread, store))
        store->populate_started = 1;
    else __atomic_store_n(&store->populate_running, 0, __ATOMIC_RELEASE);
}

/* Ends the slot helper and waits for it: stop = 1, at its next 2 MiB piece; stop = 0, once it has
   faulted the rest of the arena in, unpaced. The seconds it took; 0 when there was no helper. */
static double expert_store_end_populate(ExpertStore *store, int stop) {
    if (!store->populate_started) return 0;
    const double t0 = now_seconds();
    pthread_mutex_lock(&store->lock);
    if (stop) __atomic_store_n(&store->populate_stop, 1, __ATOMIC_RELAXED);
    else store->populate_wanted = store->slots_per_layer;
    pthread_cond_signal(&store->populate_more);
    pthread_mutex_unlock(&store->lock);
    pthread_join(store->populate_thread, NULL);
    store->populate_started = 0;
    return now_seconds() - t0;
}

/* Stops the slot helper and the I/O thread (a history prefetch in progress ends at its next
   4 MiB piece) and saves the usage history. */
static void expert_store_stop(ExpertStore *store) {
    expert_store_end_populate(store, 1);
    if (!store->io_started) return;
    expert_usage_save(store);
    pthread_mutex_lock(&store->lock);
    store->io_stop = 1;
    pthread_cond_broadcast(&store->work);
    pthread_mutex_unlock(&store->lock);
    pthread_join(store->io_thread, NULL);
    store->io_started = 0;
    pthread_mutex_destroy(&store->lock);
    pthread_cond_destroy(&store->work);
    pthread_cond_destroy(&store->done);
    pthread_cond_destroy(&store->populate_more);
}

/* Stops the threads and releases the slots, the history, the mappings and the O_DIRECT descriptors.
   */
static void expert_store_free(ExpertStore *store) {
    expert_store_stop(store);
    for (int l = 0; store->caches && l < store->n_layers; l++) {
        LayerCache *lc = &store->caches[l];
        if (!lc->slots) continue;
        for (int s = 0; s < store->slots_per_layer; s++) free(lc->slots[s].scale_buf);
        tier_cache_free(&lc->cache);
        free(lc->slots);
        free(lc->busy);
        free(lc->avoid);
        free(lc->scratch);
    }
    free(store->caches);
    if (store->arena_map) munmap(store->arena_map, store->arena_map_bytes);
    if (g_mapped_store == store) g_mapped_store = NULL;
    for (int f = 0; store->direct_fds && f < store->n_files; f++)
        if (store->direct_fds[f] >= 0) close(store->direct_fds[f]);
    for (int f = 0; store->maps && f < store->n_files; f++)
        if (store->maps[f]) munmap(store->maps[f], store->map_len[f]);
    free(store->direct_fds);
    free(store->maps);
    free(store->map_len);
    free(store->sources);
    free(store->queue);
    free(store->route_counts);
    free(store->staging);
    free(store->usage_history);
    memset(store, 0, sizeof *store);
}

/* ---- 6.7 A MoE step's experts: slot choice, demanded loads, read-ahead ----------------------- */

/* The slot a demanded expert goes to: the cache policy's victim among the slots `avoid` does not
   mark. While the helper is still faulting the arena in, a fresh slot costs a page fault per 2 MiB
   on top of its read (fresh memory can come at 0.2-0.45 GB/s, slower than the disk), so the cache
   then grows only as fast as the helper: an expert goes to a slot that is faulted in (the helper
   reached it, or a load wrote it), and to a fresh one only when there is no such slot or the layer
   has fewer than top-k slots in use (and never for a read ahead, !fresh_ok: that one waits for
   expert_acquire, which evicts the experts this step is done with). Without this, the first prompt
   of a big budget would fault a slot per distinct expert it touches: on the bench fixture a
   16-token prompt took 18.8 s at RAM_GB=10 against 3.7 s at RAM_GB=4. */
static int expert_pick_slot(ExpertStore *store, LayerCache *lc, const unsigned char *avoid,
                            int fresh_ok, int resident) {
    int slot = tier_cache_victim(&lc->cache, avoid);
    const int n = lc->cache.n_slots;
    /* it will be used in place: an empty slot whose memory is fresh, leaving faulted ones to reads
       */
    if (resident) {
        if (slot >= 0 && lc->slots[slot].faulted)
            for (int s = 0; s < n; s++)
                if (!avoid[s] && !lc->slots[s].faulted && lc->cache.slot_expert[s] < 0) return s;
        return slot;
    }
    const int warm = __atomic_load_n(&store->populated_slots, __ATOMIC_ACQUIRE);
    const int floor = warm > store->c->experts_per_tok ? warm : store->c->experts_per_tok;
    if (slot < floor || lc->slots[slot].faulted ||
        !__atomic_load_n(&store->populate_running, __ATOMIC_ACQUIRE))
        return slot;
    memcpy(lc->scratch, avoid, (size_t)n);
    for (int s = floor; s < n; s++) if (!lc->slots[s].faulted) lc->scratch[s] = 1;
    int faulted = tier_cache_victim(&lc->cache, lc->scratch);
    return faulted >= 0 || !fresh_ok ? faulted : slot;
}

/* Puts `expert` into a slot of `layer` that `avoid` does not mark and queues its load; -1 when
   there is none (fresh_ok: see expert_pick_slot). */
static int expert_schedule_load(ExpertStore *store, int layer, int expert, unsigned char *avoid,
                                int fresh_ok) {
    LayerCache *lc = &store->caches[layer];
    /* a guess for the slot's choice only (first and last pages): expert_load looks closer, and
       reads what the page cache lacks */
    const int resident = expert_in_page_cache(
        store, &store->sources[(size_t)layer * store->n_experts + expert], PAGE_CACHE_GUESS);
    pthread_mutex_lock(&store->lock);
    int slot = expert_pick_slot(store, lc, avoid, fresh_ok, resident);
    /* a history prefetch is reading into it: take another */
    while (slot >= 0 && lc->slots[slot].loading) {
        const unsigned char was = avoid[slot];
        avoid[slot] = 1;
        int other = expert_pick_slot(store, lc, avoid, fresh_ok, resident);
        avoid[slot] = was;
        if (other >= 0) { slot = other; break; }
        if (!fresh_ok) { slot = -1; break; }   /* a read ahead does not wait */
        /* the only candidate: wait for that read to end */
        pthread_cond_wait(&store->done, &store->lock);
    }
    if (slot < 0) { pthread_mutex_unlock(&store->lock); return -1; }
    ExpertSlot *sl = &lc->slots[slot];
    tier_cache_assign(&lc->cache, slot, expert);
    lc->busy[slot] = 1;
    sl->expert = expert;
    sl->ready = 0;
    sl->failed = 0;
    sl->prefetched = 0;
    sl->ahead = 0;
    /* a waiting prefetch is cancelled */
    if (sl->prefetch_rank >= 0) { sl->prefetch_rank = -1; store->prefetch_pending--; }
    sl->loaded_in_step = store->step;
    store->queue[store->queue_tail % store->queue_cap] = (LoadJob){ layer, slot };
    store->queue_tail++;
    pthread_cond_signal(&store->work);
    pthread_mutex_unlock(&store->lock);
    store->misses++;
    return slot;
}

/* The router chose the expert that `slot` holds or waits for: if it is not in RAM yet it counts as
   a miss, and a history prefetch still waiting for it becomes a demanded load (served first). */
static void expert_demand_slot(ExpertStore *store, int layer, int slot) {
    ExpertSlot *sl = &store->caches[layer].slots[slot];
    if (sl->loaded_in_step == store->step) return;   /* queued by this step: counted already */
    pthread_mutex_lock(&store->lock);
    if (!sl->ready) {
        if (sl->prefetch_rank >= 0) {
            sl->prefetch_rank = -1;
            store->prefetch_pending--;
            store->queue[store->queue_tail % store->queue_cap] = (LoadJob){ layer, slot };
            store->queue_tail++;
            pthread_cond_signal(&store->work);
        }
        sl->loaded_in_step = store->step;
        store->misses++;
    }
    pthread_mutex_unlock(&store->lock);
}

/* A history prefetch that has not started yet, into a slot the helper has not faulted in: the
   demand would promote it and read into fresh memory, a page fault per 2 MiB (with compaction when
   memory is fragmented) at a fraction of the disk's rate, while the slots faulted in already hold
   this step's other experts. Measured on the small bench model after a compile: 196 demands went
   this way at 49 ms each against 6 ms into a faulted slot, and a 255-token prefill took 11.2 s.
   Such a prefetch is dropped when its expert is demanded (the slot empties); the expert then loads
   like any miss, into a faulted-in slot where there is one. 1 when dropped. */
static int expert_drop_fresh_prefetch(ExpertStore *store, LayerCache *lc, int slot) {
    ExpertSlot *sl = &lc->slots[slot];
    int dropped = 0;
    pthread_mutex_lock(&store->lock);
    if (sl->prefetch_rank >= 0 && !sl->loading && !sl->ready && !sl->faulted &&
        slot >= __atomic_load_n(&store->populated_slots, __ATOMIC_ACQUIRE) &&
        __atomic_load_n(&store->populate_running, __ATOMIC_ACQUIRE)) {
        sl->prefetch_rank = -1;
        store->prefetch_pending--;
        tier_cache_assign(&lc->cache, slot, -1);
        sl->expert = -1;
        dropped = 1;
    }
    pthread_mutex_unlock(&store->lock);
    return dropped;
}

/* Before a MoE step over `experts` (ascending): pin cached ones and queue loads of missing ones
   so the disk works while the CPU computes. Two rules keep every later expert_acquire able to
   find a slot: at most slots-1 cached experts are pinned, and a prefetch never evicts an expert
   of this step. Whatever does not fit loads on demand in expert_acquire. */
static void expert_prefetch(ExpertStore *store, int layer, const int *experts, int n) {
    LayerCache *lc = &store->caches[layer];
    const int nslots = lc->cache.n_slots;
    store->step++;
    /* the engine is at work: history prefetches wait for the next idle time */
    if (store->prefetch_open) {
        pthread_mutex_lock(&store->lock);
        store->prefetch_open = 0;
        pthread_mutex_unlock(&store->lock);
    }
    int pinned = 0;
    for (int i = 0; i < n; i++) {
        store->route_counts[(size_t)layer * store->n_experts + experts[i]]++;
        tier_note_request(&lc->cache, experts[i]);
        int slot = lc->cache.expert_slot[experts[i]];
        if (slot >= 0 && expert_drop_fresh_prefetch(store, lc, slot)) slot = -1;
        if (slot >= 0) expert_demand_slot(store, layer, slot);
        if (slot >= 0 && pinned < nslots - 1) { lc->busy[slot] = 1; pinned++; }
    }
    for (int s = 0; s < nslots; s++) lc->avoid[s] = lc->busy[s];
    for (int i = 0; i < n; i++) {
        int slot = lc->cache.expert_slot[experts[i]];
        if (slot >= 0) lc->avoid[slot] = 1;
    }
    for (int i = 0; i < n; i++) {
        if (lc->cache.expert_slot[experts[i]] >= 0) continue;
        int slot = expert_schedule_load(store, layer, experts[i], lc->avoid, 0);
        if (slot < 0) break;
        lc->avoid[slot] = 1;
    }
}

/* Prefill read-ahead. A batch of S rows routes to nearly every expert of a layer once S·k ≥ 4E
   (an expert is then left out with probability about e^-4 < 2 %), so the experts of the next MoE
   layer from `from` on start loading before its router runs, overlapping the disk with the
   attention in between (otherwise a cold 255-token prompt starts reading only at the first router).
   They go only into EMPTY slots, as history prefetches (expert_store_idle) in ascending expert
   order: never evicting anything, served when no demand waits, promoted by the router's demand,
   dropped if still waiting for a fresh slot (expert_drop_fresh_prefetch), cancelled when their slot
   is taken. A full cache (the steady state of a big model) reads nothing ahead. O_DIRECT only:
   there the disk is the limit and a read costs no CPU; a buffered read from a warm page cache is
   a copy on the same 2 cores (measured: warm 255-token prefill 0.91 s without, 1.15 s with). */
static void expert_read_ahead(ExpertStore *store, int from, int S) {
    const Config *c = store->c;
    const int E = store->n_experts;
    if (!store->io_started || store->io_mode != IO_DIRECT ||
        (long long)S * c->experts_per_tok < 4LL * E)
        return;
    int layer = from;
    while (layer < c->n_layers && c->layer_dense[layer]) layer++;
    if (layer >= c->n_layers) return;
    LayerCache *lc = &store->caches[layer];
    TierCache *tc = &lc->cache;
    pthread_mutex_lock(&store->lock);
    for (int s = 0; s < tc->n_slots; s++)
        lc->avoid[s] = tc->slot_expert[s] >= 0 || lc->busy[s] || lc->slots[s].loading;
    for (int e = 0; e < E; e++) {
        if (tc->expert_slot[e] >= 0) continue;   /* in RAM or on its way */
        const int s = tier_cache_victim(tc, lc->avoid);
        if (s < 0) break;
        expert_queue_prefetch(store, lc, s, e, e, 1);
    }
    expert_open_prefetches(store);
    pthread_mutex_unlock(&store->lock);
}

static const FfnWeights *expert_acquire(ExpertStore *store, int layer, int expert) {
    LayerCache *lc = &store->caches[layer];
    int slot = lc->cache.expert_slot[expert];
    if (slot < 0) {
        slot = expert_schedule_load(store, layer, expert, lc->busy, 1);
        if (slot < 0) die("internal: no free expert slot in layer %d", layer);
    } else {
        tier_cache_lookup(&lc->cache, expert);
        expert_demand_slot(store, layer, slot);
        if (lc->slots[slot].loaded_in_step != store->step) {   /* in RAM when the router chose it */
            store->hits++;
            if (lc->slots[slot].prefetched) {
                ++*(lc->slots[slot].ahead ? &store->read_ahead_used : &store->prefetch_used);
                lc->slots[slot].prefetched = 0;
            }
        }
    }
    lc->busy[slot] = 1;
    ExpertSlot *sl = &lc->slots[slot];
    pthread_mutex_lock(&store->lock);
    if (!sl->ready) {
        double t0 = now_seconds();
        while (!sl->ready) pthread_cond_wait(&store->done, &store->lock);
        store->wait_seconds += now_seconds() - t0;
    }
    pthread_mutex_unlock(&store->lock);
    if (sl->failed) die("loading layer %d expert %d: %s", layer, expert, sl->error);
    return &sl->w;
}

static void expert_release(ExpertStore *store, int layer, int expert) {
    LayerCache *lc = &store->caches[layer];
    int slot = lc->cache.expert_slot[expert];
    if (slot >= 0) lc->busy[slot] = 0;
}

/* =============================================================================================
   7. MoE: router, batch union of chosen experts, SwiGLU, shared expert (§5)
   ============================================================================================= */

/* SwiGLU over S rows: out = down(silu(gate·x) ⊙ up·x), in pieces of `piece` rows, so h1/h2
   hold [min(S, piece)][width] whatever the batch (a row's result does not depend on the rows
   beside it; the GEMM kernels work in 128-row panels anyway). */
static void ffn_swiglu(const FfnWeights *w, const float *x, int S, float *out, float *h1, float *h2,
                       int piece) {
    const int width = (int)w->gate.rows;
    const size_t in = (size_t)w->gate.cols, out_width = (size_t)w->down.rows;
    const QTensor *gate_up[2] = { &w->gate, &w->up };
    float *out_gate_up[2] = { h1, h2 };
    for (int r = 0; r < S; r += piece) {
        const int n = S - r < piece ? S - r : piece;
        /* x quantized once for both */
        qt_matmul_multi(gate_up, 2, x + r * in, out_gate_up, n, g_integer_dot);
        silu_mul(h1, h2, (size_t)n * width);
        matmul(out + r * out_width, &w->down, h1, n);
    }
}

/* Router for one token (§5.2): sigmoid scores, bias for choosing only, group-limited top-k,
   unbiased weights renormalized and scaled. Ties go to the smaller expert index. */
static void router_select(const Config *c, const float *logits, const float *bias, int *chosen,
                          float *weights) {
    const int E = c->n_experts, G = c->n_group, per_group = E / G, k = c->experts_per_tok;
    float score[E], choice[E];
    for (int e = 0; e < E; e++) { score[e] = sigmoid(logits[e]); choice[e] = score[e] + bias[e]; }
    if (G > 1) {
        float gscore[G];
        for (int g = 0; g < G; g++) {
            float top1 = -INFINITY, top2 = -INFINITY;
            for (int e = g * per_group; e < (g + 1) * per_group; e++) {
                if (choice[e] > top1) { top2 = top1; top1 = choice[e]; }
                else if (choice[e] > top2) top2 = choice[e];
            }
            gscore[g] = per_group > 1 ? top1 + top2 : top1;
        }
        unsigned char keep[G];
        memset(keep, 0, sizeof keep);
        for (int t = 0; t < c->topk_group; t++) {
            int best = -1;
            for (int g = 0; g < G; g++)
                if (!keep[g] && (best < 0 || gscore[g] > gscore[best])) best = g;
            keep[best] = 1;
        }
        for (int e = 0; e < E; e++) if (!keep[e / per_group]) choice[e] = -INFINITY;
    }
    unsigned char taken[E];
    memset(taken, 0, sizeof taken);
    float sum = 0.0f;
    for (int t = 0; t < k; t++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!taken[e] && (best < 0 || choice[e] > choice[best])) best = e;
        taken[best] = 1;
        chosen[t] = best;
        weights[t] = score[best];
        sum += score[best];
    }
    for (int t = 0; t < k; t++) {
        if (c->norm_topk_prob) weights[t] = weights[t] / (sum + 1e-20f);
        weights[t] = weights[t] * c->routed_scale;
    }
}

/* The routed experts of one MoE step run as units: one expert with its matmuls on every thread,
   or (batches of at least 4 rows on several threads) a window of up to MOE_WINDOW experts computed
   as tasks of at most MOE_PIECE_ROWS of an expert's rows, largest first, each task by one thread in
   its own share of the SwiGLU scratch (its matmuls then run on that thread: no fork and join per
   matmul, which cost more than the few rows of an expert took: routed-expert compute scaled 1.2x
   from 1 to 2 threads). An expert's rows go to expert_x/expert_y from the row its unit gives it. */
enum { MOE_WINDOW = 8, MOE_PIECE_ROWS = 128, MOE_MAX_PIECES = 32 };
/* the most rows of a decode step or a verification pass: DRAFT at most 16, plus the verified token
   */
enum { FEW_ROWS = 16 + 1 };

/* rows [row0, row1) of a window's expert */
typedef struct { int window_index, row0, row1; } MoeTask;

static int moe_task_larger_first(const void *a, const void *b) {
    const MoeTask *x = a, *y = b;
    const int nx = x->row1 - x->row0, ny = y->row1 - y->row0;
    if (nx != ny) return ny - nx;
    return x->window_index != y->window_index ? x->window_index - y->window_index
                                              : x->row0 - y->row0;
}

/* Queue loads of union experts from u onwards that are not in RAM yet, while slots are free,
   never evicting one of them (expert_prefetch's rule; a read ahead, so never into a fresh slot
   while the arena faults in: see expert_pick_slot). */
static void moe_queue_loads(ExpertStore *store, int layer, const int *experts, int u, int n) {
    LayerCache *lc = &store->caches[layer];
    for (int k = 0; k < lc->cache.n_slots; k++) lc->avoid[k] = lc->busy[k];
    for (int v = u; v < n; v++)
        if (lc->cache.expert_slot[experts[v]] >= 0)
            lc->avoid[lc->cache.expert_slot[experts[v]]] = 1;
    for (; u < n; u++) {
        if (lc->cache.expert_slot[experts[u]] >= 0) continue;
        int slot = expert_schedule_load(store, layer, experts[u], lc->avoid, 0);
        if (slot < 0) break;
        lc->avoid[slot] = 1;
    }
}

/* Union experts unit[0..n) (union indices), expert unit[i]'s rows at row[i] of expert_x/expert_y:
   one expert on every thread, or several as a window. */
static void moe_run_unit(const Config *c, int layer, ExpertStore *store, RunState *s,
                         const float *m, const int *unit, const int *row, int n) {
    const int H = c->hidden, I = c->moe_inter;
    const FfnWeights *w[MOE_WINDOW];
    for (int i = 0; i < n; i++) w[i] = expert_acquire(store, layer, s->union_experts[unit[i]]);
    double t0 = now_seconds();
    if (n == 1) {
        const int u = unit[0], rows = s->moe_first[u + 1] - s->moe_first[u];
        const int *rw = s->moe_rows + s->moe_first[u];
        float *x = s->expert_x + (size_t)row[0] * H;
        for (int i = 0; i < rows; i++)
            memcpy(x + (size_t)i * H, m + (size_t)rw[i] * H, (size_t)H * sizeof(float));
        ffn_swiglu(w[0], x, rows, s->expert_y + (size_t)row[0] * H, s->ffn_h1, s->ffn_h2,
                   s->ffn_rows);
    } else {
        /* each thread's share of the SwiGLU scratch, in expert rows (at least 1: see
           run_state_init) */
        const int h_rows = (int)((int64_t)s->ffn_rows * s->ffn_width / I / s->nthreads);
        /* the window's tasks, largest first, so the threads finish together (an expert that 1,337
           of 2,048 rows chose, on one thread, left the other idle); a row's result does not
           depend on the rows beside it, so the pieces change nothing */
        MoeTask task[MOE_WINDOW * MOE_MAX_PIECES];
        int n_tasks = 0;
        for (int i = 0; i < n; i++) {
            const int rows = s->moe_first[unit[i] + 1] - s->moe_first[unit[i]];
            int pieces = (rows + MOE_PIECE_ROWS - 1) / MOE_PIECE_ROWS;
            if (pieces > MOE_MAX_PIECES) pieces = MOE_MAX_PIECES;
            for (int p = 0; p < pieces; p++)
                task[n_tasks++] = (MoeTask){ i, rows * p / pieces, rows * (p + 1) / pieces };
        }
        qsort(task, (size_t)n_tasks, sizeof *task, moe_task_larger_first);
        #pragma omp parallel for schedule(dynamic, 1)
        for (int t = 0; t < n_tasks; t++) {
            const int i = task[t].window_index, o = row[i] + task[t].row0,
                      rows = task[t].row1 - task[t].row0;
            const size_t h = (size_t)thread_index() * h_rows * I;
            const int *rw = s->moe_rows + s->moe_first[unit[i]] + task[t].row0;
            for (int r = 0; r < rows; r++)
                memcpy(s->expert_x + (size_t)(o + r) * H, m + (size_t)rw[r] * H,
                       (size_t)H * sizeof(float));
            ffn_swiglu(w[i], s->expert_x + (size_t)o * H, rows, s->expert_y + (size_t)o * H,
                       s->ffn_h1 + h, s->ffn_h2 + h, h_rows);
        }
    }
    store->compute_seconds += now_seconds() - t0;
    for (int i = 0; i < n; i++) expert_release(store, layer, s->union_experts[unit[i]]);
}

/* Adds union experts unit[0..n)'s weighted output rows (at row[i] of expert_y) to their rows of
   out, in the order given; threads split the hidden dimension where there are at least
   MOE_ADD_PARALLEL_ROWS rows (a decode step's 8 take microseconds: a fork would cost as much). */
enum { MOE_ADD_PARALLEL_ROWS = 16 };
static void moe_add_units(const Config *c, RunState *s, const int *unit, const int *row, int n,
                          float *out) {
    const int H = c->hidden;
    int rows = 0;
    for (int i = 0; i < n; i++) rows += s->moe_first[unit[i] + 1] - s->moe_first[unit[i]];
    #pragma omp parallel if (rows >= MOE_ADD_PARALLEL_ROWS)
    {
        const int t = thread_index(), nt = team_threads();
        const int d0 = H * t / nt, d1 = H * (t + 1) / nt;
        for (int i = 0; i < n; i++)
            for (int j = s->moe_first[unit[i]]; j < s->moe_first[unit[i] + 1]; j++) {
                float *o = out + (size_t)s->moe_rows[j] * H;
                const float *y = s->expert_y + (size_t)(row[i] + j - s->moe_first[unit[i]]) * H;
                const float wgt = s->moe_weights[j];
                for (int d = d0; d < d1; d++) o[d] += wgt * y[d];
            }
    }
}

/* Whether `expert` of `layer` is in RAM now (a hint: expert_acquire looks again, under the lock).
   */
static int expert_in_ram(const ExpertStore *store, int layer, int expert) {
    const LayerCache *lc = &store->caches[layer];
    const int slot = lc->cache.expert_slot[expert];
    return slot >= 0 && __atomic_load_n(&lc->slots[slot].ready, __ATOMIC_ACQUIRE);
}

/* Whether union expert v is in RAM or on its way (in a slot). A window's experts all are, or it
   is one expert that is not: acquiring that one loads it on demand into a slot that no acquired
   expert holds, which could be a later member's (with 1 slot per layer: "no free expert slot"). */
static int moe_in_slot(const LayerCache *lc, const RunState *s, int v) {
    return lc->cache.expert_slot[s->union_experts[v]] >= 0;
}

/* The routed experts of one step, into out (zeroed). While the disk reads, the cores work:
   - A step of 1-3 rows, or of up to FEW_ROWS on one thread (decode; verification of 1-2 drafts),
     one expert at a time: those in RAM first, then the shared expert (its output is added after
     the routed ones'), then, whenever none is in RAM, the first not done (the first queued) as its
     read ends. Run in ascending id, a step whose first expert missed waited for that read with
     the hits and the shared expert still to do. The outputs wait in expert_y and are added in
     ascending id at the end: the order of the work changes nothing in the result.
   - Batches of 4 rows or more on several threads (prefill, verification of 3+ drafts): in
     ascending id, windows of a run of the union whose weights are in RAM or queued (at most
     MOE_WINDOW experts and max_batch rows), each added to out once computed, the loads of the next
     experts queued meanwhile, so a window's compute already overlaps the next one's reads. (The
     order above, with windows of the experts in RAM, was no faster there: cold 128-token prompts
     in 5-row forwards, 4 alternating rounds, MoE 2.19-2.52 s against 2.14-2.26.)
   Returns the shared expert's output rows where it computed them, else NULL. */
static const float *moe_experts(const Config *c, const Layer *L, int layer, ExpertStore *store,
                                RunState *s, const float *m, int S, int n_union, float *out) {
    const int H = c->hidden, total = s->moe_first[n_union];
    const int windows = S >= 4 && max_threads() > 1, most = windows ? MOE_WINDOW : 1;
    const int kept = !windows && S <= FEW_ROWS && total + S <= s->max_batch;
    const LayerCache *lc = &store->caches[layer];
    float *shared_y = kept ? s->expert_y + (size_t)total * H : NULL;
    int shared_done = 0, unit[MOE_WINDOW], row[MOE_WINDOW];
    unsigned char done[n_union > 0 ? n_union : 1];
    memset(done, 0, sizeof done);
    for (int next = 0, left = n_union; left > 0;) {
        int n = 0;
        if (kept) {
            for (int v = 0; v < n_union && !n; v++)
                if (!done[v] && expert_in_ram(store, layer, s->union_experts[v])) {
                    unit[n] = v;
                    row[n++] = s->moe_first[v];
                }
            if (!n && L->has_shared && !shared_done) {
                ffn_swiglu(&L->mlp, m, S, shared_y, s->ffn_h1, s->ffn_h2, s->ffn_rows);
                shared_done = 1;
                continue;
            }
            for (int v = 0; v < n_union && !n; v++)
                if (!done[v]) {
                    unit[n] = v;
                    row[n++] = s->moe_first[v];
                }
        } else
            for (int rows = 0; next < n_union && n < most; next++) {
                const int v = next, k = s->moe_first[v + 1] - s->moe_first[v];
                if (n && (rows + k > s->max_batch || !moe_in_slot(lc, s, unit[0]) ||
                          !moe_in_slot(lc, s, v)))
                    break;
                unit[n] = v;
                row[n++] = rows;
                rows += k;
            }
        moe_run_unit(c, layer, store, s, m, unit, row, n);
        for (int i = 0; i < n; i++) done[unit[i]] = 1;
        left -= n;
        /* windows: not kept, next is the cursor */
        if (windows) moe_queue_loads(store, layer, s->union_experts, next, n_union);
        if (!kept) moe_add_units(c, s, unit, row, n, out);
    }
    if (kept)
        for (int v = 0; v < n_union; v += MOE_WINDOW) {
            const int n = n_union - v < MOE_WINDOW ? n_union - v : MOE_WINDOW;
            for (int i = 0; i < n; i++) { unit[i] = v + i; row[i] = s->moe_first[v + i]; }
            moe_add_units(c, s, unit, row, n, out);
        }
    return L->has_shared && shared_done ? shared_y : NULL;
}

/* MoE over S rows of normalized input m. Each distinct expert chosen by any row is acquired once
   and applied to all rows routed to it (batch union); whatever order they run in, each row
   accumulates its experts in ascending id, then the shared expert (§5.3). */
static void moe_forward(const Config *c, const Layer *L, int layer_index, ExpertStore *store,
                        RunState *s, const float *m, int S, float *out) {
    const int H = c->hidden, E = c->n_experts, k = c->experts_per_tok;
    matmul(s->router_logits, &L->router, m, S);
    #pragma omp parallel for schedule(static) if (S >= ROWS_PARALLEL)
    for (int r = 0; r < S; r++)
        router_select(c, s->router_logits + (size_t)r * E, L->router_bias,
                      s->chosen + (size_t)r * k, s->chosen_w + (size_t)r * k);
    /* the batch union, ascending, and each union expert's rows (ascending) with their weights */
    int count[E], fill[E];
    memset(count, 0, sizeof count);
    for (int i = 0; i < S * k; i++) count[s->chosen[i]]++;
    int n_union = 0;
    for (int e = 0; e < E; e++) if (count[e]) s->union_experts[n_union++] = e;
    s->moe_first[0] = 0;
    for (int u = 0; u < n_union; u++)
        s->moe_first[u + 1] = s->moe_first[u] + count[s->union_experts[u]];
    for (int u = 0; u < n_union; u++) fill[s->union_experts[u]] = s->moe_first[u];
    for (int r = 0; r < S; r++)
        for (int t = 0; t < k; t++) {
            const int e = s->chosen[r * k + t];
            s->moe_rows[fill[e]] = r;
            s->moe_weights[fill[e]++] = s->chosen_w[r * k + t];
        }
    expert_prefetch(store, layer_index, s->union_experts, n_union);
    expert_read_ahead(store, layer_index + 1, S);
    memset(out, 0, (size_t)S * H * sizeof(float));
    const float *shared_y = moe_experts(c, L, layer_index, store, s, m, S, n_union, out);
    if (L->has_shared) {
        if (!shared_y) {
            ffn_swiglu(&L->mlp, m, S, s->expert_y, s->ffn_h1, s->ffn_h2, s->ffn_rows);
            shared_y = s->expert_y;
        }
        vec_add(out, shared_y, S * H);
    }
}

/* =============================================================================================
   8. Model: loading and the forward pass
   ============================================================================================= */

/* How the RAM budget splits (ram_plan). Bytes; every term is printed, and they add up to the
   budget. */
typedef struct {
    double budget, avail;            /* avail: MemAvailable when the plan was made (0: unknown) */
    int from_ram_gb;                 /* the budget is RAM_GB (else MemAvailable minus a reserve) */
    double dense, run_state, overhead, reserve, cache, unused;
    double slot_bytes;               /* one expert slot */
    /* slots per layer; allowed: what the budget holds */
    int moe_layers, n_experts, slots, slots_allowed;
    int capacity, batch;             /* the context and batch the session was sized for */
    int kv_slots;                    /* a server's conversations at once (SLOTS, or chosen) */
} RamPlan;

typedef struct {
    Config c;
    Layer *layers;           /* [n_layers + n_mtp]; the MTP layer is last */
    QTensor embed, lm_head;
    float *final_norm;
    ExpertStore experts;
    float *inv_freq;         /* [qk_rope/2] */
    StIndex *index;
    double resident_bytes;   /* dense weights held in RAM */
    RamPlan ram;             /* how the RAM budget is split (ram_plan) */
    int n_layers_loaded;     /* entries of layers[] (model_free) */
} Model;

static void layer_name(char *buf, size_t n, int l, const char *suffix) {
    snprintf(buf, n, "model.layers.%d.%s", l, suffix);
}

static void load_ffn(Loader *ld, int l, const char *prefix, int width, int hidden, int bits,
                     FfnWeights *w) {
    char name[256], suffix[160];
    snprintf(suffix, sizeof suffix, "%s.gate_proj.weight", prefix);
    layer_name(name, sizeof name, l, suffix);
    load_matrix(ld, name, width, hidden, bits, &w->gate);
    snprintf(suffix, sizeof suffix, "%s.up_proj.weight", prefix);
    layer_name(name, sizeof name, l, suffix);
    load_matrix(ld, name, width, hidden, bits, &w->up);
    snprintf(suffix, sizeof suffix, "%s.down_proj.weight", prefix);
    layer_name(name, sizeof name, l, suffix);
    load_matrix(ld, name, hidden, width, bits, &w->down);
}

static void load_layer(Loader *ld, Model *m, int l, const Settings *set) {
    const Config *c = &m->c;
    Layer *L = &m->layers[l];
    const int H = c->hidden, db = l >= c->n_layers ? mtp_bits(set->dense_bits) : set->dense_bits;
    char name[256];
#define LNAME(suffix) (layer_name(name, sizeof name, l, suffix), name)
    L->input_norm = load_vector(ld, LNAME("input_layernorm.weight"), H);
    L->post_attn_norm = load_vector(ld, LNAME("post_attention_layernorm.weight"), H);
    load_matrix(ld, LNAME("self_attn.q_a_proj.weight"), c->q_lora, H, db, &L->q_a);
    L->q_a_norm = load_vector(ld, LNAME("self_attn.q_a_layernorm.weight"), c->q_lora);
    load_matrix(ld, LNAME("self_attn.q_b_proj.weight"), (int64_t)c->n_heads * c->qk_head, c->q_lora,
                db, &L->q_b);
    load_matrix(ld, LNAME("self_attn.kv_a_proj_with_mqa.weight"), c->kv_lora + c->qk_rope, H, db,
                &L->kv_a);
    L->kv_a_norm = load_vector(ld, LNAME("self_attn.kv_a_layernorm.weight"), c->kv_lora);
    load_matrix(ld, LNAME("self_attn.kv_b_proj.weight"),
                (int64_t)c->n_heads * (c->qk_nope + c->v_head), c->kv_lora, db, &L->kv_b);
    load_matrix(ld, LNAME("self_attn.o_proj.weight"), H, (int64_t)c->n_heads * c->v_head, db,
                &L->o);
    L->has_indexer = c->layer_indexer[l];
    if (L->has_indexer) {
        load_matrix(ld, LNAME("self_attn.indexer.wq_b.weight"),
                    (int64_t)c->index_heads * c->index_dim, c->q_lora, db, &L->index_wq_b);
        load_matrix(ld, LNAME("self_attn.indexer.wk.weight"), c->index_dim, H, db, &L->index_wk);
        load_matrix(ld, LNAME("self_attn.indexer.weights_proj.weight"), c->index_heads, H, db,
                    &L->index_weights);
        L->index_k_norm_w = load_vector(ld, LNAME("self_attn.indexer.k_norm.weight"), c->index_dim);
        L->index_k_norm_b = load_vector(ld, LNAME("self_attn.indexer.k_norm.bias"), c->index_dim);
    } else if (!ld->dry && st_find(ld->index, LNAME("self_attn.indexer.wk.weight"))) {
        fprintf(stderr,
                "glm: note: layer %d is a shared-indexer layer but carries indexer weights; they "
                "are not used\n",
                l);
    }
    L->dense = c->layer_dense[l];
    if (L->dense) {
        load_ffn(ld, l, "mlp", c->inter, H, db, &L->mlp);
    } else {
        load_matrix(ld, LNAME("mlp.gate.weight"), c->n_experts, H, 16, &L->router);
        L->router_bias = load_vector(ld, LNAME("mlp.gate.e_score_correction_bias"), c->n_experts);
        L->has_shared = c->n_shared > 0;
        if (L->has_shared)
            load_ffn(ld, l, "mlp.shared_experts", c->moe_inter * c->n_shared, H, db, &L->mlp);
    }
    if (l >= c->n_layers) {   /* the MTP layer's own tensors (§2.3) */
        L->enorm = load_vector(ld, LNAME("enorm.weight"), H);
        L->hnorm = load_vector(ld, LNAME("hnorm.weight"), H);
        L->shared_head_norm = load_vector(ld, LNAME("shared_head.norm.weight"), H);
        load_eh_proj(ld, LNAME("eh_proj.weight"), H, db, L->eh_proj);
    }
#undef LNAME
}

/* Pre-quantized MTP weights are used as stored; below 8 bits the drafts are rarely accepted
   (docs/format.md §5), so say so once. */
static void note_low_precision_mtp(const Model *m) {
    const Config *c = &m->c;
    if (!c->n_mtp) return;
    const Layer *L = &m->layers[c->n_layers];
    const QTensor *mats[] = { &L->q_a,       &L->q_b,        &L->kv_a,     &L->kv_b,
                              &L->o,         &L->index_wq_b, &L->index_wk, &L->index_weights,
                              &L->mlp.gate,  &L->mlp.up,     &L->mlp.down, &L->eh_proj[0],
                              &L->eh_proj[1] };
    int lowest = 16;
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
        if (mats[i]->data && mats[i]->format != QT_F32 && qt_format_bits(mats[i]->format) < lowest)
            lowest = qt_format_bits(mats[i]->format);
    const ExpertSource *src = &m->experts.sources[(size_t)c->n_layers * c->n_experts];
    for (int e = 0; e < c->n_experts; e++)
        for (int k = 0; k < 3; k++)
            if (src[e].format[k] != QT_F32 && qt_format_bits(src[e].format[k]) < lowest)
                lowest = qt_format_bits(src[e].format[k]);
    if (lowest < 8)
        fprintf(stderr,
                "glm: note: the MTP layer is stored with %d-bit weights: its drafts will rarely be "
                "accepted "
                "(convert with --mtp-bits 8; SPEC=auto stops drafting with it when it does not "
                "pay)\n",
                lowest);
}

/* "glm: loading [########............] 31/79 layers", redrawn in place on a terminal. */
static void print_load_progress(int done, int total) {
    enum { BAR = 32 };
    char bar[BAR + 1];
    const int filled = (int)((long long)done * BAR / total);
    for (int i = 0; i < BAR; i++) bar[i] = i < filled ? '#' : '.';
    bar[BAR] = 0;
    fprintf(stderr, "\rglm: loading [%s] %d/%d layers", bar, done, total);
    fflush(stderr);
}

/* The model's config, tensor index and expert sources: every header checked, no tensor data
   read. `ld` is then ready for model_load_weights. */
static void model_open(Model *m, const Settings *set, Loader *ld) {
    memset(m, 0, sizeof *m);
    m->c = config_load(set->model_dir);
    Config *c = &m->c;
    char err[1024];
    /* PLAN reads no tensor data, so it works on files cut right after their headers */
    m->index = set->mode == MODE_PLAN ? st_open_dir_headers(set->model_dir, err, sizeof err)
                                      : st_open_dir(set->model_dir, err, sizeof err);
    char shard[1024];
    if (!m->index && strstr(err, "no *.safetensors") &&
        index_json_file_of(set->model_dir, NULL, shard, sizeof shard))
        die("%s: model.safetensors.index.json names the shards (%s, ...): none is here "
            "(an incomplete download?)", err, shard);
    if (!m->index) die("%s", err);
    *ld = (Loader){ .index = m->index, .dir = set->model_dir, .group = set->group };
    /* An MTP layer is optional on disk: without its tensors the model simply has no MTP head
       (decided before anything counts the layers to load). */
    if (c->n_mtp) {
        char name[256];
        layer_name(name, sizeof name, c->n_layers, "eh_proj.weight");
        if (!st_find(m->index, name)) {
            fprintf(stderr, "glm: note: config has an MTP layer but %s is absent; MTP disabled\n",
                    name);
            c->n_mtp = 0;
        }
    }
    const int nl = c->n_layers + c->n_mtp;
    m->layers = xcalloc((size_t)nl, sizeof(Layer));
    m->n_layers_loaded = nl;
    ExpertStore *store = &m->experts;
    store->c = c;
    store->index = m->index;
    store->n_layers = c->n_layers + c->n_mtp;
    store->n_experts = c->n_experts;
    store->io_mode = io_mode_from_settings(set->direct, set->drop, set->mmap_mode);
    store->direct_forced = set->direct == 1;
    store->in_place = set->in_place && (store->io_mode == IO_PREAD || store->io_mode == IO_DIRECT);
    store->policy = (TierPolicy)set->cache_policy;
    store->expert_bits = set->expert_bits;
    store->group = set->group;
    store->route_counts = xcalloc((size_t)store->n_layers * c->n_experts, sizeof(long long));
    expert_sources_init(store, ld);
    expert_slot_sizes(store, &store->slab_bytes, &store->scale_bytes);
}

/* Every resident tensor (everything but the routed experts), in file order of the model. A dry
   loader only checks the headers and counts the bytes the real load will keep: the RAM plan
   comes from the very code that loads. */
static void model_load_weights(Model *m, Loader *ld, const Settings *set) {
    const Config *c = &m->c;
    const int nl = c->n_layers + c->n_mtp;
    double t0 = now_seconds();
    load_matrix(ld, "model.embed_tokens.weight", c->vocab, c->hidden, set->dense_bits, &m->embed);
    const int show_progress = !ld->dry && isatty(2);
    for (int l = 0; l < nl; l++) {
        load_layer(ld, m, l, set);
        if (show_progress) print_load_progress(l + 1, nl);
    }
    if (show_progress) fputc('\n', stderr);
    m->final_norm = load_vector(ld, "model.norm.weight", c->hidden);
    load_matrix(ld, "lm_head.weight", c->vocab, c->hidden, set->dense_bits, &m->lm_head);
    if (ld->dry) return;
    note_low_precision_mtp(m);
    const int half = c->qk_rope / 2;
    if (half > 512)
        die("qk_rope_head_dim %d is larger than this build supports (1024)", c->qk_rope);
    m->inv_freq = xmalloc((size_t)half * sizeof(float));
    for (int j = 0; j < half; j++)
        m->inv_freq[j] = 1.0f / powf(c->rope_theta, (float)(2 * j) / (float)c->qk_rope);
    m->resident_bytes = ld->resident_bytes;
    if (g_verbose)
        fprintf(stderr,
                "glm: loaded %.1f MB of resident tensors in %.2f s (routed experts stream on "
                "demand)\n",
                ld->bytes_loaded / 1e6, now_seconds() - t0);
}

static void layer_free(Layer *L) {
    float *vectors[] = { L->input_norm,     L->post_attn_norm,  L->q_a_norm,    L->kv_a_norm,
                         L->index_k_norm_w, L->index_k_norm_b,  L->router_bias, L->enorm,
                         L->hnorm,          L->shared_head_norm };
    for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) free(vectors[i]);
    QTensor *matrices[] = { &L->q_a,        &L->q_b,        &L->kv_a,     &L->kv_b,
                            &L->o,          &L->index_wq_b, &L->index_wk, &L->index_weights,
                            &L->mlp.gate,   &L->mlp.up,     &L->mlp.down, &L->router,
                            &L->eh_proj[0], &L->eh_proj[1] };
    for (size_t i = 0; i < sizeof matrices / sizeof matrices[0]; i++) qt_free(matrices[i]);
}

static void config_free(Config *c) {
    free(c->layer_dense);
    free(c->layer_indexer);
    c->layer_dense = c->layer_indexer = NULL;
}

static void model_free(Model *m) {
    expert_store_free(&m->experts);
    for (int l = 0; m->layers && l < m->n_layers_loaded; l++) layer_free(&m->layers[l]);
    free(m->layers);
    qt_free(&m->embed);
    qt_free(&m->lm_head);
    free(m->final_norm);
    free(m->inv_freq);
    if (m->index) st_close(m->index);
    config_free(&m->c);
    memset(m, 0, sizeof *m);
}

/* Every session allocation goes through here, so the RAM budget knows what the session holds. */
static void *run_state_calloc(RunState *s, size_t count, size_t size) {
    s->bytes += (double)count * size;
    return s->size_only ? NULL : xcalloc_huge(count, size);
}

/* size_only: count what the session would allocate (s->bytes) without allocating it. */
static void run_state_init(RunState *s, const Model *m, int capacity, int max_batch,
                           int size_only) {
    const Config *c = &m->c;
    memset(s, 0, sizeof *s);
    s->size_only = size_only;
    const int nl = c->n_layers + c->n_mtp, H = c->hidden, B = max_batch;
    s->capacity = capacity;
    s->max_batch = max_batch;
    s->n_layers = nl;
    s->latent = run_state_calloc(s, (size_t)nl, sizeof(float *));
    s->rope_key = run_state_calloc(s, (size_t)nl, sizeof(float *));
    s->index_key = run_state_calloc(s, (size_t)nl, sizeof(float *));
    for (int l = 0; l < nl; l++) {
        float *latent = run_state_calloc(s, (size_t)capacity * c->kv_lora, sizeof(float));
        float *rope_key = run_state_calloc(s, (size_t)capacity * c->qk_rope, sizeof(float));
        float *index_key = c->layer_indexer[l]
                               ? run_state_calloc(s, (size_t)capacity * c->index_dim, sizeof(float))
                               : NULL;
        if (size_only) continue;
        s->latent[l] = latent;
        s->rope_key[l] = rope_key;
        s->index_key[l] = index_key;
    }
    const size_t q_width = (size_t)c->n_heads * c->qk_head;
    /* a routed or the shared expert */
    const int moe_width = c->moe_inter * (c->n_shared > 1 ? c->n_shared : 1);
    const int ffn_width = c->inter > moe_width ? c->inter : moe_width;
    s->x = run_state_calloc(s, (size_t)B * H, sizeof(float));
    s->xn = run_state_calloc(s, (size_t)B * H, sizeof(float));
    const int P = B < ATT_PIECE ? B : ATT_PIECE;   /* rows of an attention piece */
    s->cq = run_state_calloc(s, (size_t)P * c->q_lora, sizeof(float));
    s->qr = run_state_calloc(s, (size_t)P * c->q_lora, sizeof(float));
    s->q = run_state_calloc(s, (size_t)P * q_width, sizeof(float));
    s->kv = run_state_calloc(s, (size_t)B * (c->kv_lora + c->qk_rope), sizeof(float));
    s->attn = run_state_calloc(s, (size_t)P * c->n_heads * c->v_head, sizeof(float));
    s->attn_out = run_state_calloc(s, (size_t)B * H, sizeof(float));
    s->ffn_out = run_state_calloc(s, (size_t)B * H, sizeof(float));
    size_t tmp_n =
        (size_t)B * (c->index_dim > c->experts_per_tok ? c->index_dim : c->experts_per_tok);
    s->tmp = run_state_calloc(
        s, tmp_n > (size_t)B * c->experts_per_tok ? tmp_n : (size_t)B * c->experts_per_tok,
        sizeof(float));
    s->router_logits = run_state_calloc(s, (size_t)B * c->n_experts, sizeof(float));
    s->index_q = run_state_calloc(s, (size_t)P * c->index_heads * c->index_dim, sizeof(float));
    s->index_w = run_state_calloc(s, (size_t)P * c->index_heads, sizeof(float));
    s->index_scores = run_state_calloc(s, (size_t)P * capacity * 2, sizeof(float));
    s->selection = run_state_calloc(s, (size_t)B * c->index_topk, sizeof(int));
    s->selection_count = run_state_calloc(s, (size_t)B, sizeof(int));
    s->nthreads = max_threads();
    s->att_qc = run_state_calloc(s, (size_t)ATT_ROWS * c->n_heads * c->kv_lora, sizeof(float));
    s->att_z = run_state_calloc(s, (size_t)ATT_ROWS * c->n_heads * c->kv_lora, sizeof(float));
    s->att_thread_floats = attention_thread_floats(c, capacity);
    s->att_thread = run_state_calloc(s, (size_t)s->nthreads * s->att_thread_floats, sizeof(float));
    /* at least a row per thread: MoE windows give each thread its own share of h1/h2 */
    s->ffn_rows = B < FFN_ROWS ? B : FFN_ROWS;
    if (s->ffn_rows < s->nthreads) s->ffn_rows = s->nthreads;
    s->ffn_width = ffn_width;
    s->ffn_h1 = run_state_calloc(s, (size_t)s->ffn_rows * ffn_width, sizeof(float));
    s->ffn_h2 = run_state_calloc(s, (size_t)s->ffn_rows * ffn_width, sizeof(float));
    /* [enorm rows][hnorm rows] */
    s->mtp_in = run_state_calloc(s, (size_t)B * 2 * H, sizeof(float));
    s->expert_x = run_state_calloc(s, (size_t)B * H, sizeof(float));
    s->expert_y = run_state_calloc(s, (size_t)B * H, sizeof(float));
    s->chosen = run_state_calloc(s, (size_t)B * c->experts_per_tok, sizeof(int));
    s->chosen_w = run_state_calloc(s, (size_t)B * c->experts_per_tok, sizeof(float));
    s->union_experts = run_state_calloc(s, (size_t)c->n_experts, sizeof(int));
    s->moe_rows = run_state_calloc(s, (size_t)B * c->experts_per_tok, sizeof(int));
    s->moe_weights = run_state_calloc(s, (size_t)B * c->experts_per_tok, sizeof(float));
    s->moe_first = run_state_calloc(s, (size_t)c->n_experts + 1, sizeof(int));
}

static void run_state_free(RunState *s) {
    for (int l = 0; l < s->n_layers; l++) {
        free(s->latent[l]);
        free(s->rope_key[l]);
        free(s->index_key[l]);
    }
    void *buffers[] = { s->latent,
                        s->rope_key,
                        s->index_key,
                        s->x,
                        s->xn,
                        s->cq,
                        s->qr,
                        s->q,
                        s->kv,
                        s->attn,
                        s->attn_out,
                        s->ffn_out,
                        s->tmp,
                        s->router_logits,
                        s->index_q,
                        s->index_w,
                        s->index_scores,
                        s->selection,
                        s->selection_count,
                        s->att_qc,
                        s->att_z,
                        s->att_thread,
                        s->expanded_kv,
                        s->ffn_h1,
                        s->ffn_h2,
                        s->mtp_in,
                        s->expert_x,
                        s->expert_y,
                        s->chosen,
                        s->union_experts,
                        s->chosen_w,
                        s->moe_rows,
                        s->moe_weights,
                        s->moe_first };
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++) free(buffers[i]);
    memset(s, 0, sizeof *s);
}

/* ---- session files and the prefix cache: the model's side ---------------------------------------
   kvfile.h holds both formats (SESSION, chat's :save / :load and a server's conversation;
   KV_CACHE's entries of prompts' rows, shared by every process) and checks every byte it reads.
   Here is what needs the Model: the key a file must match (session_key) and the view of a
   RunState's rows. */

static void hash64_i64(Hash64 *h, int64_t v) { hash64_update(h, &v, sizeof v); }
static void hash64_f32(Hash64 *h, float v) { hash64_update(h, &v, sizeof v); }
static void hash64_floats(Hash64 *h, const float *v, int64_t n) {
    if (v) hash64_update(h, v, (size_t)n * sizeof(float));
}
static void hash64_format(Hash64 *h, const QTensor *t) {
    hash64_i64(h, t->data ? (int64_t)t->format : -1);
    hash64_i64(h, t->data ? t->group : -1);
}

/* What a session file or prefix cache entry of this model and these settings must match: the
   fingerprint hashes, the settings that change the arithmetic, the cache's shapes. */
static SessionKey session_key(const Model *m, const Settings *set, const ForwardOptions *opt) {
    const Config *c = &m->c;
    const int nl = c->n_layers + c->n_mtp;
    SessionKey k = { .idot = set->idot,
                     .absorb = opt->absorb,
                     .indexer_mode = opt->indexer_mode,
                     .mtp_zero_pos0 = opt->mtp_zero_pos0,
                     .latent_eps = opt->latent_eps,
                     .expert_bits = set->expert_bits,
                     .dense_bits = set->dense_bits,
                     .group = set->group,
                     .layers = c->n_layers,
                     .kv_lora = c->kv_lora,
                     .qk_rope = c->qk_rope,
                     .index_dim = c->index_dim,
                     .vocab = c->vocab,
                     .hidden = c->hidden,
                     .layer_indexer = c->layer_indexer };
    Hash64 h;
    /* the parsed config: every field the forward pass reads */
    hash64_init(&h);
    const int64_t ints[] = { c->vocab,           c->hidden,         c->n_layers,
                             c->n_heads,         c->q_lora,         c->kv_lora,
                             c->qk_nope,         c->qk_rope,        c->v_head,
                             c->inter,           c->moe_inter,      c->n_experts,
                             c->experts_per_tok, c->n_shared,       c->n_group,
                             c->topk_group,      c->norm_topk_prob, c->index_heads,
                             c->index_dim,       c->index_topk,     c->n_mtp };
    hash64_update(&h, ints, sizeof ints);
    hash64_f32(&h, c->routed_scale);
    hash64_f32(&h, c->rms_eps);
    hash64_f32(&h, c->rope_theta);
    hash64_update(&h, c->layer_dense, (size_t)nl);
    hash64_update(&h, c->layer_indexer, (size_t)nl);
    k.config = hash64_final(&h);
    /* the tensor table: name, dtype, shape and byte count of each tensor, summed so that the same
       tensors sharded differently are the same model */
    k.tensors = 0;
    for (size_t i = 0; i < st_count(m->index); i++) {
        const StTensor *t = st_tensor_at(m->index, i);
        hash64_init(&h);
        hash64_update(&h, t->name, strlen(t->name) + 1);
        hash64_i64(&h, t->dtype);
        hash64_i64(&h, t->ndim);
        hash64_update(&h, t->shape, (size_t)t->ndim * sizeof t->shape[0]);
        hash64_i64(&h, (int64_t)t->nbytes);
        k.tensors += hash64_final(&h);
    }
    /* a weight sample that tells two checkpoints of one architecture apart: the vectors (norms,
       router biases) every layer holds in f32 anyway, a few MB in all */
    hash64_init(&h);
    for (int l = 0; l < nl; l++) {
        const Layer *L = &m->layers[l];
        hash64_floats(&h, L->input_norm, c->hidden);
        hash64_floats(&h, L->post_attn_norm, c->hidden);
        hash64_floats(&h, L->q_a_norm, c->q_lora);
        hash64_floats(&h, L->kv_a_norm, c->kv_lora);
        hash64_floats(&h, L->index_k_norm_w, c->index_dim);
        hash64_floats(&h, L->index_k_norm_b, c->index_dim);
        hash64_floats(&h, L->router_bias, c->n_experts);
        hash64_floats(&h, L->enorm, c->hidden);
        hash64_floats(&h, L->hnorm, c->hidden);
        hash64_floats(&h, L->shared_head_norm, c->hidden);
    }
    hash64_floats(&h, m->final_norm, c->hidden);
    k.weights = hash64_final(&h);
    /* how every matrix is held: what expert_bits, dense_bits, GROUP and a converter decided */
    hash64_init(&h);
    hash64_format(&h, &m->embed);
    hash64_format(&h, &m->lm_head);
    for (int l = 0; l < nl; l++) {
        const Layer *L = &m->layers[l];
        const QTensor *mats[] = { &L->q_a,        &L->q_b,        &L->kv_a,     &L->kv_b,
                                  &L->o,          &L->index_wq_b, &L->index_wk, &L->index_weights,
                                  &L->mlp.gate,   &L->mlp.up,     &L->mlp.down, &L->router,
                                  &L->eh_proj[0], &L->eh_proj[1] };
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) hash64_format(&h, mats[i]);
        if (c->layer_dense[l] || !m->experts.sources) continue;
        for (int e = 0; e < c->n_experts; e++)
            for (int j = 0; j < 3; j++) {
                const ExpertSource *src = &m->experts.sources[(size_t)l * c->n_experts + e];
                hash64_i64(&h, src->format[j]);
                hash64_i64(&h, src->group[j]);
            }
    }
    k.formats = hash64_final(&h);
    return k;
}

/* A RunState's cache rows as kvfile.h sees them. */
static KvRows run_state_rows(const RunState *s) {
    return (KvRows){ s->capacity, s->latent, s->rope_key, s->index_key };
}

/* The prefix cache of a run, or NULL: KV_CACHE=off, or no directory to keep it in (said once). */
static KvCache *prefix_cache_open(const char *setting, double gb, const char *cache_dir,
                                  const SessionKey *key) {
    if (!strcmp(setting, "off")) return NULL;
    char dir[4096], err[256];
    if (setting[0]) snprintf(dir, sizeof dir, "%s", setting);
    else if (cache_dir[0]) kvcache_default_dir(key, cache_dir, dir, sizeof dir);
    else {
        say("note: no HOME or XDG_CACHE_HOME: no prefix cache this run (KV_CACHE=DIR names one; "
            "KV_CACHE=off hides this)");
        return NULL;
    }
    KvCache *kv = xcalloc(1, sizeof *kv);
    if (kvcache_open(kv, dir, gb * 1e9, key, err, sizeof err)) {
        say("warning: KV_CACHE=%s cannot be used (%s): no prefix cache this run", kv->dir, err);
        free(kv);
        return NULL;
    }
    return kv;
}

/* ---------------------------------------------------------------------------------------------
   The RAM plan: how the budget (RAM_GB, or MemAvailable minus a reserve) splits between the dense
   weights, the KV cache and scratch, the process's own overhead, a page-cache reserve and the
   expert cache. It comes from config.json, the safetensors headers and the settings alone, through
   the code that loads (a dry Loader, a size-only RunState), so PLAN=1 on a folder of headers prints
   what a real run prints, and a budget that is too small is refused before any weight is read.
   --------------------------------------------------------------------------------------------- */

/* What the process holds besides weights, session and slots, as an estimate from the config and
   the headers alone (so that a plan made from a folder of headers agrees with the run): code,
   libraries and OpenMP threads (measured under 32 MB here; 64 MB allowed), the tensor index, the
   expert sources and counters, and a tokenizer for the vocabulary (tok.h held 29 MB for
   DeepSeek-V3's 128k ids, ~230 bytes an id; 320 allowed). */
static double ram_overhead_estimate(const Model *m) {
    const ExpertStore *store = &m->experts;
    double bytes = 64e6;
    /* tensor, its name, hash slot */
    bytes += (double)st_count(m->index) * (sizeof(StTensor) + 96);
    bytes += (double)store->n_layers * store->n_experts *
             (sizeof(ExpertSource) + sizeof(long long) + 3 * sizeof(uint32_t) + sizeof(int));
    bytes += 320.0 * m->c.vocab;
    return bytes;
}

/* The plan for a session of `capacity` tokens. Runs the dry loader over `ld` (model_open's). */
/* SLOTS=0: a server answers at most this many conversations at once by default (decode gains
   little beyond: bench/RESULTS.md, "Several conversations in one forward"). */
enum { SLOTS_AUTO_MAX = 4 };

/* The bytes of `slots` run states like `one` and what they share: the scratch of their shared
   decode forward, and each further slot's Generator (the first one's is in the overhead): its
   history, its logits and verify rows, its hidden rows and the MTP head's. */
static double slots_bytes(Model *m, const RunState *one, const Settings *set, int capacity,
                          int slots) {
    const Config *c = &m->c;
    if (slots <= 1) return one->bytes;
    RunState batch;
    const int rows = slots * (SPEC_MAX_DRAFT + 1);
    run_state_init(&batch, m, 1, rows, 1);
    const double generator = (double)capacity * sizeof(int) +
                             (double)(SPEC_MAX_DRAFT + 3) * c->vocab * sizeof(float) +
                             2.0 * set->batch * c->hidden * sizeof(float);
    return one->bytes * slots + batch.bytes +
           (double)rows * (sizeof(int) + (c->hidden + c->vocab) * sizeof(float)) +
           (slots - 1) * generator;
}

static RamPlan ram_plan(Model *m, Loader *ld, const Settings *set, int capacity) {
    const Config *c = &m->c;
    const ExpertStore *store = &m->experts;
    RamPlan p;
    memset(&p, 0, sizeof p);
    ld->dry = 1;
    ld->resident_bytes = 0;
    model_load_weights(m, ld, set);
    ld->dry = 0;
    p.dense = ld->resident_bytes;
    ld->resident_bytes = 0;
    RunState sized;
    run_state_init(&sized, m, capacity, set->batch, 1);
    p.capacity = capacity;
    p.batch = set->batch;
    for (int l = 0; l < store->n_layers; l++) p.moe_layers += !c->layer_dense[l];
    p.avail = mem_available_bytes();
    p.from_ram_gb = set->ram_gb > 0;
    if (!p.from_ram_gb && p.avail <= 0)
        die("cannot read MemAvailable from /proc/meminfo: set RAM_GB");
    p.budget = p.from_ram_gb ? set->ram_gb * 1e9 : p.avail - fmax(1e9, 0.1 * p.avail);
    /* a server's SLOTS (PLAN: with SERVE set, or SLOTS given): a run state each, and the scratch
       of their shared decode forward; SLOTS=0 takes as many as fit in an eighth of the budget, at
       most SLOTS_AUTO_MAX (one with SESSION, which keeps one conversation) */
    const int serving = set->mode == MODE_SERVE || (set->mode == MODE_PLAN && set->serve[0]);
    int slots = (serving || set->mode == MODE_PLAN) && set->slots > 1 ? set->slots : 1;
    if (serving && !set->slots && !set->session_path[0])
        for (slots = SLOTS_AUTO_MAX; slots > 1; slots--)
            if (slots_bytes(m, &sized, set, capacity, slots) <= p.budget / 8) break;
    p.kv_slots = slots;
    /* float experts are read through an f32 staging buffer of one matrix */
    p.run_state = slots_bytes(m, &sized, set, capacity, slots) +
                  (p.moe_layers && !store->prequantized
                       ? (double)c->moe_inter * c->hidden * sizeof(float)
                       : 0.0);
    p.overhead = ram_overhead_estimate(m);
    p.reserve = fmin(fmax(0.02e9, 0.05 * p.budget), 2e9);
    p.slot_bytes = store->io_mode == IO_MMAP
                       ? (double)store->mapped_expert_bytes
                       : (double)store->slab_bytes + (double)store->scale_bytes;
    p.n_experts = c->n_experts;
    TierBudget b = {
        .budget_bytes = p.budget,
        .fixed_bytes = p.dense + p.run_state + p.overhead,
        .reserve_bytes = p.reserve,
        .slot_bytes = p.slot_bytes,
        .moe_layers = p.moe_layers,
        .n_experts = c->n_experts,
        .requested_slots = set->cache_slots_given ? set->cache_slots : 0,
    };
    TierPlan tp = tier_plan(&b);
    p.slots = p.moe_layers ? tp.slots_per_layer : 0;
    p.cache = tp.cache_bytes;
    p.unused = tp.free_bytes;
    b.requested_slots = 0;
    p.slots_allowed = p.moe_layers ? tier_plan(&b).slots_per_layer : 0;
    return p;
}

/* 1 when the model fits the budget (with at least one expert slot per MoE layer). */
static int ram_plan_fits(const RamPlan *p) {
    return p->moe_layers ? p->slots >= 1 : p->unused >= 0;
}

/* The accounting line (the terms add up to the budget) and what the cache became; on a budget
   that does not fit, the line that says by how much (the same terms, summed). */
static void ram_plan_print(FILE *out, const RamPlan *p, const Settings *set) {
    const double G = 1e9;
    if (!ram_plan_fits(p)) {
        const double one_slot = p->slot_bytes * p->moe_layers;
        fprintf(out,
                "glm: error: RAM budget %.2f GB is too small: dense weights %.2f GB + KV cache and "
                "scratch %.2f GB + overhead %.2f GB + page-cache reserve %.2f GB",
                p->budget / G, p->dense / G, p->run_state / G, p->overhead / G, p->reserve / G);
        if (p->moe_layers) fprintf(out, " + one expert slot per MoE layer %.2f GB", one_slot / G);
        fprintf(
            out, " = %.2f GB (raise RAM_GB, lower CTX/BATCH, or use fewer dense bits)\n",
            (p->dense + p->run_state + p->overhead + p->reserve + (p->moe_layers ? one_slot : 0)) /
                G);
        return;
    }
    char slots_note[64] = "";   /* a server's SLOTS: one KV cache each */
    if (p->kv_slots > 1)
        snprintf(slots_note, sizeof slots_note, " (%d KV caches: SLOTS%s)", p->kv_slots,
                 set->slots ? "" : "=0, from the budget");
    fprintf(out,
            "glm: RAM budget %.2f GB%s: dense weights %.2f GB + KV cache and scratch %.2f GB%s + "
            "overhead %.2f GB + "
            "page-cache reserve %.2f GB + expert cache %.2f GB (%d slots x %d MoE layers x %.3g "
            "MB) + unused %.2f GB\n",
            p->budget / G, p->from_ram_gb ? " (RAM_GB)" : " (MemAvailable minus reserve)",
            p->dense / G, p->run_state / G, slots_note, p->overhead / G, p->reserve / G,
            p->cache / G, p->slots, p->moe_layers, p->slot_bytes / 1e6, p->unused / G);
    if (!p->moe_layers) return;
    if (set->cache_slots_given && p->slots < set->cache_slots)
        fprintf(out, "glm: expert cache lowered from the requested %d to %d slots per layer (%s)\n",
                set->cache_slots, p->slots,
                p->slots == p->n_experts ? "every expert of a layer fits" : "to fit the budget");
    else if (!set->cache_slots_given)
        fprintf(out, "glm: expert cache: %d of %d experts per layer fit the budget\n", p->slots,
                p->n_experts);
    else if (p->slots_allowed > p->slots)
        fprintf(out,
                "glm: expert cache: %d slots per layer as requested (the budget would allow %d; "
                "omit cache_slots to use them)\n",
                p->slots, p->slots_allowed);
}

/* Starts the expert store with the slots the RAM plan gave (model_load printed the accounting). */
static void expert_cache_start(Model *m, const Settings *set) {
    ExpertStore *store = &m->experts;
    if (!m->ram.moe_layers) return;
    say_detail("expert I/O: %s, %s experts", IO_MODE_NAMES[store->io_mode],
               store->prequantized
                   ? "pre-quantized"
                   : "float (quantized on every load: convert the model for speed)");
    expert_store_start(store, m->ram.slots, set->usage, set->cache_dir);
}

/* The KV cache of chat and of open-ended answers when CTX is not set: 4096 tokens, or fewer when
   the model allows fewer. */
static int default_context(const Config *c) {
    return c->max_positions > 0 && c->max_positions < 4096 ? c->max_positions : 4096;
}

/* The KV cache a run sizes, in tokens: CTX when set, else the `needed` tokens the run knows it
   holds (REF's lists; a saved session, the prompt and NGEN + 1) plus, for an open-ended run
   (NGEN=-1, chat, the server), default_context (only then is `c` read). Every run and PLAN size
   the cache with it, so PLAN's figures are the run's. */
static int run_context(const Settings *set, const Config *c, int needed, int open_ended) {
    return set->ctx ? set->ctx : needed + (open_ended ? default_context(c) : 0);
}

/* Opens the model, plans the RAM for a context of `capacity` tokens (a budget that cannot hold
   it is refused here, before any weight is read), then loads the resident weights. */
static void model_load(Model *m, const Settings *set, int capacity) {
    Loader ld;
    model_open(m, set, &ld);
    ld.noting = 1;   /* the plan's dry walk notes the ranges the load reads */
    m->ram = ram_plan(m, &ld, set, capacity);
    if (g_verbose || !ram_plan_fits(&m->ram)) ram_plan_print(stderr, &m->ram, set);
    if (!ram_plan_fits(&m->ram)) exit(1);
    expert_store_open_files(&m->experts);
    /* history prefetches read experts while the resident weights load */
    expert_cache_start(m, set);
    loader_snapshot(&ld);
    model_load_weights(m, &ld, set);
    loader_release_snapshot(&ld);
    if (ld.resident_bytes != m->ram.dense)
        fprintf(stderr,
                "glm: warning: internal: the dense weights take %.0f bytes, the RAM plan counted "
                "%.0f\n",
                ld.resident_bytes, m->ram.dense);
    loader_free(&ld);
    const double overhead = current_rss_bytes() - m->resident_bytes;
    if (overhead > m->ram.overhead)
        fprintf(stderr,
                "glm: warning: the process holds %.2f GB besides its weights, above the plan's "
                "overhead estimate %.2f GB: the budget may be exceeded by the difference\n",
                overhead / 1e9, m->ram.overhead / 1e9);
}

/* One decoder layer over the S rows of work->x (attention + FFN, residuals): attention per group
   in the group's own KV cache and scratch, the rest in work's scratch. */
static void layer_forward(Model *m, RunState *work, const RowGroup *groups, int n_groups,
                          const ForwardOptions *opt, int l, int S) {
    const Config *c = &m->c;
    const Layer *L = &m->layers[l];
    const int H = c->hidden;
    RunState *s = work;
    #pragma omp parallel for schedule(static) if (S >= ROWS_PARALLEL)
    for (int r = 0; r < S; r++)
        rmsnorm(s->xn + (size_t)r * H, s->x + (size_t)r * H, L->input_norm, H, c->rms_eps);
    /* absorbed by default, for every batch: then a row's result never depends on how many rows
       share the forward (decode, any prefill chunk). The explicit form was no faster for prefill
       here (bench model, 256-token chunk: attention 2.31 s explicit vs 2.44 s absorbed). */
    double t0 = now_seconds();
    int grouped = n_groups > 1 && S <= ATT_PIECE;
    for (int k = 0; k < n_groups; k++) grouped &= groups[k].state != s;
    if (grouped) {
        AttentionCall ac = { c, L, s, l, m->inv_freq, opt, 0 };
        attention_groups(&ac, groups, n_groups, s->xn, S, s->attn_out);
    } else {
        for (int k = 0; k < n_groups; k++) {
            const RowGroup *gr = &groups[k];
            AttentionCall ac = { c, L, gr->state, l, m->inv_freq, opt, 0 };
            attention(&ac, s->xn + (size_t)gr->row0 * H, gr->S, gr->pos0,
                      s->attn_out + (size_t)gr->row0 * H);
        }
    }
    double t1 = now_seconds();
    s->profile.attention += t1 - t0;
    vec_add(s->x, s->attn_out, S * H);
    #pragma omp parallel for schedule(static) if (S >= ROWS_PARALLEL)
    for (int r = 0; r < S; r++)
        rmsnorm(s->xn + (size_t)r * H, s->x + (size_t)r * H, L->post_attn_norm, H, c->rms_eps);
    if (L->dense) ffn_swiglu(&L->mlp, s->xn, S, s->ffn_out, s->ffn_h1, s->ffn_h2, s->ffn_rows);
    else moe_forward(c, L, l, &m->experts, s, s->xn, S, s->ffn_out);
    *(L->dense ? &s->profile.dense_mlp : &s->profile.moe) += now_seconds() - t1;
    vec_add(s->x, s->ffn_out, S * H);
}

/* A forward of one conversation: its own state is the work state too. */
static void layer_forward_one(Model *m, RunState *s, const ForwardOptions *opt, int l, int S,
                              int pos0) {
    const RowGroup one = { s, 0, S, pos0 };
    layer_forward(m, s, &one, 1, opt, l, S);
}

static void embed_rows(const Model *m, const int *tokens, int S, float *x) {
    for (int r = 0; r < S; r++) {
        if (tokens[r] < 0 || tokens[r] >= m->c.vocab)
            die("token id %d is outside the vocabulary (%d)", tokens[r], m->c.vocab);
        qt_dequant_row(&m->embed, tokens[r], x + (size_t)r * m->c.hidden);
    }
}

/* How far ahead the kernels prefetch weights, by the rows of a forward and the kernel (a hint:
   results never depend on it). A forward of a few rows (a decode step, a verify pass of up to
   DRAFT + 1 rows) streams the hit experts' weights while the missed ones are read from the disk.
   With the AVX2 kernels on an AVX2-only CPU, the device's transfers into memory lose to that
   stream at 4,096 bytes: 7 alternating runs of a cold decode (REPLAY, 64 tokens) read the same
   3.9 GB in 1.39-1.68 s with 1,024 bytes against 1.32-2.13 s with 4,096, 10.2 against 9.7 tok/s
   (medians). The VNNI and AVX-VNNI kernels stream 10-20 % faster at 4,096 and decode gains 1.08x
   from it (bench/RESULTS.md), so they keep it; so do a prefill's batched kernels, tuned with it. */
enum { FEW_ROWS_PREFETCH_AVX2 = 1024 };
static void prefetch_for_rows(int S) {
    qt_set_prefetch(S <= FEW_ROWS && qt_get_kernel() == QT_KERNEL_AVX2 ? FEW_ROWS_PREFETCH_AVX2
                                                                       : QT_PREFETCH_DEFAULT);
}

/* The main model over S tokens at positions pos0..pos0+S-1 (S ≤ max_batch). Writes the
   final-normed hidden states [S][hidden] (the MTP input) and, if logits != NULL, the logits
   [S][vocab] (only of the last row when last_only). A chunk of a long prefill takes many seconds
   on a big model, so when *interrupt (may be NULL) becomes non-zero it stops between layers and
   returns -1 with nothing written: the K/V rows it wrote are past the caller's position and are
   simply overwritten later. Returns 0 when done. */
static int model_forward_groups(Model *m, RunState *work, const RowGroup *groups, int n_groups,
                                const ForwardOptions *opt, const int *tokens, int S,
                                float *hidden_out, float *logits, int last_only,
                                const volatile sig_atomic_t *interrupt) {
    const Config *c = &m->c;
    const int H = c->hidden;
    RunState *s = work;
    if (S > s->max_batch) die("internal: batch %d exceeds %d", S, s->max_batch);
    for (int k = 0; k < n_groups; k++) {
        const RowGroup *gr = &groups[k];
        if (gr->pos0 + gr->S > gr->state->capacity)
            die("context full: %d tokens do not fit the KV cache of %d (raise CTX)",
                gr->pos0 + gr->S, gr->state->capacity);
        if (gr->S > gr->state->max_batch)
            die("internal: batch %d exceeds %d", gr->S, gr->state->max_batch);
    }
    const int pos0 = groups[0].pos0;   /* what the progress line shows */
    prefetch_for_rows(S);
    embed_rows(m, tokens, S, s->x);
    expert_read_ahead(&m->experts, 0, S);
    for (int l = 0; l < c->n_layers; l++) {
        if (interrupt && *interrupt) {
            if (s->on_layer) s->on_layer(s->on_layer_user, c->n_layers, c->n_layers, S, pos0);
            return -1;
        }
        if (s->on_layer) s->on_layer(s->on_layer_user, l, c->n_layers, S, pos0);
        layer_forward(m, s, groups, n_groups, opt, l, S);
    }
    if (s->on_layer) s->on_layer(s->on_layer_user, c->n_layers, c->n_layers, S, pos0);
    #pragma omp parallel for schedule(static) if (S >= ROWS_PARALLEL)
    for (int r = 0; r < S; r++)
        rmsnorm(hidden_out + (size_t)r * H, s->x + (size_t)r * H, m->final_norm, H, c->rms_eps);
    if (logits) {
        double t0 = now_seconds();
        if (last_only) matmul(logits, &m->lm_head, hidden_out + (size_t)(S - 1) * H, 1);
        else matmul(logits, &m->lm_head, hidden_out, S);
        s->profile.lm_head += now_seconds() - t0;
    }
    s->profile.forwards++;
    s->profile.positions += S;
    return 0;
}

/* The main model over one conversation's S tokens at positions pos0.. (see above). */
static int model_forward(Model *m, RunState *s, const ForwardOptions *opt, const int *tokens, int S,
                         int pos0, float *hidden_out, float *logits, int last_only,
                         const volatile sig_atomic_t *interrupt) {
    const RowGroup one = { s, 0, S, pos0 };
    return model_forward_groups(m, s, &one, 1, opt, tokens, S, hidden_out, logits, last_only,
                                interrupt);
}

/* The MTP head over S slots (§6.1): slot q takes the token at q+1 and the main model's final-normed
   hidden state at q, runs decoder layer n_layers at position q, and predicts q+2. Writes the
   post-shared_head.norm hidden states [S][hidden] and the logits: [S][vocab], only the last slot's
   [vocab] when last_only (drafting needs no more), none when logits is NULL (the cache update of a
   prefill). main_hidden may be hidden_out (it is read first). eh_proj is applied as its two column
   halves (load_eh_proj): x = eh_e · enorm(e) + eh_h · hnorm(h). */
static void mtp_forward(Model *m, RunState *s, const ForwardOptions *opt, const int *next_tokens,
                        const float *main_hidden, int S, int pos0, float *hidden_out, float *logits,
                        int last_only) {
    const Config *c = &m->c;
    const int H = c->hidden, l = c->n_layers;
    const Layer *L = &m->layers[l];
    if (!c->n_mtp) die("this model has no MTP layer");
    if (S > s->max_batch) die("internal: MTP batch %d exceeds %d", S, s->max_batch);
    prefetch_for_rows(S);
    if (pos0 + S > s->capacity)
        die("internal: MTP slots up to %d do not fit the KV cache of %d", pos0 + S, s->capacity);
    float *e_normed = s->mtp_in, *h_normed = s->mtp_in + (size_t)S * H;   /* [S][H] each */
    embed_rows(m, next_tokens, S, s->xn);
    for (int r = 0; r < S; r++) {
        float *e = s->xn + (size_t)r * H;
        if (opt->mtp_zero_pos0 && pos0 + r == 0) memset(e, 0, (size_t)H * sizeof(float));
        rmsnorm(e_normed + (size_t)r * H, e, L->enorm, H, c->rms_eps);
        rmsnorm(h_normed + (size_t)r * H, main_hidden + (size_t)r * H, L->hnorm, H, c->rms_eps);
    }
    matmul(s->x, &L->eh_proj[0], e_normed, S);
    matmul(s->ffn_out, &L->eh_proj[1], h_normed, S);
    vec_add(s->x, s->ffn_out, S * H);
    layer_forward_one(m, s, opt, l, S, pos0);
    for (int r = 0; r < S; r++)
        rmsnorm(hidden_out + (size_t)r * H, s->x + (size_t)r * H, L->shared_head_norm, H,
                c->rms_eps);
    if (!logits) return;
    if (last_only) matmul(logits, &m->lm_head, hidden_out + (size_t)(S - 1) * H, 1);
    else matmul(logits, &m->lm_head, hidden_out, S);
}

/* =============================================================================================
   9. Generation
   What turns forward passes into a sequence of tokens: token lists, sampling, and the Generator,
   the one decode loop that every front end drives (validation, prompt and chat, the server):
   speculative drafts and their batched verification, prefix reuse, and session files.
   ============================================================================================= */

/* A growable list of token ids. */
typedef struct { int *ids; int n, cap; } TokenList;

static void tokens_push(TokenList *l, int id) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        int *grown = realloc(l->ids, (size_t)l->cap * sizeof(int));
        if (!grown) die("out of memory for %d token ids", l->cap);
        l->ids = grown;
    }
    l->ids[l->n++] = id;
}

/* ---- sampling -------------------------------------------------------------------------------- */

/* Exact over the full vocabulary: probabilities are computed in double (a sum of 150k terms loses
   nothing that matters), the nucleus is the smallest prefix of the tokens sorted by probability
   (ties: smaller id first) whose mass reaches top_p, and the token is drawn from the nucleus,
   renormalized, by an exponential race: token x gets the noise E_x = -ln U(seed, draw, x) and the
   smallest E_x / p_x wins, which picks x with probability exactly p_x (the Gumbel-max trick).
   U is a counter-based hash of (seed, index of the draw, token id), so the noise of every future
   draw is known in advance. That is what makes speculative sampling output-identical: a draft for
   draw j is proposed with draw j's noise, and verification accepts it exactly when the target
   distribution, raced with the same noise, picks the same token (generator_step). Same seed and
   settings, same tokens, whatever is drafted. */
typedef struct { double p; int id; } TokenProb;

typedef struct {
    float temperature, top_p;
    uint64_t seed;
    uint64_t draws;                 /* tokens drawn since the seed was set: the next draw's index */
    int vocab;
    double *weights;                /* [vocab] exp((logit - max) / T) */
    TokenProb *candidates;          /* [vocab] the tokens that may be in the nucleus, sorted */
} Sampler;

static uint64_t splitmix64_next(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The race noise of token `id` in draw `draw`: Exp(1), i.e. -ln of a uniform in (0, 1). Two
   splitmix64 steps: one keys the draw, one the token within it. */
static double sampler_noise(uint64_t seed, uint64_t draw, int id) {
    uint64_t key = seed ^ (draw * 0xD1B54A32D192ED03ull);
    uint64_t key_state = key;
    uint64_t draw_key = splitmix64_next(&key_state);
    uint64_t token_state = draw_key + (uint64_t)id * 0x9E3779B97F4A7C15ull;
    const double u = ((double)(splitmix64_next(&token_state) >> 11) + 0.5) * 0x1.0p-53;
    return -log(u);
}

static void sampler_init(Sampler *sp, int vocab, float temperature, float top_p, uint64_t seed) {
    sp->temperature = temperature;
    sp->top_p = top_p;
    sp->vocab = vocab;
    sp->seed = seed;
    sp->draws = 0;
    sp->weights = xmalloc((size_t)vocab * sizeof(double));
    sp->candidates = xmalloc((size_t)vocab * sizeof(TokenProb));
}

static int token_prob_cmp(const void *a, const void *b) {
    const TokenProb *x = a, *y = b;
    if (x->p > y->p) return -1;
    if (x->p < y->p) return 1;
    return x->id - y->id;
}

/* Sorts the candidates (weight >= floor) and returns how many of them form the nucleus, or 0 when
   they do not reach top_p of the total (floor too high, which rounding can cause). *mass: their
   sum. */
static int nucleus_prefix(Sampler *sp, double total, double floor, double *mass) {
    int n = 0;
    for (int i = 0; i < sp->vocab; i++)
        if (sp->weights[i] >= floor) sp->candidates[n++] = (TokenProb){ sp->weights[i], i };
    qsort(sp->candidates, (size_t)n, sizeof(TokenProb), token_prob_cmp);
    const double need = (double)sp->top_p * total;
    double acc = 0.0;
    for (int k = 0; k < n; k++) {
        acc += sp->candidates[k].p;
        if (acc >= need) { *mass = acc; return k + 1; }
    }
    return 0;
}

/* The sampling distribution of `logits` (temperature, then top-p) into the candidate list:
   returns how many candidates carry probability; candidates[i].p are unnormalized weights. With
   top_p >= 1 every token is a candidate (in id order). */
static int sampler_distribution(Sampler *sp, const float *logits) {
    const int V = sp->vocab;
    double *w = sp->weights;
    const double mx = logits[argmax(logits, V)];
    double total = 0.0;
    for (int i = 0; i < V; i++) {
        w[i] = exp(((double)logits[i] - mx) / sp->temperature);
        total += w[i];
    }
    if (sp->top_p >= 1.0f) {
        for (int i = 0; i < V; i++) sp->candidates[i] = (TokenProb){ w[i], i };
        return V;
    }
    /* A token below (1 - top_p) / (V - 1) of the mass can never be in the nucleus: all such
       tokens together hold less than 1 - top_p. Sorting only the rest is exact and much faster. */
    double mass = 0.0;
    int k = nucleus_prefix(sp, total, (1.0 - sp->top_p) / (V > 1 ? V - 1 : 1) * total, &mass);
    if (!k) k = nucleus_prefix(sp, total, -1.0, &mass);
    return k;   /* 0 only if rounding kept even the full sum below top_p of itself */
}

/* The token that draw number `draw` picks from `logits`, without consuming the draw (greedy at
   temperature 0). Speculation uses it to propose with a future draw and to verify. */
static int sampler_pick(Sampler *sp, const float *logits, uint64_t draw) {
    if (sp->temperature <= 0.0f) return argmax(logits, sp->vocab);
    const int k = sampler_distribution(sp, logits);
    int best = -1;
    double best_key = INFINITY;
    for (int i = 0; i < k; i++) {
        const TokenProb *c = &sp->candidates[i];
        if (c->p <= 0.0) continue;
        const double key = sampler_noise(sp->seed, draw, c->id) / c->p;
        if (key < best_key || (key == best_key && c->id < best)) { best_key = key; best = c->id; }
    }
    return best >= 0 ? best : argmax(logits, sp->vocab);
}

/* Draws the next token. */
static int sampler_sample(Sampler *sp, const float *logits) {
    return sampler_pick(sp, logits, sp->draws++);
}

/* Back to the start of the seed's stream (chat's :reset, so a conversation can be replayed). */
static void sampler_restart(Sampler *sp) { sp->draws = 0; }

static void sampler_free(Sampler *sp) {
    free(sp->weights);
    free(sp->candidates);
    sp->weights = NULL;
    sp->candidates = NULL;
}

/* ---- the generator --------------------------------------------------------------------------- */

/* A Generator owns one conversation's decode state over a RunState (whose KV cache it fills):
   the token history, the position, the sampler, the stop rules, speculation, and where tokens go.
   Invariants:
   - history[0, pos) are exactly the tokens whose K/V rows are in the cache. Rows past pos may
     hold anything (an interrupted prefill, rejected drafts): attention at position i reads keys
     0..i only, so they are overwritten before anything reads them. Hence a rollback is O(1).
   - The logits predict position pos, and last_hidden is the final-normed hidden state of
     position pos-1 (the MTP head's input), whenever logits_pos == pos. A rollback or an
     interrupted prefill leaves them stale; the next step then first re-runs the token at pos-1
     (which rewrites its K/V row bit for bit: a row never depends on the batch it ran in). That
     is the one rule: nothing else ever has to restore the logits.
   - generator_step samples from the logits, applies the stop rules, hands the token to on_token
     and runs the forward for it. It returns a RUN of ids: with speculation (below) it drafts up
     to DRAFT tokens after the sampled one, verifies them in one forward of k+1 rows, and returns
     the sampled token and the accepted drafts; the logits after the last kept row become the
     generator's logits, the rejected rows stay in the cache past pos, unreferenced.
   - Interruption is a flag the caller owns (*interrupt != 0), read before each step, between
     prefill chunks and between the layers of a chunk. Nothing here reads a global or prints.
   A run of steps (generator_begin) ends at an EOS id (neither reported nor cached), after
   max_tokens, when the cache is full, or at the interrupt; the reason is in `stop`. Stop strings
   are the front end's (they need the text). Sessions save history[0, pos) with the KV rows; a
   server keeps a Generator per slot and sets its sampler, stop rules and callbacks per request.

   Speculation (SPEC, DRAFT). A drafter proposes the tokens that follow the sampled one:
   - mtp: the MTP head (§6), recursively: slot pos-1 takes (the sampled token, the main hidden
     state of pos-1) and drafts pos+1; each further draft feeds the previous draft and the head's
     own post-norm hidden state (§6.3). The head has its own K/V rows (layer n_layers): slot q is
     valid when computed from (history[q+1], the main hidden state of q), and spec.mtp_pos says
     how many are. They are computed after every prefill chunk, and during decoding lazily, at the
     next MTP draft, in one batch with the new slot: at most the last DRAFT+1 of them (what one
     verify pass adds; the main hidden states of the last MTP_RING positions are kept for that).
     When more are missing (the MTP drafter sat out, or another drafter drafted), the older ones
     stay stale: computing them all would cost an MTP layer per token, the upkeep that sitting out
     saves. Stale rows can only lower acceptance. A rollback lowers mtp_pos with pos. Slots
     written from drafts lie past mtp_pos and are rewritten before anything reads them, as for the
     main cache.
   - ngram (prompt lookup): the continuation of the latest earlier occurrence of the last 4, 3 or
     2 tokens of the history (the sampled token included). Free, and strong on code and quotes.
   - auto (the default): both, where they pay, see spec_auto_draft.
   Verification is exact for greedy and sampled decoding alike: draft i is accepted when the
   target distribution at its position, drawn with the very draw (sampler_pick, same noise) that
   plain decoding would use there, picks it. So every emitted token is the one plain decoding
   emits: the output of any SPEC and DRAFT is identical to SPEC=off's for the same seed, which
   rests on batch invariance (a row's logits do not depend on how many rows the forward ran).
   For a point-mass draft (ngram) this accepts with probability p(draft) and a rejection yields a
   token distributed as the normalized residual, which is the standard speculative rule; for a
   sampled MTP draft (drawn from the head's distribution q with the same noise) it accepts with
   the probability that the two races agree, Σ_x 1 / Σ_y max(p_y/p_x, q_y/q_x), a little below
   the residual rule's Σ min(p, q) (equal when p = q). The residual rule would draw different
   tokens depending on which steps drafted, and SPEC=auto decides that from timings: a seed
   would no longer fix the output.

   Constraint (generator_set_constraint: SCHEMA, GRAMMAR, a request's response_format). Before each
   draw the logits of the tokens that the grammar matcher does not allow next become -inf, and
   each emitted token advances it; EOS is allowed exactly when the answer is complete, so a
   complete answer ends with STOP_EOS (and not before: while the constraint waits for </think>,
   EOS is masked too). Drafts are cut where the matcher stops accepting them, and
   verification masks row i by a clone of the matcher advanced along drafts 0..i-1: the same mask
   plain decoding applies at that position, so speculation stays exact under a constraint. A
   mask that allows nothing (a vocabulary without every single byte) ends the run as STOP_LIMIT. */

typedef enum { STOP_NONE, STOP_EOS, STOP_LIMIT, STOP_INTERRUPT, STOP_CONTEXT } StopReason;
static const char *const STOP_NAMES[] = { "-", "eos", "NGEN", "interrupted (Ctrl-C)",
                                          "context full" };

typedef struct { float temperature, top_p; uint64_t seed; } SamplerSettings;

typedef struct {
    const int *eos;
    int n_eos;                /* ids that end a run: neither reported nor cached */
    int max_tokens;           /* tokens per run of steps (-1: no limit) */
    int resumable;            /* at max_tokens, still run the last token's forward so that a later
                                 run can go on from it (chat's :more); otherwise the last token is
                                 reported but not cached, which saves one forward */
} StopRules;

typedef void (*TokenCallback)(void *user, int id);
/* Teacher forcing: the logits [S][vocab] and final-normed hidden states [S][hidden] of every
   position of each prefill chunk (positions pos0 .. pos0+S-1). */
typedef void (*LogitsSink)(void *user, int pos0, int S, const float *logits, const float *hidden);

enum { DRAFTER_MTP, DRAFTER_NGRAM, DRAFTER_CALLER, N_DRAFTERS };
static const char *const DRAFTER_NAMES[] = { "mtp", "ngram", "caller" };

_Static_assert(SPEC_MAX_DRAFT + 1 == FEW_ROWS, "FEW_ROWS is a verification pass's rows");
/* main hidden states kept for the MTP cache's lazy update (> SPEC_MAX_DRAFT) */
#define MTP_RING 32
#define NGRAM_LONGEST 4         /* the n-gram drafter matches the last 4, else 3, else 2 tokens */
#define NGRAM_SHORTEST 2
#define SPEC_BACKOFF_MIN 64     /* auto: tokens a losing drafter sits out, doubling up to ... */
#define SPEC_BACKOFF_MAX 1024
#define SPEC_DECAY 0.95         /* auto: weight of the past in the acceptance estimate, per pass */
#define SPEC_COST_NEW 0.25      /* auto: weight of a new timing in the cost estimates */
/* auto: a plain step after this many verify passes keeps cost[1] current */
#define SPEC_REMEASURE 16

/* One drafter's record. */
typedef struct {
    long long drafted, accepted, passes;   /* totals */
    long long pauses;                      /* times auto stopped drafting with it */
    double hits, misses;                   /* auto: decayed accepted drafts and rejections */
    long long resume_at;                   /* auto: sits out until spec.tokens reaches this */
    int backoff;                           /* auto: length of its next pause, in tokens */
    int probe;                             /* auto: its next draft is a probe (spec_auto_draft) */
    long long probes, probe_hits;          /* probes made, and those the next token agreed with */
    int last_k;                            /* drafts of its last pass */
} Drafter;

/* A caller's drafter (tests): up to k tokens to follow history[0, n) into out; returns how many. */
typedef int (*DraftFn)(void *user, const int *history, int n, int k, int *out);

typedef struct {
    SpecMode mode;
    int max_draft;                          /* DRAFT */
    Drafter drafter[N_DRAFTERS];
    long long tokens;                       /* tokens generated (auto's clock for pauses) */
    int passes_since_plain;                 /* auto: verify passes since the last plain step */
    /* auto: a probe's draft for position shadow_pos (-1: none) */
    int shadow_pos, shadow_token, shadow_drafter;
    /* seconds of one main forward of S rows [S] (EWMA); 0: not measured */
    double cost[SPEC_MAX_DRAFT + 2];
    double mtp_step_cost;                   /* seconds of one MTP draft step (EWMA) */
    /* the MTP head's cache */
    /* slots [0, mtp_pos) hold rows of the current history */
    int mtp_pos;
    /* slots never computed (their main hidden state was gone) */
    long long mtp_stale;
    /* [MTP_RING][hidden]: main hidden state of position ring_pos[i] */
    float *ring;
    int *ring_pos;
    /* [max_batch][hidden]: the head's input hidden states, then outputs */
    float *mtp_rows;
    int *mtp_tokens;                        /* [max_batch] */
    float *mtp_logits;                      /* [vocab] */
    float *verify_logits;                   /* [max_draft + 1][vocab] */
    /* a caller's drafter (a server's predicted output, tests) */
    DraftFn caller;
    void *caller_user;
} Speculation;

/* An allowed-token constraint (grammar.h): before each draw the logits of the tokens the matcher
   does not allow become -inf, and each emitted token advances it. With start_after >= 0 it waits
   for that token (</think>: the reasoning is free, the answer constrained). */
typedef struct {
    GrammarMatcher *matcher;    /* NULL: no constraint; the caller owns it */
    uint64_t *mask;             /* [grammar_mask_words] */
    int start_after;            /* -1: from the first token */
    int active;                 /* the matcher is being followed */
} Constraint;

typedef struct {
    Model *model;
    RunState *state;
    const ForwardOptions *opt;
    Sampler sampler;
    StopRules stop_rules;                       /* default: the model's EOS ids, no limit */
    TokenCallback on_token;                     /* each reported token (may be NULL) */
    void *on_token_user;
    /* during on_token: the logits [vocab] its token was drawn from */
    const float *token_logits;
    /* may be NULL: then only the last position's logits */
    LogitsSink on_logits;
    void *on_logits_user;
    const volatile sig_atomic_t *interrupt;     /* may be NULL */
    int *history;                               /* [capacity] */
    int pos;
    float *logits;                              /* [vocab], predicting position logits_pos */
    int logits_pos;                             /* -1: none yet */
    float *hidden;                              /* [max_batch][hidden] of the last forward */
    /* its committed rows: positions hidden_pos0 .. + hidden_rows - 1 */
    int hidden_pos0, hidden_rows;
    /* its row of position logits_pos - 1 (the MTP drafter's input) */
    const float *last_hidden;
    float *chunk_logits;                        /* [sink_rows][vocab], with on_logits only */
    int generated;                              /* tokens reported in this run of steps */
    StopReason stop;                            /* why the run ended; STOP_NONE while it goes on */
    long long forwards;                         /* forward passes run, all kinds */
    Speculation spec;                           /* generator_set_speculation; off by default */
    Constraint constraint;                      /* generator_set_constraint; none by default */
    /* the state's prefix cache (KV_CACHE; NULL: none) */
    struct KvCache *prefix_cache;
    int restored;                               /* tokens the last prefill restored from it */
    /* between two chunks of a prefill (may be NULL): a server runs other conversations' steps */
    void (*on_chunk)(void *user);
    void *on_chunk_user;
} Generator;

static Generator *generator_create(Model *m, RunState *s, const ForwardOptions *opt,
                                   SamplerSettings sampling) {
    Generator *g = xcalloc(1, sizeof *g);
    g->model = m;
    g->state = s;
    g->opt = opt;
    sampler_init(&g->sampler, m->c.vocab, sampling.temperature, sampling.top_p, sampling.seed);
    g->stop_rules = (StopRules){ m->c.eos, m->c.n_eos, -1, 0 };
    g->history = xmalloc((size_t)s->capacity * sizeof(int));
    g->logits = xmalloc((size_t)m->c.vocab * sizeof(float));
    g->logits_pos = -1;
    g->hidden = xmalloc((size_t)s->max_batch * m->c.hidden * sizeof(float));
    g->spec.mode = SPEC_OFF;
    g->spec.shadow_pos = -1;
    g->prefix_cache = s->prefix_cache;
    return g;
}

static void generator_free(Generator *g) {
    if (!g) return;
    sampler_free(&g->sampler);
    free(g->history);
    free(g->logits);
    free(g->hidden);
    free(g->chunk_logits);
    Speculation *sp = &g->spec;
    void *spec_buffers[] = { sp->ring,       sp->ring_pos,   sp->mtp_rows,
                             sp->mtp_tokens, sp->mtp_logits, sp->verify_logits };
    for (size_t i = 0; i < sizeof spec_buffers / sizeof spec_buffers[0]; i++) free(spec_buffers[i]);
    free(g->constraint.mask);
    free(g);
}

/* New sampling settings (a server's per-request temperature, top-p and seed); the stream restarts
   from the seed. */
__attribute__((unused)) static void generator_set_sampling(Generator *g, SamplerSettings sampling) {
    g->sampler.temperature = sampling.temperature;
    g->sampler.top_p = sampling.top_p;
    g->sampler.seed = sampling.seed;
    g->sampler.draws = 0;
}

/* A drafter's policy state as at the start (its totals stay): no pause, acceptance unknown, and its
   next draft a probe. */
static void drafter_restart(Speculation *sp, int d) {
    Drafter *dr = &sp->drafter[d];
    dr->hits = dr->misses = 0;
    dr->resume_at = 0;
    dr->backoff = SPEC_BACKOFF_MIN;
    dr->probe = 1;
}

/* SPEC and DRAFT. Set it before the prefill, so that the MTP head's cache covers the prompt. */
static void generator_set_speculation(Generator *g, SpecMode mode, int max_draft) {
    Speculation *sp = &g->spec;
    const Config *c = &g->model->c;
    if (mode == SPEC_MTP && !c->n_mtp)
        die("SPEC=mtp: this model has no MTP layer (SPEC=ngram or auto draft without one)");
    if (max_draft < 1 || max_draft > SPEC_MAX_DRAFT)
        die("internal: DRAFT=%d outside [1, %d]", max_draft, SPEC_MAX_DRAFT);
    sp->mode = mode;
    sp->max_draft = max_draft;
    if (mode == SPEC_OFF) return;
    const int H = c->hidden, V = c->vocab, B = g->state->max_batch;
    free(sp->verify_logits);
    sp->verify_logits = xmalloc((size_t)(max_draft + 1) * V * sizeof(float));
    if (c->n_mtp && (mode == SPEC_MTP || mode == SPEC_AUTO) && !sp->ring) {
        sp->ring = xmalloc((size_t)MTP_RING * H * sizeof(float));
        sp->ring_pos = xmalloc(MTP_RING * sizeof(int));
        for (int i = 0; i < MTP_RING; i++) sp->ring_pos[i] = -1;
        sp->mtp_rows = xmalloc((size_t)B * H * sizeof(float));
        sp->mtp_tokens = xmalloc((size_t)B * sizeof(int));
        sp->mtp_logits = xmalloc((size_t)V * sizeof(float));
    }
    for (int d = 0; d < N_DRAFTERS; d++) drafter_restart(sp, d);
}

static int generator_is_eos(const Generator *g, int id) {
    for (int i = 0; i < g->stop_rules.n_eos; i++) if (g->stop_rules.eos[i] == id) return 1;
    return 0;
}

/* The grammar vocabulary of a tokenizer: each id's raw bytes, added tokens none (never allowed)
   but the six tool-call tags (grammar.h's marker bytes: only a tool-call grammar allows them), the
   given stop ids as eos (allowed once the answer is complete). NULL with err on failure. */
static GrammarVocab *grammar_vocab_of(const Tokenizer *t, int vocab, const int *eos, int n_eos,
                                      char *err, size_t err_len) {
    const char **piece = xcalloc((size_t)vocab, sizeof *piece);
    size_t *len = xcalloc((size_t)vocab, sizeof *len);
    for (int id = 0; id < vocab && id < tok_vocab_size(t); id++)
        if (!tok_is_added(t, id)) piece[id] = tok_piece(t, id, &len[id]);
    int tag[GRAMMAR_N_TAGS];
    for (int k = 0; k < GRAMMAR_N_TAGS; k++) {
        tag[k] = tok_id(t, grammar_tag_text[k]);
        if (tag[k] >= vocab || (tag[k] >= 0 && !tok_is_added(t, tag[k]))) tag[k] = -1;
    }
    GrammarVocab *v = grammar_vocab_new_tags(vocab, piece, len, eos, n_eos, tag, err, err_len);
    free(piece);
    free(len);
    return v;
}

/* Follows matcher m (NULL: no constraint) from the next token on, or from the token after
   start_after (>= 0) once that is emitted. Set it before a run of steps; m stays the caller's. */
static void generator_set_constraint(Generator *g, GrammarMatcher *m, const GrammarVocab *v,
                                     int start_after) {
    Constraint *c = &g->constraint;
    free(c->mask);
    memset(c, 0, sizeof *c);
    c->start_after = -1;
    if (!m) return;
    c->matcher = m;
    c->mask = xmalloc(grammar_mask_words(v) * sizeof(uint64_t));
    c->start_after = start_after;
    c->active = start_after < 0;
}

/* Masks the logits of a draw under matcher m in state `active`: the tokens m does not allow next
   become -inf; while the constraint waits for start_after the EOS ids do, so the answer cannot end
   in its reasoning before the part the grammar shapes (a forced tool call, a schema's value).
   -1 when m allows nothing (a dead end) or fails. */
static int constraint_mask(const Generator *g, GrammarMatcher *m, int active, float *logits) {
    if (!active) {
        for (int i = 0; i < g->stop_rules.n_eos; i++) logits[g->stop_rules.eos[i]] = -INFINITY;
        return 0;
    }
    if (grammar_matcher_mask(m, g->constraint.mask) <= 0) return -1;
    grammar_apply_mask(logits, g->constraint.mask, g->model->c.vocab);
    return 0;
}

/* Advances matcher m (in state *active) past an emitted token. */
static void constraint_advance(Constraint *c, GrammarMatcher *m, int *active, int id) {
    if (!*active) { *active = id == c->start_after; return; }
    if (grammar_matcher_accept(m, id) != 1)
        die("internal: the grammar refused token %d that its own mask allowed", id);
}

/* How many leading drafts[0, n) the constraint allows after the sampled token. */
static int constraint_trim(Constraint *c, const int *drafts, int n) {
    if (!c->matcher) return n;
    int j = 0;
    if (!c->active) {
        while (j < n && drafts[j] != c->start_after) j++;
        if (j == n) return n;
        j++;
    }
    const int k = grammar_matcher_check(c->matcher, drafts + j, n - j);
    return j + (k > 0 ? k : 0);
}

/* Makes tokens[0, n) part of the history at pos: the last forward ran them (its hidden rows
   0..n-1 are theirs) and `logits` (a [vocab] row) predicts position pos + n. */
static void generator_commit(Generator *g, const int *tokens, int n, const float *logits) {
    const int V = g->model->c.vocab, H = g->model->c.hidden;
    if (logits != g->logits) memcpy(g->logits, logits, (size_t)V * sizeof(float));
    memcpy(g->history + g->pos, tokens, (size_t)n * sizeof(int));
    g->hidden_pos0 = g->pos;
    g->hidden_rows = n;
    /* the MTP head's lazy update needs the main hidden states of recent positions */
    if (g->spec.ring)
        for (int r = n > MTP_RING ? n - MTP_RING : 0; r < n; r++) {
            const int q = g->pos + r, slot = q % MTP_RING;
            memcpy(g->spec.ring + (size_t)slot * H, g->hidden + (size_t)r * H,
                   (size_t)H * sizeof(float));
            g->spec.ring_pos[slot] = q;
        }
    g->pos += n;
    g->logits_pos = g->pos;
    g->last_hidden = g->hidden + (size_t)(n - 1) * H;
}

/* After each forward of the main model over S rows: the count, and the usage history's tick (it
   is saved every USAGE_SAVE_EVERY tokens, so the forward pass itself never writes a file). */
static void generator_forward_done(Generator *g, int S) {
    g->forwards++;
    expert_usage_tick(&g->model->experts, S);
}

/* With a logits sink (teacher forcing) a prefill keeps every row's logits of a chunk: chunks of
   at most SINK_ROWS rows whatever BATCH, so that buffer stays [SINK_ROWS][vocab] floats (634 MB
   on GLM-5.2). */
enum { SINK_ROWS = 1024 };

/* Rows of one prefill chunk with a logits sink in session s. */
static int sink_rows(const RunState *s) {
    return s->max_batch < SINK_ROWS ? s->max_batch : SINK_ROWS;
}

/* Runs tokens[0, S) at positions pos.. and commits them (history, pos, logits, last_hidden).
   with_sink: every row's logits go to on_logits (S ≤ sink_rows). -1 when interrupted (nothing
   committed). */
static int generator_forward(Generator *g, const int *tokens, int S, int with_sink,
                             const volatile sig_atomic_t *interrupt) {
    const int V = g->model->c.vocab;
    const int all_rows = with_sink && g->on_logits;
    if (all_rows && S > sink_rows(g->state))
        die("internal: %d rows for the logits sink, at most %d", S, sink_rows(g->state));
    if (all_rows && !g->chunk_logits)
        g->chunk_logits = xmalloc((size_t)sink_rows(g->state) * V * sizeof(float));
    float *logits = all_rows ? g->chunk_logits : g->logits;
    if (model_forward(g->model, g->state, g->opt, tokens, S, g->pos, g->hidden, logits, !all_rows,
                      interrupt))
        return -1;
    generator_forward_done(g, S);
    generator_commit(g, tokens, S, all_rows ? g->chunk_logits + (size_t)(S - 1) * V : g->logits);
    if (all_rows) g->on_logits(g->on_logits_user, g->pos - S, S, g->chunk_logits, g->hidden);
    return 0;
}

/* The one rule that keeps "the logits predict position pos": when they are stale, re-run the
   token at pos-1. */
static void generator_refresh_logits(Generator *g) {
    if (g->logits_pos == g->pos) return;
    if (g->pos == 0) die("internal: a generator step needs at least one prefilled token");
    const int last = g->history[g->pos - 1];
    g->pos--;
    generator_forward(g, &last, 1, 0, NULL);
}

/* Drops the history past pos (the K/V rows there are overwritten later), and with it the MTP
   head's slots that depended on it: slot q needs the token at q+1. */
static void generator_rollback(Generator *g, int pos) {
    if (pos < 0 || pos > g->pos) die("internal: rollback to %d from position %d", pos, g->pos);
    g->pos = pos;
    g->spec.shadow_pos = -1;
    if (g->spec.mtp_pos > (pos > 0 ? pos - 1 : 0)) g->spec.mtp_pos = pos > 0 ? pos - 1 : 0;
}

/* ---- speculation: the MTP head's cache and the two drafters ---------------------------------- */

static int drafter_paused(const Speculation *sp, int d) {
    return sp->tokens < sp->drafter[d].resume_at;
}

/* The MTP head's cache is kept for SPEC=mtp, and for auto while it is not sitting the MTP drafter
   out. */
static int spec_keeps_mtp(const Generator *g) {
    const Speculation *sp = &g->spec;
    return sp->ring &&
           (sp->mode == SPEC_MTP || (sp->mode == SPEC_AUTO && !drafter_paused(sp, DRAFTER_MTP)));
}

/* The main model's final-normed hidden state of committed position q < pos, or NULL when it is
   no longer at hand (neither in the last forward nor among the last MTP_RING positions). */
static const float *spec_main_hidden(const Generator *g, int q) {
    const int H = g->model->c.hidden;
    if (q >= g->hidden_pos0 && q < g->hidden_pos0 + g->hidden_rows)
        return g->hidden + (size_t)(q - g->hidden_pos0) * H;
    const int slot = q % MTP_RING;
    return g->spec.ring_pos[slot] == q ? g->spec.ring + (size_t)slot * H : NULL;
}

/* Computes the MTP head's slots [mtp_pos, q_end), slot q from (the token at q+1, the main hidden
   state at q); the token at q_end-1+1 = pos may be `next_token` (sampled, not yet in the history).
   At most the last `most` are computed (a draft's lazy update: DRAFT+1; a prefill: all); the
   older ones, and any whose hidden state is gone, are skipped and counted as stale. With
   want_logits, the last slot's logits go to spec.mtp_logits; returns its post-norm hidden state. */
static const float *spec_mtp_fill(Generator *g, int q_end, int next_token, int want_logits,
                                  int most) {
    Speculation *sp = &g->spec;
    const int H = g->model->c.hidden, B = g->state->max_batch;
    int q = sp->mtp_pos > q_end - most ? sp->mtp_pos : q_end - most;
    while (q < q_end && !spec_main_hidden(g, q)) q++;
    sp->mtp_stale += q - sp->mtp_pos;
    const float *last = NULL;
    while (q < q_end) {
        const int S = q_end - q < B ? q_end - q : B;
        for (int r = 0; r < S; r++) {
            sp->mtp_tokens[r] = q + r + 1 < g->pos ? g->history[q + r + 1] : next_token;
            memcpy(sp->mtp_rows + (size_t)r * H, spec_main_hidden(g, q + r),
                   (size_t)H * sizeof(float));
        }
        const int final = q + S == q_end;
        mtp_forward(g->model, g->state, g->opt, sp->mtp_tokens, sp->mtp_rows, S, q, sp->mtp_rows,
                    want_logits && final ? sp->mtp_logits : NULL, 1);
        last = sp->mtp_rows + (size_t)(S - 1) * H;
        q += S;
    }
    /* slot pos-1 counts once its token is committed */
    sp->mtp_pos = q_end < g->pos ? q_end : g->pos - 1;
    return last;
}

/* MTP drafts: slot pos-1 (with the sampled token t) after the pending slots, then recursively,
   each draft drawn with the draw that would emit it (sampler_pick), stopping after an EOS. Under
   a constraint each draft is drawn from the head's logits masked by the state the drafts before
   it lead to (a clone of the matcher), so that drafts stay inside the grammar. */
static int spec_draft_mtp(Generator *g, int t, int k, int *out) {
    Speculation *sp = &g->spec;
    Constraint *c = &g->constraint;
    const int H = g->model->c.hidden;
    const float *h = spec_mtp_fill(g, g->pos, t, 1, sp->max_draft + 1);
    GrammarMatcher *cm = c->matcher ? grammar_matcher_clone(c->matcher) : NULL;
    if (c->matcher && !cm) die("out of memory");
    int n = 0, active = c->active;
    for (;;) {
        if (cm && constraint_mask(g, cm, active, sp->mtp_logits)) break;
        const int d = sampler_pick(&g->sampler, sp->mtp_logits, g->sampler.draws + (uint64_t)n);
        out[n++] = d;
        if (n == k || generator_is_eos(g, d)) break;
        if (cm) constraint_advance(c, cm, &active, d);
        if (h != sp->mtp_rows) memmove(sp->mtp_rows, h, (size_t)H * sizeof(float));
        mtp_forward(g->model, g->state, g->opt, &d, sp->mtp_rows, 1, g->pos + n - 1, sp->mtp_rows,
                    sp->mtp_logits, 1);
        h = sp->mtp_rows;
    }
    grammar_matcher_free(cm);
    return n;
}

/* n-gram drafts (prompt lookup) over history[0, pos) followed by t: the continuation of the latest
   earlier occurrence of its last NGRAM_LONGEST .. NGRAM_SHORTEST tokens (longest first). */
static int spec_draft_ngram(const Generator *g, int t, int k, int *out) {
    const int n_seq = g->pos + 1;
#define SEQ(i) ((i) < g->pos ? g->history[i] : t)
    for (int n = NGRAM_LONGEST; n >= NGRAM_SHORTEST; n--) {
        if (n_seq <= n) continue;
        for (int start = n_seq - n - 1; start >= 0; start--) {
            int j = 0;
            while (j < n && SEQ(start + j) == SEQ(n_seq - n + j)) j++;
            if (j < n) continue;
            int count = 0;
            while (count < k && start + n + count < n_seq) {
                out[count] = SEQ(start + n + count);
                count++;
            }
            return count;
        }
    }
#undef SEQ
    return 0;
}

/* ---- speculation: the auto policy --------------------------------------------------------------
   SPEC=auto drafts when a verify pass is expected to yield more tokens per second than plain
   steps, from what it measured: the seconds of a forward of S rows (cost[S], a moving average;
   cost[1] from plain steps, one at least every SPEC_REMEASURE passes so that it follows the disk
   warming up), the seconds of an MTP draft step, and each drafter's acceptance a (decayed counts
   of accepted drafts and of rejections, prior 1/2). With per-draft acceptance a, k drafts yield
   1 + a + ... + a^k tokens per pass; auto picks the drafter and k <= DRAFT with the best rate and
   drafts when it beats 1 / cost[1]. An S not measured yet is priced optimistically one row past
   the largest measured one (as costing no more than it: so k grows one step at a time while the
   drafts are accepted, each step measured), and linearly beyond. A drafter that loses sits out
   SPEC_BACKOFF_MIN tokens, doubling at each new loss up to SPEC_BACKOFF_MAX (reset when the model
   picks it again), and comes back with a probe: its one-token draft is not verified but compared
   with the token the next plain step samples, which measures its acceptance (the text may have
   changed) for the price of the draft alone, nothing for n-gram lookup, one MTP step for the
   head. A drafter's first draft is such a probe too; the first real passes then measure what a
   verify costs. While the MTP drafter sits out its cache is not kept (see above). The decisions
   show in the stats line (print_spec_stats). */

static void spec_note_cost(Speculation *sp, int S, double seconds) {
    double *c = &sp->cost[S];
    *c = *c > 0 ? (1 - SPEC_COST_NEW) * *c + SPEC_COST_NEW * seconds : seconds;
}

static double spec_cost(const Speculation *sp, int S) {
    if (sp->cost[S] > 0) return sp->cost[S];
    int largest = 1;
    for (int t = S - 1; t >= 2 && largest == 1; t--) if (sp->cost[t] > 0) largest = t;
    if (S == largest + 1) return sp->cost[largest];   /* explore: one row more, priced as free */
    if (largest == 1) return sp->cost[1] * S;
    return sp->cost[1] + (sp->cost[largest] - sp->cost[1]) * (S - 1) / (largest - 1);
}

static double drafter_acceptance(const Drafter *d) {
    return (d->hits + 0.5) / (d->hits + d->misses + 1.0);
}

/* Expected tokens per second of a pass of k drafts by drafter d. */
static double spec_rate(const Speculation *sp, int d, int k) {
    const double a = drafter_acceptance(&sp->drafter[d]);
    double tokens = 1.0, ak = 1.0;
    for (int i = 0; i < k; i++) { ak *= a; tokens += ak; }
    return tokens / ((d == DRAFTER_MTP ? k * sp->mtp_step_cost : 0.0) + spec_cost(sp, k + 1));
}

/* A probe: `token`, drafted by d for position pos, is checked when the next step samples there. */
static void spec_shadow(Speculation *sp, int d, int token, int pos) {
    sp->shadow_drafter = d;
    sp->shadow_token = token;
    sp->shadow_pos = pos;
}

static void spec_shadow_check(Speculation *sp, int sampled) {
    Drafter *d = &sp->drafter[sp->shadow_drafter];
    const int agree = sampled == sp->shadow_token;
    d->probes++;
    d->probe_hits += agree;
    d->hits = SPEC_DECAY * d->hits + agree;
    d->misses = SPEC_DECAY * d->misses + !agree;
    d->probe = 0;
    sp->shadow_pos = -1;
}

static void drafter_pause(Speculation *sp, int d) {
    Drafter *dr = &sp->drafter[d];
    dr->resume_at = sp->tokens + dr->backoff;
    dr->backoff = dr->backoff * 2 < SPEC_BACKOFF_MAX ? dr->backoff * 2 : SPEC_BACKOFF_MAX;
    dr->probe = 1;
    dr->pauses++;
}

/* The caller's drafts (a server's predicted output, a test's drafter) to follow t. */
static int spec_draft_caller(Generator *g, int t, int k, int *out) {
    Speculation *sp = &g->spec;
    g->history[g->pos] = t;   /* past pos: scratch until committed */
    const int n = sp->caller(sp->caller_user, g->history, g->pos + 1, k, out);
    return n < 0 ? 0 : n > k ? k : n;
}

static int spec_auto_draft(Generator *g, int t, int room, int *out, int *which) {
    Speculation *sp = &g->spec;
    /* a plain step: what drafting must beat */
    if (sp->cost[1] <= 0 || sp->passes_since_plain >= SPEC_REMEASURE) return 0;
    /* the drafts that cost nothing to ask for come first; the MTP head drafts once chosen */
    int ready[N_DRAFTERS][SPEC_MAX_DRAFT], n_ready[N_DRAFTERS] = { 0 };
    if (!drafter_paused(sp, DRAFTER_NGRAM))
        n_ready[DRAFTER_NGRAM] = spec_draft_ngram(g, t, room, ready[DRAFTER_NGRAM]);
    if (sp->caller && !drafter_paused(sp, DRAFTER_CALLER))
        n_ready[DRAFTER_CALLER] = spec_draft_caller(g, t, room, ready[DRAFTER_CALLER]);
    const int can_mtp = sp->ring && !drafter_paused(sp, DRAFTER_MTP);
    for (int d = DRAFTER_NGRAM; d <= DRAFTER_CALLER; d++)
        if (n_ready[d] && sp->drafter[d].probe) {
            spec_shadow(sp, d, ready[d][0], g->pos + 1);
            return 0;
        }
    if (can_mtp && sp->drafter[DRAFTER_MTP].probe) {
        const double t0 = now_seconds();
        const int got = spec_draft_mtp(g, t, 1, out);   /* 0 only at a constraint's dead end */
        const double step = now_seconds() - t0;
        sp->mtp_step_cost = sp->mtp_step_cost > 0
                                ? (1 - SPEC_COST_NEW) * sp->mtp_step_cost + SPEC_COST_NEW * step
                                : step;
        if (got) spec_shadow(sp, DRAFTER_MTP, out[0], g->pos + 1);
        return 0;
    }
    double best = 1.0 / sp->cost[1], rate_of[N_DRAFTERS] = { 0 };
    int best_d = -1, best_k = 0;
    for (int d = 0; d < N_DRAFTERS; d++) {
        const int kmax = d == DRAFTER_MTP ? (can_mtp ? room : 0) : n_ready[d];
        for (int k = 1; k <= kmax; k++) {
            const double r = spec_rate(sp, d, k);
            if (r > rate_of[d]) rate_of[d] = r;
            if (r > best) { best = r; best_d = d; best_k = k; }
        }
    }
    for (int d = 0; d < N_DRAFTERS; d++)   /* a drafter that could draft and loses sits out */
        if (rate_of[d] > 0 && rate_of[d] <= 1.0 / sp->cost[1]) drafter_pause(sp, d);
    if (best_d < 0) return 0;
    *which = best_d;
    sp->drafter[best_d].backoff = SPEC_BACKOFF_MIN;
    if (best_d == DRAFTER_MTP) return spec_draft_mtp(g, t, best_k, out);
    memcpy(out, ready[best_d], (size_t)best_k * sizeof(int));
    return best_k;
}

/* Up to `room` drafts to follow t (0: a plain step); *which: the drafter. A caller's drafter is
   used alone under SPEC=mtp/ngram (tests force it so), as one more candidate under auto. */
static int spec_draft(Generator *g, int t, int room, int *out, int *which) {
    Speculation *sp = &g->spec;
    if (room > sp->max_draft) room = sp->max_draft;
    if (sp->mode == SPEC_OFF || room < 1) return 0;
    if (sp->caller && sp->mode != SPEC_AUTO) {
        *which = DRAFTER_CALLER;
        return spec_draft_caller(g, t, room, out);
    }
    switch (sp->mode) {
    case SPEC_MTP: *which = DRAFTER_MTP; return spec_draft_mtp(g, t, room, out);
    case SPEC_NGRAM: *which = DRAFTER_NGRAM; return spec_draft_ngram(g, t, room, out);
    default: return spec_auto_draft(g, t, room, out, which);
    }
}

/* After a pass: the drafter's totals and acceptance estimate, and the costs it measured. */
static void spec_account(Speculation *sp, int which, int drafted, int accepted,
                         double verify_seconds, double draft_seconds) {
    Drafter *d = &sp->drafter[which];
    d->drafted += drafted;
    d->accepted += accepted;
    d->passes++;
    d->last_k = drafted;
    d->hits = SPEC_DECAY * d->hits + accepted;
    d->misses = SPEC_DECAY * d->misses + (accepted < drafted);
    d->probe = 0;
    sp->passes_since_plain++;
    spec_note_cost(sp, drafted + 1, verify_seconds);
    if (which == DRAFTER_MTP) {
        const double per_step = draft_seconds / drafted;
        sp->mtp_step_cost = sp->mtp_step_cost > 0
                                ? (1 - SPEC_COST_NEW) * sp->mtp_step_cost + SPEC_COST_NEW * per_step
                                : per_step;
    }
}

/* ---- the prefix cache ------------------------------------------------------------------------
   KV_CACHE (PROMPT, CHAT, SERVE): a prompt that begins like one seen before, in this process or any
   other, restores the cache rows of that beginning from kvfile.h's entries and prefills only the
   rest. The forward pass is batch-invariant, so restored rows are exactly those a prefill writes
   and the answer is bit for bit the uncached one. At least the prompt's last token is always
   prefilled, so the logits are fresh and nothing else needs restoring. The MTP head's rows are not
   kept: its slots for restored positions are stale, which can only lower draft acceptance. Rows
   are read straight into the conversation's own KV cache, which the RAM plan counts. */

/* Restores from the prefix cache the rows of the longest cached block-aligned prefix of
   history[0, pos) + tokens[0, n) that reaches past pos, and appends its tokens to the history.
   Returns how many it appended. The logits and hidden rows are then stale, and the MTP head's
   recent main hidden states are gone (its slots for these positions stay stale): the caller
   prefills at least one more token. */
static int generator_restore_prefix(Generator *g, const int *tokens, int n) {
    if (!g->prefix_cache) return 0;
    const KvRows rows = run_state_rows(g->state);
    char warn[12800];
    const int got =
        kvcache_restore(g->prefix_cache, &rows, g->history, g->pos, tokens, n, warn, sizeof warn);
    if (warn[0]) say("warning: %s", warn);
    if (!got) return 0;
    g->pos += got;
    g->logits_pos = -1;
    g->last_hidden = NULL;
    g->hidden_rows = 0;
    if (g->spec.ring) for (int i = 0; i < MTP_RING; i++) g->spec.ring_pos[i] = -1;
    return got;
}

/* Writes the prefix cache entries of the history the prefill has reached (after each chunk, so
   that a prefill killed midway keeps what it computed). A write that fails is said; the run goes
   on without the rest. */
static void generator_store_prefix(Generator *g, KvStoreCursor *c) {
    if (!g->prefix_cache) return;
    const KvRows rows = run_state_rows(g->state);
    char err[8500];
    if (kvcache_store(g->prefix_cache, c, &rows, g->history, g->pos, err, sizeof err))
        say("warning: prefix cache: %s", err);
}

/* ---- prefill, steps -------------------------------------------------------------------------- */

/* Appends tokens[0, n) at pos in BATCH-sized chunks (and keeps the MTP head's cache up with them);
   with a prefix cache, the longest cached beginning comes from disk (g->restored says how many
   tokens) and the history's entries are written after each chunk. Returns the tokens done: n, or
   fewer when the interrupt stopped it, and then pos is back where it was (the chunks done are
   dropped). */
static int generator_prefill(Generator *g, const int *tokens, int n) {
    const int start = g->pos, B = g->on_logits ? sink_rows(g->state) : g->state->max_batch;
    g->spec.shadow_pos = -1;
    /* the prefix cache: all but the last token may come from disk (a logits sink sees every row) */
    g->restored = g->on_logits ? 0 : generator_restore_prefix(g, tokens, n - 1);
    int done = g->restored;
    KvStoreCursor stored;
    kvcache_cursor(g->prefix_cache, &stored);
    while (done < n) {
        if (g->interrupt && *g->interrupt) break;
        const int S = n - done < B ? n - done : B;
        if (generator_forward(g, tokens + done, S, 1, g->interrupt)) break;
        if (spec_keeps_mtp(g)) spec_mtp_fill(g, g->pos - 1, -1, 0, INT32_MAX);
        done += S;
        generator_store_prefix(g, &stored);
        if (done < n && g->on_chunk) g->on_chunk(g->on_chunk_user);
    }
    if (stored.wrote) kvcache_evict(g->prefix_cache);
    if (done < n) {
        generator_rollback(g, start);
        g->restored = 0;
    }
    return done;
}

/* Makes the history equal tokens[0, n): keeps the longest common prefix, rolls back to it and
   prefills the rest. At least one token is always run, so the logits belong to this history.
   Returns n, or fewer when interrupted (then the history is the kept prefix); *reused (may be
   NULL) gets the length of the prefix that was kept or restored from the prefix cache. (For
   sessions and the server; the CLI modes only append, tests/test_generator.c checks it.) */
__attribute__((unused)) static int generator_reuse_prefix(Generator *g, const int *tokens, int n,
                                                          int *reused) {
    int keep = 0;
    while (keep < g->pos && keep < n && g->history[keep] == tokens[keep]) keep++;
    if (keep == n && n > 0) keep = n - 1;
    generator_rollback(g, keep);
    const int done = generator_prefill(g, tokens + keep, n - keep);
    if (reused) *reused = keep + g->restored;
    return done == n - keep ? n : keep;
}

/* Saves the conversation to a session file (kvfile.h): history[0, pos), the cache rows, the
   logits while they are fresh, the sampler's stream, and the caller's chat state from *chat (its
   chat_flags and text_pending; may be NULL). 0, or -1 with err filled (the file is untouched). */
static int generator_save(const Generator *g, const SessionKey *k, const SessionSnapshot *chat,
                          const char *path, char *err, size_t err_len) {
    SessionSnapshot snap = chat ? *chat : (SessionSnapshot){ 0 };
    snap.n_tokens = g->pos;
    snap.tokens = g->history;
    snap.has_logits = g->pos > 0 && g->logits_pos == g->pos && g->last_hidden;
    snap.logits = g->logits;
    snap.hidden = (float *)g->last_hidden;
    snap.seed = g->sampler.seed;
    snap.rng_state = g->sampler.draws;
    const KvRows rows = run_state_rows(g->state);
    return session_save(&rows, k, &snap, path, err, err_len);
}

/* Replaces the conversation with a saved one: history, pos, the cache rows, the logits (stale if
   the file has none: the next step re-runs the last token) and the sampler's stream; the chat
   state goes to *chat. 0; -1 when refused (err says why; nothing changed); -2 when the file
   changed while it was loaded: then the conversation is empty. */
static int generator_load(Generator *g, const SessionKey *k, const char *path,
                          SessionSnapshot *chat, char *err, size_t err_len) {
    SessionSource src;
    if (session_source_open(&src, path, err, err_len)) return -1;
    SessionSnapshot snap = { .tokens = g->history, .logits = g->logits, .hidden = g->hidden };
    const KvRows rows = run_state_rows(g->state);
    const int rc = session_load(&rows, k, &src, &snap, err, err_len);
    session_source_close(&src);
    if (rc == -2) {
        g->pos = 0;
        g->logits_pos = -1;
    }
    if (rc) return rc;
    g->pos = snap.n_tokens;
    g->logits_pos = snap.has_logits ? g->pos : -1;
    g->last_hidden = snap.has_logits ? g->hidden : NULL;
    g->sampler.seed = snap.seed;
    g->sampler.draws = snap.rng_state;
    /* the MTP head's slots are not in the file's promise: stale, recomputed as drafts need them */
    g->spec.mtp_pos = 0;
    if (chat) *chat = snap;
    return 0;
}

/* SESSION=path at the start (chat, PROMPT, the server): 1 when the file exists and is to be loaded;
   0 when it does not and its folder can take it (the first save creates it). A folder that cannot
   be written is an error now, before an answer is computed that could not be kept. */
static int session_file_present(const char *path) {
    if (!access(path, F_OK)) return 1;
    char dir[4096];
    atomic_dir_of(path, dir, sizeof dir);
    if (access(dir, W_OK)) die("SESSION=%s cannot be written: %s: %s", path, dir, strerror(errno));
    return 0;
}

/* Starts a run of steps: the token count restarts and the stop reason clears. */
static void generator_begin(Generator *g) {
    g->generated = 0;
    g->stop = STOP_NONE;
}

static void generator_report(Generator *g, int id, const float *logits) {
    g->token_logits = logits;
    g->generated++;
    g->spec.tokens++;
    if (g->on_token) g->on_token(g->on_token_user, id);
}

/* One verify pass: id (sampled) and drafts[0, n) at positions pos.. in one forward of n+1 rows.
   Draft i is kept while the target distribution at its position, drawn with the draw plain
   decoding would use there, picks it; id and the kept drafts are reported under the stop rules
   and committed, with the logits after the last one. The draw of the first rejected position
   is not consumed: the next step draws it again from those logits and gets the same token.
   Returns the run's length. */
/* What one step runs through the model: the sampled id and the drafts after it (rows 1..), at
   positions pos.. of the generator's cache. generator_step_begin fills it, a forward runs it (alone
   or beside other generators' steps), generator_step_end takes its logits. */
typedef struct {
    int tokens[SPEC_MAX_DRAFT + 1];
    /* 1 + drafts; 0: the step needs no forward (it ended, or a last token) */
    int rows;
    int which;                  /* the drafter, with drafts */
    double draft_seconds;
} StepRows;

/* The verify pass's acceptance, after its forward wrote the logits of rows 0..n into
   spec.verify_logits and their hidden states into g->hidden. */
static int generator_verify_end(Generator *g, const StepRows *p, double forward_seconds, int *ids) {
    Speculation *sp = &g->spec;
    const StopRules *r = &g->stop_rules;
    const int V = g->model->c.vocab, old_pos = g->pos, n = p->rows - 1, which = p->which;
    const int *tokens = p->tokens, *drafts = p->tokens + 1;
    const double draft_seconds = p->draft_seconds;
    generator_forward_done(g, n + 1);
    /* under a constraint each row is masked by the state the drafts before it lead to */
    Constraint *c = &g->constraint;
    GrammarMatcher *cm = c->matcher ? grammar_matcher_clone(c->matcher) : NULL;
    if (c->matcher && !cm) die("out of memory");
    int accepted = 0, active = c->active;
    while (accepted < n) {
        float *row = sp->verify_logits + (size_t)accepted * V;
        if (cm && constraint_mask(g, cm, active, row)) break;
        if (sampler_pick(&g->sampler, row, g->sampler.draws + (uint64_t)accepted) !=
            drafts[accepted])
            break;
        if (cm) constraint_advance(c, cm, &active, drafts[accepted]);
        accepted++;
    }
    grammar_matcher_free(cm);
    spec_account(sp, which, n, accepted, forward_seconds, draft_seconds);
    /* report id and the kept drafts in order; the room given to the drafter keeps the run within
       max_tokens, so the limit can only fall on its last token */
    int count = 0, cached = -1;
    for (int i = 0; i <= accepted; i++) {
        if (i > 0) {
            g->sampler.draws++;   /* the draw that verified tokens[i] */
            if (generator_is_eos(g, tokens[i])) { g->stop = STOP_EOS; break; }
        }
        if (i > 0 && c->matcher) constraint_advance(c, c->matcher, &c->active, tokens[i]);
        ids[count++] = tokens[i];
        generator_report(g, tokens[i], i ? sp->verify_logits + (size_t)(i - 1) * V : g->logits);
        if (r->max_tokens >= 0 && g->generated >= r->max_tokens) {
            if (!r->resumable) { g->stop = STOP_LIMIT; cached = count - 1; }
            break;
        }
    }
    if (cached < 0) cached = count;
    if (cached > 0)
        generator_commit(g, tokens, cached, sp->verify_logits + (size_t)(cached - 1) * V);
    /* slot old_pos-1 took id, now in the history */
    if (which == DRAFTER_MTP && g->pos > old_pos) sp->mtp_pos = old_pos;
    return count;
}

/* The part of a step before its forward: checks, the sampled id, the drafts. Returns -1 when
   p->rows rows are to run through the model, else the step's result (ids written, as
   generator_step returns). */
static int generator_step_begin(Generator *g, int *ids, int max, StepRows *p) {
    const StopRules *r = &g->stop_rules;
    p->rows = 0;
    if (g->stop != STOP_NONE || max < 1) return 0;
    if (g->interrupt && *g->interrupt) { g->stop = STOP_INTERRUPT; return 0; }
    if (r->max_tokens >= 0 && g->generated >= r->max_tokens) { g->stop = STOP_LIMIT; return 0; }
    generator_refresh_logits(g);
    Constraint *c = &g->constraint;
    /* a dead end (a vocabulary without every single byte) ends the run as a limit would */
    if (c->matcher && constraint_mask(g, c->matcher, c->active, g->logits)) {
        g->stop = STOP_LIMIT;
        return 0;
    }
    const int id = sampler_sample(&g->sampler, g->logits);
    if (g->spec.shadow_pos == g->pos) spec_shadow_check(&g->spec, id);
    if (generator_is_eos(g, id)) { g->stop = STOP_EOS; return 0; }
    if (g->pos >= g->state->capacity) { g->stop = STOP_CONTEXT; return 0; }
    if (c->matcher) constraint_advance(c, c->matcher, &c->active, id);
    /* room for drafts after id: the caller's buffer, the cache, one forward's rows, the limit */
    int room = max - 1;
    if (room > g->state->capacity - g->pos - 1) room = g->state->capacity - g->pos - 1;
    if (room > g->state->max_batch - 1) room = g->state->max_batch - 1;
    if (r->max_tokens >= 0 && room > r->max_tokens - g->generated - 1)
        room = r->max_tokens - g->generated - 1;
    p->which = 0;
    const double t0 = now_seconds();
    int n = room > 0 ? spec_draft(g, id, room, p->tokens + 1, &p->which) : 0;
    n = constraint_trim(c, p->tokens + 1, n);
    p->draft_seconds = now_seconds() - t0;
    p->tokens[0] = id;
    if (n > 0) { p->rows = n + 1; return -1; }
    ids[0] = id;
    generator_report(g, id, g->logits);
    if (!r->resumable && r->max_tokens >= 0 && g->generated >= r->max_tokens) {
        g->stop = STOP_LIMIT;
        return 1;
    }
    p->rows = 1;
    return -1;
}

/* Where a step's forward writes its logits: a verify pass every row's, a plain step its one. */
static float *generator_step_logits(Generator *g, const StepRows *p) {
    return p->rows > 1 ? g->spec.verify_logits : g->logits;
}

/* The part of a step after its forward (logits and g->hidden written): returns the ids. */
static int generator_step_end(Generator *g, const StepRows *p, double forward_seconds, int *ids) {
    if (p->rows > 1) return generator_verify_end(g, p, forward_seconds, ids);
    generator_forward_done(g, 1);
    generator_commit(g, p->tokens, 1, g->logits);
    if (g->spec.mode != SPEC_OFF) {
        spec_note_cost(&g->spec, 1, forward_seconds);
        g->spec.passes_since_plain = 0;
    }
    return 1;
}

/* One step: the next id(s) into ids[0, max), reported to on_token and (unless the run ends there
   and is not resumable) run through the model. Returns how many; 0 when the run has stopped,
   and g->stop says why. */
static int generator_step(Generator *g, int *ids, int max) {
    StepRows p;
    const int done = generator_step_begin(g, ids, max, &p);
    if (done >= 0) return done;
    const double t0 = now_seconds();
    model_forward(g->model, g->state, g->opt, p.tokens, p.rows, g->pos, g->hidden,
                  generator_step_logits(g, &p), p.rows == 1, NULL);
    return generator_step_end(g, &p, now_seconds() - t0, ids);
}

/* ---- several conversations in one forward ----------------------------------------------------

   Decoding one row is bound by reading the weights (dense ones from RAM, experts from the cache or
   the disk), and the kernels reuse each weight across the rows of a forward: the steps of several
   generators (each with its own KV cache) cost little more in one forward than one alone. Each
   step is begun alone (sampling, drafting), the rows of all of them run as row groups of one
   forward (model_forward_groups), and each ends alone. Since a row's logits do not depend on the
   rows beside it, every generator emits exactly what it would alone. A server's SLOTS run their
   decode steps this way (server.c's Scheduler); tests/test_slots.c and bench/slotbench.c drive it
   directly. */
typedef struct {
    /* scratch for all the rows of one batched forward (no KV rows used) */
    RunState work;
    int max_rows;
    int *tokens;               /* [max_rows] */
    float *hidden, *logits;    /* [max_rows][hidden], [max_rows][vocab] */
} StepBatch;

/* A batch for up to n_gens generators' steps (each up to DRAFT + 1 rows). */
static void step_batch_init(StepBatch *b, Model *m, int n_gens) {
    memset(b, 0, sizeof *b);
    b->max_rows = n_gens * (SPEC_MAX_DRAFT + 1);
    run_state_init(&b->work, m, 1, b->max_rows, 0);
    b->tokens = xcalloc((size_t)b->max_rows, sizeof(int));
    b->hidden = xcalloc((size_t)b->max_rows * m->c.hidden, sizeof(float));
    b->logits = xcalloc((size_t)b->max_rows * m->c.vocab, sizeof(float));
}

static void step_batch_free(StepBatch *b) {
    run_state_free(&b->work);
    free(b->tokens); free(b->hidden); free(b->logits);
    memset(b, 0, sizeof *b);
}

/* One step of each of gens[0, n) (one model, one ForwardOptions), as generator_step(gens[k],
   ids[k], max[k]) would take it alone: the ids into ids[k], their count (0: that generator's run
   has stopped) into counts[k]. */
static void generator_step_batch(Generator **gens, int n, StepBatch *b, int **ids, const int *max,
                                 int *counts) {
    StepRows plan[n];
    RowGroup groups[n];
    int member[n], n_groups = 0, rows = 0;
    for (int k = 0; k < n; k++) {
        counts[k] = generator_step_begin(gens[k], ids[k], max[k], &plan[k]);
        if (counts[k] >= 0) continue;
        if (rows + plan[k].rows > b->max_rows)
            die("internal: %d rows for a step batch of %d", rows + plan[k].rows, b->max_rows);
        groups[n_groups] = (RowGroup){ gens[k]->state, rows, plan[k].rows, gens[k]->pos };
        member[n_groups++] = k;
        memcpy(b->tokens + rows, plan[k].tokens, (size_t)plan[k].rows * sizeof(int));
        rows += plan[k].rows;
    }
    if (!n_groups) return;
    Generator *first = gens[member[0]];
    const int H = first->model->c.hidden, V = first->model->c.vocab;
    const double t0 = now_seconds();
    model_forward_groups(first->model, &b->work, groups, n_groups, first->opt, b->tokens, rows,
                         b->hidden, b->logits, 0, NULL);
    const double seconds = now_seconds() - t0;
    for (int i = 0; i < n_groups; i++) {
        const int k = member[i];
        Generator *g = gens[k];
        const RowGroup *gr = &groups[i];
        memcpy(g->hidden, b->hidden + (size_t)gr->row0 * H, (size_t)gr->S * H * sizeof(float));
        memcpy(generator_step_logits(g, &plan[k]), b->logits + (size_t)gr->row0 * V,
               (size_t)gr->S * V * sizeof(float));
        counts[k] = generator_step_end(g, &plan[k], seconds, ids[k]);
    }
}

/* ---- speculation statistics ------------------------------------------------------------------ */

typedef struct {
    long long drafted[N_DRAFTERS], accepted[N_DRAFTERS], passes[N_DRAFTERS], pauses[N_DRAFTERS],
        probes[N_DRAFTERS], probe_hits[N_DRAFTERS];
    long long stale;
} SpecCounts;

static SpecCounts spec_counts(const Generator *g) {
    SpecCounts c;
    memset(&c, 0, sizeof c);
    for (int d = 0; d < N_DRAFTERS; d++) {
        c.drafted[d] = g->spec.drafter[d].drafted;
        c.accepted[d] = g->spec.drafter[d].accepted;
        c.passes[d] = g->spec.drafter[d].passes;
        c.pauses[d] = g->spec.drafter[d].pauses;
        c.probes[d] = g->spec.drafter[d].probes;
        c.probe_hits[d] = g->spec.drafter[d].probe_hits;
    }
    c.stale = g->spec.mtp_stale;
    return c;
}

/* "glm: speculation: D drafted, A accepted (P%)" since `since` (NULL: since the start), then per
   drafter, auto's decisions and the measured cost of a verify pass against a plain step. */
/* Appends to a line, never past its end. */
static void line_append(char *line, size_t cap, size_t *n, const char *fmt, ...) {
    if (*n + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    const int k = vsnprintf(line + *n, cap - *n, fmt, ap);
    va_end(ap);
    if (k > 0) *n = *n + (size_t)k < cap ? *n + (size_t)k : cap - 1;
}

/* Drafts made and accepted, all drafters together, between two counts. */
static void spec_totals(const SpecCounts *now, const SpecCounts *since, long long *drafted,
                        long long *accepted) {
    *drafted = *accepted = 0;
    for (int d = 0; d < N_DRAFTERS; d++) {
        *drafted += now->drafted[d] - since->drafted[d];
        *accepted += now->accepted[d] - since->accepted[d];
    }
}

static void print_spec_stats(const Generator *g, const SpecCounts *since) {
    const Speculation *sp = &g->spec;
    SpecCounts now = spec_counts(g), zero;
    memset(&zero, 0, sizeof zero);
    if (!since) since = &zero;
    long long drafted, accepted;
    spec_totals(&now, since, &drafted, &accepted);
    char pct[32] = "-", line[2048];
    size_t n = 0;
    if (drafted) snprintf(pct, sizeof pct, "%.1f%%", 100.0 * accepted / drafted);
    line_append(line, sizeof line, &n,
                "speculation: %lld drafted, %lld accepted (%s) | SPEC %s, DRAFT %d", drafted,
                accepted, pct, SPEC_MODE_NAMES[sp->mode], sp->max_draft);
    for (int d = 0; d < N_DRAFTERS && sp->mode != SPEC_OFF; d++) {
        const long long passes = now.passes[d] - since->passes[d],
                        pauses = now.pauses[d] - since->pauses[d];
        const long long probes = now.probes[d] - since->probes[d];
        if (!passes && !pauses && !probes) continue;
        line_append(line, sizeof line, &n, " | %s: %lld/%lld in %lld passes", DRAFTER_NAMES[d],
                    now.accepted[d] - since->accepted[d], now.drafted[d] - since->drafted[d],
                    passes);
        if (sp->mode == SPEC_AUTO)
            line_append(line, sizeof line, &n, ", %lld/%lld probes, sat out %lldx%s",
                        now.probe_hits[d] - since->probe_hits[d], probes, pauses,
                        drafter_paused(sp, d) ? " (now)" : "");
    }
    if (now.stale - since->stale)
        line_append(line, sizeof line, &n, " | %lld stale MTP rows", now.stale - since->stale);
    if (sp->cost[1] > 0) {
        int shown = 0;
        for (int S = 2; S <= sp->max_draft + 1; S++) {
            if (sp->cost[S] <= 0) continue;
            line_append(line, sizeof line, &n, "%s%d rows %.2fx",
                        shown ? ", " : " | verify cost vs a plain step: ", S,
                        sp->cost[S] / sp->cost[1]);
            shown = 1;
        }
        if (sp->mtp_step_cost > 0)
            line_append(line, sizeof line, &n, " | MTP draft step %.2fx",
                        sp->mtp_step_cost / sp->cost[1]);
    }
    fprintf(stderr, "glm: %s\n", line);
}

/* =============================================================================================
   10. Runs: what every front end does before and after it drives the engine
   Start: the RunState, the configuration line, the expert cache populated. End: the profile, the
   routing counts (STATS), then everything released. The statistics lines are printed by the
   front ends through print_expert_stats and print_spec_stats.
   ============================================================================================= */

static void print_configuration(const Settings *set, const Model *m, int capacity) {
    const Config *c = &m->c;
    int full = 0;
    for (int l = 0; l < c->n_layers; l++) full += c->layer_indexer[l];
    fprintf(stderr,
            "glm: model %s: %d layers (+%d MTP), hidden %d, %d heads, vocab %d, %d experts top-%d "
            "(groups %d/%d), indexer top-%d on %d full layers, rope theta %g%s\n",
            set->model_dir, c->n_layers, c->n_mtp, c->hidden, c->n_heads, c->vocab, c->n_experts,
            c->experts_per_tok, c->topk_group, c->n_group, c->index_topk, full, c->rope_theta,
            m->experts.fused_layers ? ", fused experts" : "");
    fprintf(stderr,
            "glm: settings: expert_bits %d, dense_bits %d, GROUP %d, IDOT %d (%s kernels), "
            "ABSORB %s, INDEXER %s, BATCH %d, context %d, SPEC %s, DRAFT %d, threads %d "
            "(OMP_WAIT_POLICY %s)\n",
            set->expert_bits, set->dense_bits, set->group, set->idot,
            qt_kernel_name(qt_get_kernel()), set->absorb ? "1 (absorbed)" : "0 (explicit K/V)",
            set->indexer_mode, set->batch, capacity, SPEC_MODE_NAMES[set->spec_mode], set->draft,
            max_threads(), getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "default");
}

/* PROFILE=1: where the time of the forward passes went. */
static void print_profile(const RunState *s, const ExpertStore *store) {
    const double moe_other = s->profile.moe - store->wait_seconds - store->compute_seconds;
    fprintf(stderr,
            "PROFILE: %lld forwards, %lld positions | attention %.3f s (indexer %.3f s, "
            "scores+pooling %.3f s) | dense MLP %.3f s | "
            "MoE %.3f s = routed experts %.3f s + disk wait %.3f s + router/shared/combine %.3f s "
            "| lm_head %.3f s\n",
            s->profile.forwards, s->profile.positions, s->profile.attention, s->profile.indexer,
            s->profile.attention_core, s->profile.dense_mlp, s->profile.moe, store->compute_seconds,
            store->wait_seconds, moe_other, s->profile.lm_head);
}

/* Expert-streaming statistics: one line, and one more for each kind of load besides demanded
   reads. */
static void print_expert_stats(const ExpertStore *store, double seconds) {
    long long total = store->hits + store->misses;
    fprintf(stderr,
            "glm: experts: %lld hits, %lld misses (hit %.1f%%), read %.1f MB in %.3f s "
            "(%.2f GB/s while reading), waited on disk %.3f s, expert compute %.3f s, "
            "run %.3f s, mode %s\n",
            store->hits, store->misses, total ? 100.0 * store->hits / total : 0.0,
            store->bytes_read / 1e6, store->read_seconds,
            store->read_seconds > 0 ? store->bytes_read / store->read_seconds / 1e9 : 0.0,
            store->wait_seconds, store->compute_seconds, seconds, IO_MODE_NAMES[store->io_mode]);
    if (store->in_place_loads)
        fprintf(stderr, "glm: page cache: %lld expert loads found the expert there and used it "
                        "in place (%.1f MB not copied, %.1f MB of them missing pages that mapping "
                        "read, %.3f s mapping it)\n",
                store->in_place_loads, store->in_place_bytes / 1e6,
                store->in_place_missing_bytes / 1e6, store->in_place_seconds);
    if (store->prefetched || store->prefetch_skipped)
        fprintf(stderr, "glm: usage history: %lld hot experts read ahead while the disk was idle, "
                        "%lld of them hit; %lld left to the page cache, which held them\n",
                store->prefetched, store->prefetch_used, store->prefetch_skipped);
    if (store->read_ahead)
        fprintf(stderr, "glm: prefill read-ahead: %lld experts read before their layer's router "
                        "ran, %lld of them hit\n",
                store->read_ahead, store->read_ahead_used);
}

/* Writes routing counts atomically: a kill never leaves half a file. */
static void write_route_stats(const ExpertStore *store, const char *path) {
    AtomicFile af;
    char err[4400];
    FILE *f = atomic_begin(&af, path, err, sizeof err);
    if (!f) die("STATS=%s: %s", path, err);
    fprintf(f, "# layer expert count\n");
    for (int l = 0; l < store->n_layers; l++)
        for (int e = 0; e < store->n_experts; e++)
            if (store->route_counts[(size_t)l * store->n_experts + e])
                fprintf(f, "%d %d %lld\n", l, e,
                        store->route_counts[(size_t)l * store->n_experts + e]);
    if (atomic_commit(&af, err, sizeof err)) die("STATS=%s: %s", path, err);
}

/* A long prefill of a big model reads nearly every expert of every layer: on a terminal, one
   line shows which layer the pass is in (RunState.on_layer), erased when the pass ends. */
static void print_prefill_progress(void *user, int layer, int n_layers, int S, int pos0) {
    (void)user;
    if (S < 32) return;
    if (layer < n_layers)
        fprintf(stderr, "\rglm: prefill of %d tokens at position %d: layer %d/%d ", S, pos0,
                layer + 1, n_layers);
    else fputs("\r\033[K", stderr);
}

/* The KV cache, the expert cache and the forward options: what every mode that runs the model
   needs. */
static ForwardOptions engine_start(const Settings *set, Model *model, RunState *state,
                                   int capacity) {
    run_state_init(state, model, capacity, set->batch, 0);
    if (capacity != model->ram.capacity || state->bytes > model->ram.run_state)
        fprintf(stderr,
                "glm: warning: internal: the session takes %.0f bytes for %d tokens, the RAM plan "
                "counted %.0f for %d\n",
                state->bytes, capacity, model->ram.run_state, model->ram.capacity);
    if (isatty(STDERR_FILENO)) state->on_layer = print_prefill_progress;
    if (g_verbose) print_configuration(set, model, capacity);
    expert_store_populate(&model->experts);
    ForwardOptions opt = { set->absorb,
                           !strcmp(set->indexer_mode, "always") ? INDEXER_ALWAYS
                           : !strcmp(set->indexer_mode, "off")  ? INDEXER_OFF
                                                                : INDEXER_AUTO,
                           set->latent_eps, set->mtp_zero_pos0 };
    if (set->mode == MODE_PROMPT || set->mode == MODE_CHAT || set->mode == MODE_SERVE) {
        const SessionKey key = session_key(model, set, &opt);
        state->prefix_cache =
            prefix_cache_open(set->kv_cache, set->kv_cache_gb, set->cache_dir, &key);
        if (state->prefix_cache)
            say_detail("prefix cache: %s (at most %g GB, entries of %d tokens)",
                       state->prefix_cache->dir, set->kv_cache_gb, KVCACHE_BLOCK);
    }
    return opt;
}

/* The end of a run that loaded a model: its statistics, then everything is released. */
static void engine_stop(const Settings *set, Model *model, RunState *state) {
    if (set->profile) print_profile(state, &model->experts);
    if (set->stats_path[0]) write_route_stats(&model->experts, set->stats_path);
    const KvCache *kv = state->prefix_cache;
    if (kv && (kv->restored || kv->stored || kv->rejected))
        say_detail("prefix cache: %lld tokens restored, %lld entries written, %lld refused",
                   kv->restored, kv->stored, kv->rejected);
    free(state->prefix_cache);
    state->prefix_cache = NULL;
    run_state_free(state);
    model_free(model);
}

/* A sampling seed from the clock and the pid, for runs without SEED (printed, so a run can be
   repeated). */
static uint64_t clock_seed(void) {
    uint64_t mix = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() ^
                   (uint64_t)(now_seconds() * 1e9);
    return (splitmix64_next(&mix) >> 11) | 1;
}

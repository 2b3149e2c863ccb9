/* cli.c — the command line: --help, --version, the positional arguments, the choice of mode.

   main() calls cli_settings(argc, argv) first. It reads argv (an option it does not know, or a
   bad positional argument, ends the run), warns about environment variables that look like
   misspelt settings, takes every setting from the environment (glm.c's settings_from_env), and
   chooses the run's mode from the settings that name one, refusing any that contradict each
   other. read_stdin_prompt then reads the prompt of a PROMPT=- or piped-in run. The engine calls
   nothing here. */

extern char **environ;

/* --help: the modes, the positional arguments, then every setting (settings.h's table). */
static void print_help(void) {
    printf(
        "usage: [VAR=value ...] ./glm [cache_slots] [expert_bits] [dense_bits]    (or --help, "
        "--version)\n\n"
        "modes:\n"
        "  PROMPT=\"text\" ./glm   one answer, streamed to stdout (CHAT_TEMPLATE=0: raw text, no "
        "template)\n"
        "  echo text | ./glm     the same with the prompt from stdin (no mode set, stdin not a "
        "terminal; or PROMPT=-)\n"
        "  CHAT=1 ./glm          terminal chat (the default when stdin is a terminal); :help lists "
        "its commands\n"
        "  SESSION=file          with PROMPT or CHAT: continue the conversation the file holds; "
        "saved after every answer\n"
        "                        (with SERVE: the server's KV cache, back at start and saved after "
        "every answer)\n"
        "  TOKENIZE=file ./glm   token ids of each JSON-string line of file (only tokenizer.json "
        "is read)\n"
        "  REF=file ./glm        validation against an oracle reference: greedy, TF=1 [MTP=1] or "
        "REPLAY=1\n"
        "                        (the oracle is f32: `./glm 64 16 16` must match it exactly; int4 "
        "drifts;\n"
        "                        exit 3: the predictions differ)\n"
        "  SERVE=8080 ./glm      HTTP APIs (OpenAI, Anthropic, Ollama) on 127.0.0.1:8080 (OpenAI "
        "base URL http://127.0.0.1:8080/v1)\n"
        "  PPL=file ./glm        perplexity of a text file (KLD=file: against a LOGITS_SAVE run; "
        "docs/quality.md)\n"
        "  SCORE=file ./glm      multiple-choice accuracy from a JSONL file (HellaSwag, ARC, "
        "MMLU)\n"
        "  PLAN=1 ./glm          RAM plan, disk and projected speed from the headers alone "
        "(PLAN=json for scripts)\n"
        "  DOCTOR=1 ./glm        is this machine ready for SNAP? one line per finding, exit "
        "0/1/2\n\n"
        "  cache_slots   routed-expert cache slots per layer (default: as many as RAM_GB allows)\n"
        "  expert_bits   load-time precision of routed experts: 16 (f32), 8, 4 or 2 (default 4)\n"
        "  dense_bits    load-time precision of every other matrix (default 4)\n"
        "  Pre-quantized tensors (NAME + NAME.qs) are used as they are.\n\n"
        "  Sampling temperature: TEMPERATURE=0.7 (0: greedy). TEMP is accepted too when it is a "
        "number;\n"
        "  a TEMP that is not one (TEMP=/tmp, the temp directory) is ignored.\n\n"
        "environment variables (booleans take 1/0, yes/no, true/false or on/off):\n");
    settings_print_table(&GLM_SETTINGS, stdout);
    printf("\nOpenMP: unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set, glm re-executes itself once "
           "with\n"
           "OMP_WAIT_POLICY=passive (spinning workers starve the expert I/O thread); either one "
           "set keeps\n"
           "libgomp's own waiting.\n");
}

#ifndef GLM_COMMIT
#define GLM_COMMIT "unknown"   /* the Makefile passes the git commit */
#endif
#define GLM_VERSION "0.2"

/* --version: what was built, and which integer kernels this CPU can run. */
static void print_version(void) {
    printf("glm.c %s (commit %s)\nkernels this CPU runs:", GLM_VERSION, GLM_COMMIT);
    static const QtKernel kernels[] = { QT_KERNEL_VNNI,  QT_KERNEL_AVXVNNI, QT_KERNEL_AVX2,
                                        QT_KERNEL_I8MM,  QT_KERNEL_DOTPROD, QT_KERNEL_NEON,
                                        QT_KERNEL_SCALAR };
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++)
        if (qt_kernel_supported(kernels[i])) printf(" %s", qt_kernel_name(kernels[i]));
    printf(" (KERNEL=auto picks %s)\n", qt_kernel_name(qt_get_kernel()));
}

static int parse_bits(const char *arg, const char *what) {
    char *end;
    long v = strtol(arg, &end, 10);
    if (*end || (v != 16 && v != 8 && v != 4 && v != 2))
        die("%s '%s' must be 16, 8, 4 or 2", what, arg);
    return (int)v;
}

/* SNAP must name a folder: 0, or -1 with `why` saying what it is instead (before any mode looks
   for a file in it and blames the file). */
static int model_dir_check(const char *dir, char *why, size_t n) {
    static const char what[] = "SNAP is the model's folder, with config.json, *.safetensors and "
                               "tokenizer.json";
    struct stat sb;
    const int err = stat(dir, &sb) ? errno : 0;
    if (err == ENOENT) snprintf(why, n, "SNAP=%s: no such folder (%s)", dir, what);
    else if (err == ENOTDIR || (!err && !S_ISDIR(sb.st_mode)))
        snprintf(why, n, "SNAP=%s is not a folder (%s)", dir, what);
    else if (err) snprintf(why, n, "SNAP=%s: %s", dir, strerror(err));
    else return 0;
    return -1;
}

/* TEMPERATURE, or TEMP when it is a number. Many systems export TEMP as the temp directory
   (TEMP=/tmp), so a TEMP that is not a number is that variable and is left alone. */
static double temperature_from_env(void) {
    const char *temp = getenv("TEMP");
    if (getenv("TEMPERATURE")) {
        if (temp && settings_is_number(temp) && strcmp(temp, getenv("TEMPERATURE")))
            say("note: TEMP=%s is ignored: TEMPERATURE=%s is set", temp, getenv("TEMPERATURE"));
        return setting_number("TEMPERATURE");
    }
    if (temp && settings_is_number(temp))
        return setting_number_of(setting_spec("TEMPERATURE"), "TEMP", temp);
    if (temp)
        say("note: TEMP=%s is not a number, so it is taken as the temp-directory variable and "
            "ignored; set TEMPERATURE",
            temp);
    return setting_number("TEMPERATURE");
}

static void warn_near_miss(const char *name, const char *hint) {
    say("warning: environment variable %s is not a setting; did you mean %s?", name, hint);
}

/* The mode the settings name, checked against every other setting that names one, and what
   depends on it: the prompt from stdin, SCHEMA/GRAMMAR and SESSION's modes, the temperature. */
static void choose_mode(Settings *s) {
    /* PLAN and DOCTOR describe a run instead of doing one: the other modes' settings are theirs to
       read */
    if (s->doctor && s->plan) die("PLAN and DOCTOR are different modes: set one");
    if (s->doctor) { s->mode = MODE_DOCTOR; return; }
    if (!s->model_dir[0]) die("SNAP is not set: point it at a model directory (see --help)");
    char why[4400];
    if (model_dir_check(s->model_dir, why, sizeof why)) die("%s", why);
    if (s->plan) { s->mode = MODE_PLAN; return; }
    if (s->mtp && !s->teacher_forcing)
        die("MTP=1 needs TF=1 (the MTP head is validated in teacher forcing)");

    /* Which mode: the settings that name one must not contradict each other. */
    const int has_ref = s->ref_path[0] != 0, has_tokenize = s->tokenize_path[0] != 0,
              has_messages = s->messages_path[0] != 0;
    if ((s->teacher_forcing || s->replay) && !has_ref)
        die("%s=1 needs REF, an oracle reference JSON (see --help)",
            s->teacher_forcing ? "TF" : "REPLAY");
    if (s->ppl_path[0] || s->score_path[0]) {   /* quality.c checks the rest of its settings */
        if (s->serve[0] || has_ref || has_tokenize || s->prompt_given || s->chat == 1 ||
            s->template_only || has_messages)
            die("%s=%s is a mode of its own: unset SERVE, REF, TOKENIZE, PROMPT, CHAT, "
                "TEMPLATE_ONLY and MESSAGES",
                s->ppl_path[0] ? "PPL" : "SCORE", s->ppl_path[0] ? s->ppl_path : s->score_path);
        s->mode = MODE_QUALITY;
    } else if (s->ppl_json[0] || s->logits_save[0] || s->kld_path[0] || s->score_json[0]) {
        die("%s is set without its mode: set %s=file",
            s->score_json[0]    ? "SCORE_JSON"
            : s->ppl_json[0]    ? "PPL_JSON"
            : s->logits_save[0] ? "LOGITS_SAVE"
                                : "KLD",
            s->score_json[0] ? "SCORE" : "PPL");
    } else if (s->serve[0]) {
        if (has_ref || has_tokenize || s->prompt_given || s->chat == 1 || s->template_only ||
            has_messages || s->system_prompt[0])
            die("SERVE=%s is a mode of its own (conversations come from the requests): unset "
                "PROMPT, CHAT, REF, TOKENIZE, "
                "TEMPLATE_ONLY, MESSAGES and SYSTEM",
                s->serve);
        if (!s->chat_template)
            die("SERVE and CHAT_TEMPLATE=0: /v1/chat/completions always applies the template, "
                "/v1/completions takes raw text; unset CHAT_TEMPLATE");
        HttpAddr addr;
        char err[256];
        if (http_addr_parse(s->serve, &addr, err, sizeof err)) die("SERVE=%s: %s", s->serve, err);
        if (!addr.loopback && !s->api_key[0])
            die("SERVE=%s can be reached from other machines: set API_KEY (clients send it as "
                "Authorization: Bearer KEY), "
                "or serve on 127.0.0.1",
                s->serve);
        s->mode = MODE_SERVE;
    } else if (has_tokenize) {
        if (has_ref || s->prompt_given || s->chat == 1 || s->template_only)
            die("TOKENIZE=%s is a mode of its own: unset REF, PROMPT, CHAT and TEMPLATE_ONLY",
                s->tokenize_path);
        s->mode = MODE_TOKENIZE;
    } else if (has_ref) {
        if (s->prompt_given || s->chat == 1 || has_messages || s->template_only)
            die("REF=%s selects validation against an oracle: unset PROMPT, CHAT, MESSAGES and "
                "TEMPLATE_ONLY",
                s->ref_path);
        s->mode = MODE_VALIDATE;
    } else if (s->template_only) {
        if (!s->prompt_given && !has_messages)
            die("TEMPLATE_ONLY=1 needs PROMPT or MESSAGES to render");
        s->mode = MODE_TEMPLATE;
    } else if (s->chat == 1 || (s->chat == -1 && !s->prompt_given && isatty(0))) {
        if (s->prompt_given) die("PROMPT and CHAT=1 are different modes: set one");
        s->mode = MODE_CHAT;
    } else if (s->prompt_given || has_messages) {
        s->mode = MODE_PROMPT;
    } else if (!isatty(0)) {   /* echo "question" | ./glm */
        s->mode = MODE_PROMPT;
        s->prompt_given = s->prompt_from_stdin = 1;
    } else {
        die("nothing to do: set PROMPT=\"...\", CHAT=1, TOKENIZE=file or REF=file (see --help)");
    }
    if (s->prompt_given && !strcmp(s->prompt, "-")) s->prompt_from_stdin = 1;
    if (s->schema_path[0] && s->grammar_path[0])
        die("SCHEMA=%s and GRAMMAR=%s: set one", s->schema_path, s->grammar_path);
    if ((s->schema_path[0] || s->grammar_path[0]) && s->mode != MODE_PROMPT)
        die("%s constrains PROMPT's answer; SERVE takes a schema per request (response_format)",
            s->schema_path[0] ? "SCHEMA" : "GRAMMAR");
    if (s->session_path[0] && s->mode != MODE_PROMPT && s->mode != MODE_CHAT &&
        s->mode != MODE_SERVE)
        die("SESSION=%s holds a conversation: it works with PROMPT, CHAT and SERVE, not with %s",
            s->session_path,
            s->mode == MODE_TOKENIZE   ? "TOKENIZE"
            : s->mode == MODE_TEMPLATE ? "TEMPLATE_ONLY"
            : s->mode == MODE_QUALITY  ? "PPL or SCORE"
                                       : "REF");
    /* only the modes that sample read the temperature (and may note an unrelated TEMP); REF decodes
       greedily unless TEMPERATURE (or a numeric TEMP) is given */
    const int temperature_given =
        getenv("TEMPERATURE") || (getenv("TEMP") && settings_is_number(getenv("TEMP")));
    s->temperature = s->mode == MODE_PROMPT || s->mode == MODE_CHAT || s->mode == MODE_SERVE ||
                             (s->mode == MODE_VALIDATE && temperature_given)
                         ? (float)temperature_from_env()
                         : 0.0f;
    if (!s->chat_template && (has_messages || s->system_prompt[0]))
        die("%s needs the chat template: unset CHAT_TEMPLATE=0",
            has_messages ? "MESSAGES" : "SYSTEM");
}

/* Settings for this run: argv and the environment, the mode chosen. */
static Settings cli_settings(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { print_help(); exit(0); }
        if (!strcmp(argv[i], "--version")) { print_version(); exit(0); }
        if (argv[i][0] == '-') die("unknown option %s (see --help)", argv[i]);
    }
    if (argc - 1 > 3)
        die("too many arguments: %d given, at most 3 (cache_slots expert_bits dense_bits)",
            argc - 1);
    int cache_slots = 0, expert_bits = 0, dense_bits = 0;   /* 0: not given */
    if (argc > 1) {
        char *end;
        long v = strtol(argv[1], &end, 10);
        if (*end || v < 1 || v > 65536)
            die("cache_slots '%s' must be a whole number in [1, 65536]", argv[1]);
        cache_slots = (int)v;
    }
    if (argc > 2) expert_bits = parse_bits(argv[2], "expert_bits");
    if (argc > 3) dense_bits = parse_bits(argv[3], "dense_bits");
    settings_near_misses(&GLM_SETTINGS, environ, warn_near_miss);
    Settings s = settings_from_env();
    if (cache_slots) {
        s.cache_slots = cache_slots;
        s.cache_slots_given = 1;
    }
    if (expert_bits) s.expert_bits = expert_bits;
    if (dense_bits) s.dense_bits = dense_bits;
    choose_mode(&s);
    return s;
}

/* The prompt from stdin (PROMPT=-, or piped in with no mode set), read whole, at most 16 MB.
   Trailing newlines are dropped, so `echo hi | ./glm` asks what PROMPT=hi asks. */
#define STDIN_PROMPT_MAX (16u << 20)

static void read_stdin_prompt(Settings *s) {
    size_t cap = 1 << 16, n = 0;
    char *buf = xmalloc(cap + 1);
    for (;;) {
        if (n == cap) {
            if (cap >= STDIN_PROMPT_MAX) {
                free(buf);
                die("the prompt on stdin is longer than %u MB (the limit)", STDIN_PROMPT_MAX >> 20);
            }
            cap *= 2;
            char *grown = realloc(buf, cap + 1);
            if (!grown) die("out of memory reading the prompt from stdin");
            buf = grown;
        }
        ssize_t k = read(STDIN_FILENO, buf + n, cap - n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) die("reading the prompt from stdin: %s", strerror(errno));
        if (k == 0) break;
        n += (size_t)k;
    }
    if (memchr(buf, 0, n))
        die("the prompt on stdin contains a NUL byte at offset %zu",
            (size_t)((char *)memchr(buf, 0, n) - buf));
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) n--;
    buf[n] = 0;
    if (!n) {
        const int explicit_dash = getenv("PROMPT") != NULL;
        free(buf);
        if (explicit_dash) die("PROMPT=-: stdin is empty");
        die("nothing to do: set PROMPT=\"...\", CHAT=1, TOKENIZE=file or REF=file, or pipe a "
            "prompt in (see --help); "
            "stdin is not a terminal and was empty");
    }
    s->prompt = s->stdin_prompt = buf;
}

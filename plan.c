/* =============================================================================================
   plan.c — PLAN and DOCTOR, the front ends that answer "will it run here, and how fast?"
   PLAN=1 reads only the model's headers and prints the RAM plan with a speed projection from the
   machine's measured rates; DOCTOR=1 checks the machine and the model folder, measures the disk
   and the kernels, and keeps the rates in CACHE_DIR/glm/doctor.json for PLAN to use.
   ============================================================================================= */

/* The rates DOCTOR measured, as kept in CACHE_DIR/glm/doctor.json. */
typedef struct {
    double disk_gbps;          /* random 19 MiB reads of the model's files (0: not measured) */
    double decode_gbps;        /* GB/s of int4 weights through qt_matmul at 1 token */
    double prefill_gbps;       /* the same at 64 tokens, counting each weight byte once per token */
    int threads;
    char cpu[128], kernel[16], disk_mode[16], disk_dir[1024], when[32];
} MachineRates;

static void cpu_model_name(char *buf, size_t n) {
    snprintf(buf, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        const char *colon = strchr(line, ':');
        if (!colon) continue;
        colon += 1 + (colon[1] == ' ');
        snprintf(buf, n, "%.*s", (int)strcspn(colon, "\n"), colon);
        break;
    }
    /* ARM: no "model name", but an implementer and a part number */
    if (!strcmp(buf, "unknown CPU")) {
        unsigned implementer = 0, part = 0;
        rewind(f);
        while (fgets(line, sizeof line, f)) {
            if (!strncmp(line, "CPU implementer", 15))
                sscanf(strchr(line, ':') ? strchr(line, ':') + 1 : "", "%x", &implementer);
            if (!strncmp(line, "CPU part", 8))
                sscanf(strchr(line, ':') ? strchr(line, ':') + 1 : "", "%x", &part);
            if (implementer && part) break;
        }
        if (implementer)
            snprintf(buf, n, "ARM CPU (implementer 0x%02x, part 0x%03x)", implementer, part);
    }
    fclose(f);
}

static void machine_rates_path(const Settings *set, char *path, size_t n) {
    if (set->cache_dir[0]) snprintf(path, n, "%s/glm/doctor.json", set->cache_dir);
    else path[0] = 0;
}

/* Saves the rates atomically (they are a cache: a failure is a note, not an error). */
static void machine_rates_save(const Settings *set, const MachineRates *r) {
    char path[4200], err[8800];
    machine_rates_path(set, path, sizeof path);
    if (!path[0]) return;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/glm", set->cache_dir);
    mkdir(set->cache_dir, 0700);
    mkdir(dir, 0700);
    AtomicFile af;
    FILE *f = atomic_begin(&af, path, err, sizeof err);
    if (f) {
        fprintf(f, "{\"version\": 1, \"cpu\": ");
        print_json_string(f, r->cpu, strlen(r->cpu));
        fprintf(f,
                ", \"kernel\": \"%s\", \"threads\": %d, \"decode_gbps\": %.4g, \"prefill_gbps\": "
                "%.4g, \"disk_gbps\": %.4g, "
                "\"disk_mode\": \"%s\", \"when\": \"%s\", \"disk_dir\": ",
                r->kernel, r->threads, r->decode_gbps, r->prefill_gbps, r->disk_gbps, r->disk_mode,
                r->when);
        print_json_string(f, r->disk_dir, strlen(r->disk_dir));
        fprintf(f, "}\n");
    }
    if (!f || atomic_commit(&af, err, sizeof err)) say("note: DOCTOR's rates not saved: %s", err);
}

/* Reads DOCTOR's rates; 0 (with a reason) when there are none for this CPU. */
static int machine_rates_load(const Settings *set, MachineRates *r, char *why, size_t why_len) {
    char path[4200], err[512];
    machine_rates_path(set, path, sizeof path);
    memset(r, 0, sizeof *r);
    struct stat sb;
    if (!path[0] || stat(path, &sb)) { snprintf(why, why_len, "no rates measured yet"); return 0; }
    if (!S_ISREG(sb.st_mode) || sb.st_size > 65536) {
        snprintf(why, why_len, "%s is not a rates file", path);
        return 0;
    }
    size_t len;
    char *text = json_read_file(path, &len, err, sizeof err);
    JsonDoc *doc = text ? json_parse(text, len, err, sizeof err) : NULL;
    const JsonValue *root = doc ? json_root(doc) : NULL;
    int ok = 0;
    char cpu[128];
    cpu_model_name(cpu, sizeof cpu);
    if (!root || json_type(root) != JSON_OBJECT || json_num(json_get(root, "version")) != 1)
        snprintf(why, why_len, "%s is unreadable", path);
    else if (!json_str(json_get(root, "cpu"), NULL) ||
             strcmp(json_str(json_get(root, "cpu"), NULL), cpu))
        snprintf(why, why_len, "the rates in %s were measured on another CPU", path);
    else {
        r->decode_gbps = json_num(json_get(root, "decode_gbps"));
        r->prefill_gbps = json_num(json_get(root, "prefill_gbps"));
        r->disk_gbps = json_num(json_get(root, "disk_gbps"));
        r->threads = (int)json_num(json_get(root, "threads"));
        const char *k = json_str(json_get(root, "kernel"), NULL),
                   *m = json_str(json_get(root, "disk_mode"), NULL);
        const char *w = json_str(json_get(root, "when"), NULL),
                   *d = json_str(json_get(root, "disk_dir"), NULL);
        snprintf(r->cpu, sizeof r->cpu, "%s", cpu);
        snprintf(r->kernel, sizeof r->kernel, "%s", k ? k : "?");
        snprintf(r->disk_mode, sizeof r->disk_mode, "%s", m ? m : "?");
        snprintf(r->when, sizeof r->when, "%s", w ? w : "?");
        snprintf(r->disk_dir, sizeof r->disk_dir, "%s", d ? d : "?");
        ok = r->decode_gbps > 0 && r->prefill_gbps > 0 && r->disk_gbps > 0 &&
             isfinite(r->decode_gbps) && isfinite(r->prefill_gbps) && isfinite(r->disk_gbps);
        if (!ok)
            snprintf(why, why_len, "%s has no disk rate (DOCTOR had no model files to read)", path);
    }
    json_free(doc);
    free(text);
    return ok;
}

/* Kernel rates: GB/s of int4 weights through the matmul this run would use, at 1 token (decode:
   memory-bound, so the matrix is larger than any cache) and at 64 tokens (prefill), ~0.3 s. */
static void measure_kernel_rates(MachineRates *r, int idot) {
    QTensor w;
    const int64_t rows = 8192, cols = 8192;   /* 32 MB of int4 */
    if (qt_alloc(&w, QT_INT4_ROW, 0, rows, cols)) die("out of memory for the kernel probe");
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (int64_t i = 0; i < rows * w.row_bytes; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        w.data[i] = (uint8_t)(seed >> 56);
    }
    for (int64_t i = 0; i < rows; i++) w.scales[i] = 1e-3f;
    const int S = 64;
    float *x = xmalloc((size_t)S * cols * sizeof(float)),
          *y = xmalloc((size_t)S * rows * sizeof(float));
    for (int64_t i = 0; i < S * cols; i++) x[i] = (float)((i * 7919) % 2001 - 1000) * 1e-3f;
    const double bytes = (double)rows * w.row_bytes;
    for (int pass = 0; pass < 2; pass++) {
        const int s = pass ? S : 1;
        qt_matmul(&w, x, y, s, idot);   /* warm-up */
        int reps = 0;
        double t0 = now_seconds(), dt;
        do { qt_matmul(&w, x, y, s, idot); reps++; dt = now_seconds() - t0; } while (dt < 0.15);
        *(pass ? &r->prefill_gbps : &r->decode_gbps) = bytes * s * reps / dt / 1e9;
    }
    free(x); free(y); qt_free(&w);
    snprintf(r->kernel, sizeof r->kernel, "%s", qt_kernel_name(qt_get_kernel()));
    r->threads = max_threads();
}

/* The *.safetensors of dir with their sizes; returns how many (at most `max`). */
static int list_shards(const char *dir, char paths[][4200], off_t *sizes, int max) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < max) {
        size_t len = strlen(de->d_name);
        if (len < 12 || strcmp(de->d_name + len - 12, ".safetensors")) continue;
        snprintf(paths[n], 4200, "%s/%s", dir, de->d_name);
        struct stat sb;
        if (stat(paths[n], &sb) || !S_ISREG(sb.st_mode)) continue;
        sizes[n++] = sb.st_size;
    }
    closedir(d);
    return n;
}

/* A short random read probe of the model's files, as experts are read: 19 MiB at a time, O_DIRECT
   into a 2 MiB-page buffer (buffered pread after evicting the range where O_DIRECT fails), at
   most 24 reads or ~1.5 s. Returns GB/s, 0 when the files are too small to probe. */
static double disk_probe(const char *dir, int *reads_out, double *seconds_out,
                         const char **mode_out) {
    enum { MAX_SHARDS = 64 };
    static char paths[MAX_SHARDS][4200];
    off_t sizes[MAX_SHARDS];
    const size_t chunk = (size_t)19 << 20;
    int n = list_shards(dir, paths, sizes, MAX_SHARDS), usable = 0;
    for (int i = 0; i < n; i++) usable += sizes[i] >= (off_t)(2 * chunk);
    *reads_out = 0; *seconds_out = 0; *mode_out = "direct";
    if (!usable) return 0;
    const size_t huge = huge_page_bytes();
    uint8_t *map =
        mmap(NULL, chunk + 2 * huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) return 0;
    uint8_t *buf = (uint8_t *)(((uintptr_t)map + huge - 1) & ~(uintptr_t)(huge - 1));
    madvise(buf, chunk + huge, MADV_HUGEPAGE);
    memset(buf, 1, chunk + huge);   /* fault it in before the clock starts */
    uint64_t seed = (uint64_t)now_seconds() * 0x9E3779B97F4A7C15ull | 1;
    double bytes = 0, t0 = now_seconds();
    int reads = 0;
    while (reads < 24 && now_seconds() - t0 < 1.5) {
        seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;
        int f = (int)(seed % (uint64_t)n);
        if (sizes[f] < (off_t)(2 * chunk)) continue;
        off_t off = (off_t)((seed >> 20) % (uint64_t)(sizes[f] - (off_t)chunk)) / DIRECT_ALIGN *
                    DIRECT_ALIGN;
        int fd = open(paths[f], O_RDONLY | O_DIRECT | O_CLOEXEC);
        if (fd < 0) {
            fd = open(paths[f], O_RDONLY | O_CLOEXEC);
            if (fd < 0) break;
            posix_fadvise(fd, off, (off_t)chunk, POSIX_FADV_DONTNEED);
            *mode_out = "buffered";
        }
        size_t got = 0;
        int rc = pread_all(fd, buf, chunk, (uint64_t)off, &got);
        close(fd);
        if (rc || got != chunk) break;
        bytes += (double)chunk;
        reads++;
    }
    *seconds_out = now_seconds() - t0;
    *reads_out = reads;
    munmap(map, chunk + 2 * huge);
    return reads ? bytes / *seconds_out / 1e9 : 0;
}

/* A projection, not a measurement: speeds from DOCTOR's rates and the plan's shapes. Decode: per
   token, every MoE layer reads its top-k experts that miss the cache (hit rate taken as slots /
   experts, i.e. uniform routing, a floor: real routing is skewed) from disk, then the kernels
   stream the dense weights (not the embedding) and the k experts; disk and compute are added
   (no overlap assumed). Prefill: a BATCH-token chunk reads each distinct expert it needs once
   and computes at the 64-token kernel rate. Attention is left out (it grows with the context). */
typedef struct {
    double decode_tok_s, prefill_tok_s, hit, decode_disk_gb, decode_weights_gb;
} Projection;

static Projection project_speed(Model *m, Loader *ld, const Settings *set, const RamPlan *p,
                                const MachineRates *r) {
    const Config *c = &m->c;
    const ExpertStore *store = &m->experts;
    Projection pr;
    memset(&pr, 0, sizeof pr);
    int moe_main = 0;   /* decode runs the main layers; the MTP layer only drafts */
    for (int l = 0; l < c->n_layers; l++) moe_main += !c->layer_dense[l];
    double disk_per_expert = 0, ram_per_expert = 0;
    long long n = 0;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_dense[l]) continue;
        for (int e = 0; e < c->n_experts; e++, n++) {
            const ExpertSource *src = &store->sources[(size_t)l * c->n_experts + e];
            for (int k = 0; k < 3; k++) {
                const double on_disk =
                    (double)src->rows[k] * src->cols[k] * st_dtype_size(src->data[k]->dtype);
                disk_per_expert += src->scales[k]
                                       ? (double)src->data[k]->nbytes + src->scales[k]->nbytes
                                       : on_disk;
                ram_per_expert +=
                    src->scales[k]
                        ? (double)src->data[k]->nbytes + src->scales[k]->nbytes
                        : (double)src->rows[k] * qt_row_bytes(src->format[k], src->cols[k]);
            }
        }
    }
    if (n) { disk_per_expert /= (double)n; ram_per_expert /= (double)n; }
    /* dense bytes a token streams: all resident weights but the embedding (one row) and the MTP
       layer */
    Loader dry = *ld;
    dry.dry = 1;
    dry.resident_bytes = 0;
    QTensor unused;
    load_matrix(&dry, "model.embed_tokens.weight", c->vocab, c->hidden, set->dense_bits, &unused);
    for (int l = c->n_layers; l < c->n_layers + c->n_mtp; l++) load_layer(&dry, m, l, set);
    const double dense_per_token = p->dense - dry.resident_bytes;
    /* stamps the copy read itself */
    if (dry.format_stamps != ld->format_stamps) loader_free(&dry);
    const int k = c->experts_per_tok, E = c->n_experts;
    pr.hit = p->slots >= E ? 1.0 : (double)p->slots / E;
    const double routed = (double)moe_main * k * ram_per_expert;
    pr.decode_disk_gb = moe_main * k * (1 - pr.hit) * disk_per_expert / 1e9;
    pr.decode_weights_gb = (dense_per_token + routed) / 1e9;
    pr.decode_tok_s =
        1.0 / (pr.decode_disk_gb / r->disk_gbps + pr.decode_weights_gb / r->decode_gbps);
    const int B = set->batch;
    /* experts a B-token chunk touches, per layer */
    const double distinct = E * (1.0 - pow(1.0 - (double)k / E, B));
    const double chunk_disk = moe_main * distinct * (1 - pr.hit) * disk_per_expert / 1e9;
    const double chunk_compute = (double)B * pr.decode_weights_gb / r->prefill_gbps;
    pr.prefill_tok_s = B / (chunk_disk / r->disk_gbps + chunk_compute);
    return pr;
}

static int plan_end(Model *m, Loader *ld, int fits) {
    loader_free(ld);
    model_free(m);
    return fits ? 0 : 2;
}

/* The context the run these settings describe would size, through the functions the run uses:
   REF's (validation_context); the server's; or a PROMPT or chat run's: the tokens of a saved
   SESSION and of the prompt (rendered and tokenized as the run does, when SNAP has tokenizer.json;
   without it the prompt is left out, and said so), NGEN + 1 when NGEN bounds a PROMPT answer. */
static int plan_context(const Settings *set, const Config *c) {
    if (set->ref_path[0]) {
        Reference ref = reference_load(set->ref_path);
        const int capacity = validation_context(set, &ref);
        reference_free(&ref);
        return capacity;
    }
    if (set->ctx || set->serve[0]) return run_context(set, c, 0, 1);
    int held = 0;
    if (set->session_path[0] && access(set->session_path, F_OK) == 0) {
        char err[512];
        held = session_file_tokens(set->session_path, err, sizeof err);
        if (held < 0) die("SESSION=%s %s", set->session_path, err);
    }
    const int prompt_mode = set->prompt_given || set->messages_path[0];
    char tokenizer[4200];
    snprintf(tokenizer, sizeof tokenizer, "%s/tokenizer.json", set->model_dir);
    const int from_stdin = !strcmp(set->prompt, "-");
    if (prompt_mode && (from_stdin || access(tokenizer, R_OK)))
        say("note: the plan's context leaves out the prompt's tokens (%s)", from_stdin
            ? "PROMPT=-: PLAN does not read stdin" : "no tokenizer.json in SNAP to count them");
    else if (prompt_mode) {
        TextCodec tc = codec_load(set->model_dir, set->special);
        ChatOptions chat = { 0 };
        if (set->chat_template) chat = chat_options_from_settings(set);
        TokenList prompt = { 0 };
        build_prompt(set, &tc, &chat, &prompt);
        held += prompt.n;
        free(prompt.ids);
        codec_free(&tc);
    }
    const int bounded = prompt_mode && set->ngen >= 0;   /* as in run_text */
    return run_context(set, c, held + (bounded ? set->ngen + 1 : 0), !bounded);
}

/* The model's headers opened and its RAM planned for the context a run with these settings would
   have (PLAN and DOCTOR account exactly as the run does). Returns that context. */
static int plan_open(const Settings *set, Model *m, Loader *ld) {
    model_open(m, set, ld);
    const int capacity = plan_context(set, &m->c);
    m->ram = ram_plan(m, ld, set, capacity);
    return capacity;
}

/* PLAN=1 / PLAN=json. Exit 0 when the model fits the budget, 2 when it does not. */
static int run_plan(const Settings *set) {
    Model m;
    Loader ld;
    const int capacity = plan_open(set, &m, &ld);
    const Config *c = &m.c;
    const RamPlan *p = &m.ram;
    /* the disk: each file up to the end of its last tensor (what a full download takes) */
    const int nfiles = st_file_count(m.index);
    double *file_end = xcalloc((size_t)nfiles, sizeof(double)), disk = 0;
    for (size_t i = 0; i < st_count(m.index); i++) {
        const StTensor *t = st_tensor_at(m.index, i);
        if ((double)(t->offset + t->nbytes) > file_end[t->file])
            file_end[t->file] = (double)(t->offset + t->nbytes);
    }
    for (int f = 0; f < nfiles; f++) disk += file_end[f];
    free(file_end);
    struct statvfs vfs;
    const double disk_free =
        statvfs(set->model_dir, &vfs) ? -1 : (double)vfs.f_bavail * vfs.f_frsize;
    MachineRates rates;
    char why[512] = "";
    const int have_rates = machine_rates_load(set, &rates, why, sizeof why);
    Projection pr;
    memset(&pr, 0, sizeof pr);
    if (have_rates && ram_plan_fits(p)) pr = project_speed(&m, &ld, set, p, &rates);
    const int fits = ram_plan_fits(p);
    if (set->plan_json) {
        printf("{\"model\": ");
        print_json_string(stdout, set->model_dir, strlen(set->model_dir));
        printf(", \"layers\": %d, \"mtp_layers\": %d, \"moe_layers\": %d, \"experts\": %d, "
               "\"experts_per_token\": %d, "
               "\"prequantized\": %s, \"context\": %d, \"batch\": %d, \"fits\": %s, "
               "\"budget_from\": \"%s\", \"budget_bytes\": %.0f, "
               "\"dense_bytes\": %.0f, \"kv_scratch_bytes\": %.0f, \"overhead_bytes\": %.0f, "
               "\"reserve_bytes\": %.0f, "
               "\"expert_cache_bytes\": %.0f, \"unused_bytes\": %.0f, \"slots_per_layer\": %d, "
               "\"slot_bytes\": %.0f, "
               "\"disk_bytes\": %.0f, \"disk_free_bytes\": %.0f, \"projection\": ",
               c->n_layers, c->n_mtp, p->moe_layers, c->n_experts, c->experts_per_tok,
               m.experts.prequantized ? "true" : "false", capacity, set->batch,
               fits ? "true" : "false", p->from_ram_gb ? "RAM_GB" : "MemAvailable", p->budget,
               p->dense, p->run_state, p->overhead, p->reserve, p->cache, p->unused, p->slots,
               p->slot_bytes, disk, disk_free);
        if (pr.decode_tok_s > 0)
            printf("{\"decode_tok_s\": %.4g, \"prefill_tok_s\": %.4g, \"hit_rate\": %.4g, "
                   "\"disk_gbps\": %.4g, \"disk_mode\": \"%s\", "
                   "\"decode_kernel_gbps\": %.4g, \"prefill_kernel_gbps\": %.4g, \"kernel\": "
                   "\"%s\", \"threads\": %d, \"measured\": \"%s\"}}\n",
                   pr.decode_tok_s, pr.prefill_tok_s, pr.hit, rates.disk_gbps, rates.disk_mode,
                   rates.decode_gbps, rates.prefill_gbps, rates.kernel, rates.threads, rates.when);
        else {
            printf("null, \"projection_missing\": ");
            const char *reason = fits ? why : "the model does not fit the budget";
            print_json_string(stdout, reason, strlen(reason));
            printf("}\n");
        }
        return plan_end(&m, &ld, fits);
    }
    printf("glm: plan for %s: %d layers (+%d MTP), %d routed experts top-%d per MoE layer, %s "
           "experts; context %d tokens, "
           "BATCH %d\n",
           set->model_dir, c->n_layers, c->n_mtp, c->n_experts, c->experts_per_tok,
           m.experts.prequantized ? "pre-quantized" : "float", capacity, set->batch);
    ram_plan_print(stdout, p, set);
    printf("glm: disk: the model takes %.1f GB in %d files", disk / 1e9, nfiles);
    if (disk_free >= 0) printf("; %.1f GB free on that filesystem", disk_free / 1e9);
    printf("\n");
    if (pr.decode_tok_s > 0)
        printf("glm: projection (not a measurement): decode %.2f tok/s (%.2f GB from disk + %.2f "
               "GB through the kernels per token, "
               "hit rate %.1f%% if routing were uniform), prefill %.1f tok/s in %d-token chunks; "
               "from DOCTOR's rates of %s on this CPU "
               "(disk %.2f GB/s %s in %s, kernels %.1f GB/s at 1 token and %.1f GB/s at 64 tokens, "
               "%s, %d threads); attention is "
               "left out\n",
               pr.decode_tok_s, pr.decode_disk_gb, pr.decode_weights_gb, 100 * pr.hit,
               pr.prefill_tok_s, set->batch, rates.when, rates.disk_gbps, rates.disk_mode,
               rates.disk_dir, rates.decode_gbps, rates.prefill_gbps, rates.kernel, rates.threads);
    else if (fits)
        printf("glm: projection: none (%s): run DOCTOR=1 SNAP=<a model folder on the disk that "
               "will hold the model> once; "
               "it measures the disk and kernel rates PLAN projects from\n",
               why);
    return plan_end(&m, &ld, fits);
}

/* One DOCTOR finding: "DOCTOR ok|warn|FAIL topic: what was found; what to do". */
static void doctor_say(int *worst, int level, const char *topic, const char *fmt, ...) {
    static const char *const LEVEL[] = { "ok  ", "warn", "FAIL" };
    if (level > *worst) *worst = level;
    printf("DOCTOR %s %s: ", LEVEL[level], topic);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

/* The model's checks in a child process, so that a model glm cannot open (which dies with a named
   error) becomes one FAIL line instead of ending DOCTOR. Returns the worst level. */
static int doctor_model(const Settings *set) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        Model m;
        Loader ld;
        const int capacity = plan_open(set, &m, &ld);
        const Config *c = &m.c;
        const RamPlan *p = &m.ram;
        int worst = 0;
        doctor_say(&worst, 0, "model", "%s: %d layers (+%d MTP), %d experts top-%d; experts %s",
                   set->model_dir, c->n_layers, c->n_mtp, c->n_experts, c->experts_per_tok,
                   m.experts.prequantized
                       ? "pre-quantized"
                       : "float (quantized "
                         "on every read: convert the model with tools/convert_fp8_to_int4.py)");
        const double total = proc_kb_field("/proc/meminfo", "MemTotal");
        if (ram_plan_fits(p))
            doctor_say(&worst, 0, "RAM",
                       "%.1f GB total, %.1f GB available; a %d-token context leaves %d of %d "
                       "experts per layer "
                       "in a %.1f GB cache (%s %.1f GB)",
                       total / 1e9, p->avail / 1e9, capacity, p->slots, c->n_experts,
                       p->cache / 1e9, p->from_ram_gb ? "RAM_GB" : "budget", p->budget / 1e9);
        else
            doctor_say(&worst, 2, "RAM",
                       "%.1f GB total, %.1f GB available: a budget of %.1f GB cannot hold the "
                       "dense weights "
                       "(%.1f GB), KV cache and scratch (%.1f GB) and one expert slot per layer; "
                       "free memory, or lower CTX/BATCH "
                       "or the dense bits (PLAN=1 shows the terms)",
                       total / 1e9, p->avail / 1e9, p->budget / 1e9, p->dense / 1e9,
                       p->run_state / 1e9);
        if (p->from_ram_gb && p->budget > total && total > 0)
            doctor_say(&worst, 1, "RAM",
                       "RAM_GB=%g is more than the machine has (%.1f GB): lower it", set->ram_gb,
                       total / 1e9);
        fflush(stdout);
        _exit(10 + worst);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0) {
        int worst = 0;
        doctor_say(&worst, 2, "model", "cannot check %s (fork failed)", set->model_dir);
        return 2;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) >= 10 && WEXITSTATUS(status) <= 12)
        return WEXITSTATUS(status) - 10;
    int worst = 0;
    doctor_say(&worst, 2, "model", "%s cannot be loaded (the error above says why)",
               set->model_dir);
    return 2;
}

/* DOCTOR=1: is this machine ready for SNAP? Exit 0 ready, 1 warnings, 2 cannot run. */
static int run_doctor(const Settings *set) {
    int worst = 0;
    char cpu[128];
    cpu_model_name(cpu, sizeof cpu);
    static const QtKernel kernels[] = { QT_KERNEL_VNNI, QT_KERNEL_AVXVNNI, QT_KERNEL_AVX2,
                                        QT_KERNEL_I8MM, QT_KERNEL_DOTPROD, QT_KERNEL_NEON };
    char have[128] = "";
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++)
        if (qt_kernel_supported(kernels[i]))
            snprintf(have + strlen(have), sizeof have - strlen(have), "%s, ",
                     qt_kernel_name(kernels[i]));
    const int simd = have[0] != 0;
#if defined(__aarch64__)
    const char *advice = "; without NEON every matmul runs the scalar kernel, several times slower";
#else
    const char *advice = "; without AVX2 every matmul runs the scalar kernel, several times "
                         "slower: use an AVX2 machine";
#endif
    doctor_say(&worst, simd ? 0 : 1, "CPU", "%s; integer kernels: %sscalar (glm uses %s)%s", cpu,
               have, qt_kernel_name(qt_get_kernel()), simd ? "" : advice);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    doctor_say(&worst, cores >= 2 ? 0 : 1, "cores", "%ld online%s", cores,
               cores >= 2 ? ""
                          : ": disk reads and compute cannot overlap on one core; use a machine "
                            "with two or more");
    char thp[256] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f) { if (!fgets(thp, sizeof thp, f)) thp[0] = 0; fclose(f); }
    const char *sel = strchr(thp, '['), *end = sel ? strchr(sel, ']') : NULL;
    char mode[32] = "unknown";
    if (sel && end && end - sel < 32)
        snprintf(mode, sizeof mode, "%.*s", (int)(end - sel - 1), sel + 1);
    if (!strcmp(mode, "always") || !strcmp(mode, "madvise"))
        doctor_say(&worst, 0, "huge pages",
                   "transparent huge pages \"%s\": expert slots get 2 MiB pages (O_DIRECT reads "
                   "~3x faster)",
                   mode);
    else
        doctor_say(&worst, 1, "huge pages",
                   "transparent huge pages \"%s\": O_DIRECT reads into 4 KiB pages are ~3x slower; "
                   "as root: echo madvise > /sys/kernel/mm/transparent_hugepage/enabled",
                   mode);
    MachineRates r;
    memset(&r, 0, sizeof r);
    snprintf(r.cpu, sizeof r.cpu, "%s", cpu);
    /* SNAP that is no folder: said once, and the checks that read it are skipped */
    char why[4400];
    const int have_dir = set->model_dir[0] && !model_dir_check(set->model_dir, why, sizeof why);
    if (set->model_dir[0] && !have_dir)
        doctor_say(&worst, 2, "model", "%s; the model, O_DIRECT and disk checks are skipped", why);
    /* the model's checks fork: before the kernel probe starts OpenMP's threads */
    const int model_level = have_dir ? doctor_model(set) : 0;
    if (model_level > worst) worst = model_level;
    measure_kernel_rates(&r, set->idot);
    doctor_say(&worst, 0, "kernels",
               "%.1f GB/s of int4 weights at 1 token (decode), %.1f GB/s at 64 tokens (prefill), "
               "%s, "
               "%d threads",
               r.decode_gbps, r.prefill_gbps, r.kernel, r.threads);
    if (!set->model_dir[0]) {
        doctor_say(&worst, 1, "model",
                   "SNAP is not set: the model, O_DIRECT and disk checks are skipped; run DOCTOR=1 "
                   "SNAP=<model folder>");
    } else if (have_dir) {
        static char paths[1][4200];
        off_t size;
        int n = list_shards(set->model_dir, paths, &size, 1);
        if (n) {
            int fd = open(paths[0], O_RDONLY | O_DIRECT | O_CLOEXEC);
            if (fd >= 0) {
                close(fd);
                doctor_say(&worst, 0, "O_DIRECT",
                           "works on %s: expert reads bypass the page cache (DIRECT=-1 uses it)",
                           set->model_dir);
            } else
                doctor_say(&worst, 1, "O_DIRECT",
                           "not available on %s (%s): experts are read with buffered pread, ~2.6x "
                           "slower "
                           "here and doubly cached; keep the model on a filesystem that supports "
                           "it (ext4, xfs; not tmpfs)",
                           set->model_dir, strerror(errno));
        }
        int reads;
        double seconds;
        const char *how;
        r.disk_gbps = disk_probe(set->model_dir, &reads, &seconds, &how);
        snprintf(r.disk_mode, sizeof r.disk_mode, "%s", how);
        if (!realpath(set->model_dir, r.disk_dir))
            snprintf(r.disk_dir, sizeof r.disk_dir, "%s", set->model_dir);
        if (reads)
            doctor_say(&worst, r.disk_gbps >= 1.0 ? 0 : 1, "disk",
                       "%.2f GB/s in %d random 19 MB %s reads of the model's files "
                       "(%.2f s)%s",
                       r.disk_gbps, reads, how, seconds,
                       r.disk_gbps >= 1.0 ? ""
                                          : ": decode is disk-bound, so expect it slow; an NVMe "
                                            "drive reads 3-7 GB/s");
        else
            doctor_say(&worst, 1, "disk",
                       "no read probe: the model's files are too small to read 19 MB from (a "
                       "header-only "
                       "copy?); run DOCTOR=1 on the full model to measure the disk");
        struct statvfs vfs;
        if (!statvfs(set->model_dir, &vfs)) {
            double free_bytes = (double)vfs.f_bavail * vfs.f_frsize;
            doctor_say(&worst, free_bytes >= 1e9 ? 0 : 1, "free disk",
                       "%.1f GB free where the model is%s", free_bytes / 1e9,
                       free_bytes >= 1e9
                           ? ""
                           : ": converting or downloading needs room for a shard plus the output");
        }
    }
    time_t now = time(NULL);
    strftime(r.when, sizeof r.when, "%Y-%m-%d %H:%M", localtime(&now));
    if (r.disk_gbps > 0) machine_rates_save(set, &r);
    printf("DOCTOR: %s (exit %d)\n",
           worst == 0   ? "ready"
           : worst == 1 ? "ready, with warnings"
                        : "cannot run",
           worst);
    return worst;
}

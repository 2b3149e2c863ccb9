/* tokdrive: command-line driver for tok.h, used by tests/t_tokenizer.sh.
 *
 *   tokdrive check TOKENIZER_JSON CORPUS_JSONL REF_JSONL LABEL
 *       For every mode (special, split_special, plain) compares tok_encode with the reference ids,
 *       tok_decode with the reference decode, and checks the streaming decoder (one id at a time:
 *       every chunk valid UTF-8, the chunks concatenate to the reference decode). Mode special
 *       also compares the decode of every single id with the reference. One PASS/FAIL line per
 *       (LABEL, mode, check); a failure names the corpus line and the first differing id.
 *   tokdrive encode TOKENIZER_JSON MODE      ids of stdin, one line
 *   tokdrive decode TOKENIZER_JSON ID...     decoded text to stdout
 *   tokdrive bench TOKENIZER_JSON TEXT_FILE  load time and encode time (not used by tests)
 */
#define _POSIX_C_SOURCE 199309L
#define JSON_IMPLEMENTATION
#include "json.h"
#define TOK_IMPLEMENTATION
#include "tok.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static Tokenizer *load_or_die(const char *path) {
    char err[512];
    Tokenizer *t = tok_load(path, err, sizeof err);
    if (!t) { fprintf(stderr, "tokdrive: %s\n", err); exit(1); }
    return t;
}

static int valid_utf8(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp; int st;
        i += tok_utf8_next((const unsigned char *)s + i, n - i, &cp, &st);
        if (st) return 0;
    }
    return 1;
}

/* Splits a file into lines (in place); returns the count. */
static size_t split_lines(char *text, char ***lines) {
    size_t n = 0, cap = 64;
    *lines = malloc(cap * sizeof **lines);
    for (char *p = text; *p;) {
        char *e = strchr(p, '\n');
        if (e) *e = 0;
        if (*p) {
            if (n == cap) *lines = realloc(*lines, (cap *= 2) * sizeof **lines);
            (*lines)[n++] = p;
        }
        if (!e) break;
        p = e + 1;
    }
    return n;
}

static void show_text(const char *s, size_t n) {
    fputc('"', stdout);
    for (size_t i = 0; i < n && i < 120; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c < 0x20) printf("\\x%02x", c);
        else fputc(c, stdout);
    }
    fputs(n > 120 ? "...\"" : "\"", stdout);
}

static int cmd_check(const char *tok_path, const char *corpus_path, const char *ref_path,
                     const char *label) {
    Tokenizer *t = load_or_die(tok_path);
    char err[512];
    size_t clen, rlen;
    char *corpus = json_read_file(corpus_path, &clen, err, sizeof err);
    char *ref = corpus ? json_read_file(ref_path, &rlen, err, sizeof err) : NULL;
    if (!corpus || !ref) { printf("FAIL %s: %s\n", label, err); return 1; }
    char **cl, **rl;
    size_t nc = split_lines(corpus, &cl), nr = split_lines(ref, &rl);
    if (nc != nr || nc == 0) {
        printf("FAIL %s: corpus has %zu lines, reference %zu (regenerate with make_ref.mjs)\n",
               label, nc, nr);
        return 1;
    }
    const char *modes[3] = { "special", "split_special", "plain" };
    TokSpecialMode tmodes[3] = { TOK_SPECIAL_ALL, TOK_SPECIAL_NONSPECIAL_ONLY, TOK_SPECIAL_NONE };
    int failed = 0;
    size_t cap = tok_stream_out_cap(t);
    char *chunk = malloc(cap);
    for (int m = 0; m < 3; m++) {
        int bad_ids = 0, bad_dec = 0, bad_stream = 0, bad_pieces = 0;
        size_t total_ids = 0;
        for (size_t i = 0; i < nc; i++) {
            JsonDoc *cd = json_parse(cl[i], strlen(cl[i]), err, sizeof err);
            JsonDoc *rd = cd ? json_parse(rl[i], strlen(rl[i]), err, sizeof err) : NULL;
            if (!cd || !rd) {
                printf("FAIL %s %s: line %zu: %s\n", label, modes[m], i + 1, err);
                return 1;
            }
            size_t tlen, nlen, dlen;
            const char *text = json_str(json_get(json_root(cd), "text"), &tlen);
            const char *name = json_str(json_get(json_root(cd), "name"), &nlen);
            const JsonValue *mode = json_get(json_root(rd), modes[m]);
            const JsonValue *want = json_get(mode, "ids");
            const char *want_dec = json_str(json_get(mode, "decoded"), &dlen);
            if (!text || !want || !want_dec) {
                printf("FAIL %s %s: line %zu malformed\n", label, modes[m], i + 1);
                return 1;
            }
            int32_t *ids; size_t n;
            if (tok_encode(t, text, tlen, tmodes[m], &ids, &n)) {
                printf("FAIL %s %s: out of memory\n", label, modes[m]);
                return 1;
            }
            total_ids += n;
            size_t diff = 0, nw = json_len(want);
            while (diff < n && diff < nw) {
                int64_t w = -1; json_is_int(json_at(want, diff), &w);
                if (w != ids[diff]) break;
                diff++;
            }
            if (diff < n || diff < nw) {
                if (bad_ids++ < 3) {
                    int64_t w = -1;
                    if (diff < nw) json_is_int(json_at(want, diff), &w);
                    printf("  %s %s line %zu (%s) ", label, modes[m], i + 1, name);
                    show_text(text, tlen);
                    printf(": %zu ids, want %zu; first difference at #%zu: got %d, want %lld\n", n,
                           nw, diff, diff < n ? ids[diff] : -1, (long long)w);
                }
            }
            /* whole decode of the reference ids */
            int32_t *rids = malloc((nw + 1) * sizeof *rids);
            for (size_t k = 0; k < nw; k++) {
                int64_t w = -1;
                json_is_int(json_at(want, k), &w);
                rids[k] = (int32_t)w;
            }
            char *dec; size_t declen;
            tok_decode(t, rids, nw, 0, &dec, &declen);
            if (declen != dlen || memcmp(dec, want_dec, dlen) != 0) {
                if (bad_dec++ < 3) {
                    printf("  %s %s line %zu (%s) decode: got ", label, modes[m], i + 1, name);
                    show_text(dec, declen);
                    printf(" want ");
                    show_text(want_dec, dlen);
                    printf("\n");
                }
            }
            /* streaming decode, one id at a time */
            TokStream s; tok_stream_init(&s);
            char *acc = malloc(declen * 2 + cap + 16);
            size_t alen = 0; int stream_ok = 1;
            for (size_t k = 0; k <= nw; k++) {
                size_t got = k < nw ? tok_stream_feed(t, &s, rids[k], chunk, cap)
                                    : tok_stream_flush(&s, chunk, cap);
                if (got > cap || !valid_utf8(chunk, got)) stream_ok = 0;
                if (stream_ok) { memcpy(acc + alen, chunk, got); alen += got; }
            }
            if (!stream_ok || alen != dlen || memcmp(acc, want_dec, dlen) != 0) {
                if (bad_stream++ < 3) {
                    printf("  %s %s line %zu (%s) stream: %s got ", label, modes[m], i + 1, name,
                           stream_ok ? "" : "invalid UTF-8 chunk;");
                    show_text(acc, alen); printf("\n");
                }
            }
            /* every id decoded alone (partial characters become U+FFFD) */
            const JsonValue *pieces = json_get(mode, "pieces");
            for (size_t k = 0; pieces && k < json_len(pieces) && k < nw; k++) {
                size_t plen; const char *want_piece = json_str(json_at(pieces, k), &plen);
                char *pd; size_t pdl;
                tok_decode(t, rids + k, 1, 0, &pd, &pdl);
                if (!want_piece || pdl != plen || memcmp(pd, want_piece, plen) != 0) {
                    if (bad_pieces++ < 3) {
                        printf("  %s line %zu (%s) piece #%zu id %d: got ", label, i + 1, name, k,
                               rids[k]);
                        show_text(pd, pdl);
                        printf(" want ");
                        show_text(want_piece ? want_piece : "", plen);
                        printf("\n");
                    }
                }
                free(pd);
            }
            free(acc); free(dec); free(rids); free(ids);
            json_free(cd); json_free(rd);
        }
        char nm[128];
        snprintf(nm, sizeof nm, "%s_%s", label, modes[m]);
        if (bad_ids) printf("FAIL %s_encode: %d of %zu lines differ\n", nm, bad_ids, nc);
        else printf("PASS %s_encode (%zu lines, %zu ids)\n", nm, nc, total_ids);
        if (bad_dec) printf("FAIL %s_decode: %d lines differ\n", nm, bad_dec);
        else printf("PASS %s_decode\n", nm);
        if (bad_stream) printf("FAIL %s_stream: %d lines differ\n", nm, bad_stream);
        else printf("PASS %s_stream\n", nm);
        if (m == 0) {
            if (bad_pieces) printf("FAIL %s_single_id_decode: %d ids differ\n", nm, bad_pieces);
            else printf("PASS %s_single_id_decode\n", nm);
        }
        failed |= bad_ids || bad_dec || bad_stream || bad_pieces;
    }
    free(chunk); free(cl); free(rl); free(corpus); free(ref);
    tok_free(t);
    return failed;
}

static int cmd_encode(const char *tok_path, const char *mode) {
    Tokenizer *t = load_or_die(tok_path);
    size_t cap = 1 << 16, n = 0, r;
    char *buf = malloc(cap);
    while ((r = fread(buf + n, 1, cap - n, stdin)) > 0) {
        n += r;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    TokSpecialMode m = strcmp(mode, "plain") == 0           ? TOK_SPECIAL_NONE
                       : strcmp(mode, "split_special") == 0 ? TOK_SPECIAL_NONSPECIAL_ONLY
                                                            : TOK_SPECIAL_ALL;
    int32_t *ids; size_t k;
    if (tok_encode(t, buf, n, m, &ids, &k)) {
        fprintf(stderr, "tokdrive: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < k; i++) printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    free(ids); free(buf); tok_free(t);
    return 0;
}

static int cmd_decode(const char *tok_path, int argc, char **argv) {
    Tokenizer *t = load_or_die(tok_path);
    int32_t *ids = malloc((argc + 1) * sizeof *ids);
    for (int i = 0; i < argc; i++) ids[i] = atoi(argv[i]);
    char *out; size_t len;
    tok_decode(t, ids, (size_t)argc, 0, &out, &len);
    fwrite(out, 1, len, stdout);
    free(out); free(ids); tok_free(t);
    return 0;
}

static int cmd_bench(const char *tok_path, const char *text_path) {
    double t0 = now_ms();
    Tokenizer *t = load_or_die(tok_path);
    double t1 = now_ms();
    char err[256]; size_t n;
    char *text = json_read_file(text_path, &n, err, sizeof err);
    if (!text) { fprintf(stderr, "tokdrive: %s\n", err); return 1; }
    int32_t *ids; size_t k;
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        /* a fresh tokenizer state is not needed: rep 0 is the cold-cache run, reported first */
        double a = now_ms();
        tok_encode(t, text, n, TOK_SPECIAL_ALL, &ids, &k);
        double b = now_ms();
        if (rep == 0) printf("encode %zu bytes -> %zu ids: %.2f ms (cold cache)\n", n, k, b - a);
        if (b - a < best) best = b - a;
        free(ids);
    }
    printf("load %s: %.1f ms (vocab %d, pre-tokenizer %s)\n", tok_path, t1 - t0, tok_vocab_size(t),
           tok_pretokenizer_name(t));
    printf("encode best of 5: %.2f ms (%.1f MB/s)\n", best, n / best / 1e3);
    free(text); tok_free(t);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 6 && strcmp(argv[1], "check") == 0)
        return cmd_check(argv[2], argv[3], argv[4], argv[5]);
    if (argc == 4 && strcmp(argv[1], "encode") == 0) return cmd_encode(argv[2], argv[3]);
    if (argc >= 3 && strcmp(argv[1], "decode") == 0) return cmd_decode(argv[2], argc - 3, argv + 3);
    if (argc == 4 && strcmp(argv[1], "bench") == 0) return cmd_bench(argv[2], argv[3]);
    fprintf(stderr,
            "usage: tokdrive check TOKENIZER_JSON CORPUS REF LABEL | encode TOKENIZER_JSON MODE | "
            "decode TOKENIZER_JSON ID... | bench TOKENIZER_JSON TEXT_FILE\n");
    return 2;
}

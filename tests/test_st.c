/* Unit tests for st.h: a valid two-shard directory read back in every dtype (conversions checked
 * against hand-computed values), row reads, and each malformed-file case, which must fail with a
 * message naming the file and the tensor. All files live in a mkdtemp directory removed at exit. */
#define JSON_IMPLEMENTATION
#define ST_IMPLEMENTATION
#include "st.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int failures;
static char root[64];

static void check(const char *name, int ok, const char *why) {
    if (ok) printf("PASS %s\n", name);
    else { printf("FAIL %s: %s\n", name, why); failures++; }
}

/* Writes a safetensors file: header length (hlen_override if non-zero), header, data. */
static void write_st_raw(const char *path, const char *header, uint64_t hlen_override,
                         const void *data, size_t dlen) {
    FILE *f = fopen(path, "wb");
    if (!f) { printf("FAIL setup: cannot write %s\n", path); exit(1); }
    uint64_t hlen = hlen_override ? hlen_override : strlen(header);
    unsigned char lb[8];
    for (int k = 0; k < 8; k++) lb[k] = (unsigned char)(hlen >> (8 * k));
    fwrite(lb, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    if (dlen) fwrite(data, 1, dlen, f);
    fclose(f);
}

static void clear_dir(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    if (system(cmd) != 0) { printf("FAIL setup: %s\n", cmd); exit(1); }
}

static int same_float(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    uint32_t x, y;
    memcpy(&x, &a, 4); memcpy(&y, &b, 4);
    return x == y;   /* bitwise: distinguishes -0 from +0 */
}

/* Reference e4m3fn decode written from the format definition with ldexp, independent of st.h. */
static float ref_e4m3(unsigned b) {
    int sign = b & 0x80 ? -1 : 1, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    double v = e == 0 ? ldexp(m / 8.0, -6) : ldexp(1.0 + m / 8.0, e - 7);
    return (float)(sign * v);
}

/* ---- the valid directory ---- */

#define W_O 130
#define W_I 260
#define X_E 2
#define X_O 130
#define X_I 5

static unsigned char w_bytes[W_O * W_I], x_bytes[X_E * X_O * X_I];
static float w_scale[2 * 3], x_scale[X_E * 2 * 1];

static void build_valid(const char *dir) {
    char path[256], hdr[4096];
    /* Shard 1: F32, BF16, F16, U8, I8 and metadata. */
    unsigned char d1[256];
    size_t n1 = 0;
    float f32v[6] = {1.5f, -2.25f, 0.0f, 3e38f, -1e-40f, 7.0f};
    memcpy(d1 + n1, f32v, 24); n1 += 24;
    uint16_t bf[4] = {0x3F80, 0xC040, 0x7F80, 0x0001};
    memcpy(d1 + n1, bf, 8); n1 += 8;
    uint16_t hf[10] = { 0x3C00, 0xC000, 0x0001, 0x03FF, 0x0400,
                        0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x8000 };
    memcpy(d1 + n1, hf, 20); n1 += 20;
    unsigned char u8[3] = {0, 200, 255};
    memcpy(d1 + n1, u8, 3); n1 += 3;
    signed char i8[3] = {-128, -1, 127};
    memcpy(d1 + n1, i8, 3); n1 += 3;
    snprintf(hdr, sizeof hdr,
             "{\"__metadata__\": {\"format\": \"pt\", \"note\": \"caf\\u00e9\"},"
             " \"f16\": {\"dtype\": \"F16\", \"shape\": [10], \"data_offsets\": [32, 52]},"
             " \"a.f32\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 24]},"
             " \"bf16\": {\"dtype\": \"BF16\", \"shape\": [2, 2], \"data_offsets\": [24, 32]},"
             " \"u8\": {\"dtype\": \"U8\", \"shape\": [3], \"data_offsets\": [52, 55]},"
             " \"i8\": {\"dtype\": \"I8\", \"shape\": [3], \"data_offsets\": [55, 58]},"
             " \"empty\": {\"dtype\": \"F32\", \"shape\": [0, 4], \"data_offsets\": [58, 58]}}     "
             " ");
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    write_st_raw(path, hdr, 0, d1, n1);

    /* Shard 2: F8 2-D and 3-D with scales, I32, I64, F64. */
    static const unsigned char edge[] = { 0x7E, 0xFE, 0x7F, 0xFF, 0x01, 0x81, 0x08,
                                          0x07, 0x00, 0x80, 0x38, 0x3C, 0x77, 0x0F };
    for (int o = 0; o < W_O; o++)
        for (int i = 0; i < W_I; i++)
            w_bytes[o * W_I + i] = (unsigned char)((o * 7 + i * 13 + 1) & 0xFF);
    for (size_t k = 0; k < sizeof edge; k++) {
        w_bytes[k] = edge[k];                           /* block (0,0) */
        if (k < 4) w_bytes[129 * W_I + 256 + k] = edge[k];   /* partial corner block (1,2) */
    }
    float ws[6] = {0.5f, 2.0f, 4.0f, 0.25f, 8.0f, 1.0f / 3.0f};
    memcpy(w_scale, ws, sizeof ws);
    for (size_t k = 0; k < sizeof x_bytes; k++) x_bytes[k] = (unsigned char)((k * 29 + 3) & 0xFF);
    float xs[4] = {2.0f, 0.125f, -1.0f, 1e-3f};
    memcpy(x_scale, xs, sizeof xs);
    int32_t i32[2] = {-2000000000, 123};
    int64_t i64[2] = {-5, (int64_t)1 << 40};
    double f64[2] = {0.1, -1e300};
    size_t n2 = sizeof w_bytes + sizeof w_scale + sizeof x_bytes + sizeof x_scale + 8 + 16 + 16;
    unsigned char *d2 = malloc(n2);
    size_t o2 = 0, ow = o2; memcpy(d2 + o2, w_bytes, sizeof w_bytes); o2 += sizeof w_bytes;
    size_t ows = o2; memcpy(d2 + o2, w_scale, sizeof w_scale); o2 += sizeof w_scale;
    size_t ox = o2; memcpy(d2 + o2, x_bytes, sizeof x_bytes); o2 += sizeof x_bytes;
    size_t oxs = o2; memcpy(d2 + o2, x_scale, sizeof x_scale); o2 += sizeof x_scale;
    size_t oi32 = o2; memcpy(d2 + o2, i32, 8); o2 += 8;
    size_t oi64 = o2; memcpy(d2 + o2, i64, 16); o2 += 16;
    size_t of64 = o2; memcpy(d2 + o2, f64, 16); o2 += 16;
    snprintf(hdr, sizeof hdr,
             "{\"w.weight\": {\"dtype\": \"F8_E4M3\", \"shape\": [%d, %d], \"data_offsets\": [%zu, "
             "%zu]},"
             " \"w.weight_scale_inv\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": "
             "[%zu, %zu]},"
             " \"mlp.experts.gate_up_proj\": {\"dtype\": \"F8_E4M3\", \"shape\": [%d, %d, %d], "
             "\"data_offsets\": [%zu, %zu]},"
             " \"mlp.experts.gate_up_proj_scale_inv\": {\"dtype\": \"F32\", \"shape\": [2, 2, 1], "
             "\"data_offsets\": [%zu, %zu]},"
             " \"i32\": {\"dtype\": \"I32\", \"shape\": [2], \"data_offsets\": [%zu, %zu]},"
             " \"i64\": {\"dtype\": \"I64\", \"shape\": [2], \"data_offsets\": [%zu, %zu]},"
             " \"f64\": {\"dtype\": \"F64\", \"shape\": [2], \"data_offsets\": [%zu, %zu]}}",
             W_O, W_I, ow, ows, ows, ox, X_E, X_O, X_I, ox, oxs, oxs, oi32, oi32, oi64, oi64, of64,
             of64, o2);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    write_st_raw(path, hdr, 0, d2, n2);
    free(d2);
    /* Files that must be ignored: other extensions. */
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w"); fputs("{}", f); fclose(f);
}

static void test_valid(void) {
    char dir[128], err[512];
    snprintf(dir, sizeof dir, "%s/valid", root);
    clear_dir(dir);
    build_valid(dir);
    StIndex *ix = st_open_dir(dir, err, sizeof err);
    check("valid_open", ix != NULL, err);
    if (!ix) return;
    check("valid_counts", st_count(ix) == 13 && st_file_count(ix) == 2, "wrong tensor/file count");
    check("valid_file_order",
          strstr(st_file_path(ix, 0), "model-00001") &&
              strstr(st_file_path(ix, 1), "model-00002") && st_file_path(ix, 2) == NULL &&
              st_file_fd(ix, 0) >= 0 && st_file_fd(ix, 5) == -1,
          "files not sorted by name");
    check("valid_metadata",
          st_file_metadata(ix, 0, "format") && !strcmp(st_file_metadata(ix, 0, "format"), "pt") &&
              !strcmp(st_file_metadata(ix, 0, "note"), "caf\xc3\xa9") &&
              st_file_metadata(ix, 0, "zz") == NULL && st_file_metadata(ix, 1, "format") == NULL,
          "metadata lookup");
    /* Tensors are listed by file, then by data offset. */
    const char *order0[] = {"a.f32", "bf16", "f16", "u8", "i8", "empty"};
    int ok = 1;
    for (int k = 0; k < 6; k++) ok &= strcmp(st_tensor_at(ix, (size_t)k)->name, order0[k]) == 0;
    check("valid_tensor_order", ok && st_tensor_at(ix, 13) == NULL, "order of st_tensor_at");
    check("valid_find_absent", st_find(ix, "nope") == NULL && st_find(ix, "a.f3") == NULL,
          "st_find absent");

    const StTensor *t = st_find(ix, "a.f32");
    check("f32_fields",
          t && t->dtype == ST_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 &&
              t->file == 0 && t->nbytes == 24 && st_numel(t) == 6,
          "fields");
    float buf[W_O * W_I];
    float want_f32[6] = {1.5f, -2.25f, 0.0f, 3e38f, -1e-40f, 7.0f};
    ok = t && st_read_f32(ix, t, buf, err, sizeof err) == 0;
    for (int k = 0; ok && k < 6; k++) ok = same_float(buf[k], want_f32[k]);
    check("f32_read", ok, err);
    /* Absolute offset: header length + 8 + begin. */
    unsigned char raw[64];
    ok = t && pread(st_file_fd(ix, t->file), raw, 4, (off_t)t->offset) == 4 &&
         memcmp(raw, &want_f32[0], 4) == 0;
    check("f32_absolute_offset", ok, "offset does not point at the data");
    ok = t && st_read_f32_rows(ix, t, 1, 1, buf, err, sizeof err) == 0 &&
         same_float(buf[0], 3e38f) && same_float(buf[2], 7.0f);
    check("f32_rows", ok, err);

    t = st_find(ix, "bf16");
    float want_bf[4] = {1.0f, -3.0f, INFINITY, 0x1p-133f};
    ok = t && st_read_f32(ix, t, buf, err, sizeof err) == 0;
    for (int k = 0; ok && k < 4; k++) ok = same_float(buf[k], want_bf[k]);
    check("bf16_read", ok, err);
    ok = t && st_read_raw(ix, t, raw, err, sizeof err) == 0 && raw[0] == 0x80 && raw[1] == 0x3F &&
         raw[7] == 0x00;
    check("bf16_read_raw", ok, err);

    t = st_find(ix, "f16");
    float want_hf[10] = { 1.0f,      -2.0f, 0x1p-24f, 1023 * 0x1p-24f, 0x1p-14f, 65504.0f, INFINITY,
                          -INFINITY, NAN,   -0.0f };
    ok = t && st_read_f32(ix, t, buf, err, sizeof err) == 0;
    for (int k = 0; ok && k < 10; k++) ok = same_float(buf[k], want_hf[k]);
    check("f16_read_subnormal_inf_nan", ok, err);

    t = st_find(ix, "u8");
    ok = t && st_read_f32(ix, t, buf, err, sizeof err) == 0 && buf[0] == 0 && buf[1] == 200 &&
         buf[2] == 255;
    check("u8_read", ok, err);
    t = st_find(ix, "i8");
    ok = t && st_read_f32(ix, t, buf, err, sizeof err) == 0 && buf[0] == -128 && buf[1] == -1 &&
         buf[2] == 127;
    check("i8_read", ok, err);
    t = st_find(ix, "i32");
    ok = t && st_read_f32(ix, t, buf, err, sizeof err) == 0 && buf[0] == -2000000000.0f &&
         buf[1] == 123;
    check("i32_read", ok, err);
    t = st_find(ix, "i64");
    ok = t && st_read_f32(ix, t, buf, err, sizeof err) == 0 && buf[0] == -5 && buf[1] == 0x1p40f;
    check("i64_read", ok, err);
    t = st_find(ix, "f64");
    ok =
        t && st_read_f32(ix, t, buf, err, sizeof err) == 0 && buf[0] == 0.1f && buf[1] == -INFINITY;
    check("f64_read", ok, err);
    t = st_find(ix, "empty");
    ok = t && st_numel(t) == 0 && t->nbytes == 0 && st_read_f32(ix, t, buf, err, sizeof err) == 0 &&
         st_read_raw(ix, t, raw, err, sizeof err) == 0;
    check("empty_tensor", ok, err);

    /* F8 edge values decoded by hand (before scaling by 0.5, the scale of block (0,0)). */
    static const struct { unsigned char b; float v;
    } hand[] = { { 0x7E, 448.0f },  { 0xFE, -448.0f },     { 0x01, 0x1p-9f }, { 0x81, -0x1p-9f },
                 { 0x08, 0x1p-6f }, { 0x07, 7 * 0x1p-9f }, { 0x00, 0.0f },    { 0x80, -0.0f },
                 { 0x38, 1.0f },    { 0x3C, 1.5f },        { 0x77, 240.0f },  { 0x0F, 0x1.ep-6f } };
    ok = 1;
    for (size_t k = 0; k < sizeof hand / sizeof hand[0]; k++)
        ok &= same_float(ref_e4m3(hand[k].b), hand[k].v);
    check("f8_reference_decoder_sane", ok, "test's reference decoder disagrees with hand values");
    t = st_find(ix, "w.weight");
    ok = t && t->dtype == ST_F8_E4M3 && st_read_f32(ix, t, buf, err, sizeof err) == 0;
    check("f8_read", ok, err);
    if (ok) {
        int edges_ok = 1;
        for (size_t k = 0; k < sizeof hand / sizeof hand[0]; k++) {
            size_t pos = 0;
            /* first 14 bytes of row 0 hold the edge list */
            while (w_bytes[pos] != hand[k].b) pos++;
            edges_ok &= same_float(buf[pos], hand[k].v * 0.5f);
        }
        edges_ok &= isnan(buf[2]) && isnan(buf[3]);   /* 0x7F and 0xFF are NaN in e4m3fn */
        check("f8_edge_values", edges_ok, "edge values wrong");
        int all_ok = 1, bad = -1;
        for (int o = 0; o < W_O && all_ok; o++)
            for (int i = 0; i < W_I; i++) {
                float want = ref_e4m3(w_bytes[o * W_I + i]) * w_scale[(o / 128) * 3 + i / 128];
                if (!same_float(buf[o * W_I + i], want)) { all_ok = 0; bad = o * W_I + i; break; }
            }
        char why[128];
        snprintf(why, sizeof why, "element %d: got %g", bad, bad >= 0 ? buf[bad] : 0.0);
        check("f8_all_elements_with_partial_blocks", all_ok, why);
        /* Corner of the partial block (1,2): scale 1/3, row 129, column 256+. */
        check("f8_partial_corner_block",
              same_float(buf[129 * W_I + 256], 448.0f * (1.0f / 3.0f)) &&
                  same_float(buf[129 * W_I + 257], -448.0f * (1.0f / 3.0f)) &&
                  isnan(buf[129 * W_I + 258]) && isnan(buf[129 * W_I + 259]),
              "corner block");
        /* A row range crossing the 128-row block boundary equals the same rows of the full read. */
        static float rows[40 * W_I];
        ok = st_read_f32_rows(ix, t, 100, 30, rows, err, sizeof err) == 0;
        for (int k = 0; ok && k < 30 * W_I; k++) ok = same_float(rows[k], buf[100 * W_I + k]);
        check("f8_rows_cross_block", ok, err);
    }
    t = st_find(ix, "mlp.experts.gate_up_proj");
    ok = t && t->ndim == 3 && st_read_f32(ix, t, buf, err, sizeof err) == 0;
    int all_ok = ok;
    for (int e = 0; all_ok && e < X_E; e++)
        for (int o = 0; o < X_O && all_ok; o++)
            for (int i = 0; i < X_I; i++) {
                size_t k = ((size_t)e * X_O + o) * X_I + i;
                if (!same_float(buf[k], ref_e4m3(x_bytes[k]) * x_scale[e * 2 + o / 128])) {
                    all_ok = 0;
                    break;
                }
            }
    check("f8_3d_fused_with_scale", all_ok, ok ? "value mismatch" : err);
    if (all_ok) {
        static float rows[20 * X_I];
        /* crosses expert 0 -> 1 */
        ok = st_read_f32_rows(ix, t, 125, 10, rows, err, sizeof err) == 0;
        for (int k = 0; ok && k < 10 * X_I; k++) ok = same_float(rows[k], buf[125 * X_I + k]);
        check("f8_3d_rows_cross_expert", ok, err);
        /* last rows of expert 1 */
        ok = st_read_f32_rows(ix, t, 258, 2, rows, err, sizeof err) == 0;
        for (int k = 0; ok && k < 2 * X_I; k++) ok = same_float(rows[k], buf[258 * X_I + k]);
        check("f8_3d_rows_tail", ok, err);
    }
    t = st_find(ix, "a.f32");
    ok = st_read_f32_rows(ix, t, 1, 2, buf, err, sizeof err) != 0 && strstr(err, "a.f32") &&
         strstr(err, "model-00001");
    check("rows_out_of_range", ok, err);
    ok = st_read_f32_rows(ix, t, -1, 1, buf, err, sizeof err) != 0;
    check("rows_negative", ok, err);
    ok = st_read_f32_rows(ix, t, 2, 0, buf, err, sizeof err) == 0;
    check("rows_empty_range_at_end", ok, err);
    check("dtype_helpers",
          st_dtype_size(ST_BF16) == 2 && st_dtype_size(ST_F64) == 8 &&
              !strcmp(st_dtype_name(ST_F8_E4M3), "F8_E4M3") && st_dtype_size((StDtype)99) == 0,
          "dtype tables");

    /* Truncating a shard after it was opened: the read fails by name instead of returning garbage.
       */
    char path[256];
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    t = st_find(ix, "f64");
    ok = truncate(path, (off_t)t->offset + 4) == 0 &&
         st_read_f32(ix, t, buf, err, sizeof err) != 0 && strstr(err, path) &&
         strstr(err, "'f64'") && strstr(err, "end of file");
    check("read_after_truncate", ok, err);
    st_close(ix);

    /* st_open_files: one shard on its own. */
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    const char *one[1] = {path};
    ix = st_open_files(one, 1, err, sizeof err);
    check("open_single_file", ix && st_count(ix) == 6 && st_find(ix, "w.weight") == NULL, err);
    st_close(ix);
}

/* ---- malformed inputs ---- */

/* Opens dir, which must fail with a message containing every non-NULL fragment. */
static void expect_open_fail(const char *name, const char *dir, const char *frag1,
                             const char *frag2, const char *frag3) {
    char err[1024] = "";
    StIndex *ix = st_open_dir(dir, err, sizeof err);
    int ok = ix == NULL && (!frag1 || strstr(err, frag1)) && (!frag2 || strstr(err, frag2)) &&
             (!frag3 || strstr(err, frag3)) && !strchr(err, '\n') && err[0];
    char why[1200];
    snprintf(why, sizeof why, "%s; got \"%s\" (want %s | %s | %s)", ix ? "opened" : "failed", err,
             frag1 ? frag1 : "-", frag2 ? frag2 : "-", frag3 ? frag3 : "-");
    check(name, ok, why);
    st_close(ix);
}

/* One-file directory with the given header and `dlen` data bytes. Returns the file path. */
static const char *one_file(const char *tag, const char *header, uint64_t hlen_override,
                            size_t dlen) {
    static char path[256];
    char dir[128];
    snprintf(dir, sizeof dir, "%s/%s", root, tag);
    clear_dir(dir);
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, tag);
    unsigned char *data = calloc(dlen ? dlen : 1, 1);
    write_st_raw(path, header, hlen_override, data, dlen);
    free(data);
    return path;
}

static void dir_of(char *dir, size_t n, const char *path) {
    snprintf(dir, n, "%s", path);
    *strrchr(dir, '/') = 0;
}

#define T1(name, dt, shape, b, e) "\"" name "\": {\"dtype\": \"" dt "\", \"shape\": " shape ", \"data_offsets\": [" #b ", " #e "]}"

static void bad_case(const char *tag, const char *header, size_t dlen, const char *tensor,
                     const char *msg) {
    const char *path = one_file(tag, header, 0, dlen);
    char dir[256];
    dir_of(dir, sizeof dir, path);
    expect_open_fail(tag, dir, path, tensor, msg);
}

static void test_malformed(void) {
    char dir[256], path[512];
    bad_case("bad_offsets_past_end",
             "{" T1("a", "F32", "[2]", 0, 8) ", " T1("big.w", "F32", "[4]", 8, 24) "}", 16,
             "'big.w'", "outside the data region");
    bad_case("bad_truncated_file", "{" T1("t.w", "BF16", "[3, 4]", 0, 24) "}", 10, "'t.w'",
             "outside the data region");
    bad_case("bad_overlap", "{" T1("x", "F32", "[4]", 0, 16) ", " T1("y", "F32", "[2]", 8, 16) "}",
             16, "'y'", "'x'");
    bad_case("bad_overlap_nested",
             "{" T1("p", "U8", "[10]", 0, 10) ", " T1("q", "U8", "[2]", 2,
                                                      4) ", " T1("r", "U8", "[2]", 11, 13) "}",
             16, "'q'", "overlaps");
    bad_case("bad_byte_mismatch", "{" T1("m.w", "F16", "[3, 3]", 0, 16) "}", 16, "'m.w'",
             "18 bytes");
    bad_case("bad_unknown_dtype", "{" T1("u.w", "F8_E5M2", "[4]", 0, 4) "}", 4, "'u.w'",
             "unknown dtype 'F8_E5M2'");
    bad_case("bad_begin_gt_end", "{" T1("be", "U8", "[0]", 8, 4) "}", 16, "'be'",
             "begin 8 > end 4");
    bad_case("bad_missing_dtype", "{\"nd\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "'nd'",
             "dtype");
    bad_case("bad_dtype_not_string",
             "{\"nd\": {\"dtype\": 5, \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "'nd'",
             "dtype");
    bad_case("bad_shape_not_array",
             "{\"sh\": {\"dtype\": \"F32\", \"shape\": 4, \"data_offsets\": [0, 16]}}", 16, "'sh'",
             "shape");
    bad_case("bad_shape_negative", "{" T1("neg", "F32", "[-1]", 0, 0) "}", 16, "'neg'", "shape[0]");
    bad_case("bad_shape_fraction", "{" T1("fr", "F32", "[1.5]", 0, 4) "}", 16, "'fr'", "shape[0]");
    bad_case("bad_shape_overflow", "{" T1("ov", "F32", "[4294967296, 4294967296, 16]", 0, 0) "}",
             16, "'ov'", "overflow");
    bad_case("bad_shape_overflow_bytes", "{" T1("ob", "F32", "[4611686018427387904, 2]", 0, 0) "}",
             16, "'ob'", "overflow");
    bad_case("bad_too_many_dims", "{" T1("nine", "U8", "[1,1,1,1,1,1,1,1,1]", 0, 1) "}", 1,
             "'nine'", "dimensions");
    bad_case("bad_offsets_three",
             "{\"o3\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1, 2]}}", 4,
             "'o3'", "data_offsets");
    bad_case("bad_offsets_missing", "{\"om\": {\"dtype\": \"U8\", \"shape\": [1]}}", 4, "'om'",
             "data_offsets");
    bad_case("bad_entry_not_object", "{\"eo\": [1, 2]}", 4, "'eo'", "not an object");
    bad_case("bad_duplicate_in_file",
             "{" T1("dup", "U8", "[1]", 0, 1) ", " T1("dup", "U8", "[1]", 1, 2) "}", 4, "'dup'",
             "duplicate");
    bad_case("bad_metadata_not_strings",
             "{\"__metadata__\": {\"n\": 1}, " T1("mt", "U8", "[1]", 0, 1) "}", 4, NULL,
             "__metadata__ is not a map of strings");
    bad_case("bad_metadata_not_object", "{\"__metadata__\": \"x\"}", 4, NULL, "__metadata__");
    bad_case("bad_json_trailing_comma", "{" T1("tc", "U8", "[1]", 0, 1) ",}", 4, NULL,
             "malformed header JSON");
    bad_case("bad_json_not_utf8",
             "{\"caf\xe9\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 4,
             NULL, "invalid UTF-8");
    bad_case("bad_header_not_object", "[1, 2]", 4, NULL, "not a JSON object");
    bad_case("bad_control_char_name", "{" T1("a\\nb", "U8", "[1]", 0, 1) "}", 4, NULL,
             "control character");
    bad_case("bad_empty_name", "{" T1("", "U8", "[1]", 0, 1) "}", 4, NULL, "empty name");

    /* Header length past the end of the file. */
    const char *p = one_file("bad_header_past_eof", "{}", 1000, 16);
    dir_of(dir, sizeof dir, p);
    expect_open_fail("bad_header_past_eof", dir, p, "header length 1000", "past the end");
    /* Absurd header length in a (sparse) file big enough to hold it. */
    p = one_file("bad_header_absurd", "{}", ((uint64_t)200 << 20), 0);
    snprintf(path, sizeof path, "%s", p);
    int trunc_ok = truncate(path, ((off_t)201 << 20)) == 0;
    dir_of(dir, sizeof dir, path);
    if (trunc_ok) expect_open_fail("bad_header_absurd", dir, path, "absurd", NULL);
    else check("bad_header_absurd", 0, "could not create the sparse file");
    /* A file too short to hold the length prefix. */
    snprintf(dir, sizeof dir, "%s/bad_short", root);
    clear_dir(dir);
    snprintf(path, sizeof path, "%s/short.safetensors", dir);
    FILE *f = fopen(path, "wb"); fwrite("\x02\x00\x00", 1, 3, f); fclose(f);
    expect_open_fail("bad_file_too_short", dir, path, "too short", NULL);

    /* The same tensor name in two files: both files and the tensor named. */
    snprintf(dir, sizeof dir, "%s/bad_dup_across", root);
    clear_dir(dir);
    unsigned char z[8] = {0};
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/a.safetensors", dir);
    snprintf(pb, sizeof pb, "%s/b.safetensors", dir);
    write_st_raw(
        pa,
        "{" T1("only.a", "U8", "[1]", 0, 1) ", " T1("model.shared.weight", "U8", "[2]", 1, 3) "}",
        0, z, 8);
    write_st_raw(pb, "{" T1("model.shared.weight", "U8", "[2]", 0, 2) "}", 0, z, 8);
    expect_open_fail("bad_duplicate_across_files", dir, pa, pb, "'model.shared.weight'");

    /* Empty directory, missing directory. */
    snprintf(dir, sizeof dir, "%s/bad_empty_dir", root);
    clear_dir(dir);
    expect_open_fail("bad_no_safetensors", dir, dir, "no *.safetensors", NULL);
    snprintf(dir, sizeof dir, "%s/does_not_exist", root);
    expect_open_fail("bad_missing_dir", dir, dir, "cannot open directory", NULL);
    /* The error from the first bad file wins even if earlier files were fine. */
    snprintf(dir, sizeof dir, "%s/bad_second_shard", root);
    clear_dir(dir);
    snprintf(pa, sizeof pa, "%s/1.safetensors", dir);
    snprintf(pb, sizeof pb, "%s/2.safetensors", dir);
    write_st_raw(pa, "{" T1("ok", "U8", "[1]", 0, 1) "}", 0, z, 8);
    write_st_raw(pb, "{" T1("bad", "U8", "[9]", 0, 9) "}", 0, z, 8);
    expect_open_fail("bad_second_shard", dir, pb, "'bad'", NULL);
}

/* F8 weights whose scale is missing or has the wrong shape/dtype: open succeeds (the scale is only
 * needed to dequantize), the f32 read fails naming both tensors. Raw reads still work. */
static void test_f8_scale_errors(void) {
    char dir[256], err[512], path[512];
    snprintf(dir, sizeof dir, "%s/f8scale", root);
    clear_dir(dir);
    snprintf(path, sizeof path, "%s/s.safetensors", dir);
    unsigned char data[4096] = {0};
    write_st_raw(
        path,
        "{" T1("nos.weight", "F8_E4M3", "[2, 2]", 0, 4) ", " T1(
            "bad.weight", "F8_E4M3", "[200, 3]", 4,
            604) ", " T1("bad.weight_scale_inv", "F32", "[1, 1]", 604,
                         608) ", " T1("bt.weight", "F8_E4M3", "[1, 1]", 608,
                                      609) ", " T1("bt.weight_scale_inv", "U8", "[1, 1]", 609,
                                                   610) ", " T1("e3.w", "F8_E4M3", "[2, 1, 1]", 610,
                                                                612) ", " T1("e3.w_scale_inv",
                                                                             "F32", "[1, 1]", 612,
                                                                             616) ", " T1("one.d",
                                                                                          "F8_E4M3",
                                                                                          "[4]",
                                                                                          616,
                                                                                          620) "}",
        0, data, sizeof data);
    StIndex *ix = st_open_dir(dir, err, sizeof err);
    check("f8_scale_open", ix != NULL, err);
    if (!ix) return;
    float out[1024];
    const StTensor *t = st_find(ix, "nos.weight");
    int ok = st_read_f32(ix, t, out, err, sizeof err) != 0 && strstr(err, path) &&
             strstr(err, "'nos.weight'") && strstr(err, "'nos.weight_scale_inv'");
    check("f8_missing_scale", ok, err);
    unsigned char raw[8];
    check("f8_missing_scale_raw_ok", st_read_raw(ix, t, raw, err, sizeof err) == 0, err);
    t = st_find(ix, "bad.weight");
    ok = st_read_f32(ix, t, out, err, sizeof err) != 0 && strstr(err, "'bad.weight'") &&
         strstr(err, "'bad.weight_scale_inv'") && strstr(err, "want [2, 1]");
    check("f8_wrong_scale_shape", ok, err);
    ok = st_read_f32_rows(ix, t, 0, 1, out, err, sizeof err) != 0 &&
         strstr(err, "'bad.weight_scale_inv'");
    check("f8_wrong_scale_shape_rows", ok, err);
    t = st_find(ix, "bt.weight");
    ok = st_read_f32(ix, t, out, err, sizeof err) != 0 && strstr(err, "'bt.weight_scale_inv'") &&
         strstr(err, "U8");
    check("f8_wrong_scale_dtype", ok, err);
    t = st_find(ix, "e3.w");
    ok = st_read_f32(ix, t, out, err, sizeof err) != 0 && strstr(err, "'e3.w_scale_inv'") &&
         strstr(err, "want [2, 1, 1]");
    check("f8_3d_scale_needs_3d", ok, err);
    t = st_find(ix, "one.d");
    ok = st_read_f32(ix, t, out, err, sizeof err) != 0 && strstr(err, "'one.d'") &&
         strstr(err, "2-D or 3-D");
    check("f8_1d_refused", ok, err);
    st_close(ix);
}

/* A file cut right after its header: refused by st_open_dir (naming the data region), indexed by
   st_open_dir_headers with the same tensors, every other check still made, and a read fails by
   name. */
static void test_headers_only(void) {
    const char *hdr = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                      "\"b\":{\"dtype\":\"U8\",\"shape\":[5],\"data_offsets\":[24,29]}}";
    const char *path = one_file("headers_only", hdr, 0, 0);
    char dir[128], err[1024] = "";
    snprintf(dir, sizeof dir, "%s/headers_only", root);
    expect_open_fail("headers_only_refused_by_st_open_dir", dir, path, "outside the data region",
                     NULL);
    StIndex *ix = st_open_dir_headers(dir, err, sizeof err);
    const StTensor *b = ix ? st_find(ix, "b") : NULL;
    check("headers_only_indexed",
          ix && st_count(ix) == 2 && b && b->nbytes == 5 && b->offset == 8 + strlen(hdr) + 24, err);
    float v[6];
    int rc = ix ? st_read_f32(ix, st_find(ix, "a"), v, err, sizeof err) : 0;
    check("headers_only_read_fails_by_name", rc == -1 && strstr(err, path) && strstr(err, "'a'"),
          err);
    st_close(ix);
    /* the other checks still hold: a byte count that does not match the shape */
    one_file("headers_only_bad",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 0, 0);
    snprintf(dir, sizeof dir, "%s/headers_only_bad", root);
    ix = st_open_dir_headers(dir, err, sizeof err);
    check("headers_only_still_checks_sizes", !ix && strstr(err, "span 20 bytes"), err);
    st_close(ix);
}

/* A *.safetensors that is not a regular file is refused by name, never skipped (the error would
 * otherwise be a "missing tensor") and never blocks (a FIFO); a link to a regular file is followed. */
static void test_not_regular_files(void) {
    char dir[128], path[512], good[512];
    const struct { const char *name, *frag; } cases[] = {
        { "bad_entry_directory", "is a directory" },
        { "bad_entry_fifo", "is a FIFO" },
        { "bad_entry_dangling_link", "No such file" },
        { "bad_entry_link_loop", "Too many levels of symbolic links" },
    };
    for (int c = 0; c < 4; c++) {
        snprintf(dir, sizeof dir, "%s/%s", root, cases[c].name);
        clear_dir(dir);
        snprintf(good, sizeof good, "%s/model-00001.safetensors", dir);
        write_st_raw(good, "{" T1("a", "F32", "[1]", 0, 4) "}", 0,
                     (const unsigned char *)"\0\0\0\0", 4);
        snprintf(path, sizeof path, "%s/model-00002.safetensors", dir);
        int made = c == 0   ? mkdir(path, 0755)
                   : c == 1 ? mkfifo(path, 0600)
                   : c == 2 ? symlink("nowhere.safetensors", path)
                            : symlink("model-00002.safetensors", path);
        if (made != 0) { check(cases[c].name, 0, "could not create the entry"); continue; }
        alarm(20);   /* a hang would be the bug: end this test rather than the suite */
        expect_open_fail(cases[c].name, dir, "model-00002.safetensors", cases[c].frag, NULL);
        alarm(0);
    }
    /* st_open_files on a FIFO: refused, no hang */
    snprintf(path, sizeof path, "%s/bad_entry_fifo/model-00002.safetensors", root);
    const char *one[1] = { path };
    char err[512] = "";
    alarm(20);
    StIndex *ix = st_open_files(one, 1, err, sizeof err);
    alarm(0);
    check("open_files_fifo_refused", !ix && strstr(err, path) && strstr(err, "FIFO"), err);
    st_close(ix);
    /* a symbolic link to a regular file is a shard like any other */
    snprintf(dir, sizeof dir, "%s/link_to_file", root);
    clear_dir(dir);
    snprintf(good, sizeof good, "%s/blob", dir);
    write_st_raw(good, "{" T1("a", "F32", "[1]", 0, 4) "}", 0, (const unsigned char *)"\0\0\0\0",
                 4);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ix = symlink("blob", path) == 0 ? st_open_dir(dir, err, sizeof err) : NULL;
    check("link_to_regular_file_followed", ix && st_find(ix, "a"), err);
    st_close(ix);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/test_st_XXXXXX");
    if (!mkdtemp(root)) { printf("FAIL setup: mkdtemp\n"); return 1; }
    test_valid();
    test_malformed();
    test_f8_scale_errors();
    test_headers_only();
    test_not_regular_files();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) printf("info: could not remove %s\n", root);
    return failures ? 1 : 0;
}

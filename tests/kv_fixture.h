/* A synthetic KV cache for the tests of kvfile.h (tests/test_kvfile.c, tests/fuzz/fuzz_session.c,
   tests/fuzz/fuzz_kvcache.c), no model needed: kvfile.h with its dependencies and their
   implementations, a SessionKey with the sparse oracle fixture's shapes (4 cached layers, indexer
   keys on layers 0 and 2, kv_lora 32, rope 8, index_dim 16, vocab 512, hidden 64; the seeds of
   tests/fuzz/make_seeds.py are laid out for them) and row arrays of any capacity. Include first. */
#ifndef TESTS_KV_FIXTURE_H
#define TESTS_KV_FIXTURE_H

#define _GNU_SOURCE
#define JSON_IMPLEMENTATION
#include "json.h"
#define TOK_IMPLEMENTATION
#include "tok.h"
#define DURABLE_IMPLEMENTATION
#include "durable.h"
#define KVFILE_IMPLEMENTATION
#include "kvfile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { KV_FIXTURE_LAYERS = 4 };
static const unsigned char kv_fixture_indexer[KV_FIXTURE_LAYERS] = { 1, 0, 1, 0 };

static SessionKey kv_fixture_key(void) {
    SessionKey k = { .config = 0x4d8ce179b54d48f9ull,
                     .tensors = 0x8746cf617769f1fdull,
                     .weights = 0xc31a6459c93b6c7bull,
                     .formats = 0xfc3ed0bfa8077647ull,
                     .idot = 1,
                     .absorb = 1,
                     .indexer_mode = 0,
                     .mtp_zero_pos0 = 1,
                     .latent_eps = 1e-6f,
                     .expert_bits = 16,
                     .dense_bits = 16,
                     .group = 0,
                     .layers = KV_FIXTURE_LAYERS,
                     .kv_lora = 32,
                     .qk_rope = 8,
                     .index_dim = 16,
                     .vocab = 512,
                     .hidden = 64,
                     .layer_indexer = kv_fixture_indexer };
    return k;
}

/* Row arrays for kv_fixture_key(); `rows` points into the struct, so it is never copied. */
typedef struct {
    float *latent[KV_FIXTURE_LAYERS], *rope_key[KV_FIXTURE_LAYERS], *index_key[KV_FIXTURE_LAYERS];
    KvRows rows;
} KvFixtureRows;

static void *kv_fixture_alloc(size_t n) {
    void *p = calloc(n ? n : 1, 1);
    if (!p) { fprintf(stderr, "kv_fixture: out of memory\n"); exit(2); }
    return p;
}

static void kv_fixture_rows(KvFixtureRows *r, int capacity) {
    const SessionKey k = kv_fixture_key();
    for (int l = 0; l < KV_FIXTURE_LAYERS; l++) {
        r->latent[l] = kv_fixture_alloc((size_t)capacity * k.kv_lora * sizeof(float));
        r->rope_key[l] = kv_fixture_alloc((size_t)capacity * k.qk_rope * sizeof(float));
        r->index_key[l] = k.layer_indexer[l]
                              ? kv_fixture_alloc((size_t)capacity * k.index_dim * sizeof(float))
                              : NULL;
    }
    r->rows = (KvRows){ capacity, r->latent, r->rope_key, r->index_key };
}

/* Every row of every layer: finite values that depend on (seed, layer, position, column). */
static void kv_fixture_fill(KvFixtureRows *r, uint32_t seed) {
    const SessionKey k = kv_fixture_key();
    const int dims[3] = { k.kv_lora, k.qk_rope, k.index_dim };
    for (int l = 0; l < KV_FIXTURE_LAYERS; l++) {
        float *const arrays[3] = { r->latent[l], r->rope_key[l], r->index_key[l] };
        for (int j = 0; j < 3; j++) {
            if (!arrays[j]) continue;
            for (size_t i = 0; i < (size_t)r->rows.capacity * dims[j]; i++) {
                uint32_t x = seed * 0x9E3779B9u ^ (uint32_t)(l * 3 + j) * 0x85EBCA6Bu ^
                             (uint32_t)i * 0xC2B2AE35u;
                x ^= x >> 15;
                x *= 0x2C1B3C6Du;
                x ^= x >> 12;
                arrays[j][i] = (float)((int32_t)(x >> 8) - (1 << 23)) / (1 << 20);
            }
        }
    }
}

/* 1 when positions [first, first + n) of every array of a and b are bit-identical. */
static int kv_fixture_same(const KvFixtureRows *a, const KvFixtureRows *b, int first, int n) {
    const SessionKey k = kv_fixture_key();
    for (int l = 0; l < KV_FIXTURE_LAYERS; l++) {
        if (memcmp(a->latent[l] + (size_t)first * k.kv_lora,
                   b->latent[l] + (size_t)first * k.kv_lora,
                   (size_t)n * k.kv_lora * sizeof(float)) ||
            memcmp(a->rope_key[l] + (size_t)first * k.qk_rope,
                   b->rope_key[l] + (size_t)first * k.qk_rope,
                   (size_t)n * k.qk_rope * sizeof(float)))
            return 0;
        if (k.layer_indexer[l] &&
            memcmp(a->index_key[l] + (size_t)first * k.index_dim,
                   b->index_key[l] + (size_t)first * k.index_dim,
                   (size_t)n * k.index_dim * sizeof(float)))
            return 0;
    }
    return 1;
}

__attribute__((unused)) static void kv_fixture_free(KvFixtureRows *r) {
    for (int l = 0; l < KV_FIXTURE_LAYERS; l++) {
        free(r->latent[l]);
        free(r->rope_key[l]);
        free(r->index_key[l]);
    }
}

#endif

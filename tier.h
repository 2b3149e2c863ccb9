/* tier.h — expert cache policy: which slot an expert goes to, how many slots fit a budget, and
   the usage history that lets a new process start from what earlier ones learned.

   One job: the decisions of the routed-expert cache, as pure functions over plain arrays and
   byte buffers, so they can be unit-tested (and fuzzed) without a model or a disk. The engine
   (glm.c) owns the memory, the files and the I/O; it asks this header which slot to use, how big
   the cache may be, and what a history file says.

   API
     int  tier_cache_init(TierCache *c, int n_slots, int n_experts);    0 ok, -1 out of memory
     void tier_cache_free(TierCache *c);
     int  tier_cache_lookup(TierCache *c, int expert);   slot holding `expert` (marked used) or -1
     void tier_note_request(TierCache *c, int expert);   count a router choice (hit or miss), for LFU
     int  tier_cache_victim(const TierCache *c, const unsigned char *busy);
                                                       an empty slot first, else (policy LRU) the
                                                       least recently used slot whose busy[slot] is
                                                       0, or (policy LFU) the one whose expert the
                                                       router chose least often, ties to the least
                                                       recently used; -1 if none
     void tier_cache_assign(TierCache *c, int slot, int expert);   slot now holds expert (marked used)
     void tier_seed_requests(TierCache *c, const uint32_t *counts);
                                                       LFU counts from a usage history, halved until
                                                       they sum to at most 2 per expert: a prior that
                                                       this run's requests outweigh within tens of
                                                       tokens, so a new workload is not locked out
     int  tier_hottest(const uint32_t *counts, int n, int *out, int k);
                                                       up to k ids with a count > 0, most counted
                                                       first (ties: lower id first); returns how many
     TierPlan tier_plan(const TierBudget *b);          expert slots per layer for a RAM budget

   Usage history: the decayed request counts of every (layer, expert), as a file
     size_t   tier_usage_size(int n_layers, int n_experts);     bytes of an encoded history
     void     tier_usage_encode(uint8_t *out, uint64_t fingerprint, int n_layers, int n_experts,
                                uint64_t tokens, const uint32_t *counts);
     int      tier_usage_decode(const uint8_t *buf, size_t len, uint64_t fingerprint, int n_layers,
                                int n_experts, uint32_t *counts, uint64_t *tokens, char *why, size_t why_len);
                  0 and counts[n_layers * n_experts] filled, or -1 and a reason in `why` (counts
                  untouched): wrong size, magic, version, shape, fingerprint or checksum. Reads only
                  inside [buf, buf + len).
     uint64_t tier_hash(uint64_t h, const void *data, size_t n);  FNV-1a 64 (start: TIER_HASH_SEED)
   Layout (little-endian): "GLMUSAGE", u32 version (1), u32 n_layers, u32 n_experts, u32 0,
   u64 fingerprint, u64 tokens, u32 counts[n_layers][n_experts], u64 FNV-1a of all bytes before it.

   LRU ties cannot happen: every use takes a fresh tick of a 64-bit clock. LFU counts every
   request of an expert, cached or not, and halves all counts once they add up to 16 requests per
   expert, so the cache follows a drifting distribution. */
#ifndef TIER_H
#define TIER_H

#include <stdint.h>

typedef enum { TIER_LRU = 0, TIER_LFU = 1 } TierPolicy;

typedef struct {
    int n_slots, n_experts;
    TierPolicy policy;
    int *slot_expert;          /* [n_slots]: expert held, -1 when empty */
    uint64_t *slot_last_use;   /* [n_slots] */
    int *expert_slot;          /* [n_experts]: slot holding the expert, -1 when not cached */
    uint64_t clock;
    uint32_t *requests;        /* [n_experts]: decayed request counts (LFU) */
    uint64_t requests_since_decay;
} TierCache;

typedef struct {
    double budget_bytes;       /* the whole process may use this much */
    double fixed_bytes;        /* resident dense weights + KV cache + scratch */
    double reserve_bytes;      /* left for the OS page cache and allocator slack */
    double slot_bytes;         /* one expert slot */
    int moe_layers;            /* layers that have routed experts */
    int n_experts;             /* routed experts per layer: more slots than this are useless */
    int requested_slots;       /* what the user asked for, per layer; <= 0: as many as fit */
} TierBudget;

typedef struct {
    int slots_per_layer;       /* 0 when even one slot per layer does not fit */
    double cache_bytes;        /* slots_per_layer * moe_layers * slot_bytes */
    /* budget - fixed - reserve - cache (may be negative when it does not fit) */
    double free_bytes;
} TierPlan;

#include <stddef.h>

#define TIER_HASH_SEED 0xcbf29ce484222325ull
#define TIER_USAGE_VERSION 1
#define TIER_USAGE_MAX_CELLS (1 << 24)   /* layers x experts: far above GLM-5.x's 79 x 256 */

int tier_cache_init(TierCache *c, int n_slots, int n_experts);
void tier_cache_free(TierCache *c);
int tier_cache_lookup(TierCache *c, int expert);
void tier_note_request(TierCache *c, int expert);
int tier_cache_victim(const TierCache *c, const unsigned char *busy);
void tier_cache_assign(TierCache *c, int slot, int expert);
int tier_hottest(const uint32_t *counts, int n, int *out, int k);
void tier_seed_requests(TierCache *c, const uint32_t *counts);
TierPlan tier_plan(const TierBudget *b);
size_t tier_usage_size(int n_layers, int n_experts);
void tier_usage_encode(uint8_t *out, uint64_t fingerprint, int n_layers, int n_experts,
                       uint64_t tokens, const uint32_t *counts);
int tier_usage_decode(const uint8_t *buf, size_t len, uint64_t fingerprint, int n_layers,
                      int n_experts, uint32_t *counts, uint64_t *tokens, char *why, size_t why_len);
uint64_t tier_hash(uint64_t h, const void *data, size_t n);

#endif /* TIER_H */

#ifdef TIER_IMPLEMENTATION
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tier_cache_init(TierCache *c, int n_slots, int n_experts) {
    c->n_slots = n_slots;
    c->n_experts = n_experts;
    c->clock = 0;
    c->slot_expert = malloc(sizeof(int) * (size_t)(n_slots > 0 ? n_slots : 1));
    c->slot_last_use = calloc((size_t)(n_slots > 0 ? n_slots : 1), sizeof(uint64_t));
    c->expert_slot = malloc(sizeof(int) * (size_t)(n_experts > 0 ? n_experts : 1));
    c->requests = calloc((size_t)(n_experts > 0 ? n_experts : 1), sizeof(uint32_t));
    c->requests_since_decay = 0;
    c->policy = TIER_LRU;
    if (!c->slot_expert || !c->slot_last_use || !c->expert_slot || !c->requests) {
        tier_cache_free(c);
        return -1;
    }
    for (int i = 0; i < n_slots; i++) c->slot_expert[i] = -1;
    for (int i = 0; i < n_experts; i++) c->expert_slot[i] = -1;
    return 0;
}

void tier_cache_free(TierCache *c) {
    free(c->slot_expert); free(c->slot_last_use); free(c->expert_slot); free(c->requests);
    c->slot_expert = NULL; c->slot_last_use = NULL; c->expert_slot = NULL; c->requests = NULL;
}

int tier_cache_lookup(TierCache *c, int expert) {
    if (expert < 0 || expert >= c->n_experts) return -1;
    int slot = c->expert_slot[expert];
    if (slot >= 0) c->slot_last_use[slot] = ++c->clock;
    return slot;
}

void tier_note_request(TierCache *c, int expert) {
    if (expert < 0 || expert >= c->n_experts) return;
    c->requests[expert]++;
    if (++c->requests_since_decay >= 16u * (uint64_t)c->n_experts) {
        for (int e = 0; e < c->n_experts; e++) c->requests[e] /= 2;
        c->requests_since_decay = 0;
    }
}

int tier_cache_victim(const TierCache *c, const unsigned char *busy) {
    int best = -1;
    for (int s = 0; s < c->n_slots; s++) {
        if (busy && busy[s]) continue;
        if (c->slot_expert[s] < 0) return s;
        if (best < 0) { best = s; continue; }
        if (c->policy == TIER_LFU) {
            uint32_t rs = c->requests[c->slot_expert[s]], rb = c->requests[c->slot_expert[best]];
            if (rs != rb) { if (rs < rb) best = s; continue; }
        }
        if (c->slot_last_use[s] < c->slot_last_use[best]) best = s;
    }
    return best;
}

void tier_cache_assign(TierCache *c, int slot, int expert) {
    int old = c->slot_expert[slot];
    if (old >= 0) c->expert_slot[old] = -1;
    if (expert >= 0) {
        int prev = c->expert_slot[expert];
        if (prev >= 0 && prev != slot) c->slot_expert[prev] = -1;
        c->expert_slot[expert] = slot;
    }
    c->slot_expert[slot] = expert;
    c->slot_last_use[slot] = ++c->clock;
}

TierPlan tier_plan(const TierBudget *b) {
    TierPlan p = { 0, 0.0, 0.0 };
    double room = b->budget_bytes - b->fixed_bytes - b->reserve_bytes;
    int most = b->n_experts;
    if (b->requested_slots > 0 && b->requested_slots < most) most = b->requested_slots;
    if (b->moe_layers <= 0 || b->slot_bytes <= 0) {
        p.slots_per_layer = most > 0 ? most : 0;
        p.free_bytes = room;
        return p;
    }
    double per_slot_all_layers = b->slot_bytes * b->moe_layers;
    double fit = room / per_slot_all_layers;
    int slots = fit >= most ? most : (int)fit;
    if (slots < 0) slots = 0;
    p.slots_per_layer = slots;
    p.cache_bytes = slots * per_slot_all_layers;
    p.free_bytes = room - p.cache_bytes;
    return p;
}

int tier_hottest(const uint32_t *counts, int n, int *out, int k) {
    int m = 0;
    if (k <= 0) return 0;
    for (int e = 0; e < n; e++) {   /* insertion into a sorted list of at most k */
        const uint32_t c = counts[e];
        if (!c || (m == k && counts[out[k - 1]] >= c)) continue;   /* ties keep the lower id */
        int i = m < k ? m++ : k - 1;
        while (i > 0 && counts[out[i - 1]] < c) { out[i] = out[i - 1]; i--; }
        out[i] = e;
    }
    return m;
}

void tier_seed_requests(TierCache *c, const uint32_t *counts) {
    int shift = 0;
    for (;;) {
        uint64_t sum = 0;
        for (int e = 0; e < c->n_experts; e++) sum += counts[e] >> shift;
        if (sum <= 2 * (uint64_t)c->n_experts || shift >= 31) break;
        shift++;
    }
    for (int e = 0; e < c->n_experts; e++) c->requests[e] = counts[e] >> shift;
    c->requests_since_decay = 0;
}

uint64_t tier_hash(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ull; }
    return h;
}

#define TIER_USAGE_HEADER 40

static void tier__put(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t tier__get(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

size_t tier_usage_size(int n_layers, int n_experts) {
    return TIER_USAGE_HEADER + 4 * (size_t)n_layers * (size_t)n_experts + 8;
}

void tier_usage_encode(uint8_t *out, uint64_t fingerprint, int n_layers, int n_experts,
                       uint64_t tokens, const uint32_t *counts) {
    memcpy(out, "GLMUSAGE", 8);
    tier__put(out + 8, TIER_USAGE_VERSION, 4);
    tier__put(out + 12, (uint64_t)n_layers, 4);
    tier__put(out + 16, (uint64_t)n_experts, 4);
    tier__put(out + 20, 0, 4);
    tier__put(out + 24, fingerprint, 8);
    tier__put(out + 32, tokens, 8);
    size_t cells = (size_t)n_layers * (size_t)n_experts;
    for (size_t i = 0; i < cells; i++) tier__put(out + TIER_USAGE_HEADER + 4 * i, counts[i], 4);
    size_t body = TIER_USAGE_HEADER + 4 * cells;
    tier__put(out + body, tier_hash(TIER_HASH_SEED, out, body), 8);
}

int tier_usage_decode(const uint8_t *buf, size_t len, uint64_t fingerprint, int n_layers,
                      int n_experts, uint32_t *counts, uint64_t *tokens, char *why,
                      size_t why_len) {
    if (len < TIER_USAGE_HEADER + 8) {
        snprintf(why, why_len, "%zu bytes: too short for a usage history", len);
        return -1;
    }
    if (memcmp(buf, "GLMUSAGE", 8)) {
        snprintf(why, why_len, "not a glm usage history (bad magic)");
        return -1;
    }
    uint64_t version = tier__get(buf + 8, 4), layers = tier__get(buf + 12, 4),
             experts = tier__get(buf + 16, 4);
    if (version != TIER_USAGE_VERSION || tier__get(buf + 20, 4)) {
        snprintf(why, why_len, "version %llu (this glm reads %d)", (unsigned long long)version,
                 TIER_USAGE_VERSION);
        return -1;
    }
    if (layers == 0 || experts == 0 || layers * experts > TIER_USAGE_MAX_CELLS) {
        snprintf(why, why_len, "shape %llu x %llu is out of range", (unsigned long long)layers,
                 (unsigned long long)experts);
        return -1;
    }
    if (len != tier_usage_size((int)layers, (int)experts)) {
        snprintf(why, why_len, "%zu bytes, but a %llu x %llu history has %zu (truncated or padded)",
                 len, (unsigned long long)layers, (unsigned long long)experts,
                 tier_usage_size((int)layers, (int)experts));
        return -1;
    }
    size_t body = len - 8;
    if (tier__get(buf + body, 8) != tier_hash(TIER_HASH_SEED, buf, body)) {
        snprintf(why, why_len, "checksum mismatch (corrupt)");
        return -1;
    }
    if (tier__get(buf + 24, 8) != fingerprint) {
        snprintf(why, why_len, "written for another model (fingerprint differs)");
        return -1;
    }
    if (layers != (uint64_t)n_layers || experts != (uint64_t)n_experts) {
        snprintf(why, why_len, "shape %llu x %llu, this model has %d x %d",
                 (unsigned long long)layers, (unsigned long long)experts, n_layers, n_experts);
        return -1;
    }
    for (size_t i = 0; i < layers * experts; i++)
        counts[i] = (uint32_t)tier__get(buf + TIER_USAGE_HEADER + 4 * i, 4);
    if (tokens) *tokens = tier__get(buf + 32, 8);
    return 0;
}

#endif /* TIER_IMPLEMENTATION */

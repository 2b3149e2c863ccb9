/* tier.h — expert cache policy: which slot an expert goes to, and how many slots fit a budget.

   One job: the decisions of the routed-expert cache, as pure functions over plain arrays, so
   they can be unit-tested without a model or a disk. The engine (glm.c) owns the memory and
   the I/O; it asks this header which slot to use and how big the cache may be.

   API
     int  tier_lru_init(TierLru *c, int n_slots, int n_experts);    0 ok, -1 out of memory
     void tier_lru_free(TierLru *c);
     int  tier_lru_lookup(TierLru *c, int expert);     slot holding `expert` (marked used) or -1
     void tier_note_request(TierLru *c, int expert);   count a router choice (hit or miss), for LFU
     int  tier_lru_victim(const TierLru *c, const unsigned char *busy);
                                                       an empty slot first, else (policy LRU) the
                                                       least recently used slot whose busy[slot] is
                                                       0, or (policy LFU) the one whose expert the
                                                       router chose least often, ties to the least
                                                       recently used; -1 if none
     void tier_lru_assign(TierLru *c, int slot, int expert);   slot now holds expert (marked used)
     TierPlan tier_plan(const TierBudget *b);          expert slots per layer for a RAM budget

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
} TierLru;

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
    double free_bytes;         /* budget - fixed - reserve - cache (may be negative when it does not fit) */
} TierPlan;

int tier_lru_init(TierLru *c, int n_slots, int n_experts);
void tier_lru_free(TierLru *c);
int tier_lru_lookup(TierLru *c, int expert);
void tier_note_request(TierLru *c, int expert);
int tier_lru_victim(const TierLru *c, const unsigned char *busy);
void tier_lru_assign(TierLru *c, int slot, int expert);
TierPlan tier_plan(const TierBudget *b);

#endif /* TIER_H */

#ifdef TIER_IMPLEMENTATION
#include <stdlib.h>

int tier_lru_init(TierLru *c, int n_slots, int n_experts) {
    c->n_slots = n_slots;
    c->n_experts = n_experts;
    c->clock = 0;
    c->slot_expert = malloc(sizeof(int) * (size_t)(n_slots > 0 ? n_slots : 1));
    c->slot_last_use = calloc((size_t)(n_slots > 0 ? n_slots : 1), sizeof(uint64_t));
    c->expert_slot = malloc(sizeof(int) * (size_t)(n_experts > 0 ? n_experts : 1));
    c->requests = calloc((size_t)(n_experts > 0 ? n_experts : 1), sizeof(uint32_t));
    c->requests_since_decay = 0;
    c->policy = TIER_LRU;
    if (!c->slot_expert || !c->slot_last_use || !c->expert_slot || !c->requests) { tier_lru_free(c); return -1; }
    for (int i = 0; i < n_slots; i++) c->slot_expert[i] = -1;
    for (int i = 0; i < n_experts; i++) c->expert_slot[i] = -1;
    return 0;
}

void tier_lru_free(TierLru *c) {
    free(c->slot_expert); free(c->slot_last_use); free(c->expert_slot); free(c->requests);
    c->slot_expert = NULL; c->slot_last_use = NULL; c->expert_slot = NULL; c->requests = NULL;
}

int tier_lru_lookup(TierLru *c, int expert) {
    if (expert < 0 || expert >= c->n_experts) return -1;
    int slot = c->expert_slot[expert];
    if (slot >= 0) c->slot_last_use[slot] = ++c->clock;
    return slot;
}

void tier_note_request(TierLru *c, int expert) {
    if (expert < 0 || expert >= c->n_experts) return;
    c->requests[expert]++;
    if (++c->requests_since_decay >= 16u * (uint64_t)c->n_experts) {
        for (int e = 0; e < c->n_experts; e++) c->requests[e] /= 2;
        c->requests_since_decay = 0;
    }
}

int tier_lru_victim(const TierLru *c, const unsigned char *busy) {
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

void tier_lru_assign(TierLru *c, int slot, int expert) {
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

#endif /* TIER_IMPLEMENTATION */

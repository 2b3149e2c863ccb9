/* Unit tests of tier.h: LRU slot choice and budget planning. */
#define TIER_IMPLEMENTATION
#include "tier.h"
#include <stdio.h>

static int failures;
#define CHECK(name, cond) do { if (cond) printf("PASS %s\n", name); else { printf("FAIL %s: %s\n", name, #cond); failures++; } } while (0)

int main(void) {
    TierLru c;
    CHECK("lru init", tier_lru_init(&c, 2, 8) == 0);
    CHECK("empty cache misses", tier_lru_lookup(&c, 3) == -1);
    int s0 = tier_lru_victim(&c, NULL);
    CHECK("empty slot chosen first", s0 == 0);
    tier_lru_assign(&c, s0, 3);
    int s1 = tier_lru_victim(&c, NULL);
    CHECK("second empty slot", s1 == 1);
    tier_lru_assign(&c, s1, 5);
    CHECK("hit returns its slot", tier_lru_lookup(&c, 3) == 0 && tier_lru_lookup(&c, 5) == 1);
    tier_lru_lookup(&c, 3);                       /* 3 is now most recent: 5 is the victim */
    CHECK("least recently used is the victim", tier_lru_victim(&c, NULL) == 1);
    unsigned char busy[2] = { 0, 1 };
    CHECK("busy slot is never the victim", tier_lru_victim(&c, busy) == 0);
    unsigned char all_busy[2] = { 1, 1 };
    CHECK("no victim when every slot is busy", tier_lru_victim(&c, all_busy) == -1);
    tier_lru_assign(&c, 1, 7);
    CHECK("evicted expert is gone", tier_lru_lookup(&c, 5) == -1 && tier_lru_lookup(&c, 7) == 1);
    tier_lru_assign(&c, 0, 7);                    /* moving an expert frees its old slot */
    CHECK("moved expert leaves one copy", c.slot_expert[1] == -1 && tier_lru_lookup(&c, 7) == 0);
    CHECK("out-of-range expert misses", tier_lru_lookup(&c, 99) == -1 && tier_lru_lookup(&c, -1) == -1);
    tier_lru_free(&c);

    /* LFU: the expert the router asks for least often goes first, whatever its recency */
    CHECK("lfu init", tier_lru_init(&c, 2, 8) == 0);
    c.policy = TIER_LFU;
    for (int i = 0; i < 5; i++) tier_note_request(&c, 1);
    tier_note_request(&c, 2);
    tier_lru_assign(&c, tier_lru_victim(&c, NULL), 1);
    tier_lru_assign(&c, tier_lru_victim(&c, NULL), 2);
    tier_lru_lookup(&c, 1);
    tier_lru_lookup(&c, 2);                       /* 2 is more recent, but rarer */
    CHECK("lfu evicts the rarely chosen expert", c.slot_expert[tier_lru_victim(&c, NULL)] == 2);
    for (int i = 0; i < 9; i++) tier_note_request(&c, 2);
    CHECK("lfu follows the counts", c.slot_expert[tier_lru_victim(&c, NULL)] == 1);
    tier_note_request(&c, 1);                     /* 6 vs 10 requests */
    for (int i = 0; i < 4; i++) tier_note_request(&c, 1);   /* 10 vs 10: a tie goes to the least recent (1) */
    CHECK("lfu ties go to the least recently used", c.slot_expert[tier_lru_victim(&c, NULL)] == 1);
    for (int i = 0; i < 16 * 8; i++) tier_note_request(&c, 3);   /* decay halves every count */
    CHECK("lfu counts decay", c.requests[1] <= 5 && c.requests[2] <= 5);
    tier_note_request(&c, -1);
    tier_note_request(&c, 8);                     /* out of range: ignored, no crash */
    tier_lru_free(&c);

    TierBudget b = { .budget_bytes = 100, .fixed_bytes = 40, .reserve_bytes = 10, .slot_bytes = 5,
                     .moe_layers = 2, .n_experts = 256, .requested_slots = 0 };
    TierPlan p = tier_plan(&b);
    CHECK("plan fills the budget", p.slots_per_layer == 5 && p.cache_bytes == 50 && p.free_bytes == 0);
    b.requested_slots = 3;
    p = tier_plan(&b);
    CHECK("plan honours a smaller request", p.slots_per_layer == 3 && p.free_bytes == 20);
    b.requested_slots = 64;
    p = tier_plan(&b);
    CHECK("plan lowers a request that does not fit", p.slots_per_layer == 5);
    b.n_experts = 4;
    p = tier_plan(&b);
    CHECK("never more slots than experts", p.slots_per_layer == 4);
    b.budget_bytes = 55;
    p = tier_plan(&b);
    CHECK("room for less than one slot per layer: zero slots", p.slots_per_layer == 0 && p.free_bytes == 5);
    b.budget_bytes = 45;
    p = tier_plan(&b);
    CHECK("nothing fits: zero slots, negative room", p.slots_per_layer == 0 && p.free_bytes < 0);
    return failures ? 1 : 0;
}

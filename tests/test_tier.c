/* Unit tests of tier.h: LRU/LFU slot choice, budget planning, the hottest experts, usage history
   files. */
#define TIER_IMPLEMENTATION
#include "tier.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

int main(void) {
    TierCache c;
    CHECK("lru init", tier_cache_init(&c, 2, 8) == 0);
    CHECK("empty cache misses", tier_cache_lookup(&c, 3) == -1);
    int s0 = tier_cache_victim(&c, NULL);
    CHECK("empty slot chosen first", s0 == 0);
    tier_cache_assign(&c, s0, 3);
    int s1 = tier_cache_victim(&c, NULL);
    CHECK("second empty slot", s1 == 1);
    tier_cache_assign(&c, s1, 5);
    CHECK("hit returns its slot", tier_cache_lookup(&c, 3) == 0 && tier_cache_lookup(&c, 5) == 1);
    tier_cache_lookup(&c, 3);                       /* 3 is now most recent: 5 is the victim */
    CHECK("least recently used is the victim", tier_cache_victim(&c, NULL) == 1);
    unsigned char busy[2] = { 0, 1 };
    CHECK("busy slot is never the victim", tier_cache_victim(&c, busy) == 0);
    unsigned char all_busy[2] = { 1, 1 };
    CHECK("no victim when every slot is busy", tier_cache_victim(&c, all_busy) == -1);
    tier_cache_assign(&c, 1, 7);
    CHECK("evicted expert is gone",
          tier_cache_lookup(&c, 5) == -1 && tier_cache_lookup(&c, 7) == 1);
    tier_cache_assign(&c, 0, 7);                    /* moving an expert frees its old slot */
    CHECK("moved expert leaves one copy", c.slot_expert[1] == -1 && tier_cache_lookup(&c, 7) == 0);
    CHECK("out-of-range expert misses",
          tier_cache_lookup(&c, 99) == -1 && tier_cache_lookup(&c, -1) == -1);
    tier_cache_free(&c);

    /* LFU: the expert the router asks for least often goes first, whatever its recency */
    CHECK("lfu init", tier_cache_init(&c, 2, 8) == 0);
    c.policy = TIER_LFU;
    for (int i = 0; i < 5; i++) tier_note_request(&c, 1);
    tier_note_request(&c, 2);
    tier_cache_assign(&c, tier_cache_victim(&c, NULL), 1);
    tier_cache_assign(&c, tier_cache_victim(&c, NULL), 2);
    tier_cache_lookup(&c, 1);
    tier_cache_lookup(&c, 2);                       /* 2 is more recent, but rarer */
    CHECK("lfu evicts the rarely chosen expert", c.slot_expert[tier_cache_victim(&c, NULL)] == 2);
    for (int i = 0; i < 9; i++) tier_note_request(&c, 2);
    CHECK("lfu follows the counts", c.slot_expert[tier_cache_victim(&c, NULL)] == 1);
    tier_note_request(&c, 1);                     /* 6 vs 10 requests */
    /* 10 vs 10: a tie goes to the least recent (1) */
    for (int i = 0; i < 4; i++) tier_note_request(&c, 1);
    CHECK("lfu ties go to the least recently used",
          c.slot_expert[tier_cache_victim(&c, NULL)] == 1);
    for (int i = 0; i < 16 * 8; i++) tier_note_request(&c, 3);   /* decay halves every count */
    CHECK("lfu counts decay", c.requests[1] <= 5 && c.requests[2] <= 5);
    tier_note_request(&c, -1);
    tier_note_request(&c, 8);                     /* out of range: ignored, no crash */
    tier_cache_free(&c);

    TierBudget b = { .budget_bytes = 100, .fixed_bytes = 40, .reserve_bytes = 10, .slot_bytes = 5,
                     .moe_layers = 2, .n_experts = 256, .requested_slots = 0 };
    TierPlan p = tier_plan(&b);
    CHECK("plan fills the budget",
          p.slots_per_layer == 5 && p.cache_bytes == 50 && p.free_bytes == 0);
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
    CHECK("room for less than one slot per layer: zero slots",
          p.slots_per_layer == 0 && p.free_bytes == 5);
    b.budget_bytes = 45;
    p = tier_plan(&b);
    CHECK("nothing fits: zero slots, negative room", p.slots_per_layer == 0 && p.free_bytes < 0);

    /* the hottest experts, most counted first, ties to the lower id, zero counts never */
    uint32_t counts[8] = { 0, 5, 9, 5, 0, 1, 9, 2 };
    int top[8];
    int n = tier_hottest(counts, 8, top, 3);
    CHECK("hottest: top 3 by count, ties to the lower id",
          n == 3 && top[0] == 2 && top[1] == 6 && top[2] == 1);
    n = tier_hottest(counts, 8, top, 8);
    CHECK("hottest: only experts with a count",
          n == 6 && top[3] == 3 && top[4] == 7 && top[5] == 5);
    CHECK("hottest: k = 0 gives none", tier_hottest(counts, 8, top, 0) == 0);

    /* a history seeds the LFU counts as a prior: halved until they sum to at most 2 per expert */
    TierCache seeded;
    tier_cache_init(&seeded, 2, 8);
    uint32_t hist8[8] = { 400, 100, 0, 33, 7, 0, 0, 1 };
    tier_seed_requests(&seeded, hist8);
    uint32_t sum8 = 0;
    for (int e = 0; e < 8; e++) sum8 += seeded.requests[e];
    CHECK("seeded counts sum to at most 2 per expert",
          sum8 <= 16 && seeded.requests[0] == 400 >> 5);
    CHECK("seeding keeps the order of the hot experts",
          seeded.requests[0] > seeded.requests[1] && seeded.requests[1] >= seeded.requests[3]);
    uint32_t small8[8] = { 3, 2, 1, 0, 0, 0, 0, 0 };
    tier_seed_requests(&seeded, small8);
    CHECK("a small history is taken as it is",
          seeded.requests[0] == 3 && seeded.requests[1] == 2 && seeded.requests[2] == 1);
    tier_cache_free(&seeded);

    /* usage history: round trip, then every kind of damage is refused with a reason */
    enum { L = 3, E = 5 };
    uint32_t hist[L * E], back[L * E];
    for (int i = 0; i < L * E; i++) hist[i] = (uint32_t)(i * 2654435761u);
    size_t len = tier_usage_size(L, E);
    uint8_t *buf = malloc(len), *bad = malloc(len + 1);
    tier_usage_encode(buf, 0x1234abcdull, L, E, 777, hist);
    uint64_t tokens = 0;
    char why[200];
    memset(back, 0, sizeof back);
    CHECK("usage round trip",
          tier_usage_decode(buf, len, 0x1234abcdull, L, E, back, &tokens, why, sizeof why) == 0 &&
              !memcmp(back, hist, sizeof hist) && tokens == 777);
    CHECK("usage: another model's fingerprint is refused",
          tier_usage_decode(buf, len, 0x1234abceull, L, E, back, NULL, why, sizeof why) == -1 &&
              strstr(why, "another model"));
    CHECK("usage: another shape is refused",
          tier_usage_decode(buf, len, 0x1234abcdull, L, E + 1, back, NULL, why, sizeof why) == -1);
    CHECK("usage: truncated is refused",
          tier_usage_decode(buf, len - 1, 0x1234abcdull, L, E, back, NULL, why, sizeof why) == -1 &&
              strstr(why, "truncated"));
    memcpy(bad, buf, len); bad[len] = 0;
    CHECK("usage: padded is refused",
          tier_usage_decode(bad, len + 1, 0x1234abcdull, L, E, back, NULL, why, sizeof why) == -1);
    int all_flips_refused = 1;
    /* any single flipped bit: magic, version, shape, size or checksum catches it */
    for (size_t i = 0; i < len; i++) {
        memcpy(bad, buf, len);
        bad[i] ^= (uint8_t)(1u << (i % 8));
        memcpy(back, hist, sizeof hist);
        if (tier_usage_decode(bad, len, 0x1234abcdull, L, E, back, NULL, why, sizeof why) != -1 ||
            memcmp(back, hist, sizeof hist))
            all_flips_refused = 0;
    }
    CHECK("usage: every flipped bit is refused and leaves the counts untouched", all_flips_refused);
    CHECK("usage: empty input is refused",
          tier_usage_decode(buf, 0, 0x1234abcdull, L, E, back, NULL, why, sizeof why) == -1);
    /* a huge layer count */
    memcpy(bad, buf, len); bad[12] = 0; bad[13] = 0; bad[14] = 0; bad[15] = 0x40;
    CHECK("usage: an absurd shape is refused before any size arithmetic",
          tier_usage_decode(bad, len, 0x1234abcdull, L, E, back, NULL, why, sizeof why) == -1 &&
              strstr(why, "out of range"));
    free(buf); free(bad);
    return failures ? 1 : 0;
}

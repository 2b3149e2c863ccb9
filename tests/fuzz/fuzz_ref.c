/* Fuzz target: the REF loader of validate.c (reference_parse: the oracle reference JSON with
   prompt_ids, full_ids, tf_pred, mtp_pred). glm.c and validate.c are included whole;
   reference_parse returns an error instead of exiting, so every input must end in a Reference that
   keeps its promises or in one error line. */
#pragma GCC diagnostic ignored "-Wunused-function"   /* most of glm.c is not called from here */
#include "glm.c"
#include "validate.c"   /* reference_parse */

#define REQUIRE(cond) do { if (!(cond)) abort(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Reference r;
    char err[512] = "";
    if (reference_parse((const char *)data, size, "REF", &r, err, sizeof err)) {
        REQUIRE(err[0] && !strchr(err, '\n') && !r.prompt.ids && !r.full.ids);
        return 0;
    }
    REQUIRE(r.prompt.n >= 1 && r.full.n >= r.prompt.n);
    REQUIRE(!memcmp(r.prompt.ids, r.full.ids, (size_t)r.prompt.n * sizeof(int)));
    const TokenList *lists[4] = { &r.prompt, &r.full, &r.tf_pred, &r.mtp_pred };
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < lists[k]->n; i++) REQUIRE(lists[k]->ids[i] >= 0);
    reference_free(&r);
    return 0;
}

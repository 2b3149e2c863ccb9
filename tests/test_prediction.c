/* A request's predicted output as a drafter (server.c, predicted_output_draft): what it drafts, and
   that a step looks at no more than PREDICTION_WINDOW tokens each way of where the last match
   ended, so a prediction of any size costs a step the same (a multi-MB prediction that never
   matches must not be rescanned whole at every token). main.c is included with GLM_NO_MAIN. */
#define GLM_NO_MAIN
#pragma GCC diagnostic ignored "-Wunused-function"
#include "../main.c"   /* the engine and its front ends, without main() */

#include "check.h"

int main(void) {
    enum { N = 3000000 };   /* about 12 MB of text */
    int *ids = xmalloc((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) ids[i] = 1000 + i % 7;   /* never contains the ids below */
    int history[64], out[8];
    PredictedOutput p = { ids, N, 0, 0 };
    /* the answer so far: 3 tokens that occur nowhere in the prediction */
    history[0] = 5; history[1] = 6; history[2] = 7;
    CHECK("a prediction that never matches drafts nothing",
          predicted_output_draft(&p, history, 3, 4, out) == 0);
    /* a match right after the cursor is drafted from */
    ids[10] = 6; ids[11] = 7; ids[12] = 42; ids[13] = 43;
    int n = predicted_output_draft(&p, history, 3, 2, out);
    CHECK("a match near the cursor drafts what follows it",
          n == 2 && out[0] == 42 && out[1] == 43 && p.cursor == 12);
    /* the same tail far beyond the window is out of reach: a step's cost does not grow with N */
    ids[10] = ids[11] = 1000;
    const int far = 12 + PREDICTION_WINDOW + 100;
    ids[far] = 6; ids[far + 1] = 7; ids[far + 2] = 44;
    n = predicted_output_draft(&p, history, 3, 1, out);
    CHECK("a match beyond PREDICTION_WINDOW of the cursor is not searched for", n == 0);
    /* within the window ahead it is found, and the cursor moves there */
    const int near = 12 + PREDICTION_WINDOW - 100;
    ids[near] = 6; ids[near + 1] = 7; ids[near + 2] = 45;
    n = predicted_output_draft(&p, history, 3, 1, out);
    CHECK("a match within the window ahead is found",
          n == 1 && out[0] == 45 && p.cursor == near + 2);
    /* and behind the cursor, within the window */
    ids[near] = ids[near + 1] = ids[far] = ids[far + 1] = 1000;
    ids[near - 50] = 6; ids[near - 49] = 7; ids[near - 48] = 46;
    n = predicted_output_draft(&p, history, 3, 1, out);
    CHECK("a match within the window behind the cursor is found", n == 1 && out[0] == 46);
    free(ids);
    return failures ? 1 : 0;
}

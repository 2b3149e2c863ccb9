/* The one check of the C unit tests: CHECK(name, cond) prints "PASS name", or "FAIL name: cond"
   and counts the failure (tests/run.sh reads these lines; main returns failures != 0). */
#ifndef TESTS_CHECK_H
#define TESTS_CHECK_H
#include <stdio.h>

static int failures;
#define CHECK(name, cond)                                                                          \
    do {                                                                                           \
        if (cond) printf("PASS %s\n", name);                                                       \
        else {                                                                                     \
            printf("FAIL %s: %s\n", name, #cond);                                                  \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#endif

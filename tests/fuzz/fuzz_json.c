/* Fuzz target: json.h's parser on arbitrary bytes, then a walk over the whole document that checks
   what the API promises (strings NUL-terminated at their length, json_getn finds every member key,
   out-of-range lookups return NULL). A broken promise aborts, so the fuzzer reports it. */
#define JSON_IMPLEMENTATION
#include "json.h"
#include <stdlib.h>
#include <string.h>

#define REQUIRE(cond) do { if (!(cond)) abort(); } while (0)

static void walk(const JsonValue *v, int depth) {
    REQUIRE(depth <= JSON_MAX_DEPTH + 1);
    size_t len = 0;
    switch (json_type(v)) {
    case JSON_STRING: {
        const char *s = json_str(v, &len);
        REQUIRE(s && s[len] == 0);
        break;
    }
    case JSON_NUMBER: {
        int64_t i;
        double d = json_num(v);
        REQUIRE(d == d);   /* numbers are never NaN */
        if (json_is_int(v, &i)) REQUIRE((double)i == d || llabs(i) > (1LL << 53));
        break;
    }
    case JSON_BOOL: REQUIRE(json_bool(v) == 0 || json_bool(v) == 1); break;
    case JSON_ARRAY:
        for (size_t k = 0; k < json_len(v); k++) walk(json_at(v, k), depth + 1);
        REQUIRE(json_at(v, json_len(v)) == NULL && json_get(v, "x") == NULL);
        break;
    case JSON_OBJECT:
        for (size_t k = 0; k < json_len(v); k++) {
            size_t klen;
            const char *key = json_key_at(v, k, &klen);
            REQUIRE(key && key[klen] == 0);
            /* json_getn finds the LAST member with a key (as Python does) */
            if (json_len(v) <= 256) {
                size_t last = k;
                for (size_t j = k + 1; j < json_len(v); j++) {
                    size_t jl;
                    const char *kj = json_key_at(v, j, &jl);
                    if (jl == klen && !memcmp(kj, key, klen)) last = j;
                }
                REQUIRE(json_getn(v, key, klen) == json_value_at(v, last));
            }
            walk(json_value_at(v, k), depth + 1);
        }
        REQUIRE(json_at(v, 0) == NULL && json_value_at(v, json_len(v)) == NULL);
        break;
    case JSON_NULL: break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    err[0] = 0;
    JsonDoc *doc = json_parse((const char *)data, size, err, sizeof err);
    if (!doc) {
        /* one line, says why */
        REQUIRE(err[0] && memchr(err, 0, sizeof err) && !strchr(err, '\n'));
        return 0;
    }
    walk(json_root(doc), 0);
    json_free(doc);
    return 0;
}

/* libFuzzer target: settings.h on arbitrary NAME=value bytes. The value is read as a setting of
   every kind (an accepted number must lie in the setting's range, a refusal must say name=value),
   the name gets a near-miss hint (none, or a setting of the table), and the edit distance
   between name and value must be symmetric and within [0, 3].
   Build: clang -g -O1 -fsanitize=fuzzer,address,undefined -I. tests/fuzz/fuzz_settings.c */
#define SETTINGS_IMPLEMENTATION
#include "settings.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const SettingSpec SPECS[] = {
    { "SNAP", SET_STR, "", 0, 0, "model folder" },
    { "NGEN", SET_INT, "-1", -1, 1e9, "tokens" },
    { "TEMPERATURE", SET_FLOAT, "0.7", 0, 100, "temperature" },
    { "CHAT", SET_BOOL, "-1", -1, 1, "chat" },
    { "THINK", SET_BOOL, "1", 0, 1, "thinking" },
    { "TF", SET_BOOL, "0", 0, 1, "teacher forcing" },
    { "SEED", SET_INT, "0", 0, 9007199254740991.0, "seed" },
};
static const SettingGroup GROUPS[] = { { "SNAP", "model" } };
static const char *const SYNONYMS[][2] = { { "TOP_P", "TEMPERATURE" }, { "MODEL", "SNAP" } };
static const SettingTable T = {
    "fuzz", SPECS, sizeof SPECS / sizeof SPECS[0], GROUPS, 1, SYNONYMS, 2,
};

static void check_hint(const char *name, const char *hint) {
    (void)name;
    if (!settings_find(&T, hint)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *all = malloc(size + 1);
    memcpy(all, data, size);
    all[size] = 0;   /* stops at the first NUL byte, as the environment does */
    char *eq = strchr(all, '=');
    char *name = all, *value = eq ? eq + 1 : all;
    if (eq) *eq = 0;
    char err[512];
    for (size_t i = 0; i < T.n_specs; i++) {
        const SettingSpec *s = &T.specs[i];
        if (s->kind == SET_STR) continue;
        double d = -12345;
        if (settings_number(&T, s, name, value, &d, err, sizeof err) == 0) {
            if (!(d >= s->min && d <= s->max)) abort();
            if (s->kind != SET_FLOAT && d != (double)(int64_t)d) abort();
        } else if (d != -12345 || strncmp(err, name, strlen(name) < 100 ? strlen(name) : 100)) {
            abort();
        }
    }
    const char *hint = settings_near_miss(&T, name);
    if (hint && !settings_find(&T, hint)) abort();
    const int ab = settings_edit_distance(name, value), ba = settings_edit_distance(value, name);
    if (ab != ba || ab < 0 || ab > 3) abort();
    settings_is_number(value);
    if (eq) *eq = '=';
    char *env[] = { all, NULL };
    settings_near_misses(&T, env, check_hint);
    free(all);
    return 0;
}

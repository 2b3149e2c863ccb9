/* Unit tests of settings.h on a small table of its own: reading values of each kind (ranges,
   whole numbers, NaN, the boolean words, -1 for "decide"), the environment over the default,
   the hints for variables that are not settings (typos, other programs' names, another case,
   system variables left alone), and the help table's exact format. */
#define SETTINGS_IMPLEMENTATION
#include "settings.h"
#include <stdlib.h>
#include <string.h>

#include "check.h"

static const SettingSpec SPECS[] = {
    { "SNAP", SET_STR, "", 0, 0, "model folder" },
    { "NGEN", SET_INT, "-1", -1, 1000, "tokens" },
    { "TEMP", SET_FLOAT, "0.7", 0, 100, "temperature" },
    { "USAGE", SET_STR, "", 0, 0, "history" },
    { "CHAT", SET_BOOL, "-1", -1, 1, "chat" },
    { "THINK", SET_BOOL, "1", 0, 1, "thinking" },
    { "TF", SET_BOOL, "0", 0, 1, "teacher forcing" },
    { "CTX", SET_INT, "0", 0, 4096, "context" },
    { "PROMPT", SET_STR, "", 0, 0, "the question" },
};
static const SettingGroup GROUPS[] = { { "SNAP", "model" }, { "THINK", "generation" } };
static const char *const SYNONYMS[][2] = { { "TOP_P", "TEMP" }, { "MAX_TOKENS", "NGEN" } };
static const SettingTable T = {
    "prog", SPECS, sizeof SPECS / sizeof SPECS[0], GROUPS, sizeof GROUPS / sizeof GROUPS[0],
    SYNONYMS, sizeof SYNONYMS / sizeof SYNONYMS[0],
};

static char err[256];

/* settings_number of `value` as setting `name`: 0 with *out, or -1 with err filled. */
static int num(const char *name, const char *value, double *out) {
    err[0] = 0;
    *out = -999;
    return settings_number(&T, settings_find(&T, name), name, value, out, err, sizeof err);
}

static int is_error(const char *name, const char *value, const char *message) {
    double d;
    return num(name, value, &d) == -1 && !strcmp(err, message) && d == -999;
}

static int is_value(const char *name, const char *value, double want) {
    double d;
    return num(name, value, &d) == 0 && d == want;
}

static void test_numbers(void) {
    CHECK("int: in range", is_value("NGEN", "12", 12) && is_value("NGEN", "-1", -1));
    CHECK("int: bounds included", is_value("CTX", "0", 0) && is_value("CTX", "4096", 4096));
    CHECK("int: exponent form of a whole number", is_value("CTX", "1e3", 1000));
    CHECK("int: above the range",
          is_error("CTX", "4097", "CTX=4097 is out of range [0, 4096]"));
    CHECK("int: below the range", is_error("NGEN", "-2", "NGEN=-2 is out of range [-1, 1000]"));
    CHECK("int: a fraction", is_error("NGEN", "1.5", "NGEN=1.5 must be a whole number"));
    CHECK("int: not a number", is_error("NGEN", "12x", "NGEN=12x is not a number"));
    CHECK("int: empty", is_error("NGEN", "", "NGEN= is not a number"));
    CHECK("int: beyond double", is_error("CTX", "1e999", "CTX=1e999 is not a number"));
    CHECK("float: a fraction", is_value("TEMP", "0.25", 0.25));
    CHECK("float: NaN is out of range",
          is_error("TEMP", "nan", "TEMP=nan is out of range [0, 100]"));
    CHECK("float: inf is out of range",
          is_error("TEMP", "inf", "TEMP=inf is out of range [0, 100]"));
    double d;
    CHECK("the variable named is the one given, the range the setting's",
          settings_number(&T, settings_find(&T, "TEMP"), "TEMPERATURE", "101", &d, err,
                          sizeof err) == -1 &&
              !strcmp(err, "TEMPERATURE=101 is out of range [0, 100]"));
    CHECK("is_number", settings_is_number("1") && settings_is_number("-0.5e2") &&
                           !settings_is_number("") && !settings_is_number("1 ") &&
                           !settings_is_number("0x") && !settings_is_number("1e400"));
}

static void test_bools(void) {
    static const char *const ones[] = { "1", "yes", "YES", "true", "True", "on", "ON" };
    static const char *const zeros[] = { "0", "no", "No", "false", "FALSE", "off", "Off" };
    int ok = 1;
    for (size_t i = 0; i < sizeof ones / sizeof *ones; i++) ok &= is_value("THINK", ones[i], 1);
    for (size_t i = 0; i < sizeof zeros / sizeof *zeros; i++) ok &= is_value("THINK", zeros[i], 0);
    CHECK("bool: the words for 1 and 0, any case", ok);
    CHECK("bool: -1 where the setting allows it", is_value("CHAT", "-1", -1));
    CHECK("bool: -1 refused where it does not",
          is_error("THINK", "-1",
                   "THINK=-1: expected 1 or 0 (yes/no, true/false and on/off also do)"));
    CHECK("bool: another word, with the program named for -1",
          is_error("CHAT", "maybe",
                   "CHAT=maybe: expected 1 or 0 (yes/no, true/false and on/off also do), or -1 "
                   "to let prog decide (see --help)"));
    CHECK("bool: 2 is not a boolean",
          is_error("TF", "2", "TF=2: expected 1 or 0 (yes/no, true/false and on/off also do)"));
}

static void test_values(void) {
    CHECK("find: unknown name", settings_find(&T, "NOPE") == NULL);
    CHECK("find: names are matched exactly", settings_find(&T, "snap") == NULL);
    const SettingSpec *ngen = settings_find(&T, "NGEN");
    unsetenv("NGEN");
    CHECK("value: the default when unset", !strcmp(settings_value(ngen), "-1"));
    setenv("NGEN", "5", 1);
    CHECK("value: the environment's when set", !strcmp(settings_value(ngen), "5"));
    setenv("NGEN", "", 1);
    CHECK("value: set and empty is empty, not the default", !strcmp(settings_value(ngen), ""));
    unsetenv("NGEN");
}

static int hint_is(const char *name, const char *want) {
    const char *h = settings_near_miss(&T, name);
    return want ? h && !strcmp(h, want) : h == NULL;
}

static void test_near_miss(void) {
    CHECK("near miss: a setting is not a miss", hint_is("NGEN", NULL) && hint_is("TF", NULL));
    CHECK("near miss: one typo", hint_is("NGEM", "NGEN") &&
                                     hint_is("PROMT", "PROMPT") && hint_is("SNAPP", "SNAP"));
    CHECK("near miss: two typos in a long name", hint_is("PROMTP", "PROMPT") &&
                                                     hint_is("NGNE", "NGEN"));
    CHECK("near miss: two typos are too many for 3 letters", hint_is("CXY", NULL) &&
                                                                 hint_is("CTY", "CTX"));
    CHECK("near miss: three typos are too many", hint_is("PXXXPT", NULL));
    CHECK("near miss: two-letter settings take no typos", hint_is("TG", NULL));
    CHECK("near miss: lower or mixed case", hint_is("prompt", "PROMPT") &&
                                                hint_is("Snap", "SNAP") && hint_is("tf", "TF"));
    CHECK("near miss: another program's name, any case",
          hint_is("TOP_P", "TEMP") && hint_is("max_tokens", "NGEN"));
    CHECK("near miss: system variables are left alone",
          hint_is("TERM", NULL) && hint_is("USER", NULL) && hint_is("PATH", NULL));
    CHECK("near miss: not a setting's shape (lower case, other bytes)",
          hint_is("ngen_x", NULL) && hint_is("NG-EN", NULL) && hint_is("", NULL));
    CHECK("near miss: long names",
          hint_is("PROMPTPROMPTPROMPTPROMPTPROMPTPROMPTPROMPTPROMPT", NULL));
}

static char warned[512];
static void collect(const char *name, const char *hint) {
    size_t n = strlen(warned);
    snprintf(warned + n, sizeof warned - n, "%s>%s;", name, hint);
}

static void test_near_misses(void) {
    char e1[] = "NGEM=3", e2[] = "HOME=/root", e3[] = "NOEQUALS", e4[] = "prompt=hi",
         e5[] = "TERM=xterm", e6[] = "SNAP=/m";
    /* longer than any name: skipped */
    char e7[] = "PROMPTPROMPTPROMPTPROMPTPROMPTPROMPTPROMPTX=1";
    char *env[] = { e1, e2, e3, e4, e5, e6, e7, NULL };
    warned[0] = 0;
    settings_near_misses(&T, env, collect);
    CHECK("near misses: each variable that looks like a setting, in order",
          !strcmp(warned, "NGEM>NGEN;prompt>PROMPT;"));
}

static void test_edit_distance(void) {
    CHECK("edit distance: equal", settings_edit_distance("ABC", "ABC") == 0);
    CHECK("edit distance: one substitution, insertion, deletion",
          settings_edit_distance("ABC", "ABD") == 1 &&
              settings_edit_distance("ABC", "ABCD") == 1 &&
              settings_edit_distance("ABC", "AC") == 1);
    CHECK("edit distance: a swap is two", settings_edit_distance("NGEN", "NGNE") == 2);
    CHECK("edit distance: counted up to 3", settings_edit_distance("ABCDEF", "UVWXYZ") == 3 &&
                                                settings_edit_distance("A", "ABCDE") == 3);
    CHECK("edit distance: symmetric", settings_edit_distance("KITTEN", "SITTING") ==
                                          settings_edit_distance("SITTING", "KITTEN"));
}

static void test_table(void) {
    FILE *f = tmpfile();
    settings_print_table(&T, f);
    char buf[2048];
    rewind(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    const char *want = "\nmodel:\n"
                       "  SNAP           default -      model folder\n"
                       "  NGEN           default -1     tokens\n"
                       "  TEMP           default 0.7    temperature\n"
                       "  USAGE          default -      history\n"
                       "  CHAT           default -1     chat\n"
                       "\ngeneration:\n"
                       "  THINK          default 1      thinking\n"
                       "  TF             default 0      teacher forcing\n"
                       "  CTX            default 0      context\n"
                       "  PROMPT         default -      the question\n";
    CHECK("help table: groups, columns, - for an empty default", !strcmp(buf, want));
}

int main(void) {
    test_numbers();
    test_bools();
    test_values();
    test_near_miss();
    test_near_misses();
    test_edit_distance();
    test_table();
    return failures != 0;
}

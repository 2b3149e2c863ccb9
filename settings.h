/* settings.h — a program's settings as environment variables, described by one table.

   One job: each setting is described once (name, kind, default, range, help) in a table the
   program owns; this header reads a value against its description, names the setting a stray
   variable was probably meant to be, and prints the table for --help. It keeps no table of its
   own: every call takes the program's SettingTable, and errors come back as text for the
   program to report (nothing here exits or writes to stderr).

   stb-style: #define SETTINGS_IMPLEMENTATION in exactly one file before including it.

   API
     const SettingSpec *settings_find(const SettingTable *t, const char *name);   NULL: none
     const char *settings_value(const SettingSpec *spec);
                  the environment's value of the setting, else its default
     int settings_number(const SettingTable *t, const SettingSpec *spec, const char *name,
                         const char *value, double *out, char *err, size_t n);
                  value read as setting spec (name is the variable it came from, for messages):
                  0 with *out, or -1 with err saying "name=value ..." and what is expected.
                  SET_BOOL: 1/0, yes/no, true/false, on/off in any case; -1 ("let the program
                  decide") where spec->min < 0. SET_INT: a whole number. Both numeric kinds
                  within [min, max] (NaN is outside).
     int settings_is_number(const char *v);   all of v is one number strtod reads, in range
     int settings_edit_distance(const char *a, const char *b);   Levenshtein, counted up to 3
     const char *settings_near_miss(const SettingTable *t, const char *name);
                  the setting a variable that is not one was probably meant to be, or NULL:
                  another program's name for it (t->synonyms), the name in another case, or, for
                  a name that looks like a setting (upper case, digits, _) and is not a common
                  system variable, one typo away, or two for names of 4 letters or more
     void settings_near_misses(const SettingTable *t, char **env,
                               void (*warn)(const char *name, const char *hint));
                  calls warn for each variable of env (NAME=value strings, NULL-terminated,
                  such as environ) that settings_near_miss names a setting for
     void settings_print_table(const SettingTable *t, FILE *f);
                  "  NAME           default VALUE  help" per setting, in table order ("-" for
                  an empty default), each group's "\nheading:\n" before its first setting */
#ifndef SETTINGS_H
#define SETTINGS_H

#include <stddef.h>
#include <stdio.h>

typedef enum { SET_STR, SET_INT, SET_FLOAT, SET_BOOL } SettingKind;

typedef struct {
    const char *name;
    SettingKind kind;
    const char *default_value;
    double min, max;   /* for SET_INT / SET_FLOAT; SET_BOOL: min -1 allows -1 ("decide for me") */
    const char *help;
} SettingSpec;

typedef struct {
    const char *first, *heading;   /* the help table prints heading before setting `first` */
} SettingGroup;

typedef struct {
    const char *program;   /* named in messages ("-1 to let PROGRAM decide") */
    const SettingSpec *specs;
    size_t n_specs;
    const SettingGroup *groups;
    size_t n_groups;
    const char *const (*synonyms)[2];   /* { another program's name, the setting's name } */
    size_t n_synonyms;
} SettingTable;

const SettingSpec *settings_find(const SettingTable *t, const char *name);
const char *settings_value(const SettingSpec *spec);
int settings_number(const SettingTable *t, const SettingSpec *spec, const char *name,
                    const char *value, double *out, char *err, size_t n);
int settings_is_number(const char *v);
int settings_edit_distance(const char *a, const char *b);
const char *settings_near_miss(const SettingTable *t, const char *name);
void settings_near_misses(const SettingTable *t, char **env,
                          void (*warn)(const char *name, const char *hint));
void settings_print_table(const SettingTable *t, FILE *f);

#endif /* SETTINGS_H */

#ifdef SETTINGS_IMPLEMENTATION
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const SettingSpec *settings_find(const SettingTable *t, const char *name) {
    for (size_t i = 0; i < t->n_specs; i++)
        if (!strcmp(t->specs[i].name, name)) return &t->specs[i];
    return NULL;
}

const char *settings_value(const SettingSpec *spec) {
    const char *v = getenv(spec->name);
    return v ? v : spec->default_value;
}

int settings_is_number(const char *v) {
    char *end;
    errno = 0;
    strtod(v, &end);
    return end != v && !*end && !errno;
}

/* The words a boolean setting takes for 1 and for 0, in any case. */
static const char *const SETTINGS_BOOL_WORDS[][2] = {
    { "1", "0" }, { "yes", "no" }, { "true", "false" }, { "on", "off" },
};

int settings_number(const SettingTable *t, const SettingSpec *spec, const char *name,
                    const char *v, double *out, char *err, size_t n) {
    if (spec->kind == SET_BOOL) {
        for (size_t i = 0; i < sizeof SETTINGS_BOOL_WORDS / sizeof SETTINGS_BOOL_WORDS[0]; i++)
            for (int w = 0; w < 2; w++)
                if (!strcasecmp(v, SETTINGS_BOOL_WORDS[i][w])) {
                    *out = w ? 0 : 1;
                    return 0;
                }
        if (spec->min < 0 && !strcmp(v, "-1")) {
            *out = -1;
            return 0;
        }
        if (spec->min < 0)
            snprintf(err, n, "%s=%s: expected 1 or 0 (yes/no, true/false and on/off also do), "
                     "or -1 to let %s decide (see --help)", name, v, t->program);
        else
            snprintf(err, n, "%s=%s: expected 1 or 0 (yes/no, true/false and on/off also do)",
                     name, v);
        return -1;
    }
    if (!settings_is_number(v)) {
        snprintf(err, n, "%s=%s is not a number", name, v);
        return -1;
    }
    const double d = strtod(v, NULL);
    if (spec->kind != SET_FLOAT && d != floor(d)) {
        snprintf(err, n, "%s=%s must be a whole number", name, v);
        return -1;
    }
    if (!(d >= spec->min && d <= spec->max)) {   /* written so that NaN fails it */
        snprintf(err, n, "%s=%s is out of range [%g, %g]", name, v, spec->min, spec->max);
        return -1;
    }
    *out = d;
    return 0;
}

int settings_edit_distance(const char *a, const char *b) {
    enum { MAX = 48 };
    const size_t la = strlen(a), lb = strlen(b);
    if (la >= MAX || lb >= MAX) return 3;
    if ((la > lb ? la - lb : lb - la) >= 3) return 3;
    int prev[MAX], cur[MAX];
    for (size_t j = 0; j <= lb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            const int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            const int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, (lb + 1) * sizeof(int));
    }
    return prev[lb] < 3 ? prev[lb] : 3;
}

/* Variables a shell, a desktop or a build usually exports: a few are two letters away from a
   setting (TERM from TEMP, USER from USAGE), so the two-letter check leaves them alone. */
static const char *const SETTINGS_SYSTEM_VARIABLES[] = {
    "HOME", "PATH", "TERM", "LANG", "LANGUAGE", "SHELL", "USER", "LOGNAME", "PWD", "OLDPWD", "MAIL",
    "HOSTNAME", "HOST", "EDITOR", "VISUAL", "PAGER", "LESS", "DISPLAY", "COLUMNS", "LINES", "SHLVL",
    "TMP", "TMPDIR", "TEMPDIR", "TZ", "COLORTERM", "LS_COLORS", "MANPATH", "INFOPATH", "HISTFILE",
    "HISTSIZE", "MAKEFLAGS", "MAKELEVEL", "MFLAGS", "CFLAGS", "CPPFLAGS", "LDFLAGS", "CC", "CXX",
    "GOPATH", "PYTHONPATH", "VIRTUAL_ENV", "SSH_TTY", "SUDO_USER", "SUDO_UID", "SUDO_GID",
    "SUDO_COMMAND", "TERM_PROGRAM", "XAUTHORITY", "DBUS_SESSION_BUS_ADDRESS", "DESKTOP_SESSION",
    "WAYLAND_DISPLAY", "MOTD_SHOWN", "CI", "CPATH", "ROOT", "TIME",
};

const char *settings_near_miss(const SettingTable *t, const char *name) {
    if (settings_find(t, name)) return NULL;
    for (size_t i = 0; i < t->n_synonyms; i++)
        if (!strcasecmp(t->synonyms[i][0], name)) return t->synonyms[i][1];
    for (size_t i = 0; i < t->n_specs; i++)   /* prompt=..., Snap=...: settings are upper case */
        if (!strcasecmp(t->specs[i].name, name)) return t->specs[i].name;
    for (const char *p = name; *p; p++)   /* settings look like THIS_NAME: others are left alone */
        if (!isupper((unsigned char)*p) && !isdigit((unsigned char)*p) && *p != '_')
            return NULL;
    for (size_t i = 0; i < sizeof SETTINGS_SYSTEM_VARIABLES / sizeof *SETTINGS_SYSTEM_VARIABLES;
         i++)
        if (!strcmp(SETTINGS_SYSTEM_VARIABLES[i], name)) return NULL;
    const char *two = NULL;
    for (size_t i = 0; i < t->n_specs; i++) {
        const char *s = t->specs[i].name;
        if (strlen(s) < 3) continue;   /* TF: any two letters are one edit away */
        const int d = settings_edit_distance(s, name);
        if (d == 1) return s;
        if (d == 2 && !two && strlen(name) >= 4 && strlen(s) >= 4) two = s;
    }
    return two;
}

void settings_near_misses(const SettingTable *t, char **env,
                          void (*warn)(const char *name, const char *hint)) {
    for (char **e = env; *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq || eq - *e > 40) continue;   /* no setting's name is that long */
        char name[48];
        memcpy(name, *e, (size_t)(eq - *e));
        name[eq - *e] = 0;
        const char *hint = settings_near_miss(t, name);
        if (hint) warn(name, hint);
    }
}

void settings_print_table(const SettingTable *t, FILE *f) {
    for (size_t i = 0; i < t->n_specs; i++) {
        const SettingSpec *s = &t->specs[i];
        for (size_t g = 0; g < t->n_groups; g++)
            if (!strcmp(t->groups[g].first, s->name)) fprintf(f, "\n%s:\n", t->groups[g].heading);
        fprintf(f, "  %-14s default %-6s %s\n", s->name,
                s->default_value[0] ? s->default_value : "-", s->help);
    }
}

#endif /* SETTINGS_IMPLEMENTATION */

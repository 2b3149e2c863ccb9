/* lined.h — a small line editor for a terminal.

   One job: read one line from a person at a terminal, with the usual editing keys, drawn on one
   row that scrolls sideways when the line is wider than the terminal. Keys come from a file
   descriptor and the drawing goes to another, so the editor runs as well on pipes (tests) as on
   a terminal. UTF-8 throughout: the cursor moves by characters (a combining mark moves with its
   base) and is placed by terminal columns (wide CJK characters and emoji take two).

   Needs tok.h (UTF-8 decoding, Unicode categories), included before this file.
   stb-style: #define LINED_IMPLEMENTATION in exactly one file before including it.

   API
     void lined_init(LineEditor *ed, int in_fd, int out_fd);   keys from in_fd, the line on out_fd
     LinedStatus lined_read(LineEditor *ed, const char *prompt);
                  edits one line into ed->buf (ed->len bytes, NUL-terminated, no newline):
                  LINED_OK at Enter, LINED_EOF at Ctrl-D on an empty line or end of input,
                  LINED_QUIT at Ctrl-C on an empty line. A line returned OK joins the history.
     void lined_history_add(LineEditor *ed, const char *line);
     void lined_free(LineEditor *ed);
     int  lined_char_columns(uint32_t cp);   terminal columns of a character: 0, 1 or 2
   The terminal (one per process: its saved mode is kept here, so a signal handler can restore it):
     int  lined_terminal_save(int fd);       remember fd's mode; 0, or -1 when fd is no terminal
     void lined_terminal_mode(int editing);  1: raw (no echo, no signals: Ctrl-C arrives as a key);
                                             0: no echo, Ctrl-C raises SIGINT, typed keys stay queued
     void lined_terminal_restore(void);      the saved mode again (async-signal-safe)
   lined_read switches to mode 1 while it edits and back to 0 after, once a terminal is saved.

   Keys: left/right, Home/End, Backspace/Delete, Ctrl-A/E/B/F/U/K/W/L, up/down (or Ctrl-P/N) for
   the history; Tab inserts a space; other control bytes and C1 controls are ignored, so the
   line never holds a byte that would drive the terminal.

   Cost: a redraw measures only the visible window (walking back from the cursor, then forward),
   O(terminal width), and input that is already waiting (a paste) is all applied before the line
   is redrawn once; a paste of n characters costs O(n) plus a few redraws. ed->measured counts
   characters whose width was computed and ed->redraws the redraws, so tests can bound the work. */
#ifndef LINED_H
#define LINED_H

#include <stddef.h>
#include <stdint.h>

typedef enum { LINED_OK, LINED_EOF, LINED_QUIT } LinedStatus;

typedef struct {
    int in_fd, out_fd;
    int width;                     /* terminal columns; 0: ask out_fd (80 when it is no terminal) */
    char *buf;                     /* the line (NUL-terminated) */
    size_t len, cap, cursor;       /* cursor: a byte offset at a character boundary */
    char **history;                /* lines returned OK, oldest first */
    int n_history;
    unsigned char in[4096];        /* keys read but not yet used (the rest of a paste) */
    size_t in_pos, in_len;
    unsigned long long measured, redraws;
} LineEditor;

void lined_init(LineEditor *ed, int in_fd, int out_fd);
LinedStatus lined_read(LineEditor *ed, const char *prompt);
void lined_history_add(LineEditor *ed, const char *line);
void lined_free(LineEditor *ed);
int lined_char_columns(uint32_t cp);
int lined_terminal_save(int fd);
void lined_terminal_mode(int editing);
void lined_terminal_restore(void);

#endif /* LINED_H */

#ifdef LINED_IMPLEMENTATION
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

static struct termios lined__saved;
static int lined__saved_fd = -1;
static volatile sig_atomic_t lined__saved_valid;

int lined_terminal_save(int fd) {
    if (tcgetattr(fd, &lined__saved)) return -1;
    lined__saved_fd = fd;
    lined__saved_valid = 1;
    return 0;
}

void lined_terminal_restore(void) {
    if (lined__saved_valid) tcsetattr(lined__saved_fd, TCSANOW, &lined__saved);
}

void lined_terminal_mode(int editing) {
    if (!lined__saved_valid) return;
    struct termios t = lined__saved;
    t.c_lflag &= ~(tcflag_t)(ECHO | ICANON);
    if (editing) {
        t.c_iflag &= ~(tcflag_t)(ICRNL | IXON | BRKINT | INPCK | ISTRIP);
        t.c_lflag &= ~(tcflag_t)(ISIG | IEXTEN);
    }
    t.c_cc[VMIN] = 1;
    t.c_cc[VTIME] = 0;
    tcsetattr(lined__saved_fd, TCSANOW, &t);   /* TCSANOW, not TCSAFLUSH: keep typed-ahead keys */
}

void lined_init(LineEditor *ed, int in_fd, int out_fd) {
    memset(ed, 0, sizeof *ed);
    ed->in_fd = in_fd;
    ed->out_fd = out_fd;
}

void lined_free(LineEditor *ed) {
    for (int i = 0; i < ed->n_history; i++) free(ed->history[i]);
    free(ed->history);
    free(ed->buf);
    ed->history = NULL;
    ed->buf = NULL;
    ed->n_history = 0;
    ed->len = ed->cap = ed->cursor = 0;
}

static int lined__reserve(LineEditor *ed, size_t need) {
    if (need + 1 <= ed->cap) return 0;
    size_t cap = ed->cap ? ed->cap : 256;
    while (cap < need + 1) cap *= 2;
    char *grown = realloc(ed->buf, cap);
    if (!grown) return -1;
    ed->buf = grown;
    ed->cap = cap;
    return 0;
}

static void lined__set(LineEditor *ed, const char *s) {
    size_t n = strlen(s);
    if (lined__reserve(ed, n)) n = 0;
    ed->len = ed->cursor = 0;
    if (!ed->buf) return;
    memcpy(ed->buf, s, n);
    ed->buf[n] = 0;
    ed->len = ed->cursor = n;
}

void lined_history_add(LineEditor *ed, const char *line) {
    if (!line[0] || (ed->n_history && !strcmp(ed->history[ed->n_history - 1], line))) return;
    char **grown = realloc(ed->history, (size_t)(ed->n_history + 1) * sizeof(char *));
    if (!grown) return;
    ed->history = grown;
    char *copy = strdup(line);
    if (copy) ed->history[ed->n_history++] = copy;
}

/* Terminal columns of one character: 0 for combining marks, 2 for East Asian wide and fullwidth
   characters and emoji, else 1 (a compact stand-in for wcwidth, which depends on the locale). */
int lined_char_columns(uint32_t cp) {
    static const uint32_t wide[][2] = {
        { 0x1100, 0x115F },   { 0x2E80, 0x303E },   { 0x3041, 0x33FF }, { 0x3400, 0x4DBF },
        { 0x4E00, 0x9FFF },   { 0xA000, 0xA4CF },   { 0xAC00, 0xD7A3 }, { 0xF900, 0xFAFF },
        { 0xFE30, 0xFE4F },   { 0xFF00, 0xFF60 },   { 0xFFE0, 0xFFE6 }, { 0x1F300, 0x1F64F },
        { 0x1F900, 0x1F9FF }, { 0x20000, 0x3FFFD },
    };
    if (cp >= 0x300 && tok_uni_category(cp) == TOK_CAT_M) return 0;
    for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++)
        if (cp >= wide[i][0] && cp <= wide[i][1]) return 2;
    return 1;
}

/* Columns of the character starting at byte i (counted as work). */
static int lined__columns_at(LineEditor *ed, size_t i, size_t *next) {
    uint32_t cp;
    int status;
    size_t k = tok_utf8_next((const unsigned char *)ed->buf + i, ed->len - i, &cp, &status);
    ed->measured++;
    if (next) *next = i + (k ? k : 1);
    return lined_char_columns(cp);
}

static int lined__is_continuation(char c) { return ((unsigned char)c & 0xC0) == 0x80; }

/* The start of the character (with its combining marks) before / after byte offset i. */
static size_t lined__char_before(LineEditor *ed, size_t i) {
    do {
        do i--; while (i > 0 && lined__is_continuation(ed->buf[i]));
    } while (i > 0 && lined__columns_at(ed, i, NULL) == 0);
    return i;
}

static size_t lined__char_after(LineEditor *ed, size_t i) {
    do {
        do i++; while (i < ed->len && lined__is_continuation(ed->buf[i]));
    } while (i < ed->len && lined__columns_at(ed, i, NULL) == 0);
    return i;
}

/* Columns of buf[a, b), a and b at character starts. */
static int lined__columns(LineEditor *ed, size_t a, size_t b) {
    int cols = 0;
    for (size_t i = a; i < b;) cols += lined__columns_at(ed, i, &i);
    return cols;
}

static void lined__write(int fd, const char *s, size_t n) {
    while (n) {
        ssize_t k = write(fd, s, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return;
        s += k;
        n -= (size_t)k;
    }
}

static int lined__width(const LineEditor *ed) {
    if (ed->width > 0) return ed->width;
    struct winsize ws;
    if (ioctl(ed->out_fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    return 80;
}

/* Redraws the prompt and the visible part of the line on one row. The window shows as much as
   fits before the cursor (so the cursor stays visible), then what fits after it. Both walks
   start at the cursor and stop at the window's edges: the cost is the window, not the line. */
static void lined__refresh(LineEditor *ed, const char *prompt) {
    const int prompt_cols = (int)strlen(prompt);
    int room = lined__width(ed) - prompt_cols - 1;
    if (room < 1) room = 1;
    size_t start = ed->cursor, end = ed->cursor;
    int before = 0, used;
    while (start > 0) {
        size_t prev = lined__char_before(ed, start);
        int w = lined__columns(ed, prev, start);
        if (before + w > room) break;
        before += w;
        start = prev;
    }
    used = before;
    while (end < ed->len) {
        size_t next = lined__char_after(ed, end);
        int w = lined__columns(ed, end, next);
        if (used + w > room) break;
        used += w;
        end = next;
    }
    size_t cap = (end - start) + strlen(prompt) + 32, n = 0;
    char *out = malloc(cap);
    if (!out) return;
    n += (size_t)snprintf(out + n, cap - n, "\r%s", prompt);
    memcpy(out + n, ed->buf + start, end - start);
    n += end - start;
    n += (size_t)snprintf(out + n, cap - n, "\033[K\r");
    const int cursor_col = prompt_cols + before;
    if (cursor_col > 0) n += (size_t)snprintf(out + n, cap - n, "\033[%dC", cursor_col);
    lined__write(ed->out_fd, out, n);
    free(out);
    ed->redraws++;
}

/* The next input byte: 1, or 0 at end of input or on an error. */
static int lined__read_byte(LineEditor *ed, unsigned char *c) {
    while (ed->in_pos == ed->in_len) {
        ssize_t k = read(ed->in_fd, ed->in, sizeof ed->in);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return 0;
        ed->in_pos = 0;
        ed->in_len = (size_t)k;
    }
    *c = ed->in[ed->in_pos++];
    return 1;
}

/* More input is waiting right now (the rest of a paste): redraw after it, not before. */
static int lined__input_waiting(const LineEditor *ed) {
    if (ed->in_pos < ed->in_len) return 1;
    struct pollfd p = { ed->in_fd, POLLIN, 0 };
    return poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

enum { LINED__KEY_NONE = 0x100, LINED__KEY_LEFT, LINED__KEY_RIGHT, LINED__KEY_UP, LINED__KEY_DOWN,
       LINED__KEY_HOME, LINED__KEY_END, LINED__KEY_DELETE };

/* After ESC: decodes CSI / SS3 sequences of the keys we handle; anything else is swallowed. */
static int lined__read_escape(LineEditor *ed) {
    unsigned char c, kind;
    if (!lined__read_byte(ed, &kind)) return LINED__KEY_NONE;
    if (kind != '[' && kind != 'O') return LINED__KEY_NONE;
    int number = 0;
    for (;;) {
        if (!lined__read_byte(ed, &c)) return LINED__KEY_NONE;
        if (c >= '0' && c <= '9') { if (number < 1000) number = number * 10 + (c - '0'); continue; }
        if (c == ';') continue;
        break;
    }
    switch (c) {
    case 'A': return LINED__KEY_UP;
    case 'B': return LINED__KEY_DOWN;
    case 'C': return LINED__KEY_RIGHT;
    case 'D': return LINED__KEY_LEFT;
    case 'H': return LINED__KEY_HOME;
    case 'F': return LINED__KEY_END;
    case '~':
        return number == 1 || number == 7   ? LINED__KEY_HOME
               : number == 4 || number == 8 ? LINED__KEY_END
               : number == 3                ? LINED__KEY_DELETE
                                            : LINED__KEY_NONE;
    default: return LINED__KEY_NONE;
    }
}

static void lined__delete(LineEditor *ed, size_t from, size_t to) {
    memmove(ed->buf + from, ed->buf + to, ed->len - to + 1);
    ed->len -= to - from;
    if (ed->cursor > to) ed->cursor -= to - from;
    else if (ed->cursor > from) ed->cursor = from;
}

static void lined__insert(LineEditor *ed, const char *s, size_t n) {
    if (lined__reserve(ed, ed->len + n)) return;
    memmove(ed->buf + ed->cursor + n, ed->buf + ed->cursor, ed->len - ed->cursor + 1);
    memcpy(ed->buf + ed->cursor, s, n);
    ed->len += n;
    ed->cursor += n;
}

LinedStatus lined_read(LineEditor *ed, const char *prompt) {
    lined__set(ed, "");
    if (!ed->buf) return LINED_EOF;   /* out of memory */
    int browsing = ed->n_history;     /* index into history; n_history = the new line */
    char *draft = NULL;               /* the new line while older ones are shown */
    lined_terminal_mode(1);
    lined__refresh(ed, prompt);
    LinedStatus status = LINED_OK;
    int stale = 0;                    /* the drawn line is behind the buffer */
    for (;;) {
        unsigned char c;
        if (!lined__read_byte(ed, &c)) { status = LINED_EOF; break; }
        int key = c == 27 ? lined__read_escape(ed) : c;
        if (key == '\r' || key == '\n') break;
        switch (key) {
        case 3:    /* Ctrl-C */
            if (!ed->len) { status = LINED_QUIT; goto done; }
            lined__set(ed, "");
            break;
        case 4:    /* Ctrl-D */
            if (!ed->len) { status = LINED_EOF; goto done; }
            if (ed->cursor < ed->len)
                lined__delete(ed, ed->cursor, lined__char_after(ed, ed->cursor));
            break;
        case LINED__KEY_DELETE:
            if (ed->cursor < ed->len)
                lined__delete(ed, ed->cursor, lined__char_after(ed, ed->cursor));
            break;
        case 127: case 8:   /* Backspace: one whole character */
            if (ed->cursor > 0) lined__delete(ed, lined__char_before(ed, ed->cursor), ed->cursor);
            break;
        case 1: case LINED__KEY_HOME: ed->cursor = 0; break;
        case 5: case LINED__KEY_END: ed->cursor = ed->len; break;
        case 2:
        case LINED__KEY_LEFT:
            if (ed->cursor > 0) ed->cursor = lined__char_before(ed, ed->cursor);
            break;
        case 6:
        case LINED__KEY_RIGHT:
            if (ed->cursor < ed->len) ed->cursor = lined__char_after(ed, ed->cursor);
            break;
        case 21: lined__delete(ed, 0, ed->cursor); break;          /* Ctrl-U */
        case 11: lined__delete(ed, ed->cursor, ed->len); break;    /* Ctrl-K */
        /* Ctrl-W: the word before the cursor */
        case 23: {
            size_t i = ed->cursor;
            while (i > 0 && ed->buf[i - 1] == ' ') i--;
            while (i > 0 && ed->buf[i - 1] != ' ') i--;
            lined__delete(ed, i, ed->cursor);
            break;
        }
        case 12: lined__write(ed->out_fd, "\033[H\033[2J", 7); break;   /* Ctrl-L */
        /* history: Ctrl-P / Ctrl-N too */
        case 16: case LINED__KEY_UP: case 14: case LINED__KEY_DOWN: {
            int to = browsing + (key == 16 || key == LINED__KEY_UP ? -1 : 1);
            if (to < 0 || to > ed->n_history) break;
            if (browsing == ed->n_history) { free(draft); draft = strdup(ed->buf); }
            browsing = to;
            lined__set(ed,
                       browsing == ed->n_history ? (draft ? draft : "") : ed->history[browsing]);
            break;
        }
        case '\t': lined__insert(ed, " ", 1); break;
        default:
            if (key >= 0x20 && key < 0x7F) {
                char ch = (char)key;
                lined__insert(ed, &ch, 1);
            } else if (key >= 0xC2 && key <= 0xF4) {   /* a UTF-8 character: read it whole */
                unsigned char utf8[4] = { (unsigned char)key };
                size_t need = key >= 0xF0 ? 4 : key >= 0xE0 ? 3 : 2, got = 1;
                while (got < need && lined__read_byte(ed, &c)) {
                    /* not part of it: keep it for the next key */
                    if ((c & 0xC0) != 0x80) { ed->in_pos--; break; }
                    utf8[got++] = c;
                }
                uint32_t cp;
                int bad;
                /* whole, well-formed, and not a C1 control (U+0080..U+009F: CSI and friends) */
                if (got == need && tok_utf8_next(utf8, need, &cp, &bad) == need && !bad &&
                    cp > 0x9F)
                    lined__insert(ed, (const char *)utf8, need);
            }
            break;   /* other control bytes are ignored */
        }
        stale = 1;
        if (!lined__input_waiting(ed)) { lined__refresh(ed, prompt); stale = 0; }
    }
done:
    if (stale) lined__refresh(ed, prompt);
    free(draft);
    lined__write(ed->out_fd, "\r\n", 2);
    lined_terminal_mode(0);
    if (status == LINED_OK) lined_history_add(ed, ed->buf);
    return status;
}

#endif /* LINED_IMPLEMENTATION */

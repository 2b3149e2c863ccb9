/* Unit tests of lined.h: the editor is fed key bytes through a pipe and draws into a temporary
   file, so every test runs without a terminal. Editing keys, UTF-8 / wide / combining widths,
   the visible window of a scrolled long line, history browsing, refused control bytes, and the
   work a long paste costs (counted, not timed). */
#define JSON_IMPLEMENTATION
#include "json.h"   /* tok.h needs it */
#define TOK_IMPLEMENTATION
#include "tok.h"
#define LINED_IMPLEMENTATION
#include "lined.h"
#include <stdio.h>

#include "check.h"

static char drawn[1 << 20];   /* what the editor wrote */
static size_t drawn_len;

/* Feeds `keys` to ed (through a pipe, or a file when they do not fit one), runs lined_read once
   with prompt "> ", and captures what it drew. */
static LinedStatus feed_into(LineEditor *ed, const char *keys, size_t n) {
    FILE *out = tmpfile(), *in = NULL;
    int fds[2] = { -1, -1 };
    if (n <= 60000) {
        if (pipe(fds)) return LINED_EOF;
        if (n && write(fds[1], keys, n) != (ssize_t)n) return LINED_EOF;
        close(fds[1]);
        ed->in_fd = fds[0];
    } else {
        in = tmpfile();
        fwrite(keys, 1, n, in);
        fflush(in);
        rewind(in);
        ed->in_fd = fileno(in);
    }
    ed->out_fd = fileno(out);
    LinedStatus st = lined_read(ed, "> ");
    rewind(out);
    drawn_len = fread(drawn, 1, sizeof drawn - 1, out);
    drawn[drawn_len] = 0;
    fclose(out);
    if (in) fclose(in);
    if (fds[0] >= 0) close(fds[0]);
    ed->in_pos = ed->in_len = 0;   /* the next feed is a fresh stream */
    return st;
}

static LinedStatus feed(LineEditor *ed, const char *keys) {
    return feed_into(ed, keys, strlen(keys));
}

/* The last redraw in `drawn` ("\r> ...\033[K\r\033[NC"), or "" */
static const char *last_draw(void) {
    const char *p = drawn, *last = "";
    while ((p = strstr(p, "\r> "))) { last = p; p++; }
    return last;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !memcmp(s + a - b, suffix, b);
}

int main(void) {
    LineEditor ed;
    lined_init(&ed, -1, -1);
    ed.width = 300;

    /* ---- editing --------------------------------------------------------------------------- */
    CHECK("typing and Enter",
          feed(&ed, "hello\r") == LINED_OK && !strcmp(ed.buf, "hello") && ed.len == 5);
    CHECK("the line is drawn with the cursor after it, then the Enter",
          !strcmp(last_draw(), "\r> hello\033[K\r\033[7C\r\n"));
    CHECK("Ctrl-U, arrows, Delete, Ctrl-E, UTF-8 backspace",
          feed(&ed, "xyz\x15Hlo\x1b[D\x1b[Del\x05 \xc3\xa9\x7f\x7f\r") == LINED_OK &&
              !strcmp(ed.buf, "Hello"));
    CHECK("Home/End in every encoding, Ctrl-A/E", feed(&ed, "bc\x1b[Ha\x1b[F!\x1b[1~<\x1b[4~>\x01["
                                                            "\x05]\x1bOH(\x1bOF)\r") == LINED_OK &&
                                                      !strcmp(ed.buf, "([<abc!>])"));
    CHECK("Ctrl-B / Ctrl-F move by one character", feed(&ed, "ac\x02\x02\x06"
                                                             "b\r") == LINED_OK &&
                                                       !strcmp(ed.buf, "abc"));
    CHECK("Delete and Ctrl-D delete under the cursor",
          feed(&ed, "abcd\x01\x1b[3~\x04\r") == LINED_OK && !strcmp(ed.buf, "cd"));
    CHECK("Ctrl-W deletes the word before the cursor",
          feed(&ed, "one two  \x17\r") == LINED_OK && !strcmp(ed.buf, "one "));
    CHECK("Ctrl-K kills to the end",
          feed(&ed, "keep drop\x1b[D\x1b[D\x1b[D\x1b[D\x0b\r") == LINED_OK && !strcmp(ed.buf, "keep"
                                                                                              " "));
    CHECK("Tab inserts a space", feed(&ed, "a\tb\r") == LINED_OK && !strcmp(ed.buf, "a b"));
    CHECK("Ctrl-C clears a line and editing goes on",
          feed(&ed, "junk\x03ok\r") == LINED_OK && !strcmp(ed.buf, "ok"));
    CHECK("Ctrl-C on an empty line quits", feed(&ed, "\x03") == LINED_QUIT);
    CHECK("Ctrl-D on an empty line is end of input", feed(&ed, "\x04") == LINED_EOF);
    CHECK("end of input mid-line is end of input", feed(&ed, "abc") == LINED_EOF);
    CHECK("\\n ends a line as \\r does", feed(&ed, "lf\n") == LINED_OK && !strcmp(ed.buf, "lf"));
    CHECK("an unknown escape sequence is swallowed",
          feed(&ed, "a\x1b[99Zb\x1b[5~c\r") == LINED_OK && !strcmp(ed.buf, "abc"));

    /* ---- bytes that would drive the terminal never enter the line ---------------------------- */
    CHECK("control bytes (BEL, the C1 control CSI U+009B) are ignored",
          feed(&ed, "a\x07\xc2\x9b" "b\r") == LINED_OK && !strcmp(ed.buf, "ab"));
    CHECK("... NUL too", feed_into(&ed, "x\0y\x07\r", 5) == LINED_OK && !strcmp(ed.buf, "xy"));
    CHECK("a broken UTF-8 sequence is dropped and the byte after it kept",
          feed(&ed, "\xe4\xbdX\r") == LINED_OK && !strcmp(ed.buf, "X"));
    CHECK("an overlong encoding is refused",
          feed(&ed, "\xe0\x80\xafok\r") == LINED_OK && !strcmp(ed.buf, "ok"));
    CHECK("nothing drawn holds a control byte but our own CR and ESC",
          feed(&ed, "\x07\x11\x13\x1a\x1c\x1d\x1e\x1fz\r") == LINED_OK && !strcmp(ed.buf, "z") &&
              !strpbrk(drawn, "\x07\x11\x13\x1a\x1c\x1f"));

    /* ---- widths ------------------------------------------------------------------------------ */
    CHECK("columns: ASCII 1, CJK 2, Hangul 2, emoji 2, combining 0, fullwidth 2",
          lined_char_columns('a') == 1 && lined_char_columns(0x4F60) == 2 &&
              lined_char_columns(0xAC00) == 2 && lined_char_columns(0x1F600) == 2 &&
              lined_char_columns(0x301) == 0 && lined_char_columns(0xFF21) == 2);
    CHECK("cursor placed by columns: 你 + e + U+0301 -> column 2+2+1",
          feed(&ed, "\xe4\xbd\xa0"
                    "e\xcc\x81\r") == LINED_OK &&
              !strcmp(last_draw(), "\r> \xe4\xbd\xa0"
                                   "e\xcc\x81\033[K\r\033[5C\r\n"));
    CHECK("left arrow steps over a combining mark with its base",
          feed(&ed, "ae\xcc\x81\x1b[D!\r") == LINED_OK && !strcmp(ed.buf, "a!e\xcc\x81"));
    CHECK("backspace deletes a base with its combining marks",
          feed(&ed, "xe\xcc\x81\xcc\x82\x7f\r") == LINED_OK && !strcmp(ed.buf, "x"));
    CHECK("a 4-byte character (emoji) is one character",
          feed(&ed, "\xf0\x9f\x98\x80\x7fk\r") == LINED_OK && !strcmp(ed.buf, "k"));

    /* ---- the visible window of a long line --------------------------------------------------- */
    ed.width = 20;   /* "> " + 17 columns + 1 spare */
    CHECK("a long line scrolls: the 17 columns before the cursor are shown",
          feed(&ed, "abcdefghijklmnopqrstuvwxyz\r") == LINED_OK &&
              !strcmp(last_draw(), "\r> jklmnopqrstuvwxyz\033[K\r\033[19C\r\n"));
    CHECK("after Home the start is shown, cursor after the prompt",
          feed(&ed, "abcdefghijklmnopqrstuvwxyz\x01\r") == LINED_OK &&
              !strcmp(last_draw(), "\r> abcdefghijklmnopq\033[K\r\033[2C\r\n"));
    CHECK("in the middle: what fits before the cursor, then what fits after",
          feed(&ed, "abcdefghijklmnopqrstuvwxyz\x01\x1b[C\x1b[C\x1b[C\x1b[C\x1b[C\r") == LINED_OK &&
          !strcmp(last_draw(), "\r> abcdefghijklmnopq\033[K\r\033[7C\r\n"));
    CHECK("wide characters: never half of one in the window",
          feed(&ed, "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xbd\xa0\xe5\xa5\xbd\xe4"
                    "\xbd\xa0\xe5\xa5\xbd\xe4\xbd\xa0\r") == LINED_OK &&
              !strcmp(last_draw(), "\r> "
                                   "\xe5\xa5\xbd\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xbd\xa0\xe5\xa5\xbd"
                                   "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xbd\xa0\033[K\r\033[18C\r\n"));
    ed.width = 300;

    /* ---- history ----------------------------------------------------------------------------- */
    LineEditor h;
    lined_init(&h, -1, -1);
    h.width = 300;
    feed(&h, "one\r");
    feed(&h, "two\r");
    feed(&h, "two\r");
    feed(&h, "\r");
    CHECK("history keeps OK lines, no repeats, no empty lines",
          h.n_history == 2 && !strcmp(h.history[0], "one") && !strcmp(h.history[1], "two"));
    CHECK("up recalls the last line", feed(&h, "\x1b[A\r") == LINED_OK && !strcmp(h.buf, "two"));
    CHECK("up twice recalls the one before",
          feed(&h, "\x1b[A\x1b[A\r") == LINED_OK && !strcmp(h.buf, "one"));
    CHECK("up past the oldest stays on it",
          feed(&h, "\x1b[A\x1b[A\x1b[A\x1b[A\r") == LINED_OK && !strcmp(h.buf, "one"));
    CHECK("down comes back to the draft",
          feed(&h, "draft\x1b[A\x1b[A\x1b[B\x1b[B\r") == LINED_OK && !strcmp(h.buf, "draft"));
    CHECK("Ctrl-P / Ctrl-N browse too; a recalled line can be edited",
          feed(&h, "\x10\x10\x0e!\r") == LINED_OK && !strcmp(h.buf, "draft!"));
    lined_free(&h);

    /* ---- a long paste costs O(n) ------------------------------------------------------------- */
    /* Before the fix every key redrew the line and each redraw measured from the line's start
       until the window fit: O(n^2) per key, 1.7e8 width computations for 1,000 characters. */
    ed.width = 80;
    int sizes[2] = { 1000, 20000 }, linear = 1;
    for (int t = 0; t < 2 && linear; t++) {
        const int n = sizes[t];
        char *paste = malloc((size_t)n + 2);
        for (int i = 0; i < n; i++) paste[i] = (char)('a' + i % 26);
        paste[n] = '\r';
        paste[n + 1] = 0;
        ed.measured = ed.redraws = 0;
        LinedStatus st = feed_into(&ed, paste, (size_t)n + 1);
        char name[160];
        snprintf(name, sizeof name, "a %d-character paste: the whole line arrives (%d bytes)", n,
                 n);
        CHECK(name, st == LINED_OK && ed.len == (size_t)n && !memcmp(ed.buf, paste, (size_t)n));
        linear = ed.measured <= 4ull * n + 2000;
        snprintf(name, sizeof name,
                 "a %d-character paste: %llu width computations (at most 4n + 2000)", n,
                 ed.measured);
        CHECK(name, linear);
        snprintf(name, sizeof name, "a %d-character paste: redrawn %llu times, once per read burst",
                 n, ed.redraws);
        CHECK(name, ed.redraws <= 3 + (unsigned long long)n / 4096 * 2);
        CHECK("the paste's last redraw shows its end with the cursor at the window's edge",
              ends_with(drawn, "\033[K\r\033[79C\r\n") && drawn_len < 3000);
        free(paste);
    }
    /* long lines of wide and combining characters cost the same (skipped when the above failed:
       the quadratic editor would take minutes) */
    if (linear) {
        const int n = 6000;
        char *paste = malloc((size_t)n * 5 + 2);
        size_t k = 0;
        for (int i = 0; i < n; i++) {
            if (i % 3 == 0) { memcpy(paste + k, "\xe4\xbd\xa0", 3); k += 3; }
            else if (i % 3 == 1) { memcpy(paste + k, "e\xcc\x81", 3); k += 3; }
            else paste[k++] = 'x';
        }
        memcpy(paste + k, "\x01\x05\r", 3);   /* Home, End, Enter */
        k += 3;
        ed.measured = 0;
        CHECK("a paste of wide and combining characters arrives whole",
              feed_into(&ed, paste, k) == LINED_OK && ed.len == k - 3);
        char name[160];
        snprintf(name, sizeof name, "...with %llu width computations (at most 4 per byte + 2000)",
                 ed.measured);
        CHECK(name, ed.measured <= 4ull * k + 2000);
        free(paste);
    }
    lined_free(&ed);
    printf("%s\n", failures ? "some lined tests failed" : "all lined tests passed");
    return failures != 0;
}

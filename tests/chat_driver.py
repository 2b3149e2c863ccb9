#!/usr/bin/env python3
"""Drives `glm` in CHAT mode through a pseudo-terminal, the way a person at a terminal would.

    chat_driver.py GLM SNAP SNAP_WITHOUT_EOS

SNAP: the tiny oracle model with the tiny tokenizer. SNAP_WITHOUT_EOS: the same with an empty
eos_token_id list, so that only NGEN, the context or Ctrl-C can end a reply (the Ctrl-C checks
must not depend on how long a random model takes to say EOS).

glm gets the pty as stdin and stdout (so it edits lines in raw mode, dims reasoning and takes
Ctrl-C as SIGINT from the terminal) and a pipe as stderr, where its stats lines give the end of
each turn. Three sessions on the tiny oracle model, all greedy (TEMP=0), assert on behaviour:
  A (NGEN=8):    two turns, :more, :reset replays the first answer byte for byte, the line editor
                 (Ctrl-U, arrows, Ctrl-E, UTF-8 backspace, history), :think off, :stats, :quit
  B (NGEN=16):   one uninterrupted 16-token answer == A's 8-token answer + its :more; Ctrl-D quits
  C (no EOS):    Ctrl-C mid-answer stops it, the next turn still answers (and is stopped the same
                 way) and the KV cache holds both turns (context grows by exactly the new turn),
                 Ctrl-C at an empty prompt quits
Prints one PASS/FAIL line per check; exits 1 if any failed.
"""
import fcntl, os, re, select, signal, struct, sys, termios, time

GLM, SNAP, SNAP_WITHOUT_EOS = sys.argv[1], sys.argv[2], sys.argv[3]
PROMPT_TAIL = b"\r> \x1b[K\r\x1b[2C"          # glm's redraw of an empty input line
STATS = re.compile(rb"glm: \[(\d+) prompt tokens, prefill [0-9.]+ s \| (\d+) tokens, decode \S+ tok/s \| "
                   rb"expert hit \S+, read \d+ MB \([0-9.]+ GB/s\), waited on disk [0-9.]+ s \| peak RSS [0-9.]+ GB \| context (\d+)/(\d+) \| stop: ([^\]]+)\]\n")
ANSI = re.compile(rb"\x1b\[[0-9;]*[A-Za-z]")
failures = 0


def check(name, ok, detail=""):
    global failures
    print(("PASS " if ok else "FAIL ") + name + ("" if ok or not detail else ": " + detail))
    if not ok:
        failures += 1


class Glm:
    """One glm process on a pty (stdin, stdout) with stderr on a pipe."""

    def __init__(self, snap=None, **settings):
        env = {k: v for k, v in os.environ.items()}
        env.update({"SNAP": snap or SNAP, "CHAT": "1", "TEMP": "0", "THREADS": "1", "TERM": "xterm"})
        env.update({k: str(v) for k, v in settings.items()})
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 300, 0, 0))
        err_read, err_write = os.pipe()
        pid = os.fork()
        if pid == 0:   # the child: a new session whose controlling terminal is the pty
            try:
                os.setsid()
                fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
                os.dup2(slave, 0)
                os.dup2(slave, 1)
                os.dup2(err_write, 2)
                os.closerange(3, 1024)
                os.execve(GLM, [GLM, "64", "16", "16"], env)
            finally:
                os._exit(127)
        os.close(slave)
        os.close(err_write)
        self.pid, self.pty, self.err_pipe = pid, master, err_read
        self.out, self.err = b"", b""
        self.open = {master, err_read}
        self.status = None

    def pump(self, timeout):
        ready, _, _ = select.select(list(self.open), [], [], timeout)
        for fd in ready:
            try:
                data = os.read(fd, 65536)
            except OSError:          # EIO: the child closed its side of the pty
                data = b""
            if not data:
                self.open.discard(fd)
            elif fd == self.pty:
                self.out += data
            else:
                self.err += data

    def wait_for(self, what, predicate, timeout=20.0):
        end = time.time() + timeout
        while not predicate():
            if time.time() > end or not self.open:
                raise TimeoutError("%s; stdout ends %r; stderr ends %r" % (what, self.out[-300:], self.err[-300:]))
            self.pump(0.05)

    def send(self, data):
        os.write(self.pty, data)

    def at_prompt(self):
        return self.out.endswith(PROMPT_TAIL)

    def turn(self, keys):
        """Sends keys (ending in Enter); returns (answer bytes, stats match) once the reply is over."""
        mark, nstats = len(self.out), len(STATS.findall(self.err))
        self.send(keys)
        self.wait_for("end of turn " + repr(keys),
                      lambda: len(STATS.findall(self.err)) > nstats and self.at_prompt())
        return self.answer_since(mark), list(STATS.finditer(self.err))[-1]

    def answer_since(self, mark):
        text = self.out[mark:]
        text = text[text.index(b"\r\n") + 2:]              # drop the edited line and its Enter
        assert text.endswith(b"\r\n" + PROMPT_TAIL), text[-60:]
        return text[: -len(b"\r\n" + PROMPT_TAIL)]

    def command(self, keys, expect):
        """Sends a command line; waits for stderr to match `expect` and for the next prompt."""
        start = len(self.err)
        self.send(keys)
        self.wait_for("reply to " + repr(keys), lambda: re.search(expect, self.err[start:]) and self.at_prompt())

    def exit_status(self, timeout=10.0):
        end = time.time() + timeout
        while time.time() < end:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
                return os.waitstatus_to_exitcode(status)
            self.pump(0.05)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        return None

    def kill(self):
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except OSError:
                pass


def plain(b):
    return ANSI.sub(b"", b)


def only_our_escapes(b):
    """On a terminal the model's own control bytes are shown as ^X: the only ESC are glm's dim/reset."""
    return all(m.group(0) in (b"\x1b[2m", b"\x1b[0m") for m in ANSI.finditer(b)) and b.count(b"\x1b") == len(ANSI.findall(b))


def session_a():
    g = Glm(NGEN=8)
    try:
        g.wait_for("first prompt", g.at_prompt)
        check("chat: banner on stderr names the commands", b":help" in g.err and b"Ctrl-C" in g.err)
        first, st = g.turn(b"Hello\r")
        check("chat: first turn answers 8 tokens (NGEN=8)", st.group(2) == b"8" and st.group(5) == b"NGEN", st.group(0).decode())
        check("chat: the reasoning is dimmed on a terminal", first.startswith(b"\x1b[2m"), repr(first[:20]))
        check("chat: model control bytes cannot reach the terminal", only_our_escapes(first), repr(first))
        first_ctx = int(st.group(3))
        check("chat: first turn context = prompt + answer", first_ctx == int(st.group(1)) + 8, st.group(0).decode())
        more, st = g.turn(b":more\r")
        check("chat: :more continues with 8 more tokens and no prefill",
              st.group(1) == b"0" and st.group(2) == b"8" and int(st.group(3)) == first_ctx + 8, st.group(0).decode())
        second, st = g.turn(b"How are you?\r")
        check("chat: second turn prefills only its own tokens (<|user|>How are you?<|assistant|><think>)",
              0 < int(st.group(1)) < 12 and int(st.group(3)) == first_ctx + 8 + int(st.group(1)) + int(st.group(2)),
              st.group(0).decode())
        g.command(b":reset\r", rb"conversation cleared")
        again, _ = g.turn(b"xyz\x15Hlo\x1b[D\x1b[Del\x05 \xc3\xa9\x7f\x7f\r")
        check("chat: after :reset the first answer repeats byte for byte (line typed with Ctrl-U, arrows, "
              "Ctrl-E, UTF-8 backspace)", again == first, "%r vs %r" % (again, first))
        g.command(b":reset\r", rb"conversation cleared")
        again, _ = g.turn(b"\x1b[A\x1b[A\r")        # up twice: past ":reset" to "Hello"
        check("chat: up-arrow history recalls an earlier line", again == first, "%r vs %r" % (again, first))
        # the cursor is placed by columns: a CJK character takes two, a combining accent none
        g.send(b"\xe4\xbd\xa0e\xcc\x81")                   # "你" + "e" + U+0301
        g.wait_for("the edited line", lambda: g.out.endswith(b"\r> \xe4\xbd\xa0e\xcc\x81\x1b[K\r\x1b[5C"))
        g.send(b"\x02\x02")                                   # Ctrl-B twice: before the "你"
        g.wait_for("the cursor after the prompt", lambda: g.out.endswith(b"\x1b[K\r\x1b[2C"))
        g.send(b"\x15")                                        # Ctrl-U: nothing left of the cursor to kill
        g.wait_for("the line kept", lambda: g.out.endswith(b"\r> \xe4\xbd\xa0e\xcc\x81\x1b[K\r\x1b[2C"))
        g.send(b"\x0b")                                        # Ctrl-K: kill to the end
        g.wait_for("an empty line", g.at_prompt)
        check("chat: line editor places the cursor by terminal columns (wide, combining) and Ctrl-B/U/K work", True)
        # a pasted 4,000-character line is echoed at once (it took 25 s when every key redrew
        # the line measured from its start) and scrolls: the window ends with the paste's end
        mark = len(g.out)
        g.send(b"0123456789" * 400)
        g.wait_for("the pasted line echoed", lambda: g.out.endswith(b"0123456789\x1b[K\r\x1b[299C"), timeout=10)
        check("chat: a 4,000-character paste is echoed, scrolled to its end, in few redraws",
              g.out.count(b"\r> ", mark) < 50, "%d redraws" % g.out.count(b"\r> ", mark))
        g.send(b"\x15")                                        # Ctrl-U: the line is gone
        g.wait_for("an empty line", g.at_prompt)
        g.command(b":think off\r", rb"thinking off")
        g.command(b":reset\r", rb"conversation cleared")
        nothink, st = g.turn(b"Hello\r")
        # GLM-5.2 (the fixture has no template text), thinking off: [gMASK]<sop><|user|>Hello<|assistant|><think></think>
        check("chat: :think off: the answer does not start in (dimmed) reasoning",
              not nothink.startswith(b"\x1b[2m") and st.group(1) == b"7", repr(nothink[:20]) + " " + st.group(0).decode())
        g.command(b":stats\r", rb"glm: context \d+/\d+ tokens \| \d+ replies, \d+ tokens, decode [0-9.]+ tok/s \| expert hit \S+ since start.*thinking off")
        check("chat: :stats prints the totals", True)
        g.command(b":bogus\r", rb"unknown command :bogus")
        check("chat: an unknown command is named", True)
        g.send(b":quit\r")
        check("chat: :quit exits 0", g.exit_status() == 0)
        return first, more
    finally:
        g.kill()


def session_b(first, more):
    g = Glm(NGEN=16)
    try:
        g.wait_for("first prompt", g.at_prompt)
        whole, st = g.turn(b"Hello\r")
        check("chat: 8 tokens + :more 8 == one 16-token answer (nothing lost or repeated)",
              plain(first) + plain(more) == plain(whole) and st.group(2) == b"16", "%r + %r vs %r" % (first, more, whole))
        g.send(b"\x04")
        check("chat: Ctrl-D at an empty prompt exits 0", g.exit_status() == 0)
    finally:
        g.kill()


def interrupted_turn(g, keys):
    """Sends a line, waits until the reply is streaming, presses Ctrl-C; returns the stats match."""
    mark, nstats = len(g.out), len(STATS.findall(g.err))
    g.send(keys)
    # answer bytes come after the Enter's "\r\n", i.e. after glm left raw mode: a Ctrl-C now is SIGINT
    g.wait_for("the answer to start", lambda: b"\r\n" in g.out[mark:] and len(g.out) > g.out.index(b"\r\n", mark) + 80)
    g.send(b"\x03")                                     # Ctrl-C from the terminal: SIGINT
    g.wait_for("the interrupted turn's stats", lambda: len(STATS.findall(g.err)) > nstats and g.at_prompt())
    return list(STATS.finditer(g.err))[-1]


def session_c():
    g = Glm(snap=SNAP_WITHOUT_EOS, NGEN=-1, CTX=8192, BATCH=16)
    try:
        g.wait_for("first prompt", g.at_prompt)
        st = interrupted_turn(g, b"Hello\r")
        n1, ctx1 = int(st.group(2)), int(st.group(3))
        check("chat: Ctrl-C stops the answer mid-way", st.group(5) == b"interrupted (Ctrl-C)" and 0 < n1 < 8000, st.group(0).decode())
        check("chat: the stopped reply stays in the cache (context = prompt + printed tokens)",
              ctx1 == int(st.group(1)) + n1, st.group(0).decode())
        st = interrupted_turn(g, b"Hi\r")
        check("chat: after Ctrl-C the next turn answers", int(st.group(2)) > 0 and st.group(5) == b"interrupted (Ctrl-C)", st.group(0).decode())
        check("chat: ...after the interrupted reply in the cache (context grows by exactly this turn)",
              int(st.group(3)) == ctx1 + int(st.group(1)) + int(st.group(2)) and int(st.group(1)) < 8, st.group(0).decode())
        g.send(b"\x03")
        check("chat: Ctrl-C at an empty prompt quits with exit 0", g.exit_status() == 0)
    finally:
        g.kill()


for session in (lambda: session_b(*session_a()), session_c):
    try:
        session()
    except (TimeoutError, AssertionError, ValueError) as e:
        check("chat session", False, "%s: %s" % (type(e).__name__, e))
sys.exit(1 if failures else 0)

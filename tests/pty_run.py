#!/usr/bin/env python3
"""Runs a command with its stdout and stderr on a pseudo-terminal, the way a person's terminal
would receive them, and writes every byte the terminal got to our stdout (raw).

    pty_run.py [--stdin FILE] CMD [ARGS...]

stdin: FILE (a pipe-like plain input), or /dev/null. The exit status is the command's
(128 + signal when killed); a command still running after 60 s is killed (exit 124).
Standard library only."""
import os, pty, select, sys, time

args = sys.argv[1:]
stdin_path = os.devnull
if args[:1] == ["--stdin"]:
    stdin_path, args = args[1], args[2:]
pid, fd = pty.fork()
if pid == 0:
    try:
        inp = os.open(stdin_path, os.O_RDONLY)
        os.dup2(inp, 0)
        os.execvp(args[0], args)
    finally:
        os._exit(127)
out, end, status = b"", time.time() + 60, None
while True:
    r, _, _ = select.select([fd], [], [], 0.1)
    if r:
        try:
            data = os.read(fd, 65536)
        except OSError:          # EIO: the child closed the terminal
            data = b""
        if data:
            out += data
            continue
    done, st = os.waitpid(pid, os.WNOHANG)
    if done:
        status = st
        try:                     # what is left in the terminal's buffer
            while select.select([fd], [], [], 0.05)[0]:
                data = os.read(fd, 65536)
                if not data:
                    break
                out += data
        except OSError:
            pass
        break
    if time.time() > end:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        sys.stdout.buffer.write(out)
        sys.exit(124)
sys.stdout.buffer.write(out)
sys.exit(os.waitstatus_to_exitcode(status) if os.waitstatus_to_exitcode(status) >= 0 else 128 - os.waitstatus_to_exitcode(status))

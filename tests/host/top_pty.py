"""Drives `objtier top` in a pseudo-terminal, as a person at a terminal (or over ssh) would.

    top_pty.py WANT OBJTIER ARGS...

Starts OBJTIER ARGS... with a 120x40 pty as its terminal, waits (up to 20 s) until the screen
shows WANT, types `q`, and checks that it exits with status 0 within 5 s and leaves the
terminal as it found it: the alternate screen left, the cursor shown, and the pty's modes
(raw mode undone) as before. Prints what it saw and exits non-zero with the reason otherwise.
"""

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time


def screen_of(output, rows=40, columns=120):
    """The screen a terminal shows after `output`, as lines: enough of a VT100 for what
    ratatui writes (cursor moves, erases, text; colours ignored). Text is not contiguous in
    the output: unchanged cells, spaces included, are skipped with cursor moves."""
    screen = [[" "] * columns for _ in range(rows)]
    row = col = 0
    text = output.decode("utf-8", "replace")
    for m in re.finditer(r"\x1b\[([0-9;?]*)([A-Za-z])|\x1b[()][A-Za-z0-9]|\x1b.|([^\x1b])", text):
        params, command, char = m.group(1), m.group(2), m.group(3)
        if char is not None:
            if char == "\r":
                col = 0
            elif char == "\n":
                row = min(row + 1, rows - 1)
            elif char >= " " and row < rows and col < columns:
                screen[row][col] = char
                col += 1
        elif command == "H":
            parts = [int(p) if p else 1 for p in (params or "").split(";")] + [1, 1]
            row, col = parts[0] - 1, parts[1] - 1
        elif command == "J" and params in ("2", "3"):
            screen = [[" "] * columns for _ in range(rows)]
    return ["".join(line).rstrip() for line in screen]


def main():
    want, command = sys.argv[1], sys.argv[2:]
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    modes_before = termios.tcgetattr(slave)
    env = dict(os.environ, TERM="xterm-256color")
    child = subprocess.Popen(
        command, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
    )
    seen = b""

    def read_for(seconds, until=None):
        nonlocal seen
        deadline = time.time() + seconds
        while time.time() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    return False
            if until is not None and until(seen):
                return True
            if until is None and child.poll() is not None:
                return True
        return False

    def fail(why):
        if child.poll() is None:
            child.kill()
        shown = "\n".join(line for line in screen_of(seen) if line)
        print(f"{why}; the screen showed:\n{shown}")
        sys.exit(1)

    if not read_for(20, lambda s: any(want in line for line in screen_of(s))):
        fail(f"{want!r} did not appear on the screen within 20 s")
    if b"\x1b[?1049h" not in seen:
        fail("top did not enter the alternate screen")
    os.write(master, b"q")
    try:
        rc = child.wait(timeout=5)
    except subprocess.TimeoutExpired:
        fail("top did not quit within 5 s of q")
    read_for(0.3)
    if rc != 0:
        fail(f"top exited {rc} after q")
    tail = seen[seen.rfind(b"\x1b[?1049h"):]
    if b"\x1b[?1049l" not in tail:
        fail("top did not leave the alternate screen")
    if b"\x1b[?25h" not in tail:
        fail("top did not show the cursor again")
    if termios.tcgetattr(slave) != modes_before:
        fail("the terminal's modes differ from before (raw mode left on)")
    print(f"ok: {want!r} shown, quit on q with status 0, terminal restored")


if __name__ == "__main__":
    main()

"""A terminal for the tests of what memscope draws on one: a real pseudo-terminal
to run a command on (:func:`run_in_terminal`), and the screen a terminal shows
after what was written to it (:func:`screen`)."""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import tempfile
import termios
import time
from collections.abc import Sequence
from dataclasses import dataclass

#: The control sequences rich writes: colours (``m``), the cursor hidden and
#: shown (``?25l``/``?25h``), a line erased (``K``), the cursor moved up (``A``)
#: or to a column (``G``).
_CSI = re.compile(r"\x1b\[([?0-9;]*)([A-Za-z])")


def screen(written: str) -> list[str]:
    """The lines a terminal shows after ``written`` (``\\n`` moves to the start
    of the next line, as a terminal's output does), trailing blank lines left
    out. An escape sequence it does not know fails the test: a test that
    cannot read what was drawn must not pass."""
    rows: list[list[str]] = [[]]
    row = col = 0
    i = 0
    while i < len(written):
        ch = written[i]
        if ch == "\x1b":
            m = _CSI.match(written, i)
            assert m is not None, f"an escape memscope should not write: {written[i:i + 12]!r}"
            arg, command = m.groups()
            if command == "K":  # 2K: the whole line; K, 0K: from the cursor on
                rows[row] = [] if arg == "2" else rows[row][:col]
            elif command == "A":
                row = max(row - int(arg or 1), 0)
            elif command == "G":
                col = int(arg or 1) - 1
            else:
                assert command in "mhl", f"an escape memscope should not write: {m.group()!r}"
            i = m.end()
            continue
        if ch == "\r":
            col = 0
        elif ch == "\n":
            row, col = row + 1, 0
            if row == len(rows):
                rows.append([])
        else:
            line = rows[row]
            line.extend(" " * (col + 1 - len(line)))
            line[col] = ch
            col += 1
        i += 1
    lines = ["".join(r).rstrip() for r in rows]
    while lines and not lines[-1]:
        lines.pop()
    return lines


@dataclass(frozen=True)
class Ran:
    """A command run on a pseudo-terminal: its exit code, everything the
    terminal received, and its stdout where that was piped."""

    returncode: int
    terminal: str
    stdout: str


def run_in_terminal(command: Sequence[str], *, env: dict[str, str], cwd: str | None = None,
                    stdout_on_terminal: bool = True, columns: int = 120,
                    timeout: float = 120.0) -> Ran:
    """Run ``command`` with its stderr (and its stdout, unless not
    ``stdout_on_terminal``: then piped) on a new pseudo-terminal ``columns``
    wide, reading the terminal as it writes."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {**env, "COLUMNS": str(columns), "TERM": "xterm-256color"}
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.Popen(list(command), stdin=subprocess.DEVNULL,
                                    stdout=slave if stdout_on_terminal else out,
                                    stderr=slave, env=env, cwd=cwd)
        finally:
            os.close(slave)
        try:
            received = _read_until_done(master, proc, timeout)
        finally:
            os.close(master)
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        out.seek(0)
        piped = out.read().decode()
    return Ran(proc.returncode, received.decode(errors="replace"), piped)


def _read_until_done(master: int, proc: subprocess.Popen[bytes], timeout: float) -> bytes:
    chunks = []
    deadline = time.monotonic() + timeout
    while True:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the command and its children closed the terminal
                data = b""
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
        elif time.monotonic() > deadline:
            raise TimeoutError(f"{proc.args} ran past {timeout} s")
    return b"".join(chunks)

"""Run the CLI on a pseudo-terminal and see what an operator's terminal would show.

Every byte the command writes is fed to a VT100 emulator (pyte), so a test asserts on
the rendered screen: a carriage return really repaints a line, ``ESC [2K`` really erases
it, an OSC really sets the window title, a raw C1 CSI (U+009B) really is a control
sequence. Waits are bounded: read until the expected text is on the screen or a
deadline passes (no sleeps).
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pyte

COLUMNS = 240  # wide enough that no line of ours wraps
ROWS = 200  # tall enough that nothing scrolls off
DEADLINE = 60.0  # seconds; generous for a loaded CI machine, never waited out when all is well

# Our own output only ever holds SGR colour sequences (ESC [ ... m) and CR LF line ends.
_OWN_ESCAPE = re.compile(rb"\x1b\[[0-9;]*m")
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')


def cli_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CONTINUUM_") and k not in ("NO_COLOR", "COLUMNS", "LINES")
    }
    env.update(TERM="xterm", COLUMNS=str(COLUMNS), LINES=str(ROWS), PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


class Terminal:
    """One ``continuum`` command with a pty as its terminal (stdin, and stdout/stderr
    unless ``stdout`` is given), rendered by pyte.

    A test that fails before ``finish`` leaves its command running: ``reap_terminals``
    (an autouse fixture in tests/cli/conftest.py) ends and waits for it, so the failure
    is reported once, in its own test, not as a ResourceWarning in a later one.
    """

    opened: list[Terminal] = []

    def __init__(self, db: str | Path, *args: str, cwd: Path, stdout: int | None = None) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
        self.screen = pyte.Screen(COLUMNS, ROWS)
        self.stream = pyte.ByteStream(self.screen)
        self.raw = bytearray()
        self.eof = False
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "continuum", "--db", str(db), *args],
            stdin=slave,
            stdout=slave if stdout is None else stdout,
            stderr=slave,
            cwd=cwd,
            env=cli_env(),
            close_fds=True,
            start_new_session=True,
        )
        os.close(slave)
        Terminal.opened.append(self)

    def close(self) -> None:
        """End the command if it still runs, wait for it and close the terminal."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=DEADLINE)
        if self.master >= 0:
            os.close(self.master)
            self.master = -1

    # -- reading ----------------------------------------------------------------------

    def _pump(self, timeout: float) -> None:
        """Read what is there (waiting at most ``timeout``) into the emulator."""
        if self.eof:
            return
        ready, _, _ = select.select([self.master], [], [], max(timeout, 0))
        if not ready:
            return
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the command closed its end of the terminal
            data = b""
        if not data:
            self.eof = True
            return
        self.raw += data
        self.stream.feed(data)

    def wait_for(self, text: str, *, deadline: float = DEADLINE) -> None:
        """Read until ``text`` is on the screen; fail after ``deadline`` seconds or at EOF."""
        end = time.monotonic() + deadline
        while text not in self.text():
            if self.eof:
                raise AssertionError(f"the command ended without showing {text!r}:\n{self.text()}")
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{text!r} not shown within {deadline}s:\n{self.text()}")
            self._pump(left)

    def finish(self, *, deadline: float = DEADLINE) -> int:
        """Read everything until the command exits; its exit code."""
        end = time.monotonic() + deadline
        while not self.eof:
            left = end - time.monotonic()
            if left <= 0:
                self.proc.kill()
                raise AssertionError(
                    f"the command did not finish within {deadline}s:\n{self.text()}"
                )
            self._pump(left)
        code = self.proc.wait(timeout=max(end - time.monotonic(), 1))
        os.close(self.master)
        self.master = -1
        return code

    def send(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    # -- what the operator sees --------------------------------------------------------

    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.screen.display]

    def text(self) -> str:
        return "\n".join(line for line in self.lines() if line)

    def unexpected_controls(self) -> list[bytes]:
        """Control bytes in the output that are not ours (colour, CR LF)."""
        rest = _OWN_ESCAPE.sub(b"", bytes(self.raw)).replace(b"\r\n", b"")
        found = re.findall(
            rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\x8b-\x8f\xaa-\xae]"
            rb"|\xe2\x81[\xa6-\xa9]",
            rest,
        )
        return [bytes(f) for f in found]


def reap_terminals() -> None:
    """Close every Terminal a test opened (see Terminal)."""
    while Terminal.opened:
        Terminal.opened.pop().close()


def run_on_terminal(db: str | Path, *args: str, cwd: Path) -> tuple[int, Terminal]:
    term = Terminal(db, *args, cwd=cwd)
    return term.finish(), term


def outside_quotes(line: str) -> str:
    """``line`` with every double-quoted agent value removed (as ``quoted()`` writes them)."""
    return _QUOTED.sub('""', line)

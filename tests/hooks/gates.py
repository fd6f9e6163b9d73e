"""A real resident gate (``continuum hooks serve``) for tests: started, and stopped with
the number of calls it served."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path


def start_gate(
    path: Path,
    log: Path,
    env: dict[str, str] | None = None,
    code: str | None = None,
    prefix: list[str] | None = None,
    preexec: Callable[[], None] | None = None,
) -> subprocess.Popen[bytes]:
    """A real resident gate (`continuum hooks serve`, or the Python ``code`` given, which
    gets the socket's path as its argument) listening at ``path``, once it says so; in a
    session (and process group) of its own, as a gate started from a terminal or a service
    is. ``prefix``: a command it runs under (``setpriv ...``); ``preexec``: run in the
    child before it starts."""
    import time

    argv = (
        [sys.executable, "-c", code, str(path)]
        if code is not None
        else [sys.executable, "-m", "continuum", "hooks", "serve", "--socket", str(path)]
    )
    with log.open("wb") as out:
        gate = subprocess.Popen(
            [*(prefix or []), *argv],
            stdout=subprocess.DEVNULL,
            stderr=out,
            env={**os.environ, **(env or {})},
            start_new_session=True,
            preexec_fn=preexec,
        )
    deadline = time.monotonic() + 60
    while "listening on" not in log.read_text(encoding="utf-8"):
        if gate.poll() is not None or time.monotonic() > deadline:
            gate.kill()
            raise AssertionError(f"the gate did not start: {log.read_text(encoding='utf-8')}")
        time.sleep(0.02)
    return gate


def stop_gate(gate: subprocess.Popen[bytes], log: Path) -> int:
    """Stop a gate (SIGTERM) and return how many calls it served, from its last line."""
    import signal

    gate.send_signal(signal.SIGTERM)
    assert gate.wait(timeout=30) == 0, log.read_text(encoding="utf-8")
    return gate_counts(log)[0]


def gate_counts(log: Path) -> tuple[int, int]:
    """(calls served, calls declined) as a stopped gate's last line says."""
    import re

    said = log.read_text(encoding="utf-8")
    found = re.search(r"stopped(?:: [^\n]*)? after (\d+) calls \((\d+) declined", said)
    assert found is not None, said
    return int(found.group(1)), int(found.group(2))

"""Real host processes: started in their own session, killed with everything they spawned.

A host runs MCP servers, hook commands and shells as children (some in process groups of
their own), so "kill the host" means SIGKILL to every process that belongs to it, then
waiting until each is gone: an MCP server that outlived its host would still own its
actions (``in_progress``), which is not the crash the tests mean. A process belongs to
the host when it descends from it, is in its session, or carries the host run's tag in
its environment (a child whose parent already died has been reparented, but keeps both).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

BOUND = 240.0  # seconds: the ceiling of one host session, never waited out when all is well


TAG_ENV = "CONTINUUM_HOST_TEST_TAG"


def _table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, session id) for every process."""
    table: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().decode("ascii", "replace").rsplit(")", 1)[1].split()
            table[int(entry)] = (int(fields[1]), int(fields[3]))
        except (OSError, ValueError, IndexError):
            continue
    return table


def _tagged(pid: int, tag: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{TAG_ENV}={tag}".encode() in f.read().split(b"\0")
    except OSError:
        return False


def belonging(pid: int, tag: str | None = None) -> list[int]:
    """Every process of the host ``pid`` (not ``pid`` itself)."""
    table = _table()
    children: dict[int, list[int]] = {}
    for p, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(p)
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    me = os.getpid()
    for p, (_, sid) in table.items():
        if p != me and (sid == pid or (tag is not None and _tagged(p, tag))):
            found.add(p)
    found.discard(pid)
    return sorted(found)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().decode("ascii", "replace").rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def kill_tree(pid: int, *, tag: str | None = None, bound: float = 30.0) -> list[int]:
    """SIGKILL ``pid`` and every process of it; wait until all are gone. Returns the pids
    killed (the root first)."""
    victims = [pid, *belonging(pid, tag)]
    for p in victims:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    deadline = time.monotonic() + bound
    for p in victims:
        while alive(p):
            if time.monotonic() > deadline:
                raise AssertionError(f"process {p} outlived SIGKILL for {bound} s")
            time.sleep(0.02)
    return victims


def wait_for(
    path: Path, *, bound: float = BOUND, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Wait (bounded) until ``path`` exists; fail at once if ``proc`` ended first."""
    deadline = time.monotonic() + bound
    while not path.exists():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the host exited ({proc.returncode}) before {path} appeared")
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {bound} s")
        time.sleep(0.05)


@dataclass
class HostProcess:
    """One run of a host binary: its output goes to files in ``logs``."""

    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: Path
    logs: Path
    name: str = "host"
    stdin: bytes | None = None
    tag: str = field(default_factory=lambda: uuid.uuid4().hex)
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    killed: bool = field(default=False, init=False)

    def start(self) -> HostProcess:
        self.logs.mkdir(parents=True, exist_ok=True)
        out = (self.logs / f"{self.name}.stdout").open("wb")
        err = (self.logs / f"{self.name}.stderr").open("wb")
        self.proc = subprocess.Popen(
            list(self.argv),
            cwd=self.cwd,
            env={**self.env, TAG_ENV: self.tag},
            stdin=subprocess.PIPE if self.stdin is not None else subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        out.close()
        err.close()
        if self.stdin is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.write(self.stdin)
            self.proc.stdin.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def wait(self, bound: float = BOUND) -> int:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"{self.name} did not finish within {bound} s; its output: {self.logs}"
            ) from None
        # Whatever it left running (an MCP server, a hook) goes with it.
        kill_tree(self.proc.pid, tag=self.tag)
        return code

    def kill(self) -> None:
        assert self.proc is not None
        self.killed = True
        kill_tree(self.proc.pid, tag=self.tag)
        self.proc.wait(timeout=30)

    def stdout(self) -> str:
        return (self.logs / f"{self.name}.stdout").read_text(encoding="utf-8", errors="replace")

    def stderr(self) -> str:
        return (self.logs / f"{self.name}.stderr").read_text(encoding="utf-8", errors="replace")

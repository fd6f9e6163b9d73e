"""A project with continuum's hooks installed for one host, and a way to run host sessions.

The host is ``host_sim.py``, a real process that runs the installed hook commands exactly
as the host would (``sh -c``, minimal PATH, the host's blocking rules) and performs the
tool calls for real. Its effect is a tiny ``send`` script appending an invoice to
``outbox.txt``: two lines for one invoice are a duplicate side effect.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from continuum.runtime.facade import Continuum
from continuum.store import open_store
from tests.hooks.gates import gate_counts, start_gate, stop_gate

HERE = Path(__file__).resolve().parent
# `make test` runs these tests twice: hooks in their own processes, and (CONTINUUM_TEST_GATE=1)
# every hook handed to a resident gate (`continuum hooks serve`) this session starts.
THROUGH_GATE = os.environ.get("CONTINUUM_TEST_GATE") == "1"
SESSIONS_PLAYED = [0]  # host sessions this worker played (each runs hook processes)
HOSTS = ("claude-code", "gemini", "codex")
SHELL_TOOL = {"claude-code": "Bash", "gemini": "run_shell_command", "codex": "Bash"}
BOUND = 180  # seconds: a ceiling on one session, never waited out when all is well

REGISTRY = """
[[effect]]
description = "sending an invoice"
tool = "Bash|run_shell_command"
match = { command = '^\\./send ' }
action_type = "send_invoice"
key = "{command}"
replay = "REPLAY"
"""
PROBE = 'probe = "./check {command}"\n'

# An invoice named FAIL-... is refused by the "mail server": nothing is sent, exit 1.
SEND = '#!/bin/sh\ncase "$1" in FAIL-*) exit 1;; esac\necho "$1" >> outbox.txt\n'
# Exit 0 if the invoice named in the command is in the outbox, 1 if not.
CHECK = '#!/bin/sh\ninv=${1##* }\n[ -f outbox.txt ] || exit 1\ngrep -qx "$inv" outbox.txt\n'


@dataclass
class Project:
    host: str
    dir: Path
    db: Path
    run: str = "proj"

    @property
    def tool(self) -> str:
        return SHELL_TOOL[self.host]

    def send(self, invoice: str) -> dict[str, Any]:
        return {"tool": self.tool, "input": {"command": f"./send {invoice}"}}

    def outbox(self) -> list[str]:
        path = self.dir / "outbox.txt"
        return path.read_text(encoding="utf-8").splitlines() if path.exists() else []

    def session(
        self,
        session: str,
        calls: list[dict[str, Any]],
        *,
        die_after_effect: int | None = None,
        die_after_post: int | None = None,
        fault_pre: str | None = None,
        env: dict[str, str] | None = None,
        session_start: bool = True,
    ) -> Session:
        SESSIONS_PLAYED[0] += 1
        calls_file = self.dir.parent / f"calls-{session}.json"
        calls_file.write_text(json.dumps(calls), encoding="utf-8")
        argv = [
            sys.executable,
            str(HERE / "host_sim.py"),
            "--host",
            self.host,
            "--project",
            str(self.dir),
            "--session",
            session,
            "--calls",
            str(calls_file),
        ]
        if die_after_effect is not None:
            argv += ["--die-after-effect", str(die_after_effect)]
        if die_after_post is not None:
            argv += ["--die-after-post", str(die_after_post)]
        if fault_pre is not None:
            argv += ["--fault-pre", fault_pre]
        if not session_start:
            argv.append("--no-session-start")
        p = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=BOUND,
            env={**os.environ, **(env or {})},
            check=False,
        )
        steps = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        return Session(p.returncode, steps, p.stderr)

    def continuum(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "continuum", "--db", str(self.db), *args],
            capture_output=True,
            text=True,
            cwd=self.dir,
            timeout=BOUND,
            check=False,
        )

    def runtime(self) -> Continuum:
        return Continuum(open_store(str(self.db)))

    def actions(self) -> list[Any]:
        rt = self.runtime()
        try:
            return rt.actions(self.run)
        finally:
            rt.close()


@dataclass
class Session:
    code: int
    steps: list[dict[str, Any]]
    stderr: str

    def pre(self, call: int) -> dict[str, Any]:
        return next(s for s in self.steps if s["step"] == "pre-tool" and s["call"] == call)

    def post(self, call: int) -> dict[str, Any] | None:
        return next((s for s in self.steps if s["step"] == "post-tool" and s["call"] == call), None)

    @property
    def context(self) -> str | None:
        found = [s["context"] for s in self.steps if s["step"] == "session-start" and s["context"]]
        return found[0] if found else None


def make_project(tmp_path: Path, host: str, replay: str = "never", probe: bool = True) -> Project:
    project = tmp_path / "proj"
    (project / ".continuum").mkdir(parents=True)
    registry = REGISTRY.replace("REPLAY", replay) + (PROBE if probe else "")
    (project / ".continuum" / "effects.toml").write_text(registry, encoding="utf-8")
    for name, text in (("send", SEND), ("check", CHECK)):
        (project / name).write_text(text, encoding="utf-8")
        (project / name).chmod(0o755)
    p = Project(host=host, dir=project, db=tmp_path / "store.db")
    install_hooks(p)
    return p


def install_hooks(p: Project) -> None:
    """``continuum hooks install`` run in this process: the same code writing the same files
    as the command (whose own tests run it as a process, tests/cli and tests/hosts), ~0.35
    s of CPU less per project than a process that imports the whole CLI."""
    from contextlib import redirect_stderr, redirect_stdout

    from continuum.cli.main import run

    argv = ["hooks", "install", "--client", p.host, "--dir", str(p.dir), "--run", p.run]
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = run(["--db", str(p.db), *argv])
    assert code == 0, err.getvalue()


@pytest.fixture(params=HOSTS)
def project(request: pytest.FixtureRequest, tmp_path: Path) -> Project:
    """A project whose effect rule has a probe."""
    return make_project(tmp_path, request.param)


@pytest.fixture(params=HOSTS)
def bare_project(request: pytest.FixtureRequest, tmp_path: Path) -> Project:
    """A project whose effect rule has no probe: only a person can settle an unknown."""
    return make_project(tmp_path, request.param, probe=False)


@pytest.fixture(scope="session", autouse=True)
def _hooks_through_a_gate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """With CONTINUUM_TEST_GATE=1, a gate for this worker's tests: every hook process (the
    host simulator passes the setting on, as hosts pass their environment) hands its call
    to it. The gate must have served calls, or the run proved nothing about it."""
    if not THROUGH_GATE:
        yield
        return
    folder = tmp_path_factory.mktemp("gate")
    path, log = folder / "g" / "gate.sock", folder / "gate.log"
    gate = start_gate(path, log)
    before = os.environ.get("CONTINUUM_GATE_SOCKET")
    os.environ["CONTINUUM_GATE_SOCKET"] = str(path)
    try:
        yield
    finally:
        if before is None:
            del os.environ["CONTINUUM_GATE_SOCKET"]
        else:
            os.environ["CONTINUUM_GATE_SOCKET"] = before
        served = stop_gate(gate, log)
    # Every call it was handed, it served: none declined (run by the hook itself instead).
    assert gate_counts(log)[1] == 0, log.read_text(encoding="utf-8")
    if SESSIONS_PLAYED[0]:
        assert served > 0, "host sessions ran their hooks through the gate: it served no call"

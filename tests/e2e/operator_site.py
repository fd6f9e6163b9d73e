"""A real operator page to test: a SQLite store seeded with hostile agent text, a token
file (mode 600) and ``continuum ui`` (or ``continuum-mcp --ui``) as a subprocess on a
free loopback port, its URL read from the line it announces on stderr.

Every agent-supplied field of the seeded run holds one of ``INJECTIONS``: the run id,
goal, evidence, finding, action types and keys, arguments, errors.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from continuum.eventlog.events import EventType
from continuum.ledger.approvals import ApprovalRules, parse_rules
from continuum.runtime.facade import Continuum
from continuum.types import Origin

BOUND = 90.0  # seconds: start-up, exit (generous: CI machines are shared and busy)
TOKENS = {"read": "read-token-for-the-page-0001", "approve": "approve-token-for-the-page-02"}
CONFIRM = "the-persons-own-confirm-token-03"  # CONTINUUM_MCP_CONFIRM_TOKEN (contract §5)
CONFIRM_ENV = "CONTINUUM_MCP_CONFIRM_TOKEN"
INJECTIONS = (
    "<script>alert(1)</script>",
    "\x1b[2K",
    "\u202e",
    "<img src=x onerror=alert(2)>",
    '" onmouseover=alert(3) x="',
)
HOSTILE = " ".join(INJECTIONS)
RUN = 'op-run-<b>"x</b>'  # run ids may hold markup (no controls: they are identifiers)
OTHER_RUN = "plain-run"
RULES_TOML = '[[approval]]\naction_type = "wire_money"\n'
ANNOUNCE = re.compile(r"(?:operator page|streamable HTTP) at (\S+)")


@dataclass
class Seeded:
    run_id: str
    unknown_action: str
    approvals: list[str]


def seed(db: Path) -> Seeded:
    """The hostile run: progress, evidence, a finding, an unknown action, two approvals."""
    rules = ApprovalRules(rules=parse_rules(RULES_TOML, "approvals.toml"))
    with Continuum.open(str(db), origin=Origin.EXTERNAL_AGENT, approvals=rules) as rt:
        rt.start_run(OTHER_RUN, "an ordinary goal")
        rt.start_run(RUN, "goal: " + HOSTILE, total=4)
        rt.record_progress(RUN, completed=2, total=4)
        rt.append(RUN, EventType.EVIDENCE_ADDED, {"evidence_id": "ev<script>1", "text": HOSTILE})
        rt.append(RUN, EventType.FINDING_ADDED, {"finding_id": "f1", "text": "found " + HOSTILE})
        started = rt.intercept(
            RUN,
            "send_<img src=x onerror=alert(4)>",
            {"to": HOSTILE},
            key='mail:<script>alert(5)</script>"',
        )
        rt.fail(
            RUN, started.action_id or "", error="timeout " + HOSTILE
        )  # unknown: a person checks
        asked = [
            rt.intercept(RUN, "wire_money", {"amount": n, "memo": HOSTILE}, key=f"wire-{n}")
            for n in (100, 200)
        ]
    return Seeded(RUN, started.action_id or "", [a.approval_id or "" for a in asked])


def write_tokens(path: Path, roles: dict[str, str] = TOKENS) -> Path:
    path.write_text("".join(f"{role} {token}\n" for role, token in roles.items()))
    path.chmod(0o600)
    return path


def snapshot(db: Path, to: Path) -> Path:
    """A consistent copy of the store (SQLite's backup API), to replay the CLI on."""
    with sqlite3.connect(db) as source, sqlite3.connect(to) as dest:
        source.backup(dest)
    return to


def events(db: Path, run_id: str) -> list[dict[str, Any]]:
    with Continuum.open(str(db), create=False) as rt:
        return [
            {"type": str(e.type), "source": str(e.source), "payload": e.payload}
            for e in rt.events(run_id)
        ]


def cli(db: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "continuum", "--db", str(db), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=BOUND,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@dataclass
class Server:
    url: str  # ends with "/" (the page: .../ui/)
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def log(self) -> str:
        return "".join(self.lines)


def ui_command(db: Path, tokens: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "continuum",
        "--db",
        str(db),
        "ui",
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        str(tokens),
        *extra,
    ]


def mcp_command(db: Path, tokens: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "continuum.mcp",
        "--db",
        str(db),
        "--transport",
        "streamable-http",
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        str(tokens),
        "--ui",
    ]


@contextmanager
def serving(command: list[str], cwd: Path, *, confirm: str | None = None) -> Iterator[Server]:
    """Start ``command``; yield once it announces its URL; SIGTERM and a clean exit after.

    ``confirm``: the person's confirm token the server is given (None: not set, even if
    this process has it, so the page is read-only)."""
    env = {**os.environ, "NO_COLOR": "1", "CONTINUUM_LOG_LEVEL": "info"}
    env.pop(CONFIRM_ENV, None)
    if confirm is not None:
        env[CONFIRM_ENV] = confirm
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    announced: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            found = ANNOUNCE.search(line)
            if found:
                announced.put(found.group(1))
        announced.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        url = announced.get(timeout=BOUND)
        assert url is not None, f"the server exited before serving: {''.join(lines)}"
        base = url.removesuffix("/mcp").removesuffix("/ui/")
        yield Server(base + "/ui/", process, lines)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=BOUND)
        reader.join(timeout=BOUND)
        if process.stderr is not None:
            process.stderr.close()
    assert code == 0, f"exit {code}: {''.join(lines)}"

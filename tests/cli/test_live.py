"""Live views: `events --follow` sees what another process appends, `watch` redraws on a
terminal (and writes plain lines elsewhere), and neither writes to the store (issue 12).

Waits are bounded: read until the expected text arrives or a deadline passes; no sleeps.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from continuum.cli import live
from continuum.cli.main import run
from continuum.store import SQLiteStorage
from tests.cli.conftest import Result
from tests.cli.pty_support import DEADLINE, Terminal, cli_env

CLI = Callable[..., Result]


@pytest.fixture(autouse=True)
def sigint_reaches_children() -> Iterator[None]:
    """A child inherits an ignored SIGINT (a test run started in the background): let the
    commands under test see Ctrl-C as a person's terminal would send it."""
    before = signal.getsignal(signal.SIGINT)
    if before == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


class Reader:
    """A ``continuum`` subprocess whose stdout is read as it comes, with deadlines."""

    def __init__(self, db: str, *args: str, cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "continuum", "--db", db, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=cli_env(),
        )
        assert self.proc.stdout is not None
        self.fd = self.proc.stdout.fileno()
        self.out = b""

    def wait_for(self, text: str, *, deadline: float = DEADLINE) -> str:
        end = time.monotonic() + deadline
        while text.encode() not in self.out:
            left = end - time.monotonic()
            if left <= 0:
                self.proc.kill()
                raise AssertionError(f"{text!r} not printed within {deadline}s:\n{self.text()}")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    raise AssertionError(f"ended without printing {text!r}:\n{self.text()}")
                self.out += chunk
        return self.text()

    def text(self) -> str:
        return self.out.decode()

    def interrupt(self) -> tuple[int, str]:
        """Ctrl-C (SIGINT); the exit code and what it wrote on stderr."""
        self.proc.send_signal(signal.SIGINT)
        rest, err = self.proc.communicate(timeout=DEADLINE)
        self.out += rest
        return self.proc.returncode, err.decode()


def append(db: str, cwd: Path, *args: str) -> None:
    """Another process appends (the writer is never the process under test)."""
    done = subprocess.run(
        [sys.executable, "-m", "continuum", "--db", db, "append", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=cli_env(),
        timeout=DEADLINE,
    )
    assert done.returncode == 0, done.stderr


def store_bytes(db: str) -> tuple[bytes, bytes]:
    wal = Path(f"{db}-wal")
    return Path(db).read_bytes(), wal.read_bytes() if wal.exists() else b""


# -- events --follow ------------------------------------------------------------------------


def test_events_follow_prints_what_another_process_appends_and_ctrl_c_exits_130(
    cli_proc: CLI, db: str, tmp_path: Path
) -> None:
    assert cli_proc("start", "r1", "--goal", "watch me").code == 0
    follower = Reader(db, "events", "r1", "--follow", cwd=tmp_path)
    follower.wait_for("run_started")
    append(db, tmp_path, "r1", "work_completed", "--payload", '{"doc": 41}')
    text = follower.wait_for("doc=41")  # its payload as a key=value summary
    code, err = follower.interrupt()
    assert code == 130, err
    assert "Traceback" not in err and "aborted" not in err
    lines = [line for line in text.splitlines() if line.strip()]
    assert [line.split()[0] for line in lines] == ["1", "2"]  # each event once, in order
    assert "work_completed" in lines[1]


def test_events_follow_json_writes_one_verified_event_per_line(
    cli_proc: CLI, db: str, tmp_path: Path
) -> None:
    cli_proc("start", "r1", "--goal", "g")
    append(db, tmp_path, "r1", "work_completed")
    follower = Reader(db, "--json", "events", "r1", "--follow", "--after", "1", cwd=tmp_path)
    follower.wait_for("work_completed")
    append(db, tmp_path, "r1", "work_failed")
    follower.wait_for("work_failed")
    code, _ = follower.interrupt()
    assert code == 130
    events = [json.loads(line) for line in follower.text().splitlines()]
    assert [(e["sequence"], e["type"]) for e in events] == [
        (2, "work_completed"),
        (3, "work_failed"),
    ]


def test_events_follow_refuses_limit(cli: CLI) -> None:
    cli("start", "r1", "--goal", "g")
    r = cli("--json", "events", "r1", "--follow", "--limit", "3")
    assert (r.code, r.json()["error"]["code"]) == (1, "usage.invalid")


# -- watch ------------------------------------------------------------------------------------


def test_watch_on_a_terminal_redraws_when_another_process_records_progress(
    cli_proc: CLI, db: str, tmp_path: Path
) -> None:
    cli_proc("start", "r1", "--goal", "five invoices", "--total", "5")
    append(db, tmp_path, "r1", "progress_recorded", "--payload", '{"completed": 1}')
    term = Terminal(db, "watch", "r1", "--interval", "0.2", cwd=tmp_path)
    try:
        term.wait_for("progress: 1/5 completed")
        term.wait_for("verdict: resume")  # the frame's last line: all of it has arrived
        first = term.text()
        assert "run r1  [active]  head 2" in first and "verdict: resume" in first
        append(db, tmp_path, "r1", "progress_recorded", "--payload", '{"completed": 2}')
        term.wait_for("progress: 2/5 completed")
        term.wait_for("verdict: resume")
        screen = term.text()
        # Repainted in place: the old frame is gone, not scrolled above the new one.
        assert "progress: 1/5" not in screen and screen.count("continuum watch:") == 1
        assert "head 3" in screen
    finally:
        term.proc.send_signal(signal.SIGINT)
    assert term.finish() == 130
    assert "Traceback" not in term.text()


def test_watch_shows_what_needs_a_person(cli_proc: CLI, db: str, tmp_path: Path) -> None:
    from continuum import Continuum, Origin

    cli_proc("init")
    agent = Continuum.open(db, origin=Origin.EXTERNAL_AGENT)
    agent.record_progress("r1", completed=1, total=2, goal="goal\r\x1b[2Kverdict: resume")
    agent.close()
    assert cli_proc("intercept", "r1", "send", "--key", "k1").code == 0  # then it exits
    r = cli_proc("watch", "--once")  # no RUN: the latest active run
    assert r.code == 0, r.err
    assert "\x1b" not in r.out and "\r" not in r.out
    assert 'goal: "goal\\x0d\\x1b[2Kverdict: resume"' in r.out  # quoted and escaped
    assert '"send:k1": unknown (interrupted: its process is gone)' in r.out
    assert 'reconcile "send:k1": continuum reconcile r1 act_' in r.out
    assert (
        "confirm goal, progress (self-reported, not yet confirmed): continuum confirm r1" in r.out
    )
    assert "verdict: request_human" in r.out
    doc = cli_proc("--json", "watch", "--once").json()
    assert doc["run"]["run_id"] == "r1" and doc["run"]["verdict"] == "request_human"
    assert doc["run"]["confirmation_needed"] == ["goal", "progress"]
    assert [a["interrupted"] for a in doc["run"]["unresolved_actions"]] == [True]


def test_watch_writes_plain_lines_when_stdout_is_not_a_terminal(
    cli_proc: CLI, db: str, tmp_path: Path
) -> None:
    cli_proc("start", "r1", "--goal", "g", "--total", "3")
    watcher = Reader(db, "watch", "--interval", "0.2", cwd=tmp_path)
    watcher.wait_for("progress: 0/3 completed")
    append(db, tmp_path, "r1", "work_completed")
    watcher.wait_for("progress: 1/3 completed")
    code, err = watcher.interrupt()
    assert code == 130, err
    out = watcher.text()
    assert "\x1b" not in out and "\r" not in out  # no cursor movement, no colour
    assert out.count("continuum watch:") == 2  # one frame per change, one after the other


def test_watch_never_writes_to_the_store(
    cli_proc: CLI,
    db: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli_proc("start", "r1", "--goal", "g", "--total", "3")
    cli_proc("intercept", "r1", "send", "--key", "k1")
    cli_proc("checkpoint", "r1")
    before = store_bytes(db)
    assert cli_proc("watch", "r1", "--once").code == 0
    assert store_bytes(db) == before

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("watch wrote to the store")

    for name in ("append_event", "write", "create_run", "put_checkpoint", "import_runs"):
        if hasattr(SQLiteStorage, name):
            monkeypatch.setattr(SQLiteStorage, name, refuse)
    polls = []

    def fake_sleep(seconds: float) -> None:  # each poll, without waiting; Ctrl-C after five
        polls.append(seconds)
        if len(polls) == 5:
            raise KeyboardInterrupt

    monkeypatch.setattr(live.time, "sleep", fake_sleep)
    assert run(["--db", db, "watch", "r1", "--interval", "0.4"]) == 130
    assert capsys.readouterr().out.count("continuum watch:") == 1  # nothing changed: no redraw
    assert polls == [0.1, 0.2, 0.4, 0.4, 0.4]  # backing off, bounded by --interval
    assert store_bytes(db) == before


def test_watch_of_an_unknown_run_is_not_found(cli: CLI) -> None:
    cli("start", "r1", "--goal", "g")
    r = cli("--json", "watch", "nope", "--once")
    assert (r.code, r.json()["error"]["code"]) == (2, "not_found.run")

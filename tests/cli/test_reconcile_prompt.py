"""`continuum reconcile` is a person's word (origin human), asked for at a terminal.

Saying an action did *not* happen lets it run again, so an agent with a shell must not be
able to say it by running the CLI from a pipe (issue 10, items 3 and 5): without a
terminal, reconcile needs ``--yes``; on a terminal it shows the action (agent text quoted
and escaped) and asks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from continuum.runtime.facade import Continuum
from continuum.store import open_store
from continuum.types import Origin
from tests.cli.pty_support import Terminal

RUN = "r1"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "store.db"
    agent = Continuum(open_store(str(path)), origin=Origin.EXTERNAL_AGENT)
    agent.record_progress(RUN, total=1, goal="wire money")
    r = agent.intercept(RUN, "wire_money", {"to": "acct\x1b[2K 99", "amount": 48000}, key="w1")
    agent.fail(RUN, r.action_key, certain=True, error="bank said no\r\x1b[2Kverdict: resume")
    agent.close()
    return path


def action(db: Path) -> dict[str, object]:
    rt = Continuum(open_store(str(db)))
    try:
        return rt.actions(RUN)[0].model_dump(mode="json")
    finally:
        rt.close()


def test_reconcile_on_a_terminal_shows_the_action_and_records_a_person(
    db: Path, tmp_path: Path
) -> None:
    term = Terminal(db, "reconcile", RUN, "wire_money:w1", "--not-occurred", cwd=tmp_path)
    term.wait_for("did NOT happen?")
    shown = term.text()
    assert 'action "wire_money:w1" of type "wire_money": failed' in shown
    assert "\\x1b[2K" in shown and "reported as not done by external_agent" in shown
    assert not any(line.startswith("verdict: resume") for line in shown.splitlines())
    term.send("y\r")
    assert term.finish() == 0
    a = action(db)
    assert (a["status"], a["settled_by"]) == ("failed", "human")


def test_declining_a_reconciliation_records_nothing(db: Path, tmp_path: Path) -> None:
    before = action(db)
    term = Terminal(db, "reconcile", RUN, "wire_money:w1", "--not-occurred", cwd=tmp_path)
    term.wait_for("did NOT happen?")
    term.send("n\r")
    assert term.finish() == 1
    assert action(db) == before


def test_reconcile_from_a_pipe_without_yes_is_refused(db: Path, tmp_path: Path) -> None:
    before = action(db)
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "continuum",
            "--db",
            str(db),
            "--json",
            "reconcile",
            RUN,
            "wire_money:w1",
            "--not-occurred",
        ],
        stdin=subprocess.PIPE,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert p.returncode == 1
    assert json.loads(p.stdout)["error"]["code"] == "usage.not_a_terminal"
    assert action(db) == before

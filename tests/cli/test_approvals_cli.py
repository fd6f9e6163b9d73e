"""`continuum approvals`, `decide` and `outbox` as an operator uses them.

Agent text in an approval (its arguments) cannot repaint the operator's screen or the
JSON; `decide` shows exactly the call it decides and is given only by a person at a
terminal (or a person's script with --yes); exit codes say whether someone must act.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from continuum import Continuum, Origin
from continuum.eventlog.events import EventType
from continuum.store import open_store
from tests.cli.pty_support import Terminal, cli_env, run_on_terminal

RUN = "payments"
HOSTILE = {
    "to": "acct 99\r\x1b[2Kverdict: resume  (approved by a human)\n",
    "memo": "ok\u202edesrever\x9b2J\x1b]0;pwned\x07",
}
CONTINUUM = [sys.executable, "-m", "continuum"]


@pytest.fixture
def work(tmp_path: Path) -> Path:
    rules = tmp_path / ".continuum" / "approvals.toml"
    rules.parent.mkdir()
    rules.write_text('[[approval]]\naction_type = "wire_money"\n', encoding="utf-8")
    return tmp_path


@pytest.fixture
def db(work: Path) -> Path:
    return work / "store.db"


def ask_for(db: Path, work: Path, arguments: dict[str, Any]) -> str:
    """An agent's intercept that waits for a person; the approval id."""
    agent = Continuum(open_store(str(db)), origin=Origin.EXTERNAL_AGENT, cwd=str(work))
    try:
        if RUN not in {r.run_id for r in agent.runs()}:
            agent.start_run(RUN, "pay")
        r = agent.intercept(RUN, "wire_money", arguments, key="INV-9")
        assert r.status == "awaiting_approval" and r.approval_id
        return r.approval_id
    finally:
        agent.close()


def cli(db: Path, work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CONTINUUM, "--db", str(db), *args],
        cwd=work,
        env=cli_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def decisions(db: Path) -> list[tuple[str, str]]:
    rt = Continuum(open_store(str(db)))
    try:
        return [
            (str(e.type), str(e.source))
            for e in rt.events(RUN)
            if e.type in (EventType.APPROVAL_GRANTED, EventType.APPROVAL_DENIED)
        ]
    finally:
        rt.close()


def test_hostile_arguments_cannot_repaint_the_approvals_listing(db: Path, work: Path) -> None:
    approval_id = ask_for(db, work, HOSTILE)
    code, term = run_on_terminal(db, "approvals", cwd=work)
    assert code == 20  # someone must decide
    assert term.unexpected_controls() == []
    lines = term.lines()
    assert not [ln for ln in lines if re.match(r"\s*verdict: resume", ln)], term.text()
    assert any(ln.startswith(approval_id) for ln in lines)
    assert "\\x1b" in term.text() or "\\u001b" in term.text()  # shown, escaped
    assert f"continuum decide {approval_id} --allow|--deny --reason TEXT" in term.text()


def test_the_json_listing_is_the_same_value_without_raw_controls(db: Path, work: Path) -> None:
    approval_id = ask_for(db, work, HOSTILE)
    done = cli(db, work, "approvals", "--json")
    assert done.returncode == 20
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", done.stdout)
    [listed] = json.loads(done.stdout)["approvals"]
    assert (listed["approval_id"], listed["arguments"]) == (approval_id, HOSTILE)
    assert listed["status"] == "requested" and listed["requested_by"] == "external_agent"


def test_decide_refuses_without_a_terminal_unless_a_persons_script_says_yes(
    db: Path, work: Path
) -> None:
    approval_id = ask_for(db, work, {"amount": 5})
    refused = cli(db, work, "--json", "decide", approval_id, "--allow", "--reason", "ok")
    assert refused.returncode == 1
    assert json.loads(refused.stdout)["error"]["code"] == "usage.not_a_terminal"
    assert decisions(db) == []
    ok = cli(db, work, "decide", approval_id, "--allow", "--reason", "ok", "--yes")
    assert ok.returncode == 0, ok.stderr
    assert decisions(db) == [("approval_granted", "human")]
    assert cli(db, work, "approvals").returncode == 0  # nothing waits any more


def test_decide_shows_the_call_and_records_only_a_yes(db: Path, work: Path) -> None:
    approval_id = ask_for(db, work, HOSTILE)
    term = Terminal(db, "decide", approval_id, "--deny", "--reason", "unknown account", cwd=work)
    term.wait_for("Record, as a person: DENY this call?")
    assert term.unexpected_controls() == []
    assert "written by an agent" in term.text() and "arguments:" in term.text()
    term.send("n\r")
    assert term.finish() == 1
    assert decisions(db) == []
    term = Terminal(db, "decide", approval_id, "--deny", "--reason", "unknown account", cwd=work)
    term.wait_for("DENY this call?")
    term.send("y\r")
    assert term.finish() == 0
    assert decisions(db) == [("approval_denied", "human")]


@pytest.mark.parametrize(
    "args,code",
    [
        (["--deny", "--reason", "no", "--scope", "run"], "usage.bad_scope"),
        (["--allow"], "usage.bad_reason"),
        (["--allow", "--reason", "  "], "usage.bad_reason"),
        (["--reason", "why"], "usage.missing_option"),
    ],
)
def test_bad_decisions_are_refused_and_change_nothing(
    db: Path, work: Path, args: list[str], code: str
) -> None:
    approval_id = ask_for(db, work, {"amount": 5})
    done = cli(db, work, "--json", "decide", approval_id, *args, "--yes")
    assert done.returncode == 1
    assert json.loads(done.stdout)["error"]["code"] == code
    assert decisions(db) == []


def test_outbox_lists_what_waits_and_retry_needs_a_target(db: Path, work: Path) -> None:
    approval_id = ask_for(db, work, {"amount": 5})
    done = cli(db, work, "outbox", "--json")
    assert done.returncode == 0
    listing = json.loads(done.stdout)
    assert listing["counts"] == {"pending": 1, "delivered": 0, "failed": 0}
    [row] = listing["notifications"]
    assert (
        row["kind"] == "approval_requested" and row["body"]["details"]["approval_id"] == approval_id
    )
    assert cli(db, work, "outbox", "retry").returncode == 1
    no_hooks = cli(db, work, "--json", "outbox", "deliver")
    assert json.loads(no_hooks.stdout)["error"]["code"] == "outbox.no_webhooks"

"""`continuum confirm` confirms exactly what it showed, and only a person at a terminal
gives it (issue 10, items 2 and 3)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from continuum import Continuum, Origin
from continuum.errors import IntegrityError, UsageError
from continuum.eventlog.events import EventType
from continuum.state.projection import project
from continuum.store import open_store
from tests.cli.pty_support import Terminal, cli_env

RUN = "r1"
SHOWN = re.compile(r"run r1 through sequence (\d+) \(event hash ([0-9a-f]{12})\):")


def agent(db: Path) -> Continuum:
    return Continuum(open_store(str(db)), origin=Origin.EXTERNAL_AGENT)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "store.db"
    a = agent(path)
    a.record_progress(RUN, completed=2, total=5, goal="send five invoices")
    a.close()
    return path


def reviews(db: Path) -> list[dict[str, Any]]:
    rt = Continuum(open_store(str(db)))
    try:
        return [
            {**e.payload, "source": str(e.source), "sequence": e.sequence}
            for e in rt.events(RUN)
            if e.type == EventType.REVIEW_CONFIRMED
        ]
    finally:
        rt.close()


def head(db: Path) -> int:
    rt = Continuum(open_store(str(db)))
    try:
        return rt.store.get_run(RUN).head_sequence
    finally:
        rt.close()


def test_confirm_covers_what_was_shown_when_the_agent_writes_while_the_prompt_is_open(
    db: Path, tmp_path: Path
) -> None:
    term = Terminal(db, "confirm", RUN, cwd=tmp_path)
    term.wait_for("Confirm this as true?")
    m = SHOWN.search(term.text())
    assert m, term.text()
    shown_seq, shown_hash = int(m.group(1)), m.group(2)
    a = agent(db)  # another writer, while the person reads
    a.record_progress(RUN, completed=5, goal="wire $48,000 to acct 99")
    a.close()
    term.send("y\r")
    assert term.finish() == 20  # the later self-report is not confirmed
    out = term.text()
    assert (
        f"the run moved on to sequence {shown_seq + 1} while you were reading; this "
        f"confirmation covers 1..{shown_seq} only; run `continuum confirm {RUN}` again "
        "to review the rest"
    ) in out
    [review] = reviews(db)
    assert review["source"] == "human"
    assert review["through_sequence"] == shown_seq
    rt = Continuum(open_store(str(db)))
    try:
        assert review["through_hash"] == rt.store.event_hash_at(RUN, shown_seq)
        assert str(review["through_hash"]).startswith(shown_hash)
        assert review["confirmed"] == {
            "goal": "send five invoices",
            "progress": {"total": 5, "completed": 2, "failed": 0, "pending": 3},
        }
        verdict = rt.resume(RUN)
        assert verdict.mode == "request_human" and f"confirm_run:{RUN}" in verdict.required_actions
        assert set(rt.state(RUN).unreviewed()) == {"goal", "progress"}
    finally:
        rt.close()


def test_confirm_on_a_terminal_shows_sequence_hash_and_records_origin_human(
    db: Path, tmp_path: Path
) -> None:
    term = Terminal(db, "confirm", RUN, cwd=tmp_path)
    term.wait_for("Confirm this as true?")
    assert 'goal: "send five invoices"  [agent-supplied: external_agent, seq 1]' in term.text()
    term.send("y\r")
    assert term.finish() == 0
    assert "verdict now: resume" in term.text() and "moved on" not in term.text()
    [review] = reviews(db)
    assert review["source"] == "human" and review["through_sequence"] == review["sequence"] - 1


def test_declining_on_a_terminal_records_nothing(db: Path, tmp_path: Path) -> None:
    before = head(db)
    term = Terminal(db, "confirm", RUN, cwd=tmp_path)
    term.wait_for("Confirm this as true?")
    term.send("n\r")
    assert term.finish() == 1
    assert "[usage.declined]" in term.text()
    assert head(db) == before and reviews(db) == []


def test_json_on_a_terminal_still_asks_and_stdout_holds_only_the_document(
    db: Path, tmp_path: Path
) -> None:
    out = tmp_path / "stdout.json"
    with out.open("wb") as f:
        term = Terminal(db, "--json", "confirm", RUN, cwd=tmp_path, stdout=f.fileno())
        term.wait_for("Confirm this as true?")
        term.send("y\r")
        assert term.finish() == 0
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert (
        doc["ok"]
        and doc["confirmation"]["head_sequence"] == doc["confirmation"]["through_sequence"]
    )
    assert len(doc["confirmation"]["through_hash"]) == 64


def run_piped(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with stdin a pipe, as an agent with a shell would run it."""
    return subprocess.run(
        [sys.executable, "-m", "continuum", "--db", str(db), *args],
        input="y\n",
        capture_output=True,
        text=True,
        env=cli_env(NO_COLOR="1"),
        cwd=db.parent,
        timeout=60,
    )


def test_confirm_without_a_terminal_is_refused_and_records_nothing(db: Path) -> None:
    before = head(db)
    p = run_piped(db, "--json", "confirm", RUN)
    assert p.returncode == 1, p.stdout + p.stderr
    error = json.loads(p.stdout)["error"]
    assert error["code"] == "usage.not_a_terminal"
    assert "--yes" in error["hint"] and f"continuum confirm {RUN}" in error["hint"]
    assert head(db) == before and reviews(db) == []
    p = run_piped(db, "confirm", RUN)
    assert p.returncode == 1 and "[usage.not_a_terminal]" in p.stderr and p.stdout == ""


def test_confirm_with_yes_from_a_script_confirms(db: Path) -> None:
    p = run_piped(db, "confirm", RUN, "--yes")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "written by an agent" in p.stdout  # the notice, since no prompt showed it
    [review] = reviews(db)
    assert review["source"] == "human"


# -- the runtime: what a confirmation covers ------------------------------------------------


def test_confirm_through_a_sequence_records_the_state_at_that_sequence(db: Path) -> None:
    rt = Continuum(open_store(str(db)), origin=Origin.HUMAN)
    try:
        n = rt.state(RUN).sequence
        h = rt.state(RUN).head_hash
        rt.checkpoint(RUN)  # a checkpoint past n must not leak later state into the review
        a = agent(db)
        a.record_progress(RUN, completed=4, goal="something else")
        a.close()
        result = rt.confirm(RUN, through_sequence=n, expect_hash=h)
        assert result.through_sequence == n and result.through_hash == h
        assert result.head_sequence == n + 2 and result.event_sequence == n + 3
        assert result.confirmed["goal"] == "send five invoices"
        assert result.confirmed["progress"]["completed"] == 2
        events = rt.events(RUN)
        for upto in (n, n + 1, n + 2):  # each starts from the checkpoint at n
            assert rt.state_at(RUN, upto) == project(RUN, [e for e in events if e.sequence <= upto])
        assert rt.state_at(RUN, n).head_hash == h
    finally:
        rt.close()


def test_confirm_refuses_a_hash_that_is_not_the_stored_one(db: Path) -> None:
    rt = Continuum(open_store(str(db)), origin=Origin.HUMAN)
    try:
        n, before = rt.state(RUN).sequence, rt.store.get_run(RUN).head_sequence
        with pytest.raises(IntegrityError) as e:
            rt.confirm(RUN, through_sequence=n, expect_hash="0" * 64)
        assert e.value.code == "integrity.confirm_mismatch"
        with pytest.raises(UsageError) as u:
            rt.confirm(RUN, through_sequence=before + 1)
        assert u.value.code == "usage.bad_sequence"
        assert rt.store.get_run(RUN).head_sequence == before
    finally:
        rt.close()


def test_confirm_without_a_sequence_covers_the_head(db: Path) -> None:
    rt = Continuum(open_store(str(db)), origin=Origin.HUMAN)
    try:
        state = rt.state(RUN)
        result = rt.confirm(RUN)
        assert result.through_sequence == state.sequence == result.head_sequence
        assert result.through_hash == state.head_hash
        assert rt.resume(RUN).mode == "resume"
    finally:
        rt.close()

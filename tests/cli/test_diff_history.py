"""`diff` shows how the semantic state changed between two sequences; `history` lists
checkpoints and confirmations in order (issue 12)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from continuum import Continuum, Origin
from continuum.eventlog.events import EventType
from tests.cli.conftest import Result

CLI = Callable[..., Result]


def build(db: str) -> None:
    """1 start, 2 finding, 3 decision, 4 dependency, 5 progress, 6 intercept, 7 complete,
    8 decision invalidated, 9 dependency v2, 10 finding f2."""
    agent = Continuum.open(db, origin=Origin.EXTERNAL_AGENT)
    agent.start_run("r1", "send invoices", total=3)
    agent.append("r1", EventType.FINDING_ADDED, {"finding_id": "f1", "text": "INV-2 is late"})
    agent.append("r1", EventType.DECISION_CREATED, {"decision_id": "d1", "text": "send in order"})
    agent.declare_dependencies("r1", env={"dataset": "v1"})
    agent.record_progress("r1", completed=1)
    r = agent.intercept("r1", "send", {"invoice": "INV-1"}, key="INV-1")
    agent.complete("r1", r.action_key, external_id="msg-1")
    agent.append("r1", EventType.DECISION_INVALIDATED, {"decision_id": "d1", "reason": "no"})
    agent.declare_dependencies("r1", env={"dataset": "v2"})
    agent.append("r1", EventType.FINDING_ADDED, {"finding_id": "f2", "text": "x\x1b[2Ky"})
    agent.close()


def changes(cli: CLI, *args: str) -> list[dict[str, Any]]:
    r = cli("--json", "diff", "r1", *args)
    assert r.code == 0, r.out
    return list(r.json()["changes"])


def test_diff_names_what_was_added_changed_and_removed(cli: CLI, db: str) -> None:
    build(db)
    got = {
        (c["component"], c["key"], c["change"]): c
        for c in changes(cli, "--from", "3", "--to", "10")
    }
    assert set(got) == {
        ("progress", None, "changed"),
        ("decision", "d1", "changed"),
        ("dependency", "dataset", "added"),
        ("finding", "f2", "added"),
        ("action", next(k for (c, k, _) in got if c == "action"), "added"),
    }
    assert got[("progress", None, "changed")]["fields"] == ["completed", "pending"]
    assert got[("decision", "d1", "changed")]["fields"] == ["status"]
    action = next(c for c in got.values() if c["component"] == "action")
    assert action["after"]["status"] == "completed" and action["after"]["external_id"] == "msg-1"


def test_diff_text_quotes_values_and_shows_before_and_after(cli: CLI, db: str) -> None:
    build(db)
    r = cli("diff", "r1", "--from", "4", "--to", "9")
    assert r.code == 0
    lines = r.out.splitlines()
    assert lines[0] == "run r1: state after event 4 -> state after event 9"
    assert "progress: changed completed 0 -> 1, pending 3 -> 2" in lines
    assert 'decision "d1": changed status "active" -> "invalidated"' in lines
    assert 'dependency "dataset": changed version "v1" -> "v2"' in lines
    assert any(
        line.startswith('action "send:INV-1" (act_')
        and ': added action_type "send", status "completed"' in line
        and 'external_id "msg-1"' in line
        for line in lines
    ), r.out
    # A settled action is still there at the later point (the full fold, not the lean one).
    done = cli("diff", "r1", "--from", "6", "--to", "9").out
    assert any(
        line.startswith('action "send:INV-1"')
        and ": changed " in line
        and 'status "started" -> "completed"' in line
        for line in done.splitlines()
    ), done
    hostile = cli("diff", "r1", "--from", "9", "--to", "10")
    assert 'finding "f2": added text "x\\x1b[2Ky"' in hostile.out and "\x1b" not in hostile.out


def test_diff_backwards_shows_removals_and_defaults_to_the_whole_run(cli: CLI, db: str) -> None:
    build(db)
    back = {
        (c["component"], c["key"], c["change"]) for c in changes(cli, "--from", "0", "--to", "2")
    }
    assert ("goal", None, "added") in back and ("finding", "f1", "added") in back
    whole = changes(cli)  # --from 0 --to the head
    assert {c["key"] for c in whole if c["component"] == "finding"} == {"f1", "f2"}
    assert changes(cli, "--from", "5", "--to", "5") == []
    assert "no change" in cli("diff", "r1", "--from", "5", "--to", "5").out


def test_diff_refuses_points_outside_the_log_or_in_the_wrong_order(cli: CLI, db: str) -> None:
    build(db)
    late = cli("--json", "diff", "r1", "--to", "99")
    assert (late.code, late.json()["error"]["code"]) == (1, "usage.bad_sequence")
    wrong = cli("--json", "diff", "r1", "--from", "5", "--to", "2")
    assert (wrong.code, wrong.json()["error"]["code"]) == (1, "usage.bad_sequence")
    assert cli("--json", "diff", "nope").code == 2


def test_diff_reads_through_a_checkpoint(cli: CLI, db: str) -> None:
    build(db)
    cli("checkpoint", "r1", "--reason", "mid")
    cli("append", "r1", "progress_recorded", "--payload", json.dumps({"completed": 3}))
    got = changes(cli, "--from", "5", "--to", "12")
    progress = next(c for c in got if c["component"] == "progress")
    assert (progress["before"]["completed"], progress["after"]["completed"]) == (1, 3)


def test_history_lists_checkpoints_and_confirmations_in_order(cli: CLI, db: str) -> None:
    build(db)
    assert cli("checkpoint", "r1", "--reason", "before\x1b[2K sending").code == 0  # 11
    assert cli("confirm", "r1", "--yes", "--scope", "progress").code != 1  # 12
    agent = Continuum.open(db, origin=Origin.EXTERNAL_AGENT)
    agent.append(
        "r1", EventType.REVIEW_CONFIRMED, {"through_sequence": 12, "scope": ["goal"]}
    )  # 13
    agent.close()
    cli("checkpoint", "r1")  # 14
    r = cli("--json", "history", "r1")
    assert r.code == 0
    history = r.json()["history"]
    assert [(h["kind"], h["sequence"]) for h in history] == [
        ("checkpoint", 11),
        ("confirmation", 12),
        ("confirmation", 13),
        ("checkpoint", 14),
    ]
    assert history[0]["through_sequence"] == 10 and history[0]["reason"] == "before\x1b[2K sending"
    assert history[0]["time"]
    assert (
        history[1]["through_sequence"],
        history[1]["scope"],
        history[1]["origin"],
        history[1]["counted"],
    ) == (11, ["progress"], "human", True)
    assert (history[2]["origin"], history[2]["counted"]) == ("external_agent", False)
    text = cli("history", "r1").out.splitlines()
    assert text[0] == "run r1: 2 checkpoint(s), 2 confirmation(s)"
    assert 'checkpoint through 10, reason "before\\x1b[2K sending"' in text[1]
    assert 'confirmation through 11 of "progress", origin human' in text[2]
    assert "not counted" in text[3]


def test_history_of_a_run_without_any_says_so(cli: CLI) -> None:
    cli("start", "r1", "--goal", "g")
    r = cli("history", "r1")
    assert r.code == 0 and r.out.strip() == "run r1: 0 checkpoint(s), 0 confirmation(s)"
    assert cli("--json", "history", "r1").json()["history"] == []

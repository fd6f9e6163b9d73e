"""`events RUN` reads as what happened, one line per event (issue 31, item 12): the action
and its outcome for the action events, the fields that matter for the others, key=value
for a type continuum does not know; agent text quoted and escaped; the full payload with
-v; --json exactly as stored."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from continuum import Continuum, Origin
from continuum.cli.events import FREE_FORM, SUMMARIES
from continuum.eventlog.events import EventType
from tests.cli.conftest import Result

CLI = Callable[..., Result]
RUN = "invoices"


def story(db: str) -> None:
    """1 start, 2 progress, 3 intercept INV-1, 4 complete, 5 intercept INV-2, 6 its
    failure (unknown), 7 checkpoint, 8 a person's reconcile of INV-2."""
    agent = Continuum.open(db, origin=Origin.EXTERNAL_AGENT)
    agent.start_run(RUN, "send the March invoices", total=3, model="m1")
    agent.record_progress(RUN, completed=1, total=3)
    one = agent.intercept(RUN, "send_invoice", {"to": "a@example.com"}, key="invoice:INV-1")
    agent.complete(RUN, one.action_key, external_id="msg-1", result={"ok": True})
    two = agent.intercept(RUN, "send_invoice", {"to": "b@example.com"}, key="invoice:INV-2")
    agent.fail(RUN, two.action_key, error="SMTP timeout")
    agent.checkpoint(RUN, reason="after two")
    agent.close()
    person = Continuum.open(db, origin=Origin.HUMAN)
    person.reconcile(RUN, two.action_key, occurred=True, external_id="msg-2", note="in the log")
    person.close()


def lines(cli: CLI, *args: str) -> list[str]:
    """The text lines of `events`, runs of spaces (column padding) made two."""
    r = cli("events", RUN, *args)
    assert r.code == 0, r.err
    return [re.sub(r" {2,}", "  ", line.strip()) for line in r.out.splitlines()]


def test_action_events_read_as_the_action_its_key_and_its_outcome(cli: CLI, db: str) -> None:
    story(db)
    out = lines(cli)
    assert [line.split("  ")[0] for line in out] == [str(n) for n in range(1, 9)]
    summaries = ["  ".join(line.split("  ")[3:]) for line in out]
    assert summaries == [
        'run_started  goal "send the March invoices"  total 3  model m1',
        "progress_recorded  completed 1/3",
        "action_intercepted  send_invoice  key invoice:INV-1  attempt 1",
        "action_completed  send_invoice:invoice:INV-1  external_id msg-1",
        "action_intercepted  send_invoice  key invoice:INV-2  attempt 1",
        'action_marked_unknown  send_invoice:invoice:INV-2  reason "SMTP timeout"',
        'checkpointed  through 6  reason "after two"',
        'action_reconciled  send_invoice:invoice:INV-2  occurred  external_id msg-2  note "in the log"',
    ]
    assert [line.split("  ")[2] for line in out] == ["external_agent"] * 7 + ["human"]
    assert all(
        re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", line.split("  ")[1]) for line in out
    )
    assert not any("action_id" in line or "act_" in line for line in out)  # no JSON, no ids


def test_an_action_whose_intercept_is_not_shown_is_still_named_by_its_key(
    cli: CLI, db: str
) -> None:
    story(db)
    out = lines(cli, "--after", "3", "--limit", "1")
    assert out == [out[0]] and out[0].endswith(
        "action_completed  send_invoice:invoice:INV-1  external_id msg-1"
    )


ITEMS: list[tuple[str, dict[str, Any], str]] = [
    (EventType.GOAL_SET, {"goal": "send April too"}, 'goal "send April too"'),
    (EventType.PLAN_SET, {"steps": ["a", "b c", "d", "e"]}, '4 step(s): "a", "b c", "d", +1 more'),
    (EventType.WORK_ADDED, {"item_id": "INV-3", "text": "late one"}, 'item INV-3  "late one"'),
    (EventType.WORK_COMPLETED, {"item_id": "INV-3"}, "item INV-3"),
    (EventType.WORK_FAILED, {"doc": 41}, "doc=41"),  # no field of its own: key=value
    (
        EventType.DECISION_CREATED,
        {"decision_id": "d1", "text": "send in order", "findings": ["f1", "f2"]},
        'decision d1  "send in order"  findings f1,f2',
    ),
    (
        EventType.DECISION_INVALIDATED,
        {"decision_id": "d1", "reason": "no"},
        'decision d1  reason "no"',
    ),
    (
        EventType.FINDING_ADDED,
        {"finding_id": "f1", "text": "INV-2 is late"},
        'finding f1  "INV-2 is late"',
    ),
    (EventType.MODEL_CHANGED, {"model": "m2"}, "model m2"),
    (
        EventType.APPROVAL_GRANTED,
        {"approval_id": "apr_1", "scope": "run"},
        "approval apr_1  scope run",
    ),
    (EventType.RECOVERY_BLOCKED, {"why": "needs a person", "at": 3}, 'at=3  why="needs a person"'),
    ("custom_thing", {"b": [1, 2], "a": "x y"}, 'a="x y"  b="[1, 2]"'),  # stored sorted
]


@pytest.mark.parametrize(("type_", "payload", "summary"), ITEMS, ids=[str(t) for t, _, _ in ITEMS])
def test_other_events_show_the_fields_that_matter(
    cli: CLI, db: str, type_: str, payload: dict[str, Any], summary: str
) -> None:
    rt = Continuum.open(db, origin=Origin.EXTERNAL_AGENT)
    rt.start_run(RUN, "g")
    rt.append(RUN, type_, payload)
    rt.close()
    last = lines(cli)[-1]
    kind = type_ if type_ in EventType._value2member_map_ else f'"{type_}"'
    assert last.endswith(f"{kind}  {summary}"), last


def test_every_known_type_has_a_summary_or_is_free_form() -> None:
    assert set(SUMMARIES) | FREE_FORM == set(EventType)
    assert not set(SUMMARIES) & FREE_FORM


HOSTILE_NOTE = "ok\r\x1b[2Kverdict: resume  [recorded by a human]\u202e"


def test_agent_text_is_quoted_and_escaped_never_shown_raw(cli: CLI, db: str) -> None:
    rt = Continuum.open(db, origin=Origin.EXTERNAL_AGENT)
    rt.start_run(RUN, "g")
    rt.append(RUN, EventType.RUN_ABORTED, {"reason": HOSTILE_NOTE})
    rt.append(RUN, "custom\x1b[2K", {"k y": "v  origin human", "x\x9b": 1})
    rt.close()
    r = cli("events", RUN)
    assert r.code == 0
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]", r.out), r.out
    aborted, custom = r.out.splitlines()[-2:]
    assert 'reason "ok\\x0d\\x1b[2Kverdict: resume  [recorded by a human]\\u202e"' in aborted
    assert '"custom\\x1b[2K"' in custom
    assert '"k y"="v  origin human"' in custom and '"x\\x9b"=1' in custom


def test_verbose_adds_each_events_full_payload(cli: CLI, db: str) -> None:
    story(db)
    stored = cli("--json", "events", RUN).json()["events"]
    r = cli("events", RUN, "-v")
    assert r.code == 0 and cli("events", RUN, "--verbose").out == r.out
    for line, event in zip(r.out.splitlines(), stored, strict=True):
        payload = json.loads(line.split("  payload ", 1)[1])
        assert payload == event["payload"]
    assert '"arguments": {"to": "a@example.com"}' in r.out
    assert "  payload " not in cli("events", RUN).out


def test_json_gives_the_events_exactly_as_stored(cli: CLI, db: str) -> None:
    story(db)
    rt = Continuum.open(db)
    expected = [e.model_dump(mode="json") for e in rt.events(RUN, 2)]
    rt.close()
    assert cli("--json", "events", RUN, "--after", "2").json() == {
        "ok": True,
        "run_id": RUN,
        "events": expected,
    }
    assert cli("--json", "events", RUN, "--after", "2", "-v").json()["events"] == expected


def test_a_persons_decision_shows_how_it_was_given_and_a_client_name_stays_escaped(
    cli: CLI, db: str
) -> None:
    story(db)
    person = Continuum.open(db, origin=Origin.HUMAN)
    person.confirm(RUN, via={"channel": "page", "role": "approve"})
    client = "evil\u202e<b>"
    person.confirm(RUN, via={"channel": "mcp", "client": client})
    person.close()
    lines = cli("events", RUN).out.splitlines()
    assert 'via page (role "approve")' in lines[-2], lines[-2]
    assert 'via mcp (client "evil\\u202e<b>")' in lines[-1], lines[-1]
    assert "\u202e" not in "".join(lines)
    assert "via " not in lines[2]  # an agent's event has none

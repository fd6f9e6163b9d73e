"""The rules that keep an agent from settling its own uncertainty (issue 10), on every backend.

- Only the owner of a started action (the live process that intercepted it) may complete,
  fail or reconcile it; a person may override with ``force``.
- An agent may settle an action as *occurred* (that only prevents a re-run); its word that
  an action did *not* occur does not permit a re-run until a person (or continuum's own
  check) confirms it.
- A doubtful fallback match is never reported as done; ``action_key`` is unambiguous; the
  same call written differently (paths, numbers, whitespace, Unicode form) is one action.
- A finished run takes no new side effects; a malformed payload of a known type is refused.
"""

from __future__ import annotations

import socket
import subprocess
import unicodedata
from collections.abc import Iterator
from typing import Any

import pytest

from continuum.errors import ActionOwnedError, LedgerError, UsageError
from continuum.eventlog.events import EventType
from continuum.ledger.core import ActionLedger
from continuum.runtime.facade import Continuum
from continuum.store import Run, Storage
from continuum.types import ActionStatus, Origin

RUN = "run_rules"
CWD = "/work/agent"


@pytest.fixture
def run(store: Storage) -> str:
    store.create_run(Run(run_id=RUN, goal="g"))
    return RUN


@pytest.fixture
def live_owner() -> Iterator[dict[str, Any]]:
    """Another process on this host that is alive for the whole test."""
    proc = subprocess.Popen(["sleep", "600"])
    try:
        yield {"host": socket.gethostname(), "pid": proc.pid, "start": None}
    finally:
        proc.kill()
        proc.wait()


def agent(store: Storage, **kw: Any) -> ActionLedger:
    return ActionLedger(store, origin=Origin.EXTERNAL_AGENT, cwd=CWD, **kw)


def head(store: Storage) -> tuple[int, str | None]:
    info = store.get_run(RUN)
    return info.head_sequence, info.head_hash


# -- 4. a second writer cannot settle another process's live action ------------------------------


@pytest.mark.parametrize(
    "settle", ["complete", "fail", "fail_certain", "reconcile_false", "reconcile_true"]
)
def test_a_second_writer_cannot_settle_a_live_owners_action(
    store: Storage, run: str, live_owner: dict[str, Any], settle: str
) -> None:
    a = agent(store, owner=live_owner)
    b = agent(store)  # this test process: another live writer
    first = a.intercept(RUN, "transfer", {"amount": 5}, key="tx-1")
    before = head(store)
    calls = {
        "complete": lambda: b.complete(RUN, first.action_key, external_id="x"),
        "fail": lambda: b.fail(RUN, first.action_key),
        "fail_certain": lambda: b.fail(RUN, first.action_key, certain=True),
        "reconcile_false": lambda: b.reconcile(RUN, first.action_key, occurred=False),
        "reconcile_true": lambda: b.reconcile(RUN, first.action_key, occurred=True),
    }
    with pytest.raises(ActionOwnedError) as e:
        calls[settle]()
    assert e.value.code == "ledger.owner_alive" and str(live_owner["pid"]) in e.value.message
    assert head(store) == before  # nothing written
    again = b.intercept(RUN, "transfer", {"amount": 5}, key="tx-1")
    assert (again.proceed, again.status) == (False, "in_progress")


def test_the_owner_settles_its_own_live_action(store: Storage, run: str) -> None:
    a = agent(store)
    first = a.intercept(RUN, "transfer", {"amount": 5}, key="tx-1")
    assert a.complete(RUN, first.action_key, external_id="tx").status == ActionStatus.COMPLETED


def test_a_person_overrides_a_live_owner_only_with_force(
    store: Storage, run: str, live_owner: dict[str, Any]
) -> None:
    first = agent(store, owner=live_owner).intercept(RUN, "transfer", {"amount": 5}, key="tx-1")
    human = ActionLedger(store, origin=Origin.HUMAN)
    with pytest.raises(ActionOwnedError):
        human.reconcile(RUN, first.action_key, occurred=True)
    rec = human.reconcile(RUN, first.action_key, occurred=True, force=True, note="checked")
    assert (rec.status, rec.settled_by) == (ActionStatus.COMPLETED, Origin.HUMAN)


def test_two_writers_never_both_proceed_for_one_key(
    store: Storage, run: str, live_owner: dict[str, Any]
) -> None:
    # The attack of issue 10: B reconciles A's in-flight action as not occurred, then
    # intercepts again. Both steps are refused now; only A ever proceeded.
    a, b = agent(store, owner=live_owner), agent(store)
    answers = [a.intercept(RUN, "transfer", {"to": "alice"}, key="tx-9")]
    with pytest.raises(ActionOwnedError):
        b.reconcile(RUN, "transfer:tx-9", occurred=False)
    answers.append(b.intercept(RUN, "transfer", {"to": "alice"}, key="tx-9"))
    assert [x.proceed for x in answers] == [True, False]


# -- 5. an agent cannot clear its own unknown ------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["fail_certain_after_unknown", "fail_certain_directly", "reconcile_not_occurred"]
)
def test_an_agents_word_that_an_action_did_not_happen_does_not_permit_a_rerun(
    store: Storage, run: str, path: str
) -> None:
    a = agent(store)
    first = a.intercept(RUN, "wire_money", {"amount": 48000}, key="wire-1")
    if path == "fail_certain_after_unknown":
        a.fail(RUN, first.action_key, error="timeout")  # unknown
        rec = a.fail(RUN, first.action_key, certain=True)
    elif path == "fail_certain_directly":
        rec = a.fail(RUN, first.action_key, certain=True)
    else:
        a.fail(RUN, first.action_key)
        rec = a.reconcile(RUN, first.action_key, occurred=False)
    assert rec.status == ActionStatus.FAILED and rec.failure_unconfirmed

    again = a.intercept(RUN, "wire_money", {"amount": 48000}, key="wire-1")
    assert (again.proceed, again.status, again.attempt) == (False, "needs_confirmation", 1)
    assert again.action_key == first.action_key and "person" in again.guidance

    r = Continuum(store).resume(RUN)
    assert r.mode == "request_human"
    assert f"reconcile_action:{first.action_id}" in r.required_actions
    assert [u["action_key"] for u in r.uncertain_actions] == [first.action_key]

    # A person checks the external system and confirms: now it may run again, once.
    ActionLedger(store, origin=Origin.HUMAN).reconcile(
        RUN, first.action_key, occurred=False, note="not in the bank's ledger"
    )
    retry = a.intercept(RUN, "wire_money", {"amount": 48000}, key="wire-1")
    assert (retry.proceed, retry.status, retry.attempt) == (True, "started", 2)
    assert a.intercept(RUN, "wire_money", {"amount": 48000}, key="wire-1").proceed is False


def test_an_agent_may_settle_an_unknown_action_as_occurred(store: Storage, run: str) -> None:
    a = agent(store)
    first = a.intercept(RUN, "send", {"i": 1}, key="mail-1")
    a.fail(RUN, first.action_key)
    rec = a.reconcile(RUN, first.action_key, occurred=True, external_id="msg-7")
    assert rec.status == ActionStatus.COMPLETED
    again = a.intercept(RUN, "send", {"i": 1}, key="mail-1")
    assert (again.proceed, again.status, again.external_id) == (False, "completed", "msg-7")


def test_trusted_code_may_say_an_action_did_not_happen(store: Storage, run: str) -> None:
    ledger = ActionLedger(store, origin=Origin.DETERMINISTIC, cwd=CWD)
    first = ledger.intercept(RUN, "send", {"i": 1}, key="mail-1")
    ledger.fail(RUN, first.action_key, certain=True, error="HTTP 400: rejected")
    again = ledger.intercept(RUN, "send", {"i": 1}, key="mail-1")
    assert (again.proceed, again.attempt) == (True, 2)


@pytest.mark.parametrize("replay", ["safe", "idempotent"])
def test_a_rerunnable_contract_still_reruns_after_an_agents_failure(
    store: Storage, run: str, replay: str
) -> None:
    a = agent(store)
    first = a.intercept(RUN, "fetch", {"u": 1}, key="f-1", replay=replay)
    a.fail(RUN, first.action_key, certain=True)
    assert a.intercept(RUN, "fetch", {"u": 1}, key="f-1").proceed is True


# -- 6. identity ----------------------------------------------------------------------------------


def test_a_fallback_match_is_never_reported_as_done(store: Storage, run: str) -> None:
    a = agent(store)
    first = a.intercept(RUN, "transfer", {"from": "alice", "to": "bob", "amount": 5})
    a.complete(RUN, first.action_key, external_id="tx-1")
    before = head(store)
    swapped = a.intercept(RUN, "transfer", {"from": "bob", "to": "alice", "amount": 5})
    assert (swapped.proceed, swapped.status, swapped.matched_by) == (
        False,
        "possible_duplicate",
        "fallback",
    )
    assert swapped.external_id is None and swapped.previous_result is None
    assert swapped.similar_action is not None
    assert swapped.similar_action["arguments"] == {"from": "alice", "to": "bob", "amount": 5}
    assert head(store) == before
    # A different effect, told apart by a key, proceeds.
    keyed = a.intercept(
        RUN, "transfer", {"from": "bob", "to": "alice", "amount": 5}, key="bob-to-alice"
    )
    assert keyed.proceed


def test_action_keys_are_unambiguous(store: Storage, run: str) -> None:
    a = agent(store)
    x = a.intercept(RUN, "send", {}, key="x:y")
    y = a.intercept(RUN, "send:x", {}, key="y")
    assert x.proceed and y.proceed and x.action_key != y.action_key
    a.complete(RUN, x.action_key)
    assert store.get_action(RUN, y.action_id) is not None
    assert store.get_action(RUN, y.action_id).record["status"] == "started"  # type: ignore[union-attr]
    args_form = a.intercept(RUN, "send", {"n": 1})
    keyed_like_it = a.intercept(RUN, "send", {}, key=args_form.action_key.split("#", 1)[1])
    assert keyed_like_it.proceed and keyed_like_it.action_key != args_form.action_key


def test_a_key_that_repeats_its_type_is_not_prefixed_twice(store: Storage, run: str) -> None:
    a = agent(store)
    first = a.intercept(RUN, "upload", {}, key="upload:a.csv")
    second = a.intercept(RUN, "upload", {}, key="a.csv")
    assert first.action_key == "upload:a.csv"
    assert (second.proceed, second.action_id) == (False, first.action_id)


NFC = unicodedata.normalize("NFC", "Café")
NFD = unicodedata.normalize("NFD", "Café")


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"path": "a.txt"}, {"path": "./a.txt"}),
        ({"path": "a.txt"}, {"path": f"{CWD}/a.txt"}),
        ({"file": "out/a.txt"}, {"file": "out/./b/../a.txt"}),
        ({"amount": 1}, {"amount": 1.0}),
        ({"invoice": "INV-001"}, {"invoice": "INV-001 "}),
        ({"invoice": "INV-001"}, {"invoice": "\tINV-001\n"}),
        ({"name": NFC}, {"name": NFD}),
        ({NFC: "x"}, {NFD: "x"}),
    ],
)
def test_the_same_call_written_differently_is_one_action(
    store: Storage, run: str, first: dict[str, Any], second: dict[str, Any]
) -> None:
    a = agent(store)
    one = a.intercept(RUN, "write", first)
    a.complete(RUN, one.action_key, external_id="done")
    two = a.intercept(RUN, "write", second)
    assert (two.proceed, two.status, two.action_id, two.matched_by) == (
        False,
        "completed",
        one.action_id,
        "arguments",
    )


@pytest.mark.parametrize(
    ("first_key", "second_key"), [("INV-001", "INV-001 "), ("INV-001", " INV-001"), (NFC, NFD)]
)
def test_the_same_key_written_differently_is_one_action(
    store: Storage, run: str, first_key: str, second_key: str
) -> None:
    a = agent(store)
    one = a.intercept(RUN, "send", {}, key=first_key)
    two = a.intercept(RUN, "send", {}, key=second_key)
    assert (two.proceed, two.action_id) == (False, one.action_id)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"invoice": "INV-001"}, {"invoice": "inv-001"}),  # case is kept
        ({"amount": 1}, {"amount": 1.5}),
        ({"amount": 1}, {"amount": "1"}),
        ({"path": "a.txt"}, {"path": "b.txt"}),
    ],
)
def test_different_calls_stay_different(
    store: Storage, run: str, first: dict[str, Any], second: dict[str, Any]
) -> None:
    a = agent(store)
    one = a.intercept(RUN, "write", first)
    a.complete(RUN, one.action_key)
    two = a.intercept(RUN, "write", second)
    assert two.action_id != one.action_id and two.status != "completed"


@pytest.mark.parametrize(
    "bad", ["send\x1b[2K", "send\u202e", "send\u200b", "send\x9b", "", "send\nmail"]
)
def test_control_and_bidi_characters_are_refused_in_action_types_and_keys(
    store: Storage, run: str, bad: str
) -> None:
    a = agent(store)
    before = head(store)
    with pytest.raises(UsageError) as e:
        a.intercept(RUN, bad, {})
    assert e.value.code == "usage.bad_action_type"
    with pytest.raises(UsageError) as e:
        a.intercept(RUN, "send", {}, key=bad or " ")
    assert e.value.code == "usage.bad_key"
    assert head(store) == before


@pytest.mark.parametrize("bad", ["r\x1b[31m", "r\u202e1", "r\u200b", "r\x9b", "r\x7f", "r 1"])
def test_control_and_bidi_characters_are_refused_in_run_ids(store: Storage, bad: str) -> None:
    with pytest.raises(UsageError) as e:
        store.create_run(Run(run_id=bad))
    assert e.value.code == "usage.bad_run_id"
    assert store.list_runs() == []


# -- 9. payloads of known types are checked at append ---------------------------------------------


@pytest.mark.parametrize(
    ("type_", "payload", "field"),
    [
        (EventType.DEPENDENCY_DECLARED, {"resource": "dataset", "version": "v3"}, "name"),
        (EventType.DEPENDENCY_DECLARED, {"dependencies": [{"version": "v3"}]}, "name"),
        (EventType.DEPENDENCY_DECLARED, {"dependencies": []}, "dependencies"),
        (EventType.PROGRESS_RECORDED, {"completed": 15, "total": 10}, "exceeds total"),
        (EventType.PROGRESS_RECORDED, {"completed": -1}, "completed"),
        (EventType.PROGRESS_RECORDED, {"completed": True}, "completed"),
        (EventType.GOAL_SET, {"goal": 5}, "goal"),
        (EventType.PLAN_SET, {"steps": "one"}, "steps"),
        (EventType.REVIEW_CONFIRMED, {}, "through_sequence"),
        (EventType.ACTION_RECONCILED, {"action_id": "a", "occurred": "yes"}, "occurred"),
        (EventType.MODEL_CHANGED, {}, "model"),
    ],
)
def test_a_malformed_payload_of_a_known_type_is_refused_naming_the_field(
    store: Storage, run: str, type_: str, payload: dict[str, Any], field: str
) -> None:
    before = head(store)
    with pytest.raises(UsageError) as e:
        store.append_event(RUN, type_, payload)
    assert e.value.code == "usage.bad_payload" and field in e.value.message
    assert head(store) == before


def test_unknown_event_types_and_extra_fields_are_still_accepted(store: Storage, run: str) -> None:
    store.append_event(RUN, "custom_note", {"anything": [1, 2]})
    store.append_event(RUN, EventType.WORK_COMPLETED, {"doc": 3, "item_id": "d3"})
    assert store.get_run(RUN).head_sequence == 2


def test_record_progress_past_the_total_is_refused(store: Storage, run: str) -> None:
    rt = Continuum(store, origin=Origin.EXTERNAL_AGENT)
    rt.record_progress(RUN, total=10, completed=3)
    before = head(store)
    with pytest.raises(UsageError) as e:
        rt.record_progress(RUN, completed=15)
    assert e.value.code == "usage.bad_progress"
    with pytest.raises(UsageError):
        rt.record_progress(RUN, completed=9, failed=2)
    assert head(store) == before
    assert rt.state(RUN).progress.completed == 3


# -- 10. a finished run takes no new side effects ----------------------------------------------------


@pytest.mark.parametrize("aborted", [False, True])
def test_a_finished_run_refuses_intercepts_but_settles_earlier_actions(
    store: Storage, run: str, aborted: bool
) -> None:
    a = agent(store)
    open_action = a.intercept(RUN, "send", {}, key="k1")
    a.fail(RUN, open_action.action_key)  # unknown
    Continuum(store).finish_run(RUN, aborted=aborted, reason="stopped")
    before = head(store)
    with pytest.raises(LedgerError) as e:
        a.intercept(RUN, "send", {}, key="k2")
    assert e.value.code == "ledger.run_finished"
    assert head(store) == before
    r = Continuum(store).resume(RUN)
    assert r.mode == "not_resumable"
    assert "none" not in r.required_actions
    assert r.required_actions == [f"reconcile_action:{open_action.action_id}"]
    rec = ActionLedger(store, origin=Origin.HUMAN).reconcile(
        RUN, open_action.action_key, occurred=True
    )
    assert rec.status == ActionStatus.COMPLETED
    assert Continuum(store).resume(RUN).next_allowed_action == "none"

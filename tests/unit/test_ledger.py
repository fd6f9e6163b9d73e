"""The action ledger (contract §6): intercept, perform, complete; at most once where provable.

After every transition the action index must equal the fold's record of the action
(``Continuum.verify`` checks exactly that), so most tests end with ``assert_consistent``.
"""

from __future__ import annotations

import math
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from continuum.errors import (
    InvalidTransitionError,
    NotFoundError,
    ReplayWideningError,
    UsageError,
)
from continuum.eventlog.events import EventType
from continuum.ledger.core import ActionLedger
from continuum.ledger.gate import InterceptResult
from continuum.runtime.facade import Continuum
from continuum.store import Run, SQLiteStorage
from continuum.types import ActionStatus, ReplayContract

RUN = "run_ledger"
CWD = "/work/agent"
OTHER_HOST = f"{socket.gethostname()}-elsewhere"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture
def store(db: Path) -> Iterator[SQLiteStorage]:
    with SQLiteStorage(db) as s:
        s.create_run(Run(run_id=RUN))
        yield s


@pytest.fixture
def ledger(store: SQLiteStorage) -> ActionLedger:
    """A ledger owned by this (live) test process."""
    return ActionLedger(store, cwd=CWD)


@pytest.fixture
def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def dead_owner(pid: int) -> dict[str, Any]:
    # No start time: only the pid can tell that this owner is gone.
    return {"host": socket.gethostname(), "pid": pid, "start": None}


def remote_owner() -> dict[str, Any]:
    return {"host": OTHER_HOST, "pid": 4242, "start": None}


def head(store: SQLiteStorage) -> tuple[int, str | None]:
    info = store.get_run(RUN)
    return info.head_sequence, info.head_hash


def status_of(store: SQLiteStorage, ref: str) -> ActionStatus:
    row = store.get_action(RUN, ref)
    assert row is not None
    return ActionStatus(row.record["status"])


def last_event_type(store: SQLiteStorage) -> str:
    return store.read_events(RUN)[-1].type


def assert_consistent(store: SQLiteStorage) -> None:
    report = Continuum(store).verify(RUN)
    assert report.ok, report.violations


def interrupted(
    store: SQLiteStorage, dead_pid: int, *, replay: str | None = None, key: str = "invoice:INV-001"
) -> InterceptResult:
    """An action intercepted by a process that then died before completing it."""
    first = ActionLedger(store, cwd=CWD, owner=dead_owner(dead_pid)).intercept(
        RUN, "send_invoice", {"invoice": "INV-001"}, key=key, replay=replay
    )
    assert first.proceed
    return first


# -- intercept, complete ----------------------------------------------------------------------


def test_first_intercept_proceeds_with_a_started_action(
    store: SQLiteStorage, ledger: ActionLedger
) -> None:
    r = ledger.intercept(RUN, "send_invoice", {"invoice": "INV-001"}, key="invoice:INV-001")

    assert r.proceed is True
    assert r.status == "started"
    assert r.attempt == 1
    assert r.replay == ReplayContract.NEVER
    assert r.action_key == "send_invoice:invoice:INV-001"
    assert r.operation_key
    assert r.matched_by is None
    assert last_event_type(store) == EventType.ACTION_INTERCEPTED
    assert status_of(store, r.action_key) == ActionStatus.STARTED
    assert_consistent(store)


def test_intercept_of_a_completed_action_returns_its_result_and_does_not_proceed(
    store: SQLiteStorage, ledger: ActionLedger
) -> None:
    first = ledger.intercept(RUN, "send_invoice", {"invoice": "INV-001"}, key="invoice:INV-001")
    done = ledger.complete(RUN, first.action_key, external_id="msg-77", result={"sent": True})
    assert done.status == ActionStatus.COMPLETED
    assert_consistent(store)
    before = head(store)

    again = ledger.intercept(RUN, "send_invoice", {"invoice": "INV-001"}, key="invoice:INV-001")

    assert again.proceed is False
    assert again.status == "completed"
    assert again.external_id == "msg-77"
    assert again.previous_result == {"sent": True}
    assert again.action_id == first.action_id
    assert again.matched_by == "key"
    assert head(store) == before


def test_complete_accepts_the_action_id_as_well_as_the_action_key(
    store: SQLiteStorage, ledger: ActionLedger
) -> None:
    r = ledger.intercept(RUN, "send_invoice", {"invoice": "INV-2"}, key="invoice:INV-2")
    ledger.complete(RUN, r.action_id, external_id="x")
    assert status_of(store, r.action_key) == ActionStatus.COMPLETED
    assert_consistent(store)


# -- in progress: a live owner ------------------------------------------------------------------


def test_intercept_of_an_action_started_by_this_live_process_is_in_progress_and_writes_nothing(
    store: SQLiteStorage, ledger: ActionLedger
) -> None:
    first = ledger.intercept(
        RUN, "send_invoice", {"invoice": "INV-001"}, key="invoice:INV-001", replay="safe"
    )
    before = head(store)

    for replay in (None, "safe", "never"):
        again = ActionLedger(store, cwd=CWD).intercept(
            RUN, "send_invoice", {"invoice": "INV-001"}, key="invoice:INV-001", replay=replay
        )
        assert again.proceed is False
        assert again.status == "in_progress"
        assert again.action_id == first.action_id

    assert head(store) == before
    assert status_of(store, first.action_key) == ActionStatus.STARTED
    assert_consistent(store)


def test_intercept_of_an_action_owned_by_another_host_with_a_valid_lease_is_in_progress(
    store: SQLiteStorage,
) -> None:
    remote = ActionLedger(
        store, cwd=CWD, owner=remote_owner(), clock=lambda: 1000.0, lease_seconds=30.0
    )
    first = remote.intercept(RUN, "send_invoice", {"invoice": "INV-001"}, key="invoice:INV-001")
    before = head(store)

    local = ActionLedger(store, cwd=CWD, clock=lambda: 1029.0)
    again = local.intercept(RUN, "send_invoice", {"invoice": "INV-001"}, key="invoice:INV-001")

    assert (again.proceed, again.status) == (False, "in_progress")
    assert again.action_id == first.action_id
    assert head(store) == before


def test_a_renewed_lease_keeps_a_remote_action_in_progress(store: SQLiteStorage) -> None:
    now = [1000.0]
    remote = ActionLedger(
        store, cwd=CWD, owner=remote_owner(), clock=lambda: now[0], lease_seconds=30.0
    )
    first = remote.intercept(RUN, "send_invoice", {"invoice": "INV-001"}, key="invoice:INV-001")
    now[0] = 1025.0
    remote.renew_lease(RUN, first.action_key)

    local = ActionLedger(store, cwd=CWD, clock=lambda: 1050.0)
    again = local.intercept(RUN, "send_invoice", {"invoice": "INV-001"}, key="invoice:INV-001")

    assert again.status == "in_progress"
    assert_consistent(store)


def test_an_expired_remote_lease_makes_the_action_interrupted(store: SQLiteStorage) -> None:
    remote = ActionLedger(
        store, cwd=CWD, owner=remote_owner(), clock=lambda: 1000.0, lease_seconds=30.0
    )
    remote.intercept(RUN, "send_invoice", {"invoice": "INV-001"}, key="invoice:INV-001")

    local = ActionLedger(store, cwd=CWD, clock=lambda: 1031.0)
    again = local.intercept(RUN, "send_invoice", {"invoice": "INV-001"}, key="invoice:INV-001")

    assert (again.proceed, again.status) == (False, "unknown")
    assert_consistent(store)


# -- interrupted: a dead owner, per replay contract -----------------------------------------------


def test_an_action_of_a_dead_owner_with_replay_never_becomes_unknown(
    store: SQLiteStorage, ledger: ActionLedger, dead_pid: int
) -> None:
    first = interrupted(store, dead_pid)

    r = ledger.intercept(RUN, "send_invoice", {"invoice": "INV-001"}, key="invoice:INV-001")

    assert r.proceed is False
    assert r.status == "unknown"
    assert r.action_key == first.action_key
    assert "reconcile" in r.guidance
    assert last_event_type(store) == EventType.ACTION_MARKED_UNKNOWN
    assert status_of(store, first.action_key) == ActionStatus.UNKNOWN
    assert_consistent(store)

    before = head(store)
    again = ledger.intercept(RUN, "send_invoice", {"invoice": "INV-001"}, key="invoice:INV-001")
    assert (again.proceed, again.status, again.action_key) == (False, "unknown", first.action_key)
    assert head(store) == before


def test_an_action_of_a_dead_owner_with_replay_safe_proceeds_as_a_new_attempt(
    store: SQLiteStorage, ledger: ActionLedger, dead_pid: int
) -> None:
    first = interrupted(store, dead_pid, replay="safe")

    r = ledger.intercept(RUN, "send_invoice", {"invoice": "INV-001"}, key="invoice:INV-001")

    assert (r.proceed, r.status, r.attempt) == (True, "started", 2)
    assert r.action_id == first.action_id
    assert r.replay == ReplayContract.SAFE
    assert last_event_type(store) == EventType.ACTION_RETRIED
    row = store.get_action(RUN, first.action_id)
    assert row is not None and row.record["owner"]["pid"] == os.getpid()
    assert_consistent(store)

    # The new attempt is owned by this live process: a third caller must wait.
    third = ActionLedger(store, cwd=CWD).intercept(
        RUN, "send_invoice", {"invoice": "INV-001"}, key="invoice:INV-001"
    )
    assert third.status == "in_progress"


def test_an_action_of_a_dead_owner_with_replay_idempotent_proceeds_with_the_same_operation_key(
    store: SQLiteStorage, ledger: ActionLedger, dead_pid: int
) -> None:
    first = interrupted(store, dead_pid, replay="idempotent")

    r = ledger.intercept(RUN, "send_invoice", {"invoice": "INV-001"}, key="invoice:INV-001")

    assert (r.proceed, r.status, r.attempt) == (True, "started", 2)
    assert r.operation_key == first.operation_key
    assert r.operation_key is not None
    assert_consistent(store)


def test_an_action_of_a_dead_owner_with_replay_reconcile_requires_reconciliation(
    store: SQLiteStorage, ledger: ActionLedger, dead_pid: int
) -> None:
    first = interrupted(store, dead_pid, replay="reconcile")

    r = ledger.intercept(RUN, "send_invoice", {"invoice": "INV-001"}, key="invoice:INV-001")

    assert (r.proceed, r.status) == (False, "reconcile_required")
    assert r.action_key == first.action_key
    assert status_of(store, first.action_key) == ActionStatus.UNKNOWN
    again = ledger.intercept(RUN, "send_invoice", {"invoice": "INV-001"}, key="invoice:INV-001")
    assert again.status == "reconcile_required"
    assert_consistent(store)

    ledger.reconcile(RUN, first.action_key, occurred=True, external_id="msg-1")
    done = ledger.intercept(RUN, "send_invoice", {"invoice": "INV-001"}, key="invoice:INV-001")
    assert (done.proceed, done.status, done.external_id) == (False, "completed", "msg-1")
    assert_consistent(store)


def test_a_reused_pid_with_another_start_time_counts_as_dead(
    store: SQLiteStorage, ledger: ActionLedger
) -> None:
    impostor = {"host": socket.gethostname(), "pid": os.getpid(), "start": "-1"}
    ActionLedger(store, cwd=CWD, owner=impostor).intercept(RUN, "send_invoice", {"i": 1}, key="k")

    r = ledger.intercept(RUN, "send_invoice", {"i": 1}, key="k")

    assert r.status == "unknown"


def test_an_owner_killed_but_not_yet_reaped_counts_as_dead(
    store: SQLiteStorage, ledger: ActionLedger
) -> None:
    agent = subprocess.Popen(["sleep", "600"])
    try:
        owner = {"host": socket.gethostname(), "pid": agent.pid, "start": None}
        ActionLedger(store, cwd=CWD, owner=owner).intercept(RUN, "send_invoice", {"i": 1}, key="k")
        assert ledger.intercept(RUN, "send_invoice", {"i": 1}, key="k").status == "in_progress"

        agent.kill()
        os.waitid(os.P_PID, agent.pid, os.WEXITED | os.WNOWAIT)  # dead, still a zombie

        assert ledger.intercept(RUN, "send_invoice", {"i": 1}, key="k").status == "unknown"
    finally:
        agent.kill()
        agent.wait()


# -- replay contract: widening and narrowing ---------------------------------------------------


@pytest.mark.parametrize(
    ("stored", "requested"),
    [
        ("never", "reconcile"),
        ("never", "safe"),
        ("reconcile", "idempotent"),
        ("idempotent", "safe"),
    ],
)
def test_widening_the_replay_contract_is_refused_and_writes_nothing(
    store: SQLiteStorage, ledger: ActionLedger, stored: str, requested: str
) -> None:
    first = ledger.intercept(RUN, "send_invoice", {"i": 1}, key="k", replay=stored)
    ledger.complete(RUN, first.action_key)
    before = head(store)

    with pytest.raises(ReplayWideningError) as e:
        ledger.intercept(RUN, "send_invoice", {"i": 1}, key="k", replay=requested)

    assert e.value.code == "ledger.replay_widening"
    assert head(store) == before


def test_narrowing_the_replay_contract_is_allowed(
    store: SQLiteStorage, ledger: ActionLedger, dead_pid: int
) -> None:
    interrupted(store, dead_pid, replay="safe")

    r = ledger.intercept(
        RUN, "send_invoice", {"invoice": "INV-001"}, key="invoice:INV-001", replay="never"
    )

    assert (r.proceed, r.status) == (False, "unknown")
    assert_consistent(store)


def test_an_unknown_replay_contract_is_refused_without_writing(
    store: SQLiteStorage, ledger: ActionLedger
) -> None:
    before = head(store)
    with pytest.raises(UsageError) as e:
        ledger.intercept(RUN, "send_invoice", {"i": 1}, key="k", replay="sometimes")
    assert e.value.code == "usage.bad_replay"
    assert head(store) == before


# -- dedup keys ------------------------------------------------------------------------------------


def test_the_same_key_is_one_action_whatever_the_arguments(
    store: SQLiteStorage, ledger: ActionLedger
) -> None:
    first = ledger.intercept(RUN, "send_invoice", {"amount": 10}, key="invoice:INV-001")
    ledger.complete(RUN, first.action_key)

    again = ledger.intercept(RUN, "send_invoice", {"amount": 11}, key="invoice:INV-001")

    assert (again.proceed, again.action_id, again.matched_by) == (False, first.action_id, "key")


def test_the_same_key_for_another_action_type_is_another_action(ledger: ActionLedger) -> None:
    a = ledger.intercept(RUN, "send_invoice", {"i": 1}, key="invoice:INV-001")
    b = ledger.intercept(RUN, "archive_invoice", {"i": 1}, key="invoice:INV-001")
    assert b.proceed and b.action_id != a.action_id


def test_the_same_key_in_another_run_is_another_action(
    store: SQLiteStorage, ledger: ActionLedger
) -> None:
    store.create_run(Run(run_id="run_other"))
    a = ledger.intercept(RUN, "send_invoice", {"i": 1}, key="invoice:INV-001")
    b = ledger.intercept("run_other", "send_invoice", {"i": 1}, key="invoice:INV-001")
    assert b.proceed and b.action_id != a.action_id


def test_without_a_key_the_same_arguments_are_one_action(
    store: SQLiteStorage, ledger: ActionLedger
) -> None:
    first = ledger.intercept(RUN, "send_mail", {"to": "a@example.com", "subject": "Hi"})
    ledger.complete(RUN, first.action_key)

    again = ledger.intercept(RUN, "send_mail", {"subject": "Hi", "to": "a@example.com"})

    assert (again.proceed, again.action_id, again.matched_by) == (
        False,
        first.action_id,
        "arguments",
    )


def test_without_a_key_different_arguments_are_different_actions(ledger: ActionLedger) -> None:
    a = ledger.intercept(RUN, "send_mail", {"to": "a@example.com"})
    b = ledger.intercept(RUN, "send_mail", {"to": "b@example.com"})
    assert b.proceed and b.action_id != a.action_id


def test_a_keyed_and_an_unkeyed_intercept_are_different_actions(ledger: ActionLedger) -> None:
    a = ledger.intercept(RUN, "send_mail", {"to": "a@example.com"}, key="mail:1")
    b = ledger.intercept(RUN, "send_mail", {"to": "a@example.com"})
    assert b.proceed and b.action_id != a.action_id


@pytest.mark.parametrize(
    ("first", "second", "matched_by"),
    [
        (
            {"invoice": "INV-1", "to": "a@example.com"},
            {"invoice_id": "INV-1", "recipient": "a@example.com"},
            "fallback",
        ),
        ({"path": "out/a.txt"}, {"path": f"{CWD}/out/a.txt"}, "arguments"),
        ({"path": "./out/../out/a.txt"}, {"path": f"{CWD}/out/./a.txt"}, "arguments"),
        (
            {"path": "out/a.txt", "body": "x"},
            {"file": f"{CWD}/out/a.txt", "content": "x"},
            "fallback",
        ),
        (
            {"files": ["out/a.txt", "out/b.txt"]},
            {"paths": [f"{CWD}/out/a.txt", "out/b.txt"]},
            "fallback",
        ),
    ],
)
def test_drifted_arguments_of_the_same_call_match_the_first_action(
    store: SQLiteStorage,
    ledger: ActionLedger,
    first: dict[str, Any],
    second: dict[str, Any],
    matched_by: str,
) -> None:
    a = ledger.intercept(RUN, "write_file", first)
    ledger.complete(RUN, a.action_key, external_id="written")
    before = head(store)

    b = ledger.intercept(RUN, "write_file", second)

    if matched_by == "arguments":  # the same call, normalized: it is done
        assert (b.proceed, b.status, b.action_id, b.matched_by) == (
            False,
            "completed",
            a.action_id,
            "arguments",
        )
        assert b.external_id == "written"
    else:  # the same values under other names: a suspicion, never "done", never performed
        assert (b.proceed, b.status, b.action_id, b.matched_by) == (
            False,
            "possible_duplicate",
            a.action_id,
            "fallback",
        )
        assert b.similar_action is not None
        assert (b.similar_action["action_key"], b.similar_action["status"]) == (
            a.action_key,
            "completed",
        )
        assert b.similar_action["arguments"] == first
        assert head(store) == before  # nothing written


@pytest.mark.parametrize(
    "second",
    [
        {"path": "out/b.txt"},
        {"path": "/elsewhere/out/a.txt"},
        {"path": "out/a.txt", "extra": 1},
    ],
)
def test_arguments_naming_another_identifier_do_not_match(
    ledger: ActionLedger, second: dict[str, Any]
) -> None:
    a = ledger.intercept(RUN, "write_file", {"path": "out/a.txt"})
    b = ledger.intercept(RUN, "write_file", second)
    assert b.proceed and b.action_id != a.action_id


def test_the_same_relative_path_from_another_directory_is_another_action(
    store: SQLiteStorage, ledger: ActionLedger
) -> None:
    a = ledger.intercept(RUN, "write_file", {"path": "out/a.txt"})
    b = ActionLedger(store, cwd="/other/dir").intercept(RUN, "write_file", {"path": "out/a.txt"})
    assert b.proceed and b.action_id != a.action_id


# -- fail, reconcile, compensate ----------------------------------------------------------------


def test_fail_without_certainty_marks_the_action_unknown(
    store: SQLiteStorage, ledger: ActionLedger
) -> None:
    r = ledger.intercept(RUN, "send_invoice", {"i": 1}, key="k")

    rec = ledger.fail(RUN, r.action_key, error="timeout")

    assert rec.status == ActionStatus.UNKNOWN
    assert_consistent(store)
    again = ledger.intercept(RUN, "send_invoice", {"i": 1}, key="k")
    assert (again.proceed, again.status) == (False, "unknown")


def test_a_certain_failure_lets_the_next_intercept_proceed_as_a_new_attempt(
    store: SQLiteStorage, ledger: ActionLedger
) -> None:
    r = ledger.intercept(RUN, "send_invoice", {"i": 1}, key="k")

    rec = ledger.fail(RUN, r.action_key, error="rejected by the API", certain=True)

    assert rec.status == ActionStatus.FAILED
    assert rec.error == "rejected by the API"
    assert_consistent(store)
    again = ledger.intercept(RUN, "send_invoice", {"i": 1}, key="k")
    assert (again.proceed, again.status, again.attempt) == (True, "started", 2)
    assert_consistent(store)


def test_a_certain_failure_can_settle_an_unknown_action(
    store: SQLiteStorage, ledger: ActionLedger
) -> None:
    r = ledger.intercept(RUN, "send_invoice", {"i": 1}, key="k")
    ledger.fail(RUN, r.action_key)
    assert ledger.fail(RUN, r.action_key, certain=True).status == ActionStatus.FAILED
    assert_consistent(store)


def test_reconcile_occurred_true_completes_the_action(
    store: SQLiteStorage, ledger: ActionLedger
) -> None:
    r = ledger.intercept(RUN, "send_invoice", {"i": 1}, key="k")
    ledger.fail(RUN, r.action_key)

    rec = ledger.reconcile(RUN, r.action_key, occurred=True, external_id="msg-9", note="seen")

    assert (rec.status, rec.external_id, rec.note) == (ActionStatus.COMPLETED, "msg-9", "seen")
    assert_consistent(store)
    again = ledger.intercept(RUN, "send_invoice", {"i": 1}, key="k")
    assert (again.proceed, again.status, again.external_id) == (False, "completed", "msg-9")


def test_reconcile_occurred_false_fails_the_action_so_it_may_run_again(
    store: SQLiteStorage, ledger: ActionLedger
) -> None:
    r = ledger.intercept(RUN, "send_invoice", {"i": 1}, key="k")
    ledger.fail(RUN, r.action_key)

    rec = ledger.reconcile(RUN, r.action_key, occurred=False)

    assert rec.status == ActionStatus.FAILED
    assert_consistent(store)
    again = ledger.intercept(RUN, "send_invoice", {"i": 1}, key="k")
    assert (again.proceed, again.attempt) == (True, 2)


def test_compensate_records_an_undo_and_later_intercepts_do_not_proceed(
    store: SQLiteStorage, ledger: ActionLedger
) -> None:
    r = ledger.intercept(RUN, "send_invoice", {"i": 1}, key="k")
    ledger.complete(RUN, r.action_key, external_id="msg-1")

    rec = ledger.compensate(RUN, r.action_key, note="credit note issued")

    assert rec.status == ActionStatus.COMPENSATED
    assert_consistent(store)
    again = ledger.intercept(RUN, "send_invoice", {"i": 1}, key="k")
    assert (again.proceed, again.status) == (False, "compensated")


def _to_completed(ledger: ActionLedger, ref: str) -> None:
    ledger.complete(RUN, ref)


def _to_unknown(ledger: ActionLedger, ref: str) -> None:
    ledger.fail(RUN, ref)


def _to_failed(ledger: ActionLedger, ref: str) -> None:
    ledger.fail(RUN, ref, certain=True)


def _to_compensated(ledger: ActionLedger, ref: str) -> None:
    ledger.complete(RUN, ref)
    ledger.compensate(RUN, ref)


SETUPS = {
    "started": lambda ledger, ref: None,
    "completed": _to_completed,
    "unknown": _to_unknown,
    "failed": _to_failed,
    "compensated": _to_compensated,
}
MOVES = {
    "complete": lambda ledger, ref: ledger.complete(RUN, ref),
    "fail": lambda ledger, ref: ledger.fail(RUN, ref),
    "fail_certain": lambda ledger, ref: ledger.fail(RUN, ref, certain=True),
    "reconcile": lambda ledger, ref: ledger.reconcile(RUN, ref, occurred=True),
    "compensate": lambda ledger, ref: ledger.compensate(RUN, ref),
}
ALLOWED = {
    "complete": {"started"},
    "fail": {"started"},
    "fail_certain": {"started", "unknown"},
    "reconcile": {"started", "unknown"},
    "compensate": {"completed"},
}
INVALID = [
    (move, state)
    for move in sorted(MOVES)
    for state in sorted(SETUPS)
    if state not in ALLOWED[move]
]


@pytest.mark.parametrize(("move", "state"), INVALID)
def test_an_invalid_transition_is_refused_and_writes_nothing(
    store: SQLiteStorage, ledger: ActionLedger, move: str, state: str
) -> None:
    r = ledger.intercept(RUN, "send_invoice", {"i": 1}, key="k")
    SETUPS[state](ledger, r.action_key)
    before = head(store)

    with pytest.raises(InvalidTransitionError) as e:
        MOVES[move](ledger, r.action_key)

    assert e.value.code == "ledger.invalid_transition"
    assert head(store) == before
    assert status_of(store, r.action_key) == ActionStatus(state)


@pytest.mark.parametrize("move", sorted(MOVES))
def test_a_transition_on_an_unknown_action_is_not_found(
    store: SQLiteStorage, ledger: ActionLedger, move: str
) -> None:
    before = head(store)
    with pytest.raises(NotFoundError) as e:
        MOVES[move](ledger, "send_invoice:nope")
    assert e.value.code == "not_found.action"
    assert head(store) == before


def test_intercept_in_a_missing_run_is_not_found(ledger: ActionLedger) -> None:
    with pytest.raises(NotFoundError) as e:
        ledger.intercept("ghost", "send_invoice", {"i": 1}, key="k")
    assert e.value.code == "not_found.run"


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"action_type": ""}, "usage.bad_action_type"),
        ({"action_type": "  "}, "usage.bad_action_type"),
        ({"key": ""}, "usage.bad_key"),
        ({"arguments": {"amount": math.nan}}, "usage.non_finite_number"),
        ({"arguments": {"when": object()}}, "usage.not_json"),
    ],
)
def test_bad_intercept_input_is_refused_without_writing(
    store: SQLiteStorage, ledger: ActionLedger, kwargs: dict[str, Any], code: str
) -> None:
    call: dict[str, Any] = {"action_type": "send_invoice", "arguments": {"i": 1}, "key": "k"}
    call.update(kwargs)
    before = head(store)

    with pytest.raises(UsageError) as e:
        ledger.intercept(RUN, call["action_type"], call["arguments"], key=call["key"])

    assert e.value.code == code
    assert head(store) == before


# -- the index against the log ------------------------------------------------------------------


def test_the_index_follows_the_fold_through_a_full_lifecycle(
    store: SQLiteStorage, ledger: ActionLedger, dead_pid: int
) -> None:
    steps = [
        lambda: interrupted(store, dead_pid, replay="idempotent", key="a"),
        lambda: ledger.intercept(RUN, "send_invoice", {"invoice": "INV-001"}, key="a"),
        lambda: ledger.fail(RUN, "send_invoice:a"),
        lambda: ledger.reconcile(RUN, "send_invoice:a", occurred=False),
        lambda: ledger.intercept(RUN, "send_invoice", {"invoice": "INV-001"}, key="a"),
        lambda: ledger.complete(RUN, "send_invoice:a", external_id="e", result=[1, 2]),
        lambda: ledger.compensate(RUN, "send_invoice:a"),
    ]
    for step in steps:
        step()
        assert_consistent(store)
    rec = ledger.actions(RUN)[0]
    assert (rec.status, rec.attempt) == (ActionStatus.COMPENSATED, 3)


def test_verify_reports_an_index_row_that_disagrees_with_the_log(
    db: Path, store: SQLiteStorage, ledger: ActionLedger
) -> None:
    r = ledger.intercept(RUN, "send_invoice", {"i": 1}, key="k")
    ledger.complete(RUN, r.action_key)
    conn = apsw.Connection(str(db))
    try:
        conn.execute("UPDATE actions SET record = json_set(record, '$.status', 'failed')")
    finally:
        conn.close()

    report = Continuum(store).verify(RUN)

    assert not report.ok
    assert [str(v.kind) for v in report.violations] == ["index_mismatch"]


def test_held_leases_are_renewed_until_the_action_is_settled(tmp_path: Path) -> None:
    from continuum.ledger.core import ActionLedger
    from continuum.store import Run, open_store

    store = open_store(str(tmp_path / "lease.db"))
    store.create_run(Run(run_id="r"))
    now = [1000.0]
    ledger = ActionLedger(store, lease_seconds=30, clock=lambda: now[0])
    r = ledger.intercept("r", "send", {"x": 1}, key="k")
    row = store.get_action("r", r.action_id)
    assert row is not None and row.lease_expires == 1030.0
    now[0] = 1020.0
    assert ledger.renew_held_leases() == 1
    row = store.get_action("r", r.action_id)
    assert row is not None and row.lease_expires == 1050.0
    ledger.complete("r", r.action_key)
    assert ledger.renew_held_leases() == 0

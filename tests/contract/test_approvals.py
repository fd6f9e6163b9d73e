"""Per-call approvals and the outbox table, on every backend (SQLite and PostgreSQL).

The state machine: requested -> granted (used once by exactly that call) | denied; a
changed argument asks again; ``--scope run`` covers the action type for the run; only a
person decides; an edited approval index lets nothing run. Notifications are written in
the transaction of their event, and move pending -> delivered | failed -> pending.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from continuum.errors import IntegrityError, InvalidTransitionError, UsageError
from continuum.eventlog.events import EventType
from continuum.ledger.approvals import ApprovalRules, parse_rules
from continuum.ops.transfer import export_runs, import_runs
from continuum.runtime.facade import Continuum
from continuum.store import SQLiteStorage, Storage
from continuum.types import Origin
from tests.contract.conftest import StoreFactory

RUN = "pay_run"
RULES = ApprovalRules(
    rules=parse_rules(
        '[[approval]]\naction_type = "wire_money"\n\n[[approval]]\naction_type = "delete_db"\n',
        "approvals.toml",
    )
)
WIRE = {"amount": 25000, "to": "ACME"}


def agent(store: Storage) -> Continuum:
    return Continuum(store, origin=Origin.EXTERNAL_AGENT, approvals=RULES)


@pytest.fixture
def cx(store_factory: StoreFactory) -> Continuum:
    rt = agent(store_factory.open())
    rt.start_run(RUN, "pay suppliers")
    return rt


def events_of(cx: Continuum, type_: EventType) -> list[Any]:
    return [e for e in cx.events(RUN) if e.type == type_]


def test_a_matching_call_waits_and_a_repeat_finds_the_same_request(
    cx: Continuum, store_factory: StoreFactory
) -> None:
    first = cx.intercept(RUN, "wire_money", WIRE, key="w1")
    assert (first.proceed, first.status) == (False, "awaiting_approval")
    assert first.approval_id and first.approval_id in first.guidance
    head = cx.store.get_run(RUN).head_sequence
    again = agent(store_factory.open()).intercept(RUN, "wire_money", WIRE, key="w1")  # a restart
    assert (again.status, again.approval_id) == ("awaiting_approval", first.approval_id)
    assert cx.store.get_run(RUN).head_sequence == head  # nothing new written
    assert len(events_of(cx, EventType.APPROVAL_REQUESTED)) == 1
    assert cx.actions(RUN) == []  # the action itself was never started
    assert [a.id for a in cx.approvals()] == [first.approval_id]
    verdict = cx.resume(RUN)
    assert (verdict.mode, verdict.next_allowed_action) == (
        "request_human",
        f"await_approval:{first.approval_id}",
    )


def test_an_allowed_call_proceeds_once_with_exactly_those_arguments(cx: Continuum) -> None:
    asked = cx.intercept(RUN, "wire_money", WIRE, key="w1")
    decided = cx.decide(asked.approval_id or "", allow=True, reason="invoice checked")
    assert (decided.status, decided.scope, decided.decided_by) == ("granted", "call", "human")
    granted = events_of(cx, EventType.APPROVAL_GRANTED)
    assert [e.source for e in granted] == [Origin.HUMAN]

    changed = cx.intercept(RUN, "wire_money", {**WIRE, "amount": 25001}, key="w1")
    assert changed.status == "awaiting_approval" and changed.approval_id != asked.approval_id

    go = cx.intercept(RUN, "wire_money", WIRE, key="w1")
    assert (go.proceed, go.status, go.approval_id) == (True, "started", asked.approval_id)
    cx.complete(RUN, go.action_key, external_id="tx-1")
    done = cx.intercept(RUN, "wire_money", WIRE, key="w1")
    assert (done.proceed, done.status) == (False, "completed")
    assert cx.approval(asked.approval_id or "").used_by == go.action_id
    assert cx.verify(RUN).ok


def test_a_used_approval_does_not_cover_a_second_attempt(cx: Continuum) -> None:
    asked = cx.intercept(RUN, "wire_money", WIRE)
    cx.decide(asked.approval_id or "", allow=True, reason="ok")
    go = cx.intercept(RUN, "wire_money", WIRE)
    assert go.proceed
    trusted = Continuum(cx.store, approvals=RULES)  # the program itself: certainly not sent
    trusted.fail(RUN, go.action_key, error="bank refused", certain=True)
    retry = cx.intercept(RUN, "wire_money", WIRE)
    assert (retry.proceed, retry.status) == (False, "awaiting_approval")
    assert retry.approval_id not in (None, asked.approval_id)
    cx.decide(retry.approval_id or "", allow=True, reason="retry checked")
    second = cx.intercept(RUN, "wire_money", WIRE)
    assert (second.proceed, second.attempt, second.approval_id) == (True, 2, retry.approval_id)
    assert cx.verify(RUN).ok


def test_a_denied_call_answers_denied_with_the_reason_and_changes_nothing(cx: Continuum) -> None:
    asked = cx.intercept(RUN, "wire_money", WIRE, key="w1")
    cx.decide(asked.approval_id or "", allow=False, reason="not this supplier")
    head = cx.store.get_run(RUN).head_sequence
    denied = cx.intercept(RUN, "wire_money", WIRE, key="w1")
    assert (denied.proceed, denied.status, denied.approval_id) == (
        False,
        "denied",
        asked.approval_id,
    )
    assert denied.denial_reason == "not this supplier" and "not this supplier" in denied.guidance
    assert cx.store.get_run(RUN).head_sequence == head
    with pytest.raises(InvalidTransitionError):
        cx.decide(asked.approval_id or "", allow=True, reason="changed my mind")
    assert cx.approvals() == []
    assert cx.resume(RUN).mode == "request_human"  # the agent's own goal is unconfirmed...
    assert not any(a.startswith("await_approval") for a in cx.resume(RUN).required_actions)


def test_a_grant_for_the_run_covers_the_action_type_and_its_pending_calls(cx: Continuum) -> None:
    refused = cx.intercept(RUN, "wire_money", {"amount": 7, "to": "Z"}, key="w0")
    cx.decide(refused.approval_id or "", allow=False, reason="unknown payee")
    a = cx.intercept(RUN, "wire_money", WIRE, key="w1")
    b = cx.intercept(RUN, "wire_money", {"amount": 9, "to": "B"}, key="w2")
    other = cx.intercept(RUN, "delete_db", {"db": "prod"})
    cx.decide(a.approval_id or "", allow=True, reason="month end run", scope="run")
    # a denial of one call stands, even under a grant for the run
    assert cx.intercept(RUN, "wire_money", {"amount": 7, "to": "Z"}, key="w0").status == "denied"
    assert cx.approval(b.approval_id or "").status == "granted"  # settled with it
    assert cx.intercept(RUN, "wire_money", {"amount": 1, "to": "C"}, key="w3").proceed
    assert cx.intercept(RUN, "wire_money", {"amount": 9, "to": "B"}, key="w2").proceed
    assert cx.intercept(RUN, "delete_db", {"db": "prod"}).status == "awaiting_approval"
    assert [x.id for x in cx.approvals()] == [other.approval_id]
    with pytest.raises(UsageError):
        cx.decide(other.approval_id or "", allow=False, reason="no", scope="run")
    assert cx.verify(RUN).ok


def test_only_a_person_decides_an_agents_own_grant_changes_nothing(cx: Continuum) -> None:
    asked = cx.intercept(RUN, "wire_money", WIRE)
    cx.append(
        RUN, EventType.APPROVAL_GRANTED, {"approval_id": asked.approval_id, "scope": "run"}
    )  # origin external_agent
    again = cx.intercept(RUN, "wire_money", WIRE)
    assert (again.status, again.approval_id) == ("awaiting_approval", asked.approval_id)
    assert cx.approval(asked.approval_id or "").ignored_decisions == 1
    assert cx.verify(RUN).ok


def _edit_approval(store_factory: StoreFactory, approval_id: str, old: str, new: str) -> None:
    if store_factory.backend == "sqlite":
        import apsw

        conn = apsw.Connection(store_factory.url)
        try:
            conn.execute(
                "UPDATE approvals SET status = 'granted', record = replace(record, ?, ?)"
                " WHERE approval_id = ?",
                (old, new, approval_id),
            )
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(store_factory.url, autocommit=True) as pg_conn:
        pg_conn.execute(
            "UPDATE continuum.approvals SET status = 'granted', record = "
            "replace(record, %s, %s) WHERE approval_id = %s",
            (old, new, approval_id),
        )


def test_an_approval_index_edited_to_granted_lets_nothing_run(
    cx: Continuum, store_factory: StoreFactory
) -> None:
    asked = cx.intercept(RUN, "wire_money", WIRE)
    _edit_approval(
        store_factory, asked.approval_id or "", '"status":"requested"', '"status":"granted"'
    )
    fresh = agent(store_factory.open())
    with pytest.raises(IntegrityError) as e:
        fresh.intercept(RUN, "wire_money", WIRE)
    assert e.value.code == "integrity.index_mismatch"
    assert fresh.actions(RUN) == []
    report = fresh.verify(RUN)
    assert not report.ok and report.violations[0].kind == "index_mismatch"


def test_the_request_and_its_notification_roll_back_with_their_transaction(cx: Continuum) -> None:
    with pytest.raises(RuntimeError), cx.store.write(RUN) as tx:
        tx.append(
            EventType.APPROVAL_REQUESTED, {"approval_id": "apr_gone"}, source=Origin.EXTERNAL_AGENT
        )
        raise RuntimeError("the writer failed before COMMIT")
    assert cx.store.find_approvals("apr_gone") == []
    assert cx.outbox() == []


def test_events_that_need_a_person_are_in_the_outbox(cx: Continuum) -> None:
    asked = cx.intercept(RUN, "wire_money", WIRE)
    sent = cx.intercept(RUN, "send_invoice", {"invoice": 1})
    cx.fail(RUN, sent.action_key, error="timeout")  # unknown: may have happened
    other = cx.intercept(RUN, "send_invoice", {"invoice": 2})
    cx.fail(RUN, other.action_key, error="refused", certain=True)  # an agent's word
    kinds = sorted(row.kind for row in cx.outbox())
    assert kinds == ["action_needs_confirmation", "action_unknown", "approval_requested"]
    notice = next(r for r in cx.outbox() if r.kind == "approval_requested")
    assert notice.body["details"]["approval_id"] == asked.approval_id
    assert notice.body["delivery_id"] == notice.delivery_id
    assert notice.body["command"].startswith(f"continuum decide {asked.approval_id}")
    assert cx.outbox_counts() == {"pending": 3, "delivered": 0, "failed": 0}


def test_outbox_rows_are_claimed_once_retried_later_and_requeued_after_failing(
    cx: Continuum, store_factory: StoreFactory
) -> None:
    cx.intercept(RUN, "wire_money", WIRE)
    cx.intercept(RUN, "delete_db", {"db": "x"})
    other = store_factory.open()  # a second deliverer
    claimed = cx.store.claim_outbox(100.0, 200.0, 10)
    assert len(claimed) == 2
    assert other.claim_outbox(150.0, 250.0, 10) == []  # claimed by the first until 200
    first, second = claimed
    cx.store.record_delivery(
        first.delivery_id,
        status="pending",
        attempts=1,
        next_attempt=300.0,
        delivered_to=["a"],
        last_error="a: HTTP 500",
        delivered_at=None,
    )
    cx.store.record_delivery(
        second.delivery_id,
        status="failed",
        attempts=20,
        next_attempt=0.0,
        delivered_to=[],
        last_error="timed out",
        delivered_at=None,
    )
    assert other.claim_outbox(250.0, 260.0, 10) == []  # not due before 300
    again = other.claim_outbox(301.0, 400.0, 10)
    assert [r.delivery_id for r in again] == [first.delivery_id]
    assert (again[0].attempts, again[0].delivered_to) == (1, ["a"])
    other.record_delivery(
        first.delivery_id,
        status="delivered",
        attempts=2,
        next_attempt=302.0,
        delivered_to=["a", "b"],
        last_error=None,
        delivered_at="now",
    )
    assert cx.outbox_counts() == {"pending": 0, "delivered": 1, "failed": 1}
    assert cx.retry_outbox() == 1
    assert [r.delivery_id for r in cx.store.claim_outbox(500.0, 600.0, 10)] == [second.delivery_id]


def test_an_export_imported_elsewhere_keeps_the_approval_index(
    cx: Continuum, tmp_path: Path
) -> None:
    asked = cx.intercept(RUN, "wire_money", WIRE)
    cx.decide(asked.approval_id or "", allow=True, reason="ok")
    cx.finish_run(RUN)
    from continuum.ops.signing import generate_keypair

    key = tmp_path / "export.key"
    generate_keypair(key, tmp_path / "export.key.pub")
    out = io.StringIO()
    export_runs(cx.store, out, [RUN], sign=key)
    target = SQLiteStorage(tmp_path / "copy.db")
    import_runs(target, io.StringIO(out.getvalue()), public_key=tmp_path / "export.key.pub")
    copy = Continuum(target)
    assert copy.verify(RUN).ok
    assert copy.approval(asked.approval_id or "").status == "granted"
    target.close()
    # Unsigned (or not trusted), the person's decision is the file's word: it waits again.
    other = SQLiteStorage(tmp_path / "unsigned.db")
    import_runs(other, io.StringIO(out.getvalue()))
    assert Continuum(other).verify(RUN).ok
    assert Continuum(other).approval(asked.approval_id or "").status == "requested"
    other.close()


def _raw(store_factory: StoreFactory, *statements: str) -> None:
    """Run SQL behind the store's back (tables named plainly; PostgreSQL's get the schema)."""
    if store_factory.backend == "sqlite":
        import apsw

        conn = apsw.Connection(store_factory.url)
        try:
            for statement in statements:
                conn.execute(statement)
        finally:
            conn.close()
        return
    import re

    import psycopg

    with psycopg.connect(store_factory.url, autocommit=True) as pg_conn:
        for statement in statements:
            sql = re.sub(
                r"\b(approvals|outbox|continuum_meta)\b",
                lambda m: (
                    "continuum.meta"
                    if m.group(1) == "continuum_meta"
                    else f"continuum.{m.group(1)}"
                ),
                statement,
            )
            pg_conn.execute(sql)


def test_a_store_of_schema_2_gets_the_approval_index_of_its_log_when_migrated(
    store_factory: StoreFactory,
) -> None:
    old = Continuum(store_factory.open())  # approvals written before schema 3 existed
    old.start_run(RUN)
    old.append(RUN, EventType.APPROVAL_REQUESTED, {"approval_id": "ap1", "text": "pay"})
    old.append(RUN, EventType.APPROVAL_REQUESTED, {"approval_id": "ap2"})
    old.append(RUN, EventType.APPROVAL_GRANTED, {"approval_id": "ap2"})
    old.close()
    _raw(
        store_factory,
        "DROP TABLE approvals",
        "DROP TABLE outbox",
        "UPDATE continuum_meta SET value = '2' WHERE key = 'schema_version'",
    )
    migrated = Continuum(store_factory.open())
    assert migrated.store.schema_version() == 3
    assert migrated.verify(RUN).ok
    assert [(a.id, a.status) for a in migrated.approvals(RUN, pending_only=False)] == [
        ("ap1", "requested"),
        ("ap2", "granted"),
    ]
    assert migrated.outbox() == []  # history is not announced again

"""Review fixes: an approval allows exactly the call it was bound to, whatever its index row
says, and archiving a run keeps every decision's meaning. Both backends.

An attacker with SQL access to the approval index (not to the sealed log) must not be able
to: move a grant onto other arguments, another action type, or another call; flip a pending
approval to granted. Each such edit is refused at intercept (``integrity.index_mismatch``)
and reported by ``continuum verify`` (exit 3). Archiving a prefix that holds approvals keeps
a run grant allowed, a denial denied, a pending approval pending and decidable, and a used
call approval used (contract §6, approvals in references/operators.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from continuum.cli.main import run as cli_run
from continuum.errors import IntegrityError
from continuum.eventlog.events import EventType
from continuum.ledger.approvals import ApprovalRules, arguments_hash, binding_of, parse_rules
from continuum.runtime.facade import Continuum
from continuum.store import Storage
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
OTHER = {"amount": 99000, "to": "MALLORY"}


def agent(store: Storage) -> Continuum:
    return Continuum(store, origin=Origin.EXTERNAL_AGENT, approvals=RULES)


def trusted(cx: Continuum) -> Continuum:
    """The program itself (deterministic origin): its word that an effect failed counts."""
    return Continuum(cx.store, approvals=RULES)


@pytest.fixture
def cx(store_factory: StoreFactory) -> Continuum:
    rt = agent(store_factory.open())
    rt.start_run(RUN, "pay suppliers")
    return rt


def edit_approvals(
    factory: StoreFactory, assignments: str, approval_id: str, params: tuple[Any, ...] = ()
) -> None:
    """``UPDATE approvals SET <assignments> WHERE approval_id = ?`` behind the store's back."""
    table = "approvals" if factory.backend == "sqlite" else "continuum.approvals"
    factory.corrupt(
        f"UPDATE {table} SET {assignments} WHERE approval_id = ?", (*params, approval_id)
    )


def verify_exit(factory: StoreFactory, capsys: pytest.CaptureFixture[str]) -> int:
    capsys.readouterr()
    code = cli_run(["--db", factory.url, "verify", RUN])
    capsys.readouterr()
    return code


def binding_for(
    cx: Continuum, arguments: Any, key: str = "w1", action_type: str = "wire_money"
) -> tuple[str, str]:
    ident = cx.ledger.identity(RUN, action_type, key, arguments)
    args_hash = arguments_hash(arguments)
    return binding_of(ident.action_id, args_hash), args_hash


def granted(cx: Continuum, arguments: Any, key: str = "w1", scope: str = "call") -> str:
    asked = cx.intercept(RUN, "wire_money", arguments, key=key)
    assert asked.status == "awaiting_approval" and asked.approval_id
    cx.decide(asked.approval_id, allow=True, reason="checked", scope=scope)
    return asked.approval_id


# -- 1. an approval is bound to its call by the log, not by the index ---------------------------


def test_a_grant_whose_binding_column_is_moved_to_other_arguments_lets_nothing_run(
    cx: Continuum, store_factory: StoreFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    """contract §6: the index is checked against the log; an edited one grants nothing."""
    approval_id = granted(cx, WIRE)
    other_binding, _ = binding_for(cx, OTHER)
    edit_approvals(store_factory, "binding = ?", approval_id, (other_binding,))
    fresh = agent(store_factory.open())
    with pytest.raises(IntegrityError) as e:
        fresh.intercept(RUN, "wire_money", OTHER, key="w1")
    assert e.value.code == "integrity.index_mismatch"
    assert fresh.actions(RUN) == []
    report = fresh.verify(RUN)
    assert not report.ok and {v.kind for v in report.violations} == {"index_mismatch"}
    assert verify_exit(store_factory, capsys) == 3


def test_a_grant_rebound_in_column_and_record_to_other_arguments_lets_nothing_run(
    cx: Continuum, store_factory: StoreFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    """The record itself rewritten (binding and arguments hash of another call): the
    request event in the log still names the original arguments."""
    approval_id = granted(cx, WIRE)
    mine, mine_hash = binding_for(cx, WIRE)
    other, other_hash = binding_for(cx, OTHER)
    edit_approvals(
        store_factory,
        "binding = ?, record = replace(replace(record, ?, ?), ?, ?)",
        approval_id,
        (other, mine, other, mine_hash, other_hash),
    )
    fresh = agent(store_factory.open())
    row = fresh.store.find_approvals(approval_id)[0]
    assert row.record["binding"] == other  # the edit took
    with pytest.raises(IntegrityError) as e:
        fresh.intercept(RUN, "wire_money", OTHER, key="w1")
    assert e.value.code == "integrity.index_mismatch"
    assert fresh.actions(RUN) == []
    assert verify_exit(store_factory, capsys) == 3


def test_a_run_grant_moved_to_another_action_type_lets_nothing_run(
    cx: Continuum, store_factory: StoreFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    approval_id = granted(cx, WIRE, scope="run")
    edit_approvals(store_factory, "run_grant = 'delete_db'", approval_id)
    fresh = agent(store_factory.open())
    with pytest.raises(IntegrityError) as e:
        fresh.intercept(RUN, "delete_db", {"db": "prod"}, key="d1")
    assert e.value.code == "integrity.index_mismatch"
    assert fresh.actions(RUN) == []
    assert verify_exit(store_factory, capsys) == 3


def test_a_run_grant_whose_record_also_names_another_action_type_lets_nothing_run(
    cx: Continuum, store_factory: StoreFactory
) -> None:
    approval_id = granted(cx, WIRE, scope="run")
    edit_approvals(
        store_factory,
        "run_grant = 'delete_db', record = replace(record, ?, ?)",
        approval_id,
        ('"action_type":"wire_money"', '"action_type":"delete_db"'),
    )
    fresh = agent(store_factory.open())
    with pytest.raises(IntegrityError) as e:
        fresh.intercept(RUN, "delete_db", {"db": "prod"}, key="d1")
    assert e.value.code == "integrity.index_mismatch"
    assert fresh.actions(RUN) == []


def test_a_pending_approval_flipped_to_granted_in_its_status_column_is_a_verify_finding(
    cx: Continuum, store_factory: StoreFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    asked = cx.intercept(RUN, "wire_money", WIRE, key="w1")
    assert verify_exit(store_factory, capsys) == 0  # negative control: intact index verifies
    edit_approvals(store_factory, "status = 'granted'", asked.approval_id or "")
    fresh = agent(store_factory.open())
    again = fresh.intercept(RUN, "wire_money", WIRE, key="w1")
    assert (again.proceed, again.status) == (False, "awaiting_approval")
    report = fresh.verify(RUN)
    assert not report.ok and report.violations[0].kind == "index_mismatch"
    assert verify_exit(store_factory, capsys) == 3


def test_the_untouched_grant_still_allows_exactly_its_call(cx: Continuum) -> None:
    """Negative control for the edits above: the same grant, unedited, allows its call once."""
    approval_id = granted(cx, WIRE)
    assert cx.intercept(RUN, "wire_money", OTHER, key="w1").status == "awaiting_approval"
    go = cx.intercept(RUN, "wire_money", WIRE, key="w1")
    assert (go.proceed, go.approval_id) == (True, approval_id)
    assert cx.verify(RUN).ok


# -- 2. archiving keeps every decision's meaning -----------------------------------------------


def archive_all(cx: Continuum, tmp_path: Path, name: str = "old.jsonl") -> Path:
    dest = tmp_path / name
    cx.append(RUN, EventType.WORK_COMPLETED, {"item_id": "pad"})
    head = cx.store.get_run(RUN).head_sequence
    cx.archive(RUN, before=head + 1, to=dest)
    return dest


def test_archiving_keeps_a_run_grant_a_denial_and_a_pending_approval(
    cx: Continuum, store_factory: StoreFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    granted(cx, WIRE, key="w1", scope="run")
    denied = cx.intercept(RUN, "delete_db", {"db": "prod"}, key="d1")
    cx.decide(denied.approval_id or "", allow=False, reason="never in prod")
    pending = cx.intercept(RUN, "delete_db", {"db": "staging"}, key="d2")
    dest = archive_all(cx, tmp_path)

    fresh = agent(store_factory.open())
    assert fresh.verify(RUN).ok and fresh.verify(RUN, archives=[dest]).ok
    # the run grant still allows its action type (and only it)
    go = fresh.intercept(RUN, "wire_money", OTHER, key="w2")
    assert go.proceed and go.status == "started"
    # the denial stands
    no = fresh.intercept(RUN, "delete_db", {"db": "prod"}, key="d1")
    assert (no.proceed, no.status) == (False, "denied")
    # the pending one is still pending, listed, and decidable
    assert [a.id for a in fresh.approvals(RUN)] == [pending.approval_id]
    wait = fresh.intercept(RUN, "delete_db", {"db": "staging"}, key="d2")
    assert (wait.status, wait.approval_id) == ("awaiting_approval", pending.approval_id)
    fresh.decide(pending.approval_id or "", allow=True, reason="staging is fine")
    ok = fresh.intercept(RUN, "delete_db", {"db": "staging"}, key="d2")
    assert (ok.proceed, ok.approval_id) == (True, pending.approval_id)
    assert fresh.verify(RUN).ok and fresh.verify(RUN, archives=[dest]).ok
    assert verify_exit(store_factory, capsys) == 0


def test_archiving_keeps_an_unused_call_grant_usable_once_and_a_used_one_used(
    cx: Continuum, store_factory: StoreFactory, tmp_path: Path
) -> None:
    used = granted(cx, WIRE, key="w1")
    go = cx.intercept(RUN, "wire_money", WIRE, key="w1")
    assert go.proceed and go.approval_id == used
    trusted(cx).fail(RUN, go.action_key, error="bank said no", certain=True)
    unused = granted(cx, OTHER, key="w2")
    archive_all(cx, tmp_path)

    fresh = agent(store_factory.open())
    # the used approval does not cover a second attempt: a person is asked again
    retry = fresh.intercept(RUN, "wire_money", WIRE, key="w1")
    assert (retry.proceed, retry.status) == (False, "awaiting_approval")
    assert retry.approval_id != used
    # the unused one still allows its call, once
    once = fresh.intercept(RUN, "wire_money", OTHER, key="w2")
    assert (once.proceed, once.approval_id) == (True, unused)
    trusted(fresh).fail(RUN, once.action_key, error="timeout", certain=True)
    twice = fresh.intercept(RUN, "wire_money", OTHER, key="w2")
    assert (twice.proceed, twice.status) == (False, "awaiting_approval")
    assert fresh.verify(RUN).ok


def test_an_archived_grant_rebound_to_other_arguments_lets_nothing_run(
    cx: Continuum, store_factory: StoreFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    approval_id = granted(cx, WIRE, key="w1")
    archive_all(cx, tmp_path)
    assert verify_exit(store_factory, capsys) == 0
    mine, mine_hash = binding_for(cx, WIRE)
    other, other_hash = binding_for(cx, OTHER)
    edit_approvals(
        store_factory,
        "binding = ?, record = replace(replace(record, ?, ?), ?, ?)",
        approval_id,
        (other, mine, other, mine_hash, other_hash),
    )
    fresh = agent(store_factory.open())
    with pytest.raises(IntegrityError) as e:
        fresh.intercept(RUN, "wire_money", OTHER, key="w1")
    assert e.value.code == "integrity.index_mismatch"
    assert fresh.actions(RUN) == []
    assert verify_exit(store_factory, capsys) == 3

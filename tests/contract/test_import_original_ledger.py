"""A run imported from the original project (Cyrax321/CONTINUUM) keeps its ledger: the
agent's next intercept finds each imported action under the identity the original gave
the same call, so a completed effect is "already done" and an unsettled one "unknown"
(issue 30, item 12), on SQLite and PostgreSQL.

The store was written by the original's own code (PyPI ``continuum-agent`` 0.1.0, its
``ActionLedger.claim``/``complete``): ``tests/fixtures/original/`` has the file, the
script that wrote it and how to run it. The original stores only a hash of each key, so
a test store made by hand would prove nothing about the original's hashing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import apsw
import pytest

from continuum.ops.migrate_original import import_original
from continuum.runtime.facade import Continuum
from continuum.store import Storage
from continuum.types import ActionStatus, Origin

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "original"
STORE = FIXTURE / "continuum_agent_0.1.0.sqlite"

# The calls exactly as the fixture script made them with the original's ``claim``.
INV_001 = {"invoice": "INV-001", "to": "billing@acme.test", "amount": 120}
INV_002 = {"invoice": "INV-002", "to": "billing@globex.test", "amount": 80}
ZOE_7 = {"invoice": "Zoë-7", "amount": 12.5}
REPORT = {"path": "./out/../out/report.txt", "text": "Q1"}
SUMMARY = {"path": "out/summary.txt", "text": "ok"}


@pytest.fixture
def original(tmp_path: Path) -> Path:
    path = tmp_path / "original.sqlite"  # a copy: a reader may add -wal/-shm beside it
    shutil.copyfile(STORE, path)
    return path


@pytest.fixture
def rt(store: Storage, original: Path) -> Continuum:
    import_original(str(original), lambda: store)
    return Continuum(store)


def head(rt: Continuum, run_id: str) -> tuple[int, str | None]:
    info = rt.store.get_run(run_id)
    return info.head_sequence, info.head_hash


def statuses(rt: Continuum, run_id: str) -> list[str]:
    return sorted(str(a.status) for a in rt.actions(run_id))


def test_the_imported_run_shows_the_originals_actions(rt: Continuum) -> None:
    assert statuses(rt, "inv_run") == ["completed", "completed", "started"]
    assert statuses(rt, "files_run") == ["completed", "completed", "started"]
    assert rt.verify("inv_run").ok and rt.verify("files_run").ok


def test_an_invoice_the_original_sent_is_not_sent_again(rt: Continuum) -> None:
    before = head(rt, "inv_run")

    again = rt.intercept("inv_run", "send_invoice", INV_001, key="invoice:INV-001")

    assert (again.proceed, again.status, again.matched_by) == (False, "completed", "key")
    assert (again.external_id, again.previous_result) == ("msg-001", {"status": "sent"})
    assert head(rt, "inv_run") == before  # an answer, nothing written


def test_an_invoice_the_original_left_unsettled_is_unknown_until_a_person_settles_it(
    rt: Continuum,
) -> None:
    first = rt.intercept("inv_run", "send_invoice", INV_002, key="invoice:INV-002")
    assert (first.proceed, first.status, first.matched_by) == (False, "unknown", "key")
    second = rt.intercept("inv_run", "send_invoice", INV_002, key="invoice:INV-002")
    assert (second.proceed, second.status, second.action_id) == (
        False,
        "unknown",
        first.action_id,
    )
    assert statuses(rt, "inv_run") == ["completed", "completed", "unknown"]

    # Settled as not sent (by a person), the same call is the same action's next attempt.
    rt.reconcile("inv_run", first.action_key, occurred=False, origin=Origin.HUMAN, note="not sent")
    retry = rt.intercept("inv_run", "send_invoice", INV_002, key="invoice:INV-002")
    assert (retry.proceed, retry.status, retry.action_id, retry.attempt) == (
        True,
        "started",
        first.action_id,
        2,
    )
    assert rt.verify("inv_run").ok


def test_a_key_outside_ascii_is_found_as_the_original_hashed_it(rt: Continuum) -> None:
    again = rt.intercept("inv_run", "send_invoice", ZOE_7, key="facture:Zoë-7")
    assert (again.proceed, again.status, again.external_id) == (False, "completed", "msg-zoe-7")


@pytest.mark.parametrize(
    "arguments",
    [REPORT, {"path": "out/report.txt", "text": "Q1"}],  # the original normalized its paths
    ids=["as-claimed", "path-normalized"],
)
def test_a_call_the_original_identified_by_its_arguments_is_found_by_them(
    rt: Continuum, arguments: dict[str, Any]
) -> None:
    again = rt.intercept("files_run", "write_file", arguments)
    assert (again.proceed, again.status, again.matched_by) == (False, "completed", "arguments")
    assert again.previous_result == {"bytes": 2}

    unsettled = rt.intercept("files_run", "write_file", SUMMARY)
    assert (unsettled.proceed, unsettled.status) == (False, "unknown")


def test_an_unscoped_claim_of_the_original_is_found_in_its_run(rt: Continuum) -> None:
    again = rt.intercept("files_run", "send_reminder", {"to": "ops@acme.test"}, key="reminder:R-1")
    assert (again.proceed, again.status, again.external_id) == (False, "completed", "msg-r1")


def test_a_run_imported_under_another_id_keeps_the_originals_scope(
    store: Storage, original: Path
) -> None:
    import_original(str(original), lambda: store, run_ids=["inv_run"], new_id="march")
    rt = Continuum(store)

    again = rt.intercept("march", "send_invoice", INV_001, key="invoice:INV-001")
    assert (again.proceed, again.status, again.external_id) == (False, "completed", "msg-001")
    unsettled = rt.intercept("march", "send_invoice", INV_002, key="invoice:INV-002")
    assert (unsettled.proceed, unsettled.status) == (False, "unknown")


# -- negative controls: only what the original would have matched is matched ---------------


def test_new_work_in_an_imported_run_proceeds(rt: Continuum) -> None:
    new_key = rt.intercept("inv_run", "send_invoice", {"invoice": "INV-003"}, key="invoice:INV-003")
    assert (new_key.proceed, new_key.status) == (True, "started")
    other_args = rt.intercept("files_run", "write_file", {"path": "out/report.txt", "text": "Q2"})
    assert (other_args.proceed, other_args.status) == (True, "started")
    other_type = rt.intercept("inv_run", "archive_invoice", INV_001, key="invoice:INV-001")
    assert (other_type.proceed, other_type.status) == (True, "started")


def test_a_keyed_call_is_not_matched_by_its_arguments(rt: Continuum) -> None:
    # The original hashed only the key of a keyed claim: the same arguments under a key
    # are another action there, and so here.
    keyed = rt.intercept("files_run", "write_file", REPORT, key="report:q1")
    assert (keyed.proceed, keyed.status) == (True, "started")


def test_the_originals_keys_are_what_its_code_wrote(original: Path) -> None:
    """``original_action_key`` agrees with every key the original's own code stored."""
    from continuum.store.original import original_action_key

    keyed = {
        ("inv_run", "INV-001"): ("inv_run", "invoice:INV-001"),
        ("inv_run", "INV-002"): ("inv_run", "invoice:INV-002"),
        ("inv_run", "Zoë-7"): ("inv_run", "facture:Zoë-7"),
        ("files_run", None): (None, "reminder:R-1"),
    }
    conn = apsw.Connection(str(original), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = [
            (str(run_id), str(text))
            for run_id, text in conn.execute(
                "SELECT run_id, payload FROM events WHERE type = 'ACTION_RECORDED'"
            )
        ]
    finally:
        conn.close()
    assert len(rows) == 10  # 6 claims, 4 of them completed
    for run_id, text in rows:
        payload = json.loads(text)
        action = payload["action"]
        arguments = action["arguments"]
        if action["action_type"] == "write_file":
            expected = original_action_key(run_id, "write_file", arguments=arguments)
        else:
            scope, key = keyed[(run_id, arguments.get("invoice"))]
            expected = original_action_key(scope, action["action_type"], key=key)
        assert payload["key"] == expected, (run_id, action["action_type"], arguments)
    assert {json.loads(t)["action"]["status"] for _, t in rows} == {
        str(ActionStatus.STARTED),
        str(ActionStatus.COMPLETED),
    }

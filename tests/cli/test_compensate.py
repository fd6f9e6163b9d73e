"""The rollback verdict's `compensate_action:ID` can be performed (issue 13, item 5)."""

from __future__ import annotations

from collections.abc import Callable

from continuum.eventlog.events import EventType
from continuum.runtime.facade import Continuum
from continuum.store import open_store
from tests.cli.conftest import Result


def test_a_revoked_approval_asks_for_compensation_and_compensate_records_it(
    cli: Callable[..., Result], db: str
) -> None:
    rt = Continuum(open_store(db))
    rt.start_run("r1", "pay")
    rt.append("r1", EventType.APPROVAL_REQUESTED, {"approval_id": "ap1"})
    rt.append("r1", EventType.APPROVAL_GRANTED, {"approval_id": "ap1"})
    r = rt.intercept("r1", "pay", {"amount": 5}, key="p1", approval_id="ap1")
    rt.complete("r1", r.action_key, external_id="tx1")
    rt.append("r1", EventType.APPROVAL_REVOKED, {"approval_id": "ap1"})
    rt.close()

    before = cli("--json", "resume", "r1")
    assert before.code == 30 and before.json()["mode"] == "rollback"
    assert before.json()["next_allowed_action"] == f"compensate_action:{r.action_id}"

    done = cli("--json", "compensate", "r1", r.action_id, "--note", "refunded tx1")
    assert done.code == 0 and done.json()["action"]["status"] == "compensated"
    after = cli("--json", "resume", "r1")
    assert after.json()["mode"] != "rollback"
    again = cli("--json", "intercept", "r1", "pay", "--key", "p1")
    assert again.code == 20 and again.json()["status"] == "compensated"

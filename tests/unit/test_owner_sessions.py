"""An owner with a session is not the same owner as its process without one (contract §6).

Inside ``continuum-mcp --transport streamable-http --ui`` the operator page acts as the
server process itself (no session) while each MCP session owns what it intercepted: the
page must not settle a live session's started action as if it were its owner (found by
an adversarial review: "did NOT happen" recorded, then a second proceed for the key).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from continuum.errors import ActionOwnedError
from continuum.ledger.owners import current_owner, same_owner
from continuum.runtime.facade import Continuum
from continuum.store import SQLiteStorage
from continuum.types import ActionStatus, Origin


def test_same_owner_compares_the_session_exactly() -> None:
    me = current_owner()
    assert same_owner(me, dict(me))
    assert same_owner({**me, "session": "s1"}, {**me, "session": "s1"})
    assert not same_owner({**me, "session": "s1"}, me)
    assert not same_owner(me, {**me, "session": "s1"})
    assert not same_owner({**me, "session": "s1"}, {**me, "session": "s2"})
    assert not same_owner({**me, "pid": me["pid"] + 1}, me)
    assert not same_owner({}, me)


def test_the_process_cannot_settle_its_own_sessions_live_action(tmp_path: Path) -> None:
    store = SQLiteStorage(tmp_path / "s.db", create=True)
    try:
        session = Continuum(
            store, origin=Origin.EXTERNAL_AGENT, owner={**current_owner(), "session": "a"}
        )
        page = Continuum(store, origin=Origin.HUMAN)  # the same process, no session
        session.start_run("r1", goal="g")
        res = session.intercept("r1", "send_invoice", {"n": 1}, key="inv-1")
        assert res.proceed
        with pytest.raises(ActionOwnedError):
            page.reconcile("r1", res.action_id, occurred=False, note="stale form")
        assert session.actions("r1")[0].status == ActionStatus.STARTED
        # Control: the session itself settles it, and a person may force it.
        session.complete("r1", res.action_id, external_id="tx-1")
        assert session.actions("r1")[0].status == ActionStatus.COMPLETED
    finally:
        store.close()

"""What a wrong confirm token may change, and the store's counter of them (issue 30).

A denied call writes nothing to any run; a wrong confirm token is counted in the store
(``store/confirm_attempts.py``: one row of the key-value table, and from the third in a
row a notification). So tests that used to compare a store's bytes around a wrong token
compare ``runs_record`` (every run's log, action index and checkpoints) and read the
counter with ``attempt_counter`` and ``confirm_notices``.

``let_backoff_pass`` stands in for the clock: it moves the counter's ``not_before`` into
the past, in the store, as the passing of the backoff would. No test sleeps.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apsw

from continuum.store import open_store
from continuum.store.attempt_state import AttemptState
from continuum.store.confirm_attempts import META_KEY
from continuum.store.models import OutboxRow


def runs_record(db: str | Path) -> dict[str, Any]:
    """Every run's head, events (id, type, origin, hash), action index rows and
    checkpoints: what any write to a run would change."""
    store = open_store(str(db), create=False)
    try:
        return {
            run.run_id: {
                "head": (run.head_sequence, run.head_hash, str(run.status)),
                "events": [
                    (e.event_id, str(e.type), str(e.source), e.hash)
                    for e in store.read_events(run.run_id)
                ],
                "actions": [a._asdict() for a in store.list_actions(run.run_id)],
                "checkpoints": [
                    c.model_dump(mode="json") for c in store.list_checkpoints(run.run_id)
                ],
            }
            for run in store.list_runs()
        }
    finally:
        store.close()


def attempt_counter(db: str | Path) -> AttemptState:
    store = open_store(str(db), create=False)
    try:
        return store.confirm_attempts()
    finally:
        store.close()


def confirm_notices(db: str | Path) -> list[OutboxRow]:
    """The outbox's ``confirm_token_failed`` notifications, oldest first."""
    store = open_store(str(db), create=False)
    try:
        rows = store.list_outbox(limit=1000)
    finally:
        store.close()
    return [row for row in reversed(rows) if row.kind == "confirm_token_failed"]


def let_backoff_pass(db: str | Path) -> None:
    """The backoff's time passes (the counter's ``not_before`` set to 0), as a clock would."""
    conn = apsw.Connection(str(db))
    try:
        conn.execute("BEGIN IMMEDIATE")
        rows = conn.execute("SELECT value FROM continuum_meta WHERE key = ?", (META_KEY,))
        state = json.loads(str(rows.fetchall()[0][0]))
        state["not_before"] = 0.0
        conn.execute(
            "UPDATE continuum_meta SET value = ? WHERE key = ?", (json.dumps(state), META_KEY)
        )
        conn.execute("COMMIT")
    finally:
        conn.close()

"""Rows of the PostgreSQL store: the SQL that writes them, the mapping that reads them, and
the write transaction object (``PgWriteTx``) the ledger and runtime work through.

Statements take an open psycopg connection; ``postgres.py`` decides which one (the
thread's write transaction or a pooled connection) and translates errors.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import psycopg

from continuum.canonical import canonical_json, parse_json
from continuum.errors import NotFoundError
from continuum.events import LIFECYCLE_STATUS, Event, EventType, seal
from continuum.payloads import check_payload
from continuum.store.base import ActionRow, CheckpointRow, RunInfo, integrity_error
from continuum.store.pg_connection import PgConn
from continuum.types import Origin, RunStatus

EVENT_COLUMNS = ("run_id, sequence, event_id, type, timestamp, payload, causer_event_id, "
                 "source, prev_hash, hash")
RUN_COLUMNS = "run_id, goal, status, created_at, head_sequence, head_hash, metadata"
ACTION_COLUMNS = "run_id, action_id, record, lease_expires"
CHECKPOINT_COLUMNS = "run_id, sequence, event_sequence, state, state_hash, created_at"


def lock_key(text: str) -> int:
    """A stable signed 64-bit key for pg_advisory_xact_lock (the same on every host)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big", signed=True)


def run_lock_key(run_id: str) -> int:
    return lock_key(f"continuum:run:{run_id}")


MIGRATION_LOCK_KEY = lock_key("continuum:schema")


# -- reading rows ---------------------------------------------------------------------------


def row_to_event(row: tuple[Any, ...]) -> Event:
    run_id, seq, event_id, type_, ts, payload, causer, source, prev, hash_ = row
    return Event(
        event_id=event_id, run_id=run_id, sequence=seq, type=type_, timestamp=ts,
        payload=parse_json(payload), causer_event_id=causer, source=Origin(source),
        prev_hash=prev, hash=hash_,
    )


def run_info(row: tuple[Any, ...]) -> RunInfo:
    run_id, goal, status, created, head_seq, head_hash, metadata = row
    return RunInfo(run_id=run_id, goal=goal, status=RunStatus(status), created_at=created,
                   head_sequence=head_seq, head_hash=head_hash, metadata=json.loads(metadata))


def action_row(row: tuple[Any, ...]) -> ActionRow:
    return ActionRow(run_id=row[0], action_id=row[1], record=json.loads(row[2]),
                     lease_expires=row[3])


def checkpoint_row(row: tuple[Any, ...]) -> CheckpointRow:
    return CheckpointRow(run_id=row[0], sequence=row[1], event_sequence=row[2],
                         state_json=row[3], state_hash=row[4], created_at=row[5])


def one_action(conn: psycopg.Connection[Any], run_id: str, column: str,
               value: str) -> ActionRow | None:
    row = conn.execute(
        f"SELECT {ACTION_COLUMNS} FROM continuum.actions WHERE run_id = %s AND {column} = %s"
        " ORDER BY position LIMIT 1", (run_id, value)).fetchone()
    return action_row(row) if row is not None else None


# -- errors ---------------------------------------------------------------------------------




def run_not_found(run_id: str) -> NotFoundError:
    return NotFoundError(f"run {run_id!r} not found", code="not_found.run",
                         hint="list runs with `continuum runs` (or create it: `continuum start`)",
                         run_id=run_id)


# -- writing rows ---------------------------------------------------------------------------


_INSERT_EVENT = (f"INSERT INTO continuum.events ({EVENT_COLUMNS})"
                 " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)")


def _event_values(event: Event) -> tuple[Any, ...]:
    # The payload as canonical JSON text (never JSONB): the hash is over these bytes.
    return (event.run_id, event.sequence, event.event_id, event.type, event.timestamp,
            canonical_json(event.payload), event.causer_event_id, str(event.source),
            event.prev_hash, event.hash)


def insert_event(conn: psycopg.Connection[Any], event: Event) -> None:
    conn.execute(_INSERT_EVENT, _event_values(event))


def insert_events(conn: psycopg.Connection[Any], events: list[Event]) -> None:
    """Many events in one pipelined batch (an import)."""
    if events:
        conn.cursor().executemany(_INSERT_EVENT, [_event_values(e) for e in events])


def insert_run(conn: psycopg.Connection[Any], run: RunInfo) -> None:
    conn.execute(f"INSERT INTO continuum.runs ({RUN_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s)",
                 (run.run_id, run.goal, str(run.status), run.created_at, run.head_sequence,
                  run.head_hash, canonical_json(run.metadata)))


def put_action(conn: psycopg.Connection[Any], row: ActionRow) -> None:
    rec = row.record
    conn.execute(
        "INSERT INTO continuum.actions (run_id, action_id, action_key, dedup_key, fallback_key,"
        " status, record, lease_expires) VALUES (%s,%s,%s,%s,%s,%s,%s,%s)"
        " ON CONFLICT (run_id, action_id) DO UPDATE SET status = excluded.status,"
        " record = excluded.record, lease_expires = excluded.lease_expires",
        (row.run_id, row.action_id, rec["action_key"], rec["dedup_key"], rec.get("fallback_key"),
         rec["status"], canonical_json(rec), row.lease_expires),
    )


def put_checkpoint(conn: psycopg.Connection[Any], row: CheckpointRow) -> None:
    conn.execute(
        f"INSERT INTO continuum.checkpoints ({CHECKPOINT_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s)",
        (row.run_id, row.sequence, row.event_sequence, row.state_json, row.state_hash,
         row.created_at),
    )


class PgWriteTx:
    """One write transaction on one run, holding the run's advisory lock (a ``WriteTx``).

    It remembers what it wrote, so that after a lost COMMIT reply the store can read back
    whether the transaction is there (``applied``) instead of guessing or retrying.
    """

    def __init__(self, pc: PgConn, run: RunInfo, clock: Callable[[], str],
                 errors: Callable[[], AbstractContextManager[None]]) -> None:
        self._pc, self._run, self._clock, self._errors = pc, run, clock, errors
        self.last_event: Event | None = None
        self.puts: list[ActionRow | CheckpointRow] = []

    @property
    def run(self) -> RunInfo:
        return self._run

    def append(self, type: EventType | str, payload: dict[str, Any], *,
               source: Origin, causer_event_id: str | None = None) -> Event:
        check_payload(str(type), payload)  # a malformed known payload is refused, not stored
        run = self._run
        event = seal(
            event_id=f"evt_{uuid.uuid4().hex}", run_id=run.run_id,
            sequence=run.head_sequence + 1, type=str(type), timestamp=self._clock(),
            payload=payload, causer_event_id=causer_event_id, source=Origin(source),
            prev_hash=run.head_hash,
        )
        status = (LIFECYCLE_STATUS.get(EventType(event.type))
                  if event.type in EventType._value2member_map_ else None)
        new_status = RunStatus(status) if status else run.status
        with self._errors():
            insert_event(self._pc.conn, event)
            self._pc.conn.execute(
                "UPDATE continuum.runs SET head_sequence = %s, head_hash = %s, status = %s"
                " WHERE run_id = %s", (event.sequence, event.hash, str(new_status), run.run_id))
        self._run = run.model_copy(update={"head_sequence": event.sequence,
                                           "head_hash": event.hash, "status": new_status})
        self.last_event = event
        return event

    def find_action(self, *, action_id: str | None = None, dedup_key: str | None = None,
                    fallback_key: str | None = None,
                    action_key: str | None = None) -> ActionRow | None:
        for column, value in (("action_id", action_id), ("dedup_key", dedup_key),
                              ("action_key", action_key), ("fallback_key", fallback_key)):
            if value is not None:
                with self._errors():
                    row = one_action(self._pc.conn, self._run.run_id, column, value)
                if row is not None:
                    return row
        return None

    def put_action(self, row: ActionRow) -> None:
        with self._errors():
            put_action(self._pc.conn, row)
        self.puts.append(row)

    def put_checkpoint(self, row: CheckpointRow) -> None:
        with self._errors():
            put_checkpoint(self._pc.conn, row)
        self.puts.append(row)

    @property
    def wrote(self) -> bool:
        return self.last_event is not None or bool(self.puts)

    def applied(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether this transaction's writes are in the database (read on ``conn``)."""
        if self.last_event is not None:  # all or nothing: the last event decides
            row = conn.execute("SELECT hash FROM continuum.events WHERE event_id = %s",
                               (self.last_event.event_id,)).fetchone()
            if row is not None and row[0] != self.last_event.hash:
                raise integrity_error(self._run.run_id, self.last_event.sequence, "hash_mismatch",
                                      "the event read back after a lost COMMIT reply differs")
            return row is not None
        for put in self.puts:
            if isinstance(put, ActionRow):
                if one_action(conn, put.run_id, "action_id", put.action_id) != put:
                    return False
            else:
                stored = conn.execute(
                    f"SELECT {CHECKPOINT_COLUMNS} FROM continuum.checkpoints"
                    " WHERE run_id = %s AND sequence = %s", (put.run_id, put.sequence)).fetchone()
                if stored is None or checkpoint_row(stored) != put:
                    return False
        return True

"""The PostgreSQL dialect of the store's rows, and its write transaction (``PgWriteTx``).

What a row means is shared with every backend (``store/core.py``); here are only the
statements, in PostgreSQL's words, and the read-back that resolves a lost COMMIT reply.
Statements take an open psycopg connection; ``postgres.py`` decides which one (the
thread's write transaction or a pooled connection) and translates errors.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import psycopg

from continuum.eventlog.event_model import Event
from continuum.eventlog.events import EventLike
from continuum.store.approval_outbox import POSTGRES, approval_values, outbox_values
from continuum.store.base import ActionRow, RunHead, integrity_error
from continuum.store.models import ApprovalRow, CheckpointRow, RunInfo
from continuum.store.pg_connection import PgConn
from continuum.store.rows import (
    ACTION_COLUMNS,
    CHECKPOINT_COLUMNS,
    EVENT_COLUMNS,
    RUN_COLUMNS,
    action_from_row,
    checkpoint_from_row,
)
from continuum.store.tx import CoreTx, action_values, checkpoint_values, event_values, run_values
from continuum.types import RunStatus


def lock_key(text: str) -> int:
    """A stable signed 64-bit key for pg_advisory_xact_lock (the same on every host)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big", signed=True)


def run_lock_key(run_id: str) -> int:
    return lock_key(f"continuum:run:{run_id}")


MIGRATION_LOCK_KEY = lock_key("continuum:schema")
DELIVERER_LOCK_KEY = lock_key("continuum:outbox-deliverer")  # one deliverer per store

_INSERT_EVENT = (
    f"INSERT INTO continuum.events ({EVENT_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"
)
_PUT_ACTION = (
    "INSERT INTO continuum.actions (run_id, action_id, action_key, dedup_key,"
    " fallback_key, status, record, lease_expires) VALUES (%s,%s,%s,%s,%s,%s,%s,%s)"
    " ON CONFLICT (run_id, action_id) DO UPDATE SET status = excluded.status,"
    " record = excluded.record, lease_expires = excluded.lease_expires"
)


def action_rows(
    conn: psycopg.Connection[Any], run_id: str, column: str | None, value: str | None
) -> list[tuple[Any, ...]]:
    """One run's index rows in insertion order: all of them, or the first with column = value."""
    if column is None:
        return conn.execute(
            f"SELECT {ACTION_COLUMNS} FROM continuum.actions WHERE run_id = %s ORDER BY position",
            (run_id,),
        ).fetchall()
    return conn.execute(
        f"SELECT {ACTION_COLUMNS} FROM continuum.actions WHERE run_id = %s"
        f" AND {column} = %s ORDER BY position LIMIT 1",
        (run_id, value),
    ).fetchall()


def insert_events(conn: psycopg.Connection[Any], events: list[Event]) -> None:
    """Many events in one pipelined batch (an import)."""
    if events:
        conn.cursor().executemany(_INSERT_EVENT, [event_values(e) for e in events])


def insert_run(conn: psycopg.Connection[Any], run: RunInfo) -> None:
    conn.execute(
        f"INSERT INTO continuum.runs ({RUN_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s)", run_values(run)
    )


def put_action(conn: psycopg.Connection[Any], row: ActionRow) -> None:
    conn.execute(_PUT_ACTION, action_values(row))


def put_approval(conn: psycopg.Connection[Any], row: ApprovalRow) -> None:
    conn.execute(POSTGRES.put_approval, approval_values(row))


def put_checkpoint(conn: psycopg.Connection[Any], row: CheckpointRow) -> None:
    conn.execute(
        f"INSERT INTO continuum.checkpoints ({CHECKPOINT_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s)",
        checkpoint_values(row),
    )


class PgWriteTx(CoreTx):
    """One write transaction on one run, holding the run's advisory lock.

    It remembers what it wrote, so that after a lost COMMIT reply the store can read back
    whether the transaction is there (``applied``) instead of guessing or retrying.
    """

    def __init__(
        self,
        pc: PgConn,
        head: RunHead,
        clock: Callable[[], str],
        errors: Callable[[], AbstractContextManager[None]],
    ) -> None:
        super().__init__(head, clock)
        self._pc, self._errors = pc, errors
        self.puts: list[ActionRow | CheckpointRow] = []

    def _insert_event(self, event: EventLike, payload_text: str) -> None:
        with self._errors():
            self._pc.conn.execute(_INSERT_EVENT, event_values(event, payload_text))

    def _move_head(self, run_id: str, sequence: int, hash_: str, status: RunStatus) -> None:
        with self._errors():
            self._pc.conn.execute(
                "UPDATE continuum.runs SET head_sequence = %s, head_hash = %s, status = %s"
                " WHERE run_id = %s",
                (sequence, hash_, str(status), run_id),
            )

    def _action_row(self, column: str, value: str) -> tuple[Any, ...] | None:
        with self._errors():
            rows = action_rows(self._pc.conn, self._head.run_id, column, value)
        return rows[0] if rows else None

    def _all_action_rows(self, run_id: str | None = None) -> list[tuple[Any, ...]]:
        with self._errors():
            return action_rows(self._pc.conn, run_id or self._head.run_id, None, None)

    def _payloads_after(self, run_id: str, after: int, type_: str) -> list[str]:
        with self._errors():
            rows = self._pc.conn.execute(
                "SELECT payload FROM continuum.events WHERE run_id = %s AND sequence > %s"
                " AND type = %s ORDER BY sequence",
                (run_id, after, type_),
            ).fetchall()
        return [str(r[0]) for r in rows]

    def _lock_scope(self, run_id: str) -> None:
        # Always upward (a run's own lock, then its ancestors'): no deadlock; re-entrant.
        with self._errors():
            self._pc.conn.execute("SELECT pg_advisory_xact_lock(%s)", (run_lock_key(run_id),))

    def _put_action(self, row: ActionRow) -> None:
        with self._errors():
            put_action(self._pc.conn, row)
        self.puts.append(row)

    def _put_checkpoint(self, row: CheckpointRow) -> None:
        with self._errors():
            put_checkpoint(self._pc.conn, row)
        self.puts.append(row)

    def _drop_prefix(self, run_id: str, before: int) -> tuple[int, int]:
        # Only with the archive marker appended in this transaction: the event decides the
        # read-back after a lost COMMIT reply, and the removal commits with it or not at all.
        with self._errors():
            events = self._pc.conn.execute(
                "DELETE FROM continuum.events WHERE run_id = %s AND sequence < %s",
                (run_id, before),
            ).rowcount
            checkpoints = self._pc.conn.execute(
                "DELETE FROM continuum.checkpoints WHERE run_id = %s AND event_sequence < %s",
                (run_id, before),
            ).rowcount
        return events, checkpoints

    # Approval index rows and notifications are written only with an event (in ``append``),
    # so the event decides the read-back after a lost COMMIT reply, as for the head.
    def _approval_row(self, column: str, value: str) -> tuple[Any, ...] | None:
        with self._errors():
            row: tuple[Any, ...] | None = self._pc.conn.execute(
                POSTGRES.approval_row(column), (self._head.run_id, value)
            ).fetchone()
        return row

    def _put_approval(self, row: ApprovalRow) -> None:
        with self._errors():
            put_approval(self._pc.conn, row)

    def _put_outbox(self, notice: dict[str, Any]) -> None:
        with self._errors():
            self._pc.conn.execute(POSTGRES.put_outbox, outbox_values(notice))

    def _outbox_has(self, delivery_id: str) -> bool:
        with self._errors():
            found = self._pc.conn.execute(
                "SELECT 1 FROM continuum.outbox WHERE delivery_id = %s", (delivery_id,)
            ).fetchone()
        return found is not None

    @property
    def wrote(self) -> bool:
        return self.last_event is not None or bool(self.puts)

    def applied(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether this transaction's writes are in the database (read on ``conn``)."""
        if self.last_event is not None:  # all or nothing: the last event decides
            row = conn.execute(
                "SELECT hash FROM continuum.events WHERE event_id = %s",
                (self.last_event.event_id,),
            ).fetchone()
            if row is not None and row[0] != self.last_event.hash:
                raise integrity_error(
                    self._head.run_id,
                    self.last_event.sequence,
                    "hash_mismatch",
                    "the event read back after a lost COMMIT reply differs",
                )
            return row is not None
        for put in self.puts:
            if isinstance(put, ActionRow):
                found = action_rows(conn, put.run_id, "action_id", put.action_id)
                if not found or action_from_row(found[0]) != put:
                    return False
            else:
                stored = conn.execute(
                    f"SELECT {CHECKPOINT_COLUMNS} FROM continuum.checkpoints"
                    " WHERE run_id = %s AND sequence = %s",
                    (put.run_id, put.sequence),
                ).fetchone()
                if stored is None or checkpoint_from_row(stored) != put:
                    return False
        return True

"""The approval index and the notification outbox, for every backend.

Both are written by the write transaction that appends the event they follow
(``CoreTx.append``: an approval event updates its index row, an event that calls for a
person adds a notification), so neither can disagree with the log after a crash. Here are
their rows, their statements in each dialect, and the store methods that read them and
move notifications through delivery (``ApprovalOutboxStore``, mixed into ``CoreStore``).

A backend supplies ``_dialect`` (table names, placeholder, insertion-order column,
row locking), ``_read(sql, params)`` and ``_transact(fn)`` (``fn`` runs inside one
write transaction with an ``execute(sql, params) -> rows`` function).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from continuum.errors import IntegrityError, UsageError
from continuum.eventlog.canonical import canonical_json, canonical_json_parsed
from continuum.eventlog.events import RawEvent
from continuum.state.projection import APPROVAL_TYPES, apply_approval_event
from continuum.store.base import MAX_PAGE, OUTBOX_STATUSES
from continuum.types import Origin

if TYPE_CHECKING:
    from continuum.store.models import ApprovalRow, OutboxRow

T = TypeVar("T")
Execute = Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]

APPROVAL_COLUMNS = "run_id, approval_id, record"
# What ``verify`` reads: the record and the columns derived from it, which the lookups use
# (an edited column must be caught as surely as an edited record).
APPROVAL_INDEX_COLUMNS = APPROVAL_COLUMNS + ", binding, status, run_grant"
OUTBOX_COLUMNS = (
    "delivery_id, run_id, sequence, kind, body, created_at, status, attempts, "
    "next_attempt, claimed_until, delivered_to, last_error, delivered_at"
)
APPROVAL_STATUSES = ("requested", "granted", "denied", "revoked")


class Dialect(NamedTuple):
    """How one backend spells the statements below."""

    approvals: str  # table names
    outbox: str
    events: str
    p: str  # placeholder
    order: str  # insertion order: SQLite's rowid, PostgreSQL's identity column
    lock_rows: str = ""  # appended to a claim's SELECT (PostgreSQL: FOR UPDATE SKIP LOCKED)

    def marks(self, n: int) -> str:
        return ",".join([self.p] * n)

    @property
    def put_approval(self) -> str:
        return (
            f"INSERT INTO {self.approvals} (run_id, approval_id, binding, status, run_grant,"
            f" record) VALUES ({self.marks(6)}) ON CONFLICT (run_id, approval_id) DO UPDATE"
            " SET binding = excluded.binding, status = excluded.status,"
            " run_grant = excluded.run_grant, record = excluded.record"
        )

    def approval_row(self, column: str) -> str:
        if column not in ("approval_id", "binding", "run_grant"):
            raise ValueError(column)
        latest = " DESC" if column == "binding" else ""  # a call's latest approval decides
        return (
            f"SELECT {APPROVAL_COLUMNS} FROM {self.approvals} WHERE run_id = {self.p}"
            f" AND {column} = {self.p} ORDER BY {self.order}{latest} LIMIT 1"
        )

    @property
    def put_outbox(self) -> str:
        return (
            f"INSERT INTO {self.outbox} (delivery_id, run_id, sequence, kind, body, created_at,"
            " status, attempts, next_attempt, claimed_until, delivered_to)"
            f" VALUES ({self.marks(11)})"
        )


SQLITE = Dialect(approvals="approvals", outbox="outbox", events="events", p="?", order="rowid")
POSTGRES = Dialect(
    approvals="continuum.approvals",
    outbox="continuum.outbox",
    events="continuum.events",
    p="%s",
    order="position",
    lock_rows=" FOR UPDATE SKIP LOCKED",
)


def backfill_approvals(execute: Execute, d: Dialect) -> int:
    """Schema 3's migration, inside its transaction: the approval index of the approval
    events already in the log (written before there was an index), built with the fold's
    own handler, so ``verify`` finds index and log in agreement. Rows that cannot be read
    are left to ``verify``, which reports their damage. Returns how many rows it wrote."""
    marks = d.marks(len(APPROVAL_TYPES))
    rows = execute(
        f"SELECT run_id, sequence, event_id, type, timestamp, payload, source"
        f" FROM {d.events} WHERE type IN ({marks}) ORDER BY run_id, sequence",
        tuple(sorted(APPROVAL_TYPES)),
    )
    records: dict[tuple[str, str], dict[str, Any]] = {}
    for run_id, sequence, event_id, type_, timestamp, payload, source in rows:
        try:
            data = json.loads(payload)
            event = RawEvent(
                event_id, run_id, sequence, type_, timestamp, data, None, Origin(source), None, ""
            )
            approval_id = data["approval_id"]
        except (ValueError, TypeError, KeyError):
            continue
        record = apply_approval_event(records.get((run_id, approval_id)), event)
        if record is not None:
            records[(run_id, record["id"])] = record
    from continuum.store.models import ApprovalRow

    for (run_id, approval_id), record in records.items():
        execute(
            d.put_approval,
            approval_values(ApprovalRow(run_id=run_id, approval_id=approval_id, record=record)),
        )
    return len(records)


# -- rows -------------------------------------------------------------------------------------


def _damaged(run_id: Any, what: str, detail: str, code: str, **fields: Any) -> IntegrityError:
    return IntegrityError(
        f"the {what} of run {str(run_id)!r} is damaged: {detail}",
        code=code,
        hint=f"run `continuum verify {run_id}`; stop writing to this store, keep a copy, and "
        "restore from a backup or export",
        run_id=str(run_id),
        **fields,
    )


def approval_record(row: tuple[Any, ...]) -> dict[str, Any]:
    """An approval index row's record, which must be the fold's record of *this* approval."""
    run_id, approval_id, record_text = row[:3]
    try:
        record = json.loads(record_text)
        if not isinstance(record, dict) or record.get("id") != approval_id:
            raise ValueError("the record does not describe this approval")
        return record
    except (ValueError, TypeError) as e:  # derived from the log: refuse a bad row
        raise _damaged(
            run_id,
            f"approval index row {approval_id!r}",
            str(e),
            "integrity.index_mismatch",
            approval_id=str(approval_id),
        ) from e


def approval_column_problem(row: tuple[Any, ...], record: dict[str, Any]) -> str | None:
    """What is wrong with the lookup columns of an index row (``APPROVAL_INDEX_COLUMNS``)
    given its record, or None: each must be what ``approval_values`` derives from it."""
    from continuum.store.models import ApprovalRow

    try:
        expected = approval_values(
            ApprovalRow(run_id=str(row[0]), approval_id=str(row[1]), record=record)
        )[2:5]
    except (KeyError, TypeError, ValueError) as e:
        return f"its record cannot be indexed ({type(e).__name__})"
    for name, got, want in zip(("binding", "status", "run_grant"), row[3:6], expected, strict=True):
        if got != want:
            return f"its {name} column is {got!r}, its record says {want!r}"
    return None


def approval_from_row(row: tuple[Any, ...]) -> ApprovalRow:
    from continuum.store.models import ApprovalRow

    return ApprovalRow(run_id=row[0], approval_id=row[1], record=approval_record(row))


def approval_values(row: ApprovalRow) -> tuple[Any, ...]:
    """``(run_id, approval_id, binding, status, run_grant, record)``; ``run_grant`` holds
    the action type while a grant covers the rest of the run."""
    rec = row.record
    grant = (
        rec.get("action_type")
        if rec.get("status") == "granted" and rec.get("scope") == "run"
        else None
    )
    return (
        row.run_id,
        row.approval_id,
        rec.get("binding"),
        rec["status"],
        grant,
        canonical_json_parsed(rec),
    )


def outbox_values(notice: dict[str, Any]) -> tuple[Any, ...]:
    """A new notification's row: pending, due at once."""
    return (
        notice["delivery_id"],
        notice["run_id"],
        notice["sequence"],
        notice["kind"],
        canonical_json(notice),
        notice["recorded_at"],
        "pending",
        0,
        0.0,
        None,
        "[]",
    )


def outbox_from_row(row: tuple[Any, ...]) -> OutboxRow:
    from continuum.store.models import OutboxRow

    (
        delivery_id,
        run_id,
        sequence,
        kind,
        body,
        created,
        status,
        attempts,
        next_attempt,
        claimed_until,
        delivered_to,
        last_error,
        delivered_at,
    ) = row
    try:
        return OutboxRow(
            delivery_id=delivery_id,
            run_id=run_id,
            sequence=sequence,
            kind=kind,
            body=json.loads(body),
            created_at=created,
            status=status,
            attempts=attempts,
            next_attempt=next_attempt,
            claimed_until=claimed_until,
            delivered_to=json.loads(delivered_to),
            last_error=last_error,
            delivered_at=delivered_at,
        )
    except (ValueError, TypeError) as e:  # a row edited by hand: say which one
        raise _damaged(
            run_id,
            f"outbox row {delivery_id!r}",
            str(e),
            "integrity.malformed",
            delivery_id=str(delivery_id),
        ) from e


def _limit(limit: int) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE:
        raise UsageError(
            f"limit {limit!r} is not a page size",
            code="usage.bad_limit",
            hint=f"use a whole number from 1 to {MAX_PAGE}",
        )
    return limit


def _one_of(value: str | None, allowed: tuple[str, ...], what: str) -> None:
    if value is not None and value not in allowed:
        raise UsageError(
            f"{what} {value!r} is not one of {', '.join(allowed)}",
            code="usage.bad_status",
            hint=f"use one of {', '.join(allowed)}",
        )


# -- the store methods --------------------------------------------------------------------------


class ApprovalOutboxStore:
    """The ``Storage`` methods for approvals and the outbox (see ``store/base.py``)."""

    _dialect: Dialect

    def _read(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _transact(self, fn: Callable[[Execute], T]) -> T:
        raise NotImplementedError

    # -- approvals ------------------------------------------------------------------------

    def find_approvals(self, approval_id: str) -> list[ApprovalRow]:
        d = self._dialect
        rows = self._read(
            f"SELECT {APPROVAL_COLUMNS} FROM {d.approvals} WHERE approval_id = {d.p}"
            f" ORDER BY {d.order}",
            (approval_id,),
        )
        return [approval_from_row(r) for r in rows]

    def list_approvals(
        self, *, run_id: str | None = None, status: str | None = None, limit: int = MAX_PAGE
    ) -> list[ApprovalRow]:
        _one_of(status, APPROVAL_STATUSES, "approval status")
        d = self._dialect
        where, params = [], []
        for column, value in (("run_id", run_id), ("status", status)):
            if value is not None:
                where.append(f"{column} = {d.p}")
                params.append(value)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        rows = self._read(
            f"SELECT {APPROVAL_COLUMNS} FROM {d.approvals}{clause} ORDER BY {d.order} LIMIT {d.p}",
            (*params, _limit(limit)),
        )
        return [approval_from_row(r) for r in rows]

    def approval_index_rows(self, run_id: str) -> list[tuple[Any, ...]]:
        d = self._dialect
        return self._read(
            f"SELECT {APPROVAL_INDEX_COLUMNS} FROM {d.approvals}"
            f" WHERE run_id = {d.p} ORDER BY {d.order}",
            (run_id,),
        )

    # -- the outbox -------------------------------------------------------------------------

    def list_outbox(
        self, *, status: str | None = None, run_id: str | None = None, limit: int = MAX_PAGE
    ) -> list[OutboxRow]:
        _one_of(status, OUTBOX_STATUSES, "outbox status")
        d = self._dialect
        where, params = [], []
        for column, value in (("status", status), ("run_id", run_id)):
            if value is not None:
                where.append(f"{column} = {d.p}")
                params.append(value)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        rows = self._read(
            f"SELECT {OUTBOX_COLUMNS} FROM {d.outbox}{clause} ORDER BY {d.order} DESC LIMIT {d.p}",
            (*params, _limit(limit)),
        )
        return [outbox_from_row(r) for r in rows]

    def outbox_counts(self) -> dict[str, int]:
        rows = self._read(
            f"SELECT status, count(*) FROM {self._dialect.outbox} GROUP BY status", ()
        )
        counts = dict.fromkeys(OUTBOX_STATUSES, 0)
        counts.update({str(status): int(n) for status, n in rows})
        return counts

    def claim_outbox(self, now: float, until: float, limit: int) -> list[OutboxRow]:
        d = self._dialect
        limit = _limit(limit)

        def claim(execute: Execute) -> list[tuple[Any, ...]]:
            rows = execute(
                f"SELECT {OUTBOX_COLUMNS} FROM {d.outbox} WHERE status = 'pending'"
                f" AND next_attempt <= {d.p} AND (claimed_until IS NULL"
                f" OR claimed_until < {d.p}) ORDER BY {d.order} LIMIT {d.p}"
                f"{d.lock_rows}",
                (now, now, limit),
            )
            for row in rows:
                execute(
                    f"UPDATE {d.outbox} SET claimed_until = {d.p} WHERE delivery_id = {d.p}",
                    (until, row[0]),
                )
            return rows

        return [
            outbox_from_row(r).model_copy(update={"claimed_until": until})
            for r in self._transact(claim)
        ]

    def record_delivery(
        self,
        delivery_id: str,
        *,
        status: str,
        attempts: int,
        next_attempt: float,
        delivered_to: list[str],
        last_error: str | None,
        delivered_at: str | None,
        claim: OutboxRow | None = None,
    ) -> bool:
        _one_of(status, OUTBOX_STATUSES, "outbox status")
        d = self._dialect
        # Compare and set: the claim is (claimed_until, attempts) as claimed. Another
        # deliverer that took the row over after the claim lapsed wrote its own
        # claimed_until (and, once it recorded, attempts + 1), so a late writer matches
        # nothing and cannot overwrite what the newer one recorded.
        held = ""
        params: tuple[Any, ...] = ()
        if claim is not None:
            if claim.delivery_id != delivery_id or claim.claimed_until is None:
                raise UsageError(
                    "a claim is the row claim_outbox returned for this delivery",
                    code="usage.bad_claim",
                    hint="pass the claimed row",
                )
            held = f" AND claimed_until = {d.p} AND attempts = {d.p} AND status = 'pending'"
            params = (claim.claimed_until, claim.attempts)
        rows = self._transact(
            lambda execute: execute(
                f"UPDATE {d.outbox} SET status = {d.p}, attempts = {d.p}, next_attempt = {d.p},"
                f" delivered_to = {d.p}, last_error = {d.p}, delivered_at = {d.p},"
                f" claimed_until = NULL WHERE delivery_id = {d.p}{held} RETURNING delivery_id",
                (
                    status,
                    attempts,
                    next_attempt,
                    canonical_json(sorted(set(delivered_to))),
                    last_error,
                    delivered_at,
                    delivery_id,
                    *params,
                ),
            )
        )
        return bool(rows)

    def requeue_outbox(self, delivery_ids: Sequence[str] | None = None) -> int:
        d = self._dialect
        ids = list(delivery_ids) if delivery_ids is not None else None

        def requeue(execute: Execute) -> int:
            base = (
                f"UPDATE {d.outbox} SET status = 'pending', attempts = 0, next_attempt = 0,"
                f" claimed_until = NULL WHERE status = 'failed'"
            )
            if ids is None:
                return len(execute(base + " RETURNING delivery_id", ()))
            return sum(
                len(execute(base + f" AND delivery_id = {d.p} RETURNING delivery_id", (i,)))
                for i in ids
            )

        return self._transact(requeue)

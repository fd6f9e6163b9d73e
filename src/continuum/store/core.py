"""What every store backend shares, written once.

A backend (``sqlite.py``, ``postgres.py``) only opens connections, runs transactions and
speaks its SQL dialect. Everything that decides what a row means lives here:

- sealing the next event of a run and the head move that goes with it (``CoreTx``);
- reading rows back: events, runs, action index rows, checkpoints, with every damaged
  row an ``IntegrityError`` naming the run (and sequence), never a raw decoding error;
- the verify loops: events checked as they are read (``verified_events``) and the
  whole-log report that never raises on damage (``verify_rows``);
- the shared read methods (``CoreStore``), the checks of an import, and the errors
  ("run not found", "run exists", "schema too new").

So the same damage gets the same error code, and the same exit code, on every backend.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from continuum.errors import (
    HistoryArchivedError,
    IntegrityError,
    NotFoundError,
    SchemaError,
    StoreError,
    UsageError,
)
from continuum.eventlog.archived import ArchiveBase, archive_base_of
from continuum.eventlog.canonical import (
    canonical_bytes,
    canonical_json,
    canonical_json_parsed,
    fast_parse,
)
from continuum.eventlog.chain import ChainVerifier, VerifyReport
from continuum.eventlog.events import (
    LIFECYCLE_STATUS,
    Event,
    EventType,
    RawEvent,
    known_type,
    raw_hash,
    row_hash,
)
from continuum.eventlog.limits import check_entry
from continuum.eventlog.notices import NOTIFYING, notice_for
from continuum.eventlog.payloads import check_payload
from continuum.state.projection import APPROVAL_TYPES, apply_approval_event
from continuum.store.approval_outbox import ApprovalOutboxStore, approval_from_row
from continuum.store.base import (
    DEFAULT_PAGE,
    MAX_PAGE,
    ActionRow,
    ApprovalRow,
    CheckpointRow,
    RunExport,
    RunInfo,
    check_run_id,
    integrity_error,
)
from continuum.store.confirm_attempts import ConfirmAttemptStore
from continuum.store.schema import SCHEMA_VERSION
from continuum.types import Origin, RunStatus
from continuum.untrusted import quoted

# Column lists, the same order on every backend (the mappers below depend on it).
EVENT_COLUMNS = (
    "run_id, sequence, event_id, type, timestamp, payload, causer_event_id, source, prev_hash, hash"
)
RUN_COLUMNS = "run_id, goal, status, created_at, head_sequence, head_hash, metadata"
ACTION_COLUMNS = "run_id, action_id, record, lease_expires, dedup_key"
CHECKPOINT_COLUMNS = "run_id, sequence, event_sequence, state, state_hash, created_at"
PAYLOAD = 5  # position of the stored payload text in an event row
EVERY_ROW = -(2**63)  # ``_event_rows(after=EVERY_ROW)``: every row, even one at sequence <= 0


# The statuses a listing shows first (someone may still have to act on them) and last.
OPEN_STATUSES = ("started", "unknown", "failed")
SETTLED_STATUSES = ("completed", "compensated")


def parse_cursor(cursor: str | None) -> tuple[str, int]:
    """A listing cursor (``o.N`` or ``s.N``, from a page's ``next_cursor``), or the start."""
    if cursor is None:
        return "o", 0
    phase, sep, position = cursor.partition(".") if isinstance(cursor, str) else ("", "", "")
    if (
        phase not in ("o", "s")
        or not sep
        or not position.isascii()
        or not position.isdigit()
        or len(position) > 19
    ):
        raise UsageError(
            f"cursor {cursor!r} is not a listing cursor",
            code="usage.bad_cursor",
            hint="pass the next_cursor of the previous page, or none to start over",
        )
    return phase, int(position)


# -- errors ---------------------------------------------------------------------------------


def run_not_found(run_id: str) -> NotFoundError:
    return NotFoundError(
        f"run {run_id!r} not found",
        code="not_found.run",
        hint="list runs with `continuum runs` (or create it: `continuum start`)",
        run_id=run_id,
    )


def run_exists(run_id: str, where: str | None = None) -> UsageError:
    if where is None:
        return UsageError(
            f"run {run_id!r} already exists",
            code="usage.run_exists",
            hint="choose another run id, or resume this one",
        )
    return UsageError(
        f"run {run_id!r} already exists in {where}; nothing was imported",
        code="usage.run_exists",
        hint="import into another store, or choose which runs to export",
    )


def schema_too_new(version: int) -> SchemaError:
    return SchemaError(
        f"store schema version {version} is newer than this continuum knows ({SCHEMA_VERSION})",
        code="store.schema_too_new",
        hint="upgrade continuum to open this store",
    )


def damaged_record(
    run_id: str, record: str, detail: str, *, code: str, **fields: Any
) -> IntegrityError:
    return IntegrityError(
        f"the {record} of run {run_id!r} is damaged: {detail}",
        code=code,
        hint=f"run `continuum verify {run_id}`; stop writing to this store, keep a copy, and "
        "restore from a backup or export",
        run_id=run_id,
        record=record,
        **fields,
    )


# -- reading rows -------------------------------------------------------------------------


def text(value: Any) -> Any:
    """A TEXT column: SQLite reads them as bytes (so a row that is not UTF-8 fails here,
    at its own sequence), PostgreSQL as str."""
    return value.decode("utf-8") if isinstance(value, bytes) else value


_ORIGINS = {str(o): o for o in Origin}
_new_tuple = tuple.__new__


def raw_from_row(row: tuple[Any, ...]) -> RawEvent:
    """A stored row as plain data, every column checked for its type (a damaged row
    raises ``ValueError``; the caller reports it as malformed at its sequence). This runs
    once per event of every verify and fold: plain type checks, no call per column."""
    run_id, seq, event_id, type_, ts, payload, causer, source, prev, hash_ = row
    if type(event_id) is bytes:  # a row read as bytes (text that is not UTF-8 somewhere)
        return raw_from_row(tuple(v.decode("utf-8") if type(v) is bytes else v for v in row))
    if type(seq) is not int:
        raise ValueError("sequence is not a whole number")
    if not (
        type(run_id) is type(event_id) is type(type_) is type(ts) is type(hash_) is str
        and type(payload) is str
        and (causer is None or type(causer) is str)
        and (prev is None or type(prev) is str)
    ):
        raise ValueError("a text column holds something else")
    data = fast_parse(payload)
    if type(data) is not dict:
        raise ValueError("payload is not a JSON object")
    origin = _ORIGINS.get(source)
    if origin is None:
        raise ValueError(f"source {source!r} is not an origin")
    # tuple.__new__ directly: the NamedTuple's generated __new__ is a Python frame per row.
    return _new_tuple(
        RawEvent, (event_id, run_id, seq, type_, ts, data, causer, origin, prev, hash_)
    )


def event_from_raw(raw: RawEvent) -> Event:
    """The API's validated model of a row already checked (``type`` an ``EventType`` when
    known, as ``Event`` validation gives it)."""
    fields = raw._asdict()
    fields["type"] = known_type(raw.type)
    return Event.model_construct(**fields)


def run_from_row(row: tuple[Any, ...]) -> RunInfo:
    run_id, goal, status, created, head_seq, head_hash, metadata = row
    try:
        return RunInfo(
            run_id=run_id,
            goal=goal,
            status=RunStatus(status),
            created_at=created,
            head_sequence=head_seq,
            head_hash=head_hash,
            metadata=json.loads(metadata),
        )
    except (ValueError, TypeError) as e:  # (pydantic's ValidationError is a ValueError)
        raise damaged_record(str(run_id), "record", str(e), code="integrity.malformed") from e


def action_record(row: tuple[Any, ...]) -> dict[str, Any]:
    """An index row's record, which must be the fold's record of *this* action."""
    run_id, action_id, record_text, _, dedup_key = row
    try:
        record = json.loads(record_text)
        if not isinstance(record, dict) or (record.get("action_id"), record.get("dedup_key")) != (
            action_id,
            dedup_key,
        ):
            raise ValueError("the record does not describe this action")
        return record
    except (ValueError, TypeError) as e:  # the index is derived from the log: refuse a bad row
        raise damaged_record(
            str(run_id),
            f"action index row {action_id!r}",
            str(e),
            code="integrity.index_mismatch",
            action_id=action_id,
        ) from e


def action_from_row(row: tuple[Any, ...]) -> ActionRow:
    """An index row as the store's model (its record checked by ``action_record``)."""
    record = action_record(row)
    try:
        return ActionRow(run_id=row[0], action_id=row[1], record=record, lease_expires=row[3])
    except ValueError as e:
        raise damaged_record(
            str(row[0]),
            f"action index row {row[1]!r}",
            str(e),
            code="integrity.index_mismatch",
            action_id=row[1],
        ) from e


def checkpoint_from_row(row: tuple[Any, ...]) -> CheckpointRow:
    run_id, sequence, event_sequence, state, state_hash, created = row
    try:
        return CheckpointRow(
            run_id=run_id,
            sequence=sequence,
            event_sequence=event_sequence,
            state_json=state,
            state_hash=state_hash,
            created_at=created,
        )
    except ValueError as e:  # pydantic's ValidationError: a field of the wrong type
        raise damaged_record(
            str(run_id), "checkpoint", str(e), code="integrity.checkpoint_mismatch"
        ) from e


def row_sequence(row: tuple[Any, ...], verifier: ChainVerifier) -> int:
    """A malformed row's sequence, or the position it holds if that too is damaged."""
    return row[1] if type(row[1]) is int else verifier.expected_sequence


# -- the verify loops ------------------------------------------------------------------------


def verified_events(
    run_id: str, rows: Iterable[tuple[Any, ...]], *, after: int, prev_hash: str | None, head: int
) -> Iterator[RawEvent]:
    """Events from ``rows`` (those after ``after``, up to ``head``), each checked as read.

    A row that cannot be decoded or fails its hash, link or sequence raises an integrity
    error naming run and sequence; a log that ends before the head raises too. An intact
    row takes one comparison of each kind; any other goes through ``ChainVerifier.feed``,
    which names the first thing wrong with it.
    """
    expected, prev = after + 1, prev_hash
    for row in rows:
        try:
            event = raw_from_row(row)
        except Exception as e:  # undecodable row: damage, never skipped
            raise integrity_error(
                run_id,
                row[1] if type(row[1]) is int else expected,
                "malformed",
                f"cannot decode event: {e}",
            ) from e
        payload_text = row[PAYLOAD] if type(row[PAYLOAD]) is str else text(row[PAYLOAD])
        try:
            intact = (
                event.sequence == expected
                and event.prev_hash == prev
                and event.run_id == run_id
                and raw_hash(event, payload_text) == event.hash
            )
        except UnicodeEncodeError:
            intact = False
        if not intact:
            verifier = ChainVerifier(run_id)
            verifier.expected_sequence, verifier.prev_hash = expected, prev
            violation = verifier.feed(event, payload_text)
            if violation is not None:
                raise integrity_error(
                    run_id, violation.sequence, str(violation.kind), violation.detail
                )
        expected, prev = expected + 1, event.hash
        yield event
    if expected - 1 < head:
        raise integrity_error(
            run_id,
            expected,
            "truncated",
            f"the run's head is {head} but the log ends at {expected - 1}",
        )


def verify_rows(
    run_id: str, rows: Iterable[tuple[Any, ...]], run: RunInfo, base: ArchiveBase | None = None
) -> VerifyReport:
    """The whole-log report: every row checked, damage named, nothing raised. ``base``:
    the log starts after an archived prefix (``archived.py``), from its marker's hash."""
    verifier = (
        ChainVerifier(run_id)
        if base is None
        else ChainVerifier(run_id, after=base.through, prev_hash=base.through_hash)
    )
    for row in rows:
        try:
            event = raw_from_row(row)
        except Exception as e:
            sequence = row_sequence(row, verifier)
            verifier.add_malformed(sequence, f"cannot decode event: {e}")
            verifier.expected_sequence = sequence + 1
            continue
        verifier.feed(event, text(row[PAYLOAD]))
    return verifier.finish(run.head_sequence, run.head_hash)


# -- archived history (``continuum archive``, ``archived.py``) -------------------------------


def history_archived(run_id: str, base: ArchiveBase, sequence: int) -> HistoryArchivedError:
    name = "an archive file" if base.archive_name is None else quoted(base.archive_name)
    where = (
        f"{name}"
        if base.from_sequence == 1
        else f"archive files, the latest {name} with events {base.from_sequence}..{base.through}"
    )
    return HistoryArchivedError(
        f"event {sequence} of run {run_id!r} is archived: events 1..{base.through} were moved "
        f"to {where} (sha256 {base.archive_sha256[:16]}..., recorded by the marker at "
        f"sequence {base.marker_sequence}); the live log starts at {base.through + 1}",
        hint=f"read the live log after {base.through} (e.g. `continuum events {run_id} --after "
        f"{base.through}`); check the whole history with `continuum verify {run_id} "
        "--archive FILE ...`",
        run_id=run_id,
        archived_through=base.through,
        archive_name=base.archive_name,
        sequence=sequence,
    )


def refuse_marker(type_: str) -> None:
    """Archive markers are written by ``continuum archive`` alone, in the transaction that
    removes what they archived; anyone else appending one is refused."""
    if type_ == EventType.HISTORY_ARCHIVED:
        raise UsageError(
            "history_archived events are written only by `continuum archive`",
            code="usage.reserved_event_type",
            hint="archive old history with `continuum archive RUN --before SEQ "
            "--to FILE`; nothing was written",
        )
    if type_ == EventType.HISTORY_IMPORTED:  # the fold re-reads what came before it
        raise UsageError(
            "history_imported events are written only by `continuum import`, with the imported run",
            code="usage.reserved_event_type",
            hint="nothing was written",
        )


# -- writing: one transaction on one run ------------------------------------------------------


class CoreTx:
    """The write transaction the ledger and runtime work through (``WriteTx``).

    Sealing, the head move and the index look-ups are here; a backend subclass supplies the
    statements: ``_insert_event``, ``_move_head``, ``_action_row``, ``_put_action``,
    ``_put_checkpoint``.
    """

    def __init__(self, run: RunInfo, clock: Callable[[], str]) -> None:
        self._run, self._clock = run, clock
        self._opened_at = run.head_sequence
        self.last_event: Event | None = None

    @property
    def run(self) -> RunInfo:
        return self._run

    def append(
        self,
        type: EventType | str,
        payload: dict[str, Any],
        *,
        source: Origin,
        causer_event_id: str | None = None,
    ) -> Event:
        """Seal and write the next event of the run. The payload is encoded once: that text
        is both hashed (``row_hash``) and stored, and the event is built without a second
        validation (every field is ours or was checked here)."""
        type_ = str(type)
        check_payload(type_, payload)  # a malformed known payload is refused, not stored
        run, origin = self._run, Origin(source)
        payload_text = canonical_json(payload)
        check_entry(payload, payload_text, f"this {type_} event")  # limits.py: depth, size
        if causer_event_id is not None and not isinstance(causer_event_id, str):
            raise UsageError(
                "causer_event_id must be an event id (a string)",
                code="usage.bad_payload",
                hint="pass the event_id of an event",
            )
        fields: dict[str, Any] = {
            "event_id": f"evt_{uuid.uuid4().hex}",
            "run_id": run.run_id,
            "sequence": run.head_sequence + 1,
            "type": type_,
            "timestamp": self._clock(),
            "causer_event_id": causer_event_id,
            "prev_hash": run.head_hash,
        }
        try:
            hash_ = row_hash(payload_text=payload_text, source=origin.value, **fields)
        except UnicodeEncodeError:  # a lone surrogate: the checked path raises its error
            canonical_bytes(payload)
            raise UsageError(
                "a string holds a lone surrogate, which UTF-8 cannot encode",
                code="usage.not_utf8",
                hint="send valid Unicode text (no unpaired \\ud800-\\udfff escapes)",
            ) from None
        fields["type"] = known_type(type_)  # hashed as the string; the API gets the enum
        event = Event.model_construct(**fields, payload=payload, source=origin, hash=hash_)
        status = LIFECYCLE_STATUS.get(type_)  # type: ignore[call-overload]
        new_status = RunStatus(status) if status else run.status
        self._insert_event(event, payload_text)
        self._move_head(run.run_id, event.sequence, hash_, new_status)
        # The approval index and the outbox move with the event, on every write path.
        if type_ in APPROVAL_TYPES:
            self._index_approval(event)
        if type_ in NOTIFYING:
            self._notify(event)
        self._run = run.model_copy(
            update={"head_sequence": event.sequence, "head_hash": hash_, "status": new_status}
        )
        self.last_event = event
        return event

    def find_action(
        self,
        *,
        action_id: str | None = None,
        dedup_key: str | None = None,
        fallback_key: str | None = None,
        action_key: str | None = None,
    ) -> ActionRow | None:
        for column, value in (
            ("action_id", action_id),
            ("dedup_key", dedup_key),
            ("action_key", action_key),
            ("fallback_key", fallback_key),
        ):
            if value is not None:
                row = self._action_row(column, value)
                if row is not None:
                    return action_from_row(row)
        return None

    def put_action(self, row: ActionRow) -> None:
        self._put_action(row)

    def put_checkpoint(self, row: CheckpointRow) -> None:
        self._put_checkpoint(row)

    def drop_archived(self, marker: Event) -> tuple[int, int]:
        """Remove the events the archive ``marker`` (appended in this transaction) names,
        and the checkpoints they sealed: (events, checkpoints) removed. Only
        ``archive.archive_run`` calls it, once the archive file is written, fsynced and
        verified; without such a marker nothing is removed."""
        base = archive_base_of(marker) if marker.run_id == self._run.run_id else None
        if base is None or marker.sequence <= self._opened_at:
            raise UsageError(
                "events are removed from the live log only with the archive "
                "marker that names them, in the same transaction",
                code="usage.no_archive_marker",
                hint="use `continuum archive`; nothing was removed",
            )
        return self._drop_prefix(self._run.run_id, base.through + 1)

    def find_approval(
        self,
        *,
        approval_id: str | None = None,
        binding: str | None = None,
        run_grant: str | None = None,
    ) -> ApprovalRow | None:
        """This run's approval by id; the latest one bound to ``binding``; or the first
        grant of action type ``run_grant`` for the rest of the run."""
        for column, value in (
            ("approval_id", approval_id),
            ("binding", binding),
            ("run_grant", run_grant),
        ):
            if value is not None:
                row = self._approval_row(column, value)
                return approval_from_row(row) if row is not None else None
        return None

    def put_approval(self, row: ApprovalRow) -> None:
        self._put_approval(row)

    def _index_approval(self, event: Event) -> None:
        found = self.find_approval(approval_id=event.payload["approval_id"])
        record = apply_approval_event(found.record if found is not None else None, event)
        if record is not None:
            self._put_approval(
                ApprovalRow(run_id=event.run_id, approval_id=record["id"], record=record)
            )

    def _notify(self, event: Event) -> None:
        action_id = event.payload.get("action_id")
        action = (
            self.find_action(action_id=action_id)
            if isinstance(action_id, str) and event.type.startswith("action_")
            else None
        )
        notice = notice_for(event, action.record if action is not None else None)
        if notice is not None:
            self._put_outbox(notice)

    # -- dialect ------------------------------------------------------------------------

    def _insert_event(self, event: Event, payload_text: str) -> None:
        raise NotImplementedError

    def _move_head(self, run_id: str, sequence: int, hash_: str, status: RunStatus) -> None:
        raise NotImplementedError

    def _action_row(self, column: str, value: str) -> tuple[Any, ...] | None:
        raise NotImplementedError

    def _put_action(self, row: ActionRow) -> None:
        raise NotImplementedError

    def _put_checkpoint(self, row: CheckpointRow) -> None:
        raise NotImplementedError

    def _drop_prefix(self, run_id: str, before: int) -> tuple[int, int]:
        raise NotImplementedError

    def _approval_row(self, column: str, value: str) -> tuple[Any, ...] | None:
        """The first row by ``approval_id`` or ``run_grant``, the latest by ``binding``."""
        raise NotImplementedError

    def _put_approval(self, row: ApprovalRow) -> None:
        raise NotImplementedError

    def _put_outbox(self, notice: dict[str, Any]) -> None:
        raise NotImplementedError


def event_values(event: Event, payload_text: str | None = None) -> tuple[Any, ...]:
    """An event as stored: the payload as canonical JSON text (never a JSON column type:
    the hash is over these exact bytes); ``payload_text`` if the caller has it already."""
    return (
        event.run_id,
        event.sequence,
        event.event_id,
        event.type,
        event.timestamp,
        canonical_json(event.payload) if payload_text is None else payload_text,
        event.causer_event_id,
        str(event.source),
        event.prev_hash,
        event.hash,
    )


def action_values(row: ActionRow) -> tuple[Any, ...]:
    rec = row.record
    return (
        row.run_id,
        row.action_id,
        rec["action_key"],
        rec["dedup_key"],
        rec.get("fallback_key"),
        rec["status"],
        canonical_json_parsed(rec),
        row.lease_expires,
    )


def checkpoint_values(row: CheckpointRow) -> tuple[Any, ...]:
    return (
        row.run_id,
        row.sequence,
        row.event_sequence,
        row.state_json,
        row.state_hash,
        row.created_at,
    )


def run_values(run: RunInfo) -> tuple[Any, ...]:
    return (
        run.run_id,
        run.goal,
        str(run.status),
        run.created_at,
        run.head_sequence,
        run.head_hash,
        canonical_json(run.metadata),
    )


# -- the shared read methods -------------------------------------------------------------------


class CoreStore(ApprovalOutboxStore, ConfirmAttemptStore):
    """The read side of ``Storage`` over a backend's row queries.

    A backend supplies ``get_run``, ``event_hash_at``, ``write`` and the row queries
    ``_event_rows(run_id, after, upto)``, ``_action_rows(run_id, column, value)`` (all of a
    run's rows when ``column`` is None, in insertion order), ``_checkpoint_rows(run_id)``
    (newest first) and ``_snapshot()`` (one read snapshot for the reads inside it).
    """

    def get_run(self, run_id: str) -> RunInfo:
        raise NotImplementedError

    def event_hash_at(self, run_id: str, sequence: int) -> str | None:
        raise NotImplementedError

    def write(self, run_id: str) -> AbstractContextManager[CoreTx]:
        raise NotImplementedError

    def _event_rows(self, run_id: str, after: int, upto: int | None) -> Iterable[tuple[Any, ...]]:
        raise NotImplementedError

    def _action_rows(
        self, run_id: str, column: str | None, value: str | None
    ) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _checkpoint_rows(self, run_id: str) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _snapshot(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    # -- events ---------------------------------------------------------------------------

    def append_event(
        self,
        run_id: str,
        type: EventType | str,
        payload: dict[str, Any],
        *,
        source: Origin = Origin.DETERMINISTIC,
        causer_event_id: str | None = None,
    ) -> Event:
        if not isinstance(payload, dict):
            raise UsageError(
                "event payload must be a JSON object", code="usage.bad_payload", hint="pass a dict"
            )
        # refuse NaN / non-JSON, too deep or too large, before taking the write lock
        check_entry(payload, canonical_json(payload), f"this {type} event")
        check_payload(str(type), payload)
        refuse_marker(str(type))
        with self.write(run_id) as tx:
            return tx.append(type, payload, source=source, causer_event_id=causer_event_id)

    def append_events(
        self,
        run_id: str,
        events: Sequence[tuple[EventType | str, dict[str, Any]]],
        *,
        source: Origin = Origin.DETERMINISTIC,
    ) -> list[Event]:
        """Several events in one transaction, chained exactly as the same single appends
        would be, all durable when this returns (or none written). Every payload is
        checked before the write lock is taken; an error names the event by position."""
        checked: list[tuple[str, dict[str, Any]]] = []
        for i, item in enumerate(events):
            try:
                type_, payload = item
            except (TypeError, ValueError):
                raise UsageError(
                    f"events[{i}] is not a (type, payload) pair",
                    code="usage.bad_payload",
                    hint="pass a list of (event type, payload dict) pairs",
                ) from None
            try:
                if not isinstance(payload, dict):
                    raise UsageError(
                        "event payload must be a JSON object",
                        code="usage.bad_payload",
                        hint="pass a dict",
                    )
                check_entry(payload, canonical_json(payload), f"this {type_} event")
                check_payload(str(type_), payload)
                refuse_marker(str(type_))
            except UsageError as e:
                raise UsageError(
                    f"events[{i}]: {e.message}; nothing was written",
                    code=e.code,
                    hint=e.hint,
                    **{**e.fields, "index": i},
                ) from None
            checked.append((str(type_), payload))
        if not checked:
            return []
        with self.write(run_id) as tx:
            return [tx.append(type_, payload, source=source) for type_, payload in checked]

    def iter_events(self, run_id: str, after: int = 0) -> Iterator[Event]:
        """Events after ``after`` in order, each verified as it is read.

        A record that fails its hash, link or sequence raises IntegrityError naming run
        and sequence; a log shorter than the run's head raises too (truncated tail).
        """
        for raw in self.iter_raw(run_id, after):
            yield event_from_raw(raw)

    def iter_raw(
        self, run_id: str, after: int = 0, *, prev_hash: str | None = None, upto: int | None = None
    ) -> Iterator[RawEvent]:
        """``iter_events`` as plain data (``RawEvent``), for folding and verifying without a
        model per event. ``prev_hash``: the hash the event at ``after`` must have (a
        caller's cached head), else the stored one; ``upto``: stop there instead of the
        head."""
        run = self.get_run(run_id)
        head = run.head_sequence if upto is None else min(upto, run.head_sequence)
        if prev_hash is None and after > 0:
            prev_hash = self.event_hash_at(run_id, after)
            if prev_hash is None:  # not in the live log: maybe archived
                prev_hash = self._archived_link(run_id, after)
        rows: Iterable[tuple[Any, ...]] = self._event_rows(run_id, after, head)
        if after < head:
            rows = self._live_from(run_id, rows, after)
        yield from verified_events(run_id, rows, after=after, prev_hash=prev_hash, head=head)

    def _archived_link(self, run_id: str, after: int) -> str | None:
        """The hash the event after ``after`` links to when ``after`` is the last archived
        event (its marker records it); an earlier, archived ``after`` is refused."""
        base = self.archive_base(run_id)
        if base is None or after > base.through:
            return None
        if after < base.through:
            raise history_archived(run_id, base, after + 1)
        return base.through_hash

    def _live_from(
        self, run_id: str, rows: Iterable[tuple[Any, ...]], after: int
    ) -> Iterable[tuple[Any, ...]]:
        """``rows``, unless the first is not event ``after + 1`` because that one was
        archived: then a clear error naming the archive, not a gap (costs nothing on an
        intact log: one look at the first row)."""
        it = iter(rows)
        first = next(it, None)
        if first is None or first[1] != after + 1:
            base = self.archive_base(run_id)
            if base is not None and after < base.through:
                raise history_archived(run_id, base, after + 1)
        return it if first is None else itertools.chain((first,), it)

    def archive_base(self, run_id: str) -> ArchiveBase | None:
        """Where the live log starts when old history was archived (its latest marker), or
        None when it starts at event 1. Read from the log itself (the marker is a sealed
        event, verified with the chain); a marker too damaged to read counts as none."""
        first = self._first_sequence(run_id)
        if first is None or first <= 1:
            return None
        row = self._latest_of_type(run_id, str(EventType.HISTORY_ARCHIVED))
        if row is None:
            return None
        try:
            return archive_base_of(raw_from_row(row))
        except Exception:  # a damaged marker row: the verify loop names it
            return None

    def snapshot(self) -> AbstractContextManager[None]:
        """The reads inside see one consistent state of the whole store (one read
        transaction): a backup or export taken while writers go on."""
        return self._snapshot()

    def _first_sequence(self, run_id: str) -> int | None:
        raise NotImplementedError

    def _latest_of_type(self, run_id: str, type_: str) -> tuple[Any, ...] | None:
        raise NotImplementedError

    def read_events(self, run_id: str, after: int = 0) -> list[Event]:
        return list(self.iter_events(run_id, after))

    def verify_events(self, run_id: str) -> VerifyReport:
        """Recompute every hash, check sequence, links and head; never raises on damage.

        The head and the events are read in one snapshot, so a concurrent append can never
        look like a head that disagrees with the log.
        """
        with self._snapshot():
            run = self.get_run(run_id)
            return verify_rows(
                run_id, self._event_rows(run_id, EVERY_ROW, None), run, self.archive_base(run_id)
            )

    # -- the action index and checkpoints --------------------------------------------------

    def get_action(self, run_id: str, action_ref: str) -> ActionRow | None:
        for column in ("action_id", "action_key"):
            rows = self._action_rows(run_id, column, action_ref)
            if rows:
                return action_from_row(rows[0])
        return None

    def list_actions(self, run_id: str) -> list[ActionRow]:
        return [action_from_row(r) for r in self._action_rows(run_id, None, None)]

    def action_index_rows(self, run_id: str) -> list[tuple[Any, ...]]:
        """Every index row of the run as stored, in ``ACTION_COLUMNS`` order (verify
        compares them with the fold by the ten thousand: text first, no model per row;
        ``action_record`` reads one)."""
        return self._action_rows(run_id, None, None)

    def list_checkpoints(self, run_id: str) -> list[CheckpointRow]:
        return [checkpoint_from_row(r) for r in self._checkpoint_rows(run_id)]

    def _action_page(
        self, run_id: str, statuses: tuple[str, ...], after: int, limit: int, *, few: bool
    ) -> list[tuple[Any, ...]]:
        """Up to ``limit`` rows of the run with one of ``statuses``, after position
        ``after`` in insertion order: ``(position, *ACTION_COLUMNS)``."""
        raise NotImplementedError

    def action_page(
        self, run_id: str, *, cursor: str | None = None, limit: int = DEFAULT_PAGE
    ) -> tuple[list[ActionRow], str | None]:
        """One page of the run's actions, open ones (started, unknown, failed) first, then
        the settled ones, each in the order they were intercepted; and the cursor of the
        next page (None after the last). A page costs its own rows, not the run's history.
        Actions that change status between pages may show on both sides of the boundary
        or on neither: a listing is not a snapshot."""
        phase, after = parse_cursor(cursor)
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE:
            raise UsageError(
                f"limit {limit!r} is not a page size",
                code="usage.bad_limit",
                hint=f"use a whole number from 1 to {MAX_PAGE}",
            )
        self.get_run(run_id)  # a missing run is not an empty one
        rows: list[tuple[Any, ...]] = []
        if phase == "o":
            rows = self._action_page(run_id, OPEN_STATUSES, after, limit + 1, few=True)
            if len(rows) > limit:
                rows = rows[:limit]
                return [action_from_row(r[1:]) for r in rows], f"o.{rows[-1][0]}"
            phase, after = "s", 0
        room = limit - len(rows)
        settled = self._action_page(run_id, SETTLED_STATUSES, after, room + 1, few=False)
        more = len(settled) > room
        settled = settled[:room]
        rows += settled
        next_cursor = f"s.{settled[-1][0] if settled else after}" if more else None
        return [action_from_row(r[1:]) for r in rows], next_cursor


# -- import -------------------------------------------------------------------------------------


def import_ids(runs: list[RunExport]) -> list[str]:
    """The run ids of an import, each a valid id, none twice."""
    ids = []
    for bundle in runs:
        check_run_id(bundle.run.run_id)
        if bundle.run.run_id in ids:
            raise UsageError(
                f"run {bundle.run.run_id!r} is in the import twice",
                code="usage.bad_import",
                hint="export each run once",
            )
        ids.append(bundle.run.run_id)
    return ids


def verify_imported(store: CoreStore, runs: list[RunExport]) -> None:
    """Re-verify every imported chain inside the import's transaction; refuse on damage."""
    for bundle in runs:
        report = store.verify_events(bundle.run.run_id)
        if not report.ok:
            v = report.violations[0]
            raise integrity_error(
                bundle.run.run_id,
                v.sequence,
                str(v.kind),
                f"refused on import, nothing written: {v.detail}",
            )


# -- deleting a finished run (``continuum prune``) -----------------------------------------------

# Tables whose rows belong to one run, deleted with it (those this schema has). Every one
# is derived from the run's events (indexes, checkpoints, notifications), which the
# archive holds.
RUN_TABLES = ("checkpoints", "actions", "approvals", "outbox")


def check_deletable(
    run: RunInfo,
    expect_head: tuple[int, str | None],
    *,
    rows: int,
    head_hash: str | None,
    unknown_tables: Sequence[str] = (),
) -> None:
    """Refuse to delete ``run`` (inside the delete's transaction) unless it is finished, its
    head is still ``expect_head`` (what was exported), its stored log is exactly that head,
    and no table this code does not know holds rows of it (``unknown_tables``: such rows
    may be in no archive, so they are never deleted). Nothing is deleted on refusal."""
    if run.status not in (RunStatus.COMPLETED, RunStatus.ABORTED):
        raise UsageError(
            f"run {run.run_id!r} is {run.status}: only a completed or aborted run "
            "can be deleted; nothing was deleted",
            code="usage.run_active",
            run_id=run.run_id,
            status=str(run.status),
            hint=f"finish it first (`continuum finish {run.run_id}` or `continuum "
            "abort`); prune never deletes an active run",
        )
    seq, hash_ = expect_head
    if (run.head_sequence, run.head_hash) != (seq, hash_):
        raise UsageError(
            f"run {run.run_id!r} moved on: its head is {run.head_sequence}:"
            f"{run.head_hash}, not the exported {seq}:{hash_}; nothing was deleted",
            code="usage.run_moved_on",
            run_id=run.run_id,
            head=f"{run.head_sequence}:{run.head_hash}",
            expected=f"{seq}:{hash_}",
            hint="prune again to archive the run as it is now",
        )
    if rows != run.head_sequence or head_hash != run.head_hash:
        raise IntegrityError(
            f"run {run.run_id!r}: the stored log ({rows} rows, last hash "
            f"{head_hash}) does not match its head {run.head_sequence}:"
            f"{run.head_hash}; nothing was deleted",
            code="integrity.head_mismatch",
            run_id=run.run_id,
            hint=f"run `continuum verify {run.run_id}`",
        )
    if unknown_tables:
        raise StoreError(
            f"run {run.run_id!r} has rows in {', '.join(unknown_tables)}, which "
            "this continuum does not know how to archive; nothing was deleted",
            code="store.unknown_run_rows",
            run_id=run.run_id,
            tables=list(unknown_tables),
            hint="use the continuum version that made those tables to prune",
        )

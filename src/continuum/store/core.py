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

import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from continuum.canonical import canonical_bytes, canonical_json, canonical_json_parsed, fast_parse
from continuum.chain import ChainVerifier, VerifyReport
from continuum.errors import IntegrityError, NotFoundError, SchemaError, UsageError
from continuum.events import (
    LIFECYCLE_STATUS,
    Event,
    EventType,
    RawEvent,
    raw_hash,
    row_hash,
)
from continuum.payloads import check_payload
from continuum.store.base import (
    DEFAULT_PAGE,
    MAX_PAGE,
    ActionRow,
    CheckpointRow,
    RunExport,
    RunInfo,
    check_run_id,
    integrity_error,
)
from continuum.store.schema import SCHEMA_VERSION
from continuum.types import Origin, RunStatus

# Column lists, the same order on every backend (the mappers below depend on it).
EVENT_COLUMNS = ("run_id, sequence, event_id, type, timestamp, payload, causer_event_id, "
                 "source, prev_hash, hash")
RUN_COLUMNS = "run_id, goal, status, created_at, head_sequence, head_hash, metadata"
ACTION_COLUMNS = "run_id, action_id, record, lease_expires, dedup_key"
CHECKPOINT_COLUMNS = "run_id, sequence, event_sequence, state, state_hash, created_at"
PAYLOAD = 5  # position of the stored payload text in an event row
EVERY_ROW = -(2 ** 63)  # ``_event_rows(after=EVERY_ROW)``: every row, even one at sequence <= 0


# The statuses a listing shows first (someone may still have to act on them) and last.
OPEN_STATUSES = ("started", "unknown", "failed")
SETTLED_STATUSES = ("completed", "compensated")


def parse_cursor(cursor: str | None) -> tuple[str, int]:
    """A listing cursor (``o.N`` or ``s.N``, from a page's ``next_cursor``), or the start."""
    if cursor is None:
        return "o", 0
    phase, sep, position = cursor.partition(".") if isinstance(cursor, str) else ("", "", "")
    if phase not in ("o", "s") or not sep or not position.isascii() or not position.isdigit() \
            or len(position) > 19:
        raise UsageError(f"cursor {cursor!r} is not a listing cursor", code="usage.bad_cursor",
                         hint="pass the next_cursor of the previous page, or none to start over")
    return phase, int(position)


# -- errors ---------------------------------------------------------------------------------


def run_not_found(run_id: str) -> NotFoundError:
    return NotFoundError(f"run {run_id!r} not found", code="not_found.run",
                         hint="list runs with `continuum runs` (or create it: `continuum start`)",
                         run_id=run_id)


def run_exists(run_id: str, where: str | None = None) -> UsageError:
    if where is None:
        return UsageError(f"run {run_id!r} already exists", code="usage.run_exists",
                          hint="choose another run id, or resume this one")
    return UsageError(f"run {run_id!r} already exists in {where}; nothing was imported",
                      code="usage.run_exists",
                      hint="import into another store, or choose which runs to export")


def schema_too_new(version: int) -> SchemaError:
    return SchemaError(
        f"store schema version {version} is newer than this continuum knows ({SCHEMA_VERSION})",
        code="store.schema_too_new", hint="upgrade continuum to open this store")


def damaged_record(run_id: str, record: str, detail: str, *, code: str,
                   **fields: Any) -> IntegrityError:
    return IntegrityError(
        f"the {record} of run {run_id!r} is damaged: {detail}", code=code,
        hint=f"run `continuum verify {run_id}`; stop writing to this store, keep a copy, and "
             "restore from a backup or export", run_id=run_id, record=record, **fields)


# -- reading rows -------------------------------------------------------------------------


def text(value: Any) -> Any:
    """A TEXT column: SQLite reads them as bytes (so a row that is not UTF-8 fails here,
    at its own sequence), PostgreSQL as str."""
    return value.decode("utf-8") if isinstance(value, bytes) else value


_ORIGINS = {str(o): o for o in Origin}


def raw_from_row(row: tuple[Any, ...]) -> RawEvent:
    """A stored row as plain data, every column checked for its type (a damaged row
    raises ``ValueError``; the caller reports it as malformed at its sequence). This runs
    once per event of every verify and fold: plain type checks, no call per column."""
    run_id, seq, event_id, type_, ts, payload, causer, source, prev, hash_ = row
    if type(event_id) is bytes:  # a row read as bytes (text that is not UTF-8 somewhere)
        return raw_from_row(tuple(v.decode("utf-8") if type(v) is bytes else v for v in row))
    if type(seq) is not int:
        raise ValueError("sequence is not a whole number")
    if not (type(run_id) is type(event_id) is type(type_) is type(ts) is type(hash_) is str
            and type(payload) is str and (causer is None or type(causer) is str)
            and (prev is None or type(prev) is str)):
        raise ValueError("a text column holds something else")
    data = fast_parse(payload)
    if type(data) is not dict:
        raise ValueError("payload is not a JSON object")
    origin = _ORIGINS.get(source)
    if origin is None:
        raise ValueError(f"source {source!r} is not an origin")
    return RawEvent(event_id, run_id, seq, type_, ts, data, causer, origin, prev, hash_)


def event_from_raw(raw: RawEvent) -> Event:
    """The API's validated model of a row already checked."""
    return Event.model_construct(**raw._asdict())


def run_from_row(row: tuple[Any, ...]) -> RunInfo:
    run_id, goal, status, created, head_seq, head_hash, metadata = row
    try:
        return RunInfo(run_id=run_id, goal=goal, status=RunStatus(status), created_at=created,
                       head_sequence=head_seq, head_hash=head_hash,
                       metadata=json.loads(metadata))
    except (ValueError, TypeError) as e:  # (pydantic's ValidationError is a ValueError)
        raise damaged_record(str(run_id), "record", str(e), code="integrity.malformed") from e


def action_record(row: tuple[Any, ...]) -> dict[str, Any]:
    """An index row's record, which must be the fold's record of *this* action."""
    run_id, action_id, record_text, _, dedup_key = row
    try:
        record = json.loads(record_text)
        if not isinstance(record, dict) or (record.get("action_id"),
                                            record.get("dedup_key")) != (action_id, dedup_key):
            raise ValueError("the record does not describe this action")
        return record
    except (ValueError, TypeError) as e:  # the index is derived from the log: refuse a bad row
        raise damaged_record(str(run_id), f"action index row {action_id!r}", str(e),
                             code="integrity.index_mismatch", action_id=action_id) from e


def action_from_row(row: tuple[Any, ...]) -> ActionRow:
    """An index row as the store's model (its record checked by ``action_record``)."""
    record = action_record(row)
    try:
        return ActionRow(run_id=row[0], action_id=row[1], record=record, lease_expires=row[3])
    except ValueError as e:
        raise damaged_record(str(row[0]), f"action index row {row[1]!r}", str(e),
                             code="integrity.index_mismatch", action_id=row[1]) from e


def checkpoint_from_row(row: tuple[Any, ...]) -> CheckpointRow:
    run_id, sequence, event_sequence, state, state_hash, created = row
    try:
        return CheckpointRow(run_id=run_id, sequence=sequence, event_sequence=event_sequence,
                             state_json=state, state_hash=state_hash, created_at=created)
    except ValueError as e:  # pydantic's ValidationError: a field of the wrong type
        raise damaged_record(str(run_id), "checkpoint", str(e),
                             code="integrity.checkpoint_mismatch") from e


def row_sequence(row: tuple[Any, ...], verifier: ChainVerifier) -> int:
    """A malformed row's sequence, or the position it holds if that too is damaged."""
    return row[1] if type(row[1]) is int else verifier.expected_sequence


# -- the verify loops ------------------------------------------------------------------------


def verified_events(run_id: str, rows: Iterable[tuple[Any, ...]], *, after: int,
                    prev_hash: str | None, head: int) -> Iterator[RawEvent]:
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
            raise integrity_error(run_id, row[1] if type(row[1]) is int else expected,
                                  "malformed", f"cannot decode event: {e}") from e
        payload_text = row[PAYLOAD] if type(row[PAYLOAD]) is str else text(row[PAYLOAD])
        try:
            intact = (event.sequence == expected and event.prev_hash == prev
                      and event.run_id == run_id and raw_hash(event, payload_text) == event.hash)
        except UnicodeEncodeError:
            intact = False
        if not intact:
            verifier = ChainVerifier(run_id)
            verifier.expected_sequence, verifier.prev_hash = expected, prev
            violation = verifier.feed(event, payload_text)
            if violation is not None:
                raise integrity_error(run_id, violation.sequence, str(violation.kind),
                                      violation.detail)
        expected, prev = expected + 1, event.hash
        yield event
    if expected - 1 < head:
        raise integrity_error(run_id, expected, "truncated",
                              f"the run's head is {head} but the log ends at {expected - 1}")


def verify_rows(run_id: str, rows: Iterable[tuple[Any, ...]], run: RunInfo) -> VerifyReport:
    """The whole-log report: every row checked, damage named, nothing raised."""
    verifier = ChainVerifier(run_id)
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


# -- writing: one transaction on one run ------------------------------------------------------


class CoreTx:
    """The write transaction the ledger and runtime work through (``WriteTx``).

    Sealing, the head move and the index look-ups are here; a backend subclass supplies the
    statements: ``_insert_event``, ``_move_head``, ``_action_row``, ``_put_action``,
    ``_put_checkpoint``.
    """

    def __init__(self, run: RunInfo, clock: Callable[[], str]) -> None:
        self._run, self._clock = run, clock
        self.last_event: Event | None = None

    @property
    def run(self) -> RunInfo:
        return self._run

    def append(self, type: EventType | str, payload: dict[str, Any], *,
               source: Origin, causer_event_id: str | None = None) -> Event:
        """Seal and write the next event of the run. The payload is encoded once: that text
        is both hashed (``row_hash``) and stored, and the event is built without a second
        validation (every field is ours or was checked here)."""
        type_ = str(type)
        check_payload(type_, payload)  # a malformed known payload is refused, not stored
        run, origin = self._run, Origin(source)
        payload_text = canonical_json(payload)
        if causer_event_id is not None and not isinstance(causer_event_id, str):
            raise UsageError("causer_event_id must be an event id (a string)",
                             code="usage.bad_payload", hint="pass the event_id of an event")
        fields: dict[str, Any] = {"event_id": f"evt_{uuid.uuid4().hex}", "run_id": run.run_id,
                  "sequence": run.head_sequence + 1, "type": type_, "timestamp": self._clock(),
                  "causer_event_id": causer_event_id, "prev_hash": run.head_hash}
        try:
            hash_ = row_hash(payload_text=payload_text, source=origin.value, **fields)
        except UnicodeEncodeError:  # a lone surrogate: the checked path raises its error
            canonical_bytes(payload)
            raise UsageError("a string holds a lone surrogate, which UTF-8 cannot encode",
                             code="usage.not_utf8",
                             hint="send valid Unicode text (no unpaired \\ud800-\\udfff escapes)"
                             ) from None
        event = Event.model_construct(**fields, payload=payload, source=origin, hash=hash_)
        status = LIFECYCLE_STATUS.get(type_)  # type: ignore[call-overload]
        new_status = RunStatus(status) if status else run.status
        self._insert_event(event, payload_text)
        self._move_head(run.run_id, event.sequence, hash_, new_status)
        self._run = run.model_copy(update={"head_sequence": event.sequence,
                                           "head_hash": hash_, "status": new_status})
        self.last_event = event
        return event

    def find_action(self, *, action_id: str | None = None, dedup_key: str | None = None,
                    fallback_key: str | None = None,
                    action_key: str | None = None) -> ActionRow | None:
        for column, value in (("action_id", action_id), ("dedup_key", dedup_key),
                              ("action_key", action_key), ("fallback_key", fallback_key)):
            if value is not None:
                row = self._action_row(column, value)
                if row is not None:
                    return action_from_row(row)
        return None

    def put_action(self, row: ActionRow) -> None:
        self._put_action(row)

    def put_checkpoint(self, row: CheckpointRow) -> None:
        self._put_checkpoint(row)

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


def event_values(event: Event, payload_text: str | None = None) -> tuple[Any, ...]:
    """An event as stored: the payload as canonical JSON text (never a JSON column type:
    the hash is over these exact bytes); ``payload_text`` if the caller has it already."""
    return (event.run_id, event.sequence, event.event_id, event.type, event.timestamp,
            canonical_json(event.payload) if payload_text is None else payload_text,
            event.causer_event_id, str(event.source), event.prev_hash, event.hash)


def action_values(row: ActionRow) -> tuple[Any, ...]:
    rec = row.record
    return (row.run_id, row.action_id, rec["action_key"], rec["dedup_key"],
            rec.get("fallback_key"), rec["status"], canonical_json_parsed(rec), row.lease_expires)


def checkpoint_values(row: CheckpointRow) -> tuple[Any, ...]:
    return (row.run_id, row.sequence, row.event_sequence, row.state_json, row.state_hash,
            row.created_at)


def run_values(run: RunInfo) -> tuple[Any, ...]:
    return (run.run_id, run.goal, str(run.status), run.created_at, run.head_sequence,
            run.head_hash, canonical_json(run.metadata))


# -- the shared read methods -------------------------------------------------------------------


class CoreStore:
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

    def _action_rows(self, run_id: str, column: str | None,
                     value: str | None) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _checkpoint_rows(self, run_id: str) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _snapshot(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    # -- events ---------------------------------------------------------------------------

    def append_event(self, run_id: str, type: EventType | str, payload: dict[str, Any], *,
                     source: Origin = Origin.DETERMINISTIC,
                     causer_event_id: str | None = None) -> Event:
        if not isinstance(payload, dict):
            raise UsageError("event payload must be a JSON object", code="usage.bad_payload",
                             hint="pass a dict")
        canonical_json(payload)  # refuse NaN / non-JSON before taking the write lock
        check_payload(str(type), payload)
        with self.write(run_id) as tx:
            return tx.append(type, payload, source=source, causer_event_id=causer_event_id)

    def append_events(self, run_id: str, events: Sequence[tuple[EventType | str, dict[str, Any]]],
                      *, source: Origin = Origin.DETERMINISTIC) -> list[Event]:
        """Several events in one transaction, chained exactly as the same single appends
        would be, all durable when this returns (or none written). Every payload is
        checked before the write lock is taken; an error names the event by position."""
        checked: list[tuple[str, dict[str, Any]]] = []
        for i, item in enumerate(events):
            try:
                type_, payload = item
            except (TypeError, ValueError):
                raise UsageError(f"events[{i}] is not a (type, payload) pair",
                                 code="usage.bad_payload",
                                 hint="pass a list of (event type, payload dict) pairs") from None
            try:
                if not isinstance(payload, dict):
                    raise UsageError("event payload must be a JSON object",
                                     code="usage.bad_payload", hint="pass a dict")
                canonical_json(payload)
                check_payload(str(type_), payload)
            except UsageError as e:
                raise UsageError(f"events[{i}]: {e.message}; nothing was written", code=e.code,
                                 hint=e.hint, **{**e.fields, "index": i}) from None
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

    def iter_raw(self, run_id: str, after: int = 0, *, prev_hash: str | None = None,
                 upto: int | None = None) -> Iterator[RawEvent]:
        """``iter_events`` as plain data (``RawEvent``), for folding and verifying without a
        model per event. ``prev_hash``: the hash the event at ``after`` must have (a
        caller's cached head), else the stored one; ``upto``: stop there instead of the
        head."""
        run = self.get_run(run_id)
        head = run.head_sequence if upto is None else min(upto, run.head_sequence)
        if prev_hash is None and after > 0:
            prev_hash = self.event_hash_at(run_id, after)
        yield from verified_events(run_id, self._event_rows(run_id, after, head),
                                   after=after, prev_hash=prev_hash, head=head)

    def read_events(self, run_id: str, after: int = 0) -> list[Event]:
        return list(self.iter_events(run_id, after))

    def verify_events(self, run_id: str) -> VerifyReport:
        """Recompute every hash, check sequence, links and head; never raises on damage.

        The head and the events are read in one snapshot, so a concurrent append can never
        look like a head that disagrees with the log.
        """
        with self._snapshot():
            run = self.get_run(run_id)
            return verify_rows(run_id, self._event_rows(run_id, EVERY_ROW, None), run)

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

    def _action_page(self, run_id: str, statuses: tuple[str, ...], after: int,
                     limit: int, *, few: bool) -> list[tuple[Any, ...]]:
        """Up to ``limit`` rows of the run with one of ``statuses``, after position
        ``after`` in insertion order: ``(position, *ACTION_COLUMNS)``."""
        raise NotImplementedError

    def action_page(self, run_id: str, *, cursor: str | None = None,
                    limit: int = DEFAULT_PAGE) -> tuple[list[ActionRow], str | None]:
        """One page of the run's actions, open ones (started, unknown, failed) first, then
        the settled ones, each in the order they were intercepted; and the cursor of the
        next page (None after the last). A page costs its own rows, not the run's history.
        Actions that change status between pages may show on both sides of the boundary
        or on neither: a listing is not a snapshot."""
        phase, after = parse_cursor(cursor)
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE:
            raise UsageError(f"limit {limit!r} is not a page size", code="usage.bad_limit",
                             hint=f"use a whole number from 1 to {MAX_PAGE}")
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
            raise UsageError(f"run {bundle.run.run_id!r} is in the import twice",
                             code="usage.bad_import", hint="export each run once")
        ids.append(bundle.run.run_id)
    return ids


def verify_imported(store: CoreStore, runs: list[RunExport]) -> None:
    """Re-verify every imported chain inside the import's transaction; refuse on damage."""
    for bundle in runs:
        report = store.verify_events(bundle.run.run_id)
        if not report.ok:
            v = report.violations[0]
            raise integrity_error(bundle.run.run_id, v.sequence, str(v.kind),
                                  f"refused on import, nothing written: {v.detail}")

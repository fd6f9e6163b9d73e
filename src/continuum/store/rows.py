"""Reading rows back, the same on every backend: events, runs, action index rows and
checkpoints, every damaged row an ``IntegrityError`` naming the run (and sequence), never
a raw decoding error; the verify loops (events checked as read, ``verified_events``, and
the whole-log report that never raises on damage, ``verify_rows``); the common errors
("run not found", "run exists", "schema too new")."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from continuum.errors import (
    HistoryArchivedError,
    IntegrityError,
    NotFoundError,
    SchemaError,
    UsageError,
)
from continuum.eventlog.archived import ArchiveBase
from continuum.eventlog.canonical import (
    fast_parse,
)
from continuum.eventlog.chain import ChainVerifier
from continuum.eventlog.events import (
    EventType,
    RawEvent,
    known_type,
    raw_hash,
)
from continuum.store.base import (
    ActionRow,
    RunHead,
    StoredCheckpoint,
    integrity_error,
)
from continuum.store.schema import SCHEMA_VERSION
from continuum.types import Origin, RunStatus
from continuum.untrusted import quoted

if TYPE_CHECKING:
    from continuum.eventlog.event_model import Event
    from continuum.eventlog.reports import VerifyReport
    from continuum.store.models import CheckpointRow, RunInfo

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


# ``event_model.checked_event``, loaded on the first event built (pydantic comes with it):
# an import statement in the function would cost every append and every event read a
# look-up in the import system.
_checked_event: Callable[[dict[str, Any]], Event] | None = None


def event_from_raw(raw: RawEvent) -> Event:
    """The API's validated model of a row already checked (``type`` an ``EventType`` when
    known, as ``Event`` validation gives it)."""
    global _checked_event
    build = _checked_event
    if build is None:
        from continuum.eventlog.event_model import checked_event

        build = _checked_event = checked_event
    fields = raw._asdict()
    fields["type"] = known_type(raw.type)
    return build(fields)


def run_from_row(row: tuple[Any, ...]) -> RunInfo:
    from continuum.store.models import RunInfo

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


_RUN_STATUSES = {str(s): s for s in RunStatus}


def run_head(row: tuple[Any, ...]) -> RunHead:
    """A run's row as plain data, equal to ``run_from_row``'s model field by field: a row
    whose every column has its plain type is taken as it is; anything else (a damaged or
    unusual row) goes through ``run_from_row``, which coerces it as the model does or
    raises its error (tests/property/test_fast_paths.py)."""
    run_id, goal, status, created, head_seq, head_hash, metadata = row
    if (
        type(run_id) is str
        and (goal is None or type(goal) is str)
        and type(created) is str
        and type(head_seq) is int
        and (head_hash is None or type(head_hash) is str)
        and type(metadata) is str
        and type(status) is str
        and status in _RUN_STATUSES
    ):
        try:
            data = {} if metadata == "{}" else json.loads(metadata)
        except ValueError:
            data = None
        if type(data) is dict:
            return RunHead(run_id, goal, _RUN_STATUSES[status], created, head_seq, head_hash, data)
    return RunHead(*run_from_row(row).model_dump().values())


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
    """An index row as plain data (its record checked by ``action_record``; ids text, the
    lease a number of seconds or none)."""
    record = action_record(row)
    run_id, action_id, _, lease, _ = row
    if type(lease) is int:
        lease = float(lease)
    if type(run_id) is not str or type(action_id) is not str:
        problem = "its ids are not text"
    elif lease is not None and type(lease) is not float:
        problem = f"its lease is {type(lease).__name__}, not a number of seconds"
    else:
        return ActionRow(run_id, action_id, record, lease)
    raise damaged_record(
        str(run_id),
        f"action index row {action_id!r}",
        problem,
        code="integrity.index_mismatch",
        action_id=action_id,
    )


def checkpoint_from_row(row: tuple[Any, ...]) -> CheckpointRow:
    from continuum.store.models import CheckpointRow

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


def stored_checkpoint(row: tuple[Any, ...]) -> StoredCheckpoint:
    """A checkpoint row as plain data, equal to ``checkpoint_from_row``'s model field by
    field (a row of other types goes through the model, which coerces it or refuses it)."""
    run_id, sequence, event_sequence, state, state_hash, created = row
    if (
        type(run_id) is type(state) is type(state_hash) is type(created) is str
        and type(sequence) is type(event_sequence) is int
    ):
        return StoredCheckpoint(run_id, sequence, event_sequence, state, state_hash, created)
    return StoredCheckpoint(*checkpoint_from_row(row).model_dump().values())


def row_sequence(row: tuple[Any, ...], verifier: ChainVerifier) -> int:
    """A malformed row's sequence, or the position it holds if that too is damaged."""
    return row[1] if type(row[1]) is int else verifier.expected_sequence


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

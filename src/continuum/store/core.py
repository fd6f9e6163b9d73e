"""What every store backend shares, written once: the read side (``CoreStore``) and the
checks of an import and of a deletion.

A backend (``sqlite.py``, ``postgres.py``) only opens connections, runs transactions and
speaks its SQL dialect. Everything that decides what a row means is shared: reading rows
back and the verify loops (``rows.py``), the write transaction that seals the next event
(``tx.py``), the read methods over a backend's row queries (``CoreStore``, here), the
checks of an import and of a deletion (here).

So the same damage gets the same error code, and the same exit code, on every backend.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from json.encoder import encode_basestring as _json_string
from typing import TYPE_CHECKING, Any

from continuum.digest import store_sha256
from continuum.errors import (
    IntegrityError,
    StoreError,
    UsageError,
)
from continuum.eventlog.archived import ArchiveBase, archive_base_of
from continuum.eventlog.canonical import (
    canonical_json,
)
from continuum.eventlog.events import (
    EventType,
    RawEvent,
)
from continuum.eventlog.limits import check_entry
from continuum.eventlog.payloads import check_payload
from continuum.log import get_logger
from continuum.store.approval_outbox import ApprovalOutboxStore
from continuum.store.base import (
    DEFAULT_PAGE,
    MAX_PAGE,
    ActionRow,
    RunHead,
    StoredCheckpoint,
    check_run_id,
    integrity_error,
)
from continuum.store.confirm_attempts import ConfirmAttemptStore
from continuum.store.own_writes import OwnWrites
from continuum.store.rows import (
    EVERY_ROW,
    OPEN_STATUSES,
    SETTLED_STATUSES,
    action_from_row,
    checkpoint_from_row,
    event_from_raw,
    history_archived,
    parse_cursor,
    raw_from_row,
    refuse_marker,
    stored_checkpoint,
    verified_events,
    verify_rows,
)
from continuum.store.tx import DERIVED_ROWS, CoreTx
from continuum.types import Origin, RunStatus

if TYPE_CHECKING:
    from continuum.eventlog.event_model import Event
    from continuum.eventlog.reports import VerifyReport
    from continuum.store.models import CheckpointRow, RunExport, RunInfo

_log = get_logger("continuum.store")

# -- errors ---------------------------------------------------------------------------------


# -- reading rows -------------------------------------------------------------------------


def _refuse_constant(token: str) -> Any:
    raise ValueError(f"non-finite number {token} is not allowed")


# The payload scanner of ``fast_parse`` (its ``raw_decode`` is this plus a frame): the same
# options, NaN and Infinity refused. (``scan_once`` is set in ``JSONDecoder.__init__``,
# which the stub does not declare.)
_SCAN_PAYLOAD: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder(
    parse_constant=_refuse_constant
).scan_once  # type: ignore[attr-defined]
# Each origin with its JSON string, as ``raw_hash`` encodes it.
_SOURCES = {str(o): (o, _json_string(o.value)) for o in Origin}
_new_tuple = tuple.__new__


def verified_raw(
    run_id: str, rows: Iterable[tuple[Any, ...]], *, after: int, prev_hash: str | None, head: int
) -> Iterator[RawEvent]:
    """``verified_events`` with the intact rows checked in one loop, no call per row.

    A row is taken here only when ``raw_from_row`` would decode it to the same
    ``RawEvent`` and ``verified_events`` would find it intact (every column of its type,
    the payload one JSON object, sequence, link and run as expected, ``raw_hash`` equal to
    the stored hash). The first row that is not, and all after it, go to
    ``verified_events`` from that position, which names the damage; so the events yielded
    and the error raised are exactly its own (tests/property/test_fast_paths.py).

    Cheaper per row: the run id, the origin and the event type are JSON-encoded once, and
    a previous hash that matched a hex digest is quoted without encoding.
    """
    expected, prev = after + 1, prev_hash
    run_q = _json_string(run_id)
    prev_q = "null" if prev is None else _json_string(prev)
    types: dict[str, str] = {}
    sha256, scan, sources = store_sha256(), _SCAN_PAYLOAD, _SOURCES
    it = iter(rows)
    for row in it:
        try:
            run, seq, event_id, type_, ts, payload, causer, source, link, hash_ = row
            if not (
                type(seq) is int
                and seq == expected
                and link == prev
                and type(link) is type(prev)
                and type(run) is str
                and run == run_id
                and type(event_id) is type(type_) is type(ts) is type(hash_) is str
                and type(payload) is str
                and (causer is None or type(causer) is str)
            ):
                break
            data, end = scan(payload, 0)
            if end != len(payload) or type(data) is not dict:
                break
            origin, source_q = sources[source]
            type_q = types.get(type_)
            if type_q is None:
                type_q = types[type_] = _json_string(type_)
            text = (
                f'{{"causer_event_id":{"null" if causer is None else _json_string(causer)}'
                f',"event_id":{_json_string(event_id)},"payload":{payload}'
                f',"prev_hash":{prev_q},"run_id":{run_q},"sequence":{int.__repr__(seq)}'
                f',"source":{source_q},"timestamp":{_json_string(ts)},"type":{type_q}}}'
            )
            if sha256(text.encode("utf-8")).hexdigest() != hash_:
                break
        except Exception:  # anything unusual: the reference path decides
            break
        # hash_ is a hex digest (it equals one): its JSON string is itself in quotes.
        expected, prev, prev_q = expected + 1, hash_, f'"{hash_}"'
        yield _new_tuple(
            RawEvent, (event_id, run, seq, type_, ts, data, causer, origin, link, hash_)
        )
    else:
        row = None
    rest: Iterable[tuple[Any, ...]] = () if row is None else itertools.chain((row,), it)
    yield from verified_events(run_id, rest, after=expected - 1, prev_hash=prev, head=head)


# -- the verify loops ------------------------------------------------------------------------


# -- archived history (``continuum archive``, ``archived.py``) -------------------------------


# -- writing: one transaction on one run ------------------------------------------------------


# -- the shared read methods -------------------------------------------------------------------


class CoreStore(ApprovalOutboxStore, ConfirmAttemptStore):
    """The read side of ``Storage`` over a backend's row queries.

    A backend supplies ``get_run``, ``event_hash_at``, ``write`` and the row queries
    ``_event_rows(run_id, after, upto)``, ``_action_rows(run_id, column, value)`` (all of a
    run's rows when ``column`` is None, in insertion order),
    ``_checkpoint_rows(run_id, limit)`` (newest first, at most ``limit`` when it is not
    None) and ``_snapshot()`` (one read snapshot for the reads inside it).
    """

    # Told (run_id, head before, head after) after each committed write that added
    # events, outside the write lock (continuum.telemetry reads the new events). None: one
    # comparison per write.
    observer: Callable[[str, int, int], None] | None = None
    _own: OwnWrites | None = None

    @property
    def own_writes(self) -> OwnWrites:
        """The events this object committed last on each run (``own_writes.py``)."""
        own = self._own
        if own is None:
            own = self._own = OwnWrites()
        return own

    def own_events(
        self, run_id: str, after: int, prev_hash: str | None, head: RunHead
    ) -> list[tuple[RawEvent, str]] | None:
        """The events after ``after`` (hash ``prev_hash``) up to ``head``, if this object
        wrote and committed every one of them (the head's hash commits to them all);
        else None: read them (``iter_raw``). Each as sealed, with its payload's canonical
        text: take the payload from the text (``own_writes.readable``), never from the
        event (it is the writer's object)."""
        return self.own_writes.since(run_id, after, prev_hash, head.head_sequence, head.head_hash)

    def _kept(self, tx: CoreTx) -> None:
        """Keep what a committed write sealed (called right after its COMMIT)."""
        if tx.sealed:
            self.own_writes.committed(tx.head.run_id, tx._opened_at, tx._opened_hash, tx.sealed)

    def _committed(self, tx: CoreTx) -> None:
        """Tell the observer about a committed write; its failure never fails the write."""
        observer = self.observer
        if observer is None or tx.run.head_sequence <= tx._opened_at:
            return
        try:
            observer(tx.run.run_id, tx._opened_at, tx.run.head_sequence)
        except Exception as e:  # the write is durable; what watches it is not our concern
            _log.warning("store.observer_failed", run_id=tx.run.run_id, error=repr(e)[:300])

    def get_run(self, run_id: str) -> RunInfo:
        raise NotImplementedError

    def get_head(self, run_id: str) -> RunHead:
        raise NotImplementedError

    def event_hash_at(self, run_id: str, sequence: int) -> str | None:
        raise NotImplementedError

    def write(self, run_id: str) -> AbstractContextManager[CoreTx]:
        raise NotImplementedError

    def put_notice(self, run_id: str, notice: dict[str, Any]) -> None:
        """A notification about ``run_id`` that is not an event's, once per
        ``delivery_id`` (a verdict a server's watch found), in a write of its own."""
        with self.write(run_id) as tx:
            tx.put_notice(notice)

    def _event_rows(self, run_id: str, after: int, upto: int | None) -> Iterable[tuple[Any, ...]]:
        raise NotImplementedError

    def _action_rows(
        self, run_id: str, column: str | None, value: str | None
    ) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _checkpoint_rows(self, run_id: str, limit: int | None = None) -> list[tuple[Any, ...]]:
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
        return event_from_raw(
            self.append_raw(run_id, type, payload, source=source, causer_event_id=causer_event_id)
        )

    def append_raw(
        self,
        run_id: str,
        type: EventType | str,
        payload: dict[str, Any],
        *,
        source: Origin = Origin.DETERMINISTIC,
        causer_event_id: str | None = None,
    ) -> RawEvent:
        """``append_event``, the event as plain data (``RawEvent``): for a caller that
        needs no model (the hooks' effect path)."""
        if not isinstance(payload, dict):
            raise UsageError(
                "event payload must be a JSON object", code="usage.bad_payload", hint="pass a dict"
            )
        # refuse NaN / non-JSON, too deep or too large, before taking the write lock
        text = canonical_json(payload)
        check_entry(payload, text, f"this {type} event")
        check_payload(str(type), payload)
        refuse_marker(str(type))
        # The text checked here is the text stored, unless the event also feeds the approval
        # index or the outbox: those read the payload itself, so it is encoded again under
        # the lock, where the stored text and those rows see the same dict.
        checked = None if type in DERIVED_ROWS else text
        with self.write(run_id) as tx:
            return tx.append_raw(
                type, payload, source=source, causer_event_id=causer_event_id, checked_text=checked
            )

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
        run = self.get_head(run_id)
        head = run.head_sequence if upto is None else min(upto, run.head_sequence)
        if prev_hash is None and after > 0:
            prev_hash = self.event_hash_at(run_id, after)
            if prev_hash is None:  # not in the live log: maybe archived
                prev_hash = self._archived_link(run_id, after)
        rows: Iterable[tuple[Any, ...]] = self._event_rows(run_id, after, head)
        if after < head:
            rows = self._live_from(run_id, rows, after)
        yield from verified_raw(run_id, rows, after=after, prev_hash=prev_hash, head=head)

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

    def stored_checkpoints(
        self, run_id: str, *, limit: int | None = None
    ) -> list[StoredCheckpoint]:
        """``list_checkpoints`` as plain data (newest first; the newest ``limit`` only
        when it is not None), for a reader that needs no model (the hooks' effect path)."""
        return [stored_checkpoint(r) for r in self._checkpoint_rows(run_id, limit)]

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
        self.get_head(run_id)  # a missing run is not an empty one
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

"""The write transaction on one run, shared by both backends (``CoreTx``): sealing the
next event and the head move that goes with it, the index look-ups, and the row values a
backend's statements write. A backend subclass supplies only the statements."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from continuum.errors import (
    UsageError,
)
from continuum.eventlog.archived import archive_base_of
from continuum.eventlog.canonical import (
    canonical_bytes,
    canonical_json,
    canonical_json_parsed,
)
from continuum.eventlog.events import (
    LIFECYCLE_STATUS,
    EventLike,
    EventType,
    RawEvent,
    row_hash,
)
from continuum.eventlog.limits import check_entry
from continuum.eventlog.notices import NOTIFYING, notice_for
from continuum.eventlog.payloads import check_payload
from continuum.state.projection import APPROVAL_TYPES, apply_approval_event
from continuum.store.approval_outbox import approval_from_row
from continuum.store.base import (
    ActionRow,
    RunHead,
)
from continuum.store.rows import (
    action_from_row,
    event_from_raw,
)
from continuum.types import Origin, RunStatus

if TYPE_CHECKING:
    from continuum.eventlog.event_model import Event
    from continuum.store.models import ApprovalRow, CheckpointRow, RunInfo

# Event types whose write also writes rows derived from the payload (the approval index,
# the outbox): their text is encoded under the lock, beside those rows.
DERIVED_ROWS = frozenset(APPROVAL_TYPES) | frozenset(NOTIFYING)


def new_event_id() -> str:
    """``evt_`` and ``uuid.uuid4().hex`` (16 random bytes, version 4, the RFC 4122
    variant), without loading ``uuid`` on the hot path (a test checks the form)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    return "evt_" + raw.hex()


class CoreTx:
    """The write transaction the ledger and runtime work through (``WriteTx``).

    Sealing, the head move and the index look-ups are here; a backend subclass supplies the
    statements: ``_insert_event``, ``_move_head``, ``_action_row``, ``_put_action``,
    ``_put_checkpoint``.
    """

    def __init__(self, head: RunHead, clock: Callable[[], str]) -> None:
        self._head, self._clock = head, clock
        self._opened_at, self._opened_hash = head.head_sequence, head.head_hash
        # What this transaction sealed, with each payload's canonical text: the store
        # keeps it once committed (``own_writes.py``).
        self.sealed: list[tuple[RawEvent, str]] = []
        self._run: RunInfo | None = None
        self.last_event: RawEvent | None = None

    @property
    def head(self) -> RunHead:
        """The run as this transaction sees it, as plain data (what the hot path reads)."""
        return self._head

    @property
    def run(self) -> RunInfo:
        """The run as this transaction sees it (the model, built on first use from the
        head, whose fields ``rows.run_head`` checked)."""
        if self._run is None:
            from continuum.store.models import RunInfo

            self._run = RunInfo.model_construct(**self._head._asdict())
        return self._run

    def append(
        self,
        type: EventType | str,
        payload: dict[str, Any],
        *,
        source: Origin,
        causer_event_id: str | None = None,
    ) -> Event:
        """``append_raw``, as the API's model."""
        return event_from_raw(
            self.append_raw(type, payload, source=source, causer_event_id=causer_event_id)
        )

    def append_raw(
        self,
        type: EventType | str,
        payload: dict[str, Any],
        *,
        source: Origin,
        causer_event_id: str | None = None,
        checked_text: str | None = None,
        keys_checked: bool = False,
    ) -> RawEvent:
        """Seal and write the next event of the run. The payload is encoded once: that text
        is both hashed (``row_hash``) and stored; the event is plain data (``RawEvent``),
        every field ours or checked here. ``checked_text``: the payload's canonical text
        from a caller that already ran these checks on it (``CoreStore.append_raw``, before
        taking the lock): not encoded and checked twice; that caller's payload must not
        change meanwhile, and a type in ``DERIVED_ROWS`` (whose index and outbox rows read
        the payload itself) is never given one. ``keys_checked``: every key of the
        payload (at any depth) is a string and every value one ``canonical_json``
        accepts, by construction (the ledger's own fields around values it checked):
        encoded without the walk over its keys; its known form and limits still checked."""
        type_ = str(type)
        head, origin = self._head, Origin(source)
        if checked_text is None:
            check_payload(type_, payload)  # a malformed known payload is refused, not stored
            payload_text = (
                canonical_json_parsed(payload) if keys_checked else canonical_json(payload)
            )
            check_entry(payload, payload_text, f"this {type_} event")  # limits.py: depth, size
        else:
            payload_text = checked_text
        if causer_event_id is not None and not isinstance(causer_event_id, str):
            raise UsageError(
                "causer_event_id must be an event id (a string)",
                code="usage.bad_payload",
                hint="pass the event_id of an event",
            )
        event_id, sequence = new_event_id(), head.head_sequence + 1
        timestamp = self._clock()
        try:
            hash_ = row_hash(
                event_id=event_id,
                run_id=head.run_id,
                sequence=sequence,
                type=type_,
                timestamp=timestamp,
                payload_text=payload_text,
                causer_event_id=causer_event_id,
                source=origin.value,
                prev_hash=head.head_hash,
            )
        except UnicodeEncodeError:  # a lone surrogate: the checked path raises its error
            canonical_bytes(payload)
            raise UsageError(
                "a string holds a lone surrogate, which UTF-8 cannot encode",
                code="usage.not_utf8",
                hint="send valid Unicode text (no unpaired \\ud800-\\udfff escapes)",
            ) from None
        event = RawEvent(
            event_id,
            head.run_id,
            sequence,
            type_,
            timestamp,
            payload,
            causer_event_id,
            origin,
            head.head_hash,
            hash_,
        )
        status = LIFECYCLE_STATUS.get(type_)  # type: ignore[call-overload]
        new_status = RunStatus(status) if status else head.status
        self._insert_event(event, payload_text)
        self._move_head(head.run_id, sequence, hash_, new_status)
        # The approval index and the outbox move with the event, on every write path.
        if type_ in APPROVAL_TYPES:
            self._index_approval(event)
        if type_ in NOTIFYING:
            self._notify(event)
        self._head = head._replace(head_sequence=sequence, head_hash=hash_, status=new_status)
        self._run = None
        self.last_event = event
        self.sealed.append((event, payload_text))
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

    def actions(self) -> list[ActionRow]:
        """Every action of the run as this transaction sees it (the run-wide retry cap)."""
        return [action_from_row(row) for row in self._all_action_rows()]

    def actions_of(
        self, scope: str, run_ids: Sequence[str], listed_at: Sequence[int] = ()
    ) -> list[ActionRow]:
        """Every action of ``run_ids`` (a family under ``scope``'s budget) and of every
        run started under one of them since it was listed (``listed_at``: each one's head
        then; a run listed without one is read from its start), read after taking
        ``scope``'s write lock: a child's start writes to its parent under that lock, and
        two runs of the family judged against it are serialized (a backend whose write
        transactions are exclusive has nothing to take)."""
        self._lock_scope(scope)
        heads = dict(zip(run_ids, listed_at, strict=False))
        known = list(dict.fromkeys(run_ids))
        queue = [(r, heads.get(r, 0)) for r in known]
        while queue and len(known) <= 10_000:
            run_id, after = queue.pop()
            for text in self._payloads_after(run_id, after, str(EventType.CHILD_STARTED)):
                payload = json.loads(text)
                child = payload.get("child_run_id") if isinstance(payload, dict) else None
                if isinstance(child, str) and child not in known:
                    known.append(child)
                    queue.append((child, 0))
        out: list[ActionRow] = []
        for run_id in known:
            out += [action_from_row(row) for row in self._all_action_rows(run_id)]
        return out

    def put_checkpoint(self, row: CheckpointRow) -> None:
        self._put_checkpoint(row)

    def drop_archived(self, marker: EventLike) -> tuple[int, int]:
        """Remove the events the archive ``marker`` (appended in this transaction) names,
        and the checkpoints they sealed: (events, checkpoints) removed. Only
        ``archive.archive_run`` calls it, once the archive file is written, fsynced and
        verified; without such a marker nothing is removed."""
        base = archive_base_of(marker) if marker.run_id == self._head.run_id else None
        if base is None or marker.sequence <= self._opened_at:
            raise UsageError(
                "events are removed from the live log only with the archive "
                "marker that names them, in the same transaction",
                code="usage.no_archive_marker",
                hint="use `continuum archive`; nothing was removed",
            )
        return self._drop_prefix(self._head.run_id, base.through + 1)

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

    def _index_approval(self, event: RawEvent) -> None:
        found = self.find_approval(approval_id=event.payload["approval_id"])
        record = apply_approval_event(found.record if found is not None else None, event)
        if record is not None:
            from continuum.store.models import ApprovalRow

            self._put_approval(
                ApprovalRow(run_id=event.run_id, approval_id=record["id"], record=record)
            )

    def _notify(self, event: RawEvent) -> None:
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

    def _insert_event(self, event: EventLike, payload_text: str) -> None:
        raise NotImplementedError

    def _move_head(self, run_id: str, sequence: int, hash_: str, status: RunStatus) -> None:
        raise NotImplementedError

    def _action_row(self, column: str, value: str) -> tuple[Any, ...] | None:
        raise NotImplementedError

    def _all_action_rows(self, run_id: str | None = None) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _payloads_after(self, run_id: str, after: int, type_: str) -> list[str]:
        """The payload texts of ``run_id``'s events of ``type_`` after sequence ``after``."""
        raise NotImplementedError

    def _lock_scope(self, run_id: str) -> None:
        """Take ``run_id``'s write lock for the rest of this transaction (if it has one)."""

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

    def _outbox_has(self, delivery_id: str) -> bool:
        raise NotImplementedError

    def put_notice(self, notice: dict[str, Any]) -> None:
        """A notification that is not an event's (a limit reached), in this transaction;
        once: a notification already in the outbox (same ``delivery_id``) is left as is."""
        if not self._outbox_has(notice["delivery_id"]):
            self._put_outbox(notice)


def event_values(event: EventLike, payload_text: str | None = None) -> tuple[Any, ...]:
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

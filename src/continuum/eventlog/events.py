"""The event types, ``RawEvent`` and the chain hash (pure; no pydantic: ``Event``, the
model for the API edge, is ``event_model.py``, loaded on first use).

An event is a past-tense fact about one run. ``hash`` is SHA-256 over the canonical
JSON of every other field, ``prev_hash`` included, so each event seals the chain
before it (references/contract.md §3).
"""

from __future__ import annotations

from enum import StrEnum
from json.encoder import encode_basestring as _json_string
from typing import Any, NamedTuple, Protocol

import continuum.digest as _digest
from continuum.eventlog.canonical import digest
from continuum.types import Origin


class EventType(StrEnum):
    """The event types continuum understands (``continuum event-types`` lists them).

    ``Event.type`` is one of these members when the stored type is known (so
    ``event.type is EventType.RUN_STARTED`` works), else the stored string; either way it
    equals its string value, which is what is hashed and stored.
    """

    # run lifecycle
    RUN_STARTED = "run_started"
    RUN_COMPLETED = "run_completed"
    RUN_ABORTED = "run_aborted"
    GOAL_SET = "goal_set"
    # a child run (a subagent's) was started under this one: its id (run families)
    CHILD_STARTED = "child_started"
    # a note for the next session (a reset with a handoff): the briefing shows it first
    HANDOFF_RECORDED = "handoff_recorded"
    # the run's limits in USD and tokens (raising them is a person's act)
    BUDGET_SET = "budget_set"
    # task progress and work items
    PROGRESS_RECORDED = "progress_recorded"
    PLAN_SET = "plan_set"
    WORK_ADDED = "work_added"
    WORK_COMPLETED = "work_completed"
    WORK_FAILED = "work_failed"
    # decisions, evidence, findings
    DECISION_CREATED = "decision_created"
    DECISION_INVALIDATED = "decision_invalidated"
    EVIDENCE_ADDED = "evidence_added"
    FINDING_ADDED = "finding_added"
    FINDING_INVALIDATED = "finding_invalidated"
    # environment
    DEPENDENCY_DECLARED = "dependency_declared"
    ENVIRONMENT_CHANGED = "environment_changed"
    VALIDATION_RECORDED = "validation_recorded"
    # observations with their signals, and plan branches gated on them
    PERCEPTION_OBSERVED = "perception_observed"
    BRANCH_RESOLVED = "branch_resolved"
    # approvals
    APPROVAL_REQUESTED = "approval_requested"
    APPROVAL_GRANTED = "approval_granted"
    APPROVAL_DENIED = "approval_denied"
    APPROVAL_REVOKED = "approval_revoked"
    # models
    MODEL_CHANGED = "model_changed"
    MODEL_ASSUMPTION_RECORDED = "model_assumption_recorded"
    # checkpoints, recovery, review
    CHECKPOINTED = "checkpointed"
    RECOVERY_STARTED = "recovery_started"
    RECOVERY_COMPLETED = "recovery_completed"
    RECOVERY_BLOCKED = "recovery_blocked"
    REVIEW_CONFIRMED = "review_confirmed"
    # a person accepted the hooks' effect registry as it is (continuum hooks accept)
    REGISTRY_ACCEPTED = "registry_accepted"
    # long-lived stores: the events before this one were moved to an archive file
    HISTORY_ARCHIVED = "history_archived"
    # an import: the events before this one came in a file no key this store trusts signed,
    # so what their human or deterministic origin decided counts as imported (transfer.py)
    HISTORY_IMPORTED = "history_imported"
    # a fork: this run began as a copy of another run's events 1..through_sequence (fork.py)
    RUN_FORKED = "run_forked"
    # action ledger transitions
    ACTION_INTERCEPTED = "action_intercepted"
    ACTION_RETRIED = "action_retried"
    ACTION_COMPLETED = "action_completed"
    ACTION_FAILED = "action_failed"
    ACTION_MARKED_UNKNOWN = "action_marked_unknown"
    ACTION_RECONCILED = "action_reconciled"
    ACTION_COMPENSATED = "action_compensated"


_KNOWN_TYPES: dict[str, EventType] = {t.value: t for t in EventType}


def known_type(value: str) -> EventType | str:
    """The ``EventType`` member for a known type string, else the string itself (cheap:
    one dict look-up, for the stores' hot paths). The hash is unaffected: a member is
    hashed as its string value."""
    return _KNOWN_TYPES.get(value, value)


LIFECYCLE_STATUS = {
    EventType.RUN_COMPLETED: "completed",
    EventType.RUN_ABORTED: "aborted",
}


class RawEvent(NamedTuple):
    """An event as read from a store for verifying and folding: plain data, no model
    validation (the pydantic ``Event`` is for the API edge). Same fields, same meaning."""

    event_id: str
    run_id: str
    sequence: int
    type: str
    timestamp: str
    payload: dict[str, Any]
    causer_event_id: str | None
    source: Origin
    prev_hash: str | None
    hash: str


class EventLike(Protocol):
    """What the fold and the chain verifier read of an event (``Event`` or ``RawEvent``)."""

    @property
    def event_id(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def sequence(self) -> int: ...
    @property
    def type(self) -> str: ...
    @property
    def timestamp(self) -> str: ...
    @property
    def payload(self) -> dict[str, Any]: ...
    @property
    def causer_event_id(self) -> str | None: ...
    @property
    def source(self) -> Origin: ...
    @property
    def prev_hash(self) -> str | None: ...
    @property
    def hash(self) -> str: ...


def row_hash(
    *,
    event_id: str,
    run_id: str,
    sequence: int,
    type: str,
    timestamp: str,
    payload_text: str,
    causer_event_id: str | None,
    source: str,
    prev_hash: str | None,
) -> str:
    """The hash of a stored row: SHA-256 of the canonical JSON of its hashed fields with the
    stored payload text as the payload's encoding.

    Every writer stores the payload's canonical JSON, so for an intact row this is exactly
    ``Event.computed_hash``; a payload text rewritten in any way (even into an equivalent
    form) no longer matches the hash it was sealed with. The hashed fields' keys in sorted
    order, each value as ``json`` encodes it: no re-encoding of the payload.
    """
    text = (
        f'{{"causer_event_id":{_json_or_null(causer_event_id)}'
        f',"event_id":{_json_string(event_id)},"payload":{payload_text}'
        f',"prev_hash":{_json_or_null(prev_hash)}'
        f',"run_id":{_json_string(run_id)},"sequence":{int.__repr__(sequence)}'
        f',"source":{_json_string(source)}'
        f',"timestamp":{_json_string(timestamp)},"type":{_json_string(type)}}}'
    )
    hexdigest: str = _digest.sha256(text.encode("utf-8")).hexdigest()
    return hexdigest


def raw_hash(event: RawEvent, payload_text: str) -> str:
    """``row_hash`` of a row ``raw_from_row`` already checked (every hashed field a str,
    the sequence an int): positional, no checks, for the verify loop's intact path. Raises
    ``UnicodeEncodeError`` on a lone surrogate (the caller takes the checked path)."""
    causer, prev = event.causer_event_id, event.prev_hash
    text = (
        f'{{"causer_event_id":{"null" if causer is None else _json_string(causer)}'
        f',"event_id":{_json_string(event.event_id)},"payload":{payload_text}'
        f',"prev_hash":{"null" if prev is None else _json_string(prev)}'
        f',"run_id":{_json_string(event.run_id)},"sequence":{int.__repr__(event.sequence)}'
        f',"source":{_json_string(event.source.value)}'
        f',"timestamp":{_json_string(event.timestamp)},"type":{_json_string(event.type)}}}'
    )
    hexdigest: str = _digest.sha256(text.encode("utf-8")).hexdigest()
    return hexdigest


def event_hash(event: EventLike) -> str:
    """SHA-256 of the canonical JSON of every field but ``hash`` (the definition)."""
    return digest(
        hashed_fields(
            event_id=event.event_id,
            run_id=event.run_id,
            sequence=event.sequence,
            type=event.type,
            timestamp=event.timestamp,
            payload=event.payload,
            causer_event_id=event.causer_event_id,
            source=str(event.source),
            prev_hash=event.prev_hash,
        )
    )


def stored_event_hash(event: EventLike, payload_text: str) -> str:
    """``row_hash`` of an event a store decoded from ``payload_text``.

    Equal to ``event.computed_hash()`` when the text is the payload's canonical JSON (what
    every backend stores); a text that is not (a rewritten row) gives another hash, so the
    row fails verification. A field of an unusual type (a damaged row) falls back to the
    canonical hash of the parsed event, or its error.
    """
    if type(event.sequence) is int and all(
        type(v) is str
        for v in (event.event_id, event.run_id, event.type, event.timestamp, payload_text)
    ):
        try:
            return row_hash(
                event_id=event.event_id,
                run_id=event.run_id,
                sequence=event.sequence,
                type=event.type,
                timestamp=event.timestamp,
                payload_text=payload_text,
                causer_event_id=event.causer_event_id,
                source=str(event.source),
                prev_hash=event.prev_hash,
            )
        except (TypeError, UnicodeEncodeError):
            pass
    return event_hash(event)


def _json_or_null(value: str | None) -> str:
    return "null" if value is None else _json_string(value)


def hashed_fields(
    *,
    event_id: str,
    run_id: str,
    sequence: int,
    type: str,
    timestamp: str,
    payload: dict[str, Any],
    causer_event_id: str | None,
    source: str,
    prev_hash: str | None,
) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "run_id": run_id,
        "sequence": sequence,
        "type": type,
        "timestamp": timestamp,
        "payload": payload,
        "causer_event_id": causer_event_id,
        "source": source,
        "prev_hash": prev_hash,
    }

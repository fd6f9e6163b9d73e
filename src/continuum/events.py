"""The event model and its types (pure).

An event is a past-tense fact about one run. ``hash`` is SHA-256 over the canonical
JSON of every other field, ``prev_hash`` included, so each event seals the chain
before it (SPEC 3).
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from json.encoder import encode_basestring as _json_string
from typing import Any

from pydantic import BaseModel, ConfigDict

from continuum.canonical import canonical_json_parsed, digest
from continuum.types import Origin


class EventType(StrEnum):
    # run lifecycle
    RUN_STARTED = "run_started"
    RUN_COMPLETED = "run_completed"
    RUN_ABORTED = "run_aborted"
    GOAL_SET = "goal_set"
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
    # approvals
    APPROVAL_REQUESTED = "approval_requested"
    APPROVAL_GRANTED = "approval_granted"
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
    # action ledger transitions
    ACTION_INTERCEPTED = "action_intercepted"
    ACTION_RETRIED = "action_retried"
    ACTION_COMPLETED = "action_completed"
    ACTION_FAILED = "action_failed"
    ACTION_MARKED_UNKNOWN = "action_marked_unknown"
    ACTION_RECONCILED = "action_reconciled"
    ACTION_COMPENSATED = "action_compensated"


LIFECYCLE_STATUS = {
    EventType.RUN_COMPLETED: "completed",
    EventType.RUN_ABORTED: "aborted",
}


class Event(BaseModel):
    """A sealed event as stored: immutable once built."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_id: str
    run_id: str
    sequence: int
    type: str
    timestamp: str
    payload: dict[str, Any]
    causer_event_id: str | None = None
    source: Origin
    prev_hash: str | None
    hash: str

    def hashed_fields(self) -> dict[str, Any]:
        return hashed_fields(
            event_id=self.event_id,
            run_id=self.run_id,
            sequence=self.sequence,
            type=self.type,
            timestamp=self.timestamp,
            payload=self.payload,
            causer_event_id=self.causer_event_id,
            source=str(self.source),
            prev_hash=self.prev_hash,
        )

    def computed_hash(self) -> str:
        return digest(self.hashed_fields())


def stored_event_hash(event: Event, payload_text: str) -> str:
    """``event.computed_hash()`` for an event a store decoded, its payload parsed from
    ``payload_text``.

    The hashed fields encode as one JSON object with fixed keys, so when ``payload_text``
    is the canonical JSON of the payload (what every backend stores) the canonical form is
    those keys with the stored text spliced in: no re-encoding of the whole event, and no
    key check (a payload parsed from JSON has string keys only). Anything else (a stored
    text that is not canonical, a number canonical JSON refuses, a field of an unusual
    type) takes ``computed_hash`` itself, so the result, hash or error, is always exactly
    that of ``computed_hash``.
    """
    try:
        if type(event.sequence) is int and canonical_json_parsed(event.payload) == payload_text:
            # The keys of hashed_fields() in sorted order, each value as json encodes it.
            text = (
                f'{{"causer_event_id":{_json_or_null(event.causer_event_id)}'
                f',"event_id":{_json_string(event.event_id)},"payload":{payload_text}'
                f',"prev_hash":{_json_or_null(event.prev_hash)}'
                f',"run_id":{_json_string(event.run_id)},"sequence":{int.__repr__(event.sequence)}'
                f',"source":{_json_string(str(event.source))}'
                f',"timestamp":{_json_string(event.timestamp)},"type":{_json_string(event.type)}}}'
            )
            return hashlib.sha256(text.encode("utf-8")).hexdigest()
    except Exception:  # whatever it was, the general path decides
        pass
    return event.computed_hash()


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


def seal(
    *,
    event_id: str,
    run_id: str,
    sequence: int,
    type: str,
    timestamp: str,
    payload: dict[str, Any],
    causer_event_id: str | None,
    source: Origin,
    prev_hash: str | None,
) -> Event:
    """Build an event and compute its hash over every other field."""
    fields = hashed_fields(
        event_id=event_id,
        run_id=run_id,
        sequence=sequence,
        type=type,
        timestamp=timestamp,
        payload=payload,
        causer_event_id=causer_event_id,
        source=str(source),
        prev_hash=prev_hash,
    )
    return Event(**fields, hash=digest(fields))

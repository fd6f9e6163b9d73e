"""What continuum's events say as OpenTelemetry spans (pure: events in, descriptions out).

No SDK here, no store, no clock: ``otel.py`` turns a ``SpanDescription`` into an SDK span
and exports it; ``observer.py`` reads the events a commit added and calls these builders.

Ids are derived, never drawn: the trace id from the run id, the run span's id from the
run id, an effect span's id from the event that opened the attempt. So the intercept
written by one process and the settlement written by another after a crash land in one
trace, under one parent, and a span re-sent after a retry has the same id.

Attribute values are bounded and escaped (``clean``): an agent chose the action key and
type, and a control character or a megabyte of text must not reach a tracing backend as
itself. Arguments and results are never put in attributes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from continuum.eventlog.events import EventLike, EventType
from continuum.untrusted import terminal_safe

AttrValue = str | bool | int | float | tuple[str, ...]
Status = Literal["unset", "ok", "error"]

MAX_ID_CHARS = 256  # run ids, action keys and types, action ids
MAX_TEXT_CHARS = 1024  # reasons, notes, rationales
MAX_LIST_ITEMS = 20  # required actions, uncertain actions as span events

# The outcome each settling event gives an effect (``continuum.action.outcome``).
SETTLING: dict[str, str] = {
    EventType.ACTION_COMPLETED: "completed",
    EventType.ACTION_FAILED: "failed",
    EventType.ACTION_MARKED_UNKNOWN: "unknown",
    EventType.ACTION_RECONCILED: "reconciled",
    EventType.ACTION_COMPENSATED: "compensated",
}
OPENING = frozenset({str(EventType.ACTION_INTERCEPTED), str(EventType.ACTION_RETRIED)})
FINISHING = frozenset({str(EventType.RUN_COMPLETED), str(EventType.RUN_ABORTED)})
RECOVERY = frozenset(
    {
        str(EventType.RECOVERY_STARTED),
        str(EventType.RECOVERY_COMPLETED),
        str(EventType.RECOVERY_BLOCKED),
    }
)
UNKNOWN_EXCEPTION = "continuum.outcome_unknown"


@dataclass(frozen=True)
class SpanEvent:
    name: str
    time_ns: int
    attributes: dict[str, AttrValue] = field(default_factory=dict)


@dataclass(frozen=True)
class SpanDescription:
    """One finished span, ready to export (``otel.to_readable`` builds the SDK's)."""

    name: str
    trace_id: int
    span_id: int
    parent_span_id: int | None
    start_ns: int
    end_ns: int
    attributes: dict[str, AttrValue]
    status: Status = "unset"
    status_description: str | None = None
    events: tuple[SpanEvent, ...] = ()


# -- ids and values -----------------------------------------------------------------------


def _digest(label: str, value: str, size: int) -> int:
    raw = hashlib.sha256(f"continuum.{label}\0{value}".encode()).digest()[:size]
    return int.from_bytes(raw, "big") or 1  # zero is the invalid id


def trace_id_of(run_id: str) -> int:
    """The run's trace id (128 bits), the same in every process."""
    return _digest("trace", run_id, 16)


def run_span_id(run_id: str) -> int:
    """The run span's id (64 bits): every other span of the run names it as parent."""
    return _digest("run", run_id, 8)


def span_id_of(event_id: str) -> int:
    """The id of the span an event opened (64 bits)."""
    return _digest("span", event_id, 8)


def clean(value: Any, limit: int = MAX_ID_CHARS) -> str:
    """``value`` as text safe for an attribute: control, bidi and zero-width characters
    shown as escapes, at most ``limit`` characters."""
    text = terminal_safe(value if isinstance(value, str) else str(value))
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def time_ns(timestamp: str) -> int:
    """An event's timestamp (``2026-01-02T03:04:05.123456Z``) in nanoseconds since 1970."""
    moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) * 1000


def _run_attributes(event: EventLike) -> dict[str, AttrValue]:
    return {"continuum.run.id": clean(event.run_id), "continuum.sequence": event.sequence}


# -- the builders -------------------------------------------------------------------------


def run_span(started: EventLike | None, finished: EventLike, created_at: str) -> SpanDescription:
    """The run, from ``run_started`` (or the run's creation, when that event was archived)
    to ``run_completed``/``run_aborted``: OK, or ERROR with the abort reason."""
    aborted = finished.type == EventType.RUN_ABORTED
    reason = finished.payload.get("reason")
    attributes = {
        **_run_attributes(finished),
        "continuum.run.status": "aborted" if aborted else "completed",
    }
    if started is not None and isinstance(started.payload.get("parent"), str):
        attributes["continuum.run.parent"] = clean(started.payload["parent"])
    return SpanDescription(
        name="continuum.run",
        trace_id=trace_id_of(finished.run_id),
        span_id=run_span_id(finished.run_id),
        parent_span_id=None,
        start_ns=time_ns(started.timestamp if started is not None else created_at),
        end_ns=time_ns(finished.timestamp),
        attributes=attributes,
        status="error" if aborted else "ok",
        status_description=clean(reason, MAX_TEXT_CHARS)
        if aborted and isinstance(reason, str)
        else ("aborted" if aborted else None),
    )


@dataclass(frozen=True)
class Action:
    """What the span of an effect says about its action (from the ledger's record)."""

    action_id: str
    action_key: str
    action_type: str
    attempt: int


def _action_attributes(action: Action, opening: EventLike) -> dict[str, AttrValue]:
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": clean(action.action_type),
        "gen_ai.tool.call.id": clean(action.action_id),
        "continuum.run.id": clean(opening.run_id),
        "continuum.action.id": clean(action.action_id),
        "continuum.action.key": clean(action.action_key),
        "continuum.action.type": clean(action.action_type),
        "continuum.action.attempt": action.attempt,
        "continuum.intercept.sequence": opening.sequence,
    }


def effect_span(action: Action, opening: EventLike, settled: EventLike) -> SpanDescription:
    """One attempt of an effect, from its intercept (or retry) to the event that first
    settled it. ``completed`` is OK; ``failed`` is ERROR with the error; ``unknown`` is
    ERROR with an ``exception`` event of type ``continuum.outcome_unknown``."""
    outcome = SETTLING[str(settled.type)]
    payload = settled.payload
    attributes = {
        **_action_attributes(action, opening),
        "continuum.sequence": settled.sequence,
        "continuum.action.outcome": outcome,
        "continuum.settled_by": clean(getattr(settled, "source", "unknown")),
    }
    status: Status = "ok"
    description: str | None = None
    events: tuple[SpanEvent, ...] = ()
    if outcome == "failed":
        status, description = "error", clean(payload.get("error") or "failed", MAX_TEXT_CHARS)
        attributes["error.type"] = "continuum.action_failed"
    elif outcome == "unknown":
        reason = clean(payload.get("reason") or "outcome uncertain", MAX_TEXT_CHARS)
        status, description = "error", f"outcome unknown: {reason}"
        attributes["error.type"] = UNKNOWN_EXCEPTION
        events = (
            SpanEvent(
                "exception",
                time_ns(settled.timestamp),
                {
                    "exception.type": UNKNOWN_EXCEPTION,
                    "exception.message": f"the outcome of action {clean(action.action_key)} "
                    f"is unknown ({reason}); a person must reconcile it",
                },
            ),
        )
    elif outcome == "reconciled":
        occurred = payload.get("occurred") is True
        attributes["continuum.reconciled.occurred"] = occurred
        if not occurred:
            status, description = "error", "reconciled: the effect did not happen"
            attributes["error.type"] = "continuum.did_not_happen"
    return SpanDescription(
        name=f"execute_tool {clean(action.action_type)}",
        trace_id=trace_id_of(opening.run_id),
        span_id=span_id_of(opening.event_id),
        parent_span_id=run_span_id(opening.run_id),
        start_ns=time_ns(opening.timestamp),
        end_ns=max(time_ns(settled.timestamp), time_ns(opening.timestamp)),
        attributes=attributes,
        status=status,
        status_description=description,
        events=events,
    )


def later_settlement_span(
    action: Action, opening: EventLike, settled: EventLike, earlier: str
) -> SpanDescription:
    """A settlement after the attempt's first one (reconciling an unknown effect, undoing a
    completed one): a short span under the effect's span, which is already exported."""
    outcome = SETTLING[str(settled.type)]
    verb = {"reconciled": "reconcile", "compensated": "compensate"}.get(outcome, "settle")
    attributes = {
        **_action_attributes(action, opening),
        "gen_ai.operation.name": f"continuum.{verb}",
        "continuum.sequence": settled.sequence,
        "continuum.action.outcome": outcome,
        "continuum.action.previous_outcome": earlier,
        "continuum.settled_by": clean(getattr(settled, "source", "unknown")),
    }
    if outcome == "reconciled":
        attributes["continuum.reconciled.occurred"] = settled.payload.get("occurred") is True
    at = time_ns(settled.timestamp)
    return SpanDescription(
        name=f"continuum.{verb} {clean(action.action_type)}",
        trace_id=trace_id_of(opening.run_id),
        span_id=span_id_of(settled.event_id),
        parent_span_id=span_id_of(opening.event_id),
        start_ns=at,
        end_ns=at,
        attributes=attributes,
        status="error" if outcome == "failed" else "ok",
    )


def recovery_event_span(event: EventLike) -> SpanDescription:
    """A recorded recovery step (``recovery_started``/``_completed``/``_blocked``)."""
    at = time_ns(event.timestamp)
    attributes: dict[str, AttrValue] = {
        **_run_attributes(event),
        "continuum.event.type": str(event.type),
    }
    for name in ("verdict", "mode", "reason"):
        value = event.payload.get(name)
        if isinstance(value, str):
            attributes[f"continuum.recovery.{name}"] = clean(value, MAX_TEXT_CHARS)
    blocked = event.type == EventType.RECOVERY_BLOCKED
    return SpanDescription(
        name="continuum.recovery",
        trace_id=trace_id_of(event.run_id),
        span_id=span_id_of(event.event_id),
        parent_span_id=run_span_id(event.run_id),
        start_ns=at,
        end_ns=at,
        attributes=attributes,
        status="error" if blocked else "unset",
        status_description="recovery blocked" if blocked else None,
    )


@dataclass(frozen=True)
class Verdict:
    """What ``resume`` answered, as a span reports it (from a ``Recovery``)."""

    run_id: str
    mode: str
    safe: bool
    next_allowed_action: str | None
    rationale: str
    required_actions: tuple[str, ...]
    uncertain: tuple[dict[str, Any], ...]
    head_sequence: int | None


def resume_span(verdict: Verdict, start_ns: int, end_ns: int, span_id: int) -> SpanDescription:
    """A recovery decision: the verdict, why, what is required next, and one
    ``continuum.uncertain_action`` event per action that may or may not have happened."""
    attributes: dict[str, AttrValue] = {
        "continuum.run.id": clean(verdict.run_id),
        "continuum.verdict": clean(verdict.mode),
        "continuum.safe": verdict.safe,
        "continuum.reason": clean(verdict.rationale, MAX_TEXT_CHARS),
        "continuum.required_actions": tuple(
            clean(a) for a in verdict.required_actions[:MAX_LIST_ITEMS]
        ),
        "continuum.uncertain_actions.count": len(verdict.uncertain),
    }
    if verdict.next_allowed_action is not None:
        attributes["continuum.next_allowed_action"] = clean(verdict.next_allowed_action)
    if verdict.head_sequence is not None:
        attributes["continuum.sequence"] = verdict.head_sequence
    events = tuple(
        SpanEvent(
            "continuum.uncertain_action",
            end_ns,
            {
                f"continuum.action.{name}": clean(a[k])
                for k, name in (
                    ("action_id", "id"),
                    ("action_key", "key"),
                    ("action_type", "type"),
                    ("status", "status"),
                )
                if a.get(k) is not None
            },
        )
        for a in verdict.uncertain[:MAX_LIST_ITEMS]
    )
    return SpanDescription(
        name="continuum.resume",
        trace_id=trace_id_of(verdict.run_id),
        span_id=span_id,
        parent_span_id=run_span_id(verdict.run_id),
        start_ns=start_ns,
        end_ns=max(end_ns, start_ns),
        attributes=attributes,
        events=events,
    )

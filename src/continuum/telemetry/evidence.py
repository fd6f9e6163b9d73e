"""The reverse path: ``gen_ai`` tool spans a framework exported, recorded as evidence.

A framework instrumented with the OpenTelemetry GenAI conventions says, in an
``execute_tool`` span, which tool ran (``gen_ai.tool.name``), under which call id
(``gen_ai.tool.call.id``) and how it ended (the span's status). ``record_tool_spans``
takes such spans (an OTLP/HTTP request body, protobuf or JSON, or already parsed
``ToolSpan``s), matches each to an action of the run and appends one ``evidence_added``
event per span, in one transaction.

A span is the agent's word: it is recorded with origin ``external_agent`` unless the
caller vouches for its source (``origin=Origin.DETERMINISTIC``: a collector you run). It
never settles an action. A span saying the tool succeeded does not complete an action,
and no span turns an unknown action into "did not happen": only a person may
(``continuum reconcile``). The evidence is shown with the action (``continuum history``,
the operator page) for that person to weigh.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from continuum.errors import NotFoundError, UsageError
from continuum.eventlog.events import EventType
from continuum.state.records import State
from continuum.store import Storage
from continuum.telemetry.spans import MAX_ID_CHARS, MAX_TEXT_CHARS, clean
from continuum.types import Origin

MAX_BODY_BYTES = 8 * 1024 * 1024  # one OTLP request
MAX_SPANS = 1000  # tool spans recorded from one request
_STATUS = {0: "unset", 1: "ok", 2: "error"}


@dataclass(frozen=True)
class ToolSpan:
    """What continuum reads of a received tool span (every value bounded and escaped)."""

    trace_id: str
    span_id: str
    name: str
    tool_name: str
    call_id: str | None
    status: str  # "ok", "error" or "unset"
    status_message: str | None
    start_ns: int
    end_ns: int
    attributes: dict[str, str] = field(default_factory=dict)  # the continuum.* ones


@dataclass(frozen=True)
class Recorded:
    """What ``record_tool_spans`` did: evidence ids written, spans already recorded, and
    tool spans that named no action of the run (not recorded)."""

    recorded: list[str]
    duplicates: list[str]
    unmatched: list[ToolSpan]


class _Facade(Protocol):  # a Continuum, without importing the layer above
    @property
    def store(self) -> Storage: ...

    def state(self, run_id: str) -> State: ...


# -- reading OTLP ------------------------------------------------------------------------


def _json_value(value: Any) -> Any:
    if not isinstance(value, dict):
        return None
    for kind in ("stringValue", "boolValue", "doubleValue"):
        if kind in value:
            return value[kind]
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            return None
    return None


def _from_parts(
    trace_id: str,
    span_id: str,
    name: str,
    attributes: dict[str, Any],
    status_code: int,
    status_message: str | None,
    start: Any,
    end: Any,
) -> ToolSpan | None:
    tool = attributes.get("gen_ai.tool.name")
    if not isinstance(tool, str) or not tool:
        return None  # not a tool span (a model call, an agent span): not evidence of an effect
    call_id = attributes.get("gen_ai.tool.call.id")
    ours = {
        k: clean(v)
        for k, v in attributes.items()
        if k in ("continuum.action.id", "continuum.action.key", "continuum.run.id")
        and isinstance(v, str)
    }
    try:
        start_ns, end_ns = int(start or 0), int(end or 0)
    except (TypeError, ValueError):
        start_ns = end_ns = 0
    return ToolSpan(
        trace_id=clean(trace_id, 64),
        span_id=clean(span_id, 32),
        name=clean(name),
        tool_name=clean(tool),
        call_id=clean(call_id) if isinstance(call_id, str) and call_id else None,
        status=_STATUS.get(status_code, "unset"),
        status_message=clean(status_message, MAX_TEXT_CHARS) if status_message else None,
        start_ns=start_ns,
        end_ns=end_ns,
        attributes=ours,
    )


def tool_spans_from_json(body: bytes | str | dict[str, Any]) -> list[ToolSpan]:
    """The tool spans of an OTLP/JSON ``ExportTraceServiceRequest`` (``resourceSpans``)."""
    data = json.loads(body) if isinstance(body, bytes | str) else body
    if not isinstance(data, dict) or not isinstance(data.get("resourceSpans"), list):
        raise _bad("the body is not an OTLP trace request (no resourceSpans)")
    out: list[ToolSpan] = []
    for resource in data["resourceSpans"]:
        for scope in (resource or {}).get("scopeSpans") or []:
            for span in (scope or {}).get("spans") or []:
                if not isinstance(span, dict):
                    continue
                attributes: dict[str, Any] = {}
                for a in span.get("attributes") or []:
                    if isinstance(a, dict) and isinstance(a.get("key"), str):
                        attributes[a["key"]] = _json_value(a.get("value"))
                status = span.get("status") or {}
                code = status.get("code", 0)
                if isinstance(code, str):  # the JSON mapping allows the enum's name
                    code = {"STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}.get(code, 0)
                found = _from_parts(
                    str(span.get("traceId", "")),
                    str(span.get("spanId", "")),
                    str(span.get("name", "")),
                    attributes,
                    int(code) if isinstance(code, int) else 0,
                    status.get("message") if isinstance(status.get("message"), str) else None,
                    span.get("startTimeUnixNano"),
                    span.get("endTimeUnixNano"),
                )
                if found is not None:
                    out.append(found)
    return out


def tool_spans_from_protobuf(body: bytes) -> list[ToolSpan]:
    """The tool spans of an OTLP/protobuf ``ExportTraceServiceRequest`` (the ``otel`` extra
    provides the decoder)."""
    try:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )
    except ModuleNotFoundError:
        raise UsageError(
            "reading OTLP protobuf needs the optional extra 'otel'",
            code="usage.telemetry_unavailable",
            hint="pip install 'continuum-recovery[otel]', or send OTLP/JSON",
        ) from None
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except Exception:  # protobuf's DecodeError (its module has no type stubs here)
        raise _bad("the body is not an OTLP/protobuf trace request") from None
    out: list[ToolSpan] = []
    for resource in request.resource_spans:
        for scope in resource.scope_spans:
            for span in scope.spans:
                attributes: dict[str, Any] = {}
                for a in span.attributes:
                    kind = a.value.WhichOneof("value")
                    if kind in ("string_value", "bool_value", "int_value", "double_value"):
                        attributes[a.key] = getattr(a.value, kind)
                found = _from_parts(
                    span.trace_id.hex(),
                    span.span_id.hex(),
                    span.name,
                    attributes,
                    int(span.status.code),
                    span.status.message or None,
                    span.start_time_unix_nano,
                    span.end_time_unix_nano,
                )
                if found is not None:
                    out.append(found)
    return out


def tool_spans(body: bytes, content_type: str = "application/x-protobuf") -> list[ToolSpan]:
    """The tool spans of an OTLP/HTTP request body, by its content type."""
    if len(body) > MAX_BODY_BYTES:
        raise _bad(f"the request is larger than {MAX_BODY_BYTES} bytes")
    if "json" in content_type.lower():
        try:
            return tool_spans_from_json(body)
        except (ValueError, UnicodeDecodeError):
            raise _bad("the body is not OTLP/JSON") from None
    return tool_spans_from_protobuf(body)


def _bad(message: str) -> UsageError:
    return UsageError(
        message,
        code="usage.bad_spans",
        hint="send an OTLP/HTTP ExportTraceServiceRequest (protobuf or JSON); nothing was written",
    )


# -- recording --------------------------------------------------------------------------


def _match(span: ToolSpan, ids: dict[str, str], action: str | None) -> str | None:
    """The action id ``span`` is evidence for: ``action`` when the caller names it, else
    the action its continuum attributes or its tool call id name."""
    if action is not None:
        return ids.get(action)
    for candidate in (
        span.attributes.get("continuum.action.id"),
        span.attributes.get("continuum.action.key"),
        span.call_id,
    ):
        if candidate is not None and candidate in ids:
            return ids[candidate]
    return None


def record_tool_spans(
    cx: _Facade,
    run_id: str,
    spans: list[ToolSpan],
    *,
    action: str | None = None,
    origin: Origin = Origin.EXTERNAL_AGENT,
) -> Recorded:
    """Record each tool span that names an action of ``run_id`` as evidence for it.

    ``action`` (an id or key): all ``spans`` are about that action. ``origin``: who
    vouches for the spans, ``external_agent`` by default; ``human`` is refused (a span is
    not a person's word). A span recorded before (same trace and span id) is not
    recorded again. Nothing here settles an action.
    Raises ``UsageError`` (``usage.bad_origin``, ``usage.bad_spans``) and
    ``NotFoundError`` (``not_found.run``, ``not_found.action``).
    """
    if Origin(origin) == Origin.HUMAN:
        raise UsageError(
            "a received span is not a person's word: it cannot be recorded as human",
            code="usage.bad_origin",
            hint="use origin external_agent, or deterministic for a collector you trust",
        )
    if len(spans) > MAX_SPANS:
        raise _bad(f"more than {MAX_SPANS} tool spans in one request")
    rows = cx.store.list_actions(run_id)
    ids = {r.action_id: r.action_id for r in rows}
    ids.update({str(r.record.get("action_key")): r.action_id for r in rows})
    if action is not None and action not in ids:
        raise NotFoundError(
            f"run {clean(run_id)!r} has no action {clean(action)!r}",
            code="not_found.action",
            hint=f"list actions with `continuum actions {clean(run_id)}`; nothing was written",
        )
    known = set(cx.state(run_id).evidence)
    events: list[tuple[EventType | str, dict[str, Any]]] = []
    recorded, duplicates, unmatched = [], [], []
    for span in spans:
        action_id = _match(span, ids, action)
        if action_id is None:
            unmatched.append(span)
            continue
        evidence_id = clean(f"otel:{span.trace_id}:{span.span_id}", MAX_ID_CHARS)
        if evidence_id in known:
            duplicates.append(evidence_id)
            continue
        known.add(evidence_id)
        payload: dict[str, Any] = {
            "evidence_id": evidence_id,
            "text": f"a framework's span says {span.tool_name} ended {span.status}"
            + (f": {span.status_message}" if span.status_message else "")
            + " (its word, not a settlement)",
            "action_id": action_id,
            "tool": span.tool_name,
            "tool_call_id": span.call_id,
            "outcome": span.status,
            "span": {
                "source": "otel",
                "trace_id": span.trace_id,
                "span_id": span.span_id,
                "name": span.name,
                "start_ns": span.start_ns,
                "end_ns": span.end_ns,
            },
        }
        events.append((EventType.EVIDENCE_ADDED, payload))
        recorded.append(evidence_id)
    if events:
        cx.store.append_events(run_id, events, source=Origin(origin))
    return Recorded(recorded=recorded, duplicates=duplicates, unmatched=unmatched)

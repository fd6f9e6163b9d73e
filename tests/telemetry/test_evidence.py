"""A framework's gen_ai tool spans, received over OTLP, recorded as evidence: the agent's
word, shown with the action, never a settlement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode

from continuum.errors import UsageError
from continuum.runtime.facade import Continuum
from continuum.telemetry.evidence import (
    record_tool_spans,
    tool_spans,
    tool_spans_from_json,
)
from continuum.types import ActionStatus, Origin
from tests.telemetry.receiver import OtlpReceiver


def _framework_export(receiver: OtlpReceiver, call_id: str, ok: bool = True) -> list[bytes]:
    """What an instrumented framework sends: a real SDK's execute_tool span, plus a model
    call span that is not a tool span, over OTLP/HTTP to the receiver."""
    provider = TracerProvider(resource=Resource.create({"service.name": "some-agent"}))
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{receiver.url}/v1/traces"))
    )
    tracer = provider.get_tracer("framework")
    with tracer.start_as_current_span("chat some-model") as chat:
        chat.set_attribute("gen_ai.operation.name", "chat")
        with tracer.start_as_current_span(
            "execute_tool send_invoice",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "send_invoice",
                "gen_ai.tool.call.id": call_id,
            },
        ) as tool:
            tool.set_status(Status(StatusCode.OK if ok else StatusCode.ERROR, None))
    provider.shutdown()
    receiver.wait_for(lambda s: len(s) == 2)
    return list(receiver.bodies)


@pytest.fixture
def unknown_action(tmp_path: Path) -> tuple[Continuum, str, str]:
    cx = Continuum.open(str(tmp_path / "ev.db"))
    cx.start_run("r", "send an invoice")
    r = cx.intercept("r", "send_invoice", {"invoice": "INV-1"}, key="INV-1")
    cx.fail("r", r.action_key, error="timed out; outcome uncertain")  # unknown
    return cx, r.action_key, r.action_id


def test_a_received_tool_span_is_evidence_not_a_settlement(
    receiver: OtlpReceiver, unknown_action: tuple[Continuum, str, str]
) -> None:
    cx, key, action_id = unknown_action
    with cx:
        bodies = _framework_export(receiver, call_id=key)
        spans = [s for body in bodies for s in tool_spans(body, "application/x-protobuf")]
        assert [s.tool_name for s in spans] == ["send_invoice"]  # the chat span is not one
        assert spans[0].status == "ok" and spans[0].call_id == key

        done = record_tool_spans(cx, "r", spans)
        assert len(done.recorded) == 1 and not done.unmatched
        evidence = cx.state("r").evidence[done.recorded[0]]
        assert evidence.provenance.origin == Origin.EXTERNAL_AGENT
        payload = [e for e in cx.store.iter_events("r") if e.type == "evidence_added"][0].payload
        assert payload["action_id"] == action_id and payload["outcome"] == "ok"
        assert payload["span"]["trace_id"] == spans[0].trace_id

        # the span said it worked; the ledger still does not know, and resume says so
        [action] = cx.actions("r")
        assert action.status == ActionStatus.UNKNOWN
        verdict = cx.resume("r")
        assert not verdict.safe
        assert [a["action_id"] for a in verdict.uncertain_actions] == [action_id]

        again = record_tool_spans(cx, "r", spans)  # an exporter's retry
        assert again.recorded == [] and again.duplicates == done.recorded


def test_spans_naming_no_action_are_reported_not_recorded(
    receiver: OtlpReceiver, unknown_action: tuple[Continuum, str, str]
) -> None:
    cx, key, _ = unknown_action
    with cx:
        bodies = _framework_export(receiver, call_id="call_from_elsewhere")
        spans = [s for body in bodies for s in tool_spans(body)]
        head = cx.store.get_run("r").head_sequence
        done = record_tool_spans(cx, "r", spans)
        assert done.recorded == [] and [s.call_id for s in done.unmatched] == [
            "call_from_elsewhere"
        ]
        assert cx.store.get_run("r").head_sequence == head  # nothing written
        # named explicitly, the same span is recorded for that action
        done = record_tool_spans(cx, "r", spans, action=key)
        assert len(done.recorded) == 1


def test_otlp_json_is_read_and_agent_text_is_escaped(
    unknown_action: tuple[Continuum, str, str],
) -> None:
    cx, key, _ = unknown_action
    body = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                                "name": "execute_tool send_invoice",
                                "startTimeUnixNano": "1544712660000000000",
                                "endTimeUnixNano": "1544712661000000000",
                                "attributes": [
                                    {"key": "gen_ai.tool.name", "value": {"stringValue": "send"}},
                                    {"key": "gen_ai.tool.call.id", "value": {"stringValue": key}},
                                ],
                                "status": {
                                    "code": "STATUS_CODE_ERROR",
                                    "message": "\x1b[31mfake\r\nOK" + "x" * 5000,
                                },
                            }
                        ]
                    }
                ]
            }
        ]
    }
    with cx:
        spans = tool_spans(json.dumps(body).encode(), "application/json")
        assert spans == tool_spans_from_json(body)
        [span] = spans
        assert span.status == "error" and span.start_ns == 1544712660000000000
        assert span.status_message is not None and "\x1b" not in span.status_message
        assert len(span.status_message) <= 1024
        done = record_tool_spans(cx, "r", spans)
        assert len(done.recorded) == 1
        assert cx.actions("r")[0].status == ActionStatus.UNKNOWN


def test_a_span_cannot_be_recorded_as_a_persons_word(
    unknown_action: tuple[Continuum, str, str],
) -> None:
    cx, _, _ = unknown_action
    with cx, pytest.raises(UsageError) as caught:
        record_tool_spans(cx, "r", [], origin=Origin.HUMAN)
    assert caught.value.code == "usage.bad_origin"


def test_a_body_that_is_not_otlp_is_refused(unknown_action: tuple[Continuum, str, str]) -> None:
    cx, _, _ = unknown_action
    with cx:
        for body, kind in ((b"\xff\x00garbage", "application/x-protobuf"), (b"[1]", "json")):
            with pytest.raises(UsageError) as caught:
                tool_spans(body, kind)
            assert caught.value.code == "usage.bad_spans"

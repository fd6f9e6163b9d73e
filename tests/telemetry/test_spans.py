"""The pure half: ids derived the same way in every process, values bounded and escaped."""

from __future__ import annotations

from continuum.eventlog.events import EventType, RawEvent
from continuum.telemetry.spans import (
    MAX_ID_CHARS,
    Action,
    clean,
    effect_span,
    run_span_id,
    span_id_of,
    time_ns,
    trace_id_of,
)
from continuum.types import Origin


def _event(seq: int, type_: str, ts: str, **payload: object) -> RawEvent:
    return RawEvent(
        f"evt_{seq}", "run-1", seq, type_, ts, dict(payload), None, Origin.DETERMINISTIC, None, "h"
    )


def test_ids_are_derived_from_the_run_and_the_event_alone() -> None:
    assert trace_id_of("run-1") == trace_id_of("run-1") != trace_id_of("run-2")
    assert 0 < trace_id_of("run-1") < 2**128 and 0 < run_span_id("run-1") < 2**64
    assert span_id_of("evt_a") != span_id_of("evt_b")


def test_clean_escapes_controls_and_bounds_length() -> None:
    assert clean("a\x1bb\u202ec") == "a\\x1bb\\u202ec"
    long = clean("x" * 10_000)
    assert len(long) == MAX_ID_CHARS and long.endswith("\u2026")


def test_timestamps_are_exact_nanoseconds() -> None:
    assert time_ns("1970-01-01T00:00:01.000001Z") == 1_000_001_000


def test_an_effect_span_starts_at_its_intercept_whoever_settles_it() -> None:
    opening = _event(2, EventType.ACTION_INTERCEPTED, "2026-01-01T00:00:00.000000Z")
    settled = _event(
        5, EventType.ACTION_MARKED_UNKNOWN, "2026-01-01T00:01:00.000000Z", reason="gone"
    )
    span = effect_span(Action("act_1", "k", "send", 1), opening, settled)
    assert span.start_ns == time_ns(opening.timestamp) and span.end_ns == time_ns(settled.timestamp)
    assert span.span_id == span_id_of("evt_2") and span.parent_span_id == run_span_id("run-1")
    assert span.status == "error" and span.events[0].name == "exception"

"""Spans reach a real OTLP receiver: runs, effects from intercept to settlement, the
unknown outcome as an error event, recovery decisions; one trace across a crash; nothing
sent when off; a dead receiver never fails an intercept; agent text stays inert."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import pytest

from continuum.errors import UsageError
from continuum.eventlog.event_model import Event
from continuum.eventlog.events import EventType
from continuum.runtime.facade import Continuum
from continuum.telemetry.spans import (
    MAX_TEXT_CHARS,
    UNKNOWN_EXCEPTION,
    run_span_id,
    span_id_of,
    time_ns,
    trace_id_of,
)
from continuum.types import ActionStatus
from tests.telemetry.receiver import OtlpReceiver, ReceivedSpan

WORKER = Path(__file__).with_name("crash_worker.py")
ROOT = Path(__file__).resolve().parents[2]


def _hex(value: int, size: int) -> str:
    return value.to_bytes(size, "big").hex()


def _one(spans: list[ReceivedSpan], name: str, **attrs: object) -> ReceivedSpan:
    found = [
        s
        for s in spans
        if s.name == name and all(s.attributes.get(k) == v for k, v in attrs.items())
    ]
    assert len(found) == 1, [(s.name, s.attributes) for s in spans]
    return found[0]


def _intercept_event(cx: Continuum, run_id: str, key: str) -> Event:
    for e in cx.store.iter_events(run_id):
        if e.type == EventType.ACTION_INTERCEPTED and e.payload["action_key"].endswith(key):
            return e
    raise AssertionError(f"no intercept of {key}")


def test_completed_and_failed_effects_export_as_execute_tool_spans(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    run = "r-otel"
    with Continuum.open(str(tmp_path / "a.db"), telemetry=True) as cx:
        cx.start_run(run, "send invoices", total=2)
        ok = cx.intercept(run, "send_invoice", {"invoice": "INV-1", "token": "s3cret"}, key="INV-1")
        cx.complete(run, ok.action_key, external_id="msg-1", result={"secret": "s3cret"})
        bad = cx.intercept(run, "send_invoice", {"invoice": "INV-2"}, key="INV-2")
        cx.fail(run, bad.action_key, error="smtp 550: mailbox unavailable", certain=True)
        intercept = _intercept_event(cx, run, "INV-1")
        cx.finish_run(run)
        verdict = cx.resume(run)
    spans = receiver.wait_for(lambda s: len(s) >= 4)
    trace = _hex(trace_id_of(run), 16)
    assert {s.trace_id for s in spans} == {trace}

    done = _one(spans, "execute_tool send_invoice", **{"continuum.action.outcome": "completed"})
    assert done.attributes["gen_ai.operation.name"] == "execute_tool"
    assert done.attributes["gen_ai.tool.name"] == "send_invoice"
    assert done.attributes["gen_ai.tool.call.id"] == ok.action_id
    assert done.attributes["continuum.action.key"] == ok.action_key
    assert done.attributes["continuum.run.id"] == run
    assert done.status_code == 1
    assert done.parent_span_id == _hex(run_span_id(run), 8)
    assert done.span_id == _hex(span_id_of(intercept.event_id), 8)
    assert done.start_ns == time_ns(intercept.timestamp)
    assert done.end_ns >= done.start_ns
    # arguments and results never leave as attributes
    assert not any("s3cret" in str(v) for s in spans for v in s.attributes.values())

    failed = _one(spans, "execute_tool send_invoice", **{"continuum.action.outcome": "failed"})
    assert failed.status_code == 2
    assert failed.status_message == "smtp 550: mailbox unavailable"
    assert failed.attributes["error.type"] == "continuum.action_failed"

    whole = _one(spans, "continuum.run")
    assert whole.span_id == _hex(run_span_id(run), 8) and whole.parent_span_id == ""
    assert whole.status_code == 1 and whole.start_ns <= done.start_ns
    assert whole.resource["service.name"] == "continuum"

    decision = _one(spans, "continuum.resume")
    assert decision.attributes["continuum.verdict"] == verdict.mode
    assert decision.attributes["continuum.safe"] is verdict.safe
    assert decision.attributes["continuum.reason"] == verdict.rationale
    assert decision.parent_span_id == _hex(run_span_id(run), 8)


def test_effect_left_open_by_a_killed_process_is_one_trace_with_an_unknown_error(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    run, db = "r-crash", str(tmp_path / "crash.db")
    env = {
        **os.environ,
        "CONTINUUM_OTEL": "1",
        "OTEL_RESOURCE_ATTRIBUTES": "test.process=first",
        "PYTHONPATH": str(ROOT),
    }
    worker = subprocess.Popen(
        [sys.executable, str(WORKER), db, run],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "intercepted"
        receiver.wait_for(lambda s: len(s) >= 1)  # the first process's completed effect
    finally:
        worker.send_signal(signal.SIGKILL)  # mid-effect: no finally, no flush
        worker.wait(timeout=10)
        for pipe in (worker.stdin, worker.stdout):
            if pipe is not None:
                pipe.close()
    assert worker.returncode == -signal.SIGKILL

    os.environ["OTEL_RESOURCE_ATTRIBUTES"] = "test.process=second"
    try:
        with Continuum.open(db, telemetry=True) as cx:
            again = cx.intercept(run, "send_invoice", {"invoice": "INV-2"}, key="INV-2")
            assert again.status == "unknown" and not again.proceed
            verdict = cx.resume(run)
            cx.reconcile(run, again.action_key, occurred=True, external_id="msg-2")
            intercept = _intercept_event(cx, run, "INV-2")
            assert cx.actions(run)[1].status == ActionStatus.COMPLETED
    finally:
        del os.environ["OTEL_RESOURCE_ATTRIBUTES"]
    spans = receiver.wait_for(lambda s: len(s) >= 4)

    assert {s.trace_id for s in spans} == {_hex(trace_id_of(run), 16)}
    first = _one(spans, "execute_tool send_invoice", **{"continuum.action.outcome": "completed"})
    assert first.resource["test.process"] == "first"
    unknown = _one(spans, "execute_tool send_invoice", **{"continuum.action.outcome": "unknown"})
    assert unknown.resource["test.process"] == "second"
    # intercepted by the killed process, settled by this one: one span, from the intercept
    assert unknown.span_id == _hex(span_id_of(intercept.event_id), 8)
    assert unknown.start_ns == time_ns(intercept.timestamp)
    assert unknown.status_code == 2 and unknown.status_message.startswith("outcome unknown")
    assert unknown.attributes["error.type"] == UNKNOWN_EXCEPTION
    [(name, attrs)] = unknown.events
    assert name == "exception" and attrs["exception.type"] == UNKNOWN_EXCEPTION
    assert "interrupted" in attrs["exception.message"]

    decision = _one(spans, "continuum.resume")
    assert decision.attributes["continuum.verdict"] == verdict.mode != "resume"
    assert decision.attributes["continuum.uncertain_actions.count"] == 1
    assert decision.events[0][1]["continuum.action.key"] == again.action_key

    settled = _one(spans, "continuum.reconcile send_invoice")
    assert settled.parent_span_id == unknown.span_id
    assert settled.attributes["continuum.reconciled.occurred"] is True
    assert settled.attributes["continuum.action.previous_outcome"] == "unknown"


def test_telemetry_off_sends_nothing(
    tmp_path: Path, receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "off.db")
    with Continuum.open(db) as cx:  # no argument, no CONTINUUM_OTEL: off
        assert cx.telemetry is None
        cx.start_run("quiet", "nothing to report")
        r = cx.intercept("quiet", "send_invoice", {"invoice": "INV-1"}, key="INV-1")
        cx.complete("quiet", r.action_key)
        cx.finish_run("quiet")
        cx.resume("quiet")
    monkeypatch.setenv("CONTINUUM_OTEL", "1")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")  # the standard switch wins
    with Continuum.open(db) as cx:
        assert cx.telemetry is None
    monkeypatch.delenv("OTEL_SDK_DISABLED")
    # The barrier: a run with telemetry on, after; only its spans arrive.
    with Continuum.open(db) as cx:
        assert cx.telemetry is not None
        cx.start_run("loud")
        cx.finish_run("loud")
    spans = receiver.wait_for(lambda s: any(x.name == "continuum.run" for x in s))
    assert {s.attributes["continuum.run.id"] for s in spans} == {"loud"}


@pytest.mark.parametrize("receiver_is", ["refusing", "hanging"])
def test_a_dead_receiver_never_fails_or_stalls_an_intercept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, receiver_is: str
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        if receiver_is == "hanging":
            s.listen(16)  # accepts connections (the kernel does), never answers
        port = s.getsockname()[1]
        if receiver_is == "refusing":
            s.close()  # nothing listens there
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
        cx = Continuum.open(str(tmp_path / "down.db"), telemetry=True)
        cx.start_run("r")
        began = time.monotonic()
        for i in range(20):
            r = cx.intercept("r", "send_invoice", {"n": i}, key=f"INV-{i}")
            assert r.proceed
            cx.complete("r", r.action_key)
        assert time.monotonic() - began < 5  # the export is another thread's wait
        assert [a.status for a in cx.actions("r")] == [ActionStatus.COMPLETED] * 20
        began = time.monotonic()
        cx.close()  # waits for the queue, bounded
        assert time.monotonic() - began < 8


def test_an_observer_that_raises_never_fails_the_append(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with Continuum.open(str(tmp_path / "raise.db")) as cx:

        def broken(run_id: str, after: int, head: int) -> None:
            raise RuntimeError("telemetry exploded")

        cx.store.observer = broken  # type: ignore[attr-defined]
        cx.start_run("r")
        r = cx.intercept("r", "send_invoice", {"n": 1}, key="INV-1")
        assert r.proceed
        cx.complete("r", r.action_key)
        assert cx.store.get_run("r").head_sequence == 3
    assert "store.observer_failed" in capfd.readouterr().err


def test_agent_text_reaches_attributes_escaped_and_bounded(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    run = "r-inject"
    evil = "\x1b[2J\x1b]0;owned\x07\u202e\r\n${jndi:ldap://x}" + "A" * 5000
    key = "INV-'\";DROP TABLE--<script>" + "k" * 150
    with Continuum.open(str(tmp_path / "i.db"), telemetry=True) as cx:
        cx.start_run(run)
        r = cx.intercept(run, "send_invoice", {"x": evil}, key=key)
        cx.fail(run, r.action_key, error=evil, certain=True)
        r2 = cx.intercept(run, "send_invoice", {"x": 2}, key="INV-2")
        cx.fail(run, r2.action_key, error=evil)  # not certain: unknown
        cx.finish_run(run, aborted=True, reason=evil)
    spans = receiver.wait_for(lambda s: len(s) >= 3)
    texts = [s.status_message for s in spans] + [
        str(v) for s in spans for v in s.attributes.values()
    ]
    texts += [str(v) for s in spans for _, a in s.events for v in a.values()]
    for text in texts:
        assert not any(unicodedata.category(c) in ("Cc", "Cf") for c in text), text[:80]
        assert len(text) <= MAX_TEXT_CHARS + 200
    failed = _one(spans, "execute_tool send_invoice", **{"continuum.action.outcome": "failed"})
    assert failed.status_message.startswith("\\x1b[2J\\x1b]0;owned\\x07\\u202e\\x0d\\x0a${jndi")
    assert len(failed.status_message) == MAX_TEXT_CHARS
    assert failed.attributes["continuum.action.key"] == r.action_key


def test_asking_for_telemetry_without_the_extra_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, "continuum.telemetry.otel", raising=False)
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    with pytest.raises(UsageError) as caught:
        Continuum.open(str(tmp_path / "x.db"), telemetry=True)
    assert caught.value.code == "usage.telemetry_unavailable"
    assert "pip install 'continuum-recovery[otel]'" in caught.value.hint


def test_the_cli_sends_a_resume_span_when_the_environment_opts_in(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    db = str(tmp_path / "cli.db")
    env = {**os.environ, "CONTINUUM_OTEL": "1"}
    cli = [sys.executable, "-m", "continuum"]
    for args in (["start", "r-cli", "--goal", "g", "--db", db], ["resume", "r-cli", "--db", db]):
        done = subprocess.run(cli + args, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    [decision] = receiver.wait_for(lambda s: len(s) >= 1)
    assert decision.name == "continuum.resume"
    assert decision.attributes["continuum.verdict"] == "resume"
    assert decision.trace_id == _hex(trace_id_of("r-cli"), 16)

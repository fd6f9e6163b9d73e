"""The OpenTelemetry SDK wiring (the ``otel`` extra): span descriptions exported over
OTLP/HTTP. Imported only when telemetry is enabled (``continuum.telemetry.enabled``).

One pipeline per endpoint per process (a ``BatchSpanProcessor`` over an
``OTLPSpanExporter``), shared by every ``Continuum`` object: a span is queued in the
writer's thread and sent from the processor's own thread, so a slow or absent receiver
costs an append nothing. The exporter reads the standard variables itself
(``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``OTEL_EXPORTER_OTLP_ENDPOINT``, ``_HEADERS``,
``_TIMEOUT``, ``_CERTIFICATE``); the resource ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` (default service name ``continuum``). The API's global tracer provider is left alone:
an application's own tracing setup is neither replaced nor duplicated.
"""

from __future__ import annotations

import atexit
import os
import threading

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from continuum.log import get_logger
from continuum.telemetry.spans import SpanDescription
from continuum.version import __version__

_log = get_logger("continuum.telemetry")
_SCOPE = InstrumentationScope("continuum", __version__)
_STATUS = {"unset": StatusCode.UNSET, "ok": StatusCode.OK, "error": StatusCode.ERROR}
FLUSH_MS = 3000  # how long close() waits for queued spans to be sent
# The exporter's timeout when the environment sets none (the SDK's is 10 s): a short-lived
# process (a hook call, a CLI command) waits this long at most for a receiver that hangs.
DEFAULT_TIMEOUT_S = 3.0


def _context(trace_id: int, span_id: int) -> SpanContext:
    return SpanContext(
        trace_id=trace_id,
        span_id=span_id,
        is_remote=False,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )


def to_readable(span: SpanDescription, resource: Resource) -> ReadableSpan:
    """The SDK's finished span for ``span``, with its derived ids and recorded times."""
    return ReadableSpan(
        name=span.name,
        context=_context(span.trace_id, span.span_id),
        parent=None
        if span.parent_span_id is None
        else _context(span.trace_id, span.parent_span_id),
        resource=resource,
        attributes=dict(span.attributes),
        events=[Event(e.name, dict(e.attributes), e.time_ns) for e in span.events],
        kind=SpanKind.INTERNAL,
        status=Status(_STATUS[span.status], span.status_description),
        start_time=span.start_ns,
        end_time=span.end_ns,
        instrumentation_scope=_SCOPE,
    )


class Pipeline:
    """One exporter and its batch processor; ``send`` never raises, never blocks on I/O."""

    def __init__(self) -> None:
        resource_env = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "continuum"}
        self.resource = Resource.create(resource_env)
        timeout = None
        if not any(
            os.environ.get(v)
            for v in ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
        ):
            timeout = DEFAULT_TIMEOUT_S
        self.processor = BatchSpanProcessor(OTLPSpanExporter(timeout=timeout))

    def send(self, span: SpanDescription) -> None:
        try:
            self.processor.on_end(to_readable(span, self.resource))
        except Exception as e:  # telemetry never fails the work it reports on
            _log.warning("telemetry.span_dropped", span=span.name, error=type(e).__name__)

    def flush(self, timeout_ms: int = FLUSH_MS) -> bool:
        try:
            return bool(self.processor.force_flush(timeout_ms))
        except Exception as e:
            _log.warning("telemetry.flush_failed", error=type(e).__name__)
            return False

    def shutdown(self) -> None:
        try:
            self.processor.shutdown()  # type: ignore[no-untyped-call]
        except Exception as e:
            _log.warning("telemetry.shutdown_failed", error=type(e).__name__)


_pipelines: dict[tuple[str, str], Pipeline] = {}
_lock = threading.Lock()


def pipeline() -> Pipeline:
    """This process's pipeline for the endpoint the environment names now."""
    key = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ""),
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", ""),
    )
    with _lock:
        found = _pipelines.get(key)
        if found is None:
            found = _pipelines[key] = Pipeline()
            if len(_pipelines) == 1:
                atexit.register(_shutdown_all)
        return found


def _shutdown_all() -> None:
    with _lock:
        pipelines = list(_pipelines.values())
        _pipelines.clear()
    for p in pipelines:
        p.shutdown()  # sends what is queued, bounded by the exporter's timeout

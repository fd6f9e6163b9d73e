"""OpenTelemetry spans for runs, effects and recovery decisions (the optional ``otel``
extra), and the reverse: a framework's ``gen_ai`` tool spans recorded as evidence.

Off unless asked for: ``Continuum.open(url, telemetry=True)``, or ``CONTINUUM_OTEL=1`` in
the environment (every edge then: the CLI, the MCP server, the hooks);
``telemetry=False`` or ``OTEL_SDK_DISABLED=true`` keeps it off. Where the spans go is the
standard ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``
(OTLP/HTTP, protobuf). references/telemetry.md has the span and attribute table.

Modules: ``spans`` (pure: events to span descriptions), ``observer`` (the store's
post-commit observer), ``otel`` (the SDK, imported only when enabled), ``evidence``
(received tool spans to ``evidence_added`` events). This module imports none of the SDK.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from continuum.errors import UsageError
from continuum.log import get_logger

if TYPE_CHECKING:
    from continuum.store import Storage
    from continuum.store.core import CoreStore
    from continuum.telemetry.observer import SpanObserver
    from continuum.telemetry.otel import Pipeline

ENABLE_ENV = "CONTINUUM_OTEL"
_log = get_logger("continuum.telemetry")


def wanted(telemetry: bool | None) -> bool:
    """Is telemetry asked for: the argument when given, else ``CONTINUUM_OTEL``."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if telemetry is not None:
        return bool(telemetry)
    return os.environ.get(ENABLE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


class Telemetry:
    """One facade's telemetry: the store's observer and the process's OTLP pipeline."""

    def __init__(self, store: Storage) -> None:
        try:
            from continuum.telemetry.otel import pipeline
        except ModuleNotFoundError as e:
            if not (e.name or "").startswith("opentelemetry"):
                raise
            raise UsageError(
                "telemetry was asked for (telemetry=True or CONTINUUM_OTEL=1) but the "
                "optional extra 'otel' (the OpenTelemetry SDK) is not installed",
                code="usage.telemetry_unavailable",
                hint="pip install 'continuum-recovery[otel]', or unset CONTINUUM_OTEL",
            ) from None
        from continuum.store.core import CoreStore
        from continuum.telemetry.observer import SpanObserver

        if not isinstance(store, CoreStore):
            raise UsageError(
                "telemetry needs one of continuum's stores (SQLite or PostgreSQL)",
                code="usage.telemetry_unavailable",
                hint="open the store with Continuum.open(url)",
            )
        self.store: CoreStore = store
        self.pipeline: Pipeline = pipeline()
        self.observer: SpanObserver = SpanObserver(store, self.pipeline.send)
        store.observer = self.observer

    def resumed(self, recovery: Any) -> None:
        """Report a recovery decision (a ``Recovery``) as a ``continuum.resume`` span."""
        try:
            from continuum.telemetry.spans import Verdict, resume_span

            if recovery.run_id is None:
                return
            contract = recovery.contract or {}
            verdict = Verdict(
                run_id=recovery.run_id,
                mode=str(recovery.mode),
                safe=bool(recovery.safe),
                next_allowed_action=recovery.next_allowed_action,
                rationale=str(recovery.rationale),
                required_actions=tuple(str(a) for a in recovery.required_actions),
                uncertain=tuple(recovery.uncertain_actions),
                head_sequence=contract.get("head_sequence"),
            )
            span_id = int.from_bytes(os.urandom(8), "big") or 1
            now = time.time_ns()  # a decision is a moment: the span has no duration
            self.pipeline.send(resume_span(verdict, now, now, span_id))
        except Exception as e:  # telemetry never fails the work it reports on
            _log.warning("telemetry.resume_not_reported", error=type(e).__name__)

    def close(self) -> None:
        """Send what is queued (bounded wait) and detach from the store."""
        if self.store.observer is self.observer:
            self.store.observer = None
        self.pipeline.flush()


def enable(store: Storage, telemetry: bool | None) -> Telemetry | None:
    """The facade's telemetry when it is asked for, else None (nothing imported)."""
    return Telemetry(store) if wanted(telemetry) else None

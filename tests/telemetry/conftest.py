"""A real OTLP receiver per test, and the environment that points continuum at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.telemetry.receiver import OtlpReceiver


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    r = OtlpReceiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.url)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.delenv("CONTINUUM_OTEL", raising=False)
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # ms: spans go out at once
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "5")
    try:
        yield r
    finally:
        r.close()

"""The post-commit observer on every store backend (house style 8): the same spans from
SQLite and PostgreSQL."""

from __future__ import annotations

from continuum.runtime.facade import Continuum
from continuum.telemetry.spans import trace_id_of
from tests.contract.conftest import (  # noqa: F401 - the backends, and the session database's cleanup
    StoreFactory,
    _drop_the_session_database,
    store_factory,
)
from tests.telemetry.receiver import OtlpReceiver


def test_every_backend_reports_effects_and_the_run(
    store_factory: StoreFactory,  # noqa: F811
    receiver: OtlpReceiver,
) -> None:
    run = f"r-{store_factory.backend}"
    with Continuum(store_factory.open(), telemetry=True) as cx:
        cx.start_run(run)
        ok = cx.intercept(run, "send_invoice", {"n": 1}, key="INV-1")
        cx.complete(run, ok.action_key)
        lost = cx.intercept(run, "send_invoice", {"n": 2}, key="INV-2")
        cx.fail(run, lost.action_key, error="connection reset")  # uncertain: unknown
        cx.finish_run(run)
    spans = receiver.wait_for(lambda s: len(s) >= 3)
    assert {s.trace_id for s in spans} == {trace_id_of(run).to_bytes(16, "big").hex()}
    outcomes = sorted(
        (s.attributes["continuum.action.outcome"], s.status_code)
        for s in spans
        if s.name == "execute_tool send_invoice"
    )
    assert outcomes == [("completed", 1), ("unknown", 2)]
    assert [s.status_code for s in spans if s.name == "continuum.run"] == [1]

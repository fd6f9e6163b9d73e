"""The first process of the crash test: it settles one effect, intercepts a second, says
so on stdout and waits, until the test SIGKILLs it mid-effect."""

from __future__ import annotations

import sys

from continuum.runtime.facade import Continuum


def main(db: str, run_id: str) -> None:
    cx = Continuum.open(db)  # telemetry from CONTINUUM_OTEL=1 in the environment
    assert cx.telemetry is not None
    cx.start_run(run_id, "send two invoices", total=2)
    first = cx.intercept(run_id, "send_invoice", {"invoice": "INV-1"}, key="INV-1")
    cx.complete(run_id, first.action_key, external_id="msg-1")
    cx.telemetry.pipeline.flush()  # the first process's span is out before it dies
    second = cx.intercept(run_id, "send_invoice", {"invoice": "INV-2"}, key="INV-2")
    assert second.proceed
    print("intercepted", flush=True)
    sys.stdin.read()  # the effect "runs" until the kill


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

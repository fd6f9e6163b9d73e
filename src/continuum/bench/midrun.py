"""Drift during a run (issue 24): the input file of a batch changes while it runs.

A run declares its input file, sends 10 invoices, then the file is rewritten under it
(another process's export landed), and the agent goes on sending 40 more. Counted: how
many invoices were sent after the change, before anything stopped the batch:

- ``periodic``: continuum with its periodic check (every 25 steps): the change is caught
  within one interval, and later sends answer ``revalidation_required``;
- ``resume_only``: the check off: nothing notices until the next resume, after a crash.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from continuum.bench.report import MidRunResult
from continuum.recovery.revalidation import DEFAULT_EVERY_STEPS, RevalidationPolicy
from continuum.runtime.facade import Continuum

RUN = "midrun"
BEFORE, AFTER = 10, 40
STRATEGIES = ("periodic", "resume_only")


def run_midrun(base: Path, progress: Callable[[str], None] | None = None) -> list[MidRunResult]:
    out: list[MidRunResult] = []
    for strategy in STRATEGIES:
        root = base / strategy
        root.mkdir(parents=True, exist_ok=True)
        data = root / "invoices.csv"
        data.write_text("batch of 2026-12-01\n", encoding="utf-8")
        with Continuum.open(str(root / "continuum.db")) as cx:
            every = DEFAULT_EVERY_STEPS if strategy == "periodic" else None
            cx.revalidation = RevalidationPolicy(every_steps=every)
            cx.start_run(RUN, "send the batch")
            cx.declare_dependencies(RUN, files=[str(data)])
            sent_after = 0
            stopped_at: int | None = None
            for i in range(BEFORE + AFTER):
                if i == BEFORE:
                    data.write_text("batch of 2026-12-02 (rewritten)\n", encoding="utf-8")
                r = cx.intercept(RUN, "send_invoice", {"n": i}, key=f"INV-{i}")
                if not r.proceed:
                    stopped_at = i
                    break
                cx.complete(RUN, r.action_key)
                if i >= BEFORE:
                    sent_after += 1
            caught_at_resume = cx.resume(RUN).mode != "resume"
        result = MidRunResult(
            strategy=strategy,
            sent_after_change=sent_after,
            stopped_at=stopped_at,
            caught_at_resume=caught_at_resume,
        )
        if progress:
            progress(f"drift mid-run / {strategy}: {sent_after} sent after the change")
        out.append(result)
    return out

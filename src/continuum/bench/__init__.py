"""The recovery benchmark behind ``continuum benchmark`` (references/contract.md §12, §13).

Five crash scenarios, each run with continuum, with full replay and with a naive
checkpoint, by real worker processes killed with SIGKILL (``scenarios.py``,
``worker.py``), plus an argument-drift idempotency scenario (``drift.py``). Nothing
here is timed against a target: the numbers are counts of real side effects.
"""

from __future__ import annotations

import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from continuum.bench.batch import STRATEGIES
from continuum.bench.contested import run_contested
from continuum.bench.drift import run_drift
from continuum.bench.midrun import run_midrun
from continuum.bench.report import BenchmarkReport, ScenarioResult, checks, render
from continuum.bench.scenarios import SCENARIO_NAMES, SCENARIOS, run_all
from continuum.bench.schema import run_schema

__all__ = [
    "DEFAULT_TOTAL",
    "SCENARIOS",
    "SCENARIO_NAMES",
    "STRATEGIES",
    "BenchmarkReport",
    "ScenarioResult",
    "machine_info",
    "render",
    "run_benchmark",
]

DEFAULT_TOTAL = 40


def machine_info() -> dict[str, object]:
    import apsw  # the store's SQLite library, reported with the figures

    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "python": platform.python_version(),
        "sqlite": apsw.sqlite_lib_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg": [round(x, 2) for x in load] if load else None,
    }


def run_benchmark(
    total: int = DEFAULT_TOTAL,
    *,
    workdir: Path | None = None,
    scenarios: tuple[str, ...] = SCENARIO_NAMES,
    progress: Callable[[str], None] | None = None,
) -> BenchmarkReport:
    """Run every scenario and the drift scenario in ``workdir`` (a temporary one by default)."""
    started = time.perf_counter()
    machine = machine_info()
    base = workdir or Path(tempfile.mkdtemp(prefix="continuum-bench-"))
    try:
        results = run_all(base / "scenarios", total, scenarios=scenarios, progress=progress)
        drift = run_drift(base / "drift", progress=progress)
        schema_change = run_schema(base / "schema", progress=progress)
        mid_run = run_midrun(base / "midrun", progress=progress)
        contested = run_contested(base / "contested", progress=progress)
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)
    machine["loadavg_end"] = (
        [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    )
    return BenchmarkReport(
        total=total,
        machine=machine,
        scenarios=results,
        drift=drift,
        schema_change=schema_change,
        mid_run=mid_run,
        contested=contested,
        checks=checks(results, drift, schema_change, mid_run, contested),
        seconds=round(time.perf_counter() - started, 2),
    )

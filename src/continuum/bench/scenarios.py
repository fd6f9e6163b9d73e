"""The recovery scenarios: a real agent process is SIGKILLed, a fresh one resumes.

Each scenario runs three ways (``continuum``, ``full_replay``, ``naive_checkpoint``;
see ``worker.py``) on its own directory: a dataset file, an outbox the side effects go
to, and the strategy's own record. The first worker process is killed with SIGKILL at
the scenario's stop point; for ``dataset_change`` the dataset file is edited while no
process runs; a second process resumes and finishes the batch. Then the outbox and
the work log are counted: every number comes from the files, not from the workers.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from continuum.bench.batch import FAIL_EVERY, RUN, STRATEGIES
from continuum.bench.report import ScenarioResult
from continuum.errors import ContinuumError
from continuum.eventlog.canonical import canonical_json, parse_json
from continuum.runtime.facade import Continuum

STOP_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    phase: str  # where the first process is killed (worker.PHASES)
    index: Callable[[int], int]  # at which item, given the batch size
    changes_dataset: bool = False
    rejects_first: bool = False


SCENARIOS = (
    Scenario(
        "process_crash",
        "killed between two items, half-way through the batch",
        "between",
        lambda n: n // 2 - 1,
    ),
    Scenario(
        "dataset_change",
        "killed half-way; the declared dataset file changes before the restart",
        "between",
        lambda n: n // 2 - 1,
        changes_dataset=True,
    ),
    Scenario(
        "unknown_side_effect",
        "killed after an invoice was delivered, before it was recorded",
        "after_effect",
        lambda n: n // 2 - 1,
    ),
    Scenario(
        "partial_completion",
        "killed half-way after some deliveries were rejected "
        f"(items i % {FAIL_EVERY} == 2 fail once and must be retried)",
        "between",
        lambda n: n // 2 - 1,
        rejects_first=True,
    ),
    Scenario(
        "early_crash",
        "killed right after the first intercept, before any delivery",
        "before_effect",
        lambda n: 0,
    ),
)
SCENARIO_NAMES = tuple(s.name for s in SCENARIOS)


class BenchError(ContinuumError):
    def __init__(self, message: str) -> None:
        super().__init__(
            message,
            code="bench.failed",
            hint="run with --workdir DIR to keep the files and look at them",
        )


def write_dataset(path: Path, total: int, version: int) -> None:
    path.write_text("".join(f"{100 + i * version}.00\n" for i in range(total)), encoding="utf-8")


def _spawn(
    root: Path, strategy: str, total: int, stop: str | None, rejects: bool
) -> subprocess.Popen[str]:
    cmd = [
        sys.executable,
        "-m",
        "continuum.bench.worker",
        str(root),
        "--strategy",
        strategy,
        "--total",
        str(total),
    ]
    if stop:
        cmd += ["--stop", stop]
    if rejects:
        cmd.append("--reject-first")
    env = {k: v for k, v in os.environ.items() if k != "CONTINUUM_FAULTS"}
    return subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=root,
    )


def _kill_at_stop(proc: subprocess.Popen[str], stop: str) -> None:
    """Wait for the worker to announce the stop point, then SIGKILL it there."""
    assert proc.stdout is not None
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    line = ""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            break
        line = proc.stdout.readline()
        if line.startswith("STOP ") or not line:
            break
    if not line.startswith("STOP "):
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise BenchError(
            f"the worker never reached {stop} (exit {proc.returncode}): {err.strip()[-400:]}"
        )
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def _finish(proc: subprocess.Popen[str]) -> None:
    _, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise BenchError(
            f"the resumed worker failed (exit {proc.returncode}): {err.strip()[-600:]}"
        )


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def _log_bytes(root: Path) -> int:
    """Bytes of the whole event log, as canonical JSON lines (what a transcript replay reads)."""
    rt = Continuum.open(str(root / "continuum.db"), create=False)
    try:
        return sum(
            len(canonical_json(e.model_dump(mode="json")).encode("utf-8")) + 1
            for e in rt.store.iter_events(RUN)
        )
    finally:
        rt.close()


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def run_scenario(scenario: Scenario, strategy: str, root: Path, total: int) -> ScenarioResult:
    """Run one (scenario, strategy) pair in ``root`` and count what happened."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "outbox").mkdir(exist_ok=True)
    write_dataset(root / "dataset.txt", total, 1)
    stop = f"{scenario.phase}:{scenario.index(total)}"
    started = time.perf_counter()
    _kill_at_stop(_spawn(root, strategy, total, stop, scenario.rejects_first), stop)
    # What the restarted agent has to go on, measured at the moment of the restart.
    full_log = _log_bytes(root) if strategy == "continuum" else _size(root / "transcript.jsonl")
    if scenario.changes_dataset:
        write_dataset(root / "dataset.txt", total, 2)
    resumed_at = time.perf_counter()
    naive_context = _size(root / "checkpoint.json")
    _finish(_spawn(root, strategy, total, None, scenario.rejects_first))
    finished = time.perf_counter()

    result = (
        parse_json((root / "result.json").read_text(encoding="utf-8"))
        if (root / "result.json").exists()
        else {}
    )
    counts = [len(_lines(root / "outbox" / f"invoice-{i}.txt")) for i in range(total)]
    work = [int(x) for x in _lines(root / "work.log")]
    context = {
        "continuum": int(result.get("context_bytes", 0)),
        "full_replay": full_log,
        "naive_checkpoint": naive_context,
    }[strategy]
    stale_detected = len(result.get("stale_detected", []))
    return ScenarioResult(
        scenario=scenario.name,
        strategy=strategy,
        total=total,
        killed_at=stop,
        work_executions=len(work),
        duplicate_work=len(work) - len(set(work)),
        side_effects=sum(counts),
        duplicate_side_effects=sum(max(c - 1, 0) for c in counts),
        missing_side_effects=sum(1 for c in counts if c == 0),
        stale_dependencies=1 if scenario.changes_dataset else 0,
        stale_detected=stale_detected,
        stale_components=len(result.get("invalidated", [])),
        context_bytes=context,
        full_log_bytes=full_log,
        verdict=result.get("verdict"),
        final_verdict=result.get("final_verdict"),
        uncertain_reported=int(result.get("uncertain_reported", 0)),
        reconciled=len(result.get("reconciled", [])),
        first_run_seconds=round(resumed_at - started, 3),
        resume_seconds=round(finished - resumed_at, 3),
    )


def run_all(
    base: Path,
    total: int,
    *,
    scenarios: tuple[str, ...] = SCENARIO_NAMES,
    strategies: tuple[str, ...] = STRATEGIES,
    progress: Callable[[str], None] | None = None,
) -> list[ScenarioResult]:
    pairs = [(s, st) for s in SCENARIOS if s.name in scenarios for st in strategies]
    out = []
    for n, (scenario, strategy) in enumerate(pairs, 1):
        if progress:
            progress(f"[{n}/{len(pairs)}] {scenario.name} / {strategy} ...")
        r = run_scenario(scenario, strategy, base / scenario.name / strategy, total)
        if progress:
            progress(
                f"[{n}/{len(pairs)}] {scenario.name} / {strategy}: "
                f"{r.duplicate_side_effects} duplicate side effects, "
                f"{r.missing_side_effects} missing ({r.first_run_seconds + r.resume_seconds:.1f} s)"
            )
        out.append(r)
    return out

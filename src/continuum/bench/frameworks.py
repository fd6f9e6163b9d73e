"""``continuum benchmark --frameworks``: each agent framework with and without continuum.

Every (framework, scenario, mode) case gets its own directory. The scenario agent
(``python -m continuum.adapters.scenarios``: the framework's own offline test model, its
own persistence, a tool that appends one line per invoice to an outbox) is started, it
announces the chosen stop point and is SIGKILLed there; a fresh process resumes the way
the framework resumes (``--mode alone``), or the same plus continuum's adapter, which
first settles every interrupted effect by looking in the outbox (``--mode continuum``).
Duplicate and missing effects are counted from the outbox files, not from what the
agents say. This module only runs programs: it imports no framework and no adapter.
"""

from __future__ import annotations

import importlib.util
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel, ConfigDict, computed_field

AGENT_MODULE = "continuum.adapters.scenarios"
DEADLINE_SECONDS = 120.0
INVOICES = ("INV-1", "INV-2", "INV-3")
# framework -> (the module that must be importable, the extra that installs it)
FRAMEWORKS = {
    "langgraph": ("langgraph.checkpoint.sqlite", "langgraph"),
    "langchain": ("langchain.agents", "langchain"),
    "openai-agents": ("agents", "openai-agents"),
    "pydantic-ai": ("pydantic_ai", "pydantic-ai"),
}
# name -> (stop point, what happened)
SCENARIOS = {
    "after_effect": (
        "after_effect:2",
        "SIGKILL after INV-2 was sent, before the tool returned (nothing persisted it)",
    ),
    "before_effect": ("before_effect:2", "SIGKILL in the tool, before INV-2 was sent"),
    "checkpoint_write": (
        "checkpoint:2",
        "SIGKILL inside the framework's own write of INV-2's tool result",
    ),
    "after_all": ("after_all", "SIGKILL after the whole batch was done and saved"),
}
MODES = ("alone", "continuum")


class FrameworkCase(BaseModel):
    """One (framework, scenario, mode): counted from the outbox after the resume."""

    model_config = ConfigDict(frozen=True)

    framework: str
    scenario: str
    mode: str
    flavor: str
    killed: bool
    effects: int
    duplicate_effects: int
    missing_effects: int
    unknown_reported: list[str]
    resume_exit: int
    finished: bool
    seconds: float


class FrameworksReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    cases: list[FrameworkCase]
    skipped: dict[str, str]
    seconds: float

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        """continuum: no duplicate, nothing missing, every run finished."""
        return all(
            c.duplicate_effects == 0 and c.missing_effects == 0 and c.finished
            for c in self.cases
            if c.mode == "continuum"
        )


class AgentError(Exception):
    """The scenario agent did not behave as the harness expected (its output attached)."""


def available(framework: str) -> bool:
    module = FRAMEWORKS[framework][0]
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


class AgentProcess:
    """A running scenario agent: stdout a pipe (read raw), stderr a temporary file (a pipe
    nobody reads while we wait on stdout could fill up and block the agent)."""

    def __init__(self, cmd: list[str], env: dict[str, str], cwd: Path) -> None:
        self.err = tempfile.TemporaryFile()  # noqa: SIM115 (closed by run_agent)
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, env=env, cwd=cwd
        )

    def stderr_text(self) -> str:
        self.err.seek(0)
        return self.err.read().decode("utf-8", "replace")


def spawn(
    workdir: Path,
    framework: str,
    *,
    mode: str,
    flavor: str = "sync",
    stop: str | None = None,
    faults: str | None = None,
    durability: str = "sync",
    reconcile: bool = True,
) -> AgentProcess:
    cmd = [
        sys.executable,
        "-m",
        AGENT_MODULE,
        str(workdir),
        "--framework",
        framework,
        "--mode",
        mode,
        "--flavor",
        flavor,
        "--durability",
        durability,
    ]
    if stop:
        cmd += ["--stop", stop]
    if not reconcile:
        cmd.append("--no-reconcile")
    env = {k: v for k, v in os.environ.items() if k != "CONTINUUM_FAULTS"}
    if faults:
        env["CONTINUUM_FAULTS"] = faults
    workdir.mkdir(parents=True, exist_ok=True)
    return AgentProcess(cmd, env, workdir)


def run_agent(
    agent: AgentProcess, *, kill_at: str | None = None, deadline_s: float = DEADLINE_SECONDS
) -> tuple[int, list[str], str]:
    """Read the agent's lines until it exits, or SIGKILL it when it announces ``kill_at``.

    Returns (exit code, stdout lines, stderr); a killed agent's code is ``-SIGKILL``.
    Bounded by ``deadline_s``: a hung agent is killed and reported. The pipe is read with
    ``os.read`` (no buffered reader), so ``select`` never waits on a line that has already
    been read into a buffer.
    """
    proc = agent.proc
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + deadline_s
    lines: list[str] = []
    pending = b""
    try:
        while True:
            if b"\n" not in pending:
                left = deadline - time.monotonic()
                ready, _, _ = select.select([fd], [], [], max(left, 0))
                if not ready:
                    raise AgentError(
                        f"no answer within {deadline_s:.0f} s; output so far: "
                        f"{lines}; stderr: {agent.stderr_text()[-2000:]}"
                    )
                chunk = os.read(fd, 65536)
                if not chunk:
                    if pending:
                        lines.append(pending.decode("utf-8", "replace"))
                    break
                pending += chunk
                continue
            raw, pending = pending.split(b"\n", 1)
            line = raw.decode("utf-8", "replace")
            lines.append(line)
            if kill_at is not None and line.strip() == f"STOP {kill_at}":
                proc.send_signal(signal.SIGKILL)
                break
        proc.wait(timeout=max(deadline - time.monotonic(), 1))
        return proc.returncode, lines, agent.stderr_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()
        agent.err.close()


def count_outbox(workdir: Path) -> tuple[int, int, int]:
    """(effects, duplicates, missing), from the outbox files."""
    effects = dups = missing = 0
    for invoice in INVOICES:
        path = workdir / "outbox" / f"{invoice}.txt"
        n = len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0
        effects += n
        dups += max(n - 1, 0)
        missing += n == 0
    return effects, dups, missing


def run_case(
    workdir: Path, framework: str, scenario: str, mode: str, *, flavor: str = "sync"
) -> FrameworkCase:
    """Kill the agent at the scenario's stop point, resume it once, count the outbox."""
    started = time.perf_counter()
    stop = SCENARIOS[scenario][0]
    code, lines, err = run_agent(
        spawn(workdir, framework, mode=mode, flavor=flavor, stop=stop), kill_at=stop
    )
    killed = code == -signal.SIGKILL
    if not killed:
        raise AgentError(
            f"{framework}/{scenario}/{mode}: the agent exited {code} instead of "
            f"stopping at {stop}: {lines} {err[-2000:]}"
        )
    code, lines, err = run_agent(spawn(workdir, framework, mode=mode, flavor=flavor))
    if code not in (0, 20):
        raise AgentError(
            f"{framework}/{scenario}/{mode}: the resumed agent exited {code}: {lines} {err[-2000:]}"
        )
    effects, dups, missing = count_outbox(workdir)
    unknown = [line.split(" ", 1)[1] for line in lines if line.startswith("UNCERTAIN ")]
    finished = code == 0 and any(line.startswith(("DONE", "ALREADY_DONE")) for line in lines)
    return FrameworkCase(
        framework=framework,
        scenario=scenario,
        mode=mode,
        flavor=flavor,
        killed=killed,
        effects=effects,
        duplicate_effects=dups,
        missing_effects=missing,
        unknown_reported=unknown,
        resume_exit=code,
        finished=finished,
        seconds=round(time.perf_counter() - started, 2),
    )


def run_frameworks(
    *,
    workdir: Path | None = None,
    frameworks: Sequence[str] = tuple(FRAMEWORKS),
    scenarios: Sequence[str] = tuple(SCENARIOS),
    jobs: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> FrameworksReport:
    """Every case of every installed framework (``jobs`` agents at a time)."""
    started = time.perf_counter()
    base = workdir or Path(tempfile.mkdtemp(prefix="continuum-frameworks-"))
    skipped = {
        f: f"not installed: pip install 'continuum-recovery[{FRAMEWORKS[f][1]}]'"
        for f in frameworks
        if not available(f)
    }
    todo = [(f, s, m) for f in frameworks if f not in skipped for s in scenarios for m in MODES]

    def one(case: tuple[str, str, str]) -> FrameworkCase:
        f, s, m = case
        if progress:
            progress(f"{f}: {s} ({m})")
        return run_case(base / f / s / m, f, s, m)

    try:
        with ThreadPoolExecutor(max_workers=jobs or min(4, os.cpu_count() or 1)) as pool:
            cases = list(pool.map(one, todo))
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)
    return FrameworksReport(
        cases=cases, skipped=skipped, seconds=round(time.perf_counter() - started, 2)
    )


def render(report: FrameworksReport) -> list[str]:
    """One table: each framework and scenario, alone and with continuum, side by side."""
    lines = [
        f"Agent frameworks: a batch of {len(INVOICES)} invoices (one tool call each); the "
        "agent is SIGKILLed, a fresh process resumes it.",
        "",
    ]
    cell = {(c.framework, c.scenario, c.mode): c for c in report.cases}
    headers = [
        "framework",
        "scenario",
        "alone: dup",
        "missing",
        "continuum: dup",
        "missing",
        "unknown reported",
        "finished",
    ]
    rows: list[list[str]] = []
    for f in dict.fromkeys(c.framework for c in report.cases):
        for s in dict.fromkeys(c.scenario for c in report.cases):
            a, c = cell.get((f, s, "alone")), cell.get((f, s, "continuum"))
            if a is None or c is None:
                continue
            rows.append(
                [
                    f,
                    s,
                    str(a.duplicate_effects),
                    str(a.missing_effects),
                    str(c.duplicate_effects),
                    str(c.missing_effects),
                    ", ".join(c.unknown_reported) or "-",
                    "yes"
                    if c.finished and a.finished
                    else f"alone {'yes' if a.finished else 'no'}, continuum "
                    f"{'yes' if c.finished else 'no'}",
                ]
            )
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    for cells in (headers, ["-" * w for w in widths], *rows):
        lines.append(
            "  ".join(
                v.ljust(w) if i < 2 or i == 6 else v.rjust(w)
                for i, (v, w) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()
        )
    lines.append("")
    for name, (_stop, what) in SCENARIOS.items():
        lines.append(f"  {name}: {what}")
    for f, why in report.skipped.items():
        lines.append(f"skipped {f}: {why}")
    total = sum(c.duplicate_effects for c in report.cases if c.mode == "continuum")
    lines.append(
        (
            "continuum: 0 duplicate effects, nothing missing, every run finished"
            if report.passed
            else f"FAILED: continuum shows {total} duplicate effect(s) or an unfinished run"
        )
        + f"; {report.seconds:.1f} s"
    )
    return lines

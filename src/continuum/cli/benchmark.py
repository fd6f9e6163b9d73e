"""``continuum benchmark``: the recovery scenarios of references/contract.md §13 (see ``continuum.bench``)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from continuum.cli.common import common_without_db
from continuum.cli.output import Settings, emit
from continuum.untrusted import terminal_safe


def _progress(message: str) -> None:
    sys.stderr.write(f"benchmark: {terminal_safe(message)}\n")
    sys.stderr.flush()


@click.command("benchmark")
@click.option(
    "--total",
    type=click.IntRange(4, 5000),
    default=40,
    show_default=True,
    help="Invoices per batch (each scenario kills the first process half-way).",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep every store, outbox and log here (default: a temporary directory, "
    "removed afterwards).",
)
@click.option("--quiet", is_flag=True, help="No progress lines on stderr.")
@click.option(
    "--frameworks",
    is_flag=True,
    help="Instead: each installed agent framework (LangGraph, LangChain, OpenAI "
    "Agents, Pydantic AI) with and without continuum's adapter, SIGKILLed at the "
    "same points; duplicate and missing effects side by side.",
)
@common_without_db
def benchmark_cmd(
    s: Settings, total: int, workdir: Path | None, quiet: bool, frameworks: bool
) -> None:
    """Crash an agent for real and count what each recovery strategy repeats.

    Scenarios process_crash, dataset_change, unknown_side_effect, partial_completion
    and early_crash, each run with continuum, with full replay and with a naive
    checkpoint: a worker process is SIGKILLed at a chosen point and a fresh one
    resumes; side effects are files in an outbox. Plus an argument-drift scenario and a
    tool whose schema changed between the crash and the resume.
    It builds its own stores and never touches yours. Exit 0 when continuum shows no
    duplicate side effect and detects every stale dependency, 1 otherwise.

    With --frameworks: the agent-framework comparison instead (exit 0 when continuum
    shows no duplicate and no missing effect and every resumed agent finished).
    """
    if workdir is not None:
        workdir = workdir.absolute()
        workdir.mkdir(parents=True, exist_ok=True)
    if frameworks:
        from continuum.bench.frameworks import render as render_frameworks
        from continuum.bench.frameworks import run_frameworks

        fw = run_frameworks(workdir=workdir, progress=None if quiet else _progress)
        emit(s, fw.model_dump(mode="json"), render_frameworks(fw), code=0 if fw.passed else 1)
        return
    # Imported here: the scenarios are not needed by any other command's start-up.
    from continuum.bench import run_benchmark
    from continuum.bench.report import render

    report = run_benchmark(total, workdir=workdir, progress=None if quiet else _progress)
    emit(s, report.model_dump(mode="json"), render(report), code=0 if report.passed else 1)


COMMANDS = [benchmark_cmd]

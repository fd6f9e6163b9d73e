"""`continuum prune`: archive finished runs (export first, verified), then delete them."""

from __future__ import annotations

import sys

import click

from continuum.cli.common import common, runtime
from continuum.cli.output import AGENT_TEXT_NOTICE, Line, Settings, ask, emit, write_lines
from continuum.errors import UsageError
from continuum.ops.prune import (
    Candidate,
    PruneReport,
    Refusal,
    archive_files,
    parse_before,
    prune,
    select,
)
from continuum.untrusted import as_typed, quoted


def _skipped(skipped: list[Refusal]) -> list[Line]:
    return [f"skipped {quoted(r.run_id)}: {r.message} [{r.code}]" for r in skipped]


def _listed(runs: list[Candidate]) -> list[Line]:
    return [
        f"  {quoted(r.run_id)}  {r.status}, {r.events} event(s), last at {r.last_event_at}, "
        f"head {r.head}, goal {quoted(r.goal, limit=60)}"
        for r in runs
    ]


@click.command("prune")
@click.option(
    "--finished", is_flag=True, help="Required: prune only runs that are completed or aborted."
)
@click.option(
    "--before",
    "before_text",
    required=True,
    metavar="DATE",
    help="Runs whose last event is before DATE: 2026-01-31 (00:00 UTC) or 2026-01-31T12:00:00Z.",
)
@click.option(
    "--to",
    "to_dir",
    default=None,
    metavar="DIR",
    help="Archive each run to DIR/<run>.jsonl first (the export format).",
)
@click.option(
    "--archive", default=None, metavar="FILE", help="Archive all of them to one export FILE first."
)
@click.option("--dry-run", is_flag=True, help="List what would be archived and deleted.")
@click.option(
    "--yes",
    "-y",
    is_flag=True,
    help="Do not ask: for a person's own script. Without it, prune asks on a "
    "terminal and refuses when stdin is not one.",
)
@common
def prune_cmd(
    s: Settings,
    finished: bool,
    before_text: str,
    to_dir: str | None,
    archive: str | None,
    dry_run: bool,
    yes: bool,
) -> None:
    """Archive finished runs, then delete them from the store.

    Selects the runs that are completed or aborted and whose last event is before DATE
    (an active run is never pruned). Each is exported first (--to DIR: one file per run,
    --archive FILE: one file), the file is read back and every chain verified, and only
    then is each run deleted, one transaction per run, if its head is still the one
    archived (a run that moved on is kept and reported). `continuum import FILE` brings
    a run back with every hash unchanged. A person must confirm: on a terminal, or --yes.
    """
    if not finished:
        raise UsageError(
            "prune archives finished runs only: pass --finished to say so",
            code="usage.invalid",
            hint="continuum prune --finished --before 2026-01-01 --to archive/",
        )
    before = parse_before(before_text)
    if not dry_run:
        archive_files([], to_dir=to_dir, archive=archive)  # refuse a bad target up front
        if not yes and not (sys.stdin is not None and sys.stdin.isatty()):
            # Deleting runs is a person's decision: an agent with a shell is not one.
            raise UsageError(
                "prune deletes runs and must be confirmed by a person at a "
                "terminal; stdin is not a terminal and --yes was not given",
                code="usage.not_a_terminal",
                hint="run it in a terminal (it lists the runs and asks), or pass "
                "--yes from a person's own script; --dry-run lists them",
            )
    rt = runtime(s)
    runs, skipped = select(rt.store, before)
    when = before.isoformat().replace("+00:00", "Z")
    if dry_run or not runs:
        report = PruneReport(before=before.isoformat(), dry_run=dry_run, runs=runs, skipped=skipped)
        head = (
            f"would archive and delete {len(runs)} finished run(s) whose last event is "
            f"before {when}"
            if runs
            else f"no completed or aborted run that can be pruned has its last event before "
            f"{when}; nothing to do"
        )
        emit(
            s,
            report.model_dump(mode="json"),
            [head, *_listed(runs), *_skipped(skipped)]
            + (["dry run: nothing was written or deleted"] if dry_run else []),
        )
        return
    files = archive_files(runs, to_dir=to_dir, archive=archive)
    if not yes:
        where = as_typed(archive) if archive is not None else f"{as_typed(str(to_dir))}/"
        write_lines(
            s,
            [
                AGENT_TEXT_NOTICE,
                f"{len(runs)} finished run(s) with their last event before {when}:",
                *_listed(runs),
            ],
            err=True,
        )
        if not ask(s, f"Archive them to {where} and delete them from the store?"):
            raise UsageError(
                "pruning declined; nothing was archived or deleted",
                code="usage.declined",
                hint="run again when you are sure",
            )
    report = prune(rt.store, runs, files, before=before).model_copy(update={"skipped": skipped})
    lines: list[Line] = [
        f"archived {len(runs)} run(s), every chain verified in the archive; "
        f"deleted {len(report.pruned)}"
    ]
    for run in runs:
        gone = run.run_id in report.pruned
        lines.append(
            f"  {quoted(run.run_id)}  head {run.head}  -> "
            f"{as_typed(report.archives[run.run_id])}" + ("" if gone else "  (kept: refused)")
        )
    for refusal in report.refused:
        lines.append(f"refused {quoted(refusal.run_id)}: {refusal.message} [{refusal.code}]")
    lines += _skipped(report.skipped)
    if report.pruned:
        lines.append("bring a run back with `continuum import FILE`")
    emit(s, report.model_dump(mode="json"), lines, code=1 if report.refused else 0)


COMMANDS = [prune_cmd]

"""Integrity commands: verify and anchor."""

from __future__ import annotations

import click

from continuum.cli.common import common, runtime
from continuum.cli.output import Line, Settings, Styled, emit
from continuum.errors import UsageError


@click.command("verify")
@click.argument("run_id", required=False)
@click.option("--all", "all_runs", is_flag=True, help="Verify every run in the store.")
@click.option("--expect-head", default=None, metavar="SEQ:HASH",
              help="An anchor from `continuum anchor`: detects a truncated or rewritten tail.")
@common
def verify_cmd(s: Settings, run_id: str | None, all_runs: bool, expect_head: str | None) -> None:
    """Recompute every hash; check sequence, links, head, index and checkpoints. Exit 3 on damage."""
    if bool(run_id) == all_runs:
        raise UsageError("give a RUN or --all (not both)", code="usage.invalid",
                         hint="continuum verify RUN, or continuum verify --all")
    if all_runs and expect_head:
        raise UsageError("--expect-head applies to one run", code="usage.invalid",
                         hint="continuum verify RUN --expect-head SEQ:HASH")
    rt = runtime(s)
    ids = [r.run_id for r in rt.runs()] if all_runs else [run_id or ""]
    reports = [rt.verify(i, expect_head=expect_head) for i in ids]
    lines: list[Line] = []
    for r in reports:
        if r.ok:
            lines.append([Styled("ok", fg="green"), f"  {r.run_id}: {r.events_checked} events, "
                          f"head {r.head_sequence}"])
        else:
            v = r.violations[0]
            lines.append([Styled("DAMAGED", fg="red", bold=True), f"  {r.run_id}: first bad "
                          f"sequence {v.sequence} ({v.kind}: {v.detail}); trusted through "
                          f"{r.trusted_through}"])
    ok = all(r.ok for r in reports)
    emit(s, {"verified": ok, "reports": [r.model_dump(mode="json") for r in reports]},
         lines or ["no runs"], code=0 if ok else 3)


@click.command("anchor")
@click.argument("run_id")
@common
def anchor_cmd(s: Settings, run_id: str) -> None:
    """Print an anchor SEQ:HASH of RUN's head; keep it elsewhere for verify --expect-head."""
    a = runtime(s).anchor(run_id)
    emit(s, a, [a["anchor"]])


COMMANDS = [verify_cmd, anchor_cmd]

"""Integrity commands: verify and anchor."""

from __future__ import annotations

import click

from continuum.cli.common import common, runtime
from continuum.cli.output import Line, Settings, Styled, emit
from continuum.errors import UsageError


@click.command("verify")
@click.argument("run_id", required=False)
@click.option("--all", "all_runs", is_flag=True, help="Verify every run in the store.")
@click.option(
    "--expect-head",
    default=None,
    metavar="SEQ:HASH",
    help="An anchor from `continuum anchor` (or its signed_anchor, with "
    "--public-key): detects a truncated or rewritten tail.",
)
@click.option(
    "--public-key",
    default=None,
    metavar="PUBFILE",
    help="Check a signed anchor's signature with this Ed25519 public key first.",
)
@click.option(
    "--archive",
    "archives",
    multiple=True,
    metavar="FILE",
    help="An archive file of RUN (`continuum archive`; repeat for each): verify "
    "the whole history from event 1.",
)
@common
def verify_cmd(
    s: Settings,
    run_id: str | None,
    all_runs: bool,
    expect_head: str | None,
    public_key: str | None,
    archives: tuple[str, ...],
) -> None:
    """Recompute every hash; check sequence, links, head, index and checkpoints. Exit 3 on damage.

    A run whose old history was archived is verified from its archive marker on; pass its
    archive files with --archive to verify the whole history end to end.
    """
    if bool(run_id) == all_runs:
        raise UsageError(
            "give a RUN or --all (not both)",
            code="usage.invalid",
            hint="continuum verify RUN, or continuum verify --all",
        )
    if all_runs and (expect_head or public_key or archives):
        raise UsageError(
            "--expect-head, --public-key and --archive apply to one run",
            code="usage.invalid",
            hint="continuum verify RUN --expect-head SEQ:HASH",
        )
    rt = runtime(s)
    ids = [r.run_id for r in rt.runs()] if all_runs else [run_id or ""]
    reports = [
        rt.verify(i, expect_head=expect_head, archives=archives, public_key=public_key) for i in ids
    ]
    lines: list[Line] = []
    for r in reports:
        if r.ok:
            lines.append(
                [
                    Styled("ok", fg="green"),
                    f"  {r.run_id}: {r.events_checked} events, "
                    f"head {r.head_sequence}" + _archived_note(r.archived_through, bool(archives)),
                ]
            )
        else:
            v = r.violations[0]
            lines.append(
                [
                    Styled("DAMAGED", fg="red", bold=True),
                    f"  {r.run_id}: first bad "
                    f"sequence {v.sequence} ({v.kind}: {v.detail}); trusted through "
                    f"{r.trusted_through}",
                ]
            )
    ok = all(r.ok for r in reports)
    emit(
        s,
        {"verified": ok, "reports": [r.model_dump(mode="json") for r in reports]},
        lines or ["no runs"],
        code=0 if ok else 3,
    )


def _archived_note(archived_through: int, checked: bool) -> str:
    if not archived_through:
        return ""
    if checked:
        return f" (events 1..{archived_through} checked from the archive files)"
    return (
        f"; events 1..{archived_through} are archived and were not checked (pass "
        "--archive FILE to check them)"
    )


@click.command("anchor")
@click.argument("run_id")
@click.option(
    "--sign",
    "sign",
    default=None,
    metavar="KEYFILE",
    help="Also print a signed anchor, signed with this Ed25519 private key (`continuum keygen`).",
)
@common
def anchor_cmd(s: Settings, run_id: str, sign: str | None) -> None:
    """Print an anchor SEQ:HASH of RUN's head; keep it elsewhere for verify --expect-head.

    With --sign, the signed anchor binds run, sequence and hash under your key: an auditor
    checks it with `continuum verify RUN --expect-head TOKEN --public-key PUBFILE`.
    """
    a = runtime(s).anchor(run_id, sign=sign)
    emit(s, a, [a["signed_anchor"]] if "signed_anchor" in a else [a["anchor"]])


COMMANDS = [verify_cmd, anchor_cmd]

"""Observations and plan branches: observe, observations, resolve-branch.

``observe`` records a reading with the CLI's origin (``deterministic``: a person's own
tool or script, not an agent's word). ``resolve-branch`` records a person's resolution
(origin human), so like ``decide`` it shows what is resolved (the branch, each
observation with every reading, values quoted and escaped) and asks at a terminal, and
refuses without one unless ``--yes``.
"""

from __future__ import annotations

import json
from typing import Any

import click

from continuum.cli.common import common, person_via, require_person, runtime
from continuum.cli.output import (
    AGENT_TEXT_NOTICE,
    Line,
    Settings,
    Styled,
    ask,
    emit,
    origin_label,
    write_lines,
)
from continuum.errors import UsageError
from continuum.eventlog.payloads import OBSERVATION_KINDS, RISKS
from continuum.runtime.results import BranchVerdict, Observed
from continuum.types import Origin
from continuum.untrusted import as_typed, json_safe, quoted

VALUE_CHARS = 400  # one reading's value in a listing
EXIT_HUMAN = 20  # a branch waits for a person (the verdict table's "human needed")


def resolve_command(run_id: str, branch_id: str) -> str:
    return f"continuum resolve-branch {as_typed(run_id)} {as_typed(branch_id)} --choice ..."


def _value(value: Any) -> str:
    if isinstance(value, str):
        return quoted(value, limit=VALUE_CHARS)
    return quoted(
        json_safe(json.dumps(value, ensure_ascii=False, sort_keys=True)), limit=VALUE_CHARS
    )


def observation_lines(o: Observed) -> list[Line]:
    """An observation for a person: subject, status, every signal's latest reading."""
    lines: list[Line] = [
        [
            Styled(o.status, bold=True, fg="green" if o.status == "verified" else "yellow"),
            f"  {quoted(o.observation_id, limit=120)}  ({o.kind}) of {quoted(o.subject, limit=200)}"
            f"  {o.independent_signals} independent signal(s)",
        ]
    ]
    for r in o.readings:
        lines.append(
            f"    {quoted(r['signal'], limit=80)} saw {_value(r['value'])}"
            + (f" from {quoted(r['source'], limit=200)}" if r.get("source") else "")
            + origin_label(r["origin"], r["sequence"])
        )
    return lines


def branch_lines(run_id: str, b: BranchVerdict) -> list[Line]:
    head = "waits for a person" if b.mode == "request_human" else f"resolved by {b.resolved_by}"
    lines: list[Line] = [
        [
            Styled(b.status, bold=True, fg="yellow" if b.mode == "request_human" else "green"),
            f"  branch {quoted(b.branch_id, limit=120)}  choice {quoted(b.choice, limit=120)}"
            f"  {b.risk} risk  {head}",
        ]
    ]
    rests = ", ".join(
        f"{quoted(o['observation_id'], limit=80)} ({o['status']})" for o in b.observations
    )
    lines.append(f"    rests on: {rests}")
    if b.rule:
        lines.append(f"    risk from: {quoted(b.rule, limit=300)}")
    if b.reason:  # continuum's words, every agent value in them already quoted
        lines.append(f"    why: {b.reason}")
    if b.note:
        lines.append(f"    note: {quoted(b.note, limit=300)}")
    if b.mode == "request_human":
        lines.append(f"    resolve: {resolve_command(run_id, b.branch_id)}")
    return lines


@click.command("observe")
@click.argument("run_id")
@click.argument("subject")
@click.option("--value", "value_text", required=True, help="What was seen (JSON, else text).")
@click.option("--signal", required=True, help="How it was seen (dom, ocr, an API's name).")
@click.option("--id", "observation_id", default=None, help="The observation (default: SUBJECT).")
@click.option("--kind", type=click.Choice(OBSERVATION_KINDS), default="content", show_default=True)
@click.option("--source", default=None, help="Where it was read (a URL, a tool).")
@common
def observe_cmd(
    s: Settings,
    run_id: str,
    subject: str,
    value_text: str,
    signal: str,
    observation_id: str | None,
    kind: str,
    source: str | None,
) -> None:
    """Record one signal's reading of an observation (trusted local origin).

    Two agreeing readings by independent signals verify an observation; a disagreement
    contests it. --value is read as JSON when it is JSON ("42", '{"a": 1}'), else as text.
    """
    try:
        value: Any = json.loads(value_text)
    except ValueError:
        value = value_text
    o = runtime(s).observe(
        run_id,
        subject,
        value,
        signal=signal,
        observation_id=observation_id,
        kind=kind,
        source=source,
    )
    emit(s, {"observation": o.model_dump(mode="json")}, observation_lines(o))


@click.command("observations")
@click.argument("run_id")
@common
def observations_cmd(s: Settings, run_id: str) -> None:
    """The run's observations (verified, unverified, contested, with every signal's
    latest reading and who recorded it) and its plan branches; exit 20 when a branch
    waits for a person."""
    rt = runtime(s)
    found, branches = rt.observations(run_id), rt.branches(run_id)
    lines: list[Line] = [AGENT_TEXT_NOTICE] if found or branches else []
    for o in found:
        lines += observation_lines(o)
    lines += [line for b in branches for line in branch_lines(run_id, b)]
    if not found and not branches:
        lines.append(f"run {quoted(run_id, limit=200)} has no observations and no branches")
    waiting = [b for b in branches if b.mode == "request_human"]
    emit(
        s,
        {
            "run_id": run_id,
            "observations": [o.model_dump(mode="json") for o in found],
            "branches": [b.model_dump(mode="json") for b in branches],
            "waiting": [b.branch_id for b in waiting],
        },
        lines,
        code=EXIT_HUMAN if waiting else 0,
    )


@click.command("resolve-branch")
@click.argument("run_id")
@click.argument("branch_id")
@click.option("--choice", required=True, help="The option the plan takes (the person's choice).")
@click.option("--reason", default=None, help="Why (recorded with the resolution).")
@click.option("--risk", type=click.Choice(RISKS), default=None, help="Its risk (never lowers it).")
@click.option(
    "--yes",
    "-y",
    is_flag=True,
    help="Do not ask: for a person's own script. Without it, resolve-branch asks on a "
    "terminal and refuses when stdin is not one.",
)
@common
def resolve_branch_cmd(
    s: Settings,
    run_id: str,
    branch_id: str,
    choice: str,
    reason: str | None,
    risk: str | None,
    yes: bool,
) -> None:
    """As a person, resolve a plan branch: the plan may take CHOICE at BRANCH_ID.

    Recorded with origin human, whatever its observations say. Shows the branch and
    every reading of its observations first and asks; without --yes it refuses when
    stdin is not a terminal (an agent with a shell is not a person). Refused if the
    branch changed while you read it.
    """
    require_person(yes, "resolving a plan branch", resolve_command(run_id, branch_id))
    rt = runtime(s, origin=Origin.HUMAN)
    known = {b.branch_id: b for b in rt.branches(run_id)}
    shown = known.get(branch_id)
    if shown is None:
        raise UsageError(
            f"run {run_id!r} has no branch {branch_id!r}",
            code="usage.unknown_branch",
            hint=f"`continuum observations {run_id}` lists its branches; nothing was written",
        )
    if not yes:
        wanted = set(o["observation_id"] for o in shown.observations)
        lines: list[Line] = [AGENT_TEXT_NOTICE, *branch_lines(run_id, shown)]
        for o in rt.observations(run_id):
            if o.observation_id in wanted:
                lines += observation_lines(o)
        write_lines(s, lines, err=True)
        if not ask(
            s, f"Record, as a person: take choice {quoted(choice, limit=120)} at this branch?"
        ):
            raise UsageError(
                "resolution declined; nothing was recorded",
                code="usage.declined",
                hint="run it again when you have decided",
            )
        now = {b.branch_id: b for b in rt.branches(run_id)}.get(branch_id)
        if now is None or now.sequence != shown.sequence:
            raise UsageError(
                "the branch changed while you read it; nothing was recorded",
                code="usage.branch_changed",
                hint="run it again to see what it is now",
            )
    resolved = rt.resolve_branch(
        run_id,
        branch_id,
        choice=choice,
        observations=[o["observation_id"] for o in shown.observations],
        risk=risk,
        reason=reason,
        via=person_via(yes),
    )
    emit(
        s,
        {"branch": resolved.model_dump(mode="json")},
        [
            f"branch {quoted(branch_id, limit=120)} resolved: choice "
            f"{quoted(choice, limit=120)} (recorded as human)"
        ],
    )


COMMANDS = (observe_cmd, observations_cmd, resolve_branch_cmd)

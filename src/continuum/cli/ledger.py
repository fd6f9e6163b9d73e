"""Action ledger commands: actions, reconcile, and intercept/complete/fail for scripts."""

from __future__ import annotations

import json
from typing import Any

import click

from continuum.cli.action_states import action_state, recorded, settled_by_words
from continuum.cli.common import common, person_via, require_person, runtime
from continuum.cli.output import (
    AGENT_TEXT_NOTICE,
    Line,
    Settings,
    ask,
    emit,
    origin_label,
    shown,
    write_lines,
)
from continuum.errors import NotFoundError, UsageError
from continuum.state.records import ActionRecord
from continuum.store import MAX_PAGE
from continuum.types import ActionStatus, Origin
from continuum.untrusted import json_safe, quoted

PROBE = "by continuum's probe"


def _json_arg(name: str, text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as e:
        raise UsageError(
            f"{name} is not valid JSON: {e}",
            code="usage.bad_json",
            hint=f'quote it, e.g. {name} \'{{"invoice": "INV-001"}}\'',
        ) from e


@click.command("actions")
@click.argument("run_id")
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_PAGE),
    default=100,
    show_default=True,
    help=f"List at most N actions (1-{MAX_PAGE}): those that are open (started, unknown, "
    "failed) first, then the settled ones, each in the order they were intercepted.",
)
@click.option(
    "--cursor",
    default=None,
    metavar="CURSOR",
    help="Continue a listing where the previous page stopped (its `next_cursor`).",
)
@click.option(
    "--all", "show_all", is_flag=True, help="List every action, page after page (no limit)."
)
@common
def actions_cmd(s: Settings, run_id: str, limit: int, cursor: str | None, show_all: bool) -> None:
    """List RUN's side effects and their states, open ones first, a page at a time.

    Exit 20 if any action of the run needs a person (counted over the whole run, not only
    the page shown)."""
    rt = runtime(s)
    if show_all:
        actions, next_cursor = rt.actions(run_id), None
    else:
        page = rt.actions_page(run_id, cursor=cursor, limit=limit)
        actions, next_cursor = page.actions, page.next_cursor
    interrupted = rt.interrupted(run_id)
    # Open and unconfirmed actions stay in the run's state: counted there, whatever the page.
    unresolved = [a for a in rt.state(run_id).actions.values() if a.needs_human]

    lines: list[Line] = []
    for a in actions:  # keys, ids, errors and notes are written by whoever ran the action
        # A settled action says who settled it (a person's reconcile, local code's
        # complete) beside who intercepted it (the label at the end).
        settled = a.status not in (ActionStatus.STARTED, ActionStatus.UNKNOWN)
        by = settled_by_words(a.settled_by) if settled else None
        state = action_state(a, interrupted=a.action_id in interrupted, by=by)
        lines.append(
            f"{a.action_id}  {quoted(a.action_key, limit=120):<38} {state:<10} "
            f"attempt={a.attempt}"
            + (f" external_id={quoted(a.external_id, limit=80)}" if a.external_id else "")
            + origin_label(str(a.origin), a.intercepted_sequence)
        )
        if a.error:  # on a completed action, what was said before it was settled
            said = "error" if a.status != ActionStatus.COMPLETED else "earlier error"
            lines.append(f"    {said}: {quoted(a.error, limit=200)}")
        if a.note:
            lines.append(f"    note: {quoted(a.note, limit=200)}")
    if next_cursor is not None:
        lines.append(
            f"{len(actions)} shown, more follow: `continuum actions {run_id} --cursor "
            f"{next_cursor}` (or --all)"
        )
    if unresolved:
        lines.append(
            f"{len(unresolved)} unresolved: reconcile each with "
            f"`continuum reconcile {run_id} ACTION --occurred|--not-occurred`"
        )
    emit(
        s,
        {
            "run_id": run_id,
            "actions": [
                {**a.model_dump(mode="json"), "interrupted": a.action_id in interrupted}
                for a in actions
            ],
            "next_cursor": next_cursor,
            "unresolved": len(unresolved),
        },
        lines or ["no actions"],
        code=20 if unresolved else 0,
    )


@click.command("reconcile")
@click.argument("run_id")
@click.argument("action")
@click.option(
    "--occurred/--not-occurred",
    default=None,
    help="Whether the side effect happened, as checked in the external system.",
)
@click.option(
    "--external-id", default=None, help="The external system's id for it, if it happened."
)
@click.option("--note", default=None, help="How it was checked.")
@click.option(
    "--force", is_flag=True, help="Settle it even though the process performing it is still alive."
)
@click.option(
    "--yes",
    "-y",
    is_flag=True,
    help="Do not ask: for a person's own script. Without it, reconcile asks on a "
    "terminal and refuses when stdin is not one.",
)
@click.option(
    "--probe",
    is_flag=True,
    help="Let continuum check instead: run the probe of the effect rule that gated "
    "ACTION (exit 0 happened, 1 did not, else still unknown).",
)
@click.option(
    "--dir",
    "project",
    type=click.Path(file_okay=False),
    default=".",
    help="With --probe: the project whose .continuum/effects.toml has the rule.",
)
@common
def reconcile_cmd(
    s: Settings,
    run_id: str,
    action: str,
    occurred: bool | None,
    external_id: str | None,
    note: str | None,
    force: bool,
    yes: bool,
    probe: bool,
    project: str,
) -> None:
    """As a person, settle ACTION (id or key) after checking the external system.

    Recorded with origin human: --not-occurred lets the action run again, so only a person
    may say it. Shows the action and asks first; without --yes it refuses when stdin is
    not a terminal (an agent with a shell is not a person). An agent's own "did not
    happen" (needs_confirmation) is settled the same way.

    With --probe, continuum runs the probe of the hook rule that gated the action and
    records its verdict itself (origin deterministic); exit 20 if the probe could not tell.
    """
    if probe:
        if occurred is not None:
            raise UsageError(
                "--probe decides whether it happened: drop --occurred/--not-occurred",
                code="usage.invalid",
                hint="use --probe, or say it yourself",
            )
        _reconcile_by_probe(s, run_id, action, project)
        return
    if occurred is None:
        raise UsageError(
            "say whether it happened: --occurred or --not-occurred",
            code="usage.missing_option",
            hint="check the external system first (or let an effect rule's probe check: --probe)",
        )
    flag = "--occurred" if occurred else "--not-occurred"
    require_person(yes, "a reconciliation", f"continuum reconcile {run_id} {action} {flag}")
    rt = runtime(s, origin=Origin.HUMAN)
    if not yes:
        rt.store.get_run(run_id)  # not found: say so before asking anything
        row = rt.store.get_action(run_id, action)
        if row is None:
            raise NotFoundError(
                f"action {action!r} not found in run {run_id!r}",
                code="not_found.action",
                hint=f"list actions with `continuum actions {run_id}`",
            )
        record = ActionRecord.model_validate(row.record)
        gone = record.action_id in rt.interrupted(run_id)
        write_lines(s, [AGENT_TEXT_NOTICE, *_action_review(record, interrupted=gone)], err=True)
        happened = "DID happen" if occurred else "did NOT happen"
        if not ask(s, f"Record, as a person, that this action {happened}?"):
            raise UsageError(
                "reconciliation declined; nothing was recorded",
                code="usage.declined",
                hint="run again when you have checked the external system",
            )
    rec = rt.reconcile(
        run_id,
        action,
        occurred=occurred,
        external_id=external_id,
        note=note,
        force=force,
        via=person_via(yes),
    )
    emit(
        s,
        {"action": rec.model_dump(mode="json")},
        [f"action {quoted(rec.action_key)}: {recorded(rec)}"],
    )


def _reconcile_by_probe(s: Settings, run_id: str, action: str, project: str) -> None:
    from continuum.hooks.probes import probe_action
    from continuum.hooks.registry import load_registry

    rt = runtime(s)
    rt.store.get_run(run_id)
    row = rt.store.get_action(run_id, action)
    if row is None:
        raise NotFoundError(
            f"action {action!r} not found in run {run_id!r}",
            code="not_found.action",
            hint=f"list actions with `continuum actions {run_id}`",
        )
    record = ActionRecord.model_validate(row.record)
    result = probe_action(rt, run_id, record, load_registry(project))
    if result.verdict == "no_probe":
        raise UsageError(
            f"no effect rule with a probe for action type "
            f"{quoted(record.action_type)} in {quoted(project)}/.continuum/effects.toml",
            code="usage.no_probe",
            hint="add a probe to the rule, pass --dir PROJECT, or settle it yourself "
            "with --occurred / --not-occurred",
        )
    after = rt.actions(run_id)
    now = next((a for a in after if a.action_id == record.action_id), record)
    if result.verdict == "unknown":  # only the evidence was recorded: the action is as it was
        gone = now.action_id in rt.interrupted(run_id)
        answer = (
            f"action {quoted(now.action_key)} is still {action_state(now, interrupted=gone)} "
            "(the probe could not tell; check it yourself)"
        )
    else:
        answer = f"action {quoted(now.action_key)}: {recorded(now, by=PROBE)}"
    lines: list[Line] = [
        f"probe: {quoted(result.command)}",
        f"exit {result.exit_code}: {result.verdict.replace('_', ' ')}",
        answer,
    ]
    if result.output:
        lines.append(f"output: {quoted(result.output, limit=400)}")
    emit(
        s,
        {
            "probe": {
                "command": result.command,
                "exit_code": result.exit_code,
                "verdict": result.verdict,
                "output": result.output,
            },
            "action": now.model_dump(mode="json"),
        },
        lines,
        code=20 if result.verdict == "unknown" else 0,
    )


def _action_review(a: ActionRecord, *, interrupted: bool) -> list[Line]:
    """The action a person is asked about, in the words `continuum actions` uses."""
    lines: list[Line] = [
        f"action {quoted(a.action_key)} of type {quoted(a.action_type)}: "
        f"{action_state(a, interrupted=interrupted)}, "
        f"attempt {a.attempt}" + origin_label(str(a.origin), a.intercepted_sequence),
        f"  arguments: {quoted(json_safe(json.dumps(a.arguments, ensure_ascii=False)), limit=400)}",
    ]
    if a.error:
        lines.append(f"  error: {shown(a.error)}")
    if a.status == ActionStatus.STARTED and a.owner:
        lines.append(
            f"  intercepted by process {a.owner.get('pid')} on host "
            f"{quoted(str(a.owner.get('host')))}"
            + ("; that process is gone" if interrupted else "; that process is still alive")
        )
    if a.failure_unconfirmed:
        lines.append(f"  reported as not done by {a.settled_by}: that needs a person's check")
    return lines


@click.command("intercept")
@click.argument("run_id")
@click.argument("action_type")
@click.option("--args", "arguments", default=None, help="The action's arguments as JSON.")
@click.option("--key", default=None, help="A stable business key, e.g. invoice:INV-001.")
@click.option(
    "--replay",
    type=click.Choice(["never", "safe", "idempotent", "reconcile"]),
    default=None,
    help="What may happen if it is interrupted (default never).",
)
@common
def intercept_cmd(
    s: Settings,
    run_id: str,
    action_type: str,
    arguments: str | None,
    key: str | None,
    replay: str | None,
) -> None:
    """Ask before a side effect. Exit 0 = proceed now; 20 = do not perform it."""
    r = runtime(s).intercept(
        run_id, action_type, _json_arg("--args", arguments), key=key, replay=replay
    )
    emit(
        s,
        r.model_dump(mode="json"),
        [
            f"{'PROCEED' if r.proceed else 'DO NOT PROCEED'}: {quoted(r.action_key)} ({r.status})",
            r.guidance,
        ],
        code=0 if r.proceed else 20,
    )


@click.command("complete")
@click.argument("run_id")
@click.argument("action")
@click.option("--external-id", default=None, help="The external system's id for the effect.")
@click.option("--result", default=None, help="The result as JSON.")
@common
def complete_cmd(
    s: Settings, run_id: str, action: str, external_id: str | None, result: str | None
) -> None:
    """Record that ACTION's side effect happened."""
    rec = runtime(s).complete(
        run_id, action, external_id=external_id, result=_json_arg("--result", result)
    )
    emit(
        s,
        {"action": rec.model_dump(mode="json")},
        [f"action {quoted(rec.action_key)}: {recorded(rec)}"],
    )


@click.command("fail")
@click.argument("run_id")
@click.argument("action")
@click.option("--error", default=None, help="What went wrong.")
@click.option("--certain", is_flag=True, help="It certainly did not happen (default: unknown).")
@common
def fail_cmd(s: Settings, run_id: str, action: str, error: str | None, certain: bool) -> None:
    """Record that ACTION failed; without --certain it is recorded as unknown."""
    rec = runtime(s).fail(run_id, action, error=error, certain=certain)
    emit(
        s,
        {"action": rec.model_dump(mode="json")},
        [f"action {quoted(rec.action_key)}: {recorded(rec)}"],
    )


@click.command("compensate")
@click.argument("run_id")
@click.argument("action")
@click.option("--note", default=None, help="What was done to undo it.")
@common
def compensate_cmd(s: Settings, run_id: str, action: str, note: str | None) -> None:
    """Record that completed ACTION was undone (after you undid it in the external system).

    The rollback verdict asks for this (`compensate_action:ID`) when an approval an action
    was done under is revoked. A later intercept of the action answers `compensated`.
    """
    rec = runtime(s).compensate(run_id, action, note=note)
    emit(
        s,
        {"action": rec.model_dump(mode="json")},
        [f"action {quoted(rec.action_key)}: {recorded(rec)}"],
    )


COMMANDS = [actions_cmd, reconcile_cmd, intercept_cmd, complete_cmd, fail_cmd, compensate_cmd]

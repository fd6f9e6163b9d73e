"""Commands about runs and their logs: init, start, finish, abort, record-progress, runs,
inspect, status, replay, append, event-types, where (`events` is in events.py)."""

from __future__ import annotations

import json
from typing import Any

import click

from continuum.cli.action_states import settled_by_words
from continuum.cli.common import common, runtime
from continuum.cli.output import (
    Line,
    Settings,
    Styled,
    emit,
    origin_label,
    provenance_label,
    shown,
)
from continuum.errors import UsageError
from continuum.eventlog.events import EventType
from continuum.state.projection import project
from continuum.state.records import State
from continuum.store import (
    RunInfo,
    is_postgres_url,
    redact_url,
    resolve_url,
    sqlite_path_from_url,
)
from continuum.types import RunStatus
from continuum.untrusted import quoted


def _state_summary(state: State) -> dict[str, Any]:
    return {
        "run_id": state.run_id,
        "status": str(state.status),
        "sequence": state.sequence,
        "goal": state.goal.model_dump(mode="json") if state.goal else None,
        "progress": state.progress.model_dump(mode="json"),
        "plan": state.plan,
        "decisions": len(state.decisions),
        "findings": len(state.findings),
        "evidence": len(state.evidence),
        "pending_work": len(state.pending_work),
        "approvals": {k: v.status for k, v in state.approvals.items()},
        "dependencies": {
            k: v.model_dump(mode="json", exclude={"provenance"})
            for k, v in state.dependencies.items()
        },
        "model": state.model,
        "actions": {k: str(v.status) for k, v in state.actions.items()},
        "unreviewed": state.unreviewed(),
        "last_checkpoint": state.last_checkpoint,
    }


def _progress_line(state: State) -> str:
    p = state.progress
    total = "?" if p.total is None else str(p.total)
    return f"progress: {p.completed}/{total} completed, {p.failed} failed, {p.pending} pending"


@click.command("init")
@common
def init_cmd(s: Settings) -> None:
    """Create an empty store (nothing happens to an existing one)."""
    rt = runtime(s, create=True)
    url = rt.store.url
    rt.close()
    emit(s, {"store": url, "schema_version": 1}, f"store ready: {url}")


@click.command("start")
@click.argument("run_id")
@click.option("--goal", required=True, help="What the run is for.")
@click.option("--total", type=click.IntRange(min=0), default=None, help="Number of work items.")
@click.option("--model", default=None, help="The model driving the run.")
@click.option(
    "--parent",
    metavar="RUN",
    default=None,
    help="Start it as a child of RUN (a subagent's run): RUN's resume then waits on its "
    "unsettled effects, and RUN is not finished before it.",
)
@common
def start_cmd(
    s: Settings, run_id: str, goal: str, total: int | None, model: str | None, parent: str | None
) -> None:
    """Start a run RUN_ID with a goal (creates the store if needed)."""
    rt = runtime(s, create=True)
    info = rt.start_run(run_id, goal, total=total, model=model, parent=parent)
    under = f" under {quoted(parent)}" if parent else ""
    emit(
        s,
        {"run": info.model_dump(mode="json"), "parent": parent},
        [f"started run {run_id}{under} (goal {quoted(goal)}) in {rt.store.url}"],
    )


def _finish(s: Settings, run_id: str, reason: str | None, *, aborted: bool) -> None:
    """Record that RUN ended (``run_completed`` / ``run_aborted``); a finished run is refused."""
    rt = runtime(s)
    info = rt.store.get_run(run_id)
    if info.status != RunStatus.ACTIVE:
        raise UsageError(
            f"run {run_id} is already {info.status}; nothing was recorded",
            code="usage.run_finished",
            run_id=run_id,
            status=str(info.status),
            hint=f"`continuum history {run_id}` and `continuum events {run_id}` "
            "show how it ended; start a new run with `continuum start`",
        )
    unresolved = [a.action_key for a in rt.state(run_id).actions.values() if a.needs_human]
    event = rt.finish_run(run_id, aborted=aborted, reason=reason)
    status = RunStatus.ABORTED if aborted else RunStatus.COMPLETED
    lines: list[Line] = [
        f"run {run_id} is now {status} (event #{event.sequence})"
        + (f": {quoted(reason)}" if reason else "")
    ]
    if unresolved:
        lines.append(
            f"note: {len(unresolved)} action(s) still need a person: "
            + ", ".join(quoted(k, limit=80) for k in unresolved[:10])
            + f"; settle them with `continuum reconcile {run_id} ACTION "
            "--occurred|--not-occurred`"
        )
    emit(
        s,
        {
            "run_id": run_id,
            "status": str(status),
            "event": event.model_dump(mode="json"),
            "unresolved_actions": unresolved,
        },
        lines,
    )


@click.command("finish")
@click.argument("run_id")
@click.option("--reason", default=None, help="Why or how it ended (optional).")
@common
def finish_cmd(s: Settings, run_id: str, reason: str | None) -> None:
    """Mark RUN completed (a run_completed event). A run already finished is refused."""
    _finish(s, run_id, reason, aborted=False)


@click.command("abort")
@click.argument("run_id")
@click.option("--reason", required=True, help="Why the run is given up (required).")
@common
def abort_cmd(s: Settings, run_id: str, reason: str) -> None:
    """Mark RUN aborted (a run_aborted event with the reason). A run already finished is
    refused."""
    if not reason.strip():
        raise UsageError(
            "--reason is empty: say why the run is aborted",
            code="usage.missing_option",
            hint='e.g. --reason "wrong input batch"',
        )
    _finish(s, run_id, reason, aborted=True)


@click.command("record-progress")
@click.argument("run_id")
@click.option(
    "--completed", type=click.IntRange(min=0), default=None, help="Work items done so far."
)
@click.option("--failed", type=click.IntRange(min=0), default=None, help="Work items failed.")
@click.option("--total", type=click.IntRange(min=0), default=None, help="Change the total.")
@common
def record_progress_cmd(
    s: Settings, run_id: str, completed: int | None, failed: int | None, total: int | None
) -> None:
    """Record RUN's progress in absolute numbers (as the MCP tool continuum_record_progress
    does), e.g. `continuum record-progress invoices --completed 3`. Numbers past the total
    are refused and nothing is recorded."""
    if completed is None and failed is None and total is None:
        raise UsageError(
            "nothing to record: give --completed, --failed or --total",
            code="usage.missing_option",
            hint=f"e.g. continuum record-progress {run_id} --completed 3",
        )
    rt = runtime(s)
    rt.store.get_run(run_id)  # a missing run is refused here, not created
    state = rt.record_progress(run_id, completed=completed, failed=failed, total=total)
    emit(
        s,
        {"run_id": run_id, "progress": state.progress.model_dump(mode="json")},
        [
            f"run {run_id}: {_progress_line(state).removeprefix('progress: ')} "
            f"(recorded {settled_by_words(rt.origin)})"
        ],
    )


@click.command("handoff")
@click.argument("run_id")
@click.option("--note", required=True, help="What the next session must know first.")
@common
def handoff_cmd(s: Settings, run_id: str, note: str) -> None:
    """Record a handoff note for RUN's next session (a reset): the next briefing and
    resume show it first, with who wrote it."""
    event = runtime(s).handoff(run_id, note)
    emit(
        s,
        {"run_id": run_id, "sequence": event.sequence, "note": note},
        [f"handoff note recorded in run {quoted(run_id)} (event #{event.sequence})"],
    )


def _tree(runs: list[RunInfo], parents: dict[str, str | None]) -> list[tuple[int, RunInfo]]:
    """Runs in creation order, each child right under its parent (depth, run); a run whose
    parent is not in the store is a root."""
    known = {r.run_id for r in runs}
    kids: dict[str | None, list[RunInfo]] = {}
    for r in runs:
        parent = parents.get(r.run_id)
        kids.setdefault(parent if parent in known else None, []).append(r)
    out: list[tuple[int, RunInfo]] = []
    stack = [(0, r) for r in reversed(kids.get(None, []))]
    seen: set[str] = set()
    while stack:
        depth, r = stack.pop()
        if r.run_id in seen:
            continue
        seen.add(r.run_id)
        out.append((depth, r))
        stack += [(depth + 1, c) for c in reversed(kids.get(r.run_id, []))]
    return out + [(0, r) for r in runs if r.run_id not in seen]  # a cycle: shown flat


@click.command("runs")
@click.option("--tree", is_flag=True, help="Show each child run under its parent.")
@common
def runs_cmd(s: Settings, tree: bool) -> None:
    """List the runs in the store (with --tree, child runs under their parents)."""
    rt = runtime(s)
    runs = rt.runs()
    parents = rt.parents() if tree else {}
    placed = _tree(runs, parents) if tree else [(0, r) for r in runs]
    # Run ids and goals come from whoever started the run (often an agent): quoted.
    lines = [
        f"{'  ' * depth + quoted(r.run_id):<26} {r.status:<10} events={r.head_sequence:<8} "
        f"{shown(r.goal)}"
        for depth, r in placed
    ]
    data: dict[str, Any] = {"runs": [r.model_dump(mode="json") for r in runs]}
    if tree:
        data["parents"] = parents
    emit(s, data, lines or ["no runs"])


@click.command("inspect")
@click.argument("run_id")
@common
def inspect_cmd(s: Settings, run_id: str) -> None:
    """Show the projected state of a run with provenance (read-only)."""
    rt = runtime(s)
    info = rt.store.get_run(run_id)
    state = rt.state(run_id)
    summary = _state_summary(state)
    lines: list[Line] = [
        [Styled(f"run {run_id}", bold=True), f"  [{state.status}]  head={info.head_sequence}"],
        "goal: "
        + (
            shown(state.goal.value) + provenance_label(state.goal.provenance) if state.goal else "-"
        ),
        _progress_line(state) + provenance_label(state.progress.provenance),
    ]
    for name, dep in state.dependencies.items():
        lines.append(
            f"dependency {quoted(name)}: {quoted(dep.version or dep.checksum)} "
            f"({quoted(dep.provider)}){provenance_label(dep.provenance)}"
        )
    for a in state.actions.values():
        lines.append(
            f"action {quoted(a.action_key)}: {a.status} (attempt {a.attempt})"
            f"{origin_label(str(a.origin), a.intercepted_sequence)}"
        )
    if state.unreviewed():
        lines.append("needs human review: " + ", ".join(state.unreviewed()))
    emit(
        s,
        {
            "run": info.model_dump(mode="json"),
            "state": summary,
            "checkpoint_warnings": rt.checkpoint_warnings(run_id),
        },
        lines,
    )


@click.command("status")
@click.argument("run_id")
@common
def status_cmd(s: Settings, run_id: str) -> None:
    """One-screen status of a run: lifecycle, head, progress, unresolved actions.

    Exit 20 when an action needs a person (as `actions`), else 0.
    """
    rt = runtime(s)
    info = rt.store.get_run(run_id)
    state = rt.state(run_id)
    unresolved = [a.action_key for a in state.actions.values() if a.needs_human]
    # Exit 20 with actions that need a person, as `actions` does: the same fact, one code.
    emit(
        s,
        {
            "run_id": run_id,
            "status": str(state.status),
            "head_sequence": info.head_sequence,
            "progress": state.progress.model_dump(mode="json", exclude={"provenance"}),
            "unresolved_actions": unresolved,
        },
        [
            f"{run_id}: {state.status}, {info.head_sequence} events",
            _progress_line(state),
            f"unresolved actions: {len(unresolved)}"
            + (f" ({', '.join(quoted(k) for k in unresolved)})" if unresolved else ""),
        ],
        code=20 if unresolved else 0,
    )


@click.command("replay")
@click.argument("run_id")
@click.option("--upto", type=click.IntRange(min=1), default=None, help="Fold events 1..N only.")
@common
def replay_cmd(s: Settings, run_id: str, upto: int | None) -> None:
    """Re-project the state from the log alone (optionally as it was at sequence N)."""
    rt = runtime(s)
    info = rt.store.get_run(run_id)
    if upto is not None and upto > info.head_sequence:
        raise UsageError(
            f"--upto {upto} is past the run's head ({info.head_sequence})",
            code="usage.bad_upto",
            hint=f"use a value up to {info.head_sequence}",
        )
    events = [e for e in rt.store.iter_events(run_id) if upto is None or e.sequence <= upto]
    state = project(run_id, events)
    emit(
        s,
        {"state": state.model_dump(mode="json")},
        [f"run {run_id} replayed through sequence {state.sequence}", _progress_line(state)],
    )


@click.command("append")
@click.argument("run_id")
@click.argument("event_type")
@click.option("--payload", default="{}", help="The event payload as a JSON object.")
@common
def append_cmd(s: Settings, run_id: str, event_type: str, payload: str) -> None:
    """Append one event (trusted local origin). EVENT_TYPE: see `continuum event-types`."""
    try:
        data = json.loads(payload)
    except ValueError as e:
        raise UsageError(
            f"--payload is not valid JSON: {e}",
            code="usage.bad_payload",
            hint="quote it, e.g. --payload '{\"doc\": 1}'",
        ) from e
    if not isinstance(data, dict):
        raise UsageError(
            "--payload must be a JSON object",
            code="usage.bad_payload",
            hint="wrap values in an object",
        )
    if event_type not in EventType._value2member_map_:
        raise UsageError(
            f"unknown event type {event_type!r}",
            code="usage.bad_event_type",
            hint="see `continuum event-types`",
        )
    event = runtime(s).append(run_id, event_type, data)
    emit(s, {"event": event.model_dump(mode="json")}, f"appended {event_type} as #{event.sequence}")


@click.command("event-types")
@common
def event_types_cmd(s: Settings) -> None:
    """List the event types continuum understands."""
    names = [str(t) for t in EventType]
    emit(s, {"event_types": names}, names)


@click.command("where")
@common
def where_cmd(s: Settings) -> None:
    """Show which store the flags and environment select (a path made absolute; a
    PostgreSQL URL without its password)."""
    url = resolve_url(s.db)
    store = redact_url(url) if is_postgres_url(url) else str(sqlite_path_from_url(url).absolute())
    emit(s, {"store": store}, [store])


COMMANDS = [
    init_cmd,
    start_cmd,
    finish_cmd,
    abort_cmd,
    record_progress_cmd,
    handoff_cmd,
    runs_cmd,
    inspect_cmd,
    status_cmd,
    replay_cmd,
    append_cmd,
    event_types_cmd,
    where_cmd,
]

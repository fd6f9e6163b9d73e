"""How a run's state changed: `diff RUN --from SEQ --to SEQ` and `history RUN`.

`diff` folds the log through the later sequence, once, keeping the state at the earlier
one on the way (the full fold: settled actions too), and compares the semantic state
component by component: what was added, changed or removed, every value quoted. `history` lists the checkpoints and the confirmations in log order.
Both only read.
"""

from __future__ import annotations

import json
from typing import Any

import click

from continuum.cli.common import common, runtime
from continuum.cli.output import Line, Settings, emit, origin_label
from continuum.errors import UsageError
from continuum.eventlog.events import EventType
from continuum.state.projection import fold, project
from continuum.state.records import State
from continuum.untrusted import quoted

# The action fields a person reads in a diff (owner, leases and sequences are bookkeeping).
ACTION_FIELDS = (
    "action_key",
    "action_type",
    "status",
    "attempt",
    "replay",
    "external_id",
    "error",
    "note",
    "settled_by",
)
# (name in the JSON and the text, State attribute) of the keyed components, in display order.
KEYED = (
    ("finding", "findings"),
    ("decision", "decisions"),
    ("evidence", "evidence"),
    ("work", "work"),
    ("approval", "approvals"),
    ("dependency", "dependencies"),
    ("action", "actions"),
)


def _comparable(state: State) -> dict[str, dict[str, Any]]:
    """Each component of ``state`` as {key: plain value}, provenance left out (a value
    recorded again by someone else has not changed)."""
    p = state.progress
    out: dict[str, dict[str, Any]] = {
        "status": {"": str(state.status)},
        "goal": {"": state.goal.value} if state.goal else {},
        "progress": {
            "": {
                "total": p.total,
                "completed": p.completed,
                "failed": p.failed,
                "pending": p.pending,
            }
        },
        "plan": {"": state.plan} if state.plan else {},
        "model": {"": state.model} if state.model else {},
    }
    for name, attribute in KEYED:
        items: dict[str, Any] = getattr(state, attribute)
        if name == "action":
            out[name] = {k: {f: getattr(a, f) for f in ACTION_FIELDS} for k, a in items.items()}
            out[name] = json.loads(json.dumps(out[name], default=str))  # enums as their values
        else:
            out[name] = {
                k: v.model_dump(mode="json", exclude={"provenance", "id", "name"})
                for k, v in items.items()
            }
    return out


def state_changes(before: State, after: State) -> list[dict[str, Any]]:
    """Every difference, in display order: component, key, change, before, after, fields."""
    old, new = _comparable(before), _comparable(after)
    changes: list[dict[str, Any]] = []
    for component in old:
        a, b = old[component], new[component]
        for key in [*a, *(k for k in b if k not in a)]:
            was, now = a.get(key), b.get(key)
            if was == now:
                continue
            change = "added" if key not in a else "removed" if key not in b else "changed"
            fields = (
                sorted(f for f in {*was, *now} if was.get(f) != now.get(f))
                if isinstance(was, dict) and isinstance(now, dict)
                else []
            )
            changes.append(
                {
                    "component": component,
                    "key": key or None,
                    "change": change,
                    "before": was,
                    "after": now,
                    "fields": fields,
                }
            )
    return changes


def _value(value: Any) -> str:
    """A value for a person: text quoted (it may be an agent's), numbers as they are."""
    if value is None:
        return "-"
    if isinstance(value, bool | int | float):
        return str(value)
    if isinstance(value, str):
        return quoted(value, limit=120)
    return quoted(json.dumps(value, ensure_ascii=False, sort_keys=True), limit=120)


def _fields(value: dict[str, Any]) -> str:
    shown = [
        f"{f} {_value(v)}"
        for f, v in value.items()
        if v not in (None, "", [], {}) and f != "action_key"
    ]
    return ", ".join(shown) or "-"


def change_line(c: dict[str, Any]) -> str:
    name = c["component"] if c["key"] is None else f"{c['component']} {quoted(c['key'])}"
    if c["component"] == "action":  # known to a person by its key; the id is for commands
        record = c["after"] or c["before"]
        name = f"action {quoted(record['action_key'])} ({c['key']})"
    if c["change"] == "added":
        now = c["after"]
        return f"{name}: added " + (_fields(now) if isinstance(now, dict) else _value(now))
    if c["change"] == "removed":
        was = c["before"]
        return (
            f"{name}: removed (was "
            + (_fields(was) if isinstance(was, dict) else _value(was))
            + ")"
        )
    if c["fields"]:
        return f"{name}: changed " + ", ".join(
            f"{f} {_value(c['before'].get(f))} -> {_value(c['after'].get(f))}" for f in c["fields"]
        )
    return f"{name}: changed {_value(c['before'])} -> {_value(c['after'])}"


@click.command("diff")
@click.argument("run_id")
@click.option(
    "--from",
    "start",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="The earlier point: the state after event SEQ (0: before the first).",
)
@click.option(
    "--to",
    "end",
    type=click.IntRange(min=0),
    default=None,
    help="The later point: the state after event SEQ (default: the head).",
)
@common
def diff_cmd(s: Settings, run_id: str, start: int, end: int | None) -> None:
    """How RUN's semantic state changed between two sequences: goal, progress, findings,
    decisions, evidence, dependencies, actions (and status, plan, model, work, approvals),
    each added, changed or removed, values quoted. Read-only."""
    rt = runtime(s)
    head = rt.store.get_run(run_id).head_sequence
    end = head if end is None else end
    if max(start, end) > head:
        raise UsageError(
            f"run {run_id} has no event {max(start, end)} (its head is {head})",
            code="usage.bad_sequence",
            hint=f"use sequences from 0 to {head}",
        )
    if start > end:
        raise UsageError(
            f"--from {start} is after --to {end}",
            code="usage.bad_sequence",
            hint="give the earlier sequence as --from",
        )
    # The full fold, settled actions included (the runtime's state keeps only open ones):
    # events 1..end, each verified as it is read, folded once through ``start``.
    events = list(rt.store.iter_raw(run_id, upto=end))
    before = project(run_id, [e for e in events if e.sequence <= start])
    after = fold(before, [e for e in events if e.sequence > start])
    changes = state_changes(before, after)
    lines: list[Line] = [f"run {run_id}: state after event {start} -> state after event {end}"]
    lines += [change_line(c) for c in changes] or ["no change"]
    emit(s, {"run_id": run_id, "from": start, "to": end, "changes": changes}, lines)


@click.command("history")
@click.argument("run_id")
@common
def history_cmd(s: Settings, run_id: str) -> None:
    """RUN's checkpoints (sequence, reason, time) and human confirmations (sequence,
    through_sequence, scope, origin), in log order. Read-only."""
    rt = runtime(s)
    marks = {EventType.CHECKPOINTED, EventType.REVIEW_CONFIRMED}
    events = [e for e in rt.store.iter_events(run_id) if e.type in marks]  # each verified
    confirmations = {c.sequence: c for c in rt.state(run_id).confirmations}
    entries: list[dict[str, Any]] = []
    lines: list[Line] = []
    for e in events:
        base = {"sequence": e.sequence, "time": e.timestamp, "origin": str(e.source)}
        if e.type == EventType.CHECKPOINTED:
            through, reason = e.payload.get("through_sequence"), e.payload.get("reason")
            entries.append(
                {
                    "kind": "checkpoint",
                    **base,
                    "through_sequence": through,
                    "reason": reason if isinstance(reason, str) else None,
                }
            )
            lines.append(
                f"{e.sequence:>6}  {e.timestamp}  checkpoint through {_value(through)}"
                + (f", reason {quoted(reason)}" if isinstance(reason, str) else "")
                + origin_label(str(e.source))
            )
        elif (c := confirmations.get(e.sequence)) is not None:
            entries.append(
                {
                    "kind": "confirmation",
                    **base,
                    "through_sequence": c.through_sequence,
                    "scope": c.scope,
                    "counted": c.counted,
                }
            )
            lines.append(
                f"{e.sequence:>6}  {e.timestamp}  confirmation through "
                f"{c.through_sequence} of {', '.join(quoted(x) for x in c.scope)}, "
                f"origin {c.origin}"
                + (
                    ""
                    if c.counted
                    else " (not counted: only a person's confirmation covers self-reported state)"
                )
            )
    head = [
        f"run {run_id}: {sum(x['kind'] == 'checkpoint' for x in entries)} checkpoint(s), "
        f"{sum(x['kind'] == 'confirmation' for x in entries)} confirmation(s)"
    ]
    emit(s, {"run_id": run_id, "history": entries}, head + lines)


COMMANDS = [diff_cmd, history_cmd]

"""`events RUN`: a run's log, one readable line per event. Only reads.

A line says what happened in the words of its type (``action_completed
send_invoice:invoice:INV-1  external_id msg-1``), not the payload's JSON: for the action
events the action's key and its outcome, for the others the few fields that matter, for a
type continuum does not know a compact ``key=value`` list. Every value in it was written
by whoever recorded the event (often an agent): a plain token (letters, digits and
``_.:/@+#-``) is shown bare, which cannot hide a space or a quote; anything else in double
quotes, escaped (``untrusted.quoted``), and every line passes through the renderer, so no
value can move the cursor or reorder the line. ``-v`` adds the full payload as JSON,
``--json`` gives the events exactly as stored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import click

from continuum.cli.common import common, runtime
from continuum.cli.live import follow_events
from continuum.cli.output import Line, Settings, emit
from continuum.errors import UsageError
from continuum.eventlog.event_model import Event
from continuum.eventlog.events import EventType
from continuum.untrusted import quoted

TYPE_WIDTH = 21  # action_marked_unknown; a longer type pushes its line along
TEXT_LIMIT = 60  # characters of a free text shown (goal, reason, error, note)
TOKEN = re.compile(r"[\w.:/@+#-]{1,80}", re.ASCII)
MAX_FIELDS = 6  # of an unknown type's key=value list
MAX_STEPS = 3  # plan steps shown

# The action an event is about: (action type, key or None, action key), by action id.
ActionName = tuple[str, str | None, str]
Resolve = Callable[[str], ActionName | None]


def token(value: Any) -> str:
    """An identifier-like value: bare when it is one plain token, else quoted."""
    if value is None:
        return "-"
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    if isinstance(value, str) and TOKEN.fullmatch(value):
        return value
    return text(value)


def text(value: Any, limit: int = TEXT_LIMIT) -> str:
    """Free text (or a structure), always in quotes: it may hold spaces and look like ours."""
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return quoted(value, limit=limit)


def key_values(payload: dict[str, Any], *, skip: tuple[str, ...] = ()) -> list[str]:
    """A compact ``key=value`` list (an unknown type, or a known one without its fields)."""
    shown = [f"{token(k)}={token(v)}" for k, v in payload.items() if k not in skip]
    if len(shown) > MAX_FIELDS:
        shown = [*shown[:MAX_FIELDS], f"+{len(shown) - MAX_FIELDS} more (-v)"]
    return shown


class EventLines:
    """Turns events into lines, remembering which action each action id names.

    An action's later events carry only its id: the name comes from its
    ``action_intercepted`` event when that was shown, else from ``resolve`` (the store's
    action index), else the id itself is shown.
    """

    def __init__(self, resolve: Resolve, *, verbose: bool = False) -> None:
        self.resolve = resolve
        self.verbose = verbose
        self.actions: dict[str, ActionName | None] = {}

    def line(self, e: Event) -> Line:
        kind = str(e.type) if e.type in EventType._value2member_map_ else quoted(e.type)
        parts = self.summary(e)
        out = (
            f"{e.sequence:>6}  {_time(e.timestamp)}  {e.source:<14}  {kind:<{TYPE_WIDTH}}"
            + "".join(f"  {p}" for p in parts)
        )
        if self.verbose:
            out += "  payload " + json.dumps(e.payload, ensure_ascii=False, sort_keys=True)
        return out.rstrip()

    def summary(self, e: Event) -> list[str]:
        p = e.payload
        describe = SUMMARIES.get(str(e.type))
        if describe is None:
            return key_values(p)
        lead = self._action(e) if str(e.type).startswith("action_") else []
        return (lead + describe(p) + _via(p)) or key_values(p)

    def _action(self, e: Event) -> list[str]:
        p = e.payload
        action_id = p.get("action_id")
        if not isinstance(action_id, str):
            return []
        if e.type == EventType.ACTION_INTERCEPTED:
            name = _intercepted_name(p)
            self.actions[action_id] = name
            if name is None:
                return [token(action_id)]
            action_type, key, action_key = name
            return [token(action_type), f"key {token(key)}"] if key else [token(action_key)]
        if action_id not in self.actions:
            self.actions[action_id] = self.resolve(action_id)
        name = self.actions[action_id]
        return [token(name[2] if name is not None else action_id)]


def _intercepted_name(p: dict[str, Any]) -> ActionName | None:
    action_type, key, action_key = p.get("action_type"), p.get("key"), p.get("action_key")
    if not isinstance(action_type, str) or not isinstance(action_key, str):
        return None
    return action_type, key if isinstance(key, str) and key else None, action_key


def _time(timestamp: str) -> str:
    """The time to the second (the stored one, to the microsecond, is in -v and --json)."""
    if re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", timestamp):
        return timestamp[:19] + "Z"
    return token(timestamp)


def _fields(p: dict[str, Any], *names: str, free: tuple[str, ...] = ()) -> list[str]:
    """``name value`` for each of ``names`` present (``free`` ones quoted as text)."""
    out = []
    for name in names:
        value = p.get(name)
        if value is None or value == "" or value == []:
            continue
        if isinstance(value, list):
            out.append(f"{name} " + ",".join(token(v) for v in value))
        else:
            out.append(f"{name} {text(value) if name in free else token(value)}")
    return out


def _said(p: dict[str, Any], name: str = "text") -> list[str]:
    """An item's text (a finding's, a decision's), quoted."""
    value = p.get(name)
    return [text(value)] if isinstance(value, str) and value else []


def _progress(p: dict[str, Any]) -> list[str]:
    completed, total = p.get("completed"), p.get("total")
    out = []
    if completed is not None and total is not None:
        out.append(f"completed {token(completed)}/{token(total)}")
    else:
        out += _fields(p, "completed", "total")
    return out + _fields(p, "failed", "goal", free=("goal",))


def _plan(p: dict[str, Any]) -> list[str]:
    steps = p.get("steps")
    if not isinstance(steps, list):
        return []
    shown = ", ".join(text(s, 40) for s in steps[:MAX_STEPS])
    more = f", +{len(steps) - MAX_STEPS} more" if len(steps) > MAX_STEPS else ""
    return [f"{len(steps)} step(s): {shown}{more}"]


def _dependencies(p: dict[str, Any]) -> list[str]:
    listed = p.get("dependencies")
    deps = listed if isinstance(listed, list) else [p]
    out = []
    for dep in deps:
        if not isinstance(dep, dict) or "name" not in dep:
            continue
        value = dep.get("version") or dep.get("checksum")
        out.append(token(dep["name"]) + (f"={token(value)}" if value is not None else ""))
    return out


def _via(p: dict[str, Any]) -> list[str]:
    """How a person's decision was given (``via``: terminal, script, page, mcp), and
    the page's role or the MCP client's name (escaped: a client names itself)."""
    via = p.get("via")
    if not isinstance(via, dict) or not isinstance(via.get("channel"), str):
        return []
    who = [f"{k} {text(via[k], 60)}" for k in ("role", "client") if isinstance(via.get(k), str)]
    return [f"via {token(via['channel'])}" + (f" ({', '.join(who)})" if who else "")]


def _reconciled(p: dict[str, Any]) -> list[str]:
    occurred = p.get("occurred")
    said = [] if not isinstance(occurred, bool) else ["occurred" if occurred else "did not occur"]
    probe = ["by probe"] if p.get("probe") else []
    return said + _fields(p, "external_id", "note", free=("note",)) + probe


def _archived(p: dict[str, Any]) -> list[str]:
    first, through = p.get("from_sequence"), p.get("through_sequence")
    out = [f"events {token(first)}..{token(through)}"] if first is not None else []
    return out + _fields(p, "archive_name", "events")


def _with(*names: str, free: tuple[str, ...] = ()) -> Callable[[dict[str, Any]], list[str]]:
    return lambda p: _fields(p, *names, free=free)


def _item(id_field: str, label: str, *more: str) -> Callable[[dict[str, Any]], list[str]]:
    def describe(p: dict[str, Any]) -> list[str]:
        named = [f"{label} {token(p[id_field])}"] if p.get(id_field) else []
        return named + _said(p) + _fields(p, *more, free=("reason",))

    return describe


_REASON = _with("reason", free=("reason",))

# The few fields that matter, per known type (the action events also lead with the action).
SUMMARIES: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    EventType.RUN_STARTED: _with("goal", "total", "model", "parent", free=("goal",)),
    EventType.GOAL_SET: _with("goal", free=("goal",)),
    EventType.CHILD_STARTED: _with("child_run_id", "goal", free=("goal",)),
    EventType.HANDOFF_RECORDED: _with("note", free=("note",)),
    EventType.BUDGET_SET: _with("usd_micros", "tokens", "reason", free=("reason",)),
    EventType.RUN_COMPLETED: _REASON,
    EventType.RUN_ABORTED: _REASON,
    EventType.PROGRESS_RECORDED: _progress,
    EventType.PLAN_SET: _plan,
    EventType.WORK_ADDED: _item("item_id", "item"),
    EventType.WORK_COMPLETED: _item("item_id", "item"),
    EventType.WORK_FAILED: _item("item_id", "item"),
    EventType.DECISION_CREATED: _item("decision_id", "decision", "findings", "evidence"),
    EventType.DECISION_INVALIDATED: _item("decision_id", "decision", "reason"),
    EventType.EVIDENCE_ADDED: _item("evidence_id", "evidence", "path", "size"),
    EventType.FINDING_ADDED: _item("finding_id", "finding", "evidence"),
    EventType.FINDING_INVALIDATED: _item("finding_id", "finding", "reason"),
    EventType.DEPENDENCY_DECLARED: _dependencies,
    EventType.ENVIRONMENT_CHANGED: _with("name", "status"),
    EventType.PERCEPTION_OBSERVED: lambda p: (
        [f"observation {token(p.get('observation_id'))}"]
        + _fields(p, "subject", "signal", "value", "kind", "status", free=("subject", "value"))
    ),
    EventType.BRANCH_RESOLVED: lambda p: (
        [f"branch {token(p.get('branch_id'))}"]
        + _fields(p, "choice", "risk", "observations", "verdict", "reason", free=("reason",))
    ),
    EventType.APPROVAL_REQUESTED: _item("approval_id", "approval", "action_type", "key", "rule"),
    EventType.APPROVAL_GRANTED: _item("approval_id", "approval", "scope", "reason"),
    EventType.APPROVAL_DENIED: _item("approval_id", "approval", "reason"),
    EventType.APPROVAL_REVOKED: _item("approval_id", "approval", "reason"),
    EventType.MODEL_CHANGED: _with("model"),
    EventType.MODEL_ASSUMPTION_RECORDED: _item("assumption_id", "assumption", "status"),
    EventType.CHECKPOINTED: lambda p: [f"through {token(p.get('through_sequence'))}"] + _REASON(p),
    EventType.REVIEW_CONFIRMED: lambda p: (
        [f"through {token(p.get('through_sequence'))}"] + _fields(p, "scope")
    ),
    EventType.REGISTRY_ACCEPTED: _with("path", "rules"),
    EventType.HISTORY_ARCHIVED: _archived,
    EventType.HISTORY_IMPORTED: lambda p: (
        [f"through {token(p.get('through_sequence'))}"] + _fields(p, "signed_by", "source")
    ),
    EventType.RUN_FORKED: lambda p: (
        [f"from {token(p.get('from_run'))} through {token(p.get('through_sequence'))}"]
    ),
    EventType.ACTION_INTERCEPTED: lambda p: (
        ["attempt 1"]
        + ([f"replay {token(p['replay'])}"] if p.get("replay") not in (None, "never") else [])
        + _fields(p, "approval_id")
    ),
    EventType.ACTION_RETRIED: _with("attempt", "reason", "approval_id", free=("reason",)),
    EventType.ACTION_COMPLETED: _with("external_id"),
    EventType.ACTION_FAILED: _with("error", free=("error",)),
    EventType.ACTION_MARKED_UNKNOWN: _REASON,
    EventType.ACTION_RECONCILED: _reconciled,
    EventType.ACTION_COMPENSATED: _with("note", free=("note",)),
}

# Known types without a payload of their own (no schema in payloads.py): their fields as
# key=value, like an unknown type's. Every other known type has its entry in SUMMARIES.
FREE_FORM = frozenset(
    {
        EventType.VALIDATION_RECORDED,
        EventType.RECOVERY_STARTED,
        EventType.RECOVERY_COMPLETED,
        EventType.RECOVERY_BLOCKED,
    }
)


@click.command("events")
@click.argument("run_id")
@click.option(
    "--after", type=click.IntRange(min=0), default=0, help="Only events after this sequence."
)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many events.")
@click.option(
    "--follow",
    "-f",
    is_flag=True,
    help="Keep printing new events as they are appended, until Ctrl-C (exit 130); "
    "with --json one event per line.",
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Add each event's full payload, as JSON, to its line.",
)
@common
def events_cmd(
    s: Settings, run_id: str, after: int, limit: int | None, follow: bool, verbose: bool
) -> None:
    """Print a run's events in order (each verified as it is read), one line each:
    sequence, time, origin, type, and what happened (the action and its outcome; for
    other types the fields that matter). Values written by the run's agent are quoted
    and escaped unless they are one plain word."""
    rt = runtime(s)

    def resolve(action_id: str) -> ActionName | None:
        row = rt.store.get_action(run_id, action_id)
        if row is None:
            return None
        r = row.record
        return (str(r.get("action_type")), r.get("key"), str(r.get("action_key", action_id)))

    lines = EventLines(resolve, verbose=verbose)
    if follow:
        if limit is not None:
            raise UsageError(
                "--limit and --follow do not go together",
                code="usage.invalid",
                hint="use --after N to start from sequence N",
            )
        follow_events(s, rt, run_id, after, line=lines.line)
    events = rt.events(run_id, after)[: limit or None]
    emit(
        s,
        {"run_id": run_id, "events": [e.model_dump(mode="json") for e in events]},
        [lines.line(e) for e in events] or ["no events"],
    )


COMMANDS = [events_cmd]

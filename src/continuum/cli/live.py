"""Live views: `events RUN --follow` and `watch [RUN]`. Both only read.

They poll the store: a cheap look at the heads every short while, backing off (up to a
bound) while nothing changes and coming back to the short interval when something does;
the log is read only past what was already shown, each event verified as it is read.
Ctrl-C is how they end: exit 130, without an error message.

`watch` redraws a frame only when a head changes. On a terminal it repaints the screen
with plain ANSI (cursor home, erase), which works over SSH without curses; when stdout is
not a terminal it writes each new frame as plain lines, no cursor movement. It never
writes to the store: it calls the runtime's read methods only.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NoReturn

import click

from continuum.cli.action_states import action_state
from continuum.cli.common import common, runtime
from continuum.cli.output import (
    Exit,
    Line,
    Settings,
    Styled,
    emit,
    provenance_label,
    render_line,
    shown,
    use_color,
    verdict_styled,
    write_lines,
)
from continuum.eventlog.event_model import Event
from continuum.runtime.facade import Continuum
from continuum.store import RunInfo, redact_url
from continuum.types import ActionStatus, RunStatus
from continuum.untrusted import json_safe, quoted

INTERRUPTED = 130  # the shell's 128 + SIGINT: how a live view ends
FIRST_POLL = 0.1  # seconds; doubled while nothing changes, up to the view's interval
FOLLOW_MAX_POLL = 1.0
MAX_RUNS_SHOWN = 10
# Repaint in place: cursor home; each line erases what was left of the old one; erase
# below. Our own control sequences, written around (never inside) rendered lines.
HOME, ERASE_LINE, ERASE_BELOW, CLEAR = "\x1b[H", "\x1b[K", "\x1b[J", "\x1b[2J"


class Backoff:
    """Sleep a short while, twice as long each time nothing changed, never over ``limit``."""

    def __init__(self, limit: float, first: float = FIRST_POLL) -> None:
        self.first = min(first, limit)
        self.limit = limit
        self.delay = self.first

    def changed(self) -> None:
        self.delay = self.first

    def wait(self) -> None:
        time.sleep(self.delay)
        self.delay = min(self.delay * 2, self.limit)


def _json_line(document: dict[str, Any]) -> None:
    sys.stdout.write(json_safe(json.dumps(document, sort_keys=True, ensure_ascii=False)) + "\n")
    sys.stdout.flush()


def follow_events(
    s: Settings, rt: Continuum, run_id: str, after: int, *, line: Callable[[Event], Line]
) -> NoReturn:
    """Print the events after ``after``, then each new one as it is appended, until Ctrl-C.

    Only the head is looked at while nothing changes; the log is read past the last
    sequence shown, and each event read is verified (hash and link to the one before)."""
    last = after
    backoff = Backoff(FOLLOW_MAX_POLL)
    try:
        while True:
            if rt.store.get_run(run_id).head_sequence > last:
                events = rt.events(run_id, last)
                for e in events:
                    if s.json:
                        _json_line(e.model_dump(mode="json"))
                if not s.json:
                    write_lines(s, [line(e) for e in events])
                if events:
                    last = events[-1].sequence
                    backoff.changed()
            backoff.wait()
    except KeyboardInterrupt:
        raise Exit(INTERRUPTED) from None


# -- watch ------------------------------------------------------------------------------


def _focus(runs: list[RunInfo], wanted: str | None) -> str | None:
    """The run to show: the one asked for, else the latest active one, else the latest."""
    if wanted is not None:
        return wanted
    pool = [r for r in runs if r.status == RunStatus.ACTIVE] or runs
    return pool[-1].run_id if pool else None


def _frame(
    rt: Continuum, runs: list[RunInfo], run_id: str | None
) -> tuple[dict[str, Any], list[Line]]:
    """What `watch` shows now, as data and as lines (every agent value quoted)."""
    active = sum(r.status == RunStatus.ACTIVE for r in runs)
    lines: list[Line] = [f"runs: {len(runs)} ({active} active)"]
    for r in runs[-MAX_RUNS_SHOWN:]:
        mark = "*" if r.run_id == run_id else " "
        lines.append(
            f" {mark} {quoted(r.run_id, limit=40):<26} {r.status:<10} "
            f"head {r.head_sequence:<7} {shown(r.goal, limit=60)}"
        )
    if len(runs) > MAX_RUNS_SHOWN:
        lines.append(f"   ... and {len(runs) - MAX_RUNS_SHOWN} earlier (`continuum runs`)")
    data: dict[str, Any] = {"runs": [r.model_dump(mode="json") for r in runs], "run": None}
    if run_id is None:
        lines += ["", "no runs yet: start one with `continuum start RUN --goal G`"]
        return data, lines
    info = rt.store.get_run(run_id)
    state = rt.state(run_id)
    recovery = rt.resume(run_id)
    # A started action whose process is gone is what resume calls uncertain (read from
    # the verdict: listing every action of a long run to find them would cost the history).
    uncertain = {u["action_id"] for u in recovery.uncertain_actions}
    unresolved = [a for a in state.actions.values() if a.needs_human]
    interrupted = {
        a.action_id
        for a in unresolved
        if a.status == ActionStatus.STARTED and a.action_id in uncertain
    }
    unreviewed = state.unreviewed()
    p = state.progress
    lines += [
        "",
        [Styled(f"run {run_id}", bold=True), f"  [{state.status}]  head {info.head_sequence}"],
        "goal: "
        + (
            shown(state.goal.value) + provenance_label(state.goal.provenance) if state.goal else "-"
        ),
        f"progress: {p.completed}/{'?' if p.total is None else p.total} completed, "
        f"{p.failed} failed, {p.pending} pending" + provenance_label(p.provenance),
        f"unresolved actions: {len(unresolved)}",
    ]
    human: list[Line] = []
    for a in unresolved:
        status = action_state(a, interrupted=a.action_id in interrupted)
        lines.append(f"  {quoted(a.action_key, limit=80)}: {status}, attempt {a.attempt}")
        human.append(
            f"  reconcile {quoted(a.action_key, limit=80)}: continuum reconcile "
            f"{run_id} {a.action_id} --occurred|--not-occurred"
        )
    if unreviewed:
        human.append(
            f"  confirm {', '.join(unreviewed)} (self-reported, not yet confirmed): "
            f"continuum confirm {run_id}"
        )
    lines += ["needs a person:" if human else "needs a person: nothing", *human]
    if not recovery.safe and recovery.required_actions:
        lines.append("required before it may resume, in order:")
        lines += [f"  {i}. {step}" for i, step in enumerate(recovery.required_actions, 1)]
    lines.append(
        [
            verdict_styled("verdict", recovery.mode),
            f"  next allowed action: {recovery.next_allowed_action or '-'}",
        ]
    )
    data["run"] = {
        "run_id": run_id,
        "status": str(state.status),
        "head_sequence": info.head_sequence,
        "goal": state.goal.value if state.goal else None,
        "progress": p.model_dump(mode="json", exclude={"provenance"}),
        "unresolved_actions": [
            {
                "action_id": a.action_id,
                "action_key": a.action_key,
                "status": str(a.status),
                "interrupted": a.action_id in interrupted,
            }
            for a in unresolved
        ],
        "confirmation_needed": list(unreviewed),
        "required_actions": recovery.required_actions,
        "verdict": recovery.mode,
        "next_allowed_action": recovery.next_allowed_action,
    }
    return data, lines


def _draw(s: Settings, header: str, lines: list[Line], *, tty: bool, first: bool) -> None:
    color = use_color(s)
    rendered = [render_line(line, color=color) for line in [header, *lines]]
    if tty:
        sys.stdout.write(
            (CLEAR if first else "")
            + HOME
            + "".join(text + ERASE_LINE + "\n" for text in rendered)
            + ERASE_BELOW
        )
    else:
        sys.stdout.write(("" if first else "\n") + "".join(text + "\n" for text in rendered))
    sys.stdout.flush()


@click.command("watch")
@click.argument("run_id", required=False)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05, max=60),
    default=1.0,
    show_default=True,
    help="Longest wait, in seconds, between two looks at the store.",
)
@click.option("--once", is_flag=True, help="Show one frame and exit.")
@common
def watch_cmd(s: Settings, run_id: str | None, interval: float, once: bool) -> None:
    """A live view of RUN (default: the latest active run): runs, progress, unresolved
    actions, what needs a person and the verdict, redrawn when a head moves. Read-only.

    On a terminal the screen is repainted in place (plain ANSI); otherwise each new frame
    is printed as plain lines. With --json, one JSON document per frame, one per line
    (with --once, exactly one). Ctrl-C ends it (exit 130).
    """
    rt = runtime(s)
    if run_id is not None:
        rt.store.get_run(run_id)  # not found: say so now, not in a frame
    store = redact_url(rt.store.url)
    tty = sys.stdout.isatty() and not s.json
    backoff = Backoff(interval)
    seen: tuple[tuple[str, int, str], ...] | None = None
    try:
        while True:
            runs = rt.runs()
            heads = tuple((r.run_id, r.head_sequence, str(r.status)) for r in runs)
            if heads != seen:
                data, lines = _frame(rt, runs, _focus(runs, run_id))
                if once:
                    emit(s, {"store": store, **data}, [f"continuum watch: {store}", *lines])
                    return
                if s.json:
                    _json_line({"ok": True, "store": store, **data})
                else:
                    at = datetime.now(UTC).strftime("%H:%M:%S UTC")
                    _draw(
                        s,
                        f"continuum watch: {store}  ({at}; Ctrl-C to quit)",
                        lines,
                        tty=tty,
                        first=seen is None,
                    )
                seen = heads
                backoff.changed()
            backoff.wait()
    except KeyboardInterrupt:
        raise Exit(INTERRUPTED) from None


COMMANDS = [watch_cmd]

"""Approvals and the notification outbox: approvals, decide, outbox (deliver, retry).

``decide`` records a person's decision (origin human), so like ``confirm`` and
``reconcile`` it shows what is decided and asks at a terminal, and refuses without one
unless ``--yes`` (a person's own script) is given. Agent text (keys, arguments, action
types) is quoted and escaped in every line; JSON escapes C1 and bidi characters.
"""

from __future__ import annotations

import json
import signal
import threading
from types import FrameType
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
from continuum.eventlog.notices import decide_command
from continuum.ledger.approvals import ApprovalInfo
from continuum.ledger.outbox import DeliveryReport, deliver_loop
from continuum.store.base import MAX_PAGE, OUTBOX_STATUSES
from continuum.store.models import OutboxRow
from continuum.types import Origin
from continuum.untrusted import as_typed, json_safe, quoted


def approval_json(a: ApprovalInfo) -> dict[str, Any]:
    data = a.model_dump(mode="json", exclude={"id", "cites", "model", "provenance"})
    return {"approval_id": a.id, **data, "command": decide_command(a.id) if a.pending else None}


DEFAULT_APPROVALS = 50  # ``approvals --limit``
LIST_ARGUMENT_CHARS = 400  # one line per approval in a listing
PROMPT_ARGUMENT_CHARS = 16_000  # what ``decide`` shows before it says it stopped


def _arguments_lines(a: ApprovalInfo, *, detail: bool) -> list[Line]:
    """The arguments as the agent sent them. In a listing: one line, shortened (and saying
    so). For a decision (``detail``): in full, as indented JSON, each line marked as the
    agent's; past ``PROMPT_ARGUMENT_CHARS`` it stops and says so, with the digest the
    approval is bound to and where to read the rest: never cut silently."""
    if not detail:
        text = json_safe(json.dumps(a.arguments, ensure_ascii=False, sort_keys=True))
        more = (
            f"  (shortened; in full: continuum approvals {as_typed(a.run_id)} --all --json)"
            if len(text) > LIST_ARGUMENT_CHARS
            else ""
        )
        return [f"    arguments: {quoted(text, limit=LIST_ARGUMENT_CHARS)}{more}"]
    pretty = json_safe(json.dumps(a.arguments, ensure_ascii=False, sort_keys=True, indent=2))
    shown = pretty[:PROMPT_ARGUMENT_CHARS]
    lines: list[Line] = [
        "    arguments: in full, as JSON written by the agent (each line marked |):"
    ]
    # JSON quotes every string and escapes its newlines, so no value can end the block or
    # start a line of its own; ``render_line`` escapes any control character left.
    lines += [f"      | {line}" for line in shown.split("\n")]
    if len(pretty) > len(shown):
        lines.append(
            f"    ARGUMENTS CUT: the first {len(shown)} of {len(pretty)} characters are "
            f"shown above. The approval is bound to arguments with sha256 digest "
            f"{a.arguments_hash}; read them all with `continuum approvals "
            f"{as_typed(a.run_id)} --all --json` before deciding"
        )
    return lines


def approval_lines(a: ApprovalInfo, *, detail: bool = False) -> list[Line]:
    """An approval for a person: every agent-supplied value quoted and escaped."""
    what = quoted(a.action_key or a.action_type or a.id, limit=120)
    head: list[Line] = [
        [
            Styled(a.id, bold=True),
            f"  run {quoted(a.run_id, limit=80)}  {what}  {a.status}"
            + origin_label(str(a.requested_by) if a.requested_by else None, a.requested_sequence),
        ]
    ]
    lines: list[Line] = head
    if a.action_type is not None:
        lines.append(
            f"    action type: {quoted(a.action_type, limit=120)}"
            + (f", key {quoted(a.key, limit=200)}" if a.key else "")
        )
    lines += _arguments_lines(a, detail=detail)
    if a.arguments_hash and detail:
        lines.append(f"    arguments sha256 digest: {a.arguments_hash}")
    if a.rule:
        lines.append(f"    asked by: {quoted(a.rule, limit=300)}")
    if a.status != "requested":
        lines.append(
            f"    decision: {a.status}"
            + (f" ({a.scope})" if a.scope else "")
            + (f" by {a.decided_by}" if a.decided_by else "")
            + (f" at {a.decided_at}" if a.decided_at else "")
            + (f": {quoted(a.reason, limit=300)}" if a.reason else "")
        )
        if a.used_by:
            lines.append(f"    used by action {a.used_by}")
    elif not detail:
        lines.append(f"    decide: {decide_command(a.id)}")
    if a.ignored_decisions:
        lines.append(
            f"    note: {a.ignored_decisions} decision(s) recorded by an agent were "
            "ignored (only a person decides)"
        )
    return lines


@click.command("approvals")
@click.argument("run_id", required=False)
@click.option(
    "--all", "show_all", is_flag=True, help="Also decided approvals, and those of finished runs."
)
@click.option(
    "--rules",
    is_flag=True,
    help="Show the approval rules that apply here (approvals.toml) instead.",
)
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_PAGE),
    default=DEFAULT_APPROVALS,
    show_default=True,
    help="Show at most this many, oldest request first; says how many more exist.",
)
@common
def approvals_cmd(s: Settings, run_id: str | None, show_all: bool, rules: bool, limit: int) -> None:
    """List approvals waiting for a person's decision (of RUN, or of every run), in the
    order they were requested (oldest first), at most --limit of them.

    Exit 20 when any is waiting. Decide each with `continuum decide ID --allow|--deny
    --reason TEXT`.
    """
    rt = runtime(s)
    if rules:
        loaded = rt.approval_rules()
        emit(
            s,
            {
                "sources": list(loaded.sources),
                "rules": [
                    {
                        "where": r.where,
                        "action_type": r.action_type,
                        "effect": r.effect,
                        "match": {".".join(p): pat.pattern for p, pat in r.match},
                        "description": r.description,
                        **(
                            {"branch": r.branch.pattern, "risk": r.risk}
                            if r.branch is not None
                            else {}
                        ),
                    }
                    for r in loaded.rules
                ],
            },
            loaded.explain(),
        )
        return
    every = rt.approvals(run_id, pending_only=not show_all, limit=MAX_PAGE)
    found, more = every[:limit], len(every) - min(limit, len(every))
    at_least = "at least " if len(every) >= MAX_PAGE else ""  # counted up to one full page
    pending = [a for a in every if a.pending]
    lines: list[Line] = []
    for a in found:
        lines += approval_lines(a)
    if not found:
        lines.append("no approvals" if show_all else "no approval is waiting for a decision")
    elif pending:
        lines.append(f"{at_least}{len(pending)} waiting for a person's decision")
    if more:
        lines.append(
            f"{at_least}{more} more not shown (oldest first; see them with --limit "
            f"{min(MAX_PAGE, limit + more)}, or decide these first)"
        )
    emit(
        s,
        {
            "approvals": [approval_json(a) for a in found],
            "pending": len(pending),
            "shown": len(found),
            "more": more,
            "more_is_lower_bound": bool(at_least),
        },
        lines,
        code=20 if pending else 0,
    )


@click.command("decide")
@click.argument("approval_id")
@click.option(
    "--allow/--deny",
    "allow",
    default=None,
    help="Allow the call it is bound to (once, exactly those arguments), or deny it.",
)
@click.option("--reason", default=None, help="Why (required; recorded with the decision).")
@click.option(
    "--scope",
    type=click.Choice(["call", "run"]),
    default="call",
    show_default=True,
    help="call: exactly this call, once; run (allow only): this action type, any "
    "arguments, for the rest of the run.",
)
@click.option("--run", "run_id", default=None, help="The run, if two runs hold this id.")
@click.option(
    "--yes",
    "-y",
    is_flag=True,
    help="Do not ask: for a person's own script. Without it, decide asks on a "
    "terminal and refuses when stdin is not one.",
)
@common
def decide_cmd(
    s: Settings,
    approval_id: str,
    allow: bool | None,
    reason: str | None,
    scope: str,
    run_id: str | None,
    yes: bool,
) -> None:
    """As a person, allow or deny the call waiting under APPROVAL_ID.

    Recorded with origin human. Shows the call (its arguments exactly) and asks first;
    without --yes it refuses when stdin is not a terminal (an agent with a shell is not
    a person). A decision stands: a changed call asks again.
    """
    if allow is None:
        raise UsageError(
            "say what you decide: --allow or --deny",
            code="usage.missing_option",
            hint=f'e.g. continuum decide {approval_id} --allow --reason "checked"',
        )
    if reason is None:
        raise UsageError(
            "a decision needs a reason: --reason TEXT",
            code="usage.bad_reason",
            hint="say why; it is recorded with the decision",
        )
    flag = "--allow" if allow else "--deny"
    require_person(
        yes, "a decision on an approval", f"continuum decide {approval_id} {flag} --reason ..."
    )
    rt = runtime(s, origin=Origin.HUMAN)
    shown = rt.approval(approval_id, run_id=run_id)
    if not yes and shown.pending:
        write_lines(s, [AGENT_TEXT_NOTICE, *approval_lines(shown, detail=True)], err=True)
        what = (
            "ALLOW this call once, with exactly these arguments"
            if allow and scope == "call"
            else f"ALLOW every {shown.action_type} call for the rest of run {shown.run_id}"
            if allow
            else "DENY this call"
        )
        if not ask(s, f"Record, as a person: {what}?"):
            raise UsageError(
                "decision declined; nothing was recorded",
                code="usage.declined",
                hint="run it again when you have decided",
            )
    decided = rt.decide(
        shown.id,
        allow=allow,
        reason=reason,
        scope=scope,
        run_id=shown.run_id,
        expect_binding=shown.binding,
        via=person_via(yes),
    )
    emit(
        s,
        {"approval": approval_json(decided)},
        [
            f"approval {decided.id} is now {decided.status}"
            + (f" ({decided.scope})" if decided.scope else "")
            + " (recorded as human)"
        ],
    )


# -- the outbox --------------------------------------------------------------------------------


def outbox_json(row: OutboxRow) -> dict[str, Any]:
    return row.model_dump(mode="json")


def outbox_lines(row: OutboxRow) -> list[Line]:
    lines: list[Line] = [
        f"{row.delivery_id}  {row.kind:<26} {row.status:<9} run "
        f"{quoted(row.run_id, limit=80)} seq {row.sequence}  attempts "
        f"{row.attempts}"
    ]
    summary = row.body.get("summary")
    if isinstance(summary, str):
        lines.append(f"    {summary}")  # built with every agent value quoted and escaped
    if row.delivered_to:
        lines.append(
            f"    delivered to: {', '.join(quoted(n, limit=80) for n in row.delivered_to)}"
        )
    if row.last_error:
        lines.append(f"    last error: {quoted(row.last_error, limit=300)}")
    return lines


@click.group("outbox", invoke_without_command=True)
@click.option(
    "--status",
    type=click.Choice(OUTBOX_STATUSES),
    default=None,
    help="Only notifications with this status.",
)
@click.option("--run", "run_id", default=None, help="Only notifications about this run.")
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_PAGE),
    default=100,
    show_default=True,
    help="At most this many, newest first.",
)
@common
def outbox_group(s: Settings, status: str | None, run_id: str | None, limit: int) -> None:
    """Notifications for a person (pending approvals, unknown actions, runs that need a
    human): pending, delivered or failed. Exit 20 when any failed.

    `continuum outbox deliver` sends them to the webhooks of .continuum/notify.toml.
    """
    if click.get_current_context().invoked_subcommand is not None:
        return
    rt = runtime(s)
    rows = rt.outbox(status=status, run_id=run_id, limit=limit)
    counts = rt.outbox_counts()
    lines: list[Line] = [
        f"{counts['pending']} pending, {counts['delivered']} delivered, {counts['failed']} failed"
    ]
    for row in rows:
        lines += outbox_lines(row)
    emit(
        s,
        {"counts": counts, "notifications": [outbox_json(r) for r in rows]},
        lines,
        code=20 if counts["failed"] else 0,
    )


def _report_lines(report: DeliveryReport) -> list[Line]:
    lines: list[Line] = [
        f"claimed {report.claimed}: {report.delivered} delivered, "
        f"{report.retrying} to retry, {report.failed} failed"
    ]
    lines += [f"  {quoted(e, limit=300)}" for e in report.errors[:20]]
    return lines


@outbox_group.command("deliver")
@click.option(
    "--loop",
    is_flag=True,
    help="Keep delivering until stopped (SIGTERM or Ctrl-C): run it as a service.",
)
@click.option(
    "--poll",
    "poll",
    type=click.FloatRange(min=0.05),
    default=2.0,
    show_default=True,
    help="With --loop: seconds between passes.",
)
@common
def deliver_cmd(s: Settings, loop: bool, poll: float) -> None:
    """Send the notifications that are due to every configured webhook, at least once.

    Failures are retried with exponential backoff ([delivery] in notify.toml); each
    request carries the notification's stable id (X-Continuum-Delivery header and
    delivery_id in the body) for the receiver to deduplicate. Exit 20 when any
    notification still waits for a retry or failed.
    """
    rt = runtime(s)
    config = rt.notify_config()
    if not config.webhooks:
        raise UsageError(
            "no webhooks are configured, so nothing can be delivered",
            code="outbox.no_webhooks",
            hint='add [[webhook]] url = "https://..." to .continuum/notify.toml '
            "(here or beside the store); notifications wait in the outbox",
        )
    total = DeliveryReport()

    def add(report: DeliveryReport) -> None:
        for name in ("claimed", "delivered", "retrying", "failed", "sent", "lost"):
            setattr(total, name, getattr(total, name) + getattr(report, name))
        total.errors += report.errors
        if report.claimed and loop and not s.json:
            write_lines(s, _report_lines(report), err=True)

    if loop:
        stop = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        previous = signal.signal(signal.SIGTERM, on_signal)
        try:
            deliver_loop(rt.store, rt.notify_config, stop=stop, poll_seconds=poll, on_pass=add)
        finally:
            signal.signal(signal.SIGTERM, previous)
    else:
        while True:  # everything due now, a page at a time
            report = rt.deliver_outbox(config)
            add(report)
            if report.claimed < 50:
                break
    counts = rt.outbox_counts()
    emit(
        s,
        {"delivery": total.as_dict(), "counts": counts},
        _report_lines(total)
        + [
            f"outbox: {counts['pending']} pending, {counts['delivered']} delivered, "
            f"{counts['failed']} failed"
        ],
        code=20 if total.retrying or total.failed else 0,
    )


@outbox_group.command("retry")
@click.argument("delivery_ids", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Every failed notification.")
@common
def retry_cmd(s: Settings, delivery_ids: tuple[str, ...], every: bool) -> None:
    """Put failed notifications (DELIVERY_IDS, or --all) back to pending, due now."""
    if bool(delivery_ids) == every:
        raise UsageError(
            "name the notifications to retry, or pass --all",
            code="usage.missing_option",
            hint="see them with `continuum outbox --status failed`",
        )
    count = runtime(s).retry_outbox(None if every else list(delivery_ids))
    emit(s, {"requeued": count}, [f"{count} notification(s) back to pending"])


COMMANDS = [approvals_cmd, decide_cmd, outbox_group]

"""What the gate and the briefing tell an agent and a person about an effect: why it is
refused, why its outcome is not known, and the exact command that settles it. Agent
text is quoted and escaped; a store URL's password is never shown.
"""

from __future__ import annotations

import json
import shlex

from continuum.hooks.args import HookArgs
from continuum.hooks.registry import Rule
from continuum.ledger.gate import InterceptResult
from continuum.state.records import ActionRecord
from continuum.store import redact_url
from continuum.untrusted import quoted


def shown_db(url: str) -> str:
    """The store URL as the gate may print it (to the agent, the host's transcript, a
    log): a PostgreSQL URL's password becomes ``***`` (``store.redact_url``)."""
    return redact_url(url, mark=True)


def _db(args: HookArgs) -> str:
    return shlex.quote(shown_db(args.db))


def reconcile_commands(args: HookArgs, project: str, action_id: str, has_probe: bool) -> str:
    base = f"continuum --db {_db(args)} reconcile {shlex.quote(args.run)} {action_id}"
    text = f"`{base} --occurred` (it happened) or `{base} --not-occurred` (it did not)"
    if has_probe:
        text += (
            f", or let continuum check with the rule's probe: `continuum --db "
            f"{_db(args)} reconcile --probe {shlex.quote(args.run)} {action_id} "
            f"--dir {shlex.quote(project)}`"
        )
    return text


def unknown_because(record: ActionRecord | None) -> str:
    """Why an effect's outcome is not known, from what was recorded: a session that ended
    mid-call (the ledger's and the MCP server's reasons start with "interrupted:"), or a
    failure the host reported (an exit code says the command failed, not that its effect
    did not happen)."""
    error = record.error if record is not None else None
    if not error or error.startswith("interrupted:"):
        return "the session that ran it ended before its result was recorded"
    return (
        f"its failure was recorded ({quoted(error, limit=160)}), and a failed command may "
        "still have had its effect"
    )


def refusal(
    args: HookArgs,
    project: str,
    rule: Rule,
    r: InterceptResult,
    record: ActionRecord | None,
    session: str | None = None,
) -> str:
    what = f"continuum: this {rule.action_type} ({quoted(r.action_key, limit=120)})"
    settle = reconcile_commands(args, project, r.action_id, rule.probe is not None)
    if r.status == "completed":
        when = f" at {record.settled_at}" if record and record.settled_at else ""
        ext = f", external id {quoted(r.external_id)}" if r.external_id else ""
        result = ""
        previous = r.previous_result
        if isinstance(previous, dict) and "exit_code" in previous and "output_sha256" in previous:
            code = previous["exit_code"]  # a hook's own summary
            result = f", exit code {code}" if code is not None else ""
        elif previous is not None:
            result = f", result {quoted(json.dumps(previous, sort_keys=True), limit=200)}"
        return (
            f"{what} already happened{when}{ext}{result}. Do not run it again. If it "
            "really must happen again, it is a new effect: ask the user."
        )
    if r.status == "in_progress":
        owner = record.owner if record else {}
        who = (
            "this session: an earlier call of it has not finished"
            if session and owner.get("session") == session
            else f"another live session (process {owner.get('pid')})"
        )
        return (
            f"{what} is being performed right now by {who}. Do not run it again; check again later."
        )
    if r.status in ("unknown", "reconcile_required"):
        return (
            f"{what} was started earlier and its outcome is unknown: {unknown_because(record)}. "
            f"Do not run it again. Check whether it happened; then a person settles it: {settle}"
        )
    if r.status == "version_drift":
        return (
            f"{what} was interrupted, and what it was recorded under (the model, or the "
            f"tool's schema) is different now: it is not run again under another version. "
            f"Do not run it. A person checks whether it happened, then settles it: {settle}."
        )
    if r.status == "needs_confirmation":
        return (
            f"{what} was reported as not done by an agent, which does not let it run again. "
            f"A person must check and confirm: {settle}."
        )
    if r.status == "compensated":
        return f"{what} was done and later undone (compensated). Do not run it again as is."
    if r.status == "awaiting_approval" and r.approval_id:
        return (
            f"{what} needs a person's decision first (approval {r.approval_id}). Do not run "
            "it, and do not decide it yourself: ask the user to run "
            f"`continuum --db {_db(args)} decide {r.approval_id} --allow "
            "--reason TEXT` (or --deny), then make exactly the same call again."
        )
    if r.status == "denied" and r.approval_id:
        why = f" Their reason: {quoted(r.denial_reason, limit=300)}." if r.denial_reason else ""
        return (
            f"{what} was denied by a person (approval {r.approval_id}).{why} Do not run "
            "it. Ask the user how to proceed."
        )
    return f"{what} was refused ({r.status}): {r.guidance}"

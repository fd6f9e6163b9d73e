"""Which events call for a person, and what the notification says (pure).

A store writes the notification into its outbox in the same transaction as the event
(``store/core.py``), so a notification exists exactly when its event does: none is lost
in a crash between the two, and none is sent for an event that was rolled back.
``outbox.py`` delivers them.

Kinds (``KINDS``):

- ``approval_requested``: a call waits for a person's decision (``continuum decide``);
- ``action_unknown``: an action was interrupted and may or may not have happened
  (``continuum reconcile``);
- ``action_needs_confirmation``: an agent said an action did not happen, which only a
  person may confirm (``continuum reconcile``);
- ``run_needs_human``: a recovery was recorded as blocked (``recovery_blocked``), or a
  server's watch of the store found a run's verdict turned ``request_human``
  (``verdict_notice``: not an event; once per set of things a person must do);
- ``confirm_token_failed``: the third or a later wrong confirm token in a row for the
  store (not an event: ``store/confirm_attempts.py`` writes it with the counter, about
  the run the attempt named; ``confirm_failure_notice``);
- ``budget_exceeded`` / ``retry_cap_reached``: a run (or a family under a parent's
  budget) reached a limit and a new effect was refused (not an event: the refusal writes
  none; the ledger writes the notice in the refusing transaction, once per limit as set:
  ``limit_notice``).

The ``delivery_id`` is derived from the event and the kind: the same notification always
has the same id, whoever delivers it and however often, so a receiver deduplicates on it.
Text an agent wrote (keys, action types, reasons) is quoted with its control and bidi
characters escaped; the body is sent as ASCII JSON.

What a notice carries is bounded (``bounded``): each text of its ``details`` at most
``MAX_TEXT_CHARS`` characters, arguments at most ``MAX_ARGUMENTS_CHARS`` as JSON (else
their digest); what was cut is named (``cut``: field -> its full length) with the command
that prints the event in full (``read_in_full``). A 1 MB error an agent passed to
``fail`` is not a 1 MB webhook body on every try, which a receiver that refuses large
bodies would leave ``failed``, so that no person is told. ``slack_message`` is the same
notice for a Slack incoming webhook, its agent text escaped by Slack's own rules.
"""

from __future__ import annotations

import math
from typing import Any

from continuum.eventlog.canonical import canonical_json, digest
from continuum.eventlog.events import EventLike, EventType
from continuum.untrusted import json_safe, quoted, terminal_safe

KINDS = (
    "approval_requested",
    "action_unknown",
    "action_needs_confirmation",
    "run_needs_human",
    "confirm_token_failed",  # not an event's: see confirm_failure_notice
    "budget_exceeded",  # not an event's: see limit_notice
    "retry_cap_reached",  # not an event's: see limit_notice
)
MAX_ARGUMENTS_CHARS = 4096  # larger arguments are named by their hash only
MAX_TEXT_CHARS = 1000  # each text of a notice's details (an agent's error, note, key)

# The event types that may call for a notification (a quick filter on every append).
NOTIFYING = frozenset(
    str(t)
    for t in (
        EventType.APPROVAL_REQUESTED,
        EventType.ACTION_MARKED_UNKNOWN,
        EventType.ACTION_FAILED,
        EventType.ACTION_RECONCILED,
        EventType.RECOVERY_BLOCKED,
    )
)


def delivery_id(event_id: str, kind: str) -> str:
    """The stable id of the notification ``kind`` for event ``event_id``."""
    return "ntf_" + digest(["notification", event_id, kind])[:24]


def _word(text: str) -> str:
    """``text`` as one shell word (for a command a person copies)."""
    safe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./_-#"
    if text and not text.startswith("#") and all(c in safe for c in text):
        return text
    return "'" + text.replace("'", "'\\''") + "'"


def decide_command(approval_id: str) -> str:
    """What a person runs to decide an approval (allow or deny, with a reason)."""
    return f"continuum decide {_word(approval_id)} --allow|--deny --reason TEXT"


def reconcile_command(run_id: str, action_ref: str) -> str:
    return f"continuum reconcile {_word(run_id)} {_word(action_ref)} --occurred|--not-occurred"


def _kind(event: EventLike) -> str | None:
    p = event.payload
    if event.type == EventType.APPROVAL_REQUESTED:
        return "approval_requested"
    if event.type == EventType.ACTION_MARKED_UNKNOWN:
        return "action_unknown"
    if event.type == EventType.ACTION_FAILED and event.source.self_certified:
        return "action_needs_confirmation"
    if (
        event.type == EventType.ACTION_RECONCILED
        and p.get("occurred") is False
        and event.source.self_certified
    ):
        return "action_needs_confirmation"
    if event.type == EventType.RECOVERY_BLOCKED:
        return "run_needs_human"
    return None


def _arguments(value: Any) -> dict[str, Any]:
    text = canonical_json(value)
    if len(text) <= MAX_ARGUMENTS_CHARS:
        return {"arguments": value}
    return {"arguments_sha256": digest(value), "arguments_chars": len(text)}


def read_in_full(run_id: str, sequence: int) -> str:
    """The command that prints the event at ``sequence`` of ``run_id`` whole."""
    return f"continuum events {_word(run_id)} --after {sequence - 1} --limit 1 --json"


def bounded(notice: dict[str, Any]) -> dict[str, Any]:
    """``notice`` with each text of its ``details`` cut to ``MAX_TEXT_CHARS``; what was cut
    is named in ``details.cut`` (field -> its full length in characters), and, for a notice
    about an event, ``details.read_in_full`` is the command that prints that event whole
    (also when its arguments were left out for their size). Idempotent: a bounded notice
    comes back unchanged, so copies sent on every try stay byte-identical (the deliverer
    bounds the notices stored before this bound existed as it sends them)."""
    details = notice.get("details")
    if not isinstance(details, dict):
        return notice
    cut = dict(details["cut"]) if isinstance(details.get("cut"), dict) else {}
    out = dict(details)
    for field, value in details.items():
        if isinstance(value, str) and len(value) > MAX_TEXT_CHARS and field != "read_in_full":
            out[field] = value[:MAX_TEXT_CHARS]
            cut[field] = len(value)
    if not cut and "arguments_sha256" not in details:
        return notice
    if cut:
        out["cut"] = cut
    run, sequence = notice.get("run_id"), notice.get("sequence")
    if (
        notice.get("event_id") is not None
        and isinstance(run, str)
        and isinstance(sequence, int)
        and sequence > 0
    ):
        out["read_in_full"] = read_in_full(run, sequence)
    return {**notice, "details": out}


def notice_for(event: EventLike, action: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The notification ``event`` calls for, or None. ``action``: the action index record
    the event is about (for its key and type), if there is one."""
    if event.type not in NOTIFYING:
        return None
    kind = _kind(event)
    if kind is None:
        return None
    p, run = event.payload, event.run_id
    details: dict[str, Any] = {}
    if kind == "approval_requested":
        approval_id = p["approval_id"]
        what = p.get("action_key") or p.get("action_type") or "an action"
        details = {
            "approval_id": approval_id,
            "action_type": p.get("action_type"),
            "action_key": p.get("action_key"),
            "key": p.get("key"),
            "arguments_hash": p.get("arguments_hash"),
            "rule": p.get("rule"),
            **_arguments(p.get("arguments")),
        }
        summary = (
            f"run {quoted(run)}: {quoted(what, limit=200)} waits for a person's "
            f"decision (approval {approval_id})"
        )
        command = decide_command(approval_id)
    elif kind == "run_needs_human":
        details = {"reason": p.get("reason")}
        summary = f"run {quoted(run)}: recovery is blocked and needs a person"
        if isinstance(p.get("reason"), str):
            summary += f": {quoted(p['reason'], limit=200)}"
        command = f"continuum resume {_word(run)}"
    else:
        action = action or {}
        action_key = action.get("action_key") or p.get("action_id")
        details = {
            "action_id": p.get("action_id"),
            "action_key": action.get("action_key"),
            "action_type": action.get("action_type"),
            "reason": p.get("reason")
            if kind == "action_unknown"
            else (p.get("error") or p.get("note")),
        }
        if kind == "action_unknown":
            summary = (
                f"run {quoted(run)}: action {quoted(str(action_key), limit=200)} was "
                "interrupted and may or may not have happened; a person must check and "
                "reconcile it"
            )
        else:
            summary = (
                f"run {quoted(run)}: an agent ({event.source}) says action "
                f"{quoted(str(action_key), limit=200)} did not happen; only a person may "
                "confirm that"
            )
        command = reconcile_command(run, str(action_key))
    return bounded(
        {
            "delivery_id": delivery_id(event.event_id, kind),
            "kind": kind,
            "run_id": run,
            "sequence": event.sequence,
            "event_id": event.event_id,
            "recorded_at": event.timestamp,
            "origin": str(event.source),
            "summary": summary,
            "command": command,
            "details": details,
        }
    )


# -- Slack incoming webhooks -------------------------------------------------------------------


def slack_escape(text: str) -> str:
    """``text`` as literal text in a Slack message: Slack reads ``&``, ``<`` and ``>`` as
    control characters (``<https://x|label>`` is a link under another label, ``<!channel>``
    pings a channel), so they become ``&amp;``, ``&lt;`` and ``&gt;`` and nothing else is
    encoded (api.slack.com/reference/surfaces/formatting#escaping)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_SLACK_TITLES = {
    "approval_requested": "a call waits for a person's decision",
    "action_unknown": "an action may or may not have happened",
    "action_needs_confirmation": "an agent says an action did not happen",
    "run_needs_human": "a run needs a person",
    "confirm_token_failed": "wrong confirm tokens",
    "budget_exceeded": "a run's budget is reached",
    "retry_cap_reached": "a retry cap is reached",
}


def _code(text: str) -> str:
    # A command in a code span reads as one; one holding a backtick would end the span.
    return f"`{slack_escape(text)}`" if "`" not in text else slack_escape(text)


def slack_message(notice: dict[str, Any]) -> dict[str, Any]:
    """``notice`` (bounded) as a Slack incoming webhook's message. Every text in it is
    escaped with ``slack_escape``, agent text quoted as well (``quoted``: control and bidi
    characters visible); user and channel names are not linked and links not unfurled, so
    nothing an agent wrote becomes a link under another label, a mention or a preview."""
    notice = bounded(notice)
    kind = str(notice.get("kind"))
    found = notice.get("details")
    details: dict[str, Any] = found if isinstance(found, dict) else {}
    lines = [
        f"*continuum*: {slack_escape(_SLACK_TITLES.get(kind, kind))}",
        slack_escape(str(notice.get("summary", ""))),
    ]
    reason = details.get("reason")
    if isinstance(reason, str):
        lines.append("Reason: " + slack_escape(quoted(reason)))
    if "arguments" in details:
        shown = json_safe(canonical_json(details["arguments"]))  # JSON: strings in quotes
        if len(shown) > MAX_TEXT_CHARS:
            shown = f"{shown[:MAX_TEXT_CHARS]}... (+{len(shown) - MAX_TEXT_CHARS} chars)"
        lines.append("Arguments: " + slack_escape(shown))
    elif "arguments_sha256" in details:
        lines.append(
            f"Arguments: {details.get('arguments_chars')} characters of JSON, sha256 "
            f"{slack_escape(str(details['arguments_sha256']))} (too long for a notice)"
        )
    if isinstance(notice.get("command"), str):
        lines.append("To act, run: " + _code(notice["command"]))
    cut = details.get("cut")
    if isinstance(cut, dict) and cut:
        what = ", ".join(
            f"{slack_escape(str(f))} ({slack_escape(str(n))} characters)"
            for f, n in sorted(cut.items())
        )
        lines.append(f"Cut to {MAX_TEXT_CHARS} characters: {what}.")
    if isinstance(details.get("read_in_full"), str):
        lines.append("In full: " + _code(details["read_in_full"]))
    lines.append(f"Delivery {slack_escape(str(notice.get('delivery_id')))}")
    return {
        "text": "\n".join(lines),
        "link_names": False,
        "unfurl_links": False,
        "unfurl_media": False,
    }


# -- a verdict turned request_human (issue 26): found by a server's watch, no event


def verdict_notice(
    *,
    run_id: str,
    sequence: int,
    recorded_at: str,
    reason: str,
    required_actions: list[str],
) -> dict[str, Any]:
    """The notification that run ``run_id``'s verdict is ``request_human`` (at head
    ``sequence``): the same set of ``required_actions`` is the same notification (one id),
    so a run is announced once when it turns, not on every look; a new cause is a new
    one. ``reason`` is the verdict's (continuum's words, agent values already quoted)."""
    actions = sorted(dict.fromkeys(required_actions))
    return bounded(
        {
            "delivery_id": delivery_id(f"verdict:{run_id}:{digest(actions)}", "run_needs_human"),
            "kind": "run_needs_human",
            "run_id": run_id,
            "sequence": sequence,
            "event_id": None,
            "recorded_at": recorded_at,
            "origin": "deterministic",  # continuum's own judgement
            # continuum's words, agent values quoted in them; escaped again all the same
            "summary": f"run {quoted(run_id)}: needs a person: {terminal_safe(reason[:300])}",
            "command": f"continuum resume {_word(run_id)}",
            "details": {
                "reason": terminal_safe(reason),
                "required_actions": [terminal_safe(a) for a in actions[:20]],
            },
        }
    )


# -- limits reached (issue 26): written by the ledger in the refusing transaction, no event


def limit_notice(
    kind: str,
    *,
    run_id: str,
    sequence: int,
    recorded_at: str,
    fingerprint: str,
    reason: str,
    action_key: str,
    action_type: str,
) -> dict[str, Any]:
    """The notification that run ``run_id`` reached a limit (``kind``: ``budget_exceeded``
    or ``retry_cap_reached``) when ``action_key`` was refused; ``fingerprint`` names the
    limit as set (the same limit reached again is the same notification: one id)."""
    if kind == "budget_exceeded":
        summary = (
            f"run {quoted(run_id)}: its budget is reached; effect "
            f"{quoted(action_key, limit=200)} was refused before it ran, and new ones will be"
        )
        command = f"continuum usage {_word(run_id)}"
        then = f"continuum budget {_word(run_id)} --usd AMOUNT --reason TEXT (a person's raise)"
    else:
        summary = (
            f"run {quoted(run_id)}: a retry cap is reached; effect "
            f"{quoted(action_key, limit=200)} was refused before another attempt"
        )
        command = f"continuum actions {_word(run_id)} --all"
        then = "check why it keeps failing; the cap is the [[retry]] rule of approvals.toml"
    return bounded(
        {
            "delivery_id": delivery_id(f"limit:{run_id}:{fingerprint}", kind),
            "kind": kind,
            "run_id": run_id,
            "sequence": sequence,
            "event_id": None,
            "recorded_at": recorded_at,
            "origin": "deterministic",  # continuum's own check
            "summary": summary,
            "command": command,
            "details": {
                "action_key": action_key,
                "action_type": action_type,
                "reason": reason.strip(),
                "then": then,
            },
        }
    )


# -- confirm-token failures (issue 30): written by store/confirm_attempts.py, not by an event


def confirm_failure_notice(
    *,
    epoch: str,
    total: int,
    failures: int,
    locked: bool,
    retry_after: float,
    run_id: str,
    sequence: int,
    channel: str,
    caller: str | None,
    recorded_at: str,
) -> dict[str, Any]:
    """The notification for the ``failures``-th wrong confirm token in a row (the store's
    ``total``-th ever; ``epoch`` is its counter's), presented over ``channel`` by
    ``caller`` for a confirmation of ``run_id`` (at head ``sequence``). Never the token."""
    who = "a client without a name" if caller is None else f"client {quoted(caller, limit=200)}"
    state = (
        "confirming with the confirm token is now LOCKED for this store until a person unlocks it"
        if locked
        else f"no token is checked for {math.ceil(retry_after)} s"
        if retry_after > 0
        else "the next one is checked at once"
    )
    return {
        "delivery_id": delivery_id(f"confirm:{epoch}:{total}", "confirm_token_failed"),
        "kind": "confirm_token_failed",
        "run_id": run_id,
        "sequence": sequence,
        "event_id": None,
        "recorded_at": recorded_at,
        "origin": "external_agent",  # whoever presented it proved nothing
        "summary": (
            f"{failures} wrong confirm tokens in a row for this store; the latest over "
            f"{channel} from {who}, to confirm run {quoted(run_id)}; {state}"
        ),
        "command": "continuum confirm-token status",
        "details": {
            "failures_in_a_row": failures,
            "total": total,
            "locked": locked,
            "retry_after_seconds": math.ceil(retry_after),
            "channel": channel,
            "caller": caller,
            "unlock": "continuum confirm-token unlock",
        },
    }


__all__ = [
    "KINDS",
    "MAX_TEXT_CHARS",
    "NOTIFYING",
    "bounded",
    "confirm_failure_notice",
    "decide_command",
    "delivery_id",
    "notice_for",
    "read_in_full",
    "reconcile_command",
    "slack_escape",
    "slack_message",
]

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
- ``run_needs_human``: a recovery was recorded as blocked (``recovery_blocked``).

The ``delivery_id`` is derived from the event and the kind: the same notification always
has the same id, whoever delivers it and however often, so a receiver deduplicates on it.
Text an agent wrote (keys, action types, reasons) is quoted with its control and bidi
characters escaped; the body is sent as ASCII JSON.
"""

from __future__ import annotations

from typing import Any

from continuum.canonical import canonical_json, digest
from continuum.events import Event, EventType
from continuum.untrusted import quoted

KINDS = ("approval_requested", "action_unknown", "action_needs_confirmation", "run_needs_human")
MAX_ARGUMENTS_CHARS = 4096  # larger arguments are named by their hash only

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


def _kind(event: Event) -> str | None:
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


def notice_for(event: Event, action: dict[str, Any] | None = None) -> dict[str, Any] | None:
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
    return {
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


__all__ = ["KINDS", "NOTIFYING", "decide_command", "delivery_id", "notice_for", "reconcile_command"]

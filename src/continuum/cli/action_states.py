"""The words a person reads for an action's state, one set for every command that shows
one: the `actions` list, `watch`, the reconcile prompt, and what reconcile, complete,
fail and compensate answer.

The first word is always the ledger's status (``started``, ``completed``, ``failed``,
``unknown``, ``compensated``), the value ``--json`` gives; the parentheses say what it
means where the word alone would mislead. The one case that differs from the stored
status: a ``started`` action whose process is gone is in effect ``unknown`` (resume
treats it so), and is shown as such until someone records what happened.
"""

from __future__ import annotations

from continuum.state.records import ActionRecord
from continuum.types import ActionStatus, Origin

INTERRUPTED = "unknown (interrupted: its process is gone)"
IN_PROGRESS = "started (in progress: its process is alive)"
UNCONFIRMED_FAILURE = "failed (on an agent's word: unconfirmed)"


def settled_by_words(origin: Origin | str | None) -> str | None:
    """Who recorded a settlement, as ``by ...`` words (None when nobody is known)."""
    if origin is None:
        return None
    if origin == Origin.HUMAN:
        return "by a person"
    if origin == Origin.DETERMINISTIC:
        return "by local code"
    return f"by an agent ({origin})"


def state_words(
    status: ActionStatus | str,
    *,
    interrupted: bool = False,
    unconfirmed: bool = False,
    by: str | None = None,
) -> str:
    """The words for a recorded ``status``: ``interrupted``, a ``started`` action whose
    process is gone (``Continuum.interrupted``); ``unconfirmed``, a ``failed`` one on an
    agent's word (``ActionRecord.failure_unconfirmed``); ``by``, who recorded the
    settlement (``by a person``), for an answer that says what was just recorded."""
    if status == ActionStatus.STARTED:
        return INTERRUPTED if interrupted else IN_PROGRESS
    if status == ActionStatus.FAILED and unconfirmed:
        return UNCONFIRMED_FAILURE
    meaning = {
        ActionStatus.FAILED: "certain",
        ActionStatus.UNKNOWN: "may or may not have happened",
        ActionStatus.COMPENSATED: "done, then undone",
    }.get(ActionStatus(status))
    said = ", ".join(w for w in (meaning, by) if w)
    return f"{status} ({said})" if said else str(status)


def action_state(a: ActionRecord, *, interrupted: bool = False, by: str | None = None) -> str:
    """``a``'s state for a person (see ``state_words``)."""
    return state_words(a.status, interrupted=interrupted, unconfirmed=a.failure_unconfirmed, by=by)


def recorded(a: ActionRecord, *, by: str | None = None) -> str:
    """What a settlement just recorded, e.g. ``recorded as not done: failed (certain, by a
    person)``. ``by`` defaults to the record's ``settled_by``."""
    state = action_state(a, by=by or settled_by_words(a.settled_by))
    lead = {ActionStatus.COMPLETED: "done: ", ActionStatus.FAILED: "not done: "}.get(a.status, "")
    return f"recorded as {lead}{state}"

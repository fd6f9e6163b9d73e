"""What an intercept answers, as plain data: the guidance for each status (what the caller
must and must not do) and the answer's fields (``InterceptResult`` in ``gate.py`` is their
model at the API edge; the ledger builds the fields without it, so a caller that needs no
model never loads pydantic)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from continuum.types import ReplayContract

GUIDANCE = {
    "started": "Perform the side effect now, then call complete (or fail) with this action_key.",
    "completed": "Already done: do not perform it again; use the stored result and external_id.",
    "in_progress": "Another live process is performing this action right now: do not perform it; "
    "check again later.",
    "unknown": "This action was interrupted and may or may not have happened. Do not perform it "
    "again: check the external system, then reconcile it (occurred true/false).",
    "reconcile_required": "This action was interrupted; its contract requires reconciliation: check "
    "the external system, then call reconcile with occurred true/false.",
    "compensated": "This action was done and later undone (compensated); use a new key to redo it.",
    "needs_confirmation": "This action was reported as not done by an agent, not by a person. "
    "Do not perform it: only a person (or continuum's own probe) may confirm "
    "that it did not happen; ask a person to check the external system and "
    "run `continuum reconcile` for it.",
    "possible_duplicate": "Not performed: an earlier action of this type had the same values under "
    "other field names (see similar_action). If it is the same effect, it is "
    "already recorded there: do not perform it again. If it is a different "
    "effect, intercept again with an explicit key that tells them apart.",
    "awaiting_approval": "Not performed: this call needs a person's decision first. Do not perform "
    "it and do not try to decide it yourself: ask a person to run `{command}`, "
    "then intercept again with exactly the same arguments (changed arguments "
    "ask a person again).",
    "denied": "Not performed: a person denied this call{reason}. Do not perform it. Changed "
    "arguments ask a person again.",
    "budget_exceeded": "Not performed: this effect's estimated cost would take the run past "
    "its budget (what is spent, and what effects in flight or unknown reserve at their "
    "estimate). Do not perform it: raising the budget is a person's act "
    "(`continuum budget RUN --usd ...`).",
    "retry_cap_reached": "Not performed: a new attempt would pass a retry cap of this run's "
    "rules (.continuum/approvals.toml [[retry]]), so it is not tried again; retrying in a "
    "loop amplifies a failing system's load. Do not perform it: tell a person what failed.",
    "revalidation_required": "Not performed: continuum's periodic check of the environment found "
    "a dependency of this run changed since it was declared, so what was derived from it "
    "is stale. Do not perform it yet: check the change; declare the dependency again to "
    "accept it (or ask a person), then intercept again",
    "version_drift": "Not performed: this action was interrupted, and its contract would let it "
    "run again, but what it was recorded under (its tool's schema, or the model or prompt "
    "a rule pins) is different now or not given; under another version it may do "
    "something else. Do not perform it: ask a person to check the external system and "
    "run `continuum reconcile` for it (not done: it may then run again as it is now)",
}


def answer(
    rec: Mapping[str, Any], proceed: bool, status: str, matched: str | None, extra: str = ""
) -> dict[str, Any]:
    """The answer about an action recorded as ``rec`` (an action record's fields)."""
    replay = ReplayContract(rec.get("replay", "never"))
    return {
        "proceed": proceed,
        "status": status,
        "action_id": rec["action_id"],
        "action_key": rec["action_key"],
        "attempt": rec.get("attempt", 1),
        "replay": replay,
        "operation_key": rec["operation_key"]
        if proceed or replay == ReplayContract.IDEMPOTENT
        else None,
        "external_id": rec.get("external_id"),
        "previous_result": rec.get("result") if status == "completed" else None,
        "matched_by": matched,
        "approval_id": rec.get("approval_id"),
        "guidance": GUIDANCE[status] + extra,
    }

"""The pure fold that projects a run's semantic state (``state.records``) from its events.

No clock, environment, database or logging in here: the state at sequence N is a
function of events 1..N alone. Each component carries provenance (origin, source
sequence, source event). Unknown event types are skipped, never fatal.

The fold works on a private JSON-shaped accumulator (fast for long logs) and freezes
it into the immutable ``State`` at the end; a checkpoint is that same JSON shape, so
``restore(checkpoint) + fold(later events)`` equals ``fold(all events)``.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from continuum.eventlog.canonical import digest
from continuum.eventlog.events import EventLike, EventType
from continuum.eventlog.limits import clip_nested
from continuum.eventlog.payloads import payload_check, payload_ok
from continuum.state.components import ALL_COMPONENTS, DEFAULT_CONFIRM_SCOPE
from continuum.state.perception import branch_hold, higher_risk, reading_key, status_of
from continuum.types import TRUSTED_ORIGINS, ActionStatus, Origin, RunStatus

if TYPE_CHECKING:
    from continuum.state.records import State

Acc = dict[str, Any]
Handler = Callable[[Acc, EventLike, dict[str, Any]], None]
_HANDLERS: dict[str, Handler] = {}


def _on(*types: EventType) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for t in types:
            _HANDLERS[str(t)] = fn
        return fn

    return register


def _prov(e: EventLike) -> dict[str, Any]:
    return {"origin": str(e.source), "sequence": e.sequence, "event_id": e.event_id}


def _mark(acc: Acc, e: EventLike, component: str) -> None:
    if e.source.self_certified:
        acc["self_certified"][component] = e.sequence


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _list_of_str(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _touch_progress(acc: Acc, e: EventLike) -> None:
    acc["progress"]["provenance"] = _prov(e)
    _mark(acc, e, "progress")


def _set_goal(acc: Acc, e: EventLike, goal: str) -> None:
    acc["goal"] = {"value": goal, "provenance": _prov(e)}
    _mark(acc, e, "goal")


@_on(EventType.RUN_STARTED, EventType.GOAL_SET)
def _run_started(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    goal = _str(p.get("goal"))
    if goal is not None:
        _set_goal(acc, e, goal)
    total = _int(p.get("total"))
    if total is not None:
        acc["progress"]["total"] = total
        _touch_progress(acc, e)
    model = _str(p.get("model"))
    if model is not None:
        acc["model"], acc["model_provenance"] = model, _prov(e)
    parent = _str(p.get("parent"))
    if parent and e.type == EventType.RUN_STARTED:
        acc["parent"] = parent


@_on(EventType.BUDGET_SET)
def _budget(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    """The run's limits. Only a person raises one (a limit above the current, or none
    where there was one); anyone may set a first limit or lower one. A raise by anyone
    else changes nothing and is counted (``ignored``)."""
    now = acc.get("budget")
    new = {k: _int(p.get(k)) for k in ("usd_micros", "tokens")}
    if now is not None and e.source != Origin.HUMAN:
        for k in ("usd_micros", "tokens"):
            old = now.get(k)
            raised = old is not None and (new[k] is None or new[k] > old)
            if raised:
                acc["budget"] = {**now, "ignored": now.get("ignored", 0) + 1}
                return
    lowest = dict(now.get("lowest") or {}) if now else {}
    for k, v in new.items():  # the lowest limit ever set (None: none), for an unsigned import
        if v is not None and (lowest.get(k) is None or v < lowest[k]):
            lowest[k] = v
    acc["budget"] = {
        **new,
        "provenance": _prov(e),
        "ignored": now.get("ignored", 0) if now else 0,
        "lowest": lowest,
    }


@_on(EventType.HANDOFF_RECORDED)
def _handoff(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    acc["handoff"] = {"value": p["note"], "provenance": _prov(e)}


@_on(EventType.CHILD_STARTED)
def _child_started(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    children = acc.setdefault("children", [])
    if p["child_run_id"] not in children:
        children.append(p["child_run_id"])


@_on(EventType.RUN_FORKED)
def _run_forked(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    acc["forked_from"] = {
        "run": p["from_run"],
        "sequence": p["through_sequence"],
        "hash": p["through_hash"],
    }


@_on(EventType.RUN_COMPLETED)
def _run_completed(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    acc["status"] = str(RunStatus.COMPLETED)


@_on(EventType.RUN_ABORTED)
def _run_aborted(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    acc["status"] = str(RunStatus.ABORTED)


@_on(EventType.PROGRESS_RECORDED)
def _progress(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    goal = _str(p.get("goal"))
    if goal is not None:
        _set_goal(acc, e, goal)
    changed = False
    for field in ("completed", "total", "failed"):
        value = _int(p.get(field))
        if value is not None:
            acc["progress"][field] = value
            changed = True
    if changed:
        _touch_progress(acc, e)


@_on(EventType.PLAN_SET)
def _plan(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    acc["plan"] = _list_of_str(p.get("steps"))
    acc["plan_provenance"] = _prov(e)
    _mark(acc, e, "plan")


def _item(
    e: EventLike, p: dict[str, Any], id_field: str, status: str, cites: str
) -> dict[str, Any]:
    return {
        "id": _str(p.get(id_field)) or e.event_id,
        "text": _str(p.get("text")) or "",
        "status": status,
        "cites": _list_of_str(p.get(cites)),
        "model": _str(p.get("model")),
        "provenance": _prov(e),
    }


@_on(EventType.WORK_ADDED)
def _work_added(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    item = _item(e, p, "item_id", "pending", "cites")
    if item["id"] not in acc["work"]:
        acc["work"][item["id"]] = item
        if acc["progress"]["total"] is not None:
            acc["progress"]["total"] += 1
        _touch_progress(acc, e)


def _finish_work(acc: Acc, e: EventLike, p: dict[str, Any], status: str, counter: str) -> None:
    item_id = _str(p.get("item_id"))
    if item_id is not None:
        item = acc["work"].get(item_id)
        if item is None:  # finished without being added: remember it so it counts once
            item = acc["work"][item_id] = _item(e, p, "item_id", "pending", "cites")
        previous = item["status"]
        if previous == status or previous == "completed":
            return  # a repeated finish of one item counts once; done stays done
        if previous == "failed":  # a failed item that now completes moves counters
            acc["progress"]["failed"] -= 1
        item["status"] = status
    acc["progress"][counter] += 1
    _touch_progress(acc, e)


@_on(EventType.WORK_COMPLETED)
def _work_completed(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    _finish_work(acc, e, p, "completed", "completed")


@_on(EventType.WORK_FAILED)
def _work_failed(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    _finish_work(acc, e, p, "failed", "failed")


@_on(EventType.EVIDENCE_ADDED)
def _evidence(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    item = _item(e, p, "evidence_id", "active", "dependencies")
    item.update(path=_str(p.get("path")), sha256=_str(p.get("sha256")), size=_int(p.get("size")))
    acc["evidence"][item["id"]] = item
    _mark(acc, e, "evidence")


@_on(EventType.FINDING_ADDED)
def _finding(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    item = _item(e, p, "finding_id", "active", "evidence")
    acc["findings"][item["id"]] = item
    _mark(acc, e, "findings")


@_on(EventType.DECISION_CREATED)
def _decision(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    item = _item(e, p, "decision_id", "active", "findings")
    item["cites"] = item["cites"] + [f"evidence:{x}" for x in _list_of_str(p.get("evidence"))]
    acc["decisions"][item["id"]] = item
    _mark(acc, e, "decisions")


def _invalidate(acc: Acc, e: EventLike, p: dict[str, Any], table: str, id_field: str) -> None:
    target = acc[table].get(_str(p.get(id_field)) or "")
    if target is not None:
        target["status"] = "invalidated"


@_on(EventType.FINDING_INVALIDATED)
def _finding_invalidated(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    _invalidate(acc, e, p, "findings", "finding_id")


@_on(EventType.DECISION_INVALIDATED)
def _decision_invalidated(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    _invalidate(acc, e, p, "decisions", "decision_id")


@_on(EventType.DEPENDENCY_DECLARED)
def _dependency(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    listed = p.get("dependencies")
    entries: list[Any] = listed if isinstance(listed, list) else [p]
    for d in entries:
        if not isinstance(d, dict) or _str(d.get("name")) is None:
            continue
        acc["dependencies"][d["name"]] = {
            "name": d["name"],
            "provider": _str(d.get("provider")) or "static",
            "version": _str(d.get("version")),
            "checksum": _str(d.get("checksum")),
            "locator": _str(d.get("locator")),
            "recorded_change": None,
            "provenance": _prov(e),
        }


@_on(EventType.ENVIRONMENT_CHANGED)
def _env_changed(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    dep = acc["dependencies"].get(_str(p.get("name")) or "")
    if dep is not None:
        dep["recorded_change"] = _str(p.get("status")) or "changed"


@_on(EventType.PERCEPTION_OBSERVED)
def _perception(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    """One signal's reading of an observation: it replaces that (origin, signal)'s earlier
    reading, and the observation's status is judged again (``state.perception``)."""
    observations = acc.setdefault("observations", {})
    ident, subject = p["observation_id"], p["subject"]
    obs = observations.get(ident)
    if obs is None:
        obs = observations[ident] = {
            "id": ident,
            "subject": subject,
            "kind": "content",
            "status": "unverified",
            "readings": {},
            "conflicting_subject": False,
            "provenance": _prov(e),
            "last_sequence": e.sequence,
        }
    elif obs["subject"] != subject:
        obs["conflicting_subject"] = True  # readings of different things verify nothing
    kind = _str(p.get("kind"))
    if kind == "environment" or obs["kind"] == "content" and kind is not None:
        obs["kind"] = kind  # an environment reading makes it one (the stricter rule)
    value = clip_nested(p["value"])
    origin, signal = str(e.source), p["signal"]
    obs["readings"][reading_key(origin, signal)] = {
        "signal": signal,
        "origin": origin,
        "value": value,
        "digest": digest(value),
        "source": _str(p.get("source")),
        "sequence": e.sequence,
        "event_id": e.event_id,
    }
    obs["last_sequence"] = e.sequence
    obs["status"] = status_of(obs["readings"], conflicting_subject=obs["conflicting_subject"])


@_on(EventType.BRANCH_RESOLVED)
def _branch(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    """A branch resolution, judged here from the observations as they stand at this event
    (what the payload says it was judged is for readers): a person's resolves it; anyone
    else's resolves it only when ``branch_hold`` finds nothing. Its risk never goes down."""
    branches = acc.setdefault("branches", {})
    observations = acc.get("observations", {})
    ident = p["branch_id"]
    before = branches.get(ident)
    risk = higher_risk(_str(p.get("risk")), before["risk"] if before else None)
    names = [o for o in p["observations"] if isinstance(o, str)]
    human = e.source == Origin.HUMAN
    hold = None if human else branch_hold(risk, [(o, observations.get(o)) for o in names])
    branches[ident] = {
        "id": ident,
        "choice": p["choice"],
        "risk": risk,
        "observations": names,
        "status": "needs_human" if hold else "resolved",
        "reason": hold,  # continuum's words (agent values in them quoted)
        "note": _str(p.get("reason")),  # the caller's words, as given
        "rule": _str(p.get("rule")) or (before["rule"] if before else None),
        "resolved_by": None if hold else str(e.source),
        "attempts": (before["attempts"] + 1) if before else 1,
        "provenance": _prov(e),
    }


_DECIDED = {
    str(EventType.APPROVAL_GRANTED): "granted",
    str(EventType.APPROVAL_DENIED): "denied",
    str(EventType.APPROVAL_REVOKED): "revoked",
}
_APPROVAL_SCOPES = ("call", "run")


def _new_approval(e: EventLike, p: dict[str, Any]) -> dict[str, Any]:
    requested = e.type == EventType.APPROVAL_REQUESTED
    record = _item(e, p, "approval_id", "requested", "cites")
    record.update(
        {
            name: _str(p.get(name)) if requested else None
            for name in (
                "action_type",
                "action_id",
                "action_key",
                "key",
                "arguments_hash",
                "binding",
                "rule",
                "effect",
            )
        }
    )
    record.update(
        arguments=clip_nested(p.get("arguments")) if requested else None,
        requested_by=str(e.source) if requested else None,
        requested_at=e.timestamp if requested else None,
        requested_sequence=e.sequence if requested else None,
        scope=None,
        reason=None,
        decided_by=None,
        decided_at=None,
        decided_sequence=None,
        ignored_decisions=0,
    )
    return record


@_on(
    EventType.APPROVAL_REQUESTED,
    EventType.APPROVAL_GRANTED,
    EventType.APPROVAL_DENIED,
    EventType.APPROVAL_REVOKED,
)
def _approval(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    approvals = acc["approvals"]
    record = approvals.get(_str(p.get("approval_id")) or e.event_id)
    if e.type == EventType.APPROVAL_REQUESTED or record is None:
        # A decision about an approval the log never requested stands on its own record.
        record = _new_approval(e, p)
        approvals[record["id"]] = record
        if e.type == EventType.APPROVAL_REQUESTED:
            return
    if e.source not in TRUSTED_ORIGINS:
        record["ignored_decisions"] += 1  # an agent may not decide its own approvals
        return
    record.update(
        status=_DECIDED[e.type],
        reason=_str(p.get("reason")),
        decided_by=str(e.source),
        decided_at=e.timestamp,
        decided_sequence=e.sequence,
        provenance=_prov(e),
    )
    if _str(p.get("text")):
        record["text"] = p["text"]
    if e.type == EventType.APPROVAL_GRANTED:
        scope = p.get("scope")
        record["scope"] = scope if scope in _APPROVAL_SCOPES else "call"


@_on(EventType.MODEL_CHANGED)
def _model(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    acc["model"], acc["model_provenance"] = _str(p.get("model")), _prov(e)
    _mark(acc, e, "model")


@_on(EventType.MODEL_ASSUMPTION_RECORDED)
def _assumption(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    item = _item(e, p, "assumption_id", "active", "cites")
    item["model"] = item["model"] or acc["model"]
    if p.get("status") == "retracted":  # it does not hold for the model now running
        item["status"] = "retracted"
    # Recording an assumption id again (re-verified under another model, or retracted)
    # supersedes the earlier record, so a model switch's repair can be completed.
    same = [i for i, a in enumerate(acc["model_assumptions"]) if a["id"] == item["id"]]
    if same:
        acc["model_assumptions"][same[0]] = item
    else:
        acc["model_assumptions"].append(item)


@_on(EventType.CHECKPOINTED)
def _checkpointed(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    acc["last_checkpoint"] = e.sequence


@_on(EventType.HISTORY_ARCHIVED)
def _history_archived(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    """The events before it moved to an archive file: the state they made is unchanged
    (a known type, so it is not counted as unknown)."""


@_on(EventType.REVIEW_CONFIRMED)
def _review(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    through = _int(p.get("through_sequence"))
    scope = _list_of_str(p.get("scope")) or list(DEFAULT_CONFIRM_SCOPE)
    acc["confirmations"].append(
        {
            "sequence": e.sequence,
            "through_sequence": min(through if through is not None else 0, e.sequence),
            "scope": scope,
            "origin": str(e.source),
            # Only a human can vouch for self-certified state (references/contract.md §5).
            "counted": e.source == Origin.HUMAN and through is not None,
        }
    )


# -- an import this store does not trust --------------------------------------------------
#
# A human decision counts only when a person made it in this store, or when it came in a
# file signed by a key a person here trusted (references/contract.md §5). An import of
# any other file ends each run it brings with a ``history_imported`` marker (transfer.py):
# the events before it keep their content and hashes, but from the marker on whatever
# their human or deterministic origin decided counts as imported, i.e. as self-certified.
# The action and approval indexes get the same records from ``distrust_action`` and
# ``distrust_approval`` (the import builds them with these), so they equal the fold.

_COUNTING = frozenset(str(o) for o in TRUSTED_ORIGINS)
_IMPORTED = str(Origin.IMPORTED)


def distrust_action(record: dict[str, Any], through: int) -> dict[str, Any]:
    """The action ``record`` once the events through ``through`` count as imported: a
    settlement they recorded with a trusted origin is the import's word (so a "did not
    happen" no longer lets the action run again)."""
    if record.get("settled_by") in _COUNTING and record.get("last_sequence", 0) <= through:
        return {**record, "settled_by": _IMPORTED}
    return record


def distrust_approval(record: dict[str, Any], through: int) -> dict[str, Any]:
    """The approval ``record`` once the events through ``through`` count as imported: a
    decision they recorded no longer stands (it waits for a person here again), and it is
    counted in ``ignored_decisions`` like an agent's."""
    decided = record.get("decided_sequence")
    if record.get("decided_by") in _COUNTING and isinstance(decided, int) and decided <= through:
        return {
            **record,
            "status": "requested",
            "scope": None,
            "reason": None,
            "decided_by": None,
            "decided_at": None,
            "decided_sequence": None,
            "ignored_decisions": int(record.get("ignored_decisions") or 0) + 1,
        }
    return record


def _held(acc: Acc) -> list[str]:
    """The components the state holds something for."""
    held = {
        "goal": acc["goal"] is not None,
        "progress": acc["progress"].get("provenance") is not None,
        "plan": acc["plan_provenance"] is not None,
        "decisions": bool(acc["decisions"]),
        "findings": bool(acc["findings"]),
        "evidence": bool(acc["evidence"]),
        "model": acc["model_provenance"] is not None,
    }
    return [c for c in ALL_COMPONENTS if held[c]]


@_on(EventType.HISTORY_IMPORTED)
def _history_imported(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    through = min(p["through_sequence"], e.sequence - 1)  # only what came before it
    for c in acc["confirmations"]:
        if c["counted"] and c["sequence"] <= through:
            c["counted"], c["origin"] = False, _IMPORTED
    actions, approvals = acc["actions"], acc["approvals"]
    for action_id, record in actions.items():
        actions[action_id] = distrust_action(record, through)
    for approval_id, record in approvals.items():
        approvals[approval_id] = distrust_approval(record, through)
    marks = acc["self_certified"]
    for component in _held(acc):  # imported state is self-certified: a person confirms it
        marks[component] = max(marks.get(component, 0), through)
    _distrust_perception(acc, through)


def _distrust_perception(acc: Acc, through: int) -> None:
    """Readings a person or continuum recorded through ``through`` count as imported (one
    signal at most, as an agent's), and a branch resolved through it is judged again on
    what is left: an unsigned file's word verifies nothing and resolves nothing."""
    observations = acc.get("observations", {})
    for obs in observations.values():
        kept: dict[str, Any] = {}
        for key, r in obs["readings"].items():
            if r["sequence"] <= through and r["origin"] in _COUNTING:
                r = {**r, "origin": _IMPORTED}
                key = reading_key(_IMPORTED, r["signal"])
            if key not in kept or kept[key]["sequence"] < r["sequence"]:
                kept[key] = r
        obs["readings"] = kept
        obs["status"] = status_of(kept, conflicting_subject=obs["conflicting_subject"])
    budget = acc.get("budget")
    if (
        budget is not None
        and budget["provenance"]["sequence"] <= through
        and budget["provenance"]["origin"] in _COUNTING
    ):  # a limit a file no trusted key signed says a person set: the lowest ever set holds
        lowest = budget.get("lowest") or {}
        acc["budget"] = {
            **budget,
            "usd_micros": lowest.get("usd_micros"),
            "tokens": lowest.get("tokens"),
            "provenance": {**budget["provenance"], "origin": _IMPORTED},
        }
    for b in acc.get("branches", {}).values():
        if b["status"] != "resolved" or b["provenance"]["sequence"] > through:
            continue
        hold = branch_hold(b["risk"], [(o, observations.get(o)) for o in b["observations"]])
        if hold:
            b.update(status="needs_human", reason=hold, resolved_by=None)


# -- action ledger transitions ---------------------------------------------------------


_REPLAYS = ("never", "reconcile", "idempotent", "safe")
# The statuses as the plain strings a record holds (the fold runs per event of long logs).
_STARTED, _COMPLETED, _FAILED, _UNKNOWN, _COMPENSATED = (
    str(s)
    for s in (
        ActionStatus.STARTED,
        ActionStatus.COMPLETED,
        ActionStatus.FAILED,
        ActionStatus.UNKNOWN,
        ActionStatus.COMPENSATED,
    )
)


@_on(EventType.ACTION_INTERCEPTED)
def _action_intercepted(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    # Once per action of a long log: each field read once, ``_str`` written out inline.
    replay, owner, sequence = p.get("replay"), p.get("owner"), e.sequence
    key, fallback, approval = p.get("key"), p.get("fallback_key"), p.get("approval_id")
    record = acc["actions"][p["action_id"]] = {
        "action_id": p["action_id"],
        "action_key": p["action_key"],
        "action_type": p["action_type"],
        "key": key if isinstance(key, str) else None,
        "dedup_key": p["dedup_key"],
        "fallback_key": fallback if isinstance(fallback, str) else None,
        "arguments": clip_nested(p.get("arguments")),
        "replay": replay if replay in _REPLAYS else "never",
        "status": _STARTED,
        "attempt": 1,
        "operation_key": p["operation_key"],
        "owner": owner if type(owner) is dict else {},
        "approval_id": approval if isinstance(approval, str) else None,
        "external_id": None,
        "result": None,
        "error": None,
        "note": None,
        "intercepted_sequence": sequence,
        "last_sequence": sequence,
        "origin": str(e.source),
        "settled_by": None,
        "settled_at": None,
    }
    if "versions" in p:  # only then: the records of earlier logs stay as they were
        record["versions"] = dict(p["versions"])
    if "estimate" in p:
        record["usage"] = [_usage_row(1, p["estimate"], e)]


def _usage_row(attempt: int, estimate: dict[str, Any] | None, e: EventLike) -> dict[str, Any]:
    return {
        "attempt": attempt,
        "estimate": dict(estimate) if estimate else None,
        "actual": None,
        "by": str(e.source),
    }


def _settle_usage(rec: dict[str, Any], p: dict[str, Any], e: EventLike) -> None:
    """The attempt's actual cost (a new list: records are copied shallowly)."""
    if "actual" not in p:
        return
    rows = list(rec.get("usage") or ())
    if not rows or rows[-1]["attempt"] != rec["attempt"]:
        rows.append(_usage_row(rec["attempt"], None, e))
    rows[-1] = {**rows[-1], "actual": dict(p["actual"])}
    rec["usage"] = rows


def _malformed(acc: Acc, e: EventLike) -> None:
    if "malformed_events" in acc:
        acc["malformed_events"] += 1
        if acc.get("first_malformed") is None:
            acc["first_malformed"] = e.sequence


def _action(acc: Acc, e: EventLike, p: dict[str, Any]) -> dict[str, Any] | None:
    action_id = p.get("action_id")  # (``_str(...) or ""`` written out)
    rec: dict[str, Any] | None = acc["actions"].get(action_id if isinstance(action_id, str) else "")
    if rec is not None:
        rec["last_sequence"] = e.sequence
    else:
        _malformed(acc, e)  # a transition of an action the log never intercepted
    return rec


@_on(EventType.ACTION_RETRIED)
def _action_retried(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    if (rec := _action(acc, e, p)) is not None:
        attempt = _int(p.get("attempt"))
        rec.update(
            status=_STARTED, attempt=attempt or rec["attempt"] + 1, settled_by=None, settled_at=None
        )
        rec["owner"] = p.get("owner") if isinstance(p.get("owner"), dict) else {}
        if "approval_id" in p:  # this attempt runs under a (new) approval
            rec["approval_id"] = _str(p["approval_id"])
        if "versions" in p:  # this attempt's versions over the earlier ones (kept if not given)
            rec["versions"] = {**(rec.get("versions") or {}), **p["versions"]}
        if "estimate" in p:
            rec["usage"] = [*(rec.get("usage") or ()), _usage_row(rec["attempt"], p["estimate"], e)]


@_on(EventType.ACTION_COMPLETED)
def _action_completed(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    if (rec := _action(acc, e, p)) is not None:
        # (``rec.update(...)`` written out, in its order: once per action of a long log)
        external_id = p.get("external_id")
        rec["status"] = _COMPLETED
        rec["external_id"] = external_id if isinstance(external_id, str) else None
        rec["settled_by"] = str(e.source)
        rec["settled_at"] = e.timestamp
        rec["result"] = clip_nested(p.get("result"))
        if "actual" in p:
            _settle_usage(rec, p, e)


@_on(EventType.ACTION_FAILED)
def _action_failed(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    if (rec := _action(acc, e, p)) is not None:
        rec.update(
            status=_FAILED,
            error=_str(p.get("error")),
            settled_by=str(e.source),
            settled_at=e.timestamp,
        )
        _settle_usage(rec, p, e)


@_on(EventType.ACTION_MARKED_UNKNOWN)
def _action_unknown(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    if (rec := _action(acc, e, p)) is not None:
        rec.update(status=_UNKNOWN, error=_str(p.get("reason")), settled_by=None, settled_at=None)


@_on(EventType.ACTION_RECONCILED)
def _action_reconciled(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    if (rec := _action(acc, e, p)) is not None:
        occurred = p.get("occurred") is True
        rec["status"] = _COMPLETED if occurred else _FAILED
        rec["note"] = _str(p.get("note"))
        rec["settled_by"], rec["settled_at"] = str(e.source), e.timestamp
        if occurred:
            rec["external_id"] = _str(p.get("external_id"))


@_on(EventType.ACTION_COMPENSATED)
def _action_compensated(acc: Acc, e: EventLike, p: dict[str, Any]) -> None:
    if (rec := _action(acc, e, p)) is not None:
        rec.update(
            status=_COMPENSATED,
            note=_str(p.get("note")),
            settled_by=str(e.source),
            settled_at=e.timestamp,
        )


# -- the fold ----------------------------------------------------------------------------


def empty_state(run_id: str) -> State:
    from continuum.state.records import State

    return State(run_id=run_id)


def fold(state: State, events: Iterable[EventLike]) -> State:
    """Apply ``events`` (in sequence order, after ``state.sequence``) to ``state``."""
    return type(state).model_validate(fold_plain(state.model_dump(mode="json"), events))


# Per known type (every handler is registered above): its handler, and the check of its
# payload (``payload_check``: exactly ``payload_problem(type, payload) is None``, compiled).
# Made on first use per type: a hook process folds a few types, and compiling every check
# at import cost it about 8 ms.
_STEPS: dict[str, tuple[Handler, Callable[[Any], bool]]] = {}


def _step_for(type_: str) -> tuple[Handler, Callable[[Any], bool]] | None:
    handler = _HANDLERS.get(type_)
    if handler is None:
        return None
    made = _STEPS[type_] = (handler, payload_check(type_))
    return made


def fold_plain(acc: Acc, events: Iterable[EventLike]) -> Acc:
    """The fold on a state's JSON form (``State.model_dump(mode="json")``, or
    ``empty_plain``): the same handlers, no model built, so verify can fold a long log and
    compare its actions with the index without validating a model per action. ``acc`` is
    changed in place and returned.

    The cyclic garbage collector is paused while it runs (as ``verify`` pauses it): a long
    log leaves a record per action behind, none in a reference cycle, and the collector
    walked them all again and again (a quarter of the time of folding 100,000 ledger
    events). It is re-enabled, if it was on, whatever happens; nothing else changes."""
    steps = _STEPS
    sequence, head_hash = acc["sequence"], acc["head_hash"]
    collecting = gc.isenabled()
    if collecting:
        gc.disable()
    try:
        for event in events:
            if event.sequence <= sequence:
                continue  # already folded (a checkpoint covers it)
            step = steps.get(event.type) or _step_for(event.type)
            if step is None:
                acc["unknown_event_types"] += 1
            elif step[1](event.payload):
                step[0](acc, event, event.payload)
            else:  # a known type that says something else: never dropped silently
                _malformed(acc, event)
            sequence, head_hash = event.sequence, event.hash
    finally:
        if collecting:
            gc.enable()
    acc["sequence"], acc["head_hash"] = sequence, head_hash
    progress = acc["progress"]
    if progress["total"] is not None:
        progress["pending"] = max(progress["total"] - progress["completed"] - progress["failed"], 0)
    else:
        progress["pending"] = sum(1 for w in acc["work"].values() if w["status"] == "pending")
    return acc


def empty_plain(run_id: str) -> Acc:
    """The JSON form of an empty state, for ``fold_plain``: ``State(run_id=run_id)
    .model_dump(mode="json")``, written out so that folding needs no model (a test keeps
    the two equal)."""
    return {
        "run_id": run_id,
        "sequence": 0,
        "head_hash": None,
        "status": "active",
        "goal": None,
        "progress": {"total": None, "completed": 0, "failed": 0, "pending": 0, "provenance": None},
        "plan": [],
        "plan_provenance": None,
        "decisions": {},
        "findings": {},
        "evidence": {},
        "work": {},
        "approvals": {},
        "dependencies": {},
        "model": None,
        "model_provenance": None,
        "model_assumptions": [],
        "actions": {},
        "confirmations": [],
        "self_certified": {},
        "last_checkpoint": None,
        "unknown_event_types": 0,
        "malformed_events": 0,
        "first_malformed": None,
    }


def apply_action_event(record: dict[str, Any] | None, event: EventLike) -> dict[str, Any] | None:
    """Apply one ledger event to one action record, with the fold's own handler.

    The store's action index is built with this, so the index equals the fold's view
    of every action by construction (and ``verify`` checks that it still does).
    """
    handler = _HANDLERS.get(event.type)
    action_id = event.payload.get("action_id")
    if handler is None or not event.type.startswith("action_") or not isinstance(action_id, str):
        return record
    if not payload_ok(event.type, event.payload):
        return record  # the fold skips it too
    acc: Acc = {"actions": {}, "malformed_events": 0}
    if record is not None:  # the handlers set top-level fields only: a shallow copy is enough
        acc["actions"][record["action_id"]] = dict(record)
    handler(acc, event, event.payload)
    out: dict[str, Any] | None = acc["actions"].get(action_id)
    return out


APPROVAL_TYPES = frozenset(
    str(t)
    for t in (
        EventType.APPROVAL_REQUESTED,
        EventType.APPROVAL_GRANTED,
        EventType.APPROVAL_DENIED,
        EventType.APPROVAL_REVOKED,
    )
)


def apply_approval_event(record: dict[str, Any] | None, event: EventLike) -> dict[str, Any] | None:
    """Apply one approval event to one approval record, with the fold's own handler (the
    store's approval index is built with it, as the action index is with
    ``apply_action_event``). None for an event that is not a well-formed approval event."""
    if event.type not in APPROVAL_TYPES or not payload_ok(event.type, event.payload):
        return record
    acc: Acc = {"approvals": {}}
    if record is not None:
        acc["approvals"][record["id"]] = dict(record)
    _approval(acc, event, event.payload)
    out: dict[str, Any] | None = acc["approvals"].get(event.payload["approval_id"])
    return out


def project(run_id: str, events: Iterable[EventLike], *, start: State | None = None) -> State:
    """Project the state of ``run_id`` from its events (optionally from a checkpoint).

    Pure: the same events give the same ``State`` (goal, progress, work, findings,
    decisions, dependencies, actions, confirmations, each fact with its provenance).
    Events are taken as given: read them with ``Storage.read_events``, which verifies
    each one, rather than from an unverified source.
    """
    return fold(start if start is not None else empty_state(run_id), events)

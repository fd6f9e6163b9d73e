"""Whether a person decided on a call that needs it: approvals bound to one call, checked
against the log inside the intercept's transaction, and recorded decisions.

Which calls need a decision is ``continuum.ledger.approval_rules`` (``.continuum/approvals.toml``);
its names are re-exported here.

An approval allows a call only as the verified log (or, for archived history, the verified
checkpoint) records it: requested for this action type and exactly these arguments, granted
by a person; the approval index only finds it.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from continuum.errors import (
    HistoryArchivedError,
    IntegrityError,
    InvalidTransitionError,
    NotFoundError,
    UsageError,
)
from continuum.eventlog.canonical import digest, parse_json
from continuum.eventlog.events import EventLike, EventType
from continuum.eventlog.payloads import APPROVAL_SCOPES
from continuum.faults import fault_point
from continuum.ledger.approval_rules import APPROVALS_FILE as APPROVALS_FILE
from continuum.ledger.approval_rules import ApprovalRule as ApprovalRule
from continuum.ledger.approval_rules import ApprovalRules as ApprovalRules
from continuum.ledger.approval_rules import RuleFiles as RuleFiles
from continuum.ledger.approval_rules import load_rules as load_rules
from continuum.ledger.approval_rules import parse_rules as parse_rules
from continuum.ledger.approval_rules import rule_paths as rule_paths
from continuum.ledger.approval_rules import store_dir as store_dir
from continuum.state.records import TRUSTED_ORIGINS, Approval
from continuum.store.base import MAX_PAGE, Storage, WriteTx
from continuum.store.models import ApprovalRow
from continuum.types import Origin, RunStatus
from continuum.untrusted import unsafe_characters

# -- binding an approval to one call, inside the intercept's transaction ----------------------


def arguments_hash(arguments: Any) -> str:
    """The digest of exactly these arguments (canonical JSON): what a call approval binds."""
    return digest(["arguments", arguments])


def binding_of(action_id: str, args_hash: str) -> str:
    """One call: the action (its ledger identity) with exactly these arguments."""
    return digest(["approval", action_id, args_hash])


@dataclass(frozen=True)
class Verdict:
    """What the approvals say about one call: ``allow`` (under ``approval_id``),
    ``awaiting_approval`` or ``denied`` (with the person's ``reason``)."""

    status: str
    approval_id: str
    reason: str | None = None


def _mismatch(grant: ApprovalRow, why: str) -> IntegrityError:
    return IntegrityError(
        f"the approval index of run {grant.run_id!r} says {grant.approval_id} allows this "
        f"call, but the log does not ({why}): nothing may proceed",
        code="integrity.index_mismatch",
        hint=f"run `continuum verify {grant.run_id}`; nothing was changed",
        run_id=grant.run_id,
        approval_id=grant.approval_id,
    )


ReadKept = Callable[[str], "Mapping[str, Any] | None"]
"""The fold's record of an approval (by id) from the latest verified checkpoint: what an
archived request or decision is checked against once its event left the live log."""


def kept_approval(store: Storage, run_id: str, approval_id: str) -> dict[str, Any] | None:
    """The fold's record of ``approval_id`` in the latest checkpoint of ``run_id`` that its
    sealing ``checkpointed`` event (read from the verified live log) vouches for: state
    hash recorded there and recomputed from the state. None without such a checkpoint or
    record. (What an archived approval event is checked against: ``ReadKept``.)"""
    for cp in store.list_checkpoints(run_id):  # newest first
        sealed = next(
            iter(store.iter_raw(run_id, cp.event_sequence - 1, upto=cp.event_sequence)), None
        )
        if (
            sealed is None
            or sealed.type != EventType.CHECKPOINTED
            or sealed.payload.get("state_hash") != cp.state_hash
        ):
            continue
        try:
            state = parse_json(cp.state_json)
        except (ValueError, TypeError):
            continue
        if digest(state) != cp.state_hash or not isinstance(state, dict):
            continue
        approvals = state.get("approvals")
        record = approvals.get(approval_id) if isinstance(approvals, dict) else None
        if not isinstance(record, dict):
            return None
        try:
            return Approval.model_validate(record).model_dump(mode="json")
        except ValueError:
            return None
    return None


def _logged(
    grant: ApprovalRow,
    seq: Any,
    event_type: EventType,
    read_event: Callable[[int], EventLike | None],
    read_kept: ReadKept | None,
) -> tuple[Mapping[str, Any], Any] | None:
    """(payload, origin) of the approval's event at ``seq``, read back from the verified
    log; for an archived event, the matching fields of the verified checkpoint's record
    (None when neither vouches for it)."""
    if not isinstance(seq, int) or isinstance(seq, bool) or seq <= 0:
        return None
    try:
        event = read_event(seq)
    except HistoryArchivedError:
        kept = read_kept(grant.approval_id) if read_kept is not None else None
        if kept is None:
            return None
        if event_type == EventType.APPROVAL_REQUESTED:
            if kept.get("requested_sequence") != seq:
                return None
            return kept, kept.get("requested_by")
        if kept.get("decided_sequence") != seq or kept.get("status") != "granted":
            return None
        return {"approval_id": kept.get("id"), "scope": kept.get("scope")}, kept.get("decided_by")
    if event is None or event.type != event_type:
        return None
    if event.payload.get("approval_id") != grant.approval_id:
        return None
    return event.payload, event.source


def _confirmed(
    grant: ApprovalRow,
    read_event: Callable[[int], EventLike | None],
    *,
    action_type: str,
    binding: str | None,
    args_hash: str | None,
    read_kept: ReadKept | None = None,
) -> str:
    """The grant checked against the verified log, not the index: its request
    (``approval_requested``) must be for this action type and, for a call grant, bound to
    exactly this call (``binding``, ``args_hash``); its decision must be a person's (or
    trusted code's) ``approval_granted``, for the run when ``binding`` is None. An index
    row that says more than the log (an edited column or record) lets nothing run.
    Archived events are checked against the verified checkpoint (``read_kept``)."""
    rec = grant.record
    if rec.get("status") != "granted":
        raise _mismatch(grant, "it is not granted")
    asked = _logged(
        grant, rec.get("requested_sequence"), EventType.APPROVAL_REQUESTED, read_event, read_kept
    )
    if asked is None:
        raise _mismatch(grant, "no request of it is recorded")
    request, _ = asked
    if request.get("action_type") != action_type:
        raise _mismatch(grant, "it was asked for another action type")
    if binding is not None and (
        request.get("binding") != binding or request.get("arguments_hash") != args_hash
    ):
        raise _mismatch(grant, "it was asked for other arguments")
    decided = _logged(
        grant, rec.get("decided_sequence"), EventType.APPROVAL_GRANTED, read_event, read_kept
    )
    if decided is None:
        raise _mismatch(grant, "no grant of it is recorded")
    payload, source = decided
    if str(source) not in {str(o) for o in TRUSTED_ORIGINS}:
        raise _mismatch(grant, "its grant was not a person's")
    if rec["decided_sequence"] <= rec["requested_sequence"]:  # both ints: _logged checked
        raise _mismatch(grant, "its grant came before its request")
    scope = payload.get("scope") if payload.get("scope") in APPROVAL_SCOPES else "call"
    if binding is None and scope != "run":
        raise _mismatch(grant, "it was not granted for the run")
    return grant.approval_id


def judge_call(
    tx: WriteTx,
    *,
    rule: ApprovalRule,
    action_type: str,
    action_id: str,
    action_key: str,
    key: str | None,
    arguments: Any,
    effect: str | None,
    origin: Origin,
    under: str | None,
    read_event: Callable[[int], EventLike | None],
    read_kept: ReadKept | None = None,
) -> Verdict:
    """Inside the intercept's write transaction: may this call run now?

    The latest approval bound to exactly this call decides first if it was denied (or
    revoked): a denial stands. Else a grant of this action type for the rest of the run
    allows it; else that approval decides: requested -> wait, granted and not yet used ->
    allow (the caller records the attempt under it, which uses it up: ``under`` is the
    approval the action's last attempt ran under). With
    none, or only a used one, a new approval is requested: its event is appended here, in
    the same transaction, and a repeat of the same call finds it instead of asking again.
    Nothing here ever grants: only ``approval_granted`` from a person does, and a grant
    is read back from the log (``read_event``; an archived one from the verified
    checkpoint, ``read_kept``) and checked to be for this action type and, for a call
    grant, for exactly these arguments before anything runs under it.
    """
    args_hash = arguments_hash(arguments)
    binding = binding_of(action_id, args_hash)
    found = tx.find_approval(binding=binding)
    if found is not None and found.record.get("binding") != binding:
        raise _mismatch(found, "its row is filed under another call")
    status = found.record.get("status") if found is not None else None
    if found is not None and status in ("denied", "revoked"):  # a denial of this call stands
        return Verdict("denied", found.approval_id, found.record.get("reason"))
    grant = tx.find_approval(run_grant=action_type)
    if grant is not None:
        if grant.record.get("action_type") != action_type or grant.record.get("scope") != "run":
            raise _mismatch(grant, "its row is filed under another grant")
        return Verdict(
            "allow",
            _confirmed(
                grant,
                read_event,
                action_type=action_type,
                binding=None,
                args_hash=None,
                read_kept=read_kept,
            ),
        )
    if found is not None and status == "requested":
        return Verdict("awaiting_approval", found.approval_id)
    if found is not None and status == "granted" and under != found.approval_id:
        if found.record.get("action_id") != action_id:
            raise _mismatch(found, "it was asked for another action")
        return Verdict(
            "allow",
            _confirmed(
                found,
                read_event,
                action_type=action_type,
                binding=binding,
                args_hash=args_hash,
                read_kept=read_kept,
            ),
        )
    approval_id = "apr_" + secrets.token_hex(8)
    tx.append(
        EventType.APPROVAL_REQUESTED,
        {
            "approval_id": approval_id,
            "text": rule.description or f"{action_type} needs a person's decision",
            "action_type": action_type,
            "action_id": action_id,
            "action_key": action_key,
            "key": key,
            "arguments": arguments,
            "arguments_hash": args_hash,
            "binding": binding,
            "rule": rule.describe(),
            "effect": effect,
        },
        source=origin,
    )
    return Verdict("awaiting_approval", approval_id)


# -- listing and deciding (``Continuum.approvals`` / ``Continuum.decide``) --------------------

MAX_REASON_CHARS = 2000


class ApprovalInfo(Approval):
    """An approval as listed: the fold's record, its run, and (for a call approval that
    was used) the action that ran under it."""

    run_id: str
    used_by: str | None = None


def approval_info(store: Storage, row: ApprovalRow) -> ApprovalInfo:
    rec = Approval.model_validate(row.record)
    used_by = None
    if rec.action_id is not None and rec.status == "granted" and rec.scope != "run":
        action = store.get_action(row.run_id, rec.action_id)
        if action is not None and action.record.get("approval_id") == rec.id:
            used_by = rec.action_id
    return ApprovalInfo(**rec.model_dump(), run_id=row.run_id, used_by=used_by)


def list_approval_infos(
    store: Storage, run_id: str | None = None, *, pending_only: bool = True, limit: int = MAX_PAGE
) -> list[ApprovalInfo]:
    """Approvals in the order they were requested. ``pending_only``: those still waiting
    for a decision, in runs that are still active (a finished run takes no new effects)."""
    if run_id is not None:
        store.get_run(run_id)  # a missing run is not one without approvals
    rows = store.list_approvals(
        run_id=run_id, status="requested" if pending_only else None, limit=limit
    )
    if pending_only:
        active: dict[str, bool] = {}
        for row in rows:
            if row.run_id not in active:
                active[row.run_id] = store.get_run(row.run_id).status == RunStatus.ACTIVE
        rows = [r for r in rows if active[r.run_id]]
    return [approval_info(store, r) for r in rows]


def find_approval_row(store: Storage, approval_id: str, run_id: str | None = None) -> ApprovalRow:
    """The approval ``approval_id`` (of ``run_id``, if given); ``not_found.approval``, or
    ``usage.ambiguous_approval`` when two runs hold that id (logs written by hand)."""
    if not isinstance(approval_id, str) or not approval_id:
        raise UsageError(
            "an approval id is required",
            code="usage.bad_approval_id",
            hint="list them with `continuum approvals`",
        )
    rows = [r for r in store.find_approvals(approval_id) if run_id is None or r.run_id == run_id]
    if not rows:
        where = f" in run {run_id!r}" if run_id is not None else ""
        raise NotFoundError(
            f"approval {approval_id!r} not found{where}",
            code="not_found.approval",
            hint="list pending approvals with `continuum approvals`",
            approval_id=approval_id,
        )
    if len(rows) > 1:
        raise UsageError(
            f"approval id {approval_id!r} is in several runs "
            f"({', '.join(sorted(r.run_id for r in rows))})",
            code="usage.ambiguous_approval",
            hint="name the run with --run RUN",
            approval_id=approval_id,
        )
    return rows[0]


def _reason(reason: Any) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise UsageError(
            "a decision needs a reason",
            code="usage.bad_reason",
            hint='say why, e.g. --reason "invoice checked with the customer"',
        )
    text: str = reason.strip()
    if len(text) > MAX_REASON_CHARS:
        raise UsageError(
            f"the reason is {len(text)} characters long (at most {MAX_REASON_CHARS})",
            code="usage.bad_reason",
            hint="shorten it",
        )
    bad = unsafe_characters(text)
    if bad:
        raise UsageError(
            f"the reason holds control, bidi or invisible characters ({', '.join(bad)})",
            code="usage.bad_reason",
            hint="write the reason as one line of plain text",
        )
    return text


def record_decision(
    store: Storage,
    approval_id: str,
    *,
    allow: bool,
    reason: str,
    scope: str = "call",
    run_id: str | None = None,
    expect_binding: str | None = None,
    via: Mapping[str, str] | None = None,
) -> ApprovalInfo:
    """A person's decision on a pending approval, recorded with origin ``human``.

    ``scope="run"`` (allow only) grants the action type for the rest of the run, and
    settles the run's other pending approvals of that type as granted, citing this one.
    ``expect_binding``: the binding the person was shown; if the approval no longer has
    it, nothing is written. Refused (``ledger.invalid_transition``) once decided: a
    decision stands, and a new call asks again. ``via`` (checked by the caller): how the
    person gave it, on every event the decision writes.
    """
    how = {} if via is None else {"via": dict(via)}
    if scope not in APPROVAL_SCOPES:
        raise UsageError(
            f"scope {scope!r} is not call or run",
            code="usage.bad_scope",
            hint="use --scope call (this exact call) or --scope run (this action "
            "type for the rest of the run)",
        )
    if not allow and scope != "call":
        raise UsageError(
            "a denial covers one call (these exact arguments)",
            code="usage.bad_scope",
            hint="deny with --scope call (the default); to stop a whole run, abort it",
        )
    reason = _reason(reason)
    found = find_approval_row(store, approval_id, run_id)
    with store.write(found.run_id) as tx:
        current = tx.find_approval(approval_id=found.approval_id)
        if current is None:
            raise NotFoundError(
                f"approval {approval_id!r} not found",
                code="not_found.approval",
                hint="list pending approvals with `continuum approvals`",
            )
        rec = Approval.model_validate(current.record)
        if rec.status != "requested":
            by = f" by {rec.decided_by}" if rec.decided_by else ""
            at = f" at {rec.decided_at}" if rec.decided_at else ""
            raise InvalidTransitionError(
                f"approval {approval_id} is already {rec.status}{by}{at}; nothing was recorded",
                hint="a decision stands; the call asks again with new arguments",
                approval_id=approval_id,
                status=rec.status,
            )
        if expect_binding is not None and rec.binding != expect_binding:
            raise IntegrityError(
                f"approval {approval_id} is not the one that was shown; nothing was recorded",
                code="integrity.approval_mismatch",
                hint="list it again and decide what is shown",
            )
        if scope == "run" and rec.action_type is None:
            raise UsageError(
                f"approval {approval_id} names no action type, so it cannot be granted for the run",
                code="usage.bad_scope",
                hint="grant it for this call only (--scope call)",
            )
        if not allow:
            tx.append(
                EventType.APPROVAL_DENIED,
                {"approval_id": rec.id, "reason": reason, **how},
                source=Origin.HUMAN,
            )
        else:
            tx.append(
                EventType.APPROVAL_GRANTED,
                {"approval_id": rec.id, "scope": scope, "reason": reason, **how},
                source=Origin.HUMAN,
            )
            if scope == "run":
                for other in store.list_approvals(run_id=found.run_id, status="requested"):
                    if other.record.get("action_type") == rec.action_type:
                        tx.append(
                            EventType.APPROVAL_GRANTED,
                            {
                                "approval_id": other.approval_id,
                                "scope": "call",
                                "reason": f"covered by the grant of {rec.id} for the rest of the "
                                f"run: {reason}",
                                **how,
                            },
                            source=Origin.HUMAN,
                        )
    fault_point("after_decide_commit")
    return approval_info(store, find_approval_row(store, found.approval_id, found.run_id))


__all__ = [
    "APPROVALS_FILE",
    "ApprovalInfo",
    "ApprovalRule",
    "ApprovalRules",
    "RuleFiles",
    "Verdict",
    "approval_info",
    "arguments_hash",
    "binding_of",
    "find_approval_row",
    "judge_call",
    "list_approval_infos",
    "load_rules",
    "parse_rules",
    "record_decision",
    "rule_paths",
    "store_dir",
]

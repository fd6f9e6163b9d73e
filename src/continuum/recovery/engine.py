"""The recovery engine: state + validation + ledger + chain -> one verdict + contract.

``decide`` is pure: every proposal comes from a real condition in its inputs, and the
verdict is the most severe proposal (references/contract.md §8). The runtime gathers the
inputs (it reads the store, observes the environment and checks whether action owners
are alive).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from continuum.eventlog.reports import VerifyReport
from continuum.recovery.contract import InvalidatedComponent, RecoveryContract, seal_contract
from continuum.state.records import ActionRecord, State
from continuum.state.validation import ValidationReport
from continuum.types import ActionStatus, ComponentStatus, DependencyStatus, Mode, RunStatus
from continuum.untrusted import quoted


class Proposal(BaseModel):
    """One verdict a condition calls for, why, and the actions it requires."""

    model_config = ConfigDict(frozen=True)

    mode: Mode
    reason: str
    actions: list[str] = Field(default_factory=list)


class ChildView(BaseModel):
    """What a parent's verdict needs of one run below it (a child, or a child's child):
    its ``path`` from the parent (``a/b``), its ``status``, its open actions (those a
    person must settle, and those still performed: ``in_flight``), the approvals that
    wait for a person's decision and the plan branches that wait for a person (id and
    the reason)."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    path: str
    status: RunStatus
    open_actions: list[ActionRecord] = Field(default_factory=list)
    in_flight: frozenset[str] = frozenset()
    pending_approvals: tuple[str, ...] = ()
    waiting_branches: tuple[tuple[str, str], ...] = ()


def _child_proposals(children: list[ChildView]) -> list[Proposal]:
    out: list[Proposal] = []
    for child in children:
        for a in sorted(child.open_actions, key=lambda x: (x.intercepted_sequence, x.action_id)):
            where = f"child run {quoted(child.path, limit=200)}"
            if a.status == ActionStatus.STARTED and a.action_id in child.in_flight:
                out.append(
                    Proposal(
                        mode=Mode.WAIT,
                        reason=f"{where}: action {quoted(a.action_key, limit=120)} is being "
                        "performed by a live process",
                        actions=[f"wait_for_child:{child.run_id}"],
                    )
                )
            elif a.needs_human:
                out.append(
                    Proposal(
                        mode=Mode.REQUEST_HUMAN,
                        reason=f"{where}: action {quoted(a.action_key, limit=120)} may have "
                        "happened and is not settled; a person settles it in the child run",
                        actions=[f"reconcile_child_action:{child.run_id}:{a.action_id}"],
                    )
                )
        where = f"child run {quoted(child.path, limit=200)}"
        for approval in child.pending_approvals:
            out.append(
                Proposal(
                    mode=Mode.REQUEST_HUMAN,
                    reason=f"{where}: approval {quoted(approval, limit=120)} awaits a "
                    "person's decision",
                    actions=[f"await_child_approval:{child.run_id}:{approval}"],
                )
            )
        for branch, why in child.waiting_branches:
            out.append(
                Proposal(
                    mode=Mode.REQUEST_HUMAN,
                    reason=f"{where}: branch {quoted(branch, limit=120)} waits for a person: {why}",
                    actions=[f"resolve_child_branch:{child.run_id}:{branch}"],
                )
            )
    return out


class Decision(BaseModel):
    """What ``decide`` returns: the verdict ``mode`` (the most severe proposal), every
    ``proposals`` that led to it, the ``required_actions`` in order, the
    ``next_allowed_action``, the ``reason`` and the actions whose outcome is uncertain."""

    model_config = ConfigDict(frozen=True)

    mode: Mode
    proposals: list[Proposal]
    required_actions: list[str]
    next_allowed_action: str
    reason: str
    uncertain_actions: list[ActionRecord]

    @property
    def safe(self) -> bool:
        """True only for the ``resume`` verdict."""
        return self.mode == Mode.RESUME


SAFETY_STATUS = {
    Mode.RESUME: "safe",
    Mode.REPAIR_AND_RESUME: "needs_repair",
    Mode.REPLAN: "needs_replan",
    Mode.WAIT: "blocked",
    Mode.REQUEST_HUMAN: "blocked",
    Mode.ROLLBACK: "unsafe",
    Mode.ABORT: "unsafe",
    Mode.NOT_RESUMABLE: "terminal",
}


# Who reported a failure, in the words of the reason (an origin otherwise).
_WHO = {"imported": "an imported record (a file no trusted key signed)"}


def _action_proposals(
    state: State, in_flight: set[str]
) -> tuple[list[Proposal], list[ActionRecord]]:
    proposals: list[Proposal] = []
    uncertain: list[ActionRecord] = []
    # Log order, not dict order: a state restored from a checkpoint has its keys sorted,
    # and the verdict must not depend on whether a checkpoint was used.
    for a in sorted(state.actions.values(), key=lambda x: (x.intercepted_sequence, x.action_id)):
        if a.status == ActionStatus.STARTED and a.action_id in in_flight:
            proposals.append(
                Proposal(
                    mode=Mode.WAIT,
                    reason=f"action {quoted(a.action_key, limit=120)} is being performed by a live process",
                    actions=[f"wait_for_action:{a.action_id}"],
                )
            )
        elif a.status.unresolved:
            uncertain.append(a)
            proposals.append(
                Proposal(
                    mode=Mode.REQUEST_HUMAN,
                    reason=f"action {quoted(a.action_key, limit=120)} was interrupted and may have happened: its "
                    "status is unknown until reconciled",
                    actions=[f"reconcile_action:{a.action_id}"],
                )
            )
        elif a.failure_unconfirmed:
            # Only a person (or continuum's own check) may turn "unknown" into "did not
            # happen": an agent's word that it failed does not let it run again.
            uncertain.append(a)
            proposals.append(
                Proposal(
                    mode=Mode.REQUEST_HUMAN,
                    reason=f"action {quoted(a.action_key, limit=120)} was reported as not done by "
                    f"{_WHO.get(str(a.settled_by), a.settled_by) or 'an unknown writer'}; a "
                    "person must confirm that "
                    "before it may run again",
                    actions=[f"reconcile_action:{a.action_id}"],
                )
            )
        elif a.status == ActionStatus.COMPLETED and a.approval_id:
            approval = state.approvals.get(a.approval_id)
            if approval is not None and approval.status == "revoked":
                proposals.append(
                    Proposal(
                        mode=Mode.ROLLBACK,
                        reason=f"action {quoted(a.action_key, limit=120)} was done under approval {a.approval_id}, "
                        "which was revoked: undo it in the external system, then record the "
                        "undo (`continuum compensate`)",
                        actions=[f"compensate_action:{a.action_id}"],
                    )
                )
    return proposals, uncertain


def decide(
    state: State,
    validation: ValidationReport,
    chain: VerifyReport,
    *,
    in_flight: set[str] | None = None,
    tolerate_unknown: bool = False,
    children: list[ChildView] | None = None,
) -> Decision:
    """Turn the inputs into proposals and pick the most severe one (pure).

    Each real condition in ``state``, its ``validation`` and the ``chain`` report makes a
    proposal: a damaged chain ``abort``; a finished run ``not_resumable``; unresolved
    actions, pending approvals, a plan branch waiting for a person (a high-risk branch on
    an observation not verified, a contested environment observation), an unsettled
    action in a child run (``children``; ``wait`` while a live process performs it),
    unconfirmed
    self-reported state or a dependency that
    cannot be checked (unless ``tolerate_unknown``) ``request_human``; a removed
    dependency ``replan``; stale or conflicted derived state ``repair_and_resume``; an
    action whose owner is alive (``in_flight``) ``wait``. Without any, ``resume``.
    Returns a ``Decision``; raises nothing.
    """
    proposals: list[Proposal] = []
    uncertain: list[ActionRecord] = []
    if not chain.ok:
        v = chain.violations[0]
        proposals.append(
            Proposal(
                mode=Mode.ABORT,
                reason=f"the event log is damaged at sequence "
                f"{v.sequence} ({v.kind}); trusted through {chain.trusted_through}",
                actions=[f"inspect_damage:{state.run_id}"],
            )
        )
    if state.status != RunStatus.ACTIVE and chain.ok:  # damage outranks "finished"
        proposals.append(
            Proposal(
                mode=Mode.NOT_RESUMABLE,
                reason=f"the run is {state.status}; there is nothing to resume",
            )
        )
    if state.malformed_events:
        proposals.append(
            Proposal(
                mode=Mode.REQUEST_HUMAN,
                reason=f"{state.malformed_events} event(s) of known types could not be understood "
                f"(first at sequence {state.first_malformed}); the state may be missing facts",
                actions=[f"review_malformed_events:{state.run_id}"],
            )
        )
    action_props, uncertain = _action_proposals(state, in_flight or set())
    proposals += action_props
    proposals += _child_proposals(children or [])
    for ap in sorted(state.approvals.values(), key=lambda x: x.id):
        if ap.pending:  # only a person decides: `continuum decide ID --allow|--deny`
            proposals.append(
                Proposal(
                    mode=Mode.REQUEST_HUMAN,
                    reason=f"approval {ap.id} awaits a person's decision",
                    actions=[f"await_approval:{ap.id}"],
                )
            )
    for b in sorted(state.branches.values(), key=lambda x: (x.provenance.sequence, x.id)):
        if b.waiting:  # only a person resolves it: `continuum resolve-branch RUN ID`
            proposals.append(
                Proposal(
                    mode=Mode.REQUEST_HUMAN,
                    reason=f"branch {quoted(b.id, limit=120)} waits for a person: {b.reason}",
                    actions=[f"resolve_branch:{b.id}"],
                )
            )
    review = validation.with_status(ComponentStatus.REQUIRES_REVIEW)
    if review:
        names = ", ".join(c.component for c in review)
        proposals.append(
            Proposal(
                mode=Mode.REQUEST_HUMAN,
                reason=f"self-reported state not confirmed by a human: {names}",
                actions=[f"confirm_run:{state.run_id}"],
            )
        )
    for d in validation.dependencies:
        if d.status == DependencyStatus.UNKNOWN and not tolerate_unknown:
            proposals.append(
                Proposal(
                    mode=Mode.REQUEST_HUMAN,
                    reason=f"dependency {quoted(d.name, limit=120)} could not be checked now",
                    actions=[f"provide_environment:{d.name}"],
                )
            )
        elif d.status == DependencyStatus.REMOVED:
            proposals.append(
                Proposal(
                    mode=Mode.REPLAN,
                    reason=f"dependency {quoted(d.name, limit=120)} was removed; work derived from it is invalid",
                    actions=[f"replan_without:{d.name}"],
                )
            )
    repair: list[str] = []
    for c in validation.with_status(ComponentStatus.CONFLICTED, ComponentStatus.STALE):
        kind, _, ident = c.component.partition(":")
        verb = {
            "dependency": "refresh_dependency",
            "evidence": "recompute_evidence",
            "finding": "recheck_finding",
            "decision": "revisit_decision",
            "model_assumption": "reverify_assumption",
        }.get(kind, "repair")
        repair.append(f"{verb}:{ident}")
    if repair:
        proposals.append(
            Proposal(
                mode=Mode.REPAIR_AND_RESUME,
                reason="derived state is stale or conflicted: repair in order",
                actions=repair,
            )
        )
    if not proposals:
        proposals.append(
            Proposal(
                mode=Mode.RESUME,
                reason="log verified, environment unchanged, "
                "no unresolved actions, state confirmed",
                actions=["continue"],
            )
        )
    ordered = sorted(proposals, key=lambda p: -p.mode.severity)  # stable within a mode
    top = ordered[0].mode
    required: list[str] = []
    for p in ordered:
        for act in p.actions:
            if act not in required:
                required.append(act)
    reasons = [p.reason for p in ordered if p.mode == top]
    return Decision(
        mode=top,
        proposals=ordered,
        required_actions=required,
        next_allowed_action=required[0] if required else "none",
        reason="; ".join(reasons),
        uncertain_actions=uncertain,
    )


def build_contract(
    state: State,
    validation: ValidationReport,
    decision: Decision,
    chain: VerifyReport,
    *,
    checkpoint_version: int | None,
    observed_env: dict[str, str | None],
    env_sources: dict[str, str] | None = None,
) -> RecoveryContract:
    """The sealed, deterministic contract for this decision (no clock inside the seal)."""
    body = RecoveryContract(
        run_id=state.run_id,
        verdict=str(decision.mode),
        safe=decision.safe,
        safety_status=SAFETY_STATUS[decision.mode],
        checkpoint_version=checkpoint_version,
        head_sequence=chain.head_sequence,
        head_hash=chain.head_hash,
        verified_components=validation.verified,
        invalidated_components=[
            InvalidatedComponent(component=c.component, status=str(c.status), reason=c.reason)
            for c in validation.invalidated
        ],
        required_actions=decision.required_actions,
        next_allowed_action=decision.next_allowed_action,
        evidence={
            "chain_ok": chain.ok,
            "trusted_through": chain.trusted_through,
            "environment": dict(sorted(observed_env.items())),
            # supplied (by the caller) | observed (by continuum) | unobserved
            "environment_sources": dict(sorted((env_sources or {}).items())),
            "dependencies": {d.name: str(d.status) for d in validation.dependencies},
            "unresolved_actions": sorted(a.action_id for a in decision.uncertain_actions),
            "progress": state.progress.model_dump(mode="json", exclude={"provenance"}),
        },
        reason=decision.reason,
    )
    return seal_contract(body)

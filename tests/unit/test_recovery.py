"""The recovery engine (contract §8): every mode is reached from a real condition in its
inputs, the verdict is the most severe proposal, and the contract is sealed."""

from __future__ import annotations

from typing import Any

import pytest

from continuum.eventlog.canonical import canonical_json, parse_json
from continuum.eventlog.chain import verify_chain
from continuum.eventlog.event_model import Event, seal
from continuum.eventlog.events import EventType
from continuum.eventlog.reports import VerifyReport
from continuum.recovery.engine import SAFETY_STATUS, Decision, build_contract, decide
from continuum.state.projection import project
from continuum.state.records import State
from continuum.state.validation import Observation, ValidationReport, validate_state
from continuum.types import Mode, Origin

RUN = "run_rec"
TS = "2025-01-01T00:00:00.000000Z"


class Log:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(
        self,
        type_: EventType | str,
        payload: dict[str, Any] | None = None,
        *,
        source: Origin = Origin.DETERMINISTIC,
    ) -> Log:
        seq = len(self.events) + 1
        self.events.append(
            seal(
                event_id=f"evt_{seq}",
                run_id=RUN,
                sequence=seq,
                type=str(type_),
                timestamp=TS,
                payload=payload or {},
                causer_event_id=None,
                source=source,
                prev_hash=self.events[-1].hash if self.events else None,
            )
        )
        return self

    def chain(self) -> VerifyReport:
        return verify_chain(
            RUN, self.events, len(self.events), self.events[-1].hash if self.events else None
        )


class Outcome:
    def __init__(
        self,
        log: Log,
        observed: dict[str, Observation | None] | None = None,
        *,
        in_flight: set[str] | None = None,
        tolerate_unknown: bool = False,
        chain: VerifyReport | None = None,
        state: State | None = None,
    ) -> None:
        self.state = state if state is not None else project(RUN, log.events)
        self.validation: ValidationReport = validate_state(self.state, observed or {})
        self.chain = chain if chain is not None else log.chain()
        self.decision: Decision = decide(
            self.state,
            self.validation,
            self.chain,
            in_flight=in_flight,
            tolerate_unknown=tolerate_unknown,
        )

    @property
    def mode(self) -> Mode:
        return self.decision.mode

    def proposed(self) -> set[Mode]:
        return {p.mode for p in self.decision.proposals}


def started() -> Log:
    return Log().add(EventType.RUN_STARTED, {"goal": "Analyze", "total": 10})


def intercepted(action_id: str = "act_1", **extra: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "action_id": action_id,
        "action_key": f"send:{action_id}",
        "action_type": "send",
        "key": action_id,
        "dedup_key": f"d_{action_id}",
        "operation_key": f"op_{action_id}",
        "arguments": {},
        "replay": "never",
        "owner": {"host": "elsewhere", "pid": 1},
    }
    payload.update(extra)
    return payload


def knowledge(log: Log) -> Log:
    return (
        log.add(EventType.DEPENDENCY_DECLARED, {"name": "ds", "version": "1"})
        .add(EventType.EVIDENCE_ADDED, {"evidence_id": "e1", "dependencies": ["ds"]})
        .add(EventType.FINDING_ADDED, {"finding_id": "f1", "evidence": ["e1"]})
        .add(EventType.DECISION_CREATED, {"decision_id": "d1", "findings": ["f1"]})
    )


# -- each mode from a real condition -----------------------------------------------------------


def test_a_clean_verified_run_resumes() -> None:
    out = Outcome(started())
    assert out.mode == Mode.RESUME
    assert out.decision.safe
    assert out.decision.next_allowed_action == "continue"
    assert out.decision.required_actions == ["continue"]
    assert out.decision.uncertain_actions == []


def test_an_unchanged_declared_dependency_still_resumes() -> None:
    out = Outcome(knowledge(started()), {"ds": Observation(version="1")})
    assert out.mode == Mode.RESUME


def test_a_changed_dependency_repairs_in_order_dependency_evidence_finding_decision() -> None:
    out = Outcome(knowledge(started()), {"ds": Observation(version="2")})
    assert out.mode == Mode.REPAIR_AND_RESUME
    assert not out.decision.safe
    assert out.decision.required_actions == [
        "refresh_dependency:ds",
        "recompute_evidence:e1",
        "recheck_finding:f1",
        "revisit_decision:d1",
    ]
    assert out.decision.next_allowed_action == "refresh_dependency:ds"


def test_a_model_switch_repairs_assumptions_made_under_the_old_model() -> None:
    log = (
        Log()
        .add(EventType.RUN_STARTED, {"goal": "g", "model": "m-1"})
        .add(EventType.MODEL_ASSUMPTION_RECORDED, {"assumption_id": "a1"})
    )
    state = project(RUN, log.events)
    validation = validate_state(state, {}, expected_model="m-2")
    decision = decide(state, validation, log.chain())
    assert decision.mode == Mode.REPAIR_AND_RESUME
    assert decision.required_actions == ["reverify_assumption:a1"]


def test_a_removed_dependency_means_replan() -> None:
    out = Outcome(knowledge(started()), {"ds": Observation(present=False)})
    assert out.mode == Mode.REPLAN
    assert out.decision.next_allowed_action == "replan_without:ds"
    # the stale derived state is still listed, after the replan
    assert out.decision.required_actions[1:] == ["recheck_finding:f1", "revisit_decision:d1"]


def test_a_requested_approval_needs_a_person() -> None:
    out = Outcome(started().add(EventType.APPROVAL_REQUESTED, {"approval_id": "ap1"}))
    assert out.mode == Mode.REQUEST_HUMAN
    assert out.decision.next_allowed_action == "await_approval:ap1"


def test_a_denied_approval_no_longer_blocks() -> None:
    out = Outcome(
        started()
        .add(EventType.APPROVAL_REQUESTED, {"approval_id": "ap1"})
        .add(EventType.APPROVAL_DENIED, {"approval_id": "ap1", "reason": "no"}, source=Origin.HUMAN)
    )
    assert out.mode == Mode.RESUME


def test_an_agent_granting_its_own_approval_changes_nothing() -> None:
    out = Outcome(
        started()
        .add(EventType.APPROVAL_REQUESTED, {"approval_id": "ap1"})
        .add(EventType.APPROVAL_GRANTED, {"approval_id": "ap1"}, source=Origin.EXTERNAL_AGENT)
    )
    assert out.mode == Mode.REQUEST_HUMAN
    assert out.state.approvals["ap1"].status == "requested"
    assert out.state.approvals["ap1"].ignored_decisions == 1


def test_a_granted_approval_no_longer_blocks() -> None:
    out = Outcome(
        started()
        .add(EventType.APPROVAL_REQUESTED, {"approval_id": "ap1"})
        .add(EventType.APPROVAL_GRANTED, {"approval_id": "ap1"})
    )
    assert out.mode == Mode.RESUME


def test_an_action_in_flight_in_a_live_process_means_wait() -> None:
    log = started().add(EventType.ACTION_INTERCEPTED, intercepted())
    out = Outcome(log, in_flight={"act_1"})
    assert out.mode == Mode.WAIT
    assert out.decision.next_allowed_action == "wait_for_action:act_1"
    assert out.decision.uncertain_actions == []


@pytest.mark.parametrize(
    "transition",
    [
        None,  # started, owner gone
        (EventType.ACTION_MARKED_UNKNOWN, {"reason": "interrupted"}),
        (EventType.ACTION_RETRIED, {"attempt": 2}),
    ],
)
def test_an_interrupted_action_asks_a_human_to_reconcile_it(
    transition: tuple[EventType, dict[str, Any]] | None,
) -> None:
    log = started().add(EventType.ACTION_INTERCEPTED, intercepted())
    if transition is not None:
        log.add(transition[0], {"action_id": "act_1", **transition[1]})
    out = Outcome(log)
    assert out.mode == Mode.REQUEST_HUMAN
    assert out.decision.next_allowed_action == "reconcile_action:act_1"
    assert [a.action_id for a in out.decision.uncertain_actions] == ["act_1"]


@pytest.mark.parametrize(
    "settle",
    [
        (EventType.ACTION_COMPLETED, {"external_id": "x"}),
        (EventType.ACTION_FAILED, {"error": "no", "certain": True}),
        (EventType.ACTION_RECONCILED, {"occurred": True}),
        (EventType.ACTION_RECONCILED, {"occurred": False}),
    ],
)
def test_a_settled_action_does_not_block_resuming(settle: tuple[EventType, dict[str, Any]]) -> None:
    log = started().add(EventType.ACTION_INTERCEPTED, intercepted())
    log.add(settle[0], {"action_id": "act_1", **settle[1]})
    assert Outcome(log).mode == Mode.RESUME


def test_self_certified_state_without_confirmation_asks_a_human() -> None:
    log = Log().add(EventType.RUN_STARTED, {"goal": "g", "total": 3}, source=Origin.EXTERNAL_AGENT)
    out = Outcome(log)
    assert out.mode == Mode.REQUEST_HUMAN
    assert out.decision.next_allowed_action == f"confirm_run:{RUN}"
    log.add(EventType.REVIEW_CONFIRMED, {"through_sequence": 1}, source=Origin.HUMAN)
    assert Outcome(log).mode == Mode.RESUME


def test_an_agent_cannot_confirm_its_own_state() -> None:
    log = (
        Log()
        .add(EventType.RUN_STARTED, {"goal": "g"}, source=Origin.EXTERNAL_AGENT)
        .add(EventType.REVIEW_CONFIRMED, {"through_sequence": 1}, source=Origin.EXTERNAL_AGENT)
    )
    assert Outcome(log).mode == Mode.REQUEST_HUMAN


def test_an_unchecked_dependency_asks_a_human_for_the_environment() -> None:
    log = started().add(EventType.DEPENDENCY_DECLARED, {"name": "ds", "version": "1"})
    out = Outcome(log, {"ds": None})
    assert out.mode == Mode.REQUEST_HUMAN
    assert out.decision.next_allowed_action == "provide_environment:ds"


def test_tolerate_unknown_lifts_only_the_unknown_dependency() -> None:
    log = started().add(EventType.DEPENDENCY_DECLARED, {"name": "ds", "version": "1"})
    assert Outcome(log, {"ds": None}, tolerate_unknown=True).mode == Mode.RESUME
    log.add(EventType.ACTION_INTERCEPTED, intercepted())
    out = Outcome(log, {"ds": None}, tolerate_unknown=True)
    assert out.mode == Mode.REQUEST_HUMAN
    assert out.decision.required_actions == ["reconcile_action:act_1"]
    reviewed = Log().add(EventType.RUN_STARTED, {"goal": "g"}, source=Origin.LLM)
    reviewed.add(EventType.DEPENDENCY_DECLARED, {"name": "ds", "version": "1"})
    out = Outcome(reviewed, {"ds": None}, tolerate_unknown=True)
    assert out.mode == Mode.REQUEST_HUMAN
    assert out.decision.required_actions == [f"confirm_run:{RUN}"]


def test_tolerate_unknown_does_not_lift_a_removed_dependency() -> None:
    log = started().add(EventType.DEPENDENCY_DECLARED, {"name": "ds", "version": "1"})
    assert Outcome(log, {"ds": Observation(present=False)}, tolerate_unknown=True).mode == (
        Mode.REPLAN
    )


def test_a_completed_action_whose_approval_was_revoked_means_rollback() -> None:
    log = (
        started()
        .add(EventType.APPROVAL_REQUESTED, {"approval_id": "ap1"})
        .add(EventType.APPROVAL_GRANTED, {"approval_id": "ap1"})
        .add(EventType.ACTION_INTERCEPTED, intercepted(approval_id="ap1"))
        .add(EventType.ACTION_COMPLETED, {"action_id": "act_1", "external_id": "x"})
    )
    assert Outcome(log).mode == Mode.RESUME
    log.add(EventType.APPROVAL_REVOKED, {"approval_id": "ap1"})
    out = Outcome(log)
    assert out.mode == Mode.ROLLBACK
    assert out.decision.next_allowed_action == "compensate_action:act_1"
    log.add(EventType.ACTION_COMPENSATED, {"action_id": "act_1"})
    assert Outcome(log).mode == Mode.RESUME


def test_a_damaged_chain_means_abort() -> None:
    log = started().add(EventType.WORK_COMPLETED, {}).add(EventType.WORK_COMPLETED, {})
    log.events[1] = log.events[1].model_copy(update={"payload": {"forged": True}})
    out = Outcome(log)
    assert not out.chain.ok
    assert out.mode == Mode.ABORT
    assert out.decision.next_allowed_action == f"inspect_damage:{RUN}"


@pytest.mark.parametrize("end", [EventType.RUN_COMPLETED, EventType.RUN_ABORTED])
def test_a_finished_run_is_not_resumable(end: EventType) -> None:
    log = started().add(end, {})
    out = Outcome(log)
    assert out.mode == Mode.NOT_RESUMABLE
    assert not out.decision.safe
    assert out.decision.next_allowed_action == "none"


# -- the verdict --------------------------------------------------------------------------------


def test_the_verdict_is_the_most_severe_proposal() -> None:
    log = knowledge(started())
    log.add(EventType.ACTION_INTERCEPTED, intercepted("act_live"))  # in flight: wait
    log.add(EventType.ACTION_INTERCEPTED, intercepted())
    out = Outcome(log, {"ds": Observation(version="2")}, in_flight={"act_live"})
    assert out.proposed() == {Mode.REPAIR_AND_RESUME, Mode.WAIT, Mode.REQUEST_HUMAN}
    assert out.mode == Mode.REQUEST_HUMAN
    severities = [p.mode.severity for p in out.decision.proposals]
    assert severities == sorted(severities, reverse=True)
    assert out.decision.required_actions[0] == "reconcile_action:act_1"
    assert out.decision.required_actions[-4:] == [
        "refresh_dependency:ds",
        "recompute_evidence:e1",
        "recheck_finding:f1",
        "revisit_decision:d1",
    ]


def test_the_reason_names_every_proposal_of_the_winning_mode() -> None:
    log = (
        started()
        .add(EventType.ACTION_INTERCEPTED, intercepted("act_a"))
        .add(EventType.ACTION_INTERCEPTED, intercepted("act_b"))
    )
    out = Outcome(log)
    assert "send:act_a" in out.decision.reason and "send:act_b" in out.decision.reason


def test_the_next_allowed_action_follows_the_log_not_the_checkpoint_key_order() -> None:
    # act_z was intercepted first; a checkpoint stores the state as canonical JSON with
    # sorted keys, which puts act_a first. The verdict must not depend on that.
    log = (
        started()
        .add(EventType.ACTION_INTERCEPTED, intercepted("act_z"))
        .add(EventType.ACTION_INTERCEPTED, intercepted("act_a"))
    )
    full = project(RUN, log.events)
    restored = State.model_validate(parse_json(canonical_json(full.model_dump(mode="json"))))
    assert restored == full
    from_log, from_checkpoint = Outcome(log, state=full), Outcome(log, state=restored)
    assert from_log.decision.next_allowed_action == "reconcile_action:act_z"
    assert from_checkpoint.decision == from_log.decision


def test_damage_to_a_finished_run_is_reported_as_abort_not_hidden_behind_not_resumable() -> None:
    log = started().add(EventType.RUN_COMPLETED, {})
    log.events[0] = log.events[0].model_copy(update={"payload": {}})
    out = Outcome(log)
    assert not out.chain.ok
    assert out.mode == Mode.ABORT
    assert "damaged" in out.decision.reason


# -- the contract --------------------------------------------------------------------------------


def contract_for(
    out: Outcome,
    *,
    checkpoint_version: int | None = None,
    observed_env: dict[str, str | None] | None = None,
) -> Any:
    return build_contract(
        out.state,
        out.validation,
        out.decision,
        out.chain,
        checkpoint_version=checkpoint_version,
        observed_env=observed_env or {},
    )


def test_build_contract_is_sealed_and_intact_and_carries_the_verdict() -> None:
    log = knowledge(started())
    out = Outcome(log, {"ds": Observation(version="2")})
    contract = contract_for(out, checkpoint_version=3, observed_env={"ds": "2"})
    assert contract.is_intact()
    assert contract.integrity_hash == contract.compute_hash()
    assert contract.run_id == RUN
    assert contract.verdict == "repair_and_resume"
    assert contract.safe is False
    assert contract.safety_status == SAFETY_STATUS[Mode.REPAIR_AND_RESUME]
    assert contract.checkpoint_version == 3
    assert (contract.head_sequence, contract.head_hash) == (len(log.events), log.events[-1].hash)
    assert contract.next_allowed_action == "refresh_dependency:ds"
    assert contract.required_actions == out.decision.required_actions
    assert [c.component for c in contract.invalidated_components] == [
        "dependency:ds",
        "evidence:e1",
        "finding:f1",
        "decision:d1",
    ]
    assert contract.invalidated_components[0].status == "conflicted"
    assert contract.verified_components == out.validation.verified
    assert contract.evidence["environment"] == {"ds": "2"}
    assert contract.evidence["dependencies"] == {"ds": "changed"}
    assert contract.evidence["chain_ok"] is True
    assert contract.created_at is None


def test_a_resumable_contract_is_safe() -> None:
    contract = contract_for(Outcome(started()))
    assert (contract.verdict, contract.safe, contract.safety_status) == ("resume", True, "safe")


def test_the_contract_lists_unresolved_actions_as_evidence() -> None:
    log = (
        started()
        .add(EventType.ACTION_INTERCEPTED, intercepted("act_b"))
        .add(EventType.ACTION_INTERCEPTED, intercepted("act_a"))
    )
    contract = contract_for(Outcome(log))
    assert contract.evidence["unresolved_actions"] == ["act_a", "act_b"]


@pytest.mark.parametrize(
    "field,value",
    [
        ("verdict", "resume"),
        ("safe", True),
        ("next_allowed_action", "continue"),
        ("head_sequence", 1),
        ("required_actions", []),
        ("reason", "all good"),
        ("evidence", {}),
        ("checkpoint_version", 99),
    ],
)
def test_tampering_any_sealed_field_breaks_the_seal(field: str, value: Any) -> None:
    contract = contract_for(Outcome(knowledge(started()), {"ds": Observation(version="2")}))
    assert not contract.model_copy(update={field: value}).is_intact()


def test_the_same_inputs_give_a_byte_identical_contract() -> None:
    def once() -> str:
        log = knowledge(started()).add(EventType.ACTION_INTERCEPTED, intercepted())
        return str(
            contract_for(
                Outcome(log, {"ds": Observation(version="2")}), observed_env={"ds": "2"}
            ).to_json()
        )

    assert once() == once()

"""The fold (contract §7): state is a pure function of the events, with provenance on every
component, self-certified state tracked until a human confirms it (contract §5)."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from continuum.eventlog.canonical import canonical_json
from continuum.eventlog.event_model import Event, seal
from continuum.eventlog.events import EventType
from continuum.state.projection import apply_action_event, empty_state, fold, project
from continuum.state.records import ActionRecord, State
from continuum.types import ActionStatus, Origin, RunStatus

RUN = "run_fold"
TS = "2025-01-01T00:00:00.000000Z"


class Log:
    """A run's sealed events, built in memory."""

    def __init__(self, run_id: str = RUN) -> None:
        self.run_id = run_id
        self.events: list[Event] = []

    def add(
        self,
        type_: EventType | str,
        payload: dict[str, Any] | None = None,
        *,
        source: Origin = Origin.DETERMINISTIC,
    ) -> Event:
        seq = len(self.events) + 1
        event = seal(
            event_id=f"evt_{seq}",
            run_id=self.run_id,
            sequence=seq,
            type=str(type_),
            timestamp=TS,
            payload=payload or {},
            causer_event_id=None,
            source=source,
            prev_hash=self.events[-1].hash if self.events else None,
        )
        self.events.append(event)
        return event

    def state(self) -> State:
        return project(self.run_id, self.events)


def intercepted(action_id: str = "act_1", **extra: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "action_id": action_id,
        "action_key": f"send_invoice:{action_id}",
        "action_type": "send_invoice",
        "key": action_id,
        "dedup_key": f"dedup_{action_id}",
        "fallback_key": None,
        "arguments": {"to": "a@example.com"},
        "replay": "never",
        "operation_key": f"op_{action_id}",
        "owner": {"host": "h", "pid": 1},
        "approval_id": None,
    }
    payload.update(extra)
    return payload


# -- run lifecycle ----------------------------------------------------------------------


def test_run_started_sets_goal_total_and_model_and_the_run_is_active() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "Analyze docs", "total": 10, "model": "m-1"})
    state = log.state()
    assert state.status == RunStatus.ACTIVE
    assert state.goal is not None and state.goal.value == "Analyze docs"
    assert state.progress.total == 10
    assert state.progress.pending == 10
    assert state.model == "m-1"
    assert state.sequence == 1
    assert state.head_hash == log.events[-1].hash


def test_run_completed_marks_the_run_completed() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g"})
    log.add(EventType.RUN_COMPLETED)
    assert log.state().status == RunStatus.COMPLETED


def test_run_aborted_marks_the_run_aborted() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g"})
    log.add(EventType.RUN_ABORTED, {"reason": "operator"})
    assert log.state().status == RunStatus.ABORTED


def test_goal_set_replaces_the_goal_with_new_provenance() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "first"})
    log.add(EventType.GOAL_SET, {"goal": "second"}, source=Origin.HUMAN)
    goal = log.state().goal
    assert goal is not None
    assert goal.value == "second"
    assert (goal.provenance.origin, goal.provenance.sequence) == (Origin.HUMAN, 2)


def test_an_empty_log_projects_the_empty_state() -> None:
    assert project(RUN, []) == empty_state(RUN)


# -- progress -----------------------------------------------------------------------------


def test_progress_recorded_is_absolute_and_pending_is_computed() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g", "total": 10})
    log.add(EventType.PROGRESS_RECORDED, {"completed": 3, "failed": 1})
    log.add(EventType.PROGRESS_RECORDED, {"completed": 6})
    progress = log.state().progress
    assert (progress.total, progress.completed, progress.failed, progress.pending) == (10, 6, 1, 3)


def test_pending_never_goes_below_zero() -> None:
    log = Log()
    log.add(EventType.PROGRESS_RECORDED, {"total": 2, "completed": 5})
    assert log.state().progress.pending == 0


def test_progress_values_that_are_not_whole_non_negative_numbers_are_ignored() -> None:
    log = Log()
    log.add(EventType.PROGRESS_RECORDED, {"completed": 4, "total": 9})
    log.add(EventType.PROGRESS_RECORDED, {"completed": -1, "total": True, "failed": "2"})
    progress = log.state().progress
    assert (progress.completed, progress.total, progress.failed) == (4, 9, 0)
    assert progress.provenance is not None and progress.provenance.sequence == 1


def test_progress_recorded_can_carry_the_goal() -> None:
    log = Log()
    log.add(EventType.PROGRESS_RECORDED, {"goal": "g2", "completed": 1})
    state = log.state()
    assert state.goal is not None and state.goal.value == "g2"


def test_progress_provenance_names_the_last_event_that_moved_it() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g", "total": 5})
    last = log.add(EventType.PROGRESS_RECORDED, {"completed": 2}, source=Origin.EXTERNAL_AGENT)
    prov = log.state().progress.provenance
    assert prov is not None
    assert (prov.origin, prov.sequence, prov.event_id) == (Origin.EXTERNAL_AGENT, 2, last.event_id)


# -- work items --------------------------------------------------------------------------


def test_work_completed_without_an_item_id_counts_every_event() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g", "total": 4})
    for i in range(3):
        log.add(EventType.WORK_COMPLETED, {"doc": i})
    log.add(EventType.WORK_FAILED, {"doc": 3})
    progress = log.state().progress
    assert (progress.completed, progress.failed, progress.pending) == (3, 1, 0)


def test_work_added_is_pending_and_counted_once_even_if_added_twice() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g", "total": 0})
    log.add(EventType.WORK_ADDED, {"item_id": "w1", "text": "first"})
    log.add(EventType.WORK_ADDED, {"item_id": "w1", "text": "again"})
    log.add(EventType.WORK_ADDED, {"item_id": "w2"})
    state = log.state()
    assert state.progress.total == 2
    assert state.progress.pending == 2
    assert [w.id for w in state.pending_work] == ["w1", "w2"]
    assert state.work["w1"].text == "first"


def test_a_work_item_completed_twice_is_counted_once() -> None:
    log = Log()
    log.add(EventType.WORK_ADDED, {"item_id": "w1"})
    log.add(EventType.WORK_ADDED, {"item_id": "w2"})
    log.add(EventType.WORK_COMPLETED, {"item_id": "w1"})
    log.add(EventType.WORK_COMPLETED, {"item_id": "w1"})
    state = log.state()
    assert state.progress.completed == 1
    assert state.work["w1"].status == "completed"
    assert state.progress.total is None
    assert state.progress.pending == 1  # without a total, pending counts pending items
    assert [w.id for w in state.pending_work] == ["w2"]


def test_a_failed_work_item_is_counted_once_and_is_no_longer_pending() -> None:
    log = Log()
    log.add(EventType.WORK_ADDED, {"item_id": "w1"})
    log.add(EventType.WORK_FAILED, {"item_id": "w1"})
    log.add(EventType.WORK_FAILED, {"item_id": "w1"})
    state = log.state()
    assert state.progress.failed == 1
    assert state.work["w1"].status == "failed"
    assert state.pending_work == []


def test_plan_set_records_the_steps_with_provenance() -> None:
    log = Log()
    log.add(EventType.PLAN_SET, {"steps": ["fetch", "parse"]}, source=Origin.LLM)
    state = log.state()
    assert state.plan == ["fetch", "parse"]
    assert state.plan_provenance is not None and state.plan_provenance.origin == Origin.LLM
    assert state.self_certified == {"plan": 1}


def test_a_plan_with_a_step_that_is_not_text_is_malformed_not_half_applied() -> None:
    log = Log()
    log.add(EventType.PLAN_SET, {"steps": ["fetch", 3, "parse", None]}, source=Origin.LLM)
    state = log.state()
    assert state.plan == [] and state.malformed_events == 1 and state.first_malformed == 1


# -- decisions, findings, evidence -------------------------------------------------------


def _knowledge(log: Log) -> None:
    log.add(EventType.EVIDENCE_ADDED, {"evidence_id": "e1", "text": "rows", "dependencies": ["ds"]})
    log.add(EventType.FINDING_ADDED, {"finding_id": "f1", "text": "trend", "evidence": ["e1"]})
    log.add(
        EventType.DECISION_CREATED,
        {"decision_id": "d1", "text": "ship", "findings": ["f1"], "evidence": ["e1"]},
    )


def test_evidence_findings_and_decisions_record_what_they_cite() -> None:
    log = Log()
    _knowledge(log)
    state = log.state()
    assert state.evidence["e1"].cites == ["ds"]
    assert state.findings["f1"].cites == ["e1"]
    assert state.decisions["d1"].cites == ["f1", "evidence:e1"]
    assert {
        state.evidence["e1"].status,
        state.findings["f1"].status,
        state.decisions["d1"].status,
    } == {"active"}
    assert state.decisions["d1"].text == "ship"


def test_components_carry_provenance_of_the_event_that_recorded_them() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g"}, source=Origin.HUMAN)
    _knowledge(log)
    log.add(EventType.DEPENDENCY_DECLARED, {"name": "ds", "version": "1"})
    log.add(EventType.MODEL_CHANGED, {"model": "m-2"}, source=Origin.LLM)
    state = log.state()
    assert state.goal is not None
    assert state.goal.provenance.model_dump() == {
        "origin": Origin.HUMAN,
        "sequence": 1,
        "event_id": "evt_1",
    }
    assert state.evidence["e1"].provenance.sequence == 2
    assert state.findings["f1"].provenance.sequence == 3
    assert state.decisions["d1"].provenance.event_id == "evt_4"
    assert state.dependencies["ds"].provenance.sequence == 5
    assert state.model_provenance is not None
    assert (state.model_provenance.origin, state.model_provenance.sequence) == (Origin.LLM, 6)


def test_an_item_without_an_id_is_keyed_by_its_event_id() -> None:
    log = Log()
    event = log.add(EventType.FINDING_ADDED, {"text": "anonymous"})
    assert list(log.state().findings) == [event.event_id]


def test_invalidating_a_finding_or_decision_changes_only_its_status() -> None:
    log = Log()
    _knowledge(log)
    log.add(EventType.FINDING_INVALIDATED, {"finding_id": "f1"})
    log.add(EventType.DECISION_INVALIDATED, {"decision_id": "d1"})
    state = log.state()
    assert state.findings["f1"].status == "invalidated"
    assert state.decisions["d1"].status == "invalidated"
    assert state.findings["f1"].text == "trend"
    assert state.evidence["e1"].status == "active"


def test_invalidating_an_unknown_item_changes_nothing() -> None:
    log = Log()
    _knowledge(log)
    before = log.state()
    log.add(EventType.FINDING_INVALIDATED, {"finding_id": "nope"})
    log.add(EventType.DECISION_INVALIDATED, {})
    after = log.state()
    assert after.findings == before.findings
    assert after.decisions == before.decisions


# -- dependencies -------------------------------------------------------------------------


def test_a_single_dependency_declaration_defaults_to_the_static_provider() -> None:
    log = Log()
    log.add(EventType.DEPENDENCY_DECLARED, {"name": "dataset", "version": "v1"})
    dep = log.state().dependencies["dataset"]
    assert (dep.provider, dep.version, dep.checksum, dep.recorded_change) == (
        "static",
        "v1",
        None,
        None,
    )


def test_a_batch_declaration_with_a_bad_entry_is_malformed_as_a_whole() -> None:
    log = Log()
    log.add(
        EventType.DEPENDENCY_DECLARED,
        {"dependencies": [{"name": "a", "version": "1"}, {"version": "no-name"}]},
    )
    log.add(EventType.DEPENDENCY_DECLARED, {"resource": "dataset", "version": "v3"})
    state = log.state()
    assert state.dependencies == {}
    assert (state.malformed_events, state.first_malformed) == (2, 1)


def test_a_batch_declaration_records_every_entry() -> None:
    log = Log()
    log.add(
        EventType.DEPENDENCY_DECLARED,
        {
            "dependencies": [
                {"name": "a", "version": "1"},
                {"name": "file:/x", "provider": "file", "checksum": "sha256:ab", "locator": "/x"},
            ]
        },
    )
    deps = log.state().dependencies
    assert sorted(deps) == ["a", "file:/x"]
    assert (deps["file:/x"].provider, deps["file:/x"].checksum, deps["file:/x"].locator) == (
        "file",
        "sha256:ab",
        "/x",
    )


def test_environment_changed_is_recorded_on_the_dependency_and_a_redeclaration_clears_it() -> None:
    log = Log()
    log.add(EventType.DEPENDENCY_DECLARED, {"name": "a", "version": "1"})
    log.add(EventType.ENVIRONMENT_CHANGED, {"name": "a", "status": "removed"})
    log.add(EventType.ENVIRONMENT_CHANGED, {"name": "undeclared"})
    assert log.state().dependencies["a"].recorded_change == "removed"
    assert "undeclared" not in log.state().dependencies
    log.add(EventType.DEPENDENCY_DECLARED, {"name": "a", "version": "2"})
    dep = log.state().dependencies["a"]
    assert (dep.version, dep.recorded_change) == ("2", None)


def test_environment_changed_without_a_status_means_changed() -> None:
    log = Log()
    log.add(EventType.DEPENDENCY_DECLARED, {"name": "a", "version": "1"})
    log.add(EventType.ENVIRONMENT_CHANGED, {"name": "a"})
    assert log.state().dependencies["a"].recorded_change == "changed"


# -- approvals, model, checkpoints ----------------------------------------------------------


@pytest.mark.parametrize(
    "types,status",
    [
        ([EventType.APPROVAL_REQUESTED], "requested"),
        ([EventType.APPROVAL_REQUESTED, EventType.APPROVAL_GRANTED], "granted"),
        (
            [EventType.APPROVAL_REQUESTED, EventType.APPROVAL_GRANTED, EventType.APPROVAL_REVOKED],
            "revoked",
        ),
    ],
)
def test_an_approval_moves_through_requested_granted_revoked(
    types: list[EventType], status: str
) -> None:
    log = Log()
    for t in types:
        log.add(t, {"approval_id": "ap1", "text": "pay invoices"})
    state = log.state()
    assert state.approvals["ap1"].status == status
    assert state.approvals["ap1"].provenance.sequence == len(types)


def test_model_change_and_assumptions_record_the_model_they_were_made_under() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g", "model": "m-1"})
    log.add(EventType.MODEL_ASSUMPTION_RECORDED, {"assumption_id": "a1", "text": "ctx 200k"})
    log.add(EventType.MODEL_CHANGED, {"model": "m-2"}, source=Origin.LLM)
    log.add(EventType.MODEL_ASSUMPTION_RECORDED, {"assumption_id": "a2", "text": "tools"})
    log.add(
        EventType.MODEL_ASSUMPTION_RECORDED,
        {"assumption_id": "a3", "text": "explicit", "model": "m-0"},
    )
    state = log.state()
    assert state.model == "m-2"
    assert [(a.id, a.model) for a in state.model_assumptions] == [
        ("a1", "m-1"),
        ("a2", "m-2"),
        ("a3", "m-0"),
    ]
    assert state.self_certified == {"model": 3}


def test_recording_an_assumption_again_supersedes_it_so_a_model_switch_can_be_repaired() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g", "model": "m-1"})
    log.add(EventType.MODEL_ASSUMPTION_RECORDED, {"assumption_id": "a1", "text": "ctx 200k"})
    log.add(EventType.MODEL_ASSUMPTION_RECORDED, {"assumption_id": "a2", "text": "json"})
    log.add(EventType.MODEL_CHANGED, {"model": "m-2"})
    log.add(
        EventType.MODEL_ASSUMPTION_RECORDED,
        {"assumption_id": "a1", "text": "no", "status": "retracted"},
    )
    log.add(EventType.MODEL_ASSUMPTION_RECORDED, {"assumption_id": "a2", "text": "json"})
    state = log.state()
    assert [(a.id, a.model, a.status) for a in state.model_assumptions] == [
        ("a1", "m-2", "retracted"),
        ("a2", "m-2", "active"),
    ]


def test_checkpointed_records_the_sequence_of_the_last_checkpoint() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g"})
    log.add(EventType.CHECKPOINTED, {"through_sequence": 1, "state_hash": "x"})
    log.add(EventType.WORK_COMPLETED, {})
    log.add(EventType.CHECKPOINTED, {"through_sequence": 3, "state_hash": "y"})
    assert log.state().last_checkpoint == 4


# -- self-certified state and human review ---------------------------------------------------


@pytest.mark.parametrize("origin", [Origin.LLM, Origin.EXTERNAL_AGENT, Origin.IMPORTED])
def test_state_reported_by_a_self_certified_origin_is_tracked(origin: Origin) -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g", "total": 3}, source=origin)
    log.add(EventType.FINDING_ADDED, {"finding_id": "f"}, source=origin)
    state = log.state()
    assert state.self_certified == {"goal": 1, "progress": 1, "findings": 2}
    assert state.unreviewed() == {"findings": 2, "goal": 1, "progress": 1}


@pytest.mark.parametrize("origin", [Origin.DETERMINISTIC, Origin.HUMAN])
def test_state_from_trusted_origins_needs_no_review(origin: Origin) -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g", "total": 3}, source=origin)
    log.add(EventType.PROGRESS_RECORDED, {"completed": 1}, source=origin)
    state = log.state()
    assert state.self_certified == {}
    assert state.unreviewed() == {}


def test_a_human_confirmation_covers_state_up_to_its_through_sequence() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g", "total": 3}, source=Origin.EXTERNAL_AGENT)
    log.add(EventType.PROGRESS_RECORDED, {"completed": 1}, source=Origin.EXTERNAL_AGENT)
    log.add(EventType.REVIEW_CONFIRMED, {"through_sequence": 2}, source=Origin.HUMAN)
    state = log.state()
    assert state.unreviewed() == {}
    assert state.confirmed_through("goal") == 2
    assert state.confirmations[0].counted
    assert state.confirmations[0].scope == ["goal", "progress"]


def test_self_reported_state_after_a_confirmation_needs_a_new_one() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g", "total": 3}, source=Origin.EXTERNAL_AGENT)
    log.add(EventType.REVIEW_CONFIRMED, {"through_sequence": 1}, source=Origin.HUMAN)
    log.add(EventType.PROGRESS_RECORDED, {"completed": 2}, source=Origin.EXTERNAL_AGENT)
    assert log.state().unreviewed() == {"progress": 3}
    log.add(EventType.REVIEW_CONFIRMED, {"through_sequence": 3}, source=Origin.HUMAN)
    assert log.state().unreviewed() == {}


def test_a_confirmation_through_an_earlier_sequence_does_not_cover_later_state() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g"}, source=Origin.EXTERNAL_AGENT)
    log.add(EventType.GOAL_SET, {"goal": "g2"}, source=Origin.EXTERNAL_AGENT)
    log.add(EventType.REVIEW_CONFIRMED, {"through_sequence": 1}, source=Origin.HUMAN)
    assert log.state().unreviewed() == {"goal": 2}


@pytest.mark.parametrize(
    "origin", [Origin.LLM, Origin.EXTERNAL_AGENT, Origin.IMPORTED, Origin.DETERMINISTIC]
)
def test_a_confirmation_counts_only_when_its_origin_is_human(origin: Origin) -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g"}, source=Origin.EXTERNAL_AGENT)
    log.add(EventType.REVIEW_CONFIRMED, {"through_sequence": 1}, source=origin)
    state = log.state()
    assert not state.confirmations[0].counted
    assert state.unreviewed() == {"goal": 1}


def test_a_confirmation_is_capped_at_its_own_sequence() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g"}, source=Origin.EXTERNAL_AGENT)
    log.add(EventType.REVIEW_CONFIRMED, {"through_sequence": 1000}, source=Origin.HUMAN)
    log.add(EventType.GOAL_SET, {"goal": "later"}, source=Origin.EXTERNAL_AGENT)
    state = log.state()
    assert state.confirmations[0].through_sequence == 2
    assert state.unreviewed() == {"goal": 3}


def test_a_confirmation_without_through_sequence_is_malformed_and_does_not_count() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g"}, source=Origin.EXTERNAL_AGENT)
    log.add(EventType.REVIEW_CONFIRMED, {}, source=Origin.HUMAN)
    state = log.state()
    assert state.confirmations == [] and state.malformed_events == 1
    assert state.unreviewed() == {"goal": 1}


def test_a_confirmation_covers_only_its_scope_unless_it_is_all() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g", "total": 2}, source=Origin.LLM)
    log.add(EventType.FINDING_ADDED, {"finding_id": "f"}, source=Origin.LLM)
    log.add(
        EventType.REVIEW_CONFIRMED, {"through_sequence": 2, "scope": ["goal"]}, source=Origin.HUMAN
    )
    assert log.state().unreviewed() == {"findings": 2, "progress": 1}
    log.add(
        EventType.REVIEW_CONFIRMED, {"through_sequence": 3, "scope": ["all"]}, source=Origin.HUMAN
    )
    assert log.state().unreviewed() == {}


# -- the action ledger transitions ------------------------------------------------------------


def test_action_intercepted_creates_a_started_record() -> None:
    log = Log()
    log.add(
        EventType.ACTION_INTERCEPTED, intercepted(approval_id="ap1"), source=Origin.EXTERNAL_AGENT
    )
    rec = log.state().actions["act_1"]
    assert rec.status == ActionStatus.STARTED
    assert (rec.attempt, rec.intercepted_sequence, rec.last_sequence) == (1, 1, 1)
    assert rec.action_key == "send_invoice:act_1"
    assert rec.approval_id == "ap1"
    assert rec.origin == Origin.EXTERNAL_AGENT
    assert rec.arguments == {"to": "a@example.com"}


def test_action_events_do_not_mark_state_as_self_certified() -> None:
    log = Log()
    log.add(EventType.ACTION_INTERCEPTED, intercepted(), source=Origin.EXTERNAL_AGENT)
    log.add(EventType.ACTION_COMPLETED, {"action_id": "act_1"}, source=Origin.EXTERNAL_AGENT)
    assert log.state().self_certified == {}


@pytest.mark.parametrize(
    "steps,expected",
    [
        (
            [(EventType.ACTION_COMPLETED, {"external_id": "ext-1", "result": {"ok": True}})],
            {"status": ActionStatus.COMPLETED, "external_id": "ext-1", "result": {"ok": True}},
        ),
        (
            [(EventType.ACTION_FAILED, {"error": "boom", "certain": True})],
            {"status": ActionStatus.FAILED, "error": "boom"},
        ),
        (
            [(EventType.ACTION_MARKED_UNKNOWN, {"reason": "interrupted"})],
            {"status": ActionStatus.UNKNOWN, "error": "interrupted"},
        ),
        (
            [
                (EventType.ACTION_MARKED_UNKNOWN, {"reason": "x"}),
                (
                    EventType.ACTION_RECONCILED,
                    {"occurred": True, "external_id": "ext-9", "note": "seen"},
                ),
            ],
            {"status": ActionStatus.COMPLETED, "external_id": "ext-9", "note": "seen"},
        ),
        (
            [
                (EventType.ACTION_MARKED_UNKNOWN, {"reason": "x"}),
                (
                    EventType.ACTION_RECONCILED,
                    {"occurred": False, "external_id": "ignored", "note": "no"},
                ),
            ],
            {"status": ActionStatus.FAILED, "external_id": None, "note": "no"},
        ),
        (
            [
                (EventType.ACTION_FAILED, {"error": "e"}),
                (EventType.ACTION_RETRIED, {"attempt": 2, "owner": {"pid": 2}}),
            ],
            {"status": ActionStatus.STARTED, "attempt": 2, "owner": {"pid": 2}},
        ),
        (
            [(EventType.ACTION_MARKED_UNKNOWN, {}), (EventType.ACTION_RETRIED, {})],
            {"status": ActionStatus.STARTED, "attempt": 2, "owner": {}},
        ),
        (
            [
                (EventType.ACTION_COMPLETED, {"external_id": "e"}),
                (EventType.ACTION_COMPENSATED, {"note": "refunded"}),
            ],
            {"status": ActionStatus.COMPENSATED, "note": "refunded", "external_id": "e"},
        ),
    ],
)
def test_every_action_transition_is_folded(
    steps: list[tuple[EventType, dict[str, Any]]], expected: dict[str, Any]
) -> None:
    log = Log()
    log.add(EventType.ACTION_INTERCEPTED, intercepted())
    for type_, payload in steps:
        log.add(type_, {"action_id": "act_1", **payload})
    rec = log.state().actions["act_1"]
    for field, value in expected.items():
        assert getattr(rec, field) == value, field
    assert rec.last_sequence == len(log.events)
    assert rec.intercepted_sequence == 1


def test_a_transition_for_an_unknown_action_changes_nothing() -> None:
    log = Log()
    log.add(EventType.ACTION_INTERCEPTED, intercepted())
    log.add(EventType.ACTION_COMPLETED, {"action_id": "act_other", "external_id": "x"})
    state = log.state()
    assert list(state.actions) == ["act_1"]
    assert state.actions["act_1"].status == ActionStatus.STARTED


def test_an_action_is_found_by_its_id_or_its_action_key() -> None:
    log = Log()
    log.add(EventType.ACTION_INTERCEPTED, intercepted())
    state = log.state()
    by_id = state.action_by_ref("act_1")
    assert by_id is not None and by_id.action_id == "act_1"
    assert state.action_by_ref("send_invoice:act_1") == by_id
    assert state.action_by_ref("missing") is None


def test_apply_action_event_gives_the_same_record_as_the_fold() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g"})
    log.add(EventType.ACTION_INTERCEPTED, intercepted("act_a", replay="safe"))
    log.add(EventType.ACTION_INTERCEPTED, intercepted("act_b"))
    log.add(EventType.ACTION_MARKED_UNKNOWN, {"action_id": "act_a", "reason": "gone"})
    log.add(EventType.ACTION_RETRIED, {"action_id": "act_a", "attempt": 2, "owner": {"pid": 9}})
    log.add(EventType.ACTION_COMPLETED, {"action_id": "act_b", "external_id": "x", "result": [1]})
    log.add(EventType.ACTION_COMPLETED, {"action_id": "act_a", "external_id": "y"})
    log.add(EventType.ACTION_COMPENSATED, {"action_id": "act_b", "note": "undo"})
    records: dict[str, dict[str, Any] | None] = {}
    for event in log.events:
        action_id = event.payload.get("action_id")
        if isinstance(action_id, str):
            records[action_id] = apply_action_event(records.get(action_id), event)
    state = log.state()
    assert set(records) == set(state.actions)
    for action_id, record in records.items():
        assert record is not None
        assert ActionRecord.model_validate(record) == state.actions[action_id]
        assert record == state.actions[action_id].model_dump(mode="json")


def test_apply_action_event_does_not_mutate_the_record_it_is_given() -> None:
    log = Log()
    first = apply_action_event(None, log.add(EventType.ACTION_INTERCEPTED, intercepted()))
    assert first is not None
    snapshot = canonical_json(first)
    apply_action_event(first, log.add(EventType.ACTION_COMPLETED, {"action_id": "act_1"}))
    assert canonical_json(first) == snapshot


def test_apply_action_event_passes_unknown_types_through() -> None:
    log = Log()
    record = apply_action_event(None, log.add(EventType.ACTION_INTERCEPTED, intercepted()))
    assert apply_action_event(record, log.add("mystery_event", {"action_id": "act_1"})) == record


# -- robustness and purity ------------------------------------------------------------------


def test_unknown_event_types_never_break_the_fold() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g", "total": 2})
    log.add("something_from_the_future", {"weird": [1, {"x": None}]})
    log.add("", {})
    log.add(EventType.WORK_COMPLETED, {})
    state = log.state()
    assert state.unknown_event_types == 2
    assert state.progress.completed == 1
    assert state.sequence == 4
    assert state.head_hash == log.events[-1].hash


def test_payload_fields_of_the_wrong_type_are_counted_as_malformed_not_fatal() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": 42, "total": "ten", "model": ["m"]})
    log.add(EventType.EVIDENCE_ADDED, {"evidence_id": 5, "text": None, "dependencies": "ds"})
    log.add(EventType.PLAN_SET, {"steps": "not a list"})
    log.add(
        EventType.REVIEW_CONFIRMED, {"through_sequence": "3", "scope": "all"}, source=Origin.HUMAN
    )
    state = log.state()
    assert state.goal is None and state.progress.total is None and state.model is None
    assert state.evidence == {} and state.plan == [] and state.confirmations == []
    assert (state.malformed_events, state.first_malformed) == (4, 1)


def test_the_fold_is_deterministic() -> None:
    def build() -> Log:
        log = Log()
        log.add(
            EventType.RUN_STARTED,
            {"goal": "g", "total": 5, "model": "m"},
            source=Origin.EXTERNAL_AGENT,
        )
        _knowledge(log)
        log.add(EventType.DEPENDENCY_DECLARED, {"dependencies": [{"name": "ds", "version": "1"}]})
        log.add(EventType.ACTION_INTERCEPTED, intercepted())
        log.add(EventType.WORK_COMPLETED, {"item_id": "x"})
        log.add("unknown_type", {})
        return log

    a, b = build(), build()
    first = project(RUN, a.events)
    assert project(RUN, a.events) == first
    assert project(RUN, b.events) == first
    assert canonical_json(project(RUN, b.events).model_dump(mode="json")) == canonical_json(
        first.model_dump(mode="json")
    )


def test_folding_from_a_state_continues_it_and_leaves_the_start_state_untouched() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g", "total": 3})
    log.add(EventType.WORK_ADDED, {"item_id": "w"})
    middle = log.state()
    snapshot = canonical_json(middle.model_dump(mode="json"))
    log.add(EventType.WORK_COMPLETED, {"item_id": "w"})
    log.add(EventType.WORK_COMPLETED, {})
    resumed = project(RUN, log.events[2:], start=middle)
    assert resumed == log.state()
    assert canonical_json(middle.model_dump(mode="json")) == snapshot


def test_events_already_covered_by_the_start_state_are_skipped() -> None:
    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g", "total": 3})
    log.add(EventType.WORK_COMPLETED, {})
    start = log.state()
    log.add(EventType.WORK_COMPLETED, {})
    assert fold(start, log.events) == log.state()
    assert fold(start, log.events).progress.completed == 2


# -- robustness to events written around the ledger (regressions) ---------------------------


def _ev(seq: int, type_: str, payload: dict[str, object], prev: str | None) -> Event:
    return seal(
        event_id=f"e{seq}",
        run_id="r",
        sequence=seq,
        type=type_,
        timestamp="t",
        payload=payload,
        causer_event_id=None,
        source=Origin.DETERMINISTIC,
        prev_hash=prev,
    )


def test_malformed_action_events_are_counted_not_fatal() -> None:
    a = _ev(1, "action_intercepted", {"action_key": "k"}, None)  # no action_id
    b = _ev(2, "action_completed", {"action_id": 5, "external_id": 7}, a.hash)
    state = project("r", [a, b])
    assert state.actions == {}
    assert state.malformed_events == 2


def test_apply_action_event_ignores_non_action_events() -> None:
    e = _ev(1, "progress_recorded", {"completed": 1}, None)
    assert apply_action_event(None, e) is None


def test_finishing_an_item_twice_without_adding_it_counts_once() -> None:
    a = _ev(1, "work_completed", {"item_id": "x"}, None)
    b = _ev(2, "work_completed", {"item_id": "x"}, a.hash)
    assert project("r", [a, b]).progress.completed == 1


def test_a_failed_item_that_later_completes_moves_the_counters() -> None:
    a = _ev(1, "work_failed", {"item_id": "x"}, None)
    b = _ev(2, "work_completed", {"item_id": "x"}, a.hash)
    p = project("r", [a, b]).progress
    assert (p.completed, p.failed) == (1, 0)


def test_the_fold_pauses_the_collector_while_it_runs_and_leaves_it_as_it_was() -> None:
    from continuum.state.projection import empty_plain, fold_plain

    log = Log()
    log.add(EventType.RUN_STARTED, {"goal": "g"})
    seen: list[bool] = []

    def watched() -> Any:
        for e in log.events:
            seen.append(gc.isenabled())
            yield e

    was_on = gc.isenabled()
    try:
        for start_on in (True, False):
            (gc.enable if start_on else gc.disable)()
            fold_plain(empty_plain(RUN), watched())
            assert gc.isenabled() is start_on
        gc.enable()

        def failing() -> Any:
            yield from watched()
            raise RuntimeError("the store failed mid-read")

        with pytest.raises(RuntimeError):
            fold_plain(empty_plain(RUN), failing())
        assert gc.isenabled()  # back on after an error too
    finally:
        (gc.enable if was_on else gc.disable)()
    assert seen == [False, False, False]

"""Environment diff and staleness propagation (contract §7), model and review checks."""

from __future__ import annotations

from typing import Any

import pytest

from continuum.eventlog.event_model import Event, seal
from continuum.eventlog.events import EventType
from continuum.state.projection import project
from continuum.state.records import Dependency, Provenance, State
from continuum.state.validation import (
    ComponentCheck,
    Observation,
    diff_dependency,
    diff_environment,
    model_checks,
    propagate,
    review_checks,
    validate_state,
)
from continuum.types import ComponentStatus, DependencyStatus, Origin

RUN = "run_val"
TS = "2025-01-01T00:00:00.000000Z"
PROV = Provenance(origin=Origin.DETERMINISTIC, sequence=1, event_id="evt_1")


def state_of(
    *specs: tuple[EventType | str, dict[str, Any]] | tuple[EventType | str, dict[str, Any], Origin],
) -> State:
    events: list[Event] = []
    for i, spec in enumerate(specs, 1):
        source = spec[2] if len(spec) == 3 else Origin.DETERMINISTIC
        events.append(
            seal(
                event_id=f"evt_{i}",
                run_id=RUN,
                sequence=i,
                type=str(spec[0]),
                timestamp=TS,
                payload=spec[1],
                causer_event_id=None,
                source=source,
                prev_hash=events[-1].hash if events else None,
            )
        )
    return project(RUN, events)


def dep(**fields: Any) -> Dependency:
    return Dependency(name=fields.pop("name", "ds"), provenance=PROV, **fields)


def statuses(checks: list[ComponentCheck]) -> list[tuple[str, ComponentStatus]]:
    return [(c.component, c.status) for c in checks]


# -- one dependency --------------------------------------------------------------------------


def test_a_version_that_is_the_same_now_is_unchanged() -> None:
    check = diff_dependency(dep(version="1.0"), Observation(version="1.0"))
    assert (check.status, check.declared, check.observed) == (
        DependencyStatus.UNCHANGED,
        "1.0",
        "1.0",
    )


def test_a_different_version_now_is_changed() -> None:
    check = diff_dependency(dep(version="1.0"), Observation(version="2.0"))
    assert (check.status, check.declared, check.observed) == (
        DependencyStatus.CHANGED,
        "1.0",
        "2.0",
    )


def test_a_checksum_dependency_is_compared_by_checksum_not_version() -> None:
    declared = dep(version="1.0", checksum="sha256:aa")
    assert diff_dependency(declared, Observation(version="9", checksum="sha256:aa")).status == (
        DependencyStatus.UNCHANGED
    )
    changed = diff_dependency(declared, Observation(version="1.0", checksum="sha256:bb"))
    assert (changed.status, changed.declared, changed.observed) == (
        DependencyStatus.CHANGED,
        "sha256:aa",
        "sha256:bb",
    )


def test_a_dependency_that_is_gone_is_removed() -> None:
    check = diff_dependency(dep(version="1.0"), Observation(present=False))
    assert check.status == DependencyStatus.REMOVED


def test_a_dependency_recorded_as_removed_in_the_log_is_removed_whatever_is_observed() -> None:
    check = diff_dependency(
        dep(version="1.0", recorded_change="removed"), Observation(version="1.0")
    )
    assert check.status == DependencyStatus.REMOVED


def test_a_dependency_recorded_as_changed_in_the_log_stays_changed() -> None:
    check = diff_dependency(
        dep(version="1.0", recorded_change="changed"), Observation(version="1.0")
    )
    assert check.status == DependencyStatus.CHANGED


def test_a_dependency_nobody_observed_is_unknown_not_unchanged() -> None:
    check = diff_dependency(dep(version="1.0"), None)
    assert (check.status, check.observed) == (DependencyStatus.UNKNOWN, None)


def test_an_observation_without_the_compared_value_is_unknown() -> None:
    assert diff_dependency(dep(checksum="sha256:aa"), Observation(version="1")).status == (
        DependencyStatus.UNKNOWN
    )
    assert diff_dependency(dep(version="1"), Observation()).status == DependencyStatus.UNKNOWN


def test_names_observed_but_never_declared_are_added() -> None:
    state = state_of(
        (
            EventType.DEPENDENCY_DECLARED,
            {"dependencies": [{"name": "b", "version": "1"}, {"name": "a", "version": "1"}]},
        )
    )
    checks = diff_environment(
        state, {"a": Observation(version="1"), "b": None}, extra={"a": "1", "zz": "3"}
    )
    assert [(c.name, c.status) for c in checks] == [
        ("a", DependencyStatus.UNCHANGED),
        ("b", DependencyStatus.UNKNOWN),
        ("zz", DependencyStatus.ADDED),
    ]
    assert checks[-1].observed == "3"


# -- propagation -----------------------------------------------------------------------------


def knowledge_state(*extra: tuple[EventType | str, dict[str, Any]]) -> State:
    return state_of(
        (
            EventType.DEPENDENCY_DECLARED,
            {"dependencies": [{"name": "ds", "version": "1"}, {"name": "other", "version": "1"}]},
        ),
        (EventType.EVIDENCE_ADDED, {"evidence_id": "e1", "dependencies": ["ds"]}),
        (EventType.EVIDENCE_ADDED, {"evidence_id": "e2", "dependencies": ["other"]}),
        (EventType.FINDING_ADDED, {"finding_id": "f1", "evidence": ["e1"]}),
        (EventType.FINDING_ADDED, {"finding_id": "f2", "evidence": ["e2"]}),
        (EventType.DECISION_CREATED, {"decision_id": "d1", "findings": ["f1"]}),
        (EventType.DECISION_CREATED, {"decision_id": "d2", "findings": ["f2"]}),
        (EventType.DECISION_CREATED, {"decision_id": "d3", "evidence": ["e1"]}),
        *extra,
    )


def observe(ds: Observation | None) -> dict[str, Observation | None]:
    return {"ds": ds, "other": Observation(version="1")}


@pytest.mark.parametrize(
    "observed,dep_status,component_status",
    [
        (Observation(version="2"), DependencyStatus.CHANGED, ComponentStatus.CONFLICTED),
        (Observation(present=False), DependencyStatus.REMOVED, ComponentStatus.INVALID),
        (None, DependencyStatus.UNKNOWN, ComponentStatus.UNKNOWN),
    ],
)
def test_a_bad_dependency_propagates_to_evidence_findings_and_decisions_in_order(
    observed: Observation | None, dep_status: DependencyStatus, component_status: ComponentStatus
) -> None:
    state = knowledge_state()
    deps = diff_environment(state, observe(observed))
    assert [(d.name, d.status) for d in deps] == [
        ("ds", dep_status),
        ("other", DependencyStatus.UNCHANGED),
    ]
    checks = propagate(state, deps)
    assert statuses(checks) == [
        ("dependency:ds", component_status),
        ("evidence:e1", component_status),
        ("finding:f1", ComponentStatus.STALE),
        ("decision:d1", ComponentStatus.STALE),
        ("decision:d3", ComponentStatus.STALE),
    ]
    by_name = {c.component: c for c in checks}
    assert by_name["evidence:e1"].caused_by == ["dependency:ds"]
    assert by_name["finding:f1"].caused_by == ["evidence:e1"]
    assert by_name["decision:d1"].caused_by == ["finding:f1"]
    assert by_name["decision:d3"].caused_by == ["evidence:e1"]


def test_an_unchanged_environment_invalidates_nothing() -> None:
    state = knowledge_state()
    assert propagate(state, diff_environment(state, observe(Observation(version="1")))) == []


def test_evidence_from_several_dependencies_takes_the_worst_status() -> None:
    state = state_of(
        (
            EventType.DEPENDENCY_DECLARED,
            {"dependencies": [{"name": "a", "version": "1"}, {"name": "b", "version": "1"}]},
        ),
        (EventType.EVIDENCE_ADDED, {"evidence_id": "e", "dependencies": ["a", "b"]}),
    )
    deps = diff_environment(state, {"a": Observation(version="2"), "b": Observation(present=False)})
    checks = {c.component: c for c in propagate(state, deps)}
    assert checks["evidence:e"].status == ComponentStatus.INVALID
    assert checks["evidence:e"].caused_by == ["dependency:a", "dependency:b"]


def test_invalidated_findings_and_decisions_are_not_reported_stale() -> None:
    state = knowledge_state(
        (EventType.FINDING_INVALIDATED, {"finding_id": "f1"}),
        (EventType.DECISION_INVALIDATED, {"decision_id": "d3"}),
    )
    checks = propagate(state, diff_environment(state, observe(Observation(version="2"))))
    assert statuses(checks) == [
        ("dependency:ds", ComponentStatus.CONFLICTED),
        ("evidence:e1", ComponentStatus.CONFLICTED),
    ]


# -- model and review checks -------------------------------------------------------------------


def model_state() -> State:
    return state_of(
        (EventType.RUN_STARTED, {"goal": "g", "model": "m-1"}),
        (EventType.MODEL_ASSUMPTION_RECORDED, {"assumption_id": "a1", "text": "ctx"}),
        (EventType.MODEL_ASSUMPTION_RECORDED, {"assumption_id": "a2", "model": "m-2"}),
    )


def test_a_model_switch_puts_assumptions_made_under_another_model_in_doubt() -> None:
    checks = model_checks(model_state(), "m-2")
    assert statuses(checks) == [("model_assumption:a1", ComponentStatus.STALE)]
    assert checks[0].caused_by == ["model:m-1"]


def test_only_assumptions_made_under_another_model_than_the_resuming_one_are_in_doubt() -> None:
    # Resuming with the run's own model (given or implied) doubts only a2, made under m-2.
    expected = [("model_assumption:a2", ComponentStatus.STALE)]
    assert statuses(model_checks(model_state(), "m-1")) == expected
    assert statuses(model_checks(model_state(), None)) == expected


def test_no_model_anywhere_checks_nothing() -> None:
    state = state_of(
        (EventType.RUN_STARTED, {"goal": "g"}),
        (EventType.MODEL_ASSUMPTION_RECORDED, {"assumption_id": "a1", "text": "x"}),
    )
    assert model_checks(state, None) == []


def test_unreviewed_self_certified_components_require_review() -> None:
    state = state_of(
        (EventType.RUN_STARTED, {"goal": "g", "total": 2}, Origin.EXTERNAL_AGENT),
        (EventType.REVIEW_CONFIRMED, {"through_sequence": 1, "scope": ["goal"]}, Origin.HUMAN),
    )
    assert statuses(review_checks(state)) == [("progress", ComponentStatus.REQUIRES_REVIEW)]


def test_confirmed_state_needs_no_review() -> None:
    state = state_of(
        (EventType.RUN_STARTED, {"goal": "g", "total": 2}, Origin.EXTERNAL_AGENT),
        (EventType.REVIEW_CONFIRMED, {"through_sequence": 1}, Origin.HUMAN),
    )
    assert review_checks(state) == []


# -- the whole report --------------------------------------------------------------------------


def test_validate_state_lists_what_is_verified_and_what_is_not() -> None:
    state = knowledge_state()
    report = validate_state(
        state, observe(Observation(version="2")), extra={"ds": "2"}, expected_model=None
    )
    bad = {c.component for c in report.invalidated}
    assert bad == {"dependency:ds", "evidence:e1", "finding:f1", "decision:d1", "decision:d3"}
    assert report.verified == [
        "progress",
        "dependency:other",
        "evidence:e2",
        "finding:f2",
        "decision:d2",
    ]
    assert not bad & set(report.verified)
    assert [c.component for c in report.with_status(ComponentStatus.STALE)] == [
        "finding:f1",
        "decision:d1",
        "decision:d3",
    ]
    assert report.sequence == state.sequence


def test_validate_state_includes_model_and_review_checks() -> None:
    state = state_of(
        (EventType.RUN_STARTED, {"goal": "g", "model": "m-1"}, Origin.LLM),
        (EventType.MODEL_ASSUMPTION_RECORDED, {"assumption_id": "a1"}),
    )
    report = validate_state(state, {}, expected_model="m-2")
    assert statuses(report.invalidated) == [
        ("model_assumption:a1", ComponentStatus.STALE),
        ("goal", ComponentStatus.REQUIRES_REVIEW),
    ]
    assert "goal" not in report.verified


def test_the_goal_is_verified_only_when_there_is_one() -> None:
    assert "goal" not in validate_state(state_of(), {}).verified
    assert "goal" in validate_state(state_of((EventType.RUN_STARTED, {"goal": "g"})), {}).verified

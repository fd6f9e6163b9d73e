"""Environment diff and staleness propagation (pure).

Declared dependencies are compared with what was observed now (the runtime observes;
this module only compares). Changed -> conflicted, removed -> invalid, unknown ->
unknown; staleness then flows dependency -> evidence -> findings -> decisions. Also
here: which self-certified components still need a human's review, and which
model-specific assumptions a model switch puts in doubt.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from continuum.state.records import Dependency, State
from continuum.types import ComponentStatus, DependencyStatus
from continuum.untrusted import quoted


class Observation(BaseModel):
    """What the environment says now about one dependency."""

    model_config = ConfigDict(frozen=True)

    present: bool = True
    version: str | None = None
    checksum: str | None = None


class DependencyCheck(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    status: DependencyStatus
    declared: str | None = None
    observed: str | None = None


class ComponentCheck(BaseModel):
    model_config = ConfigDict(frozen=True)

    component: str  # e.g. "goal", "evidence:e1", "decision:d2", "dependency:dataset"
    status: ComponentStatus
    reason: str
    caused_by: list[str] = Field(default_factory=list)


class ValidationReport(BaseModel):
    """The state of a run checked against the environment now (``Continuum.validate``).

    ``dependencies``: each declared dependency and its status (unchanged, changed,
    added, removed, unknown); ``invalidated``: components no longer trusted (stale,
    conflicted, invalid, requiring review) and why; ``verified``: components that are.
    """

    model_config = ConfigDict(frozen=True)

    run_id: str
    sequence: int
    dependencies: list[DependencyCheck]
    invalidated: list[ComponentCheck]
    verified: list[str]

    def with_status(self, *statuses: ComponentStatus) -> list[ComponentCheck]:
        """The invalidated components whose status is one of ``statuses``."""
        return [c for c in self.invalidated if c.status in statuses]


_DEP_TO_COMPONENT = {
    DependencyStatus.CHANGED: ComponentStatus.CONFLICTED,
    DependencyStatus.REMOVED: ComponentStatus.INVALID,
    DependencyStatus.UNKNOWN: ComponentStatus.UNKNOWN,
}


def _describe(dep: Dependency) -> str | None:
    return dep.checksum if dep.checksum is not None else dep.version


def diff_dependency(dep: Dependency, obs: Observation | None) -> DependencyCheck:
    declared = _describe(dep)
    if dep.recorded_change == "removed":
        return DependencyCheck(name=dep.name, status=DependencyStatus.REMOVED, declared=declared)
    if obs is None:
        return DependencyCheck(name=dep.name, status=DependencyStatus.UNKNOWN, declared=declared)
    if not obs.present:
        return DependencyCheck(name=dep.name, status=DependencyStatus.REMOVED, declared=declared)
    if dep.checksum is not None:
        observed = obs.checksum
        same = observed == dep.checksum
    else:
        observed = obs.version
        same = observed == dep.version
    if observed is None:
        return DependencyCheck(name=dep.name, status=DependencyStatus.UNKNOWN, declared=declared)
    status = DependencyStatus.UNCHANGED if same else DependencyStatus.CHANGED
    if dep.recorded_change == "changed":
        status = DependencyStatus.CHANGED
    return DependencyCheck(name=dep.name, status=status, declared=declared, observed=observed)


def diff_environment(
    state: State,
    observed: Mapping[str, Observation | None],
    *,
    extra: Mapping[str, str] | None = None,
) -> list[DependencyCheck]:
    """Compare every declared dependency; names observed but never declared are ``added``."""
    checks = [
        diff_dependency(dep, observed.get(name)) for name, dep in sorted(state.dependencies.items())
    ]
    for name, value in sorted((extra or {}).items()):
        if name not in state.dependencies:
            checks.append(DependencyCheck(name=name, status=DependencyStatus.ADDED, observed=value))
    return checks


def _worst(statuses: list[ComponentStatus]) -> ComponentStatus:
    order = [
        ComponentStatus.INVALID,
        ComponentStatus.CONFLICTED,
        ComponentStatus.UNKNOWN,
        ComponentStatus.STALE,
    ]
    for s in order:
        if s in statuses:
            return s
    return ComponentStatus.STALE


def propagate(state: State, deps: list[DependencyCheck]) -> list[ComponentCheck]:
    """Walk dependency -> evidence -> findings -> decisions, in that order."""
    out: list[ComponentCheck] = []
    bad_deps: dict[str, ComponentStatus] = {}
    for d in deps:
        if d.status in _DEP_TO_COMPONENT:
            bad_deps[d.name] = _DEP_TO_COMPONENT[d.status]
            out.append(
                ComponentCheck(
                    component=f"dependency:{d.name}",
                    status=bad_deps[d.name],
                    reason=f"dependency {quoted(d.name, limit=120)} is {d.status}",
                )
            )
    bad_evidence: dict[str, ComponentStatus] = {}
    for eid, ev in sorted(state.evidence.items()):
        causes = [c for c in ev.cites if c in bad_deps]
        if causes and ev.status == "active":
            bad_evidence[eid] = _worst([bad_deps[c] for c in causes])
            out.append(
                ComponentCheck(
                    component=f"evidence:{eid}",
                    status=bad_evidence[eid],
                    reason="derived from " + ", ".join(causes),
                    caused_by=[f"dependency:{c}" for c in causes],
                )
            )
    bad_findings: set[str] = set()
    for fid, f in sorted(state.findings.items()):
        causes = [c for c in f.cites if c in bad_evidence]
        if causes and f.status == "active":
            bad_findings.add(fid)
            out.append(
                ComponentCheck(
                    component=f"finding:{fid}",
                    status=ComponentStatus.STALE,
                    reason="cites stale evidence " + ", ".join(causes),
                    caused_by=[f"evidence:{c}" for c in causes],
                )
            )
    for did, dec in sorted(state.decisions.items()):
        causes = [f"finding:{c}" for c in dec.cites if c in bad_findings]
        causes += [c for c in dec.cites if c.startswith("evidence:") and c[9:] in bad_evidence]
        if causes and dec.status == "active":
            out.append(
                ComponentCheck(
                    component=f"decision:{did}",
                    status=ComponentStatus.STALE,
                    reason="rests on " + ", ".join(causes),
                    caused_by=causes,
                )
            )
    return out


def review_checks(state: State) -> list[ComponentCheck]:
    """Self-certified components newer than any human confirmation need review (references/contract.md §5)."""
    return [
        ComponentCheck(
            component=comp,
            status=ComponentStatus.REQUIRES_REVIEW,
            reason=f"self-reported up to sequence {seq}; human confirmation covers "
            f"{state.confirmed_through(comp)}",
        )
        for comp, seq in state.unreviewed().items()
    ]


def model_checks(state: State, expected_model: str | None) -> list[ComponentCheck]:
    """After a model switch, assumptions recorded under another model are in doubt."""
    current = expected_model or state.model
    if current is None:
        return []
    return [
        ComponentCheck(
            component=f"model_assumption:{a.id}",
            status=ComponentStatus.STALE,
            reason=f"recorded under model {quoted(a.model, limit=80)}, resuming with "
            f"{quoted(current, limit=80)}: {quoted(a.text, limit=200)}",
            caused_by=[f"model:{a.model}"],
        )
        for a in state.model_assumptions
        if a.status == "active" and a.model not in (None, current)
    ]


def validate_state(
    state: State,
    observed: Mapping[str, Observation | None],
    *,
    extra: Mapping[str, str] | None = None,
    expected_model: str | None = None,
) -> ValidationReport:
    deps = diff_environment(state, observed, extra=extra)
    invalidated = (
        propagate(state, deps) + model_checks(state, expected_model) + review_checks(state)
    )
    bad = {c.component for c in invalidated}
    unreviewed = set(state.unreviewed())
    singular = {"findings": "finding", "decisions": "decision", "evidence": "evidence"}
    candidates = [
        "goal",
        "progress",
        *(f"dependency:{n}" for n in sorted(state.dependencies)),
        *(f"evidence:{i}" for i in sorted(state.evidence)),
        *(f"finding:{i}" for i in sorted(state.findings)),
        *(f"decision:{i}" for i in sorted(state.decisions)),
    ]

    def trusted(component: str) -> bool:
        kind = component.split(":", 1)[0]
        return component not in unreviewed and not any(singular.get(u) == kind for u in unreviewed)

    verified = [
        c
        for c in candidates
        if c not in bad and trusted(c) and (c != "goal" or state.goal is not None)
    ]
    return ValidationReport(
        run_id=state.run_id,
        sequence=state.sequence,
        dependencies=deps,
        invalidated=invalidated,
        verified=verified,
    )

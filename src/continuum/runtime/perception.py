"""The facade's observations and plan branches (the secure planning loop), over the
ledger layer: ``observe`` records one signal's reading of an observation,
``resolve_branch`` asks whether a plan branch resting on observations may be taken.

What is verified and when a branch needs a person is ``state.perception`` (pure), applied
by the fold: this layer checks the input, adds what continuum can see itself (a declared
dependency's value, for an environment observation), finds the branch's risk in the
approval rules (``[[branch]]`` tables of ``.continuum/approvals.toml``) and appends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from continuum.errors import NotFoundError, UsageError
from continuum.eventlog.events import EventType
from continuum.eventlog.payloads import OBSERVATION_KINDS, RISKS, check_via
from continuum.runtime.effects import EffectsFacade
from continuum.runtime.results import BranchVerdict, Observed
from continuum.state.environment import observe as observe_dependency
from continuum.state.perception import branch_hold, higher_risk, independent_signals
from continuum.state.records import Perception, State
from continuum.types import Mode, Origin, RunStatus
from continuum.untrusted import check_identifier

CONTINUUM_SIGNAL = "continuum"  # the signal name of continuum's own reading ("continuum:file")


def _ident(value: object, what: str, max_length: int = 200) -> str:
    return check_identifier(
        value,
        what=what,
        code="usage.bad_identifier",
        max_length=max_length,
        hint=f"give a {what} of printable characters (at most {max_length}), without "
        "control or bidi characters; nothing was written",
    )


def _active(state: State, run_id: str) -> None:
    if state.status != RunStatus.ACTIVE:
        raise UsageError(
            f"run {run_id!r} is {state.status}: nothing more is recorded in it",
            code="usage.run_finished",
            hint="start a new run; nothing was written",
        )


def _observed(run_id: str, obs: Perception, checked: bool) -> Observed:
    readings = sorted(obs.readings.values(), key=lambda r: r.sequence)
    return Observed(
        run_id=run_id,
        observation_id=obs.id,
        subject=obs.subject,
        kind=obs.kind,
        status=obs.status,
        independent_signals=len(independent_signals(r.model_dump() for r in readings)),
        readings=[
            r.model_dump(mode="json", include={"signal", "origin", "value", "source", "sequence"})
            for r in readings
        ],
        continuum_checked=checked,
        sequence=obs.last_sequence,
    )


class PerceptionFacade(EffectsFacade):
    """Observations and plan branches (the layer under ``Continuum``; use ``Continuum``)."""

    def observe(
        self,
        run_id: str,
        subject: str,
        value: Any,
        *,
        signal: str,
        observation_id: str | None = None,
        kind: str = "content",
        source: str | None = None,
    ) -> Observed:
        """Record one signal's reading of an observation and return where it stands.

        ``subject``: what was observed ("the Pay button's label"); ``value``: what this
        signal saw (any JSON value); ``signal``: the means that saw it ("dom",
        "screenshot_ocr", "stripe_api"); ``observation_id``: the observation the reading
        belongs to (default: the subject); ``kind``: ``environment``, ``ui``, ``content``
        or ``tool``; ``source``: where it was read (a URL, a tool's name).

        Two agreeing readings by independent signals verify it; any disagreement
        contests it; readings recorded by an agent (origin ``llm``/``external_agent``)
        count as one signal however many there are. For an ``environment`` observation
        whose id names a declared dependency that continuum can observe itself (a file, a
        git tree, a registered probe), continuum records its own reading too
        (``continuum_checked``): what the agent says is then checked against the world. That
        reading's subject is the dependency's name: give the same subject, or the
        observation is contested (continuum vouches for the value, not for a caller's
        description of it).

        Raises ``not_found.run``, ``usage.bad_identifier``, ``usage.bad_kind``,
        ``usage.conflicting_subject`` (the id is used for another subject),
        ``usage.run_finished`` and ``usage.bad_payload``; nothing is written then.
        """
        subject = _ident(subject, "subject", 500)
        ident = _ident(subject if observation_id is None else observation_id, "observation_id")
        signal = _ident(signal, "signal")
        if kind not in OBSERVATION_KINDS:
            raise UsageError(
                f"kind {str(kind)[:40]!r} is not an observation kind",
                code="usage.bad_kind",
                hint=f"give one of {', '.join(OBSERVATION_KINDS)}; nothing was written",
            )
        state = self.state(run_id)
        _active(state, run_id)
        before = state.observations.get(ident)
        if before is not None and before.subject != subject:
            raise UsageError(
                f"observation {ident!r} is of {before.subject!r}, not {subject[:200]!r}",
                code="usage.conflicting_subject",
                hint="give another observation_id for another subject; nothing was written",
            )
        payload: dict[str, Any] = {
            "observation_id": ident,
            "subject": subject,
            "signal": signal,
            "value": value,
            "kind": kind,
        }
        if source is not None:
            payload["source"] = source
        events: list[tuple[EventType | str, dict[str, Any]]] = [
            (EventType.PERCEPTION_OBSERVED, payload)
        ]
        own = self._own_reading(state, ident, kind, subject)
        if own is not None:
            events.append((EventType.PERCEPTION_OBSERVED, own))
        if own is None or self.origin == Origin.DETERMINISTIC:
            self.append_events(run_id, events)
        else:  # continuum's reading is continuum's own, whoever asked for it
            self.append_events(run_id, events[:1])
            self.store.append_event(
                run_id, EventType.PERCEPTION_OBSERVED, own, source=Origin.DETERMINISTIC
            )
        self._step(run_id)
        return _observed(run_id, self.state(run_id).observations[ident], own is not None)

    def _own_reading(
        self, state: State, ident: str, kind: str, subject: str
    ) -> dict[str, Any] | None:
        """Continuum's own reading of a declared dependency named ``ident`` (environment
        observations only), or None when continuum cannot see it itself."""
        dep = state.dependencies.get(ident)
        if kind != "environment" or dep is None or dep.provider == "static":
            return None
        seen = observe_dependency(dep, {}, self.probes)
        if seen is None:
            return None
        value = None if not seen.present else seen.checksum or seen.version
        # Continuum vouches for the dependency's value, not for what a caller says it means:
        # its reading's subject is the dependency itself, so a reading filed under another
        # subject is contested, never verified by this one.
        return {
            "observation_id": ident,
            "subject": dep.name,
            "signal": f"{CONTINUUM_SIGNAL}:{dep.provider}",
            "value": value,
            "kind": "environment",
            "source": dep.locator or dep.name,
        }

    def observations(self, run_id: str) -> list[Observed]:
        """The run's observations in the order they were first recorded, each with its
        status and latest readings (agent-supplied text as is: escape it for a person)."""
        state = self.state(run_id)
        found = sorted(state.observations.values(), key=lambda o: o.provenance.sequence)
        return [_observed(run_id, o, False) for o in found]

    def branches(self, run_id: str) -> list[BranchVerdict]:
        """The run's plan branches as last resolved, in log order."""
        state = self.state(run_id)
        found = sorted(state.branches.values(), key=lambda b: b.provenance.sequence)
        return [self._verdict(run_id, state, b.id) for b in found]

    def resolve_branch(
        self,
        run_id: str,
        branch_id: str,
        *,
        choice: str,
        observations: Sequence[str],
        risk: str | None = None,
        reason: str | None = None,
        via: Mapping[str, str] | None = None,
    ) -> BranchVerdict:
        """Ask whether the plan may take ``choice`` at ``branch_id``, a branch resting on
        ``observations`` (their ids), and record the answer (``branch_resolved``).

        ``mode`` is ``request_human`` (never ``resume``) when the branch is high risk and
        an observation is not verified, or when an environment observation is contested;
        the run's verdict then waits for a person too (``continuum resolve-branch``).
        ``risk`` (``low`` or ``high``) is raised, never lowered, by a ``[[branch]]`` rule
        of the approval rules and by what the branch was declared before. A facade of
        origin ``human`` (a person at the CLI) resolves the branch whatever the
        observations say; ``via`` records how that person gave it. Raises ``not_found.run``,
        ``not_found.observation``, ``usage.bad_via``, ``usage.bad_identifier``, ``usage.bad_risk``, ``usage.run_finished`` and
        ``approvals.bad_rules`` (a malformed rules file: fail closed); nothing is written
        then.
        """
        branch_id = _ident(branch_id, "branch_id")
        choice = _ident(choice, "choice")
        recorded_via = check_via(via)
        if risk is not None and risk not in RISKS:
            raise UsageError(
                f"risk {str(risk)[:40]!r} is not a risk",
                code="usage.bad_risk",
                hint=f"give one of {', '.join(RISKS)}; nothing was written",
            )
        if isinstance(observations, str) or not observations:
            raise UsageError(
                "a branch must name the observations it rests on",
                code="usage.bad_observations",
                hint="give observations as a non-empty list of observation ids "
                "(record them with observe first); nothing was written",
            )
        names = [_ident(o, "observation id") for o in observations]
        state = self.state(run_id)
        _active(state, run_id)
        missing = [o for o in names if o not in state.observations]
        if missing and self.origin != Origin.HUMAN:
            raise NotFoundError(
                f"observation {missing[0]!r} is not recorded in run {run_id!r}",
                code="not_found.observation",
                hint="record it with observe (continuum_observe) before a branch rests on "
                "it; nothing was written",
            )
        rules = self.ledger.approvals
        rule = rules.branch_rule(branch_id)  # approvals.bad_rules while malformed
        before = state.branches.get(branch_id)
        judged = higher_risk(risk, rule.risk if rule else None, before.risk if before else None)
        hold = None
        if self.origin != Origin.HUMAN:
            hold = branch_hold(
                judged,
                [(o, _plain(state.observations.get(o))) for o in names],
            )
        payload: dict[str, Any] = {
            "branch_id": branch_id,
            "choice": choice,
            "observations": names,
            "risk": judged,
            "verdict": str(Mode.REQUEST_HUMAN if hold else Mode.RESUME),
        }
        if rule is not None:
            payload["rule"] = rule.describe()
        if reason is not None:
            payload["reason"] = reason
        if recorded_via is not None:
            payload["via"] = recorded_via
        self.append(run_id, EventType.BRANCH_RESOLVED, payload)
        self._step(run_id)
        return self._verdict(run_id, self.state(run_id), branch_id)

    def _verdict(self, run_id: str, state: State, branch_id: str) -> BranchVerdict:
        b = state.branches[branch_id]
        return BranchVerdict(
            run_id=run_id,
            branch_id=b.id,
            choice=b.choice,
            risk=b.risk,
            mode=Mode.REQUEST_HUMAN if b.waiting else Mode.RESUME,
            status=b.status,
            reason=b.reason,
            note=b.note,
            rule=b.rule,
            observations=[
                {
                    "observation_id": o,
                    "status": state.observations[o].status
                    if o in state.observations
                    else "not_recorded",
                    "kind": state.observations[o].kind if o in state.observations else None,
                }
                for o in b.observations
            ],
            resolved_by=str(b.resolved_by) if b.resolved_by is not None else None,
            next_allowed_action=f"resolve_branch:{b.id}" if b.waiting else "continue",
            sequence=b.provenance.sequence,
        )


def _plain(obs: Perception | None) -> dict[str, Any] | None:
    return None if obs is None else {"status": obs.status, "kind": obs.kind}

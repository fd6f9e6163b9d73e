"""The one facade the edges (CLI, MCP server, adapters) use: ``Continuum``.

It composes the store, the ledger, checkpoints, environment observation and the
recovery engine, in four layers of one class each: ``RunsFacade`` (``runtime.runs``:
runs, events, state, checkpoints, verification, long-lived stores), ``EffectsFacade``
(``runtime.effects``: the ledger, approvals, the outbox), ``PerceptionFacade``
(``runtime.perception``: observations and plan branches) and ``Continuum`` here (recovery:
validate, evaluate, resume, confirm, the recovery contract). The origin given at
construction is stamped on everything this facade writes (``external_agent`` for the MCP
server, ``deterministic`` for the CLI); ``confirm`` always writes as ``human`` and belongs
to trusted edges only.
The Python API is described in references/api.md; ``help(Continuum)`` shows each method.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from continuum.errors import IntegrityError, UsageError
from continuum.eventlog.events import EventType
from continuum.eventlog.payloads import check_via
from continuum.eventlog.reports import VerifyReport
from continuum.recovery.checkpoints import checkpoint_through
from continuum.recovery.contract import RecoveryContract
from continuum.recovery.engine import build_contract, decide
from continuum.recovery.versions import version_drift
from continuum.runtime.perception import PerceptionFacade
from continuum.runtime.results import ConfirmResult, Evaluation, FileEvidence, Recovery
from continuum.state.environment import Probe, file_checksum, observe
from continuum.state.projection import project
from continuum.state.records import ALL_COMPONENTS, DEFAULT_CONFIRM_SCOPE, Dependency, State
from continuum.state.validation import Observation, ValidationReport, validate_state
from continuum.types import Origin


class Continuum(PerceptionFacade):
    """Crash recovery for one store: runs, events, the action ledger, checkpoints,
    verification and the recovery verdict (references/api.md).

    Open one with ``Continuum.open(url)`` and close it when done, best as a context
    manager::

        with Continuum.open("agent.db") as cx:
            cx.start_run("r1", "send five invoices", total=5)
            r = cx.intercept("r1", "send_invoice", {"invoice": "INV-1"}, key="INV-1")
            if r.proceed:
                ...                                   # the side effect, once
                cx.complete("r1", r.action_key, external_id="msg-1")
            print(cx.resume("r1").mode)

    Trust: ``origin`` is stamped on everything this object writes. ``deterministic``
    (the default) is your own code; ``llm`` and ``external_agent`` are an agent's word,
    not trusted until a person confirms it (``confirm`` writes as ``human``).

    Errors: every error is a ``ContinuumError`` with a dotted ``code`` and a ``hint``
    (references/contract.md §10): ``UsageError`` (``usage.*``, bad input),
    ``NotFoundError`` (``not_found.run``, ``not_found.action``, ``not_found.store``),
    ``StoreError`` (``store.*``), ``IntegrityError`` (``integrity.*``: a damaged log or
    index, refused, never repaired) and ``LedgerError`` (``ledger.*``). A call that
    raises has written nothing.
    """

    # -- recovery ---------------------------------------------------------------------------

    def _inputs(
        self, run_id: str, env: Mapping[str, str] | None, expected_model: str | None
    ) -> tuple[
        State,
        ValidationReport,
        VerifyReport,
        int | None,
        tuple[dict[str, str | None], dict[str, str]],
    ]:
        run = self.store.get_run(run_id)
        try:
            state = self.state(run_id)
            chain = VerifyReport(
                run_id=run_id,
                ok=True,
                events_checked=run.head_sequence,
                trusted_through=run.head_sequence,
                head_sequence=run.head_sequence,
                head_hash=run.head_hash,
                violations=[],
            )
        except IntegrityError:
            self._states.pop(run_id, None)
            self._plain.pop(run_id, None)
            chain = self.store.verify_events(run_id)
            state = project(run_id, [])
            state = state.model_copy(update={"sequence": chain.trusted_through})
        # The contract names the latest checkpoint the log records: the same for the same
        # log, whichever way (checkpoint, cache, log) the state was arrived at.
        cp_version = checkpoint_through(self.store, run_id, state.last_checkpoint)
        given = dict(env or {})
        observed = {
            name: observe(dep, given, self.probes) for name, dep in state.dependencies.items()
        }
        validation = validate_state(state, observed, extra=given, expected_model=expected_model)
        observed_view = {n: _observed_value(o) for n, o in observed.items()}
        # Which values the caller supplied (an agent may supply any value it likes) and
        # which continuum observed itself: verify-contract re-observes the former.
        sources = {
            n: "supplied" if n in given else "observed" if o is not None else "unobserved"
            for n, o in observed.items()
        }
        return state, validation, chain, cp_version, (observed_view, sources)

    def validate(
        self,
        run_id: str,
        *,
        env: Mapping[str, str] | None = None,
        expected_model: str | None = None,
    ) -> ValidationReport:
        """Returns the ``ValidationReport`` alone: each declared dependency compared with the
        environment now, and what is stale because of it (``evaluate`` gives it with the
        verdict, observed once). Raises ``NotFoundError`` (``not_found.run``)."""
        return self._inputs(run_id, env, expected_model)[1]

    def evaluate(
        self,
        run_id: str,
        *,
        env: Mapping[str, str] | None = None,
        expected_model: str | None = None,
        tolerate_unknown: bool = False,
    ) -> Evaluation:
        """The state, its validation against the environment (observed once), the decision
        and the sealed contract, all from one reading of the store."""
        state, validation, chain, cp_version, (observed, sources) = self._inputs(
            run_id, env, expected_model
        )
        children = self.family(run_id) if state.children else []
        decision = decide(
            state,
            validation,
            chain,
            in_flight=self._in_flight(run_id, state),
            tolerate_unknown=tolerate_unknown,
            children=children,
        )
        contract = build_contract(
            state,
            validation,
            decision,
            chain,
            checkpoint_version=cp_version,
            observed_env=observed,
            env_sources=sources,
        )
        return Evaluation(state, validation, decision, contract, tuple(children))

    def resume(
        self,
        run_id: str | None = None,
        *,
        env: Mapping[str, str] | None = None,
        expected_model: str | None = None,
        tolerate_unknown: bool = False,
        versions: Mapping[str, Any] | None = None,
    ) -> Recovery:
        """Read-only: may the run continue? Returns a ``Recovery``: the verdict (``mode``),
        why, what to do next and the sealed contract.

        ``versions``: what the agent runs under now (``model``, ``prompt_hash``, and
        ``tool_schema_hashes``: action type -> hash); each open action recorded under
        other ones is listed in ``version_drift``.

        ``run_id`` defaults to the latest active run (none: ``mode`` ``no_active_run``).
        ``env`` gives current values of declared static dependencies; ``expected_model``
        the model now in use; ``tolerate_unknown`` lets a dependency that cannot be
        checked now not block the verdict. Only ``mode`` ``resume`` (``safe``) means
        continue. A damaged log is answered (verdict ``abort``), not raised; raises
        ``NotFoundError`` (``not_found.run``) for an unknown run.
        """
        if run_id is None:
            run_id = self.latest_active_run()
            if run_id is None:
                return Recovery(
                    run_id=None,
                    mode="no_active_run",
                    safe=False,
                    next_allowed_action=None,
                    rationale="there is no active run in this store",
                    required_actions=[],
                    uncertain_actions=[],
                    progress=None,
                    contract=None,
                )
        state, _, decision, contract, family = self.evaluate(
            run_id, env=env, expected_model=expected_model, tolerate_unknown=tolerate_unknown
        )
        children = [
            {
                "run_id": c.run_id,
                "path": c.path,
                "status": str(c.status),
                "unresolved": [
                    {
                        "action_id": a.action_id,
                        "action_key": a.action_key,
                        "status": "in_progress" if a.action_id in c.in_flight else str(a.status),
                        "next": f"wait_for_child:{c.run_id}"
                        if a.action_id in c.in_flight
                        else f"reconcile_child_action:{c.run_id}:{a.action_id}",
                    }
                    for a in c.open_actions
                ],
                "pending_approvals": [
                    {"approval_id": ap, "next": f"await_child_approval:{c.run_id}:{ap}"}
                    for ap in c.pending_approvals
                ],
                "waiting_branches": [
                    {
                        "branch_id": b,
                        "reason": why,
                        "next": f"resolve_child_branch:{c.run_id}:{b}",
                    }
                    for b, why in c.waiting_branches
                ],
            }
            for c in family
        ]
        uncertain = [
            {
                "action_id": a.action_id,
                "action_key": a.action_key,
                "action_type": a.action_type,
                "status": "needs_confirmation" if a.failure_unconfirmed else "unknown",
                "recorded_status": str(a.status),
                "attempt": a.attempt,
                "arguments": a.arguments,
                "next": f"reconcile_action:{a.action_id}",
            }
            for a in decision.uncertain_actions
        ]
        recovery = Recovery(
            run_id=run_id,
            mode=decision.mode,
            safe=decision.safe,
            next_allowed_action=decision.next_allowed_action,
            rationale=decision.reason,
            required_actions=decision.required_actions,
            uncertain_actions=uncertain,
            progress=state.progress.model_dump(mode="json", exclude={"provenance"}),
            goal=state.goal.value if state.goal else None,
            contract=contract.model_dump(mode="json"),
            files=self.file_evidence(state),
            version_drift=version_drift(state, versions),
            children=children,
            handoff=None
            if state.handoff is None
            else {
                "note": state.handoff.value,
                "origin": str(state.handoff.provenance.origin),
                "sequence": state.handoff.provenance.sequence,
            },
        )
        if self.telemetry is not None:  # a recovery decision, as a span (telemetry/)
            self.telemetry.resumed(recovery)
        return recovery

    def file_evidence(self, state: State, *, limit: int = 20) -> FileEvidence | None:
        """Compare the files recorded as evidence with the disk: verified, changed, missing
        (reads files; at most ``limit`` paths listed per kind). None when there are none."""
        verified, changed, missing = 0, [], []
        for item in sorted(state.evidence.values(), key=lambda i: i.path or ""):
            if item.path is None or item.sha256 is None or item.status != "active":
                continue
            now = file_checksum(item.path)
            if now is None:
                missing.append(item.path)
            elif now != item.sha256:
                changed.append(item.path)
            else:
                verified += 1
        if not (verified or changed or missing):
            return None
        return FileEvidence(verified=verified, changed=changed[:limit], missing=missing[:limit])

    def confirm(
        self,
        run_id: str,
        *,
        scope: str = "default",
        through_sequence: int | None = None,
        expect_hash: str | None = None,
        via: Mapping[str, str] | None = None,
    ) -> ConfirmResult:
        """A human vouches for self-reported state (references/contract.md §5): the state
        at ``through_sequence``. Writes as ``human``: for trusted edges only.

        Without ``through_sequence``: the state at the head when the confirmation is written.
        With it, exactly events 1..N are covered, even if the run has moved on since (what a
        person was shown), and ``expect_hash`` (the hash of event N they were shown) must be
        the stored one, else nothing is written (``integrity.confirm_mismatch``).
        ``scope``: ``default`` (goal and progress), ``goal``, ``progress`` or ``all``.
        ``via``: how the person gave it (``eventlog.payloads.via_of``), recorded with it.

        Returns a ``ConfirmResult``. Raises ``UsageError`` (``usage.bad_scope``,
        ``usage.bad_sequence``, ``usage.bad_via``), ``NotFoundError`` (``not_found.run``) and
        ``IntegrityError`` (``integrity.confirm_mismatch``).
        """
        scopes = {
            "default": list(DEFAULT_CONFIRM_SCOPE),
            "goal": ["goal"],
            "progress": ["progress"],
            "all": ["all"],
        }
        if scope not in scopes:
            raise UsageError(
                f"unknown scope {scope!r}",
                code="usage.bad_scope",
                hint="use --scope goal, progress or all",
            )
        if through_sequence is not None and (
            not isinstance(through_sequence, int)
            or isinstance(through_sequence, bool)
            or through_sequence < 1
        ):
            raise UsageError(
                "through_sequence must be a positive integer",
                code="usage.bad_sequence",
                hint="pass the sequence that was reviewed",
            )
        if expect_hash is not None and through_sequence is None:
            raise UsageError(
                "expect_hash needs through_sequence",
                code="usage.bad_sequence",
                hint="pass the sequence the hash belongs to",
            )
        recorded_via = check_via(via)
        with self.store.write(run_id) as tx:
            head = tx.run.head_sequence
            upto = head if through_sequence is None else through_sequence
            if upto > head:
                raise UsageError(
                    f"run {run_id!r} has no event {upto} (its head is {head})",
                    code="usage.bad_sequence",
                    hint=f"use a sequence from 1 to {head}",
                    run_id=run_id,
                )
            if expect_hash is not None:
                stored = self.store.event_hash_at(run_id, upto)
                if stored != expect_hash:
                    raise IntegrityError(
                        f"event {upto} of run {run_id!r} is not the one that was reviewed "
                        f"(hash {(stored or 'none')[:12]}, reviewed {expect_hash[:12]}); "
                        "nothing was confirmed",
                        code="integrity.confirm_mismatch",
                        hint=f"run `continuum verify {run_id}`, then review again with "
                        f"`continuum confirm {run_id}`",
                        run_id=run_id,
                        sequence=upto,
                    )
            state = self.state_at(run_id, upto)
            covered = ALL_COMPONENTS if scope == "all" else scopes[scope]
            confirmed: dict[str, Any] = {
                "goal": state.goal.value if state.goal else None,
                "progress": state.progress.model_dump(mode="json", exclude={"provenance"}),
            }
            if scope == "all":
                confirmed.update(
                    findings=sorted(state.findings),
                    decisions=sorted(state.decisions),
                    evidence=sorted(state.evidence),
                    plan=state.plan,
                    model=state.model,
                )
            confirmed = {k: v for k, v in confirmed.items() if k in covered or scope == "all"}
            payload: dict[str, Any] = {
                "through_sequence": upto,
                "scope": scopes[scope],
                "confirmed": confirmed,
            }
            if state.head_hash is not None:
                payload["through_hash"] = state.head_hash
            if recorded_via is not None:
                payload["via"] = recorded_via
            event = tx.append(EventType.REVIEW_CONFIRMED, payload, source=Origin.HUMAN)
        return ConfirmResult(
            run_id=run_id,
            through_sequence=upto,
            scope=scopes[scope],
            confirmed=confirmed,
            event_sequence=event.sequence,
            through_hash=state.head_hash,
            head_sequence=head,
        )

    def verify_contract(self, contract_json: str) -> dict[str, Any]:
        """Check a contract file's text: intact seal, bound to this store's head, and the
        same contract this store gives now (values the caller supplied are re-observed
        where possible). Returns ``{"ok": True, "run_id", "verdict", "head_sequence",
        "integrity_hash", "reobserved", "unverified_inputs"}``.

        Raises ``UsageError`` (``usage.bad_contract``), ``NotFoundError``
        (``not_found.run``) and ``IntegrityError``: ``integrity.contract_tampered``,
        ``integrity.contract_foreign``, ``integrity.contract_stale``,
        ``integrity.contract_mismatch``.
        """
        try:
            contract = RecoveryContract.model_validate_json(contract_json)
        except ValueError as e:
            raise UsageError(
                "the file is not a recovery contract",
                code="usage.bad_contract",
                hint="pass a file written by `continuum show-contract RUN --json`",
            ) from e
        if not contract.is_intact():
            raise IntegrityError(
                "the contract's integrity_hash does not match its content",
                code="integrity.contract_tampered",
                hint="the file was edited; get a fresh one with show-contract",
                run_id=contract.run_id,
            )
        run = self.store.get_run(contract.run_id)
        stored = (
            self.store.event_hash_at(contract.run_id, contract.head_sequence)
            if contract.head_sequence
            else None
        )
        if contract.head_sequence and stored != contract.head_hash:
            raise IntegrityError(
                f"the contract's head {contract.head_sequence} is not in this store's chain",
                code="integrity.contract_foreign",
                hint="check --db; the log or the contract does not belong here",
            )
        if run.head_sequence != contract.head_sequence:
            raise IntegrityError(
                f"the contract was computed at sequence {contract.head_sequence} "
                f"but the run is now at {run.head_sequence}",
                code="integrity.contract_stale",
                hint=f"get a current one: continuum show-contract {contract.run_id}",
            )
        # The seal only proves the file is unchanged since someone sealed it; anyone can
        # seal. So recompute the decision from this store and require the same contract.
        # Values the caller supplied are re-observed wherever a provider can observe them
        # (a file's hash, a git head, a registered callable); only values nothing here can
        # observe are taken from the contract, and the answer names them.
        env, reobserved, unverified = self._contract_env(contract)
        fresh = self.evaluate(contract.run_id, env=env).contract
        if fresh.integrity_hash != contract.integrity_hash:
            raise IntegrityError(
                f"the store gives verdict {fresh.verdict!r} (contract {fresh.integrity_hash[:12]}) "
                f"where the file says {contract.verdict!r} ({contract.integrity_hash[:12]})",
                code="integrity.contract_mismatch",
                hint=f"the file was not produced from this log; trust `continuum resume "
                f"{contract.run_id}` instead",
                run_id=contract.run_id,
            )
        return {
            "ok": True,
            "run_id": contract.run_id,
            "verdict": contract.verdict,
            "head_sequence": contract.head_sequence,
            "integrity_hash": contract.integrity_hash,
            "reobserved": reobserved,
            "unverified_inputs": unverified,
        }

    def _contract_env(
        self, contract: RecoveryContract
    ) -> tuple[dict[str, str], list[str], list[str]]:
        """The environment to recompute a contract with: (env, re-observed, taken on trust)."""
        recorded = contract.evidence.get("environment") or {}
        # A contract without sources (older format) is treated as all supplied.
        sources = contract.evidence.get("environment_sources") or dict.fromkeys(
            recorded, "supplied"
        )
        dependencies = self.state(contract.run_id).dependencies
        env: dict[str, str] = {}
        reobserved: list[str] = []
        unverified: list[str] = []
        for name, value in sorted(recorded.items()):
            if sources.get(name) != "supplied" or not isinstance(value, str):
                continue  # observed by continuum at the time: it observes again now
            dep = dependencies.get(name)
            if dep is not None and _observable(dep, self.probes):
                fresh = _observed_value(observe(dep, {}, self.probes))
                if fresh is not None and fresh != "removed":
                    env[name] = fresh  # what is there now, not what the caller said
                reobserved.append(name)
            else:
                env[name] = value
                unverified.append(name)
        return env, reobserved, unverified


def _observed_value(o: Observation | None) -> str | None:
    if o is None:
        return None
    return (o.checksum or o.version) if o.present else "removed"


def _observable(dep: Dependency, probes: Mapping[str, Probe]) -> bool:
    """Can a provider observe ``dep`` here, without a value from the caller?"""
    if dep.provider in ("file", "git"):
        return bool(dep.locator)
    return dep.provider == "callable" and dep.name in probes

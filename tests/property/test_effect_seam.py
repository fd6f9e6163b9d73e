"""The effect seam against a model of the ledger (contract §6, issue 15).

Calls of one effect per key, in every form (decorator, ``arun``, ``with``), whose body
succeeds, raises an error that certainly means "did not happen" (``certain_on``) or any
other error; crashes between intercept and complete (the seam's own intercept, with or
without the effect having run, then the owning process is killed: a ``sleep`` child is
the owner, as in test_ledger_machine.py); reconciliations by trusted code. Calls are made
as trusted code or as an agent (``external_agent``), whose "did not happen" needs a
person's confirmation.

Invariants: the seam runs an effect only when the model says it may (never while it is
completed, never again after an interruption unless the contract is ``safe`` or
``idempotent``, or trusted code said it did not happen); it returns the recorded result
instead of running a completed effect; it raises ``EffectUncertain`` exactly when the
model says unknown, ``reconcile_required`` or ``needs_confirmation``; and the store's
status equals the model's.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from continuum.errors import EffectUncertain
from continuum.ledger.core import ActionLedger
from continuum.ledger.effect import Effect
from continuum.store import Run, SQLiteStorage
from continuum.types import Origin

RUN = "run_seam"
TYPE = "send"
KEYS = ("k0", "k1", "k2")
CONTRACTS = ("never", "reconcile", "idempotent", "safe")


class Refused(Exception):
    """Raised before the effect: certainly did not happen."""


class Broken(Exception):
    """Raised after the effect may have happened."""


@dataclass(frozen=True)
class Expected:
    status: str  # completed | failed | unknown (interrupted counts as unknown)
    contract: str
    result: Any = None
    unconfirmed: bool = False  # failed on an agent's word


class SeamMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory(prefix="effect-seam-")
        self.store = SQLiteStorage(Path(self.tmp.name) / "seam.db")
        self.store.create_run(Run(run_id=RUN))
        self.agents: list[subprocess.Popen[bytes]] = []
        self.ledger = self._new_owner()
        self.model: dict[str, Expected] = {}
        self.runs = dict.fromkeys(KEYS, 0)  # times the effect body ran (the world's truth)
        self.allowed = dict.fromkeys(KEYS, 0)  # times the model allowed it to run

    def _new_owner(self) -> ActionLedger:
        agent = subprocess.Popen(["sleep", "3600"])
        self.agents.append(agent)
        owner = {"host": socket.gethostname(), "pid": agent.pid, "start": None}
        return ActionLedger(self.store, owner=owner, cwd="/w")

    def teardown(self) -> None:
        self.store.close()
        for agent in self.agents:
            if agent.poll() is None:
                agent.kill()
            agent.wait()
        self.tmp.cleanup()

    def _effect(self, key: str, contract: str, origin: Origin) -> Effect:
        return Effect(
            self.ledger,
            RUN,
            TYPE,
            key=key,
            arguments={"key": key},
            replay=contract,
            certain_on=(Refused,),
            origin=origin,
        )

    def _may_run(self, key: str, contract: str) -> bool:
        rec = self.model.get(key)
        if rec is None or rec.status == "failed" and not rec.unconfirmed:
            return True
        if rec.status == "completed":
            return False
        return contract in ("safe", "idempotent")  # unknown, or an agent's unconfirmed failure

    def _uncertain_status(self, key: str, contract: str) -> str:
        rec = self.model[key]
        if rec.unconfirmed:
            return "needs_confirmation"
        return "reconcile_required" if contract == "reconcile" else "unknown"

    # -- calls -----------------------------------------------------------------------------

    @rule(
        key=st.sampled_from(KEYS),
        contract=st.sampled_from(CONTRACTS),
        outcome=st.sampled_from(["ok", "refused", "broken"]),
        form=st.sampled_from(["decorator", "arun", "with"]),
        origin=st.sampled_from([Origin.DETERMINISTIC, Origin.EXTERNAL_AGENT]),
    )
    def call(self, key: str, contract: str, outcome: str, form: str, origin: Origin) -> None:
        rec = self.model.get(key)
        contract = rec.contract if rec is not None else contract  # never widened here
        may_run = self._may_run(key, contract)
        fx = self._effect(key, contract, origin)

        def body() -> dict[str, Any]:
            self.runs[key] += 1
            if outcome == "refused":
                raise Refused(key)
            if outcome == "broken":
                raise Broken(key)
            return {"key": key, "n": self.runs[key]}

        async def abody() -> dict[str, Any]:
            return body()

        def invoke() -> Any:
            if form == "decorator":
                return fx(body)()
            if form == "arun":
                return asyncio.run(fx.arun(abody))
            with fx as scope:
                if not scope.replayed:
                    scope.record(body())
                return scope.result

        if may_run:
            self.allowed[key] += 1
            if outcome == "ok":
                result = invoke()
                assert result == {"key": key, "n": self.runs[key]}
                self.model[key] = Expected("completed", contract, result)
            else:
                with pytest.raises(Refused if outcome == "refused" else Broken):
                    invoke()
                certain = outcome == "refused"
                self.model[key] = Expected(
                    "failed" if certain else "unknown",
                    contract,
                    unconfirmed=certain and origin.self_certified,
                )
        elif rec is not None and rec.status == "completed":
            before = self.runs[key]
            assert invoke() == rec.result  # the recorded result, not a re-run
            assert self.runs[key] == before
        else:
            before = self.runs[key]
            with pytest.raises(EffectUncertain) as err:
                invoke()
            assert err.value.status == self._uncertain_status(key, contract)
            assert err.value.action_key == f"{TYPE}:{key}"
            assert err.value.command == f"continuum reconcile {RUN} {TYPE}:{key}"
            assert self.runs[key] == before

    @rule(key=st.sampled_from(KEYS), contract=st.sampled_from(CONTRACTS), effect_ran=st.booleans())
    def crash_between_intercept_and_complete(
        self, key: str, contract: str, effect_ran: bool
    ) -> None:
        rec = self.model.get(key)
        contract = rec.contract if rec is not None else contract
        if not self._may_run(key, contract):
            return  # the seam would not have started it (covered by ``call``)
        scope = self._effect(key, contract, Origin.DETERMINISTIC).begin(key, {"key": key})
        assert not scope.replayed
        self.allowed[key] += 1
        if effect_ran:
            self.runs[key] += 1
        self.agents[-1].kill()  # the owner dies before ``finish``: nothing more is written
        self.agents[-1].wait()
        self.ledger = self._new_owner()
        self.model[key] = Expected("unknown", contract)

    @rule(key=st.sampled_from(KEYS), occurred=st.booleans())
    def reconcile_as_trusted_code(self, key: str, occurred: bool) -> None:
        rec = self.model.get(key)
        if rec is None or not (rec.status == "unknown" or rec.unconfirmed):
            return
        self.ledger.reconcile(RUN, f"{TYPE}:{key}", occurred=occurred, origin=Origin.DETERMINISTIC)
        self.model[key] = replace(
            rec, status="completed" if occurred else "failed", result=None, unconfirmed=False
        )

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def store_matches_the_model(self) -> None:
        stored = {a.key: a for a in self.ledger.actions(RUN)}
        for key, rec in self.model.items():
            action = stored[key]
            status = str(action.status)
            if status == "started":
                status = "unknown"  # interrupted: its owner is gone
            assert status == rec.status, (key, status, rec)
            assert str(action.replay) == rec.contract

    @invariant()
    def no_effect_ran_more_often_than_allowed(self) -> None:
        for key in KEYS:
            assert self.runs[key] <= self.allowed[key], (key, self.runs, self.allowed)


def test_the_effect_seam_follows_the_ledger_model() -> None:
    run_state_machine_as_test(
        SeamMachine,
        settings=settings(
            max_examples=60,
            stateful_step_count=20,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )

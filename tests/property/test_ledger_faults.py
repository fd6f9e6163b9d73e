"""F12: the ledger state machine, with agents that die inside the ledger's transactions.

Extends the machine of ``test_ledger_machine.py`` (intercept, complete, fail, reconcile,
compensate, crash, a concurrent agent on another host) with steps that fork a real
agent process, arm one named fault point in it and let it call the ledger: it dies
there with ``os._exit``, before or after the COMMIT. The model then expects the call to
have happened entirely (died after the commit, by a process that is now gone) or not at
all (died before it). Every invariant of the base machine holds after every step: store
equal to the model, at most once per contract, chain and index verify.

The test prints its figure: examples x steps, and how many agents died where.
"""

from __future__ import annotations

import importlib
import os
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import rule, run_state_machine_as_test

import continuum.faults
from continuum.errors import ActionOwnedError, ContinuumError
from continuum.faults import FAULT_EXIT_CODE
from continuum.ledger.core import ActionLedger
from continuum.store import SQLiteStorage
from tests.property.test_ledger_machine import (
    ACTION_TYPE,
    KEYS,
    LEASE,
    REPLAYS,
    RUN,
    WIDTH,
    Expected,
    LedgerMachine,
)

STEPS = 30
REFUSED_EXIT = 3  # the call raised a ContinuumError (e.g. a widening, an invalid transition)
BROKEN_EXIT = 70
INTERCEPT_POINTS = ["before_append_commit", "after_append_commit", "after_intercept_commit"]
VERBS = ["complete", "fail", "reconcile"]
DEAD = ("dead", 0.0)

tally: Counter[str] = Counter()


class FaultyLedgerMachine(LedgerMachine):
    def __init__(self) -> None:
        super().__init__()
        tally["examples"] += 1

    def _alive(self, owner: tuple[str, float]) -> bool:
        return owner != DEAD and super()._alive(owner)

    def _die_inside(self, point: str, call: Any) -> int:
        """Fork an agent that runs ``call(ledger)`` with ``point`` armed; its exit code."""
        tally["forked"] += 1
        self.store.close()  # never carry an open SQLite connection across fork()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.environ["CONTINUUM_FAULTS"] = point
                importlib.reload(continuum.faults)
                store = SQLiteStorage(self.store.path, create=False)
                call(ActionLedger(store, clock=self._clock, lease_seconds=LEASE, cwd="/w"))
            except ContinuumError:
                code = REFUSED_EXIT
            except BaseException:
                code = BROKEN_EXIT
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        assert code in (FAULT_EXIT_CODE, REFUSED_EXIT), f"agent ended with {code}"
        if code == FAULT_EXIT_CODE:
            tally[f"died at {point}"] += 1
        return code

    @rule(
        key=st.sampled_from(KEYS),
        replay=st.sampled_from(REPLAYS),
        point=st.sampled_from(INTERCEPT_POINTS),
    )
    def agent_dies_inside_intercept(self, key: str, replay: str | None, point: str) -> None:
        rec = self.model.get(key)
        widening = rec is not None and replay is not None and WIDTH[replay] > WIDTH[rec.contract]
        code = self._die_inside(
            point,
            lambda ledger: ledger.intercept(RUN, ACTION_TYPE, {"key": key}, key=key, replay=replay),
        )
        if widening:
            assert code == REFUSED_EXIT
            return
        assert code == FAULT_EXIT_CODE
        if point == "before_append_commit":
            return  # died before the COMMIT: nothing happened
        # Died after the COMMIT: the intercept happened, for an agent that is now gone.
        contract = replay or (rec.contract if rec else "never")
        if rec is None:
            row = self.store.get_action(RUN, f"{ACTION_TYPE}:{key}")
            assert row is not None
            self.model[key] = Expected("started", contract, 1, DEAD, row.record["operation_key"])
            self.proceeds[key] += 1
        elif (
            rec.status in ("completed", "compensated")
            or (rec.status == "started" and self._alive(rec.owner))
            or (rec.unconfirmed and contract not in ("safe", "idempotent"))
        ):
            pass  # answered completed / compensated / in_progress / needs_confirmation: no write
        elif rec.status == "failed" or contract in ("safe", "idempotent"):
            self.model[key] = replace(
                rec, status="started", attempt=rec.attempt + 1, owner=DEAD, unconfirmed=False
            )
            self.proceeds[key] += 1
        else:
            self.model[key] = replace(rec, status="unknown")

    @rule(
        key=st.sampled_from(KEYS),
        verb=st.sampled_from(VERBS),
        before=st.booleans(),
        flag=st.booleans(),
    )
    def agent_dies_inside_a_transition(self, key: str, verb: str, before: bool, flag: bool) -> None:
        rec = self.model.get(key)
        ref = f"{ACTION_TYPE}:{key}"
        point = "before_append_commit" if before else f"after_{verb}_commit"
        calls = {
            "complete": lambda ledger: ledger.complete(RUN, ref, external_id=f"ext-{key}"),
            "fail": lambda ledger: ledger.fail(RUN, ref, certain=flag),
            "reconcile": lambda ledger: ledger.reconcile(RUN, ref, occurred=flag),
        }
        allowed = {
            "complete": {"started"},
            "fail": {"started", "unknown"} if flag else {"started"},
            "reconcile": {"started", "unknown"},
        }[verb]
        new_status = {
            "complete": "completed",
            "fail": "failed" if flag else "unknown",
            "reconcile": "completed" if flag else "failed",
        }[verb]
        code = self._die_inside(point, calls[verb])
        settles_unconfirmed = verb == "reconcile" and rec is not None and rec.unconfirmed
        if (
            rec is None
            or (rec.status not in allowed and not settles_unconfirmed)
            or (rec.status == "started" and self._alive(rec.owner))
        ):
            # Refused: not there, not in a state it may leave that way, or a live owner's
            # (the forked agent never owns a live action: only the owner may settle it).
            assert code == REFUSED_EXIT
            return
        assert code == FAULT_EXIT_CODE
        if not before:  # the forked agent is trusted code: its word settles it
            self.model[key] = replace(rec, status=new_status, unconfirmed=False)
            if new_status == "failed":
                self.certain_failures[key] += 1


FaultyLedgerMachine.TestCase.settings = settings(stateful_step_count=STEPS, deadline=None)


def test_the_ledger_keeps_to_its_model_when_agents_die_inside_its_transactions() -> None:
    tally.clear()
    run_state_machine_as_test(
        FaultyLedgerMachine, settings=settings(stateful_step_count=STEPS, deadline=None)
    )
    deaths = sum(n for k, n in tally.items() if k.startswith("died at"))
    print(
        f"F12: {tally['examples']} examples x up to {STEPS} steps, 0 failures "
        f"({tally['forked']} agent processes forked into the ledger, {deaths} died at a fault "
        f"point: "
        + ", ".join(f"{k[8:]} {n}" for k, n in sorted(tally.items()) if k.startswith("died at"))
        + ")"
    )
    assert deaths > 0


def test_the_faulty_machine_catches_a_ledger_that_thinks_dead_agents_are_alive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An action whose agent died stays "in progress" forever instead of becoming unknown.
    monkeypatch.setattr("continuum.ledger.core.owner_alive", lambda *args: True)
    # Caught as a wrong answer, or as a refusal (owner_alive) where the model expects none.
    with pytest.raises((AssertionError, ActionOwnedError)):
        run_state_machine_as_test(
            FaultyLedgerMachine,
            settings=settings(
                max_examples=200,
                stateful_step_count=STEPS,
                deadline=None,
                database=None,
                phases=[Phase.generate],
                report_multiple_bugs=False,
                suppress_health_check=list(HealthCheck),
            ),
        )
    print("F12-neg: the machine caught a ledger that takes dead agents for live ones")

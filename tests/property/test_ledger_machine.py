"""F12: the action ledger as a state machine, against a small in-Python model (contract §6).

The agent runs as a real process (a ``sleep`` child stands in for it, so the ledger's
same-host liveness check sees a real pid); ``crash`` kills it and starts a new one, so
actions it had started become interrupted. A second ledger plays a concurrent agent on
another host, whose liveness is its lease on a shared fake clock; ``expire_remote_leases``
moves the clock past it.

Transitions are made as trusted code or as an agent (``external_agent``): an agent's word
that an action did not happen is recorded but does not let it run again until trusted
code or a person confirms it, and only the live owner of a started action may settle it.

Invariants after every step: the store's status, attempt and contract equal the model's
for every key; the chain and the index verify; and no key ever proceeded more often than
its contract allows ("at most once", counted from the answers actually given).
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from continuum.errors import (
    ActionOwnedError,
    InvalidTransitionError,
    NotFoundError,
    ReplayWideningError,
)
from continuum.ledger.core import ActionLedger
from continuum.ledger.owners import owner_alive
from continuum.runtime.facade import Continuum
from continuum.store import ActionRow, Run, SQLiteStorage
from continuum.types import Origin

RUN = "run_machine"
ACTION_TYPE = "send"
KEYS = ["k0", "k1", "k2"]
REPLAYS = [None, "never", "reconcile", "idempotent", "safe"]
WIDTH = {"never": 0, "reconcile": 1, "idempotent": 2, "safe": 3}
LEASE = 30.0
REMOTE_OWNER = {"host": f"{socket.gethostname()}-remote", "pid": 7, "start": None}

keys = st.sampled_from(KEYS)
replays = st.sampled_from(REPLAYS)
origins = st.sampled_from([Origin.DETERMINISTIC, Origin.EXTERNAL_AGENT])


@dataclass(frozen=True)
class Expected:
    status: str  # started | completed | failed | unknown | compensated
    contract: str
    attempt: int
    owner: tuple[str, float]  # ("local", incarnation) or ("remote", lease expiry)
    operation_key: str
    unconfirmed: bool = False  # failed on an agent's word: may not run again yet


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory(prefix="ledger-machine-")
        self.store = SQLiteStorage(Path(self.tmp.name) / "machine.db")
        self.store.create_run(Run(run_id=RUN))
        self.now = 1_000.0
        self.agents: list[subprocess.Popen[bytes]] = []
        self.dead: set[int] = set()
        self.local = self._start_agent()
        self.remote = ActionLedger(
            self.store, owner=REMOTE_OWNER, clock=self._clock, lease_seconds=LEASE, cwd="/w"
        )
        self.model: dict[str, Expected] = {}
        self.proceeds = dict.fromkeys(KEYS, 0)
        self.certain_failures = dict.fromkeys(KEYS, 0)

    # -- harness -----------------------------------------------------------------------------

    def _clock(self) -> float:
        return self.now

    def _start_agent(self) -> ActionLedger:
        agent = subprocess.Popen(["sleep", "3600"])
        self.agents.append(agent)
        owner = {"host": socket.gethostname(), "pid": agent.pid, "start": None}
        return ActionLedger(
            self.store, owner=owner, clock=self._clock, lease_seconds=LEASE, cwd="/w"
        )

    @property
    def incarnation(self) -> int:
        return len(self.agents) - 1

    def _alive(self, owner: tuple[str, float]) -> bool:
        kind, ref = owner
        if kind == "local":
            return int(ref) not in self.dead
        return ref > self.now

    def teardown(self) -> None:
        self.store.close()
        for agent in self.agents:
            if agent.poll() is None:
                agent.kill()
            agent.wait()
        self.tmp.cleanup()

    # -- intercepts ------------------------------------------------------------------------------

    def _intercept(
        self, ledger: ActionLedger, owner: tuple[str, float], key: str, replay: str | None
    ) -> None:
        rec = self.model.get(key)
        if rec is not None and replay is not None and WIDTH[replay] > WIDTH[rec.contract]:
            before = self.store.get_run(RUN).head_sequence
            with pytest.raises(ReplayWideningError):
                ledger.intercept(RUN, ACTION_TYPE, {"key": key}, key=key, replay=replay)
            assert self.store.get_run(RUN).head_sequence == before
            return

        r = ledger.intercept(RUN, ACTION_TYPE, {"key": key}, key=key, replay=replay)
        event(f"intercept answered {r.status} (attempt {min(r.attempt, 3)})")

        if r.proceed:
            self.proceeds[key] += 1
            # At most once: never while a live owner performs it, never once it is done.
            assert rec is None or rec.status not in ("completed", "compensated")
            assert rec is None or not (rec.status == "started" and self._alive(rec.owner))
        if rec is None:
            assert (r.proceed, r.status, r.attempt) == (True, "started", 1)
            assert r.operation_key is not None
            self.model[key] = Expected("started", replay or "never", 1, owner, r.operation_key)
            return
        contract = replay or rec.contract
        if rec.status in ("completed", "compensated"):
            assert (r.proceed, r.status) == (False, rec.status)
        elif rec.status == "started" and self._alive(rec.owner):
            assert (r.proceed, r.status) == (False, "in_progress")
        elif rec.unconfirmed and contract not in ("safe", "idempotent"):
            assert (r.proceed, r.status) == (False, "needs_confirmation")
        elif rec.status == "failed" or contract in ("safe", "idempotent"):
            assert (r.proceed, r.status, r.attempt) == (True, "started", rec.attempt + 1)
            if contract == "idempotent":
                assert r.operation_key == rec.operation_key
            self.model[key] = replace(
                rec, status="started", attempt=rec.attempt + 1, owner=owner, unconfirmed=False
            )
        else:
            expected = "reconcile_required" if contract == "reconcile" else "unknown"
            assert (r.proceed, r.status, r.action_key) == (False, expected, f"{ACTION_TYPE}:{key}")
            self.model[key] = replace(rec, status="unknown")

    @rule(key=keys, replay=replays)
    def intercept(self, key: str, replay: str | None) -> None:
        self._intercept(self.local, ("local", self.incarnation), key, replay)

    @rule(key=keys, replay=replays)
    def concurrent_intercept(self, key: str, replay: str | None) -> None:
        self._intercept(self.remote, ("remote", self.now + LEASE), key, replay)

    # -- transitions ------------------------------------------------------------------------------

    def _transition(
        self,
        key: str,
        allowed: set[str],
        new_status: str,
        call: Any,
        *,
        unconfirmed: bool = False,
        settles_unconfirmed: bool = False,
    ) -> bool:
        rec = self.model.get(key)
        if rec is None:
            with pytest.raises(NotFoundError):
                call()
            return False
        if rec.status not in allowed and not (settles_unconfirmed and rec.unconfirmed):
            with pytest.raises(InvalidTransitionError):
                call()
            return False
        if (
            rec.status == "started"
            and self._alive(rec.owner)
            and rec.owner != ("local", self.incarnation)
        ):
            with pytest.raises(ActionOwnedError):  # only the live owner may settle it
                call()
            return False
        assert str(call().status) == new_status
        self.model[key] = replace(
            rec, status=new_status, unconfirmed=unconfirmed and new_status == "failed"
        )
        return True

    @rule(key=keys)
    def complete(self, key: str) -> None:
        self._transition(
            key,
            {"started"},
            "completed",
            lambda: self.local.complete(
                RUN, f"{ACTION_TYPE}:{key}", external_id=f"ext-{key}", result={"ok": True}
            ),
        )

    @rule(key=keys, certain=st.booleans(), origin=origins)
    def fail(self, key: str, certain: bool, origin: Origin) -> None:
        allowed = {"started", "unknown"} if certain else {"started"}
        agent = origin == Origin.EXTERNAL_AGENT
        done = self._transition(
            key,
            allowed,
            "failed" if certain else "unknown",
            lambda: self.local.fail(RUN, f"{ACTION_TYPE}:{key}", certain=certain, origin=origin),
            unconfirmed=agent,
        )
        if done and certain and not agent:
            self.certain_failures[key] += 1

    @rule(key=keys, occurred=st.booleans(), origin=origins)
    def reconcile(self, key: str, occurred: bool, origin: Origin) -> None:
        agent = origin == Origin.EXTERNAL_AGENT
        done = self._transition(
            key,
            {"started", "unknown"},
            "completed" if occurred else "failed",
            lambda: self.local.reconcile(
                RUN, f"{ACTION_TYPE}:{key}", occurred=occurred, origin=origin
            ),
            unconfirmed=agent,
            settles_unconfirmed=True,
        )
        if done and not occurred and not agent:
            self.certain_failures[key] += 1

    @rule(key=keys)
    def compensate(self, key: str) -> None:
        self._transition(
            key,
            {"completed"},
            "compensated",
            lambda: self.local.compensate(RUN, f"{ACTION_TYPE}:{key}"),
        )

    # -- faults ----------------------------------------------------------------------------------

    @rule()
    def crash(self) -> None:
        """The agent process dies; a fresh one takes over with a new ledger."""
        agent = self.agents[-1]
        agent.kill()
        agent.wait()  # reaped: a zombie would still answer kill(pid, 0)
        self.dead.add(self.incarnation)
        self.local = self._start_agent()

    @rule()
    def expire_remote_leases(self) -> None:
        self.now += LEASE + 1

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def store_matches_model(self) -> None:
        for key in KEYS:
            row = self.store.get_action(RUN, f"{ACTION_TYPE}:{key}")
            rec = self.model.get(key)
            if rec is None:
                assert row is None
                continue
            assert row is not None
            got = (
                row.record["status"],
                row.record["attempt"],
                row.record["replay"],
                row.record["status"] == "failed" and row.record["settled_by"] == "external_agent",
            )
            assert got == (rec.status, rec.attempt, rec.contract, rec.unconfirmed)

    @invariant()
    def at_most_once(self) -> None:
        for key, rec in self.model.items():
            if rec.contract in ("never", "reconcile"):
                assert self.proceeds[key] <= 1 + self.certain_failures[key]

    @invariant()
    def log_and_index_verify(self) -> None:
        report = Continuum(self.store).verify(RUN)
        assert report.ok, report.violations


# max_examples comes from the loaded profile (tests/conftest.py): 100, or more when thorough.
LedgerMachine.TestCase.settings = settings(stateful_step_count=30, deadline=None)
TestLedgerMachine = LedgerMachine.TestCase


# -- negative controls: the same machine must catch a broken ledger ------------------------------


def _ignore_live_owners(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every started action looks interrupted: a concurrent caller poisons an effect in flight.
    monkeypatch.setattr("continuum.ledger.core.owner_alive", lambda *args: False)


def _retry_interrupted_actions(monkeypatch: pytest.MonkeyPatch) -> None:
    # Recovery that takes an interrupted action for a failed one and runs it again (F1-neg).
    decide = ActionLedger._decide

    def broken(
        self: ActionLedger,
        tx: Any,
        row: ActionRow,
        requested: Any,
        origin: Any,
        now: float,
        matched: str,
        *rest: Any,
    ) -> Any:
        rec = row.record
        if rec["status"] == "unknown" or (
            rec["status"] == "started" and not owner_alive(rec["owner"], row.lease_expires, now)
        ):
            row = row._replace(record={**rec, "status": "failed"})
        return decide(self, tx, row, requested, origin, now, matched, *rest)

    monkeypatch.setattr(ActionLedger, "_decide", broken)


@pytest.mark.parametrize("breakage", [_ignore_live_owners, _retry_interrupted_actions])
def test_the_machine_catches_a_broken_ledger(
    monkeypatch: pytest.MonkeyPatch, breakage: Any
) -> None:
    breakage(monkeypatch)
    # Caught as a failed assertion, or as a refusal the model expected and did not get.
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        run_state_machine_as_test(
            LedgerMachine,
            settings=settings(
                max_examples=200,
                stateful_step_count=30,
                deadline=None,
                database=None,
                phases=[Phase.generate],
                report_multiple_bugs=False,
                suppress_health_check=list(HealthCheck),
            ),
        )

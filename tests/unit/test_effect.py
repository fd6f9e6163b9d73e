"""The effect seam's contract, case by case (the property test covers the sequences)."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest

from continuum import Continuum, EffectUncertain
from continuum.errors import LedgerError, UsageError
from continuum.ledger.effect import UNRECORDED, current_effect
from continuum.types import Origin

RUN = "r1"


@pytest.fixture
def cx(tmp_path: Path) -> Any:
    c = Continuum.open(str(tmp_path / "a.db"))
    c.start_run(RUN)
    yield c
    c.close()


def test_a_completed_effect_returns_its_recorded_result_without_running(cx: Continuum) -> None:
    calls: list[str] = []

    @cx.effect(RUN, "send", key=lambda invoice, amount: invoice)
    def send(invoice: str, amount: int) -> dict[str, Any]:
        calls.append(invoice)
        return {"sent": invoice, "amount": amount}

    assert send("INV-1", 3) == {"sent": "INV-1", "amount": 3}
    assert send("INV-1", 3) == {"sent": "INV-1", "amount": 3}
    assert calls == ["INV-1"]
    (action,) = cx.actions(RUN)
    assert action.arguments == {"invoice": "INV-1", "amount": 3}  # the bound arguments
    assert action.action_key == "send:INV-1"
    assert action.origin == action.settled_by == Origin.DETERMINISTIC


def test_an_async_effect_is_performed_once(cx: Continuum) -> None:
    calls: list[str] = []

    @cx.effect(RUN, "send")
    async def send(invoice: str) -> str:
        calls.append(invoice)
        return invoice

    assert asyncio.run(send("a")) == "a" and asyncio.run(send("a")) == "a"
    assert asyncio.run(send("b")) == "b"
    assert calls == ["a", "b"]  # without a key, the identity is the arguments


def test_an_uncertain_exception_records_unknown_and_the_next_call_raises(cx: Continuum) -> None:
    @cx.effect(RUN, "send", key="INV-1")
    def send() -> None:
        raise TimeoutError("no answer from the mail server")

    with pytest.raises(TimeoutError):
        send()
    with pytest.raises(EffectUncertain) as err:
        send()
    e = err.value
    assert (e.code, e.status, e.action_key) == ("ledger.effect_uncertain", "unknown", "send:INV-1")
    assert e.command == f"continuum reconcile {RUN} send:INV-1"
    assert e.command in e.hint and e.to_dict()["details"]["action_id"] == e.action_id


def test_a_certain_exception_lets_the_next_call_run(cx: Continuum) -> None:
    attempts: list[int] = []

    @cx.effect(RUN, "send", key="INV-1", certain_on=(ValueError,))
    def send() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise ValueError("refused before sending")
        return "ok"

    with pytest.raises(ValueError):
        send()
    assert send() == "ok" and len(attempts) == 2


def test_reconcile_required_and_needs_confirmation_raise_effect_uncertain(cx: Continuum) -> None:
    def boom() -> None:
        raise RuntimeError("lost")

    with pytest.raises(RuntimeError):
        cx.effect(RUN, "a", key="1", replay="reconcile").run(boom)
    with pytest.raises(EffectUncertain) as err:
        cx.effect(RUN, "a", key="1").run(boom)
    assert err.value.status == "reconcile_required"

    agent = Continuum(cx.store, origin=Origin.EXTERNAL_AGENT)
    with pytest.raises(ValueError):
        agent.effect(RUN, "b", key="1", certain_on=(ValueError,)).run(
            lambda: (_ for _ in ()).throw(ValueError("not done, says the agent"))
        )
    with pytest.raises(EffectUncertain) as err:
        cx.effect(RUN, "b", key="1").run(boom)
    assert err.value.status == "needs_confirmation"


def test_an_effect_in_progress_elsewhere_is_refused_with_its_own_code(
    cx: Continuum, tmp_path: Path
) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        other = Continuum(
            cx.store,
            owner={"host": __import__("socket").gethostname(), "pid": sleeper.pid, "start": None},
        )
        other.intercept(RUN, "send", {"k": 1}, key="INV-9")
        with pytest.raises(LedgerError) as err:
            cx.effect(RUN, "send", key="INV-9").run(lambda: None)
        assert err.value.code == "ledger.effect_in_progress"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_result_that_is_not_json_is_recorded_completed_and_never_run_again(cx: Continuum) -> None:
    calls: list[int] = []

    @cx.effect(RUN, "make", key="x")
    def make() -> object:
        calls.append(1)
        return object()

    with pytest.raises(UsageError) as err:
        make()
    assert err.value.code == "usage.effect_result_not_json"
    (action,) = cx.actions(RUN)
    assert str(action.status) == "completed" and action.result == {UNRECORDED: "object"}
    with pytest.raises(UsageError) as err:
        make()
    assert err.value.code == "usage.effect_result_unrecorded" and calls == [1]


def test_encode_and_decode_carry_a_result_that_is_not_json(cx: Continuum) -> None:
    fx = cx.effect(RUN, "make", key="y", encode=sorted, decode=frozenset)
    assert fx.run(lambda: frozenset({"b", "a"})) == frozenset({"a", "b"})
    assert fx.run(lambda: frozenset()) == frozenset({"a", "b"})  # the recorded one
    assert cx.actions(RUN)[0].result == ["a", "b"]


def test_arguments_that_are_not_json_are_refused_before_anything_is_written(cx: Continuum) -> None:
    with pytest.raises(UsageError) as err:
        cx.effect(RUN, "send")(lambda when: when)(object())
    assert err.value.code == "usage.effect_arguments" and cx.actions(RUN) == []
    assert (
        cx.effect(RUN, "send", arguments=lambda when: {"when": "now"})(lambda when: 1)(object())
        == 1
    )


def test_the_with_form_records_what_the_block_says_and_replays_it(cx: Continuum) -> None:
    with cx.effect(RUN, "mail", key="m1") as scope:
        assert not scope.replayed and current_effect() is scope
        assert scope.operation_key is not None
        scope.record({"id": "msg-1"}, external_id="msg-1")
    assert current_effect() is None
    with cx.effect(RUN, "mail", key="m1") as scope:
        assert scope.replayed and scope.result == {"id": "msg-1"}
        assert scope.external_id == "msg-1"
        with pytest.raises(UsageError):
            scope.record({"id": "msg-2"})
    with pytest.raises(UsageError), cx.effect(RUN, "mail", key=lambda: "k"):
        pass


def test_an_idempotent_effect_reruns_with_the_same_operation_key(cx: Continuum) -> None:
    seen: list[str | None] = []

    def send() -> str:
        scope = current_effect()
        assert scope is not None
        seen.append(scope.operation_key)
        if len(seen) == 1:
            raise ConnectionError("reset")
        return "ok"

    fx = cx.effect(RUN, "pay", key="p1", replay="idempotent")
    with pytest.raises(ConnectionError):
        fx.run(send)
    assert fx.run(send) == "ok"
    assert seen[0] == seen[1] is not None


def test_certain_on_must_be_exception_types(cx: Continuum) -> None:
    with pytest.raises(UsageError) as err:
        cx.effect(RUN, "x", certain_on=ValueError)  # type: ignore[arg-type]
    assert err.value.code == "usage.bad_certain_on"

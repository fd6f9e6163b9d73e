"""What each adapter keeps from its framework and what it adds, in one process (the crash
behaviour is test_crash_matrix.py's)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from continuum import Continuum, EffectUncertain, Origin
from continuum.adapters.common import schema_versions
from tests.adapters.conftest import require

RUN = "r1"


@pytest.fixture
def cx(tmp_path: Path) -> Any:
    c = Continuum.open(str(tmp_path / "a.db"))
    c.start_run(RUN)
    yield c
    c.close()


def test_a_guarded_langgraph_node_returns_its_recorded_update_when_rerun(cx: Continuum) -> None:
    require("langgraph")
    from continuum.adapters.langgraph import guard_node

    charged: list[str] = []

    def charge(state: dict[str, Any]) -> dict[str, Any]:
        charged.append(state["order"])
        return {"receipt": f"r-{state['order']}"}

    node = guard_node(charge, cx, RUN, key=lambda s: s["order"])
    assert node({"order": "o1"}) == node({"order": "o1"}) == {"receipt": "r-o1"}
    assert charged == ["o1"]

    async def acharge(state: dict[str, Any]) -> dict[str, Any]:
        raise ConnectionError("reset")

    anode = guard_node(acharge, cx, RUN, action_type="acharge", key=lambda s: s["order"])
    with pytest.raises(ConnectionError):
        asyncio.run(anode({"order": "o2"}))
    with pytest.raises(EffectUncertain):
        asyncio.run(anode({"order": "o2"}))


def test_the_continuum_checkpointer_rebuilds_a_graph_from_the_log(cx: Continuum) -> None:
    require("langgraph")
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    from continuum.adapters.langgraph import CHECKPOINT_EVENTS, ContinuumCheckpointer

    class S(TypedDict):
        n: int

    def build(saver: Any) -> Any:
        g = StateGraph(S)
        g.add_node("inc", lambda s: {"n": s["n"] + 1})
        g.add_edge(START, "inc")
        g.add_edge("inc", END)
        return g.compile(checkpointer=saver)

    config: Any = {"configurable": {"thread_id": "t"}}
    assert build(ContinuumCheckpointer(cx, RUN)).invoke({"n": 1}, config) == {"n": 2}
    logged = [e for e in cx.events(RUN) if e.type in CHECKPOINT_EVENTS]
    assert logged and {e.source for e in logged} == {Origin.DETERMINISTIC}
    again = build(ContinuumCheckpointer(cx, RUN))
    assert again.get_state(config).values == {"n": 2}
    assert asyncio.run(again.ainvoke({"n": 5}, config)) == {"n": 6}  # async path, same log
    assert build(ContinuumCheckpointer(cx, RUN)).get_state(config).values == {"n": 6}
    assert cx.verify(RUN).ok


def _json_schema(schema: object) -> dict[str, Any]:
    """A tool's call schema as JSON Schema; it must be a pydantic (v2) model class."""
    assert isinstance(schema, type) and issubclass(schema, BaseModel), schema
    return schema.model_json_schema()


def test_a_langchain_tool_keeps_its_schema_and_runs_once_sync_and_async(cx: Continuum) -> None:
    require("langchain")
    from langchain_core.tools import tool

    from continuum.adapters.langchain import guard_tool

    sent: list[str] = []

    @tool
    def send(invoice_id: str, amount: float = 1.0) -> str:
        """Send an invoice."""
        sent.append(invoice_id)
        return f"sent {invoice_id}"

    guarded = guard_tool(send, cx, RUN)  # no key: the identity is the arguments
    assert (guarded.name, guarded.description) == (send.name, send.description)
    assert _json_schema(guarded.tool_call_schema) == _json_schema(send.tool_call_schema)
    call = {"name": "send", "args": {"invoice_id": "A"}, "id": "c1", "type": "tool_call"}
    first = guarded.invoke(call)
    second = asyncio.run(guarded.ainvoke({**call, "id": "c2"}))
    assert first.content == second.content == "sent A" and sent == ["A"]
    (action,) = cx.actions(RUN)
    assert action.arguments == {"invoice_id": "A", "amount": 1.0}
    # the tool's input schema is pinned with the call (issue 24: version pinning)
    assert action.versions == schema_versions(send.args)
    assert str((action.versions or {}).get("tool_schema_hash")).startswith("sha256:")


def test_the_openai_agents_hooks_record_the_answer_as_an_agents_claim(cx: Continuum) -> None:
    require("openai-agents")
    from agents import Agent

    from continuum.adapters.openai_agents import ContinuumRunHooks

    asyncio.run(ContinuumRunHooks(cx, RUN).on_agent_end(None, Agent(name="a"), "I sent it."))
    (finding,) = cx.state(RUN).findings.values()
    assert finding.provenance.origin == Origin.EXTERNAL_AGENT
    assert cx.resume(RUN).mode == "request_human"  # self-certified: a person must look


def test_a_pydantic_ai_toolset_guards_only_the_tools_it_is_told_to(cx: Continuum) -> None:
    require("pydantic-ai")
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.toolsets import FunctionToolset

    from continuum.adapters.pydantic_ai import ContinuumToolset

    def lookup(name: str) -> str:
        return name

    def send(name: str) -> str:
        return name

    tools = ContinuumToolset(FunctionToolset([lookup, send]), cx=cx, run_id=RUN, only=["send"])
    asyncio.run(Agent(TestModel(), toolsets=[tools]).run("go"))  # run_sync leaves a loop open
    assert [a.action_type for a in cx.actions(RUN)] == ["send"]
    [action] = cx.actions(RUN)  # pinned to the JSON schema pydantic-ai gave the model
    assert str((action.versions or {}).get("tool_schema_hash")).startswith("sha256:")


def test_a_tool_whose_schema_changed_is_not_replayed_after_a_crash(cx: Continuum) -> None:
    """The seam all adapters share: an interrupted safe effect, met again by a tool with
    another input schema, raises EffectUncertain (version_drift) instead of running."""
    from continuum.ledger.core import ActionLedger
    from continuum.ledger.effect import Effect

    gone = ActionLedger(cx.store, owner=_dead_owner())
    old = Effect(gone, RUN, "fetch", replay="safe", versions=schema_versions({"a": "str"}))
    old.begin("page-1", {"u": 1})  # intercepted, then its process died
    new = Effect(cx.ledger, RUN, "fetch", replay="safe", versions=schema_versions({"b": "int"}))
    with pytest.raises(EffectUncertain) as caught:
        new.begin("page-1", {"u": 1})
    assert caught.value.status == "version_drift"
    same = Effect(cx.ledger, RUN, "fetch", replay="safe", versions=schema_versions({"a": "str"}))
    assert same.begin("page-1", {"u": 1}).replayed is False  # control: same schema re-runs


def _dead_owner() -> dict[str, Any]:
    import socket
    import subprocess

    proc = subprocess.Popen(["true"])
    proc.wait()
    return {"host": socket.gethostname(), "pid": proc.pid, "start": None}


def test_adapters_carry_cost_and_stop_at_the_budget_of_the_run_and_its_parent(
    cx: Continuum,
) -> None:
    """Issue 25, item 6: a tool's estimate is recorded and judged against the budget of
    the run and of its parent, through each adapter; at the edge the tool does not run.
    (Before this, the adapters' effects were not judged against any budget at all.)"""
    from continuum.errors import LedgerError

    cx.set_budget(RUN, usd="0.05")
    cx.start_run("child", "a part", parent=RUN)
    ran: list[str] = []

    def attempt(call: Any) -> str:
        try:
            call()
            return "ran"
        except LedgerError as e:
            assert e.code == "ledger.effect_budget_exceeded", e.code
            return "refused"

    outcomes: list[str] = []
    require("langchain")
    from langchain_core.tools import tool

    from continuum.adapters.langchain import guard_tool

    @tool
    def ask(q: str) -> str:
        """Ask a model."""
        ran.append(q)
        return q

    guarded = guard_tool(ask, cx, "child", cost=lambda args: {"usd": "0.02"})
    for q in ("a", "b", "c"):  # 0.02 + 0.02 fit under 0.05; the third would pass it
        outcomes.append(attempt(lambda q=q: guarded.invoke({"q": q})))
    assert outcomes == ["ran", "ran", "refused"] and ran == ["a", "b"]
    usage = {a.action_key: a.usage for a in cx.actions("child")}
    assert [(u or [{}])[0].get("estimate") for u in usage.values()] == [{"usd_micros": 20_000}] * 2

    require("langgraph")
    from continuum.adapters.langgraph import guard_node

    def node(state: dict[str, Any]) -> dict[str, Any]:
        ran.append("node")
        return {"n": 1}

    guarded_node = guard_node(node, cx, "child", key=lambda s: "n1", cost={"usd": "0.02"})
    assert attempt(lambda: guarded_node({"x": 1})) == "refused" and "node" not in ran

    # cx.effect: the estimate at intercept and the actual from the result
    cx.start_run("tokens", "count tokens")
    cx.set_budget("tokens", tokens=100)

    @cx.effect(
        "tokens",
        "llm",
        key=lambda n: f"t{n}",
        cost=lambda n: {"tokens": 41},
        actual_cost=lambda result: {"tokens": result},
    )
    def spend(n: int) -> int:
        return n

    assert [spend(10), spend(20), spend(30)] == [10, 20, 30]  # actuals 10 + 20 + 30 = 60
    assert attempt(lambda: spend(99)) == "refused"  # 60 + an estimate of 41 would pass 100
    assert cx.usage("tokens")["spent"]["tokens"] == 60

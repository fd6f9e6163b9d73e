"""LangGraph with continuum's adapter: tools and checkpoints through one hash-chained log.

    .venv/bin/python examples/langgraph_adapter.py      (needs continuum-recovery[langgraph])

A LangGraph agent (a hand-built graph: model node, ``ToolNode``) is driven by LangChain's
offline ``GenericFakeChatModel``: no network, no key. Its ``send_invoice`` tool is
guarded (``guard_tools``) and its checkpointer is ``ContinuumCheckpointer``, so the
graph's checkpoints and the ledger's actions are events of the same continuum run. The
model asks for INV-1 twice: the second call gets the recorded result, not a second
invoice. Then the mail server times out on INV-3: continuum cannot know whether it went
out, records it ``unknown``, and the next attempt raises ``EffectUncertain`` (with the
reconcile command) instead of sending again. The program looks in the outbox and
reconciles. A real SIGKILL at every point: ``continuum benchmark --frameworks``.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from continuum import Continuum, EffectUncertain
from continuum.adapters.langgraph import ContinuumCheckpointer, guard_tools

RUN = "billing"
claims: list[tuple[str, bool]] = []


def claim(text: str, ok: bool) -> None:
    claims.append((text, ok))
    print(f"{'ok' if ok else 'FAILED'}  {text}", flush=True)


class FakeModel(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self  # the fake model's answers are scripted; the tools are already known


def calls(*invoices: str) -> list[AIMessage]:
    return [AIMessage(content="", tool_calls=[{"name": "send_invoice", "id": f"c{i}-{inv}",
                                               "args": {"invoice_id": inv}}])
            for i, inv in enumerate(invoices)] + [AIMessage(content="All invoices sent.")]


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="langgraph-adapter-"))
    outbox = work / "outbox"
    outbox.mkdir()
    timeouts = {"INV-3"}

    @tool
    def send_invoice(invoice_id: str) -> str:
        """Send one invoice."""
        with (outbox / f"{invoice_id}.txt").open("a") as f:
            f.write("sent\n")
        if invoice_id in timeouts:
            timeouts.discard(invoice_id)
            raise TimeoutError("the mail server did not answer")  # sent, or not?
        return f"sent {invoice_id}"

    cx = Continuum.open(str(work / "continuum.db"))
    cx.start_run(RUN, "send the invoices")
    tools = guard_tools([send_invoice], cx, RUN, keys={"send_invoice": lambda a: a["invoice_id"]})

    def build(model: Any, saver: Any) -> Any:
        g = StateGraph(MessagesState)
        g.add_node("agent", lambda s: {"messages": [model.invoke(s["messages"])]})
        g.add_node("tools", ToolNode(tools))
        g.add_edge(START, "agent")
        g.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
        g.add_edge("tools", "agent")
        return g.compile(checkpointer=saver)

    config: Any = {"configurable": {"thread_id": "t1"}}
    graph = build(FakeModel(messages=iter(calls("INV-1", "INV-2", "INV-1"))),
                  ContinuumCheckpointer(cx, RUN))
    out = graph.invoke({"messages": [HumanMessage("Send INV-1 and INV-2.")]}, config)
    lines = {p.stem: len(p.read_text().splitlines()) for p in outbox.iterdir()}
    claim("the model asked for INV-1 twice; it was sent once (the recorded result came back)",
          lines == {"INV-1": 1, "INV-2": 1})
    claim("the agent finished", out["messages"][-1].content == "All invoices sent.")

    types = [e.type for e in cx.events(RUN)]
    claim(f"the graph's checkpoints are events of the run ({types.count('langgraph_checkpoint_saved')}"
          " checkpoints next to the ledger's actions); the chain verifies",
          "langgraph_checkpoint_saved" in types and "action_completed" in types
          and cx.verify(RUN).ok)
    again = build(FakeModel(messages=iter([])), ContinuumCheckpointer(cx, RUN))
    claim("a new checkpointer rebuilt from the log sees the same conversation",
          len(again.get_state(config).values["messages"]) == len(out["messages"]))

    graph = build(FakeModel(messages=iter(calls("INV-3"))), ContinuumCheckpointer(cx, RUN))
    config = {"configurable": {"thread_id": "t2"}}
    with contextlib.suppress(TimeoutError):
        graph.invoke({"messages": [HumanMessage("Send INV-3.")]}, config)
    try:
        build(FakeModel(messages=iter(calls("INV-3"))), ContinuumCheckpointer(cx, RUN)).invoke(
            {"messages": [HumanMessage("Send INV-3 again.")]}, {"configurable": {"thread_id": "t3"}})
        uncertain = None
    except EffectUncertain as e:
        uncertain = e
    claim("after the timeout, asking again raised EffectUncertain instead of sending again",
          uncertain is not None and uncertain.status == "unknown"
          and len((outbox / "INV-3.txt").read_text().splitlines()) == 1)
    if uncertain is not None:
        print(f"    to settle it: {uncertain.command} --occurred|--not-occurred")
        happened = (outbox / "INV-3.txt").exists()  # the program checks the external system
        cx.reconcile(RUN, uncertain.action_id, occurred=happened, note="found in the outbox")
    claim("reconciled from the outbox: INV-3 is recorded as sent, once",
          {a.key: str(a.status) for a in cx.actions(RUN)}.get("INV-3") == "completed")

    held = sum(ok for _, ok in claims)
    print(f"\n{held}/{len(claims)} claims held")
    return 0 if held == len(claims) else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""LangChain with continuum's adapter: a ``@tool`` that sends each invoice at most once.

    .venv/bin/python examples/langchain_adapter.py      (needs continuum-recovery[langchain])

``create_agent`` (LangChain 1.x) runs with the offline ``GenericFakeChatModel``: no
network, no key. The ``send_invoice`` tool is wrapped with ``guard_tool``: same name,
description and schema for the model, but every call goes through continuum's ledger.
The model asks for INV-1 twice and gets the recorded answer the second time; an
interrupted send (a timeout: sent or not?) is recorded ``unknown`` and a retry raises
``EffectUncertain`` until the program has checked and reconciled it. ``ClaimsCallback``
records what the model says it did as ``external_agent`` (self-certified), apart from
what the program saw (``deterministic``).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool

from continuum import Continuum, EffectUncertain, Origin
from continuum.adapters.langchain import ClaimsCallback, guard_tool

RUN = "billing"
claims: list[tuple[str, bool]] = []


def claim(text: str, ok: bool) -> None:
    claims.append((text, ok))
    print(f"{'ok' if ok else 'FAILED'}  {text}", flush=True)


class FakeModel(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def script(*invoices: str) -> Any:
    return iter([AIMessage(content="", tool_calls=[{"name": "send_invoice", "id": f"c{i}",
                                                    "args": {"invoice_id": inv}}])
                 for i, inv in enumerate(invoices)] + [AIMessage(content="I sent them all.")])


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="langchain-adapter-"))
    outbox = work / "outbox"
    outbox.mkdir()
    flaky = {"INV-3"}

    @tool
    async def send_invoice(invoice_id: str) -> str:
        """Send one invoice."""
        with (outbox / f"{invoice_id}.txt").open("a") as f:
            f.write("sent\n")
        if invoice_id in flaky:
            flaky.discard(invoice_id)
            raise TimeoutError("no answer from the mail server")
        return f"sent {invoice_id}"

    cx = Continuum.open(str(work / "continuum.db"))
    cx.start_run(RUN, "send the invoices")
    guarded = guard_tool(send_invoice, cx, RUN, key=lambda args: args["invoice_id"])
    claim("the guarded tool looks the same to the model (name, schema)",
          guarded.name == "send_invoice"
          and guarded.tool_call_schema.model_json_schema() == send_invoice.tool_call_schema
          .model_json_schema())

    def agent(*invoices: str) -> Any:
        return create_agent(FakeModel(messages=script(*invoices)), tools=[guarded])

    callbacks = {"callbacks": [ClaimsCallback(cx, RUN)]}
    out = asyncio.run(agent("INV-1", "INV-2", "INV-1").ainvoke(
        {"messages": [("user", "Send INV-1 and INV-2.")]}, callbacks))
    sent = {p.stem: len(p.read_text().splitlines()) for p in outbox.iterdir()}
    claim("INV-1 asked for twice, sent once; INV-2 sent once", sent == {"INV-1": 1, "INV-2": 1})
    claim("the second INV-1 call answered with the recorded result",
          [m.content for m in out["messages"] if m.type == "tool"]
          == ["sent INV-1", "sent INV-2", "sent INV-1"])

    state = cx.state(RUN)
    origins = {str(f.provenance.origin) for f in state.findings.values()}
    claim("what the model says it did is recorded as external_agent, the sends as deterministic",
          origins == {str(Origin.EXTERNAL_AGENT)}
          and {str(a.origin) for a in cx.actions(RUN)} == {str(Origin.DETERMINISTIC)})

    with contextlib.suppress(TimeoutError):
        asyncio.run(agent("INV-3").ainvoke({"messages": [("user", "Send INV-3.")]}))
    try:
        asyncio.run(agent("INV-3").ainvoke({"messages": [("user", "Try INV-3 again.")]}))
        raised = None
    except EffectUncertain as e:
        raised = e
    claim("a retry after the timeout raised EffectUncertain; INV-3 went out once",
          raised is not None and len((outbox / "INV-3.txt").read_text().splitlines()) == 1)
    if raised is not None:
        print(f"    {raised.hint}")
        cx.reconcile(RUN, raised.action_id, occurred=(outbox / "INV-3.txt").exists())
    claim("after the program checked the outbox, INV-3 is settled as sent",
          {a.key: str(a.status) for a in cx.actions(RUN)}["INV-3"] == "completed")

    held = sum(ok for _, ok in claims)
    print(f"\n{held}/{len(claims)} claims held")
    return 0 if held == len(claims) else 1


if __name__ == "__main__":
    raise SystemExit(main())

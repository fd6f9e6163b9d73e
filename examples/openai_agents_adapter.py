"""OpenAI Agents SDK with continuum's adapter: guarded function tools and run hooks.

    .venv/bin/python examples/openai_agents_adapter.py      (needs continuum-recovery[openai-agents])

The agent runs on a scripted ``Model`` (the SDK's model interface, answering from a
list): no network, no key, tracing off. ``guarded_function_tool`` builds the same
function tool the SDK would (schema from the signature and docstring) with every call
going through continuum's ledger; ``ContinuumRunHooks`` records the agent's final answer
as an ``external_agent`` claim. The model asks for INV-1 twice (sent once), then a send
times out: it is ``unknown``, and the next run stops with ``EffectUncertain`` rather than
sending again (the SDK would otherwise hand the model an error and let it retry).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from agents import Agent, ModelResponse, RunConfig, Runner, Usage, function_tool
from agents.models.interface import Model
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from continuum import Continuum, EffectUncertain, Origin
from continuum.adapters.openai_agents import ContinuumRunHooks, guarded_function_tool

RUN = "billing"
claims: list[tuple[str, bool]] = []


def claim(text: str, ok: bool) -> None:
    claims.append((text, ok))
    print(f"{'ok' if ok else 'FAILED'}  {text}", flush=True)


class ScriptedModel(Model):
    """Answers from a script: one tool call per turn, then a final message."""

    def __init__(self, *invoices: str) -> None:
        self.turns = [ResponseFunctionToolCall(type="function_call", call_id=f"c{i}", id=f"f{i}",
                                               name="send_invoice",
                                               arguments=json.dumps({"invoice_id": inv}))
                      for i, inv in enumerate(invoices)]

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        if self.turns:
            return ModelResponse(output=[self.turns.pop(0)], usage=Usage(), response_id=None)
        text = ResponseOutputText(type="output_text", text="All invoices sent.", annotations=[])
        return ModelResponse(output=[ResponseOutputMessage(
            id="m", type="message", role="assistant", status="completed", content=[text])],
            usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="openai-agents-adapter-"))
    outbox = work / "outbox"
    outbox.mkdir()
    flaky = {"INV-3"}

    def send_invoice(invoice_id: str) -> str:
        """Send one invoice.

        Args:
            invoice_id: The invoice to send.
        """
        with (outbox / f"{invoice_id}.txt").open("a") as f:
            f.write("sent\n")
        if invoice_id in flaky:
            flaky.discard(invoice_id)
            raise TimeoutError("no answer from the mail server")
        return f"sent {invoice_id}"

    cx = Continuum.open(str(work / "continuum.db"))
    cx.start_run(RUN, "send the invoices")
    tool = guarded_function_tool(send_invoice, cx, RUN, key=lambda args: args["invoice_id"])
    claim("the guarded tool has the schema the SDK builds for the plain function",
          tool.params_json_schema == function_tool(send_invoice).params_json_schema)

    config = RunConfig(tracing_disabled=True)
    hooks = ContinuumRunHooks(cx, RUN)

    def run(*invoices: str) -> Any:
        agent = Agent(name="billing", model=ScriptedModel(*invoices), tools=[tool])
        return asyncio.run(Runner.run(agent, "Send the invoices.", hooks=hooks, run_config=config))

    result = run("INV-1", "INV-2", "INV-1")
    sent = {p.stem: len(p.read_text().splitlines()) for p in outbox.iterdir()}
    claim("INV-1 asked for twice, sent once; INV-2 sent once", sent == {"INV-1": 1, "INV-2": 1})
    claim("the run finished", result.final_output == "All invoices sent.")
    claim("the final answer is kept as an external_agent claim, the sends as deterministic",
          {str(f.provenance.origin) for f in cx.state(RUN).findings.values()}
          == {str(Origin.EXTERNAL_AGENT)}
          and {str(a.origin) for a in cx.actions(RUN)} == {str(Origin.DETERMINISTIC)})

    run("INV-3")  # the timeout goes to the model as a tool error; continuum records unknown
    try:
        run("INV-3")
        raised = None
    except Exception as e:  # the SDK may wrap it; the cause is continuum's
        raised = e if isinstance(e, EffectUncertain) else e.__cause__ or e.__context__
    claim("the next try stopped the run with EffectUncertain; INV-3 went out once",
          isinstance(raised, EffectUncertain)
          and len((outbox / "INV-3.txt").read_text().splitlines()) == 1)
    if isinstance(raised, EffectUncertain):
        print(f"    to settle it: {raised.command} --occurred|--not-occurred")
        cx.reconcile(RUN, raised.action_id, occurred=(outbox / "INV-3.txt").exists())
    claim("after the program checked the outbox, INV-3 is settled as sent",
          {a.key: str(a.status) for a in cx.actions(RUN)}["INV-3"] == "completed")

    held = sum(ok for _, ok in claims)
    print(f"\n{held}/{len(claims)} claims held")
    return 0 if held == len(claims) else 1


if __name__ == "__main__":
    raise SystemExit(main())

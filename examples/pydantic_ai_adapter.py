"""Pydantic AI with continuum's adapter: a toolset whose sends happen at most once.

    .venv/bin/python examples/pydantic_ai_adapter.py      (needs continuum-recovery[pydantic-ai])

The agent runs on Pydantic AI's ``TestModel`` (it calls every tool once with generated
arguments) and ``FunctionModel`` (a local function plays the model): no network, no key.
The tools are wrapped in ``ContinuumToolset``: every call goes through continuum's
ledger with the invoice id as its key. Running the same agent twice sends nothing twice;
a send that timed out is ``unknown`` and a retry ends the run with ``EffectUncertain``
until the program has looked and reconciled. ``ModelRetry`` (the tool refusing a call
before doing anything) is a certain "did not happen": the model may try again.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

from pydantic_ai import Agent, ModelRetry
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from continuum import Continuum, EffectUncertain, Origin
from continuum.adapters.pydantic_ai import guard_functions, record_output

RUN = "billing"
claims: list[tuple[str, bool]] = []


def claim(text: str, ok: bool) -> None:
    claims.append((text, ok))
    print(f"{'ok' if ok else 'FAILED'}  {text}", flush=True)


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="pydantic-ai-adapter-"))
    outbox = work / "outbox"
    outbox.mkdir()
    flaky = {"INV-3"}
    refused: list[str] = []

    def send_invoice(invoice_id: str) -> str:
        """Send one invoice."""
        if not invoice_id.startswith("INV-"):
            refused.append(invoice_id)
            raise ModelRetry("invoice ids look like INV-1")  # refused before sending
        with (outbox / f"{invoice_id}.txt").open("a") as f:
            f.write("sent\n")
        if invoice_id in flaky:
            flaky.discard(invoice_id)
            raise TimeoutError("no answer from the mail server")
        return f"sent {invoice_id}"

    cx = Continuum.open(str(work / "continuum.db"))
    cx.start_run(RUN, "send the invoices")
    tools = guard_functions([send_invoice], cx, RUN,
                            keys={"send_invoice": lambda args: args["invoice_id"]})

    def script(*invoices: str) -> FunctionModel:
        def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            turn = sum(isinstance(m, ModelResponse) for m in messages)
            if turn < len(invoices):
                return ModelResponse(parts=[ToolCallPart("send_invoice",
                                                         {"invoice_id": invoices[turn]})])
            return ModelResponse(parts=[TextPart("All invoices sent.")])
        return FunctionModel(model)

    result = Agent(script("INV-1", "INV-2", "INV-1"), toolsets=[tools]).run_sync("Send them.")
    sent = {p.stem: len(p.read_text().splitlines()) for p in outbox.iterdir()}
    claim("INV-1 asked for twice, sent once; INV-2 sent once", sent == {"INV-1": 1, "INV-2": 1})
    record_output(cx, RUN, result.output)
    claim("the final answer is kept as an external_agent claim, the sends as deterministic",
          {str(f.provenance.origin) for f in cx.state(RUN).findings.values()}
          == {str(Origin.EXTERNAL_AGENT)}
          and {str(a.origin) for a in cx.actions(RUN)} == {str(Origin.DETERMINISTIC)})

    # TestModel calls the tool with generated arguments ("a") and retries as told, until
    # Pydantic AI's retry limit ends the run.
    with contextlib.suppress(UnexpectedModelBehavior):
        Agent(TestModel(), toolsets=[tools]).run_sync("Send something.")
    claim("TestModel's bad id was refused with ModelRetry, a certain 'not sent': each retry "
          "was allowed to run, and nothing was sent",
          len(refused) == 2 and not (outbox / "a.txt").exists()
          and {a.key: str(a.status) for a in cx.actions(RUN)}["a"] == "failed")

    with contextlib.suppress(TimeoutError):
        Agent(script("INV-3"), toolsets=[tools]).run_sync("Send INV-3.")
    try:
        Agent(script("INV-3"), toolsets=[tools]).run_sync("Send INV-3 again.")
        raised = None
    except EffectUncertain as e:
        raised = e
    claim("a retry after the timeout raised EffectUncertain; INV-3 went out once",
          raised is not None and len((outbox / "INV-3.txt").read_text().splitlines()) == 1)
    if raised is not None:
        print(f"    to settle it: {raised.command} --occurred|--not-occurred")
        cx.reconcile(RUN, raised.action_id, occurred=(outbox / "INV-3.txt").exists())
    claim("after the program checked the outbox, INV-3 is settled as sent",
          {a.key: str(a.status) for a in cx.actions(RUN)}["INV-3"] == "completed")

    held = sum(ok for _, ok in claims)
    print(f"\n{held}/{len(claims)} claims held")
    return 0 if held == len(claims) else 1


if __name__ == "__main__":
    raise SystemExit(main())

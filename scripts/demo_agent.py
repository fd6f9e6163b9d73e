"""A scripted agent for `make demo`: sends invoices through continuum-mcp over stdio.

Usage: demo_agent.py STORE OUTBOX [--pause-after INVOICE]

It starts `continuum-mcp` as its MCP server (as Claude Code or Gemini CLI would), calls
continuum_resume first, settles any action reported unknown by checking the outbox,
then routes each send through intercept, perform, complete. With --pause-after it
prints "SENT <invoice>" after writing that invoice's file and waits on stdin before
completing, so the demo can kill it exactly between the side effect and its record.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import Implementation

RUN = "invoice-batch"
INVOICES = [f"INV-00{i}" for i in range(1, 6)]
AGENT_NAME = "demo-agent"


def server_params(store: str) -> StdioServerParameters:
    exe = Path(sys.executable).parent / "continuum-mcp"
    command, args = (str(exe), []) if exe.exists() else (sys.executable, ["-m", "continuum.mcp"])
    return StdioServerParameters(
        command=command,
        args=[*args, "--db", store],
        env={**os.environ, "CONTINUUM_MCP_MUTATING_CLIENTS": AGENT_NAME},
    )


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    if result.is_error:
        raise SystemExit(f"{tool} failed: {result.content[0].text}")  # type: ignore[union-attr]
    assert result.structured_content is not None
    return result.structured_content


async def run(store: str, outbox: Path, pause_after: str | None) -> int:
    async with Client(
        server_params(store),
        client_info=Implementation(name=AGENT_NAME, version="1"),
        mode="legacy",
    ) as client:
        state = await call(client, "continuum_resume", run_id=None)
        say(f"resume -> {state['mode']} (next: {state['next_allowed_action']})")
        if state["run_id"] is None:
            await call(
                client,
                "continuum_record_progress",
                run_id=RUN,
                total=len(INVOICES),
                goal="send invoices INV-001..INV-005 exactly once",
            )
        for action in state.get("uncertain_actions", []):
            invoice = action["arguments"]["invoice"]
            if not (outbox / f"{invoice}.txt").exists():  # check the external system
                # An agent may settle an action as *occurred*; its word that one did NOT
                # happen would not let it be sent again: that takes a person.
                say(
                    f"ASK A PERSON: {invoice} is not in the outbox; a person must check and run "
                    f"`continuum reconcile {RUN} {action['action_key']} --not-occurred`"
                )
                return 3
            await call(
                client,
                "continuum_reconcile_action",
                run_id=RUN,
                action_key=action["action_key"],
                occurred=True,
                external_id=f"outbox:{invoice}",
                note="found in the outbox",
            )
            say(f"reconciled {invoice}: occurred=True (found in the outbox)")
        done = 0
        for invoice in INVOICES:
            r = await call(
                client,
                "continuum_intercept_action",
                run_id=RUN,
                action_type="send_invoice",
                key=f"invoice:{invoice}",
                arguments={"invoice": invoice, "to": "billing@example.test"},
            )
            if not r["proceed"]:
                say(f"SKIP {invoice}: {r['status']}")
                done += r["status"] == "completed"
                continue
            # Append, like a mail server's log: a second send would show as a second line.
            with open(outbox / f"{invoice}.txt", "a", encoding="utf-8") as f:
                f.write(f"invoice {invoice} sent\n")
            if invoice == pause_after:
                say(f"SENT {invoice}")
                await asyncio.to_thread(sys.stdin.readline)  # killed here by the demo
            await call(
                client,
                "continuum_complete_action",
                run_id=RUN,
                action_key=r["action_key"],
                external_id=f"outbox:{invoice}",
            )
            done += 1
            await call(client, "continuum_record_progress", run_id=RUN, completed=done)
            say(f"DONE {invoice}")
    return 0


def say(text: str) -> None:
    print(text, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("store")
    ap.add_argument("outbox")
    ap.add_argument("--pause-after", default=None)
    args = ap.parse_args()
    return asyncio.run(run(args.store, Path(args.outbox), args.pause_after))


if __name__ == "__main__":
    sys.exit(main())

"""The kit's scripted agent: an MCP client that sends the invoice batch through continuum-mcp.

Usage: agent.py WORK [--sink URL] [--pause-after-send INVOICE]

It stands in for an interactive host such as Claude Code: it starts the server exactly
as WORK/.mcp.json says (command, args, env) over stdio with the official ``mcp.Client``,
and declares the client name ``claude-code`` that this file's allowlist admits. (On stdio
that name is self-declared; the configuration file is the boundary. See
references/security.md.)

What it does is what the session prompts ask of a real agent:
1. call continuum_resume first; if no run exists, create it with continuum_record_progress;
2. settle every action reported unknown by checking the external system (the outbox
   files, or the HTTP sink with --sink), with continuum_reconcile_action;
3. for each invoice: continuum_intercept_action (key invoice:<id>); send only if proceed
   is true; then continuum_complete_action and continuum_record_progress.
With --pause-after-send it prints "SENT <invoice>" right after that invoice's side effect
and blocks on stdin before recording completion, so the harness can SIGKILL it (and its
server) exactly between a send and its completion.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import Implementation

CLIENT_NAME = "claude-code"  # the name .mcp.json's allowlist admits (see the docstring)


def say(text: str) -> None:
    print(text, flush=True)


class Outbox:
    """Files mode: sending an invoice appends its line to outbox/<id>.txt."""

    def __init__(self, work: Path) -> None:
        self.dir = work / "outbox"

    def send(self, invoice: str, line: str) -> str:
        with (self.dir / f"{invoice}.txt").open("a", encoding="utf-8") as f:
            f.write(line + "\n")
        return f"outbox:{invoice}"

    def find(self, invoice: str) -> str | None:
        return f"outbox:{invoice}" if (self.dir / f"{invoice}.txt").exists() else None


class Sink:
    """HTTP mode: sending POSTs the line to the sink; the effect is visible only there."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.http = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only

    def send(self, invoice: str, line: str) -> str:
        req = urllib.request.Request(
            f"{self.url}/invoices/{invoice}",
            data=line.encode(),
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        with self.http.open(req, timeout=30) as r:
            return str(json.loads(r.read())["receipt"])

    def find(self, invoice: str) -> str | None:
        try:
            with self.http.open(f"{self.url}/invoices/{invoice}", timeout=30) as r:
                return str(json.loads(r.read())["receipts"][0])
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise


def server_params(work: Path) -> StdioServerParameters:
    entry = json.loads((work / ".mcp.json").read_text(encoding="utf-8"))["mcpServers"]["continuum"]
    return StdioServerParameters(
        command=entry["command"], args=entry.get("args", []), env=entry.get("env"), cwd=str(work)
    )


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    if result.is_error:
        raise SystemExit(f"{tool} failed: {result.content[0].text}")  # type: ignore[union-attr]
    data: dict[str, Any] | None = result.structured_content
    assert data is not None
    return data


async def run(work: Path, system: Outbox | Sink, pause_after_send: str | None, run_id: str) -> int:
    invoices = {
        p.stem: p.read_text(encoding="utf-8").strip()
        for p in sorted((work / "invoices").glob("INV-*.txt"))
    }
    async with Client(
        server_params(work),
        client_info=Implementation(name=CLIENT_NAME, version="1"),
        mode="legacy",
    ) as client:
        state = await call(client, "continuum_resume")
        say(f"continuum_resume -> mode {state['mode']}, next {state['next_allowed_action']}")
        if state["run_id"] is None:
            await call(
                client,
                "continuum_record_progress",
                run_id=run_id,
                total=len(invoices),
                completed=0,
                goal=f"send invoices {', '.join(invoices)} exactly once",
            )
            say(f"started run {run_id} ({len(invoices)} invoices)")
        else:
            run_id = state["run_id"]
            p = state["progress"]
            say(f"resuming run {run_id}: {p['completed']}/{p['total']} recorded as done")
        for action in state["uncertain_actions"]:
            invoice = action["arguments"]["invoice"]
            found = system.find(invoice)  # ask the external system, never guess
            if found is None:
                # An agent may settle an action as occurred; "it did not happen" would not
                # let it run again until a person confirms it, so a person is asked.
                raise SystemExit(
                    f"{invoice} is {action['status']} and not in the external system: a person "
                    f"must check and run `continuum reconcile {run_id} {action['action_key']} "
                    "--not-occurred`, then this agent can resume"
                )
            await call(
                client,
                "continuum_reconcile_action",
                run_id=run_id,
                action_key=action["action_key"],
                occurred=True,
                external_id=found,
                note="found in the external system",
            )
            say(f"RECONCILED {invoice}: {action['status']} -> occurred=True ({found})")
        if state["uncertain_actions"]:
            state = await call(client, "continuum_resume", run_id=run_id)
            say(f"continuum_resume -> mode {state['mode']}, required {state['required_actions']}")
        blocking = [a for a in state["required_actions"] if not a.startswith("confirm_run:")]
        if state["run_id"] is not None and state["mode"] != "resume" and blocking:
            raise SystemExit(f"not safe to continue: {state['rationale']}")
        # What may remain is a human's confirmation of the progress this agent reported: the
        # operator gives it at the end; every send below is still checked by the ledger.
        done = 0
        for invoice, line in invoices.items():
            r = await call(
                client,
                "continuum_intercept_action",
                run_id=run_id,
                action_type="send_invoice",
                key=f"invoice:{invoice}",
                arguments={"invoice": invoice},
            )
            if not r["proceed"]:
                say(
                    f"SKIP {invoice}: {r['status']}"
                    + (f" ({r['external_id']})" if r.get("external_id") else "")
                )
                if r["status"] != "completed":
                    raise SystemExit(f"{invoice} is {r['status']}: {r['guidance']}")
                done += 1
                continue
            external_id = system.send(invoice, line)
            if invoice == pause_after_send:
                say(f"SENT {invoice}")
                await asyncio.to_thread(sys.stdin.readline)  # the harness kills us here
            await call(
                client,
                "continuum_complete_action",
                run_id=run_id,
                action_key=r["action_key"],
                external_id=external_id,
            )
            done += 1
            await call(client, "continuum_record_progress", run_id=run_id, completed=done)
            say(f"DONE {invoice} ({external_id})")
        listed = await call(client, "continuum_list_actions", run_id=run_id)
        say(
            f"batch finished: {done}/{len(invoices)} done, "
            f"{len(listed['unresolved'])} unresolved actions"
        )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("--sink", default=None, help="HTTP sink URL (hidden side effect variant)")
    ap.add_argument("--pause-after-send", default=None, metavar="INVOICE")
    ap.add_argument("--run-id", default="invoice-batch")
    args = ap.parse_args()
    system: Outbox | Sink = Sink(args.sink) if args.sink else Outbox(args.work)
    return asyncio.run(run(args.work.resolve(), system, args.pause_after_send, args.run_id))


if __name__ == "__main__":
    sys.exit(main())

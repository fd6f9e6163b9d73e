"""A small real upstream MCP server for the gateway tests (run as a subprocess).

Tools:
- ``send_invoice(invoice_id, amount)``: the effect: appends one line to the file named by
  ``UPSTREAM_EFFECTS``; when ``UPSTREAM_DIE_AFTER_EFFECT`` names the invoice, the process
  exits right after writing the line, before it answers (killed mid-call).
  Its description is ``UPSTREAM_DESCRIPTION`` when set (a changed definition).
- ``charge_card(card)``: always an error result (a declined card: certainly not done).
- ``slow_effect(seconds)``: appends a line, then sleeps (a call that hangs).
- ``read_balance(account)``: a read.
- ``ask_customer(question)``: asks its client (an elicitation request, on the call's
  stream over HTTP) and says what came back.
- a resource ``invoices://terms`` and a prompt ``dunning(customer)``: what the gateway
  forwards as it is.

On stdio by default; with ``UPSTREAM_PORT_FILE`` set it serves streamable HTTP on a free
loopback port instead (written to that file once it listens; ``UPSTREAM_PORT`` names the
port, for a restart on the same one), and with ``UPSTREAM_BEARER`` it answers 401 to a
request without that bearer token. With ``UPSTREAM_RESUMABLE=1`` it keeps events for
resumption, and ``polled_effect(tag)`` closes its call's stream before it answers (the
client must resume it with ``Last-Event-ID``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http import EventMessage, EventStore
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_REQUEST
from pydantic import BaseModel

server = MCPServer("invoices")
EFFECTS = os.environ.get("UPSTREAM_EFFECTS", "effects.txt")
DESCRIPTION = os.environ.get("UPSTREAM_DESCRIPTION", "Send an invoice to the customer.")


def _append(line: str) -> None:
    with open(EFFECTS, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


@server.tool(description=DESCRIPTION)
def send_invoice(invoice_id: str, amount: int) -> str:
    _append(f"invoice {invoice_id} {amount}")
    if os.environ.get("UPSTREAM_DIE_AFTER_EFFECT") == invoice_id:
        os._exit(3)  # the effect happened; the answer never comes
    if os.environ.get("UPSTREAM_SESSION_WORDING") == invoice_id:
        # The effect happened; the answer is a JSON-RPC error worded exactly as an HTTP
        # upstream's refusal of an unknown session, on a live session (no 404).
        raise MCPError(INVALID_REQUEST, "Session not found")
    return f"sent invoice {invoice_id} for {amount}"


@server.tool(description="Charge a card.")
def charge_card(card: str) -> str:
    raise ToolError(f"card {card} declined")


@server.tool(description="An effect that takes its time.")
def slow_effect(seconds: float) -> str:
    _append(f"slow {seconds}")
    time.sleep(seconds)
    return "done slowly"


@server.tool(description="Read an account's balance.")
def read_balance(account: str) -> str:
    return f"balance of {account}: 42"


@server.tool(description="Ask the customer a question (the upstream asks its client).")
async def ask_customer(question: str, ctx: Context) -> str:
    class Answer(BaseModel):
        answer: str

    try:
        result = await ctx.elicit(question, Answer)
    except MCPError as e:
        return f"the client did not answer: {e.error.code} {e.error.message}"
    return f"the client answered: {result.action}"


@server.tool(description="An effect whose answer comes after its stream was closed.")
async def polled_effect(tag: str, ctx: Context) -> str:
    _append(f"polled {tag}")
    await ctx.close_sse_stream()  # the client must resume with Last-Event-ID (HTTP only)
    time.sleep(0.2)
    return f"done polling {tag}"


class MemoryEvents(EventStore):
    """Events kept for resumption (``UPSTREAM_RESUMABLE``): in memory, numbered."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any]] = []  # (event id, stream id, message)

    async def store_event(self, stream_id: str, message: Any) -> str:
        self.events.append((str(len(self.events) + 1), stream_id, message))
        return self.events[-1][0]

    async def replay_events_after(self, last_event_id: str, send_callback: Any) -> str | None:
        ids = [event_id for event_id, _, _ in self.events]
        if last_event_id not in ids:
            return None
        start = ids.index(last_event_id)
        stream = self.events[start][1]
        for event_id, stream_id, message in self.events[start + 1 :]:
            if stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream


@server.resource("invoices://terms", description="The payment terms.")
def terms() -> str:
    return "net 30 days"


@server.prompt(description="A reminder to a customer.")
def dunning(customer: str) -> str:
    return f"Remind {customer} politely that an invoice is due."


def serve_http(port_file: str) -> None:
    import socket

    import uvicorn
    from starlette.responses import PlainTextResponse

    resumable = os.environ.get("UPSTREAM_RESUMABLE") == "1"
    inner = (
        server.streamable_http_app(event_store=MemoryEvents(), retry_interval=100)
        if resumable
        else server.streamable_http_app()
    )
    bearer = os.environ.get("UPSTREAM_BEARER")

    async def app(scope: Any, receive: Any, send: Any) -> None:
        """401 to an HTTP request without the bearer token, when one is set."""
        if bearer and scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != f"Bearer {bearer}".encode():
                await PlainTextResponse("no", status_code=401)(scope, receive, send)
                return
        await inner(scope, receive, send)

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart on the same port
    sock.bind(("127.0.0.1", int(os.environ.get("UPSTREAM_PORT", "0"))))
    sock.listen(16)
    Path(port_file + ".tmp").write_text(str(sock.getsockname()[1]), encoding="utf-8")
    os.replace(port_file + ".tmp", port_file)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    if os.environ.get("UPSTREAM_PORT_FILE"):
        serve_http(os.environ["UPSTREAM_PORT_FILE"])
    else:
        server.run()

"""A small real upstream MCP server for the gateway tests (run as a subprocess).

Tools:
- ``send_invoice(invoice_id, amount)``: the effect: appends one line to the file named by
  ``UPSTREAM_EFFECTS``; when ``UPSTREAM_DIE_AFTER_EFFECT`` names the invoice, the process
  exits right after writing the line, before it answers (killed mid-call).
  Its description is ``UPSTREAM_DESCRIPTION`` when set (a changed definition).
- ``charge_card(card)``: always an error result (a declined card: certainly not done).
- ``slow_effect(seconds)``: appends a line, then sleeps (a call that hangs).
- ``read_balance(account)``: a read.
"""

from __future__ import annotations

import os
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

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


if __name__ == "__main__":
    server.run()

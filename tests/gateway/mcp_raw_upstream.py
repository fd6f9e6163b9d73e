"""An upstream that speaks MCP by hand, badly: for the gateway's bad-input tests.

It answers ``initialize`` and ``tools/list`` (one tool, ``send_invoice``) properly. A
``tools/call`` for invoice ``A`` is answered after a line that is not JSON; one for ``B``
gets an answer that is JSON-RPC but not a valid tool result; one for ``C`` gets no answer:
the server writes a non-JSON line and exits. Each call first appends to the effects file.
"""

from __future__ import annotations

import json
import os
import sys

EFFECTS = os.environ.get("UPSTREAM_EFFECTS", "effects.txt")
TOOL = {
    "name": "send_invoice",
    "description": "Send an invoice.",
    "inputSchema": {"type": "object", "properties": {"invoice_id": {"type": "string"}}},
}


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        method, rid = request.get("method"), request.get("id")
        if rid is None:
            continue  # a notification
        if method == "initialize":
            version = request["params"]["protocolVersion"]
            send(
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "result": {
                        "protocolVersion": version,
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "raw", "version": "0"},
                    },
                }
            )
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [TOOL]}})
        elif method == "tools/call":
            invoice = request["params"]["arguments"]["invoice_id"]
            with open(EFFECTS, "a", encoding="utf-8") as f:
                f.write(f"invoice {invoice}\n")
            if invoice == "A":
                sys.stdout.write("this is not JSON-RPC\n")
                text = {"type": "text", "text": "sent A"}
                send({"jsonrpc": "2.0", "id": rid, "result": {"content": [text]}})
            elif invoice == "B":
                send({"jsonrpc": "2.0", "id": rid, "result": {"content": "not a list"}})
            else:
                sys.stdout.write("{garbage\n")
                sys.stdout.flush()
                return
        else:
            error = {"code": -32601, "message": f"no method {method}"}
            send({"jsonrpc": "2.0", "id": rid, "error": error})


if __name__ == "__main__":
    main()

"""An upstream that speaks MCP by hand, for the gateway's relay tests (run as a subprocess).

It reads one line at a time and appends each, as received, to the file named by
``UPSTREAM_LOG`` (written before any answer to it), so a test can see exactly what the
gateway sent. Its answers are written in a form no JSON encoder of the SDK produces
(keys in an odd order, spaces, ``\\u`` escapes), so a re-encoded answer is told apart
from a relayed one byte for byte.

Tools:
- ``echo(said)``: answers at once with ``said`` in its text;
- ``send_invoice(invoice_id, amount)``: the same, for a registered call;
- ``hang()``: never answered; a ``notifications/cancelled`` for it is answered anyway, late
  (a stray answer the gateway must drop);
- ``progress(steps)``: ``steps`` progress notifications with the call's progress token,
  one for a token nobody asked for, then the answer;
- ``die()``: the process exits at once, without an answer;
- ``garble()``: answered with a line that has the call's id but is not a JSON-RPC answer
  (neither ``result`` nor ``error``);
- ``deaf()``: answered, then the process closes its stdin and lives on, its stdout open:
  the gateway's next write to it fails while nothing says the upstream ended;
- ``fail()``: answered with a JSON-RPC error; ``notresult()``: with a result that is not a
  tool's (its content not a list); ``deep(depth)``: with a structured result nested
  ``depth`` levels deep (more than pydantic dumps past 254).

``UPSTREAM_DESCRIPTIONS`` names a JSON file of ``{tool: description}`` read at each
listing, if it exists: a tool whose definition changes while the upstream is restarted.
``UPSTREAM_STARTS`` names a file each start appends a line to; while the file named by
``UPSTREAM_CRASH`` exists, a start exits at once (status 3), before any handshake.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

LOG = os.environ.get("UPSTREAM_LOG", "upstream.log")
TOOLS = [
    {"name": name, "description": f"The {name} tool.", "inputSchema": {"type": "object"}}
    for name in (
        *("echo", "send_invoice", "hang", "progress", "die", "garble", "deaf"),
        *("fail", "notresult", "deep"),
    )
]


def listed() -> list[dict[str, Any]]:
    path = os.environ.get("UPSTREAM_DESCRIPTIONS")
    if not path or not os.path.exists(path):
        return TOOLS
    with open(path, encoding="utf-8") as f:
        descriptions = json.load(f)
    return [{**t, "description": descriptions.get(t["name"], t["description"])} for t in TOOLS]


def write(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def answer(request_id: Any, result: str) -> None:
    """A result line in this server's own style: result first, then id, then jsonrpc."""
    write('{"result" : ' + result + ', "id" : ' + json.dumps(request_id) + ', "jsonrpc":"2.0"}')


def text_result(text: str) -> str:
    return '{ "content": [ {"text": ' + json.dumps(text) + ', "type": "text"} ], "isError": false }'


def call(request_id: Any, params: dict[str, Any], hanging: set[Any]) -> None:
    name, arguments = params["name"], params.get("arguments") or {}
    if name in ("echo", "send_invoice"):
        answer(request_id, text_result(f"{name} caf\u00e9 {json.dumps(arguments, sort_keys=True)}"))
    elif name == "hang":
        hanging.add(json.dumps(request_id))
    elif name == "progress":
        token = (params.get("_meta") or {}).get("progressToken")
        for step in range(int(arguments.get("steps", 2))):
            note = {"progressToken": token, "progress": step + 1, "total": 9}
            write(
                '{"method":"notifications/progress", "jsonrpc":"2.0", "params":'
                + json.dumps(note)
                + "}"
            )
        stray = {"progressToken": "nobody-asked", "progress": 1}
        write(json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": stray}))
        answer(request_id, text_result("progressed"))
    elif name == "die":
        os._exit(4)
    elif name == "garble":
        write('{"jsonrpc": "2.0", "id": ' + json.dumps(request_id) + ', "oops": true}')
    elif name == "deaf":
        os.close(0)  # the read end of the gateway's pipe: its next write fails (EPIPE)
        answer(request_id, text_result("not listening any more"))  # closed before this
        time.sleep(3600)  # alive, stdout open: only a failed write can tell
    elif name == "fail":
        error = {"code": -32010, "message": "the upstream refused", "data": {"why": "test"}}
        write(json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}))
    elif name == "notresult":
        answer(request_id, '{"content": "not a list"}')
    elif name == "deep":
        nested: Any = 1
        for _ in range(int(arguments.get("depth", 600))):
            nested = {"a": nested}
        result = {"content": [], "structuredContent": nested}
        answer(request_id, json.dumps(result))
    else:
        error = {"code": -32602, "message": f"no tool {name}"}
        write(json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}))


def main() -> None:
    starts = os.environ.get("UPSTREAM_STARTS")
    if starts:
        with open(starts, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")
    crash = os.environ.get("UPSTREAM_CRASH")
    if crash and os.path.exists(crash):
        sys.exit(3)
    hanging: set[Any] = set()
    for line in sys.stdin:
        with open(LOG, "a", encoding="utf-8") as log:
            log.write(line if line.endswith("\n") else line + "\n")
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if method == "notifications/cancelled":
            cancelled = json.dumps(params.get("requestId"))
            if cancelled in hanging:  # late: the gateway must not pass this on
                hanging.discard(cancelled)
                answer(params.get("requestId"), text_result("too late"))
        elif method is None or request_id is None:
            continue  # an answer, or another notification
        elif method == "initialize":
            version = params["protocolVersion"]
            info = {"name": "relay-upstream", "version": "0"}
            result = {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info}
            answer(request_id, json.dumps(result))
        elif method == "tools/list":
            answer(request_id, json.dumps({"tools": listed()}))
        elif method == "tools/call":
            call(request_id, params, hanging)
        elif method == "ping":
            answer(request_id, "{}")
        else:
            error = {"code": -32601, "message": f"no method {method}"}
            write(json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}))


if __name__ == "__main__":
    main()

"""A bare "hello" MCP server on the same SDK: a baseline for scripts/bench.py.

One tool, the SDK's own stdio transport, nothing else: what any MCP server built on
``mcp`` 2.x pays before it can answer ``initialize`` (``continuum-mcp`` must start within
1.15 times that, SPEC 13), and what one ``tools/call`` costs on the SDK alone
(``mcp_call_hello``: continuum's intercept/complete calls must reach 0.70 times its
calls/s, issue 14).
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("hello", version="0")


@server.tool()
def hello(name: str = "world") -> str:
    """Say hello."""
    return f"hello, {name}"


if __name__ == "__main__":
    server.run()

"""A bare "hello" MCP server on the same SDK: the start-up baseline for scripts/bench.py.

One tool, the SDK's own stdio transport, nothing else: what any MCP server built on
``mcp`` 2.x pays before it can answer ``initialize``. ``continuum-mcp`` is measured
against it in the same run (SPEC 13: within 1.15 times).
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

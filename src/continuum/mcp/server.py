"""``continuum-mcp``: the stdio MCP server (SPEC 9).

Start-up: parse flags, load the authorization policy (a malformed one refuses to
start), check the store URL without creating or modifying anything, then serve the
tools over the hardened stdio transport. Every start-up failure is one line on stderr
and exit 1. Logs go to stderr; stdout carries JSON-RPC alone.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import anyio
from mcp.server.mcpserver import MCPServer

from continuum.errors import ContinuumError
from continuum.log import configure, get_logger
from continuum.mcp.auth import load_policy
from continuum.mcp.tools import INSTRUCTIONS, Tools, register
from continuum.mcp.transport import DEFAULT_MAX_MESSAGE_BYTES, hardened_stdio_server
from continuum.store import probe_store, redact_url, resolve_url
from continuum.version import __version__

LEASE_RENEW_SECONDS = 10.0


def build_server(tools: Tools) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer(name="continuum", version=__version__,
                                       instructions=INSTRUCTIONS)
    register(server, tools)
    return server


class _ArgumentParser(argparse.ArgumentParser):
    """Start-up failures are one line on stderr and exit 1, usage errors included
    (argparse's default is the usage text and exit 2; ``--db -x.db`` lands here)."""

    def error(self, message: str) -> NoReturn:
        self.exit(1, f"{self.prog}: {message} (see {self.prog} --help)\n")


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = _ArgumentParser(
        prog="continuum-mcp",
        description="continuum's MCP server over stdio. Mutating tools are denied unless the "
                    "client's name is on CONTINUUM_MCP_MUTATING_CLIENTS (or "
                    ".continuum/mcp-policy.json).")
    ap.add_argument("--db", default=None, metavar="URL",
                    help="store: path, sqlite:///abs/path.db or postgresql://... "
                         "(default: $CONTINUUM_DB, else ./continuum.db)")
    ap.add_argument("--transport", choices=["stdio"], default="stdio", help="transport (stdio)")
    ap.add_argument("--max-message-bytes", type=int, default=DEFAULT_MAX_MESSAGE_BYTES,
                    metavar="N", help="largest JSON-RPC line accepted (default 1 MiB)")
    ap.add_argument("--log-level", default=None, help="stderr log level (default warning)")
    ap.add_argument("--version", action="version", version=f"continuum-mcp {__version__}")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    configure(args.log_level)
    log = get_logger("continuum.mcp")
    if args.max_message_bytes < 1024:
        print("continuum-mcp: --max-message-bytes must be at least 1024", file=sys.stderr)
        return 1
    try:
        policy = load_policy(os.environ, Path.cwd())
        url = resolve_url(args.db)
        probe_store(url)
    except ContinuumError as e:
        print(f"continuum-mcp: {e.message} [{e.code}]" + (f"; {e.hint}" if e.hint else ""),
              file=sys.stderr)
        return 1
    log.info("mcp.starting", store=redact_url(url), **policy.describe())
    tools = Tools(url, policy)
    server = build_server(tools)

    async def renew_leases() -> None:
        # Keep the leases of actions this server is performing fresh (other hosts judge
        # liveness by the lease alone); a store error here must never stop the server.
        while True:
            await anyio.sleep(LEASE_RENEW_SECONDS)
            try:
                tools.renew_leases()
            except ContinuumError as e:
                log.warning("mcp.lease_renewal_failed", code=e.code)

    async def serve() -> None:
        async with hardened_stdio_server(max_message_bytes=args.max_message_bytes) as (read, write):
            lowlevel = server._lowlevel_server  # SDK 2.3 has no public accessor (see transport.py)
            async with anyio.create_task_group() as tg:
                tg.start_soon(renew_leases)
                await lowlevel.run(read, write, lowlevel.create_initialization_options())
                tg.cancel_scope.cancel()

    try:
        anyio.run(serve)
    except KeyboardInterrupt:
        return 0
    return 0

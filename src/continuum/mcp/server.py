"""``continuum-mcp``: the stdio MCP server (SPEC 9).

Start-up: parse flags, load the authorization policy (a malformed one refuses to
start), check the store URL without creating or modifying anything, then serve the
tools over the hardened stdio transport. Every start-up failure is one line on stderr
and exit 1. Logs go to stderr; stdout carries JSON-RPC alone.

``--doctor`` loads exactly what serving would (policy, store) and prints it as one JSON
document instead of serving, with what a mutating call and a ``continuum_confirm``
call from each ``--client-name`` would be told; ``continuum mcp doctor`` runs it. Each
client is logged once as it connects (``ClientLog``), with whether it may write.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import suppress
from pathlib import Path
from typing import Any, NoReturn

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer

from continuum.errors import ContinuumError
from continuum.log import LEVELS, BadLogLevel, configure, get_logger
from continuum.mcp.auth import ClientLog, Policy, connecting_client, load_policy
from continuum.mcp.tools import INSTRUCTIONS, Tools, register
from continuum.mcp.transport import (
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MAX_MESSAGE_BYTES,
    MAX_IN_FLIGHT_FLAG,
    hardened_stdio_server,
)
from continuum.store import probe_store, redact_url, resolve_url
from continuum.version import __version__

LEASE_RENEW_SECONDS = 10.0


class LogConnectingClients:
    """Server middleware (SDK 2.3, provisional API): logs each client once as it is
    first seen, with whether it may call mutating tools. It never alters or vetoes."""

    def __init__(self, policy: Policy) -> None:
        self._clients = ClientLog(policy)

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        with suppress(Exception):  # a log must never cost the client its request
            era, name = connecting_client(ctx.method, ctx.params, ctx.meta)
            if era is not None:
                self._clients.saw(name, era)
        return await call_next(ctx)


def build_server(tools: Tools) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer(name="continuum", version=__version__,
                                       instructions=INSTRUCTIONS,
                                       middleware=[LogConnectingClients(tools.policy)])
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
    ap.add_argument(MAX_IN_FLIGHT_FLAG, dest="max_in_flight", type=int,
                    default=DEFAULT_MAX_IN_FLIGHT, metavar="N",
                    help="requests a client may have unanswered at once; more are refused as "
                         f"busy until it reads the answers (default {DEFAULT_MAX_IN_FLIGHT})")
    ap.add_argument("--doctor", action="store_true",
                    help="print what this server would load here, as JSON, and exit "
                         "(0: it would start; 1: it would refuse)")
    ap.add_argument("--client-name", dest="client_names", action="append", default=[],
                    metavar="NAME", help="with --doctor: say what this client would be told "
                                         "(repeatable)")
    ap.add_argument("--log-level", default=None, metavar="LEVEL",
                    help=f"stderr log level: {', '.join(LEVELS)} (default warning; also "
                         "$CONTINUUM_LOG_LEVEL)")
    ap.add_argument("--version", action="version", version=f"continuum-mcp {__version__}")
    return ap.parse_args(argv)


def _refusal(message: str, code: str, hint: str) -> str:
    return f"continuum-mcp: {message} [{code}]" + (f"; {hint}" if hint else "")


def doctor(db: str | None, client_names: list[str]) -> tuple[int, dict[str, Any]]:
    """What serving here would load, and what each client would be told; no secrets.

    Exit code 1 (and ``error``) exactly when serving would refuse to start.
    """
    report: dict[str, Any] = {"server": {"version": __version__, "cwd": str(Path.cwd())}}
    try:
        policy = load_policy(os.environ, Path.cwd())
        report["policy"] = {
            **policy.describe(),
            "token_clients": sorted(policy.client_tokens),  # names only, never a secret
        }
        url = resolve_url(db)
        report["store"] = {"url": redact_url(url), "exists": probe_store(url)}
    except ContinuumError as e:
        return 1, {**report, "starts": False, "error": e.to_dict()}
    report["clients"] = [
        {"name": name, **{kind: {**decision.as_dict(), "text": decision.text()}
                          for kind, decision in policy.verdicts(name).items()}}
        for name in client_names
    ]
    return 0, {**report, "starts": True}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        configure(args.log_level)
    except BadLogLevel as e:  # a bad --log-level or CONTINUUM_LOG_LEVEL: refuse to start
        print(_refusal(str(e), "usage.bad_log_level", "the default is warning"), file=sys.stderr)
        return 1
    log = get_logger("continuum.mcp")
    if args.max_message_bytes < 1024:
        print("continuum-mcp: --max-message-bytes must be at least 1024", file=sys.stderr)
        return 1
    if args.max_in_flight < 1:
        print(f"continuum-mcp: {MAX_IN_FLIGHT_FLAG} must be at least 1", file=sys.stderr)
        return 1
    if args.doctor:
        code, report = doctor(args.db, args.client_names)
        print(json.dumps(report, indent=2))  # ASCII: a name's bidi characters stay escaped
        if "error" in report:
            error = report["error"]
            print(_refusal(error["message"], error["code"], error["hint"]), file=sys.stderr)
        return code
    try:
        policy = load_policy(os.environ, Path.cwd())
        url = resolve_url(args.db)
        probe_store(url)
    except ContinuumError as e:
        print(_refusal(e.message, e.code, e.hint), file=sys.stderr)
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
        async with hardened_stdio_server(max_message_bytes=args.max_message_bytes,
                                         max_in_flight=args.max_in_flight) as (read, write):
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

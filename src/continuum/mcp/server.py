"""``continuum-mcp``: the MCP server (references/contract.md §9), over stdio or HTTP.

Start-up: parse flags, load the authorization policy (a malformed one refuses to
start), then serve over the hardened stdio transport. The ``initialize`` answer needs
nothing more, so the rest comes after it (``startup.py``): check the store URL without
creating or modifying anything and the approval rules, register the tools, start the
outbox deliverer; every other request waits for that. Every start-up failure is one
line on stderr and exit 1 (a confirm token reused as another secret, or too weak to
resist guessing, a store that is not usable and a malformed ``approvals.toml``
included). Logs go to stderr; stdout carries JSON-RPC alone. A presented confirm token
is compared only through the store's counter of wrong ones (``confirm_limit.py``), on
either transport.

``--doctor`` loads exactly what serving would (policy, store) and prints it as one JSON
document instead of serving, with what a mutating call and a ``continuum_confirm``
call from each ``--client-name`` would be told; ``continuum mcp doctor`` runs it. Each
client is logged once as it connects (``ClientLog``), with whether it may write.

``--transport streamable-http --listen HOST:PORT --token-file FILE`` serves the same
tools over HTTP instead (``http.py``): bearer tokens with roles (``roles.py``) replace
the allowlist, and TLS is required off loopback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
import anyio.to_thread
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer

from continuum.errors import ContinuumError
from continuum.log import LEVEL_ENV, LEVELS, BadLogLevel, check_level, configure, get_logger
from continuum.mcp.direct_calls import DirectCalls
from continuum.mcp.instructions import INSTRUCTIONS
from continuum.mcp.startup import AfterPreparation, Preparation, refusal, refusal_text
from continuum.serving.auth import ClientLog, Era, Policy, connecting_client, load_policy
from continuum.serving.confirm_limit import StoreConfirmLimit
from continuum.serving.flags import DEFAULT_HTTP_MAX_IN_FLIGHT, MAX_IN_FLIGHT_FLAG, flag_problem
from continuum.serving.transport import (
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MAX_MESSAGE_BYTES,
    hardened_stdio_server,
)
from continuum.version import __version__

if TYPE_CHECKING:
    from continuum.mcp.tools import Tools
    from continuum.serving.config import HttpConfig

# The store, the ledger, the runtime and the tools (tools.py) are imported where they are
# used, not here: a stdio server answers initialize without them (startup.py).

LEASE_RENEW_SECONDS = 10.0


class LogConnectingClients:
    """Server middleware (SDK 2.3, provisional API): logs each client once as it is
    first seen, with whether it may call mutating tools. It never alters or vetoes.

    A client named by ``initialize`` is logged just after its answer: at its next message
    (``notifications/initialized``) or, if it sends none, at ``flush`` as serving ends. A
    line written before the answer would load the logger (structlog, ~8 ms) on the way
    to it, and a client off the allowlist (every client, by default) gets a warning."""

    def __init__(self, policy: Policy) -> None:
        self._clients = ClientLog(policy)
        self._answering: tuple[str | None, Era] | None = None

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        self.flush()
        self.observe(ctx.method, ctx.params, ctx.meta)
        return await call_next(ctx)

    def observe(self, method: str, params: Mapping[str, Any] | None, meta: Any) -> None:
        """Note the client ``method``'s message names (also for a call taken past the
        SDK's pipeline: ``direct_calls.py``)."""
        with suppress(Exception):  # a log must never cost the client its request
            era, name = connecting_client(method, params, meta)
            if era is not None and method == "initialize":
                self._answering = (name, era)
            elif era is not None:
                self._clients.saw(name, era)

    def flush(self) -> None:
        """Log the client whose ``initialize`` was answered, if not yet logged."""
        if self._answering is not None:
            (name, era), self._answering = self._answering, None
            with suppress(Exception):
                self._clients.saw(name, era)


def bare_server(middleware: Sequence[Any] = ()) -> MCPServer[Any]:
    """The server without its tools: enough to answer ``initialize``."""
    return MCPServer(
        name="continuum", version=__version__, instructions=INSTRUCTIONS, middleware=[*middleware]
    )


def build_server(tools: Tools) -> MCPServer[Any]:
    """The server with its tools registered now (HTTP, and tests in process)."""
    from continuum.mcp.tools import register

    # Over HTTP the token's role decides, so the allowlist's connect log would mislead.
    server = bare_server([] if tools.by_role else [LogConnectingClients(tools.policy)])
    register(server, tools)
    return server


def checked_store(db: str | None) -> str:
    """The store's URL, checked without creating or modifying anything, and the approval
    rules that apply beside it and here read once (a malformed ``approvals.toml``: no start)."""
    from continuum.ledger.approval_rules import load_rules, rule_paths
    from continuum.store import probe_store, resolve_url

    url = resolve_url(db)
    probe_store(url)
    load_rules(rule_paths(str(Path.cwd()), url))
    return url


class _ArgumentParser(argparse.ArgumentParser):
    """Start-up failures are one line on stderr and exit 1, usage errors included
    (argparse's default is the usage text and exit 2; ``--db -x.db`` lands here)."""

    def error(self, message: str) -> NoReturn:
        self.exit(1, f"{self.prog}: {message} (see {self.prog} --help)\n")


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = _ArgumentParser(
        prog="continuum-mcp",
        description="continuum's MCP server over stdio (default) or streamable HTTP. On stdio, "
        "mutating tools are denied unless the client's name is on "
        "CONTINUUM_MCP_MUTATING_CLIENTS (or .continuum/mcp-policy.json); over "
        "HTTP, the role of each request's bearer token decides.",
    )
    ap.add_argument(
        "--db",
        default=None,
        metavar="URL",
        help="store: path, sqlite:///abs/path.db or postgresql://... "
        "(default: $CONTINUUM_DB, else ./continuum.db)",
    )
    ap.add_argument(
        "--transport",
        choices=["stdio", "streamable-http"],
        default="stdio",
        help="transport (default stdio)",
    )
    ap.add_argument(
        "--listen",
        default=None,
        metavar="HOST:PORT",
        help="streamable-http: address to serve on (TLS required off loopback)",
    )
    ap.add_argument(
        "--token-file",
        default=None,
        metavar="FILE",
        help="streamable-http: 'ROLE TOKEN' lines (roles read, submit, approve, admin); mode 600",
    )
    ap.add_argument("--tls-cert", default=None, metavar="PEM", help="streamable-http: certificate")
    ap.add_argument("--tls-key", default=None, metavar="PEM", help="streamable-http: private key")
    ap.add_argument(
        "--tls-client-ca",
        default=None,
        metavar="PEM",
        help="streamable-http: require client certificates signed by this CA",
    )
    ap.add_argument(
        "--ui",
        action="store_true",
        help="streamable-http: also serve the operator page at /ui/ (log in with a "
        "token of the token file; see references/operators.md)",
    )
    ap.add_argument(
        "--max-message-bytes",
        type=int,
        default=DEFAULT_MAX_MESSAGE_BYTES,
        metavar="N",
        help="largest JSON-RPC message accepted (default 1 MiB)",
    )
    ap.add_argument(
        MAX_IN_FLIGHT_FLAG,
        dest="max_in_flight",
        type=int,
        default=None,
        metavar="N",
        help="stdio: requests a client may have unanswered at once; more are "
        f"refused as busy until it reads the answers (default "
        f"{DEFAULT_MAX_IN_FLIGHT}); streamable-http: requests served at once, "
        f"all clients together (default {DEFAULT_HTTP_MAX_IN_FLIGHT})",
    )
    ap.add_argument(
        "--doctor",
        action="store_true",
        help="print what this server would load here, as JSON, and exit "
        "(0: it would start; 1: it would refuse)",
    )
    ap.add_argument(
        "--client-name",
        dest="client_names",
        action="append",
        default=[],
        metavar="NAME",
        help="with --doctor: say what this client would be told (repeatable)",
    )
    ap.add_argument(
        "--log-level",
        default=None,
        metavar="LEVEL",
        help=f"stderr log level: {', '.join(LEVELS)} (default warning; also $CONTINUUM_LOG_LEVEL)",
    )
    ap.add_argument("--version", action="version", version=f"continuum-mcp {__version__}")
    return ap.parse_args(argv)


def _store_report(db: str | None) -> dict[str, Any]:
    from continuum.store import probe_store, redact_url, resolve_url

    url = resolve_url(db)
    return {"url": redact_url(url), "exists": probe_store(url)}


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
        report["store"] = _store_report(db)
    except ContinuumError as e:
        return 1, {**report, "starts": False, "error": e.to_dict()}
    report["clients"] = [
        {
            "name": name,
            **{
                kind: {**decision.as_dict(), "text": decision.text()}
                for kind, decision in policy.verdicts(name).items()
            },
        }
        for name in client_names
    ]
    return 0, {**report, "starts": True}


async def renew_leases(tools: Tools, interval: float = LEASE_RENEW_SECONDS) -> None:
    """Keep the leases of actions this server is performing fresh (other hosts judge
    liveness by the lease alone); a store error here must never stop the server.

    The store work runs on a worker thread: on the event loop a slow store (a PostgreSQL
    round trip, a locked SQLite file) would stall every session the server is serving.
    """
    while True:
        await anyio.sleep(interval)
        try:
            await anyio.to_thread.run_sync(tools.renew_leases)
        except ContinuumError as e:
            get_logger("continuum.mcp").warning("mcp.lease_renewal_failed", code=e.code)


def with_confirm_limit(policy: Policy, url: str, channel: str) -> Policy:
    """``policy`` comparing a presented confirm token only through the store's counter of
    wrong ones (contract §5: failed attempts are limited per store, on every transport)."""
    if policy.confirm_token is None:
        return policy
    return dataclasses.replace(policy, confirm_limit=StoreConfirmLimit(url, channel))


def _http_config(args: argparse.Namespace) -> HttpConfig:
    from continuum.serving.config import load_http_config  # loaded only to serve over HTTP

    return load_http_config(
        listen=args.listen,
        token_file=args.token_file,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        max_body=args.max_message_bytes,
        max_in_flight=args.max_in_flight or DEFAULT_HTTP_MAX_IN_FLIGHT,
        env=os.environ,
    )


def http_doctor(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    """``--doctor`` for the HTTP transport: what it would load (roles counted, no token)."""
    report: dict[str, Any] = {"server": {"version": __version__, "cwd": str(Path.cwd())}}
    try:
        report["http"] = _http_config(args).describe()
        report["store"] = _store_report(args.db)
    except ContinuumError as e:
        return 1, {**report, "starts": False, "error": e.to_dict()}
    return 0, {**report, "starts": True}


def serve_http(args: argparse.Namespace) -> int:
    """Load and check everything, bind, then serve over HTTP until SIGTERM/SIGINT."""
    # The HTTP stack: loaded only to serve over HTTP.
    from continuum.mcp import http
    from continuum.mcp.tools import Tools
    from continuum.serving import server as serving
    from continuum.store import redact_url
    from continuum.ui.mount import operator_page

    try:
        config = _http_config(args)
        url = checked_store(args.db)
        sock = serving.bind(config.listen)
    except ContinuumError as e:
        print(refusal(e.message, e.code, e.hint), file=sys.stderr)
        return 1
    get_logger("continuum.mcp").info("mcp.starting", store=redact_url(url), **config.describe())
    # Over HTTP the allowlist and _meta.authToken do not apply: only the confirm token.
    tools = Tools(
        url,
        with_confirm_limit(Policy(confirm_token=config.confirm_token), url, "http"),
        by_role=True,
    )
    server = build_server(tools)
    where = config.listen.url(sock.getsockname()[1], config.tls is not None)
    ui_routes, ui_paths = operator_page(config, url) if args.ui else ([], [])
    app = http.build_app(
        server._lowlevel_server,
        config,  # SDK 2.3: no public accessor
        extra_routes=ui_routes,
        open_paths=ui_paths,
        background=[lambda: renew_leases(tools)],
        on_ready=lambda: http.announce(where, config),
    )
    level = check_level(args.log_level or os.environ.get(LEVEL_ENV) or "warning")
    from continuum.ledger.deliverer import delivering  # with a webhook only: not at start-up
    from continuum.runtime.verdicts import VerdictWatch

    with delivering(url, str(Path.cwd()), "continuum-mcp", watch=VerdictWatch()):
        return serving.serve(app, sock, config.tls, log_level=getattr(logging, level.upper()))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        configure(args.log_level)
    except BadLogLevel as e:  # a bad --log-level or CONTINUUM_LOG_LEVEL: refuse to start
        print(refusal(str(e), "usage.bad_log_level", "the default is warning"), file=sys.stderr)
        return 1
    if args.max_message_bytes < 1024:
        print("continuum-mcp: --max-message-bytes must be at least 1024", file=sys.stderr)
        return 1
    if args.max_in_flight is not None and args.max_in_flight < 1:
        print(f"continuum-mcp: {MAX_IN_FLIGHT_FLAG} must be at least 1", file=sys.stderr)
        return 1
    problem = flag_problem(
        args.transport,
        {
            "--listen": args.listen,
            "--token-file": args.token_file,
            "--tls-cert": args.tls_cert,
            "--tls-key": args.tls_key,
            "--tls-client-ca": args.tls_client_ca,
        },
    )
    if problem is None and args.ui and args.transport != "streamable-http":
        problem = "--ui is for --transport streamable-http (the page is served over HTTP)"
    if problem:
        print(refusal(problem, "usage.bad_flags", "see continuum-mcp --help"), file=sys.stderr)
        return 1
    if args.doctor:
        code, report = (
            doctor(args.db, args.client_names) if args.transport == "stdio" else http_doctor(args)
        )
        print(json.dumps(report, indent=2))  # ASCII: a name's bidi characters stay escaped
        if "error" in report:
            error = report["error"]
            print(refusal(error["message"], error["code"], error["hint"]), file=sys.stderr)
        return code
    if args.transport == "streamable-http":
        return serve_http(args)
    try:
        policy = load_policy(os.environ, Path.cwd())
    except ContinuumError as e:
        print(refusal(e.message, e.code, e.hint), file=sys.stderr)
        return 1
    return serve_stdio(args, policy)


def serve_stdio(args: argparse.Namespace, policy: Policy) -> int:
    """Answer ``initialize`` at once; check the store and the rules, register the tools and
    start the deliverer after it (``startup.py``); serve until stdin ends."""
    running = ExitStack()  # the deliverer, once started

    def check() -> str:
        url = checked_store(args.db)
        from continuum.store import redact_url

        get_logger("continuum.mcp").info("mcp.starting", store=redact_url(url), **policy.describe())
        return url

    def prepare() -> Tools:  # on a worker thread, after initialized (startup.py)
        url = check()
        from continuum.ledger.deliverer import delivering  # its HTTP client loads on first use
        from continuum.mcp.tools import Tools, register
        from continuum.runtime.verdicts import VerdictWatch

        tools = Tools(url, with_confirm_limit(policy, url, "stdio"))
        register(server, tools)
        running.enter_context(
            delivering(url, str(Path.cwd()), "continuum-mcp", watch=VerdictWatch())
        )
        return tools

    def refuse(e: ContinuumError) -> None:
        print(refusal_text(e), file=sys.stderr)

    preparation = Preparation(prepare, check, refuse, background=renew_leases)
    # Every request but initialize and ping waits for the preparation (startup.py).
    clients = LogConnectingClients(policy)
    server = bare_server([clients, AfterPreparation(preparation)])
    # The effect path's calls past the SDK's request pipeline (direct_calls.py).
    direct = DirectCalls(server, preparation, clients.observe)
    server._lowlevel_server.middleware.append(direct)  # SDK 2.3: no public accessor
    max_in_flight = args.max_in_flight or DEFAULT_MAX_IN_FLIGHT

    async def serve() -> None:
        async with hardened_stdio_server(
            max_message_bytes=args.max_message_bytes,
            max_in_flight=max_in_flight,
            divert=direct.divert,
        ) as (read, write):
            lowlevel = server._lowlevel_server  # SDK 2.3 has no public accessor (see transport.py)
            async with anyio.create_task_group() as tg:
                preparation.bind(tg)
                direct.spawn = tg.start_soon
                await lowlevel.run(read, write, lowlevel.create_initialization_options())
                tg.cancel_scope.cancel()

    try:
        with running:
            anyio.run(serve)
            clients.flush()  # a client that left right after its initialize answer
            refused = preparation.finish()
    except KeyboardInterrupt:
        return 0
    return 1 if refused is not None else 0

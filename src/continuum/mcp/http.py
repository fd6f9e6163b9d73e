"""``continuum-mcp --transport streamable-http``: the same tools over HTTP, with bearer
tokens, roles and TLS.

What a request meets, outermost first:

1. ``InFlightLimit``: at most ``max_in_flight`` requests being served at once (GET
   streams, which stay open for a session's life, are bounded by ``MAX_SESSIONS``
   instead); more are answered ``503`` with JSON-RPC error ``-32050`` (busy).
2. ``BearerAuth``: ``roles.authenticate`` on every request, on loopback too: no
   ``Authorization: Bearer TOKEN`` (or a token in the URL's path or query string, or in
   another header) and nothing else is looked at (``401`` with ``WWW-Authenticate:
   Bearer``, or ``400``; the body a JSON-RPC error saying where the token goes; logged
   without the token, the query string, or any path the server does not serve). The
   request's ``Grant`` (role, token-file line) goes into the ASGI scope, where the tools
   read it (``roles.grant_from_context``); the SDK's session manager
   also binds each session to the token that opened it.
3. The Starlette app: the SDK's streamable HTTP session manager at ``/mcp`` (both
   protocol eras: the ``initialize`` handshake with sessions, and the 2026-07-28
   per-request envelope), bodies over ``--max-message-bytes`` refused with ``413``, and
   on a loopback bind the SDK's Host/Origin checks against DNS rebinding.

Adding routes (``--ui`` does, through ``ui.mount.operator_page``): ``build_app(...,
extra_routes=[...])`` takes Starlette routes; they sit behind the same bearer check (a
path listed in ``open_paths`` skips it: such a route must check its own credentials), and a handler
reads the caller's role with ``request_grant(request)`` and checks it with
``tokens.allows(grant.role, "continuum_confirm")`` (or any name in ``tokens.ROLE_TOOLS``).

The configuration (listen address, TLS, token file, confirm token) is
``continuum.serving.config`` and serving the app is ``continuum.serving.server``, both
shared with ``continuum ui``. TLS: required off loopback (any bind that is not
127.0.0.0/8 or ::1, 0.0.0.0 included); minimum TLS 1.3; ``--tls-client-ca`` makes client certificates required.
Served by uvicorn on a socket bound here (so a busy port is a one-line start-up
error), with no access log (a URL may hold what should not be logged). SIGTERM and
SIGINT stop accepting, give requests in flight ``SHUTDOWN_GRACE_SECONDS``, and exit 0.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.lowlevel.server import Server as LowLevelServer
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from continuum.log import get_logger
from continuum.mcp.roles import Refusal, authenticate
from continuum.serving.config import (
    MCP_PATH,
    HttpConfig,
    Listen,
)
from continuum.serving.server import (
    InFlightLimit,
    peer,
    send_json,
)
from continuum.serving.tokens import (
    GRANT_SCOPE_KEY,
    Grant,
    TokenTable,
)

__all__ = [
    "AUTH_REFUSED",
    "MAX_SESSIONS",
    "BearerAuth",
    "announce",
    "build_app",
    "loggable_path",
    "request_grant",
]

MAX_SESSIONS = 256
"""Open handshake-era sessions at most; one more is answered 503 until one ends."""
SESSION_IDLE_SECONDS = 30 * 60
AUTH_REFUSED = -32041
"""JSON-RPC code (server-defined range) of a request refused for its bearer token."""

_log = get_logger("continuum.mcp.http")


# --- configuration -----------------------------------------------------------------


# --- ASGI layers -------------------------------------------------------------------


def loggable_path(path: object, known: frozenset[str]) -> str:
    """``path`` if it is one the server serves, else a placeholder: any other path may hold
    a token (``/mcp/TOKEN``), and a log line must never carry one."""
    if isinstance(path, str) and path in known:
        return path
    return "(another path, not logged)"


class BearerAuth:
    """Every request must carry a valid bearer token (``roles.authenticate``).

    ``known_paths``: the paths a refusal may name in the log (any other is not logged)."""

    def __init__(
        self,
        app: ASGIApp,
        tokens: TokenTable,
        open_paths: Sequence[str] = (),
        known_paths: Sequence[str] = (MCP_PATH,),
    ) -> None:
        self.app, self.tokens, self.open_paths = app, tokens, frozenset(open_paths)
        self.known_paths = frozenset(known_paths) | self.open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # websockets and anything newer: not served
            return
        if scope.get("path") in self.open_paths:
            await self.app(scope, receive, send)
            return
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
        try:
            grant = authenticate(
                headers,
                scope.get("query_string", b"").decode("latin-1"),
                self.tokens,
                str(scope.get("path") or ""),
            )
        except Refusal as refusal:
            # Method and a known path only: the query string, or another path, may hold a
            # token. JSON keeps the peer's text inert in a terminal.
            with suppress(Exception):
                _log.warning(
                    "mcp.http_refused",
                    code=refusal.code,
                    status=refusal.status,
                    method=scope.get("method"),
                    path=loggable_path(scope.get("path"), self.known_paths),
                    peer=peer(scope),
                )
            error = "invalid_token" if refusal.status == 401 else "invalid_request"
            challenge = f'Bearer realm="continuum-mcp", error="{error}"'
            extra = [(b"www-authenticate", challenge.encode())] if refusal.status == 401 else []
            # A JSON-RPC error body: the SDK's client hands its message to the caller.
            await send_json(
                send,
                refusal.status,
                {
                    "jsonrpc": "2.0",
                    "id": None,
                    "error": {
                        "code": AUTH_REFUSED,
                        "message": refusal.message,
                        "data": {"code": refusal.code, "status": refusal.status},
                    },
                },
                extra,
            )
            return
        scope[GRANT_SCOPE_KEY] = grant
        # The SDK binds each session to the credential that opened it.
        scope["user"] = AuthenticatedUser(
            AccessToken(token=grant.principal, client_id=grant.principal, scopes=[grant.role.value])
        )
        await self.app(scope, receive, send)


def request_grant(request: Request) -> Grant | None:
    """The grant ``BearerAuth`` attached to this request (None on an open path)."""
    grant = request.scope.get(GRANT_SCOPE_KEY)
    return grant if isinstance(grant, Grant) else None


def _security(listen: Listen) -> TransportSecuritySettings | None:
    """On a loopback bind, the SDK's Host/Origin checks (DNS rebinding); elsewhere the
    host name is the operator's, and the bearer token is the gate."""
    if not listen.loopback:
        return None
    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"{scheme}://{h}" for scheme in ("http", "https") for h in hosts],
    )


def build_app(
    server: LowLevelServer[Any],
    config: HttpConfig,
    *,
    extra_routes: Sequence[BaseRoute] = (),
    open_paths: Sequence[str] = (),
    background: Sequence[Callable[[], Any]] = (),
    on_ready: Callable[[], None] | None = None,
) -> ASGIApp:
    """The whole ASGI application: limits and bearer check around the MCP endpoint at
    ``MCP_PATH`` and any ``extra_routes``; ``background`` coroutines run while it serves."""
    manager = StreamableHTTPSessionManager(
        app=server,
        security_settings=_security(config.listen),
        max_request_body_size=config.max_body,
        session_idle_timeout=SESSION_IDLE_SECONDS,
        max_sessions=MAX_SESSIONS,
    )

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with manager.run(), anyio.create_task_group() as tg:
            for task in background:
                tg.start_soon(task)
            if on_ready is not None:
                on_ready()
            yield
            tg.cancel_scope.cancel()

    routes: list[BaseRoute] = [
        Route(MCP_PATH, endpoint=StreamableHTTPASGIApp(manager)),
        *extra_routes,
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    known = [route.path for route in routes if isinstance(route, Route)]
    return InFlightLimit(BearerAuth(app, config.tokens, open_paths, known), config.max_in_flight)


# --- serving -----------------------------------------------------------------------


def announce(url: str, config: HttpConfig) -> None:
    """The one line an operator (and a test) reads to know where the server listens."""
    tls = (
        "TLS 1.3" + (", client certificates required" if config.client_certificates else "")
        if config.tls is not None
        else "no TLS (loopback)"
    )
    sys.stderr.write(
        f"continuum-mcp: serving MCP over streamable HTTP at {url} ({tls}; "
        f"bearer tokens from {config.tokens.source})\n"
    )
    sys.stderr.flush()

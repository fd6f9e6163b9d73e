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
   without the token, the query string, or any path the server does not serve). The request's ``Grant`` (role, token-file line) goes into the ASGI scope,
   where the tools read it (``roles.grant_from_context``); the SDK's session manager
   also binds each session to the token that opened it.
3. The Starlette app: the SDK's streamable HTTP session manager at ``/mcp`` (both
   protocol eras: the ``initialize`` handshake with sessions, and the 2026-07-28
   per-request envelope), bodies over ``--max-message-bytes`` refused with ``413``, and
   on a loopback bind the SDK's Host/Origin checks against DNS rebinding.

Adding routes (``--ui`` does, through ``operator_page``): ``build_app(...,
extra_routes=[...])`` takes Starlette routes; they sit behind the same bearer check (a path listed in
``open_paths`` skips it: such a route must check its own credentials), and a handler
reads the caller's role with ``request_grant(request)`` and checks it with
``roles.allows(grant.role, "continuum_confirm")`` (or any name in ``roles.ROLE_TOOLS``).

TLS: required off loopback (any bind that is not 127.0.0.0/8 or ::1, 0.0.0.0
included); minimum TLS 1.3; ``--tls-client-ca`` makes client certificates required.
Served by uvicorn on a socket bound here (so a busy port is a one-line start-up
error), with no access log (a URL may hold what should not be logged). SIGTERM and
SIGINT stop accepting, give requests in flight ``SHUTDOWN_GRACE_SECONDS``, and exit 0.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import signal
import socket
import ssl
import stat
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import structlog
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.lowlevel.server import Server as LowLevelServer
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from continuum.errors import UsageError
from continuum.mcp.auth import (
    ALLOW_ALIAS_ENV,
    ALLOW_ENV,
    CLIENT_TOKENS_ENV,
    CONFIRM_TOKEN_ENV,
    TOKEN_ENV,
    Secret,
    check_confirm_token_strength,
    load_confirm_token,
)
from continuum.mcp.flags import DEFAULT_HTTP_MAX_IN_FLIGHT as DEFAULT_HTTP_MAX_IN_FLIGHT
from continuum.mcp.flags import HTTP_FLAGS as HTTP_FLAGS
from continuum.mcp.flags import flag_problem as flag_problem
from continuum.mcp.roles import (
    GRANT_SCOPE_KEY,
    Grant,
    Refusal,
    TokenTable,
    allows,
    authenticate,
    check_confirm_token_apart,
    load_token_file,
)
from continuum.mcp.transport import MAX_IN_FLIGHT_FLAG, SERVER_BUSY
from continuum.ui import ConfirmGate, Principal, operator_routes, ui_paths

__all__ = [
    "AUTH_REFUSED",
    "DEFAULT_HTTP_MAX_IN_FLIGHT",
    "MAX_SESSIONS",
    "MCP_PATH",
    "SHUTDOWN_GRACE_SECONDS",
    "BearerAuth",
    "HttpConfig",
    "InFlightLimit",
    "Listen",
    "announce",
    "bind",
    "build_app",
    "flag_problem",
    "load_http_config",
    "loggable_path",
    "operator_page",
    "parse_listen",
    "request_grant",
    "serve",
    "tls_context",
]

MCP_PATH = "/mcp"
MAX_SESSIONS = 256
"""Open handshake-era sessions at most; one more is answered 503 until one ends."""
SESSION_IDLE_SECONDS = 30 * 60
SHUTDOWN_GRACE_SECONDS = 5
AUTH_REFUSED = -32041
"""JSON-RPC code (server-defined range) of a request refused for its bearer token."""
STDIO_GATE_VARIABLES = (ALLOW_ENV, ALLOW_ALIAS_ENV, TOKEN_ENV, CLIENT_TOKENS_ENV)

_log = structlog.get_logger("continuum.mcp.http")


# --- configuration -----------------------------------------------------------------


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        return _is_loopback(self.host)

    def url(self, port: int, tls: bool) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if tls else 'http'}://{host}:{port}{MCP_PATH}"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _bad(code: str, message: str, hint: str) -> UsageError:
    return UsageError(message, code=code, hint=hint)


def parse_listen(text: str) -> Listen:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6); the host an IP address or ``localhost``."""
    hint = "write --listen HOST:PORT, e.g. 127.0.0.1:8765, 0.0.0.0:8765 or [::1]:8765"
    host, colon, port_text = text.rpartition(":")
    if not colon or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise _bad("mcp.bad_listen", f"--listen {text!r} is not HOST:PORT", hint)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise _bad(
            "mcp.bad_listen",
            f"--listen {text!r}: an IPv6 address needs brackets",
            "write it as [ADDRESS]:PORT, e.g. [::1]:8765",
        )
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise _bad(
                "mcp.bad_listen",
                f"--listen {text!r}: {host!r} is not an IP address",
                "give an IP address to bind (or localhost); " + hint,
            ) from None
    return Listen(host, int(port_text))


def _readable_file(path: Path, flag: str) -> None:
    try:
        info = path.stat()
    except FileNotFoundError:
        raise _bad(
            "mcp.bad_tls", f"{flag} {path}: no such file", "give the path of an existing PEM file"
        ) from None
    except OSError as e:
        raise _bad(
            "mcp.bad_tls",
            f"{flag} {path}: cannot be read ({e.strerror})",
            "check the path and its permissions",
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise _bad("mcp.bad_tls", f"{flag} {path}: not a regular file", "give a PEM file")
    if not os.access(path, os.R_OK):
        raise _bad(
            "mcp.bad_tls",
            f"{flag} {path}: this user may not read it",
            "make it readable by the user that runs the server",
        )


class _EncryptedKey(Exception):
    pass


def _no_password() -> bytes:
    raise _EncryptedKey  # never prompt on a terminal: a server has nobody to type it


def tls_context(cert: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    """A server context: TLS 1.3 at least, this certificate and key, and with
    ``client_ca`` client certificates signed by it required."""
    _readable_file(cert, "--tls-cert")
    _readable_file(key, "--tls-key")
    if key.stat().st_mode & 0o007:
        raise _bad(
            "mcp.bad_tls",
            f"--tls-key {key}: the private key is readable or writable by others",
            f"run `chmod 600 {key}` (or 640 with a group such as ssl-cert)",
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    try:
        context.load_cert_chain(cert, key, password=_no_password)
    except _EncryptedKey:
        raise _bad(
            "mcp.bad_tls",
            f"--tls-key {key}: the key is encrypted",
            "give an unencrypted key file, readable only by the server's user "
            "(openssl pkey -in KEY -out PLAIN.key)",
        ) from None
    except (ssl.SSLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or str(e)
        raise _bad(
            "mcp.bad_tls",
            f"--tls-cert {cert} / --tls-key {key}: they do not load as a "
            f"certificate and its key ({reason})",
            "give a PEM certificate and the PEM private key that belongs to it",
        ) from None
    if client_ca is not None:
        _readable_file(client_ca, "--tls-client-ca")
        try:
            context.load_verify_locations(cafile=client_ca)
        except (ssl.SSLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", None) or str(e)
            raise _bad(
                "mcp.bad_tls",
                f"--tls-client-ca {client_ca}: does not load as PEM CA certificates ({reason})",
                "give the PEM certificate(s) of the CA that signs client certificates",
            ) from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


@dataclass(frozen=True)
class HttpConfig:
    """Everything the HTTP transport loads at start-up (no secrets are shown)."""

    listen: Listen
    tokens: TokenTable
    tls: ssl.SSLContext | None
    client_certificates: bool
    confirm_token: Secret | None
    max_body: int
    max_in_flight: int

    def describe(self) -> dict[str, Any]:
        return {
            "transport": "streamable-http",
            "listen": f"{self.listen.host}:{self.listen.port}",
            "loopback": self.listen.loopback,
            "tls": self.tls is not None,
            "tls_minimum": "TLSv1.3" if self.tls is not None else None,
            "client_certificates": self.client_certificates,
            "confirm_over_mcp": self.confirm_token is not None,
            "max_message_bytes": self.max_body,
            "max_in_flight": self.max_in_flight,
            **self.tokens.describe(),
        }


def load_http_config(
    *,
    listen: str,
    token_file: str,
    tls_cert: str | None,
    tls_key: str | None,
    tls_client_ca: str | None,
    max_body: int,
    max_in_flight: int,
    env: Mapping[str, str],
) -> HttpConfig:
    """Check and load what serving over HTTP needs; ``UsageError`` on the first problem."""
    where = parse_listen(listen)
    if tls_cert is None and not where.loopback:
        raise _bad(
            "mcp.tls_required",
            f"--listen {listen} is not a loopback address and TLS "
            "is off: tokens and results would cross the network in plaintext",
            "give --tls-cert and --tls-key (see references/operators.md), or listen on 127.0.0.1",
        )
    present = [name for name in STDIO_GATE_VARIABLES if env.get(name) is not None]
    if present:
        raise _bad(
            "mcp.stdio_setting_over_http",
            f"{present[0]} is set, but over HTTP the "
            "bearer token's role decides who may call what (the allowlist and "
            "_meta.authToken are stdio settings)",
            f"unset {', '.join(present)} for this server and give roles in --token-file instead",
        )
    tokens = load_token_file(token_file)
    confirm = load_confirm_token(env)
    check_confirm_token_apart(tokens, confirm)
    check_confirm_token_strength(confirm)  # after reuse: a reused token is named as such
    tls = (
        tls_context(Path(tls_cert), Path(tls_key), Path(tls_client_ca) if tls_client_ca else None)
        if tls_cert is not None and tls_key is not None
        else None
    )
    return HttpConfig(
        where, tokens, tls, tls_client_ca is not None, confirm, max_body, max_in_flight
    )


# --- ASGI layers -------------------------------------------------------------------


async def _send_json(
    send: Send, status: int, body: dict[str, Any], headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


def _peer(scope: Scope) -> str | None:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else None


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
                    peer=_peer(scope),
                )
            error = "invalid_token" if refusal.status == 401 else "invalid_request"
            challenge = f'Bearer realm="continuum-mcp", error="{error}"'
            extra = [(b"www-authenticate", challenge.encode())] if refusal.status == 401 else []
            # A JSON-RPC error body: the SDK's client hands its message to the caller.
            await _send_json(
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


class InFlightLimit:
    """At most ``limit`` requests being served at once; GET (a session's event stream,
    bounded by ``MAX_SESSIONS``) is not counted. Over the limit: 503, busy, retry."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit, self.active = app, limit, 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") == "GET":
            await self.app(scope, receive, send)
            return
        if self.active >= self.limit:
            with suppress(Exception):
                _log.warning("mcp.http_busy", limit=self.limit, peer=_peer(scope))
            message = (
                f"{self.limit} requests are being served; send this request again "
                f"shortly (the server's {MAX_IN_FLIGHT_FLAG} is {self.limit})"
            )
            await _send_json(
                send,
                503,
                {
                    "jsonrpc": "2.0",
                    "id": None,
                    "error": {
                        "code": SERVER_BUSY,
                        "message": message,
                        "data": {"limit": self.limit, "flag": MAX_IN_FLIGHT_FLAG},
                    },
                },
                [(b"retry-after", b"1")],
            )
            return
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1


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


def operator_page(config: HttpConfig, store_url: str) -> tuple[list[BaseRoute], list[str]]:
    """The operator page's routes (``--ui``, ``continuum ui``) and their paths, which skip
    the bearer check: the page logs in with a token from the same token file, POSTed in a
    form, and acts only for a role that may call ``continuum_confirm`` and only with the
    person's confirm token (``CONTINUUM_MCP_CONFIRM_TOKEN``) typed into each form; without
    one configured the page is read-only (said on stderr here, at start-up)."""
    secret = config.confirm_token
    gate = ConfirmGate(secret.matches if secret is not None else None, CONFIRM_TOKEN_ENV)
    if secret is None:
        sys.stderr.write(
            f"continuum: the operator page is read-only ({CONFIRM_TOKEN_ENV} is not set: "
            "confirm, reconcile and decide need the person's confirm token)\n"
        )
        sys.stderr.flush()

    def principal(token: str) -> Principal | None:
        grant = config.tokens.lookup(token) if token else None
        if grant is None:
            return None
        return Principal(
            grant.role.value,
            allows(grant.role, "continuum_confirm"),
            f"token-file line {grant.line}",
        )

    return (
        operator_routes(store_url, principal, confirm=gate, secure=config.tls is not None),
        ui_paths(),
    )


# --- serving -----------------------------------------------------------------------


def bind(listen: Listen) -> socket.socket:
    """A listening socket on ``listen``; ``UsageError`` (one line) if that fails."""
    host = "127.0.0.1" if listen.host == "localhost" else listen.host
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP, so asyncio sets TCP_NODELAY on each connection (with proto 0 it
    # does not, and every keep-alive answer after the first waited 40 ms for a delayed ACK).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, listen.port))
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise _bad(
            "mcp.cannot_listen",
            f"cannot listen on {listen.host}:{listen.port} ({e.strerror or e})",
            "choose another port or address, or stop what holds it",
        ) from None
    sock.set_inheritable(False)
    return sock


class _StructlogHandler(logging.Handler):
    """The SDK's and uvicorn's stdlib log records, as our JSON lines on stderr (JSON keeps
    a peer's text, such as a Host header, inert in a terminal)."""

    def emit(self, record: logging.LogRecord) -> None:
        with suppress(Exception):
            structlog.get_logger(record.name).log(record.levelno, record.getMessage())


@contextmanager
def _stdlib_logs(level: int) -> Iterator[None]:
    # MCPServer() installs a plain-text root handler (logging.basicConfig): replaced here,
    # so a peer's text is never printed raw.
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    root.handlers = [_StructlogHandler(level)]
    root.setLevel(level)
    try:
        yield
    finally:
        root.handlers = saved_handlers
        root.setLevel(saved_level)


def serve(
    app: ASGIApp,
    sock: socket.socket,
    tls: ssl.SSLContext | None,
    *,
    log_level: int = logging.WARNING,
    connection_limit: int | None = None,
) -> int:
    """Serve ``app`` on ``sock`` until SIGTERM or SIGINT; then finish (grace period) and
    return 0."""
    import uvicorn  # only the HTTP transport pays for importing it

    class Server(uvicorn.Server):
        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn re-raises a caught signal after shutting down (the process would die
            # by it); a finished graceful shutdown is a normal exit here.
            if not _main_thread():
                yield
                return
            saved = {
                sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)
            }
            try:
                yield
            finally:
                for sig, handler in saved.items():
                    signal.signal(sig, handler)

    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        http="h11",
        ws="none",
        loop="asyncio",
        lifespan="on",
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
        limit_concurrency=connection_limit,
        ssl_context_factory=(lambda _config, _default: tls) if tls is not None else None,
    )
    with _stdlib_logs(log_level):
        Server(config).run(sockets=[sock])
    return 0


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


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

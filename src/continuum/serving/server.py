"""Serving an ASGI app the way every continuum HTTP server does: a socket bound here (a busy
port is a one-line start-up error), a bound on requests in flight (503, JSON-RPC busy),
uvicorn without an access log (a URL may hold what should not be logged), library logs as
our JSON lines on stderr, and SIGTERM/SIGINT that stop accepting, give requests in flight
``SHUTDOWN_GRACE_SECONDS`` and exit 0.

Imports the leaves and the rest of ``serving``."""

from __future__ import annotations

import json
import logging
import signal
import socket
import ssl
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from continuum.log import get_logger
from continuum.serving.config import (
    Listen,
    bad_setting,
)
from continuum.serving.flags import MAX_IN_FLIGHT_FLAG, SERVER_BUSY

_log = get_logger("continuum.mcp.http")

SHUTDOWN_GRACE_SECONDS = 5


async def send_json(
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


def peer(scope: Scope) -> str | None:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else None


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
                _log.warning("mcp.http_busy", limit=self.limit, peer=peer(scope))
            message = (
                f"{self.limit} requests are being served; send this request again "
                f"shortly (the server's {MAX_IN_FLIGHT_FLAG} is {self.limit})"
            )
            await send_json(
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
        raise bad_setting(
            "mcp.cannot_listen",
            f"cannot listen on {listen.host}:{listen.port} ({e.strerror or e})",
            "choose another port or address, or stop what holds it",
        ) from None
    sock.set_inheritable(False)
    return sock


def _stdlib_line(record: logging.LogRecord) -> None:
    """One stdlib record as our JSON line, at its level."""
    logger = get_logger(record.name)
    if record.levelno >= logging.CRITICAL:
        logger.critical(record.getMessage())
    elif record.levelno >= logging.ERROR:
        logger.error(record.getMessage())
    elif record.levelno >= logging.WARNING:
        logger.warning(record.getMessage())
    elif record.levelno >= logging.INFO:
        logger.info(record.getMessage())
    else:
        logger.debug(record.getMessage())


class _StructlogHandler(logging.Handler):
    """The SDK's and uvicorn's stdlib log records, as our JSON lines on stderr (JSON keeps
    a peer's text, such as a Host header, inert in a terminal)."""

    def emit(self, record: logging.LogRecord) -> None:
        with suppress(Exception):
            _stdlib_line(record)


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

"""The gateway's upstream MCP server: a command started on stdio, or an endpoint reached
over streamable HTTP; either one started or reached again after it was lost.

An HTTP upstream is a separate service: it restarts (its sessions are gone, and it answers
404 to the old session id), or its connection drops. A stdio upstream is the gateway's own
child: it can crash, exit or stop reading. Without a new session every call after that
would be refused until the gateway itself was restarted (for a host, a new agent session).
``UpstreamSessions`` opens the session (for stdio: starts the command, behind a new relay)
in a task of its own (an anyio context must end in the task that entered it) and opens a
new one when the gateway asks (``again``): on the next call after a loss, once per call at
most, bounded by ``RECONNECT_TIMEOUT``; an attempt still under way when that bound passes
goes on, and the next call waits for it instead of starting another. The lost one is
ended first (a stdio upstream still running is stopped as at the gateway's end: stdin
closed, a grace period, its process group terminated). What was in flight when the
session was lost is not retried (a registered call is ``unknown``, as before); the gateway
judges the new session's tools against the pins before it forwards anything.
"""

from __future__ import annotations

import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskStatus
from mcp import types
from mcp.client.session import ClientSession

from continuum.errors import UsageError
from continuum.gateway.relay import Relay, open_stdio_upstream
from continuum.log import get_logger
from continuum.version import __version__

if TYPE_CHECKING:
    from continuum.gateway.http_leg import HttpLeg

log = get_logger("continuum.gateway")

STARTUP_TIMEOUT = 60.0  # seconds the upstream may take to start and list its tools
RECONNECT_TIMEOUT = 10.0  # seconds a call waits for a lost HTTP upstream to be reached again

Opened = tuple[ClientSession, types.InitializeResult]


# -- naming and checking the upstream ----------------------------------------------------

_INTERPRETERS = {"python", "python3", "node", "npx", "uvx", "uv", "deno", "bun", "pipx", "sh"}


def upstream_name(command: Sequence[str]) -> str:
    """A stable name for the upstream server, from its command line: the program's name,
    or for an interpreter (``python``, ``node``, ``npx``, ...) its first argument that is
    not an option (``python upstream_server.py`` -> ``upstream_server``)."""
    words = list(command)
    name = Path(words[0]).name if words else "upstream"
    base = name.split(".")[0].rstrip("0123456789.")
    if base in _INTERPRETERS or name.startswith("python"):
        rest = iter(words[1:])
        for word in rest:
            if word == "-m":
                name = next(rest, name)
                break
            if not word.startswith("-"):
                name = Path(word).name
                break
    for suffix in (".py", ".js", ".mjs", ".ts"):
        name = name.removesuffix(suffix)
    name = name.rsplit("/", 1)[-1].split("@")[0] or "upstream"
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name)[:100]


_LOOPBACK = {"127.0.0.1", "::1", "localhost"}
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_ENV_VALUE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def _bad_upstream(problem: str, hint: str) -> UsageError:
    return UsageError(problem, code="gateway.bad_upstream", hint=hint)


def check_upstream_url(url: str) -> str:
    """``url`` if it can name a streamable HTTP upstream: ``https://``, or ``http://`` on
    loopback only (the calls and their answers are the ledger's evidence), and no
    credentials in it (they would be logged: use ``--header``)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as e:
        raise _bad_upstream(
            f"--url {url!r} is not a URL ({e})", "e.g. --url https://host/mcp"
        ) from e
    if parts.scheme not in ("http", "https") or not host:
        raise _bad_upstream(
            f"--url {url!r} is not an http(s) URL", "e.g. --url https://billing.example.com/mcp"
        )
    if parts.username is not None or parts.password is not None:
        raise _bad_upstream(
            "--url holds credentials, which would be logged and stored",
            "pass them as a header instead: --header 'Authorization: Bearer $TOKEN_VAR'",
        )
    if parts.scheme == "http" and host not in _LOOPBACK:
        raise _bad_upstream(
            f"--url {url!r} is plain http to {host}, off this machine",
            "use https:// (plain http only to 127.0.0.1, ::1 or localhost)",
        )
    return url


def url_name(url: str) -> str:
    """A stable name for an HTTP upstream: its host, and its port when it has one
    (``https://billing.example.com/mcp`` -> ``billing.example.com``)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    name = (parts.hostname or "upstream") + (f"-{parts.port}" if parts.port else "")
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name)[:100]


def parse_header(text: str, environ: Mapping[str, str]) -> tuple[str, str]:
    """``NAME: VALUE`` as a header; a value that is ``$VAR`` or ``${VAR}`` is read from
    the environment, so a host's configuration can name a secret without holding it."""
    name, sep, value = text.partition(":")
    name, value = name.strip(), value.strip()
    if not sep or not _HEADER_NAME.fullmatch(name):
        raise _bad_upstream(
            "a --header is not NAME: VALUE (its text is not shown: it may hold a secret)",
            "e.g. --header 'Authorization: Bearer $BILLING_TOKEN'",
        )
    found = _ENV_VALUE.fullmatch(value.removeprefix("Bearer ").strip())
    if found is not None:
        var = found.group(1)
        if var not in environ:
            raise _bad_upstream(
                f"--header {name}: names the environment variable {var}, which is not set",
                f"set {var} in the gateway's environment",
            )
        value = value.replace(found.group(0), environ[var])
    if any(c in value for c in "\r\n\0"):
        raise _bad_upstream(f"--header {name}: its value holds a line break", "one line only")
    return name, value


def upstream_failed(server: str, url: str | None, e: BaseException) -> UsageError:
    """The gateway cannot start: the upstream did not start, answer or finish its handshake."""
    while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
        e = e.exceptions[0]  # a task group's wrapping: the cause is what a person needs
    return UsageError(
        f"the upstream MCP server {server!r} "
        + (f"at {url} did not answer" if url is not None else "did not start")
        + f": {type(e).__name__}: {e}"[:1000],
        code="gateway.upstream_failed",
        hint=(
            f"check that {url} serves MCP over streamable HTTP (and the --header values it needs)"
            if url is not None
            else "check the command after `--` (run it alone: it must speak MCP on stdio) "
            "and its stderr"
        ),
    )


async def _upstream_message(message: Any) -> None:
    if isinstance(message, Exception):  # invalid JSON-RPC from the upstream: reported
        log.warning(
            "gateway.upstream_bad_message", error=f"{type(message).__name__}: {message}"[:500]
        )


async def open_session(read: Any, write: Any, stack: AsyncExitStack) -> Opened:
    """The client session on the upstream's streams, its handshake done (bounded)."""
    session = await stack.enter_async_context(
        ClientSession(
            read,
            write,
            client_info=types.Implementation(name="continuum-gateway", version=__version__),
            message_handler=_upstream_message,
        )
    )
    with anyio.fail_after(STARTUP_TIMEOUT):
        hello = await session.initialize()
    return session, hello


async def open_stdio(
    command: Sequence[str], timeout: float, stack: AsyncExitStack, environ: Mapping[str, str]
) -> Relay:
    """The upstream started as a subprocess on stdio, behind the relay."""
    return await stack.enter_async_context(
        open_stdio_upstream(command, timeout=timeout, env=environ, errlog=sys.stderr)
    )


async def open_http(
    url: str,
    headers: Sequence[tuple[str, str]],
    timeout: float,
    stack: AsyncExitStack,
    on_session_404: Callable[[], None] | None = None,
    leg: HttpLeg | None = None,
) -> Opened:
    """A session with the upstream at ``url`` over streamable HTTP, its handshake done.
    ``on_session_404`` is called when the upstream answers 404 to a request that carried
    the session's id: the upstream no longer knows the session (it restarted). ``leg``
    is given the client, and learns the session's headers from the SDK's requests."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async def seen(response: Any) -> None:
        refused = response.status_code == 404 and response.request.headers.get("mcp-session-id")
        if refused and on_session_404 is not None:
            on_session_404()

    client = await stack.enter_async_context(
        httpx2.AsyncClient(
            headers=dict(headers),
            timeout=httpx2.Timeout(STARTUP_TIMEOUT, read=timeout + 5),
            follow_redirects=False,  # a redirect could take the headers elsewhere
            trust_env=False,  # no proxy from the environment: the headers go to url only
            event_hooks={"response": [seen], "request": [] if leg is None else [leg.remember]},
        )
    )
    if leg is not None:
        leg.client = client
    read, write = await stack.enter_async_context(streamable_http_client(url, http_client=client))
    return await open_session(read, write, stack)


class Attempt:
    """One attempt to open a session: its outcome once ``done`` is set (``session`` and
    ``hello``, or ``failure``); setting ``ended`` closes an open one."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.ended = anyio.Event()
        self.session: ClientSession | None = None
        self.hello: types.InitializeResult | None = None
        self.failure: BaseException | None = None
        # The upstream answered 404 to this session's id: it no longer knows it.
        self.refused = False
        # A stdio upstream: the relay in front of this attempt's process.
        self.relay: Relay | None = None
        # An HTTP upstream: the gateway's calls on this attempt's session, past the SDK.
        self.leg: HttpLeg | None = None

    def mark_refused(self) -> None:
        self.refused = True

    @property
    def open(self) -> bool:
        return self.done.is_set() and self.session is not None and not self.ended.is_set()


class UpstreamSessions:
    """The sessions with an upstream (over streamable HTTP, or a command on stdio), one at
    a time, each opened in ``run``'s task: ``current`` is the latest attempt; ``again``
    opens the next."""

    def __init__(self, opener: Callable[[AsyncExitStack, Attempt], Awaitable[Opened]]) -> None:
        self._open = opener
        self.current = Attempt()
        self._recent: list[Attempt] = [self.current]  # the last few, newest last
        self._wanted = anyio.Event()  # set: ``current`` is a new attempt to make

    def refused(self, session: ClientSession) -> bool:
        """Whether the upstream answered 404 to ``session``'s id (it restarted)."""
        return any(a.session is session and a.refused for a in self._recent)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Make ``current``, keep its session until it is ended, then wait for the next
        attempt. The first attempt's failure ends this task (``http_upstream`` raises
        it); a later one is that attempt's ``failure``, for the calls waiting on it."""
        started = False
        while True:
            attempt = self.current
            first = not started
            try:
                async with AsyncExitStack() as stack:
                    try:
                        attempt.session, attempt.hello = await self._open(stack, attempt)
                    except Exception as e:
                        attempt.failure = e
                        attempt.session = None
                    attempt.done.set()
                    if first:
                        started = True
                        task_status.started()
                        if attempt.failure is not None:
                            return
                    if attempt.failure is None:
                        await attempt.ended.wait()
            except Exception as e:  # closing a session failed: reported, go on
                attempt.done.set()
                log.info("gateway.upstream_close_failed", error=f"{type(e).__name__}: {e}"[:500])
                if first and attempt.failure is not None:
                    return  # the first attempt failed (its close too): ``_sessions`` raises it
            await self._wanted.wait()
            self._wanted = anyio.Event()

    async def again(
        self, lost: ClientSession | None, timeout: float = RECONNECT_TIMEOUT
    ) -> Attempt:
        """A session in place of ``lost``: one opened since, the attempt under way, or a
        new attempt (``lost``'s ended first). Returns the attempt, done (``session`` or
        ``failure``) or not yet (it did not finish within ``timeout``; it goes on, and the
        next call waits for it rather than starting another)."""
        attempt = self.current
        if attempt.done.is_set() and not (attempt.open and attempt.session is not lost):
            attempt.ended.set()  # the lost session (or a failed attempt): closed
            attempt = self.current = Attempt()
            self._recent = [*self._recent[-3:], attempt]
            self._wanted.set()
        with anyio.move_on_after(timeout):
            await attempt.done.wait()
        return attempt


@asynccontextmanager
async def http_upstream(
    url: str, headers: Sequence[tuple[str, str]], timeout: float
) -> AsyncIterator[UpstreamSessions]:
    """The sessions with the upstream at ``url``, the first one open; raises why it could
    not be."""

    async def opener(stack: AsyncExitStack, attempt: Attempt) -> Opened:
        from continuum.gateway.http_leg import HttpLeg

        attempt.leg = HttpLeg(url)
        return await open_http(url, headers, timeout, stack, attempt.mark_refused, attempt.leg)

    async with _sessions(opener) as upstream:
        yield upstream


@asynccontextmanager
async def stdio_upstream(
    command: Sequence[str], timeout: float, environ: Mapping[str, str]
) -> AsyncIterator[UpstreamSessions]:
    """The upstream ``command`` on stdio, started, its session open (each attempt's relay
    is ``attempt.relay``); raises why it could not be. Started again by ``again``."""

    async def opener(stack: AsyncExitStack, attempt: Attempt) -> Opened:
        relay = attempt.relay = await open_stdio(command, timeout, stack, environ)
        return await open_session(relay.read_stream, relay.write_stream, stack)

    async with _sessions(opener) as upstream:
        yield upstream


@asynccontextmanager
async def _sessions(
    opener: Callable[[AsyncExitStack, Attempt], Awaitable[Opened]],
) -> AsyncIterator[UpstreamSessions]:
    upstream = UpstreamSessions(opener)
    async with anyio.create_task_group() as tg:
        await tg.start(upstream.run)
        failure = upstream.current.failure
        if failure is None:
            try:
                yield upstream
            finally:
                tg.cancel_scope.cancel()
    if failure is not None:  # raised here, not inside the group: as it is, not wrapped
        raise failure

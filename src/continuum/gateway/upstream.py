"""The gateway's upstream MCP server: a command started on stdio, or an endpoint reached
over streamable HTTP (and reached again after it was lost).

An HTTP upstream is a separate service: it restarts (its sessions are gone, and it answers
404 to the old session id), or its connection drops. Without a new session every call
after that would be refused until the gateway itself was restarted. ``HttpUpstream`` opens
the session in a task of its own (an anyio context must end in the task that entered it)
and opens a new one when the gateway asks (``again``): on the next call after a loss, once
per call at most, bounded by ``RECONNECT_TIMEOUT``. What was in flight when the session
was lost is not retried (a registered call is ``unknown``, as before); the gateway judges
the new session's tools against the pins before it forwards anything.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
from anyio.abc import TaskStatus
from mcp import types
from mcp.client.session import ClientSession

from continuum.errors import UsageError
from continuum.gateway.relay import Relay, open_stdio_upstream
from continuum.log import get_logger
from continuum.version import __version__

log = get_logger("continuum.gateway")

STARTUP_TIMEOUT = 60.0  # seconds the upstream may take to start and list its tools
RECONNECT_TIMEOUT = 10.0  # seconds a call waits for a lost HTTP upstream to be reached again

Opened = tuple[ClientSession, types.InitializeResult]


def upstream_failed(server: str, url: str | None, e: BaseException) -> UsageError:
    """The gateway cannot start: the upstream did not start, answer or finish its handshake."""
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
    url: str, headers: Sequence[tuple[str, str]], timeout: float, stack: AsyncExitStack
) -> Opened:
    """A session with the upstream at ``url`` over streamable HTTP, its handshake done."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    client = await stack.enter_async_context(
        httpx2.AsyncClient(
            headers=dict(headers),
            timeout=httpx2.Timeout(STARTUP_TIMEOUT, read=timeout + 5),
            follow_redirects=False,  # a redirect could take the headers elsewhere
            trust_env=False,  # no proxy from the environment: the headers go to url only
        )
    )
    read, write = await stack.enter_async_context(streamable_http_client(url, http_client=client))
    return await open_session(read, write, stack)


class HttpUpstream:
    """The sessions with an upstream over streamable HTTP, one at a time: ``session`` is
    the current one; ``again`` ends it and opens the next."""

    def __init__(self, opener: Callable[[AsyncExitStack], Awaitable[Opened]]) -> None:
        self._open = opener
        self.session: ClientSession | None = None
        self.hello: types.InitializeResult | None = None
        self.failure: BaseException | None = None  # why the last attempt failed
        self._ended = anyio.Event()  # set: the current session is to end
        self._wanted = anyio.Event()  # set: a new attempt is wanted
        self._settled = anyio.Event()  # set: the last attempt's outcome is known

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Open a session and keep it until ``again``; then open the next. The first
        attempt's failure is raised (the gateway does not start); a later one is kept in
        ``failure`` for the call that asked."""
        started = False
        while True:
            self._ended = anyio.Event()
            try:
                async with AsyncExitStack() as stack:
                    try:
                        self.session, self.hello = await self._open(stack)
                        self.failure = None
                    except Exception as e:
                        if not started:
                            raise
                        self.failure = e
                    if not started:
                        task_status.started()
                        started = True
                    self._settled.set()
                    if self.failure is None:
                        await self._ended.wait()
            except Exception as e:  # closing a lost session failed: reported, go on
                if not started:
                    raise
                log.info("gateway.upstream_close_failed", error=f"{type(e).__name__}: {e}"[:500])
                self._settled.set()
            await self._wanted.wait()
            self._wanted = anyio.Event()

    async def again(self, timeout: float = RECONNECT_TIMEOUT) -> BaseException | None:
        """End the current session and open a new one; None once it is open, else why
        not. One caller at a time (the gateway holds a lock around it)."""
        self._settled = anyio.Event()
        self._ended.set()
        self._wanted.set()
        with anyio.move_on_after(timeout):
            await self._settled.wait()
            return self.failure
        return TimeoutError(f"no new session within {timeout:g} s")


@asynccontextmanager
async def http_upstream(
    url: str, headers: Sequence[tuple[str, str]], timeout: float
) -> AsyncIterator[HttpUpstream]:
    """An ``HttpUpstream`` with its first session open (raises what opening it raised)."""

    async def opener(stack: AsyncExitStack) -> Opened:
        return await open_http(url, headers, timeout, stack)

    upstream = HttpUpstream(opener)
    async with anyio.create_task_group() as tg:
        await tg.start(upstream.run)
        try:
            yield upstream
        finally:
            tg.cancel_scope.cancel()

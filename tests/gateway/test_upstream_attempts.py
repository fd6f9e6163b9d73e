"""``UpstreamSessions``'s attempts to open a session again (gateway/upstream.py), in-process
with an opener the test controls: an attempt still under way when a caller's bound
passes is waited for by the next caller, never ended and replaced; a session opened since
the loss is handed out as it is; a failed attempt is followed by a new one.

The opener stands in for the HTTP connection and the handshake (the real ones run in
test_mcp_gateway_http.py against a restarted upstream); what is checked here is the
bookkeeping of attempts, which only timing would expose there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import pytest
from anyio.abc import TaskGroup

from continuum.gateway.upstream import Attempt, UpstreamSessions

pytestmark = pytest.mark.anyio

BOUND = 10.0  # seconds: a ceiling on each wait, never a sleep


class Opener:
    """Opens fake sessions: each waits until the test releases it (or fails it)."""

    def __init__(self) -> None:
        self.opened = 0
        self.closed = 0
        self.release = anyio.Event()
        self.fail_next = False

    async def __call__(self, stack: AsyncExitStack, attempt: Attempt) -> tuple[Any, Any]:
        if self.opened > 0:  # the first one opens at once: the gateway's start
            await self.release.wait()
            self.release = anyio.Event()
        if self.fail_next:
            self.fail_next = False
            raise ConnectionRefusedError("nothing listens")
        self.opened += 1
        stack.callback(self._close)
        return f"session-{self.opened}", "hello"

    def _close(self) -> None:
        self.closed += 1


@asynccontextmanager
async def running() -> AsyncIterator[tuple[Opener, UpstreamSessions, TaskGroup]]:
    """An ``UpstreamSessions`` over an ``Opener``, its first session open; stopped at the end."""
    opener = Opener()
    upstream = UpstreamSessions(opener)
    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            await tg.start(upstream.run)
            yield opener, upstream, tg
            tg.cancel_scope.cancel()


async def test_an_attempt_under_way_is_waited_for_not_ended() -> None:
    async with running() as (opener, upstream, tg):
        first = upstream.current.session
        assert first == "session-1"
        # The session is lost; the next attempt is slow: the caller's bound passes.
        slow = await upstream.again(first, timeout=0.05)
        assert not slow.done.is_set()
        # The next caller waits for that same attempt instead of ending it.
        waiting: list[Attempt] = []

        async def next_call() -> None:
            waiting.append(await upstream.again(first, timeout=BOUND))

        tg.start_soon(next_call)
        await anyio.wait_all_tasks_blocked()
        opener.release.set()
        while not waiting:
            await anyio.sleep(0.01)
        [got] = waiting
        assert got is slow and got.open and got.session == "session-2"
        assert opener.closed == 1  # only the lost session was closed
        # A caller that saw the first session lost gets the one opened since, as it is.
        again = await upstream.again(first, timeout=BOUND)
        assert again is slow and again.open and opener.opened == 2


async def test_a_failed_attempt_is_followed_by_a_new_one() -> None:
    async with running() as (opener, upstream, tg):
        first = upstream.current.session
        opener.fail_next = True
        opener.release.set()
        failed = await upstream.again(first, timeout=BOUND)
        assert failed.done.is_set() and failed.session is None
        assert isinstance(failed.failure, ConnectionRefusedError)
        opener.release.set()
        back = await upstream.again(first, timeout=BOUND)
        assert back is not failed and back.open and back.session == "session-2"


async def test_control_ending_the_attempt_under_way_would_close_the_session_it_opens() -> None:
    # What the bookkeeping prevents: a caller that ends the attempt under way (as the
    # first version did) gets a session that closes as soon as it opens.
    async with running() as (opener, upstream, tg):
        slow = await upstream.again(upstream.current.session, timeout=0.05)
        slow.ended.set()  # ended while still opening
        opener.release.set()
        await slow.done.wait()
        assert not slow.open

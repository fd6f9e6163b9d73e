"""Lease renewal runs off the event loop (contract §6: the owner renews its lease so
other hosts see it alive; contract §9: one HTTP server serves every session from one
event loop, so a slow store must not stall them all).

A real ``Tools`` over a real SQLite file holds a started action; the store's
``renew_lease`` is wrapped by a test hook that records its thread and blocks until the
event loop releases it. ``server.renew_leases`` must leave the loop free while the store
call blocks (the loop itself releases it), and the lease must really move forward.
Negative control: the same detector, given a renewal that calls the store on the loop
(the code before this fix), reports the stall.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import anyio
import pytest

from continuum.mcp.server import renew_leases
from continuum.mcp.tools import Tools
from continuum.serving.auth import Policy
from tests.mcp.conftest import BOUND

pytestmark = pytest.mark.anyio

STALL_SECONDS = 2.0  # how long the hook blocks when nobody releases it (the stall case)


class BlockingRenewals:
    """Wraps a store's ``renew_lease``: records the thread, then blocks until released
    (or ``STALL_SECONDS`` pass, which only happens when the loop itself is blocked)."""

    def __init__(self, store: Any) -> None:
        self.original = store.renew_lease
        self.entered = threading.Event()
        self.release = threading.Event()
        self.threads: list[int] = []
        self.timed_out: list[bool] = []
        store.renew_lease = self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.threads.append(threading.get_ident())
        self.entered.set()
        self.timed_out.append(not self.release.wait(STALL_SECONDS))
        return self.original(*args, **kwargs)


def tools_holding_an_action(tmp_path: Path) -> tuple[Tools, str, str]:
    tools = Tools(str(tmp_path / "leases.db"), Policy())
    rt = tools.writer()
    rt.record_progress("r", goal="g", total=1)
    result = rt.intercept("r", "send", {"n": 1}, key="k-1")
    assert result.proceed and rt.ledger.held
    return tools, "r", result.action_key


def lease_of(tools: Tools, run_id: str, key: str) -> float:
    row = tools.writer().store.get_action(run_id, key)
    assert row is not None and row.lease_expires is not None
    return row.lease_expires


async def loop_was_stalled(
    renewal: Callable[[], Coroutine[Any, Any, None]], hook: BlockingRenewals
) -> bool:
    """Run ``renewal`` and, on the loop, wait for the store call to start, then release
    it. True when the loop could not run until the store call gave up by itself."""
    loop_thread = threading.get_ident()
    async with anyio.create_task_group() as tg:
        tg.start_soon(renewal)
        with anyio.fail_after(BOUND):
            while not hook.entered.is_set():  # bounded: a poll of an event set elsewhere
                await anyio.sleep(0.01)
        hook.release.set()
        with anyio.fail_after(BOUND):
            while not hook.timed_out:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    stalled = hook.timed_out[0]
    assert stalled == (hook.threads[0] == loop_thread)  # blocked exactly when on the loop
    return stalled


async def test_lease_renewal_calls_the_store_off_the_event_loop(tmp_path: Path) -> None:
    tools, run_id, key = tools_holding_an_action(tmp_path)
    try:
        before = lease_of(tools, run_id, key)
        hook = BlockingRenewals(tools.writer().store)
        assert not await loop_was_stalled(lambda: renew_leases(tools, interval=0), hook)
        assert hook.threads[0] != threading.get_ident()
        assert lease_of(tools, run_id, key) > before  # the renewal really happened
    finally:
        tools.writer().close()


async def test_the_stall_detector_catches_a_renewal_on_the_loop(tmp_path: Path) -> None:
    """Negative control: the store called on the loop thread blocks it, and is seen."""
    tools, _run_id, _key = tools_holding_an_action(tmp_path)

    async def on_the_loop() -> None:  # the renewal as it was: store I/O on the loop
        tools.renew_leases()
        await anyio.sleep_forever()

    try:
        hook = BlockingRenewals(tools.writer().store)
        assert await loop_was_stalled(on_the_loop, hook)
    finally:
        tools.writer().close()

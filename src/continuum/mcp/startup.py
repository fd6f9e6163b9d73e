"""``continuum-mcp`` over stdio answers ``initialize`` first and prepares the rest after.

Why: a host waits for the ``initialize`` answer before anything else, and that answer
(the server's name, version, instructions and capabilities) needs none of the store, the
ledger, the approval rules or the thirteen tools' argument and result models. Building
those took most of the time between spawn and initialized (issue 27,
references/bench.md). So start-up runs in two parts:

1. Before serving (``server.main``): flags, the log level and the authorization policy
   (allowlist, tokens, confirm token): a malformed one still refuses to start, before a
   single byte is answered.
2. After the client says it is initialized (``notifications/initialized``), or at its
   first request other than ``initialize`` and ``ping`` (the 2026-07-28 era sends no
   ``initialize``), or ``PREPARE_WITHIN_SECONDS`` after serving began if no client has
   spoken by then (such a server still delivers the outbox and still refuses a bad
   store), on a worker thread: the store check, the approval rules check, the
   tools, the outbox deliverer (the ``prepare`` that ``server.py`` gives).

``AfterPreparation`` (server middleware) holds every request other than ``initialize``
and ``ping`` until part 2 has finished: no tool is listed or called, so nothing is
authorized or written, before the checks have passed and every tool is registered
behind its authorization. If part 2 refuses (a store that is not usable, a malformed
``approvals.toml``), the server writes its one line on stderr and exits 1, as a refused
start-up always did (a request held meanwhile gets the SDK's "connection closed" error). A
client that leaves before part 2 began (stdin at EOF at once) still gets the checks, at
exit (``Preparation.finish``), so a bad configuration is always exit 1 and its line.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import anyio.to_thread
from anyio.abc import TaskGroup
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR

from continuum.errors import ContinuumError

UNHELD = frozenset({"initialize", "ping"})
"""Requests answered before part 2 has finished: they need nothing it prepares."""

STARTS_PREPARATION = "notifications/initialized"
PREPARE_WITHIN_SECONDS = 1.0
"""Hosts send their first message as they spawn the server: well within this."""


class Preparation:
    """Part 2 of start-up, run once: ``prepare`` on a worker thread when ``start`` is first
    called (inside the serving task group given to ``bind``), then ``background`` with its
    result as a task of that group; or ``check`` alone at ``finish`` when it never started.
    ``refuse`` is called with the error either way."""

    def __init__(
        self,
        prepare: Callable[[], Any],
        check: Callable[[], Any],
        refuse: Callable[[ContinuumError], None],
        *,
        background: Callable[[Any], Coroutine[Any, Any, None]] | None = None,
    ) -> None:
        self._prepare, self._check, self._refuse = prepare, check, refuse
        self._background = background
        self._tg: TaskGroup | None = None
        self._unheard: anyio.CancelScope | None = None  # the wait for a client's first word
        self._started = False
        self._done: anyio.Event | None = None
        self.error: ContinuumError | None = None

    def bind(self, tg: TaskGroup, within: float = PREPARE_WITHIN_SECONDS) -> None:
        """Serve part 2 in ``tg`` (cancelled, with serving, when it refuses); start it
        ``within`` seconds from now unless a client has spoken by then (``heard``)."""
        self._tg, self._done, self._unheard = tg, anyio.Event(), anyio.CancelScope()
        tg.start_soon(self._start_unless_heard, self._unheard, within)

    async def _start_unless_heard(self, unheard: anyio.CancelScope, seconds: float) -> None:
        with unheard:
            await anyio.sleep(seconds)
            self.start()

    def heard(self) -> None:
        """A client has spoken: it starts part 2 (``AfterPreparation``), not the clock."""
        if self._unheard is not None:
            self._unheard.cancel()

    def start(self) -> None:
        if self._started or self._tg is None:
            return
        self._started = True
        self._tg.start_soon(self._run)

    async def _run(self) -> None:
        assert self._done is not None and self._tg is not None
        try:
            result = await anyio.to_thread.run_sync(self._prepare)
        except ContinuumError as e:
            self.error = e
            self._refuse(e)
            self._tg.cancel_scope.cancel()  # stop serving: the start-up was refused
        else:
            if self._background is not None:
                self._tg.start_soon(self._background, result)
        finally:
            self._done.set()

    @property
    def succeeded(self) -> bool:
        """Whether part 2 has finished without a refusal (every tool registered)."""
        return self._done is not None and self._done.is_set() and self.error is None

    async def ready(self) -> None:
        """Start part 2 if it has not started, and wait until it has finished; an
        ``MCPError`` carrying the refusal if it refused."""
        self.start()
        assert self._done is not None
        await self._done.wait()
        if self.error is not None:
            raise MCPError(code=INTERNAL_ERROR, message=refusal_text(self.error))

    def finish(self) -> ContinuumError | None:
        """After serving: the refusal, if part 2 refused; when it never started, run the
        checks now (a client that left at once still learns of a bad configuration)."""
        if not self._started:
            self._started = True
            try:
                self._check()
            except ContinuumError as e:
                self.error = e
                self._refuse(e)
        return self.error


def refusal(message: str, code: str, hint: str) -> str:
    """The one line a refused start-up writes on stderr."""
    return f"continuum-mcp: {message} [{code}]" + (f"; {hint}" if hint else "")


def refusal_text(e: ContinuumError) -> str:
    return refusal(e.message, e.code, e.hint)


class AfterPreparation:
    """Server middleware (SDK 2.3, provisional API): ``notifications/initialized`` starts
    part 2; every request but ``initialize`` and ``ping`` waits for it to finish."""

    def __init__(self, preparation: Preparation) -> None:
        self._preparation = preparation

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        self._preparation.heard()
        if ctx.method == STARTS_PREPARATION:
            self._preparation.start()
        elif ctx.method not in UNHELD and (
            ctx.request_id is not None or not ctx.method.startswith("notifications/")
        ):
            await self._preparation.ready()
        return await call_next(ctx)

"""Who owns an action intercepted over streamable HTTP (contract §6 and §9).

Over stdio one server process is one agent, so the process owns what it intercepts,
and another process may not complete, fail or reconcile it while the owner is alive
(``ledger.owner_alive``). Over HTTP one process serves many agents, so the owner of a
mutating call is narrower than the process:

- A handshake-era session (``initialize``, then ``Mcp-Session-Id``): the session. Its
  tag is drawn at random the first time the session writes and kept in the SDK's
  per-connection state; it is never derived from the session id, which an owner record
  would show to other agents. Another session is another owner, even one opened with
  the same bearer token.
- A 2026-07-28 per-request call (no session): the bearer token (its line in the token
  file) together with the client's declared name. Nothing else persists between such
  requests. A call with another token, another name, or from a session is another
  owner. A name is self-declared, so two agents that hold the same token can claim each
  other's name: the token is the boundary (give every agent its own token).

The owner recorded with an action is this process (``ledger.current_owner``: host, pid,
start time) plus ``session``: ``token-file-line-N/session-<random>`` or
``token-file-line-N/client-<digest of the name>``. Never a token, a session id or the
name itself.

When a session ends (the client closes it, it idles out, the server stops), the actions
it started and did not settle are marked unknown, as if its process had died: nobody is
left to complete them, and an agent that reconnects and intercepts again is told to
check the external system and reconcile (contract §6), instead of "in progress" for as
long as the server runs.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import anyio.to_thread

from continuum.errors import ContinuumError
from continuum.ledger.owners import current_owner
from continuum.log import get_logger
from continuum.runtime.facade import Continuum
from continuum.serving.auth import Caller
from continuum.serving.tokens import Grant
from continuum.store import Storage
from continuum.types import Origin

__all__ = ["SESSION_ENDED", "OwnedRuntimes", "owner_tag"]

SESSION_ENDED = "interrupted: the MCP session that intercepted it ended"
"""The reason recorded on an action left started by a session that ended."""

_STATE_KEY = "continuum.owner_tag"
_IDLE_RUNTIMES = 64  # runtimes that hold nothing, kept for reuse at most

_log = get_logger("continuum.mcp")


def _connection(ctx: Any) -> Any:
    """The SDK's per-client ``Connection`` of this call (SDK 2.3: no public accessor from a
    tool's context), or None."""
    with suppress(Exception):
        return ctx.request_context.session._connection
    return None


def _session_header(ctx: Any) -> bool:
    with suppress(Exception):
        return ctx.request_context.request.headers.get("mcp-session-id") is not None
    return False


def owner_tag(ctx: Any, grant: Grant, caller: Caller) -> tuple[str, Any]:
    """The owner tag of this call, and the session's connection when it has one (None for
    a per-request call). ``mcp.owner_unknown`` when a session's call cannot be told
    apart from another session's (fail closed: never a shared owner by mistake)."""
    connection = _connection(ctx)
    if connection is None and _session_header(ctx):
        raise ContinuumError(
            "cannot tell which MCP session this call belongs to, so it may not intercept or "
            "settle actions",
            code="mcp.owner_unknown",
            hint="this server's MCP SDK is not the one it was built for: ask its operator to "
            "install the supported version (see references/operators.md)",
        )
    if connection is not None and getattr(connection, "session_id", None) is not None:
        state = connection.state
        tag = state.get(_STATE_KEY)
        if not isinstance(tag, str):
            tag = f"{grant.principal}/session-{secrets.token_hex(12)}"
            state[_STATE_KEY] = tag
        return tag, connection
    name = (caller.name or "").encode("utf-8", errors="surrogatepass")
    return f"{grant.principal}/client-{hashlib.sha256(name).hexdigest()[:16]}", None


class OwnedRuntimes:
    """One agent-origin runtime per owner tag over one shared store, so each ledger's
    ``owner`` (and the leases it holds) is that owner's.

    Thread-safe: tools run on worker threads. A runtime that holds no started action may
    be dropped (``_IDLE_RUNTIMES``) and made again: the owner is a value, not the object.
    """

    def __init__(self, store: Storage) -> None:
        self.store = store
        self._runtimes: dict[str, Continuum] = {}
        self._in_use: dict[str, int] = {}
        self._ending: set[str] = set()
        self._lock = threading.Lock()

    @contextmanager
    def use(self, ctx: Any, grant: Grant, caller: Caller) -> Iterator[Continuum]:
        """The runtime of this call's owner, kept while the block runs."""
        with self._lock:  # one tag per session, even for its first calls made at once
            tag, connection = owner_tag(ctx, grant, caller)
            runtime = self._runtimes.get(tag)
            if runtime is None:
                self._trim()
                runtime = Continuum(
                    self.store,
                    origin=Origin.EXTERNAL_AGENT,
                    owner={**current_owner(), "session": tag},
                )
                self._runtimes[tag] = runtime
            self._in_use[tag] = self._in_use.get(tag, 0) + 1
            first = connection is not None and tag not in self._ending
            if first:
                self._ending.add(tag)
        if first:
            # Runs when the session's connection closes, on the event loop: the store
            # work goes to a worker thread.
            connection.exit_stack.push_async_callback(self._session_ended, tag)
        try:
            yield runtime
        finally:
            with self._lock:
                self._in_use[tag] -= 1
                if not self._in_use[tag]:
                    del self._in_use[tag]

    def _trim(self) -> None:
        """Drop runtimes nobody is using that hold nothing and belong to no open session,
        beyond ``_IDLE_RUNTIMES`` (per-request owners come and go; a name is the caller's)."""
        idle = [
            tag
            for tag, rt in self._runtimes.items()
            if not rt.ledger.held and tag not in self._in_use and tag not in self._ending
        ]
        for tag in idle[: max(0, len(idle) - _IDLE_RUNTIMES + 1)]:
            del self._runtimes[tag]

    async def _session_ended(self, tag: str) -> None:
        await anyio.to_thread.run_sync(self.end, tag)

    def end(self, tag: str) -> int:
        """Forget the owner ``tag``; its actions still started are marked unknown
        (``SESSION_ENDED``). Returns how many."""
        with self._lock:
            runtime = self._runtimes.pop(tag, None)
            self._ending.discard(tag)
        if runtime is None:
            return 0
        marked = 0
        for run_id, action_id in sorted(runtime.ledger.held):
            try:
                runtime.fail(run_id, action_id, error=SESSION_ENDED)
                marked += 1
            except ContinuumError as e:  # settled meanwhile, or the store is unreachable
                _log.warning(
                    "mcp.session_end_unsettled", code=e.code, run_id=run_id, action_id=action_id
                )
        if marked:
            _log.info("mcp.session_ended", owner=tag, marked_unknown=marked)
        return marked

    def renew_leases(self) -> int:
        """Renew the leases of every owner's started actions (blocking store I/O: call it
        from a worker thread)."""
        with self._lock:
            runtimes = list(self._runtimes.values())
        return sum(rt.ledger.renew_held_leases() for rt in runtimes)

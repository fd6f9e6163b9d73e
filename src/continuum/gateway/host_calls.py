"""Host ``tools/call`` requests the MCP gateway runs itself, past the SDK's server.

Why: through the SDK's server a host's call is parsed into models, dispatched, and its
result dumped and encoded again; with the gateway's own client leg on top, that was the
most of what a call through the gateway cost over one straight to the upstream. A call in
the plain shape (``name``, ``arguments``, ``_meta``, nothing else) is taken at the hardened
host transport's ``divert`` hook (``serving/transport.py``) once the host finished its
handshake, and answered as the SDK's server answers ``call_tool``.

What this module owns:

- ``host_call``: whether a host request is such a call (anything else, e.g. a
  task-augmented call, takes the SDK path, as before);
- ``HostCalls``: the calls taken and still running, by the host's id. Each runs in a task
  of the serving group (cancelled, unanswered, when the host side stops serving); the
  host's ``notifications/cancelled`` cancels it unanswered, as the SDK does; an exception
  of the gateway itself is an ``INTERNAL_ERROR`` answer, as the SDK gives;
- ``answer_host``: an answer the gateway makes, shaped as its SDK server shapes a tool's
  result.

The caller decides which calls to take and what running one means (``gateway/relay.py``
for an upstream on stdio, ``Gateway.divert`` for one over HTTP).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

import anyio
from mcp import types
from mcp.shared.dispatcher import coerce_request_id

from continuum.log import get_logger
from continuum.serving.transport import HostLink

__all__ = ["HostCall", "HostCalls", "answer_host", "host_call", "is_request_id"]

log = get_logger("continuum.gateway")

_CALL_PARAMS = frozenset({"name", "arguments", "_meta"})

Run = Callable[[], Awaitable[types.CallToolResult]]


def is_request_id(value: object) -> TypeGuard[types.RequestId]:
    """A JSON-RPC id as MCP has them: text or a whole number (not a boolean)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


@dataclass(frozen=True)
class HostCall:
    """A host's ``tools/call`` in the plain shape."""

    name: str
    arguments: dict[str, Any]
    params: dict[str, Any]  # as the host sent them
    token: Any  # its ``_meta.progressToken`` (not checked here), or None


def host_call(message: types.JSONRPCRequest) -> HostCall | None:
    """The call ``message`` is, when it is a ``tools/call`` whose params hold only
    ``name`` (text), ``arguments`` (an object, or none) and ``_meta`` (an object); None
    for anything else (the SDK path judges it)."""
    if message.method != "tools/call":
        return None
    params = message.params or {}
    name, arguments = params.get("name"), params.get("arguments")
    arguments = {} if arguments is None else arguments
    if not isinstance(name, str) or not isinstance(arguments, dict):
        return None
    if not params.keys() <= _CALL_PARAMS:
        return None
    meta = params.get("_meta")
    if meta is not None and not isinstance(meta, dict):
        return None
    return HostCall(name, arguments, params, None if meta is None else meta.get("progressToken"))


async def answer_host(
    host: HostLink, request_id: types.RequestId, result: types.CallToolResult
) -> None:
    """An answer the gateway makes, shaped as its SDK server shapes a tool's result."""
    dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    await host.answer(types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result=dumped))


class HostCalls:
    """The host's calls the gateway took and is running, by the host's (coerced) id."""

    def __init__(self) -> None:
        self._scopes: dict[types.RequestId, anyio.CancelScope] = {}

    @property
    def busy(self) -> bool:
        return bool(self._scopes)

    def __contains__(self, request_id: types.RequestId) -> bool:
        return coerce_request_id(request_id) in self._scopes

    def take(
        self,
        spawn: Callable[..., Any],
        request_id: types.RequestId,
        name: str,
        run: Run,
        host: HostLink,
    ) -> None:
        """Start ``run`` with ``spawn`` (``TaskGroup.start_soon``) and answer the host
        with its result."""
        scope = anyio.CancelScope()
        self._scopes[coerce_request_id(request_id)] = scope
        spawn(self._answer, request_id, name, run, host, scope)

    def cancel(self, request_id: types.RequestId, host: HostLink) -> bool:
        """The host cancelled ``request_id``: True when it is one of these (cancelled, and
        never answered, as the SDK does)."""
        scope = self._scopes.pop(coerce_request_id(request_id), None)
        if scope is None:
            return False
        scope.cancel()
        host.settle(request_id)
        return True

    async def _answer(
        self,
        request_id: types.RequestId,
        name: str,
        run: Run,
        host: HostLink,
        scope: anyio.CancelScope,
    ) -> None:
        result: types.CallToolResult | None = None
        try:
            with scope:
                result = await run()
        except Exception as e:  # a failure of the gateway itself: an error answer, as the SDK
            log.error("gateway.call_failed", tool=name, error=type(e).__name__)
            error = types.ErrorData(code=types.INTERNAL_ERROR, message=f"Error: {e}"[:500])
            await host.answer(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))
            return
        finally:
            key = coerce_request_id(request_id)
            if self._scopes.get(key) is scope:  # not a later call reusing a cancelled id
                del self._scopes[key]
        if result is not None:
            await answer_host(host, request_id, result)

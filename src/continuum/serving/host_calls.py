"""A client's ``tools/call`` requests answered past the SDK's server, on the hardened
stdio transport's ``divert`` hook (``transport.py``).

Why: through the SDK's server a call crosses its dispatcher, runner and middlewares and
its result is dumped and encoded again; for the MCP gateway (with its own client leg on
top) and for ``continuum-mcp``'s effect path that plumbing was most of what a call cost.
A call in the plain shape (``name``, ``arguments``, ``_meta``, nothing else) is taken
once the client finished its handshake, and answered as the SDK's server answers
``call_tool``.

What this module owns:

- ``host_call``: whether a client request is such a call (anything else, e.g. a
  task-augmented call, takes the SDK path, as before);
- ``HostCalls``: the calls taken and still running, by the client's id. Each runs in a
  task of the serving group (cancelled, unanswered, when the serving stops); the client's
  ``notifications/cancelled`` cancels it unanswered, as the SDK does; an ``MCPError`` is
  the JSON-RPC error it carries and any other exception an ``INTERNAL_ERROR`` answer, as
  the SDK gives;
- ``answer_host`` / ``wire_result``: an answer made from a tool's result, shaped as the
  SDK's server shapes one for the client's negotiated version.

The caller decides which calls to take and what running one means: the gateway
(``gateway/relay.py`` for an upstream on stdio, ``Gateway.divert`` for one over HTTP) and
``continuum-mcp`` (``mcp/direct_calls.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

import anyio
from mcp import types
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.exceptions import MCPError
from mcp_types import PROTOCOL_VERSION_META_KEY
from mcp_types import methods as spec_methods
from pydantic import ValidationError

from continuum.log import get_logger
from continuum.serving.transport import HostLink

__all__ = ["HostCall", "HostCalls", "answer_host", "host_call", "is_request_id", "wire_result"]

log = get_logger("continuum.serving")

_CALL_PARAMS = frozenset({"name", "arguments", "_meta"})

Run = Callable[[], Awaitable[types.CallToolResult]]
_INVALID_RESULT = "Handler returned an invalid result"  # the SDK's words


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
    ``name`` (text), ``arguments`` (an object, or none) and ``_meta`` (an object without
    the 2026-07-28 envelope); None for anything else (the SDK path judges it)."""
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
    if meta is not None and PROTOCOL_VERSION_META_KEY in meta:
        # A 2026-07-28 envelope: the SDK refuses it on a handshake connection before any
        # handler runs, and its clientInfo must never name the caller of such a call.
        return None
    return HostCall(name, arguments, params, None if meta is None else meta.get("progressToken"))


def wire_result(result: Any, version: str) -> dict[str, Any]:
    """A ``tools/call`` result as the SDK's server puts it on the wire for a client of
    ``version`` (one of the handshake era: every call taken here is such a client's):
    dumped, then sieved by that version's surface (which drops, e.g., the 2026-07-28
    ``resultType`` the plain dump carries); anything else is the SDK's invalid-result error."""
    if not isinstance(result, types.CallToolResult):
        raise MCPError(code=types.INTERNAL_ERROR, message=_INVALID_RESULT)
    dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    try:
        return spec_methods.serialize_server_result("tools/call", version, dumped)
    except ValidationError:
        raise MCPError(code=types.INTERNAL_ERROR, message=_INVALID_RESULT) from None


async def answer_host(
    host: HostLink, request_id: types.RequestId, result: types.CallToolResult, version: str
) -> None:
    """An answer made from a tool's result, shaped as the SDK's server shapes one for a
    client of ``version``."""
    try:
        message: types.JSONRPCResponse | types.JSONRPCError = types.JSONRPCResponse(
            jsonrpc="2.0", id=request_id, result=wire_result(result, version)
        )
    except MCPError as e:
        message = types.JSONRPCError(jsonrpc="2.0", id=request_id, error=e.error)
    await host.answer(message)


class HostCalls:
    """The calls taken and still running, by the client's (coerced) id."""

    def __init__(
        self, version: Callable[[], str], failed_event: str = "gateway.call_failed"
    ) -> None:
        self._version = version  # the protocol version the client negotiated
        self._failed_event = failed_event  # the log line of a call that raised
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

    def cancel(self, request_id: types.RequestId) -> bool:
        """The client cancelled ``request_id``: True when it is one of these (cancelled, and
        never answered, as the SDK does; it counts as in flight until its run has ended,
        as the SDK counts a cancelled request until its handler has)."""
        scope = self._scopes.pop(coerce_request_id(request_id), None)
        if scope is None:
            return False
        scope.cancel()
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
        except MCPError as e:  # the JSON-RPC error it carries, as the SDK answers one
            await host.answer(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=e.error))
            return
        except Exception as e:  # a failure of the gateway itself: an error answer, as the SDK
            log.error(self._failed_event, tool=name, error=type(e).__name__)
            error = types.ErrorData(code=types.INTERNAL_ERROR, message=f"Error: {e}"[:500])
            await host.answer(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))
            return
        finally:
            key = coerce_request_id(request_id)
            if self._scopes.get(key) is scope:  # not a later call reusing a cancelled id
                del self._scopes[key]
        if scope.cancelled_caught:  # the client cancelled it: never answered; settled by
            host.settle(request_id)  # the id it was admitted under (not the cancel's form)
            return
        await answer_host(host, request_id, result, self._version())  # type: ignore[arg-type]

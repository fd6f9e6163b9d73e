"""A client's ``tools/call`` requests answered past the SDK's server, on the hardened
stdio transport's ``divert`` hook (``transport.py``).

Why: through the SDK's server a call crosses its dispatcher, runner and middlewares and
its result is dumped and encoded again; for the MCP gateway (with its own client leg on
top) and for ``continuum-mcp``'s effect path that plumbing was most of what a call cost.
A call in the plain shape (``name``, ``arguments``, ``_meta``, nothing else) is taken
once the client finished its handshake, or on a 2026-07-28 connection once the SDK has
opened that era (``HostEra``), each such call admitted by its own envelope
(``modern_call``), and answered as the SDK's server answers ``call_tool`` for the
client's version.

What this module owns:

- ``host_call``: whether a client request is such a call (anything else, e.g. a
  task-augmented call, takes the SDK path, as before); ``modern_call``: the same for a
  2026-07-28 connection, with the SDK's admission of its envelope; ``HostEra``: which
  era the SDK opened; ``tracing``: whether a tracer provider keeps everything on the
  SDK path;
- ``HostCalls``: the calls taken and still running, by the client's id. Each runs in a
  task of the serving group (cancelled, unanswered, when the serving stops); the client's
  ``notifications/cancelled`` cancels it unanswered, as the SDK does; an ``MCPError`` is
  the JSON-RPC error it carries and any other exception an ``INTERNAL_ERROR`` answer, as
  the SDK gives;
- ``answer_host`` / ``wire_result``: an answer made from a tool's result, shaped as the
  SDK's server shapes one for the client's version (an answer that cannot be shaped: an
  error answer, never an exception).

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
from mcp.shared.inbound import InboundModernRoute, classify_inbound_request
from mcp_types import PROTOCOL_VERSION_META_KEY, SERVER_INFO_META_KEY
from mcp_types import methods as spec_methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from opentelemetry import trace
from pydantic import ValidationError

from continuum.log import get_logger
from continuum.serving.auth import Era
from continuum.serving.transport import HostLink

__all__ = [
    "HostCall",
    "HostCalls",
    "HostEra",
    "ModernCall",
    "answer_host",
    "host_call",
    "is_request_id",
    "modern_call",
    "tracing",
    "wire_result",
]

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


def host_call(message: types.JSONRPCRequest, *, modern: bool = False) -> HostCall | None:
    """The call ``message`` is, when it is a ``tools/call`` whose params hold only
    ``name`` (text), ``arguments`` (an object, or none) and ``_meta`` (an object); None for
    anything else (the SDK path judges it). On a handshake connection (not ``modern``) a
    ``_meta`` carrying the 2026-07-28 envelope is anything else; on a 2026-07-28 one the
    envelope is the caller's to judge (the SDK's ladder, ``classify_inbound_request``)."""
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
    if not modern and meta is not None and PROTOCOL_VERSION_META_KEY in meta:
        # A 2026-07-28 envelope: the SDK refuses it on a handshake connection before any
        # handler runs, and its clientInfo must never name the caller of such a call.
        return None
    return HostCall(name, arguments, params, None if meta is None else meta.get("progressToken"))


def wire_result(
    result: Any, version: str, server_info: Callable[[], dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A ``tools/call`` result as the SDK's server puts it on the wire for a client of
    ``version``: dumped, then sieved by that version's surface (which drops, e.g., the
    2026-07-28 ``resultType`` the plain dump carries for a handshake-era client); for a
    2026-07-28 client also its ``resultType`` and the server's ``serverInfo`` stamp in
    ``_meta`` (``server_info``: the server's stamp, required for such a client), as the
    SDK adds them. Anything else is the SDK's invalid-result error."""
    if not isinstance(result, types.CallToolResult):
        raise MCPError(code=types.INTERNAL_ERROR, message=_INVALID_RESULT)
    dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    try:
        dumped = spec_methods.serialize_server_result("tools/call", version, dumped)
    except ValidationError:
        raise MCPError(code=types.INTERNAL_ERROR, message=_INVALID_RESULT) from None
    if version not in MODERN_PROTOCOL_VERSIONS:
        return dumped
    if server_info is None:  # a caller that takes such calls without the stamp: refused
        log.error("serving.no_server_info", version=version)
        raise MCPError(code=types.INTERNAL_ERROR, message="Internal server error")
    if dumped.get("resultType") is None:
        dumped["resultType"] = "complete"
    meta = dumped.get("_meta")
    if meta is None:
        dumped["_meta"] = {SERVER_INFO_META_KEY: server_info()}
    elif isinstance(meta, dict) and meta.get(SERVER_INFO_META_KEY) is None:
        dumped["_meta"] = {**meta, SERVER_INFO_META_KEY: server_info()}
    return dumped


async def answer_host(
    host: HostLink,
    request_id: types.RequestId,
    result: types.CallToolResult,
    version: str,
    server_info: Callable[[], dict[str, Any]] | None = None,
) -> None:
    """An answer made from a tool's result, shaped as the SDK's server shapes one for a
    client of ``version``."""
    try:
        message: types.JSONRPCResponse | types.JSONRPCError = types.JSONRPCResponse(
            jsonrpc="2.0", id=request_id, result=wire_result(result, version, server_info)
        )
    except MCPError as e:
        message = types.JSONRPCError(jsonrpc="2.0", id=request_id, error=e.error)
    except Exception as e:  # e.g. a result nested past what pydantic dumps: an error
        log.error("serving.answer_failed", error=type(e).__name__)  # answer, never a crash
        message = types.JSONRPCError(jsonrpc="2.0", id=request_id, error=_internal(e, version))
    await host.answer(message)


def _internal(e: Exception, version: str) -> types.ErrorData:
    """The error answer to a failure that is neither an ``MCPError`` nor a tool's: the SDK's
    words for a 2026-07-28 client (no internals on the wire), the failure for another."""
    if version in MODERN_PROTOCOL_VERSIONS:
        return types.ErrorData(code=types.INTERNAL_ERROR, message="Internal server error")
    return types.ErrorData(code=types.INTERNAL_ERROR, message=f"Error: {e}"[:500])


@dataclass(frozen=True)
class ModernCall:
    """A plain call on a 2026-07-28 connection, admitted as the SDK's stdio loop admits
    one (``modern_call``)."""

    call: HostCall
    version: str  # the envelope's protocol version
    envelope: InboundModernRoute  # its client info and capabilities, as sent
    typed: types.CallToolRequestParams
    meta: types.RequestParamsMeta | None  # the request's _meta as the SDK lifts it


def modern_call(message: types.JSONRPCRequest) -> ModernCall | None:
    """``message`` as the SDK's 2026-07-28 stdio loop admits a ``tools/call``: the plain
    shape (``host_call``), the envelope's ladder (``classify_inbound_request``: the keys
    it needs, a version it serves), the method's surface check for that version and
    ``CallToolRequestParams``; None at the first refusal (the SDK path answers it)."""
    call = host_call(message, modern=True)
    if call is None:
        return None
    params = call.params
    route = classify_inbound_request({"method": "tools/call", "params": params})
    if not isinstance(route, InboundModernRoute):
        return None
    try:
        spec_methods.validate_client_request("tools/call", route.protocol_version, params)
        typed = types.CallToolRequestParams.model_validate(params, by_name=False)
        meta = types.RequestParams.model_validate(params, by_name=False).meta
    except Exception:  # the SDK path answers it as it always has
        return None
    return ModernCall(call, route.protocol_version, route, typed, meta)


_NOT_TRACING = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


def tracing() -> bool:
    """Whether an OpenTelemetry tracer provider is installed: the SDK's middleware would
    record a span for each request, so no call is taken past it."""
    return not isinstance(trace.get_tracer_provider(), _NOT_TRACING)


class HostEra:
    """The protocol era the SDK's stdio loop serves a host's connection in, followed by a
    hook that sees every request before the SDK does: its first request opens the
    2026-07-28 era when it is not ``initialize`` and its ``_meta`` carries the envelope,
    the handshake era otherwise, for good (the SDK's rule, ``serve_dual_era_loop``)."""

    def __init__(self) -> None:
        self._era: Era | None = None

    def before(self, message: types.JSONRPCRequest) -> Era | None:
        """The era a request before ``message`` opened; None when ``message`` is the first
        (it opens the era and is the SDK's: never take it)."""
        era = self._era
        if era is None:
            meta = (message.params or {}).get("_meta")
            modern = (
                message.method != "initialize"
                and isinstance(meta, dict)
                and PROTOCOL_VERSION_META_KEY in meta
            )
            self._era = "2026-07-28" if modern else "handshake"
        return era


class HostCalls:
    """The calls taken and still running, by the client's (coerced) id."""

    def __init__(
        self,
        version: Callable[[], str],
        failed_event: str = "gateway.call_failed",
        server_info: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self._version = version  # the protocol version the client negotiated
        self._failed_event = failed_event  # the log line of a call that raised
        self._server_info = server_info  # the serverInfo stamp of a 2026-07-28 answer
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
        version: str | None = None,
    ) -> None:
        """Start ``run`` with ``spawn`` (``TaskGroup.start_soon``) and answer the host
        with its result, shaped for ``version`` (a 2026-07-28 call's own envelope's),
        else for the version the client negotiated."""
        scope = anyio.CancelScope()
        self._scopes[coerce_request_id(request_id)] = scope
        spawn(self._answer, request_id, name, run, host, scope, version)

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
        version: str | None,
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
            error = _internal(e, version or self._version())
            await host.answer(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))
            return
        finally:
            key = coerce_request_id(request_id)
            if self._scopes.get(key) is scope:  # not a later call reusing a cancelled id
                del self._scopes[key]
        if scope.cancelled_caught:  # the client cancelled it: never answered; settled by
            host.settle(request_id)  # the id it was admitted under (not the cancel's form)
            return
        await answer_host(
            host,
            request_id,
            result,  # type: ignore[arg-type]
            version or self._version(),
            self._server_info,
        )

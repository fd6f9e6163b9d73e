"""``continuum-mcp``'s plain tool calls over stdio, taken past the SDK's request pipeline.

Why: an agent calls ``continuum_intercept_action`` and ``continuum_complete_action``
around every side effect, and through the SDK's server each call crossed its dispatcher,
its runner, five middlewares (OpenTelemetry, the request-state boundary, ours), two
memory streams and a task of its own before the tool ran, and the same way back: more
than the ledger's own work (references/bench.md). The contract asks these calls for 70%
of the rate of a bare SDK tool.

What is skipped is only the plumbing. The call is still judged and run by the SDK's own
pieces, in the SDK's order: the method's surface check for the negotiated version
(``mcp_types.methods.validate_client_request``), ``CallToolRequestParams``, the
server's own ``tools/call`` handler (argument validation, our authorization and
unknown-argument checks, the tool on a worker thread, the result's conversion, its
mapping of a tool's error to an error result), then the version's result sieve
(``serialize_server_result``). The answer goes out on the hardened transport's one
wire (``HostLink``); a cancel from the client cancels it unanswered, as the SDK does.

Taken, only when all of these hold (anything else takes the SDK path, unchanged):

- the tools are registered (start-up part 2 finished without a refusal: ``startup.py``),
  the SDK recorded the client's ``initialize`` in a handshake-era protocol version and
  took its ``notifications/initialized`` (its session is remembered from there);
- the request is a plain ``tools/call`` (``host_call``: no 2026-07-28 envelope in its
  ``_meta``, which the SDK refuses on such a connection) of one of ``DIRECT_TOOLS``
  whose params pass both SDK checks above (a malformed one gets the SDK's own answer);
- what is skipped is what this was written against: the server's own ``tools/call``
  handler, no cache hint, only the known middlewares (``_pipeline_known``);
- no OpenTelemetry tracer provider is installed in the process (the SDK's middleware
  would record a span for the call; ``continuum-mcp`` installs none itself).

The call's context carries the session remembered at ``notifications/initialized``: the
client's ``initialize`` (who the caller is) and the negotiated version. It is not tied to
the request, so a tool taken here must neither report progress nor log to the client
(the three do neither; a test reads their code for it). ``--log-level debug`` logs
``mcp.direct_call`` for each call taken.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    JSONRPCNotification,
    JSONRPCRequest,
    RequestParams,
)
from mcp_types import methods as spec_methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from opentelemetry import trace

from continuum.log import get_logger
from continuum.serving.host_calls import HostCalls, host_call, is_request_id
from continuum.serving.transport import HostLink

if TYPE_CHECKING:
    from collections.abc import Callable

    from mcp.server.mcpserver import MCPServer
    from mcp.server.session import ServerSession

    from continuum.mcp.startup import Preparation

__all__ = ["DIRECT_TOOLS", "DirectCalls"]

_log = get_logger("continuum.mcp")

_KNOWN_MIDDLEWARES = frozenset(
    {
        ("mcp.server._otel", "OpenTelemetryMiddleware"),  # a span, skipped only when none is kept
        ("mcp.server.request_state", "RequestStateBoundary"),  # no request state in a plain call
        ("continuum.mcp.server", "LogConnectingClients"),  # logs the client at initialized
        ("continuum.mcp.startup", "AfterPreparation"),  # taken only once the tools are ready
        ("continuum.mcp.direct_calls", "DirectCalls"),
    }
)

DIRECT_TOOLS = frozenset(
    {"continuum_intercept_action", "continuum_complete_action", "continuum_fail_action"}
)
"""The effect path's tools: called around every side effect. Their bodies read the call's
context only for the caller (``Tools.authorize``, ``Tools.acting`` over stdio)."""

METHOD = "tools/call"


class DirectCalls:
    """The plain calls of ``DIRECT_TOOLS`` taken at the hardened transport's ``divert``.

    Also a server middleware: it remembers the SDK's session from the client's
    ``notifications/initialized`` (it never alters or vetoes)."""

    def __init__(self, server: MCPServer[Any], preparation: Preparation) -> None:
        self._server = server
        self._preparation = preparation
        self._session: ServerSession | None = None
        self._lifespan: Any = None
        self._taken = HostCalls(self._version, "mcp.call_failed")
        self.spawn: Callable[..., Any] | None = None  # the serving task group's start_soon
        self._known: bool | None = None

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        result = await call_next(ctx)  # remembered once the SDK has taken it
        if self._session is None and ctx.method == "notifications/initialized":
            self._session, self._lifespan = ctx.session, ctx.lifespan_context
        return result

    def _pipeline_known(self) -> bool:
        """Whether what a taken call skips is what this module was written against: the
        server's own ``tools/call`` handler (no extension's interceptor), no cache hint
        for it, and only the known middlewares (an SDK that adds one: the SDK path)."""
        if self._known is None:
            lowlevel = self._server._lowlevel_server  # SDK 2.3: no public accessor
            entry = lowlevel.get_request_handler(METHOD)
            middlewares = {(type(m).__module__, type(m).__qualname__) for m in lowlevel.middleware}
            self._known = (
                entry is not None
                and entry.handler == self._server._handle_call_tool
                and METHOD not in lowlevel.cache_hints
                and middlewares <= _KNOWN_MIDDLEWARES
            )
        return self._known

    def _version(self) -> str:
        assert self._session is not None  # nothing is taken before the handshake
        return self._session.protocol_version

    async def divert(
        self, message: JSONRPCRequest | JSONRPCNotification, line: bytes, host: HostLink
    ) -> bool:
        """The transport's hook: True when this took ``message`` (see the module text)."""
        if isinstance(message, JSONRPCNotification):
            if message.method == "notifications/cancelled" and self._taken.busy:
                request_id = (message.params or {}).get("requestId")
                return is_request_id(request_id) and self._taken.cancel(request_id)
            return False
        session = self._session
        if (
            message.method != METHOD
            or session is None
            or session.client_params is None  # the SDK's gate: an initialize it recorded
            or self.spawn is None
            or not self._preparation.succeeded
            or message.id in self._taken
            or not self._pipeline_known()
        ):
            return False
        call = host_call(message)
        if call is None or call.name not in DIRECT_TOOLS:
            return False
        version = session.protocol_version
        if version in MODERN_PROTOCOL_VERSIONS or _tracing():
            return False
        params = message.params or {}
        try:
            spec_methods.validate_client_request(METHOD, version, params)
            typed = CallToolRequestParams.model_validate(params, by_name=False)
            # the request's _meta as the SDK's runner lifts it (none when absent)
            meta = (
                RequestParams.model_validate(params, by_name=False).meta
                if "_meta" in params
                else None
            )
        except Exception:  # the SDK path answers it as it always has
            return False
        ctx: ServerRequestContext[Any, Any] = ServerRequestContext(
            session=session,
            lifespan_context=self._lifespan,
            protocol_version=version,
            method=METHOD,
            params=params,
            request_id=message.id,
            meta=meta,
        )

        async def run() -> CallToolResult:
            result = await self._server._handle_call_tool(ctx, typed)  # SDK 2.3: its handler
            return result  # type: ignore[return-value]  # not a tool result: the SDK's error

        _log.debug("mcp.direct_call", tool=call.name)  # which path each call took
        self._taken.take(self.spawn, message.id, call.name, run, host)
        return True


_NOT_TRACING = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


def _tracing() -> bool:
    """Whether a tracer provider is installed (the SDK's middleware would record a span)."""
    return not isinstance(trace.get_tracer_provider(), _NOT_TRACING)

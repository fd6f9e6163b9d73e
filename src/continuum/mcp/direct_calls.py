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

- the tools are registered (start-up part 2 finished without a refusal: ``startup.py``);
- on a handshake connection: the SDK recorded the client's ``initialize`` in a
  handshake-era protocol version and took its ``notifications/initialized`` (its session
  is remembered from there), and the request is a plain ``tools/call`` (``host_call``:
  no 2026-07-28 envelope in its ``_meta``, which the SDK refuses on such a connection);
- on a 2026-07-28 connection (Claude Code's: ``server/discover`` first, an envelope in
  every request): the SDK has served a request of that era on it (so the era is fixed;
  the first request always takes the SDK path), and the call's envelope passes the SDK's
  ladder (``classify_inbound_request``); the caller is that request's ``clientInfo``
  (``Connection.from_envelope``, as the SDK's stdio loop makes one per request), and the
  answer carries ``resultType`` and the ``serverInfo`` stamp as the SDK's does;
- the call is one of ``DIRECT_TOOLS`` and its params pass the version's surface check and
  ``CallToolRequestParams`` (a malformed one gets the SDK's own answer);
- what is skipped is what this was written against: the server's own ``tools/call``
  handler, no cache hint, only the known middlewares (``_pipeline_known``);
- no OpenTelemetry tracer provider is installed in the process (the SDK's middleware
  would record a span for the call; ``continuum-mcp`` installs none itself).

On a handshake connection the call's context carries the session remembered at
``notifications/initialized``: the client's ``initialize`` (who the caller is) and the
negotiated version; on a 2026-07-28 one a session with no channel back (``_NoBackChannel``).
Neither is tied to the request, so a tool taken here must neither report progress nor log
to the client (the three do neither; a test reads their code for it). ``--log-level
debug`` logs ``mcp.direct_call`` for each call taken.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.runner import aclose_shielded
from mcp.server.session import ServerSession
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.transport_context import TransportContext
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    JSONRPCNotification,
    JSONRPCRequest,
    RequestParams,
)
from mcp_types import methods as spec_methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from continuum.log import get_logger
from continuum.serving.host_calls import (
    HostCalls,
    host_call,
    is_request_id,
    modern_call,
    tracing,
)
from continuum.serving.transport import HostLink

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from mcp.server.mcpserver import MCPServer
    from mcp.shared.message import MessageMetadata
    from mcp_types import RequestId

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

    def __init__(
        self,
        server: MCPServer[Any],
        preparation: Preparation,
        observe: Callable[[str, Mapping[str, Any] | None, Any], None] | None = None,
    ) -> None:
        self._server = server
        self._preparation = preparation
        self._observe = observe  # what the client-logging middleware does with a request
        self._session: ServerSession | None = None
        self._modern = False  # the SDK serves this connection in the 2026-07-28 era
        self._lifespan: Any = None
        self._taken = HostCalls(self._version, "mcp.call_failed", self._server_info)
        self.spawn: Callable[..., Any] | None = None  # the serving task group's start_soon
        self._known: bool | None = None

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if not self._modern and ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            # Only a connection the SDK opened in the 2026-07-28 era has such a context
            # (a handshake connection negotiates handshake versions only), and its era is
            # fixed for good: its calls carry their own envelope from here on.
            self._lifespan, self._modern = ctx.lifespan_context, True
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

    def _server_info(self) -> dict[str, Any]:
        """The ``serverInfo`` stamp the SDK puts in a 2026-07-28 result's ``_meta``."""
        return self._server._lowlevel_server.server_info_stamp  # SDK 2.3: the runner's

    async def divert(
        self, message: JSONRPCRequest | JSONRPCNotification, line: bytes, host: HostLink
    ) -> bool:
        """The transport's hook: True when this took ``message`` (see the module text)."""
        if isinstance(message, JSONRPCNotification):
            if message.method == "notifications/cancelled" and self._taken.busy:
                request_id = (message.params or {}).get("requestId")
                return is_request_id(request_id) and self._taken.cancel(request_id)
            return False
        if (
            message.method != METHOD
            or self.spawn is None
            or not self._preparation.succeeded
            or message.id in self._taken
            or not self._pipeline_known()
            or tracing()
        ):
            return False
        if self._modern:
            return self._take_modern(message, host)
        session = self._session
        if session is None or session.client_params is None:  # the SDK's gate: an
            return False  # initialize it recorded
        call = host_call(message)
        if call is None or call.name not in DIRECT_TOOLS:
            return False
        version = session.protocol_version
        if version in MODERN_PROTOCOL_VERSIONS:  # never on a handshake connection
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
        ctx = self._context(session, version, message.id, params, meta)

        async def run() -> CallToolResult:
            result = await self._server._handle_call_tool(ctx, typed)  # SDK 2.3: its handler
            return result  # type: ignore[return-value]  # not a tool result: the SDK's error

        _log.debug("mcp.direct_call", tool=call.name)  # which path each call took
        self._taken.take(self.spawn, message.id, call.name, run, host)
        return True

    def _context(
        self,
        session: ServerSession,
        version: str,
        request_id: RequestId,
        params: dict[str, Any],
        meta: Any,
    ) -> ServerRequestContext[Any, Any]:
        """A taken call's context, as the SDK's runner makes one for a request on stdio."""
        return ServerRequestContext(
            session=session,
            lifespan_context=self._lifespan,
            protocol_version=version,
            method=METHOD,
            params=params,
            request_id=request_id,
            meta=meta,
        )

    def _take_modern(self, message: JSONRPCRequest, host: HostLink) -> bool:
        """A call on a 2026-07-28 connection, judged as the SDK's stdio loop judges one:
        the envelope's ladder (``classify_inbound_request``), a connection made from that
        envelope (``Connection.from_envelope``: who the caller is, per request), then the
        method's surface check for the envelope's version and ``CallToolRequestParams``;
        the result sieved, typed ``complete`` and stamped with ``serverInfo`` as the SDK's
        runner does. Any refusal on the way: the SDK path, which answers it."""
        assert self.spawn is not None
        admitted = modern_call(message)
        if admitted is None or admitted.call.name not in DIRECT_TOOLS:
            return False
        name, params, version, meta = (
            admitted.call.name,
            admitted.call.params,
            admitted.version,
            admitted.meta,
        )
        envelope = admitted.envelope
        connection = Connection.from_envelope(
            version, envelope.client_info, envelope.client_capabilities
        )
        session = ServerSession(_NoBackChannel(message.id), connection, request_meta=meta)
        ctx = self._context(session, version, message.id, params, meta)
        if self._observe is not None:
            self._observe(METHOD, params, meta)  # the client logged as the middleware does

        async def run() -> CallToolResult:
            try:
                result = await self._server._handle_call_tool(ctx, admitted.typed)  # SDK 2.3
            finally:
                await aclose_shielded(connection)  # as the SDK's serve_one ends a request
            return result  # type: ignore[return-value]  # not a tool result: the SDK's error

        _log.debug("mcp.direct_call", tool=name, era="2026-07-28")
        self._taken.take(self.spawn, message.id, name, run, host, version)
        return True


@dataclass
class _NoBackChannel:
    """The request channel of a call taken on a 2026-07-28 connection: none. Such a
    connection forbids server requests (the SDK refuses them too), and a taken call must
    not notify or report progress (see the module text): either raises."""

    request_id: RequestId
    cancel_requested: anyio.Event = field(default_factory=anyio.Event)
    transport: TransportContext = field(
        default_factory=lambda: TransportContext(kind="jsonrpc", can_send_request=False)
    )
    message_metadata: MessageMetadata = None
    can_send_request: bool = False

    async def send_raw_request(self, method: str, params: Any, opts: Any = None) -> Any:
        raise NoBackChannelError(method)

    async def notify(self, method: str, params: Any, opts: Any = None) -> None:
        raise RuntimeError(f"a call taken past the SDK's pipeline cannot send {method}")

    async def progress(self, progress: float, total: Any = None, message: Any = None) -> None:
        raise RuntimeError("a call taken past the SDK's pipeline cannot report progress")

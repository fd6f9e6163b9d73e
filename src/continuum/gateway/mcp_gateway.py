"""``continuum gateway mcp``: the ledger in front of another MCP server.

The gateway is an MCP server on stdio (for the host) and an MCP client of one upstream
server it starts as a subprocess. It lists the upstream's tools, exposes those whose
definition matches its pin (``pins.py``), and judges every ``tools/call`` by the rules
(``rules.py``):

- a call no effect rule matches is forwarded untouched and its answer returned as is
  (with an upstream on stdio past the SDK: ``relay.py`` sends the call as judged and
  relays the upstream's answer line verbatim; with ``--url`` past the SDK's server
  (``host_calls.py``) and its client (``http_leg.py``)); registered calls too pass the
  SDK by on both transports, judged here;
- a registered call is intercepted first (``Continuum.intercept``: one transaction,
  durable before anything is forwarded) and forwarded only when it may proceed; then the
  upstream's answer settles it: a result is ``completed`` (the result is stored), an
  ``isError`` result a certain failure (it did not happen: it may run again), and a lost
  connection, a dead upstream, a timeout or a cancelled call ``unknown`` (it may have
  happened);
- a repeat of a completed call is answered with the stored result, the upstream is not
  called; an ``unknown`` one (or one whose owner died: the gateway killed between
  forwarding and recording) is refused with what a person must do.

Origin: what the gateway records is ``deterministic``: the gateway, not the agent,
observes the upstream's answer, so its record of an outcome is continuum's own
observation (the call's arguments are kept as data, they decide nothing). The gateway
never settles an ``unknown`` action: only ``continuum reconcile`` (a person) or a probe
does; an agent's own ``continuum_reconcile`` over MCP still needs a person to confirm it.

Who may call a registered effect is ``continuum-mcp``'s policy (``serving/auth.py``): the
client's declared name on the allowlist (``CONTINUUM_MCP_MUTATING_CLIENTS``, alias
``CONTINUUM_MCP_ALLOW``, or ``.continuum/mcp-policy.json``), and its token when tokens
are set; deny by default. A refused call is not forwarded and nothing is recorded.
Unregistered and read-only calls pass whoever sends them: they are the upstream's own
business, as without the gateway.

The host side is ``continuum-mcp``'s hardened stdio transport (``serving/transport.py``):
a malformed or oversized line from the host gets a JSON-RPC error answer, not silence,
and at most ``DEFAULT_MAX_IN_FLIGHT`` requests are in flight (relayed ones included).

The store may be unusable (a locked, full, damaged or unreachable one): registered calls
are then refused (fail closed), unregistered ones still pass. The upstream may send
invalid JSON-RPC or die: each is logged on stderr and answered as an error result,
never a crash of the gateway.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from mcp import types
from mcp.client.session import ClientSession
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import LATEST_HANDSHAKE_VERSION
from pydantic import ValidationError

from continuum.errors import ContinuumError, NotFoundError, UsageError
from continuum.faults import fault_point
from continuum.gateway import mcp_answers as answers
from continuum.gateway.pins import Judgement, Pins, locked_pins
from continuum.gateway.relay import Relay
from continuum.gateway.rules import EffectRule, GatewayRules, render_key
from continuum.gateway.upstream import RECONNECT_TIMEOUT, UpstreamSessions
from continuum.ledger.gate import InterceptResult
from continuum.log import get_logger
from continuum.runtime.facade import Continuum
from continuum.serving.auth import Caller, Policy, caller_identity, log_denial
from continuum.serving.host_calls import (
    HostCalls,
    HostEra,
    host_call,
    is_request_id,
    modern_call,
    tracing,
)
from continuum.serving.transport import HostLink
from continuum.types import Origin

if TYPE_CHECKING:
    from continuum.gateway.http_leg import HttpLeg

log = get_logger("continuum.gateway")

DEFAULT_TIMEOUT = 120.0  # seconds a forwarded registered call may take before it is unknown
LEASE_RENEW_SECONDS = 10.0
# What an HTTP upstream that restarted answers a request on the old session (a 404): the
# Python SDK's client says the first when the body is not JSON-RPC, passes on the second
# from the Python SDK's server, the third from the TypeScript SDK's.
SESSION_REFUSALS = frozenset(
    {
        (types.INVALID_REQUEST, "Session terminated"),
        (types.INVALID_REQUEST, "Session not found"),
        (-32001, "Session not found"),
    }
)


@dataclass(frozen=True)
class GatewayConfig:
    """Everything ``continuum gateway mcp`` was told."""

    upstream: tuple[str, ...]  # the command that starts it (stdio), or () with ``url``
    rules: GatewayRules
    run: str
    server: str  # the upstream's name: its section of the pins file
    pins_path: Path
    db: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    url: str | None = None  # an upstream served over streamable HTTP instead of a command
    # Who may call a registered effect: continuum-mcp's allowlist and tokens (deny by
    # default: Policy() allows no client). Unregistered calls are the upstream's business.
    policy: Policy = field(default_factory=Policy)
    # sent with every HTTP request to ``url``; never shown (a value may be a secret)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    # --restart-upstream: a stdio upstream that exited is started again on the next call
    # (its state is lost; off by default: the host sees it fail, as without the gateway)
    restart: bool = False


class Gateway:
    """The two halves joined: ``list_tools`` and ``call_tool`` are the handlers of the
    server the host talks to; ``session`` is the client of the upstream."""

    def __init__(self, config: GatewayConfig, session: ClientSession) -> None:
        self.config = config
        self.session = session
        self.tools: dict[str, types.Tool] = {}  # exposed: definition matches its pin
        self.changed: dict[str, tuple[str, str]] = {}  # refused: name -> (pinned, new)
        # the exposed tools' pins as ``tool_schema_hash`` versions, from the same listing
        self.versions: dict[str, dict[str, str]] = {}
        self.upstream_gone: str | None = None  # why the upstream cannot be reached
        # the upstream's sessions, opened again (a stdio upstream started again) after a loss
        self.reconnector: UpstreamSessions | None = None
        self._reconnecting = anyio.Lock()
        # with an upstream on stdio: the relay in front of the running upstream process
        # (host calls past the SDK, and the gateway's own calls past the client session),
        # and how a registered call it takes from the host is started (``serve``'s group)
        self.relay: Relay | None = None
        # with an upstream over HTTP: the gateway's calls past the SDK's client, on the
        # session they belong to (``http_leg.py``)
        self.leg: tuple[ClientSession, HttpLeg] | None = None
        self.spawn: Callable[..., Any] | None = None
        self._retired: list[Relay] = []  # replaced relays still running calls they took
        # with an upstream over HTTP: the host's calls taken past the SDK's server, once
        # the host finished its handshake
        self._taken = HostCalls(self.host_version, server_info=self.server_info)
        # the SDK server's serverInfo stamp of a 2026-07-28 answer (``serve`` sets it)
        self.stamp: Callable[[], dict[str, Any]] | None = None
        self._host_ready = False
        self._era = HostEra()  # calls are taken from a handshake-era host only
        self._attempts = 0  # attempts to reach (or start) the upstream again, so far
        # The host's session as the SDK's server keeps it (its handshake's client_params),
        # seen by the first handler the SDK ran: a call the relay takes from the host is
        # authorized against the same handshake as one the SDK passes to ``call_tool``.
        self.host_session: Any = None
        self._rt: Continuum | None = None
        self._rt_lock = threading.Lock()

    # -- the store -------------------------------------------------------------------------

    def runtime(self) -> Continuum:
        """The facade, opened on first use (again after a failure); raises the store's
        error while it is unusable."""
        with self._rt_lock:
            if self._rt is None:
                rt = Continuum.open(self.config.db, origin=Origin.DETERMINISTIC)
                try:
                    rt.store.get_run(self.config.run)
                except NotFoundError:
                    try:
                        rt.start_run(
                            self.config.run,
                            None,
                            metadata={
                                "created_by": "continuum gateway mcp",
                                "upstream": self.config.server,
                            },
                        )
                    except UsageError as e:
                        if e.code != "usage.run_exists":  # another gateway made it just now
                            rt.close()
                            raise
                except BaseException:
                    rt.close()
                    raise
                self._rt = rt
            return self._rt

    def drop_runtime(self) -> None:
        with self._rt_lock:
            if self._rt is not None:
                rt, self._rt = self._rt, None
                with contextlib.suppress(ContinuumError):
                    rt.close()

    def renew_leases(self) -> None:
        with self._rt_lock:
            rt = self._rt
        if rt is not None:
            rt.ledger.renew_held_leases()

    # -- tools/list --------------------------------------------------------------------------

    async def refresh(self) -> None:
        """List the upstream's tools and judge them against the pins (saving new pins and
        pending changes)."""
        listed: list[types.Tool] = []
        cursor: str | None = None
        while True:
            page = await self.session.list_tools(
                params=types.PaginatedRequestParams(cursor=cursor) if cursor else None
            )
            listed += page.tools
            cursor = page.next_cursor
            if not cursor:
                break
        definitions = [(t.name, t.description, t.input_schema) for t in listed]

        def judged() -> Judgement:
            judgement = Pins.load(self.config.pins_path).judge(self.config.server, definitions)
            if not judgement.modified:
                return judgement  # nothing to write: no lock (a read-only pins file works)
            # Judged again under the pins lock, then saved: a person's `gateway accept`
            # meanwhile is read, not written over.
            with locked_pins(self.config.pins_path) as pins:
                judgement = pins.judge(self.config.server, definitions)
                if judgement.modified:
                    pins.save()
                return judgement

        judgement = await anyio.to_thread.run_sync(judged)
        for name in judgement.pinned_now:
            log.info("gateway.tool_pinned", server=self.config.server, tool=name)
        for name, (old, new) in judgement.changed.items():
            log.warning(
                "gateway.tool_changed",
                server=self.config.server,
                tool=name,
                pinned=old,
                new=new,
                hint="not exposed until a person runs `continuum gateway accept`",
            )
        exposed = set(judgement.exposed)
        self.versions = {
            name: {"tool_schema_hash": "sha256:" + judgement.digests[name]} for name in exposed
        }
        self.tools = {t.name: t for t in listed if t.name in exposed}
        self.changed = judgement.changed

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self.host_session = ctx.session
        await self.reach()
        if self.upstream_gone is None:
            session = self.session
            try:
                await self.refresh()
            except Exception as e:  # the upstream is gone: list what was last judged
                self._lost(e, session)
        return types.ListToolsResult(tools=list(self.tools.values()))

    async def reach(self) -> None:
        """With an upstream that was lost: a session in place of the lost one (over HTTP,
        reached again; on stdio with ``--restart-upstream``, the command started again
        behind a new relay; one attempt at a time; calls meanwhile wait for it, each at
        most ``RECONNECT_TIMEOUT``), its tools judged against the pins again before
        anything is forwarded. Without that flag a stdio upstream that exited stays gone:
        its lost state is the host's to see fail, as without the gateway."""
        if self.upstream_gone is None or self.reconnector is None:
            return
        if self.config.url is None and not self.config.restart:
            return  # a stdio upstream that exited stays gone unless --restart-upstream
        # An attempt under way when this call came (or begun before it got the lock) is
        # this call's too: when it failed, the call is answered gone, not by one more.
        waited, seen = self._reconnecting.locked(), self._attempts
        async with self._reconnecting:
            if self.upstream_gone is None:
                return  # another call reached it meanwhile
            if waited or self._attempts != seen:
                return
            self._attempts += 1
            if self.relay is not None:
                await self.relay.retire()  # its calls answered: the stop that comes is ours
            attempt = await self.reconnector.again(self.session)
            if attempt.session is None or not attempt.open:
                why = (
                    f"{type(attempt.failure).__name__}: {attempt.failure}"
                    if attempt.failure is not None
                    else f"no session within {RECONNECT_TIMEOUT:g} s"
                )
                self.upstream_gone = f"not reached again ({why})"[:500]
                log.warning(
                    "gateway.upstream_unreachable",
                    server=self.config.server,
                    error=self.upstream_gone,
                )
                return
            # Its tools are judged against the pins before anything is sent on it: until
            # then the upstream stays gone (calls wait on the lock, or are refused).
            self.session = attempt.session
            self.leg = None if attempt.leg is None else (attempt.session, attempt.leg)
            try:
                with anyio.fail_after(RECONNECT_TIMEOUT):
                    await self.refresh()
            except Exception as e:
                listed = f"its tools could not be listed: {type(e).__name__}: {e}"
                self.upstream_gone = f"not reached again ({listed})"[:500]
                log.warning(
                    "gateway.upstream_unreachable",
                    server=self.config.server,
                    error=self.upstream_gone,
                )
                return
            if attempt.relay is not None:  # a stdio upstream started again: its new relay
                old, self.relay = self.relay, attempt.relay
                assert self.spawn is not None
                host_ready = old is not None and old.host_ready
                attempt.relay.bind(self, self.spawn, host_ready=host_ready)
                if old is not None and old.busy:
                    self._retired.append(old)
            self.upstream_gone = None
            log.warning("gateway.upstream_reconnected", server=self.config.server)

    # -- the relay's questions (relay.Route): unregistered calls on a stdio upstream ----------

    async def divert(
        self,
        message: types.JSONRPCRequest | types.JSONRPCNotification,
        line: bytes,
        host: HostLink,
    ) -> bool:
        """The host transport's hook: the current relay's (a stdio upstream started again
        has a new one); a host's cancel of a call a replaced relay took is that relay's."""
        if isinstance(message, types.JSONRPCRequest):
            era = self._era.before(message)
            if era != "handshake":  # the first request is the SDK's (it opens the era)
                return era is not None and await self._take_modern(message, host)
            if tracing():  # the SDK's middleware records a span for each request: its path
                return False
        elif message.method == "notifications/cancelled" and self._taken.busy:
            request_id = (message.params or {}).get("requestId")
            if is_request_id(request_id) and self._taken.cancel(request_id):
                return True  # a call taken from a 2026-07-28 host (or past an HTTP leg)
        relay = self.relay
        if relay is None:
            return await self._take(message, host) if self.config.url is not None else False
        if (
            self._retired
            and isinstance(message, types.JSONRPCNotification)
            and message.method == "notifications/cancelled"
        ):
            self._retired = [r for r in self._retired if r.busy]
            for old in self._retired:
                if await old.divert(message, line, host):
                    return True
        return await relay.divert(message, line, host)

    async def _take(
        self, message: types.JSONRPCRequest | types.JSONRPCNotification, host: HostLink
    ) -> bool:
        """An upstream over HTTP: once the host finished its handshake, a plain call of an
        exposed tool (``judge``) is taken past the SDK's server (``host_calls.py``) and
        run as ``call_tool`` runs it (forwarded through the client session, or judged as
        a registered one); anything else takes the SDK path."""
        if isinstance(message, types.JSONRPCNotification):
            if message.method == "notifications/initialized":
                self._host_ready = True  # the SDK's server needs it too
            elif message.method == "notifications/cancelled":
                request_id = (message.params or {}).get("requestId")
                if is_request_id(request_id) and self._taken.cancel(request_id):
                    return True
            return False
        if not self._host_ready or self.spawn is None or message.id in self._taken:
            return False
        call = host_call(message)
        if call is None:
            return False
        verdict = self.judge(call.name, call.arguments)
        if verdict is False:
            return False
        name, arguments, params = call.name, call.arguments, call.params

        async def run() -> types.CallToolResult:
            if verdict is True:
                return await self._pass_through(name, arguments)
            return await self.call(verdict, name, arguments, params)

        log.debug("gateway.direct_call", tool=name, era="handshake")
        self._taken.take(self.spawn, message.id, name, run, host)
        return True

    async def _take_modern(self, message: types.JSONRPCRequest, host: HostLink) -> bool:
        """A host of the 2026-07-28 era (Claude Code's): a call of an exposed tool, admitted
        as the SDK's stdio loop admits one (``modern_call``: the envelope's ladder, the
        surface check, the parameters), goes past the SDK's server: an unregistered one to
        a stdio upstream relayed (``Relay.relay_modern``), any other run as ``call_tool``
        runs it (passed upstream, or judged as a registered one, the caller named by this
        request's own envelope); its answer shaped for the envelope's version and stamped
        with the gateway's ``serverInfo``, as the SDK's. Anything else (the SDK refuses it,
        an unexposed or changed tool, an unknown host session, a tracer provider
        installed): the SDK path."""
        if (
            message.method != "tools/call"
            or self.spawn is None
            or self.stamp is None
            or message.id in self._taken
            or tracing()
        ):
            return False
        admitted = modern_call(message)
        if admitted is None:
            return False
        name, arguments, params = (
            admitted.call.name,
            admitted.call.arguments,
            admitted.call.params,
        )
        verdict = self.judge(name, arguments)
        if verdict is False:
            return False
        if verdict is True and self.relay is not None:  # relayed, its answer reshaped
            relayed = await self.relay.relay_modern(message, admitted.call, admitted.version, host)
            if relayed:
                log.debug("gateway.direct_call", tool=name, era="2026-07-28", relayed=True)
            return relayed

        async def run() -> types.CallToolResult:
            if verdict is True:
                return await self._pass_through(name, arguments)
            return await self.call(verdict, name, arguments, params)

        log.debug("gateway.direct_call", tool=name, era="2026-07-28")
        self._taken.take(self.spawn, message.id, name, run, host, admitted.version)
        return True

    def server_info(self) -> dict[str, Any]:
        """The SDK server's ``serverInfo`` stamp, which a 2026-07-28 answer carries."""
        assert self.stamp is not None  # nothing 2026-07-28 is taken without it
        return self.stamp()

    def host_version(self) -> str:
        """The protocol version the host negotiated (a call is taken only once its
        handshake is done; before the SDK's server saw a request of it, the handshake
        era's latest, whose result sieve is the same)."""
        session = self.host_session
        return session.protocol_version if session is not None else LATEST_HANDSHAKE_VERSION

    def judge(self, name: str, arguments: dict[str, Any]) -> EffectRule | bool:
        """What the relay may do with a host's call: True, send it upstream as bytes (what
        ``call_tool`` would forward untouched: an exposed tool, no effect rule, the
        upstream not gone); its effect rule, run it with ``call`` (a registered call of an
        exposed tool, once the host's handshake is known); False, leave it to the SDK (also
        when a rule cannot judge these arguments: the SDK path decides)."""
        if self.upstream_gone is not None or name not in self.tools or name in self.changed:
            return False
        try:
            rule = self.config.rules.find(name, arguments)
        except Exception:
            return False
        if rule is None:
            return True
        return rule if self.host_session is not None else False

    async def call(
        self, rule: EffectRule, name: str, arguments: dict[str, Any], params: dict[str, Any]
    ) -> types.CallToolResult:
        """A registered call the relay took from the host (``judge`` gave its rule): as
        ``call_tool`` runs it, the caller read from the same handshake and ``_meta``."""
        try:  # the request's _meta as the SDK's server lifts it for ``ctx.meta``
            meta = types.RequestParams.model_validate(params, by_name=False).meta
        except ValidationError:
            meta = None
        caller = caller_identity(self.host_session.client_params, meta)
        refused = self._not_exposed(name)  # judged again: the upstream may be a new one now
        if refused is not None:
            return refused
        return await self._judged(rule, name, arguments, caller)

    def no_answer(
        self, name: str, error: Exception, session: ClientSession | None = None
    ) -> types.CallToolResult:
        self._lost(error, session)
        if self.upstream_gone is not None:
            return self._gone_result(name)
        return answers.bad_answer(self.config.server, name, error)

    def gone(self, name: str) -> types.CallToolResult:
        return self._gone_result(name)

    def lost(self, error: BaseException) -> None:
        self._lost(error)

    def session_refused(self, e: BaseException, session: ClientSession) -> bool:
        """Whether an HTTP upstream answered that it no longer knows ``session`` (it
        restarted): it answered 404 to a request carrying the session's id (seen on the
        HTTP response itself), and the error is the transport's own for it, exactly as the
        MCP SDKs spell it (``SESSION_REFUSALS``), never a tool's error that only mentions a
        session. An answer, so the request was refused, not performed."""
        return (
            self.reconnector is not None
            and isinstance(e, MCPError)
            and (e.error.code, e.error.message) in SESSION_REFUSALS
            and self.reconnector.refused(session)
        )

    def _lost(self, e: BaseException, session: ClientSession | None = None) -> None:
        """Report an upstream failure; a closed connection (the upstream exited, or closed
        its stdout) or a session an HTTP upstream refused marks it gone (an HTTP one is
        reached again on the next call), anything else (a timeout, an answer that is not
        valid MCP) is reported and the next call is tried again. ``session``: the one
        the failed request went on; a failure of a session already replaced changes
        nothing (the new one is not ended for the old one's sake)."""
        problem = f"{type(e).__name__}: {e}"[:500]
        if session is not None and session is not self.session:
            log.info("gateway.upstream_old_session", server=self.config.server, error=problem)
            return
        if (isinstance(e, MCPError) and e.error.code == types.CONNECTION_CLOSED) or (
            self.session_refused(e, session or self.session)
        ):
            self.upstream_gone = problem
            log.error("gateway.upstream_lost", server=self.config.server, error=problem)
        else:
            log.warning("gateway.upstream_bad_answer", server=self.config.server, error=problem)

    # -- tools/call --------------------------------------------------------------------------

    def _pin_refusal(self, name: str) -> types.CallToolResult:
        old, new = self.changed[name]
        return answers.tool_changed(self.config.server, name, old, new)

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        self.host_session = ctx.session
        name = params.name
        arguments = dict(params.arguments or {})
        await self.reach()
        if name not in self.tools and name not in self.changed and self.upstream_gone is None:
            session = self.session
            try:
                await self.refresh()  # the upstream may have added it since the last listing
            except Exception as e:
                self._lost(e, session)
        refused = self._not_exposed(name)
        if refused is not None:
            return refused
        rule = self.config.rules.find(name, arguments)
        if rule is None:
            return await self._pass_through(name, arguments)
        caller = caller_identity(ctx.session.client_params, ctx.meta)
        return await self._judged(rule, name, arguments, caller)

    def _not_exposed(self, name: str) -> types.CallToolResult | None:
        """The refusal of a tool the gateway does not expose now (changed since pinned,
        or not offered), or None."""
        if name in self.changed:
            return self._pin_refusal(name)
        if name not in self.tools:
            return answers.unknown_tool(self.config.server, name)
        return None

    async def _judged(
        self, rule: EffectRule, name: str, arguments: dict[str, Any], caller: Caller
    ) -> types.CallToolResult:
        """A call of an exposed tool that ``rule`` registers: authorized, then recorded."""
        decision = self.config.policy.authorize(name, caller)
        if not decision.allowed:
            log_denial(decision)
            return answers.not_allowed(rule, name, decision.reason, decision.remedy, decision.code)
        return await self._registered(rule, name, arguments)

    async def _forward(
        self, name: str, arguments: dict[str, Any], session: ClientSession
    ) -> types.CallToolResult:
        """The call, sent upstream as it came. Its result is not checked against the
        tool's output schema here (``ClientSession.call_tool`` would): the host checks
        what it receives, and the gateway answers with the upstream's result unchanged.
        With an upstream on stdio the relay sends it (the same request and the same
        errors as the client session, without its turns of the event loop)."""
        if self.relay is not None:
            return await self.relay.forward(name, arguments)
        if self.leg is not None and self.leg[0] is session and self.leg[1].ready:
            return await self.leg[1].call(name, arguments, self.config.timeout)
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(name=name, arguments=arguments)
        )
        return await session.send_request(
            request, types.CallToolResult, request_read_timeout_seconds=self.config.timeout
        )

    async def _pass_through(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        if self.upstream_gone is not None:
            return self._gone_result(name)
        session = self.session
        try:
            return await self._forward(name, arguments, session)
        except Exception as e:
            if not self.session_refused(e, session):
                return self.no_answer(name, e, session)
            self._lost(e, session)  # refused, not performed: sent again on a new session
        await self.reach()
        if self.upstream_gone is not None:
            return self._gone_result(name)
        refused = self._not_exposed(name)  # judged again on the new session's listing
        if refused is not None:
            return refused
        session = self.session
        try:
            return await self._forward(name, arguments, session)
        except Exception as e:
            return self.no_answer(name, e, session)

    def _gone_result(self, name: str) -> types.CallToolResult:
        return answers.upstream_gone(
            self.config.server,
            str(self.upstream_gone),
            name,
            reconnects=self.config.url is not None,
            restarts=self.config.restart,
        )

    def _versions(self, name: str) -> dict[str, str] | None:
        """The call's tool definition as the action's ``tool_schema_hash`` (its pin: name,
        description, input schema, hashed when the listing was judged against the pins):
        an interrupted safe/idempotent call is not run again under a tool that changed
        since (``version_drift``)."""
        return self.versions.get(name)

    async def _registered(
        self, rule: EffectRule, name: str, arguments: dict[str, Any], *, probe: bool = True
    ) -> types.CallToolResult:
        run = self.config.run
        judged_on = self.session  # the upstream whose listing judged this call
        try:
            key = render_key(rule, name, arguments)
            recorded = answers.kept_arguments(self.config.server, rule, name, arguments)
            versions = self._versions(name)

            def intercept() -> tuple[Continuum, InterceptResult]:
                rt = self.runtime()  # opened in the same worker-thread turn, not one more
                return rt, rt.intercept(
                    run,
                    rule.action_type,
                    recorded,
                    key=key,
                    replay=rule.replay,
                    versions=versions,
                    block_drift=rule.block_drift,
                )

            rt, decision = await anyio.to_thread.run_sync(intercept)
        except ContinuumError as e:
            if e.code.startswith("store."):
                self.drop_runtime()  # open it again for the next call
            log.warning("gateway.call_refused", tool=name, code=e.code)
            return answers.unrecordable(rule, name, e)
        ref = decision.action_key
        status = str(decision.status)
        probed = ""
        if status == "unknown" and rule.probe is not None and probe:
            try:
                verdict, said = await anyio.to_thread.run_sync(
                    lambda: self._probe(rt, rule, name, arguments, decision.action_id)
                )
            except ContinuumError as e:  # another gateway settled it, or the store failed
                if e.code.startswith("store."):
                    self.drop_runtime()
                verdict, said = "unknown", f"recording its verdict failed: {e.message} [{e.code}]"
            if verdict == "occurred":
                return answers.probe_found(
                    name, ref, decision.action_id, said, no_result=self._no_result(name)
                )
            if verdict == "not_occurred":  # settled as failed by continuum's own check
                return await self._registered(rule, name, arguments, probe=False)
            probed = f"The rule's probe could not tell ({said}). "
        if decision.proceed:
            return await self._perform(rt, name, arguments, ref, judged_on)
        if status == "completed":
            return answers.from_ledger(
                decision.previous_result,
                name,
                ref,
                decision.action_id,
                no_result=self._no_result(name),
            )
        return answers.ledger_refusal(
            self.config.server,
            run,
            name,
            ref,
            decision.action_id,
            status,
            decision.guidance,
            probed,
        )

    def _probe(
        self, rt: Continuum, rule: EffectRule, name: str, arguments: dict[str, Any], action_id: str
    ) -> tuple[str, str]:
        """Run the rule's probe for an unknown action (a check continuum runs itself: its
        conclusive verdict settles the action, origin deterministic). Returns the verdict
        and a short account of what the probe said."""
        from continuum.hooks.probes import run_probe
        from continuum.hooks.registry import render_probe
        from continuum.state.records import ActionRecord

        assert rule.probe is not None
        try:
            command = render_probe(rule.probe, {**arguments, "tool_name": name})
        except UsageError as e:
            return "unknown", f"it could not be filled in: {e.message}"
        row = rt.store.get_action(self.config.run, action_id)
        if row is None:
            return "unknown", "the action is not in the store"
        record = ActionRecord.model_validate(row.record)
        code, verdict, output = run_probe(rt, self.config.run, record, command, None)
        log.info("gateway.probed", action=record.action_key, exit_code=code, verdict=verdict)
        return verdict, f"exit {code}" + (f": {output.strip()[:200]}" if output.strip() else "")

    def _no_result(self, name: str) -> bool:
        """Whether an answer without the upstream's result must be marked ``isError``: a
        tool with an output schema must return structured content otherwise, which only
        the upstream has (the client would reject the answer)."""
        tool = self.tools.get(name)
        return tool is not None and tool.output_schema is not None

    async def _settle(
        self,
        rt: Continuum,
        ref: str,
        *,
        result: Any = None,
        error: str | None = None,
        certain: bool = False,
    ) -> None:
        """Record the outcome; a store error here is logged (the upstream already ran: the
        action stays started, owned by this process, and becomes unknown when it ends)."""
        run = self.config.run
        try:
            with anyio.CancelScope(shield=True):
                if error is None:
                    await anyio.to_thread.run_sync(lambda: rt.complete(run, ref, result=result))
                else:
                    await anyio.to_thread.run_sync(
                        lambda: rt.fail(run, ref, error=error, certain=certain)
                    )
        except ContinuumError as e:
            log.error("gateway.settle_failed", action=ref, code=e.code, message=e.message)

    async def _perform(
        self,
        rt: Continuum,
        name: str,
        arguments: dict[str, Any],
        ref: str,
        judged_on: ClientSession,
    ) -> types.CallToolResult:
        run = self.config.run
        if self.upstream_gone is not None:
            await self._settle(rt, ref, error="the upstream was gone: not forwarded", certain=True)
            return self._gone_result(name)
        if self.session is not judged_on:  # reached (or started) again since it was judged
            await self._settle(
                rt, ref, error="the upstream was replaced before it was sent", certain=True
            )
            return answers.replaced_before_sent(self.config.server, run, name, ref)
        session = self.session
        try:
            result = await self._forward(name, arguments, session)
        except anyio.get_cancelled_exc_class():
            await self._settle(rt, ref, error="the call was cancelled mid-flight")
            raise
        except Exception as e:
            self._lost(e, session)
            if self.session_refused(e, session):  # an answer: it did not perform it
                await self._settle(
                    rt, ref, error=f"the upstream refused the session: {e}"[:2000], certain=True
                )
                return answers.session_refused(self.config.server, run, name, ref, e)
            await self._settle(
                rt, ref, error=f"no answer from the upstream ({type(e).__name__}: {e})"[:2000]
            )
            return answers.unknown_outcome(self.config.server, run, name, ref, e)
        fault_point("gateway_after_forward")  # crash tests: forwarded, nothing recorded yet
        if result.is_error:
            await self._settle(rt, ref, error=answers.result_text(result), certain=True)
            return result
        await self._settle(rt, ref, result=answers.kept_result(result))
        return result

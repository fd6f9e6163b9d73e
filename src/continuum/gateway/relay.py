"""The upstream on stdio for ``continuum gateway mcp``, with a byte relay for the calls
the ledger has no business with.

Why: a ``tools/call`` no effect rule matches is the upstream's own business, yet through
the SDK it cost as much again as the call itself: parsed and validated by the gateway's
server, rebuilt as a request, sent by ``ClientSession``, its answer parsed, validated and
encoded again (2.06 ms against 1.09 ms straight to the upstream). Such a call's line now
goes to the upstream as the host wrote it, and the upstream's answer line back to the
host as the upstream wrote it.

What this module owns:

- the upstream subprocess, started and stopped as the SDK's ``stdio_client`` does (its
  own process group; at the end its stdin closed, a grace period, then the group
  terminated), on pipes of the gateway's own: its stdin written by asyncio's pipe
  transport (``StdinPipe``: whole lines in order, a cancellable wait for room), its
  stdout read by one reader watched by the loop between reads (``FdSource``); and the
  pair of memory streams the gateway's ``ClientSession`` runs over;
- two id spaces on the upstream's wire: each request of the gateway's own session goes
  out with the id ``continuum-gateway:<n>`` (restored on its answer; its cancels and
  progress tokens likewise), and a host request whose id has that prefix is never
  relayed. So the host's ids, relayed as they are, never meet the gateway's own: an
  upstream answer without the prefix is a relayed call's, or a stray one, never the
  session's;
- the relay: ``Relay.divert`` is the hook of the hardened host transport
  (``serving/transport.py``). It takes a host ``tools/call`` once the host finished its
  handshake, when the params hold only ``name``, ``arguments`` and ``_meta``, and the
  gateway (the ``Route``) says so: the tool is exposed, the upstream not gone, no effect
  rule matches. The call goes upstream re-encoded from what was judged (the host's bytes
  could hold a key twice, and an upstream keeping the first one would run another call
  than the rules saw), ``_meta`` cut down to ``progressToken`` (its other keys may be the
  host's token for the gateway; the SDK path dropped them all). A progress token with the
  reserved prefix is not relayed. A taken request still counts against the host's
  in-flight limit until its answer is written;
- the answers: the upstream's JSON-RPC 2.0 answer (a result or an error) to a relayed id
  goes to the host verbatim, and so does its ``notifications/progress`` for a relayed
  call's token (results are not checked against a schema: the host checks what it gets,
  as without the gateway). A host's cancel of a relayed call is forwarded and the call
  settled with no answer, as the SDK does. A relayed call with no answer in the
  gateway's timeout gets the answer the SDK path gives (``upstream_bad_answer``) and the
  upstream a cancel, as the SDK sends; when the upstream's stdout ends, every relayed
  call still open gets the ``upstream_gone`` answer. None can hang;
- registered calls, past the SDK on both sides (each SDK side cost about as much CPU
  as the ledger's two commits): once the gateway has seen the host's handshake (the
  SDK's server ran one of its handlers), a host ``tools/call`` an effect rule matches is
  taken too and run by the gateway (``Route.call``: authorized against that handshake and
  the call's ``_meta`` as ``call_tool`` is, intercepted, forwarded, settled) in a task of
  the serving group, then answered as the SDK's server answers; a host's cancel cancels
  it unanswered, as the SDK does. Whichever side took it, the gateway forwards a
  registered call with ``Relay.forward``: with the id ``continuum-gateway:call-<n>``,
  the request ``ClientSession`` would send, and the same outcomes (an error answer,
  a timeout with a cancel to the upstream, a closed connection, a result that is not a
  tool result), without the session's streams;
- everything else the upstream sends is validated into JSON-RPC for the session, as
  ``stdio_client`` does (an invalid line reaches it as an exception, which the gateway
  logs).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import IO, Any, Protocol, TypeGuard

import anyio
import anyio.lowlevel
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectSendStream
from mcp import types
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types.version import LATEST_HANDSHAKE_VERSION
from pydantic import ValidationError

from continuum.log import get_logger
from continuum.serving.host_calls import (
    HostCall,
    HostCalls,
    answer_host,
    host_call,
    is_request_id,
)
from continuum.serving.transport import (
    BoundedLineReader,
    FdSource,
    HostLink,
    OversizedLine,
)

__all__ = ["RESERVED_ID_PREFIX", "Relay", "Route", "StdinPipe", "open_stdio_upstream"]

log = get_logger("continuum.gateway")

RESERVED_ID_PREFIX = "continuum-gateway:"
"""The ids of the gateway's own requests to the upstream; never relayed from the host."""

GRACE_SECONDS = 2.0  # the upstream's time to exit once its stdin closes (as stdio_client)
KILL_SECONDS = 2.0  # after SIGTERM to its process group, before SIGKILL
FLUSH_SECONDS = 0.5  # the session's last messages' time to reach the upstream at the end
_NO_LIMIT = sys.maxsize  # the upstream's lines are not bounded (nor were they by stdio_client)


class Route(Protocol):
    """What the relay asks the gateway: which calls pass, and the answers it gives."""

    def judge(self, name: str, arguments: dict[str, Any]) -> Any:
        """True: the call may go upstream untouched (an exposed, unregistered tool);
        False: the SDK path decides (also when a rule cannot judge the arguments); anything
        else is a ticket for ``call``. Never raises."""
        ...

    async def call(
        self, ticket: Any, name: str, arguments: dict[str, Any], params: dict[str, Any]
    ) -> types.CallToolResult:
        """Run a call ``judge`` gave a ticket for (it forwards with ``Relay.forward``)."""
        ...

    def no_answer(self, name: str, error: Exception) -> types.CallToolResult:
        """The answer to a relayed call the upstream did not validly answer."""
        ...

    def gone(self, name: str) -> types.CallToolResult:
        """The answer to a relayed call whose upstream is gone."""
        ...

    def lost(self, error: BaseException) -> None:
        """The upstream's connection failed: report it (a closed one is gone for good)."""
        ...

    def host_version(self) -> str:
        """The protocol version the host negotiated (its answers are shaped for it)."""
        ...

    def server_info(self) -> dict[str, Any]:
        """The gateway server's ``serverInfo`` stamp (a 2026-07-28 answer carries it)."""
        ...


Outcome = dict[str, Any] | Exception  # the upstream's answer to a call of the gateway's own


@dataclass
class _Pending:
    request_id: types.RequestId  # as the host sent it, or the reserved id of an own call
    name: str
    deadline: float
    host: HostLink | None  # None: the gateway's own call, answered to ``waiter``
    token: types.RequestId | None  # its progressToken, coerced
    waiter: MemoryObjectSendStream[Outcome] | None = None
    # a 2026-07-28 host's call: its envelope's version (its answer is reshaped for it, as
    # the SDK path shapes the gateway's own call's result); None: relayed as bytes
    version: str | None = None


def _reserved(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and value.startswith(RESERVED_ID_PREFIX)


def _own(value: str) -> types.RequestId:
    """The session's id behind a reserved one (anything else stays as it is: no match)."""
    rest = value[len(RESERVED_ID_PREFIX) :]
    return int(rest) if rest.isascii() and rest.isdigit() else value


def _is_answer(data: Mapping[str, Any]) -> bool:
    if data.get("jsonrpc") != "2.0" or ("result" in data) == ("error" in data):
        return False
    if "result" in data:
        return isinstance(data["result"], dict)
    error = data["error"]
    code = error.get("code") if isinstance(error, dict) else None
    return type(code) is int and isinstance(error.get("message"), str)


def _not_an_answer() -> ValueError:
    return ValueError("the answer is not a JSON-RPC 2.0 result or error")


def _call_result(outcome: Mapping[str, Any] | Exception) -> types.CallToolResult:
    """What a call's outcome is as ``ClientSession.send_request`` gives it: the result
    validated as a ``CallToolResult`` (``ValidationError`` when it is not one), an error
    answer raised as ``MCPError``, a failure (``Exception``) raised as it is."""
    if isinstance(outcome, Exception):
        raise outcome
    if "error" in outcome:
        error = types.ErrorData.model_validate(outcome["error"])
        raise MCPError(error.code, error.message, error.data)
    return types.CallToolResult.model_validate(outcome["result"], by_name=False)


def _session_line(message: types.JSONRPCMessage) -> bytes:
    """A message of the session as it goes upstream: its own ids in the reserved form,
    encoded as the SDK's stdio client does."""
    if isinstance(message, types.JSONRPCRequest):
        update: dict[str, Any] = {"id": f"{RESERVED_ID_PREFIX}{message.id}"}
        meta = (message.params or {}).get("_meta")
        if isinstance(meta, dict) and meta.get("progressToken") == message.id:
            params = dict(message.params or {})
            params["_meta"] = {**meta, "progressToken": update["id"]}
            update["params"] = params
        message = message.model_copy(update=update)
    elif isinstance(message, types.JSONRPCNotification) and message.method == (
        "notifications/cancelled"
    ):
        params = dict(message.params or {})
        if isinstance(params.get("requestId"), int):
            params["requestId"] = f"{RESERVED_ID_PREFIX}{params['requestId']}"
            message = message.model_copy(update={"params": params})
    return message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"


def _cancel_line(request_id: types.RequestId, reason: str) -> bytes:
    cancel = {"requestId": request_id, "reason": reason}
    notification = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}
    return json.dumps(notification, separators=(",", ":")).encode()


def _call_line(request_id: types.RequestId, params: Mapping[str, Any], token: Any) -> bytes:
    """The call as the gateway parsed and judged it, re-encoded, with ``_meta`` cut down
    to its progress token, and its arguments an object (none or null: ``{}``, as the
    gateway's own call through the SDK's client sends them)."""
    kept: dict[str, Any] = {k: v for k, v in params.items() if k != "_meta"}
    kept["arguments"] = kept.get("arguments") or {}
    if token is not None:
        kept["_meta"] = {"progressToken": token}
    request = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": kept}
    return json.dumps(request, separators=(",", ":")).encode()


class StdinPipe(asyncio.Protocol):
    """The upstream's stdin, written by asyncio's pipe transport: a line goes out at once
    or waits whole in the loop's buffer, lines stay in the order they were sent, and a
    sender waits (cancellably) only while that buffer is over its mark: nothing is
    written by a thread that a cancel could not stop, and the descriptor is never closed
    under a write. The transport notices at once when the upstream closes its end."""

    def __init__(self) -> None:
        self._transport: asyncio.WriteTransport | None = None
        self._paused = False
        self._lost = False
        self._waiters: list[asyncio.Future[None]] = []

    @classmethod
    async def open(cls, fd: int) -> StdinPipe:
        """Take ``fd`` (a pipe's write end): it is closed with the transport."""
        pipe = cls()
        await asyncio.get_running_loop().connect_write_pipe(
            lambda: pipe, os.fdopen(fd, "wb", buffering=0)
        )
        return pipe

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        self._transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._wake()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def send(self, data: bytes) -> bool:
        """Write ``data`` whole; False when the upstream can no longer take it."""
        transport = self._transport
        if transport is None or self._lost or transport.is_closing():
            return False
        transport.write(data)
        if transport.is_closing():  # the write failed: the upstream closed its stdin
            return False
        while self._paused and not self._lost:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
        return not self._lost

    def close(self) -> None:
        """Close once what is buffered is written (the upstream then reads its end)."""
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        """After ``close``: drop what is still buffered, which closes it now. (With an
        empty buffer the close is done or under way: a second one would run its end twice.)"""
        transport = self._transport
        if transport is not None and not self._lost and transport.get_write_buffer_size():
            transport.abort()


class Relay:
    """One upstream subprocess: the session's streams, and the relay of host calls."""

    def __init__(self, process: Process, timeout: float, stdin: StdinPipe, stdout: int) -> None:
        self._process = process
        self._stdin = stdin
        self._stdout = FdSource(stdout)  # the read end of its stdout (ours)
        self._timeout = timeout
        self._route: Route | None = None
        self._spawn: Callable[..., Any] | None = None  # starts a host call the route runs
        self._taken = HostCalls(self._host_version)  # the registered calls taken from the host
        self._calls = 0  # the gateway's own calls sent so far (their reserved ids)
        self._pending: dict[types.RequestId, _Pending] = {}  # by coerced id: deadline order
        self._tokens: dict[types.RequestId, types.RequestId] = {}  # coerced token -> its key
        self._wake = anyio.Event()
        self._host_ready = False  # the host sent notifications/initialized
        self._closed = False  # the upstream's stdout ended
        self._shutting_down = False
        self._writer_done = anyio.Event()
        self._to_session, self.read_stream = anyio.create_memory_object_stream[
            SessionMessage | Exception
        ](0)
        self.write_stream, self._from_session = anyio.create_memory_object_stream[SessionMessage](0)

    def bind(self, route: Route, spawn: Callable[..., Any], *, host_ready: bool = False) -> None:
        """Start relaying: before this, every host message takes the SDK path. ``spawn``
        starts a registered call taken from the host (``TaskGroup.start_soon`` of a group
        that ends, cancelling what is still open, when the host side stops serving).
        ``host_ready``: the host finished its handshake already (a relay in front of an
        upstream started again, which never sees that handshake)."""
        self._route = route
        self._spawn = spawn
        self._host_ready = self._host_ready or host_ready

    @property
    def host_ready(self) -> bool:
        """The host finished its handshake (sent ``notifications/initialized``)."""
        return self._host_ready

    # -- the host side: the hardened transport's hook --------------------------------------

    async def divert(
        self,
        message: types.JSONRPCRequest | types.JSONRPCNotification,
        line: bytes,
        host: HostLink,
    ) -> bool:
        if isinstance(message, types.JSONRPCNotification):
            return await self._host_notification(message, line, host)
        route = self._route
        if message.method != "tools/call" or not self._host_ready or self._closed or not route:
            return False
        call = host_call(message)
        if call is None:
            return False  # e.g. a task-augmented call: the SDK path, as before
        if not self._relayable(message.id, call.token):
            return False
        name, arguments, params, token = call.name, call.arguments, call.params, call.token
        verdict = route.judge(name, arguments)  # False too when a rule cannot judge them
        if verdict is False:
            return False
        if verdict is not True:  # a registered call: the gateway runs it, past the SDK
            assert self._spawn is not None

            async def run() -> types.CallToolResult:
                return await route.call(verdict, name, arguments, params)

            self._taken.take(self._spawn, message.id, name, run, host)
            return True
        await self._relay(route, message.id, name, params, token, host, None)
        return True

    async def relay_modern(
        self, message: types.JSONRPCRequest, call: HostCall, version: str, host: HostLink
    ) -> bool:
        """An unregistered call of a 2026-07-28 host (the gateway admitted it as the SDK
        would, and judged it a pass-through): relayed upstream as a handshake host's is,
        its answer reshaped as the SDK path shapes the gateway's own call's result for
        ``version``. False (the SDK path) where a handshake host's call would be."""
        route = self._route
        if self._closed or not route or not self._relayable(message.id, call.token):
            return False
        await self._relay(route, message.id, call.name, call.params, call.token, host, version)
        return True

    def _relayable(self, request_id: types.RequestId, token: Any) -> bool:
        """Whether a host's call with this id and progress token may be relayed: not one of
        the gateway's own ids nor a reused one, and a token the SDK path need not judge
        and not already relayed (else the SDK path)."""
        key = coerce_request_id(request_id)
        if _reserved(request_id) or key in self._pending or request_id in self._taken:
            return False
        return token is None or (
            is_request_id(token)
            and not _reserved(token)
            and coerce_request_id(token) not in self._tokens
        )

    async def _relay(
        self,
        route: Route,
        request_id: types.RequestId,
        name: str,
        params: dict[str, Any],
        token: Any,
        host: HostLink,
        version: str | None,
    ) -> None:
        # Always the call as judged, re-encoded: the host's own bytes could hold a key twice
        # (JSON leaves duplicates to the parser), and an upstream that keeps the first of
        # them would run another tool, or other arguments, than the rules looked at.
        line = _call_line(request_id, params, token)
        key = coerce_request_id(request_id)
        coerced = None if token is None else coerce_request_id(token)
        deadline = anyio.current_time() + self._timeout
        self._pending[key] = _Pending(request_id, name, deadline, host, coerced, None, version)
        if coerced is not None:
            self._tokens[coerced] = key
        self._wake.set()
        if not await self._send_upstream(line + b"\n"):
            lost = self._pending.pop(key, None)
            if lost is not None:  # not answered meanwhile by the reader's end
                self._forget_token(lost)
                route.lost(MCPError(types.CONNECTION_CLOSED, "Connection closed"))
                await self._answer(lost, route.gone(name))

    async def _host_notification(
        self, message: types.JSONRPCNotification, line: bytes, host: HostLink
    ) -> bool:
        if message.method == "notifications/initialized":
            self._host_ready = True
            return False  # the SDK's server needs it too
        if message.method != "notifications/cancelled" or not (self._pending or self._taken.busy):
            return False
        request_id = (message.params or {}).get("requestId")
        if not is_request_id(request_id) or _reserved(request_id):
            return False
        if self._taken.cancel(request_id):  # a registered call the gateway runs: its
            return True  # forward (if it went out) sends the upstream its own cancel
        pending = self._pending.pop(coerce_request_id(request_id), None)
        if pending is None:
            return False
        self._forget_token(pending)
        host.settle(pending.request_id)  # a cancelled request is not answered (MCP)
        await self._send_upstream(line.removesuffix(b"\r") + b"\n")
        return True

    def _forget_token(self, pending: _Pending) -> None:
        if pending.token is not None:
            self._tokens.pop(pending.token, None)

    async def _answer(self, pending: _Pending, result: types.CallToolResult) -> None:
        assert pending.host is not None
        route = self._route
        version = pending.version or self._host_version()
        stamp = route.server_info if route is not None else None
        await answer_host(pending.host, pending.request_id, result, version, stamp)

    def _host_version(self) -> str:
        route = self._route
        return route.host_version() if route is not None else LATEST_HANDSHAKE_VERSION

    # -- the gateway's own calls (registered ones): past the client session --------------

    async def forward(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """Send a call of the gateway's own upstream and wait for its answer: the request
        ``ClientSession.send_request`` would send (with a reserved id), and the same
        outcomes: the result validated as a ``CallToolResult`` (``ValidationError`` when it
        is not one), ``MCPError`` for an error answer, a timeout (the upstream then gets a
        cancel, as the SDK sends) or a closed connection; cancelled, the upstream gets a
        cancel too. Past the session's streams and models: no extra turns of the loop."""
        if self._closed:
            raise MCPError(types.CONNECTION_CLOSED, "Connection closed")
        self._calls += 1
        request_id = f"{RESERVED_ID_PREFIX}call-{self._calls}"
        send, receive = anyio.create_memory_object_stream[Outcome](1)
        deadline = anyio.current_time() + self._timeout
        self._pending[request_id] = _Pending(request_id, name, deadline, None, None, send)
        self._wake.set()
        line = _call_line(request_id, {"name": name, "arguments": arguments}, None)
        started = False  # as the SDK: a write begun may have reached the upstream
        try:
            with receive:
                await anyio.lowlevel.checkpoint_if_cancelled()
                started = True
                if not await self._send_upstream(line + b"\n"):
                    raise MCPError(types.CONNECTION_CLOSED, "Connection closed")
                outcome = await receive.receive()
        except anyio.get_cancelled_exc_class():
            if self._pending.pop(request_id, None) is not None and started:  # open upstream
                with anyio.CancelScope(shield=True):
                    await self._send_upstream(_cancel_line(request_id, "caller cancelled") + b"\n")
            raise
        finally:
            self._pending.pop(request_id, None)
            send.close()
        return _call_result(outcome)

    def _settle_own(self, pending: _Pending, outcome: Outcome) -> None:
        assert pending.waiter is not None
        with suppress(anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pending.waiter.send_nowait(outcome)

    # -- the upstream side ---------------------------------------------------------------

    async def _send_upstream(self, data: bytes) -> bool:
        """One whole line to the upstream's stdin; False when it cannot take it."""
        return await self._stdin.send(data)

    async def _deliver(self, item: SessionMessage | Exception) -> None:
        with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await self._to_session.send(item)

    async def _read_upstream(self) -> None:
        reader = BoundedLineReader(self._stdout, _NO_LIMIT)
        try:
            while (line := await reader.next_line()) is not None:
                if not isinstance(line, OversizedLine):  # (none: there is no limit)
                    await self._upstream_line(line)
        except OSError:
            pass  # a read that failed: the end, as an end of stream
        finally:
            self._stdout.close()
            with anyio.CancelScope(shield=True):
                await self._upstream_ended()

    async def _upstream_line(self, line: bytes) -> None:
        try:
            data = json.loads(line)
        except ValueError as e:  # not JSON (nor UTF-8): for the session, which reports it
            await self._deliver(e)
            return
        if isinstance(data, dict):
            if "method" not in data:
                answer_id = data.get("id")
                if _reserved(answer_id) and answer_id[len(RESERVED_ID_PREFIX) :].startswith(
                    "call-"
                ):
                    self._own_answer(answer_id, data)
                    return
                if _reserved(answer_id):
                    data["id"] = _own(answer_id)
                elif is_request_id(answer_id):
                    await self._relayed_answer(answer_id, data, line)
                    return
            elif data["method"] == "notifications/progress":
                params = data.get("params")
                params = params if isinstance(params, dict) else {}
                token = params.get("progressToken")
                if _reserved(token):
                    params["progressToken"] = _own(token)
                elif is_request_id(token) and (key := self._tokens.get(coerce_request_id(token))):
                    host = self._pending[key].host  # tokens are relayed calls': never None
                    if host is not None:
                        await host.send_line(line)
                    return
        try:
            message = types.jsonrpc_message_adapter.validate_python(data, by_name=False)
        except ValidationError as e:
            await self._deliver(e)
            return
        await self._deliver(SessionMessage(message))

    def _own_answer(self, answer_id: str, data: dict[str, Any]) -> None:
        pending = self._pending.pop(answer_id, None)
        if pending is None or pending.waiter is None:  # late, for a call that timed out
            log.warning("gateway.upstream_stray_answer", id=answer_id)
            return
        problem = _not_an_answer()
        self._settle_own(pending, data if _is_answer(data) else problem)

    async def _relayed_answer(
        self, answer_id: types.RequestId, data: Mapping[str, Any], line: bytes
    ) -> None:
        pending = self._pending.pop(coerce_request_id(answer_id), None)
        if pending is None or pending.host is None:  # late: nobody waits for it
            log.warning("gateway.upstream_stray_answer", id=answer_id)
            return
        self._forget_token(pending)
        if pending.version is not None and self._route is not None:  # a 2026-07-28 host's
            try:
                result = _call_result(data if _is_answer(data) else _not_an_answer())
            except Exception as e:  # as the gateway answers its own call's failure
                result = self._route.no_answer(pending.name, e)
            await self._answer(pending, result)
        elif _is_answer(data):
            await pending.host.answer_line(pending.request_id, line)
        elif self._route is not None:
            problem = _not_an_answer()
            await self._answer(pending, self._route.no_answer(pending.name, problem))

    @property
    def busy(self) -> bool:
        """Calls are open on it: relayed or the gateway's own, or registered ones it took."""
        return bool(self._pending) or self._taken.busy

    async def retire(self) -> None:
        """Before its upstream is stopped for a new one (``--restart-upstream``): the calls
        still open on it are answered as its end answers them (the gateway's own:
        connection closed; the host's relayed ones: gone), since the stop that follows is
        the gateway's own and answers nothing; it takes no more calls. A registered call
        it took goes on (it forwards through the gateway's current relay), and a host's
        cancel of one is still its to take (``Gateway.divert``)."""
        self._closed = True
        route = self._route
        closed = MCPError(types.CONNECTION_CLOSED, "Connection closed")
        pending = list(self._pending.values())
        self._pending.clear()
        self._tokens.clear()
        for each in pending:
            if each.waiter is not None:
                self._settle_own(each, closed)
            elif route is not None:
                await self._answer(each, route.gone(each.name))

    async def _upstream_ended(self) -> None:
        """The upstream's stdout ended: the session's connection closes, and every relayed
        call still open gets the gone answer (unless the gateway itself is stopping)."""
        self._closed = True
        self._to_session.close()
        pending = list(self._pending.values())
        closed = MCPError(types.CONNECTION_CLOSED, "Connection closed")
        for own in [p for p in pending if p.waiter is not None]:
            del self._pending[coerce_request_id(own.request_id)]
            self._settle_own(own, closed)  # as the session's waiters get it
        route = self._route
        if self._shutting_down or route is None:
            return
        route.lost(closed)
        pending = list(self._pending.values())
        self._pending.clear()
        self._tokens.clear()
        for each in pending:
            await self._answer(each, route.gone(each.name))

    async def _write_session(self) -> None:
        try:
            async with self._from_session:
                async for item in self._from_session:
                    if not await self._send_upstream(_session_line(item.message)):
                        # As stdio_client: the session's requests must not wait forever.
                        self._to_session.close()
                        return
        finally:
            self._writer_done.set()

    async def _sweep(self) -> None:
        """Answer relayed calls past their deadline. All have the same timeout, so the
        first in ``_pending`` (insertion order) is always the next to expire."""
        while True:
            if not self._pending:
                self._wake = anyio.Event()
                await self._wake.wait()
                continue
            key, first = next(iter(self._pending.items()))
            if first.deadline > anyio.current_time():
                await anyio.sleep_until(first.deadline)
                continue
            del self._pending[key]
            self._forget_token(first)
            reason = f"timed out after {self._timeout}s"
            await self._send_upstream(_cancel_line(first.request_id, reason) + b"\n")
            if first.waiter is not None:  # the gateway's own call: as the session times out
                self._settle_own(
                    first, MCPError(types.REQUEST_TIMEOUT, "Request 'tools/call' timed out")
                )
            elif self._route is not None:
                error = MCPError(types.REQUEST_TIMEOUT, "Request 'tools/call' timed out")
                await self._answer(first, self._route.no_answer(first.name, error))

    async def _stop(self) -> None:
        """As stdio_client: let the session's last messages out, close stdin, give the
        upstream its grace period, then terminate its process group."""
        self._shutting_down = True
        self.read_stream.close()
        self.write_stream.close()
        with anyio.move_on_after(FLUSH_SECONDS):
            await self._writer_done.wait()
        process = self._process
        self._stdin.close()  # what is buffered goes first; then the upstream reads its end
        if not await _exited(process, GRACE_SECONDS):
            await terminate_posix_process_tree(process, KILL_SECONDS)
            if not await _exited(process, KILL_SECONDS):
                log.warning("gateway.upstream_survived_kill", pid=process.pid)
        self._stdin.abort()  # what it never read is dropped with it
        with anyio.move_on_after(KILL_SECONDS):
            await process.aclose()


async def _exited(process: Process, seconds: float) -> bool:
    # Polled, not process.wait(): that also waits for the pipes, which a child of the
    # upstream may hold open.
    with anyio.move_on_after(seconds):
        while process.returncode is None:
            await anyio.sleep(0.01)
    return process.returncode is not None


@asynccontextmanager
async def open_stdio_upstream(
    command: Sequence[str], *, timeout: float, env: Mapping[str, str], errlog: IO[Any]
) -> AsyncIterator[Relay]:
    """Start the upstream (raises ``OSError`` or ``ValueError`` when it cannot be) and
    serve its pipes until the block ends; then stop it."""
    # The pipes are the gateway's own: its stdout read as the host's stdin is (serving's
    # FdSource), its stdin written by the event loop (StdinPipe). anyio's process streams
    # cost a turn of the loop per write and a registration per read, on a path where each
    # relayed call pays for every turn.
    stdin_read, stdin_write = os.pipe()
    try:
        stdout_read, stdout_write = os.pipe()
    except BaseException:  # out of descriptors: none kept
        os.close(stdin_read)
        os.close(stdin_write)
        raise
    try:
        process = await anyio.open_process(
            list(command),
            stdin=stdin_read,
            stdout=stdout_write,
            env=dict(env),
            stderr=errlog,
            start_new_session=True,
        )
    except BaseException:
        os.close(stdin_write)
        os.close(stdout_read)
        raise
    finally:
        os.close(stdin_read)  # the upstream's ends: its own now
        os.close(stdout_write)
    try:
        stdin = await StdinPipe.open(stdin_write)
    except BaseException:
        os.close(stdout_read)
        with anyio.CancelScope(shield=True):
            await terminate_posix_process_tree(process, KILL_SECONDS)
            await process.aclose()
        raise
    relay = Relay(process, timeout, stdin, stdout_read)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(relay._read_upstream)
            tg.start_soon(relay._write_session)
            tg.start_soon(relay._sweep)
            try:
                yield relay
            finally:
                with anyio.CancelScope(shield=True):
                    await relay._stop()
                tg.cancel_scope.cancel()
    finally:
        relay._stdout.close()  # no longer watched: the reader has ended
        os.close(stdout_read)

"""Hardened stdio transport for ``continuum-mcp``.

Why this exists: the SDK's own stdio reader (``mcp.server.stdio.stdio_server``)
reads whole lines of any length (a 50 MB line costs about 180 MB of memory) and
turns a malformed line into an ``Exception`` item that the dispatcher only logs,
so the client waits forever. This transport sits in front of the SDK instead:

- it reads raw bytes in chunks and never holds more than ``max_message_bytes``
  plus one chunk; the rest of an oversized line is discarded as it streams by;
- every line it cannot hand to the SDK gets a JSON-RPC error answer (``-32700``
  parse error, also for a lone UTF-16 surrogate; ``-32600`` invalid request;
  ``-32602`` for array ``params``, which JSON-RPC allows but MCP does not), and
  serving goes on;
- valid lines become ``SessionMessage(message)`` on the server's read stream, as
  in the SDK's transport (plain anyio memory streams: the SDK's context-carrying
  wrappers live in a private module and carry nothing useful on stdio), and each
  message of the write stream becomes one JSON line. Every stdout write holds one
  lock, so an error answer and an SDK answer never interleave mid-line; an answer
  that cannot be encoded becomes a ``-32603`` answer instead of killing the writer;
- it bounds the work in flight: at most ``max_in_flight`` requests (messages with an
  id and a method) are handed to the SDK and not yet answered. The SDK runs every
  request at once and each finished answer waits, whole, for the one writer; a
  client that sends and does not read made them pile up (150 large answers held
  420 MB). A request over the limit is answered at once with ``SERVER_BUSY`` (its id,
  the limit, "read the answers first") and never reaches the SDK. A request counts
  until its answer has been written, or the SDK settles it unanswered (cancelled);
  notifications and the client's own answers are not counted. Error answers the
  transport writes itself are small, and the reader waits for each before reading
  on, so they stay bounded too.

A ``divert`` hook (the MCP gateway's byte relay, ``gateway/relay.py``) may take a parsed
request or notification before the server sees it: it gets the message, its raw line and
a ``HostLink``, through which it answers later with raw lines on the same locked wire. A
request it takes was admitted first, so it counts against ``max_in_flight`` until the hook
answers it or settles it unanswered. Without the hook nothing changes.

While serving the real stdio, fd 0 points at ``/dev/null`` and fd 1 at stderr
(the SDK does the same), so a stray ``print`` or an unconfigured logger cannot
corrupt the protocol; the wire is served from private duplicates, restored on
exit. Logs go to structlog; nothing but JSON-RPC is written to the wire. When the
server returns, reading stops at once even if stdin stays open, and an exception
from the body propagates as itself (not wrapped in an ``ExceptionGroup``).

Running a server over it (SDK 2.3.0 has no public accessor from ``MCPServer``
to its low-level ``Server``; ``MCPServer.run_stdio_async`` does exactly this)::

    async with hardened_stdio_server(max_message_bytes=limit, max_in_flight=16) as (
        read_stream, write_stream
    ):
        lowlevel = mcp_server._lowlevel_server  # or a mcp.server.Server you built
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())

``Server.run`` serves both protocol eras on the one connection (the client's first
request decides).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import select
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import anyio
import anyio.lowlevel
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from pydantic import ValidationError

from continuum.errors import UsageError
from continuum.log import get_logger
from continuum.serving.flags import (
    MAX_IN_FLIGHT_FLAG,
    SERVER_BUSY,
)

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "MAX_MESSAGE_BYTES_FLAG",
    "BoundedLineReader",
    "ByteSink",
    "ByteSource",
    "Divert",
    "HostLink",
    "InFlight",
    "OversizedLine",
    "ReadStream",
    "Rejected",
    "WriteStream",
    "busy_answer",
    "hardened_stdio_server",
    "oversized_answer",
    "parse_line",
    "validate_message",
]

DEFAULT_MAX_MESSAGE_BYTES = 1_048_576
"""1 MiB: the largest line (newline excluded) the server accepts by default."""

MAX_MESSAGE_BYTES_FLAG = "--max-message-bytes"
"""The command-line flag that raises the limit; named in the oversize answer."""

CHUNK_BYTES = 65_536
"""Bytes read per call: peak buffer is the limit plus one chunk."""

DEFAULT_MAX_IN_FLIGHT = 16
"""Requests handed to the server and not yet answered, per connection, by default."""


def _warn(event: str, **fields: Any) -> None:
    """Log to structlog, but never let a broken stderr take the wire down."""
    with suppress(Exception):
        get_logger("continuum.mcp.transport").warning(event, **fields)


ReadStream = MemoryObjectReceiveStream[SessionMessage | Exception]
WriteStream = MemoryObjectSendStream[SessionMessage]


class ByteSource(Protocol):
    """Where request bytes come from (``anyio.abc.ByteReceiveStream`` fits)."""

    async def receive(self, max_bytes: int = CHUNK_BYTES) -> bytes:
        """Return 1..max_bytes bytes; raise ``anyio.EndOfStream`` at the end."""
        ...


class ByteSink(Protocol):
    """Where answer bytes go (``anyio.abc.ByteSendStream`` fits)."""

    async def send(self, item: bytes, /) -> None: ...


@dataclass(frozen=True)
class OversizedLine:
    """Marker for a line longer than the limit; its bytes were not kept."""

    limit: int


@dataclass(frozen=True)
class Rejected:
    """A line the SDK must not see, with the error answer the client gets."""

    answer: types.JSONRPCError
    reason: str


class BoundedLineReader:
    """Split a byte source into lines while holding at most ``limit + chunk`` bytes.

    A line longer than ``limit`` is reported once, as soon as it is detected,
    and then skipped up to its newline without being buffered.
    """

    def __init__(self, source: ByteSource, limit: int, chunk_bytes: int = CHUNK_BYTES) -> None:
        self._source = source
        self._limit = limit
        self._chunk = chunk_bytes
        self._buf = bytearray()
        self._start = 0  # consumed prefix of _buf, compacted lazily
        self._discarding = False
        self._eof = False

    async def next_line(self) -> bytes | OversizedLine | None:
        """The next line without its ``\\n``, an ``OversizedLine``, or ``None`` at the end."""
        while True:
            end = self._buf.find(b"\n", self._start)
            if end >= 0:
                skipped, too_long = self._discarding, end - self._start > self._limit
                line = None if skipped or too_long else bytes(self._buf[self._start : end])
                self._start, self._discarding = end + 1, False
                self._compact()
                if line is not None:
                    return line
                if not skipped:
                    return OversizedLine(self._limit)
                continue
            pending = len(self._buf) - self._start
            if self._discarding or pending > self._limit:
                self._drop_all()  # no newline yet: nothing of this line is worth keeping
                if not self._discarding:
                    self._discarding = True
                    return OversizedLine(self._limit)
            elif self._eof:
                line = bytes(self._buf[self._start :]) if pending else None
                self._drop_all()
                return line
            if self._eof:
                return None
            try:
                self._buf += await self._source.receive(self._chunk)
            except anyio.EndOfStream:
                self._eof = True

    def _compact(self) -> None:
        if self._start == len(self._buf):
            self._drop_all()
        elif self._start > self._chunk:
            del self._buf[: self._start]
            self._start = 0

    def _drop_all(self) -> None:
        self._buf = bytearray()
        self._start = 0


_PREFIXES = {
    types.PARSE_ERROR: "Parse error",
    types.INVALID_REQUEST: "Invalid Request",
    types.INVALID_PARAMS: "Invalid params",
}


def _error(
    request_id: types.RequestId | None, code: int, message: str, **data: Any
) -> types.JSONRPCError:
    # ``data`` only when given: the wire form is dumped with exclude_unset.
    error = types.ErrorData(code=code, message=message, **({"data": data} if data else {}))
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)


def _rejected(request_id: types.RequestId | None, code: int, reason: str) -> Rejected:
    return Rejected(_error(request_id, code, f"{_PREFIXES[code]}: {reason}"), reason)


def oversized_answer(limit: int) -> types.JSONRPCError:
    """The answer to a line over the limit: its id is unknowable, so null."""
    return _error(
        None,
        types.INVALID_REQUEST,
        f"Invalid Request: message exceeds the {limit}-byte limit and was discarded; "
        f"the server operator can raise it with {MAX_MESSAGE_BYTES_FLAG}",
        limit_bytes=limit,
        flag=MAX_MESSAGE_BYTES_FLAG,
    )


def busy_answer(request_id: types.RequestId, limit: int) -> types.JSONRPCError:
    """The answer to a request over the in-flight limit: it was not started; retry it later."""
    return _error(
        request_id,
        SERVER_BUSY,
        f"Server busy: {limit} requests on this connection are still unanswered; read "
        f"their answers before sending more, then send this request again (the server "
        f"operator can change the limit with {MAX_IN_FLIGHT_FLAG})",
        unanswered=limit,
        limit=limit,
        flag=MAX_IN_FLIGHT_FLAG,
    )


class InFlight:
    """Requests handed to the server and not yet answered; at most ``limit`` at a time.

    Kept by request id as a count, since a client may reuse an id while the first is
    still open (JSON-RPC forbids it; the SDK then answers both). Single event loop: no lock.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0
        self.refused = 0  # requests refused since the connection was last below the limit
        self._open: dict[types.RequestId, int] = {}

    def admit(self, request_id: types.RequestId) -> bool:
        if self.count >= self.limit:
            self.refused += 1
            return False
        self.count += 1
        self._open[request_id] = self._open.get(request_id, 0) + 1
        return True

    def release(self, request_id: types.RequestId) -> None:
        """One request with this id is settled; an id that is not open is ignored."""
        open_with_id = self._open.get(request_id, 0)
        if open_with_id == 0:
            return
        self.count -= 1
        if open_with_id == 1:
            del self._open[request_id]
        else:
            self._open[request_id] = open_with_id - 1


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_line(line: bytes) -> types.JSONRPCMessage | Rejected | None:
    """Turn one line into an SDK message, a ``Rejected`` answer, or ``None`` (blank)."""
    if line.endswith(b"\r"):
        line = line[:-1]
    if not line.strip(b" \t\r"):
        return None
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _rejected(None, types.PARSE_ERROR, f"line is not valid UTF-8 (byte {exc.start})")
    try:
        data = json.loads(text, parse_constant=_no_constants)
    except json.JSONDecodeError as exc:
        return _rejected(None, types.PARSE_ERROR, f"invalid JSON ({exc.msg} at column {exc.colno})")
    except (ValueError, RecursionError) as exc:
        reason = "JSON nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        return _rejected(None, types.PARSE_ERROR, reason)
    if _SURROGATE_ESCAPE.search(text) and not _is_unicode(data):
        # json.loads lets "\ud800" through; such a string breaks every later UTF-8 encode.
        return _rejected(None, types.PARSE_ERROR, "a string holds a lone UTF-16 surrogate")
    return validate_message(data)


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


def _is_unicode(data: object) -> bool:
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_request_id(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def validate_message(data: object) -> types.JSONRPCMessage | Rejected:
    """Check JSON-RPC 2.0 structure first: the SDK's model drops or misreads bad shapes
    (an ``"id": null`` request would pass as a notification and never be answered)."""
    raw_id = data.get("id") if isinstance(data, dict) else None
    echo_id: types.RequestId | None = raw_id if _is_request_id(raw_id) else None
    problem = _structure_problem(data)
    if problem is not None:
        return _rejected(echo_id, *problem)
    try:
        return types.jsonrpc_message_adapter.validate_python(data, by_name=False)
    except ValidationError:
        return _rejected(echo_id, types.INVALID_REQUEST, "not a valid JSON-RPC 2.0 message")


def _structure_problem(data: object) -> tuple[int, str] | None:
    invalid = types.INVALID_REQUEST
    if isinstance(data, list):
        return invalid, "batch arrays are not supported; send one message per line"
    if not isinstance(data, dict):
        return invalid, f"a message must be a JSON object, not {_json_type(data)}"
    if data.get("jsonrpc") != "2.0":
        return invalid, 'member "jsonrpc" must be exactly "2.0"'
    null_id_error = "method" not in data and "error" in data and data.get("id") is None
    if "id" in data and not _is_request_id(data["id"]) and not null_id_error:
        return invalid, 'member "id" must be a string or an integer'
    if "method" in data:
        params = data.get("params")
        if not isinstance(data["method"], str):
            return invalid, 'member "method" must be a string'
        if isinstance(params, list):
            return types.INVALID_PARAMS, 'MCP requires "params" to be an object, not an array'
        if params is not None and not isinstance(params, dict):
            return invalid, f'member "params" must be an object, not {_json_type(params)}'
    elif ("result" in data) == ("error" in data):
        return invalid, 'a message needs "method", or exactly one of "result" and "error"'
    elif "id" not in data:
        return invalid, 'a response needs member "id"'
    elif "result" in data and not isinstance(data["result"], dict):
        return invalid, 'member "result" must be an object'
    return None


_JSON_TYPES = {bool: "a boolean", int: "a number", float: "a number", str: "a string"}


def _json_type(value: object) -> str:
    return "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)


def _encode(message: types.JSONRPCMessage) -> bytes:
    """One wire line, serialized exactly as the SDK's stdio transport does."""
    return message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"


class FdSource:
    """Reads a file descriptor without parking a thread on it when it can.

    Pipes, sockets and terminals are watched by the event loop, so a server that stops
    while stdin stays open exits at once; a regular file (``< input``) cannot be polled
    and is read in a worker thread instead. On asyncio the descriptor stays registered
    with the loop between reads: anyio's ``wait_readable`` registers it and drops it
    again on every call (two ``epoll_ctl`` and a turn of the loop: 12 us a line against
    3 us, measured, on a relayed call the gateway spends about 0.2 ms on in all). The
    loop's callback reads only while a ``receive`` waits, so nothing is read ahead of
    the caller (what a stopped reader left stays in the pipe); when nobody waits it
    stops watching until the next ``receive``. ``close`` drops the registration: call
    it before the descriptor is closed or given back.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._pollable = True
        self._loop: asyncio.AbstractEventLoop | None = None  # watching on it
        self._waiter: asyncio.Future[bytes] | None = None
        self._want = CHUNK_BYTES

    async def receive(self, max_bytes: int = CHUNK_BYTES) -> bytes:
        if self._pollable:
            data = await self._watched(max_bytes)
        else:
            data = await anyio.to_thread.run_sync(os.read, self._fd, max_bytes)
        if not data:
            raise anyio.EndOfStream
        return data

    async def _watched(self, max_bytes: int) -> bytes:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another backend (trio): anyio's registration per read
            loop = None
        if loop is None:
            try:
                await anyio.wait_readable(self._fd)
            except OSError:  # epoll refuses regular files
                self._pollable = False
                return await anyio.to_thread.run_sync(os.read, self._fd, max_bytes)
            return os.read(self._fd, max_bytes)  # readable: returns without blocking
        await anyio.lowlevel.checkpoint_if_cancelled()
        if self._loop is not loop:
            self.close()
            try:
                loop.add_reader(self._fd, self._readable)
            except OSError:  # epoll refuses regular files
                self._pollable = False
                return await anyio.to_thread.run_sync(os.read, self._fd, max_bytes)
            self._loop = loop
        waiter: asyncio.Future[bytes] = loop.create_future()
        self._waiter = waiter
        self._want = max_bytes
        try:
            return await waiter
        finally:
            self._waiter = None

    def _readable(self) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():  # nobody waits: stop watching until one does
            self.close()
            return
        try:
            data = os.read(self._fd, self._want)  # readable: returns without blocking
        except OSError as e:
            self.close()
            waiter.set_exception(e)
            return
        if not data:  # the end, which stays readable: stop watching it
            self.close()
        waiter.set_result(data)

    def close(self) -> None:
        """Stop watching the descriptor (a later ``receive`` watches it again)."""
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self._fd)


class _FdSink:
    """Writes a whole line to a file descriptor; never abandoned, so lines stay whole.

    On a pipe or a socket (what hosts connect), each piece of up to ``PIPE_BUF`` bytes
    is written at once while poll says the descriptor is writable: such a write then
    cannot block (a free pipe buffer, or socket room). What is left, and any other
    descriptor, is written in a worker thread, so a client that stops reading stalls
    only the writer, never the event loop. (The thread round trip cost about 0.2 ms a
    line, as much again as a relayed call's whole gateway time.)
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._ready: select.poll | None = None
        mode = os.fstat(fd).st_mode
        if hasattr(select, "poll") and (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
            self._ready = select.poll()
            self._ready.register(fd, select.POLLOUT)

    async def send(self, item: bytes, /) -> None:
        view = memoryview(item)
        if self._ready is not None:
            while view and self._ready.poll(0):  # writable, or broken: write says which
                view = view[os.write(self._fd, view[: select.PIPE_BUF]) :]
        if view:
            await anyio.to_thread.run_sync(self._write_all, view)

    def _write_all(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]


@contextmanager
def _claim_fd(fd: int, divert: int) -> Iterator[int]:
    """Serve ``fd`` from a private duplicate and point ``fd`` itself at ``divert``."""
    wire = os.dup(fd)
    os.dup2(divert, fd)
    try:
        yield wire
    finally:
        if fd == 1:
            with suppress(Exception):
                sys.stdout.flush()  # stray output buffered while serving belongs on stderr
        os.dup2(wire, fd)
        os.close(wire)


class _Wire:
    """The stdout side: one lock, one line per write, tolerant of a vanished reader."""

    def __init__(self, sink: ByteSink) -> None:
        self._sink = sink
        self._lock = anyio.Lock(fast_acquire=True)  # uncontended: no extra turn of the loop
        self._broken = False

    async def write_line(self, line: bytes) -> None:
        """One raw JSON line (without its newline, none inside it), as it came."""
        await self._send(line + b"\n")

    async def close(self) -> None:
        """No write after this one: the descriptor is about to be given back."""
        async with self._lock:
            self._broken = True

    async def write(self, message: types.JSONRPCMessage) -> None:
        try:
            data = _encode(message)
        except Exception as exc:  # e.g. a lone surrogate in a result: answer, don't kill the writer
            request_id = getattr(message, "id", None)
            _warn("mcp.transport.encode_failed", id=request_id, error=type(exc).__name__)
            if request_id is None:
                return
            answer = _error(
                request_id, types.INTERNAL_ERROR, "Internal error: the result could not be encoded"
            )
            data = _encode(answer)
        await self._send(data)

    async def _send(self, data: bytes) -> None:
        async with self._lock:
            if self._broken:
                return
            try:
                await self._sink.send(data)
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._broken = True
                _warn("mcp.transport.stdout_closed")


class HostLink:
    """How a ``divert`` hook talks to the client: raw lines and answers on the one wire
    (never interleaved with the server's), and the in-flight count of what it took."""

    def __init__(self, wire: _Wire, in_flight: InFlight) -> None:
        self._wire = wire
        self._in_flight = in_flight

    async def send_line(self, line: bytes) -> None:
        """A raw line that answers nothing (a notification), without its newline."""
        await self._wire.write_line(line)

    async def answer_line(self, request_id: types.RequestId, line: bytes) -> None:
        """The raw answer to a request the hook took; it stops counting once written."""
        await self._wire.write_line(line)
        self._in_flight.release(request_id)

    async def answer(self, message: types.JSONRPCResponse | types.JSONRPCError) -> None:
        """An answer the hook made itself, encoded like the server's own."""
        await self._wire.write(message)
        if message.id is not None:
            self._in_flight.release(message.id)

    def settle(self, request_id: types.RequestId) -> None:
        """A request the hook took ends without an answer (the client cancelled it)."""
        self._in_flight.release(request_id)


Divert = Callable[
    [types.JSONRPCRequest | types.JSONRPCNotification, bytes, HostLink], Awaitable[bool]
]
"""Given a parsed request or notification, its raw line (a request already admitted)
and the link: True when it took the message, which the server then never sees."""


async def _settle_unanswered(in_flight: InFlight, request_id: types.RequestId) -> None:
    # The SDK's hook for a request it settled without an answer (the client cancelled it).
    in_flight.release(request_id)


def _admitted(request: types.JSONRPCRequest, in_flight: InFlight) -> bool:
    """Count the request in if there is room; log each busy spell once, where it starts
    and where it ends (not once per refused request)."""
    refused_before = in_flight.refused
    if not in_flight.admit(request.id):
        if refused_before == 0:
            _warn("mcp.transport.busy", limit=in_flight.limit, flag=MAX_IN_FLIGHT_FLAG)
        return False
    if refused_before:
        _warn("mcp.transport.busy_ended", refused=refused_before, limit=in_flight.limit)
        in_flight.refused = 0
    return True


def _session_message(outcome: types.JSONRPCMessage, in_flight: InFlight) -> SessionMessage:
    if not isinstance(outcome, types.JSONRPCRequest):
        return SessionMessage(outcome)  # notifications and the client's answers are not counted
    hook = partial(_settle_unanswered, in_flight, outcome.id)
    return SessionMessage(outcome, metadata=ServerMessageMetadata(on_request_unanswered=hook))


async def _pump_input(
    reader: BoundedLineReader,
    wire: _Wire,
    inbound: MemoryObjectSendStream[SessionMessage | Exception],
    in_flight: InFlight,
    divert: Divert | None = None,
) -> None:
    host = HostLink(wire, in_flight)
    async with inbound:
        while (line := await reader.next_line()) is not None:
            if isinstance(line, OversizedLine):
                _warn("mcp.transport.line_oversized", limit_bytes=line.limit)
                await wire.write(oversized_answer(line.limit))
                continue
            outcome = parse_line(line)
            if outcome is None:
                continue
            if isinstance(outcome, Rejected):
                # The reason only: the line itself may carry secrets (_meta.authToken).
                code = outcome.answer.error.code
                _warn("mcp.transport.line_rejected", code=code, reason=outcome.reason)
                await wire.write(outcome.answer)
                continue
            if isinstance(outcome, types.JSONRPCRequest) and not _admitted(outcome, in_flight):
                # Never reaches the SDK. The reader waits for this small answer to be
                # written: a client that does not read stalls its own requests, nothing more.
                await wire.write(busy_answer(outcome.id, in_flight.limit))
                continue
            if (
                divert is not None
                and isinstance(outcome, types.JSONRPCRequest | types.JSONRPCNotification)
                and await divert(outcome, line, host)
            ):
                continue
            try:
                await inbound.send(_session_message(outcome, in_flight))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return  # the server stopped reading


async def _pump_output(
    outbound: MemoryObjectReceiveStream[SessionMessage], wire: _Wire, in_flight: InFlight
) -> None:
    async with outbound:
        async for session_message in outbound:
            message = session_message.message
            await wire.write(message)
            # Released once written, not when produced: an answer the client has not
            # read yet still holds its memory.
            if (
                isinstance(message, types.JSONRPCResponse | types.JSONRPCError)
                and message.id is not None
            ):
                in_flight.release(message.id)


@asynccontextmanager
async def hardened_stdio_server(
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    *,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    stdin: ByteSource | None = None,
    stdout: ByteSink | None = None,
    divert: Divert | None = None,
) -> AsyncIterator[tuple[ReadStream, WriteStream]]:
    """Serve MCP over stdin/stdout (or the given byte streams), like the SDK's ``stdio_server()``.

    Yields ``(read_stream, write_stream)`` for ``Server.run``. Explicit streams
    skip the stdio descriptor claim (tests pass in-memory streams). At most
    ``max_in_flight`` requests are handed to the server unanswered at a time. ``divert``
    may take messages before the server sees them (see the module docstring).
    """
    if type(max_message_bytes) is not int or max_message_bytes < 1:
        raise UsageError(
            f"{MAX_MESSAGE_BYTES_FLAG} must be a positive number of bytes",
            code="mcp.bad_message_limit",
            hint=f"for example {MAX_MESSAGE_BYTES_FLAG} {DEFAULT_MAX_MESSAGE_BYTES}",
        )
    if type(max_in_flight) is not int or max_in_flight < 1:
        raise UsageError(
            f"{MAX_IN_FLIGHT_FLAG} must be a whole number of requests, at least 1",
            code="mcp.bad_in_flight_limit",
            hint=f"for example {MAX_IN_FLIGHT_FLAG} {DEFAULT_MAX_IN_FLIGHT}",
        )
    with ExitStack() as claims:
        if stdin is None:
            devnull = os.open(os.devnull, os.O_RDONLY)
            try:
                source = FdSource(claims.enter_context(_claim_fd(0, devnull)))
                claims.callback(source.close)  # before fd 0 is given back (last in, first out)
                stdin = source
            finally:
                os.close(devnull)
        if stdout is None:
            stdout = _FdSink(claims.enter_context(_claim_fd(1, 2)))
        wire = _Wire(stdout)
        reader = BoundedLineReader(stdin, max_message_bytes)
        in_flight = InFlight(max_in_flight)
        # Unbuffered, like the SDK's: the reader waits while the server is busy (backpressure).
        inbound_send, inbound_recv = anyio.create_memory_object_stream[SessionMessage | Exception]()
        outbound_send, outbound_recv = anyio.create_memory_object_stream[SessionMessage]()
        body_error: Exception | None = None
        try:
            async with anyio.create_task_group() as tg:
                reader_scope = anyio.CancelScope()

                async def run_reader() -> None:
                    with reader_scope:
                        await _pump_input(reader, wire, inbound_send, in_flight, divert)

                tg.start_soon(run_reader)
                tg.start_soon(_pump_output, outbound_recv, wire, in_flight)
                try:
                    yield inbound_recv, outbound_send
                except Exception as exc:
                    body_error = (
                        exc  # re-raised below, outside the task group: not wrapped in a group
                    )
                finally:
                    # The server is done: stop reading (stdin may stay open), let the writer drain.
                    reader_scope.cancel()
                    outbound_send.close()
                    inbound_recv.close()
        finally:
            with anyio.CancelScope(shield=True):
                await wire.close()  # a hook's late answer must not reach a given-back fd
        if body_error is not None:
            raise body_error

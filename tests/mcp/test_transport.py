"""The hardened stdio transport: bounded line reading, JSON-RPC error answers, real subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import sys
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import structlog
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.message import SessionMessage
from mcp_types import (
    Implementation,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
)

from continuum.errors import UsageError
from continuum.serving.transport import (
    DEFAULT_MAX_MESSAGE_BYTES,
    MAX_MESSAGE_BYTES_FLAG,
    BoundedLineReader,
    FdSource,
    OversizedLine,
    Rejected,
    hardened_stdio_server,
    parse_line,
)
from tests.mcp.request_meta import request_meta

ECHO_SERVER = Path(__file__).parent / "fixtures" / "echo_server.py"
BOUND = 60  # seconds: generous upper bound on any single exchange, never a sleep

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": "init",
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw-test", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def structlog_defaults() -> Iterator[None]:
    """Other suites configure structlog onto their own captured streams: start from defaults."""
    saved = structlog.get_config()
    structlog.reset_defaults()
    yield
    structlog.configure(**saved)


def _load_echo_server() -> Any:
    spec = importlib.util.spec_from_file_location("continuum_test_echo_server", ECHO_SERVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def _ping(request_id: int | str) -> bytes:
    return _line({"jsonrpc": "2.0", "id": request_id, "method": "ping"})


class ChunkSource:
    """A byte source that hands out pre-cut chunks (or generated ones) then ends."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = list(chunks)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self._chunks:
            raise anyio.EndOfStream
        chunk = self._chunks.pop(0)
        if len(chunk) > max_bytes:
            self._chunks.insert(0, chunk[max_bytes:])
        return chunk[:max_bytes]


class RepeatingSource:
    """A source of ``total`` bytes of one filler byte, then a newline and a tail, made lazily."""

    def __init__(self, total: int, tail: bytes) -> None:
        self._left = total
        self._tail: bytes | None = b"\n" + tail

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._left > 0:
            size = min(max_bytes, self._left)
            self._left -= size
            return b"a" * size
        if self._tail is not None:
            tail, self._tail = self._tail, None
            return tail
        raise anyio.EndOfStream


async def _read_all(reader: BoundedLineReader) -> list[bytes | OversizedLine]:
    out: list[bytes | OversizedLine] = []
    while (item := await reader.next_line()) is not None:
        out.append(item)
    return out


# --- the bounded line reader ---------------------------------------------------


@pytest.mark.anyio
async def test_reader_joins_lines_split_across_chunks_and_keeps_an_unterminated_last_line() -> None:
    source = ChunkSource([b'{"a":', b'1}\n{"b"', b":2}\r\n\n", b"tail"])
    assert await _read_all(BoundedLineReader(source, limit=100)) == [
        b'{"a":1}',
        b'{"b":2}\r',
        b"",
        b"tail",
    ]


@pytest.mark.anyio
async def test_reader_accepts_a_line_of_exactly_the_limit_and_refuses_one_byte_more() -> None:
    source = ChunkSource([b"x" * 10 + b"\n" + b"y" * 11 + b"\nok\n"])
    assert await _read_all(BoundedLineReader(source, limit=10, chunk_bytes=4)) == [
        b"x" * 10,
        OversizedLine(10),
        b"ok",
    ]


@pytest.mark.anyio
async def test_reader_reports_a_long_line_once_and_resumes_after_its_newline() -> None:
    source = RepeatingSource(total=200_000, tail=b"next\n")
    items = await _read_all(BoundedLineReader(source, limit=1000, chunk_bytes=4096))
    assert items == [OversizedLine(1000), b"next"]


@pytest.mark.anyio
async def test_reader_memory_stays_bounded_while_skipping_a_20_mb_line() -> None:
    limit = 1 << 20
    reader = BoundedLineReader(RepeatingSource(total=20 << 20, tail=b"after\n"), limit=limit)
    tracemalloc.start()
    try:
        items = await _read_all(reader)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert items == [OversizedLine(limit), b"after"]
    assert peak < 4 * limit  # limit + one chunk, plus copies: far below the 20 MB line


# --- reading a descriptor (FdSource) -----------------------------------------------


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_end, write_end = os.pipe()
    yield read_end, write_end
    for fd in (read_end, write_end):
        with contextlib.suppress(OSError):
            os.close(fd)


@pytest.mark.anyio
async def test_fd_source_reads_a_pipe_and_keeps_watching_it_between_reads(
    pipe: tuple[int, int],
) -> None:
    read_end, write_end = pipe
    source = FdSource(read_end)
    loop = asyncio.get_running_loop()
    try:
        for chunk in (b"one\n", b"two\n"):
            os.write(write_end, chunk)
            with anyio.fail_after(BOUND):
                assert await source.receive() == chunk
        # Still registered after a read: no epoll_ctl pair per line (anyio's wait_readable
        # drops the descriptor after each wait, and this assertion fails with it).
        assert loop.remove_reader(read_end) is True
        loop.add_reader(read_end, source._readable)  # as it was, for close() below
    finally:
        source.close()
    assert loop.remove_reader(read_end) is False  # close() dropped it


@pytest.mark.anyio
async def test_fd_source_reads_nothing_ahead_when_nobody_waits(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    source = FdSource(read_end)
    try:
        os.write(write_end, b"first\n")
        with anyio.fail_after(BOUND):
            assert await source.receive() == b"first\n"
        os.write(write_end, b"left for another reader\n")  # nobody receives now
        for _ in range(5):
            await anyio.lowlevel.checkpoint()  # the loop's callback runs with no waiter
        assert asyncio.get_running_loop().remove_reader(read_end) is False  # stopped watching
        assert os.read(read_end, 100) == b"left for another reader\n"  # still in the pipe
        os.write(write_end, b"again\n")
        with anyio.fail_after(BOUND):
            assert await source.receive() == b"again\n"  # watched again for the next one
    finally:
        source.close()


@pytest.mark.anyio
async def test_fd_source_cancelled_receive_loses_nothing(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    source = FdSource(read_end)
    try:
        with anyio.move_on_after(0.05) as scope:
            await source.receive()
        assert scope.cancelled_caught
        os.write(write_end, b"after the cancel\n")
        with anyio.fail_after(BOUND):
            assert await source.receive() == b"after the cancel\n"
    finally:
        source.close()


@pytest.mark.anyio
async def test_fd_source_ends_at_the_end_of_the_pipe_and_stops_watching(
    pipe: tuple[int, int],
) -> None:
    read_end, write_end = pipe
    source = FdSource(read_end)
    os.write(write_end, b"last")
    os.close(write_end)
    with anyio.fail_after(BOUND):
        assert await source.receive() == b"last"
        with pytest.raises(anyio.EndOfStream):
            await source.receive()
    assert asyncio.get_running_loop().remove_reader(read_end) is False


@pytest.mark.anyio
async def test_fd_source_reads_a_regular_file_in_a_thread(tmp_path: Path) -> None:
    path = tmp_path / "input.jsonl"
    path.write_bytes(b'{"a":1}\n{"b":2}\n')
    fd = os.open(path, os.O_RDONLY)
    try:
        source = FdSource(fd)
        with anyio.fail_after(BOUND):
            assert await _read_all(BoundedLineReader(source, limit=100)) == [b'{"a":1}', b'{"b":2}']
        source.close()
    finally:
        os.close(fd)


# --- parsing one line ------------------------------------------------------------

MALFORMED = [
    pytest.param(b"{bad json", -32700, None, id="bad-json"),
    pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"ping\xff"}', -32700, None, id="invalid-utf8"),
    pytest.param(
        b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":NaN}}', -32700, None, id="nan"
    ),
    pytest.param(b"[" * 100_000, -32700, None, id="nested-too-deep"),
    pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"\\ud800"}', -32700, None, id="lone-surrogate"),
    pytest.param(b'[{"jsonrpc":"2.0","id":7,"method":"ping"}]', -32600, None, id="batch-array"),
    pytest.param(b"42", -32600, None, id="number"),
    pytest.param(b'"ping"', -32600, None, id="string"),
    pytest.param(b'{"id":7,"method":"ping"}', -32600, 7, id="missing-jsonrpc"),
    pytest.param(b'{"jsonrpc":"1.0","id":"a","method":"ping"}', -32600, "a", id="wrong-jsonrpc"),
    pytest.param(b'{"jsonrpc":"2.0","id":7,"method":5}', -32600, 7, id="method-not-string"),
    pytest.param(
        b'{"jsonrpc":"2.0","id":7,"method":"ping","params":5}', -32600, 7, id="params-number"
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":7,"method":"ping","params":"x"}', -32600, 7, id="params-string"
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":7,"method":"ping","params":[1]}', -32602, 7, id="params-array"
    ),
    pytest.param(b'{"jsonrpc":"2.0","id":true,"method":"ping"}', -32600, None, id="id-bool"),
    pytest.param(b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', -32600, None, id="id-float"),
    pytest.param(b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', -32600, None, id="id-object"),
    pytest.param(
        b'{"jsonrpc":"2.0","id":null,"method":"ping"}', -32600, None, id="id-null-request"
    ),
    pytest.param(b'{"jsonrpc":"2.0","id":7}', -32600, 7, id="neither-method-nor-result"),
    pytest.param(
        b'{"jsonrpc":"2.0","id":7,"result":{},"error":{}}', -32600, 7, id="result-and-error"
    ),
    pytest.param(b'{"jsonrpc":"2.0","id":7,"result":3}', -32600, 7, id="result-not-object"),
    pytest.param(b'{"jsonrpc":"2.0","id":7,"error":{"code":"x"}}', -32600, 7, id="malformed-error"),
]


@pytest.mark.parametrize(("line", "code", "echoed_id"), MALFORMED)
def test_malformed_line_is_answered_with_its_error_code_and_id(
    line: bytes, code: int, echoed_id: int | str | None
) -> None:
    outcome = parse_line(line)
    assert isinstance(outcome, Rejected)
    assert outcome.answer.error.code == code
    assert outcome.answer.id == echoed_id
    prefix = {-32700: "Parse error: ", -32600: "Invalid Request: ", -32602: "Invalid params: "}[
        code
    ]
    assert outcome.answer.error.message.startswith(prefix)


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', JSONRPCRequest),
        (b'{"jsonrpc":"2.0","id":"s","method":"tools/list","params":{}}\r', JSONRPCRequest),
        (b'  {"jsonrpc":"2.0","method":"notifications/initialized"}  ', JSONRPCNotification),
        (b'{"jsonrpc":"2.0","id":3,"result":{}}', JSONRPCResponse),
        (b'{"jsonrpc":"2.0","id":null,"error":{"code":-1,"message":"no"}}', JSONRPCError),
    ],
)
def test_valid_message_becomes_the_sdk_message_type(line: bytes, kind: type) -> None:
    assert isinstance(parse_line(line), kind)


@pytest.mark.parametrize("line", [b"", b"   ", b"\r", b"\t \r"])
def test_blank_line_is_ignored(line: bytes) -> None:
    assert parse_line(line) is None


# --- the transport in process, over in-memory byte streams -----------------------


class MemoryWire:
    """The client's end of an in-process server: raw lines in, parsed JSON lines out."""

    def __init__(self, to_server: Any, from_server: Any) -> None:
        self._to_server = to_server
        self._from_server = from_server
        self._pending = b""

    async def send(self, data: bytes) -> None:
        await self._to_server.send(data)

    async def receive(self) -> dict[str, Any]:
        while b"\n" not in self._pending:
            self._pending += await self._from_server.receive()
        line, self._pending = self._pending.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message

    async def receive_id(self, request_id: int | str | None) -> dict[str, Any]:
        while (message := await self.receive()).get("id") != request_id:
            pass
        return message


class SplittingSink:
    """Writes each line in two parts with a task switch between, like a partial os.write."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def send(self, item: bytes, /) -> None:
        half = len(item) // 2
        await self._inner.send(item[:half])
        await anyio.lowlevel.checkpoint()
        await self._inner.send(item[half:])


@asynccontextmanager
async def serve_in_memory(
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, *, split_writes: bool = False
) -> AsyncIterator[MemoryWire]:
    lowlevel = _load_echo_server().build_server()._lowlevel_server
    to_server, server_in = anyio.create_memory_object_stream[bytes](16)
    server_out, from_server = anyio.create_memory_object_stream[bytes](256)
    stdin = BufferedByteReceiveStream(server_in)
    stdout = SplittingSink(server_out) if split_writes else server_out
    async with to_server, server_in, server_out, from_server, anyio.create_task_group() as tg:

        async def run() -> None:
            transport = hardened_stdio_server(max_message_bytes, stdin=stdin, stdout=stdout)
            async with transport as (read, write):
                await lowlevel.run(read, write, lowlevel.create_initialization_options())

        tg.start_soon(run)
        wire = MemoryWire(to_server, from_server)
        with anyio.fail_after(BOUND):
            await wire.send(_line(INITIALIZE))
            assert "result" in await wire.receive_id("init")
            await wire.send(_line(INITIALIZED))
            yield wire
            to_server.close()  # EOF: the server must wind down on its own


@pytest.mark.anyio
@pytest.mark.parametrize(("line", "code", "echoed_id"), MALFORMED)
async def test_server_answers_a_malformed_line_and_keeps_serving(
    line: bytes, code: int, echoed_id: int | str | None
) -> None:
    async with serve_in_memory() as wire:
        await wire.send(line + b"\n")
        answer = await wire.receive()
        assert answer["error"]["code"] == code
        assert answer["id"] == echoed_id
        await wire.send(_ping(100))
        assert (await wire.receive_id(100))["result"] == {}


@pytest.mark.anyio
async def test_server_refuses_an_oversized_message_naming_the_limit_and_flag_then_serves() -> None:
    async with serve_in_memory(max_message_bytes=4096) as wire:
        await wire.send(
            b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"pad":"' + b"a" * 10_000 + b'"}}\n'
        )
        answer = await wire.receive()
        assert answer["id"] is None
        assert answer["error"]["code"] == -32600
        assert "4096-byte" in answer["error"]["message"]
        assert MAX_MESSAGE_BYTES_FLAG in answer["error"]["message"]
        await wire.send(_ping(10))
        assert (await wire.receive_id(10))["result"] == {}


@pytest.mark.anyio
async def test_a_broken_stderr_does_not_take_the_wire_down(tmp_path: Path) -> None:
    closed = (tmp_path / "log.txt").open("w")
    closed.close()
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=closed))
    async with serve_in_memory() as wire:
        await wire.send(b"{oops\n" + _ping(14))
        assert (await wire.receive())["error"]["code"] == -32700
        assert (await wire.receive_id(14))["result"] == {}


@pytest.mark.anyio
async def test_blank_lines_get_no_answer_and_do_not_disturb_the_next_request() -> None:
    async with serve_in_memory() as wire:
        await wire.send(b"\n\r\n   \n" + _ping(11))
        assert await wire.receive() == {"jsonrpc": "2.0", "id": 11, "result": {}}


@pytest.mark.anyio
async def test_error_answers_and_sdk_answers_never_interleave_mid_line() -> None:
    async with serve_in_memory(split_writes=True) as wire:
        burst = b"".join(_ping(n) + b"{oops\n" for n in range(200))
        await wire.send(burst)
        seen = [await wire.receive() for _ in range(400)]  # each receive parses one whole line
        assert sorted(m["id"] for m in seen if m["id"] is not None) == list(range(200))
        assert sum(1 for m in seen if m.get("error", {}).get("code") == -32700) == 200


class _NullSink:
    async def send(self, item: bytes, /) -> None:
        return None


@pytest.mark.anyio
@pytest.mark.parametrize("limit", [0, -5, True])
async def test_a_non_positive_message_limit_is_refused_with_a_usage_error(limit: int) -> None:
    with pytest.raises(UsageError) as caught:
        async with hardened_stdio_server(limit, stdin=ChunkSource([]), stdout=_NullSink()):
            pass
    assert caught.value.code == "mcp.bad_message_limit"


@pytest.mark.anyio
async def test_an_unencodable_answer_becomes_an_internal_error_and_serving_goes_on() -> None:
    # A lone surrogate in a result cannot be encoded: a plain writer would die, and the connection with it.
    out_send, out_recv = anyio.create_memory_object_stream[bytes](8)
    _keep_open, never_ends = anyio.create_memory_object_stream[bytes]()
    async with out_send, out_recv, _keep_open, never_ends:
        with anyio.fail_after(BOUND):
            stdin = BufferedByteReceiveStream(never_ends)
            async with hardened_stdio_server(stdin=stdin, stdout=out_send) as (_read, write):
                bad = JSONRPCResponse(jsonrpc="2.0", id=5, result={"text": "\ud800"})
                await write.send(SessionMessage(bad))
                await write.send(SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=6, result={})))
                first = json.loads(await out_recv.receive())
                second = json.loads(await out_recv.receive())
    assert (first["id"], first["error"]["code"]) == (5, -32603)
    assert second == {"jsonrpc": "2.0", "id": 6, "result": {}}


@pytest.mark.anyio
async def test_an_error_in_the_served_body_propagates_unwrapped() -> None:
    _keep_open, never_ends = anyio.create_memory_object_stream[bytes]()
    async with never_ends, _keep_open:
        stdin = BufferedByteReceiveStream(never_ends)
        with anyio.fail_after(BOUND), pytest.raises(LookupError):
            async with hardened_stdio_server(stdin=stdin, stdout=_NullSink()):
                raise LookupError("from the server body")


@pytest.mark.anyio
async def test_transport_stops_reading_when_the_server_is_done_even_if_stdin_stays_open() -> None:
    _keep_open, never_ends = anyio.create_memory_object_stream[bytes]()
    async with never_ends, _keep_open:
        stdin = BufferedByteReceiveStream(never_ends)
        with anyio.fail_after(BOUND):
            async with hardened_stdio_server(stdin=stdin, stdout=_NullSink()) as (_read, write):
                await write.aclose()


# --- the real thing: a subprocess and the official client --------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("mode", "era", "version"),
    [("legacy", "handshake", "2025-11-25"), ("auto", "2026-07-28", "2026-07-28")],
)
async def test_official_client_initializes_lists_and_calls_ping_in_a_subprocess(
    mode: str, era: str, version: str, tmp_path: Path
) -> None:
    params = StdioServerParameters(command=sys.executable, args=[str(ECHO_SERVER)])
    with (tmp_path / "stderr.txt").open("w") as errlog, anyio.fail_after(BOUND):
        transport = stdio_client(
            params, errlog=errlog
        )  # what Client(params) uses; stderr to a file
        info = Implementation(name="pytest-client", version="1")
        async with Client(transport, client_info=info, mode=mode) as client:
            tools = await client.list_tools()
            assert [tool.name for tool in tools.tools] == ["ping"]
            result = await client.call_tool(
                "ping", {"message": "hi"}, meta=request_meta({"authToken": "t"})
            )
    assert result.is_error is False
    assert result.structured_content == {
        "pong": "hi",
        "caller": "pytest-client",
        "era": era,
        "auth_token_presented": True,
        "protocol_version": version,
    }


class RawServer:
    """The echo server as a subprocess, spoken to in raw bytes."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self.lines: list[bytes] = []  # every stdout line, for the stdout-purity check
        self._pending = b""

    async def send(self, data: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(data)

    async def receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        while b"\n" not in self._pending:
            self._pending += await self.process.stdout.receive()
        line, self._pending = self._pending.split(b"\n", 1)
        self.lines.append(line)
        message: dict[str, Any] = json.loads(line)
        return message

    async def receive_id(self, request_id: int | str | None) -> dict[str, Any]:
        while (message := await self.receive()).get("id") != request_id:
            pass
        return message

    def peak_rss_kib(self) -> int:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return next(
            int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")
        )


@asynccontextmanager
async def spawn_raw(
    tmp_path: Path, initialize: dict[str, Any] = INITIALIZE
) -> AsyncIterator[RawServer]:
    with (tmp_path / "stderr.txt").open("wb") as errlog:
        async with await anyio.open_process(
            [sys.executable, str(ECHO_SERVER)], stderr=errlog
        ) as process:
            server = RawServer(process)
            with anyio.fail_after(BOUND):
                await server.send(_line(initialize))
                assert "result" in await server.receive_id("init")
                await server.send(_line(INITIALIZED))
                yield server
                assert process.stdin is not None
                await process.stdin.aclose()
                assert process.stdout is not None
                async for rest in process.stdout:
                    server._pending += rest
                server.lines.extend(server._pending.splitlines())
                assert await process.wait() == 0


@pytest.mark.anyio
async def test_subprocess_restores_stdio_and_exits_while_its_stdin_is_still_open() -> None:
    script = (
        "import anyio\n"
        "from continuum.serving.transport import hardened_stdio_server\n"
        "async def main():\n"
        "    async with hardened_stdio_server() as (read, write):\n"
        "        print('inside', flush=True)\n"
        "        await write.aclose()\n"
        "    print('after', flush=True)\n"
        "anyio.run(main)\n"
    )
    with anyio.fail_after(BOUND):
        async with await anyio.open_process([sys.executable, "-c", script]) as process:
            assert process.stdout is not None and process.stderr is not None
            # Our stdin pipe stays open throughout: the transport must not wait for it.
            assert await process.wait() == 0
            out = b"".join([chunk async for chunk in process.stdout])
            err = b"".join([chunk async for chunk in process.stderr])
    assert out == b"after\n"  # fd 1 is the wire again once the transport is gone
    assert b"inside" in err  # while serving, stray output went to stderr


@pytest.mark.anyio
async def test_subprocess_tool_sees_the_token_sent_in_the_initialize_meta(tmp_path: Path) -> None:
    initialize = json.loads(json.dumps(INITIALIZE))
    initialize["params"]["_meta"] = {"authToken": "init-secret"}
    async with spawn_raw(tmp_path, initialize) as server:
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "ping", "arguments": {}},
        }
        await server.send(_line(call))
        found = (await server.receive_id(1))["result"]["structuredContent"]
    assert (found["caller"], found["era"], found["auth_token_presented"]) == (
        "raw-test",
        "handshake",
        True,
    )


@pytest.mark.anyio
async def test_subprocess_answers_every_malformed_line_and_serves_the_next_request(
    tmp_path: Path,
) -> None:
    async with spawn_raw(tmp_path) as server:
        for n, case in enumerate(MALFORMED):
            line, code, echoed_id = case.values
            assert isinstance(line, bytes), case.id
            await server.send(line + b"\n")
            answer = await server.receive()
            assert (answer["error"]["code"], answer["id"]) == (code, echoed_id), case.id
            await server.send(_ping(1000 + n))
            assert (await server.receive_id(1000 + n))["result"] == {}


@pytest.mark.anyio
async def test_subprocess_refuses_a_5_mb_line_and_serves_the_next_request(tmp_path: Path) -> None:
    async with spawn_raw(tmp_path) as server:
        await server.send(
            b'{"jsonrpc":"2.0","id":5,"method":"ping","params":{"pad":"'
            + b"a" * (5 << 20)
            + b'"}}\n'
        )
        answer = await server.receive()
        assert (answer["id"], answer["error"]["code"]) == (None, -32600)
        assert f"{DEFAULT_MAX_MESSAGE_BYTES}-byte" in answer["error"]["message"]
        await server.send(_ping(6))
        assert (await server.receive_id(6))["result"] == {}


@pytest.mark.anyio
async def test_subprocess_peak_memory_stays_bounded_after_a_50_mb_line(tmp_path: Path) -> None:
    async with spawn_raw(tmp_path) as server:
        await server.send(_ping(1))
        await server.receive_id(1)
        baseline = server.peak_rss_kib()
        await server.send(b'{"jsonrpc":"2.0","id":2,"method":"ping","params":{"pad":"')
        chunk = b"a" * (1 << 20)
        for _ in range(50):
            await server.send(chunk)
        await server.send(b'"}}\n' + _ping(3))
        assert (await server.receive())["error"]["code"] == -32600
        assert (await server.receive_id(3))["result"] == {}
        growth_mib = (server.peak_rss_kib() - baseline) / 1024
    # Measured: ~1.3 MiB here; the SDK's own stdio reader grows by ~180 MiB on the same line.
    assert growth_mib < 8, f"peak RSS grew by {growth_mib:.1f} MiB reading a 50 MiB line"


@pytest.mark.anyio
async def test_subprocess_stdout_carries_only_json_rpc_even_when_a_tool_prints(
    tmp_path: Path,
) -> None:
    async with spawn_raw(tmp_path) as server:
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "ping", "arguments": {}},
        }
        await server.send(_line(call) + b"{broken\n")
        assert (await server.receive_id(1))["result"]["isError"] is False
    assert server.lines, "the server wrote nothing"
    for line in server.lines:
        message = json.loads(line)
        assert message["jsonrpc"] == "2.0" and ("result" in message or "error" in message)
    stderr = (tmp_path / "stderr.txt").read_text()
    assert "stray print from the ping tool" in stderr  # diverted, not lost
    assert "mcp.transport.line_rejected" in stderr

"""The in-flight bound: a client that sends and does not read cannot grow the server.

The SDK runs every request at once and each finished answer waits, whole, for the one
writer; before the bound, 150 large answers nobody read held 420 MB. Now at most
``--max-in-flight`` requests are handed to the SDK unanswered; the rest are answered
at once with a small busy error.

The real thing is ``continuum-mcp`` as a subprocess spoken to in raw JSON lines; the
accounting itself (cancelled requests, notifications, the flag) is also checked in
process over in-memory streams.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.text import TextReceiveStream

from continuum import Origin
from continuum.runtime.facade import Continuum
from continuum.serving.flags import MAX_IN_FLIGHT_FLAG, SERVER_BUSY
from continuum.serving.transport import (
    DEFAULT_MAX_IN_FLIGHT,
    InFlight,
    busy_answer,
    hardened_stdio_server,
)
from continuum.store import open_store
from tests.mcp.conftest import (
    BOUND,
    ServerSite,
    initialize_request,
    line,
    run_server_to_exit,
    server_command,
    server_env,
    stderr_lines,
    tool_call,
)

pytestmark = pytest.mark.anyio

RUN = "big"
ACTIONS = 40
BLOB = 20_000  # characters of arguments per action: one list_actions answer is ~1.6 MB
FLOOD = 150


def figure(text: str) -> None:
    print(f"\n{text}")


def big_store(db: Path) -> None:
    """A run whose list_actions answer is large: 40 actions x 20 KB, as structured
    content and again as text, far larger than a pipe's 64 KB buffer."""
    rt = Continuum(open_store(str(db)), origin=Origin.DETERMINISTIC)
    try:
        rt.record_progress(RUN, goal="many large actions", total=ACTIONS)
        for n in range(ACTIONS):
            rt.intercept(RUN, "upload", {"n": n, "blob": f"{n:04d}" + "z" * BLOB}, key=f"k{n}")
    finally:
        rt.close()


@dataclass
class Flood:
    answers: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    busy_logged: bool = False
    growth_mib: float = 0.0
    answer_mib: float = 0.0
    after_drain: dict[str, Any] = field(default_factory=dict)

    def results(self) -> list[int]:
        return sorted(i for i, got in self.answers.items() if "result" in got[0])

    def busy(self) -> list[int]:
        return sorted(
            i
            for i, got in self.answers.items()
            if got[0].get("error", {}).get("code") == SERVER_BUSY
        )


class Wire:
    """A raw ``continuum-mcp`` whose stderr is drained as it comes (a full stderr pipe
    would stall the server) and watched for the first busy line."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self.stderr: list[str] = []
        self.busy_seen = anyio.Event()
        self.last_size = 0  # bytes of the last line received
        self._pending = b""

    async def send(self, data: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(data)

    async def receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        while b"\n" not in self._pending:
            self._pending += await self.process.stdout.receive()
        raw, self._pending = self._pending.split(b"\n", 1)
        self.last_size = len(raw)
        message: dict[str, Any] = json.loads(raw)
        return message

    async def drain_stderr(self) -> None:
        assert self.process.stderr is not None
        buffered = ""
        async for text in TextReceiveStream(self.process.stderr):
            buffered += text
            *done, buffered = buffered.split("\n")
            self.stderr += done
            if any('"mcp.transport.busy"' in row for row in done):
                self.busy_seen.set()

    def peak_rss_kib(self) -> int:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return next(int(row.split()[1]) for row in status.splitlines() if row.startswith("VmHWM:"))


@asynccontextmanager
async def raw_server(site: ServerSite, *extra: str) -> AsyncIterator[Wire]:
    with anyio.fail_after(BOUND):
        async with (
            await anyio.open_process(
                server_command(site.db, *extra), cwd=site.cwd, env=server_env(**site.env)
            ) as process,
            anyio.create_task_group() as tg,
        ):
            wire = Wire(process)
            tg.start_soon(wire.drain_stderr)
            await wire.send(line(initialize_request("flooder")))
            assert "result" in await wire.receive()
            await wire.send(line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            yield wire
            assert process.stdin is not None and process.stdout is not None
            await process.stdin.aclose()
            rest = wire._pending + b"".join([chunk async for chunk in process.stdout])
            assert rest == b"", rest[:200]  # no late or duplicate answer after the drain
            assert await process.wait() == 0


def list_actions(request_id: int | str) -> bytes:
    return line(tool_call(request_id, "continuum_list_actions", {"run_id": RUN}))


async def flood(site: ServerSite, *extra: str, wait_for_busy: bool) -> Flood:
    """Send FLOOD list_actions requests without reading, then read every answer."""
    out = Flood()
    async with raw_server(site, *extra) as wire:
        await wire.send(list_actions("warm-up"))  # open the store, load the code: the baseline
        assert "result" in await wire.receive()
        out.answer_mib = wire.last_size / (1 << 20)
        baseline = wire.peak_rss_kib()
        await wire.send(b"".join(list_actions(n) for n in range(FLOOD)))  # ~15 KB: fits the pipe
        if wait_for_busy:
            # Not reading stdout until the server has refused one: no answer (each larger
            # than the pipe) can have been written by then, so the limit was reached.
            await wire.busy_seen.wait()
            out.busy_logged = True
        for _ in range(FLOOD):
            answer = await wire.receive()
            out.answers.setdefault(answer["id"], []).append(answer)
        out.growth_mib = (wire.peak_rss_kib() - baseline) / 1024
        await wire.send(list_actions("after"))
        out.after_drain = await wire.receive()
    return out


async def test_a_client_that_does_not_read_gets_busy_errors_and_the_server_stays_bounded(
    site: ServerSite,
) -> None:
    big_store(site.db)
    bounded = await flood(site, wait_for_busy=True)
    # Negative control: the same flood with a limit that never binds.
    unbounded = await flood(site, MAX_IN_FLIGHT_FLAG, "1000", wait_for_busy=False)

    assert sorted(bounded.answers) == list(range(FLOOD))  # every request answered ...
    assert all(len(got) == 1 for got in bounded.answers.values())  # ... exactly once
    results, busy = bounded.results(), bounded.busy()
    assert len(results) + len(busy) == FLOOD
    assert results[:DEFAULT_MAX_IN_FLIGHT] == list(range(DEFAULT_MAX_IN_FLIGHT))
    assert DEFAULT_MAX_IN_FLIGHT in busy  # the first request over the limit was refused
    refused = bounded.answers[busy[0]][0]["error"]
    assert f"{DEFAULT_MAX_IN_FLIGHT} requests" in refused["message"]
    assert "read their answers" in refused["message"] and MAX_IN_FLIGHT_FLAG in refused["message"]
    assert refused["data"]["limit"] == DEFAULT_MAX_IN_FLIGHT
    for n in results:
        payload = bounded.answers[n][0]["result"]["structuredContent"]
        assert len(payload["actions"]) == ACTIONS
    assert "result" in bounded.after_drain and bounded.after_drain["id"] == "after"

    assert unbounded.busy() == [] and len(unbounded.results()) == FLOOD
    assert "result" in unbounded.after_drain
    figure(
        f"F15 [inflight]: {FLOOD} list_actions requests (answers of "
        f"{bounded.answer_mib:.1f} MiB) sent without reading: "
        f"{len(results)} served, {len(busy)} refused busy (limit {DEFAULT_MAX_IN_FLIGHT}), "
        f"each answered once; peak RSS grew {bounded.growth_mib:.0f} MiB; next request served"
    )
    figure(
        f"F15 [inflight_control]: same flood with {MAX_IN_FLIGHT_FLAG} 1000: "
        f"{len(unbounded.results())} served, 0 refused; peak RSS grew "
        f"{unbounded.growth_mib:.0f} MiB"
    )
    # Measured: bounded 40-70 MiB (16 answers held at most), control 230-245 MiB.
    assert bounded.growth_mib < 120, f"bounded server grew by {bounded.growth_mib:.0f} MiB"
    assert unbounded.growth_mib > bounded.growth_mib + 100, (
        bounded.growth_mib,
        unbounded.growth_mib,
    )


@pytest.mark.parametrize("value", ["0", "-3"])
async def test_a_max_in_flight_below_one_refuses_start_up_in_one_line(
    site: ServerSite, value: str
) -> None:
    done = run_server_to_exit(site.db, MAX_IN_FLIGHT_FLAG, value, cwd=site.cwd)
    assert done.returncode == 1 and done.stdout == ""
    assert stderr_lines(done.stderr) == [f"continuum-mcp: {MAX_IN_FLIGHT_FLAG} must be at least 1"]
    assert not site.db.exists()


# --- the accounting, in process ---------------------------------------------------------


def test_in_flight_counts_per_id_and_ignores_ids_it_never_admitted() -> None:
    in_flight = InFlight(2)
    assert in_flight.admit(1) and in_flight.admit(1)  # a reused id counts twice
    assert not in_flight.admit("x") and in_flight.refused == 1
    in_flight.release("never-admitted")
    in_flight.release(1)
    assert in_flight.count == 1 and in_flight.admit("x")
    in_flight.release(1)
    in_flight.release(1)  # already settled: no effect
    assert in_flight.count == 1


def test_the_busy_answer_carries_the_request_id_a_server_code_and_the_flag() -> None:
    answer = busy_answer("req-7", 3).model_dump(by_alias=True, exclude_unset=True)
    assert answer["id"] == "req-7"
    assert -32099 <= answer["error"]["code"] <= -32000
    assert answer["error"]["data"] == {"unanswered": 3, "limit": 3, "flag": MAX_IN_FLIGHT_FLAG}


@pytest.mark.parametrize("limit", [0, -1, True, 2.5])
async def test_a_bad_in_flight_limit_is_refused_with_a_usage_error(limit: Any) -> None:
    from continuum.errors import UsageError

    class Nothing:
        async def receive(self, max_bytes: int = 65536) -> bytes:
            raise anyio.EndOfStream

        async def send(self, item: bytes, /) -> None:
            return None

    with pytest.raises(UsageError) as caught:
        async with hardened_stdio_server(max_in_flight=limit, stdin=Nothing(), stdout=Nothing()):
            pass
    assert caught.value.code == "mcp.bad_in_flight_limit"


@asynccontextmanager
async def held_server(limit: int) -> AsyncIterator[tuple[Any, Any, anyio.Event]]:
    """A server over the transport whose ``hold`` tool waits for an event (or a cancel)."""
    from mcp.server.mcpserver import MCPServer

    release = anyio.Event()
    server = MCPServer("hold")

    @server.tool()
    async def hold() -> str:
        await release.wait()
        return "released"

    lowlevel = server._lowlevel_server
    to_server, server_in = anyio.create_memory_object_stream[bytes](64)
    server_out, from_server = anyio.create_memory_object_stream[bytes](64)
    async with to_server, server_in, server_out, from_server, anyio.create_task_group() as tg:

        async def run() -> None:
            transport = hardened_stdio_server(
                max_in_flight=limit, stdin=BufferedByteReceiveStream(server_in), stdout=server_out
            )
            async with transport as (read, write):
                await lowlevel.run(read, write, lowlevel.create_initialization_options())

        tg.start_soon(run)
        with anyio.fail_after(BOUND):
            await to_server.send(line(initialize_request("holder")))
            assert "result" in json.loads(await from_server.receive())
            await to_server.send(line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            yield to_server, from_server, release
            to_server.close()


async def test_notifications_are_not_counted_and_a_cancelled_request_frees_its_slot() -> None:
    async with held_server(limit=1) as (to_server, from_server, _release):
        await to_server.send(line(tool_call(1, "hold", {})))  # occupies the only slot
        for _ in range(5):  # notifications pass: they are not requests
            await to_server.send(line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        await to_server.send(line({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
        refused = json.loads(await from_server.receive())
        assert (refused["id"], refused["error"]["code"]) == (2, SERVER_BUSY)
        # The client gives up on request 1: the SDK settles it unanswered, freeing the slot.
        await to_server.send(
            line(
                {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
            )
        )
        with anyio.fail_after(BOUND):
            while True:  # until the cancel has landed; every ping is answered either way
                await to_server.send(line({"jsonrpc": "2.0", "id": "p", "method": "ping"}))
                answer = json.loads(await from_server.receive())
                assert answer["id"] == "p"
                if "result" in answer:
                    break
                assert answer["error"]["code"] == SERVER_BUSY


async def test_an_answered_request_frees_its_slot() -> None:
    async with held_server(limit=1) as (to_server, from_server, release):
        await to_server.send(line(tool_call(1, "hold", {})))
        await to_server.send(line({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
        assert json.loads(await from_server.receive())["error"]["code"] == SERVER_BUSY
        release.set()
        assert json.loads(await from_server.receive())["id"] == 1
        await to_server.send(line({"jsonrpc": "2.0", "id": 3, "method": "ping"}))
        assert json.loads(await from_server.receive()) == {"jsonrpc": "2.0", "id": 3, "result": {}}

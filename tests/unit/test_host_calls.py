"""Host calls the MCP gateway takes past the SDK's server (``serving/host_calls.py``): which
requests are taken, and how a taken call is answered, cancelled or failed. The host link is
a recorder (a unit test of the logic); the real transport and upstreams are exercised by
tests/gateway/."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp import types
from mcp.shared.exceptions import MCPError

from continuum.serving.host_calls import HostCalls, HostEra, host_call, is_request_id, wire_result

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def request(params: dict[str, Any] | None, method: str = "tools/call") -> types.JSONRPCRequest:
    return types.JSONRPCRequest(jsonrpc="2.0", id=7, method=method, params=params)


def test_a_plain_call_is_taken_with_its_progress_token() -> None:
    call = host_call(
        request({"name": "read", "arguments": {"a": 1}, "_meta": {"progressToken": "t"}})
    )
    assert call is not None
    assert (call.name, call.arguments, call.token) == ("read", {"a": 1}, "t")
    bare = host_call(request({"name": "read"}))
    assert bare is not None and bare.arguments == {} and bare.token is None


@pytest.mark.parametrize(
    "params, method",
    [
        pytest.param({"name": "read", "arguments": {}}, "tools/list", id="another-method"),
        pytest.param({"name": 5, "arguments": {}}, "tools/call", id="name-not-text"),
        pytest.param({"name": "read", "arguments": [1]}, "tools/call", id="arguments-a-list"),
        pytest.param({"name": "read", "_meta": "x"}, "tools/call", id="meta-not-an-object"),
        pytest.param({"name": "read", "task": {"ttl": 1}}, "tools/call", id="task-augmented"),
        pytest.param(None, "tools/call", id="no-params"),
        pytest.param(
            {"name": "read", "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}},
            "tools/call",
            id="a-2026-envelope",  # refused by the SDK on a handshake connection
        ),
    ],
)
def test_anything_else_takes_the_sdk_path(params: dict[str, Any] | None, method: str) -> None:
    assert host_call(request(params, method)) is None


def test_request_ids_are_text_or_whole_numbers_never_booleans() -> None:
    assert is_request_id("a") and is_request_id(3)
    assert not any(is_request_id(v) for v in (True, 1.5, None, {"a": 1}))


class Host:
    """Records what a taken call writes to the host."""

    def __init__(self) -> None:
        self.answers: list[types.JSONRPCResponse | types.JSONRPCError] = []
        self.settled: list[types.RequestId] = []
        self.written = anyio.Event()

    async def answer(self, message: types.JSONRPCResponse | types.JSONRPCError) -> None:
        self.answers.append(message)
        self.written.set()

    def settle(self, request_id: types.RequestId) -> None:
        self.settled.append(request_id)


async def test_a_taken_call_is_answered_as_the_sdk_shapes_a_tool_result() -> None:
    host, calls = Host(), HostCalls(lambda: "2025-11-25")
    result = types.CallToolResult(content=[types.TextContent(type="text", text="ok")])

    async def run() -> types.CallToolResult:
        return result

    async with anyio.create_task_group() as tg:
        calls.take(tg.start_soon, 7, "read", run, host)  # type: ignore[arg-type]
        assert 7 in calls and calls.busy
    assert not calls.busy
    (answer,) = host.answers
    assert isinstance(answer, types.JSONRPCResponse) and answer.id == 7
    assert answer.result == {  # as the SDK 2.3 server writes it for a handshake-era client
        "content": [{"type": "text", "text": "ok"}],
        "isError": False,  # and no 2026-07-28 resultType (the plain dump carries one)
    }


async def test_a_cancelled_call_is_never_answered_and_its_id_is_settled() -> None:
    host, calls = Host(), HostCalls(lambda: "2025-11-25")
    started = anyio.Event()

    async def run() -> types.CallToolResult:
        started.set()
        await anyio.sleep_forever()
        raise AssertionError("not reached")

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            calls.take(tg.start_soon, "c1", "slow", run, host)  # type: ignore[arg-type]
            await started.wait()
            assert calls.cancel("c1")
            assert not calls.cancel("c1")  # once only
    assert host.answers == [] and host.settled == ["c1"]


async def test_a_cancel_naming_the_id_in_another_form_settles_the_id_it_was_admitted_under() -> (
    None
):
    # The transport counts a request by its own id: 7 admitted, a cancel of "7" must free
    # 7 (freeing "7" freed nothing, and the slot was lost for good). And only once the run
    # has ended, as the SDK frees a cancelled request's slot when its handler ends.
    host, calls = Host(), HostCalls(lambda: "2025-11-25")
    started, ending = anyio.Event(), anyio.Event()

    async def run() -> types.CallToolResult:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await ending.wait()
        raise AssertionError("not reached")

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            calls.take(tg.start_soon, 7, "slow", run, host)  # type: ignore[arg-type]
            await started.wait()
            assert calls.cancel("7")
            await anyio.lowlevel.checkpoint()
            assert host.settled == []  # still running: still in flight
            ending.set()
    assert host.answers == [] and host.settled == [7]


async def test_a_failure_of_the_gateway_is_an_internal_error_answer() -> None:
    host, calls = Host(), HostCalls(lambda: "2025-11-25")

    async def run() -> types.CallToolResult:
        raise RuntimeError("the store broke")

    async with anyio.create_task_group() as tg:
        calls.take(tg.start_soon, 9, "read", run, host)  # type: ignore[arg-type]
    (answer,) = host.answers
    assert isinstance(answer, types.JSONRPCError)
    assert answer.error.code == types.INTERNAL_ERROR and "the store broke" in answer.error.message


async def test_an_mcp_error_is_the_json_rpc_error_it_carries_as_the_sdk_answers_it() -> None:
    host, calls = Host(), HostCalls(lambda: "2025-11-25")
    error = types.ErrorData(code=types.INVALID_PARAMS, message="no such thing", data="x")

    async def refused() -> types.CallToolResult:
        raise MCPError.from_error_data(error)

    async def not_a_result() -> types.CallToolResult:
        return types.TextContent(type="text", text="x")  # type: ignore[return-value]

    async with anyio.create_task_group() as tg:
        calls.take(tg.start_soon, 1, "a", refused, host)  # type: ignore[arg-type]
        calls.take(tg.start_soon, 2, "b", not_a_result, host)  # type: ignore[arg-type]
    answers = {a.id: a for a in host.answers}
    assert isinstance(answers[1], types.JSONRPCError) and answers[1].error == error
    assert isinstance(answers[2], types.JSONRPCError)
    assert answers[2].error.code == types.INTERNAL_ERROR
    assert answers[2].error.message == "Handler returned an invalid result"  # the SDK's words


async def test_a_later_call_reusing_a_cancelled_id_stays_tracked_when_the_first_ends() -> None:
    # The first call, cancelled, ends after a second call took its id: the second is still
    # one of the taken calls (a host cancel of it must find it), not dropped by the first's
    # end. (Dropping by id alone, as the relay once did, fails this test.)
    host, calls = Host(), HostCalls(lambda: "2025-11-25")
    first_started, release_second = anyio.Event(), anyio.Event()

    async def first() -> types.CallToolResult:
        first_started.set()
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.lowlevel.checkpoint()  # its end comes after the second is taken
        raise AssertionError("not reached")

    async def second() -> types.CallToolResult:
        await release_second.wait()
        return types.CallToolResult(content=[])

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            calls.take(tg.start_soon, 5, "a", first, host)  # type: ignore[arg-type]
            await first_started.wait()
            assert calls.cancel(5)
            calls.take(tg.start_soon, 5, "b", second, host)  # type: ignore[arg-type]
            for _ in range(10):
                await anyio.lowlevel.checkpoint()  # the first call's task ends meanwhile
            assert 5 in calls  # still tracked: cancellable by the host
            release_second.set()
    assert [a.id for a in host.answers] == [5]


ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "agent", "version": "1"},
}


def test_an_envelope_is_left_to_the_sdk_on_a_handshake_connection_only() -> None:
    params = {"name": "read", "arguments": {}, "_meta": {**ENVELOPE, "progressToken": 3}}
    assert host_call(request(params)) is None
    call = host_call(request(params), modern=True)
    assert call is not None and call.token == 3


def test_a_2026_answer_is_typed_complete_and_stamped_as_the_sdk_stamps_it() -> None:
    stamp = {"name": "continuum", "version": "9"}
    result = types.CallToolResult(content=[types.TextContent(type="text", text="x")])
    handshake = wire_result(result, "2025-11-25", lambda: stamp)
    assert "resultType" not in handshake and "_meta" not in handshake
    modern = wire_result(result, "2026-07-28", lambda: stamp)
    assert modern["resultType"] == "complete"
    assert modern["_meta"] == {"io.modelcontextprotocol/serverInfo": stamp}
    own = types.CallToolResult(content=[], _meta={"k": 1})
    kept = wire_result(own, "2026-07-28", lambda: stamp)
    assert kept["_meta"] == {"k": 1, "io.modelcontextprotocol/serverInfo": stamp}
    with pytest.raises(MCPError) as caught:  # a caller without the stamp: an error answer
        wire_result(result, "2026-07-28")
    assert caught.value.error.code == types.INTERNAL_ERROR


@pytest.mark.parametrize(
    "first, modern",
    [
        (("initialize", {"protocolVersion": "2025-11-25"}), False),
        (("initialize", {"_meta": ENVELOPE}), False),  # initialize never opens 2026-07-28
        (("tools/list", {}), False),
        (("server/discover", {"_meta": ENVELOPE}), True),
        (("tools/call", {"name": "x", "_meta": ENVELOPE}), True),
    ],
)
def test_the_first_request_opens_the_era_as_the_sdk_decides_it(
    first: tuple[str, dict[str, Any]], modern: bool
) -> None:
    era = HostEra()
    assert era.before(request(first[1], first[0])) is None  # the first: never taken
    later = request({"name": "x", "_meta": ENVELOPE if modern else {}})
    opened = "2026-07-28" if modern else "handshake"
    assert era.before(later) == opened
    assert era.before(request({"name": "x"})) == opened  # for good

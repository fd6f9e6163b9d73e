"""The gateway's calls to an HTTP upstream past the SDK's client (``gateway/http_leg.py``):
how each kind of answer is read and what each failure becomes. The upstream here is an
``httpx2.MockTransport`` that answers as an upstream would (a unit test of the logic); the
real upstream, killed and restarted, is in tests/gateway/test_mcp_gateway_http.py."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import httpx2
import pytest
from mcp import types
from mcp.shared.exceptions import MCPError

from continuum.gateway.http_leg import LAST_EVENT_ID, SESSION_HEADER, HttpLeg

pytestmark = pytest.mark.anyio

URL = "http://upstream.test/mcp"
SESSION = {SESSION_HEADER: "s-1", "mcp-protocol-version": "2025-11-25"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def result(text: str, request_id: Any) -> dict[str, Any]:
    content = [{"type": "text", "text": text}]
    return {"jsonrpc": "2.0", "id": request_id, "result": {"content": content}}


def sse(*events: str) -> httpx2.Response:
    return httpx2.Response(
        200, headers={"content-type": "text/event-stream"}, content="".join(events).encode()
    )


def event(data: Any, kind: str = "message", event_id: str | None = None) -> str:
    lines = [f"event: {kind}"] + ([f"id: {event_id}"] if event_id else [])
    text = data if isinstance(data, str) else json.dumps(data)
    return "\n".join([*lines, f"data: {text}", "", ""])


class Upstream:
    """Records every request; ``answer`` decides each response."""

    def __init__(self, answer: Callable[[httpx2.Request, dict[str, Any] | None], Any]) -> None:
        self.answer = answer
        self.requests: list[tuple[httpx2.Request, dict[str, Any] | None]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content) if request.content else None
        self.requests.append((request, body))
        response = self.answer(request, body)
        assert isinstance(response, httpx2.Response)
        return response

    def posted(self) -> list[dict[str, Any]]:
        return [body for request, body in self.requests if body is not None]


def leg_on(upstream: Upstream) -> Iterator[HttpLeg]:
    leg = HttpLeg(URL)
    client = httpx2.AsyncClient(transport=httpx2.MockTransport(upstream))
    leg.client = client
    leg._session_headers = dict(SESSION)  # as remember() learns them from the SDK's requests
    yield leg


async def call(upstream: Upstream, timeout: float = 10) -> types.CallToolResult:
    for leg in leg_on(upstream):
        assert leg.client is not None
        async with leg.client:
            with anyio.fail_after(30):
                return await leg.call("read_balance", {"account": "acme"}, timeout)
    raise AssertionError("no leg")


async def test_the_session_s_headers_go_with_the_call_and_a_json_body_answers() -> None:
    def answer(request: httpx2.Request, body: Any) -> httpx2.Response:
        return httpx2.Response(200, json=result("42", body["id"]))

    upstream = Upstream(answer)
    answered = await call(upstream)
    assert answered.content[0].text == "42"  # type: ignore[union-attr]
    request, body = upstream.requests[0]
    assert request.headers[SESSION_HEADER] == "s-1"
    assert request.headers["mcp-protocol-version"] == "2025-11-25"
    assert body is not None and body["method"] == "tools/call"
    assert body["id"].startswith("continuum-gateway:http-")  # never one of the session's


async def test_events_other_than_messages_and_priming_events_are_skipped() -> None:
    def answer(request: httpx2.Request, body: Any) -> httpx2.Response:
        return sse(
            event("", event_id="e0"),  # primes resumption
            event("still working", kind="heartbeat"),  # not JSON: skipped, not parsed
            event({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}),
            event(result("done", body["id"]), event_id="e1"),
        )

    assert (await call(Upstream(answer))).content[0].text == "done"  # type: ignore[union-attr]


async def test_a_same_origin_redirect_is_followed_and_another_is_not() -> None:
    def answer(request: httpx2.Request, body: Any) -> httpx2.Response:
        if request.url.path == "/mcp":
            return httpx2.Response(307, headers={"location": "/mcp/"})
        return httpx2.Response(200, json=result("here", body["id"]))

    upstream = Upstream(answer)
    assert (await call(upstream)).content[0].text == "here"  # type: ignore[union-attr]
    followed = upstream.requests[1][0]
    assert followed.url.path == "/mcp/" and followed.headers[SESSION_HEADER] == "s-1"

    elsewhere = Upstream(
        lambda r, b: httpx2.Response(307, headers={"location": "http://other.test/mcp"})
    )
    with pytest.raises(MCPError) as refused:
        await call(elsewhere)
    assert "redirect, not followed" in refused.value.error.message
    assert len(elsewhere.requests) == 1  # the session's headers went nowhere else


async def test_a_404_to_the_session_is_the_sdk_s_session_terminated() -> None:
    with pytest.raises(MCPError) as refused:
        await call(Upstream(lambda r, b: httpx2.Response(404, text="gone")))
    assert (refused.value.error.code, refused.value.error.message) == (
        types.INVALID_REQUEST,
        "Session terminated",
    )


async def test_an_error_status_with_a_json_rpc_error_body_gives_that_error() -> None:
    error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32602, "message": "bad args"}}
    with pytest.raises(MCPError) as refused:
        await call(Upstream(lambda r, b: httpx2.Response(400, json=error)))
    assert (refused.value.error.code, refused.value.error.message) == (-32602, "bad args")


async def test_a_malformed_answer_on_the_stream_is_a_parse_error_not_a_lost_connection() -> None:
    def answer(request: httpx2.Request, body: Any) -> httpx2.Response:
        return sse(event({"jsonrpc": "2.0", "id": body["id"], "result": None}))

    with pytest.raises(MCPError) as refused:
        await call(Upstream(answer))
    assert refused.value.error.code == types.PARSE_ERROR


def the_call(upstream: Upstream) -> str:
    """The id of the call the leg posted (a resumed stream's answer carries it)."""
    [body] = [b for _, b in upstream.requests if b and b.get("method") == "tools/call"]
    return str(body["id"])


async def test_a_stream_ended_without_an_answer_after_an_event_id_is_resumed() -> None:
    def answer(request: httpx2.Request, body: Any) -> httpx2.Response:
        if request.method == "POST":  # the server closes the call's stream (polling)
            return sse("retry: 10\n\n", event("", event_id="e1"))
        assert request.headers[LAST_EVENT_ID] == "e1"
        return sse(event(result("resumed", the_call(upstream)), event_id="e2"))

    upstream = Upstream(answer)
    assert (await call(upstream)).content[0].text == "resumed"  # type: ignore[union-attr]
    assert [r.method for r, _ in upstream.requests] == ["POST", "GET"]


async def test_resumption_goes_on_after_normal_ends_and_a_failed_attempt() -> None:
    # A polling server: streams that end with nothing new, one 503, then the answer. Only
    # attempts that fail count toward giving up (two in a row), as the SDK counts.
    replies = iter(["empty", "503", "empty", "answer"])

    def answer(request: httpx2.Request, body: Any) -> httpx2.Response:
        if request.method == "POST":
            return sse("retry: 0\n\n", event("", event_id="e1"))  # 0: no busy loop either
        reply = next(replies)
        if reply == "503":
            return httpx2.Response(503)
        if reply == "empty":
            return sse(": nothing yet\n\n")
        return sse(event(result("at last", the_call(upstream))))

    upstream = Upstream(answer)
    assert (await call(upstream)).content[0].text == "at last"  # type: ignore[union-attr]
    assert [r.method for r, _ in upstream.requests] == ["POST", "GET", "GET", "GET", "GET"]


async def test_resumption_gives_up_after_two_failed_attempts_in_a_row() -> None:
    def answer(request: httpx2.Request, body: Any) -> httpx2.Response:
        if request.method == "POST":
            return sse("retry: 0\n\n", event("", event_id="e1"))
        return httpx2.Response(503)

    upstream = Upstream(answer)
    with pytest.raises(MCPError) as lost:
        await call(upstream)
    assert lost.value.error.code == types.CONNECTION_CLOSED
    assert [r.method for r, _ in upstream.requests] == ["POST", "GET", "GET"]


async def test_another_requests_answer_is_never_taken_for_the_call() -> None:
    # In a JSON body: a lost answer (the SDK's session drops it; the call is unknown),
    # never this call's success.
    with pytest.raises(MCPError) as lost:
        await call(Upstream(lambda r, b: httpx2.Response(200, json=result("not mine", "x-9"))))
    assert lost.value.error.code == types.PARSE_ERROR

    # On a stream: skipped, and the call's own answer read after it.
    def answer(request: httpx2.Request, body: Any) -> httpx2.Response:
        return sse(event(result("not mine", "x-9")), event(result("mine", body["id"])))

    assert (await call(Upstream(answer))).content[0].text == "mine"  # type: ignore[union-attr]


async def test_a_redirect_s_body_is_not_read_as_the_call_s_error() -> None:
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Session not found"}}
    with pytest.raises(MCPError) as refused:
        await call(Upstream(lambda r, b: httpx2.Response(303, json=body)))
    assert "redirect, not followed" in refused.value.error.message  # not a session refusal


async def test_a_stream_ended_without_an_answer_or_an_id_is_a_lost_connection() -> None:
    with pytest.raises(MCPError) as lost:
        await call(Upstream(lambda r, b: sse(event({"jsonrpc": "2.0", "method": "x/y"}))))
    assert lost.value.error.code == types.CONNECTION_CLOSED


async def test_the_upstream_s_requests_on_the_stream_get_the_sdk_s_answers() -> None:
    def answer(request: httpx2.Request, body: Any) -> httpx2.Response:
        if body.get("method") != "tools/call":
            return httpx2.Response(202)  # the leg's answers to the upstream's requests
        asks = [
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            {"jsonrpc": "2.0", "id": 2, "method": "elicitation/create", "params": {}},
            {"jsonrpc": "2.0", "id": 3, "method": "x/unknown"},
        ]
        return sse(*(event(a) for a in asks), event(result("ok", body["id"])))

    upstream = Upstream(answer)
    await call(upstream)
    replies = {m["id"]: m for m in upstream.posted() if "method" not in m}
    assert replies[1]["result"] == {}
    assert replies[2]["error"] == {"code": -32600, "message": "Elicitation not supported"}
    assert replies[3]["error"]["code"] == types.METHOD_NOT_FOUND


async def test_a_call_without_an_answer_in_time_times_out_and_the_upstream_is_told() -> None:
    async def never(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        if body.get("method") == "notifications/cancelled":
            cancels.append(body)
            return httpx2.Response(202)
        await anyio.sleep(30)
        raise AssertionError("not reached")

    cancels: list[dict[str, Any]] = []
    leg = HttpLeg(URL)
    leg._session_headers = dict(SESSION)
    async with httpx2.AsyncClient(transport=httpx2.MockTransport(never)) as client:
        leg.client = client
        with pytest.raises(MCPError) as late, anyio.fail_after(30):
            await leg.call("read_balance", {}, timeout=0.2)
    assert late.value.error.code == types.REQUEST_TIMEOUT
    assert [c["params"]["reason"] for c in cancels] == ["timed out after 0.2s"]


async def test_a_connection_that_fails_is_a_lost_connection() -> None:
    def refuse(request: httpx2.Request, body: Any) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    with pytest.raises(MCPError) as lost:
        await call(Upstream(refuse))
    assert lost.value.error.code == types.CONNECTION_CLOSED

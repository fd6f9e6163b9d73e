"""The gateway's ``tools/call`` to an upstream over streamable HTTP, past the SDK's client.

Why: through ``ClientSession`` and the SDK's HTTP transport a forwarded call is a request
model, a task of the transport, a dump, the answer validated as a message, routed back
through memory streams and validated again as a result: about 1.4 ms of the gateway's
CPU per call, as much as the whole call costs a client straight to the upstream. Here a
call is one POST on the session the SDK opened (the same ``httpx2`` client, so the same
headers, timeouts, no proxy, and the same 404 watch that tells a restarted upstream),
its answer read from the JSON body or the SSE stream, and the same outcomes as
``ClientSession.send_request``:

- a result, validated as a ``CallToolResult`` (``ValidationError`` when it is not one);
- ``MCPError`` for the upstream's JSON-RPC error; for an HTTP error status the error in
  its body or, as the SDK words it, ``Session terminated`` for a 404 to a session's id
  (``SESSION_REFUSALS``), ``Server returned an error response`` for another one;
- ``MCPError(CONNECTION_CLOSED)`` when the connection fails or the stream ends without
  the answer (a lost connection, as the SDK reports it: the call may have happened);
- ``MCPError(REQUEST_TIMEOUT)`` after ``timeout`` seconds, and, as when the caller is
  cancelled, a ``notifications/cancelled`` to the upstream (bounded, best effort).

As the SDK's transport does: a redirect is followed only within the URL's origin and
keeping the method (307/308 for a POST; anything else is answered as an error, not sent
elsewhere with the session's headers); on the SSE stream only ``message`` events count
(an event of another type, a heartbeat say, is skipped, and an empty one only primes
the stream's resumption); the call's answer is the one with its id (an error with none,
on the call's own POST, too: a request refused before its id was read); another
request's answer is not taken for it (read on, on a stream; a lost answer, in a JSON
body). A stream that ends or breaks without the answer after an event with an id is
resumed with a GET carrying ``Last-Event-ID``, after the server's ``retry`` (or a
second), again after each normal end, until two attempts in a row fail (as the SDK
counts) or the call's time is up; one that ends before any id is a lost connection.

The session's id and protocol version are those the SDK's own requests carry (read off
them by a request hook of the client, ``remember``): the gateway's calls go on the
session the SDK opened and closes. Each call's id is ``continuum-gateway:http-<n>``, never
one of the session's own. What the upstream sends on a call's stream besides the answer
is not routed to the session: notifications are dropped (as the gateway's session only
logged them), ``ping`` is answered, and the upstream's other requests get the answers the
SDK's client session gives when no handler is set (sampling, elicitation and roots:
``INVALID_REQUEST``, "... not supported"; anything else ``METHOD_NOT_FOUND``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import anyio
import httpx2
from mcp import types
from mcp.shared.exceptions import MCPError

from continuum.log import get_logger

__all__ = ["HttpLeg"]

log = get_logger("continuum.gateway")

ID_PREFIX = "continuum-gateway:http-"
SESSION_HEADER = "mcp-session-id"
VERSION_HEADER = "mcp-protocol-version"
LAST_EVENT_ID = "last-event-id"
MAX_EVENT_BYTES = 1 << 20  # one SSE event at most (as the SDK's client bounds them)
CANCEL_SECONDS = 2.0  # the courtesy cancel's bound
MAX_RESUMES = 2  # resumptions in a row that fail (the SDK's limit)
DEFAULT_RETRY_MS = 1000  # the wait before a resumption when the server named none
MIN_RETRY_MS = 10  # never a busy loop, whatever the server's retry says
_UNSUPPORTED = {  # what the SDK's client session answers when no handler is set
    "sampling/createMessage": "Sampling not supported",
    "elicitation/create": "Elicitation not supported",
    "roots/list": "List roots not supported",
}


def _closed(why: str) -> MCPError:
    return MCPError(types.CONNECTION_CLOSED, why)


class HttpLeg:
    """``tools/call`` requests on the session the SDK opened at ``url``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client: httpx2.AsyncClient | None = None  # set once the client exists
        self._session_headers: dict[str, str] = {}
        self._calls = 0

    async def remember(self, request: httpx2.Request) -> None:
        """The client's request hook: the session's id and protocol version, as the SDK's
        own requests carry them after its handshake."""
        if request.method == "DELETE":
            return  # the session's end: its headers are not a new session's
        found = {
            h: request.headers[h] for h in (SESSION_HEADER, VERSION_HEADER) if h in request.headers
        }
        if SESSION_HEADER in found:
            self._session_headers = found

    @property
    def ready(self) -> bool:
        """The SDK's handshake went out with a session's id (a server that keeps no
        sessions leaves the gateway on the SDK's path)."""
        return self.client is not None and SESSION_HEADER in self._session_headers

    async def call(
        self, name: str, arguments: dict[str, Any], timeout: float
    ) -> types.CallToolResult:
        client = self.client
        assert client is not None
        self._calls += 1
        request_id = f"{ID_PREFIX}{self._calls}"
        body = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
        sent = False  # as the SDK: a request begun may have reached the upstream
        try:
            with anyio.fail_after(timeout):
                request = client.build_request(
                    "POST", self.url, content=json.dumps(body).encode(), headers=self._headers()
                )
                sent = True
                answer = await self._answer(client, request, request_id)
        except TimeoutError:
            await self._cancel(client, request_id, f"timed out after {timeout}s")
            raise MCPError(types.REQUEST_TIMEOUT, "Request 'tools/call' timed out") from None
        except anyio.get_cancelled_exc_class():
            if sent:
                with anyio.CancelScope(shield=True):
                    await self._cancel(client, request_id, "caller cancelled")
            raise
        except httpx2.HTTPError as e:  # connect, read, protocol: the connection was lost
            raise _closed(f"Connection closed ({type(e).__name__}: {e})"[:500]) from e
        if "error" in answer:
            error = types.ErrorData.model_validate(answer["error"])
            raise MCPError(error.code, error.message, error.data)
        return types.CallToolResult.model_validate(answer["result"], by_name=False)

    def _headers(self, **extra: str) -> dict[str, str]:
        return {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            **self._session_headers,
            **extra,
        }

    async def _answer(
        self, client: httpx2.AsyncClient, request: httpx2.Request, request_id: str
    ) -> Mapping[str, Any]:
        """The answer to ``request`` (the call's POST): from its JSON body, or from its
        SSE stream, resumed when it ends or breaks after an event with an id."""
        response = await _send_within_origin(client, request)
        stream = _Stream(request_id)
        try:
            kind = response.headers.get("content-type", "").lower()
            if response.status_code >= 300:
                return await self._refusal(response, kind)
            if response.status_code == 202:
                raise MCPError(types.INVALID_REQUEST, "server answered a request with 202 Accepted")
            if kind.startswith("application/json"):
                answer = self._parsed(await response.aread())
                if _is_answer(answer) and stream.ours(answer):
                    return answer
                # Another request's answer (the SDK's session drops it, and the call then
                # times out), or not an answer: either way nothing says what became of it.
                raise MCPError(types.PARSE_ERROR, "the upstream's JSON body is not this answer")
            if not kind.startswith("text/event-stream"):
                raise MCPError(types.INVALID_REQUEST, f"Unexpected content type: {kind}"[:200])
            found = await self._events(client, response, stream)
        finally:
            await response.aclose()
        failures = 0  # resumptions in a row that failed (a stream ended normally resets it)
        while found is None and stream.last_id is not None and failures < MAX_RESUMES:
            wait = DEFAULT_RETRY_MS if stream.retry_ms is None else stream.retry_ms
            await anyio.sleep(max(wait, MIN_RETRY_MS) / 1000)
            resumed = client.build_request(
                "GET",
                self.url,
                headers=self._headers(
                    **{LAST_EVENT_ID: stream.last_id, "cache-control": "no-store"}
                ),
            )
            stream.resumed = True
            try:
                response = await _send_within_origin(client, resumed)
            except httpx2.TransportError as e:
                failures += 1
                log.info("gateway.upstream_resume_failed", error=f"{type(e).__name__}: {e}"[:200])
                continue
            try:
                kind = response.headers.get("content-type", "").lower()
                if response.status_code >= 300 or not kind.startswith("text/event-stream"):
                    failures += 1
                    continue
                stream.broke = False
                found = await self._events(client, response, stream)
                failures = failures + 1 if stream.broke else 0
            finally:
                await response.aclose()
        if found is None:
            raise _closed("SSE stream ended without a response")
        return found

    async def _events(
        self, client: httpx2.AsyncClient, response: httpx2.Response, stream: _Stream
    ) -> Mapping[str, Any] | None:
        """Read ``response``'s SSE events up to the call's answer (None: none came: the
        stream ended, or broke, ``stream.broke``; the caller resumes it when an event had
        an id). An event the parser refuses (``SSEError``: too large, malformed) is a lost
        connection, as the SDK resolves it."""
        try:
            return await self._read_events(client, response, stream)
        except httpx2.SSEError:
            raise
        except (httpx2.TransportError, httpx2.DecodingError, httpx2.StreamError) as e:
            if stream.last_id is None:  # nothing to resume from: the connection was lost
                raise _closed(f"Connection closed ({type(e).__name__}: {e})"[:500]) from e
            log.info("gateway.upstream_stream_broke", error=f"{type(e).__name__}: {e}"[:200])
            stream.broke = True
            return None

    async def _read_events(
        self, client: httpx2.AsyncClient, response: httpx2.Response, stream: _Stream
    ) -> Mapping[str, Any] | None:
        async for event in httpx2.EventSource(response, max_event_size=MAX_EVENT_BYTES):
            if event.id:
                stream.last_id = event.id
            if event.retry is not None:
                stream.retry_ms = event.retry
            if event.event != "message" or not event.data:
                continue  # another kind of event, or one that only primes resumption
            message = self._parsed(event.data.encode())
            if "method" not in message:  # an answer
                if not _is_answer(message):
                    raise MCPError(types.PARSE_ERROR, "the upstream's answer is not JSON-RPC 2.0")
                if stream.ours(message):
                    return message
                # Another request's answer (a server that fell back to another stream):
                # not this call's; read on.
                log.warning("gateway.upstream_stray_answer", id=str(message.get("id"))[:100])
                continue
            if "id" in message:  # the upstream asks something
                await self._reply(client, message)
        return None

    async def _refusal(self, response: httpx2.Response, kind: str) -> Mapping[str, Any]:
        """An answer to a POST that was not taken: a redirect not followed (the request
        did not go there), or an error status, with the JSON-RPC error of its body when
        it holds one (as the SDK reads it), else the SDK's words for the status."""
        if response.status_code < 400:
            where = f"the upstream answered {response.status_code}: a redirect, not followed"
            return {"error": {"code": types.INTERNAL_ERROR, "message": where}}
        if kind.startswith("application/json"):
            try:
                message = json.loads(await response.aread())
            except ValueError:
                message = None
            error = message.get("error") if isinstance(message, dict) else None
            if (
                isinstance(error, dict)
                and type(error.get("code")) is int
                and isinstance(error.get("message"), str)
            ):
                return {"error": error}
        if response.status_code == 404 and SESSION_HEADER in response.request.headers:
            return {"error": {"code": types.INVALID_REQUEST, "message": "Session terminated"}}
        return {
            "error": {"code": types.INTERNAL_ERROR, "message": "Server returned an error response"}
        }

    @staticmethod
    def _parsed(data: bytes) -> dict[str, Any]:
        try:
            message = json.loads(data)
        except ValueError as e:
            raise MCPError(types.PARSE_ERROR, f"the upstream sent invalid JSON: {e}"[:200]) from e
        if not isinstance(message, dict):
            raise MCPError(types.PARSE_ERROR, "the upstream sent JSON that is not an object")
        return message

    async def _reply(self, client: httpx2.AsyncClient, request: Mapping[str, Any]) -> None:
        """Answer a request the upstream sent on a call's stream: ``ping``, or a refusal."""
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"]}
        method = request.get("method")
        if method == "ping":
            answer["result"] = {}
        else:
            log.warning("gateway.upstream_request_refused", method=str(method)[:100])
            unsupported = _UNSUPPORTED.get(method) if isinstance(method, str) else None
            answer["error"] = (
                {"code": types.INVALID_REQUEST, "message": unsupported}
                if unsupported is not None
                else {"code": types.METHOD_NOT_FOUND, "message": "Method not found"}
            )
        await self._post(client, answer)

    async def _cancel(self, client: httpx2.AsyncClient, request_id: str, reason: str) -> None:
        params = {"requestId": request_id, "reason": reason}
        await self._post(
            client, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}
        )

    async def _post(self, client: httpx2.AsyncClient, message: Mapping[str, Any]) -> None:
        """A message that needs no answer (best effort, bounded: a client already closed,
        or any failure, is logged, never raised over the call's own outcome)."""
        with anyio.move_on_after(CANCEL_SECONDS):
            try:
                request = client.build_request(
                    "POST", self.url, content=json.dumps(message).encode(), headers=self._headers()
                )
                reply = await _send_within_origin(client, request)
                await reply.aclose()
            except Exception as e:
                log.info("gateway.upstream_post_failed", error=f"{type(e).__name__}: {e}"[:200])


class _Stream:
    """Where a call's answer stream got to: its last event's id, the server's retry,
    whether it broke, whether it was resumed."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.last_id: str | None = None
        self.retry_ms: int | None = None
        self.broke = False
        self.resumed = False

    def ours(self, answer: Mapping[str, Any]) -> bool:
        """Whether ``answer`` is this call's: its id, or (an error only, on the call's own
        POST) no id, for a request the server refused before it read its id."""
        found = answer.get("id")
        if found == self.request_id:
            return True
        return found is None and "error" in answer and not self.resumed


def _same_origin(sent: httpx2.URL, location: httpx2.URL) -> bool:
    """The same scheme, host and port, or the https of the same host on default ports."""
    if (sent.scheme, sent.host, sent.port) == (location.scheme, location.host, location.port):
        return True
    return (
        sent.host == location.host
        and (sent.scheme, location.scheme) == ("http", "https")
        and sent.port is None
        and location.port is None
    )


async def _send_within_origin(
    client: httpx2.AsyncClient, request: httpx2.Request
) -> httpx2.Response:
    """Send ``request`` (streamed), following a redirect only where the SDK's transport
    follows one: within the origin, keeping the method, no new credentials in the URL,
    at most ``client.max_redirects`` times. Otherwise the redirect itself is returned."""
    for _ in range(client.max_redirects):
        response = await client.send(request, stream=True, follow_redirects=False)
        follow = response.next_request
        if (
            follow is None
            or follow.method != request.method
            or (follow.url.userinfo and follow.url.userinfo != request.url.userinfo)
            or not _same_origin(request.url, follow.url)
        ):
            return response
        try:
            await response.aread()  # drained: the connection goes back to the pool
        finally:
            await response.aclose()
        request = follow
    return await client.send(request, stream=True, follow_redirects=False)


def _is_answer(message: Mapping[str, Any]) -> bool:
    """Whether ``message`` is a JSON-RPC 2.0 answer: a result object, or an error with a
    whole-number code."""
    if "method" in message:
        return False
    if message.get("jsonrpc") != "2.0" or ("result" in message) == ("error" in message):
        return False
    if "result" in message:
        return isinstance(message["result"], dict)
    error = message["error"]
    return isinstance(error, dict) and type(error.get("code")) is int

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

The session's id and protocol version are those the SDK's own requests carry (read off
them by a request hook of the client, ``remember``): the gateway's calls go on the
session the SDK opened and closes. Each call's id is ``continuum-gateway:http-<n>``, never
one of the session's own. What the upstream sends on a call's stream besides the answer
is not routed to the session: notifications are dropped (as the gateway's session only
logged them), ``ping`` is answered, and any other request of the upstream's (sampling,
elicitation, roots) is refused with ``METHOD_NOT_FOUND``, which the gateway's session
never handled either. A stream that breaks is not resumed (the SDK would try with the
last event's id): the call is then a lost connection, ``unknown`` if registered.
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
MAX_EVENT_BYTES = 1 << 20  # one SSE event at most (as the SDK's client bounds them)
CANCEL_SECONDS = 2.0  # the courtesy cancel's bound


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
        headers = {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            **self._session_headers,
        }
        sent = False
        try:
            with anyio.fail_after(timeout):
                request = client.build_request(
                    "POST", self.url, content=json.dumps(body).encode(), headers=headers
                )
                sent = True
                response = await client.send(request, stream=True)
                try:
                    answer = await self._answer(client, response, request_id)
                finally:
                    await response.aclose()
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

    async def _answer(
        self, client: httpx2.AsyncClient, response: httpx2.Response, request_id: str
    ) -> Mapping[str, Any]:
        kind = response.headers.get("content-type", "").lower()
        if response.status_code >= 300:
            return await self._refusal(response, kind)
        if kind.startswith("application/json"):
            answer = self._parsed(await response.aread())
            if _answers(answer, request_id):
                return answer
            raise MCPError(types.PARSE_ERROR, "the upstream's JSON body is not the call's answer")
        if not kind.startswith("text/event-stream"):
            raise MCPError(types.INVALID_REQUEST, f"Unexpected content type: {kind}"[:200])
        async for event in httpx2.EventSource(response, max_event_size=MAX_EVENT_BYTES):
            if not event.data:
                continue
            message = self._parsed(event.data.encode())
            if _answers(message, request_id):
                return message
            if "method" in message and "id" in message:  # the upstream asks something
                await self._reply(client, message)
        raise _closed("SSE stream ended without a response")

    async def _refusal(self, response: httpx2.Response, kind: str) -> Mapping[str, Any]:
        if kind.startswith("application/json"):
            try:
                message = json.loads(await response.aread())
            except ValueError:
                message = None
            if isinstance(message, dict) and isinstance(message.get("error"), dict):
                return {"error": message["error"]}
        if response.status_code == 404 and SESSION_HEADER in response.request.headers:
            return {"error": {"code": types.INVALID_REQUEST, "message": "Session terminated"}}
        message = "Server returned an error response"
        if response.status_code < 400:  # a redirect, not followed (the headers stay here)
            message = f"the upstream answered {response.status_code}: a redirect, not followed"
        return {"error": {"code": types.INTERNAL_ERROR, "message": message}}

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
        if request.get("method") == "ping":
            answer["result"] = {}
        else:
            log.warning("gateway.upstream_request_refused", method=str(request.get("method"))[:100])
            answer["error"] = {"code": types.METHOD_NOT_FOUND, "message": "Method not found"}
        await self._post(client, answer)

    async def _cancel(self, client: httpx2.AsyncClient, request_id: str, reason: str) -> None:
        params = {"requestId": request_id, "reason": reason}
        await self._post(
            client, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}
        )

    async def _post(self, client: httpx2.AsyncClient, message: Mapping[str, Any]) -> None:
        """A message that needs no answer (best effort, bounded)."""
        headers = {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            **self._session_headers,
        }
        with anyio.move_on_after(CANCEL_SECONDS):
            try:
                reply = await client.post(
                    self.url, content=json.dumps(message).encode(), headers=headers
                )
                await reply.aclose()
            except httpx2.HTTPError as e:
                log.info("gateway.upstream_post_failed", error=f"{type(e).__name__}: {e}"[:200])


def _answers(message: Mapping[str, Any], request_id: str) -> bool:
    """Whether ``message`` is a JSON-RPC answer (a result object or an error) to
    ``request_id``."""
    if "method" in message or message.get("id") != request_id:
        return False
    if message.get("jsonrpc") != "2.0" or ("result" in message) == ("error" in message):
        return False
    if "result" in message:
        return isinstance(message["result"], dict)
    error = message["error"]
    return isinstance(error, dict) and type(error.get("code")) is int

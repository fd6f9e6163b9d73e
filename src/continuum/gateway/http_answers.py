"""What the HTTP gateway reads and answers besides forwarding: its own refusals
(``GatewayRefusal``: status, code, hint, one JSON document), the request body within its
bound, the headers forwarded and returned (hop-by-hop ones dropped), what is kept of a
completed effect's answer and its replay from the ledger, and the answer when an upstream
cannot be reached, times out, goes away or does not speak HTTP.

Imports the gateway's rules, the ledger's ``InterceptResult`` and the leaves.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

import httpx2
from starlette.types import Message, Receive, Send

from continuum.gateway.http_rules import Upstream
from continuum.ledger.gate import InterceptResult
from continuum.log import get_logger

_log = get_logger("continuum.gateway.http")

MAX_REQUEST_BYTES = 16 * 1024 * 1024  # a larger request body is refused (413)
STORED_BODY_BYTES = 64 * 1024  # a larger 2xx body is not kept: a replay answers without it
STORED_HEADERS = ("content-type", "content-encoding", "location", "etag")
# Hop-by-hop headers (RFC 9110 §7.6.1) and those the gateway sets itself.
HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
    }
)
HOP_STR = frozenset(h.decode() for h in HOP)
# An answer keeps its Content-Length (its body is passed on byte for byte, still encoded)
# and loses its Date (the gateway's server dates the answer it sends).
RESPONSE_HOP = (HOP - {b"content-length"}) | {b"date"}


class StreamCut(Exception):
    """The upstream's answer broke off after the gateway began passing it on: raised so the
    server drops the connection and the client sees a cut answer, not a short one."""


class GatewayRefusal(Exception):
    """An answer the gateway gives itself: a status, a code and what to do."""

    def __init__(self, http_status: int, code: str, message: str, hint: str, **fields: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.hint, self.fields = (
            http_status,
            code,
            message,
            hint,
            fields,
        )
        self.headers: list[tuple[bytes, bytes]] = []

    def body(self) -> dict[str, Any]:
        return {
            "ok": False,
            "error": {"code": self.code, "message": self.message, "hint": self.hint, **self.fields},
        }


# -- reading requests, writing answers --------------------------------------------------


async def read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            raise GatewayRefusal(400, "gateway.client_gone", "the client went away", "")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_REQUEST_BYTES:
            raise GatewayRefusal(
                413,
                "gateway.request_too_large",
                f"the request body is over {MAX_REQUEST_BYTES} bytes",
                "send a smaller body",
            )
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> str | None:
    for k, v in headers:
        if k.lower() == name:
            return v.decode("latin-1").strip() or None
    return None


def json_body(body: bytes) -> Any:
    if not body:
        return None
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None


def forwarded(headers: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in headers if k.lower() not in HOP]


def returned(response: httpx2.Response) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in response.headers.raw if k.lower() not in RESPONSE_HOP]


def stored_response(status: int, response: httpx2.Response, content: bytes) -> dict[str, Any]:
    stored: dict[str, Any] = {
        "status": status,
        "headers": {h: response.headers[h] for h in STORED_HEADERS if h in response.headers},
        "body_bytes": len(content),
    }
    if len(content) > STORED_BODY_BYTES:
        stored["body_omitted"] = True
        return stored
    try:
        stored["body"] = content.decode("utf-8")
    except UnicodeDecodeError:
        stored["body_base64"] = base64.b64encode(content).decode()
    return stored


async def replay(send: Send, result: InterceptResult, marks: list[tuple[bytes, bytes]]) -> None:
    """Answer a repeat of a completed effect from what the ledger kept of its answer."""
    stored = result.previous_result if isinstance(result.previous_result, dict) else {}
    if not isinstance(stored.get("status"), int):
        # Settled as done by a person (`continuum reconcile --occurred`): no answer was kept.
        doc = {
            "ok": True,
            "replayed": True,
            "action_key": result.action_key,
            "external_id": result.external_id,
            "note": "recorded as done (reconciled); the upstream's answer was not kept",
        }
        stored = {"status": 200, "headers": {"content-type": "application/json"}}
        stored["body"] = json.dumps(doc)
    status = stored["status"]
    if "body_base64" in stored:
        body = base64.b64decode(stored["body_base64"])
    else:
        body = str(stored.get("body", "")).encode("utf-8")
    headers = [
        (str(k).encode("latin-1", "replace"), str(v).encode("latin-1", "replace"))
        for k, v in (stored.get("headers") or {}).items()
        if str(k).lower() not in HOP_STR
    ]
    headers += [*marks, (b"continuum-replayed", b"true"), (b"content-length", b"%d" % len(body))]
    if stored.get("body_omitted"):
        headers.append((b"continuum-body-omitted", b"%d" % int(stored.get("body_bytes", 0))))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def upstream_error(upstream: Upstream, e: httpx2.HTTPError, action: str | None) -> GatewayRefusal:
    not_sent = isinstance(e, httpx2.ConnectError | httpx2.ConnectTimeout | httpx2.PoolTimeout)
    if isinstance(e, httpx2.TimeoutException) and not not_sent:
        status, code = 504, "gateway.upstream_timeout"
        what = f"upstream {upstream.name} did not answer within {upstream.timeout:g} s"
    elif not_sent:
        status, code = 502, "gateway.upstream_unreachable"
        what = f"upstream {upstream.name} could not be reached ({type(e).__name__})"
    elif isinstance(e, httpx2.RemoteProtocolError) and "disconnected" not in str(e).lower():
        status, code = 502, "gateway.bad_upstream_response"
        what = f"upstream {upstream.name} sent a reply that is not valid HTTP ({str(e)[:200]})"
    else:
        status, code = 502, "gateway.upstream_lost"
        what = f"the connection to upstream {upstream.name} was lost ({type(e).__name__})"
    _log.warning(code, upstream=upstream.name, error=type(e).__name__, action=action)
    if action is None:
        hint = "retry later" if not_sent else "check the upstream"
        recorded = None
    elif not_sent:
        hint, recorded = (
            "the request was not sent (recorded as failed): it may be sent again",
            ("failed"),
        )
    else:
        hint, recorded = (
            "the effect may or may not have happened, so it is recorded as unknown: do not "
            "send it again; a person checks the upstream system, then runs `continuum "
            "reconcile` for it",
            "unknown",
        )
    fields: dict[str, Any] = {"upstream": upstream.name}
    if action is not None:
        fields |= {"action_key": action, "recorded": recorded}
    refusal = GatewayRefusal(status, code, what, hint, **fields)
    if action is not None:
        refusal.headers.append((b"continuum-action", action.encode("utf-8", "replace")))
    return refusal

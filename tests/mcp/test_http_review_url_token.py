"""A bearer token put in the URL (path or query string) is refused and never logged
(contract §9: secrets never appear in logs; ``roles.authenticate``, ``http.BearerAuth``).

A real ``continuum-mcp --transport streamable-http`` subprocess at ``--log-level debug``
(every log line the SDK and uvicorn would write), its stderr captured whole. The token
goes into the query string, into the path (``/mcp/TOKEN``, ``/TOKEN``, percent-encoded),
with and without a valid ``Authorization`` header, and into a request line uvicorn
itself rejects. Every request is refused; no token (configured or not) appears on
stderr; the store is never created.
Negative control: text a peer controls that the SDK does log (a bad ``Host`` header)
is found in the same captured stderr, so the absence above is not a capture gap.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from urllib.parse import quote, urlsplit

import anyio
import pytest

from continuum.mcp.http import AUTH_REFUSED
from tests.mcp.conftest import BOUND
from tests.mcp.http_site import MCP_HEADERS, TOKENS, HttpSite, http_client, initialize_body

pytestmark = pytest.mark.anyio

SECRET = TOKENS["admin"]
UNCONFIGURED = "an-unconfigured-secret-0123456789"  # token-shaped, on no line of the file


@pytest.fixture
def site(tmp_path: Path) -> HttpSite:
    return HttpSite.make(tmp_path)


def raw_request(url: str, request_line_target: str) -> bytes:
    """A request uvicorn's parser rejects (a header line without a colon), sent raw."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    with socket.create_connection((parts.hostname, parts.port), timeout=BOUND) as sock:
        sock.sendall(
            f"GET {request_line_target} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "this line is no header\r\n\r\n".encode()
        )
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


async def test_a_token_in_the_url_is_refused_and_never_logged(site: HttpSite) -> None:
    async with site.serve("--log-level", "debug") as server:
        base = server.url.removesuffix("/mcp")
        cases = [  # (bearer, url, statuses a refusal may have)
            (None, f"{server.url}?token={SECRET}", {400}),
            (SECRET, f"{server.url}?x=1&y={SECRET}", {400}),
            (None, f"{server.url}/{SECRET}", {400}),
            (SECRET, f"{server.url}/{SECRET}", {400}),
            (SECRET, f"{base}/{SECRET}", {400}),
            (SECRET, f"{server.url}/{quote(SECRET, safe='')}".replace("-", "%2D"), {400}),
            (None, f"{base}/{SECRET}?token={SECRET}", {400}),
            (None, f"{server.url}/{UNCONFIGURED}", {401}),
            (SECRET, f"{server.url}/{UNCONFIGURED}", {404}),
            (None, f"{base}/{UNCONFIGURED}?auth={UNCONFIGURED}", {400}),
        ]
        answers = []
        for bearer, url, statuses in cases:
            async with http_client(bearer) as hc:
                with anyio.fail_after(BOUND):
                    for answer in (
                        await hc.post(url, json=initialize_body(), headers=MCP_HEADERS),
                        await hc.get(url, headers={"Accept": "text/event-stream"}),
                    ):
                        assert answer.status_code in statuses, (url, answer.status_code)
                        answers.append(answer)
        with anyio.fail_after(BOUND):
            rejected = await anyio.to_thread.run_sync(raw_request, server.url, f"/mcp/{SECRET}")
        # Negative control: a peer's text the SDK does log reaches this stderr.
        async with http_client(SECRET) as hc:
            with anyio.fail_after(BOUND):
                bad_host = await hc.post(
                    server.url,
                    json=initialize_body(),
                    headers={**MCP_HEADERS, "Host": "marker-host-7f3a:1"},
                )
    assert rejected.startswith(b"HTTP/1.1 400"), rejected[:80]
    assert bad_host.status_code in (400, 421), bad_host.status_code
    for answer in answers:
        if answer.status_code != 404:  # our refusal: a JSON-RPC error saying where it goes
            error = answer.json()["error"]
            assert error["code"] == AUTH_REFUSED, error
        assert SECRET not in answer.text and UNCONFIGURED not in answer.text
    stderr = server.stderr()
    assert "marker-host-7f3a" in stderr  # the capture holds what is logged
    assert SECRET not in stderr and UNCONFIGURED not in stderr
    assert not any(token in stderr for token in TOKENS.values())
    refused = [json.loads(row) for row in stderr.splitlines() if '"mcp.http_refused"' in row]
    assert len(refused) == 2 * 9  # every refusal but the 404s is logged, with a safe path
    assert {row["path"] for row in refused} <= {"/mcp", "(another path, not logged)"}
    assert {row["code"] for row in refused} >= {"token_in_url", "token_missing"}
    assert not site.db.exists()

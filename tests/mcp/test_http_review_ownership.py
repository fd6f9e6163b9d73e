"""Over streamable HTTP an action is owned by the MCP session (or, per request, by the
token and the client's name) that intercepted it, not by the server process
(contract §6: only the owner may settle a started action while it is alive; contract
§9: the HTTP transport; ``continuum.mcp.owners``).

A real ``continuum-mcp --transport streamable-http`` subprocess on one store (a SQLite
file, and a real PostgreSQL database), two official SDK clients holding the same
``submit`` token:

- session B's complete, fail (uncertain and certain) of session A's in-flight action are
  refused with ``ledger.owner_alive`` (the code two processes get), and so is an
  ``approve`` token's reconcile; B's intercept of the same key answers ``in_progress``;
  the store is unchanged;
- negative control: the same refusal check, pointed at A's own complete, fails (A's
  complete works);
- per-request (2026-07-28) calls: same token and same client name settle; another name,
  or a session, may not;
- a session that ends (closed by its client, or open when the server stops) leaves its
  in-flight action ``unknown`` (as a dead process would), so an agent that reconnects is
  told to reconcile, not "in progress" forever.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from continuum.mcp.owners import SESSION_ENDED
from continuum.store import open_store
from tests.mcp.conftest import BOUND, result_text, structured
from tests.mcp.http_site import (
    MCP_HEADERS,
    TOKENS,
    HttpSite,
    http_client,
    initialize_body,
    official_client,
)

pytestmark = pytest.mark.anyio

RUN = "own-run"


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "owned.db")
        return
    from tests.contract.pg_support import fresh_database

    with fresh_database("continuum_http_owner") as url:
        yield url


@pytest.fixture
def site(tmp_path: Path) -> HttpSite:
    return HttpSite.make(tmp_path)


def snapshot(url: str) -> list[dict[str, Any]]:
    """The run's events and its actions' states (leases left out: a renewal may move them)."""
    store = open_store(url, create=False)
    try:
        events = [e.model_dump(mode="json") for e in store.read_events(RUN)]
        actions = [(a.action_id, a.record) for a in store.list_actions(RUN)]
        return [*events, {"actions": repr(actions)}]
    finally:
        store.close()


def intercept_args(key: str = "inv-1") -> dict[str, Any]:
    return {"run_id": RUN, "action_type": "send_invoice", "key": key, "arguments": {"n": 1}}


async def start_run(client: Client) -> None:
    structured(
        await client.call_tool(
            "continuum_record_progress", {"run_id": RUN, "goal": "send invoices", "total": 2}
        )
    )


async def assert_refused_unchanged(
    client: Client, url: str, tool: str, arguments: dict[str, Any]
) -> str:
    """``tool`` is refused as ``ledger.owner_alive`` and the store is unchanged."""
    before = snapshot(url)
    result = await client.call_tool(tool, arguments)
    text = result_text(result)
    assert result.is_error, f"{tool} was allowed: {text}"
    assert "[ledger.owner_alive]" in text, text
    assert snapshot(url) == before
    return text


def settling_calls(key: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("continuum_complete_action", {"run_id": RUN, "action_key": key, "external_id": "b"}),
        ("continuum_fail_action", {"run_id": RUN, "action_key": key, "error": "b says so"}),
        ("continuum_fail_action", {"run_id": RUN, "action_key": key, "certain": True}),
    ]


async def test_another_session_cannot_settle_an_action_in_flight_and_its_owner_can(
    site: HttpSite, store_url: str
) -> None:
    """contract §6 (owner), §9: session B, same submit token, is refused; A completes."""
    async with (
        site.serve("--db", store_url) as server,
        official_client(server.url, TOKENS["submit"], "legacy", name="agent") as a,
        official_client(server.url, TOKENS["submit"], "legacy", name="agent") as b,
        official_client(server.url, TOKENS["approve"], "legacy", name="person") as p,
    ):
        with anyio.fail_after(BOUND):
            await start_run(a)
            started = structured(await a.call_tool("continuum_intercept_action", intercept_args()))
            assert started["proceed"] is True
            key = started["action_key"]
            texts = [
                await assert_refused_unchanged(b, store_url, tool, args)
                for tool, args in settling_calls(key)
            ]
            texts.append(
                await assert_refused_unchanged(
                    p,
                    store_url,
                    "continuum_reconcile_action",
                    {"run_id": RUN, "action_key": key, "occurred": False},
                )
            )
            before = snapshot(store_url)
            again = structured(await b.call_tool("continuum_intercept_action", intercept_args()))
            assert (again["proceed"], again["status"]) == (False, "in_progress")
            assert snapshot(store_url) == before
            # Negative control: the refusal check fails on the owner's own call.
            with pytest.raises(AssertionError, match="was allowed"):
                await assert_refused_unchanged(
                    a,
                    store_url,
                    "continuum_complete_action",
                    {"run_id": RUN, "action_key": key, "external_id": "tx-1"},
                )
            listed = structured(await b.call_tool("continuum_list_actions", {"run_id": RUN}))
    (action,) = listed["actions"]
    assert (action["status"], action["external_id"]) == ("completed", "tx-1")
    # The refusal names the owner by its token line and a random session tag: never a
    # token or the session id.
    for text in texts:
        assert "token-file-line-" in text and "/session-" in text, text
        assert not any(token in text for token in TOKENS.values())
    assert not any(token in server.stderr() for token in TOKENS.values())


async def test_per_request_calls_are_owned_by_token_and_client_name(
    site: HttpSite, tmp_path: Path
) -> None:
    """contract §9, 2026-07-28 era: no session, so the owner is the token line plus the
    declared client name; another name or a session is another owner."""
    url = str(tmp_path / "stateless.db")
    async with site.serve("--db", url) as server:
        async with (
            official_client(server.url, TOKENS["submit"], "auto", name="agent-a") as a,
            official_client(server.url, TOKENS["submit"], "auto", name="agent-b") as b,
            official_client(server.url, TOKENS["submit"], "legacy", name="agent-a") as s,
        ):
            with anyio.fail_after(BOUND):
                await start_run(a)
                key = structured(await a.call_tool("continuum_intercept_action", intercept_args()))[
                    "action_key"
                ]
                for tool, args in settling_calls(key):
                    await assert_refused_unchanged(b, url, tool, args)
                    await assert_refused_unchanged(s, url, tool, args)  # a session: not it
                session_key = structured(
                    await s.call_tool("continuum_intercept_action", intercept_args("inv-2"))
                )["action_key"]
                for tool, args in settling_calls(session_key):  # nor the reverse
                    await assert_refused_unchanged(a, url, tool, args)
        # A later request with the same token and name (another client object) is the owner.
        async with official_client(server.url, TOKENS["submit"], "auto", name="agent-a") as a2:
            with anyio.fail_after(BOUND):
                done = structured(
                    await a2.call_tool(
                        "continuum_complete_action",
                        {"run_id": RUN, "action_key": key, "external_id": "tx-1"},
                    )
                )
    assert done["status"] == "completed"


async def test_an_ended_session_leaves_its_action_unknown_for_the_next_agent(
    site: HttpSite, tmp_path: Path
) -> None:
    """contract §6: an interrupted action (its owner is gone) follows the replay contract
    (``never``: unknown, reconcile); a session that ended is a gone owner."""
    url = str(tmp_path / "ended.db")
    async with site.serve("--db", url) as server:
        async with official_client(server.url, TOKENS["submit"], "legacy", name="agent") as a:
            with anyio.fail_after(BOUND):
                await start_run(a)
                key = structured(await a.call_tool("continuum_intercept_action", intercept_args()))[
                    "action_key"
                ]
        # Leaving the client ends its session (DELETE); the server marks the action.
        async with official_client(server.url, TOKENS["submit"], "legacy", name="agent") as b:
            with anyio.fail_after(BOUND):
                while True:  # bounded by fail_after: the session's teardown is asynchronous
                    rows = structured(await b.call_tool("continuum_list_actions", {"run_id": RUN}))[
                        "actions"
                    ]
                    if rows[0]["status"] != "started":
                        break
                    await anyio.sleep(0.05)
                again = structured(
                    await b.call_tool("continuum_intercept_action", intercept_args())
                )
    assert rows[0]["status"] == "unknown"
    assert (again["proceed"], again["status"], again["action_key"]) == (False, "unknown", key)
    store = open_store(url, create=False)
    try:
        reasons = [e.payload.get("reason") for e in store.read_events(RUN)]
    finally:
        store.close()
    assert SESSION_ENDED in reasons


def rpc_result(text: str) -> dict[str, Any]:
    """The JSON-RPC answer in a streamable HTTP response body (JSON, or one SSE event)."""
    for row in text.splitlines():
        if row.startswith("data:"):
            text = row.removeprefix("data:")
    answer: dict[str, Any] = json.loads(text)
    assert "result" in answer, answer
    return answer


async def test_a_session_open_when_the_server_stops_leaves_its_action_unknown(
    site: HttpSite, tmp_path: Path
) -> None:
    """contract §6: the server stopping ends its sessions, so their owner is gone; the
    shutdown stays graceful (``HttpSite.serve`` requires exit 0 after SIGTERM)."""
    url = str(tmp_path / "stopped.db")
    async with site.serve("--db", url) as server, http_client(TOKENS["submit"]) as hc:
        with anyio.fail_after(BOUND):
            opened = await hc.post(server.url, json=initialize_body("agent"), headers=MCP_HEADERS)
            headers = {
                **MCP_HEADERS,
                "mcp-session-id": opened.headers["mcp-session-id"],
                "mcp-protocol-version": "2025-11-25",
            }
            await hc.post(
                server.url,
                headers=headers,
                json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            )
            for number, (tool, arguments) in enumerate(
                [
                    ("continuum_record_progress", {"run_id": RUN, "goal": "g", "total": 1}),
                    ("continuum_intercept_action", intercept_args()),
                ],
                start=2,
            ):
                answer = await hc.post(
                    server.url,
                    headers=headers,
                    json={
                        "jsonrpc": "2.0",
                        "id": number,
                        "method": "tools/call",
                        "params": {"name": tool, "arguments": arguments},
                    },
                )
                result = rpc_result(answer.text)["result"]
                assert not result.get("isError"), result
        assert result["structuredContent"]["proceed"] is True
        # The block ends with the session still open: SIGTERM, then a clean exit.
    store = open_store(url, create=False)
    try:
        (action,) = store.list_actions(RUN)
        reasons = [e.payload.get("reason") for e in store.read_events(RUN)]
    finally:
        store.close()
    assert action.record["status"] == "unknown"
    assert SESSION_ENDED in reasons

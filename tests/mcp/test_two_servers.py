"""Two allowlisted agents, each with its own ``continuum-mcp``, on one store (issue 10, item 4).

Before: agent B reconciled agent A's in-flight action as "not occurred", intercepted again
and got ``proceed: true`` while A was still performing it: two proceeds for one key. Now
only the owner (the server process that intercepted it, while it lives) may settle a
started action; B is told who owns it and to wait.
"""

from __future__ import annotations

import anyio
import pytest

from continuum.serving.secrets import ALLOW_ENV
from tests.mcp.conftest import BOUND, ServerSite, result_text, structured

pytestmark = pytest.mark.anyio

INTERCEPT = {
    "run_id": "r1",
    "action_type": "wire_money",
    "key": "wire-7",
    "arguments": {"to": "acct-99", "amount": 48000},
}


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_second_server_cannot_settle_the_first_servers_live_action(
    site: ServerSite, mode: str
) -> None:
    site.env = {ALLOW_ENV: "agent-a, agent-b"}
    with anyio.fail_after(BOUND):
        async with site.client("agent-a", mode) as a, site.client("agent-b", mode) as b:
            structured(
                await a.call_tool(
                    "continuum_record_progress", {"run_id": "r1", "goal": "pay", "total": 1}
                )
            )
            first = structured(await a.call_tool("continuum_intercept_action", INTERCEPT))
            key = first["action_key"]
            attempts = {
                "reconcile": await b.call_tool(
                    "continuum_reconcile_action",
                    {"run_id": "r1", "action_key": key, "occurred": False},
                ),
                "fail": await b.call_tool(
                    "continuum_fail_action", {"run_id": "r1", "action_key": key, "certain": True}
                ),
                "complete": await b.call_tool(
                    "continuum_complete_action", {"run_id": "r1", "action_key": key}
                ),
            }
            second = structured(await b.call_tool("continuum_intercept_action", INTERCEPT))
            done = structured(
                await a.call_tool(
                    "continuum_complete_action",
                    {"run_id": "r1", "action_key": key, "external_id": "wire-ok"},
                )
            )
            after = structured(await b.call_tool("continuum_intercept_action", INTERCEPT))
    assert first["proceed"] is True
    for verb, result in attempts.items():
        assert result.is_error is True, verb
        assert "[ledger.owner_alive]" in result_text(result), verb
    assert (second["proceed"], second["status"]) == (False, "in_progress")
    assert done["status"] == "completed"
    assert (after["proceed"], after["status"], after["external_id"]) == (
        False,
        "completed",
        "wire-ok",
    )

"""Approvals over the real stdio server with the official client, in both protocol eras.

An agent's intercept of a call an approval rule names answers ``awaiting_approval`` (the
same approval on a repeat), no tool lets the agent decide it, a person decides with the
CLI, and then exactly that call proceeds once; a denial answers ``denied``. A malformed
approvals.toml keeps the server from starting.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from continuum.serving.secrets import ALLOW_ENV
from tests.mcp.conftest import (
    BOUND,
    MODES,
    ServerSite,
    read_events,
    run_server_to_exit,
    stderr_lines,
    structured,
)

pytestmark = pytest.mark.anyio

CONTINUUM = str(Path(sys.executable).with_name("continuum"))
WIRE = {"amount": 25000, "to": "ACME"}


@pytest.fixture
def gated(site: ServerSite) -> ServerSite:
    rules = site.cwd / ".continuum" / "approvals.toml"
    rules.parent.mkdir()
    rules.write_text('[[approval]]\naction_type = "wire_money"\n', encoding="utf-8")
    site.env = {ALLOW_ENV: "agent"}
    return site


def person(site: ServerSite, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CONTINUUM, "--db", str(site.db), *args, "--yes"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )


async def intercept(client: Any, arguments: dict[str, Any], key: str = "INV-7") -> dict[str, Any]:
    return structured(
        await client.call_tool(
            "continuum_intercept_action",
            {"run_id": "r1", "action_type": "wire_money", "arguments": arguments, "key": key},
        )
    )


@pytest.mark.parametrize("mode", MODES)
async def test_an_agent_waits_for_a_person_then_proceeds_once_with_those_arguments(
    gated: ServerSite, mode: str
) -> None:
    with anyio.fail_after(BOUND):
        async with gated.client(mode=mode) as client:
            structured(
                await client.call_tool(
                    "continuum_record_progress", {"run_id": "r1", "goal": "pay", "total": 1}
                )
            )
            names = {t.name for t in (await client.list_tools()).tools}
            assert not any("decide" in n or "approv" in n for n in names)  # agents never decide
            first = await intercept(client, WIRE)
            assert (first["proceed"], first["status"]) == (False, "awaiting_approval")
            approval_id = first["approval_id"]
            assert f"continuum decide {approval_id}" in first["guidance"]
            again = await intercept(client, WIRE)
            assert again["approval_id"] == approval_id
            resumed = structured(await client.call_tool("continuum_resume", {"run_id": "r1"}))
            assert f"await_approval:{approval_id}" in resumed["contract"]["required_actions"]

            decided = person(gated, "decide", approval_id, "--allow", "--reason", "checked")
            assert decided.returncode == 0, decided.stderr

            changed = await intercept(client, {**WIRE, "amount": 25001})
            assert changed["status"] == "awaiting_approval"
            assert changed["approval_id"] != approval_id
            go = await intercept(client, WIRE)
            assert (go["proceed"], go["status"], go["approval_id"]) == (
                True,
                "started",
                approval_id,
            )
            structured(
                await client.call_tool(
                    "continuum_complete_action",
                    {"run_id": "r1", "action_key": go["action_key"], "external_id": "tx-1"},
                )
            )
            done = await intercept(client, WIRE)
            assert (done["proceed"], done["status"]) == (False, "completed")
    requested = [e for e in read_events(gated.db, "r1") if e.type == "approval_requested"]
    assert len(requested) == 2 and all(e.source == "external_agent" for e in requested)


async def test_a_denied_call_is_told_so_with_the_persons_reason(gated: ServerSite) -> None:
    with anyio.fail_after(BOUND):
        async with gated.client() as client:
            structured(
                await client.call_tool(
                    "continuum_record_progress", {"run_id": "r1", "goal": "pay", "total": 1}
                )
            )
            asked = await intercept(client, WIRE)
            refused = person(
                gated, "decide", asked["approval_id"], "--deny", "--reason", "wrong supplier"
            )
            assert refused.returncode == 0, refused.stderr
            denied = await intercept(client, WIRE)
    assert (denied["proceed"], denied["status"]) == (False, "denied")
    assert denied["denial_reason"] == "wrong supplier"
    assert "wrong supplier" in denied["guidance"]


def test_a_malformed_approvals_file_refuses_to_start(gated: ServerSite) -> None:
    (gated.cwd / ".continuum" / "approvals.toml").write_text(
        '[[approval]]\naction_type = "wire_money"\nmatch = { amount = "(" }\n'
    )
    done = run_server_to_exit(gated.db, cwd=gated.cwd, env=gated.env)
    assert done.returncode == 1
    lines = stderr_lines(done.stderr)
    assert len(lines) == 1 and "approvals.bad_rules" in lines[0] and "line 1" in lines[0]
    assert not gated.db.exists()

"""The MCP server's full flow on a postgresql:// store, over real stdio with the official
client: two server processes (two "hosts") share the run through the database."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import Implementation

from continuum.store import probe_store

AGENT = "pg-agent"
RUN = "invoices-pg"
BOUND_S = 120


def server(url: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "continuum.mcp", "--db", url],
        env={**os.environ, "CONTINUUM_MCP_MUTATING_CLIENTS": AGENT},
    )


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


@pytest.mark.anyio
async def test_the_mcp_server_runs_its_whole_flow_on_a_postgres_store(pg_url: str) -> None:
    info = Implementation(name=AGENT, version="1")
    assert probe_store(pg_url) is False  # start-up probe: reachable, nothing created yet
    with anyio.fail_after(BOUND_S):
        async with Client(server(pg_url), client_info=info, mode="legacy") as first:
            fresh = await call(first, "continuum_resume")
            assert fresh["mode"] == "no_active_run"
            progress = await call(
                first,
                "continuum_record_progress",
                run_id=RUN,
                total=2,
                goal="send INV-1 and INV-2 exactly once",
            )
            assert progress["progress"]["total"] == 2
            go = await call(
                first,
                "continuum_intercept_action",
                run_id=RUN,
                action_type="send_invoice",
                key="invoice:INV-1",
                arguments={"invoice": "INV-1"},
            )
            assert (go["proceed"], go["status"]) == (True, "started")
            done = await call(
                first,
                "continuum_complete_action",
                run_id=RUN,
                action_key=go["action_key"],
                external_id="outbox:INV-1",
            )
            assert done["status"] == "completed"
            await call(first, "continuum_record_progress", run_id=RUN, completed=1)
            await call(
                first, "continuum_checkpoint", run_id=RUN, reason="one sent", env={"dataset": "v1"}
            )

        # Another server process on the same database: a second host after a crash.
        async with Client(server(pg_url), client_info=info, mode="legacy") as second:
            again = await call(
                second,
                "continuum_intercept_action",
                run_id=RUN,
                action_type="send_invoice",
                key="invoice:INV-1",
                arguments={"invoice": "INV-1"},
            )
            assert (again["proceed"], again["status"]) == (False, "completed")
            assert again["external_id"] == "outbox:INV-1"
            resumed = await call(second, "continuum_resume")
            assert resumed["run_id"] == RUN
            assert resumed["progress"]["completed"] == 1
            assert resumed["mode"] == "request_human"  # self-reported progress needs a human
            actions = await call(second, "continuum_list_actions", run_id=RUN)
            assert actions["unresolved"] == []
            assert [a["status"] for a in actions["actions"]] == ["completed"]
    assert probe_store(pg_url) is True


def test_the_mcp_server_logs_its_store_without_the_password(pg_url: str) -> None:
    parts = urlsplit(pg_url)
    secret = "s3cret-pw-not-for-logs"
    url = parts._replace(netloc=f"{parts.username}:{secret}@{parts.hostname}:{parts.port}").geturl()

    done = subprocess.run(
        [sys.executable, "-m", "continuum.mcp", "--db", url],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=BOUND_S,
        env={**os.environ, "CONTINUUM_LOG_LEVEL": "info"},
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert '"mcp.starting"' in done.stderr  # it served (and saw stdin end) ...
    assert (
        parts.hostname is not None and parts.hostname in done.stderr
    )  # ... and named its store ...
    assert secret not in done.stderr + done.stdout  # ... without the password

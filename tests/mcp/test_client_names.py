"""Client names through the real ``continuum-mcp``: names with spaces, refused names,
huge names, and the log line each connecting client gets.

Kilo Code's client calls itself ``Kilo Code``; the allowlist used to split on spaces,
so it could never be allowed. A name is now a comma-separated piece, trimmed.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from continuum.serving.auth import POLICY_FILE
from continuum.serving.secrets import ALLOW_ENV, CLIENT_TOKENS_ENV
from tests.mcp.conftest import (
    BOUND,
    MODES,
    ServerSite,
    envelope,
    initialize_request,
    result_text,
    run_server_to_exit,
    stderr_lines,
    structured,
    tool_call,
)
from tests.mcp.request_meta import request_meta

pytestmark = pytest.mark.anyio

WRITE = ("continuum_record_progress", {"run_id": "r1", "goal": "g", "total": 2})


def log_events(stderr: str, event: str) -> list[dict[str, Any]]:
    found = []
    for row in stderr_lines(stderr):
        try:
            entry = json.loads(row)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("event") == event:
            found.append(entry)
    return found


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_named_kilo_code_is_allowed_and_kilo_or_code_alone_are_denied(
    site: ServerSite, mode: str
) -> None:
    site.env = {ALLOW_ENV: "claude-code, Kilo Code"}
    outcomes: dict[str, Any] = {}
    with anyio.fail_after(BOUND):
        for name in ("Kilo", "Code", "Kilo Code"):
            async with site.client(name=name, mode=mode) as client:
                outcomes[name] = await client.call_tool(*WRITE)
    assert structured(outcomes["Kilo Code"])["run_id"] == "r1"
    for name in ("Kilo", "Code"):
        assert outcomes[name].is_error is True
        assert f"client '{name}' is not on the allowlist" in result_text(outcomes[name])


async def test_a_token_bound_to_a_name_with_spaces_opens_writes_for_that_name(
    site: ServerSite,
) -> None:
    site.env = {ALLOW_ENV: "Kilo Code", CLIENT_TOKENS_ENV: "Kilo Code:kc-secret-1"}
    with anyio.fail_after(BOUND):
        async with site.client(name="Kilo Code", mode="auto") as client:
            missing = await client.call_tool(*WRITE)
            allowed = await client.call_tool(
                *WRITE, meta=request_meta({"authToken": "kc-secret-1"})
            )
    assert "none was presented" in result_text(missing)
    assert structured(allowed)["run_id"] == "r1"
    assert "kc-secret-1" not in site.stderr()


@pytest.mark.parametrize(
    "setting",
    [
        pytest.param({ALLOW_ENV: "claude-code,Kilo\u202eCode"}, id="env-bidi"),
        pytest.param({"CONTINUUM_MCP_ALLOW": "claude\u200bcode"}, id="alias-zero-width"),
        pytest.param({ALLOW_ENV: "ok", CLIENT_TOKENS_ENV: "bad\x07name:s3cret-x"}, id="token-bell"),
        pytest.param("file-escape", id="file-escape"),
        pytest.param("file-empty", id="file-empty"),
    ],
)
async def test_a_bad_name_refuses_start_up_in_one_line(
    site: ServerSite, setting: dict[str, str] | str
) -> None:
    env: dict[str, str] = {}
    if isinstance(setting, dict):
        env = setting
    else:
        (site.cwd / POLICY_FILE).parent.mkdir()
        bad = "claude\x1b[2Jcode" if setting == "file-escape" else ""
        (site.cwd / POLICY_FILE).write_text(json.dumps({"allow": ["claude-code", bad]}))
    done = run_server_to_exit(site.db, cwd=site.cwd, env=env)
    assert done.returncode == 1 and done.stdout == ""
    lines = stderr_lines(done.stderr)
    assert len(lines) == 1 and lines[0].startswith("continuum-mcp: ")
    assert "[mcp.bad_policy]" in lines[0] or "[mcp.bad_token_setting]" in lines[0]
    assert "\x1b" not in done.stderr and "\u202e" not in done.stderr and "s3cret" not in done.stderr
    assert not site.db.exists()


HUGE = "h" * 100_000


@pytest.mark.parametrize("era", ["handshake", "2026-07-28"])
async def test_a_100_kb_client_name_makes_no_100_kb_log_line(site: ServerSite, era: str) -> None:
    site.env = {ALLOW_ENV: "claude-code"}
    site.extra_args = ("--log-level", "debug")
    with anyio.fail_after(BOUND):
        if era == "handshake":
            async with site.raw(initialize=initialize_request(HUGE)) as server:
                denied = await server.request(tool_call(1, *WRITE))
        else:
            async with site.raw() as server:
                denied = await server.request(tool_call(1, *WRITE, meta=envelope(HUGE)))
    assert denied["result"]["isError"] is True
    text = denied["result"]["content"][0]["text"]
    assert "not on the allowlist" in text and len(text) < 1_000
    stderr = site.stderr()
    longest = max(len(row) for row in stderr_lines(stderr))
    assert longest < 2_000, f"a log line of {longest} characters"
    assert "(100000 characters)" in stderr
    assert len(log_events(stderr, "mcp.call_denied")) == 1
    assert len(log_events(stderr, "mcp.client_connected")) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_each_connecting_client_is_logged_once_saying_whether_it_may_write(
    site: ServerSite, mode: str
) -> None:
    site.env = {ALLOW_ENV: "Kilo Code"}
    site.extra_args = ("--log-level", "info")
    with anyio.fail_after(BOUND):
        async with site.client(name="Kilo", mode=mode) as client:
            for _ in range(3):  # the 2026-07-28 era names the client on every request
                await client.call_tool("continuum_resume", {})
        async with site.client(name="Kilo Code", mode=mode) as client:
            await client.call_tool("continuum_resume", {})
    seen = log_events(site.stderr(), "mcp.client_connected")
    assert [(e["client"], e["level"], e["mutating"]) for e in seen] == [
        ("Kilo", "warning", "denied"),
        ("Kilo Code", "info", "allowed"),
    ]
    assert "not on the allowlist" in seen[0]["message"]
    assert "mutating tools will be denied" in seen[0]["message"]
    assert "add 'Kilo' to CONTINUUM_MCP_MUTATING_CLIENTS" in seen[0]["message"]


async def test_a_client_that_leaves_after_its_initialize_answer_is_still_logged(
    site: ServerSite,
) -> None:
    """The handshake's client is logged after its answer (server.LogConnectingClients),
    at its next message; one that sends none and closes stdin is logged as serving ends."""
    with anyio.fail_after(BOUND):
        async with site.raw() as server:
            answer = await server.request(initialize_request("Kilo"))
            assert "result" in answer
    seen = log_events(site.stderr(), "mcp.client_connected")
    assert [(e["client"], e["level"], e["mutating"]) for e in seen] == [
        ("Kilo", "warning", "denied")
    ]

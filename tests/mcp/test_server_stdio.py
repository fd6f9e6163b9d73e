"""``continuum-mcp`` as a real subprocess, driven by the official client in both protocol
eras, by raw JSON lines, and by a third-party client (the MCP Inspector CLI).

Every store is checked byte for byte (main file and ``-wal``) where nothing may change.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from continuum import Origin
from continuum.runtime.facade import Continuum
from continuum.serving.auth import POLICY_FILE
from continuum.serving.secrets import ALLOW_ENV, CLIENT_TOKENS_ENV, CONFIRM_TOKEN_ENV, TOKEN_ENV
from continuum.store import open_store
from tests.mcp.conftest import (
    BOUND,
    MODES,
    MUTATING_TOOLS,
    READ_ONLY_TOOLS,
    TOOL_NAMES,
    ServerSite,
    assert_stdout_is_only_json_rpc,
    envelope,
    initialize_request,
    read_events,
    result_text,
    run_server_to_exit,
    seed_store,
    server_command,
    server_env,
    sidecars,
    stderr_lines,
    store_bytes,
    structured,
    tool_call,
    tree_state,
)
from tests.mcp.request_meta import request_meta

pytestmark = pytest.mark.anyio

SECRET = "agent-secret-7c1f"
CONFIRM_SECRET = "human-secret-91aa-0123456789abcdef"  # >= 32 characters (issue 30)
REPO = Path(__file__).resolve().parents[2]


def valid_arguments(action_key: str) -> dict[str, dict[str, Any]]:
    """Arguments that each mutating tool would accept from an allowed caller."""
    return {
        "continuum_record_progress": {"run_id": "r1", "completed": 2, "total": 3, "goal": "g"},
        "continuum_checkpoint": {"run_id": "r1", "reason": "now", "env": {"dataset": "v2"}},
        "continuum_intercept_action": {
            "run_id": "r1",
            "action_type": "send",
            "key": "new-1",
            "arguments": {"to": "a@b"},
        },
        "continuum_complete_action": {"run_id": "r1", "action_key": action_key, "external_id": "x"},
        "continuum_fail_action": {"run_id": "r1", "action_key": action_key, "error": "e"},
        "continuum_reconcile_action": {"run_id": "r1", "action_key": action_key, "occurred": True},
        "continuum_confirm": {"run_id": "r1"},
        "continuum_observe": {"run_id": "r1", "subject": "button", "value": "Pay", "signal": "dom"},
        "continuum_handoff": {"run_id": "r1", "note": "next: INV-3"},
        "continuum_resolve_branch": {
            "run_id": "r1",
            "branch_id": "pay",
            "choice": "click",
            "observations": ["button"],
        },
    }


# --- the tool list ----------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_tool_list_has_the_ten_names_with_hints_output_schemas_and_descriptions(
    site: ServerSite, mode: str
) -> None:
    with anyio.fail_after(BOUND):
        async with site.client(mode=mode) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
    assert sorted(tools) == sorted(TOOL_NAMES)
    for name, tool in tools.items():
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is (name in READ_ONLY_TOOLS), name
        assert tool.output_schema and tool.output_schema.get("type") == "object", name
        assert tool.description and len(tool.description) > 40, name
    assert not site.db.exists()  # listing tools opens no store


# --- denials ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("policy", "env"),
    [("unlisted", {ALLOW_ENV: "agent", TOKEN_ENV: SECRET}), ("no allowlist", {TOKEN_ENV: SECRET})],
)
async def test_every_mutating_tool_is_denied_readably_logged_and_writes_nothing(
    site: ServerSite, mode: str, policy: str, env: dict[str, str]
) -> None:
    action_key = seed_store(site.db)
    assert action_key is not None
    before = store_bytes(site.db)
    site.env = env
    texts: dict[str, str] = {}
    with anyio.fail_after(BOUND):
        async with site.client(name="intruder", mode=mode) as client:
            for tool, args in valid_arguments(action_key).items():
                # The right token does not help a name off the allowlist.
                result = await client.call_tool(
                    tool, args, meta=request_meta({"authToken": SECRET, "confirmToken": SECRET})
                )
                assert result.is_error is True, (tool, result.structured_content)
                texts[tool] = result_text(result)
    assert store_bytes(site.db) == before
    assert sidecars(site.db) == []
    for tool, text in texts.items():
        assert f"tool {tool}" in text and "'intruder'" in text
        assert "Reason:" in text and "Remedy:" in text and ALLOW_ENV in text
        assert ("read-only" in text) is (policy == "no allowlist")
        assert SECRET not in text
    stderr = site.stderr()
    denials = [json.loads(row) for row in stderr.splitlines() if '"mcp.call_denied"' in row]
    assert sorted(d["tool"] for d in denials) == sorted(MUTATING_TOOLS)
    assert {d["caller"] for d in denials} == {"intruder"}
    assert SECRET not in stderr


# --- read-only tools never write --------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_read_only_tools_leave_an_existing_store_byte_identical(
    site: ServerSite, mode: str
) -> None:
    seed_store(site.db)
    before, files = store_bytes(site.db), tree_state(site.cwd)
    with anyio.fail_after(BOUND):
        async with site.client(mode=mode) as client:  # an allowed writer, reading only
            answers = [
                await client.call_tool("continuum_resume", {}),
                await client.call_tool(
                    "continuum_resume", {"run_id": "r1", "env": {"dataset": "v9"}}
                ),
                await client.call_tool(
                    "continuum_validate",
                    {"run_id": "r1", "env": {"dataset": "v1"}, "expected_model": "m"},
                ),
                await client.call_tool("continuum_list_actions", {"run_id": "r1"}),
                await client.call_tool("continuum_resume", {"run_id": "no-such-run"}),
                await client.call_tool("continuum_validate", {"run_id": "no-such-run"}),
            ]
            assert store_bytes(site.db) == before  # also while the server holds it open
    assert [a.is_error for a in answers] == [False] * 4 + [True] * 2
    assert store_bytes(site.db) == before
    assert {k: v for k, v in tree_state(site.cwd).items() if k != "server-stderr.log"} == files


@pytest.mark.parametrize("mode", MODES)
async def test_read_only_tools_on_a_missing_store_create_nothing(
    site: ServerSite, mode: str
) -> None:
    site.env = {ALLOW_ENV: "agent"}
    with anyio.fail_after(BOUND):
        async with site.client(mode=mode) as client:
            resumed = structured(await client.call_tool("continuum_resume", {}))
            validated = await client.call_tool("continuum_validate", {"run_id": "r1"})
            listed = await client.call_tool("continuum_list_actions", {"run_id": "r1"})
    assert (resumed["run_id"], resumed["mode"]) == (None, "no_active_run")
    assert validated.is_error and listed.is_error
    assert "continuum_record_progress" in result_text(listed)  # says how to start a run
    assert not site.db.exists() and sidecars(site.db) == []
    assert sorted(os.listdir(site.cwd)) == ["server-stderr.log"]


# --- tokens -----------------------------------------------------------------------


async def test_a_token_in_the_initialize_meta_opens_mutating_tools_and_a_wrong_one_does_not(
    site: ServerSite,
) -> None:
    site.env = {ALLOW_ENV: "agent", TOKEN_ENV: SECRET}
    with anyio.fail_after(BOUND):
        # ClientSession.initialize() cannot send _meta: the handshake is sent by hand.
        async with site.raw(
            initialize=initialize_request("agent", {"authToken": "wrong"})
        ) as server:
            denied = await server.request(
                tool_call(1, "continuum_record_progress", {"run_id": "r1"})
            )
        assert not site.db.exists()
        async with site.raw(
            initialize=initialize_request("agent", {"authToken": SECRET})
        ) as server:
            allowed = await server.request(
                tool_call(1, "continuum_record_progress", {"run_id": "r1", "goal": "g"})
            )
    assert denied["result"]["isError"] is True
    assert "not valid" in denied["result"]["content"][0]["text"]
    assert allowed["result"]["isError"] is False
    assert allowed["result"]["structuredContent"]["goal"] == "g"
    assert SECRET not in site.stderr()


@pytest.mark.parametrize("mode", MODES)
async def test_a_token_in_the_call_meta_opens_mutating_tools(site: ServerSite, mode: str) -> None:
    # Pairs are separated by commas: a space no longer separates anything (names may hold spaces).
    site.env = {ALLOW_ENV: "agent", CLIENT_TOKENS_ENV: f"agent:{SECRET}, other:other-secret"}
    args = {"run_id": "r1", "goal": "g"}
    with anyio.fail_after(BOUND):
        async with site.client(mode=mode) as client:
            missing = await client.call_tool("continuum_record_progress", args)
            other = await client.call_tool(
                "continuum_record_progress", args, meta=request_meta({"authToken": "other-secret"})
            )
            assert not site.db.exists()
            allowed = await client.call_tool(
                "continuum_record_progress", args, meta=request_meta({"authToken": SECRET})
            )
    assert "none was presented" in result_text(missing)
    assert "not valid for this client" in result_text(other)  # a secret is bound to its name
    assert structured(allowed)["run_id"] == "r1"
    assert {str(e.source) for e in read_events(site.db, "r1")} == {Origin.EXTERNAL_AGENT}


@pytest.mark.parametrize("mode", MODES)
async def test_confirm_is_refused_without_the_confirm_token_and_recorded_as_human_with_it(
    site: ServerSite, mode: str
) -> None:
    site.env = {ALLOW_ENV: "agent", CONFIRM_TOKEN_ENV: CONFIRM_SECRET}
    with anyio.fail_after(BOUND):
        async with site.client(mode=mode) as client:
            structured(
                await client.call_tool(
                    "continuum_record_progress", {"run_id": "r1", "goal": "g", "total": 1}
                )
            )
            before = store_bytes(site.db)
            refused = await client.call_tool("continuum_confirm", {"run_id": "r1"})
            assert store_bytes(site.db) == before
            confirmed = structured(
                await client.call_tool(
                    "continuum_confirm",
                    {"run_id": "r1"},
                    meta=request_meta({"confirmToken": CONFIRM_SECRET}),
                )
            )
            resumed = structured(await client.call_tool("continuum_resume", {"run_id": "r1"}))
    assert refused.is_error is True
    assert "a person must run `continuum confirm r1` at a terminal" in result_text(refused)
    assert "an agent must not run it itself" in result_text(refused)
    assert confirmed["verdict"] == "resume" and resumed["mode"] == "resume"
    last = read_events(site.db, "r1")[-1]
    assert (str(last.type), str(last.source)) == ("review_confirmed", Origin.HUMAN)
    assert CONFIRM_SECRET not in site.stderr()


# --- bad input --------------------------------------------------------------------


async def test_malformed_and_oversized_lines_are_answered_and_the_server_keeps_serving(
    site: ServerSite,
) -> None:
    site.extra_args = ("--max-message-bytes", "2048")
    with anyio.fail_after(BOUND):
        async with site.raw(initialize=initialize_request()) as server:
            await server.send(b'{"jsonrpc": "2.0", "id": 1, "method": \n')
            parse_error = await server.receive()
            await server.ping(2)
            await server.send(tool_call(3, "continuum_resume", {"pad": "x" * 3000}))
            oversized = await server.receive()
            await server.ping(4)
            resumed = await server.request(tool_call(5, "continuum_resume", {}))
    assert (parse_error["id"], parse_error["error"]["code"]) == (None, -32700)
    assert (oversized["id"], oversized["error"]["code"]) == (None, -32600)
    assert "2048-byte limit" in oversized["error"]["message"]
    assert resumed["result"]["structuredContent"]["mode"] == "no_active_run"
    assert_stdout_is_only_json_rpc(server.lines)


@pytest.mark.parametrize("mode", MODES)
async def test_wrongly_typed_arguments_get_an_error_naming_the_field_and_change_nothing(
    site: ServerSite, mode: str
) -> None:
    action_key = seed_store(site.db)
    before = store_bytes(site.db)
    site.env = {ALLOW_ENV: "agent"}
    calls: list[tuple[str, dict[str, Any], str]] = [
        ("continuum_record_progress", {"run_id": "r1", "completed": "three"}, "completed"),
        ("continuum_record_progress", {"run_id": "r1", "total": True}, "total"),
        ("continuum_record_progress", {"completed": 1}, "run_id"),
        ("continuum_checkpoint", {"run_id": "r1", "env": {"dataset": 2}}, "env"),
        (
            "continuum_intercept_action",
            {"run_id": "r1", "action_type": "send", "replay": "always"},
            "replay",
        ),
        (
            "continuum_fail_action",
            {"run_id": "r1", "action_key": action_key, "certain": "yes"},
            "certain",
        ),
        (
            "continuum_reconcile_action",
            {"run_id": "r1", "action_key": action_key, "occurred": 1},
            "occurred",
        ),
        ("continuum_validate", {"run_id": ["r1"]}, "run_id"),
    ]
    with anyio.fail_after(BOUND):
        async with site.client(mode=mode) as client:
            for tool, args, field in calls:
                result = await client.call_tool(tool, args)
                assert result.is_error is True, (tool, args)
                assert field in result_text(result), (tool, result_text(result))
    assert store_bytes(site.db) == before


# --- start-up ---------------------------------------------------------------------


def _startup_case(name: str, tmp: Path) -> tuple[str, dict[str, str]]:
    """Prepare one refused start-up in ``tmp``; return the --db value and the environment."""
    if name == "malformed policy file":
        (tmp / POLICY_FILE).parent.mkdir()
        (tmp / POLICY_FILE).write_text('{"allow": ["agent",]}')
        return "store.db", {}
    if name == "empty token setting":
        return "store.db", {ALLOW_ENV: "agent", TOKEN_ENV: ""}
    if name == "malformed client tokens":
        return "store.db", {ALLOW_ENV: "agent", CLIENT_TOKENS_ENV: "agent-without-secret"}
    if name == "confirm token equal to the shared token":
        return "store.db", {ALLOW_ENV: "agent", TOKEN_ENV: SECRET, CONFIRM_TOKEN_ENV: SECRET}
    if name == "store is a directory":
        (tmp / "store.db").mkdir()
        return "store.db", {}
    if name == "store is a text file":
        (tmp / "store.db").write_text("not a database\n" * 10)
        return "store.db", {}
    if name == "store directory is missing":
        return str(tmp / "missing" / "store.db"), {}
    if name == "argument without a value":
        return "--max-message-bytes", {}  # argparse usage errors are one line and exit 1 too
    raise AssertionError(name)


@pytest.mark.parametrize(
    "case",
    [
        "malformed policy file",
        "empty token setting",
        "malformed client tokens",
        "confirm token equal to the shared token",
        "store is a directory",
        "store is a text file",
        "store directory is missing",
        "argument without a value",
    ],
)
def test_a_refused_start_up_is_one_line_on_stderr_exit_1_and_creates_nothing(
    tmp_path: Path, case: str
) -> None:
    db, env = _startup_case(case, tmp_path)
    before = tree_state(tmp_path)
    done = run_server_to_exit(db, cwd=tmp_path, env=env)
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = stderr_lines(done.stderr)
    assert len(lines) == 1 and lines[0].startswith("continuum-mcp: "), done.stderr
    assert done.stdout == ""
    assert tree_state(tmp_path) == before
    assert SECRET not in done.stderr


@pytest.mark.parametrize("mode", MODES)
async def test_a_store_refused_after_initialize_ends_the_server_in_one_line_before_any_tool_answers(
    tmp_path: Path, mode: str
) -> None:
    """The store is checked after the initialize answer (startup.py): a bad one still ends
    the server with exit 1 and its one line, before any tool is listed or called (the
    request held meanwhile gets the SDK's "connection closed" error, in either era), and
    the file stays untouched."""
    (tmp_path / "store.db").write_text("not a database\n" * 10)
    before = tree_state(tmp_path)
    with anyio.fail_after(BOUND):
        async with await anyio.open_process(
            server_command("store.db"), cwd=tmp_path, env=server_env()
        ) as process:
            assert process.stdin is not None and process.stdout and process.stderr
            if mode == "legacy":
                init = initialize_request()
                await process.stdin.send(json.dumps(init).encode() + b"\n")
                first = await process.stdout.receive()
                assert b'"serverInfo"' in first  # answered before the store was looked at
                await process.stdin.send(
                    b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
                    b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}\n'
                )
            else:
                call = tool_call(2, "continuum_resume", {}, meta=envelope("agent"))
                await process.stdin.send(json.dumps(call).encode() + b"\n")
            rest = b"".join([chunk async for chunk in process.stdout])
            err = b"".join([chunk async for chunk in process.stderr]).decode()
            assert await process.wait() == 1
    answers = [json.loads(raw) for raw in rest.splitlines() if raw.strip()]
    assert all("error" in a and "result" not in a for a in answers), answers  # no tool answer
    assert stderr_lines(err)[-1].startswith("continuum-mcp: "), err
    assert "[store.not_a_database]" in stderr_lines(err)[-1]
    assert tree_state(tmp_path) == before


async def test_start_up_and_shut_down_leave_another_connections_wal_and_shm_in_place(
    site: ServerSite,
) -> None:
    seed_store(site.db, action_key=None)
    holder = Continuum(open_store(str(site.db)))  # a second connection, holding a live WAL
    try:
        holder.record_progress("r1", completed=2)
        wal_before = Path(f"{site.db}-wal").read_bytes()
        assert len(sidecars(site.db)) == 2 and wal_before
        with anyio.fail_after(BOUND):
            async with site.client() as client:
                resumed = structured(await client.call_tool("continuum_resume", {"run_id": "r1"}))
        assert resumed["progress"]["completed"] == 2  # the server read through the WAL
        assert [p.name for p in sidecars(site.db)] == ["store.db-wal", "store.db-shm"]
        assert Path(f"{site.db}-wal").read_bytes() == wal_before
    finally:
        holder.close()


# --- the full cycle: crash, resume, reconcile, confirm ----------------------------

AGENT_SCRIPT = r"""
import sys
import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import Implementation

async def main(db, errlog_path):
    params = StdioServerParameters(command=sys.executable, args=["-m", "continuum.mcp", "--db", db],
                                   env={"CONTINUUM_MCP_MUTATING_CLIENTS": "agent"})
    with open(errlog_path, "a") as errlog:
        async with Client(stdio_client(params, errlog=errlog),
                          client_info=Implementation(name="agent", version="1"), mode="legacy") as c:
            await c.call_tool("continuum_record_progress",
                              {"run_id": "batch", "goal": "send 3 invoices", "total": 3})
            r = await c.call_tool("continuum_intercept_action",
                                  {"run_id": "batch", "action_type": "send_invoice",
                                   "arguments": {"invoice": "INV-1"}, "key": "invoice:INV-1"})
            assert r.structured_content["proceed"] is True
            print(r.structured_content["action_key"], flush=True)
            await anyio.sleep_forever()  # "sending the invoice": killed here, before complete

anyio.run(main, sys.argv[1], sys.argv[2])
"""


async def _kill_and_wait(pid: int) -> None:
    """SIGKILL a process that is not our child and wait, without polling, until it is gone
    (a pidfd turns readable when the process exits; a zombie counts as dead)."""
    pidfd = os.pidfd_open(pid)
    try:
        os.kill(pid, signal.SIGKILL)
        await anyio.wait_readable(pidfd)
    finally:
        os.close(pidfd)


async def test_after_agent_and_server_are_killed_a_fresh_client_reconciles_and_a_human_confirms(
    site: ServerSite,
) -> None:
    site.env = {ALLOW_ENV: "agent"}
    with anyio.fail_after(BOUND):
        async with await anyio.open_process(
            [sys.executable, "-c", AGENT_SCRIPT, str(site.db), str(site.stderr_path)],
            cwd=site.cwd,
            env=server_env(),
        ) as agent:
            assert agent.stdout is not None
            printed = b""
            while not printed.endswith(b"\n"):
                printed += await agent.stdout.receive()
            action_key = printed.decode().strip()
            rt = Continuum(open_store(str(site.db), create=False))
            (action,) = rt.actions("batch")
            rt.close()
            assert (action.action_key, str(action.status)) == (action_key, "started")
            server_pid = action.owner["pid"]  # the server intercepted: it owns the action
            assert server_pid != agent.pid
            await _kill_and_wait(server_pid)
            agent.kill()
            assert await agent.wait() == -signal.SIGKILL

        async with site.client(mode="auto") as client:
            resumed = structured(await client.call_tool("continuum_resume", {}))
            again = structured(
                await client.call_tool(
                    "continuum_intercept_action",
                    {
                        "run_id": "batch",
                        "action_type": "send_invoice",
                        "arguments": {"invoice": "INV-1"},
                        "key": "invoice:INV-1",
                    },
                )
            )
            settled = structured(
                await client.call_tool(
                    "continuum_reconcile_action",
                    {
                        "run_id": "batch",
                        "action_key": action_key,
                        "occurred": True,
                        "external_id": "mail-1",
                        "note": "found in the outbox",
                    },
                )
            )
            still_human = structured(
                await client.call_tool("continuum_resume", {"run_id": "batch"})
            )
            confirm = await anyio.run_process(
                [
                    sys.executable,
                    "-m",
                    "continuum",
                    "--db",
                    str(site.db),
                    "confirm",
                    "batch",
                    "--yes",
                ],
                check=False,
                cwd=site.cwd,
                env=server_env(),
            )
            final = structured(await client.call_tool("continuum_resume", {"run_id": "batch"}))

    assert resumed["run_id"] == "batch" and resumed["mode"] == "request_human"
    (uncertain,) = resumed["uncertain_actions"]
    assert (uncertain["action_key"], uncertain["status"]) == (action_key, "unknown")
    assert resumed["next_allowed_action"] == f"reconcile_action:{action.action_id}"
    assert (again["proceed"], again["status"], again["action_key"]) == (
        False,
        "unknown",
        action_key,
    )
    assert "reconcile" in again["guidance"]
    assert settled["status"] == "completed"
    assert still_human["mode"] == "request_human"  # the goal and progress are still self-reported
    assert confirm.returncode == 0, confirm.stderr
    assert final["mode"] == "resume" and final["safe"] is True


# --- a third-party client: the MCP Inspector CLI ----------------------------------

INSPECTOR = "@modelcontextprotocol/inspector@0.15.0"  # the last release that runs on Node 20


def _npm_env() -> dict[str, str]:
    cache = (
        REPO / ".venv" / "npm-cache"
        if (REPO / ".venv").is_dir()
        else Path("/tmp/continuum-npm-cache")
    )
    return server_env(
        npm_config_cache=str(cache),
        npm_config_update_notifier="false",
        npm_config_fund="false",
        npm_config_audit="false",
    )


def _inspector_or_skip() -> str:
    npx = shutil.which("npx")
    if npx is None:
        pytest.skip("npx is not installed: the MCP Inspector CLI check needs Node.js and npm")
    fetched = subprocess.run(
        [npx, "-y", "-p", INSPECTOR, "-c", "true"],
        capture_output=True,
        text=True,
        env=_npm_env(),
        timeout=300,
        check=False,
    )
    if fetched.returncode != 0:
        reason = f"could not fetch {INSPECTOR} with npx: {fetched.stderr.strip()[-300:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return npx


def _inspector(
    npx: str, site: ServerSite, *args: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    env_flags = [flag for k, v in (env or {}).items() for flag in ("-e", f"{k}={v}")]
    done = subprocess.run(
        [npx, "-y", INSPECTOR, "--cli", *env_flags, *server_command(site.db), *args],
        capture_output=True,
        text=True,
        cwd=site.cwd,
        env=_npm_env(),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def test_the_mcp_inspector_cli_lists_the_tools_calls_resume_and_writes_when_allowed(
    site: ServerSite,
) -> None:
    npx = _inspector_or_skip()
    listed = _inspector(npx, site, "--method", "tools/list")
    resumed = _inspector(npx, site, "--method", "tools/call", "--tool-name", "continuum_resume")
    assert not site.db.exists()
    allowed = _inspector(
        npx,
        site,
        "--method",
        "tools/call",
        "--tool-name",
        "continuum_record_progress",
        "--tool-arg",
        "run_id=r1",
        "--tool-arg",
        "goal=demo",
        "--tool-arg",
        "total=3",
        env={ALLOW_ENV: "inspector-cli"},
    )
    assert sorted(t["name"] for t in listed["tools"]) == sorted(TOOL_NAMES)
    hints = {t["name"]: t["annotations"]["readOnlyHint"] for t in listed["tools"]}
    assert hints == {name: name in READ_ONLY_TOOLS for name in TOOL_NAMES}
    assert resumed["isError"] is False and resumed["structuredContent"]["mode"] == "no_active_run"
    assert json.loads(resumed["content"][0]["text"]) == resumed["structuredContent"]
    assert allowed["isError"] is False
    assert allowed["structuredContent"]["progress"]["total"] == 3


# --- listings come a page at a time ---------------------------------------------------


async def test_list_actions_pages_open_actions_first_over_stdio(site: ServerSite) -> None:
    """At 120 settled actions the default page is 50, the interrupted ones lead it, and
    following next_cursor lists every action once; a forged cursor is refused by name."""
    rt = Continuum(open_store(str(site.db)), origin=Origin.DETERMINISTIC)
    try:
        rt.start_run("r1", "send invoices")
        for i in range(120):
            rt.complete("r1", rt.intercept("r1", "send", {"i": i}, key=f"inv-{i}").action_key)
        rt.intercept("r1", "send", {"i": "late"}, key="inv-late")  # left open: started
    finally:
        rt.close()
    site.env = {ALLOW_ENV: "agent"}
    with anyio.fail_after(BOUND):
        async with site.client() as client:
            first = structured(await client.call_tool("continuum_list_actions", {"run_id": "r1"}))
            keys = [a["action_key"] for a in first["actions"]]
            cursor = first["next_cursor"]
            while cursor is not None:
                page = structured(
                    await client.call_tool(
                        "continuum_list_actions", {"run_id": "r1", "cursor": cursor, "limit": 40}
                    )
                )
                assert len(page["actions"]) <= 40
                keys += [a["action_key"] for a in page["actions"]]
                cursor = page["next_cursor"]
            forged = await client.call_tool(
                "continuum_list_actions", {"run_id": "r1", "cursor": "o.x"}
            )
    assert len(first["actions"]) == 50
    assert first["actions"][0]["action_key"] == "send:inv-late"  # open first
    assert first["actions"][0]["status"] == "started"
    assert len(keys) == len(set(keys)) == 121
    assert forged.is_error and "cursor" in result_text(forged)

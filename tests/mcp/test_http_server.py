"""``continuum-mcp --transport streamable-http``: a real subprocess on a loopback port,
the official MCP client in both protocol eras, every role against every tool, the
bearer-token gate on every request, and the start-up refusals.

What each test proves:
- the role matrix: each role may call exactly its tools (both eras); each denial is
  readable (tool, role, the role needed, how to get one), logged without a token, and
  leaves the store byte-identical; allowed calls really work; writes over HTTP have
  origin ``external_agent`` and a confirmation (role approve + the confirm token) ``human``;
- negative control: the same denial check, pointed at a call the role allows, fails;
- no token, a wrong token, a token in the query string or in another header, another
  scheme: refused before any tool, store unchanged, never logged;
- a session opened with one token cannot be used with another;
- start-up refusals: one line, exit 1, nothing listening or created.
SIGTERM and a clean exit (0) end every served test (``HttpSite.serve``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from continuum import Origin
from continuum.mcp.http import AUTH_REFUSED
from continuum.runtime.facade import Continuum
from continuum.store import open_store
from tests.mcp.confirm_support import attempt_counter, runs_record
from tests.mcp.conftest import (
    BOUND,
    MODES,
    TOOL_NAMES,
    read_events,
    result_text,
    store_bytes,
    structured,
)
from tests.mcp.http_site import (
    CONFIRM_TOKEN,
    MCP_HEADERS,
    ROLES,
    TOKENS,
    HttpSite,
    http_client,
    http_command,
    initialize_body,
    official_client,
    one_line_refusal,
    refused_in_process,
    run_to_exit,
    tree_digest,
    write_token_file,
)
from tests.mcp.request_meta import request_meta

pytestmark = pytest.mark.anyio

# Role -> the tools it may call (what the table in roles.py must say, written out here).
READ = {"continuum_validate", "continuum_resume", "continuum_list_actions"}
ALLOWED = {
    "read": READ,
    "submit": READ
    | {
        "continuum_record_progress",
        "continuum_checkpoint",
        "continuum_intercept_action",
        "continuum_complete_action",
        "continuum_fail_action",
        "continuum_observe",
        "continuum_resolve_branch",
        "continuum_handoff",
    },
    "approve": READ | {"continuum_reconcile_action", "continuum_confirm"},
    "admin": set(TOOL_NAMES),
}
NEEDED = {  # what a denial must say is needed
    "continuum_record_progress": "submit or admin",
    "continuum_reconcile_action": "approve or admin",
    "continuum_confirm": "approve or admin",
}


@pytest.fixture
def http_site(tmp_path: Path) -> HttpSite:
    site = HttpSite.make(tmp_path)
    site.env = {"CONTINUUM_MCP_CONFIRM_TOKEN": CONFIRM_TOKEN}
    return site


def seed(db: Path) -> str:
    """Run ``seeded``: a goal, progress and one action left unknown (for approve to settle)."""
    rt = Continuum(open_store(str(db)), origin=Origin.DETERMINISTIC)
    try:
        rt.record_progress("seeded", goal="seeded goal", total=3, completed=1)
        key = rt.intercept("seeded", "send", {"n": 1}, key="u-1").action_key
        rt.fail("seeded", key, error="lost", certain=False)
        rt.checkpoint("seeded", reason="seed", env={"dataset": "v1"})
        return key
    finally:
        rt.close()


def denied_call_arguments(key: str) -> dict[str, dict[str, Any]]:
    """Valid arguments for every tool on run ``seeded``: only the role may refuse them."""
    return {
        "continuum_validate": {"run_id": "seeded"},
        "continuum_resume": {"run_id": "seeded"},
        "continuum_list_actions": {"run_id": "seeded"},
        "continuum_record_progress": {"run_id": "seeded", "completed": 2},
        "continuum_checkpoint": {"run_id": "seeded", "reason": "denied?"},
        "continuum_intercept_action": {
            "run_id": "seeded",
            "action_type": "send",
            "key": "denied-1",
            "arguments": {"n": 2},
        },
        "continuum_complete_action": {"run_id": "seeded", "action_key": key},
        "continuum_fail_action": {"run_id": "seeded", "action_key": key},
        "continuum_reconcile_action": {
            "run_id": "seeded",
            "action_key": key,
            "occurred": True,
            "external_id": "x-1",
        },
        "continuum_confirm": {"run_id": "seeded"},
        "continuum_handoff": {"run_id": "seeded", "note": "denied?"},
        "continuum_observe": {
            "run_id": "seeded",
            "subject": "button",
            "value": "Pay",
            "signal": "dom",
        },
        "continuum_resolve_branch": {
            "run_id": "seeded",
            "branch_id": "pay",
            "choice": "click",
            "observations": ["button"],
        },
    }


async def call(client: Client, tool: str, args: dict[str, Any]) -> Any:
    # The confirm token goes with every call: a denial must come from the role alone.
    return await client.call_tool(tool, args, meta=request_meta({"confirmToken": CONFIRM_TOKEN}))


async def assert_denied_unchanged(
    client: Client, db: Path, role: str, tool: str, args: dict[str, Any]
) -> str:
    """The call is denied readably and the store is byte-identical afterwards."""
    before = store_bytes(db)
    result = await call(client, tool, args)
    text = result_text(result)
    assert result.is_error is True, f"{role} was allowed {tool}: {text[:300]}"
    assert f"Denied: tool {tool}" in text and f"role '{role}'" in text, text
    assert f"needs role {NEEDED.get(tool, 'submit or admin')}" in text, text
    assert "--token-file" in text and "Remedy:" in text, text
    assert store_bytes(db) == before, f"{tool} denied to {role} changed the store"
    return text


async def run_allowed(client: Client, role: str, seeded_key: str) -> list[str]:
    """Every tool the role may call, on its own run, each answered without error."""
    run = f"{role}-run"
    done: list[str] = []

    async def ok(tool: str, args: dict[str, Any]) -> dict[str, Any]:
        data = structured(await call(client, tool, args))
        done.append(tool)
        return data

    if "continuum_record_progress" in ALLOWED[role]:
        await ok("continuum_record_progress", {"run_id": run, "goal": "g", "total": 2})
        await ok("continuum_checkpoint", {"run_id": run, "reason": "r"})
        first = await ok(
            "continuum_intercept_action",
            {"run_id": run, "action_type": "send", "key": "k1", "arguments": {"n": 1}},
        )
        assert first["proceed"] is True
        await ok(
            "continuum_complete_action",
            {"run_id": run, "action_key": first["action_key"], "external_id": "x-k1"},
        )
        second = await ok(
            "continuum_intercept_action", {"run_id": run, "action_type": "send", "key": "k2"}
        )
        await ok("continuum_fail_action", {"run_id": run, "action_key": second["action_key"]})
        unknown = second["action_key"]
        await ok(
            "continuum_observe", {"run_id": run, "subject": "b", "value": "Pay", "signal": "dom"}
        )
        branch = await ok(
            "continuum_resolve_branch",
            {"run_id": run, "branch_id": "p", "choice": "c", "observations": ["b"], "risk": "high"},
        )
        assert branch["mode"] == "request_human"  # one agent signal verifies nothing
        await ok("continuum_handoff", {"run_id": run, "note": "next: INV-3"})
    else:
        run, unknown = "seeded", seeded_key
    if "continuum_reconcile_action" in ALLOWED[role]:
        settled = await ok(
            "continuum_reconcile_action",
            {"run_id": run, "action_key": unknown, "occurred": True, "external_id": "x"},
        )
        assert settled["status"] == "completed"
    if "continuum_confirm" in ALLOWED[role]:
        assert (await ok("continuum_confirm", {"run_id": run}))["run_id"] == run
    await ok("continuum_validate", {"run_id": run})
    await ok("continuum_resume", {"run_id": run})
    await ok("continuum_list_actions", {"run_id": run})
    return done


@pytest.mark.parametrize("mode", MODES)
async def test_each_role_may_call_exactly_its_tools_in_both_eras(
    http_site: HttpSite, mode: str
) -> None:
    key = seed(http_site.db)
    args = denied_call_arguments(key)
    denials: dict[tuple[str, str], str] = {}
    async with http_site.serve() as server:
        with anyio.fail_after(BOUND):
            for role in ROLES:  # every denial first, while the store is the seeded one
                async with official_client(server.url, TOKENS[role], mode) as client:
                    for tool in sorted(set(TOOL_NAMES) - ALLOWED[role]):
                        denials[role, tool] = await assert_denied_unchanged(
                            client, http_site.db, role, tool, args[tool]
                        )
            for role in ROLES:
                async with official_client(server.url, TOKENS[role], mode) as client:
                    assert set(await run_allowed(client, role, key)) == ALLOWED[role]
    assert sorted(denials) == sorted((r, t) for r in ROLES for t in set(TOOL_NAMES) - ALLOWED[r])
    assert len(denials) == 20  # read: 10 mutating tools, submit: 2, approve: 8
    stderr = server.stderr()
    logged = [json.loads(row) for row in stderr.splitlines() if '"mcp.call_denied"' in row]
    assert sorted((d["role"], d["tool"]) for d in logged) == sorted(denials)
    assert all(d["code"] == "auth.role_denied" and d["token_line"] > 0 for d in logged)
    for secret in [*TOKENS.values(), CONFIRM_TOKEN]:
        assert secret not in stderr and not any(secret in text for text in denials.values())
    # Writes over HTTP are the agent's word; the confirmation is the human's (confirm token).
    assert {e.source for e in read_events(http_site.db, "submit-run")} == {Origin.EXTERNAL_AGENT}
    confirmed = [e for e in read_events(http_site.db, "seeded") if "confirm" in str(e.type)]
    assert confirmed and {e.source for e in confirmed} == {Origin.HUMAN}


async def test_the_denial_check_fails_on_a_call_the_role_allows(http_site: HttpSite) -> None:
    """Negative control: the check used above must catch an allowed call (it writes)."""
    seed(http_site.db)
    async with http_site.serve() as server:
        with anyio.fail_after(BOUND):
            async with official_client(server.url, TOKENS["submit"]) as client:
                with pytest.raises(AssertionError, match="was allowed"):
                    await assert_denied_unchanged(
                        client,
                        http_site.db,
                        "submit",
                        "continuum_record_progress",
                        {"run_id": "seeded", "completed": 2},
                    )


async def test_confirm_over_http_needs_the_confirm_token_besides_the_approve_role(
    http_site: HttpSite,
) -> None:
    seed(http_site.db)
    before = runs_record(http_site.db)
    async with (
        http_site.serve() as server,
        official_client(server.url, TOKENS["approve"], "auto") as client,
    ):
        with anyio.fail_after(BOUND):
            missing = await client.call_tool("continuum_confirm", {"run_id": "seeded"})
            wrong = await client.call_tool(
                "continuum_confirm",
                {"run_id": "seeded"},
                meta=request_meta({"confirmToken": TOKENS["approve"]}),
            )
    for result in (missing, wrong):
        text = result_text(result)
        assert result.is_error and "continuum confirm seeded" in text, text
    # No run changed; the wrong token (not the missing one) was counted (issue 30).
    assert runs_record(http_site.db) == before
    assert attempt_counter(http_site.db).failures == 1


# --- the bearer gate ---------------------------------------------------------------


def mutating_call_body() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {
            "name": "continuum_record_progress",
            "arguments": {"run_id": "seeded", "completed": 3},
        },
    }


REFUSED = [  # case, bearer token, other headers, query string, status, code
    ("no token", None, {}, "", 401, "token_missing"),
    ("wrong token", "not-a-configured-token-000", {}, "", 401, "token_invalid"),
    ("basic scheme", None, {"Authorization": "Basic " + TOKENS["admin"]}, "", 401, "bad_scheme"),
    ("bare token", None, {"Authorization": TOKENS["admin"]}, "", 401, "bad_scheme"),
    ("query string", None, {}, "access_token=" + TOKENS["admin"], 400, "token_in_url"),
    ("query + header", TOKENS["admin"], {}, "token=" + TOKENS["admin"], 400, "token_in_url"),
    ("token value in query", None, {}, "x=1&y=" + TOKENS["read"], 400, "token_in_url"),
    ("x-api-key", None, {"X-Api-Key": TOKENS["admin"]}, "", 400, "token_in_wrong_header"),
    ("cookie", None, {"Cookie": "t=" + TOKENS["admin"]}, "", 400, "token_in_wrong_header"),
]


async def test_requests_without_a_proper_bearer_token_are_refused_before_any_tool(
    http_site: HttpSite,
) -> None:
    seed(http_site.db)
    before = tree_digest(http_site.cwd)
    async with http_site.serve() as server:
        base = server.url.removesuffix("/mcp")
        for case, bearer, headers, query, status, code in REFUSED:
            suffix = "?" + query if query else ""
            async with http_client(bearer, headers=headers) as hc:
                with anyio.fail_after(BOUND):
                    answers = [
                        await hc.post(
                            server.url + suffix, json=initialize_body(), headers=MCP_HEADERS
                        ),
                        await hc.post(
                            server.url + suffix, json=mutating_call_body(), headers=MCP_HEADERS
                        ),
                        await hc.get(server.url + suffix, headers={"Accept": "text/event-stream"}),
                        await hc.delete(server.url + suffix),
                        await hc.get(base + "/other" + suffix),
                    ]
            for answer in answers:
                assert answer.status_code == status, (case, answer.status_code, answer.text)
                error = answer.json()["error"]
                assert error["code"] == AUTH_REFUSED and error["data"]["code"] == code, case
                if code != "token_invalid":
                    assert "'Authorization: Bearer <token>'" in error["message"], error
                assert not any(t in answer.text for t in TOKENS.values()), case
                if status == 401:
                    assert answer.headers["www-authenticate"].startswith("Bearer "), case
    assert tree_digest(http_site.cwd) == before
    stderr = server.stderr()
    assert stderr.count('"mcp.http_refused"') == 5 * len(REFUSED)
    assert not any(t in stderr for t in TOKENS.values())


async def test_the_official_client_is_told_where_the_token_goes(http_site: HttpSite) -> None:
    async with http_site.serve() as server:
        for mode in MODES:
            for token, code in (
                (None, "Authorization: Bearer <token>"),
                ("not-a-configured-token-000", "not valid for this server"),
            ):
                with anyio.fail_after(BOUND), pytest.raises(Exception) as caught:  # noqa: B017
                    async with official_client(server.url, token, mode) as client:
                        await client.call_tool("continuum_resume", {})
                errors: list[BaseException] = [caught.value]
                while isinstance(errors[-1], BaseExceptionGroup):
                    errors.append(errors[-1].exceptions[0])
                assert isinstance(errors[-1], MCPError) and code in str(errors[-1]), errors
    assert not http_site.db.exists()


async def test_a_session_opened_with_one_token_is_refused_to_another(http_site: HttpSite) -> None:
    async with (
        http_site.serve() as server,
        http_client(TOKENS["submit"]) as submit,
        http_client(TOKENS["read"]) as read,
    ):
        with anyio.fail_after(BOUND):
            opened = await submit.post(server.url, json=initialize_body(), headers=MCP_HEADERS)
            assert opened.status_code == 200, opened.text
            session = opened.headers["mcp-session-id"]
            ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
            same = await submit.post(
                server.url,
                json=ping,
                headers={
                    **MCP_HEADERS,
                    "mcp-session-id": session,
                    "mcp-protocol-version": "2025-11-25",
                },
            )
            other = await read.post(
                server.url,
                json=ping,
                headers={
                    **MCP_HEADERS,
                    "mcp-session-id": session,
                    "mcp-protocol-version": "2025-11-25",
                },
            )
    assert same.status_code == 200, same.text
    assert other.status_code == 404, other.text


async def test_a_body_over_the_limit_is_refused_and_serving_goes_on(http_site: HttpSite) -> None:
    async with (
        http_site.serve("--max-message-bytes", "2048") as server,
        http_client(TOKENS["admin"]) as hc,
    ):
        with anyio.fail_after(BOUND):
            big = initialize_body("x" * 4096)
            too_big = await hc.post(server.url, json=big, headers=MCP_HEADERS)
            fine = await hc.post(server.url, json=initialize_body(), headers=MCP_HEADERS)
    assert too_big.status_code == 413
    assert fine.status_code == 200, fine.text


# --- start-up refusals -------------------------------------------------------------


def test_plaintext_off_loopback_is_refused_at_start(http_site: HttpSite) -> None:
    result = run_to_exit(
        http_command(http_site.db, http_site.token_file, listen="0.0.0.0:0"), http_site.cwd
    )
    line = one_line_refusal(result)
    assert "[mcp.tls_required]" in line and "--tls-cert" in line, line
    assert not http_site.db.exists()


def test_a_token_file_open_to_group_or_others_is_refused_at_start(http_site: HttpSite) -> None:
    bad = write_token_file(http_site.cwd / "open-tokens", "read " + "r" * 20 + "\n", 0o644)
    line = one_line_refusal(run_to_exit(http_command(http_site.db, bad), http_site.cwd))
    assert "[mcp.bad_token_file]" in line and "accessible by group or others" in line, line
    assert "chmod 600" in line and "r" * 20 not in line
    assert not http_site.db.exists()


@pytest.mark.parametrize(
    ("content", "mode", "expected"),
    [
        ("read " + "r" * 20 + "\n", 0o620, "accessible by group or others (mode 0620)"),
        ("read " + "r" * 20 + "\n", 0o604, "accessible by group or others (mode 0604)"),
        ("# c\nread " + "r" * 20 + "\nsubmit short-secret\n", 0o600, "line 3 has a token of 12"),
        (
            "\nread " + "r" * 20 + "\nwrite " + "w" * 20 + "\n",
            0o600,
            "line 3 does not start with a role",
        ),
        ("read " + "r" * 20 + "\n" + "q" * 20 + " read\n", 0o600, "line 2 starts with something"),
        (
            "read " + "r" * 20 + "\nadmin " + "r" * 20 + "\n",
            0o600,
            "line 2 repeats the token of line 1",
        ),
        ("read " + "r" * 20 + " extra\n", 0o600, "line 1 has 3 fields"),
        ("read " + "r" * 19 + "\u00e9\n", 0o600, "line 1 has a token with characters outside"),
        ("# nothing\n", 0o600, "holds no tokens"),
    ],
)
def test_a_bad_token_file_is_refused_at_start_naming_the_line_not_the_token(
    http_site: HttpSite,
    content: str,
    mode: int,
    expected: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bad = write_token_file(http_site.cwd / "bad-tokens", content, mode)
    line = refused_in_process(
        http_site,
        ["--transport", "streamable-http", "--listen", "127.0.0.1:0", "--token-file", str(bad)],
        capsys,
        monkeypatch,
    )
    assert "[mcp.bad_token_file]" in line and expected in line, line
    for word in content.split():
        if len(word) >= 11:
            assert word not in line, line


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--listen", "127.0.0.1:0"], "--listen is for --transport streamable-http"),
        (["--token-file", "tokens"], "--token-file is for --transport streamable-http"),
        (["--transport", "streamable-http", "--token-file", "tokens"], "needs --listen"),
        (["--transport", "streamable-http", "--listen", "127.0.0.1:0"], "needs --token-file"),
        (
            [
                "--transport",
                "streamable-http",
                "--listen",
                "127.0.0.1:0",
                "--token-file",
                "tokens",
                "--tls-cert",
                "c.pem",
            ],
            "--tls-cert and --tls-key go together",
        ),
        (
            [
                "--transport",
                "streamable-http",
                "--listen",
                "127.0.0.1:0",
                "--token-file",
                "tokens",
                "--tls-client-ca",
                "ca.pem",
            ],
            "--tls-client-ca needs --tls-cert",
        ),
        (
            ["--transport", "streamable-http", "--listen", "localhost", "--token-file", "tokens"],
            "[mcp.bad_listen]",
        ),
        (
            [
                "--transport",
                "streamable-http",
                "--listen",
                "example.org:80",
                "--token-file",
                "tokens",
            ],
            "is not an IP address",
        ),
        (
            ["--transport", "streamable-http", "--listen", "::1:80", "--token-file", "tokens"],
            "needs brackets",
        ),
        (
            [
                "--transport",
                "streamable-http",
                "--listen",
                "10.1.2.3:8443",
                "--token-file",
                "tokens",
            ],
            "[mcp.tls_required]",
        ),
        (
            ["--transport", "streamable-http", "--listen", "[::]:0", "--token-file", "tokens"],
            "[mcp.tls_required]",
        ),
        (
            [
                "--transport",
                "streamable-http",
                "--listen",
                "127.0.0.1:0",
                "--token-file",
                "missing",
            ],
            "does not exist",
        ),
    ],
)
def test_wrong_flag_combinations_are_refused_in_one_line(
    http_site: HttpSite,
    argv: list[str],
    expected: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    line = refused_in_process(http_site, argv, capsys, monkeypatch)
    assert expected in line, line


def test_stdio_gate_settings_are_refused_over_http(http_site: HttpSite) -> None:
    result = run_to_exit(
        http_command(http_site.db, http_site.token_file),
        http_site.cwd,
        env={"CONTINUUM_MCP_MUTATING_CLIENTS": "agent"},
    )
    line = one_line_refusal(result)
    assert "[mcp.stdio_setting_over_http]" in line and "CONTINUUM_MCP_MUTATING_CLIENTS" in line


def test_a_confirm_token_equal_to_a_bearer_token_is_refused(http_site: HttpSite) -> None:
    result = run_to_exit(
        http_command(http_site.db, http_site.token_file),
        http_site.cwd,
        env={"CONTINUUM_MCP_CONFIRM_TOKEN": TOKENS["approve"]},
    )
    line = one_line_refusal(result)
    assert "[mcp.secret_reused]" in line and TOKENS["approve"] not in line


def test_doctor_shows_the_http_settings_with_role_counts_and_no_token(http_site: HttpSite) -> None:
    result = run_to_exit(
        http_command(http_site.db, http_site.token_file, "--doctor"), http_site.cwd
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["starts"] is True
    assert report["http"]["tokens"] == {"read": 1, "submit": 1, "approve": 1, "admin": 1}
    assert report["http"]["tls"] is False and report["http"]["loopback"] is True
    assert not any(t in result.stdout for t in TOKENS.values())


async def test_an_address_in_use_is_a_one_line_refusal(http_site: HttpSite) -> None:
    async with http_site.serve() as server:
        port = server.url.rsplit(":", 1)[1].split("/")[0]
        result = run_to_exit(
            http_command(http_site.db, http_site.token_file, listen=f"127.0.0.1:{port}"),
            http_site.cwd,
        )
    line = one_line_refusal(result)
    assert "[mcp.cannot_listen]" in line, line

"""Roles, the token file and the bearer check as logic (``roles.py``), and the HTTP
layers around the MCP endpoint (``http.py``) driven as ASGI apps in this process."""

from __future__ import annotations

import asyncio
import hmac
import os
import socket
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.types import Message, Scope

from continuum.errors import UsageError
from continuum.mcp.http import AUTH_REFUSED, BearerAuth
from continuum.mcp.roles import Refusal, authenticate, authorize_call
from continuum.mcp.tools import tool_table
from continuum.serving import tokens
from continuum.serving.auth import Caller, Policy
from continuum.serving.config import parse_listen
from continuum.serving.flags import SERVER_BUSY, flag_problem
from continuum.serving.secrets import Secret
from continuum.serving.server import InFlightLimit, bind
from continuum.serving.tokens import (
    GRANT_SCOPE_KEY,
    ROLE_TOOLS,
    Grant,
    Role,
    allows,
    load_token_file,
    roles_for,
)

TOKENS = {"read": "r" * 20, "submit": "s" * 20, "approve": "a" * 20, "admin": "d" * 20}


def token_file(tmp_path: Path, content: str | bytes, mode: int = 0o600) -> Path:
    path = tmp_path / "tokens"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    path.chmod(mode)
    return path


@pytest.fixture
def table(tmp_path: Path) -> tokens.TokenTable:
    return load_token_file(token_file(tmp_path, "".join(f"{r} {t}\n" for r, t in TOKENS.items())))


# --- the role table ----------------------------------------------------------------


def test_every_registered_tool_has_a_role_and_read_only_tools_are_exactly_the_read_role() -> None:
    specs = {spec.name: spec for spec, _method in tool_table()}
    read_only = {name for name, spec in specs.items() if spec.read_only}
    assert ROLE_TOOLS[Role.READ] == read_only == set(tokens.READ_TOOLS)
    for name in specs:  # a new tool must be placed in the table, not left admin-only
        assert set(roles_for(name)) - {Role.ADMIN}, f"{name} is in no role but admin"
        assert Role.ADMIN in roles_for(name)
    mutating = set(specs) - read_only
    assert set(tokens.SUBMIT_TOOLS) | set(tokens.APPROVE_TOOLS) == mutating
    assert not set(tokens.SUBMIT_TOOLS) & set(tokens.APPROVE_TOOLS)  # agent and person apart


def test_admin_covers_tools_added_later_and_no_other_role_does() -> None:
    assert allows(Role.ADMIN, "continuum_decide_approval")
    assert roles_for("continuum_decide_approval") == (Role.ADMIN,)


def test_a_denial_names_the_tool_the_role_the_roles_needed_and_how_to_get_one() -> None:
    decision = authorize_call(
        "continuum_confirm", Grant(Role.SUBMIT, 3), Caller("agent"), policy=Policy()
    )
    text = decision.text()
    assert not decision.allowed and decision.code == "auth.role_denied"
    assert "tool continuum_confirm" in text and "role 'submit'" in text
    assert "needs role approve or admin" in text and "'approve <token>' line" in text
    assert "--token-file" in text


def test_no_grant_is_denied_even_for_a_read_only_tool() -> None:
    decision = authorize_call("continuum_resume", None, Caller(None), policy=Policy())
    assert not decision.allowed and decision.code == "auth.no_grant"


def test_confirm_by_role_still_needs_the_confirm_token() -> None:
    policy = Policy(confirm_token=Secret("the-confirm-token-0000"))
    grant = Grant(Role.APPROVE, 1)
    without = authorize_call("continuum_confirm", grant, Caller("op"), policy=policy, confirm=True)
    assert not without.allowed and without.code == "auth.confirm_token_missing"
    with_token = authorize_call(
        "continuum_confirm",
        grant,
        Caller("op", confirm_token="the-confirm-token-0000"),
        policy=policy,
        confirm=True,
    )
    assert with_token.allowed


# --- the token file ----------------------------------------------------------------


def test_a_token_file_with_comments_blank_lines_and_crlf_loads(tmp_path: Path) -> None:
    path = token_file(
        tmp_path,
        "# operators\r\n\r\n  read   " + "r" * 16 + "  \r\nadmin " + "A1-._~+/" * 3 + "==\n",
    )
    table = load_token_file(path)
    assert table.lookup("r" * 16) == Grant(Role.READ, 3)
    assert table.lookup("A1-._~+/" * 3 + "==") == Grant(Role.ADMIN, 4)
    assert table.lookup("r" * 17) is None
    assert "r" * 16 not in repr(table) and table.describe()["tokens"]["read"] == 1


def test_a_token_file_that_is_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(UsageError, match="not a regular file"):
        load_token_file(fifo)


def test_a_token_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not UTF-8"):
        load_token_file(token_file(tmp_path, b"read \xff" + b"r" * 20 + b"\n"))


def test_lookup_compares_against_every_entry_whichever_matches(
    table: tokens.TokenTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append(len(a))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    for presented in (TOKENS["read"], TOKENS["admin"], "x" * 20, "short"):
        calls.clear()
        table.lookup(presented)
        assert calls == [32] * len(TOKENS)  # every entry, digests of equal length


# --- the bearer check --------------------------------------------------------------


def refusal(table: tokens.TokenTable, headers: list[tuple[str, str]], query: str = "") -> Refusal:
    with pytest.raises(Refusal) as caught:
        authenticate(headers, query, table)
    assert not any(t in caught.value.message for t in TOKENS.values())
    return caught.value


def test_a_bearer_token_in_the_authorization_header_is_its_grant(table: tokens.TokenTable) -> None:
    assert authenticate([("Authorization", "Bearer " + TOKENS["submit"])], "", table) == Grant(
        Role.SUBMIT, 2
    )
    assert authenticate(
        [("authorization", "bearer  " + TOKENS["read"] + " ")], "a=1", table
    ) == Grant(Role.READ, 1)


@pytest.mark.parametrize(
    ("headers", "query", "status", "code"),
    [
        ([], "", 401, "token_missing"),
        ([("Authorization", "Bearer " + "z" * 20)], "", 401, "token_invalid"),
        ([("Authorization", "Bearer")], "", 401, "token_invalid"),
        ([("Authorization", "Token " + TOKENS["read"])], "", 401, "bad_scheme"),
        ([("Authorization", "Bearer " + TOKENS["read"])] * 2, "", 400, "token_ambiguous"),
        ([], "access_token=" + TOKENS["read"], 400, "token_in_url"),
        ([], "Token=anything", 400, "token_in_url"),
        ([], "q=" + TOKENS["read"].replace("r", "%72"), 400, "token_in_url"),
        ([("X-Auth-Token", "whatever")], "", 400, "token_in_wrong_header"),
        (
            [
                ("Authorization", "Bearer " + TOKENS["read"]),
                ("X-Forwarded", "k=" + TOKENS["admin"]),
            ],
            "",
            400,
            "token_in_wrong_header",
        ),
    ],
)
def test_requests_without_a_proper_bearer_token_are_refused(
    table: tokens.TokenTable, headers: list[tuple[str, str]], query: str, status: int, code: str
) -> None:
    refused = refusal(table, headers, query)
    assert (refused.status, refused.code) == (status, code)
    if code != "token_invalid":
        assert "Authorization: Bearer <token>" in refused.message


# --- flags -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "host", "port", "loopback"),
    [
        ("127.0.0.1:8765", "127.0.0.1", 8765, True),
        ("127.9.9.9:1", "127.9.9.9", 1, True),
        ("localhost:0", "localhost", 0, True),
        ("[::1]:443", "::1", 443, True),
        ("0.0.0.0:8765", "0.0.0.0", 8765, False),
        ("[::]:8765", "::", 8765, False),
        ("10.0.0.5:80", "10.0.0.5", 80, False),
        ("[::ffff:127.0.0.1]:80", "::ffff:127.0.0.1", 80, False),  # mapped: treated as remote
    ],
)
def test_listen_addresses_parse_and_know_whether_they_are_loopback(
    text: str, host: str, port: int, loopback: bool
) -> None:
    listen = parse_listen(text)
    assert (listen.host, listen.port, listen.loopback) == (host, port, loopback)


@pytest.mark.parametrize(
    "text",
    [
        "8765",
        ":8765",
        "127.0.0.1:",
        "127.0.0.1:x",
        "1.2.3.4:70000",
        "host.example:80",
        "::1:80",
        "[::1:80",
    ],
)
def test_malformed_listen_addresses_are_refused(text: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_listen(text)
    assert caught.value.code == "mcp.bad_listen"


def test_flag_problem_accepts_the_right_combinations() -> None:
    http = {"--listen": "127.0.0.1:1", "--token-file": "t"}
    assert flag_problem("stdio", {}) is None
    assert flag_problem("streamable-http", http) is None
    assert (
        flag_problem(
            "streamable-http",
            {**http, "--tls-cert": "c", "--tls-key": "k", "--tls-client-ca": "ca"},
        )
        is None
    )


# --- the ASGI layers ---------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def __call__(self, message: Message) -> None:
        self.messages.append(message)

    @property
    def status(self) -> int:
        return int(self.messages[0]["status"])

    def json(self) -> Any:
        import json

        return json.loads(self.messages[1]["body"])


async def no_body() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


def scope(
    method: str = "POST",
    path: str = "/mcp",
    headers: list[tuple[str, str]] | None = None,
    query: str = "",
) -> dict[str, Any]:
    return {
        "type": "http",
        "method": method,
        "path": path,
        "query_string": query.encode(),
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or [])],
        "client": ("127.0.0.1", 5),
    }


@pytest.mark.anyio
async def test_bearer_auth_passes_the_grant_on_and_refuses_with_a_json_rpc_error(
    table: tokens.TokenTable,
) -> None:
    seen: list[Scope] = []

    async def app(s: Scope, receive: Any, send: Any) -> None:
        seen.append(s)

    auth = BearerAuth(app, table, open_paths=["/health"])
    await auth(
        scope(headers=[("Authorization", "Bearer " + TOKENS["approve"])]), no_body, Recorder()
    )
    assert seen[-1][GRANT_SCOPE_KEY] == Grant(Role.APPROVE, 3)
    assert seen[-1]["user"].access_token.client_id == "token-file-line-3"
    assert TOKENS["approve"] not in repr(seen[-1]["user"].access_token)
    await auth(scope(path="/health"), no_body, Recorder())  # an open path skips the check
    assert GRANT_SCOPE_KEY not in seen[-1]
    refused = Recorder()
    await auth(scope(), no_body, refused)
    assert refused.status == 401 and len(seen) == 2
    assert refused.json()["error"]["code"] == AUTH_REFUSED
    await auth({"type": "websocket", "path": "/mcp", "headers": []}, no_body, Recorder())
    assert len(seen) == 2  # a websocket is never served


@pytest.mark.anyio
async def test_in_flight_limit_answers_busy_over_the_limit_and_does_not_count_get() -> None:
    entered, release = anyio.Event(), anyio.Event()

    async def slow(s: Scope, receive: Any, send: Any) -> None:
        entered.set()
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    limit = InFlightLimit(slow, 1)
    first, second, stream = Recorder(), Recorder(), Recorder()
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(limit, scope(), no_body, first)
            await entered.wait()
            await limit(scope(), no_body, second)  # over the limit: answered at once
            entered = anyio.Event()
            tg.start_soon(limit, scope("GET"), no_body, stream)  # a GET stream: not counted
            await entered.wait()
            release.set()
    assert first.status == 200 and stream.status == 200
    assert second.status == 503
    error = second.json()["error"]
    assert error["code"] == SERVER_BUSY and error["data"]["limit"] == 1
    assert limit.active == 0


async def nodelay_of_accepted(sock: socket.socket) -> int:
    """TCP_NODELAY of the server side of one connection asyncio accepts on ``sock``."""
    seen: list[int] = []
    accepted = asyncio.Event()

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(
            writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        )
        accepted.set()
        writer.close()

    server = await asyncio.start_server(on_connection, sock=sock)
    async with server:
        _reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        with anyio.fail_after(30):
            await accepted.wait()
        writer.close()
    return seen[0]


@pytest.mark.anyio
async def test_connections_on_the_bound_socket_send_small_answers_without_delay() -> None:
    # Without TCP_NODELAY every keep-alive answer after the first waited ~40 ms for the
    # client's delayed ACK (measured: 44 ms per request instead of under 1 ms).
    assert await nodelay_of_accepted(bind(parse_listen("127.0.0.1:0"))) != 0
    # Control: a socket made without proto=IPPROTO_TCP gets no TCP_NODELAY from asyncio.
    plain = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    plain.bind(("127.0.0.1", 0))
    plain.listen()
    assert await nodelay_of_accepted(plain) == 0

"""`continuum gateway mcp --url URL`: the gateway in front of an MCP server served over
streamable HTTP. The upstream is tests/gateway/mcp_upstream.py serving HTTP on a free
loopback port (uvicorn, the SDK's own app), a real subprocess; the host side is the SDK's
stdio client. The effects file is the outside world.

No sleeps: every exchange is bounded with ``anyio.fail_after(BOUND)``, and the upstream is
waited for by the port file it writes once it listens.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from continuum.errors import UsageError
from continuum.gateway.upstream import check_upstream_url, parse_header, url_name

from .test_mcp_gateway import (
    BOUND,
    RUN,
    UPSTREAM,
    _env,
    actions,
    call,
    connect,
    effects,
    ledger_meta,
    refused_start,
    text,
)

pytestmark = pytest.mark.anyio


@contextmanager
def http_upstream(project: Path, **env: str) -> Iterator[str]:
    """The upstream serving streamable HTTP; yields its URL; killed at the end."""
    port_file = project / f"port-{time.monotonic_ns()}"
    with (project / "upstream.log").open("a", encoding="utf-8") as log:
        proc = subprocess.Popen(
            [sys.executable, UPSTREAM],
            env=_env(project, UPSTREAM_PORT_FILE=str(port_file), **env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        deadline = time.monotonic() + BOUND
        while not port_file.exists():
            assert proc.poll() is None, "the upstream exited before it listened"
            assert time.monotonic() < deadline, "the upstream did not listen in time"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port_file.read_text(encoding='utf-8')}/mcp"
    finally:
        proc.kill()
        proc.wait(timeout=BOUND)


def gateway(url: str, *options: str) -> list[str]:
    return [
        sys.executable,
        *("-m", "continuum", "gateway", "mcp", "--name", "billing", "--url", url),
        *options,
    ]


async def test_a_registered_call_over_http_is_forwarded_once_and_repeated_from_the_ledger(
    project: Path,
) -> None:
    with http_upstream(project) as url:
        async with connect(project, gateway(url)) as session:
            first = await call(session, "send_invoice", invoice_id="INV-1", amount=5)
            again = await call(session, "send_invoice", invoice_id="INV-1", amount=5)
            read = await call(session, "read_balance", account="acme")
        async with connect(project, gateway(url)) as session:  # a fresh gateway process
            later = await call(session, "send_invoice", invoice_id="INV-1", amount=5)
    assert not first.is_error and text(first) == "sent invoice INV-1 for 5"
    for repeat in (again, later):
        assert not repeat.is_error and text(repeat) == text(first)
        assert ledger_meta(repeat)["answered"] == "from_ledger"
    assert not read.is_error and text(read) == "balance of acme: 42"
    assert effects(project) == ["invoice INV-1 5"]
    [action] = actions(project)
    assert action.status == "completed"
    pins = json.loads((project / ".continuum" / "gateway-pins.json").read_text("utf-8"))
    assert "send_invoice" in json.dumps(pins)  # pinned under the --name given


async def test_an_http_upstream_dying_mid_call_leaves_unknown_and_the_retry_is_refused(
    project: Path,
) -> None:
    with http_upstream(project, UPSTREAM_DIE_AFTER_EFFECT="INV-7") as url:
        async with connect(project, gateway(url)) as session:
            lost = await call(session, "send_invoice", invoice_id="INV-7", amount=70)
    with http_upstream(project) as url:  # a healthy upstream again, on another port
        async with connect(project, gateway(url)) as session:
            retry = await call(session, "send_invoice", invoice_id="INV-7", amount=70)
    assert lost.is_error and ledger_meta(lost)["refused"] == "unknown"
    assert retry.is_error and ledger_meta(retry)["refused"] == "unknown"
    assert f"continuum reconcile {RUN} send_invoice:invoice:INV-7" in text(retry)
    assert effects(project) == ["invoice INV-7 70"]  # never sent again
    [action] = actions(project)
    assert action.status == "unknown"


async def test_without_the_gateway_the_same_http_crash_repeats_the_effect(
    project: Path,
) -> None:
    """Negative control: a client straight to the HTTP upstream retries after the crash."""
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def send(url: str) -> bool:
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            try:
                result = await call(session, "send_invoice", invoice_id="INV-7", amount=70)
            except Exception:  # noqa: BLE001 - the upstream died mid-call
                return False
            return not result.is_error

    with http_upstream(project, UPSTREAM_DIE_AFTER_EFFECT="INV-7") as url:
        assert not await send(url)
    with http_upstream(project) as url:
        assert await send(url)
    assert effects(project) == ["invoice INV-7 70", "invoice INV-7 70"]  # sent twice


class OnePort:
    """The upstream on one loopback port, stopped and started again by the test (a
    restart: its sessions are gone, its address the same); stopped at the end."""

    def __init__(self, project: Path) -> None:
        self.project = project
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = str(sock.getsockname()[1])
        self._running = ExitStack()

    def start(self, **env: str) -> str:
        return self._running.enter_context(
            http_upstream(self.project, UPSTREAM_PORT=self.port, **env)
        )

    def stop(self) -> None:
        self._running.close()
        self._running = ExitStack()

    def __enter__(self) -> OnePort:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def test_an_http_upstream_that_restarts_is_reached_again_on_the_next_call(
    project: Path,
) -> None:
    with OnePort(project) as upstream:
        async with connect(project, gateway(upstream.start())) as session:
            sent = await call(session, "send_invoice", invoice_id="INV-1", amount=5)
            upstream.stop()  # its sessions are gone
            down = await call(session, "read_balance", account="acme")
            upstream.start()  # back, on the same address
            back = await call(session, "read_balance", account="acme")
            again = await call(session, "send_invoice", invoice_id="INV-2", amount=7)
            repeat = await call(session, "send_invoice", invoice_id="INV-1", amount=5)
            listed = await session.list_tools()
    assert not sent.is_error
    assert down.is_error and ledger_meta(down)["refused"] == "upstream_gone"
    assert "tries to reach it again" in text(down)
    assert not back.is_error and text(back) == "balance of acme: 42"
    assert not again.is_error and text(again) == "sent invoice INV-2 for 7"
    assert ledger_meta(repeat)["answered"] == "from_ledger"  # the ledger outlived the session
    assert {"send_invoice", "read_balance"} <= {t.name for t in listed.tools}
    assert effects(project) == ["invoice INV-1 5", "invoice INV-2 7"]
    assert "gateway.upstream_reconnected" in (project / "stderr.log").read_text("utf-8")


async def test_an_upstream_restarted_between_calls_refuses_the_old_session_and_nothing_is_lost(
    project: Path,
) -> None:
    # The upstream restarts between two calls (the gateway did not see it go): it refuses
    # the old session (404). That is an answer, not a lost call: an unregistered call is
    # sent again on a new session; a registered one is a certain failure (not unknown),
    # so the agent's retry performs it, once.
    with OnePort(project) as upstream:
        async with connect(project, gateway(upstream.start())) as session:
            assert not (await call(session, "read_balance", account="acme")).is_error
            upstream.stop()
            upstream.start()  # restarted while no call was made
            read = await call(session, "read_balance", account="acme")
            upstream.stop()
            upstream.start()
            refused = await call(session, "send_invoice", invoice_id="INV-5", amount=9)
            retried = await call(session, "send_invoice", invoice_id="INV-5", amount=9)
    assert not read.is_error and text(read) == "balance of acme: 42"
    assert refused.is_error and ledger_meta(refused)["refused"] == "upstream_restarted"
    assert not retried.is_error and text(retried) == "sent invoice INV-5 for 9"
    assert effects(project) == ["invoice INV-5 9"]
    [action] = actions(project)
    assert action.status == "completed"


async def test_a_tool_error_worded_like_a_session_refusal_is_not_taken_for_a_restart(
    project: Path,
) -> None:
    # The upstream performs the effect, then answers a JSON-RPC error that reads exactly
    # like a restarted server's refusal of the session, on a session it still knows (no
    # 404). Taken for a restart, the call would be a certain failure and its retry would
    # send the invoice again; it is an error answer after the fact: unknown.
    with http_upstream(project, UPSTREAM_SESSION_WORDING="INV-8") as url:
        async with connect(project, gateway(url)) as session:
            odd = await call(session, "send_invoice", invoice_id="INV-8", amount=8)
            retry = await call(session, "send_invoice", invoice_id="INV-8", amount=8)
            read = await call(session, "read_balance", account="acme")
    assert odd.is_error and ledger_meta(odd)["refused"] == "unknown", text(odd)
    assert retry.is_error and ledger_meta(retry)["refused"] == "unknown"
    assert not read.is_error  # the same session serves on: nothing was reconnected
    assert effects(project) == ["invoice INV-8 8"]
    log = (project / "stderr.log").read_text("utf-8")
    assert "gateway.upstream_reconnected" not in log and "gateway.upstream_lost" not in log


async def test_a_restarted_http_upstream_that_changed_a_tool_has_it_refused(
    project: Path,
) -> None:
    with OnePort(project) as upstream:
        async with connect(project, gateway(upstream.start())) as session:
            await call(session, "read_balance", account="acme")  # pinned as first seen
            upstream.stop()
            await call(session, "read_balance", account="acme")  # gone
            upstream.start(UPSTREAM_DESCRIPTION="Send an invoice, and copy it to the vendor.")
            refused = await call(session, "send_invoice", invoice_id="INV-3", amount=1)
            read = await call(session, "read_balance", account="acme")
    assert refused.is_error and ledger_meta(refused)["refused"] == "tool_changed"
    assert not read.is_error  # an unchanged tool still passes
    assert effects(project) == []


async def test_control_a_client_session_kept_across_the_restart_is_refused_by_the_new_server(
    project: Path,
) -> None:
    """The restart really ends the old session: a plain SDK client that keeps it gets an
    error, so the gateway's calls above went through a session it opened again."""
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    with OnePort(project) as upstream:
        async with (
            streamable_http_client(upstream.start()) as (read, write),
            ClientSession(read, write) as session,
        ):
            with anyio.fail_after(BOUND):
                await session.initialize()
            assert not (await call(session, "read_balance", account="acme")).is_error
            upstream.stop()
            upstream.start()
            with pytest.raises(MCPError, match="(?i)session"):
                await call(session, "read_balance", account="acme")


def one_effect(project: Path, tool: str, key: str) -> Path:
    """A rules file registering ``tool`` alone as an effect, keyed by ``key``."""
    rules = project / f"{tool}.toml"
    text = f'[[effect]]\ntool = "{tool}"\naction_type = "{tool}"\nkey = "{key}"\n'
    rules.write_text(text, encoding="utf-8")
    return rules


async def test_a_request_the_upstream_sends_on_a_calls_stream_is_refused_and_the_call_ends(
    project: Path,
) -> None:
    # The upstream asks its client something mid-call (an elicitation, on the call's SSE
    # stream). The gateway's own leg refuses it as the SDK's client session does, so the
    # tool goes on and the call ends; left unanswered, the upstream would wait and the call
    # hang. (The log line is the leg's: the SDK's path logs nothing here.)
    with http_upstream(project) as url:
        async with connect(project, gateway(url)) as session:
            asked = await call(session, "ask_customer", question="pay now?")
            read = await call(session, "read_balance", account="acme")
    assert not asked.is_error
    assert text(asked) == "the client did not answer: -32600 Elicitation not supported"
    assert text(read) == "balance of acme: 42"
    log = (project / "stderr.log").read_text(encoding="utf-8")
    assert "gateway.upstream_request_refused" in log and "elicitation/create" in log


async def test_a_registered_call_over_http_without_an_answer_in_time_is_unknown(
    project: Path,
) -> None:
    rules = one_effect(project, "slow_effect", "{seconds}")
    with http_upstream(project) as url:
        command = gateway(url, "--rules", str(rules), "--run", RUN, "--timeout", "0.5")
        async with connect(project, command) as session:
            late = await call(session, "slow_effect", seconds=3)
            read = await call(session, "read_balance", account="acme")
    assert late.is_error and ledger_meta(late)["refused"] == "unknown"
    assert "timed out" in text(late)
    [action] = actions(project)
    assert action.status == "unknown"
    assert text(read) == "balance of acme: 42"  # the session serves on


async def test_a_calls_stream_closed_by_the_upstream_is_resumed_and_the_effect_completed(
    project: Path,
) -> None:
    # The upstream closes the call's SSE stream on purpose (the spec's polling pattern) and
    # answers on the resumed one. Taken as a lost connection, the completed effect would be
    # `unknown` and the healthy session dropped (the leg before resumption failed here).
    rules = one_effect(project, "polled_effect", "{tag}")
    with http_upstream(project, UPSTREAM_RESUMABLE="1") as url:
        command = gateway(url, "--rules", str(rules), "--run", RUN)
        async with connect(project, command) as session:
            done = await call(session, "polled_effect", tag="p1")
            again = await call(session, "polled_effect", tag="p1")
    assert not done.is_error and text(done) == "done polling p1"
    assert ledger_meta(again)["answered"] == "from_ledger"
    assert effects(project) == ["polled p1"]
    [action] = actions(project)
    assert action.status == "completed"


async def test_headers_name_their_secret_by_environment_variable(project: Path) -> None:
    with http_upstream(project, UPSTREAM_BEARER="s3cret-token") as url:
        command = gateway(url, "--header", "Authorization: Bearer $BILLING_TOKEN")
        async with connect(project, command, BILLING_TOKEN="s3cret-token") as session:
            sent = await call(session, "send_invoice", invoice_id="INV-2", amount=2)
        refused = _start(project, gateway(url))  # no header: 401 at start
        unset = _start(project, command)  # BILLING_TOKEN not in its environment
    assert not sent.is_error and effects(project) == ["invoice INV-2 2"]
    assert refused["code"] == "gateway.upstream_failed" and "did not answer" in refused["message"]
    assert unset["code"] == "gateway.bad_upstream" and "BILLING_TOKEN" in unset["message"]
    assert "s3cret" not in json.dumps([refused, unset])
    log = (
        (project / "stderr.log").read_text(encoding="utf-8")
        if (project / "stderr.log").exists()
        else ""
    )
    assert "s3cret" not in log


def _start(project: Path, command: list[str]) -> dict[str, Any]:
    """The error a gateway that cannot start prints (``--json``)."""
    return refused_start(project, command[3:])


def test_an_upstream_url_and_a_command_together_or_neither_are_refused(project: Path) -> None:
    both = _start(project, [*gateway("http://127.0.0.1:9/mcp"), "--", sys.executable, UPSTREAM])
    neither = _start(project, [sys.executable, "-m", "continuum", "gateway", "mcp"])
    stray = _start(project, [*gateway_command_only(), "--header", "A: b", "--", "x"])
    assert both["code"] == neither["code"] == stray["code"] == "usage.invalid"
    assert "--url" in neither["hint"]


def gateway_command_only() -> list[str]:
    return [sys.executable, "-m", "continuum", "gateway", "mcp"]


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://billing.example.com/mcp", "plain http"),
        ("https://user:pw@billing.example.com/mcp", "credentials"),
        ("ftp://billing.example.com/mcp", "not an http(s) URL"),
        ("https:///mcp", "not an http(s) URL"),
        ("https://billing.example.com:port/mcp", "not a URL"),
    ],
)
def test_an_upstream_url_that_is_not_safe_to_use_is_refused(url: str, why: str) -> None:
    with pytest.raises(UsageError) as caught:
        check_upstream_url(url)
    assert caught.value.code == "gateway.bad_upstream" and why in caught.value.message
    assert "pw" not in caught.value.message or why != "credentials"


def test_safe_upstream_urls_are_kept_and_named_by_host() -> None:
    for url in ("https://billing.example.com/mcp", "http://127.0.0.1:8123/mcp", "http://[::1]/m"):
        assert check_upstream_url(url) == url
    assert url_name("https://billing.example.com/mcp") == "billing.example.com"
    assert url_name("http://127.0.0.1:8123/mcp") == "127.0.0.1-8123"


def test_a_header_reads_its_secret_from_the_environment_and_refuses_a_bad_one() -> None:
    env = {"TOKEN": "abc"}
    assert parse_header("Authorization: Bearer $TOKEN", env) == ("Authorization", "Bearer abc")
    assert parse_header("X-Key: ${TOKEN}", env) == ("X-Key", "abc")
    assert parse_header("X-Plain: literal $ sign", env) == ("X-Plain", "literal $ sign")
    for bad in ("no colon", "Bad Name: x", ": empty", "X-Key: $MISSING"):
        with pytest.raises(UsageError) as caught:
            parse_header(bad, env)
        assert caught.value.code == "gateway.bad_upstream"

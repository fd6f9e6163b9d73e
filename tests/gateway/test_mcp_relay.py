"""The byte relay of ``continuum gateway mcp`` (``gateway/relay.py``), through real
subprocesses: this test is the host, writing and reading raw JSON-RPC lines on the
gateway's stdio, and the upstream is ``mcp_relay_upstream.py``, which logs every line it
receives and answers in a byte form no SDK encoder produces.

No sleeps: every read is bounded with ``anyio.fail_after(BOUND)``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process

from continuum.gateway.relay import RESERVED_ID_PREFIX, open_stdio_upstream
from continuum.serving.flags import SERVER_BUSY
from continuum.serving.transport import DEFAULT_MAX_IN_FLIGHT

from .test_mcp_gateway import AGENT, BOUND, RUN, _env, gateway_command

pytestmark = pytest.mark.anyio

RELAY_UPSTREAM = str(Path(__file__).with_name("mcp_relay_upstream.py"))


def relay_gateway(*options: str) -> list[str]:
    return [*gateway_command(*options)[:-1], RELAY_UPSTREAM]


def request(request_id: Any, method: str, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def call(request_id: Any, tool: str, **arguments: Any) -> dict[str, Any]:
    return request(request_id, "tools/call", name=tool, arguments=arguments)


def cancel(request_id: Any) -> dict[str, Any]:
    params = {"requestId": request_id, "reason": "the host gave up"}
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}


class Host:
    """The host's end of one stdio connection: raw lines out, raw lines in."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self.received: list[bytes] = []  # every line read so far, in order
        self._buffer = b""

    async def send(self, *messages: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        data = b"".join(json.dumps(m).encode() + b"\n" for m in messages)
        await self.process.stdin.send(data)

    async def line(self) -> bytes:
        assert self.process.stdout is not None
        while b"\n" not in self._buffer:
            self._buffer += await self.process.stdout.receive()
        line, self._buffer = self._buffer.split(b"\n", 1)
        self.received.append(line)
        return line

    async def until(self, done: Callable[[dict[str, Any]], bool]) -> bytes:
        """Read lines until one satisfies ``done``; that line, raw."""
        with anyio.fail_after(BOUND):
            while True:
                line = await self.line()
                if done(json.loads(line)):
                    return line

    async def answer(self, request_id: Any) -> bytes:
        return await self.until(lambda m: "method" not in m and m.get("id") == request_id)

    async def answers(self, *ids: Any) -> dict[str, dict[str, Any]]:
        """The answers to all of ``ids`` (in any order), by ``json.dumps(id)``."""
        wanted = {json.dumps(i) for i in ids}
        found: dict[str, dict[str, Any]] = {}
        with anyio.fail_after(BOUND):
            while wanted - found.keys():
                message = json.loads(await self.line())
                key = json.dumps(message.get("id"))
                if "method" not in message and key in wanted:
                    assert key not in found, f"answered twice: {message}"
                    found[key] = message
        return found

    def answered(self, request_id: Any) -> bool:
        lines = (json.loads(line) for line in self.received)
        return any("method" not in m and m.get("id") == request_id for m in lines)

    async def initialize(self) -> None:
        hello = {"name": AGENT, "version": "1"}
        await self.send(
            request(
                "init",
                "initialize",
                protocolVersion="2025-06-18",
                capabilities={},
                clientInfo=hello,
            )
        )
        answer = json.loads(await self.answer("init"))
        assert "result" in answer, answer
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})


@asynccontextmanager
async def started(project: Path, command: list[str], **env: str) -> AsyncIterator[Host]:
    """The gateway started, its host side not yet spoken to (no handshake)."""
    with (project / "stderr.log").open("a", encoding="utf-8") as errlog:
        process = await anyio.open_process(
            command, cwd=project, env=_env(project, **env), stderr=errlog
        )
        try:
            yield Host(process)
        finally:
            assert process.stdin is not None
            await process.stdin.aclose()
            with anyio.move_on_after(BOUND):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
            await process.aclose()


@asynccontextmanager
async def host(project: Path, command: list[str], **env: str) -> AsyncIterator[Host]:
    """The gateway started, and the host's handshake done."""
    async with started(project, command, **env) as connection:
        await connection.initialize()
        yield connection


def upstream_log(project: Path) -> list[dict[str, Any]]:
    lines = (project / "upstream.log").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def ledger(answer: dict[str, Any]) -> dict[str, Any]:
    found = answer["result"].get("_meta", {}).get("continuum/ledger", {})
    assert isinstance(found, dict)
    return found


def text(answer: dict[str, Any]) -> str:
    return " ".join(c["text"] for c in answer["result"]["content"])


def log_env(project: Path) -> dict[str, str]:
    return {"UPSTREAM_LOG": str(project / "upstream.log")}


# -- byte identity ---------------------------------------------------------------------------


async def test_an_unregistered_calls_answer_reaches_the_host_byte_identical_to_the_upstreams(
    project: Path,
) -> None:
    message = call(7, "echo", said="hello")
    async with host(project, relay_gateway(), **log_env(project)) as gateway:
        await gateway.send(message)
        through = await gateway.answer(7)
    async with host(project, [sys.executable, RELAY_UPSTREAM], **log_env(project)) as direct:
        await direct.send(message)
        straight = await direct.answer(7)
    assert through == straight  # byte for byte what the upstream wrote
    assert b"caf\\u00e9" in through and through.startswith(b'{"result" : ')
    relayed = [m for m in upstream_log(project) if m.get("id") == 7]
    assert relayed == [message, message]  # the host's request reached the upstream as sent


async def test_negative_control_a_call_on_the_sdk_path_is_re_encoded_not_byte_identical(
    project: Path,
) -> None:
    """The byte check above can fail: a host id with the gateway's reserved prefix is never
    relayed, so the same call goes through the SDK and its answer is encoded again."""
    own = f"{RESERVED_ID_PREFIX}7"
    async with host(project, relay_gateway(), **log_env(project)) as gateway:
        await gateway.send(call(7, "echo", said="hello"))
        relayed = await gateway.answer(7)
        await gateway.send(call(own, "echo", said="hello"))
        re_encoded = await gateway.answer(own)
    assert json.loads(re_encoded)["result"]["content"] == json.loads(relayed)["result"]["content"]
    assert re_encoded.replace(json.dumps(own).encode(), b"7") != relayed
    assert "café".encode() in re_encoded and b"caf\\u00e9" not in re_encoded
    seen = [m["id"] for m in upstream_log(project) if m.get("method") == "tools/call"]
    assert seen[0] == 7 and seen[1] != own and str(seen[1]).startswith(RESERVED_ID_PREFIX)


async def test_with_a_tracer_provider_every_call_takes_the_sdk_path(project: Path) -> None:
    """A tracer provider installed: the SDK's middleware records a span for each request,
    so no call is relayed or taken past it (the upstream sees the gateway's own id, not the
    host's; without the provider the same call is relayed under the host's id, above)."""
    env = {"OTEL_PYTHON_TRACER_PROVIDER": "sdk_tracer_provider", **log_env(project)}
    async with host(project, relay_gateway(), **env) as gateway:
        await listed(gateway)
        await gateway.send(call(7, "echo", said="hello"))
        answer = json.loads(await gateway.answer(7))
        await gateway.send(call(8, "send_invoice", invoice_id="T-1", amount=1))
        registered = json.loads(await gateway.answer(8))
    assert text(answer) == 'echo café {"said": "hello"}'
    assert not registered["result"].get("isError"), registered
    seen = [m["id"] for m in upstream_log(project) if m.get("method") == "tools/call"]
    assert len(seen) == 2 and all(str(i).startswith(RESERVED_ID_PREFIX) for i in seen), seen


async def test_the_hosts_token_in_meta_is_not_relayed_but_its_progress_token_is(
    project: Path,
) -> None:
    secret = "host-token-for-the-gateway-0123456789"
    message = call(3, "echo", said="x")
    message["params"]["_meta"] = {"authToken": secret, "progressToken": "p-3"}
    async with host(project, relay_gateway(), **log_env(project)) as gateway:
        await gateway.send(message)
        answer = json.loads(await gateway.answer(3))
    assert answer["result"]["isError"] is False
    [sent] = [m for m in upstream_log(project) if m.get("id") == 3]
    assert sent["params"]["_meta"] == {"progressToken": "p-3"}
    assert secret not in (project / "upstream.log").read_text(encoding="utf-8")


# -- ids ------------------------------------------------------------------------------------


async def test_host_ids_that_collide_with_the_gateways_own_are_each_answered_correctly(
    project: Path,
) -> None:
    own = [f"{RESERVED_ID_PREFIX}{n}" for n in range(3)]
    async with host(project, relay_gateway(), **log_env(project)) as gateway:
        await gateway.send(
            request(own[0], "tools/list"),  # the SDK path: the gateway lists upstream itself
            call(0, "echo", said="zero"),
            call(1, "echo", said="one"),
            call(own[1], "echo", said="own one"),  # the SDK path: sent with a fresh own id
            call(2, "echo", said="two"),
            call("2", "echo", said="string two"),  # the same id to the SDK: not relayed
            call(own[2], "send_invoice", invoice_id="INV-1", amount=5),  # registered
            request(3, "tools/list"),
            call(4, "send_invoice", invoice_id="INV-2", amount=6),  # registered
        )
        found = await gateway.answers(0, 1, 2, "2", 3, 4, *own)
    assert text(found["0"]) == 'echo café {"said": "zero"}'
    assert text(found["1"]) == 'echo café {"said": "one"}'
    assert text(found["2"]) == 'echo café {"said": "two"}'
    assert text(found['"2"']) == 'echo café {"said": "string two"}'
    assert text(found[json.dumps(own[1])]) == 'echo café {"said": "own one"}'
    assert (
        text(found[json.dumps(own[2])]) == 'send_invoice café {"amount": 5, "invoice_id": "INV-1"}'
    )
    assert text(found["4"]) == 'send_invoice café {"amount": 6, "invoice_id": "INV-2"}'
    for listed in (found[json.dumps(own[0])], found["3"]):
        assert {t["name"] for t in listed["result"]["tools"]} >= {"echo", "hang"}
    # What went upstream: the relayed calls with the host's ids, everything else with ids
    # of the gateway's own reserved form, each once (the host's reserved ids never went up
    # as its own, though the gateway used the same strings there at the same time).
    sent = [m for m in upstream_log(project) if "id" in m]
    relayed = [m["id"] for m in sent if not str(m["id"]).startswith(RESERVED_ID_PREFIX)]
    assert sorted(relayed, key=str) == [0, 1, 2]
    gateways = [m["id"] for m in sent if str(m["id"]).startswith(RESERVED_ID_PREFIX)]
    assert len(gateways) == len(set(gateways)) and set(own) & set(gateways)


# -- no answer, a dead upstream --------------------------------------------------------------


async def test_an_unregistered_call_the_upstream_never_answers_gets_the_error_after_the_timeout(
    project: Path,
) -> None:
    async with host(project, relay_gateway("--timeout", "0.5"), **log_env(project)) as gateway:
        await gateway.send(call(1, "hang"))
        late = json.loads(await gateway.answer(1))
        await gateway.send(call(2, "echo", said="after"))  # the upstream reads in order:
        after = json.loads(await gateway.answer(2))  # by now it has read the cancel
    assert late["result"]["isError"] is True
    assert ledger(late)["refused"] == "upstream_bad_answer" and ledger(late)["tool"] == "hang"
    assert "gave no valid answer to 'hang'" in text(late)
    assert text(after) == 'echo café {"said": "after"}'
    cancels = [m for m in upstream_log(project) if m.get("method") == "notifications/cancelled"]
    assert [c["params"]["requestId"] for c in cancels] == [1]
    assert [json.loads(line).get("id") for line in gateway.received].count(1) == 1
    log = (project / "stderr.log").read_text(encoding="utf-8")
    assert "gateway.upstream_bad_answer" in log


async def test_the_upstream_dying_with_relayed_calls_open_answers_each_with_gone(
    project: Path,
) -> None:
    async with host(project, relay_gateway(), **log_env(project)) as gateway:
        await gateway.send(call(1, "hang"), call("b", "hang"), call(3, "echo", said="x"))
        await gateway.answer(3)  # the upstream has both hanging calls by now
        await gateway.send(call(4, "die"))
        found = await gateway.answers(1, "b", 4)
        await gateway.send(call(5, "echo", said="later"), request(6, "tools/list"))
        later = await gateway.answers(5, 6)
    for answer in (*found.values(), later["5"]):
        assert answer["result"]["isError"] is True
        assert ledger(answer)["refused"] == "upstream_gone"
    assert {ledger(a)["tool"] for a in found.values()} == {"hang", "die"}
    assert "echo" in {t["name"] for t in later["6"]["result"]["tools"]}  # still serving
    log = (project / "stderr.log").read_text(encoding="utf-8")
    assert "gateway.upstream_lost" in log


async def test_an_answer_to_a_relayed_call_that_is_not_json_rpc_gets_the_gateways_error(
    project: Path,
) -> None:
    # The upstream answers with the call's id but neither a result nor an error: the host
    # gets the answer the SDK path gives (upstream_bad_answer), not the upstream's line.
    async with host(project, relay_gateway(), **log_env(project)) as gateway:
        await gateway.send(call(1, "garble"))
        garbled = await gateway.answer(1)
        await gateway.send(call(2, "echo", said="after"))
        after = json.loads(await gateway.answer(2))
    answer = json.loads(garbled)
    assert b"oops" not in garbled
    assert answer["result"]["isError"] is True
    assert ledger(answer)["refused"] == "upstream_bad_answer"
    assert ledger(answer)["tool"] == "garble"
    assert "not a JSON-RPC 2.0 result or error" in text(answer)
    assert text(after) == 'echo café {"said": "after"}'  # the gateway serves on


async def test_a_write_the_upstream_no_longer_takes_answers_gone_and_never_hangs(
    project: Path,
) -> None:
    # The upstream closed its stdin but lives on with its stdout open: nothing ends, only
    # the gateway's next write fails. That call is answered (gone), as is every later one.
    async with host(project, relay_gateway(), **log_env(project)) as gateway:
        await gateway.send(call(1, "deaf"))
        heard = json.loads(await gateway.answer(1))
        await gateway.send(call(2, "echo", said="anyone?"))
        lost = json.loads(await gateway.answer(2))
        await gateway.send(call(3, "echo", said="still?"))
        later = json.loads(await gateway.answer(3))
    assert text(heard) == "not listening any more"
    for answer in (lost, later):
        assert answer["result"]["isError"] is True
        assert ledger(answer)["refused"] == "upstream_gone", answer
    log = (project / "stderr.log").read_text(encoding="utf-8")
    assert "gateway.upstream_lost" in log


# -- progress, cancel, the in-flight limit ---------------------------------------------------


async def test_progress_notifications_of_a_relayed_call_reach_the_host_as_sent(
    project: Path,
) -> None:
    message = call(9, "progress", steps=2)
    message["params"]["_meta"] = {"progressToken": "tok-9"}
    async with host(project, relay_gateway(), **log_env(project)) as gateway:
        await gateway.send(message)
        answer = json.loads(await gateway.answer(9))
        progress = [
            json.loads(line) for line in gateway.received if b"notifications/progress" in line
        ]
        raw = [line for line in gateway.received if b"notifications/progress" in line]
    assert text(answer) == "progressed"
    assert [p["params"]["progress"] for p in progress] == [1, 2]
    assert {p["params"]["progressToken"] for p in progress} == {"tok-9"}  # not the stray one
    assert all(line.startswith(b'{"method":"notifications/progress", ') for line in raw)


async def test_a_host_cancel_of_a_relayed_call_is_forwarded_and_the_call_never_answered(
    project: Path,
) -> None:
    async with host(project, relay_gateway(), **log_env(project)) as gateway:
        await gateway.send(call(5, "hang"))
        await gateway.send(cancel(5))  # the upstream answers it anyway, late
        await gateway.send(call(6, "echo", said="next"))
        await gateway.answer(6)  # the upstream wrote its late answer to 5 before this one
        assert not gateway.answered(5)
    cancels = [m for m in upstream_log(project) if m.get("method") == "notifications/cancelled"]
    assert cancels == [cancel(5)]
    log = (project / "stderr.log").read_text(encoding="utf-8")
    assert "gateway.upstream_stray_answer" in log  # the late answer was dropped


async def test_relayed_calls_count_against_the_in_flight_limit_until_settled(
    project: Path,
) -> None:
    limit = DEFAULT_MAX_IN_FLIGHT
    async with host(project, relay_gateway(), **log_env(project)) as gateway:
        await gateway.send(*(call(n, "hang") for n in range(limit)))
        await gateway.send(call("over", "echo", said="over"))
        busy = json.loads(await gateway.answer("over"))
        await gateway.send(cancel(0))  # one slot free again
        await gateway.send(call("room", "echo", said="room"))
        room = json.loads(await gateway.answer("room"))
    assert busy["error"]["code"] == SERVER_BUSY and busy["error"]["data"]["limit"] == limit
    assert text(room) == 'echo café {"said": "room"}'
    calls = [m for m in upstream_log(project) if m.get("method") == "tools/call"]
    assert len(calls) == limit + 1  # the refused one never went upstream


async def test_a_host_line_holding_a_key_twice_goes_upstream_as_judged(project: Path) -> None:
    """JSON leaves a repeated key to the parser: the gateway judges the last ``name``
    (an unregistered echo), so the upstream must get exactly that call, never the
    host's bytes where an upstream keeping the first ``name`` would run the registered
    ``send_invoice`` past the ledger."""
    raw = (
        b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"send_invoice",'
        b'"arguments":{"invoice_id":"X","amount":1},"name":"echo"}}\n'
    )
    async with host(project, relay_gateway(), **log_env(project)) as gateway:
        assert gateway.process.stdin is not None
        await gateway.process.stdin.send(raw)
        answer = json.loads(await gateway.answer(9))
    assert "result" in answer
    lines = (project / "upstream.log").read_text(encoding="utf-8").splitlines()
    [sent] = [line for line in lines if '"id":9' in line.replace(" ", "")]
    assert "send_invoice" not in sent and json.loads(sent)["params"]["name"] == "echo"


# -- registered calls the gateway takes from the host itself (past the SDK's server) ---------

REGISTERED_HANG = """\
run = "billing"

[[effect]]
tool = "send_invoice"
action_type = "send_invoice"
key = "invoice:{invoice_id}"

[[effect]]
tool = "hang"
action_type = "hang"
key = "hang:{n}"
"""


def actions_of(project: Path, run: str) -> dict[str, str]:
    from continuum.runtime.facade import Continuum

    with Continuum.open(str(project / "continuum.db"), create=False) as rt:
        return {a.action_key: str(a.status) for a in rt.actions(run)}


async def listed(gateway: Host) -> None:
    """tools/list through the SDK's server: from then on the gateway knows the host's
    handshake and takes registered calls itself."""
    await gateway.send(request("list", "tools/list"))
    assert "result" in json.loads(await gateway.answer("list"))


async def test_a_registered_call_the_gateway_takes_itself_is_recorded_once_and_repeated_from_the_ledger(
    project: Path,
) -> None:
    async with host(project, relay_gateway(), **log_env(project)) as gateway:
        await listed(gateway)
        await gateway.send(call(1, "send_invoice", invoice_id="INV-5", amount=5))
        first = json.loads(await gateway.answer(1))
        await gateway.send(call(2, "send_invoice", invoice_id="INV-5", amount=5))
        again = json.loads(await gateway.answer(2))
    assert text(first) == 'send_invoice café {"amount": 5, "invoice_id": "INV-5"}'
    assert ledger(first) == {} and ledger(again)["answered"] == "from_ledger"
    assert text(again) == text(first)
    # shaped as the SDK's server shapes a result for a handshake-era host: no 2026-07-28
    # resultType (the plain dump of a result carries one)
    assert "resultType" not in first["result"] and "resultType" not in again["result"]
    sent = [m for m in upstream_log(project) if m.get("method") == "tools/call"]
    assert len(sent) == 1  # the repeat never went upstream
    # the gateway's own id, never the host's; only the judged name and arguments
    assert str(sent[0]["id"]).startswith(RESERVED_ID_PREFIX)
    assert sent[0]["params"] == {
        "name": "send_invoice",
        "arguments": {"invoice_id": "INV-5", "amount": 5},
    }
    assert actions_of(project, RUN) == {"send_invoice:invoice:INV-5": "completed"}


async def test_a_registered_call_taken_by_the_gateway_still_needs_the_allowlist_and_the_token(
    project: Path,
) -> None:
    token = {"CONTINUUM_MCP_TOKEN": "s3cret-token-for-the-gateway"}
    async with host(project, relay_gateway(), **log_env(project), **token) as gateway:
        await listed(gateway)
        without = call(1, "send_invoice", invoice_id="A", amount=1)
        with_token = call(2, "send_invoice", invoice_id="B", amount=1)
        with_token["params"]["_meta"] = {"authToken": token["CONTINUUM_MCP_TOKEN"]}
        await gateway.send(without, with_token)
        found = await gateway.answers(1, 2)
    refused, passed = found["1"], found["2"]
    assert refused["result"]["isError"] and ledger(refused)["refused"].startswith("auth")
    assert not passed["result"].get("isError") and ledger(passed) == {}
    sent = [m for m in upstream_log(project) if m.get("method") == "tools/call"]
    assert [m["params"]["arguments"]["invoice_id"] for m in sent] == ["B"]
    assert all("_meta" not in m["params"] for m in sent)  # the host's token stays here


async def test_a_client_off_the_allowlist_has_registered_calls_refused_when_the_gateway_takes_them(
    project: Path,
) -> None:
    async with host(
        project, relay_gateway(), CONTINUUM_MCP_ALLOW="someone-else", **log_env(project)
    ) as gateway:
        await listed(gateway)
        await gateway.send(call(1, "send_invoice", invoice_id="A", amount=1))
        refused = json.loads(await gateway.answer(1))
        await gateway.send(call(2, "echo", said="reads pass"))
        read = json.loads(await gateway.answer(2))
    assert refused["result"]["isError"] and "was not called" in text(refused)
    assert text(read) == 'echo café {"said": "reads pass"}'
    sent = [m for m in upstream_log(project) if m.get("method") == "tools/call"]
    assert [m["params"]["name"] for m in sent] == ["echo"]


async def test_a_2026_envelope_naming_an_allowed_client_never_lends_its_name_to_the_call(
    project: Path,
) -> None:
    # On a handshake connection the SDK refuses a request carrying the 2026-07-28 envelope;
    # taken past the SDK, its clientInfo named the caller: a client off the allowlist
    # passed as an allowed one (a review found it; host_call now leaves it to the SDK).
    async with host(
        project, relay_gateway(), CONTINUUM_MCP_ALLOW="someone-else", **log_env(project)
    ) as gateway:
        await listed(gateway)
        message = call(1, "send_invoice", invoice_id="A", amount=1)
        message["params"]["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "someone-else", "version": "1"},
        }
        await gateway.send(message)
        refused = json.loads(await gateway.answer(1))
    assert refused["error"]["code"] == -32600, refused
    assert not [m for m in upstream_log(project) if m.get("method") == "tools/call"]


MODERN = "2026-07-28"


def envelope(client: str = AGENT, version: str = MODERN) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": client, "version": "1"},
    }


def enveloped(message: dict[str, Any], meta: dict[str, Any] | None) -> dict[str, Any]:
    if meta is not None:
        message["params"]["_meta"] = meta
    return message


# A 2026-07-28 host's conversation: (message, taken past the SDK). The first request opens
# the era (the SDK's); tools/list tells the gateway the host's session.
MODERN_SCRIPT: list[tuple[dict[str, Any], bool]] = [
    (enveloped(request("d", "server/discover"), envelope()), False),
    # before tools/list (the gateway has no host session yet): shaped by its own envelope
    (enveloped(call(0, "echo", said="early"), envelope()), True),
    (enveloped(request("list", "tools/list"), envelope()), False),
    (enveloped(call(1, "send_invoice", invoice_id="M-1", amount=1), envelope()), True),
    (enveloped(call(2, "send_invoice", invoice_id="M-1", amount=1), envelope()), True),
    (enveloped(call(3, "echo", said="reads pass"), {**envelope(), "progressToken": 9}), True),
    # another client's envelope: judged by its own name (off the allowlist: refused)
    (enveloped(call(4, "send_invoice", invoice_id="M-2", amount=1), envelope("other")), True),
    # the SDK's refusals: an unsupported version, no capabilities, no envelope at all
    (
        enveloped(call(5, "send_invoice", invoice_id="M-3", amount=1), envelope(version="2099")),
        False,
    ),
    (
        enveloped(
            call(6, "echo", said="x"),
            {**envelope(), "io.modelcontextprotocol/clientCapabilities": None},
        ),
        False,
    ),
    (call(7, "send_invoice", invoice_id="M-4", amount=1), False),
    (enveloped(call(8, "no_such_tool"), envelope()), False),  # not exposed: the SDK's answer
    # relayed, answered by the upstream in ways the gateway must reshape as the SDK path
    (enveloped(call(9, "garble"), envelope()), True),  # not a JSON-RPC answer
    (enveloped(call(10, "progress", steps=2), {**envelope(), "progressToken": "p"}), True),
    (enveloped(call(11, "fail"), envelope()), True),  # an error answer
    (enveloped(call(12, "notresult"), envelope()), True),  # not a tool's result
    (enveloped(call(13, "deep", depth=600), envelope()), True),  # too deep to dump
    (enveloped(request(14, "tools/call", name="echo"), envelope()), True),  # no arguments
    (enveloped(call(15, "echo", said="still served"), envelope()), True),
    (enveloped(call(16, "die"), envelope()), True),  # the upstream exits: gone, as answered
]


async def modern_conversation(project: Path, **env: str) -> tuple[list[dict[str, Any]], str]:
    """Every answer a fresh gateway gives the 2026-07-28 script, in order, and its stderr."""
    answers = []
    async with started(
        project,
        relay_gateway(),
        CONTINUUM_LOG_LEVEL="debug",
        **log_env(project),
        **env,
    ) as gateway:
        for message, _ in MODERN_SCRIPT:
            await gateway.send(message)
            answers.append(json.loads(await gateway.answer(message["id"])))
    assert gateway.process.returncode == 0, (project / "stderr.log").read_text()
    return answers, (project / "stderr.log").read_text(encoding="utf-8")


async def test_a_2026_hosts_calls_are_taken_and_answered_as_the_sdks_server_answers(
    project: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A host of the 2026-07-28 era (Claude Code's: no initialize, an envelope in every
    request): its calls of exposed tools are taken past the SDK's server, each judged by its
    own envelope, and every answer equals the one a gateway with a tracer provider (all
    on the SDK path) gives. (A first cut took such a host's call as a handshake one: the
    gateway crashed for want of the 2026-07-28 answer's serverInfo stamp, and a call
    without an envelope ran, named by another request's.)"""
    traced = tmp_path_factory.mktemp("traced")
    shutil.copytree(project, traced, dirs_exist_ok=True)
    taken, taken_log = await modern_conversation(project)
    through_sdk, sdk_log = await modern_conversation(
        traced, OTEL_PYTHON_TRACER_PROVIDER="sdk_tracer_provider"
    )
    expected = sum(1 for _, take in MODERN_SCRIPT if take)
    assert taken_log.count('"gateway.direct_call"') == expected, taken_log[-3000:]
    assert "gateway.direct_call" not in sdk_log
    for step, (ours, theirs) in enumerate(zip(taken, through_sdk, strict=True), start=1):
        assert ours == theirs, (step, ours, theirs)

    early = taken[1]
    first, again, read, other, *refused, unknown, garbled, progressed = taken[3:13]
    assert garbled["result"]["isError"] and "not a JSON-RPC" in text(garbled), garbled
    assert text(progressed) == "progressed" and progressed["result"]["resultType"] == "complete"
    failed, not_result, deep, bare, still, died = taken[13:]
    assert ledger(died)["refused"] == "upstream_gone", died
    assert failed["result"]["isError"] and "the upstream refused" in text(failed), failed
    assert not_result["result"]["isError"], not_result
    assert deep["error"]["code"] == -32603, deep  # the SDK's words; the upstream stays up
    assert text(bare) == "echo café {}" and text(still) == 'echo café {"said": "still served"}'
    assert early["result"]["resultType"] == "complete", early  # 2026-07-28, not handshake
    assert first["result"]["resultType"] == "complete" and not first["result"].get("isError")
    assert "serverInfo" in json.dumps(first["result"]["_meta"])
    assert ledger(again)["answered"] == "from_ledger"
    assert text(read) == 'echo café {"said": "reads pass"}'
    assert other["result"]["isError"] and ledger(other)["refused"].startswith("auth")
    assert [r["error"]["code"] for r in refused] == [-32022, -32602, -32602], refused
    assert unknown["result"]["isError"], unknown
    for where in (project, traced):
        sent = [m for m in upstream_log(where) if m.get("method") == "tools/call"]
        assert [m["params"]["arguments"] for m in sent] == [
            {"said": "early"},
            {"invoice_id": "M-1", "amount": 1},
            {"said": "reads pass"},
            {},
            {"steps": 2},
            {},
            {},
            {"depth": 600},
            {},
            {"said": "still served"},
            {},
        ]
        assert actions_of(where, RUN) == {"send_invoice:invoice:M-1": "completed"}


async def upstream_line(project: Path, wanted: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The first line the upstream logged that ``wanted`` accepts, once it has logged it
    (the log is read again until then, within ``BOUND``)."""
    with anyio.fail_after(BOUND):
        while True:
            if (project / "upstream.log").exists():
                found = [m for m in upstream_log(project) if wanted(m)]
                if found:
                    return found[0]
            await anyio.sleep(0.01)


@pytest.mark.parametrize("registered", [False, True], ids=["relayed", "taken"])
async def test_a_2026_hosts_cancel_reaches_its_call(project: Path, registered: bool) -> None:
    """A 2026-07-28 host's cancel is the gateway's to take for a call it relayed (passed
    upstream as it came, as a handshake host's) and for a registered one it runs itself:
    the upstream is told (under the host's id, or the gateway's own), and the call is
    never answered. (Left to the SDK, which does not know the call, a taken one would run
    on to its timeout, holding an in-flight slot.)"""
    if registered:
        (project / ".continuum" / "gateway.toml").write_text(REGISTERED_HANG, encoding="utf-8")
    async with started(project, relay_gateway(), **log_env(project)) as gateway:
        await gateway.send(enveloped(request("d", "server/discover"), envelope()))
        await gateway.answer("d")
        await gateway.send(enveloped(request("list", "tools/list"), envelope()))
        await gateway.answer("list")
        await gateway.send(enveloped(call(5, "hang", n=1), envelope()))
        sent = await upstream_line(project, lambda m: m.get("params", {}).get("name") == "hang")
        await gateway.send(cancel(5))
        told = await upstream_line(project, lambda m: m.get("method") == "notifications/cancelled")
        await gateway.send(enveloped(request("ping", "ping"), envelope()))
        await gateway.answer("ping")
        assert not gateway.answered(5)
    assert told["params"]["requestId"] == sent["id"]
    assert str(sent["id"]).startswith(RESERVED_ID_PREFIX) is registered, sent


async def test_a_registered_call_the_gateway_takes_without_an_answer_in_time_is_unknown(
    project: Path,
) -> None:
    (project / ".continuum" / "gateway.toml").write_text(REGISTERED_HANG, encoding="utf-8")
    command = relay_gateway("--timeout", "0.5")
    async with host(project, command, **log_env(project)) as gateway:
        await listed(gateway)
        await gateway.send(call(5, "hang", n=1))
        late = json.loads(await gateway.answer(5))
        await gateway.send(call(6, "hang", n=1))  # the same key again: refused, not sent
        retry = json.loads(await gateway.answer(6))
    assert late["result"]["isError"] and ledger(late)["refused"] == "unknown"
    assert retry["result"]["isError"] and ledger(retry)["refused"] == "unknown"
    [sent] = [m for m in upstream_log(project) if m.get("method") == "tools/call"]
    cancels = [m for m in upstream_log(project) if m.get("method") == "notifications/cancelled"]
    assert [c["params"]["requestId"] for c in cancels] == [sent["id"]]  # as the SDK cancels
    assert actions_of(project, RUN) == {"hang:1": "unknown"}


async def test_a_host_cancel_of_a_registered_call_the_gateway_took_is_never_answered(
    project: Path,
) -> None:
    (project / ".continuum" / "gateway.toml").write_text(REGISTERED_HANG, encoding="utf-8")
    async with host(project, relay_gateway(), **log_env(project)) as gateway:
        await listed(gateway)
        await gateway.send(call(5, "hang", n=1))
        await gateway.send(cancel(5))
        await gateway.send(call(6, "echo", said="next"))
        await gateway.answer(6)
        await gateway.send(request("ping", "ping"))
        await gateway.answer("ping")
        assert not gateway.answered(5)
    sent = [m for m in upstream_log(project) if m.get("method") == "tools/call"]
    cancels = [m for m in upstream_log(project) if m.get("method") == "notifications/cancelled"]
    # If the call went upstream before the cancel took it, the upstream was told to cancel
    # it, under the gateway's own id; the host's cancel itself is never passed on.
    hung = [m["id"] for m in sent if m["params"]["name"] == "hang"]
    assert [c["params"]["requestId"] for c in cancels] == hung
    # A cancel that lands before the call's intercept ran leaves nothing recorded (not even
    # the store, on a first call); otherwise the action is anything but completed.
    if (project / "continuum.db").exists():
        assert actions_of(project, RUN).get("hang:1") != "completed"
    else:
        assert hung == []


# -- the upstream's pipes (in process) ---------------------------------------------------


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")
async def test_the_upstreams_pipes_are_closed_at_the_end_its_stdin_first(tmp_path: Path) -> None:
    # The upstream reads to the end of its stdin and says so: the gateway's stop closed it
    # (the end the SDK's stdio_client gives too), not a kill; no descriptor is left open.
    said = tmp_path / "saw-the-end"
    script = tmp_path / "reads_to_the_end.py"
    script.write_text(
        "import sys, pathlib\n"
        "sys.stdin.buffer.read()\n"
        f"pathlib.Path({str(said)!r}).write_text('yes')\n",
        encoding="utf-8",
    )
    before = _open_fds()
    with anyio.fail_after(BOUND):
        async with open_stdio_upstream(
            [sys.executable, str(script)], timeout=5, env=dict(os.environ), errlog=sys.stderr
        ) as relay:
            assert not relay.busy
    assert said.read_text(encoding="utf-8") == "yes"
    assert _open_fds() == before


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")
async def test_a_write_the_upstream_never_reads_can_be_cancelled_and_does_not_hang_the_stop(
    tmp_path: Path,
) -> None:
    # The upstream never reads: a line larger than the pipe's buffer waits, whole, in the
    # event loop's buffer. Its sender can be cancelled (a write parked in a thread could
    # not be: this test hung with one), the stop ends the upstream after its grace period,
    # and every descriptor is closed.
    script = tmp_path / "never_reads.py"
    script.write_text("import time\ntime.sleep(600)\n", encoding="utf-8")
    before = _open_fds()
    with anyio.fail_after(BOUND):
        async with open_stdio_upstream(
            [sys.executable, str(script)], timeout=5, env=dict(os.environ), errlog=sys.stderr
        ) as relay:
            with anyio.move_on_after(0.5) as waited:
                await relay._send_upstream(b"x" * (1 << 20) + b"\n")
            assert waited.cancelled_caught  # it waited for room, and the wait was cancellable
    assert _open_fds() == before

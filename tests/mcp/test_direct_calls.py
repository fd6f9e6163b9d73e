"""The effect path's calls past the SDK's request pipeline (``mcp/direct_calls.py``).

The proof is a comparison: the same conversation, in raw JSON lines, with two real
``continuum-mcp`` processes on two fresh stores. One takes the effect path's calls past
the SDK's pipeline (its debug log says so); the other has an OpenTelemetry tracer
provider installed, which sends every call through the SDK's pipeline (its span must be
recorded). Every answer must be the same, byte for byte once the few per-process values
are set aside: successes, repeats, refusals, argument errors, domain errors, a denied
client, and a client on an older protocol version (each version's results pass the SDK's
sieve of that version's fields; a unit test below is the control that the sieve is applied).
"""

from __future__ import annotations

import inspect
import json
import re
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    INVALID_PARAMS,
    PROTOCOL_VERSION_META_KEY,
    UNSUPPORTED_PROTOCOL_VERSION,
    CallToolResult,
    TextContent,
)

from continuum.mcp.direct_calls import DIRECT_TOOLS
from continuum.mcp.tools import Tools, tool_table
from continuum.serving.host_calls import wire_result as _wire_result
from tests.mcp.conftest import ServerSite, initialize_request, tool_call

pytestmark = pytest.mark.anyio

ALLOWED = "raw-agent"
SDK_PATH = {"OTEL_PYTHON_TRACER_PROVIDER": "sdk_tracer_provider"}  # a real provider: SDK path

ENVELOPE = {
    PROTOCOL_VERSION_META_KEY: "2026-07-28",
    CLIENT_CAPABILITIES_META_KEY: {},
    CLIENT_INFO_META_KEY: {"name": ALLOWED, "version": "1"},
}

INTERCEPT = "continuum_intercept_action"
COMPLETE = "continuum_complete_action"
FAIL = "continuum_fail_action"


def script() -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
    """(tool, arguments, _meta) in order: every kind of answer the three tools give."""
    run = {"run_id": "r1"}
    return [
        ("continuum_record_progress", {**run, "goal": "send invoices", "total": 3}, None),
        (
            INTERCEPT,
            {
                **run,
                "action_type": "send_invoice",
                "key": "invoice:1",
                "arguments": {"to": "a@example.com", "amount": 12.5},
            },
            None,
        ),
        (
            INTERCEPT,
            {
                **run,
                "action_type": "send_invoice",
                "key": "invoice:1",
                "arguments": {"to": "a@example.com", "amount": 12.5},
            },
            None,
        ),
        (
            COMPLETE,
            {
                **run,
                "action_key": "invoice:1",
                "external_id": "x-1",
                "result": {"ok": True, "note": "\u202eevil\u202c"},
                "cost_usd": 0.02,
            },
            None,
        ),
        (
            INTERCEPT,
            {
                **run,
                "action_type": "send_invoice",
                "key": "invoice:1",
                "arguments": {"to": "a@example.com", "amount": 12.5},
            },
            {"progressToken": "p-1"},
        ),
        (COMPLETE, {**run, "action_key": "invoice:1"}, None),  # settled stays settled
        (
            INTERCEPT,
            {
                **run,
                "action_type": "send_invoice",
                "key": "invoice:2",
                "replay": "never",
                "estimate_tokens": 10,
            },
            None,
        ),
        (
            FAIL,
            {**run, "action_key": "invoice:2", "error": "refused by the bank", "certain": True},
            None,
        ),
        (FAIL, {**run, "action_key": "nope"}, None),  # unknown action
        (COMPLETE, {"run_id": "missing", "action_key": "invoice:1"}, None),  # unknown run
        (INTERCEPT, {**run, "action_type": "x", "arguments": "not an object"}, None),
        (INTERCEPT, {**run, "action_type": "x", "keyy": "k"}, None),  # unknown argument
        (INTERCEPT, {**run, "action_type": "x", "estimate_usd": True}, None),  # strict number
        (INTERCEPT, {**run, "action_type": "x", "arguments": _deep(80)}, None),
        (INTERCEPT, {**run, "action_type": ""}, None),  # too short
        (COMPLETE, {**run}, None),  # missing action_key
        # a 2026-07-28 envelope naming an allowed client, on a handshake connection: the
        # SDK refuses it before any handler (never a way to borrow another client's name)
        (FAIL, {**run, "action_key": "invoice:1", "certain": True}, ENVELOPE),
    ]


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"a": value}
    return value


# Values that differ from one process to another, not from one path to another.
_VOLATILE = re.compile(
    r'(\\?"(?:lease_owner|owner|started_at|completed_at|recorded_at|at|'
    r'lease_expires_at|created_at|updated_at)\\?": ?)(\\?"[^"\\]*\\?"|[0-9.]+)'
)


def _comparable(answer: dict[str, Any]) -> str:
    text = json.dumps(answer, sort_keys=True)
    return _VOLATILE.sub(r"\1<varies>", text)


async def converse(
    site: ServerSite, *, client: str, version: str
) -> tuple[list[dict[str, Any]], str]:
    """Every message a fresh server at ``site`` writes after the handshake while it answers
    the script, notifications included, in order; and its stderr."""
    init = initialize_request(client)
    init["params"]["protocolVersion"] = version
    messages = []
    async with site.raw(initialize=init) as server:
        for n, (tool, arguments, meta) in enumerate(script(), start=1):
            await server.send(tool_call(n, tool, arguments, meta))
            while (message := await server.receive()).get("id") != n:
                messages.append(message)
            messages.append(message)
    return messages, site.stderr()


def taken_steps() -> int:
    """How many of the script's calls the direct path takes: the effect path's, without
    an envelope."""
    return sum(1 for tool, _, meta in script() if tool in DIRECT_TOOLS and meta is not ENVELOPE)


def two_sites(tmp_path: Any, name: str) -> tuple[ServerSite, ServerSite]:
    sites = []
    for path, extra in (("direct", {}), ("sdk", SDK_PATH)):
        work = tmp_path / f"{name}-{path}"
        work.mkdir()
        env = {"CONTINUUM_MCP_MUTATING_CLIENTS": ALLOWED, **extra}
        sites.append(
            ServerSite(db=work / "store.db", cwd=work, env=env, extra_args=("--log-level", "debug"))
        )
    return sites[0], sites[1]


@pytest.mark.parametrize(
    ("client", "version"),
    [(ALLOWED, "2025-11-25"), (ALLOWED, "2025-03-26"), ("a-stranger", "2025-11-25")],
)
async def test_the_effect_path_answers_exactly_as_the_sdk_pipeline_does(
    tmp_path: Any, client: str, version: str
) -> None:
    direct_site, sdk_site = two_sites(tmp_path, f"{client}-{version}")
    direct, direct_log = await converse(direct_site, client=client, version=version)
    through_sdk, sdk_log = await converse(sdk_site, client=client, version=version)

    # Which path each call took: the direct one logs each call it takes; the traced one
    # takes none.
    assert direct_log.count('"mcp.direct_call"') == taken_steps(), direct_log[-3000:]
    assert "mcp.direct_call" not in sdk_log, sdk_log[-2000:]

    assert len(direct) == len(through_sdk) >= len(script())
    for step, (ours, theirs) in enumerate(zip(direct, through_sdk, strict=True), start=1):
        assert _comparable(ours) == _comparable(theirs), (step, ours, theirs)
    refused = direct[-1]  # the envelope on a handshake connection
    assert refused["error"]["code"] == -32600, refused

    # The script is not vacuous: it met successes and every kind of refusal.
    results = [a["result"] for a in direct if "result" in a and "content" in a["result"]]
    errors = [r for r in results if r.get("isError")]
    if client == ALLOWED:
        assert any(r.get("isError") is not True for r in results[1:])
        assert len(errors) >= 8, errors
        assert any("structuredContent" in r for r in results)
    else:  # denied by default: every call refused (well-formed ones naming the allowlist)
        assert len(errors) == len(script()) - 1, errors  # and the envelope's -32600
        denied = [r for r in errors if "CONTINUUM_MCP_MUTATING_CLIENTS" in json.dumps(r)]
        assert len(denied) >= 8, errors


async def test_a_no_op_tracer_provider_keeps_the_direct_path(tmp_path: Any) -> None:
    work = tmp_path / "noop"
    work.mkdir()
    site = ServerSite(
        db=work / "store.db",
        cwd=work,
        env={
            "CONTINUUM_MCP_MUTATING_CLIENTS": ALLOWED,
            "OTEL_PYTHON_TRACER_PROVIDER": "default_tracer_provider",
        },
        extra_args=("--log-level", "debug"),
    )
    answers, log = await converse(site, client=ALLOWED, version="2025-11-25")
    assert log.count('"mcp.direct_call"') == taken_steps()
    assert answers[1]["result"]["structuredContent"]["proceed"] is True


def envelope(client: str, version: str = "2026-07-28") -> dict[str, Any]:
    return {
        PROTOCOL_VERSION_META_KEY: version,
        CLIENT_CAPABILITIES_META_KEY: {},
        CLIENT_INFO_META_KEY: {"name": client, "version": "1"},
    }


def modern_script(client: str) -> list[tuple[str, dict[str, Any], dict[str, Any] | None, bool]]:
    """The script on a 2026-07-28 connection: (tool, arguments, _meta, taken). Every call
    carries its own envelope; then what only this era has: a call naming another client
    (identity is per request), an unsupported version, an envelope missing its
    capabilities, and a call with no envelope at all (the last three are the SDK's
    refusals, so never taken)."""
    own = envelope(client)
    steps: list[tuple[str, dict[str, Any], dict[str, Any] | None, bool]] = []
    for tool, arguments, meta in script()[:-1]:  # the handshake's envelope step aside
        steps.append((tool, arguments, {**own, **(meta or {})}, tool in DIRECT_TOOLS))
    run = {"run_id": "r1"}
    again = {
        **run,
        "action_type": "send_invoice",
        "key": "invoice:3",
        "arguments": {"to": "c@example.com"},
    }
    missing = {k: v for k, v in own.items() if k != CLIENT_CAPABILITIES_META_KEY}
    steps += [
        (INTERCEPT, again, envelope("another-agent"), True),  # not on the allowlist
        (INTERCEPT, again, envelope(client, "2099-01-01"), False),
        (INTERCEPT, again, missing, False),
        (INTERCEPT, again, None, False),
        (INTERCEPT, again, {**own, "progressToken": 7}, True),
    ]
    return steps


async def converse_modern(
    site: ServerSite, *, client: str, opening: str
) -> tuple[list[dict[str, Any]], str]:
    """As ``converse``, on a connection the client opens in the 2026-07-28 era, as Claude
    Code does (``server/discover`` first) or with the script's first call."""
    messages = []
    async with site.raw() as server:
        if opening == "discover":
            discover = {
                "jsonrpc": "2.0",
                "id": "d",
                "method": "server/discover",
                "params": {"_meta": envelope(client)},
            }
            messages.append(await server.request(discover))
        else:  # an effect call opens the era: the SDK's to answer (its run is not yet
            # started: an error result), never taken
            arguments = {"run_id": "r1", "action_type": "send_invoice", "key": "invoice:0"}
            opener = tool_call("o", INTERCEPT, arguments, envelope(client))
            messages.append(await server.request(opener))
        for n, (tool, arguments, meta, _) in enumerate(modern_script(client), start=1):
            await server.send(tool_call(n, tool, arguments, meta))
            while (message := await server.receive()).get("id") != n:
                messages.append(message)
            messages.append(message)
    return messages, site.stderr()


@pytest.mark.parametrize(
    ("client", "opening"),
    [(ALLOWED, "discover"), (ALLOWED, "call"), ("a-stranger", "discover")],
)
async def test_a_2026_connection_is_answered_exactly_as_the_sdk_pipeline_does(
    tmp_path: Any, client: str, opening: str
) -> None:
    """Claude Code opens its connection in the 2026-07-28 era (``server/discover``, an
    envelope on every request): its effect calls are taken too, each judged by its own
    envelope as the SDK judges it, and answered byte for byte as the SDK answers."""
    direct_site, sdk_site = two_sites(tmp_path, f"modern-{client}-{opening}")
    direct, direct_log = await converse_modern(direct_site, client=client, opening=opening)
    through_sdk, sdk_log = await converse_modern(sdk_site, client=client, opening=opening)

    taken = sum(1 for *_, take in modern_script(client) if take)  # the opener: never
    assert direct_log.count('"mcp.direct_call"') == taken, direct_log[-3000:]
    assert "mcp.direct_call" not in sdk_log, sdk_log[-2000:]

    assert len(direct) == len(through_sdk) >= len(modern_script(client))
    for step, (ours, theirs) in enumerate(zip(direct, through_sdk, strict=True), start=1):
        assert _comparable(ours) == _comparable(theirs), (step, ours, theirs)

    # Each client the server met is logged once, by both (the other agent met only in a
    # taken call included).
    def clients(log: str) -> list[tuple[str, str]]:
        lines = [json.loads(x) for x in log.splitlines() if '"mcp.client_connected"' in x]
        return sorted((e["client"], e["mutating"]) for e in lines)

    assert clients(direct_log) == clients(sdk_log)
    assert ("another-agent", "denied") in clients(direct_log)

    # Not vacuous: results of the 2026-07-28 shape, successes and refusals, the SDK's
    # own errors for the envelopes it refuses.
    results = [a["result"] for a in direct if "result" in a and "content" in a["result"]]
    assert all(r["resultType"] == "complete" for r in results)
    assert all("serverInfo" in json.dumps(r["_meta"]) for r in results)
    errors = [a["error"]["code"] for a in direct if "error" in a]
    assert errors == [UNSUPPORTED_PROTOCOL_VERSION, INVALID_PARAMS, INVALID_PARAMS], errors
    started = [r for r in results if r.get("structuredContent", {}).get("proceed")]
    if client == ALLOWED:  # invoice:1, invoice:2, invoice:3 at last under its own name
        assert len(started) == 3, results  # (the opener's run did not exist yet)
    else:
        assert not started, results


def test_the_direct_tools_are_the_effect_path_and_never_talk_to_the_client() -> None:
    """A taken call's context is not tied to its request (``direct_calls.py``): its tool
    must neither report progress nor log to the client, nor reach the session otherwise."""
    assert {INTERCEPT, COMPLETE, FAIL} == DIRECT_TOOLS
    by_name = {spec.name: method for spec, method in tool_table()}
    used = [getattr(Tools, by_name[name]) for name in DIRECT_TOOLS]
    used += [Tools.acting, Tools.authorize, Tools.writer, Tools.domain_errors]
    for fn in used:
        source = inspect.getsource(fn)
        # ctx passed along (to the caller's and the grant's readers) only, never used
        for talk in (r"\bctx\.", r"report_progress", r"\.send_\w*\("):
            assert not re.search(talk, source), (fn.__name__, talk)


def test_a_result_is_sieved_by_the_negotiated_version() -> None:
    """The control that the version's sieve is applied: the plain dump of a result carries
    the 2026-07-28 ``resultType``, which no handshake-era answer of the SDK's has."""
    result = CallToolResult(
        content=[TextContent(type="text", text="{}")], structured_content={"a": 1}
    )
    plain = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    assert plain["resultType"] == "complete"
    for version in ("2025-03-26", "2025-11-25"):
        wire = _wire_result(result, version)
        assert "resultType" not in wire
        assert wire["structuredContent"] == {"a": 1}
        assert wire["content"] == [{"type": "text", "text": "{}"}]


def test_anything_but_a_tool_result_is_the_sdks_invalid_result_error() -> None:
    with pytest.raises(MCPError) as caught:
        _wire_result(TextContent(type="text", text="x"), "2025-11-25")
    assert caught.value.error.message == "Handler returned an invalid result"


async def test_a_connection_the_sdk_never_initialized_is_never_taken(tmp_path: Any) -> None:
    """No ``initialize``, and a ``notifications/initialized`` the SDK drops as malformed:
    the SDK's gate stays shut, so a call is its ``-32602``, on the SDK path (a first cut
    remembered the session before the SDK had judged the notification and ran the tool)."""
    direct_site, _ = two_sites(tmp_path, "uninitialized")
    async with direct_site.raw() as server:
        await server.send(
            {"jsonrpc": "2.0", "method": "notifications/initialized", "params": {"_meta": 5}}
        )
        await server.ping("p")
        listed = await server.request({"jsonrpc": "2.0", "id": "l", "method": "tools/list"})
        answer = await server.request(
            tool_call("c", INTERCEPT, {"run_id": "r1", "action_type": "x"})
        )
    assert listed["error"]["code"] == -32602 and answer["error"]["code"] == -32602, answer
    assert "mcp.direct_call" not in direct_site.stderr()

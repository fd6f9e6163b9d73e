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

import json
import re
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent

from continuum.mcp.direct_calls import DIRECT_TOOLS
from continuum.serving.host_calls import wire_result as _wire_result
from tests.mcp.conftest import ServerSite, initialize_request, tool_call

pytestmark = pytest.mark.anyio

ALLOWED = "raw-agent"
SDK_PATH = {"OTEL_PYTHON_TRACER_PROVIDER": "sdk_tracer_provider"}  # a real provider: SDK path

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
    ]


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"a": value}
    return value


# Values that differ from one process to another, not from one path to another.
_VOLATILE = re.compile(
    r'(\\?"(?:action_id|lease_owner|owner|started_at|completed_at|recorded_at|at|'
    r'lease_expires_at|created_at|updated_at)\\?": ?)(\\?"[^"\\]*\\?"|[0-9.]+)'
)


def _comparable(answer: dict[str, Any]) -> str:
    text = json.dumps(answer, sort_keys=True)
    return _VOLATILE.sub(r"\1<varies>", text)


async def converse(
    site: ServerSite, *, client: str, version: str
) -> tuple[list[dict[str, Any]], str]:
    """The script's answers from a fresh server at ``site``, and its stderr."""
    init = initialize_request(client)
    init["params"]["protocolVersion"] = version
    answers = []
    async with site.raw(initialize=init) as server:
        for n, (tool, arguments, meta) in enumerate(script(), start=1):
            answers.append(await server.request(tool_call(n, tool, arguments, meta)))
    return answers, site.stderr()


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

    # Which path each took: the direct one says so once; the traced one never takes it.
    assert direct_log.count("mcp.direct_calls") == 1, direct_log[-2000:]
    assert "mcp.direct_calls" not in sdk_log, sdk_log[-2000:]

    assert len(direct) == len(through_sdk) == len(script())
    for step, (ours, theirs) in enumerate(zip(direct, through_sdk, strict=True), start=1):
        assert _comparable(ours) == _comparable(theirs), (step, ours, theirs)

    # The script is not vacuous: it met successes and every kind of refusal.
    results = [a["result"] for a in direct if "result" in a]
    errors = [r for r in results if r.get("isError")]
    if client == ALLOWED:
        assert any(r.get("isError") is not True for r in results[1:])
        assert len(errors) >= 8, errors
        assert any("structuredContent" in r for r in results)
    else:  # denied by default: every call refused (well-formed ones naming the allowlist)
        assert len(errors) == len(script()), errors
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
    assert "mcp.direct_calls" in log
    assert answers[1]["result"]["structuredContent"]["proceed"] is True


def test_the_direct_tools_are_the_effect_path() -> None:
    assert {INTERCEPT, COMPLETE, FAIL} == DIRECT_TOOLS


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

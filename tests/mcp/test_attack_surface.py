"""Reliability rows F14-F18 (notes/reliability-matrix.md) against the real ``continuum-mcp``.

Each row prints its figure line (run ``pytest -s`` to see them) and keeps a negative
control proving its harness can see the failure it counts.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest

from continuum.errors import UsageError
from continuum.mcp.server import main as server_main
from continuum.mcp.tools import MAX_JSON_DEPTH
from continuum.runtime.facade import Continuum
from continuum.serving.auth import POLICY_FILE
from continuum.serving.secrets import ALLOW_ENV, CLIENT_TOKENS_ENV, CONFIRM_TOKEN_ENV
from continuum.state.environment import declarations
from continuum.store import open_store
from tests.mcp.confirm_support import attempt_counter, confirm_notices, runs_record
from tests.mcp.conftest import (
    BOUND,
    MODES,
    MUTATING_TOOLS,
    TOOL_NAMES,
    RawServer,
    ServerSite,
    assert_stdout_is_only_json_rpc,
    envelope,
    initialize_request,
    line,
    result_text,
    seed_store,
    server_command,
    server_env,
    stderr_lines,
    store_bytes,
    tool_call,
    tree_state,
)
from tests.mcp.request_meta import request_meta

pytestmark = pytest.mark.anyio

SECRET = "agent-secret-5d2e"
OTHER_SECRET = "other-secret-0b7c"
CONFIRM_SECRET = "human-secret-c4a8-0123456789abcdef"  # >= 32 characters (issue 30)


def figure(text: str) -> None:
    print(f"\n{text}")


# --- F14: malformed JSON-RPC ------------------------------------------------------

PING = b'{"jsonrpc":"2.0","id":7,"method":"ping"}'
# (label, line, expected error code, expected id in the answer)
MALFORMED: list[tuple[str, bytes, int, int | str | None]] = [
    ("truncated JSON", b'{"jsonrpc":"2.0","id":7,"method":"pi', -32700, None),
    ("trailing garbage", PING + b" x", -32700, None),
    ("single quotes", b"{'jsonrpc':'2.0','id':7,'method':'ping'}", -32700, None),
    ("invalid UTF-8", b'{"jsonrpc":"2.0","id":7,"method":"p\xffing"}', -32700, None),
    ("bare invalid bytes", b"\xff\xfe\x00\x01", -32700, None),
    ("NaN", b'{"jsonrpc":"2.0","id":7,"method":"ping","params":{"x":NaN}}', -32700, None),
    (
        "Infinity",
        b'{"jsonrpc":"2.0","id":7,"method":"ping","params":{"x":-Infinity}}',
        -32700,
        None,
    ),
    ("lone surrogate", b'{"jsonrpc":"2.0","id":7,"method":"\\udc00"}', -32700, None),
    ("nested too deep", b"[" * 50_000, -32700, None),
    ("NUL byte", b"\x00", -32700, None),
    ("number", b"42", -32600, None),
    ("string", b'"ping"', -32600, None),
    ("null", b"null", -32600, None),
    ("boolean", b"true", -32600, None),
    ("batch array", b"[" + PING + b"]", -32600, None),
    ("empty batch", b"[]", -32600, None),
    ("empty object", b"{}", -32600, None),
    ("missing jsonrpc", b'{"id":7,"method":"ping"}', -32600, 7),
    ("jsonrpc 1.0", b'{"jsonrpc":"1.0","id":7,"method":"ping"}', -32600, 7),
    ("jsonrpc as a number", b'{"jsonrpc":2.0,"id":7,"method":"ping"}', -32600, 7),
    ("id null in a request", b'{"jsonrpc":"2.0","id":null,"method":"ping"}', -32600, None),
    ("id float", b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', -32600, None),
    ("id boolean", b'{"jsonrpc":"2.0","id":false,"method":"ping"}', -32600, None),
    ("id array", b'{"jsonrpc":"2.0","id":[7],"method":"ping"}', -32600, None),
    ("method a number", b'{"jsonrpc":"2.0","id":7,"method":7}', -32600, 7),
    ("method null", b'{"jsonrpc":"2.0","id":7,"method":null}', -32600, 7),
    ("params a string", b'{"jsonrpc":"2.0","id":7,"method":"ping","params":"x"}', -32600, 7),
    ("params a number", b'{"jsonrpc":"2.0","id":7,"method":"ping","params":1}', -32600, 7),
    ("params an array", b'{"jsonrpc":"2.0","id":7,"method":"tools/list","params":[]}', -32602, 7),
    ("response without id", b'{"jsonrpc":"2.0","result":{}}', -32600, None),
    (
        "error response without id",
        b'{"jsonrpc":"2.0","error":{"code":1,"message":"m"}}',
        -32600,
        None,
    ),
    ("neither method nor result", b'{"jsonrpc":"2.0","id":7}', -32600, 7),
    ("result and error", b'{"jsonrpc":"2.0","id":7,"result":{},"error":{}}', -32600, 7),
    ("result not an object", b'{"jsonrpc":"2.0","id":7,"result":[]}', -32600, 7),
    ("malformed error object", b'{"jsonrpc":"2.0","id":7,"error":{"code":"x"}}', -32600, 7),
    ("unknown method", b'{"jsonrpc":"2.0","id":7,"method":"no/such/method"}', -32601, 7),
    (
        "tools/call without a name",
        b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{}}',
        -32602,
        7,
    ),
    (
        "tools/call name a number",
        b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":5}}',
        -32602,
        7,
    ),
    (
        "tools/call arguments a string",
        b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"continuum_resume",'
        b'"arguments":"run_id=r1"}}',
        -32602,
        7,
    ),
    (
        "tools/list cursor a number",
        b'{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"cursor":5}}',
        -32602,
        7,
    ),
    ("_meta a number", b'{"jsonrpc":"2.0","id":7,"method":"ping","params":{"_meta":5}}', -32602, 7),
    (
        "2026 envelope on a handshake connection",
        line(tool_call(7, "continuum_resume", {}, envelope("agent"))).rstrip(b"\n"),
        -32600,
        7,
    ),
]


async def _sync(server: RawServer, tag: str, seen: dict[str, int]) -> list[dict[str, Any]]:
    """Send a ping and collect every message until its answer; count answers by id.
    (A tool call may be answered after a later ping: tool calls run concurrently.)"""
    await server.send({"jsonrpc": "2.0", "id": tag, "method": "ping"})
    before: list[dict[str, Any]] = []
    while (message := await server.receive()).get("id") != tag:
        before.append(message)
        key = json.dumps(message.get("id"))
        seen[key] = seen.get(key, 0) + 1
    assert message.get("result") == {}, message
    return before


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _expected_answer(raw: bytes) -> tuple[str, Any]:
    """What JSON-RPC 2.0 requires for one line: ("id", X) an answer with id X, ("null", None)
    an error answer with id null, ("optional", None) none required (a notification, a
    response, a blank line: an error answer with id null is tolerated for malformed ones)."""
    if not raw.strip(b" \t\r"):
        return "optional", None
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constants)
        json.dumps(data, ensure_ascii=False).encode("utf-8")  # a lone surrogate fails here
    except (ValueError, RecursionError, UnicodeError):
        return "null", None
    if not isinstance(data, dict):
        return "null", None
    ident = data.get("id")
    valid_id = isinstance(ident, str) or (isinstance(ident, int) and not isinstance(ident, bool))
    if "method" in data:
        if "id" not in data:
            return "optional", None
        return ("id", ident) if valid_id else ("null", None)
    return "optional", None  # a response: the server answers none, or an error if malformed


SEEDS: list[dict[str, Any]] = [
    {"jsonrpc": "2.0", "id": 1, "method": "ping"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
    tool_call(3, "continuum_resume", {}),
    tool_call(4, "continuum_resume", {"run_id": "r1", "env": {"dataset": "v2"}}),
    tool_call(5, "continuum_list_actions", {"run_id": "r1"}),
    tool_call(6, "continuum_validate", {"run_id": "r1", "env": {"dataset": "v1"}}),
    tool_call(7, "continuum_record_progress", {"run_id": "r1", "completed": 2, "goal": "g"}),
    tool_call(
        8,
        "continuum_intercept_action",
        {"run_id": "r1", "action_type": "send", "arguments": {"to": "a", "n": [1, 2]}, "key": "k"},
    ),
    tool_call(9, "continuum_confirm", {"run_id": "r1"}, {"confirmToken": "x", "authToken": "y"}),
    {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}},
]
JUNK_VALUES: list[Any] = [
    None,
    0,
    -1,
    2**70,
    1.5,
    "",
    "x" * 300,
    "\u0000",
    "é☃",
    [],
    {},
    True,
    [[[[]]]],
    {"a": {"b": None}},
    "null",
    "1e999",
]
JUNK_BYTES = [
    b"\x00",
    b"\xff",
    b"\xc3",
    b'"',
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\\",
    b"\\u",
    b"\r",
    b" ",
    b"NaN",
    b"\xed\xa0\x80",
]


def _json_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    paths = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            paths += _json_paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            paths += _json_paths(v, (*prefix, i))
    return paths


def _mutate(rng: random.Random, seed: dict[str, Any], request_id: int) -> bytes:
    message = json.loads(json.dumps(seed))
    if "id" in message:
        message["id"] = request_id  # unique ids, so late answers cannot be mistaken
    kind = rng.randrange(8)
    if kind < 3:  # a JSON-level change: replace, delete or add one node
        paths = _json_paths(message)[1:]
        path = rng.choice(paths)
        parent = message
        for step in path[:-1]:
            parent = parent[step]
        if kind == 0:
            parent[path[-1]] = rng.choice(JUNK_VALUES)
        elif kind == 1 and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[rng.choice(["id", "method", "params", "result", "error", "_meta", "zz"])] = (
                rng.choice(JUNK_VALUES)
            )
        encoded = json.dumps(message).encode()
        return encoded if kind != 2 or rng.random() < 0.8 else b"[" + encoded + b"]"
    data = bytearray(json.dumps(message).encode())
    pos = rng.randrange(len(data))
    if kind == 3:  # flip a byte
        data[pos] = rng.randrange(256)
    elif kind == 4:  # delete a span
        del data[pos : pos + rng.randrange(1, 12)]
    elif kind == 5:  # insert junk
        data[pos:pos] = rng.choice(JUNK_BYTES)
    elif kind == 6:  # truncate
        del data[pos:]
    else:  # duplicate a span
        data[pos:pos] = data[pos : pos + rng.randrange(1, 20)]
    return bytes(data).replace(b"\n", b" ")  # one line stays one line


async def test_f14_malformed_json_rpc_is_always_answered_and_the_server_keeps_serving(
    site: ServerSite,
) -> None:
    seed_store(site.db)
    before = store_bytes(site.db)  # no allowlist: nothing the fuzzer sends may write
    seen: dict[str, int] = {}  # answers received, by JSON-encoded id
    due: dict[str, int] = {}  # answers required, by JSON-encoded id
    rng = random.Random(1414)
    counts = {"answered": 0, "optional": 0, "silent_required": 0}
    with anyio.fail_after(BOUND * 2):
        async with site.raw(initialize=initialize_request("fuzzer")) as server:
            for label, raw, code, echoed in MALFORMED:
                await server.send(raw + b"\n")
                answer = await server.receive()
                assert (answer.get("id"), answer["error"]["code"]) == (echoed, code), label
                await server.ping(f"after {label}")
            # Negative control: a well-formed request is answered with a result, not an error.
            assert "result" in await server.request(tool_call("control", "continuum_resume", {}))

            for n in range(400):
                raw = _mutate(rng, rng.choice(SEEDS), 10_000 + n)
                expected, ident = _expected_answer(raw)
                await server.send(raw + b"\n")
                before_sync = await _sync(server, f"sync-{n}", seen)
                if expected == "null":
                    ok = any(m.get("id") is None and "error" in m for m in before_sync)
                elif expected == "id":
                    key = json.dumps(ident)
                    due[key] = due.get(key, 0) + 1  # a mutated id may repeat an earlier one
                    while seen.get(key, 0) < due[key]:  # its answer may come after the ping's
                        answer_id = json.dumps((await server.receive()).get("id"))
                        seen[answer_id] = seen.get(answer_id, 0) + 1
                    ok = True
                else:
                    counts["optional"] += 1
                    continue
                counts["answered" if ok else "silent_required"] += 1
                assert ok, (n, raw[:300])
            assert server.alive()
            await server.ping("final")
    assert_stdout_is_only_json_rpc(server.lines)
    assert store_bytes(site.db) == before
    figure(
        f"F14: {len(MALFORMED)} malformed inputs: {len(MALFORMED)} answered; "
        f"400 fuzzed lines (seed 1414): {counts['answered']} answered as required, "
        f"{counts['optional']} notifications/responses needing no answer, "
        f"{counts['silent_required']} unanswered; process alive; stdout only JSON-RPC"
    )


# --- F15: huge payloads -----------------------------------------------------------


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


async def test_f15_huge_and_deep_payloads_are_refused_with_bounded_memory(site: ServerSite) -> None:
    site.env = {ALLOW_ENV: "agent"}  # an allowed writer: the mutating paths are reachable
    seed_store(site.db)
    intercept: dict[str, Any] = {
        "name": "continuum_intercept_action",
        "arguments": {"run_id": "r1", "action_type": "t", "key": "deep", "arguments": {}},
    }
    with anyio.fail_after(BOUND * 2):
        async with site.raw(initialize=initialize_request("agent")) as server:
            warm = await server.request(
                tool_call(
                    1,
                    "continuum_intercept_action",
                    {
                        "run_id": "r1",
                        "action_type": "t",
                        "key": "warm",
                        "arguments": {"a": [1, 2, 3]},
                    },
                )
            )
            assert warm["result"]["isError"] is False  # negative control: a normal call is taken
            baseline = server.peak_rss_kib()

            # A 50 MB line, streamed in 1 MiB writes: refused while it streams by.
            await server.send(
                b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":'
                b'"continuum_resume","arguments":{"run_id":"'
            )
            chunk = b"a" * (1 << 20)
            for _ in range(50):
                await server.send(chunk)
            await server.send(b'"}}}\n')
            huge_line = await server.receive()
            await server.ping(3)

            # A huge array (5 million elements, about 10 MB): over the size limit too.
            await server.send(
                b'{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":'
                b'"continuum_intercept_action","arguments":{"run_id":"r1",'
                b'"action_type":"t","arguments":{"x":[' + b"0," * 5_000_000 + b"0]}}}}\n"
            )
            huge_array = await server.receive()
            await server.ping(5)

            # Nesting deeper than the JSON parser takes: a parse error.
            intercept["arguments"]["arguments"] = {"x": "DEEP"}
            text = json.dumps(
                {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": intercept}
            )
            await server.send(text.replace('"DEEP"', _nested(100_000)).encode() + b"\n")
            too_deep = await server.receive()
            # Nesting the parser takes but the store must not keep (it broke later listings).
            deep_answers = []
            for n, depth in enumerate((MAX_JSON_DEPTH + 1, 300, 900)):
                sent = text.replace('"id": 6', f'"id": {10 + n}').replace('"DEEP"', _nested(depth))
                await server.send(sent.encode() + b"\n")
                deep_answers.append(await server.receive_id(10 + n))
            deep_result = await server.request(
                tool_call(
                    20,
                    "continuum_complete_action",
                    {"run_id": "r1", "action_key": "t:warm", "result": json.loads(_nested(300))},
                )
            )
            listed = await server.request(tool_call(21, "continuum_list_actions", {"run_id": "r1"}))
            await server.ping(22)
            growth_mib = (server.peak_rss_kib() - baseline) / 1024
            assert server.alive()
    assert (huge_line["id"], huge_line["error"]["code"]) == (None, -32600)
    assert (huge_array["id"], huge_array["error"]["code"]) == (None, -32600)
    assert "1048576-byte limit" in huge_line["error"]["message"]
    assert (too_deep["id"], too_deep["error"]["code"]) == (None, -32700)
    for answer in [*deep_answers, deep_result]:
        assert answer["result"]["isError"] is True
        text_ = answer["result"]["content"][0]["text"]
        assert f"nested more than {MAX_JSON_DEPTH} levels" in text_
        assert "arguments" in text_ or "result" in text_
    assert listed["result"]["isError"] is False
    assert [a["action_key"] for a in listed["result"]["structuredContent"]["actions"]] == [
        "send:seed-1",
        "t:warm",
    ]
    assert growth_mib < 32, f"peak RSS grew by {growth_mib:.1f} MiB"
    figure(
        f"F15: 50 MB rejected, 10 MB array rejected, nesting 100000 rejected, nesting "
        f"{MAX_JSON_DEPTH + 1}/300/900 refused by name; peak RSS grew {growth_mib:.1f} MiB "
        f"(baseline {baseline / 1024:.0f} MiB); next request served"
    )


# --- F16: wrong types for every tool ----------------------------------------------

SAMPLES: dict[str, Any] = {
    "string": "text",
    "integer": 7,
    "number": 1.5,
    "boolean": True,
    "array": ["x"],
    "object": {"k": "v"},
    "null": None,
}


def _json_types(schema: dict[str, Any]) -> set[str]:
    if "type" in schema:
        kind = schema["type"]
        return set(kind) if isinstance(kind, list) else {kind}
    if "anyOf" in schema:
        return set().union(*(_json_types(s) for s in schema["anyOf"]))
    if "enum" in schema:
        return {next(k for k, v in SAMPLES.items() if type(v) is type(e)) for e in schema["enum"]}
    return set()  # any JSON value


def _branches(schema: dict[str, Any]) -> list[dict[str, Any]]:
    branches: list[dict[str, Any]] = schema.get("anyOf", [schema])
    return branches


def _invalid_values(schema: dict[str, Any]) -> list[Any]:
    """Values of a wrong JSON type, values breaking a constraint, and extra nesting."""
    allowed = _json_types(schema)
    if not allowed:
        return []
    out = [
        v
        for k, v in SAMPLES.items()
        if k not in allowed and not (k == "integer" and "number" in allowed)
    ]
    if "integer" in allowed and "string" not in allowed:
        out += ["3", 3.0]  # a number in a string, and a float where an integer is due
    if "boolean" in allowed and "string" not in allowed:
        out += ["true", 1]
    for branch in _branches(schema):
        if "minLength" in branch:
            out.append("")
        if "maxLength" in branch:
            out.append("x" * (branch["maxLength"] + 1))
        if "minimum" in branch:
            out.append(branch["minimum"] - 1)
        if "enum" in branch:
            out.append("not-a-member")
        extra = branch.get("additionalProperties")
        if branch.get("type") == "object" and isinstance(extra, dict) and "type" in extra:
            out += [{"name": v} for v in _invalid_values(extra)[:3]]  # wrong inside the map
    out += [["text"], {"value": "text"}, [[{"value": 1}]], {"value": {"value": [7]}}]  # nesting
    check = jsonschema.Draft202012Validator(schema)
    return [v for v in out if not check.is_valid(v)]  # only what the published schema refuses


def _base_arguments(action_key: str) -> dict[str, dict[str, Any]]:
    return {
        "continuum_validate": {"run_id": "r1", "env": {"dataset": "v1"}, "expected_model": "m"},
        "continuum_resume": {"run_id": "r1", "env": {"dataset": "v1"}, "expected_model": "m"},
        "continuum_list_actions": {"run_id": "r1"},
        "continuum_record_progress": {
            "run_id": "r1",
            "completed": 2,
            "total": 3,
            "goal": "g",
            "failed": 0,
        },
        "continuum_checkpoint": {"run_id": "r1", "reason": "x", "env": {"dataset": "v2"}},
        "continuum_intercept_action": {
            "run_id": "r1",
            "action_type": "send",
            "arguments": {"n": 1},
            "key": "fresh",
            "replay": "never",
        },
        "continuum_complete_action": {
            "run_id": "r1",
            "action_key": action_key,
            "external_id": "e",
            "result": {"ok": True},
        },
        "continuum_fail_action": {
            "run_id": "r1",
            "action_key": action_key,
            "error": "x",
            "certain": False,
        },
        "continuum_reconcile_action": {
            "run_id": "r1",
            "action_key": action_key,
            "occurred": True,
            "external_id": "e",
            "note": "n",
        },
        "continuum_confirm": {"run_id": "r1"},
        "continuum_handoff": {"run_id": "r1", "note": "next: INV-3"},
        "continuum_observe": {
            "run_id": "r1",
            "subject": "button",
            "value": "Pay",
            "signal": "dom",
            "observation_id": "b1",
            "kind": "ui",
            "source": "page",
        },
        "continuum_resolve_branch": {
            "run_id": "r1",
            "branch_id": "pay",
            "choice": "click",
            "observations": ["b1"],
            "risk": "high",
            "reason": "r",
        },
    }


def _names_field(text: str, field: str) -> bool:
    """The error names the field as its own location line (``completed`` or ``env.dataset``),
    not merely somewhere in the text (every message says "validation error")."""
    return re.search(rf"^{re.escape(field)}(\.\S+)?$", text, re.MULTILINE) is not None


# The counts are published as plain integers (so schema-driven clients send numbers), but
# JSON null is taken as "not given", as many LLM hosts send null for every optional field.
NULL_MEANS_OMITTED = {
    ("continuum_record_progress", name) for name in ("completed", "total", "failed")
} | {  # so are the costs (issue 25)
    ("continuum_intercept_action", "estimate_usd"),
    ("continuum_intercept_action", "estimate_tokens"),
    ("continuum_complete_action", "cost_usd"),
    ("continuum_complete_action", "cost_tokens"),
}


def _invalid_calls(
    schemas: dict[str, dict[str, Any]], base: dict[str, dict[str, Any]], rng: random.Random
) -> list[tuple[str, dict[str, Any], set[str]]]:
    """(tool, arguments, the fields any of which the error must name)."""
    calls: list[tuple[str, dict[str, Any], set[str]]] = []
    per_tool: dict[str, list[tuple[str, Any]]] = {}
    for tool, schema in schemas.items():
        for name, prop in schema["properties"].items():
            for value in _invalid_values(prop):
                if value is None and (tool, name) in NULL_MEANS_OMITTED:
                    continue
                calls.append((tool, {**base[tool], name: value}, {name}))
                per_tool.setdefault(tool, []).append((name, value))
        for name in schema.get("required", []):
            calls.append((tool, {k: v for k, v in base[tool].items() if k != name}, {name}))
    for _ in range(150):  # mutations: several bad fields at once, plus an unknown key
        tool = rng.choice(sorted(per_tool))
        picks = rng.sample(per_tool[tool], k=min(len(per_tool[tool]), rng.randint(1, 3)))
        args = {**base[tool], **dict(picks), "unrelated": rng.choice([1, "x", None])}
        calls.append((tool, args, {name for name, _ in picks}))
    return calls


@pytest.mark.parametrize("mode", MODES)
async def test_f16_invalid_arguments_for_every_tool_name_the_field_and_change_nothing(
    site: ServerSite, mode: str
) -> None:
    site.env = {ALLOW_ENV: "agent", CONFIRM_TOKEN_ENV: CONFIRM_SECRET}
    action_key = seed_store(site.db)
    assert action_key is not None
    base = _base_arguments(action_key)
    changed: list[str] = []
    with anyio.fail_after(BOUND * 2):
        async with site.client(mode=mode) as client:
            schemas = {t.name: t.input_schema for t in (await client.list_tools()).tools}
            assert sorted(schemas) == sorted(TOOL_NAMES)
            calls = _invalid_calls(schemas, base, random.Random(1616))
            before = store_bytes(site.db)
            for tool, args, fields in calls:
                assert not jsonschema.Draft202012Validator(schemas[tool]).is_valid(args), (
                    tool,
                    args,
                )
                result = await client.call_tool(
                    tool, args, meta=request_meta({"confirmToken": CONFIRM_SECRET})
                )
                text = result_text(result)
                assert result.is_error is True, (tool, args, result.structured_content)
                assert any(_names_field(text, f) for f in fields), (tool, args, text)
                if store_bytes(site.db) != before:
                    changed.append(f"{tool} {args}")
            # Negative control: the harness sees a state change when one happens.
            valid = await client.call_tool(
                "continuum_record_progress", base["continuum_record_progress"]
            )
            assert valid.is_error is False
            assert store_bytes(site.db) != before
    tools_hit = {tool for tool, _, _ in calls}
    assert tools_hit == set(TOOL_NAMES)
    assert changed == []
    figure(
        f"F16 [{mode}]: {len(calls)} invalid calls over {len(tools_hit)} tools: "
        f"{len(changed)} state changes (control: 1 valid call changed the store)"
    )


# --- F17: path tricks -------------------------------------------------------------


def _store_url_attacks(root: Path, work: Path) -> list[tuple[str, list[str]]]:
    """(label, the server's flags); the server runs in ``work``, a directory inside ``root``."""
    (root / "notes.txt").write_text("private notes\n")
    real = root / "real.db"
    rt = Continuum(open_store(str(real)))
    rt.record_progress("r1", goal="g")
    rt.close()
    (work / "link.db").symlink_to(real)
    (work / "dangling.db").symlink_to(root / "created-through-link.db")
    (work / "passwd.db").symlink_to(root / "notes.txt")
    os.mkfifo(work / "fifo.db")
    os.mkfifo(root / "fifo-target")
    (work / "fifo-link.db").symlink_to(root / "fifo-target")
    abs_work = str(work)
    return [
        ("../ to a directory", ["--db", "../"]),
        ("../ to a text file", ["--db", "../notes.txt"]),
        ("../ into a missing directory", ["--db", "../missing/x.db"]),
        ("sqlite:/// with .. to a text file", ["--db", f"sqlite://{abs_work}/../notes.txt"]),
        ("symlink to a real store", ["--db", "link.db"]),
        ("dangling symlink", ["--db", "dangling.db"]),
        ("symlink to a text file", ["--db", "passwd.db"]),
        ("FIFO", ["--db", "fifo.db"]),
        ("symlink to a FIFO", ["--db", "fifo-link.db"]),
        ("/dev/zero", ["--db", "/dev/zero"]),
        ("/dev/null", ["--db", "/dev/null"]),
        ("file: URI with mode=memory", ["--db", "file:x?mode=memory"]),
        ("file: URI", ["--db", f"file:{abs_work}/x.db"]),
        (":memory:", ["--db", ":memory:"]),
        ("leading - as its own word", ["--db", "-store.db"]),
        ("leading - joined with =", ["--db=-store.db"]),
        ("sqlite://rel (two slashes)", ["--db", "sqlite://rel.db"]),
        ("sqlite:rel", ["--db", "sqlite:rel.db"]),
        ("sqlite:/// with a query", ["--db", f"sqlite://{abs_work}/x.db?mode=ro"]),
        ("unsupported scheme", ["--db", "mysql://host/db"]),
        ("~ is not expanded", ["--db", "~/store.db"]),
        ("empty --db", ["--db", ""]),
    ]


def _bounded(fn: Callable[[], object]) -> object:
    """Run ``fn`` in a daemon thread and return its result or the exception it raised:
    a call blocked on a FIFO fails the test instead of hanging it."""
    outcome: list[object] = []

    def target() -> None:
        try:
            outcome.append(fn())
        except BaseException as exc:  # the refusal under test, SystemExit included
            outcome.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(BOUND)
    assert outcome, "blocked (e.g. opened a FIFO for reading)"
    return outcome[0]


# Also run as real processes (in parallel): the exit code and stderr of the actual binary.
IN_A_SUBPROCESS = (
    "symlink to a real store",
    "FIFO",
    "/dev/zero",
    "file: URI with mode=memory",
    "leading - as its own word",
    "leading - joined with =",
    "sqlite://rel (two slashes)",
)


def test_f17_path_tricks_in_store_urls_and_file_dependencies_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    attacks = _store_url_attacks(tmp_path, work)
    before = tree_state(tmp_path)
    monkeypatch.chdir(work)
    for variable in [v for v in os.environ if v.startswith("CONTINUUM_")]:
        monkeypatch.delenv(variable)
    refused = 0
    # The server's own main(), in process: cheap, so every trick is tried.
    for label, flags in attacks:
        outcome = _bounded(partial(server_main, flags))
        code = outcome.code if isinstance(outcome, SystemExit) else outcome
        err = capsys.readouterr().err
        assert code == 1, (label, outcome, err)
        assert len(stderr_lines(err)) == 1 and err.startswith("continuum-mcp: "), (label, err)
        refused += 1
    # The real binary for a sample, all at once (a refusal is immediate; stdin is at EOF).
    procs = [
        (
            label,
            subprocess.Popen(
                [sys.executable, "-m", "continuum.mcp", *flags],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=work,
                env=server_env(),
                text=True,
            ),
        )
        for label, flags in attacks
        if label in IN_A_SUBPROCESS
    ]
    assert len(procs) == len(IN_A_SUBPROCESS)
    for label, proc in procs:
        out, err = proc.communicate(timeout=BOUND)
        assert proc.returncode == 1, (label, err)
        assert len(stderr_lines(err)) == 1 and err.startswith("continuum-mcp: "), (label, err)
        assert out == "", label
    assert tree_state(tmp_path) == before, "a refused start-up touched the file system"

    # Negative control: the same harness accepts an honest relative path (and creates nothing).
    control = subprocess.run(
        server_command("../ok.db"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=work,
        env=server_env(),
        timeout=BOUND,
        check=False,
    )
    assert control.returncode == 0, control.stderr
    assert tree_state(tmp_path) == before

    # File dependencies given to the runtime: refused at once, naming the problem.
    os.mkfifo(tmp_path / "dep-fifo")
    (tmp_path / "dep-link").symlink_to(tmp_path / "dep-fifo")
    (tmp_path / "dev-link").symlink_to("/dev/zero")
    (tmp_path / "data.csv").write_text("a,b\n1,2\n")
    dep_attacks = [
        str(tmp_path / "dep-fifo"),
        "/dev/zero",
        str(tmp_path),
        str(tmp_path / "dep-link"),
        str(tmp_path / "dev-link"),
        str(work / ".." / "work"),
        str(tmp_path / "missing.csv"),
        "/proc/self/fd/0",
    ]
    for path in dep_attacks:
        error = _bounded(partial(declarations, files=[path]))
        assert isinstance(error, UsageError) and error.code == "usage.bad_dependency", (path, error)
        assert path in error.message
        refused += 1
    db = tmp_path / "deps.db"
    rt = Continuum(open_store(str(db)))
    try:
        rt.record_progress("r1", goal="g")
        head = rt.store.get_run("r1").head_sequence
        error = _bounded(lambda: rt.declare_dependencies("r1", files=[str(tmp_path / "dep-fifo")]))
        assert isinstance(error, UsageError)
        assert rt.store.get_run("r1").head_sequence == head  # nothing was appended
        refused += 1
        # Control: a regular file is accepted, with its content hash.
        (decl,) = declarations(files=[str(tmp_path / "data.csv")])
        assert str(decl["checksum"]).startswith("sha256:")
        # A declared file swapped for a FIFO afterwards is "unknown" at validation, not a hang.
        rt.declare_dependencies("r1", files=[str(tmp_path / "data.csv")])
        (tmp_path / "data.csv").unlink()
        os.mkfifo(tmp_path / "data.csv")
        report = _bounded(lambda: rt.validate("r1"))
        assert not isinstance(report, BaseException), report
        statuses = {d.name: str(d.status) for d in report.dependencies}  # type: ignore[attr-defined]
        assert statuses[f"file:{tmp_path / 'data.csv'}"] == "unknown"
    finally:
        rt.close()
    total = len(attacks) + len(dep_attacks) + 1
    assert refused == total
    figure(
        f"F17: {total} attacks: {refused} refused ({len(attacks)} store URLs given to --db, "
        f"{len(IN_A_SUBPROCESS)} of them also to the real binary, "
        f"{len(dep_attacks) + 1} file dependencies); nothing touched; a swapped-in FIFO "
        f"validates as unknown"
    )


# --- F18: unauthorized callers ----------------------------------------------------


class Tally:
    def __init__(self) -> None:
        self.attempts = 0
        self.allowed = 0
        self.denied = 0
        self.codes: list[str] = []

    def record(self, answer: dict[str, Any], label: str) -> None:
        result = answer["result"]
        text = result["content"][0]["text"]
        self.attempts += 1
        if result["isError"] is False:
            self.allowed += 1
        else:
            assert "Denied:" in text and "Remedy:" in text, (label, text)
            assert SECRET not in text and CONFIRM_SECRET not in text, label
            self.denied += 1


async def test_f18_unauthorized_callers_are_denied_in_both_eras_and_each_denial_is_logged(
    site: ServerSite, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    action_key = seed_store(site.db)
    assert action_key is not None
    # Commas separate names and pairs (a space no longer does: names may hold spaces).
    site.env = {
        ALLOW_ENV: "agent,other",
        CLIENT_TOKENS_ENV: f"agent:{SECRET},other:{OTHER_SECRET}",
        CONFIRM_TOKEN_ENV: CONFIRM_SECRET,
    }
    calls: dict[str, dict[str, Any]] = {
        "continuum_record_progress": {"run_id": "r1", "completed": 3},
        "continuum_checkpoint": {"run_id": "r1"},
        "continuum_intercept_action": {"run_id": "r1", "action_type": "t", "key": "k9"},
        "continuum_complete_action": {"run_id": "r1", "action_key": action_key},
        "continuum_fail_action": {"run_id": "r1", "action_key": action_key},
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
    assert sorted(calls) == sorted(MUTATING_TOOLS)
    tally = Tally()
    before = runs_record(site.db)
    n = 0

    async def attempt(
        server: RawServer, label: str, meta: dict[str, Any] | None, tools: list[str] | None = None
    ) -> None:
        nonlocal n
        for tool in tools or list(calls):
            n += 1
            tally.record(await server.request(tool_call(n, tool, calls[tool], meta)), label)

    confirm = ["continuum_confirm"]
    with anyio.fail_after(BOUND * 2):
        # Handshake era: the name comes from initialize, so one connection per name.
        async with site.raw(initialize=initialize_request(None, {"authToken": SECRET})) as server:
            await attempt(server, "handshake, no name", None)
        async with site.raw(
            initialize=initialize_request("mallory", {"authToken": SECRET})
        ) as server:
            await attempt(server, "handshake, unlisted", None)
        async with site.raw(initialize=initialize_request("agent")) as server:
            await attempt(server, "handshake, token missing", None)
            await attempt(server, "handshake, wrong token", {"authToken": "guess"})
            await attempt(server, "handshake, another client's token", {"authToken": OTHER_SECRET})
            await attempt(
                server, "handshake, confirm without confirm token", {"authToken": SECRET}, confirm
            )
            await attempt(
                server,
                "handshake, wrong confirm token",
                {"authToken": SECRET, "confirmToken": "guess"},
                confirm,
            )
            await attempt(
                server,
                "handshake, agent token as confirm token",
                {"authToken": SECRET, "confirmToken": SECRET},
                confirm,
            )
        # 2026-07-28 era: every request names itself, so one connection serves all.
        async with site.raw() as server:
            await attempt(server, "envelope, no clientInfo", envelope(None, authToken=SECRET))
            await attempt(server, "envelope, empty name", envelope("", authToken=SECRET))
            await attempt(server, "envelope, unlisted", envelope("mallory", authToken=SECRET))
            await attempt(server, "envelope, token missing", envelope("agent"))
            await attempt(server, "envelope, wrong token", envelope("agent", authToken="guess"))
            await attempt(
                server,
                "envelope, another client's token",
                envelope("agent", authToken=OTHER_SECRET),
            )
            await attempt(
                server,
                "envelope, confirm without confirm token",
                envelope("agent", authToken=SECRET),
                confirm,
            )
            await attempt(
                server,
                "envelope, wrong confirm token",
                envelope("agent", authToken=SECRET, confirmToken="guess"),
                confirm,
            )
            denied_so_far = tally.denied
            # No run changed. The three wrong confirm tokens (guess, the agent's token,
            # guess) were counted for the store, the third also a notice (issue 30).
            assert runs_record(site.db) == before
            assert attempt_counter(site.db).failures == 3 and len(confirm_notices(site.db)) == 1
            # Negative control: the counter sees an allowed call from a listed caller.
            await attempt(
                server,
                "envelope, listed with its token",
                envelope("agent", authToken=SECRET),
                ["continuum_record_progress"],
            )
    assert tally.allowed == 1 and tally.denied == denied_so_far == tally.attempts - 1
    logged = [json.loads(row) for row in site.stderr().splitlines() if '"mcp.call_denied"' in row]
    assert len(logged) == tally.denied
    assert SECRET not in site.stderr() and OTHER_SECRET not in site.stderr()
    assert CONFIRM_SECRET not in site.stderr()

    # A bad policy file: the server refuses to start at all, so nothing can be called
    # (the server's main() in process; test_server_stdio runs the binary on one).
    startups = 0
    for variable in [v for v in os.environ if v.startswith("CONTINUUM_")]:
        monkeypatch.delenv(variable)
    for content in ('{"allow": "agent"}', "[1, 2]", '{"allow": ["agent"], "deny": []}', "{", ""):
        policy_dir = site.cwd.parent / f"policy-{startups}"
        (policy_dir / POLICY_FILE).parent.mkdir(parents=True)
        (policy_dir / POLICY_FILE).write_text(content)
        monkeypatch.chdir(policy_dir)
        assert server_main(["--db", str(site.db)]) == 1
        err = capsys.readouterr().err
        assert len(stderr_lines(err)) == 1 and "policy file" in err, err
        startups += 1
    assert runs_record(site.db) != before  # only the control call wrote
    attempts = tally.attempts - 1 + startups
    figure(
        f"F18: {attempts} attempts: 0 allowed ({tally.denied} calls denied and logged in both "
        f"eras, {startups} bad policy files refused at start-up); control: 1 listed caller allowed"
    )

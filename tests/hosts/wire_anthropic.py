"""The Anthropic Messages API, as Claude Code speaks it (``POST /v1/messages``).

Requests carry the whole conversation (``messages``), the tools offered (``tools``) and
usually ``stream: true``: the answer is then a server-sent event stream of
``message_start``, one ``content_block_*`` triple per block (text, or ``tool_use`` whose
input arrives as ``input_json_delta``), ``message_delta`` with the stop reason and
``message_stop``. A request without tools (titles, quota probes) is a side request.

Claude Code defers MCP tools: their names are listed in a system message and their
schemas are loaded by the model calling ``ToolSearch`` with ``select:NAME,...`` (calling
one before that fails with InputValidationError). This wire does what a model does:
when a step calls a deferred tool not loaded yet, it first answers with that
``ToolSearch`` call. Such loader turns do not count as script positions, and the
results a step sees are those of the last real turn.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from tests.hosts.model_server import Request, Response
from tests.hosts.script import Model, Reply, ToolCall, ToolResult, Turn

_ids = itertools.count(1)


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    out: list[str] = []
    if isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            if isinstance(block.get("text"), str):
                out.append(block["text"])
            if block.get("type") == "tool_result":
                out += _texts(block.get("content"))
    return out


LOADER = "ToolSearch"
_DEFERRED = re.compile(r"deferred tools are now available via ToolSearch[^\n]*\n((?:[^\n]+\n)+)")


def _uses(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if message.get("role") != "assistant" or not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]


def _is_loader(message: dict[str, Any]) -> bool:
    uses = _uses(message)
    return bool(uses) and all(b.get("name") == LOADER for b in uses)


def parse(body: dict[str, Any]) -> Turn:
    messages = body.get("messages") or []
    tools = [t["name"] for t in body.get("tools") or [] if isinstance(t, dict) and "name" in t]
    names = {b["id"]: b["name"] for m in messages for b in _uses(m)}
    real = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and not _is_loader(m)]
    results: list[ToolResult] = []
    after = messages[real[-1] + 1] if real and real[-1] + 1 < len(messages) else None
    if after is not None and after.get("role") == "user" and isinstance(after["content"], list):
        for b in after["content"]:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                tid = str(b.get("tool_use_id"))
                text = "\n".join(_texts(b.get("content")))
                results.append(ToolResult(tid, names.get(tid), text, bool(b.get("is_error"))))
    texts = _texts(body.get("system")) + [t for m in messages for t in _texts(m.get("content"))]
    text = "\n".join(texts)
    deferred = [n for m in _DEFERRED.finditer(text) for n in m.group(1).split()]
    first = next((m for m in messages if m.get("role") == "user"), None)
    return Turn(
        tools=tools + [n for n in deferred if n not in tools],
        position=len(real),
        results=results,
        text=text,
        main=bool(tools),
        first_user="\n".join(_texts(first.get("content"))) if first else "",
    )


def _loaded(body: dict[str, Any]) -> set[str]:
    """Tools whose schema the request carries, or that a ToolSearch already selected."""
    out = {t["name"] for t in body.get("tools") or [] if isinstance(t, dict) and "name" in t}
    for m in body.get("messages") or []:
        for b in _uses(m):
            query = (b.get("input") or {}).get("query")
            if b.get("name") == LOADER and isinstance(query, str) and query.startswith("select:"):
                out.update(query[len("select:") :].split(","))
    return out


def _blocks(reply: Reply) -> list[dict[str, Any]]:
    if isinstance(reply, str):
        return [{"type": "text", "text": reply}]
    return [
        {"type": "tool_use", "id": f"toolu_{next(_ids):06d}", "name": c.name, "input": c.input}
        for c in reply
    ]


def _stream(message: dict[str, Any]) -> list[tuple[str | None, Any]]:
    head = {**message, "content": [], "stop_reason": None}
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": head})
    ]
    for i, block in enumerate(message["content"]):
        start: dict[str, Any]
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [
            (
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": start},
            ),
            ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": i}),
        ]
    events += [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": 10},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return events


class AnthropicWire:
    def answer(self, request: Request, model: Model) -> Response:
        if request.path.endswith("/count_tokens"):
            return Response(json={"input_tokens": 100})
        if not request.path.endswith("/v1/messages") or not isinstance(request.body, dict):
            return Response(
                404, json={"type": "error", "error": {"type": "not_found_error", "message": "no"}}
            )
        reply = model.reply(parse(request.body))
        if isinstance(reply, list):
            missing = [c.name for c in reply if c.name not in _loaded(request.body)]
            if missing:
                query = {"query": "select:" + ",".join(missing), "max_results": len(missing)}
                reply = [ToolCall(LOADER, query)]
        content = _blocks(reply)
        message = {
            "id": f"msg_{next(_ids):06d}",
            "type": "message",
            "role": "assistant",
            "model": request.body.get("model", "scripted"),
            "content": content,
            "stop_reason": "end_turn" if isinstance(reply, str) else "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 10},
        }
        if request.body.get("stream"):
            return Response(events=_stream(message))
        return Response(json=message)


__all__ = ["AnthropicWire", "ToolCall", "parse"]

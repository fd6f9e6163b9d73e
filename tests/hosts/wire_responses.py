"""The OpenAI Responses API, as Codex speaks it (``POST /v1/responses``).

A request carries the whole conversation as ``input`` items: ``message`` (roles
``developer``, ``user``, ``assistant``), ``function_call`` / ``function_call_output``
(the shell ``exec_command``, MCP tools, ...: joined by ``call_id``), ``custom_tool_call``
/ ``custom_tool_call_output`` (freeform tools: ``apply_patch``, whose input is the patch
text), ``tool_search_call`` / ``tool_search_output``; the tools offered (``tools``:
``function`` and ``custom`` tools by name, plus ``tool_search``); and ``stream: true``.
The answer is a server-sent event stream: ``response.created``, one
``response.output_item.added`` / ``.done`` pair per output item (an assistant
``message`` with ``output_text``, a ``function_call`` whose ``arguments`` is a JSON
string, a ``custom_tool_call`` whose ``input`` is text), then ``response.completed``.

Codex defers MCP tools (and its sub-agent tools): the request names them only as
"Deferred tool namespaces" (``- mcp__continuum: ...``) in a developer message, and a
model loads them with a client-side ``tool_search`` call; Codex answers it with a
``tool_search_output`` that holds the namespace with its tools, offered from then on.
This wire does what a model does: a request that names a deferred namespace not loaded
(nor searched) yet is answered with one ``tool_search_call`` per such namespace, before
any scripted step; a server that connects late is announced as "Added deferred tool
namespaces" and loaded the same way. A namespaced tool is offered to the script as ``NAMESPACE__NAME``
(``mcp__continuum__continuum_resume``) and called as ``function_call`` with ``name`` and
``namespace``. A script tool call for a freeform tool puts its text in ``input["input"]``.

Script positions: every call id handed out names the answer it belongs to
(``call_R<n>_<k>``; loader calls ``call_L<n>_<k>`` do not count), so the number of model
turns already in the input is the number of distinct answers its calls (and assistant
texts) come from, however the host orders calls and outputs. A request that offers no
tools is a side request. A compaction replaces the history with a summary, so positions
start again at 0 after one. A sub-agent (``spawn_agent``) has a conversation of its own
whose prompt (``Turn.first_user``) is the message it was spawned with: script it with
``Project.session(subagents={marker: steps})``. ``GET .../models`` answers an empty
catalog; anything else is a 404.

Usage: every answer reports a small usage, except in a session whose prompt holds
``FULL_CONTEXT``: there the main answers report ``FULL_USAGE`` tokens until the history
holds a compaction summary, so a Codex told to compact at ``COMPACT_AT`` tokens
(``model_auto_compact_token_limit``) compacts once, after the first answer (Codex
compacts a full context before it samples again, running PreCompact), and never again.
Codex compacts a custom provider's history locally: a request that offers no tools (a
side request, answered "ok") asks for the summary, and the history that follows holds
the recent user messages and a user message ``SUMMARY_PREFIX`` + the summary.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from typing import Any

from tests.hosts.model_server import Request, Response
from tests.hosts.script import Model, Reply, ToolCall, ToolResult, Turn

_answers = itertools.count(1)
_CALL_ID = re.compile(r"^call_R(\d+)_\d+$")
_DEFERRED = re.compile(r"(?:^|\n)(?:Added d|D)eferred tool namespaces:\n((?:- [^\n]*\n?)+)")
# User messages Codex writes itself before the prompt (the first one that is not is the
# conversation's prompt: ``Turn.first_user``, what tells a sub-agent's turns apart).
_CONTEXT = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions")
MODEL_ITEMS = ("message", "function_call", "custom_tool_call", "tool_search_call", "reasoning")
FULL_CONTEXT = "(the context is full)"
COMPACT_AT = 100_000  # tokens: what Codex is told to compact at, in a FULL_CONTEXT session
FULL_USAGE = 2 * COMPACT_AT
SUMMARY_PREFIX = "Another language model started to solve this problem"


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    out: list[str] = []
    if isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                out.append(part["text"])
    return out


class Offered:
    """The tools a request offers: top-level ones by name, namespaced ones (loaded by a
    ``tool_search``) as ``NAMESPACE__NAME``; and the deferred namespaces not loaded."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.names: list[str] = []
        self.freeform: set[str] = set()
        self.namespaced: dict[str, tuple[str, str]] = {}  # full name -> (namespace, name)
        self.loaded: set[str] = set()
        self.search = False
        items = [i for i in body.get("input") or [] if isinstance(i, dict)]
        self._add(body.get("tools"), None)
        for item in items:
            if item.get("type") == "tool_search_output":
                self._add(item.get("tools"), None)
        text = "\n".join(
            t for i in items if i.get("role") == "developer" for t in _texts(i.get("content"))
        )
        listed = [
            line[2:].split(":", 1)[0]
            for m in _DEFERRED.finditer(text)
            for line in m.group(1).splitlines()
        ]
        tried = {
            str((i.get("arguments") or {}).get("query"))
            for i in items
            if i.get("type") == "tool_search_call"
        }
        self.deferred = [
            n for n in dict.fromkeys(listed) if n not in self.loaded and _query(n) not in tried
        ]

    def _add(self, tools: Any, namespace: str | None) -> None:
        for tool in tools or []:
            if not isinstance(tool, dict):
                continue
            name = tool.get("name")
            if tool.get("type") == "tool_search":
                self.search = True
            if not isinstance(name, str):
                continue
            if tool.get("type") == "namespace":
                self.loaded.add(name)
                self._add(tool.get("tools"), name)
                continue
            full = f"{namespace}__{name}" if namespace else name
            if full not in self.names:
                self.names.append(full)
            if namespace:
                self.namespaced[full] = (namespace, name)
            if tool.get("type") == "custom":
                self.freeform.add(full)


def _query(namespace: str) -> str:
    return namespace.removeprefix("mcp__").replace("_", " ")


def _turns_in(items: list[dict[str, Any]]) -> tuple[int, int]:
    """(model turns already in the input, index just past the last model item)."""
    answers: set[str] = set()
    texts = 0
    last = -1
    previous_model = False
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        is_model = kind in MODEL_ITEMS and (kind != "message" or item.get("role") == "assistant")
        if is_model:
            m = _CALL_ID.match(str(item.get("call_id", "")))
            if m:
                answers.add(m.group(1))
                last = i
            elif kind == "message":
                last = i
                if not previous_model:
                    texts += 1  # an assistant text: a turn of its own
        previous_model = is_model
    return len(answers) + texts, last + 1


def parse(body: dict[str, Any]) -> Turn:
    items = [i for i in body.get("input") or [] if isinstance(i, dict)]
    offered = Offered(body)
    position, after = _turns_in(items)
    names: dict[str, str] = {}
    for i in items:
        if i.get("type") in ("function_call", "custom_tool_call"):
            ns = i.get("namespace")
            names[str(i.get("call_id"))] = f"{ns}__{i.get('name')}" if ns else str(i.get("name"))
    results: list[ToolResult] = []
    for item in items[after:]:
        if item.get("type") in ("function_call_output", "custom_tool_call_output"):
            cid = str(item.get("call_id"))
            output = item.get("output")
            text = output if isinstance(output, str) else "\n".join(_texts(output))
            results.append(ToolResult(cid, names.get(cid), text))
    texts = _texts(body.get("instructions"))
    for item in items:
        texts += _texts(item.get("content"))
        output = item.get("output")
        texts += [output] if isinstance(output, str) else _texts(output)
    main = any(
        isinstance(t, dict) and t.get("type") != "tool_search" for t in body.get("tools") or []
    )
    prompts = [
        "\n".join(_texts(i.get("content")))
        for i in items
        if i.get("type", "message") == "message" and i.get("role") == "user"
    ]
    return Turn(
        tools=offered.names,
        position=position,
        results=results,
        text="\n".join(texts),
        main=main,
        first_user=next((t for t in prompts if not t.startswith(_CONTEXT)), ""),
    )


def _compacted(items: list[dict[str, Any]]) -> bool:
    """Whether the history is one Codex compacted (it holds the summary message)."""
    return any(
        i.get("type") in ("compaction", "compaction_summary")
        or (
            i.get("role") == "user"
            and any(t.startswith(SUMMARY_PREFIX) for t in _texts(i.get("content")))
        )
        for i in items
    )


def _usage(body: dict[str, Any], turn: Turn) -> int:
    """The total tokens an answer reports (see "Usage" above)."""
    items = [i for i in body.get("input") or [] if isinstance(i, dict)]
    if turn.main and FULL_CONTEXT in turn.first_user and not _compacted(items):
        return FULL_USAGE
    return 110


def _call(call: ToolCall, offered: Offered, cid: str) -> dict[str, Any]:
    if call.name in offered.freeform:
        return {
            "type": "custom_tool_call",
            "id": "ctc_" + cid,
            "call_id": cid,
            "name": call.name,
            "input": str(call.input.get("input", "")),
            "status": "completed",
        }
    item: dict[str, Any] = {
        "type": "function_call",
        "id": "fc_" + cid,
        "call_id": cid,
        "name": call.name,
        "arguments": json.dumps(call.input),
        "status": "completed",
    }
    if call.name in offered.namespaced:
        item["namespace"], item["name"] = offered.namespaced[call.name]
    return item


def _items(reply: Reply, offered: Offered, answer: int) -> list[dict[str, Any]]:
    if isinstance(reply, str):
        text = {"type": "output_text", "text": reply, "annotations": []}
        return [
            {
                "type": "message",
                "id": f"msg_R{answer}",
                "role": "assistant",
                "status": "completed",
                "content": [text],
            }
        ]
    return [_call(c, offered, f"call_R{answer}_{k}") for k, c in enumerate(reply)]


def _loader(offered: Offered, answer: int) -> list[dict[str, Any]]:
    return [
        {
            "type": "tool_search_call",
            "id": f"ts_L{answer}_{k}",
            "call_id": f"call_L{answer}_{k}",
            "status": "completed",
            "execution": "client",
            "arguments": {"query": _query(ns), "limit": 50},
        }
        for k, ns in enumerate(offered.deferred)
    ]


def _stream(response: dict[str, Any]) -> list[tuple[str | None, Any]]:
    seq = itertools.count()
    head = {**response, "status": "in_progress", "output": []}
    events: list[tuple[str | None, Any]] = [
        (
            "response.created",
            {"type": "response.created", "sequence_number": next(seq), "response": head},
        )
    ]
    for i, item in enumerate(response["output"]):
        for kind in ("response.output_item.added", "response.output_item.done"):
            events.append(
                (
                    kind,
                    {"type": kind, "sequence_number": next(seq), "output_index": i, "item": item},
                )
            )
    done = {"type": "response.completed", "sequence_number": next(seq), "response": response}
    return [*events, ("response.completed", done)]


class ResponsesWire:
    def answer(self, request: Request, model: Model) -> Response:
        path = request.path.rstrip("/")
        if request.method == "GET" and path.endswith("/models"):
            return Response(json={"object": "list", "data": [], "models": []})
        if not path.endswith("/responses") or not isinstance(request.body, dict):
            error = {"message": f"no {request.method} {request.path}", "type": "not_found"}
            return Response(404, json={"error": error})
        body = request.body
        offered = Offered(body)
        answer = next(_answers)
        turn = parse(body)
        if offered.search and offered.deferred and turn.main:
            output = _loader(offered, answer)
        else:
            output = _items(model.reply(turn), offered, answer)
        total = _usage(body, turn)
        response = {
            "id": f"resp_{answer}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": body.get("model", "scripted"),
            "output": output,
            "usage": {
                "input_tokens": total - 10,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 10,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": total,
            },
        }
        if body.get("stream"):
            return Response(events=_stream(response))
        return Response(json=response)


__all__ = ["COMPACT_AT", "FULL_CONTEXT", "Offered", "ResponsesWire", "ToolCall", "parse"]

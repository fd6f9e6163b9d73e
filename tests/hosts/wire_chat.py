"""OpenAI Chat Completions, as Kilo Code speaks it (``POST /v1/chat/completions``).

Kilo (an OpenCode fork) reaches a custom endpoint through the AI SDK's bundled
``@ai-sdk/openai-compatible`` provider: nothing is fetched, and that provider calls no
other route (no models list). Requests carry the whole conversation (``messages``: a
``system`` message, ``user`` messages whose ``content`` is a string or a list of text
parts, ``assistant`` messages with ``tool_calls`` ``[{id, type: "function", function:
{name, arguments: JSON text}}]``, and one ``tool`` message per result, ``{tool_call_id,
content}``), the tools offered (``tools[].function.name``), ``stream: true`` and
``stream_options.include_usage``. The answer is then a server-sent event stream of
``chat.completion.chunk`` objects (``choices[0].delta`` with ``content`` or
``tool_calls`` ``[{index, id, type, function: {name, arguments}}]``, a last chunk with
``finish_reason`` and ``usage``) ending with ``data: [DONE]``; a request that does not
stream gets one ``chat.completion`` object.

Kilo 7.7.7 ``kilo run`` sent nothing else: no models list, no title or other side
request (a request without tools would be one: answered with text, ``main=False``). A
subagent (the ``task`` tool) is a conversation of its own, with tools, whose first user
message is the task's prompt (``Turn.first_user``).
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

from tests.hosts.model_server import Request, Response
from tests.hosts.script import Model, Reply, ToolResult, Turn

_ids = itertools.count(1)  # call and completion ids, unique per test process


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    out: list[str] = []
    if isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                out.append(part["text"])
            elif isinstance(part, str):
                out.append(part)
    return out


def parse(body: dict[str, Any]) -> Turn:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    tools = [
        t["function"]["name"]
        for t in body.get("tools") or []
        if isinstance(t, dict) and isinstance(t.get("function"), dict) and "name" in t["function"]
    ]
    names: dict[str, str] = {}
    for m in messages:
        for call in m.get("tool_calls") or [] if m.get("role") == "assistant" else []:
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                names[str(call.get("id"))] = str(call["function"].get("name"))
    assistant = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    results: list[ToolResult] = []
    if assistant:
        for m in messages[assistant[-1] + 1 :]:
            if m.get("role") != "tool":
                continue
            tid = str(m.get("tool_call_id"))
            results.append(ToolResult(tid, names.get(tid), "\n".join(_texts(m.get("content")))))
    text = "\n".join(t for m in messages for t in _texts(m.get("content")))
    first = next((m for m in messages if m.get("role") == "user"), None)
    return Turn(
        tools=tools,
        position=len(assistant),
        results=results,
        text=text,
        main=bool(tools),
        first_user="\n".join(_texts(first.get("content"))) if first else "",
    )


def _chunk(
    model: str, cid: str, delta: dict[str, Any], finish: str | None = None
) -> dict[str, Any]:
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


_USAGE = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}


def _message(reply: Reply) -> dict[str, Any]:
    if isinstance(reply, str):
        return {"role": "assistant", "content": reply}
    calls = [
        {
            "id": f"call_{next(_ids):06d}",
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.input)},
        }
        for c in reply
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


class ChatWire:
    def answer(self, request: Request, model: Model) -> Response:
        body = request.body
        if request.path.endswith("/models"):  # not called by Kilo 7.7.7; minimal if it is
            return Response(
                json={"object": "list", "data": [{"id": "scripted", "object": "model"}]}
            )
        if not request.path.endswith("/chat/completions") or not isinstance(body, dict):
            return Response(
                404, json={"error": {"message": f"no route {request.path}", "type": "not_found"}}
            )
        reply = model.reply(parse(body))
        message = _message(reply)
        finish = "stop" if isinstance(reply, str) else "tool_calls"
        cid = f"chatcmpl-{next(_ids):06d}"
        name = str(body.get("model", "scripted"))
        if not body.get("stream"):
            return Response(
                json={
                    "id": cid,
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": name,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": _USAGE,
                }
            )
        events: list[tuple[str | None, Any]] = [
            (None, _chunk(name, cid, {"role": "assistant", "content": ""}))
        ]
        if isinstance(reply, str):
            events.append((None, _chunk(name, cid, {"content": reply})))
        else:
            for i, call in enumerate(message["tool_calls"]):
                events.append((None, _chunk(name, cid, {"tool_calls": [{"index": i, **call}]})))
        last = _chunk(name, cid, {}, finish)
        last["usage"] = _USAGE
        events += [(None, last), (None, "[DONE]")]
        return Response(events=events)


__all__ = ["ChatWire", "parse"]

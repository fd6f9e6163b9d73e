"""The Gemini API (``generativelanguage``, v1beta), as Gemini CLI 0.61.0 speaks it.

Gemini CLI (through ``@google/genai``) posts to ``GOOGLE_GEMINI_BASE_URL`` +
``/v1beta/models/MODEL:streamGenerateContent?alt=sse`` for the conversation, and may use
``:generateContent`` (utility calls: compression, summaries, JSON checks) and
``:countTokens``. A request holds

- ``contents``: the history, ``{"role": "user"|"model", "parts": [...]}``; a model turn
  asks for tools with ``{"functionCall": {"id", "name", "args"}}`` parts, and the user
  turn after it answers with ``{"functionResponse": {"id", "name", "response"}}`` parts
  (``response`` is ``{"output": TEXT}``, an MCP tool's text blocks joined, or
  ``{"error": TEXT}`` for a failed, refused or hook-blocked call);
- ``tools``: ``[{"functionDeclarations": [{"name", "description",
  "parametersJsonSchema"}]}]``; MCP tools are named ``mcp_<server>_<tool>``;
- ``systemInstruction``, ``generationConfig``.

The answer is ``{"candidates": [{"content": {"role": "model", "parts": [...]},
"finishReason": "STOP"}], "usageMetadata": {...}}``: as one JSON object, or for the
streaming path as server-sent events, one ``data: {...}`` line each (here one event with
the whole answer). Gemini CLI retries a stream without a finish reason or without any
text or call, so every answer has both.

Gemini CLI wraps what a tool (a shell command, an MCP tool's text block) returns as
``<untrusted_context>\nTEXT\n</untrusted_context>`` (``wrapUntrusted`` in the bundle); a
result's text here is TEXT unwrapped, as the tool returned it.

``position`` is the number of model turns in ``contents``; ``results`` are the
functionResponses of the user turn after the last model turn. A side request is one
without function declarations (compression, summaries) or one asking for JSON
(``generationConfig.responseMimeType`` ``application/json`` or a
``responseJsonSchema``: the next-speaker check, loop detection, the model router). It is
answered with text, or with the smallest JSON its schema accepts (first enum value,
zero, false, empty string), which every such caller takes as "nothing to do": the
next speaker is the user, no loop, the simplest route. A JSON request answered with
plain text is retried with backoff: the ``auto`` model's router asked 5 times over about
100 s before it gave up. Gemini CLI's own loop detection stops a session that repeats
one call 5 times in a row (``TOOL_CALL_LOOP_THRESHOLD``); scripts must not.

A subagent (the ``invoke_agent`` tool: ``generalist``, ``codebase_investigator``,
``cli_help``) holds a conversation of its own in the same shape, from position 0, with a
``complete_task`` tool (``{"result": {"response": TEXT}}``) that ends it. Its first user
message holds the prompt the main model gave it: ``Turn.first_user`` tells them apart.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from tests.hosts.model_server import Request, Response
from tests.hosts.script import Model, Reply, ToolResult, Turn

_ids = itertools.count(1)
_UNTRUSTED = re.compile(r"<untrusted_context>\n(.*?)\n</untrusted_context>", re.S)


def unwrap(text: str) -> str:
    """``text`` without Gemini CLI's ``<untrusted_context>`` wrappers."""
    return _UNTRUSTED.sub(
        lambda m: m.group(1).replace("&lt;/untrusted_context&gt;", "</untrusted_context>"), text
    )


def _parts(content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, dict) or not isinstance(content.get("parts"), list):
        return []
    return [p for p in content["parts"] if isinstance(p, dict)]


def _declarations(body: dict[str, Any]) -> list[str]:
    return [
        d["name"]
        for t in body.get("tools") or []
        if isinstance(t, dict)
        for d in t.get("functionDeclarations") or []
        if isinstance(d, dict) and isinstance(d.get("name"), str)
    ]


def _response_text(response: Any) -> tuple[str, bool]:
    """A functionResponse's ``response`` as text, and whether it is an error."""
    if isinstance(response, dict):
        if "error" in response:
            err = response["error"]
            return (err if isinstance(err, str) else json.dumps(err)), True
        if isinstance(response.get("output"), str):
            return response["output"], False
    return json.dumps(response), False


def _json_schema(body: dict[str, Any]) -> Any:
    config = body.get("generationConfig") or {}
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    if schema is not None:
        return schema
    return {} if config.get("responseMimeType") == "application/json" else None


def smallest(schema: Any) -> Any:
    """The simplest value ``schema`` accepts (the required fields only)."""
    if not isinstance(schema, dict):
        return {}
    if schema.get("enum"):
        return schema["enum"][0]
    kind = str(schema.get("type", "object")).lower()
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: smallest(props.get(k)) for k in schema.get("required") or []}
    return {"array": [], "string": "", "boolean": False}.get(kind, 0)


def parse(body: dict[str, Any]) -> Turn:
    contents = [c for c in body.get("contents") or [] if isinstance(c, dict)]
    model_turns = [i for i, c in enumerate(contents) if c.get("role") == "model"]
    results: list[ToolResult] = []
    after = contents[model_turns[-1] + 1 :] if model_turns else []
    for content in after:
        for part in _parts(content):
            fr = part.get("functionResponse")
            if isinstance(fr, dict):
                text, is_error = _response_text(fr.get("response"))
                call_id = str(fr.get("id") or fr.get("name"))
                results.append(ToolResult(call_id, fr.get("name"), unwrap(text), is_error))
    texts = [
        p["text"] for p in _parts(body.get("systemInstruction")) if isinstance(p.get("text"), str)
    ]
    texts += [p["text"] for c in contents for p in _parts(c) if isinstance(p.get("text"), str)]
    tools = _declarations(body)
    first = next((c for c in contents if c.get("role") == "user"), None)
    return Turn(
        tools=tools,
        position=len(model_turns),
        results=results,
        text="\n".join(texts),
        main=bool(tools) and _json_schema(body) is None,
        first_user="\n".join(p["text"] for p in _parts(first) if isinstance(p.get("text"), str)),
    )


def _control_arguments(body: dict[str, Any]) -> dict[str, set[str]]:
    """Per tool, the host's control arguments its declaration offers (Gemini CLI adds
    ``wait_for_previous`` to every MCP tool and tells the model to set it)."""
    out: dict[str, set[str]] = {}
    for t in body.get("tools") or []:
        for d in (t.get("functionDeclarations") or []) if isinstance(t, dict) else []:
            schema = d.get("parametersJsonSchema") or d.get("parameters") or {}
            props = schema.get("properties") if isinstance(schema, dict) else None
            if isinstance(props, dict) and "wait_for_previous" in props:
                out.setdefault(str(d.get("name")), set()).add("wait_for_previous")
    return out


def _content(reply: Reply, control: dict[str, set[str]]) -> list[dict[str, Any]]:
    if isinstance(reply, str):
        return [{"text": reply}]
    parts = []
    for c in reply:
        args = dict(c.input)
        for name in control.get(c.name, ()):  # set as a real model is told to
            args.setdefault(name, True)
        parts.append(
            {"functionCall": {"id": f"call_{next(_ids):06d}", "name": c.name, "args": args}}
        )
    return parts


class GeminiWire:
    def answer(self, request: Request, model: Model) -> Response:
        path = request.path
        body = request.body if isinstance(request.body, dict) else None
        if path.endswith(":countTokens"):
            return Response(json={"totalTokens": 100})
        if body is None or not (
            path.endswith(":generateContent") or path.endswith(":streamGenerateContent")
        ):
            return Response(
                404, json={"error": {"code": 404, "message": f"no {path}", "status": "NOT_FOUND"}}
            )
        turn = parse(body)
        reply = model.reply(turn)
        schema = _json_schema(body)
        if schema is not None:
            reply = json.dumps(smallest(schema))
        answer = {
            "candidates": [
                {
                    "content": {
                        "role": "model",
                        "parts": _content(reply, _control_arguments(body)),
                    },
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {
                "promptTokenCount": 100,
                "candidatesTokenCount": 10,
                "totalTokenCount": 110,
            },
            "modelVersion": path.rsplit("/", 1)[-1].split(":", 1)[0],
        }
        if path.endswith(":streamGenerateContent"):
            return Response(events=[(None, answer)])
        return Response(json=answer)


__all__ = ["GeminiWire", "parse", "smallest", "unwrap"]

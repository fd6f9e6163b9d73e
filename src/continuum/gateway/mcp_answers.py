"""What the MCP gateway answers besides the upstream's own results: its refusals (each an
``isError`` tool result whose ``_meta["continuum/ledger"]`` names why, in ``refused``),
the ledger's answers to a repeat (the stored result, or what a probe found), the
answers when the upstream is gone, gives no answer or restarted, and what is kept of a
registered call's arguments and of its result.

Every text here is read by the model: it names the call, the upstream and, for an
effect, the action and what a person must do. Names the host or the upstream chose
(tools, servers, runs) are quoted with ``repr``.

Imports the MCP SDK's types, the gateway's rules and the leaves.
"""

from __future__ import annotations

import json
from typing import Any

from mcp import types

from continuum.errors import ContinuumError
from continuum.eventlog.canonical import canonical_json, sha256_hex
from continuum.gateway.rules import EffectRule

LEDGER_META = "continuum/ledger"  # the _meta key of an answer the ledger gave
MAX_RESULT_CHARS = 65_536  # larger arguments or a larger result are kept as their digest


def text_result(text: str, **meta: Any) -> types.CallToolResult:
    """An ``isError`` answer of the gateway's own: ``text`` for the model, ``meta`` (with
    ``refused``: why) under ``_meta["continuum/ledger"]`` for a program."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        is_error=True,
        _meta={LEDGER_META: meta} if meta else None,
    )


def result_text(result: types.CallToolResult) -> str:
    """What an ``isError`` result of the upstream says (the failure's recorded error)."""
    parts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    return " ".join(parts)[:2000] or "the upstream answered isError"


# -- the upstream ----------------------------------------------------------------------------


def upstream_gone(
    server: str, reason: str, name: str, *, reconnects: bool, restarts: bool
) -> types.CallToolResult:
    """``name`` not called: the upstream cannot be reached (``reason``). ``reconnects``:
    an HTTP upstream, reached again on the next call; ``restarts``: a stdio upstream the
    gateway starts again (``--restart-upstream``)."""
    return text_result(
        f"The upstream server {server!r} cannot be reached "
        f"({reason}); {name!r} was not called. "
        + (
            "The gateway tries to reach it again on the next call."
            if reconnects
            else "The gateway starts it again on the next call."
            if restarts
            else "Restart the gateway (or run it with --restart-upstream, which starts "
            "the server again on the next call)."
        ),
        refused="upstream_gone",
        tool=name,
    )


def bad_answer(server: str, name: str, error: Exception) -> types.CallToolResult:
    """A call no rule registers, whose answer never came or was not valid MCP."""
    return text_result(
        f"The upstream server {server!r} gave no valid answer to "
        f"{name!r} ({type(error).__name__}: {error})"[:2000],
        refused="upstream_bad_answer",
        tool=name,
    )


# -- tools the gateway does not expose, callers it does not allow ---------------------------


def tool_changed(server: str, name: str, old: str, new: str) -> types.CallToolResult:
    """A tool whose definition changed since it was pinned (``old``, ``new``: digests)."""
    return text_result(
        f"Refused: the upstream server {server!r} changed the definition of "
        f"the tool {name!r} since it was pinned (pinned sha256 {old[:16]}..., now "
        f"{new[:16]}...). A changed tool is not exposed until a person reviews and "
        f"accepts it: ask a person to run `continuum gateway accept --server "
        f"{server} --tool {name}`.",
        refused="tool_changed",
        tool=name,
    )


def unknown_tool(server: str, name: str) -> types.CallToolResult:
    return text_result(
        f"Refused: the tool {name!r} is not offered by the upstream server "
        f"{server!r} through this gateway.",
        refused="unknown_tool",
        tool=name,
    )


def not_allowed(
    rule: EffectRule, name: str, reason: str, remedy: str, code: str
) -> types.CallToolResult:
    """A registered effect the caller may not call (the policy's ``reason``, ``remedy``
    and ``code``)."""
    return text_result(
        f"Refused: {name!r} is a registered effect ({rule.where}) and {reason}; "
        f"it was not called and nothing was recorded. {remedy}.",
        refused=code,
        tool=name,
    )


# -- registered calls ------------------------------------------------------------------------


def kept_arguments(
    server: str, rule: EffectRule, name: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    """What the action records of a registered call: the server, the tool, the rule and
    the arguments (their digest when larger than ``MAX_RESULT_CHARS``)."""
    text = json.dumps(arguments, sort_keys=True, ensure_ascii=False)
    kept: Any = (
        arguments
        if len(text) <= MAX_RESULT_CHARS
        else {"sha256": sha256_hex(text), "chars": len(text)}
    )
    return {
        "gateway": "mcp",
        "server": server,
        "tool": name,
        "arguments": kept,
        "rule": {"index": rule.index, "action_type": rule.action_type},
    }


def kept_result(result: types.CallToolResult) -> dict[str, Any]:
    """What a completed action keeps of the upstream's result: the result (replayed to a
    repeat of the call), or its digest when larger than ``MAX_RESULT_CHARS``."""
    dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    text = canonical_json(dumped)
    if len(text) <= MAX_RESULT_CHARS:
        return {"result": dumped}
    return {"sha256": sha256_hex(text), "chars": len(text)}


def unrecordable(rule: EffectRule, name: str, error: ContinuumError) -> types.CallToolResult:
    """A registered call the store cannot record now: not called (fail closed)."""
    return text_result(
        f"Refused: {name!r} is a registered effect ({rule.where}) that continuum "
        "cannot record now, so it was not called: "
        f"{error.message} [{error.code}]" + (f" ({error.hint})" if error.hint else ""),
        refused=error.code,
        tool=name,
    )


# The statuses for which a person must check the upstream and reconcile the action.
PERSON_SETTLES = ("unknown", "reconcile_required", "needs_confirmation", "version_drift")


def ledger_refusal(
    server: str,
    run: str,
    name: str,
    ref: str,
    action_id: str,
    status: str,
    guidance: str,
    probed: str = "",
) -> types.CallToolResult:
    """A registered call the ledger does not let proceed (``status``, its ``guidance``),
    with what a person must do when the outcome is theirs to settle; ``probed``: what the
    rule's probe said when it could not tell."""
    what = (
        f"a person must check whether it happened at {server!r}, then run "
        f"`continuum reconcile {run} {ref} --occurred` (it happened) or "
        f"`continuum reconcile {run} {ref} --not-occurred` (it did not)"
    )
    return text_result(
        f"Refused: {name!r} is the action {ref} of run {run!r}, and the ledger says "
        f"{status}: {guidance} It was not called again. "
        + probed
        + (what if status in PERSON_SETTLES else ""),
        refused=status,
        tool=name,
        action_id=action_id,
        action_key=ref,
        run=run,
    )


def probe_found(
    name: str, ref: str, action_id: str, said: str, *, no_result: bool
) -> types.CallToolResult:
    """A repeat of an unknown call whose rule's probe found that it happened.
    ``no_result``: the tool has an output schema (an answer without its structured
    content must be marked ``isError``)."""
    return types.CallToolResult(
        is_error=no_result,
        content=[
            types.TextContent(
                type="text",
                text=f"Already done: {name!r} ({ref}) had no recorded answer, and the "
                f"rule's probe found that it happened ({said}); it was not called again.",
            )
        ],
        _meta={
            LEDGER_META: {
                "answered": "probe_occurred",
                "action_key": ref,
                "action_id": action_id,
            }
        },
    )


def from_ledger(
    stored: Any, name: str, ref: str, action_id: str, *, no_result: bool
) -> types.CallToolResult:
    """A repeat of a completed call: the result it stored (``kept_result``), or a note
    that only its digest was kept."""
    meta = {"answered": "from_ledger", "action_key": ref, "action_id": action_id}
    if isinstance(stored, dict) and "result" in stored:
        try:
            result = types.CallToolResult.model_validate(stored["result"])
        except ValueError:
            result = None
        if result is not None:
            merged = dict(result.meta or {})
            merged[LEDGER_META] = meta
            return result.model_copy(update={"meta": merged})
    return types.CallToolResult(
        is_error=no_result,
        content=[
            types.TextContent(
                type="text",
                text=f"Already done: {name!r} ({ref}) completed earlier; its result was "
                "too large to keep, so only its digest is stored. It was not called again.",
            )
        ],
        _meta={LEDGER_META: {**meta, "stored": stored}},
    )


def replaced_before_sent(server: str, run: str, name: str, ref: str) -> types.CallToolResult:
    """A registered call judged on an upstream reached (or started) again before it was
    sent: not sent, its action failed (certain)."""
    return text_result(
        f"The upstream server {server!r} was reached (or started) again "
        f"after {name!r} was judged, so it was not sent (the action {ref} failed). "
        "Call it again: it is judged against the new upstream's tools first.",
        refused="upstream_restarted",
        tool=name,
        action_key=ref,
        run=run,
    )


def session_refused(
    server: str, run: str, name: str, ref: str, error: Exception
) -> types.CallToolResult:
    """A registered call an HTTP upstream refused because it restarted (it did not
    perform it): its action failed (certain)."""
    return text_result(
        f"The upstream server {server!r} had restarted and refused "
        f"{name!r} ({error}); it was not performed (the action {ref} failed). Call it "
        "again: the gateway reaches the upstream again first.",
        refused="upstream_restarted",
        tool=name,
        action_key=ref,
        run=run,
    )


def unknown_outcome(
    server: str, run: str, name: str, ref: str, error: Exception
) -> types.CallToolResult:
    """A registered call sent upstream with no answer: it may have happened, its action
    is unknown until a person settles it."""
    return text_result(
        f"The upstream server {server!r} gave no answer to {name!r} "
        f"({type(error).__name__}: {error}); it may or may not have happened. The action "
        f"{ref} of run {run!r} is now unknown and will not be called again until a "
        f"person checks the upstream, then runs `continuum reconcile {run} {ref} "
        "--occurred` or `--not-occurred`.",
        refused="unknown",
        tool=name,
        action_key=ref,
        run=run,
    )

"""What each coding host sends a hook on stdin, and how it expects an answer.

Facts (each host's documentation and source, see references/hooks.md):

- Claude Code: PreToolUse, PostToolUse (success only), PostToolUseFailure, SessionStart,
  PreCompact. Exit 2 blocks and shows stderr to the model; any other non-zero exit and a
  timeout *fail open* (the tool runs). JSON on stdout is read on every exit code.
- Gemini CLI: BeforeTool, AfterTool (every executed tool; a shell's exit code is only a
  line ``Exit Code: N`` in ``llmContent``), SessionStart, PreCompress. Exit 2 blocks
  only with a non-empty stderr; JSON on stdout is ignored on a non-zero exit.
- Codex: PreToolUse, PostToolUse (also after a non-zero exit), SessionStart, PreCompact;
  every shell tool is ``Bash`` with ``{command}``. Exit 2 blocks only with a non-empty
  stderr; output JSON with an unknown field is invalid and fails open.

So the one answer that blocks on all three is exit 2 with the reason on stderr and
nothing on stdout; that is what a denial is. An allow prints nothing and exits 0 (it
never grants a permission the user's own settings would not). Context for the model at
session start is ``{"hookSpecificOutput": {"hookEventName": "SessionStart",
"additionalContext": ...}}``, which all three read.

Standard library only: this runs on every tool call.
"""

from __future__ import annotations

import json
import re

from continuum.errors import UsageError

TYPE_CHECKING = False  # no typing or dataclasses on the hot path (see registry.py)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

HOSTS = ("claude-code", "gemini", "codex")
KINDS = ("pre-tool", "post-tool", "post-tool-failure", "session-start", "pre-compact")
DENY_EXIT = 2

# Tools that only read: with a malformed registry, the gate still lets these through (a
# person must be able to look around), and refuses everything else.
READ_ONLY_TOOLS = frozenset(
    {
        "Read",
        "Glob",
        "Grep",
        "LS",
        "NotebookRead",
        "TodoWrite",
        "TodoRead",  # Claude Code
        "read_file",
        "read_many_files",
        "list_directory",
        "glob",
        "grep_search",
        "search_file_content",  # Gemini CLI
    }
)

# File-writing tools whose result is recorded as evidence (path, size, sha256 on disk).
FILE_TOOLS = {
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",  # Claude Code
    "write_file": "file_path",
    "replace": "file_path",  # Gemini CLI
    "apply_patch": "command",  # Codex: the patch text names the files
}
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$", re.M)
_EXIT_LINE = re.compile(r"(?im)^\s*exit code:?\s*(-?\d+)")
_LEADING_EXIT = re.compile(r"(?i)^\s*exit code\s*(-?\d+)")


class Outcome:
    """What the host says about a tool call that ran (or did not)."""

    __slots__ = (
        "error",
        "exit_code",
        "failed",
        "interrupted",
        "never_started",
        "output_chars",
        "output_sha256",
    )

    def __init__(
        self,
        *,
        failed: bool,
        exit_code: int | None = None,
        interrupted: bool = False,
        never_started: bool = False,
        output_sha256: str | None = None,
        output_chars: int = 0,
        error: str | None = None,
    ) -> None:
        self.failed = failed
        self.exit_code = exit_code
        self.interrupted = interrupted
        self.never_started = never_started
        self.output_sha256 = output_sha256
        self.output_chars = output_chars
        self.error = error

    def summary(self) -> dict[str, Any]:
        """Bounded: codes and a digest, never the output itself (it may hold secrets)."""
        out: dict[str, Any] = {
            "exit_code": self.exit_code,
            "interrupted": self.interrupted,
            "output_sha256": self.output_sha256,
            "output_chars": self.output_chars,
        }
        if self.error:
            out["error"] = self.error[:200]
        return out


class HookEvent:
    """One host event, the same shape whichever host sent it."""

    __slots__ = (
        "agent_id",
        "agent_type",
        "cwd",
        "host",
        "kind",
        "outcome",
        "session_id",
        "source",
        "tool_input",
        "tool_name",
        "tool_use_id",
    )

    def __init__(
        self,
        *,
        host: str,
        kind: str,
        session_id: str | None,
        cwd: str | None,
        tool_name: str | None = None,
        tool_input: Mapping[str, Any] | None = None,
        tool_use_id: str | None = None,
        outcome: Outcome | None = None,
        source: str | None = None,
        agent_id: str | None = None,
        agent_type: str | None = None,
    ) -> None:
        self.host = host
        self.kind = kind
        self.session_id = session_id
        self.cwd = cwd
        self.tool_name = tool_name
        self.tool_input: Mapping[str, Any] = tool_input or {}
        self.tool_use_id = tool_use_id
        self.outcome = outcome
        self.source = source  # session-start: startup | resume | clear | compact
        # A call made inside a subagent (Claude Code's Agent tool; Codex's subagents): the
        # host names the subagent; None in the main loop.
        self.agent_id = agent_id
        self.agent_type = agent_type


def _bad(host: str, kind: str, problem: str) -> UsageError:
    return UsageError(
        f"the {host} {kind} hook input is not usable: {problem}",
        code="hooks.bad_event",
        hint="hooks read the host's JSON event on stdin; run them from the host "
        "(continuum hooks install), not by hand",
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def parse_event(host: str, kind: str, data: bytes) -> HookEvent:
    """Normalize one host's stdin JSON; ``UsageError`` (``hooks.bad_event``) if unusable."""
    if host not in HOSTS:
        raise UsageError(
            f"unknown host {host!r}", code="usage.bad_host", hint=f"use --host {' or '.join(HOSTS)}"
        )
    if kind not in KINDS:
        raise UsageError(
            f"unknown hook {kind!r}", code="usage.bad_hook", hint=f"use one of {', '.join(KINDS)}"
        )
    try:
        payload = json.loads(data.decode("utf-8")) if data.strip() else None
    except (UnicodeDecodeError, ValueError) as e:
        raise _bad(host, kind, f"stdin is not JSON ({e})") from e
    if not isinstance(payload, dict):
        raise _bad(host, kind, "stdin must be one JSON object")
    tool_input = payload.get("tool_input")
    if kind in ("pre-tool", "post-tool", "post-tool-failure"):
        if _text(payload.get("tool_name")) is None:
            raise _bad(host, kind, "tool_name is missing")
        if tool_input is None:
            tool_input = {}
        if not isinstance(tool_input, dict):
            raise _bad(host, kind, "tool_input must be a JSON object")
    return HookEvent(
        host=host,
        kind=kind,
        session_id=_text(payload.get("session_id")),
        cwd=_text(payload.get("cwd")),
        tool_name=_text(payload.get("tool_name")),
        tool_input=tool_input or {},
        tool_use_id=_text(payload.get("tool_use_id")),
        outcome=_outcome(host, kind, payload) if kind.startswith("post-tool") else None,
        source=_text(payload.get("source")) or _text(payload.get("trigger")),
        agent_id=_text(payload.get("agent_id")),
        agent_type=_text(payload.get("agent_type")),
    )


def _digest(value: Any) -> tuple[str | None, int]:
    import hashlib

    if value is None:
        return None, 0
    text = (
        value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)
    )
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest(), len(text)


def _outcome(host: str, kind: str, payload: Mapping[str, Any]) -> Outcome:
    response = payload.get("tool_response")
    sha, chars = _digest(response)
    if host == "claude-code":
        if kind == "post-tool-failure":
            message = _text(payload.get("error")) or "the tool failed"
            m = _LEADING_EXIT.match(message)
            return Outcome(
                failed=True,
                exit_code=int(m.group(1)) if m else None,
                interrupted=payload.get("is_interrupt") is True,
                output_sha256=_digest(message)[0],
                output_chars=len(message),
                error=message.splitlines()[0] if message else None,
            )
        interrupted = isinstance(response, dict) and response.get("interrupted") is True
        # PostToolUse fires only for a tool that succeeded.
        return Outcome(
            failed=interrupted,
            exit_code=None if interrupted else 0,
            interrupted=interrupted,
            output_sha256=sha,
            output_chars=chars,
        )
    if host == "gemini":
        text = ""
        error: str | None = None
        if isinstance(response, dict):
            text = str(response.get("llmContent") or "")
            err = response.get("error")
            if isinstance(err, dict):
                error = _text(err.get("message")) or _text(err.get("type")) or "tool error"
        elif isinstance(response, str):
            text = response
        m = _EXIT_LINE.search(text)
        code = int(m.group(1)) if m else (None if error else 0)
        cancelled = "cancelled" in text.lower() and "command was cancelled" in text.lower()
        return Outcome(
            failed=bool(error) or bool(code) or cancelled,
            exit_code=code,
            interrupted=cancelled,
            output_sha256=sha,
            output_chars=chars,
            error=error,
        )
    # codex: the output as text; an exit code only when it says so
    text = response if isinstance(response, str) else json.dumps(response)
    m = _EXIT_LINE.search(text or "")
    code = int(m.group(1)) if m else None
    return Outcome(failed=bool(code), exit_code=code, output_sha256=sha, output_chars=chars)


def file_paths(tool_name: str, tool_input: Mapping[str, Any]) -> list[str]:
    """The files a file-writing tool call wrote (empty for other tools)."""
    field_name = FILE_TOOLS.get(tool_name)
    if field_name is None:
        return []
    value = tool_input.get(field_name)
    if not isinstance(value, str):
        return []
    if tool_name == "apply_patch":
        return [m.group(1) or m.group(2) for m in _PATCH_FILE.finditer(value)]
    return [value]


def subagent_of(arguments: Any) -> tuple[str, str | None] | None:
    """(id, type) of the host subagent that made a gated call, from the arguments the gate
    recorded (``{"agent": {"id", "type"}}``); None for a call of the main loop."""
    agent = arguments.get("agent") if isinstance(arguments, dict) else None
    if not isinstance(agent, dict) or not isinstance(agent.get("id"), str):
        return None
    kind = agent.get("type")
    return agent["id"], kind if isinstance(kind, str) else None


def session_context(text: str) -> str:
    """The JSON that puts ``text`` into the model's context at session start."""
    return json.dumps(
        {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}},
        ensure_ascii=False,
    )

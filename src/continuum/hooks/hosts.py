"""What each coding host sends a hook on stdin, and how it expects an answer.

Facts from the real binaries (tests/hosts/, payloads in tests/hosts/fixtures/HOST/; see
references/hooks.md for the versions):

- Claude Code: PreToolUse, PostToolUse (success only), PostToolUseFailure, SessionStart,
  PreCompact. Exit 2 blocks and shows stderr to the model; any other non-zero exit and a
  timeout *fail open* (the tool runs). JSON on stdout is read on every exit code. A call
  made inside a subagent carries ``agent_id`` and ``agent_type``.
- Gemini CLI: BeforeTool, AfterTool (every executed tool; a shell's exit code is only a
  line ``Exit Code: N`` in ``llmContent``), SessionStart, PreCompress (before every model
  request, whether or not it then compresses). Stdout (else stderr) is read on every exit
  code: plain text with an exit code of 2 or more denies, exit 0 or 1 allows; exit 2 with
  nothing printed lets the tool run.
- Codex: PreToolUse, PostToolUse (after a shell command whatever its exit, but carrying
  its output alone: the exit status is read from Codex's session transcript; for
  apply_patch and MCP tools only when they worked), SessionStart, PreCompact; every
  shell tool is ``Bash`` with ``{command}``. Exit 2 blocks only with a non-empty stderr,
  and Codex appends ". Command: X" to the reason; exit 1 and unknown JSON fields fail
  open.
- Kilo Code: no hook commands; continuum's plugin (``kilo_plugin.js``) runs these hooks
  with Claude-Code-shaped events (``tool_response`` is Kilo's ``{output, metadata}``, a
  bash exit status in ``metadata.exit``), and throws continuum's denial.

So the one answer that blocks on every host is exit 2 with the reason on stderr and
nothing on stdout; that is what a denial is. An allow prints nothing and exits 0 (it
never grants a permission the user's own settings would not). Context for the model at
session start is ``{"hookSpecificOutput": {"hookEventName": "SessionStart",
"additionalContext": ...}}``, which all of them read.

Standard library only: this runs on every tool call.
"""

from __future__ import annotations

from continuum.errors import UsageError
from continuum.json_text import loads as json_loads

TYPE_CHECKING = False  # no typing or dataclasses on the hot path (see registry.py)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

HOSTS = ("claude-code", "gemini", "codex", "kilo")
KINDS = (
    "pre-tool",
    "post-tool",
    "post-tool-failure",
    "session-start",
    "pre-compact",
    "subagent-start",
    "subagent-stop",
)
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
        "read",
        "grep",
        "list",
        "list_mcp_resources",
        "list_mcp_resource_templates",
        "read_mcp_resource",  # Kilo Code
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
    "write": "filePath",
    "edit": "filePath",  # Kilo Code (relative to the project, or absolute)
}
# Patterns as text, compiled on first use (`re` caches them): a tool call that needs none
# of them compiles none.
_PATCH_FILE = r"(?m)^\*\*\* (?:Add|Update) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$"
_EXIT_LINE = r"(?im)^\s*exit code:?\s*(-?\d+)"
_LEADING_EXIT = r"(?i)^\s*exit code\s*(-?\d+)"


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
        "unreported",
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
        unreported: bool = False,
    ) -> None:
        self.failed = failed
        # The host ran the call but did not say how it ended: recorded as unknown, never
        # as done (a failed effect must not read as one that happened).
        self.unreported = unreported
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
        "model",
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
        model: str | None = None,
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
        # The model the host says is making the call (Codex's payloads carry it), pinned
        # with a gated effect; None where the host does not say.
        self.model = model


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
        payload = json_loads(data.decode("utf-8")) if data.strip() else None
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
        model=_text(payload.get("model")),
    )


def _digest(value: Any) -> tuple[str | None, int]:
    from continuum.digest import sha256_hex
    from continuum.json_text import dumps_sorted

    if value is None:
        return None, 0
    text = value if isinstance(value, str) else dumps_sorted(value)
    return sha256_hex(text.encode("utf-8", "replace")), len(text)


def _failure(
    payload: Mapping[str, Any], *, interrupted: bool = False, never_started: bool = False
) -> Outcome:
    """A PostToolUseFailure-shaped event: ``error`` is "Exit code N ..." or the host's text."""
    import re

    message = _text(payload.get("error")) or "the tool failed"
    m = re.match(_LEADING_EXIT, message)
    return Outcome(
        failed=True,
        exit_code=int(m.group(1)) if m else None,
        interrupted=interrupted,
        never_started=never_started,
        output_sha256=_digest(message)[0],
        output_chars=len(message),
        error=message.splitlines()[0],
    )


def _outcome(host: str, kind: str, payload: Mapping[str, Any]) -> Outcome:
    response = payload.get("tool_response")
    sha, chars = _digest(response)
    if host == "claude-code":
        if kind == "post-tool-failure":
            return _failure(payload, interrupted=payload.get("is_interrupt") is True)
        interrupted = isinstance(response, dict) and response.get("interrupted") is True
        # PostToolUse fires only for a tool that succeeded.
        return Outcome(
            failed=interrupted,
            exit_code=None if interrupted else 0,
            interrupted=interrupted,
            output_sha256=sha,
            output_chars=chars,
        )
    if host == "kilo":
        return _kilo_outcome(kind, payload, response, sha, chars)
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
        import re

        m = re.search(_EXIT_LINE, text)
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
    # codex: PostToolUse fires only for a call that ran (not for a failed apply_patch or
    # an MCP error result); for the shell it carries the output alone, never the exit
    # status, which Codex's own session transcript holds (codex_exit_code).
    if payload.get("tool_name") != "Bash":
        failed = isinstance(response, dict) and response.get("isError") is True
        return Outcome(failed=failed, exit_code=None, output_sha256=sha, output_chars=chars)
    code = codex_exit_code(payload.get("transcript_path"), payload.get("tool_use_id"))
    if code is None:
        return Outcome(
            failed=True,
            unreported=True,
            output_sha256=sha,
            output_chars=chars,
            error="Codex did not report the command's exit status",
        )
    return Outcome(failed=code != 0, exit_code=code, output_sha256=sha, output_chars=chars)


# Kilo refuses a call by its own permission rules after continuum's gate let it through:
# the tool never started.
_KILO_NOT_STARTED = (
    "The user rejected permission to use this specific tool call",
    "The user has specified a rule which prevents you from using this specific tool call",
)


def _kilo_outcome(
    kind: str, payload: Mapping[str, Any], response: Any, sha: str | None, chars: int
) -> Outcome:
    if kind == "post-tool-failure":
        message = _text(payload.get("error")) or ""
        return _failure(payload, never_started=message.startswith(_KILO_NOT_STARTED))
    metadata = response.get("metadata") if isinstance(response, dict) else None
    exit_code = metadata.get("exit") if isinstance(metadata, dict) else None
    if payload.get("tool_name") == "bash" and type(exit_code) is not int:
        return Outcome(
            failed=True,
            unreported=True,
            output_sha256=sha,
            output_chars=chars,
            error="Kilo did not report the command's exit status",
        )
    failed = (type(exit_code) is int and exit_code != 0) or (
        isinstance(response, dict) and response.get("isError") is True
    )
    code = exit_code if type(exit_code) is int else None
    return Outcome(failed=failed, exit_code=code, output_sha256=sha, output_chars=chars)


TRANSCRIPT_TAIL = 8 * 1024 * 1024  # the transcript's last bytes searched for a call's result


def codex_exit_code(transcript: Any, call_id: Any) -> int | None:
    """The exit code Codex recorded for shell call ``call_id`` in its session transcript
    (``transcript_path``: JSON lines; an ``event_msg`` whose payload is ``item_completed``
    with ``item.id`` the call id and an integer ``item.exit_code``), or None when the
    transcript is missing, unreadable or does not say. Codex writes that line before it
    runs PostToolUse (tests/hosts: every shell call, in parallel, after a yield, inside a
    subagent). Only the last ``TRANSCRIPT_TAIL`` bytes are read."""
    import json

    if not isinstance(transcript, str) or not isinstance(call_id, str) or not call_id:
        return None
    try:
        with open(transcript, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - TRANSCRIPT_TAIL))
            data = f.read()
    except OSError:
        return None
    needle = json.dumps(call_id).encode()
    for line in reversed(data.splitlines()):
        if needle not in line or b"item_completed" not in line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        body = entry.get("payload") if isinstance(entry, dict) else None
        if not isinstance(body, dict) or body.get("type") != "item_completed":
            continue
        item = body.get("item")
        if (
            isinstance(item, dict)
            and item.get("id") == call_id
            and type(item.get("exit_code")) is int
        ):
            return int(item["exit_code"])
    return None


def file_paths(tool_name: str, tool_input: Mapping[str, Any]) -> list[str]:
    """The files a file-writing tool call wrote (empty for other tools)."""
    import re

    field_name = FILE_TOOLS.get(tool_name)
    if field_name is None:
        return []
    value = tool_input.get(field_name)
    if not isinstance(value, str):
        return []
    if tool_name == "apply_patch":
        return [m.group(1) or m.group(2) for m in re.finditer(_PATCH_FILE, value)]
    return [value]


SHELL_TOOLS = frozenset({"Bash", "run_shell_command", "bash", "shell", "exec_command"})
_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>"})


def shell_write_targets(command: str) -> list[str]:
    """The files a shell command line names as output: redirect targets (``> f``,
    ``>> f``, ``2> f``, ``&> f``) and ``tee`` arguments. A reading of the text, as a
    person would read it: not what a script, a variable or ``sh -c`` does inside. Empty
    when the line cannot be split."""
    import shlex

    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:
        return []
    out: list[str] = []
    for i, word in enumerate(words):
        if word.rstrip("0123456789") == "" and i + 1 < len(words):
            continue  # a file descriptor before a redirect ("2" of "2>")
        if word in _REDIRECTS and i + 1 < len(words):
            target = words[i + 1]
            if not target.startswith(("&", "/dev/")) and target not in _REDIRECTS:
                out.append(target)
        elif word == "tee":
            for arg in words[i + 1 :]:
                if arg in ("|", "||", "&&", ";", "&") or arg in _REDIRECTS:
                    break
                if not arg.startswith("-"):
                    out.append(arg)
    return list(dict.fromkeys(out))


def subagent_of(arguments: Any) -> tuple[str, str | None] | None:
    """(id, type) of the host subagent that made a gated call, from the arguments the gate
    recorded (``{"agent": {"id", "type"}}``); None for a call of the main loop."""
    agent = arguments.get("agent") if isinstance(arguments, dict) else None
    if not isinstance(agent, dict) or not isinstance(agent.get("id"), str):
        return None
    kind = agent.get("type")
    return agent["id"], kind if isinstance(kind, str) else None


def session_context(text: str, host: str | None = None, event: str = "SessionStart") -> str:
    """The JSON that puts ``text`` into the model's context at session start.

    Gemini CLI 0.61.0 HTML-escapes ``<`` and ``>`` in that context (``>>`` reaches the
    model as ``&gt;&gt;``), which would change a key or command the model reads; for it
    they are written as the visible escapes ``\x3c`` and ``\x3e`` instead, as every other
    unsafe character in a quoted value is (a backslash inside quotes is always doubled,
    so the escape is unambiguous)."""
    import json

    if host == "gemini" and ("<" in text or ">" in text):
        text = text.replace("<", "\\x3c").replace(">", "\\x3e")
        text += (
            "\n(less-than and greater-than signs are shown as \\x3c and \\x3e here: this "
            "host would rewrite them.)"
        )
    return json.dumps(
        {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}},
        ensure_ascii=False,
    )

"""Playing a coding host for `continuum hooks try`: the JSON each host sends for one call of
its shell tool, and what the host does with a hook's answer.

The event shapes are those captured from the real binaries (``tests/hosts/fixtures/HOST/``;
Claude Code's as ``tests/hooks/host_sim.py`` sends them) and read by ``hosts.py``; Kilo's
are the ones continuum's own plugin (``kilo_plugin.js``) builds. The rules for an answer
are the table "blocks a tool on / lets the tool run on" of references/hooks.md:

- Claude Code blocks on exit 2 (stderr to the model) or a JSON deny on any exit; any
  other exit and a timeout let the tool run (it fails open);
- Gemini CLI blocks on exit 2 or more with text (stdout, else stderr), or a JSON deny;
- Codex blocks on exit 2 with a non-empty stderr, or a JSON deny;
- Kilo (the plugin) lets the call run only on exit 0; exit 2 throws continuum's reason,
  anything else (another exit, a timeout) throws "could not judge".

Pure: no process is started here.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

SHELL_TOOL = {"claude-code": "Bash", "gemini": "run_shell_command", "codex": "Bash", "kilo": "bash"}
HOST_NAME = {
    "claude-code": "Claude Code",
    "gemini": "Gemini CLI",
    "codex": "Codex",
    "kilo": "Kilo Code",
}
# The host's events around one shell call: before it, after it worked, after it failed.
CALL_EVENTS = {
    "claude-code": ("PreToolUse", "PostToolUse", "PostToolUseFailure"),
    "gemini": ("BeforeTool", "AfterTool", "AfterTool"),
    "codex": ("PreToolUse", "PostToolUse", "PostToolUse"),
    "kilo": ("tool.execute.before", "tool.execute.after", "tool.execute.after"),
}
DESCRIPTION = "continuum hooks try"  # the tool input's description (Claude Code, Gemini, Kilo)
_KILO_REFUSED = "continuum refused this tool call"


@dataclass(frozen=True)
class Call:
    """One shell tool call of a host session, as the host would number it."""

    host: str
    command: str
    cwd: str
    session_id: str
    tool_use_id: str | None  # Gemini CLI sends none
    transcript: str  # the session transcript's path (Codex writes exit codes there)

    @property
    def tool(self) -> str:
        return SHELL_TOOL[self.host]

    @property
    def tool_input(self) -> dict[str, Any]:
        if self.host == "codex":  # every Codex shell call is Bash {command}
            return {"command": self.command}
        return {"command": self.command, "description": DESCRIPTION}


def new_call(host: str, command: str, cwd: str, transcript: str) -> Call:
    """A call with fresh ids in the host's own forms, so that two tries are two calls
    (and two sessions), as a model's repeat would be."""
    tag = uuid.uuid4().hex
    session = f"ses_{tag[:26]}" if host == "kilo" else str(uuid.uuid4())
    use_id = {"claude-code": f"toolu_{tag[:24]}", "codex": f"call_{tag[:24]}"}.get(host)
    if host == "kilo":
        use_id = f"call_{tag[:24]}"
    return Call(host, command, cwd, session, use_id, transcript)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _base(call: Call, event: str) -> dict[str, Any]:
    payload: dict[str, Any] = {"session_id": call.session_id}
    if call.host == "codex":
        payload["turn_id"] = str(uuid.uuid4())
    if call.host != "kilo":
        payload["transcript_path"] = call.transcript
    payload["cwd"] = call.cwd
    payload["hook_event_name"] = event
    if call.host == "gemini":
        payload["timestamp"] = _now()
    if call.host == "codex":
        payload["model"] = "hooks-try"
    if call.host in ("claude-code", "codex"):
        payload["permission_mode"] = "default"
    return payload


def pre_event(call: Call) -> dict[str, Any]:
    """What the host sends its pre-tool hook (Kilo: what continuum's plugin sends)."""
    name = "PreToolUse" if call.host == "kilo" else CALL_EVENTS[call.host][0]
    payload = _base(call, name)
    payload["tool_name"] = call.tool
    payload["tool_input"] = call.tool_input
    if call.tool_use_id:
        payload["tool_use_id"] = call.tool_use_id
    return payload


def post_event(
    call: Call, exit_code: int, output: str, pre: dict[str, Any], duration_ms: int
) -> tuple[str, dict[str, Any]]:
    """(role, event) after the call ran: role ``post`` (it worked) or ``fail``; the event is
    what the host sends that role's hooks."""
    ok = exit_code == 0
    role = "post" if ok else "fail"
    event = {**pre}
    if call.host == "claude-code":
        if ok:  # PostToolUse fires only for a tool that worked
            event["hook_event_name"] = "PostToolUse"
            event["tool_response"] = {
                "stdout": output,
                "stderr": "",
                "interrupted": False,
                "isImage": False,
            }
        else:
            event["hook_event_name"] = "PostToolUseFailure"
            event["error"] = f"Exit code {exit_code}\n{output}".rstrip("\n")
            event["is_interrupt"] = False
            event["duration_ms"] = duration_ms
        return role, event
    if call.host == "gemini":
        # A shell's exit status is only a line of llmContent, and only when it is not 0.
        lines = [f"Output: {output.rstrip(chr(10)) or '(empty)'}"]
        if not ok:
            lines.append(f"Exit Code: {exit_code}")
        lines.append("Process Group PGID: 0")
        event["hook_event_name"] = "AfterTool"
        event["timestamp"] = _now()
        event["tool_response"] = {
            "llmContent": "<untrusted_context>\n" + "\n".join(lines) + "\n</untrusted_context>",
            "returnDisplay": output.rstrip("\n"),
        }
        return role, event
    if call.host == "codex":
        # The output alone; the exit status is in the transcript line (transcript_line).
        event["hook_event_name"] = "PostToolUse"
        event["tool_response"] = output
        return role, event
    # kilo: the plugin's after-hook; a bash call that exited non-zero goes to
    # post-tool-failure with "Exit code N" and without the tool's response.
    event["hook_event_name"] = "PostToolUse" if ok else "PostToolUseFailure"
    if ok:
        event["tool_response"] = {
            "title": DESCRIPTION,
            "metadata": {
                "output": output,
                "exit": exit_code,
                "description": DESCRIPTION,
                "truncated": False,
            },
            "output": output,
        }
    else:
        event["error"] = f"Exit code {exit_code}"
    return role, event


def transcript_line(call: Call, exit_code: int, output: str) -> str:
    """Codex's session-transcript line for a finished shell call: the only place Codex
    puts its exit code (``hosts.codex_exit_code`` reads it), written before PostToolUse."""
    item = {
        "type": "CommandExecution",
        "id": call.tool_use_id,
        "command": ["/bin/bash", "-lc", call.command],
        "cwd": f"file://{call.cwd}",
        "status": "completed" if exit_code == 0 else "failed",
        "aggregated_output": output,
        "exit_code": exit_code,
    }
    entry = {
        "timestamp": _now(),
        "type": "event_msg",
        "payload": {"type": "item_completed", "thread_id": call.session_id, "item": item},
    }
    return json.dumps(entry, ensure_ascii=False) + "\n"


def _json_denial(stdout: str) -> str | None:
    """A deny in JSON on stdout (every host reads one), or None."""
    text = stdout.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    specific = data.get("hookSpecificOutput")
    if isinstance(specific, dict) and specific.get("permissionDecision") == "deny":
        return str(specific.get("permissionDecisionReason") or "denied")
    if data.get("decision") in ("deny", "block"):
        return str(data.get("reason") or "denied")
    return None


@dataclass(frozen=True)
class Verdict:
    """What the host does with a pre-tool hook's answer."""

    allowed: bool
    reason: str | None  # the hook's reason for a denial
    model_reads: str | None  # the text the host puts before the model instead of a result
    why: str  # one line: which of the host's rules applied
    fail_open: bool = False  # allowed although the hook did not say so (an error, a timeout)


def verdict(
    host: str,
    exit_code: int | None,
    stdout: str,
    stderr: str,
    hook_command: str,
    command: str,
) -> Verdict:
    """The host's rule for one pre-tool answer; ``exit_code`` None: killed at the timeout."""
    if host == "kilo":
        return _kilo_verdict(exit_code, stderr)
    name = HOST_NAME[host]
    err = stderr.strip()
    denial = _json_denial(stdout)
    reason: str | None = None
    if denial is not None:
        reason, why = denial, "a JSON deny on stdout"
    elif exit_code is None:
        return Verdict(True, None, None, f"the hook timed out: {name} runs the call", True)
    elif host == "claude-code" and exit_code == 2:
        reason, why = err or "blocked", "exit 2"
    elif host == "gemini" and exit_code >= 2 and (stdout.strip() or err):
        reason, why = stdout.strip() or err, f"exit {exit_code} with text"
    elif host == "codex" and exit_code == 2 and err:
        reason, why = err, "exit 2 with a reason on stderr"
    if reason is None:
        assert exit_code is not None
        if exit_code == 0:
            return Verdict(True, None, None, f"exit 0, nothing printed: {name} runs the call")
        return Verdict(
            True,
            None,
            None,
            f"exit {exit_code}: {name} runs the call anyway (it fails open on this answer)",
            True,
        )
    model = {
        "claude-code": f"PreToolUse:{SHELL_TOOL[host]} hook error: [{hook_command}]: {reason}",
        "gemini": f"Tool execution blocked: {reason}",
        "codex": f"Command blocked by PreToolUse hook: {reason}. Command: {command}",
    }[host]
    return Verdict(False, reason, model, f"{why}: {name} blocks the call")


def _one_line(text: str, limit: int) -> str:
    """The plugin's ``oneLine``: trimmed, cut at ``limit`` with " ..."."""
    t = text.strip()
    return t[:limit] + " ..." if len(t) > limit else t


def _kilo_verdict(exit_code: int | None, stderr: str) -> Verdict:
    """continuum's plugin (kilo_plugin.js): the call runs only on exit 0; exit 2 throws
    continuum's reason; anything else throws "could not judge" (it fails closed)."""
    if exit_code == 0:
        return Verdict(True, None, None, "exit 0: the plugin lets the call run")
    if exit_code == 2:
        reason = _one_line(stderr, 2000) or _KILO_REFUSED
        return Verdict(False, reason, reason, "exit 2: the plugin throws continuum's reason")
    why = "timed out" if exit_code is None else f"exit {exit_code}"
    text = (
        f"continuum's gate could not judge this bash call ({why}), so it was refused to be "
        f"safe; tell the user. {_one_line(stderr, 500)}"
    )
    return Verdict(False, None, text, f"{why}: the plugin refuses the call (fails closed)")

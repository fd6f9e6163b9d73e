"""A stand-in for a coding host, driving the hooks exactly as the host does.

Usage: host_sim.py --host HOST --project DIR --session ID --calls FILE
                   [--die-after-effect N] [--die-after-post N] [--fault-pre SPEC]

It reads the hook settings that ``continuum hooks install`` wrote for HOST, and for each
tool call in FILE (a JSON list of ``{"tool": NAME, "input": {...}}``):

1. builds the pre-tool event in the host's documented shape, runs every matching hook
   command through ``sh -c`` in the project directory with a minimal PATH, and applies
   the host's rules to the answers: Claude Code blocks on exit 2 or a JSON "deny" and
   lets the tool run on any other exit code (fail open); Gemini CLI and Codex block on
   exit 2 with a non-empty stderr (or a JSON deny on exit 0) and run it otherwise;
2. if allowed, performs the tool for real (``Bash``/``run_shell_command``: ``sh -c``;
   ``Write``/``write_file``: writes the file);
3. sends the post-tool event (Claude Code: PostToolUse on success, PostToolUseFailure on
   a non-zero exit; Gemini CLI: AfterTool with ``Exit Code: N`` in ``llmContent``;
   Codex: PostToolUse with the output text alone, after appending the call's
   ``item_completed`` line with its exit code to the session transcript, as the real
   Codex 0.171.0 does: tests/hosts/fixtures/codex/).

Before the calls it runs the session-start hooks and prints the context they give. Each
step prints one JSON line on stdout. ``--die-after-effect N`` SIGKILLs this process (the
host) right after call N's effect, before its post-tool hook: a host crash;
``--die-after-post N`` after its post-tool hook. ``--fault-pre SPEC`` arms a named fault
point (``CONTINUUM_FAULTS``) in the pre-tool hooks only: the hook dies there.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

SETTINGS = {
    "claude-code": ".claude/settings.json",
    "gemini": ".gemini/settings.json",
    "codex": ".codex/hooks.json",
}
EVENTS = {
    "claude-code": {
        "pre": "PreToolUse",
        "post": "PostToolUse",
        "fail": "PostToolUseFailure",
        "start": "SessionStart",
    },
    "gemini": {
        "pre": "BeforeTool",
        "post": "AfterTool",
        "fail": "AfterTool",
        "start": "SessionStart",
    },
    "codex": {
        "pre": "PreToolUse",
        "post": "PostToolUse",
        "fail": "PostToolUse",
        "start": "SessionStart",
    },
}
HOOK_ENV_PATH = "/usr/bin:/bin"  # hosts start hooks with their own PATH; not the venv's


def say(**fields: Any) -> None:
    print(json.dumps(fields, sort_keys=True), flush=True)


def matches(host: str, matcher: str | None, name: str) -> bool:
    if matcher in (None, "", "*"):
        return True
    assert matcher is not None
    if host == "gemini":
        return re.search(matcher, name) is not None
    if re.fullmatch(r"[A-Za-z0-9_|, -]*", matcher):  # Claude Code / Codex: exact names
        return name in [m.strip() for m in re.split(r"[|,]", matcher)]
    return re.search(matcher, name) is not None


def commands(host: str, project: Path, event: str, tool: str | None) -> list[str]:
    config = json.loads((project / SETTINGS[host]).read_text(encoding="utf-8"))
    out = []
    for group in config.get("hooks", {}).get(event, []):
        if tool is not None and not matches(host, group.get("matcher"), tool):
            continue
        out += [h["command"] for h in group.get("hooks", []) if h.get("type") == "command"]
    return out


def run_hooks(
    host: str,
    project: Path,
    event: str,
    tool: str | None,
    payload: dict[str, Any],
    fault: str | None = None,
) -> list[subprocess.CompletedProcess[str]]:
    env = {"PATH": HOOK_ENV_PATH, "HOME": os.environ.get("HOME", "/root")}
    if fault:
        env["CONTINUUM_FAULTS"] = fault
    for name in ("CONTINUUM_HOOK_WAIT_MS", "CONTINUUM_GATE_SOCKET"):
        if name in os.environ:  # an operator's setting, passed by the host
            env[name] = os.environ[name]
    if host == "claude-code":
        env["CLAUDE_PROJECT_DIR"] = str(project)
    if host == "gemini":
        env["GEMINI_PROJECT_DIR"] = env["CLAUDE_PROJECT_DIR"] = str(project)
    return [
        subprocess.run(
            ["sh", "-c", cmd],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            cwd=project,
            env=env,
            timeout=120,
            check=False,
        )
        for cmd in commands(host, project, event, tool)
    ]


def blocked(host: str, answers: list[subprocess.CompletedProcess[str]]) -> str | None:
    """The host's rules for a pre-tool answer: the reason it blocks, or None (it runs)."""
    for a in answers:
        denial = _json_denial(a.stdout)
        if host == "claude-code":
            if a.returncode == 2:
                return denial or a.stderr.strip() or "blocked"
            if denial:  # JSON is read on every exit code
                return denial
        else:
            if a.returncode == 2 and a.stderr.strip():
                return a.stderr.strip()
            if a.returncode == 0 and denial:
                return denial
    return None  # exit 0, or any other code: Claude Code fails open, so do the others here


def _json_denial(stdout: str) -> str | None:
    text = stdout.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    specific = data.get("hookSpecificOutput") or {}
    if specific.get("permissionDecision") == "deny":
        return str(specific.get("permissionDecisionReason") or "denied")
    if data.get("decision") in ("deny", "block"):
        return str(data.get("reason") or "denied")
    return None


def base(host: str, session: str, project: Path, event: str) -> dict[str, Any]:
    payload: dict[str, Any] = {"session_id": session, "cwd": str(project), "hook_event_name": event}
    if host in ("claude-code", "codex"):
        payload["transcript_path"] = str(project / "transcript.jsonl")
    if host == "gemini":
        payload["timestamp"] = "2026-12-02T00:00:00Z"
    if host == "codex" and os.environ.get("SIM_MODEL"):  # Codex's payloads name the model
        payload["model"] = os.environ["SIM_MODEL"]
    return payload


def perform(project: Path, tool: str, tool_input: dict[str, Any]) -> tuple[int, str, str]:
    if tool in ("Bash", "run_shell_command"):
        p = subprocess.run(
            ["sh", "-c", tool_input["command"]],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return p.returncode, p.stdout, p.stderr
    if tool in ("Write", "write_file"):
        path = Path(tool_input["file_path"])
        path = path if path.is_absolute() else project / path
        path.write_text(tool_input["content"], encoding="utf-8")
        return 0, "", ""
    raise SystemExit(f"host_sim cannot perform {tool}")


def post_event(host: str, ok: bool, code: int, out: str, err: str) -> tuple[str, dict[str, Any]]:
    names = EVENTS[host]
    if host == "claude-code":
        if ok:
            return names["post"], {
                "tool_response": {
                    "stdout": out,
                    "stderr": err,
                    "interrupted": False,
                    "isImage": False,
                }
            }
        return names["fail"], {
            "error": f"Exit code {code}\n{out}{err}",
            "is_interrupt": False,
            "duration_ms": 5,
        }
    if host == "gemini":
        text = f"Output: {out}{err}" + ("" if ok else f"\nExit Code: {code}")
        return names["post"], {"tool_response": {"llmContent": text, "returnDisplay": text}}
    return names["post"], {"tool_response": f"{out}{err}"}


def transcribe(transcript: Path, call_id: str, code: int) -> None:
    """Codex's transcript line for a finished shell call (the exit code is only there)."""
    item = {"type": "CommandExecution", "id": call_id, "exit_code": code}
    item["status"] = "completed" if code == 0 else "failed"
    line = {"type": "event_msg", "payload": {"type": "item_completed", "item": item}}
    with transcript.open("a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", required=True, choices=sorted(SETTINGS))
    ap.add_argument("--project", required=True)
    ap.add_argument("--session", required=True)
    ap.add_argument("--calls", required=True)
    ap.add_argument("--die-after-effect", type=int, default=None)
    ap.add_argument("--die-after-post", type=int, default=None)
    ap.add_argument("--fault-pre", default=None)
    ap.add_argument("--no-session-start", action="store_true")
    args = ap.parse_args()
    host, project = args.host, Path(args.project)
    names = EVENTS[host]
    if not args.no_session_start:
        start = base(host, args.session, project, names["start"]) | {"source": "startup"}
        for a in run_hooks(host, project, names["start"], None, start):
            context = None
            if a.stdout.strip():
                context = json.loads(a.stdout)["hookSpecificOutput"]["additionalContext"]
            say(step="session-start", exit=a.returncode, context=context, stderr=a.stderr)
    calls = json.loads(Path(args.calls).read_text(encoding="utf-8"))
    for i, call in enumerate(calls):
        tool, tool_input = call["tool"], call["input"]
        pre = base(host, args.session, project, names["pre"]) | {
            "tool_name": tool,
            "tool_input": tool_input,
        }
        if host != "gemini":
            pre["tool_use_id"] = f"toolu_{args.session}_{i}"
        answers = run_hooks(host, project, names["pre"], tool, pre, fault=args.fault_pre)
        reason = blocked(host, answers)
        say(
            step="pre-tool",
            call=i,
            blocked=reason is not None,
            reason=reason,
            exits=[a.returncode for a in answers],
        )
        if reason is not None:
            continue
        code, out, err = perform(project, tool, tool_input)
        if args.die_after_effect == i:
            os.kill(os.getpid(), signal.SIGKILL)  # the host dies before its post-tool hook
        event, extra = post_event(host, code == 0, code, out, err)
        post = pre | {"hook_event_name": event} | extra
        if host == "codex":
            transcribe(Path(pre["transcript_path"]), pre["tool_use_id"], code)
        answers = run_hooks(host, project, event, tool, post)
        say(
            step="post-tool",
            call=i,
            exit=code,
            hook_exits=[a.returncode for a in answers],
            stderr=[a.stderr for a in answers if a.stderr],
        )
        if args.die_after_post == i:
            os.kill(os.getpid(), signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The hooks read what the real hosts send: payloads captured from the real binaries
(tests/hosts/fixtures/HOST/, see each README) parsed as the gate parses them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from continuum.hooks.hosts import codex_exit_code, parse_event

FIXTURES = Path(__file__).resolve().parents[1] / "hosts" / "fixtures"


def fixture(host: str, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / host / f"{name}.json").read_text())
    return data


def post(host: str, payload: dict[str, Any]) -> Any:
    event = parse_event(host, "post-tool", json.dumps(payload).encode())
    assert event.outcome is not None
    return event.outcome


def transcript(tmp_path: Path, *lines: dict[str, Any]) -> str:
    path = tmp_path / "rollout.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def test_codex_reads_a_failed_commands_exit_code_from_its_transcript(tmp_path: Path) -> None:
    line = fixture("codex", "transcript-item_completed-shell-exit3")
    payload = fixture("codex", "PostToolUse-shell-exit3")
    assert payload["tool_use_id"] == line["payload"]["item"]["id"]
    noise = {
        "type": "event_msg",
        "payload": {"type": "item_completed", "item": {"id": "other", "exit_code": 0}},
    }
    payload["transcript_path"] = transcript(tmp_path, noise, line, noise)
    outcome = post("codex", payload)
    assert (outcome.failed, outcome.exit_code, outcome.unreported) == (True, 3, False)


def test_codex_without_an_exit_code_is_unreported_never_done(tmp_path: Path) -> None:
    """PostToolUse for the shell carries its output alone: with no transcript line for the
    call (missing, unreadable, another call's) the outcome is not known, and a failed
    command must never read as done."""
    payload = fixture("codex", "PostToolUse-shell-exit3")
    for path in (str(tmp_path / "missing.jsonl"), transcript(tmp_path, {"type": "other"}), None):
        payload["transcript_path"] = path
        outcome = post("codex", payload)
        assert (outcome.failed, outcome.unreported, outcome.exit_code) == (True, True, None)


def test_codex_success_is_read_from_the_transcript_too(tmp_path: Path) -> None:
    line = fixture("codex", "transcript-item_completed-shell-exit3")
    line["payload"]["item"]["exit_code"] = 0
    payload = fixture("codex", "PostToolUse-shell-exit3")
    payload["transcript_path"] = transcript(tmp_path, line)
    outcome = post("codex", payload)
    assert (outcome.failed, outcome.exit_code) == (False, 0)


@pytest.mark.parametrize("bad", [None, "", 3, "x"])
def test_codex_exit_code_refuses_odd_arguments(tmp_path: Path, bad: Any) -> None:
    assert codex_exit_code(bad, "call_1") is None
    assert codex_exit_code(transcript(tmp_path, {"x": 1}), bad) is None


def test_codex_tools_other_than_the_shell_report_success_by_running_post_tool() -> None:
    # PostToolUse fires for apply_patch and MCP calls only when they worked.
    for name in ("PostToolUse-apply_patch", "PostToolUse-mcp"):
        outcome = post("codex", fixture("codex", name))
        assert (outcome.failed, outcome.unreported) == (False, False), name


def test_gemini_reports_a_shell_exit_code_inside_its_tool_output() -> None:
    outcome = post("gemini", fixture("gemini", "AfterTool-shell-exit3"))
    assert (outcome.failed, outcome.exit_code) == (True, 3)
    ok = post("gemini", fixture("gemini", "AfterTool-shell"))
    assert (ok.failed, ok.exit_code) == (False, 0)


@pytest.mark.parametrize(
    "host,name",
    [("codex", p.stem) for p in sorted((FIXTURES / "codex").glob("P*ToolUse-*.json"))]
    + [("gemini", p.stem) for p in sorted((FIXTURES / "gemini").glob("*Tool-*.json"))],
)
def test_every_captured_tool_payload_parses(host: str, name: str) -> None:
    kind = "pre-tool" if name.startswith(("Pre", "Before")) else "post-tool"
    event = parse_event(host, kind, (FIXTURES / host / f"{name}.json").read_bytes())
    assert event.tool_name and event.session_id


def kilo_post(kind: str, **payload: Any) -> Any:
    event = {"session_id": "ses_1", "cwd": "/p", "tool_use_id": "call_1", **payload}
    parsed = parse_event("kilo", kind, json.dumps(event).encode())
    assert parsed.outcome is not None
    return parsed.outcome


def test_kilo_reads_a_bash_exit_status_from_the_plugins_event() -> None:
    """What continuum's Kilo plugin sends: the `after` output as tool_response (bash: its
    exit code in metadata.exit, as captured in fixtures/kilo/), a failure event for a
    non-zero exit or a call that threw."""
    after = fixture("kilo", "tool.execute.after-bash")
    ok = kilo_post("post-tool", tool_name="bash", tool_input={}, tool_response=after["output"])
    assert (ok.failed, ok.exit_code) == (False, 0)
    missing = kilo_post("post-tool", tool_name="bash", tool_input={}, tool_response={"output": "x"})
    assert (missing.failed, missing.unreported) == (True, True)  # never "done" by default
    failed = kilo_post("post-tool-failure", tool_name="bash", tool_input={}, error="Exit code 3")
    assert (failed.failed, failed.exit_code, failed.never_started) == (True, 3, False)
    refused = kilo_post(
        "post-tool-failure",
        tool_name="bash",
        tool_input={},
        error="The user rejected permission to use this specific tool call.",
    )
    assert (refused.failed, refused.never_started) == (True, True)
    mcp_error = kilo_post(
        "post-tool",
        tool_name="continuum_continuum_resume",
        tool_input={},
        tool_response={"isError": True},
    )
    assert mcp_error.failed is True

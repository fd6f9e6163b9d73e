"""What one real host does differently, and continuum's answer to it (issue 29).

- Codex: its PostToolUse for the shell carries the output alone, never the exit status,
  so a failed registered command was recorded as done and every retry refused as
  "already happened" (the effect lost). The exit code is read from Codex's transcript;
  a failed command is `unknown`, never done. Codex appends ". Command: X" to a denial.
- Gemini CLI: PreCompress fires before every model request; continuum checkpoints only
  what is new, at most once a minute. Gemini HTML-escapes `<` and `>` in the briefing.
  Its subagents' calls are gated like the main loop's, unmarked.
"""

from __future__ import annotations

from pathlib import Path

from tests.hosts.hosts_all import CODEX, GEMINI
from tests.hosts.scenarios import KILL_MARKER
from tests.hosts.script import ToolCall
from tests.hosts.test_hooks_gate import events, gated


def test_codex_a_failed_registered_command_is_unknown_and_its_retry_is_not_told_it_happened(
    tmp_path: Path,
) -> None:
    p = gated(CODEX, tmp_path)
    s = p.session(
        [
            [CODEX.shell("./send FAIL-1")],
            [CODEX.shell("./send FAIL-1")],
            [CODEX.shell("./send INV-1")],
        ]
    )
    assert s.code == 0 and not s.model.problems, s.describe()
    failed, retry, ok = s.model.results()
    assert "exited with code 3" in failed.text, failed
    assert "outcome is unknown" in retry.text and "already happened" not in retry.text, retry
    assert "exit code 3" in retry.text, retry  # what was recorded, not "the session ended"
    assert ". Command: ./send FAIL-1" in retry.text and ".. Command" not in retry.text, retry
    by_key = {a["key"]: a for a in p.actions()}
    assert by_key["./send FAIL-1"]["status"] == "unknown", by_key
    # Control: a command that worked is completed with its real exit code.
    assert by_key["./send INV-1"]["status"] == "completed", by_key
    assert by_key["./send INV-1"]["result"]["exit_code"] == 0, by_key
    assert "sent INV-1" in ok.text


def test_gemini_checkpoints_once_in_a_session_where_precompress_fires_every_turn(
    tmp_path: Path,
) -> None:
    p = gated(GEMINI, tmp_path)
    calls = [[GEMINI.shell(f"./send INV-{i}")] for i in range(1, 6)]
    s = p.session(calls)
    assert s.code == 0 and not s.model.problems, s.describe()
    assert p.outbox() == [f"INV-{i}" for i in range(1, 6)]
    assert len(s.model.main_turns()) >= 6  # PreCompress ran before each of these
    checkpoints = [e for e in events(p) if e["type"] == "checkpointed"]
    assert len(checkpoints) == 1, [c["payload"]["reason"] for c in checkpoints]


def test_gemini_gets_a_briefing_whose_angle_brackets_survive(tmp_path: Path) -> None:
    p = gated(GEMINI, tmp_path)
    p.write_file(".die-after-send", "INV-7\n")
    assert p.session([[GEMINI.shell("./send INV-7 >> log.txt")]], kill_marker=KILL_MARKER).killed
    s = p.session([[GEMINI.shell("echo next")]])
    first = s.model.main_turns()[0].text
    assert "crash-recovery briefing" in first, first[-2000:]
    assert "./send INV-7 \\x3e\\x3e log.txt" in first and "&gt;" not in first, first[-2000:]


def test_gemini_gates_a_subagents_effect_though_nothing_marks_it_as_a_subagents(
    tmp_path: Path,
) -> None:
    p = gated(GEMINI, tmp_path)
    marker = "SUBAGENT-TASK-1"
    s = p.session(
        [[ToolCall("invoke_agent", {"agent_name": "generalist", "prompt": f"{marker}: send it"})]],
        subagents={
            marker: [
                [GEMINI.shell("./send INV-9")],
                [GEMINI.shell("./send INV-9")],
                [ToolCall("complete_task", {"result": {"response": "sent"}})],
            ]
        },
    )
    assert s.code == 0 and not s.model.problems, s.describe()
    sent, repeat = s.model.results(marker)
    assert "sent INV-9" in sent.text and "already happened" in repeat.text, s.describe()
    assert p.outbox() == ["INV-9"]
    (action,) = p.actions()
    assert action["status"] == "completed" and "agent" not in action["arguments"], action


def test_gemini_sends_wait_for_previous_with_every_mcp_call_and_continuum_accepts_it(
    tmp_path: Path,
) -> None:
    """Gemini CLI adds wait_for_previous to every MCP tool's schema and the model sets it
    (the scripted model does, as told); the call does what it would without it. Any
    other unknown argument is still refused (tests/mcp/test_server_inmemory.py)."""
    from tests.hosts.conftest import make_project
    from tests.hosts.script import mcp

    p = make_project(GEMINI, tmp_path)
    p.install_mcp()
    s = p.session([[mcp("continuum_record_progress", run_id="r", goal="g", completed=1, total=2)]])
    assert s.code == 0 and not s.model.problems, s.describe()
    sent = [
        part["functionCall"]["args"]
        for r in s.model.requests
        for c in (r["body"] or {}).get("contents") or []
        for part in c.get("parts") or []
        if "functionCall" in part
    ]
    assert sent and all(a.get("wait_for_previous") is True for a in sent), sent
    (result,) = s.model.results()
    assert not result.is_error and result.json()["progress"]["completed"] == 1, result


def test_claude_p_waits_for_a_slow_mcp_server_only_when_told_to(tmp_path: Path) -> None:
    """`claude -p` does not wait for a project MCP server that starts slowly (under load,
    continuum-mcp's first request was missing its tools); CLAUDE_CODE_MCP_STARTUP_WAIT_MS
    in the environment makes it wait. The server here takes 4 s to start."""
    import json

    from tests.hosts.conftest import make_project
    from tests.hosts.hosts_all import CLAUDE
    from tests.hosts.script import mcp

    seen = {}
    for wait in ("0", "30000"):
        p = make_project(CLAUDE, tmp_path / f"wait-{wait}")
        p.install_mcp()
        config = json.loads((p.dir / ".mcp.json").read_text())
        server = config["mcpServers"]["continuum"]
        slow = p.write_file("slow-start", '#!/bin/sh\nsleep 4\nexec "$@"\n', mode=0o755)
        server["args"] = [server["command"], *server["args"]]
        server["command"] = str(slow)
        (p.dir / ".mcp.json").write_text(json.dumps(config))
        p.extra_env = {"CLAUDE_CODE_MCP_STARTUP_WAIT_MS": wait}
        s = p.session([[mcp("continuum_resume")]])
        seen[wait] = bool(s.model.problems)
    assert seen == {"0": True, "30000": False}, seen

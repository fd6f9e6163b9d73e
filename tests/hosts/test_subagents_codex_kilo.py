"""Tool calls made inside a host's subagent, through the real Codex and Kilo Code.

Codex 0.171.0: the main loop loads its sub-agent tools (namespace ``multi_agent_v1``) with
a ``tool_search`` and calls ``spawn_agent {message}``; the sub-agent is a conversation of
its own, whose hooks carry ``agent_id`` (the id ``spawn_agent`` answers) and
``agent_type`` (``default``). SubagentStart's ``additionalContext`` becomes a developer
message of the sub-agent's history (``hooks.additional_context`` in its transcript), so
its first model request holds continuum's briefing; SubagentStop leaves the note.

Kilo 7.7.7: the ``task`` tool runs a subagent in a child session (``parentID`` set, agent
``general``); the plugin names the call's agent after that session, whose id is the one
the task's result names (``<task id="ses_...">``). Kilo has no subagent-stop event.
"""

from __future__ import annotations

from pathlib import Path

from continuum.hooks.effect_path import subagent_run_id
from tests.hosts.harness import Project
from tests.hosts.hosts_all import CODEX, KILO
from tests.hosts.script import ToolCall, ToolResult
from tests.hosts.test_hooks_gate import events, gated

MARK = "SUBTASK-7"
SEND = "./send INV-001"


def _notes(p: Project) -> list[dict]:
    return [
        e["payload"]
        for e in events(p)
        if e["type"] == "evidence_added"
        and str(e["payload"].get("evidence_id", "")).startswith("subagent:")
    ]


def assert_subagent_run(p: Project, agent_id: str, status: str) -> None:
    """The subagent's session is a child run of the project's run (``runs --tree``)."""
    data = p.continuum_json("runs", "--tree")
    child = subagent_run_id(p.run, agent_id)
    assert data["parents"].get(child) == p.run, data
    (run,) = [r for r in data["runs"] if r["run_id"] == child]
    assert run["status"] == status, run
    tree = p.continuum("runs", "--tree").stdout
    assert f"\n  {child}" in tree or f'\n  "{child}"' in tree, tree


def test_codex_a_subagents_effect_is_gated_recorded_with_its_agent_briefed_and_noted(
    tmp_path: Path,
) -> None:
    """One session: the main loop sends INV-000 (its SessionStart had nothing to brief:
    no run yet), then spawns a sub-agent that sends INV-001 twice; the main loop repeats
    it after the sub-agent ended."""
    host = CODEX
    p = gated(host, tmp_path)

    def wait(results: list[ToolResult]) -> list[ToolCall]:
        agent = results[-1].json()["agent_id"]
        return [ToolCall("multi_agent_v1__wait_agent", {"targets": [agent], "timeout_ms": 30000})]

    spawn = ToolCall("multi_agent_v1__spawn_agent", {"message": f"{MARK}: send INV-001"})
    s = p.session(
        [[host.shell("./send INV-000")], [spawn], wait, [host.shell(SEND)]],
        subagents={MARK: [[host.shell(SEND)], [host.shell(SEND)]]},
    )
    assert s.code == 0 and not s.model.problems, s.describe()
    assert p.outbox() == ["INV-000", "INV-001"], s.describe()

    # The briefing reached the sub-agent through SubagentStart, not from the main loop's
    # context (whose first request had none: the run did not exist yet).
    assert "crash-recovery briefing" not in s.model.main_turns()[0].text
    first = s.model.main_turns(MARK)[0]
    assert first.position == 0 and "You are a subagent" in first.text, first.text[-3000:]
    assert "crash-recovery briefing" in first.text and "INV-000" in first.text, first.text[-3000:]

    sent, repeat = s.model.results(MARK)
    assert "sent INV-001" in sent.text, s.describe()
    assert repeat.text.startswith("Command blocked by PreToolUse hook: continuum: "), repeat
    assert "already happened" in repeat.text, repeat
    main_repeat = s.model.results()[-1]
    assert "already happened" in main_repeat.text, s.describe()

    spawned = next(r for r in s.model.results() if r.name == "multi_agent_v1__spawn_agent")
    action = next(a for a in p.actions() if a["action_key"].endswith(SEND))
    assert action["status"] == "completed", action
    assert action["arguments"]["agent"] == {"id": spawned.json()["agent_id"], "type": "default"}

    (note,) = _notes(p)
    agent = action["arguments"]["agent"]
    assert note["evidence_id"] == f"subagent:{agent['id']}:stopped", note
    assert note["agent"] == agent, note
    # the sub-agent's session is a child run of the project's run, ended at SubagentStop
    assert_subagent_run(p, agent["id"], "completed")


def test_kilo_a_subagents_effect_is_gated_and_recorded_with_its_agent(tmp_path: Path) -> None:
    host = KILO
    p = gated(host, tmp_path)
    task = ToolCall(
        "task",
        {
            "description": "send an invoice",
            "prompt": f"{MARK}: send INV-001",
            "subagent_type": "general",
        },
    )
    s = p.session(
        [[task], [host.shell(SEND)]],
        subagents={MARK: [[host.shell(SEND)], [host.shell(SEND)]]},
    )
    assert s.code == 0 and not s.model.problems, s.describe()
    assert p.outbox() == ["INV-001"], s.describe()

    sent, repeat = s.model.results(MARK)
    assert "sent INV-001" in sent.text, s.describe()
    assert repeat.text.startswith("continuum: ") and "already happened" in repeat.text, repeat
    main_repeat = s.model.results()[-1]
    assert "already happened" in main_repeat.text, s.describe()

    (action,) = p.actions()
    assert action["status"] == "completed", action
    agent = action["arguments"]["agent"]
    assert agent["type"] == "general" and agent["id"].startswith("ses_"), action["arguments"]
    done = next(r for r in s.model.results() if r.name == "task")
    assert f'<task id="{agent["id"]}"' in done.text, done
    # the subagent's session is a child run (Kilo has no subagent-stop: it stays active)
    assert_subagent_run(p, agent["id"], "active")

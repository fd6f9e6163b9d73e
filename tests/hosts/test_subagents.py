"""Tool calls made inside a host's subagent, through the real Claude Code (issue 29, item 13).

Claude Code 2.1.328 runs its hooks inside a subagent (the Agent tool) with ``agent_id``
and ``agent_type`` in PreToolUse/PostToolUse; SessionStart fires once, for the main loop,
and SubagentStart/SubagentStop around each subagent. So: the subagent's effect is gated
and recorded with its agent, its repeat is refused inside the subagent and in the main
loop, the subagent is briefed at its start (SubagentStart's additionalContext reaches its
first model request), its end is noted, and the next session's briefing names it.
"""

from __future__ import annotations

from pathlib import Path

from tests.hosts.hosts_all import CLAUDE
from tests.hosts.script import ToolCall
from tests.hosts.test_hooks_gate import events, gated
from tests.hosts.test_subagents_codex_kilo import assert_subagent_run

MARK = "SUBTASK-7"


def test_a_subagents_effect_is_gated_recorded_with_its_agent_and_the_subagent_is_briefed(
    tmp_path: Path,
) -> None:
    host = CLAUDE
    p = gated(host, tmp_path)
    assert p.session([[host.shell("./send INV-000")]]).code == 0  # something to brief on
    agent = ToolCall(
        "Agent",
        {
            "description": "send an invoice",
            "prompt": f"{MARK}: send INV-001",
            "subagent_type": "general-purpose",
            "run_in_background": False,
        },
    )
    s = p.session(
        [[agent], [host.shell("./send INV-001")]],
        subagents={MARK: [[host.shell("./send INV-001")], [host.shell("./send INV-001")]]},
    )
    assert s.code == 0 and not s.model.problems, s.describe()
    assert p.outbox() == ["INV-000", "INV-001"], s.describe()

    first = s.model.main_turns(MARK)[0]
    assert "You are a subagent" in first.text and "crash-recovery briefing" in first.text
    sent, repeat = s.model.results(MARK)
    assert "sent INV-001" in sent.text and "already happened" in repeat.text, repeat
    main_repeat = s.model.results()[-1]
    assert "already happened" in main_repeat.text, s.describe()

    action = next(a for a in p.actions() if "INV-001" in a["action_key"])
    who = action["arguments"]["agent"]
    assert who["type"] == "general-purpose" and who["id"], action["arguments"]
    notes = [
        e["payload"]
        for e in events(p)
        if e["type"] == "evidence_added"
        and e["payload"].get("evidence_id", "").startswith("subagent:")
    ]
    assert [n["agent"]["id"] for n in notes] == [who["id"]], notes
    # the subagent's session is a child run of the project's run, ended at SubagentStop
    assert_subagent_run(p, who["id"], "completed")

    s3 = p.session([])
    briefing = s3.model.main_turns()[0].text if s3.model.main_turns() else ""
    assert f'(in subagent "general-purpose" "{who["id"]}")' in briefing, briefing[-2000:]

"""Scripted host sessions running real shell effects through the installed hooks (issue 11).

Each host (Claude Code, Gemini CLI, Codex) is played by ``host_sim.py`` applying that
host's own rules to the hooks' answers. The effect appends to ``outbox.txt``; the
invariant is 0 duplicate lines, whatever crashes.
"""

from __future__ import annotations

from pathlib import Path

from tests.hooks.conftest import Project, make_project


def test_an_effect_runs_once_and_its_repeat_is_refused(project: Project) -> None:
    s = project.session("s1", [project.send("INV-1"), project.send("INV-1"), project.send("INV-2")])
    assert s.code == 0, s.stderr
    assert s.pre(0)["blocked"] is False and s.pre(2)["blocked"] is False
    assert s.pre(1)["blocked"] is True and "already happened" in s.pre(1)["reason"]
    assert project.outbox() == ["INV-1", "INV-2"]
    statuses = {a.action_key: str(a.status) for a in project.actions()}
    assert statuses == {
        "send_invoice:./send INV-1": "completed",
        "send_invoice:./send INV-2": "completed",
    }


def test_a_host_crash_between_effect_and_record_is_unknown_briefed_and_refused_until_settled(
    bare_project: Project,
) -> None:
    project = bare_project
    first = project.session("s1", [project.send("INV-1")])
    crashed = project.session("s2", [project.send("INV-2")], die_after_effect=0)
    assert first.code == 0 and crashed.code != 0  # SIGKILLed after the effect
    assert project.outbox() == ["INV-1", "INV-2"]

    # The next session is told, at start, and the repeat is refused.
    nxt = project.session("s3", [project.send("INV-2")])
    assert nxt.context is not None
    assert "send_invoice:./send INV-2" in nxt.context and "NOT known" in nxt.context
    assert "reconcile proj" in nxt.context and "--occurred" in nxt.context
    assert nxt.pre(0)["blocked"] is True
    assert "outcome is unknown" in nxt.pre(0)["reason"]
    assert "reconcile" in nxt.pre(0)["reason"]

    # A person settles it by hand; the repeat is now refused as done.
    action = next(a for a in project.actions() if a.action_key.endswith("INV-2"))
    r = project.continuum("reconcile", project.run, action.action_id, "--occurred", "--yes")
    assert r.returncode == 0, r.stderr
    last = project.session("s4", [project.send("INV-2"), project.send("INV-3")])
    assert last.pre(0)["blocked"] is True and "already happened" in last.pre(0)["reason"]
    assert project.outbox() == ["INV-1", "INV-2", "INV-3"]  # 0 duplicates


def test_the_rules_probe_settles_an_unknown_effect_at_session_start(project: Project) -> None:
    project.session("s1", [project.send("INV-7")], die_after_effect=0)
    nxt = project.session("s2", [project.send("INV-7")])
    assert nxt.context is not None and "Probe for" in nxt.context and "occurred" in nxt.context
    assert nxt.pre(0)["blocked"] is True and "already happened" in nxt.pre(0)["reason"]
    assert project.outbox() == ["INV-7"]
    [action] = project.actions()
    assert (str(action.status), str(action.settled_by)) == ("completed", "deterministic")


def test_a_probe_that_finds_nothing_lets_the_effect_run_once_more(project: Project) -> None:
    # The host died right after a send the mail server refused (nothing was sent): the
    # probe, run by hand here, finds no FAIL-8 in the outbox, so it did not happen.
    project.session("s1", [project.send("FAIL-8")], die_after_effect=0, session_start=False)
    r = project.continuum(
        "reconcile", "--probe", project.run, "send_invoice:./send FAIL-8", "--dir", str(project.dir)
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "not occurred" in r.stdout
    [action] = project.actions()
    assert (str(action.status), str(action.settled_by)) == ("failed", "deterministic")
    again = project.session("s2", [project.send("FAIL-8")], session_start=False)
    assert again.pre(0)["blocked"] is False  # settled by continuum's own check: may run again
    # The retry failed again (exit 1): its outcome is uncertain once more, attempt 2.
    [action] = project.actions()
    assert (str(action.status), action.attempt) == ("unknown", 2)


def test_a_call_that_matches_no_rule_runs_and_is_not_recorded(project: Project) -> None:
    s = project.session(
        "s1",
        [
            {"tool": project.tool, "input": {"command": "echo hello"}},
            {"tool": project.tool, "input": {"command": "echo hello"}},
        ],
    )
    assert [s.pre(i)["blocked"] for i in (0, 1)] == [False, False]
    assert not project.db.exists()  # not even the store was created


def test_the_briefing_says_when_an_unknown_effect_was_recorded_under_another_model(
    tmp_path: Path,
) -> None:
    """Version pinning (issue 24): Codex's payloads name the model; an open effect pinned
    under another one than the new session's is said so at session start."""
    project = make_project(tmp_path, "codex", probe=False)
    project.session("s1", [project.send("INV-5")], die_after_effect=0, env={"SIM_MODEL": "gpt-a"})
    (action,) = project.actions()
    assert action.versions == {"model": "gpt-a"}
    other = project.session("s2", [], env={"SIM_MODEL": "gpt-b"})
    same = project.session("s3", [], env={"SIM_MODEL": "gpt-a"})  # control: same model
    assert other.context is not None and same.context is not None
    assert 'recorded under model "gpt-a"; this session runs under "gpt-b"' in other.context
    assert "recorded under model" not in same.context


def test_a_new_session_checks_the_environment_and_holds_effects_on_a_changed_file(
    tmp_path: Path,
) -> None:
    """Periodic revalidation (issue 24): a session start is a switch; the declared file,
    changed since, is recorded and the next registered effect is held until declared
    again. Negative control: the same change without a new session is not held (the
    hook processes are too short-lived to count 25 steps)."""
    project = make_project(tmp_path, "claude-code", probe=False)
    data = project.dir / "invoices.csv"
    data.write_text("INV-1\n", encoding="utf-8")
    assert project.session("s1", [project.send("INV-1")]).code == 0
    declared = project.continuum("declare", project.run, "--file", str(data))
    assert declared.returncode == 0, declared.stderr
    data.write_text("INV-1\nINV-2\n", encoding="utf-8")  # the batch file changed
    same = project.session("s1", [project.send("INV-2")], session_start=False)
    assert same.pre(0).get("blocked") is not True  # control: no switch, not checked yet
    held = project.session("s2", [project.send("INV-3")])  # a new session: checked
    assert held.pre(0)["blocked"] is True, held.steps
    assert "environment" in held.pre(0)["reason"], held.pre(0)
    project.continuum("declare", project.run, "--file", str(data))  # accepted
    after = project.session("s3", [project.send("INV-3")], session_start=False)
    assert after.pre(0).get("blocked") is not True
    assert project.outbox() == ["INV-1", "INV-2", "INV-3"]


def test_a_new_session_checkpoints_a_run_that_grew_so_each_hook_reads_little(
    tmp_path: Path,
) -> None:
    """Each pre-tool hook reads the run's state once (the revalidation hold): a session
    start bounds that read by checkpointing a run grown past CHECKPOINT_AFTER_EVENTS."""
    from continuum.eventlog.events import EventType
    from continuum.hooks.effect_path import CHECKPOINT_AFTER_EVENTS

    project = make_project(tmp_path, "claude-code", probe=False)
    assert project.session("s1", [project.send("INV-1")]).code == 0
    rt = project.runtime()
    try:
        for i in range(CHECKPOINT_AFTER_EVENTS + 5):
            rt.append(project.run, EventType.WORK_COMPLETED, {"item_id": f"w{i}"})
        assert rt.store.list_checkpoints(project.run) == []
    finally:
        rt.close()
    project.session("s2", [])
    rt = project.runtime()
    try:
        [latest] = rt.store.list_checkpoints(project.run)[:1]
        head = rt.store.get_run(project.run).head_sequence
        assert head - latest.event_sequence <= 2  # checkpointed at the session start
    finally:
        rt.close()


def test_a_long_session_checkpoints_from_post_tool_so_each_hook_reads_little(
    tmp_path: Path,
) -> None:
    """A session that goes on and on never starts again: the post-tool hook that finds the
    run grown past CHECKPOINT_AFTER_EVENTS since its last checkpoint seals one, so each
    pre-tool's read stays short. Control: the call after it does not checkpoint again."""
    from continuum.eventlog.events import EventType
    from continuum.hooks.effect_path import CHECKPOINT_AFTER_EVENTS
    from continuum.hooks.gate import GREW_AFTER_CALL

    project = make_project(tmp_path, "claude-code", probe=False)
    assert project.session("s1", [project.send("INV-1")]).code == 0
    rt = project.runtime()
    try:
        for i in range(CHECKPOINT_AFTER_EVENTS):
            rt.append(project.run, EventType.WORK_COMPLETED, {"item_id": f"w{i}"})
        assert rt.store.list_checkpoints(project.run) == []
    finally:
        rt.close()
    calls = [project.send("INV-2"), project.send("INV-3")]
    s = project.session("s1", calls, session_start=False)
    assert s.code == 0, s.stderr
    assert project.outbox() == ["INV-1", "INV-2", "INV-3"]
    rt = project.runtime()
    try:
        [cp] = rt.store.list_checkpoints(project.run)  # one, after INV-2: not after INV-3
        events = rt.store.read_events(project.run)
        sealed = next(e for e in events if e.sequence == cp.event_sequence)
        assert sealed.payload["reason"] == GREW_AFTER_CALL
        completed = [e.sequence for e in events if e.type == EventType.ACTION_COMPLETED]
        assert completed[1] < cp.event_sequence < completed[2]  # INV-2 settled, INV-3 not yet
    finally:
        rt.close()


def test_a_handoff_note_is_the_first_thing_the_next_session_is_told(tmp_path: Path) -> None:
    """A reset with a handoff (issue 25): the note a session leaves (the CLI here, as a
    person's script would) opens the next session's briefing, labelled with who wrote it;
    agent text in it stays inert. Control: without a note the briefing has none."""
    project = make_project(tmp_path, "claude-code", probe=False)
    assert project.session("s1", [project.send("INV-1")]).code == 0
    before = project.session("s2", [])
    assert before.context is not None and "Handoff note" not in before.context
    note = "INV-2 bounced\x1b[2K: fix the address first"
    left = project.continuum("handoff", project.run, "--note", note)
    assert left.returncode == 0, left.stderr
    after = project.session("s3", [])
    assert after.context is not None
    lines = after.context.splitlines()
    assert lines[1].startswith("Handoff note from an earlier session (recorded by local code")
    assert '"INV-2 bounced\\x1b[2K: fix the address first"' in lines[1]

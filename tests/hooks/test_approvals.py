"""Approvals through the host hook gate, driven as each host does (``host_sim.py``).

A call an approval rule names (``effect = "send_invoice"``: the host effect rule's action
type) is blocked with the approval id and the ``continuum decide`` command; once a person
allows it, exactly that call runs, once; a denied one stays blocked with the reason.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.hooks.conftest import THROUGH_GATE, Project, make_project

RULES = '[[approval]]\neffect = "send_invoice"\nmatch = { input.command = "BIG-" }\n'


def test_a_gated_call_is_blocked_until_a_person_allows_it_then_runs_once(project: Project) -> None:
    (project.dir / ".continuum" / "approvals.toml").write_text(RULES, encoding="utf-8")
    first = project.session("s1", [project.send("BIG-1"), project.send("INV-2")])
    assert first.code == 0, first.stderr
    blocked = first.pre(0)
    assert blocked["blocked"] is True
    rt = project.runtime()
    try:
        [pending] = rt.approvals(project.run)
    finally:
        rt.close()
    assert f"decide {pending.id} --allow" in blocked["reason"]
    assert first.pre(1)["blocked"] is False  # not matched by the rule: runs as before
    assert project.outbox() == ["INV-2"]

    again = project.session("s2", [project.send("BIG-1")])  # a new session, same call
    assert again.pre(0)["blocked"] is True and pending.id in again.pre(0)["reason"]

    r = project.continuum("decide", pending.id, "--allow", "--reason", "approved", "--yes")
    assert r.returncode == 0, r.stderr
    allowed = project.session("s3", [project.send("BIG-1"), project.send("BIG-1")])
    assert allowed.pre(0)["blocked"] is False
    assert allowed.pre(1)["blocked"] is True and "already happened" in allowed.pre(1)["reason"]
    assert project.outbox() == ["INV-2", "BIG-1"]  # once


def test_a_denied_call_stays_blocked_with_the_persons_reason(tmp_path: Path) -> None:
    project = make_project(tmp_path, "claude-code", probe=False)  # one host is enough here
    (project.dir / ".continuum" / "approvals.toml").write_text(RULES, encoding="utf-8")
    project.session("s1", [project.send("BIG-9")])
    rt = project.runtime()
    try:
        [pending] = rt.approvals(project.run)
    finally:
        rt.close()
    r = project.continuum("decide", pending.id, "--deny", "--reason", "not today", "--yes")
    assert r.returncode == 0, r.stderr
    after = project.session("s2", [project.send("BIG-9")])
    assert after.pre(0)["blocked"] is True
    assert "denied" in after.pre(0)["reason"] and "not today" in after.pre(0)["reason"]
    assert project.outbox() == []


def test_a_call_the_host_ran_after_its_gate_died_is_recorded_not_left_to_be_approved_again(
    tmp_path: Path,
) -> None:
    # Claude Code lets a tool run when its pre-tool hook dies (fail open): the call ran
    # without a decision. It must be recorded as done, so nobody can approve a repeat.
    project = make_project(tmp_path, "claude-code", probe=False)
    (project.dir / ".continuum" / "approvals.toml").write_text(RULES, encoding="utf-8")
    crashed = project.session("s1", [project.send("BIG-2")], fault_pre="before_append_commit")
    if THROUGH_GATE:  # the gate's worker died: the hook process refused the call instead
        assert crashed.pre(0)["blocked"] is True and project.outbox() == []
        return
    assert crashed.pre(0)["blocked"] is False and project.outbox() == ["BIG-2"]
    post = crashed.post(0)
    assert post is not None and "without the person's decision" in json.dumps(post)
    again = project.session("s2", [project.send("BIG-2")])
    assert again.pre(0)["blocked"] is True and "already happened" in again.pre(0)["reason"]
    rt = project.runtime()
    try:
        assert rt.approvals(project.run) == []  # nothing left that a person could approve
    finally:
        rt.close()
    assert project.outbox() == ["BIG-2"]

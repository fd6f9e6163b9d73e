"""Parent and child runs (issue 25, item 1), on both backends: a child run's unsettled
effect holds its parent's verdict (any depth), a parent is not finished before its
children, and only runs both sides agree on count as a family.

The kill is real: a worker process starts the child under the parent, intercepts an
effect, performs it and SIGKILLs itself before recording the outcome. Negative control:
the same worker with a run started on its own (no parent) leaves the parent's verdict
``resume``: the family link is what carries the child's doubt up.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from continuum.errors import NotFoundError, UsageError
from continuum.eventlog.events import EventType
from continuum.runtime.facade import Continuum
from continuum.state.projection import project
from continuum.store import Run, Storage
from continuum.types import Mode, Origin
from tests.contract.conftest import StoreFactory

PARENT = "orchestrator"
WORKER = r"""
import os, signal, sys
from continuum.runtime.facade import Continuum
url, child, parent = sys.argv[1], sys.argv[2], sys.argv[3] or None
cx = Continuum.open(url, origin="external_agent")
cx.start_run(child, "send the invoices of batch B", parent=parent)
r = cx.intercept(child, "send_invoice", {"invoice": "B-1"}, key="invoice:B-1")
assert r.proceed, r
print("sent", flush=True)  # the effect happened
os.kill(os.getpid(), signal.SIGKILL)  # killed before complete
"""


def facade(store: Storage, origin: Origin = Origin.DETERMINISTIC) -> Continuum:
    return Continuum(store, origin=origin)


@pytest.fixture
def parent(store: Storage) -> Continuum:
    cx = facade(store)
    cx.start_run(PARENT, "send every batch")
    return cx


def kill_a_child(store_factory: StoreFactory, child: str, parent: str | None) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WORKER, store_factory.url, child, parent or ""],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL and "sent" in done.stdout, done.stderr[-2000:]


def test_a_child_killed_mid_effect_blocks_its_parent_until_a_person_settles_it(
    store_factory: StoreFactory, store: Storage, parent: Continuum
) -> None:
    kill_a_child(store_factory, "batch-b", PARENT)
    resumed = parent.resume(PARENT)
    assert resumed.mode == Mode.REQUEST_HUMAN
    child_action = store.list_actions("batch-b")[0].action_id
    assert f"reconcile_child_action:batch-b:{child_action}" in resumed.required_actions
    assert 'child run "batch-b": action "send_invoice:invoice:B-1"' in resumed.rationale
    assert resumed.children == [
        {
            "run_id": "batch-b",
            "path": "batch-b",
            "status": "active",
            "unresolved": [
                {
                    "action_id": child_action,
                    "action_key": "send_invoice:invoice:B-1",
                    "status": "started",
                    "next": f"reconcile_child_action:batch-b:{child_action}",
                }
            ],
            "pending_approvals": [],
            "waiting_branches": [],
        }
    ]
    person = facade(store, Origin.HUMAN)
    person.reconcile("batch-b", child_action, occurred=True, external_id="msg-B-1")
    after = parent.resume(PARENT)
    assert after.mode == Mode.RESUME and after.children[0]["unresolved"] == []


def test_control_the_same_kill_in_a_run_of_its_own_leaves_the_parent_resumable(
    store_factory: StoreFactory, store: Storage, parent: Continuum
) -> None:
    kill_a_child(store_factory, "loose", None)
    assert facade(store).resume("loose").mode == Mode.REQUEST_HUMAN  # the run itself knows
    assert parent.resume(PARENT).mode == Mode.RESUME  # but nothing ties it to the parent


def test_a_grandchilds_unsettled_effect_blocks_the_root_and_a_live_one_is_waited_for(
    store: Storage, parent: Continuum
) -> None:
    agent = facade(store, Origin.EXTERNAL_AGENT)
    agent.start_run("mid", "plan", parent=PARENT)
    agent.start_run("leaf", "send", parent="mid")
    live = agent.intercept("leaf", "send", {"n": 1}, key="n1")  # this process: alive
    resumed = parent.resume(PARENT)
    assert resumed.mode == Mode.WAIT and "wait_for_child:leaf" in resumed.required_actions
    assert [c["path"] for c in resumed.children] == ["mid", "mid/leaf"]
    agent.fail("leaf", live.action_key, error="connection reset")  # unknown: may have happened
    blocked = parent.resume(PARENT)
    assert blocked.mode == Mode.REQUEST_HUMAN and 'child run "mid/leaf"' in blocked.rationale


def test_a_parent_is_not_finished_before_its_children(store: Storage, parent: Continuum) -> None:
    parent.start_run("child", "one part", parent=PARENT)
    parent.start_run("grandchild", "a smaller part", parent="child")
    before = store.get_run(PARENT).head_sequence
    with pytest.raises(UsageError) as e:
        parent.finish_run(PARENT)
    assert e.value.code == "usage.open_children" and "'child', 'child/grandchild'" in str(e.value)
    assert store.get_run(PARENT).head_sequence == before
    parent.finish_run("grandchild")
    with pytest.raises(UsageError):
        parent.finish_run(PARENT)  # the child is still active
    parent.finish_run("child", aborted=True, reason="not needed")
    parent.finish_run(PARENT)
    assert parent.state(PARENT).status == "completed"


def test_only_runs_both_sides_agree_on_are_a_family(store: Storage, parent: Continuum) -> None:
    # the parent lists a child that never started (a crash between the two writes)
    parent.append(PARENT, EventType.CHILD_STARTED, {"child_run_id": "never-started"})
    # a run claims the parent, which does not list it
    stranger = facade(store, Origin.EXTERNAL_AGENT)
    stranger.store.create_run(Run(run_id="claims"))
    stranger.append("claims", EventType.RUN_STARTED, {"parent": PARENT})
    stranger.intercept("claims", "send", {"n": 1}, key="n1")
    # the parent lists a run whose own start names another parent
    parent.start_run("elsewhere", "g")
    other = facade(store)
    other.start_run("other-parent", "g")
    other.start_run("adopted", "g", parent="other-parent")
    parent.append(PARENT, EventType.CHILD_STARTED, {"child_run_id": "adopted"})
    other.intercept("adopted", "send", {"n": 2}, key="n2")
    resumed = parent.resume(PARENT)
    assert resumed.children == [] and resumed.mode == Mode.RESUME
    assert parent.parents()["claims"] == PARENT  # listed as it says, for `runs --tree`


@pytest.mark.parametrize(
    ("child", "parent_id", "code"),
    [
        ("c1", "no-such-run", "not_found.run"),
        ("c1", "finished", "usage.run_finished"),
        ("same", "same", "usage.bad_parent"),
        ("existing", PARENT, "usage.run_exists"),
        ("bad id", PARENT, "usage.bad_run_id"),
    ],
)
def test_bad_parents_are_refused_and_nothing_is_written(
    store: Storage, parent: Continuum, child: str, parent_id: str, code: str
) -> None:
    parent.start_run("finished", "g")
    parent.finish_run("finished")
    parent.start_run("existing", "g")
    parent.start_run("same", "g")
    heads = {r.run_id: r.head_sequence for r in store.list_runs()}
    with pytest.raises((UsageError, NotFoundError)) as e:
        parent.start_run(child, "g", parent=parent_id)
    assert e.value.code == code
    assert {r.run_id: r.head_sequence for r in store.list_runs()} == heads


def test_the_family_survives_a_checkpoint_and_a_new_handle(
    store_factory: StoreFactory, store: Storage, parent: Continuum
) -> None:
    parent.start_run("c", "g", parent=PARENT)
    parent.checkpoint(PARENT, reason="mid")
    parent.start_run("d", "g", parent=PARENT)
    other = facade(store_factory.open())
    assert other.state(PARENT) == project(PARENT, store.read_events(PARENT))
    assert other.state(PARENT).children == ["c", "d"] and other.state("c").parent == PARENT
    assert other.verify(PARENT).ok


def test_record_progress_starts_a_child_on_first_use_only(
    store: Storage, parent: Continuum
) -> None:
    agent = facade(store, Origin.EXTERNAL_AGENT)
    agent.record_progress("sub", goal="a subagent's part", total=2, parent=PARENT)
    agent.record_progress("sub", completed=1, parent="ignored-now")
    assert agent.state("sub").parent == PARENT and parent.state(PARENT).children == ["sub"]


def test_a_handoff_note_is_shown_first_with_who_wrote_it_and_the_latest_wins(
    store: Storage, parent: Continuum
) -> None:
    agent = facade(store, Origin.EXTERNAL_AGENT)
    assert parent.resume(PARENT).handoff is None
    agent.handoff(PARENT, "INV-2 bounced: fix the address first")
    first = parent.resume(PARENT).handoff
    assert first is not None and first["origin"] == "external_agent"
    assert first["note"] == "INV-2 bounced: fix the address first"
    parent.handoff(PARENT, "address fixed; resend INV-2")
    latest = facade(store).resume(PARENT).handoff
    assert latest is not None and (latest["note"], latest["origin"]) == (
        "address fixed; resend INV-2",
        "deterministic",
    )
    before = store.get_run(PARENT).head_sequence
    for bad in ("", "   ", "x" * 8001):
        with pytest.raises(UsageError) as e:
            agent.handoff(PARENT, bad)
        assert e.value.code == "usage.bad_note"
    assert store.get_run(PARENT).head_sequence == before


def test_a_childs_waiting_approval_or_branch_holds_its_parent_until_a_person_decides(
    store_factory: StoreFactory, store: Storage, parent: Continuum, tmp_path: Path
) -> None:
    rules = tmp_path / "work" / ".continuum" / "approvals.toml"
    rules.parent.mkdir(parents=True)
    rules.write_text(
        '[[approval]]\naction_type = "wire_money"\nwhen = { amount = ">= 10000" }\n',
        encoding="utf-8",
    )
    agent = Continuum(
        store_factory.open(), origin=Origin.EXTERNAL_AGENT, cwd=str(rules.parent.parent)
    )
    agent.start_run("payer", "pay suppliers", parent=PARENT)
    asked = agent.intercept("payer", "wire_money", {"amount": 50000}, key="acme-march")
    assert (asked.proceed, str(asked.status)) == (False, "awaiting_approval")
    (approval,) = agent.approvals("payer")
    held = parent.resume(PARENT)
    assert held.mode == Mode.REQUEST_HUMAN
    assert f"await_child_approval:payer:{approval.id}" in held.required_actions
    assert held.children[0]["pending_approvals"][0]["approval_id"] == approval.id
    # a person decides: the parent is free again
    Continuum(store, origin=Origin.HUMAN).decide(approval.id, allow=True, reason="checked")
    assert parent.resume(PARENT).mode == Mode.RESUME
    # a plan branch in the child waiting for a person holds the parent too
    agent.observe("payer", "button", "Pay 120 EUR", signal="dom", kind="ui")
    waits = agent.resolve_branch("payer", "pay", choice="pay", observations=["button"], risk="high")
    assert waits.mode == Mode.REQUEST_HUMAN
    held = parent.resume(PARENT)
    assert held.mode == Mode.REQUEST_HUMAN
    assert "resolve_child_branch:payer:pay" in held.required_actions
    assert 'child run "payer": branch "pay" waits for a person' in held.rationale
    # control: a loose run's waiting branch does not reach the parent
    agent.start_run("loose", "on its own")
    agent.observe("loose", "button", "x", signal="dom", kind="ui")
    agent.resolve_branch("loose", "go", choice="go", observations=["button"], risk="high")
    assert "loose" not in " ".join(parent.resume(PARENT).required_actions)

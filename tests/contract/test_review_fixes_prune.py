"""Review fix: `continuum prune` never exports-then-deletes a run that still needs a person,
nor one whose early history is archived: such runs are skipped with a clear reason and
kept exactly as they were. Both backends; the CLI as a real subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from continuum.eventlog.events import EventType
from continuum.ledger.approvals import ApprovalRules, parse_rules
from continuum.ops.prune import select
from continuum.runtime.facade import Continuum
from continuum.store import Storage
from continuum.types import Origin
from tests.contract.conftest import StoreFactory

LATER = datetime.now(UTC) + timedelta(days=1)
RULES = ApprovalRules(
    rules=parse_rules('[[approval]]\naction_type = "wire_money"\n', "approvals.toml")
)


def snapshot(store: Storage, run_id: str) -> dict[str, Any]:
    """A run as stored: record, live events, actions, approvals, checkpoints."""
    base = store.archive_base(run_id)
    return {
        "run": store.get_run(run_id).model_dump(),
        "events": [
            e.model_dump()
            for e in store.iter_events(run_id, after=base.through if base is not None else 0)
        ],
        "actions": [a.record for a in store.list_actions(run_id)],
        "approvals": [a.record for a in store.list_approvals(run_id=run_id)],
        "checkpoints": [c.model_dump() for c in store.list_checkpoints(run_id)],
    }


def runs(factory: StoreFactory, tmp_path: Path) -> Continuum:
    """Five finished runs: one clean, one with an unknown action, one with a started one,
    one with an approval waiting, one whose early history is archived."""
    rt = Continuum(factory.open(), approvals=RULES)
    rt.start_run("clean", "done and settled")
    ok = rt.intercept("clean", "send_mail", {"to": "a"}, key="m1")
    rt.complete("clean", ok.action_key, external_id="x")
    rt.finish_run("clean")
    rt.start_run("unknown", "an effect in doubt")
    doubt = rt.intercept("unknown", "send_mail", {"to": "b"}, key="m2")
    rt.fail("unknown", doubt.action_key, error="timeout")  # may have happened
    rt.finish_run("unknown", aborted=True)
    rt.start_run("started", "killed mid-effect")
    rt.intercept("started", "send_mail", {"to": "c"}, key="m3")
    rt.finish_run("started", aborted=True)
    agent = Continuum(rt.store, origin=Origin.EXTERNAL_AGENT, approvals=RULES)
    rt.start_run("waiting", "a payment waits for a person")
    assert agent.intercept("waiting", "wire_money", {"n": 1}).status == "awaiting_approval"
    rt.finish_run("waiting", aborted=True)
    rt.start_run("archived", "old history moved out")
    for i in range(4):
        rt.append("archived", EventType.WORK_COMPLETED, {"item_id": f"w{i}"})
    rt.archive("archived", before=4, to=tmp_path / "old.jsonl")
    rt.finish_run("archived")
    return rt


def test_select_skips_runs_that_still_need_a_person_or_are_archived(
    store_factory: StoreFactory, tmp_path: Path
) -> None:
    rt = runs(store_factory, tmp_path)
    found, skipped = select(rt.store, LATER)
    assert [r.run_id for r in found] == ["clean"]  # negative control: a settled run goes
    assert {(s.run_id, s.code) for s in skipped} == {
        ("unknown", "prune.unsettled_actions"),
        ("started", "prune.unsettled_actions"),
        ("waiting", "prune.pending_approvals"),
        ("archived", "prune.archived_run"),
    }


def test_prune_deletes_only_the_settled_run_and_says_why_it_kept_the_others(
    store_factory: StoreFactory, tmp_path: Path
) -> None:
    rt = runs(store_factory, tmp_path)
    kept = ("unknown", "started", "waiting", "archived")
    before = {r: snapshot(rt.store, r) for r in kept}
    out = tmp_path / "pruned"
    out.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "continuum",
            "--db",
            store_factory.url,
            "--json",
            "prune",
            "--finished",
            "--before",
            LATER.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "--to",
            str(out),
            "--yes",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["pruned"] == ["clean"]
    assert sorted(s["run_id"] for s in report["skipped"]) == sorted(kept)
    assert all(s["message"] for s in report["skipped"])
    assert [p.name for p in out.iterdir()] == ["clean.jsonl"]  # nothing else exported
    fresh = store_factory.open()
    assert {r.run_id for r in fresh.list_runs()} == set(kept)
    assert {r: snapshot(fresh, r) for r in kept} == before  # kept exactly as they were

"""Version pinning (issue 24, item 3), on both backends: what an effect ran under (a
prompt, a tool's schema, a model) is recorded with its action; an interrupted ``safe`` or
``idempotent`` action met again under another tool schema is not re-run without a person;
``resume(versions=...)`` reports the drift of open actions.

"Interrupted" is real: the action's owner is a process that has exited.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from continuum.errors import UsageError
from continuum.eventlog.events import EventType
from continuum.ledger.core import ActionLedger
from continuum.recovery.checkpoints import lean, lean_state
from continuum.runtime.facade import Continuum
from continuum.state.projection import project
from continuum.store import Run, Storage
from continuum.types import ActionStatus, Origin

RUN = "run_versions"
V1 = {"tool_schema_hash": "sha256:aaaa", "model": "model-1", "prompt_hash": "sha256:p1"}
V2_SCHEMA = {**V1, "tool_schema_hash": "sha256:bbbb"}
V2_MODEL = {**V1, "model": "model-2"}


@pytest.fixture
def run(store: Storage) -> str:
    store.create_run(Run(run_id=RUN, goal="g"))
    return RUN


def dead_owner() -> dict[str, Any]:
    """The identity of a process on this host that has exited."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return {"host": socket.gethostname(), "pid": proc.pid, "start": None}


def interrupted(store: Storage, replay: str, versions: dict[str, str] | None = V1) -> str:
    """An action intercepted by a process that then died: started, its owner gone."""
    gone = ActionLedger(store, origin=Origin.EXTERNAL_AGENT, owner=dead_owner())
    first = gone.intercept(RUN, "fetch", {"u": 1}, key="f-1", replay=replay, versions=versions)
    assert first.proceed
    return first.action_key


def agent(store: Storage) -> ActionLedger:
    return ActionLedger(store, origin=Origin.EXTERNAL_AGENT)


def head(store: Storage) -> tuple[int, str | None]:
    info = store.get_run(RUN)
    return info.head_sequence, info.head_hash


def test_the_versions_are_recorded_with_the_action_and_its_event(store: Storage, run: str) -> None:
    a = agent(store)
    first = a.intercept(RUN, "send", {"i": 1}, key="m-1", versions=V1)
    [rec] = a.actions(RUN)
    assert rec.versions == V1
    [event] = [e for e in store.read_events(RUN) if e.type == EventType.ACTION_INTERCEPTED]
    assert event.payload["versions"] == V1
    a.complete(RUN, first.action_key)
    plain = a.intercept(RUN, "send", {"i": 2}, key="m-2")  # none given: none recorded
    assert [r.versions for r in a.actions(RUN) if r.action_key == plain.action_key] == [None]
    intercepted = [e for e in store.read_events(RUN) if e.type == EventType.ACTION_INTERCEPTED]
    assert "versions" not in intercepted[1].payload  # earlier logs' shape, unchanged


@pytest.mark.parametrize("replay", ["safe", "idempotent"])
def test_an_interrupted_rerunnable_action_under_a_changed_tool_schema_waits_for_a_person(
    store: Storage, run: str, replay: str
) -> None:
    key = interrupted(store, replay)
    a = agent(store)
    before = head(store)
    drifted = a.intercept(RUN, "fetch", {"u": 1}, key="f-1", replay=replay, versions=V2_SCHEMA)
    assert (drifted.proceed, drifted.status) == (False, "version_drift")
    assert "sha256:aaaa" in drifted.guidance and "sha256:bbbb" in drifted.guidance
    assert "continuum reconcile" in drifted.guidance
    assert head(store) == before  # nothing written
    again = a.intercept(RUN, "fetch", {"u": 1}, key="f-1", replay=replay, versions=V2_SCHEMA)
    assert again.status == "version_drift"  # and it stays so
    person = ActionLedger(store, origin=Origin.HUMAN)
    person.reconcile(RUN, key, occurred=False, note="checked: it never ran")
    rerun = a.intercept(RUN, "fetch", {"u": 1}, key="f-1", replay=replay, versions=V2_SCHEMA)
    assert (rerun.proceed, rerun.attempt) == (True, 2)
    [rec] = a.actions(RUN)
    assert rec.versions == V2_SCHEMA  # this attempt's versions


@pytest.mark.parametrize("now", [V1, V2_MODEL], ids=["same", "model-changed"])
def test_the_same_schema_or_another_model_reruns_as_the_contract_says(
    store: Storage, run: str, now: dict[str, str]
) -> None:
    interrupted(store, "safe")
    rerun = agent(store).intercept(RUN, "fetch", {"u": 1}, key="f-1", replay="safe", versions=now)
    assert (rerun.proceed, rerun.status, rerun.attempt) == (True, "started", 2)


@pytest.mark.parametrize("now", [None, {"model": "model-9"}], ids=["none", "no-schema"])
def test_a_caller_that_cannot_say_the_schema_is_the_same_does_not_rerun_it(
    store: Storage, run: str, now: dict[str, str] | None
) -> None:
    """Fail closed: a pinned action met by a caller that gives no schema (a CLI, a hook)."""
    interrupted(store, "safe")
    met = agent(store).intercept(RUN, "fetch", {"u": 1}, key="f-1", replay="safe", versions=now)
    assert (met.proceed, met.status) == (False, "version_drift")
    assert "not given" in met.guidance


def test_a_retry_keeps_the_pins_it_does_not_give_again(store: Storage, run: str) -> None:
    key = interrupted(store, "safe")
    person = ActionLedger(store, origin=Origin.HUMAN)
    person.reconcile(RUN, key, occurred=False)
    rerun = agent(store).intercept(
        RUN, "fetch", {"u": 1}, key="f-1", replay="safe", versions={"model": "model-2"}
    )
    assert rerun.proceed
    [rec] = agent(store).actions(RUN)
    assert rec.versions == {**V1, "model": "model-2"}  # the schema pin is not erased


def test_control_a_never_contract_is_unknown_whatever_the_versions(
    store: Storage, run: str
) -> None:
    interrupted(store, "never")
    met = agent(store).intercept(RUN, "fetch", {"u": 1}, key="f-1", versions=V2_SCHEMA)
    assert (met.proceed, met.status) == (False, "unknown")


@pytest.mark.parametrize(
    ("versions", "named"),
    [
        ({"tool_schema": "x"}, "'tool_schema'"),
        ({"model": 3}, "'model'"),
        ({"model": ""}, "'model'"),
        ({"prompt_hash": "p" * 201}, "'prompt_hash'"),
        ("model-1", "object"),
    ],
)
def test_malformed_versions_are_refused_naming_the_field_and_nothing_is_written(
    store: Storage, run: str, versions: Any, named: str
) -> None:
    before = head(store)
    with pytest.raises(UsageError) as caught:
        agent(store).intercept(RUN, "send", {"i": 1}, key="m-1", versions=versions)
    assert caught.value.code == "usage.bad_versions" and named in caught.value.message
    assert head(store) == before


def test_a_malformed_versions_payload_is_refused_at_append(store: Storage, run: str) -> None:
    before = head(store)
    with pytest.raises(UsageError) as caught, store.write(RUN) as tx:
        tx.append(
            EventType.ACTION_INTERCEPTED,
            {
                "action_id": "act_x",
                "action_key": "send:x",
                "action_type": "send",
                "dedup_key": "d",
                "operation_key": "o",
                "versions": {"model": 7},
            },
            source=Origin.EXTERNAL_AGENT,
        )
    assert "versions" in caught.value.message and "'model'" in caught.value.message
    assert head(store) == before


def test_resume_reports_the_drift_of_open_actions_only(store: Storage, run: str) -> None:
    interrupted(store, "never")
    a = agent(store)
    done = a.intercept(RUN, "send", {"i": 1}, key="m-1", versions=V1)
    a.complete(RUN, done.action_key)
    cx = Continuum(store, origin=Origin.EXTERNAL_AGENT)
    report = cx.resume(
        RUN, versions={"model": "model-2", "tool_schema_hashes": {"fetch": "sha256:bbbb"}}
    )
    drift = {
        (d["action_key"], d["field"], d["recorded"], d["current"]) for d in report.version_drift
    }
    assert drift == {
        ("fetch:f-1", "model", "model-1", "model-2"),
        ("fetch:f-1", "tool_schema_hash", "sha256:aaaa", "sha256:bbbb"),
    }  # the completed send is not listed
    assert cx.resume(RUN).version_drift == []  # nothing current given: nothing compared
    with pytest.raises(UsageError) as caught:
        cx.resume(RUN, versions={"tool_schemas": {}})
    assert caught.value.code == "usage.bad_versions"


def test_a_checkpoint_then_the_fold_equals_the_full_fold_with_versions(
    store: Storage, run: str
) -> None:
    key = interrupted(store, "safe")
    cx = Continuum(store, origin=Origin.EXTERNAL_AGENT)
    cx.checkpoint(RUN)
    cx.intercept(RUN, "fetch", {"u": 1}, key="f-1", replay="safe", versions=V1)  # attempt 2
    cx.complete(RUN, key)
    cx.intercept(RUN, "send", {"i": 3}, key="m-3", versions=V2_MODEL)
    full = project(RUN, store.read_events(RUN))
    from_checkpoint, through, _ = lean_state(store, RUN)
    assert through is not None  # the checkpoint was used
    assert from_checkpoint == lean(full)  # checkpoint + fold == full fold
    assert {a.action_key: a.versions for a in full.actions.values()} == {
        "fetch:f-1": V1,
        "send:m-3": V2_MODEL,
    }
    assert full.actions[next(iter(full.actions))].status == ActionStatus.COMPLETED
    assert [a.versions for a in from_checkpoint.actions.values()] == [V2_MODEL]  # the open one
    assert cx.verify(RUN).ok


def test_an_export_and_its_import_keep_the_versions(
    store: Storage, run: str, tmp_path: Path
) -> None:
    """Into a fresh SQLite store from either backend."""
    import io

    from continuum.ops.transfer import export_runs, import_runs
    from continuum.store import open_store

    agent(store).intercept(RUN, "send", {"i": 1}, key="m-1", versions=V1)
    out = io.StringIO()
    export_runs(store, out, [RUN])
    target = open_store(str(tmp_path / "imported.db"))
    try:
        import_runs(target, io.StringIO(out.getvalue()))
        assert [a.versions for a in ActionLedger(target).actions(RUN)] == [V1]
    finally:
        target.close()


def test_a_rule_can_make_model_drift_block_the_replay_too(store: Storage, run: str) -> None:
    gone = ActionLedger(store, origin=Origin.EXTERNAL_AGENT, owner=dead_owner())
    gone.intercept(RUN, "deploy", {"v": 1}, key="d-1", replay="safe", versions=V1)
    a = agent(store)
    blocked = a.intercept(
        RUN,
        "deploy",
        {"v": 1},
        key="d-1",
        replay="safe",
        versions=V2_MODEL,
        block_drift=("tool_schema_hash", "model"),
    )
    assert (blocked.proceed, blocked.status) == (False, "version_drift")
    assert "model 'model-1', now 'model-2'" in blocked.guidance
    default = a.intercept(RUN, "deploy", {"v": 1}, key="d-1", replay="safe", versions=V2_MODEL)
    assert default.proceed  # control: by default only the tool schema blocks


def test_a_block_drift_field_that_is_not_a_version_is_refused(store: Storage, run: str) -> None:
    before = head(store)
    for bad in (("colour",), "model"):
        with pytest.raises(UsageError) as caught:
            agent(store).intercept(RUN, "send", {"i": 1}, key="m-1", block_drift=bad)
        assert caught.value.code == "usage.bad_versions"
    assert head(store) == before

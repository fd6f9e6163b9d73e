"""restore(checkpoint) + the action index == the full fold (issue 14).

A checkpoint holds the state without its settled actions; the state a resume works from
is rebuilt from the latest checkpoint, the events after it, and the action index for the
actions those events touched. For random runs (work, intercepts, completions, uncertain
and certain failures by trusted code and by an agent, reconciliations, approvals, crashes
of the performing process, checkpoints anywhere) it must equal the full fold of the log
with its settled actions left out, whether computed by a fresh object, by one that
advanced its remembered state event by event, or as of any earlier sequence.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from continuum.eventlog.canonical import canonical_json, digest, parse_json
from continuum.eventlog.events import EventType
from continuum.ledger.core import ActionLedger
from continuum.recovery.checkpoints import is_open, lean
from continuum.runtime.facade import Continuum
from continuum.state.projection import project
from continuum.store import CheckpointRow, SQLiteStorage
from continuum.types import Origin

RUN = "r"
KEYS = ["k0", "k1", "k2", "k3"]
VERSIONS = [
    None,
    {"tool_schema_hash": "sha256:v1", "model": "m1"},
    {"tool_schema_hash": "sha256:v2", "model": "m1"},
]
op = st.one_of(
    st.tuples(st.just("work"), st.integers(0, 3)),
    st.tuples(
        st.just("intercept"),
        st.sampled_from(KEYS),
        st.sampled_from(["never", "safe"]),
        st.booleans(),
        st.sampled_from(VERSIONS),  # version pinning (issue 24): none, v1, another schema
    ),
    st.tuples(st.just("complete"), st.sampled_from(KEYS)),
    st.tuples(st.just("fail"), st.sampled_from(KEYS), st.booleans(), st.booleans()),
    st.tuples(st.just("reconcile"), st.sampled_from(KEYS), st.booleans(), st.booleans()),
    st.tuples(st.just("crash")),
    st.tuples(st.just("checkpoint")),
    st.tuples(st.just("approval"), st.sampled_from(["approval_granted", "approval_revoked"])),
)


def full_lean(store: SQLiteStorage, upto: int | None = None) -> Any:
    events = [e for e in store.iter_raw(RUN) if upto is None or e.sequence <= upto]
    return lean(project(RUN, events))


def _agent(store: SQLiteStorage, pid: int, origin: Origin) -> ActionLedger:
    import socket

    return ActionLedger(
        store,
        origin=origin,
        cwd="/w",
        owner={"host": socket.gethostname(), "pid": pid, "start": None},
    )


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=st.lists(op, min_size=1, max_size=40))
def test_the_lean_state_equals_the_full_fold_without_settled_actions(ops: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStorage(Path(tmp) / "s.db")
        rt = Continuum(store)
        rt.start_run(RUN, "goal", total=4)
        rt.append(RUN, EventType.APPROVAL_REQUESTED, {"approval_id": "ap"})
        advancing = Continuum(store)  # remembers its state between the steps
        sleeper = subprocess.Popen(["sleep", "600"])
        try:
            pid = sleeper.pid
            for step in ops:
                _apply(rt, store, step, pid)
                if step[0] == "crash":
                    sleeper.kill()
                    sleeper.wait()
                    sleeper = subprocess.Popen(["sleep", "600"])
                    pid = sleeper.pid
                assert advancing.state(RUN) == full_lean(store)
            fresh = Continuum(store).state(RUN)
            assert fresh == full_lean(store)
            assert all(is_open(a) for a in fresh.actions.values())
            head = store.get_run(RUN).head_sequence
            for upto in sorted({1, head // 2 or 1, head}):
                assert rt.state_at(RUN, upto) == full_lean(store, upto)
            assert rt.verify(RUN).ok
        finally:
            sleeper.kill()
            sleeper.wait()
            store.close()


def _apply(rt: Continuum, store: SQLiteStorage, step: tuple[Any, ...], pid: int) -> None:
    from continuum.errors import ContinuumError

    kind = step[0]
    try:
        if kind == "work":
            rt.append(RUN, EventType.WORK_COMPLETED, {"item_id": f"w{step[1]}"})
        elif kind == "intercept":
            _, key, replay, under_approval, versions = step
            _agent(store, pid, Origin.DETERMINISTIC).intercept(
                RUN,
                "send",
                {"k": key},
                key=key,
                replay=replay,
                approval_id="ap" if under_approval else None,
                versions=versions,
            )
        elif kind == "complete":
            _agent(store, pid, Origin.DETERMINISTIC).complete(RUN, f"send:{step[1]}")
        elif kind == "fail":
            _, key, certain, agent = step
            origin = Origin.EXTERNAL_AGENT if agent else Origin.DETERMINISTIC
            _agent(store, pid, origin).fail(RUN, f"send:{key}", certain=certain)
        elif kind == "reconcile":
            _, key, occurred, agent = step
            origin = Origin.EXTERNAL_AGENT if agent else Origin.HUMAN
            _agent(store, pid, origin).reconcile(RUN, f"send:{key}", occurred=occurred)
        elif kind == "checkpoint":
            rt.checkpoint(RUN, reason="p")
        elif kind == "approval":
            rt.append(RUN, step[1], {"approval_id": "ap"})
    except ContinuumError:
        pass  # refused transitions (not found, invalid, live owner) change nothing


def test_an_old_format_checkpoint_holding_every_action_still_reads(tmp_path: Path) -> None:
    store = SQLiteStorage(tmp_path / "s.db")
    rt = Continuum(store)
    rt.start_run(RUN, "g")
    for i in range(5):
        r = rt.intercept(RUN, "send", {"i": i}, key=f"k{i}")
        rt.complete(RUN, r.action_key)
    # A format-1 checkpoint: the whole state, settled actions included, no format field.
    state = rt.full_state(RUN)
    assert len(state.actions) == 5
    state_json = canonical_json(state.model_dump(mode="json"))
    state_hash = digest(parse_json(state_json))
    with store.write(RUN) as tx:
        event = tx.append(
            EventType.CHECKPOINTED,
            {"through_sequence": state.sequence, "state_hash": state_hash},
            source=Origin.HUMAN,
        )
        tx.put_checkpoint(
            CheckpointRow(
                run_id=RUN,
                sequence=state.sequence,
                event_sequence=event.sequence,
                state_json=state_json,
                state_hash=state_hash,
                created_at=event.timestamp,
            )
        )
    rt.append(RUN, EventType.WORK_COMPLETED, {"item_id": "w"})
    fresh = Continuum(store)
    assert fresh.state(RUN) == full_lean(store) and fresh.state(RUN).actions == {}
    assert fresh.checkpoint_warnings(RUN) == [] and fresh.verify(RUN).ok


def test_a_checkpoint_of_an_unknown_newer_format_is_not_used(tmp_path: Path) -> None:
    store = SQLiteStorage(tmp_path / "s.db")
    rt = Continuum(store)
    rt.start_run(RUN, "g")
    state = rt.state(RUN)
    state_json = canonical_json(state.model_dump(mode="json"))
    state_hash = digest(parse_json(state_json))
    with store.write(RUN) as tx:
        event = tx.append(
            EventType.CHECKPOINTED,
            {"through_sequence": state.sequence, "state_hash": state_hash, "format": 99},
            source=Origin.HUMAN,
        )
        tx.put_checkpoint(
            CheckpointRow(
                run_id=RUN,
                sequence=state.sequence,
                event_sequence=event.sequence,
                state_json=state_json,
                state_hash=state_hash,
                created_at=event.timestamp,
            )
        )
    fresh = Continuum(store)
    assert "format 99" in fresh.checkpoint_warnings(RUN)[0]
    assert fresh.state(RUN) == full_lean(store)  # folded from the log instead


def test_a_checkpoint_grows_with_open_work_not_with_history(tmp_path: Path) -> None:
    store = SQLiteStorage(tmp_path / "s.db")
    rt = Continuum(store)
    rt.start_run(RUN, "g")
    sizes = []
    for batch in range(3):
        for i in range(200):
            r = rt.intercept(RUN, "send", {"i": i}, key=f"b{batch}-{i}")
            rt.complete(RUN, r.action_key, external_id="x" * 50)
        rt.checkpoint(RUN)
        sizes.append(len(store.list_checkpoints(RUN)[0].state_json))
    assert max(sizes) - min(sizes) < 16 and max(sizes) < 4096  # only sequence digits grow
    open_one = rt.intercept(RUN, "send", {}, key="still-open")
    rt.checkpoint(RUN)
    assert open_one.action_id in parse_json(store.list_checkpoints(RUN)[0].state_json)["actions"]

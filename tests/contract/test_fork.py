"""Forks (ops/fork.py) on every backend: a new run from a verified prefix of another.

What is completed in the prefix stays completed in the fork and is never run again; what
is open at the fork point (its intercepting process SIGKILLed, or still alive and working
in the original) is unknown in the fork while the original keeps its own status; the
original is byte-identical afterwards; bad input writes nothing; the fork verifies and its
state is the fold of its events. "Fork determinism" is a hypothesis property, with a
negative control: a fork that copies one event too many is caught by the same check.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from continuum import Continuum
from continuum.errors import ContinuumError, NotFoundError, UsageError
from continuum.eventlog.event_model import Event
from continuum.eventlog.events import EventType
from continuum.ops.fork import build_fork
from continuum.ops.transfer import import_checked
from continuum.recovery.checkpoints import lean
from continuum.state.projection import project
from continuum.store import Storage, open_store
from continuum.types import InterceptStatus, Origin
from tests.contract.conftest import StoreFactory

RUN, FORK = "orig", "fork"

# A process that intercepts one action, says so, then waits: "complete" completes it in
# the original run; a SIGKILL leaves it started with a dead owner.
WORKER = """
import sys
from continuum import Continuum
from continuum.store import open_store
url, run, key = sys.argv[1:4]
cx = Continuum(open_store(url))
r = cx.intercept(run, "send_mail", {"to": key}, key=key)
assert r.proceed, r
print("ready", flush=True)
if sys.stdin.readline().strip() == "complete":
    cx.complete(run, r.action_key, external_id="done-" + key)
    print("completed", flush=True)
"""


def _worker(url: str, key: str) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, "-c", WORKER, url, RUN, key],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert p.stdout is not None
    line = p.stdout.readline()  # blocks until the intercept is durable (no sleeps)
    if line.strip() != "ready":
        p.kill()
        raise AssertionError(p.communicate(timeout=30))
    return p


def _snapshot(store: Storage, run_id: str) -> tuple[Any, ...]:
    """Everything stored for ``run_id`` that a fork could touch, as plain data."""
    return (
        store.get_run(run_id).model_dump(mode="json"),
        [e.model_dump(mode="json") for e in store.read_events(run_id)],
        sorted(map(repr, store.action_index_rows(run_id))),
        sorted(map(repr, store.approval_index_rows(run_id))),
        [c.model_dump(mode="json") for c in store.list_checkpoints(run_id)],
    )


def _base_run(cx: Continuum) -> None:
    cx.start_run(RUN, "send three mails", total=3)
    done = cx.intercept(RUN, "send_mail", {"to": "a"}, key="a")
    assert done.proceed
    cx.complete(RUN, done.action_key, external_id="msg-a")
    cx.record_progress(RUN, completed=1)


def test_fork_keeps_completed_effects_done_and_open_ones_unknown(
    store_factory: StoreFactory,
) -> None:
    store = store_factory.open()
    cx = Continuum(store)
    _base_run(cx)
    killed = _worker(store_factory.url, "b")
    killed.send_signal(signal.SIGKILL)
    killed.communicate(timeout=30)
    live = _worker(store_factory.url, "c")
    try:
        at = store.get_run(RUN).head_sequence
        before = _snapshot(store, RUN)
        result = cx.fork(RUN, at=at, new_run_id=FORK)
        assert _snapshot(store, RUN) == before  # the original, byte for byte

        assert sorted(result.marked_unknown) == ["send_mail:b", "send_mail:c"]
        again = cx.intercept(FORK, "send_mail", {"to": "a"}, key="a")
        assert again.status == InterceptStatus.COMPLETED and not again.proceed
        assert again.external_id == "msg-a"
        for key in ("b", "c"):  # open at the fork point: unknown, never in progress
            r = cx.intercept(FORK, "send_mail", {"to": key}, key=key)
            assert r.status == InterceptStatus.UNKNOWN and not r.proceed, (key, r)
        # The original keeps its own view: the live worker is still at it.
        r = cx.intercept(RUN, "send_mail", {"to": "c"}, key="c")
        assert r.status == InterceptStatus.IN_PROGRESS and not r.proceed

        assert live.stdin is not None and live.stdout is not None
        live.stdin.write("complete\n")
        live.stdin.flush()
        out, err = live.communicate(timeout=30)
        assert live.returncode == 0 and out.strip() == "completed", err
        assert cx.intercept(RUN, "send_mail", {"to": "c"}, key="c").status == (
            InterceptStatus.COMPLETED
        )
        assert cx.intercept(FORK, "send_mail", {"to": "c"}, key="c").status == (
            InterceptStatus.UNKNOWN
        )
        assert cx.verify(FORK).ok and cx.verify(RUN).ok
    finally:
        if live.poll() is None:
            live.kill()
            live.communicate()


def test_fork_records_its_origin_and_verifies(store: Storage) -> None:
    cx = Continuum(store)
    _base_run(cx)
    cx.checkpoint(RUN)  # a checkpoint in the prefix: copied as an event, not as a row
    cx.record_progress(RUN, completed=2)
    at = store.get_run(RUN).head_sequence - 1
    original = store.read_events(RUN)
    result = cx.fork(RUN, at=at, new_run_id=FORK)
    events = store.read_events(FORK)
    assert [e.type for e in events[:at]] == [e.type for e in original[:at]]
    assert [e.source for e in events[:at]] == [e.source for e in original[:at]]
    assert {e.event_id for e in events}.isdisjoint(e.event_id for e in original)
    marker = events[at]
    assert marker.type == EventType.RUN_FORKED and marker.sequence == result.marker_sequence
    assert marker.payload == {
        "from_run": RUN,
        "through_sequence": at,
        "through_hash": original[at - 1].hash,
    }
    assert events[-1].type == EventType.CHECKPOINTED
    assert result.head == f"{events[-1].sequence}:{events[-1].hash}"
    state = cx.state(FORK)
    assert state.forked_from is not None
    assert (state.forked_from.run, state.forked_from.sequence) == (RUN, at)
    assert state.forked_from.hash == original[at - 1].hash
    assert state.progress.completed == 1  # the prefix's, not the original's later 2
    assert cx.state(RUN).forked_from is None
    assert "forked_from" not in cx.state(RUN).model_dump(mode="json")
    report = cx.verify(FORK)
    assert report.ok, report.violations
    # The fold of the fork is the fold of its events, however the state was arrived at.
    assert state == lean(project(FORK, events))
    assert cx.full_state(FORK) == project(FORK, events)
    [checkpoint] = store.list_checkpoints(FORK)  # the fork's own; none of the original's
    assert checkpoint.event_sequence == events[-1].sequence


@pytest.mark.parametrize(
    ("at", "new", "code"),
    [
        (0, FORK, "usage.bad_sequence"),
        (99, FORK, "usage.bad_sequence"),
        (1, RUN, "usage.run_exists"),
        (1, "other", "usage.run_exists"),
        (1, "has space", "usage.bad_run_id"),
    ],
)
def test_fork_refuses_bad_input_and_writes_nothing(
    store: Storage, at: int, new: str, code: str
) -> None:
    cx = Continuum(store)
    _base_run(cx)
    cx.start_run("other")
    before = [_snapshot(store, r.run_id) for r in store.list_runs()]
    with pytest.raises(UsageError) as caught:
        cx.fork(RUN, at=at, new_run_id=new)
    assert caught.value.code == code
    assert [_snapshot(store, r.run_id) for r in store.list_runs()] == before


def test_fork_of_a_missing_run_is_not_found(store: Storage) -> None:
    cx = Continuum(store)
    with pytest.raises(NotFoundError) as caught:
        cx.fork("nope", at=1, new_run_id=FORK)
    assert caught.value.code == "not_found.run"
    assert store.list_runs() == []


def test_fork_of_an_archived_run_is_refused(store: Storage, tmp_path: Path) -> None:
    cx = Continuum(store)
    _base_run(cx)
    cx.record_progress(RUN, completed=2)
    cx.archive(RUN, before=3, to=tmp_path / "old.archive")
    head = store.get_run(RUN).head_sequence
    with pytest.raises(UsageError) as caught:
        cx.fork(RUN, at=head, new_run_id=FORK)
    assert caught.value.code == "usage.fork_archived"
    assert [r.run_id for r in store.list_runs()] == [RUN]


# -- fork determinism (a property) -----------------------------------------------------


def _renamed(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {names.get(k, k): _renamed(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, names) for v in value]
    return names.get(value, value) if isinstance(value, str) else value


def prefix_mismatch(store: Storage, run_id: str, fork_id: str, at: int) -> list[str]:
    """What differs between ``run_id``'s state at ``at`` and ``fork_id``'s state at its
    fork marker, once the fork's own ids are named as the original's and the marker's
    ``forked_from`` is left out (empty: the fork is the prefix, nothing more or less)."""
    original = store.read_events(run_id)
    fork = store.read_events(fork_id)
    problems: list[str] = []
    if len(fork) <= at or fork[at].type != EventType.RUN_FORKED:
        return [f"no run_forked marker at sequence {at + 1}"]
    names: dict[str, str] = {fork_id: run_id}
    for ours, theirs in zip(fork[:at], original[:at], strict=False):
        names[ours.event_id] = theirs.event_id
        a, b = ours.payload.get("action_id"), theirs.payload.get("action_id")
        if isinstance(a, str) and isinstance(b, str):
            names[a] = b
    drop = ("run_id", "sequence", "head_hash", "forked_from")

    def plain(events: list[Event], run: str) -> dict[str, Any]:
        data = project(run, events).model_dump(mode="json")
        return {k: v for k, v in data.items() if k not in drop}

    want = plain(original[:at], run_id)
    got = _renamed(plain(fork[: at + 1], fork_id), names)
    for key in sorted(set(want) | set(got)):
        if want.get(key) != got.get(key):
            problems.append(f"{key}: {want.get(key)!r} != {got.get(key)!r}")
    return problems


# One step of a run built through the facade.
steps = st.lists(
    st.one_of(
        st.tuples(st.just("progress"), st.integers(0, 5)),
        st.tuples(st.just("done"), st.integers(0, 3)),
        st.tuples(st.just("open"), st.integers(0, 3)),
        st.tuples(st.just("checkpoint"), st.just(0)),
    ),
    min_size=1,
    max_size=8,
)


def _build(cx: Continuum, plan: list[tuple[str, int]]) -> None:
    cx.start_run(RUN, "a run", total=10)
    for n, (kind, value) in enumerate(plan):
        if kind == "progress":
            cx.record_progress(RUN, completed=value)
        elif kind == "checkpoint":
            cx.checkpoint(RUN)
        else:
            r = cx.intercept(RUN, "op", {"n": n, "v": value}, key=f"k{n}")
            if r.proceed and kind == "done":
                cx.complete(RUN, r.action_key, external_id=f"x{n}")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.data(), st.integers(0, 10), st.integers(0, 10))
def test_fork_determinism(plan: list[tuple[str, int]], data: st.DataObject, a: int, b: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(os.path.join(tmp, "p.db"))
        try:
            cx = Continuum(store)
            _build(cx, plan)
            head = store.get_run(RUN).head_sequence
            at = data.draw(st.integers(1, head), label="at")
            original_before = cx.full_state(RUN)
            cx.fork(RUN, at=at, new_run_id=FORK)
            assert cx.full_state(RUN) == original_before  # the fork shares no state
            assert prefix_mismatch(store, RUN, FORK, at) == []
            # Each goes its own way and keeps its own value.
            cx.record_progress(RUN, completed=a)
            if cx.state(FORK).status == "active":
                cx.record_progress(FORK, completed=b)
                assert cx.state(FORK).progress.completed == b
            assert cx.state(RUN).progress.completed == a
            assert prefix_mismatch(store, RUN, FORK, at) == []
            assert cx.verify(FORK).ok
        finally:
            store.close()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.data())
def test_fork_determinism_check_catches_one_event_too_many(
    plan: list[tuple[str, int]], data: st.DataObject
) -> None:
    """Negative control: a broken fork that copies event at+1 too fails ``prefix_mismatch``."""
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(os.path.join(tmp, "p.db"))
        try:
            cx = Continuum(store)
            _build(cx, [*plan, ("progress", 9)])  # at least one event after any fork point
            head = store.get_run(RUN).head_sequence
            at = data.draw(st.integers(1, head - 1), label="at")
            events = store.read_events(RUN)
            bundle, _ = build_fork(
                store.get_run(RUN), events[: at + 1], FORK, origin=Origin.DETERMINISTIC
            )
            import_checked(store, [bundle])
            assert prefix_mismatch(store, RUN, FORK, at) != []
        finally:
            store.close()


def test_fork_errors_are_continuum_errors_with_codes(store: Storage) -> None:
    cx = Continuum(store)
    _base_run(cx)
    with pytest.raises(ContinuumError) as caught:
        cx.fork(RUN, at=True, new_run_id=FORK)  # a bool is an int to Python, not a SEQ
    assert caught.value.code == "usage.bad_sequence"

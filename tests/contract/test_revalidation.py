"""Periodic revalidation (issue 24, item 2), on both backends: the environment check of
resume runs during the run, every ``every_steps`` steps and on a switch, so a changed
dependency holds new effects (``revalidation_required``) within one interval, until it is
declared again. Negative control: with the policy off, the same change goes unnoticed
until resume.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from continuum.eventlog.events import EventType
from continuum.recovery.revalidation import RevalidationPolicy
from continuum.runtime.facade import Continuum
from continuum.store import Storage
from continuum.types import Origin

RUN = "run_reval"


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "dataset.csv"
    path.write_text("v1\n", encoding="utf-8")
    return path


def facade(store: Storage, every: int | None = 3, **kw: object) -> Continuum:
    cx = Continuum(store, origin=Origin.EXTERNAL_AGENT, **kw)  # type: ignore[arg-type]
    cx.revalidation = RevalidationPolicy(every_steps=every)
    return cx


def send(cx: Continuum, i: int) -> str:
    return str(cx.intercept(RUN, "send", {"i": i}, key=f"k{i}").status)


def changes(store: Storage) -> list[dict[str, object]]:
    return [e.payload for e in store.read_events(RUN) if e.type == EventType.ENVIRONMENT_CHANGED]


def test_a_changed_file_holds_new_effects_within_one_interval_until_declared_again(
    store: Storage, data: Path
) -> None:
    cx = facade(store)
    cx.start_run(RUN, "g")
    cx.declare_dependencies(RUN, files=[str(data)])
    assert [send(cx, 1), send(cx, 2)] == ["started", "started"]
    data.write_text("v2\n", encoding="utf-8")  # the environment moves under the run
    held = cx.intercept(RUN, "send", {"i": 3}, key="k3")  # the third step: the check runs
    assert (held.proceed, held.status) == (False, "revalidation_required")
    assert str(data) in held.guidance and "declare" in held.guidance
    assert changes(store) == [{"name": f"file:{data}", "status": "changed"}]
    assert send(cx, 4) == "revalidation_required"  # and it stays held
    cx.complete(RUN, "send:k1")
    assert send(cx, 1) == "completed"  # a done effect still answers as done
    cx.declare_dependencies(RUN, files=[str(data)])  # the agent accepts the new file
    assert send(cx, 3) == "started"
    assert len(changes(store)) == 1  # recorded once, not at every step


def test_control_with_the_policy_off_the_change_is_seen_only_at_resume(
    store: Storage, data: Path
) -> None:
    cx = facade(store, every=None)
    cx.start_run(RUN, "g")
    cx.declare_dependencies(RUN, files=[str(data)])
    data.write_text("v2\n", encoding="utf-8")
    assert [send(cx, i) for i in range(1, 8)] == ["started"] * 7  # never held
    assert changes(store) == []
    assert cx.resume(RUN).mode != "resume"  # resume still sees it


def test_a_switch_checks_at_once_and_another_process_sees_the_hold(
    store: Storage, data: Path
) -> None:
    cx = facade(store, every=None)
    cx.start_run(RUN, "g")
    cx.declare_dependencies(RUN, files=[str(data)])
    data.unlink()
    assert cx.switched(RUN) == [f"file:{data}"]
    assert changes(store) == [{"name": f"file:{data}", "status": "removed"}]
    other = facade(store, every=None)  # a fresh facade: another process, say a hook
    assert send(other, 1) == "revalidation_required"
    off = facade(store, every=None)
    off.revalidation = RevalidationPolicy(every_steps=None, on_switch=False)
    assert off.switched(RUN) == []  # the policy can turn the switch check off


def test_a_long_lived_facade_sees_a_hold_another_process_records_after_it_looked(
    store: Storage, data: Path
) -> None:
    # An MCP server's facade intercepted while nothing was held; then a hook (another
    # process) finds the dependency changed. The server must not keep its "nothing held":
    # its next intercept is held, until the dependency is declared again.
    server = facade(store, every=None)
    server.start_run(RUN, "g")
    server.declare_dependencies(RUN, files=[str(data)])
    assert send(server, 1) == "started"  # looked: nothing held
    data.write_text("v2\n", encoding="utf-8")
    hook = facade(store, every=None)
    assert hook.switched(RUN) == [f"file:{data}"]  # another process records the change
    assert send(server, 2) == "revalidation_required"
    hook.declare_dependencies(RUN, files=[str(data)])  # declared again, by the other one
    assert send(server, 3) == "started"


def test_each_interval_observes_each_dependency_once(store: Storage) -> None:
    looked: list[int] = []

    def quota() -> str:
        looked.append(1)
        return "q1"

    cx = facade(store, every=5, probes={"quota": quota})
    cx.start_run(RUN, "g")
    cx.declare_dependencies(RUN, callables=["quota"])
    looked.clear()  # declaring it observed it once
    for i in range(20):
        assert send(cx, i) == "started"
    assert len(looked) == 4  # 20 steps, one observation per 5


def test_progress_counts_as_a_step_and_an_unchanged_environment_writes_nothing(
    store: Storage, data: Path
) -> None:
    cx = facade(store, every=2)
    cx.start_run(RUN, "g", total=4)
    cx.declare_dependencies(RUN, files=[str(data)])
    before = store.get_run(RUN).head_sequence
    cx.record_progress(RUN, completed=1)
    cx.record_progress(RUN, completed=2)  # due: observed, unchanged
    assert store.get_run(RUN).head_sequence == before + 2  # the two progress events only
    data.write_text("v3\n", encoding="utf-8")
    cx.record_progress(RUN, completed=3)
    cx.record_progress(RUN, completed=4)  # due: the change is recorded
    assert changes(store) == [{"name": f"file:{data}", "status": "changed"}]
    assert send(cx, 9) == "revalidation_required"

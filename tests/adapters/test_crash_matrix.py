"""F15: each adapter's crash matrix: real agent processes killed at every point.

The agent is ``continuum.adapters.scenarios`` (the framework's offline test model, the
framework's own persistence, a tool that appends one line per invoice to an outbox). It
dies at a continuum fault point (``os._exit`` via ``CONTINUUM_FAULTS``) or is SIGKILLed
inside the framework's own checkpoint write; a fresh process settles what was
interrupted by looking in the outbox and resumes the agent. Checked from the files and
the store: no invoice sent twice, every interrupted effect reported ``unknown`` (and no
other), the resumed agent finishes, the chain verifies.

Negative control (F15-neg): the same agent without the adapter sends INV-2 twice when it
is killed after the effect and resumed the framework's way; and a resume that does not
reconcile gets ``EffectUncertain`` instead of a second send.
"""

from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from continuum.adapters.scenarios import RUN, UNCERTAIN_EXIT
from continuum.bench.frameworks import count_outbox, run_agent, spawn
from continuum.faults import FAULT_EXIT_CODE
from continuum.runtime.facade import Continuum
from continuum.types import ActionStatus
from tests.adapters.conftest import require

FRAMEWORKS = ("langgraph", "langchain", "openai-agents", "pydantic-ai")
INV2 = "send_invoice:INV-2"


@dataclass(frozen=True)
class Point:
    name: str
    faults: str | None  # a continuum fault point (the process exits at once), or
    stop: str | None  # a stop the harness SIGKILLs the agent at
    inv2_after_crash: str | None  # INV-2's recorded status right after the crash
    unknown: bool  # must the resume report INV-2 as unknown?


POINTS = (
    # Writes of a fresh run: run_started (1), INV-1 intercept (2), complete (3), INV-2 (4).
    Point("before_intercept_commit", "before_append_commit@4", None, None, False),
    Point("after_intercept_commit", "after_intercept_commit@2", None, "started", True),
    Point("after_effect", "after_effect@2", None, "started", True),
    Point("after_complete_commit", "after_complete_commit@2", None, "completed", False),
    Point("framework_checkpoint_write", None, "checkpoint:2", "completed", False),
)


def statuses(db: Path) -> tuple[dict[str, str], set[str]]:
    cx = Continuum.open(str(db), create=False)
    try:
        actions = {a.action_key: str(a.status) for a in cx.actions(RUN)}
        uncertain = {a["action_key"] for a in cx.resume(RUN).uncertain_actions}
        return actions, uncertain
    finally:
        cx.close()


def crash_and_resume(root: Path, framework: str, flavor: str, point: Point) -> str:
    """One cell of the matrix; returns a one-line summary, raises AssertionError on a miss."""
    work = root / f"{framework}-{flavor}-{point.name}"
    code, lines, err = run_agent(
        spawn(
            work, framework, mode="continuum", flavor=flavor, stop=point.stop, faults=point.faults
        ),
        kill_at=point.stop,
    )
    expected_exit = -signal.SIGKILL if point.stop else FAULT_EXIT_CODE
    assert code == expected_exit, f"{point.name}: exit {code}: {lines} {err[-3000:]}"

    actions, uncertain = statuses(work / "continuum.db")
    assert actions.get("send_invoice:INV-1") == "completed", (point.name, actions)
    assert actions.get(INV2) == point.inv2_after_crash, (point.name, actions)
    assert "send_invoice:INV-3" not in actions, (point.name, actions)
    assert uncertain == ({INV2} if point.unknown else set()), (point.name, uncertain)

    code, lines, err = run_agent(spawn(work, framework, mode="continuum", flavor=flavor))
    assert code == 0, f"{point.name}: resume exit {code}: {lines} {err[-3000:]}"
    assert lines[-1] == "DONE Sent 3 invoices.", (point.name, lines)
    reported = [line.split()[1] for line in lines if line.startswith("UNCERTAIN ")]
    assert reported == ([INV2] if point.unknown else []), (point.name, lines)
    effects, dups, missing = count_outbox(work)
    assert (effects, dups, missing) == (3, 0, 0), (point.name, effects, dups, missing)

    actions, uncertain = statuses(work / "continuum.db")
    assert set(actions.values()) == {str(ActionStatus.COMPLETED)} and len(actions) == 3
    assert uncertain == set()
    cx = Continuum.open(str(work / "continuum.db"), create=False)
    try:
        assert cx.verify(RUN).ok
    finally:
        cx.close()
    return f"{point.name}: {'unknown' if point.unknown else 'no unknown'}"


@pytest.mark.slow
@pytest.mark.parametrize("flavor", ["sync", "async"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_adapter_crash_matrix_sends_every_invoice_once(
    framework: str, flavor: str, tmp_path: Path
) -> None:
    require(framework)
    # Two cells at a time (each is a pair of processes); every cell is checked in full.
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda p: crash_and_resume(tmp_path, framework, flavor, p), POINTS))
    unknown = sum("no unknown" not in r for r in results)
    label = framework.replace("-", "_")
    print(
        f"F15 [{label}]: {flavor}: {len(POINTS)} crash points, 0 duplicate effects, "
        f"{unknown} interrupted effect(s) reported unknown and settled, every resume finished"
    )


@pytest.mark.slow
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_without_the_adapter_the_framework_sends_an_invoice_twice(
    framework: str, tmp_path: Path
) -> None:
    require(framework)
    code, lines, err = run_agent(
        spawn(tmp_path, framework, mode="alone", stop="after_effect:2"), kill_at="after_effect:2"
    )
    assert code == -signal.SIGKILL, (lines, err[-3000:])
    code, lines, err = run_agent(spawn(tmp_path, framework, mode="alone"))
    assert code == 0 and lines[-1] == "DONE Sent 3 invoices.", (lines, err[-3000:])
    assert count_outbox(tmp_path) == (4, 1, 0)  # INV-2 twice: the framework re-ran the step
    print(f"F15-neg control: {framework} alone, killed after the effect: INV-2 sent twice")


@pytest.mark.slow
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_resume_that_does_not_reconcile_gets_effect_uncertain_not_a_second_send(
    framework: str, tmp_path: Path
) -> None:
    require(framework)
    code, _, err = run_agent(spawn(tmp_path, framework, mode="continuum", faults="after_effect@2"))
    assert code == FAULT_EXIT_CODE, err[-3000:]
    code, lines, err = run_agent(spawn(tmp_path, framework, mode="continuum", reconcile=False))
    assert code == UNCERTAIN_EXIT, (lines, err[-3000:])
    assert lines[-1] == f"EFFECT_UNCERTAIN {INV2} continuum reconcile {RUN} {INV2}", lines
    assert count_outbox(tmp_path) == (2, 0, 1)  # INV-2 once, INV-3 not yet: the agent stopped
    code, lines, err = run_agent(spawn(tmp_path, framework, mode="continuum"))
    assert code == 0 and lines[-1] == "DONE Sent 3 invoices.", (lines, err[-3000:])
    assert count_outbox(tmp_path) == (3, 0, 0)

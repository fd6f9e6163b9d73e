"""The crash matrix of the hooks (issue 11): where the host or a hook dies, per replay contract.

Points: the pre-tool hook dies before its intercept commits, or after it (the host then
runs the tool: a hook that dies is "any other exit code", and every host lets the tool run
on that); the host dies after the effect, before its post-tool hook; or after it. Then a
new session tries the same effect again. Whatever happened, an effect never runs twice
unless its contract says re-running is harmless (safe, idempotent).

Through a resident gate (``THROUGH_GATE``) the hook's work dies in the gate's worker, and
the hook process, still alive, refuses the call (fail closed): the effect does not run in
the first session. What was recorded decides the second: nothing (it runs now), or an
intercept whose host is gone (unknown: it runs again only where the contract allows).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hooks.conftest import HOSTS, THROUGH_GATE, Project, make_project

POINTS = (
    "hook_dies_before_intercept_commit",
    "hook_dies_after_intercept_commit",
    "host_dies_after_effect",
    "host_dies_after_post_tool",
)
CONTRACTS = ("never", "reconcile", "safe", "idempotent")


def crash(project: Project, point: str) -> bool:
    """Crash at ``point``; whether the effect ran."""
    call = [project.send("INV-1")]
    if point == "hook_dies_before_intercept_commit":
        s = project.session("s1", call, fault_pre="before_append_commit")
    elif point == "hook_dies_after_intercept_commit":
        s = project.session("s1", call, fault_pre="after_intercept_commit")
    elif point == "host_dies_after_effect":
        s = project.session("s1", call, die_after_effect=0)
    else:
        s = project.session("s1", call, die_after_post=0)
    if point.startswith("hook_dies") and THROUGH_GATE:
        pre = s.pre(0)
        assert pre["exits"] == [2] and pre["blocked"] is True, pre  # failed closed
        assert "resident gate" in pre["reason"] and "gave no answer" in pre["reason"]
        assert project.outbox() == [], s.steps
        return False
    assert project.outbox() == ["INV-1"], s.steps  # the effect ran once, however it ended
    if point.startswith("hook_dies"):
        assert s.pre(0)["exits"] == [86] and s.pre(0)["blocked"] is False  # failed open
    return True


def _recorded_unrun(point: str, ran: bool) -> bool:
    """An intercept recorded by a gate's worker that died before answering: never run."""
    return not ran and point == "hook_dies_after_intercept_commit"


@pytest.mark.parametrize("contract", CONTRACTS)
@pytest.mark.parametrize("point", POINTS)
def test_after_a_crash_the_effect_runs_again_only_if_its_contract_allows(
    tmp_path: Path, point: str, contract: str
) -> None:
    project = make_project(tmp_path, "claude-code", replay=contract, probe=False)
    ran = crash(project, point)
    again = project.session("s2", [project.send("INV-1")])
    pre = again.pre(0)
    if not ran:
        # Nothing recorded: it runs now. Intercepted by a host now gone: unknown, and it
        # runs only where re-running is harmless (as after a host's death).
        rerun = not _recorded_unrun(point, ran) or contract in ("safe", "idempotent")
        assert pre["blocked"] is not rerun, pre
        if not rerun:
            assert "outcome is unknown" in pre["reason"], pre
        assert project.outbox() == ["INV-1"] * rerun
    elif point == "host_dies_after_effect":
        # The outcome is unknown: only a contract that says re-running is harmless runs it.
        rerun = contract in ("safe", "idempotent")
        assert pre["blocked"] is not rerun, pre
        if not rerun:
            expected = "outcome is unknown"
            assert expected in pre["reason"] and "reconcile" in pre["reason"]
            assert again.context is not None and "NOT known" in again.context
        assert project.outbox() == ["INV-1"] * (2 if rerun else 1)
    else:
        # The hook or the host recorded the effect (after the fact if its gate died first).
        assert pre["blocked"] is True and "already happened" in pre["reason"], pre
        assert project.outbox() == ["INV-1"]


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("point", POINTS)
def test_no_host_ever_runs_a_never_effect_twice(tmp_path: Path, host: str, point: str) -> None:
    project = make_project(tmp_path, host, probe=False)
    ran = crash(project, point)
    again = project.session("s2", [project.send("INV-1"), project.send("INV-1")])
    first = ran or _recorded_unrun(point, ran)  # done, or unknown: refused either way
    assert again.pre(0)["blocked"] is first and again.pre(1)["blocked"]
    assert project.outbox() == ([] if _recorded_unrun(point, ran) else ["INV-1"])

"""The crash matrix of the hooks (issue 11): where the host or a hook dies, per replay contract.

Points: the pre-tool hook dies before its intercept commits, or after it (the host then
runs the tool: a hook that dies is "any other exit code", and every host lets the tool run
on that); the host dies after the effect, before its post-tool hook; or after it. Then a
new session tries the same effect again. Whatever happened, an effect never runs twice
unless its contract says re-running is harmless (safe, idempotent).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hooks.conftest import HOSTS, Project, make_project

POINTS = (
    "hook_dies_before_intercept_commit",
    "hook_dies_after_intercept_commit",
    "host_dies_after_effect",
    "host_dies_after_post_tool",
)
CONTRACTS = ("never", "reconcile", "safe", "idempotent")


def crash(project: Project, point: str) -> None:
    call = [project.send("INV-1")]
    if point == "hook_dies_before_intercept_commit":
        s = project.session("s1", call, fault_pre="before_append_commit")
    elif point == "hook_dies_after_intercept_commit":
        s = project.session("s1", call, fault_pre="after_intercept_commit")
    elif point == "host_dies_after_effect":
        s = project.session("s1", call, die_after_effect=0)
    else:
        s = project.session("s1", call, die_after_post=0)
    assert project.outbox() == ["INV-1"], s.steps  # the effect ran once, however it ended
    if point.startswith("hook_dies"):
        assert s.pre(0)["exits"] == [86] and s.pre(0)["blocked"] is False  # failed open


@pytest.mark.parametrize("contract", CONTRACTS)
@pytest.mark.parametrize("point", POINTS)
def test_after_a_crash_the_effect_runs_again_only_if_its_contract_allows(
    tmp_path: Path, point: str, contract: str
) -> None:
    project = make_project(tmp_path, "claude-code", replay=contract, probe=False)
    crash(project, point)
    again = project.session("s2", [project.send("INV-1")])
    pre = again.pre(0)
    if point == "host_dies_after_effect":
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
    crash(project, point)
    again = project.session("s2", [project.send("INV-1"), project.send("INV-1")])
    assert again.pre(0)["blocked"] and again.pre(1)["blocked"]
    assert project.outbox() == ["INV-1"]

"""Environment providers observe real files, git work trees and callables (contract §7)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from continuum import Continuum
from continuum.errors import UsageError
from continuum.state.environment import declarations, file_checksum, git_head


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        },
    )


@pytest.fixture
def cx(tmp_path: Path) -> Continuum:
    c = Continuum.open(str(tmp_path / "env.db"))
    c.start_run("r", "g")
    return c


def dep_status(cx: Continuum, **kw: object) -> dict[str, str]:
    report = cx.validate("r", **kw)  # type: ignore[arg-type]
    return {d.name: str(d.status) for d in report.dependencies}


def test_file_dependency_unchanged_changed_and_removed(cx: Continuum, tmp_path: Path) -> None:
    data = tmp_path / "data.csv"
    data.write_text("a,b\n")
    cx.declare_dependencies("r", files=[str(data)])
    name = f"file:{data}"
    assert dep_status(cx) == {name: "unchanged"}
    assert cx.resume("r").mode == "resume"
    data.write_text("a,b,c\n")
    assert dep_status(cx) == {name: "changed"}
    assert cx.resume("r").mode == "repair_and_resume"
    data.unlink()
    assert dep_status(cx) == {name: "removed"}
    assert cx.resume("r").mode == "replan"


def test_git_dependency_follows_head(cx: Continuum, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "f").write_text("1")
    git(repo, "add", "f")
    git(repo, "commit", "-qm", "one")
    first = git_head(repo)
    assert first and len(first) == 40
    cx.declare_dependencies("r", git=[str(repo)])
    assert dep_status(cx) == {f"git:{repo}": "unchanged"}
    (repo / "f").write_text("2")
    git(repo, "commit", "-qam", "two")
    assert dep_status(cx) == {f"git:{repo}": "changed"}


def test_static_dependency_is_unknown_until_the_caller_says(cx: Continuum) -> None:
    cx.declare_dependencies("r", env={"dataset": "v1"})
    assert dep_status(cx) == {"dataset": "unknown"}
    assert cx.resume("r").next_allowed_action == "provide_environment:dataset"
    assert dep_status(cx, env={"dataset": "v1"}) == {"dataset": "unchanged"}
    assert dep_status(cx, env={"dataset": "v2"}) == {"dataset": "changed"}
    assert dep_status(cx, env={"dataset": "v1", "extra": "1"}) == {
        "dataset": "unchanged",
        "extra": "added",
    }


def test_callable_provider(tmp_path: Path) -> None:
    version = ["1.0"]
    cx = Continuum.open(str(tmp_path / "c.db"), probes={"api": lambda: version[0]})
    cx.start_run("r", "g")
    cx.declare_dependencies("r", callables=["api"])
    assert dep_status(cx) == {"api": "unchanged"}
    version[0] = "2.0"
    assert dep_status(cx) == {"api": "changed"}
    version[0] = None  # type: ignore[call-overload]
    assert dep_status(cx) == {"api": "unknown"}


def test_staleness_propagates_through_the_runtime(cx: Continuum) -> None:
    cx.declare_dependencies("r", env={"dataset": "v1"})
    cx.append("r", "evidence_added", {"evidence_id": "e1", "dependencies": ["dataset"]})
    cx.append("r", "finding_added", {"finding_id": "f1", "evidence": ["e1"]})
    cx.append("r", "decision_created", {"decision_id": "d1", "findings": ["f1"]})
    r = cx.resume("r", env={"dataset": "v2"})
    assert r.mode == "repair_and_resume"
    assert r.required_actions == [
        "refresh_dependency:dataset",
        "recompute_evidence:e1",
        "recheck_finding:f1",
        "revisit_decision:d1",
    ]


@pytest.mark.parametrize("kind", ["missing", "directory", "fifo", "device"])
def test_file_declarations_refuse_non_regular_files_without_blocking(
    tmp_path: Path, kind: str
) -> None:
    target = {
        "missing": tmp_path / "nope",
        "directory": tmp_path,
        "fifo": tmp_path / "p",
        "device": Path("/dev/zero"),
    }[kind]
    if kind == "fifo":
        os.mkfifo(target)
    with pytest.raises(UsageError) as err:
        declarations(files=[str(target)])
    assert err.value.code == "usage.bad_dependency"
    assert file_checksum(target) is None

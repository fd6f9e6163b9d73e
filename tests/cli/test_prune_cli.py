"""`continuum prune` from the command line: what it refuses (changing nothing), what a dry
run lists, the files it writes, and that a person decides (a terminal, or --yes)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from continuum.ops.transfer import read_export
from continuum.runtime.facade import Continuum
from continuum.store import open_store
from tests.cli.conftest import Result
from tests.cli.pty_support import Terminal

LATER = "2999-01-01"


@pytest.fixture
def store(db: str) -> str:
    rt = Continuum(open_store(db))
    try:
        rt.start_run("done", "finished work")
        rt.finish_run("done")
        rt.start_run("odd/../id", "\x1b[31man agent's goal")  # no file name; hostile goal
        rt.finish_run("odd/../id", aborted=True, reason="given up")
        rt.start_run("live", "still working")
    finally:
        rt.close()
    return db


def run_ids(db: str) -> list[str]:
    with closing(open_store(db)) as s:
        return [r.run_id for r in s.list_runs()]


ALL = ["done", "odd/../id", "live"]


@pytest.mark.parametrize(
    "args, code",
    [
        (["--before", LATER, "--to", "."], "usage.invalid"),  # no --finished
        (["--finished", "--before", "yesterday", "--to", "."], "usage.bad_date"),
        (["--finished", "--before", "2026-02-30", "--to", "."], "usage.bad_date"),
        (["--finished", "--before", "2026-01-31T12:00", "--to", "."], "usage.bad_date"),  # no zone
        (["--finished", "--before", LATER], "usage.no_archive"),
        (
            ["--finished", "--before", LATER, "--to", ".", "--archive", "a.jsonl"],
            "usage.no_archive",
        ),
        (["--finished", "--before", LATER, "--to", "no-such-dir", "--yes"], "usage.no_directory"),
        (["--finished", "--before", LATER, "--archive", "a.jsonl"], "usage.not_a_terminal"),
    ],
)
def test_a_refused_prune_says_why_and_deletes_nothing(
    cli: Callable[..., Result],
    store: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    code: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    result = cli("--json", "prune", *args)
    assert (result.code, result.json()["error"]["code"]) == (1, code), result.out
    assert run_ids(store) == ALL
    assert not (tmp_path / "a.jsonl").exists()


def test_an_existing_archive_file_is_never_overwritten(
    cli: Callable[..., Result], store: str, tmp_path: Path
) -> None:
    target = tmp_path / "archive.jsonl"
    target.write_text("mine\n")
    result = cli(
        "--json", "prune", "--finished", "--before", LATER, "--archive", str(target), "--yes"
    )
    assert (result.code, result.json()["error"]["code"]) == (1, "usage.file_exists")
    assert target.read_text() == "mine\n" and run_ids(store) == ALL


def test_a_dry_run_lists_the_finished_runs_and_changes_nothing(
    cli: Callable[..., Result], store: str, tmp_path: Path
) -> None:
    result = cli("--json", "prune", "--finished", "--before", LATER, "--dry-run")
    assert result.code == 0
    doc = result.json()
    assert [r["run_id"] for r in doc["runs"]] == ["done", "odd/../id"]
    assert doc["dry_run"] is True and doc["pruned"] == []
    assert run_ids(store) == ALL and list(tmp_path.glob("*.jsonl")) == []
    text = cli("prune", "--finished", "--before", LATER, "--dry-run")
    assert "\x1b" not in text.out and "\\x1b" in text.out
    early = cli("--json", "prune", "--finished", "--before", "2000-01-01", "--dry-run")
    assert early.code == 0 and early.json()["runs"] == []


def test_pruning_to_a_directory_writes_one_verified_file_per_run(
    cli: Callable[..., Result], store: str, tmp_path: Path
) -> None:
    folder = tmp_path / "archive"
    folder.mkdir()
    result = cli("--json", "prune", "--finished", "--before", LATER, "--to", str(folder), "--yes")
    assert result.code == 0, result.out
    doc = result.json()
    assert sorted(doc["pruned"]) == ["done", "odd/../id"] and run_ids(store) == ["live"]
    files = sorted(p.name for p in folder.iterdir())
    assert "done.jsonl" in files and len(files) == 2  # the odd id is named by its hash
    assert all(n.startswith(("done", "run-")) for n in files)
    for path in folder.iterdir():
        assert path.stat().st_mode & 0o777 == 0o600  # what agents wrote: owner only
        with open(path, encoding="utf-8") as f:
            assert len(read_export(f)) == 1
    back = cli("import", str(folder / "done.jsonl"))
    assert back.code == 0 and sorted(run_ids(store)) == ["done", "live"]


def test_on_a_terminal_prune_lists_and_asks_and_no_keeps_everything(
    store: str, tmp_path: Path
) -> None:
    args = ("prune", "--finished", "--before", LATER, "--archive", str(tmp_path / "a.jsonl"))
    term = Terminal(store, *args, cwd=tmp_path)
    term.wait_for("and delete them from the store?")
    assert '"done"' in term.text() and '"odd/../id"' in term.text()
    term.send("n\r")
    assert term.finish() == 1 and "[usage.declined]" in term.text()
    assert run_ids(store) == ALL and not (tmp_path / "a.jsonl").exists()

    term = Terminal(store, *args, cwd=tmp_path)
    term.wait_for("and delete them from the store?")
    term.send("y\r")
    assert term.finish() == 0, term.text()
    assert run_ids(store) == ["live"] and term.unexpected_controls() == []

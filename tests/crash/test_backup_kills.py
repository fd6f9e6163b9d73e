"""SIGKILL during backup and during restore (issue 17): no partial destination, ever.

A real `continuum backup` / `continuum restore` process dies at a named fault point
(``os._exit``, like a kill: no ``finally``, no flush). Afterwards the destination does
not exist; what the dead process left is under a temporary name, and a leftover that is
incomplete is refused by `verify-backup`. A retry then succeeds. An `archive` killed
before its transaction commits leaves the live log exactly as it was.

Negative control: a backup written straight to its destination (no temporary name),
killed halfway, leaves a destination the same check flags, and `verify-backup` refuses
it as truncated.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from continuum.errors import ContinuumError
from continuum.eventlog.events import EventType
from continuum.faults import FAULT_EXIT_CODE
from continuum.ops.backup import verify_backup
from continuum.runtime.facade import Continuum
from tests.contract.conftest import (  # noqa: F401 - the session database's cleanup, here too
    _drop_the_session_database,
    postgres_backend,
)


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[str]:
    """A fresh, empty PostgreSQL store's URL (the contract suite's session database)."""
    with postgres_backend(tmp_path) as url:
        yield url


def fill(url: str, events: int = 3000) -> None:
    rt = Continuum.open(url)
    rt.start_run("big", "many events", total=events)
    with rt.store.write("big") as tx:
        for i in range(events):
            tx.append(
                EventType.WORK_COMPLETED,
                {"item_id": f"doc-{i}", "pad": "x" * 200},
                source=rt.origin,
            )
    a = rt.intercept("big", "send_invoice", {"n": 1}, key="invoice:1")
    rt.complete("big", a.action_key, external_id="mail-1")
    rt.close()


def cli(db: str, *args: str, faults: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONTINUUM_FAULTS": faults}
    env.pop("CONTINUUM_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "continuum", "--db", db, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def destination_problems(dest: Path) -> list[str]:
    """A killed run must leave no destination; one that exists must verify."""
    if not dest.exists():
        return []
    try:
        verify_backup(dest)
    except ContinuumError as e:
        return [f"{dest.name} exists but is refused: {e.code}"]
    return []


def leftovers(directory: Path, name: str) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.startswith(f".{name}."))


@pytest.mark.parametrize(
    "fault", ["backup_step", "backup_data_written", "backup_packing@3", "before_publish"]
)
def test_a_backup_killed_midway_leaves_no_destination(tmp_path: Path, fault: str) -> None:
    db = str(tmp_path / "store.db")
    fill(db)
    dest = tmp_path / "store.backup"

    killed = cli(db, "backup", str(dest), faults=fault)

    assert killed.returncode == FAULT_EXIT_CODE, killed.stderr
    assert not dest.exists()
    assert destination_problems(dest) == []
    left = leftovers(tmp_path, dest.name)
    assert left, "the dead process wrote under a temporary name"
    for path in left:
        if fault == "before_publish" and path.name.endswith(".partial"):
            verify_backup(path)  # whole and fsynced, but it never got the name
            continue
        with pytest.raises(ContinuumError) as e:
            verify_backup(path)
        assert e.value.code in ("integrity.backup_truncated", "usage.not_a_backup")
    again = cli(db, "backup", str(dest))
    assert again.returncode == 0, again.stderr
    assert verify_backup(dest)["totals"]["events"] == 3003


def test_a_postgres_backup_killed_midway_leaves_no_destination(pg: str, tmp_path: Path) -> None:
    fill(pg, 500)
    dest = tmp_path / "pg.backup"
    killed = cli(pg, "backup", str(dest), faults="backup_packing@2")
    assert killed.returncode == FAULT_EXIT_CODE, killed.stderr
    assert not dest.exists()
    assert cli(pg, "backup", str(dest)).returncode == 0
    assert verify_backup(dest)["kind"] == "export"


@pytest.mark.parametrize("fault", ["restore_staged", "restore_before_publish"])
def test_a_restore_killed_midway_leaves_no_store(tmp_path: Path, fault: str) -> None:
    db = str(tmp_path / "store.db")
    fill(db, 500)
    backup = tmp_path / "store.backup"
    assert cli(db, "backup", str(backup)).returncode == 0
    target = tmp_path / "restored.db"

    killed = cli(str(target), "restore", str(backup), faults=fault)

    assert killed.returncode == FAULT_EXIT_CODE, killed.stderr
    assert not target.exists()
    assert leftovers(tmp_path, target.name)  # under temporary names only
    again = cli(str(target), "restore", str(backup))
    assert again.returncode == 0, again.stderr
    rt = Continuum.open(str(target), create=False)
    try:
        assert rt.verify("big").ok and rt.store.get_run("big").head_sequence == 503
    finally:
        rt.close()


def test_a_restore_into_postgres_killed_before_commit_leaves_no_runs(
    pg: str, tmp_path: Path
) -> None:
    db = str(tmp_path / "store.db")
    fill(db, 300)
    backup = tmp_path / "store.backup"
    assert cli(db, "backup", str(backup)).returncode == 0

    killed = cli(pg, "restore", str(backup), faults="before_append_commit")

    assert killed.returncode == FAULT_EXIT_CODE, killed.stderr
    rt = Continuum.open(pg, create=False)
    try:
        assert rt.runs() == []
    finally:
        rt.close()
    assert cli(pg, "restore", str(backup)).returncode == 0


NAIVE = r"""
import os, sys
from pathlib import Path
src, dest = Path(sys.argv[1]), Path(sys.argv[2])
data = src.read_bytes()
with open(dest, "wb") as f:      # straight to the destination: no temporary name
    f.write(data[: len(data) // 2])
    f.flush()
    os._exit(86)                 # killed halfway
"""


def test_the_check_flags_a_backup_written_straight_to_its_destination(tmp_path: Path) -> None:
    db = str(tmp_path / "store.db")
    fill(db, 500)
    good = tmp_path / "good.backup"
    assert cli(db, "backup", str(good)).returncode == 0
    dest = tmp_path / "naive.backup"

    killed = subprocess.run([sys.executable, "-c", NAIVE, str(good), str(dest)], timeout=60)

    assert killed.returncode == FAULT_EXIT_CODE
    assert destination_problems(dest) == [
        "naive.backup exists but is refused: integrity.backup_truncated"
    ]


@pytest.mark.parametrize("fault", ["archive_file_written", "archive_before_commit"])
def test_an_archive_killed_before_it_commits_changes_nothing(tmp_path: Path, fault: str) -> None:
    db = str(tmp_path / "store.db")
    fill(db, 200)
    rt = Continuum.open(db, create=False)
    head = rt.store.get_run("big")
    rt.close()

    killed = cli(
        db,
        "archive",
        "big",
        "--before",
        "150",
        "--to",
        str(tmp_path / "a.jsonl"),
        "--yes",
        faults=fault,
    )

    assert killed.returncode == FAULT_EXIT_CODE, killed.stderr
    rt = Continuum.open(db, create=False)
    try:
        assert rt.store.get_run("big") == head  # not a marker, not a removal
        assert rt.store.archive_base("big") is None
        assert rt.verify("big").ok
        assert len(rt.store.read_events("big")) == head.head_sequence
    finally:
        rt.close()
    assert (
        cli(
            db, "archive", "big", "--before", "150", "--to", str(tmp_path / "b.jsonl"), "--yes"
        ).returncode
        == 0
    )

"""Stores, exports and contract files are private to their owner (0600), whatever the umask.

They hold what agents wrote (goals, arguments, results): a world-readable default would
show them to every local user (issue 10, item 8).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from continuum.store import SQLiteStorage


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def continuum(tmp_path: Path, *args: str) -> None:
    # A permissive umask, as many shells have: the files must still come out 0600.
    subprocess.run(
        [sys.executable, "-m", "continuum", "--db", str(tmp_path / "s.db"), *args],
        check=True,
        capture_output=True,
        cwd=tmp_path,
        timeout=60,
        preexec_fn=lambda: os.umask(0o022),
    )


def test_a_new_store_and_its_wal_and_shm_are_0600(tmp_path: Path) -> None:
    continuum(tmp_path, "start", "r1", "--goal", "g")
    assert mode(tmp_path / "s.db") == 0o600
    old = os.umask(0o022)
    try:
        with SQLiteStorage(tmp_path / "s.db") as store:  # keeps -wal and -shm open
            store.append_event("r1", "work_completed", {"doc": 1})
            assert mode(tmp_path / "s.db-wal") == 0o600
            assert mode(tmp_path / "s.db-shm") == 0o600
    finally:
        os.umask(old)


def test_exports_and_contract_files_are_0600(tmp_path: Path) -> None:
    continuum(tmp_path, "start", "r1", "--goal", "g")
    continuum(tmp_path, "export", "r1", "-o", "run.jsonl")
    continuum(tmp_path, "show-contract", "r1", "-o", "contract.json")
    (tmp_path / "again.json").write_text("old", encoding="utf-8")
    (tmp_path / "again.json").chmod(0o644)
    continuum(tmp_path, "show-contract", "r1", "-o", "again.json")
    assert mode(tmp_path / "run.jsonl") == 0o600
    assert mode(tmp_path / "contract.json") == 0o600
    assert mode(tmp_path / "again.json") == 0o600


def test_an_existing_store_keeps_the_mode_its_owner_gave_it(tmp_path: Path) -> None:
    continuum(tmp_path, "start", "r1", "--goal", "g")
    (tmp_path / "s.db").chmod(0o640)  # the operator's choice (a group that audits)
    continuum(tmp_path, "status", "r1")
    assert mode(tmp_path / "s.db") == 0o640

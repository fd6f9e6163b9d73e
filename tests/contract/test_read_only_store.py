"""A store on a read-only file system is read, and a write says why it cannot be done
(issue 30, item 8). SQLite only: a PostgreSQL server that is read-only already answers
`store.read_only` (pg_connection.py). The file system is a real read-only bind mount
(root, as on this machine kind and in CI)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from continuum.errors import StoreError
from continuum.runtime.facade import Continuum
from continuum.types import Origin


@pytest.fixture
def read_only_copy(tmp_path: Path) -> Iterator[Path]:
    """A store with one run, then the same directory mounted read-only elsewhere."""
    if os.geteuid() != 0 and not os.environ.get("CI"):
        pytest.skip("a read-only bind mount needs root (CI runs as root and fails here)")
    src, mnt = tmp_path / "src", tmp_path / "ro"
    src.mkdir()
    mnt.mkdir()
    with Continuum.open(str(src / "s.db"), create=True, origin=Origin.EXTERNAL_AGENT) as rt:
        rt.start_run("r1", "send five invoices")
        rt.intercept("r1", "send", {"invoice": "INV-1"}, key="inv-1")
    subprocess.run(["mount", "--bind", str(src), str(mnt)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(mnt)], check=True)
        yield mnt / "s.db"
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "continuum", *args], capture_output=True, text=True, timeout=60
    )


def test_a_store_on_a_read_only_file_system_is_read_and_a_write_says_why_not(
    read_only_copy: Path,
) -> None:
    db = str(read_only_copy)
    assert not Path(db + "-shm").exists()  # nothing for WAL reads: opened as immutable
    runs = cli("--db", db, "--json", "runs")
    assert runs.returncode == 0, runs.stdout + runs.stderr
    assert "r1" in runs.stdout
    resume = cli("--db", db, "resume", "r1")
    assert resume.returncode == 20, resume.stdout + resume.stderr  # read, judged as ever
    assert cli("--db", db, "verify", "r1").returncode == 0
    with Continuum.open(db, origin=Origin.EXTERNAL_AGENT) as rt:
        assert [a.action_key for a in rt.actions("r1")] == ["send:inv-1"]
        with pytest.raises(StoreError) as e:
            rt.intercept("r1", "send", {"invoice": "INV-2"}, key="inv-2")
    assert e.value.code == "store.read_only" and "read-only" in e.value.message
    write = cli("--db", db, "--json", "checkpoint", "r1")
    assert write.returncode == 1 and '"store.read_only"' in write.stdout, write.stdout
    assert sorted(p.name for p in read_only_copy.parent.iterdir()) == ["s.db"]

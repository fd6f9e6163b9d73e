"""`continuum prune` on every backend: finished runs are exported first, the export read back
and verified, and only then deleted, one transaction per run, while their head is still the
one exported (SQLite and PostgreSQL, through ``store_factory``)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from continuum.errors import ContinuumError, IntegrityError, NotFoundError, UsageError
from continuum.faults import FAULT_EXIT_CODE
from continuum.ops.prune import archive_files, candidates, prune, write_verified
from continuum.ops.transfer import import_runs, read_export
from continuum.runtime.facade import Continuum
from continuum.store import Storage
from tests.contract.conftest import StoreFactory
from tests.contract.transfer_support import fill, snapshot

LATER = datetime.now(UTC) + timedelta(days=1)  # every run here ended before it
FINISHED = ("run_done", "run_rich")


def finished_store(store: Storage) -> None:
    """Two finished runs (one with actions in every state and a checkpoint), one active."""
    fill(store)
    rt = Continuum(store)
    for action in rt.actions("run_rich"):  # prune skips a run with unsettled work
        if action.needs_human:
            rt.reconcile(
                "run_rich", action.action_key, occurred=False, force=True, note="checked by hand"
            )
    rt.finish_run("run_rich", reason="stopped with an action in flight")
    rt.start_run("run_live", "still working")


def snapshots(store: Storage, run_ids: tuple[str, ...] = FINISHED) -> dict[str, Any]:
    return {r: snapshot(store, r) for r in run_ids}


def present(store: Storage, before: dict[str, Any]) -> list[str]:
    """The runs of ``before`` still in ``store`` exactly as they were (events, actions,
    checkpoints, record) and verifying."""
    kept = []
    for run_id, snap in before.items():
        try:
            if snapshot(store, run_id) == snap and Continuum(store).verify(run_id).ok:
                kept.append(run_id)
        except NotFoundError:
            continue
    return kept


def test_prune_then_reimport_of_the_archive_gives_identical_chains(
    store_factory: StoreFactory, tmp_path: Path
) -> None:
    store = store_factory.open()
    finished_store(store)
    before = snapshots(store)

    runs = candidates(store, LATER)
    assert sorted(r.run_id for r in runs) == list(FINISHED)  # never the active one
    files = archive_files(runs, to_dir=str(tmp_path), archive=None)
    report = prune(store, runs, files, before=LATER)

    assert sorted(report.pruned) == list(FINISHED) and report.refused == []
    assert [r.run_id for r in store.list_runs()] == ["run_live"]
    for run_id in FINISHED:
        with pytest.raises(NotFoundError):
            store.get_run(run_id)
        assert store.list_actions(run_id) == [] and store.list_checkpoints(run_id) == []
    for path in sorted(set(files.values())):
        with open(path, encoding="utf-8") as f:
            import_runs(store, f)  # unsigned: each run comes back followed by an import marker
    for run_id, snap in before.items():
        back, n = snapshot(store, run_id), len(snap["events"])
        assert back["events"][:n] == snap["events"]  # every hash back
        assert [e["type"] for e in back["events"][n:]] == ["history_imported", "checkpointed"]
        assert back["checkpoints"][1:] == snap["checkpoints"]  # newest first: the marker's
        assert [a["action_id"] for a in back["actions"]] == [
            a["action_id"] for a in snap["actions"]
        ]
        assert Continuum(store).verify(run_id).ok


def test_an_active_run_is_never_pruned(store_factory: StoreFactory) -> None:
    store = store_factory.open()
    finished_store(store)
    live = snapshots(store, ("run_live",))
    run = store.get_run("run_live")

    assert "run_live" not in [r.run_id for r in candidates(store, LATER)]
    with pytest.raises(UsageError) as refused:
        store.delete_run("run_live", expect_head=(run.head_sequence, run.head_hash))
    assert refused.value.code == "usage.run_active"
    assert present(store, live) == ["run_live"]


def test_a_run_that_moved_on_after_its_export_is_refused_and_kept(
    store_factory: StoreFactory, tmp_path: Path
) -> None:
    store = store_factory.open()
    finished_store(store)
    runs = candidates(store, LATER)
    heads = write_verified(store, tmp_path / "archive.jsonl", runs)
    store.append_event("run_done", "progress_recorded", {"completed": 1})  # after the export
    after = snapshots(store, ("run_done",))

    with pytest.raises(UsageError) as refused:
        store.delete_run("run_done", expect_head=heads["run_done"])
    assert refused.value.code == "usage.run_moved_on"
    assert present(store, after) == ["run_done"]


def test_prune_keeps_a_run_that_moves_on_during_it_and_prunes_the_rest(
    store_factory: StoreFactory, tmp_path: Path
) -> None:
    store = store_factory.open()
    finished_store(store)

    class AppendsFirst:
        """The store, with an agent appending to run_done between export and delete."""

        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def delete_run(self, run_id: str, *, expect_head: tuple[int, str | None]) -> None:
            if run_id == "run_done":
                store.append_event(run_id, "progress_recorded", {"completed": 1})
            store.delete_run(run_id, expect_head=expect_head)

    runs = candidates(store, LATER)
    report = prune(
        AppendsFirst(),
        runs,
        archive_files(runs, to_dir=None, archive=str(tmp_path / "a.jsonl")),
        before=LATER,
    )
    assert report.pruned == ["run_rich"]
    assert [(r.run_id, r.code) for r in report.refused] == [("run_done", "usage.run_moved_on")]
    assert store.get_run("run_done").head_sequence == 3


def test_a_stored_log_that_does_not_match_its_head_is_not_deleted(
    store_factory: StoreFactory,
) -> None:
    store = store_factory.open()
    finished_store(store)
    run = store.get_run("run_done")
    store_factory.corrupt(
        "DELETE FROM events WHERE run_id = ? AND sequence = ?", ("run_done", run.head_sequence)
    )
    with pytest.raises(IntegrityError) as refused:
        store.delete_run("run_done", expect_head=(run.head_sequence, run.head_hash))
    assert refused.value.code == "integrity.head_mismatch"
    assert store.get_run("run_done").head_sequence == run.head_sequence  # nothing deleted


def _prune_process(url: str, archive: Path, faults: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTINUUM_")}
    env["CONTINUUM_FAULTS"] = faults
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "continuum",
            "--db",
            url,
            "prune",
            "--finished",
            "--before",
            LATER.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "--archive",
            str(archive),
            "--yes",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize("point", ["after_prune_export", "before_delete_commit"])
def test_a_kill_between_export_and_delete_leaves_everything_in_place(
    store_factory: StoreFactory, tmp_path: Path, point: str
) -> None:
    store = store_factory.open()
    finished_store(store)
    before = snapshots(store)
    archive = tmp_path / "archive.jsonl"

    died = _prune_process(store_factory.url, archive, point)

    assert died.returncode == FAULT_EXIT_CODE, died.stderr  # it died at the point, no cleanup
    fresh = store_factory.open()  # as a new process sees the store
    assert present(fresh, before) == list(FINISHED)
    with open(archive, encoding="utf-8") as f:  # the archive is whole and verifies
        assert sorted(b.run.run_id for b in read_export(f)) == list(FINISHED)


def test_the_kill_harness_sees_a_delete_that_committed(
    store_factory: StoreFactory, tmp_path: Path
) -> None:
    # Negative control: killed just after the first delete commits, the harness must find
    # that run gone (so "everything in place" above is a check that can fail).
    store = store_factory.open()
    finished_store(store)
    before = snapshots(store)

    died = _prune_process(store_factory.url, tmp_path / "archive.jsonl", "after_delete_commit")

    assert died.returncode == FAULT_EXIT_CODE, died.stderr
    fresh = store_factory.open()
    assert present(fresh, before) == ["run_done"]  # run_rich, the first deleted, is gone
    with pytest.raises(NotFoundError):
        fresh.get_run("run_rich")


def test_delete_run_refuses_a_run_that_does_not_exist(store_factory: StoreFactory) -> None:
    store = store_factory.open()
    with pytest.raises(ContinuumError) as refused:
        store.delete_run("nope", expect_head=(1, "x"))
    assert refused.value.code == "not_found.run"


def test_rows_in_a_table_prune_does_not_know_are_never_deleted(store_factory: StoreFactory) -> None:
    # A per-run table this code does not know (a newer version's) may hold what no archive
    # has: its rows block the delete. Negative control: the same table without rows of the
    # run does not.
    store = store_factory.open()
    finished_store(store)
    table = "extra" if store_factory.backend == "sqlite" else "continuum.extra"
    store_factory.corrupt(f"CREATE TABLE {table} (run_id TEXT, note TEXT)")
    store_factory.corrupt(f"INSERT INTO {table} VALUES (?, ?)", ("run_done", "keep me"))
    done, rich = store.get_run("run_done"), store.get_run("run_rich")

    with pytest.raises(ContinuumError) as refused:
        store.delete_run("run_done", expect_head=(done.head_sequence, done.head_hash))
    assert refused.value.code == "store.unknown_run_rows"
    assert store.get_run("run_done").head_sequence == done.head_sequence
    store.delete_run("run_rich", expect_head=(rich.head_sequence, rich.head_hash))
    with pytest.raises(NotFoundError):
        store.get_run("run_rich")

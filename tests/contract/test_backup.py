"""Backup, verify-backup and restore (issue 17), on both backends.

A backup holds one consistent moment of the whole store, is checked from the file alone,
and restores only into a new store, every chain verified on arrival. A tampered manifest,
tampered data, a truncated file and a file that is not a backup are each refused by
kind; the untouched file passing is the control.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from continuum.errors import ContinuumError, IntegrityError, UsageError
from continuum.eventlog.events import EventType
from continuum.ops.backup import restore_backup, seal_manifest, verify_backup
from continuum.runtime.facade import Continuum
from continuum.store import Storage, open_store
from tests.contract.conftest import StoreFactory, postgres_backend

RUNS = ("run_one", "run_two")


def fill(rt: Continuum) -> None:
    for run_id in RUNS:
        rt.start_run(run_id, f"goal of {run_id}", total=10)
        for i in range(5):
            rt.append(run_id, EventType.WORK_COMPLETED, {"item_id": f"{run_id}-{i}"})
        a = rt.intercept(run_id, "send_invoice", {"n": 1}, key="invoice:1")
        rt.complete(run_id, a.action_key, external_id="mail-1")
        rt.checkpoint(run_id)


def heads(store: Storage) -> dict[str, tuple[int, str | None]]:
    return {r.run_id: (r.head_sequence, r.head_hash) for r in store.list_runs()}


@pytest.fixture
def filled(store: Storage) -> Continuum:
    rt = Continuum(store)
    fill(rt)
    return rt


def test_backup_verify_and_restore_keep_every_run_exactly(
    store_factory: StoreFactory, filled: Continuum, tmp_path: Path
) -> None:
    dest = tmp_path / "store.backup"
    manifest = filled.backup(dest)

    assert manifest["kind"] == ("sqlite" if store_factory.backend == "sqlite" else "export")
    assert dest.stat().st_mode & 0o777 == 0o600
    assert manifest["totals"]["runs"] == 2 and manifest["totals"]["actions"] == 2
    assert {r: (v["head_sequence"], v["head_hash"]) for r, v in manifest["runs"].items()} == heads(
        filled.store
    )
    checked = verify_backup(dest)
    assert checked["ok"] and checked["runs"] == manifest["runs"]
    with tarfile.open(dest) as tar:  # an ordinary tar file
        assert [m.name for m in tar.getmembers()] == ["manifest.json", manifest["data"]["name"]]

    restored_path = tmp_path / "restored.db"
    result = restore_backup(dest, str(restored_path))

    assert result["runs"] == manifest["runs"]
    restored = Continuum.open(str(restored_path), create=False)
    try:
        assert heads(restored.store) == heads(filled.store)
        for run_id in RUNS:
            assert restored.verify(run_id).ok
            again = restored.intercept(run_id, "send_invoice", {"n": 1}, key="invoice:1")
            assert (again.proceed, str(again.status)) == (False, "completed")
    finally:
        restored.close()


def test_a_backup_of_chosen_runs_uses_the_export_form_and_restores_into_postgres(
    filled: Continuum, tmp_path: Path
) -> None:
    dest = tmp_path / "one.backup"
    manifest = filled.backup(dest, run_ids=["run_two"])
    assert manifest["kind"] == "export" and list(manifest["runs"]) == ["run_two"]
    assert verify_backup(dest)["totals"]["runs"] == 1

    with postgres_backend(tmp_path) as url:
        restore_backup(dest, url)
        target = Continuum.open(url, create=False)
        try:
            assert heads(target.store) == {"run_two": heads(filled.store)["run_two"]}
            assert target.verify("run_two").ok
        finally:
            target.close()
        with pytest.raises(UsageError) as e:  # a store with runs is not new
            restore_backup(dest, url)
        assert e.value.code == "usage.store_exists"


def test_a_backup_or_restore_never_overwrites(filled: Continuum, tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.write_bytes(b"mine")
    with pytest.raises(UsageError) as e:
        filled.backup(taken)
    assert e.value.code == "usage.file_exists"
    dest = tmp_path / "b.backup"
    filled.backup(dest)
    with pytest.raises(UsageError) as e:
        restore_backup(dest, str(taken))
    assert e.value.code == "usage.file_exists"
    assert taken.read_bytes() == b"mine"


# -- tampering, by kind ----------------------------------------------------------------------


def _members(path: Path) -> tuple[dict[str, Any], bytes, str]:
    with tarfile.open(path) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        name = manifest["data"]["name"]
        return manifest, tar.extractfile(name).read(), name  # type: ignore[union-attr]


def _repack(path: Path, manifest: dict[str, Any], data: bytes, name: str) -> None:
    path.unlink()
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        body = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def _flip_data(path: Path) -> None:
    manifest, data, name = _members(path)
    i = data.find(b"run_one-3")
    assert i > 0
    _repack(path, manifest, data[:i] + b"run_one-X" + data[i + 9 :], name)


def _edit_manifest(path: Path) -> None:  # a head changed, the digest left alone
    manifest, data, name = _members(path)
    manifest["runs"]["run_one"]["head_sequence"] += 1
    _repack(path, manifest, data, name)


def _reseal_manifest(path: Path) -> None:  # a head changed and the digest recomputed
    manifest, data, name = _members(path)
    manifest["runs"]["run_one"]["head_sequence"] -= 1
    _repack(path, seal_manifest(manifest), data, name)


def _swap_data(path: Path) -> None:
    """An event's payload rewritten in the data as its reader sees it (SQL on the SQLite copy,
    the line in the JSONL), the manifest's size and sha256 resealed to match."""
    import hashlib

    manifest, data, name = _members(path)
    if name == "store.sqlite":
        import apsw

        copy = path.with_name("forged.sqlite")
        copy.write_bytes(data)
        conn = apsw.Connection(str(copy))
        conn.execute(
            "UPDATE events SET payload = replace(payload, 'run_one-3', 'run_one-X')"
            " WHERE instr(payload, 'run_one-3') > 0"
        )
        assert conn.changes() == 1
        conn.close()
        forged = copy.read_bytes()
        copy.unlink()
    else:
        assert data.count(b"run_one-3") >= 1
        forged = data.replace(b'"item_id":"run_one-3"', b'"item_id":"run_one-X"', 1)
    assert forged != data
    manifest["data"]["sha256"] = hashlib.sha256(forged).hexdigest()
    manifest["data"]["bytes"] = len(forged)
    _repack(path, seal_manifest(manifest), forged, name)


def _cut(fraction: float) -> Any:
    def cut(path: Path) -> None:
        size = path.stat().st_size
        with open(path, "r+b") as f:
            f.truncate(int(size * fraction))

    return cut


def _cut_end_marker(path: Path) -> None:
    manifest, data, name = _members(path)
    with tarfile.open(path) as tar:
        member = tar.getmember(name)
    end = member.offset_data + -(-member.size // 512) * 512
    with open(path, "r+b") as f:
        f.truncate(end + 100)


TAMPERS = {
    "data_byte_changed": (_flip_data, "integrity.backup_data"),
    "data_replaced_and_digest_resealed": (_swap_data, "integrity.backup_data"),
    "manifest_edited": (_edit_manifest, "integrity.backup_manifest"),
    "manifest_edited_and_resealed": (_reseal_manifest, "integrity.backup_manifest"),
    "cut_in_the_data": (_cut(0.6), "integrity.backup_truncated"),
    "cut_in_the_manifest": (
        lambda p: _cut(0.0)(p) or p.write_bytes(b"x" * 700),
        "usage.not_a_backup",
    ),
    "cut_to_nothing": (_cut(0.0), "integrity.backup_truncated"),
    "end_marker_missing": (_cut_end_marker, "integrity.backup_truncated"),
}


@pytest.mark.parametrize("how", sorted(TAMPERS))
def test_a_tampered_or_truncated_backup_is_refused_by_kind(
    filled: Continuum, tmp_path: Path, how: str
) -> None:
    dest = tmp_path / "b.backup"
    filled.backup(dest)
    assert verify_backup(dest)["ok"]  # the control: the same file, untouched
    tamper, code = TAMPERS[how]

    tamper(dest)

    with pytest.raises(ContinuumError) as e:
        verify_backup(dest)
    assert e.value.code == code, e.value.message
    target = tmp_path / "restored.db"
    with pytest.raises(ContinuumError) as e2:
        restore_backup(dest, str(target))
    assert e2.value.code == code
    assert not target.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".restored.db")]


def test_a_file_that_is_not_a_backup_is_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar"
    with tarfile.open(junk, "w") as tar:
        info = tarfile.TarInfo("something.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    with pytest.raises(UsageError) as e:
        verify_backup(junk)
    assert e.value.code == "usage.not_a_backup"


def test_restore_into_a_store_with_runs_is_refused_and_changes_nothing(
    store_factory: StoreFactory, filled: Continuum, tmp_path: Path
) -> None:
    dest = tmp_path / "b.backup"
    filled.backup(dest)
    before = heads(filled.store)
    if store_factory.backend == "sqlite":
        with pytest.raises(UsageError) as e:
            restore_backup(dest, store_factory.url)
        assert e.value.code == "usage.file_exists"
    else:
        with pytest.raises(UsageError) as e:
            restore_backup(dest, store_factory.url)
        assert e.value.code == "usage.store_exists"
    assert heads(store_factory.open()) == before


def test_a_restored_store_is_usable_by_a_new_process(filled: Continuum, tmp_path: Path) -> None:
    dest = tmp_path / "b.backup"
    filled.backup(dest)
    target = tmp_path / "new.db"
    restore_backup(dest, str(target))
    assert target.stat().st_mode & 0o777 == 0o600
    assert not [p for p in os.listdir(tmp_path) if "partial" in p or "extract" in p]
    store = open_store(str(target), create=False)
    try:
        store.append_event("run_one", EventType.WORK_COMPLETED, {"item_id": "after restore"})
        assert store.verify_events("run_one").ok
    finally:
        store.close()


def test_a_damaged_store_is_not_backed_up(
    store_factory: StoreFactory, filled: Continuum, tmp_path: Path
) -> None:
    store_factory.corrupt(
        "UPDATE events SET payload = replace(payload, 'run_one-2', 'run_one-9') WHERE run_id = ?",
        ("run_one",),
    )
    with pytest.raises(IntegrityError):
        Continuum(store_factory.open()).backup(tmp_path / "b.backup")
    assert not list(tmp_path.glob("*b.backup*"))

"""Issue 30 item 9: what makes a backup trusted.

A backup whose SQLite copy was edited to add a trigger (emptying the action index whenever
an event is written), its manifest digest recomputed (a plain SHA-256, no key), passed
``verify-backup`` and ``restore`` (the trigger kept); after one append a completed key
intercepted again as ``started``: the effect ran twice. Now the copy's schema is compared
with the layout of its version before it is opened as a store (``integrity.backup_schema``),
the outbox is checked against the log, and a manifest signed with ``backup --sign`` is
checked with the signer's public key (``integrity.backup_signature``). Controls: the
untouched backup passes, and the forged copy's runs verify as before (only the new checks
see it).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import apsw
import pytest

from continuum.errors import ContinuumError, IntegrityError
from continuum.ops.backup import restore_backup, seal_manifest, verify_all, verify_backup
from continuum.ops.signing import generate_keypair
from continuum.runtime.facade import Continuum
from continuum.store import SQLiteStorage, Storage
from continuum.types import Origin
from tests.contract.test_backup import _members, _repack, fill

KEY = "invoice:1"


@pytest.fixture
def sqlite_rt(tmp_path: Path) -> Continuum:
    rt = Continuum(SQLiteStorage(tmp_path / "live.db"))
    fill(rt)
    agent = Continuum(rt.store, origin=Origin.EXTERNAL_AGENT)
    doubt = agent.intercept("run_one", "send_mail", {"to": "a"}, key="mail:1")
    agent.fail("run_one", doubt.action_key, error="bounced", certain=True)  # a notification
    return rt


def _forge(path: Path, *statements: str) -> None:
    """Run SQL on the backup's SQLite copy, then reseal what a forger can: the data's size
    and SHA-256 and the manifest digest."""
    manifest, data, name = _members(path)
    assert name == "store.sqlite"
    copy = path.with_name("forged.sqlite")
    copy.write_bytes(data)
    conn = apsw.Connection(str(copy))
    for statement in statements:
        conn.execute(statement)
    conn.close()
    forged = copy.read_bytes()
    copy.unlink()
    manifest["data"].update(sha256=hashlib.sha256(forged).hexdigest(), bytes=len(forged))
    _repack(path, seal_manifest(manifest), forged, name)


SCHEMA_EDITS = {
    "trigger emptying the action index": (
        "CREATE TRIGGER forget AFTER INSERT ON events BEGIN DELETE FROM actions; END",
    ),
    "view": ("CREATE VIEW everything AS SELECT * FROM events",),
    "extra index": ("CREATE INDEX by_type ON events (type)",),
    "added column": ("ALTER TABLE actions ADD COLUMN note TEXT",),
    "dropped index": ("DROP INDEX actions_by_fallback",),
}


@pytest.mark.parametrize("edit", sorted(SCHEMA_EDITS))
def test_a_backup_whose_store_schema_was_edited_is_refused(
    sqlite_rt: Continuum, tmp_path: Path, edit: str
) -> None:
    dest = tmp_path / "b.backup"
    sqlite_rt.backup(dest)
    assert verify_backup(dest)["ok"]  # the control: untouched
    _forge(dest, *SCHEMA_EDITS[edit])
    # The forged copy is a working store whose runs all verify: only the schema shows it.
    probe = tmp_path / "probe.db"
    probe.write_bytes(_members(dest)[1])
    opened = SQLiteStorage(probe, create=False)
    try:
        assert verify_all(opened)
    finally:
        opened.close()

    with pytest.raises(IntegrityError) as e:
        verify_backup(dest)
    assert e.value.code == "integrity.backup_schema" and e.value.hint
    target = tmp_path / "restored.db"
    with pytest.raises(IntegrityError) as e2:
        restore_backup(dest, str(target))
    assert e2.value.code == "integrity.backup_schema"
    assert not target.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".restored.db")]


def test_a_restored_trigger_would_have_let_a_completed_effect_run_again(
    sqlite_rt: Continuum, tmp_path: Path
) -> None:
    """What the schema check prevents, shown on the forged copy itself."""
    dest = tmp_path / "b.backup"
    sqlite_rt.backup(dest)
    _forge(dest, SCHEMA_EDITS["trigger emptying the action index"][0])
    probe = tmp_path / "probe.db"
    probe.write_bytes(_members(dest)[1])
    rt = Continuum(SQLiteStorage(probe, create=False))
    rt.append("run_one", "progress_recorded", {"completed": 6})
    again = rt.intercept("run_one", "send_invoice", {"n": 1}, key=KEY)
    assert (again.proceed, str(again.status)) == (True, "started")  # the double effect
    rt.store.close()


OUTBOX_EDITS = {
    "a notification moved to another event": "UPDATE outbox SET sequence = sequence - 1",
    "a notification's origin rewritten to a person": (
        'UPDATE outbox SET body = replace(body, \'"origin":"external_agent"\','
        ' \'"origin":"human"\')'
    ),
    "a notification no event calls for": (
        "INSERT INTO outbox (delivery_id, run_id, sequence, kind, body, created_at, status,"
        " attempts, next_attempt, delivered_to) SELECT 'ntf_forged', run_id, 2, kind,"
        " body, created_at, 'pending', 0, 0, '[]' FROM outbox LIMIT 1"
    ),
}


@pytest.mark.parametrize("edit", sorted(OUTBOX_EDITS))
def test_a_backup_whose_outbox_disagrees_with_its_log_is_refused(
    sqlite_rt: Continuum, tmp_path: Path, edit: str
) -> None:
    dest = tmp_path / "b.backup"
    sqlite_rt.backup(dest)
    assert verify_backup(dest)["ok"]  # the control, with a notification in it
    assert sqlite_rt.store.outbox_counts()["pending"] == 1
    _forge(dest, OUTBOX_EDITS[edit])

    with pytest.raises(IntegrityError) as e:
        verify_backup(dest)
    assert e.value.code == "integrity.backup_data"
    with pytest.raises(IntegrityError):
        restore_backup(dest, str(tmp_path / "restored.db"))
    assert not (tmp_path / "restored.db").exists()


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name in ("mine", "other"):
        generate_keypair(tmp_path / f"{name}.key", tmp_path / f"{name}.key.pub")
        out[name] = tmp_path / f"{name}.key.pub"
    return out


def _reseal_data(path: Path) -> None:
    """The data rewritten and resealed as a forger can (size, SHA-256, digest); whatever
    signature the manifest had is left as it was."""
    manifest, data, name = _members(path)
    forged = data.replace(b"goal of run_one", b"goal of run_0ne")
    assert forged != data
    manifest["data"].update(sha256=hashlib.sha256(forged).hexdigest(), bytes=len(forged))
    body = {k: v for k, v in manifest.items() if k not in ("manifest_digest", "signature")}
    resealed: dict[str, Any] = {**seal_manifest(body), "signature": manifest.get("signature")}
    _repack(path, resealed, forged, name)


def test_a_signed_backup_verifies_with_its_public_key_and_restores(
    store: Storage, tmp_path: Path, keys: dict[str, Path]
) -> None:
    rt = Continuum(store)
    fill(rt)
    dest = tmp_path / "signed.backup"
    made = rt.backup(dest, sign=keys["mine"].with_suffix(""))
    assert made["signed_by"]

    checked = verify_backup(dest, public_key=keys["mine"])
    assert (checked["trusted"], checked["signature"]) == (True, "verified")
    assert verify_backup(dest)["signature"] == "not checked"  # named, not believed
    restored = restore_backup(dest, str(tmp_path / "restored.db"), public_key=keys["mine"])
    assert restored["trusted"] is True


@pytest.mark.parametrize("case", ["another key", "unsigned", "data resealed"])
def test_a_backup_not_signed_by_the_trusted_key_is_refused(
    store: Storage, tmp_path: Path, keys: dict[str, Path], case: str
) -> None:
    rt = Continuum(store)
    fill(rt)
    dest = tmp_path / "b.backup"
    rt.backup(dest, sign=None if case == "unsigned" else keys["mine"].with_suffix(""))
    if case == "data resealed":
        _reseal_data(dest)
    trusted = keys["other"] if case == "another key" else keys["mine"]

    with pytest.raises(ContinuumError) as e:
        verify_backup(dest, public_key=trusted)
    assert e.value.code == "integrity.backup_signature", e.value.message
    with pytest.raises(ContinuumError) as e2:
        restore_backup(dest, str(tmp_path / "restored.db"), public_key=trusted)
    assert e2.value.code == "integrity.backup_signature"
    assert not (tmp_path / "restored.db").exists()


def test_a_notification_rendered_by_another_version_still_verifies(
    sqlite_rt: Continuum, tmp_path: Path
) -> None:
    # Each continuum version words its notifications its own way, and a store keeps rows
    # older versions wrote: only what the event determines is compared.
    dest = tmp_path / "b.backup"
    sqlite_rt.backup(dest)
    _forge(dest, "UPDATE outbox SET body = json_set(body, '$.summary', 'worded otherwise')")
    assert b"worded otherwise" in _members(dest)[1]
    assert verify_backup(dest)["ok"]

"""Review fix: verify-backup and restore check the backup's store schema version first: an
unknown or newer one is refused with a clear error and nothing is created (both backends:
the SQLite copy form and the export form).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from continuum.cli.main import run as cli_run
from continuum.errors import UsageError
from continuum.ops.backup import restore_backup, seal_manifest, verify_backup
from continuum.runtime.facade import Continuum
from continuum.store import Storage
from continuum.store.schema import SCHEMA_VERSION
from tests.contract.test_backup import _members, _repack, fill


@pytest.fixture
def backup(store: Storage, tmp_path: Path) -> Path:
    rt = Continuum(store)
    fill(rt)
    dest = tmp_path / "b.backup"
    rt.backup(dest)
    return dest


def reseal(path: Path, schema: Any) -> None:
    """The manifest says another schema, its digest recomputed (the data untouched)."""
    manifest, data, name = _members(path)
    manifest["schema_version"] = schema
    _repack(path, seal_manifest(manifest), data, name)


def kind(path: Path) -> str:
    return str(_members(path)[0]["kind"])


def nothing_created(tmp_path: Path) -> bool:
    return not any(p.name.startswith((".restored", "restored")) for p in tmp_path.iterdir())


def test_a_backup_of_a_newer_schema_is_refused_before_anything_is_created(
    backup: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert verify_backup(backup)["ok"]  # the control: the untouched file passes
    reseal(backup, SCHEMA_VERSION + 1)
    with pytest.raises(UsageError) as e:
        verify_backup(backup)
    assert e.value.code == "store.schema_too_new" and e.value.hint
    with pytest.raises(UsageError) as e2:
        restore_backup(backup, str(tmp_path / "restored.db"))
    assert e2.value.code == "store.schema_too_new"
    assert nothing_created(tmp_path)
    capsys.readouterr()
    assert cli_run(["--db", str(tmp_path / "restored.db"), "--json", "restore", str(backup)]) == 1
    assert '"store.schema_too_new"' in capsys.readouterr().out
    assert nothing_created(tmp_path)


@pytest.mark.parametrize("schema", ["3", 0, -1, 2.5, "missing"])
def test_a_backup_with_an_unknown_schema_is_refused(
    backup: Path, tmp_path: Path, schema: Any
) -> None:
    reseal(backup, None if schema == "missing" else schema)
    if kind(backup) != "sqlite" and schema == "missing":
        # An export-form backup names no schema by design (the export format carries its
        # own version): no schema is its normal shape, and it restores.
        restore_backup(backup, str(tmp_path / "restored.db"))
        assert (tmp_path / "restored.db").exists()
        return
    with pytest.raises(UsageError) as e:
        restore_backup(backup, str(tmp_path / "restored.db"))
    assert e.value.code == "usage.backup_schema_unknown"
    assert nothing_created(tmp_path)

"""The long-lived-store commands (issue 17) through the CLI: exit codes, one JSON document,
progress on stderr, errors by code. The behaviour itself is proven in tests/contract and
tests/crash; this is the shell around it."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from continuum.store.schema import SCHEMA_VERSION
from tests.cli.conftest import Result

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stores"


def filled(cli: Callable[..., Result]) -> None:
    assert cli("start", "run_a", "--goal", "ops").code == 0
    for i in range(6):
        assert (
            cli("append", "run_a", "work_completed", "--payload", f'{{"item_id": "d{i}"}}').code
            == 0
        )


def test_backup_verify_backup_and_restore(cli: Callable[..., Result], tmp_path: Path) -> None:
    filled(cli)
    dest = tmp_path / "b.backup"

    r = cli("backup", str(dest), "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["ok"] and doc["kind"] == "sqlite" and doc["totals"]["events"] == 7
    assert "backup: copy" in r.err  # progress goes to stderr, stdout stays one document
    assert cli("backup", str(dest)).code == 1  # never over an existing file

    r = cli("verify-backup", str(dest), with_db=False)
    assert r.code == 0 and "every chain verified" in r.out

    target = tmp_path / "new.db"
    r = cli("--db", str(target), "restore", str(dest), "--json", with_db=False)
    assert r.code == 0, r.err
    assert r.json()["totals"]["runs"] == 1
    r = cli("--db", str(target), "restore", str(dest), with_db=False)
    assert r.code == 1 and "[usage.file_exists]" in r.err

    with open(dest, "r+b") as f:
        f.truncate(dest.stat().st_size // 2)
    r = cli("verify-backup", str(dest), "--json", with_db=False)
    assert r.code == 3
    assert r.json()["error"]["code"] == "integrity.backup_truncated"


def test_archive_verify_with_archive_and_replay_of_an_archived_sequence(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    filled(cli)
    archive = tmp_path / "old.jsonl"

    r = cli("archive", "run_a", "--before", "5", "--to", str(archive), "--json")
    assert r.code == 1 and r.json()["error"]["code"] == "usage.not_a_terminal"  # a person
    assert not archive.exists()
    r = cli("archive", "run_a", "--before", "5", "--to", str(archive), "--json", "--yes")
    assert r.code == 0, r.err
    assert (r.json()["through_sequence"], r.json()["events"]) == (4, 4)

    r = cli("verify", "run_a")
    assert r.code == 0 and "events 1..4 are archived and were not checked" in r.out
    r = cli("verify", "run_a", "--archive", str(archive), "--json")
    assert r.code == 0 and r.json()["reports"][0]["events_checked"] == 9
    r = cli("replay", "run_a", "--upto", "3", "--json")
    assert r.code == 2 and r.json()["error"]["code"] == "not_found.archived"
    assert "old.jsonl" in r.json()["error"]["message"]
    r = cli("events", "run_a", "--after", "4", "--json")
    assert r.code == 0 and r.json()["events"][0]["sequence"] == 5
    archive.write_text(archive.read_text().replace('"d1"', '"dX"'))
    r = cli("verify", "run_a", "--archive", str(archive), "--json")
    assert r.code == 3 and r.json()["error"]["code"] == "integrity.archive_tampered"
    r = cli("archive", "run_a", "--before", "99", "--to", str(tmp_path / "x.jsonl"), "--yes")
    assert r.code == 1 and "[usage.bad_sequence]" in r.err


def test_keygen_signed_anchor_and_verify(cli: Callable[..., Result], tmp_path: Path) -> None:
    filled(cli)
    key = tmp_path / "anchor.key"

    r = cli("keygen", str(key), "--json", with_db=False)
    assert r.code == 0
    assert key.stat().st_mode & 0o777 == 0o600
    assert Path(r.json()["public_key"]) == tmp_path / "anchor.key.pub"
    assert cli("keygen", str(key), with_db=False).code == 1

    r = cli("anchor", "run_a", "--sign", str(key))
    token = r.out.strip()
    assert r.code == 0 and token.startswith("continuum-anchor-1.")
    r = cli("verify", "run_a", "--expect-head", token, "--public-key", f"{key}.pub")
    assert r.code == 0
    other = tmp_path / "other.key"
    assert cli("keygen", str(other), with_db=False).code == 0
    r = cli("verify", "run_a", "--expect-head", token, "--public-key", f"{other}.pub", "--json")
    assert r.code == 3 and r.json()["error"]["code"] == "integrity.anchor_signature"
    r = cli("verify", "run_a", "--expect-head", token)
    assert r.code == 1 and "[usage.public_key_needed]" in r.err


def test_migrate_dry_run_then_migrate(cli: Callable[..., Result], db: str) -> None:
    shutil.copyfile(FIXTURES / "schema_v1.sqlite", db)
    before = Path(db).read_bytes()

    r = cli("migrate", "--dry-run", "--json")
    assert r.code == 0
    doc = r.json()
    assert (doc["current_version"], doc["target_version"], doc["migrated"]) == (
        1,
        SCHEMA_VERSION,
        False,
    )
    assert [s["version"] for s in doc["steps"]] == list(range(2, SCHEMA_VERSION + 1))
    assert Path(db).read_bytes() == before
    r = cli("migrate", "--dry-run")
    assert "CREATE INDEX actions_by_status" in r.out and "nothing was changed" in r.out

    r = cli("migrate", "--json")
    assert r.code == 0 and r.json()["migrated"] is True
    r = cli("migrate")
    assert r.code == 0 and "up to date" in r.out
    assert (
        cli("--db", str(Path(db).with_name("none.db")), "migrate", "--dry-run", with_db=False).code
        == 2
    )

"""Upgrades (issue 17): a store written by each released schema version opens with today's
code, migrated forward; `migrate --dry-run` says what would change and changes nothing.

The files are in tests/fixtures/stores/ (its README says how each was made: the code of a
released commit, run from an unpacked copy). Each test works on a copy.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import apsw
import pytest

from continuum.errors import NotFoundError, SchemaError
from continuum.runtime.facade import Continuum
from continuum.store.schema import MIGRATIONS, SCHEMA_VERSION
from continuum.store.upgrade import migration_plan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stores"
RELEASED = {1: "schema_v1.sqlite", 2: "schema_v2.sqlite"}


def copy_of(version: int, tmp_path: Path) -> Path:
    target = tmp_path / f"v{version}.db"
    shutil.copyfile(FIXTURES / RELEASED[version], target)
    return target


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_every_released_schema_has_a_fixture_file() -> None:
    # a new schema version is released with a file of the one before it
    assert set(RELEASED) == set(range(1, max(RELEASED) + 1))
    assert max(RELEASED) >= SCHEMA_VERSION - 1
    for name in RELEASED.values():
        assert (FIXTURES / name).is_file()


@pytest.mark.parametrize("version", sorted(RELEASED))
def test_dry_run_lists_what_would_change_and_changes_nothing(version: int, tmp_path: Path) -> None:
    db = copy_of(version, tmp_path)
    before = digest(db)

    plan = migration_plan(str(db))

    assert (plan.current_version, plan.target_version) == (version, SCHEMA_VERSION)
    assert [s.version for s in plan.steps] == list(range(version + 1, SCHEMA_VERSION + 1))
    for step in plan.steps:
        for statement in MIGRATIONS[step.version]:
            assert " ".join(statement.split()) in step.statements
    assert digest(db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [db.name]  # no -wal, no -shm


@pytest.mark.parametrize("version", sorted(RELEASED))
def test_an_old_store_opens_migrated_verifies_and_resumes(version: int, tmp_path: Path) -> None:
    db = copy_of(version, tmp_path)

    rt = Continuum.open(str(db), create=False)
    try:
        assert rt.store.schema_version() == SCHEMA_VERSION
        assert {r.run_id for r in rt.runs()} == {"fixture_run", "fixture_done"}
        for run in rt.runs():
            assert rt.verify(run.run_id).ok, run.run_id
        recovery = rt.resume("fixture_run")
        # the action left started by a process that exited is reported, never retried
        assert recovery.mode == "request_human"
        assert [a["action_key"] for a in recovery.uncertain_actions] == [
            "send_invoice:invoice:INV-3"
        ]
        done = rt.intercept(
            "fixture_run", "send_invoice", {"invoice": "INV-1"}, key="invoice:INV-1"
        )
        assert (done.proceed, str(done.status), done.external_id) == (False, "completed", "msg-1")
        assert rt.resume("fixture_done").mode == "not_resumable"
        rt.append("fixture_run", "work_completed", {"item_id": "doc-3"})
        assert rt.verify("fixture_run").ok
    finally:
        rt.close()
    assert migration_plan(str(db)).up_to_date


def test_a_store_newer_than_the_code_is_refused_by_the_plan_too(tmp_path: Path) -> None:
    db = copy_of(max(RELEASED), tmp_path)
    conn = apsw.Connection(str(db))
    conn.execute(
        "UPDATE continuum_meta SET value = ? WHERE key = 'schema_version'",
        (str(SCHEMA_VERSION + 1),),
    )
    conn.close()
    with pytest.raises(SchemaError) as e:
        migration_plan(str(db))
    assert e.value.code == "store.schema_too_new"
    with pytest.raises(NotFoundError):
        migration_plan(str(tmp_path / "missing.db"))


def test_a_postgres_store_of_schema_1_is_migrated_on_first_open(tmp_path: Path) -> None:
    """The PostgreSQL side: schema 1 as released (its statements), filled with the rows of
    the version-1 fixture, then opened by today's code."""
    import psycopg

    from continuum.store.pg_schema import PG_META_TABLE, PG_MIGRATIONS
    from tests.contract.conftest import postgres_backend

    source = apsw.Connection(str(copy_of(1, tmp_path)))  # a copy: never open a fixture
    tables = {
        t: source.execute(f"SELECT * FROM {t}").fetchall()
        for t in ("runs", "events", "actions", "checkpoints")
    }
    source.close()
    with postgres_backend(tmp_path) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE SCHEMA continuum")
            conn.execute(PG_META_TABLE)
            for statement in PG_MIGRATIONS[1]:
                conn.execute(statement)
            conn.execute("INSERT INTO continuum.meta VALUES ('schema_version', '1')")
            for table, rows in tables.items():
                columns = {
                    "actions": "(run_id, action_id, action_key, dedup_key, fallback_key,"
                    " status, record, lease_expires)"
                }.get(table, "")
                for row in rows:
                    marks = ",".join(["%s"] * len(row))
                    conn.execute(f"INSERT INTO continuum.{table} {columns} VALUES ({marks})", row)
        plan = migration_plan(url)
        assert (plan.current_version, len(plan.steps)) == (1, SCHEMA_VERSION - 1)
        rt = Continuum.open(url, create=False)
        try:
            assert rt.store.schema_version() == SCHEMA_VERSION
            for run in rt.runs():
                assert rt.verify(run.run_id).ok, run.run_id
            assert rt.resume("fixture_run").mode == "request_human"
        finally:
            rt.close()

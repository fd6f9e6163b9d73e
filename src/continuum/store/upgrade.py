"""Schema upgrades: what opening a store would change (``continuum migrate --dry-run``).

Opening a store migrates it forward, one transaction per version (``SQLiteStorage._migrate``,
``PostgresStorage._migrate``). ``migration_plan`` reads the store's schema version
without opening it as a store (nothing is created, migrated or written; SQLite may run
its own WAL recovery, as any reader does) and lists the statements each pending version
would run, in the order they would run, with the bookkeeping statements around them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from continuum.errors import NotFoundError, StoreError
from continuum.store.rows import schema_too_new
from continuum.store.schema import MIGRATIONS, SCHEMA_VERSION, SQLITE_APPLICATION_ID


class MigrationStep(BaseModel):
    model_config = ConfigDict(frozen=True)

    version: int  # the version this step brings the store to
    statements: list[str]


class MigrationPlan(BaseModel):
    """What migrating the store at ``store`` would do (nothing if ``steps`` is empty)."""

    model_config = ConfigDict(frozen=True)

    store: str
    backend: str
    current_version: int
    target_version: int
    steps: list[MigrationStep]

    @property
    def up_to_date(self) -> bool:
        return not self.steps


def _one_line(statement: str) -> str:
    return " ".join(statement.split())


def sqlite_steps(current: int) -> list[MigrationStep]:
    steps = []
    for version in range(current + 1, SCHEMA_VERSION + 1):
        statements = []
        if version == 1:
            statements += [
                f"PRAGMA application_id = {SQLITE_APPLICATION_ID}",
                "CREATE TABLE continuum_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            ]
        statements += [_one_line(s) for s in MIGRATIONS[version]]
        statements.append(
            "INSERT INTO continuum_meta (key, value) VALUES ('schema_version', "
            f"'{version}') ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        )
        steps.append(MigrationStep(version=version, statements=statements))
    return steps


def postgres_steps(current: int) -> list[MigrationStep]:
    from continuum.store.pg_schema import PG_META_TABLE, PG_MIGRATIONS, PG_SCHEMA

    steps = []
    for version in range(current + 1, SCHEMA_VERSION + 1):
        statements = []
        if version == 1:
            statements += [f"CREATE SCHEMA IF NOT EXISTS {PG_SCHEMA}", _one_line(PG_META_TABLE)]
        statements += [_one_line(s) for s in PG_MIGRATIONS[version]]
        statements.append(
            "INSERT INTO continuum.meta (key, value) VALUES ('schema_version', "
            f"'{version}') ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        )
        steps.append(MigrationStep(version=version, statements=statements))
    return steps


def _sqlite_version(path: Path) -> int:
    import apsw

    from continuum.store.sqlite_files import (
        check_sqlite_library,
        check_sqlite_path,
        translate_errors,
    )

    check_sqlite_library()
    check_sqlite_path(path, create=False)  # missing, a directory, a symlink, not SQLite: refused
    with translate_errors():
        conn = apsw.Connection(
            str(path), flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_NOFOLLOW
        )
        try:
            app_id = int(conn.execute("PRAGMA application_id").fetchall()[0][0] or 0)
            tables = {
                str(r[0])
                for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                ).fetchall()
            }
            if app_id != SQLITE_APPLICATION_ID and tables:
                raise StoreError(
                    f"{str(path)!r} is a SQLite database but not a continuum store",
                    code="store.foreign_database",
                    hint="point --db at a continuum store; this one was left untouched",
                )
            if "continuum_meta" not in tables:
                return 0
            rows = conn.execute(
                "SELECT value FROM continuum_meta WHERE key = 'schema_version'"
            ).fetchall()
            return int(str(rows[0][0])) if rows else 0
        finally:
            conn.close()


def _postgres_version(url: str) -> int:
    from continuum.store.pg_connection import close_quietly, connect, parse_url, translate
    from continuum.store.postgres import _read_version

    target = parse_url(url)
    pc = connect(target)
    try:
        import psycopg

        try:
            return _read_version(pc.conn)
        except psycopg.Error as e:
            raise translate(e, target) from e
    finally:
        close_quietly(pc)


def migration_plan(url: str) -> MigrationPlan:
    """The plan for the store at ``url``; changes nothing. A missing store is
    ``not_found.store``; a store newer than this code is ``store.schema_too_new``."""
    from continuum.store import is_postgres_url, redact_url, sqlite_path_from_url

    if is_postgres_url(url):
        current, backend = _postgres_version(url), "postgres"
        if current == 0:
            raise NotFoundError(
                f"no continuum store in {redact_url(url)}",
                code="not_found.store",
                hint="nothing to migrate: a new store is created at the current "
                "version by `continuum init`",
            )
    else:
        current, backend = _sqlite_version(sqlite_path_from_url(url)), "sqlite"
    if current > SCHEMA_VERSION:
        raise schema_too_new(current)
    steps = postgres_steps(current) if backend == "postgres" else sqlite_steps(current)
    return MigrationPlan(
        store=redact_url(url),
        backend=backend,
        current_version=current,
        target_version=SCHEMA_VERSION,
        steps=steps,
    )


def describe(plan: MigrationPlan) -> dict[str, Any]:
    return {**plan.model_dump(mode="json"), "up_to_date": plan.up_to_date}

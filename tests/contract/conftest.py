"""Backends for the store contract suite (house style 8: one suite, every backend).

Each backend is one entry in ``BACKENDS``: a context manager that yields the URL of a
fresh, empty database and removes it afterwards. ``store_factory`` opens handles on that
URL through ``open_store``, exactly as the CLI and the MCP server do, and closes them all
at teardown.

PostgreSQL is the second entry: the server named by ``CONTINUUM_TEST_PG_DSN`` (the
Makefile and ``.ci/run`` export it). A test run creates one database of its own there on
first use and drops it at the end; each test gets it without a continuum schema, i.e. a
fresh, empty store (``pg_support.py`` has the helpers, and the private clusters the crash
tests kill).

A backend that cannot be provided must call ``backend_unavailable``: it skips on a
developer machine but FAILS when ``CI`` is set or the backend is named in
``CONTINUUM_REQUIRE_BACKENDS``, so CI can never go green on a backend it did not run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from continuum.store import Storage, open_store


@contextmanager
def sqlite_backend(tmp_path: Path) -> Iterator[str]:
    yield str(tmp_path / "contract.db")


class _SessionDatabase:
    """One database on the shared server per test run, created on first use, dropped at
    the end; each test gets it with no continuum schema in it (a fresh, empty store)."""

    url: str | None = None
    name: str | None = None


@contextmanager
def postgres_backend(tmp_path: Path) -> Iterator[str]:
    from tests.contract import pg_support

    if _SessionDatabase.url is None:
        try:
            dsn = pg_support.admin_dsn()
        except pg_support.PostgresUnavailable as e:
            backend_unavailable("postgres", str(e))
        _SessionDatabase.name = pg_support.create_database(dsn, "continuum_contract")
        _SessionDatabase.url = pg_support.url_for(dsn, _SessionDatabase.name)
    pg_support.reset_schema(_SessionDatabase.url)
    try:
        yield _SessionDatabase.url
    finally:
        pg_support.reset_schema(_SessionDatabase.url)


@pytest.fixture(scope="session", autouse=True)
def _drop_the_session_database() -> Iterator[None]:
    yield
    if _SessionDatabase.name is not None:
        from tests.contract import pg_support

        pg_support.drop_database(os.environ[pg_support.DSN_ENV], _SessionDatabase.name)


BACKENDS: dict[str, Callable[[Path], AbstractContextManager[str]]] = {
    "sqlite": sqlite_backend,
    "postgres": postgres_backend,
}


def backend_unavailable(backend: str, why: str) -> None:
    """Skip locally, fail in CI: a contract backend is never skipped silently there."""
    required = os.environ.get("CONTINUUM_REQUIRE_BACKENDS", "").replace(",", " ").split()
    if os.environ.get("CI") or backend in required:
        pytest.fail(f"store backend {backend!r} is required here but unavailable: {why}")
    pytest.skip(f"store backend {backend!r} unavailable: {why}")


class StoreFactory:
    """Opens handles on one fresh database of one backend."""

    def __init__(self, backend: str, url: str) -> None:
        self.backend = backend
        self.url = url
        self._opened: list[Storage] = []

    def open(self) -> Storage:
        """A new handle on the same database (as a new process would get)."""
        store = open_store(self.url)
        self._opened.append(store)
        return store

    def corrupt(self, statement: str, params: tuple[object, ...] = ()) -> None:
        """Damage the database behind the store's back, in the backend's own SQL.

        ``statement`` names the tables plainly (``events``, ``runs``, ``actions``,
        ``checkpoints``) and uses ``?`` placeholders; each backend gets it in its dialect.
        """
        if self.backend == "sqlite":
            import apsw

            conn = apsw.Connection(self.url)
            try:
                conn.execute(statement, params)
            finally:
                conn.close()
            return
        import re

        import psycopg

        pg = re.sub(r"\b(events|runs|actions|checkpoints)\b", r"continuum.\1", statement)
        with psycopg.connect(self.url, autocommit=True) as pg_conn:
            pg_conn.execute(pg.replace("?", "%s"), params)

    def close_all(self) -> None:
        for store in self._opened:
            store.close()


@pytest.fixture(params=sorted(BACKENDS))
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    backend: str = request.param
    with BACKENDS[backend](tmp_path) as url:
        factory = StoreFactory(backend, url)
        try:
            yield factory
        finally:
            factory.close_all()


@pytest.fixture
def store(store_factory: StoreFactory) -> Storage:
    return store_factory.open()


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    """The URL of a fresh, empty PostgreSQL store (the contract suite's session database)."""
    with postgres_backend(tmp_path) as url:
        yield url

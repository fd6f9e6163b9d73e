"""Backends for the store contract suite (house style 8: one suite, every backend).

Each backend is one entry in ``BACKENDS``: a context manager that yields the URL of a
fresh, empty database and removes it afterwards. ``store_factory`` opens handles on that
URL through ``open_store``, exactly as the CLI and the MCP server do, and closes them all
at teardown.

Adding PostgreSQL is one function and one entry::

    @contextmanager
    def postgres_backend(tmp_path: Path) -> Iterator[str]:
        # create a fresh database on the private test cluster, yield its URL, drop it
        ...

    BACKENDS = {"sqlite": sqlite_backend, "postgres": postgres_backend}

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


BACKENDS: dict[str, Callable[[Path], AbstractContextManager[str]]] = {
    "sqlite": sqlite_backend,
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

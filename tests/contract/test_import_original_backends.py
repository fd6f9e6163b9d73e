"""`import --from-original` writes through the store's import path: the same runs, heads and
verdicts on every backend (SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

from continuum.ops.migrate_original import import_original
from continuum.runtime.facade import Continuum
from tests.cli.original_format import build
from tests.contract.conftest import StoreFactory


def test_an_original_store_imports_alike_on_every_backend(
    store_factory: StoreFactory, tmp_path: Path
) -> None:
    path = tmp_path / "original.db"
    build(path).close()
    store = store_factory.open()

    report = import_original(str(path), lambda: store)

    expected = import_original(str(path), lambda: None, dry_run=True)  # the heads it computes
    assert [r.head for r in report.runs] == [r.head for r in expected.runs]
    rt = Continuum(store_factory.open())  # as another process sees it
    for run in report.runs:
        info = rt.store.get_run(run.run_id)
        assert f"{info.head_sequence}:{info.head_hash}" == run.head
        assert rt.verify(run.run_id).ok
    assert rt.resume("run_a").mode == "request_human"
    assert rt.full_state("run_a").unknown_event_types == 3

"""Export and import (contract §3: a chain preserved exactly, re-verified on arrival), into
every backend: the destination is the contract suite's store, the source a SQLite file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from continuum.errors import IntegrityError, UsageError
from continuum.ops.transfer import import_runs
from continuum.runtime.facade import Continuum
from continuum.store import Storage, open_store
from tests.contract.transfer_support import export_file, fill, snapshot


@pytest.fixture
def source(tmp_path: Path) -> str:
    url = str(tmp_path / "source.db")
    with closing(open_store(url)) as store:
        fill(store)
    return url


@pytest.fixture
def exported(source: str, tmp_path: Path) -> Path:
    return export_file(source, tmp_path / "export.jsonl")


def lines_of(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def rewrite(path: Path, edit: Callable[[list[dict[str, object]]], list[dict[str, object]]]) -> Path:
    out = path.with_name("edited.jsonl")
    out.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in edit(lines_of(path))),
        encoding="utf-8",
    )
    return out


def import_file(store: Storage, path: Path, public_key: Path | None = None) -> None:
    with open(path, encoding="utf-8") as f:
        import_runs(store, f, public_key=public_key)


@pytest.fixture
def signing_key(tmp_path: Path) -> Path:
    from continuum.ops.signing import generate_keypair

    generate_keypair(tmp_path / "export.key", tmp_path / "export.key.pub")
    return tmp_path / "export.key"


def test_an_imported_store_holds_the_same_runs_events_actions_and_checkpoints(
    source: str, tmp_path: Path, store: Storage, signing_key: Path
) -> None:
    # Signed, and trusted by the importer: nothing is added (unsigned, every run holding a
    # trusted origin's events gets an import marker: tests/contract/test_import_trust.py).
    signed = export_file(source, tmp_path / "signed.jsonl", sign=signing_key)
    import_file(store, signed, public_key=signing_key.with_suffix(".key.pub"))

    with closing(open_store(source)) as original:
        for run_id in ("run_rich", "run_done"):
            assert snapshot(store, run_id) == snapshot(original, run_id)
            assert Continuum(store).verify(run_id).ok  # chain, head, index against the fold
        assert [r.run_id for r in store.list_runs()] == [r.run_id for r in original.list_runs()]
        assert (
            Continuum(store).resume("run_rich").mode == Continuum(original).resume("run_rich").mode
        )
    assert Continuum(store).state("run_rich").progress.completed == 2


def test_an_imported_run_carries_on_from_its_head(exported: Path, store: Storage) -> None:
    import_file(store, exported)

    rt = Continuum(store)
    again = rt.intercept("run_rich", "send_invoice", {"invoice": "INV-1"}, key="invoice:INV-1")
    event = rt.append("run_rich", "progress_recorded", {"completed": 3})

    assert (again.proceed, again.status) == (False, "completed")
    assert event.sequence == store.get_run("run_rich").head_sequence
    assert rt.verify("run_rich").ok


def test_a_single_run_can_be_exported_and_imported(
    source: str, tmp_path: Path, store: Storage
) -> None:
    import_file(store, export_file(source, tmp_path / "one.jsonl", ["run_done"]))
    assert [r.run_id for r in store.list_runs()] == ["run_done"]


def _edit_event(
    sequence: int, field: str, value: object
) -> Callable[[list[dict[str, object]]], list[dict[str, object]]]:
    def edit(records: list[dict[str, object]]) -> list[dict[str, object]]:
        for r in records:
            event = r.get("event")
            if (
                isinstance(event, dict)
                and event["run_id"] == "run_rich"
                and event["sequence"] == sequence
            ):
                event[field] = value
        return records

    return edit


def _drop_event(sequence: int) -> Callable[[list[dict[str, object]]], list[dict[str, object]]]:
    def edit(records: list[dict[str, object]]) -> list[dict[str, object]]:
        return [
            r
            for r in records
            if not (
                isinstance(e := r.get("event"), dict)
                and e["run_id"] == "run_rich"
                and e["sequence"] == sequence
            )
        ]

    return edit


def _edit_checkpoint(records: list[dict[str, object]]) -> list[dict[str, object]]:
    for r in records:
        cp = r.get("checkpoint")
        if isinstance(cp, dict):
            state = json.loads(str(cp["state_json"]))
            state["progress"]["completed"] = 99
            cp["state_json"] = json.dumps(state)
    return records


def _edit_status(records: list[dict[str, object]]) -> list[dict[str, object]]:
    for r in records:
        run = r.get("run")
        if isinstance(run, dict) and run["run_id"] == "run_done":
            run["status"] = "active"
    return records


TAMPERS: dict[str, Callable[[list[dict[str, object]]], list[dict[str, object]]]] = {
    "edited payload": _edit_event(2, "payload", {"completed": 4}),
    "forged origin": _edit_event(3, "source", "human"),
    "dropped event": _drop_event(4),
    "edited checkpoint": _edit_checkpoint,
    "edited run status": _edit_status,
    "cut short": lambda records: records[:-1],
    "end record disagrees": lambda records: [*records[:-1], {**records[-1], "events": 1}],
}


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_a_tampered_export_is_refused_and_nothing_is_written(
    exported: Path, store: Storage, tamper: str
) -> None:
    edited = rewrite(exported, TAMPERS[tamper])

    with pytest.raises(IntegrityError) as e:
        import_file(store, edited)

    assert e.value.code == "integrity.import_refused"
    assert store.list_runs() == []


def test_an_import_with_a_run_that_already_exists_writes_nothing(
    source: str, tmp_path: Path, store_factory: Any
) -> None:
    store = store_factory.open()
    import_file(store, export_file(source, tmp_path / "done.jsonl", ["run_done"]))
    before = snapshot(store, "run_done")

    with pytest.raises(UsageError) as e:
        import_file(store, export_file(source, tmp_path / "both.jsonl", ["run_rich", "run_done"]))

    assert e.value.code == "usage.run_exists"
    assert [r.run_id for r in store.list_runs()] == ["run_done"]  # run_rich was not written
    assert snapshot(store, "run_done") == before


@pytest.mark.parametrize("content", ["", "not json\n", '{"kind":"header","format":"other"}\n'])
def test_a_file_that_is_not_an_export_is_refused(
    tmp_path: Path, store: Storage, content: str
) -> None:
    path = tmp_path / "bogus.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises((UsageError, IntegrityError)):
        import_file(store, path)
    assert store.list_runs() == []

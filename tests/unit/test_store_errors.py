"""The store boundary's one mapping of SQLite errors (``translated_error``), through the
context manager every read enters (``translate_errors``) and through a write's own
transaction (``SQLiteStorage.write``): each apsw error becomes the continuum error a
caller is told about, raised from it; a connection in doubt is dropped; anything else
passes through unchanged."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from continuum.errors import (
    DiskFullError,
    ForkRejectedError,
    IntegrityError,
    StoreBusyError,
    StoreError,
    StoreIOError,
)
from continuum.eventlog.events import EventType
from continuum.store.models import Run
from continuum.store.sqlite import SQLiteStorage
from continuum.store.sqlite_files import translate_errors, translated_error
from continuum.types import Origin

# (the apsw error, the continuum error, its code, whether the connection is dropped)
CASES = [
    (apsw.ConstraintError, ForkRejectedError, "integrity.fork_rejected", False),
    (apsw.BusyError, StoreBusyError, "store.busy", False),
    (apsw.LockedError, StoreBusyError, "store.busy", False),
    (apsw.FullError, DiskFullError, "store.disk_full", True),
    (apsw.CorruptError, IntegrityError, "integrity.database_corrupt", True),
    (apsw.NotADBError, IntegrityError, "integrity.database_corrupt", True),
    (apsw.ReadOnlyError, StoreError, "store.read_only", False),
    (apsw.IOError, StoreIOError, "store.io", True),
    (apsw.SQLError, StoreError, "store.unusable", False),
    (apsw.MisuseError, StoreError, "store.unusable", True),
]


@pytest.mark.parametrize(("raised", "expected", "code", "dropped"), CASES)
def test_each_sqlite_error_becomes_its_continuum_error_raised_from_it(
    raised: type[apsw.Error], expected: type[Exception], code: str, dropped: bool
) -> None:
    discarded: list[bool] = []
    original = raised("what SQLite said")
    with pytest.raises(expected) as caught, translate_errors(lambda: discarded.append(True)):
        raise original
    assert type(caught.value) is expected
    assert caught.value.code == code  # type: ignore[attr-defined]
    assert caught.value.__cause__ is original
    assert discarded == ([True] if dropped else [])
    mapped = translated_error(raised("again"))  # no connection to drop: still mapped
    assert type(mapped) is expected


def test_a_stored_text_that_is_not_utf8_is_a_damaged_file() -> None:
    try:
        b"\xff".decode("utf-8")
    except UnicodeDecodeError as e:
        mapped = translated_error(e)
    assert isinstance(mapped, IntegrityError)
    assert mapped.code == "integrity.database_corrupt"


@pytest.mark.parametrize("error", [ValueError("x"), KeyboardInterrupt(), StoreError("mine")])
def test_anything_else_passes_through_unchanged(error: BaseException) -> None:
    assert translated_error(error) is None
    with pytest.raises(type(error)) as caught, translate_errors(lambda: pytest.fail("no drop")):
        raise error
    assert caught.value is error


def test_a_clean_exit_changes_nothing() -> None:
    with translate_errors(lambda: pytest.fail("nothing to drop")):
        value = 1
    assert value == 1


def test_an_error_inside_a_write_is_translated_and_nothing_of_the_write_stays(
    tmp_path: Path,
) -> None:
    store = SQLiteStorage(tmp_path / "s.db")
    store.create_run(Run(run_id="r"))
    store.append_event("r", EventType.WORK_COMPLETED, {"doc": 1})
    head = store.get_head("r")
    with pytest.raises(ForkRejectedError) as caught, store.write("r") as tx:
        tx.append_raw(EventType.WORK_COMPLETED, {"doc": 2}, source=Origin.LLM)
        # a second event at a sequence already taken: the primary key refuses it
        tx._head = tx._head._replace(head_sequence=0, head_hash=None)
        tx.append_raw(EventType.WORK_COMPLETED, {"doc": 3}, source=Origin.LLM)
    assert isinstance(caught.value.__cause__, apsw.ConstraintError)
    assert store.get_head("r") == head  # rolled back as a whole
    assert [e.payload for e in store.iter_events("r")] == [{"doc": 1}]
    store.append_event("r", EventType.WORK_COMPLETED, {"doc": 4})  # the store still works
    assert store.get_head("r").head_sequence == head.head_sequence + 1
    store.close()

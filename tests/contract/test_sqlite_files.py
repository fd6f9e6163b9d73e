"""The SQLite backend's files: durability settings, refusals, migrations, tampering (contract §2-4).

Tampering goes through a raw apsw connection (the same SQLite library the store uses, so
the file is never opened through two different libraries in one process).
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from continuum.errors import (
    ContinuumError,
    ForkRejectedError,
    IntegrityError,
    NotFoundError,
    SchemaError,
    StoreError,
    UnsafeLibraryError,
    UsageError,
)
from continuum.eventlog.canonical import canonical_json
from continuum.eventlog.event_model import Event
from continuum.eventlog.events import EventType
from continuum.runtime.facade import Continuum
from continuum.store import Run, SQLiteStorage, open_store
from continuum.store.schema import MIGRATIONS, SCHEMA_VERSION, SQLITE_APPLICATION_ID
from continuum.store.sqlite import check_sqlite_library, sqlite_version_is_affected

RUN = "run_files"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
def filled(db: Path) -> Iterator[Path]:
    """A closed store at ``db`` whose run has five events."""
    with SQLiteStorage(db) as store:
        store.create_run(Run(run_id=RUN))
        for i in range(5):
            store.append_event(RUN, EventType.WORK_COMPLETED, {"doc": i})
    yield db


def raw_execute(path: Path, *statements: str, params: tuple[Any, ...] = ()) -> list[Any]:
    conn = apsw.Connection(str(path))
    try:
        out: list[Any] = []
        for statement in statements:
            out = conn.execute(statement, params).fetchall()
        return out
    finally:
        conn.close()


def dir_state(directory: Path) -> dict[str, Any]:
    """Names, kinds and regular files' bytes: what a refused open must not change."""
    out: dict[str, Any] = {}
    for p in sorted(directory.iterdir()):
        mode = os.lstat(p).st_mode
        out[p.name] = p.read_bytes() if stat.S_ISREG(mode) else stat.S_IFMT(mode)
    return out


def refuse(url: str, error: type[ContinuumError], code: str) -> ContinuumError:
    with pytest.raises(error) as e:
        open_store(url)
    assert e.value.code == code
    return e.value


# -- durability settings ---------------------------------------------------------------------


def test_the_store_file_is_in_wal_mode_after_close(filled: Path) -> None:
    assert raw_execute(filled, "PRAGMA journal_mode")[0][0].lower() == "wal"
    assert raw_execute(filled, "PRAGMA application_id")[0][0] == SQLITE_APPLICATION_ID


def test_the_store_connection_uses_synchronous_full_and_a_busy_timeout(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[apsw.Connection] = []
    monkeypatch.setattr(apsw, "connection_hooks", [opened.append])

    with SQLiteStorage(db) as store:
        store.create_run(Run(run_id=RUN))
        assert len(opened) == 1
        conn = opened[0]
        assert conn.execute("PRAGMA synchronous").fetchall()[0][0] == 2  # FULL
        journal_mode = conn.execute("PRAGMA journal_mode").fetchall()[0][0]
        assert isinstance(journal_mode, str) and journal_mode.lower() == "wal"
        busy_timeout = conn.execute("PRAGMA busy_timeout").fetchall()[0][0]
        assert isinstance(busy_timeout, int) and busy_timeout > 0


def test_open_and_close_never_remove_a_wal_file_another_connection_uses(filled: Path) -> None:
    wal, shm = Path(f"{filled}-wal"), Path(f"{filled}-shm")
    other = apsw.Connection(str(filled))
    try:
        other.execute("SELECT count(*) FROM events").fetchall()  # joins the WAL
        assert wal.exists() and shm.exists()

        store = open_store(str(filled))
        store.append_event(RUN, EventType.WORK_COMPLETED, {"doc": 5})
        store.close()

        assert wal.exists() and shm.exists()
        assert other.execute("SELECT count(*) FROM events").fetchall()[0][0] == 6
    finally:
        other.close()


# -- URLs and paths ---------------------------------------------------------------------------


def test_a_sqlite_url_with_an_absolute_path_opens_that_file(tmp_path: Path) -> None:
    path = tmp_path / "via_url.db"
    url = f"sqlite://{path}"  # sqlite:///abs/path.db: three slashes, then the path
    assert url.startswith("sqlite:///") and not url.startswith("sqlite:////")
    store = open_store(url)
    try:
        store.create_run(Run(run_id=RUN))
        assert store.url == url
    finally:
        store.close()
    assert path.is_file()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm"))) == [
        "via_url.db"
    ]
    again = open_store(store.url)  # the URL a store reports opens the same store
    try:
        assert again.get_run(RUN).run_id == RUN
    finally:
        again.close()


def test_a_relative_path_opens_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    open_store("rel.db").close()
    assert (tmp_path / "rel.db").is_file()


@pytest.mark.parametrize(
    "url",
    [
        ":memory:",
        "file:x.db?mode=memory",
        "file:x.db",
        "sqlite://relative.db",
        "sqlite:///",
        "sqlite:x.db",
        "sqlite:///x.db?mode=memory",
        "http://example.com/x.db",
        "mysql://user@host/db",
        "",
        "   ",
        "x\x00.db",
        "-x.db",
        "--db",
    ],
)
def test_a_malformed_or_unsupported_url_is_refused_without_creating_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.chdir(tmp_path)

    refuse(url, UsageError, "store.bad_url")

    assert list(tmp_path.iterdir()) == []


def test_a_missing_directory_is_refused_and_not_created(tmp_path: Path) -> None:
    refuse(str(tmp_path / "nope" / "x.db"), StoreError, "store.missing_directory")
    refuse(f"sqlite:///{tmp_path}/nope/x.db", StoreError, "store.missing_directory")
    assert list(tmp_path.iterdir()) == []


def test_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "d.db").mkdir()
    before = dir_state(tmp_path)

    refuse(str(tmp_path / "d.db"), StoreError, "store.is_directory")
    refuse(str(tmp_path), StoreError, "store.is_directory")

    assert dir_state(tmp_path) == before
    assert list((tmp_path / "d.db").iterdir()) == []


def test_a_text_file_named_db_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    text = tmp_path / "x.db"
    text.write_bytes(b"just some notes\nnot a database\n")
    before = dir_state(tmp_path)

    refuse(str(text), StoreError, "store.not_a_database")

    assert dir_state(tmp_path) == before


def test_a_foreign_sqlite_database_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    foreign = tmp_path / "app.db"
    raw_execute(
        foreign,
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)",
        "INSERT INTO customers (name) VALUES ('ada')",
    )
    before = dir_state(tmp_path)

    refuse(str(foreign), StoreError, "store.foreign_database")

    assert dir_state(tmp_path) == before
    assert raw_execute(foreign, "PRAGMA journal_mode")[0][0].lower() == "delete"


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.db"
    os.mkfifo(fifo)
    outcome: dict[str, BaseException | None] = {}

    def attempt() -> None:
        try:
            open_store(str(fifo)).close()
            outcome["error"] = None
        except BaseException as e:  # handed to the test thread below
            outcome["error"] = e

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(timeout=20)
    if worker.is_alive():
        # Unblock a reader stuck in open()/read() so the thread can end, then fail.
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        worker.join(timeout=20)
        pytest.fail("open_store blocked on a FIFO")
    error = outcome["error"]
    assert isinstance(error, StoreError)
    assert error.code == "store.not_regular_file"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["pipe.db"]


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_a_device_is_refused(device: str) -> None:
    if not os.path.exists(device):
        pytest.skip(f"{device} does not exist here")
    refuse(device, StoreError, "store.not_regular_file")


def test_open_without_create_on_a_missing_file_is_not_found_and_creates_nothing(
    tmp_path: Path,
) -> None:
    with pytest.raises(NotFoundError) as e:
        open_store(str(tmp_path / "missing.db"), create=False)
    assert e.value.code == "not_found.store"
    assert list(tmp_path.iterdir()) == []


def test_open_without_create_opens_an_existing_store(filled: Path) -> None:
    store = open_store(str(filled), create=False)
    try:
        assert store.get_run(RUN).head_sequence == 5
    finally:
        store.close()


def test_an_empty_file_becomes_a_new_store(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    with SQLiteStorage(empty) as store:
        assert store.schema_version() == SCHEMA_VERSION
        assert store.list_runs() == []


# -- the library (F8) -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "affected"),
    [
        ("3.6.23", False),
        ("3.7.0", True),
        ("3.40.1", True),
        ("3.44.5", True),
        ("3.44.6", False),
        ("3.45.0", True),
        ("3.50.6", True),
        ("3.50.7", False),
        ("3.51.0", True),
        ("3.51.2", True),
        ("3.51.3", False),
        ("3.54.1", False),
        ("4.0.0", False),
    ],
)
def test_sqlite_versions_in_the_wal_reset_range_are_affected(version: str, affected: bool) -> None:
    assert sqlite_version_is_affected(version) is affected


def test_an_affected_sqlite_library_is_refused() -> None:
    with pytest.raises(UnsafeLibraryError) as e:
        check_sqlite_library("3.40.1")
    assert e.value.code == "store.unsafe_sqlite"
    assert e.value.fields["version"] == "3.40.1"
    check_sqlite_library("3.51.3")
    check_sqlite_library()  # the bundled library of this build is a fixed one


def test_opening_a_store_on_an_affected_library_is_refused_before_touching_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(apsw, "sqlite_lib_version", lambda: "3.40.1")

    with pytest.raises(UnsafeLibraryError):
        open_store(str(tmp_path / "x.db"))

    assert list(tmp_path.iterdir()) == []


# -- schema versions ---------------------------------------------------------------------------


def test_a_store_with_a_newer_schema_is_refused(filled: Path) -> None:
    raw_execute(
        filled,
        "UPDATE continuum_meta SET value = ? WHERE key = 'schema_version'",
        params=(str(SCHEMA_VERSION + 1),),
    )

    error = refuse(str(filled), SchemaError, "store.schema_too_new")

    assert isinstance(error, StoreError)
    assert raw_execute(filled, "SELECT value FROM continuum_meta")[0][0] == str(SCHEMA_VERSION + 1)


def test_a_sqlite_file_without_a_schema_migrates_to_the_current_version(tmp_path: Path) -> None:
    bare = tmp_path / "bare.db"
    raw_execute(bare, "CREATE TABLE scratch (x)", "DROP TABLE scratch")
    assert bare.read_bytes().startswith(b"SQLite format 3\x00")

    with SQLiteStorage(bare) as store:
        assert store.schema_version() == SCHEMA_VERSION
        store.create_run(Run(run_id=RUN))
    assert raw_execute(bare, "PRAGMA application_id")[0][0] == SQLITE_APPLICATION_ID


@pytest.fixture
def next_version(monkeypatch: pytest.MonkeyPatch) -> Callable[[list[str]], int]:
    """Pretend the code knows one more schema version, with the given migration."""

    def install(statements: list[str]) -> int:
        target = SCHEMA_VERSION + 1
        monkeypatch.setattr("continuum.store.sqlite.SCHEMA_VERSION", target)
        monkeypatch.setitem(MIGRATIONS, target, statements)
        return target

    return install


def test_an_older_schema_migrates_forward_and_keeps_its_data(
    filled: Path, next_version: Callable[[list[str]], int]
) -> None:
    target = next_version(
        [
            "CREATE TABLE annotations (run_id TEXT, note TEXT)",
            "INSERT INTO annotations VALUES ('x', 'migrated')",
        ]
    )

    with SQLiteStorage(filled) as store:
        assert store.schema_version() == target
        assert store.verify_events(RUN).ok
        assert len(store.read_events(RUN)) == 5
    assert raw_execute(filled, "SELECT note FROM annotations") == [("migrated",)]


def test_a_failing_migration_is_rolled_back_as_a_whole(
    filled: Path, next_version: Callable[[list[str]], int]
) -> None:
    next_version(["CREATE TABLE annotations (run_id TEXT, note TEXT)", "THIS IS NOT SQL"])

    with pytest.raises(StoreError):
        SQLiteStorage(filled)

    tables = {
        r[0] for r in raw_execute(filled, "SELECT name FROM sqlite_master WHERE type='table'")
    }
    assert "annotations" not in tables
    assert raw_execute(filled, "SELECT value FROM continuum_meta")[0][0] == str(SCHEMA_VERSION)


# -- tampering and damage (F13) ----------------------------------------------------------------


def reseal(path: Path, sequence: int, payload: dict[str, Any]) -> None:
    """Edit one event and recompute its own hash, as a careful forger would."""
    row = raw_execute(
        path,
        "SELECT run_id, sequence, event_id, type, timestamp, causer_event_id,"
        " source, prev_hash FROM events WHERE sequence = ?",
        params=(sequence,),
    )[0]
    run_id, seq, event_id, type_, ts, causer, source, prev = row
    event = Event(
        event_id=event_id,
        run_id=run_id,
        sequence=seq,
        type=type_,
        timestamp=ts,
        payload=payload,
        causer_event_id=causer,
        source=source,
        prev_hash=prev,
        hash="",
    )
    raw_execute(
        path,
        "UPDATE events SET payload = ?, hash = ? WHERE sequence = ?",
        params=(canonical_json(payload), event.computed_hash(), sequence),
    )


TAMPERS: dict[str, tuple[list[str], int, str]] = {
    "edited payload": (
        ["UPDATE events SET payload = '{\"doc\":999}' WHERE sequence = 3"],
        3,
        "hash_mismatch",
    ),
    "edited type": (
        ["UPDATE events SET type = 'run_aborted' WHERE sequence = 3"],
        3,
        "hash_mismatch",
    ),
    "forged origin": (
        ["UPDATE events SET source = 'human' WHERE sequence = 2"],
        2,
        "hash_mismatch",
    ),
    "cut link": (["UPDATE events SET prev_hash = NULL WHERE sequence = 4"], 4, "hash_mismatch"),
    "undecodable payload": (
        ["UPDATE events SET payload = 'not json' WHERE sequence = 3"],
        3,
        "malformed",
    ),
    "deleted middle row": (["DELETE FROM events WHERE sequence = 3"], 3, "sequence_gap"),
    "swapped payloads": (
        [
            "UPDATE events SET payload = CASE sequence WHEN 2 THEN '{\"doc\":2}'"
            " ELSE '{\"doc\":1}' END WHERE sequence IN (2, 3)"
        ],
        2,
        "hash_mismatch",
    ),
}


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_reading_a_tampered_row_raises_an_integrity_error_naming_run_and_sequence(
    filled: Path, tamper: str
) -> None:
    statements, sequence, kind = TAMPERS[tamper]
    raw_execute(filled, *statements)

    with SQLiteStorage(filled) as store:
        with pytest.raises(IntegrityError) as e:
            store.read_events(RUN)
        assert e.value.code == f"integrity.{kind}"
        assert e.value.fields["run_id"] == RUN
        assert e.value.fields["sequence"] == sequence

        report = store.verify_events(RUN)
        assert not report.ok
        first = report.violations[0]
        assert (first.sequence, str(first.kind)) == (sequence, kind)
        assert report.trusted_through == sequence - 1


def test_an_edited_and_resealed_row_breaks_the_next_link(filled: Path) -> None:
    reseal(filled, 3, {"doc": 999})

    with SQLiteStorage(filled) as store:
        with pytest.raises(IntegrityError) as e:
            store.read_events(RUN)
        assert e.value.code == "integrity.broken_link"
        assert e.value.fields["sequence"] == 4
        assert store.read_events(RUN, after=4)[0].sequence == 5  # later events still read


def test_a_truncated_tail_is_detected_against_the_head(filled: Path) -> None:
    raw_execute(filled, "DELETE FROM events WHERE sequence = 5")

    with SQLiteStorage(filled) as store:
        with pytest.raises(IntegrityError) as e:
            store.read_events(RUN)
        assert e.value.code == "integrity.truncated"
        assert (e.value.fields["run_id"], e.value.fields["sequence"]) == (RUN, 5)

        report = store.verify_events(RUN)
        assert [(v.sequence, str(v.kind)) for v in report.violations] == [(5, "truncated")]
        assert report.trusted_through == 4


def test_a_clean_truncation_with_a_rewound_head_is_caught_by_the_anchor(filled: Path) -> None:
    with SQLiteStorage(filled) as store:
        anchor = Continuum(store).anchor(RUN)["anchor"]
        fourth = store.event_hash_at(RUN, 4)
    raw_execute(filled, "DELETE FROM events WHERE sequence = 5")
    raw_execute(filled, "UPDATE runs SET head_sequence = 4, head_hash = ?", params=(fourth,))

    with SQLiteStorage(filled) as store:
        assert store.verify_events(RUN).ok  # the log alone cannot tell
        report = Continuum(store).verify(RUN, expect_head=anchor)
        assert not report.ok
        assert [(v.sequence, str(v.kind)) for v in report.violations] == [(5, "truncated")]


def test_a_writer_with_a_stale_head_is_rejected_by_the_primary_key(filled: Path) -> None:
    with SQLiteStorage(filled) as store:
        before = store.read_events(RUN)
        with pytest.raises(ForkRejectedError), store.write(RUN) as tx:
            # A writer that read the head before another one appended (F6-neg).
            tx._head = tx.head._replace(head_sequence=2, head_hash=before[1].hash)
            tx.append(EventType.WORK_COMPLETED, {"doc": "fork"}, source=before[0].source)

        assert store.read_events(RUN) == before
        assert store.verify_events(RUN).ok

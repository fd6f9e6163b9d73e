"""The SQLite backend (the embedded default): connection, transactions and SQL only.

What rows mean, the verify loops and sealing are shared with every backend
(``store/core.py``); which files and libraries are safe and how apsw's errors are
translated is ``store/sqlite_files.py``.

Durability: WAL + ``synchronous=FULL`` (a commit survives power loss); every write is
``BEGIN IMMEDIATE`` so writers serialize on the file lock instead of failing late.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import apsw

from continuum.errors import IntegrityError, NotFoundError, StoreError, UsageError
from continuum.eventlog.canonical import canonical_json
from continuum.faults import fault_point
from continuum.store.approval_outbox import (
    SQLITE,
    Execute,
    approval_values,
    backfill_approvals,
    outbox_values,
)
from continuum.store.base import (
    ActionRow,
    RunHead,
    check_run_id,
    now_timestamp,
)
from continuum.store.core import RUN_TABLES, CoreStore, check_deletable, import_ids, verify_imported
from continuum.store.rows import (
    ACTION_COLUMNS,
    CHECKPOINT_COLUMNS,
    EVENT_COLUMNS,
    RUN_COLUMNS,
    run_exists,
    run_from_row,
    run_head,
    run_not_found,
    schema_too_new,
)
from continuum.store.schema import MIGRATIONS, SCHEMA_VERSION, SQLITE_APPLICATION_ID
from continuum.store.sqlite_files import (
    DEFAULT_BUSY_TIMEOUT_MS,
    SQLITE_HEADER,
    absolute_text,
    check_sqlite_library,
    check_sqlite_path,
    create_private,
    on_read_only_file_system,
    path_text,
    sqlite_version_is_affected,
    translate_errors,
    translated_error,
)
from continuum.store.tx import CoreTx, action_values, checkpoint_values, event_values, run_values
from continuum.types import RunStatus
from continuum.untrusted import as_typed

if TYPE_CHECKING:
    from pathlib import Path

    from continuum.eventlog.events import EventLike
    from continuum.store.models import ApprovalRow, CheckpointRow, Run, RunExport, RunInfo

T = TypeVar("T")

__all__ = [
    "DEFAULT_BUSY_TIMEOUT_MS",
    "SQLITE_HEADER",
    "SQLiteStorage",
    "check_sqlite_library",
    "check_sqlite_path",
    "sqlite_version_is_affected",
    "translate_errors",
]

# Events are read as text; a query that meets text that is not UTF-8 is read again with
# the text as bytes, so that row fails in the core's mapper, where it is reported as
# malformed at its own sequence, instead of failing the whole query.
_EVENT_SELECT_BYTES = "run_id, sequence, " + ", ".join(
    f"CAST({c} AS BLOB)"
    for c in (
        "event_id",
        "type",
        "timestamp",
        "payload",
        "causer_event_id",
        "source",
        "prev_hash",
        "hash",
    )
)
_INSERT_EVENT = f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)"
_PUT_ACTION = (
    "INSERT INTO actions (run_id, action_id, action_key, dedup_key, fallback_key,"
    " status, record, lease_expires) VALUES (?,?,?,?,?,?,?,?)"
    " ON CONFLICT (run_id, action_id) DO UPDATE SET status = excluded.status,"
    " record = excluded.record, lease_expires = excluded.lease_expires"
)
_RUN_ROW = f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?"
_PUT_CHECKPOINT = f"INSERT INTO checkpoints ({CHECKPOINT_COLUMNS}) VALUES (?,?,?,?,?,?)"


class _Tx(CoreTx):
    """One BEGIN IMMEDIATE transaction on one run (see ``SQLiteStorage.write``)."""

    def __init__(self, conn: apsw.Connection, head: RunHead, clock: Callable[[], str]) -> None:
        super().__init__(head, clock)
        self._conn = conn

    def _insert_event(self, event: EventLike, payload_text: str) -> None:
        self._conn.execute(_INSERT_EVENT, event_values(event, payload_text))

    def _move_head(self, run_id: str, sequence: int, hash_: str, status: RunStatus) -> None:
        self._conn.execute(
            "UPDATE runs SET head_sequence = ?, head_hash = ?, status = ? WHERE run_id = ?",
            (sequence, hash_, str(status), run_id),
        )

    def _action_row(self, column: str, value: str) -> tuple[Any, ...] | None:
        rows = _action_query(self._conn, self._head.run_id, column, value)
        return rows[0] if rows else None

    def _payloads_after(self, run_id: str, after: int, type_: str) -> list[str]:
        rows = self._conn.execute(
            "SELECT payload FROM events WHERE run_id = ? AND sequence > ? AND type = ?"
            " ORDER BY sequence",
            (run_id, after, type_),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def _all_action_rows(self, run_id: str | None = None) -> list[tuple[Any, ...]]:
        # BEGIN IMMEDIATE holds the file's one write lock: other runs are serialized too.
        return _action_query(self._conn, run_id or self._head.run_id, None, None)

    def _put_action(self, row: ActionRow) -> None:
        self._conn.execute(_PUT_ACTION, action_values(row))

    def _put_checkpoint(self, row: CheckpointRow) -> None:
        self._conn.execute(_PUT_CHECKPOINT, checkpoint_values(row))

    def _drop_prefix(self, run_id: str, before: int) -> tuple[int, int]:
        self._conn.execute("DELETE FROM events WHERE run_id = ? AND sequence < ?", (run_id, before))
        events = self._conn.changes()
        self._conn.execute(
            "DELETE FROM checkpoints WHERE run_id = ? AND event_sequence < ?", (run_id, before)
        )
        return events, self._conn.changes()

    def _approval_row(self, column: str, value: str) -> tuple[Any, ...] | None:
        rows = self._conn.execute(
            SQLITE.approval_row(column), (self._head.run_id, value)
        ).fetchall()
        return rows[0] if rows else None

    def _put_approval(self, row: ApprovalRow) -> None:
        self._conn.execute(SQLITE.put_approval, approval_values(row))

    def _put_outbox(self, notice: dict[str, Any]) -> None:
        self._conn.execute(SQLITE.put_outbox, outbox_values(notice))

    def _outbox_has(self, delivery_id: str) -> bool:
        found = self._conn.execute(
            "SELECT 1 FROM outbox WHERE delivery_id = ?", (delivery_id,)
        ).fetchone()
        return found is not None


def _action_query(
    conn: apsw.Connection, run_id: str, column: str | None, value: str | None
) -> list[tuple[Any, ...]]:
    if column is None:
        # The run's rowids first (a covering range of an index on run_id), then the rows in
        # rowid order: the same rows in the same order as ``WHERE run_id = ? ORDER BY
        # rowid``, which SQLite plans as that range plus a sort of the whole rows (records
        # included) in a temporary b-tree: half the time of reading a long run's index.
        return conn.execute(
            f"SELECT {ACTION_COLUMNS} FROM actions WHERE rowid IN"
            " (SELECT rowid FROM actions WHERE run_id = ?) ORDER BY rowid",
            (run_id,),
        ).fetchall()
    return conn.execute(_ACTION_BY[column], (run_id, value)).fetchall()


# One statement text per look-up column, built once (apsw finds its prepared statement by
# the text: a text built per call costs a new string and its hash every time).
_ACTION_BY = {
    column: f"SELECT {ACTION_COLUMNS} FROM actions WHERE run_id = ? AND {column} = ?"
    " ORDER BY rowid LIMIT 1"
    for column in ("action_id", "dedup_key", "action_key", "fallback_key")
}


def _handed_out(rows: list[T]) -> Iterator[T]:
    """``rows`` in order (read in one statement: one snapshot), each let go of once handed
    out: a long log's rows are freed as its reader goes, and the memory they held is
    reused for what it makes of them (7% less time to fold 100,000 ledger events than
    from the list held whole to the end)."""
    rows.reverse()
    pop = rows.pop
    while rows:
        yield pop()


class SQLiteStorage(CoreStore):
    """A continuum store in one SQLite file. Safe for several processes on one file.

    ``SQLiteStorage(path)`` opens (``create=True``: creates) the file, refusing anything
    that is not a usable store (a directory, a foreign database, a symlink, ...) without
    touching it. Every commit is durable (WAL, ``synchronous=FULL``). It provides the
    ``Storage`` protocol: ``help(continuum.Storage)`` describes each method.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool = True,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        clock: Callable[[], str] | None = None,
        _synchronous: str = "FULL",
    ) -> None:
        check_sqlite_library()
        # Test-only: the power-loss suite's negative control opens with NORMAL to prove its
        # simulator bites (tests/crash/test_power_loss.py). Everything else keeps FULL.
        if _synchronous not in ("FULL", "NORMAL"):
            raise UsageError(
                f"synchronous={_synchronous!r} is not supported",
                code="usage.bad_synchronous",
                hint="leave it at FULL",
            )
        self._synchronous = _synchronous
        self._file = path_text(path)  # what str(Path(path)) gives, without pathlib
        self.url = f"sqlite://{absolute_text(self._file)}"  # sqlite:///abs/path.db (references/contract.md §2)
        self._busy_timeout_ms = busy_timeout_ms
        self._clock = clock or now_timestamp
        self._lock = threading.RLock()
        self._connection: apsw.Connection | None = None
        existed = check_sqlite_path(self._file, create=create)
        if not existed:
            create_private(self._file)
        self._open()

    @property
    def path(self) -> Path:
        """The store's file, as given (not made absolute)."""
        from pathlib import Path  # not on a hook's path: pathlib costs it a tenth

        return Path(self._file)

    # -- connection management ----------------------------------------------------------

    def _errors(self) -> contextlib.AbstractContextManager[None]:
        return translate_errors(self._discard_connection)

    def _open(self) -> None:
        if on_read_only_file_system(self._file):
            self._open_read_only()
            return
        flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_NOFOLLOW
        with self._errors():
            conn = apsw.Connection(self._file, flags=flags)
            conn.setbusytimeout(self._busy_timeout_ms)
            self._connection = conn
            self._prepare(conn)

    def _open_read_only(self) -> None:
        """A store on a read-only file system: reads need no write, so it opens read-only
        (a write then fails with ``store.read_only``, saying what to do). Without a -wal
        file nothing is being written (a writer keeps one while it works), and SQLite
        could not create the -shm it needs for WAL reads: the file is read as immutable.
        With a -wal (a writer elsewhere, through a read-write mount of the same files)
        it is read through them as they are."""
        from urllib.parse import quote as url_quote  # a read-only file system only

        immutable = not os.path.exists(f"{self._file}-wal")
        uri = f"file:{url_quote(absolute_text(self._file))}?mode=ro" + (
            "&immutable=1" if immutable else ""
        )
        flags = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI | apsw.SQLITE_OPEN_NOFOLLOW
        with self._errors():
            conn = apsw.Connection(uri, flags=flags)
            conn.setbusytimeout(self._busy_timeout_ms)
            self._connection = conn
            app_id = int(conn.execute("PRAGMA application_id").fetchall()[0][0] or 0)
            if app_id != SQLITE_APPLICATION_ID:
                self._discard_connection()
                raise StoreError(
                    f"{as_typed(self._file)} is not a continuum store",
                    code="store.foreign_database",
                    hint="point --db at a continuum store; this one was left untouched",
                )
            version = self._read_version(conn)
            if version > SCHEMA_VERSION:
                raise schema_too_new(version)
            if version < SCHEMA_VERSION:
                self._discard_connection()
                raise StoreError(
                    f"{as_typed(self._file)} has schema version {version} and is on a "
                    "read-only file system, so it cannot be migrated to this version's "
                    f"{SCHEMA_VERSION} to be read",
                    code="store.read_only",
                    hint="copy it to a writable place (or remount the file system "
                    "read-write) and open it there",
                )

    def _conn(self) -> apsw.Connection:
        if self._connection is None:
            # Reopened after an I/O error: the old handle's state could not be trusted.
            self._open()
        assert self._connection is not None
        return self._connection

    def _discard_connection(self) -> None:
        conn, self._connection = self._connection, None
        if conn is not None:
            with contextlib.suppress(apsw.Error):  # a broken handle is dropped either way
                conn.close(True)

    def _prepare(self, conn: apsw.Connection) -> None:
        app_id = int(conn.execute("PRAGMA application_id").fetchall()[0][0] or 0)
        tables = int(conn.execute("SELECT count(*) FROM sqlite_master").fetchall()[0][0] or 0)
        if app_id != SQLITE_APPLICATION_ID and tables > 0:
            self._discard_connection()
            raise StoreError(
                f"{as_typed(self._file)} is a SQLite database but not a continuum store",
                code="store.foreign_database",
                hint="point --db at a continuum store or a new file; this one was left untouched",
            )
        if self._read_version(conn) > SCHEMA_VERSION:
            raise schema_too_new(self._read_version(conn))  # before anything is changed
        if str(conn.execute("PRAGMA journal_mode").fetchall()[0][0]).lower() != "wal":
            conn.execute("PRAGMA journal_mode=WAL")
        # WAL + FULL: each commit survives power loss.
        conn.execute(f"PRAGMA synchronous={self._synchronous}")
        conn.execute("PRAGMA foreign_keys=ON")
        self._migrate(conn)

    def _migrate(self, conn: apsw.Connection) -> None:
        # The same loop as PostgresStorage._migrate, in SQLite's words: BEGIN IMMEDIATE
        # serializes migrating processes (PostgreSQL takes an advisory lock), and the
        # version lives in continuum_meta with the file's application_id set.
        version = self._read_version(conn)
        if version > SCHEMA_VERSION:
            raise schema_too_new(version)
        while version < SCHEMA_VERSION:
            conn.execute("BEGIN IMMEDIATE")
            try:
                version = self._read_version(conn)  # another process may have migrated
                if version < SCHEMA_VERSION:
                    if version == 0:
                        conn.execute(f"PRAGMA application_id = {SQLITE_APPLICATION_ID}")
                        conn.execute(
                            "CREATE TABLE continuum_meta (key TEXT PRIMARY KEY,"
                            " value TEXT NOT NULL)"
                        )
                    target = version + 1
                    for statement in MIGRATIONS[target]:
                        conn.execute(statement)
                    if target == 3:  # the approval index of events already in the log
                        backfill_approvals(lambda q, p: conn.execute(q, p).fetchall(), SQLITE)
                    conn.execute(
                        "INSERT INTO continuum_meta (key, value) VALUES"
                        " ('schema_version', ?) ON CONFLICT (key) DO UPDATE"
                        " SET value = excluded.value",
                        (str(target),),
                    )
                    version = target
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    @staticmethod
    def _read_version(conn: apsw.Connection) -> int:
        has_meta = conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='continuum_meta'"
        ).fetchall()[0][0]
        if not has_meta:
            return 0
        rows = conn.execute(
            "SELECT value FROM continuum_meta WHERE key='schema_version'"
        ).fetchall()
        return int(str(rows[0][0])) if rows else 0

    def schema_version(self) -> int:
        """The schema version of the file's tables."""
        with self._lock, self._errors():
            return self._read_version(self._conn())

    def deliverer_lock(self) -> Callable[[], None] | None:
        """The store's one deliverer role (``deliverer.BackgroundDelivery``): an exclusive
        lock on ``FILE.deliver.lock`` beside the store, held until the returned release is
        called (or the process ends); None while another process holds it."""
        import fcntl

        lock_path = f"{self._file}.deliver.lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return lambda: os.close(fd)

    def close(self) -> None:
        """Close this process's connection to the file."""
        with self._lock:
            self._discard_connection()

    def __enter__(self) -> SQLiteStorage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs ------------------------------------------------------------------------------

    def create_run(self, run: Run, *, exist_ok: bool = False) -> RunInfo:
        """Create ``run`` (see ``Storage.create_run``): ``usage.run_exists`` unless
        ``exist_ok``, ``usage.bad_run_id`` for a bad id."""
        check_run_id(run.run_id)
        with self._lock, self._errors():
            conn = self._conn()
            conn.execute("BEGIN IMMEDIATE")
            try:
                existing = conn.execute(_RUN_ROW, (run.run_id,)).fetchall()
                if existing:
                    conn.execute("ROLLBACK")
                    if exist_ok:
                        return run_from_row(existing[0])
                    raise run_exists(run.run_id)
                conn.execute(
                    f"INSERT INTO runs ({RUN_COLUMNS}) VALUES (?,?,?,?,0,NULL,?)",
                    (
                        run.run_id,
                        run.goal,
                        str(RunStatus.ACTIVE),
                        self._clock(),
                        canonical_json(run.metadata),
                    ),
                )
                conn.execute("COMMIT")
            except BaseException:
                if not conn.getautocommit():
                    conn.execute("ROLLBACK")
                raise
        return self.get_run(run.run_id)

    def get_run(self, run_id: str) -> RunInfo:
        """The run's ``RunInfo``; ``NotFoundError`` (``not_found.run``) if there is none."""
        return run_from_row(self._run_row(run_id))

    def get_head(self, run_id: str) -> RunHead:
        """``get_run`` as plain data (no model built)."""
        return run_head(self._run_row(run_id))

    def _run_row(self, run_id: str) -> tuple[Any, ...]:
        with self._lock, self._errors():
            rows = self._conn().execute(_RUN_ROW, (run_id,)).fetchall()
        if not rows:
            raise run_not_found(run_id)
        return tuple(rows[0])

    def list_runs(self) -> list[RunInfo]:
        """Every run, oldest first."""
        with self._lock, self._errors():
            conn = self._conn()
            rows = conn.execute(
                f"SELECT {RUN_COLUMNS} FROM runs ORDER BY created_at, run_id"
            ).fetchall()
            for r in rows:
                # Each listed id must be the one its run is found by; a damaged id (or index
                # entry) would otherwise list a run that no command can open.
                if (
                    conn.execute("SELECT count(*) FROM runs WHERE run_id = ?", (r[0],)).fetchall()[
                        0
                    ][0]
                    != 1
                ):
                    raise IntegrityError(
                        f"the record of run {r[0]!r} is damaged: no run is found by that id",
                        code="integrity.malformed",
                        hint="stop writing to this store, keep a copy, and restore from a backup",
                        run_id=r[0],
                        record="run",
                    )
        return [run_from_row(r) for r in rows]

    # -- writing ---------------------------------------------------------------------------

    @contextmanager
    def write(self, run_id: str) -> Iterator[_Tx]:
        """One serialized write transaction on ``run_id``: all of it commits, or none."""
        # The errors are translated here rather than in a second context manager
        # (``_errors``): one generator frame per write, not two.
        with self._lock:
            try:
                conn = self._conn()
                conn.execute("BEGIN IMMEDIATE")
                try:
                    rows = conn.execute(_RUN_ROW, (run_id,)).fetchall()
                    if not rows:
                        raise NotFoundError(
                            f"run {run_id!r} not found",
                            code="not_found.run",
                            hint="create it first (`continuum start`)",
                            run_id=run_id,
                        )
                    tx = _Tx(conn, run_head(rows[0]), self._clock)
                    yield tx
                    fault_point("before_append_commit")
                    conn.execute("COMMIT")
                    self._kept(tx)  # under the lock: kept in commit order
                except BaseException:
                    if self._connection is conn and not conn.getautocommit():
                        conn.execute("ROLLBACK")
                    raise
            except (apsw.Error, UnicodeDecodeError) as e:
                mapped = translated_error(e, self._discard_connection)
                if mapped is None:
                    raise
                raise mapped from e
        fault_point("after_append_commit")
        if self.observer is not None:
            self._committed(tx)

    # -- approvals and the outbox (store/approval_outbox.py) -------------------------------

    _dialect = SQLITE

    def _read(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._lock, self._errors():
            return self._conn().execute(sql, params).fetchall()

    def _transact(self, fn: Callable[[Execute], T]) -> T:
        with self._lock, self._errors():
            conn = self._conn()
            conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn(lambda sql, params: conn.execute(sql, params).fetchall())
                conn.execute("COMMIT")
                return out
            except BaseException:
                if self._connection is conn and not conn.getautocommit():
                    conn.execute("ROLLBACK")
                raise

    def renew_lease(self, run_id: str, action_id: str, lease_expires: float) -> None:
        """Extend the lease of a started action (its performer is still at it)."""
        with self._lock, self._errors():
            self._conn().execute(
                "UPDATE actions SET lease_expires = ? WHERE run_id = ? AND action_id = ?",
                (lease_expires, run_id, action_id),
            )

    # -- row queries for the shared read methods ---------------------------------------------

    def _event_rows(self, run_id: str, after: int, upto: int | None) -> Iterator[tuple[Any, ...]]:
        bound = "" if upto is None else " AND sequence <= ?"
        params: tuple[Any, ...] = (run_id, after) + (() if upto is None else (upto,))
        where = f"FROM events WHERE run_id = ? AND sequence > ?{bound} ORDER BY sequence"
        with self._lock, self._errors():
            conn = self._conn()
            try:
                rows = conn.execute(f"SELECT {EVENT_COLUMNS} {where}", params).fetchall()
            except UnicodeDecodeError:
                rows = conn.execute(f"SELECT {_EVENT_SELECT_BYTES} {where}", params).fetchall()
        return _handed_out(rows)

    def _action_rows(
        self, run_id: str, column: str | None, value: str | None
    ) -> list[tuple[Any, ...]]:
        with self._lock, self._errors():
            return _action_query(self._conn(), run_id, column, value)

    def _action_page(
        self, run_id: str, statuses: tuple[str, ...], after: int, limit: int, *, few: bool
    ) -> list[tuple[Any, ...]]:
        # One range scan of actions_by_status (run_id, status, rowid) per status, each
        # already in rowid order from the cursor, merged here: a page costs the page, not
        # the run's history (one query with status IN (...) would read and sort them all).
        rows: list[tuple[Any, ...]] = []
        with self._lock, self._errors():
            conn = self._conn()
            for status in statuses:
                rows += conn.execute(
                    f"SELECT rowid, {ACTION_COLUMNS} FROM actions INDEXED BY actions_by_status"
                    " WHERE run_id = ? AND status = ? AND rowid > ? ORDER BY rowid LIMIT ?",
                    (run_id, status, after, limit),
                ).fetchall()
        rows.sort(key=lambda r: int(r[0]))
        return rows[:limit]

    def _checkpoint_rows(self, run_id: str, limit: int | None = None) -> list[tuple[Any, ...]]:
        with self._lock, self._errors():
            return (
                self._conn()
                .execute(
                    f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = ?"
                    " ORDER BY sequence DESC LIMIT ?",
                    (run_id, -1 if limit is None else limit),
                )
                .fetchall()
            )

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """The reads inside share one read transaction (one WAL snapshot), unless a write
        transaction of this handle is open (its own view then)."""
        with self._lock, self._errors():
            conn = self._conn()
            own = conn.getautocommit()
            if own:
                conn.execute("BEGIN")
            try:
                yield
            finally:
                if own and not conn.getautocommit():
                    conn.execute("COMMIT")

    def event_hash_at(self, run_id: str, sequence: int) -> str | None:
        """The stored hash of event ``sequence``, or None if there is no such event."""
        with self._lock, self._errors():
            rows = (
                self._conn()
                .execute(
                    "SELECT hash FROM events WHERE run_id = ? AND sequence = ?", (run_id, sequence)
                )
                .fetchall()
            )
        return str(rows[0][0]) if rows and rows[0][0] is not None else None

    def _first_sequence(self, run_id: str) -> int | None:
        with self._lock, self._errors():
            rows = (
                self._conn()
                .execute("SELECT min(sequence) FROM events WHERE run_id = ?", (run_id,))
                .fetchall()
            )
        first = rows[0][0] if rows else None
        return first if type(first) is int else None

    def _latest_of_type(self, run_id: str, type_: str) -> tuple[Any, ...] | None:
        # Walks the (run_id, sequence) key back from the head: the latest marker is near it.
        with self._lock, self._errors():
            rows = (
                self._conn()
                .execute(
                    f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ? AND type = ?"
                    " ORDER BY sequence DESC LIMIT 1",
                    (run_id, type_),
                )
                .fetchall()
            )
        return rows[0] if rows else None

    def count_events(self, run_id: str) -> int:
        """Rows stored for ``run_id``, whatever their sequence (the runtime's one-pass verify
        uses it to rule out rows outside 1..head)."""
        with self._lock, self._errors():
            rows = (
                self._conn()
                .execute("SELECT count(*) FROM events WHERE run_id = ?", (run_id,))
                .fetchall()
            )
        return int(str(rows[0][0]))

    # -- import ----------------------------------------------------------------------------

    def import_runs(self, runs: list[RunExport]) -> list[RunInfo]:
        """Write exported runs exactly as they are, all in one transaction (see Storage)."""
        ids = import_ids(runs)
        with self._lock, self._errors():
            conn = self._conn()
            conn.execute("BEGIN IMMEDIATE")
            try:
                for bundle in runs:
                    r = bundle.run
                    if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (r.run_id,)).fetchall():
                        raise run_exists(r.run_id, self.url)
                    conn.execute(
                        f"INSERT INTO runs ({RUN_COLUMNS}) VALUES (?,?,?,?,?,?,?)", run_values(r)
                    )
                    for e in bundle.events:
                        conn.execute(_INSERT_EVENT, event_values(e))
                    tx = _Tx(conn, RunHead(*r.model_dump().values()), self._clock)
                    for action in bundle.actions:
                        tx.put_action(action)
                    for cp in bundle.checkpoints:
                        tx.put_checkpoint(cp)
                    for approval in bundle.approvals:
                        tx.put_approval(approval)
                verify_imported(self, runs)  # every chain re-verified inside the transaction
                conn.execute("COMMIT")
            except BaseException:
                if self._connection is conn and not conn.getautocommit():
                    conn.execute("ROLLBACK")
                raise
        return [self.get_run(i) for i in ids]

    # -- delete (prune) --------------------------------------------------------------------

    def delete_run(self, run_id: str, *, expect_head: tuple[int, str | None]) -> None:
        """Delete a finished run, all its rows, in one transaction (see Storage)."""
        with self._lock, self._errors():
            conn = self._conn()
            conn.execute("BEGIN IMMEDIATE")
            try:
                rows = conn.execute(_RUN_ROW, (run_id,)).fetchall()
                if not rows:
                    raise run_not_found(run_id)
                run = run_from_row(rows[0])
                # Every table with a run_id column: the known ones are emptied for the run,
                # rows of the run in any other make check_deletable refuse.
                per_run = [
                    str(r[0])
                    for r in conn.execute(
                        "SELECT m.name FROM sqlite_master m, pragma_table_info(m.name) c"
                        " WHERE m.type = 'table' AND c.name = 'run_id'"
                    ).fetchall()
                ]
                tables = [t for t in RUN_TABLES if t in per_run]
                unknown = [
                    t
                    for t in per_run
                    if t not in (*RUN_TABLES, "events", "runs")
                    and conn.execute(
                        f'SELECT 1 FROM "{t}" WHERE run_id = ? LIMIT 1', (run_id,)
                    ).fetchall()
                ]
                count = int(
                    str(
                        conn.execute(
                            "SELECT count(*) FROM events WHERE run_id = ?", (run_id,)
                        ).fetchall()[0][0]
                    )
                )
                last = conn.execute(
                    "SELECT hash FROM events WHERE run_id = ? AND sequence = ?",
                    (run_id, run.head_sequence),
                ).fetchall()
                check_deletable(
                    run,
                    expect_head,
                    rows=count,
                    head_hash=str(last[0][0]) if last else None,
                    unknown_tables=unknown,
                )
                for table in tables:
                    conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
                conn.execute("DELETE FROM events WHERE run_id = ?", (run_id,))
                conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
                fault_point("before_delete_commit")
                conn.execute("COMMIT")
            except BaseException:
                if self._connection is conn and not conn.getautocommit():
                    conn.execute("ROLLBACK")
                raise
        fault_point("after_delete_commit")

"""The SQLite backend (the embedded default), on apsw's bundled SQLite.

Why apsw: the system SQLite here (3.40.1) is inside the WAL-reset corruption range
(3.7.0-3.51.2); apsw bundles a fixed one and offers a VFS layer for fault injection.
Durability: WAL + ``synchronous=FULL`` (a commit survives power loss); every write is
``BEGIN IMMEDIATE`` so writers serialize on the file lock instead of failing late.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import apsw

from continuum.canonical import canonical_json, parse_json
from continuum.chain import ChainVerifier, VerifyReport
from continuum.errors import (
    DiskFullError,
    ForkRejectedError,
    IntegrityError,
    NotFoundError,
    SchemaError,
    StoreBusyError,
    StoreError,
    StoreIOError,
    UnsafeLibraryError,
    UsageError,
)
from continuum.events import LIFECYCLE_STATUS, Event, EventType, seal
from continuum.faults import fault_point
from continuum.payloads import check_payload
from continuum.store.base import (
    ActionRow,
    CheckpointRow,
    Run,
    RunExport,
    RunInfo,
    check_run_id,
    format_timestamp,
    integrity_error,
)
from continuum.store.schema import MIGRATIONS, SCHEMA_VERSION, SQLITE_APPLICATION_ID
from continuum.types import Origin, RunStatus

SQLITE_HEADER = b"SQLite format 3\x00"
DEFAULT_BUSY_TIMEOUT_MS = 30_000


def sqlite_version_is_affected(version: str) -> bool:
    """True for SQLite versions with the WAL-reset corruption bug.

    Affected: 3.7.0 through 3.51.2. Fixed in 3.51.3 and backported to 3.50.7 and 3.44.6.
    """
    parts = tuple(int(p) for p in version.split(".")[:3])
    v = parts + (0,) * (3 - len(parts))
    if v < (3, 7, 0) or v >= (3, 51, 3):
        return False
    if (3, 50, 7) <= v < (3, 51, 0):
        return False
    return not (3, 44, 6) <= v < (3, 45, 0)


def check_sqlite_library(version: str | None = None) -> None:
    version = version or apsw.sqlite_lib_version()
    if sqlite_version_is_affected(version):
        raise UnsafeLibraryError(
            f"SQLite {version} is affected by the WAL-reset corruption bug (3.7.0-3.51.2)",
            hint="install an apsw release that bundles SQLite >= 3.51.3 (pip install -U apsw)",
            version=version,
        )


def check_sqlite_path(path: Path, *, create: bool) -> bool:
    """Refuse anything that is not a usable database path; return True if it exists.

    Nothing is created or touched here: a refused path is left exactly as it was.
    """
    text = str(path)
    if not text or text.startswith("-"):
        raise UsageError(
            f"store path {text!r} is not usable",
            code="store.bad_url",
            hint="give a file path, sqlite:///abs/path.db or postgresql://...",
        )
    if os.path.islink(path):
        raise StoreError(
            f"store path {text!r} is a symbolic link",
            code="store.symlink",
            hint="point --db at the real file (symlinks are refused so a link cannot redirect writes)",
        )
    try:
        st = os.stat(path)
    except FileNotFoundError:
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            raise StoreError(
                f"directory {str(parent)!r} for store {text!r} does not exist",
                code="store.missing_directory",
                hint="create the directory first, or point --db / CONTINUUM_DB elsewhere",
                path=text,
            ) from None
        if not create:
            raise NotFoundError(
                f"no store at {text!r}",
                code="not_found.store",
                hint="run `continuum init` (or `continuum start RUN --goal ...`) to create it",
                path=text,
            ) from None
        return False
    except OSError as e:
        raise StoreError(f"cannot stat store {text!r}: {e.strerror}", code="store.unusable",
                         hint="check the path and its permissions") from e
    if stat.S_ISDIR(st.st_mode):
        raise StoreError(
            f"store path {text!r} is a directory",
            code="store.is_directory",
            hint="name a database file inside it, e.g. --db DIR/continuum.db",
        )
    if not stat.S_ISREG(st.st_mode):
        raise StoreError(
            f"store path {text!r} is not a regular file",
            code="store.not_regular_file",
            hint="point --db at a database file, not a device, FIFO or socket",
        )
    if st.st_size > 0:
        try:
            with open(path, "rb") as f:
                header = f.read(len(SQLITE_HEADER))
        except OSError as e:
            raise StoreError(f"cannot read store {text!r}: {e.strerror}",
                             hint="check the file's permissions") from e
        if header != SQLITE_HEADER:
            raise StoreError(
                f"{text!r} is not a SQLite database",
                code="store.not_a_database",
                hint="point --db at a continuum store; this file was left untouched",
            )
    return True


def _create_private(path: Path) -> None:
    """Create the (empty) database file readable and writable by its owner only.

    A store holds goals, arguments and results an agent wrote; SQLite would create the file
    with the umask's mode (often world-readable), and gives its ``-wal``/``-shm`` files the
    database file's mode, so creating it 0600 first covers all three.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return  # another process created it a moment ago: it is theirs to have made
    except OSError as e:
        raise StoreError(f"cannot create store {str(path)!r}: {e.strerror}",
                         code="store.unusable", hint="check the directory's permissions") from e
    os.close(fd)


@contextmanager
def translate_errors(store: SQLiteStorage | None = None) -> Iterator[None]:
    """Map apsw errors to continuum errors, once, at the store boundary."""
    try:
        yield
    except apsw.ConstraintError as e:
        raise ForkRejectedError(
            "write rejected by a uniqueness constraint (a concurrent writer got there first)",
            hint="retry the operation; the chain was not changed", detail=str(e),
        ) from e
    except (apsw.BusyError, apsw.LockedError) as e:
        raise StoreBusyError(
            "the store stayed locked by another writer past the busy timeout",
            hint="retry, or look for a process holding a long write transaction",
        ) from e
    except apsw.FullError as e:
        if store is not None:
            store._discard_connection()
        raise DiskFullError(
            "the disk is full; the write was not acknowledged and nothing was recorded",
            hint="free disk space, then retry; earlier data is intact",
        ) from e
    except (apsw.CorruptError, apsw.NotADBError) as e:
        if store is not None:
            store._discard_connection()
        raise IntegrityError(
            f"the database file is damaged: {e}", code="integrity.database_corrupt",
            hint="stop writing to it, keep a copy, and restore from a backup or export",
        ) from e
    except apsw.IOError as e:
        if store is not None:
            store._discard_connection()
        raise StoreIOError(
            f"I/O error in the store: {e}; the write was not acknowledged",
            hint="check the disk and the file system, then retry",
        ) from e
    except apsw.Error as e:
        if store is not None and not isinstance(e, apsw.SQLError):
            store._discard_connection()
        raise StoreError(f"store error: {e}", hint="see the message; nothing was changed") from e
    except UnicodeDecodeError as e:  # a stored text that is not UTF-8: the file is damaged
        raise IntegrityError(
            "the database file is damaged: a stored text is not valid UTF-8",
            code="integrity.database_corrupt",
            hint="stop writing to it, keep a copy, and restore from a backup or export",
        ) from e


def _now() -> str:
    return format_timestamp(datetime.now(UTC))


def _text(value: Any) -> Any:
    """A TEXT column read as bytes (see ``_EVENT_SELECT``), decoded strictly here."""
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _row_to_event(row: tuple[Any, ...]) -> Event:
    run_id, seq, event_id, type_, ts, payload, causer, source, prev, hash_ = row
    return Event(
        event_id=_text(event_id), run_id=run_id, sequence=seq, type=_text(type_),
        timestamp=_text(ts), payload=parse_json(_text(payload)), causer_event_id=_text(causer),
        source=Origin(_text(source)), prev_hash=_text(prev), hash=_text(hash_),
    )


_EVENT_COLUMNS = ("run_id, sequence, event_id, type, timestamp, payload, causer_event_id, "
                  "source, prev_hash, hash")
# Text read as bytes, so a row whose text is not UTF-8 fails in _row_to_event, where it is
# reported as malformed at its own sequence, instead of failing the whole query.
_EVENT_SELECT = ("run_id, sequence, " + ", ".join(
    f"CAST({c} AS BLOB)" for c in ("event_id", "type", "timestamp", "payload", "causer_event_id",
                                   "source", "prev_hash", "hash")))
_RUN_COLUMNS = "run_id, goal, status, created_at, head_sequence, head_hash, metadata"


def _run_info(row: tuple[Any, ...]) -> RunInfo:
    run_id, goal, status, created, head_seq, head_hash, metadata = row
    try:
        return RunInfo(run_id=run_id, goal=goal, status=RunStatus(status), created_at=created,
                       head_sequence=head_seq, head_hash=head_hash, metadata=json.loads(metadata))
    except (ValueError, TypeError) as e:  # (pydantic's ValidationError is a ValueError)
        raise IntegrityError(
            f"the record of run {run_id!r} is damaged: {e}", code="integrity.malformed",
            hint="stop writing to this store, keep a copy, and restore from a backup or export",
            run_id=run_id, record="run",
        ) from e


class _Tx:
    """One BEGIN IMMEDIATE transaction on one run (see ``SQLiteStorage.write``)."""

    def __init__(self, store: SQLiteStorage, conn: apsw.Connection, run: RunInfo) -> None:
        self._store, self._conn, self._run = store, conn, run

    @property
    def run(self) -> RunInfo:
        return self._run

    def append(self, type: EventType | str, payload: dict[str, Any], *,
               source: Origin, causer_event_id: str | None = None) -> Event:
        check_payload(str(type), payload)  # a malformed known payload is refused, not stored
        run = self._run
        event = seal(
            event_id=f"evt_{uuid.uuid4().hex}", run_id=run.run_id,
            sequence=run.head_sequence + 1, type=str(type), timestamp=self._store._clock(),
            payload=payload, causer_event_id=causer_event_id, source=Origin(source),
            prev_hash=run.head_hash,
        )
        self._conn.execute(
            f"INSERT INTO events ({_EVENT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (event.run_id, event.sequence, event.event_id, event.type, event.timestamp,
             canonical_json(event.payload), event.causer_event_id, str(event.source),
             event.prev_hash, event.hash),
        )
        status = LIFECYCLE_STATUS.get(EventType(event.type)) if event.type in EventType._value2member_map_ else None
        new_status = RunStatus(status) if status else run.status
        self._conn.execute(
            "UPDATE runs SET head_sequence = ?, head_hash = ?, status = ? WHERE run_id = ?",
            (event.sequence, event.hash, str(new_status), run.run_id),
        )
        self._run = run.model_copy(update={"head_sequence": event.sequence,
                                           "head_hash": event.hash, "status": new_status})
        return event

    def find_action(self, *, action_id: str | None = None, dedup_key: str | None = None,
                    fallback_key: str | None = None, action_key: str | None = None) -> ActionRow | None:
        for column, value in (("action_id", action_id), ("dedup_key", dedup_key),
                              ("action_key", action_key), ("fallback_key", fallback_key)):
            if value is not None:
                row = self._store._one_action(self._conn, self._run.run_id, column, value)
                if row is not None:
                    return row
        return None

    def put_action(self, row: ActionRow) -> None:
        rec = row.record
        self._conn.execute(
            "INSERT INTO actions (run_id, action_id, action_key, dedup_key, fallback_key, status,"
            " record, lease_expires) VALUES (?,?,?,?,?,?,?,?)"
            " ON CONFLICT (run_id, action_id) DO UPDATE SET status = excluded.status,"
            " record = excluded.record, lease_expires = excluded.lease_expires",
            (row.run_id, row.action_id, rec["action_key"], rec["dedup_key"], rec.get("fallback_key"),
             rec["status"], canonical_json(rec), row.lease_expires),
        )

    def put_checkpoint(self, row: CheckpointRow) -> None:
        self._conn.execute(
            "INSERT INTO checkpoints (run_id, sequence, event_sequence, state, state_hash, created_at)"
            " VALUES (?,?,?,?,?,?)",
            (row.run_id, row.sequence, row.event_sequence, row.state_json, row.state_hash,
             row.created_at),
        )


class SQLiteStorage:
    """A continuum store in one SQLite file. Safe for several processes on one file."""

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True,
                 busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
                 clock: Callable[[], str] | None = None, _synchronous: str = "FULL") -> None:
        check_sqlite_library()
        # Test-only: the power-loss suite's negative control opens with NORMAL to prove its
        # simulator bites (tests/crash/test_power_loss.py). Everything else keeps FULL.
        if _synchronous not in ("FULL", "NORMAL"):
            raise UsageError(f"synchronous={_synchronous!r} is not supported",
                             code="usage.bad_synchronous", hint="leave it at FULL")
        self._synchronous = _synchronous
        self.path = Path(path)
        self.url = f"sqlite://{self.path.absolute()}"  # sqlite:///abs/path.db (SPEC 2)
        self._busy_timeout_ms = busy_timeout_ms
        self._clock = clock or _now
        self._lock = threading.RLock()
        self._connection: apsw.Connection | None = None
        existed = check_sqlite_path(self.path, create=create)
        if not existed:
            _create_private(self.path)
        self._open(create_schema=create or existed)

    # -- connection management ----------------------------------------------------------

    def _open(self, *, create_schema: bool) -> None:
        flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_NOFOLLOW
        with translate_errors(self):
            conn = apsw.Connection(str(self.path), flags=flags)
            conn.setbusytimeout(self._busy_timeout_ms)
            self._connection = conn
            self._prepare(conn)

    def _conn(self) -> apsw.Connection:
        if self._connection is None:
            # Reopened after an I/O error: the old handle's state could not be trusted.
            self._open(create_schema=True)
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
                f"{str(self.path)!r} is a SQLite database but not a continuum store",
                code="store.foreign_database",
                hint="point --db at a continuum store or a new file; this one was left untouched",
            )
        if self._read_version(conn) > SCHEMA_VERSION:
            self._migrate(conn)  # refuses, before anything about the file is changed
        if str(conn.execute("PRAGMA journal_mode").fetchall()[0][0]).lower() != "wal":
            conn.execute("PRAGMA journal_mode=WAL")
        # WAL + FULL: each commit survives power loss.
        conn.execute(f"PRAGMA synchronous={self._synchronous}")
        conn.execute("PRAGMA foreign_keys=ON")
        self._migrate(conn)

    def _migrate(self, conn: apsw.Connection) -> None:
        version = self._read_version(conn)
        if version > SCHEMA_VERSION:
            raise SchemaError(
                f"store schema version {version} is newer than this continuum knows ({SCHEMA_VERSION})",
                code="store.schema_too_new", hint="upgrade continuum to open this store",
            )
        while version < SCHEMA_VERSION:
            conn.execute("BEGIN IMMEDIATE")
            try:
                version = self._read_version(conn)  # another process may have migrated
                if version < SCHEMA_VERSION:
                    if version == 0:
                        conn.execute(f"PRAGMA application_id = {SQLITE_APPLICATION_ID}")
                        conn.execute("CREATE TABLE continuum_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                    target = version + 1
                    for statement in MIGRATIONS[target]:
                        conn.execute(statement)
                    conn.execute("INSERT INTO continuum_meta (key, value) VALUES ('schema_version', ?)"
                                 " ON CONFLICT (key) DO UPDATE SET value = excluded.value", (str(target),))
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
        rows = conn.execute("SELECT value FROM continuum_meta WHERE key='schema_version'").fetchall()
        return int(str(rows[0][0])) if rows else 0

    def schema_version(self) -> int:
        with self._lock, translate_errors(self):
            return self._read_version(self._conn())

    def close(self) -> None:
        with self._lock:
            self._discard_connection()

    def __enter__(self) -> SQLiteStorage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs ------------------------------------------------------------------------------

    def create_run(self, run: Run, *, exist_ok: bool = False) -> RunInfo:
        check_run_id(run.run_id)
        with self._lock, translate_errors(self):
            conn = self._conn()
            conn.execute("BEGIN IMMEDIATE")
            try:
                existing = conn.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?",
                                        (run.run_id,)).fetchall()
                if existing:
                    conn.execute("ROLLBACK")
                    if exist_ok:
                        return _run_info(existing[0])
                    raise UsageError(f"run {run.run_id!r} already exists", code="usage.run_exists",
                                     hint="choose another run id, or resume this one")
                conn.execute(
                    f"INSERT INTO runs ({_RUN_COLUMNS}) VALUES (?,?,?,?,0,NULL,?)",
                    (run.run_id, run.goal, str(RunStatus.ACTIVE), self._clock(),
                     canonical_json(run.metadata)),
                )
                conn.execute("COMMIT")
            except BaseException:
                if not conn.getautocommit():
                    conn.execute("ROLLBACK")
                raise
        return self.get_run(run.run_id)

    def get_run(self, run_id: str) -> RunInfo:
        with self._lock, translate_errors(self):
            rows = self._conn().execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?",
                                        (run_id,)).fetchall()
        if not rows:
            raise NotFoundError(f"run {run_id!r} not found", code="not_found.run",
                                hint="list runs with `continuum runs`", run_id=run_id)
        return _run_info(rows[0])

    def list_runs(self) -> list[RunInfo]:
        with self._lock, translate_errors(self):
            conn = self._conn()
            rows = conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs ORDER BY created_at, run_id").fetchall()
            for r in rows:
                # Each listed id must be the one its run is found by; a damaged id (or index
                # entry) would otherwise list a run that no command can open.
                if conn.execute("SELECT count(*) FROM runs WHERE run_id = ?",
                                (r[0],)).fetchall()[0][0] != 1:
                    raise IntegrityError(
                        f"the record of run {r[0]!r} is damaged: no run is found by that id",
                        code="integrity.malformed",
                        hint="stop writing to this store, keep a copy, and restore from a backup",
                        run_id=r[0], record="run",
                    )
        return [_run_info(r) for r in rows]

    # -- events ----------------------------------------------------------------------------

    @contextmanager
    def write(self, run_id: str) -> Iterator[_Tx]:
        """One serialized write transaction on ``run_id``: all of it commits, or none."""
        with self._lock, translate_errors(self):
            conn = self._conn()
            conn.execute("BEGIN IMMEDIATE")
            try:
                rows = conn.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?",
                                    (run_id,)).fetchall()
                if not rows:
                    raise NotFoundError(f"run {run_id!r} not found", code="not_found.run",
                                        hint="create it first (`continuum start`)", run_id=run_id)
                yield _Tx(self, conn, _run_info(rows[0]))
                fault_point("before_append_commit")
                conn.execute("COMMIT")
            except BaseException:
                if self._connection is conn and not conn.getautocommit():
                    conn.execute("ROLLBACK")
                raise
        fault_point("after_append_commit")

    def append_event(self, run_id: str, type: EventType | str, payload: dict[str, Any], *,
                     source: Origin = Origin.DETERMINISTIC,
                     causer_event_id: str | None = None) -> Event:
        if not isinstance(payload, dict):
            raise UsageError("event payload must be a JSON object", code="usage.bad_payload",
                             hint="pass a dict")
        canonical_json(payload)  # refuse NaN / non-JSON before taking the write lock
        with self.write(run_id) as tx:
            return tx.append(type, payload, source=source, causer_event_id=causer_event_id)

    def iter_events(self, run_id: str, after: int = 0) -> Iterator[Event]:
        """Events after ``after`` in order, each verified as it is read.

        A record that fails its hash, link or sequence raises IntegrityError naming run
        and sequence; a log shorter than the run's head raises too (truncated tail).
        """
        run = self.get_run(run_id)
        with self._lock, translate_errors(self):
            conn = self._conn()
            prev = None
            if after > 0:
                prev = self._hash_at(conn, run_id, after)
            verifier = ChainVerifier(run_id)
            verifier.expected_sequence, verifier.prev_hash = after + 1, prev
            rows = conn.execute(
                f"SELECT {_EVENT_SELECT} FROM events WHERE run_id = ? AND sequence > ?"
                " AND sequence <= ? ORDER BY sequence", (run_id, after, run.head_sequence)).fetchall()
        for row in rows:
            try:
                event = _row_to_event(row)
            except Exception as e:  # undecodable row: damage, never skipped
                raise integrity_error(run_id, _row_sequence(row, verifier), "malformed",
                                 f"cannot decode event: {e}") from e
            violation = verifier.feed(event, _text(row[5]))  # the stored payload text
            if violation is not None:
                raise integrity_error(run_id, violation.sequence, str(violation.kind), violation.detail)
            yield event
        if verifier.expected_sequence - 1 < run.head_sequence:
            raise integrity_error(run_id, verifier.expected_sequence, "truncated",
                             f"the run's head is {run.head_sequence} but the log ends at "
                             f"{verifier.expected_sequence - 1}")

    def read_events(self, run_id: str, after: int = 0) -> list[Event]:
        return list(self.iter_events(run_id, after))

    @staticmethod
    def _hash_at(conn: apsw.Connection, run_id: str, sequence: int) -> str | None:
        rows = conn.execute("SELECT hash FROM events WHERE run_id = ? AND sequence = ?",
                            (run_id, sequence)).fetchall()
        return str(rows[0][0]) if rows and rows[0][0] is not None else None

    def event_hash_at(self, run_id: str, sequence: int) -> str | None:
        with self._lock, translate_errors(self):
            return self._hash_at(self._conn(), run_id, sequence)

    def count_events(self, run_id: str) -> int:
        """Rows stored for ``run_id``, whatever their sequence (the runtime's one-pass verify
        uses it to rule out rows outside 1..head)."""
        with self._lock, translate_errors(self):
            rows = self._conn().execute("SELECT count(*) FROM events WHERE run_id = ?",
                                        (run_id,)).fetchall()
        return int(str(rows[0][0]))

    def verify_events(self, run_id: str) -> VerifyReport:
        """Recompute every hash, check sequence, links and head; never raises on damage.

        The head and the events are read in one read transaction (one WAL snapshot), so a
        concurrent append can never look like a head mismatch.
        """
        verifier = ChainVerifier(run_id)
        with self._lock, translate_errors(self):
            conn = self._conn()
            own_snapshot = conn.getautocommit()
            if own_snapshot:
                conn.execute("BEGIN")
            try:
                run = self.get_run(run_id)
                cursor = conn.execute(
                    f"SELECT {_EVENT_SELECT} FROM events WHERE run_id = ? ORDER BY sequence",
                    (run_id,))
                for row in cursor:
                    try:
                        event = _row_to_event(row)
                    except Exception as e:
                        sequence = _row_sequence(row, verifier)
                        verifier.add_malformed(sequence, f"cannot decode event: {e}")
                        verifier.expected_sequence = sequence + 1
                        continue
                    verifier.feed(event, _text(row[5]))
            finally:
                if own_snapshot and not conn.getautocommit():
                    conn.execute("COMMIT")
        return verifier.finish(run.head_sequence, run.head_hash)

    # -- actions and checkpoints -----------------------------------------------------------

    def _one_action(self, conn: apsw.Connection, run_id: str, column: str, value: str) -> ActionRow | None:
        rows = conn.execute(
            f"SELECT run_id, action_id, record, lease_expires, dedup_key FROM actions"
            f" WHERE run_id = ? AND {column} = ? ORDER BY rowid LIMIT 1", (run_id, value)).fetchall()
        if not rows:
            return None
        return _action_row(rows[0])

    def get_action(self, run_id: str, action_ref: str) -> ActionRow | None:
        with self._lock, translate_errors(self):
            conn = self._conn()
            return (self._one_action(conn, run_id, "action_id", action_ref)
                    or self._one_action(conn, run_id, "action_key", action_ref))

    def list_actions(self, run_id: str) -> list[ActionRow]:
        with self._lock, translate_errors(self):
            rows = self._conn().execute(
                "SELECT run_id, action_id, record, lease_expires, dedup_key FROM actions"
                " WHERE run_id = ? ORDER BY rowid", (run_id,)).fetchall()
        return [_action_row(r) for r in rows]

    def renew_lease(self, run_id: str, action_id: str, lease_expires: float) -> None:
        with self._lock, translate_errors(self):
            self._conn().execute(
                "UPDATE actions SET lease_expires = ? WHERE run_id = ? AND action_id = ?",
                (lease_expires, run_id, action_id))

    def list_checkpoints(self, run_id: str) -> list[CheckpointRow]:
        with self._lock, translate_errors(self):
            rows = self._conn().execute(
                "SELECT run_id, sequence, event_sequence, state, state_hash, created_at"
                " FROM checkpoints WHERE run_id = ? ORDER BY sequence DESC", (run_id,)).fetchall()
        try:
            return [CheckpointRow(run_id=r[0], sequence=r[1], event_sequence=r[2], state_json=r[3],
                                  state_hash=r[4], created_at=r[5]) for r in rows]
        except ValueError as e:  # pydantic's ValidationError: a field of the wrong type
            raise IntegrityError(
                f"a checkpoint of run {run_id!r} is damaged: {e}",
                code="integrity.checkpoint_mismatch",
                hint=f"run `continuum verify {run_id}`; the log was not changed",
                run_id=run_id, record="checkpoint",
            ) from e

    def import_runs(self, runs: list[RunExport]) -> list[RunInfo]:
        """Write exported runs exactly as they are, all in one transaction (see Storage)."""
        for bundle in runs:
            check_run_id(bundle.run.run_id)
        with self._lock, translate_errors(self):
            conn = self._conn()
            conn.execute("BEGIN IMMEDIATE")
            try:
                for bundle in runs:
                    r = bundle.run
                    if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (r.run_id,)).fetchall():
                        raise UsageError(
                            f"run {r.run_id!r} already exists in {self.url}; nothing was imported",
                            code="usage.run_exists",
                            hint="import into another store, or choose which runs to export")
                    conn.execute(f"INSERT INTO runs ({_RUN_COLUMNS}) VALUES (?,?,?,?,?,?,?)",
                                 (r.run_id, r.goal, str(r.status), r.created_at, r.head_sequence,
                                  r.head_hash, canonical_json(r.metadata)))
                    for e in bundle.events:
                        conn.execute(
                            f"INSERT INTO events ({_EVENT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)",
                            (e.run_id, e.sequence, e.event_id, e.type, e.timestamp,
                             canonical_json(e.payload), e.causer_event_id, str(e.source),
                             e.prev_hash, e.hash))
                    tx = _Tx(self, conn, _run_info(conn.execute(
                        f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (r.run_id,)).fetchall()[0]))
                    for action in bundle.actions:
                        tx.put_action(action)
                    for cp in bundle.checkpoints:
                        tx.put_checkpoint(cp)
                    report = self.verify_events(r.run_id)  # re-verified on arrival, in the transaction
                    if not report.ok:
                        v = report.violations[0]
                        raise integrity_error(r.run_id, v.sequence, str(v.kind),
                                         f"refused on import, nothing written: {v.detail}")
                conn.execute("COMMIT")
            except BaseException:
                if self._connection is conn and not conn.getautocommit():
                    conn.execute("ROLLBACK")
                raise
        return [self.get_run(b.run.run_id) for b in runs]


def _row_sequence(row: tuple[Any, ...], verifier: ChainVerifier) -> int:
    """A malformed row's sequence, or the position it holds if that too is damaged."""
    return row[1] if type(row[1]) is int else verifier.expected_sequence


def _action_row(r: tuple[Any, ...]) -> ActionRow:
    try:
        record = json.loads(r[2])
        if not isinstance(record, dict) or (record.get("action_id"), record.get("dedup_key")) != (
                r[1], r[4]):
            raise ValueError("the record does not describe this action")
        return ActionRow(run_id=r[0], action_id=r[1], record=record, lease_expires=r[3])
    except (ValueError, TypeError) as e:  # the index is derived from the log: refuse a bad row
        raise IntegrityError(
            f"the action index row {r[1]!r} of run {r[0]!r} is damaged: {e}",
            code="integrity.index_mismatch",
            hint=f"run `continuum verify {r[0]}`; the log was not changed",
            run_id=r[0], action_id=r[1],
        ) from e



"""The PostgreSQL backend: many agents on many hosts share one database (references/contract.md §3, §4).

Same behaviour as the SQLite store, and the same contract suite proves it. How:

- Per-run serialization: every write transaction takes ``pg_advisory_xact_lock`` on a
  64-bit hash of the run id, then reads the head (READ COMMITTED, so it sees the last
  committed head), appends and moves the head. Writers of one run queue instead of
  failing and retrying as SERIALIZABLE would on the single hot head row; writers of
  different runs never wait for each other. The (run_id, sequence) primary key stays as
  the backstop: a writer with a stale head gets ``ForkRejectedError``, never a fork.
- Event, head and index row in one transaction; payloads stored as canonical JSON text,
  so hashes are byte-identical to SQLite's.
- A lost COMMIT reply is never retried: the store ends the cut session if the server
  still runs it, waits for the run's lock (so the old transaction is over) and reads
  back whether the last event it sealed is there. The caller gets the event, or an error
  saying it was not recorded (``store.commit_not_applied``), or, if the server cannot be
  reached in time, ``store.commit_unknown``.
- Reads issued on a thread that has a write transaction open use that transaction's
  connection, so they see its own appends (``Continuum.checkpoint`` relies on it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from functools import partial
from typing import Any, TypeVar

import psycopg

from continuum.errors import (
    ContinuumError,
    IntegrityError,
    NotFoundError,
    StoreError,
)
from continuum.eventlog.canonical import canonical_json
from continuum.faults import fault_point
from continuum.log import get_logger
from continuum.store.approval_outbox import POSTGRES, Execute, backfill_approvals
from continuum.store.base import RunHead, check_run_id, now_timestamp
from continuum.store.core import RUN_TABLES, CoreStore, check_deletable, import_ids, verify_imported
from continuum.store.models import Run, RunExport, RunInfo
from continuum.store.pg_connection import (
    DEFAULT_LOCK_TIMEOUT_MS,
    DEFAULT_POOL_SIZE,
    ConnectionPool,
    PgConn,
    PgTarget,
    close_quietly,
    connect,
    is_connection_lost,
    parse_url,
    translate,
)
from continuum.store.pg_rows import (
    DELIVERER_LOCK_KEY,
    MIGRATION_LOCK_KEY,
    PgWriteTx,
    action_rows,
    insert_events,
    insert_run,
    put_action,
    put_approval,
    put_checkpoint,
    run_lock_key,
)
from continuum.store.pg_schema import PG_META_TABLE, PG_MIGRATIONS, PG_SCHEMA
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
from continuum.store.schema import SCHEMA_VERSION
from continuum.types import RunStatus

T = TypeVar("T")
ReadBack = Callable[[psycopg.Connection[Any]], bool]  # "are this transaction's writes there?"
PAGE = 1000  # events per round trip when reading a long log
DEFAULT_RESOLVE_TIMEOUT_S = 30.0

_log = get_logger("continuum.store")


class PostgresStorage(CoreStore):
    """A continuum store in one PostgreSQL database (schema ``continuum``).

    Safe for many processes on many hosts. Each object keeps a small pool of connections
    (``pool_size``); a write transaction binds its connection to the calling thread.
    ``_skip_durability_check`` is for the F10 negative control only.
    """

    def __init__(
        self,
        url: str,
        *,
        create: bool = True,
        pool_size: int = DEFAULT_POOL_SIZE,
        lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS,
        resolve_timeout_s: float = DEFAULT_RESOLVE_TIMEOUT_S,
        clock: Callable[[], str] | None = None,
        _skip_durability_check: bool = False,
    ) -> None:
        self._target: PgTarget = parse_url(url)
        self.url = self._target.display  # never the password
        self._clock = clock or now_timestamp
        self._lock_timeout_ms = lock_timeout_ms
        self._resolve_timeout_s = resolve_timeout_s
        self._check = not _skip_durability_check
        self._local = threading.local()
        # The pool gets a plain function, not a bound method: no cycle through the store,
        # so an unclosed store is collected (and its connections closed) at once.
        self._pool = ConnectionPool(
            partial(connect, self._target, lock_timeout_ms=lock_timeout_ms, check=self._check),
            pool_size,
            wait_s=lock_timeout_ms / 1000,
        )
        try:
            self._prepare(create=create)
        except BaseException:
            self._pool.close()
            raise

    # -- connections ----------------------------------------------------------------------

    def deliverer_lock(self) -> Callable[[], None] | None:
        """The store's one deliverer role (``deliverer.BackgroundDelivery``): a session
        advisory lock on a connection of its own, held until the returned release is called
        (or the connection ends: a killed deliverer frees it); None while another holds it."""
        pc = self._connect()
        try:
            with self._errors():
                got = pc.conn.execute(
                    "SELECT pg_try_advisory_lock(%s)", (DELIVERER_LOCK_KEY,)
                ).fetchone()
        except BaseException:
            close_quietly(pc)
            raise
        if not (got and got[0]):
            close_quietly(pc)
            return None
        return lambda: close_quietly(pc)

    def _connect(self) -> PgConn:
        return connect(self._target, lock_timeout_ms=self._lock_timeout_ms, check=self._check)

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except psycopg.Error as e:
            raise translate(e, self._target) from e

    def _bound(self) -> PgConn | None:
        pc: PgConn | None = getattr(self._local, "pc", None)
        return pc

    def _call(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run ``fn`` on this thread's transaction, else on a pooled connection.

        A pooled connection that turns out dead (the server restarted since it was last
        used) is replaced once: nothing was sent on it that could have taken effect.
        """
        bound = self._bound()
        if bound is not None:
            with self._errors():
                return fn(bound.conn)
        for attempt in range(2):
            pc, reused = self._pool.acquire()
            try:
                return fn(pc.conn)
            except psycopg.Error as e:
                if attempt == 0 and reused and is_connection_lost(e, pc.conn):
                    self._pool.drop_idle()
                    continue
                raise translate(e, self._target) from e
            finally:
                self._pool.release(pc)
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> PostgresStorage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema ---------------------------------------------------------------------------

    def _prepare(self, *, create: bool) -> None:
        version = self._call(_read_version)
        if version > SCHEMA_VERSION:
            raise schema_too_new(version)
        if version == SCHEMA_VERSION:
            return
        if version == 0 and not create:
            raise NotFoundError(
                f"no continuum store in {self.url}",
                code="not_found.store",
                hint="run `continuum init` (or `continuum start RUN --goal ...`) to create it",
                path=self.url,
            )
        self._call(self._migrate)

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        """Forward migrations, one transaction each, serialized across hosts."""
        # The same loop as SQLiteStorage._migrate, in PostgreSQL's words: an advisory lock
        # serializes migrating hosts (SQLite uses BEGIN IMMEDIATE), in schema continuum.
        version = _read_version(conn)
        while version < SCHEMA_VERSION:
            conn.execute("BEGIN")
            try:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
                version = _read_version(conn)  # another host may have migrated meanwhile
                if version > SCHEMA_VERSION:
                    raise schema_too_new(version)
                if version < SCHEMA_VERSION:
                    if version == 0:
                        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {PG_SCHEMA}")
                        conn.execute(PG_META_TABLE)
                    target = version + 1
                    for statement in PG_MIGRATIONS[target]:
                        conn.execute(statement)
                    if target == 3:  # the approval index of events already in the log
                        backfill_approvals(_fetch(conn), POSTGRES)
                    conn.execute(
                        "INSERT INTO continuum.meta (key, value) VALUES"
                        " ('schema_version', %s) ON CONFLICT (key) DO UPDATE"
                        " SET value = excluded.value",
                        (str(target),),
                    )
                    version = target
                conn.execute("COMMIT")
            except BaseException:
                if not conn.closed:
                    conn.rollback()
                raise

    def schema_version(self) -> int:
        return self._call(_read_version)

    # -- runs -----------------------------------------------------------------------------

    def create_run(self, run: Run, *, exist_ok: bool = False) -> RunInfo:
        check_run_id(run.run_id)
        created_at = self._clock()
        values = (
            run.run_id,
            run.goal,
            str(RunStatus.ACTIVE),
            created_at,
            canonical_json(run.metadata),
        )

        def insert(conn: psycopg.Connection[Any]) -> tuple[bool, RunInfo | None]:
            row = conn.execute(
                f"INSERT INTO continuum.runs ({RUN_COLUMNS}) VALUES (%s,%s,%s,%s,0,NULL,%s)"
                " ON CONFLICT (run_id) DO NOTHING RETURNING run_id",
                values,
            ).fetchone()
            if row is not None:
                return True, None
            found = conn.execute(
                f"SELECT {RUN_COLUMNS} FROM continuum.runs WHERE run_id = %s", (run.run_id,)
            ).fetchone()
            return False, run_from_row(found) if found is not None else None

        inserted, existing = self._call(insert)
        if not inserted and existing is not None:
            mine = (
                existing.created_at == created_at
                and existing.goal == run.goal
                and existing.metadata == run.metadata
            )  # our insert, seen on a retry
            if not mine and not exist_ok:
                raise run_exists(run.run_id)
            if not mine:
                return existing
        return self.get_run(run.run_id)

    def get_run(self, run_id: str) -> RunInfo:
        return run_from_row(self._run_row(run_id))

    def get_head(self, run_id: str) -> RunHead:
        """``get_run`` as plain data (no model built)."""
        return run_head(self._run_row(run_id))

    def _run_row(self, run_id: str) -> tuple[Any, ...]:
        row = self._call(
            lambda c: c.execute(
                f"SELECT {RUN_COLUMNS} FROM continuum.runs WHERE run_id = %s", (run_id,)
            ).fetchone()
        )
        if row is None:
            raise run_not_found(run_id)
        return tuple(row)

    def list_runs(self) -> list[RunInfo]:
        rows = self._call(
            lambda c: c.execute(
                f"SELECT {RUN_COLUMNS} FROM continuum.runs"
                ' ORDER BY created_at COLLATE "C", run_id COLLATE "C"'
            ).fetchall()
        )
        return [run_from_row(r) for r in rows]

    # -- write transactions ---------------------------------------------------------------

    def _begin(self, lock_keys: list[int], isolation: str = "READ COMMITTED") -> PgConn:
        """BEGIN and take the advisory locks, on a connection known to be alive."""
        for attempt in range(2):
            pc, reused = self._pool.acquire()
            try:
                pc.conn.execute(f"BEGIN ISOLATION LEVEL {isolation}")
                for key in sorted(set(lock_keys)):  # one order everywhere: no deadlock
                    pc.conn.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
                return pc
            except psycopg.Error as e:
                stale = attempt == 0 and reused and is_connection_lost(e, pc.conn)
                self._rollback_quietly(pc)
                self._pool.release(pc)
                if stale:
                    self._pool.drop_idle()
                    continue
                raise translate(e, self._target) from e
            except BaseException:
                self._rollback_quietly(pc)
                self._pool.release(pc)
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _rollback_quietly(pc: PgConn) -> None:
        if pc.usable:
            try:
                pc.conn.rollback()
            except psycopg.Error:
                close_quietly(pc)

    @contextmanager
    def _transaction(
        self, lock_keys: list[int], applied: Callable[[], ReadBack | None]
    ) -> Iterator[PgConn]:
        """BEGIN, locks, bind to this thread; COMMIT with a lost reply resolved by reading back.

        ``applied`` returns the read-back check for this transaction (None if it wrote nothing).
        """
        if self._bound() is not None:
            raise StoreError(
                "a write transaction is already open on this thread",
                code="store.nested_write",
                hint="finish the open `write` block before starting another",
            )
        pc = self._begin(lock_keys)
        self._local.pc = pc
        try:
            yield pc
            fault_point("before_append_commit")
            self._commit(pc, lock_keys, applied())
        except BaseException:
            self._rollback_quietly(pc)
            raise
        finally:
            self._local.pc = None
            self._pool.release(pc)

    def _commit(self, pc: PgConn, lock_keys: list[int], applied: ReadBack | None) -> None:
        try:
            pc.conn.commit()
        except psycopg.Error as e:
            if not is_connection_lost(e, pc.conn):
                raise translate(e, self._target) from e  # the server refused: rolled back
            if applied is None:
                return  # nothing was written: either outcome is the same
            self._resolve_lost_commit(pc, lock_keys, applied, e)

    def _resolve_lost_commit(
        self, old: PgConn, lock_keys: list[int], applied: ReadBack, cause: BaseException
    ) -> None:
        """COMMIT was sent and its reply lost: read back the outcome, never retry it."""
        deadline = time.monotonic() + self._resolve_timeout_s
        delay = 0.05
        while True:
            try:
                outcome = self._read_back(old, lock_keys, applied)
                break
            except IntegrityError:
                raise
            except (ContinuumError, psycopg.Error) as e:
                if time.monotonic() >= deadline:
                    _log.error(
                        "store.commit_outcome_unknown",
                        store=self.url,
                        error=self._target.scrub(str(e)),
                    )
                    raise StoreError(
                        f"the connection to {self.url} was lost during COMMIT and the outcome "
                        "could not be read back",
                        code="store.commit_unknown",
                        hint="do not repeat the operation or its side effect blindly: once the "
                        "server is reachable, check the run (`continuum events`, "
                        "`continuum actions`) to see whether it was recorded",
                    ) from cause
                time.sleep(delay)  # back off while the server comes back
                delay = min(delay * 2, 1.0)
        if outcome:
            _log.warning("store.commit_reply_lost", store=self.url, resolved="committed")
            return
        _log.warning("store.commit_reply_lost", store=self.url, resolved="not_committed")
        raise StoreError(
            f"the connection to {self.url} was lost during COMMIT; reading back shows the "
            "transaction was NOT committed: nothing was recorded",
            code="store.commit_not_applied",
            hint="the operation did not happen; it is safe to retry it",
        ) from cause

    def _read_back(self, old: PgConn, lock_keys: list[int], applied: ReadBack) -> bool:
        pc = self._connect()
        try:
            conn = pc.conn
            # End the cut session if the server still runs it: its outcome is then final.
            # If that is not allowed, the lock wait below still waits for it to end.
            with suppress(psycopg.Error):
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE pid = %s AND backend_start::text = %s"
                    " AND application_name = %s",
                    (old.backend_pid, old.backend_start, old.application_name),
                )
            conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
            for key in sorted(set(lock_keys)):  # held by the old transaction until it ends
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
            outcome = applied(conn)
            conn.rollback()
            return outcome
        finally:
            close_quietly(pc)

    @contextmanager
    def write(self, run_id: str) -> Iterator[PgWriteTx]:
        """One serialized write transaction on ``run_id``: all of it commits, or none."""
        holder: list[PgWriteTx] = []

        def applied() -> ReadBack | None:
            tx = holder[0]
            return tx.applied if tx.wrote else None

        with self._transaction([run_lock_key(run_id)], applied) as pc:
            with self._errors():
                row = pc.conn.execute(
                    f"SELECT {RUN_COLUMNS} FROM continuum.runs WHERE run_id = %s", (run_id,)
                ).fetchone()
            if row is None:
                raise run_not_found(run_id)
            holder.append(PgWriteTx(pc, run_head(row), self._clock, self._errors))
            yield holder[0]
        self._kept(holder[0])
        fault_point("after_append_commit")
        if self.observer is not None:
            self._committed(holder[0])

    # -- reading events -------------------------------------------------------------------

    def _page(self, run_id: str, after: int, upto: int | None) -> list[tuple[Any, ...]]:
        bound = "" if upto is None else " AND sequence <= %s"
        params: tuple[Any, ...] = (run_id, after) + (() if upto is None else (upto,)) + (PAGE,)
        return self._call(
            lambda c: c.execute(
                f"SELECT {EVENT_COLUMNS} FROM continuum.events WHERE run_id = %s AND sequence > %s"
                f"{bound} ORDER BY sequence LIMIT %s",
                params,
            ).fetchall()
        )

    def _event_rows(self, run_id: str, after: int, upto: int | None) -> Iterator[tuple[Any, ...]]:
        """A run's rows in order, a page per round trip (a long log is never held whole)."""
        last = after
        while rows := self._page(run_id, last, upto):
            yield from rows
            if type(rows[-1][1]) is not int:
                return  # a damaged sequence: the verify loop reports it
            last = rows[-1][1]

    def event_hash_at(self, run_id: str, sequence: int) -> str | None:
        row = self._call(
            lambda c: c.execute(
                "SELECT hash FROM continuum.events WHERE run_id = %s AND sequence = %s",
                (run_id, sequence),
            ).fetchone()
        )
        return str(row[0]) if row is not None else None

    def _first_sequence(self, run_id: str) -> int | None:
        row = self._call(
            lambda c: c.execute(
                "SELECT min(sequence) FROM continuum.events WHERE run_id = %s", (run_id,)
            ).fetchone()
        )
        return int(row[0]) if row is not None and row[0] is not None else None

    def _latest_of_type(self, run_id: str, type_: str) -> tuple[Any, ...] | None:
        # Walks the (run_id, sequence) key back from the head: the latest marker is near it.
        row: tuple[Any, ...] | None = self._call(
            lambda c: c.execute(
                f"SELECT {EVENT_COLUMNS} FROM continuum.events WHERE run_id = %s AND type = %s"
                " ORDER BY sequence DESC LIMIT 1",
                (run_id, type_),
            ).fetchone()
        )
        return row

    def count_events(self, run_id: str) -> int:
        """Rows stored for ``run_id``, whatever their sequence (for the runtime's one-pass
        verify, as on SQLite)."""
        row = self._call(
            lambda c: c.execute(
                "SELECT count(*) FROM continuum.events WHERE run_id = %s", (run_id,)
            ).fetchone()
        )
        return int(row[0]) if row is not None else 0

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """Reads on this thread share one REPEATABLE READ snapshot (or the open write's)."""
        if self._bound() is not None:
            yield
            return
        pc = self._begin([], isolation="REPEATABLE READ READ ONLY")
        self._local.pc = pc
        try:
            yield
        finally:
            self._local.pc = None
            self._rollback_quietly(pc)
            self._pool.release(pc)

    # -- actions and checkpoints ----------------------------------------------------------

    def _action_rows(
        self, run_id: str, column: str | None, value: str | None
    ) -> list[tuple[Any, ...]]:
        return self._call(lambda c: action_rows(c, run_id, column, value))

    def renew_lease(self, run_id: str, action_id: str, lease_expires: float) -> None:
        # One idempotent statement: safe to send again on a fresh connection.
        self._call(
            lambda c: c.execute(
                "UPDATE continuum.actions SET lease_expires = %s WHERE run_id = %s AND action_id = %s",
                (lease_expires, run_id, action_id),
            )
        )

    def _action_page(
        self, run_id: str, statuses: tuple[str, ...], after: int, limit: int, *, few: bool
    ) -> list[tuple[Any, ...]]:
        return self._call(
            lambda c: c.execute(
                f"SELECT position, {ACTION_COLUMNS} FROM continuum.actions WHERE run_id = %s"
                " AND status = ANY(%s) AND position > %s ORDER BY position LIMIT %s",
                (run_id, list(statuses), after, limit),
            ).fetchall()
        )

    # -- approvals and the outbox (store/approval_outbox.py) --------------------------------

    _dialect = POSTGRES

    def _read(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self._call(lambda c: c.execute(sql, params).fetchall())

    def _transact(self, fn: Callable[[Execute], T]) -> T:
        # Outbox bookkeeping is at least once by design: a lost COMMIT reply here means a
        # notification may be claimed or sent again, never lost, so it is not read back.
        def run(conn: psycopg.Connection[Any]) -> T:
            def execute(sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
                cur = conn.execute(sql, params)
                return cur.fetchall() if cur.description is not None else []

            with conn.transaction():
                return fn(execute)

        return self._call(run)

    def _checkpoint_rows(self, run_id: str, limit: int | None = None) -> list[tuple[Any, ...]]:
        return self._call(
            lambda c: c.execute(
                f"SELECT {CHECKPOINT_COLUMNS} FROM continuum.checkpoints WHERE run_id = %s"
                " ORDER BY sequence DESC LIMIT %s",
                (run_id, limit),
            ).fetchall()
        )

    # -- import ---------------------------------------------------------------------------

    def import_runs(self, runs: list[RunExport]) -> list[RunInfo]:
        """Write exported runs exactly as they are, all in one transaction (see Storage)."""
        ids = import_ids(runs)

        def applied(conn: psycopg.Connection[Any]) -> bool:
            found = conn.execute(
                "SELECT count(*) FROM continuum.runs WHERE run_id = ANY(%s)"
                " AND created_at = ANY(%s)",
                (ids, [b.run.created_at for b in runs]),
            ).fetchone()
            return found is not None and found[0] == len(ids)

        keys = [run_lock_key(i) for i in ids]
        with self._transaction(keys, lambda: applied if runs else None) as pc:
            with self._errors():
                conn = pc.conn
                taken = conn.execute(
                    "SELECT run_id FROM continuum.runs WHERE run_id = ANY(%s)", (ids,)
                ).fetchall()
                if taken:
                    raise run_exists(taken[0][0], self.url)
                for bundle in runs:
                    insert_run(conn, bundle.run)
                    insert_events(conn, bundle.events)
                    for action in bundle.actions:
                        put_action(conn, action)
                    for cp in bundle.checkpoints:
                        put_checkpoint(conn, cp)
                    for approval in bundle.approvals:
                        put_approval(conn, approval)
            verify_imported(self, runs)  # every chain re-verified inside the transaction
        return [self.get_run(i) for i in ids]

    # -- delete (prune) -------------------------------------------------------------------

    def delete_run(self, run_id: str, *, expect_head: tuple[int, str | None]) -> None:
        """Delete a finished run, all its rows, in one transaction (see Storage). Under the
        run's advisory lock, so no append can slip in between the checks and the delete;
        a lost COMMIT reply is resolved by reading back whether the run is gone."""

        def gone(conn: psycopg.Connection[Any]) -> bool:
            return (
                conn.execute("SELECT 1 FROM continuum.runs WHERE run_id = %s", (run_id,)).fetchone()
                is None
            )

        with self._transaction([run_lock_key(run_id)], lambda: gone) as pc:
            with self._errors():
                conn = pc.conn
                row = conn.execute(
                    f"SELECT {RUN_COLUMNS} FROM continuum.runs WHERE run_id = %s", (run_id,)
                ).fetchone()
                if row is None:
                    raise run_not_found(run_id)
                run = run_from_row(row)
                # Every table with a run_id column: the known ones are emptied for the run,
                # rows of the run in any other make check_deletable refuse.
                per_run = [
                    str(r[0])
                    for r in conn.execute(
                        "SELECT table_name FROM information_schema.columns WHERE table_schema = %s"
                        " AND column_name = 'run_id'",
                        (PG_SCHEMA,),
                    ).fetchall()
                ]
                tables = [t for t in RUN_TABLES if t in per_run]
                unknown = [
                    t
                    for t in per_run
                    if t not in (*RUN_TABLES, "events", "runs")
                    and conn.execute(
                        f'SELECT 1 FROM {PG_SCHEMA}."{t}" WHERE run_id = %s LIMIT 1', (run_id,)
                    ).fetchone()
                    is not None
                ]
                counted = conn.execute(
                    "SELECT count(*) FROM continuum.events WHERE run_id = %s", (run_id,)
                ).fetchone()
                last = conn.execute(
                    "SELECT hash FROM continuum.events WHERE run_id = %s AND sequence = %s",
                    (run_id, run.head_sequence),
                ).fetchone()
                check_deletable(
                    run,
                    expect_head,
                    rows=int(counted[0]) if counted else 0,
                    head_hash=last[0] if last else None,
                    unknown_tables=unknown,
                )
                for table in tables:
                    conn.execute(f"DELETE FROM continuum.{table} WHERE run_id = %s", (run_id,))
                conn.execute("DELETE FROM continuum.events WHERE run_id = %s", (run_id,))
                conn.execute("DELETE FROM continuum.runs WHERE run_id = %s", (run_id,))
            fault_point("before_delete_commit")
        fault_point("after_delete_commit")


def _fetch(conn: psycopg.Connection[Any]) -> Execute:
    """``execute(sql, params) -> rows`` on ``conn`` (no rows for a statement without any)."""

    def execute(sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description is not None else []

    return execute


def _read_version(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT to_regclass('continuum.meta') IS NOT NULL,"
        " (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        "  WHERE n.nspname = %s)",
        (PG_SCHEMA,),
    ).fetchone()
    assert row is not None
    has_meta, relations = row
    if not has_meta:
        if relations:
            raise StoreError(
                f"schema {PG_SCHEMA!r} in this database holds tables that are not a continuum "
                "store",
                code="store.foreign_database",
                hint="point --db at another database; this one was left untouched",
            )
        return 0
    found = conn.execute("SELECT value FROM continuum.meta WHERE key = 'schema_version'").fetchone()
    return int(found[0]) if found is not None else 0

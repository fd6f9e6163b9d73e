"""A consistent copy of a live SQLite store, taken while writers go on (``continuum backup``).

SQLite's online backup API copies the database page by page. On its own it reads each
step in a new read transaction and starts over whenever another connection wrote in
between, which under steady appends may never finish. Here the source connection opens
one read transaction first and keeps it for the whole copy: in WAL mode that pins one
snapshot (writers append to the WAL meanwhile, never blocked), every step reads that
snapshot, and the copy is exactly the store as it was at that moment, however many steps
it takes (so progress can be reported between them).

The copy is written into a file the caller created (mode 0600); this module opens it
through the same SQLite library as the store (never a second one in the process).

``read_layout`` and ``layout_of_version`` let ``verify-backup`` and ``restore`` compare a
copy's schema (tables with their columns and constraints, indexes, triggers, views) with
the one a store of its version has, before the copy is ever opened as a store: a trigger
added to a backup (say, one that empties the action index whenever an event is written)
would otherwise be restored and run in the new store. ``read_outbox`` reads the
notification outbox of a copy, to be checked against its log.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote as url_quote

import apsw

from continuum.faults import fault_point
from continuum.store.approval_outbox import OUTBOX_COLUMNS
from continuum.store.schema import MIGRATIONS
from continuum.store.sqlite_files import (
    DEFAULT_BUSY_TIMEOUT_MS,
    check_sqlite_library,
    translate_errors,
)

SchemaObject = tuple[str, str, str, str | None]  # (type, name, table, normalized SQL)
META_TABLE = "CREATE TABLE continuum_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
# Tables SQLite itself may add to any database (ANALYZE's statistics): data for the query
# planner, no code; their SQL is SQLite's own.
SQLITE_OWN = {"sqlite_stat1", "sqlite_stat4"}

PAGES_PER_STEP = 2048


def snapshot_copy(
    source: Path,
    dest: Path,
    *,
    progress: Callable[[int, int], None] | None = None,
    pages_per_step: int = PAGES_PER_STEP,
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
) -> int:
    """Copy the store at ``source`` into the empty file ``dest`` as of one moment; returns
    the number of pages copied. ``progress(done, total)`` is called between steps."""
    check_sqlite_library()
    with translate_errors():
        src = apsw.Connection(
            str(source), flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_NOFOLLOW
        )
        try:
            src.setbusytimeout(busy_timeout_ms)
            src.execute("BEGIN")
            src.execute("SELECT count(*) FROM sqlite_master").fetchall()  # pins the snapshot
            dst = apsw.Connection(
                str(dest), flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_NOFOLLOW
            )
            try:
                dst.setbusytimeout(busy_timeout_ms)
                with dst.backup("main", src, "main") as b:
                    while not b.done:
                        b.step(pages_per_step)
                        if progress is not None:
                            progress(b.pagecount - b.remaining, b.pagecount)
                        fault_point("backup_step")
                    pages = b.pagecount
            finally:
                dst.close()
            src.execute("COMMIT")
        finally:
            src.close()
    return int(pages)


def _normalized(sql: Any) -> str | None:
    """SQL text as a layout compares it: whitespace runs collapsed, none around ( ) ,."""
    if sql is None:
        return None
    collapsed = " ".join(str(sql).split())
    return re.sub(r"\s*([(),])\s*", r"\1", collapsed)


def _objects(conn: apsw.Connection) -> list[SchemaObject]:
    rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    return sorted(
        (str(kind), str(name), str(table), _normalized(sql))
        for kind, name, table, sql in rows
        if not (kind == "table" and name in SQLITE_OWN)
    )


def _read_only(path: Path) -> apsw.Connection:
    # immutable: the copy is private to the caller and has no -wal; nothing is locked,
    # created or written, and a hostile file is only read.
    uri = f"file:{url_quote(str(path.absolute()))}?mode=ro&immutable=1"
    flags = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI | apsw.SQLITE_OPEN_NOFOLLOW
    return apsw.Connection(uri, flags=flags)


def read_layout(path: Path) -> tuple[Any, list[SchemaObject]]:
    """(the schema version the copy's ``continuum_meta`` records, or None; every schema
    object in it), read without opening it as a store."""
    check_sqlite_library()
    with translate_errors():
        conn = _read_only(path)
        try:
            objects = _objects(conn)
            version: Any = None
            if any(o[:2] == ("table", "continuum_meta") for o in objects):
                found = conn.execute(
                    "SELECT value FROM continuum_meta WHERE key = 'schema_version'"
                ).fetchall()
                version = found[0][0] if found else None
            return version, objects
        finally:
            conn.close()


def layout_of_version(version: int) -> list[SchemaObject]:
    """The schema objects of a continuum store at ``version``: the migrations 1..version
    (and ``continuum_meta``) applied to an empty database in memory."""
    check_sqlite_library()
    conn = apsw.Connection(":memory:")
    try:
        conn.execute(META_TABLE)
        for v in range(1, version + 1):
            for statement in MIGRATIONS[v]:
                conn.execute(statement)
        return _objects(conn)
    finally:
        conn.close()


def read_outbox(path: Path) -> list[tuple[Any, ...]]:
    """Every row of a copy's notification outbox (``OUTBOX_COLUMNS``), read-only."""
    check_sqlite_library()
    with translate_errors():
        conn = _read_only(path)
        try:
            return [tuple(r) for r in conn.execute(f"SELECT {OUTBOX_COLUMNS} FROM outbox")]
        finally:
            conn.close()

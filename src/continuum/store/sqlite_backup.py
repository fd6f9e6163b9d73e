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
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import apsw

from continuum.faults import fault_point
from continuum.store.sqlite_files import (
    DEFAULT_BUSY_TIMEOUT_MS,
    check_sqlite_library,
    translate_errors,
)

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

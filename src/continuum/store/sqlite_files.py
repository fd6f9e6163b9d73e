"""The SQLite store's files: which SQLite library and which paths are safe to use, how a new
store file is created, and how apsw's errors become continuum's (once, here).

Why apsw: the system SQLite here (3.40.1) is inside the WAL-reset corruption range
(3.7.0-3.51.2); apsw bundles a fixed one and offers a VFS layer for fault injection.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import Literal

import apsw

from continuum.errors import (
    DiskFullError,
    ForkRejectedError,
    IntegrityError,
    NotFoundError,
    StoreBusyError,
    StoreError,
    StoreIOError,
    UnsafeLibraryError,
    UsageError,
)
from continuum.untrusted import as_typed

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


# -- paths as text: ``str(pathlib.Path(...))`` without loading pathlib -------------------------
# A hook process opens the store once per tool call, and pathlib (with the urllib.parse and
# ipaddress it imports) was about a tenth of a registered call's instructions. These give
# exactly what ``str(Path(p))``, ``str(Path(p).parent)`` and ``str(Path(p).absolute())``
# give on POSIX (tests/property/test_path_text.py).


def _pieces(path: str | os.PathLike[str]) -> tuple[str, list[str]]:
    text = os.fspath(path)
    if not isinstance(text, str):
        raise TypeError(f"a store path is text, not {type(text).__name__}")
    if text.startswith("/"):
        lead = "//" if text.startswith("//") and not text.startswith("///") else "/"
    else:
        lead = ""
    return lead, [p for p in text.split("/") if p and p != "."]


def _joined(lead: str, parts: list[str]) -> str:
    return lead + "/".join(parts) if lead or parts else "."


def path_text(path: str | os.PathLike[str]) -> str:
    """``str(Path(path))``: repeated slashes and ``.`` parts dropped, ``..`` kept."""
    return _joined(*_pieces(path))


def parent_text(path: str | os.PathLike[str]) -> str:
    """``str(Path(path).parent)``."""
    lead, parts = _pieces(path)
    return _joined(lead, parts[:-1])


def absolute_text(path: str | os.PathLike[str]) -> str:
    """``str(Path(path).absolute())``: joined to the working directory, not resolved."""
    lead, parts = _pieces(path)
    if lead:
        return _joined(lead, parts)
    cwd_lead, cwd_parts = _pieces(os.getcwd())
    return _joined(cwd_lead, cwd_parts + parts)


def check_sqlite_path(path: str | os.PathLike[str], *, create: bool) -> bool:
    """Refuse anything that is not a usable database path; return True if it exists.

    With ``create=False`` a missing path, or an empty file (0 bytes, no -wal), is
    ``not_found.store``: a command that only opens a store never makes one of a stray
    file. Nothing is created or touched here: a refused path is left exactly as it was.
    """
    text = path_text(path)
    if not text or text.startswith("-"):
        raise UsageError(
            f"store path {as_typed(text)} is not usable",
            code="store.bad_url",
            hint="give a file path, sqlite:///abs/path.db or postgresql://...",
        )
    if os.path.islink(text):
        raise StoreError(
            f"store path {as_typed(text)} is a symbolic link",
            code="store.symlink",
            hint="point --db at the real file (symlinks are refused so a link cannot redirect writes)",
        )
    try:
        st = os.stat(text)
    except FileNotFoundError:
        parent = parent_text(text)
        if not os.path.isdir(parent):
            raise StoreError(
                f"directory {as_typed(parent)} for store {as_typed(text)} does not exist",
                code="store.missing_directory",
                hint="create the directory first, or point --db / CONTINUUM_DB elsewhere",
                path=text,
            ) from None
        if not create:
            raise no_store(text) from None
        return False
    except OSError as e:
        raise StoreError(
            f"cannot stat store {as_typed(text)}: {e.strerror}",
            code="store.unusable",
            hint="check the path and its permissions",
        ) from e
    if stat.S_ISDIR(st.st_mode):
        raise StoreError(
            f"store path {as_typed(text)} is a directory",
            code="store.is_directory",
            hint="name a database file inside it, e.g. --db DIR/continuum.db",
        )
    if not stat.S_ISREG(st.st_mode):
        raise StoreError(
            f"store path {as_typed(text)} is not a regular file",
            code="store.not_regular_file",
            hint="point --db at a database file, not a device, FIFO or socket",
        )
    if st.st_size == 0 and not create and holds_no_database(text):
        raise no_store(text, empty=True)
    if st.st_size > 0:
        try:
            with open(text, "rb") as f:
                header = f.read(len(SQLITE_HEADER))
        except OSError as e:
            raise StoreError(
                f"cannot read store {as_typed(text)}: {e.strerror}",
                hint="check the file's permissions",
            ) from e
        if header != SQLITE_HEADER:
            raise StoreError(
                f"{as_typed(text)} is not a SQLite database",
                code="store.not_a_database",
                hint="point --db at a continuum store; this file was left untouched",
            )
    return True


def holds_no_database(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an empty file (0 bytes) with no write-ahead log beside it: no
    store is in it yet. (A store's first page is written when it is created, so a real
    one is never 0 bytes; a -wal with frames could still hold its pages.)"""
    try:
        text = path_text(path)
        if os.stat(text).st_size > 0:
            return False
        return os.stat(f"{text}-wal").st_size == 0
    except FileNotFoundError:
        return True
    except OSError:
        return False


def no_store_words(
    absolute: str, *, empty: bool, chosen: str | None = None, init: str = "continuum init"
) -> tuple[str, str]:
    """The message and hint for a store that is not there (``not_found.store``).

    ``absolute``: the store's absolute path; ``empty``: a 0-byte file is there instead;
    ``chosen``: how the path was chosen (``from --db x.db``; the CLI knows, the store
    does not); ``init``: the command that would create a store there. The hint names the
    ways to point at another store first: a person in the wrong directory needs those,
    not a second, empty store."""
    how = f" ({chosen})" if chosen else ""
    if empty:
        message = (
            f"no store at {as_typed(absolute)}{how}: the file is empty (0 bytes); "
            "it was left untouched"
        )
        meant = f"only if you meant to make this file a new store, run `{init}`"
    else:
        message = f"no store at {as_typed(absolute)}{how}"
        meant = f"only if you meant a new store there, run `{init}`"
    hint = (
        "if your store is elsewhere, point at it with --db URL or CONTINUUM_DB "
        f"(`continuum where` shows the store a command would use); {meant}"
    )
    return message, hint


def no_store(path: str | os.PathLike[str], *, empty: bool = False) -> NotFoundError:
    """``not_found.store`` for ``path`` (as typed): missing, or an empty file."""
    absolute = absolute_text(path)
    message, hint = no_store_words(absolute, empty=empty)
    return NotFoundError(
        message,
        code="not_found.store",
        hint=hint,
        path=path_text(path),
        absolute_path=absolute,
        empty=empty,
    )


def create_private(path: str | os.PathLike[str]) -> None:
    """Create the (empty) database file readable and writable by its owner only.

    A store holds goals, arguments and results an agent wrote; SQLite would create the file
    with the umask's mode (often world-readable), and gives its ``-wal``/``-shm`` files the
    database file's mode, so creating it 0600 first covers all three.
    """
    try:
        fd = os.open(path_text(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return  # another process created it a moment ago: it is theirs to have made
    except OSError as e:
        raise StoreError(
            f"cannot create store {as_typed(path_text(path))}: {e.strerror}",
            code="store.unusable",
            hint="check the directory's permissions",
        ) from e
    os.close(fd)


def on_read_only_file_system(path: str | os.PathLike[str]) -> bool:
    """Whether ``path``'s directory is on a file system mounted read-only."""
    try:
        return bool(os.statvfs(parent_text(path)).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def translated_error(
    e: BaseException, discard: Callable[[], None] | None = None
) -> BaseException | None:
    """The continuum error an apsw error (or a stored text that is not UTF-8) stands for,
    or None for anything else (it passes through unchanged): the one mapping of the store
    boundary (``translate_errors``).

    ``discard`` drops the store's connection after an error that leaves its state in doubt
    (disk full, I/O error, corruption): the next use opens a fresh one.
    """
    if isinstance(e, UnicodeDecodeError):  # a stored text that is not UTF-8: damaged
        return IntegrityError(
            "the database file is damaged: a stored text is not valid UTF-8",
            code="integrity.database_corrupt",
            hint="stop writing to it, keep a copy, and restore from a backup or export",
        )
    if not isinstance(e, apsw.Error):
        return None
    if isinstance(e, apsw.ConstraintError):
        return ForkRejectedError(
            "write rejected by a uniqueness constraint (a concurrent writer got there first)",
            hint="retry the operation; the chain was not changed",
            detail=str(e),
        )
    if isinstance(e, (apsw.BusyError, apsw.LockedError)):
        return StoreBusyError(
            "the store stayed locked by another writer past the busy timeout",
            hint="retry, or look for a process holding a long write transaction",
        )
    if isinstance(e, apsw.ReadOnlyError):
        return StoreError(
            "the store cannot be written: it is read-only (a read-only file system, or a "
            "file this process may not write); reading it works, nothing was changed",
            code="store.read_only",
            hint="copy the store to a writable place (`continuum backup`, then `restore` "
            "there), or remount the file system read-write, then write again",
        )
    if discard is not None and not isinstance(e, apsw.SQLError):
        discard()  # the handle's state is in doubt: the next use opens a fresh one
    if isinstance(e, apsw.FullError):
        return DiskFullError(
            "the disk is full; the write was not acknowledged and nothing was recorded",
            hint="free disk space, then retry; earlier data is intact",
        )
    if isinstance(e, (apsw.CorruptError, apsw.NotADBError)):
        return IntegrityError(
            f"the database file is damaged: {e}",
            code="integrity.database_corrupt",
            hint="stop writing to it, keep a copy, and restore from a backup or export",
        )
    if isinstance(e, apsw.IOError):
        return StoreIOError(
            f"I/O error in the store: {e}; the write was not acknowledged",
            hint="check the disk and the file system, then retry",
        )
    return StoreError(f"store error: {e}", hint="see the message; nothing was changed")


class translate_errors:  # noqa: N801 (named and used as a function: `with translate_errors():`)
    """Map apsw errors to continuum errors, once, at the store boundary
    (``translated_error``), each raised from the apsw error it stands for. A class, not a
    generator: every read and write of the store enters one, and a generator's frame costs
    several times more."""

    __slots__ = ("_discard",)

    def __init__(self, discard: Callable[[], None] | None = None) -> None:
        self._discard = discard

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, e: BaseException | None, tb: object) -> Literal[False]:
        if e is not None:
            mapped = translated_error(e, self._discard)
            if mapped is not None:
                raise mapped from e
        return False

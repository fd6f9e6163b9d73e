"""Private files that appear whole or not at all: backups, archives, restored stores.

A file is written under a temporary name next to its destination (``.NAME.PID.partial``,
created exclusively, mode 0600), flushed and fsynced, then linked to its final name
(which refuses a destination that exists, even one created a moment ago by someone
else), and the directory is fsynced. A process killed before the link leaves only the
temporary file, whose name says what it is; nothing takes it for the real one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from continuum.errors import StoreIOError, UsageError
from continuum.faults import fault_point
from continuum.untrusted import as_typed

CHUNK = 1 << 20


def refuse_existing(path: Path, what: str) -> None:
    """A destination must be new: never overwrite a file (or a directory, or a link)."""
    if path.exists() or path.is_symlink():
        raise UsageError(
            f"{as_typed(str(path))} exists; a {what} is only written to a new file",
            code="usage.file_exists",
            hint="choose a path that does not exist yet; nothing was written",
        )
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(
            f"the directory of {as_typed(str(path))} does not exist",
            code="usage.bad_path",
            hint="create the directory first, or choose another path; nothing was written",
        )


def partial_name(path: Path, tag: str = "partial") -> Path:
    """The temporary name for ``path`` while it is being written."""
    return path.with_name(f".{path.name}.{os.getpid()}.{tag}")


def create_private(path: Path) -> BinaryIO:
    """A new file (refused if it exists), readable and writable by its owner only."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError as e:
        raise UsageError(
            f"{as_typed(str(path))} exists",
            code="usage.file_exists",
            hint="remove the leftover of an interrupted run, or choose another path",
        ) from e
    except OSError as e:
        raise StoreIOError(
            f"cannot create {as_typed(str(path))}: {e.strerror}",
            code="store.io",
            hint="check the directory and its permissions",
        ) from e
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "wb")


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make a new name in ``path`` durable (the rename or link that created it)."""
    fd = os.open(path if str(path) else ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(temporary: Path, final: Path) -> None:
    """Give a complete, fsynced ``temporary`` file its ``final`` name, refusing an existing
    one; the temporary name is removed and the directory fsynced."""
    try:
        os.link(temporary, final)
    except FileExistsError as e:
        raise UsageError(
            f"{as_typed(str(final))} appeared while it was being written; it was left as it is",
            code="usage.file_exists",
            hint=f"the complete copy is {as_typed(str(temporary))}",
        ) from e
    os.unlink(temporary)
    fsync_dir(final.parent)


def discard(*paths: Path) -> None:
    """Remove our own temporary files (and a SQLite copy's -wal/-shm) after a failure."""
    for path in paths:
        for p in (
            path,
            path.with_name(path.name + "-wal"),
            path.with_name(path.name + "-shm"),
            path.with_name(path.name + "-journal"),
        ):
            with contextlib.suppress(OSError):
                p.unlink()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def written_whole(final: Path, what: str) -> Iterator[tuple[BinaryIO, Path]]:
    """Write a new private file: yields (the open temporary file, its path); on success
    it is fsynced and published as ``final``; on any failure it is removed."""
    refuse_existing(final, what)
    temporary = partial_name(final)
    f = create_private(temporary)
    try:
        with f:
            yield f, temporary
            f.flush()
            os.fsync(f.fileno())
        fault_point("before_publish")
        publish(temporary, final)
    except BaseException:
        discard(temporary)
        raise

"""Store selection: ``open_store(url)`` for paths, ``sqlite:///`` and ``postgresql://`` URLs.

A malformed URL, a directory, a non-database file or an unknown scheme is refused with a
one-line error naming the problem, and nothing is created or touched.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from continuum.errors import NotFoundError, StoreError, UsageError
from continuum.store.base import (
    DEFAULT_PAGE,
    MAX_PAGE,
    ActionRow,
    Storage,
    WriteTx,
)
from continuum.store.sqlite import SQLiteStorage, check_sqlite_path
from continuum.store.sqlite_files import holds_no_database, path_text
from continuum.untrusted import as_typed

if TYPE_CHECKING:
    from pathlib import Path

    from continuum.store.models import CheckpointRow, Run, RunExport, RunInfo
else:

    def __getattr__(name: str) -> Any:
        # The row models (pydantic) load on first use (``base.py``).
        if name in ("CheckpointRow", "Run", "RunExport", "RunInfo"):
            from continuum.store import models

            return getattr(models, name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


DEFAULT_DB = "continuum.db"

__all__ = [
    "ActionRow",
    "CheckpointRow",
    "Run",
    "RunExport",
    "RunInfo",
    "SQLiteStorage",
    "Storage",
    "WriteTx",
    "open_store",
    "probe_store",
    "resolve_url",
    "url_source",
    "url_text",
    "is_postgres_url",
    "redact_url",
    "DEFAULT_DB",
    "DEFAULT_PAGE",
    "MAX_PAGE",
]


def resolve_url(flag: str | None, env: dict[str, str] | os._Environ[str] | None = None) -> str:
    """``--db`` flag, else ``CONTINUUM_DB``, else ``./continuum.db`` (references/contract.md §2)."""
    env = os.environ if env is None else env
    if flag is not None:  # an explicit but empty --db ("$UNSET") is refused, never the default
        return flag
    if env.get("CONTINUUM_DB"):
        return env["CONTINUUM_DB"]
    return DEFAULT_DB


def url_source(flag: str | None, env: dict[str, str] | os._Environ[str] | None = None) -> str:
    """How ``resolve_url`` chose the store: ``--db``, ``CONTINUUM_DB`` or ``default``."""
    env = os.environ if env is None else env
    if flag is not None:
        return "--db"
    return "CONTINUUM_DB" if env.get("CONTINUUM_DB") else "default"


def _bad(url: str, why: str) -> UsageError:
    return UsageError(
        f"store URL {as_typed(url)} is not usable: {why}",
        code="store.bad_url",
        hint="give a file path, sqlite:///abs/path.db or postgresql://user@host/db",
    )


def sqlite_path_from_url(url: str) -> Path:
    """The file a SQLite store URL names (``sqlite_file_from_url``) as a ``Path``."""
    from pathlib import Path  # not on a hook's path (see sqlite_file_from_url)

    return Path(sqlite_file_from_url(url))


def sqlite_file_from_url(url: str) -> str:
    """The file a SQLite store URL names, as ``str(Path(...))`` gives it: a plain path,
    or ``sqlite:///ABSOLUTE/PATH``; anything else is refused (``store.bad_url``). Text,
    so that opening a store does not load pathlib (a hook opens one per tool call)."""
    if not url or not url.strip():
        raise _bad(url, "it is empty")
    if "\x00" in url:
        raise _bad(url, "it contains a NUL byte")
    if url == ":memory:" or url.startswith("file:"):
        raise _bad(url, "in-memory and file: URIs are not durable stores")
    if url.startswith("sqlite:"):
        if not url.startswith("sqlite:///") or len(url) <= len("sqlite:///"):
            raise _bad(url, "write sqlite:///ABSOLUTE/PATH.db (three slashes and a path)")
        rest = url[len("sqlite://") :]
        if "?" in rest or "#" in rest:
            raise _bad(url, "query strings and fragments are not supported")
        return path_text(rest)
    if "://" in url:
        scheme = url.split("://", 1)[0]
        raise _bad(url, f"unsupported scheme {scheme!r} (use sqlite:/// or postgresql://)")
    return path_text(url)


def probe_store(url: str) -> bool:
    """Check that ``url`` names a usable store without creating or modifying anything.

    Returns whether it exists. A missing SQLite file in an existing directory is fine
    (it is created on first write), and so is an empty one (it becomes the store on first
    write); a foreign or damaged file is refused.
    """
    if is_postgres_url(url):
        try:
            open_store(url, create=False).close()
        except NotFoundError:
            return False  # a reachable database without a store yet: created on first write
        return True
    path = sqlite_file_from_url(url)
    existed = check_sqlite_path(path, create=True) and not holds_no_database(path)
    if existed:
        open_store(url, create=False).close()
    return existed


def url_text(url: str | os.PathLike[str]) -> str:
    """A store URL or path as text: a ``pathlib.Path`` (any ``os.PathLike``) is taken as
    the path it names; anything else that is not text is refused (``store.bad_url``)."""
    if isinstance(url, str):
        return url
    text = os.fspath(url) if isinstance(url, os.PathLike) else None
    if not isinstance(text, str):
        raise UsageError(
            f"a store is named by a path or URL as text, not {type(url).__name__}",
            code="store.bad_url",
            hint="give a file path (str or pathlib.Path), sqlite:///abs/path.db or "
            "postgresql://user@host/db",
        )
    return text


def open_store(
    url: str | os.PathLike[str], *, create: bool = True, wait_ms: int | None = None
) -> Storage:
    """Open the store at ``url`` (a path, ``pathlib.Path`` included, or a URL); with
    ``create=False`` a missing SQLite file is refused.

    ``wait_ms`` bounds how long a write waits for another writer's lock (SQLite's busy
    timeout, PostgreSQL's lock timeout) before ``store.busy``; default: the backend's.
    """
    url = url_text(url)
    if is_postgres_url(url):
        options = {} if wait_ms is None else {"lock_timeout_ms": wait_ms}
        return _postgres_storage()(url, create=create, **options)
    if wait_ms is None:
        return SQLiteStorage(sqlite_file_from_url(url), create=create)
    return SQLiteStorage(sqlite_file_from_url(url), create=create, busy_timeout_ms=wait_ms)


def is_postgres_url(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def redact_url(url: str, *, mark: bool = False) -> str:
    """``url`` fit for logs and messages: a PostgreSQL URL loses its password (in the user
    part and a ``password=`` query parameter). With ``mark``, the password is shown as
    ``***`` instead of dropped, so a person sees that the command needs one
    (``postgresql://user:***@host/db``). A file path is returned as it is."""
    if not is_postgres_url(url):
        return url
    from urllib.parse import urlsplit, urlunsplit  # only for a PostgreSQL URL

    try:
        parts = urlsplit(url)
    except ValueError:
        return url.split("://", 1)[0] + "://..."
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}{':***' if mark and colon else ''}@{host}"
    params = []
    for p in parts.query.split("&") if parts.query else []:
        if p.partition("=")[0].lower() != "password":
            params.append(p)
        elif mark:
            params.append(f"{p.partition('=')[0]}=***")
    return urlunsplit(parts._replace(netloc=netloc, query="&".join(params)))


def _postgres_storage() -> Callable[..., Storage]:
    """The PostgreSQL backend, imported only when a PostgreSQL URL is opened (optional extra)."""
    try:
        from continuum.store.postgres import PostgresStorage
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("psycopg"):
            raise
        raise StoreError(
            "PostgreSQL stores need the optional extra 'postgres' (psycopg 3), which is not "
            "installed",
            code="store.backend_unavailable",
            hint="pip install 'continuum-recovery[postgres]'",
        ) from None
    return PostgresStorage

"""PostgreSQL connections for the store: URL handling, start-up checks, a small pool, errors.

- The URL is shown only redacted (``PgTarget.display``): no error or log line carries the
  password, even when libpq's own message would.
- Every new connection is checked: ``fsync`` and ``synchronous_commit`` must be on
  (otherwise an acknowledged commit can vanish in a server crash), and it gets the session
  settings the store relies on (lock wait bound, keepalives, READ COMMITTED writes).
- ``ConnectionPool`` keeps up to ``max_size`` connections per store object, so threads of
  one process do not queue behind one connection; psycopg_pool is not needed.
- ``translate`` maps a psycopg error to a continuum error, once, here: psycopg never
  appears above ``store/``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
from psycopg import errors as pgerrors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus

from continuum.errors import (
    ContinuumError,
    DiskFullError,
    ForkRejectedError,
    StoreBusyError,
    StoreError,
    StoreIOError,
    UsageError,
)
from continuum.untrusted import as_typed

DEFAULT_LOCK_TIMEOUT_MS = 30_000  # like SQLite's busy_timeout: a writer waits this long
DEFAULT_CONNECT_TIMEOUT_S = 10
DEFAULT_POOL_SIZE = 4
# A host that vanishes mid-transaction holds its run's lock until the server notices:
# keepalives bound that to about a minute, the idle-in-transaction timeout to five.
_SESSION_SETTINGS = (
    "SET idle_in_transaction_session_timeout = '300s';"
    " SET tcp_keepalives_idle = 30; SET tcp_keepalives_interval = 10;"
    " SET tcp_keepalives_count = 3"
)
_CLIENT_DEFAULTS = {
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
    "application_name": "continuum",
}


@dataclass(frozen=True)
class PgTarget:
    """A parsed ``postgresql://`` URL; ``display`` never contains the password."""

    url: str
    params: dict[str, str] = field(repr=False)
    display: str

    @property
    def host(self) -> str:
        return self.params.get("host") or self.params.get("hostaddr") or "localhost"

    @property
    def port(self) -> str:
        return self.params.get("port") or "5432"

    @property
    def dbname(self) -> str:
        return self.params.get("dbname") or self.params.get("user") or "(default)"

    def where(self) -> str:
        return f"host {self.host}, port {self.port}, database {self.dbname}"

    def scrub(self, text: str) -> str:
        """Remove the password from a message, should a library ever echo it."""
        secret = self.params.get("password")
        if secret:
            text = text.replace(secret, "***").replace(quote(secret, safe=""), "***")
        return text


def parse_url(url: str) -> PgTarget:
    try:
        params = {k: str(v) for k, v in conninfo_to_dict(url).items() if v is not None}
    except psycopg.Error as e:
        detail = str(e).strip().splitlines()[0] if str(e).strip() else "it does not parse"
        for secret in _raw_secrets(url):
            detail = detail.replace(secret, "***")
        raise UsageError(
            f"store URL {as_typed(_redact_raw(url))} is not a valid postgresql:// URL: {detail}",
            code="store.bad_url",
            hint="write postgresql://USER@HOST:PORT/DATABASE (see libpq connection URIs)",
        ) from None
    return PgTarget(url=url, params=params, display=_display(params))


def _redact_raw(url: str) -> str:
    """Best effort for a URL that does not even parse: drop anything between ':' and '@'."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "postgresql://..."
    netloc, slash, tail = rest.partition("/")
    if "@" in netloc:
        user = netloc.rsplit("@", 1)[0].split(":", 1)[0]
        netloc = f"{user}@{netloc.rsplit('@', 1)[1]}"
    if "password" in tail.lower():
        tail = tail.split("?", 1)[0] + "?..."
    return f"{scheme}://{netloc}{slash}{tail}"


def _raw_secrets(url: str) -> list[str]:
    """Password-like parts of a URL that does not parse (to keep them out of messages)."""
    rest = url.partition("://")[2]
    netloc, _, tail = rest.partition("/")
    found = []
    if "@" in netloc and ":" in netloc.rsplit("@", 1)[0]:
        found.append(netloc.rsplit("@", 1)[0].split(":", 1)[1])
    for part in tail.partition("?")[2].split("&"):
        name, _, value = part.partition("=")
        if name.lower() == "password" and value:
            found.append(value)
    return [f for f in found if f]


def _display(params: dict[str, str]) -> str:
    user = params.get("user")
    host = params.get("host", "")
    port = params.get("port")
    query = {
        k: v for k, v in params.items() if k not in ("user", "password", "dbname", "host", "port")
    }
    netloc = quote(user, safe="") + "@" if user else ""
    if host and "/" not in host and "," not in host:
        netloc += host if ":" not in host else f"[{host}]"
        if port:
            netloc += f":{port}"
    else:
        if host:
            query = {"host": host, **query}
        if port:
            query = {**query, "port": port}
    out = f"postgresql://{netloc}/{quote(params.get('dbname', ''), safe='')}"
    return out + ("?" + urlencode(query) if query else "")


def check_durability(fsync: str, synchronous_commit: str, where: str) -> None:
    """Refuse a server that can lose an acknowledged commit in a crash."""
    bad = [
        f"{name} = {value}"
        for name, value in (("fsync", fsync), ("synchronous_commit", synchronous_commit))
        if value.strip().lower() in ("off", "false", "no", "0")
    ]
    if bad:
        raise StoreError(
            f"the PostgreSQL server at {where} runs with {' and '.join(bad)}: a commit it "
            "acknowledges can be lost in a crash, so continuum refuses to use it",
            code="store.unsafe_postgres",
            hint="set fsync = on and synchronous_commit = on (server, database, role and "
            "connection options), then reload the server",
            settings=bad,
        )


@dataclass
class PgConn:
    """One connection and the identity of its server process (to end it if it is cut)."""

    conn: psycopg.Connection[Any]
    backend_pid: int
    backend_start: str
    application_name: str = ""
    generation: int = 0

    @property
    def usable(self) -> bool:
        return not self.conn.closed and not self.conn.broken


def connect(
    target: PgTarget, *, lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS, check: bool = True
) -> PgConn:
    """Open, check and prepare one connection (autocommit: transactions are explicit).

    ``check=False`` skips the durability check; only the F10 negative control uses it.
    """
    extra = {k: v for k, v in _CLIENT_DEFAULTS.items() if k not in target.params}
    if "connect_timeout" not in target.params:
        extra["connect_timeout"] = str(DEFAULT_CONNECT_TIMEOUT_S)
    try:
        conn: psycopg.Connection[Any] = psycopg.connect(
            make_conninfo(target.url, **extra), autocommit=True
        )
    except psycopg.Error as e:
        raise _connect_error(target, e) from None
    try:
        conn.execute(_SESSION_SETTINGS)
        conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{int(lock_timeout_ms)}ms",))
        row = conn.execute(
            "SELECT current_setting('fsync'), current_setting('synchronous_commit'),"
            " pg_backend_pid(), (SELECT backend_start::text FROM pg_stat_activity"
            " WHERE pid = pg_backend_pid()), current_setting('application_name')"
        ).fetchone()
        assert row is not None
        if check:
            check_durability(row[0], row[1], target.where())
    except BaseException as e:
        conn.close()
        if isinstance(e, psycopg.Error):
            raise translate(e, target) from None
        raise
    return PgConn(
        conn=conn, backend_pid=int(row[2]), backend_start=str(row[3]), application_name=str(row[4])
    )


def _connect_error(target: PgTarget, e: psycopg.Error) -> StoreError:
    detail = target.scrub(str(e).strip().replace("\n", " "))
    if f'database "{target.dbname}" does not exist' in detail:
        return StoreError(
            f"PostgreSQL at {target.where()}: the database does not exist",
            code="store.missing_database",
            hint=f"create it first (e.g. createdb -h {target.host} -p {target.port} "
            f"{target.dbname}); continuum creates its tables, not the database",
            host=target.host,
            port=target.port,
            database=target.dbname,
        )
    if (
        "authentication failed" in detail
        or "no pg_hba.conf entry" in detail
        or ('role "' in detail and "does not exist" in detail)
    ):
        return StoreError(
            f"PostgreSQL at {target.where()} refused the login: {detail}",
            code="store.auth_failed",
            hint="check the user and password in the URL (or PGPASSWORD / ~/.pgpass) and pg_hba.conf",
            host=target.host,
            port=target.port,
            database=target.dbname,
        )
    return StoreError(
        f"cannot connect to PostgreSQL at {target.where()}: {detail}",
        code="store.unreachable",
        hint="check that the server is running and reachable, and the host, port and "
        "database in the URL",
        host=target.host,
        port=target.port,
        database=target.dbname,
    )


def is_connection_lost(e: BaseException, conn: psycopg.Connection[Any]) -> bool:
    """True when the error means the session is gone (not an error reply on a live one)."""
    return isinstance(e, psycopg.OperationalError | psycopg.InterfaceError) and (
        conn.closed or conn.broken
    )


def translate(e: psycopg.Error, target: PgTarget) -> ContinuumError:
    """One psycopg error as the continuum error that says what happened and what to do."""
    detail = target.scrub(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
    if isinstance(e, pgerrors.UniqueViolation):
        return ForkRejectedError(
            "write rejected by a uniqueness constraint (a concurrent writer got there first)",
            hint="retry the operation; the chain was not changed",
            detail=detail,
        )
    if isinstance(
        e,
        pgerrors.LockNotAvailable
        | pgerrors.QueryCanceled
        | pgerrors.DeadlockDetected
        | pgerrors.SerializationFailure,
    ):
        return StoreBusyError(
            f"the run stayed locked by another writer past the lock timeout ({detail})",
            hint="retry, or look for a session holding a long write transaction "
            "(pg_stat_activity, state 'idle in transaction')",
        )
    if isinstance(e, pgerrors.DiskFull):
        return DiskFullError(
            "the PostgreSQL server's disk is full; the write was not acknowledged and nothing "
            "was recorded",
            hint="free disk space on the server, then retry; earlier data is intact",
        )
    if isinstance(e, pgerrors.ReadOnlySqlTransaction):
        return StoreError(
            f"PostgreSQL at {target.where()} is read-only: {detail}",
            code="store.read_only",
            hint="point --db at the primary server, not a standby",
        )
    if isinstance(e, pgerrors.InsufficientPrivilege):
        return StoreError(
            f"PostgreSQL refused the operation: {detail}",
            code="store.permission_denied",
            hint="grant the user CREATE on the database (for the first start) and "
            "read/write on schema continuum",
        )
    if isinstance(e, psycopg.DataError):
        return UsageError(
            f"a value cannot be stored in PostgreSQL: {detail}",
            code="usage.not_storable",
            hint="text fields cannot hold NUL (\\x00) characters in PostgreSQL",
        )
    if isinstance(e, psycopg.OperationalError | psycopg.InterfaceError):
        return StoreIOError(
            f"lost the connection to PostgreSQL at {target.where()}: {detail}; nothing was "
            "acknowledged",
            hint="check the server and the network, then retry",
        )
    return StoreError(f"PostgreSQL error: {detail}", hint="see the message; nothing was changed")


class ConnectionPool:
    """Up to ``max_size`` connections, created on demand and reused.

    A connection comes back to the pool only when it is healthy and outside a transaction;
    anything else is closed. ``close`` drains the idle ones; later use opens new ones (as
    the SQLite store reopens after ``close``).
    """

    def __init__(self, connect: Callable[[], PgConn], max_size: int, wait_s: float) -> None:
        self._connect, self._max, self._wait_s = connect, max(1, max_size), wait_s
        self._idle: list[PgConn] = []
        self._size = 0
        self._generation = 0
        self._cond = threading.Condition()

    def acquire(self) -> tuple[PgConn, bool]:
        """A connection and whether it was reused (a reused one may have gone stale)."""
        deadline = time.monotonic() + self._wait_s
        with self._cond:
            while not self._idle and self._size >= self._max:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StoreBusyError(
                        f"all {self._max} PostgreSQL connections of this store stayed busy",
                        hint="use fewer threads per store object, or a larger pool_size",
                    )
                self._cond.wait(remaining)
            if self._idle:
                return self._idle.pop(), True
            self._size += 1
            generation = self._generation
        try:
            pc = self._connect()
        except BaseException:
            with self._cond:
                self._size -= 1
                self._cond.notify()
            raise
        pc.generation = generation
        return pc, False

    def release(self, pc: PgConn) -> None:
        keep = pc.usable and pc.conn.info.transaction_status == TransactionStatus.IDLE
        with self._cond:
            keep = keep and pc.generation == self._generation
            if keep:
                self._idle.append(pc)
            else:
                self._size -= 1
            self._cond.notify()
        if not keep:
            close_quietly(pc)

    def drop_idle(self) -> None:
        """Close every idle connection (after one turned out stale: the server restarted)."""
        with self._cond:
            idle, self._idle = self._idle, []
            self._size -= len(idle)
            self._generation += 1
            self._cond.notify_all()
        for pc in idle:
            close_quietly(pc)

    close = drop_idle

    def __del__(self) -> None:
        # A store nobody closed (a short-lived CLI command): close its idle connections
        # rather than leave them to the driver's finalizer.
        for pc in self._idle:
            close_quietly(pc)


def close_quietly(pc: PgConn) -> None:
    with suppress(Exception):  # closing a dead connection: nothing left to do
        pc.conn.close()

"""PostgreSQL for the tests: the shared server's databases, and private clusters.

The shared server (``CONTINUUM_TEST_PG_DSN``, exported by the Makefile and ``.ci/run``)
is never altered beyond databases a test run creates and drops itself. Tests that kill a
server start their own cluster (``PrivateCluster``: ``initdb`` into a temp dir, a unix
socket, its own port) and never touch the shared one.

Unavailable PostgreSQL skips on a developer machine but FAILS when ``CI`` is set or
``postgres`` is named in ``CONTINUUM_REQUIRE_BACKENDS`` (the rule of ``backend_unavailable``).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote, urlsplit

import pytest

DSN_ENV = "CONTINUUM_TEST_PG_DSN"
PG_BIN_CANDIDATES = (
    "/usr/lib/postgresql/17/bin",
    "/usr/lib/postgresql/16/bin",
    "/usr/lib/postgresql/15/bin",
    "/usr/lib/postgresql/14/bin",
)
READY_DEADLINE_S = 60.0


class PostgresUnavailable(Exception):
    """Why PostgreSQL cannot be used by this test run."""


def unavailable(why: str, *, module_level: bool = False) -> NoReturn:
    """Skip locally, fail in CI (the rule of ``backend_unavailable`` in conftest.py)."""
    required = os.environ.get("CONTINUUM_REQUIRE_BACKENDS", "").replace(",", " ").split()
    if os.environ.get("CI") or "postgres" in required:
        pytest.fail(f"PostgreSQL is required here but unavailable: {why}")
    pytest.skip(f"PostgreSQL unavailable: {why}", allow_module_level=module_level)


def require_driver() -> None:
    """At the top of a PostgreSQL-only test module: psycopg (the postgres extra) or skip/fail."""
    try:
        import psycopg  # noqa: F401
    except ModuleNotFoundError:
        unavailable("psycopg is not installed (pip install -e '.[postgres]')", module_level=True)


def admin_dsn() -> str:
    """The shared server's admin URL, checked reachable; raises PostgresUnavailable."""
    dsn = os.environ.get(DSN_ENV)
    if not dsn:
        raise PostgresUnavailable(f"{DSN_ENV} is not set (the Makefile sets it)")
    try:
        import psycopg
    except ModuleNotFoundError as e:
        raise PostgresUnavailable("psycopg is not installed (pip install -e '.[postgres]')") from e
    try:
        psycopg.connect(dsn, connect_timeout=5).close()
    except psycopg.Error as e:
        raise PostgresUnavailable(f"cannot connect with {DSN_ENV}: {e}") from e
    return dsn


def url_for(dsn: str, dbname: str) -> str:
    return urlsplit(dsn)._replace(path="/" + quote(dbname)).geturl()


def admin_execute(dsn: str, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def create_database(dsn: str, prefix: str = "continuum_test") -> str:
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin_execute(dsn, f'CREATE DATABASE "{name}"')
    return name


def drop_database(dsn: str, name: str) -> None:
    admin_execute(dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def fresh_database(prefix: str = "continuum_test") -> Iterator[str]:
    """A new database on the shared server for the block; yields its URL; dropped after."""
    try:
        dsn = admin_dsn()
    except PostgresUnavailable as e:
        unavailable(str(e))
    name = create_database(dsn, prefix)
    try:
        yield url_for(dsn, name)
    finally:
        drop_database(dsn, name)


def reset_schema(url: str) -> None:
    """Remove the continuum schema (a fresh, empty store) even if a session lingers."""
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        conn.execute("SET lock_timeout = '5s'")
        try:
            conn.execute("DROP SCHEMA IF EXISTS continuum CASCADE")
        except psycopg.errors.LockNotAvailable:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            conn.execute("SET lock_timeout = '30s'")
            conn.execute("DROP SCHEMA IF EXISTS continuum CASCADE")


# -- private clusters (for tests that kill the server) ----------------------------------------


def pg_bin() -> Path:
    for candidate in PG_BIN_CANDIDATES:
        if (Path(candidate) / "initdb").exists():
            return Path(candidate)
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    raise PostgresUnavailable("initdb not found (install the PostgreSQL server binaries)")


def _stat(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/PID/stat (state, ppid, pgrp, ...), or None if it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _children(parent: int) -> list[int]:
    return [
        int(e.name)
        for e in Path("/proc").iterdir()
        if e.name.isdigit() and (f := _stat(int(e.name))) is not None and int(f[1]) == parent
    ]


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateCluster:
    """A throwaway PostgreSQL cluster: initdb in a temp dir, unix socket only, own port.

    Runs as the ``postgres`` OS user when the tests run as root (PostgreSQL refuses root).
    ``kill`` SIGKILLs the postmaster and every backend at once: a server crash.
    """

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        self.bin = pg_bin()
        self.root = Path(tempfile.mkdtemp(prefix="continuum-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.port = free_port()
        self.settings = dict(settings or {})
        self.process: subprocess.Popen[bytes] | None = None
        self.log = self.root / "server.log"
        self._uid: int | None = None
        self._gid: int | None = None
        if os.geteuid() == 0:
            try:
                entry = pwd.getpwnam("postgres")
            except KeyError as e:
                raise PostgresUnavailable("running as root and there is no 'postgres' user") from e
            self._uid, self._gid = entry.pw_uid, entry.pw_gid
        self.socket_dir.mkdir()
        if self._uid is not None:
            os.chown(self.root, self._uid, self._gid or -1)
            os.chown(self.socket_dir, self._uid, self._gid or -1)
        self._run(
            [
                str(self.bin / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            ]
        )

    def _demote(self) -> None:
        if self._gid is not None:
            os.setgid(self._gid)
        if self._uid is not None:
            os.setuid(self._uid)

    def _run(self, argv: list[str]) -> None:
        done = subprocess.run(
            argv, preexec_fn=self._demote, capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            raise PostgresUnavailable(f"{argv[0]} failed: {done.stderr.strip()}")

    def url(self, dbname: str = "postgres") -> str:
        return (
            f"postgresql://postgres@/{dbname}?host={quote(str(self.socket_dir), safe='')}"
            f"&port={self.port}"
        )

    def start(self, **overrides: str) -> None:
        settings = {
            "listen_addresses": "",
            "unix_socket_directories": str(self.socket_dir),
            "port": str(self.port),
            "max_connections": "30",
            "shared_buffers": "16MB",
            "fsync": "on",
            "synchronous_commit": "on",
            **self.settings,
            **overrides,
        }
        argv = [str(self.bin / "postgres"), "-D", str(self.data)]
        for name, value in settings.items():
            argv += ["-c", f"{name}={value}"]
        log = open(self.log, "ab")  # noqa: SIM115 - handed to the server process
        try:
            self.process = subprocess.Popen(
                argv,
                preexec_fn=self._demote,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        self.wait_ready()

    def wait_ready(self) -> None:
        """Bounded polling until the server accepts connections (crash recovery included)."""
        import psycopg

        deadline = time.monotonic() + READY_DEADLINE_S
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise PostgresUnavailable(f"server exited: {self.log.read_text()[-2000:]}")
            try:
                psycopg.connect(self.url(), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise PostgresUnavailable(
                        f"server not ready: {self.log.read_text()[-2000:]}"
                    ) from None
                time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend at once: a server crash.

        Backends run in sessions of their own (PostgreSQL calls setsid in each child), so
        the postmaster is stopped first (it can fork no more), its children are listed
        from /proc, and all are killed together. Returns once none of them is alive: a
        backend busy in an fsync dies only when the call returns, and a new postmaster
        refuses to start while the old shared memory is still attached.
        """
        assert self.process is not None
        postmaster = self.process.pid
        with suppress(ProcessLookupError):
            os.kill(postmaster, signal.SIGSTOP)
        victims = [postmaster, *_children(postmaster)]
        for pid in victims:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self.process = None
        deadline = time.monotonic() + READY_DEADLINE_S
        while live := [pid for pid in victims if _alive(pid)]:
            if time.monotonic() > deadline:
                raise PostgresUnavailable(f"processes {live} of the killed server survive")
            time.sleep(0.01)

    def stop(self) -> None:
        if self.process is not None:
            with suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGQUIT)  # immediate shutdown
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
            self.process = None

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

"""Performance figures against hard limits measured in the same run (SPEC 13, issue 14).

Usage: scripts/bench.py [--json] [--quick] [--db URL] [--agents-pg URL] [--dir DIR] [--keep]
                        [--out FILE] [--previous FILE] [--hooks-only] [--mcp-start-only]

Every figure is a median with its spread over repeats, the ratio to the limit or
baseline it is judged against (measured here, in this run, on the same file system or
database server), and pass/fail against its target:

- durable append, one writer        >= 90% of write+fsync of a small record in a loop (SQLite);
                                     >= 80% of a bare one-row-per-commit loop (apsw, or psycopg
                                     on the same PostgreSQL server); <= 120 us CPU per append
- intercept+complete pairs/s         flat (within 20%) from 1,000 to 100,000 actions,
                                     >= 80% of a bare two-commit loop (apsw WAL + FULL, or
                                     psycopg); <= 400 us CPU per pair (1,000-action store)
- continuum_resume over MCP stdio    median < 10 ms at 100,000 events with a checkpoint,
                                     flat in log length (within 20%)
- verify / fold from the store       < 1 s each at 100,000 events (the fold: plain dicts,
                                     chain checked as read; the model-building fold and
                                     full_state are shown beside it, not judged)
- checkpoint of 50,000 settled actions  < 64 KiB
- MCP calls, one stdio session       intercept+complete calls/s >= 0.70 x a bare SDK tool's
- continuum_list_actions, first page 50,000 actions within 1.5 x of 1,000 (or < 10 ms)
- many agents, one store             1/4/16 processes on PostgreSQL (own runs; one shared
                                     run), 1/4 on one SQLite file: sizing, not judged
- continuum-mcp spawn-to-initialize  <= 1.15 x a bare "hello" server on the same SDK
- MCP server peak memory (VmHWM)     bounded: no growth with the line size beyond the limit
- host hook, call matching no rule   median <= 2 x a bare interpreter start (`python -c pass`)
- host hook, registered effect       pre-tool + post-tool median < 250 ms

``--db postgresql://USER@HOST:PORT/DB`` measures every store-based figure on that
PostgreSQL server instead of SQLite files: in private databases created for this run
(``continuum_bench_<pid>_<store>``, dropped at the end unless --keep); the database in
the URL is only used to create and drop them. ``--agents-pg URL`` adds the PostgreSQL
many-agent figures to a SQLite run.

Stores are built fast through the library (many appends in one store.write
transaction; the ledger's own intercept/complete inside one transaction): that is
fixture building, not what is measured. Repeats of the figures that are compared are
interleaved, so a busy machine slows both sides of a ratio alike. Progress goes to
stderr; --json prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import multiprocessing
import os
import platform
import re
import resource
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import apsw

from continuum.errors import ContinuumError
from continuum.eventlog.events import EventType
from continuum.ledger.core import ActionLedger
from continuum.runtime.facade import Continuum
from continuum.state.projection import empty_plain, fold_plain, project
from continuum.store import is_postgres_url, redact_url

HERE = Path(__file__).resolve().parent
RUN = "bench"
MIB = 1 << 20
KIB = 1 << 10


def progress(message: str) -> None:
    sys.stderr.write(f"bench: {message}\n")
    sys.stderr.flush()


# -- statistics --------------------------------------------------------------------------


def summary(samples: list[float], unit: str, digits: int = 3) -> dict[str, Any]:
    s = sorted(samples)
    q = statistics.quantiles(s, n=4) if len(s) >= 2 else [s[0], s[0], s[0]]

    def r(x: float) -> float:
        return round(x, digits)

    return {
        "median": r(statistics.median(s)),
        "min": r(s[0]),
        "max": r(s[-1]),
        "q1": r(q[0]),
        "q3": r(q[2]),
        "n": len(s),
        "unit": unit,
    }


def judged(
    fig: dict[str, Any],
    *,
    ratio: float | None = None,
    ratio_to: str | None = None,
    target: str,
    ok: bool | None,
) -> dict[str, Any]:
    fig = dict(fig)
    if ratio is not None:
        fig["ratio"] = round(ratio, 3)
        fig["ratio_to"] = ratio_to
    fig["target"] = target
    fig["pass"] = ok
    return fig


# -- where the stores live ---------------------------------------------------------------


def database_url(server: str, dbname: str) -> str:
    """``server`` (a postgresql:// URL) pointing at database ``dbname`` instead."""
    parts = urlsplit(server)
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k != "dbname"])
    return urlunsplit(parts._replace(path=f"/{dbname}", query=query))


class Backend:
    """Where the store-based figures' stores live: SQLite files in the work directory, or
    one private database per store on a PostgreSQL server, created here and dropped at the
    end (unless --keep): the server's shared databases are never written to."""

    def __init__(self, work: Path, server: str | None = None) -> None:
        self.work, self.server = work, server
        self.kind = "postgresql" if server and is_postgres_url(server) else "sqlite"
        self.prefix = f"continuum_bench_{os.getpid()}"
        self.created: list[str] = []

    def _admin(self) -> Any:
        import psycopg

        assert self.server is not None
        return psycopg.connect(self.server, autocommit=True)

    def url(self, name: str) -> str:
        """The store called ``name``: a file, or a private database (created on first use)."""
        if self.kind == "sqlite":
            return str(self.work / f"{name}.db")
        from psycopg import sql

        assert self.server is not None
        dbname = f"{self.prefix}_{re.sub('[^a-z0-9]+', '_', name.lower())}"
        if dbname not in self.created:
            with self._admin() as conn:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
            self.created.append(dbname)
        return database_url(self.server, dbname)

    def analyze(self, name: str) -> None:
        """PostgreSQL: ``ANALYZE`` a freshly built store, as autovacuum would within about a
        minute, so its plans are those of a store in service (a fresh store without
        statistics can plan a page query as a scan of the run's history). SQLite keeps no
        statistics unless asked, so its stores are left as the library leaves them."""
        if self.kind == "postgresql":
            import psycopg

            with psycopg.connect(self.url(name), autocommit=True) as conn:
                conn.execute("ANALYZE")

    def describe(self) -> dict[str, Any]:
        if self.kind == "sqlite":
            return {"kind": "sqlite", "where": str(self.work)}
        with self._admin() as conn:
            settings = {
                name: conn.execute(f"SHOW {name}").fetchone()[0]
                for name in (
                    "server_version",
                    "fsync",
                    "synchronous_commit",
                    "wal_sync_method",
                    "shared_buffers",
                )
            }
        return {
            "kind": "postgresql",
            "server": redact_url(self.server or ""),
            "databases": f"{self.prefix}_*",
            **settings,
        }

    def close(self, keep: bool) -> None:
        if self.kind != "postgresql" or not self.created:
            return
        if keep:
            progress(f"databases kept: {', '.join(self.created)}")
            return
        from psycopg import sql

        with self._admin() as conn:
            for dbname in self.created:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(dbname)
                    )
                )
        self.created = []


# -- fixtures ----------------------------------------------------------------------------


class _OneTransaction:
    """A store whose ``write`` reuses one open transaction: the ledger's own intercept and
    complete run unchanged, but thousands commit at once (fixture building only)."""

    def __init__(self, store: Any) -> None:
        self._store, self.tx = store, None

    @contextmanager
    def write(self, run_id: str) -> Iterator[Any]:
        if self.tx is not None:
            yield self.tx
        else:
            with self._store.write(run_id) as tx:
                yield tx

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def build_event_store(url: str, events: int) -> None:
    """A run of exactly ``events`` events (the SPEC 11 shape: work items completed), with a
    checkpoint every tenth of the way, as a long-running agent would leave, the last one
    at the head."""
    rt = Continuum.open(url)
    rt.start_run(RUN, f"analyze {events} documents", total=events)
    step = max(events // 10, 2)
    written = 1
    while written < events - 1:
        with rt.store.write(RUN) as tx:
            for _ in range(min(step - 1, events - 1 - written)):
                tx.append(EventType.WORK_COMPLETED, {"doc": written}, source=rt.origin)
                written += 1
        if written < events - 1:
            rt.checkpoint(RUN, reason="periodic")
            written += 1
    rt.checkpoint(RUN, reason="bench fixture")
    assert rt.store.get_run(RUN).head_sequence == events, rt.store.get_run(RUN).head_sequence
    rt.close()


def build_ledger_store(url: str, events: int) -> None:
    """A run of ``events`` events where every event is a ledger transition (events / 2
    sends, each intercepted and completed), ending with a checkpoint: an agent whose work
    is all side effects."""
    build_action_store(url, events // 2 - 1)
    rt = Continuum.open(url, create=False)
    rt.checkpoint(RUN, reason="bench fixture")
    rt.close()


def build_action_store(url: str, actions: int) -> None:
    """A run holding ``actions`` completed actions, written by the ledger itself."""
    rt = Continuum.open(url)
    rt.start_run(RUN, "send invoices")
    shared = _OneTransaction(rt.store)
    ledger = ActionLedger(shared, origin=rt.origin)  # type: ignore[arg-type]
    done = 0
    while done < actions:
        with rt.store.write(RUN) as tx:
            shared.tx = tx
            for _ in range(min(5_000, actions - done)):
                r = ledger.intercept(
                    RUN, "send_invoice", {"invoice": f"F-{done}"}, key=f"invoice:F-{done}"
                )
                ledger.complete(RUN, r.action_key, external_id=f"x-{done}")
                done += 1
            shared.tx = None
    rt.close()


def checkpoint_bytes(url: str) -> int:
    """Size of the newest checkpoint's state JSON (UTF-8 bytes)."""
    rt = Continuum.open(url, create=False)
    try:
        return len(rt.store.list_checkpoints(RUN)[0].state_json.encode())
    finally:
        rt.close()


# -- limits and baselines ----------------------------------------------------------------


def fsync_loop(directory: Path, count: int, mode: str = "append") -> float:
    """The disk's raw limit: write a small record and fsync it, ``count`` times.

    ``append`` grows the file (each fsync also commits the new size); ``overwrite``
    rewrites records inside a preallocated 64 KiB file, as SQLite's WAL does once it has
    wrapped. The faster of the two is the limit.
    """
    path = directory / f"fsync-probe-{mode}.bin"
    record = b"x" * 120 + b"\n"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_APPEND if mode == "append" else 0)
    fd = os.open(path, flags, 0o600)
    try:
        if mode == "overwrite":
            os.write(fd, b"\0" * 65536)
            os.fsync(fd)
        start = time.perf_counter()
        for i in range(count):
            if mode == "append":
                os.write(fd, record)
            else:
                os.pwrite(fd, record, (i * 128) % 65536)
            os.fsync(fd)
        return count / (time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()


def append_loop(rt: Continuum, count: int) -> float:
    start = time.perf_counter()
    for i in range(count):
        rt.store.append_event(RUN, EventType.WORK_COMPLETED, {"doc": i})
    return count / (time.perf_counter() - start)


def bare_commit_loop(conn: apsw.Connection, count: int, offset: int) -> float:
    """SQLite's own durable commit, one small row per commit (WAL + FULL): a reference
    between the raw fsync limit and continuum's append."""
    start = time.perf_counter()
    for i in range(offset, offset + count):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO actions VALUES (?, 'started', ?)", (f"c{i}", "r" * 120))
        conn.execute("COMMIT")
    return count / (time.perf_counter() - start)


def cpu_us_per_op(fn: Callable[[], float], ops: int) -> tuple[float, float]:
    """Run ``fn`` (which returns a rate) and also give its CPU time per operation, user +
    system: a figure a busy machine distorts far less than wall time. (On PostgreSQL this
    is the client's CPU only: the server's work is in its own processes.)"""
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    rate = fn()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return rate, cpu / ops * 1e6


def calibrate() -> float:
    """Seconds for a fixed pure-Python workload (JSON + SHA-256 of 20,000 small records):
    compare runs by it, since a busy machine slows everything alike."""
    start = time.perf_counter()
    for i in range(20_000):
        hashlib.sha256(json.dumps({"doc": i, "k": "v" * 20}, sort_keys=True).encode()).hexdigest()
    return time.perf_counter() - start


def open_bare(path: Path) -> apsw.Connection:
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS actions (id TEXT PRIMARY KEY, status TEXT, record TEXT)"
    )
    return conn


def bare_pair_loop(conn: apsw.Connection, count: int, offset: int) -> float:
    """BEGIN IMMEDIATE; INSERT; COMMIT then BEGIN IMMEDIATE; UPDATE; COMMIT, per pair."""
    record = "r" * 300
    start = time.perf_counter()
    for i in range(offset, offset + count):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO actions VALUES (?, 'started', ?)", (f"a{i}", record))
        conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE actions SET status = 'completed' WHERE id = ?", (f"a{i}",))
        conn.execute("COMMIT")
    return count / (time.perf_counter() - start)


def open_bare_pg(url: str) -> Any:
    """A plain psycopg connection (default isolation, synchronous_commit as the server
    has it) with the same small table as ``open_bare``."""
    import psycopg

    conn = psycopg.connect(url)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS actions (id TEXT PRIMARY KEY, status TEXT, record TEXT)"
    )
    conn.commit()
    return conn


def pg_commit_loop(conn: Any, count: int, offset: int) -> float:
    """PostgreSQL's own durable commit from Python: one INSERT per commit."""
    start = time.perf_counter()
    for i in range(offset, offset + count):
        conn.execute("INSERT INTO actions VALUES (%s, 'started', %s)", (f"c{i}", "r" * 120))
        conn.commit()
    return count / (time.perf_counter() - start)


def pg_pair_loop(conn: Any, count: int, offset: int) -> float:
    """INSERT; COMMIT then UPDATE; COMMIT per pair, with psycopg."""
    record = "r" * 300
    start = time.perf_counter()
    for i in range(offset, offset + count):
        conn.execute("INSERT INTO actions VALUES (%s, 'started', %s)", (f"a{i}", record))
        conn.commit()
        conn.execute("UPDATE actions SET status = 'completed' WHERE id = %s", (f"a{i}",))
        conn.commit()
    return count / (time.perf_counter() - start)


def pair_loop(rt: Continuum, count: int, tag: str) -> float:
    start = time.perf_counter()
    for i in range(count):
        r = rt.intercept(RUN, "send_invoice", {"invoice": f"{tag}-{i}"}, key=f"invoice:{tag}-{i}")
        rt.complete(RUN, r.action_key, external_id=f"x-{tag}-{i}")
    return count / (time.perf_counter() - start)


# -- many agents, one store ----------------------------------------------------------------


def agent_worker(url: str, index: int, conn: Any, barriers: dict[int, Any]) -> None:
    """One agent process: its own ``Continuum`` on the shared store. Per command
    ``(parties, run_id, pairs, tag)`` it waits for the other ``parties - 1`` agents on a
    barrier, then runs ``pairs`` intercept+complete pairs and reports its times."""
    rt = Continuum.open(url, create=False)
    try:
        warm = rt.intercept(
            f"agent-{index}", "send_invoice", {"invoice": "warm"}, key=f"invoice:warm-{index}"
        )
        rt.complete(f"agent-{index}", warm.action_key, external_id="warm")
        conn.send(("ready", os.getpid()))
        while (command := conn.recv()) is not None:
            parties, run_id, pairs, tag = command
            barriers[parties].wait(timeout=300)
            cpu0, t0 = time.process_time(), time.monotonic()  # CLOCK_MONOTONIC: system-wide
            errors: list[str] = []
            for i in range(pairs):
                key = f"invoice:{tag}-{index}-{i}"
                try:
                    r = rt.intercept(run_id, "send_invoice", {"invoice": key}, key=key)
                    rt.complete(run_id, r.action_key, external_id=f"x-{key}")
                except ContinuumError as e:
                    errors.append(e.code)
            conn.send((t0, time.monotonic(), time.process_time() - cpu0, errors))
    except Exception as e:  # reported to the parent, which names it
        conn.send(("failed", f"{type(e).__name__}: {e}"))
    finally:
        rt.close()


def agents_figures(
    label: str, url: str, configs: list[tuple[str, int, bool]], pairs: int, rounds: int
) -> dict[str, Any]:
    """Total pairs/s of ``n`` agent processes, each on its own run or all on one run.

    ``configs``: (name, processes, shared run). The processes are spawned once (the
    largest count), each opens its own store connection and warms up; every round, the
    first ``n`` of them start together on a barrier of ``n`` parties and each runs
    ``pairs`` pairs. The rate is all their pairs over the time from the first start to
    the last finish; configurations are interleaved round by round.
    """
    most = max(n for _, n, _ in configs)
    rt = Continuum.open(url)
    for i in range(most):
        rt.start_run(f"agent-{i}", f"agent {i}")
    rt.start_run("shared", "many agents, one run")
    rt.close()
    ctx = multiprocessing.get_context("spawn")
    barriers = {n: ctx.Barrier(n) for n in {n for _, n, _ in configs}}
    pipes, procs = [], []
    rates: dict[str, list[float]] = {name: [] for name, _, _ in configs}
    cpu: dict[str, list[float]] = {name: [] for name, _, _ in configs}
    errors: dict[str, list[str]] = {name: [] for name, _, _ in configs}

    def answer(pipe: Any) -> Any:
        if not pipe.poll(600):
            raise TimeoutError(f"an agent process on {label} did not answer")
        try:
            got = pipe.recv()
        except EOFError:
            raise RuntimeError(
                f"an agent process on {label} exited (its traceback is above)"
            ) from None
        if isinstance(got, tuple) and got and got[0] == "failed":
            raise RuntimeError(f"an agent process on {label} failed: {got[1]}")
        return got

    try:
        for i in range(most):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=agent_worker, args=(url, i, child, barriers), daemon=True)
            p.start()
            child.close()
            pipes.append(parent)
            procs.append(p)
        for pipe in pipes:
            answer(pipe)
        for r in range(rounds):
            for name, n, shared in configs:
                for i in range(n):
                    pipes[i].send((n, "shared" if shared else f"agent-{i}", pairs, f"{name}-{r}"))
                results = [answer(pipes[i]) for i in range(n)]
                elapsed = max(x[1] for x in results) - min(x[0] for x in results)
                rates[name].append(n * pairs / elapsed)
                cpu[name].append(sum(x[2] for x in results) / (n * pairs) * 1e6)
                errors[name] += [e for x in results for e in x[3]]
    finally:
        for pipe in pipes:
            with contextlib.suppress(OSError):
                pipe.send(None)
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
    one = next((rates[name] for name, n, _ in configs if n == 1), None)
    out: dict[str, Any] = {}
    for name, n, shared in configs:
        fig = {
            **summary(rates[name], "pairs/s", 1),
            "pass": None,
            "backend": label,
            "processes": n,
            "shared_run": shared,
            "client_cpu_us_per_pair": round(_median(cpu[name]), 1),
            "target": f"(sizing: {n} process{'es' if n > 1 else ''}, "
            f"{'one shared run' if shared else 'a run each'}, {pairs} pairs "
            "each, total)",
        }
        if one is not None and n > 1:
            fig["ratio"] = round(_median(rates[name]) / _median(one), 3)
            fig["ratio_to"] = f"agents_{label}_1"
        if errors[name]:
            fig["errors"] = {code: errors[name].count(code) for code in sorted(set(errors[name]))}
        out[f"agents_{label}_{name}"] = fig
    return out


# -- MCP over stdio ----------------------------------------------------------------------


def continuum_mcp() -> list[str]:
    exe = Path(sys.executable).parent / "continuum-mcp"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "continuum.mcp"]


def hello_server() -> list[str]:
    return [sys.executable, str(HERE / "bench_hello_server.py")]


class RawClient:
    """A minimal JSON-RPC client on a server's pipes: it adds next to nothing to a latency."""

    def __init__(
        self,
        cmd: list[str],
        env: dict[str, str] | None = None,
        envelope: dict[str, Any] | None = None,
    ) -> None:
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
        )
        self._id = 0
        # A 2026-07-28 client: this envelope in every request's _meta, no initialize.
        self.envelope = envelope

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def read(self, timeout: float = 60.0) -> dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError("no answer from the server")
        line = self.proc.stdout.readline()
        if not line:
            raise EOFError("the server closed its stdout")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._id += 1
        params = params or {}
        if self.envelope is not None:
            params = {**params, "_meta": {**self.envelope, **params.get("_meta", {})}}
        self.send({"jsonrpc": "2.0", "id": self._id, "method": method, "params": params})
        while True:
            answer = self.read()
            if answer.get("id") == self._id:
                return answer

    def initialize(self) -> dict[str, Any]:
        if self.envelope is not None:  # the 2026-07-28 era opens with any request
            return self.request("server/discover")
        answer = self.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "continuum-bench", "version": "1"},
            },
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return answer

    def hwm_kib(self) -> int:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(next(x for x in status.splitlines() if x.startswith("VmHWM:")).split()[1])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()


def spawn_to_initialized(cmd: list[str]) -> float:
    start = time.perf_counter()
    client = RawClient(cmd)
    try:
        answer = client.initialize()
        elapsed = time.perf_counter() - start
        assert "result" in answer, answer
        return elapsed
    finally:
        client.close()


def resume_call(client: RawClient) -> float:
    start = time.perf_counter()
    answer = client.request(
        "tools/call", {"name": "continuum_resume", "arguments": {"run_id": RUN}}
    )
    elapsed = time.perf_counter() - start
    result = answer.get("result", {})
    if result.get("isError") or result.get("structuredContent", {}).get("mode") != "resume":
        raise RuntimeError(f"continuum_resume did not answer mode=resume: {str(answer)[:300]}")
    return elapsed


def allowed_env() -> dict[str, str]:
    """The environment for a continuum-mcp this client may write through: every
    CONTINUUM_* variable dropped, the bench's client name on the allowlist."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTINUUM_")}
    env["CONTINUUM_MCP_MUTATING_CLIENTS"] = "continuum-bench"
    return env


def tool_call(client: RawClient, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    answer = client.request("tools/call", {"name": name, "arguments": arguments})
    result: dict[str, Any] | None = answer.get("result")
    if not result or result.get("isError"):
        raise RuntimeError(f"{name} failed: {str(answer)[:300]}")
    return result


def server_cpu_s(client: RawClient) -> float:
    """User + system CPU seconds of the server process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{client.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def mcp_pairs(client: RawClient, pairs: int, tag: str) -> float:
    """``pairs`` intercept+complete over MCP: calls/s (two calls per pair)."""
    start = time.perf_counter()
    for i in range(pairs):
        key = f"invoice:{tag}-{i}"
        r = tool_call(
            client,
            "continuum_intercept_action",
            {
                "run_id": RUN,
                "action_type": "send_invoice",
                "arguments": {"invoice": key},
                "key": key,
            },
        )
        sc = r["structuredContent"]
        if sc.get("proceed") is not True:
            raise RuntimeError(f"intercept of a new key did not proceed: {str(sc)[:300]}")
        tool_call(
            client,
            "continuum_complete_action",
            {"run_id": RUN, "action_key": sc["action_key"], "external_id": f"x-{key}"},
        )
    return 2 * pairs / (time.perf_counter() - start)


def mcp_hello(client: RawClient, calls: int) -> float:
    start = time.perf_counter()
    for i in range(calls):
        tool_call(client, "hello", {"name": f"bench-{i}"})
    return calls / (time.perf_counter() - start)


MODERN_ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "continuum-bench", "version": "1"},
}


def mcp_call_rounds(
    calls_url: str, envelope: dict[str, Any] | None, rounds: int, block: int
) -> tuple[list[float], list[float], list[float], list[float]]:
    """Interleaved rounds of ``block`` intercept+complete pairs over one allowed
    ``continuum-mcp`` session and ``2 * block`` calls of a bare SDK tool: (our calls/s,
    theirs, our server CPU us per call, theirs) per round. Both are warmed first with
    more calls than it takes to fill the store's WAL once (80 pairs write about 1,300
    frames; the WAL is checkpointed and reused from 1,000): a server's first minute grows
    its WAL file, every later one writes over it, and the figure is the later ones'."""
    ours = RawClient([*continuum_mcp(), "--db", calls_url], env=allowed_env(), envelope=envelope)
    theirs = RawClient(hello_server(), envelope=envelope)
    our_rates, their_rates, our_cpu, their_cpu = [], [], [], []
    try:
        ours.initialize()
        theirs.initialize()
        mcp_pairs(ours, 80, "warm")
        mcp_hello(theirs, 160)
        for r in range(rounds + 1):
            order = [("ours", ours), ("theirs", theirs)]
            for who, client in order if r % 2 == 0 else order[::-1]:
                c0 = server_cpu_s(client)
                if who == "ours":
                    our_rates.append(mcp_pairs(client, block, f"r{r}"))
                    our_cpu.append((server_cpu_s(client) - c0) / (2 * block) * 1e6)
                else:
                    their_rates.append(mcp_hello(client, 2 * block))
                    their_cpu.append((server_cpu_s(client) - c0) / (2 * block) * 1e6)
    finally:
        ours.close()
        theirs.close()
    return our_rates, their_rates, our_cpu, their_cpu


def list_call(client: RawClient) -> float:
    """One ``continuum_list_actions`` call, first page at the default limit: seconds."""
    start = time.perf_counter()
    result = tool_call(client, "continuum_list_actions", {"run_id": RUN})
    elapsed = time.perf_counter() - start
    if not result.get("structuredContent", {}).get("actions"):
        raise RuntimeError(f"continuum_list_actions listed nothing: {str(result)[:300]}")
    return elapsed


def memory_under(db: str, line_bytes: int, count: int) -> int:
    """VmHWM (KiB) of a fresh continuum-mcp after ``count`` lines of ``line_bytes`` bytes.

    A line at or under the 1 MiB limit is a real tools/call (continuum_validate with a
    padded env); a longer one must be refused without being held in memory.
    """
    client = RawClient([*continuum_mcp(), "--db", str(db)])
    try:
        client.initialize()
        for i in range(count):
            head = {
                "jsonrpc": "2.0",
                "id": 1000 + i,
                "method": "tools/call",
                "params": {
                    "name": "continuum_validate",
                    "arguments": {"run_id": RUN, "env": {"pad": ""}},
                },
            }
            empty = len(json.dumps(head).encode())
            head["params"]["arguments"]["env"]["pad"] = "x" * max(line_bytes - empty, 0)
            data = json.dumps(head).encode()
            done = threading.Event()

            def writer(data: bytes = data, done: threading.Event = done) -> None:
                client.send_raw(data + b"\n")
                done.set()

            t = threading.Thread(target=writer, daemon=True)
            t.start()
            answer = client.read(timeout=120)
            t.join(timeout=120)
            assert done.is_set(), "the server stopped reading"
            if line_bytes <= MIB:  # at the limit: served
                assert answer.get("id") == 1000 + i and "result" in answer, str(answer)[:300]
            else:  # over it: refused with a JSON-RPC error, and the server keeps serving
                assert "error" in answer, str(answer)[:300]
        return client.hwm_kib()
    finally:
        client.close()


# -- the run -----------------------------------------------------------------------------


def machine(directory: Path) -> dict[str, Any]:
    st = os.statvfs(directory)
    fs = "?"
    with contextlib.suppress(OSError):
        best = ""
        for line in Path("/proc/mounts").read_text().splitlines():
            dev, mnt, kind = line.split()[:3]
            if str(directory.resolve()).startswith(mnt) and len(mnt) >= len(best):
                best, fs = mnt, f"{kind} on {dev} (mounted at {mnt})"
    return {
        "python": platform.python_version(),
        "sqlite": apsw.sqlite_lib_version(),
        "apsw": apsw.apswversion(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "filesystem": fs,
        "free_gib": round(st.f_bavail * st.f_frsize / 2**30, 1),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _median(samples: list[float]) -> float:
    return statistics.median(samples)


def run(work: Path, quick: bool, backend: Backend, agents_pg: Backend | None) -> dict[str, Any]:
    sizes = [1_000, 10_000] if quick else [1_000, 10_000, 100_000]
    big = sizes[-1]
    rounds = 3 if quick else 5
    fast_rounds = 5 if quick else 11  # short interleaved rounds: a busy disk hits both sides
    pg = backend.kind == "postgresql"
    figures: dict[str, Any] = {}
    growth: dict[int, dict[str, Any]] = {n: {"size": n} for n in sizes}
    evaluated = not quick  # the targets are stated at 100,000: a quick run only shows trends
    figures["cpu_calibration"] = {
        **summary([calibrate() for _ in range(3)], "s"),
        "target": "(machine speed: a fixed Python workload)",
        "pass": None,
    }

    def store_figure(name: str, fig: dict[str, Any]) -> None:
        figures[name] = {**fig, "backend": backend.kind}

    # 1. durable append vs write+fsync (SQLite) and a bare one-row commit loop, interleaved
    progress(
        f"durable append ({backend.kind}) vs a bare one-row-per-commit loop"
        + ("" if pg else " and the disk's write+fsync limit")
    )
    append_rt = Continuum.open(backend.url("append"))
    append_rt.start_run(RUN, "append")
    bare_pg = open_bare_pg(backend.url("bare")) if pg else None
    commits = None if pg else open_bare(work / "commits.db")
    count = 100 if quick else 200
    fs_append, fs_over, sq_rates, ap_rates, ap_cpu = [], [], [], [], []
    for r in range(fast_rounds):  # the order flips every round
        if r % 2:
            rate, cpu = cpu_us_per_op(lambda: append_loop(append_rt, count), count)
        if commits is not None:
            fs_append.append(fsync_loop(work, count, "append"))
            fs_over.append(fsync_loop(work, count, "overwrite"))
            sq_rates.append(bare_commit_loop(commits, count, r * count))
        else:
            sq_rates.append(pg_commit_loop(bare_pg, count, r * count))
        if not r % 2:
            rate, cpu = cpu_us_per_op(lambda: append_loop(append_rt, count), count)
        ap_rates.append(rate)
        ap_cpu.append(cpu)
    append_rt.close()
    commit_name = "pg_commit_loop" if pg else "sqlite_commit_loop"
    if commits is not None:
        commits.close()
        fs_rates = fs_over if _median(fs_over) >= _median(fs_append) else fs_append
        figures["fsync_limit"] = {
            **summary(fs_rates, "records/s", 1),
            "pass": None,
            "append_median": round(_median(fs_append), 1),
            "overwrite_median": round(_median(fs_over), 1),
            "target": "the limit: write + fsync of a 121-byte record, the "
            "faster of append / overwrite-in-place",
        }
        sq = _median(sq_rates) / _median(fs_rates)
        store_figure(
            commit_name,
            {
                **summary(sq_rates, "commits/s", 1),
                "ratio": round(sq, 3),
                "ratio_to": "fsync_limit",
                "pass": None,
                "target": "(baseline: bare apsw, one row per commit)",
            },
        )
        ratio = _median(ap_rates) / _median(fs_rates)
        store_figure(
            "durable_append",
            judged(
                summary(ap_rates, "appends/s", 1),
                ratio=ratio,
                ratio_to="fsync_limit",
                target=">= 0.90 x fsync_limit",
                ok=ratio >= 0.90,
            ),
        )
    else:
        store_figure(
            commit_name,
            {
                **summary(sq_rates, "commits/s", 1),
                "pass": None,
                "target": "(baseline: bare psycopg, one INSERT per commit, same server)",
            },
        )
        store_figure(
            "durable_append",
            {
                **summary(ap_rates, "appends/s", 1),
                "pass": None,
                "target": "(the server fsyncs its own WAL: judged against pg_commit_loop below)",
            },
        )
    figures["durable_append"]["cpu_us_per_append"] = round(_median(ap_cpu), 1)
    per_round = [a / s for a, s in zip(ap_rates, sq_rates, strict=True)]
    store_figure(
        "durable_append_vs_commit_loop",
        judged(
            summary(per_round, "ratio"),
            target=f">= 0.80 x {commit_name} (per interleaved round)",
            ok=_median(per_round) >= 0.80,
        ),
    )
    store_figure(
        "durable_append_cpu",
        judged(
            summary(ap_cpu, "us CPU/append", 1),
            target="<= 120 us CPU per durable append" + (" (client side)" if pg else ""),
            ok=_median(ap_cpu) <= 120,
        ),
    )

    # 2. intercept+complete at 1k/10k/100k actions vs a bare two-commit loop, interleaved
    for n in sizes:
        progress(f"building a store with {n:,} completed actions (ledger, one transaction)")
        t = timed(lambda n=n: build_action_store(backend.url(f"actions-{n}"), n))
        growth[n]["build_actions_s"] = round(t, 1)
        backend.analyze(f"actions-{n}")
    progress(
        "intercept+complete pairs/s at "
        + " / ".join(f"{n:,}" for n in sizes)
        + f" actions ({backend.kind}), and the bare two-commit loop"
    )
    rts = {n: Continuum.open(backend.url(f"actions-{n}"), create=False) for n in sizes}
    bare = None if pg else open_bare(work / "bare.db")
    pairs = 100 if quick else 150
    pair_rates: dict[int, list[float]] = {n: [] for n in sizes}
    pair_cpu: dict[int, list[float]] = {n: [] for n in sizes}
    bare_rates, bare_cpu = [], []
    for r in range(fast_rounds):  # the order flips every round
        for n in (sizes if r % 2 else [0, *sizes]) + ([0] if r % 2 else []):
            if n:
                rate, cpu = cpu_us_per_op(lambda n=n, r=r: pair_loop(rts[n], pairs, f"m{r}"), pairs)
                pair_rates[n].append(rate)
                pair_cpu[n].append(cpu)
                continue
            if bare is not None:
                rate, cpu = cpu_us_per_op(lambda r=r: bare_pair_loop(bare, pairs, r * pairs), pairs)
            else:
                rate, cpu = cpu_us_per_op(
                    lambda r=r: pg_pair_loop(bare_pg, pairs, r * pairs), pairs
                )
            bare_rates.append(rate)
            bare_cpu.append(cpu)
    if bare is not None:
        bare.close()
    if bare_pg is not None:
        bare_pg.close()
    for rt in rts.values():
        rt.close()
    store_figure(
        "bare_pair_loop",
        {
            **summary(bare_rates, "pairs/s", 1),
            "pass": None,
            "cpu_us_per_pair": round(_median(bare_cpu), 1),
            "target": "the baseline (psycopg: INSERT; COMMIT then UPDATE; COMMIT)"
            if pg
            else "the baseline (apsw, WAL + synchronous=FULL)",
        },
    )

    def per_round(top: list[float], bottom: list[float]) -> float:
        """The median of the ratios taken round by round (both sides ran seconds apart)."""
        return _median([a / b for a, b in zip(top, bottom, strict=True)])

    for n in sizes:
        med = _median(pair_rates[n])
        growth[n]["intercept_pairs_per_s"] = round(med, 1)
        growth[n]["intercept_cpu_us_per_pair"] = round(_median(pair_cpu[n]), 1)
        ratio = per_round(pair_rates[n], bare_rates)
        fig = judged(
            summary(pair_rates[n], "pairs/s", 1),
            ratio=ratio,
            ratio_to="bare_pair_loop",
            target=">= 0.80 x bare_pair_loop (per round)",
            ok=ratio >= 0.80 if evaluated else None,
        )
        fig["cpu_us_per_pair"] = round(_median(pair_cpu[n]), 1)
        fig["flat_ratio_to_1k"] = round(per_round(pair_rates[n], pair_rates[sizes[0]]), 3)
        store_figure(f"intercept_complete_{n}", fig)
    flat = per_round(pair_rates[big], pair_rates[sizes[0]])
    flat_cpu = _median(pair_cpu[sizes[0]]) / _median(pair_cpu[big])
    store_figure(
        "intercept_flatness",
        {
            "median": round(flat, 3),
            "unit": "ratio",
            "cpu_ratio": round(flat_cpu, 3),
            "detail": f"pairs/s at {big:,} / at {sizes[0]:,} actions, "
            "median of the per-round ratios (cpu_ratio: "
            "CPU per pair, 1,000 / largest)",
            "target": ">= 0.80 (within 20%)",
            "pass": flat >= 0.80 if evaluated else None,
        },
    )
    store_figure(
        "intercept_complete_cpu",
        judged(
            summary(pair_cpu[sizes[0]], "us CPU/pair", 1),
            target=f"<= 400 us CPU per pair ({sizes[0]:,}-action store"
            + (", client side)" if pg else ")"),
            ok=_median(pair_cpu[sizes[0]]) <= 400,
        ),
    )

    # 3. continuum_resume over MCP stdio at 1k/10k/100k events with a checkpoint: a run of
    #    work items (the SPEC 11 shape), and a run where every event is a ledger transition
    for n in sizes:
        progress(f"building runs of {n:,} events with checkpoints (work items; ledger)")
        growth[n]["build_events_s"] = round(
            timed(lambda n=n: build_event_store(backend.url(f"events-{n}"), n)), 1
        )
        growth[n]["build_ledger_s"] = round(
            timed(lambda n=n: build_ledger_store(backend.url(f"ledger-{n}"), n)), 1
        )
        backend.analyze(f"events-{n}")
        backend.analyze(f"ledger-{n}")
        growth[n]["checkpoint_events_kib"] = round(
            checkpoint_bytes(backend.url(f"events-{n}")) / KIB, 1
        )
        growth[n]["checkpoint_ledger_kib"] = round(
            checkpoint_bytes(backend.url(f"ledger-{n}")) / KIB, 1
        )
    settled = big // 2 - 1
    cp_kib = growth[big]["checkpoint_ledger_kib"]
    store_figure(
        f"checkpoint_ledger_{big}",
        judged(
            {
                "median": cp_kib,
                "unit": "KiB",
                "settled_actions": settled,
                "detail": "newest checkpoint's state_json (the one at the head)",
            },
            target=f"< 64 KiB at {settled:,} settled actions",
            ok=cp_kib < 64 if evaluated else None,
        ),
    )
    progress("continuum_resume latency over MCP stdio")
    for kind, calls in (("events", 20 if quick else 60), ("ledger", 5 if quick else 20)):
        clients = {
            n: RawClient([*continuum_mcp(), "--db", backend.url(f"{kind}-{n}")]) for n in sizes
        }
        latencies: dict[int, list[float]] = {n: [] for n in sizes}
        try:
            for c in clients.values():
                c.initialize()
                resume_call(c)  # warm-up: the first call opens the store
            for _ in range(calls):
                for n in sizes:
                    latencies[n].append(resume_call(clients[n]) * 1000)
        finally:
            for c in clients.values():
                c.close()
        first = _median(latencies[sizes[0]])
        label = "resume_mcp" if kind == "events" else "resume_mcp_ledger"
        for n in sizes:
            med = _median(latencies[n])
            growth[n][f"{label}_ms"] = round(med, 2)
            ok = med < 10.0 and med <= first * 1.2
            store_figure(
                f"{label}_{n}",
                judged(
                    summary(latencies[n], "ms", 2),
                    ratio=med / first,
                    ratio_to=f"{label}_{sizes[0]}",
                    target="median < 10 ms and within 20% of 1,000",
                    ok=ok if (n == big and evaluated) else None,
                ),
            )

    # 4. continuum_list_actions, first page: a 1,000-action store, and the ledger runs
    progress("continuum_list_actions latency over MCP stdio (first page, default limit)")
    build_action_store(backend.url("list-1000"), 1_000)
    backend.analyze("list-1000")
    targets = {0: backend.url("list-1000"), **{n: backend.url(f"ledger-{n}") for n in sizes}}
    clients = {n: RawClient([*continuum_mcp(), "--db", url]) for n, url in targets.items()}
    listed: dict[int, list[float]] = {n: [] for n in targets}
    try:
        for c in clients.values():
            c.initialize()
            list_call(c)
        for _ in range(20 if quick else 40):
            for n in targets:
                listed[n].append(list_call(clients[n]) * 1000)
    finally:
        for c in clients.values():
            c.close()
    base = _median(listed[0])
    store_figure(
        "list_actions_1000",
        {
            **summary(listed[0], "ms", 2),
            "pass": None,
            "target": "the baseline: a store of 1,000 actions",
        },
    )
    for n in sizes:
        growth[n]["list_actions_ms"] = round(_median(listed[n]), 2)
    med = _median(listed[big])
    store_figure(
        f"list_actions_{big // 2}",
        judged(
            summary(listed[big], "ms", 2),
            ratio=med / base,
            ratio_to="list_actions_1000",
            target=f"costs the page: {settled:,} actions <= 1.5 x list_actions_1000 or < 10 ms",
            ok=(med <= 1.5 * base or med < 10.0) if evaluated else None,
        ),
    )

    # 5. verify and fold from the store (plain; with models; full_state) at every size
    progress("verify and fold from the store")
    for kind in ("events", "ledger"):
        suffix = "" if kind == "events" else "_ledger"
        for n in sizes:
            rt = Continuum.open(backend.url(f"{kind}-{n}"), create=False)
            reps = (rounds if kind == "events" else 3) if n == big else 3
            verify, fold, models, full, pure = [], [], [], [], []
            for _ in range(reps):  # interleaved
                verify.append(timed(lambda rt=rt: rt.verify(RUN)))
                fold.append(
                    timed(lambda rt=rt: fold_plain(empty_plain(RUN), rt.store.iter_raw(RUN)))
                )
                models.append(timed(lambda rt=rt: project(RUN, rt.store.iter_events(RUN))))
                full.append(timed(lambda rt=rt: rt.full_state(RUN)))
            events = rt.store.read_events(RUN)
            pure = [timed(lambda events=events: project(RUN, events)) for _ in range(reps)]
            del events
            assert rt.verify(RUN).ok
            rt.close()
            growth[n].update(
                {
                    f"verify{suffix}_s": round(_median(verify), 3),
                    f"fold{suffix}_s": round(_median(fold), 3),
                    f"fold_models{suffix}_s": round(_median(models), 3),
                    f"full_state{suffix}_s": round(_median(full), 3),
                    f"fold_in_memory{suffix}_s": round(_median(pure), 3),
                }
            )
            if n != big:
                continue
            store_figure(
                f"verify{suffix}_{n}",
                judged(
                    summary(verify, "s"),
                    target="< 1 s",
                    ok=_median(verify) < 1.0 if evaluated else None,
                ),
            )
            store_figure(
                f"fold{suffix}_{n}",
                judged(
                    summary(fold, "s"),
                    target="< 1 s (fold_plain of store.iter_raw: read, chain checked, plain dicts)",
                    ok=_median(fold) < 1.0 if evaluated else None,
                ),
            )
            for name, samples, what in (
                ("fold_models", models, "project(store.iter_events): a model per event"),
                ("full_state", full, "Continuum.full_state: the fold, then a State model"),
                ("fold_in_memory", pure, "project over Event models already in memory"),
            ):
                store_figure(
                    f"{name}{suffix}_{n}",
                    {
                        **summary(samples, "s"),
                        "pass": None,
                        "target": f"(shown, not judged: {what})",
                    },
                )

    # 6. MCP per call: intercept+complete over one allowed stdio session vs a bare SDK tool,
    # with a client of each protocol era (Claude Code opens the 2026-07-28 one)
    for era, envelope in (("", None), ("_2026", MODERN_ENVELOPE)):
        label = "a 2026-07-28 client" if envelope else "a handshake client"
        progress(f"MCP calls/s: intercept+complete over continuum-mcp vs a bare SDK tool ({label})")
        calls_url = backend.url(f"mcp-calls{era}")
        rt = Continuum.open(calls_url)
        rt.start_run(RUN, "send invoices over MCP")
        rt.close()
        rates = mcp_call_rounds(calls_url, envelope, rounds, 25 if quick else 60)
        our_rates, their_rates, our_cpu, their_cpu = rates
        figures[f"mcp_call_hello{era}"] = {
            **summary(their_rates, "calls/s", 1),
            "pass": None,
            "server_cpu_us_per_call": round(_median(their_cpu)),
            "target": f"the baseline: a bare SDK tool (bench_hello_server.py), {label}",
        }
        ratio = _median([a / b for a, b in zip(our_rates, their_rates, strict=True)])
        store_figure(
            f"mcp_call_intercept_complete{era}",
            judged(
                summary(our_rates, "calls/s", 1),
                ratio=ratio,
                ratio_to=f"mcp_call_hello{era}",
                target=f">= 0.70 x mcp_call_hello{era} (per round; 2 calls per pair, one session)",
                ok=ratio >= 0.70,
            ),
        )
        figures[f"mcp_call_intercept_complete{era}"]["server_cpu_us_per_call"] = round(
            _median(our_cpu)
        )

    # 7. many agents, one store
    agent_pairs, agent_rounds = (20, 2) if quick else (100, 3)
    progress(f"many agents: 1 and 4 processes on one SQLite file ({agent_pairs} pairs each)")
    figures.update(
        agents_figures(
            "sqlite",
            str(work / "agents.db"),
            [("1", 1, False), ("4_runs", 4, False), ("4_shared_run", 4, True)],
            agent_pairs,
            agent_rounds,
        )
    )
    if agents_pg is not None:
        progress(f"many agents: 1, 4 and 16 processes on PostgreSQL ({agent_pairs} pairs each)")
        figures.update(
            agents_figures(
                "postgresql",
                agents_pg.url("agents"),
                [
                    ("1", 1, False),
                    ("4_runs", 4, False),
                    ("4_shared_run", 4, True),
                    ("16_runs", 16, False),
                    ("16_shared_run", 16, True),
                ],
                agent_pairs,
                agent_rounds,
            )
        )

    # 8. spawn-to-initialized: continuum-mcp vs a bare hello server, interleaved
    progress("continuum-mcp spawn-to-initialized vs a bare hello server")
    ours_ms: list[float] = []
    theirs_ms: list[float] = []
    ours_cpu: list[float] = []
    theirs_cpu: list[float] = []
    for i in range(8 if quick else 20):
        pair = [
            (ours_ms, ours_cpu, [*continuum_mcp(), "--db", backend.url(f"events-{sizes[0]}")]),
            (theirs_ms, theirs_cpu, hello_server()),
        ]
        for samples, cpu_ms, cmd in pair if i % 2 == 0 else pair[::-1]:
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            samples.append(spawn_to_initialized(cmd) * 1000)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu_ms.append((r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) * 1000)
    figures["startup_hello"] = {
        **summary(theirs_ms, "ms", 1),
        "pass": None,
        "cpu_ms": round(_median(theirs_cpu), 1),
        "target": "the baseline (scripts/bench_hello_server.py)",
    }
    ratio = _median(ours_ms) / _median(theirs_ms)
    figures["startup_continuum_mcp"] = judged(
        summary(ours_ms, "ms", 1),
        ratio=ratio,
        ratio_to="startup_hello",
        target="<= 1.15 x startup_hello",
        ok=ratio <= 1.15,
    )
    figures["startup_continuum_mcp"].update(
        cpu_ms=round(_median(ours_cpu), 1),
        cpu_ratio=round(_median(ours_cpu) / _median(theirs_cpu), 3),
    )

    # 9. peak memory of the server under maximum-size and oversized lines
    progress("MCP server peak memory under 1 MiB messages and oversized lines")
    db = backend.url(f"events-{sizes[0]}")
    idle = memory_under(db, 0, 0)
    at_limit = memory_under(db, MIB, 10 if quick else 30)
    oversize = [
        (mib, memory_under(db, mib * MIB, 3)) for mib in ((4, 16) if quick else (4, 16, 64))
    ]
    largest = oversize[-1][1]
    growth_kib = largest - at_limit
    store_figure(
        "mcp_peak_memory",
        {
            "median": round(largest / 1024, 1),
            "unit": "MiB VmHWM",
            "idle_mib": round(idle / 1024, 1),
            "at_limit_mib": round(at_limit / 1024, 1),
            "oversized_mib": {f"{mib} MiB lines": round(kib / 1024, 1) for mib, kib in oversize},
            "growth_beyond_limit_mib": round(growth_kib / 1024, 1),
            "target": f"bounded: {oversize[-1][0]} MiB lines add < 2 MiB over 1 MiB messages",
            "pass": growth_kib < 2 * 1024,
        },
    )
    figures.update(hook_figures(work, 15 if quick else 30))
    if backend.kind == "sqlite":  # continuum-mcp over streamable HTTP with bearer tokens (issue 16)
        progress("continuum-mcp over HTTP/HTTPS with bearer tokens, next to stdio")
        from bench_http import http_figures  # scripts/ is this script's own directory

        (work / "http").mkdir(exist_ok=True)
        figures.update(http_figures(work / "http", quick))
    figures["cpu_calibration_end"] = {
        **summary([calibrate() for _ in range(3)], "s"),
        "target": "(machine speed at the end)",
        "pass": None,
    }
    return {"figures": figures, "growth": [growth[n] for n in sizes]}


HOOK_REGISTRY = (
    (HERE.parent / "src" / "continuum" / "hooks" / "effects.example.toml").read_text(
        encoding="utf-8"
    )
    + """
[[effect]]
tool = "Bash"
match = { command = '^\\./send ' }
action_type = "send_invoice"
key = "{command}"
"""
)


def _hook_rows(
    bare: list[float], no_match: list[float], effect: list[float], suffix: str
) -> dict[str, Any]:
    """The no-match and registered-effect rows, judged against a bare start (issue 27);
    ``suffix`` "_resident": the calls handed to `hooks serve`."""
    how = ", through `hooks serve`" if suffix else ""
    ratio = _median(no_match) / _median(bare)
    pair = _median(effect)
    return {
        f"hook_no_match{suffix}": judged(
            summary(no_match, "ms"),
            ratio=ratio,
            ratio_to="bare interpreter",
            target=f"<= 1.5 x a bare interpreter start (issue 27){how}",
            ok=ratio <= 1.5,
        ),
        f"hook_effect_pre_post{suffix}": judged(
            summary(effect, "ms"),
            ratio=pair / _median(bare),
            ratio_to="bare interpreter",
            target="pre-tool + post-tool median <= 100 ms and <= 3 x a bare interpreter "
            f"(issue 27){how}",
            ok=pair <= 100 and pair <= 3 * _median(bare),
        ),
    }


def hook_figures(work: Path, rounds: int) -> dict[str, Any]:
    """The gate on every tool call (SPEC 13): what a host waits for, per hook process."""
    progress("host hooks: a call matching no rule, and a registered effect (pre + post)")
    # Bytecode as an installed package has it: under PYTHONDONTWRITEBYTECODE (set on some
    # machines) a module edited since its .pyc was written is compiled again by every hook
    # process, which is not what a hook costs.
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(HERE.parent / "src" / "continuum")],
        capture_output=True,
        check=False,
    )
    project = work / "hook-project"
    (project / ".continuum").mkdir(parents=True)
    (project / ".continuum" / "effects.toml").write_text(HOOK_REGISTRY, encoding="utf-8")
    exe = shutil.which("continuum", path=str(Path(sys.executable).parent))
    hook = [exe] if exe else [sys.executable, "-m", "continuum"]
    db = work / "hooks.db"
    # The gate enforces only a registry a person accepted (as `hooks install` does).
    accept = [*hook, "hooks", "accept", "--dir", str(project), "--run", "bench", "--yes"]
    subprocess.run([*accept, "--db", str(db)], capture_output=True, check=True)

    def command(kind: str, store: Path = db) -> list[str]:
        return [
            *hook,
            "hook",
            kind,
            "--host",
            "claude-code",
            "--db",
            str(store),
            "--run",
            "bench",
            "--project",
            str(project),
        ]

    alone = {**os.environ, "CONTINUUM_GATE_SOCKET": "off"}

    def call(argv: list[str], payload: dict[str, Any], env: dict[str, str] = alone) -> float:
        data = json.dumps({"session_id": "bench", "cwd": str(project), **payload}).encode()
        t0 = time.perf_counter()
        p = subprocess.run(argv, input=data, capture_output=True, check=False, env=env)
        elapsed = time.perf_counter() - t0
        if p.returncode != 0:
            raise RuntimeError(f"hook failed ({p.returncode}): {p.stderr.decode()[:300]}")
        return elapsed * 1000

    # The same calls handed to a resident gate (`continuum hooks serve`), on a second store.
    gate_dir = Path(tempfile.mkdtemp(prefix="gate-", dir="/tmp"))
    socket_path = gate_dir / "g" / "gate.sock"
    gate_log = work / "gate.log"
    with gate_log.open("wb") as log:
        gate = subprocess.Popen(
            [*hook, "hooks", "serve", "--socket", str(socket_path)],
            stderr=log,
            env=alone,
        )
    gated = {**os.environ, "CONTINUUM_GATE_SOCKET": str(socket_path)}
    gate_db = work / "hooks-gate.db"
    subprocess.run([*accept, "--db", str(gate_db)], capture_output=True, check=True, env=alone)
    deadline = time.monotonic() + 60
    while "listening on" not in gate_log.read_text(encoding="utf-8"):
        if gate.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the gate did not start: {gate_log.read_text(encoding='utf-8')}")
        time.sleep(0.05)
    time.sleep(1.0)  # its spares forked and rehearsed

    def gated_command(kind: str) -> list[str]:
        return command(kind, gate_db)

    bare, bare_path, no_match, effect = [], [], [], []
    no_match_gate, effect_gate = [], []
    python3 = shutil.which("python3")
    echo = {"tool_name": "Bash", "tool_input": {"command": "echo hello"}}
    try:
        for i in range(rounds):  # interleaved: a busy moment slows every side alike
            bare.append(call([sys.executable, "-c", "pass"], {}))
            if python3:
                bare_path.append(call([python3, "-c", "pass"], {}))
            no_match.append(call(command("pre-tool"), echo))
            no_match_gate.append(call(gated_command("pre-tool"), echo, gated))
            send = {
                "tool_name": "Bash",
                "tool_input": {"command": f"./send INV-{i}"},
                "tool_use_id": f"t{i}",
            }
            post = {**send, "tool_response": {"stdout": "", "stderr": "", "interrupted": False}}
            effect.append(call(command("pre-tool"), send) + call(command("post-tool"), post))
            effect_gate.append(
                call(gated_command("pre-tool"), send, gated)
                + call(gated_command("post-tool"), post, gated)
            )
    finally:
        gate.terminate()
        gate.wait(timeout=30)
        shutil.rmtree(gate_dir, ignore_errors=True)
    served = re.search(r"after (\d+) calls", gate_log.read_text(encoding="utf-8"))
    if served is None or int(served.group(1)) != 3 * rounds:
        raise RuntimeError(f"the gate served {served and served.group(1)} of {3 * rounds} calls")
    out = {
        "hook_bare_interpreter": {
            **summary(bare, "ms"),
            "target": f"(baseline: {sys.executable} -c pass)",
            "pass": None,
        },
        **_hook_rows(bare, no_match, effect, ""),
        **_hook_rows(bare, no_match_gate, effect_gate, "_resident"),
    }
    if bare_path:
        out["hook_python3_on_path"] = {
            **summary(bare_path, "ms"),
            "pass": None,
            "target": f"(`python3 -c pass` as found on PATH: {python3})",
        }
    return out


# -- output ------------------------------------------------------------------------------

ORDER = [
    "cpu_calibration",
    "fsync_limit",
    "sqlite_commit_loop",
    "pg_commit_loop",
    "durable_append",
    "durable_append_vs_commit_loop",
    "durable_append_cpu",
    "bare_pair_loop",
    "intercept_complete_1000",
    "intercept_complete_10000",
    "intercept_complete_100000",
    "intercept_flatness",
    "intercept_complete_cpu",
    "resume_mcp_1000",
    "resume_mcp_10000",
    "resume_mcp_100000",
    "resume_mcp_ledger_1000",
    "resume_mcp_ledger_10000",
    "resume_mcp_ledger_100000",
    "checkpoint_ledger_10000",
    "checkpoint_ledger_100000",
    "list_actions_1000",
    "list_actions_5000",
    "list_actions_50000",
    "verify_10000",
    "fold_10000",
    "fold_models_10000",
    "full_state_10000",
    "fold_in_memory_10000",
    "verify_ledger_10000",
    "fold_ledger_10000",
    "fold_models_ledger_10000",
    "full_state_ledger_10000",
    "fold_in_memory_ledger_10000",
    "verify_100000",
    "fold_100000",
    "fold_models_100000",
    "full_state_100000",
    "fold_in_memory_100000",
    "verify_ledger_100000",
    "fold_ledger_100000",
    "fold_models_ledger_100000",
    "full_state_ledger_100000",
    "fold_in_memory_ledger_100000",
    "mcp_call_hello",
    "mcp_call_intercept_complete",
    "agents_sqlite_1",
    "agents_sqlite_4_runs",
    "agents_sqlite_4_shared_run",
    "agents_postgresql_1",
    "agents_postgresql_4_runs",
    "agents_postgresql_4_shared_run",
    "agents_postgresql_16_runs",
    "agents_postgresql_16_shared_run",
    "startup_hello",
    "startup_continuum_mcp",
    "mcp_peak_memory",
    "hook_bare_interpreter",
    "hook_python3_on_path",
    "hook_no_match",
    "hook_effect_pre_post",
    "hook_no_match_resident",
    "hook_effect_pre_post_resident",
    "cpu_calibration_end",
]

GROWTH_COLUMNS = [
    "size",
    "intercept_pairs_per_s",
    "intercept_cpu_us_per_pair",
    "resume_mcp_ms",
    "resume_mcp_ledger_ms",
    "list_actions_ms",
    "checkpoint_ledger_kib",
    "verify_s",
    "fold_s",
    "fold_models_s",
    "verify_ledger_s",
    "fold_ledger_s",
    "fold_models_ledger_s",
    "full_state_ledger_s",
]


def render(doc: dict[str, Any], previous: dict[str, Any] | None) -> list[str]:
    figs = doc["figures"]
    rows = [
        [
            "figure",
            "store",
            "median",
            "spread (min..max)",
            "unit",
            "vs limit/baseline",
            "target",
            "result",
        ]
    ]
    names = [n for n in ORDER if n in figs] + [n for n in figs if n not in ORDER]
    for name in names:
        f = figs[name]
        spread = f"{f['min']}..{f['max']}" if "min" in f else "-"
        ratio = f"{f['ratio']} x {f['ratio_to']}" if "ratio" in f else "-"
        result = {True: "PASS", False: "FAIL", None: "-"}[f.get("pass")]
        if f.get("errors"):
            result += f" (errors: {f['errors']})"
        if (
            previous
            and name in previous.get("figures", {})
            and previous["figures"][name].get("median")
        ):
            before = previous["figures"][name]["median"]
            result += f" (prev {before})"
        rows.append(
            [
                name,
                f.get("backend", "-"),
                str(f["median"]),
                spread,
                f["unit"],
                ratio,
                f["target"],
                result,
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    mem = figs.get("mcp_peak_memory")
    if mem:
        lines += [
            "",
            f"MCP server VmHWM: idle {mem['idle_mib']} MiB, after 1 MiB messages "
            f"{mem['at_limit_mib']} MiB, "
            + ", ".join(f"{k}: {v} MiB" for k, v in mem["oversized_mib"].items()),
        ]
    cpu = ["CPU per operation (user + system; a busy machine distorts it far less than wall time):"]
    if "durable_append" in figs:
        fs = figs.get("fsync_limit")
        limit = (
            f"raw write+fsync: append {fs['append_median']}/s, overwrite {fs['overwrite_median']}/s"
            if fs
            else "client side; the server's share is not counted"
        )
        cpu.append(f"  durable append {figs['durable_append']['cpu_us_per_append']} us ({limit})")
    pair_cpu = [
        f"{n.rsplit('_', 1)[1]}: {figs[n]['cpu_us_per_pair']} us"
        for n in names
        if re.fullmatch(r"intercept_complete_\d+", n)
    ]
    if pair_cpu:
        cpu.append(
            f"  intercept+complete pair {', '.join(pair_cpu)}; bare two-commit pair "
            f"{figs['bare_pair_loop']['cpu_us_per_pair']} us"
        )
    if "mcp_call_intercept_complete" in figs:
        cpu.append(
            f"  MCP server per call: intercept/complete "
            f"{figs['mcp_call_intercept_complete']['server_cpu_us_per_call']} us, "
            f"bare SDK tool {figs['mcp_call_hello']['server_cpu_us_per_call']} us"
        )
    agents = [
        f"{n[len('agents_') :]} {figs[n]['client_cpu_us_per_pair']} us"
        for n in names
        if n.startswith("agents_")
    ]
    if agents:
        cpu.append(f"  many agents, client CPU per pair: {', '.join(agents)}")
    if "startup_continuum_mcp" in figs:
        st = figs["startup_continuum_mcp"]
        cpu.append(
            f"  start-up (whole process): continuum-mcp {st['cpu_ms']} ms, hello "
            f"{figs['startup_hello']['cpu_ms']} ms, ratio {st['cpu_ratio']}"
        )
    if "cpu_calibration" in figs:
        cpu.append(
            f"  calibration workload {figs['cpu_calibration']['median']} s at the start, "
            f"{figs.get('cpu_calibration_end', {}).get('median', '-')} s at the end"
        )
    lines += ["", *cpu]
    if doc["growth"]:
        lines += [
            "",
            "How cost grows with the size of the work (list_actions: the ledger run "
            "of N events, N/2 actions):",
        ]
        grid = [GROWTH_COLUMNS] + [
            [str(g.get(c, "-")) for c in GROWTH_COLUMNS] for g in doc["growth"]
        ]
        w = [max(len(r[i]) for r in grid) for i in range(len(GROWTH_COLUMNS))]
        lines += ["  ".join(c.rjust(x) for c, x in zip(r, w, strict=True)) for r in grid]
    verdicts = [f.get("pass") for f in figs.values() if f.get("pass") is not None]
    store = doc.get("backend", {})
    where = (
        f"PostgreSQL {store.get('server_version')} at {store.get('server')} "
        f"(fsync {store.get('fsync')}, synchronous_commit {store.get('synchronous_commit')})"
        if store.get("kind") == "postgresql"
        else "SQLite files"
    )
    lines += [
        "",
        f"{sum(verdicts)}/{len(verdicts)} targets met; store: {where}; machine: "
        f"{doc['machine']['cpus']} CPUs, load {doc['machine']['loadavg']} -> "
        f"{doc['machine_end_loadavg']}, {doc['machine']['filesystem']}; "
        f"{doc['seconds']:.0f} s",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="1,000 and 10,000 only, fewer repeats (targets at 100,000 not judged)",
    )
    ap.add_argument(
        "--db",
        default=None,
        metavar="URL",
        help="postgresql://USER@HOST:PORT/DB: measure the store-based figures on "
        "that server, in private databases created (and dropped) by this run; "
        "default: SQLite files",
    )
    ap.add_argument(
        "--agents-pg",
        default=None,
        metavar="URL",
        help="a PostgreSQL server for the many-agent figures when --db is SQLite "
        "(with --db postgresql://..., that server is used)",
    )
    ap.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where to build the stores and probe fsync (default: a temporary "
        "directory); the figures are for that file system",
    )
    ap.add_argument("--keep", action="store_true", help="keep the stores afterwards")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON document here")
    ap.add_argument(
        "--hooks-only",
        action="store_true",
        help="measure only the host hooks' latency (a minute, not the whole set)",
    )
    ap.add_argument(
        "--hosts",
        action="store_true",
        help="measure only what the hooks cost through the real coding hosts "
        "(scripts/bench_hosts.py; `make hosts` installs them)",
    )
    ap.add_argument(
        "--mcp-start-only",
        action="store_true",
        help="measure only continuum-mcp's start against a bare SDK server "
        "(scripts/bench_mcp_start.py: 24 interleaved starts each, CPU of each child)",
    )
    ap.add_argument(
        "--previous",
        type=Path,
        default=None,
        help="a JSON document of an earlier run, shown next to each figure",
    )
    args = ap.parse_args(argv)
    if args.mcp_start_only:
        import bench_mcp_start

        return bench_mcp_start.main(
            (["--json"] if args.json else []) + (["--out", str(args.out)] if args.out else [])
        )
    if args.hosts:
        import bench_hosts

        return bench_hosts.main(
            (["--json"] if args.json else []) + (["--out", str(args.out)] if args.out else [])
        )
    for flag, url in (("--db", args.db), ("--agents-pg", args.agents_pg)):
        if url is not None and not is_postgres_url(url):
            ap.error(f"{flag} takes a postgresql:// URL (SQLite stores go in --dir)")
    previous = json.loads(args.previous.read_text()) if args.previous else None
    work = Path(tempfile.mkdtemp(prefix="continuum-perf-", dir=args.dir))
    started = time.perf_counter()
    backend = Backend(work, args.db)
    agents_pg = backend if args.db else Backend(work, args.agents_pg) if args.agents_pg else None
    try:
        info = machine(work)
        store = backend.describe()
        measured = (
            {"figures": hook_figures(work, 30), "growth": []}
            if args.hooks_only
            else run(work, args.quick, backend, agents_pg)
        )
        doc = {"version": 2, "quick": args.quick, "machine": info, "backend": store, **measured}
    finally:
        for b in {id(b): b for b in (backend, agents_pg) if b is not None}.values():
            b.close(args.keep)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            progress(f"stores kept in {work}")
    doc["machine_end_loadavg"] = [round(x, 2) for x in os.getloadavg()]
    doc["seconds"] = round(time.perf_counter() - started, 1)
    doc["passed"] = all(f.get("pass") is not False for f in doc["figures"].values())
    if args.out:
        args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    if args.json:
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        print("\n".join(render(doc, previous)))
    return 0 if doc["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())

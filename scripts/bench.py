"""Performance figures against hard limits measured in the same run (SPEC 13).

Usage: scripts/bench.py [--json] [--quick] [--dir DIR] [--out FILE] [--previous FILE]

Every figure is a median with its spread over repeats, the ratio to the limit or
baseline it is judged against (measured here, in this run, on the same file system),
and pass/fail against the SPEC 13 target:

- durable append, one writer        >= 90% of write+fsync of a small record in a loop
- intercept+complete pairs/s         flat (within 20%) from 1,000 to 100,000 actions,
                                     >= 80% of a bare two-commit apsw loop (WAL + FULL)
- continuum_resume over MCP stdio    median < 10 ms at 100,000 events with a checkpoint,
                                     flat in log length (within 20%)
- verify / full fold of 100,000      < 1 s each
- continuum-mcp spawn-to-initialize  <= 1.15 x a bare "hello" server on the same SDK
- MCP server peak memory (VmHWM)     bounded: no growth with the line size beyond the limit
- host hook, call matching no rule   median <= 2 x a bare interpreter start (`python -c pass`)
- host hook, registered effect       pre-tool + post-tool median < 250 ms

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
import os
import platform
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

import apsw

from continuum.events import EventType
from continuum.ledger import ActionLedger
from continuum.projection import project
from continuum.runtime import Continuum

HERE = Path(__file__).resolve().parent
RUN = "bench"
MIB = 1 << 20


def progress(message: str) -> None:
    sys.stderr.write(f"bench: {message}\n")
    sys.stderr.flush()


# -- statistics --------------------------------------------------------------------------


def summary(samples: list[float], unit: str, digits: int = 3) -> dict[str, Any]:
    s = sorted(samples)
    q = statistics.quantiles(s, n=4) if len(s) >= 2 else [s[0], s[0], s[0]]

    def r(x: float) -> float:
        return round(x, digits)

    return {"median": r(statistics.median(s)), "min": r(s[0]), "max": r(s[-1]),
            "q1": r(q[0]), "q3": r(q[2]), "n": len(s), "unit": unit}


def judged(fig: dict[str, Any], *, ratio: float | None = None, ratio_to: str | None = None,
           target: str, ok: bool | None) -> dict[str, Any]:
    fig = dict(fig)
    if ratio is not None:
        fig["ratio"] = round(ratio, 3)
        fig["ratio_to"] = ratio_to
    fig["target"] = target
    fig["pass"] = ok
    return fig


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


def build_event_store(path: Path, events: int) -> None:
    """A run of exactly ``events`` events (the SPEC 11 shape: work items completed), with a
    checkpoint every tenth of the way, as a long-running agent would leave, the last one
    at the head."""
    rt = Continuum.open(str(path))
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


def build_ledger_store(path: Path, events: int) -> None:
    """A run of ``events`` events where every event is a ledger transition (events / 2
    sends, each intercepted and completed), ending with a checkpoint: an agent whose work
    is all side effects."""
    build_action_store(path, events // 2 - 1)
    rt = Continuum.open(str(path), create=False)
    rt.checkpoint(RUN, reason="bench fixture")
    rt.close()


def build_action_store(path: Path, actions: int) -> None:
    """A run holding ``actions`` completed actions, written by the ledger itself."""
    rt = Continuum.open(str(path))
    rt.start_run(RUN, "send invoices")
    shared = _OneTransaction(rt.store)
    ledger = ActionLedger(shared, origin=rt.origin)  # type: ignore[arg-type]
    done = 0
    while done < actions:
        with rt.store.write(RUN) as tx:
            shared.tx = tx
            for _ in range(min(5_000, actions - done)):
                r = ledger.intercept(RUN, "send_invoice", {"invoice": f"F-{done}"},
                                     key=f"invoice:F-{done}")
                ledger.complete(RUN, r.action_key, external_id=f"x-{done}")
                done += 1
            shared.tx = None
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
    system: a figure a busy machine distorts far less than wall time."""
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
    conn.execute("CREATE TABLE IF NOT EXISTS actions (id TEXT PRIMARY KEY, status TEXT, record TEXT)")
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


def pair_loop(rt: Continuum, count: int, tag: str) -> float:
    start = time.perf_counter()
    for i in range(count):
        r = rt.intercept(RUN, "send_invoice", {"invoice": f"{tag}-{i}"}, key=f"invoice:{tag}-{i}")
        rt.complete(RUN, r.action_key, external_id=f"x-{tag}-{i}")
    return count / (time.perf_counter() - start)


# -- MCP over stdio ----------------------------------------------------------------------


def continuum_mcp() -> list[str]:
    exe = Path(sys.executable).parent / "continuum-mcp"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "continuum.mcp"]


def hello_server() -> list[str]:
    return [sys.executable, str(HERE / "bench_hello_server.py")]


class RawClient:
    """A minimal JSON-RPC client on a server's pipes: it adds next to nothing to a latency."""

    def __init__(self, cmd: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        self._id = 0

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
        self.send({"jsonrpc": "2.0", "id": self._id, "method": method, "params": params or {}})
        while True:
            answer = self.read()
            if answer.get("id") == self._id:
                return answer

    def initialize(self) -> dict[str, Any]:
        answer = self.request("initialize", {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "continuum-bench", "version": "1"}})
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
    answer = client.request("tools/call", {"name": "continuum_resume", "arguments": {"run_id": RUN}})
    elapsed = time.perf_counter() - start
    result = answer.get("result", {})
    if result.get("isError") or result.get("structuredContent", {}).get("mode") != "resume":
        raise RuntimeError(f"continuum_resume did not answer mode=resume: {str(answer)[:300]}")
    return elapsed


def memory_under(db: Path, line_bytes: int, count: int) -> int:
    """VmHWM (KiB) of a fresh continuum-mcp after ``count`` lines of ``line_bytes`` bytes.

    A line at or under the 1 MiB limit is a real tools/call (continuum_validate with a
    padded env); a longer one must be refused without being held in memory.
    """
    client = RawClient([*continuum_mcp(), "--db", str(db)])
    try:
        client.initialize()
        for i in range(count):
            head = {"jsonrpc": "2.0", "id": 1000 + i, "method": "tools/call",
                    "params": {"name": "continuum_validate",
                               "arguments": {"run_id": RUN, "env": {"pad": ""}}}}
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
    return {"python": platform.python_version(), "sqlite": apsw.sqlite_lib_version(),
            "apsw": apsw.apswversion(), "cpus": os.cpu_count(), "platform": platform.platform(),
            "filesystem": fs, "free_gib": round(st.f_bavail * st.f_frsize / 2**30, 1),
            "loadavg": [round(x, 2) for x in os.getloadavg()]}


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _median(samples: list[float]) -> float:
    return statistics.median(samples)


def run(work: Path, quick: bool) -> dict[str, Any]:
    sizes = [1_000, 10_000] if quick else [1_000, 10_000, 100_000]
    big = sizes[-1]
    rounds = 3 if quick else 5
    figures: dict[str, Any] = {}
    growth: dict[int, dict[str, Any]] = {n: {"size": n} for n in sizes}
    evaluated = not quick  # the targets are stated at 100,000: a quick run only shows trends
    figures["cpu_calibration"] = {**summary([calibrate() for _ in range(3)], "s"),
                                  "target": "(machine speed: a fixed Python workload)",
                                  "pass": None}

    # 1. durable append vs write+fsync (and SQLite's own commit loop), interleaved
    progress("durable append vs the disk's write+fsync limit")
    append_rt = Continuum.open(str(work / "append.db"))
    append_rt.start_run(RUN, "append")
    commits = open_bare(work / "commits.db")
    count = 100 if quick else 200
    fs_append, fs_over, ap_rates, sq_rates, ap_cpu = [], [], [], [], []
    for r in range(rounds):
        fs_append.append(fsync_loop(work, count, "append"))
        fs_over.append(fsync_loop(work, count, "overwrite"))
        sq_rates.append(bare_commit_loop(commits, count, r * count))
        rate, cpu = cpu_us_per_op(lambda: append_loop(append_rt, count), count)
        ap_rates.append(rate)
        ap_cpu.append(cpu)
    append_rt.close()
    commits.close()
    fs_rates = fs_over if _median(fs_over) >= _median(fs_append) else fs_append
    figures["fsync_limit"] = {**summary(fs_rates, "records/s", 1), "pass": None,
                              "append_median": round(_median(fs_append), 1),
                              "overwrite_median": round(_median(fs_over), 1),
                              "target": "the limit: write + fsync of a 121-byte record, the "
                                        "faster of append / overwrite-in-place"}
    sq = _median(sq_rates) / _median(fs_rates)
    figures["sqlite_commit_loop"] = {**summary(sq_rates, "commits/s", 1), "ratio": round(sq, 3),
                                     "ratio_to": "fsync_limit", "pass": None,
                                     "target": "(reference: bare apsw, one row per commit)"}
    ratio = _median(ap_rates) / _median(fs_rates)
    figures["durable_append"] = judged(summary(ap_rates, "appends/s", 1), ratio=ratio,
                                       ratio_to="fsync_limit", target=">= 0.90 x fsync_limit",
                                       ok=ratio >= 0.90)
    figures["durable_append"]["cpu_us_per_append"] = round(_median(ap_cpu), 1)

    # 2. intercept+complete at 1k/10k/100k actions vs a bare two-commit loop, interleaved
    for n in sizes:
        progress(f"building a store with {n:,} completed actions (ledger, one transaction)")
        t = timed(lambda n=n: build_action_store(work / f"actions-{n}.db", n))
        growth[n]["build_actions_s"] = round(t, 1)
    progress("intercept+complete pairs/s at " + " / ".join(f"{n:,}" for n in sizes)
             + " actions, and the bare apsw loop")
    rts = {n: Continuum.open(str(work / f"actions-{n}.db"), create=False) for n in sizes}
    bare = open_bare(work / "bare.db")
    pairs = 100 if quick else 150
    pair_rates: dict[int, list[float]] = {n: [] for n in sizes}
    pair_cpu: dict[int, list[float]] = {n: [] for n in sizes}
    bare_rates, bare_cpu = [], []
    for r in range(rounds):
        rate, cpu = cpu_us_per_op(lambda r=r: bare_pair_loop(bare, pairs, r * pairs), pairs)
        bare_rates.append(rate)
        bare_cpu.append(cpu)
        for n in sizes:
            rate, cpu = cpu_us_per_op(lambda n=n, r=r: pair_loop(rts[n], pairs, f"m{r}"), pairs)
            pair_rates[n].append(rate)
            pair_cpu[n].append(cpu)
    bare.close()
    for rt in rts.values():
        rt.close()
    figures["bare_pair_loop"] = {**summary(bare_rates, "pairs/s", 1), "pass": None,
                                 "cpu_us_per_pair": round(_median(bare_cpu), 1),
                                 "target": "the baseline (apsw, WAL + synchronous=FULL)"}
    bare_median = _median(bare_rates)
    small = _median(pair_rates[sizes[0]])
    for n in sizes:
        med = _median(pair_rates[n])
        growth[n]["intercept_pairs_per_s"] = round(med, 1)
        growth[n]["intercept_cpu_us_per_pair"] = round(_median(pair_cpu[n]), 1)
        fig = judged(summary(pair_rates[n], "pairs/s", 1), ratio=med / bare_median,
                     ratio_to="bare_pair_loop", target=">= 0.80 x bare_pair_loop",
                     ok=med / bare_median >= 0.80 if evaluated else None)
        fig["cpu_us_per_pair"] = round(_median(pair_cpu[n]), 1)
        fig["flat_ratio_to_1k"] = round(med / small, 3)
        figures[f"intercept_complete_{n}"] = fig
    flat = _median(pair_rates[big]) / small
    flat_cpu = _median(pair_cpu[sizes[0]]) / _median(pair_cpu[big])
    figures["intercept_flatness"] = {"median": round(flat, 3), "unit": "ratio",
                                     "cpu_ratio": round(flat_cpu, 3),
                                     "detail": f"pairs/s at {big:,} / at {sizes[0]:,} actions "
                                               "(cpu_ratio: CPU per pair, 1,000 / largest)",
                                     "target": ">= 0.80 (within 20%)",
                                     "pass": flat >= 0.80 if evaluated else None}

    # 3. continuum_resume over MCP stdio at 1k/10k/100k events with a checkpoint: a run of
    #    work items (the SPEC 11 shape), and a run where every event is a ledger transition
    for n in sizes:
        progress(f"building runs of {n:,} events with checkpoints (work items; ledger)")
        growth[n]["build_events_s"] = round(timed(
            lambda n=n: build_event_store(work / f"events-{n}.db", n)), 1)
        growth[n]["build_ledger_s"] = round(timed(
            lambda n=n: build_ledger_store(work / f"ledger-{n}.db", n)), 1)
    progress("continuum_resume latency over MCP stdio")
    for kind, calls in (("events", 20 if quick else 60), ("ledger", 5 if quick else 7)):
        clients = {n: RawClient([*continuum_mcp(), "--db", str(work / f"{kind}-{n}.db")])
                   for n in sizes}
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
            figures[f"{label}_{n}"] = judged(
                summary(latencies[n], "ms", 2), ratio=med / first, ratio_to=f"{label}_{sizes[0]}",
                target="median < 10 ms and within 20% of 1,000",
                ok=ok if (n == big and evaluated) else None)

    # 4. verify and full fold (read + fold, and the fold alone) at every size, both kinds
    progress("verify and full fold")
    for kind in ("events", "ledger"):
        suffix = "" if kind == "events" else "_ledger"
        for n in sizes:
            rt = Continuum.open(str(work / f"{kind}-{n}.db"), create=False)
            reps = (rounds if kind == "events" else 3) if n == big else 3
            verify = [timed(lambda rt=rt: rt.verify(RUN)) for _ in range(reps)]
            fold = [timed(lambda rt=rt: project(RUN, rt.store.iter_events(RUN))) for _ in range(reps)]
            events = rt.store.read_events(RUN)
            pure = [timed(lambda events=events: project(RUN, events)) for _ in range(reps)]
            assert rt.verify(RUN).ok
            rt.close()
            growth[n].update({f"verify{suffix}_s": round(_median(verify), 3),
                              f"fold{suffix}_s": round(_median(fold), 3),
                              f"fold_in_memory{suffix}_s": round(_median(pure), 3)})
            if n == big:
                figures[f"verify{suffix}_{n}"] = judged(
                    summary(verify, "s"), target="< 1 s",
                    ok=_median(verify) < 1.0 if evaluated else None)
                figures[f"fold{suffix}_{n}"] = judged(
                    summary(fold, "s"), target="< 1 s (read from the store, chain checked, folded)",
                    ok=_median(fold) < 1.0 if evaluated else None)
                figures[f"fold_in_memory{suffix}_{n}"] = {
                    **summary(pure, "s"), "pass": None,
                    "target": "(the pure fold, events already in memory)"}

    # 5. spawn-to-initialized: continuum-mcp vs a bare hello server, interleaved
    progress("continuum-mcp spawn-to-initialized vs a bare hello server")
    ours, theirs, ours_cpu, theirs_cpu = [], [], [], []
    for i in range(8 if quick else 20):
        pair = [(ours, ours_cpu, [*continuum_mcp(), "--db", str(work / f"events-{sizes[0]}.db")]),
                (theirs, theirs_cpu, hello_server())]
        for samples, cpu, cmd in (pair if i % 2 == 0 else pair[::-1]):
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            samples.append(spawn_to_initialized(cmd) * 1000)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append((r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) * 1000)
    figures["startup_hello"] = {**summary(theirs, "ms", 1), "pass": None,
                                "cpu_ms": round(_median(theirs_cpu), 1),
                                "target": "the baseline (scripts/bench_hello_server.py)"}
    ratio = _median(ours) / _median(theirs)
    figures["startup_continuum_mcp"] = judged(summary(ours, "ms", 1), ratio=ratio,
                                              ratio_to="startup_hello",
                                              target="<= 1.15 x startup_hello", ok=ratio <= 1.15)
    figures["startup_continuum_mcp"].update(
        cpu_ms=round(_median(ours_cpu), 1),
        cpu_ratio=round(_median(ours_cpu) / _median(theirs_cpu), 3))

    # 6. peak memory of the server under maximum-size and oversized lines
    progress("MCP server peak memory under 1 MiB messages and oversized lines")
    db = work / f"events-{sizes[0]}.db"
    idle = memory_under(db, 0, 0)
    at_limit = memory_under(db, MIB, 10 if quick else 30)
    oversize = [(mib, memory_under(db, mib * MIB, 3)) for mib in ((4, 16) if quick else (4, 16, 64))]
    largest = oversize[-1][1]
    growth_kib = largest - at_limit
    figures["mcp_peak_memory"] = {
        "median": round(largest / 1024, 1), "unit": "MiB VmHWM",
        "idle_mib": round(idle / 1024, 1), "at_limit_mib": round(at_limit / 1024, 1),
        "oversized_mib": {f"{mib} MiB lines": round(kib / 1024, 1) for mib, kib in oversize},
        "growth_beyond_limit_mib": round(growth_kib / 1024, 1),
        "target": f"bounded: {oversize[-1][0]} MiB lines add < 2 MiB over 1 MiB messages",
        "pass": growth_kib < 2 * 1024}
    figures.update(hook_figures(work, 15 if quick else 30))
    figures["cpu_calibration_end"] = {**summary([calibrate() for _ in range(3)], "s"),
                                      "target": "(machine speed at the end)", "pass": None}
    return {"figures": figures, "growth": [growth[n] for n in sizes]}


HOOK_REGISTRY = (HERE.parent / "src" / "continuum" / "hooks" / "effects.example.toml").read_text(
    encoding="utf-8") + """
[[effect]]
tool = "Bash"
match = { command = '^\\./send ' }
action_type = "send_invoice"
key = "{command}"
"""


def hook_figures(work: Path, rounds: int) -> dict[str, Any]:
    """The gate on every tool call (SPEC 13): what a host waits for, per hook process."""
    progress("host hooks: a call matching no rule, and a registered effect (pre + post)")
    project = work / "hook-project"
    (project / ".continuum").mkdir(parents=True)
    (project / ".continuum" / "effects.toml").write_text(HOOK_REGISTRY, encoding="utf-8")
    exe = shutil.which("continuum", path=str(Path(sys.executable).parent))
    hook = [exe] if exe else [sys.executable, "-m", "continuum"]
    db = work / "hooks.db"

    def command(kind: str) -> list[str]:
        return [*hook, "hook", kind, "--host", "claude-code", "--db", str(db), "--run", "bench",
                "--project", str(project)]

    def call(argv: list[str], payload: dict[str, Any]) -> float:
        data = json.dumps({"session_id": "bench", "cwd": str(project), **payload}).encode()
        t0 = time.perf_counter()
        p = subprocess.run(argv, input=data, capture_output=True, check=False)
        elapsed = time.perf_counter() - t0
        if p.returncode != 0:
            raise RuntimeError(f"hook failed ({p.returncode}): {p.stderr.decode()[:300]}")
        return elapsed * 1000

    bare, bare_path, no_match, effect = [], [], [], []
    python3 = shutil.which("python3")
    echo = {"tool_name": "Bash", "tool_input": {"command": "echo hello"}}
    for i in range(rounds):  # interleaved: a busy moment slows every side alike
        bare.append(call([sys.executable, "-c", "pass"], {}))
        if python3:
            bare_path.append(call([python3, "-c", "pass"], {}))
        no_match.append(call(command("pre-tool"), echo))
        send = {"tool_name": "Bash", "tool_input": {"command": f"./send INV-{i}"},
                "tool_use_id": f"t{i}"}
        post = {**send, "tool_response": {"stdout": "", "stderr": "", "interrupted": False}}
        effect.append(call(command("pre-tool"), send) + call(command("post-tool"), post))
    ratio = _median(no_match) / _median(bare)
    out = {
        "hook_bare_interpreter": {**summary(bare, "ms"), "target": f"(baseline: {sys.executable} "
                                  "-c pass)", "pass": None},
        "hook_no_match": judged(summary(no_match, "ms"), ratio=ratio, ratio_to="bare interpreter",
                                target="<= 2 x a bare interpreter start", ok=ratio <= 2.0),
        "hook_effect_pre_post": judged(summary(effect, "ms"),
                                       target="pre-tool + post-tool median < 250 ms",
                                       ok=_median(effect) < 250),
    }
    if bare_path:
        out["hook_python3_on_path"] = {**summary(bare_path, "ms"), "pass": None,
                                       "target": f"(`python3 -c pass` as found on PATH: {python3})"}
    return out


# -- output ------------------------------------------------------------------------------

ORDER = ["cpu_calibration", "fsync_limit", "sqlite_commit_loop", "durable_append",
         "bare_pair_loop", "intercept_complete_1000", "intercept_complete_10000",
         "intercept_complete_100000", "intercept_flatness", "resume_mcp_1000", "resume_mcp_10000",
         "resume_mcp_100000", "resume_mcp_ledger_1000", "resume_mcp_ledger_10000",
         "resume_mcp_ledger_100000", "verify_100000", "fold_100000", "fold_in_memory_100000",
         "verify_ledger_100000", "fold_ledger_100000", "fold_in_memory_ledger_100000",
         "startup_hello", "startup_continuum_mcp", "mcp_peak_memory", "hook_bare_interpreter",
         "hook_python3_on_path", "hook_no_match", "hook_effect_pre_post", "cpu_calibration_end"]


def render(doc: dict[str, Any], previous: dict[str, Any] | None) -> list[str]:
    figs = doc["figures"]
    rows = [["figure", "median", "spread (min..max)", "unit", "vs limit/baseline", "target",
             "result"]]
    names = [n for n in ORDER if n in figs] + [n for n in figs if n not in ORDER]
    for name in names:
        f = figs[name]
        spread = f"{f['min']}..{f['max']}" if "min" in f else "-"
        ratio = f"{f['ratio']} x {f['ratio_to']}" if "ratio" in f else "-"
        result = {True: "PASS", False: "FAIL", None: "-"}[f.get("pass")]
        if previous and name in previous.get("figures", {}) and previous["figures"][name].get("median"):
            before = previous["figures"][name]["median"]
            result += f" (prev {before})"
        rows.append([name, str(f["median"]), spread, f["unit"], ratio, f["target"], result])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    mem = figs.get("mcp_peak_memory")
    if mem:
        lines += ["", f"MCP server VmHWM: idle {mem['idle_mib']} MiB, after 1 MiB messages "
                  f"{mem['at_limit_mib']} MiB, " + ", ".join(
                      f"{k}: {v} MiB" for k, v in mem["oversized_mib"].items())]
    cpu = ["CPU per operation (user + system; a busy machine distorts it far less than wall "
           "time):"]
    if "durable_append" in figs:
        fs = figs["fsync_limit"]
        cpu.append(f"  durable append {figs['durable_append']['cpu_us_per_append']} us "
                   f"(raw write+fsync: append {fs['append_median']}/s, overwrite "
                   f"{fs['overwrite_median']}/s)")
    pair_cpu = [f"{n.rsplit('_', 1)[1]}: {figs[n]['cpu_us_per_pair']} us" for n in names
                if n.startswith("intercept_complete_")]
    if pair_cpu:
        cpu.append(f"  intercept+complete pair {', '.join(pair_cpu)}; bare two-commit pair "
                   f"{figs['bare_pair_loop']['cpu_us_per_pair']} us")
    if "startup_continuum_mcp" in figs:
        st = figs["startup_continuum_mcp"]
        cpu.append(f"  start-up (whole process): continuum-mcp {st['cpu_ms']} ms, hello "
                   f"{figs['startup_hello']['cpu_ms']} ms, ratio {st['cpu_ratio']}")
    if "cpu_calibration" in figs:
        cpu.append(f"  calibration workload {figs['cpu_calibration']['median']} s at the start, "
                   f"{figs.get('cpu_calibration_end', {}).get('median', '-')} s at the end")
    lines += ["", *cpu]
    lines += ["", "How cost grows with the size of the work:"]
    cols = ["size", "intercept_pairs_per_s", "intercept_cpu_us_per_pair", "resume_mcp_ms",
            "resume_mcp_ledger_ms", "verify_s", "fold_s", "fold_in_memory_s", "verify_ledger_s",
            "fold_ledger_s"]
    grid = [cols] + [[str(g.get(c, "-")) for c in cols] for g in doc["growth"]]
    w = [max(len(r[i]) for r in grid) for i in range(len(cols))]
    lines += ["  ".join(c.rjust(x) for c, x in zip(r, w, strict=True)) for r in grid]
    verdicts = [f.get("pass") for f in figs.values() if f.get("pass") is not None]
    lines += ["", f"{sum(verdicts)}/{len(verdicts)} SPEC 13 targets met; machine: "
              f"{doc['machine']['cpus']} CPUs, load {doc['machine']['loadavg']} -> "
              f"{doc['machine_end_loadavg']}, {doc['machine']['filesystem']}; "
              f"{doc['seconds']:.0f} s"]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    ap.add_argument("--quick", action="store_true",
                    help="1,000 and 10,000 only, fewer repeats (targets at 100,000 not judged)")
    ap.add_argument("--dir", type=Path, default=None,
                    help="where to build the stores and probe fsync (default: a temporary "
                         "directory); the figures are for that file system")
    ap.add_argument("--keep", action="store_true", help="keep the stores afterwards")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON document here")
    ap.add_argument("--hooks-only", action="store_true",
                    help="measure only the host hooks' latency (a minute, not the whole set)")
    ap.add_argument("--previous", type=Path, default=None,
                    help="a JSON document of an earlier run, shown next to each figure")
    args = ap.parse_args(argv)
    previous = json.loads(args.previous.read_text()) if args.previous else None
    work = Path(tempfile.mkdtemp(prefix="continuum-perf-", dir=args.dir))
    started = time.perf_counter()
    try:
        info = machine(work)
        measured = ({"figures": hook_figures(work, 30), "growth": []} if args.hooks_only
                    else run(work, args.quick))
        doc = {"version": 1, "quick": args.quick, "machine": info, **measured}
    finally:
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

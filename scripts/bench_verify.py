"""verify and fold of the 100,000-event ledger run, alone (issue 27): CPU and wall time.

Usage: scripts/bench_verify.py [--backend sqlite|postgresql://...]... [--events N]
                               [--repeats N] [--store PATH_OR_URL] [--keep] [--parts]
                               [--json] [--dir DIR]

Builds the run ``scripts/bench.py`` measures as ``verify_ledger_100000`` and
``fold_ledger_100000`` (``build_ledger_store``: 49,999 sends, each intercepted and
completed, then a checkpoint) once per backend, then times, interleaved, ``repeats`` times
each: ``Continuum.verify(RUN)`` and ``fold_plain(empty_plain(RUN), store.iter_raw(RUN))``.
Each figure is the median (with min and max) of CPU time (``time.process_time``: this
process's user + system time, what the machine's load does not inflate much) and of wall
time, with the load average before and after. ``--parts`` adds the parts of one verify, each
timed alone (fetching the rows, the read loop, the fold of decoded events, fetching the
index rows, comparing them with the fold).

A/B of two versions of the code on one store: build it once with ``--keep``, then
``--store STORE --compare OTHER_SRC --rounds N`` runs this script N times for each version
in turn, alternated (a process each: ``PYTHONPATH=OTHER_SRC``, then this checkout's
``src``), each measuring ``--repeats`` times, and prints the median over the rounds of each
version's medians, with the load average. (``git archive REV src | tar -x -C DIR`` gives
an earlier version's ``DIR/src``.) A busy machine slows both alike; CPU time is the
figure to judge by, wall time the one the targets name. PostgreSQL stores are private
databases (``continuum_bench_<pid>_*``), dropped at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import RUN, Backend, build_ledger_store, progress  # noqa: E402

import continuum  # noqa: E402
from continuum.runtime.facade import Continuum  # noqa: E402
from continuum.state.projection import empty_plain, fold_plain  # noqa: E402
from continuum.store import is_postgres_url, redact_url  # noqa: E402


def clocked(
    fn: Callable[[], Any], server: Callable[[], float] | None = None
) -> tuple[float, float, float]:
    """(CPU seconds, wall seconds, the database server's CPU seconds or 0) of one call."""
    before = server() if server is not None else 0.0
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return cpu, wall, (server() - before if server is not None else 0.0)


def figure(samples: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(samples), 3),
        "min": round(min(samples), 3),
        "max": round(max(samples), 3),
    }


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def server_cpu(url: str) -> Callable[[], float] | None:
    """For a PostgreSQL store on this machine: the CPU seconds its server processes (the
    backends serving its database, read from /proc) have used so far; None for SQLite or a
    server whose processes this machine does not show."""
    if not is_postgres_url(url):
        return None
    dbname = urlsplit(url).path.lstrip("/")
    tick = os.sysconf("SC_CLK_TCK")

    def used() -> float:
        total = 0
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmd = (proc / "cmdline").read_bytes()
                if not cmd.startswith(b"postgres: ") or f" {dbname} ".encode() not in cmd:
                    continue
                fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # gone meanwhile
            total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / tick

    return used


def measure(url: str, repeats: int, parts: bool) -> dict[str, Any]:
    rt = Continuum.open(url, create=False)
    try:
        assert rt.verify(RUN).ok  # warm: connections open, caches filled
        head = rt.store.get_run(RUN).head_sequence
        server = server_cpu(url)
        samples: dict[str, list[tuple[float, float, float]]] = {"verify": [], "fold": []}
        before = load()
        for _ in range(repeats):  # interleaved, as scripts/bench.py does
            samples["verify"].append(clocked(lambda: rt.verify(RUN), server))
            samples["fold"].append(
                clocked(lambda: fold_plain(empty_plain(RUN), rt.store.iter_raw(RUN)), server)
            )
        out: dict[str, Any] = {
            "events": head,
            "load_before": before,
            "load_after": load(),
        }
        for name, triples in samples.items():
            out[name] = {
                "cpu_s": figure([c for c, _, _ in triples]),
                "wall_s": figure([w for _, w, _ in triples]),
            }
            if server is not None:
                out[name]["server_cpu_s"] = figure([s for _, _, s in triples])
        if parts:
            out["parts_cpu_ms"] = verify_parts(rt, head, repeats)
        return out
    finally:
        rt.close()


def verify_parts(rt: Continuum, head: int, repeats: int) -> dict[str, float]:
    """The parts of one verify, each timed alone (CPU ms, median), the collector paused as
    verify pauses it."""
    from continuum.recovery.verification import index_row_violations
    from continuum.store.core import verified_raw

    store: Any = rt.store
    rows = list(store._event_rows(RUN, 0, head))
    events = list(verified_raw(RUN, rows, after=0, prev_hash=None, head=head))
    acc = fold_plain(empty_plain(RUN), events)
    index = store.action_index_rows(RUN)
    steps: dict[str, Callable[[], Any]] = {
        "fetch_event_rows": lambda: list(store._event_rows(RUN, 0, head)),
        "read_loop": lambda: list(verified_raw(RUN, rows, after=0, prev_hash=None, head=head)),
        "fold_decoded": lambda: fold_plain(empty_plain(RUN), events),
        "fetch_index_rows": lambda: store.action_index_rows(RUN),
        "compare_index": lambda: index_row_violations(acc, index),
    }
    out = {}
    for name, step in steps.items():
        gc.disable()
        try:
            cpu = [clocked(step)[0] for _ in range(repeats)]
        finally:
            gc.enable()
        out[name] = round(statistics.median(cpu) * 1000, 1)
    return out


def compare(store: str, other: Path, rounds: int, repeats: int) -> dict[str, Any]:
    """Alternated processes of this script on ``store``: ``other`` (a ``src`` directory)
    first, then this checkout's code, ``rounds`` times."""
    sides = {"other": other.resolve(), "this": Path(__file__).resolve().parent.parent / "src"}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    before = load()
    for n in range(rounds):
        for name, src in sides.items():
            env = {**os.environ, "PYTHONPATH": str(src)}
            argv = [sys.executable, __file__, "--store", store, "--repeats", str(repeats)]
            done = subprocess.run(
                [*argv, "--json"], env=env, capture_output=True, text=True, check=True
            )
            doc = json.loads(done.stdout)
            assert doc["code"] == str(src / "continuum"), (doc["code"], src)
            runs[name].append(next(iter(doc["backends"].values())))
            progress(f"round {n + 1}/{rounds}: {name} done")
    out: dict[str, Any] = {"load_before": before, "load_after": load(), "rounds": rounds}
    for name, src in sides.items():
        out[name] = {"code": str(src)}
        for figure_name in ("verify", "fold"):
            for clock in ("cpu_s", "wall_s", "server_cpu_s"):
                medians = [
                    r[figure_name][clock]["median"] for r in runs[name] if clock in r[figure_name]
                ]
                if medians:
                    out[name][f"{figure_name}_{clock}"] = figure(medians)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--backend",
        action="append",
        default=None,
        help="sqlite, or a postgresql:// server URL (repeatable; default: sqlite)",
    )
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--store", default=None, help="measure this already built store (path or URL)")
    ap.add_argument("--keep", action="store_true", help="keep the stores built")
    ap.add_argument("--parts", action="store_true", help="also time the parts of a verify")
    ap.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    ap.add_argument("--dir", type=Path, default=None, help="where SQLite stores are built")
    ap.add_argument(
        "--compare",
        type=Path,
        default=None,
        metavar="SRC",
        help="with --store: alternate processes of another version's src directory and this one",
    )
    ap.add_argument("--rounds", type=int, default=5, help="with --compare: processes per side")
    args = ap.parse_args(argv)
    if args.compare is not None:
        if args.store is None:
            ap.error("--compare measures a kept store: name it with --store")
        doc = compare(args.store, args.compare, args.rounds, args.repeats)
        if args.json:
            print(json.dumps(doc, indent=2, sort_keys=True))
            return 0
        print(f"{redact_url(args.store)}: load {doc['load_before']} -> {doc['load_after']}")
        for name in ("other", "this"):
            side = doc[name]
            print(f"  {name} ({side['code']}):")
            for key, fig in side.items():
                if key != "code":
                    print(f"    {key:22} {fig['median']:.3f} ({fig['min']:.3f}-{fig['max']:.3f})")
        return 0
    results: dict[str, Any] = {
        "code": str(Path(continuum.__file__).resolve().parent),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "backends": {},
    }
    if args.store is not None:
        kind = "postgresql" if is_postgres_url(args.store) else "sqlite"
        progress(f"measuring {redact_url(args.store)} with the code in {results['code']}")
        results["backends"][kind] = measure(args.store, args.repeats, args.parts)
    else:
        work = Path(tempfile.mkdtemp(prefix="continuum-verify-", dir=args.dir))
        try:
            for spec in args.backend or ["sqlite"]:
                backend = Backend(work, None if spec == "sqlite" else spec)
                url = backend.url(f"ledger-{args.events}")
                progress(f"building the {args.events:,}-event ledger run ({backend.kind})")
                build_ledger_store(url, args.events)
                backend.analyze(f"ledger-{args.events}")
                try:
                    progress(f"measuring ({backend.kind})")
                    fig = measure(url, args.repeats, args.parts)
                    if args.keep:
                        fig["store"] = redact_url(url)
                    results["backends"][backend.kind] = fig
                finally:
                    backend.close(args.keep)
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
            else:
                progress(f"stores kept in {work}")
    if args.json:
        print(json.dumps(results, indent=2, sort_keys=True))
        return 0
    for kind, fig in results["backends"].items():
        print(f"{kind}: {fig['events']:,} events, load {fig['load_before']} -> {fig['load_after']}")
        for name in ("verify", "fold"):
            cpu, wall = fig[name]["cpu_s"], fig[name]["wall_s"]
            srv = fig[name].get("server_cpu_s")
            print(
                f"  {name:6} CPU {cpu['median']:.3f} s ({cpu['min']:.3f}-{cpu['max']:.3f})"
                f"  wall {wall['median']:.3f} s ({wall['min']:.3f}-{wall['max']:.3f})"
                + ("" if srv is None else f"  server CPU {srv['median']:.3f} s")
            )
        if "parts_cpu_ms" in fig:
            print(
                "  parts (CPU ms): " + ", ".join(f"{k} {v}" for k, v in fig["parts_cpu_ms"].items())
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

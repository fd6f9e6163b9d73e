"""Figures for long-lived stores (issue 17): backup throughput, and the live log before and
after archiving. Sizing figures, not judged (``pass`` is null), in the figure format of
``scripts/bench.py`` (median, spread, n, unit).

Usage: scripts/bench_ops.py [--json] [--quick] [--dir DIR] [--keep]

One SQLite store is built in bulk (fixture building, not measured: many appends per
transaction, a checkpoint every 100,000 events, 1,000 settled actions at the start):
1,000,000 events, or 20,000 with --quick. Then:

- ``backup_*``: ``Continuum.backup`` of the whole store (the online backup API inside one
  read snapshot, every run verified, the manifest, the tar written and fsynced), repeated;
  MB/s is the data member's size over the wall time, events/s the events in it over it;
- ``verify_backup_*`` and ``restore_*``: the same for ``verify_backup`` and
  ``restore_backup`` (each extracts the data and verifies every run again);
- ``archive_*``: ``continuum archive`` of all but the last 1% of the run: its time, how
  long its final transaction held the run's write lock (writers of the run wait that
  long), the archive file's size; the live log before and after: events, the bytes of the ``events``
  table (SQLite's dbstat), the store file, and the file a ``VACUUM INTO`` copy would be
  (SQLite reuses freed pages for later appends but does not shrink the file on its own);
- ``verify_*``: verifying the live log after archiving, and the whole history with the
  archive file.

Progress goes to stderr; --json prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import apsw

from continuum.eventlog.events import EventType
from continuum.ops.backup import restore_backup, verify_backup
from continuum.runtime.facade import Continuum

RUN = "bench_ops"
MIB = 1 << 20


def progress(message: str) -> None:
    sys.stderr.write(f"bench_ops: {message}\n")
    sys.stderr.flush()


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


def sized(value: float, unit: str, digits: int = 3) -> dict[str, Any]:
    """One measurement as a figure, not judged."""
    return {**summary([value], unit, digits), "pass": None}


def build(path: Path, events: int) -> None:
    """``events`` events in one run: 1,000 settled actions first, then work items in bulk
    transactions with a checkpoint every 100,000 (fixture building, not measured)."""
    rt = Continuum.open(str(path))
    rt.start_run(RUN, f"{events} events for the operations figures", total=events)
    for i in range(1_000):
        r = rt.intercept(RUN, "send_invoice", {"n": i}, key=f"invoice:{i}")
        rt.complete(RUN, r.action_key, external_id=f"mail-{i}")
    head = rt.store.get_run(RUN).head_sequence
    batch = 50_000
    while head < events - 1:
        with rt.store.write(RUN) as tx:
            for _ in range(min(batch, events - 1 - head)):
                tx.append(EventType.WORK_COMPLETED, {"doc": head}, source=rt.origin)
                head += 1
        if head % 100_000 < batch and head < events - 1:
            rt.checkpoint(RUN, reason="periodic")
            head += 1
        progress(f"built {head} events")
    rt.checkpoint(RUN, reason="fixture")
    rt.close()


def events_table_bytes(path: Path) -> int:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = conn.execute("SELECT sum(pgsize) FROM dbstat WHERE name = 'events'").fetchall()
        return int(rows[0][0] or 0)
    finally:
        conn.close()


def vacuumed_bytes(path: Path, work: Path) -> int:
    """The size of a compacted copy (VACUUM INTO a new file; the store is not changed)."""
    target = work / f"vacuumed-{time.monotonic_ns()}.db"
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        conn.execute("VACUUM INTO ?", (str(target),))
    finally:
        conn.close()
    size = target.stat().st_size
    target.unlink()
    return size


def timed(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def ops_figures(work: Path, quick: bool) -> dict[str, dict[str, Any]]:
    """The figures (see the module docstring), stores built in ``work``."""
    events = 20_000 if quick else 1_000_000
    repeats = 3 if quick else 2
    db = work / "ops.db"
    progress(f"building a store of {events} events")
    build(db, events)
    figures: dict[str, dict[str, Any]] = {}

    rt = Continuum.open(str(db), create=False)
    mbs, eps, vmbs, veps, rmbs = [], [], [], [], []
    size = 0
    try:
        for i in range(repeats):
            dest = work / f"store-{i}.backup"
            seconds, manifest = timed(lambda dest=dest: rt.backup(dest))
            size = manifest["data"]["bytes"]
            mbs.append(size / MIB / seconds)
            eps.append(manifest["totals"]["events"] / seconds)
            progress(f"backup {i + 1}/{repeats}: {size / MIB:.1f} MiB in {seconds:.2f} s")
            seconds, _ = timed(lambda dest=dest: verify_backup(dest))
            vmbs.append(size / MIB / seconds)
            veps.append(manifest["totals"]["events"] / seconds)
            target = work / f"restored-{i}.db"
            seconds, _ = timed(lambda dest=dest, target=target: restore_backup(dest, str(target)))
            rmbs.append(size / MIB / seconds)
            dest.unlink()
            target.unlink()
        figures["backup_mb_per_s"] = {
            **summary(mbs, "MB/s", 1),
            "pass": None,
            "data_bytes": size,
            "events": events,
        }
        figures["backup_events_per_s"] = {**summary(eps, "events/s", 0), "pass": None}
        figures["verify_backup_mb_per_s"] = {**summary(vmbs, "MB/s", 1), "pass": None}
        figures["verify_backup_events_per_s"] = {**summary(veps, "events/s", 0), "pass": None}
        figures["restore_mb_per_s"] = {**summary(rmbs, "MB/s", 1), "pass": None}

        head = rt.store.get_run(RUN).head_sequence
        before = {
            "events": rt.store.count_events(RUN),
            "table": events_table_bytes(db),
            "file": db.stat().st_size,
            "vacuumed": vacuumed_bytes(db, work),
        }
        keep = max(events // 100, 10)
        archive = work / "history.jsonl"
        progress(f"archiving events 1..{head - keep}")
        seconds, result = timed(lambda: rt.archive(RUN, before=head - keep + 1, to=archive))
        after = {
            "events": rt.store.count_events(RUN),
            "table": events_table_bytes(db),
            "file": db.stat().st_size,
            "vacuumed": vacuumed_bytes(db, work),
        }
        figures["archive_seconds"] = {**sized(seconds, "s"), "archived_events": result.events}
        figures["archive_locked_seconds"] = sized(result.locked_seconds, "s")
        figures["archive_events_per_s"] = sized(result.events / seconds, "events/s", 0)
        figures["archive_file_bytes"] = sized(archive.stat().st_size, "bytes", 0)
        for name, unit in (
            ("events", "events"),
            ("table", "bytes"),
            ("file", "bytes"),
            ("vacuumed", "bytes"),
        ):
            figures[f"live_{name}_before_archive"] = sized(before[name], unit, 0)
            figures[f"live_{name}_after_archive"] = {
                **sized(after[name], unit, 0),
                "ratio_to_before": round(after[name] / before[name], 4) if before[name] else None,
            }
        seconds, report = timed(lambda: Continuum.open(str(db), create=False).verify(RUN))
        assert report.ok
        figures["verify_live_after_archive_s"] = sized(seconds, "s")
        seconds, report = timed(
            lambda: Continuum.open(str(db), create=False).verify(RUN, archives=[archive])
        )
        assert report.ok and report.events_checked == head + 2
        figures["verify_with_archive_s"] = sized(seconds, "s")
        again = rt.intercept(RUN, "send_invoice", {"n": 1}, key="invoice:1")
        assert not again.proceed and str(again.status) == "completed"
    finally:
        rt.close()
    return figures


def render(figures: dict[str, dict[str, Any]]) -> list[str]:
    lines = []
    for name, fig in figures.items():
        extra = f" (x{fig['ratio_to_before']} of before)" if fig.get("ratio_to_before") else ""
        spread = f" [{fig['min']}..{fig['max']}, n={fig['n']}]" if fig["n"] > 1 else ""
        lines.append(f"{name:34} {fig['median']:>14} {fig['unit']}{spread}{extra}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    ap.add_argument("--quick", action="store_true", help="20,000 events instead of 1,000,000")
    ap.add_argument("--dir", type=Path, default=None, help="where to build (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the stores afterwards")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="continuum-ops-", dir=args.dir))
    started = time.perf_counter()
    try:
        figures = ops_figures(work, args.quick)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    doc = {
        "version": 1,
        "quick": args.quick,
        "figures": figures,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(doc, indent=2, sort_keys=True) if args.json else "\n".join(render(figures)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

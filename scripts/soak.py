"""The long versions of the reliability matrix (not in CI): ``soak.py --minutes N``.

Runs the harnesses of the fast set (tests/crash, tests/property) in bounded chunks, round
robin, until the time budget is spent, each chunk with its own seed drawn from the master
seed, so any failure is reproducible on its own:

- F1   kills at fault points and random times (reconciling recovery);
- F1c  compound: kills armed to fire early, so most land while the previous worker's
       interrupted actions are still being recovered (crash during recovery);
- F2   power cuts through the fsync-snapshot shim;
- F3   crash images (torn, partial unsynced writes) over longer traces;
- F6   8 writers on one file, appends and shared-key intercepts, history checked;
- F7   8 writers, 4 killed mid-flight (SIGKILL and inside a write transaction);
- F13  single-bit flips over a store file.

Histories are written as JSONL inside each chunk's directory and checked afterwards; the
directory of a failing chunk is kept and printed with its seed. Progress goes to stderr;
``--json`` prints a JSON summary on stdout. The exit status is 1 if any chunk failed.

    .venv/bin/python scripts/soak.py --minutes 30 --json > soak.json 2> soak.log
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.crash.test_contention import run_f6  # noqa: E402
from tests.crash.test_crash_vfs import run_f3  # noqa: E402
from tests.crash.test_fault_points import run_f1  # noqa: E402
from tests.crash.test_power_loss import run_f2  # noqa: E402
from tests.crash.test_tamper import RUNS, build_reference, run_flips  # noqa: E402

# Per phase: the figures that must stay 0 for a chunk to pass.
MUST_BE_ZERO = {
    "F1": (
        "lost",
        "breaks",
        "double_effects",
        "silent_retries",
        "unsettled",
        "ledger_world_mismatches",
    ),
    "F1c": (
        "lost",
        "breaks",
        "double_effects",
        "silent_retries",
        "unsettled",
        "ledger_world_mismatches",
    ),
    "F2": ("lost", "integrity_failures", "chain_failures"),
    "F3": ("corrupt", "lost"),
    "F6": ("forks", "gaps", "double_proceeds", "double_effects", "lost", "order_violations"),
    "F7": (
        "forks",
        "gaps",
        "double_proceeds",
        "double_effects",
        "lost",
        "order_violations",
        "stale_locks",
    ),
    "F13": ("undetected", "untranslated"),
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Soak:
    def __init__(self, workdir: Path, seed: int) -> None:
        self.workdir = workdir
        self.rng = random.Random(seed)
        self.totals: dict[str, dict[str, Any]] = {}
        self.failures: list[dict[str, Any]] = []
        self.shim: Path | None = None
        self.reference: tuple[Path, dict[str, str]] | None = None

    # -- phases: each runs one bounded chunk and returns its figures -----------------------

    def f1(self, d: Path, seed: int) -> Any:
        return run_f1(d, rounds=400, seed=seed)

    def f1c(self, d: Path, seed: int) -> Any:
        return run_f1(d, rounds=300, seed=seed, max_hit=2, kill_window_s=0.01)

    def f2(self, d: Path, seed: int) -> Any:
        if self.shim is None:
            from tests.crash.test_power_loss import SHIM_SOURCE  # noqa: PLC0415

            if shutil.which("gcc") is None:
                raise RuntimeError("gcc is needed for the power-loss shim")
            import subprocess  # noqa: PLC0415

            self.shim = self.workdir / "fsync_shim.so"
            subprocess.run(
                ["gcc", "-shared", "-fPIC", "-O2", "-o", str(self.shim), str(SHIM_SOURCE), "-ldl"],
                check=True,
            )
        return run_f2(d, self.shim, cuts=60, seed=seed, max_kill_after=300)

    def f3(self, d: Path, seed: int) -> Any:
        return run_f3(d, traces=2, seeds=3, seed=seed, ops=80)

    def f6(self, d: Path, seed: int) -> Any:
        return run_f6(d, workers=8, ops=400, keys=100, seed=seed)

    def f7(self, d: Path, seed: int) -> Any:
        return run_f7_wide(d, seed)

    def f13(self, d: Path, seed: int) -> Any:
        if self.reference is None:
            from continuum.runtime.facade import Continuum  # noqa: PLC0415
            from continuum.store import SQLiteStorage  # noqa: PLC0415

            ref = self.workdir / "tamper-reference.db"
            with SQLiteStorage(ref) as store:
                app = Continuum(store)
                build_reference(app, RUNS[0], 24)
                build_reference(app, RUNS[1], 9)
                anchors = {r: app.anchor(r)["anchor"] for r in RUNS}
            self.reference = (ref, anchors)
        ref, anchors = self.reference
        return run_flips(ref, anchors, d, flips=1500, seed=seed)

    # -- the loop ------------------------------------------------------------------------------

    def run_chunk(self, name: str, phase: Callable[[Path, int], Any]) -> None:
        seed = self.rng.randrange(2**31)
        d = self.workdir / f"{name}-{seed}"
        d.mkdir(parents=True)
        started = time.monotonic()
        try:
            figures = phase(d, seed)
            data = dataclasses.asdict(figures)
            bad = {k: data[k] for k in MUST_BE_ZERO[name] if data.get(k)}
            problems = data.get("problems") or []
            if name == "F7" and data.get("errors"):
                problems = problems + data["errors"]
        except Exception:
            data, bad, problems = {}, {"exception": 1}, [traceback.format_exc()]
        elapsed = time.monotonic() - started
        self.add(name, data, elapsed)
        if bad or problems:
            self.failures.append(
                {
                    "phase": name,
                    "seed": seed,
                    "dir": str(d),
                    "bad": bad,
                    "problems": [str(p)[:500] for p in problems[:5]],
                }
            )
            log(f"FAIL {name} seed={seed} dir={d}: {bad} {problems[:2]}")
        else:
            shutil.rmtree(d, ignore_errors=True)
            log(f"ok   {name} seed={seed} in {elapsed:.0f}s: {summary(name, data)}")

    def add(self, name: str, data: dict[str, Any], elapsed: float) -> None:
        total = self.totals.setdefault(name, {"chunks": 0, "seconds": 0.0})
        total["chunks"] += 1
        total["seconds"] = round(total["seconds"] + elapsed, 1)
        for k, v in data.items():
            if isinstance(v, bool) or not isinstance(v, int | float):
                continue
            total[k] = total.get(k, 0) + v


def run_f7_wide(d: Path, seed: int) -> Any:
    """F7 with 8 writers, 4 of them killed (see tests/crash/test_contention.py)."""
    import tests.crash.test_contention as c  # noqa: PLC0415

    rng = random.Random(seed)
    figures = c.ContentionFigures(workers=8)
    for r in range(2):
        work = d / f"round{r}"
        db, effects = work / "f7.db", work / "effects"
        effects.mkdir(parents=True)
        c.make_store(db)
        victims = rng.sample(range(8), 4)
        faults = {
            w: f"{rng.choice(['before_append_commit', 'after_append_commit'])}"
            f"@{rng.randint(5, 120)}"
            for w in victims[:2]
        }
        kill_at = {w: rng.randint(5, 200) for w in victims[2:]}
        procs = c.start_workers(db, effects, 8, 300, 60, seed * 10 + r, faults)
        history, statuses = c.drive(procs, kill_at=kill_at)
        dead = {w for w, s in statuses.items() if s != 0}
        figures.kills += len(dead)
        if not dead <= set(victims):
            figures.problems.append(f"round {r}: unexpected deaths {dead - set(victims)}")
        app = c.check_history(db, effects, history, figures, history_file=work / "history.jsonl")
        try:
            from continuum.store import SQLiteStorage  # noqa: PLC0415

            with SQLiteStorage(db, create=False, busy_timeout_ms=0) as probe:
                try:
                    probe.append_event(c.RUN, "work_completed", {"probe": r})
                except Exception as e:
                    figures.stale_locks += 1
                    figures.problems.append(repr(e))
        finally:
            app.close()
    return figures


def summary(name: str, d: dict[str, Any]) -> str:
    if name in ("F1", "F1c"):
        return (
            f"{d.get('kills', 0):,} kills ({d.get('at_fault_points', 0):,} at fault points, "
            f"{d.get('died_in_recovery', 0)} during recovery): {d.get('lost', 0)} lost, "
            f"{d.get('breaks', 0)} breaks, {d.get('double_effects', 0)} double effects, "
            f"{d.get('interrupted', 0)} interrupted all reported unknown"
            if d.get("reported_unknown", 0) == d.get("interrupted", 0)
            else "MISMATCH"
        )
    if name == "F2":
        return (
            f"{d.get('cuts', 0):,} power cuts: {d.get('lost', 0)}/{d.get('acknowledged', 0):,}"
            f" acknowledged lost, {d.get('integrity_failures', 0)} integrity failures"
        )
    if name == "F3":
        return (
            f"{d.get('images', 0):,} crash images ({d.get('crash_points', 0):,} points): "
            f"{d.get('corrupt', 0)} corrupt, {d.get('lost', 0)} lost"
        )
    if name in ("F6", "F7"):
        return (
            f"{d.get('calls', 0):,} calls, {d.get('kills', 0)} kills: {d.get('forks', 0)} forks,"
            f" {d.get('gaps', 0)} gaps, {d.get('double_proceeds', 0)} double proceeds, "
            f"{d.get('lost', 0)} lost, {d.get('stale_locks', 0)} stale locks, "
            f"{d.get('order_violations', 0)} order violations"
        )
    if name == "F13":
        return (
            f"{d.get('flips', 0):,} flips: {d.get('undetected', 0)} undetected semantic "
            f"changes ({d.get('harmless', 0):,} harmless, {d.get('untranslated', 0)} "
            f"untranslated)"
        )
    return json.dumps(d)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, required=True, help="time budget")
    parser.add_argument("--seed", type=int, default=None, help="master seed (default: random)")
    parser.add_argument("--json", action="store_true", help="JSON summary on stdout")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where chunks run (default: a temporary directory on /dev/shm)",
    )
    parser.add_argument(
        "--phases", default="F1,F1c,F2,F3,F6,F7,F13", help="comma-separated subset of phases to run"
    )
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    # /dev/shm where there is one: the process-death rows need no disk, and the power-loss
    # rows simulate durability themselves; a shared machine's disk is spared the fsyncs.
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="continuum-soak-", dir=shm))
    workdir.mkdir(parents=True, exist_ok=True)
    soak = Soak(workdir, seed)
    phases = {
        "F1": soak.f1,
        "F1c": soak.f1c,
        "F2": soak.f2,
        "F3": soak.f3,
        "F6": soak.f6,
        "F7": soak.f7,
        "F13": soak.f13,
    }
    chosen = [p for p in args.phases.split(",") if p]
    unknown = set(chosen) - set(phases)
    if unknown:
        parser.error(f"unknown phases: {sorted(unknown)}")
    log(f"soak: seed {seed}, {args.minutes} minutes, phases {','.join(chosen)}, in {workdir}")
    started = time.monotonic()
    deadline = started + args.minutes * 60
    # Chunks last up to a minute or two; one is started only if it can probably finish.
    expected = {name: 30.0 for name in chosen}
    i = 0
    while True:
        name = chosen[i % len(chosen)]
        i += 1
        if time.monotonic() + expected[name] > deadline:
            if all(time.monotonic() + expected[n] > deadline for n in chosen):
                break
            continue
        t0 = time.monotonic()
        soak.run_chunk(name, phases[name])
        expected[name] = max(expected[name] * 0.5, time.monotonic() - t0)
    elapsed = time.monotonic() - started
    ok = not soak.failures
    log(f"soak: seed {seed}: {'PASS' if ok else 'FAIL'} after {elapsed / 60:.1f} minutes")
    for name in chosen:
        if name in soak.totals:
            t = soak.totals[name]
            log(f"{name}: {t['chunks']} chunks, {t['seconds']:.0f}s: {summary(name, t)}")
    if ok and args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(
            json.dumps(
                {
                    "seed": seed,
                    "minutes": args.minutes,
                    "elapsed_s": round(elapsed, 1),
                    "ok": ok,
                    "command": " ".join(["scripts/soak.py", *sys.argv[1:]]),
                    "phases": soak.totals,
                    "failures": soak.failures,
                    "summary": {n: summary(n, t) for n, t in soak.totals.items()},
                },
                indent=2,
            )
        )
    else:
        for name, t in soak.totals.items():
            print(f"{name}: {summary(name, t)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

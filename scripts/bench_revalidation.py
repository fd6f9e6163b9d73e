"""What periodic revalidation (issue 24, item 2) costs the effect path.

Usage: scripts/bench_revalidation.py [--pairs N] [--json]

One SQLite store in a temp directory, one declared file dependency, one facade; N
intercept + complete pairs with the policy off, every 25 steps (the default) and every 5,
three rounds each, the median of each. CPU is this process's user + system time per
pair, wall its elapsed time. A check costs one fold of the events since the last one and
one hash of the file; between checks a step costs a counter.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from continuum.recovery.revalidation import RevalidationPolicy
from continuum.runtime.facade import Continuum


def run(every: int | None, pairs: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data.csv"
        data.write_text("x\n", encoding="utf-8")
        cx = Continuum.open(str(Path(tmp) / "c.db"))
        cx.revalidation = RevalidationPolicy(every_steps=every)
        cx.start_run("r", "g")
        cx.declare_dependencies("r", files=[str(data)])
        for i in range(50):  # warm up
            r = cx.intercept("r", "warm", {"i": i}, key=f"w{i}")
            cx.complete("r", r.action_key)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for i in range(pairs):
            r = cx.intercept("r", "send", {"i": i}, key=f"k{i}")
            cx.complete("r", r.action_key)
        cpu = (time.process_time() - cpu0) / pairs * 1e6
        wall = (time.perf_counter() - wall0) / pairs * 1e6
        cx.close()
    return cpu, wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--pairs", type=int, default=2000, help="pairs per round")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args(argv)
    out: dict[str, object] = {}
    for label, every in (("off", None), ("every_25", 25), ("every_5", 5)):
        rounds = [run(every, args.pairs) for _ in range(3)]
        out[label] = {
            "cpu_us_per_pair": round(statistics.median(r[0] for r in rounds), 1),
            "wall_us_per_pair": round(statistics.median(r[1] for r in rounds), 1),
        }
        sys.stderr.write(f"bench_revalidation: {label}: {out[label]}\n")
    out["load_average"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for label in ("off", "every_25", "every_5"):
            fig = out[label]
            assert isinstance(fig, dict)
            print(
                f"{label}: {fig['cpu_us_per_pair']} us CPU, {fig['wall_us_per_pair']} us wall per pair"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

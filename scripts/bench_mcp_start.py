"""``continuum-mcp`` start-up against a bare MCP SDK server (issue 27: <= 1.10x).

Usage: scripts/bench_mcp_start.py [--starts N] [--db URL] [--base-src DIR] [--json] [--out FILE]
       (also scripts/bench.py --mcp-start-only)

Each start is what scripts/bench.py times: spawn the server with its stdio on pipes, send
``initialize``, stop the clock when its result arrives, send ``notifications/initialized``
and close stdin. The servers: ``continuum-mcp --db STORE`` (a SQLite store of 1,000 events
of one run, built here as scripts/bench.py builds ``events-1000``) and
scripts/bench_hello_server.py (the SDK's ``MCPServer`` with one tool). Their starts
alternate, the order flipping every round, so a busy machine slows both alike. Figures:
the median (min-max) of spawn to initialized, their ratio, the CPU time each child had
used when its answer arrived (user + system from ``/proc/PID/stat``, in clock ticks of
10 ms: a median over many starts) and the CPU time of the whole child (from ``wait4``:
start-up, anything done after the answer, and shutdown).

A second kind of start also sends ``tools/list`` after ``initialized`` and stops the clock
at its answer (spawn to tools listed): what a host waits for before it can call a tool,
so work moved from before ``initialize`` to the first listing shows there.

``--base-src DIR`` adds a third server: ``continuum-mcp`` run with ``PYTHONPATH=DIR`` (a
``src`` directory of another commit, e.g. from ``git archive``), for an A/B of two commits
in one interleaved run; this checkout's ``continuum-mcp`` then runs with ``PYTHONPATH`` set
to its own ``src``, so both look modules up the same way. The load average is printed
before and after. The servers run without ``PYTHONDONTWRITEBYTECODE`` (as installed
software runs): a first, uncounted start of each writes its byte code, and every counted
start reads it instead of compiling the sources again.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import RawClient, build_event_store, continuum_mcp, hello_server, summary

TARGET = 1.10
HERE = Path(__file__).resolve().parent
TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def cpu_so_far_ms(pid: int) -> float:
    """User + system time of process ``pid`` (all its threads) until now."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_MS


def _started(cmd: list[str], env: dict[str, str] | None) -> tuple[RawClient, float]:
    start = time.perf_counter()
    return RawClient(cmd, env), start


def one_start(cmd: list[str], env: dict[str, str] | None, *, list_tools: bool) -> dict[str, float]:
    """One spawn: ms to the initialize result (and to the tools/list answer), child CPU ms."""
    client, start = _started(cmd, env)
    out: dict[str, float] = {}
    try:
        answer = client.initialize()
        out["initialized_ms"] = (time.perf_counter() - start) * 1000
        out["cpu_at_answer_ms"] = cpu_so_far_ms(client.proc.pid)
        if "result" not in answer:
            raise RuntimeError(f"initialize failed: {str(answer)[:300]}")
        if list_tools:
            listed = client.request("tools/list")
            out["listed_ms"] = (time.perf_counter() - start) * 1000
            if not listed.get("result", {}).get("tools"):
                raise RuntimeError(f"tools/list failed: {str(listed)[:300]}")
    finally:
        assert client.proc.stdin is not None and client.proc.stdout is not None
        client.proc.stdin.close()
        _, status, usage = os.wait4(client.proc.pid, 0)
        client.proc.returncode = os.waitstatus_to_exitcode(status)
        client.proc.stdout.close()
    out["cpu_ms"] = (usage.ru_utime + usage.ru_stime) * 1000
    return out


def measure(
    servers: dict[str, tuple[list[str], dict[str, str] | None]], starts: int
) -> dict[str, dict[str, list[float]]]:
    names = list(servers)
    samples: dict[str, dict[str, list[float]]] = {
        n: {"initialized_ms": [], "cpu_at_answer_ms": [], "cpu_ms": [], "listed_ms": []}
        for n in names
    }
    for cmd, env in servers.values():  # warm the page cache and .pyc files: not counted
        one_start(cmd, env, list_tools=True)
    for i in range(starts):
        order = names if i % 2 == 0 else names[::-1]
        for name in order:
            cmd, env = servers[name]
            s = one_start(cmd, env, list_tools=False)
            for figure in ("initialized_ms", "cpu_at_answer_ms", "cpu_ms"):
                samples[name][figure].append(s[figure])
        for name in order[::-1]:
            cmd, env = servers[name]
            samples[name]["listed_ms"].append(one_start(cmd, env, list_tools=True)["listed_ms"])
    return samples


def report(samples: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    hello = samples["hello"]
    figures: dict[str, Any] = {}
    for name, s in samples.items():
        fig: dict[str, Any] = {
            "initialized": summary(s["initialized_ms"], "ms", 1),
            "cpu_at_answer": summary(s["cpu_at_answer_ms"], "ms", 1),
            "cpu": summary(s["cpu_ms"], "ms", 1),
            "listed": summary(s["listed_ms"], "ms", 1),
        }
        if name != "hello":
            for key, figure in (
                ("ratio", "initialized_ms"),
                ("cpu_at_answer_ratio", "cpu_at_answer_ms"),
                ("cpu_ratio", "cpu_ms"),
                ("listed_ratio", "listed_ms"),
            ):
                fig[key] = round(statistics.median(s[figure]) / statistics.median(hello[figure]), 3)
        figures[name] = fig
    return figures


def render(doc: dict[str, Any]) -> list[str]:
    lines = [
        f"continuum-mcp start vs a bare SDK server: {doc['starts']} interleaved starts each, "
        f"load average {doc['loadavg_start']} -> {doc['loadavg_end']}"
    ]
    for name, fig in doc["figures"].items():
        i, a, c, t = fig["initialized"], fig["cpu_at_answer"], fig["cpu"], fig["listed"]
        lines.append(
            f"  {name:<9} initialized {i['median']} ms ({i['min']}-{i['max']}); CPU at the "
            f"answer {a['median']} ms ({a['min']}-{a['max']}), whole child {c['median']} ms "
            f"({c['min']}-{c['max']}); tools listed {t['median']} ms ({t['min']}-{t['max']})"
        )
        if "ratio" in fig:
            lines.append(
                f"  {'':<9} ratio {fig['ratio']}x; CPU at the answer "
                f"{fig['cpu_at_answer_ratio']}x, whole child {fig['cpu_ratio']}x; "
                f"tools listed {fig['listed_ratio']}x"
            )
    ours = doc["figures"]["continuum"]
    verdict = "met" if ours["ratio"] <= TARGET else "missed"
    lines.append(f"  target <= {TARGET}x (issue 27): {verdict}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--starts", type=int, default=24, help="starts of each server (default 24)")
    ap.add_argument("--db", default=None, help="the store (default: 1,000 events, built here)")
    ap.add_argument(
        "--base-src", type=Path, default=None, help="also time continuum-mcp from this src dir"
    )
    ap.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON document here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="continuum-mcp-start-") as work:
        db = args.db
        if db is None:
            db = str(Path(work) / "events-1000.db")
            build_event_store(db, 1000)
        cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        servers: dict[str, tuple[list[str], dict[str, str] | None]] = {
            "continuum": ([*continuum_mcp(), "--db", db], cached),
            "hello": (hello_server(), cached),
        }
        if args.base_src is not None:
            own = {**cached, "PYTHONPATH": str(HERE.parent / "src")}
            servers["continuum"] = (servers["continuum"][0], own)
            env = {**cached, "PYTHONPATH": str(args.base_src.resolve())}
            probe = [sys.executable, "-c", "import continuum; print(continuum.__file__)"]
            where = subprocess.run(probe, env=env, capture_output=True, text=True, check=True)
            if not where.stdout.startswith(str(args.base_src.resolve())):
                ap.error(f"--base-src: continuum is imported from {where.stdout.strip()}")
            servers["base"] = ([*continuum_mcp(), "--db", db], env)
        load0 = [round(x, 2) for x in os.getloadavg()]
        samples = measure(servers, args.starts)
        doc = {
            "starts": args.starts,
            "loadavg_start": load0,
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "target": f"continuum initialized <= {TARGET} x hello",
            "figures": report(samples),
            "samples": samples,
        }
    doc["passed"] = doc["figures"]["continuum"]["ratio"] <= TARGET
    text = json.dumps(doc, indent=2, sort_keys=True)
    if args.out:
        args.out.write_text(text + "\n")
    if args.json:
        print(text)
    else:
        print("\n".join(render(doc)))
    return 0 if doc["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())

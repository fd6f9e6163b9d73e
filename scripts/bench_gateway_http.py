"""Overhead of ``continuum gateway http`` per request, against the same request sent
straight to the upstream (issue 23, item 6).

Usage: scripts/bench_gateway_http.py [--quick] [--json] [--dir DIR] [--rounds N] [--block N]

A small upstream (the standard library's HTTP server, HTTP/1.1 keep-alive, in its own
process) and the gateway (``python -m continuum gateway http``, SQLite store in DIR) run
on loopback; one ``httpx2.Client`` per side keeps its connection alive. The machine is
shared, so requests go in rounds (``bench_gateway_kit.py``): each round runs a block of
every kind, in an order rotated from round to round, and each ratio or difference is
formed inside a round. Figures: median latency per request with the smallest and largest
round median, CPU per request of the gateway, the upstream and the client, the load
average, and these, each judged against issue 23's target:

- unregistered: ``GET /items`` through the gateway over the same request direct
  (target: at most 1.3x), and the same for an API that takes 20 ms, and for a ``POST``;
- registered: ``POST /charges`` with a new ``Idempotency-Key`` each time through the
  gateway (intercept, forward, complete: two committed SQLite transactions) minus an
  unregistered ``POST /notes`` through the gateway (target: at most 2 ms);
- the ledger's share of that: a bare intercept + complete pair as the gateway makes
  them, in this process, on the gateway's own store file (another run); the rest is the
  gateway's own.

Progress goes to stderr; a table (or one JSON document with ``--json``) to stdout.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
from bench_gateway_kit import (  # scripts/, beside this one
    TARGET_ADDED_MS,
    TARGET_RATIO,
    ProcessCpu,
    Rounds,
    ThreadCpu,
    cpu_delta,
    cpu_snapshot,
    fsync_ms,
    ledger_pair_runner,
    load_average,
    progress,
    timed_block,
    verdict,
)

UPSTREAM = r"""
import json, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def handle_any(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if "?ms=" in self.path:  # an API that takes this long to answer
            time.sleep(int(self.path.rsplit("=", 1)[1]) / 1000)
        data = json.dumps({"id": "x", "path": self.path}).encode()
        self.send_response(201 if self.command == "POST" else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = handle_any

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""

RULES = """\
[[upstream]]
name = "api"
url = "http://127.0.0.1:{port}"

[[effect]]
upstream = "api"
method = "POST"
path = "/charges"
action_type = "charge"
"""

API_MS = 20  # the second GET figure: an upstream that takes 20 ms, like a real API
TOOL = "bench_gateway_http"


def _start(
    argv: list[str], *, stream: str, marker: str | None
) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE if stream == "stdout" else subprocess.DEVNULL,
        stderr=subprocess.PIPE if stream == "stderr" else None,
        text=True,
    )
    pipe = proc.stdout if stream == "stdout" else proc.stderr
    assert pipe is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = pipe.readline()
        if not line:
            raise SystemExit(f"{argv[0]} ended before it was ready (exit {proc.wait()})")
        if marker is None or marker in line:
            return proc, line.strip()
    raise SystemExit("not ready within 60 s")


LABELS = [
    ("get_direct", "GET, direct"),
    ("get_gateway", "GET, through the gateway (no rule)"),
    ("api_direct", f"GET of a {API_MS} ms API, direct"),
    ("api_gateway", f"GET of a {API_MS} ms API, through the gateway"),
    ("post_direct", "POST, direct"),
    ("post_gateway", "POST, through the gateway (no rule)"),
    ("effect", "POST, through the gateway (effect: intercept + complete)"),
    ("ledger_pair", "the ledger alone: intercept + complete in-process, same store"),
]
ROLES = ["gateway", "upstream", "client"]
Send = Callable[[], httpx2.Response]


def measure(work: Path, rounds_n: int, block: int) -> dict[str, Any]:
    load_before = load_average()
    fsync_before = fsync_ms(work)
    upstream, port_line = _start([sys.executable, "-c", UPSTREAM], stream="stdout", marker=None)
    rules = work / "rules.toml"
    rules.write_text(RULES.format(port=int(port_line)), encoding="utf-8")
    db = work / "gateway.db"
    gateway, ready = _start(
        [
            *(sys.executable, "-m", "continuum", "gateway", "http", "--listen", "127.0.0.1:0"),
            *("--rules", str(rules), "--db", str(db)),
        ],
        stream="stderr",
        marker="serving at",
    )
    gw_url = ready.split("serving at ", 1)[1].split(" ", 1)[0].rstrip("/") + "/api"
    up_url = f"http://127.0.0.1:{int(port_line)}"
    keys = iter(range(10**9))
    rounds = Rounds([name for name, _ in LABELS])
    gw, up, client = ProcessCpu(gateway.pid), ProcessCpu(upstream.pid), ThreadCpu()
    direct_cpu: dict[str, Any] = {"upstream": up, "client": client}
    via_cpu: dict[str, Any] = {"gateway": gw, "upstream": up, "client": client}
    try:
        with httpx2.Client(timeout=30) as direct, httpx2.Client(timeout=30) as via:
            calls: dict[str, tuple[Send, dict[str, Any]]] = {
                "get_direct": (lambda: direct.get(f"{up_url}/items"), direct_cpu),
                "get_gateway": (lambda: via.get(f"{gw_url}/items"), via_cpu),
                "api_direct": (lambda: direct.get(f"{up_url}/items?ms={API_MS}"), direct_cpu),
                "api_gateway": (lambda: via.get(f"{gw_url}/items?ms={API_MS}"), via_cpu),
                "post_direct": (
                    lambda: direct.post(f"{up_url}/notes", content=b'{"n":1}'),
                    direct_cpu,
                ),
                "post_gateway": (lambda: via.post(f"{gw_url}/notes", content=b'{"n":1}'), via_cpu),
                "effect": (
                    lambda: via.post(
                        f"{gw_url}/charges",
                        content=b'{"n":1}',
                        headers={"Idempotency-Key": f"bench-{next(keys)}"},
                    ),
                    via_cpu,
                ),
            }
            pair = ledger_pair_runner(str(db), "bench-ledger-alone", gateway="http")
            for call, _ in calls.values():  # warm up: connections open, code paths loaded
                for _ in range(20):
                    call()
            for _ in range(20):
                pair()
            for r in range(rounds_n):
                for name in rounds.order(r):
                    if name == "ledger_pair":
                        alone: dict[str, Any] = {"client": client}
                        before = cpu_snapshot(alone)
                        rounds.add(name, timed_block(pair, block), cpu_delta(before, alone))
                        continue
                    call, counters = calls[name]
                    n = max(1, block // 4) if name.startswith("api_") else block  # 20 ms each
                    before = cpu_snapshot(counters)
                    samples = []
                    for _ in range(n):
                        t0 = time.perf_counter()
                        response = call()
                        samples.append(time.perf_counter() - t0)
                        if response.status_code >= 300:
                            raise SystemExit(f"{name}: {response.status_code} {response.text}")
                    rounds.add(name, samples, cpu_delta(before, counters))
                if (r + 1) % 5 == 0 or r + 1 == rounds_n:
                    progress(TOOL, f"round {r + 1}/{rounds_n}, load {load_average()}")
    finally:
        gateway.terminate()
        gateway.wait(timeout=30)
        upstream.kill()
        upstream.wait(timeout=30)
    return summarize(rounds, rounds_n, block, load_before, fsync_before, work)


def summarize(
    rounds: Rounds,
    rounds_n: int,
    block: int,
    load_before: list[float],
    fsync_before: float,
    work: Path,
) -> dict[str, Any]:
    figures = {name: rounds.figure(name) for name, _ in LABELS}
    ratio = rounds.ratio("get_gateway", "get_direct")
    added = rounds.difference_ms("effect", "post_gateway")
    own = rounds.per_round(  # what is added beyond the bare ledger pair: the gateway's
        lambda e, g, p: (e - g - p) * 1000, "effect", "post_gateway", "ledger_pair"
    )
    cpu = {k: figures[k]["cpu_ms_per_call"]["gateway"] for k in ("effect", "post_gateway")}
    ledger = figures["ledger_pair"]
    return {
        "figures": figures,
        "unregistered_ratio": {
            **ratio,
            "target": TARGET_RATIO,
            "verdict": verdict(ratio["median"], TARGET_RATIO),
        },
        "unregistered_post_ratio": rounds.ratio("post_gateway", "post_direct"),
        "unregistered_ratio_api_ms": {
            "api_ms": API_MS,
            **rounds.ratio("api_gateway", "api_direct"),
        },
        "registered_added_ms": {
            **added,
            "target": TARGET_ADDED_MS,
            "verdict": verdict(added["median"], TARGET_ADDED_MS),
        },
        "registered_added_beyond_ledger_ms": own,
        "registered_added_gateway_cpu_ms": round(cpu["effect"] - cpu["post_gateway"], 3),
        "registered_vs_direct_ms": rounds.difference_ms("effect", "post_direct"),
        "ledger_pair": {
            "wall_ms": ledger["median_ms"],
            "cpu_ms": ledger["cpu_ms_per_call"]["client"],
        },
        "fsync_ms": [fsync_before, fsync_ms(work)],
        "load_average": [load_before, load_average()],
        "rounds": rounds_n,
        "block": block,
    }


def table(result: dict[str, Any]) -> str:
    out = [
        "| request | median ms | round medians min-max ms | CPU ms/request: "
        "gateway / upstream / client |",
        "|---|---:|---:|---:|",
    ]
    for key, label in LABELS:
        f = result["figures"][key]
        cpu = f["cpu_ms_per_call"]
        cells = " / ".join(f"{cpu[r]:.3f}" if r in cpu else "-" for r in ROLES)
        out.append(
            f"| {label} | {f['median_ms']:.3f} | {f['round_min_ms']:.3f}-{f['round_max_ms']:.3f}"
            f" | {cells} |"
        )
    r, a = result["unregistered_ratio"], result["registered_added_ms"]
    own, pair = result["registered_added_beyond_ledger_ms"], result["ledger_pair"]
    post, api = result["unregistered_post_ratio"], result["unregistered_ratio_api_ms"]
    out.append("")
    out.append(
        f"unregistered: GET {r['median']:.2f}x direct (rounds {r['min']:.2f}-{r['max']:.2f}, "
        f"q1-q3 {r['q1']:.2f}-{r['q3']:.2f}); target <= {r['target']}x: {r['verdict']}; "
        f"POST {post['median']:.2f}x ({post['min']:.2f}-{post['max']:.2f}); a {API_MS} ms API "
        f"{api['median']:.2f}x ({api['min']:.2f}-{api['max']:.2f})"
    )
    out.append(
        f"registered: +{a['median']:.3f} ms over an unregistered POST through the gateway "
        f"(rounds {a['min']:.3f}-{a['max']:.3f}, q1-q3 {a['q1']:.3f}-{a['q3']:.3f}); target <= "
        f"{a['target']} ms: {a['verdict']}; +{result['registered_vs_direct_ms']['median']:.3f} "
        "ms over a direct POST"
    )
    out.append(
        f"registered: of which the ledger (bare intercept + complete) {pair['wall_ms']:.3f} ms "
        f"({pair['cpu_ms']:.3f} ms CPU), the gateway's own {own['median']:+.3f} ms (gateway CPU "
        f"+{result['registered_added_gateway_cpu_ms']:.3f} ms per effect over an unregistered "
        "POST, ledger included)"
    )
    out.append(
        f"write + fsync on the store's disk: {result['fsync_ms'][0]:.3f} ms before, "
        f"{result['fsync_ms'][1]:.3f} ms after (an effect commits twice); load average "
        f"{result['load_average'][0]} at the start, {result['load_average'][1]} at the end; "
        f"{result['rounds']} rounds of {result['block']} requests of each kind "
        f"({max(1, result['block'] // 4)} of the {API_MS} ms API)"
    )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="10 rounds instead of 50")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("--dir", default=None, help="where the store goes (default: a temp dir)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 50)")
    parser.add_argument("--block", type=int, default=20, help="requests per kind and round")
    args = parser.parse_args(argv)
    rounds = args.rounds or (10 if args.quick else 50)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        result = measure(Path(tmp), rounds, args.block)
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

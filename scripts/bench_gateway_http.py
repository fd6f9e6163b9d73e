"""Overhead of ``continuum gateway http`` per request, against the same request sent
straight to the upstream (issue 23, item 6).

Usage: scripts/bench_gateway_http.py [--quick] [--json] [--dir DIR] [--requests N]

A small upstream (the standard library's HTTP server, HTTP/1.1 keep-alive, in its own
process) and the gateway (``python -m continuum gateway http``, SQLite store in DIR) run
on loopback; one ``httpx2.Client`` per side keeps its connection alive. Blocks of direct
and gateway requests alternate, so a busy machine slows both alike. Figures (median
latency per request, with quartiles):

- unregistered: ``GET /items`` direct vs through the gateway, and their ratio
  (target: at most 1.3x);
- registered: ``POST /charges`` with a new ``Idempotency-Key`` each time through the
  gateway (intercept, forward, complete: two committed SQLite transactions) vs an
  unregistered ``POST /notes`` through the gateway; the difference is what the ledger
  adds (target: at most 2 ms), shown beside the direct ``POST``.

Progress goes to stderr; a table (or one JSON document with ``--json``) to stdout.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2

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

TARGET_RATIO = 1.3
API_MS = 20  # the second GET figure: an upstream that takes 20 ms, like a real API
TARGET_ADDED_MS = 2.0


def progress(message: str) -> None:
    sys.stderr.write(f"bench_gateway_http: {message}\n")
    sys.stderr.flush()


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


def fsync_ms(directory: Path, n: int = 200) -> float:
    """Median write + fsync of a 121-byte record in ``directory``: what one commit of the
    ledger waits for at least (the store runs with synchronous=FULL)."""
    path = directory / "fsync.probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    times = []
    try:
        for _ in range(n):
            os.write(fd, b"x" * 121)
            t0 = time.perf_counter()
            os.fsync(fd)
            times.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink()
    return round(statistics.median(times) * 1000, 3)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _summary(samples: list[float]) -> dict[str, Any]:
    q = statistics.quantiles(samples, n=4)
    return {
        "median": round(statistics.median(samples) * 1000, 3),
        "q1": round(q[0] * 1000, 3),
        "q3": round(q[2] * 1000, 3),
        "n": len(samples),
        "unit": "ms",
    }


def measure(work: Path, requests: int, block: int) -> dict[str, Any]:
    fsync_before = fsync_ms(work)
    upstream, port_line = _start([sys.executable, "-c", UPSTREAM], stream="stdout", marker=None)
    rules = work / "rules.toml"
    rules.write_text(RULES.format(port=int(port_line)), encoding="utf-8")
    gateway, ready = _start(
        [
            sys.executable,
            "-m",
            "continuum",
            "gateway",
            "http",
            "--listen",
            "127.0.0.1:0",
            "--rules",
            str(rules),
            "--db",
            str(work / "gateway.db"),
        ],
        stream="stderr",
        marker="serving at",
    )
    gw_url = ready.split("serving at ", 1)[1].split(" ", 1)[0].rstrip("/") + "/api"
    up_url = f"http://127.0.0.1:{int(port_line)}"
    keys = iter(range(10**9))
    cpu: dict[str, float] = {}
    samples: dict[str, list[float]] = {
        k: []
        for k in (
            "get_direct",
            "get_gateway",
            "api_direct",
            "api_gateway",
            "post_direct",
            "post_gateway",
            "effect",
        )
    }
    cpu.update((name, 0.0) for name in samples)
    try:
        with httpx2.Client(timeout=30) as direct, httpx2.Client(timeout=30) as via:
            calls: dict[str, Callable[[], httpx2.Response]] = {
                "get_direct": lambda: direct.get(f"{up_url}/items"),
                "get_gateway": lambda: via.get(f"{gw_url}/items"),
                "api_direct": lambda: direct.get(f"{up_url}/items?ms={API_MS}"),
                "api_gateway": lambda: via.get(f"{gw_url}/items?ms={API_MS}"),
                "post_direct": lambda: direct.post(f"{up_url}/notes", content=b'{"n":1}'),
                "post_gateway": lambda: via.post(f"{gw_url}/notes", content=b'{"n":1}'),
                "effect": lambda: via.post(
                    f"{gw_url}/charges",
                    content=b'{"n":1}',
                    headers={"Idempotency-Key": f"bench-{next(keys)}"},
                ),
            }
            for call in calls.values():  # warm up: connections open, code paths loaded
                for _ in range(20):
                    call()
            done = 0
            while done < requests:
                for name, call in calls.items():
                    cpu0 = _cpu_seconds(gateway.pid)
                    for _ in range(block):
                        t0 = time.perf_counter()
                        response = call()
                        samples[name].append(time.perf_counter() - t0)
                        if response.status_code >= 300:
                            raise SystemExit(f"{name}: {response.status_code} {response.text}")
                    cpu[name] += _cpu_seconds(gateway.pid) - cpu0
                done += block
                progress(f"{done}/{requests} requests of each kind")
    finally:
        gateway.terminate()
        gateway.wait(timeout=30)
        upstream.kill()
        upstream.wait(timeout=30)
    figures = {name: _summary(values) for name, values in samples.items()}
    for name, seconds in cpu.items():
        figures[name]["gateway_cpu_ms"] = round(seconds / len(samples[name]) * 1000, 3)
    ratio = figures["get_gateway"]["median"] / figures["get_direct"]["median"]
    post_ratio = figures["post_gateway"]["median"] / figures["post_direct"]["median"]
    api_ratio = figures["api_gateway"]["median"] / figures["api_direct"]["median"]
    added = figures["effect"]["median"] - figures["post_gateway"]["median"]
    return {
        "figures": figures,
        "unregistered_ratio": {
            "value": round(ratio, 2),
            "target": TARGET_RATIO,
            "pass": ratio <= TARGET_RATIO,
        },
        "unregistered_post_ratio": round(post_ratio, 2),
        "unregistered_ratio_api_ms": {"api_ms": API_MS, "value": round(api_ratio, 2)},
        "registered_added_ms": {
            "value": round(added, 3),
            "target": TARGET_ADDED_MS,
            "pass": added <= TARGET_ADDED_MS,
        },
        "registered_vs_direct_ms": round(
            figures["effect"]["median"] - figures["post_direct"]["median"], 3
        ),
        "fsync_ms": [fsync_before, fsync_ms(work)],
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "requests": requests,
    }


def table(result: dict[str, Any]) -> str:
    f = result["figures"]
    rows = [
        ("GET, direct", f["get_direct"]),
        ("GET, through the gateway (no rule)", f["get_gateway"]),
        (f"GET of a {API_MS} ms API, direct", f["api_direct"]),
        (f"GET of a {API_MS} ms API, through the gateway", f["api_gateway"]),
        ("POST, direct", f["post_direct"]),
        ("POST, through the gateway (no rule)", f["post_gateway"]),
        ("POST, through the gateway (effect: intercept + complete)", f["effect"]),
    ]
    out = [
        "| request | median ms | q1-q3 ms | gateway CPU ms per request |",
        "|---|---:|---:|---:|",
    ]
    out += [
        f"| {name} | {s['median']:.3f} | {s['q1']:.3f}-{s['q3']:.3f} | {s['gateway_cpu_ms']:.2f} |"
        for name, s in rows
    ]
    r, a = result["unregistered_ratio"], result["registered_added_ms"]
    out.append("")
    out.append(
        f"unregistered: {r['value']:.2f}x direct (target <= {r['target']}x: "
        f"{'pass' if r['pass'] else 'MISSED'}); POST {result['unregistered_post_ratio']:.2f}x; "
        f"a {API_MS} ms API {result['unregistered_ratio_api_ms']['value']:.2f}x"
    )
    out.append(
        f"registered: +{a['value']:.3f} ms over an unregistered POST through the gateway "
        f"(target <= {a['target']} ms: {'pass' if a['pass'] else 'MISSED'}); "
        f"+{result['registered_vs_direct_ms']:.3f} ms over a direct POST"
    )
    out.append(
        f"write + fsync on the store's disk: {result['fsync_ms'][0]:.3f} ms before, "
        f"{result['fsync_ms'][1]:.3f} ms after (an effect commits twice); load average "
        f"{result['load_average']}, {result['requests']} requests of each kind"
    )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="200 requests of each kind")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("--dir", default=None, help="where the store goes (default: a temp dir)")
    parser.add_argument("--requests", type=int, default=None, help="requests of each kind")
    args = parser.parse_args(argv)
    requests = args.requests or (200 if args.quick else 1000)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        result = measure(Path(tmp), requests, block=50)
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Overhead of ``continuum gateway mcp`` per tool call, against the same call sent straight
to the upstream MCP server (issue 23, item 6), with the upstream on both transports.

Usage: scripts/bench_gateway_mcp.py [--quick] [--json] [--dir DIR] [--calls N]

A small upstream (the SDK's ``MCPServer``: ``read_balance`` and ``send_invoice``, each
answering at once) runs once on stdio and once over streamable HTTP on loopback; the
gateway is ``python -m continuum gateway mcp`` (stdio to the client, a SQLite store in
DIR). One SDK client session per path stays open; blocks of calls on each path alternate,
so a busy machine slows all of them alike. Figures (median latency per call, quartiles,
and the gateway's CPU per call from /proc):

- unregistered: ``read_balance`` direct vs through the gateway, and their ratio
  (target: at most 1.3x). With the upstream on stdio such a call takes the gateway's
  byte relay (``gateway/relay.py``: the host's line and the upstream's answer line pass
  verbatim, past the SDK); over HTTP it still goes through the SDK's client session;
- registered: ``send_invoice`` with a new invoice each time through the gateway
  (intercept, forward, complete: two committed SQLite transactions) vs the unregistered
  call through the same gateway; the difference is what the ledger adds (target: at most
  2 ms on SQLite).

Progress goes to stderr; a table (or one JSON document with ``--json``) to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from bench_gateway_http import _cpu_seconds, _summary, fsync_ms  # scripts/, beside this one
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

UPSTREAM = r"""
import os, socket, sys
from mcp.server.mcpserver import MCPServer

server = MCPServer("bench-upstream")

@server.tool(description="Read an account's balance.")
def read_balance(account: str) -> str:
    return f"balance of {account}: 42"

@server.tool(description="Send an invoice.")
def send_invoice(invoice_id: str, amount: int) -> str:
    return f"sent invoice {invoice_id} for {amount}"

if sys.argv[1:] == ["http"]:
    import uvicorn
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(sock.getsockname()[1], flush=True)
    uvicorn.Server(uvicorn.Config(server.streamable_http_app(), log_level="warning")).run(
        sockets=[sock]
    )
else:
    server.run()
"""

RULES = """\
run = "bench"
read_only = ["read_.*"]

[[effect]]
tool = "send_invoice"
action_type = "send_invoice"
key = "invoice:{invoice_id}"
"""

CLIENT = "continuum-bench"
TARGET_RATIO = 1.3
TARGET_ADDED_MS = 2.0


def progress(message: str) -> None:
    sys.stderr.write(f"bench_gateway_mcp: {message}\n")
    sys.stderr.flush()


def _gateway_pid(work: Path, marker: str) -> int:
    """The pid of the gateway process whose command line holds ``marker``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"gateway" in cmdline and marker.encode() in cmdline:
            return int(entry.name)
    raise SystemExit(f"the gateway process ({marker}) was not found")


@asynccontextmanager
async def session(
    stack: AsyncExitStack, command: list[str] | None, url: str | None, env: dict[str, str]
) -> AsyncIterator[ClientSession]:
    if url is not None:
        read, write = await stack.enter_async_context(streamable_http_client(url))
    else:
        assert command is not None
        params = StdioServerParameters(command=command[0], args=command[1:], env=env)
        read, write = await stack.enter_async_context(
            stdio_client(params, errlog=open(os.devnull, "w"))  # noqa: SIM115 - closed at exit
        )
    s = await stack.enter_async_context(
        ClientSession(read, write, client_info=types.Implementation(name=CLIENT, version="1"))
    )
    with anyio.fail_after(60):
        await s.initialize()
    yield s


async def measure(work: Path, calls: int, block: int) -> dict[str, Any]:
    fsync_before = fsync_ms(work)
    upstream_py = work / "upstream.py"
    upstream_py.write_text(UPSTREAM, encoding="utf-8")
    (work / "rules.toml").write_text(RULES, encoding="utf-8")
    env = {**os.environ, "CONTINUUM_MCP_ALLOW": CLIENT}
    http_up = await anyio.open_process(
        [sys.executable, str(upstream_py), "http"], stdout=-1, stderr=-3
    )
    assert http_up.stdout is not None
    port = int((await http_up.stdout.receive()).decode().split()[0])
    url = f"http://127.0.0.1:{port}/mcp"

    def gateway(db: str, *upstream: str) -> list[str]:
        return [
            sys.executable,
            *("-m", "continuum", "gateway", "mcp", "--rules", str(work / "rules.toml")),
            *("--db", str(work / db), "--name", db.removesuffix(".db"), "--pins"),
            *(str(work / f"{db}.pins.json"), *upstream),
        ]

    invoice = iter(range(10**9))
    samples: dict[str, list[float]] = {}
    cpu: dict[str, float] = {}
    try:
        async with AsyncExitStack() as stack:
            direct = await stack.enter_async_context(
                session(stack, [sys.executable, str(upstream_py)], None, env)
            )
            direct_http = await stack.enter_async_context(session(stack, None, url, env))
            via = await stack.enter_async_context(
                session(
                    stack, gateway("stdio.db", "--", sys.executable, str(upstream_py)), None, env
                )
            )
            via_http = await stack.enter_async_context(
                session(stack, gateway("http.db", "--url", url), None, env)
            )
            pids = {"stdio": _gateway_pid(work, "stdio"), "http": _gateway_pid(work, "http")}

            def read(s: ClientSession) -> Callable[[], Awaitable[types.CallToolResult]]:
                return lambda: s.call_tool("read_balance", {"account": "acme"})

            def effect(s: ClientSession) -> Callable[[], Awaitable[types.CallToolResult]]:
                return lambda: s.call_tool(
                    "send_invoice", {"invoice_id": f"INV-{next(invoice)}", "amount": 1}
                )

            paths: dict[str, tuple[str | None, Callable[[], Awaitable[types.CallToolResult]]]] = {
                "stdio_direct": (None, read(direct)),
                "stdio_gateway": ("stdio", read(via)),
                "stdio_effect": ("stdio", effect(via)),
                "http_direct": (None, read(direct_http)),
                "http_gateway": ("http", read(via_http)),
                "http_effect": ("http", effect(via_http)),
            }
            samples.update((name, []) for name in paths)
            cpu.update((name, 0.0) for name in paths)
            for _, call in paths.values():  # warm up: code paths loaded, store opened
                for _ in range(20):
                    await call()
            done = 0
            while done < calls:
                for name, (gw, call) in paths.items():
                    cpu0 = _cpu_seconds(pids[gw]) if gw else 0.0
                    for _ in range(block):
                        t0 = time.perf_counter()
                        result = await call()
                        samples[name].append(time.perf_counter() - t0)
                        if result.is_error or (result.meta or {}).get("continuum/ledger"):
                            raise SystemExit(f"{name}: {result}")
                    if gw:
                        cpu[name] += _cpu_seconds(pids[gw]) - cpu0
                done += block
                progress(f"{done}/{calls} calls on each path")
    finally:
        http_up.kill()
        await http_up.wait()
    figures = {name: _summary(values) for name, values in samples.items()}
    for name, seconds in cpu.items():
        figures[name]["gateway_cpu_ms"] = round(seconds / len(samples[name]) * 1000, 3)
    out: dict[str, Any] = {"figures": figures}
    for transport in ("stdio", "http"):
        ratio = figures[f"{transport}_gateway"]["median"] / figures[f"{transport}_direct"]["median"]
        added = figures[f"{transport}_effect"]["median"] - figures[f"{transport}_gateway"]["median"]
        out[transport] = {
            "unregistered_ratio": {
                "value": round(ratio, 2),
                "target": TARGET_RATIO,
                "pass": ratio <= TARGET_RATIO,
            },
            "registered_added_ms": {
                "value": round(added, 3),
                "target": TARGET_ADDED_MS,
                "pass": added <= TARGET_ADDED_MS,
            },
        }
    out["fsync_ms"] = [fsync_before, fsync_ms(work)]
    out["load_average"] = [round(x, 2) for x in os.getloadavg()]
    out["calls"] = calls
    return out


def table(result: dict[str, Any]) -> str:
    f = result["figures"]
    names = {
        "stdio_direct": "upstream on stdio: a read, direct",
        "stdio_gateway": "upstream on stdio: a read, through the gateway (no rule)",
        "stdio_effect": "upstream on stdio: an effect through the gateway (intercept + complete)",
        "http_direct": "upstream over HTTP: a read, direct",
        "http_gateway": "upstream over HTTP: a read, through the gateway (no rule)",
        "http_effect": "upstream over HTTP: an effect through the gateway (intercept + complete)",
    }
    out = ["| call | median ms | q1-q3 ms | gateway CPU ms per call |", "|---|---:|---:|---:|"]
    for key, label in names.items():
        s = f[key]
        cpu = f"{s['gateway_cpu_ms']:.2f}" if "gateway" in key or "effect" in key else "-"
        out.append(f"| {label} | {s['median']:.3f} | {s['q1']:.3f}-{s['q3']:.3f} | {cpu} |")
    out.append("")
    for transport in ("stdio", "http"):
        r = result[transport]["unregistered_ratio"]
        a = result[transport]["registered_added_ms"]
        out.append(
            f"{transport}: unregistered {r['value']:.2f}x direct (target <= {r['target']}x: "
            f"{'pass' if r['pass'] else 'MISSED'}); registered +{a['value']:.3f} ms over an "
            f"unregistered call through the gateway (target <= {a['target']} ms: "
            f"{'pass' if a['pass'] else 'MISSED'})"
        )
    out.append(
        f"write + fsync on the store's disk: {result['fsync_ms'][0]:.3f} ms before, "
        f"{result['fsync_ms'][1]:.3f} ms after (an effect commits twice); load average "
        f"{result['load_average']}, {result['calls']} calls on each path"
    )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="200 calls on each path")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("--dir", default=None, help="where the stores go (default: a temp dir)")
    parser.add_argument("--calls", type=int, default=None, help="calls on each path")
    args = parser.parse_args(argv)
    calls = args.calls or (200 if args.quick else 1000)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        result = anyio.run(measure, Path(tmp), calls, 50)
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Overhead of ``continuum gateway mcp`` per tool call, against the same call sent straight
to the upstream MCP server (issue 23, item 6), with the upstream on both transports.

Usage: scripts/bench_gateway_mcp.py [--quick] [--json] [--dir DIR] [--rounds N] [--block N]

A small upstream (the SDK's ``MCPServer``: ``read_balance`` and ``send_invoice``, each
answering at once) runs once on stdio and once over streamable HTTP on loopback; the
gateway is ``python -m continuum gateway mcp`` (stdio to the client, a SQLite store in
DIR). One SDK client session per path stays open. The machine is shared, so the calls go
in rounds (``bench_gateway_kit.py``): each round runs a block of every path, in an order
rotated from round to round, and each ratio or difference is formed inside a round. The
figures: median latency per call with the smallest and largest round median, the CPU per
call of every process in the chain (the gateway, its upstream, the client), the load
average, and these, each judged against issue 23's target:

- unregistered: ``read_balance`` through the gateway over the same call direct, per
  round (target: at most 1.3x). With the upstream on stdio such a call takes the
  gateway's byte relay (``gateway/relay.py``); over HTTP, the SDK's client session;
- registered: ``send_invoice`` with a new invoice each time through the gateway
  (intercept, forward, complete: two committed SQLite transactions) minus the
  unregistered call through the same gateway, per round (target: at most 2 ms);
- the ledger's share of that: one bare intercept + complete pair, in this process, on the
  gateway's own store file (another run), as the gateway makes them; the rest of the
  added time is the gateway's own. Re-run after a change of the ledger to see its share
  move and the gateway's stay.

Progress goes to stderr; a table (or one JSON document with ``--json``) to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from bench_gateway_kit import (  # scripts/, beside this one
    TARGET_ADDED_MS,
    TARGET_RATIO,
    ProcessCpu,
    Rounds,
    ThreadCpu,
    cpu_delta,
    cpu_snapshot,
    find_child,
    fsync_ms,
    ledger_pair_runner,
    load_average,
    progress,
    timed_block,
    verdict,
)
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

if sys.argv[1:] == ["http"]:  # else "direct" or "via": a name in its command line
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


def _stdio_child(marker: str) -> int:
    """The pid of this process's child running the stdio upstream ``marker``."""
    return find_child(os.getpid(), marker)


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


Call = Callable[[], Awaitable[types.CallToolResult]]


async def measure(work: Path, rounds_n: int, block: int) -> dict[str, Any]:
    load_before = load_average()
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
    paths = [name for name, _ in LABELS]
    rounds = Rounds(paths)
    try:
        async with AsyncExitStack() as stack:
            direct = await stack.enter_async_context(
                session(stack, [sys.executable, str(upstream_py), "direct"], None, env)
            )
            direct_http = await stack.enter_async_context(session(stack, None, url, env))
            via = await stack.enter_async_context(
                session(
                    stack,
                    gateway("stdio.db", "--", sys.executable, str(upstream_py), "via"),
                    None,
                    env,
                )
            )
            via_http = await stack.enter_async_context(
                session(stack, gateway("http.db", "--url", url), None, env)
            )
            gw_stdio = ProcessCpu(find_child(os.getpid(), "gateway", "stdio.db"))
            gw_http = ProcessCpu(find_child(os.getpid(), "gateway", "http.db"))
            up_via = ProcessCpu(find_child(gw_stdio.pid, "upstream.py"))
            up_direct = ProcessCpu(_stdio_child("direct"))
            up_http = ProcessCpu(http_up.pid)
            client = ThreadCpu()

            def read(s: ClientSession) -> Call:
                return lambda: s.call_tool("read_balance", {"account": "acme"})

            def effect(s: ClientSession) -> Call:
                return lambda: s.call_tool(
                    "send_invoice", {"invoice_id": f"INV-{next(invoice)}", "amount": 1}
                )

            calls: dict[str, tuple[Call, dict[str, Any]]] = {
                "stdio_direct": (read(direct), {"upstream": up_direct, "client": client}),
                "stdio_gateway": (
                    read(via),
                    {"gateway": gw_stdio, "upstream": up_via, "client": client},
                ),
                "stdio_effect": (
                    effect(via),
                    {"gateway": gw_stdio, "upstream": up_via, "client": client},
                ),
                "http_direct": (read(direct_http), {"upstream": up_http, "client": client}),
                "http_gateway": (
                    read(via_http),
                    {"gateway": gw_http, "upstream": up_http, "client": client},
                ),
                "http_effect": (
                    effect(via_http),
                    {"gateway": gw_http, "upstream": up_http, "client": client},
                ),
            }
            pair = ledger_pair_runner(str(work / "stdio.db"), "bench-ledger-alone")
            for call, _ in calls.values():  # warm up: code paths loaded, store opened
                for _ in range(20):
                    await call()
            for _ in range(20):
                pair()
            for r in range(rounds_n):
                for name in rounds.order(r):
                    if name == "ledger_pair":
                        counters: dict[str, Any] = {"client": client}
                        before = cpu_snapshot(counters)
                        rounds.add(name, timed_block(pair, block), cpu_delta(before, counters))
                        continue
                    call, counters = calls[name]
                    before = cpu_snapshot(counters)
                    samples = []
                    for _ in range(block):
                        t0 = time.perf_counter()
                        result = await call()
                        samples.append(time.perf_counter() - t0)
                        if result.is_error or (result.meta or {}).get("continuum/ledger"):
                            raise SystemExit(f"{name}: {result}")
                    rounds.add(name, samples, cpu_delta(before, counters))
                if (r + 1) % 5 == 0 or r + 1 == rounds_n:
                    progress(
                        "bench_gateway_mcp", f"round {r + 1}/{rounds_n}, load {load_average()}"
                    )
    finally:
        http_up.kill()
        await http_up.wait()
    return summarize(rounds, block, load_before, fsync_before, work)


LABELS = [
    ("stdio_direct", "upstream on stdio: a read, direct"),
    ("stdio_gateway", "upstream on stdio: a read, through the gateway (no rule)"),
    ("stdio_effect", "upstream on stdio: an effect through the gateway (intercept + complete)"),
    ("http_direct", "upstream over HTTP: a read, direct"),
    ("http_gateway", "upstream over HTTP: a read, through the gateway (no rule)"),
    ("http_effect", "upstream over HTTP: an effect through the gateway (intercept + complete)"),
    ("ledger_pair", "the ledger alone: intercept + complete in-process, same store"),
]


def summarize(
    rounds: Rounds, block: int, load_before: list[float], fsync_before: float, work: Path
) -> dict[str, Any]:
    out: dict[str, Any] = {"figures": {name: rounds.figure(name) for name, _ in LABELS}}
    ledger = rounds.figure("ledger_pair")
    for transport in ("stdio", "http"):
        ratio = rounds.ratio(f"{transport}_gateway", f"{transport}_direct")
        added = rounds.difference_ms(f"{transport}_effect", f"{transport}_gateway")
        own = rounds.per_round(  # what is added beyond the bare ledger pair: the gateway's
            lambda e, g, p: (e - g - p) * 1000,
            f"{transport}_effect",
            f"{transport}_gateway",
            "ledger_pair",
        )
        effect_cpu = rounds.figure(f"{transport}_effect")["cpu_ms_per_call"]["gateway"]
        read_cpu = rounds.figure(f"{transport}_gateway")["cpu_ms_per_call"]["gateway"]
        out[transport] = {
            "unregistered_ratio": {
                **ratio,
                "target": TARGET_RATIO,
                "verdict": verdict(ratio["median"], TARGET_RATIO),
            },
            "registered_added_ms": {
                **added,
                "target": TARGET_ADDED_MS,
                "verdict": verdict(added["median"], TARGET_ADDED_MS),
            },
            "registered_added_beyond_ledger_ms": own,
            "registered_added_gateway_cpu_ms": round(effect_cpu - read_cpu, 3),
        }
    out["ledger_pair"] = {
        "wall_ms": ledger["median_ms"],
        "cpu_ms": ledger["cpu_ms_per_call"]["client"],
    }
    out["fsync_ms"] = [fsync_before, fsync_ms(work)]
    out["load_average"] = [load_before, load_average()]
    out["rounds"] = rounds.calls["stdio_direct"] // block
    out["block"] = block
    return out


MODERN_ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": CLIENT, "version": "1"},
}


def _timed_calls(client: Any, tool: str, n: int, numbers: Iterator[int]) -> float:
    """``n`` calls of ``tool`` (each with its own invoice or account): ms per call."""
    start = time.perf_counter()
    for _ in range(n):
        i = next(numbers)
        effect = tool == "send_invoice"
        args = {"invoice_id": f"E-{i}", "amount": 1} if effect else {"account": f"a{i}"}
        answer = client.request("tools/call", {"name": tool, "arguments": args})
        if "result" not in answer or answer["result"].get("isError"):
            raise RuntimeError(f"{tool} failed: {str(answer)[:300]}")
    return (time.perf_counter() - start) / n * 1000


def _against(samples: list[float], target: float) -> dict[str, Any]:
    """The median, smallest and largest of ``samples``, judged against ``target``."""
    median = statistics.median(samples)
    return {
        "median": round(median, 3),
        "min": round(min(samples), 3),
        "max": round(max(samples), 3),
        "target": target,
        "verdict": verdict(median, target),
    }


def eras(work: Path, rounds_n: int, block: int) -> dict[str, Any]:
    """The stdio rows again with a host of each protocol era, spoken to in raw JSON lines
    (``bench.RawClient``): a handshake host (Gemini CLI, Codex, Kilo Code) and a 2026-07-28
    one (Claude Code: an envelope in every request, no initialize). Per round: ``block``
    reads straight to the upstream, ``block`` through the gateway, ``block`` effects
    through it; the ratio and the difference are formed inside each round."""
    from bench import RawClient

    env = {**os.environ, "CONTINUUM_MCP_ALLOW": CLIENT}
    upstream = [sys.executable, str(work / "upstream.py")]
    out: dict[str, Any] = {}
    for era, envelope in (("handshake", None), ("2026-07-28", MODERN_ENVELOPE)):
        db = work / f"era-{era}.db"
        gateway = [
            sys.executable,
            *("-m", "continuum", "gateway", "mcp", "--rules", str(work / "rules.toml")),
            *("--db", str(db), "--name", f"era-{era}", "--pins", f"{db}.pins.json"),
            *("--", *upstream, "via"),
        ]
        direct = RawClient([*upstream, "direct"], env=env, envelope=envelope)
        via = RawClient(gateway, env=env, envelope=envelope)

        numbers = iter(range(10**9))  # a fresh invoice per effect
        ratios, added = [], []
        try:
            for client in (direct, via):
                if "result" not in client.initialize():
                    raise RuntimeError(f"no {era} session")
                client.request("tools/list")
            _timed_calls(direct, "read_balance", block, numbers)
            _timed_calls(via, "read_balance", block, numbers)
            _timed_calls(via, "send_invoice", block, numbers)
            for _ in range(rounds_n):
                d = _timed_calls(direct, "read_balance", block, numbers)
                g = _timed_calls(via, "read_balance", block, numbers)
                e = _timed_calls(via, "send_invoice", block, numbers)
                ratios.append(g / d)
                added.append(e - g)
        finally:
            direct.close()
            via.close()
        out[era] = {
            "unregistered_ratio": _against(ratios, TARGET_RATIO),
            "registered_added_ms": _against(added, TARGET_ADDED_MS),
        }
    return out


def table(result: dict[str, Any]) -> str:
    out = [f"| call | median ms | round medians min-max ms | CPU ms/call: {ROLES_LABEL} |"]
    out.append("|---|---:|---:|---:|")
    for key, label in LABELS:
        f = result["figures"][key]
        cpu = f["cpu_ms_per_call"]
        cells = " / ".join(f"{cpu[r]:.3f}" if r in cpu else "-" for r in ROLES)
        out.append(
            f"| {label} | {f['median_ms']:.3f} | {f['round_min_ms']:.3f}-{f['round_max_ms']:.3f}"
            f" | {cells} |"
        )
    out.append("")
    pair = result["ledger_pair"]
    for transport in ("stdio", "http"):
        t = result[transport]
        r, a, own = (
            t["unregistered_ratio"],
            t["registered_added_ms"],
            t["registered_added_beyond_ledger_ms"],
        )
        out.append(
            f"{transport} upstream: unregistered {r['median']:.2f}x direct (rounds "
            f"{r['min']:.2f}-{r['max']:.2f}, q1-q3 {r['q1']:.2f}-{r['q3']:.2f}); target <= "
            f"{r['target']}x: {r['verdict']}"
        )
        out.append(
            f"{transport} upstream: registered +{a['median']:.3f} ms over the unregistered call "
            f"through the gateway (rounds {a['min']:.3f}-{a['max']:.3f}, q1-q3 "
            f"{a['q1']:.3f}-{a['q3']:.3f}); target <= {a['target']} ms: {a['verdict']}"
        )
        out.append(
            f"{transport} upstream: of which the ledger (bare intercept + complete) "
            f"{pair['wall_ms']:.3f} ms ({pair['cpu_ms']:.3f} ms CPU), the gateway's own "
            f"{own['median']:+.3f} ms (gateway CPU +{t['registered_added_gateway_cpu_ms']:.3f} ms "
            "per registered call over an unregistered one, ledger included)"
        )
    for era, t in result.get("eras", {}).items():
        r, a = t["unregistered_ratio"], t["registered_added_ms"]
        out.append(
            f"a {era} host, stdio upstream (raw lines): unregistered {r['median']:.2f}x direct "
            f"(rounds {r['min']:.2f}-{r['max']:.2f}); target <= {r['target']}x: {r['verdict']}; "
            f"registered +{a['median']:.3f} ms ({a['min']:.3f}-{a['max']:.3f}); target <= "
            f"{a['target']} ms: {a['verdict']}"
        )
    out.append(
        f"write + fsync on the store's disk: {result['fsync_ms'][0]:.3f} ms before, "
        f"{result['fsync_ms'][1]:.3f} ms after (an effect commits twice); load average "
        f"{result['load_average'][0]} at the start, {result['load_average'][1]} at the end; "
        f"{result['rounds']} rounds of {result['block']} calls on each path"
    )
    return "\n".join(out)


ROLES = ["gateway", "upstream", "client"]
ROLES_LABEL = "gateway / upstream / client"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="10 rounds instead of 50")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("--dir", default=None, help="where the stores go (default: a temp dir)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 50)")
    parser.add_argument("--block", type=int, default=20, help="calls per path and round")
    args = parser.parse_args(argv)
    rounds = args.rounds or (10 if args.quick else 50)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        result = anyio.run(measure, Path(tmp), rounds, args.block)
        result["eras"] = eras(Path(tmp), rounds, args.block)
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

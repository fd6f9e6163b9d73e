"""Requests per second of ``continuum-mcp`` over streamable HTTP with bearer tokens, with
the same calls over stdio measured beside them (issue 16).

Usage: scripts/bench_http.py [--quick] [--json] [--dir DIR]

``http_figures(work, quick)`` returns figures in the format of ``scripts/bench.py``
(median, min, max, q1, q3, n, unit; ``ratio``/``ratio_to``; ``target``; ``pass``), so
``bench.py`` can merge them. Every call goes through the official MCP client
(``mcp.Client``), in the handshake era (sessions) unless the figure says otherwise:

- ``continuum_resume`` and ``continuum_list_actions`` on a run of a few hundred events;
- intercept+complete pairs, counted as calls (two per pair), each on a new key;
- over HTTP on loopback with a ``submit`` token (the bearer check runs on every request),
  over HTTPS (TLS 1.3, a certificate made here, the connection kept alive), and in the
  2026-07-28 era (no session: each request stands alone);
- over stdio, the same client calling a ``continuum-mcp`` allowed by name.

Blocks of HTTP and stdio calls alternate, so a busy machine slows both alike. The HTTP
figures are shown with their ratio to stdio and are not judged: SPEC 13 sets no HTTP
target. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
from certificates import self_signed  # scripts/, beside this script
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation

from continuum.runtime.facade import Continuum

RUN = "bench"
CLIENT = "continuum-bench"
TOKEN = "bench-submit-token-0123456789abcdef"
ANNOUNCE = re.compile(r"serving MCP over streamable HTTP at (\S+)")
START_SECONDS = 60.0


def progress(message: str) -> None:
    sys.stderr.write(f"bench-http: {message}\n")
    sys.stderr.flush()


def summary(samples: list[float], unit: str, digits: int = 1) -> dict[str, Any]:
    s = sorted(samples)
    q = statistics.quantiles(s, n=4) if len(s) >= 2 else [s[0], s[0], s[0]]
    return {
        "median": round(statistics.median(s), digits),
        "min": round(s[0], digits),
        "max": round(s[-1], digits),
        "q1": round(q[0], digits),
        "q3": round(q[2], digits),
        "n": len(s),
        "unit": unit,
    }


def server_command() -> list[str]:
    exe = Path(sys.executable).parent / "continuum-mcp"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "continuum.mcp"]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTINUUM_")}
    env.update(extra)
    return env


# --- fixtures: a store, a token file, a certificate --------------------------------


def build_store(url: str, actions: int) -> None:
    rt = Continuum.open(url)
    try:
        rt.start_run(RUN, "bench over HTTP")
        for i in range(actions):
            key = rt.intercept(RUN, "send", {"i": i}, key=f"seed-{i}").action_key
            rt.complete(RUN, key, external_id=f"x-{i}")
        rt.checkpoint(RUN, reason="bench")
    finally:
        rt.close()


def write_private(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


# --- servers and clients -----------------------------------------------------------


class HttpServer:
    """``continuum-mcp --transport streamable-http`` on a free loopback port."""

    def __init__(self, work: Path, url: str, name: str, tls: tuple[Path, Path] | None) -> None:
        tokens = write_private(work / f"{name}-tokens", f"submit {TOKEN}\n".encode())
        self.log = work / f"{name}-stderr.log"
        extra = ["--tls-cert", str(tls[0]), "--tls-key", str(tls[1])] if tls else []
        with self.log.open("wb") as err:
            self.proc = subprocess.Popen(
                [
                    *server_command(),
                    "--db",
                    url,
                    "--transport",
                    "streamable-http",
                    "--listen",
                    "127.0.0.1:0",
                    "--token-file",
                    str(tokens),
                    *extra,
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=clean_env(),
            )
        deadline = time.monotonic() + START_SECONDS
        while not (found := ANNOUNCE.search(self.log.read_text(errors="replace"))):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the HTTP server did not start: {self.log.read_text()[-500:]}")
            time.sleep(0.05)  # a benchmark's start-up wait, not a test's synchronisation
        self.url = found.group(1)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@asynccontextmanager
async def http_session(
    url: str, mode: str, verify: ssl.SSLContext | bool = False
) -> AsyncIterator[Client]:
    hc = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {TOKEN}"},
        verify=verify,
        trust_env=False,
        timeout=httpx2.Timeout(60),
    )
    async with (
        hc,
        Client(
            streamable_http_client(url, http_client=hc),
            mode=mode,
            client_info=Implementation(name=CLIENT, version="1"),
        ) as client,
    ):
        yield client


@asynccontextmanager
async def stdio_session(url: str) -> AsyncIterator[Client]:
    cmd = server_command()
    params = StdioServerParameters(
        command=cmd[0], args=[*cmd[1:], "--db", url], env={"CONTINUUM_MCP_MUTATING_CLIENTS": CLIENT}
    )
    with open(os.devnull, "w") as errlog:
        async with Client(
            stdio_client(params, errlog=errlog),
            mode="legacy",
            client_info=Implementation(name=CLIENT, version="1"),
        ) as client:
            yield client


# --- what is measured --------------------------------------------------------------


async def checked(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    if result.is_error or result.structured_content is None:
        text = " ".join(getattr(b, "text", "") for b in result.content)
        raise RuntimeError(f"{tool} failed: {text[:300]}")
    return result.structured_content


async def resume_calls(client: Client, n: int, _tag: str) -> float:
    start = time.perf_counter()
    for _ in range(n):
        await checked(client, "continuum_resume", {"run_id": RUN})
    return n / (time.perf_counter() - start)


async def list_calls(client: Client, n: int, _tag: str) -> float:
    start = time.perf_counter()
    for _ in range(n):
        if not (await checked(client, "continuum_list_actions", {"run_id": RUN}))["actions"]:
            raise RuntimeError("continuum_list_actions listed nothing")
    return n / (time.perf_counter() - start)


async def pair_calls(client: Client, n: int, tag: str) -> float:
    """``n`` calls as intercept+complete pairs on new keys: calls per second."""
    pairs = max(1, n // 2)
    start = time.perf_counter()
    for i in range(pairs):
        key = f"invoice:{tag}-{i}"
        got = await checked(
            client,
            "continuum_intercept_action",
            {
                "run_id": RUN,
                "action_type": "send_invoice",
                "key": key,
                "arguments": {"invoice": key},
            },
        )
        if got.get("proceed") is not True:
            raise RuntimeError(f"intercept of a new key did not proceed: {str(got)[:300]}")
        await checked(
            client,
            "continuum_complete_action",
            {"run_id": RUN, "action_key": got["action_key"], "external_id": key},
        )
    return 2 * pairs / (time.perf_counter() - start)


Measure = Callable[[Client, int, str], Awaitable[float]]


async def measure_all(
    clients: dict[str, Client], rounds: int, block: int
) -> dict[str, dict[str, list[float]]]:
    """Interleaved blocks: for each measure, every client in turn, order flipped each round."""
    measures: dict[str, Measure] = {
        "resume": resume_calls,
        "list_actions": list_calls,
        "intercept_complete": pair_calls,
    }
    rates: dict[str, dict[str, list[float]]] = {m: {c: [] for c in clients} for m in measures}
    names = list(clients)
    for name in names:  # warm up: imports, first store open, connection set-up
        for measure in measures.values():
            await measure(clients[name], 4, f"warm-{name}")
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for what, measure in measures.items():
            for name in order:
                rates[what][name].append(await measure(clients[name], block, f"{name}-{r}"))
    return rates


def http_figures(work: Path, quick: bool) -> dict[str, Any]:
    """Requests per second over HTTP with auth (and HTTPS, and the 2026-07-28 era), with
    the same calls over stdio beside them; a dict of figures as ``bench.py`` makes them."""
    rounds, block = (3, 20) if quick else (7, 60)
    url = str(work / "bench-http.db")
    build_store(url, 50 if quick else 200)
    cert, key = self_signed(work, "continuum-bench")
    trust = ssl.create_default_context(cafile=str(cert))
    progress(f"requests/s over HTTP (plain, TLS) and stdio: {rounds} rounds of {block} calls")
    plain = HttpServer(work, url, "http", None)
    tls = HttpServer(work, url, "https", (cert, key))

    async def run() -> dict[str, dict[str, list[float]]]:
        async with AsyncExitStack() as stack:
            clients = {
                "http": await stack.enter_async_context(http_session(plain.url, "legacy")),
                "https": await stack.enter_async_context(http_session(tls.url, "legacy", trust)),
                "http_2026": await stack.enter_async_context(http_session(plain.url, "auto")),
                "stdio": await stack.enter_async_context(stdio_session(url)),
            }
            return await measure_all(clients, rounds, block)

    try:
        rates = anyio.run(run)
    finally:
        plain.close()
        tls.close()
    figures: dict[str, Any] = {}
    labels = {
        "http": "HTTP on loopback, bearer token, handshake era (sessions)",
        "https": "HTTPS (TLS 1.3) on loopback, bearer token, handshake era",
        "http_2026": "HTTP on loopback, bearer token, 2026-07-28 era (no session)",
    }
    for what, by_client in rates.items():
        unit = "calls/s" if what == "intercept_complete" else "requests/s"
        base = statistics.median(by_client["stdio"])
        figures[f"stdio_{what}_rps"] = {
            **summary(by_client["stdio"], unit),
            "pass": None,
            "target": "(shown: the same calls over stdio, the same client)",
        }
        for name, label in labels.items():
            fig = summary(by_client[name], unit)
            figures[f"{name}_{what}_rps"] = {
                **fig,
                "ratio": round(statistics.median(by_client[name]) / base, 3),
                "ratio_to": f"stdio_{what}_rps",
                "pass": None,
                "target": f"(shown, not judged: {label})",
            }
    return figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer and shorter rounds")
    ap.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    ap.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the store goes (default: a temporary directory)",
    )
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="continuum-bench-http-", dir=args.dir))
    try:
        figures = http_figures(work, args.quick)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps({"figures": figures}, indent=2, sort_keys=True))
        return 0
    for name, fig in sorted(figures.items()):
        ratio = f"  {fig['ratio']:.2f}x stdio" if "ratio" in fig else ""
        print(
            f"{name:40} {fig['median']:>9.1f} {fig['unit']:<11} "
            f"(q1 {fig['q1']:.1f}, q3 {fig['q3']:.1f}, n {fig['n']}){ratio}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

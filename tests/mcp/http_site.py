"""A real ``continuum-mcp --transport streamable-http`` subprocess, and clients for it.

- ``HttpSite``: a working directory with a store path and a token file (mode 600) holding
  one token per role; ``serve()`` starts the server on a free loopback port (``--listen
  127.0.0.1:0``; the port is read from the one line the server announces on stderr),
  and on exit sends SIGTERM and requires a graceful exit with code 0.
- ``official_client``: the SDK's ``mcp.Client`` over ``streamable_http_client`` with
  the bearer token in the ``Authorization`` header, in either protocol era.
- ``raw``: a plain ``httpx2`` client for what the official one cannot send.

No sleeps: the announce line and the exit are awaited with ``anyio.fail_after(BOUND)``.
"""

from __future__ import annotations

import os
import re
import signal
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from anyio.abc import Process
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation

from tests.mcp.conftest import BOUND, server_env

ROLES = ("read", "submit", "approve", "admin")
TOKENS = {role: f"{role}-token-{'x' * 12}-{index}" for index, role in enumerate(ROLES)}
CONFIRM_TOKEN = "the-humans-confirm-token-00000000"  # >= 32 characters (issue 30)
ANNOUNCE = re.compile(r"serving MCP over streamable HTTP at (\S+)")


def http_command(db: Path, token_file: Path, *extra: str, listen: str = "127.0.0.1:0") -> list[str]:
    return [
        sys.executable,
        "-m",
        "continuum.mcp",
        "--db",
        str(db),
        "--transport",
        "streamable-http",
        "--listen",
        listen,
        "--token-file",
        str(token_file),
        *extra,
    ]


def write_token_file(path: Path, content: str, mode: int = 0o600) -> Path:
    path.write_text(content)
    path.chmod(mode)
    return path


@dataclass
class Running:
    url: str
    process: Process
    stderr_chunks: list[bytes]

    def stderr(self) -> str:
        return b"".join(self.stderr_chunks).decode(errors="replace")


@dataclass
class HttpSite:
    cwd: Path
    db: Path
    token_file: Path
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def make(cls, root: Path) -> HttpSite:
        work = root / "work"
        work.mkdir()
        lines = "".join(f"{role} {token}\n" for role, token in TOKENS.items())
        tokens = write_token_file(work / "tokens", "# role token\n\n" + lines)
        return cls(cwd=work, db=work / "store.db", token_file=tokens)

    @asynccontextmanager
    async def serve(self, *extra: str, listen: str = "127.0.0.1:0") -> AsyncIterator[Running]:
        """The server until the block ends; then SIGTERM, and a clean exit (0) is required."""
        chunks: list[bytes] = []
        ready = anyio.Event()
        with anyio.fail_after(BOUND):
            process = await anyio.open_process(
                http_command(self.db, self.token_file, *extra, listen=listen),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                cwd=self.cwd,
                env=server_env(**self.env),
            )
        url: list[str] = []

        async def drain() -> None:
            assert process.stderr is not None
            async for chunk in process.stderr:
                chunks.append(chunk)
                found = ANNOUNCE.search(b"".join(chunks).decode(errors="replace"))
                if found and not ready.is_set():
                    url.append(found.group(1))
                    ready.set()
            ready.set()  # the server exited without announcing: the test sees why below

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(drain)
                with anyio.fail_after(BOUND):
                    await ready.wait()
                running = Running(url[0] if url else "", process, chunks)
                assert url, f"the server did not start:\n{running.stderr()}"
                yield running
                process.send_signal(signal.SIGTERM)
                with anyio.fail_after(BOUND):
                    code = await process.wait()
                assert code == 0, f"exit {code} after SIGTERM:\n{running.stderr()}"
        finally:
            if process.returncode is None:
                process.kill()
                with anyio.CancelScope(shield=True):
                    await process.wait()
            await process.aclose()


def run_to_exit(
    cmd: list[str], cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A start-up that must refuse: it exits at once (stdin closed, bounded wait)."""
    return subprocess.run(
        cmd,
        input="",
        capture_output=True,
        text=True,
        cwd=cwd,
        env=server_env(**dict(env or {})),
        timeout=BOUND,
        check=False,
    )


def http_client(
    token: str | None,
    *,
    verify: ssl.SSLContext | bool = False,
    headers: Mapping[str, str] | None = None,
) -> httpx2.AsyncClient:
    all_headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    all_headers.update(headers or {})
    return httpx2.AsyncClient(
        headers=all_headers, verify=verify, trust_env=False, timeout=httpx2.Timeout(BOUND)
    )


@asynccontextmanager
async def official_client(
    url: str,
    token: str | None,
    mode: str = "legacy",
    *,
    name: str = "agent",
    verify: ssl.SSLContext | bool = False,
) -> AsyncIterator[Client]:
    async with http_client(token, verify=verify) as hc:
        transport = streamable_http_client(url, http_client=hc)
        async with Client(
            transport, client_info=Implementation(name=name, version="1"), mode=mode
        ) as client:
            yield client


def initialize_body(name: str = "raw") -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": name, "version": "1"},
        },
    }


MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def tree_digest(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` except the server's own stderr: path -> bytes."""
    out: dict[str, bytes] = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            if p.name.endswith("-shm"):
                continue  # an index SQLite rebuilds from the WAL
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def one_line_refusal(result: Any) -> str:
    lines = [row for row in result.stderr.splitlines() if row.strip()]
    assert result.returncode == 1, result.stderr
    assert len(lines) == 1, result.stderr
    assert result.stdout == ""
    return str(lines[0])


def refused_in_process(
    site: HttpSite,
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> str:
    """``continuum-mcp`` start-up in this process (``main``): exit 1, one line on stderr,
    nothing on stdout, no store created. Used where a subprocess adds only its start time."""
    from continuum.mcp.server import main

    monkeypatch.chdir(site.cwd)
    for name in (
        "CONTINUUM_DB",
        "CONTINUUM_LOG_LEVEL",
        "CONTINUUM_MCP_MUTATING_CLIENTS",
        "CONTINUUM_MCP_ALLOW",
        "CONTINUUM_MCP_TOKEN",
        "CONTINUUM_MCP_CLIENT_TOKENS",
        "CONTINUUM_MCP_CONFIRM_TOKEN",
    ):
        monkeypatch.delenv(name, raising=False)
    assert main(["--db", str(site.db), *argv]) == 1
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1, err
    assert not site.db.exists()
    return err

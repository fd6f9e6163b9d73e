"""Fixtures for testing the real ``continuum-mcp`` server.

- ``server_command`` / ``server_env``: how to spawn ``continuum-mcp``
  (``[sys.executable, "-m", "continuum.mcp", "--db", path]``) with a clean environment
  (no ``CONTINUUM_*`` variable of the developer's shell leaks into a test).
- ``official_client``: the official SDK client (``mcp.Client``) over a stdio subprocess,
  in either protocol era (``mode="legacy"``: the initialize handshake; ``mode="auto"``:
  the 2026-07-28 per-request envelope), with the server's stderr kept in a file.
- ``RawServer`` / ``spawn_raw``: the same subprocess spoken to in raw JSON lines, for
  what the official client cannot send (an initialize ``_meta``, malformed lines).
- ``store_bytes``: a store's bytes, main file and ``-wal``, to prove "byte-identical".
- ``tree_state``: every file under a directory, to prove "nothing created or touched".

No sleeps: every exchange is bounded with ``anyio.fail_after(BOUND)``.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog
from anyio.abc import Process
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    PROTOCOL_VERSION_META_KEY,
    CallToolResult,
    Implementation,
)

from continuum import Origin
from continuum.runtime.facade import Continuum
from continuum.store import open_store

BOUND = 60  # seconds: a generous ceiling on one exchange or one process's life, never a sleep

TOOL_NAMES = (
    "continuum_validate",
    "continuum_resume",
    "continuum_list_actions",
    "continuum_record_progress",
    "continuum_checkpoint",
    "continuum_intercept_action",
    "continuum_complete_action",
    "continuum_fail_action",
    "continuum_reconcile_action",
    "continuum_confirm",
    "continuum_observe",  # issue 24: observations and plan branches
    "continuum_resolve_branch",
    "continuum_handoff",  # issue 25: a note for the next session
)
READ_ONLY_TOOLS = ("continuum_validate", "continuum_resume", "continuum_list_actions")
MUTATING_TOOLS = tuple(name for name in TOOL_NAMES if name not in READ_ONLY_TOOLS)
MODES = ("legacy", "auto")  # the two protocol eras of the official client
MODERN_VERSION = "2026-07-28"

# Only what a Python interpreter needs; everything continuum reads comes from the test.
_INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")


# --- environment and commands ------------------------------------------------------


def server_command(db: str | Path, *extra: str) -> list[str]:
    """``continuum-mcp --db DB`` as the spec's ``python -m continuum.mcp`` form."""
    return [sys.executable, "-m", "continuum.mcp", "--db", str(db), *extra]


def server_env(**variables: str) -> dict[str, str]:
    """A full child environment: the interpreter's basics plus exactly ``variables``."""
    env = {k: os.environ[k] for k in _INHERITED if k in os.environ}
    env.update(variables)
    return env


def run_server_to_exit(
    db: str | Path, *extra: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Start the server with stdin at EOF and wait: a refused start-up exits 1 at once,
    an accepted one serves nothing and exits 0."""
    return subprocess.run(
        server_command(db, *extra),
        input="",
        capture_output=True,
        text=True,
        cwd=cwd,
        env=server_env(**(env or {})),
        timeout=BOUND,
        check=False,
    )


def stderr_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# --- byte snapshots ----------------------------------------------------------------


@dataclass(frozen=True)
class StoreBytes:
    """The store's durable bytes. An absent ``-wal`` and an empty one hold the same
    state (SQLite creates it at open and deletes it at the last close), so both are
    ``b""``; ``-shm`` is an index rebuilt from the WAL and is left out."""

    exists: bool
    db: bytes
    wal: bytes


def store_bytes(path: str | Path) -> StoreBytes:
    path = Path(path)
    wal = Path(f"{path}-wal")
    return StoreBytes(
        exists=path.exists(),
        db=path.read_bytes() if path.exists() else b"",
        wal=wal.read_bytes() if wal.exists() else b"",
    )


def sidecars(path: str | Path) -> list[Path]:
    return [
        p for p in (Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")) if p.exists()
    ]


def tree_state(root: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every entry under ``root`` (not following links): kind plus content or link target."""
    out: dict[str, tuple[str, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            mode = os.lstat(p).st_mode
            if stat.S_ISLNK(mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(mode):
                out[rel] = ("file", p.read_bytes())
            elif stat.S_ISDIR(mode):
                out[rel] = ("dir", b"")
            else:
                out[rel] = ("special", oct(mode))
    return out


# --- seeding a store through the library (origin deterministic) --------------------


def seed_store(db: Path, run_id: str = "r1", *, action_key: str | None = "seed-1") -> str | None:
    """A store holding one run (goal, progress) and, optionally, one started action.

    Written with the library, then closed, so its ``-wal`` is checkpointed away and
    the bytes on disk are the whole state. Returns the action's key.
    """
    rt = Continuum(open_store(str(db)), origin=Origin.DETERMINISTIC)
    try:
        rt.record_progress(run_id, goal="seeded goal", total=3, completed=1)
        key = None
        if action_key is not None:
            key = rt.intercept(run_id, "send", {"n": 1}, key=action_key).action_key
        rt.checkpoint(run_id, reason="seed", env={"dataset": "v1"})
        return key
    finally:
        rt.close()


def read_events(db: Path, run_id: str) -> list[Any]:
    store = open_store(str(db), create=False)
    try:
        return store.read_events(run_id)
    finally:
        store.close()


# --- results -----------------------------------------------------------------------


def result_text(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def structured(result: CallToolResult) -> dict[str, Any]:
    """An ok result's structured content, checked to be the same JSON as its text."""
    assert result.is_error is False, result_text(result)
    assert result.structured_content is not None
    assert json.loads(result_text(result)) == result.structured_content
    return result.structured_content


# --- the official client over a real subprocess ------------------------------------


@dataclass
class ServerSite:
    """Where a test's servers run: store path, working directory (the policy file is
    read from it), environment variables and the file collecting their stderr."""

    db: Path
    cwd: Path
    env: dict[str, str] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()

    @property
    def stderr_path(self) -> Path:
        return self.cwd / "server-stderr.log"

    def stderr(self) -> str:
        return self.stderr_path.read_text() if self.stderr_path.exists() else ""

    def params(self) -> StdioServerParameters:
        # ``env`` is merged over the SDK's safe defaults (PATH, HOME, ...), nothing else leaks.
        cmd = server_command(self.db, *self.extra_args)
        return StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(self.env), cwd=self.cwd)

    @asynccontextmanager
    async def client(
        self, name: str | None = "agent", mode: str = "legacy"
    ) -> AsyncIterator[Client]:
        """``mcp.Client`` over ``stdio_client`` (what ``Client(params)`` uses), with the
        server's stderr appended to ``stderr_path`` instead of the test's own stderr."""
        info = Implementation(name=name, version="1") if name is not None else None
        with self.stderr_path.open("a") as errlog:
            transport = stdio_client(self.params(), errlog=errlog)
            async with Client(transport, client_info=info, mode=mode) as client:
                yield client

    @asynccontextmanager
    async def raw(self, *, initialize: dict[str, Any] | None = None) -> AsyncIterator[RawServer]:
        async with spawn_raw(self, initialize=initialize) as server:
            yield server


@pytest.fixture
def site(tmp_path: Path) -> ServerSite:
    work = tmp_path / "work"
    work.mkdir()
    return ServerSite(db=work / "store.db", cwd=work)


# --- raw JSON lines ----------------------------------------------------------------


def line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def initialize_request(
    name: str | None = "raw-agent",
    meta: dict[str, Any] | None = None,
    request_id: int | str = "init",
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": name if name is not None else "", "version": "1"},
    }
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params}


def envelope(name: str | None, **extra: Any) -> dict[str, Any]:
    """A 2026-07-28 request ``_meta``: the era, the client's capabilities and (optionally) name."""
    meta: dict[str, Any] = {
        PROTOCOL_VERSION_META_KEY: MODERN_VERSION,
        CLIENT_CAPABILITIES_META_KEY: {},
    }
    if name is not None:
        meta[CLIENT_INFO_META_KEY] = {"name": name, "version": "1"}
    meta.update(extra)
    return meta


def tool_call(
    request_id: int | str, tool: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None
) -> dict[str, Any]:
    params: dict[str, Any] = {"name": tool, "arguments": arguments}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


class RawServer:
    """``continuum-mcp`` as a subprocess, spoken to in raw bytes."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self.lines: list[bytes] = []  # every stdout line, for the stdout-purity check
        self._pending = b""

    async def send(self, data: bytes | dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(line(data) if isinstance(data, dict) else data)

    async def receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        while b"\n" not in self._pending:
            self._pending += await self.process.stdout.receive()
        raw, self._pending = self._pending.split(b"\n", 1)
        self.lines.append(raw)
        message: dict[str, Any] = json.loads(raw)
        return message

    async def receive_id(self, request_id: int | str | None) -> dict[str, Any]:
        while (message := await self.receive()).get("id") != request_id:
            pass
        return message

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        await self.send(message)
        return await self.receive_id(message["id"])

    async def ping(self, request_id: int | str) -> None:
        answer = await self.request({"jsonrpc": "2.0", "id": request_id, "method": "ping"})
        assert answer.get("result") == {}, answer

    def alive(self) -> bool:
        return self.process.returncode is None

    def peak_rss_kib(self) -> int:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return next(int(row.split()[1]) for row in status.splitlines() if row.startswith("VmHWM:"))


@asynccontextmanager
async def spawn_raw(
    site: ServerSite, *, initialize: dict[str, Any] | None = None
) -> AsyncIterator[RawServer]:
    """Spawn the server; with ``initialize`` perform that handshake first. On exit, close
    stdin, collect the rest of stdout into ``lines`` and require a clean exit (0)."""
    with site.stderr_path.open("ab") as errlog, anyio.fail_after(BOUND):
        async with await anyio.open_process(
            server_command(site.db, *site.extra_args),
            stderr=errlog,
            cwd=site.cwd,
            env=server_env(**site.env),
        ) as process:
            server = RawServer(process)
            if initialize is not None:
                answer = await server.request(initialize)
                assert "result" in answer, answer
                await server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            yield server
            assert process.stdin is not None and process.stdout is not None
            await process.stdin.aclose()
            async for rest in process.stdout:
                server._pending += rest
            server.lines.extend(server._pending.splitlines())
            assert await process.wait() == 0


def assert_stdout_is_only_json_rpc(lines: list[bytes]) -> None:
    for raw in lines:
        message = json.loads(raw)
        assert message.get("jsonrpc") == "2.0", raw[:200]
        assert ("result" in message) != ("error" in message), raw[:200]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def structlog_defaults() -> Iterator[None]:
    """Other suites configure structlog onto their own captured streams: start from defaults."""
    saved = structlog.get_config()
    structlog.reset_defaults()
    yield
    structlog.configure(**saved)

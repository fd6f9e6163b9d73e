"""A stdio ``continuum-mcp`` answers ``initialize`` before it loads what only tools need
(issue 27's start-up target; ``continuum/mcp/startup.py``): the store, the tools and their
models, the facade, the approval rules, the deliverer, and the logger that writes the
connecting client's line (written just after the answer). Only ``--transport
streamable-http`` imports the HTTP transport and the operator page at all.

Each check reads ``python -X importtime``'s lines (one per finished import, on stderr);
each has a control showing that the same reading sees the modules once they are loaded.
The tools registered after ``initialize`` are listed exactly as a server that registers
them at once lists them (names, descriptions, input and output schemas, annotations)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

HTTP_ONLY = {"continuum.mcp.http", "continuum.ui", "continuum.ui.routes"}
AFTER_INITIALIZE = {
    "continuum.store",  # the store check, and every store module under it
    "continuum.mcp.tools",  # the thirteen tools and their argument and result models
    "continuum.mcp.owners",
    "continuum.mcp.roles",
    "continuum.runtime.facade",
    "continuum.ledger.gate",
    "continuum.ledger.approval_rules",  # the approvals.toml check
    "continuum.ledger.deliverer",
    "continuum.runtime.verdicts",
    "continuum.eventlog.events",  # pydantic models built at import
    "continuum.state.records",
    "continuum.runtime.results",
    "structlog",  # the line saying this client (off the allowlist) may not write
}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "lean-check", "version": "1"},
    },
}
BOUND = 60  # seconds: a ceiling on one answer, never a sleep


def imported_modules(importtime_stderr: str) -> set[str]:
    """Module names printed by ``python -X importtime`` (one line per import)."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in importtime_stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def start(*args: str) -> set[str]:
    p = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "continuum.mcp", *args],
        input=json.dumps(INIT) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    return imported_modules(p.stderr) | ({"answered"} if '"serverInfo"' in p.stdout else set())


def test_a_stdio_start_imports_no_http_module(tmp_path: Path) -> None:
    loaded = start("--db", str(tmp_path / "agent.db"))
    assert "answered" in loaded and "continuum.mcp.server" in loaded  # the parse works
    assert loaded & HTTP_ONLY == set()


def test_an_http_start_does_import_them(tmp_path: Path) -> None:
    # The control: the same parse sees the HTTP modules when the transport needs them
    # (the start is refused at once for want of a token file, after the imports).
    loaded = start(
        "--db",
        str(tmp_path / "agent.db"),
        "--transport",
        "streamable-http",
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        str(tmp_path / "missing"),
    )
    assert {"continuum.mcp.http", "continuum.ui"} <= loaded


class ImportWatch:
    """``continuum-mcp`` under ``-X importtime``, spoken to in JSON lines: ``answer`` sends a
    request and returns its answer with the modules whose import finished before it (their
    lines are on stderr before the answer is on stdout: one process, written in order)."""

    def __init__(self, db: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "continuum.mcp", "--db", str(db)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=db.parent,
            env={k: v for k, v in os.environ.items() if not k.startswith("CONTINUUM_")},
        )
        assert self.proc.stderr is not None
        os.set_blocking(self.proc.stderr.fileno(), False)

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def answer(self, message: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
        self.send(message)
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], BOUND)
        assert ready, f"no answer to {message['method']} within {BOUND} s"
        answer: dict[str, Any] = json.loads(self.proc.stdout.readline())
        assert answer.get("id") == message["id"], answer
        return answer, imported_modules(self.written_so_far(self.proc.stderr))

    @staticmethod
    def written_so_far(stream: IO[bytes] | None) -> str:
        assert stream is not None
        text = b""
        while True:
            try:
                chunk = os.read(stream.fileno(), 1 << 16)
            except BlockingIOError:
                return text.decode()
            if not chunk:
                return text.decode()
            text += chunk

    def close(self) -> int:
        assert self.proc.stdin is not None and self.proc.stdout and self.proc.stderr
        self.proc.stdin.close()
        code = self.proc.wait(timeout=BOUND)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return code


def test_initialize_is_answered_before_the_store_the_tools_and_the_rules_are_loaded(
    tmp_path: Path,
) -> None:
    watch = ImportWatch(tmp_path / "agent.db")
    try:
        answer, before = watch.answer(INIT)
        assert answer["result"]["serverInfo"]["name"] == "continuum"
        assert "continuum.mcp.server" in before and "continuum.serving.auth" in before
        assert before & AFTER_INITIALIZE == set()
        # The control: the same reading sees them once the client is initialized and
        # lists the tools (the server prepares them after initialized, startup.py).
        watch.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        listed, after = watch.answer({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert len(listed["result"]["tools"]) == 13
        assert after >= AFTER_INITIALIZE
    finally:
        assert watch.close() == 0


EAGER_LISTING = """
import json, sys
import anyio
from mcp_types import ListToolsResult
from continuum.mcp.server import build_server
from continuum.mcp.tools import Tools
from continuum.serving.auth import Policy

async def listing():
    server = build_server(Tools(sys.argv[1], Policy()))
    result = ListToolsResult(tools=await server.list_tools())
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)["tools"]

print(json.dumps(anyio.run(listing)))
"""


def eagerly_listed(db: Path) -> list[dict[str, Any]]:
    """``tools/list`` of a server whose tools are registered as it is built (``build_server``,
    as over HTTP), shaped as the SDK writes a result (``runner._dump_result``).

    Built in a fresh interpreter, as a server is: in this test process, ``typing`` caches
    unions by equality, and ``Literal["high", "low"]`` equals ``Literal["low", "high"]``,
    so another test's annotation could reorder an ``enum`` in the schema built here (a
    CI run saw exactly that)."""
    done = subprocess.run(
        [sys.executable, "-c", EAGER_LISTING, str(db)],
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    tools: list[dict[str, Any]] = json.loads(done.stdout)
    return tools


def test_the_tools_listed_after_a_lean_start_are_the_ones_a_server_built_at_once_lists(
    tmp_path: Path,
) -> None:
    watch = ImportWatch(tmp_path / "agent.db")
    try:
        watch.answer(INIT)
        watch.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        listed, _ = watch.answer({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    finally:
        assert watch.close() == 0
    wire = listed["result"]["tools"]
    assert len(wire) == 13
    # The same JSON text (the transport writes keys sorted): what a client hashes or pins
    # is unchanged.
    eager = eagerly_listed(tmp_path / "agent.db")
    assert json.dumps(wire, sort_keys=True) == json.dumps(eager, sort_keys=True)

"""A stdio ``continuum-mcp`` does not load the HTTP transport or the operator page
(contract §13's start-up target): only ``--transport streamable-http`` imports them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HTTP_ONLY = {"continuum.mcp.http", "continuum.ui", "continuum.ui.routes"}
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

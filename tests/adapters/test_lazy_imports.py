"""The adapters are optional extras: ``import continuum`` and a real ``continuum-mcp``
start-up load none of the frameworks, even with every extra installed (contract §13's
start-up target is measured that way)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.adapters.conftest import require

FRAMEWORK_ROOTS = {
    "langgraph",
    "langchain",
    "langchain_core",
    "langsmith",
    "agents",
    "openai",
    "pydantic_ai",
    "pydantic_graph",
}


def imported_roots(importtime_stderr: str) -> set[str]:
    """Top-level packages named by ``python -X importtime`` (one line per import)."""
    roots = set()
    for line in importtime_stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            roots.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return roots


def test_a_real_mcp_server_start_up_imports_no_framework(tmp_path: Path) -> None:
    for framework in ("langgraph", "langchain", "openai-agents", "pydantic-ai"):
        require(framework)  # the claim is about a machine with every extra installed
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "lazy-check", "version": "1"},
        },
    }
    p = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "continuum.mcp",
            "--db",
            str(tmp_path / "agent.db"),
        ],
        input=json.dumps(init) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    answer = json.loads(p.stdout.splitlines()[0])
    assert answer["id"] == 1 and "serverInfo" in answer["result"], p.stdout + p.stderr
    roots = imported_roots(p.stderr)
    assert "continuum" in roots and "mcp" in roots  # the negative control: the parse works
    assert roots & FRAMEWORK_ROOTS == set()


def test_import_continuum_and_its_facade_import_no_framework() -> None:
    code = (
        "import sys, continuum; continuum.Continuum; continuum.EffectUncertain; "
        "import continuum.adapters, continuum.ledger.effect, continuum.bench.frameworks; "
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert set(p.stdout.split()) & FRAMEWORK_ROOTS == set()


def test_importing_an_adapter_does_import_its_framework() -> None:
    # The check above can fail: importing an adapter module loads its framework.
    require("pydantic-ai")
    code = "import sys, continuum.adapters.pydantic_ai; print('pydantic_ai' in sys.modules)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "True", p.stderr

"""The hot path loads only what it needs (issue 27): a hook process that gates an effect,
and the facade a program opens, import neither structlog (with asyncio) nor the outbox's
HTTP client until a line is logged or a notification delivered. Control: logging a line
at the level in force does load structlog, so the check can see it.

``continuum-mcp``'s server module imports none of what it prepares after answering
``initialize`` (the store, the tools and their models, the facade, the approval rules, the
deliverer: ``mcp/startup.py``). Control: importing the tools module loads them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEAVY = ("structlog", "asyncio", "http.client", "continuum.ledger.outbox")
AFTER_INITIALIZE = (
    "continuum.store",
    "continuum.store.sqlite",
    "continuum.mcp.tools",
    "continuum.mcp.owners",
    "continuum.mcp.roles",
    "continuum.runtime.facade",
    "continuum.runtime.results",
    "continuum.runtime.verdicts",
    "continuum.ledger.gate",
    "continuum.ledger.approvals",
    "continuum.ledger.approval_rules",
    "continuum.ledger.deliverer",
    "continuum.ledger.outbox",
    "continuum.eventlog.events",
    "continuum.state.records",
    "continuum.state.projection",
)


def loaded(
    code: str, env: dict[str, str] | None = None, modules: tuple[str, ...] = HEAVY
) -> list[str]:
    probe = (
        f"{code}\nimport sys, json\nprint(json.dumps([m for m in {modules!r} if m in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    )
    return list(json.loads(done.stdout.splitlines()[-1]))


def test_the_gate_and_the_facade_do_not_load_logging_or_http() -> None:
    assert loaded("import continuum.hooks.gate") == []
    work = (
        "import tempfile, os\n"
        "from continuum import Continuum\n"
        "d = tempfile.mkdtemp()\n"
        "cx = Continuum.open(os.path.join(d, 's.db'))\n"
        "cx.start_run('r')\n"
        "r = cx.intercept('r', 'send', {'n': 1}, key='k')\n"
        "cx.complete('r', r.action_key)\n"
        "from continuum.log import get_logger\n"
        "get_logger('t').info('below the default level: dropped')\n"
    )
    assert loaded(work) == []


def test_control_a_line_written_loads_structlog() -> None:
    code = "from continuum.log import get_logger\nget_logger('t').warning('written')"
    assert "structlog" in loaded(code)
    info = "from continuum.log import get_logger\nget_logger('t').info('written at info')"
    assert "structlog" in loaded(info, {"CONTINUUM_LOG_LEVEL": "info"})


def test_continuum_mcp_starts_without_the_outbox() -> None:
    """The deliverer loads the outbox (its HTTP client, its settings parser) in its own
    thread, once a webhook is configured: not on continuum-mcp's way to initialized."""
    assert "continuum.ledger.outbox" not in loaded("import continuum.mcp.server")


REGISTRY = """
[[effect]]
tool = "Bash"
match = { command = '^\\./send ' }
action_type = "send_invoice"
key = "{command}"
"""


def _hook_loads(tmp_path: Path, kind: str, call: str, **extra: object) -> list[str]:
    """The heavy modules a hook process loaded for one call (and its exit code first)."""
    project, db = tmp_path / "proj", tmp_path / "store.db"
    event = {
        "session_id": "s",
        "cwd": str(project),
        "tool_name": "Bash",
        "tool_input": {"command": f"./send {call}"},
        "tool_use_id": call,
        **extra,
    }
    probe = (
        "import io, json, sys\n"
        f"sys.stdin = io.TextIOWrapper(io.BytesIO({json.dumps(event).encode()!r}))\n"
        "from continuum.hooks.entry import process_main as main\n"
        f"code = main([{kind!r}, '--host', 'claude-code', '--db', {str(db)!r}, '--run', 'r',"
        f" '--project', {str(project)!r}])\n"
        f"print(json.dumps([code] + [m for m in {MODELS + STDLIB!r} if m in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    out: list[str] = json.loads(done.stdout.splitlines()[-1])
    return out


MODELS = ("pydantic", "continuum.runtime.facade", "continuum.state.records", "structlog")
# Standard library a gated call does without: pathlib with urllib.parse and ipaddress (~25 M
# instructions) and OpenSSL's hashlib (~11 M), against a bare start's 40 M.
STDLIB = ("pathlib", "urllib.parse", "ipaddress", "_hashlib")


def test_a_registered_effect_through_the_hooks_loads_no_models(tmp_path: Path) -> None:
    """Issue 27: the hooks' effect path (intercept in pre-tool, complete in post-tool)
    imports neither pydantic nor the runtime, nor pathlib, urllib.parse or OpenSSL's
    hashlib. Control: a refused repeat does (its words come from the full path), so the
    check can see them."""
    project = tmp_path / "proj"
    (project / ".continuum").mkdir(parents=True)
    (project / ".continuum" / "effects.toml").write_text(REGISTRY, encoding="utf-8")
    accept = ["hooks", "accept", "--dir", str(project), "--run", "r", "--yes"]
    subprocess.run(
        [sys.executable, "-m", "continuum", "--db", str(tmp_path / "store.db"), *accept],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert _hook_loads(tmp_path, "pre-tool", "INV-1") == [0]
    done = {"tool_response": {"stdout": "", "stderr": "", "interrupted": False}}
    assert _hook_loads(tmp_path, "post-tool", "INV-1", **done) == [0]
    refused = _hook_loads(tmp_path, "pre-tool", "INV-1")
    assert refused[0] == 2 and "pydantic" in refused
    assert "pathlib" in refused and "urllib.parse" in refused


def test_the_mcp_server_module_imports_nothing_it_prepares_after_initialize() -> None:
    assert loaded("import continuum.mcp.server", modules=AFTER_INITIALIZE) == []


def test_control_what_the_server_prepares_loads_them() -> None:
    # What startup.py's preparation imports (server.serve_stdio's prepare): all of them
    # but the outbox, which the deliverer loads in its own thread once a webhook is set.
    prepare = (
        "import continuum.mcp.server, continuum.mcp.tools, continuum.ledger.deliverer\n"
        "import continuum.runtime.verdicts, continuum.ledger.approval_rules"
    )
    expected = [m for m in AFTER_INITIALIZE if m != "continuum.ledger.outbox"]
    assert loaded(prepare, modules=AFTER_INITIALIZE) == expected

"""`continuum gateway install`: the host's entry, rewritten, really runs the gateway.

The test plays the host: it starts the entry's command, args and env exactly as written in
``.mcp.json`` (what Claude Code does) with the SDK's stdio client, and calls a tool twice.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

pytestmark = pytest.mark.anyio

BOUND = 60
UPSTREAM = str(Path(__file__).with_name("mcp_upstream.py"))
RULES = '[[effect]]\ntool = "send_invoice"\naction_type = "send_invoice"\nkey = "{invoice_id}"\n'


def _continuum(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    env["CONTINUUM_DB"] = str(project / "continuum.db")
    return subprocess.run(
        [sys.executable, "-m", "continuum", "--json", "gateway", "install", *args],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )


async def _call_twice(
    project: Path, entry: dict[str, Any], client: str = "claude-code"
) -> list[types.CallToolResult]:
    """Start the entry as the host would and call its effect twice, as ``client``."""
    params = StdioServerParameters(
        command=entry["command"], args=entry["args"], env=entry["env"], cwd=str(project)
    )
    with (project / "stderr.log").open("a", encoding="utf-8") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(
                read, write, client_info=types.Implementation(name=client, version="1")
            ) as session,
        ):
            with anyio.fail_after(BOUND):
                await session.initialize()
                return [
                    await session.call_tool("send_invoice", {"invoice_id": "I-1", "amount": 1})
                    for _ in range(2)
                ]


async def test_the_installed_entry_runs_the_gateway_and_restore_puts_the_original_back(
    tmp_path: Path,
) -> None:
    (tmp_path / ".continuum").mkdir()
    (tmp_path / ".continuum" / "gateway.toml").write_text(RULES, encoding="utf-8")
    original: dict[str, Any] = {
        "type": "stdio",
        "command": sys.executable,
        "args": [UPSTREAM],
        "env": {
            "UPSTREAM_EFFECTS": str(tmp_path / "effects.txt"),
            "PATH": os.environ["PATH"],
        },
    }
    config = {"mcpServers": {"billing": original, "docs": {"type": "http", "url": "https://x"}}}
    (tmp_path / ".mcp.json").write_text(json.dumps(config), encoding="utf-8")

    installed = _continuum(tmp_path, "--client", "claude-code", "--server", "billing")
    assert installed.returncode == 0, installed
    servers = json.loads((tmp_path / ".mcp.json").read_text(encoding="utf-8"))["mcpServers"]
    assert servers["docs"] == config["mcpServers"]["docs"]  # other servers untouched
    entry = servers["billing"]
    assert entry["args"][:2] == ["gateway", "mcp"] or entry["args"][2:4] == ["gateway", "mcp"]
    assert entry["args"][-2:] == [sys.executable, UPSTREAM]
    # the env kept, plus continuum-mcp's allowlist: the name Claude Code declares
    assert entry["env"] == {**original["env"], "CONTINUUM_MCP_MUTATING_CLIENTS": "claude-code"}
    again = _continuum(tmp_path, "--client", "claude-code", "--server", "billing")
    assert again.returncode == 0 and json.loads(again.stdout)["written"] is False

    stranger = await _call_twice(tmp_path, entry, client="another-agent")
    assert [(r.meta or {})["continuum/ledger"]["refused"] for r in stranger] == [
        "auth.not_allowed"
    ] * 2
    results = await _call_twice(tmp_path, entry)
    assert [r.is_error for r in results] == [False, False]
    assert (results[1].meta or {})["continuum/ledger"]["answered"] == "from_ledger"
    lines = (tmp_path / "effects.txt").read_text(encoding="utf-8").splitlines()
    assert lines == ["invoice I-1 1"]

    restored = _continuum(tmp_path, "--client", "claude-code", "--server", "billing", "--restore")
    assert restored.returncode == 0, restored
    servers = json.loads((tmp_path / ".mcp.json").read_text(encoding="utf-8"))["mcpServers"]
    assert servers == config["mcpServers"]


def test_a_remote_server_entry_is_refused(tmp_path: Path) -> None:
    config = {"mcpServers": {"docs": {"type": "http", "url": "https://x"}}}
    (tmp_path / ".mcp.json").write_text(json.dumps(config), encoding="utf-8")
    out = _continuum(tmp_path, "--client", "claude-code", "--server", "docs")
    assert out.returncode == 1
    assert json.loads(out.stdout)["error"]["code"] == "gateway.not_a_stdio_server"
    assert json.loads((tmp_path / ".mcp.json").read_text(encoding="utf-8")) == config


CODEX = """\
# the user's own settings, kept as written
model = "gpt-5"

[mcp_servers.docs]
command = "docs-server"

[mcp_servers.billing]
command = "{python}"
args = ["{upstream}"]
startup_timeout_sec = 20.0

[mcp_servers.billing.env]
UPSTREAM_EFFECTS = "{effects}"
PATH = "{path}"

[profiles.fast]
model = "gpt-5-mini"
"""


async def test_codex_toml_has_only_that_servers_table_rewritten_and_restored(
    tmp_path: Path,
) -> None:
    import tomllib

    (tmp_path / ".continuum").mkdir()
    (tmp_path / ".continuum" / "gateway.toml").write_text(RULES, encoding="utf-8")
    (tmp_path / ".codex").mkdir()
    config_path = tmp_path / ".codex" / "config.toml"
    before = CODEX.format(
        python=sys.executable,
        upstream=UPSTREAM,
        effects=tmp_path / "effects.txt",
        path=os.environ["PATH"],
    )
    config_path.write_text(before, encoding="utf-8")
    original = tomllib.loads(before)

    installed = _continuum(tmp_path, "--client", "codex", "--server", "billing")
    assert installed.returncode == 0, installed
    text = config_path.read_text(encoding="utf-8")
    after = tomllib.loads(text)
    assert text.startswith("# the user's own settings, kept as written\n")
    for kept in ("model", "profiles"):
        assert after[kept] == original[kept]
    assert after["mcp_servers"]["docs"] == original["mcp_servers"]["docs"]
    entry = after["mcp_servers"]["billing"]
    assert entry["args"][-2:] == [sys.executable, UPSTREAM] and "gateway" in entry["args"]
    assert entry["startup_timeout_sec"] == 20.0
    assert entry["env"] == {
        **original["mcp_servers"]["billing"]["env"],
        "CONTINUUM_MCP_MUTATING_CLIENTS": "codex-mcp-client",  # the name Codex sends
    }
    results = await _call_twice(tmp_path, entry, client="codex-mcp-client")
    assert [r.is_error for r in results] == [False, False]
    assert (results[1].meta or {})["continuum/ledger"]["answered"] == "from_ledger"
    assert (tmp_path / "effects.txt").read_text(encoding="utf-8").splitlines() == ["invoice I-1 1"]

    restored = _continuum(tmp_path, "--client", "codex", "--server", "billing", "--restore")
    assert restored.returncode == 0, restored
    assert tomllib.loads(config_path.read_text(encoding="utf-8")) == original


def test_a_codex_server_name_that_names_another_table_is_refused_untouched(
    tmp_path: Path,
) -> None:
    """``--server a.env`` would match server a's env table: the whole-file check refuses."""
    (tmp_path / ".codex").mkdir()
    path = tmp_path / ".codex" / "config.toml"
    text = (
        '[mcp_servers.a]\ncommand = "srv"\n\n[mcp_servers.a.env]\nTOKEN_FILE = "t"\n\n'
        '[mcp_servers."a.env"]\ncommand = "other"\n'
    )
    path.write_text(text, encoding="utf-8")
    out = _continuum(tmp_path, "--client", "codex", "--server", "a.env")
    assert out.returncode == 1, out
    assert json.loads(out.stdout)["error"]["code"] == "usage.bad_config_file"
    assert path.read_text(encoding="utf-8") == text


def test_restart_upstream_is_written_into_the_gateway_command(tmp_path: Path) -> None:
    original = {"type": "stdio", "command": sys.executable, "args": [UPSTREAM], "env": {}}
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": {"billing": original}}))
    args = ["--client", "claude-code", "--server", "billing", "--restart-upstream", "--print"]
    printed = _continuum(tmp_path, *args)
    assert printed.returncode == 0, printed
    entry = json.loads(printed.stdout)["config"]["mcpServers"]["billing"]
    words = entry["args"]
    assert "--restart-upstream" in words
    assert words.index("--restart-upstream") < words.index("--")  # the gateway's, not the server's
    plain = _continuum(tmp_path, "--client", "claude-code", "--server", "billing", "--print")
    assert (
        "--restart-upstream"
        not in json.loads(plain.stdout)["config"]["mcpServers"]["billing"]["args"]
    )

"""`continuum mcp install --client claude-code|gemini|kilo [--print]`.

Writes (or prints) a host's MCP configuration for this server: the store path and the
allowlist set to that host's client name. An existing file is merged: other servers and
settings are kept; a file that is not valid JSON is refused, never overwritten.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import click

from continuum.cli.common import common
from continuum.cli.output import Settings, emit
from continuum.errors import UsageError
from continuum.store import resolve_url

# What each host calls itself in `initialize` (clientInfo.name) and where it reads its
# project configuration from.
CLIENTS: dict[str, dict[str, Any]] = {
    "claude-code": {"names": ["claude-code"], "path": ".mcp.json"},
    "gemini": {"names": ["gemini-cli-mcp-client"], "path": ".gemini/settings.json"},
    "kilo": {"names": ["kilo-code", "kilo"], "path": ".kilocode/mcp.json"},
}
SERVER_NAME = "continuum"


def server_command() -> list[str]:
    """The absolute command that starts continuum-mcp with this installation."""
    beside = Path(sys.executable).parent / "continuum-mcp"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("continuum-mcp")
    return [found] if found else [sys.executable, "-m", "continuum.mcp"]


def store_arg(url: str) -> str:
    if "://" in url:
        return url
    return str(Path(url).absolute())


def server_entry(client: str, db: str, names: list[str]) -> dict[str, Any]:
    command = server_command()
    args = [*command[1:], "--db", store_arg(db)]
    env = {"CONTINUUM_MCP_MUTATING_CLIENTS": ",".join(names)}
    if client == "claude-code":
        return {"type": "stdio", "command": command[0], "args": args, "env": env}
    if client == "gemini":
        return {"command": command[0], "args": args, "env": env, "timeout": 30000, "trust": False}
    return {"command": command[0], "args": args, "env": env, "disabled": False, "alwaysAllow": []}


def merged_config(path: Path, entry: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if path.exists():
        try:
            config = json.loads(path.read_text(encoding="utf-8") or "{}")
        except ValueError as e:
            raise UsageError(f"{path} is not valid JSON ({e}); it was left untouched",
                             code="usage.bad_config_file",
                             hint="fix or move the file, or use --print and merge by hand") from e
        if not isinstance(config, dict) or not isinstance(config.get("mcpServers", {}), dict):
            raise UsageError(f"{path} does not hold a JSON object with an mcpServers object",
                             code="usage.bad_config_file", hint="use --print and merge by hand")
    servers = dict(config.get("mcpServers", {}))
    servers[SERVER_NAME] = entry
    return {**config, "mcpServers": servers}


@click.group("mcp")
def mcp_group() -> None:
    """Set up hosts (Claude Code, Gemini CLI, Kilo Code) to use continuum-mcp."""


@mcp_group.command("install")
@click.option("--client", "client", type=click.Choice(sorted(CLIENTS)), required=True,
              help="The host to configure.")
@click.option("--print", "print_only", is_flag=True, help="Print the configuration, write nothing.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="The configuration file to merge into (default: the host's project file).")
@click.option("--client-name", "client_names", multiple=True,
              help="Allow this clientInfo name instead of the host's default (repeatable).")
@common
def install_cmd(s: Settings, client: str, print_only: bool, config_path: str | None,
                client_names: tuple[str, ...]) -> None:
    """Write (or print) CLIENT's MCP configuration for this server.

    The store is --db / CONTINUUM_DB / ./continuum.db made absolute; the allowlist
    (CONTINUUM_MCP_MUTATING_CLIENTS) is set to the host's client name, so that host may
    use the mutating tools. On stdio the name is self-declared: the configuration file
    is the security boundary, so keep it under your control.
    """
    spec = CLIENTS[client]
    names = list(client_names) or list(spec["names"])
    for n in names:
        if not n or any(c.isspace() or c == "," for c in n):
            raise UsageError(f"client name {n!r} cannot go in an allowlist",
                             code="usage.bad_client_name", hint="names have no spaces or commas")
    entry = server_entry(client, resolve_url(s.db), names)
    path = Path(config_path or spec["path"])
    config = merged_config(path, entry)
    text = json.dumps(config, indent=2) + "\n"
    if print_only:
        emit(s, {"client": client, "path": str(path), "config": config, "written": False},
             text.rstrip("\n"))
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".continuum-tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    emit(s, {"client": client, "path": str(path.absolute()), "config": config, "written": True},
         [f"wrote {path} (server '{SERVER_NAME}', allowlist: {', '.join(names)})",
          "restart the host, then ask it to call continuum_resume"])


COMMANDS = [mcp_group]

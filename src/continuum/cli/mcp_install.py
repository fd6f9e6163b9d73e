"""`continuum mcp install|uninstall --client claude-code|gemini|kilo` and `mcp doctor`.

`install` writes (or prints) a host's MCP configuration for this server: the store path
and the allowlist set to that host's client names, joined with commas (a name may hold
spaces: Kilo Code's client calls itself "Kilo Code"). An existing file is merged: other
servers and settings are kept; a file that is not valid JSON is refused, never overwritten.
`uninstall` removes our server entry alone, the same way. Gemini CLI allows // and /* */
comments in its settings.json: such a file is read, but writing it back drops the
comments, so that takes --force (and is said before the write).

`doctor` shows what a server started here, with this environment, would load and what
each client would be told. The CLI may not import the MCP edge (layers), so it asks the
server itself: it runs the same `continuum-mcp` command `install` writes, with
`--doctor`, which loads exactly what serving would and prints it as JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click

from continuum.cli.common import common
from continuum.cli.output import Settings, emit, write_lines
from continuum.errors import ContinuumError, UsageError
from continuum.hooks.install import write_config
from continuum.store import resolve_url
from continuum.untrusted import check_identifier, quoted

# What each host calls itself in `initialize` (clientInfo.name) and where it reads its
# project configuration from. Kilo Code's VS Code extension builds its MCP client as
# `new Client({name: "Kilo Code", ...})` (Kilo-Org/kilocode, src/services/mcp/McpHub.ts);
# "kilo-code" and "kilo" were written by earlier versions of this command and are kept
# so configurations made with them keep working. See references/mcp.md.
CLIENTS: dict[str, dict[str, Any]] = {
    "claude-code": {"names": ["claude-code"], "path": ".mcp.json"},
    # Gemini CLI named its MCP client "gemini-cli-mcp-client", newer releases "gemini-cli".
    "gemini": {"names": ["gemini-cli-mcp-client", "gemini-cli"], "path": ".gemini/settings.json"},
    "kilo": {"names": ["Kilo Code", "kilo-code", "kilo"], "path": ".kilocode/mcp.json"},
}
SERVER_NAME = "continuum"
ALLOW_ENV = "CONTINUUM_MCP_MUTATING_CLIENTS"
DOCTOR_SECONDS = 60  # a ceiling on the doctor subprocess, which only loads and prints


def allowlist_name(name: str) -> str:
    """``name`` if it can go in the allowlist variable; else a ``UsageError`` saying why.

    Spaces are fine ("Kilo Code"); a comma would split the name in two, and control,
    bidi or invisible characters are refused by the server at start-up.
    """
    hint = (
        "give the exact clientInfo.name the host sends; spaces are fine, commas and "
        "control, bidi or invisible characters are not"
    )
    check_identifier(name, what="client name", code="usage.bad_client_name", hint=hint)
    if "," in name:
        raise UsageError(
            f"client name {quoted(name, limit=80)} contains a comma, which "
            f"separates names in {ALLOW_ENV}",
            code="usage.bad_client_name",
            hint=hint,
        )
    return name


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
    env = {ALLOW_ENV: ",".join(names)}
    if client == "claude-code":
        return {"type": "stdio", "command": command[0], "args": args, "env": env}
    if client == "gemini":
        return {"command": command[0], "args": args, "env": env, "timeout": 30000, "trust": False}
    return {"command": command[0], "args": args, "env": env, "disabled": False, "alwaysAllow": []}


def strip_json_comments(text: str) -> tuple[str, bool]:
    """``text`` without its ``//`` and ``/* */`` comments, and whether it had any.

    Only outside strings (``"http://x"`` keeps its slashes); a comment becomes spaces
    (its newlines kept), so a parse error still points at the right line and column. An
    unterminated ``/*`` is left as it is, for the parser to refuse."""
    out: list[str] = []
    i, n, found, in_string = 0, len(text), False, False
    while i < n:
        c = text[i]
        if in_string:
            if c == "\\":
                out.append(text[i : i + 2])
                i += 2
                continue
            in_string = c != '"'
        elif c == '"':
            in_string = True
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i, found = end, True
            continue
        elif text.startswith("/*", i) and (close := text.find("*/", i + 2)) >= 0:
            out.append("".join(ch if ch == "\n" else " " for ch in text[i : close + 2]))
            i, found = close + 2, True
            continue
        out.append(c)
        i += 1
    return "".join(out), found


def read_config(path: Path, *, comments: bool = False) -> tuple[dict[str, Any], bool]:
    """The configuration in ``path`` ({} when absent) and whether it had comments (allowed
    only with ``comments``, as Gemini CLI allows them); a file we cannot merge into is
    refused and left untouched."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}, False
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) else "it is not UTF-8"
        raise UsageError(
            f"cannot read {path} ({reason}); it was left untouched",
            code="usage.bad_config_file",
            hint="fix or move the file, or use --print and merge by hand",
        ) from e
    found = False
    if comments:
        text, found = strip_json_comments(text)
    try:
        config = json.loads(text) if text.strip() else {}
    except ValueError as e:
        raise UsageError(
            f"{path} is not valid JSON ({e}); it was left untouched",
            code="usage.bad_config_file",
            hint="fix or move the file, or use --print and merge by hand",
        ) from e
    if not isinstance(config, dict) or not isinstance(config.get("mcpServers", {}), dict):
        raise UsageError(
            f"{path} does not hold a JSON object with an mcpServers object",
            code="usage.bad_config_file",
            hint="use --print and merge by hand",
        )
    return config, found


def with_server(config: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    servers = dict(config.get("mcpServers", {}))
    servers[SERVER_NAME] = entry
    return {**config, "mcpServers": servers}


def without_server(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` without our server; an ``mcpServers`` that only ours filled goes too."""
    if SERVER_NAME not in config.get("mcpServers", {}):
        return dict(config)
    servers = {k: v for k, v in config["mcpServers"].items() if k != SERVER_NAME}
    if servers:
        return {**config, "mcpServers": servers}
    return {k: v for k, v in config.items() if k != "mcpServers"}


def check_comments(s: Settings, path: Path, *, found: bool, print_only: bool, force: bool) -> None:
    """A file with comments is written only with --force, and the loss is said first."""
    if not found:
        return
    if not (print_only or force):
        raise UsageError(
            f"{path} has comments, which writing it would drop; it was left untouched",
            code="usage.config_has_comments",
            hint="pass --force to write it without its comments, or --print to "
            "see the result and merge by hand",
        )
    if not s.json:
        write_lines(
            s,
            [
                f"note: {path} has comments; "
                + (
                    "the configuration printed has none"
                    if print_only
                    else "they are dropped from the file written now"
                )
            ],
            err=True,
        )


@click.group("mcp")
def mcp_group() -> None:
    """Set up hosts (Claude Code, Gemini CLI, Kilo Code) to use continuum-mcp."""


@mcp_group.command("install")
@click.option(
    "--client",
    "client",
    type=click.Choice(sorted(CLIENTS)),
    required=True,
    help="The host to configure.",
)
@click.option("--print", "print_only", is_flag=True, help="Print the configuration, write nothing.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="The configuration file to merge into (default: the host's project file).",
)
@click.option(
    "--client-name",
    "client_names",
    multiple=True,
    help="Allow this clientInfo name instead of the host's defaults (repeatable; "
    'spaces are fine, e.g. "Kilo Code"; no commas).',
)
@click.option(
    "--force",
    is_flag=True,
    help="Write a file that has comments (Gemini CLI allows them): they are dropped.",
)
@common
def install_cmd(
    s: Settings,
    client: str,
    print_only: bool,
    config_path: str | None,
    client_names: tuple[str, ...],
    force: bool,
) -> None:
    """Write (or print) CLIENT's MCP configuration for this server.

    The store is --db / CONTINUUM_DB / ./continuum.db made absolute; the allowlist
    (CONTINUUM_MCP_MUTATING_CLIENTS) is set to the host's client name, so that host may
    use the mutating tools. On stdio the name is self-declared: the configuration file
    is the security boundary, so keep it under your control.
    """
    spec = CLIENTS[client]
    names = [allowlist_name(n) for n in client_names] or list(spec["names"])
    entry = server_entry(client, resolve_url(s.db), names)
    path = Path(config_path or spec["path"])
    before, commented = read_config(path, comments=client == "gemini")
    config = with_server(before, entry)
    check_comments(s, path, found=commented, print_only=print_only, force=force)
    if print_only:
        emit(
            s,
            {"client": client, "path": str(path), "config": config, "written": False},
            json.dumps(config, indent=2),
        )
        return
    write_config(path, config)
    emit(
        s,
        {"client": client, "path": str(path.absolute()), "config": config, "written": True},
        [
            f"wrote {path} (server '{SERVER_NAME}', allowlist: {', '.join(names)})",
            "restart the host, then ask it to call continuum_resume",
        ],
    )


@mcp_group.command("uninstall")
@click.option(
    "--client",
    "client",
    type=click.Choice(sorted(CLIENTS)),
    required=True,
    help="The host whose configuration loses the server.",
)
@click.option("--print", "print_only", is_flag=True, help="Print the configuration, write nothing.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="The configuration file (default: the host's project file).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Write a file that has comments (Gemini CLI allows them): they are dropped.",
)
@common
def uninstall_cmd(
    s: Settings, client: str, print_only: bool, config_path: str | None, force: bool
) -> None:
    """Remove the continuum server from CLIENT's MCP configuration; nothing else changes.

    Other servers and settings are kept (an mcpServers object only ours filled goes too);
    a missing file or one without our server is "nothing to remove" (exit 0); a file that
    is not valid JSON is refused and left untouched.
    """
    path = Path(config_path or CLIENTS[client]["path"])
    data: dict[str, Any] = {"client": client, "path": str(path), "removed": False, "written": False}
    if not path.exists():
        emit(s, {**data, "config": None}, [f"nothing to remove: {path} does not exist"])
        return
    before, commented = read_config(path, comments=client == "gemini")
    present = SERVER_NAME in before.get("mcpServers", {})
    config = without_server(before)
    data.update(config=config, removed=present)
    if print_only:
        check_comments(s, path, found=commented, print_only=True, force=force)
        emit(s, data, json.dumps(config, indent=2))
        return
    if not present:
        emit(s, data, [f"nothing to remove: no '{SERVER_NAME}' server in {path}"])
        return
    check_comments(s, path, found=commented, print_only=False, force=force)
    write_config(path, config)
    emit(
        s,
        {**data, "path": str(path.absolute()), "written": True},
        [
            f"removed the '{SERVER_NAME}' server from {path}; other servers and settings are "
            "unchanged",
            "restart the host for it to take effect",
        ],
    )


def run_doctor(db: str | None, names: list[str]) -> dict[str, Any]:
    """Run ``continuum-mcp --doctor`` here, with this environment; return its report.

    A report saying the server would not start becomes that server's error.
    """
    base = [*server_command(), "--doctor", *(["--db", db] if db is not None else [])]
    command = base + [arg for name in names for arg in ("--client-name", name)]
    try:
        done = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=dict(os.environ),
            timeout=DOCTOR_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UsageError(
            f"could not run {command[0]} --doctor ({type(e).__name__}: {e})",
            code="usage.mcp_doctor_failed",
            hint="check that continuum-mcp is installed beside continuum",
        ) from e
    try:
        report: dict[str, Any] = json.loads(done.stdout)
    except ValueError as e:
        first = (done.stderr.strip().splitlines() or ["no output"])[0]
        raise UsageError(
            f"{command[0]} --doctor gave no report (exit {done.returncode}): {first}",
            code="usage.mcp_doctor_failed",
            hint="this continuum-mcp may be an older version without --doctor",
        ) from e
    error = report.get("error")
    if isinstance(error, dict):
        raise ContinuumError(
            str(error.get("message")),
            code=str(error.get("code")),
            hint=str(error.get("hint") or ""),
        )
    return {"command": base, **report}


def _decision_lines(label: str, verdict: dict[str, Any]) -> list[str]:
    if verdict["allowed"]:
        return [f"  {label}: allowed"]
    return [
        f"  {label}: denied [{verdict['code']}]",
        *(f"    {line}" for line in str(verdict["text"]).splitlines()),
    ]


def doctor_lines(report: dict[str, Any]) -> list[str]:
    policy, store = report["policy"], report["store"]
    allow = ", ".join(quoted(n) for n in policy["allow"])
    auth = {
        "none": "none (no token is required)",
        "shared_token": "one shared token (CONTINUUM_MCP_TOKEN) required as _meta.authToken",
        "client_tokens": "per-client tokens (CONTINUUM_MCP_CLIENT_TOKENS) for "
        + ", ".join(quoted(n) for n in policy["token_clients"]),
    }
    lines = [
        f"continuum-mcp {report['server']['version']} started in {report['server']['cwd']} "
        "with this environment would load:",
        f"  store:      {store['url']}"
        + ("" if store["exists"] else " (does not exist yet: the first write creates it)"),
        f"  allowlist:  {allow} (from {policy['allow_source']})"
        if policy["allow"]
        else "  allowlist:  none"
        + (f" ({policy['allow_source']} is empty)" if policy["allow_source"] else ""),
        "  mode:       read-only: every mutating call is denied"
        if policy["read_only"]
        else "  mode:       mutating tools for the clients on the allowlist",
        f"  auth:       {auth.get(policy['auth'], policy['auth'])}",
        "  confirm over MCP: enabled (CONTINUUM_MCP_CONFIRM_TOKEN is set; only a person may "
        "present it)"
        if policy["confirm_over_mcp"]
        else "  confirm over MCP: disabled (CONTINUUM_MCP_CONFIRM_TOKEN is not set)",
    ]
    for client in report["clients"]:
        lines += [
            f"client {quoted(client['name'])} (sending no token, as hosts do):",
            *_decision_lines("a mutating tool", client["mutating"]),
            *_decision_lines("continuum_confirm", client["confirm"]),
        ]
    return lines


@mcp_group.command("doctor")
@click.option(
    "--client-name",
    "client_names",
    multiple=True,
    help="Say what this clientInfo name would be told (repeatable; default: the "
    "names of Claude Code, Gemini CLI and Kilo Code).",
)
@common
def doctor_cmd(s: Settings, client_names: tuple[str, ...]) -> None:
    """Show what continuum-mcp started here, with this environment, would load.

    The store, the allowlist and where it came from, the authentication mode (never a
    secret), whether confirming over MCP is enabled, read-only or not; then, for each
    client name, whether a mutating call and a continuum_confirm call would be allowed,
    or the denial it would get. Exit 0 when the server would start, 1 (with its error)
    when it would refuse.
    """
    names = list(client_names) or [spec["names"][0] for spec in CLIENTS.values()]
    report = run_doctor(s.db, names)
    emit(s, report, doctor_lines(report))


COMMANDS = [mcp_group]

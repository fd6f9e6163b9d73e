"""`continuum mcp install|uninstall --client claude-code|gemini|codex|kilo` and `mcp doctor`.

`install` writes (or prints) a host's MCP configuration for this server, in the file
and format that host's current version reads (``mcp_clients.py`` has the table): the
store path and the allowlist set to every client name that host sends, joined with
commas (a name may hold spaces: the Kilo Code extension calls itself "Kilo Code"). An
existing file is merged: other servers and settings are kept; a file that cannot be
parsed is refused, never overwritten. `uninstall` removes our server entry alone, the
same way. Gemini CLI and Kilo allow // and /* */ comments in their files: such a file is
read, but writing it back drops the comments, so that takes --force (and is said before
the write). Codex's TOML is edited as text: the rest of the file stays as it was.

`doctor` shows what a server started here, with this environment, would load and what
each client would be told. The CLI may not import the MCP edge (layers), so it asks the
server itself: it runs the same `continuum-mcp` command `install` writes, with
`--doctor`, which loads exactly what serving would and prints it as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import click

from continuum.cli.common import common
from continuum.cli.mcp_clients import (
    ALLOW_ENV,
    CLIENTS,
    SERVER_NAME,
    all_names,
    entry,
    present,
    read,
    render,
    with_server,
    without_server,
)
from continuum.cli.output import Settings, emit, write_lines
from continuum.errors import ContinuumError, UsageError
from continuum.hooks.install import installed_command, write_text
from continuum.store import resolve_url
from continuum.untrusted import check_identifier, quoted

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
    return installed_command("continuum-mcp", "continuum.mcp")


def store_arg(url: str) -> str:
    if "://" in url:
        return url
    return str(Path(url).absolute())


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
    """Set up hosts (Claude Code, Gemini CLI, Codex, Kilo Code) to use continuum-mcp."""


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
    help="Write a file that has comments (Gemini CLI and Kilo allow them): they are dropped.",
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

    The file is the one the host's current version reads in a project (Claude Code
    .mcp.json, Gemini CLI .gemini/settings.json, Codex .codex/config.toml, Kilo
    .kilo/kilo.jsonc). The store is --db / CONTINUUM_DB / ./continuum.db made absolute; the
    allowlist (CONTINUUM_MCP_MUTATING_CLIENTS) is set to every client name that host
    really sends, so it may use the mutating tools. On stdio the name is self-declared:
    the configuration file is the security boundary, so keep it under your control.
    """
    spec = CLIENTS[client]
    names = [allowlist_name(n) for n in client_names] or [n.name for n in spec.names]
    ours = entry(spec, server_command(), store_arg(resolve_url(s.db)), names)
    path = Path(config_path or spec.path)
    before, commented, text = read(spec, path)
    config = with_server(spec, before, ours)
    new_text = render(spec, config, text)
    check_comments(s, path, found=commented, print_only=print_only, force=force)
    data = {"client": client, "path": str(path), "config": config, "written": False}
    if print_only:
        emit(s, data, new_text.rstrip("\n"))
        return
    write_text(path, new_text)
    lines = [f"wrote {path} (server '{SERVER_NAME}', allowlist: {', '.join(names)})"]
    if spec.note:
        lines.append("note: " + spec.note.format(project=json.dumps(str(Path.cwd()))))
    lines.append("restart the host, then ask it to call continuum_resume")
    emit(s, {**data, "path": str(path.absolute()), "written": True}, lines)


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
    help="Write a file that has comments (Gemini CLI and Kilo allow them): they are dropped.",
)
@common
def uninstall_cmd(
    s: Settings, client: str, print_only: bool, config_path: str | None, force: bool
) -> None:
    """Remove the continuum server from CLIENT's MCP configuration; nothing else changes.

    Other servers and settings are kept (a servers object only ours filled goes too); a
    missing file or one without our server is "nothing to remove" (exit 0); a file that
    cannot be parsed is refused and left untouched.
    """
    spec = CLIENTS[client]
    path = Path(config_path or spec.path)
    data: dict[str, Any] = {"client": client, "path": str(path), "removed": False, "written": False}
    if not path.exists():
        emit(s, {**data, "config": None}, [f"nothing to remove: {path} does not exist"])
        return
    before, commented, text = read(spec, path)
    found = present(spec, before)
    config = without_server(spec, before)
    data.update(config=config, removed=found)
    if print_only:
        check_comments(s, path, found=commented, print_only=True, force=force)
        emit(s, data, render(spec, config, text).rstrip("\n"))
        return
    if not found:
        emit(s, data, [f"nothing to remove: no '{SERVER_NAME}' server in {path}"])
        return
    check_comments(s, path, found=commented, print_only=False, force=force)
    write_text(path, render(spec, config, text))
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
    help="Say what this clientInfo name would be told (repeatable; default: every "
    "name Claude Code, Gemini CLI, Codex and Kilo Code send).",
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
    names = list(client_names) or all_names()
    report = run_doctor(s.db, names)
    emit(s, report, doctor_lines(report))


COMMANDS = [mcp_group]

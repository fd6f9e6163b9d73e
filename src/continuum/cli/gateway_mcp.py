"""`continuum gateway mcp` and `continuum gateway accept`: the ledger in front of another
MCP server (``continuum.gateway.mcp_gateway``) and a person's acceptance of a changed
tool definition (``continuum.gateway.pins``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from continuum.cli.common import common, common_without_db, person_via, require_person
from continuum.cli.output import AGENT_TEXT_NOTICE, Settings, ask, emit, write_lines
from continuum.errors import ContinuumError, UsageError
from continuum.gateway.pins import PINS_PATH, Pins, locked_pins
from continuum.gateway.rules import RULES_PATH, load_rules
from continuum.hooks.install import continuum_command
from continuum.untrusted import quoted


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first: BaseException = group.exceptions[0] if group.exceptions else group
    return _first_error(first) if isinstance(first, BaseExceptionGroup) else first


@click.command(
    "mcp",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option(
    "--rules",
    "rules_path",
    metavar="FILE",
    default=None,
    help=f"The rules: which tool calls are effects to record (default: {RULES_PATH}; "
    "absent: every call passes through).",
)
@click.option(
    "--db",
    "db",
    metavar="URL",
    default=None,
    help="Store (default: $CONTINUUM_DB, else ./continuum.db).",
)
@click.option(
    "--run",
    "run",
    metavar="RUN",
    default=None,
    help="The run the gateway records into (default: the rules file's `run`, else gateway-NAME).",
)
@click.option(
    "--name",
    "name",
    metavar="NAME",
    default=None,
    help="The upstream's name, its section of the pins file (default: from its command: "
    "`python server.py` is server).",
)
@click.option(
    "--pins",
    "pins_path",
    metavar="FILE",
    default=None,
    help=f"The tool-definition pins (default: {PINS_PATH}).",
)
@click.option(
    "--timeout",
    "timeout",
    type=click.FloatRange(min=0.1),
    metavar="SECONDS",
    default=120.0,
    show_default=True,
    help="Seconds a forwarded call may take; a registered call with no answer by then is unknown.",
)
@click.option(
    "--url",
    "url",
    metavar="URL",
    default=None,
    help="An upstream served over streamable HTTP (https://, or http:// on loopback), "
    "instead of a command after `--`.",
)
@click.option(
    "--header",
    "headers",
    metavar="'NAME: VALUE'",
    multiple=True,
    help="A header sent to the --url upstream (repeatable); a VALUE of $VAR (or "
    "'Bearer $VAR') is read from the environment.",
)
@click.option(
    "--restart-upstream",
    "restart_upstream",
    is_flag=True,
    help="Start the upstream command again on the next call after it exits (its state is "
    "lost: off by default, so the host sees it fail); an --url upstream is always reached again.",
)
@click.argument(
    "upstream", nargs=-1, required=False, type=click.UNPROCESSED, metavar="-- COMMAND [ARGS]..."
)
@click.pass_context
def mcp_cmd(
    ctx: click.Context,
    rules_path: str | None,
    db: str | None,
    run: str | None,
    name: str | None,
    pins_path: str | None,
    timeout: float,
    url: str | None,
    headers: tuple[str, ...],
    restart_upstream: bool,
    upstream: tuple[str, ...],
) -> None:
    """Serve MCP on stdio in front of the MCP server started by UPSTREAM (after `--`),
    or the one served at --url.

    Every tools/call a rule names as an effect is intercepted in the ledger before it is
    forwarded and settled by the upstream's answer (a result: completed; isError: a
    certain failure; no answer, a dead upstream or a timeout: unknown). A repeat of a
    completed call is answered from the ledger without calling the upstream; an unknown
    one is refused until a person reconciles it. Other calls pass through untouched.
    Each tool's definition is pinned on first sight; a changed one is refused until
    `continuum gateway accept`. A malformed rules file refuses to start, naming the line.
    """
    import os

    import anyio

    from continuum.gateway.mcp_gateway import GatewayConfig
    from continuum.gateway.mcp_serve import serve
    from continuum.gateway.upstream import (
        check_upstream_url,
        parse_header,
        upstream_name,
        url_name,
    )
    from continuum.serving.auth import load_policy

    words = list(upstream[1:]) if upstream[:1] == ("--",) else list(upstream)
    if url is not None and words:
        raise UsageError(
            "both --url and an upstream command after `--`",
            code="usage.invalid",
            hint="the gateway fronts one upstream: give --url, or a command after `--`",
        )
    if url is None and not words:
        raise UsageError(
            "no upstream: neither a command after `--` nor --url",
            code="usage.invalid",
            hint="e.g. continuum gateway mcp -- npx -y @modelcontextprotocol/server-memory, "
            "or continuum gateway mcp --url https://billing.example.com/mcp",
        )
    if restart_upstream and url is not None:
        raise UsageError(
            "--restart-upstream is for an upstream command after `--`",
            code="usage.invalid",
            hint="an upstream at --url is reached again on the next call without it",
        )
    if headers and url is None:
        raise UsageError(
            "--header is for an upstream at --url",
            code="usage.invalid",
            hint="a command's server reads its settings from its environment or arguments",
        )
    if url is not None:
        check_upstream_url(url)
    sent = tuple(parse_header(h, os.environ) for h in headers)
    policy = load_policy(os.environ, Path.cwd())  # continuum-mcp's: a bad setting refuses
    rules = load_rules(rules_path)  # a malformed file raises gateway.bad_rules, naming the line
    server = name or (url_name(url) if url is not None else upstream_name(words))
    settings = ctx.find_object(Settings)
    config = GatewayConfig(
        upstream=tuple(words),
        rules=rules,
        run=run or rules.run or f"gateway-{server}",
        server=server,
        pins_path=Path(pins_path or PINS_PATH),
        db=db if db is not None else (settings.db if settings is not None else None),
        timeout=timeout,
        url=url,
        headers=sent,
        policy=policy,
        restart=restart_upstream,
    )
    try:
        with _delivering(config.db):
            anyio.run(serve, config)
    except BaseExceptionGroup as group:  # the SDK's task groups wrap what the gateway raised
        first = _first_error(group)
        if isinstance(first, ContinuumError):
            raise first from None
        raise


@click.command("accept")
@click.option(
    "--pins",
    "pins_path",
    metavar="FILE",
    default=None,
    help=f"The pins file (default: {PINS_PATH}).",
)
@click.option(
    "--server", "server", metavar="NAME", default=None, help="Only this upstream's tools."
)
@click.option("--tool", "tool", metavar="NAME", default=None, help="Only this tool.")
@click.option(
    "--yes",
    "-y",
    is_flag=True,
    help="Do not ask: for a person's own script. Without it, accept shows each change, asks "
    "on a terminal and refuses when stdin is not one.",
)
@common_without_db
def accept_cmd(
    s: Settings, pins_path: str | None, server: str | None, tool: str | None, yes: bool
) -> None:
    """As a person, accept the changed tool definitions the gateway refused.

    A gateway pins each upstream tool's definition (name, description, input schema) the
    first time it sees it; a later change is refused and recorded as pending in the pins
    file. This shows each pending change (old and new hash, the new description), asks,
    then makes the new definitions the pins: the gateway exposes them from its next
    tools/list.
    """
    pins = Pins.load(pins_path or PINS_PATH)
    changes = [c for c in pins.pending(server) if tool is None or c["tool"] == tool]
    if not changes:
        emit(
            s,
            {"accepted": [], "pins": str(pins.path)},
            f"nothing to accept: no changed tool definition is pending in {quoted(str(pins.path))}",
        )
        return
    command = (
        "continuum gateway accept"
        + (f" --server {server}" if server else "")
        + (f" --tool {tool}" if tool else "")
    )
    require_person(yes, "accepting a changed tool definition", command)
    if not yes:
        lines: list[Any] = [AGENT_TEXT_NOTICE]
        for c in changes:
            lines += [
                f"{c['server']} / {quoted(c['tool'])}:",
                f"  pinned sha256 {c['old_sha256']}",
                f"  new    sha256 {c['new_sha256']}",
                f"  new description: {quoted(c['description'], limit=2000)}",
            ]
        write_lines(s, lines, err=True)
        if not ask(s, "Accept these definitions as what the gateway exposes?"):
            raise UsageError(
                "not accepted; nothing was changed",
                code="usage.declined",
                hint="the changed tools stay refused; run `continuum gateway accept` again "
                "after checking them",
            )
    accepted = []
    # Read again under the lock (a gateway may have pinned or recorded something while
    # the person read): what is written keeps that, and what is accepted is what was shown.
    with locked_pins(pins.path) as current:
        now = {
            (c["server"], c["tool"]): (c["old_sha256"], c["new_sha256"])
            for c in current.pending(server)
        }
        moved = [
            c
            for c in changes
            if now.get((c["server"], c["tool"])) != (c["old_sha256"], c["new_sha256"])
        ]
        if moved:
            names = ", ".join(f"{c['server']} / {quoted(c['tool'])}" for c in moved)
            raise UsageError(
                f"the pending definition of {names} changed while it was shown (or was "
                "accepted by someone else); nothing was accepted",
                code="gateway.pins_changed",
                hint="run `continuum gateway accept` again and review what it shows now",
            )
        for c in changes:
            accepted += current.accept(c["server"], c["tool"], via=person_via(yes))
        current.save()
    emit(
        s,
        {"accepted": accepted, "pins": str(pins.path)},
        [
            f"accepted {quoted(a['tool'])} of {quoted(a['server'])}: {a['new_sha256']}"
            for a in accepted
        ]
        + ["the gateway exposes them from its next tools/list"],
    )


# -- gateway install ------------------------------------------------------------------------

ORIGINALS_PATH = Path(".continuum") / "gateway-originals.json"
_INSTALLABLE = ("claude-code", "gemini", "codex", "kilo")


def _upstream_of(client: str, name: str, original: Any) -> list[str]:
    """The command line of a host's stdio entry (refused for a remote one)."""
    if not isinstance(original, dict):
        raise UsageError(
            f"the server {quoted(name)} is not an object in the configuration",
            code="gateway.bad_server_entry",
            hint="fix the entry by hand, or use --print",
        )
    if client == "kilo":
        command = original.get("command")
        words = command if isinstance(command, list) else None
    else:
        command, args = original.get("command"), original.get("args", [])
        words = [command, *args] if isinstance(command, str) and isinstance(args, list) else None
    if not words or not all(isinstance(w, str) for w in words):
        raise UsageError(
            f"the server {quoted(name)} has no local command (a remote url or an "
            "unknown form); gateway install rewrites stdio entries only",
            code="gateway.not_a_stdio_server",
            hint="for a remote server, write the entry by hand as a command: continuum "
            "gateway mcp --url URL [--header 'NAME: VALUE'] (see references/mcp.md)",
        )
    return list(words)


def _wrapped(client: str, original: dict[str, Any], gateway_words: list[str]) -> dict[str, Any]:
    """The entry that runs the gateway in front of ``original``: its env, cwd, timeout,
    trust... kept (the upstream inherits the env), and continuum-mcp's allowlist set to
    the names the host sends (unless the entry sets one), so its registered calls are
    allowed from that host only."""
    from continuum.cli.mcp_clients import ALLOW_ENV, CLIENTS

    entry = dict(original)
    env_key = "environment" if client == "kilo" else "env"
    env = entry.get(env_key)
    env = dict(env) if isinstance(env, dict) else {}
    if not any(k in env for k in (ALLOW_ENV, "CONTINUUM_MCP_ALLOW")):
        env[ALLOW_ENV] = ",".join(n.name for n in CLIENTS[client].names)
    entry[env_key] = env
    if client == "kilo":
        entry["command"] = gateway_words
    else:
        entry["command"], entry["args"] = gateway_words[0], gateway_words[1:]
    return entry


@click.command("install")
@click.option(
    "--client",
    "client",
    type=click.Choice(_INSTALLABLE),
    required=True,
    help="The host whose configuration to change.",
)
@click.option(
    "--server", "server", metavar="NAME", required=True, help="The host's MCP server entry."
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="The configuration file (default: the host's project file).",
)
@click.option(
    "--rules",
    "rules_path",
    metavar="FILE",
    default=None,
    help=f"The gateway's rules (default: {RULES_PATH}, made absolute).",
)
@click.option("--run", "run", metavar="RUN", default=None, help="The run to record into.")
@click.option(
    "--restart-upstream",
    "restart_upstream",
    is_flag=True,
    help="The gateway starts the server again on the next call after it exits (see "
    "`gateway mcp --help`).",
)
@click.option(
    "--restore",
    is_flag=True,
    help=f"Put back the entry as it was before (kept in {ORIGINALS_PATH}).",
)
@click.option("--print", "print_only", is_flag=True, help="Print the configuration, write nothing.")
@click.option(
    "--force",
    is_flag=True,
    help="Write a file that has comments (Gemini CLI and Kilo allow them): they are dropped.",
)
@common
def install_cmd(
    s: Settings,
    client: str,
    server: str,
    config_path: str | None,
    rules_path: str | None,
    run: str | None,
    restart_upstream: bool,
    restore: bool,
    print_only: bool,
    force: bool,
) -> None:
    """Put the gateway in front of the MCP server NAME of CLIENT's configuration.

    The entry's command becomes `continuum gateway mcp --db STORE --name NAME --rules
    RULES --pins PINS [--run RUN] [--restart-upstream] -- ORIGINAL COMMAND...` (store,
    rules and pins absolute); its env,
    cwd and other settings are kept (the upstream inherits the gateway's environment).
    The original entry is kept in .continuum/gateway-originals.json, so `--restore` puts
    it back. Installing twice changes nothing. Codex's TOML: only that server's table is
    rewritten, the rest of the file is kept as it was.
    """
    import json

    from continuum.cli.mcp_clients import CLIENTS, read, render, servers_key
    from continuum.cli.mcp_install import check_comments, store_arg
    from continuum.hooks.install import write_text
    from continuum.store import resolve_url

    spec = CLIENTS[client]
    key = servers_key(spec)
    path = Path(config_path or spec.path)
    before, commented, text = read(spec, path)
    servers: dict[str, Any] = dict(before.get(key, {}))
    originals_path = ORIGINALS_PATH
    try:
        originals: dict[str, Any] = json.loads(originals_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        originals = {}
    except (OSError, ValueError) as e:
        raise UsageError(
            f"{originals_path} cannot be read ({e})",
            code="gateway.bad_originals",
            hint="restore it from a backup; it holds the entries the gateway replaced",
        ) from e
    slot = f"{client}:{path.absolute()}:{server}"
    data: dict[str, Any] = {"client": client, "path": str(path), "server": server}
    if restore:
        original = originals.get(slot)
        if original is None:
            emit(s, {**data, "written": False}, f"nothing to restore for {quoted(server)}")
            return
        servers[server] = original
    else:
        if server not in servers:
            known = ", ".join(map(quoted, sorted(servers))) or "none"
            raise UsageError(
                f"no MCP server {quoted(server)} in {path} (servers: {known})",
                code="gateway.no_such_server",
                hint="give --server the name of an entry of that file, or --config another",
            )
        if slot in originals:  # ours already: installing twice changes nothing
            emit(
                s,
                {**data, "written": False, "config": before},
                f"the gateway is already in front of {quoted(server)} in {path}",
            )
            return
        original = servers[server]
        upstream = _upstream_of(client, server, original)
        words = [
            *continuum_command(),
            "gateway",
            "mcp",
            "--db",
            store_arg(resolve_url(s.db)),
            "--name",
            server,
            "--rules",
            str(Path(rules_path or RULES_PATH).absolute()),
            "--pins",
            str(Path(PINS_PATH).absolute()),
            *(["--run", run] if run else []),
            *(["--restart-upstream"] if restart_upstream else []),
            "--",
            *upstream,
        ]
        servers[server] = _wrapped(client, original, words)
    config = {**before, key: servers}
    new_text = render(spec, config, text, name=server)
    check_comments(s, path, found=commented, print_only=print_only, force=force)
    data.update(config=config, written=False)
    if print_only:
        emit(s, data, new_text.rstrip("\n"))
        return
    if restore:
        originals.pop(slot, None)
    else:
        originals[slot] = original
    # The original first: a crash between the two writes leaves it recoverable.
    write_text(originals_path, json.dumps(originals, indent=2, sort_keys=True) + "\n")
    write_text(path, new_text)
    emit(
        s,
        {**data, "path": str(path.absolute()), "written": True},
        [
            (
                f"restored {quoted(server)} in {path}"
                if restore
                else f"the gateway is now in front of {quoted(server)} in {path}; the original "
                f"entry is kept in {originals_path} (`--restore` puts it back)"
            ),
            "restart the host for it to take effect",
        ],
    )


COMMANDS: list[click.Command] = [mcp_cmd, accept_cmd, install_cmd]
"""Subcommands of `continuum gateway` (see cli/gateway.py)."""


@contextmanager
def _delivering(db: str | None) -> Iterator[None]:
    """The outbox delivered in the background while the gateway runs (when a webhook is
    configured); a store that cannot be named here only means no delivery."""
    from continuum.ledger.deliverer import delivering
    from continuum.runtime.verdicts import VerdictWatch
    from continuum.store import resolve_url

    try:
        url = resolve_url(db)
    except ContinuumError:
        yield
        return
    with delivering(url, os.getcwd(), "continuum gateway mcp", watch=VerdictWatch()):
        yield

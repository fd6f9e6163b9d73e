"""`continuum hooks install|remove|effects` and `continuum hook`.

`hooks install --client claude-code|gemini|codex` merges continuum's hooks into the host's
project settings: before and after every tool call, at session start and before the
context is compacted, the host runs `continuum hook KIND` with this store, this run and
this project written in absolutely. An existing file is merged (other hooks and settings
kept, ours replaced); one we cannot merge into is refused and left untouched. Kilo Code
has no hook settings: `--client kilo` writes continuum's plugin (.kilo/plugin/continuum.js),
which runs the same `continuum hook KIND --host kilo` around every tool call. When the
project has no effect registry (`.continuum/effects.toml`), the shipped example is
copied there: it says which tool calls are side effects to gate.

`hook` passes its arguments to the hooks' lean entry point; the console script normally
reaches that entry point without loading this CLI (see `continuum.cli.launch`).
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import click

from continuum.cli.common import common, common_without_db, person_via, require_person, runtime
from continuum.cli.output import AGENT_TEXT_NOTICE, Exit, Line, Settings, ask, emit, write_lines
from continuum.errors import ContinuumError, NotFoundError, UsageError
from continuum.eventlog.events import EventType
from continuum.hooks.guard import ACCEPTED, accepted_text, registry_snapshot
from continuum.hooks.install import (
    EVENTS,
    HOSTS,
    PLUGIN_HOSTS,
    SETTINGS_PATHS,
    config_text,
    continuum_command,
    count_ours,
    default_run_id,
    hook_command,
    installed,
    is_our_plugin,
    plugin_text,
    read_config,
    removed,
    write_config,
    write_text,
)
from continuum.hooks.registry import (
    REGISTRY_PATH,
    Registry,
    explain,
    load_registry,
    parse_registry,
    registry_of,
)
from continuum.store import is_postgres_url, redact_url, resolve_url, sqlite_path_from_url
from continuum.store.base import check_run_id
from continuum.types import Origin
from continuum.untrusted import quoted

project_option = click.option(
    "--dir",
    "directory",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="The project directory (default: the current directory).",
)
run_option = click.option(
    "--run",
    "run",
    default=None,
    metavar="RUN",
    help="The run the hooks record into (default: the project directory's name).",
)

NEXT_STEP = {
    "claude-code": "the hooks apply to Claude Code sessions started in this project from now "
    "on (an interactive session runs them once the folder is trusted)",
    "gemini": "the hooks apply to Gemini CLI sessions started in this project once the "
    "folder is trusted: headless Gemini in an untrusted folder refuses to start (exit 55), "
    "and with --skip-trust it drops the project's hooks and MCP servers without a word. "
    "Trust it in an interactive session or in ~/.gemini/trustedFolders.json; the first "
    "session then warns once about the new project hooks",
    "codex": "Codex loads them only from a trusted project, and runs each hook only once it "
    'is trusted as it is now: `codex exec` asks neither and warns at most once ("Untrusted '
    'project-local configuration is disabled"), so until you trust both the gate is '
    "silently absent. Start `codex` here, trust the project and review the continuum "
    "hooks (again after any change to .codex/hooks.json); `continuum hooks doctor "
    "--client codex` tells whether Codex will run them",
    "kilo": "Kilo loads the plugin at the start of every session in this project, without "
    "a prompt; `kilo run --pure` skips plugins, and then nothing is gated",
}


def example_registry() -> str:
    """The shipped example effect registry."""
    return (files("continuum.hooks") / "effects.example.toml").read_text(encoding="utf-8")


def project_dir(path: str | None) -> Path:
    return Path(os.path.abspath(path or os.getcwd()))


def store_arg(url: str) -> str:
    """The store as the hook command names it: a file path made absolute."""
    if is_postgres_url(url):
        return url
    path = sqlite_path_from_url(url)  # refuses a URL no store can open (store.bad_url)
    return url if url.startswith("sqlite:") else os.path.abspath(path)


def has_password(url: str) -> bool:
    if not is_postgres_url(url):
        return False
    try:
        parts = urlsplit(url)
        return bool(parts.password) or any(
            k.lower() == "password" for k, _ in parse_qsl(parts.query)
        )
    except ValueError:
        return True  # cannot tell: warn rather than stay silent


def run_id(run: str | None, project: Path) -> str:
    value = run if run is not None else default_run_id(project)
    check_run_id(value)
    return value


def copy_example_registry(project: Path) -> bool:
    """Write the example to the project's registry path unless a file is there already."""
    path = project / REGISTRY_PATH
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("x", encoding="utf-8", newline="\n") as f:  # "x": never overwrite
            f.write(example_registry())
    except FileExistsError:
        return False
    except OSError as e:
        raise UsageError(
            f"could not write {quoted(str(path))} ({e.strerror or e})",
            code="usage.cannot_write_config",
            path=str(path),
            hint="check the directory's permissions",
        ) from e
    return True


def registry_report(project: Path, *, copy: bool) -> tuple[dict[str, Any], list[Line]]:
    """Copy the example registry if absent (``copy``), then say what the registry holds."""
    path = project / REGISTRY_PATH
    absent = not path.exists()
    copied = copy and absent and copy_example_registry(project)
    data: dict[str, Any] = {"path": str(path), "example_copied": copied, "example_needed": absent}
    lines: list[Line] = []
    if absent and not copy:
        lines.append(
            f"would copy the example effect registry to {quoted(str(path))} (the project has none)"
        )
    elif copied:
        lines.append(
            f"copied the example effect registry to {quoted(str(path))}: review it, "
            "whoever edits it decides which tool calls are gated"
        )
    try:
        registry: Registry = (
            parse_registry(example_registry(), path)
            if absent and not copy
            else load_registry(project)
        )
    except ContinuumError as e:
        data.update(rules=None, error=e.to_dict())
        lines.append(f"warning: {e.message}")
        lines.append(f"hint: {e.hint}")
        return data, lines
    data["rules"] = len(registry.rules)
    lines.append(
        f"effect registry: {len(registry.rules)} rule(s) in {quoted(str(path))}"
        + (
            " (check it with `continuum hooks effects --check`)"
            if registry.rules
            else ": no tool call is gated"
        )
    )
    return data, lines


@click.group("hooks")
def hooks_group() -> None:
    """Hook continuum into a coding host (Claude Code, Gemini CLI, Codex, Kilo Code)."""


@hooks_group.command("install")
@click.option(
    "--client",
    "client",
    type=click.Choice(HOSTS),
    required=True,
    help="The host whose project settings get the hooks.",
)
@run_option
@project_option
@click.option("--print", "print_only", is_flag=True, help="Print the settings, write nothing.")
@common
def install_cmd(
    s: Settings, client: str, run: str | None, directory: str | None, print_only: bool
) -> None:
    """Write (or print) CLIENT's hook settings for this project.

    The hooks run `continuum hook KIND` with this installation's absolute path, the store
    (--db / CONTINUUM_DB / ./continuum.db made absolute), the run and the project. Our
    earlier entries are replaced; other hooks and settings are kept. When the project has
    no .continuum/effects.toml, the shipped example is copied there.
    """
    project = project_dir(directory)
    run_value = run_id(run, project)
    url = resolve_url(s.db)
    store = store_arg(url)
    exe = continuum_command()
    path = project / SETTINGS_PATHS[client]
    secret = has_password(store)
    if client in PLUGIN_HOSTS:
        text = plugin_text(exe, store, run_value, str(project))
        config: dict[str, Any] = {"plugin": str(path)}
        if not print_only:
            refuse_foreign_plugin(path)
            write_text(path, text, new_mode=0o600 if secret else 0o644)
    else:
        commands = {
            kind: hook_command(exe, kind, client, store, run_value, str(project))
            for kind in EVENTS[client].values()
        }
        config = installed(read_config(path), client, commands)
        text = config_text(config)
        if not print_only:
            write_config(path, config, new_mode=0o600 if secret else 0o644)
    registry, registry_lines = registry_report(project, copy=not print_only)
    if not print_only and registry.get("rules") is not None:
        # The person installing accepts the registry they leave in place (its rules were
        # just listed); any later edit needs `continuum hooks accept`.
        accepted = record_acceptance(s, project, run_value, load_registry(project), event=False)
        registry["accepted"] = accepted["registry_sha256"] or "absent"
        registry_lines.append(
            "accepted this registry as what the gate enforces; after editing it, run "
            f"`continuum hooks accept --dir {quoted(str(project))}`"
        )
    data = {
        "client": client,
        "path": str(path),
        "config": config,
        "written": not print_only,
        "run": run_value,
        "store": redact_url(store),
        "registry": registry,
    }
    events = ", ".join(EVENTS[client])
    warning: list[Line] = (
        [
            f"warning: the store URL holds a password, and it is written into "
            f"{quoted(str(path))} in plain text: keep that file private and out "
            "of version control, or use a password file (~/.pgpass) instead"
        ]
        if secret
        else []
    )
    if print_only:
        if not s.json:
            write_lines(
                s,
                [
                    f"not written: {quoted(str(path))} would hold this; hooked events: {events}",
                    *warning,
                    *registry_lines,
                ],
                err=True,
            )
        emit(s, data, text.rstrip("\n"))
        return
    emit(
        s,
        data,
        [
            f"wrote {quoted(str(path))}: continuum hooks on {events}",
            f"run {quoted(run_value)}, store {quoted(redact_url(store))}",
            *warning,
            *registry_lines,
            NEXT_STEP[client],
        ],
    )


@hooks_group.command("remove")
@click.option(
    "--client",
    "client",
    type=click.Choice(HOSTS),
    required=True,
    help="The host whose project settings lose the hooks.",
)
@project_option
@click.option("--print", "print_only", is_flag=True, help="Print the settings, write nothing.")
@common
def remove_cmd(s: Settings, client: str, directory: str | None, print_only: bool) -> None:
    """Remove continuum's hooks from CLIENT's project settings; nothing else changes."""
    project = project_dir(directory)
    path = project / SETTINGS_PATHS[client]
    if not path.exists():
        emit(
            s,
            {"client": client, "path": str(path), "removed": 0, "written": False},
            f"nothing to remove: {quoted(str(path))} does not exist",
        )
        return
    if client in PLUGIN_HOSTS:
        refuse_foreign_plugin(path)
        if not print_only:
            path.unlink()
        data = {"client": client, "path": str(path), "removed": 1, "written": not print_only}
        emit(
            s,
            data,
            f"{'would remove' if print_only else 'removed'} continuum's plugin "
            f"{quoted(str(path))}; nothing else changed",
        )
        return
    before = read_config(path)
    count = count_ours(before)
    config = removed(before, client)
    write = count > 0 and not print_only
    if write:
        write_config(path, config)
    data = {
        "client": client,
        "path": str(path),
        "config": config,
        "removed": count,
        "written": write,
    }
    if print_only:
        if not s.json:
            write_lines(
                s,
                [
                    f"not written: {quoted(str(path))} would hold this "
                    f"({count} continuum hook entr{'y' if count == 1 else 'ies'} "
                    "removed)"
                ],
                err=True,
            )
        emit(s, data, config_text(config).rstrip("\n"))
        return
    if not count:
        emit(s, data, f"nothing to remove: no continuum hooks in {quoted(str(path))}")
        return
    emit(
        s,
        data,
        f"removed {count} continuum hook entr{'y' if count == 1 else 'ies'} from "
        f"{quoted(str(path))}; other hooks and settings are unchanged",
    )


def refuse_foreign_plugin(path: Path) -> None:
    """A plugin file of that name that is not ours is left alone."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(
            f"cannot read {quoted(str(path))}; it was left untouched",
            code="usage.bad_config_file",
            path=str(path),
            hint="move the file, then install again",
        ) from e
    if not is_our_plugin(text):
        raise UsageError(
            f"{quoted(str(path))} is not continuum's plugin; it was left untouched",
            code="usage.bad_config_file",
            path=str(path),
            hint="move or rename that file, then install again",
        )


@hooks_group.command("doctor")
@click.option(
    "--client",
    "client",
    type=click.Choice(HOSTS),
    required=True,
    help="The host to check.",
)
@project_option
@common
def doctor_cmd(s: Settings, client: str, directory: str | None) -> None:
    """Tell whether CLIENT will really run continuum's hooks in this project.

    Reads files only: continuum's hook entries (or Kilo's plugin), the effect registry
    (valid, and the one a person accepted), and what the host itself needs, which it
    does not say when it skips hooks: Codex a trusted project and each hook trusted with
    its current hash (~/.codex/config.toml), Gemini CLI a trusted folder
    (~/.gemini/trustedFolders.json), Claude Code no disableAllHooks. Exit 0 when every
    check passed; 20 (a person must act) naming what fails and how to fix it.
    """
    from continuum.hooks.doctor import diagnose, report_lines

    report = diagnose(client, project_dir(directory))
    emit(s, report, report_lines(report), code=0 if report["will_run"] else 20)


@hooks_group.command("serve")
@click.option(
    "--socket",
    "socket_path",
    default=None,
    metavar="PATH",
    help="Listen here (default: CONTINUUM_GATE_SOCKET, else /tmp/continuum-UID/gate.sock). "
    "Hook processes look where CONTINUUM_GATE_SOCKET says, or at the default.",
)
@common_without_db
def serve_cmd(s: Settings, socket_path: str | None) -> None:
    """Run the resident gate: hook calls answered from a warm process (Linux).

    Every `continuum hook` process of this user hands its call to the gate, which runs it
    in a forked copy of itself with continuum already loaded: the same code, the same
    store and project, the hook process's own input, output, directory and environment;
    a gated call then costs about an interpreter start instead of several. Without a
    gate (stopped, never started, killed) hooks run in their own processes, as always. A
    hook whose call the gate took and never answered is refused (pre-tool), not run again.

    Runs in the foreground until SIGTERM or Ctrl-C (log lines on stderr); start it from
    your session or a user service. It stops by itself when continuum's code on disk
    changes (an upgrade), so the next calls run the new code. Only this user's processes
    are served (the socket's directory is private; the kernel names each caller).
    """
    from continuum.hooks.resident import serve

    def say(line: str) -> None:
        write_lines(s, [line], err=True)

    code = serve(socket_path, say)
    if code:
        raise Exit(code)


@hooks_group.command("accept")
@project_option
@run_option
@click.option(
    "--yes",
    "-y",
    is_flag=True,
    help="Do not ask: for a person's own script. Without it, accept shows the rules, asks "
    "on a terminal and refuses when stdin is not one.",
)
@common
def accept_cmd(s: Settings, directory: str | None, run: str | None, yes: bool) -> None:
    """As a person, accept the project's effect registry as it is now.

    The gate enforces only a registry a person accepted: while .continuum/effects.toml is
    missing, empty or changed since it was last accepted, the hooks refuse every tool
    call that could be a side effect. This shows every rule, asks, then records the
    registry's digest beside it (.continuum/accepted-registry.json) and, with origin
    human, in the hooks' run (a registry_accepted event). `hooks install` accepts the
    registry it leaves in place (the file only). A malformed registry cannot be accepted.
    """
    project = project_dir(directory)
    registry = load_registry(project)  # a malformed one raises, naming the line
    run_value = run_id(run, project)
    require_person(yes, "accepting the effect registry", f"continuum hooks accept --dir {project}")
    if not yes:
        write_lines(s, [AGENT_TEXT_NOTICE, *explain(registry)], err=True)
        if not ask(s, "Accept these rules as what the gate enforces?"):
            raise UsageError(
                "not accepted; nothing was recorded",
                code="usage.declined",
                hint="edit .continuum/effects.toml, then run `continuum hooks accept` again",
            )
    data = record_acceptance(s, project, run_value, registry, via=person_via(yes))
    emit(
        s,
        data,
        [
            f"accepted the effect registry {quoted(data['path'])} ({data['rules']} rule(s), "
            f"{data['registry_sha256'] or 'absent'}) for run {quoted(run_value)}",
            "the hooks enforce it from the next tool call; after any edit, accept it again",
        ],
    )


def record_acceptance(
    s: Settings,
    project: Path,
    run_value: str,
    registry: Registry,
    *,
    event: bool = True,
    via: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Record a person's acceptance of ``registry``: with ``event``, a registry_accepted
    event (origin human) in the run (the store and run are created if need be), then the
    file the gate reads on every call. `hooks install` writes the file alone: installing
    must not need the store yet, and the hook settings it writes are its own record."""
    from datetime import UTC, datetime

    digest, entries = registry_snapshot(str(project))
    seen = registry_of(str(project / REGISTRY_PATH), entries) if entries is not None else None
    if [r.shape() for r in (seen or Registry(path=None)).rules] != [
        r.shape() for r in registry.rules
    ]:
        raise UsageError(
            f"the effect registry {quoted(str(project / REGISTRY_PATH))} changed while it was "
            "being reviewed; nothing was accepted",
            code="hooks.registry_changed",
            hint="review it again and run `continuum hooks accept` again",
        )
    payload = {
        "path": str(project / REGISTRY_PATH),
        "registry_sha256": digest,
        "rules": len(registry.rules),
    }
    if event:
        rt = runtime(s, create=True, origin=Origin.HUMAN)
        try:
            try:
                rt.store.get_run(run_value)
            except NotFoundError:
                rt.start_run(run_value, None, metadata={"created_by": "continuum hooks"})
            how = {} if via is None else {"via": via}
            rt.append(run_value, EventType.REGISTRY_ACCEPTED, {**payload, **how})
        finally:
            rt.close()
    when = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    write_text(project / ACCEPTED, accepted_text(digest, len(registry.rules), when, entries))
    return {**payload, "run": run_value, "accepted_file": str(project / ACCEPTED)}


def rule_data(registry: Registry) -> list[dict[str, Any]]:
    return [
        {
            "index": r.index,
            "line": r.line,
            "description": r.description,
            "tool": r.tool.pattern,
            "match": {k: p.pattern for k, p in r.match.items()},
            "action_type": r.action_type,
            "key": r.key,
            "replay": r.replay,
            "probe": r.probe,
        }
        for r in registry.rules
    ]


@hooks_group.command("effects")
@click.option(
    "--check",
    "check",
    is_flag=True,
    help="Check the registry: exit 0 when every rule is valid, 1 naming the first that is not.",
)
@click.option("--example", "example", is_flag=True, help="Print the shipped example registry.")
@project_option
@common
def effects_cmd(s: Settings, check: bool, example: bool, directory: str | None) -> None:
    """Explain the project's effect registry (.continuum/effects.toml), rule by rule.

    Each rule says which tool calls are side effects that go through the action ledger;
    the first rule that matches a call decides. A malformed registry is an error naming
    the rule and its line (exit 1): until it is fixed, the hooks refuse every tool call
    that could be an effect.
    """
    if example:
        text = example_registry()
        emit(s, {"example": text}, text.rstrip("\n"))
        return
    registry = load_registry(project_dir(directory))  # a malformed one raises, naming the line
    emit(
        s,
        {
            "path": str(registry.path) if registry.path else None,
            "valid": True,
            "checked": check,
            "rules": rule_data(registry),
        },
        explain(registry),
    )


@hooks_group.command("try")
@click.option(
    "--client",
    "client",
    type=click.Choice(HOSTS),
    required=True,
    help="The host to play; its hooks must be installed here (`hooks install`).",
)
@click.argument("command")
@click.option(
    "--run",
    "run",
    default=None,
    metavar="RUN",
    help="The run the hooks record into (default: a new scratch run hooks-try-XXXXXXXX, "
    "so no real run is touched).",
)
@click.option(
    "--result",
    "result",
    type=click.Choice(["success", "fail"]),
    default=None,
    help="The simulated result of the tool call: success (default, exit code 0) or fail "
    "(exit code 1).",
)
@click.option(
    "--execute",
    "execute",
    is_flag=True,
    help="Really run COMMAND (bash -c, in the project) between the two hooks and report "
    "its exit code instead of simulating one.",
)
@project_option
@click.option(
    "--db",
    "db",
    metavar="URL",
    default=None,
    help="Record into this store instead of the one the hooks were installed with.",
)
@common_without_db
def try_cmd(
    s: Settings,
    client: str,
    command: str,
    run: str | None,
    result: str | None,
    execute: bool,
    directory: str | None,
    db: str | None,
) -> None:
    """Try CLIENT's installed hooks on one shell tool call, without the host.

    Plays the host: sends continuum's installed pre-tool hook the JSON CLIENT sends for a
    call of its shell tool running COMMAND, runs the very command line `hooks install`
    registered (as the host does: `sh -c` in the project; Kilo: the plugin's argv), and
    applies the host's rules to the answer; if the host would run the call, simulates its
    result (COMMAND is NOT run unless --execute) and sends the post-tool event. Shows
    which rule matched, allow or deny and what the model reads, and what the hooks
    recorded, in which run and store. The hooks record into a new scratch run of the
    store they were installed with. Exit 0 whatever the gate decided; 1 when continuum's
    hooks are not installed for CLIENT here. A COMMAND that starts with "-" goes after
    "--".
    """
    from continuum.hooks.trial import Trial, report_lines, try_call

    store = db if db is not None else s.db  # `continuum --db X hooks try` too; not $CONTINUUM_DB
    if execute and result is not None:
        raise UsageError(
            "--execute and --result exclude each other",
            code="usage.invalid",
            hint="--execute reports the command's real exit code; --result simulates one",
        )
    report = try_call(
        Trial(
            host=client,
            project=project_dir(directory),
            command=command,
            run=run,
            db=store_arg(resolve_url(store)) if store is not None else None,
            result=result or "success",
            execute=execute,
        )
    )
    emit(s, report, report_lines(report))


@click.command(
    "hook",
    add_help_option=False,
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def hook_cmd(ctx: click.Context, args: tuple[str, ...]) -> None:
    """Run one host hook: KIND --host HOST --db URL --run RUN --project DIR (hosts call this).

    KIND is pre-tool, post-tool, post-tool-failure, session-start or pre-compact; the
    host's event arrives on stdin. `continuum hooks install` writes these commands.
    """
    from continuum.hooks.entry import main  # the lean entry point; loaded only when used

    argv = list(args)
    settings = ctx.find_object(Settings)
    if (
        settings is not None
        and settings.db is not None
        and "--db" not in argv
        and not any(a.startswith("--db=") for a in argv)
    ):
        argv += ["--db", settings.db]  # `continuum --db X hook ...`
    code = main(argv)
    if code:
        raise Exit(code)


COMMANDS = [hooks_group, hook_cmd]

"""`continuum hooks install|remove|effects` and `continuum hook`.

`hooks install --client claude-code|gemini|codex` merges continuum's hooks into the host's
project settings: before and after every tool call, at session start and before the
context is compacted, the host runs `continuum hook KIND` with this store, this run and
this project written in absolutely. An existing file is merged (other hooks and settings
kept, ours replaced); one we cannot merge into is refused and left untouched. When the
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

from continuum.cli.common import common
from continuum.cli.output import Exit, Line, Settings, emit, write_lines
from continuum.errors import ContinuumError, UsageError
from continuum.hooks.install import (
    EVENTS,
    HOSTS,
    SETTINGS_PATHS,
    config_text,
    continuum_command,
    count_ours,
    default_run_id,
    hook_command,
    installed,
    read_config,
    removed,
    write_config,
)
from continuum.hooks.registry import REGISTRY_PATH, Registry, explain, load_registry, parse_registry
from continuum.store import is_postgres_url, redact_url, resolve_url, sqlite_path_from_url
from continuum.store.base import check_run_id
from continuum.untrusted import quoted

NEXT_STEP = {
    "claude-code": "the hooks apply to Claude Code sessions started in this project from now "
    "on (an interactive session runs them once the folder is trusted)",
    "gemini": "the hooks apply to Gemini CLI sessions started in this project from now on "
    "(Gemini CLI skips project hooks in a folder it does not trust)",
    "codex": "Codex runs project hooks only after you review and trust them: start Codex in "
    "this project and trust the continuum hooks (after any change to "
    ".codex/hooks.json it asks again)",
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
    """Hook continuum into a coding host (Claude Code, Gemini CLI, Codex)."""


@hooks_group.command("install")
@click.option(
    "--client",
    "client",
    type=click.Choice(HOSTS),
    required=True,
    help="The host whose project settings get the hooks.",
)
@click.option(
    "--run",
    "run",
    default=None,
    metavar="RUN",
    help="The run the hooks record into (default: the project directory's name).",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="The project directory (default: the current directory).",
)
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
    commands = {
        kind: hook_command(exe, kind, client, store, run_value, str(project))
        for kind in EVENTS[client].values()
    }
    path = project / SETTINGS_PATHS[client]
    config = installed(read_config(path), client, commands)
    secret = has_password(store)
    if not print_only:
        write_config(path, config, new_mode=0o600 if secret else 0o644)
    registry, registry_lines = registry_report(project, copy=not print_only)
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
        emit(s, data, config_text(config).rstrip("\n"))
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
@click.option(
    "--dir",
    "directory",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="The project directory (default: the current directory).",
)
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
@click.option(
    "--dir",
    "directory",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="The project directory (default: the current directory).",
)
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

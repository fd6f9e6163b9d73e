"""Options every command takes, and how a command gets the runtime facade."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO, TypeVar

import click

from continuum.cli.output import Settings
from continuum.errors import UsageError
from continuum.runtime import Continuum
from continuum.store import resolve_url
from continuum.types import Origin

F = TypeVar("F", bound=Callable[..., Any])

DB_HELP = "Store: a file path, sqlite:///abs/path.db or postgresql://... " \
          "(default: $CONTINUUM_DB, else ./continuum.db)."


def common(f: F) -> F:
    """Add --db, --json and --no-color to a command and pass the merged Settings first."""

    @click.option("--db", "db", metavar="URL", default=None, help=DB_HELP)
    @click.option("--json", "as_json", is_flag=True, default=False,
                  help="Print exactly one JSON document on stdout.")
    @click.option("--no-color", "no_color", is_flag=True, default=False, help="No ANSI colour.")
    @functools.wraps(f)
    def wrapper(*args: Any, db: str | None, as_json: bool, no_color: bool, **kwargs: Any) -> Any:
        settings = click.get_current_context().find_object(Settings)
        assert settings is not None
        if db is not None:  # an explicit empty --db is refused later, never the default
            settings.db = db
        if as_json:
            settings.json = True
        if no_color:
            settings.color = False
        return f(settings, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def runtime(settings: Settings, *, create: bool = False,
            origin: Origin = Origin.DETERMINISTIC) -> Continuum:
    rt = Continuum.open(resolve_url(settings.db), create=create, origin=origin)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.call_on_close(rt.close)  # release the store (and any pool) when the command ends
    return rt


def parse_env(pairs: tuple[str, ...]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--env {pair!r} is not name=value", code="usage.bad_env",
                             hint="write --env dataset=v2 (repeat --env for more)")
        env[name] = value
    return env


def require_person(yes: bool, what: str, command: str) -> None:
    """Refuse unless a person is at a terminal (or their own script passed ``--yes``).

    What ``confirm`` and ``reconcile`` record has origin human; an agent with a shell that
    follows advice literally must not become a person by running them from a pipe.
    """
    if not yes and not (sys.stdin is not None and sys.stdin.isatty()):
        raise UsageError(f"{what} records origin human and must be given by a person at a "
                         "terminal; stdin is not a terminal and --yes was not given",
                         code="usage.not_a_terminal",
                         hint=f"a person must run `{command}` in a terminal; a person's own "
                              "script may pass --yes")


def private_file(path: Path) -> TextIO:
    """Open ``path`` for writing, readable and writable by its owner only (0600).

    Exports and contract files carry what agents wrote (goals, arguments, results)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its old mode under O_CREAT
    return os.fdopen(fd, "w", encoding="utf-8", newline="\n")

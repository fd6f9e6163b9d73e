"""Options every command takes, and how a command gets the runtime facade."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

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

"""Options every command takes, and how a command gets the runtime facade."""

from __future__ import annotations

import difflib
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO, TypeVar

import click

from continuum.cli.output import Settings
from continuum.errors import ContinuumError, UsageError
from continuum.eventlog.payloads import via_of
from continuum.runtime.facade import Continuum
from continuum.store import is_postgres_url, resolve_url, sqlite_path_from_url, url_source
from continuum.store.sqlite_files import no_store_words
from continuum.types import Origin
from continuum.untrusted import as_typed, quoted

F = TypeVar("F", bound=Callable[..., Any])

DB_HELP = (
    "Store: a file path, sqlite:///abs/path.db or postgresql://... "
    "(default: $CONTINUUM_DB, else ./continuum.db)."
)


def common(f: F) -> F:
    """Add --db, --json and --no-color to a command and pass the merged Settings first."""
    inner = common_without_db(f)

    @click.option("--db", "db", metavar="URL", default=None, help=DB_HELP)
    @functools.wraps(inner)
    def wrapper(*args: Any, db: str | None, **kwargs: Any) -> Any:
        settings = click.get_current_context().find_object(Settings)
        assert settings is not None
        if db is not None:  # an explicit empty --db is refused later, never the default
            settings.db = db
        return inner(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def common_without_db(f: F) -> F:
    """Add --json and --no-color (no --db: for a command that uses no store of ours) and
    pass the merged Settings first."""

    @click.option(
        "--json",
        "as_json",
        is_flag=True,
        default=False,
        help="Print exactly one JSON document on stdout.",
    )
    @click.option("--no-color", "no_color", is_flag=True, default=False, help="No ANSI colour.")
    @functools.wraps(f)
    def wrapper(*args: Any, as_json: bool, no_color: bool, **kwargs: Any) -> Any:
        settings = click.get_current_context().find_object(Settings)
        assert settings is not None
        if as_json:
            settings.json = True
        if no_color:
            settings.color = False
        return f(settings, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def runtime(
    settings: Settings, *, create: bool = False, origin: Origin = Origin.DETERMINISTIC
) -> Continuum:
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
            raise UsageError(
                f"--env {pair!r} is not name=value",
                code="usage.bad_env",
                hint="write --env dataset=v2 (repeat --env for more)",
            )
        env[name] = value
    return env


def require_person(yes: bool, what: str, command: str) -> None:
    """Refuse unless a person is at a terminal (or their own script passed ``--yes``).

    What ``confirm`` and ``reconcile`` record has origin human; an agent with a shell that
    follows advice literally must not become a person by running them from a pipe.
    """
    if not yes and not (sys.stdin is not None and sys.stdin.isatty()):
        raise UsageError(
            f"{what} records origin human and must be given by a person at a "
            "terminal; stdin is not a terminal and --yes was not given",
            code="usage.not_a_terminal",
            hint=f"a person must run `{command}` in a terminal; a person's own "
            "script may pass --yes",
        )


def person_via(yes: bool) -> dict[str, str]:
    """How a person's decision was given here, recorded with it: ``script`` (``--yes``,
    nothing asked) or ``terminal`` (answered at the prompt ``require_person`` insists on)."""
    return via_of("script" if yes else "terminal")


def private_file(path: Path) -> TextIO:
    """Open ``path`` for writing, readable and writable by its owner only (0600).

    Exports and contract files carry what agents wrote (goals, arguments, results)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its old mode under O_CREAT
    return os.fdopen(fd, "w", encoding="utf-8", newline="\n")


def explain_missing_store(settings: Settings, err: ContinuumError) -> None:
    """A store that is not there (``not_found.store``, a SQLite file): say how its path was
    chosen (``--db``, ``$CONTINUUM_DB`` or the default in the current directory) in the
    message and the error's details (``chosen_by``), and make the hint's ``continuum
    init`` name the same store. Another store's error (not the one selected) stays as it
    was."""
    if err.code != "not_found.store" or "absolute_path" not in err.fields:
        return
    try:
        url = resolve_url(settings.db)
        if is_postgres_url(url) or str(sqlite_path_from_url(url)) != err.fields.get("path"):
            return
    except ContinuumError:
        return
    source = url_source(settings.db)
    if source == "--db":
        chosen, init = f"from --db {as_typed(url)}", f"continuum init --db {as_typed(url)}"
    elif source == "CONTINUUM_DB":
        chosen, init = f"from $CONTINUUM_DB={as_typed(url)}", "continuum init"
    else:
        chosen = "the default ./continuum.db in the current directory: neither --db nor "
        chosen += "CONTINUUM_DB is set"
        init = "continuum init"
    err.message, err.hint = no_store_words(
        str(err.fields["absolute_path"]),
        empty=bool(err.fields.get("empty")),
        chosen=chosen,
        init=init,
    )
    err.fields["chosen_by"] = source


def suggest_run(settings: Settings, err: ContinuumError) -> None:
    """A not-found error, made concrete for a person (``main`` calls it on every error): a
    missing store says how it was chosen (``explain_missing_store``); a run that was not
    found names the store's closest run id in the hint ("did you mean ...?") and in the
    error's details. Best effort: if the store cannot be read now, the error stays as it
    was."""
    explain_missing_store(settings, err)
    wanted = err.fields.get("run_id")
    if err.code != "not_found.run" or not isinstance(wanted, str):
        return
    try:
        rt = Continuum.open(resolve_url(settings.db), create=False)
        try:
            ids = [r.run_id for r in rt.runs()]
        finally:
            rt.close()
    except ContinuumError:
        return
    by_folded = {run_id.casefold(): run_id for run_id in reversed(ids)}  # first one wins
    close = difflib.get_close_matches(wanted.casefold(), list(by_folded), n=1, cutoff=0.5)
    if close:
        match = by_folded[close[0]]
        err.fields["did_you_mean"] = match
        err.hint = f"did you mean {quoted(match)}? " + (
            err.hint or "list runs with `continuum runs`"
        )

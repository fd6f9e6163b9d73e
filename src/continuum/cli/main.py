"""The ``continuum`` command: a thin shell over the runtime facade.

``main()`` is the only place that calls ``sys.exit``; errors become one JSON shape
(``--json``) or two lines on stderr, and the exit code says what kind of problem it is.
"""

from __future__ import annotations

import sys

import click

from continuum.cli import benchmark, hooks, integrity, ledger, mcp_install, recovery, runs, transfer
from continuum.cli.output import Exit, Settings, emit_error
from continuum.errors import ContinuumError, UsageError
from continuum.log import configure, get_logger
from continuum.version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="continuum")
@click.option("--db", metavar="URL", default=None,
              help="Store: path, sqlite:///abs/path.db or postgresql://... "
                   "(default: $CONTINUUM_DB, else ./continuum.db).")
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON document on stdout.")
@click.option("--no-color", is_flag=True, help="No ANSI colour (also: NO_COLOR).")
@click.pass_context
def cli(ctx: click.Context, db: str | None, as_json: bool, no_color: bool) -> None:
    """continuum: crash recovery for AI agents.

    Every run keeps a hash-chained event log; side effects go through an action
    ledger; `resume` says whether a run may continue. Exit codes: 0 ok / safe to
    resume, 1 error, 2 not found, 3 integrity failure, 10 repair or replan,
    20 wait or human needed (or unresolved actions), 30 rollback/abort/not resumable.
    """
    settings = ctx.ensure_object(Settings)
    settings.db = db if db is not None else settings.db
    settings.json = as_json or settings.json
    settings.color = settings.color and not no_color


for module in (runs, recovery, ledger, integrity, mcp_install, hooks, transfer, benchmark):
    for command in module.COMMANDS:
        cli.add_command(command)


def run(argv: list[str]) -> int:
    """Run the CLI on ``argv`` and return the exit code (no sys.exit)."""
    configure()
    settings = Settings(json="--json" in argv)
    try:
        rv = cli.main(args=argv, prog_name="continuum", standalone_mode=False, obj=settings)
        return rv if isinstance(rv, int) else 0
    except Exit as e:
        return e.code
    except ContinuumError as e:
        return emit_error(settings, e)
    except click.exceptions.Exit as e:
        return int(e.exit_code)
    except click.exceptions.Abort:
        return emit_error(settings, UsageError("aborted", code="usage.aborted", hint=""))
    except click.ClickException as e:
        return emit_error(settings, UsageError(e.format_message(), code="usage.invalid",
                                               hint="see `continuum --help` or `continuum COMMAND --help`"))
    except Exception as e:  # unexpected: one clear line, the traceback only in the log
        get_logger("continuum.cli").error("unexpected_failure", error=repr(e))
        return emit_error(settings, ContinuumError(f"unexpected failure: {type(e).__name__}: {e}",
                                                   code="internal", hint="this is a bug; please report it"))


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()

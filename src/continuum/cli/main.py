"""The ``continuum`` command: a thin shell over the runtime facade.

``main()`` is the only place that calls ``sys.exit``; errors become one JSON shape
(``--json``) or two lines on stderr, and the exit code says what kind of problem it is.
"""

from __future__ import annotations

import sys

import click

from continuum.cli import (
    approvals,
    audit,
    benchmark,
    budget,
    confirm_token,
    events,
    fork,
    gateway,
    history,
    hooks,
    integrity,
    ledger,
    live,
    mcp_install,
    operations,
    perception,
    prune,
    recovery,
    runs,
    transfer,
    ui,
)
from continuum.cli.common import suggest_run
from continuum.cli.help import SectionedGroup
from continuum.cli.output import Exit, Settings, emit_error
from continuum.errors import ContinuumError, UsageError
from continuum.log import LEVELS, BadLogLevel, configure, get_logger
from continuum.version import __version__


@click.group(
    cls=SectionedGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, "--version", prog_name="continuum")
@click.option(
    "--db",
    metavar="URL",
    default=None,
    help="Store: path, sqlite:///abs/path.db or postgresql://... "
    "(default: $CONTINUUM_DB, else ./continuum.db).",
)
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON document on stdout.")
@click.option("--no-color", is_flag=True, help="No ANSI colour (also: NO_COLOR).")
@click.option(
    "--log-level",
    metavar="LEVEL",
    default=None,
    help=f"Log level on stderr: {', '.join(LEVELS)} (default: $CONTINUUM_LOG_LEVEL, else warning).",
)
@click.pass_context
def cli(
    ctx: click.Context, db: str | None, as_json: bool, no_color: bool, log_level: str | None
) -> None:
    """continuum: crash recovery for AI agents.

    Every run keeps a hash-chained event log; side effects go through an action
    ledger; `resume` says whether a run may continue. Exit codes: 0 ok / safe to
    resume, 1 error, 2 not found, 3 integrity failure, 10 repair or replan,
    20 wait or human needed (or unresolved actions), 30 rollback/abort/not resumable,
    130 interrupted (Ctrl-C). Shell completion: see references/cli.md.
    """
    settings = ctx.ensure_object(Settings)
    settings.db = db if db is not None else settings.db
    settings.json = as_json or settings.json
    settings.color = settings.color and not no_color
    try:
        configure(log_level)
    except BadLogLevel as e:
        raise UsageError(
            str(e),
            code="usage.bad_log_level",
            hint="e.g. --log-level info (the default is warning)",
        ) from e


for module in (
    runs,
    events,
    recovery,
    confirm_token,
    ledger,
    integrity,
    history,
    live,
    mcp_install,
    hooks,
    transfer,
    prune,
    fork,
    approvals,
    budget,
    perception,
    operations,
    benchmark,
    ui,
    gateway,
    audit,
):
    for command in module.COMMANDS:
        cli.add_command(command)


class Interrupted(ContinuumError):
    """Ctrl-C: exit 130 (the shell's 128 + SIGINT) with one line, never a traceback."""

    code = "interrupted"
    exit_code = 130


def interrupted(settings: Settings) -> int:
    return emit_error(
        settings, Interrupted("interrupted (Ctrl-C); what was already recorded stays recorded")
    )


def run(argv: list[str]) -> int:
    """Run the CLI on ``argv`` and return the exit code (no sys.exit)."""
    settings = Settings(json="--json" in argv)
    try:
        rv = cli.main(args=argv, prog_name="continuum", standalone_mode=False, obj=settings)
        return rv if isinstance(rv, int) else 0
    except Exit as e:
        return e.code
    except ContinuumError as e:
        suggest_run(settings, e)
        return emit_error(settings, e)
    except click.exceptions.Exit as e:
        return int(e.exit_code)
    except click.exceptions.NoArgsIsHelpError as e:
        # Bare `continuum` (or a bare group, `continuum mcp`): its help, and that is no error.
        sys.stdout.write(e.ctx.get_help() + "\n")
        sys.stdout.flush()
        return 0
    except click.exceptions.Abort as e:
        # Ctrl-C, turned into Abort by click (`raise Abort() from e`, or `from None` in a
        # prompt, which still keeps it as the context); an EOF at a prompt stays "aborted".
        if isinstance(e.__cause__ or e.__context__, KeyboardInterrupt):
            return interrupted(settings)
        return emit_error(settings, UsageError("aborted", code="usage.aborted", hint=""))
    except KeyboardInterrupt:  # outside click's own handling (e.g. while an error is written)
        return interrupted(settings)
    except click.ClickException as e:
        return emit_error(
            settings,
            UsageError(
                e.format_message(),
                code="usage.invalid",
                hint="see `continuum --help` or `continuum COMMAND --help`",
            ),
        )
    except Exception as e:  # unexpected: one clear line, the traceback only in the log
        get_logger("continuum.cli").error("unexpected_failure", error=repr(e))
        return emit_error(
            settings,
            ContinuumError(
                f"unexpected failure: {type(e).__name__}: {e}",
                code="internal",
                hint="this is a bug; please report it",
            ),
        )


def main() -> None:
    try:
        code = run(sys.argv[1:])
    except KeyboardInterrupt:  # a second Ctrl-C while the first was being reported
        code = Interrupted.exit_code
    sys.exit(code)


if __name__ == "__main__":
    main()

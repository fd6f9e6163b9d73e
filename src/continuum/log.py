"""Structured logs on stderr only: stdout belongs to JSON output and JSON-RPC."""

from __future__ import annotations

import logging
import os
import sys

import structlog

_configured = False


class _StderrLogger:
    """Writes each line to the *current* ``sys.stderr`` (tests and the MCP transport swap
    it), and never lets a closed or broken stderr turn a log call into a failure."""

    def msg(self, message: str) -> None:
        try:
            sys.stderr.write(message + "\n")
            sys.stderr.flush()
        except (ValueError, OSError):
            pass

    log = debug = info = warning = warn = error = critical = exception = fatal = msg


def _stderr_factory(*_args: object) -> _StderrLogger:
    return _StderrLogger()


LEVELS = ("debug", "info", "warning", "error", "critical")
LEVEL_ENV = "CONTINUUM_LOG_LEVEL"


class BadLogLevel(ValueError):
    """A log level that is not one of ``LEVELS``; the message names the allowed ones.

    A ``ValueError`` (this leaf module imports nothing internal): each edge turns it into
    its own refusal (the CLI a ``usage.bad_log_level`` error, the MCP server a start-up
    refusal)."""


def check_level(level: str, *, source: str = "--log-level") -> str:
    """``level`` in lower case if it is one of ``LEVELS`` (any case); else ``BadLogLevel``
    naming ``source`` (the flag or the variable it came from) and the allowed levels."""
    name = level.strip().lower()
    if name not in LEVELS:
        raise BadLogLevel(f"{source} {level!r} is not a log level; use one of {', '.join(LEVELS)}")
    return name


def configure(level: str | None = None) -> None:
    """Set up stderr logging once, at ``CONTINUUM_LOG_LEVEL`` (default warning); an explicit
    ``level`` (e.g. ``--log-level``) always applies, even after a module already logged.

    A level that is not one of ``LEVELS`` (flag or variable) raises ``BadLogLevel``: a
    start-up that asked for ``--log-level bogus`` should hear so, not run at some other
    level.
    """
    if level is not None:
        _apply(check_level(level))
        return
    env = os.environ.get(LEVEL_ENV)
    name = check_level(env, source=LEVEL_ENV) if env else "warning"
    if not _configured:  # set up once: a later call without a level keeps what is there
        _apply(name)


def _configure_default() -> None:
    """What a first ``get_logger`` does: never raises (a log call must not fail), so an
    unusable ``CONTINUUM_LOG_LEVEL`` means the default here; the edges refuse it at start-up
    through ``configure``."""
    if _configured:
        return
    env = (os.environ.get(LEVEL_ENV) or "").strip().lower()
    _apply(env if env in LEVELS else "warning")


def _apply(name: str) -> None:
    global _configured
    numeric = getattr(logging, name.upper())
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=_stderr_factory,
        cache_logger_on_first_use=False,
    )
    _configured = True


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    _configure_default()
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(name)
    return logger

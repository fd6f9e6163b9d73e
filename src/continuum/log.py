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


def configure(level: str | None = None) -> None:
    """Set up stderr logging once; an explicit ``level`` (e.g. ``--log-level``) always applies,
    even after a module already logged with the default."""
    global _configured
    if _configured and level is None:
        return
    name = (level or os.environ.get("CONTINUUM_LOG_LEVEL") or "warning").upper()
    numeric = getattr(logging, name, logging.WARNING)
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
    configure()
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(name)
    return logger

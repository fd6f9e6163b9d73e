"""Structured logs on stderr only: stdout belongs to JSON output and JSON-RPC."""

from __future__ import annotations

import logging
import os
import sys

import structlog

_configured = False


def configure(level: str | None = None) -> None:
    global _configured
    if _configured:
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
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    _configured = True


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    configure()
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(name)
    return logger

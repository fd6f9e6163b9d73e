"""Structured logs on stderr only: stdout belongs to JSON output and JSON-RPC.

structlog (with asyncio and friends: tens of milliseconds) is imported at the first log
line, not when a module asks for its logger: a hook process that logs nothing never
loads it (issue 27, the lean hot path). ``configure`` only records the level until then.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import structlog

_configured = False
_wanted: str | None = None  # a level asked for before structlog was loaded


class Logger(Protocol):
    """What continuum's modules log through (a structlog filtering bound logger)."""

    def debug(self, event: str, *args: Any, **kw: Any) -> Any: ...
    def info(self, event: str, *args: Any, **kw: Any) -> Any: ...
    def warning(self, event: str, *args: Any, **kw: Any) -> Any: ...
    def error(self, event: str, *args: Any, **kw: Any) -> Any: ...
    def critical(self, event: str, *args: Any, **kw: Any) -> Any: ...
    def exception(self, event: str, *args: Any, **kw: Any) -> Any: ...


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
    level. Nothing is imported here: the level applies when the first line is logged.
    """
    global _wanted
    if level is not None:
        _wanted = check_level(level)
        if _configured:
            _apply(_wanted)
        return
    env = os.environ.get(LEVEL_ENV)
    name = check_level(env, source=LEVEL_ENV) if env else "warning"
    if not _configured and _wanted is None:  # a later call without a level keeps what is set
        _wanted = name


def reset() -> None:
    """Forget the level in force, as a new process starts: a resident gate's worker takes
    on its caller's environment (``CONTINUUM_LOG_LEVEL``) before the call logs anything."""
    global _wanted, _configured
    _wanted = None
    _configured = False


def _configure_default() -> None:
    """What the first log line does: never raises (a log call must not fail), so an
    unusable ``CONTINUUM_LOG_LEVEL`` means the default here; the edges refuse it at start-up
    through ``configure``."""
    if _configured:
        return
    if _wanted is not None:
        _apply(_wanted)
        return
    env = (os.environ.get(LEVEL_ENV) or "").strip().lower()
    _apply(env if env in LEVELS else "warning")


def _apply(name: str) -> None:
    global _configured
    import logging

    import structlog

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


_ORDER = {name: i for i, name in enumerate(LEVELS)}


def _allows(level: str) -> bool:
    """Whether a line at ``level`` is written at the level in force (without loading
    structlog for a line that would be dropped)."""
    if _wanted is not None:
        current = _wanted
    else:
        env = (os.environ.get(LEVEL_ENV) or "").strip().lower()
        current = env if env in LEVELS else "warning"
    return _ORDER.get(level, 0) >= _ORDER[current]


class _LazyLogger:
    """A named logger that loads structlog at its first line written (``Logger``)."""

    __slots__ = ("_name", "_real")

    def __init__(self, name: str) -> None:
        self._name = name
        self._real: structlog.typing.FilteringBoundLogger | None = None

    def _logger(self) -> structlog.typing.FilteringBoundLogger:
        if self._real is None:
            import structlog

            _configure_default()
            self._real = structlog.get_logger(self._name)
        return self._real

    def debug(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._logger().debug(event, *args, **kw) if _allows("debug") else None

    def info(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._logger().info(event, *args, **kw) if _allows("info") else None

    def warning(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._logger().warning(event, *args, **kw) if _allows("warning") else None

    def error(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._logger().error(event, *args, **kw) if _allows("error") else None

    def critical(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._logger().critical(event, *args, **kw) if _allows("critical") else None

    def exception(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._logger().exception(event, *args, **kw) if _allows("error") else None


def get_logger(name: str) -> Logger:
    return _LazyLogger(name)

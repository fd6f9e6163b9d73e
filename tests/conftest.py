"""Shared test configuration.

Hypothesis: the ``continuum`` profile (default) keeps the property suite to about a
minute on two cores; ``HYPOTHESIS_PROFILE=thorough`` runs many more examples.
``deadline=None`` because a shared CI box makes per-example timings meaningless.
"""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import settings

settings.register_profile("continuum", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "continuum"))

# The PostgreSQL suites use the server this machine kind runs (the Makefile and .ci/run set
# the same default); a plain `pytest` run should exercise them too, not skip them.
os.environ.setdefault("CONTINUUM_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")

# Hook processes hand their calls to this user's resident gate when one runs (`continuum
# hooks serve`): the suite runs them in their own processes unless pointed at a gate
# (`make test` also runs the hooks' tests through one: tests/hooks/conftest.py).
os.environ.setdefault("CONTINUUM_GATE_SOCKET", "off")


# Reliability rows print one figure line each ("F1: 274 kills ... 0 lost"); collect them
# from the captured output and show them together at the end of every run, so
# `make test` prints each row's figure (issue 4) without -s.
_FIGURE = re.compile(r"^(F\d+(?:-neg)?(?: control)?|F\d+\s*\[\w+\])[:\s]")
_figures: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call":
        return
    for line in report.capstdout.splitlines():
        if _FIGURE.match(line.strip()) and line.strip() not in _figures:
            _figures.append(line.strip())


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _figures:
        terminalreporter.section("reliability figures")
        for line in sorted(_figures, key=_figure_order):
            terminalreporter.write_line(line)


def _figure_order(line: str) -> tuple[int, str]:
    m = re.match(r"F(\d+)", line)
    return (int(m.group(1)) if m else 999, line)


@pytest.fixture(autouse=True, scope="session")
def _continuum_logging_configured() -> None:
    """continuum configures structlog at its first line written (issue 27). A test that
    saves structlog's configuration and restores it afterwards (``capture_logs``, the
    transport tests' ``reset_defaults``) would otherwise save the defaults before that
    first line and restore them after it, leaving structlog on its defaults (stdout) while
    continuum believes it configured: configured once, up front, in every worker."""
    from continuum import log

    log._configure_default()

"""``continuum benchmark --frameworks``: the harness counts what the outbox shows."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from continuum.bench.frameworks import FrameworkCase, FrameworksReport, render, run_frameworks
from continuum.cli.main import cli
from tests.adapters.conftest import require


def test_one_framework_alone_duplicates_and_with_continuum_does_not(tmp_path: Path) -> None:
    require("pydantic-ai")
    report = run_frameworks(
        workdir=tmp_path, frameworks=["pydantic-ai"], scenarios=["after_effect"], jobs=2
    )
    alone, cont = sorted(report.cases, key=lambda c: c.mode)
    assert (alone.mode, alone.duplicate_effects, alone.missing_effects) == ("alone", 1, 0)
    assert (cont.mode, cont.duplicate_effects, cont.missing_effects) == ("continuum", 0, 0)
    assert cont.unknown_reported == ["send_invoice:INV-2"] and cont.finished and report.passed
    text = "\n".join(render(report))
    assert "pydantic-ai  after_effect" in text and "continuum: 0 duplicate effects" in text


def test_the_report_fails_when_continuum_shows_a_duplicate() -> None:
    case = FrameworkCase(
        framework="x",
        scenario="after_effect",
        mode="continuum",
        flavor="sync",
        killed=True,
        effects=4,
        duplicate_effects=1,
        missing_effects=0,
        unknown_reported=[],
        resume_exit=0,
        finished=True,
        seconds=1.0,
    )
    report = FrameworksReport(cases=[case], skipped={}, seconds=1.0)
    assert not report.passed and "FAILED" in render(report)[-1]


def test_the_cli_option_is_wired() -> None:
    result = CliRunner().invoke(cli, ["benchmark", "--help"])
    assert result.exit_code == 0 and "--frameworks" in result.output

"""The recovery benchmark runs for real and its numbers mean what they say.

No timing is asserted here (contract §13): only that every scenario runs with real worker
processes killed by SIGKILL, that the metrics are well formed, that continuum shows
no duplicate side effect and detects every stale dependency, and that the baselines
do show the failures the benchmark exists to measure (a negative control).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from continuum.bench import SCENARIO_NAMES, STRATEGIES
from continuum.bench.contested import run_contested
from continuum.bench.drift import IDENTITIES, run_drift
from continuum.bench.midrun import run_midrun
from continuum.bench.report import (
    ContestedResult,
    DriftResult,
    MidRunResult,
    ScenarioResult,
    SchemaResult,
    checks,
)
from continuum.bench.schema import run_schema
from continuum.cli.main import run

TOTAL = 6


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One real run of `continuum benchmark --json` (every scenario, every strategy)."""
    workdir = tmp_path_factory.mktemp("bench")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = run(
            ["benchmark", "--total", str(TOTAL), "--json", "--quiet", "--workdir", str(workdir)]
        )
    doc: dict[str, Any] = json.loads(out.getvalue())
    doc["exit_code"] = code
    doc["workdir"] = workdir
    return doc


def _row(report: dict[str, Any], scenario: str, strategy: str) -> dict[str, Any]:
    rows = [
        r for r in report["scenarios"] if r["scenario"] == scenario and r["strategy"] == strategy
    ]
    assert len(rows) == 1
    return rows[0]


def test_benchmark_json_is_one_document_with_every_scenario_and_strategy(
    report: dict[str, Any],
) -> None:
    assert report["ok"] is True and report["exit_code"] == 0 and report["passed"] is True
    pairs = {(r["scenario"], r["strategy"]) for r in report["scenarios"]}
    assert pairs == {(s, st) for s in SCENARIO_NAMES for st in STRATEGIES}
    assert {d["identity"] for d in report["drift"]} == set(IDENTITIES)


@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_metrics_are_well_formed(report: dict[str, Any], scenario: str, strategy: str) -> None:
    r = _row(report, scenario, strategy)
    assert r["total"] == TOTAL
    assert r["side_effects"] == TOTAL - r["missing_side_effects"] + r["duplicate_side_effects"]
    assert 0 <= r["duplicate_work"] <= r["work_executions"]
    assert r["duplicate_work_ratio"] == round(r["duplicate_work"] / TOTAL, 4)
    assert r["context_bytes"] >= 0 and r["full_log_bytes"] > 0
    assert r["context_ratio"] == round(r["context_bytes"] / r["full_log_bytes"], 4)
    assert 0 <= r["stale_detected"] <= r["stale_dependencies"]


@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_continuum_never_duplicates_a_side_effect_and_loses_none(
    report: dict[str, Any], scenario: str
) -> None:
    r = _row(report, scenario, "continuum")
    assert r["duplicate_side_effects"] == 0
    assert r["missing_side_effects"] == 0
    assert r["side_effects"] == TOTAL
    # The outbox itself agrees: one line per invoice.
    outbox = Path(report["workdir"]) / "scenarios" / scenario / "continuum" / "outbox"
    assert (
        sorted(len(p.read_text().splitlines()) for p in outbox.glob("invoice-*.txt")) == [1] * TOTAL
    )


def test_continuum_detects_the_changed_dataset(report: dict[str, Any]) -> None:
    r = _row(report, "dataset_change", "continuum")
    assert r["stale_dependencies"] == 1 and r["stale_detected"] == 1
    assert r["verdict"] == "repair_and_resume"
    # The staleness reached what rests on the dataset: evidence, finding, decision.
    assert r["stale_components"] == 4
    assert r["final_verdict"] == "resume"  # after refreshing the dependency and re-deriving


def test_continuum_reports_the_interrupted_delivery_as_uncertain(report: dict[str, Any]) -> None:
    r = _row(report, "unknown_side_effect", "continuum")
    assert r["verdict"] == "request_human" and r["uncertain_reported"] == 1 and r["reconciled"] == 1


def test_baselines_show_what_the_benchmark_measures(report: dict[str, Any]) -> None:
    # Negative control: if the harness could not see duplicates or misses, a 0 above
    # would mean nothing.
    replay = _row(report, "process_crash", "full_replay")
    assert replay["duplicate_side_effects"] == TOTAL // 2
    assert _row(report, "unknown_side_effect", "naive_checkpoint")["duplicate_side_effects"] == 1
    assert _row(report, "partial_completion", "naive_checkpoint")["missing_side_effects"] >= 1
    assert all(
        _row(report, "dataset_change", s)["stale_detected"] == 0
        for s in ("full_replay", "naive_checkpoint")
    )


def test_drift_with_a_stable_key_or_the_fallback_sends_once(tmp_path: Path) -> None:
    results = {(d.variant, d.identity): d for d in run_drift(tmp_path)}
    for variant in ("renamed_fields", "path_form", "renamed_and_path", "reformatted_value"):
        assert results[(variant, "stable_key")].duplicate_side_effects == 0
        assert results[(variant, "no_ledger")].duplicate_side_effects == 1
        assert results[(variant, "exact_arguments")].duplicate_side_effects == 1
    for variant in ("renamed_fields", "renamed_and_path"):
        assert results[(variant, "fallback")].matched_by == "fallback"
        assert results[(variant, "fallback")].duplicate_side_effects == 0
    assert results[("path_form", "fallback")].duplicate_side_effects == 0
    # A changed value is a different call to any generic rule: only a key prevents it.
    assert results[("reformatted_value", "fallback")].duplicate_side_effects == 1


def test_checks_fail_on_a_duplicate_or_a_missed_stale_dependency() -> None:
    base: dict[str, Any] = dict(
        scenario="dataset_change",
        strategy="continuum",
        total=4,
        killed_at="between:1",
        work_executions=4,
        duplicate_work=0,
        side_effects=4,
        duplicate_side_effects=0,
        missing_side_effects=0,
        stale_dependencies=1,
        stale_detected=1,
        stale_components=4,
        context_bytes=10,
        full_log_bytes=100,
        verdict="repair_and_resume",
        final_verdict="resume",
        uncertain_reported=0,
        reconciled=0,
        first_run_seconds=0.1,
        resume_seconds=0.1,
    )
    assert all(c.ok for c in checks([ScenarioResult(**base)], []))
    dup = ScenarioResult(**{**base, "side_effects": 5, "duplicate_side_effects": 1})
    missed = ScenarioResult(**{**base, "stale_detected": 0})
    assert not all(c.ok for c in checks([dup], []))
    assert not all(c.ok for c in checks([missed], []))
    drift = DriftResult(
        variant="renamed_fields",
        change="",
        identity="fallback",
        deliveries=2,
        duplicate_side_effects=1,
        matched_by=None,
    )
    assert not all(c.ok for c in checks([], [drift]))
    replayed = SchemaResult(
        strategy="pinned", status="started", attempts=2, runs_under_new_schema=1
    )
    assert not all(c.ok for c in checks([], [], [replayed]))


def test_a_mid_run_drift_is_caught_within_an_interval_and_without_the_check_not_at_all(
    tmp_path: Path,
) -> None:
    results = {r.strategy: r for r in run_midrun(tmp_path)}
    periodic, off = results["periodic"], results["resume_only"]
    assert periodic.stopped_at is not None and periodic.sent_after_change <= 25
    assert (off.stopped_at, off.sent_after_change) == (None, 40)  # negative control
    assert periodic.caught_at_resume and off.caught_at_resume  # resume sees it either way
    assert all(c.ok for c in checks([], [], None, list(results.values())))
    late = MidRunResult(
        strategy="periodic", sent_after_change=40, stopped_at=None, caught_at_resume=True
    )
    assert not all(c.ok for c in checks([], [], None, [late]))


def test_a_changed_tool_schema_is_not_replayed_when_pinned_and_is_when_not(tmp_path: Path) -> None:
    results = {r.strategy: r for r in run_schema(tmp_path)}
    pinned, unpinned = results["pinned"], results["unpinned"]
    assert (pinned.status, pinned.runs_under_new_schema, pinned.attempts) == ("version_drift", 0, 1)
    # Negative control: without the pin the contract re-runs it, under the new schema.
    assert (unpinned.status, unpinned.runs_under_new_schema, unpinned.attempts) == ("started", 1, 2)
    assert all(c.ok for c in checks([], [], list(results.values())))


def test_the_cli_default_batch_size_is_the_library_default() -> None:
    from continuum.bench import DEFAULT_TOTAL
    from continuum.cli.benchmark import benchmark_cmd

    total = next(p for p in benchmark_cmd.params if p.name == "total")
    assert total.default == DEFAULT_TOTAL


def test_a_contested_observation_on_a_high_risk_branch_asks_a_person_and_ungated_pays(
    tmp_path: Path,
) -> None:
    results = {r.strategy: r for r in run_contested(tmp_path)}
    gated, ungated = results["gated"], results["ungated"]
    assert (gated.observation, gated.answer, gated.payments) == ("contested", "request_human", 0)
    assert gated.asked_a_person
    # Negative control: the agent alone takes the branch on one reading, and pays.
    assert (ungated.payments, ungated.asked_a_person) == (1, False)
    assert all(c.ok for c in checks([], [], None, None, list(results.values())))
    paid = ContestedResult(
        strategy="gated", observation="verified", answer="resume", payments=1, asked_a_person=False
    )
    assert not all(c.ok for c in checks([], [], None, None, [paid]))

"""What the recovery benchmark reports: per-pair metrics, the checks, and a text table."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, computed_field

# Drift variants the contract promises the fallback key tolerates (references/contract.md §6): renamed fields
# and relative/absolute forms of one path. A reformatted value is outside that promise.
FALLBACK_TOLERATES = ("renamed_fields", "path_form", "renamed_and_path")


class ScenarioResult(BaseModel):
    """One (scenario, strategy) pair, counted from the outbox and the work log."""

    model_config = ConfigDict(frozen=True)

    scenario: str
    strategy: str
    total: int
    killed_at: str
    work_executions: int
    duplicate_work: int
    side_effects: int
    duplicate_side_effects: int
    missing_side_effects: int
    stale_dependencies: int
    stale_detected: int
    stale_components: int  # derived state reported stale or conflicted at the restart
    context_bytes: int
    full_log_bytes: int
    verdict: str | None
    final_verdict: str | None
    uncertain_reported: int
    reconciled: int
    first_run_seconds: float
    resume_seconds: float

    @computed_field  # type: ignore[prop-decorator]
    @property
    def duplicate_work_ratio(self) -> float:
        return round(self.duplicate_work / self.total, 4) if self.total else 0.0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def context_ratio(self) -> float | None:
        return round(self.context_bytes / self.full_log_bytes, 4) if self.full_log_bytes else None


class DriftResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    variant: str
    change: str
    identity: str
    deliveries: int
    duplicate_side_effects: int
    matched_by: str | None


class SchemaResult(BaseModel):
    """The tool-schema-change scenario (``bench/schema.py``) under one strategy."""

    model_config = ConfigDict(frozen=True)

    strategy: str  # pinned | unpinned
    status: str  # what the resumed intercept answered
    attempts: int  # performed attempts (outbox lines)
    runs_under_new_schema: int


class MidRunResult(BaseModel):
    """The drift-during-a-run scenario (``bench/midrun.py``) under one strategy."""

    model_config = ConfigDict(frozen=True)

    strategy: str  # periodic | resume_only
    sent_after_change: int  # invoices sent after the input file changed
    stopped_at: int | None  # the step the batch was stopped at (None: never)
    caught_at_resume: bool  # whether a resume afterwards sees the change


class ContestedResult(BaseModel):
    """The contested-observation scenario (``bench/contested.py``) under one strategy."""

    model_config = ConfigDict(frozen=True)

    strategy: str  # gated | ungated
    observation: str | None  # its status as recorded (None: not recorded)
    answer: str  # what the branch was answered (ungated: "taken")
    payments: int  # payments performed (outbox lines)
    asked_a_person: bool  # whether the run's verdict waits for a person


class Check(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    ok: bool
    detail: str


class BenchmarkReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    total: int
    machine: dict[str, object]
    scenarios: list[ScenarioResult]
    drift: list[DriftResult]
    schema_change: list[SchemaResult] = []
    mid_run: list[MidRunResult] = []
    contested: list[ContestedResult] = []
    checks: list[Check]
    seconds: float

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        return all(c.ok for c in self.checks)


def checks(
    scenarios: list[ScenarioResult],
    drift: list[DriftResult],
    schema_change: list[SchemaResult] | None = None,
    mid_run: list[MidRunResult] | None = None,
    contested: list[ContestedResult] | None = None,
) -> list[Check]:
    out: list[Check] = []
    for c in contested or []:
        if c.strategy == "gated":
            out.append(
                Check(
                    name="contested observation: a high-risk branch asks a person",
                    ok=c.payments == 0 and c.answer == "request_human" and c.asked_a_person,
                    detail=f"{c.payments} payment(s); the branch was answered {c.answer}",
                )
            )
    for m in mid_run or []:
        if m.strategy == "periodic":
            out.append(
                Check(
                    name="drift mid-run: caught within one interval of the periodic check",
                    ok=m.stopped_at is not None and m.sent_after_change <= 25,
                    detail=f"{m.sent_after_change} sent after the change; stopped at step "
                    f"{m.stopped_at}",
                )
            )
    for sc in schema_change or []:
        if sc.strategy == "pinned":
            out.append(
                Check(
                    name="schema change: nothing re-runs under a changed tool schema",
                    ok=sc.runs_under_new_schema == 0 and sc.status == "version_drift",
                    detail=f"{sc.runs_under_new_schema} run(s) under the new schema; "
                    f"the resumed intercept answered {sc.status}",
                )
            )
    for r in scenarios:
        if r.strategy != "continuum":
            continue
        out.append(
            Check(
                name=f"{r.scenario}: no duplicate side effect",
                ok=r.duplicate_side_effects == 0,
                detail=f"{r.duplicate_side_effects} duplicate(s) of {r.side_effects}",
            )
        )
        out.append(
            Check(
                name=f"{r.scenario}: every item delivered",
                ok=r.missing_side_effects == 0,
                detail=f"{r.missing_side_effects} missing of {r.total}",
            )
        )
        out.append(
            Check(
                name=f"{r.scenario}: every stale dependency detected",
                ok=r.stale_detected == r.stale_dependencies,
                detail=f"{r.stale_detected} of {r.stale_dependencies} detected",
            )
        )
    for d in drift:
        if d.identity == "stable_key" or (
            d.identity == "fallback" and d.variant in FALLBACK_TOLERATES
        ):
            out.append(
                Check(
                    name=f"drift {d.variant}: {d.identity} prevents the duplicate",
                    ok=d.duplicate_side_effects == 0,
                    detail=f"{d.deliveries} deliveries, matched by {d.matched_by}",
                )
            )
    return out


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def _kib(n: int) -> str:
    return f"{n / 1024:.1f}K" if n >= 1024 else f"{n}B"


def render(report: BenchmarkReport) -> list[str]:
    """The readable tables (the TTY form of ``continuum benchmark``)."""
    lines = [
        f"Recovery scenarios: a batch of {report.total} invoices; the first process is "
        "SIGKILLed, a fresh one resumes.",
        "",
    ]
    rows = []
    for r in report.scenarios:
        ratio = f"{r.context_ratio:.1%}" if r.context_ratio is not None else "-"
        rows.append(
            [
                r.scenario,
                r.strategy,
                f"{r.duplicate_work_ratio:.1%}",
                str(r.side_effects),
                str(r.duplicate_side_effects),
                str(r.missing_side_effects),
                f"{r.stale_detected}/{r.stale_dependencies}",
                f"{_kib(r.context_bytes)} / {_kib(r.full_log_bytes)}",
                ratio,
                f"{r.verdict} -> {r.final_verdict}" if r.verdict else "-",
            ]
        )
    lines += _table(
        [
            "scenario",
            "strategy",
            "dup work",
            "effects",
            "dup effects",
            "missing",
            "stale found",
            "context / full log",
            "ratio",
            "verdict at restart -> end",
        ],
        rows,
    )
    lines += [
        "",
        "Argument drift: INV-7 sent once, then again in drifted form (duplicate side effects):",
        "",
    ]
    variants = list(dict.fromkeys(d.variant for d in report.drift))
    identities = list(dict.fromkeys(d.identity for d in report.drift))
    cell = {(d.variant, d.identity): d for d in report.drift}
    drows = []
    for v in variants:
        row = [v, ""]
        for ident in identities:
            d = cell.get((v, ident))
            row.append(
                "-"
                if d is None
                else f"{d.duplicate_side_effects}" + (f" ({d.matched_by})" if d.matched_by else "")
            )
        drows.append(row)
    lines += _table(["variant", "", *identities], drows)
    if report.schema_change:
        lines += [
            "",
            "Tool schema changed between crash and resume (a safe effect, interrupted):",
            "",
        ]
        lines += _table(
            ["strategy", "resumed intercept", "attempts", "runs under the new schema"],
            [
                [sc.strategy, sc.status, str(sc.attempts), str(sc.runs_under_new_schema)]
                for sc in report.schema_change
            ],
        )
    if report.mid_run:
        lines += [
            "",
            "The batch's input file changed mid-run (invoices sent after the change):",
            "",
        ]
        lines += _table(
            ["strategy", "sent after the change", "stopped at step", "seen at resume"],
            [
                [
                    m.strategy,
                    str(m.sent_after_change),
                    "-" if m.stopped_at is None else str(m.stopped_at),
                    "yes" if m.caught_at_resume else "no",
                ]
                for m in report.mid_run
            ],
        )
    if report.contested:
        lines += [
            "",
            "A contested observation on a high-risk branch (the DOM and the screenshot disagree):",
            "",
        ]
        lines += _table(
            ["strategy", "observation", "branch answered", "payments", "waits for a person"],
            [
                [
                    c.strategy,
                    c.observation or "-",
                    c.answer,
                    str(c.payments),
                    "yes" if c.asked_a_person else "no",
                ]
                for c in report.contested
            ],
        )
    lines += [""]
    for c in report.checks:
        if not c.ok:
            lines.append(f"FAILED  {c.name}: {c.detail}")
    passed = sum(c.ok for c in report.checks)
    lines.append(
        f"{passed}/{len(report.checks)} checks hold"
        + (
            " (continuum: 0 duplicate side effects, every stale dependency detected)"
            if report.passed
            else ""
        )
        + f"; {report.seconds:.1f} s"
    )
    return lines

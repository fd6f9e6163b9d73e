"""Budgets and usage: budget (a person sets or raises a run's limits), usage (the usage
ledger: one row per attempt that carried a cost)."""

from __future__ import annotations

from typing import Any

import click

from continuum.cli.common import common, person_via, require_person, runtime
from continuum.cli.output import Line, Settings, ask, emit, origin_label
from continuum.errors import UsageError
from continuum.ledger.budget import dollars, usd_micros
from continuum.types import Origin
from continuum.untrusted import quoted


def _limits_words(limits: dict[str, Any] | None) -> str:
    if not limits or all(limits.get(k) is None for k in ("usd_micros", "tokens")):
        return "no limits"
    parts = []
    if limits.get("usd_micros") is not None:
        parts.append(f"{dollars(limits['usd_micros'])} USD")
    if limits.get("tokens") is not None:
        parts.append(f"{limits['tokens']} tokens")
    return " and ".join(parts)


def _cost_words(cost: dict[str, Any] | None) -> str:
    if not cost:
        return "-"
    parts = []
    if "usd_micros" in cost:
        parts.append(f"{dollars(cost['usd_micros'])} USD")
    if "tokens" in cost:
        parts.append(f"{cost['tokens']} tokens")
    return ", ".join(parts) or "-"


@click.command("budget")
@click.argument("run_id")
@click.option("--usd", default=None, help="The run's limit in US dollars (e.g. 25.00).")
@click.option("--tokens", type=click.IntRange(min=0), default=None, help="The run's token limit.")
@click.option("--reason", default=None, help="Why (recorded with the limits).")
@click.option(
    "--yes",
    "-y",
    is_flag=True,
    help="Do not ask: for a person's own script. Without it, budget asks on a terminal "
    "and refuses when stdin is not one.",
)
@common
def budget_cmd(
    s: Settings, run_id: str, usd: str | None, tokens: int | None, reason: str | None, yes: bool
) -> None:
    """As a person, set RUN's limits in USD and tokens (a limit left out: none).

    Recorded with origin human: raising a limit is a person's act (an agent may only set
    a first one or lower one). An intercept whose estimate would pass a limit answers
    budget_exceeded; effects in flight or unknown count their estimate.
    """
    require_person(yes, "setting a run's budget", f"continuum budget {run_id} --usd ...")
    rt = runtime(s, origin=Origin.HUMAN)
    before = rt.state(run_id).budget
    if not yes:
        now = _limits_words(before)
        new = {"usd_micros": None, "tokens": tokens}
        if usd is not None:
            new["usd_micros"] = usd_micros(usd, "--usd")
        if not ask(
            s, f"Record, as a person: run {quoted(run_id)}'s limits {now} -> {_limits_words(new)}?"
        ):
            raise UsageError(
                "budget declined; nothing was recorded",
                code="usage.declined",
                hint="run it again when you have decided",
            )
    limits = rt.set_budget(run_id, usd=usd, tokens=tokens, reason=reason, via=person_via(yes))
    emit(
        s,
        {"run_id": run_id, "budget": {k: limits.get(k) for k in ("usd_micros", "tokens")}},
        [f"run {quoted(run_id)}'s limits: {_limits_words(limits)} (recorded as human)"],
    )


@click.command("usage")
@click.argument("run_id")
@common
def usage_cmd(s: Settings, run_id: str) -> None:
    """RUN's usage ledger: one row per attempt that carried a cost (estimate, actual,
    who), what is spent and reserved, and the limits."""
    report = runtime(s).usage(run_id)
    lines: list[Line] = []
    for row in report["rows"]:
        lines.append(
            f"{quoted(row['action_key'], limit=120)} attempt {row['attempt']} ({row['status']}): "
            f"estimate {_cost_words(row.get('estimate'))}, actual {_cost_words(row.get('actual'))}"
            + origin_label(row.get("by"))
        )
    spent, reserved = report["spent"], report["reserved"]
    lines.append(
        f"spent {dollars(spent['usd_micros'])} USD, {spent['tokens']} tokens; reserved "
        f"(in flight or unknown, at their estimate) {dollars(reserved['usd_micros'])} USD, "
        f"{reserved['tokens']} tokens; limits: {_limits_words(report['limits'])}"
    )
    family = report.get("family")
    if family is not None:  # a parent's budget counts every run below it
        fs, fr = family["spent"], family["reserved"]
        lines.append(
            f"with its {len(family['runs']) - 1} run(s) below: spent "
            f"{dollars(fs['usd_micros'])} USD, {fs['tokens']} tokens; reserved "
            f"{dollars(fr['usd_micros'])} USD, {fr['tokens']} tokens"
        )
    emit(s, report, lines)


COMMANDS = (budget_cmd, usage_cmd)

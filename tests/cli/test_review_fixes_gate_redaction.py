"""Review fix: the hook gate never prints a PostgreSQL password (review of issue 11/16).

What the gate tells the agent (and so the host's transcript) names the store in the
commands a person should run: a PostgreSQL URL appears as ``postgresql://user:***@host``,
its ``password=`` query parameter as ``password=***``. A SQLite path is shown as is.
"""

from __future__ import annotations

import pytest

from continuum.hooks.advice import refusal, shown_db
from continuum.hooks.args import HookArgs
from continuum.hooks.registry import Rule
from continuum.ledger.gate import InterceptResult
from continuum.rule_tables import Regex
from continuum.types import ReplayContract

SECRET = "HUNTER2xyz"


@pytest.mark.parametrize(
    "url,shown",
    [
        (
            f"postgresql://agent:{SECRET}@db.internal:5432/continuum",
            "postgresql://agent:***@db.internal:5432/continuum",
        ),
        (
            f"postgres://agent:{SECRET}@db.internal/c?sslmode=require",
            "postgres://agent:***@db.internal/c?sslmode=require",
        ),
        (
            f"postgresql://db.internal/c?user=agent&password={SECRET}&sslmode=require",
            "postgresql://db.internal/c?user=agent&password=***&sslmode=require",
        ),
        ("postgresql://agent@db.internal/c", "postgresql://agent@db.internal/c"),
        ("/srv/agent.db", "/srv/agent.db"),
    ],
)
def test_a_store_url_is_shown_without_its_password(url: str, shown: str) -> None:
    assert shown_db(url) == shown


def result(status: str) -> InterceptResult:
    return InterceptResult(
        proceed=False,
        status=status,
        action_id="act_1",
        action_key="k",
        attempt=1,
        replay=ReplayContract.NEVER,
        approval_id="apr_1",
        guidance="",
    )


@pytest.mark.parametrize("status", ["awaiting_approval", "unknown", "needs_confirmation"])
def test_what_the_gate_tells_the_agent_holds_no_password(status: str) -> None:
    args = HookArgs(
        "pre-tool", "claude-code", f"postgresql://agent:{SECRET}@db.internal:5432/continuum", "run1"
    )
    rule = Rule(
        index=1,
        line=1,
        tool=Regex("Bash"),
        action_type="send_invoice",
        key="{input.command}",
        probe="true",
    )
    text = refusal(args, "/project", rule, result(status), None)
    assert "continuum --db" in text  # negative control: the store is named ...
    assert SECRET not in text  # ... without its password
    assert "agent:***@db.internal" in text

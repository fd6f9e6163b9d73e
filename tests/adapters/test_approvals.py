"""Approvals through the effect seam and a framework adapter: a gated effect is never run
until a person allows exactly that call; the seam raises ``EffectAwaitingApproval`` (with
the approval id and the ``continuum decide`` command) or ``EffectDenied`` instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from continuum import Continuum
from continuum.errors import EffectAwaitingApproval, EffectDenied
from continuum.ledger.approvals import ApprovalRules, parse_rules
from tests.adapters.conftest import require

RUN = "r1"
RULES = ApprovalRules(rules=parse_rules('[[approval]]\naction_type = "wire_money"\n', "a.toml"))


@pytest.fixture
def cx(tmp_path: Path) -> Any:
    c = Continuum.open(str(tmp_path / "a.db"), approvals=RULES)
    c.start_run(RUN)
    yield c
    c.close()


def test_a_gated_effect_raises_until_allowed_then_runs_once(cx: Continuum) -> None:
    sent: list[dict[str, Any]] = []

    @cx.effect(RUN, "wire_money", key=lambda to, amount: f"{to}:{amount}")
    def wire(to: str, amount: int) -> str:
        sent.append({"to": to, "amount": amount})
        return f"tx-{len(sent)}"

    with pytest.raises(EffectAwaitingApproval) as waiting:
        wire("ACME", 25000)
    assert sent == []
    err = waiting.value
    assert err.code == "ledger.awaiting_approval" and err.approval_id.startswith("apr_")
    assert err.command == f"continuum decide {err.approval_id}" and err.command in err.hint
    with pytest.raises(EffectAwaitingApproval) as again:
        wire("ACME", 25000)
    assert again.value.approval_id == err.approval_id and sent == []

    cx.decide(err.approval_id, allow=True, reason="ok")
    assert wire("ACME", 25000) == "tx-1"
    assert wire("ACME", 25000) == "tx-1"  # the recorded result, not a second transfer
    assert sent == [{"to": "ACME", "amount": 25000}]


def test_a_denied_effect_raises_effect_denied_and_never_runs(cx: Continuum) -> None:
    ran: list[int] = []
    effect = cx.effect(RUN, "wire_money", key="w-9", arguments={"amount": 9})
    with pytest.raises(EffectAwaitingApproval) as waiting:
        effect.run(lambda: ran.append(1))
    cx.decide(waiting.value.approval_id, allow=False, reason="no budget")
    with pytest.raises(EffectDenied) as denied:
        effect.run(lambda: ran.append(1))
    assert (denied.value.reason, denied.value.code) == ("no budget", "ledger.approval_denied")
    assert ran == []


def test_a_guarded_langchain_tool_is_not_run_without_a_grant(cx: Continuum) -> None:
    require("langchain")
    from langchain_core.tools import tool

    from continuum.adapters.langchain import guard_tool

    calls: list[str] = []

    @tool
    def wire_money(to: str) -> str:
        """Wire money to a supplier."""
        calls.append(to)
        return f"sent to {to}"

    guarded = guard_tool(wire_money, cx, RUN)
    with pytest.raises(EffectAwaitingApproval) as waiting:
        guarded.invoke({"to": "ACME"})
    assert calls == []
    cx.decide(waiting.value.approval_id, allow=True, reason="ok")
    assert guarded.invoke({"to": "ACME"}) == "sent to ACME"
    assert guarded.invoke({"to": "ACME"}) == "sent to ACME"
    assert calls == ["ACME"]

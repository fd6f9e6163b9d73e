"""An agent over MCP is told what it can do with its tools, not which CLI flag to type
(issue 13, item 5): the edge replaces the core's CLI-flavoured hints where they differ."""

from __future__ import annotations

import pytest

from continuum.errors import ContinuumError, IntegrityError, LedgerError, NotFoundError
from continuum.mcp.tools import MCP_HINTS, mcp_hint


@pytest.mark.parametrize("code", sorted(MCP_HINTS))
def test_each_mapped_code_gets_a_hint_naming_a_tool_not_a_command(code: str) -> None:
    error = ContinuumError("x", code=code, hint="list actions with `continuum actions r1`")
    hint = mcp_hint(error)
    assert "continuum_" in hint and "`continuum " not in hint


def test_damage_tells_the_agent_to_stop_and_ask_a_person() -> None:
    hint = mcp_hint(IntegrityError("damaged", code="integrity.hash_mismatch", hint="run x"))
    assert hint.startswith("stop") and "person" in hint


def test_other_codes_keep_the_core_hint() -> None:
    error = LedgerError("wide", code="ledger.replay_widening", hint="intercept again narrower")
    assert mcp_hint(error) == "intercept again narrower"
    assert (
        mcp_hint(NotFoundError("gone", code="not_found.run", hint="cli"))
        == MCP_HINTS["not_found.run"]
    )

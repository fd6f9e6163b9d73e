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


def test_the_instructions_name_tools_so_a_model_finds_them_on_every_host() -> None:
    """Hosts show tools under names of their own (seen on the real binaries, tests/hosts/):
    the instructions name each tool by the ending every host keeps, give the host forms,
    and every tool they name exists."""
    import re

    from continuum.mcp.tools import INSTRUCTIONS, tool_table

    names = {spec.name for spec, _ in tool_table()}
    named = set(re.findall(r"\bcontinuum_[a-z_]+", INSTRUCTIONS))
    assert {"continuum_resume", "continuum_intercept_action"} <= named
    forms = {
        "mcp__continuum__continuum_resume",  # Claude Code, Codex
        "mcp_continuum_continuum_resume",  # Gemini CLI
        "continuum_continuum_resume",  # Kilo Code
    }
    assert all(form in INSTRUCTIONS for form in forms)
    bare = {n for n in named if not n.startswith("continuum_continuum_")}
    assert bare <= names, bare - names
    assert "ends with" in INSTRUCTIONS

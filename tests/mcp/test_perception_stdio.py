"""Observations and plan branches over MCP (issue 24, item 1): the real ``continuum-mcp``
over stdio, an agent that observes and asks before a branch.

- the agent's own readings (two signal names) never verify: a high-risk branch answers
  ``request_human`` and ``continuum_resume`` waits on ``resolve_branch:ID``; a person's
  ``continuum resolve-branch`` (the real CLI) resolves it, recorded as human;
- the agent's environment reading of a declared file is checked by continuum itself:
  a wrong checksum is contested and even a low-risk branch asks a person; the right one
  verifies it (control);
- the calls are denied to a client not on the allowlist, and nothing is written.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.types import TextContent

from continuum.eventlog.events import EventType
from continuum.runtime.facade import Continuum
from continuum.serving.secrets import ALLOW_ENV
from continuum.store import open_store
from continuum.types import Origin

from .conftest import BOUND, ServerSite, structured

pytestmark = pytest.mark.anyio
RUN = "checkout"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _seed(site: ServerSite, data: Path | None = None) -> None:
    rt = Continuum(open_store(str(site.db)))
    try:
        rt.start_run(RUN, "pay the March invoice")
        if data is not None:
            rt.declare_dependencies(RUN, files=[str(data)])
    finally:
        rt.close()


def _events(site: ServerSite) -> list[Any]:
    rt = Continuum(open_store(str(site.db)))
    try:
        return rt.events(RUN)
    finally:
        rt.close()


async def _call(c: Any, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    return structured(await c.call_tool(tool, {"run_id": RUN, **args}))


async def test_an_agents_readings_do_not_verify_and_a_person_resolves_the_branch(
    site: ServerSite,
) -> None:
    site.env = {ALLOW_ENV: "agent"}
    _seed(site)
    async with site.client() as c:
        with anyio.fail_after(BOUND):
            for signal in ("dom", "screenshot_ocr"):
                seen = await _call(
                    c,
                    "continuum_observe",
                    {"subject": "pay button", "value": "Pay 120 EUR", "signal": signal},
                )
            assert (seen["status"], seen["independent_signals"]) == ("unverified", 1)
            verdict = await _call(
                c,
                "continuum_resolve_branch",
                {
                    "branch_id": "pay",
                    "choice": "pay",
                    "observations": ["pay button"],
                    "risk": "high",
                },
            )
            assert verdict["mode"] == "request_human" and verdict["status"] == "needs_human"
            assert '"pay button" is unverified' in verdict["reason"]
            resumed = await _call(c, "continuum_resume", {})
            assert resumed["mode"] == "request_human"
            assert "resolve_branch:pay" in resumed["required_actions"]
            low = await _call(
                c,
                "continuum_resolve_branch",
                {
                    "branch_id": "look",
                    "choice": "read",
                    "observations": ["pay button"],
                    "risk": "low",
                },
            )
            assert low["mode"] == "resume"  # control: low risk, not an environment observation
    sources = {str(e.source) for e in _events(site) if e.type == EventType.PERCEPTION_OBSERVED}
    assert sources == {"external_agent"}
    # the person, at the real CLI (its own script: --yes)
    env = {**os.environ, "CONTINUUM_DB": str(site.db)}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "continuum",
            "resolve-branch",
            RUN,
            "pay",
            "--choice",
            "pay",
            "--yes",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=BOUND,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    last = _events(site)[-1]
    assert last.type == EventType.BRANCH_RESOLVED and last.source == Origin.HUMAN
    async with site.client() as c:
        with anyio.fail_after(BOUND):
            resumed = await _call(c, "continuum_resume", {})
    assert "resolve_branch:pay" not in resumed["required_actions"]


async def test_continuum_checks_an_environment_reading_against_the_declared_file(
    site: ServerSite, tmp_path: Path
) -> None:
    site.env = {ALLOW_ENV: "agent"}
    data = tmp_path / "prices.csv"
    data.write_text("A,120\n", encoding="utf-8")
    _seed(site, data)
    name = f"file:{data}"
    async with site.client() as c:
        with anyio.fail_after(BOUND):
            wrong = await _call(
                c,
                "continuum_observe",
                {
                    "subject": name,
                    "value": "sha256:" + "0" * 64,
                    "signal": "read",
                    "kind": "environment",
                },
            )
            assert wrong["status"] == "contested" and wrong["continuum_checked"] is True
            own = [r for r in wrong["readings"] if r["origin"] == "deterministic"]
            assert [r["signal"] for r in own] == ["continuum:file"]
            branch = {"branch_id": "reprice", "choice": "go", "observations": [name], "risk": "low"}
            contested = await _call(c, "continuum_resolve_branch", branch)
            assert contested["mode"] == "request_human"
            assert "is contested" in contested["reason"]
            right = await _call(
                c,
                "continuum_observe",
                {
                    "subject": name,
                    "value": own[0]["value"],
                    "signal": "read",
                    "kind": "environment",
                },
            )
            assert right["status"] == "verified"  # the agent and continuum agree
            again = await _call(c, "continuum_resolve_branch", {**branch, "risk": "high"})
            assert again["mode"] == "resume"


async def test_a_client_not_on_the_allowlist_is_denied_and_nothing_is_written(
    site: ServerSite,
) -> None:
    site.env = {ALLOW_ENV: "someone-else"}
    _seed(site)
    before = len(_events(site))
    async with site.client() as c:
        with anyio.fail_after(BOUND):
            for tool, args in (
                ("continuum_observe", {"subject": "b", "value": 1, "signal": "dom"}),
                (
                    "continuum_resolve_branch",
                    {"branch_id": "p", "choice": "c", "observations": ["b"]},
                ),
            ):
                result = await c.call_tool(tool, {"run_id": RUN, **args})
                said = result.content[0]
                assert result.is_error and isinstance(said, TextContent) and "Denied" in said.text
    assert len(_events(site)) == before

"""Version pinning over MCP (issue 24, item 3): the real ``continuum-mcp`` over stdio,
SIGKILLed while it owns an intercepted ``safe`` action; a fresh server meets the action
again under another tool schema and refuses to re-run it (``version_drift``), and
``continuum_resume`` lists the drift. Negative control: under the same schema the fresh
server lets the contract re-run it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import anyio
import pytest

from continuum.runtime.facade import Continuum
from continuum.serving.secrets import ALLOW_ENV
from continuum.store import open_store

from .conftest import BOUND, ServerSite, structured

pytestmark = pytest.mark.anyio
RUN = "pinned"
A, B = "sha256:schema-a", "sha256:schema-b"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _owner_pid(db: Path) -> int:
    rt = Continuum(open_store(str(db), create=False))
    try:
        [action] = rt.actions(RUN)
        assert action.versions == {"tool_schema_hash": A, "model": "model-1"}
        pid = action.owner.get("pid")
        assert isinstance(pid, int)
        return pid
    finally:
        rt.close()


async def _interrupted(site: ServerSite) -> None:
    """Intercept under schema A, then SIGKILL the server that owns the action."""
    with contextlib.suppress(Exception):  # the server dies under the session
        async with site.client() as c:
            with anyio.fail_after(BOUND):
                await c.call_tool("continuum_record_progress", {"run_id": RUN, "goal": "fetch"})
                first = structured(
                    await c.call_tool(
                        "continuum_intercept_action",
                        {
                            "run_id": RUN,
                            "action_type": "fetch",
                            "key": "page-1",
                            "replay": "safe",
                            "tool_schema_hash": A,
                            "model": "model-1",
                        },
                    )
                )
                assert first["proceed"] is True
                os.kill(_owner_pid(site.db), signal.SIGKILL)


async def _again(site: ServerSite, schema: str) -> tuple[dict[str, object], dict[str, object]]:
    async with site.client() as c:
        with anyio.fail_after(BOUND):
            met = structured(
                await c.call_tool(
                    "continuum_intercept_action",
                    {
                        "run_id": RUN,
                        "action_type": "fetch",
                        "key": "page-1",
                        "replay": "safe",
                        "tool_schema_hash": schema,
                    },
                )
            )
            resumed = structured(
                await c.call_tool(
                    "continuum_resume",
                    {"run_id": RUN, "tool_schema_hashes": {"fetch": B}},
                )
            )
    return met, resumed


async def test_a_changed_tool_schema_stops_the_rerun_of_an_interrupted_safe_action(
    site: ServerSite,
) -> None:
    site.env = {ALLOW_ENV: "agent"}
    await _interrupted(site)
    met, resumed = await _again(site, B)
    assert (met["proceed"], met["status"]) == (False, "version_drift")
    assert A in str(met["guidance"]) and B in str(met["guidance"])
    drifts = resumed["version_drift"]
    assert isinstance(drifts, list) and len(drifts) == 1
    assert (drifts[0]["field"], drifts[0]["recorded"], drifts[0]["current"]) == (
        "tool_schema_hash",
        A,
        B,
    )


async def test_control_under_the_same_schema_the_contract_reruns_it(site: ServerSite) -> None:
    site.env = {ALLOW_ENV: "agent"}
    await _interrupted(site)
    met, _ = await _again(site, A)
    assert (met["proceed"], met["status"], met["attempt"]) == (True, "started", 2)

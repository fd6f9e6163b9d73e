"""Periodic revalidation over MCP (issue 24, item 2): the real ``continuum-mcp`` over
stdio counts its intercepts with the facade's default policy (every 25 steps); a declared
file changed under the run holds the next effect (``revalidation_required``) within one
interval. Negative control: with the file unchanged, all the calls proceed.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from continuum.recovery.revalidation import DEFAULT_EVERY_STEPS
from continuum.runtime.facade import Continuum
from continuum.serving.secrets import ALLOW_ENV
from continuum.store import open_store

from .conftest import BOUND, ServerSite, structured

pytestmark = pytest.mark.anyio
RUN = "batch"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _seed(site: ServerSite, data: Path) -> None:
    """The run and its declared input file, as the program that started it wrote them."""
    rt = Continuum(open_store(str(site.db)))
    try:
        rt.start_run(RUN, "send the batch")
        rt.declare_dependencies(RUN, files=[str(data)])
    finally:
        rt.close()


async def _send_all(site: ServerSite, data: Path, change: bool) -> list[str]:
    statuses: list[str] = []
    async with site.client() as c:
        with anyio.fail_after(BOUND):
            for i in range(DEFAULT_EVERY_STEPS + 5):
                if change and i == 3:
                    data.write_text("rewritten\n", encoding="utf-8")
                answer = structured(
                    await c.call_tool(
                        "continuum_intercept_action",
                        {"run_id": RUN, "action_type": "send", "key": f"INV-{i}"},
                    )
                )
                statuses.append(str(answer["status"]))
                if answer["proceed"]:
                    await c.call_tool(
                        "continuum_complete_action",
                        {"run_id": RUN, "action_key": answer["action_key"]},
                    )
    return statuses


async def test_a_changed_file_holds_effects_within_one_interval_over_mcp(
    site: ServerSite, tmp_path: Path
) -> None:
    site.env = {ALLOW_ENV: "agent"}
    data = tmp_path / "invoices.csv"
    data.write_text("batch\n", encoding="utf-8")
    _seed(site, data)
    statuses = await _send_all(site, data, change=True)
    first_held = statuses.index("revalidation_required")
    assert first_held <= DEFAULT_EVERY_STEPS  # caught within one interval
    assert set(statuses[first_held:]) == {"revalidation_required"}  # and it stays held
    assert set(statuses[:first_held]) == {"started"}


async def test_control_an_unchanged_file_holds_nothing(site: ServerSite, tmp_path: Path) -> None:
    site.env = {ALLOW_ENV: "agent"}
    data = tmp_path / "invoices.csv"
    data.write_text("batch\n", encoding="utf-8")
    _seed(site, data)
    assert set(await _send_all(site, data, change=False)) == {"started"}

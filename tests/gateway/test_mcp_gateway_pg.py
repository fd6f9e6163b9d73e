"""The MCP gateway on PostgreSQL: two agents, each through its own gateway (and its own
upstream process), on one store. The effects file is the outside world both upstreams
write to. A fresh database per test (tests/contract/pg_support.py); CI sets the DSN.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import types

from continuum.runtime.facade import Continuum
from tests.contract import pg_support

from .test_mcp_gateway import call, connect, effects, gateway_command, ledger_meta

pg_support.require_driver()  # skip, or fail in CI, before anything imports psycopg
pytestmark = pytest.mark.anyio
INVOICES = [f"INV-{i}" for i in range(1, 7)]


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[str]:
    with pg_support.fresh_database("continuum_gateway") as url:
        yield url


async def test_two_agents_through_two_gateways_on_one_store_forward_each_call_once(
    project: Path, pg: str
) -> None:
    answers: dict[str, list[types.CallToolResult]] = {i: [] for i in INVOICES}

    async def agent(number: int) -> None:
        async with connect(project, gateway_command("--db", pg)) as session:
            for invoice in INVOICES:
                answers[invoice].append(
                    await call(session, "send_invoice", invoice_id=invoice, amount=number)
                )

    async with anyio.create_task_group() as tg:
        tg.start_soon(agent, 1)
        tg.start_soon(agent, 2)
    sent = effects(project)
    for invoice in INVOICES:
        assert len([line for line in sent if line.startswith(f"invoice {invoice} ")]) == 1
        kinds = sorted(
            ledger_meta(a).get("answered") or ledger_meta(a).get("refused") or "performed"
            for a in answers[invoice]
        )
        assert kinds in (["from_ledger", "performed"], ["in_progress", "performed"]), kinds
    with Continuum.open(pg, create=False) as rt:
        assert {a.status for a in rt.actions("billing")} == {"completed"}
        assert len(rt.actions("billing")) == len(INVOICES)


async def test_a_gateway_killed_after_forwarding_leaves_it_unknown_to_the_other_one(
    project: Path, pg: str
) -> None:
    async with connect(
        project, gateway_command("--db", pg), CONTINUUM_FAULTS="gateway_after_forward"
    ) as session:
        with pytest.raises(Exception):  # noqa: B017 - the gateway died: the SDK's own error
            await call(session, "send_invoice", invoice_id="INV-9", amount=9)
    async with connect(project, gateway_command("--db", pg)) as session:
        retry = await call(session, "send_invoice", invoice_id="INV-9", amount=9)
    assert retry.is_error and ledger_meta(retry)["refused"] == "unknown"
    assert effects(project) == ["invoice INV-9 9"]  # not sent again

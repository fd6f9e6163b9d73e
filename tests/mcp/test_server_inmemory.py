"""The ten tools' behaviour through the official client, in-process, in both protocol eras.

The server is the real one (``build_server(Tools(url, policy))``) and the store a real
SQLite file; only the transport is in memory (``mcp.Client(server)``: the initialize
handshake for ``mode="legacy"``, the 2026-07-28 per-request path for ``mode="auto"``).
What is written is read back with continuum's own API, not through the server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from mcp import Client
from mcp_types import CallToolResult, Implementation

from continuum import EventType, Origin
from continuum.mcp.server import build_server
from continuum.mcp.tools import Tools
from continuum.runtime.facade import Continuum
from continuum.serving.auth import Policy
from continuum.serving.secrets import ALLOW_ENV, Secret
from continuum.store import open_store
from tests.mcp.conftest import (
    MODES,
    TOOL_NAMES,
    read_events,
    result_text,
    store_bytes,
    structured,
)
from tests.mcp.request_meta import request_meta

CONFIRM_SECRET = "human-only-confirm-secret"
AGENT = "agent"


def policy(*allowed: str, confirm: bool = True) -> Policy:
    return Policy(
        allow=frozenset(allowed),
        allow_source=ALLOW_ENV,
        confirm_token=Secret(CONFIRM_SECRET) if confirm else None,
    )


class Session:
    """One in-memory client session plus the output schemas it was given."""

    def __init__(self, client: Client, schemas: dict[str, dict[str, Any]]) -> None:
        self.client = client
        self.schemas = schemas

    async def raw(
        self, tool: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None
    ) -> CallToolResult:
        return await self.client.call_tool(
            tool, arguments, meta=None if meta is None else request_meta(meta)
        )

    async def ok(
        self, tool: str, arguments: dict[str, Any] | None = None, meta: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Call, require success, check structured content against the published outputSchema
        and against the JSON text block."""
        data = structured(await self.raw(tool, arguments or {}, meta))
        jsonschema.Draft202012Validator(self.schemas[tool]).validate(data)
        return data

    async def error(
        self, tool: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None
    ) -> str:
        result = await self.raw(tool, arguments, meta)
        assert result.is_error is True, result.structured_content
        return result_text(result)


@asynccontextmanager
async def session(
    db: Path, mode: str, *, name: str = AGENT, pol: Policy | None = None
) -> AsyncIterator[Session]:
    server = build_server(Tools(str(db), pol if pol is not None else policy(AGENT)))
    info = Implementation(name=name, version="1")
    async with Client(server, client_info=info, mode=mode) as client:
        listed = await client.list_tools()
        schemas = {t.name: t.output_schema for t in listed.tools if t.output_schema is not None}
        yield Session(client, schemas)


def human(db: Path) -> Continuum:
    return Continuum(open_store(str(db), create=False), origin=Origin.HUMAN)


def human_confirms(db: Path, run_id: str) -> None:
    rt = human(db)
    try:
        rt.confirm(run_id)
    finally:
        rt.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("mode", MODES)]


async def test_every_tool_answers_structured_content_that_matches_its_output_schema_and_text(
    db: Path, mode: str
) -> None:
    async with session(db, mode) as s:
        assert sorted(s.schemas) == sorted(TOOL_NAMES)
        await s.ok("continuum_resume")
        await s.ok("continuum_record_progress", {"run_id": "r1", "goal": "ship", "total": 2})
        await s.ok(
            "continuum_checkpoint", {"run_id": "r1", "reason": "r", "env": {"dataset": "v1"}}
        )
        a = await s.ok(
            "continuum_intercept_action",
            {"run_id": "r1", "action_type": "send", "arguments": {"to": "x"}, "key": "k1"},
        )
        await s.ok(
            "continuum_complete_action",
            {
                "run_id": "r1",
                "action_key": a["action_key"],
                "external_id": "ext-1",
                "result": {"ok": True},
            },
        )
        b = await s.ok(
            "continuum_intercept_action", {"run_id": "r1", "action_type": "send", "key": "k2"}
        )
        await s.ok(
            "continuum_fail_action",
            {"run_id": "r1", "action_key": b["action_key"], "error": "boom"},
        )
        await s.ok(
            "continuum_reconcile_action",
            {"run_id": "r1", "action_key": b["action_key"], "occurred": True, "note": "checked"},
        )
        await s.ok("continuum_list_actions", {"run_id": "r1"})
        await s.ok(
            "continuum_observe",
            {"run_id": "r1", "subject": "button", "value": "Pay", "signal": "dom"},
        )
        await s.ok(
            "continuum_resolve_branch",
            {"run_id": "r1", "branch_id": "pay", "choice": "click", "observations": ["button"]},
        )
        await s.ok("continuum_handoff", {"run_id": "r1", "note": "next: INV-3"})
        await s.ok("continuum_validate", {"run_id": "r1", "env": {"dataset": "v1"}})
        await s.ok("continuum_confirm", {"run_id": "r1"}, meta={"confirmToken": CONFIRM_SECRET})
        resumed = await s.ok("continuum_resume", {"run_id": "r1", "env": {"dataset": "v1"}})
    for key in (
        "run_id",
        "mode",
        "safe",
        "next_allowed_action",
        "rationale",
        "uncertain_actions",
        "progress",
        "contract",
    ):
        assert key in resumed
    assert resumed["mode"] == "resume"


async def test_resume_without_any_run_answers_no_active_run_and_creates_no_store(
    db: Path, mode: str
) -> None:
    async with session(db, mode) as s:
        answer = await s.ok("continuum_resume")
    assert (answer["run_id"], answer["mode"]) == (None, "no_active_run")
    assert "start one with continuum_record_progress" in answer["rationale"]  # the how-to
    assert not db.exists()


async def test_resume_without_run_id_when_every_run_is_finished_answers_no_active_run(
    db: Path, mode: str
) -> None:
    async with session(db, mode) as s:
        await s.ok("continuum_record_progress", {"run_id": "r1", "goal": "g"})
        rt = Continuum(open_store(str(db)))
        rt.finish_run("r1")
        rt.close()
        answer = await s.ok("continuum_resume")
    assert (answer["run_id"], answer["mode"]) == (None, "no_active_run")
    assert "start one with continuum_record_progress" in answer["rationale"]


async def test_record_progress_creates_the_run_on_first_use_then_records_absolute_progress(
    db: Path, mode: str
) -> None:
    async with session(db, mode) as s:
        first = await s.ok(
            "continuum_record_progress",
            {"run_id": "r1", "goal": "index docs", "total": 10, "completed": 0},
        )
        second = await s.ok(
            "continuum_record_progress", {"run_id": "r1", "completed": 4, "failed": 1}
        )
        resumed = await s.ok("continuum_resume")
    assert first["goal"] == "index docs" and first["progress"]["total"] == 10
    assert second["progress"] == {"total": 10, "completed": 4, "failed": 1, "pending": 5}
    assert second["needs_human_confirmation"] is True
    assert resumed["run_id"] == "r1"  # the latest active run, found without a run_id
    types = [e.type for e in read_events(db, "r1")]
    assert types[0] == EventType.RUN_STARTED
    assert types.count(EventType.PROGRESS_RECORDED) == 2


async def test_a_completed_action_is_not_performed_again_and_returns_its_stored_result(
    db: Path, mode: str
) -> None:
    args = {
        "run_id": "r1",
        "action_type": "send_invoice",
        "arguments": {"invoice": "INV-1"},
        "key": "invoice:INV-1",
    }
    async with session(db, mode) as s:
        await s.ok("continuum_record_progress", {"run_id": "r1", "goal": "bill"})
        first = await s.ok("continuum_intercept_action", args)
        assert (first["proceed"], first["status"]) == (True, "started")
        done = await s.ok(
            "continuum_complete_action",
            {
                "run_id": "r1",
                "action_key": first["action_key"],
                "external_id": "mail-77",
                "result": {"sent": 1},
            },
        )
        again = await s.ok("continuum_intercept_action", args)
    assert done["status"] == "completed"
    assert again["proceed"] is False and again["status"] == "completed"
    assert (again["external_id"], again["previous_result"]) == ("mail-77", {"sent": 1})
    assert again["action_key"] == first["action_key"]


async def test_a_second_intercept_while_the_owner_lives_is_in_progress_and_writes_nothing(
    db: Path, mode: str
) -> None:
    args = {"run_id": "r1", "action_type": "migrate", "key": "db:v2"}
    async with session(db, mode) as s:
        await s.ok("continuum_record_progress", {"run_id": "r1", "goal": "g"})
        await s.ok("continuum_intercept_action", args)
        before = len(read_events(db, "r1"))
        again = await s.ok("continuum_intercept_action", args)
    assert (again["proceed"], again["status"]) == (False, "in_progress")
    assert len(read_events(db, "r1")) == before


async def test_fail_defaults_to_unknown_and_every_answer_naming_it_carries_the_action_key(
    db: Path, mode: str
) -> None:
    args = {"run_id": "r1", "action_type": "pay", "arguments": {"amount": 5}, "key": "pay:1"}
    async with session(db, mode) as s:
        await s.ok("continuum_record_progress", {"run_id": "r1", "goal": "pay"})
        first = await s.ok("continuum_intercept_action", args)
        key = first["action_key"]
        failed = await s.ok(
            "continuum_fail_action", {"run_id": "r1", "action_key": key, "error": "timeout"}
        )
        again = await s.ok("continuum_intercept_action", args)
        listed = await s.ok("continuum_list_actions", {"run_id": "r1"})
        resumed = await s.ok("continuum_resume", {"run_id": "r1"})
        settled = await s.ok(
            "continuum_reconcile_action",
            {"run_id": "r1", "action_key": key, "occurred": True, "external_id": "tx-9"},
        )
        after = await s.ok("continuum_intercept_action", args)
    assert failed["status"] == "unknown" and "reconcile" in failed["guidance"]
    assert (again["proceed"], again["status"], again["action_key"]) == (False, "unknown", key)
    assert "reconcile" in again["guidance"]
    assert listed["unresolved"] == [key]
    assert resumed["mode"] == "request_human"
    assert [(u["action_key"], u["status"]) for u in resumed["uncertain_actions"]] == [
        (key, "unknown")
    ]
    assert resumed["next_allowed_action"] == f"reconcile_action:{first['action_id']}"
    assert (settled["status"], settled["external_id"]) == ("completed", "tx-9")
    assert (after["proceed"], after["status"], after["external_id"]) == (False, "completed", "tx-9")


async def test_an_agents_certain_failure_needs_a_person_before_the_action_may_run_again(
    db: Path, mode: str
) -> None:
    # Only a person (or continuum's own probe) may turn "unknown" into "did not happen":
    # the agent's fail(certain=true) is recorded but does not let it run the effect again.
    args = {"run_id": "r1", "action_type": "send", "key": "mail:1"}
    async with session(db, mode) as s:
        await s.ok("continuum_record_progress", {"run_id": "r1", "goal": "g"})
        first = await s.ok("continuum_intercept_action", args)
        await s.ok("continuum_fail_action", {"run_id": "r1", "action_key": first["action_key"]})
        failed = await s.ok(
            "continuum_fail_action",
            {"run_id": "r1", "action_key": first["action_key"], "certain": True},
        )
        again = await s.ok("continuum_intercept_action", args)
        listed = await s.ok("continuum_list_actions", {"run_id": "r1"})
        resumed = await s.ok("continuum_resume", {"run_id": "r1"})
        self_settled = await s.ok(
            "continuum_reconcile_action",
            {"run_id": "r1", "action_key": first["action_key"], "occurred": False},
        )
        still = await s.ok("continuum_intercept_action", args)
        human = Continuum(open_store(str(db)), origin=Origin.HUMAN)
        human.reconcile("r1", first["action_key"], occurred=False, note="not in the mail log")
        human.close()
        retry = await s.ok("continuum_intercept_action", args)
    assert failed["status"] == "failed" and "person" in failed["guidance"]
    assert (again["proceed"], again["status"], again["action_key"]) == (
        False,
        "needs_confirmation",
        first["action_key"],
    )
    assert listed["unresolved"] == [first["action_key"]]
    assert resumed["mode"] == "request_human"
    assert resumed["next_allowed_action"] == f"reconcile_action:{first['action_id']}"
    assert self_settled["status"] == "failed"
    assert (still["proceed"], still["status"]) == (False, "needs_confirmation")
    assert (retry["proceed"], retry["attempt"]) == (True, 2)


async def test_reconcile_replay_contract_answers_reconcile_required_with_the_action_key(
    db: Path, mode: str
) -> None:
    args = {"run_id": "r1", "action_type": "charge", "key": "card:1", "replay": "reconcile"}
    async with session(db, mode) as s:
        await s.ok("continuum_record_progress", {"run_id": "r1", "goal": "g"})
        first = await s.ok("continuum_intercept_action", args)
        await s.ok("continuum_fail_action", {"run_id": "r1", "action_key": first["action_key"]})
        again = await s.ok("continuum_intercept_action", args)
        settled = await s.ok(
            "continuum_reconcile_action",
            {"run_id": "r1", "action_key": again["action_key"], "occurred": False},
        )
    assert (again["proceed"], again["status"]) == (False, "reconcile_required")
    assert again["action_key"] == first["action_key"]
    assert settled["status"] == "failed"


async def test_checkpoint_env_declares_dependencies_and_a_changed_env_asks_for_repair(
    db: Path, mode: str
) -> None:
    async with session(db, mode) as s:
        await s.ok("continuum_record_progress", {"run_id": "r1", "goal": "analyze", "total": 4})
        cp = await s.ok("continuum_checkpoint", {"run_id": "r1", "env": {"dataset": "v1"}})
        human_confirms(db, "r1")  # the goal is self-reported: without this, request_human dominates
        same = await s.ok("continuum_resume", {"run_id": "r1", "env": {"dataset": "v1"}})
        changed = await s.ok("continuum_resume", {"run_id": "r1", "env": {"dataset": "v2"}})
        validated = await s.ok("continuum_validate", {"run_id": "r1", "env": {"dataset": "v2"}})
        no_env = await s.ok("continuum_resume", {"run_id": "r1"})
    declared = [e for e in read_events(db, "r1") if e.type == EventType.DEPENDENCY_DECLARED]
    assert [d["name"] for e in declared for d in e.payload["dependencies"]] == ["dataset"]
    assert cp["event_sequence"] > cp["sequence"] >= declared[0].sequence
    assert same["mode"] == "resume"
    assert changed["mode"] == "repair_and_resume"
    assert validated["verdict"] == "repair_and_resume"
    assert {d["name"]: d["status"] for d in validated["dependencies"]} == {"dataset": "changed"}
    assert no_env["mode"] == "request_human"  # declared but not given now: unknown, not "unchanged"


async def test_everything_an_agent_writes_over_mcp_has_origin_external_agent(
    db: Path, mode: str
) -> None:
    async with session(db, mode) as s:
        await s.ok("continuum_record_progress", {"run_id": "r1", "goal": "g", "total": 2})
        await s.ok("continuum_checkpoint", {"run_id": "r1", "env": {"lib": "1.0"}})
        a = await s.ok(
            "continuum_intercept_action", {"run_id": "r1", "action_type": "t", "key": "a"}
        )
        await s.ok("continuum_complete_action", {"run_id": "r1", "action_key": a["action_key"]})
        b = await s.ok(
            "continuum_intercept_action", {"run_id": "r1", "action_type": "t", "key": "b"}
        )
        await s.ok("continuum_fail_action", {"run_id": "r1", "action_key": b["action_key"]})
        await s.ok(
            "continuum_reconcile_action",
            {"run_id": "r1", "action_key": b["action_key"], "occurred": True},
        )
        await s.ok("continuum_record_progress", {"run_id": "r1", "completed": 2})
    events = read_events(db, "r1")
    assert len(events) >= 10
    assert {str(e.source) for e in events} == {Origin.EXTERNAL_AGENT}


async def test_resume_asks_for_a_human_until_one_confirms_and_again_for_later_self_reports(
    db: Path, mode: str
) -> None:
    async with session(db, mode) as s:
        await s.ok(
            "continuum_record_progress", {"run_id": "r1", "goal": "g", "total": 3, "completed": 1}
        )
        unconfirmed = await s.ok("continuum_resume", {"run_id": "r1"})
        # A confirmation with a self-certified origin is recorded but does not count.
        agent = Continuum(open_store(str(db)), origin=Origin.EXTERNAL_AGENT)
        head = agent.store.get_run("r1").head_sequence
        agent.append(
            "r1",
            EventType.REVIEW_CONFIRMED,
            {"through_sequence": head, "scope": ["goal", "progress"], "confirmed": {}},
        )
        agent.close()
        self_confirmed = await s.ok("continuum_resume", {"run_id": "r1"})
        human_confirms(db, "r1")
        confirmed = await s.ok("continuum_resume", {"run_id": "r1"})
        await s.ok("continuum_record_progress", {"run_id": "r1", "completed": 3})
        later = await s.ok("continuum_resume", {"run_id": "r1"})
        human_confirms(db, "r1")
        reconfirmed = await s.ok("continuum_resume", {"run_id": "r1"})
    assert unconfirmed["mode"] == "request_human" and unconfirmed["safe"] is False
    assert self_confirmed["mode"] == "request_human"
    assert confirmed["mode"] == "resume" and confirmed["safe"] is True
    assert later["mode"] == "request_human"
    assert reconfirmed["mode"] == "resume"


async def test_confirm_over_mcp_needs_the_confirm_token_and_then_counts_as_human(
    db: Path, mode: str
) -> None:
    async with session(db, mode) as s:
        await s.ok("continuum_record_progress", {"run_id": "r1", "goal": "g", "total": 1})
        before = len(read_events(db, "r1"))
        refused = await s.error("continuum_confirm", {"run_id": "r1"})
        wrong = await s.error("continuum_confirm", {"run_id": "r1"}, meta={"confirmToken": "guess"})
        agent_token = await s.error(
            "continuum_confirm", {"run_id": "r1"}, meta={"authToken": CONFIRM_SECRET}
        )
        assert len(read_events(db, "r1")) == before
        accepted = await s.ok(
            "continuum_confirm", {"run_id": "r1"}, meta={"confirmToken": CONFIRM_SECRET}
        )
        resumed = await s.ok("continuum_resume", {"run_id": "r1"})
    for text in (refused, wrong, agent_token):
        assert "continuum_confirm" in text and "`continuum confirm r1`" in text
        assert CONFIRM_SECRET not in text
    assert accepted["verdict"] == "resume" and accepted["through_sequence"] == before
    last = read_events(db, "r1")[-1]
    assert (last.type, str(last.source)) == (EventType.REVIEW_CONFIRMED, Origin.HUMAN)
    assert resumed["mode"] == "resume"


async def test_a_caller_off_the_allowlist_may_read_but_not_write(db: Path, mode: str) -> None:
    async with session(db, mode) as s:
        await s.ok("continuum_record_progress", {"run_id": "r1", "goal": "g"})
    before = store_bytes(db)
    async with session(db, mode, name="stranger") as s:
        text = await s.error("continuum_record_progress", {"run_id": "r1", "completed": 1})
        read = await s.ok("continuum_list_actions", {"run_id": "r1"})
    assert "'stranger'" in text and ALLOW_ENV in text
    assert read["actions"] == []
    assert store_bytes(db) == before


async def test_an_unknown_argument_name_is_refused_by_name_and_changes_nothing(
    db: Path, mode: str
) -> None:
    async with session(db, mode) as s:
        listed = await s.client.list_tools()
        assert all(t.input_schema.get("additionalProperties") is False for t in listed.tools)
        await s.ok("continuum_record_progress", {"run_id": "r1", "goal": "ship", "total": 5})
        before = human(db).store.get_run("r1").head_sequence
        text = await s.error("continuum_record_progress", {"run_id": "r1", "complete": 3})
        assert text.startswith(
            "continuum_record_progress: unknown argument 'complete' (did you mean 'completed'?)"
        ), text
        assert "\n" not in text and "pydantic" not in text and "http" not in text
        two = await s.error(
            "continuum_record_progress",
            {"run_id": "r1", "completed": 3, "totl": 5, "zzz\x1b[2K": 1},
        )
        assert "unknown arguments 'totl' (did you mean 'total'?), 'zzz\\x1b[2K'" in two, two
        # A wrong known argument beside it is still named, on its own line, after it.
        both = await s.error(
            "continuum_record_progress", {"run_id": "r1", "completed": "three", "complete": 3}
        )
        first, *rest = both.splitlines()
        assert first.startswith("continuum_record_progress: unknown argument 'complete'")
        assert "completed" in rest, both
        assert human(db).store.get_run("r1").head_sequence == before


async def test_a_hosts_control_argument_is_ignored_and_any_other_still_refused(
    db: Path, mode: str
) -> None:
    """Gemini CLI adds wait_for_previous to every MCP call (host_arguments.py); the call
    does what it would without it. A name outside that table is still refused."""
    async with session(db, mode) as s:
        done = await s.ok(
            "continuum_record_progress",
            {"run_id": "r1", "goal": "ship", "completed": 1, "wait_for_previous": True},
        )
        assert done["progress"]["completed"] == 1
        read = await s.ok("continuum_resume", {"run_id": "r1", "wait_for_previous": False})
        assert read["run_id"] == "r1"
        before = human(db).store.get_run("r1").head_sequence
        text = await s.error(
            "continuum_record_progress", {"run_id": "r1", "completed": 2, "wait_for_next": True}
        )
        assert "unknown argument 'wait_for_next'" in text, text
        assert human(db).store.get_run("r1").head_sequence == before

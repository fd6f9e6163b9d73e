"""Approvals survive real kills: SIGKILL between request and decision, and around it.

Agents are real processes (``Continuum`` with the approvals.toml of their working
directory) that intercept a ``wire_money`` call, perform it (a line in an effects file)
when told to proceed, and hold until the test SIGKILLs them; the person is the real CLI
(``continuum decide --yes``), also killed at its commit points. Afterwards the log is
checked out of band: every proceed of a gated call ran under a person's grant recorded
before it, a call grant was used once, and the effect happened exactly once.

Negative control: the same agents without the rules proceed at once, and the checker
must say so (so a green run means the harness would catch an implicit approval).
Both backends: a SQLite file and a PostgreSQL database.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from continuum.eventlog.events import EventType
from continuum.faults import FAULT_EXIT_CODE
from continuum.runtime.facade import Continuum
from continuum.store import open_store
from continuum.types import Origin

RUN = "payments"
DEADLINE_S = 60
ARGS = {"amount": 25000, "to": "ACME", "invoice": "INV-7"}
CONTINUUM = str(Path(sys.executable).with_name("continuum"))

AGENT = r"""
import json, os, sys
from continuum.ledger.approvals import ApprovalRules
from continuum.runtime.facade import Continuum
from continuum.store import open_store
from continuum.types import Origin

db, effects, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
rules = ApprovalRules() if os.environ.get("AGENT_WITHOUT_RULES") else None
cx = Continuum(open_store(db), origin=Origin.EXTERNAL_AGENT, approvals=rules)
r = cx.intercept("payments", "wire_money", args, key="INV-7")
if r.proceed:
    with open(effects, "a") as f:  # the side effect, durable before we say so
        f.write(json.dumps({"pid": os.getpid(), "approval_id": r.approval_id}) + "\n")
        f.flush()
        os.fsync(f.fileno())
print(json.dumps(r.model_dump(mode="json")), flush=True)
sys.stdin.readline()  # hold: the test kills us here (the effect done, not yet completed)
cx.complete("payments", r.action_key)
"""


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "agent.db")
        return
    from tests.contract import pg_support

    pg_support.require_driver()
    with pg_support.fresh_database("continuum_approvals") as url:
        yield url


@pytest.fixture
def project(tmp_path: Path) -> Path:
    rules = tmp_path / "project" / ".continuum" / "approvals.toml"
    rules.parent.mkdir(parents=True)
    rules.write_text('[[approval]]\naction_type = "wire_money"\n', encoding="utf-8")
    return rules.parent.parent


def start_run(db: str) -> None:
    cx = Continuum(open_store(db))
    cx.start_run(RUN, "pay invoices")
    cx.close()


def agent_until_killed(
    db: str, project: Path, effects: Path, *, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """An agent intercepts (and performs, if told to), then dies by SIGKILL."""
    proc = subprocess.Popen(
        [sys.executable, "-c", AGENT, db, str(effects), json.dumps(ARGS)],
        cwd=project,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.communicate(timeout=DEADLINE_S)
        answer: dict[str, Any] = json.loads(line)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == -signal.SIGKILL
    return answer


def decide(
    db: str, approval_id: str, *, fault: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CONTINUUM_FAULTS"}
    if fault is not None:
        env["CONTINUUM_FAULTS"] = fault  # die at that point of the commit
    return subprocess.run(
        [
            CONTINUUM,
            "--db",
            db,
            "decide",
            approval_id,
            "--allow",
            "--reason",
            "invoice checked",
            "--yes",
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        env=env,
    )


def implicit_approvals(db: str) -> list[str]:
    """Out of band, from the verified log: every start of a wire_money attempt must name a
    call or run grant a person recorded before it, and a call grant is used once."""
    store = open_store(db, create=False)
    try:
        granted: dict[str, str] = {}  # approval id -> scope, from a person, so far
        used: set[str] = set()
        problems: list[str] = []
        for e in store.iter_events(RUN):
            if e.type == EventType.APPROVAL_GRANTED and e.source == Origin.HUMAN:
                granted[e.payload["approval_id"]] = e.payload.get("scope") or "call"
            starts = (
                e.type == EventType.ACTION_INTERCEPTED
                and e.payload["action_type"] == "wire_money"
                or e.type == EventType.ACTION_RETRIED
            )
            if not starts:
                continue
            approval = e.payload.get("approval_id")
            if approval not in granted:
                problems.append(f"seq {e.sequence}: proceeded without a person's grant")
            elif granted[approval] == "call" and approval in used:
                problems.append(f"seq {e.sequence}: call grant {approval} used twice")
            used.add(str(approval))
        return problems
    finally:
        store.close()


def test_kills_between_request_and_decision_never_run_the_call_without_a_grant(
    db: str, project: Path, tmp_path: Path
) -> None:
    start_run(db)
    effects = tmp_path / "effects.jsonl"
    first = agent_until_killed(db, project, effects)
    assert (first["proceed"], first["status"]) == (False, "awaiting_approval")
    approval_id = first["approval_id"]
    second = agent_until_killed(db, project, effects)  # restarted after the kill
    assert (second["status"], second["approval_id"]) == ("awaiting_approval", approval_id)

    died = decide(db, approval_id, fault="before_append_commit")  # the person's CLI dies
    assert died.returncode == FAULT_EXIT_CODE
    third = agent_until_killed(db, project, effects)
    assert (third["status"], third["approval_id"]) == ("awaiting_approval", approval_id)

    recorded = decide(db, approval_id, fault="after_decide_commit")  # dies after COMMIT
    assert recorded.returncode == FAULT_EXIT_CODE
    go = agent_until_killed(db, project, effects)  # proceeds, performs, killed mid-way
    assert (go["proceed"], go["approval_id"]) == (True, approval_id)
    after = agent_until_killed(db, project, effects)
    assert (after["proceed"], after["status"]) == (False, "unknown")  # never run again

    assert len(effects.read_text().splitlines()) == 1
    assert implicit_approvals(db) == []
    cx = Continuum(open_store(db, create=False))
    requested = [e for e in cx.events(RUN) if e.type == EventType.APPROVAL_REQUESTED]
    assert len(requested) == 1
    assert cx.verify(RUN).ok
    print(
        f"approvals [kills]: 5 agent kills, 2 decide kills, 1 request, 1 effect "
        f"({db.split('://')[0] if '://' in db else 'sqlite'})"
    )
    cx.close()


def test_negative_control_agents_without_the_rules_are_caught_by_the_checker(
    db: str, project: Path, tmp_path: Path
) -> None:
    start_run(db)
    effects = tmp_path / "effects.jsonl"
    answer = agent_until_killed(db, project, effects, env={"AGENT_WITHOUT_RULES": "1"})
    assert answer["proceed"]
    assert implicit_approvals(db) == ["seq 2: proceeded without a person's grant"]

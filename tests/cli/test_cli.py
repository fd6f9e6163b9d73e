"""CLI behaviour: the exit-code table, one JSON error shape, stdout discipline (contract §10)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

from tests.cli.conftest import Result

CLI = Callable[..., Result]


def test_start_then_resume_of_a_clean_deterministic_run_exits_0(cli: CLI) -> None:
    assert cli("start", "r1", "--goal", "send invoices", "--total", "3").code == 0
    r = cli("--json", "resume", "r1")
    assert r.code == 0
    doc = r.json()
    assert doc["ok"] is True and doc["mode"] == "resume" and doc["safe"] is True
    assert doc["contract"]["verdict"] == "resume"
    assert doc["contract"]["integrity_hash"]


def test_missing_run_exits_2_with_the_json_error_shape(cli: CLI) -> None:
    cli("init")
    r = cli("--json", "status", "nope")
    assert r.code == 2
    doc = r.json()
    assert doc["ok"] is False
    assert set(doc["error"]) >= {"code", "message", "hint"}
    assert doc["error"]["code"] == "not_found.run"


def test_json_flag_after_the_command_also_gives_one_json_document(cli: CLI) -> None:
    cli("start", "r1", "--goal", "g")
    r = cli("status", "r1", "--json")
    assert r.code == 0
    assert r.json()["run_id"] == "r1"


def test_usage_error_exits_1_not_2(cli: CLI) -> None:
    r = cli("--json", "start", "r1")  # --goal missing
    assert r.code == 1
    assert r.json()["error"]["code"] == "usage.invalid"
    assert cli("no-such-command").code == 1


def test_unusable_store_exits_1_and_creates_nothing(cli: CLI, tmp_path: Path) -> None:
    target = tmp_path / "missing-dir" / "x.db"
    r = cli("--json", "--db", str(target), "runs", with_db=False)
    assert r.code == 1
    assert r.json()["error"]["code"] == "store.missing_directory"
    assert not target.parent.exists()
    text = tmp_path / "notes.db"
    text.write_text("hello")
    r = cli("--json", "--db", str(text), "runs", with_db=False)
    assert r.code == 1 and r.json()["error"]["code"] == "store.not_a_database"
    assert text.read_text() == "hello"
    r = cli("--json", "--db", "mysql://x/y", "runs", with_db=False)
    assert r.code == 1 and r.json()["error"]["code"] == "store.bad_url"


def test_read_command_on_missing_store_is_not_found_and_creates_nothing(cli: CLI, db: str) -> None:
    r = cli("--json", "runs")
    assert r.code == 2 and r.json()["error"]["code"] == "not_found.store"
    assert not Path(db).exists()


def test_tampered_log_makes_verify_exit_3_naming_the_sequence(cli: CLI, db: str) -> None:
    cli("start", "r1", "--goal", "g")
    for i in range(4):
        assert cli("append", "r1", "work_completed", "--payload", json.dumps({"doc": i})).code == 0
    conn = apsw.Connection(db)
    conn.execute(
        "UPDATE events SET payload = ? WHERE run_id = 'r1' AND sequence = 3", ('{"doc":99}',)
    )
    conn.close()
    r = cli("--json", "verify", "r1")
    assert r.code == 3
    report = r.json()["reports"][0]
    assert report["violations"][0]["sequence"] == 3
    assert report["violations"][0]["kind"] == "hash_mismatch"
    assert report["trusted_through"] == 2
    r = cli("--json", "events", "r1")
    assert r.code == 3 and r.json()["error"]["code"] == "integrity.hash_mismatch"


def test_anchor_detects_a_truncated_tail(cli: CLI, db: str) -> None:
    cli("start", "r1", "--goal", "g")
    cli("append", "r1", "work_completed")
    anchor = cli("anchor", "r1").out.strip()
    # Truncate cleanly: delete the last event AND roll the head back, as an attacker would.
    conn = apsw.Connection(db)
    conn.execute("DELETE FROM events WHERE run_id='r1' AND sequence=2")
    conn.execute(
        "UPDATE runs SET head_sequence=1, head_hash=(SELECT hash FROM events WHERE "
        "run_id='r1' AND sequence=1) WHERE run_id='r1'"
    )
    conn.close()
    assert cli("verify", "r1").code == 0  # the chain alone cannot see a clean truncation
    r = cli("--json", "verify", "r1", "--expect-head", anchor)
    assert r.code == 3
    assert r.json()["reports"][0]["violations"][0]["kind"] == "truncated"


def test_changed_dependency_gives_repair_and_resume_exit_10(cli: CLI) -> None:
    cli("start", "r1", "--goal", "g")
    assert cli("declare", "r1", "--env", "dataset=v1").code == 0
    assert cli("resume", "r1", "--env", "dataset=v1").code == 0
    r = cli("--json", "resume", "r1", "--env", "dataset=v2")
    assert r.code == 10
    assert r.json()["mode"] == "repair_and_resume"
    assert r.json()["next_allowed_action"] == "refresh_dependency:dataset"


def test_undeclared_environment_makes_resume_unknown_and_exit_20(cli: CLI) -> None:
    cli("start", "r1", "--goal", "g")
    cli("declare", "r1", "--env", "dataset=v1")
    r = cli("--json", "resume", "r1")
    assert r.code == 20 and r.json()["mode"] == "request_human"
    assert cli("resume", "r1", "--tolerate-unknown").code == 0


def test_interrupted_action_blocks_resume_until_reconciled(cli_proc: CLI) -> None:
    assert cli_proc("start", "r1", "--goal", "g").code == 0
    r = cli_proc(
        "--json",
        "intercept",
        "r1",
        "send_invoice",
        "--key",
        "invoice:INV-1",
        "--args",
        '{"invoice": "INV-1"}',
    )
    assert r.code == 0 and r.json()["proceed"] is True
    action_id = r.json()["action_id"]
    # The intercepting process has exited without completing: the action is interrupted.
    r = cli_proc("--json", "resume", "r1")
    assert r.code == 20
    doc = r.json()
    assert doc["mode"] == "request_human"
    assert doc["next_allowed_action"] == f"reconcile_action:{action_id}"
    assert doc["uncertain_actions"][0]["action_key"] == "send_invoice:invoice:INV-1"
    assert cli_proc("actions", "r1").code == 20
    r = cli_proc("--json", "intercept", "r1", "send_invoice", "--key", "invoice:INV-1")
    assert r.code == 20 and r.json()["status"] == "unknown"
    # Without a terminal a reconciliation is refused: it records origin human.
    refused = cli_proc("--json", "reconcile", "r1", action_id, "--occurred")
    assert (refused.code, refused.json()["error"]["code"]) == (1, "usage.not_a_terminal")
    assert cli_proc("actions", "r1").code == 20
    assert (
        cli_proc("reconcile", "r1", action_id, "--occurred", "--external-id", "m-1", "--yes").code
        == 0
    )
    assert cli_proc("actions", "r1").code == 0
    assert cli_proc("resume", "r1").code == 0


def test_completed_run_is_not_resumable_exit_30(cli: CLI) -> None:
    cli("start", "r1", "--goal", "g")
    cli("append", "r1", "run_completed")
    r = cli("--json", "resume", "r1")
    assert r.code == 30 and r.json()["mode"] == "not_resumable"


def test_resume_without_run_and_without_active_run_is_not_an_error_shape(cli: CLI) -> None:
    cli("init")
    r = cli("--json", "resume")
    assert r.json()["mode"] == "no_active_run" and r.json()["run_id"] is None


def test_show_contract_is_byte_identical_and_verifies(cli: CLI, tmp_path: Path) -> None:
    cli("start", "r1", "--goal", "g")
    f = tmp_path / "c.json"
    a = cli("show-contract", "r1", "-o", str(f))
    text = f.read_text()
    b = cli("show-contract", "r1", "-o", str(f))
    assert a.code == 0 and a.out == b.out and f.read_text() == text
    assert cli("verify-contract", str(f)).code == 0
    doc = json.loads(text)
    doc["verdict"] = "abort"
    f.write_text(json.dumps(doc))
    r = cli("--json", "verify-contract", str(f))
    assert r.code == 3 and r.json()["error"]["code"] == "integrity.contract_tampered"
    f.write_text(text)
    cli("append", "r1", "work_completed")
    r = cli("--json", "verify-contract", str(f))
    assert r.code == 3 and r.json()["error"]["code"] == "integrity.contract_stale"


def test_confirm_records_human_review_and_turns_self_reported_state_safe(cli: CLI, db: str) -> None:
    from continuum import Continuum, Origin

    cli("init")
    agent = Continuum.open(db, origin=Origin.EXTERNAL_AGENT)
    agent.record_progress("r1", completed=2, total=5, goal="agent goal")
    agent.close()
    assert cli("resume", "r1").code == 20
    r = cli("--json", "confirm", "r1", "--yes")
    assert r.code == 0
    assert r.json()["confirmation"]["through_sequence"] >= 2
    assert r.json()["confirmation"]["confirmed"]["goal"] == "agent goal"
    agent = Continuum.open(db, origin=Origin.EXTERNAL_AGENT)
    agent.record_progress("r1", completed=3)
    agent.close()
    assert cli("resume", "r1").code == 20  # self-reported after the confirmation


def test_replay_upto_projects_the_past(cli: CLI) -> None:
    cli("start", "r1", "--goal", "g", "--total", "5")
    for _ in range(3):
        cli("append", "r1", "work_completed")
    r = cli("--json", "replay", "r1", "--upto", "2")
    assert r.json()["state"]["progress"]["completed"] == 1
    assert cli("--json", "replay", "r1", "--upto", "99").code == 1


def test_db_comes_from_continuum_db_env_var(cli_proc: CLI, tmp_path: Path) -> None:
    other = tmp_path / "env.db"
    r = cli_proc("start", "r9", "--goal", "g", env={"CONTINUUM_DB": str(other)})
    assert r.code == 0 and other.exists()


def test_stdout_has_only_the_json_document_and_no_ansi(cli_proc: CLI) -> None:
    r = cli_proc("--json", "start", "r1", "--goal", "g")
    json.loads(r.out)
    r = cli_proc("resume", "r1")
    assert "\x1b[" not in r.out


EVERY_COMMAND = [
    "init",
    "start",
    "runs",
    "inspect",
    "status",
    "events",
    "validate",
    "resume",
    "confirm",
    "checkpoint",
    "actions",
    "reconcile",
    "show-contract",
    "verify-contract",
    "verify",
    "anchor",
    "replay",
]


@pytest.mark.parametrize("command", EVERY_COMMAND)
def test_every_command_has_help_db_and_json(cli: CLI, command: str) -> None:
    r = cli(command, "--help", with_db=False)
    assert r.code == 0
    assert "--db" in r.out and "--json" in r.out


def test_version_flag(cli: CLI) -> None:
    r = cli("--version", with_db=False)
    assert r.code == 0 and "continuum" in r.out


def test_a_resealed_forged_contract_is_refused(cli: CLI, tmp_path: Path) -> None:
    from continuum.recovery.contract import RecoveryContract, seal_contract

    cli("start", "r1", "--goal", "g")
    cli("declare", "r1", "--env", "dataset=v1")
    f = tmp_path / "c.json"
    cli("show-contract", "r1", "--env", "dataset=v1", "-o", str(f))
    out = f.read_text()
    assert cli("verify-contract", str(f)).code == 0  # env recorded in the contract is reused
    forged = RecoveryContract.model_validate_json(out).model_copy(
        update={"verdict": "abort", "safe": False}
    )
    f.write_text(seal_contract(forged).to_json())
    r = cli("--json", "verify-contract", str(f))
    assert r.code == 3 and r.json()["error"]["code"] == "integrity.contract_mismatch"

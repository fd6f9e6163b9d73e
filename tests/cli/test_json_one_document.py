"""With --json, stdout is exactly one JSON document, for every command (contract §10).

Every command the CLI registers must be listed here, with arguments that make it do its
real work on a store holding a run with events, actions and a checkpoint: a command added
without a case fails ``test_every_command_has_a_case``. Each case runs twice, once
succeeding (or answering with its verdict's exit code) and once failing (a missing run),
and stdout must parse as one JSON document both times (``json.loads`` refuses trailing
data), with nothing but that document on it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest

from continuum.cli.main import cli as cli_group
from continuum.eventlog.events import EventType
from continuum.runtime.facade import Continuum
from tests.cli.conftest import Result

RUN = "r"


def _store(db: str, tmp_path: Path) -> dict[str, str]:
    rules = tmp_path / ".continuum" / "approvals.toml"
    rules.parent.mkdir(exist_ok=True)
    rules.write_text('[[approval]]\naction_type = "wire_money"\n', encoding="utf-8")
    rt = Continuum.open(db)
    try:
        rt.start_run(RUN, "send two invoices", total=2)
        rt.record_progress(RUN, completed=1)
        done = rt.intercept(RUN, "send", {"n": 1}, key="inv-1")
        rt.complete(RUN, done.action_key, external_id="x-1")
        open_ = rt.intercept(RUN, "send", {"n": 2}, key="inv-2")
        waiting = rt.intercept(RUN, "wire_money", {"amount": 5}, key="w-1")
        assert waiting.approval_id is not None, waiting
        rt.checkpoint(RUN, reason="test")
        rt.append(RUN, EventType.WORK_COMPLETED, {"item_id": "w1"})
        rt.observe(RUN, "button", "Pay", signal="dom")
        rt.resolve_branch(RUN, "pay", choice="click", observations=["button"], risk="high")
        anchor = rt.anchor(RUN)["anchor"]
        contract = rt.resume(RUN, tolerate_unknown=True).contract
        assert contract is not None
    finally:
        rt.close()
    contract_file = tmp_path / "contract.json"
    contract_file.write_text(json.dumps(contract), encoding="utf-8")
    return {
        "done": done.action_key,
        "open": open_.action_key,
        "anchor": anchor,
        "contract": str(contract_file),
        "export": str(tmp_path / "export.json"),
        "project": str(tmp_path),
        "approval": waiting.approval_id,
        "backup": str(tmp_path / "backup.tar"),
        "archive": str(tmp_path / "old.jsonl"),
        "key": str(tmp_path / "signing.key"),
        "audit": str(tmp_path / "audit.jsonl"),
    }


# (command path, arguments given the fixture values). A command that writes is given a
# case that really writes (with --yes where a person is asked).
CASES: dict[str, Callable[[dict[str, str]], list[str]]] = {
    "init": lambda v: ["init"],
    "start": lambda v: ["start", "r2", "--goal", "another"],
    "runs": lambda v: ["runs"],
    "inspect": lambda v: ["inspect", RUN],
    "status": lambda v: ["status", RUN],
    "events": lambda v: ["events", RUN, "--after", "2"],
    "event-types": lambda v: ["event-types"],
    "validate": lambda v: ["validate", RUN],
    "resume": lambda v: ["resume", RUN],
    "confirm": lambda v: ["confirm", RUN, "--yes"],
    "confirm-token new": lambda v: ["confirm-token", "new"],
    "confirm-token status": lambda v: ["confirm-token", "status"],
    "confirm-token unlock": lambda v: ["confirm-token", "unlock", "--yes"],
    "checkpoint": lambda v: ["checkpoint", RUN, "--reason", "json test"],
    "declare": lambda v: ["declare", RUN, "--env", "dataset=v1"],
    "actions": lambda v: ["actions", RUN],
    "intercept": lambda v: ["intercept", RUN, "send", "--key", "inv-9"],
    "complete": lambda v: ["complete", RUN, v["open"]],
    "fail": lambda v: ["fail", RUN, v["open"], "--error", "boom"],
    "reconcile": lambda v: ["reconcile", RUN, v["open"], "--occurred", "--yes"],
    "compensate": lambda v: ["compensate", RUN, v["done"], "--note", "refunded"],
    "append": lambda v: ["append", RUN, "work_completed", "--payload", '{"item_id": "w2"}'],
    "show-contract": lambda v: ["show-contract", RUN],
    "verify-contract": lambda v: ["verify-contract", v["contract"]],
    "verify": lambda v: ["verify", RUN],
    "anchor": lambda v: ["anchor", RUN],
    "replay": lambda v: ["replay", RUN, "--upto", "3"],
    "diff": lambda v: ["diff", RUN, "--from", "1", "--to", "4"],
    "history": lambda v: ["history", RUN],
    "finish": lambda v: ["finish", RUN, "--reason", "done"],
    "abort": lambda v: ["abort", RUN, "--reason", "stop"],
    "record-progress": lambda v: ["record-progress", RUN, "--completed", "2"],
    "export": lambda v: ["export", RUN, "--output", v["export"]],
    "audit": lambda v: ["audit", RUN, "--out", v["audit"]],
    "verify-audit": lambda v: ["verify-audit", v["audit"]],
    "import": lambda v: ["import", v["export"]],
    "prune": lambda v: ["prune", "--finished", "--before", "2999-01-01", "--dry-run"],
    "fork": lambda v: ["fork", RUN, "--at", "1", "--as", "r-fork"],
    "where": lambda v: ["where"],
    "watch": lambda v: ["watch", RUN, "--once"],
    "mcp install": lambda v: ["mcp", "install", "--client", "claude-code", "--print"],
    "mcp uninstall": lambda v: ["mcp", "uninstall", "--client", "claude-code", "--print"],
    "mcp doctor": lambda v: ["mcp", "doctor"],
    "hooks install": lambda v: [
        "hooks",
        "install",
        "--client",
        "claude-code",
        "--print",
        "--dir",
        v["project"],
    ],
    "hooks remove": lambda v: [
        "hooks",
        "remove",
        "--client",
        "claude-code",
        "--print",
        "--dir",
        v["project"],
    ],
    "hooks effects": lambda v: ["hooks", "effects", "--dir", v["project"]],
    "hooks accept": lambda v: ["hooks", "accept", "--dir", v["project"], "--yes"],
    "hooks doctor": lambda v: ["hooks", "doctor", "--client", "claude-code", "--dir", v["project"]],
    "hooks try": lambda v: ["hooks", "try", "--client", "claude-code", "--dir", v["project"], "ls"],
    "approvals": lambda v: ["approvals", RUN],
    "decide": lambda v: ["decide", v["approval"], "--allow", "--reason", "checked", "--yes"],
    "handoff": lambda v: ["handoff", RUN, "--note", "next: INV-3"],
    "budget": lambda v: ["budget", RUN, "--usd", "25.00", "--yes"],
    "usage": lambda v: ["usage", RUN],
    "observe": lambda v: ["observe", RUN, "button", "--value", "Pay", "--signal", "ocr"],
    "observations": lambda v: ["observations", RUN],
    "resolve-branch": lambda v: ["resolve-branch", RUN, "pay", "--choice", "click", "--yes"],
    "outbox": lambda v: ["outbox"],
    "outbox deliver": lambda v: ["outbox", "deliver"],
    "outbox retry": lambda v: ["outbox", "retry", "--all"],
    "archive": lambda v: ["archive", RUN, "--before", "3", "--to", v["archive"], "--yes"],
    "backup": lambda v: ["backup", v["backup"]],
    "verify-backup": lambda v: ["verify-backup", v["backup"]],
    "restore": lambda v: ["restore", v["backup"]],
    "keygen": lambda v: ["keygen", v["key"]],
    "migrate": lambda v: ["migrate", "--dry-run"],
    "gateway accept": lambda v: ["gateway", "accept", "--yes"],
    "gateway install": lambda v: [
        "gateway",
        "install",
        "--client",
        "claude-code",
        "--server",
        "billing",
        "--restore",
    ],
}

# Cases whose answer on this store is a refusal (still one document).
REFUSED = {
    "outbox deliver": "outbox.no_webhooks",
    "hooks try": "hooks.not_installed",  # with them installed: tests/hooks/test_try.py
}

# Commands that never print a JSON document, and why.
NO_JSON = {
    "hook": "a host hook: its stdout is the host's own hook protocol, not continuum's JSON",
    "benchmark": "crashes real agents for minutes; its --json is tested in test_bench_scenarios",
    "ui": "a server that runs until stopped (tests/e2e/test_operator_page_http.py)",
    "hooks serve": "a gate that runs until stopped; its lines go to stderr "
    "(tests/hooks/test_resident_gate.py)",
    "gateway mcp": "an MCP server on stdio in front of another: stdout is JSON-RPC "
    "(tests/gateway/test_mcp_gateway.py)",
    "gateway http": "an HTTP proxy that runs until stopped (tests/gateway/test_http_gateway.py)",
}


def _commands(group: click.Group, prefix: str = "") -> list[str]:
    out = []
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if isinstance(command, click.Group):
            out += _commands(command, path + " ")
        else:
            out.append(path)
    return out


def test_every_command_has_a_case() -> None:
    missing = sorted(set(_commands(cli_group)) - set(CASES) - set(NO_JSON))
    assert not missing, f"add a --json case for: {missing}"
    assert not set(CASES) & set(NO_JSON)


def _one_document(result: Result) -> Any:
    assert result.out.strip(), f"nothing on stdout (exit {result.code}): {result.err}"
    doc = json.loads(result.out)  # raises on a second document or any trailing text
    assert isinstance(doc, dict)
    return doc


@pytest.mark.parametrize("name", sorted(CASES))
def test_json_prints_exactly_one_document(
    name: str, cli: Callable[..., Result], db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    values = _store(db, tmp_path)
    if name in ("verify-backup", "restore"):  # a backup of the store to check or restore
        assert cli("--json", "backup", values["backup"]).code == 0
    if name == "verify-audit":  # an audit file of the run to check
        assert cli("--json", "audit", RUN, "--out", values["audit"]).code == 0
    if name == "restore":
        result = cli(
            "--db", str(tmp_path / "restored.db"), "--json", *CASES[name](values), with_db=False
        )
    elif name == "import":  # an export of the run to import into a fresh store
        assert cli("--json", "export", RUN, "--output", values["export"]).code == 0
        db2 = str(tmp_path / "other.db")
        result = cli(
            "--db", db2, "--json", *CASES[name](values)[0:1], values["export"], with_db=False
        )
    else:
        result = cli("--json", *CASES[name](values))
    doc = _one_document(result)
    if name in REFUSED:  # its refusal is the real answer here
        assert doc["ok"] is False and doc["error"]["code"] == REFUSED[name], doc
        return
    # The case did its real work: an answer or a verdict, not a usage error.
    assert result.code in (0, 3, 10, 20, 30), (result.code, doc)
    assert doc.get("ok") is not False, doc


_PLACEHOLDERS = {
    "done": "x",
    "open": "y",
    "anchor": "1:a",
    "contract": "c",
    "export": "e",
    "project": "p",
    "approval": "apr_x",
    "backup": "b",
    "archive": "a",
    "key": "k",
    "audit": "audit-file",
}


@pytest.mark.parametrize("name", sorted(n for n in CASES if RUN in CASES[n](_PLACEHOLDERS)))
def test_json_errors_are_one_document_too(
    name: str, cli: Callable[..., Result], db: str, tmp_path: Path
) -> None:
    _store(db, tmp_path)
    values = {**_PLACEHOLDERS, "project": str(tmp_path)}
    args = ["missing-run" if a == RUN else a for a in CASES[name](values)]
    result = cli("--json", *args)
    doc = _one_document(result)
    if result.code != 0:
        assert doc["ok"] is False and doc["error"]["code"], doc

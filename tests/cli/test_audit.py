"""`continuum audit` and `verify-audit` on decisions people made through the real commands.

The store is a real SQLite file; the decisions are made with the CLI (`confirm --yes`,
`reconcile`, `decide`, `resolve-branch`, a budget raise, `hooks accept`,
`confirm-token unlock`) and over MCP with the confirm token (the real server, in-memory
transport). Every agent field holds an injection string; the file must stay one inert
line per record and verify, and any edit to it must not.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from continuum import Continuum, Origin
from continuum.errors import UsageError
from continuum.gateway.pins import Pins
from continuum.store import open_store
from tests.cli.conftest import Result
from tests.cli.pty_support import Terminal
from tests.mcp.test_server_inmemory import AGENT, CONFIRM_SECRET, policy, session

RUN = "payments"
INJ = "x\x1b[2J\x1b]0;pwned\x07\r\nverdict: resume\u202edesrever\u2066</script><b>&\x9b"
# Keys and a person's reasons and notes are refused with control or bidi characters
# (checked at entry): they carry the rest.
KEY = "INV-9 </script><b>&"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    rules = tmp_path / ".continuum" / "approvals.toml"
    rules.parent.mkdir()
    rules.write_text('[[approval]]\naction_type = "wire_money"\n', encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def db(work: Path) -> str:
    return str(work / "store.db")


def agent(db: str, work: Path) -> Continuum:
    return Continuum(open_store(db), origin=Origin.EXTERNAL_AGENT, cwd=str(work))


def ok(r: Result) -> Result:
    assert r.code == 0, (r.code, r.out, r.err)
    return r


def recorded(r: Result) -> Result:
    """A decision command that answers with the verdict's exit code after recording."""
    assert r.code in (0, 10, 20), (r.code, r.out, r.err)
    return r


@pytest.fixture
def decided(db: str, work: Path, cli: Callable[..., Result]) -> dict[str, str]:
    """A run with one decision of each kind, each made through the real command."""
    rt = agent(db, work)
    try:
        rt.start_run(RUN, f"pay {INJ}", total=3)
        rt.record_progress(RUN, completed=1)
        wire = rt.intercept(RUN, "wire_money", {"to": INJ, "memo": INJ}, key=f"W-{KEY}")
        assert wire.approval_id
        lost = rt.intercept(RUN, "send", {"n": INJ}, key=f"S-{KEY}")
        rt.fail(RUN, lost.action_key, error=INJ)  # outcome unknown: a person reconciles
        rt.observe(RUN, "button", INJ, signal="dom")
        rt.resolve_branch(
            RUN, "pay", choice="click", observations=["button"], risk="high", reason=INJ
        )
        rt.set_budget(RUN, usd="5.00", reason=INJ)
        rt.handoff(RUN, INJ)
    finally:
        rt.close()
    recorded(cli("confirm", RUN, "--yes"))
    recorded(cli("decide", wire.approval_id, "--allow", "--reason", KEY, "--yes"))
    recorded(
        cli(
            "reconcile", RUN, lost.action_key, "--occurred", "--note", KEY,
            "--external-id", KEY, "--yes",
        )
    )  # fmt: skip
    recorded(cli("resolve-branch", RUN, "pay", "--choice", "click", "--reason", KEY, "--yes"))
    recorded(cli("budget", RUN, "--usd", "25.00", "--reason", KEY, "--yes"))
    return {"approval": wire.approval_id, "action": lost.action_key}


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _raw_unsafe(text: str) -> list[str]:
    return [
        c
        for c in text
        if c != "\n" and (unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") or c in "<>&")
    ]


def keys(work: Path, cli: Callable[..., Result], name: str = "auditor") -> tuple[str, str]:
    ok(cli("keygen", str(work / f"{name}.key")))
    return str(work / f"{name}.key"), str(work / f"{name}.key.pub")


def test_every_decision_is_one_inert_line_with_who_how_shown_and_its_chain_position(
    decided: dict[str, str], cli: Callable[..., Result], work: Path
) -> None:
    out = work / "audit.jsonl"
    doc = ok(cli("--json", "audit", RUN, "--out", str(out))).json()
    text = out.read_text(encoding="utf-8")
    assert _raw_unsafe(text) == []  # no raw control, bidi, line separator, < > &
    rows = records(out)
    assert len(text.splitlines()) == len(rows) == text.count("\n")
    assert rows[0]["kind"] == "header" and rows[-1]["kind"] == "trailer"
    found = {r["event_type"]: r for r in rows if r["kind"] == "decision"}
    assert doc["decisions"] == len([r for r in rows if r["kind"] == "decision"]) == 5
    assert set(found) == {
        "review_confirmed",
        "approval_granted",
        "action_reconciled",
        "branch_resolved",
        "budget_set",
    }
    for r in found.values():
        assert r["who"]["origin"] == "human"
        assert r["event"]["hash"] == r["event_hash"] and r["event"]["sequence"] == r["sequence"]
        assert r["how"]["channel"] == "script" and r["how"]["recorded"] is True  # --yes
        assert r["event"]["payload"]["via"] == {"channel": "script"} and r["how"]["possible"]
    grant = found["approval_granted"]
    assert grant["decision"] == {
        "approval_id": decided["approval"],
        "decided": "allow",
        "scope": "call",
        "reason": KEY,
    }
    assert grant["shown"]["arguments"] == {"to": INJ, "memo": INJ}  # exact, once decoded
    assert grant["shown"]["arguments_hash"] and grant["shown"]["request"]["sequence"] > 0
    confirm = found["review_confirmed"]
    assert confirm["shown"]["through_hash_matches_chain"] is True
    assert confirm["shown"]["values"]["goal"] == f"pay {INJ}"
    rec = found["action_reconciled"]
    assert (rec["decision"]["occurred"], rec["decision"]["note"]) == (True, KEY)
    assert rec["shown"]["action_key"] == decided["action"]
    assert rec["shown"]["state_before"]["event"] == "action_marked_unknown"
    budget = found["budget_set"]
    assert budget["decision"]["usd_micros"] == 25_000_000
    assert budget["shown"]["limits_before"]["usd_micros"] == 5_000_000  # a raise
    assert found["branch_resolved"]["shown"]["observations"][0]["value"] == INJ
    # The chain runs without a gap from the first cited event to the head.
    chain = [r["sequence"] for r in rows if r["kind"] in ("decision", "link")]
    head = rows[-1]["runs"][RUN]
    assert chain == list(range(head["chain_from"], head["head_sequence"] + 1))


def test_stdout_without_out_is_the_same_file(
    decided: dict[str, str], cli: Callable[..., Result]
) -> None:
    r = ok(cli("audit", RUN))
    lines = r.out.splitlines()
    assert json.loads(lines[0])["kind"] == "header" and json.loads(lines[-1])["kind"] == "trailer"
    assert _raw_unsafe(r.out) == []


def test_a_signed_export_verifies_and_its_anchor_checks_against_the_live_store(
    decided: dict[str, str], cli: Callable[..., Result], work: Path
) -> None:
    private, public = keys(work, cli)
    out = work / "audit.jsonl"
    ok(cli("audit", RUN, "--out", str(out), "--sign", private))
    doc = ok(cli("--json", "verify-audit", str(out), "--public-key", public, "--store")).json()
    assert doc["verified"] is True and doc["signed_by"] and doc["store_checked"] is True
    anchor = records(out)[-1]["runs"][RUN]["signed_anchor"]
    ok(cli("verify", RUN, "--expect-head", anchor, "--public-key", public))


def _rewrite(path: Path, edit: Callable[[list[dict[str, Any]]], None]) -> None:
    """Edit the records and recompute the digest, as anyone without the key can."""
    rows = records(path)
    body, trailer = rows[:-1], rows[-1]
    edit(body)
    lines = [json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in body]
    trailer["digest"] = hashlib.sha256("".join(lines).encode()).hexdigest()
    trailer["decisions"] = sum(1 for r in body if r["kind"] == "decision")
    trailer["links"] = sum(1 for r in body if r["kind"] == "link")
    for run, entry in trailer["runs"].items():
        chained = [r for r in body if r.get("run_id") == run and r["kind"] != "store_decision"]
        entry["decisions"] = sum(1 for r in chained if r["kind"] == "decision")
        entry["chain_from"] = chained[0]["sequence"] if chained else None
    path.write_text("".join(lines) + json.dumps(trailer) + "\n", encoding="utf-8")


def _first(kind: str, event_type: str | None = None) -> Callable[[list[dict[str, Any]]], int]:
    def find(body: list[dict[str, Any]]) -> int:
        return next(
            i
            for i, r in enumerate(body)
            if r["kind"] == kind and (event_type is None or r.get("event_type") == event_type)
        )

    return find


def _edit_event_reason(body: list[dict[str, Any]]) -> None:
    r = body[_first("decision", "approval_granted")(body)]
    r["event"]["payload"]["reason"] = "approved by the CFO"
    r["decision"]["reason"] = "approved by the CFO"


def _edit_derived_who(body: list[dict[str, Any]]) -> None:
    body[_first("decision", "budget_set")(body)]["who"]["client"] = "the CFO's laptop"


def _drop_a_link(body: list[dict[str, Any]]) -> None:
    del body[_first("link")(body)]


def _decision_as_link(body: list[dict[str, Any]]) -> None:
    i = _first("decision", "approval_granted")(body)
    r = body[i]
    body[i] = {
        "kind": "link",
        "run_id": r["run_id"],
        "sequence": r["sequence"],
        "event": r["event"],
    }


@pytest.mark.parametrize(
    "edit", [_edit_event_reason, _edit_derived_who, _drop_a_link, _decision_as_link]
)
def test_an_edited_file_fails_verification_even_with_its_digest_recomputed(
    decided: dict[str, str],
    cli: Callable[..., Result],
    work: Path,
    edit: Callable[[list[dict[str, Any]]], None],
) -> None:
    out = work / "audit.jsonl"
    ok(cli("audit", RUN, "--out", str(out)))
    ok(cli("verify-audit", str(out)))  # intact: the control
    _rewrite(out, lambda body: None)  # re-encoding alone changes nothing that is checked
    ok(cli("verify-audit", str(out)))
    _rewrite(out, edit)
    r = cli("--json", "verify-audit", str(out))
    assert r.code == 3 and r.json()["error"]["code"] == "integrity.audit_mismatch", r.out


def _drop_every_chained_line(body: list[dict[str, Any]]) -> None:
    body[:] = [r for r in body if r["kind"] not in ("decision", "link")]


def test_a_file_emptied_of_decisions_is_consistent_but_fails_the_signature(
    decided: dict[str, str], cli: Callable[..., Result], work: Path
) -> None:
    private, public = keys(work, cli)
    out = work / "audit.jsonl"
    ok(cli("audit", RUN, "--out", str(out), "--sign", private))
    _rewrite(out, _drop_every_chained_line)  # "no decision in this run": nothing to contradict
    ok(cli("verify-audit", str(out)))  # without the key nothing vouches for what is left out
    r = cli("--json", "verify-audit", str(out), "--public-key", public)
    assert r.code == 3 and r.json()["error"]["code"] == "integrity.audit_signature"


def test_another_key_and_a_changed_store_are_refused(
    decided: dict[str, str], cli: Callable[..., Result], work: Path, db: str
) -> None:
    private, _ = keys(work, cli)
    _, other = keys(work, cli, "stranger")
    out = work / "audit.jsonl"
    ok(cli("audit", RUN, "--out", str(out), "--sign", private))
    r = cli("--json", "verify-audit", str(out), "--public-key", other)
    assert r.code == 3 and r.json()["error"]["code"].startswith("integrity.")
    r = cli("--db", str(work / "elsewhere.db"), "init", with_db=False)
    r = cli(
        "--db", str(work / "elsewhere.db"), "--json", "verify-audit", str(out), "--store",
        with_db=False,
    )  # fmt: skip
    assert r.code in (2, 3), r.out  # that store has no such run, or not this head


def test_since_filters_decisions_and_all_includes_the_store_wide_unlock(
    decided: dict[str, str], cli: Callable[..., Result], work: Path
) -> None:
    ok(cli("confirm-token", "unlock", "--yes"))
    ok(cli("hooks", "accept", "--dir", str(work), "--yes"))
    out = work / "all.jsonl"
    doc = ok(cli("--json", "audit", "--all", "--out", str(out))).json()
    rows = records(out)
    kinds = {(r["kind"], r.get("event_type")) for r in rows}
    assert ("store_decision", "confirm_token_unlocked") in kinds
    assert ("decision", "registry_accepted") in kinds
    [accepted] = [r for r in rows if r.get("event_type") == "registry_accepted"]
    assert accepted["how"]["channel"] == "script"
    assert doc["store_decisions"] == 1
    ok(cli("verify-audit", str(out)))
    later = work / "later.jsonl"
    doc = ok(cli("--json", "audit", RUN, "--since", "2999-01-01", "--out", str(later))).json()
    assert doc["decisions"] == 0 and doc["links"] == 0
    ok(cli("verify-audit", str(later)))


def test_usage_errors_have_their_exit_codes(
    decided: dict[str, str], cli: Callable[..., Result], work: Path
) -> None:
    def code(*args: str) -> tuple[int, str]:
        r = cli("--json", *args)
        return r.code, r.json()["error"]["code"]

    assert code("audit") == (1, "usage.invalid")
    assert code("audit", RUN, "--all") == (1, "usage.invalid")
    assert code("audit", RUN) == (1, "usage.invalid")  # --json needs --out
    assert code("audit", RUN, "--since", "last week", "--out", "x") == (1, "usage.bad_since")
    assert code("audit", "nobody", "--out", str(work / "n.jsonl"))[0] == 2
    (work / "exists.jsonl").write_text("", encoding="utf-8")
    assert code("audit", RUN, "--out", str(work / "exists.jsonl")) == (1, "usage.file_exists")
    (work / "not.jsonl").write_text('{"kind":"run"}\n', encoding="utf-8")
    assert code("verify-audit", str(work / "not.jsonl")) == (1, "usage.bad_audit")
    assert code("verify-audit", str(work / "missing.jsonl")) == (1, "usage.bad_audit")
    assert not (work / "n.jsonl").exists()


@pytest.mark.anyio
async def test_a_confirmation_over_mcp_with_the_confirm_token_is_exported_as_human(
    tmp_path: Path, cli: Callable[..., Result], db: str
) -> None:
    async with session(Path(db), "legacy") as s:
        await s.ok("continuum_record_progress", {"run_id": "r1", "goal": INJ, "total": 1})
        await s.ok("continuum_confirm", {"run_id": "r1"}, meta={"confirmToken": CONFIRM_SECRET})
    out = tmp_path / "mcp.jsonl"
    ok(cli("audit", "r1", "--out", str(out)))
    [confirm] = [r for r in records(out) if r["kind"] == "decision"]
    assert confirm["event_type"] == "review_confirmed" and confirm["who"]["origin"] == "human"
    assert "MCP continuum_confirm with the confirm token" in confirm["how"]["possible"]
    assert confirm["how"]["channel"] == "mcp" and confirm["who"]["client"] == AGENT
    assert confirm["shown"]["values"]["goal"] == INJ
    assert _raw_unsafe(out.read_text(encoding="utf-8")) == []
    ok(cli("verify-audit", str(out)))


def test_a_run_with_archived_history_is_exported_from_its_live_log_and_says_so(
    decided: dict[str, str], cli: Callable[..., Result], work: Path
) -> None:
    ok(cli("archive", RUN, "--before", "4", "--to", str(work / "old.archive"), "--yes"))
    out = work / "audit.jsonl"
    ok(cli("audit", RUN, "--out", str(out)))
    rows = records(out)
    head = rows[-1]["runs"][RUN]
    assert head["archived_through"] == 3 and head["chain_from"] == 4
    assert head["decisions"] == 5  # every decision came after sequence 3
    ok(cli("verify-audit", str(out), "--store"))


# -- how each decision was given: recorded by the path that wrote it -----------------------

HOSTILE_CLIENT = "claude\x1b[2J\x1b]0;pwned\x07\u202eedoc</script>&" + "x" * 300


def test_a_confirmation_at_a_terminal_prompt_is_exported_as_given_at_the_terminal(
    db: str, work: Path, cli: Callable[..., Result]
) -> None:
    rt = agent(db, work)
    rt.record_progress(RUN, completed=1, total=2, goal="send two invoices")
    rt.close()
    term = Terminal(db, "confirm", RUN, cwd=work)
    term.wait_for("Confirm this as true?")
    term.send("y\r")
    assert term.finish() in (0, 10, 20), term.text()
    out = work / "terminal.jsonl"
    ok(cli("audit", RUN, "--out", str(out)))
    [confirm] = [r for r in records(out) if r["kind"] == "decision"]
    assert confirm["how"]["channel"] == "terminal" and confirm["how"]["recorded"] is True
    assert confirm["who"] == {"origin": "human", "role": None, "client": None, "token": None}
    ok(cli("verify-audit", str(out)))


PAGE_TOKEN, PAGE_CONFIRM = "approve-token-of-the-page-0001", "the-persons-confirm-token-02"


def _page(db: str) -> TestClient:
    from starlette.applications import Starlette

    from continuum.ui.routes import operator_routes
    from continuum.ui.sessions import ConfirmGate, Principal

    def principal(token: str) -> Principal | None:
        return Principal("approve", True, "token-file line 1") if token == PAGE_TOKEN else None

    gate = ConfirmGate(lambda presented: presented == PAGE_CONFIRM, "CONTINUUM_MCP_CONFIRM_TOKEN")
    app = Starlette(routes=operator_routes(db, principal, confirm=gate, secure=False))
    client = TestClient(app, base_url="http://testserver", follow_redirects=False)
    here = {"Origin": "http://testserver"}
    client.headers.update(here)
    assert client.post("/ui/login", data={"token": PAGE_TOKEN}).status_code == 303
    return client


def _csrf(client: TestClient, run_id: str) -> dict[str, str]:
    text = client.get("/ui/run", params={"id": run_id}).text
    found = re.search(r'name="csrf" value="([^"]+)"', text)
    assert found, text
    seq = re.search(r'name="through_sequence" value="(\d+)"', text)
    head = re.search(r'name="head_hash" value="([0-9a-f]*)"', text)
    return {
        "csrf": found.group(1),
        "run_id": run_id,
        "confirm_token": PAGE_CONFIRM,
        "through_sequence": seq.group(1) if seq else "",
        "head_hash": head.group(1) if head else "",
    }


def test_decisions_on_the_operator_page_are_exported_as_given_there_with_the_role(
    db: str, work: Path, cli: Callable[..., Result]
) -> None:
    rt = agent(db, work)
    try:
        rt.start_run(RUN, "pay the invoices", total=2)
        wire = rt.intercept(RUN, "wire_money", {"to": "acct 1"}, key="W-1")
        lost = rt.intercept(RUN, "send", {"n": 1}, key="S-1")
        rt.fail(RUN, lost.action_key, error="timeout")
    finally:
        rt.close()
    with _page(db) as client:
        form = _csrf(client, RUN)
        answer = client.post(
            "/ui/decide",
            data={**form, "approval_id": wire.approval_id or "", "decision": "allow",
                  "reason": "checked the invoice", "scope": "call"},
        )  # fmt: skip
        assert answer.status_code == 303, answer.text
        action = lost.action_id
        attempt = next(a.attempt for a in agent(db, work).actions(RUN) if a.action_id == action)
        answer = client.post(
            "/ui/reconcile",
            data={**_csrf(client, RUN), "action_id": action, "occurred": "no",
                  "attempt": str(attempt)},
        )  # fmt: skip
        assert answer.status_code == 303, answer.text
        form = _csrf(client, RUN)
        answer = client.post("/ui/confirm", data={**form, "scope": "default"})
        assert answer.status_code == 303, answer.text
    out = work / "page.jsonl"
    ok(cli("audit", RUN, "--out", str(out)))
    found = {r["event_type"]: r for r in records(out) if r["kind"] == "decision"}
    assert set(found) == {"approval_granted", "action_reconciled", "review_confirmed"}
    for r in found.values():
        assert r["how"]["channel"] == "page" and r["who"]["role"] == "approve", r
    ok(cli("verify-audit", str(out)))


@pytest.mark.anyio
async def test_a_hostile_mcp_client_name_is_recorded_as_data_and_stays_inert(
    tmp_path: Path, cli: Callable[..., Result], db: str
) -> None:
    pol = policy(HOSTILE_CLIENT)
    async with session(Path(db), "legacy", name=HOSTILE_CLIENT, pol=pol) as s:
        await s.ok("continuum_record_progress", {"run_id": "r1", "goal": "g", "total": 1})
        await s.ok("continuum_confirm", {"run_id": "r1"}, meta={"confirmToken": CONFIRM_SECRET})
    out = tmp_path / "hostile.jsonl"
    ok(cli("audit", "r1", "--out", str(out)))
    text = out.read_text(encoding="utf-8")
    assert _raw_unsafe(text) == [] and "\x1b" not in text and "\u202e" not in text
    [confirm] = [r for r in records(out) if r["kind"] == "decision"]
    assert confirm["how"]["channel"] == "mcp"
    assert confirm["who"]["client"] == HOSTILE_CLIENT[:200]  # as given, cut to 200
    ok(cli("verify-audit", str(out)))
    shown = ok(cli("events", "r1"))
    assert "\x1b" not in shown.out and "\u202e" not in shown.out


def test_a_via_with_unknown_keys_or_a_bad_channel_is_refused_and_nothing_is_written(
    db: str, work: Path
) -> None:
    rt = agent(db, work)
    rt.record_progress(RUN, completed=1, total=2, goal="g")
    rt.close()
    human = Continuum(open_store(db), origin=Origin.HUMAN)
    try:
        before = human.store.get_run(RUN).head_sequence
        for via in ({"channel": "carrier pigeon"}, {"channel": "script", "token": "t"},
                    {"channel": "page", "role": "approve\u202e"}, {"client": "x" * 201}):  # fmt: skip
            with pytest.raises(UsageError) as caught:
                human.confirm(RUN, via=via)
            assert caught.value.code == "usage.bad_via"
        assert human.store.get_run(RUN).head_sequence == before
    finally:
        human.close()


def _pending_change(pins_file: Path, now: str = f"Send it {INJ}") -> None:
    pins = Pins.load(pins_file)
    pins.judge("inv", [("send", "Send an invoice.", {"type": "object"})])  # first sight
    pins.judge("inv", [("send", now, {"type": "object"})])  # changed
    pins.save()


def test_a_gateway_accept_is_in_the_pins_history_and_in_audit_all(
    db: str, work: Path, cli: Callable[..., Result]
) -> None:
    ok(cli("init"))
    pins_file = work / "gateway-pins.json"
    _pending_change(pins_file)
    first = json.loads(pins_file.read_text(encoding="utf-8"))
    assert "accepted_at" not in first["servers"]["inv"]["tools"]["send"]  # first sight
    ok(cli("gateway", "accept", "--pins", str(pins_file), "--yes"))
    data = json.loads(pins_file.read_text(encoding="utf-8"))
    [entry] = data["accepted"]
    assert entry["via"] == {"channel": "script"} and entry["by"] == "human"
    assert entry["old_sha256"] == first["servers"]["inv"]["tools"]["send"]["sha256"]
    assert data["servers"]["inv"]["tools"]["send"]["accepted_at"] == entry["accepted_at"]
    private, public = keys(work, cli)
    out = work / "all.jsonl"
    doc = ok(
        cli("--json", "audit", "--all", "--pins", str(pins_file), "--out", str(out),
            "--sign", private)
    ).json()  # fmt: skip
    assert doc["store_decisions"] == 1
    text = out.read_text(encoding="utf-8")
    assert _raw_unsafe(text) == []
    [record] = [r for r in records(out) if r.get("event_type") == "gateway_tool_accepted"]
    assert record["kind"] == "store_decision" and record["chained"] is False
    assert record["decision"]["tool"] == "send" and record["how"]["channel"] == "script"
    assert record["shown"]["old_sha256"] == entry["old_sha256"]
    ok(cli("verify-audit", str(out), "--public-key", public, "--pins", str(pins_file)))

    def edit(body: list[dict[str, Any]]) -> None:
        body[_first("store_decision", "gateway_tool_accepted")(body)]["how"]["channel"] = "page"

    _rewrite(out, edit)
    r = cli("--json", "verify-audit", str(out))
    assert r.code == 3 and r.json()["error"]["code"] == "integrity.audit_mismatch", r.out
    other = work / "other-pins.json"
    _pending_change(other, "Send it elsewhere.")  # another acceptance
    ok(cli("gateway", "accept", "--pins", str(other), "--yes"))
    again = work / "again.jsonl"
    ok(cli("audit", "--all", "--pins", str(pins_file), "--out", str(again)))
    r = cli("--json", "verify-audit", str(again), "--pins", str(other))
    assert r.code == 3 and r.json()["error"]["code"] == "integrity.audit_mismatch", r.out


def test_a_pins_file_without_history_still_loads_and_gains_one_on_accept(work: Path) -> None:
    old = work / "old-pins.json"
    old.write_text(
        json.dumps({"version": 1, "servers": {"inv": {"tools": {}, "pending": {}}}}),
        encoding="utf-8",
    )
    pins = Pins.load(old)
    assert pins.history() == [] and pins.pending() == []
    _pending_change(old)
    pins = Pins.load(old)
    [done] = pins.accept("inv", "send")
    pins.save()
    assert [e["tool"] for e in Pins.load(old).history()] == [done["tool"]]

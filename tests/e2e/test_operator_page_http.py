"""The operator page's guards, over plain HTTP against a real ``continuum ui`` (and
``continuum-mcp --ui``) subprocess: log-in, session cookie, CSRF, origin, roles, headers.

Each refusal is checked against the store byte for byte (nothing recorded), and each
family of refusals has a positive control: the same request made right is recorded. A
wrong confirm token is the one refusal that writes: it is counted for the store (issue
30), so there no run's log may change and the counter must say so.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.e2e.operator_site import (
    BOUND,
    CONFIRM,
    RULES_TOML,
    TOKENS,
    Seeded,
    Server,
    events,
    mcp_command,
    seed,
    serving,
    ui_command,
    write_tokens,
)
from tests.mcp.confirm_support import attempt_counter, runs_record

CSRF = re.compile(r'name="csrf" value="([^"]+)"')
SEQ = re.compile(r'name="through_sequence" value="(\d+)"')
HEAD = re.compile(r'name="head_hash" value="([0-9a-f]*)"')


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[Server, Seeded, Path]]:
    work = tmp_path / "work"
    (work / ".continuum").mkdir(parents=True)
    (work / ".continuum" / "approvals.toml").write_text(RULES_TOML)
    db = work / "store.db"
    seeded = seed(db)
    with serving(ui_command(db, write_tokens(work / "tokens")), work, confirm=CONFIRM) as server:
        yield server, seeded, db


def store_bytes(db: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(db.parent.glob(db.name + "*")):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def origin(server: Server) -> dict[str, str]:
    return {"Origin": server.url.removesuffix("/ui/")}


@contextmanager
def logged_in(server: Server, role: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url.removesuffix("/ui/"), timeout=BOUND) as client:
        answer = client.post("/ui/login", data={"token": TOKENS[role]}, headers=origin(server))
        assert answer.status_code == 303, answer.text
        yield client


def confirm_form(client: httpx.Client, run_id: str) -> dict[str, str]:
    page = client.get("/ui/run", params={"id": run_id}).text
    csrf = CSRF.search(page)
    assert csrf is not None
    seq, head = SEQ.search(page), HEAD.search(page)
    return {
        "csrf": csrf.group(1),
        "run_id": run_id,
        "scope": "default",
        "through_sequence": seq.group(1) if seq else "1",
        "head_hash": head.group(1) if head else "",
        "confirm_token": CONFIRM,
    }


def test_login_sets_a_strict_httponly_session_cookie_that_is_not_the_token(
    site: tuple[Server, Seeded, Path],
) -> None:
    server, _, _ = site
    with httpx.Client(base_url=server.url.removesuffix("/ui/"), timeout=BOUND) as client:
        answer = client.post("/ui/login", data={"token": TOKENS["approve"]}, headers=origin(server))
        assert answer.status_code == 303
        cookie = answer.headers["set-cookie"]
        assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
        assert "path=/ui" in cookie.lower()
        assert (
            TOKENS["approve"] not in cookie and TOKENS["approve"] not in answer.headers["location"]
        )
        page = client.get("/ui/")
        assert page.status_code == 200 and 'id="runs"' in page.text
        headers = page.headers
        assert "default-src 'none'" in headers["content-security-policy"]
        assert "form-action 'self'" in headers["content-security-policy"]
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert headers["x-frame-options"] == "DENY" and headers["cache-control"] == "no-store"
        assert "<script" not in page.text.lower()
    assert TOKENS["approve"] not in server.log() and "ui.login" in server.log()


def test_a_wrong_token_or_a_token_in_the_url_does_not_log_in(
    site: tuple[Server, Seeded, Path],
) -> None:
    server, _, _ = site
    with httpx.Client(base_url=server.url.removesuffix("/ui/"), timeout=BOUND) as client:
        wrong = client.post(
            "/ui/login", data={"token": "not-a-token-of-this-server"}, headers=origin(server)
        )
        assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
        in_url = client.get("/ui/login", params={"token": TOKENS["approve"]})
        assert in_url.status_code == 303 and "set-cookie" not in in_url.headers
        cross = client.post(
            "/ui/login",
            data={"token": TOKENS["approve"]},
            headers={"Origin": "http://evil.example"},
        )
        assert cross.status_code == 403 and "set-cookie" not in cross.headers
        assert 'id="token"' in client.get("/ui/").text  # still the log-in form
    assert TOKENS["approve"] not in server.log()


def test_read_role_cannot_act_and_the_store_is_unchanged(site: tuple[Server, Seeded, Path]) -> None:
    server, seeded, db = site
    with logged_in(server, "read") as client:
        page = client.get("/ui/run", params={"id": seeded.run_id}).text
        assert "/ui/confirm" not in page and "/ui/reconcile" not in page
        assert "/ui/decide" not in page
        csrf = CSRF.search(page)
        assert csrf is not None
        before = store_bytes(db)
        for path, form in (
            ("/ui/confirm", {"run_id": seeded.run_id, "through_sequence": "8"}),
            (
                "/ui/reconcile",
                {"run_id": seeded.run_id, "action_id": seeded.unknown_action, "occurred": "no"},
            ),
            (
                "/ui/decide",
                {
                    "run_id": seeded.run_id,
                    "approval_id": seeded.approvals[0],
                    "decision": "allow",
                    "reason": "r",
                },
            ),
        ):
            answer = client.post(path, data={"csrf": csrf.group(1), **form}, headers=origin(server))
            assert answer.status_code == 403 and "ui.role_denied" in answer.text
        assert store_bytes(db) == before


def test_a_post_without_the_csrf_token_or_from_another_origin_is_refused(
    site: tuple[Server, Seeded, Path],
) -> None:
    server, seeded, db = site
    with logged_in(server, "approve") as client:
        form = confirm_form(client, seeded.run_id)
        before = store_bytes(db)
        no_csrf = {k: v for k, v in form.items() if k != "csrf"}
        for data, headers, code in (
            (no_csrf, origin(server), "ui.csrf"),
            ({**form, "csrf": "x" * 43}, origin(server), "ui.csrf"),
            (form, {"Origin": "http://evil.example"}, "ui.cross_origin"),
            (form, {}, "ui.cross_origin"),  # neither Origin nor Referer: fail closed
            (form, {"Origin": "null"}, "ui.cross_origin"),
        ):
            answer = client.post("/ui/confirm", data=data, headers=headers)
            assert answer.status_code == 403 and code in answer.text, (code, answer.text)
        assert store_bytes(db) == before
        # Positive control: the same form, as the page sends it, is recorded.
        done = client.post("/ui/confirm", data=form, headers=origin(server))
        assert done.status_code == 303
        assert events(db, seeded.run_id)[-1]["type"] == "review_confirmed"
        assert events(db, seeded.run_id)[-1]["source"] == "human"


def test_confirm_refuses_when_the_run_moved_on_since_the_page_was_shown(
    site: tuple[Server, Seeded, Path],
) -> None:
    """contract §5: what was shown is what is confirmed, or nothing is."""
    server, seeded, db = site
    with logged_in(server, "approve") as client:
        form = confirm_form(client, seeded.run_id)
        from continuum.runtime.facade import Continuum

        with Continuum.open(str(db), create=False) as rt:  # the agent records more meanwhile
            rt.record_progress(seeded.run_id, completed=3, total=4)
        count = len(events(db, seeded.run_id))
        answer = client.post("/ui/confirm", data=form, headers=origin(server))
        assert answer.status_code == 409 and "ui.run_moved" in answer.text
        forged = client.post(
            "/ui/confirm",
            headers=origin(server),
            data={**form, "through_sequence": str(count), "head_hash": "0" * 64},
        )
        assert forged.status_code == 409 and "integrity.confirm_mismatch" in forged.text
        assert len(events(db, seeded.run_id)) == count


def test_decide_needs_a_reason_and_the_binding_that_was_shown(
    site: tuple[Server, Seeded, Path],
) -> None:
    server, seeded, db = site
    with logged_in(server, "approve") as client:
        page = client.get("/ui/run", params={"id": seeded.run_id}).text
        csrf = CSRF.search(page)
        assert csrf is not None
        base = {
            "csrf": csrf.group(1),
            "run_id": seeded.run_id,
            "approval_id": seeded.approvals[1],
            "decision": "deny",
            "scope": "call",
            "confirm_token": CONFIRM,
        }
        before = store_bytes(db)
        for extra, code in (
            ({"reason": "  "}, "usage.bad_reason"),
            ({"reason": "r", "binding": "f" * 64}, "integrity.approval_mismatch"),
            ({"reason": "r", "decision": "maybe"}, "usage.missing_option"),
        ):
            answer = client.post("/ui/decide", data={**base, **extra}, headers=origin(server))
            assert answer.status_code in (400, 409) and code in answer.text, (code, answer.text)
        assert store_bytes(db) == before


def test_ui_refuses_plaintext_off_loopback(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    seed(db)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "continuum",
            "--db",
            str(db),
            "ui",
            "--listen",
            "0.0.0.0:0",
            "--token-file",
            str(write_tokens(tmp_path / "tokens")),
        ],
        capture_output=True,
        text=True,
        timeout=BOUND,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 1 and "mcp.tls_required" in done.stderr


def test_mcp_server_with_ui_serves_the_page_and_still_guards_mcp(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    db = work / "store.db"
    seeded = seed(db)
    with serving(mcp_command(db, write_tokens(work / "tokens")), work, confirm=CONFIRM) as server:
        base = server.url.removesuffix("/ui/")
        with httpx.Client(base_url=base, timeout=BOUND) as anonymous:
            assert 'id="token"' in anonymous.get("/ui/").text
            assert anonymous.post("/mcp", json={}).status_code == 401  # bearer still required
        with logged_in(server, "approve") as client:
            form = confirm_form(client, seeded.run_id)
            assert client.post("/ui/confirm", data=form, headers=origin(server)).status_code == 303
        assert events(db, seeded.run_id)[-1]["source"] == "human"


def test_ui_flag_is_refused_on_stdio(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "continuum.mcp", "--db", str(tmp_path / "s.db"), "--ui"],
        capture_output=True,
        text=True,
        timeout=BOUND,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 1 and "usage.bad_flags" in done.stderr and "--ui" in done.stderr


def test_over_tls_the_session_cookie_is_secure(tmp_path: Path) -> None:
    import ssl

    from tests.mcp.test_http_tls import issue

    ca = issue(tmp_path, "ca", is_ca=True)
    server_cert = issue(tmp_path, "server", ca=ca, server=True)[0]
    work = tmp_path / "work"
    work.mkdir()
    db = work / "store.db"
    seed(db)
    command = ui_command(
        db,
        write_tokens(work / "tokens"),
        "--tls-cert",
        str(server_cert.cert),
        "--tls-key",
        str(server_cert.key),
    )
    with serving(command, work) as server:
        assert server.url.startswith("https://") and "TLS 1.3" in server.log()
        context = ssl.create_default_context(cafile=str(ca[0].cert))
        base = server.url.removesuffix("/ui/")
        with httpx.Client(base_url=base, verify=context, timeout=BOUND) as client:
            answer = client.post(
                "/ui/login", data={"token": TOKENS["approve"]}, headers={"Origin": base}
            )
            assert answer.status_code == 303
            assert "secure" in answer.headers["set-cookie"].lower()


# --- the person's confirm token (contract §5), cut values, live actions, many runs ---------


@contextmanager
def _served(db: Path, work: Path, role: str) -> Iterator[tuple[Server, httpx.Client]]:
    """``continuum ui`` over ``db`` with the person's confirm token set, logged in as ``role``."""
    with (
        serving(ui_command(db, write_tokens(work / "tokens")), work, confirm=CONFIRM) as server,
        logged_in(server, role) as client,
    ):
        yield server, client


def _page_form(client: httpx.Client, run_id: str) -> tuple[str, str]:
    page = client.get("/ui/run", params={"id": run_id}).text
    csrf = CSRF.search(page)
    assert csrf is not None
    return page, csrf.group(1)


def test_a_bearer_token_alone_records_nothing_the_confirm_token_is_needed(
    site: tuple[Server, Seeded, Path],
) -> None:
    """contract §5: origin human over HTTP needs the person's separate confirm token, in
    each form; a session (bearer token) alone records nothing, whatever it posts."""
    server, seeded, db = site
    with logged_in(server, "approve") as client:
        page, csrf = _page_form(client, seeded.run_id)
        # The page asks for it in a password field on every form that records.
        assert page.count('type="password" name="confirm_token"') == 4  # confirm, 1+2
        confirm = confirm_form(client, seeded.run_id)
        forms = {
            "/ui/confirm": confirm,
            "/ui/reconcile": {
                "csrf": csrf,
                "run_id": seeded.run_id,
                "action_id": seeded.unknown_action,
                "attempt": "1",
                "occurred": "no",
            },
            "/ui/decide": {
                "csrf": csrf,
                "run_id": seeded.run_id,
                "approval_id": seeded.approvals[0],
                "decision": "allow",
                "reason": "r",
                "scope": "call",
            },
        }
        before = runs_record(db)
        for path, form in forms.items():
            for token, code in (
                (None, "ui.confirm_token_missing"),
                ("", "ui.confirm_token_missing"),
                (CONFIRM[:-1] + "x", "ui.confirm_token_mismatch"),
                (TOKENS["approve"], "ui.confirm_token_mismatch"),  # the bearer token is not it
            ):
                data = {k: v for k, v in form.items() if k != "confirm_token"}
                if token is not None:
                    data["confirm_token"] = token
                answer = client.post(path, data=data, headers=origin(server))
                assert answer.status_code == 403 and code in answer.text, (path, code)
                assert CONFIRM not in answer.text and "Nothing was recorded" in answer.text
            assert runs_record(db) == before
            assert attempt_counter(db).failures == 2  # the two wrong ones (issue 30)
            # Positive control: the same form with the person's confirm token is recorded.
            done = client.post(
                path, data={**form, "confirm_token": CONFIRM}, headers=origin(server)
            )
            assert done.status_code == 303, (path, done.text)
            assert events(db, seeded.run_id)[-1]["source"] == "human"
            assert CONFIRM not in client.get(done.headers["location"]).text
            assert attempt_counter(db).failures == 0  # the right one ends the run of wrong ones
            before = runs_record(db)
    assert CONFIRM not in server.log()


def test_wrong_confirm_tokens_log_the_session_out(site: tuple[Server, Seeded, Path]) -> None:
    server, seeded, db = site
    with logged_in(server, "approve") as client:
        form = confirm_form(client, seeded.run_id)
        before = runs_record(db)
        for n in range(5):
            answer = client.post(
                "/ui/confirm", data={**form, "confirm_token": f"guess-{n}"}, headers=origin(server)
            )
            assert answer.status_code == 403 and "ui.confirm_token_mismatch" in answer.text
        # Even the right token is refused now: the session is gone.
        answer = client.post("/ui/confirm", data=form, headers=origin(server))
        assert answer.status_code == 401 and "ui.not_logged_in" in answer.text
        assert 'id="token"' in client.get("/ui/").text
        assert runs_record(db) == before
        assert attempt_counter(db).failures == 5  # counted for the store (issue 30)


@pytest.mark.parametrize("command", ["ui", "mcp"])
def test_without_a_confirm_token_the_page_is_read_only(tmp_path: Path, command: str) -> None:
    """contract §5: no confirm token configured -> nobody records origin human here."""
    work = tmp_path / "work"
    work.mkdir()
    db = work / "store.db"
    seeded = seed(db)
    tokens = write_tokens(work / "tokens")
    argv = ui_command(db, tokens) if command == "ui" else mcp_command(db, tokens)
    with serving(argv, work, confirm=None) as server:
        assert "read-only" in server.log() and "CONTINUUM_MCP_CONFIRM_TOKEN" in server.log()
        with logged_in(server, "approve") as client:
            page, csrf = _page_form(client, seeded.run_id)
            assert 'id="read-only"' in page and "<form" not in page.split("</header>")[1]
            assert 'id="read-only"' in client.get("/ui/").text
            before = store_bytes(db)
            form = {
                "csrf": csrf,
                "run_id": seeded.run_id,
                "through_sequence": str(len(events(db, seeded.run_id))),
                "confirm_token": CONFIRM,
            }
            answer = client.post("/ui/confirm", data=form, headers=origin(server))
            assert answer.status_code == 403 and "ui.read_only" in answer.text
            assert store_bytes(db) == before


def test_allow_is_refused_for_arguments_too_long_to_show(tmp_path: Path) -> None:
    """What Allow covers is shown in full, or Allow is not offered and not accepted."""
    from continuum.ledger.approvals import ApprovalRules, parse_rules
    from continuum.runtime.facade import Continuum
    from continuum.types import Origin

    work = tmp_path / "work"
    (work / ".continuum").mkdir(parents=True)
    (work / ".continuum" / "approvals.toml").write_text(RULES_TOML)
    db = work / "store.db"
    rules = ApprovalRules(rules=parse_rules(RULES_TOML, "approvals.toml"))
    with Continuum.open(str(db), origin=Origin.EXTERNAL_AGENT, approvals=rules) as rt:
        rt.start_run("long", "pay")
        memo = "routine " + "." * 20_000
        asked = rt.intercept("long", "wire_money", {"memo": memo, "to": "PAYEE-9"}, key="w")
        short = rt.intercept("long", "wire_money", {"memo": "." * 500, "to": "PAYEE-7"}, key="v")
    with _served(db, work, "approve") as (server, client):
        page, csrf = _page_form(client, "long")
        card = page.split(f'id="approval-{asked.approval_id}"')[1].split('class="card')[0]
        assert "ARGUMENTS CUT" in card and 'value="allow"' not in card
        assert 'value="deny"' in card and "continuum decide" in card
        other = page.split(f'id="approval-{short.approval_id}"')[1]
        assert "PAYEE-7" in other and 'value="allow"' in other  # past 400 chars, shown
        before = store_bytes(db)
        form = {
            "csrf": csrf,
            "run_id": "long",
            "approval_id": asked.approval_id or "",
            "reason": "looks fine",
            "scope": "call",
            "confirm_token": CONFIRM,
        }
        allow = client.post(
            "/ui/decide", data={**form, "decision": "allow"}, headers=origin(server)
        )
        assert allow.status_code == 409 and "ui.too_long_to_show" in allow.text
        assert store_bytes(db) == before
        deny = client.post("/ui/decide", data={**form, "decision": "deny"}, headers=origin(server))
        assert deny.status_code == 303  # control: denying needs no full view
        assert events(db, "long")[-1]["type"] == "approval_denied"


def test_confirm_is_refused_when_evidence_is_too_long_to_show(tmp_path: Path) -> None:
    """contract §5: what a person confirms was all on the page, or nothing is confirmed."""
    from continuum.eventlog.events import EventType
    from continuum.runtime.facade import Continuum
    from continuum.types import Origin

    work = tmp_path / "work"
    work.mkdir()
    db = work / "store.db"
    with Continuum.open(str(db), origin=Origin.EXTERNAL_AGENT) as rt:
        rt.start_run("ev", "check")
        hidden = "ok " + "." * 20_000 + " BURIED-CLAIM"
        rt.append("ev", EventType.EVIDENCE_ADDED, {"evidence_id": "e1", "text": hidden})
    with _served(db, work, "approve") as (server, client):
        page, csrf = _page_form(client, "ev")
        assert 'id="no-confirm"' in page and 'id="confirm-form"' not in page
        before = store_bytes(db)
        answer = client.post(
            "/ui/confirm",
            headers=origin(server),
            data={
                "csrf": csrf,
                "run_id": "ev",
                "scope": "all",
                "through_sequence": str(len(events(db, "ev"))),
                "confirm_token": CONFIRM,
            },
        )
        assert answer.status_code == 409 and "ui.too_long_to_show" in answer.text
        assert store_bytes(db) == before


def test_a_live_started_action_is_shown_in_progress_and_not_settled(tmp_path: Path) -> None:
    """contract §7: only an unknown, interrupted or agent-failed action is settled by a
    person; one a live process performs is in progress. The form is bound to its attempt."""
    from continuum.runtime.facade import Continuum
    from continuum.types import Origin

    work = tmp_path / "work"
    work.mkdir()
    db = work / "store.db"
    with Continuum.open(str(db), origin=Origin.EXTERNAL_AGENT) as rt:
        rt.start_run("live", "send")
        # Owned by this test process, which is alive while the page is asked.
        live = rt.intercept("live", "send_mail", {"to": "a"}, key="m1").action_id or ""
        gone = rt.intercept("live", "send_mail", {"to": "b"}, key="m2").action_id or ""
        rt.fail("live", gone, error="timeout")  # unknown: a person settles it
    with _served(db, work, "approve") as (server, client):
        page, csrf = _page_form(client, "live")
        card = page.split(f'id="action-{live}"')[1].split('class="card')[0]
        assert "in progress (owned by a live process/session)" in card
        assert f'id="reconcile-{live}"' not in page and f'id="reconcile-{gone}"' in page
        before = store_bytes(db)
        base = {"csrf": csrf, "run_id": "live", "occurred": "no", "confirm_token": CONFIRM}
        for extra, code in (
            ({"action_id": live, "attempt": "1"}, "ui.action_in_progress"),
            ({"action_id": gone, "attempt": "2"}, "ui.action_changed"),
            ({"action_id": gone}, "usage.bad_attempt"),
            ({"action_id": gone, "attempt": "1", "note": "ok\u202eevil"}, "usage.bad_note"),
            ({"action_id": gone, "attempt": "1", "note": "a\x1b[2Kb"}, "usage.bad_note"),
        ):
            answer = client.post("/ui/reconcile", data={**base, **extra}, headers=origin(server))
            assert answer.status_code in (400, 409) and code in answer.text, (code, answer.text)
        assert store_bytes(db) == before
        done = client.post(  # control: the unknown one, as shown, is settled
            "/ui/reconcile",
            data={**base, "action_id": gone, "attempt": "1", "note": "checked"},
            headers=origin(server),
        )
        assert done.status_code == 303
        assert events(db, "live")[-1]["type"] == "action_reconciled"


def test_runs_waiting_for_a_person_are_listed_before_a_flood_of_new_runs(tmp_path: Path) -> None:
    from continuum.ledger.approvals import ApprovalRules, parse_rules
    from continuum.runtime.facade import Continuum
    from continuum.types import Origin

    work = tmp_path / "work"
    work.mkdir()
    db = work / "store.db"
    rules = ApprovalRules(rules=parse_rules(RULES_TOML, "approvals.toml"))
    with Continuum.open(str(db), origin=Origin.EXTERNAL_AGENT, approvals=rules) as rt:
        rt.start_run("needs-a-decision", "pay")
        rt.intercept("needs-a-decision", "wire_money", {"to": "x"}, key="w")
        rt.start_run("needs-a-check", "mail")
        unknown = rt.intercept("needs-a-check", "send_mail", {"to": "y"}, key="m")
        rt.fail("needs-a-check", unknown.action_id or "", error="timeout")
        rt.start_run("old-quiet-run", "nothing")
        for i in range(205):
            rt.start_run(f"noise-{i:03}", "noise")
    with _served(db, work, "read") as (server, client):
        home = client.get("/ui/").text
    rows = re.findall(r'<tr class="run">.*?</tr>', home)
    assert len(rows) == 200
    assert "needs-a-decision" in rows[0] + rows[1] and "needs-a-check" in rows[0] + rows[1]
    assert "old-quiet-run" not in home  # the oldest quiet run is the one left out...
    assert re.search(r'id="more">8 more not shown', home)  # ...and that is said
    assert 'id="open-run"' in home  # a way in for any run


def test_ui_refuses_a_confirm_token_that_is_also_a_bearer_token(tmp_path: Path) -> None:
    """contract §5: the confirm token is a secret of its own (start-up refuses reuse)."""
    import os

    db = tmp_path / "store.db"
    seed(db)
    command = ui_command(db, write_tokens(tmp_path / "tokens"))
    for confirm, code in ((TOKENS["approve"], 1), (CONFIRM, None)):
        env = {**os.environ, "CONTINUUM_MCP_CONFIRM_TOKEN": confirm}
        if code is None:  # control: a secret of its own starts (checked by serving())
            with serving(command, tmp_path, confirm=confirm) as server:
                assert "read-only" not in server.log()
            continue
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=BOUND, check=False
        )
        assert done.returncode == code and "mcp.secret_reused" in done.stderr
        assert confirm not in done.stderr

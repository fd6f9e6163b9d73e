"""The operator page's guards, over plain HTTP against a real ``continuum ui`` (and
``continuum-mcp --ui``) subprocess: log-in, session cookie, CSRF, origin, roles, headers.

Each refusal is checked against the store byte for byte (nothing recorded), and each
family of refusals has a positive control: the same request made right is recorded.
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
    with serving(ui_command(db, write_tokens(work / "tokens")), work) as server:
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
        from continuum.runtime import Continuum

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
    with serving(mcp_command(db, write_tokens(work / "tokens")), work) as server:
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

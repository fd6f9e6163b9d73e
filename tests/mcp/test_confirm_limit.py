"""The confirm token resists guessing (issue 30), against the real servers.

The issue: a 4-digit confirm token was accepted, and an allowlisted stdio agent found it
in 7,392 tries and confirmed its own claims as a human. Here, with the official MCP
client over real ``continuum-mcp`` subprocesses (stdio, streamable HTTP, the operator
page under ``--ui``) on one SQLite store:

- a weak confirm token refuses start-up, in one line naming the variable, never the value;
- the same brute force (10,000 four-digit guesses, the real token at position 7,392) is
  compared ten times, then locked, by the test's own count of the answers (no clock);
  still locked after a restart, over HTTP and on the page; a person unlocks it;
- wrong tokens over stdio, HTTP and the page are counted in the one store, and from the
  third on each is a notification in the outbox;
- a right token before the limit confirms (the control), and ends the run of wrong ones.

A backoff is passed by moving the counter's ``not_before`` into the past in the store
(``let_backoff_pass``), as time would; nothing sleeps.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp_types import CallToolResult

from continuum.serving.secrets import ALLOW_ENV, CONFIRM_TOKEN_ENV
from continuum.store.confirm_attempts import FREE_FAILURES, LOCK_AFTER, NOTICE_FROM
from tests.mcp.confirm_support import (
    attempt_counter,
    confirm_notices,
    let_backoff_pass,
    runs_record,
)
from tests.mcp.conftest import (
    BOUND,
    ServerSite,
    read_events,
    result_text,
    run_server_to_exit,
    seed_store,
    server_env,
    stderr_lines,
    structured,
)
from tests.mcp.http_site import TOKENS, HttpSite, official_client, write_token_file
from tests.mcp.request_meta import request_meta

pytestmark = pytest.mark.anyio

STRONG = "the-persons-own-confirm-token-5Kq2Zr8W"  # 38 characters
RUN = "r1"
DENIALS = {  # what the agent reads -> what the test counts
    "mismatch": "the presented confirm token is not valid",
    "backoff": "no token is checked for another",
    "locked": "confirming with the confirm token is locked",
    "no_run": "is not in this store",
}
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
SEQ = re.compile(r'name="through_sequence" value="(\d+)"')
HEAD = re.compile(r'name="head_hash" value="([0-9a-f]*)"')


def kind_of(result: CallToolResult) -> str:
    """The answer as the test counts it: ``confirmed`` or the kind of denial."""
    if not result.is_error:
        return "confirmed"
    text = result_text(result)
    found = [kind for kind, marker in DENIALS.items() if marker in text]
    assert len(found) == 1, text
    return found[0]


async def confirm(client: Client, token: str, run_id: str = RUN) -> CallToolResult:
    return await client.call_tool(
        "continuum_confirm", {"run_id": run_id}, meta=request_meta({"confirmToken": token})
    )


def stdio_site(site: ServerSite) -> ServerSite:
    seed_store(site.db, RUN, action_key=None)
    site.env = {ALLOW_ENV: "agent", CONFIRM_TOKEN_ENV: STRONG}
    return site


def http_site_on(site: ServerSite) -> HttpSite:
    """An HTTP server (with the operator page) on the same store as ``site``."""
    lines = "".join(f"{role} {token}\n" for role, token in TOKENS.items())
    tokens = write_token_file(site.cwd / "tokens", lines)
    return HttpSite(cwd=site.cwd, db=site.db, token_file=tokens, env={CONFIRM_TOKEN_ENV: STRONG})


@asynccontextmanager
async def page(mcp_url: str) -> AsyncIterator[tuple[httpx2.AsyncClient, dict[str, str]]]:
    """The operator page of a server started with ``--ui``, logged in with role approve;
    yields the client and a confirm form for ``RUN`` without its confirm token."""
    base = mcp_url.removesuffix("/mcp")
    async with httpx2.AsyncClient(base_url=base, timeout=BOUND, trust_env=False) as web:
        login = await web.post(
            "/ui/login", data={"token": TOKENS["approve"]}, headers={"Origin": base}
        )
        assert login.status_code == 303, login.text
        shown = (await web.get("/ui/run", params={"id": RUN})).text
        csrf, seq, head = CSRF.search(shown), SEQ.search(shown), HEAD.search(shown)
        assert csrf is not None and seq is not None and head is not None, shown
        yield (
            web,
            {
                "csrf": csrf.group(1),
                "run_id": RUN,
                "scope": "default",
                "through_sequence": seq.group(1),
                "head_hash": head.group(1),
            },
        )


async def page_confirm(
    web: httpx2.AsyncClient, form: dict[str, str], token: str
) -> httpx2.Response:
    base = str(web.base_url).rstrip("/")
    return await web.post(
        "/ui/confirm", data={**form, "confirm_token": token}, headers={"Origin": base}
    )


def log_events(stderr: str, event: str) -> list[dict[str, object]]:
    rows = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return [row for row in rows if row.get("event") == event]


def person(db: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``continuum --db DB ARGS`` as a real subprocess with no terminal on stdin."""
    return subprocess.run(
        [sys.executable, "-m", "continuum", "--db", str(db), *args],
        cwd=cwd,
        env=server_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )


# --- start-up ----------------------------------------------------------------------


@pytest.mark.parametrize("front", ["stdio", "streamable-http", "continuum ui"])
def test_a_four_digit_confirm_token_refuses_start_up_in_one_line_without_echoing_it(
    site: ServerSite, front: str
) -> None:
    seed_store(site.db, RUN, action_key=None)
    tokens = http_site_on(site).token_file
    http = ("--transport", "streamable-http", "--listen", "127.0.0.1:0", "--token-file")
    outcomes = {}
    for secret in ("7391", STRONG):
        env = {CONFIRM_TOKEN_ENV: secret} | ({ALLOW_ENV: "agent"} if front == "stdio" else {})
        if front == "stdio":  # stdin at EOF: a server that starts serves nothing, exits 0
            done = run_server_to_exit(site.db, cwd=site.cwd, env=env)
        elif front == "streamable-http":  # --doctor: exit 0 exactly when it would serve
            extra = () if secret == "7391" else ("--doctor",)
            done = run_server_to_exit(site.db, *http, str(tokens), *extra, cwd=site.cwd, env=env)
        else:  # a missing certificate is checked after the token: the control's refusal
            missing = ["--tls-cert", "missing.pem", "--tls-key", "missing.key"]
            done = subprocess.run(
                [sys.executable, "-m", "continuum", "--db", str(site.db), "ui", "--listen"]
                + ["127.0.0.1:0", "--token-file", str(tokens), *missing],
                cwd=site.cwd,
                env=server_env(**env),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=BOUND,
                check=False,
            )
        outcomes[secret] = done
    weak = outcomes["7391"]
    assert weak.returncode == 1, weak.stderr
    lines = stderr_lines(weak.stderr)
    assert len(lines) == (1 if front != "continuum ui" else 2), weak.stderr  # the CLI adds a hint
    assert "CONTINUUM_MCP_CONFIRM_TOKEN is shorter than 32 characters" in lines[0]
    assert "mcp.weak_confirm_token" in weak.stderr + weak.stdout
    assert "continuum confirm-token new" in weak.stderr
    assert "7391" not in weak.stderr + weak.stdout
    # The control: the same start-up with a strong token gets past the token.
    strong = outcomes[STRONG]
    if front == "continuum ui":
        assert strong.returncode == 1 and "missing.pem" in strong.stderr, strong.stderr
        assert "weak_confirm_token" not in strong.stderr
    else:
        assert strong.returncode == 0, strong.stderr
    assert STRONG not in strong.stderr + strong.stdout


# --- the brute force of the issue ---------------------------------------------------------


async def test_the_brute_force_of_the_issue_is_stopped_at_the_limit_and_stays_stopped(
    site: ServerSite,
) -> None:
    stdio_site(site)
    before = runs_record(site.db)
    guesses = [f"{n:04d}" for n in range(10_000)]
    guesses.insert(7391, STRONG)  # found on the 7,392nd try in the issue
    answers: list[str] = []  # one per guess, after any backoff was let pass
    waited_after: list[int] = []  # how many had been compared when a backoff answered
    compared = 0
    with anyio.fail_after(BOUND * 4):
        async with site.client() as client:
            for guess in guesses:
                kind = kind_of(await confirm(client, guess))
                while kind == "backoff":
                    waited_after.append(compared)
                    let_backoff_pass(site.db)
                    kind = kind_of(await confirm(client, guess))
                answers.append(kind)
                compared += kind == "mismatch"
                if kind != "mismatch":
                    break
            # Locked: even the real token is refused now, on this connection ...
            assert kind_of(await confirm(client, STRONG)) == "locked"
        # ... after a restart (a new process, the other protocol era) ...
        async with site.client(mode="auto") as client:
            assert kind_of(await confirm(client, STRONG)) == "locked"
        # ... over HTTP with an approve token, and on the operator page, on the same store.
        http = http_site_on(site)
        async with http.serve("--ui") as server:
            async with official_client(server.url, TOKENS["approve"], "auto") as client:
                assert kind_of(await confirm(client, STRONG)) == "locked"
            async with page(server.url) as (web, form):
                refused = await page_confirm(web, form, STRONG)
                assert refused.status_code == 403 and "ui.confirm_locked" in refused.text
            http_stderr = server.stderr()

    assert answers == ["mismatch"] * LOCK_AFTER + ["locked"]  # the test's own count
    assert compared == LOCK_AFTER
    assert all(n > FREE_FAILURES for n in waited_after)  # the first ones are answered at once
    assert runs_record(site.db) == before  # nothing was confirmed, no run changed
    counter = attempt_counter(site.db)
    assert (counter.failures, counter.total, counter.locked) == (LOCK_AFTER, LOCK_AFTER, True)
    # Each wrong token is logged (never the token); from the third on, a notification.
    rejected = log_events(site.stderr(), "confirm_token.rejected")
    assert [row["failures_in_a_row"] for row in rejected] == list(range(1, LOCK_AFTER + 1))
    assert {row["channel"] for row in rejected} == {"stdio"}
    notices = confirm_notices(site.db)
    assert [n.body["details"]["failures_in_a_row"] for n in notices] == list(
        range(NOTICE_FROM, LOCK_AFTER + 1)
    )
    assert notices[-1].body["details"]["locked"] is True and notices[-1].run_id == RUN
    assert all(n.body["details"]["caller"] == "agent" for n in notices)
    for text in (site.stderr(), http_stderr, json.dumps([n.body for n in notices])):
        assert STRONG not in text

    # Only a person unlocks it: not from a pipe (an agent's shell), then at their word.
    piped = person(site.db, "confirm-token", "unlock", cwd=site.cwd)
    assert piped.returncode == 1 and "usage.not_a_terminal" in piped.stderr
    assert attempt_counter(site.db).locked
    unlocked = person(site.db, "confirm-token", "unlock", "--yes", cwd=site.cwd)
    assert unlocked.returncode == 0, unlocked.stderr
    with anyio.fail_after(BOUND):
        async with site.client() as client:
            done = structured(await confirm(client, STRONG))
    assert done["run_id"] == RUN and done["confirmed"]
    last = read_events(site.db, RUN)[-1]
    assert (str(last.type), str(last.source)) == ("review_confirmed", "human")


async def test_a_right_token_before_the_limit_confirms_and_ends_the_run_of_wrong_ones(
    site: ServerSite,
) -> None:
    stdio_site(site)
    with anyio.fail_after(BOUND):
        async with site.client() as client:
            wrong = [kind_of(await confirm(client, f"guess-{n}")) for n in range(FREE_FAILURES)]
            right = await confirm(client, STRONG)
            again = [kind_of(await confirm(client, f"again-{n}")) for n in range(FREE_FAILURES)]
    assert wrong == again == ["mismatch"] * FREE_FAILURES  # no backoff: the run was ended
    assert structured(right)["confirmed"]
    assert str(read_events(site.db, RUN)[-1].source) == "human"
    assert attempt_counter(site.db).failures == FREE_FAILURES  # the second run only


async def test_a_run_that_is_not_in_the_store_gets_no_comparison_and_no_count(
    site: ServerSite,
) -> None:
    stdio_site(site)
    with anyio.fail_after(BOUND):
        async with site.client() as client:
            kinds = [kind_of(await confirm(client, t, "no-such-run")) for t in (STRONG, "guess")]
            control = kind_of(await confirm(client, "guess"))  # the same guess, a real run
    assert kinds == ["no_run", "no_run"] and control == "mismatch"
    assert attempt_counter(site.db).failures == 1  # only the control was counted


# --- one store, every way in ----------------------------------------------------------


async def test_wrong_tokens_over_stdio_http_and_the_page_are_counted_in_one_store(
    site: ServerSite,
) -> None:
    stdio_site(site)
    before = runs_record(site.db)
    seen: list[tuple[int, int]] = []  # (failures in a row, notifications) after each

    def record() -> None:
        seen.append((attempt_counter(site.db).failures, len(confirm_notices(site.db))))

    http = http_site_on(site)
    with anyio.fail_after(BOUND * 2):
        async with site.client() as client:
            assert kind_of(await confirm(client, "stdio-guess")) == "mismatch"
            record()
            async with http.serve("--ui") as server:
                async with official_client(server.url, TOKENS["approve"], "auto") as remote:
                    assert kind_of(await confirm(remote, "http-guess")) == "mismatch"
                    record()
                    async with page(server.url) as (web, form):
                        answer = await page_confirm(web, form, "page-guess")
                        assert answer.status_code == 403
                        assert "ui.confirm_token_mismatch" in answer.text
                        record()
                        assert kind_of(await confirm(client, "stdio-again")) == "mismatch"
                        record()
                        assert runs_record(site.db) == before
                        # The control: the right token on the page confirms, as a person.
                        done = await page_confirm(web, form, STRONG)
                        assert done.status_code == 303, done.text
                http_stderr = server.stderr()
    assert seen == [(1, 0), (2, 0), (3, 1), (4, 2)]
    notices = confirm_notices(site.db)
    assert [n.body["details"]["channel"] for n in notices] == ["page", "stdio"]
    assert str(notices[0].body["details"]["caller"]).startswith("token-file line ")
    assert "continuum confirm-token status" in notices[0].body["command"]
    assert attempt_counter(site.db).failures == 0  # the right token ended the run
    assert str(read_events(site.db, RUN)[-1].source) == "human"
    logged = log_events(site.stderr(), "confirm_token.rejected") + log_events(
        http_stderr, "confirm_token.rejected"
    )
    assert sorted(str(row["channel"]) for row in logged) == ["http", "page", "stdio", "stdio"]
    assert STRONG not in site.stderr() + http_stderr

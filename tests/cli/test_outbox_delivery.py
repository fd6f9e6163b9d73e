"""The outbox reaches a real webhook at least once, through failures, timeouts and kills.

A real receiver process (``webhook_receiver.py``) answers 500, then too slowly (the
deliverer times out although the receiver got it), then 200; it is SIGKILLed and
restarted on the same port, and the deliverer (``continuum outbox deliver --loop``, a
real process) is SIGKILLed and restarted too. In the end the receiver has accepted every
notification; copies of one notification carry the same id (header and body) and the
same bytes, so a receiver deduplicates them. SQLite and PostgreSQL.

Negative control: a deliverer that does not wait for a 2xx (marks sent whatever the
answer) against the same receiver leaves notifications it never accepted, and the
completeness check must say which.

What a notice carries (issue 30, item 11), with the same receiver: an agent's 1 MB error
reaches one that refuses bodies over 64 KiB, cut, with the command that prints it whole
(run here); in the Slack format agent text arrives escaped by Slack's rules, checked by
a parse of Slack's control sequences that finds the live link and pings in the same text
unescaped.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from continuum.eventlog.notices import MAX_TEXT_CHARS
from continuum.ledger.approvals import ApprovalRules, parse_rules
from continuum.ledger.outbox import DeliveryPolicy, NotifyConfig, Webhook, deliver_due, post
from continuum.runtime.facade import Continuum
from continuum.store import Storage, open_store
from continuum.types import Origin

HERE = Path(__file__).resolve().parent
CONTINUUM = str(Path(sys.executable).with_name("continuum"))
BOUND = 90.0  # seconds: a ceiling on each wait, never waited out when all is well
RULES = ApprovalRules(rules=parse_rules('[[approval]]\naction_type = "wire_money"\n', "a"))
NOTIFY = """\
[[webhook]]
name = "ops"
url = "http://127.0.0.1:{port}/hook"

[delivery]
timeout_seconds = 0.5
backoff_seconds = 0.05
max_backoff_seconds = 0.2
max_attempts = 1000
"""


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "store.db")
        return
    from tests.contract import pg_support

    pg_support.require_driver()
    with pg_support.fresh_database("continuum_outbox") as url:
        yield url


def make_notifications(db: str) -> list[str]:
    """Ten notifications of three kinds, written by an agent's ordinary calls."""
    cx = Continuum(open_store(db), origin=Origin.EXTERNAL_AGENT, approvals=RULES)
    try:
        cx.start_run("r1", "pay and mail")
        for i in range(6):
            cx.intercept("r1", "wire_money", {"amount": 1000 + i}, key=f"w{i}")
        for i in range(4):
            r = cx.intercept("r1", "send_mail", {"to": f"c{i}"}, key=f"m{i}")
            cx.fail("r1", r.action_key, error="timeout", certain=i % 2 == 0)
        return sorted(row.delivery_id for row in cx.outbox())
    finally:
        cx.close()


class Receiver:
    def __init__(self, log: Path) -> None:
        self.log, self.port = log, 0
        self.proc: subprocess.Popen[str] | None = None

    def start(self, port: int = 0, *extra: str) -> int:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "webhook_receiver.py"), str(self.log), str(port), *extra],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())
        return self.port

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.communicate(timeout=BOUND)

    def entries(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(x) for x in self.log.read_text(encoding="utf-8").splitlines()]


def wait_until(what: str, condition: Callable[[], bool]) -> None:
    """A bounded wait on a condition the processes under test bring about."""
    deadline = time.monotonic() + BOUND
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def never_accepted(entries: list[dict[str, Any]], ids: list[str]) -> list[str]:
    """The completeness check: notifications the receiver never answered 200 in time."""
    accepted = {e["body_id"] for e in entries if e["answer"] == 200}
    return sorted(set(ids) - accepted)


def counts(db: str) -> dict[str, int]:
    store: Storage = open_store(db, create=False)
    try:
        return store.outbox_counts()
    finally:
        store.close()


def deliverer(db: str, work: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [CONTINUUM, "--db", db, "outbox", "deliver", "--loop", "--poll", "0.05", "--json"],
        cwd=work,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_every_notification_reaches_a_failing_slow_restarted_receiver_deduplicable_by_id(
    db: str, tmp_path: Path
) -> None:
    ids = make_notifications(db)
    assert len(ids) == 10
    work = tmp_path / "work"
    (work / ".continuum").mkdir(parents=True)
    receiver = Receiver(tmp_path / "received.jsonl")
    port = receiver.start(0, "--fail", "3", "--slow", "1", "--slow-seconds", "2")
    (work / ".continuum" / "notify.toml").write_text(NOTIFY.format(port=port), encoding="utf-8")
    first = deliverer(db, work)
    try:
        wait_until("five requests", lambda: len(receiver.entries()) >= 5)
        receiver.kill()  # the receiver dies mid-way: connections are refused
        first.send_signal(signal.SIGKILL)  # and so does the deliverer, maybe holding a claim
        first.communicate(timeout=BOUND)
        assert counts(db)["delivered"] < len(ids)
        receiver.start(port, "--fail", "1")  # back on the same port, failing once more
        second = deliverer(db, work)
        try:
            wait_until("every notification delivered", lambda: counts(db)["delivered"] == len(ids))
        finally:
            second.send_signal(signal.SIGTERM)
            out, err = second.communicate(timeout=BOUND)
        assert second.returncode in (0, 20), err
        summary = json.loads(out)  # one JSON document, even after a loop
        assert summary["ok"] is True and summary["counts"]["delivered"] == len(ids)
    finally:
        receiver.kill()
        if first.poll() is None:
            first.kill()
    entries = receiver.entries()
    assert never_accepted(entries, ids) == []
    assert all(e["header"] == e["body_id"] == e["idempotency_key"] for e in entries)
    assert all(e["ascii"] for e in entries)
    copies = Counter(e["body_id"] for e in entries)
    duplicated = [i for i, n in copies.items() if n > 1]
    assert duplicated  # the 500s and the timeout were retried
    for i in duplicated:  # the same notification, byte for byte: deduplicable by its id
        assert len({e["sha256"] for e in entries if e["body_id"] == i}) == 1
    print(
        f"outbox [delivery]: {len(ids)} notifications, {len(entries)} requests received "
        f"({len(entries) - len(copies)} duplicates by id), receiver and deliverer killed "
        f"once each: 0 missing"
    )


def test_negative_control_a_deliverer_that_ignores_errors_leaves_notifications_unaccepted(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "store.db")
    ids = make_notifications(db)
    receiver = Receiver(tmp_path / "received.jsonl")
    port = receiver.start(0, "--fail", "3")
    config = NotifyConfig(
        webhooks=(Webhook(name="ops", url=f"http://127.0.0.1:{port}/h"),),
        policy=DeliveryPolicy(timeout_seconds=5),
    )

    def careless(webhook: Webhook, row: Any, **kw: Any) -> None:
        post(webhook, row, **kw)  # the bug: the answer is not looked at

    store = open_store(db)
    try:
        deliver_due(store, config, sender=careless)
        assert store.outbox_counts()["delivered"] == len(ids)  # it believes so
    finally:
        store.close()
        receiver.kill()
    assert len(never_accepted(receiver.entries(), ids)) == 3  # the check catches it


def test_delivery_refuses_a_webhook_that_is_not_http(tmp_path: Path) -> None:
    db = str(tmp_path / "store.db")
    make_notifications(db)
    (tmp_path / ".continuum").mkdir()
    (tmp_path / ".continuum" / "notify.toml").write_text(
        '[[webhook]]\nurl = "file:///etc/passwd"\n', encoding="utf-8"
    )
    done = subprocess.run(
        [CONTINUUM, "--db", db, "outbox", "deliver", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=BOUND,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "outbox.bad_config" and "http" in error["message"]
    assert counts(db) == {"pending": 10, "delivered": 0, "failed": 0}


# -- what a notice carries (issue 30, item 11) ----------------------------------------------

MAX_BODY = 64 * 1024  # the receiver below refuses larger bodies, as many do
HOSTILE = "<https://evil.example/approve|Click to approve> <!channel> <@U024BE7LH> & <#C0>"


def deliver_once(db: str, work: Path, notify: str) -> dict[str, Any]:
    """One real `continuum outbox deliver` pass with ``notify`` as the settings."""
    (work / ".continuum").mkdir(parents=True, exist_ok=True)
    (work / ".continuum" / "notify.toml").write_text(notify, encoding="utf-8")
    done = subprocess.run(
        [CONTINUUM, "--db", db, "--json", "outbox", "deliver"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=BOUND,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert done.returncode in (0, 20), done.stdout + done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_a_megabyte_error_reaches_a_receiver_that_refuses_large_bodies_cut_and_pointing_to_the_rest(
    db: str, tmp_path: Path
) -> None:
    """An agent's 1 MB error used to be a 1,000,838-byte body on every try: a receiver that
    refuses large bodies left the notice `failed` and no person was told. Now the error is
    cut to MAX_TEXT_CHARS, says how long it was, and names the command that prints it."""
    error = "Traceback: " + "x" * 1_000_000 + " END"
    cx = Continuum(open_store(db), origin=Origin.EXTERNAL_AGENT)
    try:
        cx.start_run("r1", "mail")
        r = cx.intercept("r1", "send_mail", {"to": "c1"}, key="m1")
        cx.fail("r1", r.action_key, error=error)  # uncertain: the action is now unknown
    finally:
        cx.close()
    receiver = Receiver(tmp_path / "received.jsonl")
    port = receiver.start(0, "--fail", "1", "--max-body", str(MAX_BODY), "--keep-bodies")
    notify = NOTIFY.format(port=port).replace("max_attempts = 1000", "max_attempts = 2")
    try:
        deliver_once(db, tmp_path / "work", notify)  # the receiver answers 500 first
        assert counts(db)["pending"] == 1

        def another_pass() -> bool:  # the retry is due after its backoff (0.05 s)
            deliver_once(db, tmp_path / "work", notify)
            return counts(db)["pending"] == 0  # sent, or given up

        wait_until("the retry", another_pass)
    finally:
        receiver.kill()
    assert counts(db) == {"pending": 0, "delivered": 1, "failed": 0}
    entries = receiver.entries()
    assert [e["answer"] for e in entries] == [500, 200]
    assert all(e["size"] <= MAX_BODY for e in entries)
    assert len({e["sha256"] for e in entries}) == 1  # the same bytes on every try
    body = json.loads(entries[-1]["body"])
    details = body["details"]
    assert details["reason"] == error[:MAX_TEXT_CHARS]
    assert details["cut"] == {"reason": len(error)}
    # where to read the rest: the command in the notice prints the whole error
    command = shlex.split(details["read_in_full"])
    assert command[:2] == ["continuum", "events"]
    shown = subprocess.run(
        [CONTINUUM, "--db", db, *command[1:]], capture_output=True, text=True, timeout=BOUND
    )
    assert shown.returncode == 0, shown.stderr
    (event,) = json.loads(shown.stdout)["events"]
    assert event["sequence"] == body["sequence"] and event["payload"]["reason"] == error
    print(
        f"outbox [notice size]: a {len(error):,}-character error arrived as a "
        f"{entries[-1]['size']:,}-byte body (receiver limit {MAX_BODY:,})"
    )


def slack_controls(text: str) -> list[str]:
    """What Slack would parse as a link, a mention or a command in message text: every
    ``<...>`` sequence, and every ``&`` that is not one of the three escapes."""
    return re.findall(r"<[^>]*>", text) + re.findall(r"&(?!amp;|lt;|gt;)", text)


def slack_shows(text: str) -> str:
    """The text a person reads once Slack has decoded the three escapes."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def test_agent_text_in_the_slack_format_is_escaped_by_slacks_rules(db: str, tmp_path: Path) -> None:
    cx = Continuum(open_store(db), origin=Origin.EXTERNAL_AGENT, approvals=RULES)
    try:
        cx.start_run("r1", "pay and mail")
        asked = cx.intercept("r1", "wire_money", {"to": HOSTILE}, key="w&<!here>")
        assert asked.status == "awaiting_approval"
        r = cx.intercept("r1", "send_mail", {"to": "c1"}, key="m1")
        cx.fail("r1", r.action_key, error=HOSTILE)
    finally:
        cx.close()
    receiver = Receiver(tmp_path / "received.jsonl")
    port = receiver.start(0, "--keep-bodies")
    notify = NOTIFY.format(port=port).replace('name = "ops"', 'name = "ops"\nformat = "slack"')
    try:
        deliver_once(db, tmp_path / "work", notify)
    finally:
        receiver.kill()
    assert counts(db)["delivered"] == 2
    messages = [json.loads(e["body"]) for e in receiver.entries()]
    assert len(messages) == 2 and all(e["ascii"] for e in receiver.entries())
    for message in messages:
        text = message["text"]
        assert slack_controls(text) == [], text  # no link, mention or stray entity
        assert (message["link_names"], message["unfurl_links"], message["unfurl_media"]) == (
            False,
            False,
            False,
        )
        assert HOSTILE in slack_shows(text)  # the person reads exactly what the agent wrote
    shown = [slack_shows(m["text"]) for m in messages]
    assert any("w&<!here>" in t and "continuum decide apr_" in t for t in shown)
    assert any("continuum reconcile r1" in t for t in shown)
    # the check can fail: the same text unescaped holds the live link and the pings
    live = [c for t in shown for c in slack_controls(t)]
    for control in (
        "<https://evil.example/approve|Click to approve>",
        "<!channel>",
        "<@U024BE7LH>",
        "<!here>",
        "&",
    ):
        assert control in live, control
    print("outbox [slack]:", messages[0]["text"].replace("\n", " / "))


def test_a_pass_sends_each_notification_once_even_when_its_retry_falls_due_during_it(
    tmp_path: Path,
) -> None:
    """A pass takes what was due when it began: a slow pass (here a clock that moves a
    second per look, past the 0.05 s backoff) never retries within itself; before, a
    pass slowed by a first log line sent the same notification twice and used up its
    attempts. Control: the next pass does retry it."""
    db = str(tmp_path / "s.db")
    cx = Continuum(open_store(db), origin=Origin.EXTERNAL_AGENT)
    cx.start_run("r1", "mail")
    r = cx.intercept("r1", "send_mail", {"to": "c1"}, key="m1")
    cx.fail("r1", r.action_key, error="timeout")
    ticks = [1000.0]

    def clock() -> float:
        ticks[0] += 1.0
        return ticks[0]

    sent: list[str] = []

    def failing(webhook: Webhook, row: Any, **kw: Any) -> str:
        sent.append(row.delivery_id)
        return "HTTP 500"

    config = NotifyConfig(
        webhooks=(Webhook(name="w", url="http://127.0.0.1:9/x"),),
        policy=DeliveryPolicy(timeout_seconds=0.5, backoff_seconds=0.05, max_attempts=5),
    )
    try:
        report = deliver_due(cx.store, config, clock=clock, sender=failing)
        assert (report.claimed, len(sent)) == (1, 1)
        assert cx.outbox_counts()["pending"] == 1
        deliver_due(cx.store, config, clock=clock, sender=failing)  # the next pass retries
        assert len(sent) == 2
    finally:
        cx.close()

"""`continuum fork RUN --at SEQ --as NEW`: its output, its JSON document and its errors."""

from __future__ import annotations

from collections.abc import Callable

from continuum import Continuum
from continuum.store import open_store
from continuum.untrusted import quoted
from tests.cli.conftest import Result

RUN = "r1"


def _run_with_open_action(db: str) -> None:
    with Continuum.open(db, create=True) as cx:
        cx.start_run(RUN, "send mails", total=2)
        done = cx.intercept(RUN, "send_mail", {"to": "a"}, key="a")
        cx.complete(RUN, done.action_key, external_id="m-a")
        cx.intercept(RUN, "send_mail", {"to": "b"}, key="b c")  # left open


def test_fork_prints_what_it_made_and_marks_open_actions(
    cli: Callable[..., Result], db: str
) -> None:
    _run_with_open_action(db)
    result = cli("fork", RUN, "--at", "4", "--as", "r1-retry")
    assert result.code == 0, result.err
    assert 'forked "r1" at sequence 4 as "r1-retry"' in result.out
    assert "1 action(s) open at the fork point" in result.out
    assert quoted("send_mail:b c", limit=80) in result.out  # agent text shown quoted
    events = cli("--json", "events", "r1-retry").json()["events"]
    assert [e["type"] for e in events][4:] == [
        "run_forked",
        "action_marked_unknown",
        "checkpointed",
    ]
    assert cli("verify", "r1-retry").code == 0


def test_fork_json_is_one_document(cli: Callable[..., Result], db: str) -> None:
    _run_with_open_action(db)
    doc = cli("--json", "fork", RUN, "--at", "3", "--as", "r1-b").json()
    assert doc["ok"] is True
    assert (doc["run_id"], doc["from_run"], doc["through_sequence"]) == ("r1-b", RUN, 3)
    assert doc["marked_unknown"] == []  # action b was not intercepted yet at 3
    store = open_store(db)
    try:
        assert store.event_hash_at(RUN, 3) == doc["through_hash"]
    finally:
        store.close()


def test_fork_errors_exit_with_their_codes_and_write_nothing(
    cli: Callable[..., Result], db: str
) -> None:
    _run_with_open_action(db)
    bad_seq = cli("--json", "fork", RUN, "--at", "99", "--as", "x")
    assert bad_seq.code == 1 and bad_seq.json()["error"]["code"] == "usage.bad_sequence"
    exists = cli("--json", "fork", RUN, "--at", "1", "--as", RUN)
    assert exists.code == 1 and exists.json()["error"]["code"] == "usage.run_exists"
    missing = cli("--json", "fork", "nope", "--at", "1", "--as", "x")
    assert missing.code == 2 and missing.json()["error"]["code"] == "not_found.run"
    runs = cli("--json", "runs").json()
    assert [r["run_id"] for r in runs["runs"]] == [RUN]

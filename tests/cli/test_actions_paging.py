"""`continuum actions` a page at a time (contract §13: a listing costs the page, not the
history): open actions first, `--cursor` continues, `--all` lists everything, and the exit
code counts what needs a person over the whole run, not only the page shown."""

from __future__ import annotations

from collections.abc import Callable

from continuum.runtime.facade import Continuum
from continuum.store import open_store
from tests.cli.conftest import Result

CLI = Callable[..., Result]


def fill(db: str, done: int, unknown: int) -> list[str]:
    """``done`` completed actions, then ``unknown`` ones whose outcome is uncertain."""
    store = open_store(db, create=True)
    try:
        rt = Continuum(store)
        rt.start_run("r1", goal="send")
        for i in range(done):
            res = rt.intercept("r1", "send", {"i": i}, key=f"done-{i}")
            rt.complete("r1", res.action_id or "", external_id=f"tx-{i}")
        ids = []
        for i in range(unknown):
            res = rt.intercept("r1", "send", {"u": i}, key=f"unknown-{i}")
            rt.fail("r1", res.action_id or "", error="timeout")
            ids.append(res.action_id or "")
        return ids
    finally:
        store.close()


def test_pages_list_open_actions_first_and_visit_every_action_once(cli: CLI, db: str) -> None:
    unknown = fill(db, done=120, unknown=3)
    first = cli("--json", "actions", "r1")
    assert first.code == 20, first.out  # three actions need a person
    doc = first.json()
    assert len(doc["actions"]) == 100 and doc["next_cursor"]
    assert [a["action_id"] for a in doc["actions"][:3]] == unknown  # open ones first
    assert doc["unresolved"] == 3
    seen = [a["action_id"] for a in doc["actions"]]
    cursor = doc["next_cursor"]
    while cursor:
        page = cli("--json", "actions", "r1", "--cursor", cursor, "--limit", "7").json()
        assert len(page["actions"]) <= 7
        seen += [a["action_id"] for a in page["actions"]]
        cursor = page["next_cursor"]
    everything = cli("--json", "actions", "r1", "--all").json()
    assert everything["next_cursor"] is None
    assert sorted(seen) == sorted(a["action_id"] for a in everything["actions"])
    assert len(seen) == len(set(seen)) == 123


def test_the_exit_code_counts_the_whole_run_not_the_page(cli: CLI, db: str) -> None:
    fill(db, done=2, unknown=2)
    r = cli("--json", "actions", "r1", "--limit", "1")
    assert r.code == 20 and len(r.json()["actions"]) == 1
    assert r.json()["unresolved"] == 2
    text = cli("actions", "r1", "--limit", "1")
    assert "more follow: `continuum actions r1 --cursor " in text.out
    assert "2 unresolved" in text.out


def test_a_run_with_everything_settled_exits_0(cli: CLI, db: str) -> None:
    fill(db, done=3, unknown=0)  # the control for the two tests above
    r = cli("--json", "actions", "r1", "--limit", "2")
    assert r.code == 0 and r.json()["unresolved"] == 0 and r.json()["next_cursor"]


def test_bad_limits_and_cursors_are_refused_by_name(cli: CLI, db: str) -> None:
    fill(db, done=1, unknown=0)
    for bad in ("0", "1001", "x"):
        r = cli("actions", "r1", "--limit", bad)
        assert r.code == 1 and "--limit" in r.out + r.err, (bad, r.out, r.err)
    r = cli("--json", "actions", "r1", "--cursor", "not-a-cursor")
    assert r.code != 0 and r.json()["error"]["code"].startswith("usage."), r.out

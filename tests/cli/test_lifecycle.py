"""A run ends: `finish` and `abort`, each refused for a run already finished, and what
`resume` says when only finished runs are left (issue 12)."""

from __future__ import annotations

from collections.abc import Callable

from tests.cli.conftest import Result

CLI = Callable[..., Result]


def test_finish_marks_the_run_completed_with_its_reason(cli: CLI) -> None:
    cli("start", "r1", "--goal", "g")
    r = cli("--json", "finish", "r1", "--reason", "all sent")
    assert r.code == 0, r.out
    doc = r.json()
    assert doc["status"] == "completed"
    assert (doc["event"]["type"], doc["event"]["payload"]) == (
        "run_completed",
        {"reason": "all sent"},
    )
    assert cli("--json", "status", "r1").json()["status"] == "completed"
    assert [x["status"] for x in cli("--json", "runs").json()["runs"]] == ["completed"]
    assert cli("--json", "resume", "r1").json()["mode"] == "not_resumable"


def test_finish_without_a_reason_records_none(cli: CLI) -> None:
    cli("start", "r1", "--goal", "g")
    r = cli("finish", "r1")
    assert r.code == 0 and "run r1 is now completed" in r.out
    assert cli("--json", "events", "r1").json()["events"][-1]["payload"] == {}


def test_abort_needs_a_reason_and_records_it(cli: CLI) -> None:
    cli("start", "r1", "--goal", "g")
    missing = cli("--json", "abort", "r1")
    assert (missing.code, missing.json()["error"]["code"]) == (1, "usage.invalid")
    empty = cli("--json", "abort", "r1", "--reason", " ")
    assert (empty.code, empty.json()["error"]["code"]) == (1, "usage.missing_option")
    assert cli("--json", "status", "r1").json()["head_sequence"] == 1  # nothing written
    r = cli("--json", "abort", "r1", "--reason", "wrong batch")
    assert r.code == 0 and r.json()["status"] == "aborted"
    assert r.json()["event"]["payload"] == {"reason": "wrong batch"}
    assert cli("--json", "status", "r1").json()["status"] == "aborted"


def test_a_finished_run_cannot_be_finished_or_aborted_again(cli: CLI) -> None:
    cli("start", "r1", "--goal", "g")
    assert cli("abort", "r1", "--reason", "stop").code == 0
    for args in (["finish", "r1"], ["abort", "r1", "--reason", "again"]):
        r = cli("--json", *args)
        assert r.code == 1, r.out
        error = r.json()["error"]
        assert error["code"] == "usage.run_finished"
        assert "already aborted" in error["message"] and error["details"]["status"] == "aborted"
    text = cli("finish", "r1")
    assert "error: run r1 is already aborted; nothing was recorded" in text.err
    assert cli("--json", "status", "r1").json()["head_sequence"] == 2


def test_finish_of_an_unknown_run_is_not_found(cli: CLI) -> None:
    cli("init")
    r = cli("--json", "finish", "nope")
    assert (r.code, r.json()["error"]["code"]) == (2, "not_found.run")


def test_finish_names_actions_that_still_need_a_person(cli_proc: CLI) -> None:
    cli_proc("start", "r1", "--goal", "g")
    cli_proc("intercept", "r1", "send", "--key", "k1")  # its process exits: interrupted
    r = cli_proc("--json", "finish", "r1")
    assert r.code == 0 and r.json()["unresolved_actions"] == ["send:k1"]


def test_resume_without_an_active_run_says_how_many_finished_and_the_latest(cli: CLI) -> None:
    cli("start", "r1", "--goal", "g")
    cli("start", "r2", "--goal", "g")
    cli("finish", "r1")
    cli("abort", "r2", "--reason", "x")
    text = cli("resume")
    assert text.code == 2
    assert text.out.strip() == (
        'no active run: 2 finished runs (latest "r2", aborted); start a '
        "new one with `continuum start RUN --goal G`"
    )
    r = cli("--json", "resume")
    assert r.code == 2
    doc = r.json()
    assert doc["mode"] == "no_active_run" and doc["run_id"] is None
    assert (doc["finished_runs"], doc["finished_run_ids"]) == (2, ["r1", "r2"])


def test_resume_in_an_empty_store_says_there_are_no_runs(cli: CLI) -> None:
    cli("init")
    r = cli("resume")
    assert r.code == 2 and "no runs yet" in r.out and "continuum start" in r.out
    assert cli("--json", "resume").json()["finished_runs"] == 0

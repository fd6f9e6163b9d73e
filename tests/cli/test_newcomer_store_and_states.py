"""A newcomer's first hour, part two (issue 31, items 11 and 13).

11: a command on a store that is not there says which file it looked for (absolute), how
that file was chosen (--db, $CONTINUUM_DB or the default in the current directory) and
how to choose another before suggesting `continuum init`; a command that only opens a
store refuses an empty file instead of turning it into one.

13: an action's state reads the same in `actions`, `resume`, the reconcile prompt and
what reconcile answers, while the JSON keeps the ledger's status values.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from continuum.store import probe_store
from tests.cli.conftest import Result
from tests.cli.pty_support import Terminal

CLI = Callable[..., Result]

INTERRUPTED = "unknown (interrupted: its process is gone)"


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory with no CONTINUUM_DB set."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CONTINUUM_DB", raising=False)
    return tmp_path


def _ways_to_choose_a_store(hint: str) -> None:
    for words in ("--db URL", "CONTINUUM_DB", "`continuum where`", "`continuum init"):
        assert words in hint, (words, hint)
    # Pointing at the right store comes first; a new one only if that was meant.
    assert hint.index("--db URL") < hint.index("`continuum init")
    assert "only if you meant" in hint


# -- item 11: no store ------------------------------------------------------------------------


def test_the_default_store_missing_names_its_absolute_path_and_the_default(
    cli: CLI, here: Path
) -> None:
    r = cli("--json", "runs", with_db=False)
    assert r.code == 2
    error = r.json()["error"]
    assert error["code"] == "not_found.store"
    expected = str(here / "continuum.db")
    assert error["message"] == (
        f"no store at {expected} (the default ./continuum.db in the current directory: "
        "neither --db nor CONTINUUM_DB is set)"
    )
    assert error["details"]["absolute_path"] == expected
    assert error["details"]["chosen_by"] == "default"
    _ways_to_choose_a_store(error["hint"])
    assert "`continuum init`" in error["hint"]
    assert list(here.iterdir()) == []  # nothing was created


def test_a_missing_store_from_db_says_so_and_init_names_the_same_store(
    cli: CLI, here: Path
) -> None:
    r = cli("--db", "wrong.db", "status", "r1", with_db=False)
    assert r.code == 2
    first, hint = r.err.strip().splitlines()
    assert first == (
        f"error: no store at {here / 'wrong.db'} (from --db wrong.db) [not_found.store]"
    )
    _ways_to_choose_a_store(hint)
    assert "`continuum init --db wrong.db`" in hint
    assert list(here.iterdir()) == []


def test_a_missing_store_from_the_environment_says_so(
    cli: CLI, here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTINUUM_DB", "elsewhere.db")
    error = cli("--json", "actions", "r1", with_db=False).json()["error"]
    assert error["code"] == "not_found.store"
    assert error["message"] == (
        f"no store at {here / 'elsewhere.db'} (from $CONTINUUM_DB=elsewhere.db)"
    )
    assert error["details"]["chosen_by"] == "CONTINUUM_DB"
    _ways_to_choose_a_store(error["hint"])


def test_where_shows_the_path_the_missing_store_error_names(cli: CLI, here: Path) -> None:
    where = cli("--json", "where", with_db=False).json()["store"]
    error = cli("--json", "resume", with_db=False).json()["error"]
    assert error["details"]["absolute_path"] == where
    assert f"no store at {where} " in error["message"]


@pytest.mark.parametrize(
    "command",
    [
        ["runs"],
        ["resume"],
        ["events", "r1"],
        ["actions", "r1"],
        ["inspect", "r1"],
        ["status", "r1"],
        ["verify", "--all"],
        ["migrate", "--dry-run"],
    ],
)
def test_a_read_command_refuses_an_empty_file_and_leaves_it_empty(
    cli: CLI, here: Path, command: list[str]
) -> None:
    (here / "empty.db").touch()
    r = cli("--json", "--db", "empty.db", *command, with_db=False)
    assert r.code == 2, r.out
    error = r.json()["error"]
    assert error["code"] == "not_found.store"
    assert error["details"]["empty"] is True
    assert error["message"] == (
        f"no store at {here / 'empty.db'} (from --db empty.db): the file is empty "
        "(0 bytes); it was left untouched"
    )
    _ways_to_choose_a_store(error["hint"])
    assert "`continuum init --db empty.db`" in error["hint"]
    assert (here / "empty.db").stat().st_size == 0
    assert sorted(p.name for p in here.iterdir()) == ["empty.db"]  # no -wal, no -shm


def test_a_missing_store_error_for_another_path_keeps_its_own_words(cli: CLI, here: Path) -> None:
    """Only the selected store's error is told how it was chosen."""
    from continuum.cli.common import explain_missing_store
    from continuum.cli.output import Settings
    from continuum.errors import NotFoundError
    from continuum.store.sqlite_files import no_store

    err = no_store(here / "other.db")
    before = (err.message, err.hint)
    explain_missing_store(Settings(db="mine.db"), err)
    assert (err.message, err.hint) == before and "chosen_by" not in err.fields
    mine = no_store(Path("mine.db"))
    explain_missing_store(Settings(db="mine.db"), mine)
    assert isinstance(mine, NotFoundError) and mine.fields["chosen_by"] == "--db"
    assert "(from --db mine.db)" in mine.message


def test_init_still_makes_an_empty_file_a_store(cli: CLI, here: Path) -> None:
    (here / "empty.db").touch()
    assert cli("--db", "empty.db", "init", with_db=False).code == 0
    assert (here / "empty.db").stat().st_size > 0
    r = cli("--db", "empty.db", "runs", with_db=False)
    assert (r.code, r.out.strip()) == (0, "no runs")


def test_the_mcp_probe_calls_an_empty_file_no_store_yet_and_leaves_it(here: Path) -> None:
    (here / "empty.db").touch()
    assert probe_store("empty.db") is False
    assert sorted(p.name for p in here.iterdir()) == ["empty.db"]
    assert (here / "empty.db").stat().st_size == 0


# -- item 13: one set of state words ---------------------------------------------------------


@pytest.fixture
def interrupted(cli_proc: CLI) -> CLI:
    """Run r1 with action send:k1 intercepted by a process that then exited."""
    assert cli_proc("start", "r1", "--goal", "g").code == 0
    assert cli_proc("intercept", "r1", "send", "--key", "k1").code == 0  # then it exits
    return cli_proc


def test_an_interrupted_action_reads_the_same_in_actions_resume_and_the_prompt(
    interrupted: CLI, db: str, tmp_path: Path
) -> None:
    actions = interrupted("actions", "r1")
    assert actions.code == 20
    (row,) = [line for line in actions.out.splitlines() if '"send:k1"' in line]
    assert f" {INTERRUPTED} attempt=1" in row, row
    resume = interrupted("resume", "r1")
    assert f'uncertain action "send:k1": {INTERRUPTED}; check the external system' in resume.out

    term = Terminal(db, "reconcile", "r1", "send:k1", "--not-occurred", cwd=tmp_path)
    term.wait_for("did NOT happen?")
    shown = term.text()
    assert f'action "send:k1" of type "send": {INTERRUPTED}, attempt 1' in shown, shown
    assert "; that process is gone" in shown
    term.send("y\r")
    assert term.finish() == 0
    assert 'action "send:k1": recorded as not done: failed (certain, by a person)' in term.text()

    after = interrupted("actions", "r1")
    assert after.code == 0
    assert " failed (certain, by a person) attempt=1" in after.out, after.out


def test_the_json_keeps_the_ledger_status_values(interrupted: CLI) -> None:
    (before,) = interrupted("--json", "actions", "r1").json()["actions"]
    assert (before["status"], before["interrupted"]) == ("started", True)
    (uncertain,) = interrupted("--json", "resume", "r1").json()["uncertain_actions"]
    assert (uncertain["status"], uncertain["recorded_status"]) == ("unknown", "started")
    answer = interrupted("--json", "reconcile", "r1", "send:k1", "--not-occurred", "--yes")
    assert answer.code == 0
    action = answer.json()["action"]
    assert (action["status"], action["settled_by"]) == ("failed", "human")


def test_reconcile_occurred_and_the_script_commands_answer_in_the_same_words(
    interrupted: CLI,
) -> None:
    r = interrupted("reconcile", "r1", "send:k1", "--occurred", "--yes")
    assert r.out.strip() == 'action "send:k1": recorded as done: completed (by a person)'
    r = interrupted("compensate", "r1", "send:k1")
    assert r.out.strip() == (
        'action "send:k1": recorded as compensated (done, then undone, by local code)'
    )
    assert interrupted("intercept", "r1", "mail", "--key", "m1").code == 0
    r = interrupted("fail", "r1", "mail:m1")
    assert r.out.strip() == 'action "mail:m1": recorded as unknown (may or may not have happened)'
    listed = interrupted("actions", "r1").out
    assert " unknown (may or may not have happened) attempt=1" in listed
    assert " compensated (done, then undone, by local code) attempt=1" in listed

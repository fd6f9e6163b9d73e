"""Keyless identity and paths (issue 30, item 6), on every backend.

- A path with whitespace inside is a path when it is written as one (``./my report.txt``)
  or sits under a field named like a path: its spellings are one action.
- A bare file name under a field not named like a path (``output: a.txt``) stays text in
  the identity, but the same name written as a path (``./a.txt``) is a
  ``possible_duplicate``, never a second effect performed without a question.
- Prose with a slash and spaces (``and/or``) stays text: its identity does not depend on
  the working directory.
- An action recorded under the rules before issue 30 (``tests/fixtures/identity/``,
  written by the code of that time) is still found after the upgrade.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import pytest

from continuum.ledger.core import ActionLedger
from continuum.ops.transfer import export_runs, import_runs
from continuum.runtime.facade import Continuum
from continuum.state.records import ActionRecord
from continuum.store import Run, Storage
from continuum.types import Origin

RUN = "run_paths"
CWD = "/work/agent"
BEFORE = Path(__file__).resolve().parents[1] / "fixtures" / "identity" / "before_issue30.sqlite"


@pytest.fixture
def run(store: Storage) -> str:
    store.create_run(Run(run_id=RUN, goal="g"))
    return RUN


def agent(store: Storage, cwd: str = CWD) -> ActionLedger:
    return ActionLedger(store, origin=Origin.EXTERNAL_AGENT, cwd=cwd)


def head(store: Storage, run_id: str = RUN) -> tuple[int, str | None]:
    info = store.get_run(run_id)
    return info.head_sequence, info.head_hash


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"path": "my report.txt"}, {"path": "./my report.txt"}),
        ({"path": "my report.txt"}, {"path": f"{CWD}/my report.txt"}),
        ({"dest": "out/my report.txt"}, {"dest": "out/./old/../my report.txt"}),
        ({"output": "./my report.txt"}, {"output": f"{CWD}/my report.txt"}),
        ({"output": "../shared/a b.txt"}, {"output": "/work/shared/a b.txt"}),
    ],
)
def test_a_path_with_spaces_written_differently_is_one_action(
    store: Storage, run: str, first: dict[str, Any], second: dict[str, Any]
) -> None:
    a = agent(store)
    one = a.intercept(RUN, "write_file", first)
    a.complete(RUN, one.action_key, external_id="written")

    two = a.intercept(RUN, "write_file", second)

    assert (two.proceed, two.status, two.action_id, two.matched_by) == (
        False,
        "completed",
        one.action_id,
        "arguments",
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"output": "a.txt"}, {"output": "./a.txt"}),
        ({"output": "./a.txt"}, {"output": "a.txt"}),
        ({"output": "a.txt"}, {"output": f"{CWD}/a.txt"}),
        ({"output": "my report.txt"}, {"output": "./my report.txt"}),
        ({"output": "a.txt", "body": "x"}, {"target": f"{CWD}/sub/../a.txt", "content": "x"}),
    ],
)
def test_a_file_name_and_its_path_form_are_a_possible_duplicate(
    store: Storage, run: str, first: dict[str, Any], second: dict[str, Any]
) -> None:
    a = agent(store)
    one = a.intercept(RUN, "write_file", first)
    a.complete(RUN, one.action_key, external_id="written")
    before = head(store)

    two = a.intercept(RUN, "write_file", second)

    assert (two.proceed, two.status, two.matched_by) == (False, "possible_duplicate", "fallback")
    assert two.similar_action is not None
    assert (two.similar_action["action_id"], two.similar_action["arguments"]) == (
        one.action_id,
        first,
    )
    assert two.external_id is None and two.previous_result is None  # never "done"
    assert head(store) == before  # a suspicion: nothing written


@pytest.mark.parametrize(
    "second",
    [
        {"output": "./b.txt"},  # another file
        {"output": "/elsewhere/a.txt"},  # the same name in another directory
        {"output": "a.txt.bak"},  # another name
    ],
)
def test_another_file_is_another_action(store: Storage, run: str, second: dict[str, Any]) -> None:
    a = agent(store)
    a.intercept(RUN, "write_file", {"output": "a.txt"})
    two = a.intercept(RUN, "write_file", second)
    assert (two.proceed, two.status) == (True, "started")


def test_prose_with_a_slash_and_spaces_is_the_same_from_any_directory(
    store: Storage, run: str
) -> None:
    note = {"note": "Q3 and/or Q4 results", "to": "a@example.com"}
    one = agent(store).intercept(RUN, "send_mail", note)
    agent(store).complete(RUN, one.action_key)

    two = agent(store, cwd="/somewhere/else").intercept(RUN, "send_mail", note)

    assert (two.proceed, two.status, two.action_id) == (False, "completed", one.action_id)


# -- actions recorded before issue 30 -----------------------------------------------------


@pytest.fixture
def upgraded(store: Storage, tmp_path: Path) -> Continuum:
    """The run of a store written by the code before issue 30, moved into this backend."""
    old = tmp_path / "before.sqlite"
    shutil.copyfile(BEFORE, old)  # opening migrates: never the committed file itself
    with Continuum.open(str(old), create=False) as source:
        out = io.StringIO()
        export_runs(source.store, out, ["paths_run"])
    import_runs(store, out.getvalue().splitlines(keepends=True))
    return Continuum(store, cwd=CWD)


def stored(rt: Continuum, action_type: str) -> list[ActionRecord]:
    return [a for a in rt.actions("paths_run") if a.action_type == action_type]


def test_an_action_recorded_before_the_upgrade_is_still_found(upgraded: Continuum) -> None:
    report = {"path": "my report.txt", "text": "Q1"}
    # Control: the stored action carries the earlier rules' key, not today's, so only the
    # earlier identity can find it.
    today = upgraded.ledger.identity("paths_run", "write_file", None, report)
    done_before = next(a for a in stored(upgraded, "write_file") if a.status == "completed")
    assert done_before.dedup_key != today.dedup_key
    assert done_before.dedup_key == today.earlier[0][1]

    done = upgraded.intercept("paths_run", "write_file", report)
    assert (done.proceed, done.status, done.external_id) == (False, "completed", "written-1")
    assert done.action_id == done_before.action_id
    # (What the earlier rules told apart, e.g. ``./my report.txt``, they still tell apart
    # for this action: its index keys are those its intercept event recorded.)

    unsettled = upgraded.intercept(
        "paths_run", "write_file", {"path": "draft notes.md", "text": "wip"}
    )
    assert (unsettled.proceed, unsettled.status) == (False, "unknown")


def test_a_drifted_call_is_still_suspected_against_an_action_from_before_the_upgrade(
    upgraded: Continuum,
) -> None:
    before = head(upgraded.store, "paths_run")
    drifted = {"target": "my notes.txt", "content": "x"}
    today = upgraded.ledger.identity("paths_run", "upload", None, drifted)
    assert stored(upgraded, "upload")[0].fallback_key not in (None, today.fallback_key)

    answer = upgraded.intercept("paths_run", "upload", drifted)

    assert (answer.proceed, answer.status) == (False, "possible_duplicate")
    assert answer.similar_action is not None
    assert answer.similar_action["external_id"] == "uploaded-1"
    assert head(upgraded.store, "paths_run") == before

"""`continuum confirm-token new|status|unlock` (issue 30): a token strong enough to start,
the store's counter shown, and an unlock only a person gives."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from continuum.hooks.guard import guarded_touch
from continuum.runtime.facade import Continuum
from continuum.serving.secrets import Secret, check_confirm_token_strength
from continuum.store.confirm_attempts import LOCK_AFTER
from continuum.store.models import Run
from tests.cli.conftest import Result

RUN = "r1"


def locked_store(db: str) -> None:
    with Continuum.open(db, create=True) as rt:
        rt.store.create_run(Run(run_id=RUN), exist_ok=True)
        for n in range(LOCK_AFTER):
            rt.store.confirm_attempt(
                RUN, lambda: False, channel="stdio", caller="agent", now=1e9 + 1e6 * n
            )


def test_new_prints_a_fresh_256_bit_token_that_start_up_accepts(
    cli: Callable[..., Result],
) -> None:
    first, second = cli("confirm-token", "new"), cli("--json", "confirm-token", "new")
    token = first.out.strip()
    doc = second.json()
    assert first.code == second.code == 0 and first.err == ""
    assert len(token) == 43 and doc["bits"] == 256 and doc["token"] != token
    assert doc["variable"] == "CONTINUUM_MCP_CONFIRM_TOKEN"
    check_confirm_token_strength(Secret(token))  # raises if start-up would refuse it


def test_status_shows_the_counter_and_exits_20_while_locked(
    cli: Callable[..., Result], db: str
) -> None:
    with Continuum.open(db, create=True) as rt:
        rt.start_run(RUN, "a goal")
    fresh = cli("--json", "confirm-token", "status")
    assert fresh.code == 0 and fresh.json()["confirm_attempts"]["failures"] == 0
    locked_store(db)
    shown = cli("confirm-token", "status")
    doc = cli("--json", "confirm-token", "status").json()["confirm_attempts"]
    assert shown.code == 20 and "locked" in shown.out and '"agent"' in shown.out
    assert (doc["failures"], doc["locked"], doc["last_channel"]) == (LOCK_AFTER, True, "stdio")
    assert doc["limits"] == {"free_failures": 4, "notice_from": 3, "lock_after": LOCK_AFTER}


def test_unlock_refuses_without_a_terminal_and_resets_at_a_persons_word(
    cli_proc: Callable[..., Result], db: str
) -> None:
    locked_store(db)
    piped = cli_proc("confirm-token", "unlock")  # stdin is a pipe: an agent's shell
    assert piped.code == 1 and "usage.not_a_terminal" in piped.err
    with Continuum.open(db, create=False) as rt:
        assert rt.store.confirm_attempts().locked  # unchanged
    done = cli_proc("--json", "confirm-token", "unlock", "--yes")
    assert done.code == 0, done.err
    state = done.json()["confirm_attempts"]
    assert (state["failures"], state["locked"], state["total"]) == (0, False, LOCK_AFTER)
    assert cli_proc("confirm-token", "status").code == 0


def test_the_hooks_gate_counts_unlock_among_a_persons_commands(tmp_path: Path) -> None:
    # An agent that locked the token must not unlock it from its shell either.
    cwd = str(tmp_path)
    db = os.path.join(cwd, "store.db")
    for command in (
        "continuum confirm-token unlock --yes",
        "python -m continuum confirm-token unlock",
    ):
        assert guarded_touch("Bash", {"command": command}, cwd, cwd, db) is not None, command
    assert guarded_touch("Bash", {"command": "continuum status r1"}, cwd, cwd, db) is None

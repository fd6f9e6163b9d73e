"""`continuum confirm-token new|status|unlock`: the person's confirm token and its limit.

``CONTINUUM_MCP_CONFIRM_TOKEN`` lets ``continuum_confirm`` (and the operator page)
record origin human, so it must resist guessing (``new`` makes one of 256 random bits;
start-up refuses one under 32 characters) and wrong ones are limited per store
(``continuum.store.confirm_attempts``): ``status`` shows the counter, ``unlock`` is a
person's reset after the limit, and, like ``confirm``, refuses without a terminal
unless ``--yes`` (an agent that locked it must not unlock it).
"""

from __future__ import annotations

import math
import secrets
import time
from datetime import UTC, datetime
from typing import Any

import click

from continuum.cli.common import common, common_without_db, require_person, runtime
from continuum.cli.output import Line, Settings, Styled, ask, emit, write_lines
from continuum.errors import IntegrityError, UsageError
from continuum.store.attempt_state import AttemptState
from continuum.store.confirm_attempts import FREE_FAILURES, LOCK_AFTER, NOTICE_FROM
from continuum.untrusted import quoted

TOKEN_BYTES = 32  # 256 bits, 43 characters of the URL-safe alphabet (a valid bearer token too)
VARIABLE = "CONTINUUM_MCP_CONFIRM_TOKEN"


def _limits() -> dict[str, int]:
    return {"free_failures": FREE_FAILURES, "notice_from": NOTICE_FROM, "lock_after": LOCK_AFTER}


def _state_json(state: AttemptState, now: float) -> dict[str, Any]:
    doc = state.model_dump(mode="json", exclude={"epoch", "not_before"})
    return {
        **doc,
        "retry_after_seconds": math.ceil(state.retry_after(now)),
        "limits": _limits(),
    }


def _state_lines(state: AttemptState, now: float) -> list[Line]:
    wait = state.retry_after(now)
    if state.locked:
        head: Line = [
            Styled("locked", fg="red", bold=True),
            f": {state.failures} wrong confirm tokens in a row; confirming with the token "
            "(MCP and the operator page) is refused until `continuum confirm-token unlock`",
        ]
    elif wait > 0:
        head = [
            Styled("waiting", fg="yellow"),
            f": {state.failures} wrong confirm tokens in a row; no token is checked for "
            f"another {math.ceil(wait)} s",
        ]
    else:
        head = [
            Styled("open", fg="green"),
            f": {state.failures} wrong confirm token(s) in a row (after {LOCK_AFTER}: locked)",
        ]
    lines: list[Line] = [head, f"wrong tokens ever counted here: {state.total}"]
    if state.last_failure_at is not None:
        caller = "(no name)" if state.last_caller is None else quoted(state.last_caller, limit=80)
        run = "-" if state.last_run_id is None else quoted(state.last_run_id, limit=80)
        lines.append(
            f"last wrong token: {state.last_failure_at} over {state.last_channel} from "
            f"{caller}, for run {run}"
        )
    if state.unlocked_at is not None:
        lines.append(f"last unlocked: {state.unlocked_at}")
    return lines


@click.group("confirm-token")
def confirm_token_group() -> None:
    """The person's confirm token (CONTINUUM_MCP_CONFIRM_TOKEN) and its attempt limit."""


@confirm_token_group.command("new")
@common_without_db
def new_cmd(s: Settings) -> None:
    """Print a new confirm token (256 random bits) for CONTINUUM_MCP_CONFIRM_TOKEN.

    Keep it a person's own secret: never in an agent's environment, never reused as a
    bearer or auth token (start-up refuses reuse, and a token under 32 characters).
    """
    token = secrets.token_urlsafe(TOKEN_BYTES)
    emit(s, {"token": token, "bits": TOKEN_BYTES * 8, "variable": VARIABLE}, [token])


@confirm_token_group.command("status")
@common
def status_cmd(s: Settings) -> None:
    """Show the store's counter of wrong confirm tokens. Exit 20 while it is locked.

    Wrong tokens 1-4 in a row are answered at once; after the 5th no token is checked for
    5 s, then 10, 20, 40, 80 s; the 10th locks confirming with the token (over MCP and on
    the operator page) until a person runs `continuum confirm-token unlock`. From the 3rd
    on each is a notification (`continuum outbox`, kind confirm_token_failed).
    """
    now = time.time()
    state = runtime(s).store.confirm_attempts()
    emit(
        s,
        {"confirm_attempts": _state_json(state, now)},
        _state_lines(state, now),
        code=20 if state.locked else 0,
    )


@confirm_token_group.command("unlock")
@click.option(
    "--yes",
    "-y",
    is_flag=True,
    help="Do not ask: for a person's own script. Without it, unlock asks on a terminal "
    "and refuses when stdin is not one.",
)
@common
def unlock_cmd(s: Settings, yes: bool) -> None:
    """As a person, reset the counter of wrong confirm tokens (after the limit locked it).

    First find out who tried (`continuum confirm-token status`, the outbox's
    confirm_token_failed notifications, the servers' logs); if the token may be known,
    make a new one (`continuum confirm-token new`) and restart the servers with it. A
    person must answer at a terminal: without --yes, unlock refuses when stdin is not one.
    """
    require_person(yes, "unlocking the confirm token", "continuum confirm-token unlock")
    rt = runtime(s)
    now = time.time()
    if not yes:
        try:
            shown = _state_lines(rt.store.confirm_attempts(), now)
        except IntegrityError as e:  # unlocking replaces a damaged counter
            shown = [f"{e.message}; unlocking writes a fresh counter"]
        write_lines(s, shown, err=True)
        if not ask(s, "Unlock confirming with the confirm token?"):
            raise UsageError(
                "unlock declined; nothing was changed",
                code="usage.declined",
                hint="run again when you know who presented the wrong tokens",
            )
    state = rt.store.unlock_confirm_attempts(now=now)
    at = datetime.fromtimestamp(now, UTC).isoformat(timespec="seconds")
    emit(
        s,
        {"confirm_attempts": _state_json(state, now)},
        [[Styled("unlocked", fg="green"), f" at {at}: the next confirm token is checked"]],
    )


COMMANDS = [confirm_token_group]

"""Wrong confirm tokens, counted per store (contract §5: "failed attempts are limited").

Whoever presents ``CONTINUUM_MCP_CONFIRM_TOKEN`` records origin ``human``, so guessing it
must not pay. Every place that compares it (``continuum_confirm`` over stdio and over
HTTP, the operator page's confirm, reconcile and decide forms) does so through
``ConfirmAttemptStore.confirm_attempt``: one write transaction that reads the store's
counter, refuses *without comparing* while a backoff runs or once the limit is reached,
compares only for a run that exists in this store, and records the outcome. The
transaction serializes attempts, so a burst of parallel guesses is counted one by one.

The counter is one row of the store's key-value table (``continuum_meta``, in PostgreSQL
``continuum.meta``; key ``confirm_attempts``, a JSON ``AttemptState``): no schema change,
and it survives restarts and is shared by every server and page on the store. From the
third wrong token in a row on, the same transaction writes a notification to the outbox
(kind ``confirm_token_failed``, about the run the attempt named), so an operator hears of
it exactly when it was counted.

The schedule (``wait_after``): wrong tokens 1 to ``FREE_FAILURES`` are answered at once
(typing mistakes); after the 5th, no token is compared for 5 s, then 10, 20, 40, 80 s;
the ``LOCK_AFTER``-th (10th) locks confirming with the token for this store until a
person runs ``continuum confirm-token unlock``. A right token before that resets the
run of wrong ones. ``continuum confirm`` at a terminal never needs the token and is
never locked.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar

from continuum.errors import IntegrityError
from continuum.eventlog.notices import confirm_failure_notice
from continuum.log import get_logger
from continuum.store.approval_outbox import POSTGRES, Dialect, Execute, outbox_values
from continuum.store.base import format_timestamp

if TYPE_CHECKING:
    from continuum.store.attempt_state import AttemptState

__all__ = [
    "FREE_FAILURES",
    "LOCK_AFTER",
    "META_KEY",
    "NOTICE_FROM",
    "ConfirmAttempt",
    "ConfirmAttemptStore",
    "Verdict",
    "wait_after",
]

META_KEY = "confirm_attempts"
FREE_FAILURES = 4
"""Wrong tokens in a row answered at once (a person's typing mistakes)."""
LOCK_AFTER = 10
"""The wrong token in a row that locks confirming with the token until a person unlocks it."""
NOTICE_FROM = 3
"""From this wrong token in a row on, each one is also a notification to the operator."""
FIRST_WAIT_SECONDS = 5.0
MAX_CALLER_CHARS = 200

T = TypeVar("T")
Verdict = Literal["accepted", "rejected", "waiting", "locked", "no_run"]

_log = get_logger("continuum.confirm")


def wait_after(failures: int) -> float:
    """Seconds during which no token is compared after ``failures`` wrong ones in a row."""
    if failures <= FREE_FAILURES or failures >= LOCK_AFTER:
        return 0.0
    return FIRST_WAIT_SECONDS * float(2 ** (failures - FREE_FAILURES - 1))


class ConfirmAttempt(NamedTuple):
    """What one attempt came to. ``rejected``: a wrong token, counted; ``waiting``: a
    backoff runs, nothing compared; ``locked``: the limit was reached, nothing compared;
    ``no_run``: no such run here, nothing compared (a confirmation of it could not take
    effect, and a notice must name a run); ``accepted``: the right token."""

    verdict: Verdict
    failures: int = 0
    retry_after: float = 0.0
    locked: bool = False

    @property
    def accepted(self) -> bool:
        return self.verdict == "accepted"

    @property
    def wait_seconds(self) -> int:
        """``retry_after`` rounded up to whole seconds, for a message."""
        return math.ceil(self.retry_after)


# pg_rows.lock_key("continuum:confirm_attempts"): the first 8 bytes of that text's sha256
# as a signed integer, written in so that importing the store neither imports psycopg nor
# hashes (tests/unit/test_store_sha256.py checks it).
_PG_LOCK_KEY = -6087686928379539554


def _tables(d: Dialect) -> tuple[str, str, str | None]:
    """(key-value table, runs table, the statement that serializes attempts) in the words
    of ``d``'s backend. SQLite's ``BEGIN IMMEDIATE`` already serializes writers; PostgreSQL
    takes a transaction-scoped advisory lock (the row may not exist yet to be locked)."""
    if d == POSTGRES:
        return "continuum.meta", "continuum.runs", f"SELECT pg_advisory_xact_lock({_PG_LOCK_KEY})"
    return "continuum_meta", "runs", None


def _epoch() -> str:
    import secrets

    return secrets.token_hex(8)


def _empty_state() -> AttemptState:
    from continuum.store.attempt_state import AttemptState

    return AttemptState()


def _state(text: str) -> AttemptState:
    from pydantic import ValidationError

    from continuum.store.attempt_state import AttemptState

    try:
        return AttemptState.model_validate(json.loads(text))
    except (ValueError, ValidationError) as e:  # edited by hand: refuse, never guess
        raise IntegrityError(
            "the store's confirm-token attempt counter is damaged",
            code="integrity.confirm_attempts",
            hint="confirming with the confirm token is refused until a person runs "
            "`continuum confirm-token unlock`, which writes a fresh counter",
        ) from e


def _iso(now: float) -> str:
    return format_timestamp(datetime.fromtimestamp(now, UTC))


class ConfirmAttemptStore:
    """The ``Storage`` methods for the counter (mixed into ``CoreStore``)."""

    _dialect: Dialect

    def _read(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _transact(self, fn: Callable[[Execute], T]) -> T:
        raise NotImplementedError

    def confirm_attempts(self) -> AttemptState:
        """The counter as stored (an empty one if no attempt was ever counted)."""
        meta, _runs, _lock = _tables(self._dialect)
        p = self._dialect.p
        rows = self._read(f"SELECT value FROM {meta} WHERE key = {p}", (META_KEY,))
        return _state(rows[0][0]) if rows else _empty_state()

    def _counter(self, execute: Execute) -> AttemptState:
        """Inside a write transaction: serialize with every other attempt, then read."""
        meta, _runs, lock = _tables(self._dialect)
        if lock is not None:
            execute(lock, ())
        rows = execute(f"SELECT value FROM {meta} WHERE key = {self._dialect.p}", (META_KEY,))
        return _state(rows[0][0]) if rows else _empty_state()

    def _put_counter(self, execute: Execute, state: AttemptState) -> None:
        meta, _runs, _lock = _tables(self._dialect)
        p = self._dialect.p
        execute(
            f"INSERT INTO {meta} (key, value) VALUES ({p}, {p}) ON CONFLICT (key) DO UPDATE"
            " SET value = excluded.value",
            (META_KEY, state.model_dump_json()),
        )

    def confirm_attempt(
        self,
        run_id: str | None,
        matches: Callable[[], bool],
        *,
        channel: str,
        caller: str | None,
        now: float,
    ) -> ConfirmAttempt:
        """Compare a presented confirm token (``matches``) if the counter allows, for a
        confirmation of ``run_id``, and count the outcome. ``channel`` (``stdio``,
        ``http``, ``page``) and ``caller`` (a client's name, a token-file line) are
        recorded with a wrong one, never the token."""
        _meta, runs, _lock = _tables(self._dialect)
        p = self._dialect.p
        put_outbox = self._dialect.put_outbox

        # Only a wrong token, or a right one ending a run of wrong ones, writes: a refusal
        # that compared nothing and an ordinary confirmation leave the store as it was.
        def attempt(execute: Execute) -> ConfirmAttempt:
            state = self._counter(execute)
            if state.locked:
                return ConfirmAttempt("locked", state.failures, 0.0, True)
            if now < state.not_before:
                return ConfirmAttempt("waiting", state.failures, state.retry_after(now))
            head = (
                execute(f"SELECT head_sequence FROM {runs} WHERE run_id = {p}", (run_id,))
                if run_id is not None
                else []
            )
            if not head:
                return ConfirmAttempt("no_run", state.failures)
            if matches():
                if state.failures or state.not_before:
                    self._put_counter(
                        execute, state.model_copy(update={"failures": 0, "not_before": 0.0})
                    )
                return ConfirmAttempt("accepted")
            failures = state.failures + 1
            after = state.model_copy(
                update={
                    "epoch": state.epoch or _epoch(),
                    "failures": failures,
                    "total": state.total + 1,
                    "not_before": now + wait_after(failures),
                    "locked": failures >= LOCK_AFTER,
                    "last_failure_at": _iso(now),
                    "last_channel": channel,
                    "last_caller": None if caller is None else caller[:MAX_CALLER_CHARS],
                    "last_run_id": run_id,
                }
            )
            self._put_counter(execute, after)
            if failures >= NOTICE_FROM:
                notice = confirm_failure_notice(
                    epoch=after.epoch,
                    total=after.total,
                    failures=failures,
                    locked=after.locked,
                    retry_after=after.retry_after(now),
                    run_id=run_id or "",
                    sequence=int(head[0][0]),
                    channel=channel,
                    caller=after.last_caller,
                    recorded_at=after.last_failure_at or "",
                )
                execute(put_outbox, outbox_values(notice))
            return ConfirmAttempt("rejected", failures, after.retry_after(now), after.locked)

        outcome = self._transact(attempt)
        if outcome.verdict != "accepted":
            _log.warning(
                "confirm_token.rejected"
                if outcome.verdict == "rejected"
                else "confirm_token.refused",
                verdict=outcome.verdict,
                channel=channel,
                caller=caller if caller is None else caller[:MAX_CALLER_CHARS],
                run_id=run_id,
                failures_in_a_row=outcome.failures,
                locked=outcome.locked,
                retry_after_seconds=outcome.wait_seconds,
            )
        return outcome

    def unlock_confirm_attempts(self, *, now: float) -> AttemptState:
        """A person's reset: no wrong token in a row, no wait, not locked (a damaged
        counter is replaced). ``total`` and the last failure stay, for the record."""

        def unlock(execute: Execute) -> AttemptState:
            try:
                before = self._counter(execute)
            except IntegrityError:
                before = _empty_state()
            after = before.model_copy(
                update={
                    "epoch": before.epoch or _epoch(),
                    "failures": 0,
                    "not_before": 0.0,
                    "locked": False,
                    "unlocked_at": _iso(now),
                }
            )
            self._put_counter(execute, after)
            return after

        state = self._transact(unlock)
        _log.warning("confirm_token.unlocked", total=state.total)
        return state

"""The store's counter of wrong confirm tokens (issue 30), on every backend.

``Storage.confirm_attempt`` is what ``continuum_confirm`` (stdio, HTTP) and the operator
page compare a presented confirm token through. Times are given explicitly (``now``), so
the backoff is checked without a clock; each new handle stands for a new process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from continuum.errors import IntegrityError
from continuum.runtime.facade import Continuum
from continuum.store import Storage
from continuum.store.attempt_state import AttemptState
from continuum.store.confirm_attempts import (
    FREE_FAILURES,
    LOCK_AFTER,
    NOTICE_FROM,
    ConfirmAttempt,
    wait_after,
)
from tests.contract.conftest import StoreFactory

RUN = "r1"
T0 = 1_700_000_000.0


def wrong() -> bool:
    return False


def right() -> bool:
    return True


def never() -> bool:
    raise AssertionError("the token was compared while the counter refuses to")


def with_run(store_factory: StoreFactory) -> Storage:
    store = store_factory.open()
    Continuum(store).start_run(RUN, "a goal")
    return store


def attempt(
    store: Storage, matches: Callable[[], bool], now: float, run_id: str = RUN
) -> ConfirmAttempt:
    return store.confirm_attempt(run_id, matches, channel="stdio", caller="agent", now=now)


def raw_meta(store_factory: StoreFactory, sql: str) -> None:
    """``sql`` on the key-value table (named ``meta``) behind the store's back."""
    if store_factory.backend == "sqlite":
        import apsw

        lite = apsw.Connection(store_factory.url)
        try:
            lite.execute(sql.replace("meta", "continuum_meta"))
        finally:
            lite.close()
        return
    import psycopg

    with psycopg.connect(store_factory.url, autocommit=True) as pg:
        pg.execute(sql.replace("meta", "continuum.meta").encode())


def test_the_schedule_is_the_documented_one() -> None:
    assert (FREE_FAILURES, NOTICE_FROM, LOCK_AFTER) == (4, 3, 10)
    assert [wait_after(n) for n in range(1, LOCK_AFTER + 1)] == [0, 0, 0, 0, 5, 10, 20, 40, 80, 0]


def test_wrong_tokens_are_counted_across_handles_then_backed_off_then_locked(
    store_factory: StoreFactory,
) -> None:
    with_run(store_factory)
    now = T0
    for n in range(1, LOCK_AFTER + 1):
        store = store_factory.open()  # a new process each time: the count is the store's
        outcome = attempt(store, wrong, now)
        assert (outcome.verdict, outcome.failures) == ("rejected", n)
        assert outcome.retry_after == wait_after(n) and outcome.locked is (n == LOCK_AFTER)
        if wait_after(n) > 0:
            # During the backoff nothing is compared, not even the right token ...
            waiting = attempt(store, never, now + wait_after(n) - 0.5)
            assert (waiting.verdict, waiting.failures, waiting.wait_seconds) == ("waiting", n, 1)
            now += wait_after(n)  # ... and once it has passed, the next one is compared
    state = store_factory.open().confirm_attempts()
    assert (state.failures, state.total, state.locked) == (LOCK_AFTER, LOCK_AFTER, True)
    assert (state.last_channel, state.last_caller, state.last_run_id) == ("stdio", "agent", RUN)
    for later in (now, now + 10**6):  # locked: no time unlocks it
        assert attempt(store_factory.open(), never, later) == ConfirmAttempt(
            "locked", LOCK_AFTER, 0.0, True
        )


def test_from_the_third_wrong_token_each_is_a_notification_about_the_named_run(
    store_factory: StoreFactory,
) -> None:
    store = with_run(store_factory)
    head = store.get_run(RUN).head_sequence
    kinds: list[list[str]] = []
    for _ in range(5):
        attempt(store, wrong, T0)
        kinds.append([row.kind for row in store.list_outbox()])
    assert [len(k) for k in kinds] == [0, 0, 1, 2, 3]
    rows = list(reversed(store.list_outbox()))
    assert {row.kind for row in rows} == {"confirm_token_failed"}
    assert {(row.run_id, row.sequence, row.status) for row in rows} == {(RUN, head, "pending")}
    assert len({row.delivery_id for row in rows}) == 3  # each its own, stable id
    first = rows[0].body
    assert first["details"] == {
        "failures_in_a_row": NOTICE_FROM,
        "total": NOTICE_FROM,
        "locked": False,
        "retry_after_seconds": 0,
        "channel": "stdio",
        "caller": "agent",
        "unlock": "continuum confirm-token unlock",
    }
    assert "3 wrong confirm tokens in a row" in first["summary"] and '"agent"' in first["summary"]
    assert rows[-1].body["details"]["retry_after_seconds"] == wait_after(5)


def test_a_right_token_ends_the_run_of_wrong_ones_and_an_ordinary_one_writes_nothing(
    store_factory: StoreFactory,
) -> None:
    store = with_run(store_factory)
    assert attempt(store, right, T0).accepted
    assert store.confirm_attempts() == AttemptState()  # nothing was written
    for _ in range(FREE_FAILURES):
        attempt(store, wrong, T0)
    assert attempt(store, right, T0).accepted
    state = store.confirm_attempts()
    assert (state.failures, state.total, state.not_before) == (0, FREE_FAILURES, 0.0)
    assert attempt(store, wrong, T0).failures == 1  # a new run of wrong ones starts at 1


def test_a_run_that_is_not_in_the_store_compares_nothing_and_counts_nothing(
    store_factory: StoreFactory,
) -> None:
    store = with_run(store_factory)
    assert attempt(store, never, T0, run_id="no-such-run").verdict == "no_run"
    assert store.confirm_attempts() == AttemptState() and store.list_outbox() == []


def test_parallel_wrong_tokens_are_counted_one_by_one(store_factory: StoreFactory) -> None:
    with_run(store_factory)
    handles = [store_factory.open() for _ in range(12)]
    start = threading.Barrier(len(handles))

    def one(store: Storage) -> str:
        start.wait()
        return attempt(store, wrong, T0).verdict

    with ThreadPoolExecutor(len(handles)) as pool:
        verdicts = list(pool.map(one, handles))
    # Serialized: exactly the free ones and the one that starts the backoff are compared.
    assert sorted(verdicts) == ["rejected"] * (FREE_FAILURES + 1) + ["waiting"] * (
        len(handles) - FREE_FAILURES - 1
    )
    assert store_factory.open().confirm_attempts().failures == FREE_FAILURES + 1


def test_a_damaged_counter_refuses_every_attempt_until_a_person_unlocks(
    store_factory: StoreFactory,
) -> None:
    store = with_run(store_factory)
    for n in range(LOCK_AFTER):
        attempt(store, wrong, T0 + 10**6 * n)  # each after the last one's backoff
    assert store.confirm_attempts().locked
    raw_meta(store_factory, "UPDATE meta SET value = '{not json' WHERE key = 'confirm_attempts'")
    with pytest.raises(IntegrityError) as caught:
        attempt(store, never, T0)
    assert caught.value.code == "integrity.confirm_attempts"
    after = store.unlock_confirm_attempts(now=T0)
    assert (after.failures, after.locked, after.not_before) == (0, False, 0.0)
    assert after.unlocked_at is not None and after.epoch
    assert attempt(store, right, T0).accepted


def test_unlock_keeps_the_total_and_the_last_failure_for_the_record(
    store_factory: StoreFactory,
) -> None:
    store = with_run(store_factory)
    for n in range(LOCK_AFTER):
        attempt(store, wrong, T0 + 1000 * n)
    locked = store.confirm_attempts()
    unlocked = store_factory.open().unlock_confirm_attempts(now=T0 + 10**6)
    assert (unlocked.total, unlocked.last_failure_at) == (LOCK_AFTER, locked.last_failure_at)
    assert unlocked.epoch == locked.epoch  # notification ids go on without repeating
    assert attempt(store, wrong, T0 + 10**6).verdict == "rejected"
    assert len({row.delivery_id for row in store.list_outbox()}) == LOCK_AFTER - NOTICE_FROM + 1

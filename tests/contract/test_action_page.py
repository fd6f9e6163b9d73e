"""Action listings a page at a time, on every backend (issue 14).

Open actions (started, unknown, failed) come first, then settled ones, each in the order
they were intercepted; following ``next_cursor`` visits every action exactly once for a
run that does not change meanwhile; bad cursors and page sizes are refused by name.
"""

from __future__ import annotations

from typing import Any

import pytest

from continuum.errors import NotFoundError, UsageError
from continuum.ledger.core import ActionLedger
from continuum.store import Run, Storage

RUN = "paged"


def _fill(store: Storage) -> tuple[list[str], list[str]]:
    """Ten actions in a known mix; returns (open keys, settled keys) in intercept order."""
    store.create_run(Run(run_id=RUN, goal="g"))
    ledger = ActionLedger(store, cwd="/w")
    open_keys, settled = [], []
    for i in range(10):
        r = ledger.intercept(RUN, "send", {"i": i}, key=f"k{i}")
        if i % 3 == 0:
            ledger.complete(RUN, r.action_key)
            settled.append(r.action_key)
        elif i % 3 == 1:
            ledger.fail(RUN, r.action_key, error="boom", certain=True)
            open_keys.append(r.action_key)
        else:
            open_keys.append(r.action_key)  # started: still open
    return open_keys, settled


def _status(store: Storage, key: str) -> Any:
    row = store.get_action(RUN, key)
    assert row is not None, key
    return row.record["status"]


def _walk(store: Storage, limit: int) -> tuple[list[str], list[int]]:
    keys: list[str] = []
    sizes: list[int] = []
    cursor: str | None = None
    for _ in range(100):
        rows, cursor = store.action_page(RUN, cursor=cursor, limit=limit)
        keys += [r.record["action_key"] for r in rows]
        sizes.append(len(rows))
        if cursor is None:
            return keys, sizes
    raise AssertionError("the cursor never ended")


@pytest.mark.parametrize("limit", [1, 2, 3, 6, 7, 10, 50])
def test_paging_lists_open_actions_first_then_settled_each_once(store: Storage, limit: int) -> None:
    open_keys, settled = _fill(store)
    keys, sizes = _walk(store, limit)
    assert keys == open_keys + settled
    assert all(size <= limit for size in sizes)
    assert all(size == limit for size in sizes[:-1])  # only the last page may be short


def test_the_first_page_is_bounded_and_names_its_successor(store: Storage) -> None:
    open_keys, _ = _fill(store)
    rows, cursor = store.action_page(RUN, limit=4)
    assert [r.record["action_key"] for r in rows] == open_keys[:4]
    assert cursor is not None and cursor.startswith("o.")


@pytest.mark.parametrize(
    "cursor", ["", "x.1", "o.", "o.-1", "s.1.2", "o.1e3", "s.١", "o." + "9" * 30, "o 1"]
)
def test_a_bad_cursor_is_refused(store: Storage, cursor: Any) -> None:
    _fill(store)
    with pytest.raises(UsageError) as e:
        store.action_page(RUN, cursor=cursor)
    assert e.value.code == "usage.bad_cursor" and "next_cursor" in e.value.hint


@pytest.mark.parametrize("limit", [0, -1, 1001, True, 2.5, "3"])
def test_a_bad_page_size_is_refused(store: Storage, limit: Any) -> None:
    _fill(store)
    with pytest.raises(UsageError) as e:
        store.action_page(RUN, limit=limit)
    assert e.value.code == "usage.bad_limit"


def test_a_missing_run_is_not_an_empty_listing(store: Storage) -> None:
    with pytest.raises(NotFoundError):
        store.action_page("nope")


def test_an_action_settled_between_pages_is_listed_at_most_twice_never_lost_from_open(
    store: Storage,
) -> None:
    open_keys, settled = _fill(store)
    rows, cursor = store.action_page(RUN, limit=2)
    ledger = ActionLedger(store, cwd="/w")
    started = [k for k in open_keys if _status(store, k) == "started"]
    ledger.complete(RUN, started[-1])  # settles while the listing is under way
    rest: list[str] = []
    while cursor is not None:
        page, cursor = store.action_page(RUN, cursor=cursor, limit=2)
        rest += [r.record["action_key"] for r in page]
    seen = [r.record["action_key"] for r in rows] + rest
    assert set(seen) == set(open_keys + settled)

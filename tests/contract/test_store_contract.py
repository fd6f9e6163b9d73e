"""The store contract (contract §3, 4, 11): written once, run against every backend.

Everything here goes through the ``Storage`` protocol only; backend-specific checks
(files, pragmas, raw tampering) live next to their backend.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from continuum.errors import (
    ContinuumError,
    IntegrityError,
    NotFoundError,
    UsageError,
)
from continuum.eventlog.event_model import Event
from continuum.eventlog.events import EventType
from continuum.store import ActionRow, CheckpointRow, Run, Storage
from continuum.store.schema import SCHEMA_VERSION
from continuum.types import Origin, RunStatus

RUN = "run_4821"


class Boom(Exception):
    """Raised inside a write transaction to abandon it."""


@pytest.fixture
def run(store: Storage) -> str:
    store.create_run(Run(run_id=RUN, goal="Analyze documents"))
    return RUN


def append_n(store: Storage, run_id: str, n: int, start: int = 0) -> list[Event]:
    return [
        store.append_event(run_id, EventType.WORK_COMPLETED, {"doc": i})
        for i in range(start, start + n)
    ]


def action_row(
    run_id: str,
    n: int,
    *,
    status: str = "started",
    dedup: str | None = None,
    fallback: str | None = None,
    **extra: Any,
) -> ActionRow:
    record = {
        "action_id": f"act_{n}",
        "action_key": f"send:{n}",
        "dedup_key": dedup or f"dedup_{n}",
        "fallback_key": fallback,
        "status": status,
        "attempt": 1,
        **extra,
    }
    return ActionRow(run_id=run_id, action_id=f"act_{n}", record=record, lease_expires=1000.0 + n)


def checkpoint_row(run_id: str, sequence: int, event_sequence: int) -> CheckpointRow:
    return CheckpointRow(
        run_id=run_id,
        sequence=sequence,
        event_sequence=event_sequence,
        state_json=f'{{"sequence":{sequence}}}',
        state_hash=f"h{sequence}",
        created_at="2026-01-01T00:00:00.000000Z",
    )


def snapshot(store: Storage, run_id: str) -> tuple[Any, ...]:
    """Everything a write could have changed in one run."""
    run = store.get_run(run_id)
    return (
        run.head_sequence,
        run.head_hash,
        run.status,
        [e.hash for e in store.read_events(run_id)],
        [a.record for a in store.list_actions(run_id)],
        [c.sequence for c in store.list_checkpoints(run_id)],
    )


# -- runs ----------------------------------------------------------------------------------


def test_create_run_returns_an_active_run_with_an_empty_head(store: Storage) -> None:
    info = store.create_run(Run(run_id=RUN, goal="Analyze documents", metadata={"team": "a"}))

    assert info.run_id == RUN
    assert info.goal == "Analyze documents"
    assert info.status == RunStatus.ACTIVE
    assert (info.head_sequence, info.head_hash) == (0, None)
    assert info.metadata == {"team": "a"}
    assert store.get_run(RUN) == info


def test_get_run_of_a_missing_run_raises_not_found(store: Storage) -> None:
    with pytest.raises(NotFoundError) as e:
        store.get_run("nope")
    assert e.value.code == "not_found.run"


def test_list_runs_returns_every_created_run(store: Storage) -> None:
    assert store.list_runs() == []
    store.create_run(Run(run_id="run_a"))
    store.create_run(Run(run_id="run_b", goal="g"))

    assert [r.run_id for r in store.list_runs()] == ["run_a", "run_b"]


def test_creating_an_existing_run_is_refused_and_changes_nothing(store: Storage, run: str) -> None:
    append_n(store, run, 2)
    before = store.get_run(run)

    with pytest.raises(UsageError) as e:
        store.create_run(Run(run_id=run, goal="another goal"))

    assert e.value.code == "usage.run_exists"
    assert store.get_run(run) == before


def test_create_run_with_exist_ok_returns_the_existing_run(store: Storage, run: str) -> None:
    append_n(store, run, 1)
    before = store.get_run(run)

    again = store.create_run(Run(run_id=run, goal="another goal"), exist_ok=True)

    assert again == before
    assert again.goal == "Analyze documents"
    assert len(store.list_runs()) == 1


@pytest.mark.parametrize("run_id", ["", "has space", "tab\there", "x" * 201])
def test_an_invalid_run_id_is_refused(store: Storage, run_id: str) -> None:
    with pytest.raises(UsageError) as e:
        store.create_run(Run(run_id=run_id))
    assert e.value.code == "usage.bad_run_id"
    assert store.list_runs() == []


# -- appends -------------------------------------------------------------------------------


def test_append_event_returns_the_sealed_event(store: Storage, run: str) -> None:
    first = store.append_event(run, EventType.RUN_STARTED, {"goal": "g", "total": 3})
    second = store.append_event(
        run, EventType.WORK_COMPLETED, {"doc": 0}, source=Origin.LLM, causer_event_id=first.event_id
    )

    assert (first.run_id, first.sequence, first.type) == (run, 1, "run_started")
    assert first.prev_hash is None
    assert first.payload == {"goal": "g", "total": 3}
    assert first.source == Origin.DETERMINISTIC
    assert first.hash == first.computed_hash()
    assert (second.sequence, second.prev_hash) == (2, first.hash)
    assert second.source == Origin.LLM
    assert second.causer_event_id == first.event_id
    assert second.hash == second.computed_hash()
    assert first.event_id != second.event_id


def test_appends_get_gapless_sequences_linked_by_prev_hash(store: Storage, run: str) -> None:
    events = append_n(store, run, 25)

    assert [e.sequence for e in events] == list(range(1, 26))
    assert events[0].prev_hash is None
    for before, after in zip(events, events[1:], strict=False):
        assert after.prev_hash == before.hash


def test_append_events_chains_a_batch_as_single_appends_would(store: Storage, run: str) -> None:
    first = append_n(store, run, 2)
    batch = store.append_events(
        run,
        [(EventType.WORK_COMPLETED, {"item_id": f"b{i}"}) for i in range(5)]
        + [("custom_note", {"x": [1, "é"]})],
        source=Origin.EXTERNAL_AGENT,
    )
    assert [e.sequence for e in batch] == list(range(3, 9))
    prev = first[-1].hash
    for e in batch:  # each one sealed over its fields, linked to the one before
        assert e.prev_hash == prev and e.hash == e.computed_hash()
        prev = e.hash
    assert store.read_events(run) == first + batch
    assert store.get_run(run).head_hash == batch[-1].hash
    assert store.verify_events(run).ok
    with pytest.raises(UsageError) as err:  # one bad payload: nothing of the batch written
        store.append_events(
            run,
            [
                (EventType.WORK_COMPLETED, {"item_id": "ok"}),
                (EventType.WORK_COMPLETED, {"item_id": 3}),
            ],
        )
    assert err.value.fields["index"] == 1
    assert store.get_run(run).head_sequence == 8


def test_read_events_returns_exactly_what_append_returned(store: Storage, run: str) -> None:
    appended = append_n(store, run, 10)

    assert store.read_events(run) == appended
    assert list(store.iter_events(run)) == appended


def test_read_events_after_n_returns_only_later_events(store: Storage, run: str) -> None:
    appended = append_n(store, run, 10)

    assert store.read_events(run, after=4) == appended[4:]
    assert store.read_events(run, after=10) == []
    assert store.read_events(run, after=0) == appended


def test_events_are_durable_across_close_and_reopen(store_factory: Any) -> None:
    store = store_factory.open()
    store.create_run(Run(run_id=RUN))
    appended = append_n(store, RUN, 5)
    store.close()

    reopened = store_factory.open()
    assert reopened.read_events(RUN) == appended
    assert reopened.get_run(RUN).head_sequence == 5
    assert reopened.verify_events(RUN).ok
    more = reopened.append_event(RUN, EventType.WORK_COMPLETED, {"doc": 5})
    assert (more.sequence, more.prev_hash) == (6, appended[-1].hash)


def test_verify_events_reports_ok_for_an_intact_chain(store: Storage, run: str) -> None:
    appended = append_n(store, run, 12)

    report = store.verify_events(run)

    assert report.ok
    assert report.violations == []
    assert report.trusted_through == 12
    assert report.events_checked == 12
    assert (report.head_sequence, report.head_hash) == (12, appended[-1].hash)


def test_verify_events_of_an_empty_run_is_ok(store: Storage, run: str) -> None:
    report = store.verify_events(run)
    assert report.ok
    assert (report.trusted_through, report.head_sequence) == (0, 0)


def test_the_head_moves_with_every_append(store: Storage, run: str) -> None:
    for i in range(5):
        event = store.append_event(run, EventType.WORK_COMPLETED, {"doc": i})
        info = store.get_run(run)
        assert (info.head_sequence, info.head_hash) == (event.sequence, event.hash)
        assert store.event_hash_at(run, event.sequence) == event.hash
    assert store.event_hash_at(run, 6) is None


@pytest.mark.parametrize(
    ("event_type", "status"),
    [
        (EventType.RUN_COMPLETED, RunStatus.COMPLETED),
        (EventType.RUN_ABORTED, RunStatus.ABORTED),
        (EventType.WORK_COMPLETED, RunStatus.ACTIVE),
        ("some_future_event_type", RunStatus.ACTIVE),
    ],
)
def test_lifecycle_events_set_the_run_status(
    store: Storage, run: str, event_type: str, status: RunStatus
) -> None:
    store.append_event(run, EventType.RUN_STARTED, {})
    store.append_event(run, event_type, {"reason": "done"})

    assert store.get_run(run).status == status
    assert store.verify_events(run).ok


def test_appending_to_a_missing_run_raises_not_found_and_creates_nothing(store: Storage) -> None:
    with pytest.raises(NotFoundError) as e:
        store.append_event("ghost", EventType.WORK_COMPLETED, {"doc": 1})

    assert e.value.code == "not_found.run"
    assert store.list_runs() == []


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ([1, 2, 3], "usage.bad_payload"),
        ("text", "usage.bad_payload"),
        (None, "usage.bad_payload"),
        ({"x": math.nan}, "usage.non_finite_number"),
        ({"x": [1.0, math.inf]}, "usage.non_finite_number"),
        ({"x": {"y": -math.inf}}, "usage.non_finite_number"),
        ({"x": {1, 2}}, "usage.not_json"),
        ({"x": {1: "int key"}}, "usage.non_string_key"),
        ({"x": "lone \ud800 surrogate"}, "usage.not_utf8"),
    ],
)
def test_a_payload_that_is_not_a_json_object_is_refused_without_writing(
    store: Storage, run: str, payload: Any, code: str
) -> None:
    append_n(store, run, 2)
    before = snapshot(store, run)

    with pytest.raises(UsageError) as e:
        store.append_event(run, EventType.WORK_COMPLETED, payload)

    assert e.value.code == code
    assert snapshot(store, run) == before
    assert store.append_event(run, EventType.WORK_COMPLETED, {}).sequence == 3


def test_two_handles_on_one_database_interleave_into_one_chain(store_factory: Any) -> None:
    a, b = store_factory.open(), store_factory.open()
    a.create_run(Run(run_id=RUN))

    for i in range(10):
        (a if i % 2 else b).append_event(RUN, EventType.WORK_COMPLETED, {"doc": i})

    events = a.read_events(RUN)
    assert [e.payload["doc"] for e in events] == list(range(10))
    assert [e.sequence for e in events] == list(range(1, 11))
    assert a.verify_events(RUN).ok and b.verify_events(RUN).ok


def test_runs_have_independent_chains(store: Storage) -> None:
    store.create_run(Run(run_id="run_a"))
    store.create_run(Run(run_id="run_b"))
    a = append_n(store, "run_a", 3)
    b = append_n(store, "run_b", 2)

    assert [e.sequence for e in store.read_events("run_b")] == [1, 2]
    assert b[0].prev_hash is None
    assert store.read_events("run_a") == a
    assert store.verify_events("run_a").ok and store.verify_events("run_b").ok


# -- write transactions ----------------------------------------------------------------------


def test_a_write_transaction_commits_all_its_appends_together(store: Storage, run: str) -> None:
    with store.write(run) as tx:
        first = tx.append(EventType.WORK_COMPLETED, {"doc": 1}, source=Origin.DETERMINISTIC)
        second = tx.append(EventType.WORK_COMPLETED, {"doc": 2}, source=Origin.DETERMINISTIC)
        assert tx.run.head_sequence == 2
        tx.put_action(action_row(run, 1))
        tx.put_checkpoint(checkpoint_row(run, 2, 2))

    assert store.read_events(run) == [first, second]
    assert store.get_run(run).head_hash == second.hash
    assert [a.action_id for a in store.list_actions(run)] == ["act_1"]
    assert [c.sequence for c in store.list_checkpoints(run)] == [2]


@pytest.mark.parametrize("error", [Boom("abandon"), UsageError("refused", code="usage.test")])
def test_an_exception_inside_a_write_transaction_leaves_nothing(
    store: Storage, run: str, error: Exception
) -> None:
    append_n(store, run, 3)
    before = snapshot(store, run)

    with pytest.raises(type(error)), store.write(run) as tx:
        tx.append(EventType.WORK_COMPLETED, {"doc": 99}, source=Origin.DETERMINISTIC)
        tx.put_action(action_row(run, 1))
        tx.put_checkpoint(checkpoint_row(run, 4, 4))
        raise error

    assert snapshot(store, run) == before
    assert store.list_actions(run) == []
    assert store.list_checkpoints(run) == []
    assert store.verify_events(run).ok
    after = store.append_event(run, EventType.WORK_COMPLETED, {"doc": 4})
    assert (after.sequence, after.prev_hash) == (4, before[1])


def test_a_write_transaction_on_a_missing_run_raises_not_found(store: Storage) -> None:
    with pytest.raises(NotFoundError) as e, store.write("ghost"):
        pass
    assert e.value.code == "not_found.run"


# -- the action index --------------------------------------------------------------------------


def test_put_action_is_found_by_id_dedup_fallback_and_action_key(store: Storage, run: str) -> None:
    row = action_row(run, 1, fallback="fb_1")
    with store.write(run) as tx:
        tx.put_action(row)

    with store.write(run) as tx:
        assert tx.find_action(action_id="act_1") == row
        assert tx.find_action(dedup_key="dedup_1") == row
        assert tx.find_action(fallback_key="fb_1") == row
        assert tx.find_action(action_key="send:1") == row
        assert tx.find_action(action_id="act_2") is None
        assert tx.find_action(dedup_key="dedup_2", fallback_key="fb_2") is None
        assert tx.find_action() is None
    assert store.get_action(run, "act_1") == row
    assert store.get_action(run, "send:1") == row
    assert store.get_action(run, "act_2") is None


def test_put_action_again_updates_the_row_in_place(store: Storage, run: str) -> None:
    with store.write(run) as tx:
        tx.put_action(action_row(run, 1))
        tx.put_action(action_row(run, 2))
    done = action_row(run, 1, status="completed", external_id="ext-1")
    with store.write(run) as tx:
        tx.put_action(done._replace(lease_expires=None))

    rows = store.list_actions(run)
    assert [r.action_id for r in rows] == ["act_1", "act_2"]
    assert rows[0].record == done.record
    assert rows[0].lease_expires is None


def test_a_second_action_with_the_same_dedup_key_is_refused_atomically(
    store: Storage, run: str
) -> None:
    with store.write(run) as tx:
        tx.put_action(action_row(run, 1, dedup="same"))
    before = snapshot(store, run)

    with pytest.raises(IntegrityError), store.write(run) as tx:
        tx.append(EventType.WORK_COMPLETED, {"n": 2}, source=Origin.DETERMINISTIC)
        tx.put_action(action_row(run, 2, dedup="same"))

    assert snapshot(store, run) == before


def test_the_action_index_is_scoped_to_its_run(store: Storage, run: str) -> None:
    store.create_run(Run(run_id="other"))
    with store.write(run) as tx:
        tx.put_action(action_row(run, 1, fallback="fb_1"))
    with store.write("other") as tx:
        assert (
            tx.find_action(
                action_id="act_1", dedup_key="dedup_1", fallback_key="fb_1", action_key="send:1"
            )
            is None
        )
        tx.put_action(action_row("other", 1))  # the same ids in another run are independent
    assert store.get_action("other", "act_1") is not None
    assert len(store.list_actions(run)) == 1


def test_a_runs_action_index_lists_its_rows_in_the_order_first_written_whatever_their_status(
    store: Storage, run: str
) -> None:
    store.create_run(Run(run_id="other"))
    statuses = ["completed", "started", "failed", "unknown", "compensated", "completed"]
    for n, status in enumerate(statuses):  # two runs' rows interleaved
        with store.write(run) as tx:
            tx.put_action(action_row(run, n, status=status))
        with store.write("other") as tx:
            tx.put_action(action_row("other", 100 + n, status=status))
    with store.write(run) as tx:  # updated in place: it keeps its place
        tx.put_action(action_row(run, 1, status="completed", external_id="ext-1"))
    with store.write(run) as tx:
        tx.put_action(action_row(run, 6, status="started"))

    listed = [r.action_id for r in store.list_actions(run)]
    assert listed == [f"act_{n}" for n in range(7)]
    assert [r[1] for r in store.action_index_rows(run)] == listed
    assert [r[0] for r in store.action_index_rows(run)] == [run] * 7
    assert store.list_actions(run)[1].record["status"] == "completed"
    assert [r.action_id for r in store.list_actions("other")] == [
        f"act_{100 + n}" for n in range(6)
    ]


def test_renew_lease_moves_only_the_lease(store: Storage, run: str) -> None:
    with store.write(run) as tx:
        tx.put_action(action_row(run, 1))
    row = store.get_action(run, "act_1")
    assert row is not None

    store.renew_lease(run, "act_1", 5000.0)

    renewed = store.get_action(run, "act_1")
    assert renewed == row._replace(lease_expires=5000.0)


# -- checkpoints and schema -------------------------------------------------------------------


def test_checkpoint_rows_are_listed_newest_first(store: Storage, run: str) -> None:
    append_n(store, run, 4)
    with store.write(run) as tx:
        tx.put_checkpoint(checkpoint_row(run, 2, 3))
    with store.write(run) as tx:
        tx.put_checkpoint(checkpoint_row(run, 4, 5))

    rows = store.list_checkpoints(run)
    assert [(c.sequence, c.event_sequence) for c in rows] == [(4, 5), (2, 3)]
    assert rows[1] == checkpoint_row(run, 2, 3)
    # The plain form, whole or the newest ``limit`` only.
    plain = [(c.sequence, c.event_sequence, c.state_json) for c in store.stored_checkpoints(run)]
    assert plain == [(c.sequence, c.event_sequence, c.state_json) for c in rows]
    assert [c.sequence for c in store.stored_checkpoints(run, limit=1)] == [4]
    assert [c.sequence for c in store.stored_checkpoints(run, limit=2)] == [4, 2]
    assert [c.sequence for c in store.stored_checkpoints(run, limit=5)] == [4, 2]
    assert store.stored_checkpoints(run, limit=0) == []


def test_schema_version_is_the_current_one(store: Storage) -> None:
    assert store.schema_version() == SCHEMA_VERSION


def test_store_errors_are_continuum_errors_with_dotted_codes(store: Storage) -> None:
    with pytest.raises(ContinuumError) as e:
        store.read_events("ghost")
    assert e.value.code == "not_found.run"
    with pytest.raises(NotFoundError):
        store.verify_events("ghost")

"""A batch append equals the same single appends, hash for hash (issue 14).

Two SQLite stores get the same random events with the same event ids and timestamps: one
through ``append_event`` one at a time, one through ``append_events`` in batches of random
sizes. Their rows must be identical, column for column (the stored payload text too), and
each event's hash must be what the reference sealing function (``events.seal``) gives. A
batch with one bad payload writes nothing and names the event by position.
"""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import continuum.store.tx as tx
from continuum.errors import UsageError
from continuum.eventlog.event_model import seal
from continuum.eventlog.events import EventType
from continuum.store import SQLiteStorage
from continuum.types import Origin

RUN = "r"

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(10**12), 10**12), st.text(max_size=8))
json_value = st.recursive(
    json_leaf,
    lambda kids: st.one_of(
        st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=5), kids, max_size=3)
    ),
    max_leaves=8,
)
event = st.one_of(
    st.builds(lambda i: (EventType.WORK_COMPLETED, {"item_id": f"w{i}"}), st.integers(0, 99)),
    st.builds(lambda c: (EventType.PROGRESS_RECORDED, {"completed": c}), st.integers(0, 50)),
    st.builds(lambda x: ("custom_note", {"x": x}), json_value),  # an unknown type: kept as is
    st.builds(lambda t: (EventType.EVIDENCE_ADDED, {"text": t}), st.text(max_size=12)),
)


class _Ids:
    """Deterministic event ids and timestamps, the same sequence for both stores."""

    def __init__(self) -> None:
        self.n = itertools.count()
        self.t = itertools.count()

    def event_id(self) -> str:
        return f"evt_{next(self.n):032x}"

    def clock(self) -> str:
        return f"2026-01-01T00:00:{next(self.t) % 60:02d}.{next(self.t):06d}Z"


def _rows(path: Path) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(str(path))
    try:
        return list(conn.execute("SELECT * FROM events ORDER BY run_id, sequence"))
    finally:
        conn.close()


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    events=st.lists(event, min_size=1, max_size=25),
    cuts=st.lists(st.integers(1, 6), min_size=1, max_size=25),
)
def test_a_batch_append_equals_the_same_single_appends(
    events: list[tuple[str, dict[str, Any]]], cuts: list[int]
) -> None:
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        single_path, batch_path = Path(tmp) / "single.db", Path(tmp) / "batch.db"
        for path, batched in ((single_path, False), (batch_path, True)):
            ids = _Ids()
            mp.setattr(tx, "new_event_id", ids.event_id)
            store = SQLiteStorage(path, clock=ids.clock)
            store.create_run(_run())
            if batched:
                rest = list(events)
                for size in itertools.cycle(cuts):
                    if not rest:
                        break
                    batch, rest = rest[:size], rest[size:]
                    written = store.append_events(RUN, batch, source=Origin.EXTERNAL_AGENT)
                    assert [e.type for e in written] == [str(t) for t, _ in batch]
            else:
                for type_, payload in events:
                    store.append_event(RUN, type_, payload, source=Origin.EXTERNAL_AGENT)
            assert store.verify_events(RUN).ok
            stored = store.read_events(RUN)
            prev = None
            for e in stored:  # each hash is the reference sealing of its fields
                ref = seal(
                    event_id=e.event_id,
                    run_id=RUN,
                    sequence=e.sequence,
                    type=e.type,
                    timestamp=e.timestamp,
                    payload=e.payload,
                    causer_event_id=None,
                    source=Origin.EXTERNAL_AGENT,
                    prev_hash=prev,
                )
                assert ref.hash == e.hash
                prev = e.hash
            store.close()
        assert _rows(single_path) == _rows(batch_path)
        assert len(_rows(batch_path)) == len(events)


def _run() -> Any:
    from continuum.store import Run

    return Run(run_id=RUN, goal="g")


def test_a_batch_with_one_bad_payload_writes_nothing_and_names_it(tmp_path: Path) -> None:
    store = SQLiteStorage(tmp_path / "s.db")
    store.create_run(_run())
    before = _rows(tmp_path / "s.db")
    bad = [
        (EventType.WORK_COMPLETED, {"item_id": "a"}),
        (EventType.PLAN_SET, {"steps": "x"}),
        (EventType.WORK_COMPLETED, {"item_id": "b"}),
    ]
    with pytest.raises(UsageError) as e:
        store.append_events(RUN, bad)
    assert e.value.code == "usage.bad_payload" and e.value.fields["index"] == 1
    assert "events[1]" in e.value.message and "nothing was written" in e.value.message
    with pytest.raises(UsageError) as e2:
        store.append_events(RUN, [(EventType.WORK_COMPLETED, {"n": float("nan")})])
    assert e2.value.fields["index"] == 0
    with pytest.raises(UsageError) as e3:
        store.append_events(RUN, [("work_completed",)])  # type: ignore[list-item]
    assert "events[0]" in e3.value.message
    assert _rows(tmp_path / "s.db") == before
    assert store.append_events(RUN, []) == []
    store.close()

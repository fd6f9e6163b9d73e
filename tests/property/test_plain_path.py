"""The plain-data pieces of the hot path (issue 27) are exactly the models they stand in
for: nothing the ledger or a hook reads without pydantic differs from what it would read
through the model.

- ``is_plain_record(r)`` implies ``ActionRecord.model_validate(r)`` takes every field as
  it is; records the ledger writes are plain. Control: a check that takes ``True`` for a
  count is caught.
- ``rows.run_head`` / ``rows.stored_checkpoint`` / ``rows.action_from_row`` give the
  model's fields (or its error) for any row, damaged ones included.
- ``empty_plain`` is the empty ``State``'s JSON form; ``new_event_id`` is ``evt_`` and a
  version 4 UUID; ``host_name`` is ``socket.gethostname()``.
- ``plain_state.state_without_actions`` gives the facade's state (budget, parent,
  children, dependencies) for random runs with checkpoints; ``budget_scopes`` over it
  gives what the facade's give.
- The facade's state brought up to date from the events it wrote itself
  (``Storage.own_events``) equals the state a new store object reads, with another writer
  in between; a payload its writer changes after the write is read as stored (control: a
  hand-back of the writer's object is caught). ``format_timestamp`` is strftime's form.
"""

from __future__ import annotations

import json
import socket
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from continuum.errors import IntegrityError
from continuum.ledger.budget import RunBudget, budget_scopes
from continuum.ledger.owners import host_name
from continuum.recovery.plain_state import state_without_actions
from continuum.runtime.facade import Continuum
from continuum.state.action_fields import is_plain_record
from continuum.state.projection import empty_plain
from continuum.state.records import ActionRecord, State
from continuum.store import open_store
from continuum.store.base import format_timestamp
from continuum.store.rows import (
    action_from_row,
    checkpoint_from_row,
    run_from_row,
    run_head,
    stored_checkpoint,
)
from continuum.store.tx import new_event_id
from continuum.types import Origin

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))

text = st.text(max_size=6)
leaf: st.SearchStrategy[Any] = (
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False) | text
)
odd: st.SearchStrategy[Any] = (
    leaf | st.lists(leaf, max_size=2) | st.dictionaries(text, leaf, max_size=2)
)

GOOD: dict[str, Any] = {
    "action_id": "act_1",
    "action_key": "send:INV-1",
    "action_type": "send",
    "key": "INV-1",
    "dedup_key": "d",
    "fallback_key": None,
    "arguments": {"n": 1},
    "replay": "never",
    "status": "started",
    "attempt": 1,
    "operation_key": "op_1",
    "owner": {"host": "h", "pid": 1},
    "approval_id": None,
    "external_id": None,
    "result": None,
    "error": None,
    "note": None,
    "intercepted_sequence": 3,
    "last_sequence": 3,
    "origin": "external_agent",
    "settled_by": None,
    "settled_at": None,
}
FIELDS = sorted(ActionRecord.model_fields)


@st.composite
def records(draw: st.DrawFn) -> dict[str, Any]:
    """A good record with some fields changed to odd values, dropped, or added."""
    rec = dict(GOOD)
    if draw(st.booleans()):
        rec["versions"] = draw(st.dictionaries(text, text | odd, max_size=2))
    if draw(st.booleans()):
        rec["usage"] = draw(st.lists(st.dictionaries(text, odd, max_size=2), max_size=2) | odd)
    for name in draw(st.lists(st.sampled_from([*FIELDS, "extra"]), max_size=3)):
        choice = draw(st.integers(0, 2))
        if choice == 0:
            rec.pop(name, None)
        elif choice == 1:
            rec[name] = draw(odd)
        else:
            rec[name] = draw(st.sampled_from(["started", "completed", "human", "never", 7]))
    return rec


def _model_takes_as_is(rec: dict[str, Any], check: Any) -> None:
    """``check(rec)`` true implies the model takes every field exactly as given."""
    if not check(rec):
        return
    model = ActionRecord.model_validate(rec)
    for name in FIELDS:
        if name in rec:
            got = getattr(model, name)
            assert got == rec[name] and type(got) in (type(rec[name]), *_ENUMS), name


_ENUMS = tuple({type(ActionRecord.model_validate(GOOD).status), type(Origin.HUMAN)})


@SETTINGS
@given(records())
def test_a_plain_record_is_taken_by_the_model_as_it_is(rec: dict[str, Any]) -> None:
    _model_takes_as_is(rec, is_plain_record)


def test_a_good_record_is_plain_and_each_odd_field_is_not() -> None:
    assert is_plain_record(GOOD)
    for name, value in (("attempt", True), ("status", "bogus"), ("owner", {1: 2}), ("key", 5)):
        assert not is_plain_record({**GOOD, name: value}), name
    assert not is_plain_record({k: v for k, v in GOOD.items() if k != "operation_key"})


def test_control_a_check_that_takes_a_flag_for_a_count_is_caught() -> None:
    def loose(rec: dict[str, Any]) -> bool:
        relaxed = {k: (1 if v is True else v) for k, v in rec.items()}
        return is_plain_record(relaxed)

    with pytest.raises(AssertionError):
        _model_takes_as_is({**GOOD, "attempt": True}, loose)


def test_the_records_the_ledger_writes_are_plain(tmp_path: Path) -> None:
    cx = Continuum(open_store(str(tmp_path / "s.db")), cwd=str(tmp_path))
    try:
        cx.start_run("r")
        a = cx.intercept("r", "send", {"n": 1}, key="a", versions={"model": "m"})
        cx.complete("r", a.action_key, external_id="x", result={"ok": True})
        b = cx.intercept("r", "send", {"n": 2}, cost={"usd": "0.01"})
        cx.fail("r", b.action_key, error="boom")
        c = cx.intercept("r", "send", {"n": 3}, key="c")
        cx.fail("r", c.action_key, certain=True)
        rows = cx.store.list_actions("r")
        assert len(rows) == 3 and all(is_plain_record(r.record) for r in rows)
    finally:
        cx.close()


def _same(plain: Any, model: Any) -> None:
    """The plain row's fields, or its error, are the model's."""
    try:
        want: Any = tuple(model().model_dump().values())
    except IntegrityError as e:
        want = e.code
    try:
        got: Any = tuple(plain())
    except IntegrityError as e:
        got = e.code
    assert got == want


cells = st.none() | st.integers(-2, 2) | st.sampled_from(["active", "{}", "x", '{"a":1}', "[]"])


@SETTINGS
@given(
    row=st.tuples(
        st.sampled_from(["r", 1, None]),
        st.none() | text,
        st.sampled_from(["active", "completed", "aborted", "bogus", 3]),
        st.sampled_from(["2026-01-01T00:00:00.000000Z", 5]),
        st.sampled_from([0, 4, "4", None, 2.0]),
        st.none() | st.sampled_from(["ab", 7]),
        st.sampled_from(["{}", '{"k": [1]}', "[]", "not json", 9, '{"a": NaN}']),
    )
)
def test_a_run_row_reads_plain_as_the_model_reads_it(row: tuple[Any, ...]) -> None:
    _same(lambda: run_head(row), lambda: run_from_row(row))


@SETTINGS
@given(row=st.tuples(cells, cells, cells, cells, cells, cells))
def test_a_checkpoint_row_reads_plain_as_the_model_reads_it(row: tuple[Any, ...]) -> None:
    _same(lambda: stored_checkpoint(row), lambda: checkpoint_from_row(row))


@SETTINGS
@given(
    run=st.sampled_from(["r", 1]),
    action=st.sampled_from(["act_1", 2]),
    lease=st.none() | st.integers(0, 5) | st.floats(0, 5) | st.sampled_from(["1.5", b"x"]),
)
def test_an_index_row_is_plain_data_or_refused(run: Any, action: Any, lease: Any) -> None:
    record = f'{{"action_id": "{action}", "dedup_key": "d"}}'
    row = (run, action, record, lease, "d")
    plain_lease = isinstance(lease, int | float) and not isinstance(lease, bool) or lease is None
    if isinstance(run, str) and isinstance(action, str) and plain_lease:
        got = action_from_row(row)
        assert got.lease_expires == lease and type(got.lease_expires) in (float, type(None))
    else:
        with pytest.raises(IntegrityError):
            action_from_row(row)


def test_empty_plain_is_the_empty_states_json_form() -> None:
    assert empty_plain("r") == State(run_id="r").model_dump(mode="json")


def test_event_ids_are_evt_and_a_version_4_uuid() -> None:
    ids = {new_event_id() for _ in range(500)}
    assert len(ids) == 500
    for event_id in ids:
        assert event_id.startswith("evt_") and len(event_id) == 36
        u = uuid.UUID(hex=event_id[4:])
        assert u.version == 4 and u.variant == uuid.RFC_4122 and u.hex == event_id[4:]


def test_host_name_is_what_socket_reports() -> None:
    assert host_name() == socket.gethostname()


# -- the state a hook reads, against the facade's ------------------------------------------

STEPS = st.lists(
    st.sampled_from(
        [
            "effect",
            "settle",
            "progress",
            "declare",
            "change",
            "budget",
            "child",
            "checkpoint",
        ]
    ),
    min_size=1,
    max_size=14,
)


def _play(cx: Continuum, steps: list[str], tmp: Path, first: int = 0) -> None:
    dep = tmp / "dep.txt"
    if not dep.exists():
        dep.write_text("0", encoding="utf-8")
    open_keys = [a.action_key for a in cx.actions("r") if a.status == "started"]
    for i, step in enumerate(steps, first):
        if step == "effect":
            r = cx.intercept("r", "send", {"i": i}, key=f"k{i}")
            if r.proceed:
                open_keys.append(r.action_key)
        elif step == "settle" and open_keys:
            cx.complete("r", open_keys.pop())
        elif step == "progress":
            cx.record_progress("r", completed=i)
        elif step == "declare":
            cx.declare_dependencies("r", files=[str(dep)])
        elif step == "change":
            dep.write_text(str(i), encoding="utf-8")
            cx.revalidate("r")
        elif step == "budget":
            cx.set_budget("r", tokens=10 * i + 1)
        elif step == "child":
            cx.start_run(f"r.c{i}", parent="r")
        elif step == "checkpoint":
            cx.checkpoint("r")


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=STEPS, cut=st.integers(0, 14))
def test_the_plain_state_is_the_facades_state_but_for_its_actions(
    tmp_path_factory: pytest.TempPathFactory, steps: list[str], cut: int
) -> None:
    """From the checkpoint, and from an earlier plain state (what the facade caches)."""
    tmp = tmp_path_factory.mktemp("plain")
    store = open_store(str(tmp / "s.db"))
    cx = Continuum(store, cwd=str(tmp), origin=Origin.HUMAN)
    try:
        cx.start_run("r")
        _play(cx, steps[:cut], tmp)
        earlier = state_without_actions(store, "r")
        kept = json.dumps(earlier.state, sort_keys=True)
        _play(cx, steps[cut:], tmp, first=cut)
        state = Continuum(store, cwd=str(tmp)).state("r").model_dump(mode="json")
        for plain in (
            state_without_actions(store, "r").state,
            state_without_actions(store, "r", earlier).state,
        ):
            for field in ("budget", "parent", "children", "dependencies", "run_id", "status"):
                assert plain.get(field) == state.get(field), field
        assert json.dumps(earlier.state, sort_keys=True) == kept  # a reader's copy untouched

        def view(run_id: str) -> RunBudget:
            s = state_without_actions(store, run_id).state
            return RunBudget(s.get("budget"), s.get("parent"), s.get("children") or [])

        plain_scopes = budget_scopes(
            "r", view, lambda r: store.get_head(r).head_sequence, max_family=1000
        )
        reference = Continuum(store, cwd=str(tmp))
        model = reference.state("r")

        def model_view(run_id: str) -> RunBudget:
            m = reference.state(run_id)
            return RunBudget(m.budget, m.parent, m.children)

        assert plain_scopes == budget_scopes(
            "r", model_view, lambda r: store.get_run(r).head_sequence, max_family=1000
        )
        assert model.run_id == "r"
    finally:
        cx.close()


# -- the facade's own writes, handed back instead of read (store/own_writes.py) -------------

OTHER = st.lists(st.sampled_from(["effect", "settle", "progress", "budget"]), max_size=3)


def _own_state_matches_a_read(cx: Continuum, path: Path) -> None:
    fresh = open_store(str(path))
    try:
        assert cx._plain_state("r") == state_without_actions(fresh, "r").state
    finally:
        fresh.close()


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=STEPS, other=OTHER, at=st.integers(0, 14))
def test_the_state_from_a_facades_own_writes_is_the_state_read_back(
    tmp_path_factory: pytest.TempPathFactory, steps: list[str], other: list[str], at: int
) -> None:
    """After every step the facade's cached state (brought up to date from the events it
    wrote itself, when it wrote all of them) equals the state a new store object reads
    from the file; another writer's steps in between make it read them instead."""
    tmp = tmp_path_factory.mktemp("own")
    path = tmp / "s.db"
    store = open_store(str(path))
    cx = Continuum(store, cwd=str(tmp), origin=Origin.HUMAN)
    handed = []
    own_events = store.own_events

    def counted(*args: Any) -> Any:
        got = own_events(*args)
        handed.append(got is not None)
        return got

    store.own_events = counted  # type: ignore[method-assign,assignment]
    try:
        cx.start_run("r")
        cx._plain_state("r")
        for i, step in enumerate(["effect", "effect", *steps]):  # watched after the 1st
            _play(cx, [step], tmp, first=i)
            _own_state_matches_a_read(cx, path)
            if i == at and other:
                elsewhere = Continuum(open_store(str(path)), cwd=str(tmp), origin=Origin.HUMAN)
                try:
                    _play(elsewhere, other, tmp, first=100 + i)
                finally:
                    elsewhere.close()
                _own_state_matches_a_read(cx, path)
        assert any(handed)  # the own path was taken, not only the read
    finally:
        cx.close()


def _progress_then_changed_by_its_writer(tmp: Path) -> tuple[Continuum, dict[str, Any]]:
    cx = Continuum(open_store(str(tmp / "s.db")), cwd=str(tmp), origin=Origin.HUMAN)
    cx.start_run("r", goal="g")
    cx._plain_state("r")
    cx.append("r", "progress_recorded", {"completed": 0, "total": 5})
    cx._plain_state("r")  # from here on, the store keeps what it commits on the run
    payload: dict[str, Any] = {"completed": 1, "total": 5}
    cx.append("r", "progress_recorded", payload)
    payload["completed"] = 4  # the writer changes its object after the write
    return cx, payload


def test_a_payload_its_writer_changes_after_the_write_is_read_as_stored(tmp_path: Path) -> None:
    cx, _ = _progress_then_changed_by_its_writer(tmp_path)
    try:
        assert cx._plain_state("r")["progress"]["completed"] == 1
        _own_state_matches_a_read(cx, tmp_path / "s.db")
    finally:
        cx.close()


def test_control_handing_back_the_writers_object_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above fails for a hand-back that skips parsing the stored text."""
    import continuum.recovery.plain_state as plain_state

    monkeypatch.setattr(plain_state, "readable", lambda event, text: event)
    cx, _ = _progress_then_changed_by_its_writer(tmp_path)
    try:
        assert cx._plain_state("r")["progress"]["completed"] == 4
        with pytest.raises(AssertionError):
            _own_state_matches_a_read(cx, tmp_path / "s.db")
    finally:
        cx.close()


@given(
    moment=st.datetimes(
        min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
    )
)
def test_a_timestamp_is_written_in_the_one_form_strftime_gives(moment: datetime) -> None:
    assert format_timestamp(moment) == moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")

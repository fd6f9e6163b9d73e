"""One depth and size limit for every entry, and a log that already holds a deeper value
still answers (issue 30, item 1), on every backend.

Arguments nested about 260 levels deep used to be accepted by every way in but MCP,
sealed into the log, and from then on every listing, checkpoint and resume of the run
failed with "Maximum serialization depth exceeded". Now: the store refuses, naming the
field and the limit, with nothing written, however the entry arrives (the Python API,
the ledger, a batch); and a deep value already in a log (written before the limit, as
the test writes it) is folded, checkpointed, listed and shown cut at the limit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from continuum.errors import UsageError
from continuum.eventlog.events import EventType
from continuum.eventlog.limits import CLIPPED, MAX_DEPTH, MAX_ENTRY_BYTES
from continuum.runtime.facade import Continuum
from continuum.store import Run, Storage
from continuum.types import Origin

RUN = "run_limits"


def nested(depth: int, leaf: Any = "x", key: str = "a") -> Any:
    value: Any = leaf
    for i in range(depth):
        value = {key: value} if i % 2 == 0 else [value]
    return value


def head(store: Storage) -> tuple[int, str | None]:
    info = store.get_run(RUN)
    return info.head_sequence, info.head_hash


@pytest.fixture
def rt(store: Storage) -> Iterator[Continuum]:
    store.create_run(Run(run_id=RUN, goal="g"))
    yield Continuum(store, origin=Origin.EXTERNAL_AGENT)


def test_an_entry_one_level_too_deep_is_refused_naming_the_field_and_nothing_is_written(
    rt: Continuum, store: Storage
) -> None:
    before = head(store)
    with pytest.raises(UsageError) as e:
        rt.intercept(RUN, "send", {"deep": nested(MAX_DEPTH + 1)}, key="k1")
    assert e.value.code == "usage.too_deep" and e.value.fields["limit"] == MAX_DEPTH
    assert str(e.value.fields["field"]).startswith("arguments.deep")
    assert head(store) == before
    # Control: exactly at the limit is fine, and the same for every way in.
    assert rt.intercept(RUN, "send", {"deep": nested(MAX_DEPTH - 1)}, key="k2").proceed
    for attempt in (
        lambda: store.append_event(RUN, EventType.EVIDENCE_ADDED, {"text": "t", "x": nested(300)}),
        lambda: store.append_events(RUN, [(EventType.EVIDENCE_ADDED, {"x": nested(300)})]),
        lambda: rt.complete(RUN, "send:k2", result=nested(300)),
    ):
        before = head(store)
        with pytest.raises(UsageError) as e:
            attempt()
        assert e.value.code == "usage.too_deep", e.value
        assert head(store) == before


def test_an_entry_over_the_size_limit_is_refused_and_nothing_is_written(
    rt: Continuum, store: Storage
) -> None:
    before = head(store)
    with pytest.raises(UsageError) as e:
        rt.intercept(RUN, "send", {"body": "x" * MAX_ENTRY_BYTES}, key="big")
    assert e.value.code == "usage.too_large"
    assert head(store) == before
    assert rt.intercept(RUN, "send", {"body": "x" * 1000}, key="small").proceed  # control


@contextmanager
def an_older_version(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Write as a version without the limit did (the check switched off, nothing else)."""
    import continuum.ledger.core as ledger
    import continuum.store.core as core
    import continuum.store.tx as tx

    with monkeypatch.context() as m:
        m.setattr(core, "check_entry", lambda *a, **k: None)
        m.setattr(tx, "check_entry", lambda *a, **k: None)
        m.setattr(ledger, "check_value", lambda *a, **k: None)
        yield


def everything_a_person_and_an_agent_read(rt: Continuum) -> dict[str, Any]:
    actions = rt.actions(RUN)
    verdict = rt.resume(RUN)
    checkpoint = rt.checkpoint(RUN, reason="after the deep value")
    state = rt.state(RUN)
    return {
        "actions": [a.model_dump(mode="json") for a in actions],
        "verdict": verdict.model_dump(mode="json"),
        "checkpoint": checkpoint.model_dump(mode="json"),
        "state": state.model_dump(mode="json"),
        "verified": rt.verify(RUN).ok,
    }


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 300])
def test_a_deep_value_already_in_a_log_is_read_cut_at_the_limit_never_an_error(
    rt: Continuum, store: Storage, monkeypatch: pytest.MonkeyPatch, depth: int
) -> None:
    with an_older_version(monkeypatch):
        started = rt.intercept(RUN, "send", {"deep": nested(depth)}, key="old")
        rt.complete(RUN, started.action_id or "", result=nested(depth, leaf=1))
    seen = everything_a_person_and_an_agent_read(rt)
    assert seen["verified"] is True
    (action,) = seen["actions"]
    text = json.dumps(action)
    assert CLIPPED in text and action["status"] == "completed"
    # The full value is still in its event, untouched (the chain verified above).
    intercepted = next(e for e in rt.events(RUN) if e.type == EventType.ACTION_INTERCEPTED)
    assert intercepted.payload["arguments"]["deep"] == nested(depth)


def test_a_value_too_deep_for_any_reader_is_refused_before_anything_walks_it(
    rt: Continuum, store: Storage
) -> None:
    """900 levels: deeper than the ledger's own identity walk could go (it recursed)."""
    before = head(store)
    with pytest.raises(UsageError) as e:
        rt.intercept(RUN, "send", {"deep": nested(900)}, key="k")
    assert e.value.code == "usage.too_deep" and head(store) == before


def test_an_old_log_with_a_deep_value_outside_the_ledger_still_folds_and_checkpoints(
    rt: Continuum, store: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    with an_older_version(monkeypatch):
        store.append_event(RUN, EventType.EVIDENCE_ADDED, {"text": "t", "extra": nested(900)})
    seen = everything_a_person_and_an_agent_read(rt)
    assert seen["verified"] is True


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    depth=st.integers(min_value=1, max_value=400),
    width=st.integers(min_value=1, max_value=4),
    leaf=st.one_of(st.integers(), st.text(max_size=5), st.none(), st.booleans()),
)
def test_property_whatever_depth_is_in_a_log_the_run_can_be_listed_checkpointed_and_resumed(
    store: Storage, monkeypatch: pytest.MonkeyPatch, depth: int, width: int, leaf: Any
) -> None:
    run = f"p{depth}w{width}"
    try:
        store.get_run(run)
        return  # hypothesis may repeat an example on the same store
    except Exception:
        store.create_run(Run(run_id=run, goal="g"))
    rt = Continuum(store, origin=Origin.EXTERNAL_AGENT)
    value = {f"k{i}": nested(depth, leaf) for i in range(width)}
    with an_older_version(monkeypatch):
        rt.intercept(run, "send", value, key="k")
    for read in (
        lambda: [a.model_dump(mode="json") for a in rt.actions(run)],
        lambda: rt.resume(run).model_dump(mode="json"),
        lambda: rt.checkpoint(run).model_dump(mode="json"),
        lambda: rt.state(run).model_dump(mode="json"),
    ):
        json.dumps(read())

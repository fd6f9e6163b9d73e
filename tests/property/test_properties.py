"""Properties of the pure core: canonical JSON round-trips, any single edit to a stored
event is caught, checkpoint + incremental fold equals the full fold, and the sealed
contract is a function of its inputs alone.

Example counts come from the profile loaded in tests/conftest.py.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from continuum.eventlog.canonical import canonical_json, parse_json
from continuum.eventlog.chain import DamageKind, verify_chain
from continuum.eventlog.event_model import Event, seal
from continuum.eventlog.events import EventType
from continuum.recovery.engine import build_contract, decide
from continuum.state.projection import project
from continuum.state.records import State
from continuum.state.validation import Observation, validate_state
from continuum.types import Origin

RUN = "run_prop"
TS = "2025-01-01T00:00:00.000000Z"

# -- JSON values ---------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=4)


def _same_json(a: Any, b: Any) -> bool:
    """Equality that also tells 0.0 from -0.0 (both must survive the round trip)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


@given(json_values)
def test_canonical_json_round_trips_through_parse_json(value: Any) -> None:
    text = canonical_json(value)
    back = parse_json(text)
    assert _same_json(back, value)
    assert canonical_json(back) == text


@given(st.dictionaries(st.text(max_size=6), json_values, min_size=1, max_size=6), st.randoms())
def test_canonical_json_does_not_depend_on_key_insertion_order(
    value: dict[str, Any], rnd: Any
) -> None:
    items = list(value.items())
    rnd.shuffle(items)
    assert canonical_json(dict(items)) == canonical_json(value)


# -- event logs ------------------------------------------------------------------------------

ids = {
    prefix: st.sampled_from([f"{prefix}{i}" for i in range(1, 4)])
    for prefix in ("w", "e", "f", "d", "ap", "a", "act_", "ds", "m", "o", "b")
}
small_ints = st.integers(min_value=-2, max_value=20) | st.booleans()
short_text = st.text(alphabet="abcxyz é", max_size=6)


def _opt(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


_VERSIONS = st.none() | st.fixed_dictionaries(
    {},
    optional={
        "tool_schema_hash": st.sampled_from(["sha256:a", "sha256:b"]),
        "model": st.sampled_from(["m1", "m2"]),
        "prompt_hash": st.just("sha256:p"),
    },
)


_COST = st.none() | st.fixed_dictionaries(
    {}, optional={"usd_micros": st.integers(0, 10**6), "tokens": st.integers(0, 5000)}
)


def _intercept() -> st.SearchStrategy[dict[str, Any]]:
    def build(
        action_id: str, approval: str | None, replay: str, args: Any, versions: Any, cost: Any
    ) -> dict[str, Any]:
        pinned = {"versions": versions} if versions is not None else {}
        if cost is not None:
            pinned["estimate"] = cost
        return pinned | {
            "action_id": action_id,
            "action_key": f"send:{action_id}",
            "action_type": "send",
            "key": action_id,
            "dedup_key": f"dk_{action_id}",
            "fallback_key": None,
            "arguments": args,
            "replay": replay,
            "operation_key": f"op_{action_id}",
            "owner": {"host": "h", "pid": 7},
            "approval_id": approval,
        }

    return st.builds(
        build,
        ids["act_"],
        st.none() | ids["ap"],
        st.sampled_from(["never", "safe", "idempotent", "reconcile"]),
        json_values,
        _VERSIONS,
        _COST,
    )


def _on_action(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"action_id": ids["act_"]}, optional=fields)


PAYLOADS: list[tuple[str, st.SearchStrategy[dict[str, Any]]]] = [
    (
        EventType.RUN_STARTED,
        _opt(goal=short_text, total=small_ints, model=ids["m"], parent=st.none() | ids["b"]),
    ),
    (EventType.CHILD_STARTED, _opt(child_run_id=ids["b"], goal=short_text)),
    (EventType.HANDOFF_RECORDED, _opt(note=short_text)),
    (
        EventType.BUDGET_SET,
        _opt(usd_micros=st.none() | st.integers(0, 10**6), tokens=st.none() | small_ints),
    ),
    (EventType.GOAL_SET, _opt(goal=short_text | st.integers())),
    (EventType.RUN_COMPLETED, st.just({})),
    (EventType.RUN_ABORTED, _opt(reason=short_text)),
    (
        EventType.PROGRESS_RECORDED,
        _opt(completed=small_ints, total=small_ints, failed=small_ints, goal=short_text),
    ),
    (EventType.PLAN_SET, _opt(steps=st.lists(short_text | st.integers(), max_size=3))),
    (EventType.WORK_ADDED, _opt(item_id=ids["w"], text=short_text)),
    (EventType.WORK_COMPLETED, _opt(item_id=ids["w"], doc=st.integers())),
    (EventType.WORK_FAILED, _opt(item_id=ids["w"])),
    (
        EventType.EVIDENCE_ADDED,
        _opt(evidence_id=ids["e"], dependencies=st.lists(ids["ds"], max_size=2)),
    ),
    (
        EventType.FINDING_ADDED,
        _opt(finding_id=ids["f"], evidence=st.lists(ids["e"], max_size=2), text=short_text),
    ),
    (EventType.FINDING_INVALIDATED, _opt(finding_id=ids["f"])),
    (
        EventType.DECISION_CREATED,
        _opt(
            decision_id=ids["d"],
            findings=st.lists(ids["f"], max_size=2),
            evidence=st.lists(ids["e"], max_size=2),
        ),
    ),
    (EventType.DECISION_INVALIDATED, _opt(decision_id=ids["d"])),
    (
        EventType.DEPENDENCY_DECLARED,
        _opt(
            name=ids["ds"], version=short_text, checksum=st.sampled_from(["sha256:1", "sha256:2"])
        ),
    ),
    (
        EventType.DEPENDENCY_DECLARED,
        st.fixed_dictionaries(
            {
                "dependencies": st.lists(
                    _opt(
                        name=ids["ds"],
                        version=short_text,
                        provider=st.sampled_from(["static", "file"]),
                    ),
                    max_size=3,
                )
            }
        ),
    ),
    (
        EventType.ENVIRONMENT_CHANGED,
        _opt(name=ids["ds"], status=st.sampled_from(["changed", "removed"])),
    ),
    (
        EventType.PERCEPTION_OBSERVED,
        _opt(
            observation_id=ids["o"] | ids["ds"],
            subject=st.sampled_from(["button", "page"]),
            signal=st.sampled_from(["dom", "ocr", "api"]),
            value=st.sampled_from(["Pay", "Pay!", 1, None]) | json_values,
            kind=st.sampled_from(["environment", "ui", "content", "tool"]),
        ),
    ),
    (
        EventType.BRANCH_RESOLVED,
        _opt(
            branch_id=ids["b"],
            choice=st.sampled_from(["go", "stop"]),
            observations=st.lists(ids["o"] | ids["ds"], max_size=2),
            risk=st.sampled_from(["low", "high"]),
        ),
    ),
    (EventType.APPROVAL_REQUESTED, _opt(approval_id=ids["ap"])),
    (EventType.APPROVAL_GRANTED, _opt(approval_id=ids["ap"])),
    (EventType.APPROVAL_REVOKED, _opt(approval_id=ids["ap"])),
    (EventType.MODEL_CHANGED, _opt(model=ids["m"])),
    (
        EventType.MODEL_ASSUMPTION_RECORDED,
        _opt(assumption_id=ids["a"], model=ids["m"], text=short_text),
    ),
    (EventType.CHECKPOINTED, _opt(through_sequence=st.integers(0, 50))),
    (
        EventType.REVIEW_CONFIRMED,
        _opt(
            through_sequence=small_ints,
            scope=st.lists(
                st.sampled_from(["goal", "progress", "findings", "all", "plan"]), max_size=2
            ),
        ),
    ),
    (EventType.VALIDATION_RECORDED, json_objects),
    (EventType.RECOVERY_STARTED, json_objects),
    ("some_future_event", json_objects),
    (EventType.ACTION_INTERCEPTED, _intercept()),
    (
        EventType.ACTION_RETRIED,
        _on_action(
            attempt=st.integers(1, 5),
            owner=st.just({"host": "h2", "pid": 8}),
            versions=_VERSIONS.filter(lambda v: v is not None),
            estimate=_COST.filter(lambda v: v is not None),
        ),
    ),
    (
        EventType.ACTION_COMPLETED,
        _on_action(
            external_id=st.none() | short_text,
            result=json_values,
            actual=_COST.filter(lambda v: v is not None),
        ),
    ),
    (EventType.ACTION_FAILED, _on_action(error=st.none() | short_text, certain=st.booleans())),
    (EventType.ACTION_MARKED_UNKNOWN, _on_action(reason=short_text)),
    (
        EventType.ACTION_RECONCILED,
        _on_action(occurred=st.booleans(), external_id=short_text, note=short_text),
    ),
    (EventType.ACTION_COMPENSATED, _on_action(note=short_text)),
]


def _specs(table: list[tuple[str, st.SearchStrategy[dict[str, Any]]]]) -> st.SearchStrategy[Any]:
    return st.one_of(
        [st.tuples(st.just(str(t)), p, st.sampled_from(list(Origin))) for t, p in table]
    )


_ACTION_TYPES = {t for t in EventType if t.startswith("action_")}
_general = _specs([(t, p) for t, p in PAYLOADS if t not in _ACTION_TYPES])
_intercepts = _specs([(t, p) for t, p in PAYLOADS if t == EventType.ACTION_INTERCEPTED])
_transitions = _specs(
    [(t, p) for t, p in PAYLOADS if t in _ACTION_TYPES - {EventType.ACTION_INTERCEPTED}]
)
event_specs = st.one_of(_general, _intercepts, _transitions)


def _mix(lists: tuple[list[Any], list[Any]]) -> st.SearchStrategy[list[Any]]:
    return st.permutations(lists[0] + lists[1])


# A run: random events plus a few extra intercepts, shuffled, so several actions (in and
# out of key order) meet in one run often enough to matter.
runs = st.tuples(st.lists(event_specs, max_size=25), st.lists(_intercepts, max_size=4)).flatmap(
    _mix
)


def seal_all(specs: list[tuple[str, dict[str, Any], Origin]], run_id: str = RUN) -> list[Event]:
    events: list[Event] = []
    for i, (type_, payload, source) in enumerate(specs, 1):
        events.append(
            seal(
                event_id=f"evt_{i}",
                run_id=run_id,
                sequence=i,
                type=type_,
                timestamp=TS,
                payload=payload,
                causer_event_id=None,
                source=source,
                prev_hash=events[-1].hash if events else None,
            )
        )
    return events


def _dump(state: State) -> str:
    return canonical_json(state.model_dump(mode="json"))


# -- any single edit is detected --------------------------------------------------------------

FIELDS = [
    "payload",
    "type",
    "timestamp",
    "source",
    "prev_hash",
    "sequence",
    "event_id",
    "run_id",
    "hash",
    "causer_event_id",
]


@given(st.lists(event_specs, min_size=1, max_size=8), st.data())
def test_any_single_change_to_a_stored_event_is_detected(
    specs: list[tuple[str, dict[str, Any], Origin]], data: st.DataObject
) -> None:
    events = seal_all(specs)
    head = (events[-1].sequence, events[-1].hash)
    assert verify_chain(RUN, events, *head).ok
    index = data.draw(st.integers(0, len(events) - 1), label="index")
    field = data.draw(st.sampled_from(FIELDS), label="field")
    target = events[index]
    old = getattr(target, field)
    new: Any
    if field == "payload":
        new = data.draw(json_objects, label="new payload")
        assume(canonical_json(new) != canonical_json(old))
    elif field == "source":
        new = data.draw(st.sampled_from([o for o in Origin if o != old]))
    elif field == "sequence":
        new = data.draw(st.sampled_from([0, 1, old - 1, old + 1, -1]) | st.integers(-3, 20))
        assume(new != old)
    elif field in ("prev_hash", "hash"):
        new = data.draw(
            st.none() | st.text("0123456789abcdef", min_size=64, max_size=64)
            if field == "prev_hash"
            else st.text("0123456789abcdef", min_size=64, max_size=64)
        )
        assume(new != old)
    elif field == "causer_event_id":
        new = data.draw(st.none() | st.text(max_size=10))
        assume(new != old)
    else:
        new = data.draw(st.text(max_size=12).filter(lambda s: s != old))
    tampered = list(events)
    tampered[index] = target.model_copy(update={field: new})

    report = verify_chain(RUN, tampered, *head)

    assert not report.ok
    first = report.first_violation
    assert first is not None
    assert first.sequence == index + 1
    assert report.trusted_through == index
    if field == "run_id":
        assert first.kind == DamageKind.WRONG_RUN
    elif field == "sequence":
        assert first.kind == DamageKind.SEQUENCE_GAP


@given(st.lists(event_specs, min_size=2, max_size=8), st.data())
def test_dropping_events_from_the_tail_is_detected_against_the_head(
    specs: list[tuple[str, dict[str, Any], Origin]], data: st.DataObject
) -> None:
    events = seal_all(specs)
    keep = data.draw(st.integers(0, len(events) - 1), label="keep")
    report = verify_chain(RUN, events[:keep], events[-1].sequence, events[-1].hash)
    assert not report.ok
    assert report.first_violation is not None
    assert report.first_violation.kind == DamageKind.TRUNCATED
    assert report.first_violation.sequence == keep + 1
    assert report.trusted_through == keep


# -- checkpoint + incremental fold == full fold -------------------------------------------------


@given(runs, st.data())
def test_checkpoint_plus_incremental_fold_equals_the_full_fold(
    specs: list[tuple[str, dict[str, Any], Origin]], data: st.DataObject
) -> None:
    events = seal_all(specs)
    split = data.draw(st.integers(0, len(events)), label="split")
    full = project(RUN, events)

    checkpoint = project(RUN, events[:split])
    in_memory = project(RUN, events[split:], start=checkpoint)
    assert in_memory == full
    assert _dump(in_memory) == _dump(full)

    # checkpoints are stored as canonical JSON and read back with model_validate_json
    restored = State.model_validate_json(canonical_json(checkpoint.model_dump(mode="json")))
    assert restored == checkpoint
    from_json = project(RUN, events[split:], start=restored)
    assert from_json == full
    assert _dump(from_json) == _dump(full)

    # events the checkpoint already covers are skipped, not applied twice
    assert project(RUN, events, start=restored) == full


@given(runs)
def test_the_fold_is_a_function_of_the_events(
    specs: list[tuple[str, dict[str, Any], Origin]],
) -> None:
    assert _dump(project(RUN, seal_all(specs))) == _dump(project(RUN, seal_all(specs)))


# -- contract determinism ---------------------------------------------------------------------

observations = st.dictionaries(
    ids["ds"],
    st.none()
    | st.builds(
        Observation,
        present=st.booleans(),
        version=st.none() | short_text,
        checksum=st.none() | st.sampled_from(["sha256:1", "sha256:2"]),
    ),
    max_size=3,
)


def _contract_json(
    events: list[Event],
    state: State,
    observed: dict[str, Observation | None],
    expected_model: str | None,
    in_flight: set[str],
    tolerate: bool,
    checkpoint_version: int | None,
) -> str:
    chain = verify_chain(RUN, events, len(events), events[-1].hash if events else None)
    validation = validate_state(state, observed, expected_model=expected_model)
    decision = decide(state, validation, chain, in_flight=set(in_flight), tolerate_unknown=tolerate)
    observed_env = {n: (o.checksum or o.version) if o else None for n, o in observed.items()}
    contract = build_contract(
        state,
        validation,
        decision,
        chain,
        checkpoint_version=checkpoint_version,
        observed_env=observed_env,
    )
    assert contract.is_intact()
    return contract.to_json()


@given(runs, observations, st.none() | ids["m"], st.sets(ids["act_"]), st.booleans(), st.data())
def test_the_same_inputs_give_a_byte_identical_sealed_contract(
    specs: list[tuple[str, dict[str, Any], Origin]],
    observed: dict[str, Observation | None],
    expected_model: str | None,
    in_flight: set[str],
    tolerate: bool,
    data: st.DataObject,
) -> None:
    first_events, second_events = seal_all(specs), seal_all(specs)
    first = _contract_json(
        first_events,
        project(RUN, first_events),
        observed,
        expected_model,
        in_flight,
        tolerate,
        None,
    )
    second = _contract_json(
        second_events,
        project(RUN, second_events),
        dict(observed),
        expected_model,
        set(in_flight),
        tolerate,
        None,
    )
    assert first == second

    # the same state reached through a checkpoint gives the same verdict and contract
    split = data.draw(st.integers(0, len(first_events)), label="split")
    checkpoint = State.model_validate_json(
        canonical_json(project(RUN, first_events[:split]).model_dump(mode="json"))
    )
    restored = project(RUN, first_events[split:], start=checkpoint)
    assert (
        _contract_json(first_events, restored, observed, expected_model, in_flight, tolerate, None)
        == first
    )

"""The fast paths behind verify and fold are exactly the slow paths they replace.

- ``stored_event_hash(event, text)`` (the hash of a stored row, with the stored payload
  text spliced in) equals ``event.computed_hash()`` (same hash, or the same error) whenever
  the stored text is the payload's canonical JSON, which is what every writer stores; for
  any other text (a rewritten row, even into an equivalent form) it differs, so the row
  fails verification.
- ``canonical_json`` with one shared encoder and ``parse_json`` with one shared decoder
  give what ``json.dumps`` / ``json.loads`` with the same options give.
- ``Continuum.verify`` reads the log once (verify while folding); its report equals the
  two-pass reference (``verify_events``, then the fold) on intact and damaged stores.
"""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from continuum.errors import ContinuumError
from continuum.eventlog.canonical import canonical_json, canonical_json_parsed, parse_json
from continuum.eventlog.chain import VerifyReport, with_violations
from continuum.eventlog.events import Event, EventType, seal, stored_event_hash
from continuum.recovery.verification import index_violations as _index_violations
from continuum.runtime.facade import Continuum
from continuum.state.projection import project
from continuum.types import Origin

text = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
any_text = st.text(max_size=8)  # may hold lone surrogates: canonical bytes refuse those
scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | text
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)
payloads = st.dictionaries(text, json_values, max_size=5)


def _outcome(fn: Any) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except ContinuumError as e:
        return "error", e.code
    except Exception as e:  # the slow path's own exception type must be reproduced
        return "raised", type(e).__name__


def _payload_texts(payload: dict[str, Any]) -> list[str]:
    """Ways a store row could hold this payload: canonical, and several non-canonical."""
    texts = [
        json.dumps(payload),
        json.dumps(payload, indent=1),
        json.dumps(payload, sort_keys=True, separators=(",", ":")),  # ASCII escapes
        json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False),
    ]
    with contextlib.suppress(ContinuumError):
        texts.append(canonical_json(payload))
    return texts


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    payload=payloads,
    event_id=any_text,
    run_id=any_text,
    type_=any_text,
    ts=any_text,
    sequence=st.integers(0, 2**40),
    causer=st.none() | any_text,
    prev=st.none() | any_text,
    source=st.sampled_from(list(Origin)),
)
def test_stored_event_hash_equals_computed_hash_for_every_decoded_event(
    payload: dict[str, Any],
    event_id: str,
    run_id: str,
    type_: str,
    ts: str,
    sequence: int,
    causer: str | None,
    prev: str | None,
    source: Origin,
) -> None:
    # What a store does: the payload is parsed from the stored text (any text, canonical or
    # not); the other fields come from their columns (any text, lone surrogates included).
    canonical = _outcome(lambda: canonical_json(payload))
    for stored in _payload_texts(payload) + [
        '{"big": 1e400}',
        '{"s": "\\ud800"}',
        '{"e": "\\u00e9", "a": 1}',
    ]:
        try:
            decoded = parse_json(stored)
        except ValueError:
            continue  # NaN / Infinity literals: the store reports such a row as malformed
        event = Event(
            event_id=event_id,
            run_id=run_id,
            sequence=sequence,
            type=type_,
            timestamp=ts,
            payload=decoded,
            causer_event_id=causer,
            source=source,
            prev_hash=prev,
            hash="0" * 64,
        )
        fast = _outcome(lambda e=event, t=stored: stored_event_hash(e, t))
        slow = _outcome(event.computed_hash)
        if canonical == ("ok", stored):
            assert fast == slow  # what a writer stored: exactly the definition
        elif fast[0] == "ok" and slow[0] == "ok":
            assert fast[1] != slow[1]  # any other text: the row no longer verifies


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(payload=payloads, sequence=st.integers(1, 10**9), prev=st.none() | text)
def test_a_sealed_event_read_back_from_its_text_verifies_on_the_fast_path(
    payload: dict[str, Any], sequence: int, prev: str | None
) -> None:
    assume(all(not isinstance(v, float) or math.isfinite(v) for v in _leaves(payload)))
    try:
        sealed = seal(
            event_id="evt_1",
            run_id="r",
            sequence=sequence,
            type="t",
            timestamp="2026-01-01T00:00:00.000000Z",
            payload=payload,
            causer_event_id=None,
            source=Origin.LLM,
            prev_hash=prev,
        )
    except ContinuumError:
        return  # a payload canonical JSON refuses never reaches a store
    stored = canonical_json(sealed.payload)
    read_back = Event(**{**sealed.model_dump(), "payload": parse_json(stored)})
    assert stored_event_hash(read_back, stored) == sealed.hash == read_back.computed_hash()
    rewritten = canonical_json({**read_back.payload, "x": 1})  # the stored text is edited
    tampered = Event(**{**read_back.model_dump(), "payload": parse_json(rewritten)})
    assert stored_event_hash(tampered, rewritten) == tampered.computed_hash() != sealed.hash


def test_a_stored_text_no_writer_could_have_stored_never_verifies() -> None:
    # 1e400 parses to infinity, which canonical JSON refuses: no writer stored that text,
    # so whatever hash the row carries, it cannot be the one computed over it.
    infinite = Event(
        event_id="e",
        run_id="r",
        sequence=1,
        type="t",
        timestamp="ts",
        payload=parse_json('{"a": 1e400}'),
        causer_event_id=None,
        source=Origin.HUMAN,
        prev_hash=None,
        hash="0" * 64,
    )
    with pytest.raises(ContinuumError) as slow:
        infinite.computed_hash()
    assert slow.value.code == "usage.non_finite_number"
    assert stored_event_hash(infinite, '{"a": 1e400}') != infinite.hash


def test_a_state_dump_shares_no_container_with_the_state() -> None:
    # fold() mutates model_dump(mode="json") in place instead of a deep copy of it.
    from continuum.state.records import State

    args = {"nested": {"list": [1, {"x": 2}]}}
    record = {
        "action_id": "a",
        "action_key": "k",
        "action_type": "t",
        "dedup_key": "d",
        "operation_key": "o",
        "status": "started",
        "intercepted_sequence": 1,
        "last_sequence": 1,
        "origin": "human",
        "arguments": args,
        "owner": {"pid": 1},
    }
    state = State.model_validate({"run_id": "r", "actions": {"a": record}})
    dump = state.model_dump(mode="json")
    kept = state.actions["a"]
    assert dump["actions"]["a"]["arguments"] is not kept.arguments
    assert dump["actions"]["a"]["arguments"]["nested"] is not kept.arguments["nested"]
    assert dump["actions"]["a"]["owner"] is not kept.owner
    dump["actions"]["a"]["arguments"]["nested"]["list"].append(3)
    assert kept.arguments == args and args["nested"]["list"] == [1, {"x": 2}]


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    return [value]


@given(json_values)
def test_canonical_json_is_json_dumps_with_the_canonical_options(value: Any) -> None:
    def reference() -> str:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )

    ref, ours = _outcome(reference), _outcome(lambda: canonical_json(value))
    if ref[0] == "ok":
        assert ours == ref
    else:
        assert ours[0] != "ok"


@given(
    st.one_of(
        json_values.map(json.dumps),
        st.text(max_size=20),
        st.sampled_from(["NaN", "[Infinity]", "\ufeff{}", " {} ", "{} x", "1e400", ""]),
    )
)
def test_parse_json_is_json_loads_refusing_non_finite_literals(raw: str) -> None:
    def reject(token: str) -> Any:
        raise ValueError(token)

    ref = _outcome(lambda: json.loads(raw, parse_constant=reject))
    ours = _outcome(lambda: parse_json(raw))
    assert ours[0] == ref[0]
    if ref[0] == "ok":
        assert json.dumps(ours[1]) == json.dumps(ref[1])  # NaN-safe equality


# -- verify: one pass against the two-pass reference -----------------------------------


def _reference_verify(rt: Continuum, run_id: str) -> VerifyReport:
    """What verify did before the one-pass read: verify_events, then a second read to fold."""
    report = rt.store.verify_events(run_id)
    extra = []
    if report.ok:
        state = project(run_id, rt.store.iter_events(run_id))
        extra += _index_violations(
            state.model_dump(mode="json"), [r.record for r in rt.store.list_actions(run_id)]
        )
    return with_violations(report, extra)


def _store(tmp_path: Path) -> tuple[Continuum, Path]:
    path = tmp_path / "s.db"
    rt = Continuum.open(str(path))
    rt.start_run("r", "goal", total=6)
    for i in range(6):
        rt.append("r", EventType.WORK_COMPLETED, {"item_id": f"w{i}"})
        if i % 2 == 0:
            a = rt.intercept("r", "send", {"i": i}, key=f"k{i}")
            rt.complete("r", a.action_key, external_id=f"x{i}")
    return rt, path


DAMAGE = {
    "intact": [],
    "edited_payload": ['UPDATE events SET payload = \'{"item_id":"zz"}\' WHERE sequence = 3'],
    "non_canonical_payload": [
        'UPDATE events SET payload = \'{"item_id": "w1"}\' WHERE payload = \'{"item_id":"w1"}\''
    ],
    "deleted_middle_row": ["DELETE FROM events WHERE sequence = 4"],
    "deleted_last_row": ["DELETE FROM events WHERE sequence = (SELECT max(sequence) FROM events)"],
    "row_beyond_head": [
        "INSERT INTO events SELECT run_id, sequence + 100, event_id || 'x', type, "
        "timestamp, payload, causer_event_id, source, prev_hash, hash FROM events "
        "WHERE sequence = 2"
    ],
    "row_at_sequence_zero": [
        "INSERT INTO events SELECT run_id, 0, event_id || 'z', type, "
        "timestamp, payload, causer_event_id, source, prev_hash, hash "
        "FROM events WHERE sequence = 1"
    ],
    "rewound_head": ["UPDATE runs SET head_sequence = head_sequence - 1"],
    "wrong_head_hash": ["UPDATE runs SET head_hash = 'ab' || substr(head_hash, 3)"],
    "edited_index_row": [
        "UPDATE actions SET record = replace(record, '\"completed\"', '\"failed\"') WHERE rowid = 1"
    ],
    "broken_link": [
        "UPDATE events SET prev_hash = 'cd' || substr(prev_hash, 3) WHERE sequence = 5"
    ],
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_one_pass_verify_reports_exactly_what_the_two_pass_reference_does(
    tmp_path: Path, damage: str
) -> None:
    rt, path = _store(tmp_path)
    conn = apsw.Connection(str(path))
    for sql in DAMAGE[damage]:
        conn.execute(sql)
    conn.close()
    ours = rt.verify("r")
    assert ours.model_dump() == _reference_verify(rt, "r").model_dump()
    assert ours.ok == (damage == "intact")  # a payload rewritten equivalently is damage too
    rt.close()


# -- the direct C encoder against the reference encoding -------------------------------


@settings(max_examples=300, deadline=None)
@given(value=json_values)
def test_canonical_json_parsed_equals_canonical_json_of_parsed_values(value: Any) -> None:
    with contextlib.suppress(ContinuumError):
        text = canonical_json(value)
        parsed = parse_json(text)
        assert canonical_json_parsed(parsed) == canonical_json(parsed) == text


def test_canonical_json_parsed_refuses_what_json_cannot_hold() -> None:
    with pytest.raises(ValueError):
        canonical_json_parsed({"x": parse_json("1e400")})
    assert canonical_json_parsed("é\u2028") == canonical_json("é\u2028")  # a bare string

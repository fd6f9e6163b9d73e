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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import hypothesis
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from continuum.errors import ContinuumError
from continuum.eventlog import payloads as payloads_module
from continuum.eventlog.canonical import (
    canonical_json,
    canonical_json_parsed,
    digest,
    digest_texts,
    parse_json,
)
from continuum.eventlog.chain import with_violations
from continuum.eventlog.event_model import Event, checked_event, seal
from continuum.eventlog.events import EventType, RawEvent, known_type, stored_event_hash
from continuum.eventlog.payloads import payload_check, payload_ok, payload_problem
from continuum.eventlog.reports import VerifyReport
from continuum.recovery.verification import index_violations as _index_violations
from continuum.runtime.facade import Continuum
from continuum.state.projection import project
from continuum.store.rows import event_from_raw
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


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    payload=payloads,
    event_id=any_text,
    type_=st.sampled_from([str(t) for t in EventType]) | any_text,
    sequence=st.integers(1, 2**40),
    causer=st.none() | any_text,
    prev=st.none() | any_text,
    source=st.sampled_from(list(Origin)),
)
def test_an_event_built_from_a_checked_row_is_the_one_model_construct_builds(
    payload: dict[str, Any],
    event_id: str,
    type_: str,
    sequence: int,
    causer: str | None,
    prev: str | None,
    source: Origin,
) -> None:
    raw = RawEvent(event_id, "r", sequence, type_, "ts", payload, causer, source, prev, "h")
    fast = event_from_raw(raw)
    fields = {**raw._asdict(), "type": known_type(type_)}
    slow = Event.model_construct(**fields)
    assert fast == slow
    assert type(fast.type) is type(slow.type)
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.model_dump() == slow.model_dump()
    assert fast.model_dump_json() == slow.model_dump_json()
    assert fast.__pydantic_extra__ == slow.__pydantic_extra__
    assert fast.__pydantic_private__ == slow.__pydantic_private__
    assert fast.hashed_fields() == slow.hashed_fields()
    with pytest.raises(ValueError):  # frozen, as the model's own: pydantic's error
        fast.sequence = 0  # type: ignore[misc]


def test_a_checked_event_missing_a_field_is_built_the_model_s_way() -> None:
    # Not every field given: no shortcut, model_construct's defaults (causer None).
    fields: dict[str, Any] = dict(
        event_id="e",
        run_id="r",
        sequence=1,
        type="t",
        timestamp="ts",
        payload={},
        source=Origin.LLM,
        prev_hash=None,
        hash="h",
    )
    built = checked_event(dict(fields))
    assert built == Event.model_construct(**fields)
    assert built.causer_event_id is None
    assert built.model_fields_set == Event.model_construct(**fields).model_fields_set


@given(parts=st.lists(any_text | st.integers() | st.none(), max_size=4))
def test_a_digest_of_texts_is_the_digest_of_their_list(parts: list[Any]) -> None:
    # any_text holds lone surrogates: both refuse them with the same error
    assert _outcome(lambda: digest_texts(*parts)) == _outcome(lambda: digest(list(parts)))


def test_a_digest_of_texts_writes_json_as_the_encoder_does() -> None:
    for parts in (("key", 'a"b\\c', "\n\x7f\u202e é"), (), ("",)):
        assert digest_texts(*parts) == digest(list(parts))
    assert digest_texts("a", "b") != digest_texts("a,b")  # control: the split counts


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


# -- the fused read loop against verified_events -----------------------------------------

_NON_CANONICAL_PAYLOADS = [
    '{"a": 1}',
    ' {"a":1}',
    '{"a":1} ',
    '{"a":1}x',
    '{"a":NaN}',
    '{"a":Infinity}',
    '{"a":1e400}',
    "[1]",
    "1",
    "",
    "\ufeff{}",
    '{"a":"\\ud800"}',
]
odd_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2**64),
    st.floats(allow_nan=False),
    any_text,
    st.binary(max_size=6),
    st.sampled_from([*_NON_CANONICAL_PAYLOADS, *(str(o) for o in Origin), "0" * 64, "r"]),
)
_chain_payloads = st.dictionaries(
    st.sampled_from(["a", "é", 'q"', "b\\"]),
    st.one_of(st.integers(-5, 5), any_text, st.none(), st.lists(st.integers(), max_size=2)),
    max_size=3,
)


def _sealed_rows(
    run_id: str, payloads: list[dict[str, Any]], sources: list[Origin], causers: list[bool]
) -> list[tuple[Any, ...]]:
    """A chain as a store holds it: the columns of EVENT_COLUMNS, payloads canonical."""
    rows: list[tuple[Any, ...]] = []
    prev: str | None = None
    for i, (payload, source, caused) in enumerate(
        zip(payloads, sources, causers, strict=False), start=1
    ):
        try:
            e = seal(
                event_id=f"evt_{i}",
                run_id=run_id,
                sequence=i,
                type="work_completed" if i % 2 else 't\u00e9"',
                timestamp=f"2026-01-01T00:00:{i:02d}.000000Z",
                payload=payload,
                causer_event_id=f"evt_{i - 1}\u2028" if caused else None,
                source=source,
                prev_hash=prev,
            )
        except ContinuumError:
            break  # a lone surrogate: no writer stores it; the chain ends here
        rows.append(
            (
                e.run_id,
                e.sequence,
                e.event_id,
                str(e.type),  # a column reads back as a plain str, not the EventType
                e.timestamp,
                canonical_json(e.payload),
                e.causer_event_id,
                str(e.source),
                e.prev_hash,
                e.hash,
            )
        )
        prev = e.hash
    return rows


def _read_outcome(events: Any) -> tuple[list[Any], tuple[Any, ...] | None]:
    """Every event yielded, then the error that ended the read (code and fields) if any."""
    got: list[Any] = []
    try:
        for e in events:
            got.append(e)
    except ContinuumError as e:
        return got, (type(e).__name__, e.code, e.message, sorted(e.fields.items()))
    except Exception as e:
        return got, (type(e).__name__, str(e))
    return got, None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    run_id=st.sampled_from(["r", "run-é", 'q"\\']),
    payloads=st.lists(_chain_payloads, min_size=0, max_size=6),
    sources=st.lists(st.sampled_from(list(Origin)), min_size=6, max_size=6),
    causers=st.lists(st.booleans(), min_size=6, max_size=6),
    edits=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 9), odd_values), max_size=3),
    reorder=st.sampled_from(["none", "drop", "swap", "duplicate"]),
    head_shift=st.integers(-2, 2),
    start=st.integers(0, 2),
)
def test_fused_read_loop_yields_and_raises_exactly_what_verified_events_does(
    run_id: str,
    payloads: list[dict[str, Any]],
    sources: list[Origin],
    causers: list[bool],
    edits: list[tuple[int, int, Any]],
    reorder: str,
    head_shift: int,
    start: int,
) -> None:
    from continuum.store.core import verified_raw
    from continuum.store.rows import verified_events

    rows = [list(r) for r in _sealed_rows(run_id, payloads, sources, causers)]
    for i, col, value in edits:  # any column of any row: a value of any type
        if i < len(rows):
            rows[i][col] = value
    if len(rows) >= 2:
        if reorder == "drop":
            del rows[1]
        elif reorder == "swap":
            rows[0], rows[1] = rows[1], rows[0]
        elif reorder == "duplicate":
            rows.insert(1, list(rows[0]))
    start = min(start, len(rows))  # read after an earlier event, linked to its hash
    after = start
    prev = rows[start - 1][9] if start else None
    prev = prev if prev is None or isinstance(prev, str) else "x"
    body = [tuple(r) for r in rows[start:]]
    head = max(len(rows) + head_shift, 0)
    kwargs: dict[str, Any] = {"after": after, "prev_hash": prev, "head": head}
    fast = _read_outcome(verified_raw(run_id, body, **kwargs))
    slow = _read_outcome(verified_events(run_id, body, **kwargs))
    assert fast == slow
    assert all(type(a) is type(b) for a, b in zip(fast[0], slow[0], strict=True))


def test_fused_read_loop_takes_an_intact_chain_whole() -> None:
    from continuum.store.core import verified_raw

    rows = _sealed_rows("r", [{"a": i, "é": "\n"} for i in range(5)], list(Origin)[:5], [True] * 5)
    got = list(verified_raw("r", rows, after=0, prev_hash=None, head=5))
    assert [e.sequence for e in got] == [1, 2, 3, 4, 5]
    assert got[-1].hash == rows[-1][9] and got[0].payload == {"a": 0, "é": "\n"}


# -- the index rows: one scan against action_record for every row -----------------------


def _reference_index_row_violations(acc: dict[str, Any], rows: list[tuple[Any, ...]]) -> list[Any]:
    """``index_row_violations`` with every row read by ``action_record`` (no fast path)."""
    from continuum.errors import IntegrityError
    from continuum.eventlog.chain import DamageKind
    from continuum.eventlog.reports import Violation
    from continuum.recovery.verification import _claimed_action
    from continuum.store.rows import action_record

    out: list[Any] = []
    records: list[dict[str, Any]] = []
    unreadable: set[Any] = set()
    for row in rows:
        folded = acc["actions"].get(row[1]) if type(row[1]) is str else None
        try:
            records.append(action_record(row))
        except IntegrityError as e:
            out.append(
                Violation(
                    sequence=folded["last_sequence"] if folded else acc["sequence"],
                    kind=DamageKind.INDEX_MISMATCH,
                    detail=e.message,
                )
            )
            unreadable.update(
                (row[1] if isinstance(row[1], str) else None, _claimed_action(row[2]))
            )
    return out + _index_violations(acc, records, unreadable=unreadable)


_record_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=False, allow_infinity=False),
    text,
)


@settings(max_examples=300, deadline=None)
@given(
    records=st.lists(
        st.fixed_dictionaries(
            {"status": st.sampled_from(["started", "completed"]), "n": _record_values},
            optional={"args": st.dictionaries(text, _record_values, max_size=2)},
        ),
        min_size=0,
        max_size=4,
    ),
    edits=st.lists(
        st.tuples(
            st.integers(0, 3),
            st.sampled_from(
                ["spaces", "lead", "trail", "nan", "bytes", "field", "float", "id", "key", "drop"]
            ),
            _record_values,
        ),
        max_size=3,
    ),
)
def test_index_rows_scan_finds_exactly_what_action_record_and_index_violations_find(
    records: list[dict[str, Any]], edits: list[tuple[int, str, Any]]
) -> None:
    from continuum.recovery.verification import index_row_violations

    actions = {}
    for i, rec in enumerate(records):
        actions[f"a{i}"] = {**rec, "action_id": f"a{i}", "dedup_key": f"d{i}", "last_sequence": i}
    acc = {"actions": actions, "sequence": 9}
    rows: list[Any] = [
        ["r", aid, canonical_json(rec), None, rec["dedup_key"]] for aid, rec in actions.items()
    ]
    for i, how, value in edits:
        if i >= len(rows):
            continue
        row = rows[i]
        if how in ("lead", "trail", "nan", "bytes") and not isinstance(row[2], str):
            continue  # these edit a text
        if how in ("spaces", "field", "float") and row[2] != canonical_json(actions[f"a{i}"]):
            continue  # these rewrite an intact text only
        if how == "spaces":
            row[2] = json.dumps(json.loads(row[2]))
        elif how == "lead":
            row[2] = " " + row[2]
        elif how == "trail":
            row[2] = row[2] + " x"
        elif how == "nan":
            row[2] = row[2][:-1] + ',"z":NaN}'
        elif how == "bytes":
            row[2] = row[2].encode()
        elif how == "field":
            row[2] = canonical_json({**json.loads(row[2]), "n": value})
        elif how == "float":  # an equal number written another way: still equal records
            row[2] = row[2].replace(f'"last_sequence":{i}', f'"last_sequence":{i}.0', 1)
        elif how == "id":
            row[1] = value if value is not None else f"a{i + 1}"
        elif how == "key":
            row[4] = value
        elif how == "drop":
            rows[i] = ["r", row[1], "{", None, row[4]]
    frozen = [tuple(r) for r in rows]
    ours = index_row_violations(acc, frozen)
    ref = _reference_index_row_violations(acc, frozen)
    assert [v.model_dump() for v in ours] == [v.model_dump() for v in ref]


# -- the fold's payload checks: compiled against payload_problem -------------------------

_CONSTANT_WORDS = sorted(
    {
        *payloads_module.REPLAYS,
        *payloads_module.PROVIDERS,
        *payloads_module.CONFIRM_SCOPES,
        *payloads_module.APPROVAL_SCOPES,
        *payloads_module.OBSERVATION_KINDS,
        *payloads_module.RISKS,
        *payloads_module.PERCEPTION_STATUSES,
        *payloads_module.BRANCH_VERDICTS,
        *payloads_module.VIA_CHANNELS,
        "changed",
        "removed",
        "active",
        "retracted",
    }
)
# A value of each kind a check takes, well-formed or nearly: the first that passes a
# field's check makes that field's well-formed value.
_CANDIDATES: list[Any] = [
    "x",
    1,
    True,
    {},
    ["a"],
    {"model": "m"},
    {"tokens": 1},
    {"channel": "terminal"},
    None,
    *_CONSTANT_WORDS,
]
_field_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(),
    st.sampled_from(["", " ", "x", " x ", "\u200b", "\t", *_CONSTANT_WORDS]),
    st.sampled_from([Origin.HUMAN, EventType.RUN_STARTED]),  # a str of a subclass (in memory)
    st.lists(st.sampled_from(["a", "", " ", 1, None, True]), max_size=3),
    st.dictionaries(
        st.sampled_from(
            [*payloads_module.COST_FIELDS, *payloads_module.VERSION_FIELDS]
            + [*payloads_module.VIA_FIELDS, "x", "name", "version", "provider"]
        ),
        st.one_of(
            st.integers(-1, 3),
            st.booleans(),
            st.none(),
            st.sampled_from(["", "m", "terminal", " r", "x" * 201, "static"]),
        ),
        max_size=3,
    ),
)
_CHECKED_TYPES = [
    *(str(t) for t in payloads_module.SCHEMAS),
    str(EventType.DEPENDENCY_DECLARED),
    "a_type_no_schema_knows",
]


def _well_formed(type_: str) -> dict[str, Any]:
    """A payload of ``type_`` that passes: every field of its schema, a value it takes."""
    out: dict[str, Any] = {}
    for field, (_, check) in payloads_module.SCHEMAS.get(type_, {}).items():
        out[field] = next(v for v in _CANDIDATES if check(v) is None)
    if type_ == EventType.DEPENDENCY_DECLARED:
        out["name"] = "dataset"
    if type_ == EventType.PROGRESS_RECORDED:
        out["total"] = 2  # its counters must add up
    return out


def test_every_type_has_a_well_formed_payload_the_compiled_check_passes() -> None:
    for type_ in _CHECKED_TYPES:
        payload = _well_formed(type_)
        assert payload_problem(type_, payload) is None, type_
        assert payload_ok(type_, payload) and payload_check(type_)(payload), type_


@settings(max_examples=3000, deadline=None)
@given(data=st.data())
def test_compiled_payload_checks_say_exactly_what_payload_problem_says(data: Any) -> None:
    type_ = data.draw(st.sampled_from(_CHECKED_TYPES))
    fields = [*payloads_module.SCHEMAS.get(type_, {}), "name", "dependencies", "extra"]
    payload: Any = dict(_well_formed(type_))
    for field in data.draw(st.lists(st.sampled_from(fields), max_size=3)):
        payload.pop(field, None)  # a field left out (a required one, or not)
    edits = st.dictionaries(st.sampled_from(fields), _field_values, max_size=4)
    payload.update(data.draw(edits))  # fields of other types and shapes
    if data.draw(st.integers(0, 30)) == 0:
        payload = data.draw(st.sampled_from([None, [], "x", 1, [payload]]))  # not an object
    expected = payload_problem(type_, payload) is None
    hypothesis.event(f"payload fine: {expected}")
    assert payload_ok(type_, payload) is expected
    assert payload_check(type_)(payload) is expected
    for named in {type_, EventType(type_)} if type_ in set(EventType) else {type_}:
        assert payload_ok(named, payload) is expected  # the type as a str or its enum


# -- the fold against the reference loop ---------------------------------------------------


@contextlib.contextmanager
def _reference_helpers() -> Iterator[None]:
    """The fold's handlers read ``_action`` and ``clip_nested`` from their module: the
    reference ones (as they were before the fast paths) while the reference fold runs."""
    from continuum.state import projection

    saved = projection._action, projection.clip_nested
    projection._action, projection.clip_nested = _ref_action, _ref_clip_nested
    try:
        yield
    finally:
        projection._action, projection.clip_nested = saved


def _reference_fold(acc: dict[str, Any], events: list[Any]) -> dict[str, Any]:
    """``fold_plain`` as it was: each known type's payload judged by ``payload_problem``,
    then the reference handler (``_REFERENCE_HANDLERS``)."""
    with _reference_helpers():
        return _reference_loop(acc, events)


def _reference_loop(acc: dict[str, Any], events: list[Any]) -> dict[str, Any]:
    from continuum.state import projection

    sequence, head_hash = acc["sequence"], acc["head_hash"]
    for event in events:
        if event.sequence <= sequence:
            continue
        handler = _REFERENCE_HANDLERS.get(event.type)
        if handler is None:
            acc["unknown_event_types"] += 1
        elif payload_problem(event.type, event.payload) is not None:
            projection._malformed(acc, event)
        else:
            handler(acc, event, event.payload)
        sequence, head_hash = event.sequence, event.hash
    acc["sequence"], acc["head_hash"] = sequence, head_hash
    progress = acc["progress"]
    if progress["total"] is not None:
        progress["pending"] = max(progress["total"] - progress["completed"] - progress["failed"], 0)
    else:
        progress["pending"] = sum(1 for w in acc["work"].values() if w["status"] == "pending")
    return acc


# The ledger handlers and their helpers as they were before the fast paths (the fold's
# definition of an action record): the fold must give exactly what they give.


def _ref_clip_nested(value: Any) -> Any:
    from continuum.eventlog.limits import clip_deep

    if isinstance(value, dict):
        if not any(isinstance(v, dict | list) for v in value.values()):
            return value
    elif isinstance(value, list):
        if not any(isinstance(v, dict | list) for v in value):
            return value
    else:
        return value
    return clip_deep(value)


def _ref_action(acc: dict[str, Any], e: Any, p: dict[str, Any]) -> dict[str, Any] | None:
    from continuum.state.projection import _malformed, _str

    rec: dict[str, Any] | None = acc["actions"].get(_str(p.get("action_id")) or "")
    if rec is not None:
        rec["last_sequence"] = e.sequence
    else:
        _malformed(acc, e)
    return rec


def _ref_action_intercepted(acc: dict[str, Any], e: Any, p: dict[str, Any]) -> None:
    from continuum.state.projection import _REPLAYS, _STARTED, _str, _usage_row

    replay, owner = p.get("replay"), p.get("owner")
    acc["actions"][p["action_id"]] = {
        "action_id": p["action_id"],
        "action_key": p["action_key"],
        "action_type": p["action_type"],
        "key": _str(p.get("key")),
        "dedup_key": p["dedup_key"],
        "fallback_key": _str(p.get("fallback_key")),
        "arguments": _ref_clip_nested(p.get("arguments")),
        "replay": replay if replay in _REPLAYS else "never",
        "status": _STARTED,
        "attempt": 1,
        "operation_key": p["operation_key"],
        "owner": owner if type(owner) is dict else {},
        "approval_id": _str(p.get("approval_id")),
        "external_id": None,
        "result": None,
        "error": None,
        "note": None,
        "intercepted_sequence": e.sequence,
        "last_sequence": e.sequence,
        "origin": str(e.source),
        "settled_by": None,
        "settled_at": None,
    }
    if "versions" in p:
        acc["actions"][p["action_id"]]["versions"] = dict(p["versions"])
    if "estimate" in p:
        acc["actions"][p["action_id"]]["usage"] = [_usage_row(1, p["estimate"], e)]


def _ref_action_completed(acc: dict[str, Any], e: Any, p: dict[str, Any]) -> None:
    from continuum.state.projection import _COMPLETED, _settle_usage, _str

    if (rec := _ref_action(acc, e, p)) is not None:
        rec.update(
            status=_COMPLETED,
            external_id=_str(p.get("external_id")),
            settled_by=str(e.source),
            settled_at=e.timestamp,
        )
        rec["result"] = _ref_clip_nested(p.get("result"))
        _settle_usage(rec, p, e)


def _reference_handlers() -> dict[str, Any]:
    from continuum.state import projection

    handlers = dict(projection._HANDLERS)
    handlers[str(EventType.ACTION_INTERCEPTED)] = _ref_action_intercepted
    handlers[str(EventType.ACTION_COMPLETED)] = _ref_action_completed
    return handlers


_REFERENCE_HANDLERS = _reference_handlers()

_FOLDED_TYPES = [
    str(EventType.ACTION_INTERCEPTED),
    str(EventType.ACTION_COMPLETED),
    str(EventType.ACTION_FAILED),
    str(EventType.ACTION_RETRIED),
    str(EventType.ACTION_MARKED_UNKNOWN),
    str(EventType.ACTION_RECONCILED),
    str(EventType.ACTION_COMPENSATED),
    str(EventType.RUN_STARTED),
    str(EventType.PROGRESS_RECORDED),
    str(EventType.WORK_ADDED),
    str(EventType.WORK_COMPLETED),
    str(EventType.CHECKPOINTED),
    str(EventType.APPROVAL_REQUESTED),
    str(EventType.APPROVAL_GRANTED),
    "a_type_no_handler_knows",
]
_nested_values = st.recursive(
    _field_values, lambda inner: st.lists(inner, max_size=2), max_leaves=4
) | st.dictionaries(st.sampled_from(["a", "b"]), st.lists(st.integers(), max_size=2), max_size=2)


_LEDGER_TYPES = [str(t) for t in (EventType.ACTION_INTERCEPTED, EventType.ACTION_COMPLETED)]
# The fields a ledger event may carry (each of some types only), and values for them that
# pass a check or nearly do: another type, blank, a str of a subclass, a container.
_LEDGER_FIELDS = [
    "action_id",
    "action_key",
    "action_type",
    "dedup_key",
    "operation_key",
    "key",
    "fallback_key",
    "replay",
    "owner",
    "approval_id",
    "arguments",
    "versions",
    "estimate",
    "actual",
    "external_id",
    "result",
    "error",
    "note",
    "occurred",
    "attempt",
]
_near_values: st.SearchStrategy[Any] = st.sampled_from(
    [None, "", " ", "x", "never", "safe", Origin.HUMAN, 0, 1, -1, True, {}, [], {"tokens": 1}]
)


@st.composite
def _fold_events(draw: Any) -> list[Any]:
    """A log as the fold sees it: events of ledger and other types (intercepts and
    completions most often), most well-formed, many with fields left out, added or of
    another type, their actions drawn from a few ids (a completion of an action never
    intercepted, an action intercepted twice)."""
    from continuum.eventlog.events import RawEvent

    events = []
    for sequence in range(1, draw(st.integers(0, 12)) + 1):
        type_ = draw(st.sampled_from(_LEDGER_TYPES) | st.sampled_from(_FOLDED_TYPES))
        payload = dict(_well_formed(type_))
        payload["action_id"] = draw(st.sampled_from(["a0", "a1", "a2"]))
        if type_ == EventType.ACTION_INTERCEPTED:
            payload.update(arguments=draw(_nested_values), owner=draw(_field_values))
        if type_ == EventType.ACTION_COMPLETED:
            payload["result"] = draw(_nested_values)
        for field in draw(st.lists(st.sampled_from(_LEDGER_FIELDS), max_size=3, unique=True)):
            how = draw(st.sampled_from(["drop", "near", "near", "any"]))
            if how == "drop":
                payload.pop(field, None)
            else:
                payload[field] = draw(_near_values if how == "near" else _field_values)
        events.append(
            RawEvent(
                event_id=f"evt_{sequence}",
                run_id="r",
                sequence=sequence,
                type=type_,
                timestamp=f"2026-01-01T00:00:{sequence:02d}.000000Z",
                payload=payload,
                causer_event_id=None,
                source=draw(st.sampled_from(list(Origin))),
                prev_hash=None,
                hash=f"h{sequence}",
            )
        )
    return events


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=_fold_events(), skip=st.integers(0, 2))
def test_fold_plain_gives_exactly_what_the_reference_fold_gives(
    events: list[Any], skip: int
) -> None:
    from continuum.state.projection import empty_plain, fold_plain

    start = empty_plain("r")
    start["sequence"] = skip  # events a checkpoint already covers are skipped
    ours = fold_plain(json.loads(json.dumps(start)), events)
    reference = _reference_fold(json.loads(json.dumps(start)), events)
    hypothesis.event(f"actions folded: {min(len(reference['actions']), 2)}")
    hypothesis.event(f"malformed events: {min(reference['malformed_events'], 2)}")
    assert json.dumps(ours) == json.dumps(reference)  # equal, keys in the same order


@settings(max_examples=2000, deadline=None)
@given(
    type_=st.sampled_from(_LEDGER_TYPES),
    intercepted_before=st.booleans(),
    data=st.data(),
    source=st.sampled_from(list(Origin)),
)
def test_one_ledger_event_changes_the_state_exactly_as_the_reference_handler_does(
    type_: str, intercepted_before: bool, data: Any, source: Origin
) -> None:
    fields = [*payloads_module.SCHEMAS[type_], "owner", "arguments", "versions"]
    edits = data.draw(
        st.lists(
            st.tuples(
                st.sampled_from(fields),
                st.none() | _near_values | st.sampled_from([Origin.HUMAN]) | _field_values,
            ),
            max_size=3,
        )
    )
    from continuum.eventlog.events import RawEvent
    from continuum.state.projection import empty_plain, fold_plain

    def event(sequence: int, type_: str, payload: dict[str, Any]) -> RawEvent:
        return RawEvent(
            event_id=f"evt_{sequence}",
            run_id="r",
            sequence=sequence,
            type=type_,
            timestamp=f"ts{sequence}",
            payload=payload,
            causer_event_id=None,
            source=source,
            prev_hash=None,
            hash=f"h{sequence}",
        )

    intercept = {**_well_formed(str(EventType.ACTION_INTERCEPTED)), "action_id": "a0"}
    payload = {**_well_formed(type_), "action_id": "a0"}
    for field, value in edits:  # None: the field left out
        if value is None:
            payload.pop(field, None)
        else:
            payload[field] = value
    log = [event(1, str(EventType.ACTION_INTERCEPTED), intercept)] if intercepted_before else []
    log.append(event(2, type_, payload))
    ours = fold_plain(empty_plain("r"), log)
    reference = _reference_fold(empty_plain("r"), log)
    assert json.dumps(ours) == json.dumps(reference)


@st.composite
def _deep_values(draw: Any) -> Any:
    """A value nested to any depth up to past ``MAX_DEPTH``, inside a flat or nested
    container or alone: each wrapper a list or an object, with siblings or not."""
    from continuum.eventlog.limits import MAX_DEPTH

    value: Any = draw(st.none() | st.integers(0, 3) | st.sampled_from(["x", Origin.HUMAN]))
    for _ in range(draw(st.integers(0, MAX_DEPTH + 3))):
        wrapper = draw(st.sampled_from(["list", "dict"]))
        siblings = draw(st.lists(st.integers(0, 3) | st.just({}), max_size=2))
        if wrapper == "list":
            value = [*siblings, value]
        else:
            value = {**{f"s{i}": v for i, v in enumerate(siblings)}, "v": value}
    return value


@settings(max_examples=200, deadline=None)
@given(value=_deep_values())
def test_clip_nested_gives_what_it_gave_the_very_same_object_when_it_gave_that(
    value: Any,
) -> None:
    from continuum.eventlog.limits import clip_nested

    ours, reference = clip_nested(value), _ref_clip_nested(value)
    assert ours == reference
    assert (ours is value) == (reference is value)  # unwalked exactly when it was


_LEDGER_STORE: dict[str, Continuum] = {}
_KEYS = iter(range(10**9))  # a new key per example: a repeat would write nothing


def _ledger_facade(tmp_path_factory: pytest.TempPathFactory) -> Continuum:
    if "cx" not in _LEDGER_STORE:
        cx = Continuum.open(str(tmp_path_factory.mktemp("keys") / "s.db"))
        cx.start_run("r", "random arguments")
        _LEDGER_STORE["cx"] = cx
    return _LEDGER_STORE["cx"]


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(arguments=payloads, result=json_values)
def test_the_ledger_s_payloads_are_stored_as_their_canonical_json(
    tmp_path_factory: pytest.TempPathFactory, arguments: Any, result: Any
) -> None:
    # The intercept and complete payloads are encoded without the walk over their keys
    # (keys_checked): what is stored must still be exactly canonical_json of the payload,
    # or the chain would not verify.
    assume(all(not isinstance(v, float) or math.isfinite(v) for v in _leaves(arguments)))
    assume(all(not isinstance(v, float) or math.isfinite(v) for v in _leaves([result])))
    cx = _ledger_facade(tmp_path_factory)
    before = cx.store.get_head("r").head_sequence
    try:
        r = cx.intercept("r", "send", arguments, key=f"k{next(_KEYS)}")
        if r.proceed:
            cx.complete("r", r.action_key, result=result)
    except ContinuumError:
        return  # refused (a lone surrogate, a limit): nothing of it is stored
    raws = list(cx.store.iter_raw("r", before))
    assert raws
    for raw in raws:
        assert cx.store.event_hash_at("r", raw.sequence) == raw.hash
        assert raw.hash == stored_event_hash(raw, canonical_json(raw.payload))
    assert cx.verify("r").ok

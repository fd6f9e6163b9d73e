"""Chain verification (contract §3): every kind of damage is named, with the first bad
sequence and the last trusted one; nothing is repaired."""

from __future__ import annotations

from typing import Any

import pytest

from continuum.eventlog.chain import (
    ChainVerifier,
    DamageKind,
    check_anchor,
    verify_chain,
    with_violations,
)
from continuum.eventlog.event_model import Event, seal
from continuum.eventlog.reports import VerifyReport, Violation
from continuum.types import Origin

RUN = "run_chain"
TS = "2025-01-01T00:00:00.000000Z"


def _seal(
    sequence: int,
    prev_hash: str | None,
    *,
    run_id: str = RUN,
    payload: dict[str, Any] | None = None,
) -> Event:
    return seal(
        event_id=f"evt_{run_id}_{sequence}",
        run_id=run_id,
        sequence=sequence,
        type="work_completed",
        timestamp=TS,
        payload=payload if payload is not None else {"doc": sequence},
        causer_event_id=None,
        source=Origin.DETERMINISTIC,
        prev_hash=prev_hash,
    )


def build(n: int, *, run_id: str = RUN) -> list[Event]:
    events: list[Event] = []
    for seq in range(1, n + 1):
        events.append(_seal(seq, events[-1].hash if events else None, run_id=run_id))
    return events


def verify(events: list[Event], head: tuple[int, str | None] | None = None) -> VerifyReport:
    head_seq, head_hash = (
        head
        if head is not None
        else ((events[-1].sequence, events[-1].hash) if events else (0, None))
    )
    return verify_chain(RUN, events, head_seq, head_hash)


def kinds(report: VerifyReport) -> list[tuple[int, DamageKind]]:
    return [(v.sequence, v.kind) for v in report.violations]


# -- intact chains ------------------------------------------------------------------------


def test_an_intact_chain_verifies_ok_and_is_trusted_to_its_head() -> None:
    events = build(5)
    report = verify(events)
    assert report.ok
    assert report.violations == []
    assert report.first_violation is None
    assert report.trusted_through == 5
    assert report.events_checked == 5
    assert (report.head_sequence, report.head_hash) == (5, events[-1].hash)


def test_the_first_event_has_no_prev_hash_and_each_later_one_links_to_its_predecessor() -> None:
    events = build(3)
    assert events[0].prev_hash is None
    assert events[1].prev_hash == events[0].hash
    assert events[2].prev_hash == events[1].hash
    assert all(e.computed_hash() == e.hash for e in events)


def test_an_empty_run_with_an_empty_head_is_ok() -> None:
    report = verify_chain(RUN, [], 0, None)
    assert report.ok
    assert report.trusted_through == 0


# -- damage in the log ----------------------------------------------------------------------


def test_an_edited_payload_is_a_hash_mismatch_at_that_sequence() -> None:
    events = build(6)
    events[3] = events[3].model_copy(update={"payload": {"doc": 999}})
    report = verify(events)
    assert not report.ok
    assert report.first_violation is not None
    assert (report.first_violation.sequence, report.first_violation.kind) == (
        4,
        DamageKind.HASH_MISMATCH,
    )
    assert report.trusted_through == 3


def test_a_single_edited_row_is_reported_once_not_as_a_cascade() -> None:
    events = build(7)
    events[2] = events[2].model_copy(update={"payload": {"doc": -1}})
    assert kinds(verify(events)) == [(3, DamageKind.HASH_MISMATCH)]


def test_an_event_resealed_on_a_foreign_predecessor_is_a_broken_link() -> None:
    events = build(5)
    forged = _seal(3, "0" * 64)  # self-consistent hash, wrong link
    events[2] = forged
    report = verify(events)
    assert report.first_violation is not None
    assert (report.first_violation.sequence, report.first_violation.kind) == (
        3,
        DamageKind.BROKEN_LINK,
    )
    assert report.trusted_through == 2


def test_a_missing_event_is_a_sequence_gap_named_at_the_missing_sequence() -> None:
    events = build(6)
    del events[2]  # sequence 3 is gone
    report = verify(events)
    assert report.first_violation is not None
    assert (report.first_violation.sequence, report.first_violation.kind) == (
        3,
        DamageKind.SEQUENCE_GAP,
    )
    assert report.trusted_through == 2
    # events 4..6 exist and still link to each other: one gap, not a gap per later row
    assert kinds(report) == [(3, DamageKind.SEQUENCE_GAP)]


def test_a_row_that_claims_another_run_is_reported_as_wrong_run() -> None:
    events = build(4)
    events[1] = events[1].model_copy(update={"run_id": "run_other"})
    report = verify(events)
    assert report.first_violation is not None
    assert (report.first_violation.sequence, report.first_violation.kind) == (
        2,
        DamageKind.WRONG_RUN,
    )
    assert report.trusted_through == 1


def test_a_chain_sealed_for_another_run_is_wrong_run_from_its_first_event() -> None:
    events = build(3, run_id="run_elsewhere")
    report = verify_chain(RUN, events, 3, events[-1].hash)
    assert report.first_violation is not None
    assert report.first_violation.kind == DamageKind.WRONG_RUN
    assert report.first_violation.sequence == 1
    assert report.trusted_through == 0


def test_an_edited_stored_hash_is_a_hash_mismatch() -> None:
    events = build(3)
    events[1] = events[1].model_copy(update={"hash": "f" * 64})
    report = verify(events, head=(3, events[2].hash))
    assert report.first_violation is not None
    assert (report.first_violation.sequence, report.first_violation.kind) == (
        2,
        DamageKind.HASH_MISMATCH,
    )


def test_only_the_first_damage_decides_trusted_through() -> None:
    events = build(8)
    events[2] = events[2].model_copy(update={"payload": {"doc": "x"}})
    events[5] = events[5].model_copy(update={"payload": {"doc": "y"}})
    report = verify(events)
    assert kinds(report) == [(3, DamageKind.HASH_MISMATCH), (6, DamageKind.HASH_MISMATCH)]
    assert report.trusted_through == 2


def test_a_malformed_row_is_reported_and_breaks_trust() -> None:
    events = build(4)
    verifier = ChainVerifier(RUN)
    verifier.feed(events[0])
    verifier.add_malformed(2, "cannot decode")
    report = verifier.finish(2, events[1].hash)
    assert report.first_violation is not None
    assert (report.first_violation.sequence, report.first_violation.kind) == (
        2,
        DamageKind.MALFORMED,
    )
    assert report.trusted_through == 1


def test_feed_returns_the_violation_it_found_and_none_for_a_good_event() -> None:
    events = build(2)
    verifier = ChainVerifier(RUN)
    assert verifier.feed(events[0]) is None
    bad = events[1].model_copy(update={"timestamp": "2030-01-01T00:00:00.000000Z"})
    violation = verifier.feed(bad)
    assert violation is not None and violation.kind == DamageKind.HASH_MISMATCH
    assert verifier.broken


# -- damage against the head --------------------------------------------------------------


def test_a_truncated_tail_is_detected_against_the_head() -> None:
    events = build(6)
    head = (6, events[-1].hash)
    report = verify(events[:4], head=head)
    assert not report.ok
    assert kinds(report) == [(5, DamageKind.TRUNCATED)]
    assert report.trusted_through == 4


def test_a_log_with_every_event_gone_is_truncated_from_sequence_one() -> None:
    events = build(3)
    report = verify_chain(RUN, [], 3, events[-1].hash)
    assert kinds(report) == [(1, DamageKind.TRUNCATED)]
    assert report.trusted_through == 0


def test_a_head_behind_the_log_is_a_head_mismatch() -> None:
    events = build(5)
    report = verify(events, head=(3, events[2].hash))
    assert not report.ok
    assert report.first_violation is not None
    assert report.first_violation.kind == DamageKind.HEAD_MISMATCH
    assert report.first_violation.sequence == 3
    assert report.trusted_through < report.first_violation.sequence


def test_a_resealed_last_event_is_caught_by_the_head_hash() -> None:
    events = build(5)
    original_head = (5, events[-1].hash)
    events[-1] = _seal(5, events[3].hash, payload={"doc": "forged"})  # internally consistent
    report = verify(events, head=original_head)
    assert kinds(report) == [(5, DamageKind.HEAD_MISMATCH)]
    assert report.trusted_through == 4


def test_events_without_a_head_record_are_a_head_mismatch() -> None:
    events = build(2)
    report = verify(events, head=(0, None))
    assert report.first_violation is not None
    assert report.first_violation.kind == DamageKind.HEAD_MISMATCH
    assert report.trusted_through == 0


# -- anchors ----------------------------------------------------------------------------------


def test_an_anchor_still_in_the_chain_is_ok() -> None:
    events = build(5)
    assert check_anchor(3, events[2].hash, events[2].hash, 5) is None


def test_an_anchor_beyond_the_end_of_the_log_reports_truncation() -> None:
    events = build(5)
    violation = check_anchor(7, "a" * 64, None, 5)
    assert violation is not None
    assert (violation.sequence, violation.kind) == (7, DamageKind.TRUNCATED)
    # a head that was cut back along with the log still cannot hide it
    violation = check_anchor(5, events[4].hash, events[4].hash, 4)
    assert violation is not None and violation.kind == DamageKind.TRUNCATED


def test_an_anchor_whose_hash_differs_reports_anchor_mismatch() -> None:
    events = build(5)
    violation = check_anchor(3, events[2].hash, events[1].hash, 5)
    assert violation is not None
    assert (violation.sequence, violation.kind) == (3, DamageKind.ANCHOR_MISMATCH)


# -- further violations ---------------------------------------------------------------------


def test_with_violations_adds_findings_marks_not_ok_and_lowers_trust() -> None:
    events = build(6)
    report = verify(events)
    extra = [Violation(sequence=4, kind=DamageKind.INDEX_MISMATCH, detail="index row differs")]
    combined = with_violations(report, extra)
    assert not combined.ok
    assert kinds(combined) == [(4, DamageKind.INDEX_MISMATCH)]
    assert combined.trusted_through == 3
    assert report.ok  # the original report is left as it was


def test_with_violations_keeps_violations_ordered_by_sequence() -> None:
    events = build(6)
    events[4] = events[4].model_copy(update={"payload": {"doc": 0}})
    report = verify(events)
    combined = with_violations(
        report,
        [Violation(sequence=2, kind=DamageKind.CHECKPOINT_MISMATCH, detail="bad checkpoint")],
    )
    assert kinds(combined) == [(2, DamageKind.CHECKPOINT_MISMATCH), (5, DamageKind.HASH_MISMATCH)]
    assert combined.trusted_through == 1


def test_with_no_further_violations_the_report_is_unchanged() -> None:
    report = verify(build(3))
    assert with_violations(report, []) == report


@pytest.mark.parametrize(
    "field,value",
    [
        ("type", "run_aborted"),
        ("timestamp", "2031-02-03T04:05:06.000007Z"),
        ("source", Origin.HUMAN),
        ("event_id", "evt_forged"),
        ("causer_event_id", "evt_x"),
        ("prev_hash", "1" * 64),
    ],
)
def test_editing_any_hashed_field_is_detected_as_a_hash_mismatch(field: str, value: Any) -> None:
    events = build(4)
    events[1] = events[1].model_copy(update={field: value})
    report = verify(events)
    assert report.first_violation is not None
    assert (report.first_violation.sequence, report.first_violation.kind) == (
        2,
        DamageKind.HASH_MISMATCH,
    )

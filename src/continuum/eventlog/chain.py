"""Chain verification (pure): recompute every hash, check sequence, links and head.

Verification names the first bad sequence and the kind of damage and reports the last
trusted sequence. It never repairs anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from continuum.eventlog.events import EventLike, event_hash, stored_event_hash
from continuum.types import DamageKind as DamageKind

if TYPE_CHECKING:
    from continuum.eventlog.reports import VerifyReport, Violation


class ChainVerifier:
    """Incremental verifier: feed events in order, then ``finish`` against the head."""

    def __init__(self, run_id: str, *, after: int = 0, prev_hash: str | None = None) -> None:
        """``after``/``prev_hash``: the log starts after an archived prefix (the sequence
        and hash its archive marker records), else at 1 with no previous hash."""
        self.run_id = run_id
        self.archived_through = after
        self.expected_sequence = after + 1
        self.prev_hash: str | None = prev_hash
        self.trusted_through = after
        self.count = 0
        self.violations: list[Violation] = []

    @property
    def broken(self) -> bool:
        return bool(self.violations)

    def add_malformed(self, sequence: int, detail: str) -> None:
        self._violate(sequence, DamageKind.MALFORMED, detail)

    def feed(self, event: EventLike, payload_text: str | None = None) -> Violation | None:
        """Check the next event. A store passes the payload text it decoded the event's
        payload from: the hash is then recomputed without re-encoding the payload (same
        result, see ``stored_event_hash``)."""
        self.count += 1
        if event.run_id != self.run_id:
            return self._violate(
                event.sequence, DamageKind.WRONG_RUN, f"row claims run {event.run_id!r}", event
            )
        if event.sequence != self.expected_sequence:
            return self._violate(
                self.expected_sequence,  # the first position whose row is not the right one
                DamageKind.SEQUENCE_GAP,
                f"expected sequence {self.expected_sequence}, found {event.sequence}",
                event,
            )
        computed = (
            event_hash(event) if payload_text is None else stored_event_hash(event, payload_text)
        )
        if computed != event.hash:
            return self._violate(
                event.sequence,
                DamageKind.HASH_MISMATCH,
                "stored hash does not match the content",
                event,
            )
        if event.prev_hash != self.prev_hash:
            return self._violate(
                event.sequence,
                DamageKind.BROKEN_LINK,
                "prev_hash does not match the previous event's hash",
                event,
            )
        self.expected_sequence += 1
        self.prev_hash = event.hash
        if not self.violations:
            self.trusted_through = event.sequence
        return None

    def _violate(
        self, sequence: int, kind: DamageKind, detail: str, event: EventLike | None = None
    ) -> Violation:
        from continuum.eventlog.reports import Violation

        v = Violation(sequence=sequence, kind=kind, detail=detail)
        self.violations.append(v)
        # After damage the rest cannot be trusted, but keep following the stored sequence
        # and links so a single damaged row is reported once, not as a cascade.
        if event is None:
            self.expected_sequence = sequence + 1
        else:
            self.expected_sequence = max(self.expected_sequence, event.sequence + 1)
            self.prev_hash = event.hash
        return v

    def finish(self, head_sequence: int, head_hash: str | None) -> VerifyReport:
        from continuum.eventlog.reports import VerifyReport, Violation

        last_seq = self.expected_sequence - 1
        if head_sequence > last_seq and not self.violations:
            self.violations.append(
                Violation(
                    sequence=last_seq + 1,
                    kind=DamageKind.TRUNCATED,
                    detail=f"head says {head_sequence} events, log ends at {last_seq}",
                )
            )
        elif head_sequence < last_seq or (
            head_sequence == last_seq
            and head_sequence > 0
            and head_hash != self.prev_hash
            and not self.violations
        ):
            bad = min(head_sequence, last_seq) or 1
            self.violations.append(
                Violation(
                    sequence=bad,
                    kind=DamageKind.HEAD_MISMATCH,
                    detail="the run's head record does not match the last event",
                )
            )
            # Nothing at or after the first bad sequence is trusted.
            self.trusted_through = min(self.trusted_through, bad - 1)
        return VerifyReport(
            run_id=self.run_id,
            ok=not self.violations,
            events_checked=self.count,
            trusted_through=self.trusted_through,
            head_sequence=head_sequence,
            head_hash=head_hash,
            violations=list(self.violations),
            archived_through=self.archived_through,
        )


def verify_chain(
    run_id: str, events: Iterable[EventLike], head_sequence: int, head_hash: str | None
) -> VerifyReport:
    verifier = ChainVerifier(run_id)
    for event in events:
        verifier.feed(event)
    return verifier.finish(head_sequence, head_hash)


def check_anchor(
    anchor_seq: int, anchor_hash: str, stored_hash: str | None, last_sequence: int
) -> Violation | None:
    """An anchor SEQ:HASH exported earlier must still be in the chain, unchanged."""
    from continuum.eventlog.reports import Violation

    if stored_hash is None or anchor_seq > last_sequence:
        return Violation(
            sequence=anchor_seq,
            kind=DamageKind.TRUNCATED,
            detail=f"the anchor expects event {anchor_seq}; the log ends at {last_sequence}",
        )
    if stored_hash != anchor_hash:
        return Violation(
            sequence=anchor_seq,
            kind=DamageKind.ANCHOR_MISMATCH,
            detail="the event at the anchor's sequence has a different hash",
        )
    return None


def with_violations(report: VerifyReport, extra: list[Violation]) -> VerifyReport:
    """The same report with further violations found by other checks."""
    if not extra:
        return report
    violations = sorted([*report.violations, *extra], key=lambda v: v.sequence)
    trusted = min([report.trusted_through, *(v.sequence - 1 for v in extra)])
    return report.model_copy(
        update={"ok": False, "violations": violations, "trusted_through": max(trusted, 0)}
    )

"""What an archive marker says (pure): the ``history_archived`` event.

``continuum archive RUN --before SEQ --to FILE`` moves the events before ``SEQ`` into an
archive file and, in the same transaction that removes them from the live log, appends a
``history_archived`` event. That marker is sealed in the chain like every event, and it
records where the live log now starts: the last archived sequence and its hash (the
``prev_hash`` the first live event carries), the first sequence of that archive file, and
the SHA-256 of the file's bytes.

So the live log verifies on its own (the verifier starts from the marker's hash instead
of from nothing), and nothing is hidden by it: the marker's hash is covered by every
later event and by any anchor taken after it; the archived head hash it records is the
one the first live event links to; and ``continuum verify RUN --archive FILE`` checks
the archived events end to end against it.
"""

from __future__ import annotations

from typing import NamedTuple

from continuum.eventlog.events import EventLike, EventType
from continuum.eventlog.payloads import payload_problem


class ArchiveBase(NamedTuple):
    """Where a run's live log starts, from its latest ``history_archived`` event."""

    through: int  # the last archived sequence: the live log starts at through + 1
    through_hash: str  # its hash: the prev_hash of the first live event
    from_sequence: int  # the first sequence in the archive file this marker names
    archive_sha256: str  # SHA-256 of that file's bytes
    archive_name: str | None  # the file's name when it was written (a hint, not trusted)
    marker_sequence: int  # where the marker itself is in the chain
    marker_hash: str


def archive_base_of(event: EventLike) -> ArchiveBase | None:
    """The archive base an event records, or None if it is not a well-formed marker."""
    if event.type != EventType.HISTORY_ARCHIVED:
        return None
    p = event.payload
    if payload_problem(str(event.type), p) is not None:
        return None
    through, start = p["through_sequence"], p["from_sequence"]
    if not (1 <= start <= through < event.sequence):
        return None  # a marker can only name events before itself
    name = p.get("archive_name")
    return ArchiveBase(
        through=through,
        through_hash=p["through_hash"],
        from_sequence=start,
        archive_sha256=p["archive_sha256"],
        archive_name=name if isinstance(name, str) else None,
        marker_sequence=event.sequence,
        marker_hash=event.hash,
    )


def marker_payload(
    *,
    from_sequence: int,
    through: int,
    through_hash: str,
    archive_sha256: str,
    events: int,
    checkpoints: int,
    archive_name: str,
) -> dict[str, object]:
    """The payload of the marker for one archive file."""
    return {
        "from_sequence": from_sequence,
        "through_sequence": through,
        "through_hash": through_hash,
        "archive_sha256": archive_sha256,
        "events": events,
        "checkpoints": checkpoints,
        "archive_name": archive_name,
    }

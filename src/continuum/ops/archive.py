"""Archiving old history: move a verified prefix of a run's log into a file, keep a marker.

``archive_run`` (``continuum archive RUN --before SEQ --to FILE``):

1. verifies the run as it is (chain, action index, checkpoints);
2. writes the events before ``SEQ`` (exactly as sealed, one JSON line each) and the
   checkpoints they sealed to a new private file, fsyncs it and gives it its name
   (``archive_file.py``: the format);
3. reads the file back from disk and verifies it end to end;
4. in one transaction: appends the ``history_archived`` marker (``archived.py``: the
   last archived sequence and hash, the file's SHA-256), takes a checkpoint through it
   (so no state before the archive point is ever needed to resume), and removes the
   archived events and their checkpoints from the live log.

The action index is untouched: a settled action stays answerable (an intercept of its
key is refused as done) however old it is. A crash before step 4 commits leaves the live
log exactly as it was (and the file, unreferenced); after it, the archive is complete.

``verify_archived`` checks a run whose log starts after an archive marker: the live
chain from the marker's hash, and with the archive files the whole history from event 1,
each file against the marker that recorded it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from continuum.errors import HistoryArchivedError, IntegrityError, UsageError
from continuum.eventlog.archived import ArchiveBase, archive_base_of, marker_payload
from continuum.eventlog.chain import DamageKind, check_anchor, with_violations
from continuum.eventlog.events import EventType, RawEvent
from continuum.eventlog.reports import VerifyReport, Violation
from continuum.faults import fault_point
from continuum.ops.archive_file import ArchiveFile, Progress, archive_error, write_archive
from continuum.recovery.checkpoints import lean_state, seal_checkpoint
from continuum.recovery.verification import (
    approval_index_violations,
    checkpoint_violations,
    index_row_violations,
    verify_run,
)
from continuum.state.projection import empty_plain, fold_plain
from continuum.state.records import Approval
from continuum.store import Storage
from continuum.store.rows import action_record
from continuum.types import Origin
from continuum.untrusted import as_typed, quoted


class ArchiveResult(BaseModel):
    """What ``archive_run`` did."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    file: str
    sha256: str
    from_sequence: int
    through_sequence: int
    events: int
    checkpoints: int
    marker_sequence: int
    checkpoint_sequence: int  # the checkpoint taken through the marker
    live_events: int  # rows left in the live log
    locked_seconds: float  # how long the final transaction held the run's write lock


def archive_run(
    store: Storage,
    run_id: str,
    before: int,
    dest: Path,
    *,
    origin: Origin,
    progress: Progress | None = None,
) -> ArchiveResult:
    """Move events ``< before`` of ``run_id`` into the new file ``dest`` (module docstring)."""
    run = store.get_run(run_id)
    base = store.archive_base(run_id)
    start = base.through if base is not None else 0
    if type(before) is not int or not start + 2 <= before <= run.head_sequence + 1:
        low = start + 2
        raise UsageError(
            f"--before {before!r} leaves nothing to archive or is past the head: "
            f"run {run_id!r} can archive events {start + 1}..N-1 for N from {low} "
            f"to {run.head_sequence + 1}",
            code="usage.bad_sequence",
            hint=f"pass --before between {low} and {run.head_sequence + 1}"
            + (f" (events 1..{start} are archived already)" if start else ""),
            run_id=run_id,
        )
    report = verify_archived(store, run_id, base) if base is not None else verify_run(store, run_id)
    if not report.ok:
        v = report.violations[0]
        raise IntegrityError(
            f"run {run_id!r} is damaged at sequence {v.sequence} ({v.kind}); "
            "a damaged log is not archived",
            code=f"integrity.{v.kind}",
            hint=f"run `continuum verify {run_id}`; nothing was written",
            run_id=run_id,
        )
    through = before - 1
    through_hash = store.event_hash_at(run_id, through)
    if through_hash is None:
        raise IntegrityError(
            f"event {through} of run {run_id!r} is missing",
            code="integrity.truncated",
            hint=f"run `continuum verify {run_id}`",
        )
    prev = base.through_hash if base is not None else None
    events, checkpoints = write_archive(
        store,
        run_id,
        dest,
        start=start,
        prev=prev,
        through=through,
        through_hash=through_hash,
        progress=progress,
    )
    fault_point("archive_file_written")
    written = ArchiveFile.open(dest).scan()  # read back from disk, every check
    if (
        written.run_id,
        written.from_sequence,
        written.through,
        written.through_hash,
        written.prev_hash,
        written.events_read,
    ) != (run_id, start + 1, through, through_hash, prev, events):
        raise archive_error(dest, "it does not read back as written", "tampered")
    locked = time.monotonic()
    with store.write(run_id) as tx:
        now = store.archive_base(run_id)
        if (now.through if now is not None else 0) != start:
            raise UsageError(
                f"run {run_id!r} was archived by someone else meanwhile; "
                f"{as_typed(str(dest))} is not used",
                code="usage.concurrent_archive",
                hint="run `continuum verify RUN` and archive again if needed",
            )
        if store.event_hash_at(run_id, through) != through_hash:
            raise IntegrityError(
                f"event {through} of run {run_id!r} changed while it was "
                "archived; nothing was removed",
                code="integrity.hash_mismatch",
                hint=f"run `continuum verify {run_id}`",
            )
        marker = tx.append(
            EventType.HISTORY_ARCHIVED,
            marker_payload(
                from_sequence=start + 1,
                through=through,
                through_hash=through_hash,
                archive_sha256=written.sha256,
                events=events,
                checkpoints=checkpoints,
                archive_name=dest.name,
            ),
            source=origin,
        )
        state, _, _ = lean_state(store, run_id)  # through the marker, inside the transaction
        cp_event, _ = seal_checkpoint(
            tx, run_id, state, f"history through {through} archived", origin
        )
        removed, _ = tx.drop_archived(marker)
        if removed != through - start:
            raise IntegrityError(
                f"run {run_id!r} holds {removed} events before {before}, not "
                f"{through - start}; nothing was removed",
                code="integrity.sequence_gap",
                hint=f"run `continuum verify {run_id}`",
            )
        fault_point("archive_before_commit")
    locked = time.monotonic() - locked
    return ArchiveResult(
        run_id=run_id,
        file=str(dest),
        sha256=written.sha256,
        from_sequence=start + 1,
        through_sequence=through,
        events=events,
        checkpoints=checkpoints,
        marker_sequence=marker.sequence,
        checkpoint_sequence=cp_event.sequence,
        live_events=store.count_events(run_id),
        locked_seconds=round(locked, 3),
    )


# -- verifying a run that has archived history ---------------------------------------------------


def verify_archived(
    store: Storage,
    run_id: str,
    base: ArchiveBase,
    archives: Sequence[Path] = (),
    *,
    anchor: tuple[int, str] | None = None,
) -> VerifyReport:
    """Verify a run whose live log starts after ``base`` (its latest archive marker).

    Without ``archives``: the live chain from the marker's hash, the head, every
    checkpoint, and the action index as far as the live log can vouch for it (an action
    intercepted in the live log exactly; an archived one's last transition). With them
    (every archive file of the run, in any order): each file end to end and against the
    marker that recorded it, then the whole history from event 1 folded and the action
    and approval indexes compared with it exactly. ``anchor`` (SEQ, HASH) must be in the chain; a sequence in
    the archived part needs the archive files.
    """
    report = store.verify_events(run_id)
    if not report.ok:
        return report
    files = _ordered(run_id, base, archives)
    touched: dict[str, int] = {}  # action id -> last live sequence that touched it
    markers: dict[int, tuple[str, int]] = {}  # through -> (archive sha256, marker sequence)
    found: dict[int, str] = {}

    def tap(events: Iterable[RawEvent], live: bool) -> Iterator[RawEvent]:
        for e in events:
            if anchor is not None and e.sequence == anchor[0]:
                found[e.sequence] = e.hash
            if e.type == EventType.HISTORY_ARCHIVED:
                m = archive_base_of(e)
                if m is not None:
                    markers[m.through] = (m.archive_sha256, m.marker_sequence)
            if live and e.type.startswith("action_"):
                action_id = e.payload.get("action_id")
                if isinstance(action_id, str):
                    touched[action_id] = e.sequence
            yield e

    def history() -> Iterator[RawEvent]:
        for a in files:
            yield from tap(a.events(), False)
        yield from tap(store.iter_raw(run_id, base.through, prev_hash=base.through_hash), True)

    acc = fold_plain(empty_plain(run_id), history())
    for a in files:
        sha, where = markers.get(a.through, ("", 0))
        if sha != a.sha256:
            raise archive_error(
                a.path,
                f"it is not the file the marker at sequence {where} "
                f"recorded for events {a.from_sequence}..{a.through}"
                if where
                else f"no marker in the log records events {a.from_sequence}..{a.through}",
                "tampered" if where else "mismatch",
            )
    extra: list[Violation] = []
    if anchor is not None:
        seq, hash_ = anchor
        if seq <= base.through and not files:
            raise UsageError(
                f"the anchor's event {seq} of run {run_id!r} is archived (events 1..{base.through}"
                f" are in {quoted(base.archive_name)} and earlier archives)",
                code="usage.anchor_archived",
                hint=f"pass every archive file: continuum verify {run_id} --archive FILE ...",
            )
        stored = found.get(seq) if seq <= base.through else store.event_hash_at(run_id, seq)
        v = check_anchor(seq, hash_, stored, report.head_sequence)
        if v is not None:
            extra.append(v)
    rows = store.action_index_rows(run_id)
    if files:
        extra += index_row_violations(acc, rows)
        extra += approval_index_violations(acc, store.approval_index_rows(run_id))
        report = report.model_copy(
            update={"events_checked": report.events_checked + sum(a.events_read for a in files)}
        )
    else:
        extra += _partial_index_violations(acc, rows, base, touched)
        extra += _partial_approval_violations(store, run_id, acc)
    extra += checkpoint_violations(store, run_id, acc["sequence"])
    return with_violations(report, extra)


def _ordered(run_id: str, base: ArchiveBase, archives: Sequence[Path]) -> list[ArchiveFile]:
    """The archive files, opened, in sequence order, checked to cover 1..base.through."""
    if not archives:
        return []
    files = sorted((ArchiveFile.open(Path(p)) for p in archives), key=lambda a: a.from_sequence)
    expected, link = 1, None
    for a in files:
        if a.run_id != run_id:
            raise archive_error(
                a.path, f"it holds run {quoted(a.run_id)}, not {quoted(run_id)}", "mismatch"
            )
        if a.from_sequence != expected:
            raise archive_error(
                a.path,
                f"it starts at event {a.from_sequence}; the history "
                f"needs event {expected} next (an archive file is missing or "
                "given twice)",
                "mismatch",
            )
        if a.prev_hash != link:
            raise archive_error(
                a.path,
                f"its first event does not link to event {expected - 1} of the file before it",
                "tampered",
            )
        expected, link = a.through + 1, a.through_hash
    last = files[-1]
    if last.through != base.through or last.through_hash != base.through_hash:
        raise archive_error(
            last.path,
            f"the files end at event {last.through}; the live log "
            f"starts after {base.through} (an archive file is missing)",
            "mismatch",
        )
    return files


def _partial_index_violations(
    acc: dict[str, Any], rows: list[tuple[Any, ...]], base: ArchiveBase, touched: dict[str, int]
) -> list[Violation]:
    """The action index against a fold of the live log only: an action intercepted there
    must match exactly; an archived one's row must end at its last live transition (or
    before the archive point if the live log never touched it)."""
    live = {k: v for k, v in acc["actions"].items() if v["intercepted_sequence"] > base.through}
    out: list[Violation] = []
    seen: set[str] = set()
    for row in rows:
        try:
            record = action_record(row)
        except IntegrityError as e:
            out.append(
                Violation(
                    sequence=acc["sequence"], kind=DamageKind.INDEX_MISMATCH, detail=e.message
                )
            )
            continue
        action_id = record["action_id"]
        seen.add(action_id)
        intercepted = record.get("intercepted_sequence")
        if type(intercepted) is int and intercepted > base.through:
            if live.get(action_id) != record:
                out.append(_index_violation(live.get(action_id), acc, action_id))
            continue
        last = touched.get(action_id, 0)
        expected_last = last if last else None
        got = record.get("last_sequence")
        if type(got) is not int or (got != expected_last if expected_last else got > base.through):
            out.append(
                _index_violation(
                    None, acc, action_id, "its last transition is not the one the log records"
                )
            )
    for action_id, folded in live.items():
        if action_id not in seen:
            out.append(
                Violation(
                    sequence=folded["last_sequence"],
                    kind=DamageKind.INDEX_MISMATCH,
                    detail=f"action {action_id} is in the log but not in the index",
                )
            )
    return out


def _approval_json(record: dict[str, Any]) -> Any:
    try:
        return Approval.model_validate(record).model_dump(mode="json")
    except ValidationError:
        return None


def _partial_approval_violations(
    store: Storage, run_id: str, acc: dict[str, Any]
) -> list[Violation]:
    """The approval index against the state the live log vouches for: the checkpoint the
    archive took (its hash sealed in the live log) plus the live events after it. Approvals
    requested or decided in the archived part are held by that checkpoint, so an edited
    row of one is caught without the archive files. A checkpoint that fails its hash is
    reported by ``checkpoint_violations``; the comparison then needs the archive files."""
    try:
        state, cp_sequence, _ = lean_state(store, run_id)
    except (HistoryArchivedError, IntegrityError):
        return []
    if cp_sequence is None:
        return []
    folded = {k: a.model_dump(mode="json") for k, a in state.approvals.items()}
    return approval_index_violations(
        {"approvals": folded, "sequence": acc["sequence"]},
        store.approval_index_rows(run_id),
        normalize=_approval_json,
    )


def _index_violation(
    folded: dict[str, Any] | None,
    acc: dict[str, Any],
    action_id: str,
    why: str = "disagrees with the log",
) -> Violation:
    return Violation(
        sequence=folded["last_sequence"] if folded else acc["sequence"],
        kind=DamageKind.INDEX_MISMATCH,
        detail=f"action index row {action_id} {why}",
    )

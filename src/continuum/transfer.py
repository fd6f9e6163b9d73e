"""Move runs between stores of any backend: export to JSONL, import with the chain intact.

The file is one JSON document per line (canonical JSON, so the same data gives the same
bytes from every backend)::

    {"kind":"header","format":"continuum-export","version":1,...}
    {"kind":"run","run":{...}}                   then, for that run,
    {"kind":"event","event":{...}}               every event exactly as sealed, in order
    {"kind":"checkpoint","checkpoint":{...}}     its checkpoints, oldest first
    {"kind":"end","runs":N,"events":M,"checkpoints":K}

Export reads every event through the store's verifying reader: a damaged run is not
exported. Import checks everything before writing anything (each chain against its head,
each checkpoint against its hash and its sealing event, the run status against the log,
the trailer's counts), rebuilds the action index from the events with the fold's own
handler, then hands all runs to ``Storage.import_runs``: one transaction, re-verified
inside it, refused as a whole if any run already exists.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, TextIO

from pydantic import BaseModel, ConfigDict, ValidationError

from continuum.canonical import canonical_json, digest, parse_json
from continuum.chain import verify_chain
from continuum.errors import IntegrityError, UsageError
from continuum.events import LIFECYCLE_STATUS, Event, EventType
from continuum.projection import APPROVAL_TYPES, apply_action_event, apply_approval_event
from continuum.store import ActionRow, CheckpointRow, RunExport, RunInfo, Storage
from continuum.store.base import ApprovalRow, format_timestamp
from continuum.types import RunStatus

FORMAT = "continuum-export"
FORMAT_VERSION = 1


class TransferSummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    runs: list[str]
    events: int
    checkpoints: int
    heads: dict[str, str]  # run_id -> "SEQ:HASH" (an anchor for each run moved)


def _line(kind: str, **fields: Any) -> str:
    return canonical_json({"kind": kind, **fields}) + "\n"


def export_runs(
    store: Storage, out: TextIO, run_ids: Iterable[str] | None = None
) -> TransferSummary:
    """Write ``run_ids`` (default: every run) to ``out``; refuses a run that fails to verify."""
    runs = [store.get_run(r) for r in run_ids] if run_ids is not None else store.list_runs()
    seen: set[str] = set()
    out.write(
        _line(
            "header",
            format=FORMAT,
            version=FORMAT_VERSION,
            source=store.url,
            exported_at=format_timestamp(datetime.now(UTC)),
            runs=[r.run_id for r in runs],
        )
    )
    events = checkpoints = 0
    heads: dict[str, str] = {}
    for run in runs:
        if run.run_id in seen:
            continue
        seen.add(run.run_id)
        out.write(_line("run", run=run.model_dump(mode="json")))
        for event in store.iter_events(run.run_id):  # verified as read: damage raises
            out.write(_line("event", event=event.model_dump(mode="json")))
            events += 1
        for cp in reversed(store.list_checkpoints(run.run_id)):
            out.write(_line("checkpoint", checkpoint=cp.model_dump(mode="json")))
            checkpoints += 1
        heads[run.run_id] = f"{run.head_sequence}:{run.head_hash}"
    out.write(_line("end", runs=len(seen), events=events, checkpoints=checkpoints))
    return TransferSummary(runs=list(heads), events=events, checkpoints=checkpoints, heads=heads)


def _refused(why: str, **fields: Any) -> IntegrityError:
    return IntegrityError(
        f"the export is refused, nothing was imported: {why}",
        code="integrity.import_refused",
        hint="export the run again from its source store; do not edit export files",
        **fields,
    )


class _Draft:
    """A run being read from the file, checked once complete."""

    def __init__(self, run: RunInfo) -> None:
        self.run = run
        self.events: list[Event] = []
        self.checkpoints: list[CheckpointRow] = []


def read_export(lines: Iterable[str]) -> list[RunExport]:
    """Parse and check a whole export file; raises before anything could be written."""
    drafts: list[_Draft] = []
    header: dict[str, Any] | None = None
    end: dict[str, Any] | None = None
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        if end is not None:
            raise _refused(f"line {number} comes after the end record", line=number)
        try:
            record = parse_json(text)
        except ValueError as e:
            raise _refused(f"line {number} is not JSON ({e})", line=number) from e
        kind = record.get("kind") if isinstance(record, dict) else None
        if header is None:
            header = _header(record, kind)
            continue
        try:
            if kind == "run":
                drafts.append(_Draft(RunInfo.model_validate(record["run"])))
            elif kind == "event" and drafts:
                drafts[-1].events.append(Event.model_validate(record["event"]))
            elif kind == "checkpoint" and drafts:
                drafts[-1].checkpoints.append(CheckpointRow.model_validate(record["checkpoint"]))
            elif kind == "end":
                end = record
            else:
                raise _refused(f"line {number} has unexpected kind {kind!r}", line=number)
        except (ValidationError, KeyError, TypeError) as e:
            raise _refused(f"line {number} is not a valid {kind} record ({e})", line=number) from e
    if header is None:
        raise UsageError(
            "the file is empty",
            code="usage.bad_export",
            hint="pass a file written by `continuum export`",
        )
    parsed = [_checked(d) for d in drafts]
    if end is None:
        raise _refused("the end record is missing (the file was cut short)")
    counts = (
        len(parsed),
        sum(len(b.events) for b in parsed),
        sum(len(b.checkpoints) for b in parsed),
    )
    if (end.get("runs"), end.get("events"), end.get("checkpoints")) != counts:
        raise _refused(
            f"the end record counts {end.get('runs')} runs, {end.get('events')} events, "
            f"{end.get('checkpoints')} checkpoints; the file holds {counts[0]}, "
            f"{counts[1]}, {counts[2]}"
        )
    ids = [b.run.run_id for b in parsed]
    if len(set(ids)) != len(ids):
        raise _refused("a run appears twice")
    return parsed


def _header(record: Any, kind: Any) -> dict[str, Any]:
    if kind != "header" or record.get("format") != FORMAT:
        raise UsageError(
            "the file is not a continuum export",
            code="usage.bad_export",
            hint="pass a file written by `continuum export`",
        )
    if record.get("version") != FORMAT_VERSION:
        raise UsageError(
            f"export format version {record.get('version')!r} is not supported "
            f"(this continuum reads {FORMAT_VERSION})",
            code="usage.bad_export",
            hint="upgrade continuum",
        )
    header: dict[str, Any] = record
    return header


def _checked(draft: _Draft) -> RunExport:
    run, events = draft.run, draft.events
    report = verify_chain(run.run_id, events, run.head_sequence, run.head_hash)
    if not report.ok:
        v = report.violations[0]
        raise _refused(
            f"run {run.run_id!r} does not verify at sequence {v.sequence} ({v.kind}: {v.detail})",
            run_id=run.run_id,
            sequence=v.sequence,
            kind=str(v.kind),
        )
    status = RunStatus.ACTIVE
    for event in events:
        if event.type in EventType._value2member_map_ and EventType(event.type) in LIFECYCLE_STATUS:
            status = RunStatus(LIFECYCLE_STATUS[EventType(event.type)])
    if status != run.status:
        raise _refused(
            f"run {run.run_id!r} claims status {run.status} but its log says {status}",
            run_id=run.run_id,
        )
    by_sequence = {e.sequence: e for e in events}
    for cp in draft.checkpoints:
        sealed = by_sequence.get(cp.event_sequence)
        if (
            cp.run_id != run.run_id
            or _state_digest(cp.state_json) != cp.state_hash
            or sealed is None
            or sealed.payload.get("state_hash") != cp.state_hash
            or sealed.payload.get("through_sequence") != cp.sequence
        ):
            raise _refused(
                f"checkpoint {cp.sequence} of run {run.run_id!r} does not match its "
                "hash or its sealing event",
                run_id=run.run_id,
                sequence=cp.event_sequence,
            )
    return RunExport(
        run=run,
        events=events,
        checkpoints=draft.checkpoints,
        actions=rebuild_actions(run.run_id, events),
        approvals=rebuild_approvals(run.run_id, events),
    )


def _state_digest(state_json: str) -> str | None:
    try:
        return digest(parse_json(state_json))
    except ValueError:
        return None  # not JSON at all: fails the comparison


def rebuild_actions(run_id: str, events: Iterable[Event]) -> list[ActionRow]:
    """The action index of a run, rebuilt from its log with the fold's own handler."""
    records: dict[str, dict[str, Any]] = {}
    for event in events:
        action_id = event.payload.get("action_id")
        if not event.type.startswith("action_") or not isinstance(action_id, str):
            continue
        record = apply_action_event(records.get(action_id), event)
        if record is not None:
            records[action_id] = record
    # Leases are not exported: an imported started action's owner is judged by its process
    # (same host) or found gone, and then follows its replay contract.
    return [
        ActionRow(run_id=run_id, action_id=a, record=r, lease_expires=None)
        for a, r in records.items()
    ]


def rebuild_approvals(run_id: str, events: Iterable[Event]) -> list[ApprovalRow]:
    """The approval index of a run, rebuilt from its log with the fold's own handler."""
    records: dict[str, dict[str, Any]] = {}
    for event in events:
        approval_id = event.payload.get("approval_id")
        if event.type in APPROVAL_TYPES and isinstance(approval_id, str):
            record = apply_approval_event(records.get(approval_id), event)
            if record is not None:
                records[record["id"]] = record
    return [ApprovalRow(run_id=run_id, approval_id=a, record=r) for a, r in records.items()]


def import_runs(store: Storage, lines: Iterable[str]) -> TransferSummary:
    """Import an export into ``store``: everything or nothing, chains preserved exactly."""
    return import_checked(store, read_export(lines))


def import_checked(store: Storage, bundles: list[RunExport]) -> TransferSummary:
    """Import runs already read and checked by ``read_export``."""
    infos = store.import_runs(bundles)
    for info in infos:  # read back through the store's verifier once committed
        report = store.verify_events(info.run_id)
        if not report.ok:
            v = report.violations[0]
            raise IntegrityError(
                f"run {info.run_id!r} does not verify after import at sequence "
                f"{v.sequence} ({v.kind})",
                code=f"integrity.{v.kind}",
                hint=f"run `continuum verify {info.run_id}`",
                run_id=info.run_id,
                sequence=v.sequence,
            )
    return TransferSummary(
        runs=[i.run_id for i in infos],
        events=sum(len(b.events) for b in bundles),
        checkpoints=sum(len(b.checkpoints) for b in bundles),
        heads={i.run_id: f"{i.head_sequence}:{i.head_hash}" for i in infos},
    )

"""Move runs between stores of any backend: export to JSONL, import with the chain intact.

The file is one JSON document per line (canonical JSON, so the same data gives the same
bytes from every backend)::

    {"kind":"header","format":"continuum-export","version":1,...}
    {"kind":"run","run":{...}}                   then, for that run,
    {"kind":"event","event":{...}}               every event exactly as sealed, in order
    {"kind":"checkpoint","checkpoint":{...}}     its checkpoints, oldest first
    {"kind":"end","runs":N,"events":M,"checkpoints":K,"digest":D[,"signature":S]}

``digest`` is the SHA-256 of every line before the end record; ``signature`` (``export
--sign KEY``) a ``signing.EXPORT_PREFIX`` token over that digest and each run's head.

Export reads every event through the store's verifying reader: a damaged run is not
exported. Import checks everything before writing anything (each chain against its head,
each checkpoint against its hash and its sealing event, the run status against the log,
the trailer's counts and digest; every line bounded in size and nesting, ``bounded.py``),
rebuilds the action index from the events with the fold's own handler, then hands all
runs to ``Storage.import_runs``: one transaction, re-verified inside it, refused as a
whole if any run already exists.

Trust (references/contract.md §5): a human decision counts only when a person made it in
this store, or when it arrives in a file signed by a key a person here trusts. So unless
the file's signature verifies with the public key the person importing names
(``public_key``), each run holding events of a trusted origin (``human``,
``deterministic``) gets two events after its head: a ``history_imported`` marker (from it
on, the fold counts what those events decided as imported: confirmations do not count,
a "did not happen" does not allow a repeat, an approval's decision does not stand, the
state needs a person's confirmation) and a checkpoint through it. Every imported event
keeps its content and hash.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from continuum.errors import IntegrityError, UsageError
from continuum.eventlog.canonical import canonical_json, digest
from continuum.eventlog.chain import verify_chain
from continuum.eventlog.event_model import Event, seal
from continuum.eventlog.events import LIFECYCLE_STATUS, EventType
from continuum.ops.bounded import LineTooLong, TooDeep, parse_json_bounded
from continuum.recovery.checkpoints import CHECKPOINT_FORMAT, checkpoint_body
from continuum.state.projection import (
    APPROVAL_TYPES,
    apply_action_event,
    apply_approval_event,
    distrust_action,
    distrust_approval,
    project,
)
from continuum.state.records import TRUSTED_ORIGINS, State
from continuum.store import ActionRow, CheckpointRow, RunExport, RunInfo, Storage, redact_url
from continuum.store.base import format_timestamp
from continuum.store.models import ApprovalRow
from continuum.store.tx import new_event_id
from continuum.types import Origin, RunStatus

FORMAT = "continuum-export"
FORMAT_VERSION = 1
IMPORT_REASON = "imported without a trusted signature"


class NotTrusted(BaseModel):
    """What an import did not trust in one run (the ``history_imported`` marker's effect)."""

    model_config = ConfigDict(frozen=True)

    marker_sequence: int
    confirmations: list[int] = Field(default_factory=list)  # their sequences: no longer counted
    actions: list[str] = Field(default_factory=list)  # action keys settled by the import's word
    needs_person: list[str] = Field(default_factory=list)  # of those, now needing a person
    approvals: list[str] = Field(default_factory=list)  # decisions that no longer stand
    review: list[str] = Field(default_factory=list)  # components a person must confirm


class TransferSummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    runs: list[str]
    events: int
    checkpoints: int
    heads: dict[str, str]  # run_id -> "SEQ:HASH" (an anchor for each run moved)
    signed_by: str | None = None  # the key id the file's signature claims (export: made)
    trusted: bool = False  # import: the signature verified with the key a person named
    not_trusted: dict[str, NotTrusted] = Field(default_factory=dict)  # import, per run


def _line(kind: str, **fields: Any) -> str:
    return canonical_json({"kind": kind, **fields}) + "\n"


def export_runs(
    store: Storage,
    out: TextIO,
    run_ids: Iterable[str] | None = None,
    *,
    sign: Path | None = None,
) -> TransferSummary:
    """Write ``run_ids`` (default: every run) to ``out``; refuses a run that fails to verify.
    With ``sign`` (a private key file) the end record carries a signature over the file's
    digest and each run's head (``import --public-key`` checks it)."""
    from continuum.ops.signing import EXPORT_DOMAIN, EXPORT_PREFIX, load_private_key, sign_claims

    if sign is not None:
        load_private_key(sign)  # a bad key is refused before anything is written
    runs = [store.get_run(r) for r in run_ids] if run_ids is not None else store.list_runs()
    seen: set[str] = set()
    lines = hashlib.sha256()

    def put(text: str) -> None:
        out.write(text)
        lines.update(text.encode("utf-8"))

    put(
        _line(
            "header",
            format=FORMAT,
            version=FORMAT_VERSION,
            source=redact_url(store.url),
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
        put(_line("run", run=run.model_dump(mode="json")))
        for event in store.iter_events(run.run_id):  # verified as read: damage raises
            put(_line("event", event=event.model_dump(mode="json")))
            events += 1
        for cp in reversed(store.list_checkpoints(run.run_id)):
            put(_line("checkpoint", checkpoint=cp.model_dump(mode="json")))
            checkpoints += 1
        heads[run.run_id] = f"{run.head_sequence}:{run.head_hash}"
    end: dict[str, Any] = {
        "runs": len(seen),
        "events": events,
        "checkpoints": checkpoints,
        "digest": lines.hexdigest(),
    }
    signed_by = None
    if sign is not None:
        end["signature"] = sign_claims(
            EXPORT_PREFIX, EXPORT_DOMAIN, {"digest": end["digest"], "heads": heads}, sign
        )
        from continuum.ops.signing import claimed_signer

        signed_by = claimed_signer(end["signature"], EXPORT_PREFIX)
    out.write(_line("end", **end))
    return TransferSummary(
        runs=list(heads),
        events=events,
        checkpoints=checkpoints,
        heads=heads,
        signed_by=signed_by,
    )


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


class ExportFile(BaseModel):
    """An export read and checked whole (``parse_export``): its runs, ready to import, and
    what its end record says of it."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    runs: list[RunExport]
    digest: str | None  # of every line before the end record (None: written before digests)
    signature: str | None  # the end record's signature token, unchecked
    source: str | None  # the header's source store (a hint, not trusted)

    @property
    def heads(self) -> dict[str, str]:
        return {b.run.run_id: f"{b.run.head_sequence}:{b.run.head_hash}" for b in self.runs}


def _text(line: str | bytes, number: int, seen_header: bool, name: str) -> str:
    if isinstance(line, str):
        return line
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as e:
        if seen_header:
            raise _refused(f"line {number} is not UTF-8 text", line=number) from e
        raise UsageError(
            f"{name} is not UTF-8 text",
            code="usage.bad_export",
            hint="pass a file written by `continuum export`",
        ) from e


def parse_export(lines: Iterable[str | bytes], *, name: str = "the file") -> ExportFile:
    """Parse and check a whole export file (lines as text, or as bytes from
    ``bounded.read_lines``); raises before anything could be written. ``name``: the
    file as a person typed it, for messages."""
    drafts: list[_Draft] = []
    header: dict[str, Any] | None = None
    end: dict[str, Any] | None = None
    whole = hashlib.sha256()
    body_digest: str | None = None
    number = 0
    try:
        for number, raw in enumerate(lines, start=1):
            text = _text(raw, number, header is not None, name)
            if end is not None:
                if not text.strip():
                    continue
                raise _refused(f"line {number} comes after the end record", line=number)
            if not text.strip():
                whole.update(text.encode("utf-8"))
                continue
            try:
                record = parse_json_bounded(text, line=number)
            except TooDeep as e:
                raise _refused(str(e), line=number, offset=e.offset) from e
            except ValueError as e:
                if header is None:
                    raise UsageError(
                        "the file is not a continuum export (its first line is not JSON)",
                        code="usage.bad_export",
                        hint="pass a file written by `continuum export`",
                    ) from e
                raise _refused(f"line {number} is not JSON ({e})", line=number) from e
            kind = record.get("kind") if isinstance(record, dict) else None
            if header is None:
                header = _header(record, kind)
                whole.update(text.encode("utf-8"))
                continue
            if kind == "end":
                end, body_digest = record, whole.hexdigest()
                continue
            whole.update(text.encode("utf-8"))
            try:
                if kind == "run":
                    drafts.append(_Draft(RunInfo.model_validate(record["run"])))
                elif kind == "event" and drafts:
                    drafts[-1].events.append(Event.model_validate(record["event"]))
                elif kind == "checkpoint" and drafts:
                    drafts[-1].checkpoints.append(
                        CheckpointRow.model_validate(record["checkpoint"])
                    )
                else:
                    raise _refused(f"line {number} has unexpected kind {kind!r}", line=number)
            except (ValidationError, KeyError, TypeError) as e:
                raise _refused(
                    f"line {number} is not a valid {kind} record ({e})", line=number
                ) from e
    except LineTooLong as e:
        raise _refused(f"{e}: no export line is that long", line=e.line, offset=e.offset) from e
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
    claimed = end.get("digest")
    if claimed is not None and claimed != body_digest:
        raise _refused("its lines do not match the digest in its end record")
    ids = [b.run.run_id for b in parsed]
    if len(set(ids)) != len(ids):
        raise _refused("a run appears twice")
    signature, source = end.get("signature"), header.get("source")
    return ExportFile(
        runs=parsed,
        digest=claimed if isinstance(claimed, str) else None,
        signature=signature if isinstance(signature, str) else None,
        source=source[:200] if isinstance(source, str) else None,
    )


def read_export(lines: Iterable[str | bytes]) -> list[RunExport]:
    """The runs of a whole export file, parsed and checked (``parse_export``)."""
    return parse_export(lines).runs


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
        try:
            state_hash: str | None = digest(parse_json_bounded(cp.state_json))
        except TooDeep as e:
            raise _refused(
                f"checkpoint {cp.sequence} of run {run.run_id!r} holds a state {e}",
                run_id=run.run_id,
                sequence=cp.event_sequence,
            ) from e
        except ValueError:
            state_hash = None  # not JSON at all: fails the comparison
        if (
            cp.run_id != run.run_id
            or state_hash != cp.state_hash
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


def _marker_through(event: Event) -> int | None:
    """The sequence a well-formed ``history_imported`` marker distrusts through."""
    if event.type != EventType.HISTORY_IMPORTED:
        return None
    through = event.payload.get("through_sequence")
    if type(through) is not int or through < 0:
        return None
    return min(through, event.sequence - 1)


def rebuild_actions(run_id: str, events: Iterable[Event]) -> list[ActionRow]:
    """The action index of a run, rebuilt from its log with the fold's own handlers
    (an import marker's too)."""
    records: dict[str, dict[str, Any]] = {}
    for event in events:
        through = _marker_through(event)
        if through is not None:
            records = {a: distrust_action(r, through) for a, r in records.items()}
            continue
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
    """The approval index of a run, rebuilt from its log with the fold's own handlers
    (an import marker's too)."""
    records: dict[str, dict[str, Any]] = {}
    for event in events:
        through = _marker_through(event)
        if through is not None:
            records = {a: distrust_approval(r, through) for a, r in records.items()}
            continue
        approval_id = event.payload.get("approval_id")
        if event.type in APPROVAL_TYPES and isinstance(approval_id, str):
            record = apply_approval_event(records.get(approval_id), event)
            if record is not None:
                records[record["id"]] = record
    return [ApprovalRow(run_id=run_id, approval_id=a, record=r) for a, r in records.items()]


# -- trust --------------------------------------------------------------------------------------


def check_signature(export: ExportFile, public_key: Path) -> str:
    """The key id that signed ``export``, once its signature verifies with ``public_key``
    and covers exactly this file (its digest and every run's head); else
    ``IntegrityError`` ``integrity.export_signature`` (exit 3)."""
    from continuum.ops.signing import EXPORT_DOMAIN, EXPORT_PREFIX, open_signed

    hint = (
        "import it without --public-key (a person then confirms what it holds), or get "
        "the export signed by the holder of that key (`continuum export --sign KEY`)"
    )
    claims = open_signed(
        export.signature,
        EXPORT_PREFIX,
        EXPORT_DOMAIN,
        public_key,
        what="the export",
        code="integrity.export_signature",
        hint=hint,
    )
    if export.digest is None or claims.get("digest") != export.digest:
        raise IntegrityError(
            "the export's signature is for other content than this file's",
            code="integrity.export_signature",
            hint=hint,
        )
    if claims.get("heads") != export.heads:
        raise IntegrityError(
            "the export's signature names other runs or heads than this file holds",
            code="integrity.export_signature",
            hint=hint,
        )
    return str(claims.get("key_id"))


_COUNTING = frozenset(TRUSTED_ORIGINS)


def _now() -> str:
    return format_timestamp(datetime.now(UTC))


def _sealed_after(
    run: RunInfo, previous: Event, type_: EventType, payload: dict[str, Any]
) -> Event:
    return seal(
        event_id=new_event_id(),
        run_id=run.run_id,
        sequence=previous.sequence + 1,
        type=str(type_),
        timestamp=_now(),
        payload=payload,
        causer_event_id=None,
        source=Origin.DETERMINISTIC,
        prev_hash=previous.hash,
    )


def distrust(bundle: RunExport, export: ExportFile) -> tuple[RunExport, NotTrusted | None]:
    """``bundle`` with a ``history_imported`` marker and a checkpoint through it appended,
    and what the marker changed; the bundle unchanged (and None) when no event in it has
    an origin whose word would count."""
    run, events = bundle.run, bundle.events
    if not events or not any(e.source in _COUNTING for e in events):
        return bundle, None
    head = events[-1]
    marker = _sealed_after(
        run,
        head,
        EventType.HISTORY_IMPORTED,
        {
            "through_sequence": head.sequence,
            "through_hash": head.hash,
            "file_digest": export.digest,
            "signed_by": _claimed(export),
            "source": export.source,
        },
    )
    before = project(run.run_id, events)
    after = project(run.run_id, [*events, marker])
    state_json, state_hash = checkpoint_body(after)
    sealing = _sealed_after(
        run,
        marker,
        EventType.CHECKPOINTED,
        {
            "through_sequence": marker.sequence,
            "state_hash": state_hash,
            "reason": IMPORT_REASON,
            "format": CHECKPOINT_FORMAT,
        },
    )
    checkpoint = CheckpointRow(
        run_id=run.run_id,
        sequence=marker.sequence,
        event_sequence=sealing.sequence,
        state_json=state_json,
        state_hash=state_hash,
        created_at=sealing.timestamp,
    )
    all_events = [*events, marker, sealing]
    moved = RunExport(
        run=run.model_copy(update={"head_sequence": sealing.sequence, "head_hash": sealing.hash}),
        events=all_events,
        checkpoints=[*bundle.checkpoints, checkpoint],
        actions=rebuild_actions(run.run_id, all_events),
        approvals=rebuild_approvals(run.run_id, all_events),
    )
    return moved, _what_changed(marker.sequence, before, after)


def _claimed(export: ExportFile) -> str | None:
    from continuum.ops.signing import EXPORT_PREFIX, claimed_signer

    return claimed_signer(export.signature, EXPORT_PREFIX)


def _what_changed(marker: int, before: State, after: State) -> NotTrusted:
    counted = {c.sequence for c in after.confirmations if c.counted}
    actions = [
        a.action_key
        for a in after.actions.values()
        if a.settled_by != before.actions[a.action_id].settled_by
    ]
    return NotTrusted(
        marker_sequence=marker,
        confirmations=[
            c.sequence for c in before.confirmations if c.counted and c.sequence not in counted
        ],
        actions=actions,
        needs_person=[
            a.action_key
            for a in after.actions.values()
            if a.needs_human and not before.actions[a.action_id].needs_human
        ],
        approvals=[
            i
            for i, ap in after.approvals.items()
            if ap.decided_by != before.approvals[i].decided_by
        ],
        review=sorted(set(after.unreviewed()) - set(before.unreviewed())),
    )


def import_runs(
    store: Storage, lines: Iterable[str | bytes], *, public_key: Path | None = None
) -> TransferSummary:
    """Import an export into ``store``: everything or nothing, chains preserved exactly.
    ``public_key``: the key a person trusts; the file's signature must verify with it, and
    then what its events' origins decided counts here. Without it (module docstring) each
    run gets a ``history_imported`` marker and what it did not trust is reported."""
    return import_export(store, parse_export(lines), public_key=public_key)


def import_export(
    store: Storage, export: ExportFile, *, public_key: Path | None = None
) -> TransferSummary:
    """Import an export already read by ``parse_export`` (trust as for ``import_runs``)."""
    not_trusted: dict[str, NotTrusted] = {}
    if public_key is not None:
        signer: str | None = check_signature(export, public_key)
        bundles = export.runs
    else:
        signer, bundles = _claimed(export), []
        for bundle in export.runs:
            moved, changed = distrust(bundle, export)
            bundles.append(moved)
            if changed is not None:
                not_trusted[bundle.run.run_id] = changed
    summary = import_checked(store, bundles)
    return summary.model_copy(
        update={"signed_by": signer, "trusted": public_key is not None, "not_trusted": not_trusted}
    )


def import_checked(store: Storage, bundles: list[RunExport]) -> TransferSummary:
    """Import runs already read and checked by ``read_export`` (as they are: no marker)."""
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

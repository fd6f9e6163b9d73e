"""Switch from the original project (Cyrax321/CONTINUUM) without losing history:
``continuum import --from-original FILE.db``.

The original's store is read through ``continuum.store.original`` (read-only, its own hash
chain verified as read). Each of its events becomes one continuum event, or a few where
one original record stands for several ledger steps:

- mapped to a continuum type with the same meaning (the table in ``_MAPPERS`` and the
  ledger mapping in ``_Mapper.action``), or
- kept as an opaque event under its original type (upper-case, so never one of ours),
  which the fold counts as an unknown type and never drops.

Every event is recorded with origin ``imported`` (self-certified: a person must confirm
before a resume is safe) and carries the whole original event under ``original`` (type,
id, sequence, timestamp, source, causer, prev_hash, hash, payload), so nothing is lost
and the original chain can still be re-checked from continuum's copy. The run record
carries ``imported_from`` in its metadata.

What the original's payloads hold was read from its source (github.com/Cyrax321/CONTINUUM):
``src/continuum/state/semantic.py`` (the fold: ``run_started``, ``task_updated`` with
``_apply_progress``, ``work_completed``, ``decision_created``, ``evidence_added``,
``finding_added``, ``work_added``, ``dependency_declared``, ``approval_*``, ``model_*``, and
``_NON_PROJECTING``: ``TOOL_*``, ``STATE_CHECKPOINTED``, ``RECOVERY_*`` ... change no
state), ``src/continuum/storage/actionindex.py`` and ``src/continuum/actions/ledger.py``
(``ACTION_RECORDED``/``ACTION_RECONCILED``/``ACTION_COMPENSATED`` payloads are ``{"key":
ledger key, "action": Action record}``, last write per key wins) and
``src/continuum/models.py`` (``Action``: ``status`` planned/started/completed/failed/
unknown/compensated/requires_review/expired, ``side_effect_uncertain``, ``external_id``,
``result``, ``last_error``; ``Origin``).
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from continuum.errors import ContinuumError, IntegrityError, NotFoundError, UsageError
from continuum.eventlog.canonical import canonical_bytes
from continuum.eventlog.event_model import Event, seal
from continuum.eventlog.events import LIFECYCLE_STATUS, EventType
from continuum.eventlog.payloads import payload_problem
from continuum.ledger.identity import imported_identity, normalize_key
from continuum.ops.transfer import import_checked, rebuild_actions, rebuild_approvals
from continuum.store import RunExport, RunInfo, Storage
from continuum.store.base import check_run_id, format_timestamp
from continuum.store.original import (
    ORIGINAL_FORMAT,
    OriginalEvent,
    OriginalReader,
    OriginalRun,
    original_timestamp,
)
from continuum.types import Origin, RunStatus
from continuum.untrusted import check_identifier, quoted

SOURCE_FORMAT = ORIGINAL_FORMAT  # named in each imported run's metadata

# What is not carried over, said in every report.
NOT_IMPORTED = [
    "the original's state versions and checkpoints (continuum folds the state from the "
    "events; take a checkpoint with `continuum checkpoint RUN`)",
    "the original's action index and LangGraph tables (derived data)",
    "confirmations recorded in the original (kept as REVIEW_CONFIRMED events, but a person "
    "must confirm again here: `continuum confirm RUN`)",
]


class MappedCount(BaseModel):
    """``events`` continuum events of ``type`` written for events of ``original_type``."""

    model_config = ConfigDict(frozen=True)

    original_type: str
    type: str
    events: int


class KeptCount(BaseModel):
    model_config = ConfigDict(frozen=True)

    original_type: str
    events: int
    why: str


class RunReport(BaseModel):
    run_id: str
    original_run_id: str
    original_status: str | None = None
    status: str | None = None
    original_events: int = 0
    events: int = 0
    verified: bool = True
    head: str | None = None  # SEQ:HASH of the imported run (the same in a dry run)
    exists: bool = False  # the run id is taken in the target store
    missing_blobs: int = 0
    mapped_events: int = 0  # original events mapped to continuum types
    kept_events: int = 0  # original events kept as opaque events (their own type)
    mapped: list[MappedCount] = Field(default_factory=list)
    kept: list[KeptCount] = Field(default_factory=list)
    refused: dict[str, Any] | None = None  # the original run's damage (dry run only)


class MigrationReport(BaseModel):
    source: str
    format: str = SOURCE_FORMAT
    schema_version: int
    dry_run: bool
    runs: list[RunReport]
    totals: dict[str, int]
    not_imported: list[str] = Field(default_factory=lambda: list(NOT_IMPORTED))


# -- values as the original's fold reads them ----------------------------------------------


def _orig_int(value: Any) -> int | None:
    """``int(value)`` as the original's fold does it (semantic.py), if that gives a count."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _str_list(value: Any) -> list[str]:
    """semantic.py ``_as_str_list``: None -> [], a string -> [it], else each as a string."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v if isinstance(v, str) else _short_json(v) for v in value]
    return [_short_json(value)]


def _short_json(value: Any) -> str:
    return str(value) if isinstance(value, int | float | bool) else repr(value)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


class Unmappable(Exception):
    """An original event that has no faithful continuum form: kept opaque, with why."""


Out = list[tuple[str, dict[str, Any]]]


class _Mapper:
    """Maps one original run's events in order (some mappings depend on what came before)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        # The original's progress as its fold computes it (semantic.py), for WORK_COMPLETED
        # with a count other than one, which becomes absolute progress here.
        self.total: int | None = None
        self.completed = self.failed = 0
        self.findings: set[str] = set()
        self.resources: set[str] = set()
        self.work_total_seen = False  # a total was set: WORK_ADDED would change it here
        # original ledger key -> [action_id, status as mapped]
        self.actions: dict[str, list[str]] = {}
        self.action_ids: set[str] = set()

    def map(self, event: OriginalEvent) -> Out:
        payload = event.blob_payload if event.blob_payload is not None else event.payload
        handler = _MAPPERS.get(event.type)
        if handler is None:
            raise Unmappable(_KEPT_WHY.get(event.type, "no continuum equivalent"))
        if event.blob_payload is None and "__offloaded" in event.payload:
            raise Unmappable("its payload was offloaded to a blob that is missing or damaged")
        return handler(self, payload)

    # -- lifecycle, goal and progress -----------------------------------------------------

    def run_started(self, p: dict[str, Any]) -> Out:
        out: dict[str, Any] = {}
        if p.get("goal") is not None:
            out["goal"] = p["goal"] if isinstance(p["goal"], str) else _short_json(p["goal"])
        if p.get("total") is not None:
            total = _orig_int(p["total"])
            if total is None:
                raise Unmappable("its total is not a count")
            out["total"] = self.total = total
            self.completed = self.failed = 0
            self.work_total_seen = True
        return [(EventType.RUN_STARTED, out)]

    def finished(self, type_: EventType) -> Callable[[dict[str, Any]], Out]:
        def mapper(p: dict[str, Any]) -> Out:
            reason = _text(p.get("reason"))
            return [(type_, {"reason": reason} if reason is not None else {})]

        return mapper

    def task_updated(self, p: dict[str, Any]) -> Out:
        out: dict[str, Any] = {}
        if p.get("goal") is not None:
            out["goal"] = p["goal"] if isinstance(p["goal"], str) else _short_json(p["goal"])
        for name in ("total", "completed", "failed"):
            if name in p and p[name] is not None:
                value = _orig_int(p[name])
                if value is None:
                    raise Unmappable(f"its {name} is not a count")
                out[name] = value
        if "total" in out:
            self.total, self.work_total_seen = out["total"], True
        self.completed = out.get("completed", self.completed)
        self.failed = out.get("failed", self.failed)
        return [(EventType.PROGRESS_RECORDED, out)]

    def work_completed(self, p: dict[str, Any]) -> Out:
        count = _orig_int(p.get("count", 1))
        if count is None:
            raise Unmappable("its count is not a count")
        failed = bool(p.get("failed", False))
        self.completed += 0 if failed else count
        self.failed += count if failed else 0
        if count != 1:  # not one item: the original's figures, as absolute progress
            out = {"completed": self.completed, "failed": self.failed}
            if self.total is not None:
                out["total"] = self.total
            return [(EventType.PROGRESS_RECORDED, out)]
        item = p.get("task_id")
        body = {"item_id": str(item)} if item is not None else {}
        return [(EventType.WORK_FAILED if failed else EventType.WORK_COMPLETED, body)]

    def work_added(self, p: dict[str, Any]) -> Out:
        if self.work_total_seen:
            raise Unmappable(
                "the run has a total, which the original keeps apart from its work "
                "items; continuum would add the item to it"
            )
        return [
            (
                EventType.WORK_ADDED,
                {
                    "item_id": _need(p, "task_id"),
                    "text": _need(p, "description"),
                    "cites": _str_list(p.get("prerequisite")),
                },
            )
        ]

    # -- findings, decisions, evidence ----------------------------------------------------

    def evidence_added(self, p: dict[str, Any]) -> Out:
        out: dict[str, Any] = {
            "evidence_id": _need(p, "evidence_id"),
            "text": str(p.get("summary", "")),
        }
        source = p.get("source")
        if isinstance(source, str) and source in self.resources:
            out["dependencies"] = [source]  # evidence from a declared resource goes stale with it
        return [(EventType.EVIDENCE_ADDED, out)]

    def finding_added(self, p: dict[str, Any]) -> Out:
        finding_id = _need(p, "finding_id")
        self.findings.add(finding_id)
        return [
            (
                EventType.FINDING_ADDED,
                {
                    "finding_id": finding_id,
                    "text": _need(p, "claim"),
                    "evidence": _str_list(p.get("evidence")),
                },
            )
        ]

    def decision_created(self, p: dict[str, Any]) -> Out:
        cited = _str_list(p.get("evidence"))  # the original cites evidence or findings here
        return [
            (
                EventType.DECISION_CREATED,
                {
                    "decision_id": _need(p, "decision_id"),
                    "text": _need(p, "decision"),
                    "findings": [c for c in cited if c in self.findings],
                    "evidence": [c for c in cited if c not in self.findings],
                },
            )
        ]

    def invalidated(self, type_: EventType, id_field: str) -> Callable[[dict[str, Any]], Out]:
        def mapper(p: dict[str, Any]) -> Out:
            out = {id_field: _need(p, id_field)}
            if isinstance(p.get("reason"), str):
                out["reason"] = p["reason"]
            return [(type_, out)]

        return mapper

    def dependency_declared(self, p: dict[str, Any]) -> Out:
        resource = _need(p, "resource")
        self.resources.add(resource)
        out: dict[str, Any] = {"name": resource, "provider": "static"}
        for name in ("version", "checksum"):
            if p.get(name) is not None:
                out[name] = str(p[name])
        return [(EventType.DEPENDENCY_DECLARED, out)]

    def approval(self, type_: EventType) -> Callable[[dict[str, Any]], Out]:
        def mapper(p: dict[str, Any]) -> Out:
            out = {"approval_id": _need(p, "approval_id")}
            if isinstance(p.get("subject"), str):
                out["text"] = p["subject"]
            return [(type_, out)]

        return mapper

    def model_changed(self, p: dict[str, Any]) -> Out:
        model = p.get("model")
        if not isinstance(model, str) or not model.strip():
            raise Unmappable("it names no model")
        return [(EventType.MODEL_CHANGED, {"model": model})]

    def model_assumption(self, p: dict[str, Any]) -> Out:
        return [
            (
                EventType.MODEL_ASSUMPTION_RECORDED,
                {"assumption_id": _need(p, "item_id"), "text": _need(p, "description")},
            )
        ]

    # -- the action ledger ----------------------------------------------------------------

    def action(self, p: dict[str, Any], *, reconciled: bool = False) -> Out:
        """One original ledger record (the action's whole state after this write) as the
        continuum ledger step(s) that lead there."""
        key, record = p.get("key"), p.get("action")
        if not isinstance(key, str) or not key or not isinstance(record, dict):
            raise Unmappable(
                "not a ledger record (no key or action): the original's fold skips it too"
            )
        status = record.get("status")
        target = _ACTION_STATUS.get(status) if isinstance(status, str) else None
        if target is None:
            raise Unmappable("its action status is not one the original defines")
        if target == "failed" and record.get("side_effect_uncertain") is True:
            target = "unknown"
        out: Out = []
        known = self.actions.get(key)
        if known is None:
            known = self._intercepted(key, record, out)
        action_id, current = known
        if target == "started":
            if current != "started" and not out:
                out.append(
                    (
                        EventType.ACTION_RETRIED,
                        {
                            "action_id": action_id,
                            "reason": "the original recorded the action started again",
                        },
                    )
                )
        elif target == current:
            pass
        elif target == "completed":
            external = _text(record.get("external_id"))
            if reconciled:
                out.append(
                    (
                        EventType.ACTION_RECONCILED,
                        {"action_id": action_id, "occurred": True, "external_id": external},
                    )
                )
            else:
                out.append(
                    (
                        EventType.ACTION_COMPLETED,
                        {
                            "action_id": action_id,
                            "external_id": external,
                            "result": record.get("result"),
                        },
                    )
                )
        elif target == "failed":
            error = _text(record.get("last_error"))
            if reconciled:
                out.append(
                    (
                        EventType.ACTION_RECONCILED,
                        {"action_id": action_id, "occurred": False, "note": error},
                    )
                )
            else:
                out.append(
                    (
                        EventType.ACTION_FAILED,
                        {"action_id": action_id, "error": error, "certain": True},
                    )
                )
        elif target == "unknown":
            out.append(
                (
                    EventType.ACTION_MARKED_UNKNOWN,
                    {
                        "action_id": action_id,
                        "reason": _text(record.get("last_error"))
                        or f"the original recorded it {status} (it may or may not have happened)",
                    },
                )
            )
        elif target == "compensated":
            out.append(
                (
                    EventType.ACTION_COMPENSATED,
                    {"action_id": action_id, "note": "compensated in the original"},
                )
            )
        if not out:
            raise Unmappable("it repeats the action's status: no ledger step")
        known[1] = target
        return out

    def _intercepted(self, key: str, record: dict[str, Any], out: Out) -> list[str]:
        action_type = record.get("action_type")
        if not isinstance(action_type, str) or not _clean(_nfc(action_type), 200):
            action_type = "original_action"  # the real one stays in the original payload
        action_type = _nfc(action_type)
        # Keyed by the original's own ledger key (a hash of its key or arguments: the key
        # itself was never stored), where an intercept in this run looks for it
        # (ledger.original_identities).
        ours = normalize_key(action_type, key) if _clean(key, 1000) else _digest_key(key)
        ident = imported_identity(self.run_id, action_type, ours)
        if ident.action_id in self.action_ids:  # two original keys that read alike here
            ours = _digest_key(key)
            ident = imported_identity(self.run_id, action_type, ours)
        self.action_ids.add(ident.action_id)
        out.append(
            (
                EventType.ACTION_INTERCEPTED,
                {
                    "action_id": ident.action_id,
                    "action_key": ident.action_key,
                    "action_type": action_type,
                    "key": ours,
                    "dedup_key": ident.dedup_key,
                    "operation_key": ident.operation_key,
                    "arguments": record.get("arguments"),
                    "replay": "never",
                },
            )
        )
        known = [ident.action_id, "started"]
        self.actions[key] = known
        return known


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text).strip()


def _digest_key(key: str) -> str:
    return "original-key-" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _clean(value: Any, limit: int) -> bool:
    try:
        check_identifier(value, what="value", code="usage.invalid", hint="", max_length=limit)
    except UsageError:
        return False
    return True


def _need(p: dict[str, Any], name: str) -> str:
    value = p.get(name)
    if value is None:  # semantic.py ``_payload_str``: the original's fold refuses it too
        raise Unmappable(f"it has no {name}")
    return value if isinstance(value, str) else _short_json(value)


# Original status -> the continuum ledger status it means (models.py ``ActionStatus``).
# planned is treated as started (it may have begun), requires_review and expired as unknown.
_ACTION_STATUS = {
    "planned": "started",
    "started": "started",
    "completed": "completed",
    "failed": "failed",
    "unknown": "unknown",
    "requires_review": "unknown",
    "expired": "unknown",
    "compensated": "compensated",
}

_MAPPERS: dict[str, Callable[[_Mapper, dict[str, Any]], Out]] = {
    "RUN_STARTED": _Mapper.run_started,
    "RUN_COMPLETED": lambda m, p: m.finished(EventType.RUN_COMPLETED)(p),
    "RUN_ABORTED": lambda m, p: m.finished(EventType.RUN_ABORTED)(p),
    "TASK_UPDATED": _Mapper.task_updated,
    "WORK_ADDED": _Mapper.work_added,
    "WORK_COMPLETED": _Mapper.work_completed,
    "EVIDENCE_ADDED": _Mapper.evidence_added,
    "FINDING_ADDED": _Mapper.finding_added,
    "FINDING_INVALIDATED": lambda m, p: m.invalidated(EventType.FINDING_INVALIDATED, "finding_id")(
        p
    ),
    "DECISION_CREATED": _Mapper.decision_created,
    "DECISION_INVALIDATED": lambda m, p: m.invalidated(
        EventType.DECISION_INVALIDATED, "decision_id"
    )(p),
    "DEPENDENCY_DECLARED": _Mapper.dependency_declared,
    "APPROVAL_REQUESTED": lambda m, p: m.approval(EventType.APPROVAL_REQUESTED)(p),
    "APPROVAL_GRANTED": lambda m, p: m.approval(EventType.APPROVAL_GRANTED)(p),
    "APPROVAL_REVOKED": lambda m, p: m.approval(EventType.APPROVAL_REVOKED)(p),
    "MODEL_CHANGED": _Mapper.model_changed,
    "MODEL_ASSUMPTION_RECORDED": _Mapper.model_assumption,
    "ACTION_RECORDED": _Mapper.action,
    "ACTION_RECONCILED": lambda m, p: m.action(p, reconciled=True),
    "ACTION_COMPENSATED": _Mapper.action,
}

_KEPT_WHY = {
    "STATE_CHECKPOINTED": "a checkpoint of the original's own state format (continuum "
    "checkpoints are sealed with their state; take one here)",
    "REVIEW_CONFIRMED": "a confirmation in the original: a person must confirm again here",
    "TOOL_CALLED": "a tool-call record the original's fold ignores (its side effects are "
    "ACTION_* records)",
    "TOOL_COMPLETED": "a tool-call record the original's fold ignores",
    "TOOL_FAILED": "a tool-call record the original's fold ignores",
}


# -- one run --------------------------------------------------------------------------------


def _original_block(event: OriginalEvent, *, verified: bool) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": event.type,
        "event_id": event.event_id,
        "run_id": event.run_id,
        "sequence": event.sequence,
        "timestamp": event.timestamp,
        "source": event.source,
        "causer_event_id": event.causer_event_id,
        "prev_hash": event.prev_hash,
        "hash": event.hash,
        "payload": event.payload,
    }
    if event.blob_payload is not None:
        block["blob_payload"] = event.blob_payload
    if event.archived:
        block["archived"] = True  # it came from the original's compacted prefix
    if not verified:
        block["verified"] = False
    return block


def _event_id(run_id: str, original_id: str, part: int) -> str:
    material = f"{run_id}\x00{original_id}\x00{part}".encode("utf-8", "surrogatepass")
    return "evt_" + hashlib.sha256(material).hexdigest()[:32]


def _timestamp(text: str | None, fallback: str) -> str:
    if text is None:
        return fallback
    try:
        return format_timestamp(original_timestamp(text))
    except ValueError:
        return fallback


def build_run(
    run: OriginalRun, new_run_id: str, *, source: str, schema_version: int
) -> tuple[RunExport, RunReport]:
    """The continuum form of one original run (sealed, not written) and what was mapped."""
    mapper = _Mapper(new_run_id)
    events: list[Event] = []
    mapped: Counter[tuple[str, str]] = Counter()
    kept: Counter[tuple[str, str]] = Counter()
    ours: dict[str, str] = {}  # original event id -> the first event it became here
    mapped_originals = 0
    prev: str | None = None
    for original in run.events:
        block = _original_block(original, verified=run.verified)
        try:
            try:
                steps = mapper.map(original)
            except UsageError as e:  # e.g. arguments continuum cannot hash
                raise Unmappable(e.message) from None
            for type_, body in steps:
                if (problem := payload_problem(str(type_), body)) is not None:
                    raise Unmappable(f"its continuum form is not valid ({problem})")
        except Unmappable as why:
            steps = [(original.type, {})]
            kept[(original.type, str(why))] += 1
        else:
            mapped_originals += 1
            for type_, _ in steps:
                mapped[(original.type, str(type_))] += 1
        stamp = _timestamp(original.timestamp, format_timestamp(datetime.now(UTC)))
        for part, (type_, body) in enumerate(steps, start=1):
            if part == 1:
                body = {**body, "original": block}
            else:  # a further ledger step of the same original record
                body = {
                    **body,
                    "original": {
                        "event_id": original.event_id,
                        "sequence": original.sequence,
                        "type": original.type,
                        "part": part,
                    },
                }
            causer = ours.get(original.causer_event_id or "")
            try:
                canonical_bytes(body)
                event = seal(
                    event_id=_event_id(new_run_id, original.event_id, part),
                    run_id=new_run_id,
                    sequence=len(events) + 1,
                    type=str(type_),
                    timestamp=stamp,
                    payload=body,
                    causer_event_id=causer,
                    source=Origin.IMPORTED,
                    prev_hash=prev,
                )
            except UsageError as e:
                raise UsageError(
                    f"run {run.run_id!r} of the original store cannot be imported: its event at "
                    f"sequence {original.sequence} holds a value continuum cannot store "
                    f"({e.message}); nothing was imported",
                    code=e.code,
                    run_id=run.run_id,
                    sequence=original.sequence,
                    hint="leave that run out (--run the others)",
                ) from None
            ours.setdefault(original.event_id, event.event_id)
            events.append(event)
            prev = event.hash
    status = RunStatus.ACTIVE
    for event in events:
        if event.type in LIFECYCLE_STATUS:
            status = RunStatus(LIFECYCLE_STATUS[EventType(event.type)])
    last = run.events[-1] if run.events else None
    fallback = events[0].timestamp if events else format_timestamp(datetime.now(UTC))
    metadata = {
        "imported_from": {
            "format": SOURCE_FORMAT,
            "file": source,
            "schema_version": schema_version,
            "run_id": run.run_id,
            "status": run.status,
            "created_at": run.created_at,
            "updated_at": run.updated_at,
            "parent_run_id": run.parent_run_id,
            "metadata": _storable(run.metadata),
            "verified": run.verified,
            "head": f"{last.sequence}:{last.hash}" if last else None,
        }
    }
    info = RunInfo(
        run_id=new_run_id,
        goal=run.goal,
        status=status,
        created_at=_timestamp(run.created_at, fallback),
        head_sequence=len(events),
        head_hash=prev,
        metadata=metadata,
    )
    bundle = RunExport(
        run=info,
        events=events,
        actions=rebuild_actions(new_run_id, events),
        approvals=rebuild_approvals(new_run_id, events),
    )
    report = RunReport(
        run_id=new_run_id,
        original_run_id=run.run_id,
        original_status=run.status,
        status=str(status),
        original_events=len(run.events),
        events=len(events),
        verified=run.verified,
        head=f"{len(events)}:{prev}" if events else None,
        missing_blobs=run.missing_blobs,
        mapped_events=mapped_originals,
        kept_events=sum(kept.values()),
        mapped=[
            MappedCount(original_type=o, type=t, events=n) for (o, t), n in sorted(mapped.items())
        ],
        kept=[KeptCount(original_type=o, events=n, why=w) for (o, w), n in sorted(kept.items())],
    )
    return bundle, report


def _storable(value: Any) -> Any:
    try:
        canonical_bytes(value)
    except (UsageError, ValueError, TypeError):
        return None if value is None else _short_json(value)
    return value


# -- the whole import -------------------------------------------------------------------------


def import_original(
    path: str,
    target: Callable[[], Storage | None],
    *,
    run_ids: Iterable[str] = (),
    new_id: str | None = None,
    dry_run: bool = False,
    unverified: bool = False,
) -> MigrationReport:
    """Read the original store at ``path`` and import its runs (or ``run_ids``) into the
    store ``target()`` opens: every run in one transaction, re-verified, or nothing at all.

    Everything is read, verified and mapped before ``target`` is called, so a refused
    original leaves the target store untouched (not even created). ``new_id`` imports the
    one selected run under another id (a second import of the same run is refused
    otherwise: the run exists). ``dry_run`` writes nothing and reports what would be
    imported; a damaged run is then listed as refused instead of raising; ``target`` may
    then return None (a store that does not exist yet).
    """
    wanted = list(dict.fromkeys(run_ids))
    if new_id is not None and len(wanted) != 1:
        raise UsageError(
            "--as renames one run: name it with exactly one --run",
            code="usage.invalid",
            hint="continuum import --from-original FILE.db --run ORIGINAL --as NEW",
        )
    with OriginalReader(path) as reader:
        info = reader.info
        missing = [r for r in wanted if r not in info.run_ids]
        if missing:
            raise NotFoundError(
                f"the original store has no run {missing[0]!r}",
                code="not_found.run",
                run_id=missing[0],
                hint="see its runs with `continuum import --from-original FILE --dry-run`",
                runs=info.run_ids[:20],
            )
        selected = wanted or info.run_ids
        source = str(Path(path).absolute())
        reports: list[RunReport] = []
        bundles: list[RunExport] = []
        for original_id in selected:
            new_run = new_id or original_id
            try:
                run = reader.read_run(original_id, unverified=unverified)
                bundle, report = build_run(
                    run,
                    _usable_id(new_run, original_id, new_id),
                    source=source,
                    schema_version=info.schema_version,
                )
            except (IntegrityError, UsageError) as e:
                if not dry_run:
                    raise
                reports.append(
                    RunReport(
                        run_id=new_run,
                        original_run_id=original_id,
                        verified=False,
                        refused=e.to_dict(),
                    )
                )
                continue
            bundles.append(bundle)
            reports.append(report)
    store = target()
    existing = _existing(store, [b.run.run_id for b in bundles])
    for report in reports:
        report.exists = report.run_id in existing
    if not dry_run and existing:
        taken = sorted(existing)[0]
        raise _exists(taken, original=next(r.original_run_id for r in reports if r.run_id == taken))
    if not dry_run and bundles:
        assert store is not None
        try:
            import_checked(store, bundles)  # one transaction, re-verified inside and after
        except UsageError as e:
            if e.code != "usage.run_exists":
                raise
            raise _exists(str(e.fields.get("run_id", "")) or reports[0].run_id) from None
    return MigrationReport(
        source=source,
        schema_version=info.schema_version,
        dry_run=dry_run,
        runs=reports,
        totals={
            "runs": len(bundles),
            "refused": sum(r.refused is not None for r in reports),
            "original_events": sum(r.original_events for r in reports),
            "events": sum(r.events for r in reports),
            "mapped": sum(r.mapped_events for r in reports),
            "kept": sum(r.kept_events for r in reports),
        },
    )


def _usable_id(target: str, original_id: str, new_id: str | None) -> str:
    try:
        check_run_id(target)
    except UsageError as e:
        hint = (
            "choose another id with --as"
            if new_id is not None
            else f"import it under another id: --run {quoted(original_id, limit=60)} --as NEW_ID"
        )
        raise UsageError(
            f"{e.message} (original run {quoted(original_id, limit=60)})",
            code=e.code,
            hint=hint,
            run_id=original_id,
        ) from None
    return target


def _existing(store: Storage | None, ids: list[str]) -> set[str]:
    found = set()
    for run_id in ids:
        if store is None:
            break
        try:
            store.get_run(run_id)
        except NotFoundError:
            continue
        except ContinuumError:
            raise
        found.add(run_id)
    return found


def _exists(run_id: str, original: str | None = None) -> UsageError:
    was = f" (original run {quoted(original, limit=60)})" if original and original != run_id else ""
    return UsageError(
        f"run {run_id!r}{was} already exists in this store; nothing was imported",
        code="usage.run_exists",
        run_id=run_id,
        hint="it was imported before (see `continuum inspect RUN`); to import it again under "
        "another id: --run ORIGINAL --as NEW_ID",
    )

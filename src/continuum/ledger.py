"""The two-phase action ledger: intercept, perform, complete (SPEC 6).

``intercept`` is one serialized write transaction: it looks the action up in the index
by its dedup key, decides, appends the event and updates the index together, so for one
key exactly one caller across threads, processes and hosts gets ``proceed: true``.
Index rows are built with the fold's own handler (``apply_action_event``), so the index
is the fold's view of each action by construction.
"""

from __future__ import annotations

import os
import posixpath
import socket
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from continuum.canonical import canonical_json, digest
from continuum.errors import (
    IntegrityError,
    InvalidTransitionError,
    NotFoundError,
    ReplayWideningError,
    UsageError,
)
from continuum.events import EventType
from continuum.faults import fault_point
from continuum.projection import ActionRecord, apply_action_event
from continuum.store.base import ActionRow, Storage, WriteTx
from continuum.types import ActionStatus, Origin, ReplayContract

DEFAULT_LEASE_SECONDS = 30.0


class InterceptResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    proceed: bool
    status: str  # started | completed | in_progress | unknown | reconcile_required | compensated
    action_id: str
    action_key: str
    attempt: int
    replay: ReplayContract
    operation_key: str | None = None
    external_id: str | None = None
    previous_result: Any = None
    matched_by: str | None = None  # key | arguments | fallback (None for a new action)
    guidance: str


# -- identity ------------------------------------------------------------------------------


def _looks_like_path(value: str) -> bool:
    if not value or "://" in value or any(c.isspace() for c in value) or len(value) > 4096:
        return False
    return value.startswith(("/", "./", "../", "~/")) or "/" in value


def normalize_arguments(value: Any, cwd: str) -> Any:
    """Canonical arguments: path-like strings made absolute and normalized lexically.

    Lexical only (no symlink resolution, no file system access): ``out/a.txt`` run from
    ``/w`` and ``/w/out/./a.txt`` are the same identifier.
    """
    if isinstance(value, dict):
        return {k: normalize_arguments(v, cwd) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize_arguments(v, cwd) for v in value]
    if isinstance(value, str) and _looks_like_path(value) and not value.startswith("~"):
        return posixpath.normpath(posixpath.join(cwd, value))
    return value


def _leaves(value: Any, out: list[str]) -> list[str]:
    if isinstance(value, dict):
        for v in value.values():
            _leaves(v, out)
    elif isinstance(value, list):
        for v in value:
            _leaves(v, out)
    else:
        out.append(canonical_json(value))
    return out


class ActionIdentity(BaseModel):
    model_config = ConfigDict(frozen=True)

    action_id: str
    action_key: str
    dedup_key: str
    fallback_key: str | None
    operation_key: str
    normalized_arguments: Any


def action_identity(run_id: str, action_type: str, arguments: Any, key: str | None,
                    cwd: str) -> ActionIdentity:
    """Stable identity of an action: from the business key, else from its arguments.

    Without a key, a fallback key built from the multiset of leaf values (field names
    dropped, paths normalized) matches the same call with renamed fields.
    """
    normalized = normalize_arguments(arguments, cwd)
    if key is not None:
        dedup = digest(["key", action_type, key])
        action_key, fallback = f"{action_type}:{key}", None
    else:
        dedup = digest(["args", action_type, normalized])
        action_key = f"{action_type}:args:{dedup[:12]}"
        fallback = digest(["fallback", action_type, sorted(_leaves(normalized, []))])
    return ActionIdentity(
        action_id="act_" + digest([run_id, dedup])[:24],
        action_key=action_key,
        dedup_key=dedup,
        fallback_key=fallback,
        operation_key="op_" + digest(["operation", run_id, dedup])[:32],
        normalized_arguments=normalized,
    )


# -- owners and leases --------------------------------------------------------------------


def _proc_stat(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/PID/stat (state first), or None where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
        return data.rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _process_start(pid: int) -> str | None:
    fields = _proc_stat(pid)
    return fields[19] if fields and len(fields) > 19 else None  # field 22: start time in ticks


def current_owner() -> dict[str, Any]:
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "start": _process_start(pid)}


def owner_alive(owner: dict[str, Any], lease_expires: float | None, now: float) -> bool:
    """Is the process that intercepted still there to finish the action?

    Same host: its process id (and start time, against pid reuse) tells at once.
    Another host: only the lease can tell.
    """
    if owner.get("host") == socket.gethostname() and isinstance(owner.get("pid"), int):
        pid = owner["pid"]
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        fields = _proc_stat(pid)
        if fields is None:
            return True  # kill() says it exists and /proc cannot say more
        if fields[0] in ("Z", "X"):
            return False  # a zombie nobody reaped (common in containers) is dead
        start = fields[19] if len(fields) > 19 else None
        return start is None or owner.get("start") in (None, start)
    return lease_expires is not None and lease_expires > now


# -- the index, as read -----------------------------------------------------------------


def _damaged_index(run_id: str, action_id: str, detail: str) -> IntegrityError:
    return IntegrityError(
        f"the action index of run {run_id!r} is damaged at {action_id}: {detail}",
        code="integrity.index_mismatch",
        hint=f"run `continuum verify {run_id}`; nothing was changed and nothing may proceed",
        run_id=run_id, action_id=action_id,
    )


def _found_once(run_id: str, by_id: ActionRow | None, by_key: ActionRow | None) -> ActionRow | None:
    """The same row through both of its unique indexes, or neither.

    A damaged index entry would otherwise hide a completed action, and the next intercept
    would tell its caller to perform it again.
    """
    if by_id is None and by_key is None:
        return None
    if by_id is None or by_key is None or by_id.action_id != by_key.action_id:
        found = by_id or by_key
        assert found is not None
        raise _damaged_index(run_id, found.action_id, "found by one of its keys but not the other")
    return by_key


def _record(row: ActionRow) -> ActionRecord:
    try:
        return ActionRecord.model_validate(row.record)
    except ValidationError as e:
        raise _damaged_index(row.run_id, row.action_id, "the record is not valid") from e


# -- the ledger ---------------------------------------------------------------------------

_GUIDANCE = {
    "started": "Perform the side effect now, then call complete (or fail) with this action_key.",
    "completed": "Already done: do not perform it again; use the stored result and external_id.",
    "in_progress": "Another live process is performing this action right now: do not perform it; "
                   "check again later.",
    "unknown": "This action was interrupted and may or may not have happened. Do not perform it "
               "again: check the external system, then reconcile it (occurred true/false).",
    "reconcile_required": "This action was interrupted; its contract requires reconciliation: check "
                          "the external system, then call reconcile with occurred true/false.",
    "compensated": "This action was done and later undone (compensated); use a new key to redo it.",
}


class ActionLedger:
    def __init__(self, store: Storage, *, origin: Origin = Origin.DETERMINISTIC,
                 lease_seconds: float = DEFAULT_LEASE_SECONDS, cwd: str | None = None,
                 clock: Callable[[], float] = time.time,
                 owner: dict[str, Any] | None = None) -> None:
        self.store, self.origin, self.lease_seconds = store, origin, lease_seconds
        self.cwd = cwd or os.getcwd()
        self.clock = clock
        self.owner = owner or current_owner()
        # Actions this ledger started and has not settled: their leases are ours to renew.
        self.held: set[tuple[str, str]] = set()

    def _apply(self, tx: WriteTx, row: ActionRow | None, type: EventType,
               payload: dict[str, Any], origin: Origin, lease: float | None) -> ActionRecord:
        event = tx.append(type, payload, source=origin)
        record = apply_action_event(row.record if row else None, event)
        assert record is not None
        tx.put_action(ActionRow(run_id=tx.run.run_id, action_id=record["action_id"],
                                record=record, lease_expires=lease))
        return ActionRecord.model_validate(record)

    def intercept(self, run_id: str, action_type: str, arguments: Any = None, *,
                  key: str | None = None, replay: ReplayContract | str | None = None,
                  approval_id: str | None = None, origin: Origin | None = None) -> InterceptResult:
        if not isinstance(action_type, str) or not action_type.strip():
            raise UsageError("action_type must be a non-empty string", code="usage.bad_action_type",
                             hint="name the kind of side effect, e.g. send_invoice")
        if key is not None and (not isinstance(key, str) or not key.strip()):
            raise UsageError("key must be a non-empty string", code="usage.bad_key",
                             hint="use a stable business key such as invoice:INV-001")
        try:
            requested = ReplayContract(replay) if replay is not None else None
        except ValueError:
            raise UsageError(f"replay {replay!r} is not a replay contract", code="usage.bad_replay",
                             hint="use never, reconcile, idempotent or safe") from None
        canonical_json(arguments)  # refuse non-JSON arguments before locking
        ident = action_identity(run_id, action_type, arguments, key, self.cwd)
        origin = origin or self.origin
        now = self.clock()
        with self.store.write(run_id) as tx:
            row = _found_once(run_id, tx.find_action(action_id=ident.action_id),
                              tx.find_action(dedup_key=ident.dedup_key))
            matched = "key" if key is not None else "arguments"
            if row is None and ident.fallback_key is not None:
                row, matched = tx.find_action(fallback_key=ident.fallback_key), "fallback"
            if row is None:
                contract = requested or ReplayContract.NEVER
                rec = self._apply(tx, None, EventType.ACTION_INTERCEPTED, {
                    "action_id": ident.action_id, "action_key": ident.action_key,
                    "action_type": action_type, "key": key, "dedup_key": ident.dedup_key,
                    "fallback_key": ident.fallback_key, "arguments": arguments,
                    "replay": str(contract), "operation_key": ident.operation_key,
                    "owner": self.owner, "approval_id": approval_id,
                }, origin, now + self.lease_seconds)
                result = self._result(rec, True, "started", None)
            else:
                result = self._decide(tx, row, requested, origin, now, matched)
        if result.proceed:
            self.held.add((run_id, result.action_id))
        fault_point("after_intercept_commit")
        return result

    def _result(self, rec: ActionRecord, proceed: bool, status: str, matched: str | None,
                extra: str = "") -> InterceptResult:
        replay = ReplayContract(rec.replay)
        return InterceptResult(
            proceed=proceed, status=status, action_id=rec.action_id, action_key=rec.action_key,
            attempt=rec.attempt, replay=replay,
            operation_key=rec.operation_key if proceed or replay == ReplayContract.IDEMPOTENT else None,
            external_id=rec.external_id, previous_result=rec.result if status == "completed" else None,
            matched_by=matched, guidance=(_GUIDANCE[status] + extra),
        )

    def _decide(self, tx: WriteTx, row: ActionRow, requested: ReplayContract | None,
                origin: Origin, now: float, matched: str) -> InterceptResult:
        rec = _record(row)
        stored = ReplayContract(rec.replay)
        if requested is not None and requested.width > stored.width:
            raise ReplayWideningError(
                f"action {rec.action_key} was intercepted with replay={stored}; "
                f"a later intercept may not widen it to {requested}",
                hint=f"intercept again with replay={stored} (or narrower), or use a new key",
                action_key=rec.action_key, stored=str(stored), requested=str(requested),
            )
        contract = requested if requested is not None else stored
        status = rec.status
        if status == ActionStatus.COMPLETED:
            return self._result(rec, False, "completed", matched)
        if status == ActionStatus.COMPENSATED:
            return self._result(rec, False, "compensated", matched)
        if status == ActionStatus.STARTED and owner_alive(rec.owner, row.lease_expires, now):
            return self._result(rec, False, "in_progress", matched)
        lease = now + self.lease_seconds
        if status == ActionStatus.FAILED or contract in (ReplayContract.SAFE, ReplayContract.IDEMPOTENT):
            # Certainly not done, or the contract allows running it again: a new attempt.
            rec = self._apply(tx, row, EventType.ACTION_RETRIED, {
                "action_id": rec.action_id, "attempt": rec.attempt + 1, "owner": self.owner,
                "reason": "failed" if status == ActionStatus.FAILED else f"replay={contract}",
            }, origin, lease)
            return self._result(rec, True, "started", matched)
        if status == ActionStatus.STARTED:
            rec = self._apply(tx, row, EventType.ACTION_MARKED_UNKNOWN, {
                "action_id": rec.action_id,
                "reason": "interrupted: the process that intercepted it is gone",
            }, origin, None)
        if contract == ReplayContract.RECONCILE:
            return self._result(rec, False, "reconcile_required", matched)
        return self._result(rec, False, "unknown", matched)

    # -- transitions by reference -----------------------------------------------------------

    def _transition(self, run_id: str, action_ref: str, allowed: set[ActionStatus],
                    type: EventType, payload: dict[str, Any], origin: Origin | None,
                    verb: str) -> ActionRecord:
        with self.store.write(run_id) as tx:
            row = tx.find_action(action_id=action_ref) or tx.find_action(action_key=action_ref)
            if row is None:
                raise NotFoundError(
                    f"action {action_ref!r} not found in run {run_id!r}", code="not_found.action",
                    hint=f"list actions with `continuum actions {run_id}`",
                    run_id=run_id, action=action_ref)
            rec = _record(row)
            if rec.status not in allowed:
                raise InvalidTransitionError(
                    f"cannot {verb} action {rec.action_key}: it is {rec.status}",
                    hint="list actions to see its state; "
                         + ("it is already settled" if not rec.status.unresolved else
                            "reconcile it instead"),
                    action_key=rec.action_key, status=str(rec.status))
            new = self._apply(tx, row, type, {"action_id": rec.action_id, **payload},
                              origin or self.origin, None)
        if new.status != ActionStatus.STARTED:
            self.held.discard((run_id, new.action_id))
        fault_point(f"after_{verb}_commit")
        return new

    def complete(self, run_id: str, action_ref: str, *, external_id: str | None = None,
                 result: Any = None, origin: Origin | None = None) -> ActionRecord:
        canonical_json(result)
        return self._transition(run_id, action_ref, {ActionStatus.STARTED}, EventType.ACTION_COMPLETED,
                                {"external_id": external_id, "result": result}, origin, "complete")

    def fail(self, run_id: str, action_ref: str, *, error: str | None = None,
             certain: bool = False, origin: Origin | None = None) -> ActionRecord:
        """Record a failure; without ``certain`` the effect may have happened: ``unknown``."""
        if certain:
            return self._transition(run_id, action_ref, {ActionStatus.STARTED, ActionStatus.UNKNOWN},
                                    EventType.ACTION_FAILED, {"error": error, "certain": True},
                                    origin, "fail")
        return self._transition(run_id, action_ref, {ActionStatus.STARTED},
                                EventType.ACTION_MARKED_UNKNOWN,
                                {"reason": error or "failed; outcome uncertain"}, origin, "fail")

    def reconcile(self, run_id: str, action_ref: str, *, occurred: bool,
                  external_id: str | None = None, note: str | None = None,
                  origin: Origin | None = None) -> ActionRecord:
        return self._transition(run_id, action_ref, {ActionStatus.UNKNOWN, ActionStatus.STARTED},
                                EventType.ACTION_RECONCILED,
                                {"occurred": bool(occurred), "external_id": external_id, "note": note},
                                origin, "reconcile")

    def compensate(self, run_id: str, action_ref: str, *, note: str | None = None,
                   origin: Origin | None = None) -> ActionRecord:
        return self._transition(run_id, action_ref, {ActionStatus.COMPLETED},
                                EventType.ACTION_COMPENSATED, {"note": note}, origin, "compensate")

    def renew_lease(self, run_id: str, action_ref: str) -> None:
        row = self.store.get_action(run_id, action_ref)
        if row is None:
            raise NotFoundError(f"action {action_ref!r} not found", code="not_found.action",
                                hint="check the action_key")
        self.store.renew_lease(run_id, row.action_id, self.clock() + self.lease_seconds)

    def renew_held_leases(self) -> int:
        """Extend the lease of every action this ledger is performing; returns how many.

        Another host cannot see whether this process is alive, only the lease: a long
        side effect keeps its lease fresh so it is not judged interrupted.
        """
        until = self.clock() + self.lease_seconds
        for run_id, action_id in sorted(self.held):
            self.store.renew_lease(run_id, action_id, until)
        return len(self.held)

    def actions(self, run_id: str) -> list[ActionRecord]:
        self.store.get_run(run_id)
        return [_record(r) for r in self.store.list_actions(run_id)]

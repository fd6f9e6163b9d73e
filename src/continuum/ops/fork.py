"""Forks: a new run that starts as a verified prefix of another run of the same store.

``fork_run`` (``continuum fork RUN --at SEQ --as NEW``, ``Continuum.fork``) builds run
``NEW`` as::

    1..SEQ      a copy of RUN's events 1..SEQ, read verified: the same types, payloads,
                origins and timestamps, re-chained under NEW (new event ids and hashes,
                the same sequences, a causer inside the prefix renamed to its copy); an
                action id the ledger derived from RUN's id is derived from NEW's (with an
                approval's binding to it), so the ledger finds the prefix's actions
    SEQ+1       run_forked {from_run, through_sequence: SEQ, through_hash: RUN's hash
                of event SEQ}: where the fork came from (State.forked_from)
    ...         action_marked_unknown for each action still ``started`` in the fork:
                it was open at the fork point, so nobody in NEW can know whether it ran,
                and a live owner in RUN cannot make it look in progress here
    last        checkpointed: a checkpoint of the fork at its head

Effects completed in the prefix stay completed (an intercept in NEW answers
``completed``, never runs them again); the action and approval indexes are rebuilt from
the fork's events with the fold's own handlers (``transfer.rebuild_actions``).

A ``checkpointed`` event of the prefix is copied as it is (a fact of the history, and the
sequences stay aligned with RUN's), but not its checkpoint row: that row holds RUN's state,
not NEW's. The checkpoint taken at the end is the fork's own. Refused, with nothing
written: a SEQ outside 1..head (``usage.bad_sequence``), a NEW that exists or is not a run
id, a RUN whose old history was archived (its events from 1 are not in the store:
``usage.fork_archived``), and a fork point inside history imported without a trusted
signature (the ``history_imported`` marker that distrusts it comes after SEQ, so the
fork would count that history as this store's own: ``usage.fork_imported``).

Children: a ``child_started`` of the prefix is copied, but the child's ``run_started``
names RUN as its parent, so by the family rule (both sides agree) it is not NEW's child.

Atomicity: the whole fork is one ``Storage.import_runs`` transaction (the run record, the
events, the indexes and the checkpoint), so a crash leaves either no run NEW or the whole
fork; a run without ``run_forked`` at ``through_sequence + 1`` is not a fork. RUN is only
read. Notifications are not sent for the fork's events (the import path writes no
outbox rows): the fork's unknown actions show in its state and ``continuum actions``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from continuum.errors import NotFoundError, UsageError
from continuum.eventlog.canonical import digest
from continuum.eventlog.event_model import Event, seal
from continuum.eventlog.events import LIFECYCLE_STATUS, EventType
from continuum.eventlog.payloads import check_payload
from continuum.ledger.approvals import binding_of
from continuum.ops.transfer import import_checked, rebuild_actions, rebuild_approvals
from continuum.recovery.checkpoints import CHECKPOINT_FORMAT, checkpoint_body
from continuum.state.projection import project
from continuum.store import CheckpointRow, RunExport, RunInfo, Storage
from continuum.store.base import check_run_id, format_timestamp
from continuum.store.tx import new_event_id
from continuum.types import ActionStatus, Origin, RunStatus
from continuum.untrusted import quoted

FORK_REASON = "fork"


class ForkResult(BaseModel):
    """What ``fork_run`` made: run ``run_id`` from ``from_run``'s events 1..``through_sequence``
    (whose last hash in the original is ``through_hash``)."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    from_run: str
    through_sequence: int
    through_hash: str
    marker_sequence: int  # the run_forked event
    marked_unknown: list[str]  # action keys open at the fork point, now unknown in the fork
    checkpoint_sequence: int  # the checkpointed event that ends the fork
    head: str  # the fork's head, SEQ:HASH


def _now() -> str:
    return format_timestamp(datetime.now(UTC))


def _refused(message: str, code: str, hint: str, **fields: Any) -> UsageError:
    return UsageError(f"{message}; nothing was written", code=code, hint=hint, **fields)


def _check_request(store: Storage, run_id: str, at: int, new_run_id: str) -> RunInfo:
    """RUN, once every rule a fork must meet before reading its events holds."""
    run = store.get_run(run_id)  # not_found.run
    check_run_id(new_run_id)
    try:
        store.get_run(new_run_id)
    except NotFoundError:
        pass
    else:
        raise _refused(
            f"run {quoted(new_run_id)} already exists",
            "usage.run_exists",
            "fork into a new run id (--as NEW)",
            run_id=new_run_id,
        )
    if type(at) is not int or not 1 <= at <= run.head_sequence:
        raise _refused(
            f"run {quoted(run_id)} has no event {at!r} to fork at "
            f"(its log ends at {run.head_sequence})",
            "usage.bad_sequence",
            f"use a sequence from 1 to {run.head_sequence}"
            if run.head_sequence
            else "the run has no events yet: nothing to fork",
            run_id=run_id,
        )
    base = store.archive_base(run_id)
    if base is not None:
        raise _refused(
            f"run {quoted(run_id)} had events 1..{base.through} archived (marker at "
            f"sequence {base.marker_sequence}); a fork copies the log from event 1",
            "usage.fork_archived",
            "fork a run whose whole history is in the store (a run imported from an "
            "export of the archived events is one)",
            run_id=run_id,
        )
    return run


def _ledger_id(run_id: str, dedup_key: str) -> str:
    """The action id the ledger derives for ``dedup_key`` in ``run_id`` (``identity.py``)."""
    return "act_" + digest([run_id, dedup_key])[:24]


def _renamed_payload(
    event: Event, run_id: str, new_run_id: str, actions: dict[str, str]
) -> dict[str, Any]:
    """The payload in the fork. An action id the ledger derived from the original's run id
    is derived again from the fork's (else an intercept in the fork would not find the
    action its prefix recorded, and would run it again); an approval bound to that action
    is bound to its new id. ``actions`` (old id -> new id) grows as intercepts are met."""
    p = event.payload
    if event.type == EventType.ACTION_INTERCEPTED:
        old, dedup = p.get("action_id"), p.get("dedup_key")
        if isinstance(old, str) and isinstance(dedup, str) and old == _ledger_id(run_id, dedup):
            actions[old] = _ledger_id(new_run_id, dedup)
    old = p.get("action_id")
    if not isinstance(old, str) or old not in actions:
        return p
    out = {**p, "action_id": actions[old]}
    args_hash = p.get("arguments_hash")
    if (
        event.type == EventType.APPROVAL_REQUESTED
        and isinstance(args_hash, str)
        and p.get("binding") == binding_of(old, args_hash)
    ):
        out["binding"] = binding_of(actions[old], args_hash)
    return out


def _copied(run_id: str, new_run_id: str, prefix: list[Event]) -> list[Event]:
    """``prefix`` re-chained under ``new_run_id``: new event ids and hashes, action ids
    derived from the run id derived again (``_renamed_payload``), the rest as it was."""
    renamed: dict[str, str] = {}
    actions: dict[str, str] = {}
    out: list[Event] = []
    prev_hash: str | None = None
    for event in prefix:
        event_id = new_event_id()
        renamed[event.event_id] = event_id
        causer = event.causer_event_id
        copy = seal(
            event_id=event_id,
            run_id=new_run_id,
            sequence=event.sequence,
            type=str(event.type),
            timestamp=event.timestamp,
            payload=_renamed_payload(event, run_id, new_run_id, actions),
            causer_event_id=renamed.get(causer, causer) if causer is not None else None,
            source=event.source,
            prev_hash=prev_hash,
        )
        out.append(copy)
        prev_hash = copy.hash
    return out


def _sealed_after(
    events: list[Event], type_: EventType, payload: dict[str, Any], origin: Origin
) -> Event:
    check_payload(str(type_), payload)
    last = events[-1]
    event = seal(
        event_id=new_event_id(),
        run_id=last.run_id,
        sequence=last.sequence + 1,
        type=str(type_),
        timestamp=_now(),
        payload=payload,
        causer_event_id=None,
        source=origin,
        prev_hash=last.hash,
    )
    events.append(event)
    return event


def _status(events: list[Event]) -> RunStatus:
    status = RunStatus.ACTIVE
    for event in events:
        lifecycle = LIFECYCLE_STATUS.get(event.type)  # type: ignore[call-overload]
        if lifecycle is not None:
            status = RunStatus(lifecycle)
    return status


def build_fork(
    run: RunInfo, prefix: list[Event], new_run_id: str, *, origin: Origin
) -> tuple[RunExport, ForkResult]:
    """The fork of ``run`` through the last event of ``prefix`` (its events from 1, read
    verified), as one run ready for ``import_runs``, and what it holds (pure)."""
    through = prefix[-1]
    events = _copied(run.run_id, new_run_id, prefix)
    marker = _sealed_after(
        events,
        EventType.RUN_FORKED,
        {
            "from_run": run.run_id,
            "through_sequence": through.sequence,
            "through_hash": through.hash,
        },
        origin,
    )
    state = project(new_run_id, events)
    unknown: list[str] = []
    for action in state.actions.values():
        if action.status == ActionStatus.STARTED:
            _sealed_after(
                events,
                EventType.ACTION_MARKED_UNKNOWN,
                {
                    "action_id": action.action_id,
                    "reason": f"open at the fork point: started in run {run.run_id!r} "
                    f"at or before sequence {through.sequence}, outcome unknown in the fork",
                },
                origin,
            )
            unknown.append(action.action_key)
    state_json, state_hash = checkpoint_body(project(new_run_id, events))
    sealing = _sealed_after(
        events,
        EventType.CHECKPOINTED,
        {
            "through_sequence": events[-1].sequence,
            "state_hash": state_hash,
            "reason": FORK_REASON,
            "format": CHECKPOINT_FORMAT,
        },
        origin,
    )
    checkpoint = CheckpointRow(
        run_id=new_run_id,
        sequence=sealing.sequence - 1,
        event_sequence=sealing.sequence,
        state_json=state_json,
        state_hash=state_hash,
        created_at=sealing.timestamp,
    )
    info = RunInfo(
        run_id=new_run_id,
        goal=run.goal,
        status=_status(events),
        created_at=_now(),
        head_sequence=sealing.sequence,
        head_hash=sealing.hash,
        metadata=dict(run.metadata),
    )
    bundle = RunExport(
        run=info,
        events=events,
        checkpoints=[checkpoint],
        actions=rebuild_actions(new_run_id, events),
        approvals=rebuild_approvals(new_run_id, events),
    )
    result = ForkResult(
        run_id=new_run_id,
        from_run=run.run_id,
        through_sequence=through.sequence,
        through_hash=through.hash,
        marker_sequence=marker.sequence,
        marked_unknown=unknown,
        checkpoint_sequence=sealing.sequence,
        head=f"{sealing.sequence}:{sealing.hash}",
    )
    return bundle, result


def fork_run(
    store: Storage, run_id: str, at: int, new_run_id: str, *, origin: Origin
) -> ForkResult:
    """Fork ``run_id`` at sequence ``at`` into the new run ``new_run_id`` (module
    docstring); the events written for the fork itself carry ``origin``. Raises
    ``NotFoundError`` (``not_found.run``), ``UsageError`` (``usage.bad_sequence``,
    ``usage.run_exists``, ``usage.bad_run_id``, ``usage.fork_archived``,
    ``usage.fork_imported``) and ``IntegrityError`` for a prefix that does not verify;
    a call that raises wrote nothing."""
    run = _check_request(store, run_id, at, new_run_id)
    prefix: list[Event] = []
    marker: int | None = None  # a history_imported marker after SEQ
    for event in store.iter_events(run_id):  # verified as read, to the head: one pass
        if event.sequence <= at:
            prefix.append(event)
        elif marker is None and event.type == EventType.HISTORY_IMPORTED:
            marker = event.sequence
    if marker is not None:
        raise _refused(
            f"events 1..{at} of run {quoted(run_id)} came in an import this store does "
            f"not trust, and the marker saying so is at sequence {marker}, after the fork "
            "point",
            "usage.fork_imported",
            f"fork at sequence {marker} or later",
            run_id=run_id,
        )
    if len(prefix) != at or prefix[-1].sequence != at:
        raise _refused(
            f"run {quoted(run_id)} has no event {at} to fork at",
            "usage.bad_sequence",
            "use a sequence of its log",
            run_id=run_id,
        )
    bundle, result = build_fork(run, prefix, new_run_id, origin=origin)
    import_checked(store, [bundle])  # one transaction; re-verified inside it and after
    return result

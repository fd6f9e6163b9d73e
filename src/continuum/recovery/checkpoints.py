"""Checkpoints and the state a resume works from, flat in the size of the history.

A run whose work is side effects accumulates settled actions (completed, failed,
compensated) without end. They stay answerable in the action index, which the ledger
writes in the same transaction as their events, so the state a resume needs holds only
the *open* ones (``is_open``): unresolved, failed on an agent's word, or completed under
an approval that may still be revoked. That lean state is what a checkpoint stores
(format 2), and it is rebuilt as

    lean state = restore(latest valid checkpoint)
                 + the events after it, folded (their action events aside)
                 + for each action those events touched: its index row, if it is open

which equals ``lean(project(all events))`` because the index equals the fold's record of
every action (``verify`` checks exactly that, so an edited index is still caught; a
property test checks the equality). A checkpoint of format 1 (the whole state) still
reads: its settled actions are dropped. A format newer than this code knows is refused
with a warning and the state is folded from the log instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from continuum.errors import HistoryArchivedError, UsageError
from continuum.eventlog.canonical import canonical_json, digest, parse_json
from continuum.eventlog.events import EventLike, EventType
from continuum.eventlog.payloads import payload_problem
from continuum.recovery.plain_state import CHECKPOINT_FORMAT as CHECKPOINT_FORMAT
from continuum.recovery.plain_state import valid_checkpoint_text
from continuum.state.projection import fold, project
from continuum.state.records import ActionRecord, State
from continuum.store import CheckpointRow, Storage, WriteTx
from continuum.store.base import StoredCheckpoint
from continuum.types import ActionStatus, Origin

ACTION_TYPES = frozenset(t for t in EventType if t.startswith("action_"))


def is_open(record: ActionRecord) -> bool:
    """Does the recovery engine still need this action? Unresolved, failed on an agent's
    word, or completed under an approval (its revocation asks for a rollback)."""
    return record.needs_human or (
        record.status == ActionStatus.COMPLETED and record.approval_id is not None
    )


def lean(state: State) -> State:
    """``state`` without its settled actions."""
    open_actions = {k: a for k, a in state.actions.items() if is_open(a)}
    if len(open_actions) == len(state.actions):
        return state
    return state.model_copy(update={"actions": open_actions})


def checkpoint_body(state: State) -> tuple[str, str]:
    """(state JSON, its hash) of the lean state, as a checkpoint stores it."""
    state_json = canonical_json(lean(state).model_dump(mode="json"))
    return state_json, digest(parse_json(state_json))


def seal_checkpoint(
    tx: WriteTx, run_id: str, state: State, reason: str | None, source: Origin
) -> tuple[EventLike, str]:
    """Inside ``tx``: append the ``checkpointed`` event for ``state`` (its lean form) and
    store the checkpoint row beside it. Returns the event and the state's hash."""
    state_json, state_hash = checkpoint_body(state)  # settled actions left out
    event = tx.append(
        EventType.CHECKPOINTED,
        {
            "through_sequence": state.sequence,
            "state_hash": state_hash,
            "reason": reason,
            "format": CHECKPOINT_FORMAT,
        },
        source=source,
    )
    tx.put_checkpoint(
        CheckpointRow(
            run_id=run_id,
            sequence=state.sequence,
            event_sequence=event.sequence,
            state_json=state_json,
            state_hash=state_hash,
            created_at=event.timestamp,
        )
    )
    return event, state_hash


def checkpoint_through(store: Storage, run_id: str, event_sequence: int | None) -> int | None:
    """The sequence a checkpoint holds the state through (its ``through_sequence``, what
    ``continuum checkpoint`` printed and a contract names), from the sealed
    ``checkpointed`` event at ``event_sequence`` (``State.last_checkpoint``)."""
    if not event_sequence:
        return None
    for event in store.iter_raw(run_id, event_sequence - 1, upto=event_sequence):
        through = event.payload.get("through_sequence")
        if event.type == EventType.CHECKPOINTED and type(through) is int:
            return through
    return None


def valid_checkpoint(
    store: Storage, run_id: str, upto: int | None = None
) -> tuple[tuple[StoredCheckpoint, State] | None, list[str]]:
    """The latest checkpoint (at or below ``upto``) whose hash matches and whose sealing
    event agrees, restored as a lean state; and a warning for each newer one not used."""
    cp, warnings = valid_checkpoint_text(store, run_id, upto)
    if cp is None:
        return None, warnings
    return (cp, lean(State.model_validate_json(cp.state_json))), warnings


def advance(store: Storage, run_id: str, start: State, events: Sequence[EventLike]) -> State:
    """Fold ``events`` (after ``start``) into a lean state: their action events are taken
    from the index instead, which holds each action's record after every event."""
    touched: list[tuple[str, EventLike]] = []
    others: list[EventLike] = []
    for e in events:
        if e.type in ACTION_TYPES and payload_problem(e.type, e.payload) is None:
            touched.append((e.payload["action_id"], e))
        else:
            others.append(e)  # not an action event, or a malformed one the fold counts
    state = fold(start, others) if others else start
    actions = dict(state.actions)
    malformed, first = state.malformed_events, state.first_malformed
    rows: dict[str, ActionRecord | None] = {}
    for action_id, e in touched:
        if action_id not in rows:
            row = store.get_action(run_id, action_id)
            rows[action_id] = ActionRecord.model_validate(row.record) if row is not None else None
        if rows[action_id] is None and e.type != EventType.ACTION_INTERCEPTED:
            malformed += 1  # a transition of an action the ledger never recorded
            first = e.sequence if first is None else min(first, e.sequence)
    for action_id, record in rows.items():
        if record is not None and is_open(record):
            actions[action_id] = record
        else:
            actions.pop(action_id, None)
    update: dict[str, Any] = {
        "actions": actions,
        "malformed_events": malformed,
        "first_malformed": first,
    }
    if events and events[-1].sequence > state.sequence:
        update.update(sequence=events[-1].sequence, head_hash=events[-1].hash)
    return state.model_copy(update=update)


def lean_state(
    store: Storage, run_id: str, *, upto: int | None = None, start: State | None = None
) -> tuple[State, int | None, list[str]]:
    """The lean state of ``run_id`` (at ``upto``, else at its head), the sequence of the
    checkpoint it was restored from, and the checkpoint warnings.

    ``start``: a lean state of this run known to be right at its sequence (a cache);
    only the events after it are read. With ``upto`` the index (which holds the records
    at the head) cannot serve the actions, so the log is folded from the checkpoint on.
    """
    warnings: list[str] = []
    cp_sequence: int | None = None
    if upto is not None:
        head = store.get_run(run_id).head_sequence
        if not 1 <= upto <= head:
            raise UsageError(
                f"run {run_id!r} has no event {upto} (its log ends at {head})",
                code="usage.bad_sequence",
                hint=f"use a sequence from 1 to {head}",
                run_id=run_id,
            )
    if start is None:
        found, warnings = valid_checkpoint(store, run_id, upto)
        if found is None:
            if upto is not None:
                events = [e for e in store.iter_raw(run_id, upto=upto)]
                return lean(project(run_id, events)), None, warnings
            return lean(project(run_id, store.iter_raw(run_id))), None, warnings
        cp, start = found
        cp_sequence = cp.sequence
    if upto is not None:
        # Events up to ``upto`` only: fold the actions too (the index is at the head).
        state = _fold_full_from(store, run_id, start, upto)
        return lean(state), cp_sequence, warnings
    try:
        events = list(store.iter_raw(run_id, start.sequence, prev_hash=start.head_hash))
    except HistoryArchivedError:
        if cp_sequence is not None:
            raise
        # A cached state from before the run's old history was archived (by another
        # process): start again from the checkpoint the archive took.
        return lean_state(store, run_id)
    return advance(store, run_id, start, events), cp_sequence, warnings


def _fold_full_from(store: Storage, run_id: str, start: State, upto: int) -> State:
    """``start`` plus events up to ``upto``, every action event folded; the actions a
    lean start omitted are taken from the log where these events refer to them."""
    events = list(store.iter_raw(run_id, start.sequence, prev_hash=start.head_hash, upto=upto))
    missing = {
        e.payload.get("action_id")
        for e in events
        if e.type.startswith("action_") and e.type != EventType.ACTION_INTERCEPTED
    } - set(start.actions)
    if missing:  # a settled action touched again: rebuild from the log, exactly
        return project(run_id, store.iter_raw(run_id, upto=upto))
    state = fold(start, events)
    if state.sequence != upto:
        raise UsageError(
            f"run {run_id!r} has no event {upto} (its log ends at {state.sequence})",
            code="usage.bad_sequence",
            hint=f"use a sequence from 1 to {state.sequence}",
            run_id=run_id,
        )
    return state

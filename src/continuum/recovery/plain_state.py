"""A run's state without its actions, as plain data, for a process that needs no models
(a hook: whether a changed dependency holds new effects, what budgets cover the run).

The same state ``checkpoints.lean_state`` builds, read the same way: the latest
checkpoint whose hash matches and whose sealing event agrees (``valid_checkpoint_text``,
which ``checkpoints.valid_checkpoint`` uses too), then the events after it, verified as
read and folded by the fold's own handlers (``fold_plain``); the action events are left
out, as ``advance`` leaves them to the index. What this returns is the JSON form of that
state (``State.model_dump(mode="json")``) but for ``actions`` and the counters of
malformed events, which only the index can complete (tests/property/test_fast_paths.py
compares the two).

Imports the store's plain reads, the fold and the leaves."""

from __future__ import annotations

import copy
import json
from typing import Any, NamedTuple

from continuum.errors import HistoryArchivedError
from continuum.eventlog.canonical import text_digest
from continuum.eventlog.events import EventType
from continuum.eventlog.payloads import payload_ok
from continuum.state.projection import empty_plain, fold_plain
from continuum.store.base import RunHead, Storage, StoredCheckpoint
from continuum.store.own_writes import readable

CHECKPOINT_FORMAT = 2
"""1: the whole state; 2: the state without settled actions (``checkpoints.py``)."""

_ACTION_TYPES = frozenset(t.value for t in EventType if t.startswith("action_"))


def checkpoint_digest(cp: StoredCheckpoint) -> str | None:
    """The digest of a checkpoint's state, or None if it is too damaged to parse."""
    return text_digest(cp.state_json, cp.state_hash)


def valid_checkpoint_text(
    store: Storage, run_id: str, upto: int | None = None
) -> tuple[StoredCheckpoint | None, list[str]]:
    """The latest checkpoint (at or below ``upto``) whose hash matches and whose sealing
    event agrees, in a format this code reads; and a warning for each newer one not used.
    The newest is read alone first: a run keeps many checkpoints, and one is nearly
    always the one used."""
    if upto is None:
        newest = store.stored_checkpoints(run_id, limit=1)
        if not newest:
            return None, []
        if _unusable(store, newest[0]) is None:
            return newest[0], []
    warnings: list[str] = []
    for cp in store.stored_checkpoints(run_id):
        if upto is not None and cp.sequence > upto:
            continue
        why = _unusable(store, cp)
        if why is None:
            return cp, warnings
        warnings.append(why)
    return None, warnings


def _unusable(store: Storage, cp: StoredCheckpoint) -> str | None:
    """Why checkpoint ``cp`` cannot be used (a warning line), or None when it can."""
    sealed = next(
        iter(store.iter_raw(cp.run_id, cp.event_sequence - 1, upto=cp.event_sequence)), None
    )
    payload = sealed.payload if sealed is not None and sealed.type == EventType.CHECKPOINTED else {}
    if checkpoint_digest(cp) != cp.state_hash or payload.get("state_hash") != cp.state_hash:
        return f"checkpoint at sequence {cp.sequence} failed its hash and was not used"
    fmt = payload.get("format", 1)
    if fmt not in (1, CHECKPOINT_FORMAT):
        return (
            f"checkpoint at sequence {cp.sequence} has format {fmt}, newer than "
            "this continuum knows; the state was folded from the log instead"
        )
    return None


class PlainState(NamedTuple):
    """A run's state without its actions (its JSON form, as ``State.model_dump``), and the
    last event read into it (its sequence and hash): where the next read starts."""

    state: dict[str, Any]
    sequence: int
    head_hash: str | None


def state_without_actions(
    store: Storage, run_id: str, start: PlainState | None = None, head: RunHead | None = None
) -> PlainState:
    """The run's state at its head, as plain data, its actions aside (see the module).

    ``start``: what a reader already knew of the run (a ``PlainState`` this function
    returned): only the events after it are read, the link to it verified; ``start`` is
    left as it was. A run whose history was archived since starts again from its
    checkpoint. ``head``: the run's head as the caller just read it; when the store
    object itself wrote every event from ``start`` to that head, they are taken from it
    (``Storage.own_events``: the head's hash commits to them) instead of read back."""
    if start is None:
        cp, _ = valid_checkpoint_text(store, run_id)
        acc = empty_plain(run_id) if cp is None else json.loads(cp.state_json)
        after, prev = (0, None) if cp is None else (acc["sequence"], acc["head_hash"])
        acc["actions"] = {}  # the checkpoint's open ones: the index has them, as they are now
    else:
        acc, after, prev = start.state, start.sequence, start.head_hash
    own = None if start is None or head is None else store.own_events(run_id, after, prev, head)
    if own is not None:  # this object wrote them: sealed after check_payload, so an action
        # event is valid and skipped without parsing it (the fold's rule below)
        after, prev = own[-1][0].sequence, own[-1][0].hash
        folded = [readable(e, text) for e, text in own if e.type not in _ACTION_TYPES]
    else:
        try:
            events = list(store.iter_raw(run_id, after, prev_hash=prev))
        except HistoryArchivedError:
            if start is None:
                raise
            return state_without_actions(store, run_id)
        if events:
            after, prev = events[-1].sequence, events[-1].hash
        folded = [
            e for e in events if e.type not in _ACTION_TYPES or not payload_ok(e.type, e.payload)
        ]
    if folded:  # the fold changes its state in place: never the one a reader holds
        acc = fold_plain(copy.deepcopy(acc) if start is not None else acc, folded)
    return PlainState(acc, after, prev)

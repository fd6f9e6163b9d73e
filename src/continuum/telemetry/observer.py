"""The store's post-commit observer: the events a commit added, turned into spans.

``SpanObserver`` is installed as ``store.observer`` (``CoreStore._committed`` calls it
after every committed write, outside the write lock). It reads the new events back,
and for a settling event finds the event that opened the attempt, from its own memory
when this process intercepted it, else from the log (a process that crashed mid-effect
left the intercept there): so the span it hands to ``sink`` starts when the effect was
intercepted, whichever process settles it.

Whatever goes wrong here is logged on stderr and swallowed by the store: telemetry never
makes an append fail.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from continuum.errors import ContinuumError
from continuum.eventlog.events import EventLike, EventType, RawEvent
from continuum.store import Storage
from continuum.telemetry.spans import (
    FINISHING,
    OPENING,
    RECOVERY,
    SETTLING,
    Action,
    SpanDescription,
    effect_span,
    later_settlement_span,
    recovery_event_span,
    run_span,
)

Sink = Callable[[SpanDescription], None]
MAX_REMEMBERED = 4096  # open attempts this process remembers (the log has the rest)
MAX_SCAN = 100_000  # events read back to find an attempt's opening before giving up


@dataclass
class _Attempt:
    opening: EventLike
    settled: str | None = None  # the outcome that first settled it, once one did


class SpanObserver:
    """Turns committed events into ``SpanDescription``s for ``sink`` (``otel.py``)."""

    def __init__(self, store: Storage, sink: Sink) -> None:
        self.store, self.sink = store, sink
        self._attempts: OrderedDict[tuple[str, str], _Attempt] = OrderedDict()
        self._lock = threading.Lock()  # writers of several threads report here

    def __call__(self, run_id: str, after: int, head: int) -> None:
        for event in self.store.iter_raw(run_id, after, upto=head):
            self.saw(event)

    def saw(self, event: RawEvent) -> None:
        type_ = str(event.type)
        if type_ in OPENING:
            self._remember(event.run_id, event.payload["action_id"], _Attempt(event))
        elif type_ in SETTLING:
            self._settled(event)
        elif type_ in FINISHING:
            run = self.store.get_run(event.run_id)
            try:
                first = next(iter(self.store.iter_raw(event.run_id, 0, upto=1)), None)
            except ContinuumError:  # archived: the span starts when the run was created
                first = None
            started = first if first is not None and first.type == EventType.RUN_STARTED else None
            self.sink(run_span(started, event, run.created_at))
        elif type_ in RECOVERY:
            self.sink(recovery_event_span(event))

    def _remember(self, run_id: str, action_id: str, attempt: _Attempt) -> None:
        key = (run_id, action_id)
        with self._lock:
            self._attempts[key] = attempt
            self._attempts.move_to_end(key)
            while len(self._attempts) > MAX_REMEMBERED:
                self._attempts.popitem(last=False)

    def _settled(self, event: RawEvent) -> None:
        action_id = event.payload["action_id"]
        row = self.store.get_action(event.run_id, action_id)
        if row is None:
            return
        record = row.record
        with self._lock:
            attempt = self._attempts.get((event.run_id, action_id))
        if attempt is None:
            attempt = self._from_log(event, int(record["intercepted_sequence"]))
            if attempt is None:
                return
        action = Action(
            action_id=action_id,
            action_key=str(record.get("action_key", action_id)),
            action_type=str(record.get("action_type", "unknown")),
            attempt=int(attempt.opening.payload.get("attempt", 1)),
        )
        outcome = SETTLING[str(event.type)]
        if attempt.settled is None:
            self.sink(effect_span(action, attempt.opening, event))
        else:
            self.sink(later_settlement_span(action, attempt.opening, event, attempt.settled))
        attempt.settled = attempt.settled or outcome
        self._remember(event.run_id, action_id, attempt)

    def _from_log(self, event: RawEvent, intercepted: int) -> _Attempt | None:
        """The attempt ``event`` settles, read from the log: its latest opening before
        ``event`` and what settled it since, if anything did."""
        if event.sequence - intercepted > MAX_SCAN:
            return None
        action_id = event.payload["action_id"]
        found: _Attempt | None = None
        for earlier in self.store.iter_raw(
            event.run_id, max(intercepted - 1, 0), upto=event.sequence - 1
        ):
            if earlier.payload.get("action_id") != action_id:
                continue
            if earlier.type in OPENING:
                found = _Attempt(earlier)
            elif earlier.type in SETTLING and found is not None and found.settled is None:
                found.settled = SETTLING[str(earlier.type)]
        return found

"""What this store object itself committed last on each run: the tail of events it sealed.

A facade that keeps a run's state in memory (``RunsFacade._plain_state``) brings it up to
date after every write by reading the new events back from the store, verifying each
hash and link. The events this process wrote itself are already in its hands: it sealed
them (hash, link) and they committed in one transaction. ``OwnWrites`` keeps them, and
``since`` hands them back instead of a read, only when they are exactly what the store
holds:

- each committed write is recorded after its COMMIT succeeded (never a rolled-back one);
- the tail is one unbroken chain: a write that did not start at the tail's end (another
  process or store object wrote in between) starts a new tail;
- ``since`` answers only for a stretch that starts inside the tail on the caller's hash
  and ends exactly at the head the caller just read (sequence and hash). Anything else is
  None, and the caller reads the store as before.

Each event is kept with its payload's canonical text (what was hashed and stored); a
reader that needs the payload parses that text (``readable``), as a read would give it:
a caller that changes its arguments after a write changes nothing here. A reader that
only needs an event's type (the plain state skips valid action events) parses nothing. Bounded: the last
``MAX_EVENTS`` events of at most ``MAX_RUNS`` runs, and only of runs a reader asked
about (``since`` watches the run): a store object nobody reads this way (an append-only
writer) keeps nothing. Thread-safe: one lock around a few tuple operations.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import NamedTuple

from continuum.eventlog.events import RawEvent

MAX_EVENTS = 32
MAX_RUNS = 64


class _Tail(NamedTuple):
    after: int  # the sequence the first kept event follows
    after_hash: str | None  # that event's hash (the first kept event's link)
    events: tuple[tuple[RawEvent, str], ...]  # (event, its payload's canonical text)


class OwnWrites:
    """The events one store object committed, per run (see the module)."""

    def __init__(self) -> None:
        self._tails: OrderedDict[str, _Tail] = OrderedDict()
        self._watched: OrderedDict[str, None] = OrderedDict()  # least lately asked first
        self._lock = threading.Lock()

    def watch(self, run_id: str) -> None:
        """Keep what is committed on ``run_id`` from now on."""
        with self._lock:
            self._watch(run_id)

    def _watch(self, run_id: str) -> None:
        # Under the lock. The runs asked about most lately stay watched; one pushed out
        # loses its tail too (it would go stale unwatched) and is watched again when asked.
        self._watched[run_id] = None
        self._watched.move_to_end(run_id)
        while len(self._watched) > 4 * MAX_RUNS:
            dropped, _ = self._watched.popitem(last=False)
            self._tails.pop(dropped, None)

    def committed(
        self,
        run_id: str,
        opened: int,
        opened_hash: str | None,
        sealed: Sequence[tuple[RawEvent, str]],
    ) -> None:
        """A write on ``run_id`` that opened at head ``opened`` (hash ``opened_hash``) and
        appended ``sealed`` has committed."""
        if not sealed or run_id not in self._watched:
            return
        linked, after, link = True, opened, opened_hash
        for event, _ in sealed:
            if event.sequence != after + 1 or event.prev_hash != link:
                linked = False
                break
            after, link = event.sequence, event.hash
        with self._lock:
            if not linked:  # written some other way too (an import): not ours to hand back
                self._tails.pop(run_id, None)
                return
            tail = self._tails.get(run_id)
            if tail is not None and _end(tail) == (opened, opened_hash):
                events = tail.events + tuple(sealed)
                after, after_hash = tail.after, tail.after_hash
            else:
                events, after, after_hash = tuple(sealed), opened, opened_hash
            if len(events) > MAX_EVENTS:
                dropped = len(events) - MAX_EVENTS
                last = events[dropped - 1][0]
                after, after_hash, events = last.sequence, last.hash, events[dropped:]
            self._tails[run_id] = _Tail(after, after_hash, events)
            self._tails.move_to_end(run_id)
            while len(self._tails) > MAX_RUNS:
                self._tails.popitem(last=False)

    def forget(self, run_id: str | None = None) -> None:
        """Drop what is kept of ``run_id`` (None: of every run)."""
        with self._lock:
            if run_id is None:
                self._tails.clear()
            else:
                self._tails.pop(run_id, None)

    def since(
        self, run_id: str, after: int, prev_hash: str | None, head: int, head_hash: str | None
    ) -> list[tuple[RawEvent, str]] | None:
        """The events after ``after`` (whose hash must be ``prev_hash``) up to ``head``
        (whose hash must be ``head_hash``), if this object wrote every one of them; else
        None. Each as it was sealed, with its payload's canonical text: the event's
        ``payload`` is the writer's own object, which it may have changed since; read the
        payload from the text (``readable``)."""
        if head <= after:
            return None
        with self._lock:
            tail = self._tails.get(run_id)
            self._watch(run_id)
        if tail is None or after < tail.after:
            return None
        start, end = after - tail.after, head - tail.after
        if end > len(tail.events):
            return None
        link = tail.after_hash if start == 0 else tail.events[start - 1][0].hash
        last = tail.events[end - 1][0]
        if link != prev_hash or last.hash != head_hash or last.sequence != head:
            return None
        return list(tail.events[start:end])


def readable(event: RawEvent, text: str) -> RawEvent:
    """A kept event with its payload as the store holds it (parsed from its text)."""
    return event._replace(payload=json.loads(text))


def _end(tail: _Tail) -> tuple[int, str | None]:
    last = tail.events[-1][0]
    return last.sequence, last.hash

"""``Event``, the pydantic model of a sealed event for the API edge (``events.py`` has the
types, ``RawEvent`` and the hash; the hot paths use those and never load this module)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from continuum.eventlog.canonical import digest
from continuum.eventlog.events import EventType, event_hash, hashed_fields, known_type
from continuum.types import Origin


class Event(BaseModel):
    """A sealed event as stored: immutable once built (references/contract.md §3).

    ``sequence`` counts from 1 within the run; ``type`` is an ``EventType`` when known,
    else the stored string; ``source`` is the ``Origin`` of whoever recorded it;
    ``prev_hash`` is the previous event's ``hash`` (None for the first) and ``hash`` is
    SHA-256 over the canonical JSON of every other field (``computed_hash``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_id: str
    run_id: str
    sequence: int
    type: EventType | str
    timestamp: str
    payload: dict[str, Any]
    causer_event_id: str | None = None
    source: Origin
    prev_hash: str | None
    hash: str

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str) -> EventType | str:
        return known_type(value)

    def hashed_fields(self) -> dict[str, Any]:
        """Every field but ``hash``, as they are hashed."""
        return hashed_fields(
            event_id=self.event_id,
            run_id=self.run_id,
            sequence=self.sequence,
            type=self.type,
            timestamp=self.timestamp,
            payload=self.payload,
            causer_event_id=self.causer_event_id,
            source=str(self.source),
            prev_hash=self.prev_hash,
        )

    def computed_hash(self) -> str:
        """The hash this event's fields give now (equal to ``hash`` when intact)."""
        return event_hash(self)


_EVENT_FIELDS = frozenset(Event.model_fields)
_set = object.__setattr__


def checked_event(fields: dict[str, Any]) -> Event:
    """An ``Event`` of every field, each already checked (a sealed or verified row: see
    ``store.rows.event_from_raw``), taken as it is: what ``Event.model_construct`` builds
    from the same fields, without its walk over the model's fields (two thirds of its
    cost, paid on every append and every event read). ``fields`` becomes the event's own
    dict. tests/property/test_fast_paths.py holds the two equal, field set included."""
    if fields.keys() != _EVENT_FIELDS:  # never a partial or extra field: the model's way
        return Event.model_construct(**fields)
    event = Event.__new__(Event)
    _set(event, "__dict__", fields)
    _set(event, "__pydantic_fields_set__", set(_EVENT_FIELDS))
    _set(event, "__pydantic_extra__", None)
    _set(event, "__pydantic_private__", None)
    return event


def seal(
    *,
    event_id: str,
    run_id: str,
    sequence: int,
    type: str,
    timestamp: str,
    payload: dict[str, Any],
    causer_event_id: str | None,
    source: Origin,
    prev_hash: str | None,
) -> Event:
    """Build an event and compute its hash over every other field."""
    fields = hashed_fields(
        event_id=event_id,
        run_id=run_id,
        sequence=sequence,
        type=type,
        timestamp=timestamp,
        payload=payload,
        causer_event_id=causer_event_id,
        source=str(source),
        prev_hash=prev_hash,
    )
    return Event(**fields, hash=digest(fields))

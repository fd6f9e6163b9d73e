"""The checks a SQLite backup copy gets besides its chains: its schema, its outbox.

A backup's data used to be trusted as far as its runs verified: a copy edited to add a
trigger (emptying the action index whenever an event is written), its manifest digest
recomputed, passed ``verify-backup`` and ``restore`` (the trigger kept), and after one
append a completed key intercepted again as ``started``. So, before a copy is opened as
a store (opening runs the store's code on it), ``check_layout`` compares its schema with
the one a store of its version has and refuses anything else
(``integrity.backup_schema``); and after its runs verify (chains, the action and approval
indexes against the fold), ``check_outbox`` checks the notification outbox against the
log (``integrity.backup_data``): each row must be about an event of the log, as that event
would have it (its text is not compared: each version renders it its own way).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from continuum.errors import ContinuumError, IntegrityError
from continuum.eventlog.notices import KINDS, NOTIFYING, delivery_id
from continuum.ops.backup_file import backup_refused
from continuum.store import Storage
from continuum.store.approval_outbox import outbox_from_row
from continuum.store.sqlite_backup import layout_of_version, read_layout, read_outbox


def _describe(objects: set[Any]) -> str:
    shown = sorted(objects)[:3]
    text = ", ".join(
        f"{kind} {name!r}" + (f" on {table!r}" if kind != "table" else "")
        for kind, name, table, _ in shown
    )
    return text + (f" and {len(objects) - 3} more" if len(objects) > 3 else "")


def check_layout(path: Path, data: Path, manifest_schema: Any) -> int:
    """The copy's schema is exactly that of a store of its version (tables and their
    columns and constraints, indexes, triggers, views), read before the copy is opened as
    a store (opening runs the store's code on it; a trigger would run with it). Returns
    the version; refuses anything else as ``integrity.backup_schema``."""
    try:
        recorded, objects = read_layout(data)
    except ContinuumError as e:
        raise backup_refused(path, f"the data is not a usable store ({e.message})", "data") from e
    try:
        version = int(str(recorded))
    except ValueError:
        version = -1
    if version != manifest_schema or version < 1:
        raise backup_refused(
            path,
            f"the copy records schema version {recorded!r}, the manifest {manifest_schema!r}",
            "schema",
        )
    expected = layout_of_version(version)
    if objects != expected:
        extra, missing = set(objects) - set(expected), set(expected) - set(objects)
        changed = {o[:3] for o in extra} & {o[:3] for o in missing}
        parts = []
        if changed:
            parts.append("changed: " + _describe({o for o in extra if o[:3] in changed}))
        if extra - {o for o in extra if o[:3] in changed}:
            parts.append(
                "not in a store of version "
                f"{version}: " + _describe({o for o in extra if o[:3] not in changed})
            )
        if missing - {o for o in missing if o[:3] in changed}:
            parts.append("missing: " + _describe({o for o in missing if o[:3] not in changed}))
        raise backup_refused(
            path, "its store schema was edited (" + "; ".join(parts) + ")", "schema"
        )
    return version


def check_outbox(store: Storage, rows: list[tuple[Any, ...]], path: Path) -> None:
    """Every notification in the copy's outbox is about an event of its log: its id is the
    one that event and kind give (``notices.delivery_id``), its run, sequence and time are
    the event's, and so are the fields its body copies from the event. A row no event
    explains (forged, moved to another event or run, its kind changed) is refused. The
    text (summary, command, details) is not compared: each continuum version renders it
    its own way, and a store keeps rows older versions wrote; a signed backup vouches for
    it. Rows of archived events, and confirm-token failures (which no event records), are
    checked for their shape only."""
    archived: dict[str, int] = {}
    for run in store.list_runs():
        base = store.archive_base(run.run_id)
        archived[run.run_id] = base.through if base is not None else 0

    def event_at(run_id: str, sequence: int) -> Any:
        """The notifying event at ``sequence`` of a run (its live log), or None. One read
        per row: notifications are few next to events."""
        if run_id not in archived or not archived[run_id] < sequence:
            return None
        for raw in store.iter_raw(run_id, sequence - 1, upto=sequence):
            return raw if raw.type in NOTIFYING else None
        return None

    for values in rows:
        try:
            row = outbox_from_row(values)
        except IntegrityError as e:
            raise backup_refused(path, f"an outbox row is damaged ({e.message})", "data") from e
        event = event_at(row.run_id, row.sequence)
        if event is None:
            if row.kind == "confirm_token_failed" and row.body.get("event_id") is None:
                continue
            if 0 < row.sequence <= archived.get(row.run_id, 0):
                continue  # its event is in an archive file, not in this copy
            raise backup_refused(
                path,
                f"outbox row {row.delivery_id!r} (run {row.run_id!r}, sequence "
                f"{row.sequence}) is about no event of the log that calls for a notification",
                "data",
                delivery_id=row.delivery_id,
            )
        copied = {
            "delivery_id": delivery_id(event.event_id, row.kind),
            "kind": row.kind,
            "run_id": event.run_id,
            "sequence": event.sequence,
            "event_id": event.event_id,
            "recorded_at": event.timestamp,
            "origin": event.source.value,
        }
        claimed = {k: row.body.get(k) for k in copied}
        if (
            row.kind not in KINDS
            or row.delivery_id != copied["delivery_id"]
            or row.created_at != event.timestamp
            or claimed != copied
        ):
            raise backup_refused(
                path,
                f"outbox row {row.delivery_id!r} does not match event {event.sequence} of "
                f"run {event.run_id!r} (its id, kind, time or origin differ)",
                "data",
                delivery_id=row.delivery_id,
            )


def outbox_rows(path: Path, data: Path, version: int) -> list[tuple[Any, ...]]:
    if version < 3:  # no outbox before schema 3
        return []
    try:
        return read_outbox(data)
    except ContinuumError as e:
        raise backup_refused(path, f"the outbox cannot be read ({e.message})", "data") from e

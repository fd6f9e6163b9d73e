"""Read a store written by the original project, Cyrax321/CONTINUUM, read-only, verifying
its hash chain as it reads (for ``continuum import --from-original``).

Everything about the original's format here was read from its source, not guessed (paths
in github.com/Cyrax321/CONTINUUM):

- Schema: ``src/continuum/storage/migrations.py`` (``BASELINE_SCHEMA``, ``SCHEMA_VERSION
  = 7``): tables ``continuum_meta(key, value)`` with ``schema_version``, ``runs(run_id,
  goal, status, created_at, updated_at, metadata, parent_run_id)``, ``events(run_id,
  sequence, event_id, type, timestamp, payload, causer_event_id, source, prev_hash,
  hash)``; ``source`` and ``prev_hash`` arrived in v2 (``_up_v2``: before it there is no
  chain to verify), ``events_archive`` (same columns plus ``archived_at``) in v5.
- Compaction: ``src/continuum/storage/sqlite.py`` (``compact_run``, ``verify_events``,
  ``_audit_archive``): a compacted run's prefix moves verbatim to ``events_archive``; the
  chain runs through the archive into the live table, so both are read as one log.
- Rows: ``src/continuum/storage/sqlite.py`` (``_insert_event``): ``timestamp`` is
  ``datetime.isoformat()``, ``payload`` is ``json.dumps(payload, sort_keys=True)``.
- Hash: ``src/continuum/events.py`` (``Event.content``, ``digest``) and
  ``src/continuum/security/hashing.py`` (``stable_hash``, ``to_json``, ``_canonical``):
  SHA-256 of ``json.dumps(content, sort_keys=True, separators=(",", ":"),
  ensure_ascii=True)`` where ``content`` is every field but ``hash`` and the timestamp is
  the parsed datetime in UTC, ``isoformat()`` again (a naive one taken as UTC). The
  first event's ``prev_hash`` is null, each later one holds its predecessor's hash.
- Offloaded payloads: ``src/continuum/storage/blob.py``: a payload over the configured
  size is stored as ``{"__offloaded": SHA256, "size_bytes": N, "keys": [...]}`` (that
  descriptor is what the chain covers) and its canonical JSON in
  ``<directory of the file>/blobs/<sha256>.blob``.
- Ledger keys: ``src/continuum/actions/idempotency.py`` (``idempotency_key``,
  ``_canonicalize_paths``) and ``src/continuum/actions/ledger.py`` (``claim``): the key of
  an ``ACTION_RECORDED`` record is ``stable_hash({"scope": RUN or None, "type": TYPE,
  "key": KEY})`` for a claim with a key, else ``stable_hash({"scope": ..., "type": ...,
  "arguments": ARGUMENTS})`` with each string holding a ``/`` or ``\\`` (and no ``://``)
  replaced by ``os.path.normpath(os.path.expanduser(it))``; ``scope`` is None for an
  unscoped claim (``scoped_to_run=False``). The business key itself is not stored.

The original keeps no head per run, so a cut tail cannot be detected; everything else a
verify of the original would find (an edited row, a broken link, a gap) is refused here.
The database file is opened read-only; in WAL mode SQLite may create its usual ``-wal`` and
``-shm`` companions next to it, as any reader does.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import apsw

from continuum.errors import IntegrityError, NotFoundError, StoreError, UsageError
from continuum.store.schema import SQLITE_APPLICATION_ID
from continuum.store.sqlite_files import SQLITE_HEADER, check_sqlite_library, translate_errors
from continuum.untrusted import as_typed, quoted

# What the metadata of a run imported from the original names as its format.
ORIGINAL_FORMAT = "Cyrax321/CONTINUUM"
# The original's schema versions this reader was written against (migrations.py, v1-v7).
KNOWN_SCHEMA_VERSIONS = range(1, 8)
# The original's event types are upper-case names (events.py ``EventType``); continuum's
# are lower-case, so an original type kept as is can never pose as one of ours.
ORIGINAL_TYPE = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
_OFFLOADED = "__offloaded"
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class OriginalEvent:
    """One event of the original log, as stored and hashed."""

    run_id: str
    sequence: int
    event_id: str
    type: str
    timestamp: str  # exactly as stored (isoformat)
    payload: dict[str, Any]  # as stored and hashed (an offload descriptor stays one)
    causer_event_id: str | None
    source: str
    prev_hash: str | None
    hash: str
    archived: bool = False  # read from events_archive (a compacted prefix)
    blob_payload: dict[str, Any] | None = None  # an offloaded payload, read and checked


@dataclass(frozen=True)
class OriginalRun:
    run_id: str
    goal: str | None
    status: str | None
    created_at: str | None
    updated_at: str | None
    metadata: Any
    parent_run_id: str | None
    events: list[OriginalEvent]
    verified: bool  # False only for a run with no chain, read with ``unverified=True``
    missing_blobs: int = 0


@dataclass
class OriginalStoreInfo:
    path: str
    schema_version: int
    chained: bool  # the events table has prev_hash (schema v2 on)
    archive: bool  # the events_archive table exists (schema v5 on)
    run_ids: list[str] = field(default_factory=list)


def _damaged(run_id: str, sequence: int, kind: str, detail: str) -> IntegrityError:
    return IntegrityError(
        f"the original store's run {run_id!r} is damaged at sequence {sequence} ({kind}): "
        f"{detail}; nothing was imported",
        code=f"integrity.original_{kind}",
        hint="import it as it is only from an intact copy (a backup of the original's file); "
        "the original was not changed",
        run_id=run_id,
        sequence=sequence,
        kind=kind,
    )


def _not_original(path: str, why: str) -> StoreError:
    return StoreError(
        f"{as_typed(path)} is not a store of the original continuum (Cyrax321/CONTINUUM): {why}",
        code="store.not_original",
        hint="pass the original's SQLite file (its default is ./continuum.db "
        "of the project that used it); nothing was read or changed",
        path=path,
    )


# -- the original's hash ------------------------------------------------------------------


def original_timestamp(text: str) -> datetime:
    """A stored timestamp as the original reads it (pydantic ``datetime``), in UTC."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # hashing.py: a naive datetime is UTC
    return moment.astimezone(UTC)


def _check_finite(value: Any) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("a number in the payload is not finite")
    if isinstance(value, dict):
        for item in value.values():
            _check_finite(item)
    elif isinstance(value, list):
        for item in value:
            _check_finite(item)


def original_digest(event: OriginalEvent) -> str:
    """``Event.digest()`` of the original (events.py + security/hashing.py)."""
    _check_finite(event.payload)  # hashing.py refuses NaN/Infinity outright
    content = {
        "event_id": event.event_id,
        "run_id": event.run_id,
        "sequence": event.sequence,
        "type": event.type,
        "timestamp": original_timestamp(event.timestamp).isoformat(),
        "payload": event.payload,
        "causer_event_id": event.causer_event_id,
        "source": event.source,
        "prev_hash": event.prev_hash,
    }
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _original_paths(value: Any) -> Any:
    """Arguments as the original hashes them: path-like strings normalized (idempotency.py)."""
    if isinstance(value, str):
        if "://" not in value and ("/" in value or "\\" in value):
            return os.path.normpath(os.path.expanduser(value))
        return value
    if isinstance(value, dict):
        return {k: _original_paths(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_original_paths(v) for v in value]
    return value


def original_action_key(
    scope: str | None, action_type: str, *, key: str | None = None, arguments: Any = None
) -> str | None:
    """The ledger key the original gives a ``claim`` of this call (``idempotency_key``).

    ``scope`` is the original run's id (None for an unscoped claim). Without ``key`` the
    key is the arguments' hash, which needs the arguments as a JSON object (or none at
    all); None when the original could not have computed one (other arguments, a number
    that is not finite, an empty key or type). A claim that named ``volatile`` fields
    hashed fewer arguments, and cannot be found from the whole call.
    """
    if not action_type.strip():
        return None
    content: dict[str, Any] = {"scope": scope, "type": action_type}
    if key is not None:
        if not key:
            return None
        content["key"] = key
    elif arguments is None or isinstance(arguments, dict):
        content["arguments"] = _original_paths(arguments or {})
    else:
        return None
    try:
        _check_finite(content)
        text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# -- opening ---------------------------------------------------------------------------


def _check_file(path: Path) -> None:
    text = str(path)
    if os.path.islink(path):
        raise StoreError(
            f"{as_typed(text)} is a symbolic link",
            code="store.symlink",
            hint="pass the real file; nothing was read",
        )
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise NotFoundError(
            f"no file at {as_typed(text)}",
            code="not_found.original_store",
            hint="pass the path of the original's SQLite file",
            path=text,
        ) from None
    except OSError as e:
        raise StoreError(
            f"cannot stat {as_typed(text)}: {e.strerror}",
            code="store.unusable",
            hint="check the path and its permissions",
        ) from e
    if stat.S_ISDIR(st.st_mode):
        raise _not_original(text, "it is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise _not_original(text, "it is not a regular file")
    try:
        with open(path, "rb") as f:
            header = f.read(len(SQLITE_HEADER))
    except OSError as e:
        raise StoreError(
            f"cannot read {as_typed(text)}: {e.strerror}",
            code="store.unusable",
            hint="check the file's permissions",
        ) from e
    if header != SQLITE_HEADER:
        raise _not_original(text, "it is not a SQLite database")


class OriginalReader:
    """A read-only view of one original store file. Use as a context manager."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        check_sqlite_library()
        self.path = Path(path)
        text = str(self.path)
        _check_file(self.path)
        with translate_errors():
            self._conn = apsw.Connection(
                text, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_NOFOLLOW
            )
        try:
            self.info = self._inspect()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> OriginalReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with translate_errors():
            return list(self._conn.execute(sql, params).fetchall())

    def _columns(self, table: str) -> set[str]:
        return {str(r[1]) for r in self._query(f"PRAGMA table_info({table})")}

    def _inspect(self) -> OriginalStoreInfo:
        text = str(self.path)
        if int(self._query("PRAGMA application_id")[0][0] or 0) == SQLITE_APPLICATION_ID:
            raise UsageError(
                f"{as_typed(text)} is a store of this continuum, not of the original project",
                code="usage.not_original",
                hint="move runs between continuum stores with `continuum export` and "
                "`continuum import FILE`",
            )
        tables = {
            str(r[0]) for r in self._query("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        missing = sorted({"continuum_meta", "runs", "events"} - tables)
        if missing:
            raise _not_original(text, f"it has no {', '.join(missing)} table")
        rows = self._query("SELECT value FROM continuum_meta WHERE key = 'schema_version'")
        try:
            version = int(str(rows[0][0]))
        except (IndexError, ValueError):
            raise _not_original(text, "its continuum_meta holds no schema_version") from None
        if version not in KNOWN_SCHEMA_VERSIONS:
            raise UsageError(
                f"{as_typed(text)} has the original's schema version {version}; this importer "
                f"reads versions {KNOWN_SCHEMA_VERSIONS.start}-{KNOWN_SCHEMA_VERSIONS.stop - 1}",
                code="usage.original_schema_unknown",
                hint="open it with that version of the original and export what you need; "
                "nothing was read or changed",
                schema_version=version,
            )
        events = self._columns("events")
        needed = {"run_id", "sequence", "event_id", "type", "timestamp", "payload", "hash"}
        if not needed <= events or not {"run_id", "goal", "status"} <= self._columns("runs"):
            raise _not_original(text, "its runs or events table lacks the original's columns")
        info = OriginalStoreInfo(
            path=text,
            schema_version=version,
            chained="prev_hash" in events,
            archive="events_archive" in tables,
        )
        info.run_ids = [
            str(r[0]) for r in self._query("SELECT run_id FROM runs ORDER BY created_at, run_id")
        ]
        return info

    # -- reading runs ----------------------------------------------------------------------

    def read_run(self, run_id: str, *, unverified: bool = False) -> OriginalRun:
        """The run with every event, its chain verified as read (one read snapshot).

        Damage (an undecodable row, a gap, a broken link, a hash that does not match) raises
        an integrity error naming the run and sequence. A run with no chain at all (written
        before the original had one) is refused unless ``unverified``.
        """
        with translate_errors():
            self._conn.execute("BEGIN")
            try:
                return self._read_run(run_id, unverified=unverified)
            finally:
                self._conn.execute("COMMIT")

    def _read_run(self, run_id: str, *, unverified: bool) -> OriginalRun:
        cols = self._columns("runs")
        pick = ", ".join(
            c if c in cols else "NULL"
            for c in (
                "run_id",
                "goal",
                "status",
                "created_at",
                "updated_at",
                "metadata",
                "parent_run_id",
            )
        )
        rows = self._query(f"SELECT {pick} FROM runs WHERE run_id = ?", (run_id,))
        if not rows:
            raise NotFoundError(
                f"the original store has no run {run_id!r}",
                code="not_found.run",
                run_id=run_id,
                hint="list its runs with `continuum import --from-original FILE --dry-run`",
            )
        _, goal, status, created, updated, metadata_text, parent = rows[0]
        try:
            metadata: Any = json.loads(metadata_text) if isinstance(metadata_text, str) else None
        except ValueError:
            metadata = metadata_text  # kept as the text it is (not hashed, not trusted)
        events = list(self._events(run_id))
        chained = self.info.chained and not (
            len(events) > 1 and all(e.prev_hash is None for e in events)
        )
        if not chained and not unverified:
            raise UsageError(
                f"run {run_id!r} of the original store has no hash chain (it was written before "
                "the original added one): its history cannot be verified",
                code="usage.original_unchained",
                run_id=run_id,
                hint="pass --unverified to import it anyway, marked unverified; nothing was "
                "imported",
            )
        if chained:
            _verify(run_id, events)
        blobs = self.path.parent / "blobs"
        rehydrated, missing = [], 0
        for event in events:
            body = _read_blob(blobs, event.payload)
            if body is None and _offloaded(event.payload):
                missing += 1
            rehydrated.append(event if body is None else replace(event, blob_payload=body))
        return OriginalRun(
            run_id=run_id,
            goal=_text_or_none(goal),
            status=_text_or_none(status),
            created_at=_text_or_none(created),
            updated_at=_text_or_none(updated),
            metadata=metadata,
            parent_run_id=_text_or_none(parent),
            events=rehydrated,
            verified=chained,
            missing_blobs=missing,
        )

    def _events(self, run_id: str) -> Iterator[OriginalEvent]:
        cols = self._columns("events")
        pick = ", ".join(
            c if c in cols else "NULL"
            for c in (
                "sequence",
                "event_id",
                "type",
                "timestamp",
                "payload",
                "causer_event_id",
                "source",
                "prev_hash",
                "hash",
            )
        )
        live = self._query(
            f"SELECT {pick}, 0 FROM events WHERE run_id = ? ORDER BY sequence", (run_id,)
        )
        archived: list[tuple[Any, ...]] = []
        if self.info.archive:
            archived = self._query(
                f"SELECT {pick}, 1 FROM events_archive WHERE run_id = ? ORDER BY sequence",
                (run_id,),
            )
        rows = sorted(archived + live, key=lambda r: (r[0] if type(r[0]) is int else -1, r[-1]))
        for row in rows:
            yield _event_from_row(run_id, row)


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _event_from_row(run_id: str, row: tuple[Any, ...]) -> OriginalEvent:
    seq, event_id, type_, ts, payload_text, causer, source, prev, hash_, archived = row
    where = seq if type(seq) is int else 0
    try:
        if type(seq) is not int:
            raise ValueError("the sequence is not a whole number")
        if not all(isinstance(v, str) for v in (event_id, type_, ts, payload_text, hash_)):
            raise ValueError("a text column holds something else")
        if not (causer is None or isinstance(causer, str)) or not (
            prev is None or isinstance(prev, str)
        ):
            raise ValueError("causer_event_id or prev_hash is not text")
        payload = json.loads(payload_text)
        if not isinstance(payload, dict):
            raise ValueError("the payload is not a JSON object")
        original_timestamp(ts)
    except ValueError as e:
        raise _damaged(run_id, where, "malformed", f"cannot decode the event: {e}") from e
    if not ORIGINAL_TYPE.fullmatch(type_):
        raise _damaged(
            run_id,
            seq,
            "malformed",
            f"type {quoted(type_, limit=80)} is not an original event type "
            "(upper-case letters, digits and _)",
        )
    return OriginalEvent(
        run_id=run_id,
        sequence=seq,
        event_id=event_id,
        type=type_,
        timestamp=ts,
        payload=payload,
        causer_event_id=causer,
        source=source if isinstance(source, str) else "deterministic",
        prev_hash=prev,
        hash=hash_,
        archived=bool(archived),
    )


def _verify(run_id: str, events: list[OriginalEvent]) -> None:
    """The original's own verify (sqlite.py ``verify_events``), refusing at the first fault."""
    expected, prev = 1, None
    for event in events:
        if event.sequence != expected:
            what = "appears twice" if event.sequence == expected - 1 else f"expected {expected}"
            raise _damaged(
                run_id, event.sequence, "sequence_gap", f"sequence {event.sequence} {what}"
            )
        if event.prev_hash != prev:
            raise _damaged(
                run_id, event.sequence, "broken_link", "prev_hash is not the previous event's hash"
            )
        try:
            digest = original_digest(event)
        except ValueError as e:
            raise _damaged(run_id, event.sequence, "malformed", str(e)) from e
        if digest != event.hash:
            raise _damaged(
                run_id,
                event.sequence,
                "hash_mismatch",
                "the stored hash does not match the event's content",
            )
        expected, prev = expected + 1, event.hash


def _offloaded(payload: dict[str, Any]) -> bool:
    ref = payload.get(_OFFLOADED)
    return isinstance(ref, str) and isinstance(payload.get("size_bytes"), int)


def _read_blob(blobs: Path, payload: dict[str, Any]) -> dict[str, Any] | None:
    """An offloaded payload from its blob, if the blob is there and matches its digest."""
    ref = payload.get(_OFFLOADED)
    if not _offloaded(payload) or not isinstance(ref, str) or not _SHA256.fullmatch(ref):
        return None
    try:
        data = (blobs / f"{ref}.blob").read_bytes()
        if hashlib.sha256(data).hexdigest() != ref:
            return None
        body = json.loads(data.decode("utf-8"))
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None

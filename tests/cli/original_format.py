"""A small writer of the original project's store format (Cyrax321/CONTINUUM), for tests.

Written from the original's code, not from continuum's reader (which it must agree with):

- schema: ``src/continuum/storage/migrations.py`` (``BASELINE_SCHEMA``, ``SCHEMA_VERSION =
  7``; ``events_archive`` from ``_up_v5``; a v1 events table had neither ``source`` nor
  ``prev_hash``, which ``_up_v2`` added);
- rows: ``src/continuum/storage/sqlite.py`` ``_insert_event`` (``timestamp.isoformat()``,
  ``json.dumps(payload, sort_keys=True)``) and ``compact_run`` (a prefix moved verbatim to
  ``events_archive`` after an ``EVENT_LOG_ANCHORED`` marker is appended);
- hash: ``src/continuum/events.py`` ``Event.content``/``digest`` over
  ``src/continuum/security/hashing.py`` ``_canonical`` and ``to_json``;
- ledger records: ``src/continuum/storage/actionindex.py`` and ``models.py`` ``Action``
  (``{"key": ..., "action": Action.model_dump(mode="json")}``).

It uses apsw, like the reader: one SQLite library per process.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import secrets
from datetime import UTC, date, datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Any

import apsw

BASELINE_V7 = """
CREATE TABLE continuum_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY, goal TEXT NOT NULL, status TEXT NOT NULL,
    created_at TEXT NOT NULL, updated_at TEXT NOT NULL, metadata TEXT NOT NULL DEFAULT '{}',
    parent_run_id TEXT REFERENCES runs(run_id));
CREATE TABLE events (
    run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    sequence INTEGER NOT NULL, event_id TEXT NOT NULL UNIQUE, type TEXT NOT NULL,
    timestamp TEXT NOT NULL, payload TEXT NOT NULL, causer_event_id TEXT,
    source TEXT NOT NULL DEFAULT 'deterministic', prev_hash TEXT, hash TEXT NOT NULL,
    PRIMARY KEY (run_id, sequence));
CREATE TABLE versions (
    run_id TEXT NOT NULL, version INTEGER NOT NULL, fingerprint TEXT NOT NULL,
    prev_fingerprint TEXT, reason TEXT NOT NULL DEFAULT '', created_at TEXT NOT NULL,
    state TEXT NOT NULL, PRIMARY KEY (run_id, version));
CREATE TABLE checkpoints (
    checkpoint_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, version INTEGER NOT NULL,
    trigger TEXT NOT NULL, created_at TEXT NOT NULL, integrity_hash TEXT NOT NULL,
    body TEXT NOT NULL);
CREATE TABLE events_archive (
    run_id TEXT NOT NULL, sequence INTEGER NOT NULL, event_id TEXT NOT NULL,
    type TEXT NOT NULL, timestamp TEXT NOT NULL, payload TEXT NOT NULL,
    causer_event_id TEXT, source TEXT NOT NULL, prev_hash TEXT, hash TEXT NOT NULL,
    archived_at TEXT NOT NULL DEFAULT (datetime('now')), PRIMARY KEY (run_id, sequence));
CREATE TABLE action_index (
    key TEXT PRIMARY KEY, run_id TEXT NOT NULL, action_id TEXT NOT NULL,
    status TEXT NOT NULL, updated_seq INTEGER NOT NULL, action_json TEXT NOT NULL,
    rendered_key TEXT);
"""

# Before _up_v2: no source, no prev_hash (and hashes computed another way).
BASELINE_V1 = """
CREATE TABLE continuum_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY, goal TEXT NOT NULL, status TEXT NOT NULL,
    created_at TEXT NOT NULL, updated_at TEXT NOT NULL, metadata TEXT NOT NULL DEFAULT '{}');
CREATE TABLE events (
    run_id TEXT NOT NULL, sequence INTEGER NOT NULL, event_id TEXT NOT NULL UNIQUE,
    type TEXT NOT NULL, timestamp TEXT NOT NULL, payload TEXT NOT NULL,
    causer_event_id TEXT, hash TEXT NOT NULL, PRIMARY KEY (run_id, sequence));
"""


def _canonical(value: Any) -> Any:
    """security/hashing.py ``_canonical``, rule by rule."""
    if isinstance(value, Enum):
        return _canonical(value.value)
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("non-finite float")
        return value
    if isinstance(value, bytes):
        return {"$base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, (datetime, date)):
        dt = value if isinstance(value, datetime) else datetime.combine(value, datetime.min.time())
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        return dt.astimezone(UTC).isoformat()
    if isinstance(value, dict):
        return {str(k): _canonical(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    raise TypeError(type(value).__name__)


def stable_hash(value: Any) -> str:
    """hashing.py ``stable_hash`` (``to_json`` then SHA-256)."""
    text = json.dumps(_canonical(value), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def make_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"  # hashing.py ``make_id``


class OriginalStore:
    """Writes runs and events the way the original's SQLiteStorage does."""

    START = datetime(2025, 3, 1, 9, 0, 0, 250000, tzinfo=UTC)

    def __init__(self, path: Path, *, version: int = 7) -> None:
        self.path = path
        self.version = version
        self.conn = apsw.Connection(str(path))
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(BASELINE_V1 if version == 1 else BASELINE_V7)
        self.conn.execute(
            "INSERT INTO continuum_meta VALUES ('schema_version', ?)", (str(version),)
        )
        self.clock = self.START

    def close(self) -> None:
        self.conn.close()

    def tick(self) -> datetime:
        self.clock += timedelta(seconds=1, microseconds=1)
        return self.clock

    def run(
        self,
        run_id: str,
        goal: str,
        *,
        status: str = "running",
        metadata: dict[str, Any] | None = None,
    ) -> str:
        at = self.tick().isoformat()
        self.conn.execute(
            "INSERT INTO runs(run_id, goal, status, created_at, updated_at, metadata)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, goal, status, at, at, json.dumps(metadata or {}, sort_keys=True)),
        )
        return run_id

    def head(self, run_id: str) -> tuple[int, str | None]:
        rows = self.conn.execute(
            "SELECT sequence, hash FROM (SELECT sequence, hash FROM events WHERE run_id = ?"
            + (
                " UNION ALL SELECT sequence, hash FROM events_archive WHERE run_id = ?"
                if self.version >= 5
                else ""
            )
            + ") ORDER BY sequence DESC LIMIT 1",
            (run_id, run_id) if self.version >= 5 else (run_id,),
        ).fetchall()
        if not rows:
            return (0, None)
        sequence, digest = rows[0]
        assert isinstance(sequence, int)
        return sequence, str(digest)

    def event(
        self,
        run_id: str,
        type_: str,
        payload: dict[str, Any] | None = None,
        *,
        source: str = "deterministic",
        causer: str | None = None,
    ) -> dict[str, Any]:
        """``_append_chained`` + ``Event(...).sealed()`` + ``_insert_event``."""
        sequence, prev = self.head(run_id)
        when = self.tick()
        event = {
            "event_id": make_id("event"),
            "run_id": run_id,
            "sequence": sequence + 1,
            "type": type_,
            "timestamp": when,
            "payload": dict(payload or {}),
            "causer_event_id": causer,
            "source": source,
            "prev_hash": prev,
        }
        event["hash"] = stable_hash(event)  # Event.content() is every field but the hash
        if self.version == 1:
            self.conn.execute(
                "INSERT INTO events(run_id, sequence, event_id, type, timestamp, payload,"
                " causer_event_id, hash) VALUES (?,?,?,?,?,?,?,?)",
                (
                    run_id,
                    sequence + 1,
                    event["event_id"],
                    type_,
                    when.isoformat(),
                    json.dumps(event["payload"], sort_keys=True),
                    causer,
                    event["hash"],
                ),
            )
        else:
            self.conn.execute(
                "INSERT INTO events(run_id, sequence, event_id, type, timestamp, payload,"
                " causer_event_id, source, prev_hash, hash) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    run_id,
                    sequence + 1,
                    event["event_id"],
                    type_,
                    when.isoformat(),
                    json.dumps(event["payload"], sort_keys=True),
                    causer,
                    source,
                    prev,
                    event["hash"],
                ),
            )
        return event

    def action(
        self,
        run_id: str,
        key: str,
        action_type: str,
        status: str,
        *,
        action_id: str | None = None,
        arguments: dict[str, Any] | None = None,
        event_type: str = "ACTION_RECORDED",
        **fields: Any,
    ) -> dict[str, Any]:
        """A ledger write: ``{"key", "action": Action.model_dump(mode="json")}``."""
        record = {
            "action_id": action_id or make_id("action"),
            "run_id": run_id,
            "action_type": action_type,
            "dep_scope": None,
            "arguments": arguments or {},
            "arguments_hash": stable_hash(arguments or {}),
            "status": status,
            "external_id": None,
            "result": None,
            "result_hash": None,
            "side_effect_uncertain": False,
            "compensated_by": [],
            "last_error": None,
            "origin_digest": None,
            "created_at": self.clock.isoformat(),
            "started_at": None,
            "completed_at": None,
            "consumed_inputs": {
                "checkpoint_seq": 0,
                "event_positions": [],
                "component_ids": [],
                "action_ids": [],
            },
            "budget_authorization_id": None,
            **fields,
        }
        return self.event(run_id, event_type, {"key": key, "action": record})

    def compact(self, run_id: str, through: int) -> None:
        """``compact_run``: the anchor marker, then the prefix moved verbatim."""
        self.event(run_id, "EVENT_LOG_ANCHORED", {"anchored_through": through, "version": 0})
        self.conn.execute(
            "INSERT INTO events_archive (run_id, sequence, event_id, type,"
            " timestamp, payload, causer_event_id, source, prev_hash, hash)"
            " SELECT run_id, sequence, event_id, type, timestamp, payload,"
            " causer_event_id, source, prev_hash, hash FROM events"
            " WHERE run_id = ? AND sequence <= ?",
            (run_id, through),
        )
        self.conn.execute(
            "DELETE FROM events WHERE run_id = ? AND sequence <= ?", (run_id, through)
        )

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> None:
        self.conn.execute(statement, params)


def original_digest_of(block: dict[str, Any]) -> str:
    """The original's hash of an event from continuum's copy of it (``payload.original``)."""
    content = {
        k: block[k]
        for k in (
            "event_id",
            "run_id",
            "sequence",
            "type",
            "payload",
            "causer_event_id",
            "source",
            "prev_hash",
        )
    }
    content["timestamp"] = datetime.fromisoformat(block["timestamp"])
    return stable_hash(content)


def build(path: Path) -> OriginalStore:
    """Two runs: an active one with a bit of everything (and an action left in flight),
    and a completed one."""
    o = OriginalStore(path)
    o.run("run_a", "analyze 4 documents", metadata={"team": "research"})
    o.event("run_a", "RUN_STARTED", {"goal": "analyze 4 documents", "total": 4})
    o.event("run_a", "TASK_UPDATED", {"completed": 1})
    o.event("run_a", "WORK_COMPLETED", {"task_id": "doc-2"})
    o.event("run_a", "DEPENDENCY_DECLARED", {"resource": "dataset", "version": "v1"})
    o.event(
        "run_a",
        "EVIDENCE_ADDED",
        {"evidence_id": "e1", "summary": "row counts", "source": "dataset"},
    )
    o.event(
        "run_a",
        "FINDING_ADDED",
        {"finding_id": "f1", "claim": "totals match", "evidence": ["e1"], "confidence": 0.5},
    )
    o.event(
        "run_a",
        "DECISION_CREATED",
        {"decision_id": "d1", "decision": "publish", "evidence": ["f1", "e1"]},
    )
    o.event("run_a", "TOOL_CALLED", {"tool": "search", "args": {"q": "x"}}, source="llm")
    o.action(
        "run_a",
        "key-mail",
        "send_email",
        "started",
        action_id="action_mail",
        arguments={"to": "a@example.com"},
    )
    o.action(
        "run_a",
        "key-mail",
        "send_email",
        "completed",
        action_id="action_mail",
        arguments={"to": "a@example.com"},
        external_id="msg-1",
        result={"ok": True},
    )
    o.action("run_a", "key-card", "charge_card", "started", arguments={"amount": 5})
    o.event("run_a", "STATE_CHECKPOINTED", {"version": 1})
    o.event("run_a", "SUBAGENT_SPAWNED", {"agent": "helper"}, source="external_agent")
    o.run("run_b", "a finished one", status="completed")
    o.event("run_b", "RUN_STARTED", {"goal": "a finished one"})
    o.event("run_b", "RUN_COMPLETED", {"reason": "all done"})
    return o

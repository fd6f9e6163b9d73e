"""The PostgreSQL schema: the same versions and meaning as ``schema.py``, in PostgreSQL's dialect.

Version numbers are shared with the SQLite migrations (``SCHEMA_VERSION``); a test checks
that both backends know the same versions. Everything lives in its own PostgreSQL schema,
``continuum``, so a store can share a database with an application's own tables.

Differences from SQLite, each for a reason:
- ``BIGINT`` sequences and ``DOUBLE PRECISION`` leases (PostgreSQL's ``REAL`` is 4 bytes:
  a Unix time in it would be off by minutes);
- ``actions.position`` replaces SQLite's ``rowid`` to list actions in insertion order;
- payloads, records and metadata are canonical JSON in ``TEXT``, never ``JSONB``: JSONB
  re-serializes, and the event hash is over the canonical bytes.
"""

from __future__ import annotations

PG_SCHEMA = "continuum"

PG_MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE continuum.runs (
            run_id TEXT PRIMARY KEY,
            goal TEXT,
            status TEXT NOT NULL,
            created_at TEXT NOT NULL,
            head_sequence BIGINT NOT NULL DEFAULT 0,
            head_hash TEXT,
            metadata TEXT NOT NULL DEFAULT '{}'
        )""",
        # (run_id, sequence) is the primary key: a stale-head writer can never fork a chain.
        """CREATE TABLE continuum.events (
            run_id TEXT NOT NULL REFERENCES continuum.runs(run_id),
            sequence BIGINT NOT NULL,
            event_id TEXT NOT NULL UNIQUE,
            type TEXT NOT NULL,
            timestamp TEXT NOT NULL,
            payload TEXT NOT NULL,
            causer_event_id TEXT,
            source TEXT NOT NULL,
            prev_hash TEXT,
            hash TEXT NOT NULL,
            PRIMARY KEY (run_id, sequence)
        )""",
        """CREATE TABLE continuum.actions (
            position BIGINT GENERATED ALWAYS AS IDENTITY,
            run_id TEXT NOT NULL REFERENCES continuum.runs(run_id),
            action_id TEXT NOT NULL,
            action_key TEXT NOT NULL,
            dedup_key TEXT NOT NULL,
            fallback_key TEXT,
            status TEXT NOT NULL,
            record TEXT NOT NULL,
            lease_expires DOUBLE PRECISION,
            PRIMARY KEY (run_id, action_id),
            UNIQUE (run_id, dedup_key)
        )""",
        "CREATE INDEX actions_by_key ON continuum.actions (run_id, action_key)",
        "CREATE INDEX actions_by_fallback ON continuum.actions (run_id, fallback_key)",
        "CREATE INDEX actions_by_position ON continuum.actions (run_id, position)",
        """CREATE TABLE continuum.checkpoints (
            run_id TEXT NOT NULL REFERENCES continuum.runs(run_id),
            sequence BIGINT NOT NULL,
            event_sequence BIGINT NOT NULL,
            state TEXT NOT NULL,
            state_hash TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (run_id, sequence)
        )""",
    ],
    2: ["CREATE INDEX actions_by_status ON continuum.actions (run_id, status, position)"],
    # 3: per-call approvals and the notification outbox (see schema.py).
    3: [
        """CREATE TABLE continuum.approvals (
            position BIGINT GENERATED ALWAYS AS IDENTITY,
            run_id TEXT NOT NULL REFERENCES continuum.runs(run_id),
            approval_id TEXT NOT NULL,
            binding TEXT,
            status TEXT NOT NULL,
            run_grant TEXT,
            record TEXT NOT NULL,
            PRIMARY KEY (run_id, approval_id)
        )""",
        "CREATE INDEX approvals_by_id ON continuum.approvals (approval_id)",
        "CREATE INDEX approvals_by_binding ON continuum.approvals (run_id, binding, position)",
        "CREATE INDEX approvals_by_grant ON continuum.approvals (run_id, run_grant)",
        "CREATE INDEX approvals_by_status ON continuum.approvals (status, position)",
        """CREATE TABLE continuum.outbox (
            position BIGINT GENERATED ALWAYS AS IDENTITY,
            delivery_id TEXT PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES continuum.runs(run_id),
            sequence BIGINT NOT NULL,
            kind TEXT NOT NULL,
            body TEXT NOT NULL,
            created_at TEXT NOT NULL,
            status TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt DOUBLE PRECISION NOT NULL,
            claimed_until DOUBLE PRECISION,
            delivered_to TEXT NOT NULL DEFAULT '[]',
            last_error TEXT,
            delivered_at TEXT
        )""",
        "CREATE INDEX outbox_due ON continuum.outbox (status, next_attempt)",
    ],
}

# Created with version 1, before its migration; holds the schema version.
PG_META_TABLE = """CREATE TABLE continuum.meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"""

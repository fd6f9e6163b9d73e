"""Schema versions and forward migrations, shared by the backends.

Each migration is a list of statements applied in one transaction together with the
new version number. A database newer than the code is refused, never downgraded.
"""

from __future__ import annotations

SCHEMA_VERSION = 3

# 'CNTM': marks a SQLite file as a continuum store so a foreign database is refused.
SQLITE_APPLICATION_ID = 0x434E544D

MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            goal TEXT,
            status TEXT NOT NULL,
            created_at TEXT NOT NULL,
            head_sequence INTEGER NOT NULL DEFAULT 0,
            head_hash TEXT,
            metadata TEXT NOT NULL DEFAULT '{}'
        )""",
        # (run_id, sequence) is the primary key: a stale-head writer can never fork a chain.
        """CREATE TABLE events (
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            sequence INTEGER NOT NULL,
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
        # The action index: derived from the log, kept in the same transaction as the
        # event, so an intercept costs the same at 10 or 100,000 actions.
        """CREATE TABLE actions (
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            action_id TEXT NOT NULL,
            action_key TEXT NOT NULL,
            dedup_key TEXT NOT NULL,
            fallback_key TEXT,
            status TEXT NOT NULL,
            record TEXT NOT NULL,
            lease_expires REAL,
            PRIMARY KEY (run_id, action_id),
            UNIQUE (run_id, dedup_key)
        )""",
        "CREATE INDEX actions_by_key ON actions (run_id, action_key)",
        "CREATE INDEX actions_by_fallback ON actions (run_id, fallback_key)",
        """CREATE TABLE checkpoints (
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            sequence INTEGER NOT NULL,
            event_sequence INTEGER NOT NULL,
            state TEXT NOT NULL,
            state_hash TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (run_id, sequence)
        )""",
    ],  # 2: list a run's actions by status (its open ones first) at the cost of the page.
    2: ["CREATE INDEX actions_by_status ON actions (run_id, status)"],
    # 3: per-call approvals and the notification outbox.
    3: [
        # The approval index: the fold's record of each approval, kept in the same
        # transaction as its event (like the action index), so an intercept finds the
        # approval bound to its call, or a grant for the run, at a cost that does not grow
        # with the log. ``binding`` names the exact call; ``run_grant`` holds the action
        # type while a grant covers the rest of the run. Migrating to 3 also fills it
        # from the approval events already in the log (``backfill_approvals``).
        """CREATE TABLE approvals (
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            approval_id TEXT NOT NULL,
            binding TEXT,
            status TEXT NOT NULL,
            run_grant TEXT,
            record TEXT NOT NULL,
            PRIMARY KEY (run_id, approval_id)
        )""",
        "CREATE INDEX approvals_by_id ON approvals (approval_id)",
        "CREATE INDEX approvals_by_binding ON approvals (run_id, binding)",
        "CREATE INDEX approvals_by_grant ON approvals (run_id, run_grant)",
        "CREATE INDEX approvals_by_status ON approvals (status)",
        # Notifications for a person, written with the event that caused them; delivered
        # at least once by `continuum outbox deliver`. Rows are kept after delivery.
        """CREATE TABLE outbox (
            delivery_id TEXT PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            sequence INTEGER NOT NULL,
            kind TEXT NOT NULL,
            body TEXT NOT NULL,
            created_at TEXT NOT NULL,
            status TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt REAL NOT NULL,
            claimed_until REAL,
            delivered_to TEXT NOT NULL DEFAULT '[]',
            last_error TEXT,
            delivered_at TEXT
        )""",
        "CREATE INDEX outbox_due ON outbox (status, next_attempt)",
    ],
}

"""continuum: crash recovery for AI agents.

A hash-chained event log per run, a semantic state projected from it with provenance,
a two-phase action ledger for side effects, environment revalidation and a recovery
engine that returns one verdict plus a sealed recovery contract.
"""

from continuum.chain import VerifyReport, Violation
from continuum.contract import RecoveryContract
from continuum.errors import (
    ContinuumError,
    IntegrityError,
    LedgerError,
    NotFoundError,
    StoreError,
    UsageError,
)
from continuum.events import Event, EventType
from continuum.ledger import ActionLedger, InterceptResult
from continuum.projection import State, project
from continuum.recovery import Decision, decide
from continuum.runtime import Continuum, Recovery
from continuum.store import Run, SQLiteStorage, Storage, open_store
from continuum.types import ActionStatus, Mode, Origin, ReplayContract
from continuum.version import __version__

__all__ = [
    "ActionLedger",
    "ActionStatus",
    "Continuum",
    "ContinuumError",
    "Decision",
    "Event",
    "EventType",
    "IntegrityError",
    "InterceptResult",
    "LedgerError",
    "Mode",
    "NotFoundError",
    "Origin",
    "Recovery",
    "RecoveryContract",
    "ReplayContract",
    "Run",
    "SQLiteStorage",
    "State",
    "Storage",
    "StoreError",
    "UsageError",
    "VerifyReport",
    "Violation",
    "__version__",
    "decide",
    "open_store",
    "project",
]

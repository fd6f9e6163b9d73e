"""continuum: crash recovery for AI agents.

A hash-chained event log per run, a semantic state projected from it with provenance,
a two-phase action ledger for side effects, environment revalidation and a recovery
engine that returns one verdict plus a sealed recovery contract.

The public names are imported on first use (PEP 562), so a process that needs only a
small part of continuum, such as a host hook that finds nothing to gate, starts without
loading the store, pydantic or the MCP SDK. ``from continuum import Continuum`` works as
usual.

Start with ``help(continuum.Continuum)``: every public class and function says what it
does, what it returns and what it raises; references/api.md has the worked examples.
"""

from __future__ import annotations

from importlib import import_module

from continuum.version import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy reads it the same)
if TYPE_CHECKING:
    from typing import Any

    from continuum.chain import VerifyReport, Violation
    from continuum.contract import RecoveryContract
    from continuum.errors import (
        ContinuumError,
        EffectAwaitingApproval,
        EffectDenied,
        EffectUncertain,
        IntegrityError,
        LedgerError,
        NotFoundError,
        StoreError,
        UsageError,
    )
    from continuum.events import Event, EventType
    from continuum.ledger import ActionLedger, InterceptResult
    from continuum.projection import ActionRecord, State, project
    from continuum.recovery import Decision, decide
    from continuum.runtime import ActionsPage, CheckpointInfo, ConfirmResult, Continuum, Recovery
    from continuum.store import Run, RunInfo, SQLiteStorage, Storage, open_store
    from continuum.types import ActionStatus, InterceptStatus, Mode, Origin, ReplayContract
    from continuum.validation import ValidationReport

# Where each public name lives.
_HOMES = {
    "VerifyReport": "continuum.chain",
    "Violation": "continuum.chain",
    "RecoveryContract": "continuum.contract",
    "ContinuumError": "continuum.errors",
    "EffectUncertain": "continuum.errors",
    "EffectAwaitingApproval": "continuum.errors",
    "EffectDenied": "continuum.errors",
    "IntegrityError": "continuum.errors",
    "LedgerError": "continuum.errors",
    "NotFoundError": "continuum.errors",
    "StoreError": "continuum.errors",
    "UsageError": "continuum.errors",
    "Event": "continuum.events",
    "EventType": "continuum.events",
    "ActionLedger": "continuum.ledger",
    "InterceptResult": "continuum.ledger",
    "ActionRecord": "continuum.projection",
    "State": "continuum.projection",
    "project": "continuum.projection",
    "Decision": "continuum.recovery",
    "decide": "continuum.recovery",
    "ActionsPage": "continuum.runtime",
    "CheckpointInfo": "continuum.runtime",
    "ConfirmResult": "continuum.runtime",
    "Continuum": "continuum.runtime",
    "Recovery": "continuum.runtime",
    "Run": "continuum.store",
    "RunInfo": "continuum.store",
    "SQLiteStorage": "continuum.store",
    "Storage": "continuum.store",
    "open_store": "continuum.store",
    "ActionStatus": "continuum.types",
    "InterceptStatus": "continuum.types",
    "Mode": "continuum.types",
    "Origin": "continuum.types",
    "ReplayContract": "continuum.types",
    "ValidationReport": "continuum.validation",
}

__all__ = [
    "ActionLedger",
    "ActionRecord",
    "ActionStatus",
    "ActionsPage",
    "CheckpointInfo",
    "ConfirmResult",
    "Continuum",
    "ContinuumError",
    "Decision",
    "EffectAwaitingApproval",
    "EffectDenied",
    "EffectUncertain",
    "Event",
    "EventType",
    "IntegrityError",
    "InterceptResult",
    "InterceptStatus",
    "LedgerError",
    "Mode",
    "NotFoundError",
    "Origin",
    "Recovery",
    "RecoveryContract",
    "ReplayContract",
    "Run",
    "RunInfo",
    "SQLiteStorage",
    "State",
    "Storage",
    "StoreError",
    "UsageError",
    "ValidationReport",
    "VerifyReport",
    "Violation",
    "__version__",
    "decide",
    "open_store",
    "project",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'continuum' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

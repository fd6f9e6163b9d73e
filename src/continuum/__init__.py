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

from continuum.version import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy reads it the same)
if TYPE_CHECKING:
    from typing import Any

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
    from continuum.eventlog.event_model import Event
    from continuum.eventlog.events import EventType
    from continuum.eventlog.reports import VerifyReport, Violation
    from continuum.ledger.core import ActionLedger
    from continuum.ledger.gate import InterceptResult
    from continuum.recovery.contract import RecoveryContract
    from continuum.recovery.engine import Decision, decide
    from continuum.runtime.facade import Continuum
    from continuum.runtime.results import (
        ActionsPage,
        BranchVerdict,
        CheckpointInfo,
        ConfirmResult,
        Observed,
        Recovery,
    )
    from continuum.state.projection import project
    from continuum.state.records import ActionRecord, State
    from continuum.state.validation import ValidationReport
    from continuum.store import Run, RunInfo, SQLiteStorage, Storage, open_store
    from continuum.types import ActionStatus, InterceptStatus, Mode, Origin, ReplayContract

# Where each public name lives.
_HOMES = {
    "VerifyReport": "continuum.eventlog.reports",
    "Violation": "continuum.eventlog.reports",
    "RecoveryContract": "continuum.recovery.contract",
    "ContinuumError": "continuum.errors",
    "EffectUncertain": "continuum.errors",
    "EffectAwaitingApproval": "continuum.errors",
    "EffectDenied": "continuum.errors",
    "IntegrityError": "continuum.errors",
    "LedgerError": "continuum.errors",
    "NotFoundError": "continuum.errors",
    "StoreError": "continuum.errors",
    "UsageError": "continuum.errors",
    "Event": "continuum.eventlog.event_model",
    "EventType": "continuum.eventlog.events",
    "ActionLedger": "continuum.ledger.core",
    "InterceptResult": "continuum.ledger.gate",
    "ActionRecord": "continuum.state.records",
    "State": "continuum.state.records",
    "project": "continuum.state.projection",
    "Decision": "continuum.recovery.engine",
    "decide": "continuum.recovery.engine",
    "ActionsPage": "continuum.runtime.results",
    "CheckpointInfo": "continuum.runtime.results",
    "ConfirmResult": "continuum.runtime.results",
    "Observed": "continuum.runtime.results",
    "BranchVerdict": "continuum.runtime.results",
    "Continuum": "continuum.runtime.facade",
    "Recovery": "continuum.runtime.results",
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
    "ValidationReport": "continuum.state.validation",
}

__all__ = [
    "ActionLedger",
    "ActionRecord",
    "ActionStatus",
    "ActionsPage",
    "BranchVerdict",
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
    "Observed",
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
    from importlib import import_module  # on first use: a hook process never needs it

    value = getattr(import_module(home), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

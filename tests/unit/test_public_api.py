"""The public API is an explicit, pinned ``__all__`` (references/contract.md §11)."""

from __future__ import annotations

import continuum

PINNED = {
    "ActionLedger",
    "ActionStatus",
    "Continuum",
    "ContinuumError",
    "Decision",
    "EffectUncertain",
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
    # the types the facade returns (issue 12), and the intercept statuses
    "ActionRecord",
    "ActionsPage",
    "BranchVerdict",
    "Observed",
    "CheckpointInfo",
    "ConfirmResult",
    "InterceptStatus",
    "RunInfo",
    "ValidationReport",
    # a gated effect that waits for, or was refused, a person's decision (issue 16)
    "EffectAwaitingApproval",
    "EffectDenied",
}


def test_all_is_exactly_the_pinned_public_api() -> None:
    assert set(continuum.__all__) == PINNED
    assert len(continuum.__all__) == len(set(continuum.__all__))


def test_every_name_in_all_is_importable() -> None:
    for name in continuum.__all__:
        assert getattr(continuum, name) is not None


def test_spec_signatures_of_the_storage_api() -> None:
    import inspect

    sig = inspect.signature(continuum.SQLiteStorage.append_event)
    assert list(sig.parameters)[:4] == ["self", "run_id", "type", "payload"]
    assert sig.parameters["source"].kind is inspect.Parameter.KEYWORD_ONLY
    assert sig.parameters["source"].default is continuum.Origin.DETERMINISTIC
    assert sig.parameters["causer_event_id"].default is None
    assert inspect.signature(continuum.SQLiteStorage.read_events).parameters["after"].default == 0

"""Small shared vocabulary: origins, statuses, modes. Imports nothing internal."""

from __future__ import annotations

from enum import StrEnum


class Origin(StrEnum):
    """Who recorded a fact (SPEC 5)."""

    DETERMINISTIC = "deterministic"
    HUMAN = "human"
    LLM = "llm"
    EXTERNAL_AGENT = "external_agent"
    IMPORTED = "imported"

    @property
    def self_certified(self) -> bool:
        return self in (Origin.LLM, Origin.EXTERNAL_AGENT, Origin.IMPORTED)


class ActionStatus(StrEnum):
    STARTED = "started"
    COMPLETED = "completed"
    FAILED = "failed"
    UNKNOWN = "unknown"
    COMPENSATED = "compensated"

    @property
    def unresolved(self) -> bool:
        return self in (ActionStatus.STARTED, ActionStatus.UNKNOWN)


class ReplayContract(StrEnum):
    """What may happen when an interrupted action is met again (SPEC 6)."""

    NEVER = "never"
    RECONCILE = "reconcile"
    IDEMPOTENT = "idempotent"
    SAFE = "safe"

    @property
    def width(self) -> int:
        """How much replay the contract allows; a later intercept may not widen it."""
        return _REPLAY_WIDTH[self]


_REPLAY_WIDTH = {
    ReplayContract.NEVER: 0,
    ReplayContract.RECONCILE: 1,
    ReplayContract.IDEMPOTENT: 2,
    ReplayContract.SAFE: 3,
}


class Mode(StrEnum):
    """Recovery verdicts (SPEC 8), ordered by severity; ``not_resumable`` stands apart."""

    RESUME = "resume"
    REPAIR_AND_RESUME = "repair_and_resume"
    REPLAN = "replan"
    WAIT = "wait"
    REQUEST_HUMAN = "request_human"
    ROLLBACK = "rollback"
    ABORT = "abort"
    NOT_RESUMABLE = "not_resumable"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]


_SEVERITY = {
    Mode.RESUME: 0,
    Mode.REPAIR_AND_RESUME: 1,
    Mode.REPLAN: 2,
    Mode.WAIT: 3,
    Mode.REQUEST_HUMAN: 4,
    Mode.ROLLBACK: 5,
    Mode.ABORT: 6,
    Mode.NOT_RESUMABLE: 7,
}


class DependencyStatus(StrEnum):
    """Result of comparing a declared dependency with the current environment."""

    UNCHANGED = "unchanged"
    CHANGED = "changed"
    ADDED = "added"
    REMOVED = "removed"
    UNKNOWN = "unknown"


class ComponentStatus(StrEnum):
    """Validation status of a projected component (SPEC 7)."""

    VERIFIED = "verified"
    REQUIRES_REVIEW = "requires_review"
    STALE = "stale"
    CONFLICTED = "conflicted"
    INVALID = "invalid"
    UNKNOWN = "unknown"


class RunStatus(StrEnum):
    ACTIVE = "active"
    COMPLETED = "completed"
    ABORTED = "aborted"

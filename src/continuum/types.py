"""Small shared vocabulary: origins, statuses, modes. Imports nothing internal.

Every enum here is a ``StrEnum``: a member compares equal to its string value, prints as
it (``str(Mode.RESUME) == "resume"``) and serializes to it in JSON, so code that compares
with strings keeps working, while ``x.mode is Mode.RESUME`` works too.
"""

from __future__ import annotations

from enum import StrEnum


class Origin(StrEnum):
    """Who recorded a fact (references/contract.md §5).

    ``llm``, ``external_agent`` and ``imported`` are self-certified: what they report is
    not trusted until a human confirms it (``Continuum.confirm``).
    """

    DETERMINISTIC = "deterministic"
    HUMAN = "human"
    LLM = "llm"
    EXTERNAL_AGENT = "external_agent"
    IMPORTED = "imported"

    @property
    def self_certified(self) -> bool:
        """True for origins whose word needs a human's confirmation."""
        return self in (Origin.LLM, Origin.EXTERNAL_AGENT, Origin.IMPORTED)


# Origins whose word is trusted without a person's confirmation.
TRUSTED_ORIGINS = (Origin.HUMAN, Origin.DETERMINISTIC)


class ActionStatus(StrEnum):
    """The recorded status of an action in the ledger (references/contract.md §6).

    ``started``: intercepted, not yet settled; ``unknown``: interrupted, may or may not
    have happened; ``completed``/``failed``: settled; ``compensated``: done, then undone.
    """

    STARTED = "started"
    COMPLETED = "completed"
    FAILED = "failed"
    UNKNOWN = "unknown"
    COMPENSATED = "compensated"

    @property
    def unresolved(self) -> bool:
        """True while nobody knows whether the effect happened (``started``, ``unknown``)."""
        return self in (ActionStatus.STARTED, ActionStatus.UNKNOWN)


class ReplayContract(StrEnum):
    """What may happen when an interrupted action is met again (references/contract.md §6)."""

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
    """Recovery verdicts (references/contract.md §8), ordered by severity;
    ``not_resumable`` stands apart. Only ``resume`` means safe to continue."""

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
        """0 (``resume``) to 7 (``not_resumable``): the verdict is the most severe proposal."""
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
    """Validation status of a projected component (references/contract.md §7)."""

    VERIFIED = "verified"
    REQUIRES_REVIEW = "requires_review"
    STALE = "stale"
    CONFLICTED = "conflicted"
    INVALID = "invalid"
    UNKNOWN = "unknown"


class RunStatus(StrEnum):
    """A run's lifecycle: ``active`` until a ``run_completed`` or ``run_aborted`` event."""

    ACTIVE = "active"
    COMPLETED = "completed"
    ABORTED = "aborted"


class InterceptStatus(StrEnum):
    """What ``intercept`` answers for one call (``InterceptResult.status``;
    references/contract.md §6). Only ``started`` comes with ``proceed: true``.

    - ``started``: new, or a permitted new attempt: perform it, then complete or fail it.
    - ``completed``: already done: use the recorded result and external id.
    - ``in_progress``: a live process is performing it right now.
    - ``unknown``: interrupted, may or may not have happened: check, then reconcile.
    - ``reconcile_required``: interrupted under ``replay=reconcile``: check, then reconcile.
    - ``compensated``: done and later undone; a new key redoes it.
    - ``needs_confirmation``: an agent said it did not happen; only a person may confirm it.
    - ``possible_duplicate``: the same values as an earlier action under other field
      names (``similar_action``); nothing was written.
    - ``awaiting_approval``: an approval rule asks a person to decide this call first
      (``approval_id``; ``continuum decide``).
    - ``denied``: a person denied this call (``approval_id``, ``denial_reason``).
    - ``version_drift``: an interrupted ``safe``/``idempotent`` action met again under
      another tool schema than it was recorded with: a person reconciles it first.
    - ``revalidation_required``: the periodic check found a dependency changed: declare
      it again (or a person acts) before a new effect starts.
    - ``retry_cap_reached``: a new attempt would pass a ``[[retry]]`` rule's
      ``max_attempts`` for the action type, or the run's ``run_retries``; nothing was
      written (a person looks, or a new run starts).
    - ``budget_exceeded``: this attempt's estimated cost would pass the run's budget
      (spent, plus what effects in flight or unknown reserve); nothing was written.
    """

    STARTED = "started"
    COMPLETED = "completed"
    IN_PROGRESS = "in_progress"
    UNKNOWN = "unknown"
    RECONCILE_REQUIRED = "reconcile_required"
    COMPENSATED = "compensated"
    NEEDS_CONFIRMATION = "needs_confirmation"
    POSSIBLE_DUPLICATE = "possible_duplicate"
    AWAITING_APPROVAL = "awaiting_approval"
    DENIED = "denied"
    VERSION_DRIFT = "version_drift"
    REVALIDATION_REQUIRED = "revalidation_required"
    RETRY_CAP_REACHED = "retry_cap_reached"
    BUDGET_EXCEEDED = "budget_exceeded"


class DamageKind(StrEnum):
    """What kind of damage a ``Violation`` found."""

    HASH_MISMATCH = "hash_mismatch"  # the stored hash does not match the content
    BROKEN_LINK = "broken_link"  # prev_hash is not the previous event's hash
    SEQUENCE_GAP = "sequence_gap"  # a sequence number is missing or out of order
    WRONG_RUN = "wrong_run"  # the row claims another run
    MALFORMED = "malformed"  # the row cannot be decoded at all
    TRUNCATED = "truncated"  # events missing after the last stored one (head / anchor)
    HEAD_MISMATCH = "head_mismatch"  # the head record disagrees with the last event
    ANCHOR_MISMATCH = "anchor_mismatch"  # an exported anchor is not in this chain
    INDEX_MISMATCH = "index_mismatch"  # a derived index disagrees with the log
    CHECKPOINT_MISMATCH = "checkpoint_mismatch"  # a stored checkpoint fails its hash

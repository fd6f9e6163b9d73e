"""What the facade's calls return, beside the core's own records: a checkpoint's summary,
the evidence about a file, a recovery verdict with its contract, an evaluation, a page of
actions and a confirmation's outcome. Pydantic models, frozen; imported by the edges.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from continuum.recovery.contract import RecoveryContract
from continuum.recovery.engine import ChildView, Decision
from continuum.state.records import ActionRecord, State
from continuum.state.validation import ValidationReport
from continuum.types import Mode


class CheckpointInfo(BaseModel):
    """What ``Continuum.checkpoint`` stored: the run's state through event ``sequence``,
    sealed with ``state_hash``, recorded by the ``checkpointed`` event at
    ``event_sequence``. A later resume reads only the events after it."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    sequence: int
    event_sequence: int
    state_hash: str


class FileEvidence(BaseModel):
    """Files recorded as evidence (path, sha256) compared with the disk now."""

    model_config = ConfigDict(frozen=True)

    verified: int = 0
    changed: list[str] = []
    missing: list[str] = []

    @property
    def any(self) -> bool:
        return bool(self.verified or self.changed or self.missing)


class Recovery(BaseModel):
    """Everything a resumed agent needs: the verdict, why, and the sealed contract.

    What ``Continuum.resume`` returns (references/contract.md §8):

    - ``mode``: the verdict, a ``Mode`` (``resume``, ``repair_and_resume``, ``replan``,
      ``wait``, ``request_human``, ``rollback``, ``abort``, ``not_resumable``), or the
      string ``"no_active_run"`` when no run id was given and no run is active.
    - ``safe``: true only for ``resume``; anything else means do not simply continue.
    - ``next_allowed_action``: the one step to take next (``reconcile_action:ACT``,
      ``confirm_run:RUN``, ...); ``required_actions``: all of them, in order;
      ``rationale``: why, in one line.
    - ``uncertain_actions``: actions that may or may not have happened, each a dict with
      ``action_id``, ``action_key``, ``action_type``, ``status`` (``unknown`` or
      ``needs_confirmation``), ``attempt``, ``arguments`` and ``next``.
    - ``progress`` and ``goal``: as recorded (an agent's word until a person confirms it).
    - ``contract``: the sealed recovery contract as JSON (``RecoveryContract``; check a
      saved one with ``Continuum.verify_contract``).
    - ``files``: files recorded as evidence compared with the disk, or None.
    - ``version_drift``: for each open action (not completed or compensated) recorded
      under other versions than the current ones given to ``resume(versions=...)``: its
      ``action_key``, ``action_type``, the ``field`` (``prompt_hash``,
      ``tool_schema_hash``, ``model``), ``recorded`` and ``current``.
    - ``handoff``: the latest handoff note for this session (``note``, ``origin``,
      ``sequence``), or None: read it first (an agent's note is its word).
    - ``children``: the runs started under this one (any depth, ``path`` from it), each
      with its ``status``, ``unresolved`` actions (``action_key``, ``status``, ``next``),
      ``pending_approvals`` and ``waiting_branches``: the verdict is ``request_human``
      while one of them may have happened unsettled, or waits for a person's decision.
    """

    model_config = ConfigDict(frozen=True)

    run_id: str | None
    mode: Mode | Literal["no_active_run"]
    safe: bool
    next_allowed_action: str | None
    rationale: str
    required_actions: list[str]
    uncertain_actions: list[dict[str, Any]]
    progress: dict[str, Any] | None
    goal: str | None = None
    contract: dict[str, Any] | None
    files: FileEvidence | None = None
    version_drift: list[dict[str, Any]] = Field(default_factory=list)
    children: list[dict[str, Any]] = Field(default_factory=list)
    handoff: dict[str, Any] | None = None


class Evaluation(NamedTuple):
    """What ``Continuum.evaluate`` found, from one reading of the store and one observation
    of the environment."""

    state: State
    validation: ValidationReport
    decision: Decision
    contract: RecoveryContract
    children: tuple[ChildView, ...] = ()  # the runs below it (``RunsFacade.family``)


class ActionsPage(NamedTuple):
    """A page of ``Continuum.actions_page``."""

    actions: list[ActionRecord]
    next_cursor: str | None


class ConfirmResult(BaseModel):
    """A recorded human confirmation: it covers the state at ``through_sequence`` exactly.

    ``head_sequence`` is the run's head when the confirmation was written (before it): when
    it is past ``through_sequence``, the events in between are not covered.
    """

    model_config = ConfigDict(frozen=True)

    run_id: str
    through_sequence: int
    scope: list[str]
    confirmed: dict[str, Any]
    event_sequence: int
    through_hash: str | None = None
    head_sequence: int = 0


class Observed(BaseModel):
    """What ``Continuum.observe`` recorded and where the observation stands now.

    ``status``: ``verified`` (at least two independent signals, all agreeing),
    ``unverified`` or ``contested`` (two readings disagree); ``independent_signals``
    counts them (an agent's own readings count once); ``readings``: each signal's latest
    reading (``signal``, ``origin``, ``value``, ``source``, ``sequence``);
    ``continuum_checked``: continuum read the declared dependency itself and recorded that
    reading too (an environment observation of a declared file, git tree or probe).
    """

    model_config = ConfigDict(frozen=True)

    run_id: str
    observation_id: str
    subject: str
    kind: str
    status: str
    independent_signals: int
    readings: list[dict[str, Any]]
    continuum_checked: bool = False
    sequence: int


class BranchVerdict(BaseModel):
    """What ``Continuum.resolve_branch`` answers: ``mode`` is ``resume`` (take the branch)
    or ``request_human`` (do not: ``reason`` names the observation and why; ``note`` is
    the reason the last caller gave; a person
    resolves it with ``continuum resolve-branch RUN BRANCH``); ``risk`` as judged (the
    highest of the call's, the rules' and earlier calls'); ``observations``: each one the
    branch rests on with its ``status`` and ``kind``."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    branch_id: str
    choice: str
    risk: str
    mode: Mode
    status: str
    reason: str | None
    note: str | None
    rule: str | None
    observations: list[dict[str, Any]]
    resolved_by: str | None
    next_allowed_action: str
    sequence: int

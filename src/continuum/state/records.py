"""The semantic state of a run, as the fold leaves it: ``State`` and its parts (goal,
progress, work items, decisions and findings with provenance, dependencies, actions,
approvals, confirmations). Frozen pydantic models; no behaviour beyond reading them.

Pure: imports eventlog and the leaves."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from continuum.state.components import ALL_COMPONENTS as ALL_COMPONENTS
from continuum.state.components import DEFAULT_CONFIRM_SCOPE as DEFAULT_CONFIRM_SCOPE
from continuum.types import TRUSTED_ORIGINS as TRUSTED_ORIGINS
from continuum.types import ActionStatus, Origin, RunStatus


class Provenance(BaseModel):
    model_config = ConfigDict(frozen=True)

    origin: Origin
    sequence: int
    event_id: str


class GoalFact(BaseModel):
    model_config = ConfigDict(frozen=True)

    value: str
    provenance: Provenance


class Progress(BaseModel):
    model_config = ConfigDict(frozen=True)

    total: int | None = None
    completed: int = 0
    failed: int = 0
    pending: int = 0
    provenance: Provenance | None = None


class Item(BaseModel):
    """A decision, finding, piece of evidence, work item or approval."""

    model_config = ConfigDict(frozen=True)

    id: str
    text: str = ""
    status: str = "active"
    cites: list[str] = Field(default_factory=list)  # evidence ids / finding ids / dependency names
    model: str | None = None
    # Evidence about a file: where it is and what it held when recorded (compared with the
    # disk on resume: verified, changed or missing).
    path: str | None = None
    sha256: str | None = None
    size: int | None = None
    provenance: Provenance


class Approval(BaseModel):
    """A request for a person's decision on one side effect (``approval_requested``), and
    that decision: ``requested`` -> ``granted`` | ``denied`` (-> ``revoked``).

    Only a person (or trusted local code) decides: a grant, denial or revocation recorded
    by a self-certified origin (an agent) changes nothing and is counted in
    ``ignored_decisions``. The first fields are those of an ``Item``, so older states and
    checkpoints still read.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    text: str = ""
    status: str = "requested"  # requested | granted | denied | revoked
    cites: list[str] = Field(default_factory=list)
    model: str | None = None
    provenance: Provenance
    action_type: str | None = None
    action_id: str | None = None  # the ledger's identity of the call it gates
    action_key: str | None = None
    key: str | None = None
    arguments: Any = None
    arguments_hash: str | None = None  # digest of the exact arguments it is bound to
    binding: str | None = None  # digest of (action_id, arguments_hash): the call it covers
    rule: str | None = None  # which approval rule asked for it
    effect: str | None = None  # the host effect rule it came through (hooks), if any
    requested_by: Origin | None = None
    requested_at: str | None = None
    requested_sequence: int | None = None
    scope: str | None = None  # call | run (a grant)
    reason: str | None = None  # the person's reason for the decision
    decided_by: Origin | None = None
    decided_at: str | None = None
    decided_sequence: int | None = None
    ignored_decisions: int = 0

    @property
    def pending(self) -> bool:
        return self.status == "requested"


class Dependency(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    provider: str = "static"
    version: str | None = None
    checksum: str | None = None
    locator: str | None = None
    recorded_change: str | None = None
    provenance: Provenance


class ActionRecord(BaseModel):
    """One side effect as the ledger knows it (``Continuum.actions``, ``complete``, ...).

    ``action_id``/``action_key`` name it; ``action_type``, ``key`` and ``arguments`` are
    as intercepted; ``status`` is an ``ActionStatus``; ``attempt`` counts tries;
    ``replay`` its replay contract; ``operation_key`` an idempotency key stable across
    attempts; ``owner`` the process performing it; ``external_id``, ``result``,
    ``error`` and ``note`` what was recorded when it was settled, by ``settled_by`` (an
    ``Origin``) at ``settled_at``; ``origin`` who intercepted it;
    ``intercepted_sequence``/``last_sequence`` the events that started and last changed it.
    """

    model_config = ConfigDict(frozen=True)

    action_id: str
    action_key: str
    action_type: str
    key: str | None = None
    dedup_key: str
    fallback_key: str | None = None
    arguments: Any = None
    replay: str = "never"
    status: ActionStatus
    attempt: int = 1
    operation_key: str
    owner: dict[str, Any] = Field(default_factory=dict)
    approval_id: str | None = None
    external_id: str | None = None
    result: Any = None
    error: str | None = None
    note: str | None = None
    intercepted_sequence: int
    last_sequence: int
    origin: Origin
    settled_by: Origin | None = None  # who recorded the last settlement (completed/failed/...)
    settled_at: str | None = None  # when (the settling event's timestamp)
    # What the effect was intercepted under (its latest attempt): any of prompt_hash,
    # tool_schema_hash, model; None when the caller gave none.
    versions: dict[str, str] | None = None
    # One row per attempt that carried a cost (``ledger.budget``): attempt, estimate,
    # actual, by; None when no attempt did.
    usage: list[dict[str, Any]] | None = None

    @model_serializer(mode="wrap")
    def _without_unset_versions(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """No ``versions``/``usage`` key when none were given: the record of an action
        that pins and costs nothing stays exactly what earlier versions wrote (index rows,
        checkpoints)."""
        data: dict[str, Any] = handler(self)
        if self.versions is None:
            data.pop("versions", None)
        if self.usage is None:
            data.pop("usage", None)
        return data

    @property
    def failure_unconfirmed(self) -> bool:
        """Failed on the word of an agent (or of nobody known): "did not happen" is only
        trusted from a person or from continuum's own code, so it may not run again yet."""
        return self.status == ActionStatus.FAILED and self.settled_by not in TRUSTED_ORIGINS

    @property
    def needs_human(self) -> bool:
        """Unresolved (started, unknown) or failed without a trusted confirmation."""
        return self.status.unresolved or self.failure_unconfirmed


class Reading(BaseModel):
    """One signal's latest reading of an observation: what it saw (``value``, cut at the
    entry limits; ``digest`` is of the value as recorded), by whom and from where."""

    model_config = ConfigDict(frozen=True)

    signal: str
    origin: Origin
    value: Any = None
    digest: str
    source: str | None = None
    sequence: int
    event_id: str


class Perception(BaseModel):
    """An observation of the world with its readings (``perception_observed``): its
    ``status`` is ``verified`` (two agreeing independent signals), ``unverified`` or
    ``contested`` (``state.perception``); ``kind`` is environment | ui | content | tool."""

    model_config = ConfigDict(frozen=True)

    id: str
    subject: str
    kind: str = "content"
    status: str = "unverified"
    readings: dict[str, Reading] = Field(default_factory=dict)
    conflicting_subject: bool = False
    provenance: Provenance  # its first reading
    last_sequence: int


class Branch(BaseModel):
    """A plan branch gated on observations (``branch_resolved``): ``resolved`` (it may go
    on) or ``needs_human`` (``reason`` says why: a high-risk branch on an observation not
    verified, an environment observation contested) until a person resolves it;
    ``note`` is the reason its last caller gave."""

    model_config = ConfigDict(frozen=True)

    id: str
    choice: str
    risk: str = "low"
    observations: list[str] = Field(default_factory=list)
    status: str  # resolved | needs_human
    reason: str | None = None  # why it waits (continuum's words; agent values quoted)
    note: str | None = None  # the reason the caller gave (agent or person text, as given)
    rule: str | None = None
    resolved_by: Origin | None = None  # who resolved it (when resolved)
    attempts: int = 1
    provenance: Provenance  # the latest branch_resolved event

    @property
    def waiting(self) -> bool:
        return self.status == "needs_human"


class Confirmation(BaseModel):
    model_config = ConfigDict(frozen=True)

    sequence: int
    through_sequence: int
    scope: list[str]
    origin: Origin
    counted: bool


class ForkedFrom(BaseModel):
    """Where a fork came from (its ``run_forked`` event): run ``run``'s events
    1..``sequence``, the last of which had hash ``hash`` there."""

    model_config = ConfigDict(frozen=True)

    run: str
    sequence: int
    hash: str


class State(BaseModel):
    """The projected state of one run at ``sequence``."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    sequence: int = 0
    head_hash: str | None = None
    status: RunStatus = RunStatus.ACTIVE
    goal: GoalFact | None = None
    progress: Progress = Field(default_factory=Progress)
    plan: list[str] = Field(default_factory=list)
    plan_provenance: Provenance | None = None
    decisions: dict[str, Item] = Field(default_factory=dict)
    findings: dict[str, Item] = Field(default_factory=dict)
    evidence: dict[str, Item] = Field(default_factory=dict)
    work: dict[str, Item] = Field(default_factory=dict)
    approvals: dict[str, Approval] = Field(default_factory=dict)
    dependencies: dict[str, Dependency] = Field(default_factory=dict)
    model: str | None = None
    model_provenance: Provenance | None = None
    model_assumptions: list[Item] = Field(default_factory=list)
    actions: dict[str, ActionRecord] = Field(default_factory=dict)
    confirmations: list[Confirmation] = Field(default_factory=list)
    observations: dict[str, Perception] = Field(default_factory=dict)
    branches: dict[str, Branch] = Field(default_factory=dict)
    handoff: GoalFact | None = None  # the latest handoff note, with who wrote it
    # the run's limits (``usd_micros``, ``tokens``, ``provenance``, ``ignored``: raises
    # recorded by anyone but a person, which changed nothing); None: no limits
    budget: dict[str, Any] | None = None
    parent: str | None = None  # the run this one was started under (run_started)
    children: list[str] = Field(default_factory=list)  # runs started under it (child_started)
    forked_from: ForkedFrom | None = None  # the run and prefix it was forked from (run_forked)
    self_certified: dict[str, int] = Field(default_factory=dict)
    last_checkpoint: int | None = None
    unknown_event_types: int = 0
    malformed_events: int = 0
    first_malformed: int | None = None  # sequence of the first event counted as malformed

    @model_serializer(mode="wrap")
    def _without_empty_perception(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """No ``observations``/``branches``/``parent``/``children`` keys while a run has
        none: the state (and the
        checkpoints and contracts built from it) of a run that uses neither stays exactly
        what earlier versions wrote."""
        data: dict[str, Any] = handler(self)
        for name in ("observations", "branches", "parent", "children", "handoff", "budget"):
            if not data.get(name):
                data.pop(name, None)
        if data.get("forked_from") is None:  # a run that is no fork
            data.pop("forked_from", None)
        return data

    @property
    def pending_work(self) -> list[Item]:
        """Work items added and not yet completed or failed."""
        return [w for w in self.work.values() if w.status == "pending"]

    def confirmed_through(self, component: str) -> int:
        """Highest sequence a human confirmation covers for ``component`` (0 if none)."""
        best = 0
        for c in self.confirmations:
            if c.counted and (component in c.scope or "all" in c.scope):
                best = max(best, c.through_sequence)
        return best

    def unreviewed(self) -> dict[str, int]:
        """Components holding self-certified facts newer than any human confirmation."""
        return {
            comp: seq
            for comp, seq in sorted(self.self_certified.items())
            if seq > self.confirmed_through(comp)
        }

    def action_by_ref(self, ref: str) -> ActionRecord | None:
        """The action with ``action_id`` or ``action_key`` ``ref`` in this state, or None."""
        if ref in self.actions:
            return self.actions[ref]
        for a in self.actions.values():
            if a.action_key == ref:
                return a
        return None

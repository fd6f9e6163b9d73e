"""The store's row models for the API edge (pydantic): a run to create (``Run``), a run
as stored (``RunInfo``), checkpoints, approval and outbox rows, a whole run as moved
between stores (``RunExport``). ``base.py`` re-exports them, loaded on first use: the
ledger's hot path works on plain rows (``base.ActionRow``, ``base.RunHead``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from continuum.eventlog.event_model import Event
from continuum.store.base import ActionRow
from continuum.types import RunStatus


class Run(BaseModel):
    """A run to create. Only ``run_id`` is required."""

    run_id: str
    goal: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class RunInfo(BaseModel):
    """A run as stored: id, goal, ``status`` (a ``RunStatus``: active, completed,
    aborted), creation time, and the head of its chain (``head_sequence``, 0 before the
    first event, and ``head_hash``)."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    goal: str | None
    status: RunStatus
    created_at: str
    head_sequence: int
    head_hash: str | None
    metadata: dict[str, Any] = Field(default_factory=dict)


class CheckpointRow(BaseModel):
    """A stored checkpoint: the state's JSON through ``sequence`` and its hash."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    sequence: int  # the state covers events 1..sequence
    event_sequence: int  # the `checkpointed` event that sealed it
    state_json: str
    state_hash: str
    created_at: str


class ApprovalRow(BaseModel):
    """One row of the approval index: the fold's record of the approval
    (``projection.Approval`` as JSON)."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    approval_id: str
    record: dict[str, Any]


class OutboxRow(BaseModel):
    """One notification in the outbox (``notices.notice_for`` made its body).

    ``pending``: not yet delivered to every configured webhook (``delivered_to`` names
    those that have it), retried at ``next_attempt`` (Unix time); ``delivered``: every
    webhook has it; ``failed``: given up after the configured attempts, until
    ``continuum outbox retry``. ``claimed_until``: a deliverer is sending it now.
    """

    model_config = ConfigDict(frozen=True)

    delivery_id: str
    run_id: str
    sequence: int
    kind: str
    body: dict[str, Any]
    created_at: str
    status: str
    attempts: int = 0
    next_attempt: float = 0.0
    claimed_until: float | None = None
    delivered_to: list[str] = Field(default_factory=list)
    last_error: str | None = None
    delivered_at: str | None = None


class RunExport(BaseModel):
    """One whole run as moved between stores: its record, every event exactly as sealed,
    its checkpoints and its action and approval indexes (rebuilt from the events by the
    importer)."""

    run: RunInfo
    events: list[Event]
    checkpoints: list[CheckpointRow] = Field(default_factory=list)
    actions: list[ActionRow] = Field(default_factory=list)
    approvals: list[ApprovalRow] = Field(default_factory=list)

"""What an intercept answers at the API edge, ``InterceptResult`` (its fields are built as
plain data by the ledger; the guidance for each status is ``answers.py``), and the
approval gate of one intercept, judged inside its transaction (``approvals.judge_call``).

Imports ledger.approvals, ledger.identity, the store's interfaces and the leaves."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from continuum.eventlog.events import EventLike
from continuum.eventlog.notices import decide_command
from continuum.ledger.answers import GUIDANCE as GUIDANCE
from continuum.ledger.approval_rules import ApprovalRule
from continuum.ledger.approvals import (
    Verdict,
    judge_call,
    kept_approval,
)
from continuum.ledger.identity import (
    ActionIdentity,
)
from continuum.state.records import ActionRecord
from continuum.store.base import Storage, WriteTx
from continuum.types import InterceptStatus, Origin, ReplayContract
from continuum.untrusted import quoted


class InterceptResult(BaseModel):
    """The answer to ``intercept``: whether to perform the side effect now, and why.

    ``proceed`` is true for exactly one caller per action (``status`` ``started``):
    perform the effect, then call ``complete`` (or ``fail``) with ``action_key``. For any
    other ``status`` (an ``InterceptStatus``) do not perform it; ``guidance`` says what to
    do instead in one sentence an agent can follow.

    Fields: ``action_id`` (``act_...``) and ``action_key`` (``TYPE:KEY`` or ``TYPE#HASH``)
    name the action, either works as a reference later; ``attempt`` counts tries;
    ``replay`` is its replay contract; ``operation_key`` is stable across attempts, for an
    idempotency key at the external system (given when proceeding, or for an idempotent
    action); ``external_id`` and ``previous_result`` are what was recorded when it
    completed; ``matched_by`` says how an earlier action was found (``key``,
    ``arguments``, ``fallback``; None for a new one); ``similar_action`` is the earlier
    action of a ``possible_duplicate``; ``approval_id`` is the approval the call waits for,
    was denied by, or runs under, and ``denial_reason`` the person's reason for a denial.
    Serialized (JSON, MCP) every enum is its string. See references/api.md.
    """

    model_config = ConfigDict(frozen=True)

    proceed: bool
    status: InterceptStatus
    action_id: str
    action_key: str
    attempt: int
    replay: ReplayContract
    operation_key: str | None = None
    external_id: str | None = None
    previous_result: Any = None
    matched_by: str | None = None  # key | arguments | fallback (None for a new action)
    # possible_duplicate: the earlier action whose values these arguments share.
    similar_action: dict[str, Any] | None = None
    approval_id: str | None = None
    denial_reason: str | None = None
    guidance: str


class ApprovalGate:
    """The approval check of one intercept, inside its transaction (``judge_call``)."""

    def __init__(
        self,
        store: Storage,
        tx: WriteTx,
        rule: ApprovalRule,
        ident: ActionIdentity,
        action_type: str,
        key: str | None,
        arguments: Any,
        effect: str | None,
        origin: Origin,
        requested: ReplayContract | None,
    ) -> None:
        self.store = store
        self.tx, self.rule, self.ident, self.action_type = tx, rule, ident, action_type
        self.key, self.arguments, self.effect, self.origin = key, arguments, effect, origin
        self.requested = requested

    def judge(self, rec: ActionRecord | None) -> Verdict:
        run_id, store = self.tx.run.run_id, self.store

        def read_event(sequence: int) -> EventLike | None:  # verified as read
            return next(iter(store.iter_raw(run_id, sequence - 1, upto=sequence)), None)

        def read_kept(approval_id: str) -> dict[str, Any] | None:
            # An approval whose events were archived: the latest checkpoint whose hash its
            # sealing event (in the live log) vouches for holds the fold's record of it.
            return kept_approval(store, run_id, approval_id)

        return judge_call(
            self.tx,
            rule=self.rule,
            action_type=self.action_type,
            action_id=self.ident.action_id,
            action_key=self.ident.action_key,
            key=self.key,
            arguments=self.arguments,
            effect=self.effect,
            origin=self.origin,
            under=rec.approval_id if rec else None,
            read_event=read_event,
            read_kept=read_kept,
        )

    def stopped(self, verdict: Verdict, rec: ActionRecord | None) -> dict[str, Any]:
        """The answer for a call that may not run now (nothing of the action is written),
        as ``InterceptResult``'s fields."""
        status = verdict.status
        text = GUIDANCE[status].format(
            command=decide_command(verdict.approval_id),
            reason=f" (approval {verdict.approval_id}; their reason: "
            f"{quoted(verdict.reason, limit=500)})"
            if verdict.reason
            else f" (approval {verdict.approval_id})",
        )
        replay = ReplayContract(rec.replay) if rec else self.requested or ReplayContract.NEVER
        return dict(
            proceed=False,
            status=status,
            action_id=self.ident.action_id,
            action_key=self.ident.action_key,
            attempt=rec.attempt if rec else 0,
            replay=replay,
            approval_id=verdict.approval_id,
            denial_reason=verdict.reason if status == "denied" else None,
            guidance=text,
        )

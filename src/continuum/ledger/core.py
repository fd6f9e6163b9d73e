"""The two-phase action ledger: intercept, perform, complete (references/contract.md §6).

``intercept`` is one serialized write transaction: it looks the action up in the index
by its dedup key, decides, appends the event and updates the index together, so for one
key exactly one caller across threads, processes and hosts gets ``proceed: true``.
Index rows are built with the fold's own handler (``apply_action_event``), so the index
is the fold's view of each action by construction.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from continuum.errors import (
    ActionOwnedError,
    IntegrityError,
    InvalidTransitionError,
    LedgerError,
    NotFoundError,
    ReplayWideningError,
    UsageError,
)
from continuum.eventlog.canonical import canonical_json
from continuum.eventlog.events import EventType
from continuum.eventlog.limits import check_value
from continuum.eventlog.notices import limit_notice
from continuum.eventlog.payloads import VERSION_CHARS, VERSION_FIELDS, payload_problem
from continuum.faults import fault_point
from continuum.ledger.answers import GUIDANCE, answer
from continuum.ledger.approval_rules import ApprovalRules, RuleFiles
from continuum.ledger.budget import BudgetScope, charged, over_budget
from continuum.ledger.identity import (
    ActionIdentity,
    _text,
    action_identity,
    normalize_key,
    original_identities,
)
from continuum.ledger.owners import (
    current_owner,
    describe_owner,
    owner_alive,
    same_owner,
)
from continuum.state.action_fields import failure_unconfirmed, is_plain_record, status_of
from continuum.state.projection import apply_action_event
from continuum.store.base import DEFAULT_PAGE, ActionRow, Storage, WriteTx, format_timestamp
from continuum.types import ActionStatus, Origin, ReplayContract, RunStatus
from continuum.untrusted import check_identifier

if TYPE_CHECKING:
    from continuum.ledger.gate import ApprovalGate, InterceptResult
    from continuum.state.records import ActionRecord

DEFAULT_LEASE_SECONDS = 30.0
_SAME: Any = object()  # ``approval_arguments`` not given: an approval binds the arguments


# -- identity ------------------------------------------------------------------------------


# -- owners and leases --------------------------------------------------------------------


# -- the index, as read -----------------------------------------------------------------


def _damaged_index(run_id: str, action_id: str, detail: str) -> IntegrityError:
    return IntegrityError(
        f"the action index of run {run_id!r} is damaged at {action_id}: {detail}",
        code="integrity.index_mismatch",
        hint=f"run `continuum verify {run_id}`; nothing was changed and nothing may proceed",
        run_id=run_id,
        action_id=action_id,
    )


def _found_once(run_id: str, by_id: ActionRow | None, by_key: ActionRow | None) -> ActionRow | None:
    """The same row through both of its unique indexes, or neither.

    A damaged index entry would otherwise hide a completed action, and the next intercept
    would tell its caller to perform it again.
    """
    if by_id is None and by_key is None:
        return None
    if by_id is None or by_key is None or by_id.action_id != by_key.action_id:
        found = by_id or by_key
        assert found is not None
        raise _damaged_index(run_id, found.action_id, "found by one of its keys but not the other")
    return by_key


def _by_ref(tx: WriteTx, action_ref: str) -> ActionRow | None:
    """The action ``action_ref`` names: an action key (``TYPE:KEY`` or ``TYPE#HASH``, never
    without one of those) looked up as a key first, anything else as an id first."""
    if ":" in action_ref or "#" in action_ref:
        return tx.find_action(action_key=action_ref) or tx.find_action(action_id=action_ref)
    return tx.find_action(action_id=action_ref) or tx.find_action(action_key=action_ref)


# The API's models, loaded on first use (with pydantic) and kept: an import statement in
# a function costs every call a look-up in the import system.
_models: dict[str, Any] = {}


def _action_record() -> type[ActionRecord]:
    model = _models.get("ActionRecord")
    if model is None:
        from continuum.state.records import ActionRecord

        model = _models["ActionRecord"] = ActionRecord
    return model


def _intercept_result() -> type[InterceptResult]:
    model = _models.get("InterceptResult")
    if model is None:
        from continuum.ledger.gate import InterceptResult

        model = _models["InterceptResult"] = InterceptResult
    return model


def _model(record: dict[str, Any]) -> ActionRecord:
    """A record the fold just made, as the API's model."""
    return _action_record().model_validate(record)


def _record(row: ActionRow) -> ActionRecord:
    from pydantic import ValidationError

    from continuum.state.records import ActionRecord

    try:
        return ActionRecord.model_validate(row.record)
    except ValidationError as e:
        raise _damaged_index(row.run_id, row.action_id, "the record is not valid") from e


# -- the ledger ---------------------------------------------------------------------------


DEFAULT_BLOCK_DRIFT = ("tool_schema_hash",)  # a changed tool schema blocks a replay


class ActionLedger:
    """The action ledger of one store (``Continuum.ledger``; use the facade's methods).

    Every transition is one write transaction that appends the event and updates the
    action index together. ``origin`` is stamped on what it writes; ``owner`` names the
    process performing the actions it intercepts, and ``lease_seconds`` how long another
    host trusts that owner without hearing from it.
    """

    def __init__(
        self,
        store: Storage,
        *,
        origin: Origin = Origin.DETERMINISTIC,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        cwd: str | None = None,
        clock: Callable[[], float] = time.time,
        owner: dict[str, Any] | None = None,
        approvals: RuleFiles | ApprovalRules | None = None,
    ) -> None:
        self.store, self.origin, self.lease_seconds = store, origin, lease_seconds
        self.cwd = cwd or os.getcwd()
        self.clock = clock
        self.owner = owner or current_owner()
        # Which calls wait for a person's decision: by default the approvals.toml files of
        # ``cwd`` and beside the store, read again when they change (``approvals.py``).
        self.approvals: RuleFiles | ApprovalRules = (
            approvals if approvals is not None else RuleFiles.around(self.cwd, store.url)
        )
        # Actions this ledger started and has not settled: their leases are ours to renew.
        self.held: set[tuple[str, str]] = set()

    def _apply(
        self,
        tx: WriteTx,
        row: ActionRow | None,
        type: EventType,
        payload: dict[str, Any],
        origin: Origin,
        lease: float | None,
        keys_checked: bool = False,
    ) -> dict[str, Any]:
        """Append the event and put the action's new index row; its record (the fold's).
        ``keys_checked``: the payload holds only the ledger's own fields and values
        ``canonical_json`` already accepted (``WriteTx.append_raw``)."""
        event = tx.append_raw(type, payload, source=origin, keys_checked=keys_checked)
        record = apply_action_event(row.record if row else None, event)
        assert record is not None
        tx.put_action(ActionRow(tx.head.run_id, record["action_id"], record, lease))
        return record

    def intercept(
        self,
        run_id: str,
        action_type: str,
        arguments: Any = None,
        *,
        key: str | None = None,
        replay: ReplayContract | str | None = None,
        approval_id: str | None = None,
        origin: Origin | None = None,
        effect: str | None = None,
        approval_arguments: Any = _SAME,
        versions: Mapping[str, str] | None = None,
        block_drift: Sequence[str] = DEFAULT_BLOCK_DRIFT,
        hold: str | None = None,
        estimate: Mapping[str, int] | None = None,
        budget: Sequence[BudgetScope] | None = None,
    ) -> InterceptResult:
        """Ask before a side effect; ``proceed`` is true for exactly one caller per action.

        ``estimate``: what this attempt may cost (``continuum.ledger.budget``: ``usd_micros``,
        ``tokens``), recorded with it; ``budget``: the run's limits (the facade reads them
        from the run): an attempt whose estimate would pass them answers
        ``budget_exceeded`` with the figures and writes nothing, judged inside the write
        transaction (concurrent intercepts at the edge never overspend).

        ``hold``: why no new attempt may start now (the facade's periodic revalidation
        found the environment changed): a call that would proceed answers
        ``revalidation_required`` instead, writing nothing; one already done or refused
        answers as it would.

        ``versions``: what the effect runs under (``prompt_hash``, ``tool_schema_hash``,
        ``model``), recorded with the action; an interrupted ``safe`` or ``idempotent``
        action met again under another value of a field in ``block_drift`` (by default
        ``tool_schema_hash`` alone; a rule may add ``model`` or ``prompt_hash``) than it
        was recorded with is not re-run (``version_drift``) until a person reconciles it.

        A call an approval rule matches proceeds only under a person's grant: the first
        such intercept records an approval request and answers ``awaiting_approval``
        (``approval_id``); ``effect`` names the host effect rule a hook call came through,
        and ``approval_arguments`` what an approval binds to when that is not all of
        ``arguments`` (a hook leaves out its session and call ids: a new session repeating
        the call is the same call).
        Raises ``UsageError`` for bad input (and ``approvals.bad_rules`` while the rules
        are malformed) and ``LedgerError`` (``ledger.run_finished``) for a run that has
        completed or was aborted; nothing is written in either case.
        """
        return _intercept_result()(
            **self.intercept_plain(
                run_id,
                action_type,
                arguments,
                key=key,
                replay=replay,
                approval_id=approval_id,
                origin=origin,
                effect=effect,
                approval_arguments=approval_arguments,
                versions=versions,
                block_drift=block_drift,
                hold=hold,
                estimate=estimate,
                budget=budget,
            )
        )

    def intercept_plain(
        self,
        run_id: str,
        action_type: str,
        arguments: Any = None,
        *,
        key: str | None = None,
        replay: ReplayContract | str | None = None,
        approval_id: str | None = None,
        origin: Origin | None = None,
        effect: str | None = None,
        approval_arguments: Any = _SAME,
        versions: Mapping[str, str] | None = None,
        block_drift: Sequence[str] = DEFAULT_BLOCK_DRIFT,
        hold: str | None = None,
        estimate: Mapping[str, int] | None = None,
        budget: Sequence[BudgetScope] | None = None,
    ) -> dict[str, Any]:
        """``intercept``, its answer as ``InterceptResult``'s fields (plain data: a caller
        that needs no model, such as a hook process, never loads pydantic)."""
        check_value(arguments, "arguments")  # limits.py: before identity walks it
        pinned = check_versions(versions)
        blocking = check_block_drift(block_drift)
        given = (action_type, key)  # as the agent wrote them: the original hashed them so
        action_type = check_identifier(
            _text(action_type) if isinstance(action_type, str) else action_type,
            what="action_type",
            code="usage.bad_action_type",
            max_length=200,
            hint="name the kind of side effect in printable text, e.g. send_invoice",
        )
        if key is not None:
            key = check_identifier(
                normalize_key(action_type, key) if isinstance(key, str) else key,
                what="key",
                code="usage.bad_key",
                max_length=1000,
                hint="use a stable business key in printable text, e.g. invoice:INV-001",
            )
        try:
            requested = ReplayContract(replay) if replay is not None else None
        except ValueError:
            raise UsageError(
                f"replay {replay!r} is not a replay contract",
                code="usage.bad_replay",
                hint="use never, reconcile, idempotent or safe",
            ) from None
        canonical_json(arguments)  # refuse non-JSON arguments before locking
        bound = arguments if approval_arguments is _SAME else approval_arguments
        if bound is not arguments:
            canonical_json(bound)
        ident = self.identity(run_id, action_type, key, arguments)
        origin = origin or self.origin
        # Rules judge the action, not its spelling: also its identity's canonical arguments.
        rule = self.approvals.find(  # fails closed (RuleFiles)
            action_type, arguments, effect, canonical=ident.normalized_arguments
        )
        now = self.clock()
        with self.store.write(run_id) as tx:
            if tx.head.status != RunStatus.ACTIVE:
                raise LedgerError(
                    f"run {run_id!r} is {tx.head.status}: it takes no new side effects",
                    code="ledger.run_finished",
                    hint="start a new run for new work; settling earlier actions still works",
                    run_id=run_id,
                    status=str(tx.head.status),
                )
            # Two lookups, one per unique key, each on its own: a damaged index (or a row
            # edited under one key) must not hide a done action behind the other.
            row = _found_once(
                run_id,
                tx.find_action(action_id=ident.action_id),
                tx.find_action(dedup_key=ident.dedup_key),
            )
            if row is None:  # recorded under an earlier identity: older rules, or the original
                for action_id, dedup_key in (
                    *ident.earlier,
                    *original_identities(
                        tx.head,
                        given[0],
                        (given[1], key) if key is not None else (None,),
                        arguments,
                    ),
                ):
                    row = _found_once(
                        run_id,
                        tx.find_action(action_id=action_id),
                        tx.find_action(dedup_key=dedup_key),
                    )
                    if row is not None:
                        break
            if row is None and ident.fallback_key is not None:
                for fallback in (ident.fallback_key, *ident.earlier_fallback):
                    similar = tx.find_action(fallback_key=fallback)
                    if similar is not None:  # a suspicion, never an answer: nothing is written
                        return self._possible_duplicate(_record(similar))
            gate: ApprovalGate | None = None
            if rule is not None:
                from continuum.ledger.gate import ApprovalGate

                gate = ApprovalGate(
                    self.store, tx, rule, ident, action_type, key, bound, effect, origin, requested
                )
            # Past the budget, a new call is refused before a person is asked to approve it.
            over = self._over_budget(tx, budget, estimate) if row is None else None
            verdict = (
                gate.judge(None) if gate is not None and row is None and over is None else None
            )
            if verdict is not None and verdict.status != "allow":
                assert gate is not None
                result = gate.stopped(verdict, None)  # the approval request is all it writes
            elif row is None and hold is not None:
                result = _not_started(ident, requested, "revalidation_required", hold)
            elif row is None and over is not None:
                _tell_limit(tx, "budget_exceeded", over, ident.action_key, action_type)
                result = _not_started(ident, requested, "budget_exceeded", over[0])
            elif row is None:
                contract = requested or ReplayContract.NEVER
                if verdict is not None:
                    approval_id = verdict.approval_id
                rec = self._apply(
                    tx,
                    None,
                    EventType.ACTION_INTERCEPTED,
                    {
                        "action_id": ident.action_id,
                        "action_key": ident.action_key,
                        "action_type": action_type,
                        "key": key,
                        "dedup_key": ident.dedup_key,
                        "fallback_key": ident.fallback_key,
                        "arguments": arguments,
                        "replay": str(contract),
                        "operation_key": ident.operation_key,
                        "owner": self.owner,
                        "approval_id": approval_id,
                        **({"versions": pinned} if pinned else {}),
                        **({"estimate": dict(estimate)} if estimate else {}),
                    },
                    origin,
                    now + self.lease_seconds,
                    keys_checked=True,  # the arguments were checked above, the rest is ours
                )
                result = answer(rec, True, "started", None)
            else:
                result = self._decide(
                    tx,
                    row,
                    requested,
                    origin,
                    now,
                    "key" if key is not None else "arguments",
                    gate,
                    pinned,
                    blocking,
                    hold,
                    estimate,
                    budget,
                )
        if result["proceed"]:
            self.held.add((run_id, result["action_id"]))
        fault_point("after_intercept_commit")
        return result

    def identity(
        self, run_id: str, action_type: str, key: str | None = None, arguments: Any = None
    ) -> ActionIdentity:
        """The identity ``intercept`` gives this call (key normalized, paths against cwd)."""
        action_type = _text(action_type)
        if key is not None:
            key = normalize_key(action_type, key)
        return action_identity(run_id, action_type, arguments, key, self.cwd)

    def _over_budget(
        self,
        tx: WriteTx,
        budget: Sequence[BudgetScope] | None,
        estimate: Mapping[str, int] | None,
    ) -> tuple[str, str] | None:
        """Why this attempt's ``estimate`` passes a ``budget`` scope (the run's own limits,
        an ancestor's over its family), counted from the ledger in this write transaction:
        every attempt's actual, else its estimate, and the limit's fingerprint; or None.
        No limits: nothing is read."""
        for scope in budget or ():
            if all(v is None for v in scope.limits.values()):
                continue
            # Always over the family: a child started since the scope was read counts too.
            rows = tx.actions_of(scope.run_id, scope.members, scope.listed_at)
            own = scope.run_id == tx.head.run_id and all(r.run_id == scope.run_id for r in rows)
            whose = "The run" if own else f"The family of run {scope.run_id!r}"
            over = over_budget(scope.limits, charged(r.record for r in rows), estimate, whose=whose)
            if over is not None:
                return over, f"budget:{scope.run_id}:{canonical_json(dict(scope.limits))}"
        return None

    def _retry_capped(self, tx: WriteTx, rec: ActionRecord) -> tuple[str, str] | None:
        """Why a new attempt of ``rec`` passes a ``[[retry]]`` cap, or None. Counted in the
        write transaction from the ledger: exact under concurrent intercepts."""
        per_type, run_wide = self.approvals.retry_caps(rec.action_type)
        limit = per_type.max_attempts if per_type is not None else None
        if per_type is not None and limit is not None and rec.attempt + 1 > limit:
            return (
                f" It has had {rec.attempt} attempt(s); {per_type.where} allows at most "
                f"{limit} for {rec.action_type}.",
                f"max_attempts:{rec.action_id}:{limit}",
            )
        if run_wide is not None and run_wide.run_retries is not None:
            used = sum(max(0, int(row.record.get("attempt", 1)) - 1) for row in tx.actions())
            if used + 1 > run_wide.run_retries:
                return (
                    f" This run has made {used} new attempt(s); {run_wide.where} allows at "
                    f"most {run_wide.run_retries} in a run.",
                    f"run_retries:{run_wide.run_retries}",
                )
        return None

    def _possible_duplicate(self, rec: ActionRecord) -> dict[str, Any]:
        return dict(
            proceed=False,
            status="possible_duplicate",
            action_id=rec.action_id,
            action_key=rec.action_key,
            attempt=rec.attempt,
            replay=ReplayContract(rec.replay),
            matched_by="fallback",
            guidance=GUIDANCE["possible_duplicate"],
            similar_action={
                "action_id": rec.action_id,
                "action_key": rec.action_key,
                "status": str(rec.status),
                "arguments": rec.arguments,
                "external_id": rec.external_id,
            },
        )

    def _result(
        self,
        rec: ActionRecord | dict[str, Any],
        proceed: bool,
        status: str,
        matched: str | None,
        extra: str = "",
    ) -> dict[str, Any]:
        fields = rec if isinstance(rec, dict) else rec.model_dump()
        return answer(fields, proceed, status, matched, extra)

    def _decide(
        self,
        tx: WriteTx,
        row: ActionRow,
        requested: ReplayContract | None,
        origin: Origin,
        now: float,
        matched: str,
        gate: ApprovalGate | None = None,
        pinned: dict[str, str] | None = None,
        blocking: tuple[str, ...] = ("tool_schema_hash",),
        hold: str | None = None,
        estimate: Mapping[str, int] | None = None,
        budget: Sequence[BudgetScope] | None = None,
    ) -> dict[str, Any]:
        rec = _record(row)
        stored = ReplayContract(rec.replay)
        if requested is not None and requested.width > stored.width:
            raise ReplayWideningError(
                f"action {rec.action_key} was intercepted with replay={stored}; "
                f"a later intercept may not widen it to {requested}",
                hint=f"intercept again with replay={stored} (or narrower), or use a new key",
                action_key=rec.action_key,
                stored=str(stored),
                requested=str(requested),
            )
        contract = requested if requested is not None else stored
        status = rec.status
        rerunnable = contract in (ReplayContract.SAFE, ReplayContract.IDEMPOTENT)
        if status == ActionStatus.COMPLETED:
            return self._result(rec, False, "completed", matched)
        if status == ActionStatus.COMPENSATED:
            return self._result(rec, False, "compensated", matched)
        if status == ActionStatus.STARTED and owner_alive(rec.owner, row.lease_expires, now):
            return self._result(rec, False, "in_progress", matched)
        if rec.failure_unconfirmed and not rerunnable:
            return self._result(rec, False, "needs_confirmation", matched)
        lease = now + self.lease_seconds
        drift = version_drift_words(rec.versions, pinned, blocking)
        if status != ActionStatus.FAILED and rerunnable and drift:
            # Re-running an interrupted effect is allowed by its contract for the tool it
            # was recorded with; under another schema it may do something else.
            return self._result(rec, False, "version_drift", matched, drift)
        if (status == ActionStatus.FAILED or rerunnable) and hold is not None:
            return self._result(rec, False, "revalidation_required", matched, hold)
        if status == ActionStatus.FAILED or rerunnable:
            # Certainly not done (a person or trusted code said so), or the contract allows
            # running it again: a new attempt (under a person's grant, where a rule says so),
            # unless a retry cap says this attempt is one too many.
            capped = self._retry_capped(tx, rec)
            if capped is not None:
                _tell_limit(tx, "retry_cap_reached", capped, rec.action_key, rec.action_type)
                return self._result(rec, False, "retry_cap_reached", matched, capped[0])
            over = self._over_budget(tx, budget, estimate)
            if over is not None:
                _tell_limit(tx, "budget_exceeded", over, rec.action_key, rec.action_type)
                return self._result(rec, False, "budget_exceeded", matched, over[0])
            retry: dict[str, Any] = {
                "action_id": rec.action_id,
                "attempt": rec.attempt + 1,
                "owner": self.owner,
                "reason": "failed" if status == ActionStatus.FAILED else f"replay={contract}",
                **({"versions": pinned} if pinned else {}),
                **({"estimate": dict(estimate)} if estimate else {}),
            }
            if gate is not None:
                verdict = gate.judge(rec)
                if verdict.status != "allow":
                    return gate.stopped(verdict, rec)
                retry["approval_id"] = verdict.approval_id
            retried = self._apply(tx, row, EventType.ACTION_RETRIED, retry, origin, lease)
            return self._result(retried, True, "started", matched)
        now_rec: ActionRecord | dict[str, Any] = rec
        if status == ActionStatus.STARTED:
            now_rec = self._apply(
                tx,
                row,
                EventType.ACTION_MARKED_UNKNOWN,
                {
                    "action_id": rec.action_id,
                    "reason": "interrupted: the process that intercepted it is gone",
                },
                origin,
                None,
            )
        if contract == ReplayContract.RECONCILE:
            return self._result(now_rec, False, "reconcile_required", matched)
        return self._result(now_rec, False, "unknown", matched)

    # -- transitions by reference -----------------------------------------------------------

    def _transition(
        self,
        run_id: str,
        action_ref: str,
        allowed: set[ActionStatus],
        type: EventType,
        payload: dict[str, Any],
        origin: Origin | None,
        verb: str,
        *,
        force: bool = False,
        also: Callable[[dict[str, Any]], bool] | None = None,
        keys_checked: bool = False,
    ) -> dict[str, Any]:
        """One transition of a recorded action, in one write transaction; the action's new
        record (plain data; the public methods return it as an ``ActionRecord``)."""
        origin = origin or self.origin
        with self.store.write(run_id) as tx:
            row = _by_ref(tx, action_ref)
            if row is None:
                raise NotFoundError(
                    f"action {action_ref!r} not found in run {run_id!r}",
                    code="not_found.action",
                    hint=f"list actions with `continuum actions {run_id}`",
                    run_id=run_id,
                    action=action_ref,
                )
            # The index row's record as the model would read it: as it is when each field
            # has its plain type (no model built), else through the model (damage refused).
            rec = row.record if is_plain_record(row.record) else _record(row).model_dump()
            status, action_key, owner = status_of(rec), rec["action_key"], rec.get("owner", {})
            if status not in allowed and not (also is not None and also(rec)):
                raise InvalidTransitionError(
                    f"cannot {verb} action {action_key}: it is {status}",
                    hint="list actions to see its state; "
                    + (
                        "it is already settled" if not status.unresolved else "reconcile it instead"
                    ),
                    action_key=action_key,
                    status=str(status),
                )
            if (
                status == ActionStatus.STARTED
                and not same_owner(owner, self.owner)
                and not force
                and owner_alive(owner, row.lease_expires, self.clock())
            ):
                # Only the process performing it knows how it ends; another writer settling
                # it would let a second caller proceed while the first one still runs.
                raise ActionOwnedError(
                    f"cannot {verb} action {action_key}: {describe_owner(owner)} is "
                    "performing it right now (its owner is alive), and only the owner may settle it",
                    hint="wait until it finishes and check again; a person who knows its outcome "
                    "can settle it anyway with `continuum reconcile ... --force`",
                    action_key=action_key,
                    owner=owner,
                )
            new = self._apply(
                tx,
                row,
                type,
                {"action_id": rec["action_id"], **payload},
                origin,
                None,
                keys_checked=keys_checked,
            )
        if new["status"] != ActionStatus.STARTED:
            self.held.discard((run_id, new["action_id"]))
        fault_point(f"after_{verb}_commit")
        return new

    def complete(
        self,
        run_id: str,
        action_ref: str,
        *,
        external_id: str | None = None,
        result: Any = None,
        origin: Origin | None = None,
        actual: Mapping[str, int] | None = None,
    ) -> ActionRecord:
        """Record that the effect happened (``actual``: what it cost, as
        ``continuum.ledger.budget`` counts it).
        Only the owner may complete a started action while the owner is alive
        (``ledger.owner_alive`` otherwise)."""
        return _model(
            self.complete_plain(
                run_id,
                action_ref,
                external_id=external_id,
                result=result,
                origin=origin,
                actual=actual,
            )
        )

    def complete_plain(
        self,
        run_id: str,
        action_ref: str,
        *,
        external_id: str | None = None,
        result: Any = None,
        origin: Origin | None = None,
        actual: Mapping[str, int] | None = None,
    ) -> dict[str, Any]:
        """``complete``, the action's record as plain data (no model built)."""
        canonical_json(result)
        return self._transition(
            run_id,
            action_ref,
            {ActionStatus.STARTED},
            EventType.ACTION_COMPLETED,
            {
                "external_id": external_id,
                "result": result,
                **({"actual": dict(actual)} if actual else {}),
            },
            origin,
            "complete",
            keys_checked=True,  # the result was checked above; actual is cost_of's
        )

    def fail(
        self,
        run_id: str,
        action_ref: str,
        *,
        error: str | None = None,
        certain: bool = False,
        origin: Origin | None = None,
        actual: Mapping[str, int] | None = None,
    ) -> ActionRecord:
        """Record a failure; without ``certain`` the effect may have happened: ``unknown``
        (its estimate stays reserved); a certain one may carry what it cost (``actual``).

        A certain failure from a self-certified origin (an agent) is recorded, but the
        action may not run again until a person confirms it (``needs_confirmation``).
        """
        return _model(
            self.fail_plain(
                run_id, action_ref, error=error, certain=certain, origin=origin, actual=actual
            )
        )

    def fail_plain(
        self,
        run_id: str,
        action_ref: str,
        *,
        error: str | None = None,
        certain: bool = False,
        origin: Origin | None = None,
        actual: Mapping[str, int] | None = None,
    ) -> dict[str, Any]:
        """``fail``, the action's record as plain data (no model built)."""
        if certain:
            return self._transition(
                run_id,
                action_ref,
                {ActionStatus.STARTED, ActionStatus.UNKNOWN},
                EventType.ACTION_FAILED,
                {"error": error, "certain": True, **({"actual": dict(actual)} if actual else {})},
                origin,
                "fail",
            )
        return self._transition(
            run_id,
            action_ref,
            {ActionStatus.STARTED},
            EventType.ACTION_MARKED_UNKNOWN,
            {"reason": error or "failed; outcome uncertain"},
            origin,
            "fail",
        )

    def reconcile(
        self,
        run_id: str,
        action_ref: str,
        *,
        occurred: bool,
        external_id: str | None = None,
        note: str | None = None,
        origin: Origin | None = None,
        force: bool = False,
        probe: dict[str, Any] | None = None,
        via: Mapping[str, str] | None = None,
    ) -> ActionRecord:
        """Settle an interrupted action (or an agent's unconfirmed failure) after checking
        the external system. ``force`` settles a started action whose owner is alive;
        ``via`` (how a person gave it) is recorded as given."""
        payload: dict[str, Any] = {
            "occurred": bool(occurred),
            "external_id": external_id,
            "note": note,
        }
        if probe is not None:
            payload["probe"] = probe
        if via is not None:
            payload["via"] = dict(via)
        return _model(
            self._transition(
                run_id,
                action_ref,
                {ActionStatus.UNKNOWN, ActionStatus.STARTED},
                EventType.ACTION_RECONCILED,
                payload,
                origin,
                "reconcile",
                force=force,
                also=failure_unconfirmed,
            )
        )

    def compensate(
        self, run_id: str, action_ref: str, *, note: str | None = None, origin: Origin | None = None
    ) -> ActionRecord:
        """Record that a completed action's effect was undone; ``ledger.invalid_transition``
        unless it is ``completed``."""
        return _model(
            self._transition(
                run_id,
                action_ref,
                {ActionStatus.COMPLETED},
                EventType.ACTION_COMPENSATED,
                {"note": note},
                origin,
                "compensate",
            )
        )

    def renew_lease(self, run_id: str, action_ref: str) -> None:
        """Extend one action's lease by ``lease_seconds``; ``not_found.action`` if unknown."""
        row = self.store.get_action(run_id, action_ref)
        if row is None:
            raise NotFoundError(
                f"action {action_ref!r} not found",
                code="not_found.action",
                hint="check the action_key",
            )
        self.store.renew_lease(run_id, row.action_id, self.clock() + self.lease_seconds)

    def renew_held_leases(self) -> int:
        """Extend the lease of every action this ledger is performing; returns how many.

        Another host cannot see whether this process is alive, only the lease: a long
        side effect keeps its lease fresh so it is not judged interrupted.
        """
        until = self.clock() + self.lease_seconds
        for run_id, action_id in sorted(self.held):
            self.store.renew_lease(run_id, action_id, until)
        return len(self.held)

    def actions(self, run_id: str) -> list[ActionRecord]:
        """Every action of the run, in interception order; ``not_found.run`` if unknown."""
        self.store.get_run(run_id)
        return [_record(r) for r in self.store.list_actions(run_id)]

    def page(
        self, run_id: str, *, cursor: str | None = None, limit: int = DEFAULT_PAGE
    ) -> tuple[list[ActionRecord], str | None]:
        """One page of the run's actions, open ones first (``Storage.action_page``)."""
        rows, next_cursor = self.store.action_page(run_id, cursor=cursor, limit=limit)
        return [_record(r) for r in rows], next_cursor


def check_versions(versions: Mapping[str, str] | None) -> dict[str, str] | None:
    """``versions`` as recorded, or ``UsageError`` (``usage.bad_versions``) naming the
    field; None for none."""
    if versions is None:
        return None
    if not isinstance(versions, Mapping):
        raise UsageError(
            "versions must be an object of prompt_hash, tool_schema_hash and model",
            code="usage.bad_versions",
            hint='e.g. {"tool_schema_hash": "sha256:...", "model": "claude-sonnet-4"}',
        )
    out = {str(k): v for k, v in versions.items() if v is not None}
    problem = payload_problem(EventType.ACTION_RETRIED, {"action_id": "x", "versions": out})
    if problem is not None:
        raise UsageError(
            f"versions {problem.removeprefix('versions ')}",
            code="usage.bad_versions",
            hint=f"give any of {', '.join(VERSION_FIELDS)}, each a string of at most "
            f"{VERSION_CHARS} characters",
        )
    return {k: out[k] for k in VERSION_FIELDS if k in out} or None


def check_block_drift(fields: Sequence[str]) -> tuple[str, ...]:
    """The version fields whose drift blocks a replay, or ``UsageError``."""
    if (
        isinstance(fields, str)
        or not isinstance(fields, Sequence)
        or not all(isinstance(f, str) and f in VERSION_FIELDS for f in fields)
    ):
        raise UsageError(
            f"block_drift {str(fields)[:80]!r} is not a list of version fields",
            code="usage.bad_versions",
            hint=f"a list of any of {', '.join(VERSION_FIELDS)}",
        )
    return tuple(dict.fromkeys(fields))


_WHAT = {"tool_schema_hash": "tool schema", "model": "model", "prompt_hash": "prompt"}


def version_drift_words(
    recorded: Mapping[str, str] | None,
    now: Mapping[str, str] | None,
    fields: Sequence[str] = DEFAULT_BLOCK_DRIFT,
) -> str:
    """The words for the ``fields`` recorded with the action whose value is different now,
    or not given now (the caller cannot say it is the same: fail closed), or "" (none
    recorded, or each the same)."""
    changed = []
    for name in fields:
        before, after = (recorded or {}).get(name), (now or {}).get(name)
        if before is None or before == after:
            continue
        shown = f"{after[:40]!r}" if after is not None else "not given"
        changed.append(f"{_WHAT[name]} {before[:40]!r}, now {shown}")
    if not changed:
        return ""
    return f"; it was recorded under {'; '.join(changed)}."


def _tell_limit(
    tx: WriteTx, kind: str, why: tuple[str, str], action_key: str, action_type: str
) -> None:
    """A person is told that the run reached a limit: once per limit as set (the notice's
    id is the limit's fingerprint), in the refusing transaction (no event is written)."""
    tx.put_notice(
        limit_notice(
            kind,
            run_id=tx.head.run_id,
            sequence=tx.head.head_sequence,
            recorded_at=format_timestamp(datetime.now(UTC)),
            fingerprint=why[1],
            reason=why[0],
            action_key=action_key,
            action_type=action_type,
        )
    )


def _not_started(
    ident: ActionIdentity, requested: ReplayContract | None, status: str, why: str
) -> dict[str, Any]:
    """A new action refused before anything is written (``status``, and why)."""
    return dict(
        proceed=False,
        status=status,
        action_id=ident.action_id,
        action_key=ident.action_key,
        attempt=0,
        replay=requested or ReplayContract.NEVER,
        guidance=GUIDANCE[status] + why,
    )

"""The second layer of the facade: the action ledger (intercept, complete, fail,
reconcile, the effect seam), approvals of the calls that wait for a person, and the
notification outbox, over ``RunsFacade``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from continuum.errors import UsageError
from continuum.eventlog.events import EventType
from continuum.eventlog.payloads import check_via
from continuum.ledger.approval_rules import ApprovalRules, RuleFiles
from continuum.ledger.approvals import (
    ApprovalInfo,
    approval_info,
    find_approval_row,
    list_approval_infos,
    record_decision,
)
from continuum.ledger.budget import (
    BudgetScope,
    RunBudget,
    budget_scopes,
    cost_given,
    cost_of,
    listed_family,
    row_charge,
)
from continuum.ledger.core import DEFAULT_BLOCK_DRIFT
from continuum.ledger.effect import Effect
from continuum.ledger.gate import InterceptResult
from continuum.runtime.results import ActionsPage
from continuum.runtime.runs import MAX_FAMILY, RunsFacade
from continuum.state.records import ActionRecord
from continuum.store import DEFAULT_PAGE, MAX_PAGE
from continuum.store.models import OutboxRow
from continuum.types import ActionStatus, Origin

if TYPE_CHECKING:
    from continuum.ledger.outbox import DeliveryReport, NotifyConfig


class EffectsFacade(RunsFacade):
    """The ledger, approvals and the outbox (the layer under ``Continuum``; use
    ``Continuum``)."""

    # -- the ledger -------------------------------------------------------------------------

    def intercept(
        self,
        run_id: str,
        action_type: str,
        arguments: Any = None,
        *,
        key: str | None = None,
        replay: str | None = None,
        approval_id: str | None = None,
        effect: str | None = None,
        approval_arguments: Any = None,
        versions: Mapping[str, str] | None = None,
        block_drift: Sequence[str] = DEFAULT_BLOCK_DRIFT,
        cost: Mapping[str, Any] | None = None,
    ) -> InterceptResult:
        """Ask before a side effect; returns an ``InterceptResult``.

        Perform the effect only when ``proceed`` is true (exactly one caller per action
        gets it, across threads, processes and hosts), then call ``complete`` (or
        ``fail``) with its ``action_key``. Otherwise ``status`` says why not and
        ``guidance`` what to do (``InterceptStatus``: ``completed``, ``unknown``, ...).

        The action is named by ``key``, a stable business key (``invoice:INV-1``; a key
        that repeats the type, ``upload:a.csv`` for type ``upload``, is the key
        ``a.csv``), else by its ``arguments`` (JSON, normalized: paths, numbers, Unicode).
        ``replay`` says what may happen when an interrupted action is met again:
        ``never`` (default), ``reconcile``, ``idempotent`` or ``safe``; a later intercept
        may not widen it. ``approval_id`` ties it to a granted approval.

        A call an approval rule matches (``.continuum/approvals.toml``) answers
        ``awaiting_approval`` with an ``approval_id`` until a person allows exactly this
        call (``decide``), then proceeds once; ``denied`` after a denial. ``effect``: the
        host effect rule a hook call came through (for ``effect = ...`` rules);
        ``approval_arguments``: what an approval binds to, if not all of ``arguments``.
        ``versions``: what the effect runs under, any of ``prompt_hash``,
        ``tool_schema_hash`` and ``model`` (kept with the action; ``resume`` reports drift
        from the current ones); an interrupted ``safe``/``idempotent`` action met again
        under another ``tool_schema_hash`` answers ``version_drift`` instead of running;
        ``block_drift`` names the fields whose drift blocks (default the tool schema
        alone; add ``model`` or ``prompt_hash`` for effects that depend on them).
        ``cost``: this attempt's estimate, ``{"usd": 0.02, "tokens": 1500}`` (either);
        under a budget (``set_budget``) an attempt whose estimate would pass it answers
        ``budget_exceeded`` (an effect in flight or unknown reserves its estimate).

        Raises ``UsageError`` (``usage.bad_action_type``, ``usage.bad_key``,
        ``usage.bad_replay``, ``usage.not_json``), ``NotFoundError`` (``not_found.run``),
        ``LedgerError`` (``ledger.run_finished``, ``ledger.replay_widening``) and
        ``IntegrityError`` (``integrity.index_mismatch``: nothing may proceed). Nothing is
        written when it raises.
        """
        extra = {} if approval_arguments is None else {"approval_arguments": approval_arguments}
        estimate = cost_given(cost)
        hold, state = self._hold_and_state(run_id)
        # No limits of its own and no parent: no budget applies (what ``budget_scopes``
        # answers from this state), and the run is not read again for it. Anything else
        # is read afresh, in the order the family's count depends on (``budget.py``).
        limits = (
            None
            if state.get("budget") is None and state.get("parent") is None
            else self.budget_scopes(run_id)
        )
        if limits is not None:
            extra["budget"] = limits
        if estimate is not None:
            extra["estimate"] = estimate
        return self.ledger.intercept(
            run_id,
            action_type,
            arguments,
            key=key,
            replay=replay,
            approval_id=approval_id,
            effect=effect,
            versions=versions,
            block_drift=block_drift,
            hold=hold,
            **extra,
        )

    def complete(
        self,
        run_id: str,
        action: str,
        *,
        external_id: str | None = None,
        result: Any = None,
        cost: Mapping[str, Any] | None = None,
    ) -> ActionRecord:
        """Record that the side effect of ``action`` (its ``action_key`` or ``action_id``)
        happened, with the external system's id and a JSON ``result`` (returned to a later
        intercept as ``previous_result``); returns the updated ``ActionRecord``.

        Raises ``NotFoundError`` (``not_found.action``), ``LedgerError``:
        ``ledger.invalid_transition`` (the action is not ``started``) and
        ``ledger.owner_alive`` (another live process is performing it). ``cost``: what it
        really cost (``{"usd": ..., "tokens": ...}``), in place of its estimate.
        """
        actual = cost_given(cost)
        return self.ledger.complete(
            run_id, action, external_id=external_id, result=result, actual=actual
        )

    def fail(
        self,
        run_id: str,
        action: str,
        *,
        error: str | None = None,
        certain: bool = False,
        cost: Mapping[str, Any] | None = None,
    ) -> ActionRecord:
        """Record that the side effect of ``action`` failed; returns the ``ActionRecord``.

        Without ``certain`` it may have happened anyway, so the action becomes ``unknown``
        (check, then ``reconcile``). With ``certain=True`` it is ``failed`` and may run
        again, but an agent's word (origin ``llm``/``external_agent``) needs a person's
        confirmation first (``needs_confirmation``). Raises as ``complete`` does:
        ``not_found.action``, ``ledger.invalid_transition``, ``ledger.owner_alive``.
        ``cost`` (with ``certain`` only): what the failed attempt cost.
        """
        actual = cost_given(cost)
        if actual is not None and not certain:
            raise UsageError(
                "an uncertain failure has no actual cost: its estimate stays reserved",
                code="usage.bad_cost",
                hint="give cost with certain=True, or settle it with reconcile; nothing was "
                "written",
            )
        return self.ledger.fail(run_id, action, error=error, certain=certain, actual=actual)

    # -- budgets and usage (ledger/budget.py) ---------------------------------------------------

    def budget_scopes(self, run_id: str) -> list[BudgetScope] | None:
        """The budgets an intercept in the run is judged against, as the ledger checks
        them: the run's own limits, then each ancestor's that has some, counted over that
        ancestor's whole family (a parent's budget covers its children); None: none."""
        return budget_scopes(run_id, self._run_budget, self._head_of, max_family=MAX_FAMILY)

    def _run_budget(self, run_id: str) -> RunBudget:
        return _run_budget_of(self._plain_state(run_id))

    def _head_of(self, run_id: str) -> int:
        return self.store.get_head(run_id).head_sequence

    def set_budget(
        self,
        run_id: str,
        *,
        usd: Any = None,
        tokens: int | None = None,
        reason: str | None = None,
        via: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Set the run's limits (``usd``: dollars, ``tokens``; None: no limit of that
        kind). Anyone may set a first limit or lower one; raising one (or removing it) is
        a person's act: from any other origin it raises ``budget.raise_needs_person`` and
        writes nothing. ``via``: how a person gave it (``usage.bad_via``). Returns the
        limits now."""
        limits = cost_of(usd, tokens, what="budget") or {}
        recorded_via = check_via(via)
        now = self.state(run_id).budget
        if now is not None and self.origin != Origin.HUMAN:
            for k in ("usd_micros", "tokens"):
                old = now.get(k)
                if old is not None and (limits.get(k) is None or limits[k] > old):
                    raise UsageError(
                        f"raising the run's {k.replace('_micros', '')} limit is a person's act",
                        code="budget.raise_needs_person",
                        hint=f"a person runs `continuum budget {run_id} ...` at a terminal; "
                        "nothing was written",
                    )
        payload: dict[str, Any] = {
            "usd_micros": limits.get("usd_micros"),
            "tokens": limits.get("tokens"),
        }
        if reason is not None:
            payload["reason"] = reason
        if recorded_via is not None:
            payload["via"] = recorded_via
        self.append(run_id, EventType.BUDGET_SET, payload)
        state = self.state(run_id)
        return dict(state.budget or {})

    def usage(self, run_id: str) -> dict[str, Any]:
        """The run's usage ledger: one row per attempt that carried a cost (``action_key``,
        ``attempt``, ``estimate``, ``actual``, ``by``, what it ``counts``), the totals
        (``spent``: actuals; ``reserved``: estimates of attempts without one) and the
        limits."""
        rows: list[dict[str, Any]] = []
        spent = [0, 0]
        reserved = [0, 0]
        for a in self.actions(run_id):
            for row in a.usage or ():
                counted = row_charge(row)
                into = spent if row.get("actual") is not None else reserved
                into[0] += counted[0]
                into[1] += counted[1]
                rows.append(
                    {
                        "action_key": a.action_key,
                        "status": str(a.status),
                        **row,
                        "counts": {"usd_micros": counted[0], "tokens": counted[1]},
                    }
                )
        state = self.state(run_id)
        limits = state.budget
        out: dict[str, Any] = {
            "run_id": run_id,
            "rows": rows,
            "spent": {"usd_micros": spent[0], "tokens": spent[1]},
            "reserved": {"usd_micros": reserved[0], "tokens": reserved[1]},
            "limits": None
            if limits is None
            else {k: limits.get(k) for k in ("usd_micros", "tokens")},
        }
        if state.children:  # what the family under it spent and reserves (its budget's count)
            members, _ = listed_family(run_id, self._run_budget, self._head_of, MAX_FAMILY)
            family = [[0, 0], [0, 0]]  # spent, reserved
            for member in members:
                for indexed in self.store.list_actions(member):
                    for row in indexed.record.get("usage") or ():
                        counted = row_charge(row)
                        into = family[0] if row.get("actual") is not None else family[1]
                        into[0] += counted[0]
                        into[1] += counted[1]
            out["family"] = {
                "runs": list(members),
                "spent": {"usd_micros": family[0][0], "tokens": family[0][1]},
                "reserved": {"usd_micros": family[1][0], "tokens": family[1][1]},
            }
        return out

    def reconcile(
        self,
        run_id: str,
        action: str,
        *,
        occurred: bool,
        external_id: str | None = None,
        note: str | None = None,
        origin: Origin | None = None,
        force: bool = False,
        via: Mapping[str, str] | None = None,
    ) -> ActionRecord:
        """Settle an interrupted action after checking the external system.

        From an agent (a self-certified origin), ``occurred=False`` is recorded but does not
        let the action run again until a person confirms it. ``force`` settles a started
        action whose owner is still alive (raises ``ledger.owner_alive`` otherwise).
        ``origin`` overrides this object's origin for this record (a trusted edge passes
        ``Origin.HUMAN`` for a person's decision) and ``via`` says how the person gave it.
        Returns the updated ``ActionRecord``.

        Raises ``UsageError`` (``usage.bad_via``), ``NotFoundError`` (``not_found.action``)
        and ``LedgerError``
        (``ledger.invalid_transition`` for an action that is already settled).
        """
        return self.ledger.reconcile(
            run_id,
            action,
            occurred=occurred,
            external_id=external_id,
            note=note,
            origin=origin,
            force=force,
            via=check_via(via),
        )

    def effect(
        self,
        run_id: str,
        action_type: str,
        *,
        key: str | Callable[..., str | None] | None = None,
        arguments: Any = None,
        replay: str | None = None,
        certain_on: tuple[type[BaseException], ...] = (),
        encode: Callable[[Any], Any] | None = None,
        decode: Callable[[Any], Any] | None = None,
        external_id: Callable[[Any], str | None] | None = None,
        versions: Mapping[str, str] | None = None,
        block_drift: Sequence[str] = DEFAULT_BLOCK_DRIFT,
        cost: Mapping[str, Any] | Callable[..., Mapping[str, Any] | None] | None = None,
        actual_cost: Callable[[Any], Mapping[str, Any] | None] | None = None,
    ) -> Effect:
        """A side effect performed at most once: decorator, ``run``/``arun`` or ``with``.

        See ``continuum.ledger.effect.Effect``: a completed effect returns its recorded result, an
        interrupted one raises ``EffectUncertain``. Recorded with this facade's origin.
        ``versions``: what it runs under (``tool_schema_hash``, ``prompt_hash``, ``model``).
        ``cost``: each attempt's estimate, ``{"usd": 0.02, "tokens": 1500}`` or a function
        of the call's arguments giving one; ``actual_cost``: a function of the result
        giving what it cost (or ``scope.record(cost=...)`` in a ``with`` block). Under a
        budget, an attempt past it raises ``LedgerError`` (``ledger.effect_budget_exceeded``).
        """
        return Effect(
            self.ledger,
            run_id,
            action_type,
            key=key,
            arguments=arguments,
            replay=replay,
            certain_on=certain_on,
            encode=encode,
            decode=decode,
            external_id=external_id,
            versions=versions,
            block_drift=block_drift,
            hold=lambda: self.hold_for(run_id),
            budget=lambda: self.budget_scopes(run_id),
            cost=cost,
            actual_cost=actual_cost,
        )

    def compensate(self, run_id: str, action: str, *, note: str | None = None) -> ActionRecord:
        """Record that a completed action's effect was undone (a semantic undo performed
        outside continuum): the rollback verdict's ``compensate_action:ID``. A later
        intercept of it answers ``compensated`` and does not proceed. Returns the
        ``ActionRecord``; raises ``NotFoundError`` (``not_found.action``) and
        ``LedgerError`` (``ledger.invalid_transition`` unless it is ``completed``)."""
        return self.ledger.compensate(run_id, action, note=note)

    def actions(self, run_id: str) -> list[ActionRecord]:
        """Every action of the run, in the order they were intercepted (see
        ``actions_page`` for a long run)."""
        return self.ledger.actions(run_id)

    def actions_page(
        self, run_id: str, *, cursor: str | None = None, limit: int = DEFAULT_PAGE
    ) -> ActionsPage:
        """One page of the run's actions: open ones (started, unknown, failed) first, then
        the settled ones, each in interception order; ``next_cursor`` gives the next page
        (None after the last). A page costs its rows, not the run's history; an action
        that changes status between pages may be listed twice or skipped."""
        actions, next_cursor = self.ledger.page(run_id, cursor=cursor, limit=limit)
        return ActionsPage(actions=actions, next_cursor=next_cursor)

    def interrupted(self, run_id: str) -> set[str]:
        """Ids of ``started`` actions whose owner is gone: in effect ``unknown`` until the
        next intercept or a reconcile records it (reading never writes)."""
        return {
            a.action_id for a in self.actions(run_id) if a.status == ActionStatus.STARTED
        } - self._in_flight(run_id, self.state(run_id))

    # -- approvals (references/operators.md, "Approvals") -------------------------------------

    def approval_rules(self) -> ApprovalRules:
        """The approval rules intercepts are judged by now (``approvals.bad_rules`` while a
        file is malformed)."""
        rules = self.ledger.approvals
        return rules.current() if isinstance(rules, RuleFiles) else rules

    def approvals(
        self, run_id: str | None = None, *, pending_only: bool = True, limit: int = MAX_PAGE
    ) -> list[ApprovalInfo]:
        """Approvals in the order they were requested, of one run or of every run.

        ``pending_only`` (default): those waiting for a person's decision, in active
        runs. Each ``ApprovalInfo`` has the ``approval_id`` (``id``), ``run_id``, the
        call it is bound to (``action_type``, ``action_key``, ``key``, ``arguments``,
        ``arguments_hash``), the ``rule`` that asked, and once decided ``status``,
        ``scope``, ``reason``, ``decided_by`` and ``used_by``. Agent-supplied text is
        returned as is: escape it wherever a person reads it. ``not_found.run`` for an
        unknown ``run_id``."""
        return list_approval_infos(self.store, run_id, pending_only=pending_only, limit=limit)

    def approval(self, approval_id: str, *, run_id: str | None = None) -> ApprovalInfo:
        """One approval by id (``not_found.approval``; ``usage.ambiguous_approval`` if two
        runs hold the id: pass ``run_id``)."""
        return approval_info(self.store, find_approval_row(self.store, approval_id, run_id))

    def decide(
        self,
        approval_id: str,
        *,
        allow: bool,
        reason: str,
        scope: str = "call",
        run_id: str | None = None,
        expect_binding: str | None = None,
        via: Mapping[str, str] | None = None,
    ) -> ApprovalInfo:
        """A person's decision on a pending approval, always recorded with origin ``human``
        (for trusted edges only: the CLI behind a terminal or ``--yes``, an operator's
        authenticated page; never an agent's tool).

        ``allow=True, scope="call"``: exactly the call it is bound to may proceed, once.
        ``scope="run"``: that action type proceeds for the rest of the run, any arguments
        (and the run's other pending approvals of that type are granted with it).
        ``allow=False``: the call answers ``denied`` with ``reason``. ``reason`` is
        required. ``expect_binding``: refuse (``integrity.approval_mismatch``) unless the
        approval is still bound to the call the person was shown. ``via``: how the person
        gave it, recorded with it. Raises
        ``not_found.approval``, ``usage.bad_scope``, ``usage.bad_reason``, ``usage.bad_via`` and
        ``ledger.invalid_transition`` (already decided); nothing is written then.
        """
        return record_decision(
            self.store,
            approval_id,
            allow=allow,
            reason=reason,
            scope=scope,
            run_id=run_id,
            expect_binding=expect_binding,
            via=check_via(via),
        )

    # -- the notification outbox (references/operators.md, "Outbox") -------------------------

    def outbox(
        self, *, status: str | None = None, run_id: str | None = None, limit: int = MAX_PAGE
    ) -> list[OutboxRow]:
        """Notifications for a person, newest first: ``pending``, ``delivered`` or
        ``failed`` (``status`` filters). Each ``OutboxRow`` has the stable
        ``delivery_id``, ``kind``, ``run_id``, the ``body`` sent, ``attempts``,
        ``next_attempt``, ``delivered_to`` and ``last_error``."""
        return self.store.list_outbox(status=status, run_id=run_id, limit=limit)

    def outbox_counts(self) -> dict[str, int]:
        """``{"pending": n, "delivered": n, "failed": n}``."""
        return self.store.outbox_counts()

    def notify_config(self) -> NotifyConfig:
        """The webhooks of ``.continuum/notify.toml`` in ``cwd`` and beside a SQLite store
        (``outbox.bad_config`` for a malformed file)."""
        from continuum.ledger.outbox import load_notify, notify_paths  # HTTP: on first use

        return load_notify(notify_paths(self.ledger.cwd, self.store.url))

    def deliver_outbox(
        self, config: NotifyConfig | None = None, *, limit: int = 50
    ) -> DeliveryReport:
        """One delivery pass: send what is due to every configured webhook, record each
        outcome (retries with backoff; ``failed`` after the configured attempts)."""
        from continuum.ledger.outbox import deliver_due

        return deliver_due(
            self.store, config if config is not None else self.notify_config(), limit=limit
        )

    def retry_outbox(self, delivery_ids: Sequence[str] | None = None) -> int:
        """Put failed notifications (these, or all) back to pending; returns how many."""
        return self.store.requeue_outbox(delivery_ids)


def _run_budget_of(state: Mapping[str, Any]) -> RunBudget:
    """What a budget asks of a run's plain state (``RunsFacade._plain_state``)."""
    return RunBudget(state.get("budget"), state.get("parent"), state.get("children") or [])

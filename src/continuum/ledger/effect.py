"""The effect seam: run a side effect at most once through the action ledger (references/contract.md §6).

``Effect`` wraps one kind of side effect of a run: as a decorator (sync or async), as a
direct call (``run`` / ``arun``) or as a context manager (``with`` / ``async with``).
Each call intercepts, performs, then completes or fails, so a program gets the ledger's
guarantees without handling ``InterceptResult`` itself:

- the first call performs the effect and records its result;
- a call that finds the effect completed returns the recorded result, without running it;
- a call that finds it interrupted (``unknown``, ``reconcile_required``,
  ``needs_confirmation``) raises ``EffectUncertain`` (with the reconcile command) instead
  of guessing; the replay contract (``safe``, ``idempotent``) is what allows a re-run;
- a call an approval rule matches raises ``EffectAwaitingApproval`` (with the approval
  id and the ``continuum decide`` command) until a person allows it, and
  ``EffectDenied`` once a person denied it: it never runs without a grant;
- an exception from the effect records ``fail(certain=False)`` (unknown: it may have
  happened) unless its type is in ``certain_on`` (it certainly did not), then re-raises.

Results are recorded as JSON: ``encode`` turns a result into JSON, ``decode`` turns the
recorded JSON back. A result that is still not JSON is recorded as completed with a
marker instead (the effect happened and is never run again), and the call raises
``usage.effect_result_not_json``; a later call that meets it raises
``usage.effect_result_unrecorded``.

The ledger's commits run on the caller's thread, also for async effects: each is one
short durable write, and there is no await between a commit and its answer, so a
cancelled task never leaves an intent it does not know about.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any, ParamSpec, TypeVar, cast

from continuum.errors import (
    ContinuumError,
    EffectAwaitingApproval,
    EffectDenied,
    EffectUncertain,
    LedgerError,
    UsageError,
)
from continuum.eventlog.canonical import canonical_json
from continuum.faults import fault_point
from continuum.ledger.budget import BudgetScope, cost_given
from continuum.ledger.core import ActionLedger
from continuum.ledger.gate import InterceptResult
from continuum.log import get_logger
from continuum.types import Origin, ReplayContract

P = ParamSpec("P")
R = TypeVar("R")

# Answers that mean "may or may not have happened": never a re-run, never a guess.
UNCERTAIN = frozenset({"unknown", "reconcile_required", "needs_confirmation", "version_drift"})
# Recorded in place of a result that could not be encoded as JSON.
UNRECORDED = "continuum_unrecorded_result"
_REFUSED_HINTS = {
    "in_progress": "another live process is performing it right now: do not perform it; "
    "try again once it has finished",
    "compensated": "it was done and later undone (compensated): use a new key to do it again",
    "possible_duplicate": "an earlier action of this type had the same values under other "
    "field names; if it is a different effect, give it a key that tells "
    "them apart (key=...)",
}

_log = get_logger("continuum.effect")
_current: ContextVar[EffectScope | None] = ContextVar("continuum_effect", default=None)


def current_effect() -> EffectScope | None:
    """The effect being performed in this context (for its ``operation_key``), if any."""
    return _current.get()


class EffectScope:
    """One call of an effect: what the ledger answered, and the result to record."""

    def __init__(self, answer: InterceptResult, run_id: str, result: Any = None) -> None:
        self.run_id = run_id
        self.action_id = answer.action_id
        self.action_key = answer.action_key
        self.attempt = answer.attempt
        # Same on every attempt of an idempotent effect: pass it to the receiver to dedupe.
        self.operation_key = answer.operation_key
        self.replayed = not answer.proceed  # the effect is done: ``result`` is the recorded one
        self.result = result
        self.external_id: str | None = answer.external_id if self.replayed else None
        self._token: Token[EffectScope | None] | None = None
        self.cost: Mapping[str, Any] | None = None  # what it cost (``record(cost=...)``)

    def record(
        self,
        result: Any = None,
        *,
        external_id: str | None = None,
        cost: Mapping[str, Any] | None = None,
    ) -> None:
        """Set what ``complete`` records when the ``with`` block ends without an exception
        (``cost``: what it cost, ``{"usd": ..., "tokens": ...}``)."""
        if self.replayed:
            raise UsageError(
                f"effect {self.action_key} was already performed; nothing to record",
                code="usage.effect_replayed",
                hint="check scope.replayed and use scope.result instead of "
                "performing the effect again",
            )
        self.result, self.external_id, self.cost = result, external_id, cost


class Effect:
    """A side effect of run ``run_id``, performed at most once per identity.

    ``key``: a business key (text) or a function of the call's arguments returning one;
    ``None`` uses the ledger's identity from the arguments (drift tolerant).
    ``arguments``: what the ledger records (JSON), or a function of the call's arguments
    returning it; by default the call's bound arguments.
    ``replay``: the contract for an interrupted attempt (``never`` by default).
    ``certain_on``: exception types that certainly mean "did not happen" (a new attempt
    may run); every other exception records ``unknown``.
    ``encode`` / ``decode``: result to JSON and back; ``external_id``: a function of the
    result giving the external system's id for it.
    ``origin``: who records the transitions (default: the ledger's, ``deterministic``
    for a program's own code).
    ``versions``: what the effect runs under (``tool_schema_hash``, ``prompt_hash``,
    ``model``): recorded with each attempt; an interrupted ``safe``/``idempotent``
    effect met under another tool schema raises ``EffectUncertain`` (``version_drift``).
    """

    def __init__(
        self,
        ledger: ActionLedger,
        run_id: str,
        action_type: str,
        *,
        key: str | Callable[..., str | None] | None = None,
        arguments: Any = None,
        replay: ReplayContract | str | None = None,
        certain_on: tuple[type[BaseException], ...] = (),
        encode: Callable[[Any], Any] | None = None,
        decode: Callable[[Any], Any] | None = None,
        external_id: Callable[[Any], str | None] | None = None,
        origin: Origin | None = None,
        versions: Mapping[str, str] | None = None,
        block_drift: Sequence[str] = ("tool_schema_hash",),
        hold: Callable[[], str | None] | None = None,
        budget: Callable[[], Sequence[BudgetScope] | None] | None = None,
        cost: Mapping[str, Any] | Callable[..., Mapping[str, Any] | None] | None = None,
        actual_cost: Callable[[Any], Mapping[str, Any] | None] | None = None,
    ) -> None:
        if not isinstance(certain_on, tuple) or not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in certain_on
        ):
            raise UsageError(
                "certain_on must be a tuple of exception types",
                code="usage.bad_certain_on",
                hint="e.g. certain_on=(ValueError,) for errors raised before "
                "the effect could happen",
            )
        self.ledger, self.run_id, self.action_type = ledger, run_id, action_type
        self.key, self.arguments, self.replay = key, arguments, replay
        self.certain_on, self.encode, self.decode = certain_on, encode, decode
        self.external_id, self.origin = external_id, origin
        self.versions, self.block_drift = versions, tuple(block_drift)
        # Asked before each intercept: why a new attempt may not start now (the facade's
        # periodic revalidation), or None.
        self.hold = hold
        # Asked before each intercept: the budgets the run is judged against, or None.
        self.budget = budget
        # An attempt's estimate (a cost, or a function of the call's arguments giving one)
        # and what it cost (a function of the result), for the run's budget and usage.
        self.cost, self.actual_cost = cost, actual_cost

    # -- intercept and settle ----------------------------------------------------------------

    def begin(
        self, key: str | None, arguments: Any, estimate: Mapping[str, Any] | None = None
    ) -> EffectScope:
        """Intercept: a scope to perform (``replayed`` false) or the recorded result.

        Raises ``EffectUncertain`` for an interrupted effect, ``EffectAwaitingApproval``
        for a call that waits for a person's decision, ``EffectDenied`` for one a person
        denied, and ``LedgerError`` for one
        the ledger refuses (``ledger.effect_in_progress``, ``_compensated``,
        ``_possible_duplicate``).
        """
        try:
            canonical_json(arguments)
        except (TypeError, ValueError, UsageError) as e:
            raise UsageError(
                f"the arguments of effect {self.action_type!r} are not JSON: {e}",
                code="usage.effect_arguments",
                hint="pass arguments=... (a function of the call's arguments that returns JSON) "
                "to say what the ledger records",
            ) from None
        if estimate is None and self.cost is not None and not callable(self.cost):
            estimate = self.cost
        answer = self.ledger.intercept(
            self.run_id,
            self.action_type,
            arguments,
            key=key,
            replay=self.replay,
            origin=self.origin,
            versions=self.versions,
            block_drift=self.block_drift,
            hold=self.hold() if self.hold is not None else None,
            estimate=cost_given(estimate, f"the estimate of effect {self.action_type!r}"),
            budget=self.budget() if self.budget is not None else None,
        )
        if answer.proceed:
            return EffectScope(answer, self.run_id)
        if answer.status == "completed":
            return EffectScope(answer, self.run_id, self._replayed(answer))
        if answer.status in UNCERTAIN:
            raise EffectUncertain(
                run_id=self.run_id,
                action_key=answer.action_key,
                action_id=answer.action_id,
                status=answer.status,
            )
        if answer.status == "awaiting_approval" and answer.approval_id is not None:
            raise EffectAwaitingApproval(
                run_id=self.run_id,
                action_key=answer.action_key,
                action_id=answer.action_id,
                approval_id=answer.approval_id,
            )
        if answer.status == "denied" and answer.approval_id is not None:
            raise EffectDenied(
                run_id=self.run_id,
                action_key=answer.action_key,
                action_id=answer.action_id,
                approval_id=answer.approval_id,
                reason=answer.denial_reason,
            )
        raise LedgerError(
            f"effect {answer.action_key} of run {self.run_id} was not performed: "
            f"it is {answer.status}",
            code=f"ledger.effect_{answer.status}",
            hint=_REFUSED_HINTS.get(answer.status, answer.guidance),
            run_id=self.run_id,
            action_key=answer.action_key,
            action_id=answer.action_id,
            status=answer.status,
            similar_action=answer.similar_action,
        )

    def _replayed(self, answer: InterceptResult) -> Any:
        recorded = answer.previous_result
        if isinstance(recorded, dict) and set(recorded) == {UNRECORDED}:
            raise UsageError(
                f"effect {answer.action_key} happened, but its result was not JSON and was not "
                "recorded",
                code="usage.effect_result_unrecorded",
                hint="the effect is not run again: read what you need from the external system "
                f"(external id {answer.external_id!r}); pass encode=/decode= for new effects",
                action_key=answer.action_key,
            )
        if recorded is None or self.decode is None:
            return recorded  # None: no result recorded (e.g. a person reconciled it)
        return self.decode(recorded)

    def finish(self, scope: EffectScope, error: BaseException | None) -> None:
        """Complete (no error) or fail the action ``scope`` performed."""
        if scope.replayed:
            return
        if error is not None:
            certain = isinstance(error, self.certain_on)
            try:
                self.ledger.fail(
                    self.run_id,
                    scope.action_id,
                    error=_describe(error),
                    certain=certain,
                    origin=self.origin,
                )
            except ContinuumError as e:  # the original error is the one the caller must see
                error.add_note(
                    f"continuum could not record this failure ({e.code}); the "
                    f"action {scope.action_key} will read as unknown"
                )
            return
        fault_point("after_effect")
        external_id = scope.external_id
        if external_id is None and self.external_id is not None:
            external_id = self.external_id(scope.result)
        try:
            encoded = self.encode(scope.result) if self.encode is not None else scope.result
            canonical_json(encoded)
        except (TypeError, ValueError, UsageError) as e:
            self.ledger.complete(
                self.run_id,
                scope.action_id,
                external_id=external_id,
                result={UNRECORDED: type(scope.result).__name__},
                origin=self.origin,
            )
            raise UsageError(
                f"effect {scope.action_key} happened and is recorded as completed, but its "
                f"result ({type(scope.result).__name__}) is not JSON, so it was not recorded",
                code="usage.effect_result_not_json",
                hint="return JSON (dict, list, str, number, bool, None), or pass encode= and "
                "decode= to effect(); the effect is not run again",
                action_key=scope.action_key,
            ) from e
        actual = scope.cost
        if actual is None and self.actual_cost is not None:
            try:
                actual = self.actual_cost(scope.result)
            except Exception as e:  # the effect happened: record it, without its cost
                _log.warning("effect.actual_cost_failed", action_key=scope.action_key, error=str(e))
        try:
            actual_recorded = cost_given(actual, f"the actual cost of effect {self.action_type!r}")
        except UsageError as e:  # the effect happened: its estimate stays reserved
            _log.warning("effect.actual_cost_refused", action_key=scope.action_key, error=str(e))
            actual_recorded = None
        self.ledger.complete(
            self.run_id,
            scope.action_id,
            external_id=external_id,
            result=encoded,
            origin=self.origin,
            actual=actual_recorded,
        )

    # -- call forms --------------------------------------------------------------------------

    def _identity(
        self, fn: Callable[..., Any] | None, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[str | None, Any, Mapping[str, Any] | None]:
        key = self.key(*args, **kwargs) if callable(self.key) else self.key
        estimate = self.cost(*args, **kwargs) if callable(self.cost) else self.cost
        if callable(self.arguments):
            arguments = self.arguments(*args, **kwargs)
        elif self.arguments is not None or fn is None:
            arguments = self.arguments
        else:
            bound = inspect.signature(fn).bind(*args, **kwargs)
            bound.apply_defaults()
            arguments = dict(bound.arguments)
        return key, arguments, estimate

    def run(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """Perform ``fn(*args, **kwargs)`` as this effect (sync)."""
        scope = self.begin(*self._identity(fn, args, kwargs))
        if scope.replayed:
            return cast(R, scope.result)
        token = _current.set(scope)
        try:
            scope.result = fn(*args, **kwargs)
        except BaseException as e:
            self.finish(scope, e)
            raise
        finally:
            _current.reset(token)
        self.finish(scope, None)
        return cast(R, scope.result)

    async def arun(self, fn: Callable[..., Awaitable[R]], *args: Any, **kwargs: Any) -> R:
        """Perform ``await fn(*args, **kwargs)`` as this effect (async)."""
        scope = self.begin(*self._identity(fn, args, kwargs))
        if scope.replayed:
            return cast(R, scope.result)
        token = _current.set(scope)
        try:
            scope.result = await fn(*args, **kwargs)
        except BaseException as e:  # cancellation too: the effect may have happened
            self.finish(scope, e)
            raise
        finally:
            _current.reset(token)
        self.finish(scope, None)
        return cast(R, scope.result)

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        """Decorate ``fn`` (a plain or an ``async`` function): every call is this effect."""
        if inspect.iscoroutinefunction(fn):
            afn = cast(Callable[..., Awaitable[Any]], fn)

            @functools.wraps(fn)
            async def guarded_async(*args: Any, **kwargs: Any) -> Any:
                return await self.arun(afn, *args, **kwargs)

            return cast(Callable[P, R], guarded_async)

        @functools.wraps(fn)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            return self.run(fn, *args, **kwargs)

        return guarded

    # -- with / async with ------------------------------------------------------------------

    def __enter__(self) -> EffectScope:
        if callable(self.key) or callable(self.arguments) or callable(self.cost):
            raise UsageError(
                "a key or arguments function needs the call's arguments; in a "
                "with block give them as values",
                code="usage.effect_with_function",
                hint="effect(run, type, key='invoice:INV-1', arguments={...})",
            )
        scope = self.begin(self.key, self.arguments)
        scope._token = _current.set(scope)
        return scope

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # The scope this context entered (one Effect may be entered by many tasks at once).
        scope = _current.get()
        assert scope is not None and scope._token is not None, "__exit__ without __enter__"
        _current.reset(scope._token)
        scope._token = None
        self.finish(scope, exc)

    async def __aenter__(self) -> EffectScope:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


def _describe(error: BaseException) -> str:
    text = str(error)
    name = type(error).__name__
    return (f"{name}: {text}" if text else name)[:500]

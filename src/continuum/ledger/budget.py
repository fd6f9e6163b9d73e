"""What effects cost, and whether one more fits a run's budget (pure).

A cost is ``{"usd_micros": N, "tokens": N}`` (either may be absent): US dollars in
millionths, so sums are exact. An intercept may carry its estimate, ``complete`` or a
certain ``fail`` the actual; each attempt of an action is one usage row (``estimate``,
``actual``, ``by``). A row counts its actual once given (0 included), else its estimate:
an effect in flight or unknown is reserved at its estimate, never counted as zero. An
intercept whose estimate would take the run past a limit is refused before the effect
(``budget_exceeded``), inside the write transaction, so concurrent intercepts at the edge
never overspend.

A parent's budget covers the run and every run below it (``BudgetScope``: the limits and
the runs they count): a child's intercept is judged against its own limits and those of
each ancestor that has some, counted over that ancestor's whole family.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from continuum.errors import NotFoundError, UsageError

MICROS = 1_000_000
MAX_USD = 10**12  # a trillion dollars: past this it is a typo
MAX_TOKENS = 10**15
MAX_FAMILY = 1000  # runs below one parent a budget (and a verdict) looks at


class BudgetScope(NamedTuple):
    """Limits (``usd_micros``, ``tokens``; None: no limit of that kind) set on
    ``run_id``, counted over the attempts of ``members`` (the run, and for a parent every
    run below it). ``listed_at``: each member's head when its children were read (the
    write transaction adds a child started since, under the scope's lock)."""

    run_id: str
    limits: Mapping[str, int | None]
    members: tuple[str, ...]
    listed_at: tuple[int, ...] = ()


class RunBudget(NamedTuple):
    """What a budget asks of a run's state: its limits (``State.budget``: None for none),
    its parent and the runs listed under it (``State.parent``, ``State.children``)."""

    budget: Mapping[str, Any] | None
    parent: str | None
    children: Sequence[str]


def budget_scopes(
    run_id: str,
    state_of: Callable[[str], RunBudget],
    head_of: Callable[[str], int],
    *,
    max_family: int,
) -> list[BudgetScope] | None:
    """The budgets an intercept in ``run_id`` is judged against, as the ledger checks
    them: the run's own limits, then each ancestor's that has some, counted over that
    ancestor's whole family (a parent's budget covers its children); None: none.

    ``state_of(run)`` and ``head_of(run)`` read a run (``NotFoundError`` for one never
    started); the facade gives its cached states, a hook process plain ones."""
    state = state_of(run_id)
    scopes: list[BudgetScope] = []
    if state.budget is not None:  # over the run and every run below it
        limits = limit_fields(state.budget)
        if state.children:
            scopes.append(
                BudgetScope(run_id, limits, *listed_family(run_id, state_of, head_of, max_family))
            )
        else:
            # The head first, then the run as it is at that head: a child started before
            # it is listed now (its family counted), one started after it is found by the
            # write transaction, which reads the log after the head. (The state above
            # was read before the head: a child started in between was in neither.)
            head = head_of(run_id)
            listed = state_of(run_id).children
            if listed:
                scopes.append(
                    BudgetScope(
                        run_id, limits, *listed_family(run_id, state_of, head_of, max_family)
                    )
                )
            else:
                scopes.append(BudgetScope(run_id, limits, (run_id,), (head,)))
    seen, child, parent = {run_id}, run_id, state.parent
    while parent is not None and parent not in seen and len(seen) <= max_family:
        seen.add(parent)
        try:
            above = state_of(parent)
        except NotFoundError:
            break  # a parent never started: nothing to count against
        if child not in above.children:
            break  # it does not list the run: not a family (RunsFacade.family)
        if above.budget is not None:
            scopes.append(
                BudgetScope(
                    parent,
                    limit_fields(above.budget),
                    *listed_family(parent, state_of, head_of, max_family),
                )
            )
        child, parent = parent, above.parent
    return scopes or None


def listed_family(
    root: str,
    state_of: Callable[[str], RunBudget],
    head_of: Callable[[str], int],
    max_family: int,
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """``root`` and every run listed below it (started or not: a budget counts what may
    yet run there), each with its head when its children were read."""
    members: list[str] = []
    heads: list[int] = []
    queue = [root]
    while queue and len(members) <= max_family:
        run_id = queue.pop(0)
        if run_id in members:
            continue
        try:
            head = head_of(run_id)  # before its children
            children: Sequence[str] = state_of(run_id).children
        except NotFoundError:
            head, children = 0, []  # listed, not started yet
        members.append(run_id)
        heads.append(head)
        queue += children
    return tuple(members), tuple(heads)


def limit_fields(budget: Mapping[str, Any]) -> dict[str, int | None]:
    """A run's limits as a ``BudgetScope`` holds them."""
    return {k: budget.get(k) for k in ("usd_micros", "tokens")}


def usd_micros(value: Any, what: str) -> int:
    """``value`` (dollars: ``"0.02"``, ``0.02``, ``2``) as whole millionths, rounded up;
    ``UsageError`` (``usage.bad_cost``) for anything else."""
    from decimal import Decimal, InvalidOperation  # loaded when a cost is given

    try:
        if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
            raise ValueError
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError
        amount = Decimal(repr(value) if isinstance(value, float) else str(value).strip())
        if not amount.is_finite() or amount < 0 or amount > MAX_USD:
            raise ValueError
    except (ValueError, InvalidOperation):
        raise UsageError(
            f"{what} {str(value)[:40]!r} is not an amount of US dollars",
            code="usage.bad_cost",
            hint=f'give {what} as a number of dollars >= 0, e.g. 0.02 or "12.50"; nothing '
            "was written",
        ) from None
    return int((amount * MICROS).to_integral_value(rounding="ROUND_CEILING"))


def cost_of(usd: Any = None, tokens: Any = None, *, what: str = "cost") -> dict[str, int] | None:
    """A cost as recorded (None when neither is given)."""
    out: dict[str, int] = {}
    if usd is not None:
        out["usd_micros"] = usd_micros(usd, f"{what} usd")
    if tokens is not None:
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 <= tokens <= MAX_TOKENS:
            raise UsageError(
                f"{what} tokens {str(tokens)[:40]!r} is not a count of tokens",
                code="usage.bad_cost",
                hint="give tokens as a whole number >= 0; nothing was written",
            )
        out["tokens"] = tokens
    return out or None


def cost_given(cost: Mapping[str, Any] | None, what: str = "cost") -> dict[str, int] | None:
    """A caller's ``{"usd": ..., "tokens": ...}`` (either) as recorded, or None;
    ``UsageError`` (``usage.bad_cost``) for anything else."""
    if cost is None:
        return None
    if not isinstance(cost, Mapping) or set(cost) - {"usd", "tokens"}:
        raise UsageError(
            f'{what} must be an object of usd and tokens, e.g. {{"usd": 0.02}}',
            code="usage.bad_cost",
            hint="give usd (dollars) and/or tokens; nothing was written",
        )
    return cost_of(cost.get("usd"), cost.get("tokens"), what=what)


def row_charge(row: Mapping[str, Any]) -> tuple[int, int]:
    """What one usage row counts: its actual once given, else its estimate."""
    cost = row.get("actual") if row.get("actual") is not None else row.get("estimate")
    if not isinstance(cost, dict):
        return 0, 0
    return int(cost.get("usd_micros", 0)), int(cost.get("tokens", 0))


def charged(records: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    """The total the actions ``records`` count (spent and reserved), in micros and tokens."""
    usd = tokens = 0
    for record in records:
        for row in record.get("usage") or ():
            u, t = row_charge(row)
            usd, tokens = usd + u, tokens + t
    return usd, tokens


def dollars(micros: int) -> str:
    """Millionths of a dollar as dollars for a person: at least two places
    (``12500000`` -> ``"12.50"``, ``1`` -> ``"0.000001"``)."""
    whole, frac = divmod(micros, MICROS)
    digits = f"{frac:06d}".rstrip("0").ljust(2, "0")
    return f"{whole}.{digits}"


def over_budget(
    limits: Mapping[str, int | None],
    spent: tuple[int, int],
    estimate: Mapping[str, int] | None,
    *,
    whose: str = "The run",
) -> str | None:
    """Why ``estimate`` on top of ``spent`` passes ``limits`` (``usd_micros``, ``tokens``),
    or None; ``whose`` names the budget in the answer."""
    add_usd = int((estimate or {}).get("usd_micros", 0))
    add_tokens = int((estimate or {}).get("tokens", 0))
    usd_limit, token_limit = limits.get("usd_micros"), limits.get("tokens")
    # A run at its limit starts nothing more, not even an effect that gives no estimate
    # (an estimate of 0 is a claim, and leaving it out must not be a way past the limit).
    if usd_limit is not None and (spent[0] >= usd_limit or spent[0] + add_usd > usd_limit):
        return (
            f" {whose} has spent or reserved {dollars(spent[0])} USD of {dollars(usd_limit)}; "
            f"this effect's estimate of {dollars(add_usd)} USD would pass it."
        )
    if token_limit is not None and (spent[1] >= token_limit or spent[1] + add_tokens > token_limit):
        return (
            f" {whose} has spent or reserved {spent[1]} tokens of {token_limit}; this "
            f"effect's estimate of {add_tokens} would pass it."
        )
    return None

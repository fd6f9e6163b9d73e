"""What every adapter shares: tool calls as effects, JSON conversion, model claims."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from continuum.errors import UsageError
from continuum.eventlog.canonical import digest
from continuum.eventlog.events import EventType
from continuum.ledger.effect import Effect
from continuum.runtime.facade import Continuum
from continuum.types import Origin, ReplayContract

# A function of a tool call's arguments (a dict) returning its business key, or None
# for the ledger's identity from the arguments themselves (drift tolerant).
KeyFn = Callable[[dict[str, Any]], str | None]
# A tool call's estimated cost: ``{"usd": 0.02, "tokens": 1500}`` (either), or a
# function of its arguments (a dict) giving one; judged against the run's budget.
Cost = Mapping[str, Any] | Callable[[dict[str, Any]], Mapping[str, Any] | None]


def jsonable(value: Any) -> Any:
    """``value`` as JSON where it has an obvious JSON form (pydantic models, dataclasses,
    tuples); anything else is returned as it is, for the seam to accept or refuse."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        return jsonable(dump(mode="json"))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    return value


def schema_versions(schema: Any) -> dict[str, str] | None:
    """The ``versions`` of a tool whose input schema is ``schema`` (a JSON schema, or a
    model/dict with a JSON form): ``tool_schema_hash`` = sha256 of its canonical JSON;
    None for no schema."""
    if schema is None:
        return None
    return {"tool_schema_hash": "sha256:" + digest(jsonable(schema))}


def tool_effect(
    cx: Continuum,
    run_id: str,
    action_type: str,
    *,
    key: KeyFn | None,
    replay: ReplayContract | str | None,
    certain_on: tuple[type[BaseException], ...],
    encode: Callable[[Any], Any] | None = None,
    decode: Callable[[Any], Any] | None = None,
    schema: Any = None,
    cost: Cost | None = None,
) -> Effect:
    """The effect for one tool: identity from the call's argument dict (its one argument);
    ``schema``: the tool's input schema, pinned with each call (``schema_versions``);
    ``cost``: each call's estimate (``{"usd": ..., "tokens": ...}``, or a function of the
    tool's arguments giving one), judged against the run's budget and its parents'."""

    def key_of(tool_args: dict[str, Any], *_: Any) -> str | None:
        return key(tool_args) if key is not None else None

    def arguments_of(tool_args: dict[str, Any], *_: Any) -> Any:
        return tool_args

    def cost_of(tool_args: dict[str, Any], *_: Any) -> Mapping[str, Any] | None:
        return cost(tool_args) if callable(cost) else cost

    if key is not None and not callable(key):
        raise UsageError(
            "key must be a function of the tool's arguments",
            code="usage.bad_key_function",
            hint="e.g. key=lambda args: args['invoice_id']",
        )
    return Effect(
        cx.ledger,
        run_id,
        action_type,
        key=key_of,
        arguments=arguments_of,
        replay=replay,
        certain_on=certain_on,
        encode=encode,
        decode=decode,
        origin=Origin.DETERMINISTIC,
        versions=schema_versions(schema),
        hold=lambda: cx.hold_for(run_id),
        budget=lambda: cx.budget_scopes(run_id),
        cost=cost_of,
    )


def record_claim(cx: Continuum, run_id: str, text: str, *, source: str = "model") -> None:
    """Record what the model said as a finding of origin ``external_agent``.

    A model's claim ("I sent all three invoices") is not an observation: it is kept as
    self-certified state (``requires_review``) next to the ledger's own record of what
    the program did.
    """
    if not text.strip():
        return
    cx.store.append_event(
        run_id,
        EventType.FINDING_ADDED,
        {
            "finding_id": "claim_" + digest([source, text])[:16],
            "text": text[:4000],
            "source": source,
        },
        source=Origin.EXTERNAL_AGENT,
    )

"""OpenAI Agents SDK: function tools guarded by the effect seam, and run hooks
(``continuum-recovery[openai-agents]``).

``guarded_function_tool(fn, cx, run_id, key=...)`` is ``agents.function_tool(fn)`` with
every call performed through the seam: the SDK still builds the schema from ``fn``'s
signature and docstring. Exceptions from ``fn`` are recorded (``unknown`` unless listed
in ``certain_on``) and then handled by the SDK as usual (a message to the model);
``EffectUncertain`` is not: it stops the run, because an interrupted effect needs a
person, not a model's retry. Sync and async ``fn`` both work.

``ContinuumRunHooks(cx, run_id)`` records the agent's final output as a claim of origin
``external_agent``. The tool calls themselves are ``deterministic``: the program runs
them and sees their results.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from agents import Agent, FunctionTool, RunContextWrapper, RunHooks, function_tool
from agents.tool import default_tool_error_function

from continuum.adapters.common import (
    Cost,
    KeyFn,
    jsonable,
    record_claim,
    schema_versions,
    tool_effect,
)
from continuum.errors import EffectUncertain
from continuum.eventlog.canonical import canonical_json
from continuum.ledger.effect import Effect
from continuum.runtime.facade import Continuum
from continuum.types import ReplayContract

__all__ = ["ContinuumRunHooks", "guarded_function_tool"]


def _tool_args(
    signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The model's arguments of one call: the SDK's context parameter left out."""
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return {
        k: jsonable(v) for k, v in bound.arguments.items() if not isinstance(v, RunContextWrapper)
    }


def _stop_on_uncertain(ctx: RunContextWrapper[Any], error: Exception) -> str:
    if isinstance(error, EffectUncertain):
        raise error  # out of the SDK's tool-error handling: the run stops here
    return default_tool_error_function(ctx, error)


def guarded_function_tool(
    fn: Callable[..., Any],
    cx: Continuum,
    run_id: str,
    *,
    key: KeyFn | None = None,
    action_type: str | None = None,
    replay: ReplayContract | str | None = None,
    certain_on: tuple[type[BaseException], ...] = (),
    encode: Callable[[Any], Any] | None = jsonable,
    decode: Callable[[Any], Any] | None = None,
    cost: Cost | None = None,
    **function_tool_kwargs: Any,
) -> FunctionTool:
    """``function_tool(fn, **function_tool_kwargs)`` performed at most once per identity.

    ``key``: a function of the tool's arguments (a dict, the context parameter left out)
    giving the business key; without it the ledger's identity from the arguments.
    ``action_type`` defaults to the tool's name. The result is recorded as JSON
    (``encode``, default: models and dataclasses as JSON) and returned on a replay.
    ``cost``: each call's estimate, judged against the run's budget (``common.Cost``).
    """
    signature = inspect.signature(fn)
    name = function_tool_kwargs.get("name_override") or fn.__name__
    effect = tool_effect(
        cx,
        run_id,
        action_type or name,
        key=key,
        replay=replay,
        certain_on=certain_on,
        encode=encode,
        decode=decode,
        cost=cost,
    )
    function_tool_kwargs.setdefault("failure_error_function", _stop_on_uncertain)

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def guarded_async(*args: Any, **kwargs: Any) -> Any:
            async def perform(_tool_args: dict[str, Any]) -> Any:
                return await fn(*args, **kwargs)

            return await effect.arun(perform, _tool_args(signature, args, kwargs))

        return _pinned(effect, function_tool(guarded_async, **function_tool_kwargs))

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        def perform(_tool_args: dict[str, Any]) -> Any:
            return fn(*args, **kwargs)

        return effect.run(perform, _tool_args(signature, args, kwargs))

    return _pinned(effect, function_tool(guarded, **function_tool_kwargs))


def _pinned(effect: Effect, tool: FunctionTool) -> FunctionTool:
    """``tool``, its effect pinned to the JSON schema the SDK built for the model."""
    effect.versions = schema_versions(tool.params_json_schema)
    return tool


class ContinuumRunHooks(RunHooks[Any]):
    """Run hooks that record the agent's final output as an ``external_agent`` claim.

    Pass as ``Runner.run(..., hooks=ContinuumRunHooks(cx, run_id))``. What a model says
    it did stays self-certified (``requires_review``); the ledger's record of the tool
    calls is what the program itself saw.
    """

    def __init__(self, cx: Continuum, run_id: str) -> None:
        self.cx, self.run_id = cx, run_id

    async def on_agent_end(self, context: Any, agent: Agent[Any], output: Any) -> None:
        text = output if isinstance(output, str) else canonical_json(jsonable(output))
        record_claim(self.cx, self.run_id, text, source=f"openai-agents:{agent.name}")

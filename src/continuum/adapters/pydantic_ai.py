"""Pydantic AI: a toolset whose tool calls go through the effect seam
(``continuum-recovery[pydantic-ai]``).

``ContinuumToolset(toolset, cx, run_id, keys=...)`` wraps any toolset (a
``FunctionToolset``, or a list of functions via ``guard_functions``): every call of one of
its tools intercepts (identity from the validated arguments), runs the tool, and
completes or fails. A completed call returns its recorded result without running the
tool; an interrupted one raises ``EffectUncertain``, which ends the agent run (Pydantic AI
passes a tool's exceptions through, except ``ModelRetry``). ``agent.run`` and
``agent.run_sync`` both call tools through this async path; sync tool functions still
run where Pydantic AI runs them (a worker thread).

``ModelRetry`` is ``certain_on`` by default: a tool raises it to refuse a call before
doing anything ("wrong arguments, try again"), so the model may retry. Raise it only
before the effect. Origins: tool calls are ``deterministic``; ``record_output`` records
the run's final output as an ``external_agent`` claim.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import ModelRetry, RunContext
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, ToolsetTool, WrapperToolset

from continuum.adapters.common import Cost, KeyFn, jsonable, record_claim, tool_effect
from continuum.eventlog.canonical import canonical_json
from continuum.ledger.effect import Effect
from continuum.runtime.facade import Continuum
from continuum.types import ReplayContract

__all__ = ["ContinuumToolset", "guard_functions", "record_output"]


@dataclass
class ContinuumToolset(WrapperToolset[Any]):
    """``wrapped`` with each tool call performed at most once per identity in ``run_id``.

    ``keys`` maps a tool name to a function of its arguments (a dict) giving the business
    key; a tool without one uses the ledger's identity from its arguments. ``only``
    limits the guard to those tool names (the others run as they are: reads, lookups).
    Results are recorded as JSON (models as their JSON form) and returned on a replay.
    """

    cx: Continuum = field(kw_only=True)
    run_id: str = field(kw_only=True)
    keys: Mapping[str, KeyFn] = field(default_factory=dict, kw_only=True)
    only: Sequence[str] | None = field(default=None, kw_only=True)
    replay: ReplayContract | str | None = field(default=None, kw_only=True)
    certain_on: tuple[type[BaseException], ...] = field(default=(ModelRetry,), kw_only=True)
    encode: Callable[[Any], Any] | None = field(default=jsonable, kw_only=True)
    decode: Callable[[Any], Any] | None = field(default=None, kw_only=True)
    # A tool name -> its estimated cost (``common.Cost``), judged against the run's budget.
    costs: Mapping[str, Cost] = field(default_factory=dict, kw_only=True)

    def effect_for(self, name: str, schema: Any = None) -> Effect:
        return tool_effect(
            self.cx,
            self.run_id,
            name,
            key=self.keys.get(name),
            replay=self.replay,
            certain_on=self.certain_on,
            encode=self.encode,
            decode=self.decode,
            schema=schema,
            cost=self.costs.get(name),
        )

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        if self.only is not None and name not in self.only:
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)

        async def perform(_tool_args: dict[str, Any]) -> Any:
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)

        schema = getattr(getattr(tool, "tool_def", None), "parameters_json_schema", None)
        return await self.effect_for(name, schema).arun(perform, jsonable(tool_args))


def guard_functions(
    functions: Sequence[Callable[..., Any]],
    cx: Continuum,
    run_id: str,
    *,
    keys: Mapping[str, KeyFn] | None = None,
    replay: ReplayContract | str | None = None,
    certain_on: tuple[type[BaseException], ...] = (ModelRetry,),
    costs: Mapping[str, Cost] | None = None,
) -> AbstractToolset[Any]:
    """A guarded ``FunctionToolset`` of plain tool functions (``Agent(toolsets=[...])``)."""
    return ContinuumToolset(
        FunctionToolset(list(functions)),
        cx=cx,
        run_id=run_id,
        keys=dict(keys or {}),
        replay=replay,
        certain_on=certain_on,
        costs=dict(costs or {}),
    )


def record_output(cx: Continuum, run_id: str, output: Any) -> None:
    """Record a run's final output (what the model says) as an ``external_agent`` claim."""
    text = output if isinstance(output, str) else canonical_json(jsonable(output))
    record_claim(cx, run_id, text, source="pydantic-ai")

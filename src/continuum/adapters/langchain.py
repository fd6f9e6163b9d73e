"""LangChain: a ``BaseTool`` (or ``@tool``) guarded by the effect seam (``continuum-recovery[langchain]``).

``guard_tool(tool, cx, run_id, key=...)`` returns a tool with the same name, description
and schema, so the model sees no difference. Each call intercepts (identity from the
tool's arguments, injected arguments left out), runs the inner tool, and completes or
fails; a completed call returns its recorded output without running the tool, an
interrupted one raises ``EffectUncertain`` (which ``ToolNode`` and ``create_agent``
propagate: the agent stops until a person reconciles). Sync (``invoke``) and async
(``ainvoke``) both go through the seam.

Origins: intercept and settlement are ``deterministic`` (the program runs the tool and
sees its result); ``ClaimsCallback`` records the model's final text as ``external_agent``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from pydantic import ConfigDict

from continuum.adapters.common import Cost, KeyFn, jsonable, record_claim, tool_effect
from continuum.ledger.effect import Effect
from continuum.runtime.facade import Continuum
from continuum.types import ReplayContract

__all__ = ["ClaimsCallback", "GuardedTool", "guard_tool", "guard_tools"]


def _call_kwargs(
    method: Callable[..., Any], config: RunnableConfig, run_manager: Any
) -> dict[str, Any]:
    """``config`` / ``run_manager`` for the inner tool's ``_run``, where it takes them
    (as ``BaseTool.run`` decides for the outer one)."""
    params = inspect.signature(method).parameters
    out: dict[str, Any] = {}
    if "run_manager" in params:
        out["run_manager"] = run_manager
    if "config" in params:
        out["config"] = config
    return out


class GuardedTool(BaseTool):
    """``inner`` with every call performed through ``effect`` (see ``guard_tool``)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: BaseTool
    effect: Effect

    @functools.cached_property
    def _injected_args_keys(self) -> frozenset[str]:
        return self.inner._injected_args_keys

    @property
    def tool_call_schema(self) -> Any:
        return self.inner.tool_call_schema

    def _identity_args(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        # What the model chose; injected values (tool call ids, runtime) differ per attempt.
        args = {
            k: v
            for k, v in self.inner._filter_injected_args(kwargs).items()
            if k not in self._injected_args_keys
        }
        return dict(jsonable(args))

    def _run(
        self, *args: Any, config: RunnableConfig, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        extra = _call_kwargs(self.inner._run, config, run_manager)

        def perform(_tool_args: dict[str, Any]) -> Any:
            return self.inner._run(*args, **kwargs, **extra)

        return self.effect.run(perform, self._identity_args(kwargs))

    async def _arun(
        self, *args: Any, config: RunnableConfig, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        # BaseTool's own _arun runs _run in a thread and passes its keywords on to _run.
        own_arun = type(self.inner)._arun is not BaseTool._arun
        extra = _call_kwargs(self.inner._arun if own_arun else self.inner._run, config, run_manager)

        async def perform(_tool_args: dict[str, Any]) -> Any:
            return await self.inner._arun(*args, **kwargs, **extra)

        return await self.effect.arun(perform, self._identity_args(kwargs))


def guard_tool(
    tool: BaseTool,
    cx: Continuum,
    run_id: str,
    *,
    key: KeyFn | None = None,
    action_type: str | None = None,
    replay: ReplayContract | str | None = None,
    certain_on: tuple[type[BaseException], ...] = (),
    encode: Callable[[Any], Any] | None = None,
    decode: Callable[[Any], Any] | None = None,
    cost: Cost | None = None,
) -> GuardedTool:
    """``tool`` performed at most once per identity in run ``run_id``.

    ``key``: a function of the tool's arguments (a dict) giving its business key; without
    it the ledger's identity from the arguments (drift tolerant). ``action_type``: the
    ledger's name for the effect (default the tool's name). The tool's output is recorded
    as JSON (``encode`` / ``decode`` for other outputs, e.g. a ``Command``). ``cost``:
    each call's estimate, judged against the run's budget (``common.Cost``).
    """
    effect = tool_effect(
        cx,
        run_id,
        action_type or tool.name,
        key=key,
        replay=replay,
        certain_on=certain_on,
        encode=encode,
        decode=decode,
        schema=tool.args,  # the input schema's properties, as LangChain gives them
        cost=cost,
    )
    return GuardedTool(
        name=tool.name,
        description=tool.description,
        args_schema=tool.args_schema,
        return_direct=tool.return_direct,
        response_format=tool.response_format,
        handle_tool_error=tool.handle_tool_error,
        handle_validation_error=tool.handle_validation_error,
        metadata=tool.metadata,
        tags=tool.tags,
        inner=tool,
        effect=effect,
    )


def guard_tools(
    tools: list[BaseTool],
    cx: Continuum,
    run_id: str,
    *,
    keys: dict[str, KeyFn] | None = None,
    replay: ReplayContract | str | None = None,
    certain_on: tuple[type[BaseException], ...] = (),
    costs: Mapping[str, Cost] | None = None,
) -> list[BaseTool]:
    """Guard every tool of ``tools``; ``keys`` maps a tool name to its key function,
    ``costs`` to its estimated cost."""
    keys, costs = keys or {}, costs or {}
    return [
        guard_tool(
            t,
            cx,
            run_id,
            key=keys.get(t.name),
            replay=replay,
            certain_on=certain_on,
            cost=costs.get(t.name),
        )
        for t in tools
    ]


class ClaimsCallback(BaseCallbackHandler):
    """Records the model's final text (a generation without tool calls) as a claim of
    origin ``external_agent``: what the model says it did is not what the ledger saw."""

    def __init__(self, cx: Continuum, run_id: str) -> None:
        self.cx, self.run_id = cx, run_id

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        for generations in response.generations:
            for gen in generations:
                message = getattr(gen, "message", None)
                if message is not None and not getattr(message, "tool_calls", None):
                    record_claim(self.cx, self.run_id, gen.text)

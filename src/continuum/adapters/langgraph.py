"""LangGraph: guarded tools and nodes, and a checkpointer in continuum's log
(``continuum-recovery[langgraph]``).

- ``guard_tools(tools, cx, run_id, keys=...)``: tools for ``ToolNode`` (see
  ``continuum.adapters.langchain.guard_tool``).
- ``guard_node(fn, cx, run_id, key=...)``: a node that performs a side effect runs it at
  most once per identity; when LangGraph re-runs the node after a crash (it re-runs the
  interrupted node, and with ``durability="async"`` sometimes a finished one), the
  recorded state update is returned instead, or ``EffectUncertain`` is raised if the
  first run was interrupted mid-effect.
- ``ContinuumCheckpointer(cx, run_id)``: a checkpoint saver whose every write is first
  appended to run ``run_id`` of continuum's hash-chained log (events
  ``langgraph_checkpoint_saved``, ``langgraph_writes_saved``, ``langgraph_thread_deleted``)
  and then applied in memory; a new process rebuilds its state by reading the log, so
  ``continuum verify`` covers the graph's checkpoints together with the ledger.

Origins: everything here is ``deterministic`` (the program's own node code, tool calls
and checkpoints).
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver

from continuum.adapters.common import jsonable
from continuum.adapters.langchain import guard_tool, guard_tools
from continuum.errors import NotFoundError
from continuum.ledger.effect import Effect
from continuum.runtime.facade import Continuum
from continuum.types import Origin, ReplayContract

__all__ = ["CHECKPOINT_EVENTS", "ContinuumCheckpointer", "guard_node", "guard_tool", "guard_tools"]

SAVED, WRITES, DELETED = (
    "langgraph_checkpoint_saved",
    "langgraph_writes_saved",
    "langgraph_thread_deleted",
)
CHECKPOINT_EVENTS = (SAVED, WRITES, DELETED)


def guard_node(
    fn: Callable[..., Any],
    cx: Continuum,
    run_id: str,
    *,
    action_type: str | None = None,
    key: Callable[[Any], str | None] | None = None,
    arguments: Callable[[Any], Any] | None = None,
    replay: ReplayContract | str | None = None,
    certain_on: tuple[type[BaseException], ...] = (),
    encode: Callable[[Any], Any] | None = jsonable,
    decode: Callable[[Any], Any] | None = None,
    cost: Mapping[str, Any] | Callable[[Any], Mapping[str, Any] | None] | None = None,
) -> Callable[..., Any]:
    """The node ``fn(state, ...)`` (sync or async) as an effect of run ``run_id``.

    ``key``: a function of the state giving the business key; ``arguments``: what the
    ledger records (default the state as JSON: without a key, the identity is the state
    itself, so the same node on a changed state is a new effect). The node's update is
    recorded with ``encode`` (default: messages and models as JSON) and returned as
    recorded on a replay (``decode`` to rebuild objects). The node keeps its signature,
    so LangGraph still passes ``config`` / ``runtime`` where it asks for them.
    ``cost``: each run's estimate (``{"usd": ..., "tokens": ...}``, or a function of the
    state giving one), judged against the run's budget and its parents'.
    """

    def key_of(state: Any, *_: Any, **__: Any) -> str | None:
        return key(state) if key is not None else None

    def arguments_of(state: Any, *_: Any, **__: Any) -> Any:
        return jsonable(arguments(state) if arguments is not None else state)

    def cost_of(state: Any, *_: Any, **__: Any) -> Mapping[str, Any] | None:
        return cost(state) if callable(cost) else cost

    name = action_type or str(getattr(fn, "__name__", "node"))
    effect = Effect(
        cx.ledger,
        run_id,
        name,
        key=key_of,
        arguments=arguments_of,
        replay=replay,
        certain_on=certain_on,
        encode=encode,
        decode=decode,
        origin=Origin.DETERMINISTIC,
        hold=lambda: cx.hold_for(run_id),
        budget=lambda: cx.budget_scopes(run_id),
        cost=cost_of,
    )
    return effect(fn)


def _typed(pair: tuple[str, bytes]) -> list[str]:
    return [pair[0], base64.b64encode(pair[1]).decode("ascii")]


def _untyped(pair: list[str]) -> tuple[str, bytes]:
    return pair[0], base64.b64decode(pair[1])


class ContinuumCheckpointer(InMemorySaver):
    """LangGraph checkpoints as events of continuum run ``run_id`` (see the module doc).

    Reads are served from memory, which is only ever the fold of the logged writes: each
    write is appended (durably) before it is applied, so a crash between the two loses
    nothing the log does not also lack. Sync and async (``aput`` etc. delegate here).
    Every thread's checkpoints share the one run; the log grows with every step (each
    write holds the channels that changed), so keep one run per conversation or job.
    """

    def __init__(self, cx: Continuum, run_id: str) -> None:
        super().__init__()
        self.cx, self.run_id = cx, run_id
        self._lock = threading.Lock()
        try:
            cx.store.get_run(run_id)
        except NotFoundError:
            cx.start_run(run_id)
        for event in cx.store.iter_events(run_id):
            if event.type in CHECKPOINT_EVENTS:
                self._apply(event.type, event.payload)

    def _log(self, type_: str, payload: dict[str, Any]) -> None:
        with self._lock:
            self.cx.store.append_event(self.run_id, type_, payload, source=Origin.DETERMINISTIC)
            self._apply(type_, payload)

    def _apply(self, type_: str, p: dict[str, Any]) -> None:
        thread, ns = p["thread_id"], p.get("checkpoint_ns", "")
        if type_ == SAVED:
            for channel, version, typed in p["blobs"]:
                self.blobs[(thread, ns, channel, version)] = _untyped(typed)
            self.storage[thread][ns][p["checkpoint_id"]] = (
                _untyped(p["checkpoint"]),
                _untyped(p["metadata"]),
                p["parent_id"],
            )
        elif type_ == WRITES:
            outer = self.writes[(thread, ns, p["checkpoint_id"])]
            for idx, channel, typed in p["writes"]:
                outer[(p["task_id"], idx)] = (
                    p["task_id"],
                    channel,
                    _untyped(typed),
                    p["task_path"],
                )
        elif type_ == DELETED:
            super().delete_thread(thread)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = config["configurable"]
        thread, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        c: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = c.pop("channel_values")
        blobs = [
            [k, v, _typed(self.serde.dumps_typed(values[k]) if k in values else ("empty", b""))]
            for k, v in new_versions.items()
        ]
        self._log(
            SAVED,
            {
                "thread_id": thread,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
                "parent_id": conf.get("checkpoint_id"),
                "blobs": blobs,
                "checkpoint": _typed(self.serde.dumps_typed(c)),
                "metadata": _typed(
                    self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))
                ),
            },
        )
        return {
            "configurable": {
                "thread_id": thread,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        conf = config["configurable"]
        thread, ns, checkpoint_id = (
            conf["thread_id"],
            conf.get("checkpoint_ns", ""),
            conf["checkpoint_id"],
        )
        stored = self.writes.get((thread, ns, checkpoint_id)) or {}
        entries = []
        for idx, (channel, value) in enumerate(writes):
            inner = WRITES_IDX_MAP.get(channel, idx)
            if inner >= 0 and (task_id, inner) in stored:
                continue  # a special write already saved for this task is kept (as upstream)
            entries.append([inner, channel, _typed(self.serde.dumps_typed(value))])
        if entries:
            self._log(
                WRITES,
                {
                    "thread_id": thread,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                    "task_id": task_id,
                    "task_path": task_path,
                    "writes": entries,
                },
            )

    def delete_thread(self, thread_id: str) -> None:
        self._log(DELETED, {"thread_id": thread_id})

"""The crash-scenario agent: one small agent per framework, killed and resumed for real.

Run as ``python -m continuum.adapters.scenarios WORKDIR --framework F --mode M`` by
``continuum benchmark --frameworks`` and by tests/adapters. The agent (driven by the
framework's offline test model, scripted from the conversation so that a resumed process
answers exactly as the first one would have) sends invoices INV-1..INV-3, one tool call
per model turn; the side effect is one line appended to ``WORKDIR/outbox/INV-n.txt``.

Persistence is the framework's own: LangGraph and LangChain ``create_agent`` save
checkpoints with ``SqliteSaver`` / ``AsyncSqliteSaver`` and resume a thread; the OpenAI
Agents SDK keeps a ``SQLiteSession`` and runs again with it; Pydantic AI has no store of
its own, so the program saves the message history after every step (``agent.iter``) and
runs again with it (pending tool calls are executed). ``--mode alone`` is that and
nothing else; ``--mode continuum`` guards the tool with the framework's adapter, and
before resuming settles each interrupted effect by looking in the outbox (the program's
own probe, recorded as ``deterministic``) unless ``--no-reconcile``.

``--stop POINT`` makes the process announce ``STOP POINT`` on stdout and block on stdin,
for the caller to SIGKILL it there: ``before_effect:N`` / ``after_effect:N`` (inside the
tool, around the outbox write of INV-N), ``checkpoint:N`` (inside the framework's own
write that would persist INV-N's tool result), ``after_all`` (everything done and saved).
Continuum's own fault points are armed with ``CONTINUUM_FAULTS``.

Exit 0 and ``DONE`` when the batch is finished, 20 and ``EFFECT_UNCERTAIN`` when a
guarded tool met an interrupted effect (it was not run again).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from continuum.errors import EffectUncertain, NotFoundError
from continuum.runtime.facade import Continuum

FRAMEWORKS = ("langgraph", "langchain", "openai-agents", "pydantic-ai")
RUN = "scenario"
THREAD = "thread-1"
TOTAL = 3
INVOICES = [f"INV-{i}" for i in range(1, TOTAL + 1)]
UNCERTAIN_EXIT = 20
PROMPT = "Send invoices INV-1 to INV-3."


class Agent:
    """The pieces every framework's program shares: outbox, stop points, continuum."""

    def __init__(self, workdir: Path, mode: str, stop: str | None) -> None:
        self.workdir, self.mode, self.stop_at = workdir, mode, stop
        self.outbox = workdir / "outbox"
        self.outbox.mkdir(parents=True, exist_ok=True)
        self.cx: Continuum | None = None
        self.stopped: set[str] = set()

    def stop(self, point: str) -> None:
        """Announce ``point`` and wait to be killed there, if it is the chosen one."""
        if point == self.stop_at and point not in self.stopped:
            self.stopped.add(point)
            print(f"STOP {point}", flush=True)
            sys.stdin.readline()  # the caller SIGKILLs us while we wait here

    def deliver(self, invoice_id: str, amount: float) -> str:
        """The side effect: one line in the external system's record of the invoice."""
        n = INVOICES.index(invoice_id) + 1 if invoice_id in INVOICES else 0
        self.stop(f"before_effect:{n}")
        fd = os.open(
            self.outbox / f"{invoice_id}.txt", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
        )
        try:
            os.write(fd, f"{invoice_id} {amount} pid={os.getpid()}\n".encode())
        finally:
            os.close(fd)
        self.stop(f"after_effect:{n}")
        return f"sent {invoice_id}"

    def open_continuum(self, reconcile: bool) -> Continuum:
        cx = Continuum.open(str(self.workdir / "continuum.db"))
        try:
            cx.store.get_run(RUN)
        except NotFoundError:
            cx.start_run(RUN, PROMPT)
        if reconcile:
            for a in cx.resume(RUN).uncertain_actions:
                invoice = (a.get("arguments") or {}).get("invoice_id", "")
                happened = (self.outbox / f"{invoice}.txt").exists()
                print(f"UNCERTAIN {a['action_key']}", flush=True)
                cx.reconcile(
                    RUN, a["action_id"], occurred=happened, note="the program looked in the outbox"
                )
                print(f"RECONCILED {a['action_key']} occurred={happened}", flush=True)
        self.cx = cx
        return cx

    def key(self, args: dict[str, Any]) -> str:
        return str(args["invoice_id"])


def amount_of(n: int) -> float:
    return 100.0 + n


def next_call(done: int) -> dict[str, Any] | None:
    """The scripted model's policy: the next invoice after ``done`` tool results."""
    if done >= TOTAL:
        return None
    return {"invoice_id": INVOICES[done], "amount": amount_of(done + 1)}


def final_text() -> str:
    return f"Sent {TOTAL} invoices."


def _checkpoint_target(payload: str, agent: Agent) -> None:
    """Stop at ``checkpoint:N`` when a framework write carries INV-N's tool result."""
    if agent.stop_at and agent.stop_at.startswith("checkpoint:"):
        n = int(agent.stop_at.split(":")[1])
        if f"sent INV-{n}" in payload:
            agent.stop(agent.stop_at)


# -- LangGraph and LangChain ---------------------------------------------------------------


def _langchain_model() -> Any:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class ScriptedChatModel(GenericFakeChatModel):
        """LangChain's fake chat model, answering from the conversation (not an iterator),
        so a resumed process gets the same answer the killed one would have."""

        messages: Any = iter(())

        def _generate(
            self,
            messages: list[BaseMessage],
            stop: Any = None,
            run_manager: Any = None,
            **kwargs: Any,
        ) -> ChatResult:
            done = sum(isinstance(m, ToolMessage) for m in messages)
            call = next_call(done)
            message = (
                AIMessage(content=final_text())
                if call is None
                else AIMessage(
                    content="",
                    tool_calls=[
                        {
                            "name": "send_invoice",
                            "args": call,
                            "id": f"call_{done + 1}",
                            "type": "tool_call",
                        }
                    ],
                )
            )
            return ChatResult(generations=[ChatGeneration(message=message)])

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    return ScriptedChatModel()


def _langchain_tool(agent: Agent, flavor: str) -> Any:
    from langchain_core.tools import tool

    if flavor == "async":

        @tool("send_invoice")
        async def send_invoice(invoice_id: str, amount: float) -> str:
            """Send one invoice to its customer."""
            return agent.deliver(invoice_id, amount)

        return send_invoice

    @tool("send_invoice")
    def send_invoice_sync(invoice_id: str, amount: float) -> str:
        """Send one invoice to its customer."""
        return agent.deliver(invoice_id, amount)

    return send_invoice_sync


def _savers(agent: Agent) -> tuple[type[Any], type[Any]]:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    # LangGraph saves a task's writes (put_writes) and the next checkpoint (put) from
    # different threads; the stop holds the saver's lock, so whichever write carries
    # INV-2's result first, neither reaches the file before the kill.
    class StoppingSaver(SqliteSaver):
        def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
            with self.lock:
                _checkpoint_target(repr(writes), agent)
            super().put_writes(config, writes, task_id, task_path)

        def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            with self.lock:
                _checkpoint_target(repr(checkpoint.get("channel_values")), agent)
            return super().put(config, checkpoint, metadata, new_versions)

    class AsyncStoppingSaver(AsyncSqliteSaver):
        async def aput_writes(
            self, config: Any, writes: Any, task_id: str, task_path: str = ""
        ) -> None:
            async with self.lock:  # blocking here stops the event loop as well
                _checkpoint_target(repr(writes), agent)
            await super().aput_writes(config, writes, task_id, task_path)

        async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            async with self.lock:
                _checkpoint_target(repr(checkpoint.get("channel_values")), agent)
            return await super().aput(config, checkpoint, metadata, new_versions)

    return StoppingSaver, AsyncStoppingSaver


def _build_graph(framework: str, flavor: str, model: Any, tools: list[Any], saver: Any) -> Any:
    if framework == "langchain":
        from langchain.agents import create_agent

        return create_agent(model, tools=tools, checkpointer=saver)
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    async def acall_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", acall_model if flavor == "async" else call_model)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


def run_langgraph(agent: Agent, framework: str, flavor: str, durability: str) -> str:
    import sqlite3

    from langchain_core.messages import HumanMessage

    model = _langchain_model()
    tools = [_langchain_tool(agent, flavor)]
    if agent.cx is not None:
        from continuum.adapters.langchain import guard_tools

        tools = guard_tools(tools, agent.cx, RUN, keys={"send_invoice": agent.key})
    saver_cls, async_saver_cls = _savers(agent)
    config: Any = {"configurable": {"thread_id": THREAD}}
    path = str(agent.workdir / "framework.sqlite")

    def start(graph: Any, state: Any) -> Any:
        if not state.values:
            return {"messages": [HumanMessage(PROMPT)]}
        return None  # resume the thread from its last checkpoint

    if flavor == "sync":
        with sqlite3.connect(path, check_same_thread=False) as conn:
            graph = _build_graph(framework, flavor, model, tools, saver_cls(conn))
            state = graph.get_state(config)
            if state.values and not state.next:
                return "ALREADY_DONE"
            out = graph.invoke(start(graph, state), config, durability=durability)
    else:

        async def main() -> Any:
            async with async_saver_cls.from_conn_string(path) as saver:
                graph = _build_graph(framework, flavor, model, tools, saver)
                state = await graph.aget_state(config)
                if state.values and not state.next:
                    return None
                return await graph.ainvoke(start(graph, state), config, durability=durability)

        out = asyncio.run(main())
        if out is None:
            return "ALREADY_DONE"
    return str(out["messages"][-1].content)


# -- OpenAI Agents SDK -----------------------------------------------------------------------


def run_openai_agents(agent: Agent, flavor: str) -> str:
    from agents import Agent as OAgent
    from agents import (
        ModelResponse,
        RunConfig,
        Runner,
        SQLiteSession,
        Usage,
        function_tool,
        set_tracing_disabled,
    )
    from agents.models.interface import Model
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    set_tracing_disabled(True)

    class ScriptedModel(Model):
        """A scripted ``Model``: the next tool call follows from the tool outputs so far."""

        async def get_response(
            self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
        ) -> ModelResponse:
            items = input if isinstance(input, list) else []
            done = sum(1 for i in items if _item_type(i) == "function_call_output")
            call = next_call(done)
            output: list[Any]
            if call is None:
                output = [
                    ResponseOutputMessage(
                        id="msg_final",
                        type="message",
                        role="assistant",
                        status="completed",
                        content=[
                            ResponseOutputText(
                                type="output_text", text=final_text(), annotations=[]
                            )
                        ],
                    )
                ]
            else:
                output = [
                    ResponseFunctionToolCall(
                        type="function_call",
                        call_id=f"call_{done + 1}",
                        name="send_invoice",
                        arguments=json.dumps(call),
                        id=f"fc_{done + 1}",
                    )
                ]
            return ModelResponse(output=output, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the scenario does not stream")

    class StoppingSession(SQLiteSession):
        async def add_items(self, items: list[Any]) -> None:
            _checkpoint_target(repr(items), agent)
            await super().add_items(items)

    if flavor == "async":

        async def send_invoice(invoice_id: str, amount: float) -> str:
            """Send one invoice to its customer."""
            return agent.deliver(invoice_id, amount)

        fn: Callable[..., Any] = send_invoice
    else:

        def send_invoice_sync(invoice_id: str, amount: float) -> str:
            """Send one invoice to its customer."""
            return agent.deliver(invoice_id, amount)

        fn = send_invoice_sync

    if agent.cx is not None:
        from continuum.adapters.openai_agents import guarded_function_tool

        tool = guarded_function_tool(fn, agent.cx, RUN, key=agent.key, name_override="send_invoice")
    else:
        tool = function_tool(fn, name_override="send_invoice")
    oagent = OAgent(
        name="billing", instructions="Send the invoices.", model=ScriptedModel(), tools=[tool]
    )
    session = StoppingSession(THREAD, str(agent.workdir / "framework.sqlite"))
    run_config = RunConfig(tracing_disabled=True)

    async def history() -> list[Any]:
        return await session.get_items()

    items = asyncio.run(history())
    if items and _item_type(items[-1]) == "message" and items[-1].get("role") == "assistant":
        return "ALREADY_DONE"
    prompt = PROMPT if not items else "Continue."
    if flavor == "sync":
        result = Runner.run_sync(oagent, prompt, session=session, run_config=run_config)
    else:
        result = asyncio.run(Runner.run(oagent, prompt, session=session, run_config=run_config))
    return str(result.final_output)


def _item_type(item: Any) -> str | None:
    return item.get("type") if isinstance(item, dict) else getattr(item, "type", None)


# -- Pydantic AI -----------------------------------------------------------------------------


def run_pydantic_ai(agent: Agent, flavor: str) -> str:
    from pydantic_ai import Agent as PAgent
    from pydantic_ai.messages import (
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.toolsets import FunctionToolset

    def policy(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)
        call = next_call(done)
        if call is None:
            return ModelResponse(parts=[TextPart(final_text())])
        return ModelResponse(
            parts=[ToolCallPart("send_invoice", call, tool_call_id=f"call_{done + 1}")]
        )

    if flavor == "async":

        async def send_invoice(invoice_id: str, amount: float) -> str:
            """Send one invoice to its customer."""
            return agent.deliver(invoice_id, amount)

        toolset: Any = FunctionToolset([send_invoice])
    else:

        def send_invoice_sync(invoice_id: str, amount: float) -> str:
            """Send one invoice to its customer."""
            return agent.deliver(invoice_id, amount)

        toolset = FunctionToolset()
        toolset.add_function(send_invoice_sync, name="send_invoice")
    if agent.cx is not None:
        from continuum.adapters.pydantic_ai import ContinuumToolset

        toolset = ContinuumToolset(
            toolset, cx=agent.cx, run_id=RUN, keys={"send_invoice": agent.key}
        )
    pagent = PAgent(FunctionModel(policy), toolsets=[toolset])
    path = agent.workdir / "history.json"

    def save(messages: list[ModelMessage]) -> None:
        data = ModelMessagesTypeAdapter.dump_json(messages)
        _checkpoint_target(data.decode(), agent)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)  # the program's checkpoint: atomic, after every step

    history = ModelMessagesTypeAdapter.validate_json(path.read_bytes()) if path.exists() else []
    if history and isinstance(history[-1], ModelResponse) and not history[-1].tool_calls:
        return "ALREADY_DONE"

    async def main() -> str:
        async with pagent.iter(None if history else PROMPT, message_history=history) as run:
            async for _node in run:
                save(run.all_messages())
        assert run.result is not None
        return str(run.result.output)

    return asyncio.run(main())


# -- entry point -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m continuum.adapters.scenarios")
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--framework", choices=FRAMEWORKS, required=True)
    parser.add_argument("--mode", choices=("alone", "continuum"), default="continuum")
    parser.add_argument("--flavor", choices=("sync", "async"), default="sync")
    parser.add_argument("--durability", choices=("sync", "async", "exit"), default="sync")
    parser.add_argument("--stop", default=None)
    parser.add_argument("--no-reconcile", action="store_true")
    ns = parser.parse_args(argv)
    agent = Agent(ns.workdir.absolute(), ns.mode, ns.stop)
    if ns.mode == "continuum":
        agent.open_continuum(reconcile=not ns.no_reconcile)
    try:
        if ns.framework in ("langgraph", "langchain"):
            text = run_langgraph(agent, ns.framework, ns.flavor, ns.durability)
        elif ns.framework == "openai-agents":
            text = run_openai_agents(agent, ns.flavor)
        else:
            text = run_pydantic_ai(agent, ns.flavor)
    except EffectUncertain as e:
        print(f"EFFECT_UNCERTAIN {e.action_key} {e.command}", flush=True)
        return UNCERTAIN_EXIT
    except Exception as e:  # a framework may wrap the tool's exception in its own
        cause = _uncertain_cause(e)
        if cause is None:
            raise
        print(f"EFFECT_UNCERTAIN {cause.action_key} {cause.command}", flush=True)
        return UNCERTAIN_EXIT
    print(text if text == "ALREADY_DONE" else f"DONE {text}", flush=True)
    agent.stop("after_all")
    return 0


def _uncertain_cause(error: BaseException) -> EffectUncertain | None:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, EffectUncertain):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


if __name__ == "__main__":
    sys.exit(main())

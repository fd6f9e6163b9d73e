"""A scripted model: what the "model" asks a real host to do, turn by turn.

A script is a list of steps. Step N answers the model request whose history already holds
N assistant turns, so a host that retries a request, or sends side requests (titles,
classifiers) in between, gets the same answer for the same point of the conversation.
A step is a list of tool calls, a final text, or a function of the previous turn's tool
results that returns either: so a call can depend on what the last one returned (the
action key an intercept answered, the verdict a resume gave).

Tool names are written as the host-neutral logical names (``continuum_resume``) or as a
host's own tool (``Bash``); the wire module resolves a logical MCP name against the
tools the request really offers (Claude Code and Codex offer
``mcp__continuum__continuum_resume``, Gemini ``mcp_continuum_continuum_resume``, Kilo
``continuum_continuum_resume``). A name the request does not offer ends the session
with a text saying so, which the test then sees in ``Model.problems``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    name: str
    input: dict[str, Any]
    mcp: bool = False  # a logical MCP tool name, resolved against the offered tools


@dataclass(frozen=True)
class ToolResult:
    """One tool result as the host sent it back to the model."""

    call_id: str
    name: str | None
    text: str
    is_error: bool = False

    def json(self) -> Any:
        """The result as JSON (an MCP tool's structured answer), or None if it is not."""
        text = self.text.strip()
        for start in ("{", "["):
            i = text.find(start)
            if i >= 0:
                try:
                    return json.loads(text[i:])
                except ValueError:
                    continue
        return None


Reply = list[ToolCall] | str
Step = list[ToolCall] | str | Callable[[list[ToolResult]], Reply]


def mcp(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(name, arguments, mcp=True)


@dataclass
class Turn:
    """One model request, parsed by a wire module."""

    tools: list[str]  # tool names the request offers
    position: int  # assistant turns already in the history
    results: list[ToolResult]  # the tool results since the last assistant turn
    text: str  # every text of the request, for searching (system prompt, context)
    main: bool = True  # False for side requests (titles, classifiers): answered with text
    first_user: str = ""  # the conversation's first user message (tells subagents apart)
    at: float = field(default_factory=time.monotonic)  # when it arrived


@dataclass
class Model:
    """The scripted conversation plus a log of what the host sent."""

    steps: Sequence[Step]
    final: str = "Done."
    requests: list[dict[str, Any]] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Conversations of a host's subagents: a marker their first user message contains ->
    # their own steps (a subagent's history starts again at position 0).
    subagents: dict[str, Sequence[Step]] = field(default_factory=dict)

    def reply(self, turn: Turn) -> Reply:
        with self.lock:
            self.turns.append(turn)
        if not turn.main:
            return "ok"
        steps = self.steps
        for marker, theirs in self.subagents.items():
            if marker in turn.first_user:
                steps = theirs
        if turn.position >= len(steps):
            return self.final
        step = steps[turn.position]  # an Agent's may still end the conversation here
        if callable(step):
            step = step(turn.results)
        if isinstance(step, str):
            return step
        calls = []
        for call in step:
            name = resolve(call, turn.tools)
            if name is None:
                problem = f"step {turn.position}: the host offers no tool {call.name!r}"
                with self.lock:
                    self.problems.append(problem + f" (offered: {sorted(turn.tools)})")
                return f"STOP: {problem}"
            calls.append(ToolCall(name, call.input))
        return calls

    def main_turns(self, marker: str | None = None) -> list[Turn]:
        """The scripted turns (of the subagent whose marker is given, or of the main loop)."""
        with self.lock:
            turns = [t for t in self.turns if t.main]
        if marker is not None:
            return [t for t in turns if marker in t.first_user]
        return [t for t in turns if not any(m in t.first_user for m in self.subagents)]

    def results(self, marker: str | None = None) -> list[ToolResult]:
        """Every tool result the host sent back, in order (deduplicated by call id)."""
        seen: dict[str, ToolResult] = {}
        for t in self.main_turns(marker):
            for r in t.results:
                seen.setdefault(r.call_id, r)
        return list(seen.values())


def resolve(call: ToolCall, offered: Sequence[str]) -> str | None:
    if call.name in offered:
        return call.name
    if not call.mcp:
        return None
    found = [t for t in offered if t.endswith("_" + call.name)]
    return found[0] if len(found) == 1 else None


class Agent(Sequence[Step]):
    """Steps given by a generator, for a model whose next call depends on everything it saw:
    the generator yields a reply (tool calls or a final text) and receives the results of
    the calls it asked for. Usable as ``Model.steps``. A position asked again (a retry,
    a loader turn) gets the reply it got the first time; the generator ends the
    conversation by returning (the model's final text follows)."""

    def __init__(self, policy: Callable[[], Any]) -> None:
        self._gen = policy()
        self._replies: list[Reply] = []
        self._done = False
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._replies) + (0 if self._done else 1)

    def __getitem__(self, index: int) -> Step:  # type: ignore[override]
        def step(results: list[ToolResult]) -> Reply:
            with self._lock:
                while len(self._replies) <= index and not self._done:
                    try:
                        reply = next(self._gen) if not self._replies else self._gen.send(results)
                    except StopIteration:
                        self._done = True
                        break
                    self._replies.append(reply)
                return self._replies[index] if index < len(self._replies) else "Done."

        return step

"""In-process adapters: guard an agent framework's tools with the effect seam.

One module per framework, each an optional extra that imports its framework only when
the module itself is imported (``import continuum`` and ``continuum-mcp`` load none):

- ``continuum.adapters.langchain``: ``guard_tool`` for a ``BaseTool`` / ``@tool``
  (``continuum-recovery[langchain]``);
- ``continuum.adapters.langgraph``: guarded tools for ``ToolNode``, ``guard_node`` for a
  node with side effects, and ``ContinuumCheckpointer`` whose checkpoints are events of
  continuum's hash-chained log (``continuum-recovery[langgraph]``);
- ``continuum.adapters.openai_agents``: ``guarded_function_tool`` and
  ``ContinuumRunHooks`` (``continuum-recovery[openai-agents]``);
- ``continuum.adapters.pydantic_ai``: ``ContinuumToolset`` (``continuum-recovery[pydantic-ai]``).

Every effect is recorded with origin ``deterministic``: the program itself performs
the tool and observes its result. What the model says (its text) is recorded, where an
adapter records it at all, as ``external_agent`` (``record_claim``). See
references/adapters.md.
"""

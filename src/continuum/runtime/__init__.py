"""The facade: Continuum, the one object the edges (CLI, MCP, hooks, adapters, the
operator page) use, and the parts it delegates to.
Imports ops, recovery, ledger, store, state, eventlog and the leaves.
"""

from continuum.runtime.facade import Continuum

__all__ = ["Continuum"]

"""Control arguments that a known host adds to every MCP tool call: accepted, ignored.

Every tool refuses an argument it does not have, by name (``tools.forbid_unknown_
arguments``), so that a misspelled ``complete`` is never dropped silently. Some hosts,
though, add arguments of their own to every MCP tool's schema, tell the model to set
them and forward them to the server; refusing those would refuse every call the host
makes. The names below are such host-owned arguments, seen on the real binaries
(tests/hosts/); they carry nothing continuum acts on and are removed before a call's
arguments are checked. Any other unknown argument is still refused.

The table is per host, for people reading it (references/mcp.md shows it); a call is
not asked which host sent it, since an ignored argument cannot change what a call does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# host -> the control arguments it adds to every MCP tool call
CONTROL_ARGUMENTS: dict[str, tuple[str, ...]] = {
    # Gemini CLI 0.61.0 adds "wait_for_previous" (boolean) to every MCP tool's schema and
    # tells the model to set it: whether the call waits for the previous tool call.
    "Gemini CLI": ("wait_for_previous",),
}

IGNORED = frozenset(name for names in CONTROL_ARGUMENTS.values() for name in names)


def without_control_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` without the host control arguments (a new dict)."""
    return {k: v for k, v in arguments.items() if k not in IGNORED}

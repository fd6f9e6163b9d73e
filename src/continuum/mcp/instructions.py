"""What ``continuum-mcp`` tells a client in its ``initialize`` answer, apart from the tools.

A module of its own so the server can answer ``initialize`` without importing the tools
(``tools.py``: the facade, the store, the models); ``startup.py`` says why.
"""

from __future__ import annotations

# Hosts show a server's tools under names of their own: Claude Code and Codex as
# mcp__continuum__continuum_resume, Gemini CLI as mcp_continuum_continuum_resume, Kilo Code
# as continuum_continuum_resume (seen on the real binaries, tests/hosts/). The
# instructions name each tool by the ending every host keeps, and say so.
INSTRUCTIONS = (
    "continuum keeps a crash-safe record of this agent's run. Its tools are named below by "
    "their own names; your host may show them with a prefix (mcp__continuum__continuum_resume, "
    "mcp_continuum_continuum_resume, continuum_continuum_resume): use the tool whose name ends "
    "with the name given here. After any restart call continuum_resume first and follow "
    "next_allowed_action. Route every external side effect through continuum_intercept_action "
    "(perform it only if proceed is true), then continuum_complete_action or "
    "continuum_fail_action. Never redo an action reported unknown: check the external system "
    "and call continuum_reconcile_action."
)

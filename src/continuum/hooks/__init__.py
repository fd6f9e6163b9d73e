"""Host hooks: continuum's gate for coding hosts (Claude Code, Gemini CLI, Codex).

Hosts run hook commands before and after every tool call and at session start, outside
the model's control. ``continuum hook pre-tool`` routes tool calls that the effect
registry names as side effects through the action ledger; the other hooks record what
happened and brief the next session. See references/hooks.md.

Nothing is imported here: a hook for a call that matches no rule must start fast.
"""

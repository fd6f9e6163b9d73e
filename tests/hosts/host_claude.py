"""Claude Code (``@anthropic-ai/claude-code``), run as ``claude -p PROMPT``.

Offline: ``ANTHROPIC_BASE_URL`` points at the scripted model (Messages API,
``wire_anthropic.py``), ``ANTHROPIC_API_KEY`` is a dummy, HOME is private,
``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` stops update checks and telemetry.
``--permission-mode bypassPermissions`` lets the scripted calls run without prompts; as
root that mode also needs ``IS_SANDBOX=1``. ``-p`` skips the workspace trust dialog, so
the project's ``.claude/settings.json`` hooks and ``.mcp.json`` server load as they are.
``claude -p`` does not wait for a project MCP server that is slow to start: under load its
first model request lacked continuum's tools (``test_host_specifics.py`` shows it with a
server that takes 4 s); ``CLAUDE_CODE_MCP_STARTUP_WAIT_MS`` in the environment (not in
settings' ``env``, which comes too late) makes it wait, as a user scripting ``claude -p``
must set it too (references/mcp.md).
"""

from __future__ import annotations

import os

from tests.hosts.harness import Host, Project, base_env, binary
from tests.hosts.model_server import Wire
from tests.hosts.script import Step, ToolCall
from tests.hosts.wire_anthropic import AnthropicWire

STARTUP_WAIT_MS = "30000"


class ClaudeCode(Host):
    name = "claude-code"
    mcp_client = "claude-code"
    hooks_client = "claude-code"
    shell_tool = "Bash"

    def wire(self) -> Wire:
        return AnthropicWire()

    def argv(self, project: Project, prompt: str) -> list[str]:
        return [
            str(binary(self.name)),
            "-p",
            prompt,
            "--permission-mode",
            "bypassPermissions",
            "--output-format",
            "json",
            # Its debug log (HOME/.claude/debug/) says why when something goes wrong.
            "--debug",
        ]

    def env(self, project: Project, base_url: str) -> dict[str, str]:
        env = {
            **base_env(project),
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_API_KEY": "sk-ant-offline-test",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_MCP_STARTUP_WAIT_MS": STARTUP_WAIT_MS,
        }
        if os.geteuid() == 0:
            env["IS_SANDBOX"] = "1"
        return env

    def shell(self, command: str) -> ToolCall:
        return ToolCall("Bash", {"command": command, "description": "run a command"})

    def write(self, path: str, content: str) -> ToolCall:
        return ToolCall("Write", {"file_path": path, "content": content})

    def compaction(self) -> tuple[list[Step], str]:
        # `claude -p /compact` runs the built-in command: PreCompact fires (trigger
        # "manual") before Claude Code finds there is too little to compact.
        return [], "/compact"

"""Gemini CLI (``@google/gemini-cli``), run as ``gemini -p PROMPT``.

Offline, as the bundle of 0.61.0 reads its configuration:

- ``GOOGLE_GEMINI_BASE_URL`` points the Gemini API client at the scripted model
  (``wire_gemini.py``); ``GEMINI_API_KEY`` is a dummy (sent as ``x-goog-api-key``).
- ``security.auth.selectedType = "gemini-api-key"`` in the user settings: without it
  the base URL alone selects the ``gateway`` auth type, which headless mode refuses
  ("Invalid auth method selected.", exit 41).
- ``-m gemini-2.5-flash``: a pinned model. The default ``auto`` asks a router model
  first; a pinned one sends nothing but the conversation.
- ``--approval-mode yolo``: every tool call runs without a prompt. In the default mode a
  headless session does not even offer the tools that would need one (the shell,
  ``write_file``, ``replace``, every MCP tool).
- The project is trusted in ``~/.gemini/trustedFolders.json`` (``TRUST_FOLDER``), as a
  user who trusted it once would have it: headless Gemini in an untrusted folder exits
  55 (``FatalUntrustedWorkspaceError``). ``--skip-trust`` gets past that check but is
  read after the settings were loaded, so the project's MCP servers and hooks are still
  dropped; ``GEMINI_CLI_TRUST_WORKSPACE=true`` in the environment would load them.
- Update checks, usage statistics and telemetry are off in the user settings.
- ``gemini`` relaunches itself as a child node (``--max-old-space-size``) that runs
  everything: not detached, so it, the MCP servers and the hook commands it starts stay
  in the host's session and process group; the shell tool's commands get a session of
  their own but descend from it and keep the environment's tag. ``proc.kill_tree`` finds
  them all (checked: nothing outlives the kill), so the relaunch is left as a user has it.

Everything goes into the private HOME (``~/.gemini/settings.json``): the project's
``.gemini/settings.json`` is continuum's, written by ``continuum mcp install --client
gemini`` and ``continuum hooks install --client gemini``; Gemini merges the two.
"""

from __future__ import annotations

import json

from tests.hosts.harness import Host, Project, base_env, binary
from tests.hosts.model_server import Wire
from tests.hosts.script import Step, ToolCall
from tests.hosts.wire_gemini import GeminiWire

MODEL = "gemini-2.5-flash"

USER_SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
}


class GeminiCli(Host):
    name = "gemini"
    mcp_client = "gemini"
    hooks_client = "gemini"
    shell_tool = "run_shell_command"

    def wire(self) -> Wire:
        return GeminiWire()

    def __init__(self, *, trust_folder: bool = True) -> None:
        self.trust_folder = trust_folder  # False: a folder the user never trusted

    def prepare(self, project: Project) -> None:
        gemini = project.home / ".gemini"
        gemini.mkdir(parents=True, exist_ok=True)
        (gemini / "settings.json").write_text(json.dumps(USER_SETTINGS, indent=2), encoding="utf-8")
        trusted = {str(project.dir): "TRUST_FOLDER", str(project.dir.resolve()): "TRUST_FOLDER"}
        if self.trust_folder:
            (gemini / "trustedFolders.json").write_text(
                json.dumps(trusted, indent=2), encoding="utf-8"
            )

    def argv(self, project: Project, prompt: str) -> list[str]:
        return [
            str(binary(self.name)),
            "-p",
            prompt,
            "-m",
            MODEL,
            "--approval-mode",
            "yolo",
        ]

    def env(self, project: Project, base_url: str) -> dict[str, str]:
        return {
            **base_env(project),
            "GOOGLE_GEMINI_BASE_URL": base_url,
            "GEMINI_API_KEY": "offline-test-key",
            "NO_COLOR": "1",
        }

    def shell(self, command: str) -> ToolCall:
        return ToolCall(self.shell_tool, {"command": command, "description": "run a command"})

    def write(self, path: str, content: str) -> ToolCall:
        return ToolCall("write_file", {"file_path": path, "content": content})

    def compaction(self) -> tuple[list[Step], str]:
        # 0.61.0 fires PreCompress (trigger "auto") before every model request, whether
        # or not there is anything to compress: one tool call makes two requests.
        return [[self.shell("echo compacting")]], "Do the task."

"""Kilo Code CLI (``@kilocode/cli``, an OpenCode fork compiled with Bun), run as
``kilo run --auto PROMPT``.

Offline: the user's global config (``$XDG_CONFIG_HOME/kilo/kilo.jsonc``) declares a
provider ``scripted`` on the bundled ``@ai-sdk/openai-compatible`` package (nothing is
installed at run time) whose ``baseURL`` is ``{env:CONTINUUM_TEST_MODEL_URL}``: Kilo
expands ``{env:...}`` only in global config, never in a project's. It speaks Chat
Completions (``wire_chat.py``). ``enabled_providers: ["scripted"]`` stops the built-in
``kilo`` gateway provider from fetching its model list from api.kilo.ai;
``KILO_DISABLE_MODELS_FETCH`` stops the models.dev catalog download,
``KILO_TELEMETRY_LEVEL=off`` PostHog, ``KILO_DISABLE_AUTOUPDATE`` the update check and
``KILO_NO_DAEMON`` the look-up of a local kilo daemon. ``KILO_MODELS_PATH`` names an
empty catalog (``{}``) in place of the bundled models.dev snapshot: Kilo otherwise builds
and schema-checks every model of every provider in it twice a session (at start and at
dispose), about 2 s of CPU, for providers ``enabled_providers`` then drops; the
``scripted`` model is the same either way (``kilo models --verbose``). A config directory
holding plugins (``.kilo/plugin/``) makes Kilo install ``@kilocode/plugin`` there with its
embedded npm (Arborist), from registry.npmjs.org; ``npm_config_offline=true`` turns
that into a cache miss that fails at once (logged, the plugins load anyway; loading
Arborist still costs ~0.3 s of CPU, which only a pre-installed ``.kilo/node_modules``
would save: not worth faking). Traced
with ``strace -f -e connect``: with all of these, the only connection is to the
scripted model.

``--auto`` approves every permission not explicitly denied. Without it a call that would
ask (a write into ``.kilo/``, to ``kilo.jsonc`` of a git worktree, outside the project)
is auto-rejected and the run ends, exit 1 ("pass --auto for autonomous use"). The
project's own config (``kilo.jsonc``, ``.kilo/kilo.jsonc``, ...) and plugins
(``.kilo/plugin/*.js``) load without any trust prompt. Kilo writes into config files it
loads: a ``"$schema"`` line into each one without it, and ``permission.bash = "allow"``
into the user's global config ("migrated bash permission"); ``prepare`` rewrites the
global one before every session.

The temp project is not a git repository, so Kilo's worktree is ``/``: it looks for
config and plugins in every directory from the project up to ``/``.

Where a session's time goes (about 15 s on 2 CPUs, profiled with Bun's inspector): ~3 s
loading the binary, ~6 s in ``kilo run``'s capability check, a ``GET /doc`` of its
in-process server that generates the whole OpenAPI document (no flag skips it, nothing in
config changes its size), then continuum's own processes (MCP server, hooks). LSP,
formatters and the file watcher are off by default. Snapshots record nothing outside a git
repository, but each one still takes a lock in ``$XDG_STATE_HOME/kilo/locks``: the session
after a SIGKILL stalled 120 s on it ("snapshot turn operation exceeded availability
budget"), hence ``"snapshot": false``.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.hosts.harness import Host, Project, base_env, binary
from tests.hosts.model_server import Wire
from tests.hosts.script import ToolCall
from tests.hosts.wire_chat import ChatWire

MODEL = "scripted/scripted-model"

GLOBAL_CONFIG = {
    "$schema": "https://app.kilo.ai/config.json",
    "provider": {
        "scripted": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Scripted model",
            "options": {"baseURL": "{env:CONTINUUM_TEST_MODEL_URL}/v1", "apiKey": "offline-test"},
            "models": {
                "scripted-model": {
                    "name": "Scripted model",
                    "tool_call": True,
                    "limit": {"context": 200000, "output": 8192},
                }
            },
        }
    },
    "enabled_providers": ["scripted"],
    "model": MODEL,
    "small_model": MODEL,
    "autoupdate": False,
    "share": "disabled",
    # Kilo takes a cross-process file lock for every snapshot, even outside git where it
    # snapshots nothing; a SIGKILLed session can leave it held, and the next one in this
    # HOME then stalls 120 s (its snapshot budget). Off, snapshots return at once.
    "snapshot": False,
}


def models_catalog(project: Project) -> Path:
    """The empty models catalog ``KILO_MODELS_PATH`` names (see the module docstring)."""
    return project.home / "kilo-models.json"


class Kilo(Host):
    name = "kilo"
    mcp_client = "kilo"
    hooks_client = (
        "kilo"  # `continuum hooks install --client kilo` writes .kilo/plugin/continuum.js
    )
    shell_tool = "bash"

    def wire(self) -> Wire:
        return ChatWire()

    def prepare(self, project: Project) -> None:
        config = project.home / ".config" / "kilo" / "kilo.jsonc"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps(GLOBAL_CONFIG, indent=2) + "\n", encoding="utf-8")
        models_catalog(project).write_text("{}\n", encoding="utf-8")

    def argv(self, project: Project, prompt: str) -> list[str]:
        return [
            str(binary(self.name)),
            "run",
            "--auto",
            "--format",
            "json",
            "--model",
            MODEL,
            prompt,
        ]

    def env(self, project: Project, base_url: str) -> dict[str, str]:
        return {
            **base_env(project),
            "CONTINUUM_TEST_MODEL_URL": base_url,
            "KILO_DISABLE_MODELS_FETCH": "1",
            "KILO_DISABLE_AUTOUPDATE": "1",
            "KILO_TELEMETRY_LEVEL": "off",
            "KILO_NO_DAEMON": "1",
            # An empty models catalog: ~2 s of CPU less per session (see the docstring).
            "KILO_MODELS_PATH": str(models_catalog(project)),
            "npm_config_offline": "true",
        }

    def shell(self, command: str) -> ToolCall:
        return ToolCall("bash", {"command": command, "description": "run a command"})

    def write(self, path: str, content: str) -> ToolCall:
        # Kilo's write tool wants an absolute path; a relative one is resolved against the
        # project directory (the session's working directory).
        return ToolCall("write", {"filePath": path, "content": content})

"""OpenAI Codex CLI (``@openai/codex``), run as ``codex exec PROMPT``.

Offline: a private ``CODEX_HOME`` (``HOME/.codex``) whose ``config.toml`` names a custom
model provider at the scripted model (``wire_api = "responses"``, ``wire_responses.py``;
the key is a dummy in ``env_key``) and the model ``gpt-5.5``, one of the binary's built-in
catalog: with it Codex offers ``apply_patch`` as a freeform tool and the shell as
``exec_command`` ``{cmd}`` (a model it does not know gets fallback tools, without
``apply_patch``). Nothing phones home: analytics, feedback and the update check are
off, and so are plugins (their marketplace sync looks up github.com, api.github.com and
chatgpt.com at start-up; with ``features.plugins = false`` an strace of a whole session
shows no connection but to 127.0.0.1). ``codex exec`` never asks for approval;
``--dangerously-bypass-approvals-and-sandbox`` runs the scripted commands unsandboxed,
``--skip-git-repo-check`` allows a project that is not a git repo, ``--strict-config``
fails on any config key this version does not know (ours, and those ``continuum mcp
install`` writes). The user config is rewritten for every session (the model server's
port changes), so hooks are trusted again each time.

Codex reads a project's ``.codex/`` (``config.toml``, ``hooks.json``) only when the
project is trusted (``[projects."/abs/dir"] trust_level = "trusted"`` in the user config,
what ``codex exec --trust`` writes); otherwise it warns once on stderr ("Untrusted
project-local configuration is disabled") and ignores the whole folder. And it runs a
hook (project or user) only when that hook is trusted too: ``[hooks.state."KEY"]
trusted_hash = "sha256:..."`` with KEY ``SOURCE_PATH:EVENT:GROUP:HANDLER`` and the hash
of the hook as it is now; an untrusted or edited hook is skipped without a word in
``codex exec``. A person trusts hooks in the TUI's hook review; this host does what that
does, through Codex's own app server (``hooks/list`` for the keys and current hashes,
``config/batchWrite`` to store them), after the project's hooks are installed.
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Any

from tests.hosts.harness import Host, Project, base_env, binary
from tests.hosts.model_server import Wire
from tests.hosts.script import Step, ToolCall
from tests.hosts.wire_responses import COMPACT_AT, FULL_CONTEXT, ResponsesWire

MODEL = "gpt-5.5"
PROVIDER = "scripted"
KEY_ENV = "CONTINUUM_TEST_MODEL_KEY"
BOUND = 60.0  # seconds for the app server's set-up calls


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def codex_home(project: Project) -> Path:
    return project.home / ".codex"


class Codex(Host):
    name = "codex"
    mcp_client = "codex"
    hooks_client = "codex"
    shell_tool = "exec_command"

    def __init__(self, *, trust_hooks: bool = True) -> None:
        # False: the project is trusted but its hooks are not (a user who never opened the
        # hook review), which `codex exec` neither asks about nor warns of.
        self.trusting = trust_hooks

    def wire(self) -> Wire:
        return ResponsesWire()

    def argv(self, project: Project, prompt: str) -> list[str]:
        # A session the scripted model reports a full context to (compaction()) is told
        # when it is full; every other session keeps Codex's own limit, never reached.
        limit = (
            ["-c", f"model_auto_compact_token_limit={COMPACT_AT}"] if FULL_CONTEXT in prompt else []
        )
        return [
            str(binary(self.name)),
            "exec",
            *limit,
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            "--strict-config",
            "--color",
            "never",
            prompt,
        ]

    def env(self, project: Project, base_url: str) -> dict[str, str]:
        # The provider's URL is known only now (the model server's port), so the user
        # config is written here rather than in prepare().
        env = {
            **base_env(project),
            "CODEX_HOME": str(codex_home(project)),
            KEY_ENV: "sk-offline-test",
        }
        self.configure(project, base_url)
        if self.trusting:
            self.trust_hooks(project, env)
        return env

    def configure(self, project: Project, base_url: str) -> None:
        home = codex_home(project)
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(
            f"model = {_toml(MODEL)}\n"
            f"model_provider = {_toml(PROVIDER)}\n"
            "check_for_update_on_startup = false\n"
            "\n[features]\nplugins = false\n"
            "\n[analytics]\nenabled = false\n"
            "\n[feedback]\nenabled = false\n"
            f"\n[model_providers.{PROVIDER}]\n"
            f'name = "scripted model"\nbase_url = {_toml(base_url + "/v1")}\n'
            f'wire_api = "responses"\nenv_key = {_toml(KEY_ENV)}\n'
            f"\n[projects.{_toml(str(project.dir))}]\n"
            'trust_level = "trusted"\n',
            encoding="utf-8",
        )

    def trust_hooks(self, project: Project, env: dict[str, str]) -> list[dict[str, Any]]:
        """Trust every hook Codex finds for the project, as its hook review would."""
        if not any(
            (d / "hooks.json").exists() for d in (project.dir / ".codex", codex_home(project))
        ):
            return []
        server = _AppServer(binary(self.name), env, project.dir)
        try:
            listed = server.call("hooks/list", {"cwds": [str(project.dir)]})
            hooks = [h for entry in listed["data"] for h in entry["hooks"]]
            untrusted = {
                h["key"]: {"trusted_hash": h["currentHash"]}
                for h in hooks
                if h["trustStatus"] != "trusted"
            }
            if untrusted:
                edit = {"keyPath": "hooks.state", "mergeStrategy": "upsert", "value": untrusted}
                server.call("config/batchWrite", {"edits": [edit]})
        finally:
            server.close()
        return hooks

    def shell(self, command: str) -> ToolCall:
        return ToolCall("exec_command", {"cmd": command})

    def write(self, path: str, content: str) -> ToolCall:
        lines = "".join(f"+{line}\n" for line in content.splitlines())
        return ToolCall(
            "apply_patch",
            {"input": f"*** Begin Patch\n*** Add File: {path}\n{lines}*** End Patch\n"},
        )

    def compaction(self) -> tuple[list[Step], str]:
        # `codex exec` has no /compact: Codex compacts on its own when the usage the model
        # reports reaches model_auto_compact_token_limit and the turn goes on (a tool call
        # to answer), running PreCompact (trigger "auto") first. The wire reports a full
        # context once, for a prompt holding FULL_CONTEXT (wire_responses.py, "Usage").
        return [[self.shell("echo after compaction")]], f"Go on with the task. {FULL_CONTEXT}"


class _AppServer:
    """``codex app-server`` over stdio (JSON-RPC, one message a line), for set-up only."""

    def __init__(self, codex: Path, env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [str(codex), "app-server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            text=True,
        )
        self.ids = 0
        self.watchdog = threading.Timer(BOUND, self.proc.kill)  # a hung server ends the read
        self.watchdog.start()
        self.call("initialize", {"clientInfo": {"name": "continuum-host-tests", "version": "0"}})
        self._send({"jsonrpc": "2.0", "method": "initialized"})

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def call(self, method: str, params: dict[str, Any]) -> Any:
        self.ids += 1
        self._send({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params})
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)
            if message.get("id") == self.ids:
                if "error" in message:
                    raise AssertionError(f"codex app-server {method}: {message['error']}")
                return message["result"]
        raise AssertionError(f"codex app-server ended before answering {method}")

    def close(self) -> None:
        self.watchdog.cancel()
        self.proc.kill()
        self.proc.wait(timeout=30)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()

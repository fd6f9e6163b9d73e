"""`continuum hooks doctor --client HOST`: will the host really run continuum's hooks here?

Hosts skip hooks silently in situations a user cannot see from the hook file alone (all
seen on the real binaries, tests/hosts/):

- Codex reads a project's ``.codex/`` only when the project is trusted in the user's
  ``config.toml`` (``[projects."DIR"] trust_level = "trusted"``), and runs each hook only
  when ``[hooks.state."KEY"] trusted_hash`` is that hook's current hash; an untrusted
  or edited hook is skipped without a word in ``codex exec``.
- Gemini CLI refuses to start headless in a folder it does not trust (exit 55); with
  ``--skip-trust`` it drops the project's hooks and MCP servers.
- Claude Code runs no hook at all when a settings file says ``disableAllHooks``.
- Kilo Code runs the plugin unless started with ``--pure``.

Each check reads files only (never starts the host). The report says, per check, ok or
what is wrong and what to do; ``will_run`` only when every check passed. The effect
registry must also be valid and accepted (``guard.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from pathlib import Path
from typing import Any

from continuum.hooks.guard import accepted, accepted_registry, registry_digest
from continuum.hooks.install import (
    EVENTS,
    PLUGIN_HOSTS,
    SETTINGS_PATHS,
    is_our_plugin,
    is_ours,
    read_config,
)
from continuum.hooks.registry import REGISTRY_PATH, load_registry

Check = dict[str, Any]  # {"name", "ok", "detail", "fix"}

# Codex 0.171.0: the snake_case label of each hook event, and how it hashes a hook
# (codex-rs/hooks discovery: the event label, the matcher and the one handler with its
# defaults filled in, as compact key-sorted JSON; reproduced against `hooks/list`).
CODEX_LABELS = {
    "PreToolUse": "pre_tool_use",
    "PermissionRequest": "permission_request",
    "PostToolUse": "post_tool_use",
    "PreCompact": "pre_compact",
    "PostCompact": "post_compact",
    "SessionStart": "session_start",
    "SessionEnd": "session_end",
    "UserPromptSubmit": "user_prompt_submit",
    "SubagentStart": "subagent_start",
    "SubagentStop": "subagent_stop",
    "Stop": "stop",
    "Interrupt": "interrupt",
}
_CONTEXT_EVENTS = (
    "pre_tool_use",
    "post_tool_use",
    "session_start",
    "user_prompt_submit",
    "subagent_start",
)


def codex_hook_hash(event: str, matcher: str | None, handler: dict[str, Any]) -> str:
    """The ``trusted_hash`` Codex 0.171.0 gives one command handler of a hooks.json group."""
    label = CODEX_LABELS[event]
    timeout = handler.get("timeout")
    if label in ("session_end", "interrupt"):
        timeout = min(max(1 if timeout is None else int(timeout), 1), 3)
    else:
        timeout = max(600 if timeout is None else int(timeout), 1)
    hook: dict[str, Any] = {
        "type": "command",
        "command": handler.get("command"),
        "timeout": timeout,
        "async": bool(handler.get("async", False)),
    }
    if handler.get("statusMessage") is not None:
        hook["statusMessage"] = handler["statusMessage"]
    limit = handler.get("additionalContextLimit")
    if label in _CONTEXT_EVENTS and limit not in (None, 2500):
        hook["additionalContextLimit"] = limit
    identity: dict[str, Any] = {"event_name": label, "hooks": [hook]}
    if matcher is not None and label not in ("user_prompt_submit", "stop", "interrupt"):
        identity["matcher"] = matcher
    data = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(data.encode("utf-8")).hexdigest()


def _check(name: str, ok: bool, detail: str, fix: str = "") -> Check:
    return {"name": name, "ok": ok, "detail": detail, "fix": "" if ok else fix}


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _hooks_file(client: str, project: Path) -> tuple[list[Check], dict[str, Any]]:
    path = project / SETTINGS_PATHS[client]
    if client in PLUGIN_HOSTS:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            return [
                _check(
                    "plugin",
                    False,
                    f"{path} does not exist",
                    f"continuum hooks install --client {client}",
                )
            ], {}
        ours = is_our_plugin(text)
        return [
            _check(
                "plugin",
                ours,
                f"{path} is {'continuum' if ours else 'not continuum'}'s plugin",
                f"move that file, then `continuum hooks install --client {client}`",
            )
        ], {}
    try:
        config = read_config(path)
    except Exception as e:  # a file we cannot read is a finding, not a crash
        return [_check("hook settings", False, str(e), "fix the file")], {}
    hooks: dict[str, Any] = config["hooks"] if isinstance(config.get("hooks"), dict) else {}
    missing = [
        event
        for event in EVENTS[client]
        if not any(
            isinstance(g, dict)
            and any(isinstance(h, dict) and is_ours(h.get("command")) for h in g.get("hooks") or [])
            for g in hooks.get(event) or []
        )
    ]
    return [
        _check(
            "hook settings",
            not missing,
            f"{path}: continuum hooks on {len(EVENTS[client]) - len(missing)} of "
            f"{len(EVENTS[client])} events"
            + (f" (missing: {', '.join(missing)})" if missing else ""),
            f"continuum hooks install --client {client}",
        )
    ], config


def _registry(project: Path) -> list[Check]:
    try:
        registry = load_registry(str(project))
    except Exception as e:
        return [_check("effect registry", False, str(e), "continuum hooks effects --check")]
    known, digest = accepted(str(project))
    now = registry_digest(str(project))
    ok = known and digest == now
    kept, _ = accepted_registry(str(project))  # compiled from the kept tables, if any
    same = [r.shape() for r in kept.rules] == [r.shape() for r in registry.rules]
    return [
        _check(
            "effect registry",
            True,
            f"{project / REGISTRY_PATH}: {len(registry.rules)} rule(s)",
        ),
        _check(
            "registry accepted",
            ok,
            "the registry is the one a person accepted"
            if ok
            else "the registry changed since a person accepted it, or was never accepted: "
            "the gate refuses every call that could be an effect",
            f"review it, then `continuum hooks accept --dir {project}`",
        ),
        _check(
            "accepted rules",
            same,
            "the rules the gate compiles from the acceptance are the registry's"
            if same
            else "the acceptance's kept rules differ from the registry's text: the gate "
            "enforces the kept ones",
            f"review the registry, then `continuum hooks accept --dir {project}`",
        ),
    ]


def _codex(project: Path, config: dict[str, Any], home: Path) -> list[Check]:
    codex_home = Path(os.environ.get("CODEX_HOME") or home / ".codex")
    user = codex_home / "config.toml"
    try:
        data = tomllib.loads(user.read_text(encoding="utf-8"))
    except FileNotFoundError:
        data = {}
    except (OSError, tomllib.TOMLDecodeError) as e:
        return [_check("codex config", False, f"{user}: {e}", "fix that file")]
    projects: dict[str, Any] = data["projects"] if isinstance(data.get("projects"), dict) else {}
    candidates = {str(project), os.path.realpath(project)}
    trusted = any(
        isinstance(projects.get(c), dict) and projects[c].get("trust_level") == "trusted"
        for c in candidates
    )
    checks = [
        _check(
            "project trusted",
            trusted,
            f"{user}: {project} is {'trusted' if trusted else 'not trusted'}: Codex "
            + ("reads its .codex/" if trusted else "ignores the project's whole .codex/"),
            f'add [projects."{project}"] trust_level = "trusted" to {user} (or run '
            "`codex` here once and trust the project)",
        )
    ]
    state = data.get("hooks", {}).get("state", {}) if isinstance(data.get("hooks"), dict) else {}
    source = project / SETTINGS_PATHS["codex"]
    untrusted: list[str] = []
    counted = 0
    hooks: dict[str, Any] = config["hooks"] if isinstance(config.get("hooks"), dict) else {}
    for event, groups in hooks.items():
        if event not in CODEX_LABELS or not isinstance(groups, list):
            continue
        for gi, group in enumerate(groups):
            for hi, handler in enumerate((group or {}).get("hooks") or []):
                if not (isinstance(handler, dict) and is_ours(handler.get("command"))):
                    continue
                counted += 1
                key = f"{source}:{CODEX_LABELS[event]}:{gi}:{hi}"
                entry = state.get(key) if isinstance(state, dict) else None
                want = codex_hook_hash(event, group.get("matcher"), handler)
                if (
                    not isinstance(entry, dict)
                    or entry.get("trusted_hash") != want
                    or entry.get("enabled") is False
                ):
                    untrusted.append(event)
    checks.append(
        _check(
            "hooks trusted",
            counted > 0 and not untrusted,
            f"{counted - len(untrusted)} of {counted} continuum hooks trusted as they are now"
            + (f" (not: {', '.join(untrusted)})" if untrusted else "")
            + ": Codex skips an untrusted or edited hook without a word",
            "start `codex` in this project and trust the continuum hooks in its hook review "
            "(again after any change to .codex/hooks.json)",
        )
    )
    return checks


def _gemini(project: Path, home: Path) -> list[Check]:
    path = home / ".gemini" / "trustedFolders.json"
    data = _load_json(path)
    trusted = False
    if isinstance(data, dict):
        real = os.path.realpath(project)
        for folder, level in data.items():
            # TRUST_FOLDER trusts the folder, TRUST_PARENT its parent (and so its
            # siblings); either covers the folders below.
            f = os.path.realpath(str(folder))
            root = f if level == "TRUST_FOLDER" else os.path.dirname(f)
            if level in ("TRUST_FOLDER", "TRUST_PARENT") and (
                real == root or real.startswith(root.rstrip(os.sep) + os.sep)
            ):
                trusted = True
    return [
        _check(
            "folder trusted",
            trusted,
            f"{path}: {project} is {'trusted' if trusted else 'not trusted'}"
            + (
                ""
                if trusted
                else ": headless Gemini refuses to start here (exit 55), and --skip-trust "
                "drops the project's hooks and MCP servers"
            ),
            "trust the folder in an interactive `gemini` session, or add "
            f'"{project}": "TRUST_FOLDER" to {path}',
        )
    ]


def _claude(project: Path, home: Path) -> list[Check]:
    off = [
        str(p)
        for p in (
            project / ".claude" / "settings.json",
            project / ".claude" / "settings.local.json",
            home / ".claude" / "settings.json",
        )
        if isinstance(d := _load_json(p), dict) and d.get("disableAllHooks") is True
    ]
    return [
        _check(
            "hooks enabled",
            not off,
            "no settings file disables hooks"
            if not off
            else f"disableAllHooks is true in {', '.join(off)}: Claude Code runs no hook",
            "remove disableAllHooks from those files",
        )
    ]


def _kilo() -> list[Check]:
    return [
        _check(
            "plugins loaded",
            True,
            "Kilo loads the plugin at every session start; `kilo run --pure` skips plugins, "
            "and then nothing is gated",
        )
    ]


def diagnose(client: str, project: Path, home: Path | None = None) -> dict[str, Any]:
    """The report: ``{"client", "project", "will_run", "checks": [...]}``."""
    home = home if home is not None else Path(os.path.expanduser("~"))
    checks, config = _hooks_file(client, project)
    checks += _registry(project)
    if client == "codex":
        checks += _codex(project, config, home)
    elif client == "gemini":
        checks += _gemini(project, home)
    elif client == "claude-code":
        checks += _claude(project, home)
    else:
        checks += _kilo()
    return {
        "client": client,
        "project": str(project),
        "will_run": all(c["ok"] for c in checks),
        "checks": checks,
    }


def report_lines(report: dict[str, Any]) -> list[str]:
    verdict = (
        "will run continuum's hooks here"
        if report["will_run"]
        else "will NOT run continuum's hooks here as they are"
    )
    lines = [f"{report['client']} {verdict} ({report['project']}):"]
    for c in report["checks"]:
        lines.append(f"  {'ok  ' if c['ok'] else 'FAIL'} {c['name']}: {c['detail']}")
        if c["fix"]:
            lines.append(f"       fix: {c['fix']}")
    return lines

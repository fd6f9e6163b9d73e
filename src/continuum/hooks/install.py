"""Putting continuum's hooks into a coding host's project settings, and taking them out.

Each host reads hooks from a JSON file in the project (see references/hooks.md)::

    {"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [{"type": "command",
                                                          "command": "...", "timeout": 60}]}]}}

Claude Code (``.claude/settings.json``) and Codex (``.codex/hooks.json``) take the
timeout in seconds; Gemini CLI (``.gemini/settings.json``) takes milliseconds and names
each hook. Tool events get the matcher ``"*"`` (the gate is cheap for a call no rule
matches); lifecycle events get none, because Gemini compares a lifecycle matcher as an
exact string.

Merging: our entries are recognised by their command (``continuum ... hook KIND``), so
installing again, with another run or store, replaces them instead of adding more. Every
other hook, group, event and setting is kept, in its order. The functions that change a
configuration are pure; only ``read_config`` and ``write_config`` touch the disk.

Standard library and the error tree only.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from continuum.errors import UsageError
from continuum.hooks.hosts import KINDS
from continuum.untrusted import as_typed, is_unsafe, quoted

HOSTS = ("claude-code", "gemini", "codex", "kilo")
TOOL_KINDS = ("pre-tool", "post-tool", "post-tool-failure")

SETTINGS_PATHS: dict[str, Path] = {
    "claude-code": Path(".claude") / "settings.json",
    "gemini": Path(".gemini") / "settings.json",
    "codex": Path(".codex") / "hooks.json",
    # Kilo Code has no hook settings: a plugin of ours, which Kilo loads from .kilo/plugin/.
    "kilo": Path(".kilo") / "plugin" / "continuum.js",
}

# The host's event -> our hook kind, in the order the events are written.
EVENTS: dict[str, dict[str, str]] = {
    "claude-code": {
        "PreToolUse": "pre-tool",
        "PostToolUse": "post-tool",
        "PostToolUseFailure": "post-tool-failure",
        "SessionStart": "session-start",
        "PreCompact": "pre-compact",
        # A subagent is not briefed by SessionStart (it fires once, for the main loop).
        "SubagentStart": "subagent-start",
        "SubagentStop": "subagent-stop",
    },
    "gemini": {
        "BeforeTool": "pre-tool",
        "AfterTool": "post-tool",
        "SessionStart": "session-start",
        "PreCompress": "pre-compact",
    },
    "codex": {
        "PreToolUse": "pre-tool",
        "PostToolUse": "post-tool",
        "SessionStart": "session-start",
        "PreCompact": "pre-compact",
        "SubagentStart": "subagent-start",
        "SubagentStop": "subagent-stop",
    },
    # The plugin's hooks (kilo_plugin.js); post-tool-failure comes from the same two.
    "kilo": {
        "tool.execute.before": "pre-tool",
        "tool.execute.after": "post-tool",
        "experimental.chat.system.transform": "session-start",
    },
}
PLUGIN_HOSTS = ("kilo",)  # hosts whose "settings" file is a plugin of ours, whole
PLUGIN_MARK = "continuum's gate for Kilo Code"  # the first line of ours

TIMEOUT_SECONDS = 60
RUN_ID_LIMIT = 200

# Ours: the console script (any directory, any quoting) or `-m continuum`, optionally
# with global options (and their values), then `hook KIND`. Matched against the
# command's words, unquoted, one per line, so neither quoting nor a space in a path
# matters.
_OURS = re.compile(
    r"(?:^|\n)(?:[^\n]*[/\\])?continuum(?:\.exe)?"
    r"(?:\n-[^\n]*(?:\n(?!-)[^\n]*)?)*"
    r"\nhook\n(?:" + "|".join(re.escape(k) for k in KINDS) + r")(?:\n|$)"
)


def _check_host(host: str) -> None:
    if host not in HOSTS:
        raise UsageError(
            f"unknown host {quoted(host, limit=40)}",
            code="usage.bad_host",
            hint=f"use one of {', '.join(HOSTS)}",
        )


def hook_command(exe: list[str], kind: str, host: str, db: str, run: str, project: str) -> str:
    """The shell command line a host runs for ``kind``: every word shell-quoted.

    Hosts run it through ``sh -c`` with their own PATH and working directory, so it starts
    with an absolute path and names the store and project absolutely.
    """
    _check_host(host)
    if kind not in KINDS:
        raise ValueError(f"unknown hook kind {kind!r}")
    if not exe or not os.path.isabs(exe[0]):
        raise ValueError(f"the hook command must start with an absolute path, not {exe!r}")
    words = [*exe, "hook", kind, "--host", host, "--db", db, "--run", run, "--project", project]
    return " ".join(shlex.quote(w) for w in words)


def plugin_text(exe: list[str], db: str, run: str, project: str) -> str:
    """Kilo's plugin (``kilo_plugin.js``) with this installation's settings written in:
    absolute paths, like the other hosts' hook commands."""
    from importlib.resources import files

    if not exe or not os.path.isabs(exe[0]):
        raise ValueError(f"the hook command must start with an absolute path, not {exe!r}")
    template = (files("continuum.hooks") / "kilo_plugin.js").read_text(encoding="utf-8")
    settings = {
        "command": exe,
        "db": db,
        "run": run,
        "project": project,
        "timeoutMs": TIMEOUT_SECONDS * 1000,
    }
    block = "/*continuum-settings*/ {} /*end-continuum-settings*/"
    if block not in template:
        raise ValueError("kilo_plugin.js has lost its settings block")
    filled = f"/*continuum-settings*/ {json.dumps(settings)} /*end-continuum-settings*/"
    return template.replace(block, filled)


def is_our_plugin(text: str) -> bool:
    return PLUGIN_MARK in text.split("\n", 1)[0]


def installed_command(script: str, module: str) -> list[str]:
    """The absolute command that runs this installation's ``script`` (the console script
    beside this interpreter, else the one on PATH, else ``python -m module``)."""
    python = Path(sys.executable).absolute()  # not resolved: a venv's python is a symlink
    beside = python.parent / script
    if beside.exists():
        return [str(beside)]
    found = shutil.which(script)
    if found:
        return [str(Path(found).absolute())]
    return [str(python), "-m", module]


def continuum_command() -> list[str]:
    """The absolute command that runs this installation's ``continuum``."""
    return installed_command("continuum", "continuum")


def default_run_id(project: Path) -> str:
    """A run id made from the project directory's name ("my project" -> "my-project")."""
    name = re.sub(r"\s+", "-", project.name)
    name = "".join(c for c in name if not is_unsafe(c))[:RUN_ID_LIMIT]
    return name or "project"


def is_ours(command: object) -> bool:
    """Whether a hook command runs ``continuum hook KIND`` (any path, any quoting)."""
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes: not ours, but still look at the raw text
        words = command.split()
    return bool(_OURS.search("\n".join(words)))


def _is_our_hook(hook: object) -> bool:
    return isinstance(hook, dict) and is_ours(hook.get("command"))


def _without_ours(groups: list[Any]) -> list[Any]:
    """The event's groups minus our hooks; a group left with no hooks is dropped."""
    out = []
    for group in groups:
        hooks = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(hooks, list) or not any(_is_our_hook(h) for h in hooks):
            out.append(group)  # foreign (or not a group at all): kept exactly
            continue
        kept = [h for h in hooks if not _is_our_hook(h)]
        if kept:
            out.append({**group, "hooks": kept})
    return out


def count_ours(config: Mapping[str, Any]) -> int:
    """How many of our hook entries ``config`` holds, over every event."""
    hooks = config.get("hooks")
    if not isinstance(hooks, dict):
        return 0
    return sum(
        1
        for groups in hooks.values()
        if isinstance(groups, list)
        for group in groups
        if isinstance(group, dict) and isinstance(group.get("hooks"), list)
        for hook in group["hooks"]
        if _is_our_hook(hook)
    )


def _entry(host: str, kind: str, command: str) -> dict[str, Any]:
    hook: dict[str, Any] = {"type": "command", "command": command}
    if host == "gemini":
        hook = {"name": f"continuum-{kind}", **hook, "timeout": TIMEOUT_SECONDS * 1000}
    else:
        hook["timeout"] = TIMEOUT_SECONDS
    group: dict[str, Any] = {"matcher": "*"} if kind in TOOL_KINDS else {}
    group["hooks"] = [hook]
    return group


def installed(config: Mapping[str, Any], host: str, commands: Mapping[str, str]) -> dict[str, Any]:
    """``config`` with our hooks for ``host``: ``commands`` maps each kind to its command.

    Every entry of ours is removed first, from every event, then one group is appended to
    each of the host's events. An event of ours keeps its place (so installing twice gives
    the same file); another event that held only ours is dropped.
    """
    _check_host(host)
    events = EVENTS[host]
    hooks: dict[str, Any] = {}
    for event, groups in dict(config.get("hooks") or {}).items():
        if not isinstance(groups, list):
            hooks[event] = groups
            continue
        kept = _without_ours(groups)
        if kept or event in events or not groups:  # an event already empty is not ours to drop
            hooks[event] = kept
    for event, kind in events.items():
        hooks[event] = [*hooks.get(event, []), _entry(host, kind, commands[kind])]
    return {**config, "hooks": hooks}


def removed(config: Mapping[str, Any], host: str) -> dict[str, Any]:
    """``config`` without any hook of ours; emptied events and an emptied ``hooks`` go too."""
    _check_host(host)
    if not isinstance(config.get("hooks"), dict):
        return dict(config)
    hooks: dict[str, Any] = {}
    for event, groups in config["hooks"].items():
        if not isinstance(groups, list):
            hooks[event] = groups
            continue
        kept = _without_ours(groups)
        if kept or not groups:  # an event that was already empty is not ours to drop
            hooks[event] = kept
    out = dict(config)
    if hooks or not config["hooks"]:
        out["hooks"] = hooks
    else:
        del out["hooks"]
    return out


def _bad_config(path: Path, problem: str, hint: str = "") -> UsageError:
    return UsageError(
        f"{as_typed(str(path))} {problem}; it was left untouched",
        code="usage.bad_config_file",
        path=str(path),
        hint=hint or "fix or move the file, or use --print and merge by hand",
    )


def _has_comment(text: str) -> bool:
    """Whether JSON-with-comments text has a // or /* comment outside its strings."""
    in_string = escaped = False
    for i, c in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c == "/" and text[i + 1 : i + 2] in ("/", "*"):
            return True
    return False


def read_config(path: Path) -> dict[str, Any]:
    """The settings in ``path`` ({} when absent); a file we cannot merge into is refused."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise _bad_config(path, f"cannot be read ({e.strerror or type(e).__name__})") from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _bad_config(path, f"is not UTF-8 (byte {e.start})") from e
    if not text.strip():
        return {}
    try:
        config = json.loads(text)
    except ValueError as e:
        if _has_comment(text):
            raise _bad_config(
                path,
                "has comments, which `continuum hooks` does not support yet",
                hint="use --print to see what to merge by hand, or remove the comments",
            ) from e
        raise _bad_config(path, f"is not valid JSON ({e})") from e
    if not isinstance(config, dict):
        raise _bad_config(path, f"holds a JSON {type(config).__name__}, not an object")
    hooks = config.get("hooks", {})
    if not isinstance(hooks, dict):
        raise _bad_config(path, f'has "hooks" as a JSON {type(hooks).__name__}, not an object')
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            raise _bad_config(
                path,
                f'has "hooks".{quoted(event, limit=60)} as a JSON '
                f"{type(groups).__name__}, not a list of groups",
            )
    return config


def config_text(config: Mapping[str, Any]) -> str:
    """The file's text: 2-space indent, keys in their order, a trailing newline."""
    return json.dumps(config, indent=2, ensure_ascii=False) + "\n"


def write_config(path: Path, config: Mapping[str, Any], *, new_mode: int = 0o644) -> None:
    """Write ``config`` as JSON to ``path`` atomically (``write_text``)."""
    write_text(path, config_text(config), new_mode=new_mode)


def write_text(path: Path, text: str, *, new_mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` atomically (a reader sees the old file or the new one).

    Parent directories are created; an existing file keeps its permission bits, a new one
    gets ``new_mode``; a symlink is followed, so the file it points at is replaced.
    """
    target = path.resolve() if path.is_symlink() else path
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            mode = stat.S_IMODE(target.stat().st_mode)
        except FileNotFoundError:
            mode = new_mode
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:
        raise UsageError(
            f"could not write {as_typed(str(path))} ({e.strerror or e})",
            code="usage.cannot_write_config",
            path=str(path),
            hint="check the directory's permissions, or use --print and merge by hand",
        ) from e

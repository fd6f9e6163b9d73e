"""What the gate guards besides effects: continuum's own configuration.

An agent under auto-approval can switch its protection off with an ordinary tool call:
on the real hosts (tests/hosts/) a Kilo agent rewrote continuum's allowlist in the host
config with its write tool and with ``sed``, and on every host one Write that empties
``.continuum/effects.toml`` leaves nothing gated. So the gate refuses, for every tool
call (registered or not), one that would write or delete:

- the project's ``.continuum/`` (the effect registry, approval rules, notification and
  policy files, the registry acceptance);
- the hosts' hook and MCP configuration in the project (``.claude/settings*.json``,
  ``.gemini/settings.json``, ``.codex/``, ``.kilo/``, ``.kilocode/``, ``.mcp.json``,
  ``kilo.json[c]``, ``opencode.json[c]``) and the user's (``~/.claude/settings.json``,
  ``~/.gemini/settings.json`` and ``trustedFolders.json``, ``~/.codex/``,
  ``~/.config/kilo/``);
- the store file (and its ``-wal``/``-shm``).

A file tool is judged by the paths it writes (symlinks resolved); a shell command by
the text it holds: one that names any of these, or runs one of continuum's commands that
only a person may run (``confirm``, ``reconcile``, ``decide``, ``hooks``, ``mcp``, ...),
is refused with what the person must do instead. Reading the text of a command is not
reading what it does: a command built in a variable escapes this (references/hooks.md
says so); what it stops is an agent changing the gate's rules in plain sight.

And the registry itself must be one a person accepted: ``continuum hooks accept``
records its digest (``ACCEPTED``, beside the registry, and a ``registry_accepted`` event
in the run); a registry that is missing, empty or changed since then makes the gate
refuse every call that could be an effect (everything but the hosts' read-only tools)
until a person accepts it.

Standard library only: this runs on every tool call.
"""

from __future__ import annotations

import os

from continuum.digest import sha256_hex
from continuum.json_text import loads as json_loads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from continuum.hooks.registry import Registry
    from continuum.rule_tables import Entry

ACCEPTED = os.path.join(".continuum", "accepted-registry.json")

# In the project: directories (everything under them) and files.
PROJECT_DIRS = (".continuum", ".codex", ".kilo", ".kilocode")
PROJECT_FILES = (
    os.path.join(".claude", "settings.json"),
    os.path.join(".claude", "settings.local.json"),
    os.path.join(".gemini", "settings.json"),
    ".mcp.json",
    "kilo.json",
    "kilo.jsonc",
    "opencode.json",
    "opencode.jsonc",
)
# In the user's home.
HOME_DIRS = (".codex", os.path.join(".config", "kilo"))
HOME_FILES = (
    os.path.join(".claude", "settings.json"),
    os.path.join(".gemini", "settings.json"),
    os.path.join(".gemini", "trustedFolders.json"),
)
# What a shell command must not name (plain text, as written in a command line).
NAMES = (
    ".continuum",
    ".claude/settings",
    ".gemini/settings",
    "trustedFolders.json",
    ".codex",
    ".kilo",
    ".mcp.json",
    "kilo.json",
    "opencode.json",
)
PERSON_COMMANDS = (
    "confirm",
    "reconcile",
    "decide",
    "compensate",
    "hooks",
    "mcp",
    "abort",
    "finish",
    "prune",
    "archive",
    "restore",
    "import",
    "migrate",
)
# Compiled on first use: only a command that holds the word "continuum" can match it.
_CONTINUUM_COMMAND = (
    r"(?:^|[\s;&|(`])(?:\S*/)?(?:continuum(?:\.exe)?|-m\s+continuum)"
    r"(?:\s+-\S+(?:\s+[^-\s]\S*)?)*\s+(" + "|".join(PERSON_COMMANDS) + r")\b"
)
# Compiled on first use (only a patch tool needs it).
_PATCH_PATHS = r"(?m)^\*\*\* (?:Add|Update|Delete) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$"


def _norm(path: str, base: str) -> str:
    full = path if os.path.isabs(path) else os.path.join(base, path)
    return os.path.realpath(os.path.normpath(full))


def _store_path(db: str) -> str | None:
    if "://" in db and not db.startswith("sqlite:"):
        return None  # a server store: no file to guard
    return db[len("sqlite://") :] if db.startswith("sqlite://") else db


def guarded_paths(project: str, db: str, home: str | None = None) -> tuple[list[str], list[str]]:
    """(directories, files) the gate guards, absolute and resolved."""
    proj = os.path.realpath(project)
    dirs = [os.path.join(proj, d) for d in PROJECT_DIRS]
    files = [os.path.join(proj, f) for f in PROJECT_FILES]
    home = home if home is not None else os.path.expanduser("~")
    if home and home != "~":
        real_home = os.path.realpath(home)
        dirs += [os.path.join(real_home, d) for d in HOME_DIRS]
        files += [os.path.join(real_home, f) for f in HOME_FILES]
    store = _store_path(db)
    if store:
        real = _norm(store, project)
        files += [real, real + "-wal", real + "-shm", real + "-journal"]
    return dirs, files


def _written_paths(tool_name: str, tool_input: Mapping[str, Any]) -> list[str]:
    from continuum.hooks.hosts import FILE_TOOLS

    field = FILE_TOOLS.get(tool_name)
    value = tool_input.get(field) if field else None
    if not isinstance(value, str):
        return []
    if tool_name == "apply_patch":  # Codex: every file the patch adds, changes, moves or deletes
        import re

        return [m.group(1) or m.group(2) for m in re.finditer(_PATCH_PATHS, value)]
    return [value]


def _command(tool_name: str, tool_input: Mapping[str, Any]) -> str | None:
    from continuum.hooks.hosts import SHELL_TOOLS

    command = tool_input.get("command")
    if isinstance(command, list):  # some shells take argv
        command = " ".join(str(c) for c in command)
    if not isinstance(command, str):
        return None
    return command if tool_name in SHELL_TOOLS or tool_name == "background_process" else None


def guarded_touch(
    tool_name: str, tool_input: Mapping[str, Any], cwd: str, project: str, db: str
) -> str | None:
    """What guarded thing this call would write or name, for the refusal; None if none."""
    dirs, files = guarded_paths(project, db)
    for path in _written_paths(tool_name, tool_input):
        real = _norm(path, cwd)
        if real in files or any(real == d or real.startswith(d + os.sep) for d in dirs):
            return real
    command = _command(tool_name, tool_input)
    if command is None:
        return None
    if "continuum" in command:  # the pattern's every match holds it (no `re` otherwise)
        import re

        m = re.search(_CONTINUUM_COMMAND, command)
        if m:
            return f"`continuum {m.group(1)}`"
    store = _store_path(db)
    names = [*NAMES, os.path.basename(store)] if store else list(NAMES)
    for name in names:
        if name and name in command:
            return name
    return None


def registry_digest(project: str) -> str | None:
    """sha256 of the registry file's bytes; None when it does not exist."""
    from continuum.hooks.registry import REGISTRY_PATH

    try:
        with open(os.path.join(project, REGISTRY_PATH), "rb") as f:
            return "sha256:" + sha256_hex(f.read())
    except FileNotFoundError:
        return None


def _acceptance(project: str) -> dict[str, Any] | None:
    """What ``ACCEPTED`` records, or None when it is missing or unreadable."""
    try:
        with open(os.path.join(project, ACCEPTED), "rb") as f:
            data = json_loads(f.read().decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(data, dict) or "registry_sha256" not in data:
        return None
    digest = data["registry_sha256"]
    return data if digest is None or isinstance(digest, str) else None


def accepted(project: str) -> tuple[bool, str | None]:
    """(whether a person accepted a registry here, the digest accepted: None = no file)."""
    data = _acceptance(project)
    return (False, None) if data is None else (True, data["registry_sha256"])


def is_accepted(project: str) -> bool:
    """Whether the registry as it is now is the one a person accepted (a missing
    registry counts only if a person accepted it missing)."""
    known, digest = accepted(project)
    return known and digest == registry_digest(project)


def accepted_registry(project: str) -> tuple[Registry, bool]:
    """The project's registry, and whether it is the one a person accepted, each file read
    once. A registry that is the accepted one is compiled from the ``[[effect]]`` tables
    its acceptance kept (no TOML parsed on a tool call); any other is parsed from its text
    (``UsageError`` when it is malformed or unreadable)."""
    from continuum.hooks.registry import (
        REGISTRY_PATH,
        Registry,
        parse_registry,
        read_registry,
        registry_of,
        registry_text,
    )

    path = os.path.join(project, REGISTRY_PATH)
    raw = read_registry(path)
    digest = None if raw is None else "sha256:" + sha256_hex(raw)
    data = _acceptance(project)
    current = data is not None and data["registry_sha256"] == digest
    if raw is None:
        return Registry(path=None), current
    kept = _kept_entries(data) if current and data is not None else None
    if kept is not None:
        return registry_of(path, kept, checked=True), True
    return parse_registry(registry_text(raw, path), path), current


def _kept_entries(data: Mapping[str, Any]) -> list[Entry] | None:
    """The tables an acceptance kept, or None (an older acceptance, or a damaged one: the
    registry's text is parsed instead)."""
    from continuum.rule_tables import Entry

    kept = data.get("effects")
    if not isinstance(kept, list):
        return None
    out = []
    for item in kept:
        if not (
            isinstance(item, list)
            and len(item) == 4
            and type(item[0]) is int
            and type(item[1]) is int
            and isinstance(item[2], str)
            and isinstance(item[3], dict)
        ):
            return None
        out.append(Entry(*item))
    return out


def accepted_text(
    digest: str | None, rules: int, when: str, entries: Sequence[Entry] | None = None
) -> str:
    """What ``ACCEPTED`` holds: the registry's digest and, when they can be written as
    JSON, its ``[[effect]]`` tables as parsed from those bytes (the gate then compiles
    them without parsing TOML on each tool call)."""
    import json

    data: dict[str, Any] = {
        "registry_sha256": digest,
        "rules": rules,
        "accepted_at": when,
        "by": "continuum hooks accept (a person)",
    }
    if entries is not None:
        effects = [[e.number, e.line, e.where, e.table] for e in entries]
        try:  # a TOML date or time has no JSON form: then nothing is kept
            if json.loads(json.dumps(effects)) == effects:
                data["effects"] = effects
        except (TypeError, ValueError):
            pass
    return json.dumps(data, indent=2) + "\n"


def registry_snapshot(project: str) -> tuple[str | None, list[Entry] | None]:
    """The registry file's digest and its tables, from one read of its bytes (what an
    acceptance records); ``UsageError`` when it is malformed."""
    from continuum.hooks.registry import (
        REGISTRY_PATH,
        read_registry,
        registry_entries,
        registry_text,
    )

    path = os.path.join(project, REGISTRY_PATH)
    raw = read_registry(path)
    if raw is None:
        return None, None
    digest = "sha256:" + sha256_hex(raw)
    return digest, registry_entries(registry_text(raw, path), path)

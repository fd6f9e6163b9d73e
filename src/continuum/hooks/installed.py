"""continuum's hooks as installed in a project, found the way the host finds them: for
`continuum hooks try`, the commands a host runs around one call of its shell tool.

Claude Code, Gemini CLI and Codex: the hook groups of the host's settings file on its
events around a shell call whose matcher selects the shell tool, keeping continuum's
commands (``install.is_ours``) and counting the others (a try does not run them). Kilo:
the settings block of continuum's plugin, turned into the argv the plugin spawns. Each
command keeps every word as installed except ``--run`` (the try's run) and, when asked,
``--db``.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from continuum.errors import ContinuumError, UsageError
from continuum.hooks.hosts import KINDS
from continuum.hooks.install import (
    HOSTS,
    PLUGIN_HOSTS,
    SETTINGS_PATHS,
    TIMEOUT_SECONDS,
    count_ours,
    is_our_plugin,
    is_ours,
    read_config,
)
from continuum.hooks.trial_host import CALL_EVENTS, SHELL_TOOL
from continuum.untrusted import quoted

_PLUGIN_SETTINGS = re.compile(r"/\*continuum-settings\*/ (.*?) /\*end-continuum-settings\*/", re.S)


@dataclass(frozen=True)
class Hook:
    """One installed hook command of ours, ready to run for a try."""

    event: str  # the host's event (Kilo: the plugin's hook)
    kind: str  # pre-tool, post-tool or post-tool-failure
    argv: list[str]  # what runs: ["sh", "-c", LINE], or the plugin's argv
    line: str  # the command line that runs (the installed one, --run pointed at the try's)
    installed: str  # the command line as installed
    timeout: float  # seconds
    db: str  # the store it records into
    installed_db: str  # the store as installed
    run: str  # the run as installed
    project: str | None


@dataclass
class Installed:
    """continuum's hooks for one host in a project: by role (pre, post, fail)."""

    path: Path
    hooks: dict[str, list[Hook]]
    foreign: int = 0  # hooks of others on the same events (not run by a try)
    notes: list[str] = field(default_factory=list)


def not_installed(host: str, project: Path, others: list[str]) -> UsageError:
    where = f" --dir {shlex.quote(str(project))}" if project != Path.cwd() else ""
    also = f" (they are installed here for {', '.join(others)})" if others else ""
    return UsageError(
        f"continuum's hooks are not installed for {host} in {quoted(str(project))}{also}; "
        "nothing was run or written",
        code="hooks.not_installed",
        hint=f"install them with `continuum hooks install --client {host}{where}`, then try again",
        client=host,
        project=str(project),
        installed_for=others,
    )


def installed_for(project: Path) -> list[str]:
    """The hosts whose settings in ``project`` hold continuum's hooks (Kilo: our plugin)."""
    out = []
    for host in HOSTS:
        path = project / SETTINGS_PATHS[host]
        try:
            if host in PLUGIN_HOSTS:
                ours = is_our_plugin(path.read_text(encoding="utf-8"))
            else:
                ours = path.exists() and count_ours(read_config(path)) > 0
        except (OSError, UnicodeDecodeError, ContinuumError):
            continue
        if ours:
            out.append(host)
    return out


def retarget(words: list[str], run: str, db: str | None) -> tuple[list[str], dict[str, str]]:
    """The words of ``continuum ... hook KIND --opt V ...`` with ``--run`` (and, given
    ``db``, ``--db``) replaced, and the options it carried."""
    start = next(
        (i for i in range(len(words) - 1) if words[i] == "hook" and words[i + 1] in KINDS), None
    )
    if start is None:
        raise ValueError("not a `continuum hook KIND` command")
    out, values = words[: start + 2], {"kind": words[start + 1]}
    rest = iter(words[start + 2 :])
    for word in rest:
        name, eq, value = word.partition("=")
        if not eq:
            name, value = word, next(rest, "")
        values[name.lstrip("-")] = value
        if name == "--run":
            value = run
        elif name == "--db" and db is not None:
            value = db
        out += [name, value]
    return out, values


def _matches(host: str, matcher: Any, tool: str) -> bool:
    """Whether a hook group's matcher selects ``tool`` (Gemini: a regex search; Claude Code
    and Codex: names separated by ``|``, else a regex)."""
    if matcher in (None, "", "*"):
        return True
    if not isinstance(matcher, str):
        return False
    try:
        if host != "gemini" and re.fullmatch(r"[A-Za-z0-9_|, -]*", matcher):
            return tool in [m.strip() for m in re.split(r"[|,]", matcher)]
        return re.search(matcher, tool) is not None
    except re.error:
        return False


def _settings_hooks(host: str, project: Path, run: str, db: str | None) -> Installed:
    path = project / SETTINGS_PATHS[host]
    config = read_config(path)  # a file we cannot read is refused, naming it
    tool = SHELL_TOOL[host]
    found = Installed(path, {})
    by_event: dict[str, list[Hook]] = {}
    for event in dict.fromkeys(CALL_EVENTS[host]):  # Gemini and Codex: one event after
        hooks = by_event[event] = []
        groups = config.get("hooks", {}).get(event, [])
        for group in groups if isinstance(groups, list) else []:
            if not isinstance(group, dict) or not _matches(host, group.get("matcher"), tool):
                continue
            for h in group.get("hooks") or []:
                if not isinstance(h, dict) or h.get("type") != "command":
                    continue
                if is_ours(h.get("command")):
                    hooks.append(_command_hook(host, event, h, run, db))
                else:
                    found.foreign += 1
    roles = ("pre", "post", "fail")
    found.hooks = {r: by_event[e] for r, e in zip(roles, CALL_EVENTS[host], strict=True)}
    return found


def _command_hook(host: str, event: str, entry: dict[str, Any], run: str, db: str | None) -> Hook:
    installed = str(entry["command"])
    try:
        words, values = retarget(shlex.split(installed), run, db)
    except ValueError as e:  # an entry of ours edited by hand past reading
        raise UsageError(
            f"cannot read continuum's {event} hook command ({e}): {quoted(installed, limit=300)}",
            code="usage.bad_config_file",
            hint=f"install the hooks again: `continuum hooks install --client {host}`",
        ) from e
    line = " ".join(shlex.quote(w) for w in words)
    raw = entry.get("timeout")
    seconds = float(raw) if isinstance(raw, int | float) and raw > 0 else float(TIMEOUT_SECONDS)
    if host == "gemini" and isinstance(raw, int | float) and raw > 0:
        seconds = raw / 1000  # Gemini CLI takes milliseconds
    return Hook(
        event=event,
        kind=values["kind"],
        argv=["sh", "-c", line],
        line=line,
        installed=installed,
        timeout=seconds,
        db=db if db is not None else values.get("db", ""),
        installed_db=values.get("db", ""),
        run=values.get("run", ""),
        project=values.get("project"),
    )


def _plugin_hooks(project: Path, run: str, db: str | None) -> Installed | None:
    path = project / SETTINGS_PATHS["kilo"]
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(
            f"cannot read {quoted(str(path))} ({e})",
            code="usage.bad_config_file",
            path=str(path),
            hint="install the plugin again: `continuum hooks install --client kilo`",
        ) from e
    m = _PLUGIN_SETTINGS.search(text)
    if not is_our_plugin(text) or m is None:
        return None
    try:
        settings = json.loads(m.group(1))
        command = [str(w) for w in settings["command"]]
        installed_db, installed_run = str(settings["db"]), str(settings["run"])
        plugin_project = str(settings["project"])
        timeout = float(settings.get("timeoutMs", TIMEOUT_SECONDS * 1000)) / 1000
    except (ValueError, KeyError, TypeError) as e:
        raise UsageError(
            f"{quoted(str(path))} has lost its settings block",
            code="usage.bad_config_file",
            path=str(path),
            hint="install the plugin again: `continuum hooks install --client kilo`",
        ) from e
    store = db if db is not None else installed_db

    def hook(event: str, kind: str) -> Hook:
        # Exactly the plugin's spawn: command[0] with these arguments, no shell.
        args = [*command[1:], "hook", kind, "--host", "kilo", "--db", store]
        args += ["--run", run, "--project", plugin_project]
        installed = [*command, "hook", kind, "--host", "kilo", "--db", installed_db]
        installed += ["--run", installed_run, "--project", plugin_project]
        return Hook(
            event=event,
            kind=kind,
            argv=[command[0], *args],
            line=" ".join(shlex.quote(w) for w in [command[0], *args]),
            installed=" ".join(shlex.quote(w) for w in installed),
            timeout=timeout,
            db=store,
            installed_db=installed_db,
            run=installed_run,
            project=plugin_project,
        )

    before, after = CALL_EVENTS["kilo"][0], CALL_EVENTS["kilo"][1]
    return Installed(
        path,
        {
            "pre": [hook(before, "pre-tool")],
            "post": [hook(after, "post-tool")],
            "fail": [hook(after, "post-tool-failure")],
        },
    )


def find_installed(host: str, project: Path, run: str, db: str | None) -> Installed:
    """continuum's hooks for ``host`` in ``project``; ``hooks.not_installed`` when there
    is no pre-tool hook of ours."""
    found = (
        _plugin_hooks(project, run, db)
        if host in PLUGIN_HOSTS
        else _settings_hooks(host, project, run, db)
    )
    if found is None or not found.hooks.get("pre"):
        raise not_installed(host, project, [h for h in installed_for(project) if h != host])
    for role, what in (("post", "a call that worked"), ("fail", "a call that failed")):
        if not found.hooks.get(role):
            found.notes.append(
                f"no continuum hook on {CALL_EVENTS[host][1 if role == 'post' else 2]}: the "
                f"outcome of {what} is never recorded (install the hooks again)"
            )
    return found

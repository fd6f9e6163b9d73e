"""The command line of a hook and its answers that need no store: ``continuum hook KIND
--host HOST --db URL --run RUN [--project DIR]``, the project it acts for, the denial
every host blocks on, and the pre-compaction stamp.

Standard library and the error tree only (every tool call loads this).
"""

from __future__ import annotations

import os
import sys

from continuum.errors import UsageError
from continuum.hooks.hosts import DENY_EXIT, HOSTS, KINDS

USAGE = f"""usage: continuum hook KIND --host HOST --db URL --run RUN [--project DIR]

Run by a coding host (see `continuum hooks install`), with the host's JSON event on stdin.
KIND:  {" | ".join(KINDS)}
HOST:  {" | ".join(HOSTS)}
  pre-tool           gate a tool call the effect registry names as a side effect: allow
                     (exit 0, silent) or deny (exit 2, reason on stderr)
  post-tool          record the outcome of a gated call, and files written, as evidence
  post-tool-failure  record a failed call (its outcome unknown unless it never started)
  session-start      brief the new session (verdict, unresolved actions, files); runs probes
  subagent-start     brief a subagent the host starts (the same briefing, no probes)
  subagent-stop      record that a subagent finished (a progress note)
  pre-compact        record a checkpoint before the host compacts its context, when the
                     run recorded something since its last one (at most once a minute)
--project defaults to the host's project directory (CLAUDE_PROJECT_DIR, GEMINI_PROJECT_DIR)
or the event's cwd; the effect registry is PROJECT/.continuum/effects.toml.
"""


class HookArgs:
    """The command line of one hook."""

    __slots__ = ("db", "host", "kind", "project", "run")

    def __init__(self, kind: str, host: str, db: str, run: str, project: str | None = None) -> None:
        self.kind, self.host, self.db, self.run, self.project = kind, host, db, run, project


def parse_args(argv: list[str]) -> HookArgs:
    if not argv or argv[0] in ("-h", "--help"):
        raise SystemExit(USAGE)
    kind, rest = argv[0], argv[1:]
    if kind not in KINDS:
        raise UsageError(
            f"unknown hook {kind!r}", code="usage.bad_hook", hint=f"use one of {', '.join(KINDS)}"
        )
    values: dict[str, str] = {}
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg in ("-h", "--help"):
            raise SystemExit(USAGE)
        name, eq, value = arg.partition("=")
        if name not in ("--host", "--db", "--run", "--project"):
            raise UsageError(
                f"unknown option {arg!r}", code="usage.invalid", hint="see `continuum hook --help`"
            )
        if not eq:
            if i + 1 >= len(rest):
                raise UsageError(
                    f"{name} needs a value",
                    code="usage.invalid",
                    hint="see `continuum hook --help`",
                )
            value = rest[i + 1]
            i += 1
        values[name[2:]] = value
        i += 1
    missing = [n for n in ("host", "db", "run") if not values.get(n)]
    if missing:
        raise UsageError(
            f"missing {', '.join('--' + n for n in missing)}",
            code="usage.invalid",
            hint="the installed hook commands carry them: `continuum hooks install`",
        )
    if values["host"] not in HOSTS:
        raise UsageError(
            f"unknown host {values['host']!r}",
            code="usage.bad_host",
            hint=f"use --host {' or '.join(HOSTS)}",
        )
    return HookArgs(kind, values["host"], values["db"], values["run"], values.get("project"))


def project_dir(args: HookArgs, event_cwd: str | None) -> str:
    return (
        args.project
        or os.environ.get("CLAUDE_PROJECT_DIR")
        or os.environ.get("GEMINI_PROJECT_DIR")
        or event_cwd
        or os.getcwd()
    )


def deny(reason: str) -> int:
    """The answer that blocks on every host: exit 2, one reason on stderr, nothing on stdout.

    The line never ends with a period: Codex appends ". Command: X" to a hook's reason."""
    line = " ".join(reason.split()).rstrip(". ") or "continuum refused this call"
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    return DENY_EXIT


PRE_COMPACT_INTERVAL = 60.0  # seconds between two looks at whether to checkpoint


def pre_compact_stamp(project: str, run: str) -> str:
    """The file whose modification time says when pre-compact last looked at ``run``.
    Not a record of anything (the log is): deleting or forging it only changes whether a
    checkpoint is considered."""
    from continuum.digest import sha256_hex

    tag = sha256_hex(run.encode("utf-8", "replace"))[:16]
    return os.path.join(project, ".continuum", f".pre-compact-{tag}")


def _looked_lately(project: str, run: str) -> bool:
    import time

    try:
        age = time.time() - os.stat(pre_compact_stamp(project, run)).st_mtime
    except OSError:
        return False
    return 0 <= age < PRE_COMPACT_INTERVAL


def touch_pre_compact_stamp(project: str, run: str) -> None:
    path = pre_compact_stamp(project, run)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a"):
            pass
        os.utime(path)
    except OSError:
        pass  # without the stamp the next turn looks at the store again: slower, not wrong

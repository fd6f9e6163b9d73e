"""``continuum hook KIND --host HOST --db URL --run RUN [--project DIR]``: what hosts run.

Read the host's JSON event on stdin and answer in its format (``hosts.py``). The path a
tool call takes when no effect rule matches it reads stdin and the registry and exits 0:
it never opens the store or imports the runtime, so a hook on every tool call stays
close to a bare interpreter start.

Fail closed: for a pre-tool call that matches a rule, or that cannot be judged (stdin
unusable, registry malformed, an unexpected error), the answer is a denial with a
one-line reason (exit 2, reason on stderr), never an allow and never another exit code
(Claude Code lets the tool run on any other non-zero exit).
"""

from __future__ import annotations

import os
import sys

from continuum.errors import ContinuumError, UsageError
from continuum.hooks.hosts import DENY_EXIT, FILE_TOOLS, HOSTS, KINDS, READ_ONLY_TOOLS, parse_event
from continuum.hooks.registry import Registry, load_registry

MAX_STDIN_BYTES = 16 * 1024 * 1024  # a host event is small; a huge one is refused, not buffered

USAGE = f"""usage: continuum hook KIND --host HOST --db URL --run RUN [--project DIR]

Run by a coding host (see `continuum hooks install`), with the host's JSON event on stdin.
KIND:  {" | ".join(KINDS)}
HOST:  {" | ".join(HOSTS)}
  pre-tool           gate a tool call the effect registry names as a side effect: allow
                     (exit 0, silent) or deny (exit 2, reason on stderr)
  post-tool          record the outcome of a gated call, and files written, as evidence
  post-tool-failure  record a failed call (its outcome unknown unless it never started)
  session-start      brief the new session (verdict, unresolved actions, files); runs probes
  pre-compact        record a checkpoint before the host compacts its context
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


def _read_stdin() -> bytes:
    data = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
    if len(data) > MAX_STDIN_BYTES:
        raise UsageError(
            f"the hook event is larger than {MAX_STDIN_BYTES} bytes",
            code="hooks.bad_event",
            hint="hosts send small events; this is not one",
        )
    return data


def main(argv: list[str]) -> int:
    kind = argv[0] if argv else ""
    try:
        args = parse_args(argv)
        return _run(args)
    except SystemExit as e:  # --help
        sys.stdout.write(str(e.code) if isinstance(e.code, str) else "")
        return 0 if isinstance(e.code, str) else int(e.code or 0)
    except ContinuumError as e:
        if kind == "pre-tool":
            return deny(f"continuum refused this tool call: {e.message} [{e.code}]. {e.hint}")
        sys.stderr.write(f"continuum hook {kind}: {e.message} [{e.code}]\n")
        return 1
    except Exception as e:  # a bug: for the gate, that is a refusal, never an allow
        if kind == "pre-tool":
            return deny(
                f"continuum's gate failed ({type(e).__name__}: {e}); the call was refused "
                "to be safe. Tell the user; `continuum hooks remove` switches the gate off"
            )
        sys.stderr.write(f"continuum hook {kind} failed: {type(e).__name__}: {e}\n")
        return 1


def _run(args: HookArgs) -> int:
    event = parse_event(args.host, args.kind, _read_stdin())
    project = project_dir(args, event.cwd)
    if args.kind == "pre-tool":
        assert event.tool_name is not None
        try:
            registry = load_registry(project)
        except UsageError:
            if event.tool_name in READ_ONLY_TOOLS:
                return 0  # looking around stays possible while a person fixes the registry
            raise
        rule = registry.find(event.tool_name, event.tool_input)
        if rule is None:
            return 0  # not a registered effect: allowed, store untouched
        from continuum.hooks import gate

        return gate.pre_tool(args, event, project, rule)
    if args.kind in ("post-tool", "post-tool-failure"):
        assert event.tool_name is not None
        loaded = _registry_or_none(project)
        rule = loaded.find(event.tool_name, event.tool_input) if loaded else None
        if rule is None and event.tool_name not in FILE_TOOLS:
            return 0  # neither an effect nor a file write: nothing to record
        from continuum.hooks import gate

        return gate.post_tool(args, event, project, rule)
    if not _store_may_exist(args.db):
        return 0  # no store yet, so no run: nothing to brief, nothing to checkpoint
    from continuum.hooks import gate

    if args.kind == "session-start":
        return gate.session_start(args, event, project, _registry_or_none(project))
    return gate.pre_compact(args, event)


def _registry_or_none(project: str) -> Registry | None:
    """The registry, or None when it is malformed (post hooks then record what they can;
    the pre-tool gate is what refuses)."""
    try:
        return load_registry(project)
    except UsageError:
        return None


def _store_may_exist(url: str) -> bool:
    if "://" in url and not url.startswith("sqlite:"):
        return True  # a server store (PostgreSQL): only opening it can tell
    path = url[len("sqlite://") :] if url.startswith("sqlite://") else url
    return os.path.exists(path)

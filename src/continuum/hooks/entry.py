"""``continuum hook KIND --host HOST --db URL --run RUN [--project DIR]``: what hosts run.

Read the host's JSON event on stdin and answer in its format (``hosts.py``). The path a
tool call takes when no effect rule matches it reads stdin and the registry and exits 0:
it never opens the store or imports the runtime, so a hook on every tool call stays
close to a bare interpreter start. A registered call goes the plain path
(``effect_path.py``: the ledger without pydantic or the runtime) and only what that
path cannot answer alone goes through the whole facade (``gate.py``).

Fail closed: for a pre-tool call that matches a rule, or that cannot be judged (stdin
unusable, registry malformed, an unexpected error), the answer is a denial with a
one-line reason (exit 2, reason on stderr), never an allow and never another exit code
(Claude Code lets the tool run on any other non-zero exit). Before any rule is looked
at, a call that would change continuum's own configuration is refused, and so is every
call that could be an effect while the registry is not the one a person accepted
(``guard.py``).
"""

from __future__ import annotations

import os
import sys

from continuum.digest import use_builtin_sha256
from continuum.errors import ContinuumError, UsageError
from continuum.hooks.args import (
    HookArgs,
    _looked_lately,
    deny,
    parse_args,
    project_dir,
)
from continuum.hooks.guard import accepted_registry, guarded_touch
from continuum.hooks.hosts import FILE_TOOLS, READ_ONLY_TOOLS, parse_event
from continuum.hooks.registry import REGISTRY_PATH, Registry

MAX_STDIN_BYTES = 16 * 1024 * 1024  # a host event is small; a huge one is refused, not buffered


def _accept_command(project: str) -> str:
    import shlex

    return f"continuum hooks accept --dir {shlex.quote(project)}"


def guarded_refusal(tool: str, touched: str, project: str) -> str:
    from continuum.untrusted import quoted

    return (
        f"continuum refused this {tool} call: it would change or name continuum's own "
        f"configuration ({quoted(touched, limit=160)}), which only a person may change, so "
        "nothing was run. Do not try another way: ask the user to make the change "
        "themselves (an edited effect registry takes effect once they review it and run "
        f"`{_accept_command(project)}`)"
    )


def unaccepted_refusal(project: str, registry: Registry) -> str:
    path = os.path.join(project, REGISTRY_PATH)
    state = (
        "does not exist"
        if registry.path is None
        else "has no rules"
        if not registry.rules
        else "is not the one a person last accepted"
    )
    return (
        f"continuum refused this tool call: the effect registry {path} {state} (it changed, "
        "or was never accepted), so every tool call that could be a side effect is refused "
        "and nothing was run. Tell the user: they review the registry and run "
        f"`{_accept_command(project)}`"
    )


def _read_stdin() -> bytes:
    data = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
    if len(data) > MAX_STDIN_BYTES:
        raise UsageError(
            f"the hook event is larger than {MAX_STDIN_BYTES} bytes",
            code="hooks.bad_event",
            hint="hosts send small events; this is not one",
        )
    return data


def process_main(argv: list[str]) -> int:
    """``main`` as a hook process's entry point (``continuum hook``, ``python -m
    continuum.hooks``): such a process hashes a few records, for which loading OpenSSL
    costs more than it saves, so it hashes with the interpreter's own sha256 (digest.py;
    the same digests). Not in ``main``: a process that calls it in passing (``hooks try``,
    the tests) keeps its choice."""
    use_builtin_sha256()
    return main(argv)


def main(argv: list[str]) -> int:
    kind = argv[0] if argv else ""
    # A hook process is short-lived and continuum's own: pydantic's search of every
    # installed package for its plugins (tens of milliseconds) is skipped unless the user
    # asked for plugins in the environment.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
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
        touched = guarded_touch(
            event.tool_name, event.tool_input, event.cwd or project, project, args.db
        )
        if touched is not None:
            return deny(guarded_refusal(event.tool_name, touched, project))
        try:
            registry, current = accepted_registry(project)
        except UsageError:
            if event.tool_name in READ_ONLY_TOOLS:
                return 0  # looking around stays possible while a person fixes the registry
            raise
        if event.tool_name not in READ_ONLY_TOOLS and not current:
            return deny(unaccepted_refusal(project, registry))
        try:
            rule = registry.find(event.tool_name, event.tool_input)
        except UsageError:  # a kept pattern that does not compile (a damaged acceptance)
            if event.tool_name in READ_ONLY_TOOLS:
                return 0
            raise
        if rule is None:
            return 0  # not a registered effect: allowed, store untouched
        from continuum.hooks import effect_path

        answered = effect_path.pre_tool(args, event, project, rule)
        if answered is not None:
            return answered
        from continuum.hooks import gate

        return gate.pre_tool(args, event, project, rule)
    if args.kind in ("post-tool", "post-tool-failure"):
        assert event.tool_name is not None
        loaded = _registry_or_none(project)
        rule = loaded.find(event.tool_name, event.tool_input) if loaded else None
        if rule is None and event.tool_name not in FILE_TOOLS:
            return 0  # neither an effect nor a file write: nothing to record
        from continuum.hooks import effect_path

        answered = effect_path.post_tool(args, event, project, rule)
        if answered is not None and answered != effect_path.CHECKPOINT_DUE:
            return answered
        from continuum.hooks import gate

        if answered == effect_path.CHECKPOINT_DUE:  # settled; the run grew long since its
            return gate.checkpoint_grown_run(args, event, project)  # last checkpoint
        return gate.post_tool(args, event, project, rule)
    if args.kind == "pre-compact" and _looked_lately(project, args.run):
        return 0  # a pre-compaction checkpoint was considered moments ago
    if not _store_may_exist(args.db):
        return 0  # no store yet, so no run: nothing to brief, nothing to checkpoint
    from continuum.hooks import gate

    if args.kind == "session-start":
        return gate.session_start(args, event, project, _registry_or_none(project))
    if args.kind == "subagent-start":
        return gate.subagent_start(args, event, project, _registry_or_none(project))
    if args.kind == "subagent-stop":
        return gate.subagent_stop(args, event)
    return gate.pre_compact(args, event, project)


def _registry_or_none(project: str) -> Registry | None:
    """The registry, or None when it is malformed (post hooks then record what they can;
    the pre-tool gate is what refuses)."""
    try:
        return accepted_registry(project)[0]
    except UsageError:
        return None


def _store_may_exist(url: str) -> bool:
    if "://" in url and not url.startswith("sqlite:"):
        return True  # a server store (PostgreSQL): only opening it can tell
    path = url[len("sqlite://") :] if url.startswith("sqlite://") else url
    return os.path.exists(path)

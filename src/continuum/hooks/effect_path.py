"""The hooks' effect path on plain data: a registered call intercepted before it runs
(pre-tool) and settled after (post-tool), through the same ledger as ``gate.py`` but with
no model built, so pydantic and the runtime are never loaded and a gated call costs an
interpreter start, the store and its commits.

It asks what ``Continuum.intercept`` asks first (the run's holds and budgets, read from
the latest valid checkpoint and the events after it as plain data) and then calls the
ledger's plain forms (``intercept_plain``, ``complete_plain``, ``fail_plain``), so what
it writes is what the full path writes. It answers only the common calls alone: the
run (and a subagent's child run) exists, the store is a SQLite file, telemetry is off,
and post-tool settles an action its own pre-tool started. Anything else it hands to
``gate.py`` (returns None) before writing anything. A refusal is worded by
``advice.refusal`` as in the full path (the models load then: a refused call is rare).

Also here, shared with ``gate.py``: who performs a gated call, the values a rule's
templates see, what the ledger keeps of a call, and the evidence a settled call leaves.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from continuum.digest import sha256_hex
from continuum.errors import ActionOwnedError, NotFoundError, UsageError
from continuum.eventlog.events import EventType
from continuum.hooks.args import HookArgs, deny
from continuum.hooks.hosts import SHELL_TOOLS, HookEvent, Outcome, file_paths, shell_write_targets
from continuum.hooks.registry import BUILTINS, Rule, render_key
from continuum.types import ActionStatus, Origin

if TYPE_CHECKING:
    from continuum.ledger.budget import RunBudget
    from continuum.ledger.core import ActionLedger
    from continuum.store.base import Storage

WAIT_MS = 10_000  # a hook waits at most this long for another writer, then refuses
WAIT_ENV = "CONTINUUM_HOOK_WAIT_MS"  # overrides WAIT_MS (milliseconds)
MAX_INPUT_CHARS = 32_768  # larger tool input is kept as a digest
# Each pre-tool hook is a new process that reads the run's state once (whether a changed
# dependency holds new effects): from the latest checkpoint and the events after it. A run
# that grew past this many events since its last checkpoint is checkpointed, by the
# post-tool hook that found it so and by a session start, so that read stays short however
# long a session goes on.
CHECKPOINT_AFTER_EVENTS = 200
CHECKPOINT_DUE = -1  # post_tool's answer: settled, and the run is due a checkpoint (rare:
# once in CHECKPOINT_AFTER_EVENTS events), which the full path seals
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "busybox", "login"})


# -- who performs a gated call ---------------------------------------------------------------


def _parent_of(pid: int) -> tuple[int, str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
        name = data[data.index("(") + 1 : data.rindex(")")]
        return int(data.rsplit(")", 1)[1].split()[1]), name
    except (OSError, ValueError, IndexError):
        return None


CALLER_PARENT: int | None = None  # in a resident gate's worker: the hook process's parent


def host_pid() -> int:
    """The host process: our parent, or the nearest ancestor that is not a shell the host
    ran us through (``sh -c``, ``bash -lc``). In a resident gate's worker, "our parent" is
    the parent of the hook process that handed the call over (``CALLER_PARENT``, read while
    that process waited for its answer)."""
    pid = os.getppid() if CALLER_PARENT is None else CALLER_PARENT
    for _ in range(4):
        found = _parent_of(pid)
        if found is None:
            return pid
        name = found[1]
        if name not in _SHELLS or found[0] <= 1:
            return pid
        pid = found[0]
    return pid


def host_owner(session_id: str | None) -> dict[str, Any]:
    from continuum.ledger.owners import host_name, process_start

    pid = host_pid()
    owner: dict[str, Any] = {"host": host_name(), "pid": pid, "start": process_start(pid)}
    if session_id:
        owner["session"] = session_id
    return owner


def wait_ms() -> int:
    text = os.environ.get(WAIT_ENV)
    if text is None:
        return WAIT_MS
    if not text.isdigit():
        raise UsageError(
            f"{WAIT_ENV}={text!r} is not a number of milliseconds",
            code="usage.bad_env",
            hint=f"unset it, or e.g. {WAIT_ENV}=5000",
        )
    return int(text)


SUBAGENT_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-")


def subagent_run_id(run_id: str, agent_id: str) -> str:
    """The child run a host's subagent session maps to: ``RUN.agent.ID`` (an id the host
    gave in other characters, or longer than 80, by its digest)."""
    plain = 0 < len(agent_id) <= 80 and set(agent_id) <= SUBAGENT_ID_CHARS
    name = agent_id if plain else "h" + sha256_hex(agent_id.encode())[:20]
    return f"{run_id}.agent.{name}"


# -- values a rule's templates see, and what the ledger keeps of a call -----------------------


def git_head(cwd: str | None) -> str | None:
    import subprocess

    try:
        out = subprocess.run(
            ["git", "-C", cwd or ".", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def template_values(event: HookEvent, rule: Rule) -> dict[str, Any]:
    values: dict[str, Any] = dict(event.tool_input)
    values.update(
        cwd=event.cwd,
        tool_name=event.tool_name,
        session_id=event.session_id,
        agent_id=event.agent_id,
        agent_type=event.agent_type,
    )
    if "git_head" in rule.names():
        values["git_head"] = git_head(event.cwd)
    return values


def call_arguments(event: HookEvent, rule: Rule, values: Mapping[str, Any]) -> dict[str, Any]:
    """What the ledger keeps of the call: enough to explain it and to render its probe."""
    text = json.dumps(dict(event.tool_input), sort_keys=True, ensure_ascii=False)
    tool_input: Any = (
        dict(event.tool_input)
        if len(text) <= MAX_INPUT_CHARS
        else {"sha256": sha256_hex(text.encode()), "chars": len(text)}
    )
    return {
        "host": event.host,
        "tool": event.tool_name,
        "input": tool_input,
        "cwd": event.cwd,
        "session_id": event.session_id,
        "tool_use_id": event.tool_use_id,
        **({"agent": {"id": event.agent_id, "type": event.agent_type}} if event.agent_id else {}),
        "rule": {"index": rule.index, "action_type": rule.action_type},
        "values": {k: values.get(k) for k in BUILTINS if k in values and k not in event.tool_input},
    }


def intercept_options(event: HookEvent, rule: Rule, values: Mapping[str, Any]) -> dict[str, Any]:
    """How a gated call is intercepted, the same on both paths: what the ledger keeps of
    it, its key, replay contract and versions; an approval binds the call itself (tool,
    input, directory), not this session's ids."""
    arguments = call_arguments(event, rule, values)
    return {
        "arguments": arguments,
        "key": render_key(rule.key, values),
        "replay": rule.replay,
        "effect": rule.action_type,
        "approval_arguments": {k: arguments[k] for k in ("tool", "input", "cwd")},
        "versions": call_versions(event),
        "block_drift": rule.block_drift,
    }


def call_versions(event: HookEvent) -> dict[str, str] | None:
    """What the host says the call runs under: its model, where its payload names one
    (at most the length a version may have; a longer one is not pinned)."""
    model = event.model
    return {"model": model} if model and len(model) <= 200 and model.strip() else None


# -- the evidence a settled call leaves --------------------------------------------------------


def failure_text(outcome: Outcome) -> str:
    if outcome.unreported:
        return f"{outcome.error or 'the host did not report how it ended'}; outcome uncertain"
    if outcome.never_started:
        return "the tool never started: " + (outcome.error or "")
    if outcome.interrupted:
        return "interrupted; outcome uncertain"
    code = f"exit code {outcome.exit_code}" if outcome.exit_code is not None else "failed"
    return f"{code}; outcome uncertain" + (f" ({outcome.error})" if outcome.error else "")


def effect_evidence(
    store: Storage,
    run_id: str,
    event: HookEvent,
    rec: Mapping[str, Any],
    outcome: Outcome,
    note: str | None = None,
) -> None:
    """What the host says a registered call did (``rec``: the action's record)."""
    command = event.tool_input.get("command")
    payload: dict[str, Any] = {
        "evidence_id": f"effect:{event.tool_use_id or rec['action_id']}:{rec.get('attempt', 1)}",
        "text": f"{event.tool_name} for {rec['action_type']} {rec['action_key']}"
        + (f": exit code {outcome.exit_code}" if outcome.exit_code is not None else "")
        + (f" ({note})" if note else ""),
        "action_id": rec["action_id"],
        "tool": event.tool_name,
        "outcome": outcome.summary(),
    }
    if isinstance(command, str):
        payload["command"] = command[:2000]
    store.append_raw(run_id, EventType.EVIDENCE_ADDED, payload, source=Origin.EXTERNAL_AGENT)


def file_evidence(store: Storage, run_id: str, event: HookEvent, path_text: str) -> None:
    """The checksum of a file a tool wrote, as continuum read it after the call."""
    from pathlib import Path  # a file tool's call only

    from continuum.state.environment import file_checksum

    path = Path(path_text)
    if not path.is_absolute():
        path = Path(event.cwd or os.getcwd()) / path
    path = Path(os.path.normpath(path))
    sha = file_checksum(path)
    if sha is None:
        return  # nothing on disk to vouch for (a failed write, a deleted file)
    try:
        size = path.stat().st_size
    except OSError:
        return
    store.append_raw(
        run_id,
        EventType.EVIDENCE_ADDED,
        {
            "evidence_id": f"file:{path}",
            "text": f"written by {event.tool_name}",
            "path": str(path),
            "sha256": sha,
            "size": size,
            "tool": event.tool_name,
        },
        source=Origin.EXTERNAL_AGENT,
    )


def written_paths(event: HookEvent, rule: Rule | None) -> list[str]:
    """The files a call wrote that its post-tool hook vouches for: a file tool's, and
    what a registered shell command redirects into."""
    assert event.tool_name is not None
    paths = file_paths(event.tool_name, event.tool_input)
    command = event.tool_input.get("command")
    if rule is not None and event.tool_name in SHELL_TOOLS and isinstance(command, str):
        paths += shell_write_targets(command)
    return paths


# -- the plain path --------------------------------------------------------------------------


def _plain_store(args: HookArgs) -> bool:
    """Whether this path may serve the call: a SQLite store, telemetry off (the full path
    attaches its observer)."""
    from continuum.store import is_postgres_url
    from continuum.telemetry import wanted

    return not is_postgres_url(args.db) and not wanted(None)


def _open(args: HookArgs, project: str, event: HookEvent) -> tuple[Storage, ActionLedger]:
    from continuum.ledger.approval_rules import RuleFiles
    from continuum.ledger.core import ActionLedger
    from continuum.store import open_store

    store = open_store(args.db, create=True, wait_ms=wait_ms())
    try:
        ledger = ActionLedger(
            store,
            origin=Origin.EXTERNAL_AGENT,
            cwd=event.cwd or os.getcwd(),
            owner=host_owner(event.session_id),
            approvals=RuleFiles.around(project, store.url),
        )
    except BaseException:
        store.close()
        raise
    return store, ledger


def checkpoint_due(store: Storage, run_id: str) -> bool:
    """Whether run ``run_id`` grew past ``CHECKPOINT_AFTER_EVENTS`` since its last
    checkpoint (two reads: the run's head and its newest checkpoint's row)."""
    head = store.get_head(run_id).head_sequence
    latest = store.stored_checkpoints(run_id, limit=1)
    return head - (latest[0].event_sequence if latest else 0) > CHECKPOINT_AFTER_EVENTS


def _exists(store: Storage, run_id: str) -> bool:
    try:
        store.get_head(run_id)
    except NotFoundError:
        return False
    return True


def pre_tool(args: HookArgs, event: HookEvent, project: str, rule: Rule) -> int | None:
    """Intercept a registered call: 0 (allowed, nothing printed), a denial, or None when
    the full path (``gate.pre_tool``) must take it; nothing is written then."""
    if not _plain_store(args):
        return None
    from continuum.ledger.budget import MAX_FAMILY, budget_scopes
    from continuum.recovery.revalidation import held_in, hold_reason

    options = intercept_options(event, rule, template_values(event, rule))
    store, ledger = _open(args, project, event)
    try:
        if not _exists(store, args.run) or (
            event.agent_id and not _exists(store, subagent_run_id(args.run, event.agent_id))
        ):
            return None  # the full path starts them
        states: dict[str, dict[str, Any]] = {}

        def state_of(run_id: str) -> dict[str, Any]:
            if run_id not in states:
                from continuum.recovery.plain_state import state_without_actions

                store.get_head(run_id)  # NotFoundError for a run never started
                states[run_id] = state_without_actions(store, run_id).state
            return states[run_id]

        def run_budget(run_id: str) -> RunBudget:
            from continuum.ledger.budget import RunBudget

            state = state_of(run_id)
            return RunBudget(state.get("budget"), state.get("parent"), state.get("children") or [])

        # What Continuum.intercept asks first: a changed dependency holds new effects, and
        # (the facade also revalidates every ``every_steps`` of its steps, 25 by default; a
        # hook process is one step, so neither path revalidates here: session start does)
        # budgets (the run's, its ancestors' over their families) are judged in the write.
        hold = hold_reason(held_in(state_of(args.run)["dependencies"]))
        budget = budget_scopes(
            args.run,
            run_budget,
            lambda run_id: store.get_head(run_id).head_sequence,
            max_family=MAX_FAMILY,
        )
        answer = ledger.intercept_plain(
            args.run, rule.action_type, **options, hold=hold, budget=budget
        )
        if answer["proceed"]:
            return 0  # allowed: print nothing, so the user's own permission rules still apply
        row = store.get_action(args.run, answer["action_id"])
    finally:
        store.close()
    from continuum.hooks.advice import refusal
    from continuum.ledger.gate import InterceptResult
    from continuum.state.records import ActionRecord

    record = ActionRecord.model_validate(row.record) if row is not None else None
    return deny(
        refusal(args, project, rule, InterceptResult(**answer), record, session=event.session_id)
    )


def post_tool(args: HookArgs, event: HookEvent, project: str, rule: Rule | None) -> int | None:
    """Settle a registered call this session's pre-tool started (completed, or failed as
    the host reports it) and record its evidence, or record what an unregistered file
    write wrote (``rule`` None): 0; ``CHECKPOINT_DUE`` (recorded, and the run is due a
    checkpoint, which ``gate.checkpoint_grown_run`` seals); or None when the full path
    (``gate.post_tool``) must take it: nothing is written then."""
    assert event.outcome is not None and event.tool_name is not None
    if not _plain_store(args):
        return None
    from continuum.state.action_fields import is_plain_record

    store, ledger = _open(args, project, event)
    try:
        if not _exists(store, args.run):
            return None
        if rule is None:  # an unregistered file write: only what it wrote is recorded
            for path in written_paths(event, None):
                file_evidence(store, args.run, event, path)
        else:
            key = render_key(rule.key, template_values(event, rule))
            action_id = ledger.identity(args.run, rule.action_type, key).action_id
            row = store.get_action(args.run, action_id)
            if (
                row is None  # not recorded under this key: the full path looks further
                or not is_plain_record(row.record)
                or row.record["status"] != ActionStatus.STARTED
            ):
                return None
            outcome = event.outcome
            try:
                if outcome.failed:
                    rec = ledger.fail_plain(
                        args.run,
                        row.action_id,
                        error=failure_text(outcome),
                        certain=outcome.never_started,
                    )
                else:
                    rec = ledger.complete_plain(args.run, row.action_id, result=outcome.summary())
            except ActionOwnedError:
                return None  # owned by another live session: the full path says so
            effect_evidence(store, args.run, event, rec, outcome)
            for path in written_paths(event, rule):
                file_evidence(store, args.run, event, path)
        due = checkpoint_due(store, args.run)
    finally:
        store.close()
    return CHECKPOINT_DUE if due else 0

"""The hooks' work that needs the store, through the whole facade: gate, record, brief,
probe.

Loaded only for a call that matches an effect rule, a file write, or a session event
(``entry.py`` decides that with the standard library alone), and for a gated call only
when the plain path (``effect_path.py``, the same ledger without the models) hands it
over: a run to start, an action already recorded, a PostgreSQL store, telemetry.

Ownership: a gated call is intercepted on behalf of the *host* process (the hook's
parent, or the parent of the shell the host ran it through) and the host's session id.
While that process lives, its effect is ``in_progress`` to everyone else and its
post-tool hook (another process, same host and session) may complete it; once the host
is gone (killed, crashed, closed) the effect is ``unknown`` at once for the next
session, and never silently run again.

Everything written here has origin ``external_agent``: a hook reports what the host
says, and anyone with a shell can run a hook by hand. The one exception is a probe's
verdict, which is a check continuum runs itself (origin ``deterministic``).
"""

from __future__ import annotations

import os

from continuum.errors import ActionOwnedError, ContinuumError, NotFoundError, UsageError
from continuum.eventlog.events import EventType
from continuum.hooks.advice import refusal
from continuum.hooks.args import HookArgs, deny, touch_pre_compact_stamp
from continuum.hooks.effect_path import (
    call_arguments,
    call_versions,
    checkpoint_due,
    effect_evidence,
    failure_text,
    file_evidence,
    host_owner,
    intercept_options,
    subagent_run_id,
    template_values,
    wait_ms,
    written_paths,
)
from continuum.hooks.hosts import HookEvent, Outcome, session_context
from continuum.hooks.probes import ProbeResult, probe_action, rule_for
from continuum.hooks.registry import Registry, Rule, render_key
from continuum.ledger.approval_rules import ApprovalRules, RuleFiles
from continuum.runtime.facade import Continuum
from continuum.state.records import ActionRecord
from continuum.store import open_store
from continuum.types import ActionStatus, Origin, RunStatus
from continuum.untrusted import quoted, terminal_safe

MAX_PROBES = 5  # per session start: a briefing must not hang on a slow outside world

# -- opening the store -------------------------------------------------------------------


def _open(
    args: HookArgs, event: HookEvent, *, create: bool, project: str | None = None
) -> Continuum:
    store = open_store(args.db, create=create, wait_ms=wait_ms())
    # Approval rules: the project's .continuum/approvals.toml (and the one beside the store).
    approvals = RuleFiles.around(project, store.url) if project is not None else None
    return Continuum(
        store,
        origin=Origin.EXTERNAL_AGENT,
        cwd=event.cwd or os.getcwd(),
        owner=host_owner(event.session_id),
        approvals=approvals,
    )


def _ensure_run(rt: Continuum, run_id: str) -> None:
    """The project's run, created on first use."""
    try:
        rt.store.get_run(run_id)
    except NotFoundError:
        try:
            rt.start_run(run_id, None, metadata={"created_by": "continuum hooks"})
        except UsageError as e:
            if e.code != "usage.run_exists":  # a concurrent hook made it a moment ago
                raise


def _ensure_subagent_run(rt: Continuum, args: HookArgs, event: HookEvent) -> str | None:
    """Where the host says a call runs in a subagent (``agent_id``), the subagent's session
    as a child run of the project's run, started on first sight (SubagentStart, or its
    first gated call). Its effects stay in the parent's ledger, one identity space for the
    whole session family: a repeat in the main loop or another subagent is refused."""
    if not event.agent_id:
        return None
    child = subagent_run_id(args.run, event.agent_id)
    try:
        rt.store.get_run(child)
        return child
    except NotFoundError:
        pass
    try:
        rt.start_run(
            child,
            "a subagent session of the host",
            parent=args.run,
            metadata={
                "created_by": "continuum hooks",
                "host": args.host,
                "agent": {"id": event.agent_id, "type": event.agent_type},
            },
        )
    except UsageError as e:
        if e.code != "usage.run_exists":  # a concurrent hook made it a moment ago
            raise
    return child


# -- pre-tool ------------------------------------------------------------------------------


def pre_tool(args: HookArgs, event: HookEvent, project: str, rule: Rule) -> int:
    options = intercept_options(event, rule, template_values(event, rule))
    rt = _open(args, event, create=True, project=project)
    try:
        _ensure_run(rt, args.run)
        _ensure_subagent_run(rt, args, event)
        r = rt.intercept(args.run, rule.action_type, **options)
        if r.proceed:
            return 0  # allowed: print nothing, so the user's own permission rules still apply
        record = _record(rt, args.run, r.action_id)
    finally:
        rt.close()
    return deny(refusal(args, project, rule, r, record, session=event.session_id))


def _record(rt: Continuum, run_id: str, action_id: str) -> ActionRecord | None:
    row = rt.store.get_action(run_id, action_id)
    return ActionRecord.model_validate(row.record) if row is not None else None


# -- post-tool ------------------------------------------------------------------------------


def post_tool(args: HookArgs, event: HookEvent, project: str, rule: Rule | None) -> int:
    assert event.outcome is not None and event.tool_name is not None
    rt = _open(args, event, create=True, project=project)
    warnings: list[str] = []
    try:
        _ensure_run(rt, args.run)
        paths = written_paths(event, rule)
        if rule is not None:
            warnings += _settle(rt, args, event, rule, event.outcome)
        for path in paths:
            file_evidence(rt.store, args.run, event, path)
        try:
            _bound_the_fold(rt, args.run, GREW_AFTER_CALL)
        except Exception as e:  # the call is settled: only the next reads are longer, and
            # what the settling said must still be said
            why = e.message if isinstance(e, ContinuumError) else f"{type(e).__name__}: {e}"
            warnings.append(f"no checkpoint was recorded: {terminal_safe(why)}")
    finally:
        rt.close()
    if warnings:
        import sys

        sys.stderr.write("continuum: " + " ".join(warnings) + "\n")
        return 1  # non-blocking everywhere: the tool already ran
    return 0


def _find_action(
    rt: Continuum, run_id: str, event: HookEvent, rule: Rule, key: str
) -> ActionRecord | None:
    identity = rt.ledger.identity(run_id, rule.action_type, key)
    row = rt.store.get_action(run_id, identity.action_id)
    if row is not None:
        return ActionRecord.model_validate(row.record)
    if event.tool_use_id:  # the key changed between pre and post (e.g. {git_head}): by call id
        for row in rt.store.list_actions(run_id):
            args = row.record.get("arguments")
            if (
                row.record.get("status") == "started"
                and isinstance(args, dict)
                and args.get("tool_use_id") == event.tool_use_id
            ):
                return ActionRecord.model_validate(row.record)
    return None


def _settle(
    rt: Continuum, args: HookArgs, event: HookEvent, rule: Rule, outcome: Outcome
) -> list[str]:
    values = template_values(event, rule)
    key = render_key(rule.key, values)
    rec = _find_action(rt, args.run, event, rule, key)
    unapproved: list[str] = []
    if rec is None:
        # The gate never recorded it (its hook died before committing, and the host let the
        # tool run): record it now, after the fact, so a repeat is refused. It already ran:
        # recording that is not approving it, so approval rules do not hold the record back
        # (else a person could later approve a repeat of an effect that already happened).
        arguments = call_arguments(event, rule, values)
        rules = rt.ledger.approvals
        canonical = rt.ledger.identity(args.run, rule.action_type, key, arguments)
        asked = (rules.current() if isinstance(rules, RuleFiles) else rules).find(
            rule.action_type,
            arguments,
            rule.action_type,
            canonical=canonical.normalized_arguments,  # as the intercept judges it
        )
        rt.ledger.approvals = ApprovalRules()
        try:
            r = rt.intercept(args.run, rule.action_type, arguments, key=key, replay=rule.replay)
        finally:
            rt.ledger.approvals = rules
        if not r.proceed:
            return [f"{rule.action_type} ran, and the ledger says {r.status}."]
        rec = _record(rt, args.run, r.action_id)
        assert rec is not None
        if asked is not None:
            unapproved.append(
                f"{rule.action_type} {quoted(rec.action_key, limit=80)} ran "
                "without the person's decision its approval rule asks for (the "
                "gate did not record the call); recorded as it happened."
            )
    if rec.status != ActionStatus.STARTED:
        if rec.status == ActionStatus.COMPLETED and _same_call(rec, event):
            return []  # this call's result is already recorded
        effect_evidence(
            rt.store,
            args.run,
            event,
            rec.model_dump(),
            outcome,
            note=f"ran while the ledger said {rec.status}",
        )
        return [
            f"{rule.action_type} {quoted(rec.action_key, limit=80)} ran although the ledger "
            f"said {rec.status}; recorded as evidence."
        ]
    try:
        if outcome.failed:
            rt.fail(
                args.run, rec.action_id, error=failure_text(outcome), certain=outcome.never_started
            )
        else:
            rt.complete(args.run, rec.action_id, result=outcome.summary())
    except ActionOwnedError:
        return [
            f"{rule.action_type} {quoted(rec.action_key, limit=80)} is owned by another live "
            "session; its outcome was not recorded here."
        ]
    effect_evidence(rt.store, args.run, event, rec.model_dump(), outcome)
    return unapproved


def _same_call(rec: ActionRecord, event: HookEvent) -> bool:
    args = rec.arguments if isinstance(rec.arguments, dict) else {}
    return bool(event.tool_use_id) and args.get("tool_use_id") == event.tool_use_id


# -- probes -----------------------------------------------------------------------------------


# -- session start and pre-compact ------------------------------------------------------------


def session_start(args: HookArgs, event: HookEvent, project: str, registry: Registry | None) -> int:
    from continuum.hooks.briefing import briefing

    rt = _open_existing_run(args, event)
    if rt is None:
        return 0  # no store or no run yet: nothing to say
    try:
        probes: list[ProbeResult] = []
        interrupted = rt.interrupted(args.run)
        for a in rt.actions(args.run):
            needs = a.needs_human or a.action_id in interrupted
            if needs and len(probes) < MAX_PROBES and rule_for(a, registry) is not None:
                try:
                    probes.append(probe_action(rt, args.run, a, registry))
                except ContinuumError as e:  # a probe must never stop the briefing
                    probes.append(
                        ProbeResult(a.action_id, a.action_key, None, None, "unknown", e.message)
                    )
        try:  # a new session is a context switch: the periodic check runs now
            rt.switched(args.run)
            _bound_the_fold(rt, args.run, GREW_AT_START)
        except ContinuumError as e:  # it must never stop the briefing; intercepts still hold
            import sys

            sys.stderr.write(f"continuum: the environment check did not run: {e.message}\n")
        text = briefing(rt, args, project, registry, probes, model=call_versions(event))
    finally:
        rt.close()
    if text:
        import sys

        sys.stdout.write(session_context(text, args.host) + "\n")
    return 0


GREW_AT_START = "at a session start: the run grew since its last one"
GREW_AFTER_CALL = "after a tool call: the run grew since its last one"


def _bound_the_fold(rt: Continuum, run_id: str, reason: str) -> None:
    """Checkpoint the run when it grew past ``CHECKPOINT_AFTER_EVENTS`` since its last
    checkpoint, so each pre-tool hook's read of its state stays short."""
    if checkpoint_due(rt.store, run_id):
        rt.checkpoint(run_id, reason=reason)


def checkpoint_grown_run(args: HookArgs, event: HookEvent, project: str) -> int:
    """The plain post-tool path found the run grown past ``CHECKPOINT_AFTER_EVENTS``: seal
    a checkpoint (the call itself is settled already). 0, or 1 with a warning on stderr
    when the checkpoint could not be written (non-blocking: the tool already ran, and the
    next pre-tool reads the longer way)."""
    rt = _open(args, event, create=False, project=project)
    try:
        _bound_the_fold(rt, args.run, GREW_AFTER_CALL)
    except ContinuumError as e:
        import sys

        sys.stderr.write(f"continuum: no checkpoint was recorded: {terminal_safe(e.message)}\n")
        return 1
    finally:
        rt.close()
    return 0


def subagent_start(
    args: HookArgs, event: HookEvent, project: str, registry: Registry | None
) -> int:
    """Brief a subagent as a new session is briefed (a subagent starts with a fresh context
    and SessionStart fired only for the main loop); probes are left to session start."""
    from continuum.hooks.briefing import briefing

    rt = _open_existing_run(args, event)
    if rt is None:
        return 0
    try:
        _ensure_subagent_run(rt, args, event)
        text = briefing(rt, args, project, registry, [], model=call_versions(event))
    finally:
        rt.close()
    if text:
        import sys

        who = f" (type {quoted(event.agent_type, limit=60)})" if event.agent_type else ""
        text = f"You are a subagent{who}; this applies to you too.\n{text}"
        sys.stdout.write(session_context(text, args.host, "SubagentStart") + "\n")
    return 0


def subagent_stop(args: HookArgs, event: HookEvent) -> int:
    """A progress note: which subagent finished (the host's words, origin external_agent)."""
    rt = _open_existing_run(args, event)
    if rt is None:
        return 0
    try:
        agent = event.agent_id or "?"
        rt.append(
            args.run,
            EventType.EVIDENCE_ADDED,
            {
                "evidence_id": f"subagent:{agent}:stopped",
                "text": f"subagent {event.agent_type or ''} {agent} finished".replace("  ", " "),
                "agent": {"id": event.agent_id, "type": event.agent_type},
            },
        )
        if event.agent_id:  # its child run ends with it (its effects are the parent's)
            child = subagent_run_id(args.run, event.agent_id)
            try:
                if rt.store.get_run(child).status == RunStatus.ACTIVE:
                    rt.finish_run(child)
            except NotFoundError:
                pass  # started before the hooks mapped subagents to runs
    finally:
        rt.close()
    return 0


def _open_existing_run(args: HookArgs, event: HookEvent) -> Continuum | None:
    """The facade on the project's store, or None when the store or the run does not exist
    (a session event never creates them)."""
    try:
        rt = _open(args, event, create=False)
    except NotFoundError:
        return None
    try:
        rt.store.get_run(args.run)
    except NotFoundError:
        rt.close()
        return None
    except BaseException:
        rt.close()
        raise
    return rt


def pre_compact(args: HookArgs, event: HookEvent, project: str) -> int:
    """A checkpoint before the host compacts, only when the run recorded something since
    its last checkpoint (Gemini CLI 0.61.0 runs PreCompress before every model request,
    whether or not it then compacts: a checkpoint each turn would record nothing new).
    The entry point also skips this within ``PRE_COMPACT_INTERVAL`` of the last look."""
    rt = _open_existing_run(args, event)
    if rt is None:
        return 0
    try:
        head = rt.store.get_run(args.run).head_sequence
        latest = next(iter(rt.store.list_checkpoints(args.run)), None)
        if latest is None or head > latest.event_sequence:
            rt.checkpoint(
                args.run,
                reason=f"before the host compacted its context ({event.source or 'auto'})",
            )
    finally:
        rt.close()
    touch_pre_compact_stamp(project, args.run)
    return 0


__all__ = [
    "ProbeResult",
    "host_owner",
    "post_tool",
    "pre_compact",
    "pre_tool",
    "probe_action",
    "session_start",
    "subagent_start",
    "subagent_stop",
]

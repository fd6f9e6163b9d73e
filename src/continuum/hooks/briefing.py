"""The session-start briefing: what a new session must know before it touches anything.

Deterministic for the same log, disk and probe results: the verdict, progress, every
effect whose outcome is unknown (with the exact command that settles it), effects already
done (not to repeat), what the probes found, files recorded as evidence compared with
the disk, the next allowed action and the last recorded summary. Empty when the run has
no effects and no files on record: there is nothing to say.

Agent-written text (keys, goals, notes) is shown quoted and escaped, as everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from continuum.hooks.advice import reconcile_commands, unknown_because
from continuum.hooks.args import HookArgs
from continuum.hooks.hosts import subagent_of
from continuum.hooks.probes import ProbeResult, rule_for
from continuum.hooks.registry import Registry
from continuum.runtime.facade import Continuum
from continuum.state.records import ActionRecord
from continuum.types import ActionStatus
from continuum.untrusted import origin_words, quoted

MAX_DONE = 10  # completed effects listed; the rest are counted


def briefing(
    rt: Continuum,
    args: HookArgs,
    project: str,
    registry: Registry | None,
    probes: Sequence[ProbeResult],
    *,
    model: Mapping[str, str] | None = None,
) -> str:
    """``model``: the versions the host says this session runs under (its model, where
    its payload names one); an open effect recorded under another is said so."""
    run = args.run
    actions = rt.actions(run)
    recovery = rt.resume(run, versions=model)
    files = recovery.files
    if not actions and files is None and recovery.handoff is None:
        return ""
    interrupted = rt.interrupted(run)
    lines = [
        f"continuum crash-recovery briefing for run {quoted(run)} "
        f"(side effects in this project go through its ledger): verdict {recovery.mode}."
    ]
    if recovery.handoff is not None:
        h = recovery.handoff
        lines.append(
            f"Handoff note from an earlier session ({origin_words(h['origin'], h['sequence'])}): "
            f"{quoted(h['note'], limit=4000)}"
        )
    p = recovery.progress or {}
    if p.get("total") is not None or p.get("completed"):
        total = "?" if p.get("total") is None else p["total"]
        lines.append(
            f"Progress recorded: {p.get('completed', 0)}/{total} completed, "
            f"{p.get('failed', 0)} failed."
        )
    open_ones = [a for a in actions if a.needs_human or a.action_id in interrupted]
    if open_ones:
        lines.append(
            "Effects whose outcome is NOT known: do not run them again; a person must settle each:"
        )
        for a in open_ones:
            why = (
                "reported as not done by an agent" if a.failure_unconfirmed else unknown_because(a)
            )
            has_probe = (r := rule_for(a, registry)) is not None and r.probe is not None
            lines.append(
                f"- {quoted(a.action_type, limit=80)} {quoted(a.action_key, limit=160)}{by_agent(a)}: "
                f"{why}. Settle: " + reconcile_commands(args, project, a.action_id, has_probe) + "."
            )
    for probe in probes:
        if probe.verdict == "no_probe":
            continue
        lines.append(
            f"Probe for {quoted(probe.action_key, limit=120)}: exit {probe.exit_code}, so "
            f"{probe.verdict.replace('_', ' ')}"
            + (" (recorded)" if probe.verdict != "unknown" else " (still unknown)")
            + "."
        )
    for d in recovery.version_drift:
        lines.append(
            f"{quoted(d['action_key'], limit=160)} was recorded under {d['field']} "
            f"{quoted(d['recorded'], limit=80)}; this session runs under "
            f"{quoted(d['current'], limit=80)}: weigh that before settling it."
        )
    done = [a for a in actions if a.status == ActionStatus.COMPLETED]
    if done:
        lines.append(f"Effects already done ({len(done)}; do not repeat them):")
        for a in done[-MAX_DONE:]:
            lines.append(
                f"- {quoted(a.action_type, limit=80)} {quoted(a.action_key, limit=160)}{by_agent(a)}"
                + (f" at {a.settled_at}" if a.settled_at else "")
            )
        if len(done) > MAX_DONE:
            lines.append(f"  ... and {len(done) - MAX_DONE} earlier")
    if files is not None:
        lines.append(
            f"Files recorded as evidence: {files.verified} as recorded, "
            f"{len(files.changed)} changed since, {len(files.missing)} missing."
        )
        lines += [f"- changed: {quoted(path)}" for path in files.changed]
        lines += [f"- missing: {quoted(path)}" for path in files.missing]
    if recovery.next_allowed_action:
        lines.append(f"Next allowed action: {recovery.next_allowed_action}.")
    summary = _last_summary(rt, run)
    if summary:
        lines.append(f"Last recorded summary: {summary}")
    return "\n".join(lines)


def by_agent(record: ActionRecord) -> str:
    """ " (in subagent TYPE ID)" for an effect a host's subagent ran, else ""."""
    found = subagent_of(record.arguments)
    if found is None:
        return ""
    kind = f"{quoted(found[1], limit=40)} " if found[1] else ""
    return f" (in subagent {kind}{quoted(found[0], limit=40)})"


def _last_summary(rt: Continuum, run: str) -> str | None:
    state = rt.state(run)
    if state.last_checkpoint is None:
        return None
    for cp in rt.store.list_checkpoints(run):
        events = rt.store.read_events(run, after=cp.event_sequence - 1)[:1]
        reason = events[0].payload.get("reason") if events else None
        return f"checkpoint at sequence {cp.sequence}" + (f": {quoted(reason)}" if reason else "")
    return None

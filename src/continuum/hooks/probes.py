"""A rule's probe: a shell command that checks the outside world for an effect whose
outcome is unknown, run by `continuum reconcile --probe` and at session start; its
verdict is a check continuum ran itself (origin deterministic).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Any

from continuum.errors import UsageError
from continuum.eventlog.events import EventType
from continuum.hooks.registry import BUILTINS, Registry, Rule, render_probe
from continuum.runtime.facade import Continuum
from continuum.state.records import ActionRecord
from continuum.types import Origin

PROBE_SECONDS = 20


@dataclass(frozen=True)
class ProbeResult:
    action_id: str
    action_key: str
    command: str | None
    exit_code: int | None  # None: not run (no probe) or timed out
    verdict: str  # occurred | not_occurred | unknown | no_probe
    output: str = ""


def rule_for(record: ActionRecord, registry: Registry | None) -> Rule | None:
    """The registry rule that gated this action (same action type, preferring its index)."""
    if registry is None:
        return None
    candidates = [r for r in registry.rules if r.action_type == record.action_type]
    args = record.arguments if isinstance(record.arguments, dict) else {}
    index = (args.get("rule") or {}).get("index") if isinstance(args.get("rule"), dict) else None
    for r in candidates:
        if r.index == index:
            return r
    return candidates[0] if candidates else None


def probe_action(
    rt: Continuum, run_id: str, record: ActionRecord, registry: Registry | None
) -> ProbeResult:
    """Run the action's probe and record its verdict (exit 0: occurred, 1: not, else unknown).

    The verdict is a check continuum ran itself, so it is recorded with origin
    ``deterministic``; the probe's output is recorded as evidence either way.
    """
    rule = rule_for(record, registry)
    if rule is None or rule.probe is None:
        return ProbeResult(record.action_id, record.action_key, None, None, "no_probe")
    args = record.arguments if isinstance(record.arguments, dict) else {}
    values: dict[str, Any] = (
        dict(args.get("input") or {}) if isinstance(args.get("input"), dict) else {}
    )
    values.update(
        cwd=args.get("cwd"), tool_name=args.get("tool"), session_id=args.get("session_id")
    )
    values.update({k: v for k, v in (args.get("values") or {}).items() if k in BUILTINS})
    try:
        command = render_probe(rule.probe, values)
    except UsageError as e:
        return ProbeResult(
            record.action_id,
            record.action_key,
            None,
            None,
            "unknown",
            f"the probe could not be filled in: {e.message}",
        )
    code, verdict, output = run_probe(rt, run_id, record, command, args.get("cwd") or None)
    return ProbeResult(record.action_id, record.action_key, command, code, verdict, output)


def run_probe(
    rt: Continuum, run_id: str, record: ActionRecord, command: str, cwd: str | None
) -> tuple[int | None, str, str]:
    """Run ``command`` (a filled-in probe, its values shell-quoted) for ``record`` and
    record what it said: its output as evidence, and a conclusive verdict (exit 0:
    occurred, 1: not) as a reconcile with origin ``deterministic`` when the action needs
    one. Returns (exit code or None, verdict, output); a probe that times out or cannot
    run says ``unknown`` and settles nothing. Shared by the hooks and the MCP gateway."""
    try:
        done = subprocess.run(
            ["sh", "-c", command],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=PROBE_SECONDS,
            check=False,
        )
        code: int | None = done.returncode
        output = (done.stdout + done.stderr)[-2000:]
    except subprocess.TimeoutExpired:
        code, output = None, f"timed out after {PROBE_SECONDS} s"
    except OSError as e:
        code, output = None, f"could not run: {e}"
    verdict = {0: "occurred", 1: "not_occurred"}.get(code if code is not None else -1, "unknown")
    rt.append(
        run_id,
        EventType.EVIDENCE_ADDED,
        {
            "evidence_id": f"probe:{record.action_id}:{record.last_sequence}",
            "text": f"probe for {record.action_key}: exit {code} ({verdict})",
            "action_id": record.action_id,
            "command": command,
            "exit_code": code,
            "output": output,
        },
    )
    if verdict in ("occurred", "not_occurred") and record.needs_human:
        rt.reconcile(
            run_id,
            record.action_id,
            occurred=verdict == "occurred",
            note=f"probe exited {code}",
            origin=Origin.DETERMINISTIC,
            force=False,
        )
    return code, verdict, output

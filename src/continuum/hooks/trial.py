"""`continuum hooks try --client HOST COMMAND`: one shell tool call through the hooks as
installed in this project, without the host (what the MCP Inspector is for a server).

In the host's place:

1. read what `continuum hooks install --client HOST` wrote (``installed.py``) and take
   continuum's commands on the host's events around a shell call, pointed at a scratch
   run (``hooks-try-XXXXXXXX``) unless a run is named;
2. send the pre-tool command the JSON that host sends for a call of its shell tool
   (``trial_host.py``), run as the host runs it: ``sh -c`` in the project, this
   environment plus the host's variables, the installed timeout (Kilo: the plugin's
   argv, no shell); apply the host's rules to the answer;
3. if the host would run the call: simulate its result (success by default, or a failure
   with exit code 1), or run it for real (``execute``); then send the post-tool event of
   that outcome (Codex: after writing its transcript line, where the hook reads the exit
   code) to the commands on that event;
4. read back from the store what each hook appended, and the action the rule's key
   names (the identity the gate computes).

What is decided is decided by the installed hook, in its own process: this plays the
host and reads the record. Nothing is written before the hooks are found installed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from continuum.errors import ContinuumError, NotFoundError, UsageError
from continuum.hooks.guard import guarded_touch, is_accepted
from continuum.hooks.hosts import parse_event
from continuum.hooks.installed import Hook, Installed, find_installed
from continuum.hooks.registry import Registry, Rule, load_registry, render_key
from continuum.hooks.trial_host import (
    HOST_NAME,
    Call,
    new_call,
    post_event,
    pre_event,
    transcript_line,
    verdict,
)
from continuum.store.base import check_run_id
from continuum.untrusted import as_typed, quoted

SCRATCH_PREFIX = "hooks-try-"
RESULTS = ("success", "fail")
FAIL_EXIT = 1  # the exit code of a simulated failure
TOOL_TIMEOUT = 120.0  # seconds for --execute (Claude Code's Bash default)
OUTPUT_LIMIT = 100_000  # characters of an executed command's output sent to the post hook
SHOWN_LIMIT = 4_000  # characters of a hook's stdout/stderr kept in the report


# -- running ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    exit_code: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    seconds: float


def host_env(host: str, project: str) -> dict[str, str]:
    """The environment a host started from this shell gives its hooks: this one, plus the
    variables it sets (Claude Code: CLAUDE_PROJECT_DIR; Gemini CLI: GEMINI_PROJECT_DIR and,
    for compatibility, CLAUDE_PROJECT_DIR)."""
    env = dict(os.environ)
    if host in ("claude-code", "gemini"):
        env["CLAUDE_PROJECT_DIR"] = project
    if host == "gemini":
        env["GEMINI_PROJECT_DIR"] = project
    return env


def _communicate(
    proc: subprocess.Popen[bytes], data: bytes | None, timeout: float
) -> tuple[bytes, bytes, int | None]:
    """(stdout, stderr, exit code) of ``proc``; None: it was killed at ``timeout``, with
    everything it started (its own process group)."""
    try:
        out, err = proc.communicate(data, timeout=timeout)
        return out, err or b"", proc.returncode
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return out, err or b"", None


def run_hook(hook: Hook, payload: dict[str, Any], cwd: str, env: dict[str, str]) -> Answer:
    """Run one hook with ``payload`` on stdin, as a host does, within its timeout."""
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            hook.argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as e:  # the plugin's command[0] is gone
        return Answer(127, "", f"could not start {hook.argv[0]}: {e.strerror or e}", 0.0)
    out, err, code = _communicate(proc, data, hook.timeout)
    seconds = round(time.monotonic() - started, 3)
    return Answer(code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), seconds)


def execute(command: str, cwd: str) -> tuple[int, str, int]:
    """Run the tool call for real, as the hosts' shell tools do: (exit code, output, ms);
    at ``TOOL_TIMEOUT`` it is killed and reported as exit code 124, as timeout(1) does."""
    shell = shutil.which("bash") or "/bin/sh"
    started = time.monotonic()
    proc = subprocess.Popen(
        [shell, "-c", command],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    out, _, code = _communicate(proc, None, TOOL_TIMEOUT)
    ms = int((time.monotonic() - started) * 1000)
    return (124 if code is None else code), out.decode("utf-8", "replace")[:OUTPUT_LIMIT], ms


# -- what the store holds ---------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """What the store holds for the try's run, read without creating anything."""

    store_exists: bool
    run_exists: bool
    head: int  # the run's last sequence (0: no run)
    types: list[str]  # the types of its events after the sequence asked about
    action: dict[str, Any] | None  # the rule's action
    error: str | None = None  # why the store could not be read (the hooks then refuse)


def read_back(
    db: str, run: str, after: int, rule: Rule | None = None, key: str | None = None, cwd: str = ""
) -> Record:
    """The run's events after ``after`` and the action ``rule`` and ``key`` name (the
    identity the gate computes), from a store opened with ``create=False``."""
    from continuum.runtime.facade import Continuum
    from continuum.state.records import ActionRecord
    from continuum.store import open_store

    try:
        store = open_store(db, create=False)
    except NotFoundError:
        return Record(False, False, 0, [], None)
    except ContinuumError as e:  # unusable: the hooks say so in their answers
        return Record(True, False, 0, [], None, f"{e.message} [{e.code}]")
    try:
        try:
            head = store.get_run(run).head_sequence
        except NotFoundError:
            return Record(True, False, 0, [], None)
        types = [str(e.type) for e in store.read_events(run, after=after)] if head > after else []
        action = None
        if rule is not None and key is not None:
            ledger = Continuum(store, cwd=cwd or None).ledger
            row = store.get_action(run, ledger.identity(run, rule.action_type, key).action_id)
            if row is not None:
                action = _action_data(ActionRecord.model_validate(row.record))
        return Record(True, True, head, types, action)
    except ContinuumError as e:
        return Record(True, False, 0, [], None, f"{e.message} [{e.code}]")
    finally:
        store.close()


def _action_data(rec: Any) -> dict[str, Any]:
    arguments = rec.arguments if isinstance(rec.arguments, dict) else {}
    return {
        "action_id": rec.action_id,
        "action_key": rec.action_key,
        "action_type": rec.action_type,
        "status": str(rec.status),
        "attempt": rec.attempt,
        "error": rec.error,
        "result": rec.result,
        "settled_at": rec.settled_at,
        "session_id": arguments.get("session_id"),
        "tool_use_id": arguments.get("tool_use_id"),
    }


def _shown(text: str) -> str:
    return (
        text
        if len(text) <= SHOWN_LIMIT
        else text[:SHOWN_LIMIT] + f"... (+{len(text) - SHOWN_LIMIT} chars)"
    )


# -- one try ----------------------------------------------------------------------------------

TRANSITIONS = {
    "action_intercepted": "intercepted",
    "action_retried": "intercepted again (a new attempt)",
    "action_completed": "completed",
    "action_failed": "failed",
    "action_marked_unknown": "marked unknown",
}


@dataclass
class Trial:
    host: str
    project: Path
    command: str
    run: str | None = None  # default: a new scratch run
    db: str | None = None  # another store than the installed one
    result: str = "success"
    execute: bool = False


def scratch_run() -> str:
    return SCRATCH_PREFIX + uuid.uuid4().hex[:8]


def try_call(t: Trial) -> dict[str, Any]:
    """Play the host for one shell call through the installed hooks; the report."""
    if not t.command.strip():
        raise UsageError(
            "the command is empty", code="usage.invalid", hint="e.g. 'echo hi >> outbox.txt'"
        )
    if t.result not in RESULTS:
        raise UsageError(f"--result {t.result!r}", code="usage.invalid", hint="success or fail")
    run = t.run if t.run is not None else scratch_run()
    check_run_id(run)
    found = find_installed(t.host, t.project, run, t.db)  # before anything is written
    first = found.hooks["pre"][0]
    db, project = first.db, first.project or str(t.project)
    cwd, env = str(t.project), host_env(t.host, str(t.project))
    with tempfile.TemporaryDirectory(prefix="continuum-hooks-try-") as scratch:
        call = new_call(t.host, t.command, cwd, os.path.join(scratch, "transcript.jsonl"))
        pre = pre_event(call)
        report = _report_head(t, found, call, run, db)
        rule, key = _rule(report, project, call, pre, db)
        first_look = read_back(db, run, 0, rule, key, cwd)
        head, report["action_before"] = first_look.head, first_look.action
        allowed = True
        for hook in found.hooks["pre"]:
            answer = run_hook(hook, pre, cwd, env)
            now = read_back(db, run, head)
            head, step = now.head, _step(hook, pre, answer, now.types)
            v = verdict(
                t.host, answer.exit_code, answer.stdout, answer.stderr, hook.line, t.command
            )
            step.update(
                decision="allow" if v.allowed else "deny",
                why=v.why,
                fail_open=v.fail_open,
                reason=v.reason,
                model_reads=v.model_reads and _without_password(v.model_reads, hook.db),
            )
            report["pre"].append(step)
            allowed = v.allowed
            if not allowed:
                break
        report["decision"] = "allow" if allowed else "deny"
        if allowed:
            code, output, ms = _perform(t, call)
            report["tool"] = {
                "performed": "executed" if t.execute else "simulated",
                "result": None if t.execute else t.result,
                "exit_code": code,
                "output_chars": len(output),
            }
            role, post = post_event(call, code, output, pre, ms)
            if t.host == "codex":  # Codex writes the exit code there before PostToolUse
                with open(call.transcript, "a", encoding="utf-8") as f:
                    f.write(transcript_line(call, code, output))
            for hook in found.hooks.get(role, []):
                answer = run_hook(hook, post, cwd, env)
                now = read_back(db, run, head)
                head = now.head
                report["post"].append(_step(hook, post, answer, now.types))
        last = read_back(db, run, 0, rule, key, cwd)
        report.update(
            action=last.action, store_exists=last.store_exists, run_exists=last.run_exists
        )
        if last.error:
            report["notes"].append(f"the store could not be read back: {last.error}")
    report["action_recorded"] = [
        TRANSITIONS[name]
        for step in [*report["pre"], *report["post"]]
        for name in step["recorded"]
        if name in TRANSITIONS
    ]
    return report


def _report_head(t: Trial, found: Installed, call: Call, run: str, db: str) -> dict[str, Any]:
    from continuum.store import redact_url

    return {
        "client": t.host,
        "host": HOST_NAME[t.host],
        "project": str(t.project),
        "settings": str(found.path),
        "store": redact_url(db),
        "run": run,
        "scratch_run": t.run is None,
        "installed_run": found.hooks["pre"][0].run,
        "call": {
            "tool": call.tool,
            "input": call.tool_input,
            "session_id": call.session_id,
            "tool_use_id": call.tool_use_id,
        },
        "foreign_hooks_skipped": found.foreign,
        "notes": list(found.notes),
        "pre": [],
        "tool": {"performed": "not_run", "result": None, "exit_code": None, "output_chars": 0},
        "post": [],
    }


def _rule(
    report: dict[str, Any], project: str, call: Call, pre: dict[str, Any], db: str
) -> tuple[Rule | None, str | None]:
    """Which rule the gate will find for the call (the registry's own ``find``) and the key
    it renders, so that the action can be read back; the hook decides on its own."""
    from continuum.hooks.effect_path import template_values

    info: dict[str, Any] = {"project": project, "accepted": is_accepted(project)}
    report["registry"] = info
    report["guard"] = guarded_touch(call.tool, call.tool_input, call.cwd, project, db)
    report["rule"] = None
    try:
        registry: Registry = load_registry(project)
    except UsageError as e:
        info.update(path=None, rules=None, error=e.to_dict())
        return None, None
    info.update(path=registry.path, rules=len(registry.rules), error=None)
    rule = registry.find(call.tool, call.tool_input)
    if rule is None:
        return None, None
    data: dict[str, Any] = {
        "index": rule.index,
        "line": rule.line,
        "description": rule.description,
        "action_type": rule.action_type,
        "replay": rule.replay,
        "key": None,
    }
    report["rule"] = data
    event = parse_event(call.host, "pre-tool", json.dumps(pre).encode("utf-8"))
    try:
        data["key"] = render_key(rule.key, template_values(event, rule))
    except ContinuumError as e:  # the gate refuses such a call (hooks.missing_field)
        data["key_error"] = e.message
    return rule, data["key"]


def _without_password(text: str, db: str) -> str:
    """``text`` with a PostgreSQL URL's password shown as ``***`` (a hook command carries
    the store URL as installed)."""
    from continuum.store import redact_url

    shown = redact_url(db, mark=True)
    return text.replace(db, shown) if db and shown != db else text


def _step(hook: Hook, payload: dict[str, Any], answer: Answer, types: list[str]) -> dict[str, Any]:
    return {
        "event": hook.event,
        "kind": hook.kind,
        "command": _without_password(hook.line, hook.db),
        "installed_command": _without_password(hook.installed, hook.installed_db),
        "stdin": payload,
        "exit_code": answer.exit_code,
        "timed_out": answer.exit_code is None,
        "seconds": answer.seconds,
        "stdout": _shown(answer.stdout),
        "stderr": _shown(answer.stderr),
        "recorded": types,
    }


def _perform(t: Trial, call: Call) -> tuple[int, str, int]:
    if t.execute:
        return execute(call.command, call.cwd)
    return (0 if t.result == "success" else FAIL_EXIT), "", 0


# -- the report, for a person -------------------------------------------------------------------


def _exit_text(step: dict[str, Any]) -> str:
    if step["timed_out"]:
        return f"killed at its timeout after {step['seconds']} s"
    return f"exit {step['exit_code']} in {step['seconds']} s"


def _said(step: dict[str, Any]) -> list[str]:
    out = []
    for stream in ("stdout", "stderr"):
        text = step[stream].strip()
        if text and not (stream == "stderr" and step.get("model_reads")):
            out.append(f"  its {stream}: {quoted(text, limit=600)}")
    return out


def report_lines(r: dict[str, Any]) -> list[str]:
    """The report as lines; every value from the call, a hook or the store is quoted."""
    call = r["call"]
    lines = [
        f"{r['host']}: continuum's hooks as installed in {as_typed(r['settings'])}",
        f"call: {call['tool']} {quoted(call['input']['command'], limit=300)}",
    ]
    lines += _registry_lines(r)
    for step in r["pre"]:
        lines.append(f"{step['event']} -> continuum hook {step['kind']}: {_exit_text(step)}")
        verb = "ALLOWED" if step["decision"] == "allow" else "DENIED"
        lines.append(f"  {verb}: {step['why']}")
        if step["model_reads"]:
            lines.append(f"  the model reads: {quoted(step['model_reads'], limit=1500)}")
        lines += _said(step)
        lines.append(f"  recorded: {', '.join(step['recorded']) or 'nothing'}")
    tool = r["tool"]
    if tool["performed"] == "not_run":
        lines.append("tool: not run (the host blocks it)")
    elif tool["performed"] == "executed":
        lines.append(f"tool: ran for real (--execute): exit code {tool['exit_code']}")
    else:
        lines.append(
            f"tool: NOT run; its result simulated as {tool['result']} (exit code "
            f"{tool['exit_code']}); --execute runs it for real"
            + ("" if tool["result"] == "fail" else ", --result fail simulates a failure")
        )
    for step in r["post"]:
        lines.append(f"{step['event']} -> continuum hook {step['kind']}: {_exit_text(step)}")
        lines += _said(step)
        lines.append(f"  recorded: {', '.join(step['recorded']) or 'nothing'}")
    lines += _action_lines(r)
    lines += _where_lines(r)
    return lines


def _registry_lines(r: dict[str, Any]) -> list[str]:
    reg, out = r["registry"], []
    if reg.get("error"):
        out.append(f"registry: malformed: {reg['error']['message']}")
    elif not reg["accepted"]:
        out.append(
            "registry: not the one a person accepted: the gate refuses every call that "
            f"could be an effect (`continuum hooks accept --dir {shlex.quote(reg['project'])}`)"
        )
    if r["guard"]:
        out.append(
            f"guard: the call names continuum's own configuration ({quoted(r['guard'])}): "
            "refused before any rule is looked at"
        )
    rule = r["rule"]
    if rule is None:
        if not reg.get("error"):
            out.append(
                f"rule: none of the {reg['rules']} rule(s) matches: the gate lets the call "
                "run and records nothing"
            )
        return out
    where = f"effect #{rule['index']}" + (f" (line {rule['line']})" if rule["line"] else "")
    what = f" {quoted(rule['description'])}" if rule["description"] else ""
    key = quoted(rule["key"]) if rule["key"] is not None else f"none ({rule.get('key_error')})"
    out.append(
        f"rule: {where}{what}: action type {rule['action_type']}, key {key}, "
        f"replay {rule['replay']}"
    )
    return out


def _action_lines(r: dict[str, Any]) -> list[str]:
    action, before = r["action"], r["action_before"]
    if action is None:
        return ["ledger: no action for this call"] if r["rule"] else []
    name = f"{action['action_type']} {quoted(action['action_key'], limit=200)}"
    recorded = r["action_recorded"]
    if recorded:
        how = "this try " + ", then ".join(recorded)
    elif before is not None:
        how = f"already in the ledger before this try ({before['status']}); nothing recorded now"
    else:
        how = "nothing recorded by this try"
    lines = [f"ledger: action {name} ({action['action_id']}): {action['status']}; {how}"]
    if action["status"] == "unknown":
        lines.append(
            "  its outcome is unknown: a failed command may still have had its effect; the "
            "gate refuses it until a person reconciles it"
        )
    return lines


def _where_lines(r: dict[str, Any]) -> list[str]:
    run, store = r["run"], r["store"]
    kind = "a scratch run made for this try" if r["scratch_run"] else "named with --run"
    if r["run_exists"]:
        lines = [f"run {quoted(run)} ({kind}) in store {as_typed(store)}"]
        lines.append(f"see it: continuum --db {shlex.quote(store)} actions {shlex.quote(run)}")
    else:
        made = "exists" if r["store_exists"] else "does not exist"
        lines = [
            f"run {quoted(run)} ({kind}): not created, no hook recorded anything (store "
            f"{as_typed(store)}, which {made})"
        ]
    if not r["scratch_run"] and run == r["installed_run"]:
        lines.append(
            "warning: this is the run the hooks record into for the real host: what this try "
            "recorded (a simulated result too) stays in it"
        )
    if any(step.get("fail_open") for step in r["pre"]):
        lines.append(
            "warning: the gate's answer was not a clean allow or deny: the host runs the call "
            "anyway (fails open); see the hook's stderr"
        )
    if r["foreign_hooks_skipped"]:
        lines.append(
            f"note: {r['foreign_hooks_skipped']} other hook(s) on these events are not "
            "continuum's and were not run"
        )
    lines += [f"note: {n}" for n in r["notes"]]
    return lines

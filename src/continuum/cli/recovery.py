"""Commands that decide: validate, resume, confirm, checkpoint, declare, contracts."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from continuum.cli.common import common, parse_env, runtime
from continuum.cli.output import Settings, emit, style, verdict_color, verdict_exit_code
from continuum.errors import UsageError
from continuum.runtime import Recovery
from continuum.types import Origin

ENV_HELP = "Current environment as name=value (repeatable): the value a declared dependency has now."


def _recovery_lines(s: Settings, r: Recovery) -> list[str]:
    lines = [style(s, f"verdict: {r.mode}", fg=verdict_color(r.mode), bold=True)
             + ("  (safe to resume)" if r.safe else ""),
             f"run: {r.run_id}", f"next allowed action: {r.next_allowed_action}",
             f"why: {r.rationale}"]
    if len(r.required_actions) > 1:
        lines.append("required, in order:")
        lines += [f"  {i}. {a}" for i, a in enumerate(r.required_actions, 1)]
    for a in r.uncertain_actions:
        lines.append(f"uncertain action {a['action_key']} ({a['status']}): check the external "
                     f"system, then `continuum reconcile {r.run_id} {a['action_id']} "
                     "--occurred|--not-occurred`")
    if r.progress:
        p = r.progress
        lines.append(f"progress: {p['completed']}/{p['total'] if p['total'] is not None else '?'}"
                     f" completed, {p['failed']} failed")
    if r.contract:
        lines.append(f"contract: {r.contract['integrity_hash'][:16]}... at head "
                     f"{r.contract['head_sequence']}")
    return lines


@click.command("resume")
@click.argument("run_id", required=False)
@click.option("--env", "env", multiple=True, metavar="NAME=VALUE", help=ENV_HELP)
@click.option("--expected-model", default=None, help="The model that will continue the run.")
@click.option("--tolerate-unknown", is_flag=True,
              help="Do not block on dependencies that cannot be checked now (never on actions).")
@common
def resume_cmd(s: Settings, run_id: str | None, env: tuple[str, ...], expected_model: str | None,
               tolerate_unknown: bool) -> None:
    """Decide whether RUN (default: the latest active run) may resume. Read-only.

    Exit 0 only when the verdict is `resume`; 10 repair/replan; 20 wait or a human is
    needed; 30 anything else.
    """
    r = runtime(s).resume(run_id, env=parse_env(env), expected_model=expected_model,
                          tolerate_unknown=tolerate_unknown)
    if r.run_id is None:
        emit(s, r.model_dump(mode="json"), "no active run in this store", code=2)
    emit(s, r.model_dump(mode="json"), _recovery_lines(s, r), code=verdict_exit_code(r.mode))


@click.command("validate")
@click.argument("run_id")
@click.option("--env", "env", multiple=True, metavar="NAME=VALUE", help=ENV_HELP)
@click.option("--expected-model", default=None, help="The model that will continue the run.")
@common
def validate_cmd(s: Settings, run_id: str, env: tuple[str, ...], expected_model: str | None) -> None:
    """Re-check declared dependencies and derived state against the environment now."""
    rt = runtime(s)
    state, decision, contract = rt.evaluate(run_id, env=parse_env(env), expected_model=expected_model)
    report = rt.validate(run_id, env=parse_env(env), expected_model=expected_model)
    lines = [style(s, f"verdict: {decision.mode}", fg=verdict_color(decision.mode), bold=True)]
    lines += [f"dependency {d.name}: {d.status}" for d in report.dependencies]
    lines += [f"{c.component}: {c.status} ({c.reason})" for c in report.invalidated]
    lines.append(f"verified: {', '.join(report.verified) or '-'}")
    emit(s, {"run_id": run_id, "verdict": str(decision.mode), "validation": report.model_dump(mode="json"),
             "next_allowed_action": decision.next_allowed_action}, lines,
         code=verdict_exit_code(str(decision.mode)))


@click.command("confirm")
@click.argument("run_id")
@click.option("--scope", type=click.Choice(["goal", "progress", "all"]), default=None,
              help="What to confirm (default: goal and progress).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask on a terminal.")
@common
def confirm_cmd(s: Settings, run_id: str, scope: str | None, yes: bool) -> None:
    """As a human, vouch for the self-reported state of RUN up to its current head.

    Shows what is being confirmed first. The confirmation covers state recorded up to
    now; anything self-reported later needs a new confirmation.
    """
    rt = runtime(s, origin=Origin.HUMAN)
    state = rt.state(run_id)
    if not s.json and sys.stdin.isatty() and not yes:
        click.echo(f"run {run_id} through sequence {state.sequence}:", err=True)
        click.echo(f"  goal: {state.goal.value if state.goal else '-'}", err=True)
        p = state.progress
        click.echo(f"  progress: {p.completed}/{p.total} completed, {p.failed} failed", err=True)
        if not click.confirm("Confirm this as true?", err=True):
            raise UsageError("confirmation declined; nothing was recorded", code="usage.declined",
                             hint="run again when you have checked the state")
    result = rt.confirm(run_id, scope=scope or "default")
    verdict = rt.resume(run_id)
    lines = [f"confirmed {', '.join(result.scope)} of run {run_id} through sequence "
             f"{result.through_sequence} (as human):"]
    lines += [f"  {k}: {v}" for k, v in result.confirmed.items()]
    lines.append(style(s, f"verdict now: {verdict.mode}", fg=verdict_color(verdict.mode), bold=True))
    if not verdict.safe:
        lines.append(f"next allowed action: {verdict.next_allowed_action}")
    emit(s, {"confirmation": result.model_dump(mode="json"), "verdict": verdict.mode,
             "next_allowed_action": verdict.next_allowed_action}, lines,
         code=verdict_exit_code(verdict.mode))


@click.command("checkpoint")
@click.argument("run_id")
@click.option("--reason", default=None, help="Why the checkpoint is taken.")
@click.option("--env", "env", multiple=True, metavar="NAME=VALUE",
              help="Declare dependencies (name=version) before checkpointing.")
@common
def checkpoint_cmd(s: Settings, run_id: str, reason: str | None, env: tuple[str, ...]) -> None:
    """Store a semantic checkpoint of RUN's state (sealed with a hash, in the log)."""
    info = runtime(s).checkpoint(run_id, reason=reason, env=parse_env(env) or None)
    emit(s, {"checkpoint": info.model_dump(mode="json")},
         f"checkpoint of {run_id} through sequence {info.sequence} (event #{info.event_sequence})")


@click.command("declare")
@click.argument("run_id")
@click.option("--env", "env", multiple=True, metavar="NAME=VERSION", help="A static dependency.")
@click.option("--file", "files", multiple=True, metavar="PATH", help="A file dependency (content hash).")
@click.option("--git", "gits", multiple=True, metavar="DIR", help="A git dependency (HEAD commit).")
@common
def declare_cmd(s: Settings, run_id: str, env: tuple[str, ...], files: tuple[str, ...],
                gits: tuple[str, ...]) -> None:
    """Declare what RUN depends on, so a resume re-checks it first."""
    event = runtime(s).declare_dependencies(run_id, env=parse_env(env), files=list(files),
                                            git=list(gits))
    if event is None:
        raise UsageError("nothing to declare", code="usage.nothing_to_declare",
                         hint="pass --env NAME=VERSION, --file PATH or --git DIR")
    deps = event.payload["dependencies"]
    emit(s, {"event": event.model_dump(mode="json")},
         [f"declared {d['name']} ({d['provider']})" for d in deps])


@click.command("show-contract")
@click.argument("run_id")
@click.option("--env", "env", multiple=True, metavar="NAME=VALUE", help=ENV_HELP)
@click.option("--expected-model", default=None, help="The model that will continue the run.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Also write the contract JSON to this file.")
@common
def show_contract_cmd(s: Settings, run_id: str, env: tuple[str, ...], expected_model: str | None,
                      output: str | None) -> None:
    """Print the sealed recovery contract for RUN (deterministic for the same log and env)."""
    _, decision, contract = runtime(s).evaluate(run_id, env=parse_env(env),
                                                expected_model=expected_model)
    if output:
        Path(output).write_text(contract.to_json() + "\n", encoding="utf-8")
    code = verdict_exit_code(contract.verdict)
    if s.json:
        emit(s, {"contract": contract.model_dump(mode="json")}, "", code=code)
    emit(s, {}, contract.to_json(), code=code)


@click.command("verify-contract")
@click.argument("file", type=click.Path(dir_okay=False))
@common
def verify_contract_cmd(s: Settings, file: str) -> None:
    """Check a contract FILE: intact seal, and still bound to the run's current head."""
    try:
        text = Path(file).read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot read {file!r}: {e.strerror}", code="usage.bad_file",
                         hint="pass the path of a contract written by show-contract") from e
    result = runtime(s).verify_contract(text)
    emit(s, result, f"contract intact and current: run {result['run_id']}, verdict "
                    f"{result['verdict']}, head {result['head_sequence']}")


COMMANDS = [resume_cmd, validate_cmd, confirm_cmd, checkpoint_cmd, declare_cmd, show_contract_cmd,
            verify_contract_cmd]

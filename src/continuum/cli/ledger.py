"""Action ledger commands: actions, reconcile, and intercept/complete/fail for scripts."""

from __future__ import annotations

import json
from typing import Any

import click

from continuum.cli.common import common, runtime
from continuum.cli.output import Settings, emit
from continuum.errors import UsageError
from continuum.projection import ActionRecord
from continuum.types import Origin


def _json_arg(name: str, text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as e:
        raise UsageError(f"{name} is not valid JSON: {e}", code="usage.bad_json",
                         hint=f"quote it, e.g. {name} '{{\"invoice\": \"INV-001\"}}'") from e


@click.command("actions")
@click.argument("run_id")
@common
def actions_cmd(s: Settings, run_id: str) -> None:
    """List RUN's side effects and their states. Exit 20 if any is unresolved."""
    rt = runtime(s)
    actions = rt.actions(run_id)
    interrupted = rt.interrupted(run_id)
    unresolved = [a for a in actions if a.status.unresolved]

    def shown(a: ActionRecord) -> str:
        return "unknown (interrupted)" if a.action_id in interrupted else str(a.status)

    lines = [f"{a.action_id}  {a.action_key:<36} {shown(a):<10} attempt={a.attempt}"
             + (f" external_id={a.external_id}" if a.external_id else "") for a in actions]
    if unresolved:
        lines.append(f"{len(unresolved)} unresolved: reconcile each with "
                     f"`continuum reconcile {run_id} ACTION --occurred|--not-occurred`")
    emit(s, {"run_id": run_id,
             "actions": [{**a.model_dump(mode="json"), "interrupted": a.action_id in interrupted}
                         for a in actions],
             "unresolved": len(unresolved)}, lines or ["no actions"], code=20 if unresolved else 0)


@click.command("reconcile")
@click.argument("run_id")
@click.argument("action")
@click.option("--occurred/--not-occurred", default=None,
              help="Whether the side effect happened, as checked in the external system.")
@click.option("--external-id", default=None, help="The external system's id for it, if it happened.")
@click.option("--note", default=None, help="How it was checked.")
@common
def reconcile_cmd(s: Settings, run_id: str, action: str, occurred: bool | None,
                  external_id: str | None, note: str | None) -> None:
    """Settle an interrupted ACTION (id or key) after checking the external system."""
    if occurred is None:
        raise UsageError("say whether it happened: --occurred or --not-occurred",
                         code="usage.missing_option", hint="check the external system first")
    rec = runtime(s, origin=Origin.HUMAN).reconcile(run_id, action, occurred=occurred,
                                                    external_id=external_id, note=note)
    emit(s, {"action": rec.model_dump(mode="json")}, f"action {rec.action_key} is now {rec.status}")


@click.command("intercept")
@click.argument("run_id")
@click.argument("action_type")
@click.option("--args", "arguments", default=None, help="The action's arguments as JSON.")
@click.option("--key", default=None, help="A stable business key, e.g. invoice:INV-001.")
@click.option("--replay", type=click.Choice(["never", "safe", "idempotent", "reconcile"]),
              default=None, help="What may happen if it is interrupted (default never).")
@common
def intercept_cmd(s: Settings, run_id: str, action_type: str, arguments: str | None,
                  key: str | None, replay: str | None) -> None:
    """Ask before a side effect. Exit 0 = proceed now; 20 = do not perform it."""
    r = runtime(s).intercept(run_id, action_type, _json_arg("--args", arguments), key=key,
                             replay=replay)
    emit(s, r.model_dump(mode="json"),
         [f"{'PROCEED' if r.proceed else 'DO NOT PROCEED'}: {r.action_key} ({r.status})", r.guidance],
         code=0 if r.proceed else 20)


@click.command("complete")
@click.argument("run_id")
@click.argument("action")
@click.option("--external-id", default=None, help="The external system's id for the effect.")
@click.option("--result", default=None, help="The result as JSON.")
@common
def complete_cmd(s: Settings, run_id: str, action: str, external_id: str | None,
                 result: str | None) -> None:
    """Record that ACTION's side effect happened."""
    rec = runtime(s).complete(run_id, action, external_id=external_id,
                              result=_json_arg("--result", result))
    emit(s, {"action": rec.model_dump(mode="json")}, f"action {rec.action_key} completed")


@click.command("fail")
@click.argument("run_id")
@click.argument("action")
@click.option("--error", default=None, help="What went wrong.")
@click.option("--certain", is_flag=True, help="It certainly did not happen (default: unknown).")
@common
def fail_cmd(s: Settings, run_id: str, action: str, error: str | None, certain: bool) -> None:
    """Record that ACTION failed; without --certain it is recorded as unknown."""
    rec = runtime(s).fail(run_id, action, error=error, certain=certain)
    emit(s, {"action": rec.model_dump(mode="json")}, f"action {rec.action_key} is now {rec.status}")


COMMANDS = [actions_cmd, reconcile_cmd, intercept_cmd, complete_cmd, fail_cmd]

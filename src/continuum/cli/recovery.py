"""Commands that decide: validate, resume, confirm, checkpoint, declare, contracts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from continuum.cli.action_states import state_words
from continuum.cli.common import (
    common,
    parse_env,
    person_via,
    private_file,
    require_person,
    runtime,
)
from continuum.cli.output import (
    AGENT_TEXT_NOTICE,
    Line,
    Settings,
    ask,
    emit,
    provenance_label,
    shown,
    verdict_exit_code,
    verdict_styled,
    write_lines,
)
from continuum.errors import UsageError
from continuum.recovery.contract import RecoveryContract
from continuum.runtime.results import ConfirmResult, Recovery
from continuum.state.records import Item, Provenance, State
from continuum.store import RunInfo
from continuum.types import ActionStatus, Origin, RunStatus
from continuum.untrusted import as_typed, quoted

ENV_HELP = (
    "Current environment as name=value (repeatable): the value a declared dependency has now."
)
FINISHED_LISTED = 20  # finished run ids named in resume's "no active run" JSON (the latest)


def _component(name: str) -> str:
    """A validation component (``goal``, ``evidence:ID``) with an agent-chosen id quoted."""
    kind, sep, ident = name.partition(":")
    return f"{kind} {quoted(ident)}" if sep else name


def _recovery_lines(r: Recovery) -> list[Line]:
    lines: list[Line] = [
        [verdict_styled("verdict", r.mode), "  (safe to resume)" if r.safe else ""],
        f"run: {r.run_id}",
        f"next allowed action: {r.next_allowed_action}",
        f"why: {r.rationale}",
    ]
    if r.handoff is not None:
        lines.insert(
            1,
            f"handoff note: {shown(r.handoff['note'], r.handoff['origin'], r.handoff['sequence'], limit=4000)}",
        )
    if len(r.required_actions) > 1:
        lines.append("required, in order:")
        lines += [f"  {i}. {a}" for i, a in enumerate(r.required_actions, 1)]
    for a in r.uncertain_actions:
        # Uncertain and still started: its process is gone (a live one is waited for).
        state = state_words(
            a["recorded_status"],
            interrupted=a["recorded_status"] == ActionStatus.STARTED,
            unconfirmed=a["status"] == "needs_confirmation",
        )
        lines.append(
            f"uncertain action {shown(a['action_key'])}: {state}; check the external "
            f"system, then `continuum reconcile {r.run_id} {a['action_id']} "
            "--occurred|--not-occurred`"
        )
    for child in r.children:
        for a in child["unresolved"]:
            fix = (
                "a live process is performing it: wait"
                if a["status"] == "in_progress"
                else f"check the external system, then `continuum reconcile "
                f"{as_typed(child['run_id'])} {a['action_id']} --occurred|--not-occurred`"
            )
            lines.append(
                f"child run {shown(child['path'])}: action {shown(a['action_key'])} "
                f"{a['status']}; {fix}"
            )
        for ap in child.get("pending_approvals", []):
            lines.append(
                f"child run {shown(child['path'])}: approval {shown(ap['approval_id'])} "
                f"awaits a decision: `continuum decide {as_typed(ap['approval_id'])} "
                "--allow|--deny --reason TEXT`"
            )
        for b in child.get("waiting_branches", []):
            lines.append(
                f"child run {shown(child['path'])}: branch {shown(b['branch_id'])} waits "
                f"for a person: `continuum resolve-branch {as_typed(child['run_id'])} "
                f"{as_typed(b['branch_id'])} --choice ...`"
            )
    if r.children:
        active = sum(1 for c in r.children if c["status"] == "active")
        lines.append(f"child runs: {len(r.children)} ({active} active)")
    if r.progress:
        p = r.progress
        lines.append(
            f"progress: {p['completed']}/{p['total'] if p['total'] is not None else '?'}"
            f" completed, {p['failed']} failed"
        )
    if r.files is not None:
        f = r.files
        lines.append(
            f"files recorded as evidence: {f.verified} as recorded, {len(f.changed)} "
            f"changed since, {len(f.missing)} missing"
        )
        lines += [f"  changed: {shown(path)}" for path in f.changed]
        lines += [f"  missing: {shown(path)}" for path in f.missing]
    if r.contract:
        lines.append(
            f"contract: {r.contract['integrity_hash'][:16]}... at head "
            f"{r.contract['head_sequence']}"
        )
    return lines


@click.command("resume")
@click.argument("run_id", required=False)
@click.option("--env", "env", multiple=True, metavar="NAME=VALUE", help=ENV_HELP)
@click.option("--expected-model", default=None, help="The model that will continue the run.")
@click.option(
    "--tolerate-unknown",
    is_flag=True,
    help="Do not block on dependencies that cannot be checked now (never on actions).",
)
@common
def resume_cmd(
    s: Settings,
    run_id: str | None,
    env: tuple[str, ...],
    expected_model: str | None,
    tolerate_unknown: bool,
) -> None:
    """Decide whether RUN (default: the latest active run) may resume. Read-only.

    Exit 0 only when the verdict is `resume`; 10 repair/replan; 20 wait or a human is
    needed; 30 anything else.
    """
    rt = runtime(s)
    r = rt.resume(
        run_id, env=parse_env(env), expected_model=expected_model, tolerate_unknown=tolerate_unknown
    )
    if r.run_id is None:
        _no_active_run(s, r, rt.runs())
    emit(s, r.model_dump(mode="json"), _recovery_lines(r), code=verdict_exit_code(r.mode))


def _no_active_run(s: Settings, r: Recovery, runs: list[RunInfo]) -> None:
    """Exit 2 saying why there is nothing to resume: no run at all, or only finished ones."""
    finished = [x for x in runs if x.status != RunStatus.ACTIVE]
    data = {
        **r.model_dump(mode="json"),
        "finished_runs": len(finished),
        "finished_run_ids": [x.run_id for x in finished[-FINISHED_LISTED:]],
    }
    if not finished:
        emit(
            s,
            data,
            [
                "no active run: this store has no runs yet; start one with "
                "`continuum start RUN --goal G`"
            ],
            code=2,
        )
    latest = finished[-1]
    emit(
        s,
        data,
        [
            f"no active run: {len(finished)} finished run{'s' if len(finished) > 1 else ''} "
            f"(latest {quoted(latest.run_id)}, {latest.status}); start a new one with "
            "`continuum start RUN --goal G`"
        ],
        code=2,
    )


@click.command("validate")
@click.argument("run_id")
@click.option("--env", "env", multiple=True, metavar="NAME=VALUE", help=ENV_HELP)
@click.option("--expected-model", default=None, help="The model that will continue the run.")
@common
def validate_cmd(
    s: Settings, run_id: str, env: tuple[str, ...], expected_model: str | None
) -> None:
    """Re-check declared dependencies and derived state against the environment now."""
    rt = runtime(s)
    evaluation = rt.evaluate(run_id, env=parse_env(env), expected_model=expected_model)
    decision, report = evaluation.decision, evaluation.validation  # the environment, observed once
    lines: list[Line] = [verdict_styled("verdict", str(decision.mode))]
    lines += [f"dependency {shown(d.name)}: {d.status}" for d in report.dependencies]
    lines += [f"{_component(c.component)}: {c.status} ({c.reason})" for c in report.invalidated]
    lines.append(f"verified: {', '.join(_component(v) for v in report.verified) or '-'}")
    emit(
        s,
        {
            "run_id": run_id,
            "verdict": str(decision.mode),
            "validation": report.model_dump(mode="json"),
            "next_allowed_action": decision.next_allowed_action,
        },
        lines,
        code=verdict_exit_code(str(decision.mode)),
    )


def _labelled(value: Any, prov: Provenance | None) -> str:
    return shown(value, limit=None) + provenance_label(prov)  # never shortened: it is vouched for


def _items(name: str, items: dict[str, Item]) -> list[Line]:
    return [f"  {name} {_labelled(i.id, i.provenance)}: {quoted(i.text)}" for i in items.values()]


def _review_lines(state: State, scope: str) -> list[Line]:
    """What a person is asked to vouch for: every value quoted and labelled with its origin."""
    p = state.progress
    lines: list[Line] = [
        f"  goal: {_labelled(state.goal.value, state.goal.provenance) if state.goal else '-'}",
        f"  progress: {p.completed}/{'?' if p.total is None else p.total} completed, {p.failed} "
        f"failed, {p.pending} pending" + provenance_label(p.provenance),
    ]
    if scope == "goal":
        lines.pop()
    elif scope == "progress":
        lines.pop(0)
    elif scope == "all":
        plan = ", ".join(quoted(step) for step in state.plan) or "-"
        lines.append(f"  plan: {plan}" + provenance_label(state.plan_provenance))
        lines.append(f"  model: {_labelled(state.model, state.model_provenance)}")
        lines += _items("finding", state.findings)
        lines += _items("decision", state.decisions)
        lines += _items("evidence", state.evidence)
    return lines


def _confirm_lines(
    result: ConfirmResult, run_id: str, shown_state: State, scope: str
) -> list[Line]:
    """What was recorded. ``shown_state`` is the state at ``through_sequence`` (the runtime
    checked its hash), so its values are the ones confirmed, labelled with their origin."""
    n, m = result.through_sequence, result.head_sequence
    lines: list[Line] = [
        f"confirmed {', '.join(result.scope)} of run {run_id} through sequence "
        f"{n} (event hash {(result.through_hash or '-')[:12]}) as human:"
    ]
    lines += _review_lines(shown_state, scope)
    if m > n:
        lines.append(
            f"the run moved on to sequence {m} while you were reading; this confirmation "
            f"covers 1..{n} only; run `continuum confirm {run_id}` again to review the rest"
        )
    return lines


@click.command("confirm")
@click.argument("run_id")
@click.option(
    "--scope",
    type=click.Choice(["goal", "progress", "all"]),
    default=None,
    help="What to confirm (default: goal and progress).",
)
@click.option(
    "--yes",
    "-y",
    is_flag=True,
    help="Do not ask: for a person's own script. Without it, confirm asks on a "
    "terminal and refuses when stdin is not one.",
)
@common
def confirm_cmd(s: Settings, run_id: str, scope: str | None, yes: bool) -> None:
    """As a human, vouch for the self-reported state of RUN as shown (origin human).

    Shows the state at the run's current sequence N (and its event hash), asks, and
    confirms exactly events 1..N, even if the agent records more while you read; anything
    self-reported later needs a new confirmation. A person must answer at a terminal:
    without --yes, confirm refuses when stdin is not a terminal (an agent with a shell is
    not a person). Text in double quotes was written by an agent and is shown escaped.
    """
    require_person(yes, "a confirmation", f"continuum confirm {run_id}")
    rt = runtime(s, origin=Origin.HUMAN)
    state = rt.state(run_id)  # computed once: what is shown is what is confirmed
    chosen = scope or "default"
    if not yes:
        write_lines(
            s,
            [
                AGENT_TEXT_NOTICE,
                f"run {run_id} through sequence {state.sequence} "
                f"(event hash {(state.head_hash or '-')[:12]}):",
                *_review_lines(state, chosen),
            ],
            err=True,
        )
        if not ask(s, "Confirm this as true?"):
            raise UsageError(
                "confirmation declined; nothing was recorded",
                code="usage.declined",
                hint="run again when you have checked the state",
            )
    result = rt.confirm(
        run_id,
        scope=chosen,
        through_sequence=state.sequence,
        expect_hash=state.head_hash,
        via=person_via(yes),
    )
    verdict = rt.resume(run_id)
    lines = ([] if not yes else [AGENT_TEXT_NOTICE]) + _confirm_lines(result, run_id, state, chosen)
    lines.append(verdict_styled("verdict now", verdict.mode))
    if not verdict.safe:
        lines.append(f"next allowed action: {verdict.next_allowed_action}")
    emit(
        s,
        {
            "confirmation": result.model_dump(mode="json"),
            "verdict": verdict.mode,
            "next_allowed_action": verdict.next_allowed_action,
        },
        lines,
        code=verdict_exit_code(verdict.mode),
    )


@click.command("checkpoint")
@click.argument("run_id")
@click.option("--reason", default=None, help="Why the checkpoint is taken.")
@click.option(
    "--env",
    "env",
    multiple=True,
    metavar="NAME=VALUE",
    help="Declare dependencies (name=version) before checkpointing.",
)
@common
def checkpoint_cmd(s: Settings, run_id: str, reason: str | None, env: tuple[str, ...]) -> None:
    """Store a semantic checkpoint of RUN's state (sealed with a hash, in the log)."""
    info = runtime(s).checkpoint(run_id, reason=reason, env=parse_env(env) or None)
    emit(
        s,
        {"checkpoint": info.model_dump(mode="json")},
        [f"checkpoint of {run_id} through sequence {info.sequence} (event #{info.event_sequence})"],
    )


@click.command("declare")
@click.argument("run_id")
@click.option("--env", "env", multiple=True, metavar="NAME=VERSION", help="A static dependency.")
@click.option(
    "--file", "files", multiple=True, metavar="PATH", help="A file dependency (content hash)."
)
@click.option("--git", "gits", multiple=True, metavar="DIR", help="A git dependency (HEAD commit).")
@common
def declare_cmd(
    s: Settings, run_id: str, env: tuple[str, ...], files: tuple[str, ...], gits: tuple[str, ...]
) -> None:
    """Declare what RUN depends on, so a resume re-checks it first."""
    event = runtime(s).declare_dependencies(
        run_id, env=parse_env(env), files=list(files), git=list(gits)
    )
    if event is None:
        raise UsageError(
            "nothing to declare",
            code="usage.nothing_to_declare",
            hint="pass --env NAME=VERSION, --file PATH or --git DIR",
        )
    deps = event.payload["dependencies"]
    emit(
        s,
        {"event": event.model_dump(mode="json")},
        [f"declared {shown(d['name'])} ({d['provider']})" for d in deps],
    )


@click.command("show-contract")
@click.argument("run_id")
@click.option("--env", "env", multiple=True, metavar="NAME=VALUE", help=ENV_HELP)
@click.option("--expected-model", default=None, help="The model that will continue the run.")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write the contract JSON to this file.",
)
@common
def show_contract_cmd(
    s: Settings, run_id: str, env: tuple[str, ...], expected_model: str | None, output: str | None
) -> None:
    """Show the sealed recovery contract for RUN (deterministic for the same log and env):
    labelled lines for a person; the exact JSON with --json, or written to -o FILE."""
    _, _, decision, contract, _ = runtime(s).evaluate(
        run_id, env=parse_env(env), expected_model=expected_model
    )
    if output:
        with private_file(Path(output)) as f:
            f.write(contract.to_json() + "\n")
    code = verdict_exit_code(contract.verdict)
    lines = _contract_lines(contract)
    if output:
        lines.append(f"contract JSON written to {output}")
    else:
        lines.append("the exact JSON: --json, or -o FILE for `continuum verify-contract FILE`")
    emit(s, {"contract": contract.model_dump(mode="json")}, lines, code=code)


def _contract_lines(c: RecoveryContract) -> list[Line]:
    """The contract for a person: a few labelled lines (the JSON is for machines)."""
    lines: list[Line] = [
        [verdict_styled("verdict", c.verdict), "  (safe to resume)" if c.safe else ""],
        f"run: {c.run_id}",
        f"safe: {'yes' if c.safe else 'no'} ({c.safety_status})",
        f"next allowed action: {c.next_allowed_action}",
        f"why: {c.reason}",
    ]
    if c.required_actions:
        lines.append("required actions:")
        lines += [f"  {i}. {a}" for i, a in enumerate(c.required_actions, 1)]
    else:
        lines.append("required actions: none")
    lines += [
        f"head: {c.head_sequence} {c.head_hash or '-'}",
        "checkpoint: "
        + ("none" if c.checkpoint_version is None else f"through sequence {c.checkpoint_version}"),
    ]
    if c.invalidated_components:
        lines.append("invalidated components:")
        lines += [
            f"  {_component(i.component)}: {i.status} ({i.reason})"
            for i in c.invalidated_components
        ]
    else:
        lines.append("invalidated components: none")
    lines.append(f"integrity hash: {c.integrity_hash}")
    return lines


@click.command("verify-contract")
@click.argument("file", type=click.Path(dir_okay=False))
@common
def verify_contract_cmd(s: Settings, file: str) -> None:
    """Check a contract FILE: intact seal, and still bound to the run's current head."""
    try:
        text = Path(file).read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(
            f"cannot read {file}: {e.strerror}",
            code="usage.bad_file",
            hint="pass the path of a contract written by show-contract",
        ) from e
    result = runtime(s).verify_contract(text)
    lines: list[Line] = [
        f"contract intact and current: run {quoted(result['run_id'])}, verdict "
        f"{result['verdict']}, head {result['head_sequence']}"
    ]
    if result["reobserved"]:
        lines.append(
            "re-observed now (the contract's caller had supplied them): "
            + ", ".join(quoted(n) for n in result["reobserved"])
        )
    if result["unverified_inputs"]:
        lines.append(
            "taken on trust from the contract (nothing here can observe them): "
            + ", ".join(quoted(n) for n in result["unverified_inputs"])
        )
    emit(s, result, lines)


COMMANDS = [
    resume_cmd,
    validate_cmd,
    confirm_cmd,
    checkpoint_cmd,
    declare_cmd,
    show_contract_cmd,
    verify_contract_cmd,
]

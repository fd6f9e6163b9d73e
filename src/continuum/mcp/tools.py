"""The ten continuum tools: thin wrappers over the runtime facade.

Each mutating tool first authorizes the caller (deny by default, see ``auth.py``);
a denial or a domain error becomes an error result the agent can read. Everything
written here has origin ``external_agent``, except a confirmation that presented the
operator's confirm token, which is recorded as ``human`` (the token is the human's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema

from continuum.errors import ContinuumError, NotFoundError
from continuum.ledger import InterceptResult
from continuum.log import get_logger
from continuum.mcp.auth import Caller, Policy, caller_from_context, log_denial
from continuum.runtime import Continuum, Recovery
from continuum.store import open_store
from continuum.types import Origin

_log = get_logger("continuum.mcp")

RunId = Annotated[str, Field(min_length=1, max_length=200, description="The run's id.")]
Env = Annotated[dict[str, str] | None, Field(
    description="The current environment as {name: version}: the value each declared "
                "dependency has now (e.g. {\"dataset\": \"v2\"}).")]
Model = Annotated[str | None, Field(description="The model that will continue the run.")]
ActionKey = Annotated[str, Field(min_length=1, description="The action_key (or action_id) "
                                                           "returned by continuum_intercept_action.")]
# strict: JSON true, 2.0 or "2" is not a count (lax pydantic would record true as 1),
# and a wrongly typed argument must be an error naming the field (SPEC 9). Published as
# a plain integer (omit it for "unchanged"): clients that convert string input by the
# schema's type, such as the MCP Inspector CLI, then send a number, not "3".
Count = Annotated[int | None, Field(ge=0, strict=True),
                  WithJsonSchema({"type": "integer", "minimum": 0})]

MAX_JSON_DEPTH = 64
"""Deepest JSON value kept from an agent (``arguments``, ``result``). Deeper values were
stored and then broke every later listing of the run (pydantic stops serializing at about
255 levels), so they are refused up front, naming the field."""


def _shallow_json(value: Any) -> Any:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:  # iterative: a deep value must not exhaust the stack here either
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        if children and level > MAX_JSON_DEPTH:
            raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep; send a flatter value")
        stack.extend((child, level + 1) for child in children)
    return value


READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                            open_world_hint=False)
MUTATING = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                           open_world_hint=False)


class ValidateResult(BaseModel):
    run_id: str
    verdict: str
    next_allowed_action: str
    dependencies: list[dict[str, Any]]
    invalidated: list[dict[str, Any]]
    verified: list[str]


class ActionsResult(BaseModel):
    run_id: str
    actions: list[dict[str, Any]]
    unresolved: list[str] = Field(description="action_keys still started or unknown, or failed "
                                              "on an agent's word: a person must settle them")


class ProgressResult(BaseModel):
    run_id: str
    goal: str | None
    progress: dict[str, Any]
    head_sequence: int
    needs_human_confirmation: bool


class CheckpointResult(BaseModel):
    run_id: str
    sequence: int
    event_sequence: int
    state_hash: str


class ActionResult(BaseModel):
    run_id: str
    action_key: str
    action_id: str
    status: str
    attempt: int
    external_id: str | None
    guidance: str


class ConfirmResult(BaseModel):
    run_id: str
    through_sequence: int
    scope: list[str]
    confirmed: dict[str, Any]
    verdict: str


_NOT_DONE_ON_YOUR_WORD = (
    "Recorded as not done, on your word. Only a person may confirm that an effect did not "
    "happen: until one runs `continuum reconcile` for it, a later intercept answers "
    "needs_confirmation and you must not perform it (unless its replay contract is safe or "
    "idempotent).")


class Tools:
    """The state the tools share: the store URL, the policy, lazily opened runtimes."""

    def __init__(self, url: str, policy: Policy, cwd: Path | None = None) -> None:
        self.url, self.policy, self.cwd = url, policy, cwd
        self._agent: Continuum | None = None

    # -- plumbing --------------------------------------------------------------------------

    def runtime(self, *, create: bool) -> Continuum | None:
        """The agent-origin facade; None when the store does not exist and may not be made."""
        if self._agent is None:
            try:
                store = open_store(self.url, create=create)
            except NotFoundError:
                if create:
                    raise
                return None
            self._agent = Continuum(store, origin=Origin.EXTERNAL_AGENT)
        return self._agent

    def renew_leases(self) -> int:
        return self._agent.ledger.renew_held_leases() if self._agent is not None else 0

    def writer(self) -> Continuum:
        rt = self.runtime(create=True)
        assert rt is not None
        return rt

    def reader(self, run_id: str | None) -> Continuum:
        rt = self.runtime(create=False)
        if rt is None:
            raise NotFoundError(f"run {run_id!r} not found: the store is empty", code="not_found.run",
                                hint="start the run with continuum_record_progress (goal, total)")
        return rt

    def authorize(self, ctx: Context, tool: str, run_id: str | None, *, confirm: bool = False) -> Caller:
        caller = caller_from_context(ctx)
        decision = self.policy.authorize(tool, caller, confirm=confirm, run_id=run_id)
        if not decision.allowed:
            log_denial(decision)
            raise ToolError(decision.text())
        return caller

    @contextmanager
    def domain_errors(self, tool: str) -> Iterator[None]:
        """Turn continuum errors into readable error results (the SDK would hide them)."""
        try:
            yield
        except ContinuumError as e:
            _log.info("mcp.tool_error", tool=tool, code=e.code)
            raise ToolError(f"{tool} failed [{e.code}]: {e.message}. What to do: {e.hint}") from e

    # -- read-only tools ------------------------------------------------------------------

    def validate(self, run_id: RunId, env: Env = None, expected_model: Model = None) -> ValidateResult:
        with self.domain_errors("continuum_validate"):
            rt = self.reader(run_id)
            _, decision, _ = rt.evaluate(run_id, env=env, expected_model=expected_model)
            report = rt.validate(run_id, env=env, expected_model=expected_model)
            return ValidateResult(
                run_id=run_id, verdict=str(decision.mode),
                next_allowed_action=decision.next_allowed_action,
                dependencies=[d.model_dump(mode="json") for d in report.dependencies],
                invalidated=[c.model_dump(mode="json") for c in report.invalidated],
                verified=report.verified)

    def resume(self, run_id: Annotated[str | None, Field(description="The run to resume; omit "
                                                         "for the latest active run.")] = None,
               env: Env = None, expected_model: Model = None) -> Recovery:
        with self.domain_errors("continuum_resume"):
            rt = self.runtime(create=False)
            if rt is None and run_id is None:
                return Recovery(run_id=None, mode="no_active_run", safe=False,
                                next_allowed_action=None, rationale="the store holds no runs yet",
                                required_actions=[], uncertain_actions=[], progress=None,
                                contract=None)
            return self.reader(run_id).resume(run_id, env=env, expected_model=expected_model)

    def list_actions(self, run_id: RunId) -> ActionsResult:
        with self.domain_errors("continuum_list_actions"):
            actions = self.reader(run_id).actions(run_id)
            return ActionsResult(run_id=run_id, actions=[a.model_dump(mode="json") for a in actions],
                                 unresolved=[a.action_key for a in actions if a.needs_human])

    # -- mutating tools -------------------------------------------------------------------

    def record_progress(self, run_id: RunId, ctx: Context, completed: Count = None,
                        total: Count = None,
                        goal: Annotated[str | None, Field(description="The run's goal; creates "
                                                          "the run on first use.")] = None,
                        failed: Count = None) -> ProgressResult:
        self.authorize(ctx, "continuum_record_progress", run_id)
        with self.domain_errors("continuum_record_progress"):
            rt = self.writer()
            state = rt.record_progress(run_id, completed=completed, total=total, failed=failed,
                                       goal=goal)
            return ProgressResult(run_id=run_id, goal=state.goal.value if state.goal else None,
                                  progress=state.progress.model_dump(mode="json", exclude={"provenance"}),
                                  head_sequence=state.sequence,
                                  needs_human_confirmation=bool(state.unreviewed()))

    def checkpoint(self, run_id: RunId, ctx: Context,
                   reason: Annotated[str | None, Field(description="Why now.")] = None,
                   env: Annotated[dict[str, str] | None, Field(
                       description="Declare dependencies {name: version} the work relies on; a "
                                   "resume re-checks them.")] = None) -> CheckpointResult:
        self.authorize(ctx, "continuum_checkpoint", run_id)
        with self.domain_errors("continuum_checkpoint"):
            info = self.writer().checkpoint(run_id, reason=reason, env=env)
            return CheckpointResult(**info.model_dump())

    def intercept_action(self, run_id: RunId, action_type: Annotated[str, Field(
                             min_length=1, description="Kind of side effect, e.g. send_invoice.")],
                         ctx: Context,
                         arguments: Annotated[dict[str, Any] | None, Field(
                             description="The side effect's arguments (JSON object)."),
                             AfterValidator(_shallow_json)] = None,
                         key: Annotated[str | None, Field(description="A stable business key, "
                                                          "e.g. invoice:INV-001 (recommended).")] = None,
                         replay: Literal["never", "safe", "idempotent", "reconcile"] | None = None,
                         ) -> InterceptResult:
        self.authorize(ctx, "continuum_intercept_action", run_id)
        with self.domain_errors("continuum_intercept_action"):
            return self.writer().intercept(run_id, action_type, arguments, key=key, replay=replay)

    def _action(self, run_id: str, rec: Any, guidance: str) -> ActionResult:
        return ActionResult(run_id=run_id, action_key=rec.action_key, action_id=rec.action_id,
                            status=str(rec.status), attempt=rec.attempt,
                            external_id=rec.external_id, guidance=guidance)

    def complete_action(self, run_id: RunId, action_key: ActionKey, ctx: Context,
                        external_id: Annotated[str | None, Field(
                            description="The external system's id for the effect.")] = None,
                        result: Annotated[Any, Field(description="Any JSON result to keep."),
                                          AfterValidator(_shallow_json)] = None,
                        ) -> ActionResult:
        self.authorize(ctx, "continuum_complete_action", run_id)
        with self.domain_errors("continuum_complete_action"):
            rec = self.writer().complete(run_id, action_key, external_id=external_id, result=result)
            return self._action(run_id, rec, "Recorded as done; a later intercept returns "
                                              "proceed=false with this result.")

    def fail_action(self, run_id: RunId, action_key: ActionKey, ctx: Context,
                    error: Annotated[str | None, Field(description="What went wrong.")] = None,
                    certain: Annotated[bool, Field(strict=True, description="True only if the effect "
                                                   "certainly did NOT happen.")] = False) -> ActionResult:
        self.authorize(ctx, "continuum_fail_action", run_id)
        with self.domain_errors("continuum_fail_action"):
            rec = self.writer().fail(run_id, action_key, error=error, certain=certain)
            return self._action(run_id, rec, _NOT_DONE_ON_YOUR_WORD
                                if certain else "Outcome unknown: check the external system, then "
                                "call continuum_reconcile_action.")

    def reconcile_action(self, run_id: RunId, action_key: ActionKey,
                         occurred: Annotated[bool, Field(strict=True, description="Whether the side "
                                                         "effect happened, as checked in the external system.")],
                         ctx: Context,
                         external_id: Annotated[str | None, Field(description="Its external id.")] = None,
                         note: Annotated[str | None, Field(description="How it was checked.")] = None,
                         ) -> ActionResult:
        self.authorize(ctx, "continuum_reconcile_action", run_id)
        with self.domain_errors("continuum_reconcile_action"):
            rec = self.writer().reconcile(run_id, action_key, occurred=occurred,
                                          external_id=external_id, note=note)
            return self._action(run_id, rec, _NOT_DONE_ON_YOUR_WORD if rec.failure_unconfirmed
                                else "Settled. Call continuum_resume for the verdict.")

    def confirm(self, run_id: RunId, ctx: Context) -> ConfirmResult:
        caller = self.authorize(ctx, "continuum_confirm", run_id, confirm=True)
        with self.domain_errors("continuum_confirm"):
            human = Continuum(self.writer().store, origin=Origin.HUMAN)
            result = human.confirm(run_id)
            _log.warning("mcp.confirmed_with_confirm_token", run_id=run_id, caller=caller.name,
                         through_sequence=result.through_sequence)
            verdict = human.resume(run_id)
            return ConfirmResult(run_id=run_id, through_sequence=result.through_sequence,
                                 scope=result.scope, confirmed=result.confirmed, verdict=verdict.mode)


DESCRIPTIONS = {
    "continuum_resume": (
        "Call this FIRST after any restart, crash or context loss, before doing any work. "
        "Returns the verdict (mode): 'resume' means continue; anything else means follow "
        "next_allowed_action first. uncertain_actions lists side effects that may or may not "
        "have happened: never redo them; check the external system and call "
        "continuum_reconcile_action with their action_key. Without run_id it picks the latest "
        "active run (mode 'no_active_run' if there is none). Read-only."),
    "continuum_validate": (
        "Re-check the run's declared dependencies against the environment now (pass env as "
        "{name: version}) and list which derived state is stale, conflicted or invalid. Read-only."),
    "continuum_list_actions": (
        "List the run's side effects with their status (started, completed, failed, unknown). "
        "'unresolved' lists those you must reconcile before resuming. Read-only."),
    "continuum_record_progress": (
        "Record progress as absolute numbers (completed, total, failed) and the goal; creates "
        "the run on first use. Self-reported progress needs a human confirmation before a "
        "resume is judged safe."),
    "continuum_checkpoint": (
        "Store a semantic checkpoint of the run's state; pass env {name: version} to declare "
        "the dependencies your work relies on, so a later resume re-checks them."),
    "continuum_intercept_action": (
        "Call BEFORE every external side effect (sending, writing outside your workspace, "
        "paying, migrating). Route every side effect through intercept, perform, complete. "
        "If proceed is true: perform it now, then call continuum_complete_action with the "
        "action_key (or continuum_fail_action). If proceed is false: do NOT perform it; read "
        "status and guidance ('completed' returns the previous result; 'unknown' or "
        "'reconcile_required' means check the external system and reconcile). Use a stable "
        "key such as invoice:INV-001."),
    "continuum_complete_action": (
        "Record that the side effect of an intercepted action happened, with the external "
        "system's id and any result."),
    "continuum_fail_action": (
        "Record that an intercepted action failed. Leave certain=false unless you KNOW the "
        "effect did not happen: then it is recorded unknown and must be reconciled. Even with "
        "certain=true, only a person may confirm that it did not happen before it runs again."),
    "continuum_reconcile_action": (
        "Settle an action reported unknown or reconcile_required after checking the external "
        "system: occurred=true (it happened; give external_id) or occurred=false. occurred=false "
        "from an agent does not let the action run again until a person confirms it."),
    "continuum_confirm": (
        "Human confirmation of the run's self-reported goal and progress. Refused unless the "
        "operator's confirm token is presented as _meta.confirmToken; otherwise a person must "
        "run `continuum confirm <run_id>` at a terminal (an agent must never run it itself)."),
}

INSTRUCTIONS = (
    "continuum keeps a crash-safe record of this agent's run. After any restart call "
    "continuum_resume first and follow next_allowed_action. Route every external side effect "
    "through continuum_intercept_action (perform only if proceed is true), then "
    "continuum_complete_action or continuum_fail_action. Never redo an action reported unknown: "
    "check the external system and call continuum_reconcile_action."
)


def register(server: MCPServer[Any], tools: Tools) -> None:
    table: list[tuple[str, Callable[..., Any], ToolAnnotations]] = [
        ("continuum_validate", tools.validate, READ_ONLY),
        ("continuum_resume", tools.resume, READ_ONLY),
        ("continuum_list_actions", tools.list_actions, READ_ONLY),
        ("continuum_record_progress", tools.record_progress, MUTATING),
        ("continuum_checkpoint", tools.checkpoint, MUTATING),
        ("continuum_intercept_action", tools.intercept_action, MUTATING),
        ("continuum_complete_action", tools.complete_action, MUTATING),
        ("continuum_fail_action", tools.fail_action, MUTATING),
        ("continuum_reconcile_action", tools.reconcile_action, MUTATING),
        ("continuum_confirm", tools.confirm, MUTATING),
    ]
    for name, fn, hints in table:
        server.add_tool(fn, name=name, description=DESCRIPTIONS[name], annotations=hints,
                        structured_output=True)
    forbid_unknown_arguments(server)


def forbid_unknown_arguments(server: MCPServer[Any]) -> None:
    """Refuse arguments a tool does not have, naming them.

    The SDK's argument models ignore unknown names, so a misspelled ``complete`` (for
    ``completed``) would be dropped silently and the call would "succeed" doing nothing.
    Each tool gets a subclass of its argument model that forbids extras; the published
    inputSchema says so too (``additionalProperties: false``).
    """
    for tool in server._tool_manager.list_tools():  # SDK 2.3: no public hook for this
        base = tool.fn_metadata.arg_model
        strict: Any = type(
            f"{base.__name__}Strict", (base,),
            {"model_config": ConfigDict(**{**base.model_config, "extra": "forbid"}),
             "__module__": base.__module__})
        tool.fn_metadata.arg_model = strict
        tool.parameters = strict.model_json_schema(by_alias=True)

"""The thirteen continuum tools: thin wrappers over the runtime facade.

Each mutating tool first authorizes the caller (deny by default, see ``auth.py``);
a denial or a domain error becomes an error result the agent can read. Everything
written here has origin ``external_agent``, except a confirmation that presented the
operator's confirm token, which is recorded as ``human`` (the token is the human's).
"""

from __future__ import annotations

import difflib
import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools.base import Tool
from mcp_types import ToolAnnotations
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema

from continuum.errors import ContinuumError, NotFoundError
from continuum.eventlog.limits import MAX_DEPTH
from continuum.eventlog.payloads import via_of
from continuum.ledger.gate import InterceptResult
from continuum.log import get_logger
from continuum.mcp.host_arguments import without_control_arguments
from continuum.mcp.instructions import INSTRUCTIONS as INSTRUCTIONS
from continuum.mcp.owners import OwnedRuntimes
from continuum.mcp.roles import authorize_call, grant_from_context, log_role_denial
from continuum.runtime.facade import Continuum
from continuum.runtime.results import BranchVerdict, Observed, Recovery
from continuum.serving.auth import Caller, Policy, caller_from_context, log_denial
from continuum.store import DEFAULT_PAGE, MAX_PAGE, open_store
from continuum.types import Origin
from continuum.untrusted import terminal_safe

_log = get_logger("continuum.mcp")

RunId = Annotated[str, Field(min_length=1, max_length=200, description="The run's id.")]
Env = Annotated[
    dict[str, str] | None,
    Field(
        description="The current environment as {name: version}: the value each declared "
        'dependency has now (e.g. {"dataset": "v2"}).'
    ),
]
Model = Annotated[str | None, Field(description="The model that will continue the run.")]
Hash = Annotated[str | None, Field(min_length=1, max_length=200)]
ActionKey = Annotated[
    str,
    Field(
        min_length=1,
        description="The action_key (or action_id) returned by continuum_intercept_action.",
    ),
]
# strict: JSON true, 2.0 or "2" is not a count (lax pydantic would record true as 1),
# and a wrongly typed argument must be an error naming the field (references/contract.md §9). Published as
# a plain integer (omit it for "unchanged"): clients that convert string input by the
# schema's type, such as the MCP Inspector CLI, then send a number, not "3".
Count = Annotated[
    int | None, Field(ge=0, strict=True), WithJsonSchema({"type": "integer", "minimum": 0})
]

Usd = Annotated[
    float | None,
    Field(ge=0, strict=True, description="US dollars (what the effect costs, e.g. 0.02)."),
    WithJsonSchema({"type": "number", "minimum": 0}),
]
Tokens = Annotated[
    int | None,
    Field(ge=0, strict=True, description="Tokens."),
    WithJsonSchema({"type": "integer", "minimum": 0}),
]


def _cost(usd: float | None, tokens: int | None) -> dict[str, Any] | None:
    given = {"usd": usd, "tokens": tokens}
    return {k: v for k, v in given.items() if v is not None} or None


MAX_JSON_DEPTH = MAX_DEPTH
"""Deepest JSON value kept from an agent (``arguments``, ``result``): the store's one
limit for every entry (``limits.py``), checked here first so the error names the MCP
argument."""


def _shallow_json(value: Any) -> Any:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:  # iterative: a deep value must not exhaust the stack here either
        item, level = stack.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        )
        if children and level > MAX_JSON_DEPTH:
            raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep; send a flatter value")
        stack.extend((child, level + 1) for child in children)
    return value


READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
MUTATING = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)


class HandoffResult(BaseModel):
    run_id: str
    sequence: int = Field(description="The handoff_recorded event's sequence")
    note: str


class ValidateResult(BaseModel):
    run_id: str
    verdict: str
    next_allowed_action: str
    dependencies: list[dict[str, Any]]
    invalidated: list[dict[str, Any]]
    verified: list[str]


class ActionsResult(BaseModel):
    run_id: str
    actions: list[dict[str, Any]] = Field(
        description="This page: open actions (started, unknown, failed) first, then settled ones"
    )
    unresolved: list[str] = Field(
        description="action_keys on this page still started or "
        "unknown, or failed on an agent's word: a person "
        "must settle them (open actions come first, so "
        "the first page lists them)"
    )
    next_cursor: str | None = Field(
        default=None, description="Pass as cursor for the next page; null after the last page"
    )


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
    "idempotent)."
)


START_A_RUN = "start one with continuum_record_progress (run_id, goal, total; completed 0)"
MCP_HINTS = {
    "not_found.run": "check run_id (continuum_resume without run_id picks the latest active "
    "run), or start the run with continuum_record_progress (goal, total)",
    "not_found.action": "call continuum_list_actions for this run and use an action_key it lists",
    "not_found.store": f"the store holds no runs yet: {START_A_RUN}",
    "ledger.invalid_transition": "call continuum_list_actions to see the action's state; a "
    "settled action stays settled",
    "ledger.owner_alive": "another live process is performing this action: do not perform or "
    "settle it; call continuum_intercept_action again later",
    "ledger.run_finished": "this run is finished: record new work in a new run "
    "(continuum_record_progress with a new run_id)",
}


def mcp_hint(error: ContinuumError) -> str:
    """What an agent with these tools can do about ``error``."""
    if error.code in MCP_HINTS:
        return MCP_HINTS[error.code]
    if error.code.startswith("integrity."):
        return (
            "stop: the run's log or index is damaged; ask a person to run "
            "`continuum verify` on the store and decide"
        )
    return error.hint


@dataclass(frozen=True)
class ToolSpec:
    """One tool, declared once: its name, whether it only reads (its hints, and no
    authorization), whether it needs the confirm token, and what the agent is told."""

    name: str
    read_only: bool
    description: str
    confirm: bool = False


F = TypeVar("F", bound=Callable[..., Any])


def tool(
    name: str, *, read_only: bool, description: str, confirm: bool = False
) -> Callable[[F], F]:
    """Declare a ``Tools`` method as the MCP tool ``name`` (see ``register``)."""

    def declare(fn: F) -> F:
        fn.__continuum_tool__ = ToolSpec(name, read_only, description, confirm)  # type: ignore[attr-defined]
        return fn

    return declare


class Tools:
    """The state the tools share: the store URL, the policy, lazily opened runtimes.

    ``by_role`` (the HTTP transport): every call, read-only ones too, is decided by the
    role of the request's bearer token (``roles.py``) instead of the stdio allowlist.
    """

    def __init__(
        self, url: str, policy: Policy, cwd: Path | None = None, *, by_role: bool = False
    ) -> None:
        self.url, self.policy, self.cwd, self.by_role = url, policy, cwd, by_role
        self._agent: Continuum | None = None
        self._owners: OwnedRuntimes | None = None  # over HTTP: one runtime per owner
        # Tools run on worker threads (HTTP serves many clients at once): one runtime,
        # so the leases of the actions it holds are the ones renew_leases keeps fresh.
        self._opening = threading.Lock()

    # -- plumbing --------------------------------------------------------------------------

    def runtime(self, *, create: bool) -> Continuum | None:
        """The agent-origin facade; None when the store does not exist and may not be made."""
        with self._opening:
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
        """Renew the leases of the actions being performed (blocking store I/O: the server
        calls it on a worker thread, never on the event loop)."""
        held = self._agent.ledger.renew_held_leases() if self._agent is not None else 0
        return held + (self._owners.renew_leases() if self._owners is not None else 0)

    @contextmanager
    def acting(self, ctx: Context | None) -> Iterator[Continuum]:
        """The runtime whose ledger owns what this call intercepts and may settle: over stdio
        the process's (``writer``); over HTTP the call's session, or for a per-request call
        its token and client name (``owners.py``)."""
        if not self.by_role:
            yield self.writer()
            return
        grant = grant_from_context(ctx)
        if grant is None or ctx is None:  # authorize() refuses such a call first; no guessing
            raise ToolError("the request carried no verified bearer token; nothing was done")
        store = self.writer().store
        with self._opening:
            if self._owners is None:
                self._owners = OwnedRuntimes(store)
            owners = self._owners
        with owners.use(ctx, grant, caller_from_context(ctx)) as rt:
            yield rt

    def writer(self) -> Continuum:
        rt = self.runtime(create=True)
        assert rt is not None
        return rt

    def reader(self, run_id: str | None) -> Continuum:
        rt = self.runtime(create=False)
        if rt is None:
            raise NotFoundError(
                f"run {run_id!r} not found: the store is empty",
                code="not_found.run",
                hint="start the run with continuum_record_progress (goal, total)",
            )
        return rt

    def authorize(
        self, ctx: Context | None, tool: str, run_id: str | None, *, confirm: bool = False
    ) -> Caller:
        caller = caller_from_context(ctx) if ctx is not None else Caller(None)
        if self.by_role:
            grant = grant_from_context(ctx)
            decision = authorize_call(
                tool, grant, caller, policy=self.policy, confirm=confirm, run_id=run_id
            )
            if not decision.allowed:
                log_role_denial(decision, grant)
                raise ToolError(decision.text())
            return caller
        decision = self.policy.authorize(tool, caller, confirm=confirm, run_id=run_id)
        if not decision.allowed:
            log_denial(decision)
            raise ToolError(decision.text())
        return caller

    @contextmanager
    def domain_errors(self, tool: str) -> Iterator[None]:
        """Turn continuum errors into readable error results (the SDK would hide them).

        The core's hints speak of the CLI; an agent here has these tools, so the hint is
        the one for this edge where the two differ (``MCP_HINTS``).
        """
        try:
            yield
        except ContinuumError as e:
            _log.info("mcp.tool_error", tool=tool, code=e.code)
            hint = mcp_hint(e)
            raise ToolError(f"{tool} failed [{e.code}]: {e.message}. What to do: {hint}") from e

    # -- read-only tools ------------------------------------------------------------------

    @tool(
        "continuum_validate",
        read_only=True,
        description=(
            "Re-check the run's declared dependencies against the environment now (pass env "
            "as {name: version}) and list which derived state is stale, conflicted or "
            "invalid. Read-only."
        ),
    )
    def validate(
        self,
        run_id: RunId,
        env: Env = None,
        expected_model: Model = None,
        ctx: Context | None = None,
    ) -> ValidateResult:
        rt = self.reader(run_id)
        evaluation = rt.evaluate(run_id, env=env, expected_model=expected_model)
        decision, report = evaluation.decision, evaluation.validation  # observed once
        return ValidateResult(
            run_id=run_id,
            verdict=str(decision.mode),
            next_allowed_action=decision.next_allowed_action,
            dependencies=[d.model_dump(mode="json") for d in report.dependencies],
            invalidated=[c.model_dump(mode="json") for c in report.invalidated],
            verified=report.verified,
        )

    @tool(
        "continuum_resume",
        read_only=True,
        description=(
            "Call this FIRST after any restart, crash or context loss, before doing any work. "
            "Returns the verdict (mode): 'resume' means continue; anything else means follow "
            "next_allowed_action first. uncertain_actions lists side effects that may or may "
            "not have happened: never redo them; check the external system and call "
            "continuum_reconcile_action with their action_key. Without run_id it picks the "
            "latest active run (mode 'no_active_run' if there is none). Read-only."
        ),
    )
    def resume(
        self,
        run_id: Annotated[
            str | None, Field(description="The run to resume; omit for the latest active run.")
        ] = None,
        env: Env = None,
        expected_model: Model = None,
        prompt_hash: Annotated[
            Hash, Field(description="A hash of the prompt (system prompt, instructions) now.")
        ] = None,
        tool_schema_hashes: Annotated[
            dict[str, str] | None,
            Field(
                description="The tools' schemas now, as {action_type: hash}: open actions "
                "recorded under another one are listed in version_drift."
            ),
        ] = None,
        ctx: Context | None = None,
    ) -> Recovery:
        rt = self.runtime(create=False)
        if rt is None and run_id is None:
            return Recovery(
                run_id=None,
                mode="no_active_run",
                safe=False,
                next_allowed_action=None,
                rationale=f"the store holds no runs yet: {START_A_RUN}",
                required_actions=[],
                uncertain_actions=[],
                progress=None,
                contract=None,
            )
        versions = {
            "model": expected_model,
            "prompt_hash": prompt_hash,
            "tool_schema_hashes": tool_schema_hashes,
        }
        answer = self.reader(run_id).resume(
            run_id,
            env=env,
            expected_model=expected_model,
            versions={k: v for k, v in versions.items() if v is not None} or None,
        )
        if answer.mode == "no_active_run":  # say how to start one, in the agent's own tools
            answer = answer.model_copy(update={"rationale": f"{answer.rationale}: {START_A_RUN}"})
        return answer

    @tool(
        "continuum_list_actions",
        read_only=True,
        description=(
            "List the run's side effects with their status (started, completed, failed, "
            "unknown), a page at a time: open ones first, then settled ones; pass next_cursor "
            "back as cursor for more. 'unresolved' lists those you must reconcile before "
            "resuming. Read-only."
        ),
    )
    def list_actions(
        self,
        run_id: RunId,
        cursor: Annotated[
            str | None,
            Field(
                max_length=40,
                description="next_cursor of the previous page; omit for the first page",
            ),
        ] = None,
        limit: Annotated[
            int,
            Field(
                ge=1,
                le=MAX_PAGE,
                strict=True,
                description=(f"Actions per page (default {DEFAULT_PAGE}, at most {MAX_PAGE})"),
            ),
        ] = DEFAULT_PAGE,
        ctx: Context | None = None,
    ) -> ActionsResult:
        page = self.reader(run_id).actions_page(run_id, cursor=cursor, limit=limit)
        return ActionsResult(
            run_id=run_id,
            actions=[a.model_dump(mode="json") for a in page.actions],
            unresolved=[a.action_key for a in page.actions if a.needs_human],
            next_cursor=page.next_cursor,
        )

    # -- mutating tools -------------------------------------------------------------------

    @tool(
        "continuum_record_progress",
        read_only=False,
        description=(
            "Record progress as absolute numbers (completed, total, failed) and the goal; "
            "creates the run on first use. Self-reported progress needs a human confirmation "
            "before a resume is judged safe."
        ),
    )
    def record_progress(
        self,
        run_id: RunId,
        ctx: Context,
        completed: Count = None,
        total: Count = None,
        goal: Annotated[
            str | None, Field(description="The run's goal; creates the run on first use.")
        ] = None,
        failed: Count = None,
        parent: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=200,
                description="On first use only: the run this one is started under (a "
                "subagent's run under its parent's).",
            ),
        ] = None,
    ) -> ProgressResult:
        rt = self.writer()
        state = rt.record_progress(
            run_id, completed=completed, total=total, failed=failed, goal=goal, parent=parent
        )
        return ProgressResult(
            run_id=run_id,
            goal=state.goal.value if state.goal else None,
            progress=state.progress.model_dump(mode="json", exclude={"provenance"}),
            head_sequence=state.sequence,
            needs_human_confirmation=bool(state.unreviewed()),
        )

    @tool(
        "continuum_checkpoint",
        read_only=False,
        description=(
            "Store a semantic checkpoint of the run's state; pass env {name: version} to "
            "declare the dependencies your work relies on, so a later resume re-checks them."
        ),
    )
    def checkpoint(
        self,
        run_id: RunId,
        ctx: Context,
        reason: Annotated[str | None, Field(description="Why now.")] = None,
        env: Annotated[
            dict[str, str] | None,
            Field(
                description="Declare dependencies {name: version} the work relies on; a "
                "resume re-checks them."
            ),
        ] = None,
    ) -> CheckpointResult:
        info = self.writer().checkpoint(run_id, reason=reason, env=env)
        return CheckpointResult(**info.model_dump())

    @tool(
        "continuum_handoff",
        read_only=False,
        description=(
            "Before a reset, a context switch or handing the run to another session: leave "
            "a note the next session's resume and briefing show first (what to do next, "
            "what not to redo). The note is your word, shown as such."
        ),
    )
    def handoff(
        self,
        run_id: RunId,
        note: Annotated[
            str,
            Field(min_length=1, max_length=8000, description="What the next session must know."),
        ],
        ctx: Context,
    ) -> HandoffResult:
        with self.acting(ctx) as rt:
            event = rt.handoff(run_id, note)
        return HandoffResult(run_id=run_id, sequence=event.sequence, note=note)

    @tool(
        "continuum_observe",
        read_only=False,
        description=(
            "Record what one signal saw of the world before a plan branch rests on it (a UI "
            "element's label, a page's content, a tool's report, an environment value): "
            "subject, value, signal (how it was seen: dom, screenshot_ocr, an API). Two "
            "agreeing independent signals verify an observation, disagreement contests it; "
            "your own readings count as one signal however many you give. For an "
            "environment observation named after a declared dependency, continuum reads it "
            "itself too."
        ),
    )
    def observe(
        self,
        run_id: RunId,
        subject: Annotated[
            str, Field(min_length=1, max_length=500, description="What was observed.")
        ],
        value: Annotated[
            Any,
            Field(description="What this signal saw (any JSON)."),
            AfterValidator(_shallow_json),
        ],
        signal: Annotated[
            str,
            Field(min_length=1, max_length=200, description="How it was seen (dom, ocr, api)."),
        ],
        ctx: Context,
        observation_id: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=200,
                description="The observation this reading belongs to (default: the subject).",
            ),
        ] = None,
        kind: Literal["environment", "ui", "content", "tool"] = "content",
        source: Annotated[
            str | None, Field(max_length=2000, description="Where it was read (URL, tool).")
        ] = None,
    ) -> Observed:
        with self.acting(ctx) as rt:
            return rt.observe(
                run_id,
                subject,
                value,
                signal=signal,
                observation_id=observation_id,
                kind=kind,
                source=source,
            )

    @tool(
        "continuum_resolve_branch",
        read_only=False,
        description=(
            "Call BEFORE taking a plan branch that rests on observations (record them with "
            "continuum_observe first). mode 'resume': take it. mode 'request_human': do NOT "
            "take it (a high-risk branch on an observation that is not verified, or a "
            "contested environment observation); reason names the observation, and a "
            "person resolves the branch. risk: low or high; rules may raise it, never lower it."
        ),
    )
    def resolve_branch(
        self,
        run_id: RunId,
        branch_id: Annotated[
            str, Field(min_length=1, max_length=200, description="The plan branch's id.")
        ],
        choice: Annotated[
            str, Field(min_length=1, max_length=200, description="The option you would take.")
        ],
        observations: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=200)]],
            Field(min_length=1, max_length=100, description="Observation ids it rests on."),
        ],
        ctx: Context,
        risk: Literal["low", "high"] | None = None,
        reason: Annotated[
            str | None, Field(max_length=2000, description="Why this choice.")
        ] = None,
    ) -> BranchVerdict:
        with self.acting(ctx) as rt:
            return rt.resolve_branch(
                run_id,
                branch_id,
                choice=choice,
                observations=observations,
                risk=risk,
                reason=reason,
            )

    @tool(
        "continuum_intercept_action",
        read_only=False,
        description=(
            "Call BEFORE every external side effect (sending, writing outside your workspace, "
            "paying, migrating). Route every side effect through intercept, perform, "
            "complete. If proceed is true: perform it now, then call "
            "continuum_complete_action with the action_key (or continuum_fail_action). If "
            "proceed is false: do NOT perform it; read status and guidance ('completed' "
            "returns the previous result; 'unknown' or 'reconcile_required' means check the "
            "external system and reconcile). Use a stable key such as invoice:INV-001."
        ),
    )
    def intercept_action(
        self,
        run_id: RunId,
        action_type: Annotated[
            str, Field(min_length=1, description="Kind of side effect, e.g. send_invoice.")
        ],
        ctx: Context,
        arguments: Annotated[
            dict[str, Any] | None,
            Field(description="The side effect's arguments (JSON object)."),
            AfterValidator(_shallow_json),
        ] = None,
        key: Annotated[
            str | None,
            Field(description="A stable business key, e.g. invoice:INV-001 (recommended)."),
        ] = None,
        replay: Literal["never", "safe", "idempotent", "reconcile"] | None = None,
        tool_schema_hash: Annotated[
            Hash,
            Field(
                description="A hash of the tool's input schema: an interrupted safe or "
                "idempotent action is not re-run under another one without a person."
            ),
        ] = None,
        prompt_hash: Annotated[Hash, Field(description="A hash of the prompt in use.")] = None,
        model: Annotated[Hash, Field(description="The model making this call.")] = None,
        estimate_usd: Usd = None,
        estimate_tokens: Tokens = None,
    ) -> InterceptResult:
        pins = {"tool_schema_hash": tool_schema_hash, "prompt_hash": prompt_hash, "model": model}
        versions = {k: v for k, v in pins.items() if v is not None} or None
        cost = _cost(estimate_usd, estimate_tokens)
        with self.acting(ctx) as rt:
            return rt.intercept(
                run_id,
                action_type,
                arguments,
                key=key,
                replay=replay,
                versions=versions,
                cost=cost,
            )

    def _action(self, run_id: str, rec: Any, guidance: str) -> ActionResult:
        return ActionResult(
            run_id=run_id,
            action_key=rec.action_key,
            action_id=rec.action_id,
            status=str(rec.status),
            attempt=rec.attempt,
            external_id=rec.external_id,
            guidance=guidance,
        )

    @tool(
        "continuum_complete_action",
        read_only=False,
        description=(
            "Record that the side effect of an intercepted action happened, with the external "
            "system's id and any result."
        ),
    )
    def complete_action(
        self,
        run_id: RunId,
        action_key: ActionKey,
        ctx: Context,
        external_id: Annotated[
            str | None, Field(description="The external system's id for the effect.")
        ] = None,
        result: Annotated[
            Any, Field(description="Any JSON result to keep."), AfterValidator(_shallow_json)
        ] = None,
        cost_usd: Usd = None,
        cost_tokens: Tokens = None,
    ) -> ActionResult:
        with self.acting(ctx) as rt:
            rec = rt.complete(
                run_id,
                action_key,
                external_id=external_id,
                result=result,
                cost=_cost(cost_usd, cost_tokens),
            )
        return self._action(
            run_id,
            rec,
            "Recorded as done; a later intercept returns proceed=false with this result.",
        )

    @tool(
        "continuum_fail_action",
        read_only=False,
        description=(
            "Record that an intercepted action failed. Leave certain=false unless you KNOW "
            "the effect did not happen: then it is recorded unknown and must be reconciled. "
            "Even with certain=true, only a person may confirm that it did not happen before "
            "it runs again."
        ),
    )
    def fail_action(
        self,
        run_id: RunId,
        action_key: ActionKey,
        ctx: Context,
        error: Annotated[str | None, Field(description="What went wrong.")] = None,
        certain: Annotated[
            bool,
            Field(strict=True, description="True only if the effect certainly did NOT happen."),
        ] = False,
    ) -> ActionResult:
        with self.acting(ctx) as rt:
            rec = rt.fail(run_id, action_key, error=error, certain=certain)
        return self._action(
            run_id,
            rec,
            _NOT_DONE_ON_YOUR_WORD
            if certain
            else "Outcome unknown: check the external system, then "
            "call continuum_reconcile_action.",
        )

    @tool(
        "continuum_reconcile_action",
        read_only=False,
        description=(
            "Settle an action reported unknown or reconcile_required after checking the "
            "external system: occurred=true (it happened; give external_id) or "
            "occurred=false. occurred=false from an agent does not let the action run again "
            "until a person confirms it."
        ),
    )
    def reconcile_action(
        self,
        run_id: RunId,
        action_key: ActionKey,
        occurred: Annotated[
            bool,
            Field(
                strict=True,
                description="Whether the side effect happened, as checked in the external system.",
            ),
        ],
        ctx: Context,
        external_id: Annotated[str | None, Field(description="Its external id.")] = None,
        note: Annotated[str | None, Field(description="How it was checked.")] = None,
    ) -> ActionResult:
        with self.acting(ctx) as rt:
            rec = rt.reconcile(
                run_id, action_key, occurred=occurred, external_id=external_id, note=note
            )
        return self._action(
            run_id,
            rec,
            _NOT_DONE_ON_YOUR_WORD
            if rec.failure_unconfirmed
            else "Settled. Call continuum_resume for the verdict.",
        )

    @tool(
        "continuum_confirm",
        read_only=False,
        confirm=True,
        description=(
            "Human confirmation of the run's self-reported goal and progress. Refused unless "
            "the operator's confirm token is presented as _meta.confirmToken; otherwise a "
            "person must run `continuum confirm <run_id>` at a terminal (an agent must never "
            "run it itself)."
        ),
    )
    def confirm(self, run_id: RunId, ctx: Context) -> ConfirmResult:
        caller = caller_from_context(ctx)  # authorized by the tool table
        grant = grant_from_context(ctx) if self.by_role else None
        human = Continuum(self.writer().store, origin=Origin.HUMAN)
        # The client name is the client's own word (hostile text): recorded as data.
        via = via_of("mcp", role=grant.role.value if grant else None, client=caller.name or None)
        result = human.confirm(run_id, via=via)
        _log.warning(
            "mcp.confirmed_with_confirm_token",
            run_id=run_id,
            caller=caller.name,
            through_sequence=result.through_sequence,
        )
        verdict = human.resume(run_id)
        return ConfirmResult(
            run_id=run_id,
            through_sequence=result.through_sequence,
            scope=result.scope,
            confirmed=result.confirmed,
            verdict=verdict.mode,
        )


def tool_table() -> list[tuple[ToolSpec, str]]:
    """Every tool as declared on ``Tools``, in declaration order: (spec, method name)."""
    return [
        (fn.__continuum_tool__, name)
        for name, fn in vars(Tools).items()
        if hasattr(fn, "__continuum_tool__")
    ]


DESCRIPTIONS = {spec.name: spec.description for spec, _ in tool_table()}


def guarded(tools: Tools, spec: ToolSpec, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` behind its declaration: a mutating tool (over HTTP, every tool) authorizes its
    caller first (deny by default), and every tool turns continuum errors into results the agent can read.
    The signature stays the method's, so the SDK builds the same argument model."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not spec.read_only or tools.by_role:
            tools.authorize(
                kwargs.get("ctx"), spec.name, kwargs.get("run_id"), confirm=spec.confirm
            )
        with tools.domain_errors(spec.name):
            return fn(*args, **kwargs)

    return call


def register(server: MCPServer[Any], tools: Tools) -> None:
    for spec, method in tool_table():
        server.add_tool(
            guarded(tools, spec, getattr(tools, method)),
            name=spec.name,
            description=spec.description,
            annotations=READ_ONLY if spec.read_only else MUTATING,
            structured_output=True,
        )
    forbid_unknown_arguments(server)


def forbid_unknown_arguments(server: MCPServer[Any]) -> None:
    """Refuse arguments a tool does not have, naming them in one line.

    The SDK's argument models ignore unknown names, so a misspelled ``complete`` (for
    ``completed``) would be dropped silently and the call would "succeed" doing nothing.
    Each tool is checked before its arguments are validated, and refused with
    ``continuum_record_progress: unknown argument 'complete' (did you mean 'completed'?)``
    rather than the validator's report (its internals and URLs are no help to an agent);
    when a known argument is wrong as well, that line comes first and the report naming
    those fields follows. Its argument model forbids extras as well, and the published
    inputSchema says so (``additionalProperties: false``). The control arguments a known
    host adds to every call (``host_arguments.CONTROL_ARGUMENTS``) are removed first.
    """
    manager = server._tool_manager  # SDK 2.3: no public hook for this
    for tool in manager.list_tools():
        base = tool.fn_metadata.arg_model
        strict: Any = type(
            f"{base.__name__}Strict",
            (base,),
            {
                "model_config": ConfigDict(**{**base.model_config, "extra": "forbid"}),
                "__module__": base.__module__,
            },
        )
        tool.fn_metadata.arg_model = strict
        tool.parameters = strict.model_json_schema(by_alias=True)
        fields = {name: getattr(tool, name) for name in type(tool).model_fields}
        manager._tools[tool.name] = _NamedArgumentsTool.model_construct(
            _fields_set=tool.model_fields_set, **fields
        )


class _NamedArgumentsTool(Tool):
    """A registered tool that refuses, by name, an argument it does not have."""

    async def run(
        self, arguments: dict[str, Any], context: Any, convert_result: bool = False
    ) -> Any:
        known = [
            field.alias or name for name, field in self.fn_metadata.arg_model.model_fields.items()
        ]
        arguments = without_control_arguments(arguments)  # a host's own (host_arguments.py)
        unknown = [name for name in arguments if name not in known]
        if not unknown:
            return await super().run(arguments, context, convert_result)
        line = unknown_arguments_text(self.name, unknown, known)
        try:  # the known ones may be wrong too: name those fields as well, on their own lines
            self.fn_metadata.validate_arguments({k: v for k, v in arguments.items() if k in known})
        except ValidationError as e:
            raise ToolError(f"{line}\nError executing tool {self.name}: {e}") from e
        except Exception:  # a validator that crashed: the SDK's own handling says so
            return await super().run(arguments, context, convert_result)
        raise ToolError(line)


def unknown_arguments_text(tool: str, unknown: list[str], known: list[str]) -> str:
    """One line naming each unknown argument, with the closest known name when there is one."""

    def name(text: str) -> str:  # the caller's text: inert and short
        safe = terminal_safe(text)
        return f"'{safe[:60]}...'" if len(safe) > 60 else f"'{safe}'"

    parts = []
    for arg in unknown[:5]:
        close = difflib.get_close_matches(arg, known, n=1, cutoff=0.6)
        parts.append(name(arg) + (f" (did you mean {name(close[0])}?)" if close else ""))
    more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
    plural = "s" if len(unknown) > 1 else ""
    return (
        f"{tool}: unknown argument{plural} {', '.join(parts)}{more}; nothing was done; "
        f"its arguments are {', '.join(known)}"
    )

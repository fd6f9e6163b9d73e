"""The one facade the edges (CLI, MCP server, adapters) use.

It composes the store, the ledger, checkpoints, environment observation and the
recovery engine. The origin given at construction is stamped on everything this
facade writes (``external_agent`` for the MCP server, ``deterministic`` for the CLI);
``confirm`` always writes as ``human`` and belongs to trusted edges only.
The Python API is described in references/api.md; ``help(Continuum)`` shows each method.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from continuum.errors import IntegrityError, NotFoundError, UsageError
from continuum.eventlog.chain import VerifyReport
from continuum.eventlog.events import Event, EventType
from continuum.ledger.approval_rules import ApprovalRules, RuleFiles
from continuum.ledger.approvals import (
    ApprovalInfo,
    approval_info,
    find_approval_row,
    list_approval_infos,
    record_decision,
)
from continuum.ledger.core import DEFAULT_LEASE_SECONDS, ActionLedger, InterceptResult, owner_alive
from continuum.ledger.effect import Effect
from continuum.ledger.outbox import (
    DeliveryReport,
    NotifyConfig,
    deliver_due,
    load_notify,
    notify_paths,
)
from continuum.ops.operations import anchor_of, verify_history
from continuum.recovery.checkpoints import (
    checkpoint_through,
    lean_state,
    seal_checkpoint,
    valid_checkpoint,
)
from continuum.recovery.contract import RecoveryContract
from continuum.recovery.engine import Decision, build_contract, decide
from continuum.recovery.verification import bulk_reading
from continuum.state.environment import Probe, declarations, file_checksum, observe
from continuum.state.projection import (
    ALL_COMPONENTS,
    DEFAULT_CONFIRM_SCOPE,
    ActionRecord,
    Dependency,
    State,
    project,
)
from continuum.state.validation import Observation, ValidationReport, validate_state
from continuum.store import (
    DEFAULT_PAGE,
    MAX_PAGE,
    Run,
    RunInfo,
    Storage,
    open_store,
    resolve_url,
)
from continuum.store.base import OutboxRow
from continuum.types import ActionStatus, Mode, Origin, RunStatus

if TYPE_CHECKING:  # imported when used: archiving is rare, a resume never needs it
    from continuum.ops.archive import ArchiveResult

STATE_CACHE_RUNS = 64  # runs whose last state a Continuum object keeps


class CheckpointInfo(BaseModel):
    """What ``Continuum.checkpoint`` stored: the run's state through event ``sequence``,
    sealed with ``state_hash``, recorded by the ``checkpointed`` event at
    ``event_sequence``. A later resume reads only the events after it."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    sequence: int
    event_sequence: int
    state_hash: str


class FileEvidence(BaseModel):
    """Files recorded as evidence (path, sha256) compared with the disk now."""

    model_config = ConfigDict(frozen=True)

    verified: int = 0
    changed: list[str] = []
    missing: list[str] = []

    @property
    def any(self) -> bool:
        return bool(self.verified or self.changed or self.missing)


class Recovery(BaseModel):
    """Everything a resumed agent needs: the verdict, why, and the sealed contract.

    What ``Continuum.resume`` returns (references/contract.md §8):

    - ``mode``: the verdict, a ``Mode`` (``resume``, ``repair_and_resume``, ``replan``,
      ``wait``, ``request_human``, ``rollback``, ``abort``, ``not_resumable``), or the
      string ``"no_active_run"`` when no run id was given and no run is active.
    - ``safe``: true only for ``resume``; anything else means do not simply continue.
    - ``next_allowed_action``: the one step to take next (``reconcile_action:ACT``,
      ``confirm_run:RUN``, ...); ``required_actions``: all of them, in order;
      ``rationale``: why, in one line.
    - ``uncertain_actions``: actions that may or may not have happened, each a dict with
      ``action_id``, ``action_key``, ``action_type``, ``status`` (``unknown`` or
      ``needs_confirmation``), ``attempt``, ``arguments`` and ``next``.
    - ``progress`` and ``goal``: as recorded (an agent's word until a person confirms it).
    - ``contract``: the sealed recovery contract as JSON (``RecoveryContract``; check a
      saved one with ``Continuum.verify_contract``).
    - ``files``: files recorded as evidence compared with the disk, or None.
    """

    model_config = ConfigDict(frozen=True)

    run_id: str | None
    mode: Mode | Literal["no_active_run"]
    safe: bool
    next_allowed_action: str | None
    rationale: str
    required_actions: list[str]
    uncertain_actions: list[dict[str, Any]]
    progress: dict[str, Any] | None
    goal: str | None = None
    contract: dict[str, Any] | None
    files: FileEvidence | None = None


class Evaluation(NamedTuple):
    """What ``Continuum.evaluate`` found, from one reading of the store and one observation
    of the environment."""

    state: State
    validation: ValidationReport
    decision: Decision
    contract: RecoveryContract


class ActionsPage(NamedTuple):
    """A page of ``Continuum.actions_page``."""

    actions: list[ActionRecord]
    next_cursor: str | None


class ConfirmResult(BaseModel):
    """A recorded human confirmation: it covers the state at ``through_sequence`` exactly.

    ``head_sequence`` is the run's head when the confirmation was written (before it): when
    it is past ``through_sequence``, the events in between are not covered.
    """

    model_config = ConfigDict(frozen=True)

    run_id: str
    through_sequence: int
    scope: list[str]
    confirmed: dict[str, Any]
    event_sequence: int
    through_hash: str | None = None
    head_sequence: int = 0


class Continuum:
    """Crash recovery for one store: runs, events, the action ledger, checkpoints,
    verification and the recovery verdict (references/api.md).

    Open one with ``Continuum.open(url)`` and close it when done, best as a context
    manager::

        with Continuum.open("agent.db") as cx:
            cx.start_run("r1", "send five invoices", total=5)
            r = cx.intercept("r1", "send_invoice", {"invoice": "INV-1"}, key="INV-1")
            if r.proceed:
                ...                                   # the side effect, once
                cx.complete("r1", r.action_key, external_id="msg-1")
            print(cx.resume("r1").mode)

    Trust: ``origin`` is stamped on everything this object writes. ``deterministic``
    (the default) is your own code; ``llm`` and ``external_agent`` are an agent's word,
    not trusted until a person confirms it (``confirm`` writes as ``human``).

    Errors: every error is a ``ContinuumError`` with a dotted ``code`` and a ``hint``
    (references/contract.md §10): ``UsageError`` (``usage.*``, bad input),
    ``NotFoundError`` (``not_found.run``, ``not_found.action``, ``not_found.store``),
    ``StoreError`` (``store.*``), ``IntegrityError`` (``integrity.*``: a damaged log or
    index, refused, never repaired) and ``LedgerError`` (``ledger.*``). A call that
    raises has written nothing.
    """

    def __init__(
        self,
        store: Storage,
        *,
        origin: Origin = Origin.DETERMINISTIC,
        probes: Mapping[str, Probe] | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        cwd: str | None = None,
        owner: dict[str, Any] | None = None,
        approvals: RuleFiles | ApprovalRules | None = None,
    ) -> None:
        """Wrap an open ``store`` (see ``Continuum.open`` to open one by URL).

        ``probes`` are named callables that observe a dependency (``declare_dependencies
        (callables=...)``); ``lease_seconds`` is how long another host waits before it
        judges a started action interrupted; ``cwd`` is the directory relative paths in
        action arguments are resolved against (default: the current one); ``owner`` names
        who performs the actions this facade intercepts (default: this process); a host
        hook passes the host process and its session. ``approvals``: which calls wait for
        a person's decision; by default the rules of ``.continuum/approvals.toml`` in
        ``cwd`` and beside a SQLite store, read again when they change (``approvals.py``).
        """
        self.store = store
        self.origin = origin
        self.probes: dict[str, Probe] = dict(probes or {})
        self.ledger = ActionLedger(
            store,
            origin=origin,
            lease_seconds=lease_seconds,
            cwd=cwd,
            owner=owner,
            approvals=approvals,
        )
        # The last state computed per run (lean, verified): a later state() reads only the
        # events after it. A long-lived object (the MCP server's) resumes in constant time.
        self._states: OrderedDict[str, State] = OrderedDict()

    @classmethod
    def open(
        cls,
        url: str | None = None,
        *,
        create: bool = True,
        origin: Origin = Origin.DETERMINISTIC,
        **kwargs: Any,
    ) -> Continuum:
        """Open the store at ``url`` and wrap it: ``with Continuum.open(url) as cx: ...``.

        ``url``: a file path, ``sqlite:///abs/path.db`` or ``postgresql://...``; None means
        ``$CONTINUUM_DB``, else ``./continuum.db``. A missing SQLite file is created unless
        ``create=False``. Other keyword arguments go to ``Continuum(...)``.

        Raises ``UsageError`` (``store.bad_url``), ``StoreError`` (``store.*``: a directory,
        a foreign or damaged database, an unsafe SQLite, an unreachable server) and, with
        ``create=False``, ``NotFoundError`` (``not_found.store``). A refused store is left
        untouched and nothing is created.
        """
        return cls(open_store(resolve_url(url), create=create), origin=origin, **kwargs)

    def close(self) -> None:
        """Close the store's connections (also done by leaving a ``with`` block)."""
        self.store.close()

    def __enter__(self) -> Continuum:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- runs and events --------------------------------------------------------------------

    def start_run(
        self,
        run_id: str,
        goal: str | None = None,
        *,
        total: int | None = None,
        metadata: dict[str, Any] | None = None,
        model: str | None = None,
    ) -> RunInfo:
        """Create run ``run_id`` and record its ``run_started`` event (``goal``, ``total``
        work items, ``model``); returns the run's ``RunInfo``.

        Raises ``UsageError``: ``usage.run_exists`` when the run exists (resume it, or
        choose another id), ``usage.bad_run_id`` for an id that is not 1-200 printable
        characters without spaces.
        """
        self.store.create_run(Run(run_id=run_id, goal=goal, metadata=metadata or {}))
        payload: dict[str, Any] = {"goal": goal} if goal is not None else {}
        if total is not None:
            payload["total"] = total
        if model is not None:
            payload["model"] = model
        self.store.append_event(run_id, EventType.RUN_STARTED, payload, source=self.origin)
        return self.store.get_run(run_id)

    def runs(self) -> list[RunInfo]:
        """Every run in the store (``RunInfo``: id, goal, status, head), oldest first."""
        return self.store.list_runs()

    def latest_active_run(self) -> str | None:
        """The id of the most recently created run still ``active``, or None."""
        active = [r for r in self.store.list_runs() if r.status == RunStatus.ACTIVE]
        return active[-1].run_id if active else None

    def append(
        self,
        run_id: str,
        type: EventType | str,
        payload: dict[str, Any],
        causer_event_id: str | None = None,
    ) -> Event:
        """Append one event (an ``EventType``, or a type of your own as a string) with this
        object's origin; returns the sealed ``Event`` once it is durable.

        Raises ``NotFoundError`` (``not_found.run``) and ``UsageError``: ``usage.bad_payload``
        (a known type with a malformed payload), ``usage.not_json``,
        ``usage.non_finite_number``. See ``continuum event-types`` for the known types.
        """
        return self.store.append_event(
            run_id, type, payload, source=self.origin, causer_event_id=causer_event_id
        )

    def append_events(
        self, run_id: str, events: Sequence[tuple[EventType | str, dict[str, Any]]]
    ) -> list[Event]:
        """Append several events in one transaction (bulk progress, imports): chained
        exactly as the same ``append`` calls would be, all durable when this returns, or
        none written (a bad payload is named by its position)."""
        return self.store.append_events(run_id, events, source=self.origin)

    def events(self, run_id: str, after: int = 0) -> list[Event]:
        """Returns the run's events after sequence ``after``, in order, each verified as it
        is read (``Event``: ``type`` an ``EventType`` when known).

        Raises ``NotFoundError`` (``not_found.run``) and ``IntegrityError`` when an event
        does not verify (``continuum verify RUN`` says where).
        """
        return self.store.read_events(run_id, after)

    def record_progress(
        self,
        run_id: str,
        *,
        completed: int | None = None,
        total: int | None = None,
        failed: int | None = None,
        goal: str | None = None,
    ) -> State:
        """Record absolute progress; creates the run on first use (references/contract.md
        §9). Returns the run's ``State`` after it.

        Raises ``UsageError`` (``usage.bad_progress``) for a negative or non-integer number,
        or for completed + failed beyond the total; nothing is recorded then.
        """
        for name, value in (("completed", completed), ("total", total), ("failed", failed)):
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 0
            ):
                raise UsageError(
                    f"{name} must be a non-negative integer",
                    code="usage.bad_progress",
                    hint=f"pass {name} as a whole number >= 0",
                    field=name,
                )
        try:
            self.store.get_run(run_id)
        except NotFoundError:
            if total is not None and completed is not None and completed + (failed or 0) > total:
                _progress_past_total(completed, failed or 0, total)
            self.start_run(run_id, goal, total=total)
            goal = None
        else:
            now = self.state(run_id).progress
            new_total = total if total is not None else now.total
            done = completed if completed is not None else now.completed
            lost = failed if failed is not None else now.failed
            if new_total is not None and done + lost > new_total:
                _progress_past_total(done, lost, new_total)
        payload = {
            k: v
            for k, v in (
                ("completed", completed),
                ("total", total),
                ("failed", failed),
                ("goal", goal),
            )
            if v is not None
        }
        if payload:
            self.append(run_id, EventType.PROGRESS_RECORDED, payload)
        return self.state(run_id)

    def finish_run(self, run_id: str, *, aborted: bool = False, reason: str | None = None) -> Event:
        """Mark the run completed (a ``run_completed`` event) or, with ``aborted=True``,
        aborted (``run_aborted``); returns the event. A finished run takes no new side
        effects (``intercept`` raises ``ledger.run_finished``); settling earlier ones works.
        """
        type_ = EventType.RUN_ABORTED if aborted else EventType.RUN_COMPLETED
        return self.append(run_id, type_, {"reason": reason} if reason else {})

    # -- state and checkpoints ---------------------------------------------------------------

    def state(self, run_id: str) -> State:
        """The run's state at its head, lean: ``State.actions`` holds its *open* actions
        (unresolved, failed on an agent's word, completed under an approval); settled
        ones are in the action index (``actions``). From the latest valid checkpoint plus
        the events after it, and from what this object already knew of the run (its state
        at some sequence, verified), so a resume reads only what is new.
        """
        run = self.store.get_run(run_id)
        cached = self._states.get(run_id)
        if cached is not None and (cached.sequence, cached.head_hash) == (
            run.head_sequence,
            run.head_hash,
        ):
            self._states.move_to_end(run_id)
            return cached
        start = cached if cached is not None and cached.sequence < run.head_sequence else None
        state, _, _ = lean_state(self.store, run_id, start=start)
        self._remember(run_id, state)
        return state

    def _remember(self, run_id: str, state: State) -> None:
        self._states[run_id] = state
        self._states.move_to_end(run_id)
        while len(self._states) > STATE_CACHE_RUNS:
            self._states.popitem(last=False)

    def full_state(self, run_id: str) -> State:
        """The full fold of the log, settled actions included (what ``replay`` shows)."""
        with bulk_reading():
            return project(run_id, self.store.iter_raw(run_id))

    def state_at(self, run_id: str, upto: int) -> State:
        """The lean state as it was at sequence ``upto``: events 1..upto only (from the
        latest valid checkpoint at or below it), each verified as it is read."""
        return lean_state(self.store, run_id, upto=upto)[0]

    def checkpoint_warnings(self, run_id: str) -> list[str]:
        """One line per checkpoint newer than the one used that was not used (failed its
        hash, or a format this code does not know); the state then comes from an older
        checkpoint or the log, and `verify` reports a failed hash as damage."""
        return valid_checkpoint(self.store, run_id)[1]

    def declare_dependencies(
        self,
        run_id: str,
        *,
        env: Mapping[str, str] | None = None,
        files: list[str] | None = None,
        git: list[str] | None = None,
        callables: list[str] | None = None,
    ) -> Event | None:
        """Declare what the run depends on, so ``resume`` re-checks it first: ``env``
        static ``name: version`` pairs, ``files`` (content hash), ``git`` (a work tree's
        HEAD commit), ``callables`` (names of ``probes``). Returns the
        ``dependency_declared`` event, or None when nothing was declared.

        Raises ``UsageError`` (``usage.bad_dependency``: a missing file, not a git work
        tree, an unregistered callable; ``usage.bad_env``); nothing is written then.
        """
        decls = declarations(env=env, files=files, git=git, probes=self.probes, callables=callables)
        if not decls:
            return None
        return self.append(run_id, EventType.DEPENDENCY_DECLARED, {"dependencies": decls})

    def checkpoint(
        self, run_id: str, *, reason: str | None = None, env: Mapping[str, str] | None = None
    ) -> CheckpointInfo:
        """Seal the run's state at its head as a checkpoint, so a later resume reads only
        what follows; ``env`` declares static dependencies in the same transaction.
        Returns ``CheckpointInfo``. Raises ``NotFoundError`` (``not_found.run``) and
        ``IntegrityError`` when the log does not verify.
        """
        decls = declarations(env=env, probes=self.probes) if env else []
        with self.store.write(run_id) as tx:
            if decls:
                tx.append(
                    EventType.DEPENDENCY_DECLARED, {"dependencies": decls}, source=self.origin
                )
            state = self.state(run_id)
            event, state_hash = seal_checkpoint(tx, run_id, state, reason, self.origin)
        return CheckpointInfo(
            run_id=run_id,
            sequence=state.sequence,
            event_sequence=event.sequence,
            state_hash=state_hash,
        )

    # -- verification -----------------------------------------------------------------------

    def verify(
        self,
        run_id: str,
        *,
        expect_head: str | None = None,
        archives: Sequence[str | Path] = (),
        public_key: str | Path | None = None,
    ) -> VerifyReport:
        """Chain, head, optional anchor (``SEQ:HASH``), the action index against the fold,
        checkpoints: returns every finding in one ``VerifyReport`` (``ok``, ``trusted_through``,
        ``violations``; see ``verification.verify_run``). Damage is reported, not raised;
        raises ``NotFoundError`` (``not_found.run``) and ``UsageError``
        (``usage.bad_anchor``) for a malformed ``expect_head``.

        ``expect_head`` may be a signed anchor (``anchor(sign=...)``), checked with
        ``public_key`` (``integrity.anchor_signature`` if another key signed it). A run whose
        old history was archived (``archive``) is verified from its archive marker on, and
        from event 1 when ``archives`` names its archive files (``integrity.archive_*`` for
        a file that is not the one archived); see ``operations.verify_history``."""
        return verify_history(
            self.store, run_id, expect_head=expect_head, archives=archives, public_key=public_key
        )

    def anchor(self, run_id: str, *, sign: str | Path | None = None) -> dict[str, Any]:
        """Returns ``{"anchor": "SEQ:HASH", ...}`` for the run's head, to keep elsewhere and
        pass to ``verify(expect_head=...)`` later (catches a truncated log). Raises
        ``NotFoundError`` (``not_found.run``) and ``IntegrityError`` for a damaged chain.
        ``sign``: an Ed25519 private key file; adds ``signed_anchor``, a token an auditor
        checks with the public key alone (``signing.py``)."""
        return anchor_of(self.store, run_id, sign=sign)

    # -- long-lived stores ------------------------------------------------------------------

    def backup(
        self,
        dest: str | Path,
        *,
        run_ids: list[str] | None = None,
        progress: Callable[[str, int, int], None] | None = None,
        sign: str | Path | None = None,
    ) -> dict[str, Any]:
        """Write a backup of the store (or of ``run_ids``) to the new file ``dest`` while
        writers go on: one consistent snapshot, verified, with a manifest (``backup.py``);
        ``sign``: a private key file, whose signature over the manifest makes the backup
        trusted by whoever holds the public key. Returns the manifest plus ``file`` and
        ``seconds``."""
        from continuum.ops.backup import backup_store

        return backup_store(
            self.store,
            Path(dest),
            run_ids=run_ids,
            progress=progress,
            sign=Path(sign) if sign is not None else None,
        )

    def archive(
        self,
        run_id: str,
        *,
        before: int,
        to: str | Path,
        progress: Callable[[int, int], None] | None = None,
    ) -> ArchiveResult:
        """Move events ``< before`` of ``run_id`` into the new archive file ``to``, leaving a
        sealed ``history_archived`` marker and a checkpoint in the live log (``archive.py``).
        Returns an ``archive.ArchiveResult``. Settled actions stay answerable."""
        from continuum.ops.archive import archive_run

        self._states.pop(run_id, None)
        return archive_run(
            self.store, run_id, before, Path(to), origin=self.origin, progress=progress
        )

    # -- the ledger -------------------------------------------------------------------------

    def intercept(
        self,
        run_id: str,
        action_type: str,
        arguments: Any = None,
        *,
        key: str | None = None,
        replay: str | None = None,
        approval_id: str | None = None,
        effect: str | None = None,
        approval_arguments: Any = None,
    ) -> InterceptResult:
        """Ask before a side effect; returns an ``InterceptResult``.

        Perform the effect only when ``proceed`` is true (exactly one caller per action
        gets it, across threads, processes and hosts), then call ``complete`` (or
        ``fail``) with its ``action_key``. Otherwise ``status`` says why not and
        ``guidance`` what to do (``InterceptStatus``: ``completed``, ``unknown``, ...).

        The action is named by ``key``, a stable business key (``invoice:INV-1``; a key
        that repeats the type, ``upload:a.csv`` for type ``upload``, is the key
        ``a.csv``), else by its ``arguments`` (JSON, normalized: paths, numbers, Unicode).
        ``replay`` says what may happen when an interrupted action is met again:
        ``never`` (default), ``reconcile``, ``idempotent`` or ``safe``; a later intercept
        may not widen it. ``approval_id`` ties it to a granted approval.

        A call an approval rule matches (``.continuum/approvals.toml``) answers
        ``awaiting_approval`` with an ``approval_id`` until a person allows exactly this
        call (``decide``), then proceeds once; ``denied`` after a denial. ``effect``: the
        host effect rule a hook call came through (for ``effect = ...`` rules);
        ``approval_arguments``: what an approval binds to, if not all of ``arguments``.

        Raises ``UsageError`` (``usage.bad_action_type``, ``usage.bad_key``,
        ``usage.bad_replay``, ``usage.not_json``), ``NotFoundError`` (``not_found.run``),
        ``LedgerError`` (``ledger.run_finished``, ``ledger.replay_widening``) and
        ``IntegrityError`` (``integrity.index_mismatch``: nothing may proceed). Nothing is
        written when it raises.
        """
        extra = {} if approval_arguments is None else {"approval_arguments": approval_arguments}
        return self.ledger.intercept(
            run_id,
            action_type,
            arguments,
            key=key,
            replay=replay,
            approval_id=approval_id,
            effect=effect,
            **extra,
        )

    def complete(
        self, run_id: str, action: str, *, external_id: str | None = None, result: Any = None
    ) -> ActionRecord:
        """Record that the side effect of ``action`` (its ``action_key`` or ``action_id``)
        happened, with the external system's id and a JSON ``result`` (returned to a later
        intercept as ``previous_result``); returns the updated ``ActionRecord``.

        Raises ``NotFoundError`` (``not_found.action``), ``LedgerError``:
        ``ledger.invalid_transition`` (the action is not ``started``) and
        ``ledger.owner_alive`` (another live process is performing it).
        """
        return self.ledger.complete(run_id, action, external_id=external_id, result=result)

    def fail(
        self, run_id: str, action: str, *, error: str | None = None, certain: bool = False
    ) -> ActionRecord:
        """Record that the side effect of ``action`` failed; returns the ``ActionRecord``.

        Without ``certain`` it may have happened anyway, so the action becomes ``unknown``
        (check, then ``reconcile``). With ``certain=True`` it is ``failed`` and may run
        again, but an agent's word (origin ``llm``/``external_agent``) needs a person's
        confirmation first (``needs_confirmation``). Raises as ``complete`` does:
        ``not_found.action``, ``ledger.invalid_transition``, ``ledger.owner_alive``.
        """
        return self.ledger.fail(run_id, action, error=error, certain=certain)

    def reconcile(
        self,
        run_id: str,
        action: str,
        *,
        occurred: bool,
        external_id: str | None = None,
        note: str | None = None,
        origin: Origin | None = None,
        force: bool = False,
    ) -> ActionRecord:
        """Settle an interrupted action after checking the external system.

        From an agent (a self-certified origin), ``occurred=False`` is recorded but does not
        let the action run again until a person confirms it. ``force`` settles a started
        action whose owner is still alive (raises ``ledger.owner_alive`` otherwise).
        ``origin`` overrides this object's origin for this record (a trusted edge passes
        ``Origin.HUMAN`` for a person's decision). Returns the updated ``ActionRecord``.

        Raises ``NotFoundError`` (``not_found.action``) and ``LedgerError``
        (``ledger.invalid_transition`` for an action that is already settled).
        """
        return self.ledger.reconcile(
            run_id,
            action,
            occurred=occurred,
            external_id=external_id,
            note=note,
            origin=origin,
            force=force,
        )

    def effect(
        self,
        run_id: str,
        action_type: str,
        *,
        key: str | Callable[..., str | None] | None = None,
        arguments: Any = None,
        replay: str | None = None,
        certain_on: tuple[type[BaseException], ...] = (),
        encode: Callable[[Any], Any] | None = None,
        decode: Callable[[Any], Any] | None = None,
        external_id: Callable[[Any], str | None] | None = None,
    ) -> Effect:
        """A side effect performed at most once: decorator, ``run``/``arun`` or ``with``.

        See ``continuum.ledger.effect.Effect``: a completed effect returns its recorded result, an
        interrupted one raises ``EffectUncertain``. Recorded with this facade's origin.
        """
        return Effect(
            self.ledger,
            run_id,
            action_type,
            key=key,
            arguments=arguments,
            replay=replay,
            certain_on=certain_on,
            encode=encode,
            decode=decode,
            external_id=external_id,
        )

    def compensate(self, run_id: str, action: str, *, note: str | None = None) -> ActionRecord:
        """Record that a completed action's effect was undone (a semantic undo performed
        outside continuum): the rollback verdict's ``compensate_action:ID``. A later
        intercept of it answers ``compensated`` and does not proceed. Returns the
        ``ActionRecord``; raises ``NotFoundError`` (``not_found.action``) and
        ``LedgerError`` (``ledger.invalid_transition`` unless it is ``completed``)."""
        return self.ledger.compensate(run_id, action, note=note)

    def actions(self, run_id: str) -> list[ActionRecord]:
        """Every action of the run, in the order they were intercepted (see
        ``actions_page`` for a long run)."""
        return self.ledger.actions(run_id)

    def actions_page(
        self, run_id: str, *, cursor: str | None = None, limit: int = DEFAULT_PAGE
    ) -> ActionsPage:
        """One page of the run's actions: open ones (started, unknown, failed) first, then
        the settled ones, each in interception order; ``next_cursor`` gives the next page
        (None after the last). A page costs its rows, not the run's history; an action
        that changes status between pages may be listed twice or skipped."""
        actions, next_cursor = self.ledger.page(run_id, cursor=cursor, limit=limit)
        return ActionsPage(actions=actions, next_cursor=next_cursor)

    def interrupted(self, run_id: str) -> set[str]:
        """Ids of ``started`` actions whose owner is gone: in effect ``unknown`` until the
        next intercept or a reconcile records it (reading never writes)."""
        return {
            a.action_id for a in self.actions(run_id) if a.status == ActionStatus.STARTED
        } - self._in_flight(run_id, self.state(run_id))

    # -- recovery ---------------------------------------------------------------------------

    def _inputs(
        self, run_id: str, env: Mapping[str, str] | None, expected_model: str | None
    ) -> tuple[
        State,
        ValidationReport,
        VerifyReport,
        int | None,
        tuple[dict[str, str | None], dict[str, str]],
    ]:
        run = self.store.get_run(run_id)
        try:
            state = self.state(run_id)
            chain = VerifyReport(
                run_id=run_id,
                ok=True,
                events_checked=run.head_sequence,
                trusted_through=run.head_sequence,
                head_sequence=run.head_sequence,
                head_hash=run.head_hash,
                violations=[],
            )
        except IntegrityError:
            self._states.pop(run_id, None)
            chain = self.store.verify_events(run_id)
            state = project(run_id, [])
            state = state.model_copy(update={"sequence": chain.trusted_through})
        # The contract names the latest checkpoint the log records: the same for the same
        # log, whichever way (checkpoint, cache, log) the state was arrived at.
        cp_version = checkpoint_through(self.store, run_id, state.last_checkpoint)
        given = dict(env or {})
        observed = {
            name: observe(dep, given, self.probes) for name, dep in state.dependencies.items()
        }
        validation = validate_state(state, observed, extra=given, expected_model=expected_model)
        observed_view = {n: _observed_value(o) for n, o in observed.items()}
        # Which values the caller supplied (an agent may supply any value it likes) and
        # which continuum observed itself: verify-contract re-observes the former.
        sources = {
            n: "supplied" if n in given else "observed" if o is not None else "unobserved"
            for n, o in observed.items()
        }
        return state, validation, chain, cp_version, (observed_view, sources)

    def _in_flight(self, run_id: str, state: State) -> set[str]:
        now = self.ledger.clock()
        started = [a for a in state.actions.values() if a.status == ActionStatus.STARTED]
        out: set[str] = set()
        for a in started:
            row = self.store.get_action(run_id, a.action_id)
            if owner_alive(a.owner, row.lease_expires if row else None, now):
                out.add(a.action_id)
        return out

    def validate(
        self,
        run_id: str,
        *,
        env: Mapping[str, str] | None = None,
        expected_model: str | None = None,
    ) -> ValidationReport:
        """Returns the ``ValidationReport`` alone: each declared dependency compared with the
        environment now, and what is stale because of it (``evaluate`` gives it with the
        verdict, observed once). Raises ``NotFoundError`` (``not_found.run``)."""
        return self._inputs(run_id, env, expected_model)[1]

    def evaluate(
        self,
        run_id: str,
        *,
        env: Mapping[str, str] | None = None,
        expected_model: str | None = None,
        tolerate_unknown: bool = False,
    ) -> Evaluation:
        """The state, its validation against the environment (observed once), the decision
        and the sealed contract, all from one reading of the store."""
        state, validation, chain, cp_version, (observed, sources) = self._inputs(
            run_id, env, expected_model
        )
        decision = decide(
            state,
            validation,
            chain,
            in_flight=self._in_flight(run_id, state),
            tolerate_unknown=tolerate_unknown,
        )
        contract = build_contract(
            state,
            validation,
            decision,
            chain,
            checkpoint_version=cp_version,
            observed_env=observed,
            env_sources=sources,
        )
        return Evaluation(state, validation, decision, contract)

    def resume(
        self,
        run_id: str | None = None,
        *,
        env: Mapping[str, str] | None = None,
        expected_model: str | None = None,
        tolerate_unknown: bool = False,
    ) -> Recovery:
        """Read-only: may the run continue? Returns a ``Recovery``: the verdict (``mode``),
        why, what to do next and the sealed contract.

        ``run_id`` defaults to the latest active run (none: ``mode`` ``no_active_run``).
        ``env`` gives current values of declared static dependencies; ``expected_model``
        the model now in use; ``tolerate_unknown`` lets a dependency that cannot be
        checked now not block the verdict. Only ``mode`` ``resume`` (``safe``) means
        continue. A damaged log is answered (verdict ``abort``), not raised; raises
        ``NotFoundError`` (``not_found.run``) for an unknown run.
        """
        if run_id is None:
            run_id = self.latest_active_run()
            if run_id is None:
                return Recovery(
                    run_id=None,
                    mode="no_active_run",
                    safe=False,
                    next_allowed_action=None,
                    rationale="there is no active run in this store",
                    required_actions=[],
                    uncertain_actions=[],
                    progress=None,
                    contract=None,
                )
        state, _, decision, contract = self.evaluate(
            run_id, env=env, expected_model=expected_model, tolerate_unknown=tolerate_unknown
        )
        uncertain = [
            {
                "action_id": a.action_id,
                "action_key": a.action_key,
                "action_type": a.action_type,
                "status": "needs_confirmation" if a.failure_unconfirmed else "unknown",
                "recorded_status": str(a.status),
                "attempt": a.attempt,
                "arguments": a.arguments,
                "next": f"reconcile_action:{a.action_id}",
            }
            for a in decision.uncertain_actions
        ]
        return Recovery(
            run_id=run_id,
            mode=decision.mode,
            safe=decision.safe,
            next_allowed_action=decision.next_allowed_action,
            rationale=decision.reason,
            required_actions=decision.required_actions,
            uncertain_actions=uncertain,
            progress=state.progress.model_dump(mode="json", exclude={"provenance"}),
            goal=state.goal.value if state.goal else None,
            contract=contract.model_dump(mode="json"),
            files=self.file_evidence(state),
        )

    def file_evidence(self, state: State, *, limit: int = 20) -> FileEvidence | None:
        """Compare the files recorded as evidence with the disk: verified, changed, missing
        (reads files; at most ``limit`` paths listed per kind). None when there are none."""
        verified, changed, missing = 0, [], []
        for item in sorted(state.evidence.values(), key=lambda i: i.path or ""):
            if item.path is None or item.sha256 is None or item.status != "active":
                continue
            now = file_checksum(item.path)
            if now is None:
                missing.append(item.path)
            elif now != item.sha256:
                changed.append(item.path)
            else:
                verified += 1
        if not (verified or changed or missing):
            return None
        return FileEvidence(verified=verified, changed=changed[:limit], missing=missing[:limit])

    def confirm(
        self,
        run_id: str,
        *,
        scope: str = "default",
        through_sequence: int | None = None,
        expect_hash: str | None = None,
    ) -> ConfirmResult:
        """A human vouches for self-reported state (references/contract.md §5): the state
        at ``through_sequence``. Writes as ``human``: for trusted edges only.

        Without ``through_sequence``: the state at the head when the confirmation is written.
        With it, exactly events 1..N are covered, even if the run has moved on since (what a
        person was shown), and ``expect_hash`` (the hash of event N they were shown) must be
        the stored one, else nothing is written (``integrity.confirm_mismatch``).
        ``scope``: ``default`` (goal and progress), ``goal``, ``progress`` or ``all``.

        Returns a ``ConfirmResult``. Raises ``UsageError`` (``usage.bad_scope``,
        ``usage.bad_sequence``), ``NotFoundError`` (``not_found.run``) and
        ``IntegrityError`` (``integrity.confirm_mismatch``).
        """
        scopes = {
            "default": list(DEFAULT_CONFIRM_SCOPE),
            "goal": ["goal"],
            "progress": ["progress"],
            "all": ["all"],
        }
        if scope not in scopes:
            raise UsageError(
                f"unknown scope {scope!r}",
                code="usage.bad_scope",
                hint="use --scope goal, progress or all",
            )
        if through_sequence is not None and (
            not isinstance(through_sequence, int)
            or isinstance(through_sequence, bool)
            or through_sequence < 1
        ):
            raise UsageError(
                "through_sequence must be a positive integer",
                code="usage.bad_sequence",
                hint="pass the sequence that was reviewed",
            )
        if expect_hash is not None and through_sequence is None:
            raise UsageError(
                "expect_hash needs through_sequence",
                code="usage.bad_sequence",
                hint="pass the sequence the hash belongs to",
            )
        with self.store.write(run_id) as tx:
            head = tx.run.head_sequence
            upto = head if through_sequence is None else through_sequence
            if upto > head:
                raise UsageError(
                    f"run {run_id!r} has no event {upto} (its head is {head})",
                    code="usage.bad_sequence",
                    hint=f"use a sequence from 1 to {head}",
                    run_id=run_id,
                )
            if expect_hash is not None:
                stored = self.store.event_hash_at(run_id, upto)
                if stored != expect_hash:
                    raise IntegrityError(
                        f"event {upto} of run {run_id!r} is not the one that was reviewed "
                        f"(hash {(stored or 'none')[:12]}, reviewed {expect_hash[:12]}); "
                        "nothing was confirmed",
                        code="integrity.confirm_mismatch",
                        hint=f"run `continuum verify {run_id}`, then review again with "
                        f"`continuum confirm {run_id}`",
                        run_id=run_id,
                        sequence=upto,
                    )
            state = self.state_at(run_id, upto)
            covered = ALL_COMPONENTS if scope == "all" else scopes[scope]
            confirmed: dict[str, Any] = {
                "goal": state.goal.value if state.goal else None,
                "progress": state.progress.model_dump(mode="json", exclude={"provenance"}),
            }
            if scope == "all":
                confirmed.update(
                    findings=sorted(state.findings),
                    decisions=sorted(state.decisions),
                    evidence=sorted(state.evidence),
                    plan=state.plan,
                    model=state.model,
                )
            confirmed = {k: v for k, v in confirmed.items() if k in covered or scope == "all"}
            payload: dict[str, Any] = {
                "through_sequence": upto,
                "scope": scopes[scope],
                "confirmed": confirmed,
            }
            if state.head_hash is not None:
                payload["through_hash"] = state.head_hash
            event = tx.append(EventType.REVIEW_CONFIRMED, payload, source=Origin.HUMAN)
        return ConfirmResult(
            run_id=run_id,
            through_sequence=upto,
            scope=scopes[scope],
            confirmed=confirmed,
            event_sequence=event.sequence,
            through_hash=state.head_hash,
            head_sequence=head,
        )

    # -- approvals (references/operators.md, "Approvals") -------------------------------------

    def approval_rules(self) -> ApprovalRules:
        """The approval rules intercepts are judged by now (``approvals.bad_rules`` while a
        file is malformed)."""
        rules = self.ledger.approvals
        return rules.current() if isinstance(rules, RuleFiles) else rules

    def approvals(
        self, run_id: str | None = None, *, pending_only: bool = True, limit: int = MAX_PAGE
    ) -> list[ApprovalInfo]:
        """Approvals in the order they were requested, of one run or of every run.

        ``pending_only`` (default): those waiting for a person's decision, in active
        runs. Each ``ApprovalInfo`` has the ``approval_id`` (``id``), ``run_id``, the
        call it is bound to (``action_type``, ``action_key``, ``key``, ``arguments``,
        ``arguments_hash``), the ``rule`` that asked, and once decided ``status``,
        ``scope``, ``reason``, ``decided_by`` and ``used_by``. Agent-supplied text is
        returned as is: escape it wherever a person reads it. ``not_found.run`` for an
        unknown ``run_id``."""
        return list_approval_infos(self.store, run_id, pending_only=pending_only, limit=limit)

    def approval(self, approval_id: str, *, run_id: str | None = None) -> ApprovalInfo:
        """One approval by id (``not_found.approval``; ``usage.ambiguous_approval`` if two
        runs hold the id: pass ``run_id``)."""
        return approval_info(self.store, find_approval_row(self.store, approval_id, run_id))

    def decide(
        self,
        approval_id: str,
        *,
        allow: bool,
        reason: str,
        scope: str = "call",
        run_id: str | None = None,
        expect_binding: str | None = None,
    ) -> ApprovalInfo:
        """A person's decision on a pending approval, always recorded with origin ``human``
        (for trusted edges only: the CLI behind a terminal or ``--yes``, an operator's
        authenticated page; never an agent's tool).

        ``allow=True, scope="call"``: exactly the call it is bound to may proceed, once.
        ``scope="run"``: that action type proceeds for the rest of the run, any arguments
        (and the run's other pending approvals of that type are granted with it).
        ``allow=False``: the call answers ``denied`` with ``reason``. ``reason`` is
        required. ``expect_binding``: refuse (``integrity.approval_mismatch``) unless the
        approval is still bound to the call the person was shown. Raises
        ``not_found.approval``, ``usage.bad_scope``, ``usage.bad_reason`` and
        ``ledger.invalid_transition`` (already decided); nothing is written then.
        """
        return record_decision(
            self.store,
            approval_id,
            allow=allow,
            reason=reason,
            scope=scope,
            run_id=run_id,
            expect_binding=expect_binding,
        )

    # -- the notification outbox (references/operators.md, "Outbox") -------------------------

    def outbox(
        self, *, status: str | None = None, run_id: str | None = None, limit: int = MAX_PAGE
    ) -> list[OutboxRow]:
        """Notifications for a person, newest first: ``pending``, ``delivered`` or
        ``failed`` (``status`` filters). Each ``OutboxRow`` has the stable
        ``delivery_id``, ``kind``, ``run_id``, the ``body`` sent, ``attempts``,
        ``next_attempt``, ``delivered_to`` and ``last_error``."""
        return self.store.list_outbox(status=status, run_id=run_id, limit=limit)

    def outbox_counts(self) -> dict[str, int]:
        """``{"pending": n, "delivered": n, "failed": n}``."""
        return self.store.outbox_counts()

    def notify_config(self) -> NotifyConfig:
        """The webhooks of ``.continuum/notify.toml`` in ``cwd`` and beside a SQLite store
        (``outbox.bad_config`` for a malformed file)."""
        return load_notify(notify_paths(self.ledger.cwd, self.store.url))

    def deliver_outbox(
        self, config: NotifyConfig | None = None, *, limit: int = 50
    ) -> DeliveryReport:
        """One delivery pass: send what is due to every configured webhook, record each
        outcome (retries with backoff; ``failed`` after the configured attempts)."""
        return deliver_due(
            self.store, config if config is not None else self.notify_config(), limit=limit
        )

    def retry_outbox(self, delivery_ids: Sequence[str] | None = None) -> int:
        """Put failed notifications (these, or all) back to pending; returns how many."""
        return self.store.requeue_outbox(delivery_ids)

    def verify_contract(self, contract_json: str) -> dict[str, Any]:
        """Check a contract file's text: intact seal, bound to this store's head, and the
        same contract this store gives now (values the caller supplied are re-observed
        where possible). Returns ``{"ok": True, "run_id", "verdict", "head_sequence",
        "integrity_hash", "reobserved", "unverified_inputs"}``.

        Raises ``UsageError`` (``usage.bad_contract``), ``NotFoundError``
        (``not_found.run``) and ``IntegrityError``: ``integrity.contract_tampered``,
        ``integrity.contract_foreign``, ``integrity.contract_stale``,
        ``integrity.contract_mismatch``.
        """
        try:
            contract = RecoveryContract.model_validate_json(contract_json)
        except ValueError as e:
            raise UsageError(
                "the file is not a recovery contract",
                code="usage.bad_contract",
                hint="pass a file written by `continuum show-contract RUN --json`",
            ) from e
        if not contract.is_intact():
            raise IntegrityError(
                "the contract's integrity_hash does not match its content",
                code="integrity.contract_tampered",
                hint="the file was edited; get a fresh one with show-contract",
                run_id=contract.run_id,
            )
        run = self.store.get_run(contract.run_id)
        stored = (
            self.store.event_hash_at(contract.run_id, contract.head_sequence)
            if contract.head_sequence
            else None
        )
        if contract.head_sequence and stored != contract.head_hash:
            raise IntegrityError(
                f"the contract's head {contract.head_sequence} is not in this store's chain",
                code="integrity.contract_foreign",
                hint="check --db; the log or the contract does not belong here",
            )
        if run.head_sequence != contract.head_sequence:
            raise IntegrityError(
                f"the contract was computed at sequence {contract.head_sequence} "
                f"but the run is now at {run.head_sequence}",
                code="integrity.contract_stale",
                hint=f"get a current one: continuum show-contract {contract.run_id}",
            )
        # The seal only proves the file is unchanged since someone sealed it; anyone can
        # seal. So recompute the decision from this store and require the same contract.
        # Values the caller supplied are re-observed wherever a provider can observe them
        # (a file's hash, a git head, a registered callable); only values nothing here can
        # observe are taken from the contract, and the answer names them.
        env, reobserved, unverified = self._contract_env(contract)
        fresh = self.evaluate(contract.run_id, env=env).contract
        if fresh.integrity_hash != contract.integrity_hash:
            raise IntegrityError(
                f"the store gives verdict {fresh.verdict!r} (contract {fresh.integrity_hash[:12]}) "
                f"where the file says {contract.verdict!r} ({contract.integrity_hash[:12]})",
                code="integrity.contract_mismatch",
                hint=f"the file was not produced from this log; trust `continuum resume "
                f"{contract.run_id}` instead",
                run_id=contract.run_id,
            )
        return {
            "ok": True,
            "run_id": contract.run_id,
            "verdict": contract.verdict,
            "head_sequence": contract.head_sequence,
            "integrity_hash": contract.integrity_hash,
            "reobserved": reobserved,
            "unverified_inputs": unverified,
        }

    def _contract_env(
        self, contract: RecoveryContract
    ) -> tuple[dict[str, str], list[str], list[str]]:
        """The environment to recompute a contract with: (env, re-observed, taken on trust)."""
        recorded = contract.evidence.get("environment") or {}
        # A contract without sources (older format) is treated as all supplied.
        sources = contract.evidence.get("environment_sources") or dict.fromkeys(
            recorded, "supplied"
        )
        dependencies = self.state(contract.run_id).dependencies
        env: dict[str, str] = {}
        reobserved: list[str] = []
        unverified: list[str] = []
        for name, value in sorted(recorded.items()):
            if sources.get(name) != "supplied" or not isinstance(value, str):
                continue  # observed by continuum at the time: it observes again now
            dep = dependencies.get(name)
            if dep is not None and _observable(dep, self.probes):
                fresh = _observed_value(observe(dep, {}, self.probes))
                if fresh is not None and fresh != "removed":
                    env[name] = fresh  # what is there now, not what the caller said
                reobserved.append(name)
            else:
                env[name] = value
                unverified.append(name)
        return env, reobserved, unverified


def _observed_value(o: Observation | None) -> str | None:
    if o is None:
        return None
    return (o.checksum or o.version) if o.present else "removed"


def _observable(dep: Dependency, probes: Mapping[str, Probe]) -> bool:
    """Can a provider observe ``dep`` here, without a value from the caller?"""
    if dep.provider in ("file", "git"):
        return bool(dep.locator)
    return dep.provider == "callable" and dep.name in probes


def _progress_past_total(completed: int, failed: int, total: int) -> None:
    raise UsageError(
        f"progress of {completed} completed and {failed} failed exceeds the total "
        f"of {total}; nothing was recorded",
        code="usage.bad_progress",
        hint="record absolute numbers that fit the total, or raise the total first "
        "(total=N in the same call)",
        field="completed",
    )

"""The first layer of the facade: opening a store, runs and their events, the state and
its checkpoints, verification and the operations on a long-lived store (backup, archive).

``Continuum`` (``runtime.facade``) is this plus the ledger (``runtime.effects``) plus
recovery; the layers build on each other in that order, one class each.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from continuum.errors import NotFoundError, UsageError
from continuum.eventlog.event_model import Event
from continuum.eventlog.events import EventType
from continuum.eventlog.reports import VerifyReport
from continuum.ledger.approval_rules import ApprovalRules, RuleFiles
from continuum.ledger.budget import MAX_FAMILY as MAX_FAMILY
from continuum.ledger.core import DEFAULT_LEASE_SECONDS, ActionLedger
from continuum.ledger.owners import owner_alive
from continuum.ops.operations import anchor_of, verify_history
from continuum.recovery.checkpoints import (
    lean_state,
    seal_checkpoint,
    valid_checkpoint,
)
from continuum.recovery.engine import ChildView
from continuum.recovery.plain_state import PlainState, state_without_actions
from continuum.recovery.revalidation import (
    RevalidationPolicy,
    drifted,
    held_in,
    hold_reason,
)
from continuum.recovery.verification import bulk_reading
from continuum.runtime.results import CheckpointInfo
from continuum.state.environment import Probe, declarations, observe
from continuum.state.projection import project
from continuum.state.records import State
from continuum.store import (
    Run,
    RunInfo,
    Storage,
    open_store,
    redact_url,
    resolve_url,
    url_text,
)
from continuum.store.base import check_run_id
from continuum.telemetry import enable as enable_telemetry
from continuum.types import ActionStatus, Origin, RunStatus
from continuum.untrusted import as_typed

if TYPE_CHECKING:  # imported when used: archiving is rare, a resume never needs it
    from continuum.ops.archive import ArchiveResult
    from continuum.ops.fork import ForkResult

MAX_NOTE_CHARS = 8000  # a handoff note: a few lines, not a transcript
STATE_CACHE_RUNS = 64  # runs whose last state a Continuum object keeps


class RunsFacade:
    """Runs, events, state, checkpoints, verification and long-lived stores (the layer
    under ``EffectsFacade`` and ``Continuum``; use ``Continuum``)."""

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
        telemetry: bool | None = None,
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
        ``telemetry``: export OpenTelemetry spans (the ``otel`` extra; default:
        ``CONTINUUM_OTEL=1``; references/telemetry.md).
        """
        if isinstance(store, str | bytes | PathLike):
            # A path or URL here failed deep inside with an AttributeError.
            given = redact_url(os.fsdecode(store))  # a PostgreSQL URL may hold a password
            raise UsageError(
                f"Continuum(...) takes an open store, not the path or URL {as_typed(given)}",
                code="usage.not_a_store",
                hint="open one by path or URL: Continuum.open('agent.db') "
                "(or Continuum(open_store(url)))",
                given=given,
            )
        self.store = store
        self.telemetry = enable_telemetry(store, telemetry)
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
        # The same without actions, as plain data: what an intercept asks first (holds,
        # budgets), brought up to date from the events after it without building a model.
        self._plain: OrderedDict[str, PlainState] = OrderedDict()
        # Periodic revalidation (recovery/revalidation.py): when, and the steps counted per
        # run since this object last looked.
        self.revalidation = RevalidationPolicy()
        self._steps: dict[str, int] = {}

    @classmethod
    def open(
        cls,
        url: str | PathLike[str] | None = None,
        *,
        create: bool = True,
        origin: Origin = Origin.DETERMINISTIC,
        **kwargs: Any,
    ) -> Self:
        """Open the store at ``url`` and wrap it: ``with Continuum.open(url) as cx: ...``.

        ``url``: a file path (text or ``pathlib.Path``), ``sqlite:///abs/path.db`` or
        ``postgresql://...``; None means
        ``$CONTINUUM_DB``, else ``./continuum.db``. A missing SQLite file is created unless
        ``create=False``. Other keyword arguments go to ``Continuum(...)``.

        Raises ``UsageError`` (``store.bad_url``), ``StoreError`` (``store.*``: a directory,
        a foreign or damaged database, an unsafe SQLite, an unreachable server) and, with
        ``create=False``, ``NotFoundError`` (``not_found.store``). A refused store is left
        untouched and nothing is created.
        """
        store = open_store(resolve_url(None if url is None else url_text(url)), create=create)
        try:
            return cls(store, origin=origin, **kwargs)
        except BaseException:  # e.g. telemetry asked for without its extra: close what we opened
            store.close()
            raise

    def close(self) -> None:
        """Close the store's connections (also done by leaving a ``with`` block)."""
        if self.telemetry is not None:
            self.telemetry.close()
        self.store.close()

    def __enter__(self) -> Self:
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
        parent: str | None = None,
    ) -> RunInfo:
        """Create run ``run_id`` and record its ``run_started`` event (``goal``, ``total``
        work items, ``model``); returns the run's ``RunInfo``.

        ``parent``: start it as a child of that run (a subagent's run, any depth): the
        parent records ``child_started`` first, then the child names its parent, so a
        crash between leaves a parent listing a child that never started (no effect can
        have run in it), never a child its parent does not know. The parent's resume
        waits on the child's unsettled effects, and the parent cannot be finished while
        the child is active.

        Raises ``UsageError``: ``usage.run_exists`` when the run exists (resume it, or
        choose another id), ``usage.bad_run_id`` for an id that is not 1-200 printable
        characters without spaces, ``usage.run_finished`` for a finished parent;
        ``not_found.run`` for an unknown parent.
        """
        if parent is not None:
            self._adopt(parent, run_id, goal)
        self.store.create_run(Run(run_id=run_id, goal=goal, metadata=metadata or {}))
        payload: dict[str, Any] = {"goal": goal} if goal is not None else {}
        if total is not None:
            payload["total"] = total
        if model is not None:
            payload["model"] = model
        if parent is not None:
            payload["parent"] = parent
        self.store.append_event(run_id, EventType.RUN_STARTED, payload, source=self.origin)
        return self.store.get_run(run_id)

    def _adopt(self, parent: str, child: str, goal: str | None) -> None:
        """Record ``child`` in ``parent`` before the child exists (``start_run``)."""
        check_run_id(child)
        if parent == child:
            raise UsageError(
                f"run {child!r} cannot be its own parent",
                code="usage.bad_parent",
                hint="give the id of the run it is started under; nothing was written",
            )
        try:
            self.store.get_run(child)
        except NotFoundError:
            pass
        else:
            raise UsageError(
                f"run {child!r} already exists",
                code="usage.run_exists",
                hint="resume it, or start the child under another id; nothing was written",
            )
        if self.state(parent).status != RunStatus.ACTIVE:
            raise UsageError(
                f"run {parent!r} is {self.state(parent).status}: it takes no new child run",
                code="usage.run_finished",
                hint="start the child under an active run; nothing was written",
            )
        body: dict[str, Any] = {"child_run_id": child}
        if goal is not None:
            body["goal"] = goal
        self.append(parent, EventType.CHILD_STARTED, body)

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
        parent: str | None = None,
    ) -> State:
        """Record absolute progress; creates the run on first use (references/contract.md
        §9), as a child of ``parent`` when given (ignored once the run exists). Returns the
        run's ``State`` after it.

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
            self.start_run(run_id, goal, total=total, parent=parent)
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
            self._step(run_id)
        return self.state(run_id)

    def _step(self, run_id: str) -> None:
        """Count one step of ``run_id``; revalidate when the policy says it is due."""
        every = self.revalidation.every_steps
        if not every:
            return
        count = self._steps.get(run_id, 0) + 1
        if count >= every:
            self.revalidate(run_id)
        else:
            self._steps[run_id] = count

    def revalidate(self, run_id: str, *, env: Mapping[str, str] | None = None) -> list[str]:
        """Observe the run's declared dependencies now (files, git, callables; ``env`` for
        static ones) and record each one changed or removed since it was declared
        (``environment_changed``, this facade's origin): until it is declared again, a
        new effect answers ``revalidation_required``. Returns the names found drifted.
        One observation of each dependency; raises as ``state`` does."""
        if not self._plain_state(run_id)["dependencies"]:
            self._steps[run_id] = 0  # nothing declared: nothing to observe
            return []
        state = self.state(run_id)
        given = dict(env or {})
        observed = {n: observe(d, given, self.probes) for n, d in state.dependencies.items()}
        found = drifted(state, observed)
        for name, status in found:
            self.append(run_id, EventType.ENVIRONMENT_CHANGED, {"name": name, "status": status})
        self._steps[run_id] = 0
        return [name for name, _ in found]

    def switched(self, run_id: str, *, env: Mapping[str, str] | None = None) -> list[str]:
        """An app or context switch (a new session, a compaction): ``revalidate`` now when
        the policy's ``on_switch`` says so (it does by default); else nothing."""
        return self.revalidate(run_id, env=env) if self.revalidation.on_switch else []

    def hold_for(self, run_id: str) -> str | None:
        """One step of ``run_id`` (revalidating when due), then why a new effect may not
        start now, or None: what ``intercept`` and every effect ask first."""
        return self._hold_and_state(run_id)[0]

    def _hold_and_state(self, run_id: str) -> tuple[str | None, dict[str, Any]]:
        """``hold_for``, with the plain state it judged by (``_plain_state``): what
        ``intercept`` reads the run's budgets from too, one read of the head for both."""
        self._step(run_id)
        try:
            state = self._plain_state(run_id)
        except NotFoundError:
            self._steps.pop(run_id, None)  # no run: no count kept for it (ids are agents')
            raise
        return hold_reason(held_in(state["dependencies"])), state

    def holding(self, run_id: str) -> frozenset[str]:
        """The dependencies whose recorded change holds new effects of ``run_id``, at the
        run's head: a change another process recorded since this object last looked holds
        here too (the plain state is brought up to date from the log on every call)."""
        return held_in(self._plain_state(run_id)["dependencies"])

    def handoff(self, run_id: str, note: str) -> Event:
        """Record a note for the next session of the run (a reset with a handoff: what to
        do next, what not to redo); the next briefing and ``resume`` show it first, with
        who wrote it (an agent's note is its word). Raises ``usage.bad_note`` for an empty
        or over-long note, ``not_found.run``; nothing is written then."""
        if not isinstance(note, str) or not note.strip() or len(note) > MAX_NOTE_CHARS:
            raise UsageError(
                f"a handoff note is non-empty text of at most {MAX_NOTE_CHARS} characters",
                code="usage.bad_note",
                hint="say in a few lines what the next session must know; nothing was written",
            )
        return self.append(run_id, EventType.HANDOFF_RECORDED, {"note": note})

    def finish_run(self, run_id: str, *, aborted: bool = False, reason: str | None = None) -> Event:
        """Mark the run completed (a ``run_completed`` event) or, with ``aborted=True``,
        aborted (``run_aborted``); returns the event. A finished run takes no new side
        effects (``intercept`` raises ``ledger.run_finished``); settling earlier ones works.
        """
        type_ = EventType.RUN_ABORTED if aborted else EventType.RUN_COMPLETED
        if not aborted:
            open_children = [c for c in self.family(run_id) if c.status == RunStatus.ACTIVE]
            if open_children:
                names = ", ".join(repr(c.path) for c in open_children[:10])
                raise UsageError(
                    f"run {run_id!r} has {len(open_children)} child run(s) still active "
                    f"({names}); a parent is finished after its children",
                    code="usage.open_children",
                    hint="finish or abort each child first (continuum finish CHILD); "
                    "nothing was written",
                    children=[c.run_id for c in open_children],
                )
        return self.append(run_id, type_, {"reason": reason} if reason else {})

    def parents(self) -> dict[str, str | None]:
        """Each run's parent as its ``run_started`` event names it (None: a root), for
        ``continuum runs --tree``; reads one event per run, verified as read."""
        out: dict[str, str | None] = {}
        for info in self.store.list_runs():
            parent = None
            for event in self.store.iter_events(info.run_id):
                if event.type == EventType.RUN_STARTED:
                    value = event.payload.get("parent")
                    parent = value if isinstance(value, str) and value else None
                break  # the first event only
            out[info.run_id] = parent
        return out

    def family(self, run_id: str, *, limit: int = MAX_FAMILY) -> list[ChildView]:
        """Every run below ``run_id`` (children, their children, ...; at most ``limit``),
        each a ``ChildView``: its path, status and the open actions of its lean state.
        A listed child that never started, or whose ``run_started`` names another parent,
        is not one."""
        out: list[ChildView] = []
        seen = {run_id}
        queue = [(run_id, c, c) for c in self.state(run_id).children]
        while queue and len(out) < limit:
            parent, child, path = queue.pop(0)
            if child in seen:
                continue
            seen.add(child)
            try:
                state = self.state(child)
            except NotFoundError:
                continue  # listed, never started: nothing can have run in it
            if state.parent != parent:
                continue  # it does not say it is this run's child
            open_actions = [a for a in state.actions.values() if a.needs_human]
            in_flight = frozenset(self._in_flight(child, state))
            out.append(
                ChildView(
                    run_id=child,
                    path=path,
                    status=state.status,
                    open_actions=open_actions,
                    in_flight=in_flight,
                    pending_approvals=tuple(
                        sorted(a.id for a in state.approvals.values() if a.pending)
                    ),
                    waiting_branches=tuple(
                        (b.id, b.reason or "it needs a person")
                        for b in sorted(
                            state.branches.values(), key=lambda x: (x.provenance.sequence, x.id)
                        )
                        if b.waiting
                    ),
                )
            )
            queue += [(child, c, f"{path}/{c}") for c in state.children]
        return out

    def _in_flight(self, run_id: str, state: State) -> set[str]:
        """Ids of the run's started actions whose owner is still alive (lease, process)."""
        now = self.ledger.clock()
        started = [a for a in state.actions.values() if a.status == ActionStatus.STARTED]
        out: set[str] = set()
        for a in started:
            row = self.store.get_action(run_id, a.action_id)
            if owner_alive(a.owner, row.lease_expires if row else None, now):
                out.add(a.action_id)
        return out

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

    def _plain_state(self, run_id: str) -> dict[str, Any]:
        """The run's state at its head as plain data (``State``'s JSON form) without its
        actions: what an intercept asks first (the holds, the budgets), from what this
        object already read of the run and the events after it (``plain_state.py``).
        The cached state itself: read it, never change it; ``NotFoundError`` for a run
        never started."""
        head = self.store.get_head(run_id)
        cached = self._plain.get(run_id)
        if cached is not None and (cached.sequence, cached.head_hash) == (
            head.head_sequence,
            head.head_hash,
        ):
            self._plain.move_to_end(run_id)
            return cached.state
        start = cached if cached is not None and cached.sequence < head.head_sequence else None
        known = state_without_actions(self.store, run_id, start, head)
        self._plain[run_id] = known
        self._plain.move_to_end(run_id)
        while len(self._plain) > STATE_CACHE_RUNS:
            self._plain.popitem(last=False)
        return known.state

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
        event = self.append(run_id, EventType.DEPENDENCY_DECLARED, {"dependencies": decls})
        return event

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
        self._plain.pop(run_id, None)
        return archive_run(
            self.store, run_id, before, Path(to), origin=self.origin, progress=progress
        )

    def fork(self, run_id: str, *, at: int, new_run_id: str) -> ForkResult:
        """Start run ``new_run_id`` as a copy of ``run_id``'s events 1..``at`` (read
        verified), re-chained under the new id and followed by a ``run_forked`` marker
        (``State.forked_from``), one ``action_marked_unknown`` per action open at the fork
        point, and a checkpoint; all in one transaction, ``run_id`` untouched
        (``fork.py``). Effects completed in the prefix stay completed in the fork.
        Returns a ``fork.ForkResult``. Raises ``NotFoundError`` (``not_found.run``) and
        ``UsageError`` (``usage.bad_sequence``, ``usage.run_exists``,
        ``usage.bad_run_id``, ``usage.fork_archived``, ``usage.fork_imported``)."""
        from continuum.ops.fork import fork_run

        return fork_run(self.store, run_id, at, new_run_id, origin=self.origin)


def _progress_past_total(completed: int, failed: int, total: int) -> None:
    raise UsageError(
        f"progress of {completed} completed and {failed} failed exceeds the total "
        f"of {total}; nothing was recorded",
        code="usage.bad_progress",
        hint="record absolute numbers that fit the total, or raise the total first "
        "(total=N in the same call)",
        field="completed",
    )

"""The store protocol every backend implements, and the rows it speaks in.

A store keeps runs (with their head), events, the action index and checkpoints. Every
write that changes the log goes through ``write(run_id)``: one transaction in which the
event, the run's head and any index row move together or not at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from continuum.errors import IntegrityError
from continuum.eventlog.archived import ArchiveBase
from continuum.eventlog.events import EventType, RawEvent
from continuum.types import Origin, RunStatus
from continuum.untrusted import check_identifier

if TYPE_CHECKING:
    from continuum.eventlog.event_model import Event
    from continuum.eventlog.reports import VerifyReport
    from continuum.store.attempt_state import AttemptState
    from continuum.store.confirm_attempts import ConfirmAttempt
    from continuum.store.models import ApprovalRow as ApprovalRow
    from continuum.store.models import CheckpointRow as CheckpointRow
    from continuum.store.models import OutboxRow as OutboxRow
    from continuum.store.models import Run as Run
    from continuum.store.models import RunExport as RunExport
    from continuum.store.models import RunInfo as RunInfo

# -- shared by every backend ----------------------------------------------------------------


def integrity_error(run_id: str, sequence: int, kind: str, detail: str) -> IntegrityError:
    return IntegrityError(
        f"run {run_id!r} is damaged at sequence {sequence} ({kind}): {detail}",
        code=f"integrity.{kind}",
        hint=f"run `continuum verify {run_id}`; nothing was repaired or changed",
        run_id=run_id,
        sequence=sequence,
        kind=kind,
    )


def check_run_id(run_id: str) -> None:
    check_identifier(
        run_id,
        what="run id",
        code="usage.bad_run_id",
        allow_spaces=False,
        hint="use 1-200 printable characters without spaces, e.g. run_4821",
    )


def format_timestamp(moment: datetime) -> str:
    """UTC, microseconds, trailing Z: one textual form for every backend."""
    moment = moment.astimezone(UTC)
    if moment.year < 1000:  # strftime's %Y does not pad: keep its form
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.isoformat(timespec="microseconds")[:-6] + "Z"  # "+00:00" -> "Z"


def now_timestamp() -> str:
    """``format_timestamp`` of this moment (the stores' clock), without converting a moment
    that is already in UTC."""
    moment = datetime.now(UTC)
    if moment.year < 1000:  # never on a sane clock; the one form either way
        return format_timestamp(moment)
    return moment.isoformat(timespec="microseconds")[:-6] + "Z"


OUTBOX_STATUSES = ("pending", "delivered", "failed")

# Action listings come a page at a time (``Storage.action_page``): this many by default.
DEFAULT_PAGE, MAX_PAGE = 50, 1000


class RunHead(NamedTuple):
    """A run's row as a write transaction reads it, as plain data: ``RunInfo``'s fields,
    each already checked (``rows.run_head``). The hot path never builds the model."""

    run_id: str
    goal: str | None
    status: RunStatus
    created_at: str
    head_sequence: int
    head_hash: str | None
    metadata: dict[str, Any]


class StoredCheckpoint(NamedTuple):
    """A stored checkpoint as plain data: ``CheckpointRow``'s fields, each checked
    (``rows.stored_checkpoint``)."""

    run_id: str
    sequence: int  # the state covers events 1..sequence
    event_sequence: int  # the `checkpointed` event that sealed it
    state_json: str
    state_hash: str
    created_at: str


class ActionRow(NamedTuple):
    """One row of the action index: the fold's record of the action plus its lease.

    Plain data (no pydantic), built by ``rows.action_from_row`` from a row it checked:
    the ledger's hot path reads and writes these on every intercept and complete."""

    run_id: str
    action_id: str
    record: dict[str, Any]
    lease_expires: float | None = None


class WriteTx(Protocol):
    """Inside one serialized write transaction on one run."""

    @property
    def run(self) -> RunInfo: ...

    @property
    def head(self) -> RunHead:
        """The run as this transaction sees it, as plain data (no model built)."""
        ...

    def append(
        self,
        type: EventType | str,
        payload: dict[str, Any],
        *,
        source: Origin,
        causer_event_id: str | None = None,
    ) -> Event: ...

    def append_raw(
        self,
        type: EventType | str,
        payload: dict[str, Any],
        *,
        source: Origin,
        causer_event_id: str | None = None,
        keys_checked: bool = False,
    ) -> RawEvent:
        """``append``, the event as plain data. ``keys_checked``: the payload's keys are
        all strings and its values all JSON by construction (its encoding skips that
        walk; its form and limits are still checked)."""
        ...

    def find_action(
        self,
        *,
        action_id: str | None = None,
        dedup_key: str | None = None,
        fallback_key: str | None = None,
        action_key: str | None = None,
    ) -> ActionRow | None: ...

    def put_action(self, row: ActionRow) -> None: ...

    def actions(self) -> list[ActionRow]:
        """Every action of the run as this transaction sees it."""
        ...

    def put_notice(self, notice: dict[str, Any]) -> None:
        """A notification that is not an event's, once per ``delivery_id``."""
        ...

    def actions_of(
        self, scope: str, run_ids: Sequence[str], listed_at: Sequence[int] = ()
    ) -> list[ActionRow]:
        """Every action of ``run_ids`` and of the runs started under them since they were
        listed, after taking ``scope``'s write lock (a family's budget)."""
        ...

    def put_checkpoint(self, row: CheckpointRow) -> None: ...

    def drop_archived(self, marker: Event) -> tuple[int, int]:
        """Remove the events the archive ``marker`` (appended in this transaction) names,
        and their checkpoints: (events, checkpoints). For ``continuum archive`` only."""
        ...

    def find_approval(
        self,
        *,
        approval_id: str | None = None,
        binding: str | None = None,
        run_grant: str | None = None,
    ) -> ApprovalRow | None:
        """This run's approval by id; the latest bound to ``binding``; or the first grant
        for the rest of the run of action type ``run_grant``."""
        ...


class Storage(Protocol):
    """What every backend provides. Driver errors never cross this boundary.

    ``open_store(url)`` returns one (``SQLiteStorage`` for a file, ``PostgresStorage``
    for ``postgresql://``). Every write is durable when it returns. Errors:
    ``UsageError`` for bad input, ``NotFoundError`` (``not_found.run``),
    ``IntegrityError`` for a damaged log (refused, never repaired), ``StoreError``
    (``store.*``) for the database itself; a call that raises wrote nothing.
    """

    url: str

    def create_run(self, run: Run, *, exist_ok: bool = False) -> RunInfo:
        """Create ``run`` (no events yet); returns its ``RunInfo``. An existing run is
        returned with ``exist_ok=True``, else ``UsageError`` ``usage.run_exists``; a bad
        id raises ``usage.bad_run_id``."""
        ...

    def get_run(self, run_id: str) -> RunInfo:
        """The run's ``RunInfo``; ``NotFoundError`` (``not_found.run``) if there is none."""
        ...

    def get_head(self, run_id: str) -> RunHead:
        """``get_run`` as plain data (no model built)."""
        ...

    def list_runs(self) -> list[RunInfo]:
        """Every run, oldest first."""
        ...

    def append_event(
        self,
        run_id: str,
        type: EventType | str,
        payload: dict[str, Any],
        *,
        source: Origin = Origin.DETERMINISTIC,
        causer_event_id: str | None = None,
    ) -> Event:
        """Seal and append one event to the run's chain; returns it once durable.

        ``type``: an ``EventType`` or a type of your own; ``payload``: a JSON object (a
        known type's payload is checked: ``usage.bad_payload``); ``source``: who records
        it; ``causer_event_id``: the event that caused it. Raises ``NotFoundError``
        (``not_found.run``) and ``UsageError`` (``usage.not_json``, ...).
        """
        ...

    def append_raw(
        self,
        run_id: str,
        type: EventType | str,
        payload: dict[str, Any],
        *,
        source: Origin = Origin.DETERMINISTIC,
        causer_event_id: str | None = None,
    ) -> RawEvent:
        """``append_event``, the event as plain data (no model built)."""
        ...

    def append_events(
        self,
        run_id: str,
        events: Sequence[tuple[EventType | str, dict[str, Any]]],
        *,
        source: Origin = Origin.DETERMINISTIC,
    ) -> list[Event]:
        """Append several events in one transaction, chained as the same single appends
        would be; all durable on return, or none written (a bad one named by position)."""
        ...

    def read_events(self, run_id: str, after: int = 0) -> list[Event]:
        """The run's events after sequence ``after``, in order, each verified as read;
        ``IntegrityError`` on damage, ``NotFoundError`` (``not_found.run``)."""
        ...

    def iter_events(self, run_id: str, after: int = 0) -> Iterator[Event]:
        """``read_events`` one at a time (for long runs)."""
        ...

    def iter_raw(
        self, run_id: str, after: int = 0, *, prev_hash: str | None = None, upto: int | None = None
    ) -> Iterator[RawEvent]:
        """``iter_events`` as plain data, verified as read (see ``core.CoreStore``)."""
        ...

    def own_events(
        self, run_id: str, after: int, prev_hash: str | None, head: RunHead
    ) -> list[tuple[RawEvent, str]] | None:
        """The events after ``after`` (hash ``prev_hash``) up to ``head``, if this object
        wrote and committed every one of them; else None (read them with ``iter_raw``).
        Each as sealed, with its payload's canonical text: take the payload from the text
        (``own_writes.readable``), never from the event (it is the writer's object)."""
        ...

    def verify_events(self, run_id: str) -> VerifyReport:
        """Recompute every hash and check sequence, links and head: a ``VerifyReport``;
        damage is reported, never raised and never repaired."""
        ...

    def event_hash_at(self, run_id: str, sequence: int) -> str | None:
        """The stored hash of event ``sequence``, or None if there is no such event."""
        ...

    def archive_base(self, run_id: str) -> ArchiveBase | None:
        """Where the run's live log starts when its old history was archived (``continuum
        archive``): the latest ``history_archived`` marker; None when it starts at 1."""
        ...

    def snapshot(self) -> AbstractContextManager[None]:
        """Reads inside see one consistent state of the whole store (a backup's snapshot)."""
        ...

    def count_events(self, run_id: str) -> int:
        """Rows stored for ``run_id``, whatever their sequence (rules out rows outside
        1..head in the one-pass verify)."""
        ...

    def write(self, run_id: str) -> AbstractContextManager[WriteTx]:
        """One serialized write transaction on the run: everything in it commits
        together, or nothing does."""
        ...

    def get_action(self, run_id: str, action_ref: str) -> ActionRow | None:
        """The action index row for an ``action_id`` or ``action_key``, or None."""
        ...

    def list_actions(self, run_id: str) -> list[ActionRow]:
        """Every action index row of the run, in interception order."""
        ...

    def action_page(
        self, run_id: str, *, cursor: str | None = None, limit: int = DEFAULT_PAGE
    ) -> tuple[list[ActionRow], str | None]:
        """One page of action rows, open ones first, and the cursor of the next page."""
        ...

    def action_index_rows(self, run_id: str) -> list[tuple[Any, ...]]:
        """The raw index rows, for checking the index against the log."""
        ...

    def renew_lease(self, run_id: str, action_id: str, lease_expires: float) -> None:
        """Extend the lease of a started action (its performer is still at it)."""
        ...

    def list_checkpoints(self, run_id: str) -> list[CheckpointRow]:
        """The run's stored checkpoints, newest (highest sequence) first."""
        ...

    def stored_checkpoints(
        self, run_id: str, *, limit: int | None = None
    ) -> list[StoredCheckpoint]:
        """``list_checkpoints`` as plain data; ``limit``: the newest ``limit`` only."""
        ...

    def import_runs(self, runs: list[RunExport]) -> list[RunInfo]:
        """Write exported runs as they are (ids, sequences, hashes) in one transaction.

        Refused, with nothing written, if any run already exists or any chain does not
        verify once written (checked inside the transaction)."""
        ...

    def delete_run(self, run_id: str, *, expect_head: tuple[int, str | None]) -> None:
        """Delete a finished run (events, actions, checkpoints, its other rows, the run
        record) in one transaction, for ``continuum prune`` once its export is verified.

        Refused, with nothing deleted, unless the run is completed or aborted
        (``usage.run_active``), its head is still ``expect_head`` (``(head_sequence,
        head_hash)`` as exported: else ``usage.run_moved_on``) and its stored log matches
        that head (``integrity.head_mismatch``)."""
        ...

    def schema_version(self) -> int:
        """The schema version of the store's tables."""
        ...

    # -- approvals (the index is kept by every write transaction that appends their events)

    def find_approvals(self, approval_id: str) -> list[ApprovalRow]:
        """Every approval with this id, in any run (ids are random: one, unless the log was
        written by hand)."""
        ...

    def list_approvals(
        self, *, run_id: str | None = None, status: str | None = None, limit: int = MAX_PAGE
    ) -> list[ApprovalRow]:
        """Approvals in the order they were requested, of one run or all, optionally of one
        status; at most ``limit``."""
        ...

    def approval_index_rows(self, run_id: str) -> list[tuple[Any, ...]]:
        """Every approval index row of the run as stored: ``(run_id, approval_id, record,
        binding, status, run_grant)`` (the record and the lookup columns derived from it)."""
        ...

    # -- the notification outbox ----------------------------------------------------------

    def list_outbox(
        self, *, status: str | None = None, run_id: str | None = None, limit: int = MAX_PAGE
    ) -> list[OutboxRow]:
        """Notifications, newest first; optionally of one status or run."""
        ...

    def outbox_counts(self) -> dict[str, int]:
        """How many notifications are pending, delivered and failed."""
        ...

    def put_notice(self, run_id: str, notice: dict[str, Any]) -> None:
        """A notification about ``run_id`` that is not an event's, once per
        ``delivery_id``, in a write transaction of its own."""
        ...

    def deliverer_lock(self) -> Callable[[], None] | None:
        """Take the store's one background-deliverer role across processes: its release,
        or None while another process holds it (a killed holder frees it)."""
        ...

    def claim_outbox(self, now: float, until: float, limit: int) -> list[OutboxRow]:
        """Take up to ``limit`` pending notifications that are due (``next_attempt <= now``)
        and not claimed by another deliverer (or whose claim lapsed) until ``until``."""
        ...

    def record_delivery(
        self,
        delivery_id: str,
        *,
        status: str,
        attempts: int,
        next_attempt: float,
        delivered_to: list[str],
        last_error: str | None,
        delivered_at: str | None,
        claim: OutboxRow | None = None,
    ) -> bool:
        """Record the outcome of one delivery attempt and release the claim. With ``claim``
        (the row as ``claim_outbox`` returned it), only while that claim still holds the
        row: a deliverer whose claim lapsed and was taken over records nothing (False)."""
        ...

    def requeue_outbox(self, delivery_ids: Sequence[str] | None = None) -> int:
        """Put failed notifications (these, or all) back to pending, due now; returns how
        many."""
        ...

    # -- wrong confirm tokens, counted per store (store/confirm_attempts.py) --------------

    def confirm_attempt(
        self,
        run_id: str | None,
        matches: Callable[[], bool],
        *,
        channel: str,
        caller: str | None,
        now: float,
    ) -> ConfirmAttempt:
        """In one transaction: refuse while the counter's backoff runs or it is locked, or
        when ``run_id`` is not a run here (``matches`` is then not called); else call
        ``matches`` and count a wrong token (a notification from the third in a row)."""
        ...

    def confirm_attempts(self) -> AttemptState:
        """The counter of wrong confirm tokens, as stored."""
        ...

    def unlock_confirm_attempts(self, *, now: float) -> AttemptState:
        """A person's reset of the counter (no wait, not locked); returns the new state."""
        ...

    def close(self) -> None:
        """Close the store's connections."""
        ...

"""The store protocol every backend implements, and the rows it speaks in.

A store keeps runs (with their head), events, the action index and checkpoints. Every
write that changes the log goes through ``write(run_id)``: one transaction in which the
event, the run's head and any index row move together or not at all.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from continuum.chain import VerifyReport
from continuum.errors import IntegrityError
from continuum.events import Event, EventType, RawEvent
from continuum.types import Origin, RunStatus
from continuum.untrusted import check_identifier

# -- shared by every backend ----------------------------------------------------------------


def integrity_error(run_id: str, sequence: int, kind: str, detail: str) -> IntegrityError:
    return IntegrityError(
        f"run {run_id!r} is damaged at sequence {sequence} ({kind}): {detail}",
        code=f"integrity.{kind}",
        hint=f"run `continuum verify {run_id}`; nothing was repaired or changed",
        run_id=run_id, sequence=sequence, kind=kind,
    )


def check_run_id(run_id: str) -> None:
    check_identifier(run_id, what="run id", code="usage.bad_run_id", allow_spaces=False,
                     hint="use 1-200 printable characters without spaces, e.g. run_4821")


def format_timestamp(moment: datetime) -> str:
    """UTC, microseconds, trailing Z: one textual form for every backend."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# Action listings come a page at a time (``Storage.action_page``): this many by default.
DEFAULT_PAGE, MAX_PAGE = 50, 1000


class Run(BaseModel):
    """A run to create. Only ``run_id`` is required."""

    run_id: str
    goal: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class RunInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_id: str
    goal: str | None
    status: RunStatus
    created_at: str
    head_sequence: int
    head_hash: str | None
    metadata: dict[str, Any] = Field(default_factory=dict)


class ActionRow(BaseModel):
    """One row of the action index: the fold's record of the action plus its lease."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    action_id: str
    record: dict[str, Any]
    lease_expires: float | None = None


class CheckpointRow(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_id: str
    sequence: int  # the state covers events 1..sequence
    event_sequence: int  # the `checkpointed` event that sealed it
    state_json: str
    state_hash: str
    created_at: str


class RunExport(BaseModel):
    """One whole run as moved between stores: its record, every event exactly as sealed,
    its checkpoints and its action index (rebuilt from the events by the exporter)."""

    run: RunInfo
    events: list[Event]
    checkpoints: list[CheckpointRow] = Field(default_factory=list)
    actions: list[ActionRow] = Field(default_factory=list)


class WriteTx(Protocol):
    """Inside one serialized write transaction on one run."""

    @property
    def run(self) -> RunInfo: ...

    def append(
        self,
        type: EventType | str,
        payload: dict[str, Any],
        *,
        source: Origin,
        causer_event_id: str | None = None,
    ) -> Event: ...

    def find_action(self, *, action_id: str | None = None, dedup_key: str | None = None,
                    fallback_key: str | None = None, action_key: str | None = None) -> ActionRow | None: ...

    def put_action(self, row: ActionRow) -> None: ...

    def put_checkpoint(self, row: CheckpointRow) -> None: ...


class Storage(Protocol):
    """What every backend provides. Driver errors never cross this boundary."""

    url: str

    def create_run(self, run: Run, *, exist_ok: bool = False) -> RunInfo: ...

    def get_run(self, run_id: str) -> RunInfo: ...

    def list_runs(self) -> list[RunInfo]: ...

    def append_event(
        self,
        run_id: str,
        type: EventType | str,
        payload: dict[str, Any],
        *,
        source: Origin = Origin.DETERMINISTIC,
        causer_event_id: str | None = None,
    ) -> Event: ...

    def append_events(
        self,
        run_id: str,
        events: Sequence[tuple[EventType | str, dict[str, Any]]],
        *,
        source: Origin = Origin.DETERMINISTIC,
    ) -> list[Event]: ...

    def read_events(self, run_id: str, after: int = 0) -> list[Event]: ...

    def iter_events(self, run_id: str, after: int = 0) -> Iterator[Event]: ...

    def iter_raw(self, run_id: str, after: int = 0, *, prev_hash: str | None = None,
                 upto: int | None = None) -> Iterator[RawEvent]:
        """``iter_events`` as plain data, verified as read (see ``core.CoreStore``)."""
        ...

    def verify_events(self, run_id: str) -> VerifyReport: ...

    def event_hash_at(self, run_id: str, sequence: int) -> str | None: ...

    def count_events(self, run_id: str) -> int:
        """Rows stored for ``run_id``, whatever their sequence (rules out rows outside
        1..head in the one-pass verify)."""
        ...

    def write(self, run_id: str) -> AbstractContextManager[WriteTx]: ...

    def get_action(self, run_id: str, action_ref: str) -> ActionRow | None: ...

    def list_actions(self, run_id: str) -> list[ActionRow]: ...

    def action_page(self, run_id: str, *, cursor: str | None = None,
                    limit: int = DEFAULT_PAGE) -> tuple[list[ActionRow], str | None]: ...

    def action_index_rows(self, run_id: str) -> list[tuple[Any, ...]]: ...

    def renew_lease(self, run_id: str, action_id: str, lease_expires: float) -> None: ...

    def list_checkpoints(self, run_id: str) -> list[CheckpointRow]: ...

    def import_runs(self, runs: list[RunExport]) -> list[RunInfo]:
        """Write exported runs as they are (ids, sequences, hashes) in one transaction.

        Refused, with nothing written, if any run already exists or any chain does not
        verify once written (checked inside the transaction)."""
        ...

    def schema_version(self) -> int: ...

    def close(self) -> None: ...

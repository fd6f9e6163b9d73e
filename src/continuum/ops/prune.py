"""Archive finished runs, then delete them from the store: ``continuum prune``.

Only runs that are completed or aborted, and whose last event is before the cut-off, are
candidates; an active run never is, and neither is a run whose early history was archived
or one with unsettled work (an action started or unknown, an approval waiting): those are
skipped and reported, never exported-then-deleted while they still need a person. Each is first written with the export format
(``continuum.ops.transfer``: every event exactly as sealed, its checkpoints), the file is
synced, renamed into place and read back through the import checks (every chain against
its head), and only then is each run deleted, one transaction per run, by
``Storage.delete_run`` with the head that was exported: a run that moved on after the
export, or whose stored log no longer matches that head, is refused and kept. So a run
is deleted only while a verified copy of exactly its chain is on disk, and ``continuum
import FILE`` brings it back with every hash unchanged.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from datetime import UTC, date, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from continuum.errors import ContinuumError, IntegrityError, UsageError
from continuum.faults import fault_point
from continuum.ops.transfer import export_runs, read_export
from continuum.state.records import ActionRecord
from continuum.store import Storage
from continuum.types import RunStatus
from continuum.untrusted import as_typed

FINISHED = (RunStatus.COMPLETED, RunStatus.ABORTED)
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,100}")


class Candidate(BaseModel):
    """A finished run old enough to prune."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    goal: str | None
    status: str
    events: int
    last_event_at: str
    head: str  # SEQ:HASH


class Refusal(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_id: str
    code: str
    message: str


class PruneReport(BaseModel):
    before: str
    dry_run: bool
    runs: list[Candidate]
    archives: dict[str, str] = Field(default_factory=dict)  # run_id -> archive file
    pruned: list[str] = Field(default_factory=list)
    refused: list[Refusal] = Field(default_factory=list)
    skipped: list[Refusal] = Field(default_factory=list)  # not candidates: see ``select``


def parse_before(text: str) -> datetime:
    """``--before``: an ISO date (midnight UTC) or an ISO date-time with a zone (Z or
    +HH:MM); anything else, a time without a zone included, is refused."""
    hint = (
        "give an ISO date (2026-01-31, meaning 00:00 UTC) or a date-time with its zone "
        "(2026-01-31T12:00:00Z or 2026-01-31T12:00:00+02:00)"
    )
    value = text.strip()
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        try:
            day = date.fromisoformat(value)
        except ValueError as e:
            raise UsageError(
                f"--before {as_typed(text)} is not a date: {e}", code="usage.bad_date", hint=hint
            ) from None
        return datetime(day.year, day.month, day.day, tzinfo=UTC)
    if not re.fullmatch(
        r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?"
        r"(Z|[+-]\d{2}:\d{2})?",
        value,
    ):
        raise UsageError(
            f"--before {as_typed(text)} is not an ISO date or date-time",
            code="usage.bad_date",
            hint=hint,
        )
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as e:
        raise UsageError(
            f"--before {as_typed(text)} is not a valid date-time: {e}",
            code="usage.bad_date",
            hint=hint,
        ) from None
    if moment.tzinfo is None:
        raise UsageError(
            f"--before {as_typed(text)} has no time zone", code="usage.bad_date", hint=hint
        )
    return moment.astimezone(UTC)


def _moment(stamp: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def candidates(store: Storage, before: datetime) -> list[Candidate]:
    """The finished runs whose last event is before ``before``, oldest first, that can be
    pruned (``select`` also says which were skipped, and why)."""
    return select(store, before)[0]


def select(store: Storage, before: datetime) -> tuple[list[Candidate], list[Refusal]]:
    """The finished runs whose last event is before ``before``, oldest first, split into
    those that can be pruned and those skipped: a run whose early history is archived
    (``continuum archive``: the export would hold only its live part), and a run with
    unsettled work (an action started, unknown or failed on an agent's word, or an
    approval waiting for a person), which still needs a human, not a deletion. The last
    event is read through the verifying reader (its hash and link checked)."""
    found: list[Candidate] = []
    skipped: list[Refusal] = []
    for run in store.list_runs():
        if run.status not in FINISHED or run.head_sequence == 0:
            continue
        base = store.archive_base(run.run_id)
        after = max(run.head_sequence - 1, base.through if base is not None else 0)
        last = next(iter(store.iter_raw(run.run_id, after=after)))
        moment = _moment(last.timestamp)
        if moment is None or moment >= before:
            continue
        why = (
            _unsettled(store, run.run_id)
            if base is None
            else Refusal(
                run_id=run.run_id,
                code="prune.archived_run",
                message=f"its events 1..{base.through} are in the archive "
                f"{as_typed(base.archive_name or '?')}: prune keeps a run whose history is split "
                "(keep it, or export it with `continuum export` and its archive files)",
            )
        )
        if why is not None:
            skipped.append(why)
            continue
        found.append(
            Candidate(
                run_id=run.run_id,
                goal=run.goal,
                status=str(run.status),
                events=run.head_sequence,
                last_event_at=last.timestamp,
                head=f"{run.head_sequence}:{run.head_hash}",
            )
        )
    return found, skipped


def _unsettled(store: Storage, run_id: str) -> Refusal | None:
    """Why ``run_id`` still needs a person (None if nothing of it does)."""
    open_actions = [
        row.record.get("action_key") or row.action_id
        for row in store.list_actions(run_id)
        if ActionRecord.model_validate(row.record).needs_human
    ]
    if open_actions:
        return Refusal(
            run_id=run_id,
            code="prune.unsettled_actions",
            message=f"{len(open_actions)} action(s) are not settled (started, "
            "unknown, or failed on an agent's word): settle them first "
            f"(`continuum actions {as_typed(run_id)}`, then `continuum reconcile`)",
        )
    waiting = store.list_approvals(run_id=run_id, status="requested", limit=1)
    if waiting:
        return Refusal(
            run_id=run_id,
            code="prune.pending_approvals",
            message="an approval is waiting for a person's decision "
            f"(`continuum approvals {as_typed(run_id)}`): decide it first",
        )
    return None


def archive_files(
    runs: list[Candidate], *, to_dir: str | None, archive: str | None
) -> dict[str, Path]:
    """Where each run's export goes: all in ``archive``, or one file per run in
    ``to_dir`` (named after the run, or after its hash when the id is no safe file name).
    Refused if a file is already there: nothing is overwritten."""
    if (to_dir is None) == (archive is None):
        raise UsageError(
            "say where the runs are archived first: --to DIR or --archive FILE (one of them)",
            code="usage.no_archive",
            hint="continuum prune --finished --before 2026-01-01 --to archive/",
        )
    if archive is not None:
        path = Path(archive)
        if path.exists() or path.is_symlink():
            raise UsageError(
                f"{as_typed(archive)} exists; nothing was archived or deleted",
                code="usage.file_exists",
                hint="choose a new archive file",
            )
        if not path.parent.is_dir() and str(path.parent):
            raise UsageError(
                f"directory {as_typed(str(path.parent))} does not exist",
                code="usage.no_directory",
                hint="create it first",
            )
        return {r.run_id: path for r in runs}
    assert to_dir is not None
    folder = Path(to_dir)
    if not folder.is_dir():
        raise UsageError(
            f"{as_typed(to_dir)} is not a directory",
            code="usage.no_directory",
            hint="create it first (mkdir), or pass --archive FILE",
        )
    out: dict[str, Path] = {}
    taken: set[str] = set()
    for run in runs:
        name = run.run_id if _SAFE_NAME.fullmatch(run.run_id) else ""
        if not name or name.casefold() in taken:  # case-insensitive file systems too
            name = "run-" + hashlib.sha256(run.run_id.encode("utf-8")).hexdigest()[:16]
        taken.add(name.casefold())
        out[run.run_id] = folder / f"{name}.jsonl"
    existing = [p for p in out.values() if p.exists() or p.is_symlink()]
    if existing:
        raise UsageError(
            f"{as_typed(str(existing[0]))} exists; nothing was archived or deleted",
            code="usage.file_exists",
            hint="archive into an empty directory, or move the old archives away",
        )
    return out


def _private(path: Path) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)  # exports carry what agents wrote: owner only
    return fd


def write_verified(store: Storage, path: Path, runs: list[Candidate]) -> dict[str, tuple[int, str]]:
    """Export ``runs`` to ``path`` (written aside, synced, renamed into place), read the file
    back through the import checks and return each run's head as exported."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        with os.fdopen(_private(partial), "w", encoding="utf-8", newline="\n") as f:
            summary = export_runs(store, f, [r.run_id for r in runs])
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()  # our own unfinished file, never a user's
        raise
    with contextlib.suppress(OSError):  # the rename itself durable
        dir_fd = os.open(path.parent if str(path.parent) else Path("."), os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    heads: dict[str, tuple[int, str]] = {}
    for run_id, head in summary.heads.items():
        seq, _, hash_ = head.partition(":")
        heads[run_id] = (int(seq), hash_)
    with open(path, encoding="utf-8") as f:
        bundles = read_export(f)  # every chain verified against its head, checkpoints too
    read_back = {b.run.run_id: (b.run.head_sequence, b.run.head_hash) for b in bundles}
    if read_back != heads or set(heads) != {r.run_id for r in runs}:
        raise IntegrityError(
            f"the archive {as_typed(str(path))} does not read back as written; nothing was deleted",
            code="integrity.archive_mismatch",
            hint="check the disk; the file was left for inspection",
        )
    return heads


def prune(
    store: Storage, runs: list[Candidate], files: dict[str, Path], *, before: datetime
) -> PruneReport:
    """Archive ``runs`` to ``files`` (each file verified), then delete each run whose head is
    still the one archived. A refusal keeps that run and is reported; the others go on."""
    report = PruneReport(
        before=before.isoformat(),
        dry_run=False,
        runs=runs,
        archives={r: str(p) for r, p in files.items()},
    )
    by_file: dict[Path, list[Candidate]] = {}
    for run in runs:
        by_file.setdefault(files[run.run_id], []).append(run)
    heads: dict[str, tuple[int, str]] = {}
    for path, group in by_file.items():
        heads.update(write_verified(store, path, group))
    fault_point("after_prune_export")  # crash tests: archived, nothing deleted yet
    for run in runs:
        try:
            store.delete_run(run.run_id, expect_head=heads[run.run_id])
        except ContinuumError as e:
            report.refused.append(Refusal(run_id=run.run_id, code=e.code, message=e.message))
            continue
        report.pruned.append(run.run_id)
    return report

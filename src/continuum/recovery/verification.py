"""Verification of a run: the chain, its head, an anchor, the action index, checkpoints.

``verify_run`` reads the log once when it can (``verified_fold``): every event verified as
it is read and folded; with the head matched and no row outside 1..head, that is exactly
what the store's full ``verify_events`` report would say of an intact chain, and anything
else gets the full report, which names the damage. The action and approval indexes are
then compared with the fold (an edited index is caught) and every checkpoint with its hash.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from typing import Any

from continuum.errors import HistoryArchivedError, IntegrityError, UsageError
from continuum.eventlog.canonical import digest, parse_json, text_digest
from continuum.eventlog.chain import DamageKind, check_anchor, with_violations
from continuum.eventlog.events import EventType
from continuum.eventlog.reports import VerifyReport, Violation
from continuum.state.projection import empty_plain, fold_plain
from continuum.store import CheckpointRow, Storage
from continuum.store.approval_outbox import approval_column_problem, approval_record
from continuum.store.rows import action_record

# ``json.loads``'s own scanner (its options; ``loads`` adds only the whitespace around).
# ``scan_once`` is set in ``JSONDecoder.__init__``, which the stub does not declare.
_SCAN_RECORD: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


@contextmanager
def bulk_reading() -> Iterator[None]:
    """Pause the cyclic garbage collector while a long log is read and folded.

    Reading 100,000 events makes some 10 objects each (rows, dicts, strings), none of
    them in a reference cycle, and each young-generation collection walks them again: a
    quarter of the time of a verify went there. Reference counting frees them as
    before; the collector is re-enabled (if it was on) afterwards, whatever happens.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def verify_run(store: Storage, run_id: str, *, expect_head: str | None = None) -> VerifyReport:
    with bulk_reading():
        return _verify_run(store, run_id, expect_head=expect_head)


def _verify_run(store: Storage, run_id: str, *, expect_head: str | None = None) -> VerifyReport:
    acc, report = verified_fold(store, run_id)
    extra: list[Violation] = []
    if expect_head is not None:
        seq, hash_ = parse_anchor(expect_head)
        v = check_anchor(seq, hash_, store.event_hash_at(run_id, seq), report.head_sequence)
        if v is not None:
            extra.append(v)
    if acc is not None:
        extra += index_row_violations(acc, store.action_index_rows(run_id))
        extra += approval_index_violations(acc, store.approval_index_rows(run_id))
        extra += checkpoint_violations(store, run_id, acc["sequence"])
    return with_violations(report, extra)


def checkpoint_violations(store: Storage, run_id: str, sequence: int) -> list[Violation]:
    """Each stored checkpoint of the run against its hash and against the ``checkpointed``
    event that sealed it, so a row edited together with its hash column is caught by the
    chain; a checkpoint sealed by an event no longer in the live log (archived) against
    its hash alone. ``sequence``: where a row too damaged to read is reported."""
    try:
        checkpoints = store.list_checkpoints(run_id)
    except IntegrityError as e:  # a checkpoint row too damaged to read
        return [Violation(sequence=sequence, kind=DamageKind.CHECKPOINT_MISMATCH, detail=e.message)]
    found: list[Violation] = []
    for cp in checkpoints:
        why = _checkpoint_problem(store, run_id, cp)
        if why is not None:
            found.append(
                Violation(
                    sequence=cp.event_sequence,
                    kind=DamageKind.CHECKPOINT_MISMATCH,
                    detail=f"checkpoint through {cp.sequence} {why}",
                )
            )
    return found


def _checkpoint_problem(store: Storage, run_id: str, cp: CheckpointRow) -> str | None:
    try:
        sealed = next(
            iter(store.iter_raw(run_id, cp.event_sequence - 1, upto=cp.event_sequence)), None
        )
    except (HistoryArchivedError, IntegrityError):  # archived, or a chain reported already
        return "fails its hash" if state_digest(cp) != cp.state_hash else None
    if (
        sealed is None
        or sealed.sequence != cp.event_sequence
        or sealed.type != EventType.CHECKPOINTED
        or sealed.payload.get("state_hash") != cp.state_hash
    ):
        return "does not match the event that sealed it"
    # The hash is the chain's now: the stored text may be taken as the text hashed.
    if text_digest(cp.state_json, cp.state_hash) != cp.state_hash:
        return "fails its hash"
    return None


def verified_fold(store: Storage, run_id: str) -> tuple[dict[str, Any] | None, VerifyReport]:
    """The chain report and, for an intact chain, the full fold in its plain form (no model
    per action): one read of the log."""
    run = store.get_run(run_id)
    try:
        acc: dict[str, Any] | None = fold_plain(empty_plain(run_id), store.iter_raw(run_id))
    except IntegrityError:
        acc = None
    if (
        acc is not None
        and acc["sequence"] == run.head_sequence
        and acc["head_hash"] == run.head_hash
        and store.count_events(run_id) == run.head_sequence
    ):
        return acc, VerifyReport(
            run_id=run_id,
            ok=True,
            events_checked=run.head_sequence,
            trusted_through=run.head_sequence,
            head_sequence=run.head_sequence,
            head_hash=run.head_hash,
            violations=[],
        )
    report = store.verify_events(run_id)
    if not report.ok:
        return None, report
    return fold_plain(empty_plain(run_id), store.iter_raw(run_id)), report


def issue_anchor(store: Storage, run_id: str) -> dict[str, Any]:
    run = store.get_run(run_id)
    report = store.verify_events(run_id)
    if not report.ok:
        v = report.violations[0]
        raise IntegrityError(
            f"run {run_id!r} is damaged at sequence {v.sequence} ({v.kind}); "
            "no anchor is issued for a damaged chain",
            code=f"integrity.{v.kind}",
            hint=f"run `continuum verify {run_id}`",
            run_id=run_id,
        )
    return {
        "run_id": run_id,
        "sequence": run.head_sequence,
        "hash": run.head_hash,
        "anchor": f"{run.head_sequence}:{run.head_hash}",
    }


def parse_anchor(text: str) -> tuple[int, str]:
    seq, sep, hash_ = text.partition(":")
    if (
        not sep
        or not seq.isdigit()
        or int(seq) < 1
        or len(hash_) != 64
        or any(c not in "0123456789abcdef" for c in hash_)
    ):
        raise UsageError(
            f"anchor {text!r} is not SEQ:HASH",
            code="usage.bad_anchor",
            hint="use the value printed by `continuum anchor RUN`, e.g. 42:3fa9...",
        )
    return int(seq), hash_


def state_digest(cp: CheckpointRow) -> str | None:
    """The digest of the value a checkpoint's state text holds (parsed and encoded again,
    whatever its hash column says), or None if it is too damaged to parse."""
    try:
        return digest(parse_json(cp.state_json))
    except (ValueError, TypeError):
        return None


def index_row_violations(acc: dict[str, Any], rows: list[tuple[Any, ...]]) -> list[Violation]:
    """``index_violations`` of the index rows as stored (``action_index_rows``).

    An intact row's record text parses, with the options of ``action_record``'s
    ``json.loads`` and nothing after the value, to a record equal to the fold's for the
    row's action and dedup key: exactly the row ``action_record`` reads and
    ``index_violations`` finds equal, confirmed with one scan and one comparison (cheaper
    than encoding the fold's record). Any other row takes ``action_record``, so a damaged
    row is judged as ``index_violations`` judges it, and a row too damaged to read is
    named. (A confirmed row would only be found equal there: its action is passed as
    covered instead, as an unreadable row's is, so it is not reported missing.)"""
    folded_actions: dict[str, dict[str, Any]] = acc["actions"]
    records: list[dict[str, Any]] = []
    out: list[Violation] = []
    covered: set[Any] = set()  # the actions of confirmed and unreadable rows
    scan = _SCAN_RECORD
    for row in rows:
        action_id, text = row[1], row[2]
        folded = folded_actions.get(action_id) if type(action_id) is str else None
        try:
            if (
                folded is not None
                and type(text) is str
                and row[4] == folded["dedup_key"]
                and action_id == folded["action_id"]
            ):
                record, end = scan(text, 0)
                if end == len(text) and record == folded:
                    covered.add(action_id)
                    continue
        except Exception:  # not JSON, or not only JSON: the slow way names it
            pass
        try:
            records.append(action_record(row))
        except IntegrityError as e:  # a row too damaged to read: one violation for it
            out.append(
                Violation(
                    sequence=folded["last_sequence"] if folded else acc["sequence"],
                    kind=DamageKind.INDEX_MISMATCH,
                    detail=e.message,
                )
            )
            covered.update((row[1] if isinstance(row[1], str) else None, _claimed_action(row[2])))
    return out + index_violations(acc, records, unreadable=covered)


def approval_index_violations(
    acc: dict[str, Any],
    rows: list[tuple[Any, ...]],
    *,
    normalize: Callable[[dict[str, Any]], Any] | None = None,
) -> list[Violation]:
    """The approval index (``approval_index_rows``) against the fold's approvals: a row
    that differs (its record, or a lookup column that does not follow from it), one the
    log does not explain, or an approval the index lacks is an ``index_mismatch`` (an
    edited index could otherwise grant a call). ``normalize``: applied to each row's record
    before comparing (the fold's records are then in that form too)."""
    folded: dict[str, Any] = acc["approvals"]
    out: list[Violation] = []
    seen: set[str] = set()
    for row in rows:
        approval_id = row[1] if isinstance(row[1], str) else None
        mine = folded.get(approval_id) if approval_id is not None else None
        try:
            record = approval_record(row)
        except IntegrityError as e:
            out.append(
                Violation(
                    sequence=acc["sequence"], kind=DamageKind.INDEX_MISMATCH, detail=e.message
                )
            )
            seen.add(approval_id or "")
            continue
        seen.add(record["id"])
        problem = approval_column_problem(row, record) if len(row) > 3 else None
        if problem is not None:
            where = (mine or {}).get("provenance", {}).get("sequence") or acc["sequence"]
            out.append(
                Violation(
                    sequence=where,
                    kind=DamageKind.INDEX_MISMATCH,
                    detail=f"approval index row {record['id']}: {problem}",
                )
            )
        elif mine != (normalize(record) if normalize is not None else record):
            where = (mine or {}).get("provenance", {}).get("sequence") or acc["sequence"]
            out.append(
                Violation(
                    sequence=where,
                    kind=DamageKind.INDEX_MISMATCH,
                    detail=f"approval index row {record['id']} disagrees with the log",
                )
            )
    for approval_id, record in folded.items():
        if approval_id not in seen:
            out.append(
                Violation(
                    sequence=record["provenance"]["sequence"],
                    kind=DamageKind.INDEX_MISMATCH,
                    detail=f"approval {approval_id} is in the log but not in the index",
                )
            )
    return out


def _claimed_action(record_text: Any) -> Any:
    """The action id a damaged index row's record names, if it can be read at all (its
    action is then covered by that row's violation, not reported missing as well)."""
    try:
        claimed = parse_json(record_text).get("action_id")
    except (ValueError, TypeError, AttributeError):
        return None
    return claimed if isinstance(claimed, str) else None


def index_violations(
    acc: dict[str, Any], records: list[dict[str, Any]], *, unreadable: Collection[Any] = ()
) -> list[Violation]:
    """Each index row against the fold's record of its action (the plain form of the full
    fold, ``fold_plain``): any difference, a row the log does not explain, or an action
    the index lacks is an ``index_mismatch``. The index is built with the fold's own
    handlers, so an intact one is equal field for field."""
    out: list[Violation] = []
    folded_actions: dict[str, dict[str, Any]] = acc["actions"]
    seen = set()
    for rec in records:
        seen.add(rec["action_id"])
        folded = folded_actions.get(rec["action_id"])
        if folded != rec:
            out.append(
                Violation(
                    sequence=folded["last_sequence"] if folded else acc["sequence"],
                    kind=DamageKind.INDEX_MISMATCH,
                    detail=f"action index row {rec['action_id']} disagrees with the log",
                )
            )
    for action_id, folded in folded_actions.items():
        if action_id not in seen and action_id not in unreadable:
            out.append(
                Violation(
                    sequence=folded["last_sequence"],
                    kind=DamageKind.INDEX_MISMATCH,
                    detail=f"action {action_id} is in the log but not in the index",
                )
            )
    return out

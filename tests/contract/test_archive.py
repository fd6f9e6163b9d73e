"""Archiving old history (issue 17): a verified prefix moves to a file, a sealed marker stays.

One suite, both backends. What it shows: the live log still verifies on its own, the
whole history verifies end to end with the archive files, resume and the ledger keep
working (a settled key is refused as done), reading an archived sequence is a clear
error naming the archive, and a tampered, truncated, missing or foreign archive file is
refused by kind; a forged marker cannot hide rewritten history.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from continuum.errors import (
    HistoryArchivedError,
    IntegrityError,
    NotFoundError,
    UsageError,
)
from continuum.eventlog.chain import DamageKind
from continuum.eventlog.events import EventType
from continuum.runtime.facade import Continuum
from continuum.store import Storage
from tests.contract.conftest import StoreFactory

RUN = "run_archive"


def build(rt: Continuum, run_id: str = RUN) -> dict[str, Any]:
    """A run with work, a settled action, an open one and a checkpoint: 15 events."""
    rt.start_run(run_id, "archive me", total=20)
    for i in range(6):
        rt.append(run_id, EventType.WORK_COMPLETED, {"item_id": f"w{i}"})
    done = rt.intercept(run_id, "send_invoice", {"invoice": 1}, key="invoice:1")
    rt.complete(run_id, done.action_key, external_id="mail-1")
    failed = rt.intercept(run_id, "send_invoice", {"invoice": 2}, key="invoice:2")
    rt.fail(run_id, failed.action_key, error="bounced", certain=True)
    rt.checkpoint(run_id, reason="before archive")
    for i in range(6, 9):
        rt.append(run_id, EventType.WORK_COMPLETED, {"item_id": f"w{i}"})
    return {"done": done.action_key, "failed": failed.action_key}


@pytest.fixture
def rt(store: Storage) -> Continuum:
    return Continuum(store)


def test_archive_then_verify_end_to_end_then_resume_and_a_settled_key_is_refused_as_done(
    store_factory: StoreFactory, rt: Continuum, tmp_path: Path
) -> None:
    keys = build(rt)
    head = rt.store.get_run(RUN)
    before_progress = rt.state(RUN).progress.completed
    archive = tmp_path / "old.jsonl"

    result = rt.archive(RUN, before=12, to=archive)

    assert (result.from_sequence, result.through_sequence, result.events) == (1, 11, 11)
    assert result.marker_sequence == head.head_sequence + 1
    assert result.checkpoint_sequence == head.head_sequence + 2
    assert result.live_events == head.head_sequence + 2 - 11
    assert archive.stat().st_mode & 0o777 == 0o600
    # a new process (a new handle) sees a live log that starts at 12 and verifies
    other = Continuum(store_factory.open())
    live = other.verify(RUN)
    assert live.ok and live.archived_through == 11 and live.events_checked == result.live_events
    whole = other.verify(RUN, archives=[archive])
    assert whole.ok and whole.events_checked == head.head_sequence + 2
    # resume and the ledger keep working; a settled action stays answerable
    assert other.state(RUN).progress.completed == before_progress
    again = other.intercept(RUN, "send_invoice", {"invoice": 1}, key="invoice:1")
    assert (again.proceed, str(again.status)) == (False, "completed")
    assert again.external_id == "mail-1"
    assert other.resume(RUN).mode == "resume"
    fresh = other.intercept(RUN, "send_invoice", {"invoice": 3}, key="invoice:3")
    assert fresh.proceed
    other.complete(RUN, fresh.action_key, external_id="mail-3")
    assert other.verify(RUN).ok and other.verify(RUN, archives=[archive]).ok
    assert keys["done"] == again.action_key


def test_reading_an_archived_sequence_is_a_clear_error_naming_the_archive(
    rt: Continuum, tmp_path: Path
) -> None:
    build(rt)
    rt.archive(RUN, before=10, to=tmp_path / "named.jsonl")

    for read in (
        lambda: rt.store.read_events(RUN),
        lambda: rt.full_state(RUN),
        lambda: rt.state_at(RUN, 5),
        lambda: list(rt.store.iter_raw(RUN, 3)),
    ):
        with pytest.raises(HistoryArchivedError) as e:
            read()
        assert e.value.code == "not_found.archived"
        assert '"named.jsonl"' in e.value.message and e.value.fields["archived_through"] == 9
        assert isinstance(e.value, NotFoundError)  # exit 2
    assert [e.sequence for e in rt.store.read_events(RUN, 9)][:2] == [10, 11]  # the live log


def test_a_second_archive_chains_on_and_both_files_verify_the_whole_history(
    rt: Continuum, tmp_path: Path
) -> None:
    build(rt)
    first = rt.archive(RUN, before=8, to=tmp_path / "a1.jsonl")
    for i in range(3):
        rt.append(RUN, EventType.WORK_COMPLETED, {"item_id": f"x{i}"})
    second = rt.archive(RUN, before=first.checkpoint_sequence + 1, to=tmp_path / "a2.jsonl")

    assert second.from_sequence == 8
    files = [tmp_path / "a2.jsonl", tmp_path / "a1.jsonl"]  # any order
    assert rt.verify(RUN, archives=files).ok
    assert rt.verify(RUN).archived_through == second.through_sequence
    with pytest.raises(IntegrityError) as e:  # the first file alone leaves a gap
        rt.verify(RUN, archives=[tmp_path / "a1.jsonl"])
    assert e.value.code == "integrity.archive_mismatch"
    with pytest.raises(IntegrityError) as e:
        rt.verify(RUN, archives=[tmp_path / "a2.jsonl"])
    assert e.value.code == "integrity.archive_mismatch"
    with pytest.raises(UsageError) as u:  # nothing left to archive before the base
        rt.archive(RUN, before=second.through_sequence + 1, to=tmp_path / "a3.jsonl")
    assert u.value.code == "usage.bad_sequence"


def _rewrite(path: Path, edit: Any) -> None:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(edit(lines)), encoding="utf-8")


def _edit_event(lines: list[str], index: int, change: Any) -> list[str]:
    record = json.loads(lines[index])
    change(record["event"])
    lines[index] = (
        json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
    )
    return lines


def _reseal_all(lines: list[str]) -> list[str]:
    """Recompute every hash, link and the end digest: a forger who rewrote an archived
    event and made the file consistent with itself."""
    import hashlib

    from continuum.eventlog.canonical import canonical_json

    prev = None
    body = hashlib.sha256(lines[0].encode())
    out = [lines[0]]
    for line in lines[1:-1]:
        record = json.loads(line)
        if record["kind"] == "event":
            e = record["event"]
            e["prev_hash"] = prev
            fields = {k: e[k] for k in e if k != "hash"}
            e["hash"] = hashlib.sha256(canonical_json(fields).encode()).hexdigest()
            prev = e["hash"]
        text = canonical_json(record) + "\n"
        body.update(text.encode())
        out.append(text)
    end = json.loads(lines[-1])
    end["digest"] = body.hexdigest()
    out.append(canonical_json(end) + "\n")
    return out


TAMPERS = {
    # an archived event edited, digest left alone
    "event_edited": (
        lambda ls: _edit_event(ls, 3, lambda e: e["payload"].update(item_id="EVIL")),
        "integrity.archive_tampered",
    ),
    # the file cut short (an interrupted copy)
    "truncated": (lambda ls: ls[:-3], "integrity.archive_truncated"),
    "cut_mid_line": (lambda ls: [*ls[:-1], ls[-1][:20]], "integrity.archive_truncated"),
    # a line removed and the end record's counts left alone
    "event_removed": (lambda ls: ls[:4] + ls[5:], "integrity.archive_tampered"),
    # a rewritten archived event, every hash and the digest recomputed: self-consistent,
    # but not the file the sealed marker recorded
    "rewritten_and_resealed": (
        lambda ls: _reseal_all(_edit_event(ls, 3, lambda e: e["payload"].update(item_id="EVIL"))),
        "integrity.archive_tampered",
    ),
    # every event intact, the header changed and the digest recomputed: only the file's
    # SHA-256, which the sealed marker recorded, tells
    "header_edited_and_resealed": (
        lambda ls: _reseal_all([ls[0].replace('"created_at":"', '"created_at":"1999'), *ls[1:]]),
        "integrity.archive_tampered",
    ),
}


@pytest.mark.parametrize("how", sorted(TAMPERS))
def test_a_tampered_or_truncated_archive_is_refused_by_kind(
    rt: Continuum, tmp_path: Path, how: str
) -> None:
    build(rt)
    archive = tmp_path / "a.jsonl"
    rt.archive(RUN, before=12, to=archive)
    assert rt.verify(RUN, archives=[archive]).ok  # the control: the same file, untouched
    edit, code = TAMPERS[how]

    _rewrite(archive, edit)

    with pytest.raises(IntegrityError) as e:
        rt.verify(RUN, archives=[archive])
    assert e.value.code == code
    assert rt.verify(RUN).ok  # the live log is not affected


def test_an_archive_of_another_run_or_not_an_archive_is_refused(
    rt: Continuum, tmp_path: Path
) -> None:
    build(rt)
    build(rt, "other_run")
    rt.archive(RUN, before=12, to=tmp_path / "mine.jsonl")
    rt.archive("other_run", before=12, to=tmp_path / "theirs.jsonl")
    (tmp_path / "junk.jsonl").write_text('{"kind":"header","format":"something else"}\n')

    with pytest.raises(IntegrityError) as e:
        rt.verify(RUN, archives=[tmp_path / "theirs.jsonl"])
    assert e.value.code == "integrity.archive_mismatch"
    with pytest.raises(UsageError) as u:
        rt.verify(RUN, archives=[tmp_path / "junk.jsonl"])
    assert u.value.code == "usage.not_an_archive"


def test_deleting_live_events_after_the_marker_is_still_caught(
    store_factory: StoreFactory, rt: Continuum, tmp_path: Path
) -> None:
    build(rt)
    result = rt.archive(RUN, before=10, to=tmp_path / "a.jsonl")

    store_factory.corrupt("DELETE FROM events WHERE run_id = ? AND sequence IN (10, 11)", (RUN,))

    report = Continuum(store_factory.open()).verify(RUN)
    assert not report.ok
    assert report.violations[0].kind == DamageKind.SEQUENCE_GAP
    assert report.violations[0].sequence == 10
    assert result.through_sequence == 9


def test_an_edited_marker_is_caught_by_the_chain(
    store_factory: StoreFactory, rt: Continuum, tmp_path: Path
) -> None:
    build(rt)
    result = rt.archive(RUN, before=10, to=tmp_path / "a.jsonl")

    # someone points the marker at a shorter archive (claims fewer events were archived)
    store_factory.corrupt(
        "UPDATE events SET payload = replace(payload, '\"through_sequence\":9',"
        " '\"through_sequence\":8') WHERE run_id = ? AND sequence = ?",
        (RUN, result.marker_sequence),
    )

    report = Continuum(store_factory.open()).verify(RUN)
    assert not report.ok
    assert {v.kind for v in report.violations} & {DamageKind.HASH_MISMATCH, DamageKind.SEQUENCE_GAP}


def test_an_edited_index_row_of_a_live_action_is_caught_without_the_archive(
    store_factory: StoreFactory, rt: Continuum, tmp_path: Path
) -> None:
    build(rt)
    rt.archive(RUN, before=8, to=tmp_path / "a.jsonl")  # invoice:1 intercepted at 8: live
    store_factory.corrupt(
        "UPDATE actions SET record = replace(record, '\"completed\"', "
        "'\"failed\"') WHERE run_id = ? AND action_key = ?",
        (RUN, "send_invoice:invoice:1"),
    )

    report = Continuum(store_factory.open()).verify(RUN)
    assert not report.ok
    assert report.violations[0].kind == DamageKind.INDEX_MISMATCH


def test_an_edited_index_row_of_an_archived_action_is_caught_with_the_archive(
    store_factory: StoreFactory, rt: Continuum, tmp_path: Path
) -> None:
    build(rt)
    rt.archive(RUN, before=12, to=tmp_path / "a.jsonl")  # both actions archived
    store_factory.corrupt(
        "UPDATE actions SET record = replace(record, '\"mail-1\"', '\"forged\"') WHERE run_id = ?",
        (RUN,),
    )

    report = Continuum(store_factory.open()).verify(RUN, archives=[tmp_path / "a.jsonl"])
    assert not report.ok
    assert report.violations[0].kind == DamageKind.INDEX_MISMATCH


def test_anchors_into_archived_history_need_the_archive(rt: Continuum, tmp_path: Path) -> None:
    build(rt)
    early = f"5:{rt.store.event_hash_at(RUN, 5)}"
    wrong = f"5:{'0' * 64}"
    rt.archive(RUN, before=12, to=tmp_path / "a.jsonl")

    with pytest.raises(UsageError) as e:
        rt.verify(RUN, expect_head=early)
    assert e.value.code == "usage.anchor_archived"
    assert rt.verify(RUN, expect_head=early, archives=[tmp_path / "a.jsonl"]).ok
    bad = rt.verify(RUN, expect_head=wrong, archives=[tmp_path / "a.jsonl"])
    assert [v.kind for v in bad.violations] == [DamageKind.ANCHOR_MISMATCH]
    late = rt.anchor(RUN)["anchor"]
    assert rt.verify(RUN, expect_head=late).ok


def test_archive_refuses_bad_requests_and_changes_nothing(rt: Continuum, tmp_path: Path) -> None:
    build(rt)
    head = rt.store.get_run(RUN)
    (tmp_path / "taken.jsonl").write_text("mine\n")
    cases: list[tuple[dict[str, Any], str]] = [
        (dict(before=1, to=tmp_path / "a.jsonl"), "usage.bad_sequence"),
        (dict(before=head.head_sequence + 2, to=tmp_path / "a.jsonl"), "usage.bad_sequence"),
        (dict(before=5, to=tmp_path / "taken.jsonl"), "usage.file_exists"),
        (dict(before=5, to=tmp_path / "no-such-dir" / "a.jsonl"), "usage.bad_path"),
    ]
    for kwargs, code in cases:
        with pytest.raises(UsageError) as e:
            rt.archive(RUN, **kwargs)
        assert e.value.code == code
    assert rt.store.get_run(RUN) == head
    assert (tmp_path / "taken.jsonl").read_text() == "mine\n"
    assert not [
        p.name
        for p in tmp_path.iterdir()
        if p.name.endswith(("jsonl", "partial")) and p.name != "taken.jsonl"
    ]


def test_a_damaged_run_is_not_archived(
    store_factory: StoreFactory, rt: Continuum, tmp_path: Path
) -> None:
    build(rt)
    store_factory.corrupt(
        "UPDATE events SET payload = replace(payload, 'w3', 'w9')"
        " WHERE run_id = ? AND sequence = 5",
        (RUN,),
    )

    with pytest.raises(IntegrityError) as e:
        Continuum(store_factory.open()).archive(RUN, before=10, to=tmp_path / "a.jsonl")
    assert e.value.code == "integrity.hash_mismatch"
    assert not (tmp_path / "a.jsonl").exists()


def test_nobody_else_can_append_an_archive_marker_or_remove_events(rt: Continuum) -> None:
    build(rt)
    forged = {
        "from_sequence": 1,
        "through_sequence": 3,
        "through_hash": "a" * 64,
        "archive_sha256": "b" * 64,
    }
    with pytest.raises(UsageError) as e:
        rt.append(RUN, EventType.HISTORY_ARCHIVED, forged)
    assert e.value.code == "usage.reserved_event_type"
    with pytest.raises(UsageError) as e:
        rt.append_events(
            RUN, [(EventType.WORK_COMPLETED, {}), (EventType.HISTORY_ARCHIVED, forged)]
        )
    assert e.value.code == "usage.reserved_event_type"
    head = rt.store.get_run(RUN).head_sequence
    with pytest.raises(UsageError) as e, rt.store.write(RUN) as tx:
        event = tx.append(EventType.WORK_COMPLETED, {}, source=rt.origin)
        tx.drop_archived(event)  # not a marker: nothing is removed, the write is abandoned
    assert e.value.code == "usage.no_archive_marker"
    assert rt.store.get_run(RUN).head_sequence == head
    assert rt.verify(RUN).ok


def test_a_long_lived_reader_resumes_across_an_archive_made_elsewhere(
    store_factory: StoreFactory, tmp_path: Path
) -> None:
    server = Continuum(store_factory.open())  # e.g. the MCP server: it caches states
    build(server)
    assert server.state(RUN).sequence == 15
    server.append(RUN, EventType.WORK_COMPLETED, {"item_id": "late"})

    Continuum(store_factory.open()).archive(RUN, before=16, to=tmp_path / "a.jsonl")

    assert server.resume(RUN).mode == "resume"
    assert server.state(RUN).progress.completed == 10

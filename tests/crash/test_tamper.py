"""F13: tamper and corruption (contract §3: damage is refused, never repaired silently).

Bit flips over the whole file: a reference store (two runs, events, completed, failed and
unknown actions, a checkpoint) is closed, then copied with one bit flipped anywhere in
the file, and the copy is used the way a resumed agent and an operator would: open it,
read every run, verify it against the anchor exported before the damage, list the
actions, and intercept every known action again. Each flip ends up either

- refused: a ContinuumError (an integrity error names run and sequence where a row is
  involved; a damaged page is ``integrity.database_corrupt``; a damaged header is
  ``store.not_a_database``), or verify reports the damage; or
- harmless: everything reads back exactly as before, and every intercept answers as it
  did on the reference;

anything else is an undetected semantic change, and there must be none. An exception
that is not a ContinuumError (an untranslated driver or decoding error) fails the row too.
A damaged event is named by run and sequence, a damaged action index row by run and action.

The same is done over the WAL of a store still open in another process (a committed
transaction lives only in the WAL until a checkpoint): a damaged frame makes SQLite drop
it and everything after it, a clean truncation only the exported anchor can reveal.

Row tampering not covered by ``tests/contract/test_sqlite_files.py`` (which covers edited,
resealed and deleted rows, truncated tails against head and anchor, a foreign database and
a text file named ``.db``): reordered rows, a row moved to another run, a deleted first
row, a rewound head, edited index rows and checkpoints, and a file cut short.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import apsw
import pytest

from continuum.errors import ContinuumError, IntegrityError, StoreError
from continuum.eventlog.events import EventType
from continuum.runtime.facade import Continuum
from continuum.store import SQLiteStorage

RUNS = ("run_a", "run_b")
ACTION = "send"


def build_reference(app: Continuum, run_id: str, n: int) -> None:
    app.start_run(run_id, f"goal of {run_id}", total=n)
    for i in range(n):
        app.append(run_id, EventType.PROGRESS_RECORDED, {"completed": i + 1})
        if i % 3 == 0:
            r = app.intercept(run_id, ACTION, {"doc": i}, key=f"doc-{i}")
            if i % 9 == 0:
                app.fail(run_id, r.action_key, error="timeout")  # unknown
            elif i % 9 == 3:
                app.fail(run_id, r.action_key, error="refused", certain=True)
            else:
                app.complete(run_id, r.action_key, external_id=f"ext-{i}", result={"i": i})
        if i == n // 2:
            app.checkpoint(run_id, reason="half way")


def snapshot(app: Continuum, anchors: dict[str, str]) -> dict[str, Any]:
    """What an agent or an operator can observe; raises on detected damage."""
    store = app.store
    out: dict[str, Any] = {"runs": sorted(r.run_id for r in store.list_runs())}
    for run_id in RUNS:
        report = app.verify(run_id, expect_head=anchors[run_id])
        if not report.ok:
            v = report.violations[0]
            raise IntegrityError(
                f"verify: {v.kind} at {v.sequence}",
                code=f"integrity.{v.kind}",
                run_id=run_id,
                sequence=v.sequence,
            )
        events = [e.model_dump(mode="json") for e in store.read_events(run_id)]
        actions = [a.model_dump(mode="json") for a in app.actions(run_id)]
        state = app.state(run_id).model_dump(mode="json")
        answers = {}
        for a in app.actions(run_id):
            r = app.intercept(run_id, ACTION, a.arguments, key=a.key)
            answers[a.key] = (r.proceed, r.status, r.attempt, r.external_id)
        out[run_id] = {"events": events, "actions": actions, "state": state, "answers": answers}
    return out


@dataclass
class FlipFigures:
    flips: int = 0
    refused_at_open: int = 0
    refused_on_read: int = 0
    harmless: int = 0
    undetected: int = 0
    untranslated: int = 0
    codes: Counter[str] = field(default_factory=Counter)
    regions: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def page_kind(data: bytes, offset: int) -> str:
    """Which table a byte belongs to, for the figures (best effort)."""
    page_size = int.from_bytes(data[16:18], "big") or 65536
    page = offset // page_size
    return "header" if offset < 100 else f"page {page + 1}"


def try_flip(
    db: Path, reference: dict[str, Any], anchors: dict[str, str], figures: FlipFigures, where: str
) -> None:
    figures.flips += 1
    try:
        store = SQLiteStorage(db, create=False)
    except ContinuumError as e:
        figures.refused_at_open += 1
        figures.codes[e.code] += 1
        return
    except Exception as e:
        figures.untranslated += 1
        figures.problems.append(f"{where}: open raised {type(e).__name__}: {e}")
        return
    try:
        app = Continuum(store)
        try:
            got = snapshot(app, anchors)
        except IntegrityError as e:
            figures.refused_on_read += 1
            figures.codes[e.code] += 1
            # A damaged event names run and sequence; a damaged index row, run and action; a
            # damaged run or checkpoint record, run and record.
            if e.code != "integrity.database_corrupt" and not (
                e.fields.get("run_id")
                and (
                    e.fields.get("sequence") is not None
                    or e.fields.get("action_id")
                    or e.fields.get("record")
                )
            ):
                figures.problems.append(f"{where}: {e.code} names no run and sequence: {e}")
            return
        except ContinuumError as e:
            figures.refused_on_read += 1
            figures.codes[e.code] += 1
            return
        except Exception as e:
            figures.untranslated += 1
            figures.problems.append(f"{where}: {type(e).__name__}: {e}")
            return
        if got == reference:
            figures.harmless += 1
        else:
            figures.undetected += 1
            diff = [k for k in reference if reference[k] != got.get(k)]
            sub = {
                k: [kk for kk in reference[k] if reference[k][kk] != got[k].get(kk)]
                for k in diff
                if isinstance(reference[k], dict) and isinstance(got.get(k), dict)
            }
            figures.problems.append(f"{where}: undetected change in {diff} {sub}")
    finally:
        store.close()


@pytest.fixture(scope="module")
def reference_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    root = tmp_path_factory.mktemp("tamper")
    db = root / "reference.db"
    with SQLiteStorage(db) as store:
        app = Continuum(store)
        build_reference(app, RUNS[0], 24)
        build_reference(app, RUNS[1], 9)
        anchors = {r: app.anchor(r)["anchor"] for r in RUNS}
    assert not Path(f"{db}-wal").exists()  # closed: the whole store is in the one file
    yield db, anchors


def reference_of(db: Path, anchors: dict[str, str], work: Path) -> dict[str, Any]:
    copy = work / "ref-copy.db"
    shutil.copy(db, copy)
    with SQLiteStorage(copy, create=False) as store:
        return snapshot(Continuum(store), anchors)


def run_flips(
    db: Path, anchors: dict[str, str], work: Path, *, flips: int, seed: int
) -> FlipFigures:
    reference = reference_of(db, anchors, work)
    data = db.read_bytes()
    rng = random.Random(seed)
    figures = FlipFigures()
    target = work / "flipped.db"
    for _ in range(flips):
        bit = rng.randrange(len(data) * 8)
        damaged = bytearray(data)
        damaged[bit // 8] ^= 1 << (bit % 8)
        for p in work.glob("flipped.db*"):
            p.unlink()
        target.write_bytes(damaged)
        figures.regions[page_kind(data, bit // 8)] += 1
        try_flip(target, reference, anchors, figures, f"bit {bit} (byte {bit // 8})")
    return figures


def test_single_bit_flips_anywhere_in_the_file_are_refused_or_harmless(
    reference_db: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    db, anchors = reference_db
    figures = run_flips(db, anchors, tmp_path, flips=1000, seed=11)

    print(
        f"F13: {figures.flips:,} flips over {db.stat().st_size:,} bytes: "
        f"{figures.undetected} undetected semantic changes ({figures.refused_at_open} refused "
        f"at open, {figures.refused_on_read} refused on read or verify, {figures.harmless} "
        f"harmless, {figures.untranslated} untranslated errors)"
    )
    assert figures.problems == []
    assert (figures.undetected, figures.untranslated) == (0, 0)
    assert figures.refused_on_read > 0 and figures.harmless > 0


def test_the_harness_counts_undetected_changes_when_hashes_are_not_recomputed(
    reference_db: tuple[Path, dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The broken variant: a verifier that trusts each row's stored hash.
    monkeypatch.setattr(
        "continuum.eventlog.event_model.Event.computed_hash", lambda self: self.hash
    )
    monkeypatch.setattr(
        "continuum.eventlog.chain.stored_event_hash", lambda event, text: event.hash
    )
    db, anchors = reference_db
    figures = run_flips(db, anchors, tmp_path, flips=300, seed=13)

    print(
        f"F13-neg: control caught {figures.undetected} undetected semantic changes in "
        f"{figures.flips} flips"
    )
    assert figures.undetected > 0


# -- the WAL of a live store ----------------------------------------------------------------

HOLDER = r"""
import sys, apsw
conn = apsw.Connection(sys.argv[1])
conn.execute("PRAGMA wal_autocheckpoint=0")
conn.execute("SELECT count(*) FROM events").fetchall()  # a reader that keeps the WAL alive
print("holding", flush=True)
sys.stdin.readline()
"""


def test_bit_flips_in_the_wal_are_caught_by_the_anchor_or_harmless(tmp_path: Path) -> None:
    live = tmp_path / "live"
    live.mkdir()
    db = live / "live.db"
    SQLiteStorage(db).close()  # the schema, so the holder has a table to read
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        store = SQLiteStorage(db, create=False)
        app = Continuum(store)
        build_reference(app, RUNS[0], 12)
        build_reference(app, RUNS[1], 6)
        anchors = {r: app.anchor(r)["anchor"] for r in RUNS}
        # Copy the pair as a crash would leave it: the process holding them is killed.
        frozen = tmp_path / "frozen"
        frozen.mkdir()
        shutil.copy(db, frozen / "w.db")
        shutil.copy(f"{db}-wal", frozen / "w.db-wal")
        store.close()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        for s in (holder.stdin, holder.stdout):
            if s is not None:
                s.close()
    wal_bytes = (frozen / "w.db-wal").read_bytes()
    main_bytes = (frozen / "w.db").read_bytes()
    assert len(wal_bytes) > 32
    work = tmp_path / "work"
    work.mkdir()
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    shutil.copy(frozen / "w.db", ref_dir / "r.db")
    shutil.copy(frozen / "w.db-wal", ref_dir / "r.db-wal")
    with SQLiteStorage(ref_dir / "r.db", create=False) as ref_store:
        reference = snapshot(Continuum(ref_store), anchors)
    rng = random.Random(12)
    figures = FlipFigures()
    for _ in range(300):
        bit = rng.randrange(len(wal_bytes) * 8)
        damaged = bytearray(wal_bytes)
        damaged[bit // 8] ^= 1 << (bit % 8)
        for p in work.iterdir():
            p.unlink()
        (work / "f.db").write_bytes(main_bytes)
        (work / "f.db-wal").write_bytes(damaged)
        try_flip(work / "f.db", reference, anchors, figures, f"WAL bit {bit} (byte {bit // 8})")

    print(
        f"F13: {figures.flips} WAL flips: {figures.undetected} undetected semantic changes "
        f"({figures.refused_on_read} caught, most by the anchor: "
        f"{figures.codes.most_common(3)}; {figures.harmless} harmless)"
    )
    assert figures.problems == []
    assert (figures.undetected, figures.untranslated) == (0, 0)
    assert figures.codes["integrity.truncated"] > 0  # a dropped frame is a clean truncation


# -- row tampering not covered by the contract suite ------------------------------------------


def raw(path: Path, *statements: str, params: tuple[Any, ...] = ()) -> list[Any]:
    conn = apsw.Connection(str(path))
    try:
        out: list[Any] = []
        for statement in statements:
            out = conn.execute(statement, params).fetchall()
        return out
    finally:
        conn.close()


ROW_TAMPERS: dict[str, tuple[list[str], str, int | None]] = {
    # name: (statements, expected kind, expected first bad sequence in run_a)
    "reordered rows": (
        [
            "UPDATE events SET sequence = -1 WHERE run_id = 'run_a' AND sequence = 5",
            "UPDATE events SET sequence = 5 WHERE run_id = 'run_a' AND sequence = 6",
            "UPDATE events SET sequence = 6 WHERE run_id = 'run_a' AND sequence = -1",
        ],
        "hash_mismatch",
        5,
    ),
    "row moved to another run": (
        [
            "UPDATE events SET run_id = 'run_b', sequence = 100 WHERE run_id = 'run_a'"
            " AND sequence = 7"
        ],
        "sequence_gap",
        7,
    ),
    "deleted first row": (
        ["DELETE FROM events WHERE run_id = 'run_a' AND sequence = 1"],
        "sequence_gap",
        1,
    ),
    "rewound head": (
        ["UPDATE runs SET head_sequence = head_sequence - 2 WHERE run_id = 'run_a'"],
        "head_mismatch",
        None,
    ),
    "forged head hash": (
        [f"UPDATE runs SET head_hash = '{'0' * 64}' WHERE run_id = 'run_a'"],
        "head_mismatch",
        None,
    ),
    "index row says completed": (
        [
            "UPDATE actions SET record = json_set(record, '$.status', 'completed'),"
            " status = 'completed' WHERE run_id = 'run_a' AND json_extract(record, '$.status')"
            " = 'unknown'"
        ],
        "index_mismatch",
        None,
    ),
    "index row deleted": (
        [
            "DELETE FROM actions WHERE run_id = 'run_a' AND rowid ="
            " (SELECT min(rowid) FROM actions WHERE run_id = 'run_a')"
        ],
        "index_mismatch",
        None,
    ),
    "index dedup key edited": (
        [
            "UPDATE actions SET dedup_key = 'x' || dedup_key WHERE run_id = 'run_a' AND rowid ="
            " (SELECT min(rowid) FROM actions WHERE run_id = 'run_a')"
        ],
        "index_mismatch",
        None,
    ),
    "checkpoint state edited": (
        [
            "UPDATE checkpoints SET state = replace(state, 'goal of run_a', 'goal of evil')"
            " WHERE run_id = 'run_a'"
        ],
        "checkpoint_mismatch",
        None,
    ),
}


@pytest.mark.parametrize("tamper", sorted(ROW_TAMPERS))
def test_tampered_rows_are_refused_with_the_kind_and_sequence_of_the_damage(
    reference_db: tuple[Path, dict[str, str]], tmp_path: Path, tamper: str
) -> None:
    db, anchors = reference_db
    copy = tmp_path / "t.db"
    shutil.copy(db, copy)
    statements, kind, sequence = ROW_TAMPERS[tamper]
    raw(copy, *statements)

    with SQLiteStorage(copy, create=False) as store:
        report = Continuum(store).verify("run_a")
        assert not report.ok
        first = report.violations[0]
        assert str(first.kind) == kind, report.violations
        if sequence is not None:
            assert first.sequence == sequence
            with pytest.raises(IntegrityError) as e:
                store.read_events("run_a")
            assert (e.value.fields["run_id"], e.value.fields["sequence"]) == ("run_a", sequence)
        assert report.trusted_through < report.head_sequence or kind != "sequence_gap"
    print(f"F13: {tamper}: refused as {kind}" + (f" at sequence {sequence}" if sequence else ""))


@pytest.mark.parametrize("cut", ["half a page", "last page", "header only"])
def test_a_file_cut_short_is_refused(
    reference_db: tuple[Path, dict[str, str]], tmp_path: Path, cut: str
) -> None:
    db, _ = reference_db
    data = db.read_bytes()
    page = int.from_bytes(data[16:18], "big")
    keep = {
        "half a page": len(data) - page // 2,
        "last page": len(data) - page,
        "header only": 100,
    }[cut]
    copy = tmp_path / "cut.db"
    copy.write_bytes(data[:keep])

    with pytest.raises(ContinuumError) as e, SQLiteStorage(copy, create=False) as store:
        app = Continuum(store)
        for run_id in RUNS:
            store.read_events(run_id)
            assert app.verify(run_id).ok
            app.actions(run_id)
    assert isinstance(e.value, (IntegrityError, StoreError))
    assert e.value.code in ("integrity.database_corrupt", "store.not_a_database"), e.value.code


def test_reference_store_is_what_the_flips_start_from(
    reference_db: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    db, anchors = reference_db
    ref = reference_of(db, anchors, tmp_path)
    assert ref["runs"] == list(RUNS)
    statuses = Counter(a["status"] for a in ref["run_a"]["actions"])
    assert set(statuses) == {"completed", "failed", "unknown"}
    assert os.path.getsize(db) > 8 * 4096


# -- regressions for what the flips found ------------------------------------------------------


def first_action(path: Path, status: str) -> tuple[str, str]:
    rows = raw(
        path,
        "SELECT action_id, json_extract(record, '$.key') FROM actions WHERE run_id ="
        " 'run_a' AND json_extract(record, '$.status') = ? ORDER BY rowid LIMIT 1",
        params=(status,),
    )
    return rows[0][0], rows[0][1]


@pytest.mark.parametrize("column", ["dedup_key", "action_id"])
def test_an_intercept_refuses_when_a_damaged_index_hides_a_completed_action(
    reference_db: tuple[Path, dict[str, str]], tmp_path: Path, column: str
) -> None:
    # Found by flips: a damaged dedup-key entry made the next intercept answer
    # proceed: true for an action already completed (a repeated side effect).
    db, _ = reference_db
    copy = tmp_path / "idx.db"
    shutil.copy(db, copy)
    action_id, key = first_action(copy, "completed")
    raw(
        copy,
        f"UPDATE actions SET {column} = 'damaged' || {column} WHERE action_id = ?",
        params=(action_id,),
    )

    with SQLiteStorage(copy, create=False) as store:
        app = Continuum(store)
        head = store.get_run("run_a").head_sequence
        with pytest.raises(IntegrityError) as e:
            app.intercept("run_a", ACTION, {"doc": int(key.split("-")[1])}, key=key)
        assert e.value.code == "integrity.index_mismatch"
        assert e.value.fields["run_id"] == "run_a"
        assert store.get_run("run_a").head_sequence == head  # nothing written
        report = app.verify("run_a")
        assert [str(v.kind) for v in report.violations] == ["index_mismatch"]


def test_an_event_whose_text_is_not_utf8_is_malformed_at_its_sequence(
    reference_db: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    db, _ = reference_db
    copy = tmp_path / "utf.db"
    shutil.copy(db, copy)
    raw(
        copy,
        "UPDATE events SET payload = CAST(X'7B2261223A22FF227D' AS TEXT)"
        " WHERE run_id = 'run_a' AND sequence = 4",
    )

    with SQLiteStorage(copy, create=False) as store:
        with pytest.raises(IntegrityError) as e:
            store.read_events("run_a")
        assert (e.value.code, e.value.fields["sequence"]) == ("integrity.malformed", 4)
        report = store.verify_events("run_a")
        first = report.violations[0]
        assert (first.sequence, str(first.kind), report.trusted_through) == (4, "malformed", 3)
        assert store.read_events("run_b")  # the other run is untouched and reads


def test_a_damaged_index_record_is_an_integrity_error_and_a_verify_finding(
    reference_db: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    db, _ = reference_db
    copy = tmp_path / "rec.db"
    shutil.copy(db, copy)
    action_id, key = first_action(copy, "unknown")
    raw(
        copy,
        "UPDATE actions SET record = substr(record, 1, 40) WHERE action_id = ?",
        params=(action_id,),
    )

    with SQLiteStorage(copy, create=False) as store:
        app = Continuum(store)
        with pytest.raises(IntegrityError) as e:
            app.actions("run_a")
        assert e.value.code == "integrity.index_mismatch"
        assert (e.value.fields["run_id"], e.value.fields["action_id"]) == ("run_a", action_id)
        assert [str(v.kind) for v in app.verify("run_a").violations] == ["index_mismatch"]


def test_a_record_that_is_json_but_not_an_action_is_refused_by_the_ledger(
    reference_db: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    db, _ = reference_db
    copy = tmp_path / "enum.db"
    shutil.copy(db, copy)
    action_id, key = first_action(copy, "unknown")
    raw(
        copy,
        "UPDATE actions SET record = json_set(record, '$.status', 'unk.own') WHERE action_id = ?",
        params=(action_id,),
    )

    with SQLiteStorage(copy, create=False) as store:
        app = Continuum(store)
        with pytest.raises(IntegrityError) as e:
            app.intercept("run_a", ACTION, {"doc": int(key.split("-")[1])}, key=key)
        assert e.value.code == "integrity.index_mismatch"
        assert [str(v.kind) for v in app.verify("run_a").violations] == ["index_mismatch"]


def test_a_checkpoint_that_is_not_json_is_a_verify_finding_and_is_not_used(
    reference_db: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    db, _ = reference_db
    copy = tmp_path / "cp.db"
    shutil.copy(db, copy)
    raw(copy, "UPDATE checkpoints SET state = substr(state, 1, 30) WHERE run_id = 'run_a'")

    with SQLiteStorage(copy, create=False) as store:
        app = Continuum(store)
        assert [str(v.kind) for v in app.verify("run_a").violations] == ["checkpoint_mismatch"]
        state = app.state("run_a")  # folded from the log instead
        assert state.sequence == store.get_run("run_a").head_sequence
        assert app.checkpoint_warnings("run_a")


def test_a_run_record_whose_text_is_not_utf8_is_an_integrity_error(
    reference_db: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    db, _ = reference_db
    copy = tmp_path / "goal.db"
    shutil.copy(db, copy)
    raw(copy, "UPDATE runs SET goal = CAST(X'676FFF' AS TEXT) WHERE run_id = 'run_b'")

    with SQLiteStorage(copy, create=False) as store, pytest.raises(IntegrityError) as e:
        store.list_runs()
    assert e.value.code == "integrity.database_corrupt"


def test_an_event_whose_sequence_is_not_a_number_is_malformed_at_its_position(
    reference_db: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    # Found by the soak: a flip in a row header made the sequence NULL, and verify raised
    # a pydantic ValidationError instead of reporting the row.
    db, _ = reference_db
    copy = tmp_path / "seq.db"
    shutil.copy(db, copy)
    last = raw(copy, "SELECT head_sequence FROM runs WHERE run_id = 'run_b'")[0][0]
    raw(
        copy,
        "UPDATE events SET sequence = 'x' WHERE run_id = 'run_b' AND sequence = ?",
        params=(last,),
    )

    with SQLiteStorage(copy, create=False) as store:
        report = store.verify_events("run_b")
        assert [(v.sequence, str(v.kind)) for v in report.violations] == [(last, "malformed")]
        with pytest.raises(IntegrityError) as e:
            store.read_events("run_b")
        assert (e.value.fields["run_id"], e.value.fields["sequence"]) == ("run_b", last)


@pytest.mark.parametrize(
    ("statement", "code"),
    [
        ("UPDATE runs SET metadata = '{.' WHERE run_id = 'run_b'", "integrity.malformed"),
        ("UPDATE runs SET status = 'activ%' WHERE run_id = 'run_b'", "integrity.malformed"),
        ("UPDATE runs SET head_sequence = 'x' WHERE run_id = 'run_b'", "integrity.malformed"),
        ("UPDATE actions SET record = 7 WHERE run_id = 'run_b'", "integrity.index_mismatch"),
    ],
)
def test_a_damaged_run_action_or_checkpoint_record_is_an_integrity_error_naming_the_run(
    reference_db: tuple[Path, dict[str, str]], tmp_path: Path, statement: str, code: str
) -> None:
    # Found by the soak: a non-JSON run metadata and a record stored as a number escaped
    # as JSONDecodeError and TypeError.
    db, _ = reference_db
    copy = tmp_path / "rec.db"
    shutil.copy(db, copy)
    raw(copy, statement)

    with SQLiteStorage(copy, create=False) as store, pytest.raises(IntegrityError) as e:
        app = Continuum(store)
        app.verify("run_b")
        app.actions("run_b")
        app.state("run_b")
    assert e.value.code == code
    assert e.value.fields["run_id"] == "run_b"


def test_a_text_column_holding_a_number_is_refused_as_damage() -> None:
    # Found by the soak: a flipped serial type made a TEXT column read back as an integer
    # (SQL cannot store that through a TEXT column's affinity, so the rows are given here).
    from continuum.store.rows import action_from_row as _action_row
    from continuum.store.rows import run_from_row as _run_info

    with pytest.raises(IntegrityError) as e:
        _action_row(("run_b", "act_1", 7, None, "dk"))
    assert (e.value.code, e.value.fields["action_id"]) == ("integrity.index_mismatch", "act_1")
    with pytest.raises(IntegrityError) as e:
        _run_info(("run_b", "goal", "active", "2026-01-01T00:00:00.000000Z", 3, "h", 7))
    assert (e.value.code, e.value.fields["run_id"]) == ("integrity.malformed", "run_b")


def test_a_run_whose_stored_id_no_longer_matches_its_index_is_not_listed_silently(
    reference_db: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    # Found by the soak: one flip turned the runs row's id into 'pun_b' while the index
    # still found the run as 'run_b'; `runs` listed a run no command could open.
    db, _ = reference_db
    data = bytearray(db.read_bytes())
    at = data.find(b"run_bgoal of run_b")  # the runs row: id followed by its goal
    assert at > 0 and data.find(b"run_bgoal of run_b", at + 1) == -1
    data[at] = ord("p")
    copy = tmp_path / "id.db"
    copy.write_bytes(data)

    with SQLiteStorage(copy, create=False) as store, pytest.raises(IntegrityError) as e:
        store.list_runs()
    assert (e.value.code, e.value.fields["run_id"]) == ("integrity.malformed", "pun_b")

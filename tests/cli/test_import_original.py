"""`continuum import --from-original`: a store of the original project (Cyrax321/CONTINUUM)
is read read-only, its chain verified as read, every event mapped or kept (never dropped),
and written in one transaction with origin imported; damage is refused by sequence with
nothing written. The original store is built by ``original_format.py``, a writer that
follows the original's own schema and hashing."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from continuum.runtime.facade import Continuum
from continuum.store import open_store
from tests.cli.conftest import Result
from tests.cli.original_format import OriginalStore, build, original_digest_of


@pytest.fixture
def original(tmp_path: Path) -> Path:
    path = tmp_path / "original.db"
    build(path).close()
    return path


def snapshot(db: str) -> Any:
    """Everything in our store, to show that a refused import changed nothing."""
    if not Path(db).exists():
        return None
    with closing(open_store(db)) as store:
        return [
            (r.model_dump(), [e.model_dump() for e in store.read_events(r.run_id)])
            for r in store.list_runs()
        ]


def file_bytes(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_original_store_is_imported_mapped_or_kept_and_never_dropped(
    cli: Callable[..., Result], db: str, original: Path
) -> None:
    before = file_bytes(original)
    result = cli("--json", "import", "--from-original", str(original))

    assert result.code == 0, result.out
    doc = result.json()  # exactly one JSON document
    assert file_bytes(original) == before  # the original file is never written
    a = next(r for r in doc["runs"] if r["run_id"] == "run_a")
    mapped = {(m["original_type"], m["type"]): m["events"] for m in a["mapped"]}
    assert mapped == {
        ("RUN_STARTED", "run_started"): 1,
        ("TASK_UPDATED", "progress_recorded"): 1,
        ("WORK_COMPLETED", "work_completed"): 1,
        ("DEPENDENCY_DECLARED", "dependency_declared"): 1,
        ("EVIDENCE_ADDED", "evidence_added"): 1,
        ("FINDING_ADDED", "finding_added"): 1,
        ("DECISION_CREATED", "decision_created"): 1,
        ("ACTION_RECORDED", "action_intercepted"): 2,
        ("ACTION_RECORDED", "action_completed"): 1,
    }
    assert {k["original_type"]: k["events"] for k in a["kept"]} == {
        "TOOL_CALLED": 1,
        "STATE_CHECKPOINTED": 1,
        "SUBAGENT_SPAWNED": 1,
    }
    assert (a["original_events"], a["events"], a["mapped_events"], a["kept_events"]) == (
        13,
        13,
        10,
        3,
    )
    assert doc["totals"] == {
        "runs": 2,
        "refused": 0,
        "original_events": 15,
        "events": 15,
        "mapped": 12,
        "kept": 3,
    }

    rt = Continuum(open_store(db))
    try:
        assert rt.verify("run_a").ok and rt.verify("run_b").ok  # chain, head, index vs fold
        state = rt.full_state("run_a")
        assert state.goal is not None and state.goal.value == "analyze 4 documents"
        assert (state.progress.total, state.progress.completed) == (4, 2)
        assert set(state.findings) == {"f1"} and state.decisions["d1"].cites == [
            "f1",
            "evidence:e1",
        ]
        assert state.evidence["e1"].cites == ["dataset"]  # from a declared resource
        assert state.unknown_event_types == 3  # kept, counted, never dropped
        assert state.malformed_events == 0
        events = rt.events("run_a")
        assert {str(e.source) for e in events} == {"imported"}
        # Nothing lost: each event carries the original whole, whose hash still checks out.
        for event in events:
            block = event.payload["original"]
            assert original_digest_of(block) == block["hash"]
        assert [e.payload["original"]["sequence"] for e in events] == list(range(1, 14))
        # The action left in flight in the original is unresolved here: a person decides.
        verdict = rt.resume("run_a")
        assert verdict.mode == "request_human"
        statuses = {a.action_key: str(a.status) for a in rt.actions("run_a")}
        assert statuses == {"send_email:key-mail": "completed", "charge_card:key-card": "started"}
        assert rt.store.get_run("run_b").status == "completed"
        meta = rt.store.get_run("run_a").metadata["imported_from"]
        assert (meta["run_id"], meta["metadata"], meta["verified"]) == (
            "run_a",
            {"team": "research"},
            True,
        )
    finally:
        rt.close()
    assert cli("actions", "run_a").code == 20


def test_a_damaged_original_is_refused_by_sequence_and_nothing_is_written(
    cli: Callable[..., Result], db: str, tmp_path: Path
) -> None:
    edits: dict[str, Callable[[OriginalStore], None]] = {
        "hash_mismatch": lambda o: o.sql(
            "UPDATE events SET payload = '{\"completed\": 3}' WHERE run_id = 'run_a'"
            " AND sequence = 2"
        ),
        "broken_link": lambda o: o.sql(
            "UPDATE events SET prev_hash = hash WHERE run_id = 'run_a' AND sequence = 5"
        ),
        "sequence_gap": lambda o: o.sql(
            "DELETE FROM events WHERE run_id = 'run_a' AND sequence = 4"
        ),
    }
    where = {"hash_mismatch": 2, "broken_link": 5, "sequence_gap": 5}
    for kind, edit in edits.items():
        path = tmp_path / f"{kind}.db"
        o = build(path)
        edit(o)
        o.close()
        result = cli("--json", "import", "--from-original", str(path))
        error = result.json()["error"]
        assert (result.code, error["code"]) == (3, f"integrity.original_{kind}"), result.out
        assert (error["details"]["run_id"], error["details"]["sequence"]) == ("run_a", where[kind])
        assert not Path(db).exists()  # refused before the store was even opened
        # --dry-run names it too, and still writes nothing.
        dry = cli("--json", "import", "--from-original", str(path), "--dry-run")
        refused = [r for r in dry.json()["runs"] if r["refused"]]
        assert dry.code == 3 and [r["run_id"] for r in refused] == ["run_a"]
        assert not Path(db).exists()
    # Negative control: the same store undamaged imports (the edits are what failed it).
    build(tmp_path / "intact.db").close()
    assert cli("import", "--from-original", str(tmp_path / "intact.db")).code == 0


def test_a_resealed_edit_is_still_caught_at_the_next_link(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    from tests.cli.original_format import stable_hash

    path = tmp_path / "forged.db"
    o = build(path)
    row = o.conn.execute(
        "SELECT event_id, timestamp, source, prev_hash FROM events"
        " WHERE run_id = 'run_a' AND sequence = 2"
    ).fetchall()[0]
    from datetime import datetime

    assert isinstance(row[1], str)
    forged = {
        "event_id": row[0],
        "run_id": "run_a",
        "sequence": 2,
        "type": "TASK_UPDATED",
        "timestamp": datetime.fromisoformat(row[1]),
        "payload": {"completed": 4},
        "causer_event_id": None,
        "source": row[2],
        "prev_hash": row[3],
    }
    o.sql(
        "UPDATE events SET payload = ?, hash = ? WHERE run_id = 'run_a' AND sequence = 2",
        (json.dumps({"completed": 4}), stable_hash(forged)),
    )
    o.close()
    result = cli("--json", "import", "--from-original", str(path))
    assert result.code == 3
    assert result.json()["error"]["details"]["sequence"] == 3


def test_dry_run_reports_what_the_import_then_does_and_writes_nothing(
    cli: Callable[..., Result], db: str, original: Path
) -> None:
    dry = cli("--json", "import", "--from-original", str(original), "--dry-run")
    assert dry.code == 0 and dry.json()["dry_run"] is True
    assert not Path(db).exists()
    real = cli("--json", "import", "--from-original", str(original))
    dry_doc, real_doc = dry.json(), real.json()
    for doc in (dry_doc, real_doc):
        doc.pop("dry_run")
    assert dry_doc == real_doc  # same mapping, same heads: the dry run is the import, unwritten
    with closing(open_store(db)) as store:
        assert store.get_run("run_a").head_hash == dry_doc["runs"][0]["head"].split(":")[1]


def test_importing_twice_is_refused_unless_a_new_run_id_is_named(
    cli: Callable[..., Result], db: str, original: Path
) -> None:
    assert cli("import", "--from-original", str(original)).code == 0
    before = snapshot(db)

    again = cli("--json", "import", "--from-original", str(original))
    assert (again.code, again.json()["error"]["code"]) == (1, "usage.run_exists")
    assert snapshot(db) == before
    dry = cli("--json", "import", "--from-original", str(original), "--dry-run")
    assert dry.code == 1 and all(r["exists"] for r in dry.json()["runs"])

    renamed = cli(
        "--json",
        "import",
        "--from-original",
        str(original),
        "--run",
        "run_a",
        "--as",
        "run_a_again",
    )
    assert renamed.code == 0, renamed.out
    with closing(open_store(db)) as store:
        first = [e.payload["original"] for e in store.read_events("run_a")]
        second = [e.payload["original"] for e in store.read_events("run_a_again")]
        assert first == second and store.verify_events("run_a_again").ok
    wrong = cli("--json", "import", "--from-original", str(original), "--as", "x")
    assert (wrong.code, wrong.json()["error"]["code"]) == (1, "usage.invalid")
    missing = cli("--json", "import", "--from-original", str(original), "--run", "nope")
    assert (missing.code, missing.json()["error"]["code"]) == (2, "not_found.run")


def test_a_compacted_original_run_is_read_through_its_archive(
    cli: Callable[..., Result], db: str, tmp_path: Path
) -> None:
    path = tmp_path / "compacted.db"
    o = build(path)
    o.compact("run_a", 6)  # events 1..6 now live in events_archive
    o.event("run_a", "TASK_UPDATED", {"completed": 3})
    o.close()
    result = cli("--json", "import", "--from-original", str(path), "--run", "run_a")
    assert result.code == 0, result.out
    assert result.json()["runs"][0]["original_events"] == 15
    with closing(open_store(db)) as store:
        archived = [
            e.payload["original"].get("archived", False) for e in store.read_events("run_a")
        ]
    assert archived[:6] == [True] * 6 and not any(archived[6:])


def test_a_store_without_a_chain_is_said_so_and_imported_only_unverified(
    cli: Callable[..., Result], db: str, tmp_path: Path
) -> None:
    path = tmp_path / "v1.db"
    o = OriginalStore(path, version=1)
    o.run("old", "from before the chain")
    o.event("old", "RUN_STARTED", {"goal": "from before the chain"})
    o.event("old", "TASK_UPDATED", {"completed": 1})
    o.close()
    refused = cli("--json", "import", "--from-original", str(path))
    assert (refused.code, refused.json()["error"]["code"]) == (1, "usage.original_unchained")
    assert "no hash chain" in refused.json()["error"]["message"]
    assert not Path(db).exists()
    result = cli("--json", "import", "--from-original", str(path), "--unverified")
    assert result.code == 0, result.out
    assert result.json()["runs"][0]["verified"] is False
    with closing(open_store(db)) as store:
        assert all(e.payload["original"]["verified"] is False for e in store.read_events("old"))
        assert store.get_run("old").metadata["imported_from"]["verified"] is False


def test_what_is_not_an_original_store_is_refused_clearly(
    cli: Callable[..., Result], db: str, tmp_path: Path
) -> None:
    ours = tmp_path / "ours.db"
    assert cli("--db", str(ours), "start", "r1", "--goal", "g", with_db=False).code == 0
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    cases = {
        str(ours): "usage.not_original",
        str(text): "store.not_original",
        str(tmp_path): "store.not_original",
        str(tmp_path / "missing.db"): "not_found.original_store",
    }
    for path, code in cases.items():
        result = cli("--json", "import", "--from-original", path)
        assert result.json()["error"]["code"] == code, (path, result.out)
    assert not Path(db).exists()


def test_an_event_type_that_could_pose_as_ours_is_refused(
    cli: Callable[..., Result], db: str, tmp_path: Path
) -> None:
    # A row with a valid original hash but a lower-case type ("review_confirmed" is one of
    # continuum's): kept as is it would become a known event here. Refused as foreign.
    path = tmp_path / "posing.db"
    o = build(path)
    o.event("run_b", "review_confirmed", {"through_sequence": 2}, source="human")
    o.close()
    result = cli("--json", "import", "--from-original", str(path))
    error = result.json()["error"]
    assert (result.code, error["code"], error["details"]["sequence"]) == (
        3,
        "integrity.original_malformed",
        3,
    )
    assert not Path(db).exists()


def test_unmappable_payloads_are_kept_with_the_reason(
    cli: Callable[..., Result], db: str, tmp_path: Path
) -> None:
    path = tmp_path / "odd.db"
    o = OriginalStore(path)
    o.run("r", "odd payloads")
    o.event("r", "RUN_STARTED", {"goal": "odd payloads", "total": 2})
    o.event("r", "TASK_UPDATED", {"completed": "lots"})  # not a count
    o.event("r", "MODEL_CHANGED", {})  # names no model
    o.event("r", "ACTION_RECORDED", {"note": "no key"})  # the original's fold skips it too
    o.close()
    result = cli("--json", "import", "--from-original", str(path))
    assert result.code == 0, result.out
    kept = {k["original_type"]: k["why"] for k in result.json()["runs"][0]["kept"]}
    assert set(kept) == {"TASK_UPDATED", "MODEL_CHANGED", "ACTION_RECORDED"}
    assert "not a count" in kept["TASK_UPDATED"]
    with closing(open_store(db)) as store:
        state = Continuum(store).full_state("r")
        assert (state.unknown_event_types, state.malformed_events) == (3, 0)


def test_the_text_report_escapes_what_the_original_holds(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    path = tmp_path / "hostile.db"
    o = OriginalStore(path)
    o.run("run\x1b[2J", "goal")
    o.event("run\x1b[2J", "RUN_STARTED", {"goal": "g"})
    o.close()
    result = cli("import", "--from-original", str(path), "--dry-run")
    assert "\x1b" not in result.out + result.err
    assert result.code == 1 and "\\x1b" in result.out  # refused: not a usable run id here
    renamed = cli("import", "--from-original", str(path), "--run", "run\x1b[2J", "--as", "r1")
    assert renamed.code == 0 and "\x1b" not in renamed.out + renamed.err


def test_an_approval_granted_in_the_original_is_no_grant_here(
    cli: Callable[..., Result], db: str, tmp_path: Path
) -> None:
    path = tmp_path / "approvals.db"
    o = OriginalStore(path)
    o.run("r", "needs a yes")
    o.event("r", "RUN_STARTED", {"goal": "needs a yes"})
    o.event("r", "APPROVAL_REQUESTED", {"approval_id": "ap1", "subject": "wire money"})
    o.event(
        "r", "APPROVAL_GRANTED", {"approval_id": "ap1", "granted_by": "someone"}, source="human"
    )  # the original's word for it, not a person's here
    o.close()
    assert cli("import", "--from-original", str(path)).code == 0
    with closing(open_store(db)) as store:
        rt = Continuum(store)
        assert rt.verify("r").ok  # the approval index matches the fold
        approval = rt.full_state("r").approvals["ap1"]
        assert approval.status == "requested"  # an imported decision is not trusted


def test_the_original_ledger_becomes_the_steps_that_lead_to_each_state(
    cli: Callable[..., Result], db: str, tmp_path: Path
) -> None:
    path = tmp_path / "ledger.db"
    o = OriginalStore(path)
    o.run("r", "effects")
    o.event("r", "RUN_STARTED", {"goal": "effects"})
    o.action("r", "k-fail", "t", "started")
    o.action("r", "k-fail", "t", "failed", last_error="refused")  # the original: did not happen
    o.action("r", "k-doubt", "t", "started")
    o.action("r", "k-doubt", "t", "failed", side_effect_uncertain=True)
    o.action("r", "k-rec", "t", "unknown")
    o.action("r", "k-rec", "t", "completed", event_type="ACTION_RECONCILED", external_id="x-1")
    o.action("r", "k-done", "t", "completed", external_id="x-2")  # one record, two steps
    o.action("r", "k-undone", "t", "completed")
    o.action("r", "k-undone", "t", "compensated", event_type="ACTION_COMPENSATED")
    o.action("r", "k-again", "t", "failed")
    o.action("r", "k-again", "t", "started")  # retried in the original
    o.action("r", "k-again", "t", "started")  # a repeat: no ledger step, kept
    o.close()
    result = cli("--json", "import", "--from-original", str(path))
    assert result.code == 0, result.out
    run = result.json()["runs"][0]
    assert (run["original_events"], run["events"]) == (13, 17)
    assert [k["original_type"] for k in run["kept"]] == ["ACTION_RECORDED"]
    with closing(open_store(db)) as store:
        rt = Continuum(store)
        assert rt.verify("r").ok
        got = {a.key: (str(a.status), a.needs_human) for a in rt.actions("r")}
    assert got == {
        "k-fail": ("failed", True),  # "did not happen" on the original's word: a person checks
        "k-doubt": ("unknown", True),
        "k-rec": ("completed", False),
        "k-done": ("completed", False),
        "k-undone": ("compensated", False),
        "k-again": ("started", True),
    }

"""Every kind of damage gets the same answer on every backend (issue 13).

Rows are damaged behind the store's back (``StoreFactory.corrupt``, in each backend's SQL):
event, run, action index and checkpoint rows. The store must raise the same integrity
error code on SQLite and PostgreSQL, `verify` must name the same kind, and the CLI must
answer with the same error code and exit code: nothing raised past the edge as an
"unexpected failure".
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from continuum.cli.main import run as cli_run
from continuum.errors import IntegrityError
from continuum.eventlog.events import EventType
from continuum.runtime.facade import Continuum
from continuum.types import Origin
from tests.contract.conftest import StoreFactory

RUN = "run_dmg"


@pytest.fixture
def filled(store_factory: StoreFactory) -> StoreFactory:
    rt = Continuum(store_factory.open(), origin=Origin.EXTERNAL_AGENT)
    rt.record_progress(RUN, goal="g", total=4)
    for i in range(3):
        rt.append(RUN, EventType.WORK_COMPLETED, {"doc": i})
    r = rt.intercept(RUN, "send", {"to": "x"}, key="k1")
    rt.complete(RUN, r.action_key, external_id="e1")
    rt.checkpoint(RUN, reason="cp")
    rt.append(RUN, EventType.WORK_COMPLETED, {"doc": 9})
    return store_factory


def cli(factory: StoreFactory, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    code = cli_run(["--db", factory.url, "--json", *args])
    out = capsys.readouterr().out
    return code, json.loads(out)


# (what, statement, params, store call, expected code)
EVENT_DAMAGE = {
    "payload edited": (
        "UPDATE events SET payload = ? WHERE run_id = ? AND sequence = 3",
        ('{"doc":99}', RUN),
        "hash_mismatch",
        3,
    ),
    "row deleted": (
        "DELETE FROM events WHERE run_id = ? AND sequence = 3",
        (RUN,),
        "sequence_gap",
        3,
    ),
    "link broken": (
        "UPDATE events SET prev_hash = ? WHERE run_id = ? AND sequence = 4",
        ("0" * 64, RUN),
        "hash_mismatch",
        4,
    ),
    "head rewound": (
        "UPDATE runs SET head_sequence = head_sequence - 1 WHERE run_id = ?",
        (RUN,),
        "head_mismatch",
        None,
    ),
}


@pytest.mark.parametrize("what", sorted(EVENT_DAMAGE))
def test_damaged_events_are_refused_alike(
    filled: StoreFactory, what: str, capsys: pytest.CaptureFixture[str]
) -> None:
    statement, params, kind, sequence = EVENT_DAMAGE[what]
    filled.corrupt(statement, params)
    store = filled.open()
    report = store.verify_events(RUN)
    assert not report.ok and str(report.violations[0].kind) == kind
    if sequence is not None:
        assert report.violations[0].sequence == sequence
        with pytest.raises(IntegrityError) as e:
            store.read_events(RUN)
        assert e.value.code == f"integrity.{kind}"
    code, doc = cli(filled, "verify", RUN, capsys=capsys)
    assert code == 3 and doc["reports"][0]["violations"][0]["kind"] == kind
    code, doc = cli(filled, "--json", "events", RUN, capsys=capsys)
    if sequence is not None:  # reading the whole log meets the damage
        assert (code, doc["error"]["code"]) == (3, f"integrity.{kind}")
    # resume starts from the checkpoint (made and sealed before the damage): whatever it
    # says, it says it as a verdict or an integrity error, never as a crash
    code, doc = cli(filled, "resume", RUN, capsys=capsys)
    assert code in (3, 20, 30) and doc.get("error", {}).get("code") != "internal"


RUN_DAMAGE = {
    "metadata not json": "UPDATE runs SET metadata = 'not json' WHERE run_id = ?",
    "status unknown": "UPDATE runs SET status = 'paused' WHERE run_id = ?",
}


@pytest.mark.parametrize("what", sorted(RUN_DAMAGE))
def test_a_damaged_run_record_is_an_integrity_error_alike(
    filled: StoreFactory, what: str, capsys: pytest.CaptureFixture[str]
) -> None:
    filled.corrupt(RUN_DAMAGE[what], (RUN,))
    store = filled.open()
    for call in (store.list_runs, lambda: store.get_run(RUN)):
        with pytest.raises(IntegrityError) as e:
            call()
        assert e.value.code == "integrity.malformed" and e.value.fields["run_id"] == RUN
    for args in (["runs"], ["status", RUN], ["actions", RUN], ["verify", RUN], ["resume", RUN]):
        code, doc = cli(filled, *args, capsys=capsys)
        assert (code, doc["error"]["code"]) == (3, "integrity.malformed"), args


INDEX_DAMAGE = {
    "record not json": "UPDATE actions SET record = 'not json' WHERE run_id = ?",
    "record of another action": "UPDATE actions SET record = replace(record, 'act_', 'act_x')"
    " WHERE run_id = ?",
}


@pytest.mark.parametrize("what", sorted(INDEX_DAMAGE))
def test_a_damaged_index_row_is_an_integrity_error_alike(
    filled: StoreFactory, what: str, capsys: pytest.CaptureFixture[str]
) -> None:
    filled.corrupt(INDEX_DAMAGE[what], (RUN,))
    store = filled.open()
    for call in (lambda: store.list_actions(RUN), lambda: store.get_action(RUN, "send:k1")):
        with pytest.raises(IntegrityError) as e:
            call()
        assert e.value.code == "integrity.index_mismatch" and e.value.fields["run_id"] == RUN
    code, doc = cli(filled, "actions", RUN, capsys=capsys)
    assert (code, doc["error"]["code"]) == (3, "integrity.index_mismatch")
    code, doc = cli(filled, "verify", RUN, capsys=capsys)  # a finding of verify, not a crash
    assert code == 3 and doc["reports"][0]["violations"][0]["kind"] == "index_mismatch"
    code, doc = cli(filled, "intercept", RUN, "send", "--key", "k1", capsys=capsys)
    assert (code, doc["error"]["code"]) == (3, "integrity.index_mismatch")  # nothing proceeds


def test_an_index_record_that_disagrees_with_the_log_is_a_verify_finding(
    filled: StoreFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    filled.corrupt(
        "UPDATE actions SET record = replace(record, '\"completed\"', '\"failed\"'),"
        " status = 'failed' WHERE run_id = ?",
        (RUN,),
    )
    code, doc = cli(filled, "verify", RUN, capsys=capsys)
    assert code == 3
    assert [v["kind"] for v in doc["reports"][0]["violations"]] == ["index_mismatch"]


def test_a_damaged_checkpoint_is_a_verify_finding_and_is_not_used(
    filled: StoreFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    filled.corrupt(
        "UPDATE checkpoints SET state = replace(state, '\"g\"', '\"evil\"') WHERE run_id = ?",
        (RUN,),
    )
    rt = Continuum(filled.open())
    goal = rt.state(RUN).goal
    assert goal is not None and goal.value == "g"  # from the log
    code, doc = cli(filled, "verify", RUN, capsys=capsys)
    assert code == 3
    assert [v["kind"] for v in doc["reports"][0]["violations"]] == ["checkpoint_mismatch"]
    code, doc = cli(filled, "inspect", RUN, capsys=capsys)
    assert code == 0 and doc["checkpoint_warnings"]


@pytest.mark.parametrize("edit", ["text that is not JSON", "another state"])
def test_a_checkpoint_edited_with_its_hash_column_is_caught_by_its_sealing_event(
    filled: StoreFactory, capsys: pytest.CaptureFixture[str], edit: str
) -> None:
    """The row's state and state_hash changed together (the hash made to fit): the
    ``checkpointed`` event in the chain still holds the old hash, so verify reports it and
    the state is folded from the log. Control: test_the_harness_damages_something."""
    from continuum.eventlog.canonical import canonical_json, digest, sha256_hex

    store = filled.open()
    try:
        [cp] = store.stored_checkpoints(RUN)
    finally:
        store.close()
    if edit == "text that is not JSON":
        text = "not json at all"
        stated = sha256_hex(text)  # the text's own hash
    else:
        state = json.loads(cp.state_json)
        state["goal"]["value"] = "evil"
        text, stated = canonical_json(state), digest(state)
    filled.corrupt(
        "UPDATE checkpoints SET state = ?, state_hash = ? WHERE run_id = ?", (text, stated, RUN)
    )
    rt = Continuum(filled.open())
    try:
        goal = rt.state(RUN).goal
        assert goal is not None and goal.value == "g"  # from the log, not the edited row
    finally:
        rt.close()
    code, doc = cli(filled, "verify", RUN, capsys=capsys)
    assert code == 3
    [found] = doc["reports"][0]["violations"]
    assert found["kind"] == "checkpoint_mismatch"
    assert "does not match the event that sealed it" in found["detail"]


def test_the_harness_damages_something(
    filled: StoreFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    # Control: before any damage, every command above answers normally.
    for args in (["verify", RUN], ["runs"], ["actions", RUN]):
        code, doc = cli(filled, *args, capsys=capsys)
        assert code == 0 and doc["ok"], args

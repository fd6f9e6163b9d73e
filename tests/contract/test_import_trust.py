"""Issue 30 item 4: a human decision imported from a file counts only if the file is signed
by a key the person importing trusts (references/contract.md §5), on every backend.

The attack: anyone can confirm a run and reconcile an effect as "did not occur" with
``--yes`` in a scratch store of their own, export it and have it imported here; it used
to resume (exit 0) and let the agent's repeat of that effect proceed. Now an unsigned (or
untrusted) import keeps every event and hash but ends each run with a
``history_imported`` marker: what its human and deterministic events decided counts as
imported. The controls: in the scratch store the same repeat proceeds and the run
resumes; a file signed with a key the importer trusts keeps every decision (and every
byte of the run).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from continuum.errors import IntegrityError, UsageError
from continuum.eventlog.events import EventType
from continuum.ledger.approvals import ApprovalRules, parse_rules
from continuum.ops.signing import generate_keypair
from continuum.ops.transfer import export_runs, import_runs
from continuum.runtime.facade import Continuum
from continuum.store import SQLiteStorage, Storage
from continuum.types import Origin
from tests.contract.transfer_support import snapshot

RUN = "run_invoices"
SEND = {"invoice": "INV-7", "to": "acme"}
RULES = ApprovalRules(
    rules=parse_rules('[[approval]]\naction_type = "wire_money"\n', "approvals.toml")
)


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[SQLiteStorage]:
    """Someone's own store, where they are "the person" (``--yes``)."""
    store = SQLiteStorage(tmp_path / "scratch.db")
    agent = Continuum(store, origin=Origin.EXTERNAL_AGENT, approvals=RULES)
    person = Continuum(store, origin=Origin.HUMAN, approvals=RULES)
    agent.start_run(RUN, "send the invoices", total=3)
    agent.record_progress(RUN, completed=1)
    sent = agent.intercept(RUN, "send_invoice", SEND, key="invoice:INV-7")
    agent.fail(RUN, sent.action_key, error="connection reset")  # unknown: it may have gone
    person.reconcile(RUN, sent.action_key, occurred=False, note="checked: it did not go")
    asked = agent.intercept(RUN, "wire_money", {"amount": 90000}, key="wire:1")
    person.decide(asked.approval_id or "", allow=True, reason="fine", scope="run")
    person.confirm(RUN)
    yield store
    store.close()


def exported(store: Storage, sign: Path | None = None) -> str:
    out = io.StringIO()
    if sign is None:
        export_runs(store, out)
    else:
        export_runs(store, out, sign=sign)
    return out.getvalue()


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name in ("mine", "other"):
        private = tmp_path / f"{name}.key"
        generate_keypair(private, tmp_path / f"{name}.key.pub")
        out[name] = private
    return out


def repeat(store: Storage) -> Any:
    return Continuum(store, origin=Origin.EXTERNAL_AGENT, approvals=RULES).intercept(
        RUN, "send_invoice", SEND, key="invoice:INV-7"
    )


def test_in_the_scratch_store_the_forged_decisions_resume_and_repeat_the_effect(
    scratch: SQLiteStorage,
) -> None:
    # The control: what the attack buys where the decisions were made.
    assert Continuum(scratch).resume(RUN).mode == "resume"
    assert repeat(scratch).proceed is True


def test_human_decisions_in_an_unsigned_export_count_as_imported(
    scratch: SQLiteStorage, store: Storage
) -> None:
    before = snapshot(scratch, RUN)

    summary = import_runs(store, io.StringIO(exported(scratch)))

    here = Continuum(store, approvals=RULES)
    recovery = here.resume(RUN)
    assert recovery.mode == "request_human"
    again = repeat(store)
    assert (again.proceed, str(again.status)) == (False, "needs_confirmation")
    wire = Continuum(store, origin=Origin.EXTERNAL_AGENT, approvals=RULES).intercept(
        RUN, "wire_money", {"amount": 90000}, key="wire:1"
    )
    assert (wire.proceed, str(wire.status)) == (False, "awaiting_approval")
    # Every event kept, byte for byte, with a marker and a checkpoint after them.
    events = snapshot(store, RUN)["events"]
    assert events[: len(before["events"])] == before["events"]
    assert [str(e["type"]) for e in events[len(before["events"]) :]] == [
        "history_imported",
        "checkpointed",
    ]
    assert events[len(before["events"])]["source"] == Origin.DETERMINISTIC
    assert here.verify(RUN).ok  # the indexes equal the fold, marker included
    assert summary.trusted is False and summary.signed_by is None
    told = summary.not_trusted[RUN]
    assert told.needs_person == ["send_invoice:invoice:INV-7"]
    assert len(told.confirmations) == 1 and len(told.approvals) == 1
    assert set(told.review) >= {"goal", "progress"}
    state = here.state(RUN)  # the lean state (from the import's checkpoint) sees it too
    assert [a.action_key for a in state.actions.values() if a.needs_human] == [
        "send_invoice:invoice:INV-7"
    ]
    assert str(state.actions[again.action_id].settled_by) == "imported"


def test_a_person_here_settles_an_imported_run_again(
    scratch: SQLiteStorage, store: Storage
) -> None:
    import_runs(store, io.StringIO(exported(scratch)))
    person = Continuum(store, origin=Origin.HUMAN, approvals=RULES)

    person.reconcile(RUN, "send_invoice:invoice:INV-7", occurred=False, note="checked here")
    approval = next(a for a in person.approvals(RUN))
    person.decide(approval.id, allow=True, reason="checked here", scope="run")
    person.confirm(RUN)

    assert person.resume(RUN).mode == "resume"
    assert repeat(store).proceed is True
    assert person.verify(RUN).ok


def test_a_signed_export_trusted_by_its_public_key_keeps_every_decision(
    scratch: SQLiteStorage, store: Storage, keys: dict[str, Path]
) -> None:
    text = exported(scratch, sign=keys["mine"])

    summary = import_runs(store, io.StringIO(text), public_key=keys["mine"].with_suffix(".key.pub"))

    assert summary.trusted is True and summary.not_trusted == {}
    assert snapshot(store, RUN) == snapshot(scratch, RUN)  # nothing added
    assert Continuum(store).resume(RUN).mode == "resume"
    assert repeat(store).proceed is True


def test_a_signed_export_imported_without_its_key_is_not_trusted(
    scratch: SQLiteStorage, store: Storage, keys: dict[str, Path]
) -> None:
    summary = import_runs(store, io.StringIO(exported(scratch, sign=keys["mine"])))
    assert summary.trusted is False and summary.signed_by  # named, not believed
    assert repeat(store).proceed is False


def _resealed(text: str) -> str:
    """The export with one event's payload rewritten and every hash, head and the line
    digest recomputed: what anyone can do without the private key."""
    import hashlib
    import json

    from continuum.eventlog.canonical import canonical_json
    from continuum.eventlog.event_model import seal

    records = [json.loads(line) for line in text.splitlines()]
    prev: str | None = None
    for r in records:
        if r["kind"] == "event":
            e = r["event"]
            if e["type"] == "progress_recorded":
                e["payload"] = {"completed": 3}
            e["prev_hash"] = prev
            fields = {k: v for k, v in e.items() if k != "hash"}
            e["hash"] = seal(**{**fields, "source": Origin(fields["source"])}).hash
            prev = e["hash"]
    run = next(r for r in records if r["kind"] == "run")["run"]
    run["head_hash"] = prev
    body = [canonical_json(r) + "\n" for r in records if r["kind"] not in ("end", "checkpoint")]
    end = next(r for r in records if r["kind"] == "end")
    end.update(checkpoints=0, digest=hashlib.sha256("".join(body).encode()).hexdigest())
    return "".join(body) + canonical_json(end) + "\n"


@pytest.mark.parametrize("case", ["another key", "edited and resealed", "not signed"])
def test_an_export_not_signed_by_the_trusted_key_is_refused_and_nothing_written(
    scratch: SQLiteStorage, store: Storage, keys: dict[str, Path], case: str
) -> None:
    signer = keys["other"] if case == "another key" else keys["mine"]
    text = exported(scratch, sign=None if case == "not signed" else signer)
    if case == "edited and resealed":
        text = _resealed(text)
        import_runs(SQLiteStorage(scratch.path.with_name("probe.db")), io.StringIO(text))  # valid

    with pytest.raises(IntegrityError) as e:
        import_runs(store, io.StringIO(text), public_key=keys["mine"].with_suffix(".key.pub"))

    assert e.value.code == "integrity.export_signature" and e.value.hint
    assert store.list_runs() == []


def test_an_export_of_agent_reports_only_is_imported_unchanged(
    tmp_path: Path, store: Storage
) -> None:
    with closing(SQLiteStorage(tmp_path / "agents.db")) as source:
        agent = Continuum(source, origin=Origin.EXTERNAL_AGENT)
        agent.start_run(RUN, "only an agent's word")
        agent.record_progress(RUN, completed=1)
        before = snapshot(source, RUN)
        summary = import_runs(store, io.StringIO(exported(source)))
    assert summary.not_trusted == {} and snapshot(store, RUN) == before


def test_nobody_appends_an_import_marker(store: Storage) -> None:
    rt = Continuum(store)
    rt.start_run(RUN, "g")
    with pytest.raises(UsageError) as e:
        rt.append(RUN, EventType.HISTORY_IMPORTED, {"through_sequence": 1, "through_hash": "x"})
    assert e.value.code == "usage.reserved_event_type"
    assert store.get_run(RUN).head_sequence == 1


def test_the_import_command_says_what_it_did_not_trust_and_trusting_a_key_needs_a_person(
    scratch: SQLiteStorage,
    store_factory: Any,
    keys: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json

    from continuum.cli.main import run as cli_run

    path = tmp_path / "signed.jsonl"
    path.write_text(exported(scratch, sign=keys["mine"]), encoding="utf-8")
    public = str(keys["mine"].with_suffix(".key.pub"))

    # Not a terminal, no --yes: trusting a signer is refused, nothing is written.
    argv = ["--db", store_factory.url, "--json", "import", str(path), "--public-key", public]
    assert cli_run(argv) == 1
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "usage.not_a_terminal"
    assert store_factory.open().list_runs() == []

    assert cli_run(["--db", store_factory.url, "--no-color", "import", str(path)]) == 0
    text = capsys.readouterr().out
    assert "NOT TRUSTED" in text and "send_invoice:invoice:INV-7" in text
    assert "pass --public-key to trust it" in text  # signed, but nobody said to trust it

    other = str(tmp_path / "other.db")
    code = cli_run(["--db", other, "--json", "import", str(path), "--public-key", public, "--yes"])
    out = json.loads(capsys.readouterr().out)
    assert (code, out["trusted"], out["not_trusted"]) == (0, True, {})

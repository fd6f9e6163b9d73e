"""Observations and plan branches (issue 24, item 1), on both backends, through the API.

An observation's readings verify it only when two independent signals agree (an agent's
own readings count once), disagree to contest it; a high-risk branch on an observation
not verified, or any branch on a contested environment observation, answers
``request_human`` and holds the run's verdict until a person resolves it. Controls: the
same branches at low risk, or on verified observations, answer ``resume``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from continuum.errors import ContinuumError, NotFoundError, UsageError
from continuum.eventlog.events import EventType
from continuum.recovery.checkpoints import checkpoint_through
from continuum.runtime.facade import Continuum
from continuum.runtime.results import BranchVerdict
from continuum.state.projection import project
from continuum.store import Storage
from continuum.types import Mode, Origin
from tests.contract.conftest import StoreFactory

RUN = "run_perception"


def facade(store: Storage, origin: Origin = Origin.DETERMINISTIC) -> Continuum:
    return Continuum(store, origin=origin)


@pytest.fixture
def code(store: Storage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Continuum:
    """The agent's own code through the library (origin deterministic), in a project
    directory of its own (the approval rules are read from it)."""
    monkeypatch.chdir(tmp_path)
    cx = facade(store)
    cx.start_run(RUN, "pay the March invoice")
    return cx


def head(store: Storage) -> tuple[int, str | None]:
    run = store.get_run(RUN)
    return run.head_sequence, run.head_hash


def branch(
    cx: Continuum, name: str = "pay", risk: str | None = "high", obs: str = "button"
) -> BranchVerdict:
    return cx.resolve_branch(RUN, name, choice="pay", observations=[obs], risk=risk)


def test_two_agreeing_independent_signals_verify_and_a_high_risk_branch_may_go_on(
    store: Storage, code: Continuum
) -> None:
    one = code.observe(RUN, "button", "Pay 120 EUR", signal="dom", kind="ui")
    assert (one.status, one.independent_signals) == ("unverified", 1)
    two = code.observe(RUN, "button", "Pay 120 EUR", signal="screenshot_ocr", kind="ui")
    assert (two.status, two.independent_signals) == ("verified", 2)
    verdict = branch(code)
    assert (verdict.mode, verdict.status, verdict.risk) == (Mode.RESUME, "resolved", "high")
    assert verdict.observations == [
        {"observation_id": "button", "status": "verified", "kind": "ui"}
    ]
    assert code.resume(RUN).mode == Mode.RESUME
    kinds = [e.type for e in store.read_events(RUN)]
    assert kinds[-3:] == [
        EventType.PERCEPTION_OBSERVED,
        EventType.PERCEPTION_OBSERVED,
        EventType.BRANCH_RESOLVED,
    ]
    assert store.read_events(RUN)[-1].payload["verdict"] == "resume"


def test_an_agents_own_readings_count_once_and_a_high_risk_branch_asks_a_person(
    store: Storage, code: Continuum
) -> None:
    agent = facade(store, Origin.EXTERNAL_AGENT)
    agent.observe(RUN, "button", "Pay 120 EUR", signal="dom", kind="ui")
    seen = agent.observe(RUN, "button", "Pay 120 EUR", signal="screenshot_ocr", kind="ui")
    assert (seen.status, seen.independent_signals) == ("unverified", 1)  # two names, one agent
    verdict = branch(agent)
    assert verdict.mode == Mode.REQUEST_HUMAN and verdict.status == "needs_human"
    assert verdict.reason == 'high-risk branch: observation "button" is unverified'
    assert verdict.next_allowed_action == "resolve_branch:pay"
    resumed = code.resume(RUN)
    assert resumed.mode == Mode.REQUEST_HUMAN
    assert "resolve_branch:pay" in resumed.required_actions
    assert 'branch "pay" waits for a person' in resumed.rationale
    # control: the same branch at low risk may go on
    assert branch(agent, "look", risk="low").mode == Mode.RESUME
    # a second, independent signal (the agent's code) verifies it; asked again, it goes on
    code.observe(RUN, "button", "Pay 120 EUR", signal="dom", kind="ui")
    again = branch(agent)
    assert (again.mode, again.resolved_by) == (Mode.RESUME, "external_agent")
    assert "resolve_branch:pay" not in code.resume(RUN).required_actions


def test_disagreeing_readings_contest_an_observation(store: Storage, code: Continuum) -> None:
    code.observe(RUN, "button", "Pay 120 EUR", signal="dom", kind="ui")
    contested = code.observe(RUN, "button", "Pay 1200 EUR", signal="screenshot_ocr", kind="ui")
    assert contested.status == "contested"
    assert branch(code).mode == Mode.REQUEST_HUMAN  # high risk
    assert branch(code, "look", risk="low").mode == Mode.RESUME  # control: not environment
    # the signal that disagreed reads again and agrees: its latest reading is what counts
    assert code.observe(RUN, "button", "Pay 120 EUR", signal="screenshot_ocr").status == (
        "verified"
    )


def test_a_contested_environment_observation_asks_a_person_at_any_risk(
    store: Storage, code: Continuum, tmp_path: Path
) -> None:
    data = tmp_path / "prices.csv"
    data.write_text("sku,price\nA,120\n", encoding="utf-8")
    code.declare_dependencies(RUN, files=[str(data)])
    name = f"file:{data}"
    agent = facade(store, Origin.EXTERNAL_AGENT)
    wrong = agent.observe(RUN, name, "sha256:" + "0" * 64, signal="agent_read", kind="environment")
    assert wrong.continuum_checked and wrong.status == "contested"
    own = [r for r in wrong.readings if r["origin"] == "deterministic"]
    assert [r["signal"] for r in own] == ["continuum:file"]  # continuum read the file itself
    assert own[0]["value"].startswith("sha256:") and own[0]["value"] != "sha256:" + "0" * 64
    verdict = branch(agent, "use-prices", risk="low", obs=name)
    assert verdict.mode == Mode.REQUEST_HUMAN
    assert "is contested" in (verdict.reason or "")
    # the agent reads again and now says what the file holds: continuum's reading agrees
    right = agent.observe(RUN, name, own[0]["value"], signal="agent_read", kind="environment")
    assert right.status == "verified"  # the agent (one signal) and continuum (another)
    assert branch(agent, "use-prices", risk="high", obs=name).mode == Mode.RESUME


def test_a_person_resolves_a_waiting_branch_recorded_as_human(
    store: Storage, code: Continuum
) -> None:
    agent = facade(store, Origin.EXTERNAL_AGENT)
    agent.observe(RUN, "button", "Pay", signal="dom")
    assert branch(agent).mode == Mode.REQUEST_HUMAN
    person = facade(store, Origin.HUMAN)
    resolved = person.resolve_branch(
        RUN, "pay", choice="pay", observations=["button"], reason="checked the invoice"
    )
    assert (resolved.mode, resolved.resolved_by, resolved.status) == (
        Mode.RESUME,
        "human",
        "resolved",
    )
    last = store.read_events(RUN)[-1]
    assert last.type == EventType.BRANCH_RESOLVED and last.source == Origin.HUMAN
    assert "resolve_branch:pay" not in code.resume(RUN).required_actions


def test_risk_is_never_lowered_by_a_later_call_and_a_rule_raises_it(
    store: Storage, code: Continuum, tmp_path: Path
) -> None:
    agent = facade(store, Origin.EXTERNAL_AGENT)
    agent.observe(RUN, "button", "Pay", signal="dom")
    assert branch(agent, risk="high").mode == Mode.REQUEST_HUMAN
    lowered = branch(agent, risk="low")
    assert (lowered.risk, lowered.mode) == ("high", Mode.REQUEST_HUMAN)
    rules = tmp_path / ".continuum" / "approvals.toml"
    rules.parent.mkdir(exist_ok=True)
    rules.write_text(
        '[[branch]]\nbranch = "wire_.*"\nrisk = "high"\ndescription = "money"\n',
        encoding="utf-8",
    )
    ruled = branch(facade(store, Origin.EXTERNAL_AGENT), "wire_acme", risk="low")
    assert (ruled.risk, ruled.mode) == ("high", Mode.REQUEST_HUMAN)
    assert ruled.rule is not None and "branch rule #1" in ruled.rule and "money" in ruled.rule
    assert branch(agent, "read_acme", risk="low").mode == Mode.RESUME  # control: no rule
    # a malformed rule file refuses the call (fail closed) and writes nothing
    rules.write_text('[[branch]]\nbranch = "wire_.*"\nrisk = "maybe"\n', encoding="utf-8")
    before = head(store)
    with pytest.raises(UsageError) as e:
        branch(facade(store, Origin.EXTERNAL_AGENT), "wire_other", risk="low")
    assert e.value.code == "approvals.bad_rules" and "risk must be one of" in e.value.message
    assert head(store) == before


def test_the_fold_judges_a_branch_not_what_its_payload_says(
    store: Storage, code: Continuum
) -> None:
    agent = facade(store, Origin.EXTERNAL_AGENT)
    agent.observe(RUN, "button", "Pay", signal="dom")
    agent.append(
        RUN,
        EventType.BRANCH_RESOLVED,
        {
            "branch_id": "pay",
            "choice": "pay",
            "observations": ["button"],
            "risk": "high",
            "verdict": "resume",  # a lie: the observation is not verified
        },
    )
    b = code.state(RUN).branches["pay"]
    assert b.status == "needs_human" and code.resume(RUN).mode == Mode.REQUEST_HUMAN
    # a branch on an observation never recorded (written past the API) waits too
    agent.append(
        RUN,
        EventType.BRANCH_RESOLVED,
        {"branch_id": "ghost", "choice": "go", "observations": ["nothing"], "risk": "high"},
    )
    assert code.state(RUN).branches["ghost"].reason == (
        'high-risk branch: observation "nothing" was never recorded'
    )


@pytest.mark.parametrize(
    ("type_", "payload", "field"),
    [
        (
            EventType.PERCEPTION_OBSERVED,
            {"observation_id": "o", "subject": "s", "value": 1},
            "signal",
        ),
        (
            EventType.PERCEPTION_OBSERVED,
            {"observation_id": "o", "subject": "s", "signal": "dom"},
            "value",
        ),
        (
            EventType.PERCEPTION_OBSERVED,
            {"observation_id": "o", "subject": "s", "signal": "dom", "value": 1, "kind": "vibe"},
            "kind",
        ),
        (
            EventType.PERCEPTION_OBSERVED,
            {"observation_id": " ", "subject": "s", "signal": "dom", "value": 1},
            "observation_id",
        ),
        (
            EventType.BRANCH_RESOLVED,
            {"branch_id": "b", "choice": "c", "observations": []},
            "observations",
        ),
        (
            EventType.BRANCH_RESOLVED,
            {"branch_id": "b", "choice": "c", "observations": [3]},
            "observations",
        ),
        (
            EventType.BRANCH_RESOLVED,
            {"branch_id": "b", "choice": "c", "observations": ["o"], "risk": "medium"},
            "risk",
        ),
        (EventType.BRANCH_RESOLVED, {"branch_id": "b", "observations": ["o"]}, "choice"),
    ],
)
def test_a_malformed_payload_is_refused_at_append_naming_the_field(
    store: Storage, code: Continuum, type_: EventType, payload: dict[str, object], field: str
) -> None:
    before = head(store)
    with pytest.raises(UsageError) as e:
        code.append(RUN, type_, payload)
    assert e.value.code == "usage.bad_payload" and f"field {field!r}" in e.value.message
    assert head(store) == before


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda cx: cx.observe(RUN, "b\u202etn", "x", signal="dom"), "usage.bad_identifier"),
        (lambda cx: cx.observe(RUN, "button", "x", signal=""), "usage.bad_identifier"),
        (lambda cx: cx.observe(RUN, "button", "x", signal="dom", kind="vibe"), "usage.bad_kind"),
        (
            lambda cx: cx.observe(RUN, "other", "x", signal="dom", observation_id="button"),
            "usage.conflicting_subject",
        ),
        (
            lambda cx: cx.resolve_branch(RUN, "b", choice="c", observations=["nope"]),
            "not_found.observation",
        ),
        (
            lambda cx: cx.resolve_branch(RUN, "b", choice="c", observations=[]),
            "usage.bad_observations",
        ),
        (
            lambda cx: cx.resolve_branch(RUN, "b", choice="c", observations="button"),
            "usage.bad_observations",
        ),
        (
            lambda cx: cx.resolve_branch(RUN, "b", choice="c", observations=["button"], risk="mid"),
            "usage.bad_risk",
        ),
        (
            lambda cx: cx.resolve_branch("no-such-run", "b", choice="c", observations=["x"]),
            "not_found.run",
        ),
    ],
)
def test_bad_input_at_the_api_is_refused_and_writes_nothing(
    store: Storage, code: Continuum, call: object, error: str
) -> None:
    code.observe(RUN, "button", "Pay", signal="dom")
    before = head(store)
    with pytest.raises(ContinuumError) as e:
        call(code)  # type: ignore[operator]
    assert e.value.code == error
    assert head(store) == before


def test_a_finished_run_refuses_observations(store: Storage, code: Continuum) -> None:
    code.finish_run(RUN)
    with pytest.raises(UsageError) as e:
        code.observe(RUN, "button", "Pay", signal="dom")
    assert e.value.code == "usage.run_finished"


def test_checkpoint_then_fold_equals_the_full_fold_and_a_new_handle_sees_the_same(
    store_factory: StoreFactory, store: Storage, code: Continuum
) -> None:
    agent = facade(store, Origin.EXTERNAL_AGENT)
    agent.observe(RUN, "button", "Pay", signal="dom", kind="ui")
    assert branch(agent).mode == Mode.REQUEST_HUMAN
    code.checkpoint(RUN, reason="mid")
    code.observe(RUN, "button", "Pay", signal="ocr", kind="ui")
    assert branch(agent).mode == Mode.RESUME
    agent.observe(RUN, "banner", "Sale", signal="dom")
    events = store.read_events(RUN)
    full = project(RUN, events)
    other = facade(store_factory.open())
    restored = other.state(RUN)  # from the checkpoint plus the later events
    assert checkpoint_through(other.store, RUN, restored.last_checkpoint) is not None
    assert restored == full
    assert full.observations["button"].status == "verified"
    assert full.branches["pay"].attempts == 2 and full.branches["pay"].status == "resolved"
    assert other.verify(RUN).ok


def test_a_run_without_observations_keeps_the_state_earlier_versions_wrote(
    store: Storage, code: Continuum
) -> None:
    dumped = code.state(RUN).model_dump(mode="json")
    assert "observations" not in dumped and "branches" not in dumped


def test_observations_and_branches_are_listed_in_log_order(store: Storage, code: Continuum) -> None:
    code.observe(RUN, "b", 1, signal="dom")
    code.observe(RUN, "a", 2, signal="dom")
    branch(code, "z", risk="low", obs="b")
    branch(code, "y", risk="high", obs="a")
    assert [o.observation_id for o in code.observations(RUN)] == ["b", "a"]
    assert [(b.branch_id, b.mode) for b in code.branches(RUN)] == [
        ("z", Mode.RESUME),
        ("y", Mode.REQUEST_HUMAN),
    ]
    with pytest.raises(NotFoundError):
        code.observations("no-such-run")


def _exported_run(tmp_path: Path, sign: Path | None = None) -> Path:
    """A run on a SQLite source whose code verified an observation, whose agent took a
    high-risk branch on it, and whose person resolved another; exported to a file."""
    from contextlib import closing

    from continuum.store import open_store
    from tests.contract.transfer_support import export_file

    url = str(tmp_path / "source.db")
    with closing(open_store(url)) as source:
        cx = facade(source)
        cx.start_run(RUN, "g")
        cx.observe(RUN, "button", "Pay", signal="dom")
        cx.observe(RUN, "button", "Pay", signal="ocr")
        assert branch(facade(source, Origin.EXTERNAL_AGENT)).mode == Mode.RESUME
        cx.observe(RUN, "banner", "Sale", signal="dom")
        person = facade(source, Origin.HUMAN)
        person.resolve_branch(RUN, "promo", choice="show", observations=["banner"], risk="high")
    return export_file(url, tmp_path / "export.jsonl", [RUN], sign=sign)


def test_an_unsigned_import_verifies_nothing_and_resolves_nothing(
    store: Storage, tmp_path: Path
) -> None:
    from continuum.ops.transfer import import_runs

    with open(_exported_run(tmp_path), encoding="utf-8") as f:
        import_runs(store, f)
    state = facade(store).state(RUN)
    assert state.observations["button"].status == "unverified"  # two readings, one file's word
    assert {r.origin for r in state.observations["button"].readings.values()} == {Origin.IMPORTED}
    assert state.branches["pay"].status == "needs_human"
    assert state.branches["promo"].status == "needs_human"  # a person's, unsigned: imported
    assert facade(store).resume(RUN).mode == Mode.REQUEST_HUMAN
    assert facade(store).verify(RUN).ok


def test_a_signed_import_keeps_what_the_readings_and_the_person_settled(
    store: Storage, tmp_path: Path
) -> None:
    from continuum.ops.signing import generate_keypair
    from continuum.ops.transfer import import_runs

    key = tmp_path / "export.key"
    generate_keypair(key, tmp_path / "export.key.pub")
    with open(_exported_run(tmp_path, sign=key), encoding="utf-8") as f:
        import_runs(store, f, public_key=tmp_path / "export.key.pub")
    state = facade(store).state(RUN)
    assert state.observations["button"].status == "verified"
    assert state.branches["pay"].status == "resolved"
    assert state.branches["promo"].resolved_by == Origin.HUMAN


def test_archiving_the_history_of_observations_keeps_them_and_a_waiting_branch(
    store_factory: StoreFactory, store: Storage, code: Continuum, tmp_path: Path
) -> None:
    agent = facade(store, Origin.EXTERNAL_AGENT)
    code.observe(RUN, "button", "Pay", signal="dom")
    code.observe(RUN, "button", "Pay", signal="ocr")
    agent.observe(RUN, "banner", "Sale", signal="dom")
    assert branch(agent, "promo", obs="banner").mode == Mode.REQUEST_HUMAN
    before = code.state(RUN)
    code.archive(RUN, before=store.get_run(RUN).head_sequence + 1, to=tmp_path / "old.jsonl")
    other = facade(store_factory.open())  # a new process: the live log starts at the marker
    after = other.state(RUN)
    assert after.observations == before.observations and after.branches == before.branches
    assert other.resume(RUN).mode == Mode.REQUEST_HUMAN
    assert branch(facade(other.store, Origin.EXTERNAL_AGENT)).mode == Mode.RESUME  # verified
    assert other.verify(RUN).ok


def test_continuums_own_reading_does_not_vouch_for_another_subject(
    store: Storage, code: Continuum, tmp_path: Path
) -> None:
    """Review finding: an agent filing the file's true checksum under a subject of its
    own ("payee is verified") must not get it verified by continuum's reading."""
    data = tmp_path / "payees.csv"
    data.write_text("acme,DE00 1234\n", encoding="utf-8")
    code.declare_dependencies(RUN, files=[str(data)])
    name = f"file:{data}"
    checksum = code.state(RUN).dependencies[name].checksum
    agent = facade(store, Origin.EXTERNAL_AGENT)
    seen = agent.observe(
        RUN, "payee is verified", checksum, signal="dom", observation_id=name, kind="environment"
    )
    assert seen.continuum_checked and seen.status == "contested"
    assert branch(agent, "pay", risk="high", obs=name).mode == Mode.REQUEST_HUMAN

"""Budgets with reservations (issue 25, item 5), on both backends.

A run's limits in USD and tokens; an attempt's estimate is reserved until its actual is
recorded (an effect in flight or unknown counts its estimate, never zero); an intercept
that would pass a limit is refused before the effect (``budget_exceeded``) with the
figures; raising a limit is a person's act. The edge under concurrency is real: 4
processes, a budget for exactly N effects, each effect left in flight (the processes are
SIGKILLed after their effects): N proceed, the rest are refused. Negative control: the
same processes with a budget check that counts unknown as zero overspend.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any

import pytest

from continuum.errors import UsageError
from continuum.eventlog.events import EventType
from continuum.runtime.facade import Continuum
from continuum.store import Storage
from continuum.types import InterceptStatus, Origin
from tests.contract.conftest import StoreFactory

RUN = "run_budget"
# Each worker intercepts PER effects of 0.25 USD each, performs those that proceed (a line
# on stdout) and is SIGKILLed before completing any: all of them stay in flight, then
# unknown. With BROKEN set, the worker's ledger counts only actuals (unknown as zero).
WORKER = r"""
import os, signal, sys, threading
import continuum.ledger.core as core
from continuum.ledger.budget import charged
from continuum.runtime.facade import Continuum
url, worker, per, broken, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]
if broken:
    def only_actuals(records):
        return charged(
            {**r, "usage": [u for u in (r.get("usage") or ()) if u.get("actual") is not None]}
            for r in records
        )
    core.charged = only_actuals
while not os.path.exists(go):  # all four start together
    pass
cx = Continuum.open(url, origin="external_agent")
for i in range(per):
    r = cx.intercept("run_budget", "llm_call", {"w": worker, "i": i}, key=f"{worker}-{i}",
                     cost={"usd": "0.25"})
    print(r.status, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def facade(store: Storage, origin: Origin = Origin.DETERMINISTIC) -> Continuum:
    return Continuum(store, origin=origin)


@pytest.fixture
def cx(store: Storage) -> Continuum:
    rt = facade(store)
    rt.start_run(RUN, "answer the tickets")
    return rt


def head(store: Storage) -> int:
    return store.get_run(RUN).head_sequence


def test_estimates_reserve_actuals_settle_and_a_passing_estimate_is_refused(
    store: Storage, cx: Continuum
) -> None:
    cx.set_budget(RUN, usd="1.00", tokens=10_000)
    a = cx.intercept(RUN, "llm_call", {"q": 1}, key="q1", cost={"usd": 0.4, "tokens": 3000})
    b = cx.intercept(RUN, "llm_call", {"q": 2}, key="q2", cost={"usd": "0.40"})
    assert a.proceed and b.proceed
    before = head(store)
    refused = cx.intercept(RUN, "llm_call", {"q": 3}, key="q3", cost={"usd": 0.3})
    assert (refused.proceed, refused.status) == (False, InterceptStatus.BUDGET_EXCEEDED)
    assert "spent or reserved 0.80 USD of 1.00" in refused.guidance
    assert "estimate of 0.30 USD" in refused.guidance
    assert head(store) == before  # nothing written
    cx.complete(RUN, a.action_key, cost={"usd": 0.05, "tokens": 800})  # cheaper than feared
    assert cx.intercept(RUN, "llm_call", {"q": 3}, key="q3", cost={"usd": 0.3}).proceed
    usage = cx.usage(RUN)
    assert usage["spent"] == {"usd_micros": 50_000, "tokens": 800}
    assert usage["reserved"] == {"usd_micros": 700_000, "tokens": 0}
    assert [(r["action_key"], r["attempt"], r["estimate"], r["actual"]) for r in usage["rows"]] == [
        (
            "llm_call:q1",
            1,
            {"usd_micros": 400_000, "tokens": 3000},
            {"usd_micros": 50_000, "tokens": 800},
        ),
        ("llm_call:q2", 1, {"usd_micros": 400_000}, None),
        ("llm_call:q3", 1, {"usd_micros": 300_000}, None),
    ]
    tokens = cx.intercept(RUN, "llm_call", {"q": 4}, key="q4", cost={"tokens": 9_500})
    assert tokens.status == "budget_exceeded" and "800 tokens of 10000" in tokens.guidance


def test_an_unknown_effect_keeps_its_estimate_reserved(store: Storage, cx: Continuum) -> None:
    cx.set_budget(RUN, usd="0.50")
    a = cx.intercept(RUN, "send", {"n": 1}, key="n1", cost={"usd": 0.3})
    cx.fail(RUN, a.action_key, error="timeout")  # unknown: it may have happened
    assert cx.intercept(RUN, "send", {"n": 2}, key="n2", cost={"usd": 0.3}).status == (
        "budget_exceeded"
    )
    with pytest.raises(UsageError) as e:  # an uncertain failure has no actual
        cx.fail(RUN, a.action_key, error="x", cost={"usd": 0})
    assert e.value.code == "usage.bad_cost"


def test_each_attempt_is_one_row_and_a_retry_reserves_again(store: Storage, cx: Continuum) -> None:
    cx.set_budget(RUN, usd="1.00")
    first = cx.intercept(RUN, "fetch", {"p": 1}, key="p1", replay="safe", cost={"usd": 0.4})
    cx.fail(RUN, first.action_key, error="503", certain=True, cost={"usd": 0.1})
    again = cx.intercept(RUN, "fetch", {"p": 1}, key="p1", replay="safe", cost={"usd": 0.4})
    assert (again.proceed, again.attempt) == (True, 2)
    rows = cx.usage(RUN)["rows"]
    assert [(r["attempt"], r["counts"]["usd_micros"]) for r in rows] == [(1, 100_000), (2, 400_000)]
    cx.fail(RUN, again.action_key, error="503", certain=True)  # no actual: estimate counts
    third = cx.intercept(RUN, "fetch", {"p": 1}, key="p1", replay="safe", cost={"usd": 0.6})
    assert third.status == "budget_exceeded"  # 0.1 + 0.4 + 0.6 > 1.00


def test_raising_a_limit_is_a_persons_act(store: Storage, cx: Continuum) -> None:
    agent = facade(store, Origin.EXTERNAL_AGENT)
    agent.set_budget(RUN, usd="2.00")  # a first limit: anyone
    agent.set_budget(RUN, usd="1.00")  # lower: anyone
    before = head(store)
    for usd in ("5.00", None):
        with pytest.raises(UsageError) as e:
            agent.set_budget(RUN, usd=usd)
        assert e.value.code == "budget.raise_needs_person"
    assert head(store) == before
    # past the API, an agent's raise changes nothing in the fold and is counted
    agent.append(RUN, EventType.BUDGET_SET, {"usd_micros": 9_000_000})
    state = cx.state(RUN)
    assert state.budget is not None
    assert (state.budget["usd_micros"], state.budget["ignored"]) == (1_000_000, 1)
    person = facade(store, Origin.HUMAN)
    assert person.set_budget(RUN, usd="5.00")["usd_micros"] == 5_000_000


@pytest.mark.parametrize(
    "cost",
    [
        {"usd": -1},
        {"usd": "lots"},
        {"usd": float("nan")},
        {"tokens": -3},
        {"tokens": 1.5},
        {"eur": 1},
    ],
)
def test_a_bad_cost_is_refused_and_writes_nothing(
    store: Storage, cx: Continuum, cost: dict[str, object]
) -> None:
    before = head(store)
    with pytest.raises(UsageError) as e:
        cx.intercept(RUN, "send", {"n": 1}, key="n1", cost=cost)
    assert e.value.code == "usage.bad_cost"
    assert head(store) == before


def test_a_bad_recorded_cost_is_refused_at_append_naming_the_field(
    store: Storage, cx: Continuum
) -> None:
    r = cx.intercept(RUN, "send", {"n": 1}, key="n1")
    with pytest.raises(UsageError) as e:
        cx.append(
            RUN,
            EventType.ACTION_COMPLETED,
            {"action_id": r.action_id, "actual": {"usd_micros": -5}},
        )
    assert e.value.code == "usage.bad_payload" and "field 'actual'" in e.value.message


def _race(store_factory: StoreFactory, tmp_path_go: str, broken: bool) -> list[str]:
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WORKER,
                store_factory.url,
                f"w{w}",
                "3",
                "1" if broken else "0",
                tmp_path_go,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(4)
    ]
    with open(tmp_path_go, "w"):
        pass
    statuses: list[str] = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == -signal.SIGKILL, err[-2000:]
        statuses += out.split()
    return statuses


@pytest.mark.parametrize(
    "broken", [False, True], ids=["ledger", "negative_control_unknown_as_zero"]
)
def test_concurrent_intercepts_at_the_budget_edge_never_overspend(
    store_factory: StoreFactory, store: Storage, cx: Continuum, tmp_path: object, broken: bool
) -> None:
    cx.set_budget(RUN, usd="1.25")  # exactly five effects of 0.25
    statuses = _race(store_factory, f"{tmp_path}/go", broken)
    assert len(statuses) == 12
    proceeded = statuses.count("started")
    if not broken:
        assert proceeded == 5 and statuses.count("budget_exceeded") == 7
        assert cx.usage(RUN)["reserved"]["usd_micros"] == 1_250_000
    else:  # counting the unknown effects as zero: every one of them went ahead
        assert proceeded == 12
    print(json.dumps({"broken": broken, "proceeded": proceeded}))


def test_an_unsigned_import_does_not_keep_a_raise_and_a_signed_one_does(
    store: Storage, tmp_path: object
) -> None:
    from contextlib import closing
    from pathlib import Path

    from continuum.ops.signing import generate_keypair
    from continuum.ops.transfer import import_runs
    from continuum.store import open_store
    from tests.contract.transfer_support import export_file

    base = Path(str(tmp_path))
    url = str(base / "source.db")
    with closing(open_store(url)) as source:
        agent = facade(source, Origin.EXTERNAL_AGENT)
        agent.start_run(RUN, "g")
        agent.set_budget(RUN, usd="1.00")
        facade(source, Origin.HUMAN).set_budget(RUN, usd="50.00")  # a person raised it
    key = base / "k.key"
    generate_keypair(key, base / "k.key.pub")
    unsigned = export_file(url, base / "plain.jsonl", [RUN])
    with open(unsigned, encoding="utf-8") as f:
        import_runs(store, f)
    budget = facade(store).state(RUN).budget
    assert budget is not None and budget["usd_micros"] == 1_000_000  # the lowest ever set
    assert budget["provenance"]["origin"] == "imported"
    # control: signed by a key this store trusts, the person's raise stands
    other_url = str(base / "other.db")
    with closing(open_store(other_url, create=True)) as other:
        signed = export_file(url, base / "signed.jsonl", [RUN], sign=key)
        with open(signed, encoding="utf-8") as f:
            import_runs(other, f, public_key=base / "k.key.pub")
        kept = facade(other).state(RUN).budget
        assert kept is not None and kept["usd_micros"] == 50_000_000


def test_at_its_limit_a_run_starts_nothing_more_even_without_an_estimate_or_through_effect(
    store: Storage, cx: Continuum
) -> None:
    """Review findings: leaving the estimate out, or going through ``cx.effect``, is no way
    past a budget that is used up."""
    cx.set_budget(RUN, tokens=10)
    a = cx.intercept(RUN, "llm", {"q": 1}, key="q1", cost={"tokens": 10})
    cx.complete(RUN, a.action_key, cost={"tokens": 10})
    assert cx.intercept(RUN, "llm", {"q": 2}, key="q2").status == "budget_exceeded"
    ran: list[int] = []

    @cx.effect(RUN, "llm", key=lambda n: f"n{n}")
    def ask(n: int) -> int:
        ran.append(n)
        return n

    from continuum.errors import LedgerError

    with pytest.raises(LedgerError):
        ask(3)
    assert ran == []


def test_a_new_call_past_the_budget_is_refused_before_a_person_is_asked(
    store: Storage, project_rules: None, cx: Continuum
) -> None:
    cx.set_budget(RUN, usd="0.10")
    r = cx.intercept(RUN, "wire_money", {"amount": 5}, key="w1", cost={"usd": 0.5})
    assert r.status == "budget_exceeded" and r.approval_id is None
    assert cx.approvals(RUN) == []  # nobody was asked to approve what cannot run
    within = cx.intercept(RUN, "wire_money", {"amount": 6}, key="w2", cost={"usd": 0.05})
    assert within.status == "awaiting_approval"  # control: the rule is read and asks


@pytest.fixture
def project_rules(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    base = Path(str(tmp_path))
    (base / ".continuum").mkdir(exist_ok=True)
    (base / ".continuum" / "approvals.toml").write_text(
        '[[approval]]\naction_type = "wire_money"\n', encoding="utf-8"
    )
    monkeypatch.chdir(base)


# The same race, each worker in a child run of its own under RUN: the parent's budget
# covers them all. With BROKEN set, the workers judge only their own run's limits (a
# family budget ignored).
FAMILY_WORKER = r"""
import os, signal, sys
import continuum.runtime.effects as effects
from continuum.runtime.facade import Continuum
url, worker, per, broken, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]
if broken:
    effects.EffectsFacade.budget_scopes = lambda self, run_id: None
cx = Continuum.open(url, origin="external_agent")
cx.start_run(f"child-{worker}", "answer some tickets", parent="run_budget")
while not os.path.exists(go):  # all four start together
    pass
for i in range(per):
    r = cx.intercept(f"child-{worker}", "llm_call", {"i": i}, key=f"{worker}-{i}",
                     cost={"usd": "0.25"})
    print(r.status, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("broken", [False, True], ids=["family", "negative_control_own_run_only"])
def test_a_parents_budget_covers_its_children_racing_at_the_edge(
    store_factory: StoreFactory, store: Storage, cx: Continuum, tmp_path: object, broken: bool
) -> None:
    cx.set_budget(RUN, usd="1.25")  # exactly five effects of 0.25, in the whole family
    go = f"{tmp_path}/go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", FAMILY_WORKER, store_factory.url, f"w{w}", "3"]
            + ["1" if broken else "0", go],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(4)
    ]
    deadline = 0
    while len(cx.state(RUN).children) < 4 and deadline < 1200:  # every child started
        deadline += 1
        subprocess.run(["sleep", "0.05"], check=True)
    with open(go, "w"):
        pass
    statuses: list[str] = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == -signal.SIGKILL, err[-2000:]
        statuses += out.split()
    assert len(statuses) == 12
    proceeded = statuses.count("started")
    if not broken:
        assert proceeded == 5 and statuses.count("budget_exceeded") == 7
        refused = cx.intercept("child-w0", "llm_call", {"i": 9}, key="w0-9", cost={"usd": "0.01"})
        assert refused.status == "budget_exceeded"
        assert "The family of run 'run_budget' has spent or reserved 1.25 USD" in refused.guidance
    else:  # each child judged alone: every one of them went ahead
        assert proceeded == 12


def test_a_childs_own_budget_and_its_parents_both_hold(store: Storage, cx: Continuum) -> None:
    cx.set_budget(RUN, tokens=100)
    cx.start_run("kid", "part", parent=RUN)
    cx.set_budget("kid", tokens=30)
    assert cx.intercept("kid", "llm", {"q": 1}, key="k1", cost={"tokens": 30}).proceed
    own = cx.intercept("kid", "llm", {"q": 2}, key="k2", cost={"tokens": 1})
    assert own.status == "budget_exceeded" and "The run has spent" in own.guidance
    assert cx.intercept(RUN, "llm", {"q": 3}, key="p1", cost={"tokens": 60}).proceed
    cx.start_run("kid2", "another part", parent=RUN)
    over = cx.intercept("kid2", "llm", {"q": 4}, key="k3", cost={"tokens": 20})
    assert over.status == "budget_exceeded"
    assert "The family of run 'run_budget' has spent or reserved 90 tokens of 100" in over.guidance
    assert cx.intercept("kid2", "llm", {"q": 5}, key="k4", cost={"tokens": 10}).proceed
    family = cx.usage(RUN)["family"]  # what the parent's budget counts
    assert family["runs"] == [RUN, "kid", "kid2"]
    assert family["reserved"]["tokens"] == 100 and cx.usage(RUN)["reserved"]["tokens"] == 60
    assert "family" not in cx.usage("kid2")
    # a loose run is not counted in the family
    cx.start_run("loose", "alone")
    assert cx.intercept("loose", "llm", {"q": 6}, key="l1", cost={"tokens": 500}).proceed


def test_a_person_is_told_once_when_the_budget_is_reached_naming_the_family(
    store: Storage, cx: Continuum
) -> None:
    """Issue 26: a needs-human notice when a budget stops an effect, once per limit as
    set (a lowered limit reached again is a new notice); none before."""
    cx.set_budget(RUN, tokens=10)
    cx.start_run("kid", "a part", parent=RUN)
    assert cx.intercept("kid", "llm", {"q": 1}, key="q1", cost={"tokens": 10}).proceed
    assert [n for n in store.list_outbox() if n.kind == "budget_exceeded"] == []
    for q in (2, 3, 4):
        assert cx.intercept("kid", "llm", {"q": q}, key=f"q{q}").status == "budget_exceeded"
    (notice,) = [n for n in store.list_outbox() if n.kind == "budget_exceeded"]
    assert notice.body["run_id"] == "kid" and notice.body["command"] == "continuum usage kid"
    assert "The family of run 'run_budget'" in notice.body["details"]["reason"]
    cx.set_budget(RUN, tokens=5)  # lowered: reached again, told again
    assert cx.intercept(RUN, "llm", {"q": 5}, key="q5").status == "budget_exceeded"
    assert len([n for n in store.list_outbox() if n.kind == "budget_exceeded"]) == 2


# Another writer (a second facade on the same store: another process, in effect) starts a
# child of the parent and spends in it at the worst moment of the parent's own intercept:
# between reading the parent's state and reading its head (where the budget's family is
# fixed), or just after the intercept read the run for its hold. The family's count must
# still see the child: 0.01 + 0.90 + 0.50 passes the 1.00 limit.
@pytest.mark.parametrize("moment", ["before_head", "after_hold"])
@pytest.mark.parametrize("had_child", [False, True], ids=["no_child_yet", "a_child_already"])
def test_a_child_started_while_the_parent_intercepts_is_counted_in_its_budget(
    store_factory: StoreFactory, store: Storage, moment: str, had_child: bool
) -> None:
    a = facade(store)
    b = facade(store_factory.open(), Origin.EXTERNAL_AGENT)
    a.start_run("P", "parent")
    a.set_budget("P", usd="1.00")
    if had_child:
        a.start_run("C1", "child one", parent="P")
    assert a.intercept("P", "llm_call", {"i": 0}, key="warm", cost={"usd": "0.01"}).proceed
    fired: list[str] = []

    def other_writer() -> None:
        if not fired:
            fired.append(moment)
            b.start_run("C2", "child two", parent="P")
            spent = b.intercept("C2", "llm_call", {"x": 1}, key="c2", cost={"usd": "0.90"})
            assert spent.proceed  # 0.91 of 1.00: within the budget

    if moment == "before_head":
        real_head = a._head_of

        def head_of(run_id: str) -> int:
            if run_id == "P":
                other_writer()
            return real_head(run_id)

        a._head_of = head_of  # type: ignore[method-assign]
    else:
        real_hold = a._hold_and_state

        def hold_and_state(run_id: str) -> Any:
            out = real_hold(run_id)
            other_writer()
            return out

        a._hold_and_state = hold_and_state  # type: ignore[method-assign]
    r = a.intercept("P", "llm_call", {"i": 1}, key="p1", cost={"usd": "0.50"})
    assert fired == [moment]  # the other writer did run inside the intercept
    assert r.status == InterceptStatus.BUDGET_EXCEEDED, r.guidance
    within = a.intercept("P", "llm_call", {"i": 2}, key="p2", cost={"usd": "0.05"})
    assert within.proceed  # control: 0.96 of 1.00 still fits


def test_intercepts_on_runs_that_do_not_exist_keep_nothing(cx: Continuum) -> None:
    from continuum.errors import NotFoundError

    for i in range(50):
        with pytest.raises(NotFoundError):
            cx.intercept(f"no-such-run-{i}", "t", {}, key="k")
    assert not any(r.startswith("no-such-run") for r in cx._steps)
    cx.intercept(RUN, "t", {}, key="k")
    assert RUN in cx._steps  # control: a real run's steps are counted

"""Approvals are bound to the action, not to its spelling (issue 30, item 2), on every backend.

The rule is the one references/operators.md shows (read from the page, written to a real
``.continuum/approvals.toml`` the ledger reads): transfers of 10,000 or more wait for a
person. Every spelling of 50,000 the ledger takes for the same action (``50000``,
``50000.0``, ``5e4``, ``" 50000"``, ``"50000"``, ...) waits; every spelling of 9,999 does
not (the control), so a rule that waited for everything would fail too. An amount that
cannot be read as a number waits (fail closed). Old regex rules judge the canonical
arguments as well: ``^[0-9]{5,}$`` catches ``50000.0`` and ``" 50000"``, which it let
through when it matched the raw text.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from continuum.ledger.approvals import ApprovalRules, parse_rules
from continuum.runtime.facade import Continuum
from continuum.types import Origin
from tests.contract.conftest import StoreFactory

DOCS = Path(__file__).resolve().parents[2] / "references" / "operators.md"
KEY = "transfer:T-77"

# The spellings an agent may send for 50,000, as JSON (parsed by json.loads) and as text.
LARGE: list[Any] = [
    50000,
    50000.0,
    5e4,
    5.0e4,
    50000.00,
    0.5e5,
    "50000",
    " 50000",
    "50000 ",
    "\t50000\n",
    "50000.0",
    "5e4",
    "5E4",
    "5.0e4",
    "5e+4",
    "500e2",
    10000,  # the boundary is inclusive (>=)
    "10000.000",
    1e20,
    10**30,
]
SMALL: list[Any] = [9999, 9999.0, 9999.999, "9999", " 9999", "9.999e3", 9.999e3, 0, -50000, "-5e4"]
# Not readable as a number: waits rather than escape the rule by its spelling.
UNREADABLE: list[Any] = ["50,000", "fifty thousand", "+50000", "0x1p16", "Infinity", True, None]


def docs_rules() -> str:
    """The approvals.toml example of references/operators.md, as the page shows it."""
    page = DOCS.read_text(encoding="utf-8")
    section = page[page.index("## Approvals") :]
    found = re.search(r"```toml\n(.*?)```", section, re.S)
    assert found is not None, "references/operators.md lost its approvals.toml example"
    return found[1]


@pytest.fixture
def work(tmp_path: Path) -> Path:
    rules = tmp_path / "work" / ".continuum" / "approvals.toml"
    rules.parent.mkdir(parents=True)
    rules.write_text(docs_rules(), encoding="utf-8")
    return rules.parent.parent


def agent(store_factory: StoreFactory, work: Path) -> Continuum:
    """An agent's facade, reading the rules file of ``work`` as every edge does."""
    return Continuum(store_factory.open(), origin=Origin.EXTERNAL_AGENT, cwd=str(work))


def statuses(cx: Continuum, amounts: list[Any], *, key: str | None = KEY) -> dict[str, str]:
    """Each amount sent in a run of its own, with the same key: what the ledger answered."""
    out = {}
    for i, amount in enumerate(amounts):
        run = f"pay_{i}"
        cx.start_run(run, "pay a supplier")
        r = cx.intercept(run, "wire_money", {"amount": amount, "to": "ACME"}, key=key)
        out[repr(amount)] = str(r.status)
    return out


def test_the_documented_rule_is_a_numeric_condition() -> None:
    (rule, _) = parse_rules(docs_rules(), "operators.md")
    assert rule.action_type == "wire_money" and rule.match == ()
    assert [(".".join(p), [(c.op, c.text) for c in t]) for p, t in rule.when] == [
        ("amount", [(">=", "10000")])
    ]


def test_every_spelling_of_a_large_amount_waits_for_a_person(
    store_factory: StoreFactory, work: Path
) -> None:
    cx = agent(store_factory, work)
    # They are one action to the ledger (same key, same run): so one decision for all.
    ids = {cx.ledger.identity("r", "wire_money", KEY, {"amount": a}).action_id for a in LARGE}
    assert len(ids) == 1
    got = statuses(cx, LARGE)
    assert got == {repr(a): "awaiting_approval" for a in LARGE}
    assert len(cx.approvals()) == len(LARGE) and cx.actions("pay_0") == []


def test_every_spelling_of_a_smaller_amount_proceeds_without_one(
    store_factory: StoreFactory, work: Path
) -> None:
    """The control: the rule tells amounts apart, it does not stop every transfer."""
    cx = agent(store_factory, work)
    assert statuses(cx, SMALL) == {repr(a): "started" for a in SMALL}
    assert cx.approvals() == []


def test_an_amount_that_is_not_a_number_waits_rather_than_escape_by_its_spelling(
    store_factory: StoreFactory, work: Path
) -> None:
    cx = agent(store_factory, work)
    assert statuses(cx, UNREADABLE) == {repr(a): "awaiting_approval" for a in UNREADABLE}


def test_a_respelled_repeat_of_a_waiting_action_waits_too(
    store_factory: StoreFactory, work: Path
) -> None:
    """The agent asks with 50000, then tries the same transfer (same key) spelled anew."""
    cx = agent(store_factory, work)
    cx.start_run("pay", "pay a supplier")
    for amount in LARGE:
        r = cx.intercept("pay", "wire_money", {"amount": amount, "to": "ACME"}, key=KEY)
        assert (r.proceed, r.status) == (False, "awaiting_approval"), amount
    assert cx.actions("pay") == []
    # without a key too: the canonical arguments are then the identity itself
    for amount in (50000, 50000.0, 5e4, " 50000", "5e4"):
        r = cx.intercept("pay", "wire_money", {"amount": amount, "to": "ACME"})
        assert r.status == "awaiting_approval", amount
    assert cx.verify("pay").ok


def test_an_old_regex_rule_judges_the_canonical_arguments(store_factory: StoreFactory) -> None:
    """``^[0-9]{5,}$`` (the example this page used to show) saw the raw text: ``50000.0``
    was ``50000.0`` to it, and proceeded without a person."""
    rules = ApprovalRules(
        rules=parse_rules(
            '[[approval]]\naction_type = "wire_money"\nmatch = { amount = "^[0-9]{5,}$" }\n',
            "approvals.toml",
        )
    )
    cx = Continuum(store_factory.open(), origin=Origin.EXTERNAL_AGENT, approvals=rules)
    canonical_spellings = [50000, 50000.0, 5e4, " 50000", "50000 ", "50000"]
    assert statuses(cx, canonical_spellings) == {
        repr(a): "awaiting_approval" for a in canonical_spellings
    }
    cx2 = Continuum(store_factory.open(), origin=Origin.EXTERNAL_AGENT, approvals=rules)
    cx2.start_run("small", "pay")
    assert cx2.intercept("small", "wire_money", {"amount": 9999.0}, key=KEY).status == "started"

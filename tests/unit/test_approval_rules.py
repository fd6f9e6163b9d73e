"""Approval rules (``.continuum/approvals.toml``): what they gate, and how a bad file is refused."""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path

import pytest

from continuum.errors import UsageError
from continuum.ledger.approval_rules import (
    ApprovalRules,
    RuleFiles,
    load_rules,
    number_of,
    parse_rules,
    rule_paths,
)

RULES = """\
# wire transfers need a person

[[approval]]
action_type = "wire_money"
match = { amount = "^[0-9]{5,}$" }
description = "transfers of 10,000 or more"

[[approval]]
effect = "git_push"
match = { input.command = "--force" }
"""


def rules_in(tmp_path: Path, text: str) -> str:
    path = tmp_path / ".continuum" / "approvals.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_a_rule_matches_its_action_type_and_every_pattern() -> None:
    rules = ApprovalRules(rules=parse_rules(RULES, "a.toml"))
    assert rules.find("wire_money", {"amount": 25000, "to": "bob"}) is not None
    assert rules.find("wire_money", {"amount": 250, "to": "bob"}) is None
    assert rules.find("send_invoice", {"amount": 25000}) is None
    first = rules.find("wire_money", {"amount": "99999"})
    assert first is not None and "line 3" in first.describe() and "10,000" in first.describe()


def test_a_missing_field_counts_as_a_match_so_leaving_it_out_never_escapes() -> None:
    rules = ApprovalRules(rules=parse_rules(RULES, "a.toml"))
    assert rules.find("wire_money", {"to": "bob"}) is not None
    assert rules.find("wire_money", None) is not None


def test_an_effect_rule_gates_only_calls_through_that_host_effect() -> None:
    rules = ApprovalRules(rules=parse_rules(RULES, "a.toml"))
    forced = {"input": {"command": "git push --force"}}
    assert rules.find("git_push", forced, effect="git_push") is not None
    assert rules.find("git_push", forced) is None  # not through the host hook gate
    assert rules.find("git_push", {"input": {"command": "git push"}}, effect="git_push") is None


@pytest.mark.parametrize(
    "text,problem",
    [
        ("[[approval]]\naction_type = 'x'\ncolour = 'red'\n", "unknown field"),
        ("[[approval]]\nmatch = { a = 'b' }\n", "name what it gates"),
        (
            "[[approval]]\naction_type = 'x'\nmatch = { a = '(' }\n",
            "not a valid regular expression",
        ),
        ("[[approval]]\naction_type = 'x'\neffect = 'y'\n", "could never match"),
        ("[[approval]]\naction_type = 'x\u202e'\n", "bidi"),
        ("[approval]\naction_type = 'x'\n", "array of tables"),
        ("[[aproval]]\naction_type = 'x'\n", "unknown key"),
        ("[[approval]\n", "not valid TOML"),
        ("[[approval]]\naction_type = 7\n", "must be a string"),
        ("[[branch]]\nrisk = 'high'\n", "name the branches"),
        ("[[branch]]\nbranch = '('\nrisk = 'high'\n", "not a valid regular expression"),
        ("[[branch]]\nbranch = 'pay'\nrisk = 'maybe'\n", "risk must be one of low, high"),
        ("[[branch]]\nbranch = 'pay'\n", "risk must be one of low, high"),
        ("[[branch]]\nbranch = 'pay'\nrisk = 'high'\nwho = 1\n", "unknown field"),
        ("[[retry]]\naction_type = 'send'\n", "say one limit"),
        ("[[retry]]\nmax_attempts = 3\n", "needs the action_type"),
        ("[[retry]]\naction_type = 'send'\nrun_retries = 3\n", "leave out action_type"),
        ("[[retry]]\naction_type = 'send'\nmax_attempts = true\n", "whole number >= 1"),
        ("[[retry]]\nrun_retries = -1\n", "whole number >= 0"),
        ("[[retry]]\nrun_retries = 1\nmax_attempts = 2\naction_type = 'x'\n", "say one limit"),
    ],
)
def test_a_malformed_file_is_refused_naming_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(UsageError) as e:
        parse_rules(text, "/p/.continuum/approvals.toml")
    assert e.value.code == "approvals.bad_rules"
    assert problem in e.value.message and "/p/.continuum/approvals.toml" in e.value.message


def test_the_line_of_the_bad_rule_is_named() -> None:
    text = "[[approval]]\naction_type = 'a'\n\n[[approval]]\naction_type = 'b'\nbad = 1\n"
    with pytest.raises(UsageError) as e:
        parse_rules(text, "f.toml")
    assert "rule #2 (line 4)" in e.value.message


def test_the_files_of_the_working_directory_and_beside_the_store_both_apply(tmp_path: Path) -> None:
    work, data = tmp_path / "work", tmp_path / "data"
    work.mkdir()
    data.mkdir()
    rules_in(work, "[[approval]]\naction_type = 'wire_money'\n")
    rules_in(data, "[[approval]]\naction_type = 'delete_db'\n")
    paths = rule_paths(str(work), f"sqlite://{data / 'agent.db'}")
    rules = load_rules(paths)
    assert rules.find("wire_money", {}) is not None and rules.find("delete_db", {}) is not None
    assert len(rules.sources) == 2
    assert rule_paths(str(work), "postgresql://h/db") == [
        str(work / ".continuum" / "approvals.toml")
    ]


def test_rules_are_read_again_when_a_file_changes_and_a_bad_edit_fails_closed(
    tmp_path: Path,
) -> None:
    files = RuleFiles.around(str(tmp_path))
    assert files.current().find("wire_money", {}) is None  # no file: nothing gated
    path = rules_in(tmp_path, "[[approval]]\naction_type = 'wire_money'\n")
    assert files.current().find("wire_money", {}) is not None
    Path(path).write_text("[[approval]]\naction_type = 'wire_money'\nnope = 1\n")
    os.utime(path, ns=(1, 1))  # a different stamp even within one clock tick
    with pytest.raises(UsageError):
        files.current()
    with pytest.raises(UsageError):  # still refused: a bad file is never taken as "no rules"
        files.current()


# -- numeric conditions (issue 30, item 2) --------------------------------------------------

WHEN = '[[approval]]\naction_type = "wire_money"\nwhen = { amount = ">= 10000" }\n'


@pytest.mark.parametrize(
    "value,number",
    [
        (50000, "50000"),
        (50000.0, "50000.0"),
        (5e4, "50000.0"),
        (0.1, "0.1"),  # as written, not the float's binary neighbour
        (-12.5, "-12.5"),
        (10**40, str(10**40)),
        ("50000", "50000"),
        (" 5e4\n", "5E+4"),
        ("-0.5E-3", "-0.0005"),
        ("50,000", None),
        ("+5", None),
        ("05", None),
        (".5", None),
        ("NaN", None),
        ("Infinity", None),
        ("1_000", None),  # Python reads it; JSON does not
        ("\u0665", None),  # an Arabic-Indic digit: Python's int() reads it, JSON does not
        ("1" * 401, None),  # too long to read
        (True, None),
        (None, None),
        ([5], None),
        ({"v": 5}, None),
    ],
)
def test_a_value_is_a_number_only_as_json_spells_one(value: object, number: str | None) -> None:
    found = number_of(value)
    assert found == (None if number is None else Decimal(number))


@pytest.mark.parametrize(
    "condition,waits,proceeds",
    [
        (">= 10000", [10000, 10000.5, "1e5"], [9999, 9999.999]),
        ("> 10000", [10000.0001, "10001"], [10000, 10000.0, "1e4"]),
        ("<= -1", [-1, "-1.0", -5e9], [-0.999, 0]),
        ("< 0.1", [0.09, "0.0999"], [0.1, "0.1"]),
        ("== 0", [0, 0.0, "-0", "0e5"], [1e-9, 1]),
        ("!= 1e6", [999999, 1000001], [1000000, "1000000.0"]),
        (">=10_000", [10000], [9999]),
        ([">= 100", "< 200"], [100, 199.99], [99, 200, 1e9]),
    ],
)
def test_conditions_compare_numbers_exactly(
    condition: str | list[str], waits: list[object], proceeds: list[object]
) -> None:
    written = (
        f"{condition!r}"
        if isinstance(condition, str)
        else "[" + ", ".join(repr(c) for c in condition) + "]"
    )
    text = f'[[approval]]\naction_type = "t"\nwhen = {{ amount = {written} }}\n'
    rules = ApprovalRules(rules=parse_rules(text, "a.toml"))
    assert [v for v in waits if rules.find("t", {"amount": v}) is None] == []
    assert [v for v in proceeds if rules.find("t", {"amount": v}) is not None] == []


def test_a_missing_or_unreadable_amount_counts_as_a_match() -> None:
    rules = ApprovalRules(rules=parse_rules(WHEN, "a.toml"))
    for args in ({}, {"amount": None}, {"amount": "50,000"}, {"amount": [1]}, None, [1]):
        assert rules.find("wire_money", args) is not None, args


def test_a_condition_holding_on_the_canonical_arguments_is_enough() -> None:
    """What the ledger passes as ``canonical`` is judged too, and either view suffices."""
    rules = ApprovalRules(
        rules=parse_rules(
            '[[approval]]\naction_type = "t"\nmatch = { amount = "^[0-9]{5,}$" }\n', "a.toml"
        )
    )
    assert rules.find("t", {"amount": 50000.0}) is None  # the raw text is "50000.0"
    assert rules.find("t", {"amount": 50000.0}, canonical={"amount": 50000}) is not None
    assert rules.find("t", {"amount": 50000}, canonical={"amount": 1}) is not None  # as given
    assert rules.find("t", {"amount": 1.0}, canonical={"amount": 1}) is None  # the control


def test_a_numeric_rule_describes_its_condition() -> None:
    (rule,) = parse_rules(WHEN.replace('">= 10000"', '[">= 10_000", "< 1e6"]'), "a.toml")
    assert "amount >= 10_000 and amount < 1e6" in rule.describe()


@pytest.mark.parametrize(
    "when,problem",
    [
        ('{ amount = "at least 10000" }', "'at least 10000' is not a condition"),
        ('{ amount = "10000" }', "'10000' is not a condition"),
        ('{ amount = "= 10000" }', "is not a condition"),
        ('{ amount = ">= ten" }', "is not a condition"),
        ('{ amount = ">= 1e" }', "is not a condition"),
        ('{ amount = ">= 10000 or 5" }', "is not a condition"),
        ('{ amount = ">= NaN" }', "is not a condition"),
        ("{ amount = 10000 }", "when.amount must be a condition string"),
        ("{ amount = [] }", "when.amount must be a condition string"),
        ('{ amount = [">= 1", 2] }', "when.amount must be a condition string"),
        ('">= 10000"', "when must be a table"),
    ],
)
def test_a_bad_condition_is_refused_naming_the_rule_and_its_line(when: str, problem: str) -> None:
    text = f'[[approval]]\naction_type = "a"\n\n[[approval]]\naction_type = "b"\nwhen = {when}\n'
    with pytest.raises(UsageError) as e:
        parse_rules(text, "/p/.continuum/approvals.toml")
    assert e.value.code == "approvals.bad_rules" and e.value.hint
    message = e.value.message
    assert "/p/.continuum/approvals.toml" in message and "rule #2 (line 4)" in message
    assert problem in message and '">= 10000"' in message  # says how to write one


def test_branch_rules_declare_risk_and_gate_no_call() -> None:
    text = RULES + (
        '\n[[branch]]\nbranch = "pay_.*"\nrisk = "low"\n'
        '\n[[branch]]\nbranch = "pay_wire"\nrisk = "high"\ndescription = "money"\n'
    )
    rules = ApprovalRules(rules=parse_rules(text, "f.toml"), sources=("f.toml",))
    high = rules.branch_rule("pay_wire")
    assert high is not None and high.risk == "high"  # a high rule wins over an earlier low
    assert high.where == "f.toml branch rule #2 (line 16)"
    assert "branches /pay_wire/ are high risk (money)" in high.describe()
    low = rules.branch_rule("pay_card")
    assert low is not None and low.risk == "low"
    assert rules.branch_rule("read_page") is None and rules.branch_rule("pay") is None
    assert rules.find("pay_wire", {}) is None  # a branch rule is no approval rule
    assert any("branch rule #1" in line for line in rules.explain())


def test_a_vanished_files_high_risk_branch_rule_still_applies(tmp_path: Path) -> None:
    path = rules_in(tmp_path, '[[branch]]\nbranch = "wire_.*"\nrisk = "high"\n')
    files = RuleFiles((path,))
    rule = files.branch_rule("wire_acme")
    assert rule is not None and rule.risk == "high"
    os.remove(path)
    kept = files.branch_rule("wire_acme")  # gone: its risk stays until the file is back
    assert kept is not None and kept.risk == "high"
    assert files.branch_rule("read_page") is None

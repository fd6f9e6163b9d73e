"""Approval rules (``.continuum/approvals.toml``): what they gate, and how a bad file is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from continuum.approval_rules import ApprovalRules, RuleFiles, load_rules, parse_rules, rule_paths
from continuum.errors import UsageError

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

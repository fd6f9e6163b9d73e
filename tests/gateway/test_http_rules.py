"""The rules file of `continuum gateway http` (issue 23, item 3 and "Bad input"): what a
rule matches, how the key of a request is made, and a malformed file or an unsafe listen
address refusing to start, naming the rule and its line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from continuum.errors import UsageError
from continuum.gateway.http_rules import MissingKey, effect_key, parse_http_rules

GOOD = """\
[[upstream]]
name = "payments"
url = "http://127.0.0.1:9000/v1"

[[effect]]
upstream = "payments"
method = "POST"
path = "/charges/(?P<charge>[^/]+)"
action_type = "charge"
key = "{charge}:{amount}:{currency}"

[[effect]]
upstream = "payments"
method = "DELETE"
path = "/charges/.*"
action_type = "refund"
replay = "reconcile"
"""


def test_a_rule_matches_method_and_path_in_order_and_names_its_groups() -> None:
    rules = parse_http_rules(GOOD, "rules.toml")
    found = rules.find("payments", "POST", "/charges/c-1")
    assert found is not None
    rule, groups = found
    assert rule.action_type == "charge" and groups == {"charge": "c-1"}
    assert rules.find("payments", "GET", "/charges/c-1") is None  # method POST only
    assert rules.find("payments", "POST", "/charges/c-1/x") is None  # full match
    delete = rules.find("payments", "DELETE", "/charges/c-1")
    assert delete is not None and delete[0].replay == "reconcile"
    assert rules.upstreams["payments"].target("/charges", "a=1") == (
        "http://127.0.0.1:9000/v1/charges?a=1"
    )


def test_a_key_comes_from_path_groups_then_query_then_body_and_the_header() -> None:
    rules = parse_http_rules(GOOD, "rules.toml")
    found = rules.find("payments", "POST", "/charges/c-1")
    assert found is not None
    rule, groups = found
    key = effect_key(rule, groups, {"currency": "EUR"}, {"amount": 5, "charge": "x"}, None)
    assert key == "c-1:5:EUR"  # the path's group wins over the body's field
    with pytest.raises(MissingKey) as missing:
        effect_key(rule, groups, {}, {"amount": 5}, None)
    assert missing.value.missing == "'currency'"
    delete = rules.find("payments", "DELETE", "/charges/c-1")
    assert delete is not None
    assert effect_key(delete[0], {}, {}, None, "idem-7") == "idem-7"
    with pytest.raises(MissingKey):
        effect_key(delete[0], {}, {}, None, None)  # no template and no Idempotency-Key


@pytest.mark.parametrize(
    ("text", "where", "problem"),
    [
        (
            GOOD + '\n[[effect]]\nupstream = "payments"\npath = "("\naction_type = "x"\n',
            "effect #3 (line 19)",
            "not a valid regular expression",
        ),
        (
            GOOD + '\n[[effect]]\nupstream = "mail"\npath = "/x"\naction_type = "x"\n',
            "effect #3 (line 19)",
            "'mail' is not declared",
        ),
        (
            GOOD + '\n[[effect]]\nupstream = "payments"\npath = "/x"\n',
            "effect #3 (line 19)",
            "'action_type' is required",
        ),
        (
            GOOD
            + '\n[[effect]]\nupstream = "payments"\npath = "/x"\naction_type = "x"\nkey = "{a b}"\n',
            "effect #3 (line 19)",
            "not a placeholder",
        ),
        (
            GOOD
            + '\n[[effect]]\nupstream = "payments"\npath = "/x"\naction_type = "x"\nmatch = 1\n',
            "effect #3 (line 19)",
            "unknown field(s) 'match'",
        ),
        ('[[upstream]]\nname = "a"\nurl = "ftp://x"\n', "upstream #1 (line 1)", "http://"),
        (
            '[[upstream]]\nname = "a"\nurl = "http://x"\ntimeout = 0\n',
            "upstream #1 (line 1)",
            "timeout",
        ),
        ('[[upstream]]\nname = "a/b"\nurl = "http://x"\n', "upstream #1 (line 1)", "name"),
        ("[upstream]\nname = 1\n", "top level", "array of tables"),
        ("proxy = true\n", "top level", "unknown key(s) 'proxy'"),
        ("[[upstream]\n", "not valid TOML", ""),
    ],
)
def test_a_malformed_rules_file_is_refused_naming_the_rule_and_its_line(
    text: str, where: str, problem: str
) -> None:
    with pytest.raises(UsageError) as e:
        parse_http_rules(text, "rules.toml")
    assert e.value.code == "gateway.bad_rules"
    assert f"rules.toml: {where}: " in e.value.message and problem in e.value.message


def _gateway(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "continuum", "gateway", "http", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_gateway_refuses_to_start_on_a_malformed_rules_file(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(GOOD + '\n[[effect]]\nupstream = "payments"\npath = "/x"\n')
    done = _gateway("--listen", "127.0.0.1:0", "--rules", str(rules), "--db", str(tmp_path / "d"))
    assert done.returncode == 1, done
    assert "gateway.bad_rules" in done.stderr or "effect #3 (line 19)" in done.stderr
    assert "effect #3 (line 19)" in done.stderr and "'action_type' is required" in done.stderr
    assert not (tmp_path / "d").exists()  # refused before anything was opened


def test_the_gateway_refuses_to_listen_off_loopback_without_tls(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(GOOD)
    done = _gateway("--listen", "0.0.0.0:0", "--rules", str(rules), "--db", str(tmp_path / "d"))
    assert done.returncode == 1 and "TLS is off" in done.stderr, done

"""The gateway's rules file and tool-definition pins, in process (no upstream)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from continuum.errors import UsageError
from continuum.gateway.pins import Pins, tool_digest
from continuum.gateway.rules import load_rules, parse_rules, render_key
from continuum.gateway.upstream import upstream_name

RULES = """\
run = "billing"
read_only = ["read_.*"]

[[effect]]
tool = "send_.*"
match = { currency = "EUR|USD" }
action_type = "send_invoice"
key = "invoice:{invoice_id}"
replay = "reconcile"
"""


def test_the_first_matching_effect_decides_and_others_pass() -> None:
    rules = parse_rules(RULES, "gateway.toml")
    assert rules.run == "billing" and rules.is_read_only("read_balance")
    rule = rules.find("send_invoice", {"invoice_id": "INV-1", "currency": "EUR"})
    assert rule is not None and rule.replay == "reconcile" and rule.line == 4
    assert render_key(rule, "send_invoice", {"invoice_id": "INV-1"}) == "invoice:INV-1"
    assert rules.find("send_invoice", {"invoice_id": "INV-1", "currency": "GBP"}) is None
    assert rules.find("resend_invoice", {"currency": "EUR"}) is None  # full match on the name


def test_a_hostile_or_long_key_is_escaped_and_shortened_as_the_hooks_do() -> None:
    import hashlib

    rule = parse_rules(RULES, "gateway.toml").effects[0]
    hostile = "INV-1\u202e\x1b[31m\n  next"
    assert render_key(rule, "send_invoice", {"invoice_id": hostile}) == (
        "invoice:INV-1\\u202e\\u001b[31m next"
    )
    long = "x" * 300
    whole = f"invoice:{long}"
    expected = f"{whole[:176]}... #{hashlib.sha256(whole.encode()).hexdigest()[:16]}"
    assert render_key(rule, "send_invoice", {"invoice_id": long}) == expected


def test_a_key_argument_the_call_lacks_refuses_the_call() -> None:
    rule = parse_rules(RULES, "gateway.toml").effects[0]
    with pytest.raises(UsageError) as e:
        render_key(rule, "send_invoice", {"currency": "EUR"})
    assert e.value.code == "gateway.missing_argument"
    assert "'invoice_id'" in e.value.message and "effect #1 (line 4)" in e.value.message
    with pytest.raises(UsageError) as none:  # a null argument is no value either
        render_key(rule, "send_invoice", {"invoice_id": None})
    assert none.value.code == "gateway.missing_argument"


def test_a_key_takes_literal_braces_and_the_tool_s_name() -> None:
    rules = parse_rules(
        '[[effect]]\ntool = "send_.*"\naction_type = "send"\nkey = "{{x}}:{tool_name}:{n}"\n',
        "gateway.toml",
    )
    rule = rules.effects[0]
    assert render_key(rule, "send_mail", {"n": 7}) == "{x}:send_mail:7"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (RULES + '\n[[effect]]\ntool = "x"\naction_type = "x"\n', "effect #2 (line 11)"),
        (RULES + '\n[[effect]]\ntool = "("\naction_type = "x"\nkey = "k"\n', "effect #2 (line 11)"),
        (RULES + '\n[[effect]]\ntool = "x"\naction_type = "x"\nkey = "{a b}"\n', "line 11"),
        (RULES.replace('"reconcile"', '"sometimes"'), "effect #1 (line 4)"),
        ('read_only = "read_.*"\n', "read_only (line 1)"),
        ("colour = 1\n", "top level"),
        ("[[effect]\n", "not valid TOML"),
        (
            RULES + '\n[[effect]]\ntool = "x"\naction_type = "x"\nkey = "k"\nprobe = "{a b}"\n',
            "probe",
        ),
        (RULES + '\n[[effect]]\ntool = "x"\naction_type = "x"\nkey = "k"\nprobe = " "\n', "probe"),
    ],
)
def test_a_malformed_rules_file_is_refused_naming_the_rule_and_line(text: str, where: str) -> None:
    with pytest.raises(UsageError) as e:
        parse_rules(text, "gateway.toml")
    assert e.value.code == "gateway.bad_rules" and where in e.value.message


def test_an_absent_default_rules_file_records_nothing_but_a_named_one_must_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_rules(None).effects == ()
    with pytest.raises(UsageError) as e:
        load_rules(tmp_path / "missing.toml")
    assert e.value.code == "gateway.bad_rules"


def test_new_tools_are_pinned_on_first_sight_and_a_change_waits_for_acceptance(
    tmp_path: Path,
) -> None:
    path = tmp_path / "pins.json"
    pins = Pins.load(path)
    first = pins.judge("inv", [("send", "Send.", {"type": "object"}), ("read", "Read.", {})])
    assert first.pinned_now == ["send", "read"] and not first.changed
    pins.save()
    again = Pins.load(path).judge("inv", [("send", "Send. And more.", {"type": "object"})])
    assert again.exposed == [] and set(again.changed) == {"send"}
    pins = Pins.load(path)
    pins.judge("inv", [("send", "Send. And more.", {"type": "object"})])
    pins.save()
    [pending] = Pins.load(path).pending()
    assert pending["old_sha256"] == tool_digest("send", "Send.", {"type": "object"})
    pins = Pins.load(path)
    [accepted] = pins.accept("inv", "send")
    pins.save()
    assert accepted["description"] == "Send. And more."
    later = Pins.load(path).judge("inv", [("send", "Send. And more.", {"type": "object"})])
    assert later.exposed == ["send"]
    assert json.loads(path.read_text())["servers"]["inv"]["pending"] == {}


def test_a_damaged_pins_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pins.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(UsageError) as e:
        Pins.load(path)
    assert e.value.code == "gateway.bad_pins"


@pytest.mark.parametrize(
    ("command", "name"),
    [
        (["python", "tests/gateway/mcp_upstream.py"], "mcp_upstream"),
        (["/usr/bin/python3.11", "-u", "server.py"], "server"),
        (["python", "-m", "billing.server"], "billing.server"),
        (["npx", "-y", "@modelcontextprotocol/server-memory"], "server-memory"),
        (["/opt/bin/mail-mcp", "--stdio"], "mail-mcp"),
    ],
)
def test_the_upstream_is_named_after_its_command(command: list[str], name: str) -> None:
    assert upstream_name(command) == name


@pytest.mark.parametrize("probe", ['grep -q "{invoice_id}" sent.log', "grep -q '{invoice_id}' x"])
def test_a_probe_placeholder_inside_quotes_is_refused(probe: str) -> None:
    """Inside quotes the shell quoting of a value does not hold: "$(cmd)" would run."""
    quoted = "'''" + probe + "'''"  # a TOML multi-line literal: the probe as written
    text = RULES + f'\n[[effect]]\ntool = "x"\naction_type = "x"\nkey = "k"\nprobe = {quoted}\n'
    with pytest.raises(UsageError) as e:
        parse_rules(text, "g.toml")
    assert e.value.code == "gateway.bad_rules" and "inside quotes" in e.value.message

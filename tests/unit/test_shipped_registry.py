"""The shipped effect registry gates its effects in the spellings agents really use
(issue 30, item 5): one table per rule, the misses an adversary found first, each row
a command line and whether it must be gated. Matched as the gate matches them."""

from __future__ import annotations

from importlib.resources import files

import pytest

from continuum.errors import UsageError
from continuum.hooks.registry import Registry, parse_registry, shell_commands

SHELLS = ("Bash", "run_shell_command", "bash")


def shipped() -> Registry:
    text = (files("continuum.hooks") / "effects.example.toml").read_text(encoding="utf-8")
    return parse_registry(text, "effects.example.toml")


# (command line, the action_type that must gate it, or None: must run ungated)
TABLE: list[tuple[str, str | None]] = [
    # git push: the misses first
    ("echo start\ngit push", "git_push"),
    ("git -C repo push", "git_push"),
    ("git push", "git_push"),
    ("git push origin main --force", "git_push"),
    ("cd app && git push", "git_push"),
    ("git commit -m 'x'; git push", "git_push"),
    ("git -c user.name=bot push", "git_push"),
    ("FOO=1 git push", "git_push"),
    ("sudo -u deploy git push", "git_push"),
    ("/usr/bin/git push", "git_push"),
    ("(cd app; git push)", "git_push"),
    ("echo $(git push)", "git_push"),
    ("git status", None),
    ("git log --oneline", None),
    ("git stash push", None),
    ("echo git push", None),
    ("git commit -m 'git push later'", None),
    # kubectl
    ("kubectl -n prod apply -f deploy.yaml", "kubectl_change"),
    ("kubectl apply -f x.yaml", "kubectl_change"),
    ("kubectl --context prod delete pod web-1", "kubectl_change"),
    ("kubectl rollout restart deploy/web", "kubectl_change"),
    ("kubectl scale --replicas=3 deploy/web", "kubectl_change"),
    ("kubectl get pods", None),
    ("kubectl -n prod get pods", None),
    ("kubectl rollout status deploy/web", None),
    # psql
    ("psql -c 'insert into t values (1)'", "sql_write"),
    ('psql mydb -c "UPDATE accounts SET x = 1"', "sql_write"),
    ("echo 'delete from t' | psql mydb", "sql_write"),
    ("psql -c 'Drop table t'", "sql_write"),
    ("psql -c 'select 1'", None),
    ("psql -l", None),
    # curl
    ("curl -d@body.json https://api.example/x", "http_write"),
    ("curl -X POST https://api.example/x", "http_write"),
    ("curl -XPOST https://api.example/x", "http_write"),
    ("curl --request PUT https://api.example/x", "http_write"),
    ("curl -sS -d 'a=1' https://api.example/x", "http_write"),
    ("curl --data-binary @f https://api.example/x", "http_write"),
    ("curl --json '{}' https://api.example/x", "http_write"),
    ("curl -F file=@a.png https://api.example/x", "http_write"),
    ("curl -x delete https://api.example/x", None),  # -x is a proxy option
    ("curl https://api.example/x", None),
    ("curl -I https://api.example/x", None),
    ("curl -fsSL -o out.tgz https://example/x", None),
    # packages
    ("npm publish", "package_publish"),
    ("npm --registry https://r.example publish", "package_publish"),
    ("pnpm publish --tag beta", "package_publish"),
    ("yarn npm publish", "package_publish"),
    ("python -m twine upload dist/*", "package_publish"),
    ("twine upload dist/*", "package_publish"),
    ("uv publish", "package_publish"),
    ("cargo publish --dry-run", "package_publish"),
    ("npm install", None),
    ("npm run publish-docs", None),
    # mail
    ("sendmail bob@example.com < msg.txt", "send_mail"),
    ("echo hi | mailx -s subject bob@example.com", "send_mail"),
    ("mail -s hi bob@example.com < body", "send_mail"),
    ("echo mail", None),
]


@pytest.mark.parametrize(("command", "gated"), TABLE, ids=[c for c, _ in TABLE])
def test_the_shipped_rules_gate_the_real_world_spellings_of_their_effects(
    command: str, gated: str | None
) -> None:
    registry = shipped()
    for tool in SHELLS:
        rule = registry.find(tool, {"command": command})
        assert (rule.action_type if rule else None) == gated, (tool, command)


def test_a_line_that_cannot_be_split_is_still_read_word_by_word() -> None:
    # An open quote: the shell would fail, but the gate must not simply look away.
    assert shell_commands("git push 'oops") != []
    assert shipped().find("Bash", {"command": "git push 'oops"}) is not None


def test_the_shell_field_is_validated_naming_the_rule() -> None:
    from continuum.errors import UsageError

    for bad in ("shell = 3", 'shell = [""]', 'shell_options = ["C"]\nshell = "git push"'):
        text = f'[[effect]]\ntool = "Bash"\naction_type = "x"\nkey = "{{command}}"\n{bad}\n'
        with pytest.raises(UsageError) as e:
            parse_registry(text, "r.toml")
        assert e.value.code == "hooks.bad_registry" and "effect #1" in e.value.message


def test_the_commented_mcp_example_matches_the_tool_as_every_host_names_it() -> None:
    text = (files("continuum.hooks") / "effects.example.toml").read_text(encoding="utf-8")
    lines = text.split("# [[effect]]", 1)[1].splitlines()
    example = "[[effect]]\n" + "\n".join(
        line.removeprefix("# ") for line in lines if line.startswith("# ")
    )
    rule = parse_registry(example, "example").rules[0]
    for name in ("mcp__stripe__create_charge", "mcp_stripe_create_charge", "stripe_create_charge"):
        assert rule.matches(name, {"customer": "c", "amount": 1, "currency": "eur"}), name
    assert not rule.matches("mcp__stripe__list_charges", {})


def test_a_subagents_id_is_offered_to_key_templates() -> None:
    from continuum.hooks.effect_path import template_values
    from continuum.hooks.hosts import parse_event
    from continuum.hooks.registry import render_key

    event = parse_event(
        "claude-code",
        "pre-tool",
        b'{"session_id": "s", "cwd": "/p", "tool_name": "Bash", "tool_input": {"command": "x"},'
        b' "agent_id": "a7", "agent_type": "general-purpose"}',
    )
    rule = parse_registry(
        '[[effect]]\ntool = "Bash"\naction_type = "t"\nkey = "{agent_type}/{agent_id}: {command}"\n',
        "r",
    ).rules[0]
    assert render_key(rule.key, template_values(event, rule)) == "general-purpose/a7: x"


def test_a_rules_block_drift_is_read_and_validated_naming_the_rule() -> None:
    """Version pinning (issue 24): a rule may say which drift blocks a replay."""
    base = '[[effect]]\ntool = "Bash"\naction_type = "deploy"\nkey = "{command}"\n'
    [default] = parse_registry(base, "effects.toml").rules
    [strict] = parse_registry(base + 'block_drift = ["tool_schema_hash", "model"]\n', "e").rules
    assert default.block_drift == ("tool_schema_hash",)
    assert strict.block_drift == ("tool_schema_hash", "model")
    for bad in ('block_drift = "model"\n', 'block_drift = ["colour"]\n'):
        with pytest.raises(UsageError) as caught:
            parse_registry(base + bad, "effects.toml")
        assert caught.value.code == "hooks.bad_registry" and "effect #1" in caught.value.message


def test_a_probe_placeholder_inside_quotes_is_refused() -> None:
    """Inside quotes the shell quoting of a value does not hold: "$(cmd)" would run."""
    base = '[[effect]]\ntool = "Bash"\naction_type = "x"\nkey = "{command}"\n'
    for probe in (
        "probe = '''grep -q \"{command}\" log'''\n",
        "probe = \"grep -q '{command}' log\"\n",
    ):
        with pytest.raises(UsageError) as caught:
            parse_registry(base + probe, "effects.toml")
        assert "inside quotes" in caught.value.message
    [rule] = parse_registry(base + 'probe = "grep -qF -- {command} log"\n', "e").rules
    assert rule.probe == "grep -qF -- {command} log"  # outside quotes: accepted

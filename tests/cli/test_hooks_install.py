"""`continuum hooks install|remove|effects`: host hook settings merged safely, and the
effect registry explained. `continuum hook` passes through to the hooks' entry point."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from continuum.hooks.install import (
    EVENTS,
    SETTINGS_PATHS,
    config_text,
    installed,
    is_ours,
    removed,
)
from tests.cli.conftest import Result

CLI = Callable[..., Result]
EXAMPLE = (
    Path(__file__).resolve().parents[2] / "src" / "continuum" / "hooks" / "effects.example.toml"
).read_text(encoding="utf-8")
LIFECYCLE = {"SessionStart", "PreCompact", "PreCompress", "SubagentStart", "SubagentStop"}
HOSTS = ["claude-code", "gemini", "codex"]

# A hook of ours as an earlier install (another run, another store) would have written it.
OLD_OURS = {
    "type": "command",
    "timeout": 60,
    "command": "'/old/venv/bin/continuum' hook pre-tool --host x --db /old.db --run old",
}
FOREIGN_HOOK = {"type": "command", "command": "./scripts/lint.sh", "timeout": 5}
PRE_EVENT = {"claude-code": "PreToolUse", "gemini": "BeforeTool", "codex": "PreToolUse"}
OTHER_EVENT = {"claude-code": "Notification", "gemini": "BeforeAgent", "codex": "Stop"}


def project(tmp_path: Path, name: str = "proj") -> Path:
    path = tmp_path / name
    path.mkdir()
    return path


def install(cli: CLI, host: str, where: Path, *args: str) -> Result:
    return cli("--json", "hooks", "install", "--client", host, "--dir", str(where), *args)


def settings_of(where: Path, host: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((where / SETTINGS_PATHS[host]).read_text(encoding="utf-8"))
    return data


def foreign_config(host: str) -> dict[str, Any]:
    """Settings someone else wrote: keys around "hooks", a foreign group in the event we
    hook before tool calls, and an event we never touch."""
    return {
        "model": "x",
        "hooks": {
            OTHER_EVENT[host]: [{"hooks": [{"type": "command", "command": "notify-send hi"}]}],
            PRE_EVENT[host]: [{"matcher": "Bash", "hooks": [FOREIGN_HOOK]}],
        },
        "permissions": {"allow": ["Read"]},
    }


def option(words: list[str], name: str) -> str:
    return words[words.index(name) + 1]


@pytest.mark.parametrize("host", HOSTS)
def test_install_hooks_every_event_with_an_absolute_runnable_command(
    cli: CLI, db: str, tmp_path: Path, host: str
) -> None:
    where = project(tmp_path)
    r = install(cli, host, where, "--run", "run-7")
    assert r.code == 0, r.out + r.err
    assert r.json()["written"] is True and r.json()["run"] == "run-7"
    hooks = settings_of(where, host)["hooks"]
    assert list(hooks) == list(EVENTS[host])
    for event, kind in EVENTS[host].items():
        [group] = hooks[event]
        if event in LIFECYCLE:
            assert "matcher" not in group  # Gemini compares a lifecycle matcher exactly
        else:
            assert group["matcher"] == "*"
        [hook] = group["hooks"]
        assert hook["type"] == "command"
        assert hook["timeout"] == (60000 if host == "gemini" else 60)
        if host == "gemini":
            assert hook["name"] == f"continuum-{kind}"
        words = shlex.split(hook["command"])
        assert Path(words[0]).is_absolute() and Path(words[0]).exists()
        assert words[words.index("hook") + 1] == kind
        assert option(words, "--host") == host
        assert option(words, "--db") == str(Path(db).absolute())
        assert option(words, "--run") == "run-7"
        assert option(words, "--project") == str(where)


def test_claude_code_also_hooks_failed_tool_calls_and_the_others_cannot(
    cli: CLI, tmp_path: Path
) -> None:
    for host in HOSTS:
        where = project(tmp_path, host)
        assert install(cli, host, where).code == 0
        hooked = settings_of(where, host)["hooks"]
        assert ("PostToolUseFailure" in hooked) == (host == "claude-code")


@pytest.mark.parametrize("host", HOSTS)
def test_installing_twice_gives_a_byte_identical_file(cli: CLI, tmp_path: Path, host: str) -> None:
    where = project(tmp_path)
    path = where / SETTINGS_PATHS[host]
    path.parent.mkdir()
    path.write_text(json.dumps(foreign_config(host)))
    assert install(cli, host, where).code == 0
    first = path.read_bytes()
    assert install(cli, host, where).code == 0
    assert path.read_bytes() == first
    assert first.endswith(b"}\n") and b'\n  "hooks": {' in first  # 2-space indent


@pytest.mark.parametrize("host", HOSTS)
def test_installing_with_another_run_and_store_replaces_our_entries(
    cli: CLI, tmp_path: Path, host: str
) -> None:
    where = project(tmp_path)
    assert install(cli, host, where, "--run", "first").code == 0
    other_db = str(tmp_path / "other.db")
    assert (
        cli(
            "--json",
            "--db",
            other_db,
            "hooks",
            "install",
            "--client",
            host,
            "--dir",
            str(where),
            "--run",
            "second",
        ).code
        == 0
    )
    for groups in settings_of(where, host)["hooks"].values():
        [group] = groups
        [hook] = group["hooks"]
        words = shlex.split(hook["command"])
        assert option(words, "--run") == "second" and option(words, "--db") == other_db


@pytest.mark.parametrize("host", HOSTS)
def test_foreign_hooks_and_settings_survive_install_and_remove_in_order(
    cli: CLI, tmp_path: Path, host: str
) -> None:
    where = project(tmp_path)
    path = where / SETTINGS_PATHS[host]
    path.parent.mkdir()
    foreign = foreign_config(host)
    # An earlier hook of ours inside a foreign group: the group keeps its own hook.
    mixed = json.loads(json.dumps(foreign))
    mixed["hooks"][PRE_EVENT[host]][0]["hooks"].append(OLD_OURS)
    path.write_text(json.dumps(mixed))

    assert install(cli, host, where).code == 0
    after = settings_of(where, host)
    assert list(after) == ["model", "hooks", "permissions"]
    assert after["model"] == "x" and after["permissions"] == {"allow": ["Read"]}
    assert list(after["hooks"])[:2] == [OTHER_EVENT[host], PRE_EVENT[host]]
    assert after["hooks"][OTHER_EVENT[host]] == foreign["hooks"][OTHER_EVENT[host]]
    foreign_group, ours = after["hooks"][PRE_EVENT[host]]
    assert foreign_group == {"matcher": "Bash", "hooks": [FOREIGN_HOOK]}
    assert ours["matcher"] == "*" and is_ours(ours["hooks"][0]["command"])

    r = cli("--json", "hooks", "remove", "--client", host, "--dir", str(where))
    assert r.code == 0 and r.json()["removed"] == len(EVENTS[host])
    assert path.read_text(encoding="utf-8") == config_text(foreign)


@pytest.mark.parametrize("host", HOSTS)
def test_remove_after_a_fresh_install_leaves_an_empty_object(
    cli: CLI, tmp_path: Path, host: str
) -> None:
    where = project(tmp_path)
    assert install(cli, host, where).code == 0
    r = cli("hooks", "remove", "--client", host, "--dir", str(where))
    assert r.code == 0 and f"removed {len(EVENTS[host])} continuum hook entries" in r.out
    assert settings_of(where, host) == {}


def test_remove_without_a_settings_file_has_nothing_to_remove(cli: CLI, tmp_path: Path) -> None:
    where = project(tmp_path)
    r = cli("hooks", "remove", "--client", "codex", "--dir", str(where))
    assert r.code == 0 and "nothing to remove" in r.out
    assert not (where / ".codex").exists()


def test_remove_without_hooks_of_ours_leaves_the_file_byte_identical(
    cli: CLI, tmp_path: Path
) -> None:
    where = project(tmp_path)
    path = where / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text('{"hooks":{"Stop":[]},"x":1}')
    r = cli("--json", "hooks", "remove", "--client", "claude-code", "--dir", str(where))
    assert r.code == 0 and r.json()["removed"] == 0 and r.json()["written"] is False
    assert path.read_text() == '{"hooks":{"Stop":[]},"x":1}'


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "[1, 2]",
        '"text"',
        '{"hooks": []}',
        '{"hooks": {"PreToolUse": {"matcher": "*"}}}',
        '{\n  // a comment\n  "hooks": {}\n}',
        b"\xff\xfe{}",
    ],
    ids=["invalid", "array", "string", "hooks-array", "event-object", "comment", "not-utf8"],
)
@pytest.mark.parametrize("command", ["install", "remove"])
def test_a_settings_file_we_cannot_merge_into_is_refused_and_left_untouched(
    cli: CLI, tmp_path: Path, host: str, content: str | bytes, command: str
) -> None:
    where = project(tmp_path)
    path = where / SETTINGS_PATHS[host]
    path.parent.mkdir()
    raw = content if isinstance(content, bytes) else content.encode()
    path.write_bytes(raw)
    r = cli("--json", "hooks", command, "--client", host, "--dir", str(where))
    assert r.code == 1, r.out
    error = r.json()["error"]
    assert error["code"] == "usage.bad_config_file"
    assert str(path) in error["message"]
    assert path.read_bytes() == raw
    assert os.listdir(path.parent) == [path.name]  # no temporary file left behind
    if b"//" in raw:
        assert "--print" in error["hint"] and "comments" in error["message"]


@pytest.mark.parametrize("host", HOSTS)
def test_install_print_writes_nothing(cli: CLI, tmp_path: Path, host: str) -> None:
    where = project(tmp_path)
    r = cli("hooks", "install", "--client", host, "--dir", str(where), "--print")
    assert r.code == 0, r.err
    assert list(json.loads(r.out)["hooks"]) == list(EVENTS[host])
    assert "would copy the example effect registry" in r.err
    assert os.listdir(where) == []


def test_remove_print_writes_nothing(cli: CLI, tmp_path: Path) -> None:
    where = project(tmp_path)
    assert install(cli, "gemini", where).code == 0
    before = (where / ".gemini" / "settings.json").read_bytes()
    r = cli("hooks", "remove", "--client", "gemini", "--dir", str(where), "--print")
    assert r.code == 0 and json.loads(r.out) == {}
    assert (where / ".gemini" / "settings.json").read_bytes() == before


def test_install_copies_the_example_registry_only_when_the_project_has_none(
    cli: CLI, tmp_path: Path
) -> None:
    where = project(tmp_path)
    registry = where / ".continuum" / "effects.toml"
    r = install(cli, "claude-code", where)
    assert r.json()["registry"]["example_copied"] is True and r.json()["registry"]["rules"] == 6
    assert registry.read_text(encoding="utf-8") == EXAMPLE

    mine = '[[effect]]\ntool = "Bash"\naction_type = "x"\nkey = "{command}"\n'
    registry.write_text(mine)
    r = install(cli, "codex", where)
    assert r.json()["registry"]["example_copied"] is False and r.json()["registry"]["rules"] == 1
    assert registry.read_text() == mine


def test_install_text_names_the_file_events_run_store_rules_and_the_codex_trust_step(
    cli: CLI, db: str, tmp_path: Path
) -> None:
    where = project(tmp_path)
    r = cli("hooks", "install", "--client", "codex", "--dir", str(where), "--run", "r1")
    assert r.code == 0, r.err
    assert f'wrote "{where / ".codex" / "hooks.json"}"' in r.out
    assert "PreToolUse, PostToolUse, SessionStart, PreCompact" in r.out
    assert 'run "r1"' in r.out and str(Path(db).absolute()) in r.out
    assert "6 rule(s)" in r.out
    assert "trust" in r.out


def test_the_default_run_id_is_the_project_directory_name_made_valid(
    cli: CLI, tmp_path: Path
) -> None:
    where = project(tmp_path, "my project")
    r = install(cli, "claude-code", where)
    assert r.code == 0 and r.json()["run"] == "my-project"
    [group] = settings_of(where, "claude-code")["hooks"]["PreToolUse"]
    assert option(shlex.split(group["hooks"][0]["command"]), "--run") == "my-project"


def test_an_invalid_run_id_is_refused(cli: CLI, tmp_path: Path) -> None:
    where = project(tmp_path)
    r = install(cli, "claude-code", where, "--run", "two words")
    assert r.code == 1 and r.json()["error"]["code"] == "usage.bad_run_id"
    assert os.listdir(where) == []


def test_a_postgres_password_is_warned_about_and_kept_out_of_the_report(
    cli: CLI, tmp_path: Path
) -> None:
    where = project(tmp_path)
    url = "postgresql://app:s3cret@db.example/continuum"
    r = cli("--db", url, "hooks", "install", "--client", "claude-code", "--dir", str(where))
    assert r.code == 0 and "warning: the store URL holds a password" in r.out
    assert "s3cret" not in r.out
    path = where / ".claude" / "settings.json"
    assert "s3cret" in path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_an_existing_settings_file_keeps_its_permission_bits(cli: CLI, tmp_path: Path) -> None:
    where = project(tmp_path)
    path = where / ".gemini" / "settings.json"
    path.parent.mkdir()
    path.write_text("{}")
    path.chmod(0o640)
    assert install(cli, "gemini", where).code == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_effects_check_explains_the_example(cli: CLI, tmp_path: Path) -> None:
    where = project(tmp_path)
    (where / ".continuum").mkdir()
    (where / ".continuum" / "effects.toml").write_text(EXAMPLE)
    r = cli("hooks", "effects", "--check", "--dir", str(where))
    assert r.code == 0, r.err
    assert "6 rule(s)" in r.out and "effect #6" in r.out and "effect #7" not in r.out
    r = cli("--json", "hooks", "effects", "--check", "--dir", str(where))
    assert [rule["action_type"] for rule in r.json()["rules"]] == [
        "git_push",
        "package_publish",
        "http_write",
        "kubectl_change",
        "sql_write",
        "send_mail",
    ]


def test_effects_check_names_the_broken_rule(cli: CLI, tmp_path: Path) -> None:
    where = project(tmp_path)
    (where / ".continuum").mkdir()
    broken = EXAMPLE.replace(
        'action_type = "package_publish"', 'action_type = "package_publish"\nretries = 3'
    )
    assert broken != EXAMPLE
    (where / ".continuum" / "effects.toml").write_text(broken)
    r = cli("--json", "hooks", "effects", "--check", "--dir", str(where))
    assert r.code == 1
    assert r.json()["error"]["code"] == "hooks.bad_registry"
    assert "effect #2" in r.json()["error"]["message"]


def test_effects_without_a_registry_says_nothing_is_gated(cli: CLI, tmp_path: Path) -> None:
    r = cli("hooks", "effects", "--dir", str(project(tmp_path)))
    assert r.code == 0 and "no tool call is gated" in r.out


def test_effects_example_prints_the_shipped_example(cli: CLI) -> None:
    r = cli("hooks", "effects", "--example")
    assert r.code == 0 and r.out == EXAMPLE.rstrip("\n") + "\n"


@pytest.mark.parametrize(
    "command",
    [
        "/usr/local/bin/continuum hook pre-tool --host gemini --db /x.db --run r",
        "'/home/a b/.venv/bin/continuum' 'hook' 'session-start' --host codex",
        '"/opt/continuum/bin/continuum" --db /x.db hook post-tool-failure',
        "/usr/bin/python3 -m continuum hook pre-compact --host claude-code",
        "continuum --json --db 'a b.db' hook post-tool",
    ],
)
def test_our_commands_are_recognised_however_they_are_quoted(command: str) -> None:
    assert is_ours(command)


@pytest.mark.parametrize(
    "command",
    [
        "./scripts/lint.sh",
        "continuum-mcp --db /x.db",
        "continuum resume run-1",
        "/opt/continuum/bin/other hook pre-tool",
        "echo continuum hook pre-tool-check",
        "my-continuum hook pre-tool",
        "'unbalanced",
    ],
)
def test_foreign_commands_are_not_recognised_as_ours(command: str) -> None:
    assert not is_ours(command)


def test_installed_and_removed_do_not_change_their_argument() -> None:
    config = foreign_config("claude-code")
    snapshot = json.dumps(config)
    commands = {k: f"/bin/continuum hook {k}" for k in EVENTS["claude-code"].values()}
    merged = installed(config, "claude-code", commands)
    assert removed(merged, "claude-code") == config
    assert json.dumps(config) == snapshot


def test_hook_passes_its_arguments_to_the_entry_point(cli: CLI) -> None:
    pytest.importorskip("continuum.hooks.entry")
    r = cli("hook", "--help")
    assert r.code == 0 and "continuum hook KIND" in r.out


def test_an_installed_hook_command_runs_from_another_directory_with_a_bare_path(
    cli: CLI, tmp_path: Path
) -> None:
    # What a host does: `sh -c COMMAND` in its own cwd with its own PATH.
    pytest.importorskip("continuum.hooks.entry")
    where = project(tmp_path)
    assert install(cli, "claude-code", where).code == 0
    [group] = settings_of(where, "claude-code")["hooks"]["PreToolUse"]
    event = {
        "session_id": "s1",
        "cwd": str(where),
        "hook_event_name": "PreToolUse",
        "tool_name": "Read",
        "tool_input": {"file_path": str(where / "x")},
    }
    done = subprocess.run(
        ["/bin/sh", "-c", group["hooks"][0]["command"]],
        input=json.dumps(event),
        capture_output=True,
        text=True,
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""

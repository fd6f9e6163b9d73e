"""`continuum hooks try`: one shell call through the hooks as installed, without the host.

Every try here is the real CLI in a subprocess, which runs the hook commands that
`continuum hooks install` really wrote (subprocesses again), with the host's payloads on
stdin; what they recorded is read back from the store with the library.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from continuum.hooks.trial_host import verdict
from continuum.runtime.facade import Continuum
from continuum.store import open_store

BOUND = 180  # seconds: a ceiling on one CLI call, never waited out when all is well
REGISTRY = """\
[[effect]]
description = "appending to the outbox"
tool = "Bash|run_shell_command|bash"
match = { command = '>>\\s*outbox\\.txt' }
action_type = "outbox_append"
key = "{command}"
"""
EFFECT = "echo INV-1 >> outbox.txt"
ALL_HOSTS = ["claude-code", "gemini", "codex", "kilo"]
# What each host puts before the model for a denial (references/hooks.md's table).
DENIAL_PREFIX = {
    "claude-code": "PreToolUse:Bash hook error: [",
    "gemini": "Tool execution blocked: continuum: ",
    "codex": "Command blocked by PreToolUse hook: continuum: ",
    "kilo": "continuum: ",
}


@dataclass
class Proj:
    dir: Path
    db: Path

    def cli(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "CONTINUUM_DB"}
        return subprocess.run(
            [sys.executable, "-m", "continuum", *args],
            capture_output=True,
            text=True,
            cwd=cwd or self.dir.parent,
            env=env,
            timeout=BOUND,
            check=False,
        )

    def install(self, host: str) -> None:
        r = self.cli(
            "--db", str(self.db), "hooks", "install", "--client", host, "--dir", str(self.dir)
        )
        assert r.returncode == 0, r.stderr

    def try_json(self, host: str, command: str, *args: str) -> dict[str, Any]:
        r = self.cli(
            "--json", "hooks", "try", "--client", host, "--dir", str(self.dir), *args, command
        )
        assert r.returncode == 0, (r.stdout, r.stderr)
        data: dict[str, Any] = json.loads(r.stdout)
        return data

    def actions(self, run: str) -> list[Any]:
        with Continuum(open_store(str(self.db), create=False)) as rt:
            return rt.actions(run)

    def event_types(self, run: str) -> list[str]:
        with Continuum(open_store(str(self.db), create=False)) as rt:
            return [str(e.type) for e in rt.store.read_events(run)]

    def runs(self) -> list[str]:
        with Continuum(open_store(str(self.db), create=False)) as rt:
            return [r.run_id for r in rt.store.list_runs()]


def make_proj(tmp_path: Path) -> Proj:
    d = tmp_path / "proj"
    (d / ".continuum").mkdir(parents=True)
    (d / ".continuum" / "effects.toml").write_text(REGISTRY, encoding="utf-8")
    return Proj(d, tmp_path / "store.db")


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.mark.parametrize("host", ALL_HOSTS)
def test_try_records_intercept_and_complete_of_an_effect_and_a_repeat_is_refused(
    tmp_path: Path, host: str
) -> None:
    p = make_proj(tmp_path)
    p.install(host)

    first = p.try_json(host, EFFECT, "--run", "trial")

    assert first["decision"] == "allow"
    assert first["rule"]["action_type"] == "outbox_append"
    assert first["rule"]["key"] == EFFECT
    assert first["pre"][0]["exit_code"] == 0 and first["pre"][0]["model_reads"] is None
    assert "action_intercepted" in first["pre"][0]["recorded"]
    assert "action_completed" in first["post"][0]["recorded"]
    assert first["action_recorded"] == ["intercepted", "completed"]
    assert first["tool"]["performed"] == "simulated" and first["tool"]["exit_code"] == 0
    assert not (p.dir / "outbox.txt").exists()  # simulated: the command itself never ran
    # The store really holds it: one action, completed, under the rendered key.
    (action,) = p.actions("trial")
    assert str(action.status) == "completed"
    assert action.key == EFFECT and action.action_id == first["action"]["action_id"]
    assert action.arguments["session_id"] == first["call"]["session_id"]
    types = p.event_types("trial")
    assert types.count("action_intercepted") == 1 and types.count("action_completed") == 1

    repeat = p.try_json(host, EFFECT, "--run", "trial")

    assert repeat["decision"] == "deny"
    step = repeat["pre"][0]
    assert step["exit_code"] == 2
    assert step["model_reads"].startswith(DENIAL_PREFIX[host])
    assert "already happened" in step["reason"]
    assert step["recorded"] == [] and repeat["post"] == []
    assert repeat["tool"]["performed"] == "not_run"
    assert repeat["action_before"]["status"] == "completed"
    assert p.event_types("trial") == types  # the refusal wrote nothing
    assert [str(a.status) for a in p.actions("trial")] == ["completed"]


def test_try_defaults_to_a_scratch_run_and_leaves_the_installed_run_alone(tmp_path: Path) -> None:
    p = make_proj(tmp_path)
    p.install("claude-code")

    r = p.try_json("claude-code", EFFECT)

    assert r["scratch_run"] is True and r["run"].startswith("hooks-try-")
    assert r["installed_run"] == "proj"
    assert r["pre"][0]["installed_command"].count("--run proj") == 1
    assert f"--run {r['run']}" in r["pre"][0]["command"]
    assert p.runs() == [r["run"]]  # the installed run was never created
    assert [str(a.status) for a in p.actions(r["run"])] == ["completed"]


def test_try_of_a_command_no_rule_matches_is_allowed_and_writes_nothing(tmp_path: Path) -> None:
    p = make_proj(tmp_path)
    p.install("gemini")

    r = p.try_json("gemini", "ls -l")

    assert r["rule"] is None and r["decision"] == "allow"
    assert r["pre"][0]["recorded"] == [] and r["post"][0]["recorded"] == []
    assert r["action"] is None and r["action_recorded"] == []
    assert r["run_exists"] is False and r["store_exists"] is False
    assert not p.db.exists()  # the gate never opened the store
    text = p.cli("hooks", "try", "--client", "gemini", "--dir", str(p.dir), "ls -l")
    assert "rule: none of the 1 rule(s) matches" in text.stdout
    assert "): not created, no hook recorded anything (store " in text.stdout
    assert "see it:" not in text.stdout and not p.db.exists()


@pytest.mark.parametrize("installed", [None, "gemini"])
def test_try_without_the_hooks_installed_says_how_to_install_and_writes_nothing(
    tmp_path: Path, installed: str | None
) -> None:
    p = make_proj(tmp_path)
    if installed:
        p.install(installed)
    before = tree(tmp_path)

    r = p.cli("--json", "hooks", "try", "--client", "claude-code", EFFECT, cwd=p.dir)

    assert r.returncode == 1
    error = json.loads(r.stdout)["error"]
    assert error["code"] == "hooks.not_installed"
    assert "continuum hooks install --client claude-code" in error["hint"]
    assert error["details"]["installed_for"] == ([installed] if installed else [])
    assert tree(tmp_path) == before and not p.db.exists()


@pytest.mark.parametrize("host", ["claude-code", "codex"])
def test_try_with_a_failed_result_leaves_the_effect_unknown(tmp_path: Path, host: str) -> None:
    p = make_proj(tmp_path)
    p.install(host)

    r = p.try_json(host, EFFECT, "--run", "trial", "--result", "fail")

    assert r["tool"] == {
        "performed": "simulated",
        "result": "fail",
        "exit_code": 1,
        "output_chars": 0,
    }
    # Claude Code sends a failure to PostToolUseFailure; Codex sends PostToolUse, and its
    # hook reads the exit code from the transcript line the try wrote, as Codex does.
    kind = {"claude-code": "post-tool-failure", "codex": "post-tool"}[host]
    assert r["post"][0]["kind"] == kind
    assert r["action"]["status"] == "unknown"
    assert [str(a.status) for a in p.actions("trial")] == ["unknown"]


def test_try_execute_runs_the_command_once_and_the_gate_refuses_the_second(
    tmp_path: Path,
) -> None:
    p = make_proj(tmp_path)
    p.install("kilo")

    first = p.try_json("kilo", EFFECT, "--run", "trial", "--execute")
    second = p.try_json("kilo", EFFECT, "--run", "trial", "--execute")

    assert first["tool"]["performed"] == "executed" and first["action"]["status"] == "completed"
    assert second["decision"] == "deny" and second["tool"]["performed"] == "not_run"
    assert (p.dir / "outbox.txt").read_text(encoding="utf-8") == "INV-1\n"


def test_try_reports_an_unaccepted_registry_as_the_gate_refuses_it(tmp_path: Path) -> None:
    p = make_proj(tmp_path)
    p.install("codex")
    registry = p.dir / ".continuum" / "effects.toml"
    registry.write_text(REGISTRY + "# edited after it was accepted\n", encoding="utf-8")

    r = p.try_json("codex", "ls")

    assert r["registry"]["accepted"] is False
    assert r["decision"] == "deny"
    assert "continuum hooks accept" in r["pre"][0]["reason"]
    assert r["pre"][0]["model_reads"].endswith(". Command: ls")


def test_try_text_shows_the_decisions_with_the_command_escaped(tmp_path: Path) -> None:
    p = make_proj(tmp_path)
    p.install("claude-code")
    hostile = "echo '\x1b[2J\u202eowned' >> outbox.txt"

    r = p.cli("hooks", "try", "--client", "claude-code", hostile, cwd=p.dir)

    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\u202e" not in r.stdout
    assert "\\x1b[2J\\u202eowned" in r.stdout
    lines = r.stdout.splitlines()
    assert lines[1].startswith("call: Bash ")
    assert any(line.startswith("rule: effect #1 (line 1)") for line in lines)
    assert "  ALLOWED: exit 0, nothing printed: Claude Code runs the call" in lines
    assert any(line.startswith("tool: NOT run; its result simulated as success") for line in lines)
    assert any("this try intercepted, then completed" in line for line in lines)
    assert any(line.startswith('run "hooks-try-') and str(p.db) in line for line in lines)


def test_try_refuses_execute_together_with_a_simulated_result(tmp_path: Path) -> None:
    p = make_proj(tmp_path)
    p.install("claude-code")

    r = p.cli(
        "--json",
        "hooks",
        "try",
        "--client",
        "claude-code",
        "--execute",
        "--result",
        "fail",
        EFFECT,
        cwd=p.dir,
    )

    assert r.returncode == 1
    assert json.loads(r.stdout)["error"]["code"] == "usage.invalid"
    assert not p.db.exists() and not (p.dir / "outbox.txt").exists()


@pytest.mark.parametrize(
    ("host", "code", "stdout", "stderr", "allowed", "fail_open"),
    [
        ("claude-code", 0, "", "", True, False),
        ("claude-code", 2, "", "no", False, False),
        ("claude-code", 1, "", "boom", True, True),  # Claude Code fails open
        ("claude-code", None, "", "", True, True),  # a timeout too
        ("gemini", 2, "", "", True, True),  # exit 2 with nothing printed runs the tool
        ("gemini", 3, "no", "", False, False),
        ("codex", 2, "", "", True, True),  # Codex needs a reason on stderr to block
        ("codex", 0, '{"decision": "block", "reason": "no"}', "", False, False),
        ("kilo", 1, "", "boom", False, False),  # the plugin fails closed
        ("kilo", None, "", "", False, False),
    ],
)
def test_each_hosts_rule_for_a_pre_tool_answer(
    host: str, code: int | None, stdout: str, stderr: str, allowed: bool, fail_open: bool
) -> None:
    v = verdict(host, code, stdout, stderr, "/bin/continuum hook pre-tool", "ls")

    assert (v.allowed, v.fail_open) == (allowed, fail_open)
    assert (v.model_reads is None) == allowed

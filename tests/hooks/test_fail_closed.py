"""The gate fails closed (issue 11, item 5).

Claude Code lets a tool run when a PreToolUse hook exits with anything but 0 or 2, and
Gemini CLI and Codex block only on exit 2 with a reason on stderr. So for a call that
matches an effect rule, or that cannot be judged, every error must end in exit 2 with a
one-line reason: never exit 1, never an allow. Each case is driven through the installed
command by the host simulator (the host's own rules decide), except the injected
exception, which needs the process itself.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from continuum.hooks import entry
from tests.hooks.conftest import HOSTS, Project, make_project


def deny_reason(project: Project, **session: object) -> str:
    s = project.session("s1", [project.send("INV-1")], session_start=False, **session)  # type: ignore[arg-type]
    pre = s.pre(0)
    assert pre["blocked"] is True, pre
    assert pre["exits"] == [2], pre
    assert project.outbox() == []  # the effect never ran
    return str(pre["reason"])


def settings_command(project: Project, kind: str = "pre-tool") -> str:
    path = {
        "claude-code": ".claude/settings.json",
        "gemini": ".gemini/settings.json",
        "codex": ".codex/hooks.json",
    }[project.host]
    text = (project.dir / path).read_text(encoding="utf-8")
    return next(
        h["command"]
        for groups in json.loads(text)["hooks"].values()
        for g in groups
        for h in g["hooks"]
        if f"hook {kind}" in h["command"]
    )


def reinstall(project: Project, db: Path) -> None:
    project.db = db
    r = project.continuum(
        "hooks",
        "install",
        "--client",
        project.host,
        "--dir",
        str(project.dir),
        "--run",
        project.run,
    )
    assert r.returncode == 0, r.stderr


@pytest.fixture(params=HOSTS)
def host(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_a_store_in_a_missing_directory_refuses(tmp_path: Path, host: str) -> None:
    project = make_project(tmp_path, host)
    reinstall(project, tmp_path / "gone" / "store.db")
    reason = deny_reason(project)
    assert "store.missing_directory" in reason and not (tmp_path / "gone").exists()


def test_a_store_that_is_not_a_database_refuses_and_is_left_untouched(
    tmp_path: Path, host: str
) -> None:
    project = make_project(tmp_path, host)
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n", encoding="utf-8")
    reinstall(project, notes)
    assert "store.not_a_database" in deny_reason(project)
    assert notes.read_text(encoding="utf-8") == "not a database\n"


def test_a_locked_store_refuses_after_a_bounded_wait(tmp_path: Path, host: str) -> None:
    project = make_project(tmp_path, host)
    project.session("s0", [project.send("INV-0")], session_start=False)  # creates the store
    holder = apsw.Connection(str(project.db))
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock throughout
    try:
        reason = deny_reason_for(project, "INV-1", env={"CONTINUUM_HOOK_WAIT_MS": "300"})
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "store.busy" in reason


def deny_reason_for(project: Project, invoice: str, env: dict[str, str]) -> str:
    s = project.session("s1", [project.send(invoice)], session_start=False, env=env)
    pre = s.pre(0)
    assert pre["blocked"] is True and pre["exits"] == [2], pre
    assert invoice not in project.outbox()
    return str(pre["reason"])


@pytest.mark.parametrize(
    "broken",
    [
        "[[effect]]\ntool = 'Bash'\nkye = '{command}'\n",  # unknown field
        "[[effect]\n",  # not TOML
        "[[effect]]\ntool = '('\naction_type = 'x'\nkey = '{command}'\n",  # bad regex
    ],
)
def test_a_malformed_registry_refuses_every_call_but_reading(
    tmp_path: Path, host: str, broken: str
) -> None:
    project = make_project(tmp_path, host)
    (project.dir / ".continuum" / "effects.toml").write_text(broken, encoding="utf-8")
    assert "hooks.bad_registry" in deny_reason(project)
    # A plain command that no rule could name is refused too: nobody can tell.
    s = project.session(
        "s2", [{"tool": project.tool, "input": {"command": "echo hi"}}], session_start=False
    )
    assert s.pre(0)["blocked"] is True
    read = {"claude-code": "Read", "gemini": "read_file", "codex": None}[host]
    if read is not None:  # looking around stays possible while a person fixes it
        assert (
            run_hook(project, {"tool_name": read, "tool_input": {"file_path": "x"}}).returncode == 0
        )


def run_hook(
    project: Project, payload: dict[str, object] | bytes, kind: str = "pre-tool"
) -> subprocess.CompletedProcess[bytes]:
    data = (
        payload
        if isinstance(payload, bytes)
        else json.dumps({"session_id": "s", "cwd": str(project.dir), **payload}).encode()
    )
    return subprocess.run(
        ["sh", "-c", settings_command(project, kind)],
        input=data,
        capture_output=True,
        cwd=project.dir,
        env={"PATH": "/usr/bin:/bin"},
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "stdin",
    [
        b"",
        b"not json",
        b"[1, 2]",
        b'{"tool_name": 5}',
        b'{"tool_name": "Bash", "tool_input": "rm -rf /"}',
        b"\xff\xfe",
    ],
)
def test_malformed_stdin_refuses(tmp_path: Path, host: str, stdin: bytes) -> None:
    project = make_project(tmp_path, host)
    p = run_hook(project, stdin)
    assert p.returncode == 2 and p.stdout == b""
    assert b"hooks.bad_event" in p.stderr and len(p.stderr.splitlines()) == 1


@pytest.mark.parametrize("where", ["plain path", "full path"])
def test_an_unexpected_exception_in_the_gate_refuses(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    host: str,
    capsys: pytest.CaptureFixture[str],
    where: str,
) -> None:
    project = make_project(tmp_path, host)
    from continuum.hooks import effect_path, gate

    def broken(*args: object) -> int:
        raise RuntimeError("injected")

    if where == "plain path":
        monkeypatch.setattr(effect_path, "pre_tool", broken)
    else:  # the plain path hands the call over (as for a run not yet started)
        monkeypatch.setattr(effect_path, "pre_tool", lambda *args: None)
        monkeypatch.setattr(gate, "pre_tool", broken)
    event = {
        "session_id": "s",
        "cwd": str(project.dir),
        "tool_name": project.tool,
        "tool_input": {"command": "./send INV-1"},
    }
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(json.dumps(event).encode())))
    code = entry.main(
        [
            "pre-tool",
            "--host",
            host,
            "--db",
            str(project.db),
            "--run",
            "proj",
            "--project",
            str(project.dir),
        ]
    )
    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    assert "gate failed (RuntimeError: injected)" in out.err and out.err.count("\n") == 1


def test_bad_hook_arguments_refuse_a_pre_tool_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert entry.main(["pre-tool", "--host", "vscode", "--db", "x", "--run", "r"]) == 2
    assert entry.main(["pre-tool", "--db", "x"]) == 2
    assert "usage." in capsys.readouterr().err


def test_the_negative_control_without_the_gate_duplicates(tmp_path: Path) -> None:
    # The same crash with the registry emptied: the harness must see the duplicate the
    # gate exists to prevent.
    project = make_project(tmp_path, "claude-code", probe=False)
    (project.dir / ".continuum" / "effects.toml").write_text("", encoding="utf-8")
    # A person accepts the emptied registry (unaccepted, it would refuse every call).
    r = project.continuum(
        "hooks", "accept", "--dir", str(project.dir), "--run", project.run, "--yes"
    )
    assert r.returncode == 0, r.stderr
    project.session("s1", [project.send("INV-1")], die_after_effect=0)
    again = project.session("s2", [project.send("INV-1")])
    assert again.pre(0)["blocked"] is False
    assert project.outbox() == ["INV-1", "INV-1"]


def test_a_registered_call_with_input_nested_too_deep_is_refused_and_the_run_stays_readable(
    tmp_path: Path, host: str
) -> None:
    """Issue 30, item 1: the model's own tool input, nested past the one limit, used to be
    sealed into the log and break every later resume and briefing of the run."""
    project = make_project(tmp_path, host, probe=False)
    deep: object = "x"
    for _ in range(300):
        deep = {"a": deep}
    call = project.send("INV-1")
    call["input"] = {**call["input"], "extra": deep}
    s = project.session("s1", [call], session_start=False)
    step = s.pre(0)
    assert step["blocked"] is True and "usage.too_deep" in step["reason"], step
    assert project.outbox() == []
    # Control: the same call without it runs, and the run is read as before.
    assert project.session("s2", [project.send("INV-1")]).pre(0)["blocked"] is False
    r = project.continuum("resume", project.run, "--json")
    assert r.returncode in (0, 20), r.stdout + r.stderr
    assert project.session("s3", []).steps[0]["step"] == "session-start"

"""What the hooks observe without the model's help (issue 11, items 7-9).

File writes become evidence (path, size, sha256 as on disk), compared with the disk by
`continuum resume` and the session-start briefing; a session start with nothing to say
is silent; pre-compact records a checkpoint; and a call that matches no rule never loads
the store or the runtime.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from continuum.eventlog.events import EventType
from tests.hooks.conftest import Project, make_project


def write(project: Project, name: str, text: str) -> dict[str, object]:
    tool = {"claude-code": "Write", "gemini": "write_file"}[project.host]
    return {"tool": tool, "input": {"file_path": str(project.dir / name), "content": text}}


def test_file_writes_are_evidence_compared_with_the_disk(tmp_path: Path) -> None:
    for host in ("claude-code", "gemini"):
        project = make_project(tmp_path / host, host)
        s = project.session(
            "s1",
            [
                write(project, "a.py", "print(1)\n"),
                write(project, "b.py", "print(2)\n"),
                write(project, "c.py", "print(3)\n"),
            ],
        )
        assert [s.pre(i)["blocked"] for i in range(3)] == [False] * 3
        rt = project.runtime()
        try:
            evidence = rt.state(project.run).evidence
            a = evidence[f"file:{project.dir / 'a.py'}"]
            assert (a.path, a.size, a.provenance.origin) == (
                str(project.dir / "a.py"),
                9,
                "external_agent",
            )
            assert a.sha256 is not None and a.sha256.startswith("sha256:")
        finally:
            rt.close()
        (project.dir / "b.py").write_text("print('edited by hand')\n", encoding="utf-8")
        (project.dir / "c.py").unlink()
        r = project.continuum("--json", "resume", project.run)
        files = json.loads(r.stdout)["files"]
        assert files == {
            "verified": 1,
            "changed": [str(project.dir / "b.py")],
            "missing": [str(project.dir / "c.py")],
        }
        text = project.continuum("resume", project.run).stdout
        assert "1 as recorded, 1 changed since, 1 missing" in text
        nxt = project.session("s2", [])
        assert nxt.context is not None and "1 changed since, 1 missing" in nxt.context
        assert f'changed: "{project.dir / "b.py"}"' in nxt.context


def test_codex_patches_name_their_files(tmp_path: Path) -> None:
    from continuum.hooks.hosts import file_paths

    patch = (
        "*** Begin Patch\n*** Add File: new.py\n+x = 1\n*** Update File: old.py\n"
        "@@\n-a\n+b\n*** Delete File: gone.py\n*** Update File: a.py\n*** Move to: b.py\n"
        "*** End Patch\n"
    )
    assert file_paths("apply_patch", {"command": patch}) == ["new.py", "old.py", "a.py", "b.py"]
    assert file_paths("Bash", {"command": patch}) == []


def test_session_start_is_silent_without_a_run_or_anything_to_say(tmp_path: Path) -> None:
    project = make_project(tmp_path, "claude-code")
    s = project.session("s1", [])
    assert s.context is None and not project.db.exists()
    project.session("s2", [{"tool": "Bash", "input": {"command": "echo hi"}}])
    assert project.session("s3", []).context is None


def test_pre_compact_records_a_checkpoint(tmp_path: Path) -> None:
    project = make_project(tmp_path, "claude-code")
    project.session("s1", [project.send("INV-1")])
    config = json.loads((project.dir / ".claude" / "settings.json").read_text(encoding="utf-8"))
    [command] = [h["command"] for g in config["hooks"]["PreCompact"] for h in g["hooks"]]
    event = {
        "session_id": "s1",
        "cwd": str(project.dir),
        "hook_event_name": "PreCompact",
        "trigger": "auto",
        "custom_instructions": None,
    }
    p = subprocess.run(
        ["sh", "-c", command],
        input=json.dumps(event),
        capture_output=True,
        text=True,
        cwd=project.dir,
        env={"PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    rt = project.runtime()
    try:
        events = [e for e in rt.events(project.run) if e.type == EventType.CHECKPOINTED]
        assert len(events) == 1 and "compacted" in events[0].payload["reason"]
        assert rt.verify(project.run).ok
    finally:
        rt.close()


def _pre_compact(project: Any) -> None:
    config = json.loads((project.dir / ".claude" / "settings.json").read_text(encoding="utf-8"))
    [command] = [h["command"] for g in config["hooks"]["PreCompact"] for h in g["hooks"]]
    event = {"session_id": "s1", "cwd": str(project.dir), "hook_event_name": "PreCompact"}
    p = subprocess.run(
        ["sh", "-c", command],
        input=json.dumps(event),
        capture_output=True,
        text=True,
        cwd=project.dir,
        env={"PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert p.returncode == 0, p.stderr


def _checkpoints(project: Any) -> int:
    rt = project.runtime()
    try:
        return sum(1 for e in rt.events(project.run) if e.type == EventType.CHECKPOINTED)
    finally:
        rt.close()


def test_pre_compact_checkpoints_only_what_is_new_and_looks_at_most_once_a_minute(
    tmp_path: Path,
) -> None:
    """Gemini CLI runs PreCompress before every model request: a checkpoint each time
    would record nothing new. Nothing new since the last checkpoint: none; something new
    but looked at within the interval: none; once the interval passed: one."""
    from continuum.hooks.args import PRE_COMPACT_INTERVAL, pre_compact_stamp

    project = make_project(tmp_path, "claude-code")
    project.session("s1", [project.send("INV-1")])
    _pre_compact(project)
    assert _checkpoints(project) == 1
    stamp = Path(pre_compact_stamp(str(project.dir), project.run))
    assert stamp.exists()
    old = stamp.stat().st_mtime - PRE_COMPACT_INTERVAL - 1
    os.utime(stamp, (old, old))
    _pre_compact(project)  # nothing new since the checkpoint: none
    assert _checkpoints(project) == 1
    project.session("s2", [project.send("INV-2")])
    _pre_compact(project)  # new, but looked at a moment ago: none
    assert _checkpoints(project) == 1
    os.utime(stamp, (old, old))  # control: once the interval passed, the new work is sealed
    _pre_compact(project)
    assert _checkpoints(project) == 2


LEAN = """
import io, json, sys
from continuum.hooks.entry import main
sys.stdin = io.TextIOWrapper(io.BytesIO(json.dumps({
    "session_id": "s", "cwd": sys.argv[1], "tool_name": "Bash",
    "tool_input": {"command": "echo hello"}}).encode()))
code = main(["pre-tool", "--host", "claude-code", "--db", sys.argv[2], "--run", "r",
             "--project", sys.argv[1]])
heavy = sorted(m for m in ("pydantic", "apsw", "structlog", "click", "mcp",
                           "continuum.runtime.facade", "continuum.store", "continuum.hooks.gate")
               if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy}))
"""


def test_a_call_that_matches_no_rule_loads_neither_store_nor_runtime(tmp_path: Path) -> None:
    project = make_project(tmp_path, "claude-code")
    db = tmp_path / "missing-dir" / "store.db"
    p = subprocess.run(
        [sys.executable, "-c", LEAN, str(project.dir), str(db)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(p.stdout) == {"code": 0, "heavy": []}
    assert not db.parent.exists()
    # Control: a matching call does load them (the check above can fail).
    control = LEAN.replace("echo hello", "./send INV-1")
    p = subprocess.run(
        [sys.executable, "-c", control, str(project.dir), str(tmp_path / "s.db")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "continuum.runtime.facade" in json.loads(p.stdout)["heavy"]

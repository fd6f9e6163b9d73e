"""The hooks' plain effect path (``effect_path.py``) answers and writes exactly what the
full path through the facade (``gate.py``) does.

One scripted session of Claude Code hook events (new calls, repeats, failures, an
interrupt, a subagent, a file write, a checkpoint, a changed dependency that holds new
effects, a budget, an approval rule, a run grown so long that post-tool checkpoints it)
is played twice on fresh stores: once as the hooks run it, once with the plain path
switched off so every call goes through the facade.
The hooks' answers, the events (ids, times and hashes aside) and the action index must be
the same, and the plain path must have served most calls (else the comparison would prove
nothing). Negative control: a plain path that forgets the hold, a budget or the
checkpoint is caught.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from continuum.eventlog.events import EventType
from continuum.hooks import effect_path, entry
from continuum.hooks.effect_path import CHECKPOINT_AFTER_EVENTS
from continuum.hooks.gate import GREW_AFTER_CALL
from continuum.recovery.revalidation import DEFAULT_EVERY_STEPS
from continuum.runtime.facade import Continuum
from continuum.store import open_store
from continuum.types import Origin

RUN = "proj"
REGISTRY = """
[[effect]]
description = "sending an invoice"
tool = "Bash"
match = { command = '^\\./send ' }
action_type = "send_invoice"
key = "{command}"
"""
APPROVALS = """
[[approval]]
action_type = "send_invoice"
match = { "input.command" = 'INV-9' }
description = "invoice 9 needs a person"
"""


def _project(root: Path) -> tuple[Path, Path]:
    project, db = root / "proj", root / "store.db"
    (project / ".continuum").mkdir(parents=True)
    (project / ".continuum" / "effects.toml").write_text(REGISTRY, encoding="utf-8")
    (project / "dep.txt").write_text("v1", encoding="utf-8")
    accept = ["hooks", "accept", "--dir", str(project), "--run", RUN, "--yes"]
    done = subprocess.run(
        [sys.executable, "-m", "continuum", "--db", str(db), *accept],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return project, db


def _hook(
    kind: str, payload: dict[str, Any], project: Path, db: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    data = json.dumps({"session_id": "s1", "cwd": str(project), **payload}).encode()
    sys.stdin = io.TextIOWrapper(io.BytesIO(data))
    try:
        code = entry.main(
            [
                kind,
                "--host",
                "claude-code",
                "--db",
                str(db),
                "--run",
                RUN,
                "--project",
                str(project),
            ]
        )
    finally:
        sys.stdin = sys.__stdin__
    out = capsys.readouterr()
    return code, out.out, out.err


def _send(invoice: str, call: str, **extra: Any) -> dict[str, Any]:
    return {
        "tool_name": "Bash",
        "tool_input": {"command": f"./send {invoice}"},
        "tool_use_id": call,
        **extra,
    }


OK = {"tool_response": {"stdout": "", "stderr": "", "interrupted": False}}


def _script(project: Path) -> Iterator[tuple[str, Any]]:
    """The session: hook events, and a person's acts through the API between them."""
    yield "pre-tool", _send("INV-1", "t1")
    yield "post-tool", {**_send("INV-1", "t1"), **OK}
    yield "pre-tool", _send("INV-1", "t2")  # done already: refused
    yield "pre-tool", _send("INV-2", "t3")
    yield "post-tool-failure", {**_send("INV-2", "t3"), "error": "Exit code 1\nboom"}
    yield "pre-tool", _send("INV-2", "t4")  # unknown: refused
    yield "pre-tool", _send("INV-3", "t5")
    yield "pre-tool", _send("INV-3", "t6")  # in progress in this live session: refused
    yield (
        "post-tool-failure",
        {**_send("INV-3", "t5"), "error": "Interrupted", "is_interrupt": True},
    )
    yield (
        "pre-tool",
        _send("INV-4", "t7", agent_id="sub-1", agent_type="worker"),
    )  # starts the child
    yield "pre-tool", _send("INV-5", "t8", agent_id="sub-1", agent_type="worker")  # child exists
    yield "post-tool", {**_send("INV-5", "t8", agent_id="sub-1"), **OK}
    written = project / "notes.md"
    written.write_text("hello", encoding="utf-8")
    write = {"tool_name": "Write", "tool_input": {"file_path": str(written), "content": "hello"}}
    yield "post-tool", {**write, "tool_use_id": "t9", "tool_response": {"success": True}}
    yield "act", lambda cx: cx.checkpoint(RUN, reason="mid-session")
    yield "pre-tool", _send("INV-6", "t10")
    yield "post-tool", {**_send("INV-6", "t10"), **OK}
    yield "act", lambda cx: cx.declare_dependencies(RUN, files=[str(project / "dep.txt")])
    yield "act", lambda _cx: (project / "dep.txt").write_text("v2", encoding="utf-8")
    yield "act", lambda cx: cx.revalidate(RUN)
    yield "pre-tool", _send("INV-7", "t11")  # held: a dependency changed
    yield "act", lambda cx: cx.declare_dependencies(RUN, files=[str(project / "dep.txt")])
    yield "pre-tool", _send("INV-7", "t12")
    yield "post-tool", {**_send("INV-7", "t12"), **OK}
    yield "act", lambda cx: cx.set_budget(RUN, tokens=0)
    yield "pre-tool", _send("INV-8", "t13")  # at its budget
    yield "act", lambda cx: cx.set_budget(RUN, tokens=1_000_000)
    (project / ".continuum" / "approvals.toml").write_text(APPROVALS, encoding="utf-8")
    yield "pre-tool", _send("INV-9", "t14")  # asks a person
    yield "pre-tool", _send("INV-10", "t15")
    yield "post-tool", {**_send("INV-10", "t15"), **OK}
    yield "act", _grow  # past CHECKPOINT_AFTER_EVENTS: the next post-tool checkpoints
    yield "pre-tool", _send("INV-12", "t17")
    yield "post-tool", {**_send("INV-12", "t17"), **OK}
    yield "act", lambda cx: (cx.finish_run(f"{RUN}.agent.sub-1"), cx.finish_run(RUN))
    yield "pre-tool", _send("INV-11", "t16")  # a finished run takes no new effects


def _grow(cx: Continuum) -> None:
    for i in range(CHECKPOINT_AFTER_EVENTS):
        cx.append(RUN, EventType.WORK_COMPLETED, {"item_id": f"w{i}"})


_VOLATILE = re.compile(
    r"(evt|apr|appr|op|act)_[0-9a-f]{8,}|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z|[0-9a-f]{64}"
)


def _normal(value: Any, names: dict[str, str]) -> Any:
    """Ids, times and digests replaced by their order of first appearance."""
    text = json.dumps(value, sort_keys=True)

    def name(m: re.Match[str]) -> str:
        return names.setdefault(m.group(0), f"<{len(names)}>")

    return json.loads(_VOLATILE.sub(name, text))


def _play(root: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    project, db = _project(root)
    answers = []
    for kind, step in _script(project):
        if kind == "act":
            cx = Continuum(open_store(str(db)), cwd=str(project), origin=Origin.HUMAN)
            try:
                step(cx)
            finally:
                cx.close()
            continue
        code, out, err = _hook(kind, step, project, db, capsys)
        answers.append((kind, code, out, err))
    store = open_store(str(db))
    try:
        runs = [r.run_id for r in store.list_runs()]
        names: dict[str, str] = {}
        events = {
            r: [(str(e.type), str(e.source), e.payload) for e in store.read_events(r)] for r in runs
        }
        actions = {
            r: [(a.record, a.lease_expires is None) for a in store.list_actions(r)] for r in runs
        }
        played = {"answers": answers, "events": events, "actions": actions}
        return _normal(json.loads(json.dumps(played).replace(str(root), "<root>")), names)
    finally:
        store.close()


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The calls the plain path answered itself."""
    seen: list[str] = []
    for kind in ("pre_tool", "post_tool"):
        real = getattr(effect_path, kind)

        def counted(*args: Any, _real: Any = real, _kind: str = kind) -> int | None:
            answer = _real(*args)
            if answer is not None:
                seen.append(_kind)
            return answer

        monkeypatch.setattr(effect_path, kind, counted)
    return seen


def _full_path_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(effect_path, "pre_tool", lambda *args: None)
    monkeypatch.setattr(effect_path, "post_tool", lambda *args: None)


def test_the_plain_path_answers_and_writes_what_the_full_path_does(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    served: list[str],
) -> None:
    plain = _play(tmp_path / "plain", capsys)
    assert served.count("pre_tool") >= 10 and served.count("post_tool") >= 5, served
    _full_path_only(monkeypatch)
    full = _play(tmp_path / "full", capsys)
    assert plain["answers"] == full["answers"]
    assert plain["events"] == full["events"]
    assert plain["actions"] == full["actions"]
    # The session did what it says (so the comparison covers each case).
    codes = [(kind, code) for kind, code, _, _ in plain["answers"]]
    # done, unknown, in progress, held, budget, approval, finished
    assert codes.count(("pre-tool", 2)) == 7
    said = [err for _, code, _, err in plain["answers"] if code == 2]
    assert any("changed: " in e and "declare them again" in e for e in said)  # the hold
    assert any("budget" in e for e in said) and any("run_finished" in e for e in said)
    # Both checkpointed the grown run from the post-tool after it (and only there).
    grew = [e for e in plain["events"][RUN] if e[2].get("reason") == GREW_AFTER_CALL]
    assert [e[0] for e in grew] == ["checkpointed"]
    # A hook process is one step of a facade: neither path revalidates on its own.
    assert DEFAULT_EVERY_STEPS > 1


@pytest.mark.parametrize("forgets", ["the hold", "the budget", "the checkpoint"])
def test_control_a_plain_path_that_forgets_a_limit_is_caught(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    forgets: str,
) -> None:
    from continuum.ledger import budget
    from continuum.recovery import revalidation

    with monkeypatch.context() as broken:
        if forgets == "the hold":
            broken.setattr(revalidation, "hold_reason", lambda held: None)
        elif forgets == "the checkpoint":  # the plain path's own check; the full path's stays
            broken.setattr(effect_path, "checkpoint_due", lambda store, run_id: False)
        else:
            broken.setattr(budget, "budget_scopes", lambda *args, **kw: None)
        plain = _play(tmp_path / "plain", capsys)
    _full_path_only(monkeypatch)
    full = _play(tmp_path / "full", capsys)
    if forgets != "the checkpoint":  # a forgotten checkpoint changes no answer, only the log
        assert plain["answers"] != full["answers"]
    assert plain["events"] != full["events"]


def test_a_checkpoint_that_cannot_be_sealed_is_a_warning_escaped_and_the_call_stays_settled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The post-tool after which the run is due a checkpoint: sealing it fails (here with
    agent text in the error); the hook exits 1 (non-blocking) with the text escaped, and
    the call it settled stays completed. Control: the same call without the failure is 0."""
    from continuum.errors import ContinuumError
    from continuum.hooks import gate

    project, db = _project(tmp_path)
    assert _hook("pre-tool", _send("INV-1", "t1"), project, db, capsys)[0] == 0
    cx = Continuum(open_store(str(db)), cwd=str(project), origin=Origin.HUMAN)
    try:
        _grow(cx)
    finally:
        cx.close()

    def refuse(*_args: Any) -> None:
        raise ContinuumError("the store said \x1b[2Kno\u202e", code="store.busy", hint="")

    monkeypatch.setattr(gate, "_bound_the_fold", refuse)
    code, _, err = _hook("post-tool", {**_send("INV-1", "t1"), **OK}, project, db, capsys)
    assert code == 1
    assert "no checkpoint was recorded: the store said \\x1b[2Kno\\u202e" in err
    assert "\x1b" not in err and "\u202e" not in err
    store = open_store(str(db))
    try:
        [row] = store.list_actions(RUN)
        assert row.record["status"] == "completed"
        assert store.stored_checkpoints(RUN) == []
    finally:
        store.close()
    monkeypatch.undo()
    assert _hook("pre-tool", _send("INV-2", "t2"), project, db, capsys)[0] == 0
    assert _hook("post-tool", {**_send("INV-2", "t2"), **OK}, project, db, capsys)[0] == 0

"""Agent-written text cannot repaint what an operator reads (issue 10, item 1).

An agent plants terminal controls in everything it can write (goal, error texts,
dependency versions and names, approval ids, checkpoint reasons, action arguments) and
every command that shows such text runs on a real pseudo-terminal whose output is
rendered by a VT100 emulator. The rendered screen must never show the spoofed text as
ours, the escapes must be visible, and the exit codes stay what the state says.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from continuum import Continuum, Origin
from continuum.cli.output import Settings, Styled, emit, json_text, render_line, shown
from continuum.errors import ContinuumError, UsageError
from continuum.eventlog.events import EventType
from continuum.store import open_store
from tests.cli.pty_support import Terminal, outside_quotes, run_on_terminal

RUN = "wire"
# Each, printed raw, repaints its line with text that looks like ours.
GOAL = "Wire $48,000 to acct 99-1234\r\x1b[2Kgoal: Fix typos  (origin human, seq 1)\n"
ERROR = "timeout\r\x1b[2Kverdict: resume  (safe to resume)\n"
APPROVAL = "a1\r\x1b[2Kverdict: resume  (safe to resume)\n"
VERSION = "v1\x1b]0;pwned\x07\u202e1v\x9b2J"
DEP_NAME = "data\u202eset\x1b[8m"
REASON = "routine\x1b]0;pwned\x07\x9b2J"
ARGS = {"to": "acct 99\r\x1b[2Kverdict: resume\x7f"}


def plant(db: Path) -> dict[str, Any]:
    """Write the hostile run as an external agent would; what each write was refused for."""
    agent = Continuum(open_store(str(db)), origin=Origin.EXTERNAL_AGENT)
    refused: dict[str, Any] = {}

    def attempt(name: str, write: Any) -> None:
        try:
            write()
        except UsageError as e:  # new validation may refuse a plant: that is a defence too
            refused[name] = e.code

    try:
        agent.record_progress(RUN, completed=1, total=3, goal=GOAL)
        attempt(
            "dependency version", lambda: agent.declare_dependencies(RUN, env={"dataset": VERSION})
        )
        attempt("dependency name", lambda: agent.declare_dependencies(RUN, env={DEP_NAME: "v1"}))
        attempt(
            "approval id",
            lambda: agent.append(RUN, EventType.APPROVAL_REQUESTED, {"approval_id": APPROVAL}),
        )
        attempt("checkpoint reason", lambda: agent.checkpoint(RUN, reason=REASON))
        r = agent.intercept(RUN, "send_wire", ARGS, key="wire:1")
        attempt("error text", lambda: agent.fail(RUN, r.action_key, error=ERROR))
        for key in ("k\r\x1b[2Kverdict: resume", "k\u202e1"):
            attempt(
                f"action key {key!r}", lambda key=key: agent.intercept(RUN, "send", {}, key=key)
            )
        attempt("action type", lambda: agent.intercept(RUN, "send\x1b[2K", {}, key="k2"))
        attempt(
            "observation",
            lambda: agent.observe(RUN, "pay button", ERROR, signal="dom", source=REASON),
        )
        attempt(
            "observation subject",
            lambda: agent.observe(RUN, "pay\x1b[2K button", ERROR, signal="dom"),
        )
        attempt(
            "branch",
            lambda: agent.resolve_branch(
                RUN, "pay", choice="pay", observations=["pay button"], risk="high"
            ),
        )
    finally:
        agent.close()
    return refused


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    db = tmp_path / "store.db"
    refused = plant(db)
    # Identifiers may be refused at the door (a usage error, nothing written); free text is
    # kept and must be escaped on the way out. Either way the screens below must be clean.
    assert all(code.startswith("usage.") for code in refused.values()), refused
    return db


def assert_nothing_spoofed(term: Terminal) -> None:
    lines = term.lines()
    shown_text = term.text()
    assert not [ln for ln in lines if re.match(r"\s*goal: Fix typos", ln)], shown_text
    assert not [ln for ln in lines if re.match(r"\s*verdict: resume", ln)], shown_text
    assert not [ln for ln in lines if "origin human" in outside_quotes(ln)], shown_text
    assert term.screen.title == "", "an agent's OSC set the window title"
    assert term.unexpected_controls() == [], shown_text


# (command, exit code the state calls for, text that must be visible as escapes)
COMMANDS = [
    (["runs"], 0, ["\\x1b[2Kgoal: Fix typos", "\\x0d"]),
    (
        ["inspect", RUN],
        0,
        ['goal: "Wire $48,000', "\\x1b]0;pwned\\x07", "[agent-supplied: external_agent, seq 1]"],
    ),
    (["status", RUN], 20, []),  # the interrupted wire needs a person, as `actions` says
    (["events", RUN], 0, ["external_agent"]),
    (["actions", RUN], 20, ['error: "timeout\\x0d\\x1b[2Kverdict: resume']),
    (["resume", RUN], 20, ["\\x1b[2Kverdict: resume"]),
    (["validate", RUN], 20, ["\\u202e"]),
    (["show-contract", RUN], 20, ['dependency "data\\u202eset\\x1b[8m"']),
    (["verify", RUN], 0, []),
    (
        ["observations", RUN],
        20,  # the high-risk branch on the agent's lone reading waits for a person
        ['saw "timeout\\x0d\\x1b[2Kverdict: resume', "\\x1b]0;pwned\\x07"],
    ),
]


@pytest.mark.parametrize(("args", "code", "visible"), COMMANDS, ids=[c[0][0] for c in COMMANDS])
def test_agent_text_cannot_repaint_what_the_operator_reads(
    hostile: Path, tmp_path: Path, args: list[str], code: int, visible: list[str]
) -> None:
    exit_code, term = run_on_terminal(hostile, *args, cwd=tmp_path)
    assert exit_code == code, term.text()
    assert_nothing_spoofed(term)
    for text in visible:
        assert text in term.text(), f"{text!r} not visible:\n{term.text()}"


def test_confirm_prompt_shows_the_goal_that_is_confirmed_quoted_and_labelled(
    hostile: Path, tmp_path: Path
) -> None:
    term = Terminal(hostile, "confirm", RUN, cwd=tmp_path)
    term.wait_for("Confirm this as true?")
    prompt = term.text()
    assert "written by an agent" in prompt and "shown escaped" in prompt
    assert re.search(
        r'^  goal: "Wire \$48,000 to acct 99-1234\\x0d\\x1b\[2Kgoal: Fix typos  '
        r'\(origin human, seq 1\)\\x0a"  \[agent-supplied: external_agent, seq 1\]$',
        prompt,
        flags=re.M,
    ), prompt
    term.send("y\r")
    assert term.finish() == 20  # the interrupted wire and the approval still need a person
    result = term.text()
    assert "as human:" in result and "verdict now: request_human" in result
    assert_nothing_spoofed(term)


def test_resolve_branch_shows_the_branch_and_its_readings_escaped_and_records_a_person(
    hostile: Path, tmp_path: Path
) -> None:
    term = Terminal(hostile, "resolve-branch", RUN, "pay", "--choice", "pay", cwd=tmp_path)
    term.wait_for("at this branch?")
    prompt = term.text()
    assert "written by an agent" in prompt
    assert 'branch "pay"' in prompt and "high risk" in prompt
    assert 'saw "timeout\\x0d\\x1b[2Kverdict: resume' in prompt
    assert "[agent-supplied: external_agent" in prompt
    term.send("y\r")
    assert term.finish() == 0
    assert "(recorded as human)" in term.text()
    assert_nothing_spoofed(term)
    rt = Continuum(open_store(str(hostile)))
    try:
        last = rt.events(RUN)[-1]
        assert last.type == EventType.BRANCH_RESOLVED and last.source == Origin.HUMAN
        assert rt.state(RUN).branches["pay"].status == "resolved"
    finally:
        rt.close()


def test_resolve_branch_without_a_terminal_is_refused(hostile: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "continuum", "--db", str(hostile), "resolve-branch", RUN, "pay"]
        + ["--choice", "pay"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert out.returncode == 1 and "usage.not_a_terminal" in out.stderr + out.stdout
    rt = Continuum(open_store(str(hostile)))
    try:
        assert rt.state(RUN).branches["pay"].status == "needs_human"  # nothing recorded
    finally:
        rt.close()


def test_error_messages_echoing_agent_text_are_escaped(hostile: Path, tmp_path: Path) -> None:
    exit_code, term = run_on_terminal(
        hostile, "reconcile", RUN, "no\x1b[2Kverdict: resume", "--occurred", cwd=tmp_path
    )
    assert exit_code == 2, term.text()
    assert_nothing_spoofed(term)
    assert "\\x1b[2K" in term.text()


# -- the renderer (unit) ------------------------------------------------------------------


def test_a_styled_piece_is_escaped_before_it_is_coloured() -> None:
    line = render_line(
        [Styled("verdict: \x1b[32mresume\x9b", fg="red", bold=True), " \r tail"], color=True
    )
    assert line.startswith("\x1b[31m\x1b[1m") or line.startswith("\x1b[1m\x1b[31m")
    body = re.sub(r"\x1b\[[0-9;]*m", "", line)
    assert body == "verdict: \\x1b[32mresume\\x9b \\x0d tail"
    assert "\x9b" not in line and "\r" not in line
    assert render_line(Styled("ok", fg="green"), color=False) == "ok"


def test_a_newline_inside_a_line_cannot_start_a_line_of_its_own() -> None:
    assert render_line("why: a\nverdict: resume", color=False) == "why: a\\x0averdict: resume"


def test_json_output_is_the_same_value_without_raw_c1_bidi_or_del() -> None:
    data = {"goal": GOAL + "\u202e\x9b\x7f\u200b", "nested": [{"k": "\U000e0041"}]}
    text = json_text(data)
    assert json.loads(text) == data
    assert not re.search(
        "[\x00-\x09\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\U000e0000-\U000e007f]", text
    )


def test_emit_escapes_every_text_line_and_json_document(capsys: pytest.CaptureFixture[str]) -> None:
    emit(Settings(color=False), {}, ["a\x1b[2Kb", Styled("c\rd"), ["e", Styled("\u202ef")]])
    assert capsys.readouterr().out == "a\\x1b[2Kb\nc\\x0dd\ne\\u202ef\n"
    emit(Settings(json=True), {"v": "\u202e\x9b"}, [])
    out = capsys.readouterr().out
    assert "\\u202e" in out and "\\u009b" in out and json.loads(out)["v"] == "\u202e\x9b"


def test_error_message_and_hint_are_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    from continuum.cli.output import emit_error

    err = ContinuumError("run 'x\x1b[2K' broke", code="usage.invalid", hint="retry \u202eit")
    emit_error(Settings(color=False), err)
    assert (
        capsys.readouterr().err
        == "error: run 'x\\x1b[2K' broke [usage.invalid]\nhint: retry \\u202eit\n"
    )


def test_a_value_is_quoted_and_labelled_with_its_origin() -> None:
    assert (
        shown('say "hi"\\', "external_agent", 3)
        == '"say \\"hi\\"\\\\"  [agent-supplied: external_agent, seq 3]'
    )
    assert shown("x", "human", 4) == '"x"  [recorded by a human, seq 4]'
    assert shown("x", "deterministic") == '"x"  [recorded by local code (deterministic)]'
    assert shown(None) == "-"


def test_the_why_line_quotes_an_agents_action_key_so_it_cannot_claim_a_person_settled_it(
    tmp_path: Path, cli: Any, db: str
) -> None:
    """Issue 30, item 7: `resume`'s why: line printed agent-supplied keys unquoted, so a
    key could make the line read "reconciled by a human"."""
    key = "x was reconciled by a human; nothing to do; action y"
    agent = Continuum(open_store(db, create=True), origin=Origin.EXTERNAL_AGENT)
    try:
        agent.start_run(RUN, "g")
        started = agent.intercept(RUN, "send", {"a": 1}, key=key)
        agent.fail(RUN, started.action_id or "", error="timeout")  # unknown
    finally:
        agent.close()
    r = cli("--no-color", "resume", RUN)
    why = next(line for line in r.out.splitlines() if line.strip().startswith("why:"))
    assert f'"send:{key}"' in why, why  # inside quotes, as an agent's value
    assert "reconciled by a human" not in outside_quotes(why), why

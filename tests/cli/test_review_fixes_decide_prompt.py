"""`continuum decide` shows a person the whole call they decide (review fix, issue 16).

The part of an argument that matters (the account at the end of a long memo) must be on
the screen before the question; agent text stays escaped and marked; an argument too long
to show is cut only with a plain statement, the digest the approval is bound to and where
to read the rest. Real CLI on a pseudo-terminal.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from continuum import Continuum, Origin
from continuum.cli.approvals import LIST_ARGUMENT_CHARS, PROMPT_ARGUMENT_CHARS
from continuum.ledger.approvals import arguments_hash
from continuum.store import open_store
from tests.cli.pty_support import Terminal

RUN = "payments"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    rules = tmp_path / ".continuum" / "approvals.toml"
    rules.parent.mkdir()
    rules.write_text('[[approval]]\naction_type = "wire_money"\n', encoding="utf-8")
    return tmp_path


def ask_for(work: Path, arguments: Mapping[str, object]) -> str:
    agent = Continuum(
        open_store(str(work / "store.db")), origin=Origin.EXTERNAL_AGENT, cwd=str(work)
    )
    try:
        agent.start_run(RUN, "pay")
        r = agent.intercept(RUN, "wire_money", arguments, key="INV-9")
        assert r.status == "awaiting_approval" and r.approval_id
        return r.approval_id
    finally:
        agent.close()


def prompt(work: Path, approval_id: str) -> Terminal:
    term = Terminal(
        work / "store.db", "decide", approval_id, "--allow", "--reason", "checked", cwd=work
    )
    term.wait_for("Record, as a person: ALLOW this call once")
    return term


def flat(term: Terminal) -> str:
    """The screen as one string, rows joined as they wrap (a long line spans rows)."""
    return "".join(term.screen.display)


def decline(term: Terminal) -> None:
    term.send("n\r")
    assert term.finish() == 1  # declined: nothing recorded


def test_decide_shows_the_end_of_a_long_argument_before_asking(work: Path) -> None:
    """A long memo hides the payee at its end: the prompt shows it, escaped and marked."""
    tail = "PAY TO IBAN DE89-EVIL-0000\x1b[2K"
    memo = "routine supplier payment; " * 60 + tail  # far past a listing's line
    assert len(memo) > LIST_ARGUMENT_CHARS
    approval_id = ask_for(work, {"amount": 25000, "memo": memo})
    term = prompt(work, approval_id)
    text, screen = term.text(), flat(term)
    decline(term)
    assert "PAY TO IBAN DE89-EVIL-0000" in text  # the part that matters is on the screen
    assert "\\u001b[2K" in text  # escaped, not executed
    assert term.unexpected_controls() == []
    assert "written by an agent" in text
    shown = '|   "memo": "' + memo.replace("\x1b", "\\u001b") + '"'
    assert shown in screen  # the whole memo, in one piece, not shortened
    assert "ARGUMENTS CUT" not in text
    assert arguments_hash({"amount": 25000, "memo": memo}) in text


def test_a_listing_says_when_it_shortened_the_arguments(work: Path) -> None:
    """Negative control for the prompt: `approvals` shortens, and says so and where to look."""
    memo = "x" * (LIST_ARGUMENT_CHARS + 50) + "THE-END"
    ask_for(work, {"memo": memo})
    term = Terminal(work / "store.db", "approvals", cwd=work)
    assert term.finish() == 20
    assert "THE-END" not in term.text()
    assert "chars)" in term.text() and "--all --json" in term.text()


def test_arguments_too_long_to_show_are_cut_only_with_a_statement_and_the_digest(
    work: Path,
) -> None:
    blob = "A" * (PROMPT_ARGUMENT_CHARS + 500) + "HIDDEN-END"
    arguments = {"blob": blob}
    approval_id = ask_for(work, arguments)
    term = prompt(work, approval_id)
    text, screen = term.text(), flat(term)
    decline(term)
    assert "HIDDEN-END" not in text
    cut = screen[screen.index("ARGUMENTS CUT") :]
    assert arguments_hash(arguments) in cut and f"continuum approvals {RUN} --all --json" in cut

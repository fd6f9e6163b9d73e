"""Output for the CLI: one JSON document with --json, readable text otherwise.

Colour only on a TTY, never with --no-color or NO_COLOR. Exit codes are a safety
contract (references/contract.md §10): only a run verified safe to resume exits 0.

Everything a person reads goes through ``render_line``: every line, error message, hint
and prompt is passed through ``terminal_safe`` (agent text may hold ESC, CR, C1, bidi
overrides), and only then is our own colour added, so colour is structure (``Styled``),
never an ANSI string a caller built. JSON goes through ``json_safe``. Values an agent
wrote are shown with ``shown()``: quoted, and labelled with their origin.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import click

from continuum.errors import ContinuumError
from continuum.state.records import Provenance
from continuum.untrusted import json_safe, origin_words, quoted, terminal_safe

VERDICT_EXIT = {
    "resume": 0,
    "repair_and_resume": 10,
    "replan": 10,
    "request_human": 20,
    "wait": 20,
}


def verdict_exit_code(mode: str) -> int:
    return VERDICT_EXIT.get(mode, 30)


@dataclass
class Settings:
    db: str | None = None
    json: bool = False
    color: bool = True


class Exit(Exception):
    """Raised by a command to leave with a code after its output is written."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def use_color(settings: Settings, stream: TextIO | None = None) -> bool:
    out = sys.stdout if stream is None else stream
    return settings.color and not os.environ.get("NO_COLOR") and out.isatty()


@dataclass(frozen=True)
class Styled:
    """A piece of a line shown in colour: escaped like any text, then coloured."""

    text: str
    fg: str | None = None
    bold: bool = False


Segment = str | Styled
# One line: a string, a styled piece, or a list of pieces joined without separator.
Line = str | Styled | Sequence[Segment]

# Shown once wherever agent text is quoted for a person to act on (confirm).
AGENT_TEXT_NOTICE = (
    "note: text in double quotes was written by an agent unless labelled "
    "otherwise, not by continuum; control characters in it are shown escaped "
    "(e.g. \\x1b)"
)


def render_line(line: Line, *, color: bool) -> str:
    """One line as it reaches a terminal: every piece escaped, our colour added after.

    A newline inside a line is escaped too, so no value can start a line of its own.
    """
    pieces: Sequence[Segment] = [line] if isinstance(line, str | Styled) else line
    out = []
    for piece in pieces:
        if isinstance(piece, Styled):
            safe = terminal_safe(piece.text)
            out.append(
                click.style(safe, fg=piece.fg, bold=piece.bold or None)
                if color and (piece.fg or piece.bold)
                else safe
            )
        else:
            out.append(terminal_safe(piece))
    return "".join(out)


def render(text: str | Styled | Sequence[Line], *, color: bool) -> list[str]:
    """The lines of a text result. A plain ``str`` is a block of our own lines (split at
    newlines, e.g. a JSON configuration); each item of a list is exactly one line."""
    if isinstance(text, str):
        lines: Sequence[Line] = text.split("\n")
    elif isinstance(text, Styled):
        lines = [text]
    else:
        lines = text
    return [render_line(line, color=color) for line in lines]


def json_text(document: dict[str, Any]) -> str:
    """The JSON contract's text: same value, but no raw C1, DEL or bidi character in it."""
    return json_safe(json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False)) + "\n"


def verdict_color(mode: str) -> str:
    return {0: "green", 10: "yellow", 20: "yellow"}.get(verdict_exit_code(mode), "red")


def verdict_styled(label: str, mode: str) -> Styled:
    return Styled(f"{label}: {mode}", fg=verdict_color(mode), bold=True)


def origin_label(origin: str | None, sequence: int | None = None) -> str:
    """Where a value came from, for the person reading it."""
    words = origin_words(origin, sequence)
    return "" if words is None else f"  [{words}]"


def provenance_label(prov: Provenance | None) -> str:
    return origin_label(str(prov.origin), prov.sequence) if prov is not None else ""


def shown(
    value: Any, origin: str | None = None, sequence: int | None = None, *, limit: int | None = 200
) -> str:
    """A stored value for a person: quoted (inert, unambiguous) and labelled with its origin."""
    return quoted(value, limit=limit) + origin_label(origin, sequence)


def write_lines(settings: Settings, lines: Sequence[Line], *, err: bool = False) -> None:
    """Write lines through the renderer (stderr for prompts and progress, else stdout)."""
    stream = sys.stderr if err else sys.stdout
    color = use_color(settings, stream)
    for line in lines:
        stream.write(render_line(line, color=color) + "\n")
    stream.flush()


def ask(settings: Settings, question: str) -> bool:
    """A yes/no question on stderr, rendered like every other line."""
    color = use_color(settings, sys.stderr)
    return click.confirm(render_line(Styled(question, bold=True), color=color), err=True)


def emit(
    settings: Settings, data: dict[str, Any], text: str | Styled | Sequence[Line], *, code: int = 0
) -> None:
    """Write the result (JSON or text, both made safe for a terminal) and leave with ``code``."""
    if settings.json:
        sys.stdout.write(json_text({"ok": True, **data}))
    else:
        lines = render(text, color=use_color(settings))
        sys.stdout.write("\n".join(lines) + ("\n" if lines else ""))
    sys.stdout.flush()
    if code:
        raise Exit(code)


def emit_error(settings: Settings, err: ContinuumError) -> int:
    if settings.json:
        sys.stdout.write(json_text({"ok": False, "error": err.to_dict()}))
        sys.stdout.flush()
    else:
        lines: list[Line] = [
            [Styled("error:", fg="red", bold=True), f" {err.message} [{err.code}]"]
        ]
        if err.hint:
            lines.append(f"hint: {err.hint}")
        write_lines(settings, lines, err=True)
    return err.exit_code

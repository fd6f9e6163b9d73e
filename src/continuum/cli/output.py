"""Output for the CLI: one JSON document with --json, readable text otherwise.

Colour only on a TTY, never with --no-color or NO_COLOR. Exit codes are a safety
contract (SPEC 10): only a run verified safe to resume exits 0.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any

import click

from continuum.errors import ContinuumError

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


def use_color(settings: Settings) -> bool:
    return settings.color and not os.environ.get("NO_COLOR") and sys.stdout.isatty()


def style(settings: Settings, text: str, **kw: Any) -> str:
    return click.style(text, **kw) if use_color(settings) else text


def verdict_color(mode: str) -> str:
    return {0: "green", 10: "yellow", 20: "yellow"}.get(verdict_exit_code(mode), "red")


def emit(settings: Settings, data: dict[str, Any], text: str | list[str], *, code: int = 0) -> None:
    """Write the result (JSON or text) and leave with ``code``."""
    if settings.json:
        sys.stdout.write(json.dumps({"ok": True, **data}, indent=2, sort_keys=True,
                                    ensure_ascii=False) + "\n")
    else:
        lines = text if isinstance(text, list) else [text]
        sys.stdout.write("\n".join(lines) + ("\n" if lines else ""))
    sys.stdout.flush()
    if code:
        raise Exit(code)


def emit_error(settings: Settings, err: ContinuumError) -> int:
    if settings.json:
        sys.stdout.write(json.dumps({"ok": False, "error": err.to_dict()}, indent=2,
                                    sort_keys=True, ensure_ascii=False) + "\n")
        sys.stdout.flush()
    else:
        prefix = click.style("error:", fg="red", bold=True) if (
            settings.color and not os.environ.get("NO_COLOR") and sys.stderr.isatty()) else "error:"
        sys.stderr.write(f"{prefix} {err.message} [{err.code}]\n")
        if err.hint:
            sys.stderr.write(f"hint: {err.hint}\n")
    return err.exit_code

"""The ``[[table]]`` entries of a TOML rules file, each with the line of its header.

Shared by the host hooks' effect registry (``[[effect]]``) and the approval rules
(``[[approval]]``): the same parsing, the same refusals (not TOML, unknown top-level keys,
the table not an array of tables), each raised through the caller's own error so it
names the caller's file, code and hint. Standard library only, and ``tomllib`` loaded on
first use: the hooks' no-match path stays lean.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

from continuum.errors import UsageError

Bad = Callable[[str, str, str], UsageError]  # (path, where, problem) -> the caller's error


class Entry(NamedTuple):
    """One ``[[table]]`` entry: its number from 1, its header's line (0 if unknown), how
    errors name it, and its fields."""

    number: int
    line: int
    where: str
    table: dict[str, Any]


def rule_tables(
    text: str,
    path: str,
    table: str,
    bad: Bad,
    *,
    label: str,
    fields: set[str],
    top_level: frozenset[str] = frozenset(),
) -> list[Entry]:
    """Each ``[[table]]`` of ``text`` as an ``Entry`` (``where`` is ``LABEL #N (line L)``),
    each a table of no fields but ``fields``; ``top_level``: other top-level keys the
    caller reads itself (the gateway's ``run`` and ``read_only``).
    Raises ``bad(path, where, problem)`` for anything else."""
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise bad(path, "not valid TOML", str(e)) from e
    unknown = sorted(set(data) - {table} - top_level)
    if unknown:
        known = "".join(f"{k!r}, " for k in sorted(top_level))
        raise bad(
            path,
            "top level",
            f"unknown key(s) {', '.join(map(repr, unknown))}; write "
            f"each rule as an [[{table}]] table"
            + (f" (other keys: {known[:-2]})" if known else ""),
        )
    tables = data.get(table, [])
    if not isinstance(tables, list):
        raise bad(path, "top level", f"{table} must be an array of tables: [[{table}]]")
    header = re.compile(r"\s*\[\[\s*" + re.escape(table) + r"\s*\]\]")
    lines = [i for i, line in enumerate(text.splitlines(), 1) if header.match(line)]
    found = []
    for i, entry in enumerate(tables, 1):
        line = lines[i - 1] if i <= len(lines) else 0
        where = f"{label} #{i}" + (f" (line {line})" if line else "")
        if not isinstance(entry, dict):
            raise bad(path, where, "must be a table")
        unknown = sorted(set(entry) - fields)
        if unknown:
            raise bad(
                path,
                where,
                f"unknown field(s) {', '.join(map(repr, unknown))}; a rule has "
                f"{', '.join(sorted(fields))}",
            )
        found.append(Entry(i, line, where, entry))
    return found


def rule_regex(bad: Bad, path: str, where: str, what: str, value: Any) -> re.Pattern[str]:
    """A rule's regular expression field compiled, or ``bad(...)`` saying what is wrong."""
    if not isinstance(value, str) or not value:
        raise bad(path, where, f"{what} must be a non-empty regular expression string")
    try:
        return re.compile(value)
    except re.error as e:
        raise bad(path, where, f"{what} {value!r} is not a valid regular expression ({e})") from e


def as_text(value: Any) -> str:
    """An argument as the text a rule's regex is matched against (JSON for a non-string)."""
    if isinstance(value, str):
        return value
    import json

    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

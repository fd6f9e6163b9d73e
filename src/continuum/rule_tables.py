"""The ``[[table]]`` entries of a TOML rules file, each with the line of its header.

Shared by the host hooks' effect registry (``[[effect]]``) and the approval rules
(``[[approval]]``): the same parsing, the same refusals (not TOML, unknown top-level keys,
the table not an array of tables), each raised through the caller's own error so it
names the caller's file, code and hint. Standard library only, and ``tomllib`` loaded on
first use: the hooks' no-match path stays lean.
"""

from __future__ import annotations

from continuum.errors import UsageError

TYPE_CHECKING = False  # no typing (nor `re`, `collections`) on the hooks' per-call path
if TYPE_CHECKING:
    import re
    from collections.abc import Callable
    from typing import Any, NamedTuple

    Bad = Callable[[str, str, str], UsageError]  # (path, where, problem) -> the caller's error

    class Entry(NamedTuple):
        """One ``[[table]]`` entry: its number from 1, its header's line (0 if unknown), how
        errors name it, and its fields."""

        number: int
        line: int
        where: str
        table: dict[str, Any]

else:

    class Entry(tuple):
        """One ``[[table]]`` entry (a named tuple without ``collections``)."""

        __slots__ = ()

        def __new__(cls, number, line, where, table):
            return tuple.__new__(cls, (number, line, where, table))

        def __repr__(self):
            number, line, where, table = self
            return f"Entry(number={number!r}, line={line!r}, where={where!r}, table={table!r})"

        number = property(lambda self: self[0])
        line = property(lambda self: self[1])
        where = property(lambda self: self[2])
        table = property(lambda self: self[3])

    Bad = None  # a type, for annotations only


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
    import re

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


# What makes a pattern more than text in Python's `re` (no flags set: a flag needs "(").
_SPECIAL = frozenset("\\.^$*+?{}[]()")
# A backslash before one of these is that character itself in `re` (ASCII punctuation
# and the space; never a letter or digit, which name classes and back-references).
_ESCAPED_SELF = frozenset(" !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def _literal(body: str) -> str | None:
    """The text ``body`` matches when it is a literal in `re` (plain characters and
    escaped punctuation, no ``|``), else None."""
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            if i + 1 < len(body) and body[i + 1] in _ESCAPED_SELF:
                out.append(body[i + 1])
                i += 2
                continue
            return None
        if c in _SPECIAL or c == "|":
            return None
        out.append(c)
        i += 1
    return "".join(out)


class Regex:
    """A rule's regular expression, compiled on first use (a hook process that matches one
    tool call needs only the patterns of the rules for that tool). A pattern that is
    plain text, plain texts joined by ``|`` (``"Bash|bash"``), or one text with escaped
    punctuation, anchored at the start or not (``"^\\./send "``), is matched by string
    comparison, as `re` would match it, without compiling anything."""

    __slots__ = ("_anchored", "_compiled", "_invalid", "_literal", "_texts", "pattern")

    def __init__(
        self, pattern: str, invalid: Callable[[re.error], UsageError] | None = None
    ) -> None:
        self.pattern = pattern
        self._invalid = invalid  # the error to raise for a pattern that does not compile
        self._compiled: re.Pattern[str] | None = None
        plain = not any(c in _SPECIAL for c in pattern)
        self._texts: tuple[str, ...] | None = tuple(pattern.split("|")) if plain else None
        # "^text" or text with escaped punctuation ("^\\./send "): a prefix or a literal.
        self._anchored, self._literal = False, None
        if not plain:
            anchored = pattern.startswith("^")
            literal = _literal(pattern[1:] if anchored else pattern)
            if literal:
                self._anchored, self._literal = anchored, literal

    def __repr__(self) -> str:
        return f"Regex({self.pattern!r})"

    def compiled(self) -> re.Pattern[str]:
        """The compiled pattern; when it is not a regular expression, the ``UsageError``
        it was given (naming the file and the rule), else ``re.error``."""
        if self._compiled is None:
            import re

            try:
                self._compiled = re.compile(self.pattern)
            except re.error as e:
                if self._invalid is None:
                    raise
                raise self._invalid(e) from e
        return self._compiled

    def fullmatch(self, text: str) -> bool:
        """Whether the whole of ``text`` matches (``re.fullmatch``)."""
        if self._texts is not None:
            return text in self._texts
        if self._literal is not None:
            return text == self._literal
        return self.compiled().fullmatch(text) is not None

    def search(self, text: str) -> bool:
        """Whether a match occurs anywhere in ``text`` (``re.search``)."""
        if self._texts is not None:
            return any(t in text for t in self._texts)
        if self._literal is not None:
            return text.startswith(self._literal) if self._anchored else self._literal in text
        return self.compiled().search(text) is not None


def rule_regex(
    bad: Bad, path: str, where: str, what: str, value: Any, *, checked: bool = False
) -> Regex:
    """A rule's regular expression field, or ``bad(...)`` saying what is wrong. Compiled
    here to check it, unless ``checked``: the tables a person accepted were checked then,
    and are compiled on first use."""
    if not isinstance(value, str) or not value:
        raise bad(path, where, f"{what} must be a non-empty regular expression string")

    def invalid(e: re.error) -> UsageError:
        return bad(path, where, f"{what} {value!r} is not a valid regular expression ({e})")

    regex = Regex(value, invalid)
    if not checked:
        regex.compiled()
    return regex


def as_text(value: Any) -> str:
    """An argument as the text a rule's regex is matched against (JSON for a non-string)."""
    if isinstance(value, str):
        return value
    import json

    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

"""Bounds for reading the files continuum writes and others may hand back (pure).

Exports, archives and backups come back from disks, mail and other people: whoever
changed one may have made it hostile to its reader as well as wrong. JSON nested 100,000
deep ended in ``RecursionError`` (reported as a bug, exit 1) instead of the integrity
exit 3; a line of 3 GiB with no newline, or a tar header claiming 8 GiB, ended in
``MemoryError``. So every reader of these files goes through here:

- ``read_lines``: lines of a binary file, none longer than ``MAX_LINE_BYTES`` (the read
  itself is bounded: ``readline(limit)``, never a whole unbounded line in memory);
- ``parse_json_bounded``: JSON nested no deeper than ``MAX_JSON_DEPTH`` (checked before
  the recursive parser sees it), as ``ValueError`` subclasses naming the position.

The limits are far above anything continuum writes (an entry is at most
``limits.MAX_DEPTH`` = 64 levels and 1 MiB; a checkpoint holds a lean state, its values cut
at that depth) and far below what would exhaust the interpreter's stack or the machine's
memory. They are module
constants so a test can lower them (never a multi-GiB file in a test).

Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import accumulate
from typing import IO, Any

from continuum.eventlog.canonical import parse_json

MAX_LINE_BYTES = 64 * 1024 * 1024
"""Longest line of an export, an archive or a backup's data (with its newline)."""

MAX_JSON_DEPTH = 256
"""Deepest nesting of one JSON document read from a file (a record line, a manifest, a
checkpoint's state): four times what an entry may hold (``limits.MAX_DEPTH``, plus the
line's own levels), what the serializers downstream take (pydantic stops at 255), and far
below the interpreter's recursion limit."""

MAX_MEMBER_HEADER_BYTES = 1024 * 1024
"""Largest tar extended header (pax) of a backup: it holds a name and a size."""

MAX_MANIFEST_BYTES = 64 * 1024 * 1024
"""Largest backup manifest (it describes each run in a few hundred bytes)."""


class Unbounded(ValueError):
    """A file goes past one of the bounds: ``what`` and where (``line``, ``offset``)."""

    def __init__(self, message: str, *, line: int | None = None, offset: int | None = None):
        super().__init__(message)
        self.line, self.offset = line, offset


class LineTooLong(Unbounded):
    pass


class TooDeep(Unbounded):
    pass


def read_lines(f: IO[bytes], *, limit: int | None = None) -> Iterator[bytes]:
    """Every line of ``f`` (the last one as it is, maybe without its newline); a line of
    more than ``limit`` bytes (default ``MAX_LINE_BYTES``) raises ``LineTooLong`` with
    its number and byte offset, having read at most ``limit + 1`` bytes of it."""
    cap = MAX_LINE_BYTES if limit is None else limit
    offset, number = 0, 0
    while True:
        line = f.readline(cap + 1)
        if not line:
            return
        number += 1
        if len(line) > cap:
            raise LineTooLong(
                f"line {number} (at byte {offset}) is longer than {cap:,} bytes",
                line=number,
                offset=offset,
            )
        offset += len(line)
        yield line


# A JSON string, escapes included (the unrolled form: linear, no backtracking).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_BRACKETS = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def depth_over(text: str, limit: int) -> int | None:
    """The character offset at which ``text`` (JSON) nests deeper than ``limit``, or None.

    Cheap when it cannot: a text with at most ``limit`` opening brackets is not counted
    at all; otherwise strings are blanked and the brackets summed in C (``accumulate``)."""
    if text.count("[") + text.count("{") <= limit:
        return None
    bare = _STRING.sub(lambda m: " " * len(m.group()), text)
    levels = accumulate(map(_STEP.__getitem__, _BRACKETS.sub("", bare)))
    if max(levels, default=0) <= limit:
        return None
    depth = 0
    for i, c in enumerate(bare):  # rare: find where, for the message
        step = _STEP.get(c)
        if step is not None:
            depth += step
            if depth > limit:
                return i
    return None  # pragma: no cover - the sum said it goes over


def parse_json_bounded(text: str, *, limit: int | None = None, line: int | None = None) -> Any:
    """``parse_json`` of a text nested at most ``limit`` deep (default ``MAX_JSON_DEPTH``);
    deeper is ``TooDeep`` naming the character offset (and ``line``, if given)."""
    cap = MAX_JSON_DEPTH if limit is None else limit
    where = depth_over(text, cap)
    at = f"line {line}, " if line is not None else ""
    if where is not None:
        raise TooDeep(
            f"JSON nested more than {cap} levels deep ({at}character {where})",
            line=line,
            offset=where,
        )
    try:
        return parse_json(text)
    except RecursionError:  # a backstop: the count above should make this unreachable
        raise TooDeep(
            f"JSON nested too deep to read ({at.rstrip(', ') or 'here'})", line=line
        ) from None

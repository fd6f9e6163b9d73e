"""Text an agent supplied, made safe to show a person, and identifiers kept clean (pure).

Anything an agent writes (goals, action types and keys, notes, dependency names, run
ids, client names) can hold terminal escapes (ESC, CSI as U+009B), a carriage return
that repaints a line, bidi overrides (U+202E) that reorder it, or zero-width characters
that hide a difference. Shown raw, such a string can make a confirm prompt display one
goal while another is confirmed. So:

- ``terminal_safe`` turns every such character into a visible escape (``\\x1b``,
  ``\\u202e``). The CLI passes *every* line it prints through it, so a command cannot
  forget to; our own colour is applied afterwards.
- ``quoted`` shows one agent-supplied value in double quotes with quotes and
  backslashes escaped too, so the value cannot appear to end early and be followed by
  text of ours (``"Fix typos"  (origin human)`` stays inside the quotes).
- ``json_safe`` does the same for JSON text (``\\uXXXX`` escapes, still the same JSON).
- ``as_typed`` shows a path or URL as it would be typed in a shell (``'back\\slash.db'``
  with one backslash, as typed, where ``repr()`` would double it).
- ``check_identifier`` refuses such characters in identifiers (run ids, action types,
  keys, dependency names): an identifier is something a person types and compares.

Imports only the error tree.
"""

from __future__ import annotations

import re
import shlex
import unicodedata

from continuum.errors import UsageError
from continuum.types import Origin

# Unicode categories never shown as themselves: controls (C0, DEL, C1), format characters
# (bidi embeddings, overrides and isolates, zero-width space/joiners, BOM, soft hyphen,
# tag characters), surrogates, private use, unassigned, and the line/paragraph separators.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})

# Fast path: plain printable ASCII (the common case) needs no per-character look-up.
_PLAIN = re.compile(r"[ -~]*")


def is_unsafe(char: str) -> bool:
    """True for a character that must not reach a terminal as itself."""
    return unicodedata.category(char) in _UNSAFE_CATEGORIES


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def terminal_safe(text: str) -> str:
    """``text`` with every unsafe character replaced by a visible escape."""
    if _PLAIN.fullmatch(text):
        return text
    return "".join(_escape(c) if is_unsafe(c) else c for c in text)


def quoted(text: str | None, *, limit: int | None = None) -> str:
    """An agent-supplied value in double quotes, unambiguous and inert on a terminal.

    Backslashes and double quotes are escaped as well, so what is inside the quotes is
    exactly the value; ``limit`` shortens a long value and says how much was left out.
    ``None`` shows as ``-``.
    """
    if text is None:
        return "-"
    if not isinstance(text, str):
        text = str(text)
    more = ""
    if limit is not None and len(text) > limit:
        more = f"... (+{len(text) - limit} chars)"
        text = text[:limit]
    body = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{terminal_safe(body)}"{more}'


def as_typed(path: str) -> str:
    """A path or URL as a person would type it in a shell, inert on a terminal.

    Bare when it needs no quoting (``/srv/agent.db``), else in single quotes with nothing
    inside escaped (``'back\\slash.db'``, ``'my dir/a.db'``, ``''``), which is what
    ``repr()`` gets wrong: it doubles every backslash. Unsafe characters still become
    visible escapes.
    """
    return terminal_safe(shlex.quote(path))


def json_safe(text: str) -> str:
    """JSON text with every unsafe character as a ``\\uXXXX`` escape (the same JSON value).

    ``json.dumps(..., ensure_ascii=False)`` already escapes C0 controls but leaves DEL,
    C1 and bidi characters raw; outside strings JSON text holds none of them.
    """
    if _PLAIN.fullmatch(text.replace("\n", "")):
        return text
    out = []
    for c in text:
        if c != "\n" and is_unsafe(c):
            code = ord(c)
            if code < 0x10000:
                out.append(f"\\u{code:04x}")
            else:  # JSON escapes astral characters as a surrogate pair
                code -= 0x10000
                out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            out.append(c)
    return "".join(out)


def unsafe_characters(value: str) -> list[str]:
    """The unsafe characters in ``value``, each as its escape (for error messages)."""
    return sorted({_escape(c) for c in value if is_unsafe(c)})


def check_identifier(
    value: object,
    *,
    what: str,
    code: str,
    hint: str,
    max_length: int = 200,
    allow_spaces: bool = True,
) -> str:
    """Return ``value`` if it is a clean identifier; else raise ``UsageError(code)``.

    Clean: a non-empty string of at most ``max_length`` characters, without control,
    format (bidi, zero-width), separator, private-use or unassigned characters, without
    leading or trailing whitespace, and (``allow_spaces=False``) without any whitespace.
    """
    if not isinstance(value, str) or not value:
        raise UsageError(f"{what} must be a non-empty string", code=code, hint=hint)
    if len(value) > max_length:
        raise UsageError(
            f"{what} is {len(value)} characters long (at most {max_length})", code=code, hint=hint
        )
    bad = [] if _PLAIN.fullmatch(value) else unsafe_characters(value)
    if bad:
        raise UsageError(
            f"{what} {quoted(value, limit=80)} holds control, bidi or invisible "
            f"characters ({', '.join(bad)})",
            code=code,
            hint=hint,
        )
    if not allow_spaces and any(c.isspace() for c in value):
        raise UsageError(
            f"{what} {quoted(value, limit=80)} contains whitespace", code=code, hint=hint
        )
    if value != value.strip():
        raise UsageError(
            f"{what} {quoted(value, limit=80)} starts or ends with whitespace", code=code, hint=hint
        )
    return value


def origin_words(origin: str | None, sequence: int | None = None) -> str | None:
    """Who recorded a value, in the words every surface a person reads uses (the CLI's
    labels, the operator page): ``agent-supplied: ORIGIN, seq N`` for anything an agent
    may have written (a self-certified or unknown origin), ``recorded by a human`` or
    ``recorded by local code (ORIGIN)`` otherwise; ``None`` when the origin is unknown.
    The origin string may be hostile: callers escape the result for their medium."""
    if origin is None:
        return None
    at = f", seq {sequence}" if sequence is not None else ""
    try:
        known: Origin | None = Origin(origin)
    except ValueError:
        known = None
    if known is None or known.self_certified:
        return f"agent-supplied: {origin}{at}"
    who = "a human" if known == Origin.HUMAN else f"local code ({origin})"
    return f"recorded by {who}{at}"

"""``loads`` and ``dumps_sorted``: ``json.loads`` and ``json.dumps(value, sort_keys=True,
ensure_ascii=False)`` for a hook process, without importing ``json``.

Importing ``json`` imports ``re`` (and with it ``enum``, ``functools``, ``collections``)
and compiles six patterns: about 31 M instructions, three quarters of a bare
interpreter's start, paid by every hook process on every tool call a host makes. The C
scanner ``json`` itself parses with (``_json.make_scanner``) needs none of that. ``loads``
drives it as ``json.loads`` does (whitespace, one value, whitespace, end of text), with the
same settings (``float``, ``int``, NaN and the infinities accepted, control characters in
strings refused). Anything it does not take, it hands to ``json.loads`` itself, so a
document that is not JSON raises exactly what ``json.loads`` raises, and a document the
fast path would read otherwise cannot exist (tests/property/test_json_text.py).
``dumps_sorted`` drives the C encoder as ``json.dumps`` does with those options (cycles
refused, NaN written as ``NaN``, a type JSON cannot hold a ``TypeError``).
"""

from __future__ import annotations

TYPE_CHECKING = False  # no typing at run time: it imports `re`
if TYPE_CHECKING:
    from typing import Any

_WHITESPACE = " \t\n\r"  # json's WHITESPACE pattern: [ \t\n\r]*
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _Context:
    """What the C scanner reads of a ``JSONDecoder`` (its defaults)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


def _scanner() -> Any:
    try:
        from _json import make_scanner
    except ImportError:  # a Python without the C accelerator: json.loads is the path
        return None
    return make_scanner(_Context())  # type: ignore[arg-type]  # a decoder's attributes


_SCAN = _scanner()


def loads(text: str) -> Any:
    """``json.loads(text)`` for a ``str`` (see the module)."""
    if _SCAN is not None and not text.startswith("\ufeff"):
        n, i = len(text), 0
        while i < n and text[i] in _WHITESPACE:
            i += 1
        try:
            value, end = _SCAN(text, i)
        except (StopIteration, ValueError, RecursionError):
            value, end = None, -1
        else:
            while end < n and text[end] in _WHITESPACE:
                end += 1
        if end == n:
            return value
    import json

    return json.loads(text)


def _not_json(value: object) -> object:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def _encoder() -> Any:
    try:
        from _json import encode_basestring, make_encoder
    except ImportError:
        return None, None
    return make_encoder, encode_basestring


_MAKE_ENCODER, _STRING = _encoder()


def dumps_sorted(value: Any) -> str:
    """``json.dumps(value, sort_keys=True, ensure_ascii=False)`` (see the module)."""
    if _MAKE_ENCODER is None:
        import json

        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    if isinstance(value, str):
        return str(_STRING(value))
    encode = _MAKE_ENCODER({}, _not_json, _STRING, None, ": ", ", ", True, False, True)
    return "".join(encode(value, 0))

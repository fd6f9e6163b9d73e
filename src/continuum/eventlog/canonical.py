"""Canonical JSON and digests (pure).

Canonical form: sorted keys, no whitespace, UTF-8 (non-ASCII kept as is), no NaN or
Infinity. The same value always encodes to the same bytes, so a hash over it is stable
across processes, hosts and backends.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from json.encoder import encode_basestring
from typing import Any

import continuum.digest as _digest
from continuum.errors import UsageError

# The C encoder json.dumps uses (None on a Python without the accelerator).
c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)


def _check_finite(value: Any, path: str) -> None:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UsageError(
                f"value at {path or '$'} is {value!r}; JSON has no NaN or Infinity",
                code="usage.non_finite_number",
                hint="send a finite number, or null / a string instead",
            )
    elif isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise UsageError(
                    f"key {k!r} at {path or '$'} is not a string",
                    code="usage.non_string_key",
                    hint="JSON object keys must be strings",
                )
            _check_finite(v, f"{path}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_finite(v, f"{path}[{i}]")
    elif value is None or isinstance(value, (str, int, bool)):
        return
    else:
        raise UsageError(
            f"value at {path or '$'} has type {type(value).__name__}, which JSON cannot hold",
            code="usage.not_json",
            hint="use only objects, arrays, strings, numbers, booleans and null",
        )


def _keys_are_strings(value: Any) -> bool:
    # json.dumps silently turns int/float/bool/None keys into strings, so two different
    # values would share one canonical form; refuse them instead (cheap, iterative walk).
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, str):
                    return False
                if isinstance(v, (dict, list, tuple)):
                    stack.append(v)
        elif isinstance(item, (list, tuple)):
            stack.extend([v for v in item if isinstance(v, (dict, list, tuple))])
    return True


# One encoder for every call: ``json.dumps`` with these options builds an identical one
# per call, which costs more than encoding a small event (verify does it per event).
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_json(value: Any) -> str:
    """Encode ``value`` canonically; refuses NaN, Infinity, non-string keys and non-JSON types."""
    try:
        out = _ENCODER.encode(value)
    except (ValueError, TypeError):
        _check_finite(value, "")
        raise
    if not _keys_are_strings(value):
        _check_finite(value, "")
    return out


def _direct_encoder() -> Callable[[Any], str] | None:
    """The C encoder ``_ENCODER`` builds on every call, built once, without the check for
    reference cycles (a value parsed from JSON, or already encoded once by
    ``canonical_json``, has none): a third less time per record, which verify pays for
    every action of a run."""
    if c_make_encoder is None:  # a Python without the C accelerator
        return None
    encoder = c_make_encoder(
        None, _ENCODER.default, encode_basestring, None, ":", ",", True, False, False
    )

    def encode(value: Any) -> str:
        return "".join(encoder(value, 0))

    return encode


_DIRECT = _direct_encoder()


def canonical_json_parsed(value: Any) -> str:
    """``canonical_json`` of a value ``parse_json`` produced (or one ``canonical_json``
    already accepted, e.g. a record built from checked payloads).

    JSON object keys are always strings, so the key check cannot fail for such a value
    and is skipped; a number JSON cannot hold (``1e400`` parses to infinity) still raises
    ``ValueError`` here, where ``canonical_json`` would raise its ``UsageError``.
    """
    if _DIRECT is not None and type(value) is not str:
        return _DIRECT(value)
    return _ENCODER.encode(value)


def canonical_bytes(value: Any) -> bytes:
    try:
        return canonical_json(value).encode("utf-8")
    except UnicodeEncodeError as e:
        raise UsageError(
            "a string holds a lone surrogate, which UTF-8 cannot encode",
            code="usage.not_utf8",
            hint="send valid Unicode text (no unpaired \\ud800-\\udfff escapes)",
        ) from e


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    hexdigest: str = _digest.sha256(data).hexdigest()
    return hexdigest


def digest(value: Any) -> str:
    """SHA-256 hex digest of the canonical encoding of ``value``."""
    return sha256_hex(canonical_bytes(value))


def text_digest(text: str, stated: str) -> str | None:
    """What to compare with the hash ``stated`` for JSON ``text`` (a stored checkpoint's
    state): the text's own hash when it is that hash (the text is then byte for byte the
    one hashed, and what it holds cannot have changed), else ``digest`` of the value it
    holds, or None if it does not parse. Continuum writes such text as the canonical
    encoding of its value, whose own hash is the value's digest: the first answer spares
    parsing and encoding it again, which costs a thousand times more on a long run's
    state; any other text is judged by its value, as ``digest`` does."""
    try:
        quick: str | None = sha256_hex(text)
    except UnicodeEncodeError:  # a lone surrogate: parsing says what is wrong
        quick = None
    if quick == stated:
        return quick
    try:
        return digest(parse_json(text))
    except (ValueError, TypeError):
        return None


def digest_texts(*parts: str) -> str:
    """``digest(list(parts))`` of a list of strings, its canonical JSON written directly
    (each string as ``canonical_json`` encodes it, no spaces): the identities' digests
    of fixed lists of text, without the encoder's walk (a third of the cost)."""
    if not all(type(p) is str for p in parts):
        return digest(list(parts))  # not all text: the encoder's way, its checks and errors
    text = "[" + ",".join([encode_basestring(p) for p in parts]) + "]"
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        return digest(list(parts))  # a lone surrogate: canonical_bytes raises its error
    hexdigest: str = _digest.sha256(data).hexdigest()
    return hexdigest


def _reject_constant(token: str) -> Any:
    raise ValueError(f"non-finite number {token} is not allowed")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def fast_parse(text: str) -> Any:
    """``parse_json`` for text a store wrote (canonical JSON: no surrounding whitespace),
    without the per-call whitespace handling; anything else takes ``parse_json``."""
    try:
        value, end = _DECODER.raw_decode(text)
    except ValueError:
        return parse_json(text)  # raises the same error parse_json would
    return value if end == len(text) else parse_json(text)


def parse_json(text: str) -> Any:
    """Parse JSON, refusing NaN and Infinity literals (they are not canonical)."""
    if isinstance(text, str) and not text.startswith("\ufeff"):
        return _DECODER.decode(text)  # what json.loads does for a str, minus a decoder per call
    return json.loads(text, parse_constant=_reject_constant)

"""An action's identity: its arguments normalized (paths resolved, text in one form), its
dedup key from the caller's key or from the arguments, and the keys under which the same
action was known to an imported or an original store. Pure but for path resolution.

Imports eventlog, the store's original-format reader and the leaves."""

from __future__ import annotations

import posixpath
import re
import unicodedata
from typing import TYPE_CHECKING, Any, NamedTuple

from continuum.eventlog.canonical import canonical_json, digest, digest_texts

if TYPE_CHECKING:
    from continuum.store.base import RunHead
    from continuum.store.models import RunInfo

# Field names that say their value is a file system path, even a bare ``a.txt``.
_PATH_WORDS = ("path", "file", "dir", "folder")


_PATH_NAMES = frozenset({"dest", "destination", "src", "attachment", "cwd"})


def _path_field(field: str | None) -> bool:
    if field is None:
        return False
    name = field.lower()
    return name in _PATH_NAMES or any(word in name for word in _PATH_WORDS)


def _looks_like_path(value: str, field: str | None = None, *, spaced: bool = True) -> bool:
    """A path: written as one (``/``, ``./``, ``../``, ``~/`` first), holding a ``/``, or
    under a field named like a path. With whitespace inside (``my report.txt``) only the
    first and the last count: prose holds slashes too (``and/or``), and a path resolves
    against the working directory, which the identity of prose must not depend on.
    ``spaced=False`` is the rule before issue 30 (nothing with whitespace was a path)."""
    if not value or "://" in value or len(value) > 4096:
        return False
    written_as_path = value.startswith(("/", "./", "../", "~/"))
    named_as_path = _path_field(field) and value not in (".", "..")
    if any(c.isspace() for c in value):
        return spaced and (written_as_path or named_as_path)
    return written_as_path or "/" in value or named_as_path


# A bare file name (``a.txt``, ``my report.txt``): no slash, an extension that starts with
# a letter (not ``1.5``, ``v1.2``), no ``@`` (not an address). Under a field not named like
# a path it stays text in the identity, but the fallback resolves it like a path, so the
# same name written as a path (``./a.txt``) is at least a ``possible_duplicate``.
_FILE_NAME = re.compile(r"[^/\\@~][^/\\@]*\.[A-Za-z][A-Za-z0-9]{0,9}")


def _text(value: str) -> str:
    """One form per text: Unicode NFC, surrounding whitespace dropped, case kept."""
    return unicodedata.normalize("NFC", value).strip()


def normalize_arguments(
    value: Any, cwd: str, field: str | None = None, *, spaced: bool = True
) -> Any:
    """Canonical arguments for identity (the stored arguments stay as given).

    Strings are NFC with surrounding whitespace dropped (``INV-001 `` is ``INV-001``);
    whole floats are integers (``1.0`` is ``1``); paths are made absolute against ``cwd``
    and normalized lexically, so ``a.txt``, ``./a.txt`` and ``/w/out/../a.txt`` from
    ``/w`` are one file. A string is a path when it starts with ``/``, ``./`` or ``../``,
    or is under a field named like a path (``path``, ``file``, ``dir``, ``folder`` in its
    name, or ``dest``, ``destination``, ``src``, ``attachment``, ``cwd``), whitespace
    inside or not (``./my report.txt``); or when it holds a ``/`` and no whitespace. A
    URL (``://``), ``~/...`` and a string over 4096 characters stay as written. Lexical
    only: no symlink resolution, no file system access. Case is kept: ``INV-1`` and
    ``inv-1`` are different. ``spaced=False`` applies the rules before issue 30.
    """
    if isinstance(value, dict):
        return {_text(k): normalize_arguments(v, cwd, k, spaced=spaced) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize_arguments(v, cwd, field, spaced=spaced) for v in value]
    if isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = _text(value)
        if _looks_like_path(text, field, spaced=spaced) and not text.startswith("~"):
            return posixpath.normpath(posixpath.join(cwd, text))
        return text
    return value


def _leaves(value: Any, out: list[str], cwd: str | None = None) -> list[str]:
    """Every leaf value as canonical JSON; with ``cwd``, a bare file name as its path."""
    if isinstance(value, dict):
        for v in value.values():
            _leaves(v, out, cwd)
    elif isinstance(value, list):
        for v in value:
            _leaves(v, out, cwd)
    elif cwd is not None and isinstance(value, str) and _FILE_NAME.fullmatch(value):
        out.append(canonical_json(posixpath.join(cwd, value)))
    else:
        out.append(canonical_json(value))
    return out


def _type_part(action_type: str) -> str:
    # ':' and '#' end the type inside an action_key, so they (and '%') are escaped in it:
    # type "send" + key "x:y" and type "send:x" + key "y" must not share a key.
    return action_type.replace("%", "%25").replace(":", "%3A").replace("#", "%23")


def action_key_of(action_type: str, key: str | None, dedup_key: str) -> str:
    """The readable, unambiguous reference to an action: ``TYPE:KEY`` or ``TYPE#HASH``."""
    if key is not None:
        return f"{_type_part(action_type)}:{key}"
    return f"{_type_part(action_type)}#{dedup_key[:16]}"


def normalize_key(action_type: str, key: str) -> str:
    """A key in one form: NFC, trimmed, and without a repeated ``TYPE:`` prefix
    (``upload`` with key ``upload:a.csv`` is the same action as with key ``a.csv``)."""
    text = _text(key)
    prefix = action_type + ":"
    if text.startswith(prefix) and len(text) > len(prefix):
        text = text[len(prefix) :]
    return text


class ActionIdentity(NamedTuple):
    """How the ledger finds an action: ``action_id`` and ``dedup_key`` (both unique in the
    index), ``fallback_key`` (a suspicion only). ``earlier`` and ``earlier_fallback`` are
    the (action_id, dedup_key) pairs and fallback keys the rules before issue 30 gave the
    same call, looked up when the current ones find nothing: an action recorded before an
    upgrade is still found after it."""

    action_id: str
    action_key: str
    dedup_key: str
    fallback_key: str | None
    operation_key: str
    normalized_arguments: Any
    earlier: tuple[tuple[str, str], ...] = ()
    earlier_fallback: tuple[str, ...] = ()


def _args_keys(action_type: str, normalized: Any, cwd: str | None) -> tuple[str, str]:
    dedup = digest(["args", action_type, normalized])
    return dedup, digest(["fallback", action_type, sorted(_leaves(normalized, [], cwd))])


def action_identity(
    run_id: str, action_type: str, arguments: Any, key: str | None, cwd: str
) -> ActionIdentity:
    """Stable identity of an action: from the business key, else from its arguments.

    Without a key, a fallback key built from the multiset of leaf values (field names
    dropped, values normalized, a bare file name resolved like a path) finds the same call
    with renamed fields or another form of one path; such a match is only a suspicion
    (``{from: bob, to: alice}`` has the leaves of ``{from: alice, to: bob}``), so the
    ledger reports it as ``possible_duplicate`` and never as done.
    """
    action_type = _text(action_type)
    normalized = normalize_arguments(arguments, cwd)
    earlier: tuple[tuple[str, str], ...] = ()
    earlier_fallback: tuple[str, ...] = ()
    fallback: str | None
    if key is not None:
        key = normalize_key(action_type, key)
        dedup = digest_texts("key", action_type, key)
        fallback = None
    else:
        dedup, fallback = _args_keys(action_type, normalized, cwd)
        # Before issue 30: no path with whitespace, no bare file name in the fallback.
        old, old_fallback = _args_keys(
            action_type, normalize_arguments(arguments, cwd, spaced=False), None
        )
        if old != dedup:
            earlier = (("act_" + digest_texts(run_id, old)[:24], old),)
        if old_fallback != fallback:
            earlier_fallback = (old_fallback,)
    return ActionIdentity(
        action_id="act_" + digest_texts(run_id, dedup)[:24],
        action_key=action_key_of(action_type, key, dedup),
        dedup_key=dedup,
        fallback_key=fallback,
        operation_key="op_" + digest_texts("operation", run_id, dedup)[:32],
        normalized_arguments=normalized,
        earlier=earlier,
        earlier_fallback=earlier_fallback,
    )


def imported_identity(run_id: str, action_type: str, original_key: str) -> ActionIdentity:
    """The identity ``import --from-original`` gives an action of the original's ledger:
    keyed by the original's own (hashed) ledger key, which is all the original stored."""
    return action_identity(run_id, action_type, None, original_key, "/")


def original_identities(
    run: RunInfo | RunHead, action_type: str, keys: tuple[str | None, ...], arguments: Any
) -> list[tuple[str, str]]:
    """Where the import indexed the action the original would have found for this call.

    Only in a run imported from the original (``imported_from`` in its metadata): the
    original's ledger key for the call (``original_action_key``: the hash of its key, or
    of its arguments when ``keys`` is ``(None,)``), scoped to the original run's id or
    unscoped, as ``imported_identity`` keyed it. ``action_type`` and ``keys`` are tried
    as given and as normalized (the original hashed them as given). Pairs of
    (action_id, dedup_key), at most eight.
    """
    origin = run.metadata.get("imported_from")
    if not isinstance(origin, dict) or not isinstance(origin.get("format"), str):
        return []
    from continuum.store.original import ORIGINAL_FORMAT, original_action_key

    if origin.get("format") != ORIGINAL_FORMAT:
        return []
    original_run = origin.get("run_id")
    if not isinstance(original_run, str):
        return []
    found: list[tuple[str, str]] = []
    for scope in (original_run, None):
        for type_ in dict.fromkeys((action_type, _text(action_type))):
            for key in dict.fromkeys(keys):
                hashed = original_action_key(scope, type_, key=key, arguments=arguments)
                if hashed is not None:
                    ident = imported_identity(run.run_id, type_, hashed)
                    found.append((ident.action_id, ident.dedup_key))
    return list(dict.fromkeys(found))

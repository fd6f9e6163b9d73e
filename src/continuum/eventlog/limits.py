"""How deep and how large one entry of the log may be: one limit for every way in.

An agent's value (a tool call's arguments, a result, an error) nested about 260 levels
deep used to be accepted by the Python API, the hooks' gate, the adapters and the
effect seam (only the MCP edge capped it, at 64), sealed into the log, and from then on
every listing, checkpoint, resume and briefing of that run failed in pydantic's
serializer ("Maximum serialization depth exceeded"). Now the store refuses, at every
append, a payload nested deeper than ``MAX_DEPTH`` or larger than ``MAX_ENTRY_BYTES``
as canonical JSON, naming the field, the limit and where it went over; nothing is
written. And since a log written before may already hold such a value, the fold keeps
a copy of a too-deep value cut at ``MAX_DEPTH`` (``clip_deep``): what a person reads and
a checkpoint stores never breaks, and the full value stays in its event.

Pure, standard library only (a leaf of the core).
"""

from __future__ import annotations

from typing import Any

from continuum.errors import UsageError

MAX_DEPTH = 64
"""Deepest JSON value kept in one field of an entry (the field's value is level 1), as
the MCP edge counts an argument."""

MAX_ENTRY_BYTES = 1024 * 1024
"""Largest entry (an event's payload) as canonical JSON, in UTF-8 bytes: the MCP edge's
default message limit, so nothing another edge accepts could not arrive over MCP."""

CLIPPED = "$continuum_clipped"


def _path(parts: list[str | int]) -> str:
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts).lstrip(".")
    return text if len(text) <= 120 else text[:60] + " ... " + text[-55:]


def too_deep(value: Any, limit: int = MAX_DEPTH) -> str | None:
    """The path of the first container nested deeper than ``limit``, or None. Iterative:
    no value can exhaust the stack here."""
    stack: list[tuple[Any, int, list[str | int]]] = [(value, 1, [])]
    while stack:
        item, level, path = stack.pop()
        if isinstance(item, dict):
            if level > limit and item:
                return _path(path) or "$"
            stack.extend((v, level + 1, [*path, str(k)]) for k, v in item.items())
        elif isinstance(item, list | tuple):
            if level > limit and item:
                return _path(path) or "$"
            stack.extend((v, level + 1, [*path, i]) for i, v in enumerate(item))
    return None


def check_entry(payload: Any, text: str, what: str) -> None:
    """Refuse an entry (``payload``, encoded as ``text``) over the depth or size limit:
    ``UsageError`` ``usage.too_deep`` / ``usage.too_large`` naming the field."""
    if len(text) > MAX_ENTRY_BYTES // 4 and len(text.encode("utf-8")) > MAX_ENTRY_BYTES:
        raise UsageError(
            f"{what} cannot be recorded: it is {len(text.encode('utf-8')):,} bytes as JSON, "
            f"over the limit of {MAX_ENTRY_BYTES:,}; nothing was written",
            code="usage.too_large",
            hint="record a digest or a reference to large content, not the content itself",
            limit=MAX_ENTRY_BYTES,
        )
    # A field's value more than MAX_DEPTH deep needs that many brackets, plus the payload's
    # own: count them in C first.
    if text.count("{") + text.count("[") <= MAX_DEPTH + 1 or not isinstance(payload, dict):
        return
    for field, value in payload.items():
        inner = too_deep(value)
        if inner is None:
            continue
        where = (
            str(field)
            if inner == "$"
            else f"{field}.{inner}"
            if inner[0] != "["
            else f"{field}{inner}"
        )
        raise UsageError(
            f"{what} cannot be recorded: field {where!r} is nested more than {MAX_DEPTH} "
            "levels deep; nothing was written",
            code="usage.too_deep",
            hint=f"send a flatter value (at most {MAX_DEPTH} levels)",
            field=where,
            limit=MAX_DEPTH,
        )


def check_value(value: Any, field: str) -> None:
    """``check_entry`` for one field before it is encoded or walked by other code (the
    ledger's identity recurses through arguments)."""
    inner = too_deep(value)
    if inner is not None:
        where = (
            field if inner == "$" else f"{field}{inner}" if inner[0] == "[" else f"{field}.{inner}"
        )
        raise UsageError(
            f"{field} cannot be recorded: field {where!r} is nested more than {MAX_DEPTH} "
            "levels deep; nothing was written",
            code="usage.too_deep",
            hint=f"send a flatter value (at most {MAX_DEPTH} levels)",
            field=where,
            limit=MAX_DEPTH,
        )


def clip_deep(value: Any, limit: int = MAX_DEPTH) -> Any:
    """``value`` itself when it is at most ``limit`` deep; else a copy whose containers
    below ``limit`` are each replaced by ``{CLIPPED: "nested deeper than N levels"}``.
    Deterministic, iterative. Only for values already in a log (new ones are refused)."""
    if not isinstance(value, dict | list) or too_deep(value, limit) is None:
        return value
    marker = {CLIPPED: f"nested deeper than {limit} levels; the full value is in its event"}
    root: list[Any] = [None]
    # (source, level, container to fill, key in it)
    stack: list[tuple[Any, int, Any, Any]] = [(value, 1, root, 0)]
    while stack:
        item, level, parent, key = stack.pop()
        if isinstance(item, dict | list) and item and level > limit:
            parent[key] = dict(marker)
        elif isinstance(item, dict):
            copy: dict[str, Any] = {}
            parent[key] = copy
            for k, v in item.items():
                copy[k] = None
                stack.append((v, level + 1, copy, k))
        elif isinstance(item, list):
            items: list[Any] = [None] * len(item)
            parent[key] = items
            stack.extend((v, level + 1, items, i) for i, v in enumerate(item))
        else:
            parent[key] = item
    return root[0]


def clip_nested(value: Any) -> Any:
    """``clip_deep`` for the fold's hot path: a flat value (no container inside a
    container, as most arguments are) is returned at once, unwalked (a plain loop: no
    generator per value, which cost more than the look itself)."""
    if isinstance(value, dict):
        for v in value.values():
            if isinstance(v, (dict, list)):
                return clip_deep(value)
    elif isinstance(value, list):
        for v in value:
            if isinstance(v, (dict, list)):
                return clip_deep(value)
    return value

"""``ActionRecord``'s fields checked as plain data (the ledger's hot path reads an index
row's record without building the pydantic model).

``is_plain_record(record)`` is true only when the model would take every field exactly
as it is: each present field of its plain type (text is ``str``, a count is ``int`` and
not ``bool``, a status one of its words), every required field present. Then reading the
dict gives what the model's attributes give (defaults aside, which the reader applies);
anything else goes to the model, which coerces it or refuses it as damaged.
tests/property/test_fast_paths.py checks the implication with random records.

Pure: imports the leaves."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from continuum.types import ActionStatus, Origin

_TEXT = ("action_id", "action_key", "action_type", "dedup_key", "operation_key")
_TEXT_OR_NONE = (
    "key",
    "fallback_key",
    "approval_id",
    "external_id",
    "error",
    "note",
    "settled_at",
)
_COUNTS = ("intercepted_sequence", "last_sequence")
_STATUSES = frozenset(s.value for s in ActionStatus)
_ORIGINS = frozenset(o.value for o in Origin)
_KNOWN = frozenset(
    (
        *_TEXT,
        *_TEXT_OR_NONE,
        *_COUNTS,
        "arguments",
        "replay",
        "status",
        "attempt",
        "owner",
        "result",
        "origin",
        "settled_by",
        "versions",
        "usage",
    )
)


def _str_keys(value: Any) -> bool:
    return type(value) is dict and all(type(k) is str for k in value)


def is_plain_record(record: Mapping[str, Any]) -> bool:
    """Whether ``ActionRecord.model_validate(record)`` would take each field as it is."""
    if type(record) is not dict or not _KNOWN.issuperset(record):
        return False
    get = record.get
    if not all(type(get(k)) is str for k in _TEXT):
        return False
    if not all(type(get(k)) is int for k in _COUNTS):
        return False
    if not all(get(k) is None or type(get(k)) is str for k in _TEXT_OR_NONE):
        return False
    status, origin = get("status"), get("origin")
    if type(status) is not str or status not in _STATUSES:
        return False
    if type(origin) is not str or origin not in _ORIGINS:
        return False
    settled_by = get("settled_by")
    if settled_by is not None and (type(settled_by) is not str or settled_by not in _ORIGINS):
        return False
    if "replay" in record and type(record["replay"]) is not str:
        return False
    if "attempt" in record and type(record["attempt"]) is not int:
        return False
    if "owner" in record and not _str_keys(record["owner"]):
        return False
    versions = get("versions")
    if versions is not None and not (
        _str_keys(versions) and all(type(v) is str for v in versions.values())
    ):
        return False
    usage = get("usage")
    return usage is None or (type(usage) is list and all(_str_keys(u) for u in usage))


def status_of(record: Mapping[str, Any]) -> ActionStatus:
    """A plain record's status (``is_plain_record`` checked it is one)."""
    return ActionStatus(record["status"])


def failure_unconfirmed(record: Mapping[str, Any]) -> bool:
    """``ActionRecord.failure_unconfirmed`` of a plain record: failed on the word of an
    agent (or of nobody known)."""
    return record["status"] == ActionStatus.FAILED and record.get("settled_by") not in (
        Origin.HUMAN,
        Origin.DETERMINISTIC,
    )

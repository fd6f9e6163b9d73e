"""What the payload of each known event type must hold (pure).

Checked twice: at append, so a malformed payload of a known type is refused with an
error naming the field and nothing is written; and in the fold, so an event that got
into a log some other way (an older version, an import, a direct SQL write) is counted
as malformed instead of being silently dropped, and the verdict is never "safe" on it.

A payload may carry fields not listed here (they are kept and ignored). Unknown event
types are not checked: they never break a fold.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from continuum.errors import UsageError
from continuum.eventlog.events import EventType
from continuum.untrusted import unsafe_characters

Check = Callable[[Any], str | None]  # None if fine, else what is wrong

REPLAYS = ("never", "reconcile", "idempotent", "safe")
PROVIDERS = ("static", "file", "git", "callable")
CONFIRM_SCOPES = ("goal", "progress", "plan", "decisions", "findings", "evidence", "model", "all")
APPROVAL_SCOPES = ("call", "run")  # a grant covers one call, or the action type for the run


def _string(v: Any) -> str | None:
    return None if isinstance(v, str) else "must be a string"


def _name(v: Any) -> str | None:
    return None if isinstance(v, str) and v.strip() else "must be a non-empty string"


def _count(v: Any) -> str | None:
    ok = isinstance(v, int) and not isinstance(v, bool) and v >= 0
    return None if ok else "must be a whole number >= 0"


def _flag(v: Any) -> str | None:
    return None if isinstance(v, bool) else "must be true or false"


def _object(v: Any) -> str | None:
    return None if isinstance(v, dict) else "must be a JSON object"


def _anything(v: Any) -> str | None:
    return None


def _strings(v: Any) -> str | None:
    ok = isinstance(v, list) and all(isinstance(x, str) for x in v)
    return None if ok else "must be a list of strings"


OBSERVATION_KINDS = ("environment", "ui", "content", "tool")
RISKS = ("low", "high")
PERCEPTION_STATUSES = ("verified", "unverified", "contested")
BRANCH_VERDICTS = ("resume", "request_human")


def _names(v: Any) -> str | None:
    ok = isinstance(v, list) and v and all(isinstance(x, str) and x.strip() for x in v)
    return None if ok else "must be a non-empty list of non-empty strings"


COST_FIELDS = ("usd_micros", "tokens")  # a recorded cost (continuum.ledger.budget)


def cost_problem(value: Any) -> str | None:
    """What is wrong with a recorded cost (an estimate or an actual), or None."""
    if not isinstance(value, dict):
        return "must be a JSON object"
    for k, v in value.items():
        if k not in COST_FIELDS:
            return f"has an unknown field {str(k)[:40]!r} (fields: {', '.join(COST_FIELDS)})"
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            return f"field {k!r} must be a whole number >= 0"
    return None


def _cost(v: Any) -> str | None:
    return cost_problem(v)


VERSION_FIELDS = ("prompt_hash", "tool_schema_hash", "model")  # what an action may pin
VERSION_CHARS = 200


def _versions(v: Any) -> str | None:
    """The versions an action was intercepted under: an object of at most the fields
    ``VERSION_FIELDS``, each a non-empty string of at most ``VERSION_CHARS``."""
    if not isinstance(v, dict):
        return "must be a JSON object"
    for k, value in v.items():
        if k not in VERSION_FIELDS:
            return f"has an unknown field {str(k)[:40]!r} (fields: {', '.join(VERSION_FIELDS)})"
        if not isinstance(value, str) or not value.strip() or len(value) > VERSION_CHARS:
            return f"field {k!r} must be a non-empty string of at most {VERSION_CHARS} characters"
    return None


VIA_FIELDS = ("channel", "role", "client")  # how a person's decision was given
VIA_CHANNELS = ("terminal", "script", "page", "mcp")
VIA_CHARS = 200


def _via(v: Any) -> str | None:
    """How a human decision was given: ``channel`` (one of ``VIA_CHANNELS``), the page's or
    HTTP token's ``role`` (a clean name) and the MCP ``client`` name as the client gave it
    (hostile text, kept as data and escaped wherever shown), each at most ``VIA_CHARS``."""
    if not isinstance(v, dict):
        return "must be a JSON object"
    for k, value in v.items():
        if k not in VIA_FIELDS:
            return f"has an unknown field {str(k)[:40]!r} (fields: {', '.join(VIA_FIELDS)})"
        if not isinstance(value, str) or not value or len(value) > VIA_CHARS:
            return f"field {k!r} must be a non-empty string of at most {VIA_CHARS} characters"
    if v.get("channel", VIA_CHANNELS[0]) not in VIA_CHANNELS:
        return f"field 'channel' must be one of {', '.join(VIA_CHANNELS)}"
    role = v.get("role")
    if role is not None and (unsafe_characters(role) or role != role.strip()):
        return "field 'role' must hold no control, bidi, invisible or surrounding space"
    return None


def via_of(channel: str, *, role: str | None = None, client: str | None = None) -> dict[str, str]:
    """The ``via`` of a decision given on ``channel``: keys that do not apply are left out,
    and a client name (the client's own word) is cut to ``VIA_CHARS``, a lone surrogate
    in it spelled as its escape (it has no UTF-8 form to record)."""
    via = {"channel": channel}
    if role:
        via["role"] = role
    if client:
        via["client"] = client.encode("utf-8", "backslashreplace").decode("utf-8")[:VIA_CHARS]
    return via


def check_via(via: Mapping[str, str] | None) -> dict[str, str] | None:
    """``via`` as it is recorded (a plain dict), or ``UsageError`` (``usage.bad_via``)."""
    if via is None:
        return None
    value = dict(via)
    if (problem := _via(value)) is not None:
        raise UsageError(
            f"via {problem}",
            code="usage.bad_via",
            hint="pass via_of(channel, role=..., client=...); nothing was written",
        )
    return value


# For the fold's fast path (it checks every event of a long log): the Python types a
# check can pass at all, and whether passing it is just being of one of them.
_KINDS: dict[Check, tuple[frozenset[type] | None, bool]] = {
    _string: (frozenset({str}), True),
    _name: (frozenset({str}), False),
    _count: (frozenset({int}), False),
    _flag: (frozenset({bool}), True),
    _object: (frozenset({dict}), True),
    _anything: (None, True),
    _strings: (frozenset({list}), False),
    _names: (frozenset({list}), False),
    _versions: (frozenset({dict}), False),
    _cost: (frozenset({dict}), False),
    _via: (frozenset({dict}), False),
}


# For ``payload_ok``: what a check made by ``_one_of`` allows, and what a ``_nullable``
# check checks when the value is not None.
_ALLOWED: dict[Check, tuple[str, ...]] = {}
_NULLABLE_OF: dict[Check, Check] = {}


def _one_of(*allowed: str) -> Check:
    def check(v: Any) -> str | None:
        return None if v in allowed else f"must be one of {', '.join(allowed)}"

    _KINDS[check] = (frozenset({str}), False)
    _ALLOWED[check] = allowed
    return check


def _nullable(check: Check) -> Check:
    def nullable(v: Any) -> str | None:
        return None if v is None else check(v)

    kinds, exact = _KINDS[check]
    _KINDS[nullable] = (None if kinds is None else kinds | {type(None)}, exact)
    _NULLABLE_OF[nullable] = check
    return nullable


_s, _ns, _n, _nn = _nullable(_string), _string, _nullable(_count), _count

# Per type: {field: (required, check)}.
Schema = dict[str, tuple[bool, Check]]
_ITEM = {"text": (False, _s), "model": (False, _s)}
_ACTION = {"action_id": (True, _name)}

SCHEMAS: dict[str, Schema] = {
    EventType.RUN_STARTED: {
        "goal": (False, _s),
        "total": (False, _n),
        "model": (False, _s),
        "parent": (False, _nullable(_name)),
    },
    EventType.CHILD_STARTED: {"child_run_id": (True, _name), "goal": (False, _s)},
    EventType.HANDOFF_RECORDED: {"note": (True, _name)},
    EventType.BUDGET_SET: {
        "usd_micros": (False, _nullable(_count)),
        "tokens": (False, _nullable(_count)),
        "reason": (False, _s),
        "via": (False, _via),
    },
    EventType.GOAL_SET: {"goal": (True, _ns)},
    EventType.RUN_COMPLETED: {"reason": (False, _s)},
    EventType.RUN_ABORTED: {"reason": (False, _s)},
    EventType.PROGRESS_RECORDED: {
        "completed": (False, _n),
        "total": (False, _n),
        "failed": (False, _n),
        "goal": (False, _s),
    },
    EventType.PLAN_SET: {"steps": (True, _strings)},
    EventType.WORK_ADDED: {"item_id": (False, _s), "cites": (False, _strings), **_ITEM},
    EventType.WORK_COMPLETED: {"item_id": (False, _s)},
    EventType.WORK_FAILED: {"item_id": (False, _s)},
    EventType.DECISION_CREATED: {
        "decision_id": (False, _s),
        "findings": (False, _strings),
        "evidence": (False, _strings),
        **_ITEM,
    },
    EventType.DECISION_INVALIDATED: {"decision_id": (True, _name), "reason": (False, _s)},
    EventType.EVIDENCE_ADDED: {
        "evidence_id": (False, _s),
        "dependencies": (False, _strings),
        "path": (False, _s),
        "sha256": (False, _s),
        "size": (False, _n),
        **_ITEM,
    },
    EventType.REGISTRY_ACCEPTED: {
        "path": (True, _name),
        "registry_sha256": (True, _s),
        "rules": (True, _nn),
        "via": (False, _via),
    },
    EventType.FINDING_ADDED: {"finding_id": (False, _s), "evidence": (False, _strings), **_ITEM},
    EventType.FINDING_INVALIDATED: {"finding_id": (True, _name), "reason": (False, _s)},
    EventType.ENVIRONMENT_CHANGED: {
        "name": (True, _name),
        "status": (False, _nullable(_one_of("changed", "removed"))),
    },
    EventType.PERCEPTION_OBSERVED: {
        "observation_id": (True, _name),
        "subject": (True, _name),
        "signal": (True, _name),
        "value": (True, _anything),
        "kind": (False, _one_of(*OBSERVATION_KINDS)),
        "source": (False, _s),
        "status": (False, _one_of(*PERCEPTION_STATUSES)),  # as judged then (for readers)
    },
    EventType.BRANCH_RESOLVED: {
        "branch_id": (True, _name),
        "choice": (True, _name),
        "observations": (True, _names),
        "risk": (False, _one_of(*RISKS)),
        "rule": (False, _s),
        "reason": (False, _s),
        "verdict": (False, _one_of(*BRANCH_VERDICTS)),  # as judged then (for readers)
        "via": (False, _via),
    },
    EventType.APPROVAL_REQUESTED: {
        "approval_id": (True, _name),
        "action_type": (False, _s),
        "action_id": (False, _s),
        "action_key": (False, _s),
        "key": (False, _s),
        "arguments": (False, _anything),
        "arguments_hash": (False, _s),
        "binding": (False, _s),
        "rule": (False, _s),
        "effect": (False, _s),
        **_ITEM,
    },
    EventType.APPROVAL_GRANTED: {
        "approval_id": (True, _name),
        "reason": (False, _s),
        "scope": (False, _nullable(_one_of(*APPROVAL_SCOPES))),
        "via": (False, _via),
        **_ITEM,
    },
    EventType.APPROVAL_DENIED: {
        "approval_id": (True, _name),
        "reason": (False, _s),
        "via": (False, _via),
        **_ITEM,
    },
    EventType.APPROVAL_REVOKED: {
        "approval_id": (True, _name),
        "reason": (False, _s),
        "via": (False, _via),
        **_ITEM,
    },
    EventType.MODEL_CHANGED: {"model": (True, _name)},
    EventType.MODEL_ASSUMPTION_RECORDED: {
        "assumption_id": (False, _s),
        "cites": (False, _strings),
        "status": (False, _nullable(_one_of("active", "retracted"))),
        **_ITEM,
    },
    EventType.CHECKPOINTED: {
        "through_sequence": (True, _nn),
        "state_hash": (True, _name),
        "reason": (False, _s),
    },
    EventType.HISTORY_ARCHIVED: {
        "from_sequence": (True, _nn),
        "through_sequence": (True, _nn),
        "through_hash": (True, _name),
        "archive_sha256": (True, _name),
        "events": (False, _n),
        "checkpoints": (False, _n),
        "archive_name": (False, _s),
    },
    EventType.HISTORY_IMPORTED: {
        "through_sequence": (True, _nn),
        "through_hash": (True, _name),
        "file_digest": (False, _s),
        "signed_by": (False, _s),
        "source": (False, _s),
    },
    EventType.RUN_FORKED: {
        "from_run": (True, _name),
        "through_sequence": (True, _nn),
        "through_hash": (True, _name),
    },
    EventType.REVIEW_CONFIRMED: {
        "through_sequence": (True, _nn),
        "through_hash": (False, _s),
        "scope": (False, _strings),
        "confirmed": (False, _object),
        "via": (False, _via),
    },
    EventType.ACTION_INTERCEPTED: {
        "action_id": (True, _name),
        "action_key": (True, _name),
        "action_type": (True, _name),
        "dedup_key": (True, _name),
        "operation_key": (True, _name),
        "key": (False, _s),
        "fallback_key": (False, _s),
        "replay": (False, _one_of(*REPLAYS)),
        "owner": (False, _nullable(_object)),
        "approval_id": (False, _s),
        "arguments": (False, _anything),
        "versions": (False, _versions),
        "estimate": (False, _cost),
    },
    EventType.ACTION_RETRIED: {
        **_ACTION,
        "attempt": (False, _n),
        "owner": (False, _nullable(_object)),
        "reason": (False, _s),
        "approval_id": (False, _s),
        "versions": (False, _versions),
        "estimate": (False, _cost),
    },
    EventType.ACTION_COMPLETED: {
        **_ACTION,
        "external_id": (False, _s),
        "result": (False, _anything),
        "actual": (False, _cost),
    },
    EventType.ACTION_FAILED: {
        **_ACTION,
        "error": (False, _s),
        "certain": (False, _flag),
        "actual": (False, _cost),
    },
    EventType.ACTION_MARKED_UNKNOWN: {**_ACTION, "reason": (False, _s)},
    EventType.ACTION_RECONCILED: {
        **_ACTION,
        "occurred": (True, _flag),
        "external_id": (False, _s),
        "note": (False, _s),
        "probe": (False, _nullable(_object)),
        "via": (False, _via),
    },
    EventType.ACTION_COMPENSATED: {**_ACTION, "note": (False, _s)},
}


def _dependency_problem(dep: Any, where: str) -> str | None:
    if not isinstance(dep, dict):
        return f"{where} must be a JSON object with at least a name"
    if "name" not in dep:
        return f'{where}.name is required (the dependency\'s name, e.g. "dataset")'
    problem = _name(dep["name"])
    if problem:
        return f"{where}.name {problem}"
    for field, check in (
        ("provider", _nullable(_one_of(*PROVIDERS))),
        ("version", _s),
        ("checksum", _s),
        ("locator", _s),
    ):
        if field in dep and (problem := check(dep[field])):
            return f"{where}.{field} {problem}"
    return None


def _dependencies_problem(payload: dict[str, Any]) -> str | None:
    if "dependencies" not in payload:  # a single declaration: {"name": ..., "version": ...}
        return _dependency_problem(payload, "payload")
    listed = payload["dependencies"]
    if not isinstance(listed, list) or not listed:
        return "dependencies must be a non-empty list of {name, version|checksum} objects"
    for i, dep in enumerate(listed):
        if (problem := _dependency_problem(dep, f"dependencies[{i}]")) is not None:
            return problem
    return None


def _progress_problem(payload: dict[str, Any]) -> str | None:
    total, completed = payload.get("total"), payload.get("completed")
    failed = payload.get("failed") or 0
    if isinstance(total, int) and isinstance(completed, int) and completed + failed > total:
        return f"completed ({completed}) plus failed ({failed}) exceeds total ({total})"
    return None


_MISSING = object()
_FAST: dict[str, tuple[tuple[str, bool, frozenset[type] | None, bool, Check], ...]] = {
    str(t): tuple((f, req, *_KINDS[chk], chk) for f, (req, chk) in schema.items())
    for t, schema in SCHEMAS.items()
}


def payload_problem(type_: str, payload: Any) -> str | None:
    """What is wrong with ``payload`` for an event of ``type_`` (None: fine or not a known
    type). Most fields are decided by their Python type alone, without a call."""
    if type(payload) is not dict:
        return "the payload must be a JSON object"
    fast = _FAST.get(type_)
    if fast is None:
        return _dependencies_problem(payload) if type_ == EventType.DEPENDENCY_DECLARED else None
    for field, required, kinds, exact, check in fast:
        value = payload.get(field, _MISSING)
        if value is _MISSING:
            if required:
                return f"field {field!r} is required"
            continue
        if kinds is not None and type(value) in kinds:
            if exact:
                continue  # decided by its type alone
            if check is _name and value.strip():
                continue  # a non-blank string (most ids): no call
        if (problem := check(value)) is not None:
            return f"field {field!r} {problem}"
    if type_ == EventType.PROGRESS_RECORDED:
        return _progress_problem(payload)
    return None


# -- the same answer without the message, compiled: ``payload_ok`` ---------------------------
#
# The fold asks of every event of a long log only whether its payload is fine. One
# straight-line function per type answers that (made once, here, from ``SCHEMAS``): each
# field read once, a value whose Python type settles its check accepted without a call,
# every other value given to its check, so the answer is ``payload_problem``'s
# (tests/property/test_fast_paths.py), without its loop over the fields or a message.

# A condition on ``v`` that the check passes whenever it holds (a value it does not settle
# is given to the check itself).
_ACCEPT: dict[Check, str] = {
    _string: "type(v) is str",
    _name: "type(v) is str and v.strip()",
    _count: "type(v) is int and v >= 0",
    _flag: "type(v) is bool",
    _object: "type(v) is dict",
}


def _accept(check: Check) -> str | None:
    if check in _ACCEPT:
        return _ACCEPT[check]
    if check in _ALLOWED:
        return f"type(v) is str and v in {_ALLOWED[check]!r}"
    inner = _accept(_NULLABLE_OF[check]) if check in _NULLABLE_OF else None
    return None if inner is None else f"v is None or ({inner})"


def _compiled(type_: str) -> Callable[[Any], bool]:
    """``payload_problem(type_, payload) is None``, as code (``type_`` one of ``SCHEMAS``)."""
    checks: list[Check] = []
    lines = ["def ok(p):", "    if type(p) is not dict:", "        return False", "    g = p.get"]
    for field, (required, check) in SCHEMAS[type_].items():
        if check is _anything:  # passes any value: only a required one must be there
            if required:
                lines += [f"    if {field!r} not in p:", "        return False"]
            continue
        name, accept = f"c{len(checks)}", _accept(check)
        checks.append(check)
        failed = (
            f"{name}(v) is not None"
            if accept is None
            else f"not ({accept}) and {name}(v) is not None"
        )
        # A required field absent, or a field present with a value its check refuses:
        lines.append(f"    v = g({field!r}, M)")
        lines.append(
            f"    if v is M or {failed}:" if required else f"    if v is not M and {failed}:"
        )
        lines.append("        return False")
    progress = type_ == EventType.PROGRESS_RECORDED  # and its counters must add up
    lines.append("    return P(p) is None" if progress else "    return True")
    names = ", ".join(f"c{i}" for i in range(len(checks)))
    source = (
        f"def make(M, P{', ' if names else ''}{names}):\n"
        + "\n".join("    " + line for line in lines)
        + "\n    return ok\n"
    )
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<payload check of {type_}>", "exec"), namespace)
    made: Callable[[Any], bool] = namespace["make"](_MISSING, _progress_problem, *checks)
    return made


# Made on first use per type: a hook process checks two or three types, and compiling
# every one at import cost it about 8 ms.
_OK: dict[str, Callable[[Any], bool]] = {}
_SCHEMA_TYPES: dict[str, str] = {str(t): t for t in SCHEMAS}


def _ok_for(type_: str) -> Callable[[Any], bool] | None:
    made = _OK.get(type_)
    if made is None:
        known = _SCHEMA_TYPES.get(type_)
        if known is None:
            return None
        made = _OK[type_] = _compiled(known)  # two threads at once: made twice, the same
    return made


def payload_check(type_: str) -> Callable[[Any], bool]:
    """The function that says whether a payload is fine for an event of ``type_``: exactly
    ``payload_problem(type_, payload) is None``, cheaper (compiled for a type of
    ``SCHEMAS``)."""
    compiled = _ok_for(str(type_))
    if compiled is not None:
        return compiled
    return lambda payload: payload_problem(type_, payload) is None


def payload_ok(type_: str, payload: Any) -> bool:
    """``payload_problem(type_, payload) is None``, without building the message."""
    compiled = _OK.get(type_) or _ok_for(str(type_))
    if compiled is None:
        return payload_problem(type_, payload) is None
    return compiled(payload)


def check_payload(type: str, payload: Any) -> None:
    """Raise ``UsageError`` (``usage.bad_payload``) naming what is wrong; nothing is written."""
    problem = payload_problem(str(type), payload)
    if problem is not None:
        raise UsageError(
            f"a {type} event cannot be recorded: {problem}",
            code="usage.bad_payload",
            hint=f"fix the payload (see references/concepts.md for the fields of "
            f"{type}); nothing was written",
            event_type=str(type),
        )

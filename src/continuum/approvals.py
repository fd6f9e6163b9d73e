"""Which calls need a person's decision (``.continuum/approvals.toml``), and whether one was made.

Each ``[[approval]]`` table is one rule::

    [[approval]]
    action_type = "wire_money"                 # the ledger's action type, exactly
    match = { amount = "^[0-9]{5,}" }          # optional: argument path -> regex (search)
    description = "transfers of 10,000 or more"

    [[approval]]
    effect = "git_push"                        # a host effect rule's action_type (hooks)

A call needs approval when any rule matches it: its action type is the rule's
``action_type`` (or, for ``effect``, the call came through the host hook gate under the
effect rule with that action type), and every ``match`` pattern is found in the text of
that argument. ``match`` keys are paths into the arguments (``amount``, ``input.command``:
TOML's dotted keys and nested tables both work); a value that is not text is matched as
its JSON. A call that does not have a matched field at all **counts as a match**: leaving
an argument out never escapes a rule.

Where the rules come from: ``.continuum/approvals.toml`` in the working directory of the
server or command (for the host hooks: the project directory), and the same file beside
a SQLite store (``/data/.continuum/approvals.toml`` for ``/data/agent.db``). When both
exist, both apply: a call matched by either needs approval, so neither file can switch
off a rule of the other. A malformed file is refused with its line, and until it is fixed
every intercept is refused (fail closed); it is read again when it changes.
"""

from __future__ import annotations

import os
import re
import secrets
import tomllib
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from continuum.canonical import canonical_json, digest
from continuum.errors import IntegrityError, InvalidTransitionError, NotFoundError, UsageError
from continuum.events import EventLike, EventType
from continuum.faults import fault_point
from continuum.payloads import APPROVAL_SCOPES
from continuum.projection import TRUSTED_ORIGINS, Approval
from continuum.store.base import MAX_PAGE, ApprovalRow, Storage, WriteTx
from continuum.types import Origin, RunStatus
from continuum.untrusted import check_identifier, unsafe_characters

APPROVALS_FILE = os.path.join(".continuum", "approvals.toml")
_FIELDS = {"action_type", "effect", "match", "description"}
_MISSING = object()


@dataclass(frozen=True)
class ApprovalRule:
    """One ``[[approval]]`` table, compiled."""

    path: str
    index: int  # 1-based among the file's rules
    line: int  # its [[approval]] header (0 if unknown)
    action_type: str | None
    effect: str | None
    match: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = ()
    description: str | None = None

    @property
    def where(self) -> str:
        return f"{self.path} rule #{self.index}" + (f" (line {self.line})" if self.line else "")

    def describe(self) -> str:
        """What the rule gates, in one line (recorded with each approval it asks for)."""
        what = (f"action type {self.action_type}" if self.effect is None else
                f"host effect {self.effect}")
        conds = [f"{'.'.join(path)} ~ /{pattern.pattern}/" for path, pattern in self.match]
        text = what + (f" where {' and '.join(conds)}" if conds else "")
        return f"{self.where}: {text}" + (f" ({self.description})" if self.description else "")

    def matches(self, action_type: str, arguments: Any, effect: str | None = None) -> bool:
        if self.effect is not None:
            if effect != self.effect or action_type != self.effect:
                return False
        elif action_type != self.action_type:
            return False
        for path, pattern in self.match:
            value = _at(arguments, path)
            if value is _MISSING:
                continue  # a missing field matches: leaving it out never escapes the rule
            if not pattern.search(value if isinstance(value, str) else _as_text(value)):
                return False
        return True


@dataclass(frozen=True)
class ApprovalRules:
    """The rules that apply, and the files they were read from."""

    rules: tuple[ApprovalRule, ...] = ()
    sources: tuple[str, ...] = ()

    def find(self, action_type: str, arguments: Any, effect: str | None = None) -> ApprovalRule | None:
        """The first rule that asks a person to decide this call, or None."""
        for rule in self.rules:
            if rule.matches(action_type, arguments, effect):
                return rule
        return None

    def explain(self) -> list[str]:
        if not self.rules:
            where = ", ".join(self.sources) or APPROVALS_FILE
            return [f"no approval rules ({where}): no call needs a person's decision"]
        return [f"{len(self.rules)} rule(s) from {', '.join(self.sources)}; a call matched by "
                "any of them waits for a person's decision:",
                *(f"  {r.describe()}" for r in self.rules)]


def _at(arguments: Any, path: tuple[str, ...]) -> Any:
    value = arguments
    for part in path:
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _as_text(value: Any) -> str:
    try:
        return canonical_json(value)
    except (TypeError, ValueError, UsageError):
        return str(value)


def _bad(path: str, where: str, problem: str) -> UsageError:
    return UsageError(f"approval rules {path}: {where}: {problem}", code="approvals.bad_rules",
                      hint=f"fix {path} (`continuum approvals --rules` shows what is loaded); "
                           "until then every intercept is refused", path=path)


def _header_lines(text: str) -> list[int]:
    return [i for i, line in enumerate(text.splitlines(), 1)
            if re.match(r"\s*\[\[\s*approval\s*\]\]", line)]


def _flatten(table: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    out: list[tuple[tuple[str, ...], Any]] = []
    for name, value in table.items():
        path = prefix + tuple(part for part in str(name).split(".") if part)
        if isinstance(value, Mapping):
            out += _flatten(value, path)
        else:
            out.append((path, value))
    return out


def _name(path: str, where: str, what: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _bad(path, where, f"{what} must be a string")
    try:
        return check_identifier(unicodedata.normalize("NFC", value.strip()), what=what, code="approvals.bad_rules",
                                max_length=200, hint="")
    except UsageError as e:
        raise _bad(path, where, e.message) from None


def _rule(path: str, index: int, line: int, table: Any) -> ApprovalRule:
    where = f"rule #{index}" + (f" (line {line})" if line else "")
    if not isinstance(table, dict):
        raise _bad(path, where, "must be a table")
    unknown = sorted(set(table) - _FIELDS)
    if unknown:
        raise _bad(path, where, f"unknown field(s) {', '.join(map(repr, unknown))}; a rule has "
                                f"{', '.join(sorted(_FIELDS))}")
    action_type = _name(path, where, "action_type", table["action_type"]) \
        if "action_type" in table else None
    effect = _name(path, where, "effect", table["effect"]) if "effect" in table else None
    if action_type is None and effect is None:
        raise _bad(path, where, "name what it gates: action_type = \"...\" (any path) or "
                                "effect = \"...\" (a host effect rule's action_type)")
    if action_type is not None and effect is not None and action_type != effect:
        raise _bad(path, where, f"action_type {action_type!r} and effect {effect!r} differ, so "
                                "the rule could never match; a host effect is recorded under "
                                "its own action_type: keep one of them")
    match = table.get("match", {})
    if not isinstance(match, dict):
        raise _bad(path, where, "match must be a table of argument = regex")
    compiled = []
    for key, pattern in _flatten(match):
        name = ".".join(key)
        if not key:
            raise _bad(path, where, "match has an empty argument name")
        if not isinstance(pattern, str) or not pattern:
            raise _bad(path, where, f"match.{name} must be a non-empty regular expression string")
        try:
            compiled.append((key, re.compile(pattern)))
        except re.error as e:
            raise _bad(path, where, f"match.{name} {pattern!r} is not a valid regular expression "
                                    f"({e})") from e
    description = table.get("description")
    if description is not None and not isinstance(description, str):
        raise _bad(path, where, "description must be a string")
    return ApprovalRule(path=path, index=index, line=line,
                        action_type=None if effect is not None else action_type, effect=effect,
                        match=tuple(compiled), description=description)


def parse_rules(text: str, path: str) -> tuple[ApprovalRule, ...]:
    """Compile one file's rules; ``UsageError`` (``approvals.bad_rules``) names the line."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise _bad(path, "not valid TOML", str(e)) from e
    unknown = sorted(set(data) - {"approval"})
    if unknown:
        raise _bad(path, "top level", f"unknown key(s) {', '.join(map(repr, unknown))}; write "
                                      "each rule as an [[approval]] table")
    tables = data.get("approval", [])
    if not isinstance(tables, list):
        raise _bad(path, "top level", "approval must be an array of tables: [[approval]]")
    lines = _header_lines(text)
    return tuple(_rule(path, i, lines[i - 1] if i <= len(lines) else 0, t)
                 for i, t in enumerate(tables, 1))


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise _bad(path, "cannot be read", e.strerror or type(e).__name__) from e
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _bad(path, "not UTF-8", f"byte {e.start}") from e


def load_rules(paths: Sequence[str]) -> ApprovalRules:
    """Every rule of the files that exist among ``paths`` (absent files have none)."""
    rules: list[ApprovalRule] = []
    sources: list[str] = []
    for path in paths:
        text = _read(path)
        if text is not None:
            rules += parse_rules(text, path)
            sources.append(path)
    return ApprovalRules(rules=tuple(rules), sources=tuple(sources))


def store_dir(store_url: str) -> str | None:
    """The directory of a SQLite store (``sqlite:///d/a.db`` or a path), None for a server."""
    if store_url.startswith("sqlite://"):
        return os.path.dirname(store_url[len("sqlite://"):]) or None
    if "://" in store_url:
        return None
    return os.path.dirname(os.path.abspath(store_url))


def rule_paths(directory: str, store_url: str | None = None) -> list[str]:
    """The approval files that apply: in ``directory``, and beside the store."""
    dirs = [os.path.abspath(directory)]
    beside = store_dir(store_url) if store_url else None
    if beside is not None and os.path.abspath(beside) not in dirs:
        dirs.append(os.path.abspath(beside))
    return [os.path.join(d, APPROVALS_FILE) for d in dirs]


@dataclass
class RuleFiles:
    """The rules of some approval files, read again whenever one of them changes (or
    appears, or goes): an intercept always judges by the files as they are now."""

    paths: tuple[str, ...]
    _seen: tuple[Any, ...] | None = field(default=None, repr=False)
    _rules: ApprovalRules = field(default_factory=ApprovalRules, repr=False)

    @classmethod
    def around(cls, directory: str, store_url: str | None = None) -> RuleFiles:
        return cls(tuple(rule_paths(directory, store_url)))

    def _stamp(self) -> tuple[Any, ...]:
        out: list[Any] = []
        for path in self.paths:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                out.append(None)
            except OSError as e:
                raise _bad(path, "cannot be read", e.strerror or type(e).__name__) from e
            else:
                out.append((st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        return tuple(out)

    def current(self) -> ApprovalRules:
        """The rules now; ``approvals.bad_rules`` while a file is malformed."""
        stamp = self._stamp()
        if stamp != self._seen:
            self._rules = load_rules(self.paths)  # raises before remembering a bad file
            self._seen = stamp
        return self._rules




# -- binding an approval to one call, inside the intercept's transaction ----------------------


def arguments_hash(arguments: Any) -> str:
    """The digest of exactly these arguments (canonical JSON): what a call approval binds."""
    return digest(["arguments", arguments])


def binding_of(action_id: str, args_hash: str) -> str:
    """One call: the action (its ledger identity) with exactly these arguments."""
    return digest(["approval", action_id, args_hash])


@dataclass(frozen=True)
class Verdict:
    """What the approvals say about one call: ``allow`` (under ``approval_id``),
    ``awaiting_approval`` or ``denied`` (with the person's ``reason``)."""

    status: str
    approval_id: str
    reason: str | None = None


def _confirmed(grant: ApprovalRow, read_event: Callable[[int], EventLike | None], *,
               run_wide: bool) -> str:
    """The grant's own event, read back from the verified log: a person's (or trusted
    code's) ``approval_granted`` of this approval. An index row that says "granted"
    without one (an edited index) lets nothing run."""
    rec = grant.record
    seq = rec.get("decided_sequence")
    event = read_event(seq) if isinstance(seq, int) and seq > 0 else None
    if (event is None or event.type != EventType.APPROVAL_GRANTED
            or event.payload.get("approval_id") != grant.approval_id
            or event.source not in TRUSTED_ORIGINS
            or (run_wide and event.payload.get("scope") != "run")):
        raise IntegrityError(
            f"the approval index of run {grant.run_id!r} says {grant.approval_id} was granted, "
            "but the log does not: nothing may proceed", code="integrity.index_mismatch",
            hint=f"run `continuum verify {grant.run_id}`; nothing was changed",
            run_id=grant.run_id, approval_id=grant.approval_id)
    return grant.approval_id


def judge_call(tx: WriteTx, *, rule: ApprovalRule, action_type: str, action_id: str,
               action_key: str, key: str | None, arguments: Any, effect: str | None,
               origin: Origin, under: str | None,
               read_event: Callable[[int], EventLike | None]) -> Verdict:
    """Inside the intercept's write transaction: may this call run now?

    The latest approval bound to exactly this call decides first if it was denied (or
    revoked): a denial stands. Else a grant of this action type for the rest of the run
    allows it; else that approval decides: requested -> wait, granted and not yet used ->
    allow (the caller records the attempt under it, which uses it up: ``under`` is the
    approval the action's last attempt ran under). With
    none, or only a used one, a new approval is requested: its event is appended here, in
    the same transaction, and a repeat of the same call finds it instead of asking again.
    Nothing here ever grants: only ``approval_granted`` from a person does, and a grant
    is read back from the log (``read_event``) before anything runs under it.
    """
    args_hash = arguments_hash(arguments)
    binding = binding_of(action_id, args_hash)
    found = tx.find_approval(binding=binding)
    status = found.record.get("status") if found is not None else None
    if found is not None and status in ("denied", "revoked"):  # a denial of this call stands
        return Verdict("denied", found.approval_id, found.record.get("reason"))
    grant = tx.find_approval(run_grant=action_type)
    if grant is not None:
        return Verdict("allow", _confirmed(grant, read_event, run_wide=True))
    if found is not None and status == "requested":
        return Verdict("awaiting_approval", found.approval_id)
    if found is not None and status == "granted" and under != found.approval_id:
        return Verdict("allow", _confirmed(found, read_event, run_wide=False))
    approval_id = "apr_" + secrets.token_hex(8)
    tx.append(EventType.APPROVAL_REQUESTED, {
        "approval_id": approval_id, "text": rule.description or f"{action_type} needs a "
                                                                "person's decision",
        "action_type": action_type, "action_id": action_id, "action_key": action_key,
        "key": key, "arguments": arguments, "arguments_hash": args_hash, "binding": binding,
        "rule": rule.describe(), "effect": effect}, source=origin)
    return Verdict("awaiting_approval", approval_id)


# -- listing and deciding (``Continuum.approvals`` / ``Continuum.decide``) --------------------

MAX_REASON_CHARS = 2000


class ApprovalInfo(Approval):
    """An approval as listed: the fold's record, its run, and (for a call approval that
    was used) the action that ran under it."""

    run_id: str
    used_by: str | None = None


def approval_info(store: Storage, row: ApprovalRow) -> ApprovalInfo:
    rec = Approval.model_validate(row.record)
    used_by = None
    if rec.action_id is not None and rec.status == "granted" and rec.scope != "run":
        action = store.get_action(row.run_id, rec.action_id)
        if action is not None and action.record.get("approval_id") == rec.id:
            used_by = rec.action_id
    return ApprovalInfo(**rec.model_dump(), run_id=row.run_id, used_by=used_by)


def list_approval_infos(store: Storage, run_id: str | None = None, *, pending_only: bool = True,
                        limit: int = MAX_PAGE) -> list[ApprovalInfo]:
    """Approvals in the order they were requested. ``pending_only``: those still waiting
    for a decision, in runs that are still active (a finished run takes no new effects)."""
    if run_id is not None:
        store.get_run(run_id)  # a missing run is not one without approvals
    rows = store.list_approvals(run_id=run_id, status="requested" if pending_only else None,
                                limit=limit)
    if pending_only:
        active: dict[str, bool] = {}
        for row in rows:
            if row.run_id not in active:
                active[row.run_id] = store.get_run(row.run_id).status == RunStatus.ACTIVE
        rows = [r for r in rows if active[r.run_id]]
    return [approval_info(store, r) for r in rows]


def find_approval_row(store: Storage, approval_id: str, run_id: str | None = None) -> ApprovalRow:
    """The approval ``approval_id`` (of ``run_id``, if given); ``not_found.approval``, or
    ``usage.ambiguous_approval`` when two runs hold that id (logs written by hand)."""
    if not isinstance(approval_id, str) or not approval_id:
        raise UsageError("an approval id is required", code="usage.bad_approval_id",
                         hint="list them with `continuum approvals`")
    rows = [r for r in store.find_approvals(approval_id) if run_id is None or r.run_id == run_id]
    if not rows:
        where = f" in run {run_id!r}" if run_id is not None else ""
        raise NotFoundError(f"approval {approval_id!r} not found{where}",
                            code="not_found.approval",
                            hint="list pending approvals with `continuum approvals`",
                            approval_id=approval_id)
    if len(rows) > 1:
        raise UsageError(f"approval id {approval_id!r} is in several runs "
                         f"({', '.join(sorted(r.run_id for r in rows))})",
                         code="usage.ambiguous_approval", hint="name the run with --run RUN",
                         approval_id=approval_id)
    return rows[0]


def _reason(reason: Any) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise UsageError("a decision needs a reason", code="usage.bad_reason",
                         hint="say why, e.g. --reason \"invoice checked with the customer\"")
    text: str = reason.strip()
    if len(text) > MAX_REASON_CHARS:
        raise UsageError(f"the reason is {len(text)} characters long (at most "
                         f"{MAX_REASON_CHARS})", code="usage.bad_reason", hint="shorten it")
    bad = unsafe_characters(text)
    if bad:
        raise UsageError(f"the reason holds control, bidi or invisible characters "
                         f"({', '.join(bad)})", code="usage.bad_reason",
                         hint="write the reason as one line of plain text")
    return text


def record_decision(store: Storage, approval_id: str, *, allow: bool, reason: str,
                    scope: str = "call", run_id: str | None = None,
                    expect_binding: str | None = None) -> ApprovalInfo:
    """A person's decision on a pending approval, recorded with origin ``human``.

    ``scope="run"`` (allow only) grants the action type for the rest of the run, and
    settles the run's other pending approvals of that type as granted, citing this one.
    ``expect_binding``: the binding the person was shown; if the approval no longer has
    it, nothing is written. Refused (``ledger.invalid_transition``) once decided: a
    decision stands, and a new call asks again.
    """
    if scope not in APPROVAL_SCOPES:
        raise UsageError(f"scope {scope!r} is not call or run", code="usage.bad_scope",
                         hint="use --scope call (this exact call) or --scope run (this action "
                              "type for the rest of the run)")
    if not allow and scope != "call":
        raise UsageError("a denial covers one call (these exact arguments)",
                         code="usage.bad_scope",
                         hint="deny with --scope call (the default); to stop a whole run, "
                              "abort it")
    reason = _reason(reason)
    found = find_approval_row(store, approval_id, run_id)
    with store.write(found.run_id) as tx:
        current = tx.find_approval(approval_id=found.approval_id)
        if current is None:
            raise NotFoundError(f"approval {approval_id!r} not found", code="not_found.approval",
                                hint="list pending approvals with `continuum approvals`")
        rec = Approval.model_validate(current.record)
        if rec.status != "requested":
            by = f" by {rec.decided_by}" if rec.decided_by else ""
            at = f" at {rec.decided_at}" if rec.decided_at else ""
            raise InvalidTransitionError(
                f"approval {approval_id} is already {rec.status}{by}{at}; nothing was recorded",
                hint="a decision stands; the call asks again with new arguments",
                approval_id=approval_id, status=rec.status)
        if expect_binding is not None and rec.binding != expect_binding:
            raise IntegrityError(f"approval {approval_id} is not the one that was shown; "
                                 "nothing was recorded", code="integrity.approval_mismatch",
                                 hint="list it again and decide what is shown")
        if scope == "run" and rec.action_type is None:
            raise UsageError(f"approval {approval_id} names no action type, so it cannot be "
                             "granted for the run", code="usage.bad_scope",
                             hint="grant it for this call only (--scope call)")
        if not allow:
            tx.append(EventType.APPROVAL_DENIED, {"approval_id": rec.id, "reason": reason},
                      source=Origin.HUMAN)
        else:
            tx.append(EventType.APPROVAL_GRANTED, {"approval_id": rec.id, "scope": scope,
                                                   "reason": reason}, source=Origin.HUMAN)
            if scope == "run":
                for other in store.list_approvals(run_id=found.run_id, status="requested"):
                    if other.record.get("action_type") == rec.action_type:
                        tx.append(EventType.APPROVAL_GRANTED, {
                            "approval_id": other.approval_id, "scope": "call",
                            "reason": f"covered by the grant of {rec.id} for the rest of the "
                                      f"run: {reason}"}, source=Origin.HUMAN)
    fault_point("after_decide_commit")
    return approval_info(store, find_approval_row(store, found.approval_id, found.run_id))


__all__ = ["APPROVALS_FILE", "ApprovalInfo", "ApprovalRule", "ApprovalRules", "RuleFiles",
           "Verdict", "approval_info", "arguments_hash", "binding_of", "find_approval_row",
           "judge_call", "list_approval_infos", "load_rules", "parse_rules", "record_decision",
           "rule_paths", "store_dir"]

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
every intercept is refused (fail closed); it is read again when it changes, each read of
one version of the file (a rewrite during the read is read again). A file that held rules
and disappears (or is emptied) refuses the calls its last rules named
(``approvals.rules_missing``) until it is back.

An approval allows a call only as the verified log (or, for archived history, the verified
checkpoint) records it: requested for this action type and exactly these arguments, granted
by a person; the approval index only finds it.
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

from continuum.canonical import canonical_json, digest, parse_json
from continuum.errors import (
    HistoryArchivedError,
    IntegrityError,
    InvalidTransitionError,
    NotFoundError,
    UsageError,
)
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
        what = (
            f"action type {self.action_type}"
            if self.effect is None
            else f"host effect {self.effect}"
        )
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

    def find(
        self, action_type: str, arguments: Any, effect: str | None = None
    ) -> ApprovalRule | None:
        """The first rule that asks a person to decide this call, or None."""
        for rule in self.rules:
            if rule.matches(action_type, arguments, effect):
                return rule
        return None

    def explain(self) -> list[str]:
        if not self.rules:
            where = ", ".join(self.sources) or APPROVALS_FILE
            return [f"no approval rules ({where}): no call needs a person's decision"]
        return [
            f"{len(self.rules)} rule(s) from {', '.join(self.sources)}; a call matched by "
            "any of them waits for a person's decision:",
            *(f"  {r.describe()}" for r in self.rules),
        ]


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
    return UsageError(
        f"approval rules {path}: {where}: {problem}",
        code="approvals.bad_rules",
        hint=f"fix {path} (`continuum approvals --rules` shows what is loaded); "
        "until then every intercept is refused",
        path=path,
    )


def _header_lines(text: str) -> list[int]:
    return [
        i
        for i, line in enumerate(text.splitlines(), 1)
        if re.match(r"\s*\[\[\s*approval\s*\]\]", line)
    ]


def _flatten(
    table: Mapping[str, Any], prefix: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], Any]]:
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
        return check_identifier(
            unicodedata.normalize("NFC", value.strip()),
            what=what,
            code="approvals.bad_rules",
            max_length=200,
            hint="",
        )
    except UsageError as e:
        raise _bad(path, where, e.message) from None


def _rule(path: str, index: int, line: int, table: Any) -> ApprovalRule:
    where = f"rule #{index}" + (f" (line {line})" if line else "")
    if not isinstance(table, dict):
        raise _bad(path, where, "must be a table")
    unknown = sorted(set(table) - _FIELDS)
    if unknown:
        raise _bad(
            path,
            where,
            f"unknown field(s) {', '.join(map(repr, unknown))}; a rule has "
            f"{', '.join(sorted(_FIELDS))}",
        )
    action_type = (
        _name(path, where, "action_type", table["action_type"]) if "action_type" in table else None
    )
    effect = _name(path, where, "effect", table["effect"]) if "effect" in table else None
    if action_type is None and effect is None:
        raise _bad(
            path,
            where,
            'name what it gates: action_type = "..." (any path) or '
            'effect = "..." (a host effect rule\'s action_type)',
        )
    if action_type is not None and effect is not None and action_type != effect:
        raise _bad(
            path,
            where,
            f"action_type {action_type!r} and effect {effect!r} differ, so "
            "the rule could never match; a host effect is recorded under "
            "its own action_type: keep one of them",
        )
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
            raise _bad(
                path, where, f"match.{name} {pattern!r} is not a valid regular expression ({e})"
            ) from e
    description = table.get("description")
    if description is not None and not isinstance(description, str):
        raise _bad(path, where, "description must be a string")
    return ApprovalRule(
        path=path,
        index=index,
        line=line,
        action_type=None if effect is not None else action_type,
        effect=effect,
        match=tuple(compiled),
        description=description,
    )


def parse_rules(text: str, path: str) -> tuple[ApprovalRule, ...]:
    """Compile one file's rules; ``UsageError`` (``approvals.bad_rules``) names the line."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise _bad(path, "not valid TOML", str(e)) from e
    unknown = sorted(set(data) - {"approval"})
    if unknown:
        raise _bad(
            path,
            "top level",
            f"unknown key(s) {', '.join(map(repr, unknown))}; write "
            "each rule as an [[approval]] table",
        )
    tables = data.get("approval", [])
    if not isinstance(tables, list):
        raise _bad(path, "top level", "approval must be an array of tables: [[approval]]")
    lines = _header_lines(text)
    return tuple(
        _rule(path, i, lines[i - 1] if i <= len(lines) else 0, t) for i, t in enumerate(tables, 1)
    )


Stamp = tuple[int, int, int, int]  # inode, size, mtime_ns, ctime_ns
_READ_TRIES = 5


def _stamp_of(st: os.stat_result) -> Stamp:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _read_stamped(path: str) -> tuple[str, Stamp] | None:
    """The whole text of ``path`` and the stamp of exactly what was read, or None if it
    does not exist. Atomic against a concurrent rewrite: the open file is stamped before
    and after the read, and the path after it; if any differ (written meanwhile, or
    replaced by a rename) it is read again, and refused if it never holds still."""
    for _ in range(_READ_TRIES):
        try:
            with open(path, "rb") as f:
                before = _stamp_of(os.fstat(f.fileno()))
                raw = f.read()
                after = _stamp_of(os.fstat(f.fileno()))
            now: Stamp | None = _stamp_of(os.stat(path))
        except FileNotFoundError:
            if _exists(path):  # replaced between the open and the stat: read it again
                continue
            return None
        except OSError as e:
            raise _bad(path, "cannot be read", e.strerror or type(e).__name__) from e
        if before == after == now and len(raw) == after[1]:
            try:
                return raw.decode("utf-8"), after
            except UnicodeDecodeError as e:
                raise _bad(path, "not UTF-8", f"byte {e.start}") from e
    raise _unsettled(path)


def _exists(path: str) -> bool:
    try:
        os.stat(path)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True


def _unsettled(path: str) -> UsageError:
    return _bad(
        path,
        "cannot be read",
        "it kept changing while it was read (is something "
        "rewriting it?); write it to a temporary file and "
        "rename it into place",
    )


def _read(path: str) -> str | None:
    found = _read_stamped(path)
    return found[0] if found is not None else None


def load_rules(paths: Sequence[str]) -> ApprovalRules:
    """Every rule of the files that exist among ``paths`` (absent files have none)."""
    return _load_stamped(paths)[0]


def _load_stamped(
    paths: Sequence[str],
) -> tuple[ApprovalRules, tuple[Stamp | None, ...], dict[str, tuple[ApprovalRule, ...]]]:
    """The rules, the stamp of each file as read (None: absent), and each file's rules."""
    rules: list[ApprovalRule] = []
    sources: list[str] = []
    stamps: list[Stamp | None] = []
    per_file: dict[str, tuple[ApprovalRule, ...]] = {}
    for path in paths:
        found = _read_stamped(path)
        if found is None:
            stamps.append(None)
            continue
        text, stamp = found
        per_file[path] = parse_rules(text, path)
        rules += per_file[path]
        sources.append(path)
        stamps.append(stamp)
    return ApprovalRules(rules=tuple(rules), sources=tuple(sources)), tuple(stamps), per_file


def store_dir(store_url: str) -> str | None:
    """The directory of a SQLite store (``sqlite:///d/a.db`` or a path), None for a server."""
    if store_url.startswith("sqlite://"):
        return os.path.dirname(store_url[len("sqlite://") :]) or None
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
    appears, or goes): an intercept always judges by the files as they are now.

    Fail closed: while a file is malformed every intercept is refused
    (``approvals.bad_rules``); once a file that held rules is gone (or emptied to zero
    bytes, as a rewrite in place does midway), calls of the action types (and host
    effects) its last rules named are refused (``approvals.rules_missing``) rather than run
    without the decision they asked for, until it is back (or rewritten without those
    rules: a file holding only a comment has none)."""

    paths: tuple[str, ...]
    _seen: tuple[Any, ...] | None = field(default=None, repr=False)
    _rules: ApprovalRules = field(default_factory=ApprovalRules, repr=False)
    _held: dict[str, tuple[ApprovalRule, ...]] = field(default_factory=dict, repr=False)
    _gone: dict[str, tuple[ApprovalRule, ...]] = field(default_factory=dict, repr=False)

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
                out.append(_stamp_of(st))
        return tuple(out)

    def current(self) -> ApprovalRules:
        """The rules now; ``approvals.bad_rules`` while a file is malformed."""
        if self._seen is None or self._stamp() != self._seen:
            rules, stamps, per_file = _load_stamped(self.paths)  # raises on a bad file
            for path, stamp in zip(self.paths, stamps, strict=True):
                emptied = stamp is not None and stamp[1] == 0  # truncated, being rewritten?
                if path in per_file and not emptied:
                    self._gone.pop(path, None)
                elif self._held.get(path) or path in self._gone:
                    # It held rules, and went (or was emptied): keep refusing what they named.
                    self._gone[path] = self._held.get(path) or self._gone[path]
            # The stamps are of exactly what was read: a rewrite after the read differs
            # from them, so it is read on the next call, never missed.
            self._rules, self._seen, self._held = rules, stamps, per_file
        return self._rules

    def find(
        self, action_type: str, arguments: Any, effect: str | None = None
    ) -> ApprovalRule | None:
        """``ApprovalRules.find`` on the rules now; refused while a file is malformed, or
        for a call a vanished file's rules named (``approvals.rules_missing``)."""
        rule = self.current().find(action_type, arguments, effect)
        if rule is not None:
            return rule
        for path, lost in self._gone.items():
            for old in lost:
                if old.action_type == action_type or (
                    old.effect is not None and old.effect in (action_type, effect)
                ):
                    raise UsageError(
                        f"approval rules {path} are gone ({old.where} asked a person to "
                        f"decide {action_type} calls); this call is refused rather than run "
                        "without that decision",
                        code="approvals.rules_missing",
                        hint=f"put {path} back (or rewrite it without that rule if no "
                        "decision is needed any more); nothing was recorded",
                        path=path,
                        action_type=action_type,
                    )
        return None


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


def _mismatch(grant: ApprovalRow, why: str) -> IntegrityError:
    return IntegrityError(
        f"the approval index of run {grant.run_id!r} says {grant.approval_id} allows this "
        f"call, but the log does not ({why}): nothing may proceed",
        code="integrity.index_mismatch",
        hint=f"run `continuum verify {grant.run_id}`; nothing was changed",
        run_id=grant.run_id,
        approval_id=grant.approval_id,
    )


ReadKept = Callable[[str], "Mapping[str, Any] | None"]
"""The fold's record of an approval (by id) from the latest verified checkpoint: what an
archived request or decision is checked against once its event left the live log."""


def kept_approval(store: Storage, run_id: str, approval_id: str) -> dict[str, Any] | None:
    """The fold's record of ``approval_id`` in the latest checkpoint of ``run_id`` that its
    sealing ``checkpointed`` event (read from the verified live log) vouches for: state
    hash recorded there and recomputed from the state. None without such a checkpoint or
    record. (What an archived approval event is checked against: ``ReadKept``.)"""
    for cp in store.list_checkpoints(run_id):  # newest first
        sealed = next(
            iter(store.iter_raw(run_id, cp.event_sequence - 1, upto=cp.event_sequence)), None
        )
        if (
            sealed is None
            or sealed.type != EventType.CHECKPOINTED
            or sealed.payload.get("state_hash") != cp.state_hash
        ):
            continue
        try:
            state = parse_json(cp.state_json)
        except (ValueError, TypeError):
            continue
        if digest(state) != cp.state_hash or not isinstance(state, dict):
            continue
        approvals = state.get("approvals")
        record = approvals.get(approval_id) if isinstance(approvals, dict) else None
        if not isinstance(record, dict):
            return None
        try:
            return Approval.model_validate(record).model_dump(mode="json")
        except ValueError:
            return None
    return None


def _logged(
    grant: ApprovalRow,
    seq: Any,
    event_type: EventType,
    read_event: Callable[[int], EventLike | None],
    read_kept: ReadKept | None,
) -> tuple[Mapping[str, Any], Any] | None:
    """(payload, origin) of the approval's event at ``seq``, read back from the verified
    log; for an archived event, the matching fields of the verified checkpoint's record
    (None when neither vouches for it)."""
    if not isinstance(seq, int) or isinstance(seq, bool) or seq <= 0:
        return None
    try:
        event = read_event(seq)
    except HistoryArchivedError:
        kept = read_kept(grant.approval_id) if read_kept is not None else None
        if kept is None:
            return None
        if event_type == EventType.APPROVAL_REQUESTED:
            if kept.get("requested_sequence") != seq:
                return None
            return kept, kept.get("requested_by")
        if kept.get("decided_sequence") != seq or kept.get("status") != "granted":
            return None
        return {"approval_id": kept.get("id"), "scope": kept.get("scope")}, kept.get("decided_by")
    if event is None or event.type != event_type:
        return None
    if event.payload.get("approval_id") != grant.approval_id:
        return None
    return event.payload, event.source


def _confirmed(
    grant: ApprovalRow,
    read_event: Callable[[int], EventLike | None],
    *,
    action_type: str,
    binding: str | None,
    args_hash: str | None,
    read_kept: ReadKept | None = None,
) -> str:
    """The grant checked against the verified log, not the index: its request
    (``approval_requested``) must be for this action type and, for a call grant, bound to
    exactly this call (``binding``, ``args_hash``); its decision must be a person's (or
    trusted code's) ``approval_granted``, for the run when ``binding`` is None. An index
    row that says more than the log (an edited column or record) lets nothing run.
    Archived events are checked against the verified checkpoint (``read_kept``)."""
    rec = grant.record
    if rec.get("status") != "granted":
        raise _mismatch(grant, "it is not granted")
    asked = _logged(
        grant, rec.get("requested_sequence"), EventType.APPROVAL_REQUESTED, read_event, read_kept
    )
    if asked is None:
        raise _mismatch(grant, "no request of it is recorded")
    request, _ = asked
    if request.get("action_type") != action_type:
        raise _mismatch(grant, "it was asked for another action type")
    if binding is not None and (
        request.get("binding") != binding or request.get("arguments_hash") != args_hash
    ):
        raise _mismatch(grant, "it was asked for other arguments")
    decided = _logged(
        grant, rec.get("decided_sequence"), EventType.APPROVAL_GRANTED, read_event, read_kept
    )
    if decided is None:
        raise _mismatch(grant, "no grant of it is recorded")
    payload, source = decided
    if str(source) not in {str(o) for o in TRUSTED_ORIGINS}:
        raise _mismatch(grant, "its grant was not a person's")
    if rec["decided_sequence"] <= rec["requested_sequence"]:  # both ints: _logged checked
        raise _mismatch(grant, "its grant came before its request")
    scope = payload.get("scope") if payload.get("scope") in APPROVAL_SCOPES else "call"
    if binding is None and scope != "run":
        raise _mismatch(grant, "it was not granted for the run")
    return grant.approval_id


def judge_call(
    tx: WriteTx,
    *,
    rule: ApprovalRule,
    action_type: str,
    action_id: str,
    action_key: str,
    key: str | None,
    arguments: Any,
    effect: str | None,
    origin: Origin,
    under: str | None,
    read_event: Callable[[int], EventLike | None],
    read_kept: ReadKept | None = None,
) -> Verdict:
    """Inside the intercept's write transaction: may this call run now?

    The latest approval bound to exactly this call decides first if it was denied (or
    revoked): a denial stands. Else a grant of this action type for the rest of the run
    allows it; else that approval decides: requested -> wait, granted and not yet used ->
    allow (the caller records the attempt under it, which uses it up: ``under`` is the
    approval the action's last attempt ran under). With
    none, or only a used one, a new approval is requested: its event is appended here, in
    the same transaction, and a repeat of the same call finds it instead of asking again.
    Nothing here ever grants: only ``approval_granted`` from a person does, and a grant
    is read back from the log (``read_event``; an archived one from the verified
    checkpoint, ``read_kept``) and checked to be for this action type and, for a call
    grant, for exactly these arguments before anything runs under it.
    """
    args_hash = arguments_hash(arguments)
    binding = binding_of(action_id, args_hash)
    found = tx.find_approval(binding=binding)
    if found is not None and found.record.get("binding") != binding:
        raise _mismatch(found, "its row is filed under another call")
    status = found.record.get("status") if found is not None else None
    if found is not None and status in ("denied", "revoked"):  # a denial of this call stands
        return Verdict("denied", found.approval_id, found.record.get("reason"))
    grant = tx.find_approval(run_grant=action_type)
    if grant is not None:
        if grant.record.get("action_type") != action_type or grant.record.get("scope") != "run":
            raise _mismatch(grant, "its row is filed under another grant")
        return Verdict(
            "allow",
            _confirmed(
                grant,
                read_event,
                action_type=action_type,
                binding=None,
                args_hash=None,
                read_kept=read_kept,
            ),
        )
    if found is not None and status == "requested":
        return Verdict("awaiting_approval", found.approval_id)
    if found is not None and status == "granted" and under != found.approval_id:
        if found.record.get("action_id") != action_id:
            raise _mismatch(found, "it was asked for another action")
        return Verdict(
            "allow",
            _confirmed(
                found,
                read_event,
                action_type=action_type,
                binding=binding,
                args_hash=args_hash,
                read_kept=read_kept,
            ),
        )
    approval_id = "apr_" + secrets.token_hex(8)
    tx.append(
        EventType.APPROVAL_REQUESTED,
        {
            "approval_id": approval_id,
            "text": rule.description or f"{action_type} needs a person's decision",
            "action_type": action_type,
            "action_id": action_id,
            "action_key": action_key,
            "key": key,
            "arguments": arguments,
            "arguments_hash": args_hash,
            "binding": binding,
            "rule": rule.describe(),
            "effect": effect,
        },
        source=origin,
    )
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


def list_approval_infos(
    store: Storage, run_id: str | None = None, *, pending_only: bool = True, limit: int = MAX_PAGE
) -> list[ApprovalInfo]:
    """Approvals in the order they were requested. ``pending_only``: those still waiting
    for a decision, in runs that are still active (a finished run takes no new effects)."""
    if run_id is not None:
        store.get_run(run_id)  # a missing run is not one without approvals
    rows = store.list_approvals(
        run_id=run_id, status="requested" if pending_only else None, limit=limit
    )
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
        raise UsageError(
            "an approval id is required",
            code="usage.bad_approval_id",
            hint="list them with `continuum approvals`",
        )
    rows = [r for r in store.find_approvals(approval_id) if run_id is None or r.run_id == run_id]
    if not rows:
        where = f" in run {run_id!r}" if run_id is not None else ""
        raise NotFoundError(
            f"approval {approval_id!r} not found{where}",
            code="not_found.approval",
            hint="list pending approvals with `continuum approvals`",
            approval_id=approval_id,
        )
    if len(rows) > 1:
        raise UsageError(
            f"approval id {approval_id!r} is in several runs "
            f"({', '.join(sorted(r.run_id for r in rows))})",
            code="usage.ambiguous_approval",
            hint="name the run with --run RUN",
            approval_id=approval_id,
        )
    return rows[0]


def _reason(reason: Any) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise UsageError(
            "a decision needs a reason",
            code="usage.bad_reason",
            hint='say why, e.g. --reason "invoice checked with the customer"',
        )
    text: str = reason.strip()
    if len(text) > MAX_REASON_CHARS:
        raise UsageError(
            f"the reason is {len(text)} characters long (at most {MAX_REASON_CHARS})",
            code="usage.bad_reason",
            hint="shorten it",
        )
    bad = unsafe_characters(text)
    if bad:
        raise UsageError(
            f"the reason holds control, bidi or invisible characters ({', '.join(bad)})",
            code="usage.bad_reason",
            hint="write the reason as one line of plain text",
        )
    return text


def record_decision(
    store: Storage,
    approval_id: str,
    *,
    allow: bool,
    reason: str,
    scope: str = "call",
    run_id: str | None = None,
    expect_binding: str | None = None,
) -> ApprovalInfo:
    """A person's decision on a pending approval, recorded with origin ``human``.

    ``scope="run"`` (allow only) grants the action type for the rest of the run, and
    settles the run's other pending approvals of that type as granted, citing this one.
    ``expect_binding``: the binding the person was shown; if the approval no longer has
    it, nothing is written. Refused (``ledger.invalid_transition``) once decided: a
    decision stands, and a new call asks again.
    """
    if scope not in APPROVAL_SCOPES:
        raise UsageError(
            f"scope {scope!r} is not call or run",
            code="usage.bad_scope",
            hint="use --scope call (this exact call) or --scope run (this action "
            "type for the rest of the run)",
        )
    if not allow and scope != "call":
        raise UsageError(
            "a denial covers one call (these exact arguments)",
            code="usage.bad_scope",
            hint="deny with --scope call (the default); to stop a whole run, abort it",
        )
    reason = _reason(reason)
    found = find_approval_row(store, approval_id, run_id)
    with store.write(found.run_id) as tx:
        current = tx.find_approval(approval_id=found.approval_id)
        if current is None:
            raise NotFoundError(
                f"approval {approval_id!r} not found",
                code="not_found.approval",
                hint="list pending approvals with `continuum approvals`",
            )
        rec = Approval.model_validate(current.record)
        if rec.status != "requested":
            by = f" by {rec.decided_by}" if rec.decided_by else ""
            at = f" at {rec.decided_at}" if rec.decided_at else ""
            raise InvalidTransitionError(
                f"approval {approval_id} is already {rec.status}{by}{at}; nothing was recorded",
                hint="a decision stands; the call asks again with new arguments",
                approval_id=approval_id,
                status=rec.status,
            )
        if expect_binding is not None and rec.binding != expect_binding:
            raise IntegrityError(
                f"approval {approval_id} is not the one that was shown; nothing was recorded",
                code="integrity.approval_mismatch",
                hint="list it again and decide what is shown",
            )
        if scope == "run" and rec.action_type is None:
            raise UsageError(
                f"approval {approval_id} names no action type, so it cannot be granted for the run",
                code="usage.bad_scope",
                hint="grant it for this call only (--scope call)",
            )
        if not allow:
            tx.append(
                EventType.APPROVAL_DENIED,
                {"approval_id": rec.id, "reason": reason},
                source=Origin.HUMAN,
            )
        else:
            tx.append(
                EventType.APPROVAL_GRANTED,
                {"approval_id": rec.id, "scope": scope, "reason": reason},
                source=Origin.HUMAN,
            )
            if scope == "run":
                for other in store.list_approvals(run_id=found.run_id, status="requested"):
                    if other.record.get("action_type") == rec.action_type:
                        tx.append(
                            EventType.APPROVAL_GRANTED,
                            {
                                "approval_id": other.approval_id,
                                "scope": "call",
                                "reason": f"covered by the grant of {rec.id} for the rest of the "
                                f"run: {reason}",
                            },
                            source=Origin.HUMAN,
                        )
    fault_point("after_decide_commit")
    return approval_info(store, find_approval_row(store, found.approval_id, found.run_id))


__all__ = [
    "APPROVALS_FILE",
    "ApprovalInfo",
    "ApprovalRule",
    "ApprovalRules",
    "RuleFiles",
    "Verdict",
    "approval_info",
    "arguments_hash",
    "binding_of",
    "find_approval_row",
    "judge_call",
    "list_approval_infos",
    "load_rules",
    "parse_rules",
    "record_decision",
    "rule_paths",
    "store_dir",
]

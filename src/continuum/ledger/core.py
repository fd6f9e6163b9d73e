"""The two-phase action ledger: intercept, perform, complete (references/contract.md §6).

``intercept`` is one serialized write transaction: it looks the action up in the index
by its dedup key, decides, appends the event and updates the index together, so for one
key exactly one caller across threads, processes and hosts gets ``proceed: true``.
Index rows are built with the fold's own handler (``apply_action_event``), so the index
is the fold's view of each action by construction.
"""

from __future__ import annotations

import os
import posixpath
import re
import socket
import time
import unicodedata
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from continuum.errors import (
    ActionOwnedError,
    IntegrityError,
    InvalidTransitionError,
    LedgerError,
    NotFoundError,
    ReplayWideningError,
    UsageError,
)
from continuum.eventlog.canonical import canonical_json, digest
from continuum.eventlog.events import EventLike, EventType
from continuum.eventlog.limits import check_value
from continuum.eventlog.notices import decide_command
from continuum.faults import fault_point
from continuum.ledger.approval_rules import ApprovalRule, ApprovalRules, RuleFiles
from continuum.ledger.approvals import (
    Verdict,
    judge_call,
    kept_approval,
)
from continuum.state.projection import ActionRecord, apply_action_event
from continuum.store.base import DEFAULT_PAGE, ActionRow, RunInfo, Storage, WriteTx
from continuum.store.original import ORIGINAL_FORMAT, original_action_key
from continuum.types import ActionStatus, InterceptStatus, Origin, ReplayContract, RunStatus
from continuum.untrusted import check_identifier, quoted

DEFAULT_LEASE_SECONDS = 30.0
_SAME: Any = object()  # ``approval_arguments`` not given: an approval binds the arguments


class InterceptResult(BaseModel):
    """The answer to ``intercept``: whether to perform the side effect now, and why.

    ``proceed`` is true for exactly one caller per action (``status`` ``started``):
    perform the effect, then call ``complete`` (or ``fail``) with ``action_key``. For any
    other ``status`` (an ``InterceptStatus``) do not perform it; ``guidance`` says what to
    do instead in one sentence an agent can follow.

    Fields: ``action_id`` (``act_...``) and ``action_key`` (``TYPE:KEY`` or ``TYPE#HASH``)
    name the action, either works as a reference later; ``attempt`` counts tries;
    ``replay`` is its replay contract; ``operation_key`` is stable across attempts, for an
    idempotency key at the external system (given when proceeding, or for an idempotent
    action); ``external_id`` and ``previous_result`` are what was recorded when it
    completed; ``matched_by`` says how an earlier action was found (``key``,
    ``arguments``, ``fallback``; None for a new one); ``similar_action`` is the earlier
    action of a ``possible_duplicate``; ``approval_id`` is the approval the call waits for,
    was denied by, or runs under, and ``denial_reason`` the person's reason for a denial.
    Serialized (JSON, MCP) every enum is its string. See references/api.md.
    """

    model_config = ConfigDict(frozen=True)

    proceed: bool
    status: InterceptStatus
    action_id: str
    action_key: str
    attempt: int
    replay: ReplayContract
    operation_key: str | None = None
    external_id: str | None = None
    previous_result: Any = None
    matched_by: str | None = None  # key | arguments | fallback (None for a new action)
    # possible_duplicate: the earlier action whose values these arguments share.
    similar_action: dict[str, Any] | None = None
    approval_id: str | None = None
    denial_reason: str | None = None
    guidance: str


# -- identity ------------------------------------------------------------------------------

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


class ActionIdentity(BaseModel):
    """How the ledger finds an action: ``action_id`` and ``dedup_key`` (both unique in the
    index), ``fallback_key`` (a suspicion only). ``earlier`` and ``earlier_fallback`` are
    the (action_id, dedup_key) pairs and fallback keys the rules before issue 30 gave the
    same call, looked up when the current ones find nothing: an action recorded before an
    upgrade is still found after it."""

    model_config = ConfigDict(frozen=True)

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
        dedup = digest(["key", action_type, key])
        fallback = None
    else:
        dedup, fallback = _args_keys(action_type, normalized, cwd)
        # Before issue 30: no path with whitespace, no bare file name in the fallback.
        old, old_fallback = _args_keys(
            action_type, normalize_arguments(arguments, cwd, spaced=False), None
        )
        if old != dedup:
            earlier = (("act_" + digest([run_id, old])[:24], old),)
        if old_fallback != fallback:
            earlier_fallback = (old_fallback,)
    return ActionIdentity(
        action_id="act_" + digest([run_id, dedup])[:24],
        action_key=action_key_of(action_type, key, dedup),
        dedup_key=dedup,
        fallback_key=fallback,
        operation_key="op_" + digest(["operation", run_id, dedup])[:32],
        normalized_arguments=normalized,
        earlier=earlier,
        earlier_fallback=earlier_fallback,
    )


def imported_identity(run_id: str, action_type: str, original_key: str) -> ActionIdentity:
    """The identity ``import --from-original`` gives an action of the original's ledger:
    keyed by the original's own (hashed) ledger key, which is all the original stored."""
    return action_identity(run_id, action_type, None, original_key, "/")


def original_identities(
    run: RunInfo, action_type: str, keys: tuple[str | None, ...], arguments: Any
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
    if not isinstance(origin, dict) or origin.get("format") != ORIGINAL_FORMAT:
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


# -- owners and leases --------------------------------------------------------------------


def _proc_stat(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/PID/stat (state first), or None where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
        return data.rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot), against pid reuse."""
    fields = _proc_stat(pid)
    return fields[19] if fields and len(fields) > 19 else None  # field 22: start time in ticks


def current_owner() -> dict[str, Any]:
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "start": process_start(pid)}


def same_owner(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Is ``a`` the process (or host session) ``b`` names? Host and pid must match, the
    process start time where both have one, and the session exactly: an owner without a
    session (a process acting for itself, such as the operator page inside an HTTP server)
    is not the owner of one of that process's sessions, nor the other way round."""
    return (
        bool(a)
        and (a.get("host"), a.get("pid")) == (b.get("host"), b.get("pid"))
        and (a.get("start") is None or b.get("start") is None or a["start"] == b["start"])
        and a.get("session") == b.get("session")
    )


def describe_owner(owner: dict[str, Any]) -> str:
    where = f"process {owner.get('pid')} on host {owner.get('host')}"
    return where + (f" (session {owner['session']})" if owner.get("session") else "")


def owner_alive(owner: dict[str, Any], lease_expires: float | None, now: float) -> bool:
    """Is the process that intercepted still there to finish the action?

    Same host: its process id (and start time, against pid reuse) tells at once.
    Another host: only the lease can tell.
    """
    if owner.get("host") == socket.gethostname() and isinstance(owner.get("pid"), int):
        pid = owner["pid"]
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        fields = _proc_stat(pid)
        if fields is None:
            return True  # kill() says it exists and /proc cannot say more
        if fields[0] in ("Z", "X"):
            return False  # a zombie nobody reaped (common in containers) is dead
        start = fields[19] if len(fields) > 19 else None
        return start is None or owner.get("start") in (None, start)
    return lease_expires is not None and lease_expires > now


# -- the index, as read -----------------------------------------------------------------


def _damaged_index(run_id: str, action_id: str, detail: str) -> IntegrityError:
    return IntegrityError(
        f"the action index of run {run_id!r} is damaged at {action_id}: {detail}",
        code="integrity.index_mismatch",
        hint=f"run `continuum verify {run_id}`; nothing was changed and nothing may proceed",
        run_id=run_id,
        action_id=action_id,
    )


def _found_once(run_id: str, by_id: ActionRow | None, by_key: ActionRow | None) -> ActionRow | None:
    """The same row through both of its unique indexes, or neither.

    A damaged index entry would otherwise hide a completed action, and the next intercept
    would tell its caller to perform it again.
    """
    if by_id is None and by_key is None:
        return None
    if by_id is None or by_key is None or by_id.action_id != by_key.action_id:
        found = by_id or by_key
        assert found is not None
        raise _damaged_index(run_id, found.action_id, "found by one of its keys but not the other")
    return by_key


def _record(row: ActionRow) -> ActionRecord:
    try:
        return ActionRecord.model_validate(row.record)
    except ValidationError as e:
        raise _damaged_index(row.run_id, row.action_id, "the record is not valid") from e


# -- the ledger ---------------------------------------------------------------------------

_GUIDANCE = {
    "started": "Perform the side effect now, then call complete (or fail) with this action_key.",
    "completed": "Already done: do not perform it again; use the stored result and external_id.",
    "in_progress": "Another live process is performing this action right now: do not perform it; "
    "check again later.",
    "unknown": "This action was interrupted and may or may not have happened. Do not perform it "
    "again: check the external system, then reconcile it (occurred true/false).",
    "reconcile_required": "This action was interrupted; its contract requires reconciliation: check "
    "the external system, then call reconcile with occurred true/false.",
    "compensated": "This action was done and later undone (compensated); use a new key to redo it.",
    "needs_confirmation": "This action was reported as not done by an agent, not by a person. "
    "Do not perform it: only a person (or continuum's own probe) may confirm "
    "that it did not happen; ask a person to check the external system and "
    "run `continuum reconcile` for it.",
    "possible_duplicate": "Not performed: an earlier action of this type had the same values under "
    "other field names (see similar_action). If it is the same effect, it is "
    "already recorded there: do not perform it again. If it is a different "
    "effect, intercept again with an explicit key that tells them apart.",
    "awaiting_approval": "Not performed: this call needs a person's decision first. Do not perform "
    "it and do not try to decide it yourself: ask a person to run `{command}`, "
    "then intercept again with exactly the same arguments (changed arguments "
    "ask a person again).",
    "denied": "Not performed: a person denied this call{reason}. Do not perform it. Changed "
    "arguments ask a person again.",
}


class _Gate:
    """The approval check of one intercept, inside its transaction (``judge_call``)."""

    def __init__(
        self,
        ledger: ActionLedger,
        tx: WriteTx,
        rule: ApprovalRule,
        ident: ActionIdentity,
        action_type: str,
        key: str | None,
        arguments: Any,
        effect: str | None,
        origin: Origin,
        requested: ReplayContract | None,
    ) -> None:
        self.store = ledger.store
        self.tx, self.rule, self.ident, self.action_type = tx, rule, ident, action_type
        self.key, self.arguments, self.effect, self.origin = key, arguments, effect, origin
        self.requested = requested

    def judge(self, rec: ActionRecord | None) -> Verdict:
        run_id, store = self.tx.run.run_id, self.store

        def read_event(sequence: int) -> EventLike | None:  # verified as read
            return next(iter(store.iter_raw(run_id, sequence - 1, upto=sequence)), None)

        def read_kept(approval_id: str) -> dict[str, Any] | None:
            # An approval whose events were archived: the latest checkpoint whose hash its
            # sealing event (in the live log) vouches for holds the fold's record of it.
            return kept_approval(store, run_id, approval_id)

        return judge_call(
            self.tx,
            rule=self.rule,
            action_type=self.action_type,
            action_id=self.ident.action_id,
            action_key=self.ident.action_key,
            key=self.key,
            arguments=self.arguments,
            effect=self.effect,
            origin=self.origin,
            under=rec.approval_id if rec else None,
            read_event=read_event,
            read_kept=read_kept,
        )

    def stopped(self, verdict: Verdict, rec: ActionRecord | None) -> InterceptResult:
        """The answer for a call that may not run now (nothing of the action is written)."""
        status = verdict.status
        text = _GUIDANCE[status].format(
            command=decide_command(verdict.approval_id),
            reason=f" (approval {verdict.approval_id}; their reason: "
            f"{quoted(verdict.reason, limit=500)})"
            if verdict.reason
            else f" (approval {verdict.approval_id})",
        )
        replay = ReplayContract(rec.replay) if rec else self.requested or ReplayContract.NEVER
        return InterceptResult(
            proceed=False,
            status=status,
            action_id=self.ident.action_id,
            action_key=self.ident.action_key,
            attempt=rec.attempt if rec else 0,
            replay=replay,
            approval_id=verdict.approval_id,
            denial_reason=verdict.reason if status == "denied" else None,
            guidance=text,
        )


class ActionLedger:
    """The action ledger of one store (``Continuum.ledger``; use the facade's methods).

    Every transition is one write transaction that appends the event and updates the
    action index together. ``origin`` is stamped on what it writes; ``owner`` names the
    process performing the actions it intercepts, and ``lease_seconds`` how long another
    host trusts that owner without hearing from it.
    """

    def __init__(
        self,
        store: Storage,
        *,
        origin: Origin = Origin.DETERMINISTIC,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        cwd: str | None = None,
        clock: Callable[[], float] = time.time,
        owner: dict[str, Any] | None = None,
        approvals: RuleFiles | ApprovalRules | None = None,
    ) -> None:
        self.store, self.origin, self.lease_seconds = store, origin, lease_seconds
        self.cwd = cwd or os.getcwd()
        self.clock = clock
        self.owner = owner or current_owner()
        # Which calls wait for a person's decision: by default the approvals.toml files of
        # ``cwd`` and beside the store, read again when they change (``approvals.py``).
        self.approvals: RuleFiles | ApprovalRules = (
            approvals if approvals is not None else RuleFiles.around(self.cwd, store.url)
        )
        # Actions this ledger started and has not settled: their leases are ours to renew.
        self.held: set[tuple[str, str]] = set()

    def _apply(
        self,
        tx: WriteTx,
        row: ActionRow | None,
        type: EventType,
        payload: dict[str, Any],
        origin: Origin,
        lease: float | None,
    ) -> ActionRecord:
        event = tx.append(type, payload, source=origin)
        record = apply_action_event(row.record if row else None, event)
        assert record is not None
        tx.put_action(
            ActionRow(
                run_id=tx.run.run_id,
                action_id=record["action_id"],
                record=record,
                lease_expires=lease,
            )
        )
        return ActionRecord.model_validate(record)

    def intercept(
        self,
        run_id: str,
        action_type: str,
        arguments: Any = None,
        *,
        key: str | None = None,
        replay: ReplayContract | str | None = None,
        approval_id: str | None = None,
        origin: Origin | None = None,
        effect: str | None = None,
        approval_arguments: Any = _SAME,
    ) -> InterceptResult:
        """Ask before a side effect; ``proceed`` is true for exactly one caller per action.

        A call an approval rule matches proceeds only under a person's grant: the first
        such intercept records an approval request and answers ``awaiting_approval``
        (``approval_id``); ``effect`` names the host effect rule a hook call came through,
        and ``approval_arguments`` what an approval binds to when that is not all of
        ``arguments`` (a hook leaves out its session and call ids: a new session repeating
        the call is the same call).
        Raises ``UsageError`` for bad input (and ``approvals.bad_rules`` while the rules
        are malformed) and ``LedgerError`` (``ledger.run_finished``) for a run that has
        completed or was aborted; nothing is written in either case.
        """
        check_value(arguments, "arguments")  # limits.py: before identity walks it
        given = (action_type, key)  # as the agent wrote them: the original hashed them so
        action_type = check_identifier(
            _text(action_type) if isinstance(action_type, str) else action_type,
            what="action_type",
            code="usage.bad_action_type",
            max_length=200,
            hint="name the kind of side effect in printable text, e.g. send_invoice",
        )
        if key is not None:
            key = check_identifier(
                normalize_key(action_type, key) if isinstance(key, str) else key,
                what="key",
                code="usage.bad_key",
                max_length=1000,
                hint="use a stable business key in printable text, e.g. invoice:INV-001",
            )
        try:
            requested = ReplayContract(replay) if replay is not None else None
        except ValueError:
            raise UsageError(
                f"replay {replay!r} is not a replay contract",
                code="usage.bad_replay",
                hint="use never, reconcile, idempotent or safe",
            ) from None
        canonical_json(arguments)  # refuse non-JSON arguments before locking
        bound = arguments if approval_arguments is _SAME else approval_arguments
        if bound is not arguments:
            canonical_json(bound)
        ident = self.identity(run_id, action_type, key, arguments)
        origin = origin or self.origin
        # Rules judge the action, not its spelling: also its identity's canonical arguments.
        rule = self.approvals.find(  # fails closed (RuleFiles)
            action_type, arguments, effect, canonical=ident.normalized_arguments
        )
        now = self.clock()
        with self.store.write(run_id) as tx:
            if tx.run.status != RunStatus.ACTIVE:
                raise LedgerError(
                    f"run {run_id!r} is {tx.run.status}: it takes no new side effects",
                    code="ledger.run_finished",
                    hint="start a new run for new work; settling earlier actions still works",
                    run_id=run_id,
                    status=str(tx.run.status),
                )
            # Two lookups, one per unique key, each on its own: a damaged index (or a row
            # edited under one key) must not hide a done action behind the other.
            row = _found_once(
                run_id,
                tx.find_action(action_id=ident.action_id),
                tx.find_action(dedup_key=ident.dedup_key),
            )
            if row is None:  # recorded under an earlier identity: older rules, or the original
                for action_id, dedup_key in (
                    *ident.earlier,
                    *original_identities(
                        tx.run,
                        given[0],
                        (given[1], key) if key is not None else (None,),
                        arguments,
                    ),
                ):
                    row = _found_once(
                        run_id,
                        tx.find_action(action_id=action_id),
                        tx.find_action(dedup_key=dedup_key),
                    )
                    if row is not None:
                        break
            if row is None and ident.fallback_key is not None:
                for fallback in (ident.fallback_key, *ident.earlier_fallback):
                    similar = tx.find_action(fallback_key=fallback)
                    if similar is not None:  # a suspicion, never an answer: nothing is written
                        return self._possible_duplicate(_record(similar))
            gate = (
                None
                if rule is None
                else _Gate(
                    self, tx, rule, ident, action_type, key, bound, effect, origin, requested
                )
            )
            verdict = gate.judge(None) if gate is not None and row is None else None
            if verdict is not None and verdict.status != "allow":
                assert gate is not None
                result = gate.stopped(verdict, None)  # the approval request is all it writes
            elif row is None:
                contract = requested or ReplayContract.NEVER
                if verdict is not None:
                    approval_id = verdict.approval_id
                rec = self._apply(
                    tx,
                    None,
                    EventType.ACTION_INTERCEPTED,
                    {
                        "action_id": ident.action_id,
                        "action_key": ident.action_key,
                        "action_type": action_type,
                        "key": key,
                        "dedup_key": ident.dedup_key,
                        "fallback_key": ident.fallback_key,
                        "arguments": arguments,
                        "replay": str(contract),
                        "operation_key": ident.operation_key,
                        "owner": self.owner,
                        "approval_id": approval_id,
                    },
                    origin,
                    now + self.lease_seconds,
                )
                result = self._result(rec, True, "started", None)
            else:
                result = self._decide(
                    tx, row, requested, origin, now, "key" if key is not None else "arguments", gate
                )
        if result.proceed:
            self.held.add((run_id, result.action_id))
        fault_point("after_intercept_commit")
        return result

    def identity(
        self, run_id: str, action_type: str, key: str | None = None, arguments: Any = None
    ) -> ActionIdentity:
        """The identity ``intercept`` gives this call (key normalized, paths against cwd)."""
        action_type = _text(action_type)
        if key is not None:
            key = normalize_key(action_type, key)
        return action_identity(run_id, action_type, arguments, key, self.cwd)

    def _possible_duplicate(self, rec: ActionRecord) -> InterceptResult:
        return InterceptResult(
            proceed=False,
            status="possible_duplicate",
            action_id=rec.action_id,
            action_key=rec.action_key,
            attempt=rec.attempt,
            replay=ReplayContract(rec.replay),
            matched_by="fallback",
            guidance=_GUIDANCE["possible_duplicate"],
            similar_action={
                "action_id": rec.action_id,
                "action_key": rec.action_key,
                "status": str(rec.status),
                "arguments": rec.arguments,
                "external_id": rec.external_id,
            },
        )

    def _result(
        self, rec: ActionRecord, proceed: bool, status: str, matched: str | None, extra: str = ""
    ) -> InterceptResult:
        replay = ReplayContract(rec.replay)
        return InterceptResult(
            proceed=proceed,
            status=status,
            action_id=rec.action_id,
            action_key=rec.action_key,
            attempt=rec.attempt,
            replay=replay,
            operation_key=rec.operation_key
            if proceed or replay == ReplayContract.IDEMPOTENT
            else None,
            external_id=rec.external_id,
            previous_result=rec.result if status == "completed" else None,
            matched_by=matched,
            approval_id=rec.approval_id,
            guidance=(_GUIDANCE[status] + extra),
        )

    def _decide(
        self,
        tx: WriteTx,
        row: ActionRow,
        requested: ReplayContract | None,
        origin: Origin,
        now: float,
        matched: str,
        gate: _Gate | None = None,
    ) -> InterceptResult:
        rec = _record(row)
        stored = ReplayContract(rec.replay)
        if requested is not None and requested.width > stored.width:
            raise ReplayWideningError(
                f"action {rec.action_key} was intercepted with replay={stored}; "
                f"a later intercept may not widen it to {requested}",
                hint=f"intercept again with replay={stored} (or narrower), or use a new key",
                action_key=rec.action_key,
                stored=str(stored),
                requested=str(requested),
            )
        contract = requested if requested is not None else stored
        status = rec.status
        rerunnable = contract in (ReplayContract.SAFE, ReplayContract.IDEMPOTENT)
        if status == ActionStatus.COMPLETED:
            return self._result(rec, False, "completed", matched)
        if status == ActionStatus.COMPENSATED:
            return self._result(rec, False, "compensated", matched)
        if status == ActionStatus.STARTED and owner_alive(rec.owner, row.lease_expires, now):
            return self._result(rec, False, "in_progress", matched)
        if rec.failure_unconfirmed and not rerunnable:
            return self._result(rec, False, "needs_confirmation", matched)
        lease = now + self.lease_seconds
        if status == ActionStatus.FAILED or rerunnable:
            # Certainly not done (a person or trusted code said so), or the contract allows
            # running it again: a new attempt (under a person's grant, where a rule says so).
            retry: dict[str, Any] = {
                "action_id": rec.action_id,
                "attempt": rec.attempt + 1,
                "owner": self.owner,
                "reason": "failed" if status == ActionStatus.FAILED else f"replay={contract}",
            }
            if gate is not None:
                verdict = gate.judge(rec)
                if verdict.status != "allow":
                    return gate.stopped(verdict, rec)
                retry["approval_id"] = verdict.approval_id
            rec = self._apply(tx, row, EventType.ACTION_RETRIED, retry, origin, lease)
            return self._result(rec, True, "started", matched)
        if status == ActionStatus.STARTED:
            rec = self._apply(
                tx,
                row,
                EventType.ACTION_MARKED_UNKNOWN,
                {
                    "action_id": rec.action_id,
                    "reason": "interrupted: the process that intercepted it is gone",
                },
                origin,
                None,
            )
        if contract == ReplayContract.RECONCILE:
            return self._result(rec, False, "reconcile_required", matched)
        return self._result(rec, False, "unknown", matched)

    # -- transitions by reference -----------------------------------------------------------

    def _transition(
        self,
        run_id: str,
        action_ref: str,
        allowed: set[ActionStatus],
        type: EventType,
        payload: dict[str, Any],
        origin: Origin | None,
        verb: str,
        *,
        force: bool = False,
        also: Callable[[ActionRecord], bool] | None = None,
    ) -> ActionRecord:
        origin = origin or self.origin
        with self.store.write(run_id) as tx:
            row = tx.find_action(action_id=action_ref) or tx.find_action(action_key=action_ref)
            if row is None:
                raise NotFoundError(
                    f"action {action_ref!r} not found in run {run_id!r}",
                    code="not_found.action",
                    hint=f"list actions with `continuum actions {run_id}`",
                    run_id=run_id,
                    action=action_ref,
                )
            rec = _record(row)
            if rec.status not in allowed and not (also is not None and also(rec)):
                raise InvalidTransitionError(
                    f"cannot {verb} action {rec.action_key}: it is {rec.status}",
                    hint="list actions to see its state; "
                    + (
                        "it is already settled"
                        if not rec.status.unresolved
                        else "reconcile it instead"
                    ),
                    action_key=rec.action_key,
                    status=str(rec.status),
                )
            if (
                rec.status == ActionStatus.STARTED
                and not same_owner(rec.owner, self.owner)
                and not force
                and owner_alive(rec.owner, row.lease_expires, self.clock())
            ):
                # Only the process performing it knows how it ends; another writer settling
                # it would let a second caller proceed while the first one still runs.
                raise ActionOwnedError(
                    f"cannot {verb} action {rec.action_key}: {describe_owner(rec.owner)} is "
                    "performing it right now (its owner is alive), and only the owner may settle it",
                    hint="wait until it finishes and check again; a person who knows its outcome "
                    "can settle it anyway with `continuum reconcile ... --force`",
                    action_key=rec.action_key,
                    owner=rec.owner,
                )
            new = self._apply(tx, row, type, {"action_id": rec.action_id, **payload}, origin, None)
        if new.status != ActionStatus.STARTED:
            self.held.discard((run_id, new.action_id))
        fault_point(f"after_{verb}_commit")
        return new

    def complete(
        self,
        run_id: str,
        action_ref: str,
        *,
        external_id: str | None = None,
        result: Any = None,
        origin: Origin | None = None,
    ) -> ActionRecord:
        """Record that the effect happened. Only the owner may complete a started action
        while the owner is alive (``ledger.owner_alive`` otherwise)."""
        canonical_json(result)
        return self._transition(
            run_id,
            action_ref,
            {ActionStatus.STARTED},
            EventType.ACTION_COMPLETED,
            {"external_id": external_id, "result": result},
            origin,
            "complete",
        )

    def fail(
        self,
        run_id: str,
        action_ref: str,
        *,
        error: str | None = None,
        certain: bool = False,
        origin: Origin | None = None,
    ) -> ActionRecord:
        """Record a failure; without ``certain`` the effect may have happened: ``unknown``.

        A certain failure from a self-certified origin (an agent) is recorded, but the
        action may not run again until a person confirms it (``needs_confirmation``).
        """
        if certain:
            return self._transition(
                run_id,
                action_ref,
                {ActionStatus.STARTED, ActionStatus.UNKNOWN},
                EventType.ACTION_FAILED,
                {"error": error, "certain": True},
                origin,
                "fail",
            )
        return self._transition(
            run_id,
            action_ref,
            {ActionStatus.STARTED},
            EventType.ACTION_MARKED_UNKNOWN,
            {"reason": error or "failed; outcome uncertain"},
            origin,
            "fail",
        )

    def reconcile(
        self,
        run_id: str,
        action_ref: str,
        *,
        occurred: bool,
        external_id: str | None = None,
        note: str | None = None,
        origin: Origin | None = None,
        force: bool = False,
        probe: dict[str, Any] | None = None,
    ) -> ActionRecord:
        """Settle an interrupted action (or an agent's unconfirmed failure) after checking
        the external system. ``force`` settles a started action whose owner is alive."""
        payload: dict[str, Any] = {
            "occurred": bool(occurred),
            "external_id": external_id,
            "note": note,
        }
        if probe is not None:
            payload["probe"] = probe
        return self._transition(
            run_id,
            action_ref,
            {ActionStatus.UNKNOWN, ActionStatus.STARTED},
            EventType.ACTION_RECONCILED,
            payload,
            origin,
            "reconcile",
            force=force,
            also=lambda r: r.failure_unconfirmed,
        )

    def compensate(
        self, run_id: str, action_ref: str, *, note: str | None = None, origin: Origin | None = None
    ) -> ActionRecord:
        """Record that a completed action's effect was undone; ``ledger.invalid_transition``
        unless it is ``completed``."""
        return self._transition(
            run_id,
            action_ref,
            {ActionStatus.COMPLETED},
            EventType.ACTION_COMPENSATED,
            {"note": note},
            origin,
            "compensate",
        )

    def renew_lease(self, run_id: str, action_ref: str) -> None:
        """Extend one action's lease by ``lease_seconds``; ``not_found.action`` if unknown."""
        row = self.store.get_action(run_id, action_ref)
        if row is None:
            raise NotFoundError(
                f"action {action_ref!r} not found",
                code="not_found.action",
                hint="check the action_key",
            )
        self.store.renew_lease(run_id, row.action_id, self.clock() + self.lease_seconds)

    def renew_held_leases(self) -> int:
        """Extend the lease of every action this ledger is performing; returns how many.

        Another host cannot see whether this process is alive, only the lease: a long
        side effect keeps its lease fresh so it is not judged interrupted.
        """
        until = self.clock() + self.lease_seconds
        for run_id, action_id in sorted(self.held):
            self.store.renew_lease(run_id, action_id, until)
        return len(self.held)

    def actions(self, run_id: str) -> list[ActionRecord]:
        """Every action of the run, in interception order; ``not_found.run`` if unknown."""
        self.store.get_run(run_id)
        return [_record(r) for r in self.store.list_actions(run_id)]

    def page(
        self, run_id: str, *, cursor: str | None = None, limit: int = DEFAULT_PAGE
    ) -> tuple[list[ActionRecord], str | None]:
        """One page of the run's actions, open ones first (``Storage.action_page``)."""
        rows, next_cursor = self.store.action_page(run_id, cursor=cursor, limit=limit)
        return [_record(r) for r in rows], next_cursor

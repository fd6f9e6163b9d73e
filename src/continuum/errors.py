"""The error tree of continuum.

Every error carries a stable dotted ``code``, a ``message`` saying what was wrong,
a ``hint`` saying what to do, and structured ``fields``. The CLI maps the class to
an exit code; the MCP server turns it into a readable error result.

    ContinuumError                      code prefix      exit
    ├── UsageError                      usage.*          1
    ├── StoreError                      store.*          1
    │   ├── UnsafeLibraryError          store.unsafe_sqlite
    │   ├── StoreBusyError              store.busy
    │   ├── DiskFullError               store.disk_full
    │   ├── StoreIOError                store.io
    │   └── SchemaError                 store.schema.*
    ├── NotFoundError                   not_found.*      2
    │   └── HistoryArchivedError        not_found.archived
    ├── IntegrityError                  integrity.*      3
    │   └── ForkRejectedError           integrity.fork_rejected
    ├── LedgerError                     ledger.*         1
    │   ├── InvalidTransitionError      ledger.invalid_transition
    │   ├── ReplayWideningError         ledger.replay_widening
    │   ├── ActionOwnedError            ledger.owner_alive
    │   ├── EffectUncertain             ledger.effect_uncertain
    │   ├── EffectAwaitingApproval      ledger.awaiting_approval
    │   └── EffectDenied                ledger.approval_denied

This module imports nothing internal.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: hooks start from here
if TYPE_CHECKING:
    from typing import Any


class ContinuumError(Exception):
    """Base of every error continuum raises on purpose."""

    code: str = "error"
    exit_code: int = 1

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        hint: str = "",
        **fields: Any,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.hint = hint
        self.fields: dict[str, Any] = fields

    def to_dict(self) -> dict[str, Any]:
        """The one JSON error shape (references/contract.md §10), without the ``ok`` envelope."""
        out: dict[str, Any] = {"code": self.code, "message": self.message, "hint": self.hint}
        if self.fields:
            out["details"] = {k: _jsonable(v) for k, v in self.fields.items()}
        return out

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} (hint: {self.hint})"


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


class UsageError(ContinuumError):
    """Bad input (``usage.*``): what was wrong and what to pass instead; nothing changed."""

    code = "usage.invalid"
    exit_code = 1


class StoreError(ContinuumError):
    """The store cannot be used (``store.*``): a bad path or URL, a foreign or unsafe
    database, a full disk, a busy lock, an unreachable server."""

    code = "store.unusable"
    exit_code = 1


class UnsafeLibraryError(StoreError):
    code = "store.unsafe_sqlite"


class StoreBusyError(StoreError):
    code = "store.busy"


class DiskFullError(StoreError):
    code = "store.disk_full"


class StoreIOError(StoreError):
    code = "store.io"


class SchemaError(StoreError):
    code = "store.schema"


class NotFoundError(ContinuumError):
    """No such store, run or action (``not_found.store``, ``not_found.run``,
    ``not_found.action``)."""

    code = "not_found"
    exit_code = 2


class HistoryArchivedError(NotFoundError):
    """The events asked for were moved to an archive file (``continuum archive``): the
    live log starts after them. Carries ``run_id``, ``archived_through`` and the
    archive's name as it was written."""

    code = "not_found.archived"


class IntegrityError(ContinuumError):
    """The log, its index or a contract does not verify (``integrity.*``). Refused,
    never repaired: run ``continuum verify RUN`` to see where."""

    code = "integrity.failed"
    exit_code = 3


class ForkRejectedError(IntegrityError):
    code = "integrity.fork_rejected"


class LedgerError(ContinuumError):
    """An action ledger rule refused the call (``ledger.*``): a finished run, a
    transition from the wrong status, a widened replay contract, a live owner."""

    code = "ledger.error"
    exit_code = 1


class InvalidTransitionError(LedgerError):
    code = "ledger.invalid_transition"


class ReplayWideningError(LedgerError):
    code = "ledger.replay_widening"


class ActionOwnedError(LedgerError):
    """A started action whose owner is alive may be settled only by that owner."""

    code = "ledger.owner_alive"


class EffectUncertain(LedgerError):
    """A guarded effect met an interrupted action: it may or may not have happened.

    Raised by the effect seam (``Continuum.effect``) instead of running the effect again
    when the ledger answers ``unknown``, ``reconcile_required`` or ``needs_confirmation``.
    Carries ``run_id``, ``action_key``, ``action_id``, ``status`` and ``command``: the
    ``continuum reconcile`` command a person completes with ``--occurred`` or
    ``--not-occurred`` after checking the external system.
    """

    code = "ledger.effect_uncertain"

    def __init__(self, *, run_id: str, action_key: str, action_id: str, status: str) -> None:
        command = f"continuum reconcile {_shell_word(run_id)} {_shell_word(action_key)}"
        super().__init__(
            f"effect {action_key} of run {run_id} is {status}: it was interrupted and may or "
            "may not have happened, so it was not run again",
            hint=f"check the external system, then run `{command} --occurred` if it happened "
            f"or `{command} --not-occurred` if it did not",
            run_id=run_id,
            action_key=action_key,
            action_id=action_id,
            status=status,
            command=command,
        )
        self.run_id, self.action_key, self.action_id = run_id, action_key, action_id
        self.status, self.command = status, command


class EffectAwaitingApproval(LedgerError):
    """A guarded effect needs a person's decision first (an approval rule matched it).

    Raised by the effect seam instead of running the effect. Carries ``run_id``,
    ``action_key``, ``action_id``, ``approval_id`` and ``command``: the ``continuum
    decide`` command a person runs. Call the effect again with the same arguments once
    it is allowed.
    """

    code = "ledger.awaiting_approval"

    def __init__(self, *, run_id: str, action_key: str, action_id: str, approval_id: str) -> None:
        command = f"continuum decide {_shell_word(approval_id)}"
        super().__init__(
            f"effect {action_key} of run {run_id} waits for a person's decision (approval "
            f"{approval_id}); it was not performed",
            hint=f"a person decides with `{command} --allow --reason TEXT` (or --deny); then "
            "call it again with exactly the same arguments",
            run_id=run_id,
            action_key=action_key,
            action_id=action_id,
            approval_id=approval_id,
            command=command,
        )
        self.run_id, self.action_key, self.action_id = run_id, action_key, action_id
        self.approval_id, self.command = approval_id, command


class EffectDenied(LedgerError):
    """A person denied this call of a guarded effect; it was not performed. Carries
    ``run_id``, ``action_key``, ``action_id``, ``approval_id`` and ``reason``."""

    code = "ledger.approval_denied"

    def __init__(
        self, *, run_id: str, action_key: str, action_id: str, approval_id: str, reason: str | None
    ) -> None:
        super().__init__(
            f"effect {action_key} of run {run_id} was denied by a person (approval "
            f"{approval_id}); it was not performed",
            hint="do not perform it; different arguments ask a person again",
            run_id=run_id,
            action_key=action_key,
            action_id=action_id,
            approval_id=approval_id,
            reason=reason,
        )
        self.run_id, self.action_key, self.action_id = run_id, action_key, action_id
        self.approval_id, self.reason = approval_id, reason


def _shell_word(text: str) -> str:
    """``text`` as one POSIX shell word (shlex.quote without importing re at start-up)."""
    safe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./_-#"
    if text and not text.startswith("#") and all(c in safe for c in text):
        return text
    return "'" + text.replace("'", "'\\''") + "'"

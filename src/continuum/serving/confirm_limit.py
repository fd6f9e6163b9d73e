"""The confirm token's attempt limit, as the MCP server applies it (contract §5).

``continuum_confirm`` (over stdio and over HTTP) compares the presented
``_meta.confirmToken`` only through the store's counter (``store/confirm_attempts.py``),
the one the operator page and every other server on the store use: a wrong token is
counted there, a backoff or the lock refuses without comparing, and a run that is not in
the store is refused without comparing (so every comparison names a real run, which its
notice is about). ``Policy._confirm_denial`` (``auth.py``) turns the outcome into a
denial the agent can read; it never tells the agent how to unlock (a person does that).

``StoreConfirmLimit`` opens its own handle on the store the first time a token is
presented, never creating one (no store: no run to confirm). A store that cannot count
the attempt refuses it (``auth.confirm_unavailable``): the token is then not compared.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from continuum.errors import NotFoundError

if TYPE_CHECKING:
    # The store (its models, its SQL) is loaded when a token is first presented, not
    # when ``auth.py`` imports this module: a stdio server's way to its initialize
    # answer never opens or imports the store (issue 27).
    from continuum.store import Storage
    from continuum.store.confirm_attempts import ConfirmAttempt

__all__ = ["ConfirmLimit", "StoreConfirmLimit", "attempt_denial"]


class ConfirmLimit(Protocol):
    def attempt(
        self, run_id: str | None, matches: Callable[[], bool], caller: str | None
    ) -> ConfirmAttempt:
        """Compare (``matches``) if the store's counter allows, and count the outcome."""
        ...


class StoreConfirmLimit:
    """The counter of the store at ``url``, for attempts arriving over ``channel``."""

    def __init__(self, url: str, channel: str, clock: Callable[[], float] = time.time) -> None:
        self.url, self.channel = url, channel
        self._clock = clock
        self._opening = threading.Lock()
        self._store: Storage | None = None

    def attempt(
        self, run_id: str | None, matches: Callable[[], bool], caller: str | None
    ) -> ConfirmAttempt:
        from continuum.store import open_store
        from continuum.store.confirm_attempts import ConfirmAttempt

        with self._opening:
            if self._store is None:
                try:
                    self._store = open_store(self.url, create=False)
                except NotFoundError:  # no store yet: no run to confirm, nothing compared
                    return ConfirmAttempt("no_run")
            store = self._store
        return store.confirm_attempt(
            run_id, matches, channel=self.channel, caller=caller, now=self._clock()
        )


def attempt_denial(
    attempt: ConfirmAttempt, run_id: str | None, human: str
) -> tuple[str, str, str] | None:
    """(code, reason, remedy) for an attempt that did not confirm; None for the right token.
    ``human`` is the remedy that sends the agent to a person."""
    from continuum.store.confirm_attempts import LOCK_AFTER  # loaded already: attempt came from it

    if attempt.accepted:
        return None
    if attempt.verdict == "no_run":
        shown = repr(run_id if run_id is None or len(run_id) <= 80 else run_id[:77] + "...")
        return (
            "auth.confirm_run_not_found",
            f"run {shown} is not in this store, so the confirm token was not checked",
            "check the run id (continuum_resume without run_id names the latest active "
            f"run); {human}",
        )
    if attempt.verdict == "locked":
        return (
            "auth.confirm_locked",
            f"confirming with the confirm token is locked for this store after {LOCK_AFTER} "
            "wrong tokens in a row; the token was not checked, and the operator was notified",
            human,
        )
    if attempt.verdict == "waiting":
        return (
            "auth.confirm_backoff",
            f"{attempt.failures} wrong confirm tokens in a row for this store: no token is "
            f"checked for another {attempt.wait_seconds} s (after {LOCK_AFTER}, confirming "
            "with the token is locked)",
            human,
        )
    then = (
        "confirming with the token is now locked for this store"
        if attempt.locked
        else f"after {LOCK_AFTER}, confirming with the token is locked for this store"
    )
    return (
        "auth.confirm_token_mismatch",
        f"the presented confirm token is not valid ({attempt.failures} wrong in a row for "
        f"this store; {then})",
        human,
    )

"""Watching verdicts: a person is told when a run turns ``request_human`` (issue 26).

``resume`` is read-only (MCP's ``continuum_resume`` must never write), so nothing on the
read path announces a verdict. The server that holds a store's deliverer role
(``deliverer.BackgroundDelivery``) runs a ``VerdictWatch`` after each delivery pass: it
evaluates the active runs whose log moved since it last looked (and each one again every
``RECHECK_SECONDS``, for what changes without a write: an owner that died, a file that
changed), and for each run whose verdict is ``request_human`` writes a ``run_needs_human``
notification (``notices.verdict_notice``). Its id is the run and the set of things a
person must do, so a run is announced once when it turns, not on every look, by whichever
server watches; a new cause is a new notification. It writes no event and judges with
continuum's own rules (origin ``deterministic``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from continuum.errors import ContinuumError
from continuum.eventlog.notices import verdict_notice
from continuum.log import get_logger
from continuum.runtime.facade import Continuum
from continuum.store.base import Storage, format_timestamp
from continuum.types import Mode, Origin, RunStatus

RECHECK_SECONDS = 30.0  # a run whose log did not move is looked at again after this
MAX_RUNS_PER_PASS = 50  # runs evaluated per pass (the others wait for the next one)

_log = get_logger("continuum.verdicts")


class VerdictWatch:
    """Call it with a store after each delivery pass (``deliverer.delivering(watch=...)``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.seen: dict[str, tuple[int, float]] = {}  # run -> (head looked at, when)
        self.told = 0  # notifications written (new or already there)

    def __call__(self, store: Storage) -> None:
        cx = Continuum(store, origin=Origin.DETERMINISTIC)  # the store stays the caller's
        now, looked = self.clock(), 0
        active = set()
        for info in store.list_runs():
            if info.status != RunStatus.ACTIVE:
                continue
            active.add(info.run_id)
            last = self.seen.get(info.run_id)
            fresh = last is not None and now - last[1] < RECHECK_SECONDS
            if fresh and last is not None and last[0] == info.head_sequence:
                continue
            if looked >= MAX_RUNS_PER_PASS:
                continue  # the next pass
            looked += 1
            self.seen[info.run_id] = (info.head_sequence, now)
            try:
                decision = cx.evaluate(info.run_id).decision
                if decision.mode != Mode.REQUEST_HUMAN:
                    continue
                store.put_notice(
                    info.run_id,
                    verdict_notice(
                        run_id=info.run_id,
                        sequence=info.head_sequence,
                        recorded_at=format_timestamp(datetime.now(UTC)),
                        reason=decision.reason,
                        required_actions=list(decision.required_actions),
                    ),
                )
                self.told += 1
            except ContinuumError as e:  # a damaged or busy run: looked at again later
                _log.warning("verdicts.evaluate_failed", run_id=info.run_id, code=e.code)
        for gone in set(self.seen) - active:
            del self.seen[gone]


__all__ = ["MAX_RUNS_PER_PASS", "RECHECK_SECONDS", "VerdictWatch"]

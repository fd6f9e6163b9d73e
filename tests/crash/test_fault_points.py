"""F1: an agent killed during append, intercept, effect and completion (contract §3, 6).

Each round forks a fresh worker process from this (connection-free) test process. The
worker first recovers what the previous one left behind, then works: it appends events
and performs actions through the ledger (intercept, side effect, complete). It dies
either at a named fault point (``os._exit`` inside the write path, armed like
``CONTINUUM_FAULTS=name@N``) or by SIGKILL at a random moment. The next round's worker
is the fresh process that recovers.

The side effect is real: one line appended to ``effects/<key>``, so "performed at most
once" is counted in the world, not in the ledger. The worker writes each acknowledgement
to a JSONL history only AFTER the call returned, so "no acknowledged event lost" is
checked against what a caller was actually told.

Recovery is the documented protocol: every interrupted action is intercepted again and
must be answered ``unknown`` (never a silent retry); the worker then checks the external
system (the effect file) and reconciles; only an action reconciled as not having
happened is performed again, as a new attempt.

Negative control (F1-neg): the same loop with a recovery that takes an interrupted
action for a failed one and performs it again must count double effects.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import select
import shutil
import signal
import tempfile
import traceback
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest

import continuum.faults
from continuum.faults import FAULT_EXIT_CODE
from continuum.ledger.core import ActionLedger
from continuum.runtime.facade import Continuum
from continuum.store import Run, SQLiteStorage
from continuum.types import ActionStatus

RUN = "run_f1"
ACTION = "send_invoice"
POINTS = [
    "before_append_commit",
    "after_append_commit",
    "after_intercept_commit",
    "after_effect",
    "after_complete_commit",
    "after_reconcile_commit",
    "after_fail_commit",
]
OPS_PER_ROUND = 12  # a round killed at a random time ends by itself after this many operations
OPS_UNTIL_FAULT = 100  # a round armed at a fault point runs until it fires (bounded)
CRASHED_EXIT = 70  # the worker hit an unexpected exception (reported in its crash file)


def arm_faults(spec: str) -> None:
    """Arm fault points in this (forked) process, as CONTINUUM_FAULTS does at start-up."""
    os.environ["CONTINUUM_FAULTS"] = spec
    importlib.reload(continuum.faults)  # fault_point() reads the module's globals at each call


class History:
    """Append-only JSONL: one os.write per record, so a killed writer leaves whole lines."""

    def __init__(self, path: Path, round_no: int) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.round_no = round_no

    def write(self, **record: Any) -> None:
        record["round"] = self.round_no
        os.write(self.fd, (json.dumps(record, sort_keys=True) + "\n").encode())


def read_history(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


@dataclass
class Paths:
    root: Path

    @property
    def db(self) -> Path:
        return self.root / "f1.db"

    @property
    def effects(self) -> Path:
        return self.root / "effects"

    @property
    def history(self) -> Path:
        return self.root / "history.jsonl"

    @property
    def crash_report(self) -> Path:
        return self.root / "worker-crash.txt"


def perform_effect(paths: Paths, key: str, round_no: int) -> None:
    """The real side effect: one line in the external system's record for ``key``."""
    fd = os.open(paths.effects / key, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{round_no} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


def effect_happened(paths: Paths, key: str) -> bool:
    return (paths.effects / key).exists()


def perform_action(
    ledger: ActionLedger, paths: Paths, hist: History, key: str, replay: str | None, refuse: bool
) -> None:
    """Intercept, perform (or be refused by the external system), complete or fail."""
    r = ledger.intercept(RUN, ACTION, {"invoice": key}, key=key, replay=replay)
    hist.write(op="intercept", key=key, proceed=r.proceed, status=r.status, attempt=r.attempt)
    if not r.proceed:
        return
    if refuse:  # the external system said no before doing anything: certainly not done
        ledger.fail(RUN, r.action_key, error="refused", certain=True)
        hist.write(op="fail", key=key)
        return
    perform_effect(paths, key, hist.round_no)
    continuum.faults.fault_point("after_effect")
    ledger.complete(RUN, r.action_key, external_id=f"ext-{key}", result={"ok": True})
    hist.write(op="complete", key=key)


def recover(ledger: ActionLedger, paths: Paths, hist: History, strategy: str) -> None:
    """Settle every action the previous worker left interrupted, then finish it.

    ``reconcile`` is the documented protocol; ``retry`` is the broken one of F1-neg.
    """
    for rec in ledger.actions(RUN):
        if rec.status not in (ActionStatus.STARTED, ActionStatus.UNKNOWN):
            continue
        key = rec.key or ""
        r = ledger.intercept(RUN, ACTION, {"invoice": key}, key=key)
        hist.write(
            op="recover_intercept",
            key=key,
            prior=str(rec.status),
            proceed=r.proceed,
            status=r.status,
        )
        if r.proceed:
            continue  # reported by the checker as a silent retry; never perform it
        if strategy == "reconcile":
            occurred = effect_happened(paths, key)
            ledger.reconcile(
                RUN, r.action_key, occurred=occurred, external_id=f"ext-{key}" if occurred else None
            )
            hist.write(op="reconcile", key=key, occurred=occurred)
        else:  # broken: assume an interrupted action did not happen
            ledger.fail(RUN, r.action_key, error="assumed not done", certain=True)
            hist.write(op="fail", key=key)
        row = ledger.store.get_action(RUN, r.action_key)
        if row is not None and row.record["status"] == ActionStatus.FAILED:
            perform_action(ledger, paths, hist, key, None, refuse=False)


def worker(
    paths: Paths, round_no: int, fault: str, seed: int, strategy: str, ready_fd: int, max_ops: int
) -> None:
    """The body of one forked worker; never returns (the process always ends here)."""
    code = 0
    try:
        if fault:
            arm_faults(fault)
        rng = random.Random(seed)
        store = SQLiteStorage(paths.db, create=False)
        os.write(ready_fd, b"r")
        ledger = ActionLedger(store)
        hist = History(paths.history, round_no)
        recover(ledger, paths, hist, strategy)
        hist.write(op="recovered")
        for i in range(max_ops):
            if rng.random() < 0.4:
                e = store.append_event(RUN, "work_completed", {"round": round_no, "n": i})
                hist.write(op="append", seq=e.sequence, hash=e.hash)
            else:
                replay = rng.choice([None, "never", "reconcile"])
                perform_action(
                    ledger, paths, hist, f"k{round_no}-{i}", replay, refuse=rng.random() < 0.1
                )
        store.close()
    except BaseException:
        paths.crash_report.write_text(
            f"round {round_no} ({fault or 'random kill'}):\n" + traceback.format_exc()
        )
        code = CRASHED_EXIT
    finally:
        os._exit(code)


@dataclass
class F1Figures:
    rounds: int = 0
    kills: int = 0
    at_fault_points: int = 0
    by_point: dict[str, int] = field(default_factory=dict)
    acknowledged: int = 0
    lost: int = 0
    breaks: int = 0
    double_effects: int = 0
    interrupted: int = 0
    reported_unknown: int = 0
    silent_retries: int = 0
    died_in_recovery: int = 0
    unsettled: int = 0
    ledger_world_mismatches: int = 0
    problems: list[str] = field(default_factory=list)

    def line(self, name: str = "F1") -> str:
        return (
            f"{name}: {self.kills:,} kills ({self.at_fault_points:,} at fault points): "
            f"{self.lost} lost, {self.breaks} breaks, {self.double_effects} double effects; "
            f"{self.interrupted} interrupted actions, {self.reported_unknown} reported unknown, "
            f"{self.silent_retries} silently retried, {self.died_in_recovery} kills during "
            f"recovery"
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def fork_round(
    paths: Paths,
    round_no: int,
    fault: str,
    seed: int,
    strategy: str,
    kill_after_s: float | None,
    max_ops: int = OPS_PER_ROUND,
) -> int:
    """Run one worker; SIGKILL it after ``kill_after_s`` unless it died first. Returns the
    raw wait status."""
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        worker(paths, round_no, fault, seed, strategy, ready_w, max_ops)
    os.close(ready_w)
    try:
        os.read(ready_r, 1)  # the worker has opened the store (or died trying)
        if kill_after_s is not None:
            # Wait for the worker to end by itself, at most the random delay; then kill it.
            pidfd = os.pidfd_open(pid)
            try:
                ready, _, _ = select.select([pidfd], [], [], kill_after_s)
                if not ready:
                    os.kill(pid, signal.SIGKILL)
            finally:
                os.close(pidfd)
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(ready_r)
    return status


def check(paths: Paths, figures: F1Figures, *, final: bool) -> None:
    """The invariants, read by a fresh connection after the worker is gone."""
    history = read_history(paths.history)
    with SQLiteStorage(paths.db, create=False) as store:
        app = Continuum(store)
        report = app.verify(RUN)
        if not report.ok:
            figures.breaks += 1
            figures.problems.append(f"verify: {report.violations[:2]}")
            return
        events = store.read_events(RUN)
        if [e.sequence for e in events] != list(range(1, len(events) + 1)):
            figures.breaks += 1
            figures.problems.append("sequence gap")
        hashes = {e.sequence: e.hash for e in events}
        actions = {a.key: a for a in app.actions(RUN)}
        keys: dict[str | None, str | None] = {a.action_id: a.key for a in actions.values()}
        reconciled = Counter(
            keys.get(e.payload.get("action_id")) for e in events if e.type == "action_reconciled"
        )

    # No acknowledged event lost.
    def present(h: dict[str, Any]) -> bool:
        a = actions.get(h.get("key"))
        if h["op"] == "append":
            return hashes.get(h["seq"]) == h["hash"]
        if h["op"] == "intercept":
            return not h["proceed"] or a is not None
        if h["op"] == "complete":
            return a is not None and a.status == ActionStatus.COMPLETED
        return True

    lost: list[dict[str, Any]] = [h for h in history if not present(h)]
    # A reconciliation stays in the log even when a later attempt of the action is interrupted.
    acked_reconciles = Counter(h["key"] for h in history if h["op"] == "reconcile")
    lost += [
        {"op": "reconcile", "key": k, "acknowledged": n, "in_log": reconciled[k]}
        for k, n in acked_reconciles.items()
        if reconciled[k] < n
    ]
    figures.acknowledged = len(history)
    figures.lost = len(lost)
    if lost:
        figures.problems.append(f"lost: {lost[:3]}")
    # Each side effect at most once, counted in the world.
    figures.double_effects = 0
    if paths.effects.exists():
        for f in paths.effects.iterdir():
            n = len(f.read_text().splitlines())
            if n > 1:
                figures.double_effects += 1
    # Every interrupted action reported unknown, never silently retried.
    recovered = [h for h in history if h["op"] == "recover_intercept"]
    figures.interrupted = len(recovered)
    figures.reported_unknown = sum(
        1
        for h in recovered
        if not h["proceed"] and h["status"] in ("unknown", "reconcile_required")
    )
    figures.silent_retries = sum(1 for h in recovered if h["proceed"])
    finished = {h["round"] for h in history if h["op"] == "recovered"}
    figures.died_in_recovery = len({h["round"] for h in recovered} - finished)
    if final:
        # After a clean recovery, the ledger agrees with the world for every action.
        figures.unsettled = sum(
            1 for a in actions.values() if a.status in (ActionStatus.STARTED, ActionStatus.UNKNOWN)
        )
        for key, a in actions.items():
            done = effect_happened(paths, key or "")
            if (a.status == ActionStatus.COMPLETED) != done:
                figures.ledger_world_mismatches += 1
                figures.problems.append(f"{key}: ledger says {a.status}, effect done: {done}")


def run_f1(
    root: Path,
    *,
    rounds: int,
    seed: int,
    strategy: str = "reconcile",
    check_every: int = 25,
    kill_window_s: float = 0.03,
    max_hit: int = 4,
) -> F1Figures:
    """``rounds`` worker lives, each ended by a fault point or a random SIGKILL.

    A point armed ``@N`` fires at its N-th hit, N in 1..``max_hit``: small values make the
    worker die while it is still recovering from the previous one (the soak's compound
    fault "crash during recovery").
    """
    paths = Paths(root)
    paths.effects.mkdir(parents=True, exist_ok=True)
    with SQLiteStorage(paths.db) as store:
        store.create_run(Run(run_id=RUN))
    rng = random.Random(seed)
    figures = F1Figures()
    for round_no in range(rounds):
        if rng.random() < 0.5:
            point = rng.choice(POINTS)
            fault, kill_after, max_ops = f"{point}@{rng.randint(1, max_hit)}", None, OPS_UNTIL_FAULT
        else:
            point, fault = "", ""
            kill_after, max_ops = rng.uniform(0, kill_window_s), OPS_PER_ROUND
        status = fork_round(
            paths, round_no, fault, rng.randrange(2**32), strategy, kill_after, max_ops
        )
        figures.rounds += 1
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == FAULT_EXIT_CODE:
            figures.kills += 1
            figures.at_fault_points += 1
            figures.by_point[point] = figures.by_point.get(point, 0) + 1
        elif os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
            figures.kills += 1
        elif not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
            crash = paths.crash_report.read_text() if paths.crash_report.exists() else ""
            raise AssertionError(f"worker of round {round_no} ended with status {status}:\n{crash}")
        if round_no % check_every == check_every - 1:
            check(paths, figures, final=False)
    # The last word: a fresh worker with no fault armed recovers everything.
    status = fork_round(paths, rounds, "", rng.randrange(2**32), strategy, None, max_ops=0)
    if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
        crash = paths.crash_report.read_text() if paths.crash_report.exists() else ""
        raise AssertionError(f"final recovery ended with status {status}:\n{crash}")
    check(paths, figures, final=True)
    return figures


@pytest.fixture
def shm_path(tmp_path: Path) -> Iterator[Path]:
    """A directory on /dev/shm where there is one, else ``tmp_path``.

    These rows test process death, not durability (the page cache outlives a killed
    process; power loss is F2/F3), so a tmpfs loses nothing of the point and spares a
    shared machine's disk thousands of fsyncs.
    """
    if not (os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK)):
        yield tmp_path
        return
    d = Path(tempfile.mkdtemp(prefix="continuum-crash-", dir="/dev/shm"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_kills_at_fault_points_and_random_times_lose_nothing_and_repeat_no_effect(
    shm_path: Path,
) -> None:
    figures = run_f1(shm_path, rounds=300, seed=1)

    print(figures.line())
    assert figures.problems == []
    assert (figures.lost, figures.breaks, figures.double_effects) == (0, 0, 0)
    assert figures.silent_retries == 0
    assert figures.reported_unknown == figures.interrupted > 0
    assert figures.unsettled == 0 and figures.ledger_world_mismatches == 0
    assert figures.kills >= 0.85 * figures.rounds  # a round armed at a point it never reached
    # (e.g. after_reconcile_commit with nothing to reconcile) ends by itself
    assert set(figures.by_point) == set(POINTS), figures.by_point  # every point was hit


def test_the_harness_counts_double_effects_when_recovery_retries_interrupted_actions(
    shm_path: Path,
) -> None:
    figures = run_f1(shm_path, rounds=80, seed=2, strategy="retry")

    print(
        f"F1-neg: control caught {figures.double_effects} double effects in {figures.kills} kills"
    )
    assert figures.double_effects > 0
    assert figures.silent_retries == 0  # the ledger still said unknown; the agent retried

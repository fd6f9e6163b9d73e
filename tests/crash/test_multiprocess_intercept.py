"""F6: several real processes on one SQLite file (contract §3, 6).

Four worker processes start together (each says "ready" on stdout, then blocks on stdin
until the test has heard from all of them and sends "go"), then intercept the same keys,
or append to the same run. Results come back as one JSON line each. Intercepting workers
either complete each action at once (``interleaved``) or keep everything they got in
flight until they have seen every key (``batched``), so the others meet live owners.

Negative control: the same harness with one store file per process (a ledger whose
dedup does not reach across processes) must count double proceeds, so a green run of
the real one means something.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from continuum.runtime.facade import Continuum
from continuum.store import Run, SQLiteStorage
from continuum.types import ActionStatus
from tests.crash.workers import release_together

RUN = "run_shared"
WORKERS = 4
KEYS = 150
APPENDS = 100
DEADLINE_S = 120

WORKER = r"""
import json, os, random, sys
from continuum.errors import ContinuumError
from continuum.ledger.core import ActionLedger
from continuum.store import open_store

mode, db, run_id, count, worker = sys.argv[1:6]
count, worker = int(count), int(worker)
store = open_store(db, create=False)
ledger = ActionLedger(store)
print("ready", flush=True)
sys.stdin.readline()  # the go signal: every worker starts together
out = {"pid": os.getpid(), "worker": worker, "proceeded": [], "answers": {}, "errors": []}
order = list(range(count))
if mode != "append":
    random.Random(worker).shuffle(order)  # each worker meets the others' keys mid-flight
pending = []
for i in order:
    try:
        if mode == "append":
            store.append_event(run_id, "work_completed", {"worker": worker, "n": i})
            continue
        key = f"invoice:{i}"
        r = ledger.intercept(run_id, "send_invoice", {"invoice": i}, key=key)
        out["answers"][key] = r.status
        if r.proceed:
            out["proceeded"].append(key)
            pending.append((key, r.action_key))
        if mode == "interleaved" and r.proceed:  # perform and complete at once
            pending.pop()
            ledger.complete(run_id, r.action_key, external_id=f"{os.getpid()}:{key}")
    except ContinuumError as e:
        out["errors"].append(e.code)
# batched: everything this worker got stays in flight until it has seen every key
for key, action_key in pending:
    try:
        ledger.complete(run_id, action_key, external_id=f"{os.getpid()}:{key}")
    except ContinuumError as e:
        out["errors"].append(e.code)
store.close()
print(json.dumps(out), flush=True)
"""


def make_store(path: Path) -> None:
    with SQLiteStorage(path) as store:
        store.create_run(Run(run_id=RUN))


def run_workers(mode: str, dbs: list[Path], count: int) -> list[dict[str, Any]]:
    """Start one worker per db path, release them together, return their JSON reports."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, mode, str(db), RUN, str(count), str(w)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w, db in enumerate(dbs)
    ]
    return release_together(procs, DEADLINE_S)


def double_proceeds(reports: list[dict[str, Any]]) -> dict[str, int]:
    """Keys that more than one caller was told to perform, with how many were."""
    counts = Counter(key for r in reports for key in r["proceeded"])
    return {key: n for key, n in counts.items() if n > 1}


@pytest.mark.parametrize("mode", ["interleaved", "batched"])
def test_four_processes_intercepting_the_same_keys_proceed_once_per_key(
    tmp_path: Path, mode: str
) -> None:
    db = tmp_path / "shared.db"
    make_store(db)

    reports = run_workers(mode, [db] * WORKERS, KEYS)

    assert [r["errors"] for r in reports] == [[]] * WORKERS
    assert double_proceeds(reports) == {}
    proceeded = {key: r["pid"] for r in reports for key in r["proceeded"]}
    assert sorted(proceeded) == sorted(f"invoice:{i}" for i in range(KEYS))
    for r in reports:
        for key, status in r["answers"].items():
            expected = {"started"} if proceeded[key] == r["pid"] else {"in_progress", "completed"}
            assert status in expected, (key, status)
    with SQLiteStorage(db) as store:
        events = store.read_events(RUN)
        assert [e.sequence for e in events] == list(range(1, 2 * KEYS + 1))
        assert Counter(e.type for e in events) == {
            "action_intercepted": KEYS,
            "action_completed": KEYS,
        }
        for action in Continuum(store).actions(RUN):
            assert action.status == ActionStatus.COMPLETED
            assert action.attempt == 1
            assert action.external_id == f"{proceeded[action.key or '']}:{action.key}"
        assert Continuum(store).verify(RUN).ok
    answers = Counter(s for r in reports for s in r["answers"].values())
    print(
        f"{mode}: {WORKERS * KEYS} intercepts / {WORKERS} procs: 0 double proceeds "
        f"({answers['in_progress']} in_progress, {answers['completed']} completed)"
    )


def test_the_harness_counts_double_proceeds_when_dedup_does_not_reach_across_processes(
    tmp_path: Path,
) -> None:
    dbs = [tmp_path / f"private-{w}.db" for w in range(WORKERS)]
    for db in dbs:
        make_store(db)

    reports = run_workers("interleaved", dbs, KEYS)

    doubles = double_proceeds(reports)
    assert len(doubles) == KEYS
    assert set(doubles.values()) == {WORKERS}
    print(f"control caught {len(doubles)} keys performed {WORKERS} times")


def test_four_processes_appending_to_one_run_make_one_gapless_chain(tmp_path: Path) -> None:
    db = tmp_path / "appends.db"
    make_store(db)

    reports = run_workers("append", [db] * WORKERS, APPENDS)

    assert [r["errors"] for r in reports] == [[]] * WORKERS
    with SQLiteStorage(db) as store:
        events = store.read_events(RUN)
        assert [e.sequence for e in events] == list(range(1, WORKERS * APPENDS + 1))
        for w in range(WORKERS):
            mine = [e.payload["n"] for e in events if e.payload["worker"] == w]
            assert mine == list(range(APPENDS))  # nothing lost, each writer's order kept
        report = store.verify_events(RUN)
        assert report.ok
        assert report.head_sequence == WORKERS * APPENDS
    switches = sum(
        1
        for a, b in zip(events, events[1:], strict=False)
        if a.payload["worker"] != b.payload["worker"]
    )
    print(
        f"{WORKERS * APPENDS} appends / {WORKERS} procs: 0 forks, 0 gaps, 0 lost "
        f"({switches} writer switches)"
    )


def test_the_harness_fails_loudly_when_a_worker_cannot_start(tmp_path: Path) -> None:
    with pytest.raises(AssertionError):
        run_workers("interleaved", [tmp_path / "missing.db"], 1)
    assert not (tmp_path / "missing.db").exists()

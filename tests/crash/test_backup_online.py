"""An online backup while 4 processes append and intercept (issue 17), both backends.

Four worker processes write to two runs at once: each appends an event to ``orders``,
then intercepts (and completes) an action on ``ledger`` whose arguments name that
event's sequence, and intercepts a key all workers share. Halfway through, the test
lets them go on and takes a backup meanwhile. The backup must verify; restored, every
run must be a prefix of the final log (same hashes), and the copy must be of one moment
across runs: no ``ledger`` action may name an ``orders`` event the copy lacks (a copy
read run by run at different times would).

Negative control: copying the runs one after the other, each in its own read, with one
write landing in between, is caught by the same check; the same reads inside one
snapshot (``Storage.snapshot``) are not, although the write lands in between as well.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from continuum.eventlog.event_model import Event
from continuum.eventlog.events import EventType
from continuum.ops.backup import restore_backup, verify_backup
from continuum.runtime.facade import Continuum
from continuum.store import Storage, open_store
from tests.contract.conftest import (  # noqa: F401 - the session database's cleanup, here too
    BACKENDS,
    StoreFactory,
    _drop_the_session_database,
)

WORKERS = 4
STEPS = 40  # per worker, half before the backup, half during it
SHARED = 10
DEADLINE_S = 180

WORKER = r"""
import json, os, sys
from continuum.errors import ContinuumError
from continuum.runtime.facade import Continuum
from continuum.store import open_store

url, worker, steps, shared = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rt = Continuum(open_store(url, create=False))
print("ready", flush=True)
sys.stdin.readline()  # go
out = {"worker": worker, "proceeded_shared": [], "errors": []}
for i in range(steps):
    if i == steps // 2:
        print("half", flush=True)
        sys.stdin.readline()  # the backup starts now: go on writing meanwhile
    try:
        event = rt.append("orders", "work_completed", {"item_id": f"{worker}-{i}"})
        own = rt.intercept("ledger", "send_invoice", {"orders_seq": event.sequence,
                           "worker": worker, "i": i}, key=f"invoice:{worker}-{i}")
        rt.complete("ledger", own.action_key, external_id=f"mail-{worker}-{i}")
        common = rt.intercept("ledger", "notify", {"n": i % shared}, key=f"notice:{i % shared}")
        if common.proceed:
            out["proceeded_shared"].append(i % shared)
            rt.complete("ledger", common.action_key, external_id=f"{worker}")
    except ContinuumError as e:
        out["errors"].append(e.code)
rt.close()
print(json.dumps(out), flush=True)
"""


@pytest.fixture(params=sorted(BACKENDS))
def factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """The contract suite's ``store_factory``: each backend in turn, a fresh store."""
    with BACKENDS[request.param](tmp_path) as url:
        made = StoreFactory(request.param, url)
        try:
            yield made
        finally:
            made.close_all()


def start(store: Storage) -> None:
    rt = Continuum(store)
    rt.start_run("orders", "orders taken")
    rt.start_run("ledger", "invoices sent")


def prefix_problems(source: Storage, copy: dict[str, list[Event]]) -> list[str]:
    """What is wrong with ``copy`` as a copy of one moment of ``source``."""
    problems = []
    for run_id, events in copy.items():
        mine = [e.hash for e in events]
        if [e.hash for e in source.read_events(run_id)][: len(mine)] != mine:
            problems.append(f"{run_id} is not a prefix of the source's log")
    orders = len(copy["orders"])
    for e in copy["ledger"]:
        named = (e.payload.get("arguments") or {}).get("orders_seq", 0)
        if e.type == EventType.ACTION_INTERCEPTED and named > orders:
            problems.append(
                f"ledger event {e.sequence} names orders event {named}; the copy "
                f"of orders ends at {orders}"
            )
    return problems


def _line(p: subprocess.Popen[str]) -> str:
    assert p.stdout is not None
    return p.stdout.readline().strip()


def _send(procs: list[subprocess.Popen[str]], word: str) -> None:
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(word + "\n")
        p.stdin.flush()


def test_a_backup_taken_while_four_processes_write_is_one_consistent_moment(
    factory: StoreFactory, tmp_path: Path
) -> None:
    start(factory.open())
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, factory.url, str(w), str(STEPS), str(SHARED)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(WORKERS)
    ]
    try:
        assert [_line(p) for p in procs] == ["ready"] * WORKERS
        _send(procs, "go")
        assert [_line(p) for p in procs] == ["half"] * WORKERS
        _send(procs, "continue")
        backup = tmp_path / "online.backup"
        manifest = Continuum(factory.open()).backup(backup)
        reports: list[dict[str, Any]] = []
        for p in procs:
            out, err = p.communicate(timeout=DEADLINE_S)
            assert p.returncode == 0, err
            reports.append(json.loads(out))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()

    assert [r["errors"] for r in reports] == [[]] * WORKERS
    shared = sorted(n for r in reports for n in r["proceeded_shared"])
    assert shared == list(range(SHARED))  # each shared key performed once, across processes
    assert verify_backup(backup)["ok"]
    restored_path = tmp_path / "restored.db"
    restore_backup(backup, str(restored_path))
    source = factory.open()
    restored = open_store(str(restored_path), create=False)
    try:
        copy = {run_id: restored.read_events(run_id) for run_id in ("orders", "ledger")}
        assert prefix_problems(source, copy) == []
        final = {r.run_id: r.head_sequence for r in source.list_runs()}
        taken = {run_id: len(events) for run_id, events in copy.items()}
        assert taken == {r: v["head_sequence"] for r, v in manifest["runs"].items()}
        assert final["orders"] == WORKERS * STEPS + 1
        # the workers were still writing while the copy was taken (it is a strict prefix)
        assert taken["orders"] < final["orders"] or taken["ledger"] < final["ledger"], (
            taken,
            final,
        )
        assert taken["orders"] > WORKERS * STEPS // 2  # and it came after the halfway point
    finally:
        restored.close()
    print(
        f"{factory.backend}: backup during {WORKERS} writers: orders {taken['orders']}/"
        f"{final['orders']}, ledger {taken['ledger']}/{final['ledger']} events; consistent "
        f"prefix, 0 double proceeds"
    )


def test_the_check_catches_a_copy_read_run_by_run_and_passes_one_read_in_a_snapshot(
    factory: StoreFactory,
) -> None:
    store = factory.open()
    start(store)
    writer = Continuum(factory.open())  # another handle: another process would do

    def write_pair(i: int) -> None:
        event = writer.append("orders", EventType.WORK_COMPLETED, {"item_id": f"x{i}"})
        r = writer.intercept(
            "ledger", "send_invoice", {"orders_seq": event.sequence}, key=f"invoice:{i}"
        )
        writer.complete("ledger", r.action_key)

    for i in range(3):
        write_pair(i)
    orders = store.read_events("orders")  # run by run, each read on its own ...
    write_pair(3)  # ... and a write lands in between
    naive = {"orders": orders, "ledger": store.read_events("ledger")}
    assert prefix_problems(store, naive) != []

    with store.snapshot():
        orders = store.read_events("orders")
        write_pair(4)  # committed by the other handle, outside this snapshot
        in_one = {"orders": orders, "ledger": store.read_events("ledger")}
    assert prefix_problems(store, in_one) == []
    assert len(in_one["ledger"]) < len(store.read_events("ledger"))

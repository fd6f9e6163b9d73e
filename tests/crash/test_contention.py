"""F6 and F7: several writer processes on one SQLite file, some killed (contract §3, 6).

Complements ``test_multiprocess_intercept.py`` (intercepts only, or appends only) with a
mixed workload and a history: every worker reports each call with its invocation and
acknowledgement times (CLOCK_MONOTONIC, shared by all processes on the host), the test
writes the merged history as JSONL and checks it afterwards:

- one gapless chain that verifies (no fork), index included;
- each shared key proceeded exactly once, and its side effect (a real file) happened once;
- nothing acknowledged lost;
- the log order respects real time: an event acknowledged before another call started
  has the smaller sequence (what "serialized" means to an observer).

F6-neg: writers holding a stale head (they read it, then others appended) are rejected
by the (run, sequence) key; with the key removed, the same writers fork the chain and
verify catches it, so the rejection is the key's doing.

F7: four writers, two killed mid-flight (one by SIGKILL at a random point, one at a
fault point inside its write transaction, holding the write lock): the survivors finish,
no lock is left behind, nothing acknowledged is lost, and the dead writers' interrupted
actions are reported unknown.
"""

from __future__ import annotations

import bisect
import json
import os
import random
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import apsw
import pytest

from continuum.errors import ForkRejectedError
from continuum.ledger.core import ActionLedger
from continuum.runtime.facade import Continuum
from continuum.store import Run, SQLiteStorage
from continuum.types import ActionStatus

RUN = "run_f6"
DEADLINE_S = 300

WORKER = r"""
import json, os, random, sys, time
from continuum.errors import ContinuumError
from continuum.ledger.core import ActionLedger
from continuum.store import SQLiteStorage

db, effects, worker, ops, keys, seed = sys.argv[1:7]
worker, ops, keys = int(worker), int(ops), int(keys)
rng = random.Random(int(seed))
store = SQLiteStorage(db, create=False)
ledger = ActionLedger(store)


def out(**record):
    record["w"] = worker
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


out(op="ready", pid=os.getpid())
sys.stdin.readline()  # everyone starts together
order = list(range(keys))
rng.shuffle(order)
for i in range(ops):
    t0 = time.monotonic_ns()
    try:
        if i % 2 == 0:
            e = store.append_event("run_f6", "work_completed", {"w": worker, "n": i})
            out(op="append", seq=e.sequence, hash=e.hash, n=i, t0=t0, t1=time.monotonic_ns())
            continue
        key = f"inv:{order[(i // 2) % keys]}"
        r = ledger.intercept("run_f6", "send_invoice", {"invoice": key}, key=key)
        out(op="intercept", key=key, proceed=r.proceed, status=r.status, t0=t0,
            t1=time.monotonic_ns())
        if r.proceed:
            fd = os.open(os.path.join(effects, key), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            os.write(fd, f"{worker}\n".encode())
            os.close(fd)
            t0 = time.monotonic_ns()
            ledger.complete("run_f6", r.action_key, external_id=f"{worker}:{key}")
            out(op="complete", key=key, t0=t0, t1=time.monotonic_ns())
    except ContinuumError as e:
        out(op="error", code=e.code, message=e.message, n=i)
store.close()
out(op="done")
"""


@dataclass
class ContentionFigures:
    workers: int = 0
    calls: int = 0
    appends: int = 0
    intercepts: int = 0
    kills: int = 0
    forks: int = 0
    gaps: int = 0
    double_proceeds: int = 0
    double_effects: int = 0
    lost: int = 0
    order_violations: int = 0
    stale_locks: int = 0
    errors: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_store(db: Path) -> None:
    with SQLiteStorage(db) as store:
        store.create_run(Run(run_id=RUN))


def start_workers(
    db: Path,
    effects: Path,
    n: int,
    ops: int,
    keys: int,
    seed: int,
    faults: dict[int, str] | None = None,
) -> list[subprocess.Popen[str]]:
    procs = []
    for w in range(n):
        env = {k: v for k, v in os.environ.items() if k != "CONTINUUM_FAULTS"}
        if faults and w in faults:
            env["CONTINUUM_FAULTS"] = faults[w]
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    WORKER,
                    str(db),
                    str(effects),
                    str(w),
                    str(ops),
                    str(keys),
                    str(seed * 100 + w),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
        )
    return procs


def drive(
    procs: list[subprocess.Popen[str]], kill_at: dict[int, int] | None = None
) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """Release the workers together, collect their history, kill victims at their counts.

    Returns the merged history and each worker's exit status.
    """
    kill_at = kill_at or {}
    for p in procs:
        assert p.stdout is not None
        ready = json.loads(p.stdout.readline() or "{}")
        assert ready.get("op") == "ready", p.communicate(timeout=DEADLINE_S)
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    history: list[dict[str, Any]] = []
    acked = Counter[int]()
    sel = selectors.DefaultSelector()
    for w, p in enumerate(procs):
        assert p.stdout is not None
        sel.register(p.stdout, selectors.EVENT_READ, w)
    open_pipes = len(procs)
    try:
        while open_pipes:
            for key, _ in sel.select(timeout=DEADLINE_S):
                w = key.data
                line = key.fileobj.readline()  # type: ignore[union-attr]
                if not line:
                    sel.unregister(key.fileobj)
                    open_pipes -= 1
                    continue
                record = json.loads(line)
                history.append(record)
                acked[w] += 1
                if w in kill_at and acked[w] == kill_at[w]:
                    procs[w].kill()  # SIGKILL, somewhere inside its next call
    finally:
        sel.close()
    statuses = {}
    for w, p in enumerate(procs):
        p.wait(timeout=DEADLINE_S)
        statuses[w] = p.returncode
        assert p.stderr is not None
        err = p.stderr.read()
        if p.returncode not in (0, -signal.SIGKILL, 86):
            raise AssertionError(f"worker {w} ended with {p.returncode}:\n{err}")
        for s in (p.stdin, p.stdout, p.stderr):
            if s is not None:
                s.close()
    return history, statuses


def check_history(
    db: Path,
    effects: Path,
    history: list[dict[str, Any]],
    figures: ContentionFigures,
    *,
    history_file: Path,
) -> Continuum:
    """The checks of the module docstring; returns an open facade for further checks."""
    history_file.write_text("".join(json.dumps(h) + "\n" for h in history))
    figures.errors += [f"w{h['w']}: {h['code']}" for h in history if h["op"] == "error"]
    store = SQLiteStorage(db, create=False)
    app = Continuum(store)
    report = app.verify(RUN)
    if not report.ok:
        figures.forks += 1
        figures.problems.append(f"verify: {report.violations[:2]}")
        return app
    events = store.read_events(RUN)
    seqs = [e.sequence for e in events]
    figures.gaps = sum(1 for a, b in zip(seqs, seqs[1:], strict=False) if b != a + 1)
    hashes = {e.sequence: e.hash for e in events}
    actions = {a.key: a for a in app.actions(RUN)}
    intercepted = {
        e.payload["action_key"]: e.sequence for e in events if e.type == "action_intercepted"
    }
    completed = {e.payload["action_id"]: e.sequence for e in events if e.type == "action_completed"}
    calls = [h for h in history if h["op"] in ("append", "intercept", "complete")]
    figures.calls += len(calls)
    figures.appends += sum(1 for h in calls if h["op"] == "append")
    figures.intercepts += sum(1 for h in calls if h["op"] == "intercept")

    # Nothing acknowledged lost; each key proceeded once; its effect happened once.
    def present(h: dict[str, Any]) -> bool:
        a = actions.get(h["key"]) if "key" in h else None
        if h["op"] == "append":
            return hashes.get(h["seq"]) == h["hash"]
        if h["op"] == "intercept":
            return not h["proceed"] or a is not None
        return a is not None and a.status == ActionStatus.COMPLETED  # complete

    lost = [h for h in calls if not present(h)]
    figures.lost += len(lost)
    if lost:
        figures.problems.append(f"lost: {lost[:3]}")
    proceeds = Counter(h["key"] for h in calls if h["op"] == "intercept" and h["proceed"])
    figures.double_proceeds += sum(1 for n in proceeds.values() if n > 1)
    for f in effects.iterdir():
        if len(f.read_text().splitlines()) > 1:
            figures.double_effects += 1
    # Real-time order: whatever was acknowledged before a call started precedes it in the log.
    placed = []
    for h in calls:
        if h["op"] == "append":
            placed.append((h["t0"], h["t1"], h["seq"]))
        elif h["op"] == "intercept" and h["proceed"]:
            placed.append((h["t0"], h["t1"], intercepted[f"send_invoice:{h['key']}"]))
        elif h["op"] == "complete":
            placed.append((h["t0"], h["t1"], completed[actions[h["key"]].action_id]))
    by_ack = sorted(placed, key=lambda p: p[1])
    acks = [p[1] for p in by_ack]
    prefix_max, best = [], 0
    for p in by_ack:
        best = max(best, p[2])
        prefix_max.append(best)
    for t0, _, seq in placed:
        i = bisect.bisect_left(acks, t0)  # calls acknowledged strictly before this one began
        if i and prefix_max[i - 1] >= seq:
            figures.order_violations += 1
    return app


def run_f6(root: Path, *, workers: int, ops: int, keys: int, seed: int) -> ContentionFigures:
    db, effects = root / "f6.db", root / "effects"
    effects.mkdir(parents=True)
    make_store(db)
    figures = ContentionFigures(workers=workers)
    history, _ = drive(start_workers(db, effects, workers, ops, keys, seed))
    app = check_history(db, effects, history, figures, history_file=root / "history.jsonl")
    try:
        proceeded = {h["key"] for h in history if h["op"] == "intercept" and h["proceed"]}
        if proceeded != {f"inv:{k}" for k in range(keys)}:
            figures.problems.append(f"{keys - len(proceeded)} keys never proceeded")
    finally:
        app.close()
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


def test_four_writers_mixing_appends_and_shared_intercepts_keep_one_serial_history(
    shm_path: Path,
) -> None:
    figures = run_f6(shm_path, workers=4, ops=600, keys=60, seed=9)

    print(
        f"F6: {figures.calls:,} calls ({figures.appends} appends, {figures.intercepts} "
        f"intercepts on 60 shared keys) / 4 procs: {figures.forks} forks, {figures.gaps} gaps, "
        f"{figures.double_proceeds} double proceeds, {figures.double_effects} double effects, "
        f"{figures.lost} lost, {figures.order_violations} real-time order violations"
    )
    assert figures.problems == [] and figures.errors == []
    assert (
        figures.forks,
        figures.gaps,
        figures.double_proceeds,
        figures.double_effects,
        figures.lost,
        figures.order_violations,
    ) == (0, 0, 0, 0, 0, 0)
    assert figures.appends == 1200


# -- F6-neg: stale heads ----------------------------------------------------------------------

STALE_WRITER = r"""
import json, sys
from continuum.errors import ContinuumError
from continuum.eventlog.events import EventType
from continuum.store import SQLiteStorage

db, worker = sys.argv[1], int(sys.argv[2])
store = SQLiteStorage(db, create=False)
for line in sys.stdin:
    if line.strip() == "read":
        head = store.get_run("run_f6")  # then the others append, and this head goes stale
        print("read", flush=True)
    elif line.strip() == "write":
        try:
            with store.write("run_f6") as tx:
                # A writer that did not re-read the head inside its transaction.
                tx._head = tx.head._replace(head_sequence=head.head_sequence,
                                            head_hash=head.head_hash)
                e = tx.append(EventType.WORK_COMPLETED, {"w": worker}, source="deterministic")
            print(json.dumps({"ok": e.sequence}), flush=True)
        except ContinuumError as e:
            print(json.dumps({"error": e.code}), flush=True)
"""


def drop_the_sequence_key(db: Path) -> None:
    """Rebuild ``events`` without its (run, sequence) primary key: the broken variant."""
    conn = apsw.Connection(str(db))
    try:
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'events'").fetchall()[0][0]
        assert isinstance(sql, str)
        broken = sql.replace(",\n            PRIMARY KEY (run_id, sequence)", "")
        assert broken != sql
        conn.execute("BEGIN")
        conn.execute("ALTER TABLE events RENAME TO events_old")
        conn.execute(broken)
        conn.execute("INSERT INTO events SELECT * FROM events_old")
        conn.execute("DROP TABLE events_old")
        conn.execute("COMMIT")
    finally:
        conn.close()


def run_stale_heads(db: Path, *, writers: int, rounds: int) -> dict[str, int]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", STALE_WRITER, str(db), str(w)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(writers)
    ]

    def ask(p: subprocess.Popen[str], what: str) -> str:
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write(what + "\n")
        p.stdin.flush()
        line = p.stdout.readline()
        assert line, p.stderr.read() if p.stderr else ""
        return line.strip()

    outcome = Counter[str]()
    try:
        for _ in range(rounds):
            for p in procs:  # all read the same head...
                assert ask(p, "read") == "read"
            for p in procs:  # ...then write one after another: all but the first are stale
                reply = json.loads(ask(p, "write"))
                outcome["written" if "ok" in reply else reply["error"]] += 1
    finally:
        for p in procs:
            if p.stdin is not None:
                p.stdin.close()
            p.wait(timeout=DEADLINE_S)
            for s in (p.stdout, p.stderr):
                if s is not None:
                    s.close()
    return dict(outcome)


def test_writers_with_a_stale_head_are_rejected_by_the_sequence_key(tmp_path: Path) -> None:
    db = tmp_path / "stale.db"
    make_store(db)
    outcome = run_stale_heads(db, writers=4, rounds=25)

    with SQLiteStorage(db, create=False) as store:
        report = store.verify_events(RUN)
    print(
        f"F6-neg: {outcome.get('integrity.fork_rejected', 0)} forks rejected, "
        f"{0 if report.ok else len(report.violations)} breaks "
        f"({outcome.get('written', 0)} stale-free writes)"
    )
    assert outcome == {"written": 25, ForkRejectedError.code: 75}
    assert report.ok and report.head_sequence == 25


def test_without_the_sequence_key_the_same_stale_writers_fork_the_chain(tmp_path: Path) -> None:
    db = tmp_path / "nokey.db"
    make_store(db)
    drop_the_sequence_key(db)
    outcome = run_stale_heads(db, writers=4, rounds=5)

    with SQLiteStorage(db, create=False) as store:
        report = store.verify_events(RUN)
    print(
        f"F6-neg control: without the key {outcome.get('written', 0)} stale writes landed; "
        f"verify caught {len(report.violations)} breaks"
    )
    assert outcome == {"written": 20}
    assert not report.ok


# -- F7: writers killed while others write ----------------------------------------------------


def run_f7(
    root: Path, *, rounds: int, seed: int, ops: int = 160, keys: int = 30
) -> ContentionFigures:
    rng = random.Random(seed)
    figures = ContentionFigures(workers=4)
    for r in range(rounds):
        work = root / f"round{r}"
        db, effects = work / "f7.db", work / "effects"
        effects.mkdir(parents=True)
        make_store(db)
        shot, trapped = rng.sample(range(4), 2)
        # One victim is SIGKILLed after a random number of reports; the other dies inside a
        # write transaction (before its COMMIT), holding the write lock.
        faults = {trapped: f"before_append_commit@{rng.randint(5, ops // 2)}"}
        procs = start_workers(db, effects, 4, ops, keys, seed * 1000 + r, faults)
        history, statuses = drive(procs, kill_at={shot: rng.randint(5, ops // 2)})
        dead = {w for w, s in statuses.items() if s != 0}
        figures.kills += len(dead)
        if dead != {shot, trapped}:
            figures.problems.append(f"round {r}: expected {shot} and {trapped} dead, got {dead}")
        survivors_done = {h["w"] for h in history if h["op"] == "done"}
        if survivors_done != set(range(4)) - {shot, trapped}:
            figures.problems.append(f"round {r}: survivors that finished: {survivors_done}")
        app = check_history(db, effects, history, figures, history_file=work / "history.jsonl")
        try:
            # No stale lock: a fresh writer that will not wait gets the lock at once.
            with SQLiteStorage(db, create=False, busy_timeout_ms=0) as probe:
                try:
                    probe.append_event(RUN, "work_completed", {"probe": r})
                except Exception as e:  # counted, then shown by the assertion
                    figures.stale_locks += 1
                    figures.problems.append(f"round {r}: {e!r}")
            # The dead writers' interrupted actions are reported unknown, never retried.
            ledger = ActionLedger(app.store)
            for a in app.actions(RUN):
                if a.status == ActionStatus.STARTED:
                    answer = ledger.intercept(RUN, "send_invoice", {"invoice": a.key}, key=a.key)
                    if answer.proceed or answer.status != "unknown":
                        figures.problems.append(f"round {r}: {a.key} answered {answer.status}")
        finally:
            app.close()
    return figures


def test_two_of_four_writers_killed_mid_flight_leave_no_stale_lock_and_lose_nothing(
    shm_path: Path,
) -> None:
    figures = run_f7(shm_path, rounds=5, seed=10)

    print(
        f"F7: {figures.kills} kills ({figures.calls:,} calls from 4 procs x 5 rounds): "
        f"{figures.stale_locks} stale locks, {figures.lost} lost, {figures.forks} forks, "
        f"{figures.double_proceeds} double proceeds"
    )
    assert figures.problems == [] and figures.errors == []
    assert figures.kills == 10
    assert (
        figures.stale_locks,
        figures.lost,
        figures.forks,
        figures.gaps,
        figures.double_proceeds,
        figures.double_effects,
        figures.order_violations,
    ) == (0, 0, 0, 0, 0, 0, 0)


@pytest.fixture(autouse=True)
def _no_inherited_faults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONTINUUM_FAULTS", raising=False)

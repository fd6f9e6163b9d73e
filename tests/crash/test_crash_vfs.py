"""F3: torn and partial unsynced writes, swept over crash points x seeds (contract §3, 4).

A writer process runs the store over a recording VFS (apsw's VFS layer wrapping the
default one): every write, truncate and sync of the database and its WAL goes to an
operation log, interleaved with the writer's acknowledgements (logged only after the
call returned). The writer then dies at a fault point in the middle of a transaction.

From the log the test builds crash images. For a crash at operation ``c``, each file is
what its last sync before ``c`` made durable, plus an arbitrary mix of the writes issued
since: each one lost, applied, or torn (a random subset of its 512-byte sectors). Each
image is opened as after a reboot. It must pass SQLite's integrity check, the chain
must verify (head and index included), and every event acknowledged before ``c`` must
be there: committed or absent, never corrupt.

Negative control (F3-neg): the same sweep over a writer on ``synchronous=NORMAL`` must
lose acknowledged events.
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import apsw

from continuum.errors import ContinuumError
from continuum.runtime.facade import Continuum
from continuum.store import Run, SQLiteStorage
from continuum.types import ActionStatus

RUN = "run_f3"
SECTOR = 512
HEADER = struct.Struct("<cBqI")  # kind, file (0 db, 1 wal), offset or size, data length
DB, WAL = 0, 1

WORKER = r"""
import json, os, struct, sys
import apsw
from continuum.ledger.core import ActionLedger
from continuum.store import SQLiteStorage

db, log_path, synchronous, ops, checkpoint_pages = sys.argv[1:6]
ops, checkpoint_pages = int(ops), int(checkpoint_pages)
HEADER = struct.Struct("<cBqI")
log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def record(kind, file, offset, data=b""):
    os.write(log, HEADER.pack(kind, file, offset, len(data)) + data)


class RecordingFile(apsw.VFSFile):
    def __init__(self, name, flags):
        super().__init__("unix", name, flags)
        path = name if isinstance(name, str) else name.filename()
        self.file = 1 if path.endswith("-wal") else 0

    def xWrite(self, data, offset):
        record(b"W", self.file, offset, bytes(data))
        super().xWrite(data, offset)

    def xTruncate(self, size):
        record(b"T", self.file, size)
        super().xTruncate(size)

    def xSync(self, flags):
        super().xSync(flags)
        record(b"S", self.file, 0)


class RecordingVFS(apsw.VFS):
    def __init__(self):
        super().__init__("recording", "unix", makedefault=True)

    def xOpen(self, name, flags):
        path = name if isinstance(name, str) else name.filename()
        if path.endswith("-journal"):  # only while the store first switches to WAL
            return super().xOpen(name, flags)
        return RecordingFile(name, flags)


vfs = RecordingVFS()
if checkpoint_pages:  # checkpoints inside the trace: database writes, syncs, WAL restarts
    apsw.connection_hooks.append(
        lambda c: c.execute(f"PRAGMA wal_autocheckpoint={checkpoint_pages}"))
store = SQLiteStorage(db, create=False, _synchronous=synchronous)
ledger = ActionLedger(store)
for i in range(ops):
    if i % 4 == 3:
        r = ledger.intercept("run_f3", "send", {"n": i}, key=f"k{i}")
        ledger.complete("run_f3", r.action_key, external_id=f"k{i}")
        ack = {"op": "complete", "key": f"k{i}"}
    else:
        e = store.append_event("run_f3", "work_completed", {"n": i, "pad": "y" * (37 * i % 900)})
        ack = {"op": "append", "seq": e.sequence, "hash": e.hash}
    record(b"A", 0, 0, json.dumps(ack).encode())
"""


@dataclass
class Op:
    kind: str  # W write, T truncate, S sync, A acknowledgement
    file: int
    offset: int
    data: bytes


def read_log(path: Path) -> list[Op]:
    raw = path.read_bytes()
    ops, pos = [], 0
    while pos + HEADER.size <= len(raw):
        kind, file, offset, length = HEADER.unpack_from(raw, pos)
        if pos + HEADER.size + length > len(raw):
            break  # the writer died inside this record
        data = raw[pos + HEADER.size : pos + HEADER.size + length]
        ops.append(Op(kind.decode(), file, offset, data))
        pos += HEADER.size + length
    return ops


def apply(content: bytearray, op: Op) -> None:
    if op.kind == "W":
        end = op.offset + len(op.data)
        if len(content) < op.offset:
            content.extend(b"\0" * (op.offset - len(content)))
        content[op.offset : end] = op.data
    elif op.kind == "T":
        del content[op.offset :]


def crash_image(
    base: dict[int, bytes], ops: list[Op], crash_at: int, rng: random.Random
) -> dict[int, bytes]:
    """Each file as a power cut at operation ``crash_at`` could leave it."""
    out = {}
    for file in (DB, WAL):
        mine = [i for i in range(crash_at) if ops[i].file == file and ops[i].kind in "WTS"]
        synced = max((i for i in mine if ops[i].kind == "S"), default=-1)
        content = bytearray(base.get(file, b""))
        for i in mine:
            op = ops[i]
            if op.kind == "S":
                continue
            if i < synced:
                apply(content, op)
                continue
            fate = rng.random()
            if fate < 1 / 3:
                continue  # lost
            if op.kind == "T" or fate < 2 / 3:
                apply(content, op)
                continue
            for s in range(0, len(op.data), SECTOR):  # torn: some sectors made it
                if rng.random() < 0.5:
                    apply(content, Op("W", file, op.offset + s, op.data[s : s + SECTOR]))
        if file == DB or content or synced >= 0:
            out[file] = bytes(content)
    return out


@dataclass
class F3Figures:
    synchronous: str
    traces: int = 0
    crash_points: int = 0
    images: int = 0
    corrupt: int = 0
    lost: int = 0
    images_losing: int = 0
    checkpoints_in_traces: int = 0
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_image(path: Path, acks: list[dict[str, Any]], figures: F3Figures, where: str) -> None:
    conn = apsw.Connection(str(path))
    try:
        integrity = conn.execute("PRAGMA integrity_check").fetchall()
    except apsw.Error as e:
        integrity = [(f"{type(e).__name__}: {e}",)]
    finally:
        conn.close()
    if integrity != [("ok",)]:
        figures.corrupt += 1
        figures.problems.append(f"{where}: integrity_check {integrity[:2]}")
        return
    try:
        with SQLiteStorage(path, create=False) as store:
            app = Continuum(store)
            report = app.verify(RUN)
            if not report.ok:
                figures.corrupt += 1
                figures.problems.append(f"{where}: verify {report.violations[:2]}")
                return
            hashes = {e.sequence: e.hash for e in store.read_events(RUN)}
            actions = {a.key: a.status for a in app.actions(RUN)}
    except ContinuumError as e:
        figures.corrupt += 1
        figures.problems.append(f"{where}: refused {e.code}: {e}")
        return
    lost = [
        a
        for a in acks
        if (a["op"] == "append" and hashes.get(a["seq"]) != a["hash"])
        or (a["op"] == "complete" and actions.get(a["key"]) != ActionStatus.COMPLETED)
    ]
    figures.lost += len(lost)
    figures.images_losing += bool(lost)


def record_trace(
    root: Path, *, synchronous: str, ops: int, fault_after: int, checkpoint_pages: int
) -> tuple[bytes, list[Op]]:
    db = root / "trace.db"
    with SQLiteStorage(db) as store:
        store.create_run(Run(run_id=RUN))
    base = db.read_bytes()  # closed cleanly: everything is in the main file
    log = root / "ops.log"
    env = {"CONTINUUM_FAULTS": f"before_append_commit@{fault_after}"}
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            WORKER,
            str(db),
            str(log),
            synchronous,
            str(ops),
            str(checkpoint_pages),
        ],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 86, f"the writer did not die at its fault point:\n{proc.stderr}"
    return base, read_log(log)


def run_f3(
    root: Path,
    *,
    traces: int,
    seeds: int,
    seed: int,
    synchronous: str = "FULL",
    ops: int = 40,
    stride: int = 1,
) -> F3Figures:
    rng = random.Random(seed)
    figures = F3Figures(synchronous=synchronous)
    for t in range(traces):
        trace_dir = root / f"trace{t}"
        trace_dir.mkdir(parents=True)
        checkpoint_pages = 0 if t % 2 == 0 else 16
        base, log = record_trace(
            trace_dir,
            synchronous=synchronous,
            ops=ops,
            fault_after=rng.randint(ops // 2, ops),
            checkpoint_pages=checkpoint_pages,
        )
        figures.traces += 1
        figures.checkpoints_in_traces += sum(1 for o in log if o.kind == "S" and o.file == DB)
        image_dir = trace_dir / "image"
        image_dir.mkdir()
        points = range(0, len(log) + 1, stride)
        for crash_at in points:
            acks = [json.loads(o.data) for o in log[:crash_at] if o.kind == "A"]
            figures.crash_points += 1
            for s in range(seeds):
                files = crash_image({DB: base}, log, crash_at, rng)
                for p in image_dir.iterdir():
                    p.unlink()
                (image_dir / "c.db").write_bytes(files[DB])
                if WAL in files:
                    (image_dir / "c.db-wal").write_bytes(files[WAL])
                check_image(image_dir / "c.db", acks, figures, f"trace {t} op {crash_at} seed {s}")
                figures.images += 1
    return figures


def test_crash_images_at_every_operation_are_committed_or_absent_never_corrupt(
    tmp_path: Path,
) -> None:
    figures = run_f3(tmp_path, traces=4, seeds=2, seed=5)

    print(
        f"F3: {figures.images:,} crash images ({figures.crash_points} crash points x 2 seeds, "
        f"{figures.traces} traces, {figures.checkpoints_in_traces} database syncs): "
        f"{figures.corrupt} corrupt, {figures.lost} lost"
    )
    assert figures.problems == []
    assert (figures.corrupt, figures.lost) == (0, 0)
    assert figures.checkpoints_in_traces > 0  # the sweep crossed checkpoints too


def test_the_sweep_finds_lost_acknowledgements_with_synchronous_normal(tmp_path: Path) -> None:
    figures = run_f3(tmp_path, traces=1, seeds=1, seed=6, synchronous="NORMAL", stride=4)

    print(
        f"F3-neg: NORMAL lost acknowledged events in {figures.images_losing}/{figures.images} "
        f"crash images ({figures.corrupt} corrupt)"
    )
    assert figures.images_losing > 0
    assert figures.corrupt == 0
